"""``Path(name).is_file()`` and ``Path(name).is_dir()`` on plain names, without importing pathlib (a check served
from its cache imports no pathlib: bench/README.md, issue 40's speed): the same answers, the same errors raised."""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["is_dir", "is_file"]

#: The errors pathlib answers False to (its _IGNORED_ERRNOS and _IGNORED_WINERRORS); others are raised.
_MISSING_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})
_MISSING_WINERRORS = frozenset({21, 123, 1921})


def _mode(name: str) -> int | None:
    """The file's mode, None where pathlib's test would answer False."""
    try:
        return os.stat(name).st_mode
    except OSError as error:
        if getattr(error, "errno", None) in _MISSING_ERRNOS or getattr(error, "winerror", None) in _MISSING_WINERRORS:
            return None
        raise
    except ValueError:  # a name with a null byte
        return None


def is_file(name: str) -> bool:
    """``Path(name).is_file()``."""
    mode = _mode(name)
    return mode is not None and stat.S_ISREG(mode)


def is_dir(name: str) -> bool:
    """``Path(name).is_dir()``."""
    mode = _mode(name)
    return mode is not None and stat.S_ISDIR(mode)
