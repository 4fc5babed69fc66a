"""``syncfree run --nproc-per-node N train.py ARGS``: the job through torchrun, one merged report.

The launcher is torchrun itself: ``python -m torch.distributed.run [torchrun options] -m
syncfree run --rank-report-dir DIR train.py ARGS``, so rendezvous, restarts, signals and
multi-node runs behave as torchrun's do. Each rank writes its report into DIR (a temporary
folder unless ``--rank-report-dir`` names one); when torchrun has exited the reports are
merged and printed once. Exit status: torchrun's when it failed; otherwise 1 when a rank
made more counted syncs than the budget (default 0, as for ``syncfree run``), 2 when a rank
left no report, else 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from syncfree._version import __version__
from syncfree.cli.job import JobOptions
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, not_a_file

if TYPE_CHECKING:
    import subprocess

# (subprocess, tempfile, shutil and uuid, which imports platform, are imported by the launch itself: every command
# builds its options with this module's, and `syncfree check` from the cache runs in a few hundredths of a second)

__all__ = ["TORCHRUN_OPTIONS", "add_torchrun_options", "launch", "torchrun_arguments"]

#: torchrun's options that ``syncfree run`` passes through: (option, takes a value).
TORCHRUN_OPTIONS = (
    ("--nproc-per-node", True), ("--nnodes", True), ("--node-rank", True),
    ("--master-addr", True), ("--master-port", True), ("--rdzv-backend", True),
    ("--rdzv-endpoint", True), ("--rdzv-id", True), ("--rdzv-conf", True),
    ("--max-restarts", True), ("--standalone", False),
)


def add_torchrun_options(parser: argparse.ArgumentParser) -> None:
    """torchrun's launch options on ``syncfree run`` (dashes or underscores, as torchrun takes them)."""
    group = parser.add_argument_group(
        "distributed (torchrun)",
        "run the script as a job of several ranks through torch.distributed.run; each rank runs under "
        "syncfree and one merged report is printed (see also: torchrun ... -m syncfree run, syncfree merge)")
    for option, takes_value in TORCHRUN_OPTIONS:
        names = [option]
        if "-" in option[2:]:
            names.append("--" + option[2:].replace("-", "_"))
        dest = "torchrun_" + option[2:].replace("-", "_")
        if takes_value:
            group.add_argument(*names, dest=dest, metavar="N" if option == "--nproc-per-node" else option[2:].split("-")[-1].upper(),
                               type=_nproc if option == "--nproc-per-node" else str,
                               help="as torchrun's" if option != "--nproc-per-node" else
                               "ranks on this node (a number, or auto/cpu/gpu as torchrun takes it)")
        else:
            group.add_argument(*names, dest=dest, action="store_true", help="as torchrun's")
    group.add_argument("--rank-report-dir", metavar="DIR",
                       help="the folder each rank writes its report into (default: a temporary folder "
                       "for --nproc-per-node; ./syncfree-ranks under a plain torchrun)")


def _nproc(text: str) -> str:
    if text in ("auto", "cpu", "gpu", "xpu"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--nproc-per-node takes a number >= 1 or auto/cpu/gpu, not {text!r}")
    return text


def torchrun_arguments(args: argparse.Namespace) -> list[str]:
    """The torchrun options given to ``syncfree run``, as torchrun's command line."""
    found = []
    for option, takes_value in TORCHRUN_OPTIONS:
        value = getattr(args, "torchrun_" + option[2:].replace("-", "_"), None)
        if takes_value and value is not None:
            found += [option, str(value)]
        elif not takes_value and value:
            found.append(option)
    return found


def launch(
    job: JobOptions,
    *,
    torchrun: Sequence[str],
    rank_report_dir: str | None = None,
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
) -> int:
    """Start torchrun with syncfree as each rank's entry point, wait, merge, report (to ``job.output``, a
    `syncfree.output.ReportOutput`, when given: ``--output-file``)."""
    from syncfree.cli.run_rank import MERGE_VARIABLE
    from syncfree.distributed.emit import write_merged
    from syncfree.distributed.merge import MergedReport
    from syncfree.distributed.rankfiles import read_rank_reports
    from syncfree.distributed.ranks import RUN_ID_VARIABLE

    out = out or sys.stdout
    state = state if state is not None else {}
    output, output_format, budget = job.output, job.output_format, job.budget
    if not job.module and not Path(job.target).is_file():
        raise not_a_file(job.target)
    try:
        import torch.distributed.run  # noqa: F401  (the launcher; fails early without torch)
    except ImportError as problem:
        raise UsageProblem(f"--nproc-per-node needs torch.distributed.run, which cannot be imported: {problem}") from None
    import shutil
    import subprocess
    import tempfile
    import uuid

    temporary = rank_report_dir is None
    folder = tempfile.mkdtemp(prefix="syncfree-ranks-") if temporary else os.path.abspath(rank_report_dir)
    launch_id = uuid.uuid4().hex
    env = dict(os.environ, **{RUN_ID_VARIABLE: launch_id, MERGE_VARIABLE: "launcher"})
    command = [sys.executable, "-m", "torch.distributed.run", *torchrun, "-m", "syncfree", "run",
               "--rank-report-dir", folder, *job.rank_arguments()]
    # A machine format's report is the only thing on stdout: the program's own output (every
    # rank's) goes to stderr, as for `syncfree run script.py` (not with --output-file).
    moves = output.moves_program_stdout if output is not None else output_format != "text"
    # torchrun in a session of its own: a signal reaches it once, from here (`_Forwarded`), not also from the
    # terminal (a second SIGINT in the middle of its shutdown cut its grace short and left ranks behind).
    process = subprocess.Popen(command, env=env, stdout=sys.stderr if moves else None, start_new_session=True)
    forwarded = _Forwarded(process)
    try:
        status = forwarded.wait()
    finally:
        forwarded.close()
        _kill_left_ranks(launch_id)  # ranks that outlived torchrun (killed itself): none is left behind
    signum = forwarded.received[0] if forwarded.received else None
    try:
        folder_read = read_rank_reports(folder) if os.path.isdir(folder) else None
    except OSError as problem:
        raise UsageProblem(f"cannot read the rank reports in {folder}: {problem.strerror or problem}") from None
    if output is not None:
        out = output.stream()
    reports = [r for r in (folder_read.reports if folder_read else []) if r.rank.launch_id == launch_id]
    nnodes = _nnodes(torchrun)
    world = max((r.rank.world_size for r in reports), default=0)
    nproc = torchrun[list(torchrun).index("--nproc-per-node") + 1] if "--nproc-per-node" in torchrun else ""
    if nnodes == 1 and nproc.isdigit():
        world = max(world, int(nproc))  # a rank that wrote nothing is named too (every rank, when none did)
    merged = MergedReport(reports, world_size=world,
                          problems=folder_read.problems if folder_read else (),
                          directory=None if temporary else folder, selected=job.selected)
    if reports:
        write_merged(merged, output_format, out, budget=budget, tool_version=__version__)
    elif output_format == "text":
        print("syncfree: no rank wrote a report", file=out)
    out.flush()
    if temporary:
        shutil.rmtree(folder, ignore_errors=True)
    if signum is not None:
        # The signal went to torchrun, which stopped the ranks with its own grace; what they wrote is reported.
        missing = merged.missing_ranks
        print(f"syncfree: {'interrupted' if signum == signal.SIGINT else signal.Signals(signum).name}: torchrun "
              f"stopped the ranks; the report merges those that wrote theirs"
              + (f" (rank{'s' if len(missing) != 1 else ''} {', '.join(map(str, missing))} did not)" if missing
                 else ""), file=sys.stderr)
        state["status"] = 128 + signum
        if signum == signal.SIGINT:
            state["die_by"] = signal.SIGINT  # cli.main: as Python after Ctrl-C
        else:
            sys.stderr.flush()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)  # dies of it, as without a handler
        return 128 + signum
    if status != 0:
        print(f"syncfree: error: torchrun exited with status {status}", file=sys.stderr)
        state["status"] = status
        return status
    if merged.missing_ranks and nnodes != 1:
        print(f"syncfree: the ranks of the other nodes wrote their reports there: with --rank-report-dir on a "
              f"shared folder, syncfree merge DIR merges all {merged.world_size}", file=sys.stderr)
    elif merged.missing_ranks:
        print(f"syncfree: error: {len(merged.missing_ranks)} rank(s) left no report", file=sys.stderr)
        state["status"] = EXIT_ERROR
        return EXIT_ERROR
    over = merged.most_counted > (budget if budget is not None else 0)
    if budget is not None and over:
        print(f"syncfree: rank {max(merged.totals, key=lambda t: t.counted).rank} made {merged.most_counted} "
              f"syncs, over the budget of {budget} per rank", file=sys.stderr)
    from syncfree.cli.merge import judged

    state["status"] = EXIT_FOUND if over or not judged(merged, over) else EXIT_CLEAN
    return state["status"]


#: How long torchrun has to stop its ranks after a forwarded signal before it is killed: its own grace
#: (torch/distributed/elastic/multiprocessing/api.py, PContext.close: 30 s, then SIGKILL) and a margin.
TORCHRUN_GRACE_S = 60.0


class _Forwarded:
    """SIGINT, and the signals whose default ends a program (SIGTERM, SIGHUP, SIGUSR1...: `ending_signals`) that the
    launcher has at their default, forwarded to torchrun while it runs (the default would kill the launcher at once
    and leave torchrun and the ranks running, with no report): those torchrun stops its ranks on (SIGINT, SIGTERM,
    SIGHUP, SIGQUIT: torch.distributed.elastic's TORCHELASTIC_SIGNALS_TO_HANDLE) as they are, the others as SIGTERM.
    The ranks write their reports; if torchrun is still running `TORCHRUN_GRACE_S` after the first signal, it is
    killed."""

    def __init__(self, process: subprocess.Popen) -> None:
        from syncfree.capture.interrupts import ending_signals

        self.process = process
        self.received: list[int] = []
        self.previous: dict[int, object] = {}
        try:
            for signum in (signal.SIGINT, *ending_signals()):
                if signum == signal.SIGINT or signal.getsignal(signum) == signal.SIG_DFL:
                    self.previous[signum] = signal.signal(signum, self._forward)
        except ValueError:  # not the main thread: signals are not ours to take
            pass

    def _forward(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        handled = {signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None), getattr(signal, "SIGQUIT", None)}
        try:
            self.process.send_signal(signum if signum in handled else signal.SIGTERM)
        except OSError:  # ended meanwhile
            pass

    def wait(self) -> int:
        import subprocess

        while True:
            if not self.received:
                try:
                    return self.process.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    continue
            import time

            deadline = time.monotonic() + TORCHRUN_GRACE_S
            try:
                return self.process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()

    def close(self) -> None:
        for signum, handler in self.previous.items():
            if signal.getsignal(signum) == self._forward:
                signal.signal(signum, handler)  # type: ignore[arg-type]
        self.previous.clear()


def _kill_left_ranks(launch_id: str) -> None:
    """Kill the processes of this launch still running after torchrun ended: each rank is a session of its own
    (torchrun starts them so), so a torchrun that was killed leaves them orphaned. They are found by the launch's id
    in their environment (Linux's /proc; elsewhere nothing is done)."""
    from syncfree.distributed.ranks import RUN_ID_VARIABLE

    marker = f"{RUN_ID_VARIABLE}={launch_id}".encode()
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                found = marker in handle.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _nnodes(torchrun: Sequence[str]) -> int | None:
    """How many nodes the job spans (None: a range, elastic)."""
    if "--nnodes" not in torchrun:
        return 1
    value = torchrun[list(torchrun).index("--nnodes") + 1]
    return int(value) if value.isdigit() else None
