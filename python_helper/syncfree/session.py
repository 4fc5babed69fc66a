"""The one core every surface calls: engine choice, running code under the recorder,
reports and error descriptions.

The magic (``magic.py``), the command line (``cli.py``), the pytest plugin
(``pytest_plugin.py``), the public API (``syncfree.watch``, ``syncfree.sync_free``) and
the benchmarks are glue over this module. Nothing here imports IPython; torch is imported
only when code is run.

    with syncfree.watch() as w:            # warn mode with CUDA, predict mode without
        train_step()
    print(w.report.text())                 # train.py:41: `.item()` ×64, blocked 3.1 ms, SF101

    with syncfree.sync_free(budget=0):     # raises SyncError at the end, listing every site
        train_step()
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from .allow import comment_covering
from .capture import interrupts
from .capture.sites import MAX_FRAMES, SyncSite, UserFiles, rank_key

__all__ = ["Engine", "SyncError", "Watch", "WatchReport", "ScriptRun", "choose_engine",
           "hide_engine_frames", "is_sync_stop",
           "cuda_available", "new_recorder", "cell_report", "describe_error", "run_script",
           "watch", "sync_free", "allowed_by_comment"]


# --------------------------------------------------------------------------- the engine


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
        notes.append("No CUDA device: syncs predicted on CPU stand-ins; --mode error stops "
                     "at the first predicted sync")
        return Engine("predict", device_info("predict"), notes, stop_at_first=True)
    if requested == "warn":
        notes[-1] += "; syncs predicted on CPU stand-ins instead"
    elif requested != "predict":
        notes.append("No CUDA device: syncs predicted on CPU stand-ins")
    return Engine("predict", device_info("predict"), notes)


def new_recorder(engine: Engine, *, files: Mapping[str, int], findings: Mapping | None = None,
                 measure_blocked: bool = True, max_frames: int = 4, scope: str = "process",
                 measure_cost: bool = False):
    """A `SyncRecorder` for ``engine`` (not for the static engine, which records nothing);
    ``scope``: ``process`` (a cell, a script) or ``context`` (a watch: its thread or task);
    ``measure_cost``: what each sync costs, the GPU time it loses (capture/gputrace.py)."""
    from .capture import SyncRecorder

    if engine.engine == "cupti":
        from .capture.cupti_engine import CuptiRecorder

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
    fields["notes"] = engine.notes + fields["notes"] + _unseen_libraries(engine)
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


# --------------------------------------------------------------------------- allow comments

def allowed_by_comment(text: str, kind: str, rule: str | None) -> bool:
    """Whether a source line's ``# syncfree: allow`` comment covers a sync (the syntax and its
    matching: syncfree/allow.py, shared with the static pass)."""
    return comment_covering(text, kind, rule) is not None


# --------------------------------------------------------------------------- reports


def _display_path(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


@dataclass
class WatchReport:
    """What a `watch` block synchronized: sites (file, line, kind, count, blocked time,
    chain, rule), totals and a text rendering.

    ``sites`` are `SyncSite`s ranked costliest first: recurring ones by their blocked time
    after the first call, then one-off ones (`syncfree.capture.sites.rank_key`);
    ``allowed`` holds the sites that a ``# syncfree: allow`` comment covers, which count
    towards ``syncs`` but not towards a budget.
    """

    mode: str
    device: dict
    sites: list[SyncSite]
    allowed: list[SyncSite]
    syncs: int
    wall_ms: float
    notes: list[str]
    error: dict | None = None
    predict_table: dict | None = None  # predict mode: report.schema.json's predict_table
    # The GPU time lost to syncs (syncfree.cost) and the GPU's busy and idle time: report.schema.json's
    # Totals cost_ms, gpu_busy_ms, gpu_idle_ms; None each when not measured.
    cost: dict | None = None
    # Predict mode: False when the block's torch calls ran on host tensors only and no CUDA stand-in was seen
    # (tensors made before the block with the device chosen on this CPU machine): a verdict could not be given.
    judged: bool = True

    def __post_init__(self) -> None:
        from .report import settle_device

        settle_device(self.device)

    @property
    def blocked_ms(self) -> float | None:
        measured = [s.blocked_ms for s in self.sites + self.allowed if s.blocked_ms is not None]
        return round(sum(measured), 3) if measured else None

    @property
    def cost_ms(self) -> float | None:
        """GPU time lost to the block's syncs (None: not measured: no GPU, or ``cost=False``)."""
        return (self.cost or {}).get("cost_ms")

    @property
    def counted_cost_ms(self) -> float | None:
        """GPU time lost to the syncs that count towards a budget: all but the allowed sites'."""
        if self.cost_ms is None:
            return None
        return round(max(self.cost_ms - sum(s.cost_ms or 0.0 for s in self.allowed), 0.0), 3)

    @property
    def counted(self) -> int:
        """Syncs that count towards a budget: all but the allowed ones."""
        return self.syncs - sum(s.count for s in self.allowed)

    @property
    def predicted(self) -> bool:
        return self.mode == "predict"

    def site_line(self, site: SyncSite) -> str:
        """``path:line: kind ×count, blocked ms, rule`` for one site."""
        where = f"{_display_path(site.file)}:{site.line}" if site.file else f"line {site.line}"
        what = site.label.replace("`", "")
        parts = [f"{where}: {what} ×{site.count}"]
        if site.predicted:
            parts.append("predicted")
        if site.cost_ms is not None:  # what it cost leads (syncfree.cost); blocked time is second
            share = f", {site.cost_share * 100:.1f}%" if site.cost_share is not None else ""
            parts.append(f"cost {site.cost_ms:.2f} ms of GPU time ({site.cost_each_ms:.3f} ms each{share})")
        if not site.predicted and site.blocked_ms is not None:
            from .report import first_call_text

            first = "" if site.one_off else first_call_text(site.count, site.blocked_ms, site.first_ms)
            parts.append(f"blocked {site.blocked_ms:.1f} ms" + (f" ({first})" if first else ""))
        if site.rule:
            parts.append(site.rule)
        if site.thread:  # a thread the block started: the same line in two threads is two rows
            parts.append(f"in thread {site.thread}")
        if site.process:  # a child process the block started (syncfree.processes)
            parts.append(f"in child process{'es' if ', ' in site.process else ''} {site.process}")
        text = ", ".join(parts)
        if site.files and len(site.files) > 1:
            chain = " <- ".join(f"{_display_path(f)}:{n}" for f, n in
                                zip(reversed(site.files[:-1]), reversed(site.chain[:-1])))
            text += f" (called from {chain})"
        if site.library is not None:  # the framework's line under the user's (capture/sites.py)
            from .report import library_text

            text += f"\n      {library_text(site.library.to_report())}"
        return text

    def summary(self) -> str:
        verb = "predicted" if self.predicted else "seen"
        text = f"{self.syncs} sync{'s' if self.syncs != 1 else ''} {verb} at " \
               f"{len(self.sites) + len(self.allowed)} site{'s' if len(self.sites) + len(self.allowed) != 1 else ''}"
        if self.cost_ms is not None:
            text += f", cost {self.cost_ms:.2f} ms of GPU time (GPU busy {self.cost['gpu_busy_ms']:.1f} ms, " \
                    f"idle {self.cost['gpu_idle_ms']:.1f} ms)"
        if self.blocked_ms is not None:
            text += f", blocked {self.blocked_ms:.1f} ms"
        if self.allowed:
            text += f" ({sum(s.count for s in self.allowed)} allowed by comments)"
        return f"syncfree ({self.mode}, {self.device.get('name')}): {text}"

    def text(self) -> str:
        lines = [self.summary()]
        # Recurring syncs first (paid every step), ranked by their cost after the first call;
        # what is paid once apart: the syncs of lines that run once (setup, compilation), with
        # their total, and the first calls of the recurring sites (warm-up).
        lines += [f"  {self.site_line(s)}" for s in self.sites if not s.one_off]
        once = [s for s in self.sites if s.one_off]
        firsts = [s.first_ms for s in self.sites if not s.one_off and s.first_ms is not None]
        if once or firsts:
            blocked = [s.blocked_ms for s in once if s.blocked_ms is not None]
            text = f"  once (setup, compilation): {sum(s.count for s in once)} sync(s)"
            if blocked:
                text += f", blocked {sum(blocked):.1f} ms"
            if firsts:
                text += (f"; the first calls of the {len(firsts)} recurring site{'s' if len(firsts) != 1 else ''}"
                         f" above: blocked {sum(firsts):.1f} ms")
            lines.append(text)
            lines += [f"  {self.site_line(s)}" for s in once]
        lines += [f"  {self.site_line(s)} [allowed]" for s in self.allowed]
        unattributed = self.syncs - sum(s.count for s in self.sites + self.allowed)
        if unattributed > 0:
            lines.append(f"  {unattributed} sync(s) outside your code (library or other threads)")
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  note: {n}" for n in self.predict_table_lines()]
        return "\n".join(lines)

    def predict_table_lines(self) -> list[str]:
        """Calls predict mode had no measurement for; the table's torch version if it
        differs from the installed one (report.predict_table_lines)."""
        from .report import predict_table_lines

        return predict_table_lines({"predict_table": self.predict_table})

    __str__ = text

    def to_dict(self) -> dict:
        """A JSON-ready dict: mode, device, totals, sites (each with ``file``), notes."""
        def site_dict(site: SyncSite, allowed: bool) -> dict:
            entry = site.to_report()
            entry["file"] = site.file
            entry["chain_files"] = list(site.files) if site.files else None
            entry["allowed"] = allowed
            return entry

        return {
            "mode": self.mode,
            "device": dict(self.device),
            "totals": {"syncs": self.syncs, "counted": self.counted,
                       "sites": len(self.sites) + len(self.allowed),
                       "cost_ms": self.cost_ms, "gpu_busy_ms": (self.cost or {}).get("gpu_busy_ms"),
                       "gpu_idle_ms": (self.cost or {}).get("gpu_idle_ms"),
                       "blocked_ms": self.blocked_ms, "wall_ms": self.wall_ms},
            "sites": [site_dict(s, False) for s in self.sites]
                     + [site_dict(s, True) for s in self.allowed],
            "error": self.error,
            "notes": list(self.notes),
            "predict_table": self.predict_table,
        }


def _rank(sites: list[SyncSite]) -> list[SyncSite]:
    # Recurring first, by their cost (GPU time lost) where measured, else by their blocked time after the first
    # call; one-off after (sites.rank_key).
    return sorted(sites, key=lambda s: (*rank_key(s.one_off, s.blocked_ms, s.first_ms, s.count, s.cost_ms),
                                        s.files or (), s.line))


class SyncError(AssertionError):
    """Raised by `sync_free` (and the pytest marker) when a block synchronized more often
    than its budget allows. ``report`` is the block's `WatchReport`; the message lists
    every site."""

    def __init__(self, report: WatchReport, budget: int | None, budget_ms: float | None = None) -> None:
        self.report = report
        self.budget = budget
        self.budget_ms = budget_ms
        verb = "would synchronize" if report.predicted else "synchronized"
        head = f"{verb} {report.counted} time{'s' if report.counted != 1 else ''}, budget {budget}"
        if budget_ms is not None:  # over the budget in GPU time lost (syncfree.cost)
            head = (f"{verb} {report.counted} time{'s' if report.counted != 1 else ''}, losing "
                    f"{report.counted_cost_ms:.2f} ms of GPU time, budget {budget_ms:g} ms")
        lines = [head] + [f"  {report.site_line(s)}" for s in report.sites]
        unattributed = report.counted - sum(s.count for s in report.sites)
        if unattributed > 0:
            lines.append(f"  {unattributed} sync(s) outside your code (library or other threads)")
        super().__init__("\n".join(lines))


#: Why a predict-mode block could not be judged (a note of its report, the message of `NotJudged`).
NOT_JUDGED = ("no CUDA tensor was seen: the block's torch calls ran on CPU tensors only (made before it, with the "
              "device chosen where CUDA is not available?), so the syncs they would make on a GPU could not be "
              "predicted")


class NotJudged(SyncError):
    """Raised by `sync_free` (and the pytest marker) in predict mode, within the budget, when the block's torch
    calls ran on CPU tensors only and no CUDA stand-in was seen: the tensors were made before the block with the
    device chosen on this CPU-only machine (``"cuda" if torch.cuda.is_available() else "cpu"``), and on a GPU
    they would be CUDA tensors whose syncs nothing predicted. Not a pass: choose the device, or make the tensors,
    inside the block (predict mode answers ``torch.cuda.is_available()`` with True there), or run the program
    under ``syncfree run``; with a CUDA device the block is measured."""

    def __init__(self, report: WatchReport, budget: int) -> None:
        self.report = report
        self.budget = budget
        self.budget_ms = None
        AssertionError.__init__(self, f"could not judge the block: {NOT_JUDGED}; choose the device (or make the "
                                      "tensors) inside it (a test: in the test or a fixture), or run the program "
                                      "under `syncfree run`")


def check_verdict(report: WatchReport, budget: int) -> None:
    """The verdict of a block with a budget (`sync_free`, the pytest marker): `SyncError` when it synchronized
    more than ``budget`` times, `NotJudged` when predict mode could not judge it, else nothing."""
    __tracebackhide__ = True
    if report.counted > budget:
        raise SyncError(report, budget)
    if not report.judged:
        raise NotJudged(report, budget)


def check_cost_budget(report: WatchReport, budget_ms: float) -> None:
    """`SyncError` when the block's syncs (but the allowed ones) lost more than ``budget_ms`` of GPU time;
    nothing when the cost was not measured (the report's notes say so)."""
    __tracebackhide__ = True
    lost = report.counted_cost_ms
    if lost is not None and lost > budget_ms:
        raise SyncError(report, None, budget_ms)


# --------------------------------------------------------------------------- watch


class Watch:
    """Run a block, or each call of a decorated function, under the engine.

    ``mode``: None (warn with CUDA, predict without), ``"warn"``, ``"error"`` (raise at
    the first sync) or ``"predict"``. ``budget``: raise `SyncError` at the end of the
    block when more syncs than this were counted (None: never). ``paths``: restrict
    attribution to files under these folders (default: every file that is not the
    standard library, an installed package, torch or syncfree). ``engine``: what sees the
    syncs on a GPU, ``"debug"`` (torch's sync debug mode), ``"cupti"`` (every blocking CUDA
    call, any library; ``pip install 'syncfree[cupti]'``) or ``"auto"`` (None: CUPTI once
    a library that calls CUDA without torch is imported, or imported by ``sources``, the
    code about to run); see capture/engines.py.

    **Scope.** A watch counts the syncs of the thread that runs it, or of the asyncio
    task (and the tasks that task creates inside the block, which copy its context), and
    of the work the block starts: the threads it starts and the tasks it submits to a
    ``ThreadPoolExecutor`` run under it (in predict mode, non-daemon threads and pool tasks
    on the stand-ins; capture/threads.py). Syncs of other threads are not counted into
    it, and each thread's watch gets its own (a note says how many syncs threads without
    a watch made meanwhile).
    ``all_threads=True`` counts every thread of the process instead, as ``syncfree run``
    and ``%%syncfree`` do. A watch inside another one of the same thread or task (or
    inside a ``%%syncfree`` cell, a watched test) reports its block's syncs, and the outer
    one counts them too.

    **Reports.** After the block ``report`` holds a `WatchReport`; ``on_report``, if
    given, is called with it. As a decorator (``@syncfree.watch()``,
    ``@syncfree.sync_free()``) each call runs under a watch of its own, and its report is
    the decorated function's ``syncfree_report`` and this watch's ``report`` (the last
    call's) and goes to ``on_report`` (each call's), before any `SyncError`.

    **Decorated generators and async code.** An ``async def`` function is watched from
    its first line to its return, across its awaits (other tasks that run meanwhile are
    not counted). A generator (or async generator) is watched while its body runs, from
    the first ``next()`` to its end: across its yields, but not the consumer's code
    between them; its report comes when it is exhausted or closed (the budget is checked
    only when it is exhausted). In predict mode the consumer's code between two yields
    still runs on the CPU stand-ins.

    A watch that never ends (the program exits inside it) says so on stderr at exit.
    """

    def __init__(self, mode: str | None = None, *, budget: int | None = None,
                 measure_blocked: bool = True, max_frames: int = 4,
                 cost: bool = False, budget_ms: float | None = None,
                 paths: Sequence[str] = (), engine: str | None = None,
                 all_threads: bool = False,
                 on_report: Callable[[WatchReport], Any] | None = None,
                 sources: Sequence[str] = ()) -> None:
        if budget is not None and (not isinstance(budget, int) or budget < 0):
            raise ValueError(f"budget must be a whole number >= 0, not {budget!r}")
        if budget_ms is not None and (isinstance(budget_ms, bool) or not isinstance(budget_ms, (int, float))
                                      or not budget_ms >= 0):
            raise ValueError(f"budget_ms must be a number of milliseconds >= 0, not {budget_ms!r}")
        if not 0 <= max_frames <= MAX_FRAMES:
            raise ValueError(f"max_frames must be between 0 and {MAX_FRAMES}, not {max_frames}")
        if on_report is not None and not callable(on_report):
            raise TypeError(f"on_report must be callable, not {on_report!r}")
        self.engine = choose_engine(mode, engine, sources=sources)
        self._engine_requested = engine
        self.budget = budget
        # The budget in GPU time lost to syncs (ms, syncfree.cost); it measures the cost.
        self.budget_ms = budget_ms
        self.cost = bool(cost) or budget_ms is not None
        self.measure_blocked = measure_blocked
        self.max_frames = max_frames
        self.paths = tuple(str(p) for p in paths)
        self.all_threads = bool(all_threads)
        self.on_report = on_report
        self.report: WatchReport | None = None
        self._recorder = None
        self._children_before: dict[int, str] = {}  # the multiprocessing children running when it began
        self._token = None                      # the dispatcher's routing of this context
        self._routed_before = None              # ... and what it routed to before
        self._running = False
        self._started = 0.0
        self._where: str | tuple[str, int] = ""
        self._activity_before: tuple[int, int] | None = None  # predict mode: the stand-ins' activity before it
        self._delivered_to: Callable[..., Any] | None = None  # the decorated function
        self._parent: Watch | None = None  # the decorator's watch, for a call's watch

    # ------------------------------------------------------------------ with

    def __enter__(self) -> Watch:
        # The frame running the `with` (or the decorator's wrapper): every sync of the
        # block happens below it, so the recorder's stack keys stop there.
        try:
            self._begin(sys._getframe(1))
            self._resume()
        except BaseException:  # noqa: B036 (an interrupt half way: nothing left running)
            self._abandon()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True
        try:
            self._suspend()
        finally:
            self._end(exc)
        return False

    # ------------------------------------------------------------------ decorator

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``@watch(...)``: each call of ``func`` under a watch of its own (see the class)."""
        wrapper: Callable[..., Any]
        if inspect.isasyncgenfunction(func):
            wrapper = _async_generator_wrapper(self, func)
        elif inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def watched_coroutine(*args, **kwargs):
                __tracebackhide__ = True
                with self._for_call(watched_coroutine):
                    return await func(*args, **kwargs)
            wrapper = watched_coroutine
        elif inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def watched_generator(*args, **kwargs):
                __tracebackhide__ = True
                call = self._for_call(watched_generator)
                return (yield from _watched_generator(call, func(*args, **kwargs)))
            wrapper = watched_generator
        else:
            @functools.wraps(func)
            def watched(*args, **kwargs):
                __tracebackhide__ = True
                with self._for_call(watched):
                    return func(*args, **kwargs)
            wrapper = watched
        wrapper.syncfree_report = None  # type: ignore[attr-defined]
        return wrapper

    def _for_call(self, wrapper: Callable[..., Any]) -> Watch:
        """A fresh watch for one call (calls may overlap: threads, recursion, tasks)."""
        call = Watch(self.engine.mode if self.engine.mode != "static" else None,
                     budget=self.budget, measure_blocked=self.measure_blocked,
                     cost=self.cost, budget_ms=self.budget_ms,
                     max_frames=self.max_frames, paths=self.paths,
                     engine=self._engine_requested, all_threads=self.all_threads,
                     on_report=self.on_report)
        call._delivered_to = wrapper
        call._parent = self
        return call

    def child_settings(self) -> dict[str, Any] | None:
        """How a child process started under this watch watches its target (`child_settings`)."""
        return child_settings(self.engine, self.measure_blocked, self.max_frames)

    # ------------------------------------------------------------------ steps

    def _begin(self, boundary) -> None:
        if self._running:
            raise RuntimeError("this watch is already running; make a new one")
        self.report = None
        # Where the watch began, for the message of a watch that never ends: the path is
        # made readable only then (os.path.relpath costs more than the rest of _begin).
        self._where = (boundary.f_code.co_filename, boundary.f_lineno) \
            if self._delivered_to is None else f"{self._delivered_to.__qualname__}()"
        if self.engine.mode != "static":
            # Inside another watch of this thread or task, a %%syncfree cell or a watched
            # test, the recorder already there is this one's parent (capture/dispatch.py).
            recorder = new_recorder(self.engine, files=UserFiles(self.paths),
                                    measure_blocked=self.measure_blocked,
                                    measure_cost=self.cost,
                                    max_frames=self.max_frames,
                                    scope="process" if self.all_threads else "context")
            recorder.boundary = boundary
            # The multiprocessing children the block starts watch their targets as the block is watched
            # (capture/threads.py; none when something outside it follows the process's children).
            recorder.child_settings = self.child_settings()
            from .processes import running_children

            self._children_before = running_children()  # named in the report: they work for it unwatched
            self._recorder = recorder  # before it is entered: _abandon ends it
            recorder.__enter__()
            # Without CUDA only (predict mode asked for on a GPU machine runs on real CUDA tensors, not stand-ins).
            self._activity_before = _predict_activity() if recorder.mode == "predict" and not cuda_available() \
                else None
        self._running = True
        _unended.watch_began(self)
        self._started = perf_counter()

    def _resume(self) -> None:
        """The block's code runs from here (again) in this thread or task."""
        recorder = self._recorder
        if recorder is not None:
            from .capture import dispatch

            # Kept first: an interrupt between the route and the store of its token leaves
            # the context routed to the recorder, and _abandon puts this back.
            self._routed_before = dispatch.routed()
            self._token = dispatch.route(recorder)

    def _suspend(self) -> None:
        """The block's code stops running here (a yield, the end)."""
        token, self._token = self._token, None
        if token is not None or self._recorder is not None:  # no token: one an interrupt lost
            from .capture import dispatch

            dispatch.unroute(token, self._recorder, self._routed_before)

    def _end(self, exc: BaseException | None, *, check_budget: bool = True) -> None:
        __tracebackhide__ = True
        if not self._running:
            return
        recorder, self._recorder = self._recorder, None
        self._running = False
        _unended.watch_ended(self)
        wall_ms = round((perf_counter() - self._started) * 1000.0, 3)
        if recorder is None:
            report = WatchReport(self.engine.mode, self.engine.device, [], [], 0, wall_ms,
                                 list(self.engine.notes))
        else:
            try:
                recorder.__exit__(type(exc) if exc is not None else None, exc,
                                  exc.__traceback__ if exc is not None else None)
            finally:
                recorder.boundary = None  # no frame kept alive past the block
            report = _watch_report(self.engine, recorder)
            # The child processes the block started: their syncs are its own, and those of the watches around it.
            children, recorder.children = recorder.children, None
            reports, notes = children.end_watch() if children is not None else ([], [])
            if recorder.followed_children:  # started while syncfree run's or a test's follower took them
                from .processes import followed_reports

                more, more_notes = followed_reports(recorder.followed_children)
                reports, notes = reports + more, notes + more_notes
            if reports or notes:
                from .processes import merge_children, pass_to_parents

                merge_children(report, reports, notes)
                pass_to_parents(recorder, reports, notes)
            if self._children_before:  # this block's own note: a watch around it may count them
                from .processes import earlier_children_note

                report.notes.append(earlier_children_note(self._children_before, "block"))
            before, self._activity_before = self._activity_before, None
            if before is not None:
                cuda, host = (now - then for now, then in zip(_predict_activity(), before))
                if host and not cuda:  # plain CPU work only: a block without torch work has nothing to sync
                    report.judged = False
                    report.notes.insert(0, NOT_JUDGED)
        if self.budget_ms is not None and report.cost_ms is None:
            report.notes.append(f"the budget of {self.budget_ms:g} ms of GPU time was not checked: what the syncs "
                                "cost is measured only on a GPU, with the debug-mode engine")
        self.report = report
        if self._parent is not None:
            self._parent.report = report
        if self._delivered_to is not None:
            self._delivered_to.syncfree_report = report  # type: ignore[attr-defined]
        if self.on_report is not None:
            self.on_report(report)
        if check_budget and exc is None and self.budget is not None:
            check_verdict(report, self.budget)
        if check_budget and exc is None and self.budget_ms is not None:
            check_cost_budget(report, self.budget_ms)

    def _abandon(self) -> None:
        """Undo a `_begin` that did not complete (no report)."""
        recorder, self._recorder = self._recorder, None
        token, self._token = self._token, None
        self._running = False
        _unended.watch_ended(self)
        if recorder is not None:
            from .capture import dispatch

            dispatch.unroute(token, recorder, self._routed_before)
            try:
                recorder.__exit__(None, None, None)
            finally:
                recorder.boundary = None
                children, recorder.children = recorder.children, None
                if children is not None:
                    children.end_watch()

    def _syncs_so_far(self) -> int:
        recorder = self._recorder
        return recorder.syncs if recorder is not None else 0


# A watch's enter and exit start and end its recorder: an interrupt that lands in them is
# held back like one in the engine, raised once the watch has ended (capture/interrupts.py).
# Without it, one on the first instruction of __exit__ (before its ``try``) left the
# recorder running: every wrapper, the debug mode and the filters stayed.
interrupts.engine_code(Watch.__enter__, Watch.__exit__, Watch._begin, Watch._resume,
                       Watch._suspend, Watch._end, Watch._abandon)
interrupts.teardown_code(Watch.__exit__, Watch._end, Watch._abandon)


def _watched_generator(call: Watch, gen):
    """Drive ``gen`` with ``call`` watching its body only: routed to the watch while the
    body runs, not while the consumer's code runs between two items."""
    __tracebackhide__ = True
    call._begin(sys._getframe())
    try:
        to_send, to_throw = None, None
        while True:
            call._resume()
            try:
                item = gen.send(to_send) if to_throw is None else gen.throw(to_throw)
            except StopIteration as stop:
                result = stop.value
                break
            finally:
                call._suspend()
            to_send, to_throw = None, None
            try:
                to_send = yield item
            except GeneratorExit:
                call._resume()
                try:
                    gen.close()
                finally:
                    call._suspend()
                raise
            except BaseException as exc:  # noqa: B036 (thrown in by the consumer: to the body)
                to_throw = exc
    except GeneratorExit:
        call._end(None, check_budget=False)
        raise
    except BaseException as exc:  # noqa: B036
        call._end(exc)
        raise
    call._end(None)
    return result


def _async_generator_wrapper(watch: Watch, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    async def watched_async_generator(*args, **kwargs):
        __tracebackhide__ = True
        call = watch._for_call(watched_async_generator)
        agen = func(*args, **kwargs)
        call._begin(sys._getframe())
        try:
            to_send, to_throw = None, None
            while True:
                call._resume()
                try:
                    if to_throw is None:
                        item = await agen.asend(to_send)
                    else:
                        item = await agen.athrow(to_throw)
                except StopAsyncIteration:
                    break
                finally:
                    call._suspend()
                to_send, to_throw = None, None
                try:
                    to_send = yield item
                except GeneratorExit:
                    call._resume()
                    try:
                        await agen.aclose()
                    finally:
                        call._suspend()
                    raise
                except BaseException as exc:  # noqa: B036
                    to_throw = exc
        except GeneratorExit:
            call._end(None, check_budget=False)
            raise
        except BaseException as exc:  # noqa: B036
            call._end(exc)
            raise
        call._end(None)

    return watched_async_generator


class _Unended:
    """Watches that began and have not ended; at exit each says so on stderr."""

    def __init__(self) -> None:
        self._watches: dict[int, Watch] = {}
        self._registered = False

    def watch_began(self, watch: Watch) -> None:
        self._watches[id(watch)] = watch
        self.register()

    def register(self) -> None:
        """Registers `at_exit` (once) with the process's atexit: `run_script` does before it takes the program's
        registrations, so that a watch begun inside the program is not said to be unended at the program's end."""
        if not self._registered:
            import atexit

            self._registered = True
            atexit.register(self.at_exit)

    def watch_ended(self, watch: Watch) -> None:
        self._watches.pop(id(watch), None)

    def at_exit(self) -> None:
        for watch in list(self._watches.values()):
            syncs = watch._syncs_so_far()
            where = watch._where
            if isinstance(where, tuple):
                where = f"{_display_path(where[0])}:{where[1]}"
            print(f"syncfree: the watch of {where} never ended (the program exited "
                  f"inside it); {syncs} sync{'s' if syncs != 1 else ''} seen in it were not "
                  "reported", file=sys.stderr)
        self._watches.clear()


_unended = _Unended()


def _predict_activity() -> tuple[int, int]:
    """(CUDA work, host-only calls) of predict mode's stand-ins so far (VirtualCudaRegistry.activity)."""
    registry = getattr(sys.modules.get("syncfree.capture.predict.registry"), "_registry", None)
    return registry.activity() if registry is not None else (0, 0)


def _running_recorder():
    """The recorder already recording this thread or task, if any."""
    dispatch = sys.modules.get("syncfree.capture.dispatch")
    return None if dispatch is None else dispatch.owner_here()


def _split_allowed(sites) -> tuple[list[SyncSite], list[SyncSite]]:
    kept, allowed = [], []
    for site in sites:
        line = linecache.getline(site.file, site.line) if site.file else ""
        (allowed if line and allowed_by_comment(line, site.kind, site.rule) else kept).append(site)
    return kept, allowed


def child_settings(engine: Engine, measure_blocked: bool, max_frames: int) -> dict[str, Any] | None:
    """How a child process started under a watch or a ``%%syncfree`` cell watches its target
    (syncfree.processes.SpawnedTarget): the engine's mode (error mode's stand-in stops at the first sync as well),
    engine, measure_blocked and max_frames; None: the static engine, nothing to run children under."""
    if engine.mode == "static":
        return None
    return {"mode": "error" if getattr(engine, "stop_at_first", False) else engine.mode,
            "engine": engine.engine, "measure_blocked": measure_blocked, "max_frames": max_frames}


def end_children(recorder, before: dict[int, str] | None = None) -> None:
    """The child processes a cell's recorder followed (capture/threads.py): their reports, and notes on those
    without one, join what the recorder counts (`SyncRecorder.inherited_children`). ``before``: the children
    already running when the cell began (`syncfree.processes.running_children`), named in a note."""
    children, recorder.children = recorder.children, None
    if children is not None:
        reports, notes = children.end_watch()
        recorder.inherited_children.extend(reports)
        recorder.inherited_notes.extend(notes)
    if before:
        from .processes import earlier_children_note

        recorder.inherited_notes.append(earlier_children_note(before, "cell"))


def _watch_report(engine: Engine, recorder) -> WatchReport:
    kept, allowed = _split_allowed(recorder.sites)
    kept += recorder.inherited_sites()  # the children of the watches inside it (recorder.syncs counts them)
    fields = recorder.report_fields()
    # The recorder's note on syncs outside the cell's code is the report's own
    # "outside your code" line here, in the words of files rather than cells.
    notes = [n for n in fields["notes"] if "ran outside the cell's code" not in n]
    return WatchReport(recorder.mode, engine.device, _rank(kept), _rank(allowed),
                       recorder.syncs, recorder.wall_ms, engine.notes + notes + _unseen_libraries(engine),
                       recorder.error, fields.get("predict_table"), cost=fields.get("cost"))


def _unseen_libraries(engine: Engine) -> list[str]:
    """A note when debug mode ran and a library that calls CUDA without torch was imported
    meanwhile (a script's ``import cupy``): its syncs were not seen, never silently."""
    if engine.engine != "debug" or engine.mode not in ("warn", "error"):
        return []
    from .capture.engines import unseen_note

    note = unseen_note(engine.libraries)
    return [note] if note else []


def watch(mode: str | None = None, *, budget: int | None = None, measure_blocked: bool = True,
          max_frames: int = 4, paths: Sequence[str] = (), engine: str | None = None,
          all_threads: bool = False,
          on_report: Callable[[WatchReport], Any] | None = None,
          cost: bool = False, budget_ms: float | None = None) -> Watch:
    """``with syncfree.watch() as w:`` (or ``@syncfree.watch()``): record every sync of the
    block in this thread or task (``all_threads=True``: every thread); ``w.report``
    afterwards, also ``on_report(report)``. As a decorator each call's report is the
    function's ``syncfree_report`` (see `Watch`). Without CUDA the block runs in predict
    mode. ``cost=True``: measure what each sync costs, the GPU time it loses (a GPU trace;
    sites are then ranked by it); ``budget_ms``: a budget in ms of GPU time lost (implies cost)."""
    return Watch(mode, budget=budget, measure_blocked=measure_blocked, max_frames=max_frames,
                 paths=paths, engine=engine, all_threads=all_threads, on_report=on_report,
                 cost=cost, budget_ms=budget_ms)


def sync_free(budget: int | None = 0, *, mode: str | None = None, measure_blocked: bool = True,
              max_frames: int = 4, paths: Sequence[str] = (), engine: str | None = None,
              all_threads: bool = False,
              on_report: Callable[[WatchReport], Any] | None = None,
              cost: bool = False, budget_ms: float | None = None) -> Watch:
    """``with syncfree.sync_free():`` raise `SyncError` at the end of the block when it
    synchronized more than ``budget`` times, listing every site. Also a decorator
    (functions, generators, async functions; see `Watch`). Without CUDA the block runs in
    predict mode, so a CPU-only CI checks GPU code; a block whose torch calls all ran on CPU
    tensors, with no CUDA stand-in seen (tensors made before it with ``"cuda" if
    torch.cuda.is_available() else "cpu"``), cannot be judged there and raises `NotJudged` (a
    `SyncError`) rather than pass: choose the device inside the block, or run the program
    under ``syncfree run``. ``budget_ms``: also raise when its syncs
    lost more than that many ms of GPU time (measured on a GPU; ``budget=None`` with it: the
    time budget alone); without a GPU the time is not measured and the report says so."""
    return Watch(mode, budget=budget, measure_blocked=measure_blocked, max_frames=max_frames,
                 paths=paths, engine=engine, all_threads=all_threads, on_report=on_report,
                 cost=cost, budget_ms=budget_ms)


# --------------------------------------------------------------------------- scripts


@dataclass
class ScriptRun:
    """A program run by `run_script`: its exit status and what it synchronized.

    ``children``: a `syncfree.processes.ProcessReport` for each forked child that ended (a DataLoader or Pool
    worker, an ``os.fork()``), ``notes`` what the run could not see (children without a report);
    ``hard_exit``: the program ended with ``os._exit``, or replaced itself with ``os.exec*`` (``replaced_by``: the
    new program's command).
    """

    path: str
    exit_code: int
    report: WatchReport
    error: BaseException | None = None  # the exception that ended the script, if any
    children: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hard_exit: bool = False
    replaced_by: list[str] | None = None
    earlier: dict | None = None  # syncfree run: the report of the program this one replaced (os.exec*, followed)
    replaced_env: Any = None  # the environment the program gave the one that replaces it (None: its own)
    signal: int | None = None  # the signal that ended the program (SIGTERM): the process dies of it once reported


class ModuleNotRunnable(ImportError):
    """``run_script(name, module=True)``: no module of that name to run (``python -m`` says so in one line)."""


def run_script(path: str, argv: Sequence[str] = (), *, mode: str | None = None,
               measure_blocked: bool = True, max_frames: int = 4,
               on_error: Callable[[BaseException], None] | None = None, module: bool = False,
               source: bytes | str | None = None,
               on_exit: Callable[[ScriptRun], None] | None = None,
               engine: str | None = None, pass_rules: Sequence[str] = (), cost: bool = False) -> ScriptRun:
    """Run a program as ``python path argv...`` would, under the engine: ``path`` a script
    file, ``"-"`` the code in ``source`` (default: read from stdin, as ``python -``) or,
    with ``module=True``, a module name (``python -m path``).

    As Python does: ``sys.argv[0]`` is the path as given ("-", or the module's file for
    ``-m``), ``__main__`` is the program, the script's folder (``-m``: the working
    directory) comes first on ``sys.path``, and after the program's end the threads it
    started are joined and its ``atexit`` handlers run, still inside the watch (their
    syncs are counted); multiprocessing's children of the run are ended as at Python's
    exit. Forked children (``os.fork``, DataLoader and Pool workers) stay watched, and
    multiprocessing's children started as new interpreters (spawn, forkserver) watch their
    targets as this run does; each reports apart (``children``, `syncfree.processes`). Afterwards the working directory,
    ``sys.argv``, ``sys.path``, ``__main__`` and the standard streams are as before.

    The exit status is what Python's would be: 0, the ``SystemExit`` code, 1 for an
    uncaught exception (130 for KeyboardInterrupt), whose traceback goes to ``on_error``
    (default: printed to stderr as Python prints it, before the atexit handlers run). ``os._exit(n)`` in the program
    ends this process too, as it would Python's: ``on_exit`` gets the run first. A file
    that cannot be read or compiled raises OSError or SyntaxError before anything runs; a
    module that cannot be found, `ModuleNotRunnable`. ``pass_rules``: rule codes whose syncs
    ``mode="error"`` records without stopping (a one-off ``model.to(device)``).

    torch is imported when the program imports it: the engine starts then, in the importing thread, before the
    program gets the module back (`_TorchImport`; at once when torch is already imported). A program that never
    imports it gets a report of mode "static" without an engine, whose note says that no torch code ran.
    """
    import builtins
    import signal
    import threading
    import types

    from .processes import ForkedChildren

    saved_cwd = os.getcwd()
    if module:
        code, filename, argv0, path0 = None, None, "-m", saved_cwd
    elif path == "-":
        if source is None:
            source = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        filename, argv0, path0 = "<stdin>", "-", ""
        code = compile(source, filename, "exec", dont_inherit=True)  # SyntaxError for the caller
        text = source if isinstance(source, str) else _decoded(source)
        # Lines for the recorder's attribution and for tracebacks (Python keeps none for stdin).
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    else:
        filename = os.path.abspath(path)  # __file__ and code filenames are absolute, as Python's (3.9+)
        with open(filename, "rb") as handle:  # OSError for the caller
            data = handle.read()
        code = compile(data, filename, "exec", dont_inherit=True)  # SyntaxError for the caller, before anything runs
        argv0, path0 = path, os.path.dirname(filename)
    saved = (sys.argv, list(sys.path), sys.modules.get("__main__"), sys.stdin, sys.stdout, sys.stderr,
             sys.modules.get("__mp_main__"))
    sys.argv = [argv0, *argv]
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    exit_code, failure = 0, None
    # ``engine="auto"`` reads the program's imports (import cupy: the CUPTI engine).
    program_text = "" if module else text if path == "-" else _decoded(data)

    def new_runner() -> Watch:
        return Watch(mode, measure_blocked=measure_blocked, max_frames=max_frames, all_threads=True,
                     engine=engine, sources=(program_text,), cost=cost)

    # A program that has not imported torch yet is watched from its import of torch on (`_TorchImport`): nothing
    # syncs before it, and a program that never imports it runs as fast and small as under python.
    # Not for the CUPTI engine (asked for, or "auto" where the program imports a library that calls CUDA without
    # torch): it sees CUDA calls that no torch import comes before.
    later = "torch" not in sys.modules and _torch_installed() and not _cupti_wanted(engine, program_text)
    runner: Watch | None = None if later else new_runner()
    boundary, run_thread = sys._getframe(), threading.get_ident()
    began = perf_counter()
    exit_handlers = _ExitHandlers()
    threads_before = set(threading.enumerate())
    run: ScriptRun | None = None
    closed = []

    def close_watch(exc: BaseException | None) -> None:
        if not closed:  # once: os._exit may have closed it from inside the program
            closed.append(True)
            if runner is not None:
                runner.__exit__(type(exc) if exc is not None else None, exc,
                                exc.__traceback__ if exc is not None else None)

    def finish(status: int, error: BaseException | None, hard: bool) -> ScriptRun:
        exit_handlers.remove()
        children.stop()
        reports, notes = children.collect()
        children.remove_folder()
        if runner is None:  # torch never imported: no torch code ran
            report = _report_without_torch(round((perf_counter() - began) * 1000.0, 3), libraries_before)
            if "torch" in sys.modules:  # imported past the hook (a finder of the program's own found it first)
                report.notes[:] = ["torch was imported by a finder of the program's own, past syncfree's import "
                                   "hook: no sync of this process was watched"]
        else:
            assert runner.report is not None
            report = runner.report
        return ScriptRun(filename or path, status, report, error, reports, notes, hard)

    def configure(watch: Watch) -> None:
        """What the run sets on its recorder once it runs (at the start, or at the program's import of torch)."""
        recorder = watch._recorder
        children.collector = watch
        children.watch_settings = watch.child_settings()
        if recorder is None:
            return
        if filename == "<stdin>":
            _attribute_to(filename, recorder)
        if pass_rules:
            recorder.passes_rules = frozenset(pass_rules)
        if recorder.mode == "predict":
            # Torch function modes are per thread: each thread the program starts, daemon threads too (the
            # process ends with the run), runs in a predict session of its own that reports to the run's
            # recorder, as debug mode on a GPU sees every thread's syncs (capture/threads.py).
            recorder.predicts_threads = True
        if children.in_child:  # a forked child that imports torch itself: its syncs from here are its report's
            children.recorder_started(recorder)

    start_lock = threading.Lock()

    def start_at_torch_import() -> None:
        # In the thread that imports torch, before the importer gets it back: the engine and mode are chosen now
        # (cuda_available() needs torch), and the program's first torch call already runs under the watch.
        nonlocal runner
        with start_lock:
            if runner is not None or closed:
                return
            watch = new_runner()
            # A library calling CUDA without torch that the program imported before torch was imported during the
            # run all the same: debug mode's note on the syncs it did not see names it (engines.unseen_note).
            watch.engine.libraries = libraries_before
            in_run_thread = threading.get_ident() == run_thread
            try:
                # Another thread's stack never passes through run_script's frame: its own frame bounds nothing.
                watch._begin(boundary if in_run_thread else sys._getframe())
                runner = watch  # before the route: close_watch ends it
                if in_run_thread:
                    watch._resume()
            except BaseException:  # noqa: B036 (an interrupt half way: nothing left running)
                watch._abandon()
                runner = None
                raise
            if watch.engine.mode == "predict":
                # Torch function modes are per thread: the threads running now, but for this one, go on without
                # the stand-ins (a thread's mode is entered in that thread only).
                here = threading.current_thread()
                running = [t.name for t in threading.enumerate() if t is not here and t.is_alive()
                           and (t not in threads_before or t.ident == run_thread)]
                if running:
                    watch.engine.notes.append(
                        f"torch was first imported in thread {here.name!r} while {_names_of(running)} ran: predict "
                        "mode's stand-ins run in it and in the threads started from then on, not in those (their "
                        "CUDA work is not predicted)")
            configure(watch)

    from .capture import engines

    libraries_before = tuple(engines.bypassing_libraries())
    if later:
        child_watch = {"mode": mode, "engine": engine, "measure_blocked": measure_blocked, "max_frames": max_frames}
    else:
        child_watch = runner.child_settings()

    def hard_exit(status: int, replaced_by: list[str] | None = None, env: Any = None,
                  signum: int | None = None) -> int | None:
        # os._exit in the program, an os.exec* that replaces it, or a signal that kills it (SIGTERM): no thread
        # joined, no atexit handler (Python runs none), only the report.
        close_watch(None)
        if on_exit is not None:
            ended = finish(status, None, True)
            ended.replaced_by, ended.replaced_env, ended.signal = replaced_by, env, signum
            return on_exit(ended)
        return None

    term_held: list[float] = []  # when a SIGTERM that landed in the engine was first held back

    def terminated(signum: int, frame: Any) -> None:
        # SIGTERM with Python's default action: the process dies at once, without finally blocks or atexit
        # handlers. Here the report is written first (as at os._exit), then the process dies of the signal.
        if children.in_child:  # a forked child inherited this handler: it reports as a child does
            children._terminated(signum, frame)
            return
        import time

        now = time.monotonic()
        if interrupts.in_engine(frame) and (not term_held or now - term_held[0] < interrupts.MAX_HOLD_S):
            # In the engine's own code (a recorder's lock may be held): raised again a moment later, where the
            # program is then (as interrupts.py does for Ctrl-C).
            term_held[:1] = term_held[:1] or [now]
            interrupts.rearm_later(signum)
            return
        signal.signal(signum, signal.SIG_IGN)  # once: a second SIGTERM while the report is written waits for it
        try:
            hard_exit(128 + signum, signum=signum)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a stream the program closed
                    pass
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    # A child started as a new interpreter (spawn, forkserver) watches its target as this run does: with the mode
    # and engine asked for until torch is imported here (the child chooses as this process would), then as chosen.
    children = ForkedChildren(_running_recorder, on_parent_exit=hard_exit, watch_settings=child_watch,
                              collector=runner)
    torch_import = _TorchImport(start_at_torch_import) if later else None
    try:
        if runner is not None:
            runner.__enter__()
        try:
            if runner is not None:
                configure(runner)
            children.start()  # followed from the start: a child started before torch is imported is watched too
            _unended.register()
            exit_handlers.install()
            if on_exit is not None and threading.current_thread() is threading.main_thread() \
                    and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, terminated)  # the program's own handler, if it sets one, replaces it
            if torch_import is not None:
                torch_import.install()
            try:
                if module:
                    sys.modules["__mp_main__"] = _MainAlias("__mp_main__")  # runpy makes the module: see _MainAlias
                    _run_module(path)
                else:
                    main = types.ModuleType("__main__")
                    main.__dict__.update(__file__=filename, __builtins__=builtins, __spec__=None,
                                         __package__=None, __loader__=_loader(filename))
                    # multiprocessing's alias of the main module (Lib/multiprocessing/__init__.py sets it when it is
                    # imported, here: syncfree's launcher): a spawned child runs the script as __mp_main__, and the
                    # objects of its classes come back pickled under that name.
                    sys.modules["__main__"] = sys.modules["__mp_main__"] = main
                    exec(code, main.__dict__)
            except SystemExit as exc:
                exit_code = _exit_status(exc.code)
            except ModuleNotRunnable:
                raise
            except (Exception, KeyboardInterrupt) as exc:
                # Python's end for an uncaught exception: sys.excepthook (the traceback, or the program's own
                # hook), then the rest below; Ctrl-C's status is 130, and `syncfree run` then dies by SIGINT as
                # Python does (what ran so far is reported first).
                exit_code, failure = (130 if isinstance(exc, KeyboardInterrupt) else 1), exc
                if isinstance(exc, KeyboardInterrupt):
                    interrupts.cut_handler_frames(exc)  # raised by the engine's SIGINT handler: not the program's
                (on_error or _uncaught)(exc)
            # What Python does after the main module: join the non-daemon threads, run the atexit
            # handlers (Lib/threading.py _shutdown, Modules/atexitmodule.c), end multiprocessing's children.
            _join_threads(threads_before)
            exit_handlers.run()
            if children.in_child:
                # A forked child that ran to the program's end (a plain os.fork()): its report, then its exit
                # as Python's, with the status the program gave it.
                children.finish_child(exit_code)
                # Its copy of the engine ends with it, undone by nothing: restoring torch's state here would
                # touch CUDA, which cannot follow a fork.
                closed.append(True)
                if runner is not None:
                    _unended.watch_ended(runner)  # reported with the child's report: not a watch left unended
                raise SystemExit(exit_code)
            children.end_children()
        except BaseException as exc:
            close_watch(exc)
            raise
        close_watch(failure)
        run = finish(exit_code, failure, False)
    finally:
        if torch_import is not None:
            torch_import.remove()
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        exit_handlers.remove()
        children.stop()
        children.remove_folder()
        _restore(saved, saved_cwd)
    return run


def _names_of(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"thread{'s' if len(names) != 1 else ''} {shown}"


def _torch_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


#: The note of a run whose program never imported torch.
NO_TORCH = "no torch code ran: the program never imported torch, so its process made no sync"


def _cupti_wanted(engine: str | None, program_text: str) -> bool:
    """Whether a run may use the CUPTI engine, which sees syncs without torch: asked for, or chosen by "auto" for a
    program that imports a library calling CUDA without torch (capture/engines.py)."""
    from .capture import engines

    requested = engines.check_engine(engine)
    return requested == "cupti" or (requested == "auto" and bool(engines.bypassing_libraries([program_text])))


def _report_without_torch(wall_ms: float, libraries_before: Sequence[str]) -> WatchReport:
    """The report of a program that never imported torch (run_script started no engine for it); a library that
    calls CUDA without torch imported meanwhile (``import_module``, unseen in the program's text) is named: its
    syncs were not watched."""
    from .capture.engines import bypassing_libraries
    from .report import device_info

    notes = [NO_TORCH]
    new = [name for name in bypassing_libraries() if name not in set(libraries_before)]
    if new:
        notes = [f"no torch code ran: the program never imported torch; {', '.join(new)}, imported during the run, "
                 f"call{'s' if len(new) == 1 else ''} CUDA without torch, and no engine watched "
                 f"{'its' if len(new) == 1 else 'their'} syncs "
                 "(--engine cupti does)"]
    return WatchReport("static", device_info("none", "torch not imported"), [], [], 0, wall_ms, notes)


class _TorchImport:
    """A ``sys.meta_path`` finder that calls ``on_import`` in the thread that imports torch, once torch's own
    ``__init__`` has run and before the importer gets the module back (``import torch``, ``from torch import nn``,
    ``import torch.nn``: each imports the package first). It finds torch through the finders after it and wraps
    only the loader's ``exec_module``; the module's ``__loader__`` and ``__spec__.loader`` are the real loader."""

    def __init__(self, on_import: Callable[[], None]) -> None:
        self.on_import = on_import

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        self.remove()  # once: the import of torch from now on is Python's own
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _LoaderThen(spec.loader, self.on_import)
        return spec


class _LoaderThen:
    """``loader``, whose ``exec_module`` calls ``then()`` after the module's code has run (`_TorchImport`)."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec: Any) -> Any:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.then()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _ExitHandlers:
    """The program's ``atexit`` registrations, kept to run when the program ends (last registered first, as
    Python does) rather than at this process's exit, after the watch."""

    def __init__(self) -> None:
        import atexit

        self._atexit = atexit
        self._real = (atexit.register, atexit.unregister)
        self.handlers: list[tuple[Callable, tuple, dict]] = []

    def install(self) -> None:
        self._atexit.register, self._atexit.unregister = self.register, self.unregister

    def remove(self) -> None:
        if self._atexit.register == self.register:
            self._atexit.register, self._atexit.unregister = self._real

    def register(self, func: Callable, *args: Any, **kwargs: Any) -> Callable:
        self.handlers.append((func, args, kwargs))
        return func

    def unregister(self, func: Callable) -> None:
        self.handlers = [h for h in self.handlers if h[0] != func]
        self._real[1](func)

    def run(self) -> None:
        import traceback

        while self.handlers:
            func, args, kwargs = self.handlers.pop()
            try:
                func(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - as Python: printed, the exit status unchanged
                print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
                traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


def _run_module(name: str) -> None:
    """``python -m name``, inside the watch (a package's ``__init__`` runs under it too)."""
    import importlib.util
    import runpy

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as error:
        raise ModuleNotRunnable(f"no module named {name!r} ({error})") from None
    if spec is None:
        raise ModuleNotRunnable(f"no module named {name!r}")
    if spec.submodule_search_locations is not None and importlib.util.find_spec(f"{name}.__main__") is None:
        raise ModuleNotRunnable(f"{name!r} is a package without a __main__ module: it cannot be run")
    runpy.run_module(name, run_name="__main__", alter_sys=True)  # sys.argv[0]: the module's file, as -m sets it


def _loader(filename: str) -> Any:
    if filename.startswith("<"):
        return None
    from importlib.machinery import SourceFileLoader

    return SourceFileLoader("__main__", filename)


def _decoded(data: bytes) -> str:
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", "replace")


def _attribute_to(filename: str, recorder: Any) -> None:
    """Count the syncs of code compiled under ``filename`` ("<stdin>") as the user's: file attribution leaves out
    code without a file."""
    files = getattr(recorder, "_cell_files", None)
    if isinstance(files, dict):
        files[filename] = 0


def _join_threads(before: set) -> None:
    import threading

    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread not in before and thread is not current and not thread.daemon:
            thread.join()


def _restore(saved: tuple, cwd: str) -> None:
    argv, path, main, stdin, stdout, stderr, mp_main = saved
    for name, stream in (("stdout", stdout), ("stderr", stderr)):
        current = getattr(sys, name)
        if current is not stream:  # the program's own stream (a tee to a log file): flushed as at exit
            try:
                current.flush()
            except Exception:  # noqa: BLE001 - a closed or broken replacement
                pass
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    sys.argv = argv
    sys.path[:] = path
    if main is not None:
        sys.modules["__main__"] = main
    if mp_main is not None:
        sys.modules["__mp_main__"] = mp_main
    else:
        sys.modules.pop("__mp_main__", None)
    try:
        os.chdir(cwd)
    except OSError:  # the folder is gone
        pass


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # as Python does for sys.exit("message")
    return 1


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


class _MainAlias(types.ModuleType):
    """``sys.modules["__mp_main__"]`` while ``python -m``'s program runs: runpy makes its ``__main__`` module, so the
    alias reads whatever ``__main__`` is (pickle looks a class up with getattr)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.modules["__main__"], name)


def _uncaught(exc: BaseException) -> None:
    """An exception that ended the program, shown as Python shows it: through ``sys.excepthook`` when the program
    set its own (with the traceback from the program's first frame on), else its traceback without syncfree's
    frames."""
    hook = sys.excepthook
    if hook is sys.__excepthook__ or hook is None:
        _print_traceback(exc)
        return
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)
                              or "runpy" in os.path.basename(tb.tb_frame.f_code.co_filename)):
        tb = tb.tb_next
    try:
        hook(type(exc), exc, tb)
    except BaseException as error:  # noqa: BLE001 - as Python: the hook's failure, then the original traceback
        print("Error in sys.excepthook:", file=sys.stderr)
        _print_traceback(error)
        print("\nOriginal exception was:", file=sys.stderr)
        _print_traceback(exc)


def _print_traceback(exc: BaseException) -> None:
    import traceback

    from .output import STDOUT_FOLLOWER

    # Without the frames of runpy and syncfree: the traceback starts at the program and ends
    # at the user's (or the library's) line that synced. The exception's own traceback is
    # left whole (the recorder describes it after the atexit handlers have run).
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    frames = list(shown.stack)
    while frames and (frames[0].filename.startswith(_PACKAGE_DIR)
                      or "runpy" in os.path.basename(frames[0].filename)):
        frames.pop(0)
    if is_sync_stop(exc):
        while frames and frames[-1].filename.startswith(_PACKAGE_DIR):
            frames.pop()
    elif frames and (frames[-1].filename, frames[-1].name) == STDOUT_FOLLOWER:
        frames.pop()  # the program's print() failed in the stream's own write, under `run`'s line-end follower
    shown.stack = traceback.StackSummary.from_list(frames)
    print("".join(shown.format()), end="", file=sys.stderr)
