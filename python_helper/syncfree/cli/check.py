"""``syncfree check PATH...``: analyse ``.py`` files and every code cell of ``.ipynb`` notebooks without running them.

Directories are searched for both; the findings are printed ruff style and the command exits 1 when there are any::

    train.ipynb:cell 3:line 4:col 9: SF101 `loss.item()` copies the value to the CPU and waits ... [fix: none]
"""

from __future__ import annotations

import ast
import fnmatch
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from syncfree import __version__
from syncfree.analyze import Bindings, analyze_source, neutralize_ipython
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, error
from syncfree.collector import paused as cycle_collection_paused
from syncfree.output import SYNTAX_ERROR, Diagnostic, write_diagnostics

__all__ = ["SourceCell", "check", "notebook_code_cells", "read_cells"]

_SKIPPED_DIRECTORIES = {".ipynb_checkpoints", "__pycache__", "node_modules", ".git", ".venv", "venv"}


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


