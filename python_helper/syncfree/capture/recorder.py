"""`SyncRecorder`: run code under torch's sync debug mode and record where each sync came from.

    with SyncRecorder("warn", cell_files={filename: 0}) as recorder:
        exec(code, namespace)          # code compiled under `filename`
    recorder.sites                     # [SyncSite(line=3, kind="item", count=64, ...)]

On enter the recorder registers with the process-wide dispatcher (dispatch.py), which
decides which recorder each sync belongs to (``scope``: the whole process, or the thread /
asyncio task that routes to it), and starts its engine (engine.py: the seam), which tells
it each sync: the debug-mode engine by default (debug/: torch's sync debug mode, installed
once for all running recorders, plus wrappers of the explicit synchronize calls it does not
see, and, for blocked time, a timing callback, stall.py), the CUPTI engine (cupti/,
`CuptiRecorder`), or in predict mode (no CUDA) the predict engine (predict/: a
`PredictSession(recorder)`, which reports predicted syncs through `record_sync`). On exit,
by any path, each step of the engine is undone; the last recorder out puts the filters
list, ``warnings._showwarnmsg``, the wrapped torch functions and the debug mode back to the
very objects and value they were before.

The hook's hot path is a walk of ``f_back`` from the syncing frame to the cell's module
frame and one dict lookup keyed by the (code, instruction) pairs walked; the first time a
key is seen `sites.attribute()` works out the cell lines and the kind.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from time import perf_counter
from types import FrameType, TracebackType
from typing import Any

from . import dispatch, dynamo_tables, interrupts, sites, threads
from .cupti import CuptiEngine
from .debug import DebugEngine
from .debug.hook import SYNC_MESSAGE
from .debug.ops_calls import OPS_CALLS_GLOBALS
from .engine import Engine
from .sites import MAX_FRAMES, TABLE_FULL, SiteTable, SyncSite, SyncTally, UserFiles, attribute
from .stall import WARNINGS_GLOBALS, StallClock
from .undo import Undo, close_all

MODES = ("warn", "error", "predict")
SCOPES = ("process", "context")
_CACHE_LIMIT = 65536  # distinct stacks remembered; past it the cache starts over
_MAX_NOTES = 20
# (filename, line offset) -> ((length, hash) of the text analysed, its findings), for files
# no recorder was given findings for (scripts, tests, watch()): one static pass per file
# and text, not per recorder. The text itself is not kept (a 10,000-line cell under a
# watch). Findings are read, never changed.
_analysed: dict[tuple[str, int], tuple[tuple[int, int], Sequence[Mapping]]] = {}
_ANALYSED_LIMIT = 64

# The kinds of sync whose call is the sync itself, and which a rewrite deletes (`.item()`, `.tolist()`, `.cpu()`,
# `int(t)`): the stall clock's stamp, taken as that call began, is the call's start (the cost counts the call's host
# time before its wait from there: cost.py's call_starts). Not a sync without a call of its own (`x[mask]`, `if t:`:
# the stamp is an earlier call's), nor a library's (the call is the library function, which the rewrite keeps).
_OWN_CALL_KINDS = frozenset({"item", "tolist", "to_host", "python_scalar"})


def _call_began(tally: Any, when: float, blocked: float | None) -> float | None:
    """perf_counter() when a debug-mode sync's call began, where the stall clock timed it and it is the sync's own."""
    if blocked is None or getattr(tally, "kind", None) not in _OWN_CALL_KINDS:
        return None
    return when - blocked


class SyncRecorder:
    """Records the syncs of code compiled under the filenames in ``cell_files``.

    Parameters
    ----------
    mode:
        ``warn`` counts every sync; ``error`` lets torch raise at the first one (explicit
        synchronize calls raise too); ``predict`` runs `predict.PredictSession` instead.
    measure_blocked:
        Time each sync (``blocked_ms``); only with CUDA and in warn mode.
    measure_cost:
        Measure what each site's syncs cost, the GPU time they lose (syncfree.cost), from
        a trace of the GPU's activity (gputrace.py); only with CUDA, debug-mode engine.
    max_frames:
        Library frames kept per site, between the cell line and the sync (at most 8).
    cell_files:
        Code filename -> line offset: line ``n`` of that code is cell line ``n + offset``.

    findings:
        Optional static findings (schema Finding dicts, cell lines) per filename; without
        them the recorder analyses the code text in `linecache` the first time it needs to.
    scope:
        ``process`` (a cell, ``syncfree run``): the syncs of every thread are this
        recorder's, unless a thread routes to a recorder of its own; ``context``
        (``syncfree.watch()``): only those of the thread or task that routes to it
        (`dispatch.route`), which the caller does.
    engine:
        What sees the syncs (capture/engine.py): None, the debug-mode engine (predict mode: the predict engine);
        ``cupti.CuptiEngine()`` for every blocking CUDA call (warn mode).
    """

    def __init__(self, mode: str = "warn", *, measure_blocked: bool = True, measure_cost: bool = False,
                 max_frames: int = 4,
                 cell_files: Mapping[str, int],
                 findings: Mapping[str, Sequence[Mapping]] | None = None,
                 stop_at_first: bool = False, scope: str = "process", engine: Engine | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if engine is None:
            engine = _predict_engine() if mode == "predict" else DebugEngine()
        engine.check_mode(mode)
        # What sees the syncs (capture/engine.py), started at enter; its name: "debug", "cupti" or "predict"
        # (a CUPTI engine that cannot have CUPTI at enter falls back to debug mode and says so).
        self._engine = engine
        self.engine = engine.name
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        self.scope = scope
        self.running = False  # between enter and exit: the dispatcher routes syncs here
        if not 0 <= max_frames <= MAX_FRAMES:
            raise ValueError(f"max_frames must be between 0 and {MAX_FRAMES}, not {max_frames}")
        self.mode = mode
        # Predict mode's "--mode error": raise at the first predicted sync, as torch's
        # error mode does at the first real one on a GPU.
        self.stop_at_first = stop_at_first and mode == "predict"
        self.measure_blocked = measure_blocked
        self.measure_cost = measure_cost
        # (tally, perf_counter() at its return as the hook saw it, and when the hook was done) per sync
        # while a cost trace runs, else None;
        # after the run `costs` (syncfree.cost.Costs) or None and `cost_note`, why none.
        self._cost_log: list | None = None
        self._trace = None
        self.costs = None
        self.cost_note: str | None = None
        self.trace_stats: dict = {}
        self.trace_inputs: tuple = ()  # (activities, syncs, copies, blocking calls): bench/cost.py
        self.max_frames = max_frames
        # UserFiles (scripts, tests, watch()) decides membership itself; a cell's mapping is copied.
        self._cell_files = cell_files if isinstance(cell_files, UserFiles) else dict(cell_files)
        self._findings: dict[str, Sequence[Mapping]] = dict(findings or {})
        self._table = SiteTable()
        self._outside: dict[str, SyncTally] = {}
        self._cache: dict[tuple, SyncTally] = {}
        self._pinned: list[tuple] = []  # code objects whose id() is in a cache key stay alive
        self._lock = threading.RLock()  # reentrant: an interrupt inside `with` can leave it held
        self._thread = threading.get_ident()
        # A live frame that every recorded stack passes through (the frame that entered a
        # watch() block): the frames above it are the same for every sync, so the hot
        # path's stack key stops there instead of walking to the top (a test under pytest
        # is ~40 frames deep). None: walk to the cell's module frame or the top.
        self.boundary: FrameType | None = None
        self._undo: Undo | None = None
        self._clock: StallClock | None = None
        self._unowned_before: dict[str, int] = {}
        # The recorder already recording this thread or task when this one was entered
        # (a watch in a %%syncfree cell, a decorated call in a watch): it counts this
        # one's syncs too, attributed in its own terms (set by dispatch.enter).
        self.parent: SyncRecorder | None = None
        self._stops_at_sync = mode == "error"  # error mode: warn mode plus an error at a sync
        # Rules whose syncs error mode (and predict mode's stop) records without stopping: `syncfree run --mode
        # error --ignore SF303` goes past a one-off model.to(device). A sync without a rule always stops.
        self.passes_rules: frozenset[str] = frozenset()
        # Predict mode, scope "process": the non-daemon threads the program starts run under a predict
        # session of their own reporting here (`syncfree run`; capture/threads.py).
        self.predicts_threads = False
        self._error_site: SyncTally | None = None  # the sync that stopped an error-mode run
        self._started = 0.0
        self.wall_ms = 0.0
        self.frames_truncated = False
        self.cuda = False
        self.notes: list[str] = []
        self.unwatched_children: list[str] = []  # child processes its code started that nothing followed
        self.unwatched_programs: list[str] = []  # Python programs its code started with subprocess (threads.py)
        self.unwatched_forks = 0  # processes its code forked with os.fork() while nothing followed them (threads.py)
        # What the child processes of the watches inside this recorder synchronized (syncfree.processes
        # .ProcessReport), and their notes: this recorder counts them as it counts the watches' own syncs.
        self.inherited_children: list = []
        self.inherited_notes: list[str] = []
        # (follower, pid) of the children its code started while a follower of the process's children took them
        # (syncfree run, a watched test): a watch reads their reports at its end too (watches.Watch._end).
        self.followed_children: list = []
        # The pids of child processes its code handed tasks to (a Pool's workers, a ProcessPoolExecutor's: threads.py)
        self.handed_work_to: set[int] = set()
        self._child_lines: dict[int, int] = {}  # a recorder of cells: pid -> the cell line that started the child
        # How a watch's child processes watch their targets (syncfree.watches.ChildWatch: mode, engine, ...; None: they
        # are only named), and the follower of those it started (its follow_children(); capture/threads.py).
        self.child_settings: Any = None
        self.children: Any = None
        self.error: dict | None = None

    # ------------------------------------------------------------------ enter / exit

    def __enter__(self) -> SyncRecorder:
        if self._undo is not None:
            raise RuntimeError("this SyncRecorder is already running")
        import torch

        # Each undo step is pushed before the change it undoes and is idempotent; Undo
        # runs them all even when interrupted (undo.py), so a KeyboardInterrupt at any
        # line of enter or exit leaves nothing behind.
        undo = self._undo = Undo()
        try:
            # First: a Ctrl-C from here to the end of __exit__ is raised outside the engine
            # (interrupts.py), never half way through installing or restoring; the handler
            # is put back last.
            undo.push(interrupts.release, self)
            interrupts.hold(self)
            # Once every replacement is out: dynamo's table of torch functions, where it was built while they were in
            # (torch.distributed's init_process_group clears it), is built again on torch's own (dynamo_tables.py).
            undo.push(dynamo_tables.drop_stale)
            undo.push(self._forget_cached)
            self._thread = threading.get_ident()
            undo.push(threads.release, self)  # after `leave`: the last recorder out takes the patches out
            undo.push(dispatch.leave, self)
            dispatch.enter(self)
            threads.hold()  # the first recorder in puts threads.py's patches in
            threads.remember_tasks(self)  # the asyncio tasks already there (a task the block leaves pending is named)
            self._engine.start(self, torch, undo)  # its steps are undone by the exit: capture/engine.py
            self._started = perf_counter()
            return self
        except BaseException:
            try:
                self._close_undo()
            finally:
                self._close_undo()  # again, should a second interrupt cut the first short
            raise

    def thread_session(self) -> Any:
        """What a thread or pool task that this recorder's code starts runs under (threads.py): the engine's
        (predict mode: a predict session reporting here, torch function modes being per thread)."""
        return self._engine.thread_session(self)

    def predict_forked_child(self) -> None:
        """In a child just forked from a thread without the stand-ins: what the child's one thread runs under for the
        rest of its life, the engine's (threads.predict_in_forked_child)."""
        self._engine.adopt_forked_child(self)

    def _forget_cached(self) -> None:
        # A cell's code is gone with the cell; a user file's functions run again in the
        # next watch or test, so their instruction positions stay cached.
        files = () if isinstance(self._cell_files, UserFiles) else self._cell_files
        sites.forget(list(self._findings.values()), files)

    def _close_undo(self) -> None:
        undo = self._undo
        if undo is not None:
            undo.close()
            self._undo = None

    def measure_blocked_time(self, undo: Undo, hook_globals: dict) -> None:
        """Turned on by an engine's start: time each sync (``blocked_ms``, stall.py) when asked (``measure_blocked``),
        with CUDA, in warn mode. ``hook_globals``: the globals of the engine's hook, whose calls are not the
        program's (the stall clock leaves them out). One clock per thread: a parent's running clock serves."""
        parent = self.parent
        if parent is not None and parent._clock is not None and parent._thread == self._thread:
            # One clock per thread (3.10/3.11 have one profiler slot): the syncs come to
            # this recorder first, and its hook's pause and resume serve the chain.
            self._clock = parent._clock
        elif self.measure_blocked and self.cuda and self.mode == "warn":
            clock = self._clock = StallClock(self._cell_files,
                                             hook_globals=(globals(), hook_globals))
            undo.push(self._stop_clock)
            if not clock.start():
                self._clock = None
                self.note("blocked time not measured: another profiler is active")

    def measure_gpu_cost(self, undo: Undo) -> None:
        """Turned on by an engine's start: what each site's syncs cost, the GPU time they lose, from a trace of the
        GPU's activity (gputrace.py, replayed by syncfree.cost), when asked (``measure_cost``) and with CUDA."""
        if self.measure_cost and self.cuda:
            from .gputrace import GpuTrace

            trace = GpuTrace()
            undo.push(self._stop_trace)
            self.cost_note = trace.start()
            if self.cost_note is None:
                self._trace = trace
                self._cost_log = []

    def _stop_trace(self) -> None:
        trace, log = self._trace, self._cost_log
        if trace is None:
            return
        self._trace = self._cost_log = None
        log = log or []
        costs = self.costs = trace.stop([(id(tally), *rest) for tally, *rest in log])
        self.trace_stats = trace.stats
        self.trace_inputs = trace.inputs
        if costs is None:
            self.cost_note = trace.reason
            return
        if costs.power_note:
            self.note(costs.power_note)
        for tally in {id(entry[0]): entry[0] for entry in log}.values():
            measured = costs.sites.get(id(tally))
            if isinstance(tally, SyncSite) and measured is not None:
                tally.cost_s = measured.cost_us / 1e6
                tally.cost_share = costs.share(id(tally))

    def _stop_clock(self) -> None:
        clock = self._clock
        if clock is None:
            return
        clock.stop()
        if clock.interrupted:
            self.note("another profiler replaced syncfree's during the run: blocked time "
                      "covers only the syncs before it")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        try:
            self.wall_ms = round((perf_counter() - self._started) * 1000.0, 3)
            if exc is not None and self.error is None:
                self.error = self._describe_error(exc)
        finally:
            try:
                self._close_undo()
            finally:
                self._close_undo()  # a no-op unless an interrupt escaped the first
        return False

    # ------------------------------------------------------------------ recording

    def record_sync(self, frame: FrameType, kind: str | None = None, *, predicted: bool = False,
                    blocked_s: float | None = None, caller: tuple[int, FrameType] | None = None) -> None:
        """Record one sync whose innermost Python frame is ``frame``.

        ``kind`` names the operation when the caller knows it (explicit synchronize,
        predict mode); otherwise it is worked out from the frames and the cell's findings.
        ``caller``: (thread, frame) where the frames go on in another thread, whose sync it
        is (the backward pass's caller, for a sync on autograd's device thread:
        dispatch.backward_caller).
        """
        __tracebackhide__ = True
        tally = self._record(frame, kind, predicted, blocked_s, None, caller)
        stops = predicted and self.stop_at_first and self._error_site is None and self._stops_at(tally)
        parent = self.parent
        while parent is not None:
            if parent.running:
                parent_tally = parent._record(frame, kind, predicted, blocked_s, None, caller)
                if predicted and parent.stop_at_first and parent._error_site is None \
                        and _get_ident() == parent._thread:
                    parent._error_site = parent_tally
                    stops = True
            parent = parent.parent
        # Stop the cell, not a thread it started (whose error would go elsewhere).
        if stops and _get_ident() == self._thread:
            if self.stop_at_first:
                self._error_site = tally
            raise RuntimeError(f"{SYNC_MESSAGE} (predicted without a CUDA device: "
                               f"{tally.label if isinstance(tally, SyncSite) else kind})")

    def _record(self, frame: FrameType | None, kind: str | None, predicted: bool,
                blocked: float | None, detail: str | None, caller: tuple[int, FrameType] | None = None,
                call_start: float | None = None) -> SyncTally:
        """Record one sync told by explicit.py, predict mode or error mode (the warning
        hook has its own copy of this path); ``call_start``: perf_counter() when the syncing call began, where the
        caller timed it (the cost counts the host time a rewrite that deletes the call saves)."""
        key = (kind, predicted, detail) + _stack_key(frame, self._cell_files, self.boundary)
        if caller is not None:
            key += _stack_key(caller[1], self._cell_files, self.boundary)
        tally = self._cache.get(key)
        if tally is None:
            tally = self._resolve(frame, key, kind, predicted, detail, blocked, caller)
        tally.count += 1
        if blocked is not None:
            tally.blocked_s += blocked
            tally.measured += 1
        log = self._cost_log
        if log is not None:
            now = perf_counter()
            log.append((tally, now, now, call_start, None))
        return tally

    def _resolve(self, frame: FrameType | None, key: tuple, kind: str | None, predicted: bool,
                 detail: str | None, blocked: float | None = None,
                 caller: tuple[int, FrameType] | None = None) -> SyncTally:
        with self._lock:
            tally = self._cache.get(key)
            if tally is not None:
                return tally
            files = self._cell_files
            codes = []  # the code objects whose id() is in the key
            boundary = self.boundary
            tid = threading.get_ident()
            thread_name = threading.current_thread().name
            if caller is not None:  # the sync is the backward caller's thread's
                tid, caller = caller
                thread_name = _thread_name(tid)
            for f in (frame, caller):
                while f is not None:
                    codes.append(f.f_code)
                    if f is boundary or (f.f_code.co_name == "<module>"
                                         and f.f_code.co_filename in files):
                        break
                    f = f.f_back
            if frame is None:  # a thread without Python code (CUPTI): the caller's frames
                frame, caller = caller, None
            thread = None if tid == self._thread else thread_name
            attribution = None
            if frame is not None:
                try:
                    attribution = attribute(frame, self._cell_files, self._findings_for,
                                            self.max_frames, kind, table=self._table,
                                            boundary=boundary, caller=caller)
                except Exception as exc:  # a fault here must not break the user's cell
                    self.note(f"syncfree could not attribute a sync ({type(exc).__name__}: "
                              f"{exc}); it is counted outside the cell's lines")
            if attribution is None:
                tally = self._outside.setdefault(thread or "", SyncTally())
            elif attribution is TABLE_FULL:
                self._table.truncated = True
                tally = self._table.overflow
            else:
                self.frames_truncated |= attribution.frames_truncated
                tally = self._table.site_for(attribution.chain, attribution.kind,
                                             attribution.rule, attribution.frames, thread,
                                             predicted, detail, attribution.files,
                                             attribution.library, attribution.phase,
                                             blocked,  # a new site's first call (sites.py)
                                             attribution.span)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
                self._pinned.clear()
            self._cache[key] = tally
            self._pinned.append(tuple(codes))
            return tally

    def _findings_for(self, filename: str) -> Sequence[Mapping]:
        findings = self._findings.get(filename)
        if findings is None:
            import linecache

            offset = self._cell_files.get(filename, 0)
            text = "".join(linecache.getlines(filename))
            # A file analysed by an earlier recorder (the previous watch, each call of a
            # decorated train_step) is not analysed again while its text is the same: the
            # pass costs some 45 us a line (a 1,000-line script: 45 ms at the first sync
            # of every watch).
            fingerprint = (len(text), hash(text))
            analysed = _analysed.get((filename, offset))
            if analysed is not None and analysed[0] == fingerprint:
                self._findings[filename] = analysed[1]
                return analysed[1]
            try:
                from syncfree.analyze import analyze_source

                # For the rule of a sync's line: a `# syncfree: allow` comment does not change what synced there
                # (with the allowed `.item()` left out, a wider finding around it named it: SF910, not SF101)
                findings = analyze_source(text, first_line=1 + offset, honour_allow=False)
            except Exception as exc:  # without findings the frames and opcodes still name it
                self.note(f"static analysis of the cell failed ({type(exc).__name__}: {exc})")
                findings = []
            else:
                if len(_analysed) >= _ANALYSED_LIMIT:
                    _analysed.pop(next(iter(_analysed)), None)
                _analysed[(filename, offset)] = (fingerprint, findings)
            self._findings[filename] = findings
        return findings

    def sync_warning(self, frame: FrameType, caller: tuple[int, FrameType] | None = None) -> None:
        """A debug-mode sync warning whose innermost Python frame is ``frame`` (the
        debug-mode engine's warning hook calls this for the syncs this recorder owns); ``caller``:
        where the frames go on, for a sync on autograd's device thread (`record_sync`)."""
        # The hot path: on a GPU loop it runs once per sync, so it does one frame walk and
        # one dict lookup, with the walk inlined for the common case of a sync on a
        # top-level line of the cell (bench/overhead.py measures it).
        __tracebackhide__ = True
        if self.engine == "cupti":
            # Debug mode, installed for another recorder, reports a torch sync that CUPTI has already counted for
            # this one (once CUPTI was held by another tool, debug mode is this recorder's engine and the
            # warning is its count).
            return
        entered = perf_counter() if self._cost_log is not None else 0.0  # the hook's own time, out of the cost
        ident = _get_ident()
        clock = self._clock
        if clock is None:
            blocked = None
        elif clock.monitored == ident:  # StallClock.pause() and resume(), inlined (stall.py)
            now = perf_counter()
            blocked = now - clock.stamp[0]
            clock.stamp[0] = now
        else:
            blocked = clock.pause()
        try:
            # A wrapper another tool put around the hook runs in the warnings module.
            # ops_calls.py issues a torch.ops call's warnings from its own frame.
            while frame.f_globals is WARNINGS_GLOBALS or frame.f_globals is OPS_CALLS_GLOBALS:
                frame = frame.f_back
            # _count(), inlined: this is the one recorder in the common case.
            code = frame.f_code
            files = self._cell_files
            if code.co_name == "<module>" and code.co_filename in files:
                key = (ident, id(code), frame.f_lasti)  # == _stack_key(frame, files)
            else:
                key = _stack_key(frame, files, self.boundary)
            if caller is not None:
                key += _stack_key(caller[1], files, self.boundary)
            tally = self._cache.get(key)
            if tally is None:
                tally = self._resolve(frame, key, None, False, None, blocked, caller)
            tally.count += 1
            if blocked is not None:
                tally.blocked_s += blocked
                tally.measured += 1
            log = self._cost_log
            if log is not None:
                log.append((tally, entered, perf_counter(), None, _call_began(tally, entered, blocked)))
            stop = self._stops_at_sync
            parent = self.parent
            while parent is not None:  # the recorders around this one in its thread
                if parent.running:
                    parent_tally = parent._count(frame, blocked, caller)
                    if parent.mode == "error" and ident == parent._thread:
                        parent._error_site = parent_tally
                        stop = True
                parent = parent.parent
        finally:
            if clock is not None and clock.monitored != ident:
                clock.resume()
        if stop and ident == self._thread and self._stops_at(tally):
            # Error mode is warn mode plus this error, raised in the recorder's own thread
            # only (torch's error mode would stop every thread of the process); torch
            # raises it from the syncing call, as filterwarnings("error") would.
            if self.mode == "error":
                self._error_site = tally
            raise RuntimeError(SYNC_MESSAGE)

    def _stops_at(self, tally: SyncTally) -> bool:
        return not self.passes_rules or getattr(tally, "rule", None) not in self.passes_rules

    def _count(self, frame: FrameType, blocked: float | None, caller: tuple[int, FrameType] | None = None) -> SyncTally:
        """One debug-mode sync at ``frame``: one frame walk and one dict lookup, with the
        walk inlined for the common case of a sync on a top-level line of the cell."""
        code = frame.f_code
        files = self._cell_files
        if code.co_name == "<module>" and code.co_filename in files:
            key = (_get_ident(), id(code), frame.f_lasti)  # == _stack_key(frame, files)
        else:
            key = _stack_key(frame, files, self.boundary)
        if caller is not None:
            key += _stack_key(caller[1], files, self.boundary)
        tally = self._cache.get(key)
        if tally is None:
            tally = self._resolve(frame, key, None, False, None, blocked, caller)
        tally.count += 1
        if blocked is not None:
            tally.blocked_s += blocked
            tally.measured += 1
        log = self._cost_log
        if log is not None:
            now = perf_counter()
            log.append((tally, now, now, None, _call_began(tally, now, blocked)))
        return tally

    def record_blocking(self, frame: FrameType | None, blocked_s: float,
                        caller: tuple[int, FrameType] | None = None) -> None:
        """One blocking CUDA call (the CUPTI engine) whose calling thread's innermost Python frame is ``frame``
        (None: a thread without Python code), blocked ``blocked_s`` seconds; ``caller``: the thread and frame where
        the frames go on (a backward pass's caller, for a call made on autograd's device thread:
        dispatch.backward_caller)."""
        # The hot path, once per blocking call: for a known site on a top-level line of the
        # cell, one dict lookup (the key `_record` would build: kind None, not predicted,
        # no detail, then `_stack_key`); otherwise the recorder's general path, which
        # walks the frames and classifies at a site's first sync. torch's explicit
        # synchronize calls (never module code) are named as debug mode's wrappers name them.
        blocked = blocked_s if self.measure_blocked else None
        explicit = self._engine.explicit_calls
        if caller is not None:
            self.record_sync(frame, explicit.get(id(frame.f_code)) if frame is not None else None,
                             blocked_s=blocked, caller=caller)
            return
        if frame is None:
            self.record_sync(None, None, blocked_s=blocked)
            return
        code = frame.f_code
        if self.parent is None and code.co_name == "<module>" and code.co_filename in self._cell_files:
            tally = self._cache.get((None, False, None, _get_ident(), id(code), frame.f_lasti))
            if tally is not None:
                tally.count += 1
                if blocked is not None:
                    tally.blocked_s += blocked
                    tally.measured += 1
                return
        self.record_sync(frame, explicit.get(id(code)), blocked_s=blocked)

    def explicit_sync(self, frame: FrameType, what: str, call, args: tuple, kwargs: dict,
                      kind: str = "explicit"):
        """Called by explicit.py's wrappers instead of torch.cuda.synchronize & co. (``kind``
        ``distributed`` for torch.distributed's host waits)."""
        __tracebackhide__ = True
        chain = [self]
        parent = self.parent
        while parent is not None:  # the recorders around this one in its thread
            if parent.running:
                chain.append(parent)
            parent = parent.parent
        stopping = [r for r in chain if r.mode == "error" and threading.get_ident() == r._thread]
        if stopping:
            for recorder in chain:
                tally = recorder._record(frame, kind, False, None, what)
                if recorder in stopping:
                    recorder._error_site = tally
            raise RuntimeError(f"{SYNC_MESSAGE}: {what} (syncfree --mode error stops at "
                               "explicit synchronization too)")
        clock = self._clock
        timed = clock is not None and threading.get_ident() == self._thread
        start = perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            blocked = perf_counter() - start if timed else None
            for recorder in chain:
                recorder._record(frame, kind, False, blocked, what, call_start=start)
            if timed:
                clock.resume()  # the next interval starts after this sync

    # ------------------------------------------------------------------ errors

    def _describe_error(self, exc: BaseException) -> dict:
        try:
            text = str(exc)
        except Exception:  # an exception whose __str__ raises is still the user's to see
            text = ""
        sync_error = ((self.mode == "error" or self.stop_at_first) and isinstance(exc, RuntimeError)
                      and text.startswith(SYNC_MESSAGE))
        if sync_error and self._error_site is None:
            innermost = _innermost_frame(exc.__traceback__)
            if innermost is not None:
                self._error_site = self._record(innermost, None, False, None, None)
        line = self._cell_line_of(exc.__traceback__)
        if isinstance(exc, SyntaxError) and exc.filename in self._cell_files and exc.lineno:
            line = exc.lineno + self._cell_files[exc.filename]  # raised by compile: no frame
        if sync_error:
            site = self._error_site
            what = "an operation"
            if isinstance(site, SyncSite):
                what, line = site.label, site.line
            where = f"line {line}: " if line else ""
            verb = "would synchronize on a GPU" if self.stop_at_first else "synchronized"
            message = f"{where}{what} {verb}; --mode error stops at the first sync"
        elif isinstance(exc, KeyboardInterrupt):
            message = "interrupted"
        else:
            message = text or type(exc).__name__
        return {"type": type(exc).__qualname__[:200], "message": message[:1000], "line": line}

    def _cell_line_of(self, tb: TracebackType | None) -> int | None:
        line = None
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if filename in self._cell_files and tb.tb_lineno is not None:
                line = max(tb.tb_lineno + self._cell_files[filename], 1)
            tb = tb.tb_next
        return line

    # ------------------------------------------------------------------ results

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < _MAX_NOTES:
            self.notes.append(text if len(text) <= 500 else type(text)(text[:500]))  # an Uncounted stays one

    @property
    def stopped_by_sync(self) -> bool:
        """In error mode: the run ended at a sync (``error`` says where)."""
        return self._error_site is not None

    @property
    def sites(self) -> list[SyncSite]:
        return self._table.sites()

    def checkpoint(self) -> dict[int, tuple[int, float, int]]:
        """The tallies so far, for `sites_since`: a watch nested in this run reports
        what this recorder saw during its block."""
        with self._lock:
            return {id(s): (s.count, s.blocked_s, s.measured) for s in self._table.sites()}

    def sites_since(self, checkpoint: dict[int, tuple[int, float, int]]) -> list[SyncSite]:
        """Copies of the sites that synced after ``checkpoint``, with only the new syncs."""
        since = []
        with self._lock:
            for site in self._table.sites():
                count, blocked_s, measured = checkpoint.get(id(site), (0, 0.0, 0))
                if site.count > count:
                    copy = SyncSite(site.chain, site.kind, site.rule, site.frames, site.thread,
                                    site.predicted, site.detail, site.files, site.library,
                                    site.phase, span=site.span)
                    copy.count = site.count - count
                    copy.blocked_s = site.blocked_s - blocked_s
                    copy.measured = site.measured - measured
                    copy.first_s = site.first_s if not count else None  # its first call in the block
                    since.append(copy)
        return since

    @property
    def syncs(self) -> int:
        """Every sync seen, on a cell line or not."""
        return (sum(s.count for s in self._table.sites()) + self._table.overflow.count
                + sum(t.count for t in self._outside.values()) + sum(r.syncs for r in self.inherited_children))

    @property
    def overflow_syncs(self) -> int:
        """The syncs at sites past the table's limit: in the totals only."""
        return self._table.overflow.count

    @property
    def watches_cells(self) -> bool:
        """A recorder of notebook cells (a ``%%syncfree`` cell, watch mode), not of user files (a watch, a run)."""
        return not isinstance(self._cell_files, UserFiles)

    def child_started(self, pid: int, frame: FrameType | None) -> None:
        """A child process this recorder follows was started from ``frame``: for a recorder of cells, the cell line
        that started it is where its syncs go when none of their lines is in the cell (its target was defined in
        another cell or a module)."""
        cells = self._cell_files
        if not self.watches_cells:
            return
        while frame is not None:
            offset = cells.get(frame.f_code.co_filename)
            if offset is not None:
                self._child_lines[pid] = frame.f_lineno + offset
                return
            frame = frame.f_back

    def inherit(self, reports: list, notes: list[str], started_as: Any = None) -> None:
        """The reports of the child processes this recorder followed, and notes on those without one. ``started_as``:
        the pid subprocess started for the program a report is from (a shell's, where the shell forked the program),
        so that a recorder of cells finds the line that started it (`child_started`)."""
        for report in reports:
            started = started_as(report.pid) if started_as is not None else report.pid
            if started in self._child_lines:
                self._child_lines.setdefault(report.pid, self._child_lines[started])
        self.inherited_children.extend(reports)
        self.inherited_notes.extend(notes)

    def inherited_sites(self) -> list[SyncSite]:
        """The sites of `inherited_children`, marked with the child processes' names; for a recorder of cells, in
        the cells' lines: the child's own lines in the cell, else the line that started the child (a site with
        neither is counted in the totals only: `report_fields`)."""
        if not self.inherited_children:
            return []
        from dataclasses import replace

        from .sites import child_sites

        cells = self._cell_files
        if isinstance(cells, UserFiles):
            return child_sites(self.inherited_children)
        reports = []
        for report in self.inherited_children:
            sites = []
            for fields in report.sites:
                files = fields.get("files")
                if files:
                    lines = [line + cells[name] for line, name in zip(fields["chain"], files) if name in cells]
                    if not lines and report.pid in self._child_lines:
                        lines = [self._child_lines[report.pid]]
                    if not lines:
                        continue
                    fields = {**fields, "chain": lines, "files": None}
                sites.append(fields)
            reports.append(replace(report, sites=sites))
        return child_sites(reports)

    def cost_fields(self) -> dict:
        """The report totals' cost_ms, gpu_busy_ms and gpu_idle_ms: None each when not measured."""
        costs = self.costs
        if costs is None:
            return {"cost_ms": None, "gpu_busy_ms": None, "gpu_idle_ms": None}
        return {"cost_ms": round(costs.cost_us / 1000.0, 3), "gpu_busy_ms": round(costs.busy_us / 1000.0, 3),
                "gpu_idle_ms": round(costs.idle_us / 1000.0, 3)}

    def report_fields(self) -> dict:
        """Keyword arguments for `syncfree.report.build_report` (all but source/device)."""
        notes = list(self.notes)
        for thread, tally in self._outside.items():
            if tally.count:
                where = f"in thread {thread!r}" if thread else "in the cell's thread"
                notes.append(f"{tally.count} sync{'s' if tally.count != 1 else ''} {where} ran outside the cell's code "
                             f"and {'is' if tally.count == 1 else 'are'} not attributed to a line")
        if self.unwatched_children:
            names = self.unwatched_children
            one = len(names) == 1
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            notes.append(f"{len(names)} child process{'' if one else 'es'} started here ({shown}) ran unwatched: "
                         f"{'its' if one else 'their'} syncs are not counted")
        if self.unwatched_programs:
            from ..programs import programs_note

            notes.extend(programs_note(self.unwatched_programs, " here", "are not counted"))
        if self.unwatched_forks:
            one = self.unwatched_forks == 1
            notes.append(f"{self.unwatched_forks} process{'' if one else 'es'} forked here with os.fork() ran "
                         f"unwatched: {'its' if one else 'their'} syncs are not counted (`syncfree run` follows "
                         "os.fork)")
        notes.extend(self.inherited_notes)
        inherited = self.inherited_sites()
        outside = sum(r.syncs for r in self.inherited_children) - sum(s.count for s in inherited)
        if outside > 0:
            notes.append(f"{outside} sync{'s' if outside != 1 else ''} in child processes ran outside the cell's code "
                         f"and {'is' if outside == 1 else 'are'} not attributed to a line")
        if self._table.overflow.count:
            notes.append(f"{self._table.overflow.count} sync{'s' if self._table.overflow.count != 1 else ''} at sites "
                         "beyond the first "
                         f"{len(self._table.sites())} are counted in the totals only")
        cost = self.cost_fields()
        if cost["cost_ms"] is None:  # one line on why there is no cost (syncfree.cost)
            from ..cost import COST_NOT_ASKED, NO_GPU_NO_COST

            if self.cost_note:
                notes.append(self.cost_note)
            elif self.mode == "predict":
                notes.append(NO_GPU_NO_COST)
            elif self.cuda and not self.measure_cost:
                notes.append(COST_NOT_ASKED)
        return {
            "mode": self.mode,
            "sites": [s.to_report() for s in self._table.sites() + inherited],
            "cost": cost,
            "syncs": self.syncs,
            "wall_ms": self.wall_ms,
            "error": self.error,
            "notes": notes,
            "truncated_sites": self._table.truncated,
            "truncated_frames": self.frames_truncated,
            "predict_table": _predict_table(self) if self.mode == "predict" else None,
        }


# An interrupt held back MAX_HOLD_S elsewhere is still held back on the way out (its first
# instruction, before the ``try``, would leave everything installed): interrupts.py.
interrupts.teardown_code(SyncRecorder.__exit__, SyncRecorder._close_undo, Undo.close, close_all)


class CuptiRecorder(SyncRecorder):
    """A `SyncRecorder` whose engine is CUPTI (`cupti.CuptiEngine`: every blocking CUDA call, any library), which
    falls back to the debug-mode engine, and says so, when CUPTI cannot be had at enter. Warn mode only.
    ``cupti_api``: cupti-python's ``cupti`` module (loaded when None; tests give a fake)."""

    def __init__(self, *args: Any, cupti_api: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, engine=CuptiEngine(DebugEngine(), cupti_api), **kwargs)


def _predict_engine() -> Engine:
    from .predict import PredictEngine  # imported at the first predict-mode recorder only

    return PredictEngine()


def _predict_table(recorder: SyncRecorder) -> dict | None:
    from . import optable  # predict mode's measured op table (imports torch lazily)

    return optable.report_of(recorder)


_getframe = sys._getframe
_get_ident = threading.get_ident


def _thread_name(ident: int) -> str:
    """The name of the live thread ``ident`` (once per site: the list is short)."""
    return next((t.name for t in threading.enumerate() if t.ident == ident), f"thread {ident}")


def _stack_key(frame: FrameType | None, files: Mapping[str, int],
               boundary: FrameType | None = None) -> tuple:
    """(thread, then code id and instruction of each frame out to the cell's module frame,
    or to ``boundary``, a live frame above which every recorded stack is the same).

    Code objects are keyed by id(): hashing a code object hashes its constants each time.
    The recorder keeps the code objects of every key alive, so no id is reused meanwhile.
    """
    key = [_get_ident()]
    f = frame
    while f is not None:
        code = f.f_code
        key.append(id(code))
        key.append(f.f_lasti)
        if f is boundary or (code.co_name == "<module>" and code.co_filename in files):
            break
        f = f.f_back
    return tuple(key)


def _innermost_frame(tb: TracebackType | None) -> FrameType | None:
    frame = None
    while tb is not None:
        frame = tb.tb_frame
        tb = tb.tb_next
    return frame


__all__ = ["MODES", "SCOPES", "SYNC_MESSAGE", "SyncRecorder"]
