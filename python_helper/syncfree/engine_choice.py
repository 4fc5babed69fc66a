"""Engine choice: how this process can watch code (the recorder's mode, device and engine), the recorder for it,
and what a run under it leaves (a cell's report, an error's description, error mode's traceback).

The watch API (``watches.py``), script runs (``script_run.py``), the magic (``magic.py``), the pytest plugin and the
benchmarks choose their engine and make their recorder here. Nothing here imports IPython; torch is imported only
when an engine is chosen.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Engine", "cell_report", "choose_engine", "cuda_available", "describe_error", "end_children",
           "hide_engine_frames", "is_sync_stop", "new_recorder", "unseen_libraries"]


@dataclass
class Engine:
    """How this process can watch code: recorder mode, device, and why if degraded."""

    mode: str                # warn | error | predict | static
    device: dict
    notes: list[str] = field(default_factory=list)
    stop_at_first: bool = False  # predict mode standing in for --mode error
    engine: str = "debug"        # what sees the syncs in warn/error mode: debug | cupti (capture/engines.py)
    libraries: tuple[str, ...] = ()  # libraries calling CUDA without torch, imported when it was chosen


def cuda_available() -> bool:
    """Whether this process has a CUDA device. Inside a predict session
    ``torch.cuda.is_available()`` is a stand-in answering True, so there the question goes
    to the function predict mode replaced (the engine never asks a patched API)."""
    import torch

    # getattr: another thread may be importing predict.py right now, and a module being
    # imported is in sys.modules before its functions exist (no session can run before).
    real = getattr(sys.modules.get("syncfree.capture.predict"), "real_cuda_available", None)
    if real is None:
        from .capture.presence import cuda_present

        return cuda_present(torch, torch.cuda.is_available)  # never torch's runtime question: it spoils forks
    return real()


def choose_engine(requested: str | None, engine: str | None = None, *,
                  sources: Sequence[str] = ()) -> Engine:
    """The recorder mode this process supports for the requested one (None: automatic),
    and the engine that sees its syncs (``engine``: debug, cupti or auto, None: auto;
    ``sources``: code about to run, whose imports ``auto`` looks at)."""
    from .capture import engines

    chosen = _choose_mode(requested)
    choice = engines.choose(engine, chosen.mode, sources=sources)
    chosen.engine = choice.engine
    chosen.notes.extend(choice.notes)
    chosen.libraries = tuple(engines.bypassing_libraries())
    return chosen


def _choose_mode(requested: str | None) -> Engine:
    from .report import device_info

    if requested not in (None, "warn", "error", "predict"):
        raise ValueError(f"mode must be warn, error or predict, not {requested!r}")
    try:
        import torch  # noqa: F401
    except ImportError:
        return Engine("static", device_info("none"),
                      ["torch is not installed: the code ran without sync detection; "
                       "the findings are static only"])
    notes: list[str] = []
    if requested != "predict" and cuda_available():
        return Engine(requested or "warn", device_info("cuda"), notes)
    if requested == "warn":
        notes.append("No CUDA device: --mode warn needs one")
    try:
        from .capture.predict import PredictSession  # noqa: F401
    except ImportError as exc:
        notes.append(f"No CUDA device and predict mode is unavailable ({exc}): the code "
                     "ran without sync detection; static findings only")
        return Engine("static", device_info("none"), notes)
    if requested == "error":
        notes.append(f"{PREDICTED_ON_CPU}; --mode error stops at the first predicted sync")
        return Engine("predict", device_info("predict"), notes, stop_at_first=True)
    if requested == "warn":
        notes[-1] += "; the syncs a GPU would make are predicted on the CPU instead"
    elif requested != "predict":
        notes.append(PREDICTED_ON_CPU)
    return Engine("predict", device_info("predict"), notes)


#: Predict mode's note: what it does, in words a newcomer reads (CUDA tensors are CPU tensors standing in for them).
PREDICTED_ON_CPU = "No CUDA device: the syncs a GPU would make are predicted on the CPU"


def new_recorder(engine: Engine, *, files: Mapping[str, int], findings: Mapping | None = None,
                 measure_blocked: bool = True, max_frames: int = 4, scope: str = "process",
                 measure_cost: bool = False):
    """A `SyncRecorder` for ``engine`` (not for the static engine, which records nothing);
    ``scope``: ``process`` (a cell, a script) or ``context`` (a watch: its thread or task);
    ``measure_cost``: what each sync costs, the GPU time it loses (capture/gputrace.py)."""
    from .capture import SyncRecorder

    if engine.engine == "cupti":
        from .capture.recorder import CuptiRecorder

        recorder = CuptiRecorder(engine.mode, measure_blocked=measure_blocked, max_frames=max_frames,
                                 cell_files=files, findings=findings, scope=scope)
        if measure_cost and engine.mode != "predict":
            recorder.cost_note = ("cost not measured: the CUPTI engine holds CUPTI, which the GPU trace needs; "
                                  "--engine debug measures it")
        return recorder
    return SyncRecorder(engine.mode, measure_blocked=measure_blocked, max_frames=max_frames,
                        cell_files=files, findings=findings, stop_at_first=engine.stop_at_first,
                        scope=scope, measure_cost=measure_cost)


def cell_report(*, source: str, engine: Engine, findings: Sequence, recorder=None,
                cell_id: str | None = None, error: Mapping | None = None,
                wall_ms: float = 0.0) -> dict:
    """The v1 report of one cell: what ``recorder`` saw (None: nothing ran under one)."""
    from .report import build_report

    if recorder is None:
        return build_report(source=source, device=engine.device, mode=engine.mode,
                            findings=findings, syncs=0, cell_id=cell_id, error=error,
                            wall_ms=wall_ms, notes=engine.notes)
    fields = recorder.report_fields()
    fields["notes"] = engine.notes + fields["notes"] + unseen_libraries(engine)
    return build_report(source=source, device=engine.device, findings=findings,
                        cell_id=cell_id, **fields)


def describe_error(exc: BaseException, line: int | None) -> dict:
    """The report's ``error`` for an exception the recorder did not describe."""
    try:
        message = str(exc)
    except Exception:  # an exception whose __str__ raises is still reported
        message = ""
    if isinstance(exc, KeyboardInterrupt):
        message = "interrupted"
    return {"type": type(exc).__qualname__[:200], "message": (message or type(exc).__name__)[:1000],
            "line": line}


def end_children(recorder, before: dict[int, str] | None = None) -> None:
    """The child processes a cell's recorder followed (capture/threads.py): their reports, and notes on those
    without one, join what the recorder counts (`SyncRecorder.inherited_children`). ``before``: the children
    already running when the cell began (`syncfree.processes.running_children`), named in a note."""
    children, recorder.children = recorder.children, None
    if children is not None:
        reports, notes = children.end_watch(recorder.handed_work_to)
        recorder.inherit(reports, notes, children.started_as)
    from .capture.threads import unfinished_note

    unfinished = unfinished_note(recorder, "cell")  # the cell's threads still running
    if unfinished is not None:
        recorder.inherited_notes.append(unfinished)
    if before:
        from .processes import earlier_children_note

        recorder.inherited_notes.append(earlier_children_note(before, "cell", recorder.handed_work_to))


def unseen_libraries(engine: Engine) -> list[str]:
    """A note when debug mode ran and a library that calls CUDA without torch was imported
    meanwhile (a script's ``import cupy``): its syncs were not seen, never silently."""
    if engine.engine != "debug" or engine.mode not in ("warn", "error"):
        return []
    from .capture.engines import unseen_note

    note = unseen_note(engine.libraries)
    return [note] if note else []


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def is_sync_stop(exc: BaseException | None) -> bool:
    """Whether ``exc`` is error mode's stop at a sync (torch's, or predict mode's)."""
    from .capture import SYNC_MESSAGE

    try:
        return exc is not None and str(exc).startswith(SYNC_MESSAGE)
    except Exception:  # an exception whose __str__ raises is not ours
        return False


def hide_engine_frames(exc: BaseException) -> None:
    """Cut syncfree's own frames off the end of an error-mode traceback.

    The error raised at the first (predicted) sync comes from inside syncfree (predict
    mode's torch function hook, the recorder): those frames say nothing about the user's
    code, which ends at the line or library call that synced. Only that error is trimmed;
    any other exception keeps its whole traceback.
    """
    if not is_sync_stop(exc):
        return
    last_outside = None
    tb = exc.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            last_outside = tb
        tb = tb.tb_next
    if last_outside is not None:
        last_outside.tb_next = None
