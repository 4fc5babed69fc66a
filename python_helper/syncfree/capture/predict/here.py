"""Where predict mode runs: which thread runs which session's mode, and which frames are the user's.

The bottom of the predict package: every other module may import it, it imports none of them (the mode class is
told to it when it is built, `MODE_CLASS`), so the modules that only ask "is predict mode on here?" or "whose line
is this?" (the stand-ins, the patches, the autograd and compile hooks) need not import the mode, the claims or the
session.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

#: What the modules below session.py call a `session.PredictSession` in their annotations (they do not import it:
#: session.py imports them).
Session = Any

#: thread ident -> the session whose mode runs there (claims.py keeps it, under its lock).
thread_modes: dict[int, Session] = {}
get_ident = threading.get_ident
#: [the PredictMode class], once mode.py has built it (torch is imported lazily).
MODE_CLASS: list[type] = []


def predict_mode_here() -> bool:
    """Whether a predict session's mode is on this thread's function-mode stack."""
    if not MODE_CLASS:
        return False
    from torch.overrides import _get_current_function_mode_stack

    mode_class = MODE_CLASS[0]
    return any(type(m) is mode_class for m in _get_current_function_mode_stack())


def predict_session_here() -> Any:
    """The session of the innermost predict mode on this thread's stack, else None."""
    if not MODE_CLASS:
        return None
    from torch.overrides import _get_current_function_mode_stack

    mode_class = MODE_CLASS[0]
    for mode in reversed(_get_current_function_mode_stack()):
        if type(mode) is mode_class:
            return mode.session
    return None


def calling_line(frame: Any) -> str:
    """Where ``frame`` or the first frame out from it outside torch and this package
    is, as the report's notes show it (``line N`` in a notebook cell)."""
    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    ours = predict_files()
    while frame is not None and (frame.f_code.co_filename.startswith(torch_dir)
                                 or frame.f_code.co_filename in ours):
        frame = frame.f_back
    if frame is None:
        return "?"
    filename = frame.f_code.co_filename
    if filename.startswith("<"):  # a notebook cell
        return f"line {frame.f_lineno}"
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        relative = filename
    return f"{filename if relative.startswith('..') else relative}:{frame.f_lineno}"


_SKIPPED: frozenset[str] | None = None


@functools.cache
def predict_files() -> frozenset[str]:
    """The source files of this package: a frame there is the engine's, never the user's."""
    here = os.path.dirname(os.path.abspath(__file__))
    return frozenset(os.path.join(here, name) for name in os.listdir(here)
                     if name.endswith(".py"))


def user_frame() -> Any:
    """The innermost frame outside this package and torch's torch-function dispatch
    (torch/overrides.py, handle_torch_function)."""
    global _SKIPPED
    if _SKIPPED is None:
        import torch.overrides

        _SKIPPED = predict_files() | {
            torch.overrides.handle_torch_function.__code__.co_filename}
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in _SKIPPED:
        frame = frame.f_back
    return frame


class CallNotes:
    """Calls a session ran some other way than a GPU would, per (name, calling line); one
    note at the end of the session names the most frequent (`text` words it)."""

    MAX_NAMED = 3

    def __init__(self, session: Any) -> None:
        self.session = session
        self.calls: dict[tuple[str, str], int] = {}
        self.noted = False

    def count(self, name: str, where: str) -> None:
        key = (name, where)
        self.calls[key] = self.calls.get(key, 0) + 1

    def note(self) -> None:
        """Tell the recorder (once, at the end of the session)."""
        note = getattr(self.session.recorder, "note", None)
        if self.noted or not self.calls or note is None:
            return
        self.noted = True
        named = sorted(self.calls.items(), key=lambda item: -item[1])
        parts = [f"`{name}` called at {where} ×{n}" for (name, where), n in named[:self.MAX_NAMED]]
        more = f" and {len(named) - self.MAX_NAMED} more" if len(named) > self.MAX_NAMED else ""
        note(self.text(", ".join(parts) + more))

    def text(self, calls: str) -> str:
        raise NotImplementedError


class _Answers:
    """How many times the stand-ins answered a device query (``torch.cuda.is_available()``
    and the like) as a GPU machine would, in this process."""

    count = 0


ANSWERS = _Answers()


def per_thread(stand_in: Callable[..., Any], real: Callable[..., Any]) -> Callable[..., Any]:
    """``stand_in`` in a thread that runs a session (and the DataLoader pinning thread,
    which runs under a session's mode), ``real`` elsewhere."""
    modes = thread_modes
    answers = ANSWERS

    @functools.wraps(real)
    def query(*args: Any, **kwargs: Any) -> Any:
        if get_ident() in modes or predict_mode_here():
            answers.count += 1
            return stand_in(*args, **kwargs)
        return real(*args, **kwargs)

    return query
