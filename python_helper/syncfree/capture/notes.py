"""The notes that change a verdict: work of the block whose syncs are not in its count.

A note is a str everywhere it goes (the report's notes, the JSON, the pytest summary); one of these also tells
`syncfree.watches.check_verdict` that the count is short by an unknown number, so that a block is not passed on it.
"""

from __future__ import annotations

__all__ = ["NOT_JUDGED", "Uncounted"]

# The note of a block predict mode could not judge (`syncfree.watches.NotJudged`): taken out again where its children
# did the CUDA work (`syncfree.processes.merge_children`).
NOT_JUDGED = ("no CUDA tensor was seen: the block's torch calls ran on CPU tensors only (made before it, with the "
              "device chosen where CUDA is not available?), so the syncs they would make on a GPU could not be "
              "predicted")


class Uncounted(str):
    """A note on work of the block whose syncs are not counted: a child process that left no report
    (`syncfree.processes.LostChild`), a thread of the user's that ran without predict mode's stand-ins."""

    __slots__ = ()
