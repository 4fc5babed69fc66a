"""What the program sees of syncfree's own signal handlers: the handlers they stand in for.

`syncfree run` handles the signals that end a process (SIGTERM, SIGHUP, SIGUSR1...: interrupts.ending_signals) so
that the report is written before the process dies of the signal. A program that asks ``signal.getsignal`` saw that
handler instead of ``SIG_DFL``, and acted differently under syncfree:

- Lightning's signal connector installs its SLURM requeue handler for SIGUSR1 only where the current one is
  ``SIG_DFL``, and chains the handler it finds for SIGTERM: under syncfree a SIGUSR1 killed the job where Python
  saved a checkpoint and requeued it;
- the usual "clean up, then die of the signal" handler (``signal.signal(signum, SIG_DFL)``, then
  ``os.kill(os.getpid(), signum)``) took syncfree's handler out, and the process died without the report.

(SIGINT's handler, the engine's while a recorder runs (interrupts.py), is not hidden: ``asyncio.Runner`` installs its
own Ctrl-C handler only where it finds ``default_int_handler``.)

While a handler of syncfree's is installed, `hide` makes ``signal.getsignal`` (and the previous handler that
``signal.signal`` returns) answer with the handler it stands for. Where it stands for ``SIG_DFL`` of an ending
signal (``keep_default``), the program's own ``signal.signal(signum, SIG_DFL)`` keeps it installed: the signal still
ends the process as the program asked, after the report. syncfree's own calls (from this package) are passed through.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

__all__ = ["hide", "unhide"]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_real_signal = signal.signal
_real_getsignal = signal.getsignal
_lock = threading.Lock()
# signum -> [our handler, what the program sees in its place, keep it for SIG_DFL]
_hidden: dict[int, list[Any]] = {}


def hide(signum: int, ours: Any, visible: Any, keep_default: bool = False) -> None:
    """While ``ours`` is the handler of ``signum``, the program sees ``visible`` in its place."""
    with _lock:
        _hidden[signum] = [ours, visible, keep_default]
        signal.signal, signal.getsignal = _signal, _getsignal


def unhide(signum: int, ours: Any) -> None:
    with _lock:
        entry = _hidden.get(signum)
        if entry is not None and entry[0] is ours:
            del _hidden[signum]
        if not _hidden and signal.signal is _signal:
            signal.signal, signal.getsignal = _real_signal, _real_getsignal


def _ours_calling() -> bool:
    frame = sys._getframe(2)
    return frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR)


def _getsignal(signalnum: Any) -> Any:
    handler = _real_getsignal(signalnum)
    entry = _hidden.get(signalnum)
    if entry is not None and handler is entry[0] and not _ours_calling():
        return entry[1]
    return handler


def _signal(signalnum: Any, handler: Any) -> Any:
    entry = _hidden.get(signalnum)
    if entry is None or _ours_calling():
        return _real_signal(signalnum, handler)
    ours, visible, keep_default = entry
    if keep_default and handler is signal.SIG_DFL:
        if threading.current_thread() is not threading.main_thread():
            return _real_signal(signalnum, handler)  # raises as Python does
        previous = _real_signal(signalnum, ours)
        entry[1] = signal.SIG_DFL
        return visible if previous is ours else previous
    previous = _real_signal(signalnum, handler)
    return visible if previous is ours else previous
