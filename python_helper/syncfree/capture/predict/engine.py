"""`PredictEngine`: predict mode behind the recorder's seam (capture/engine.py)."""

from __future__ import annotations

from typing import Any

from ..engine import Engine
from .claims import first_session_here
from .session import PredictSession


class PredictEngine(Engine):
    """No CUDA device: a `PredictSession` for the recorder's thread (CPU stand-ins for CUDA tensors, and the ops that
    would sync on a GPU reported as predicted), and one for each thread or pool task its code starts. Blocked time
    and cost are not measured: nothing waits for a GPU."""

    name = "predict"
    sees = "the syncs a GPU would make, predicted on the CPU from the measured op table"

    def check_mode(self, mode: str) -> None:
        if mode != "predict":
            raise ValueError(f"the predict engine records predict mode only, not {mode!r}")

    def start(self, recorder: Any, torch: Any, undo: Any) -> None:
        session = PredictSession(recorder)
        undo.push(session.__exit__, None, None, None)  # idempotent
        session.__enter__()

    def thread_session(self, recorder: Any) -> Any:
        return PredictSession(recorder)

    def adopt_forked_child(self, recorder: Any) -> None:
        if first_session_here() is None:
            PredictSession(recorder).__enter__()


__all__ = ["PredictEngine"]
