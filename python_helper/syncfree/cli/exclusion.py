"""Which files ``syncfree check`` leaves out: ``exclude`` patterns matched as ruff matches them.

ruff (``crates/ruff_workspace/src/resolver.rs``, ``is_file_excluded``; its settings docs for ``exclude``) takes two
kinds of glob:

- a pattern without ``/`` (``models``, ``*_pb2.py``, ``.ipynb_checkpoints``) matches a file or directory *name*
  anywhere in the tree: ``exclude = ["models"]`` leaves out every folder called ``models``;
- a pattern with ``/`` (``src/legacy``, ``data/*.py``, ``**/gen/*.py``) matches a path relative to the project root
  (the folder of the ``pyproject.toml`` that holds the setting, else the working directory), and a directory that
  matches takes everything under it along.

A file given by name on the command line is checked even when a pattern matches it (ruff's default without
``--force-exclude``); the patterns apply to what a directory walk finds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

TYPE_CHECKING = False  # typing's constant, without typing's import: annotations only
if TYPE_CHECKING:
    from pathlib import Path, PurePosixPath

__all__ = ["Exclusion"]


class Exclusion:
    """Groups of patterns, each with the root its relative patterns are relative to (``a | b`` joins two)."""

    def __init__(self, patterns: Iterable[str] = (), root: Path | None = None) -> None:
        cleaned = [pattern.strip().rstrip("/") for pattern in patterns if pattern.strip().rstrip("/")]
        names = tuple(pattern for pattern in cleaned if "/" not in pattern)
        paths = tuple(pattern.removeprefix("./") for pattern in cleaned if "/" in pattern)
        self.groups: tuple[tuple[Path, tuple[str, ...], tuple[str, ...]], ...] = ()
        if cleaned:
            # (pathlib only where there are patterns: a run with none, the usual, imports none, a tenth of a warm
            # check)
            from pathlib import Path

            self.groups = (((root or Path.cwd()).resolve(), names, paths),)

    def __or__(self, other: Exclusion) -> Exclusion:
        joined = Exclusion()
        joined.groups = self.groups + other.groups
        return joined

    def __bool__(self) -> bool:
        return bool(self.groups)

    def excludes(self, path: Path) -> bool:
        """Whether ``path`` (a file or a directory met in a walk) is left out, by its name or its relative path."""
        import fnmatch  # (here, as pathlib: a run without patterns matches nothing)
        from pathlib import Path, PurePosixPath

        absolute: Path | None = None
        for root, names, paths in self.groups:
            if any(fnmatch.fnmatchcase(path.name, pattern) for pattern in names):
                return True
            if paths:
                absolute = absolute or Path(os.path.abspath(path))
                try:
                    relative = PurePosixPath(absolute.relative_to(root).as_posix())
                except ValueError:
                    continue  # outside the root: only name patterns reach it
                if any(_path_matches(relative, pattern) for pattern in paths):
                    return True
        return False


def _path_matches(relative: PurePosixPath, pattern: str) -> bool:
    """``src/legacy`` matches that folder, ``data/*.py`` the files in it, ``**/gen`` a ``gen`` at any depth."""
    import fnmatch

    text = relative.as_posix()
    if fnmatch.fnmatchcase(text, pattern):
        return True
    if pattern.startswith("**/"):
        tail = pattern[3:]
        parts = text.split("/")
        return any(fnmatch.fnmatchcase("/".join(parts[i:]), tail) for i in range(len(parts)))
    return False
