"""``torch.compile`` in predict mode: compiled code runs eagerly (dynamo's ``force_eager``
stance), so its syncs are predicted op by op, and the report's notes name each compiled
function that ran so and where it was called (:data:`COMPILE_NOTE_PREFIX`).

Compiling for real on the stand-ins does not give a GPU's syncs: dynamo fails on the
patched torch.cuda (its eager backend re-registers torch.cuda.current_stream), inductor
asks the device properties of a CUDA device to generate Triton code for, and the compiled
graph's CPU kernels would be invisible to the mode (no syncs, no virtual results), while a
GPU also syncs while compiling (autotuning).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import claims
from .mode import _predict_files

if TYPE_CHECKING:
    from .session import PredictSession

#: How the report's note about compiled code run eagerly starts (pytest's summary looks
#: for it among a report's notes).
COMPILE_NOTE_PREFIX = "torch.compile ran eagerly"

#: Calls of compiled functions run eagerly by any session of this process, by function
#: name (only ever growing): what pytest --syncfree's summary reads before and after each
#: test (pytest_cuda.py), whatever watch the test ran under.
eager_compiled_calls: dict[str, int] = {}


class _EagerCompiles:
    """Calls of ``torch.compile``'d code while a session runs it eagerly, for the report.

    Counted per (compiled function, calling line); one note at the end of the session
    names them, so that no "does it compile" test or training script passes through
    predict mode believing it compiled.
    """

    MAX_NAMED = 3

    def __init__(self, session: PredictSession) -> None:
        self.session = session
        self.calls: dict[tuple[str, str], int] = {}
        self.noted = False

    def wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        eager = self

        @functools.wraps(original)
        def callback_from_stance(callback: Any) -> Any:
            if callback is not None and callback is not False and eager.session.active:
                eager.seen(sys._getframe(1))
            return original(callback)

        return callback_from_stance

    def seen(self, frame: Any) -> None:
        """A compiled function is being called; ``frame`` is dynamo's wrapper's."""
        import torch

        fn = frame.f_locals.get("fn") if frame.f_code.co_name == "compile_wrapper" else None
        owner = getattr(fn, "__self__", None)
        if owner is not None and issubclass(type(owner), torch.nn.Module):
            name = type(owner).__name__  # a compiled module (OptimizedModule, Module.compile)
        else:
            name = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
                       or "a torch._dynamo.optimize block")
        torch_dir = os.path.dirname(torch.__file__) + os.sep
        caller = frame.f_back
        ours = _predict_files()
        while caller is not None and (caller.f_code.co_filename.startswith(torch_dir)
                                      or caller.f_code.co_filename in ours):
            caller = caller.f_back
        where = "?"
        if caller is not None:
            filename = caller.f_code.co_filename
            if filename.startswith("<"):  # a notebook cell
                where = f"line {caller.f_lineno}"
            else:
                try:
                    relative = os.path.relpath(filename)
                except ValueError:  # another drive (Windows)
                    relative = filename
                where = f"{filename if relative.startswith('..') else relative}:{caller.f_lineno}"
        key = (name, where)
        self.calls[key] = self.calls.get(key, 0) + 1
        eager_compiled_calls[name] = eager_compiled_calls.get(name, 0) + 1

    def note(self) -> None:
        """Tell the recorder (once, at the end of the session)."""
        note = getattr(self.session.recorder, "note", None)
        if self.noted or not self.calls or note is None:
            return
        self.noted = True
        named = sorted(self.calls.items(), key=lambda item: -item[1])
        parts = [f"`{name}` called at {where} ×{n}" for (name, where), n in named[:self.MAX_NAMED]]
        more = f" and {len(named) - self.MAX_NAMED} more" if len(named) > self.MAX_NAMED else ""
        note(f"{COMPILE_NOTE_PREFIX} in predict mode: {', '.join(parts)}{more}. Without a GPU "
             "it cannot compile for one: the syncs of the compiled code are predicted op by "
             "op as eager code; on a GPU compiling also syncs (once per graph) and a graph "
             "break can move a sync")


def install(session: PredictSession, patch: Callable[[Any, str, Any], None]) -> None:
    """Run compiled code eagerly while ``session`` lasts, and note it at the end."""
    import torch

    session._undo.push(session._eager_compiles.note)
    disable_dynamo(session)
    patch(torch, "compile", _compile_wrapper(session, torch.compile))


def disable_dynamo(session: PredictSession) -> None:
    """Compiled code runs eagerly from now on (once per process-wide patch set)."""
    # Dynamo's "force_eager" stance, not `config.disable`: under `disable` dynamo's
    # frame callback marks each code object it meets SKIP for good, so functions
    # compiled before the session never compiled (or recompiled) again after it.
    # With the stance the callback is not installed at all (eval_frame.py,
    # _callback_from_stance) and nothing about a code object is remembered.
    # The stance is process-wide: compiled code in other threads runs eagerly too
    # while the session lasts.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    stance_type = getattr(eval_frame, "DynamoStance", None)
    if session._dynamo_disabled or stance_type is None or claims._active_session is not session:
        return
    session._dynamo_disabled = True
    session._patches.replace(eval_frame, "_stance", stance_type(stance="force_eager"))
    # Each call of compiled code asks _callback_from_stance for its frame callback
    # (eval_frame.py, _TorchDynamoContext.__call__'s compile_wrapper): where the
    # report learns which compiled function ran eagerly, and from where.
    original = getattr(eval_frame, "_callback_from_stance", None)
    if original is not None:
        session._patches.replace(eval_frame, "_callback_from_stance",
                                 session._eager_compiles.wrapper(original))


def _compile_wrapper(session: PredictSession,
                      original_compile: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original_compile)
    def compile(*args: Any, **kwargs: Any) -> Any:
        compiled = original_compile(*args, **kwargs)  # imports torch._dynamo
        owner = claims._active_session  # this one, or, once it ended, none (patches gone)
        disable_dynamo(owner or session)
        return compiled

    return compile
