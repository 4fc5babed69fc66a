"""Python's cycle collector held off while syncfree builds big structures that are no garbage.

A 10,000-line cell makes some 110,000 AST nodes, and its code some 270,000 instruction
positions; each collection while they are young (and each full one after) walks all of them,
which made checking a file twice as long take three times as long and cost a big
``%%syncfree`` cell a fifth of its plain run. Reference counting still frees everything; the
collector runs again as before afterwards. Nested and concurrent uses leave it as they found
it.

An interrupt can land between two bytecodes anywhere, also where a pause ends. So the
pauses in progress are kept here, and `resume_interrupted` (called by the magic before each
cell) ends any that an interrupt cut short: the collector is never left off by syncfree for
longer than the cell that was interrupted.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: One entry per pause in progress: whether the collector was on when it began.
_pauses: list[bool] = []


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """``with paused(): ...``: no cycle collection inside (unless the block enables it)."""
    _pauses.append(gc.isenabled())
    try:
        gc.disable()
        yield
    finally:
        _end()


def _end() -> None:
    # Enabled before the entry goes: cut short in between, the entry is still there for
    # resume_interrupted, which enables again (idempotent) and removes it.
    if _pauses:
        if _pauses[-1] and len(_pauses) == 1:
            gc.enable()
        _pauses.pop()


def resume_interrupted() -> None:
    """End the pauses that an interrupt kept from ending (none may be in progress: call it
    where no pause can be, e.g. before a cell runs). Idempotent."""
    while _pauses:
        _end()


__all__ = ["paused", "resume_interrupted"]
