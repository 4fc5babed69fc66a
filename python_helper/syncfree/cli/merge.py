"""``syncfree merge DIR``: the rank reports a distributed job left in DIR, merged into one report.

For jobs started with a plain ``torchrun ... -m syncfree run`` (whose last rank already
printed the merge) and multi-node jobs whose ranks wrote to a shared folder. Exit codes: 0
within the budget (default 0 syncs per rank, as ``syncfree run``), 1 a rank over it, 2 no
rank reports, a rank without a report or a rank that failed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from syncfree._version import __version__
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem

if TYPE_CHECKING:
    from syncfree.distributed.merge import MergedReport

__all__ = ["judged", "merge", "read_folder"]


def merge(directory: str, *, output_format: str = "text", budget: int | None = None,
          out: TextIO | None = None, state: dict[str, int] | None = None,
          selected: set[str] | None = None) -> int:
    from syncfree.distributed.emit import write_merged
    from syncfree.distributed.merge import MergedReport

    out = out or sys.stdout
    state = state if state is not None else {}
    folder = read_folder(directory)
    merged = MergedReport.from_folder(folder, selected=selected)
    write_merged(merged, output_format, out, budget=budget, tool_version=__version__)
    out.flush()
    failed = [t.rank for t in merged.totals if t.exit_code != 0]
    if merged.missing_ranks or folder.problems or failed:
        for line in merged.problems_text():
            if "earlier run" not in line:
                print(f"syncfree: error: {line}", file=sys.stderr)
        state["status"] = EXIT_ERROR
        return EXIT_ERROR
    over = merged.most_counted > (budget if budget is not None else 0)
    if budget is not None and over:
        print(f"syncfree: a rank made {merged.most_counted} syncs, over the budget of {budget} per rank",
              file=sys.stderr)
    state["status"] = EXIT_FOUND if over or not judged(merged, over) else EXIT_CLEAN
    return state["status"]


def read_folder(directory: str):
    """The rank reports in ``directory`` (``rankfiles.RankFolder``); a folder that cannot be
    read or holds none is a UsageProblem (one line), for ``syncfree merge`` and
    ``%syncfree merge`` alike."""
    from syncfree.distributed.rankfiles import read_rank_reports

    try:
        folder = read_rank_reports(directory)
    except FileNotFoundError:
        raise UsageProblem(f"cannot read {directory}: no such folder") from None
    except NotADirectoryError:
        raise UsageProblem(f"{directory} is not a folder of rank reports (rank-NNNNN.json)") from None
    except OSError as problem:
        raise UsageProblem(f"cannot read {directory}: {problem.strerror or problem}") from None
    if not folder.reports:
        detail = f" ({folder.problems[0]})" if folder.problems else ""
        raise UsageProblem(f"{directory}: no syncfree rank reports (rank-NNNNN.json){detail}")
    return folder


def judged(merged: MergedReport, over: bool) -> bool:
    """Whether the ranks' counts can be judged against the budget: a rank's child process that left no report
    (killed) took its syncs with it, so a count within the budget is no pass then (as ``syncfree run SCRIPT``); each
    such child is said on stderr. A rank over the budget is judged (over) whatever its children did."""
    unjudged = [] if over else merged.lost_children
    for line in unjudged:
        print(f"syncfree: could not judge {line}", file=sys.stderr)
    return not unjudged
