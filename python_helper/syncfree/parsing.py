r"""Python source to an AST, without the parser's warnings reaching the user.

CPython's parser warns about some code it still accepts: an invalid escape sequence
(``'\d'``, ``b'\N'``, ``f'\{'``, an octal escape above ``\377``: DeprecationWarning on 3.11,
SyntaxWarning from 3.12; Parser/string_parser.c, warn_invalid_escape_sequence) and a number
glued to a keyword (``1if x else 2``, ``0x1for``: SyntaxWarning "invalid decimal literal";
the tokenizer's verify_end_of_number). The program that compiles such code sees them once,
as it should; syncfree's own parses of the same code (the static pass, a library function's
layout) must not show them again.

``warnings.catch_warnings`` cannot hide them from inside a library: it swaps the process's
``warnings.filters`` for a copy and puts the list it saved back on exit (Lib/warnings.py).
Two threads' blocks that interleave leave a copy, ``ignore`` entries and all, for good (A
saves L0 and sets L1, B saves L1 and sets L2, A puts L0 back, B puts L1 back): the
program's DeprecationWarnings were then silent for the rest of the process. The program's
other threads meet the copy in between, and an interrupt on the way out leaves it too. So:

* `parser_may_warn` tells from the text alone, erring towards yes, whether the parser could
  warn at all. Most code cannot, and is parsed with the filters untouched.
* The rest is parsed under two ``ignore`` entries of the parse's own, put first in the
  current list (never a copy) and taken out again by identity. Their message pattern
  matches in the parsing thread only, during its parse (the filter check calls its
  ``match``: check_matched in Python/_warnings.c; Lib/warnings.py does the same), so no
  other thread's warnings change and concurrent parses never meet. They are taken out twice
  over: an interrupt at any line, even in the first taking-out, leaves none behind
  (tests/test_leaks.py interrupts each line).
"""

from __future__ import annotations

import io
import sys
import warnings
from _thread import get_ident  # threading.get_ident itself, without importing threading (a warm check needs no thread)

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    import ast
    import re

#: The parser versions whose warnings `parser_may_warn` was checked against (3.11-3.13:
#: tests/test_filters.py compares it with the running parser); a later parser may warn
#: about more, so there every source counts as one that may warn.
_CHECKED = sys.version_info < (3, 14)

# A backslash followed by what no str or bytes literal accepts after it (\N, \u and \U
# count: bytes warn about them), or by an octal escape above \377. It is an invalid escape
# if it escapes, i.e. an even number of backslashes precedes it (a run pairs up from its
# start). A line continuation (backslash, newline) is valid: the parser sees "\r\n" and
# "\r" as "\n". Backslashes in comments and raw strings may count too: they only cost a
# quiet parse.
_BACKSLASH_BEFORE_INVALID = r"""\\(?![\n\r\\'"abfnrtvx0-3]|[4-7](?![0-7]{2}))"""

# A digit, then one of the keywords the tokenizer warns about, in one run of letters,
# digits, underscores and points: a number literal if the digit follows no ASCII letter,
# digit or underscore ("1if", "0x1for", "1.5else", the "5or" of "1e-5or"); identifiers
# that merely hold digits ("conv2d_input") are not.
_DIGIT_BEFORE_KEYWORD = r"[0-9][0-9A-Za-z_.]*?(?:and|else|for|if|in|is|not|or)"
#: The two patterns compiled, on the first parse (the output imports this module and parses nothing).
_PATTERNS: tuple[re.Pattern[str], re.Pattern[str]] | None = None
_ASCII_WORD = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


def parser_may_warn(source: str) -> bool:
    """Whether parsing ``source`` could make the parser warn (False: it cannot)."""
    if not _CHECKED:
        return True
    global _PATTERNS
    if _PATTERNS is None:
        import re  # (here: the output imports this module, and re with enum was a tenth of a warm check)

        _PATTERNS = (re.compile(_BACKSLASH_BEFORE_INVALID), re.compile(_DIGIT_BEFORE_KEYWORD))
    backslash_before_invalid, digit_before_keyword = _PATTERNS
    # Regular expressions that start at a rare character, then a look at each match: a
    # pattern that looked behind at every position cost a tenth of the parse itself.
    if "\\" in source:
        for found in backslash_before_invalid.finditer(source):
            at = start = found.start()
            while at and source[at - 1] == "\\":
                at -= 1
            if (start - at) % 2 == 0:
                return True
    at = 0
    while (found := digit_before_keyword.search(source, at)) is not None:
        start = found.start()
        if not start or source[start - 1] not in _ASCII_WORD:
            return True
        at = start + 1
    return False


class _ThisParse:
    """The message pattern of a quiet parse's filter entries: it matches the parsing
    thread's warnings until the parse ends, nothing after."""

    __slots__ = ("ident", "on")

    def __init__(self) -> None:
        self.ident = get_ident()
        self.on = True

    def match(self, text: object) -> bool:
        return self.on and get_ident() == self.ident

    def __repr__(self) -> str:
        return f"<syncfree's quiet parse in thread {self.ident}>"


def parse_quietly(source: str, mode: str = "exec", filename: str = "<unknown>") -> ast.AST:
    """``ast.parse(source, filename, mode)`` with the parser's warnings ignored, in this thread
    only; the program's warning filters are as they were after it, whatever interrupts it."""
    import ast  # (here: the output, which imports this module, needs no parser)

    if not parser_may_warn(source):
        return ast.parse(source, filename, mode)
    filters = warnings.filters
    if type(filters) is not list:  # replaced by the program: nothing of ours goes into it
        return ast.parse(source, filename, mode)
    this = _ThisParse()
    entries = [("ignore", this, SyntaxWarning, None, 0), ("ignore", this, DeprecationWarning, None, 0)]
    # No filters_changed() (capture/debug/hook.py) on the way in or out: the entries change
    # the outcome of no warning but this parse's, which the parser issues with no registry,
    # so no "already warned" registry can be out of date.
    try:
        try:
            filters[0:0] = entries  # one step, so no interrupt lands between the two
            return ast.parse(source, filename, mode)
        finally:
            _take_out(filters, this, entries)
    finally:
        _take_out(filters, this, entries)  # again: an interrupt may have cut the first short


def _take_out(filters: list, this: _ThisParse, entries: list) -> None:
    this.on = False  # first: an entry that stays anywhere (a copy made meanwhile) matches nothing
    for entry in entries:
        try:
            filters.remove(entry)  # one step; only this entry compares equal to it
        except ValueError:
            pass


def code_columns(text: str) -> tuple[int, int]:
    """1-based (col, end_col) of the code on a line: from its first non-blank character to the end of its code, a
    comment and trailing blanks left out; (1, 1) for a blank line. Where a site's exact range is not known (Python
    3.10), its line's statement stands for it."""
    text = text.rstrip("\r\n")
    if not text.strip():
        return 1, 1
    end = len(text)
    hash_at = text.find("#")
    if hash_at >= 0:
        import tokenize

        try:  # a '#' inside a string is no comment: ask the tokenizer
            tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
            comments = [t.start[1] for t in tokens if t.type == tokenize.COMMENT]
        except (tokenize.TokenError, SyntaxError, IndentationError):  # a line of a longer statement
            comments = [hash_at] if "'" not in text[:hash_at] and '"' not in text[:hash_at] else []
        if comments:
            end = comments[0]
    end = len(text[:end].rstrip())
    start = len(text) - len(text.lstrip())
    return start + 1, max(end, start) + 1


__all__ = ["code_columns", "parse_quietly", "parser_may_warn"]
