"""``syncfree check``'s cache of per-file results, as ruff's ``.ruff_cache``: a file whose bytes, path, syncfree
code and result-changing options are those of an earlier run is not read by a worker, parsed or analysed again.
A file whose size and modification time are those recorded when its bytes were hashed is not even read again (as
ruff and git trust a file's stat): unless it was modified within two seconds before that hash was taken (git's
"racily clean" case), when its bytes are read and hashed again.

One JSON file per choice of settings, ``<cache dir>/<syncfree version>/<settings hash>.json``: the settings hash
covers syncfree's own sources, each by its path, size and modification time, as Python's bytecode cache trusts them
(so an edited rule invalidates everything; the bytes too of a file modified within two seconds), the Python version
(its ``ast`` may differ), the rules chosen (their codes) and ``--possible``. Inside, each path maps to the hash of the
file's bytes, the file's diagnostics and its stat when hashed. JSON, not pickle: a cache folder is a file anyone could have committed, and
reading it must not run code; an entry that is not as written (a corrupt or truncated file) counts as absent.

The cache folder (default ``.syncfree_cache`` next to the ``pyproject.toml`` that configured the run, else in the
working directory; ``--cache-dir`` or ``SYNCFREE_CACHE_DIR`` to move it, ``--no-cache`` to do without) holds a
``CACHEDIR.TAG`` and a ``.gitignore`` of ``*``, as ruff's does. A folder that cannot be written leaves the run
uncached, never failed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from operator import attrgetter

from syncfree._version import __version__
from syncfree.collector import paused as cycle_collection_paused
from syncfree.jsontext import dumps as json_dumps
from syncfree.jsontext import loads as json_loads
from syncfree.output import Diagnostic

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

try:
    # hashlib's blake2b is this one; importing hashlib loads OpenSSL as well (6 ms, a tenth of a warm run)
    from _blake2 import blake2b
except ImportError:  # another Python than CPython
    from hashlib import blake2b

__all__ = ["DEFAULT_CACHE_DIR", "ResultCache", "code_digest", "file_digest", "file_stat", "tree_digest"]

DEFAULT_CACHE_DIR = ".syncfree_cache"
_FIELDS = Diagnostic._fields
#: An entry not used by any run for this long is dropped when the cache is next written.
_KEEP_SECONDS = 30 * 24 * 3600
_TOUCH_SECONDS = 24 * 3600  # a hit refreshes an entry's time at most once a day (a warm run writes nothing)
#: A file modified this close before its bytes were hashed may change again within the same modification time
#: (coarse file-system clocks): its stat is not trusted, its bytes are hashed again.
_RACY_NS = 2_000_000_000
_CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file is a cache directory tag created by syncfree.\n"
                 "# For information about cache directory tags see https://bford.info/cachedir/\n")

_code_digest: str | None = None


_CODE_SUFFIXES = (".py", ".json", ".toml", ".txt")


def code_digest() -> str:
    """A hash of every file of the syncfree package (its rules, the walk, the CLI), computed once per process
    (:func:`tree_digest`)."""
    global _code_digest
    if _code_digest is None:
        _code_digest = tree_digest(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    return _code_digest


def tree_digest(package: str) -> str:
    """A hash of the source files under a folder (``.py``, ``.json``, ``.toml``, ``.txt``; ``__pycache__`` left out):
    of each one's path, size and modification time (ns), as Python trusts them to reuse a module's bytecode (reading
    and hashing syncfree's 2 MB of sources was a tenth of a warm run), and of the bytes of a file modified within
    ``_RACY_NS`` before now (an edit within the clock's reach may leave the time as it was: see
    :meth:`ResultCache.unchanged`)."""
    racy = time.time_ns() - _RACY_NS
    chunks: list[bytes] = []
    # (os.scandir's entries, as os.walk would give them: each folder's files sorted, then its folders, sorted; one
    # update of the digest with everything, where os.walk, os.path's joins and an update a file took twice as long)
    _digest_folder(package, "./", racy, chunks)
    return blake2b(b"".join(chunks), digest_size=16).hexdigest()


def _digest_folder(folder: str, relative: str, racy: int, chunks: list[bytes]) -> None:
    """:func:`tree_digest`'s part for one folder and the folders in it (``relative``: its path from the package's,
    ``./`` for the package's own, as os.path.relpath and os.path.join spell them)."""
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=_name)
    except OSError:
        return  # (os.walk leaves out a folder it cannot list)
    folders = []
    for entry in entries:
        name = entry.name
        try:
            is_folder = entry.is_dir()
        except OSError:
            is_folder = False
        if is_folder:
            if name != "__pycache__":
                folders.append(entry)
            continue
        if not name.endswith(_CODE_SUFFIXES):
            continue
        stat = os.stat(entry.path)
        chunks.append(f"{relative}{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
        if stat.st_mtime_ns > racy:
            with open(entry.path, "rb") as stream:
                chunks.append(stream.read() + b"\0")
    for entry in folders:
        _digest_folder(entry.path, f"{relative[2:] if relative == './' else relative}{entry.name}/", racy, chunks)


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def file_digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


def file_stat(path: Path) -> list[int] | None:
    """What a cache entry records of a file besides its bytes' hash: its modification time (ns) and size, and when
    it was hashed (now, ns); None when the file cannot be stat'ed."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return [stat.st_mtime_ns, stat.st_size, time.time_ns()]


class ResultCache:
    """The cached results of one choice of settings (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str], rules: Iterable[str], possible: bool) -> None:
        # (names, not Paths: a run whose results all come from the cache imports no pathlib, a tenth of such a run;
        # saving, which writes, makes the Paths)
        self._folder = os.fspath(folder)
        settings = json_dumps([__version__, code_digest(), sys.version, sorted(rules), bool(possible)])
        name = blake2b(settings.encode(), digest_size=16).hexdigest()
        self._file = os.path.join(self._folder, __version__, f"{name}.json")
        self.entries: dict[str, list[Any]] = {}
        self.changed = False
        self.now = int(time.time())
        try:
            # (a large tree's cache is thousands of lists, none of them garbage: no collection walks them young)
            with cycle_collection_paused(), open(self._file, "rb") as stream:
                data = json_loads(stream.read())  # (syncfree.jsontext: json's value, without its import)
            if isinstance(data, dict) and isinstance(data.get("entries"), dict):
                self.entries = data["entries"]
        except (OSError, ValueError, RecursionError):
            pass  # no cache yet, or one not as written: start empty

    @property
    def folder(self) -> Path:
        from pathlib import Path

        return Path(self._folder)

    @property
    def file(self) -> Path:
        """The cache's file, ``<cache dir>/<syncfree version>/<settings hash>.json``."""
        from pathlib import Path

        return Path(self._file)

    def unchanged(self, path: str, stat: list[int] | None) -> tuple[list[Diagnostic], int] | None:
        """The result stored for this path when its stat (:func:`file_stat`) is the one recorded with the hash of its
        bytes and the file was not modified just before that hash was taken; None otherwise (read and hash it)."""
        entry = self.entries.get(path)
        try:
            recorded = entry[4] if entry is not None and stat is not None else None
            if (recorded is None or recorded[0] != stat[0] or recorded[1] != stat[1]  # type: ignore[index]
                    or recorded[0] > recorded[2] - _RACY_NS):
                return None
        except (TypeError, IndexError, KeyError):
            return None
        return self.get(path, entry[0])  # type: ignore[index]

    def get(self, path: str, digest: str, stat: list[int] | None = None) -> tuple[list[Diagnostic], int] | None:
        """The diagnostics and syntax-error count stored for this path with these bytes, None if there are none;
        ``stat``: the file's (:func:`file_stat`, taken before its bytes were read), recorded for the next run."""
        entry = self.entries.get(path)
        try:
            if entry is None or len(entry) != 5 or entry[0] != digest:
                return None
            diagnostics = [_diagnostic(row) for row in entry[2]]
            syntax_errors = entry[1]
            if type(syntax_errors) is not int:
                return None
        except (TypeError, ValueError, IndexError, KeyError):
            return None  # an entry not as written: check the file again
        if self.now - _int(entry[3]) > _TOUCH_SECONDS:
            entry[3] = self.now
            self.changed = True
        if stat is not None and entry[4] != stat:
            entry[4] = stat  # hashed again (touched, or hashed too soon after a change): its stat now
            self.changed = True
        return diagnostics, syntax_errors

    def put(self, path: str, digest: str, diagnostics: list[Diagnostic], syntax_errors: int,
            stat: list[int] | None = None) -> None:
        self.entries[path] = [digest, syntax_errors, [_row(d) for d in diagnostics], self.now, stat]
        self.changed = True

    def save(self) -> None:
        """Write the cache (only if something changed), atomically; entries unused for a month are dropped."""
        if not self.changed:
            return
        from pathlib import Path

        kept = {path: entry for path, entry in self.entries.items()
                if isinstance(entry, list) and len(entry) == 5 and self.now - _int(entry[3]) <= _KEEP_SECONDS}
        try:
            _prepare(self.folder)
            file = self.file
            file.parent.mkdir(parents=True, exist_ok=True)
            # A name of this process's own, created exclusively and readable by its owner alone, as tempfile.mkstemp
            # makes one (tempfile's import, with shutil, bz2, lzma and random, was 4 ms of a cold run).
            temporary = str(file.parent / f".tmp-{os.getpid()}-{time.time_ns()}.json")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
            handle = os.open(temporary, flags, 0o600)
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as stream:
                    # json.dumps, one write: json.dump never takes the C encoder (a cold run's largest cost here)
                    stream.write(json_dumps({"entries": kept}, separators=(",", ":")))
                os.replace(temporary, file)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError:
            pass  # a read-only tree or a full disk: the run stays uncached
        self.changed = False


def _prepare(folder: Path) -> None:
    """Create the cache folder with ruff's markers: a CACHEDIR.TAG (backup tools skip it) and a .gitignore of ``*``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("CACHEDIR.TAG", _CACHEDIR_TAG), (".gitignore", "# Automatically created by syncfree.\n*\n")):
        marker = folder / name
        if not marker.exists():
            marker.write_text(text, encoding="utf-8")


def _int(value: object) -> int:
    return value if type(value) is int else 0


def _row(diagnostic: Diagnostic) -> list[Any]:
    return list(_FIELD_VALUES(diagnostic))  # (each field by name, in C: a cold run of a large library has thousands)


_FIELD_VALUES = attrgetter(*_FIELDS)


_STRINGS = tuple(_FIELDS.index(name) for name in ("path", "rule", "message"))
_INTS = tuple(_FIELDS.index(name) for name in ("line", "col", "end_line", "end_col"))
_NESTED = tuple(_FIELDS.index(name) for name in ("fix_edits", "chains"))  # tuples of tuples, as JSON lists of lists
_PROCESSES = _FIELDS.index("processes")
#: A Diagnostic is made from a row by setting its fields' values, not through its __init__ (a call with each of its
#: 26 fields by name: a warm run of a large library made thousands): there is nothing else its __init__ would do.
_FIELDS_ONLY = not hasattr(Diagnostic, "__post_init__") and "__slots__" not in Diagnostic.__dict__


def _diagnostic(row: list[Any]) -> Diagnostic:
    if type(row) is not list or len(row) != len(_FIELDS):
        raise ValueError("not a cached diagnostic")
    for index in _STRINGS:
        if type(row[index]) is not str:
            raise ValueError("not a cached diagnostic")
    for index in _INTS:
        if type(row[index]) is not int:
            raise ValueError("not a cached diagnostic")
    if row[_NESTED[0]] is not None or row[_NESTED[1]] is not None or row[_PROCESSES] is not None:
        row = list(row)
        for index in _NESTED:
            if row[index] is not None:
                row[index] = tuple(tuple(item) for item in row[index])
        if row[_PROCESSES] is not None:
            row[_PROCESSES] = tuple(row[_PROCESSES])
    if not _FIELDS_ONLY:
        return Diagnostic(*row)
    diagnostic = object.__new__(Diagnostic)
    diagnostic.__dict__.update(zip(_FIELDS, row))
    return diagnostic
