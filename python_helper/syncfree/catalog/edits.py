"""The words a match and its rewrite are made of, below both the catalog (syncfree.catalog: rules, their matches and
fixes) and what a cell's names hold (syncfree.catalog.scope), which both use them: how sure a match is, a position in
a parsed cell, and an edit of the source."""

from __future__ import annotations

import ast
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Edit:
    """Replace the source between ``start`` and ``end`` (ast coordinates of the parsed cell) with ``text``.

    :mod:`syncfree.analyze` turns these into the report's cell-relative character ranges.
    """

    start: Position
    end: Position
    text: str

    @classmethod
    def replace(cls, node: ast.AST, text: str) -> Edit:
        return cls(node_start(node), node_end(node), text)

    @classmethod
    def insert(cls, at: Position, text: str) -> Edit:
        return cls(at, at, text)
