"""How long the CPU was blocked by a sync.

torch turns its C++ "called a synchronizing CUDA operation" warning into a Python warning
only when the C++ call returns: `torch::PyWarningHandler` buffers it for the whole call
(torch/csrc/Exceptions.h, HANDLE_TH_ERRORS). So the warning hook runs *after* the wait,
with the stream already drained; timing a `current_stream().synchronize()` there measures
nothing (tests/gpu checks this). What can be measured is the duration of the call that
synchronized: from the cell's call that led to the sync (``.item()``, ``print(t)``,
``scaler.step(opt)``) to the moment the warning reaches the hook. For a sync after queued
GPU work nearly all of it is the wait. A sync without a call of its own (``x[mask]``,
``if t:``) is timed from the cell's previous call.

`StallClock` keeps that timestamp:

- Python 3.12+: a `sys.monitoring` tool with CALL events; call sites outside the cell's
  code are disabled at their first event (PEP 669's DISABLE), so only the cell's own calls
  keep costing: about 1 us per sync on bench/overhead.py's loop, pause/resume included.
  LINE events (to time ``x[mask]`` from its line) cost three times that on such a loop;
  events restricted to the cell's code objects (`set_local_events`) measured the same.
- Python 3.10/3.11: a `sys.setprofile` callback on the cell's thread, which sees every call
  and return (stamping each). The recorder's hook pauses it while it runs: cheap there,
  toggling sets one thread flag, while on 3.12 it would re-instrument code.

Events from the warnings module (which runs between the sync and the hook), from this
module and from the hook's modules (the debug-mode engine's, debug/hook.py, and the recorder's) do not move
the timestamp.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Mapping
from time import perf_counter

# The warning machinery that runs after the sync and before the hook: WarningMessage()
# and _showwarnmsg() live in the warnings module (Lib/warnings.py; Lib/_py_warnings.py
# from 3.14, hence reading the globals off a function rather than the module).
WARNINGS_GLOBALS = warnings.WarningMessage.__init__.__globals__

_USE_MONITORING = sys.version_info >= (3, 12)
_get_ident = threading.get_ident


class StallClock:
    """Times the call that synchronized, for ``blocked_ms``.

    The recorder's hook calls `pause()` first (it returns the seconds since the last event,
    or None when the clock cannot say: another thread, or the callback was replaced during
    the run) and `resume()` last, so the hook's own work is never counted.
    """

    def __init__(self, cell_files: Mapping[str, int], hook_globals: tuple[dict, dict]) -> None:
        self._stamp = self.stamp = [0.0]  # perf_counter() of the cell's last call
        # The thread being timed while sys.monitoring times it, else None: the hook then
        # reads and resets `stamp` itself with one clock read (pause() and resume() have
        # nothing to switch), so the next interval starts as the hook does rather than
        # after it: a sync with no call of its own right after another sync also counts
        # that hook's work (a microsecond or two). A clock read can cost a microsecond on
        # a virtual machine (bench/overhead.py prints what it costs), and this is one
        # read fewer per sync.
        self.monitored: int | None = None
        self._thread = threading.get_ident()
        self._cell_files = cell_files
        self._hook_globals = hook_globals
        self._tool: int | None = None
        self._callback = None
        self._paused = False
        self._running = False
        self.interrupted = False  # another profiler replaced the callback while running

    def start(self) -> bool:
        """Start on the current thread; False when no profiling slot is free.

        ``_running`` is set before anything is installed and cleared only after `stop`
        has removed it, so a stop after an interrupted start (or a stop run twice)
        removes exactly what is there.
        """
        self._thread = threading.get_ident()
        self._stamp[0] = perf_counter()
        self._running = True
        started = self._start_monitoring() if _USE_MONITORING else self._start_profile()
        if not started:
            self._running = False
        return started

    def stop(self) -> None:
        """Remove the callback; a profiler the cell installed meanwhile stays (the cell
        asked for it)."""
        if not self._running:
            return
        tool = self._tool
        if tool is not None:
            monitoring = sys.monitoring
            if monitoring.get_tool(tool) == "syncfree":
                monitoring.set_events(tool, 0)
                monitoring.register_callback(tool, monitoring.events.CALL, None)
                monitoring.free_tool_id(tool)
            self._tool = None
            self.monitored = None
        elif self._callback is not None and _get_ident() != self._thread:
            # Stopped from another thread (a watch closed there): sys.setprofile is per thread, so the callback
            # takes itself off its own thread at its next event.
            _remove_at_next_event(self._callback)
        elif self._callback is not None and sys.getprofile() is self._callback:
            sys.setprofile(None)
        elif self._callback is not None and not self._paused:
            self.interrupted = True
        self._running = False

    # pause() and resume() run once per sync: module-level names, no attribute lookups.

    def pause(self) -> float | None:
        if not self._running or _get_ident() != self._thread:
            return None
        if self._tool is None:
            if sys.getprofile() is not self._callback:
                self.interrupted = True
                return None
            sys.setprofile(None)
            self._paused = True
        return perf_counter() - self._stamp[0]

    def resume(self) -> None:
        if not self._running or _get_ident() != self._thread:
            return
        self._stamp[0] = perf_counter()
        if self._paused:
            self._paused = False
            sys.setprofile(self._callback)

    # ------------------------------------------------------------------ 3.12+

    def _start_monitoring(self) -> bool:
        monitoring = sys.monitoring
        for tool in (monitoring.PROFILER_ID, 3, 4):
            try:
                monitoring.use_tool_id(tool, "syncfree")
            except ValueError:  # taken by another tool (cProfile uses PROFILER_ID)
                continue
            self._tool = tool  # before any event can fire: stop() frees it
            callback = _monitoring_callback(self._stamp, self._cell_files, self._thread,
                                            monitoring.DISABLE)
            monitoring.register_callback(tool, monitoring.events.CALL, callback)
            monitoring.set_events(tool, monitoring.events.CALL)
            self.monitored = self._thread
            return True
        return False

    # ------------------------------------------------------------------ 3.10, 3.11

    def _start_profile(self) -> bool:
        if sys.getprofile() is not None:
            return False
        callback = _profile_callback(self._stamp, WARNINGS_GLOBALS, globals(),
                                     *self._hook_globals)
        self._callback = callback  # before it is installed: stop() removes it
        sys.setprofile(callback)
        return True


def _monitoring_callback(stamp: list, cell_files: Mapping[str, int], owner: int, disable):
    clock = perf_counter
    ident = threading.get_ident
    # The cell's filenames seen so far: a set lookup on the hot path, where `cell_files`
    # may be a UserFiles whose membership test is a Python method (scripts, tests).
    seen: set[str] = set()

    def on_cell_call(code, offset, callable_, arg0):
        filename = code.co_filename
        if filename not in seen:
            if filename not in cell_files:
                return disable  # never called again for this call site
            seen.add(filename)
        if ident() == owner:
            stamp[0] = clock()
        return None

    return on_cell_call


def _remove_at_next_event(callback) -> None:
    """Make the profile callback take itself off its thread at its next stamp: its ``clock`` (a closure cell) is
    replaced, so the hot path pays nothing for it."""
    def clock_then_remove() -> float:
        if sys.getprofile() is callback:
            sys.setprofile(None)
        return perf_counter()

    for name, cell in zip(callback.__code__.co_freevars, callback.__closure__ or ()):
        if name == "clock":
            cell.cell_contents = clock_then_remove


def _profile_callback(stamp: list, skip_a: dict, skip_b: dict, skip_c: dict, skip_d: dict):
    # A closure over locals: this runs on every call and return in the cell's thread, so it
    # does the least possible work (four identity tests and one perf_counter()).
    clock = perf_counter

    def on_profile_event(frame, event, arg):
        globals_ = frame.f_globals
        if (globals_ is not skip_a and globals_ is not skip_b and globals_ is not skip_c
                and globals_ is not skip_d):
            stamp[0] = clock()

    return on_profile_event
