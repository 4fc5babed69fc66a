"""``syncfree run script.py ARGS...``: the script under the engine (``syncfree.session.run_script``), its sync
sites as diagnostics in any format."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from syncfree import __version__
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem
from syncfree.output import SYNTAX_ERROR, Diagnostic, write_diagnostics

__all__ = ["run_python"]


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


