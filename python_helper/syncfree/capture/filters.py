"""Changes the engine makes to ``warnings.filters`` itself, in place.

The dispatcher (dispatch.py) keeps its entries first in whatever list is current and takes
them out again by identity; editing the list directly must bump the filters version as
``warnings.filterwarnings`` does. The engine never swaps the list: ``catch_warnings`` does
(Lib/warnings.py), and two threads' blocks that interleave, or an interrupt on the way out,
leave a copy behind for good. Parsing without the parser's warnings is
`syncfree.parsing.parse_quietly`, which does neither.
"""

from __future__ import annotations

import warnings


def remove_entries(filters: list, entries: tuple) -> None:
    """Remove each of ``entries`` from ``filters`` by identity (idempotent)."""
    for entry in entries:
        for i in range(len(filters) - 1, -1, -1):
            if filters[i] is entry:
                del filters[i]
                break


def filters_changed() -> None:
    # warnings.filterwarnings() bumps the filters version so that the modules' "already
    # warned" registries are invalidated (Lib/warnings.py); editing warnings.filters
    # directly must do the same, or a warning seen before would be skipped.
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()
    else:  # Python 3.14: Lib/_py_warnings.py
        with warnings._lock:
            warnings._filters_mutated_lock_held()


__all__ = ["filters_changed", "remove_entries"]
