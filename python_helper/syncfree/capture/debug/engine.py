"""`DebugEngine`: the debug-mode engine behind the recorder's seam (capture/engine.py)."""

from __future__ import annotations

from typing import Any

from .. import dispatch
from ..engine import Engine
from ..presence import cuda_available
from . import explicit, hook, ops_calls


class DebugEngine(Engine):
    """torch's sync debug mode (hook.py) plus wrappers of the explicit synchronize calls and blocking collectives
    it does not report (explicit.py) and of ``torch.ops`` calls (ops_calls.py). Warn and error modes; blocked time
    and the GPU cost are measured when the recorder asks."""

    name = "debug"
    sees = "the syncs that go through torch (its sync debug mode), its explicit synchronize calls included"

    def check_mode(self, mode: str) -> None:
        if mode not in ("warn", "error"):
            raise ValueError(f"the debug-mode engine records warn and error modes, not {mode!r}")

    def start(self, recorder: Any, torch: Any, undo: Any) -> None:
        # Never the patched answer: under an outer predict session is_available() says
        # True on a CPU build, and get_sync_debug_mode() would then fail.
        recorder.cuda = cuda_available(torch)
        undo.push(hook.detach_debug, recorder)
        hook.attach_debug(recorder, torch, recorder.cuda)
        if not recorder.cuda:
            # Without CUDA torch.cuda.synchronize() is either the CPU build's error or a
            # predict session's stand-in, which records the sync itself (to this recorder
            # when it owns the thread): a wrapper would count it twice.
            recorder.note("No CUDA device: torch's sync debug mode is off; only syncs predicted "
                          "by a predict session around this run are seen")
        else:
            undo.push(_detach_explicit, recorder)
            explicit.attach(recorder, torch)
            if recorder.mode == "warn":
                # torch.ops calls: their sync warnings reach Python only inside a binding
                # that converts C++ warnings (ops_calls.py).
                undo.push(ops_calls.detach, recorder)
                ops_calls.attach(recorder, torch)
            # Syncs on autograd's device thread: this recorder's when its context called
            # backward, attributed through that call (dispatch.backward_caller).
            undo.push(dispatch.detach_backward, recorder)
            dispatch.attach_backward(recorder)
        # The hook's module: the stall clock leaves its calls out of a sync's blocked time (stall.py).
        recorder.measure_blocked_time(undo, hook_globals=vars(hook))
        recorder.measure_gpu_cost(undo)


def _detach_explicit(recorder: Any) -> None:
    for note in explicit.detach(recorder):
        recorder.note(note)


__all__ = ["DebugEngine"]
