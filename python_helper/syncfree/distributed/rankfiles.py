"""Rank reports: the file each rank of a distributed job writes into the job's report
folder, and reading a folder of them back.

Each rank writes ``rank-NNNNN.json`` (its rank, zero-padded): what `WatchReport.to_dict`
gives, plus who the rank was (`RankInfo`), the script, the exit status and when it ran. A
file is written under a temporary name and renamed into place, so a reader sees whole files
only. A later run into the same folder replaces the files of the ranks it has; files of
another run (an earlier job, a larger world) are told apart by the run key and left out of
a merge with a note.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ranks import RankInfo

__all__ = ["DEFAULT_DIRECTORY", "DIRECTORY_VARIABLE", "RankReport", "RankReportFolder",
           "claim_merge", "complete_run", "read_rank_reports", "write_rank_report"]

FORMAT = "syncfree-rank-report"
VERSION = 1
#: Where the ranks of a plain ``torchrun ... -m syncfree run`` write, relative to their
#: working directory, when neither ``--rank-report-dir`` nor the variable below names one.
DEFAULT_DIRECTORY = "syncfree-ranks"
DIRECTORY_VARIABLE = "SYNCFREE_RANK_REPORT_DIR"
_FILE = re.compile(r"rank-(\d+)\.json")
#: A file of the same run key that finished this long before a rank started is an earlier
#: run's (the ranks of one job start within moments of each other).
STALE_AFTER_S = 60.0
# Ranks of one launch run side by side: one that ended this long before another began is an earlier launch's.
TOGETHER_S = 5.0


@dataclass
class RankReport:
    """One rank's report file."""

    rank: RankInfo
    report: dict[str, Any]  # WatchReport.to_dict()
    script: str
    argv: list[str]
    cwd: str
    exit_code: int
    started: float  # time.time() when syncfree started the script
    finished: float
    children: list[dict[str, Any]] = field(default_factory=list)  # ProcessReport.to_dict() of forked children
    child_notes: list[str] = field(default_factory=list)  # children the run could not see
    path: Path | None = field(default=None, compare=False)
    # Of child_notes, the children that ended without a report (`syncfree.processes.LostChild`): a rank's count
    # lacks their syncs, so no budget can be judged on it. Kept apart, since JSON loses the notes' type.
    lost_children: list[str] = field(default_factory=list)

    @property
    def run_key(self) -> str:
        return self.rank.run_key

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "run": self.run_key,
                "rank": self.rank.to_dict(), "script": self.script, "argv": list(self.argv),
                "cwd": self.cwd, "exit_code": self.exit_code, "started": self.started,
                "finished": self.finished, "report": self.report, "children": self.children,
                "child_notes": self.child_notes, "lost_children": self.lost_children}

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> RankReport:
        """ValueError when ``data`` is not a rank report this version reads."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a syncfree rank report")
        if data.get("version") != VERSION:
            raise ValueError(f"rank report version {data.get('version')!r}, this syncfree reads {VERSION}")
        if not isinstance(data.get("rank"), dict):
            raise ValueError("no rank")
        rank = RankInfo.from_dict(data["rank"])
        report = data.get("report")
        if not isinstance(report, dict) or not isinstance(report.get("sites"), list) \
                or not isinstance(report.get("totals"), dict):
            raise ValueError("no report")
        for site in report["sites"]:
            if not isinstance(site, dict) or not isinstance(site.get("count"), int) \
                    or not isinstance(site.get("line"), int) or not isinstance(site.get("kind"), str):
                raise ValueError("a site without line, kind or count")
        if not isinstance(report["totals"].get("syncs"), int):
            raise ValueError("no sync total")
        numbers = [data.get(name) for name in ("started", "finished")]
        if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
            raise ValueError("no start or end time")
        exit_code = data.get("exit_code")
        if not isinstance(exit_code, int) or isinstance(exit_code, bool):
            raise ValueError("no exit status")
        argv = data.get("argv")
        children = data.get("children") or []
        if not isinstance(children, list) or not all(
                isinstance(c, dict) and isinstance(c.get("syncs"), int) and isinstance(c.get("sites"), list)
                for c in children):
            raise ValueError("malformed child processes")
        notes = data.get("child_notes") or []
        lost = data.get("lost_children") or []
        if not isinstance(lost, list):
            raise ValueError("malformed lost child processes")
        return cls(rank, report, str(data.get("script") or ""),
                   [str(a) for a in argv] if isinstance(argv, list) else [],
                   str(data.get("cwd") or ""), exit_code, float(numbers[0]), float(numbers[1]),
                   children, [str(n) for n in notes] if isinstance(notes, list) else [], path,
                   [str(n) for n in lost])


def file_name(rank: int) -> str:
    return f"rank-{rank:05d}.json"


def start_file_name(rank: int, attempt: int) -> str:
    return f"rank-{rank:05d}.attempt-{attempt}.started"


def write_rank_start(directory: str | os.PathLike, rank: RankInfo) -> None:
    """Mark that ``rank`` began its attempt of the job: a later attempt on this rank tells from it
    that one before left no report (its ranks killed: OOM, SIGKILL), whose syncs are then named as lost. OSError when
    it cannot be written."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / start_file_name(rank.rank, rank.restart_count)).write_text(
        json.dumps({"job": rank.run_key.rsplit(" attempt ", 1)[0], "started": time.time()}), encoding="utf-8")


def _attempts_without_a_report(folder: Path, report: RankReport, earlier: RankReport | None) -> list[int]:
    """The attempts of ``report``'s job on its rank, after ``earlier``'s (the last one with a report), that began
    (`write_rank_start`) and left no report."""
    attempt = report.rank.restart_count
    first = earlier.rank.restart_count + 1 if earlier is not None else 0
    lost = []
    for number in range(first, attempt):
        try:
            mark = json.loads((folder / start_file_name(report.rank.rank, number)).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(mark, dict) and mark.get("job") == _job_key(report) \
                and isinstance(mark.get("started"), (int, float)) and mark["started"] <= report.started:
            lost.append(number)
    return lost


def write_rank_report(directory: str | os.PathLike, report: RankReport) -> Path:
    """Write ``report`` as ``directory/rank-NNNNN.json`` (the folder is made if needed);
    OSError when it cannot be written."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(report.rank.rank)
    earlier = _earlier_attempt(path, report)
    if earlier is not None:
        _carry_earlier_attempt(report, earlier)
    if report.rank.restart_count > 0:
        lost = _attempts_without_a_report(folder, report, earlier)
        if lost:  # killed attempts: the job restarted and their syncs went with them (a run over its budget passed)
            shown = ", ".join(str(n) for n in lost)
            report.lost_children = list(report.lost_children) + [
                f"attempt{'s' if len(lost) > 1 else ''} {shown} of the job on this rank began and left no report "
                "(killed before it could write one): its syncs are not counted"]
    temporary = folder / f".{path.name}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(report.to_dict(), handle)
        os.replace(temporary, path)  # atomic: a reader sees the old file or the whole new one
    except BaseException:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise
    report.path = path
    return path


def _job_key(report: RankReport) -> str:
    """`RankInfo.run_key` without its attempt: what the attempts of one elastic job share."""
    key = report.run_key
    return key.rsplit(" attempt ", 1)[0]


def _earlier_attempt(path: Path, report: RankReport) -> RankReport | None:
    """The report at ``path`` when it is an earlier attempt of ``report``'s job on the same rank (torchrun restarted
    the job, ``--max-restarts``): the new attempt's file replaces it."""
    if report.rank.restart_count <= 0:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            earlier = RankReport.from_dict(json.load(handle), path)
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return None
    if _job_key(earlier) != _job_key(report) or earlier.rank.restart_count >= report.rank.restart_count \
            or earlier.finished < report.started - STALE_AFTER_S:
        return None
    return earlier


def _carry_earlier_attempt(report: RankReport, earlier: RankReport) -> None:
    """The syncs of an earlier attempt of the job on this rank join this attempt's report, said in a note: a
    restarted job's file replaced the failed attempt's, and its syncs were dropped with nothing said (a job whose
    first attempt synced and failed passed on its second)."""
    mine, theirs = report.report, earlier.report
    mine["sites"] = list(theirs.get("sites") or []) + list(mine.get("sites") or [])
    totals, before = mine.setdefault("totals", {}), theirs.get("totals") or {}
    for key in ("syncs", "counted", "sites"):
        if isinstance(totals.get(key), int) and isinstance(before.get(key), int):
            totals[key] += before[key]
    if isinstance(totals.get("blocked_ms"), (int, float)) and isinstance(before.get("blocked_ms"), (int, float)):
        totals["blocked_ms"] += before["blocked_ms"]
    report.children = list(earlier.children) + list(report.children)
    report.child_notes = list(earlier.child_notes) + list(report.child_notes)
    report.lost_children = list(earlier.lost_children) + list(report.lost_children)
    attempts = f"attempt {earlier.rank.restart_count}" if earlier.rank.restart_count == 0 else \
        f"attempts 0 to {earlier.rank.restart_count}"
    counted = before.get("counted", before.get("syncs", 0))  # attempts before the earlier one's are in it already
    mine["notes"] = list(mine.get("notes") or []) + [
        f"torchrun restarted the job (attempt {report.rank.restart_count}): the {counted} "
        f"sync{'s' if counted != 1 else ''} of {attempts} on this rank are counted too"]


@dataclass
class RankReportFolder:
    """What a folder holds: the rank reports of its newest run, and what was left out."""

    directory: Path
    reports: list[RankReport]   # the newest run's, by rank
    problems: list[str]         # files that could not be read, one line each
    earlier: int                # rank reports of other (earlier) runs left out

    @property
    def world_size(self) -> int:
        return max((r.rank.world_size for r in self.reports), default=0)

    @property
    def missing_ranks(self) -> list[int]:
        present = {r.rank.rank for r in self.reports}
        return [rank for rank in range(self.world_size) if rank not in present]


def _read_all(folder: Path) -> tuple[list[RankReport], list[str]]:
    reports, problems = [], []
    for path in sorted(folder.iterdir()):
        if not _FILE.fullmatch(path.name) or not path.is_file():
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                reports.append(RankReport.from_dict(json.load(handle), path))
        except (OSError, UnicodeDecodeError, ValueError, TypeError) as error:
            problems.append(f"{path.name}: {getattr(error, 'strerror', None) or error}")
    return reports, problems


def _together(one: RankReport, other: RankReport) -> bool:
    """Whether two rank reports of one key ran at the same time (within `TOGETHER_S`): the ranks of one launch all
    start as its rendezvous completes and run side by side. A launch run again with the same key (a multi-node job's
    static rendezvous address, a fixed ``--rdzv-id``) into the same shared folder is a later one: its ranks began after
    the earlier one's ended."""
    return one.finished >= other.started - TOGETHER_S and other.finished >= one.started - TOGETHER_S


def _newest_run(reports: Iterable[RankReport]) -> tuple[list[RankReport], int]:
    runs: dict[tuple[str, int], list[RankReport]] = {}
    reports = list(reports)
    for report in reports:
        runs.setdefault((report.run_key, report.rank.world_size), []).append(report)
    if not runs:
        return [], 0
    newest = max(runs.values(), key=lambda run: max(r.finished for r in run))
    last = max(newest, key=lambda r: r.finished)
    newest = [r for r in newest if _together(r, last)]  # not an earlier launch's file of the same key
    by_rank: dict[int, RankReport] = {}
    for report in sorted(newest, key=lambda r: r.finished):
        by_rank[report.rank.rank] = report
    earlier = len(reports) - len(by_rank)
    return [by_rank[rank] for rank in sorted(by_rank)], earlier


def read_rank_reports(directory: str | os.PathLike) -> RankReportFolder:
    """The rank reports of the newest run in ``directory``; OSError when the folder cannot
    be listed."""
    folder = Path(directory)
    reports, problems = _read_all(folder)
    newest, earlier = _newest_run(reports)
    return RankReportFolder(folder, newest, problems, earlier)


def complete_run(directory: str | os.PathLike, mine: RankReport) -> list[RankReport] | None:
    """Every rank report of ``mine``'s run once each rank of it has written its file; None
    while some rank has not (or a file cannot be read)."""
    reports, _ = _read_all(Path(directory))
    run = {r.rank.rank: r for r in reports
           if r.run_key == mine.run_key and r.rank.world_size == mine.rank.world_size
           and r.finished >= mine.started - STALE_AFTER_S and _together(r, mine)}
    run[mine.rank.rank] = mine
    if len(run) < mine.rank.world_size:
        return None
    return [run[rank] for rank in sorted(run)]


def claim_merge(directory: str | os.PathLike, run: list[RankReport]) -> bool:
    """Whether this process is the one to merge ``run`` (the complete reports of one job).

    Two ranks that finish together can each find the run complete; the one that creates
    the run's marker file first merges (``O_CREAT | O_EXCL``: atomic on a local file system
    and on NFS 3 and later). The marker is named after the ranks' processes and start
    times, so a later run never finds an old marker of its own."""
    import hashlib

    identity = "\n".join(f"{r.rank.rank} {r.rank.hostname} {r.rank.pid} {r.started!r}" for r in run)
    marker = Path(directory) / f".merged-{hashlib.sha1(identity.encode()).hexdigest()[:16]}"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    for old in Path(directory).glob(".merged-*"):  # markers of earlier runs
        if old != marker:
            try:
                old.unlink()
            except OSError:
                pass
    return True
