"""A merged report in the formats of ``syncfree run``: text, json, sarif, github.

Each merged site is one `syncfree.output.Diagnostic` (its count and blocked time summed over
the ranks), written by the same emitters as a single run's sites, so the formats agree with
``syncfree run script.py``. The per-rank breakdown rides along: in the message (every
format), as ``ranks``/``divergent`` fields of each json entry, and as properties of each
SARIF result.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from syncfree.output import Diagnostic, write_diagnostics

from .merge import MergedReport, MergedSite

__all__ = ["RankedDiagnostic", "diagnostics", "write_merged"]


class RankedDiagnostic(Diagnostic):
    """A merged site: a `Diagnostic` with what each rank did there."""

    ranks: tuple[dict[str, Any], ...] = ()  # {"rank", "count", "blocked_ms"} for every rank
    divergent: bool = False                 # made on some ranks only
    _fields = (*Diagnostic._fields, "ranks", "divergent")

    def __init__(self, *args: Any, ranks: tuple[dict[str, Any], ...] = (), divergent: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__.update(ranks=ranks, divergent=divergent)


def _diagnostic(merged: MergedReport, site: MergedSite) -> RankedDiagnostic:
    d = merged.site_diagnostic(site)
    return RankedDiagnostic(**{name: getattr(d, name) for name in Diagnostic._fields},
                            ranks=tuple(site.per_rank(merged.ranks)), divergent=site.divergent(merged.ranks))


def diagnostics(merged: MergedReport) -> list[RankedDiagnostic]:
    """One diagnostic per merged site that counts (sites a ``# syncfree: allow`` comment
    covers are left out, as ``syncfree run`` leaves them out)."""
    return [_diagnostic(merged, site) for site in merged.sites if not site.allowed]


def summary_lines(merged: MergedReport, budget: int | None) -> list[str]:
    """What closes the text format: totals, per rank, notes, problems, the budget."""
    summary = merged.summary()
    if budget is not None:
        over = merged.most_counted > budget
        # a rank whose count lacks a process's or an attempt's syncs (lost_children) is not judged: not "kept"
        verdict = "exceeded" if over else "not judged (a rank's count lacks syncs it made)" if merged.lost_children \
            else "kept"
        summary += f" Budget {budget} per rank: {verdict}."
    lines = [summary, *merged.rank_lines()]
    lines += [f"note: {n}" for n in merged.notes()]
    lines += [f"warning: {p}" for p in merged.problems_text()]
    return lines


def write_merged(merged: MergedReport, output_format: str, out: TextIO, *, budget: int | None = None,
                 tool_version: str = "0.0.0") -> None:
    """Write ``merged`` in ``output_format`` (text, json, sarif, github) to ``out``."""
    found = diagnostics(merged)
    if output_format == "sarif":
        from syncfree.output import sarif_log

        log = sarif_log(found, tool_version)
        for result, d in zip(log["runs"][0]["results"], found):
            result.setdefault("properties", {}).update({"ranks": list(d.ranks), "divergent": d.divergent})
        run = log["runs"][0]
        run["properties"] = {"worldSize": merged.world_size, "ranks": [t.to_dict() for t in merged.totals],
                             "missingRanks": merged.missing_ranks}
        json.dump(log, out, indent=1)
        out.write("\n")
        return
    summary = "\n".join(summary_lines(merged, budget)) if output_format == "text" else None
    write_diagnostics(found, output_format, out, summary=summary, tool_version=tool_version)
