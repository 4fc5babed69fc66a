"""The words a match and its rewrite are made of, below both the catalog (syncfree.catalog: rules, their matches and
fixes) and what a cell's names hold (syncfree.catalog.scope), which both use them: how sure a match is, a position in
a parsed cell, and an edit of the source."""

from __future__ import annotations

import ast
from typing import Literal

# possible: analyze.py's demotion of a likely finding in code that runs on the host by construction (host_code.py)
# or on an optimizer's step count or scalar (optimizer_scalars.py), left out unless asked for; rules themselves say
# certain or likely.
Certainty = Literal["certain", "likely", "possible"]
Position = tuple[int, int]  # (line, column) as Python's ast gives them: 1-based line, UTF-8 byte column


def node_start(node: ast.AST) -> Position:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def node_end(node: ast.AST) -> Position:
    return (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


class Frozen:
    """Instances that cannot be changed once built, as ``@dataclass(frozen=True)`` made them: the catalog's records
    (Edit, Fix, Match, Rule) and scope's Value are written out by hand, without dataclasses, whose import (inspect,
    dis, copy) and processing of each class were a tenth of a cold check's fixed cost (every worker imports them)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")


class Edit(Frozen):
    """Replace the source between ``start`` and ``end`` (ast coordinates of the parsed cell) with ``text``.

    :mod:`syncfree.analyze` turns these into the report's cell-relative character ranges.
    """

    __slots__ = ("start", "end", "text")
    start: Position
    end: Position
    text: str

    def __init__(self, start: Position, end: Position, text: str) -> None:
        setter = object.__setattr__
        setter(self, "start", start)
        setter(self, "end", end)
        setter(self, "text", text)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.start, self.end, self.text) == (other.start, other.end, other.text)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.start, self.end, self.text))

    def __repr__(self) -> str:
        return f"Edit(start={self.start!r}, end={self.end!r}, text={self.text!r})"

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (Edit, (self.start, self.end, self.text))

    @classmethod
    def replace(cls, node: ast.AST, text: str) -> Edit:
        return cls(node_start(node), node_end(node), text)

    @classmethod
    def insert(cls, at: Position, text: str) -> Edit:
        return cls(at, at, text)
