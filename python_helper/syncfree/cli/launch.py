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
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from syncfree import __version__
from syncfree.cli.job import JobOptions
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, not_a_file

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
    temporary = rank_report_dir is None
    folder = tempfile.mkdtemp(prefix="syncfree-ranks-") if temporary else os.path.abspath(rank_report_dir)
    launch_id = uuid.uuid4().hex
    env = dict(os.environ, **{RUN_ID_VARIABLE: launch_id, MERGE_VARIABLE: "launcher"})
    command = [sys.executable, "-m", "torch.distributed.run", *torchrun, "-m", "syncfree", "run",
               "--rank-report-dir", folder, *job.rank_arguments()]
    interrupted = False
    # A machine format's report is the only thing on stdout: the program's own output (every
    # rank's) goes to stderr, as for `syncfree run script.py` (not with --output-file).
    moves = output.moves_program_stdout if output is not None else output_format != "text"
    process = subprocess.Popen(command, env=env, stdout=sys.stderr if moves else None)
    try:
        status = process.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached torchrun too (one process group): it stops the ranks; wait for it,
        # then report what the ranks wrote.
        interrupted = True
        try:
            status = process.wait(timeout=60)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            process.send_signal(signal.SIGKILL)
            status = process.wait()
    try:
        folder_read = read_rank_reports(folder) if os.path.isdir(folder) else None
    except OSError as problem:
        raise UsageProblem(f"cannot read the rank reports in {folder}: {problem.strerror or problem}") from None
    if output is not None:
        out = output.stream()
    reports = [r for r in (folder_read.reports if folder_read else []) if r.rank.launch_id == launch_id]
    nnodes = _nnodes(torchrun)
    world = max((r.rank.world_size for r in reports), default=0)
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
    if interrupted:
        print("syncfree: interrupted", file=sys.stderr)
        state["status"] = 130
        return 130
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
    state["status"] = EXIT_FOUND if over else EXIT_CLEAN
    return state["status"]


def _nnodes(torchrun: Sequence[str]) -> int | None:
    """How many nodes the job spans (None: a range, elastic)."""
    if "--nnodes" not in torchrun:
        return 1
    value = torchrun[list(torchrun).index("--nnodes") + 1]
    return int(value) if value.isdigit() else None
