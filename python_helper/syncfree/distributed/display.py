"""A merged report in Jupyter: one display output that the JupyterLab extension renders as
a table (src/merged/: a column per rank, divergent sites marked, sites that open their
file), with an HTML table (VS Code, nbviewer, GitHub) and the text of ``syncfree merge``
(nbconvert to text, a terminal IPython) for the other frontends.

    display_merged(MergedReport.from_directory("syncfree-ranks"))

`%syncfree merge DIR` and `%syncfree run --nproc-per-node N train.py` (magic.py) show it
so; a `MergedReport` that is a cell's last expression displays itself the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol


class MergedReport(Protocol):
    """What this module reads of a `syncfree.distributed.merge.MergedReport` (merge.py imports this module, for the
    report's ``_repr_mimebundle_``; this one imports nothing of it)."""

    directory: str | None
    spread_after: int

    def to_dict(self) -> dict[str, Any]: ...

    def text(self) -> str: ...

__all__ = ["MAX_SITES", "MIME_TYPE", "SCHEMA_PATH", "display_merged", "merged_data", "merged_html", "mime_bundle",
           "validate_merged"]

#: The MIME type of a merged report (src/merged/tokens.ts says the same).
MIME_TYPE = "application/vnd.syncfree.merged.v1+json"
SCHEMA_PATH = Path(__file__).with_name("merged.schema.json")
#: The most sites a displayed report carries (merged.schema.json: sites maxItems); the
#: least costly are left out, and counted in ``truncated``.
MAX_SITES = 1000


def merged_data(merged: MergedReport) -> dict[str, Any]:
    """The MIME type's data: the merge as a dict, plus what the renderer needs to show it
    (merged.schema.json)."""
    data = merged.to_dict()
    sites = data["sites"]
    data["truncated"] = max(len(sites) - MAX_SITES, 0)
    data["sites"] = sites[:MAX_SITES]  # ranked costliest first
    data["version"] = 1
    data["spread_after"] = merged.spread_after
    data["directory"] = merged.directory
    # Each site's file relative to the kernel's working folder, which JupyterLab starts in the
    # notebook's folder: the renderer opens it from there. No absolute path (a home folder, a
    # user name) is saved in the notebook with the output.
    here = os.getcwd()
    for site in data["sites"]:
        site["path"] = _from(here, site["path"])
    return data


def _from(here: str, path: str | None) -> str | None:
    """``path`` relative to ``here`` in '/' form; None when it has no relative form (another drive)."""
    if not path or not os.path.isabs(path):
        return None
    try:
        return os.path.relpath(path, here).replace(os.sep, "/")
    except ValueError:
        return None


# As report.py's table for one cell (report_html).
_CELL = "padding:2px 8px;text-align:left;border-bottom:1px solid rgba(128,128,128,0.3);"
_NUM = _CELL.replace("text-align:left", "text-align:right") + "white-space:nowrap;"


def merged_html(data: dict[str, Any]) -> str:
    """A table (text/html) for frontends without the extension (VS Code, nbviewer, GitHub): the
    sites with a column per rank (min/median/max past ``spread_after``), divergent sites marked,
    the per-rank totals. Every string is escaped; colours are inherited or translucent."""
    import statistics
    from html import escape as e

    ranks = [t["rank"] for t in data["ranks"]]
    spread = len(ranks) > data["spread_after"]

    def cells(rows: list[dict[str, Any]], absent: str) -> str:
        if not spread:
            by_rank = {row["rank"]: row for row in rows}
            return "".join(f'<td style="{_NUM}">{e(_count(by_rank.get(rank), absent))}</td>' for rank in ranks)
        low = min(rows, key=lambda row: (row["count"], row["rank"]))
        high = max(rows, key=lambda row: (row["count"], -row["rank"]))
        median = statistics.median(row["count"] for row in rows)
        return (f'<td style="{_NUM}">×{low["count"]} (rank {low["rank"]})</td>'
                f'<td style="{_NUM}">×{median:g}</td>'
                f'<td style="{_NUM}">×{high["count"]} (rank {high["rank"]})</td>')

    heads = ["min", "median", "max"] if spread else [f"rank {rank}" for rank in ranks]
    head = (f'<th style="{_CELL}">Where</th><th style="{_CELL}">What</th>'
            + "".join(f'<th style="{_NUM}">{e(h)}</th>' for h in heads) + f'<th style="{_NUM}">Total</th>')
    rows = []
    for site in data["sites"]:
        where = f'{site["file"]}:{site["line"]}' if site["file"] else f'line {site["line"]}'
        what = e(site["label"].replace("`", ""))
        if site["rule"]:
            what += f' <span style="opacity:0.7" title="{e(site["title"] or "")}">{e(site["rule"])}</span>'
        if site["divergent"]:
            what += ' <span style="border:1px solid;border-radius:8px;padding:0 4px;opacity:0.8">divergent</span>'
        if site.get("phase"):  # paid once: ranked after the recurring sites (the JupyterLab table's badge)
            badge = "once: compiling" if site["phase"] == "compile" else "once"
            what += f' <span style="border:1px solid;border-radius:8px;padding:0 4px;opacity:0.6">{badge}</span>'
        rows.append(f'<tr><td style="{_CELL}">{e(where)}</td><td style="{_CELL}">{what}</td>'
                    f'{cells(site["per_rank"], "—")}<td style="{_NUM}">{e(_count(site))}</td></tr>')
    totals = [{"rank": t["rank"], "count": t["counted"], "blocked_ms": t["blocked_ms"]} for t in data["ranks"]]
    total = {"count": data["totals"]["counted"], "blocked_ms": data["totals"]["blocked_ms"]}
    rows.append(f'<tr style="font-weight:600"><td style="{_CELL}" colspan="2">per rank</td>{cells(totals, "×0")}'
                f'<td style="{_NUM}">{e(_count(total))}</td></tr>')
    headline = f"syncfree ({data['mode']}, {data['device']}): {data['summary']}"
    parts = ['<div class="jp-syncfree-merged-report" style="font-size:0.9em;line-height:1.4">',
             f'<div style="font-weight:600;margin-bottom:2px">{e(headline)}</div>',
             f'<table style="border-collapse:collapse;margin:0"><thead><tr>{head}</tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>']
    parts += [f'<div style="opacity:0.75">note: {e(note)}</div>' for note in data["notes"]]
    parts += [f'<div>warning: {e(problem)}</div>' for problem in data["problems"]]
    parts.append("</div>")
    return "".join(parts)


def _count(row: dict[str, Any] | None, absent: str = "×0") -> str:
    """``×10``, ``×10 · 4.2 ms``; ``absent`` for none (``—``: a rank that never made the sync)."""
    if not row or not row["count"]:
        return absent
    blocked = row.get("blocked_ms")
    return f"×{row['count']}" + (f" · {blocked:.1f} ms" if isinstance(blocked, (int, float)) else "")


def mime_bundle(merged: MergedReport) -> dict[str, Any]:
    data = merged_data(merged)
    return {MIME_TYPE: data, "text/html": merged_html(data), "text/plain": merged.text()}


def display_merged(merged: MergedReport) -> None:
    """One display output carrying the merged report (needs IPython, imported here only)."""
    from IPython.display import display

    display(mime_bundle(merged), raw=True)


def validate_merged(data: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` is a valid merged report (needs
    the ``jsonschema`` package, the ``test`` extra)."""
    from syncfree.report import schema_validator

    schema_validator(SCHEMA_PATH).validate(data)
    if json.loads(json.dumps(data)) != data:
        raise ValueError("merged report does not survive a JSON round trip")
