"""The seam between the recorder and the engines that see syncs.

`SyncRecorder` (recorder.py) runs code and records the syncs it is told about; an `Engine` is what tells it. The
recorder starts its engine on enter and the engine's steps are undone on exit, by any path; it knows nothing else
of it. Three engines, each in its own package, each importing only the shared parts of capture/ (dispatch.py: whose
sync it is; sites.py, through the recorder: where it is; stall.py: how long it blocked; undo.py, interrupts.py),
never another engine:

- ``debug`` (capture/debug/): torch's sync debug mode, plus wrappers of the calls it does not report;
- ``cupti`` (capture/cupti/): every blocking CUDA call, whichever library makes it;
- ``predict`` (capture/predict/): no CUDA device: CPU stand-ins, and the ops that would sync on a GPU.

What an engine sees it hands to the recorder that owns the calling thread or task (``dispatch.owner()``) through the
recorder's public recording methods: `SyncRecorder.sync_warning` (a debug-mode warning), `explicit_sync` (a wrapped
synchronize call), `record_blocking` (a blocking CUDA call) and `record_sync` (anything else, predicted syncs
included). What it says about a run (what it could not see, what it fell back to) goes to ``recorder.note``.

The measurements an engine can turn on at its start, where they mean something for what it sees: blocked time
(`SyncRecorder.measure_blocked_time`, stall.py) and the cost, the GPU time each site's syncs lose
(`SyncRecorder.measure_gpu_cost`, gputrace.py, replayed by syncfree.cost).
"""

from __future__ import annotations

import contextlib
from typing import Any


class Engine:
    """One way of seeing syncs (see the module docstring). Subclasses set `name` and `sees` and define `start`."""

    #: What the recorder reports as its engine: "debug", "cupti" or "predict".
    name = ""
    #: What it sees, in a line (and so what it does not).
    sees = ""

    def check_mode(self, mode: str) -> None:
        """ValueError, in one line, when the engine cannot record ``mode`` (warn | error | predict)."""

    def start(self, recorder: Any, torch: Any, undo: Any) -> None:
        """Start seeing syncs for ``recorder``. Each change is made after the step that takes it back is pushed on
        ``undo`` (the recorder's `Undo`): the recorder's exit runs those steps, last first, whatever interrupts them,
        and that is the engine's stop. Called by ``SyncRecorder.__enter__`` after the recorder has entered the
        dispatcher, with torch imported."""
        raise NotImplementedError

    def thread_session(self, recorder: Any) -> Any:
        """What a thread or pool task started by ``recorder``'s code runs under (threads.py): a context manager."""
        return contextlib.nullcontext()

    def adopt_forked_child(self, recorder: Any) -> None:
        """In a child process just forked from a thread that ran without `thread_session`: what the child's one
        thread needs for the rest of its life (threads.predict_in_forked_child)."""


__all__ = ["Engine"]
