"""The distributed commands of the line magic, for a notebook user:

    %syncfree merge DIR [--select CODES] [--ignore CODES]
    %syncfree run --nproc-per-node N [torchrun options] [--mode M] [--rank-report-dir DIR] train.py ARGS

``merge`` shows the rank reports a job left in DIR as one merged report (a table in
JupyterLab, see `syncfree.distributed.display`). ``run`` starts the job as ``syncfree run
--nproc-per-node N`` does in a terminal (torchrun, each rank under syncfree), its output
streamed into the cell as it comes, then shows the merged report. The magic (magic.py)
turns `UsageProblem` into IPython's one-line usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import TextIO

from syncfree.cli.usage import UsageProblem

from .display import display_merged
from .merge import MergedReport

__all__ = ["merge_command", "run_command"]


def _parse(parser: argparse.ArgumentParser, tokens: Sequence[str]) -> argparse.Namespace:
    """argparse's result, or its complaint as a `UsageProblem` (it would exit the kernel's
    magic with SystemExit and print the usage text)."""
    complaint = io.StringIO()
    try:
        with contextlib.redirect_stderr(complaint):
            return parser.parse_args(list(tokens))
    except SystemExit:
        lines = [line for line in complaint.getvalue().splitlines() if line.strip()]
        raise UsageProblem(lines[-1].split(": error: ", 1)[-1] if lines else "bad arguments") from None


def _selected(args: argparse.Namespace) -> set[str] | None:
    from syncfree.cli.run_script import _selected_rules
    from syncfree.config import ConfigError, find_config

    try:
        config = find_config()
    except ConfigError as problem:
        raise UsageProblem(str(problem)) from None
    select = args.select if args.select is not None else config.select
    ignore = args.ignore if args.ignore is not None else config.ignore
    return _selected_rules(select, ignore)


def _merged(directory: str, selected: set[str] | None) -> MergedReport:
    if os.path.isfile(directory):
        if re.fullmatch(r"rank-\d+\.json", os.path.basename(directory)):
            hint = f"merge takes their folder: %syncfree merge {os.path.dirname(directory) or '.'}"
        else:
            hint = ("merge takes the folder of rank reports that the ranks wrote (syncfree run --rank-report-dir "
                    "DIR keeps it); a --format json report has lost the per-rank totals and notes")
        raise UsageProblem(f"{directory} is a file: {hint}")
    from syncfree.cli.merge import read_folder

    return MergedReport.from_folder(read_folder(directory), selected=selected)


def merge_command(tokens: Sequence[str]) -> MergedReport:
    """``%syncfree merge DIR``: display the merged report of DIR and return it."""
    from syncfree.cli import _codes

    parser = argparse.ArgumentParser(prog="%syncfree merge", add_help=False)
    parser.add_argument("directory", metavar="DIR")
    parser.add_argument("--select", type=_codes)
    parser.add_argument("--ignore", type=_codes)
    args = _parse(parser, tokens)
    merged = _merged(args.directory, _selected(args))
    display_merged(merged)
    return merged


#: ``syncfree run`` options that make no sense when the notebook shows the report.
_NOT_HERE = ("--format", "--output-file", "-o", "--exit-zero", "--budget")


def run_command(tokens: Sequence[str], out: TextIO | None = None) -> MergedReport | None:
    """``%syncfree run --nproc-per-node N train.py ARGS``: run the job, stream its output into
    the cell, display the merged report and return it (None when no rank wrote one).
    KeyboardInterrupt (the kernel's interrupt) stops the job as Ctrl-C does in a terminal;
    what the ranks wrote is shown, then the interrupt goes on."""
    from syncfree.cli import _parser, _program, _split_run
    from syncfree.cli.launch import torchrun_arguments

    parser, run_parser = _parser()
    options, program = _split_run(list(tokens), run_parser)
    given = [token.split("=", 1)[0] for token in options]
    for option in _NOT_HERE:
        if option in given:
            raise UsageProblem(f"{option}: the notebook shows the merged report; for a file or a verdict, "
                               f"run the job with !syncfree run ... {option}")
    args = _parse(parser, ["run", *options])
    if not program:
        raise UsageProblem("the script to run is missing: %syncfree run --nproc-per-node N train.py ARGS")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage text: the one line below says it
            _program(args, program, run_parser)
    except SystemExit:
        raise UsageProblem("-m takes a module name") from None
    if args.notebook is not None or args.target == "-":
        raise UsageProblem("a distributed job runs a .py script or -m module")
    if args.torchrun_nproc_per_node is None:
        raise UsageProblem("this starts a distributed job: give --nproc-per-node N (one process: "
                           "%%syncfree on a cell, or !syncfree run train.py)")
    if not args.module and not os.path.isfile(args.target):
        raise UsageProblem(f"cannot read {args.target}: no such file")
    _selected(args)  # a bad [tool.syncfree] is said before the job starts
    keep = args.rank_report_dir is not None
    folder = os.path.abspath(args.rank_report_dir) if keep else tempfile.mkdtemp(prefix="syncfree-ranks-")
    command = [sys.executable, "-m", "syncfree", "run", *torchrun_arguments(args),
               "--rank-report-dir", folder, *(["--mode", args.mode] if args.mode else []),
               *(["--engine", args.engine] if args.engine else []),
               # The launcher's own merged text would repeat the table; the report is read from the folder.
               "--format", "json", "--output-file", os.devnull, *program]
    out = out or sys.stdout
    interrupted = False
    try:
        status = _stream(command, out)
    except KeyboardInterrupt:
        interrupted = True
        status = None
    try:
        merged = MergedReport.from_directory(folder, selected=_selected(args)) if os.path.isdir(folder) else None
    except OSError:
        merged = None
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    if merged is not None and merged.reports:
        # As the user named it (no absolute path saved with the output); None once removed.
        merged.directory = args.rank_report_dir if keep else None
        display_merged(merged)
    else:
        print("syncfree: no rank wrote a report", file=out)
        merged = None
    if interrupted:
        raise KeyboardInterrupt
    if status not in (0, 1):  # 1: syncs found, which the report shows
        print(f"syncfree: the job exited with status {status}", file=out)
    return merged


def _stream(command: list[str], out: TextIO) -> int:
    """Run ``command``, copying its output (stderr with stdout, as ``!command`` shows them)
    into ``out`` line by line as it comes; its exit status.

    The job stays in the kernel's process group, as a command typed in a terminal is in the
    terminal's: JupyterLab's interrupt (SIGINT to the kernel's process group, jupyter_client
    provisioning/local_provisioner.py) reaches the launcher, torchrun and the ranks at once,
    as Ctrl-C does, and torchrun stops the ranks, which still write their reports; a kernel
    that is shut down or restarted takes the job with it. After an interrupt the cell waits
    for the job to end; a second interrupt is sent on to the launcher (which then stops
    torchrun at once), and a job still running a minute later is killed."""
    # Unbuffered: a rank's prints reach the cell as they happen, not when its pipe buffer fills.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=env, text=True, errors="replace", bufsize=1)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            out.flush()
        return process.wait()
    except KeyboardInterrupt:
        try:
            process.wait()
        except KeyboardInterrupt:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        raise
    finally:
        if process.stdout is not None:
            process.stdout.close()
