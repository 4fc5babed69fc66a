"""``syncfree check|run``: the static analyzer and the script and notebook runner for the command line and CI.

This module parses the arguments and dispatches; each command lives in its own module (``check``,
``run_script``, ``run_notebook``) and every output format in ``syncfree.output``.

Exit codes: 0 nothing found (or within the budgets), 1 findings (check) or syncs (run) over a budget, 2 usage errors,
unreadable files or a notebook that failed to run.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Callable, Sequence

from syncfree._version import __version__
from syncfree.cli.check import _patterns, add_check_options, check, check_options
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, error, silence_stdout
from syncfree.config import ConfigError, find_config
from syncfree.output import FORMATS, OutputFileError, ReportOutput

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    import argparse
    from typing import Any

__all__ = ["check", "main", "run", "run_python"]

#: The commands other than check, imported when first used: `syncfree check` does not pay for the runners.
_LAZY = {"run": ("syncfree.cli.run_notebook", "run"), "run_python": ("syncfree.cli.run_script", "run_python"),
         "merge": ("syncfree.cli.merge", "merge")}


def _command(name: str) -> Callable[..., Any]:
    """The function of a lazily imported command (a test may have replaced it: this module's name is looked up)."""
    value = globals().get(name)
    if value is None or isinstance(value, types.ModuleType):  # importing syncfree.cli.merge binds the module here
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
    return value


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return _command(name)
    if name == "_HelpFormatter":
        return _help_formatter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``syncfree`` console script (also ``python -m syncfree``)."""
    entry = argv is None  # this process's own command line: it may end as the program it ran did (die_by)
    argv = list(sys.argv[1:] if argv is None else argv)
    program: list[str] = []
    run_options: list[str] = []  # syncfree run's own options: a program the run follows through os.exec* gets them
    # A plain `syncfree check` command line is read without argparse (its import, with re, enum, gettext and
    # locale, and the making of the parser: a third of a run served from the cache); any other goes to argparse.
    args = _plain_check(argv) if argv[:1] == ["check"] else None
    if args is None:
        parser, run_parser = _parser(argv[:1] != ["check"])
        if argv[:1] == ["run"]:
            options, program = _split_run(argv[1:], run_parser)
            argv = ["run", *options]
            run_options = list(options)
        args = parser.parse_args(argv)
        if args.command == "run":
            _program(args, program, run_parser)
    state: dict[str, int] = {}
    output: ReportOutput | None = None
    try:
        config = find_config()
        if args.output_file and args.output_file.endswith(".ipynb"):
            # -o was the executed notebook's option before it became ruff's --output-file: never a report in it.
            raise UsageProblem(f"-o/--output-file writes the report ({args.format}), not a notebook: write the "
                               f"executed notebook with --output {args.output_file}")
        output = ReportOutput(args.output_file, args.format)
        select = getattr(args, "select", None)
        select = select if select is not None else config.select
        ignore = getattr(args, "ignore", None)
        ignore = ignore if ignore is not None else config.ignore
        budget = args.budget if args.budget is not None else config.budget
        if args.command == "check":
            status = check(args.paths, output_format=args.format, select=select, ignore=ignore, budget=budget,
                           out=output.stream(), state=state, **check_options(args, config))
        elif args.command == "merge":
            from syncfree.cli.run_script import _selected_rules

            status = _command("merge")(args.directory, output_format=args.format, budget=budget,
                                       out=output.stream(), state=state, selected=_selected_rules(select, ignore))
        elif args.notebook is None and _distributed(args):
            if args.cost or args.budget_ms is not None:  # the ranks do not measure it: never a budget left unchecked
                raise UsageProblem("--cost/--budget-ms are not measured in a distributed job's ranks yet: run a rank's "
                                   "script alone with them")
            status = _run_distributed(args, config, state, output)
        elif args.notebook is None:
            _only_for_notebooks(args)
            if args.rank_report_dir:
                raise UsageProblem("--rank-report-dir is for the ranks of a distributed job: under torchrun, "
                                   "or with --nproc-per-node N")
            status = _command("run_python")(args.target, args.args, module=args.module, code=args.code,
                                mode=args.mode or config.mode,
                                engine=args.engine or config.engine, output_format=args.format, budget=budget, select=select, ignore=ignore,
                                output=output, state=state, exit_zero=args.exit_zero, run_options=run_options,
                                cost=args.cost, budget_ms=args.budget_ms)
        else:
            from syncfree.cli.launch import torchrun_arguments

            if torchrun_arguments(args) or args.rank_report_dir:
                raise UsageProblem("--nproc-per-node and the other torchrun options run a .py script")
            if args.select is not None or args.ignore is not None:
                raise UsageProblem("--select/--ignore apply to check and to scripts: a notebook run reports each "
                                   "cell's syncs whole")
            if args.cost or args.budget_ms is not None:
                raise UsageProblem("--cost/--budget-ms apply to scripts: in a notebook, %%syncfree --cost measures a cell")
            if args.mode and args.marked_only:
                raise UsageProblem("--mode with --marked-only: each marked cell's %%syncfree line sets its own mode")
            status = _command("run")(
                args.notebook,
                timeout=args.timeout if args.timeout is not None else 600,
                output=args.output,
                watch_all=not args.marked_only,
                allow_errors=args.allow_errors,
                kernel_name=args.kernel or "python3",
                output_format=args.format,
                budget=budget,
                mode=args.mode,
                engine=args.engine or config.engine,
                out=output.stream(),
                state=state,
            )
        output.close()
    except (UsageProblem, ConfigError, OutputFileError) as problem:
        from syncfree.cli.run_script import discard_carry

        error(problem)
        status = EXIT_ERROR
        discard_carry()  # a followed os.exec* whose run could not start: its file is nobody's to read
    except BrokenPipeError:
        # The reader went away (`syncfree check . | head -1`): stop quietly, as a Unix filter does. Python would
        # report the failed flush of stdout at exit, so stdout points at /dev/null from here on.
        silence_stdout()
        status = state.get("status", EXIT_FOUND)
    except KeyboardInterrupt:
        import signal

        print("syncfree: interrupted", file=sys.stderr)
        state["die_by"], status = signal.SIGINT, 130
    if entry and state.get("die_by"):
        # An uncaught KeyboardInterrupt (the program's, or Ctrl-C while syncfree itself ran): the report is written,
        # and the process dies by SIGINT as Python's does.
        from syncfree.cli.run_script import die_by_signal

        die_by_signal(state["die_by"])
    if args.exit_zero and (status == EXIT_FOUND or (status == EXIT_ERROR and state.get("syntax_only"))):
        status = EXIT_CLEAN
    if entry and args.command == "check":
        _leave(status)  # (returns where the interpreter's own exit is needed)
    return status


def _leave(status: int) -> None:
    """End this process with ``status`` now, as its exit would end it, without the interpreter's teardown: freeing
    each module and the objects they hold took 2 to 3 ms, a tenth of a check whose results all come from its cache.
    Only where nothing waits for that teardown: no atexit handler (a coverage run's, say) and no other thread, and
    stdout and stderr flushed first; where a flush fails (a reader gone), Python's exit says so as it always did."""
    import atexit

    count = getattr(atexit, "_ncallbacks", None)
    if count is None or count():
        return
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    try:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - the ordinary exit reports it
        return
    os._exit(status)


#: The options of ``syncfree check`` (the ones argparse's check parser has, -h aside) as :func:`_plain_check` reads
#: them: option string -> (dest, what its value goes through: None for a flag, ``str`` for a plain value, else the
#: parser's own type function, by name), and each dest's default. test_check_startup compares them with the parser.
_CHECK_OPTIONS: dict[str, tuple[str, str | None]] = {
    "--format": ("format", "str"), "--budget": ("budget", "_budget"), "--exit-zero": ("exit_zero", None),
    "--output-file": ("output_file", "str"), "-o": ("output_file", "str"), "--select": ("select", "_codes"),
    "--ignore": ("ignore", "_codes"), "--fix": ("fix", None), "--unsafe-fixes": ("unsafe_fixes", None),
    "--diff": ("diff", None), "--statistics": ("statistics", None), "--possible": ("possible", None),
    "--exclude": ("exclude", "_patterns"), "--extend-exclude": ("extend_exclude", "_patterns"),
    "--no-cache": ("no_cache", None), "--cache-dir": ("cache_dir", "str"),
}
_CHECK_DEFAULTS: dict[str, object] = {
    "format": "text", "budget": None, "exit_zero": False, "output_file": None, "select": None, "ignore": None,
    "fix": False, "unsafe_fixes": False, "diff": False, "statistics": False, "possible": False, "exclude": None,
    "extend_exclude": None, "no_cache": False, "cache_dir": None,
}


def _plain_check(argv: list[str]) -> types.SimpleNamespace | None:
    """The parsed ``syncfree check ...`` command line, as argparse's check parser gives it, for a plain one: each
    option spelt out whole (``--name value``, ``--name=value``, ``-o value``), every value accepted, the paths in one
    run. None for anything else (help, an abbreviation, ``--``, a value that starts with ``-``, a mistake): argparse
    reads it then, and says what is wrong as it always did."""
    values: dict[str, object] = {"command": "check", "paths": None, **_CHECK_DEFAULTS}
    paths: list[str] = []
    ended = False  # the paths were given, and an option came after them
    index = 1
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "-" or not token.startswith("-"):
            if ended:
                return None  # paths after an option that followed paths: argparse's error
            paths.append(token)
            continue
        if paths:
            ended = True
        name, equals, given = token.partition("=")
        spec = _CHECK_OPTIONS.get(name)
        if spec is None or (equals and not name.startswith("--")):
            return None
        dest, kind = spec
        if kind is None:
            if equals:
                return None
            values[dest] = True
            continue
        if not equals:
            if index >= len(argv):
                return None
            given = argv[index]
            index += 1
        if not given or given.startswith("-"):
            return None  # argparse's own rules for such a value (an option? a negative number?): let it read it
        if kind == "str":
            if dest == "format" and given not in FORMATS:
                return None
            values[dest] = given
            continue
        try:
            values[dest] = _CHECK_TYPES[kind](given)
        except Exception:  # noqa: BLE001 - argparse reads it again, and reports it
            return None
    if not paths:
        return None
    values["paths"] = paths
    return types.SimpleNamespace(**values)


def _split_run(tokens: list[str], run_parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """``syncfree run``'s own options, and the program with its arguments.

    As with ``python``: everything from the script (or ``-``, ``-m MODULE`` or ``-c CODE``) on belongs to the
    program, a ``--`` included, so ``syncfree run train.py --format json -- x`` passes all four to train.py. After a
    notebook, which takes no arguments, the options are syncfree's. A ``--`` before the program ends syncfree's
    options.
    """
    takes_value = {option for action in run_parser._actions for option in action.option_strings
                   if action.nargs != 0 and option not in ("-m", "-c")}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            return tokens[:i], tokens[i + 1:]
        if token == "-" or not token.startswith("-"):
            program = tokens[i:]
            if program[0].endswith(".ipynb"):
                return tokens[:i] + program[1:], program[:1]
            return tokens[:i], program
        if token in ("-m", "-c"):
            return tokens[:i], tokens[i:]
        if token.startswith(("-m", "-c")) and not token.startswith("--"):  # -mpackage.module, -cCODE: as python
            return tokens[:i], [token[:2], token[2:], *tokens[i + 1:]]
        i += 2 if token in takes_value else 1
    return tokens, []


def _program(args: argparse.Namespace, program: list[str], run_parser: argparse.ArgumentParser) -> None:
    """Fill ``target``, ``module``, ``code``, ``notebook`` and ``args`` from what `_split_run` found."""
    args.module, args.notebook, args.code = False, None, None
    if not program:
        run_parser.error("the program to run is missing: SCRIPT.py, -m MODULE, -c CODE, - (stdin) or NOTEBOOK.ipynb")
    if program[0][:2] in ("-m", "-c") and len(program[0]) > 2:  # after a --: -mpackage.module, -cCODE
        program = [program[0][:2], program[0][2:], *program[1:]]
    if program[0] == "-m":
        if len(program) < 2 or not program[1]:
            run_parser.error("-m takes a module name")
        args.module, args.target, args.args = True, program[1], program[2:]
    elif program[0] == "-c":
        if len(program) < 2:
            run_parser.error("-c takes the program's code")
        args.code, args.target, args.args = program[1], "-c", program[2:]
    elif program[0].endswith(".ipynb"):
        args.notebook, args.target, args.args = program[0], program[0], []
    else:
        args.target, args.args = program[0], program[1:]


def _only_for_notebooks(args: argparse.Namespace) -> None:
    """A notebook's options given for a script are a mistake, not something to skip without a word."""
    given = [name for name, value in (("--output", args.output), ("--timeout", args.timeout),
                                      ("--marked-only", args.marked_only), ("--allow-errors", args.allow_errors),
                                      ("--kernel", args.kernel)) if value]
    if given:
        hint = "; the report goes to a file with --output-file (-o)" if "--output" in given else ""
        raise UsageProblem(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to notebooks, not to "
                           f"{'-m ' + args.target if args.module else args.target}{hint}")


def _help_formatter() -> type[argparse.HelpFormatter]:
    """argparse's formatter, with the terminal's width read as ``shutil.get_terminal_size`` reads it, without
    importing shutil: argparse makes a formatter for each option added, and shutil's import (bz2, lzma, zlib) was
    2 ms of every check. Made on first use (a plain ``syncfree check`` command line imports no argparse:
    :func:`_plain_check`), then kept as ``_HelpFormatter``."""
    formatter = globals().get("_HelpFormatter")
    if formatter is not None:
        return formatter  # type: ignore[no-any-return]
    import argparse

    class _HelpFormatter(argparse.HelpFormatter):
        """argparse's formatter, the terminal's width read without shutil (:func:`_terminal_columns`)."""

        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                     width: int | None = None) -> None:
            if width is None:
                width = _terminal_columns() - 2  # what argparse's own formatter takes
            super().__init__(prog, indent_increment, max_help_position, width)

    _HelpFormatter.__module__ = __name__
    globals()["_HelpFormatter"] = _HelpFormatter
    return _HelpFormatter


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the width of the terminal of stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def _parser(every_command: bool = True) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line's parser, and run's. Without ``every_command`` (a ``syncfree check`` command line) only check
    is added, and its parser comes second: check does not pay for the other commands' parsers and their imports."""
    import argparse

    _HelpFormatter = _help_formatter()
    parser = argparse.ArgumentParser(
        prog="syncfree",
        formatter_class=_HelpFormatter,
        description="Find host-device synchronizations in PyTorch code and notebooks.",
        epilog="Exit codes: 0 nothing found (or within the budget), 1 findings or syncs (over the budget), 2 errors. "
        "Settings: [tool.syncfree] in pyproject.toml, from the working directory upward.",
    )
    parser.add_argument("--version", action="version", version=f"syncfree {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check_parser = commands.add_parser(
        "check",
        formatter_class=_HelpFormatter,
        help="analyse .py files and notebooks without running them",
        description="Analyse .py files and every code cell of .ipynb notebooks without running them ('-' reads "
        "Python from stdin). Lines with `# syncfree: allow`, `allow[item]` or `allow[SF101]` are left out.",
    )
    check_parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched for .py and .ipynb), or - for stdin")
    _common(check_parser)
    _rule_selection(check_parser, "default: the rules on by default")
    add_check_options(check_parser)
    if not every_command:
        return parser, check_parser
    run_parser = commands.add_parser(
        "run",
        formatter_class=_HelpFormatter,
        usage="syncfree run [options] (SCRIPT.py | -m MODULE | -c CODE | - | NOTEBOOK.ipynb) [ARGS...]",
        help="run a script or a notebook under syncfree and report its syncs",
        description="Run a Python program as python runs it (syncfree run train.py ARGS..., -m package.module "
        "ARGS..., -c CODE ARGS..., or - to read it from stdin; everything after the program is its own) or execute a notebook in a "
        "fresh kernel with every cell watched, and report the syncs. Without CUDA the syncs a GPU would make are "
        "predicted on the CPU. With --format json|sarif|github and no --output-file, the program's stdout goes to stderr so "
        "that stdout holds the report alone.",
    )
    from syncfree.cli.launch import add_torchrun_options

    run_parser.add_argument("target", nargs="?", metavar="SCRIPT.py|-|NOTEBOOK.ipynb", help="the program to run")
    run_parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the program's arguments")
    run_parser.add_argument("-m", dest="module_name", metavar="MODULE", help="run a module as python -m does")
    run_parser.add_argument("-c", dest="code_given", metavar="CODE", help="run the code given, as python -c does")
    _common(run_parser)
    _rule_selection(run_parser, "default: every rule; syncs without a rule are always reported")
    run_parser.add_argument("--mode", choices=("warn", "error", "predict"), help="warn (the default with CUDA), error (the first sync raises), predict (the syncs a GPU would make, predicted on the CPU; the default without CUDA)")
    run_parser.add_argument("--engine", choices=("debug", "cupti", "auto"),
                            help="what sees the syncs on a GPU: torch's debug mode, CUPTI (every blocking CUDA call, any "
                                 "library; pip install 'syncfree[cupti]'), auto (default: CUPTI when CuPy, Numba's CUDA "
                                 "target or PyCUDA is imported and cupti-python is installed, else debug mode; Triton "
                                 "alone does not count)")
    run_parser.add_argument("--cost", action="store_true",
                            help="scripts: measure what each sync costs, the GPU time it loses, from a trace of the GPU "
                                 "(torch's profiler, CUDA activity only; a GPU and the debug-mode engine); rows are then "
                                 "ranked by it. About 2x on a launch-bound loop, so off by default")
    run_parser.add_argument("--budget-ms", type=_budget_ms, metavar="MS",
                            help="scripts: exit 1 when the syncs lost more than MS milliseconds of GPU time (implies "
                                 "--cost; with --budget too, either one over fails; without a measured cost the count "
                                 "budget decides)")
    run_parser.add_argument("--timeout", type=float, metavar="S", help="notebooks: seconds each cell may run (default 600)")
    run_parser.add_argument("--output", metavar="OUT.ipynb", help="notebooks: write the executed notebook, reports included (the report itself: --output-file)")
    run_parser.add_argument("--marked-only", action="store_true", help="notebooks: report only the cells that start with %%%%syncfree")
    run_parser.add_argument("--allow-errors", action="store_true", help="notebooks: keep running after a cell raises")
    run_parser.add_argument("--kernel", metavar="NAME", help="notebooks: kernel name (default python3)")
    add_torchrun_options(run_parser)
    merge_parser = commands.add_parser(
        "merge",
        formatter_class=_HelpFormatter,
        help="merge the rank reports of a distributed job into one report",
        description="Merge the rank reports that the ranks of `torchrun ... -m syncfree run train.py` wrote "
        "(./syncfree-ranks unless --rank-report-dir named another folder) into one ranked report. --budget is "
        "per rank.",
    )
    merge_parser.add_argument("directory", metavar="DIR", help="the folder of rank-NNNNN.json reports")
    _common(merge_parser)
    _rule_selection(merge_parser, "default: every rule; syncs without a rule are always reported")
    return parser, run_parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="text", help="text (default), json (one entry per diagnostic), sarif (2.1.0) or github (workflow annotations)")
    parser.add_argument("--budget", type=_budget, metavar="N", help="exit 1 only when more than N syncs are found "
                        "(notebooks: in the cells without a budget of their own in their metadata, \"syncfree\": "
                        "{\"budget\": N})")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when syncs are found or a file does not parse")
    parser.add_argument("--output-file", "-o", metavar="FILE", help="write the report to FILE rather than stdout (any --format)")


def _rule_selection(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--select", type=_codes, metavar="CODES", help=f"comma-separated codes or prefixes (SF1,SF601) or ALL; {default}")
    parser.add_argument("--ignore", type=_codes, metavar="CODES", help="comma-separated codes or prefixes to leave out")


def _distributed(args: argparse.Namespace) -> bool:
    """Whether ``syncfree run script.py`` starts a job (torchrun options) or is one of its ranks."""
    from syncfree.cli.launch import torchrun_arguments
    from syncfree.distributed.ranks import RankEnvironmentError, RankInfo

    if torchrun_arguments(args):
        return True
    try:
        rank = RankInfo.from_environ()
    except RankEnvironmentError as problem:
        raise UsageProblem(str(problem)) from None
    # A rank is torchrun's (TORCHELASTIC_RUN_ID): its verdict is the merged report's. RANK and WORLD_SIZE alone
    # (Kubeflow, AzureML, a SLURM script) made a plain run write its report to a folder, print none and exit with the
    # script's status: a budget over which it synced passed. Such a process is judged as any run is.
    return rank is not None and rank.run_id is not None


def _run_distributed(args: argparse.Namespace, config, state: dict[str, int], output: ReportOutput) -> int:
    from syncfree.cli.job import JobOptions
    from syncfree.cli.launch import launch, torchrun_arguments
    from syncfree.distributed.ranks import RankInfo

    if args.target in ("-", "-c"):
        raise UsageProblem(f"a distributed run reads its script from a file, not {'stdin' if args.target == '-' else '-c'}")
    _only_for_notebooks(args)
    job = JobOptions.from_args(args, config, output)
    torchrun = torchrun_arguments(args)
    if torchrun:
        if args.torchrun_nproc_per_node is None:
            raise UsageProblem("the torchrun options need --nproc-per-node N")
        return launch(job, torchrun=torchrun, rank_report_dir=args.rank_report_dir, state=state)
    from syncfree.cli.run_rank import run_rank

    return run_rank(job, rank=RankInfo.from_environ(), directory=args.rank_report_dir, state=state)


def _budget_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        import argparse

        raise argparse.ArgumentTypeError(f"a budget in milliseconds is a number >= 0, not {text!r}")
    return value


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        import argparse

        raise argparse.ArgumentTypeError(f"a budget is a whole number >= 0, not {text!r}")
    return value


def _codes(text: str) -> list[str]:
    from syncfree.catalog import select_rules

    codes = [code.strip() for code in text.split(",") if code.strip()]
    try:
        select_rules(codes)
    except ValueError as error:
        import argparse

        raise argparse.ArgumentTypeError(str(error)) from None
    return codes




_CHECK_TYPES: dict[str, Callable[[str], object]] = {"_budget": _budget, "_codes": _codes, "_patterns": _patterns}


if __name__ == "__main__":
    sys.exit(main())
