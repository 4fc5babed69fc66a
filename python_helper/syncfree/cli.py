"""``syncfree check|run``: the static analyzer and the notebook runner for the command line and CI.

``syncfree check PATH...`` analyses ``.py`` files and every code cell of ``.ipynb`` notebooks without running them
(directories are searched for both), prints the findings ruff style and exits 1 when there are any::

    train.ipynb:cell 3:line 4:col 9: SF101 `loss.item()` copies the value to the CPU and waits ... [fix: none]

``syncfree run NOTEBOOK.ipynb`` executes the notebook in a fresh kernel with the syncfree IPython extension loaded
and every cell watched (``%syncfree on``), and prints each cell's report; it exits 1 when a sync was seen (or
predicted, without CUDA).

Exit codes: 0 nothing found, 1 findings (check) or syncs (run), 2 usage errors, unreadable files or a notebook that
failed to run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from syncfree.analyze import Bindings, analyze_source
from syncfree.catalog import select_rules

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
    """The ``syncfree`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return check(args.paths, output_format=args.format, select=args.select, ignore=args.ignore)
        return run(
            args.notebook,
            timeout=args.timeout,
            output=args.output,
            watch_all=not args.marked_only,
            allow_errors=args.allow_errors,
            kernel_name=args.kernel,
        )
    except UsageProblem as problem:
        print(f"syncfree: error: {problem}", file=sys.stderr)
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncfree",
        description="Find host-device synchronizations in PyTorch code and notebooks.",
        epilog="Exit codes: 0 nothing found, 1 findings or syncs, 2 errors.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check_parser = commands.add_parser(
        "check",
        help="analyse .py files and notebooks without running them",
        description="Analyse .py files and every code cell of .ipynb notebooks without running them. Columns are "
        "1-based in the text output and 0-based in JSON (as in the report schema).",
    )
    check_parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched for .py and .ipynb)")
    check_parser.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json: one v1 report per cell")
    check_parser.add_argument("--select", type=_codes, metavar="CODES", help="comma-separated codes or prefixes (SF1,SF601) or ALL; default: the rules on by default")
    check_parser.add_argument("--ignore", type=_codes, metavar="CODES", help="comma-separated codes or prefixes to leave out")
    run_parser = commands.add_parser(
        "run",
        help="execute a notebook under syncfree and print each cell's report",
        description="Execute a notebook in a fresh kernel with the syncfree extension loaded and every cell watched, "
        "and print each cell's report. Without CUDA in the kernel the syncs are predicted on CPU stand-ins.",
    )
    run_parser.add_argument("notebook", metavar="NOTEBOOK.ipynb")
    run_parser.add_argument("--timeout", type=float, default=600, metavar="S", help="seconds each cell may run (default 600)")
    run_parser.add_argument("--output", "-o", metavar="OUT.ipynb", help="write the executed notebook, reports included")
    run_parser.add_argument("--marked-only", action="store_true", help="report only the cells that start with %%%%syncfree")
    run_parser.add_argument("--allow-errors", action="store_true", help="keep running after a cell raises")
    run_parser.add_argument("--kernel", default="python3", metavar="NAME", help="kernel name (default python3)")
    return parser


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
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    cells: list[SourceCell] = []
    unreadable = False
    files = 0
    for path in _expand(paths):
        files += 1
        try:
            cells.extend(read_cells(path))
        except UsageProblem as problem:
            print(f"syncfree: error: {problem}", file=sys.stderr)
            unreadable = True
    results = []
    earlier: dict[str, Bindings] = {}  # per file: a notebook's cells see what the cells above them bound
    for cell in cells:
        bindings = earlier.setdefault(cell.path, Bindings())
        results.append((cell, analyze_source(cell.source, select=select, ignore=ignore, earlier=bindings)))
    if output_format == "json":
        json.dump([_static_report(cell, findings) for cell, findings in results], out, indent=1)
        out.write("\n")
    else:
        _print_findings(results, files, out)
    if unreadable:
        return EXIT_ERROR
    return EXIT_FOUND if any(findings for _, findings in results) else EXIT_CLEAN


def _expand(paths: Sequence[str]) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix in (".py", ".ipynb") and p.is_file() and not _SKIPPED_DIRECTORIES & set(p.parts)
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
    import nbformat  # only notebooks need it

    try:
        notebook = nbformat.reads(text, as_version=4)
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # NotJSONError is a ValueError
        raise UsageProblem(f"cannot read {path} as a notebook: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    return [
        SourceCell(str(path), number, cell.source, cell.get("id"))
        for number, cell in enumerate(notebook.cells, start=1)
        if cell.cell_type == "code"
    ]


def _print_findings(results: list[tuple[SourceCell, list[dict[str, Any]]]], files: int, out: TextIO) -> None:
    counts = {"certain": 0, "likely": 0}
    fixable = 0
    for cell, findings in results:
        for finding in findings:
            r = finding["range"]
            fix = finding["fix"]
            counts[finding["certainty"]] += 1
            fixable += fix is not None
            likely = " (likely)" if finding["certainty"] == "likely" else ""
            rewrite = f" [fix: {fix['safety']}]" if fix else ""
            print(f"{cell.location(r['line'], r['col'])}: {finding['rule']} {finding['message']}{likely}{rewrite}", file=out)
    total = counts["certain"] + counts["likely"]
    where = f"{files} file{'s' if files != 1 else ''}"
    if total:
        print(
            f"Found {total} sync{'s' if total != 1 else ''} in {where} ({counts['certain']} certain, "
            f"{counts['likely']} likely); {fixable} with a rewrite.",
            file=out,
        )
    else:
        print(f"No syncs found in {where}.", file=out)


def _static_report(cell: SourceCell, findings: list[dict[str, Any]]) -> dict[str, Any]:
    """One v1 report (mode static, device kind none) for a cell, wrapped with where it came from."""
    from syncfree.report import build_report, device_info

    report = build_report(
        source=cell.source,
        device=device_info("none", "static analysis: nothing ran"),
        mode="static",
        findings=findings,
        cell_id=cell.cell_id,
    )
    return {"path": cell.path, "cell": cell.number, "report": report}


# --------------------------------------------------------------------------------------------------- run
def run(
    notebook_path: str,
    *,
    timeout: float = 600,
    output: str | None = None,
    watch_all: bool = True,
    allow_errors: bool = False,
    kernel_name: str = "python3",
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    path = Path(notebook_path)
    if path.suffix != ".ipynb":
        raise UsageProblem(f"{notebook_path}: syncfree run takes an .ipynb notebook")
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageProblem(f"cannot read {path} as a notebook: {error}") from None
    extra = {}
    if os.name == "posix":
        # Unix sockets rather than TCP: the kernel stays private to this run (and ipykernel
        # does not warn about unencrypted TCP).
        from jupyter_client.manager import KernelManager

        # An absolute socket path: the kernel runs in the notebook's folder, not ours.
        sockets = tempfile.mkdtemp(prefix="syncfree-kernel-")
        extra["km"] = KernelManager(kernel_name=kernel_name, transport="ipc",
                                    ip=os.path.join(sockets, "kernel"))
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=kernel_name,
        **extra,
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(path.resolve().parent)}},
    )
    # nbclient shuts down only a kernel whose manager it made itself (nbclient/client.py,
    # setup_kernel): ours too.
    client.owns_km = True
    # Loaded directly rather than with %load_ext, so that the notebook's own
    # `%load_ext syncfree` still runs quietly (the extension's load is idempotent).
    setup = ("import syncfree as _syncfree\n_syncfree.load_ipython_extension(get_ipython())\n"
             "del _syncfree" + ("\n%syncfree on" if watch_all else ""))
    failure = None
    try:
        _execute(client, notebook, setup)
    except (CellExecutionError, CellControlSignal, DeadKernelError, TimeoutError, RuntimeError) as error:
        failure = error
    finally:
        if "km" in extra:
            shutil.rmtree(os.path.dirname(extra["km"].ip), ignore_errors=True)
    reports = _print_reports(notebook, str(path), out)
    if output:
        nbformat.write(notebook, output)
    if failure is not None:
        message = str(failure).strip().splitlines()
        print(f"syncfree: error: {path} did not run to the end: {message[-1] if message else type(failure).__name__}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_FOUND if any(report["totals"]["syncs"] for report in reports) else EXIT_CLEAN


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


def _print_reports(notebook: Any, path: str, out: TextIO) -> list[dict[str, Any]]:
    """Print the text of each cell's report output; return the reports."""
    reports = []
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
            if REPORT_MIME_TYPE not in data:
                continue
            report = data[REPORT_MIME_TYPE]
            if isinstance(report, str):  # some writers store JSON MIME data as text
                report = json.loads(report)
            reports.append(report)
            text = data.get("text/plain") or f"syncfree: {report['totals']['syncs']} syncs"
            text = "".join(text) if isinstance(text, list) else text
            print(f"{path}:cell {number}: {text}", file=out)
    if not reports:
        print(f"{path}: no syncfree reports (no cell synchronized)", file=out)
    return reports


if __name__ == "__main__":
    sys.exit(main())
