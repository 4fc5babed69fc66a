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

The engine is this package's code, and the functions outside it that start and end a
recorder (`syncfree.watch`'s enter and exit, watches.py), registered with `engine_code`:
syncfree's other modules count as library code, held back only when the engine called
them, so without it an interrupt that landed on the first instruction of ``Watch.__exit__``
(a function's entry is a check, before its ``try``) was raised there, in the user's `with`
statement's view, and the watch's recorder was never ended: every wrapper, explicit.py's
included, the debug mode and the filters stayed.

Held back longer while the engine puts things back: where a frame of a function
registered with `teardown_code` (a recorder's or a watch's exit, `Undo.close`) is on the
stack, up to `MAX_TEARDOWN_HOLD_S`, so that an interrupt held back for `MAX_HOLD_S`
elsewhere is not raised on the way out, e.g. on the first instruction of
``SyncRecorder.__exit__``, before its ``try``, which leaves everything installed.

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
#: A re-armed signal whose handler has not run this long after (the main thread is blocked in C) is sent again.
_WAKE_AFTER_S = 0.05
_handler_runs: dict[int, int] = {}  # signal -> runs of our handlers (handler_ran)
#: Held back no longer than this: should the engine itself loop or block, Ctrl-C still
#: stops it (possibly leaving state behind, which beats a kernel that cannot be stopped).
MAX_HOLD_S = 2.0
#: ... and no longer than this while the engine puts things back (`teardown_code`): a
#: restore that hangs is still stopped.
MAX_TEARDOWN_HOLD_S = 20.0
_TEARDOWN_DEPTH = 64  # frames looked at for a teardown function (only once held MAX_HOLD_S)
_held_since: list[float] = []  # when the interrupt being held back first arrived

_holders: list[Any] = []           # owners between hold() and release(), main thread only
_previous: Any = None              # the handler ours replaced
_places: dict[str, bool | None] = {}  # filename -> True engine, None library, False user
_outstanding: list[int] = []       # one entry per interrupt held back, not yet re-armed
                                   # (append/pop: atomic from any thread)
_previous_unraisable: list[Any] = []  # the sys.unraisablehook ours replaced

_engine_code: set[Any] = set()    # code outside this package that counts as the engine
_teardown_code: set[Any] = set()  # code that puts things back (held up to MAX_TEARDOWN_HOLD_S)

#: Code objects looked through, to the frame they run for: a ``sys.settrace`` function
#: (tests/test_leaks.py registers its injector's) runs in a frame of its own on top of the
#: traced engine frame.
transparent: set[Any] = set()


def engine_code(*functions: Any) -> None:
    """Count ``functions`` (outside this package: a watch's enter and exit) as the engine:
    an interrupt that lands in them, or in library code they called, is held back."""
    _engine_code.update(f.__code__ for f in functions)


def teardown_code(*functions: Any) -> None:
    """Mark ``functions`` as putting things back: an interrupt that lands while one of them
    runs (anywhere below it) is held back up to `MAX_TEARDOWN_HOLD_S`, not `MAX_HOLD_S`."""
    _teardown_code.update(f.__code__ for f in functions)


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
    """Undo `hold(owner)` (idempotent); the last owner out restores the previous handler. From another thread
    than the main one (a watch closed there) only the main thread can put the handler back: until it does (at its
    next hold and release, or at the next SIGINT), `_handler` without holders acts as the previous one."""
    main = threading.get_ident() == threading.main_thread().ident
    if not main and not any(h is owner for h in _holders):
        return
    for i in range(len(_holders) - 1, -1, -1):
        if _holders[i] is owner:
            del _holders[i]
    if _holders:
        return
    _held_since.clear()
    if sys.unraisablehook is _unraisable and _previous_unraisable:
        sys.unraisablehook = _previous_unraisable[0]
    if main and signal.getsignal(signal.SIGINT) is _handler:
        # signal.signal runs pending handlers first, while ours is still installed: an
        # interrupt that arrives now is re-armed and raised after the restore.
        signal.signal(signal.SIGINT, _previous)


def held() -> bool:
    """Whether SIGINT is routed through the engine's handler now."""
    return signal.getsignal(signal.SIGINT) is _handler


def _handler(signum: int, frame: FrameType | None) -> None:
    handler_ran(signum)
    if not _holders:  # released from another thread (`release`): the previous handler goes back, and runs
        if signal.getsignal(signal.SIGINT) is _handler and callable(_previous):
            signal.signal(signal.SIGINT, _previous)
        _held_since.clear()
        if callable(_previous) and _previous is not _handler:
            return _previous(signum, frame)
        raise KeyboardInterrupt
    now = time.monotonic()
    if in_engine(frame) and (not _held_since or now - _held_since[0] < MAX_HOLD_S
                             or (now - _held_since[0] < MAX_TEARDOWN_HOLD_S
                                 and in_teardown(frame))):
        # Re-armed from another thread, a moment later: re-arming here would run this
        # handler again at once, inside itself (the check after the call).
        if not _held_since:
            _held_since.append(now)
        _outstanding.append(signum)
        _start_rearm(signum)
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
        _start_rearm(signal.SIGINT)
        return
    hook = _previous_unraisable[0] if _previous_unraisable else sys.__unraisablehook__
    hook(unraisable)


def _start_rearm(signum: int) -> None:
    """`_rearm` in a thread of its own, started with the low-level ``_thread`` API: ``threading.Thread.start`` is
    patched while a watch runs (capture/threads.py routes a new thread to the watch), and a thread started through it
    from here could wait on a lock that the interrupted engine code holds, and the interrupt was then never raised."""
    _thread.start_new_thread(_rearm, (signum,))


def rearm_later(signum: int) -> None:
    """Run the Python handler of ``signum`` again a moment later, in the main thread (a handler that found the
    signal landed in the engine: script_run.py's SIGTERM handler)."""
    _outstanding.append(signum)
    _start_rearm(signum)


def _rearm(signum: int) -> None:
    time.sleep(_REARM_DELAY_S)  # the handler returns first
    runs = _handler_runs.get(signum, 0)
    installed = signal.getsignal(signum)
    try:
        _thread.interrupt_main(signum)  # runs the handler installed then, like a signal
    finally:
        _outstanding.pop()
    _wake_main(signum, runs, installed)


def _wake_main(signum: int, runs: int, installed: Any) -> None:
    """``_thread.interrupt_main`` only marks the handler to run: a main thread that has gone on into a call blocked
    in C (``time.sleep``, a socket, a lock, a ``join``) runs it when that call returns. A followed child that
    multiprocessing's ``terminate()`` signalled while it was still in the engine slept out its target's 30 s, and a
    Ctrl-C held back a moment waited for the sleep's end, where the first signal would have cut it short. So when the
    handler has not run a moment later and the main thread has not moved (the same frame, at the same instruction),
    it gets the signal itself, which interrupts the call as a signal does (its handler runs once: the mark and the
    signal are one flag). Only while one of our handlers, which count their runs (`handler_ran`), is installed."""
    if installed is not signal.getsignal(signum) or not callable(installed) or signum not in _handler_runs:
        return
    main = threading.main_thread().ident
    where = sys._current_frames().get(main) if main is not None else None
    if where is None:
        return
    at = where.f_lasti
    deadline = time.monotonic() + _WAKE_AFTER_S
    while time.monotonic() < deadline:
        time.sleep(_WAKE_AFTER_S / 10)
        if _handler_runs.get(signum, 0) != runs:
            return  # it ran
    now = sys._current_frames().get(main)
    if (now is not where or now.f_lasti != at or _handler_runs.get(signum, 0) != runs
            or signal.getsignal(signum) is not installed):
        return  # the main thread moved on (the mark was taken by a handler that does not count, or runs soon)
    del now, where
    try:
        signal.pthread_kill(main, signum)
    except (OSError, ValueError):  # the main thread is gone
        pass


def handler_ran(signum: int) -> None:
    """Called first by each handler of ours that may hold a signal back (`rearm_later`): a run `_wake_main` sees, and
    stuck_main.py's watch of a main thread blocked in C (`handler_runs`)."""
    _handler_runs[signum] = _handler_runs.get(signum, 0) + 1


def handler_runs(signum: int) -> int:
    """How many times a handler of ours began for ``signum`` (`handler_ran`)."""
    return _handler_runs.get(signum, 0)


def ending_signals() -> list[int]:
    """The signals whose default action ends the process with no exit handler run, besides SIGINT (Python's
    KeyboardInterrupt) and SIGKILL: SIGTERM (a CI job cancelled, ``timeout``), SIGHUP (the terminal or SSH session
    closed), SIGQUIT (Ctrl-\\), SIGUSR1/SIGUSR2 (a scheduler's warning before its time limit, Slurm's
    ``--signal``), SIGALRM, SIGXCPU (a CPU-time limit). A run that writes its report first handles those the program
    left at their default."""
    import signal

    names = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU")
    return [getattr(signal, name) for name in names if hasattr(signal, name)]


def cut_handler_frames(exc: BaseException) -> None:
    """Cut `_handler`'s own frame off the end of the traceback of a KeyboardInterrupt it raised (through the
    handler it replaced): Python's default handler is C code, so under Python alone the traceback ends at the
    program's line."""
    tb, last_other = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is not _handler.__code__:
            last_other = tb
        tb = tb.tb_next
    if last_other is not None:
        last_other.tb_next = None


def outstanding() -> int:
    """Interrupts held back and not yet raised again (tests wait for 0)."""
    return len(_outstanding)


def in_engine(frame: FrameType | None) -> bool:
    """Whether ``frame`` is the engine's code, or library code that the engine called
    (within a few frames); False at the first frame of the user's code."""
    depth = 0
    while frame is not None and depth < _DEPTH:
        code = frame.f_code
        if code in transparent:  # a tracer running on the traced frame's behalf
            frame = frame.f_back
            continue
        if code in _engine_code:
            return True
        filename = code.co_filename
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


def in_teardown(frame: FrameType | None) -> bool:
    """Whether a function registered with `teardown_code` is running at ``frame`` or
    below it on the stack (it called the code there)."""
    depth = 0
    while frame is not None and depth < _TEARDOWN_DEPTH:
        if frame.f_code in _teardown_code:
            return True
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
    from .sites import library_roots

    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if any(path.startswith(root + os.sep) for root in library_roots()):
        return None
    return False


__all__ = ["cut_handler_frames", "ending_signals", "engine_code", "handler_ran", "handler_runs", "hold", "held", "in_engine",
           "in_teardown", "outstanding", "rearm_later", "release",
           "teardown_code"]
