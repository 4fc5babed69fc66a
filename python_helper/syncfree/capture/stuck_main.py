"""A signal that ends the program, while its main thread is blocked in C: the report, then the end Python gives.

`syncfree run` handles SIGTERM (and the other signals whose default ends a process) with a Python handler, so that
the report is written before the process dies of the signal (script_run.py). CPython runs a Python handler only
when the main thread is back in the interpreter: a main thread blocked in C (a collective waiting for a peer that
hangs, a deadlocked mutex, a driver call) takes the signal and lives on. Python alone, with the signal's default
action, dies at once: a scheduler's or ``timeout``'s SIGTERM ended the job under python and left it running under
syncfree, until a SIGKILL ended it without a report.

`StuckMainWatch` sees the signal arrive: CPython's C-level handler writes its number to the wakeup file descriptor
(``signal.set_wakeup_fd``), from any thread's point of view at once. A thread of its own reads it; when the Python
handler has not begun within `GRACE_S` (our handlers say so: `interrupts.handler_ran`) and the run is not already ending,
``on_stuck(signum)`` writes the report from that thread, and the process then dies of the signal, as under python.

Only where the program has no wakeup file descriptor of its own (asyncio's loop sets one to handle signals): the
program's comes first, and the run goes on as before without this. A forked child does not inherit it (a child's
signals would be read as the parent's): `os.register_at_fork` takes it out there.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from collections.abc import Callable, Collection

from . import interrupts

__all__ = ["GRACE_S", "StuckMainWatch"]

#: How long the main thread has to begin the Python handler before the signal is taken as landed on a stuck main.
GRACE_S = 3.0
_active: list[StuckMainWatch] = []


class StuckMainWatch:
    def __init__(self, signals: Collection[int], on_stuck: Callable[[int], None], ending: Callable[[], bool],
                 grace_s: float | None = None) -> None:
        self.signals = set(signals)
        self.on_stuck = on_stuck  # writes the report (the run's hard exit), in the watch's thread
        self.ending = ending  # whether the run is already ending (its handler, an os._exit): nothing to do
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self._pipe: tuple[int, int] | None = None
        self._previous = -1

    def start(self) -> bool:
        """Watch from now on (main thread only); False where the program has a wakeup fd of its own."""
        if threading.current_thread() is not threading.main_thread():
            return False
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read)
            os.close(write)
            return False
        if previous != -1:  # the program's (asyncio's): it stays
            signal.set_wakeup_fd(previous)
            os.close(read)
            os.close(write)
            return False
        self._pipe = (read, write)
        _active.append(self)
        _thread.start_new_thread(self._watch, (read,))  # not threading's: no thread of the program's to join
        return True

    def stop(self) -> None:
        """Stop watching (main thread): the wakeup fd goes, if it is still ours, and the pipe is closed."""
        if self._pipe is None:
            return
        read, write = self._pipe
        self._pipe = None
        if self in _active:
            _active.remove(self)
        try:
            if threading.current_thread() is threading.main_thread():
                current = signal.set_wakeup_fd(-1)
                if current != write:  # the program set its own meanwhile: it stays
                    signal.set_wakeup_fd(current)
        except (ValueError, OSError):
            pass
        os.close(write)  # the watching thread's read ends
        # the read end is closed by the watching thread

    def _watch(self, read: int) -> None:
        seen: dict[int, int] = {}
        try:
            while True:
                try:
                    data = os.read(read, 64)
                except InterruptedError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                for signum in data:
                    if signum not in self.signals or self._pipe is None:
                        continue
                    if self._handled(signum, seen):
                        continue
                    if not self.ending():
                        self._end(signum)
                        return
        finally:
            try:
                os.close(read)
            except OSError:
                pass

    def _handled(self, signum: int, seen: dict[int, int]) -> bool:
        """Whether our handler began for this signal within the grace (or the run is ending meanwhile)."""
        deadline = time.monotonic() + self.grace_s
        while True:
            count = interrupts.handler_runs(signum)
            if count > seen.get(signum, 0):
                seen[signum] = count
                return True
            if self.ending():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _end(self, signum: int) -> None:
        """The report from here, then the process dies of the signal (its default action, set from C: Python's
        ``signal.signal`` is for the main thread only)."""
        done = threading.Event()

        def report() -> None:
            try:
                self.on_stuck(signum)
            finally:
                done.set()

        _thread.start_new_thread(report, ())
        done.wait(30.0)  # a report that cannot be written (a lock the stuck thread holds) does not keep it alive
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal(ctypes.c_int(signum), ctypes.c_void_p(0))  # SIG_DFL
            os.kill(os.getpid(), signum)
            time.sleep(1.0)
        except Exception:  # noqa: BLE001 - no libc to set it with: the status a shell shows for it
            pass
        os._exit(128 + signum)


def _after_fork_in_child() -> None:
    if not _active:
        return
    _active.clear()
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass


os.register_at_fork(after_in_child=_after_fork_in_child)
