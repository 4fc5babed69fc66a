"""What every command shares: the exit codes, a usage problem and how it is printed (one line on stderr)."""

from __future__ import annotations

import sys

from syncfree.output import clean_text, silence_stdout

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FOUND", "UsageProblem", "error", "silence_stdout"]

EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class UsageProblem(Exception):
    """A problem with what the user asked for: printed as ``syncfree: error: ...``, exit code 2."""


def error(problem: object) -> None:
    """``syncfree: error: <the first line of the problem>`` on stderr."""
    print(f"syncfree: error: {clean_text(str(problem)).splitlines()[0] if str(problem) else type(problem).__name__}", file=sys.stderr)

