"""``syncfree check|run``: the static analyzer and the notebook runner for the command line and CI.

``syncfree check PATH...`` analyses ``.py`` files and every code cell of ``.ipynb`` notebooks without running them
(directories are searched for both), prints the findings ruff style and exits 1 when there are any::

    train.ipynb:cell 3:line 4:col 9: SF101 `loss.item()` copies the value to the CPU and waits ... [fix: none]

``syncfree run NOTEBOOK.ipynb`` executes the notebook in a fresh kernel with the syncfree IPython extension loaded
and every cell watched (``%syncfree on``), and prints each cell's report (or, with ``--format json|sarif|github``,
one diagnostic per sync site); it exits 1 when a budget is exceeded: a cell's own (``"syncfree": {"budget": N}`` in
its metadata) or ``--budget`` (default 0) for the cells without one. ``syncfree run script.py`` runs a script.

Exit codes: 0 nothing found (or within the budgets), 1 findings (check) or syncs (run) over a budget, 2 usage errors,
unreadable files or a notebook that failed to run.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from syncfree import __version__
from syncfree.analyze import Bindings, analyze_source, neutralize_ipython
from syncfree.catalog import select_rules
from syncfree.collector import paused as cycle_collection_paused
from syncfree.config import ConfigError, find_config
from syncfree.output import FORMATS, SYNTAX_ERROR, Diagnostic, clean_text, write_diagnostics

__all__ = ["main"]

EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR = 0, 1, 2
REPORT_MIME_TYPE = "application/vnd.syncfree.report.v1+json"
_SKIPPED_DIRECTORIES = {".ipynb_checkpoints", "__pycache__", "node_modules", ".git", ".venv", "venv"}


class UsageProblem(Exception):
    """A problem with what the user asked for: printed as ``syncfree: error: ...``, exit code 2."""


@dataclass(frozen=True)
class SourceCell:
    """A piece of source to analyse: a whole ``.py`` file (``number`` None) or one notebook code cell."""

    path: str
    number: int | None  # 1-based position among all the notebook's cells, as a reader counts them
    source: str
    cell_id: str | None = None

    def location(self, line: int, column: int) -> str:
        """``path:cell 3:line 4:col 9`` (notebooks) or ``path:4:9`` (files); ``column`` is 0-based."""
        if self.number is None:
            return f"{self.path}:{line}:{column + 1}"
        return f"{self.path}:cell {self.number}:line {line}:col {column + 1}"


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
                exclude=config.exclude,
                state=state,
            )
        elif args.target.endswith(".py") or args.target == "-":
            status = run_python(args.target, args.args, mode=args.mode or config.mode, output_format=args.format,
                                budget=args.budget if args.budget is not None else config.budget, state=state)
        else:
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
        _error(problem)
        status = EXIT_ERROR
    except ConfigError as problem:
        _error(problem)
        status = EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`syncfree check . | head -1`): stop quietly, as a Unix filter does. Python would
        # report the failed flush of stdout at exit, so stdout points at /dev/null from here on.
        _silence_stdout()
        status = state.get("status", EXIT_FOUND)
    except KeyboardInterrupt:
        print("syncfree: interrupted", file=sys.stderr)
        return 130
    if args.exit_zero and (status == EXIT_FOUND or (status == EXIT_ERROR and state.get("syntax_only"))):
        return EXIT_CLEAN
    return status


def _error(problem: object) -> None:
    print(f"syncfree: error: {clean_text(str(problem)).splitlines()[0] if str(problem) else type(problem).__name__}", file=sys.stderr)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


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
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="text", help="text (default), json (one entry per diagnostic), sarif (2.1.0) or github (workflow annotations)")
    parser.add_argument("--budget", type=_budget, metavar="N", help="exit 1 only when more than N syncs are found "
                        "(notebooks: in the cells without a budget of their own in their metadata, \"syncfree\": "
                        "{\"budget\": N})")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when syncs are found or a file does not parse")


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


# --------------------------------------------------------------------------------------------------- check
def check(
    paths: Sequence[str],
    *,
    output_format: str = "text",
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    budget: int | None = None,
    exclude: Sequence[str] = (),
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
) -> int:
    out = out or sys.stdout
    state = state if state is not None else {}
    cells: list[SourceCell] = []
    unreadable = False
    files = 0
    for path in _expand(paths, exclude):
        try:
            if str(path) == "-":
                cells.append(SourceCell("-", None, sys.stdin.read()))
            else:
                cells.extend(read_cells(path))
            files += 1
        except UsageProblem as problem:
            _error(problem)
            unreadable = True
    diagnostics: list[Diagnostic] = []
    earlier: dict[str, Bindings] = {}  # per file: a notebook's cells see what the cells above them bound
    syntax_errors = 0
    for cell in cells:
        bindings = earlier.setdefault(cell.path, Bindings())
        findings = analyze_source(cell.source, select=select, ignore=ignore, earlier=bindings)
        # Findings mean the source parsed; only a cell without any can be one that does not (a second parse of a
        # large file costs as much as a fifth of its check).
        problem = _syntax_error(cell) if not findings else None
        if problem is not None:
            diagnostics.append(problem)
            syntax_errors += 1
            continue
        diagnostics.extend(_diagnostic(cell, finding) for finding in findings)
    syncs = len(diagnostics) - syntax_errors
    over = syncs > (budget if budget is not None else 0)
    status = EXIT_ERROR if unreadable or syntax_errors else EXIT_FOUND if over else EXIT_CLEAN
    state["status"] = status
    state["syntax_only"] = int(bool(syntax_errors) and not unreadable)
    summary = _summary(diagnostics, files, syntax_errors, budget)
    write_diagnostics(diagnostics, output_format, out, summary=summary, tool_version=__version__)
    out.flush()
    if budget is not None and over:
        print(f"syncfree: {syncs} syncs exceed the budget of {budget}", file=sys.stderr)
    return status


def _syntax_error(cell: SourceCell) -> Diagnostic | None:
    python_source = neutralize_ipython(cell.source)
    if python_source is None:
        return None
    try:
        with cycle_collection_paused():  # a large file's tree is no garbage (syncfree.collector)
            compile(python_source, cell.path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        line = error.lineno or 1
        col = max(error.offset or 1, 1)
        return Diagnostic(cell.path, line, col, error.end_lineno or line, max(error.end_offset or col, col), SYNTAX_ERROR,
                          f"SyntaxError: {error.msg} (nothing in this {'cell' if cell.number else 'file'} was checked)",
                          cell=cell.number, cell_id=cell.cell_id)
    except (ValueError, RecursionError, MemoryError) as error:
        return Diagnostic(cell.path, 1, 1, 1, 1, SYNTAX_ERROR, f"cannot parse: {error}", cell=cell.number, cell_id=cell.cell_id)
    return None


def _diagnostic(cell: SourceCell, finding: dict[str, Any]) -> Diagnostic:
    r = finding["range"]
    fix = finding["fix"]
    return Diagnostic(cell.path, r["line"], r["col"] + 1, r["end_line"], r["end_col"] + 1, finding["rule"],
                      finding["message"], cell=cell.number, cell_id=cell.cell_id, certainty=finding["certainty"],
                      fix=fix["safety"] if fix else None)


def _summary(diagnostics: list[Diagnostic], files: int, syntax_errors: int, budget: int | None) -> str:
    counts = {"certain": 0, "likely": 0}
    fixable = 0
    for d in diagnostics:
        if d.rule != SYNTAX_ERROR:
            counts[d.certainty] = counts.get(d.certainty, 0) + 1
            fixable += d.fix is not None
    total = counts["certain"] + counts["likely"]
    where = f"{files} file{'s' if files != 1 else ''}"
    if total:
        text = (f"Found {total} sync{'s' if total != 1 else ''} in {where} ({counts['certain']} certain, "
                f"{counts['likely']} likely); {fixable} with a rewrite.")
    else:
        text = f"No syncs found in {where}."
    if syntax_errors:
        text += f" {syntax_errors} could not be parsed."
    if budget is not None:
        text += f" Budget {budget}: {'exceeded' if total > budget else 'kept'}."
    return text


def _expand(paths: Sequence[str], exclude: Sequence[str] = ()) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if name == "-":
            yield path
        elif path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix in (".py", ".ipynb") and p.is_file() and not _SKIPPED_DIRECTORIES & set(p.parts)
                and not any(p.match(pattern) or fnmatch.fnmatch(str(p), pattern) for pattern in exclude)
            )
            yield from found
        else:
            yield path  # a missing or wrong file is reported by read_cells


def read_cells(path: Path) -> list[SourceCell]:
    """The code to analyse in a file: one cell for a ``.py`` file, every code cell of a notebook."""
    if path.suffix not in (".py", ".ipynb"):
        raise UsageProblem(f"{path}: not a .py file or an .ipynb notebook")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageProblem(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    if path.suffix != ".ipynb":
        return [SourceCell(str(path), None, text)]
    try:
        cells = notebook_code_cells(text)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageProblem(f"cannot read {path} as a notebook: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    return [SourceCell(str(path), number, source, cell_id) for number, source, cell_id in cells]


def notebook_code_cells(text: str) -> list[tuple[int, str, str | None]]:
    """``(number among all cells, source, id)`` of each code cell of a notebook file's text.

    Format 4 notebooks (every Jupyter since 2015) are read as the JSON they are: ``syncfree check`` needs no
    nbformat, which takes longer to import than checking a file does. Older formats go through nbformat's upgrade.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a notebook (the file holds no JSON object)")
    if not isinstance(data.get("nbformat"), int) or data["nbformat"] < 4:
        try:
            import nbformat
        except ImportError:
            raise ValueError("a notebook older than format 4 needs nbformat: pip install nbformat") from None
        data = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise ValueError("not a notebook (no list of cells)")
    found = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if not isinstance(source, str):
            raise ValueError(f"cell {number}: its source is not text")
        cell_id = cell.get("id")
        found.append((number, source, cell_id if isinstance(cell_id, str) else None))
    return found


# --------------------------------------------------------------------------------------------------- run (scripts)
def run_python(
    target: str,
    argv: Sequence[str],
    *,
    mode: str | None = None,
    output_format: str = "text",
    budget: int | None = None,
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
) -> int:
    """``syncfree run script.py args...``: the script under the engine, its sync sites as diagnostics."""
    out = out or sys.stdout
    state = state if state is not None else {}
    if target != "-" and not Path(target).is_file():
        raise UsageProblem(f"cannot read {target}: no such file")
    from syncfree.session import run_script

    try:
        result = run_script(target, list(argv), mode=mode)
    except SyntaxError as error:
        d = Diagnostic(target, error.lineno or 1, max(error.offset or 1, 1), error.end_lineno or error.lineno or 1,
                       max(error.end_offset or 1, 1), SYNTAX_ERROR, f"SyntaxError: {error.msg} (nothing ran)")
        write_diagnostics([d], output_format, out, tool_version=__version__)
        state["status"], state["syntax_only"] = EXIT_ERROR, 1
        return EXIT_ERROR
    except OSError as error:
        raise UsageProblem(f"cannot read {target}: {error.strerror or error}") from None
    report = result.report
    diagnostics = [_site_diagnostic(site, target, report.predicted) for site in report.sites]
    counted = report.counted
    over = counted > (budget if budget is not None else 0)
    from syncfree.session import is_sync_stop

    stopped = result.exit_code == 1 and is_sync_stop(result.error)  # --mode error: a finding
    status = (EXIT_FOUND if stopped else EXIT_ERROR if result.exit_code not in (0, None)
              else EXIT_FOUND if over else EXIT_CLEAN)
    state["status"] = status
    blocked = f", blocked {report.blocked_ms:.1f} ms" if report.blocked_ms is not None else ""
    summary = (f"{counted} sync{'s' if counted != 1 else ''} at {len(report.sites)} site"
               f"{'s' if len(report.sites) != 1 else ''}{' (predicted)' if report.predicted else ''}{blocked}"
               f"{f'; {report.syncs - counted} allowed' if report.syncs != counted else ''}, "
               f"ranked by {'count' if report.blocked_ms is None else 'blocked time'}.")
    if budget is not None:
        summary += f" Budget {budget}: {'exceeded' if over else 'kept'}."
    # How it ran (e.g. "No CUDA device: --mode warn needs one"), then predict mode's table:
    # unmeasured ops and the table's torch version.
    for line in (f"note: {n}" for n in [*report.notes, *report.predict_table_lines()]):
        summary += f"\n{line}"
    write_diagnostics(diagnostics, output_format, out, summary=summary, tool_version=__version__)
    out.flush()
    if stopped:
        print(f"syncfree: {target} stopped at its first sync (--mode error)", file=sys.stderr)
    elif result.exit_code not in (0, None):
        print(f"syncfree: error: {target} exited with status {result.exit_code}", file=sys.stderr)
    elif budget is not None and over:
        print(f"syncfree: {counted} syncs exceed the budget of {budget}", file=sys.stderr)
    return status


def _site_diagnostic(site: Any, target: str, predicted: bool) -> Diagnostic:
    files = getattr(site, "files", None) or ()
    path = files[-1] if files else target
    line = site.chain[-1] if site.chain else 1
    rule = site.rule or site.kind
    from syncfree.catalog import RULES

    detail = getattr(site, "detail", None)
    what = detail or (RULES[rule].title if rule in RULES else f"{site.kind} sync")
    import linecache

    text = linecache.getline(path, line)
    col = len(text) - len(text.lstrip()) + 1 if text.strip() else 1  # the statement's start
    end_col = len(text.rstrip("\r\n")) + 1 if text.strip() else 1
    return Diagnostic(_relative(path), line, col, line, end_col, rule, f"{what}{' (predicted)' if predicted else ''}",
                      certainty="predicted" if predicted else "measured", count=site.count,
                      blocked_ms=getattr(site, "blocked_ms", None))


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


# --------------------------------------------------------------------------------------------------- run
def run(
    notebook_path: str,
    *,
    timeout: float = 600,
    output: str | None = None,
    watch_all: bool = True,
    allow_errors: bool = False,
    kernel_name: str = "python3",
    output_format: str = "text",
    budget: int | None = None,
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
) -> int:
    """``syncfree run NOTEBOOK.ipynb``: execute it in a fresh kernel, every cell watched; report each cell's syncs.

    Budgets: a cell whose metadata holds ``"syncfree": {"budget": N}`` may sync N times; the cells without a budget
    of their own share ``budget`` (default 0). Exit 1 only when a budget is exceeded, 2 when the notebook did not run
    to the end. Syncs on a line with a ``# syncfree: allow`` comment are reported but not counted.
    """
    out = out or sys.stdout
    state = state if state is not None else {}
    path = Path(notebook_path)
    if path.suffix != ".ipynb":
        raise UsageProblem(f"{notebook_path}: syncfree run takes a .py script or an .ipynb notebook")
    if not path.is_file():
        raise UsageProblem(f"cannot read {notebook_path}: no such file")
    if output:
        _check_writable(output)
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as error:
        raise UsageProblem(
            f"running a notebook needs {error.name or 'nbclient'}, which is not installed: "
            "pip install 'syncfree[notebook]'"
        ) from None
    _check_kernel(kernel_name)
    from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageProblem(f"cannot read {path} as a notebook: {error}") from None
    cell_budgets = _cell_budgets(notebook, str(path))
    extra = {}
    if os.name == "posix":
        # Unix sockets rather than TCP: the kernel stays private to this run (and ipykernel
        # does not warn about unencrypted TCP).
        # The async manager: nbclient's event loop keeps polling (cell timeouts, a dead kernel) while a cell
        # runs; a blocking KernelManager would stall it (nbclient/client.py, async_wait_for_reply).
        from jupyter_client.manager import AsyncKernelManager

        # An absolute socket path: the kernel runs in the notebook's folder, not ours.
        sockets = tempfile.mkdtemp(prefix="syncfree-kernel-")
        extra["km"] = AsyncKernelManager(kernel_name=kernel_name, transport="ipc",
                                    ip=os.path.join(sockets, "kernel"))
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=kernel_name,
        **extra,
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(path.resolve().parent)}},
        on_cell_executed=_Progress(notebook, sys.stderr),
    )
    # nbclient shuts down only a kernel whose manager it made itself (nbclient/client.py,
    # setup_kernel): ours too.
    client.owns_km = True
    # Loaded directly rather than with %load_ext, so that the notebook's own
    # `%load_ext syncfree` still runs quietly (the extension's load is idempotent).
    setup = ("import syncfree as _syncfree\n_syncfree.load_ipython_extension(get_ipython())\n"
             "del _syncfree" + ("\n%syncfree on" if watch_all else ""))
    for cell in notebook.cells:
        # Only this run's outputs are read: nbclient skips empty cells and the cells after a failing one, which
        # would otherwise keep the outputs saved in the file.
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    failure = None
    interrupted = []

    def on_interrupt(signum: int, frame: Any) -> None:
        # A KeyboardInterrupt raised inside nbclient's event loop is not seen until the running cell ends (never,
        # for an infinite loop): kill the kernel instead, which nbclient reports at once as a dead kernel.
        interrupted.append(signum)
        provisioner = getattr(client.km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt) if threading.current_thread() is threading.main_thread() else None
    try:
        _execute(client, notebook, setup)
    except (CellExecutionError, CellControlSignal, DeadKernelError, TimeoutError, RuntimeError) as error:
        failure = error
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if "km" in extra:
            shutil.rmtree(os.path.dirname(extra["km"].ip), ignore_errors=True)
    if interrupted:
        print(f"syncfree: error: {path} interrupted; the kernel was stopped", file=sys.stderr)
        return EXIT_ERROR
    reports = _cell_reports(notebook, str(path))
    verdict = _judge(reports, cell_budgets, budget, str(path))
    if output_format == "text":
        _print_reports(reports, str(path), out)
        if verdict.summary:
            print(verdict.summary, file=out)
    else:
        # As `check` leaves out allowed findings, the sites a `# syncfree: allow` comment covers are left out here.
        diagnostics = [_cell_site_diagnostic(str(path), found.number, found.cell, found.report, site)
                       for found in reports for site in _counted_syncs(found.cell, found.report)[1]]
        write_diagnostics(diagnostics, output_format, out, tool_version=__version__)
    out.flush()
    if output:
        nbformat.write(notebook, output)
    if failure is not None:
        lines = [line for line in clean_text(str(failure)).strip().splitlines() if line.strip("-= ")]
        if isinstance(failure, CellExecutionError) or not lines:
            message = lines[-1] if lines else type(failure).__name__
        else:  # a timeout or a dead kernel says what happened first
            message = lines[0]
        print(f"syncfree: error: {path} did not run to the end: {message}", file=sys.stderr)
        state["status"] = EXIT_ERROR
        return EXIT_ERROR
    for line in verdict.exceeded:
        print(f"syncfree: {line}", file=sys.stderr)
    state["status"] = EXIT_FOUND if verdict.exceeded else EXIT_CLEAN
    return state["status"]


def _cell_budgets(notebook: Any, path: str) -> dict[int, int]:
    """The budgets of the cells that carry one in their metadata (``"syncfree": {"budget": N}``), by cell number."""
    budgets = {}
    for number, cell in enumerate(notebook.cells, start=1):
        settings = cell.get("metadata", {}).get("syncfree")
        if settings is None:
            continue
        value = settings.get("budget") if isinstance(settings, dict) else settings
        if isinstance(settings, dict) and "budget" not in settings:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageProblem(f'{path}:cell {number}: the metadata "syncfree": {{"budget": N}} takes a whole number '
                               f">= 0, not {json.dumps(value)[:40]}")
        budgets[number] = value
    return budgets


@dataclass
class _Verdict:
    summary: str
    exceeded: list[str]


def _counted_syncs(cell: Any, report: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """A cell's syncs that count towards a budget (all but those a ``# syncfree: allow`` comment covers) and the
    sites they come from."""
    from syncfree.session import allowed_by_comment

    lines = str(cell.get("source", "")).splitlines()
    allowed, counted = 0, []
    for site in report["sites"]:
        text = lines[site["line"] - 1] if 0 < site["line"] <= len(lines) else ""
        if allowed_by_comment(text, site["kind"], site.get("rule")):
            allowed += site["count"]
        else:
            counted.append(site)
    return max(report["totals"]["syncs"] - allowed, 0), counted


def _judge(reports: list[CellReport], cell_budgets: dict[int, int], budget: int | None,
           path: str) -> _Verdict:
    """Which budgets the run exceeded, each named with the cells and lines that did it."""
    exceeded = []
    shared, shared_cells = 0, []
    total = 0
    for found in reports:
        number = found.number
        count, sites = _counted_syncs(found.cell, found.report)
        total += count
        if number in cell_budgets:
            if count > cell_budgets[number]:
                exceeded.append(f"{path}:cell {number}: {_syncs(count)} the cell's budget of {cell_budgets[number]} "
                                f"({_where(sites)})")
        elif count:
            shared += count
            shared_cells.append(f"cell {number}: {count} ({_where(sites)})")
    limit = budget if budget is not None else 0
    if shared > limit:
        scope = "the cells without a budget of their own" if cell_budgets else "the notebook"
        exceeded.append(f"{path}: {_syncs(shared, scope)} the budget of {limit}: " + "; ".join(shared_cells))
    summary = ""
    if budget is not None or cell_budgets:
        kept = "exceeded" if exceeded else "kept"
        summary = f"{path}: {total} counted sync{'s' if total != 1 else ''}; budgets {kept}."
    return _Verdict(summary, exceeded)


def _syncs(count: int, where: str = "") -> str:
    """``1 sync exceeds`` / ``3 syncs in the notebook exceed``."""
    return f"{count} sync{'s' if count != 1 else ''}{f' in {where}' if where else ''} exceed{'s' if count == 1 else ''}"


def _where(sites: list[dict[str, Any]]) -> str:
    ranked = sorted(sites, key=lambda site: -site["count"])
    from syncfree.kinds import kind_label

    def label(site: dict[str, Any]) -> str:  # what synced, in words (not the kind's id)
        text = site.get("label") if isinstance(site.get("label"), str) else kind_label(str(site.get("kind")))
        return text.replace("`", "")

    shown = ", ".join(f"line {site['line']} {label(site)} ×{site['count']}" for site in ranked[:3])
    return shown + (f", {len(ranked) - 3} more sites" if len(ranked) > 3 else "")


def _cell_site_diagnostic(path: str, number: int, cell: Any, report: dict[str, Any], site: dict[str, Any]) -> Diagnostic:
    lines = str(cell.get("source", "")).splitlines()
    text = lines[site["line"] - 1] if 0 < site["line"] <= len(lines) else ""
    col = len(text) - len(text.lstrip()) + 1 if text.strip() else 1
    end_col = len(text) + 1 if text.strip() else 1
    predicted = bool(site.get("predicted", report.get("mode") == "predict"))
    message = clean_text(site.get("message") or site.get("label") or site["kind"])
    return Diagnostic(path, site["line"], col, site["line"], end_col, site.get("rule") or site["kind"],
                      message, cell=number, cell_id=cell.get("id"),
                      certainty="predicted" if predicted else "measured", count=site["count"],
                      blocked_ms=site.get("blocked_ms"))


class _Progress:
    """nbclient's ``on_cell_executed`` hook: ``cell 3/50 done, 4 syncs so far`` as one updating line on a terminal,
    plain lines otherwise."""

    def __init__(self, notebook: Any, stream: TextIO) -> None:
        self.total = sum(1 for cell in notebook.cells if cell.cell_type == "code")
        self.done = 0
        self.syncs = 0
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"

    def __call__(self, cell: Any, cell_index: int, execute_reply: Any = None) -> None:
        self.done += 1
        for output in cell.get("outputs", []):
            report = output.get("data", {}).get(REPORT_MIME_TYPE) if isinstance(output.get("data"), dict) else None
            totals = report.get("totals") if isinstance(report, dict) else None
            if isinstance(totals, dict) and isinstance(totals.get("syncs"), int):
                self.syncs += totals["syncs"]
        line = f"syncfree: cell {cell_index + 1} done ({self.done}/{self.total} code cells), {self.syncs} syncs so far"
        try:
            if self.tty:
                self.stream.write("\r\x1b[K" + line + ("\n" if self.done >= self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass


def _check_writable(output: str) -> None:
    folder = Path(output).resolve().parent
    if not folder.is_dir():
        raise UsageProblem(f"cannot write {output}: no folder {folder}")
    if not os.access(folder, os.W_OK) or (Path(output).exists() and not os.access(output, os.W_OK)):
        raise UsageProblem(f"cannot write {output}: permission denied")


def _check_kernel(kernel_name: str) -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        known = ", ".join(sorted(KernelSpecManager().find_kernel_specs())) or "none"
        raise UsageProblem(f"no kernel named {kernel_name!r} (installed: {known})") from None


class ExtensionNotLoaded(RuntimeError):
    """The kernel could not load the syncfree extension (not installed in the kernel's environment)."""


def _execute(client: Any, notebook: Any, setup: str) -> None:
    """What ``NotebookClient.execute`` does, with ``setup`` run in the kernel before the first cell.

    The setup goes through the kernel client, not into the notebook as a cell, so the executed notebook holds only
    the user's cells; nbclient collects a cell's outputs by parent message id (nbclient/client.py,
    _async_poll_output_msg), so the setup's own output never lands in a cell. ``setup_kernel`` shuts the kernel
    down on every exit path.
    """
    client.reset_execution_trackers()
    with client.setup_kernel():
        info = client.wait_for_reply(client.kc.kernel_info())
        if info is not None and "language_info" in info["content"]:
            notebook.metadata["language_info"] = info["content"]["language_info"]
        reply = client.wait_for_reply(client.kc.execute(setup, store_history=False))
        content = (reply or {}).get("content", {})
        if content.get("status") != "ok":
            raise ExtensionNotLoaded(
                f"the kernel could not load syncfree ({content.get('ename', 'no reply')}: "
                f"{content.get('evalue', '')}); install syncfree in the kernel's environment"
            )
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)


def _valid_report(report: Any) -> dict[str, Any] | None:
    """The report if it matches report.schema.json (checked with jsonschema when installed, by shape otherwise)."""
    if isinstance(report, str):  # some writers store JSON MIME data as text
        try:
            report = json.loads(report)
        except ValueError:
            return None
    if not isinstance(report, dict):
        return None
    validator = _report_validator()
    if validator is None:
        totals = report.get("totals")
        ok = isinstance(totals, dict) and isinstance(totals.get("syncs"), int) and isinstance(report.get("sites"), list)
        return report if ok else None
    return report if validator.is_valid(report) else None


@functools.lru_cache(maxsize=1)
def _report_validator() -> Any:
    """report.schema.json's validator, made once per run (a notebook has a report per cell); None without
    jsonschema."""
    try:
        import jsonschema
    except ImportError:
        return None
    schema = json.loads((Path(__file__).with_name("report.schema.json")).read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


@dataclass(frozen=True)
class CellReport:
    """A valid report output of an executed notebook: the cell's number among all cells, the cell, the report and
    its plain-text rendering."""

    number: int
    cell: Any
    report: dict[str, Any]
    text: str


def _cell_reports(notebook: Any, path: str) -> list[CellReport]:
    """Every valid report output of the run; invalid ones are left out with a warning."""
    reports = []
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
            if REPORT_MIME_TYPE not in data:
                continue
            report = _valid_report(data[REPORT_MIME_TYPE])
            if report is None:
                print(f"syncfree: warning: {path}:cell {number}: a report output that does not match the schema was "
                      "left out", file=sys.stderr)
                continue
            text = data.get("text/plain") or f"syncfree: {report['totals']['syncs']} syncs"
            reports.append(CellReport(number, cell, report, clean_text("".join(text) if isinstance(text, list) else str(text))))
    return reports


def _print_reports(reports: list[CellReport], path: str, out: TextIO) -> None:
    """Print the text of each cell's report output; a note that every cell repeats (no CUDA
    device, the op table's torch version) is printed with the first cell that has it."""
    shown_notes: set[str] = set()
    for found in reports:
        lines = []
        for line in found.text.splitlines():
            if line.lstrip().startswith("note: "):
                if line.strip() in shown_notes:
                    continue
                shown_notes.add(line.strip())
            lines.append(line)
        text = "\n".join(lines)
        print(f"{path}:cell {found.number}: {text}", file=out)
    if not reports:
        print(f"{path}: no syncfree reports (no cell synchronized)", file=out)


if __name__ == "__main__":
    sys.exit(main())
