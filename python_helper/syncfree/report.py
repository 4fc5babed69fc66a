"""The report of one ``%%syncfree`` run: a dict valid per ``report.schema.json``, and its
HTML and plain-text renderings for frontends without the JupyterLab extension.

`build_report` joins what the recorder saw (sites) with the static findings and the
catalog entries both refer to; `display_report` emits one output whose MIME bundle holds
the report as JSON (``MIME_TYPE``, read by the extension), an HTML table and plain text.
Every string that reaches the HTML passes through `html.escape`.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import sys
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

from .output import (  # the one layout of a site, and its words
    Diagnostic,
    defined_in_text,
    library_text,
    predict_table_lines,
    site_diagnostic,
    site_first_call_text,
    text_line,
)

MIME_TYPE = "application/vnd.syncfree.report.v1+json"
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")

MAX_FINDINGS = 1000  # report.schema.json: findings maxItems
MAX_NOTES = 20       # report.schema.json: notes maxItems
DEVICE_KINDS = ("cuda", "predict", "none")
from .cost import NO_GPU_NO_COST  # noqa: E402  (a predicted report's one line on cost)


def source_hash(source: str) -> str:
    """'sha256:' + hex digest of the exact cell text (magic line included)."""
    return "sha256:" + hashlib.sha256(source.encode("utf-8")).hexdigest()


def device_info(kind: str, name: str | None = None) -> dict:
    """The report's ``device``: the CUDA device watched, the CPU that predicted the syncs, or nothing.

    Reads torch from ``sys.modules`` only: a kernel without torch gets ``torch: null``.
    """
    if kind not in DEVICE_KINDS:
        raise ValueError(f"device kind must be one of {DEVICE_KINDS}, not {kind!r}")
    torch = sys.modules.get("torch")
    version = str(torch.__version__)[:100] if torch is not None else None
    if name is None:
        if kind == "cuda" and torch is not None:
            name = _cuda_device_name(torch)
        elif kind == "predict":
            name = "CPU, no CUDA device"
        else:
            name = "no CUDA device" if torch is not None else "torch not installed"
    return {"kind": kind, "name": name[:200], "torch": version}


# A CUDA device whose name is not read yet: reading it (torch.cuda.current_device, get_device_name) initializes
# CUDA, and a parent that initialized CUDA cannot fork workers that use it ("Cannot re-initialize CUDA in forked
# subprocess", seen on an H200 under `syncfree run`). The name is read once the program has initialized CUDA itself.
UNREAD_CUDA_NAME = "CUDA device"


def _cuda_device_name(torch) -> str:
    if not torch.cuda.is_initialized():
        return UNREAD_CUDA_NAME
    return torch.cuda.get_device_name(torch.cuda.current_device())


def settle_device(device: dict) -> dict:
    """Fill in (in place) the name of a CUDA device that `device_info` could not read without initializing CUDA,
    if the program has initialized it since; returns ``device``."""
    torch = sys.modules.get("torch")
    if device.get("kind") == "cuda" and device.get("name") == UNREAD_CUDA_NAME and torch is not None:
        device["name"] = _cuda_device_name(torch)[:200]
    return device


def build_report(*, source: str, device: Mapping, mode: str, sites: Iterable[Mapping] = (),
                 findings: Iterable[Mapping] = (), syncs: int | None = None,
                 wall_ms: float = 0.0, cell_id: str | None = None, error: Mapping | None = None,
                 notes: Iterable[str] = (), truncated_sites: bool = False,
                 truncated_frames: bool = False, predict_table: Mapping | None = None,
                 cost: Mapping | None = None) -> dict:
    """A report dict, valid per report.schema.json.

    ``sites`` are `SyncSite.to_report()` dicts; ``syncs`` is the total the recorder saw
    (it also counts syncs outside the cell's lines); by default the sites' sum.
    ``rules`` is filled from the catalog for every rule code the sites and findings name.
    ``predict_table`` (predict mode) is `syncfree.capture.optable.report_of`'s dict.
    ``cost``: the totals' cost_ms, gpu_busy_ms and gpu_idle_ms (`SyncRecorder.cost_fields`);
    without it they are null, and a predict-mode report says why in a note.
    """
    site_list = [dict(s) for s in sites]
    if any(s.get("cost_ms") is not None for s in site_list):  # measured: costliest first (sites.rank_key)
        from .capture.sites import rank_key

        site_list.sort(key=lambda s: rank_key(s.get("phase", "recurring") != "recurring", s.get("blocked_ms"),
                                              s.get("first_ms"), s["count"], s.get("cost_ms")))
    _add_chain_text(site_list, source)
    finding_list = [dict(f) for f in findings]
    truncated_findings = len(finding_list) > MAX_FINDINGS
    finding_list = finding_list[:MAX_FINDINGS]
    measured = [s["blocked_ms"] for s in site_list if s.get("blocked_ms") is not None]
    from .processes import lost_children

    notes = list(notes)
    note_list = [str(n)[:500] for n in notes]
    # Children whose syncs are not in the count: kept apart from the notes, whose type a JSON report loses, so that a
    # budget read from the report later is not judged on a count that lacks them.
    lost = [n[:500] for n in lost_children(notes)][:MAX_NOTES]
    cost = dict(cost or {})
    if mode == "predict" and cost.get("cost_ms") is None and NO_GPU_NO_COST not in note_list:
        note_list.append(NO_GPU_NO_COST)
    if truncated_findings:
        last = finding_list[-1]["range"]["line"] if finding_list else 0
        note_list.append(f"static findings: the first {MAX_FINDINGS:,}, up to line {last}; syncs after it "
                         "are still counted and named")
    if len(note_list) > MAX_NOTES:
        note_list = note_list[:MAX_NOTES - 1] + [f"... and {len(note_list) - MAX_NOTES + 1} more notes"]
    codes = {s["rule"] for s in site_list if s.get("rule")} | {f["rule"] for f in finding_list}
    codes |= {s["library"]["rule"] for s in site_list if (s.get("library") or {}).get("rule")}
    report = {
        "version": 1,
        "cell_id": cell_id[:256] if cell_id else None,
        "source_hash": source_hash(source),
        "mode": mode,
        "device": settle_device(dict(device)),
        "totals": {
            "syncs": int(syncs if syncs is not None else sum(s["count"] for s in site_list)),
            "sites": len(site_list),
            "cost_ms": cost.get("cost_ms"),
            "gpu_busy_ms": cost.get("gpu_busy_ms"),
            "gpu_idle_ms": cost.get("gpu_idle_ms"),
            "blocked_ms": round(sum(measured), 3) if measured else None,
            "wall_ms": round(max(float(wall_ms), 0.0), 3),
        },
        "sites": site_list,
        "findings": finding_list,
        "rules": _catalog_rules(codes),
        "error": dict(error) if error else None,
        "notes": note_list,
        "truncated": {
            "sites": bool(truncated_sites),
            "findings": truncated_findings,
            "frames": bool(truncated_frames),
        },
    }
    if lost:
        report["lost_children"] = lost
    if predict_table is not None:
        report["predict_table"] = dict(predict_table)
    return report


def _add_chain_text(sites: list[dict], source: str) -> None:
    """Each cell site's chain lines as they ran (``chain_text``): the notebook finds a
    site's line again by its text once the cell is edited, moved or reopened, and compares
    runs by what ran where rather than by line numbers. Sites of other files (a script's,
    ``file`` set) and chains past the cell's end get none."""
    # Lines as the compiler and the editor count them: not str.splitlines, which also breaks
    # at form feeds and Unicode line separators that a line of code can hold.
    lines = re.split(r"\r\n|\r|\n", source)
    for site in sites:
        chain = site.get("chain") or []
        if site.get("file") or "chain_text" in site or not all(1 <= n <= len(lines) for n in chain):
            continue
        site["chain_text"] = [lines[n - 1].strip()[:200] for n in chain]


def _catalog_rules(codes: set[str]) -> dict:
    if not codes:
        return {}
    from syncfree import catalog

    return {code: catalog.get(code).to_report() for code in sorted(codes)}


# --------------------------------------------------------------------------- renderings


def _blocked_text(ms: float | None) -> str:
    return "" if ms is None else f"{ms:.1f} ms"


def _summary(report: Mapping) -> str:
    totals = report["totals"]
    device = report["device"]
    parts = [f"{totals['syncs']} sync{'s' if totals['syncs'] != 1 else ''}"
             f" at {totals['sites']} site{'s' if totals['sites'] != 1 else ''}"]
    if report["mode"] == "predict":
        parts[0] += " (predicted)"
    if report["mode"] == "static":
        parts = [f"{len(report['findings'])} static finding{'s' if len(report['findings']) != 1 else ''}"]
    if totals.get("cost_ms") is not None:  # what the syncs cost leads (syncfree.cost); blocked time second
        parts.append(f"cost {totals['cost_ms']:.2f} ms of GPU time ({totals['gpu_idle_ms']:.1f} ms of "
                     f"{totals['gpu_busy_ms'] + totals['gpu_idle_ms']:.1f} ms idle)")
    if totals["blocked_ms"] is not None:
        parts.append(f"blocked {totals['blocked_ms']:.1f} ms")
    parts.append(f"cell ran {totals['wall_ms']:.1f} ms")
    return f"syncfree ({report['mode']}, {device['name']}): " + ", ".join(parts)


def _rule_title(report: Mapping, code: str | None) -> str:
    rule = report.get("rules", {}).get(code) if code else None
    return rule["title"] if rule else ""


def report_text(report: Mapping) -> str:
    """Plain-text summary (text/plain): one line per site, in the layout of every text surface
    (`syncfree.output.text_line`: ``line 4:col 9: SF101 `.item()` waits for the GPU (predicted) ×3``),
    then the static findings on lines that did not sync, notes, error."""
    lines = [_summary(report)]
    for site in report["sites"]:
        d = site_diagnostic(dict(site, predicted=site.get("predicted", report.get("mode") == "predict")),
                            site.get("file") or "", line_text="")
        lines.append("  " + text_line(d).replace("\n", "\n  "))
        if site.get("defined_in"):
            lines.append(f"    {defined_in_text(site['defined_in'])}")
    dynamic_lines = {s["line"] for s in report["sites"]}
    for finding in report["findings"]:
        r = finding["range"]
        if r["line"] not in dynamic_lines:
            d = Diagnostic("", r["line"], r["col"] + 1, r["end_line"], r["end_col"] + 1, finding["rule"],
                           finding["message"], certainty="static")
            lines.append(f"  {text_line(d)}")
    for note in [*(report.get("notes") or ()), *predict_table_lines(report)]:
        lines.append(f"  note: {note}")
    error = report.get("error")
    if error:
        lines.append(f"  stopped: {error['type']}: {error['message']}")
    return "\n".join(lines)


_CELL = "padding:2px 8px;text-align:left;border-bottom:1px solid rgba(128,128,128,0.3);"
_NUM = _CELL.replace("text-align:left", "text-align:right")


def report_html(report: Mapping) -> str:
    """A compact table (text/html) for frontends without the extension.

    Colours are inherited or translucent grey, so it reads on light and dark themes.
    """
    e = html.escape
    rows = []
    for site in report["sites"]:
        title = _rule_title(report, site.get("rule"))
        what = e(site["message"])
        if site.get("rule"):
            what += f' <span style="opacity:0.7" title="{e(title)}">{e(site["rule"])}</span>'
        first = site_first_call_text(site)
        if first:
            what += f' <span style="opacity:0.7">({e(first)})</span>'
        if site.get("library"):
            what += f'<div style="opacity:0.8;padding-left:1em">{e(library_text(site["library"]))}</div>'
        if site.get("defined_in"):
            what += f'<div style="opacity:0.8;padding-left:1em">{e(defined_in_text(site["defined_in"]))}</div>'
        chain = " → ".join(str(n) for n in site["chain"])
        rows.append(
            f'<tr><td style="{_NUM}" title="{e("call chain: " + chain)}">{site["line"]}</td>'
            f'<td style="{_CELL}">{what}</td>'
            f'<td style="{_NUM}">{site["count"]}</td>'
            f'<td style="{_NUM}">{e(_blocked_text(site.get("blocked_ms")))}</td></tr>')
    dynamic_lines = {s["line"] for s in report["sites"]}
    for finding in report["findings"]:
        line = finding["range"]["line"]
        if line in dynamic_lines:
            continue
        rows.append(
            f'<tr style="opacity:0.75"><td style="{_NUM}">{line}</td>'
            f'<td style="{_CELL}">{e(finding["message"])} '
            f'<span style="opacity:0.7">{e(finding["rule"])} (static)</span></td>'
            f'<td style="{_NUM}"></td><td style="{_NUM}"></td></tr>')
    parts = ['<div class="jp-syncfree-report" style="font-size:0.9em;line-height:1.4">',
             f'<div style="font-weight:600;margin-bottom:2px">{e(_summary(report))}</div>']
    if rows:
        head = "".join(f'<th style="{style}">{label}</th>' for label, style in
                       (("Line", _NUM), ("What", _CELL), ("Count", _NUM), ("Blocked", _NUM)))
        parts.append(f'<table style="border-collapse:collapse;margin:0">'
                     f'<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    for note in [*(report.get("notes") or ()), *predict_table_lines(report)]:
        parts.append(f'<div style="opacity:0.75">note: {e(note)}</div>')
    error = report.get("error")
    if error:
        parts.append(f'<div>stopped: {e(error["type"])}: {e(error["message"])}</div>')
    parts.append("</div>")
    return "".join(parts)


def mime_bundle(report: Mapping) -> dict:
    return {MIME_TYPE: report, "text/html": report_html(report), "text/plain": report_text(report)}


#: The output metadata of a report made inside another that counts its syncs too (a ``%%syncfree`` run from the code
#: of a watched cell): shown, but its syncs are not counted again where reports are added up (``syncfree run NB``).
NESTED_METADATA = {MIME_TYPE: {"nested": True}}


def display_report(report: Mapping, nested: bool = False) -> None:
    """One display output carrying the report (needs IPython, imported here only); ``nested``: its syncs are also in
    a report that comes after it (NESTED_METADATA)."""
    from IPython.display import display

    display(mime_bundle(report), raw=True, metadata=NESTED_METADATA if nested else None)


def is_nested(output: Mapping) -> bool:
    """Whether a notebook output's report is NESTED_METADATA's: counted in another report of its cell."""
    metadata = output.get("metadata")
    own = metadata.get(MIME_TYPE) if isinstance(metadata, Mapping) else None
    return isinstance(own, Mapping) and own.get("nested") is True


# --------------------------------------------------------------------------- validation


@lru_cache(maxsize=None)
def schema_validator(path: Path = SCHEMA_PATH):
    """A Draft 7 validator of the JSON schema at ``path`` (the report's by default; the
    merged report's in distributed/display.py), made once."""
    import jsonschema

    schema = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def validate_report(report: Mapping) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``report`` is valid per the schema.

    Needs the ``jsonschema`` package (the ``test`` extra). The report must also survive a
    JSON round trip unchanged, as it does when saved in a notebook.
    """
    schema_validator().validate(report)
    if json.loads(json.dumps(report)) != report:
        raise ValueError("report does not survive a JSON round trip")
