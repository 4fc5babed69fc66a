"""``syncfree check PATH...``: analyse ``.py`` files and every code cell of ``.ipynb`` notebooks without running them.

Directories are searched for both; the findings are printed ruff style and the command exits 1 when there are any::

    train.ipynb:cell 3:line 4:col 9: SF101 `loss.item()` copies the value to the CPU and waits ... [fix: none]
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from syncfree import __version__
from syncfree.analyze import Bindings, analyze_source, neutralize_ipython
from syncfree.cli.sources import SourceCell, decode_python, expand_paths, read_cells
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, error
from syncfree.collector import paused as cycle_collection_paused
from syncfree.output import SYNTAX_ERROR, Diagnostic, write_diagnostics

__all__ = ["check"]


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

    def cannot_list(problem: UsageProblem) -> None:
        nonlocal unreadable
        error(problem)
        unreadable = True

    for path in expand_paths(paths, exclude, on_error=cannot_list):
        try:
            if str(path) == "-":
                stdin = getattr(sys.stdin, "buffer", None)  # bytes, decoded as `python -` decodes them
                text = decode_python(stdin.read(), "-") if stdin is not None else sys.stdin.read()
                cells.append(SourceCell("-", None, text))
            else:
                cells.extend(read_cells(path))
            files += 1
        except UsageProblem as problem:
            error(problem)
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
