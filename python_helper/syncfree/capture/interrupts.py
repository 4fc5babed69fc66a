"""Ctrl-C never lands inside the engine: it is raised just outside it instead.

A KeyboardInterrupt is raised by the SIGINT handler, which CPython runs in the main thread
at the next "eval breaker" check after the signal arrives: a function's first
instruction, the return of a call, a backward jump (Python/ceval.c, RESUME and
CHECK_EVAL_BREAKER). So it can land on the first line of `SyncRecorder.__exit__`, before
any ``try`` of ours can catch it, or between two steps of putting torch back.

While a recorder runs in the main thread, SIGINT goes to `_handler`, which looks at where
the signal landed. In the engine's own code (this package), or in library code the engine
called a few frames down (torch, the standard library, syncfree's static pass), it
returns at once and a short-lived thread re-arms the signal a millisecond later
(``_thread.interrupt_main``; re-armed from the handler itself, CPython would run the
handler again inside it): the interrupt is raised where the main thread is then, or held
back again if that is still the engine. So it lands in the cell's code, or just after the
recorder's exit with everything restored. Never for longer than `MAX_HOLD_S`: engine code
that loops or blocks is still stopped. Anywhere else it hands the signal to the handler it replaced, so
Python's default handler raises KeyboardInterrupt right there, as without syncfree.

A KeyboardInterrupt that lands in a finalizer (weakref callback, generator closed by the
garbage collector, ``__del__``) is dropped by CPython; while SIGINT is held, the engine's
``sys.unraisablehook`` raises it again instead.

`hold(owner)` installs the handler (and the hook) when the first owner (a recorder, a
predict session) arrives; `release(owner)` puts the previous handler back when the last one leaves, and
only if the handler is still ours (a cell that installed its own keeps it). Both are
idempotent and run inside the engine, so an interrupt cannot split them. Other threads
never get KeyboardInterrupt from a signal and cannot install handlers: there both do
nothing. ``_thread.interrupt_main()`` (what ``bench/stress_interrupts.py`` fires, and what
IPython's and ipykernel's interrupts amount to) runs the installed handler like a signal.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_DEPTH = 6  # frames looked at from where the signal landed, outward
_REARM_DELAY_S = 0.001
#: Held back no longer than this: should the engine itself loop or block, Ctrl-C still
#: stops it (possibly leaving state behind, which beats a kernel that cannot be stopped).
MAX_HOLD_S = 2.0
_held_since: list[float] = []  # when the interrupt being held back first arrived

_holders: list[Any] = []           # owners between hold() and release(), main thread only
_previous: Any = None              # the handler ours replaced
_places: dict[str, bool | None] = {}  # filename -> True engine, None library, False user
_outstanding: list[int] = []       # one entry per interrupt held back, not yet re-armed
                                   # (append/pop: atomic from any thread)
_previous_unraisable: list[Any] = []  # the sys.unraisablehook ours replaced

#: Code objects looked through, to the frame they run for: a ``sys.settrace`` function
#: (tests/test_leaks.py registers its injector's) runs in a frame of its own on top of the
#: traced engine frame.
transparent: set[Any] = set()


def hold(owner: Any) -> None:
    """Route SIGINT through `_handler` until `release(owner)` (main thread only)."""
    global _previous
    if threading.get_ident() != threading.main_thread().ident:
        return
    if any(h is owner for h in _holders):
        return
    _holders.append(owner)
    current = signal.getsignal(signal.SIGINT)
    # SIG_IGN / SIG_DFL: nothing raises KeyboardInterrupt to hold back; None: a handler set
    # from C that could not be put back.
    if current is not _handler and callable(current):
        _previous = current
        _held_since.clear()
        signal.signal(signal.SIGINT, _handler)
    if sys.unraisablehook is not _unraisable:
        _previous_unraisable[:] = [sys.unraisablehook]
        sys.unraisablehook = _unraisable


def release(owner: Any) -> None:
    """Undo `hold(owner)` (idempotent); the last owner out restores the previous handler."""
    if threading.get_ident() != threading.main_thread().ident:
        return
    for i in range(len(_holders) - 1, -1, -1):
        if _holders[i] is owner:
            del _holders[i]
    if _holders:
        return
    _held_since.clear()
    if sys.unraisablehook is _unraisable and _previous_unraisable:
        sys.unraisablehook = _previous_unraisable[0]
    if signal.getsignal(signal.SIGINT) is _handler:
        # signal.signal runs pending handlers first, while ours is still installed: an
        # interrupt that arrives now is re-armed and raised after the restore.
        signal.signal(signal.SIGINT, _previous)


def held() -> bool:
    """Whether SIGINT is routed through the engine's handler now."""
    return signal.getsignal(signal.SIGINT) is _handler


def _handler(signum: int, frame: FrameType | None) -> None:
    now = time.monotonic()
    if in_engine(frame) and (not _held_since or now - _held_since[0] < MAX_HOLD_S):
        # Re-armed from another thread, a moment later: re-arming here would run this
        # handler again at once, inside itself (the check after the call).
        if not _held_since:
            _held_since.append(now)
        _outstanding.append(signum)
        threading.Thread(target=_rearm, args=(signum,), name="syncfree-interrupt",
                         daemon=True).start()
        return
    _held_since.clear()  # raised now: where it landed, or, held too long, in the engine
    previous = _previous
    if callable(previous) and previous is not _handler:
        previous(signum, frame)
    else:
        raise KeyboardInterrupt


def _unraisable(unraisable: Any) -> None:
    """A KeyboardInterrupt that landed in a finalizer (a weakref callback, a generator
    closed by the garbage collector, ``__del__``) is dropped by CPython ("Exception ignored
    in"); while the engine holds SIGINT it is raised again instead, a moment later."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt) and held():
        _outstanding.append(signal.SIGINT)
        threading.Thread(target=_rearm, args=(signal.SIGINT,), name="syncfree-interrupt",
                         daemon=True).start()
        return
    hook = _previous_unraisable[0] if _previous_unraisable else sys.__unraisablehook__
    hook(unraisable)


def _rearm(signum: int) -> None:
    time.sleep(_REARM_DELAY_S)  # the handler returns first
    try:
        _thread.interrupt_main(signum)  # runs the handler installed then, like a signal
    finally:
        _outstanding.pop()


def outstanding() -> int:
    """Interrupts held back and not yet raised again (tests wait for 0)."""
    return len(_outstanding)


def in_engine(frame: FrameType | None) -> bool:
    """Whether ``frame`` is the engine's code, or library code that the engine called
    (within a few frames); False at the first frame of the user's code."""
    depth = 0
    while frame is not None and depth < _DEPTH:
        if frame.f_code in transparent:  # a tracer running on the traced frame's behalf
            frame = frame.f_back
            continue
        filename = frame.f_code.co_filename
        place = _places.get(filename, _MISSING)
        if place is _MISSING:
            place = _places[filename] = _place_of(filename)
        if place is True:
            return True
        if place is False:
            return False
        frame = frame.f_back
        depth += 1
    return False


_MISSING: Any = object()


def _place_of(filename: str) -> bool | None:
    if filename.startswith(_ENGINE_DIR):
        return True
    if filename.startswith(("<frozen", "<string>")):  # importlib, dataclass methods
        return None
    norm = filename.replace("\\", "/")
    if "/site-packages/" in norm or "/dist-packages/" in norm:
        return None
    from .sites import _library_roots

    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if any(path.startswith(root + os.sep) for root in _library_roots()):
        return None
    return False


__all__ = ["hold", "release", "held", "in_engine", "outstanding"]
