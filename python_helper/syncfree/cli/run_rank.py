"""``syncfree run train.py`` as one rank of a distributed job (torchrun's environment names it).

Each rank runs the script under the engine as ``syncfree run`` does, prints nothing of its
own report and writes it to the job's folder (``--rank-report-dir``, else
``$SYNCFREE_RANK_REPORT_DIR``, else ``./syncfree-ranks``). Under a plain ``torchrun ... -m
syncfree run``, no process sees every rank end, so the last rank to write its file merges
the folder and prints the merged report (the job's one report; `rankfiles.claim_merge`
picks one rank should two finish together). Under ``syncfree run --nproc-per-node`` the
launcher merges instead. A rank exits with its script's status: torchrun's verdict stays
about the training, and the merged report says whether the budget was kept (``syncfree
merge DIR --budget N`` exits 1 over it; so does ``syncfree run --nproc-per-node``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from syncfree._version import __version__
from syncfree.cli.job import JobOptions
from syncfree.cli.usage import EXIT_ERROR, UsageProblem, not_a_file
from syncfree.distributed.ranks import RankInfo

__all__ = ["MERGE_VARIABLE", "run_rank"]

#: ``launcher``: the process that started torchrun merges; the ranks only write.
MERGE_VARIABLE = "SYNCFREE_RANK_MERGE"


def run_rank(
    job: JobOptions,
    *,
    rank: RankInfo,
    directory: str | None = None,
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
) -> int:
    """Run ``job.target`` (a module with ``job.module``) as ``rank``; write its report; merge the job's if it is the
    last rank.

    ``job.output`` (a `syncfree.output.ReportOutput`): where the merged report goes (``--output-file``) and whether
    the script's stdout moves to stderr meanwhile (a machine format on stdout); only the merging rank writes to it."""
    from syncfree.distributed.emit import write_merged
    from syncfree.distributed.merge import MergedReport
    from syncfree.distributed.rankfiles import (
        DEFAULT_DIRECTORY,
        DIRECTORY_VARIABLE,
        RankReport,
        claim_merge,
        complete_run,
        write_rank_report,
        write_rank_start,
    )
    from syncfree.processes import lost_children
    from syncfree.script_run import ModuleNotRunnable, run_script

    target, argv, module, output = job.target, job.argv, job.module, job.output
    out = out or sys.stdout
    state = state if state is not None else {}
    # Absolute before the script runs: it may change the working directory.
    folder = os.path.abspath(directory or os.environ.get(DIRECTORY_VARIABLE) or DEFAULT_DIRECTORY)
    first = rank.rank == 0  # what every rank would say alike is said once, by rank 0
    if not module and not Path(target).is_file():
        return _problem(str(not_a_file(target)), first, state)
    cwd = os.getcwd()
    started = time.time()
    script = target if module else os.path.abspath(target)

    def rank_report(result: Any) -> RankReport:
        notes = list(getattr(result, "notes", []))
        report = result.report.to_dict()
        # What the rank's count lacks: its children's (notes) and its own process's (the report's, e.g. a DDP with
        # find_unused_parameters in predict mode): a merged verdict is not given on it.
        lost = lost_children(notes) + [str(n) for n in getattr(result.report, "lost_children", None) or []]
        return RankReport(rank, report, script, list(argv), cwd, result.exit_code, started,
                          time.time(), [child.to_dict() for child in getattr(result, "children", [])],
                          notes, lost_children=lost)

    def on_exit(result: Any) -> None:  # os._exit(n) in the program: its report, then the exit it asked for
        try:
            write_rank_report(folder, rank_report(result))
        except OSError:
            pass

    if rank.restart_count >= 0:
        try:  # an attempt killed before its report is named by the next attempt on this rank (rankfiles)
            write_rank_start(folder, rank)
        except OSError:
            pass
    stop = _StopOnTerm(None if module else script)
    moved = output.program_output() if output is not None else contextlib.nullcontext()
    try:
        with moved:
            result = run_script(target, list(argv), mode=job.mode, module=module, on_exit=on_exit, engine=job.engine)
    except SyntaxError as error:
        stop.close()
        return _problem(f"{target}:{error.lineno or 1}: SyntaxError: {error.msg} (nothing ran)", first, state)
    except OSError as error:
        stop.close()
        return _problem(f"cannot read {target}: {error.strerror or error}", first, state)
    except ModuleNotRunnable as error:
        stop.close()
        return _problem(str(error), first, state)
    except BaseException:
        stop.close()
        raise
    try:
        report = rank_report(result)
        write_rank_report(folder, report)
    except OSError as error:
        if first:
            print(f"syncfree: error: cannot write the rank reports to {folder}: {error.strerror or error}",
                  file=sys.stderr)
        state["status"] = EXIT_ERROR
        return result.exit_code or EXIT_ERROR
    finally:
        stop.close()
    # A SIGTERM held since the script ended: the rank ends as terminated, its report written (and merged below
    # when it is the last), as a SIGTERM during the script ends it through SystemExit(143)
    status = 128 + stop.held if stop.held is not None else result.exit_code
    state["status"] = status
    if os.environ.get(MERGE_VARIABLE) == "launcher":
        return status
    run = complete_run(folder, report)
    if run is None or not claim_merge(folder, run):
        if first:  # one line for the job, should no other rank run under syncfree
            print(f"syncfree: rank 0 wrote its report to {_shown(folder)}; the last rank to finish prints the "
                  f"merged report (syncfree merge {_shown(folder)} does too)", file=sys.stderr)
        return status
    merged = MergedReport(run, directory=_shown(folder), selected=job.selected)
    if output is not None:
        out = output.stream()
    try:
        write_merged(merged, job.output_format, out, budget=job.budget, tool_version=__version__)
        out.flush()
    except BrokenPipeError:
        pass
    print(f"syncfree: the rank reports are in {_shown(folder)} (syncfree merge {_shown(folder)} "
          "prints this again)", file=sys.stderr)
    return status


class _StopOnTerm:
    """While the script runs, SIGTERM ends it as ``SystemExit(143)`` instead of killing the
    process outright, so the rank still writes its report.

    torchrun stops the other ranks with SIGTERM when one fails (then SIGKILL after a grace
    period, torch/distributed/elastic/multiprocessing/api.py): without this their syncs
    would be lost with them. Only Python's default disposition is replaced, and the
    script may install its own handler as it would without syncfree."""

    def __init__(self, script: str | None = None) -> None:
        self.installed = False
        self.script = script  # the script's path: a SIGTERM outside its frames comes once it has ended
        self.held: int | None = None
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, self._stop)
                self.installed = True
        except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGTERM
            pass

    def _stop(self, signum: int, frame: Any) -> None:
        if self.script is not None and not _in_file(frame, self.script):
            # torchrun's SIGTERM as the script had ended (another rank failed then): raised inside syncfree's
            # wrap-up it lost the rank's report (3 runs in 4, a docs promise broken); it ends the rank once the report
            # is written (`close`)
            self.held = signum
            return
        raise SystemExit(128 + signum)

    def close(self) -> None:
        if self.installed and signal.getsignal(signal.SIGTERM) == self._stop:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _in_file(frame: Any, path: str) -> bool:
    """Whether ``frame`` or one below it runs code of ``path`` (the script, or what it called)."""
    real = os.path.realpath(path)
    while frame is not None:
        name = frame.f_code.co_filename
        if name == path or os.path.realpath(name) == real:
            return True
        frame = frame.f_back
    return False


def _problem(message: str, first: bool, state: dict[str, int]) -> int:
    # Every rank meets the same problem: one line, from rank 0.
    if first:
        raise UsageProblem(message)
    state["status"] = EXIT_ERROR
    return EXIT_ERROR


def _shown(folder: str) -> str:
    try:
        relative = os.path.relpath(folder)
    except ValueError:
        return folder
    return folder if relative.startswith("..") else relative
