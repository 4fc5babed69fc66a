"""The code the commands read: ``.py`` files decoded as Python decodes them, notebooks checked to be notebooks, and
the files of a directory (an unreadable one is said, not skipped).

Python reads a source file as bytes and decodes it by its BOM or PEP 263 coding line (``tokenize.detect_encoding``;
``python`` and ``compile`` do the same), so a file Python runs is a file ``check`` and ``run`` can read.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence

from syncfree.cli.exclusion import Exclusion
from syncfree.cli.usage import UsageProblem, not_a_file
from syncfree.paths import is_dir
from syncfree.records import Record

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["SourceCell", "decode_python", "expand_paths", "notebook_code_cells", "read_cells", "read_notebook_json",
           "read_python", "source_names"]

_SKIPPED_DIRECTORIES = {".ipynb_checkpoints", "__pycache__", "node_modules", ".git", ".venv", "venv"}


class SourceCell(Record):
    """A piece of source to analyse: a whole ``.py`` file (``number`` None) or one notebook code cell."""

    path: str
    number: int | None  # 1-based position among all the notebook's cells, as a reader counts them
    source: str
    cell_id: str | None
    _fields = ("path", "number", "source", "cell_id")

    def __init__(self, path: str, number: int | None, source: str, cell_id: str | None = None) -> None:
        values = self.__dict__
        values["path"], values["number"], values["source"], values["cell_id"] = path, number, source, cell_id

    def location(self, line: int, column: int) -> str:
        """``path:cell 3:line 4:col 9`` (notebooks) or ``path:4:9`` (files); ``column`` is 0-based."""
        if self.number is None:
            return f"{self.path}:{line}:{column + 1}"
        return f"{self.path}:cell {self.number}:line {line}:col {column + 1}"


def decode_python(data: bytes, name: str) -> str:
    """Python source bytes as text, decoded as Python decodes them (a UTF-8 BOM, a PEP 263 coding line, else UTF-8),
    with the BOM dropped. UsageProblem when Python could not decode them either."""
    # Most files: no BOM and no coding line (tokenize.detect_encoding reads the first two lines and finds a cookie
    # only in a line that says "coding"), so UTF-8; decoded here without a BytesIO and detect_encoding's readline
    # calls and regex (5% of a parse per file). Bytes that are no UTF-8 take the way below, for its error message.
    second = data.find(b"\n", data.find(b"\n") + 1)
    if not data.startswith(b"\xef\xbb\xbf") and b"coding" not in (data[: second + 1] if second >= 0 else data):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    import tokenize  # (here: a run whose results all come from the cache reads no source)

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except SyntaxError as error:  # detect_encoding: an unknown encoding, or a BOM with another coding line
        raise UsageProblem(f"cannot read {name}: {error.msg if hasattr(error, 'msg') else error}") from None
    except (UnicodeDecodeError, LookupError) as error:
        raise UsageProblem(f"cannot read {name}: {error}") from None


def read_python(path: Path | str) -> str:
    """A ``.py`` file's text as Python reads it (``decode_python``); UsageProblem when it cannot be read."""
    try:
        with open(path, "rb") as stream:  # (Path.read_bytes's own steps)
            data = stream.read()
    except OSError as error:
        raise UsageProblem(f"cannot read {path}: {error.strerror or error}") from None
    return decode_python(data, str(path))


def expand_paths(paths: Sequence[str], exclude: Exclusion | Sequence[str] = (),
                 on_error: Callable[[UsageProblem], None] | None = None) -> Iterator[Path]:
    """The files to check: each path given, and the ``.py`` and ``.ipynb`` files under each directory given (sorted;
    checkpoints, caches and virtual environments skipped). A directory that cannot be listed goes to ``on_error``
    (``os.walk`` and ``Path.rglob`` would skip it without a word). ``exclude``: patterns matched as ruff matches
    them (:mod:`syncfree.cli.exclusion`); an excluded folder is not entered."""
    from pathlib import Path

    return map(Path, source_names(paths, exclude, on_error))


def source_names(paths: Sequence[str], exclude: Exclusion | Sequence[str] = (),
                 on_error: Callable[[UsageProblem], None] | None = None) -> Iterator[str]:
    """:func:`expand_paths`'s files as the names their paths have (``str(path)``), none made a Path: a warm check
    of a large library made thousands only to name them."""
    exclusion = exclude if isinstance(exclude, Exclusion) else Exclusion(exclude)
    for name in paths:
        if name == "-":
            yield name
            continue
        path = name if _named_as_is(name) else os.fspath(_path(name))  # (str(Path(name)): "a/" is "a")
        if is_dir(path):

            def unreadable(error: OSError) -> None:
                if on_error is not None:
                    on_error(UsageProblem(f"cannot read {error.filename}: {error.strerror or error}"))

            found: list[tuple[tuple[str, ...], str]] = []
            _walk(path, (), exclusion, unreadable, on_error, found)
            # Sorted as the paths themselves sort (part by part: `a/b.py` before `a-b/c.py`)
            found.sort()
            top = path
            if top == ".":  # scandir's "./a.py", which a Path names "a.py"
                yield from (file[2:] for _, file in found)
            else:
                yield from (file for _, file in found)
        else:
            yield path  # a missing or wrong file is reported by read_cells


def _named_as_is(name: str) -> bool:
    """Whether ``str(Path(name)) == name`` (POSIX): ``.``, or parts none of them empty or ``.``, after one leading
    ``/``. A command's paths are named so as a rule, and a check whose results all come from the cache then makes no
    Path: pathlib's import, with urllib.parse and ipaddress, was a tenth of such a run."""
    if os.sep != "/" or os.altsep is not None:
        return False  # (Windows: its paths are PureWindowsPath's to name)
    if name == ".":
        return True
    parts = name.split("/")
    if parts[0] == "":
        del parts[0]  # the root of an absolute name (two slashes are a root of their own: not as is)
    return bool(parts) and all(part and part != "." for part in parts)


def _path(name: str) -> Path:
    from pathlib import Path

    return Path(name)


def _walk(folder: str, parts: tuple[str, ...], exclusion: Exclusion, unreadable: Callable[[OSError], None],
          on_error: Callable[[UsageProblem], None] | None, found: list[tuple[tuple[str, ...], str]]) -> None:
    """``os.walk(folder)`` top down (symlinked folders listed, not entered; the subfolders in sorted order), adding
    each source file as (its parts below the walk's top, its path) to ``found``. A regular file (the directory entry
    tells, no stat) is taken at once; anything else is asked as before (a link to a file, a loop, a socket)."""
    folders: list[str] = []
    files: list[os.DirEntry[str]] = []
    try:
        entries = os.scandir(folder)
    except OSError as error:
        unreadable(error)
        return
    with entries:
        while True:
            try:
                entry = next(entries)
            except StopIteration:
                break
            except OSError as error:
                unreadable(error)
                return
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                folders.append(entry.name)
            elif entry.name.endswith(_SOURCE_SUFFIXES):
                files.append(entry)
    files.sort(key=_name)  # (problems said in os.walk's order)
    for entry in files:
        name = entry.name
        if name in _SUFFIXES_ALONE:  # `.py`: a name that is only a suffix has none (Path.suffix)
            continue
        if exclusion and exclusion.excludes(_path(entry.path)):
            continue
        try:
            regular = not entry.is_symlink() and entry.is_file()
        except OSError:
            regular = False
        if regular:
            found.append(((*parts, name), entry.path))
            continue
        p = _path(entry.path)
        if p.is_file():
            found.append(((*parts, name), entry.path))
        elif on_error is not None and not p.is_dir():
            problem = not_a_file(str(p))  # a symlink loop is said; a dangling link is skipped
            if not problem.missing:
                on_error(problem)
    for name in sorted(f for f in folders if f not in _SKIPPED_DIRECTORIES
                       and not (exclusion and exclusion.excludes(_path(os.path.join(folder, f))))):
        path = os.path.join(folder, name)
        if not os.path.islink(path):
            _walk(path, (*parts, name), exclusion, unreadable, on_error, found)


_SOURCE_SUFFIXES = (".py", ".ipynb")
_SUFFIXES_ALONE = frozenset(_SOURCE_SUFFIXES)


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def read_cells(path: Path | str) -> list[SourceCell]:
    """The code to analyse in a file: one cell for a ``.py`` file, every code cell of a notebook. ``path``: a Path, or
    a name as :func:`source_names` gives it (``str(Path(name))``), read without a Path when it is a ``.py`` file's."""
    if type(path) is str:
        if _suffix(path) == ".py":
            return [SourceCell(path, None, read_python(path))]
        from pathlib import Path

        path = Path(path)
    if path.suffix not in (".py", ".ipynb"):
        if not path.exists():  # the first thing to hear, worded as for a missing .py file
            problem = not_a_file(str(path))
            if problem.missing:
                raise UsageProblem(f"cannot read {path}: No such file or directory")
            raise problem  # a symlink loop
        raise UsageProblem(f"{path}: not a .py file or an .ipynb notebook")
    if path.suffix != ".ipynb":
        return [SourceCell(str(path), None, read_python(path))]
    try:
        text = path.read_text(encoding="utf-8")  # JSON: UTF-8 by RFC 8259 (and nbformat)
    except (OSError, UnicodeDecodeError) as error:
        raise UsageProblem(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    cells = notebook_code_cells(read_notebook_json(text, str(path)))
    return [SourceCell(str(path), number, source, cell_id) for number, source, cell_id in cells]


def _suffix(name: str) -> str:
    """``Path(name).suffix`` of a name that is ``str(Path(name))`` (pathlib's own steps: the last part's final dot, not
    its first character nor its last)."""
    last = name[name.rfind("/") + 1:] if os.sep == "/" and not os.altsep else os.path.basename(name)
    dot = last.rfind(".")
    return last[dot:] if 0 < dot < len(last) - 1 else ""


def read_notebook_json(text: str, path: str) -> dict[str, Any]:
    """A notebook file's JSON, upgraded to format 4, after checking that it is a notebook: UsageProblem (one line
    naming what is missing) for any other JSON, which nbformat would answer with a traceback.

    Format 4 notebooks (every Jupyter since 2015) are read as the JSON they are: ``syncfree check`` needs no
    nbformat, which takes longer to import than checking a file does. Older formats go through nbformat's upgrade.
    """
    def bad(why: str) -> UsageProblem:
        return UsageProblem(f"cannot read {path} as a notebook: {why}")

    import json

    try:
        data = json.loads(text)
    except ValueError as error:
        raise bad(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise bad("the file holds no JSON object")
    if "cells" not in data and "worksheets" not in data:
        raise bad("no cells (not a notebook)")
    version = data.get("nbformat")
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad("no nbformat version (not a notebook)")
    if version < 4:
        try:
            import nbformat
        except ImportError:
            raise bad("a notebook older than format 4 needs nbformat: pip install nbformat") from None
        try:
            data = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
        except Exception as error:  # nbformat's upgrade raises jsonschema's errors, KeyError, ...: never a traceback
            raise bad(_first_line(error)) from None
    if not isinstance(data.get("metadata"), dict):
        raise bad("no metadata")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise bad("no list of cells")
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise bad(f"cell {number} is not a JSON object")
        for key in ("cell_type", "metadata", "source"):
            if key not in cell:
                raise bad(f"cell {number} has no {key}")
        source = cell["source"]
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
            raise bad(f"cell {number}: its source is not text")
        if not isinstance(cell["metadata"], dict):
            raise bad(f"cell {number}: its metadata is not a JSON object")
    return data


def notebook_code_cells(data: dict[str, Any]) -> list[tuple[int, str, str | None]]:
    """``(number among all cells, source, id)`` of each code cell of a notebook read by `read_notebook_json`."""
    found = []
    for number, cell in enumerate(data["cells"], start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"]
        source = "".join(source) if isinstance(source, list) else source
        cell_id = cell.get("id")
        found.append((number, source, cell_id if isinstance(cell_id, str) else None))
    return found


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
