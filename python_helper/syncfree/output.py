"""Diagnostics of ``syncfree check`` and ``syncfree run`` in the formats CI tools read: text, json, sarif, github.

One :class:`Diagnostic` per finding (check) or sync site (run); every format is written from the same list, so the
formats never disagree. :class:`ReportOutput` is where they go: ``--output-file FILE`` or stdout, and, for a program
``syncfree run`` runs, the program's own stdout kept out of a machine-readable report. Lines are 1-based; columns are 1-based in every format here (as editors, SARIF and GitHub
count them), unlike the report schema's 0-based ``col``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping, Sequence

from .jsontext import dumps as json_dumps
from .parsing import code_columns
from .paths import is_dir
from .records import Record

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    import re
    from typing import Any, TextIO

__all__ = ["FORMATS", "MACHINE_FORMATS", "Diagnostic", "OutputFileError", "ReportOutput", "Style", "clean_text",
           "code_columns", "site_diagnostic", "site_what", "text_line", "write_diagnostics"]

FORMATS = ("text", "json", "sarif", "github")
MACHINE_FORMATS = ("json", "sarif", "github")  # read by programs: nothing else may share their stream
SYNTAX_ERROR = "syntax-error"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

# C0 and C1 control characters except tab and newline, and ANSI escape sequences: what a notebook output or a
# message must not carry to a terminal (screen clearing, title setting).
# (compiled when first used: a json report cleans no text, and the two were a hundredth of a warm check)
_ESCAPE = r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]"
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"
_CLEANERS: list[re.Pattern[str]] = []
#: The characters _CONTROL matches: a text without any is clean.
_CONTROLS = frozenset(chr(code) for code in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)))


def clean_text(text: str) -> str:
    """``text`` without escape sequences or control characters (tab and newline kept)."""
    if text.isprintable() or _CONTROLS.isdisjoint(text):
        return text  # (nothing to clean, every escape sequence starting with one: re, with enum, is not imported)
    if not _CLEANERS:
        import re

        _CLEANERS[:] = [re.compile(_ESCAPE), re.compile(_CONTROL)]
    escape, control = _CLEANERS
    return control.sub("", escape.sub("", text))


class Diagnostic(Record):
    """One finding or sync site, located in a file (``cell`` None) or a notebook cell (1-based among all cells).

    A frozen record (syncfree.records: what a frozen dataclass gives, without the dataclasses module, a tenth of a
    ``syncfree check`` whose results all come from its cache); ``_fields`` names the fields in order."""

    path: str
    line: int
    col: int  # 1-based
    end_line: int
    end_col: int  # 1-based, exclusive
    rule: str  # an SF code, or "syntax-error"
    message: str
    cell: int | None = None
    cell_id: str | None = None
    certainty: str = "certain"  # certain | likely | possible | measured | predicted
    fix: str | None = None  # the fix's safety (safe | review) when the catalog has a rewrite
    count: int | None = None  # run: how often the site synced
    blocked_ms: float | None = None  # run: time the CPU waited there
    # run --cost: the GPU time its syncs lost (syncfree.cost), total and per sync; None: not measured. Leads blocked_ms.
    cost_ms: float | None = None
    cost_each_ms: float | None = None
    # run: each distinct call chain that reached the site, outer -> inner, as "path:line" (the last is the site);
    # None where the site is all there is
    chains: tuple[tuple[str, ...], ...] | None = None
    processes: tuple[str, ...] | None = None  # run: the forked child processes it synced in (None: the program's)
    # check: the rewrite itself (title, and edits as (line, col, end_line, end_col, text), 1-based columns)
    fix_title: str | None = None
    fix_edits: tuple[tuple[int, int, int, int, str], ...] | None = None
    # check: what identifies the finding across commits (rule, path, the code it covers, its n-th repeat), for SARIF's
    # partialFingerprints; code scanning matches a result to the same one in an earlier run by it
    fingerprint: str | None = None
    # run: the library line inside an installed package where the sync happened, under this (user) line
    # (report.schema.json LibraryLine: package, file, line, function, text, rule, entry); None for the user's own
    inside: dict[str, Any] | None = None
    # run: "once" (the line runs once: setup, a final checkpoint) or "compile" (torch.compile); None: recurring
    phase: str | None = None
    # run, a recurring row with blocked time: what its first calls blocked (each site's first sync: warm-up), part of
    # blocked_ms, and how many syncs that is; the row is ranked by the rest (syncfree.capture.sites.rank_key)
    first_ms: float | None = None
    first_calls: int | None = None
    # a watch's site: the Python thread it synced in (not the main one), and its share of the GPU time (0..1)
    thread: str | None = None
    cost_share: float | None = None

    _fields = ("path", "line", "col", "end_line", "end_col", "rule", "message", "cell", "cell_id", "certainty", "fix",
               "count", "blocked_ms", "cost_ms", "cost_each_ms", "chains", "processes", "fix_title", "fix_edits",
               "fingerprint", "inside", "phase", "first_ms", "first_calls", "thread", "cost_share")

    def __init__(self, path: str, line: int, col: int, end_line: int, end_col: int, rule: str, message: str,
                 cell: int | None = None, cell_id: str | None = None, certainty: str = "certain", fix: str | None = None,
                 count: int | None = None, blocked_ms: float | None = None, cost_ms: float | None = None,
                 cost_each_ms: float | None = None, chains: tuple[tuple[str, ...], ...] | None = None,
                 processes: tuple[str, ...] | None = None, fix_title: str | None = None,
                 fix_edits: tuple[tuple[int, int, int, int, str], ...] | None = None, fingerprint: str | None = None,
                 inside: dict[str, Any] | None = None, phase: str | None = None, first_ms: float | None = None,
                 first_calls: int | None = None, thread: str | None = None, cost_share: float | None = None) -> None:
        self.__dict__.update(
            path=path, line=line, col=col, end_line=end_line, end_col=end_col, rule=rule, message=message, cell=cell,
            cell_id=cell_id, certainty=certainty, fix=fix, count=count, blocked_ms=blocked_ms, cost_ms=cost_ms,
            cost_each_ms=cost_each_ms, chains=chains, processes=processes, fix_title=fix_title, fix_edits=fix_edits,
            fingerprint=fingerprint, inside=inside, phase=phase, first_ms=first_ms, first_calls=first_calls,
            thread=thread, cost_share=cost_share)

    def location(self) -> str:
        """``path:line:col`` (a file), ``path:cell 3:line 4:col 9`` (a notebook's cell), ``line 4:col 9`` (the cell a
        report is about: no path); a column of 0 (not known) is left out."""
        col = f":{self.col}" if self.col else ""
        if self.cell is None and self.path:
            return f"{self.path}:{self.line}{col}"
        cell = f"{self.path}:cell {self.cell}:" if self.cell is not None else ""
        return f"{cell}line {self.line}" + (f":col {self.col}" if self.col else "")


class Style:
    """Colour for a terminal, plain text otherwise: off when NO_COLOR is set, TERM is dumb or ``out`` is no TTY."""

    def __init__(self, out: TextIO, *, force: bool | None = None) -> None:
        if force is not None:
            self.on = force
        else:
            tty = getattr(out, "isatty", None)
            self.on = bool(tty and tty()) and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        return self._wrap("1;31", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)


def write_diagnostics(
    diagnostics: Sequence[Diagnostic],
    output_format: str,
    out: TextIO,
    *,
    summary: str | None = None,
    style: Style | None = None,
    tool_version: str = "0.0.0",
) -> None:
    """Write ``diagnostics`` in ``output_format``; ``summary`` closes the text format (the other formats carry none)."""
    if output_format == "json":
        # One entry a line: json.dumps without indent is the C encoder (indent=1 runs the pure-Python one, most of a
        # warm check's time), and one write (json.dump writes each of the encoder's small pieces on its own).
        # (syncfree.jsontext: json.dumps's text, without json's import and its re)
        entries = [json_dumps(_json_entry(d)) for d in diagnostics]
        out.write("[\n" + ",\n".join(entries) + "\n]\n" if entries else "[]\n")
    elif output_format == "sarif":
        import json

        out.write(json.dumps(sarif_log(diagnostics, tool_version), indent=1) + "\n")
    elif output_format == "github":
        for d in diagnostics:
            out.write(_github_line(d) + "\n")
    else:
        style = style or Style(out)
        for d in diagnostics:
            out.write(text_line(d, style) + "\n")
        if summary:
            out.write(summary + "\n")


# ------------------------------------------------------------------------------------- the words of a site
#: How a site's phase reads beside it (report.schema.json SyncSite.phase; recurring: nothing).
PHASE_WORDS = {"once": "paid once: the line runs once", "compile": "paid once: torch.compile compiling"}


def ms_text(ms: float) -> str:
    """``12.3 ms``, ``0.42 ms``, ``0.013 ms``: enough digits for a per-call mean."""
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms" if ms >= 0.1 else f"{ms:.3f} ms"


def first_call_text(count: int, blocked_ms: float | None, first_ms: float | None,
                    firsts: int = 1) -> str:
    """``first sync 98.0 ms, then 0.013 ms per sync ×19``: a recurring site's first call (its
    first sync: warm-up) apart from the rest. ``firsts``: how many first syncs ``first_ms``
    sums (a row of several call chains has one each). Empty when not measured, or when
    there is no rest (a site that synced once: its blocked time says it all)."""
    rest = count - firsts
    if blocked_ms is None or first_ms is None or rest <= 0:
        return ""
    first = f"first sync{'s' if firsts > 1 else ''} {ms_text(first_ms)}"
    steady = max(blocked_ms - first_ms, 0.0)
    return f"{first}, then {ms_text(steady / rest)} per sync ×{rest}"


def site_first_call_text(site: Mapping[str, Any]) -> str:
    """`first_call_text` of a report's site; empty for a one-off site (all of it is paid once)."""
    if site.get("phase", "recurring") != "recurring":
        return ""
    return first_call_text(site["count"], site.get("blocked_ms"), site.get("first_ms"))


def library_text(library: Mapping[str, Any]) -> str:
    """``inside transformers/trainer.py:1922 `if torch.isnan(...)` [SF103]; SFL101 switch:
    TrainingArguments(logging_nan_inf_filter=False)``: the library line under a user line."""
    text = f"inside {library['file']}:{library['line']}"
    if library.get("text"):
        text += f" `{library['text']}`"
    if library.get("rule"):
        text += f" [{library['rule']}]"
    entry = library.get("entry")
    if entry:
        text += f"; {entry['code']} {entry['title']} ({entry['how_often']}); switch: {entry['switch']}"
    return text


def defined_in_text(defined_in: Mapping[str, Any]) -> str:
    """``in helper(), defined in In [3] line 8: `return y.item()```: where a sync inside a
    function from an earlier notebook cell happened (the site's line is the calling one)."""
    text = f"in {defined_in['function']}(), defined in {defined_in['cell']} line {defined_in['line']}"
    return text + (f": `{defined_in['text']}`" if defined_in.get("text") else "")


def predict_table_lines(report: Mapping[str, Any]) -> list[str]:
    """What predict mode's op table adds for the user: calls it had no measurement for,
    and that it was measured with another torch version (one line each)."""
    table = report.get("predict_table")
    if not isinstance(table, Mapping):
        return []
    lines = []
    calls = table.get("unmeasured_calls") or 0
    if calls:
        ops = table.get("unmeasured_ops") or []
        names = ", ".join(str(op.get("name")) for op in ops[:3])
        more = f", and {len(ops) - 3} more" if len(ops) > 3 else ""
        lines.append(f"predict mode: {calls} call{'s' if calls != 1 else ''} to {len(ops)} "
                     f"op{'s' if len(ops) != 1 else ''} without a measurement "
                     f"({names}{more}); they may sync")
    if table.get("version_note"):
        lines.append(str(table["version_note"]))
    return lines


#: How a certainty reads after the message (certain and measured: nothing to say).
CERTAINTY_WORDS = {"likely": "likely", "possible": "possible", "predicted": "predicted", "static": "static check"}


def text_line(d: Diagnostic, style: Style | None = None) -> str:
    """The one layout of a site (or a finding) in every text surface: ``syncfree run`` and ``check``, a watch's
    report, the pytest summary, a notebook report's text, a merged report; ruff's ``path:line:col: CODE message``,
    then the figures in one fixed order::

        train.py:41:13: SF101 `.item()` waits for the GPU (predicted) ×64, cost 1.20 ms of GPU time (0.019 ms
        each), blocked 3.1 ms (first sync 2.0 ms, then 0.017 ms per sync ×63), once: the line runs once,
        in thread T [fix: safe] (called from train.py:48 <- train.py:54; in child process Worker-1)

    and the library line where the sync happened inside an installed package on the next line, indented."""
    style = style or Style(io.StringIO(), force=False)
    extra = ""
    if d.certainty in CERTAINTY_WORDS:
        extra += f" ({CERTAINTY_WORDS[d.certainty]})"
    if d.count is not None:
        extra += f" ×{d.count}"
    if d.cost_ms is not None:  # what it cost leads; blocked time (the GPU work already queued) second
        extra += f", cost {d.cost_ms:.2f} ms of GPU time"
        if d.cost_each_ms is not None:
            share = f", {d.cost_share * 100:.1f}% of the GPU's time" if d.cost_share is not None else ""
            extra += f" ({d.cost_each_ms:.3f} ms each{share})"
    if d.blocked_ms:
        extra += f", blocked {d.blocked_ms:.1f} ms"
        first = _first_call(d)
        if first:
            extra += f" ({first})"
    if d.phase == "once" and d.chains and len(d.chains) > 1:  # a function called from lines that each run once
        extra += ", paid once: each line that calls it runs once"
    elif d.phase:
        extra += f", {PHASE_WORDS.get(d.phase, d.phase)}"
    if d.thread:
        extra += f", in thread {clean_text(d.thread)}"
    if d.fix:
        extra += f" [fix: {d.fix}]"
    where = _context(d)
    if where:
        extra += f" ({where})"
    line = f"{style.bold(d.location())}: {style.red(d.rule)} {clean_text(d.message)}{style.dim(extra) if extra else ''}"
    if d.inside:  # the library line under the user's line (library_text)
        line += "\n    " + clean_text(library_text(d.inside))
    return line


def shown_path(path: str) -> str:
    """``path`` relative to the current folder when it is under it (a watch's sites), else as it is."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


def watch_site_line(site: Any) -> str:
    """A watch's site (a `syncfree.capture.sites.SyncSite`) as `text_line` writes it, its path relative to the
    current folder, the library line under it indented to follow a report's two-space rows."""
    files = site.files or ()
    chain = tuple(f"{shown_path(f)}:{n}" for f, n in zip(files, site.chain))
    d = site_diagnostic(site, shown_path(site.file) if site.file else "",
                        chains=(chain,) if len(chain) > 1 else None)
    return text_line(d).replace("\n", "\n  ")


def watch_report_text(report: Any) -> str:
    """A `syncfree.watches.WatchReport` as text: its summary, then a row per site (`watch_site_line`): those that
    repeat first, ranked by their cost after the first call; then what is paid once (the syncs of lines that run
    once: setup, compilation, and the first calls of the others: warm-up); the allowed ones; the notes."""
    lines = [report.summary()]
    lines += [f"  {watch_site_line(s)}" for s in report.sites if not s.one_off]
    once = [s for s in report.sites if s.one_off]
    firsts = [s.first_ms for s in report.sites if not s.one_off and s.first_ms is not None]
    if once or firsts:
        lines.append("  " + once_line(sum(s.count for s in once),
                                      [s.blocked_ms for s in once if s.blocked_ms is not None], firsts))
        lines += [f"  {watch_site_line(s)}" for s in once]
    for site in report.allowed:  # the words before the library line under it, if any
        first, newline, rest = watch_site_line(site).partition("\n")
        lines.append(f"  {first}, allowed by a comment{newline}{rest}")
    if report.outside > 0:
        lines.append(f"  {outside_line(report.outside)}")
    lines += [f"  note: {n}" for n in report.notes]
    lines += [f"  note: {n}" for n in report.predict_table_lines()]
    return "\n".join(lines)


def outside_line(count: int) -> str:
    """``2 syncs outside your code (library or other threads)``."""
    return f"{count} sync{'s' if count != 1 else ''} outside your code (library or other threads)"


def once_line(count: int, blocked: Sequence[float], firsts: Sequence[float]) -> str:
    """``paid once (setup, compilation): 7 syncs, blocked 80.0 ms; the first call of each of the 2 sites above:
    blocked 3.1 ms``: the line of a watch's report (and the pytest summary) over the sites paid once (``count``
    syncs, their measured ``blocked`` times) and the first calls of the repeated ones (``firsts``)."""
    text = f"paid once (setup, compilation): {count} sync{'s' if count != 1 else ''}"
    if blocked:
        text += f", blocked {sum(blocked):.1f} ms"
    if firsts:
        sites = f"each of the {len(firsts)} sites" if len(firsts) != 1 else "the site"
        text += f"; the first call of {sites} above: blocked {sum(firsts):.1f} ms"
    return text


def site_what(rule: str | None, kind: str, label: str | None = None) -> str:
    """What a sync site's line says synced: the explicit call (``label`` when it is one: `torch.cuda.synchronize()`),
    else the rule's title (`.item()` waits for the GPU), else the kind in words."""
    from syncfree.catalog import RULES
    from syncfree.kinds import kind_label

    if label and label != kind_label(kind):
        return label
    if rule in RULES:
        return RULES[rule].title
    return label or kind_label(kind)


def site_diagnostic(site: Any, path: str, *, line_text: str | None = None, **fields: Any) -> Diagnostic:
    """A sync site (a `syncfree.capture.sites.SyncSite`, or its report dict) as the `Diagnostic` that `text_line`
    writes: located at its exact range where known, else at its line's code (``line_text``, or the file's line)."""
    get = site.get if isinstance(site, dict) else lambda name, default=None: getattr(site, name, default)
    chain = list(get("chain") or [])
    line = chain[-1] if chain else get("line")
    span = get("span")
    if span is None and get("range"):
        r = get("range")
        span = (r["line"], r["col"], r["end_line"], r["end_col"])
    if span is not None and span[0] == line:
        col, end_line, end_col = span[1] + 1, span[2], span[3] + 1
    else:
        if line_text is None:
            import linecache

            file = get("file") or ((get("files") or get("chain_files") or [None])[-1])
            line_text = linecache.getline(file, line) if file else ""
        col, end_col = code_columns(line_text) if line_text else (0, 0)
        end_line = line
    predicted = bool(get("predicted"))
    label = get("label")
    if label is None and not isinstance(site, dict):
        label = site.label
    library = get("library")
    if library is not None and not isinstance(library, dict):
        library = library.to_report()
    phase = get("phase")
    first_ms = get("first_ms") if phase in (None, "recurring") and not predicted else None
    cost_ms, count = get("cost_ms"), get("count")
    values: dict[str, Any] = {
        "certainty": "predicted" if predicted else "measured", "count": count,
        "blocked_ms": None if predicted else get("blocked_ms"), "cost_ms": cost_ms,
        "cost_each_ms": get("cost_each_ms") if get("cost_each_ms") is not None else
        (round(cost_ms / count, 4) if cost_ms is not None and count else None),
        "cost_share": get("cost_share"), "inside": library,
        "phase": phase if phase not in (None, "recurring") else None,
        "first_ms": first_ms, "first_calls": 1 if first_ms is not None else None, "thread": get("thread"),
        "processes": tuple(get("process").split(", ")) if get("process") else None,
    }
    values.update(fields)
    return Diagnostic(path, line, col, end_line, end_col if end_line != line or end_col >= col else col,
                      get("rule") or get("kind"), clean_text(site_what(get("rule"), get("kind"), label)), **values)


def _first_call(d: Diagnostic) -> str:
    """``first sync 98.0 ms, then 0.013 ms per sync ×19`` for a recurring row with blocked time; else empty."""
    if d.first_ms is None or d.count is None or d.phase:
        return ""
    return first_call_text(d.count, d.blocked_ms, d.first_ms, d.first_calls or 1)


def _context(d: Diagnostic) -> str:
    """``called from model.py:12 <- train.py:40; in ForkPoolWorker-1, ForkPoolWorker-2``: what a row of ``run``
    gathers besides its site (each caller chain innermost first, as a traceback read upward)."""
    parts = []
    callers = [chain[:-1] for chain in d.chains or () if len(chain) > 1]
    if callers:
        shown = [" <- ".join(reversed(chain)) for chain in callers[:3]]
        more = len(callers) - 3
        more = f"; {more} more call chain{'s' if more != 1 else ''}" if more > 0 else ""
        parts.append("called from " + "; ".join(shown) + more)
    if d.processes:
        names = ", ".join(d.processes[:4]) + (f" and {len(d.processes) - 4} more" if len(d.processes) > 4 else "")
        parts.append(f"in child process{'es' if len(d.processes) > 1 else ''} {names}")
    return clean_text(", ".join(parts))


def _field_names(kind: type[Diagnostic]) -> tuple[str, ...]:
    """The fields of a `Diagnostic` class, a subclass's own included (distributed.emit's ranks and divergent)."""
    return kind._fields


#: Absent from a json entry where None: not the command's (check has no chains, run no fix).
_JSON_OPTIONAL = ("chains", "processes", "fix_title", "fix_edits", "fingerprint", "inside", "phase", "first_ms",
                  "first_calls", "cost_ms", "cost_each_ms", "thread", "cost_share")


def _json_entry(d: Diagnostic) -> dict[str, Any]:
    # The fields as they are, not dataclasses.asdict's deep copy (most of a warm check's time): json writes a tuple as
    # a list, and nothing here keeps the entry.
    names = _field_names(type(d))
    values = d.__dict__
    # (a record's __dict__ holds its fields in their order, set at once: copied whole, not read field by field)
    entry = dict(values) if tuple(values) == names else {name: getattr(d, name) for name in names}
    for key in _JSON_OPTIONAL:
        if entry[key] is None:
            del entry[key]
    if "fix_edits" in entry:
        entry["fix_edits"] = [{"line": line, "col": col, "end_line": end_line, "end_col": end_col, "text": text}
                              for line, col, end_line, end_col, text in entry["fix_edits"]]
    return entry


def _message(d: Diagnostic) -> str:
    """The message as a format without `text_line`'s figures shows it: a predicted site says so."""
    return clean_text(d.message) + (" (predicted)" if d.certainty == "predicted" else "")


def _github_escape(text: str, *, property_value: bool = False) -> str:
    # GitHub's workflow command escaping (actions/toolkit, packages/core/src/command.ts: escapeData/escapeProperty).
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def _github_line(d: Diagnostic) -> str:
    level = "error" if d.rule == SYNTAX_ERROR else "notice" if d.certainty == "possible" else "warning"
    where = f" (cell {d.cell})" if d.cell is not None else ""
    title = f"syncfree {d.rule}{where}"
    properties = [f"file={_github_escape(d.path, property_value=True)}"]
    if d.cell is None:  # a notebook's cell lines are not lines of the .ipynb file
        properties += [f"line={d.line}", f"endLine={d.end_line}", f"col={d.col}", f"endColumn={d.end_col}"]
    properties.append(f"title={_github_escape(title, property_value=True)}")
    where = _context(d)
    message = _message(d) + (f" ({where})" if where else "")
    first = _first_call(d)
    if d.cost_ms is not None:
        message += f" (×{d.count}, cost {d.cost_ms:.2f} ms of GPU time)"
    elif first:  # the row's cost apart from its first call, which warm-up inflates
        message += f" (×{d.count}, blocked {d.blocked_ms:.1f} ms: {first})"
    elif d.count is not None:  # a run's row: how often it synced (a predicted row has no time to show)
        message += f" (×{d.count}{', ' + PHASE_WORDS.get(d.phase, d.phase) if d.phase else ''})"
    if d.inside:  # the library line under the user's line, on a line of its own in the annotation
        message += "\n" + clean_text(library_text(d.inside))
    return f"::{level} {','.join(properties)}::{_github_escape(message)}"


# --------------------------------------------------------------------------------------------------- SARIF
def sarif_log(diagnostics: Sequence[Diagnostic], tool_version: str) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: the catalog's rules that occur (with help text) and one result each."""
    from syncfree.catalog import RULES

    codes = sorted({d.rule for d in diagnostics})
    documentation = _documentation_url() if any(code in RULES for code in codes) else None  # (once: metadata() scans)
    rules = [_sarif_rule(code, RULES.get(code), documentation) for code in codes]
    index = {code: i for i, code in enumerate(codes)}
    results = [_sarif_result(d, index[d.rule]) for d in diagnostics]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "syncfree",
                        "version": tool_version,
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def _sarif_rule(code: str, rule: Any, documentation: str | None) -> dict[str, Any]:
    if rule is None:  # syntax-error
        return {
            "id": code,
            "name": "SyntaxError",
            "shortDescription": {"text": "The file does not parse as Python: nothing in it was checked"},
            "defaultConfiguration": {"level": "error"},
        }
    help_text = f"{rule.why}\n\nUse instead: {rule.fix}"
    return {
        "id": code,
        "name": rule.name,
        **({"helpUri": f"{documentation}#{code.lower()}-{rule.name}"} if documentation else {}),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.why},
        "help": {"text": help_text, "markdown": f"{rule.why}\n\n**Use instead**: {rule.fix}\n\n```python\n{rule.example_after}\n```"},
        "defaultConfiguration": {"level": "warning"},
        "properties": {"category": rule.category, "kind": rule.kind, "dependency": rule.dependency},
    }


def _documentation_url() -> str | None:
    """The catalog's page where rules link to (SARIF ``helpUri``): the installed distribution's ``Documentation``
    project URL (``[project.urls]`` in pyproject.toml), or ``SYNCFREE_DOCS_URL``; None rather than an invented one."""
    configured = os.environ.get("SYNCFREE_DOCS_URL")
    if configured:
        return configured.rstrip("#")
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        urls = metadata("syncfree").get_all("Project-URL") or []
    except (PackageNotFoundError, ValueError):
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("documentation", "docs", "catalog") and url.strip().startswith("https://"):
            return url.strip().rstrip("#")
    return None


def _sarif_result(d: Diagnostic, rule_index: int) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": _uri(d.path)},
        }
    }
    region = {"startLine": d.line, "startColumn": d.col, "endLine": d.end_line, "endColumn": max(d.end_col, 1)}
    if d.cell is None:
        location["physicalLocation"]["region"] = region
    else:
        # A cell's lines are not lines of the .ipynb file: the cell is a logical location, its region a property.
        location["logicalLocations"] = [{"name": f"cell {d.cell}", "kind": "module"}]
        location["properties"] = {"cell": d.cell, "cellId": d.cell_id, "cellRegion": region}
    result: dict[str, Any] = {
        "ruleId": d.rule,
        "ruleIndex": rule_index,
        **({"partialFingerprints": {"syncfreeFinding/v1": d.fingerprint}} if d.fingerprint else {}),
        "level": "error" if d.rule == SYNTAX_ERROR else "note" if d.certainty == "possible" else "warning",
        "message": {"text": _message(d)},
        "locations": [location],
    }
    if d.fix_edits and d.cell is None:
        # The rewrite as a SARIF fix (viewers offer to apply it); a notebook cell's lines are not the file's.
        result["fixes"] = [{
            "description": {"text": d.fix_title or "Rewrite"},
            "artifactChanges": [{
                "artifactLocation": {"uri": _uri(d.path)},
                "replacements": [{
                    "deletedRegion": {"startLine": line, "startColumn": col, "endLine": end_line, "endColumn": end_col},
                    "insertedContent": {"text": text},
                } for line, col, end_line, end_col, text in d.fix_edits],
            }],
        }]
    properties: dict[str, Any] = {"certainty": d.certainty}
    if d.count is not None:
        properties["count"] = d.count
    if d.cost_ms is not None:  # GPU time lost (syncfree.cost), before blocked time
        properties["costMs"] = d.cost_ms
        if d.cost_each_ms is not None:
            properties["costEachMs"] = d.cost_each_ms
    if d.blocked_ms is not None:
        properties["blockedMs"] = d.blocked_ms
    if d.chains:
        properties["chains"] = [list(chain) for chain in d.chains]
    if d.processes:
        properties["processes"] = list(d.processes)
    if d.phase:
        properties["phase"] = d.phase
    if d.first_ms is not None:
        properties["firstMs"] = d.first_ms
        properties["firstCalls"] = d.first_calls
    result["properties"] = properties
    if d.inside:
        # The library line where the sync happened, as a related location (viewers link it); its path is the
        # package's own (transformers/trainer.py), not one of the repository's files.
        result["relatedLocations"] = [{
            "id": 1,
            "physicalLocation": {"artifactLocation": {"uri": _uri(d.inside["file"])},
                                 "region": {"startLine": d.inside["line"]}},
            "message": {"text": clean_text(library_text(d.inside))},
            "properties": {"package": d.inside["package"], "rule": d.inside.get("rule"),
                           **({"entry": d.inside["entry"]["code"]} if d.inside.get("entry") else {})},
        }]
    if d.chains and any(len(chain) > 1 for chain in d.chains):
        # The callers as SARIF code flows (viewers show them as steps), one per chain, outer -> inner.
        result["codeFlows"] = [{"threadFlows": [{"locations": [_flow_step(step) for step in chain]}]}
                               for chain in d.chains if len(chain) > 1]
    return result


def _flow_step(step: str) -> dict[str, Any]:
    path, _, line = step.rpartition(":")
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}
    if line.isdigit():
        location["physicalLocation"]["region"] = {"startLine": int(line)}
    return {"location": location}


def _uri(path: str) -> str:
    from urllib.parse import quote

    return quote(path.replace(os.sep, "/"))


# --------------------------------------------------------------------------------------------------- where
class OutputFileError(ValueError):
    """``--output-file`` names a file that cannot be written (said before anything runs)."""


def _duplicates(fds: tuple[int, ...]) -> dict[int, int]:
    kept = {}
    for fd in fds:
        try:
            kept[fd] = os.dup(fd)  # not inherited by the program's children
        except OSError:  # closed
            pass
    return kept


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class ReportOutput:
    """Where a command's report goes: ``--output-file FILE`` (written whole at the end, so a reader never sees half a
    SARIF log) or stdout.

    A program that ``syncfree run`` runs prints to stdout too. With a machine format (json, sarif, github) and no
    output file, the report keeps stdout to itself: while the program runs, its stdout (file descriptor 1, so its
    subprocesses' too) goes to stderr, where the user still sees it (``syncfree run --format sarif train.py >
    out.sarif`` is valid SARIF however much train.py prints). With an output file, or the text format, the
    program's output stays where it was.
    """

    def __init__(self, path: str | None, output_format: str, stdout: TextIO | None = None) -> None:
        self.path = path
        self.format = output_format
        self.stdout = stdout if stdout is not None else sys.stdout
        self._buffer: io.StringIO | None = None
        self._moved: tuple[int, int] | None = None  # (saved fd 1, pid) while the program's stdout is on stderr
        self._stdout_object: TextIO | None = None  # sys.stdout while the program's is sys.stderr
        self._report_fd: int | None = None  # the report's own stdout once the program's ended (restore_stdout)
        # The text report on the program's stdout: the stream whose writes are followed while the program runs, and
        # whether its last write ended a line ([True] until it writes).
        self._followed: Any = None
        self._line_ended = [True]
        self._as_started: dict[int, int] = {}  # duplicates of fds 1 and 2 while the program runs (take_back_streams)
        if path is not None:
            _check_writable(path)

    def stream(self) -> TextIO:
        """What the report is written to (a buffer for a file, written by `close`)."""
        if self.path is None:
            return self.stdout
        if self._buffer is None:
            self._buffer = io.StringIO()
        return self._buffer

    def close(self) -> None:
        """Write the buffered report to ``--output-file``."""
        if self.path is not None and self._buffer is not None:
            try:
                with open(self.path, "w", encoding="utf-8") as handle:  # (Path.write_text's own open)
                    handle.write(self._buffer.getvalue())
            except OSError as error:
                raise OutputFileError(f"cannot write {self.path}: {error.strerror or error}") from None
            self._buffer = None

    @property
    def moves_program_stdout(self) -> bool:
        return self.path is None and self.format in MACHINE_FORMATS

    @contextlib.contextmanager
    def program_output(self) -> Iterator[None]:
        """Around the program's run: its stdout goes to stderr when the report needs stdout to itself; the text
        report, which follows the program's output on stdout, notes whether the program's last line was ended.
        A report file from an earlier run goes first: a run killed before its end (SIGKILL, a crash) left it in
        place, and a CI step that read it read an earlier run's (clean) report."""
        self._forget_earlier_report()
        self._as_started = _duplicates((1, 2))
        if self.moves_program_stdout:
            self._move_program_stdout()
        elif self.path is None and self.format not in MACHINE_FORMATS:
            self._follow_line_ends()
        try:
            yield
        finally:
            self.restore_stdout()
            for duplicate in self._as_started.values():
                _close(duplicate)
            self._as_started = {}

    def take_back_streams(self) -> None:
        """At a hard end of the program (``os._exit``, a signal), with file descriptors 1 and 2 still where the
        program put them (pytest's capture, under ``syncfree run -m pytest`` without ``-s``, which never puts them
        back then): back where they were as the program started, and ``sys.stdout``/``sys.stderr`` with them, so
        that the report and its lines are seen rather than written into a capture file that is thrown away."""
        for fd, duplicate in self._as_started.items():
            try:
                if not os.path.sameopenfile(fd, duplicate):
                    os.dup2(duplicate, fd)
            except OSError:  # fd closed by the program: put the one it started with there
                try:
                    os.dup2(duplicate, fd)
                except OSError:
                    continue
        for name in ("stdout", "stderr"):
            original = getattr(sys, f"__{name}__")
            if original is not None and getattr(sys, name) is not original:
                setattr(sys, name, original)

    def _forget_earlier_report(self) -> None:
        if self.path is None:
            return
        try:
            if os.path.isfile(self.path):
                os.remove(self.path)
        except OSError:  # not ours to remove (the folder's permissions): written over at the end, as before
            pass

    def begin_report(self) -> None:
        """Just before the report is written to stdout: a stdout whose reader has gone (``syncfree run train.py |
        head``: the program's output closed the pipe) or that the program closed sends the report to stderr, said in
        a line, rather than losing it; a program whose last output to stdout did not end its line gets the line ended,
        so that the report's first row starts a line of its own."""
        if self.path is not None:
            return
        stream = self.stdout
        if _closed_for_writing(stream):
            why = "the program closed it" if getattr(stream, "closed", False) else "its reader has gone"
            print(f"syncfree: stdout is closed ({why}); the report follows on stderr", file=sys.stderr)
            if stream is sys.__stdout__ or stream is sys.stdout:
                silence_stdout()  # what the program left unflushed there must not fail again at exit
            self.stdout = sys.stderr
        elif not self._line_ended[0] and self.format not in MACHINE_FORMATS:
            self._line_ended[0] = True
            stream.write("\n")

    def _follow_line_ends(self) -> None:
        # print() looks `write` up on the stream object, so an instance attribute sees each write without replacing
        # sys.stdout (whose type programs test); writes to file descriptor 1 itself are not seen.
        stream, ended = self.stdout, self._line_ended
        if stream is not sys.stdout:
            return
        write = stream.write

        def write_following(text):
            written = write(text)
            if text:
                ended[0] = text[-1] == "\n"
            return written

        try:
            stream.write = write_following  # STDOUT_FOLLOWER: a traceback through it is shown without it
        except (AttributeError, TypeError):  # a stream without instance attributes
            return
        self._followed = stream

    def _move_program_stdout(self) -> None:
        # Both levels: the file descriptor (what subprocesses and C code write to) and sys.stdout (what print()
        # writes to, which in a host that captures output is no file descriptor at all).
        self._stdout_object, sys.stdout = sys.stdout, sys.stderr
        try:
            self._stdout_object.flush()
            saved = os.dup(1)
            os.dup2(2, 1)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # no file descriptors
            return
        self._moved = (saved, os.getpid())

    def restore_stdout(self) -> None:
        """Give stdout back to the report (idempotent; a forked child of the program keeps the program's)."""
        followed, self._followed = self._followed, None
        if followed is not None:
            with contextlib.suppress(AttributeError):
                del followed.write
        moved, self._moved = self._moved, None
        if moved is not None and os.getpid() != moved[1]:
            return
        if self._stdout_object is not None:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            sys.stdout, self._stdout_object = self._stdout_object, None
        if moved is not None:
            # File descriptor 1 stays on stderr: the program's daemon threads and its subprocesses may still write
            # to it (Python ends a daemon thread only at exit), and the report would share a stream with them. The
            # report goes to the saved descriptor, which only it writes to.
            saved, _ = moved
            original = self.stdout
            if not _on_descriptor(original, 1):  # the report goes to a stream of the caller's: fd 1 goes back
                os.dup2(saved, 1)
                os.close(saved)
                return
            self.stdout = open(saved, "w", encoding=getattr(original, "encoding", None) or "utf-8",  # noqa: SIM115
                               errors=getattr(original, "errors", None) or "strict", closefd=True)
            self._report_fd = saved

    def hand_back_stdout(self) -> None:
        """Before this process replaces itself (a followed ``os.exec*``): file descriptor 1 is the report's stdout
        again, where the new program's run writes its report."""
        saved, self._report_fd = self._report_fd, None
        if saved is None:
            return
        try:
            self.stdout.flush()
            os.dup2(saved, 1)
        except (OSError, ValueError):
            pass


#: (file, function) of the write follower that `ReportOutput.program_output` puts on the program's stdout.
STDOUT_FOLLOWER = (__file__, "write_following")


def _on_descriptor(stream: TextIO, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def _closed_for_writing(stream: TextIO) -> bool:
    """Whether writing to ``stream`` cannot reach anyone: closed, or a pipe whose reader has gone (poll says
    POLLERR on a pipe's write end without readers; streams without a file descriptor are taken as open)."""
    if getattr(stream, "closed", False):
        return True
    try:
        import select

        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # no descriptor, no poll (Windows)
        return False
    return any(event & (select.POLLERR | select.POLLNVAL) for _, event in events)


def silence_stdout() -> None:
    """Point stdout at /dev/null (a closed pipe: Python would report the failed flush at exit)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _check_writable(output: str) -> None:
    # (on names, as Path(output).resolve().parent and its tests answer: a check served from its cache imports no
    # pathlib, `-o` or not)
    folder = os.path.dirname(os.path.realpath(output))
    if is_dir(output):
        raise OutputFileError(f"cannot write {output}: it is a folder")
    if not is_dir(folder):
        raise OutputFileError(f"cannot write {output}: no folder {folder}")
    if not os.access(folder, os.W_OK) or (os.path.exists(output) and not os.access(output, os.W_OK)):
        raise OutputFileError(f"cannot write {output}: permission denied")
