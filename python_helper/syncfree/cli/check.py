"""``syncfree check PATH...``: analyse ``.py`` files and every code cell of ``.ipynb`` notebooks without running them.

Directories are searched for both; the findings are printed ruff style and the command exits 1 when there are any::

    train.ipynb:cell 3:line 4:col 9: SF101 `loss.item()` copies the value to the CPU and waits ... [fix: none]
"""

from __future__ import annotations

import ast
import functools
import gc
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from syncfree import __version__
from syncfree.analyze import Bindings, analyze_source, neutralize_ipython
from syncfree.cli.sources import SourceCell, decode_python, expand_paths, read_cells
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, error
from syncfree.collector import paused as cycle_collection_paused
from syncfree.output import SYNTAX_ERROR, Diagnostic, write_diagnostics

__all__ = ["FileResult", "check", "check_file"]


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
    jobs: int | None = None,
) -> int:
    """Check the files; ``jobs`` worker processes (default: the cores this process may use) share them."""
    out = out or sys.stdout
    state = state if state is not None else {}
    unreadable = False

    def cannot_list(problem: UsageProblem) -> None:
        nonlocal unreadable
        error(problem)
        unreadable = True

    files = list(expand_paths(paths, exclude, on_error=cannot_list))
    diagnostics: list[Diagnostic] = []
    syntax_errors = checked = 0
    for result in _check_files(files, select, ignore, jobs):
        if result.problem is not None:
            error(result.problem)
            unreadable = True
            continue
        checked += 1
        diagnostics.extend(result.diagnostics)
        syntax_errors += result.syntax_errors
    syncs = len(diagnostics) - syntax_errors
    over = syncs > (budget if budget is not None else 0)
    status = EXIT_ERROR if unreadable or syntax_errors else EXIT_FOUND if over else EXIT_CLEAN
    state["status"] = status
    state["syntax_only"] = int(bool(syntax_errors) and not unreadable)
    summary = _summary(diagnostics, checked, syntax_errors, budget)
    write_diagnostics(diagnostics, output_format, out, summary=summary, tool_version=__version__)
    out.flush()
    if budget is not None and over:
        print(f"syncfree: {syncs} syncs exceed the budget of {budget}", file=sys.stderr)
    return status


@dataclass(frozen=True)
class FileResult:
    """What checking one file gave: its diagnostics (syntax errors among them), or the problem that kept it unread."""

    diagnostics: list[Diagnostic]
    syntax_errors: int = 0
    problem: UsageProblem | None = None


#: Below this many files, or bytes in all, the files are checked in this process: starting workers costs more.
_POOL_MIN_FILES, _POOL_MIN_BYTES = 8, 256_000


def _check_files(files: list[Path], select: list[str] | None, ignore: list[str] | None,
                 jobs: int | None) -> Iterator[FileResult]:
    """Each file's result in the order given. Files are independent, so a process pool shares them out over the
    cores; each worker reads, parses (once) and analyses whole files and sends back only the diagnostics."""
    jobs = jobs or _usable_cores()
    check_one = functools.partial(check_file, select=select, ignore=ignore)
    on_disk = [path for path in files if str(path) != "-"]
    if jobs < 2 or len(on_disk) < _POOL_MIN_FILES or _total_bytes(on_disk) < _POOL_MIN_BYTES:
        yield from map(check_one, files)
        return
    # fork where there is one: the workers start with syncfree and the catalog imported (spawn re-imports them).
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ProcessPoolExecutor(min(jobs, len(on_disk)), mp_context=context, initializer=_worker_started) as pool:
        # Small chunks keep both cores busy to the end (a 10,000-line file next to many small ones).
        results = pool.map(check_one, on_disk, chunksize=max(1, min(16, len(on_disk) // (jobs * 8))))
        by_path = iter(results)
        for path in files:
            yield check_one(path) if str(path) == "-" else next(by_path)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what a container or taskset allows, not the machine's count
    except AttributeError:
        return os.cpu_count() or 1


def _total_bytes(files: list[Path]) -> int:
    total = 0
    for path in files:
        try:
            total += path.stat().st_size
        except OSError:
            pass  # reported when the file is read
        if total >= _POOL_MIN_BYTES:
            break
    return total


def _worker_started() -> None:
    # The objects the parent made before the fork are never garbage here: keep the collector off them.
    gc.freeze()


def check_file(path: Path, *, select: list[str] | None = None, ignore: list[str] | None = None) -> FileResult:
    """Read one file (``-``: stdin) and analyse it: every cell of a notebook, in order, each seeing what the cells
    above it bound. Each source is parsed once (twice only when it holds IPython syntax or does not parse)."""
    try:
        if str(path) == "-":
            stdin = getattr(sys.stdin, "buffer", None)  # bytes, decoded as `python -` decodes them
            text = decode_python(stdin.read(), "-") if stdin is not None else sys.stdin.read()
            cells = [SourceCell("-", None, text)]
        else:
            cells = read_cells(path)
    except UsageProblem as problem:
        return FileResult([], problem=problem)
    diagnostics: list[Diagnostic] = []
    syntax_errors = 0
    bindings = Bindings()  # a notebook's cells see what the cells above them bound
    for cell in cells:
        findings, problem = _analyse(cell, select, ignore, bindings)
        if problem is not None:
            diagnostics.append(problem)
            syntax_errors += 1
        else:
            diagnostics.extend(_diagnostic(cell, finding) for finding in findings)
    return FileResult(diagnostics, syntax_errors)


def _analyse(cell: SourceCell, select: list[str] | None, ignore: list[str] | None,
             bindings: Bindings) -> tuple[list[dict[str, Any]], Diagnostic | None]:
    """The cell's findings, or the diagnostic saying it does not parse."""
    with cycle_collection_paused(), warnings.catch_warnings():  # a large file's tree is no garbage (syncfree.collector)
        warnings.simplefilter("ignore", SyntaxWarning)  # invalid escapes and the like: not ours to report
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            tree = compile(cell.source, cell.path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None  # IPython syntax (%magic, !cmd) to blank first, or no Python at all
    if tree is not None:
        return analyze_source(cell.source, select=select, ignore=ignore, earlier=bindings, tree=tree), None
    findings = analyze_source(cell.source, select=select, ignore=ignore, earlier=bindings)
    # Findings mean the source parsed once its IPython lines were blanked; only a cell without any can be one that
    # does not parse.
    return findings, (_syntax_error(cell) if not findings else None)


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
