"""One report for a distributed job: the rank reports merged into one ranked list of sites.

A site is the same line (and call chain) and the same kind of sync on every rank. For each
merged site: its count and blocked time on each rank (min/median/max past `SPREAD_AFTER`
ranks), and whether it is *divergent* (made on some ranks only: the rank-0-only logging,
the branch one rank takes). Per rank: its totals and exit status; the rank that blocked
most and least. Notes every rank repeats (no CUDA device, the op table's version) are kept
once.

    folder = read_rank_reports("syncfree-ranks")
    merged = MergedReport.from_folder(folder)
    print(merged.text())
"""

from __future__ import annotations

import linecache
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from syncfree.capture.sites import rank_key, steady_ms
from syncfree.kinds import kind_label

from .display import mime_bundle
from .rankfiles import RankReport, RankReportFolder

__all__ = ["MergedReport", "MergedSite", "RankTotals", "SPREAD_AFTER"]

#: With more ranks than this, a site shows min/median/max instead of every rank.
SPREAD_AFTER = 4


def _display_path(path: str | None, cwd: str) -> str | None:
    """A rank's file as the user reads it: relative to the rank's working directory when
    inside it (ranks on other nodes may have the code elsewhere), absolute otherwise."""
    if not path:
        return path
    if cwd:
        try:
            relative = os.path.relpath(path, cwd)
        except ValueError:  # another drive (Windows)
            return path
        if not relative.startswith(".."):
            return relative
    return path


@dataclass
class MergedSite:
    """A sync site of the job: one line and kind, with what each rank did there."""

    file: str | None            # as displayed (see _display_path)
    line: int
    chain: tuple[tuple[str | None, int], ...]  # (file, line) outer -> inner
    kind: str
    rule: str | None
    label: str
    predicted: bool
    allowed: bool
    path: str | None            # the file as the first rank that made it saw it (to read its line)
    in_children: bool = False   # made in the ranks' forked children (DataLoader and Pool workers)
    counts: dict[int, int] = field(default_factory=dict)
    blocked: dict[int, float] = field(default_factory=dict)  # ranks whose blocked time was measured
    # "once" (a line that runs once: setup, a final checkpoint) or "compile" (torch.compile) on
    # every rank and chain that made it; None: recurring (SyncSite.phase)
    phase: str | None = None
    # Per rank, the blocked time paid once inside a recurring row: the first call (first sync) of
    # each of its sites and the whole of a site of it that runs once, as `syncfree run` sums its
    # rows (cli/run_script.py); part of `blocked`. Absent for a rank whose report has no first_ms
    # (not measured, or written before it was).
    first: dict[int, float] = field(default_factory=dict)
    firsts: int = 0  # how many syncs `first` sums over the ranks
    # The call that synced on the line, report.schema.json's Range (0-based columns), from the first rank's site
    # that has one; None: not known (the line's code stands for it)
    range: dict[str, int] | None = None

    @property
    def one_off(self) -> bool:
        """Paid once on every rank, not every step (setup, compilation)."""
        return self.phase is not None

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    @property
    def blocked_ms(self) -> float | None:
        return round(sum(self.blocked.values()), 3) if self.blocked else None

    @property
    def first_ms(self) -> float | None:
        """What the recurring row's first calls blocked on all ranks, part of `blocked_ms`."""
        return round(sum(self.first.values()), 3) if self.first and not self.one_off else None

    def rank_key(self) -> tuple:
        """How it ranks among the merged sites, as every report ranks its sites
        (syncfree.capture.sites.rank_key): recurring ones by their blocked time after the
        first calls, summed over the ranks; one-off ones after them, by their whole."""
        return rank_key(self.one_off, self.blocked_ms, self.first_ms, self.count)

    def phase_fields(self) -> dict[str, Any]:
        """``phase`` where the row is paid once, ``first_ms`` where its first calls were timed:
        as a report's site carries them (report.schema.json), absent otherwise."""
        fields: dict[str, Any] = {"phase": self.phase} if self.phase else {}
        if self.first_ms is not None:
            fields["first_ms"] = self.first_ms
        return fields

    def rank_cost(self, rank: int) -> float | None:
        """What a rank's part is compared by (the least and most blocked rank here): a recurring
        row's blocked time after the first call, a one-off row's whole blocked time."""
        blocked = self.blocked.get(rank)
        return blocked if self.one_off else steady_ms(blocked, self.first.get(rank))

    @property
    def ranks(self) -> list[int]:
        return sorted(self.counts)

    def divergent(self, ranks: Sequence[int]) -> bool:
        """Made on some of ``ranks`` only."""
        return not set(ranks) <= set(self.counts)

    def per_rank(self, ranks: Sequence[int]) -> list[dict[str, Any]]:
        """Count and blocked time on each of ``ranks`` (0 where the rank never made it), and
        what the rank's first calls blocked of it (``first_ms``) where the row recurs and the
        rank measured it."""
        rows = []
        for rank in ranks:
            row: dict[str, Any] = {"rank": rank, "count": self.counts.get(rank, 0),
                                   "blocked_ms": round(self.blocked[rank], 3) if rank in self.blocked else None}
            if not self.one_off and rank in self.first and rank in self.blocked:
                row["first_ms"] = round(self.first[rank], 3)
            rows.append(row)
        return rows

    def spread(self, ranks: Sequence[int]) -> str:
        """``rank 0 ×20, rank 1 ×20`` or, past `SPREAD_AFTER` ranks, ``min ×2 (rank 3),
        median ×20, max ×21 (rank 0)``; blocked times where measured: past `SPREAD_AFTER`
        ranks, the least and the most blocked rank, compared (and shown) by their time after
        the first call on a recurring row whose ranks measured it (`rank_cost`), as the sites
        are ranked."""
        rows = self.per_rank(ranks)
        if len(rows) <= SPREAD_AFTER:
            return ", ".join(f"rank {row['rank']} ×{row['count']}" + _blocked(row["blocked_ms"]) for row in rows)
        low = min(rows, key=lambda row: (row["count"], row["rank"]))
        high = max(rows, key=lambda row: (row["count"], -row["rank"]))
        median = statistics.median(row["count"] for row in rows)
        text = (f"min ×{low['count']} (rank {low['rank']}), median ×{median:g}, "
                f"max ×{high['count']} (rank {high['rank']})")
        measured = [(self.rank_cost(row["rank"]), row["rank"]) for row in rows if row["blocked_ms"] is not None]
        if measured:
            least, most = min(measured), max(measured, key=lambda cost: (cost[0], -cost[1]))
            after = " after the first call" if not self.one_off and any("first_ms" in row for row in rows) else ""
            text += (f"; blocked{after} {least[0]:.1f} ms (rank {least[1]}) to "
                     f"{most[0]:.1f} ms (rank {most[1]})")
        return text


def _absolute(path: str | None, cwd: str) -> str | None:
    """A rank's file as an absolute path (a script named relative to the rank's working directory)."""
    if not path or os.path.isabs(path) or not cwd or path.startswith("<"):
        return path
    return os.path.join(cwd, path)


def _blocked(ms: float | None) -> str:
    return f" ({ms:.1f} ms)" if ms is not None else ""


@dataclass
class RankTotals:
    """One rank's part of the job."""

    rank: int
    syncs: int
    counted: int                # all but the syncs a `# syncfree: allow` comment covers
    blocked_ms: float | None
    unattributed: int           # syncs outside the user's code (library, other threads)
    exit_code: int
    hostname: str
    # What the rank blocked at its recurring sites after their first calls (MergedSite.rank_cost):
    # what the ranks are compared by, as the sites are ranked. None when its report timed no first
    # call apart (predict mode, a report written before first calls were kept).
    recurring_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class MergedReport:
    """The rank reports of one job merged (see the module's docstring)."""

    spread_after = SPREAD_AFTER  # display.py reads it here

    def __init__(self, reports: Sequence[RankReport], *, world_size: int | None = None,
                 problems: Sequence[str] = (), earlier: int = 0, directory: str | None = None,
                 selected: set[str] | None = None) -> None:
        """``selected``: the rule codes to report (None: all); syncs of other rules are left out of the sites
        and of the counted totals, as ``syncfree run --select/--ignore`` leaves them out."""
        self.selected = selected
        self.left_out: dict[int, int] = {}  # rank -> syncs of rules not selected
        self.reports = sorted(reports, key=lambda r: r.rank.rank)
        self.world_size = world_size if world_size is not None else \
            max((r.rank.world_size for r in self.reports), default=0)
        self.problems = list(problems)
        self.earlier = earlier
        self.directory = directory
        self.sites = self._merge_sites()
        self.totals = [self._rank_totals(r, self.left_out.get(r.rank.rank, 0)) for r in self.reports]
        for totals in self.totals:
            totals.recurring_ms = self._recurring_ms(totals.rank)

    @classmethod
    def from_folder(cls, folder: RankReportFolder, selected: set[str] | None = None) -> MergedReport:
        return cls(folder.reports, world_size=folder.world_size, problems=folder.problems,
                   earlier=folder.earlier, directory=str(folder.directory), selected=selected)

    @classmethod
    def from_directory(cls, directory: str | os.PathLike, selected: set[str] | None = None) -> MergedReport:
        """The newest run's rank reports in ``directory`` merged; OSError when the folder
        cannot be read. In Jupyter the result displays itself as a table (a notebook cell's
        last expression), as ``%syncfree merge DIR`` shows it."""
        from .rankfiles import read_rank_reports

        return cls.from_folder(read_rank_reports(directory), selected=selected)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return mime_bundle(self)

    # ------------------------------------------------------------------ merging

    @property
    def ranks(self) -> list[int]:
        return [r.rank.rank for r in self.reports]

    @property
    def missing_ranks(self) -> list[int]:
        present = set(self.ranks)
        return [rank for rank in range(self.world_size) if rank not in present]

    @staticmethod
    def _sites_of(report: RankReport) -> list[tuple[dict, bool]]:
        """(site, in a child) for the rank's own sites and its forked children's (`processes.site_fields`)."""
        found = [(site, False) for site in report.report["sites"]]
        for child in report.children:
            for site in child["sites"]:
                if not isinstance(site, dict) or not site.get("chain") or not isinstance(site.get("count"), int):
                    continue
                files = site.get("files")
                found.append(({**site, "line": site["chain"][-1], "chain_files": files,
                               "file": files[-1] if files else None}, True))
        return found

    def _merge_sites(self) -> list[MergedSite]:
        merged: dict[tuple, MergedSite] = {}
        for report in self.reports:
            rank, cwd = report.rank.rank, report.cwd
            for site, in_child in self._sites_of(report):
                files = site.get("chain_files") or [site.get("file")] * len(site.get("chain") or [site["line"]])
                lines = site.get("chain") or [site["line"]]
                chain = tuple((_display_path(f, cwd), n) for f, n in zip(files, lines))
                label = site.get("label") or kind_label(site["kind"])
                if self.selected is not None and site.get("rule") and site["rule"] not in self.selected:
                    if not site.get("allowed"):  # an allowed site is out of the rank's count already (_rank_totals)
                        self.left_out[rank] = self.left_out.get(rank, 0) + site["count"]
                    continue
                # One row per line and rule (and own/child process), whatever chains led there.
                key = (chain[-1], site.get("rule") or site["kind"], bool(site.get("allowed")), in_child)
                # A rank report without a phase (written before phases were) is recurring.
                phase = site.get("phase") if site.get("phase") in ("once", "compile") else None
                entry = merged.get(key)
                if entry is None:
                    entry = merged[key] = MergedSite(
                        file=_display_path(site.get("file"), cwd), line=site["line"], chain=chain,
                        kind=site["kind"], rule=site.get("rule"), label=label,
                        predicted=bool(site.get("predicted")), allowed=bool(site.get("allowed")),
                        path=_absolute(site.get("file"), cwd), in_children=in_child, phase=phase)
                if entry.range is None and isinstance(site.get("range"), dict):
                    entry.range = site["range"]
                if entry.phase != phase:
                    # Paid once only where every rank and chain into the line is (as `syncfree run`
                    # regroups: a function called once at setup and in the loop recurs).
                    entry.phase = None if phase is None or entry.phase is None else "once"
                # Sites of one rank that differ only by thread add up on that line.
                entry.counts[rank] = entry.counts.get(rank, 0) + site["count"]
                blocked = site.get("blocked_ms")
                if isinstance(blocked, (int, float)):
                    entry.blocked[rank] = entry.blocked.get(rank, 0.0) + float(blocked)
                    # What this site paid once: all of it when it runs once, else its first call.
                    once_ms, once_count = (blocked, site["count"]) if phase is not None else (site.get("first_ms"), 1)
                    if isinstance(once_ms, (int, float)):
                        entry.first[rank] = entry.first.get(rank, 0.0) + float(once_ms)
                        entry.firsts += once_count
        # Ranked as every report ranks its sites (MergedSite.rank_key): recurring ones by their blocked
        # time after the first calls, one-off ones after them; the ranks' forked children after all.
        return sorted(merged.values(), key=lambda s: (s.in_children, *s.rank_key(), s.file or "", s.line, s.kind))

    def _recurring_ms(self, rank: int) -> float | None:
        """The rank's blocked time at the counted recurring sites after their first calls (0 where
        it made none); None when no rank's report timed a first call apart."""
        if not any(site.first for site in self.sites):
            return None
        recurring = [site for site in self.sites if not site.one_off and not site.allowed and rank in site.blocked]
        return round(sum(site.rank_cost(rank) or 0.0 for site in recurring), 3)

    @staticmethod
    def _rank_totals(report: RankReport, left_out: int = 0) -> RankTotals:
        totals = report.report["totals"]
        in_children = sum(child["syncs"] for child in report.children)
        syncs = totals["syncs"]
        sites = report.report["sites"]
        allowed = sum(s["count"] for s in sites if s.get("allowed"))
        blocked = totals.get("blocked_ms")
        counted = totals["counted"] if isinstance(totals.get("counted"), int) else syncs - allowed
        return RankTotals(
            rank=report.rank.rank, syncs=syncs + in_children,
            counted=max(counted + in_children - left_out, 0),
            blocked_ms=float(blocked) if isinstance(blocked, (int, float)) else None,
            unattributed=max(syncs - sum(s["count"] for s in sites), 0),
            exit_code=report.exit_code, hostname=report.rank.hostname)

    # ------------------------------------------------------------------ what it says

    @property
    def syncs(self) -> int:
        return sum(t.syncs for t in self.totals)

    @property
    def counted(self) -> int:
        return sum(t.counted for t in self.totals)

    @property
    def most_counted(self) -> int:
        """The counted syncs of the rank that made most: what a per-rank budget checks."""
        return max((t.counted for t in self.totals), default=0)

    @property
    def lost_children(self) -> list[str]:
        """``rank R: <note>`` for each child process of a rank that ended without a report of its syncs (killed): that
        rank's count lacks them, so a budget cannot be judged on it (as ``syncfree run SCRIPT``)."""
        return [f"rank {report.rank.rank}: {note}" for report in self.reports for note in report.lost_children]

    @property
    def blocked_ms(self) -> float | None:
        measured = [t.blocked_ms for t in self.totals if t.blocked_ms is not None]
        return round(sum(measured), 3) if measured else None

    @property
    def predicted(self) -> bool:
        return bool(self.reports) and all(r.report.get("mode") == "predict" for r in self.reports)

    @property
    def mode(self) -> str:
        modes = sorted({str(r.report.get("mode")) for r in self.reports})
        return modes[0] if len(modes) == 1 else "/".join(modes) if modes else "none"

    @property
    def device(self) -> str:
        names = sorted({str((r.report.get("device") or {}).get("name")) for r in self.reports})
        return names[0] if len(names) == 1 else ", ".join(names)

    @property
    def divergent_sites(self) -> list[MergedSite]:
        return [s for s in self.sites if s.divergent(self.ranks)]

    def extremes(self) -> tuple[RankTotals, RankTotals] | None:
        """(least, most): by the blocked time of the recurring sites after their first calls
        where every rank timed first calls apart (as the sites are ranked: a rank's warm-up or
        its one-off checkpoint does not make it the slowest at every step), else by blocked
        time when every rank measured it, else by counted syncs; None with fewer than two ranks."""
        if len(self.totals) < 2:
            return None
        if all(t.recurring_ms is not None for t in self.totals):
            key = lambda t: (t.recurring_ms, t.counted)  # noqa: E731
        elif all(t.blocked_ms is not None for t in self.totals):
            key = lambda t: (t.blocked_ms, t.counted)  # noqa: E731
        else:
            key = lambda t: (t.counted, 0.0)  # noqa: E731
        ordered = sorted(self.totals, key=lambda t: (*key(t), t.rank))
        return ordered[0], ordered[-1]

    def notes(self) -> list[str]:
        """Each rank's notes once; a note only some ranks have names them."""
        from syncfree.output import predict_table_lines

        seen: dict[str, list[int]] = {}
        for report in self.reports:
            lines = [str(n) for n in report.report.get("notes") or []]
            lines += predict_table_lines(report.report)
            lines += report.child_notes
            if report.children:
                count = sum(child["syncs"] for child in report.children)
                names = sorted({str(child.get("name")).rstrip("-0123456789") or "process" for child in report.children})
                lines.append(f"forked child processes ({', '.join(names)}) synced {count} time"
                             f"{'s' if count != 1 else ''}: the sites marked 'in child processes'")
            for line in dict.fromkeys(lines):
                seen.setdefault(line, []).append(report.rank.rank)
        everyone = self.ranks
        return [note if ranks == everyone else f"{note} ({_rank_list(ranks)})" for note, ranks in seen.items()]

    def problems_text(self) -> list[str]:
        """What is missing from the merge: ranks without a report, unreadable files,
        failed ranks, other runs left out."""
        lines = []
        missing = self.missing_ranks
        if missing:
            where = f" in {self.directory}" if self.directory else ""
            lines.append(f"{_rank_list(missing)} of {self.world_size} left no report{where}: "
                         f"{'its' if len(missing) == 1 else 'their'} syncs are not in this report")
        lines += [f"unreadable rank report {p}" for p in self.problems]
        for totals in self.totals:
            if totals.exit_code != 0:
                lines.append(f"rank {totals.rank} exited with status {totals.exit_code}")
        if self.earlier:
            lines.append(f"{self.earlier} rank report{'s' if self.earlier != 1 else ''} of an earlier run "
                         "left out")
        return lines

    def summary(self) -> str:
        """``41 syncs on 2 of 2 ranks at 3 sites, blocked 80.2 ms, ranked by blocked time after the
        first call, recurring first; 4 once (setup, compilation), 60.1 ms; 1 divergent site (made
        on some ranks only).``: the words of ``syncfree run``'s summary (cli/run_script.py)."""
        n_sites = len(self.sites)
        text = (f"{self.counted} sync{'s' if self.counted != 1 else ''} on {len(self.reports)} of "
                f"{self.world_size} rank{'s' if self.world_size != 1 else ''} at {n_sites} site"
                f"{'s' if n_sites != 1 else ''}{' (predicted)' if self.predicted else ''}")
        if self.blocked_ms is not None:
            text += f", blocked {self.blocked_ms:.1f} ms"
        left_out = sum(self.left_out.values())
        allowed = self.syncs - self.counted - left_out
        if allowed:
            text += f"; {allowed} allowed"
        if left_out:
            text += f"; {left_out} of rules not selected left out"
        own = [site for site in self.sites if not site.in_children]
        if self.blocked_ms is None:
            text += ", ranked by count"
        else:
            # Reports written before first calls were timed apart rank by the whole blocked time.
            after = any(site.first_ms is not None for site in own)
            text += f", ranked by blocked time{' after the first call' if after else ''}"
        text += _once_text(own)
        divergent = len(self.divergent_sites)
        if divergent:
            text += f"; {divergent} divergent site{'s' if divergent != 1 else ''} (made on some ranks only)"
        return text + "."

    def rank_lines(self) -> list[str]:
        """Per-rank totals (one line up to `SPREAD_AFTER` ranks, min/median/max past it) and
        the ranks that blocked most and least."""
        def one(t: RankTotals) -> str:
            text = f"rank {t.rank} {t.counted} sync{'s' if t.counted != 1 else ''}"
            if t.blocked_ms is not None:
                text += f", blocked {t.blocked_ms:.1f} ms"
            return text

        if not self.totals:
            return []
        if len(self.totals) <= SPREAD_AFTER:
            lines = ["per rank: " + "; ".join(one(t) for t in self.totals)]
        else:
            median = statistics.median(t.counted for t in self.totals)
            lines = [f"per rank: median {median:g} syncs"]
        extremes = self.extremes()
        if extremes is not None:
            least, most = extremes
            if least.recurring_ms is not None and most.recurring_ms is not None:
                if (least.recurring_ms, least.counted) != (most.recurring_ms, most.counted):
                    def after(t: RankTotals) -> str:
                        return f"rank {t.rank} {t.recurring_ms:.1f} ms of {t.blocked_ms or 0.0:.1f} ms"

                    lines.append(f"most blocked at recurring sites after their first calls: {after(most)}; "
                                 f"least: {after(least)}")
            elif (least.blocked_ms, least.counted) != (most.blocked_ms, most.counted):
                lines.append(f"most: {one(most)}; least: {one(least)}")
        for t in self.totals:
            if t.unattributed:
                from syncfree.output import outside_line

                lines.append(f"rank {t.rank}: {outside_line(t.unattributed)}")
        return lines

    def site_message(self, site: MergedSite) -> str:
        """What a diagnostic says about a site: what synced, where, on which ranks, how often."""
        from syncfree.output import site_what

        what = site_what(site.rule, site.kind, site.label)
        ranks = self.ranks
        if site.in_children:
            what += " in child processes"
        if site.divergent(ranks):
            where = f"divergent, {site.spread(ranks)}"
        else:
            where = site.spread(ranks)
        return f"{what} [{where}]"

    def site_diagnostic(self, site: MergedSite) -> Any:
        """The site as the `syncfree.output.Diagnostic` every text surface writes (`syncfree.output.text_line`):
        its count, blocked time and first calls summed over the ranks."""
        from syncfree.output import Diagnostic, code_columns

        r = site.range
        if r is not None and r.get("line") == site.line:
            col, end_line, end_col = r["col"] + 1, r["end_line"], r["end_col"] + 1
        else:
            col, end_col = code_columns(linecache.getline(site.path, site.line)) if site.path else (0, 0)
            end_line = site.line
        return Diagnostic(site.file or "", site.line, col, end_line, end_col, site.rule or site.kind,
                          self.site_message(site), certainty="predicted" if site.predicted else "measured",
                          count=site.count, blocked_ms=site.blocked_ms, phase=site.phase,
                          first_ms=site.first_ms, first_calls=site.firsts if site.first_ms is not None else None)

    def text(self) -> str:
        """The merged report as lines (what ``syncfree merge`` prints): each site in the layout of every text
        surface (`syncfree.output.text_line`)."""
        from syncfree.output import text_line

        lines = [f"syncfree ({self.mode}, {self.device}): {self.summary()}"]
        for site in self.sites:
            row = text_line(self.site_diagnostic(site)).replace("\n", "\n  ")
            lines.append(f"  {row}{', allowed by a comment' if site.allowed else ''}")
        lines += [f"  {line}" for line in self.rank_lines()]
        lines += [f"  note: {n}" for n in self.notes()]
        lines += [f"  warning: {p}" for p in self.problems_text()]
        return "\n".join(lines)

    __str__ = text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the whole merge (distributed/merged.schema.json, less what
        `syncfree.distributed.display` adds for a notebook)."""
        from syncfree.catalog import RULES

        ranks = self.ranks
        extremes = self.extremes()
        return {
            "mode": self.mode,
            "summary": self.summary(),
            "device": self.device,
            "world_size": self.world_size,
            "ranks": [t.to_dict() for t in self.totals],
            "missing_ranks": self.missing_ranks,
            "extremes": {"least": extremes[0].rank, "most": extremes[1].rank} if extremes else None,
            "totals": {"syncs": self.syncs, "counted": self.counted, "sites": len(self.sites),
                       "blocked_ms": self.blocked_ms,
                       "divergent_sites": len(self.divergent_sites)},
            "sites": [{"file": s.file, "line": s.line, "chain": [list(c) for c in s.chain],
                       "kind": s.kind, "rule": s.rule, "title": RULES[s.rule].title if s.rule in RULES else None,
                       "label": s.label, "predicted": s.predicted,
                       "allowed": s.allowed, "in_children": s.in_children, "count": s.count,
                       "blocked_ms": s.blocked_ms, **s.phase_fields(),
                       "divergent": s.divergent(ranks), "per_rank": s.per_rank(ranks), "path": s.path}
                      for s in self.sites],
            "notes": self.notes(),
            "problems": self.problems_text(),
        }


def _once_text(sites: Sequence[MergedSite]) -> str:
    """`syncfree run`'s words (`sites.once_text`) over the merged sites: the first calls are the recurring sites'."""
    from syncfree.capture.sites import once_text

    return once_text([(site.count, site.blocked_ms) for site in sites if site.one_off],
                     [site.first_ms for site in sites if not site.one_off and site.first_ms is not None])


def _rank_list(ranks: Sequence[int]) -> str:
    """``rank 0``, ``ranks 0, 2`` or ``ranks 0-7``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))
