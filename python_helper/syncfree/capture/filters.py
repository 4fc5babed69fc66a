"""Warning filters that never outlive the engine's use of them.

``warnings.catch_warnings`` swaps ``warnings.filters`` for a copy on enter and puts the
original back on exit (Lib/warnings.py). An interrupt that lands between the two leaves the
copy in place for good, with the ``ignore`` entries the block added (the static pass used
to leave a permanent ``ignore SyntaxWarning`` that way), and another thread that warns in
between sees the copy. Here:

* `parse_quietly` parses Python without letting the parser's warnings reach the user: it
  inserts its own two ``ignore`` entries into the current list and removes them again by
  identity, never replacing the list object.
* `FiltersKept` wraps code that may use ``catch_warnings`` (syncfree's static pass): after
  it, whatever interrupted it, ``warnings.filters`` is the very list object it was before.
"""

from __future__ import annotations

import ast
import warnings
from typing import Any

# What CPython's parser warns with (invalid escape sequences, invalid decimal literals):
# SyntaxWarning from 3.12, DeprecationWarning before.
_PARSER_CATEGORIES = (SyntaxWarning, DeprecationWarning)


def parse_quietly(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` with the parser's warnings ignored."""
    entries = tuple(("ignore", None, category, None, 0) for category in _PARSER_CATEGORIES)
    filters = warnings.filters
    try:
        for entry in entries:
            filters.insert(0, entry)
        filters_changed()
        return ast.parse(source, mode=mode)
    finally:
        remove_entries(filters, entries)
        filters_changed()


def remove_entries(filters: list, entries: tuple) -> None:
    """Remove each of ``entries`` from ``filters`` by identity (idempotent)."""
    for entry in entries:
        for i in range(len(filters) - 1, -1, -1):
            if filters[i] is entry:
                del filters[i]
                break


class FiltersKept:
    """``with FiltersKept(): ...``: the warning filters list object is put back after."""

    __slots__ = ("_filters",)

    def __init__(self) -> None:
        self._filters: Any = None

    def __enter__(self) -> FiltersKept:
        self._filters = warnings.filters
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._filters is not None and warnings.filters is not self._filters:
            warnings.filters = self._filters
            filters_changed()
        return False


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


__all__ = ["FiltersKept", "filters_changed", "parse_quietly", "remove_entries"]
