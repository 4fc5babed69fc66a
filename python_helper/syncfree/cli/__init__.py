"""``syncfree check|run``: the static analyzer and the script and notebook runner for the command line and CI.

This module parses the arguments and dispatches; each command lives in its own module (``check``,
``run_script``, ``run_notebook``) and every output format in ``syncfree.output``.

Exit codes: 0 nothing found (or within the budgets), 1 findings (check) or syncs (run) over a budget, 2 usage errors,
unreadable files or a notebook that failed to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from syncfree import __version__
from syncfree.catalog import select_rules
from syncfree.cli.check import add_check_options, check, check_options
from syncfree.cli.launch import add_torchrun_options, launch, torchrun_arguments
from syncfree.cli.merge import merge
from syncfree.cli.run_notebook import run
from syncfree.cli.run_script import run_python
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, error, silence_stdout
from syncfree.config import ConfigError, find_config
from syncfree.output import FORMATS

__all__ = ["check", "main", "run", "run_python"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``syncfree`` console script (also ``python -m syncfree``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "run" and not (args.target.endswith(".py") or args.target == "-") and args.args:
        # A notebook takes no arguments: what follows it are syncfree's own options.
        args = parser.parse_args(["run", *args.args, args.target], namespace=args)
    state: dict[str, int] = {}
    try:
        config = find_config()
        if args.command == "check":
            status = check(
                args.paths,
                output_format=args.format,
                select=args.select if args.select is not None else config.select,
                ignore=args.ignore if args.ignore is not None else config.ignore,
                budget=args.budget if args.budget is not None else config.budget,
                **check_options(args, config),
                state=state,
            )
        elif args.command == "merge":
            status = merge(args.directory, output_format=args.format,
                           budget=args.budget if args.budget is not None else config.budget, state=state)
        elif (args.target.endswith(".py") or args.target == "-") and _distributed(args):
            status = _run_distributed(args, config, state)
        elif args.target.endswith(".py") or args.target == "-":
            status = run_python(args.target, args.args, mode=args.mode or config.mode, output_format=args.format,
                                budget=args.budget if args.budget is not None else config.budget, state=state)
        else:
            if torchrun_arguments(args) or args.rank_report_dir:
                raise UsageProblem("--nproc-per-node and the other torchrun options run a .py script")
            status = run(
                args.target,
                timeout=args.timeout,
                output=args.output,
                watch_all=not args.marked_only,
                allow_errors=args.allow_errors,
                kernel_name=args.kernel,
                output_format=args.format,
                budget=args.budget if args.budget is not None else config.budget,
                state=state,
            )
    except UsageProblem as problem:
        error(problem)
        status = EXIT_ERROR
    except ConfigError as problem:
        error(problem)
        status = EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`syncfree check . | head -1`): stop quietly, as a Unix filter does. Python would
        # report the failed flush of stdout at exit, so stdout points at /dev/null from here on.
        silence_stdout()
        status = state.get("status", EXIT_FOUND)
    except KeyboardInterrupt:
        print("syncfree: interrupted", file=sys.stderr)
        return 130
    if args.exit_zero and (status == EXIT_FOUND or (status == EXIT_ERROR and state.get("syntax_only"))):
        return EXIT_CLEAN
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncfree",
        description="Find host-device synchronizations in PyTorch code and notebooks.",
        epilog="Exit codes: 0 nothing found (or within the budget), 1 findings or syncs (over the budget), 2 errors. "
        "Settings: [tool.syncfree] in pyproject.toml, from the working directory upward.",
    )
    parser.add_argument("--version", action="version", version=f"syncfree {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check_parser = commands.add_parser(
        "check",
        help="analyse .py files and notebooks without running them",
        description="Analyse .py files and every code cell of .ipynb notebooks without running them ('-' reads "
        "Python from stdin). Lines with `# syncfree: allow`, `allow[item]` or `allow[SF101]` are left out.",
    )
    check_parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched for .py and .ipynb), or - for stdin")
    _common(check_parser)
    check_parser.add_argument("--select", type=_codes, metavar="CODES", help="comma-separated codes or prefixes (SF1,SF601) or ALL; default: the rules on by default")
    check_parser.add_argument("--ignore", type=_codes, metavar="CODES", help="comma-separated codes or prefixes to leave out")
    add_check_options(check_parser)
    run_parser = commands.add_parser(
        "run",
        help="run a script or a notebook under syncfree and report its syncs",
        description="Run a Python script (syncfree run train.py ARGS...) or execute a notebook in a fresh kernel with "
        "every cell watched, and report the syncs. Without CUDA the syncs are predicted on CPU stand-ins.",
    )
    run_parser.add_argument("target", metavar="SCRIPT.py|NOTEBOOK.ipynb")
    run_parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's arguments")
    _common(run_parser)
    run_parser.add_argument("--mode", choices=("warn", "error", "predict"), help="scripts: warn (default), error (the first sync raises), predict (CPU stand-ins)")
    run_parser.add_argument("--timeout", type=float, default=600, metavar="S", help="notebooks: seconds each cell may run (default 600)")
    run_parser.add_argument("--output", "-o", metavar="OUT.ipynb", help="notebooks: write the executed notebook, reports included")
    run_parser.add_argument("--marked-only", action="store_true", help="notebooks: report only the cells that start with %%%%syncfree")
    run_parser.add_argument("--allow-errors", action="store_true", help="notebooks: keep running after a cell raises")
    run_parser.add_argument("--kernel", default="python3", metavar="NAME", help="notebooks: kernel name (default python3)")
    add_torchrun_options(run_parser)
    merge_parser = commands.add_parser(
        "merge",
        help="merge the rank reports of a distributed job into one report",
        description="Merge the rank reports that the ranks of `torchrun ... -m syncfree run train.py` wrote "
        "(./syncfree-ranks unless --rank-report-dir named another folder) into one ranked report. --budget is "
        "per rank.",
    )
    merge_parser.add_argument("directory", metavar="DIR", help="the folder of rank-NNNNN.json reports")
    _common(merge_parser)
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="text", help="text (default), json (one entry per diagnostic), sarif (2.1.0) or github (workflow annotations)")
    parser.add_argument("--budget", type=_budget, metavar="N", help="exit 1 only when more than N syncs are found "
                        "(notebooks: in the cells without a budget of their own in their metadata, \"syncfree\": "
                        "{\"budget\": N})")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when syncs are found or a file does not parse")


def _distributed(args: argparse.Namespace) -> bool:
    """Whether ``syncfree run script.py`` starts a job (torchrun options) or is one of its ranks."""
    from syncfree.distributed.ranks import RankEnvironmentError, RankInfo

    if torchrun_arguments(args):
        return True
    try:
        return RankInfo.from_environ() is not None
    except RankEnvironmentError as problem:
        raise UsageProblem(str(problem)) from None


def _run_distributed(args: argparse.Namespace, config, state: dict[str, int]) -> int:
    from syncfree.distributed.ranks import RankInfo

    if args.target == "-":
        raise UsageProblem("a distributed run reads its script from a file, not stdin")
    budget = args.budget if args.budget is not None else config.budget
    mode = args.mode or config.mode
    torchrun = torchrun_arguments(args)
    if torchrun:
        if args.torchrun_nproc_per_node is None:
            raise UsageProblem("the torchrun options need --nproc-per-node N")
        return launch(args.target, args.args, torchrun=torchrun, mode=mode, output_format=args.format,
                      budget=budget, rank_report_dir=args.rank_report_dir, state=state)
    from syncfree.cli.run_rank import run_rank

    return run_rank(args.target, args.args, rank=RankInfo.from_environ(), directory=args.rank_report_dir,
                    mode=mode, output_format=args.format, budget=budget, state=state)


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget is a whole number >= 0, not {text!r}")
    return value


def _codes(text: str) -> list[str]:
    codes = [code.strip() for code in text.split(",") if code.strip()]
    try:
        select_rules(codes)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return codes




if __name__ == "__main__":
    sys.exit(main())
