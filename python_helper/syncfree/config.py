"""``[tool.syncfree]`` in ``pyproject.toml``, found from the working directory upward (as ruff finds its own).

Keys: ``select``, ``ignore`` (lists of codes or prefixes), ``budget`` (an int), ``mode`` (warn|error|predict),
``engine`` (debug|cupti|auto), ``exclude`` (glob patterns of paths to leave out). Command-line options win over the file.
"""

from __future__ import annotations

import os

from syncfree.paths import is_file
from syncfree.records import Record

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["Config", "ConfigError", "find_config"]

_KEYS = {"select", "ignore", "budget", "mode", "engine", "exclude"}


class ConfigError(ValueError):
    """A ``[tool.syncfree]`` table that cannot be used: the message names the file and the key."""


class Config(Record):
    path: Path | None
    select: list[str] | None
    ignore: list[str] | None
    budget: int | None
    mode: str | None
    exclude: list[str]
    engine: str | None  # debug | cupti | auto: what sees the syncs (capture/engines.py)
    _fields = ("path", "select", "ignore", "budget", "mode", "exclude", "engine")

    def __init__(self, path: Path | None = None, select: list[str] | None = None, ignore: list[str] | None = None,
                 budget: int | None = None, mode: str | None = None, exclude: list[str] | None = None,
                 engine: str | None = None) -> None:
        self.__dict__.update(path=path, select=select, ignore=ignore, budget=budget, mode=mode,
                             exclude=exclude if exclude is not None else [], engine=engine)


def find_config(start: Path | None = None) -> Config:
    """The first ``pyproject.toml`` with a ``[tool.syncfree]`` table from ``start`` (the working directory) up."""
    # Names, not Paths, until a table is found (what Path.resolve, .parents and .is_file do): pathlib's import, with
    # urllib.parse and ipaddress, was a tenth of a check whose results all come from its cache.
    folder = os.path.realpath(os.fspath(start) if start is not None else os.getcwd())
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        if is_file(candidate):
            table = _table(candidate)
            if table is not None:
                from pathlib import Path

                return _config(Path(candidate), table)
        parent = os.path.dirname(folder)
        if parent == folder:
            return Config()
        folder = parent


# The spellings of a syncfree table in TOML: a header or dotted key through tool (`[tool.syncfree]`,
# `[ "tool" . 'syncfree' ]`, `tool.syncfree.budget = 0`), a key of a `[tool]` table (`syncfree = {...}`,
# `"syncfree".budget = 0`), an inline tool table (`tool = {syncfree = {...}}`).
# (Patterns, compiled by re where a pyproject.toml names syncfree at all: most runs never use them.)
_TOOL_SYNCFREE = r"""tool["']?[ \t]*\.[ \t]*["']?syncfree"""
_TOOL_TABLE = r"""(?m)^[ \t]*\[[ \t]*["']?tool["']?[ \t]*\]"""
_SYNCFREE_KEY = r"""(?m)^[ \t]*["']?syncfree["']?[ \t]*[.=]"""
_TOOL_INLINE = r"""tool["']?[ \t]*=[ \t]*\{"""


def may_hold_syncfree_table(text: str) -> bool:
    """Whether a TOML text could hold a tool.syncfree key (False: it cannot, whatever else it holds), told without
    parsing it: most projects' pyproject.toml name no syncfree table, and TOML's parser takes 5 ms to import and run,
    a tenth of a `syncfree check` whose results all come from its cache. A quoted key spelled with escapes
    (``"\\u0073yncfree"``) counts as one that could."""
    if "\\u" in text or "\\U" in text:
        return True
    if "syncfree" not in text:
        return False
    known = _tool_key(text)
    if known is not None:
        return known
    import re  # (here: only a `[tool]` table's file is searched)

    return bool(re.search(_TOOL_SYNCFREE, text) or re.search(_TOOL_INLINE, text)
                or (re.search(_TOOL_TABLE, text) and re.search(_SYNCFREE_KEY, text)))


def _tool_key(text: str) -> bool | None:
    """What the patterns of :func:`may_hold_syncfree_table` say, told by str's methods (re's import, with enum, was a
    tenth of a check whose results all come from its cache, in a project whose pyproject.toml names syncfree, as a
    dependency or a script): each ``tool`` followed by ``.syncfree`` (_TOOL_SYNCFREE) or ``= {`` (_TOOL_INLINE), a
    quote and spaces or tabs allowed as the patterns allow them, is True; None where a ``tool`` is followed by ``]``
    (a ``[tool]`` table: the patterns decide); False otherwise."""
    length = len(text)
    at = text.find("tool")
    while at >= 0:
        index = at + 4
        if index < length and text[index] in "\"'":
            index += 1
        index = _past_blanks(text, index)
        after = text[index : index + 1]
        if after == ".":
            index = _past_blanks(text, index + 1)
            if index < length and text[index] in "\"'":
                index += 1
            if text.startswith("syncfree", index):
                return True
        elif after == "=":
            if text.startswith("{", _past_blanks(text, index + 1)):
                return True
        elif after == "]":
            return None
        at = text.find("tool", at + 1)
    return False


def _past_blanks(text: str, index: int) -> int:
    """The index of the first character at or after ``index`` that is not a space or a tab."""
    length = len(text)
    while index < length and text[index] in " \t":
        index += 1
    return index


def _table(path: Path | str) -> dict[str, Any] | None:
    """The tool.syncfree table of a pyproject.toml; None when it has none. A file that names no syncfree table is not
    parsed (:func:`may_hold_syncfree_table`): TOML that is not valid is said only where syncfree's table may be."""
    try:
        with open(path, encoding="utf-8") as stream:  # (Path.read_text's own steps)
            text = stream.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    if not may_hold_syncfree_table(text):
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    tool = data.get("tool")
    if not isinstance(tool, dict) or "syncfree" not in tool:
        return None
    table = tool["syncfree"]
    if not isinstance(table, dict):  # `syncfree = 3` under [tool]: a table was meant, not ignored in silence
        raise ConfigError(f"{path}: tool.syncfree must be a table ([tool.syncfree] with keys such as "
                          f"budget = 0), not {_shown(table)}")
    return table


def _config(path: Path, table: dict[str, Any]) -> Config:
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) in [tool.syncfree]: {', '.join(sorted(unknown))}")

    def strings(key: str, what: str, example: str) -> list[str] | None:
        # A list, as ruff takes its own: `select = "SF1,SF2"` is one string, not two codes (ruff refuses it too).
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: [tool.syncfree] {key} must be a list of {what}, e.g. {key} = {example}, "
                              f"not {_shown(value)}")
        return value

    def codes(key: str) -> list[str] | None:
        value = strings(key, "codes", '["SF1", "SF601"]')
        if value is not None:
            from syncfree.catalog import select_rules

            try:  # a typo must not silently select nothing (catalog.select_rules)
                select_rules(value if key == "select" else [], value if key == "ignore" else None)
            except ValueError as error:
                raise ConfigError(f"{path}: [tool.syncfree] {key}: {error}") from None
        return value

    budget = table.get("budget")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 0):
        raise ConfigError(f"{path}: [tool.syncfree] budget must be a whole number >= 0, not {_shown(budget)}")
    mode = table.get("mode")
    if mode is not None and mode not in ("warn", "error", "predict"):
        raise ConfigError(f"{path}: [tool.syncfree] mode must be warn, error or predict, not {_shown(mode)}")
    engine = table.get("engine")
    if engine is not None and engine not in ("debug", "cupti", "auto"):
        raise ConfigError(f"{path}: [tool.syncfree] engine must be debug, cupti or auto")
    return Config(path, codes("select"), codes("ignore"), budget, mode,
                  strings("exclude", "glob patterns", '["data/**"]') or [], engine)


def _shown(value: Any) -> str:
    """A value as the TOML file spells it (near enough), cut short."""
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
