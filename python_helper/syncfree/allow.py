"""``# syncfree: allow`` comments: the one reading of their syntax, for the static pass
(`syncfree check` leaves an allowed finding out) and for the reports of measured or
predicted syncs (`syncfree run`, `watch()`, the pytest plugin: not counted towards a budget).

``# syncfree: allow`` (or ``allow[]``) covers every sync of its line; ``allow[item]`` the syncs
of a kind; ``allow[SF101, SF6]`` those of rule codes or their prefixes, as ``noqa`` takes
them (``SF6`` covers ``SF601``). Case does not matter. A comment is recognized wherever ``#``
starts it on the line; text inside a string that looks like one counts too (as ``noqa``
does in flake8), which errs towards allowing.
"""

from __future__ import annotations

import re

__all__ = ["allowances", "allowed", "allowed_by_comment", "comment_covering"]

_ALLOW = re.compile(r"#\s*syncfree:\s*allow\b(?:\[([^\]]*)\])?", re.IGNORECASE)


def _names(match: re.Match) -> frozenset[str] | None:
    names = match.group(1)
    if names is None or not names.strip():
        return None
    return frozenset(name.strip().lower() for name in names.split(",") if name.strip())


def allowances(source: str, *, first_line: int = 1) -> dict[int, frozenset[str] | None]:
    """The allow comments of ``source`` by line number (its first line is ``first_line``): None
    when the line allows every sync, else the lower-cased kinds and codes in the brackets."""
    found: dict[int, frozenset[str] | None] = {}
    if "syncfree" not in source:
        return found
    for index, line in enumerate(source.splitlines()):
        match = _ALLOW.search(line)
        if match is not None:
            found[index + first_line] = _names(match)
    return found


def _covers(names: frozenset[str] | None, rule: str | None, kind: str | None) -> bool:
    if names is None:
        return True
    if kind is not None and kind.lower() in names:
        return True
    code = (rule or "").lower()
    return bool(code) and any(name.startswith("sf") and code.startswith(name) for name in names)


def allowed(allows: dict[int, frozenset[str] | None], line: int, *, rule: str | None, kind: str | None) -> bool:
    """Whether a sync of ``rule``/``kind`` on ``line`` is allowed by the comments in ``allows``
    (:func:`allowances`). Codes match by prefix (``SF6`` allows ``SF601``); kinds exactly."""
    return line in allows and _covers(allows[line], rule, kind)


def comment_covering(text: str, kind: str | None, rule: str | None) -> str | None:
    """The allow comment of one source line, as written, when it covers a sync of that kind
    and rule; None when none does."""
    match = _ALLOW.search(text)
    if match is None or not _covers(_names(match), rule, kind):
        return None
    return match.group(0)


def allowed_by_comment(text: str, kind: str, rule: str | None) -> bool:
    """Whether a source line's ``# syncfree: allow`` comment covers a sync (the reports of measured or predicted
    syncs: a watch, ``syncfree run``)."""
    return comment_covering(text, kind, rule) is not None
