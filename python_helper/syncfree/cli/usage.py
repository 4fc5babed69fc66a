"""What every command shares: the exit codes, a usage problem and how it is printed (one line on stderr)."""

from __future__ import annotations

import errno
import os
import sys

from syncfree.output import clean_text, silence_stdout

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FOUND", "UsageProblem", "error", "not_a_file", "silence_stdout"]

EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class UsageProblem(Exception):
    """A problem with what the user asked for: printed as ``syncfree: error: ...``, exit code 2."""

    missing = False  # `not_a_file`: nothing at the path


def error(problem: object) -> None:
    """``syncfree: error: <the first line of the problem>`` on stderr."""
    print(f"syncfree: error: {clean_text(str(problem)).splitlines()[0] if str(problem) else type(problem).__name__}", file=sys.stderr)



def not_a_file(target: str) -> UsageProblem:
    """The problem with a script or notebook path that is not a file (``Path.is_file()`` said False): ``no such file``
    when nothing is there, else what the system says (``Too many levels of symbolic links`` for a symlink loop, which
    ``is_file`` also answers False for; ``Permission denied`` for a folder on the way that cannot be searched)."""
    try:
        os.stat(target)
    except OSError as problem:
        if problem.errno == errno.ENOENT:
            missing = UsageProblem(f"cannot read {target}: no such file")
            missing.missing = True  # nothing there, or a dangling link
            return missing
        return UsageProblem(f"cannot read {target}: {problem.strerror or problem}")
    if os.path.isdir(target):
        return UsageProblem(f"cannot run {target}: it is a folder")
    return UsageProblem(f"cannot read {target}: not a regular file")
