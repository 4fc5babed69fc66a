"""The notes that change a verdict: work of the block whose syncs are not in its count.

A note is a str everywhere it goes (the report's notes, the JSON, the pytest summary); one of these also tells
`syncfree.watches.check_verdict` that the count is short by an unknown number, so that a block is not passed on it.
"""

from __future__ import annotations

__all__ = ["Uncounted"]


class Uncounted(str):
    """A note on work of the block whose syncs are not counted: a child process that left no report
    (`syncfree.processes.LostChild`), a thread of the user's that ran without predict mode's stand-ins."""

    __slots__ = ()
