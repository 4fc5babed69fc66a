"""The watch API: ``syncfree.watch()`` and ``syncfree.sync_free()`` (a block, or each call of a decorated function,
generator or async function, under the engine), their `WatchReport` and their verdicts (`SyncError`, `NotJudged`).

    with syncfree.watch() as w:            # warn mode with CUDA, predict mode without
        train_step()
    print(w.report.text())                 # train.py:41: `.item()` ×64, blocked 3.1 ms, SF101

    with syncfree.sync_free(budget=0):     # raises SyncError at the end, listing every site
        train_step()

The engine is chosen in ``engine_choice.py``; the child processes a block starts are followed by ``processes.py``,
which starts their watches through the `ChildWatch` pickled with their targets. The pytest plugin, ``syncfree run``
(``script_run.py``) and the public API in ``syncfree/__init__.py`` are glue over this module.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from .allow import allowed_by_comment
from .capture import interrupts
from .capture.notes import NOT_JUDGED  # the line of a block predict mode could not judge (NotJudged)
from .capture.sites import MAX_FRAMES, SyncSite, UserFiles, rank_key
from .engine_choice import Engine, choose_engine, cuda_available, is_sync_stop, new_recorder, unseen_libraries
from .processes import ForkedChildren

__all__ = ["ChildWatch", "NotJudged", "SyncError", "Watch", "WatchReport", "check_cost_budget", "check_verdict",
           "child_settings", "sync_free", "watch"]


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
    # The syncs at sites past the report's limit (the recorder's, MAX_SITES): counted in ``syncs`` only, said in a note
    overflow: int = 0
    # Predict mode: the block's torch calls on host tensors alone (a CPU tensor's op; with CUDA work too, a device
    # chosen where CUDA was not available may be behind them)
    host_calls: int = 0

    def __post_init__(self) -> None:
        from .report import settle_device

        settle_device(self.device)

    @property
    def outside(self) -> int:
        """The syncs that no site holds: no line of the user's code was on their stack (a library's or another
        thread's), apart from those past the sites' limit (``overflow``)."""
        return max(self.syncs - sum(s.count for s in self.sites + self.allowed) - self.overflow, 0)

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
    def lost_children(self) -> list[str]:
        """The notes on child processes whose syncs are not in the report (`syncfree.processes.LostChild`: killed,
        still running, unwatched): with any, the report's count is short by an unknown number."""
        from .processes import lost_children

        return lost_children(self.notes)

    @property
    def predicted(self) -> bool:
        return self.mode == "predict"

    def site_line(self, site: SyncSite) -> str:
        """One site in the layout of every text surface (`syncfree.output.text_line`)."""
        from .output import watch_site_line

        return watch_site_line(site)

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
        from .output import watch_report_text

        return watch_report_text(self)

    def predict_table_lines(self) -> list[str]:
        """Calls predict mode had no measurement for; the table's torch version if it
        differs from the installed one (output.predict_table_lines)."""
        from .output import predict_table_lines

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
        if report.outside > 0:
            from .output import outside_line

            lines.append(f"  {outside_line(report.outside)}")
        if report.overflow:
            lines.append(f"  {report.overflow} sync{'s' if report.overflow != 1 else ''} at sites beyond the "
                         f"first {len(report.sites) + len(report.allowed)}")
        super().__init__("\n".join(lines))


class NotJudged(SyncError):
    """Raised by `sync_free` (and the pytest marker) in predict mode, within the budget, when the block's torch
    calls ran on CPU tensors only and no CUDA stand-in was seen: the tensors were made before the block with the
    device chosen on this CPU-only machine (``"cuda" if torch.cuda.is_available() else "cpu"``), and on a GPU
    they would be CUDA tensors whose syncs nothing predicted. Not a pass: choose the device, or make the tensors,
    inside the block (predict mode answers ``torch.cuda.is_available()`` with True there), or run the program
    under ``syncfree run``; with a CUDA device the block is measured.

    Also raised, on a GPU too, when a child process the block started left no report (``lost``: the notes that
    name them): its syncs are missing from the count, and a pass on that count could pass a block that synced."""

    def __init__(self, report: WatchReport, budget: int, lost: list[str] | None = None) -> None:
        self.report = report
        self.budget = budget
        self.budget_ms = None
        if lost:  # child processes whose syncs are not counted: the count is short by an unknown number
            shown = "; ".join(lost[:3]) + (f"; and {len(lost) - 3} more" if len(lost) > 3 else "")
            AssertionError.__init__(self, f"could not judge the block: {report.counted} "
                                          f"sync{'s' if report.counted != 1 else ''} counted, but {shown}")
            return
        AssertionError.__init__(self, f"could not judge the block: {NOT_JUDGED}; choose the device (or make the "
                                      "tensors) inside it (a test: in the test or a fixture), or run the program "
                                      "under `syncfree run`")


def check_verdict(report: WatchReport, budget: int) -> None:
    """The verdict of a block with a budget (`sync_free`, the pytest marker): `SyncError` when it synchronized
    more than ``budget`` times, `NotJudged` when predict mode could not judge it or a child process's syncs are
    missing from the count (it was killed, still ran, ran unwatched), else nothing: a pass is never given on a count
    known to be short."""
    __tracebackhide__ = True
    if report.counted > budget:
        raise SyncError(report, budget)
    if not report.judged:
        raise NotJudged(report, budget)
    lost = report.lost_children
    if lost:
        raise NotJudged(report, budget, lost)


def _judged_through(exc: BaseException) -> bool:
    """Whether a block that ended by raising ``exc`` still gets its verdict, as ``pytest.warns`` still checks its
    block through an exception (``with pytest.raises(ValueError): with sync_free(): ...`` passed a block that
    synced before it raised): an `Exception`, and a ``sys.exit()`` that ends the program well (``with sync_free():
    sys.exit(main())``). Not an interrupt, a failing exit, pytest's outcomes (BaseExceptions), a verdict already
    given (an inner block's `SyncError`) nor error mode's stop at a sync, which is the verdict. A generator's block
    around its ``yield`` that its consumer closed early (``GeneratorExit``: a ``break``, ``g.close()``) is judged:
    the syncs it made passed with no word (a decorated generator's own watch is judged only when exhausted)."""
    if isinstance(exc, SystemExit):
        return exc.code is None or exc.code == 0
    if isinstance(exc, GeneratorExit):
        return True
    if not isinstance(exc, Exception) or isinstance(exc, SyncError):
        return False
    return not is_sync_stop(exc)


def _over_budget_through(report: WatchReport, exc: BaseException, budget: int | None, budget_ms: float | None) -> None:
    """The verdict of a block that raised ``exc`` (`_judged_through`): `SyncError` (its context ``exc``) where it
    synchronized over its budget, counts or GPU time; nothing else: a count it could not judge (`NotJudged`) does not
    replace the program's own exception."""
    __tracebackhide__ = True
    error = None
    if budget is not None and report.counted > budget:
        error = SyncError(report, budget)
    elif budget_ms is not None and report.counted_cost_ms is not None and report.counted_cost_ms > budget_ms:
        error = SyncError(report, None, budget_ms)
    if error is None:
        return
    add_note = getattr(error, "add_note", None)  # Python 3.11+
    if add_note is not None:
        add_note("the generator was closed before its end (GeneratorExit): the syncs its block made are judged"
                 if isinstance(exc, GeneratorExit) else
                 f"the block raised {type(exc).__name__} too (above): the syncs it made before are judged")
    raise error


def check_cost_budget(report: WatchReport, budget_ms: float) -> None:
    """`SyncError` when the block's syncs (but the allowed ones) lost more than ``budget_ms`` of GPU time;
    nothing when the cost was not measured (the report's notes say so)."""
    __tracebackhide__ = True
    lost = report.counted_cost_ms
    if lost is not None and lost > budget_ms:
        raise SyncError(report, None, budget_ms)

# --------------------------------------------------------------------------- watch

_ENTERING = threading.Lock()  # a watch's check that it is not running, and its mark that it is being entered


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
        if mode == "error" and budget:
            raise ValueError(f"mode='error' stops at the first sync, so budget={budget} cannot allow any: leave the "
                             "mode out to count the syncs against the budget")
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
        # all_threads in predict mode: the user's threads already running are named (their CUDA work runs without the
        # stand-ins); syncfree run names those running at its import of torch itself
        self._names_earlier_threads = True
        self.on_report = on_report
        self.report: WatchReport | None = None
        self._recorder = None
        self._children_before: dict[int, str] = {}  # the multiprocessing children running when it began
        self._token = None                      # the dispatcher's routing of this context
        self._routed_before = None              # ... and what it routed to before
        self._running = False
        self._entering = False  # between __enter__'s check and _begin's end (`_ENTERING`)
        self._named_at_exit = False  # said at exit to have never ended (`unended`)
        self._started = 0.0
        self._where: str | tuple[str, int] = ""
        self._activity_before: tuple[int, int] | None = None  # predict mode: the stand-ins' activity before it
        self._delivered_to: Callable[..., Any] | None = None  # the decorated function
        self._parent: Watch | None = None  # the decorator's watch, for a call's watch

    # ------------------------------------------------------------------ with

    def __enter__(self) -> Watch:
        # Refused before anything is undone: a second entry (another thread sharing a module-level
        # `sync_free()`, a `with w:` inside `with w:`) abandoned the first one's recorder, whose block then
        # ended with no report and no verdict.
        with _ENTERING:
            if self._running or self._entering:
                raise RuntimeError("this watch is already running; make a new one")
            self._entering = True
        # The frame running the `with` (or the decorator's wrapper): every sync of the
        # block happens below it, so the recorder's stack keys stop there.
        try:
            self._begin(sys._getframe(1))
            self._resume()
        except BaseException:  # noqa: B036 (an interrupt half way: nothing left running)
            self._abandon()
            raise
        finally:
            self._entering = False
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
                    result = func(*args, **kwargs)
                # An async function or a generator behind a plain callable (an object's `async def __call__`, a
                # decorator's plain wrapper): its body runs after the call returned, so it gets a watch of its own
                # (the call's judged an empty body: a sync passed)
                if inspect.iscoroutine(result):
                    return _watched_awaitable(self._for_call(watched), result)
                if inspect.isgenerator(result):
                    return _watched_generator(self._for_call(watched), result)
                return result
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

    def child_settings(self) -> ChildWatch | None:
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
            if self.all_threads and self._activity_before is not None and self._names_earlier_threads:
                from .capture.threads import earlier_threads_note

                note = earlier_threads_note(recorder)
                if note:
                    recorder.note(note)
        self._running = True
        unended.watch_began(self)
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
        if not self._running or self._named_at_exit:
            # Named at exit as never ended: a decorated generator left open, closed as Python tears its modules
            # down, where the engine's undoing printed a traceback ("sys.meta_path is None")
            return
        recorder, self._recorder = self._recorder, None
        self._running = False
        unended.watch_ended(self)
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
            from .capture.threads import unfinished_note

            unfinished = unfinished_note(recorder)
            if unfinished is not None:
                recorder.note(unfinished)
            report = _watch_report(self.engine, recorder)
            before, self._activity_before = self._activity_before, None
            if before is not None:
                cuda, host = (now - then for now, then in zip(_predict_activity(), before))
                report.host_calls = host
                # plain CPU work only: a block without torch work has nothing to sync (children that synced, such as
                # a DataLoader's workers, did CUDA work: processes.merge_children judges the block again)
                if host and not cuda:
                    report.judged = False
                    report.notes.insert(0, NOT_JUDGED)
            # The child processes the block started: their syncs are its own, and those of the watches around it.
            children, recorder.children = recorder.children, None
            if children is not None and children.in_child:  # a child the block forked, at the block's end
                check_budget = False  # its syncs are its report's (end_watch writes it): the parent judges
            reports, notes = children.end_watch(recorder.handed_work_to) if children is not None else ([], [])
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

                report.notes.append(earlier_children_note(self._children_before, "block", recorder.handed_work_to))
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
        if not check_budget:
            return
        if exc is None:
            if self.budget is not None:
                check_verdict(report, self.budget)
            if self.budget_ms is not None:
                check_cost_budget(report, self.budget_ms)
        elif _judged_through(exc):
            _over_budget_through(report, exc, self.budget, self.budget_ms)

    def _abandon(self) -> None:
        """Undo a `_begin` that did not complete (no report)."""
        recorder, self._recorder = self._recorder, None
        token, self._token = self._token, None
        self._running = False
        unended.watch_ended(self)
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


def _in_this_thread(call: Watch, began_in: int) -> Any:
    """What a generator's body resumed in another thread than its watch began in (a prefetching thread consuming
    it) runs under: the watch's session there (predict mode's stand-ins are per thread: the body's syncs there were
    neither predicted nor named)."""
    recorder = call._recorder
    if recorder is None or threading.get_ident() == began_in:
        import contextlib

        return contextlib.nullcontext()
    return recorder.thread_session()


async def _watched_awaitable(call: Watch, coro: Any) -> Any:
    """``coro``, returned by a decorated plain callable, awaited under ``call``."""
    __tracebackhide__ = True
    with call:
        return await coro


def _watched_generator(call: Watch, gen):
    """Drive ``gen`` with ``call`` watching its body only: routed to the watch while the
    body runs, not while the consumer's code runs between two items."""
    __tracebackhide__ = True
    call._begin(sys._getframe())
    began_in = threading.get_ident()
    try:
        to_send, to_throw = None, None
        while True:
            call._resume()
            try:
                with _in_this_thread(call, began_in):
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
                if call._named_at_exit:  # closed as Python tears down (`_end`): the body is left as it is
                    raise
                call._resume()
                try:
                    with _in_this_thread(call, began_in):
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
            watch._named_at_exit = True  # ended later, if at all, as Python tears itself down: nothing to undo then
            syncs = watch._syncs_so_far()
            where = watch._where
            if isinstance(where, tuple):
                where = f"{_display_path(where[0])}:{where[1]}"
            print(f"syncfree: the watch of {where} never ended (the program exited "
                  f"inside it); {syncs} sync{'s' if syncs != 1 else ''} seen in it were not "
                  "reported", file=sys.stderr)
        self._watches.clear()


#: The watches of this process that began and have not ended (`syncfree run` registers its exit message early).
unended = _Unended()


def _predict_activity() -> tuple[int, int]:
    """(CUDA work, host-only calls) of predict mode's stand-ins so far (VirtualCudaRegistry.activity)."""
    registry = getattr(sys.modules.get("syncfree.capture.predict.registry"), "_registry", None)
    return registry.activity() if registry is not None else (0, 0)


def _split_allowed(sites) -> tuple[list[SyncSite], list[SyncSite]]:
    kept, allowed = [], []
    for site in sites:
        line = linecache.getline(site.file, site.line) if site.file else ""
        (allowed if line and allowed_by_comment(line, site.kind, site.rule) else kept).append(site)
    return kept, allowed


@dataclass(frozen=True)
class ChildWatch:
    """How a child process started under a watch, a ``%%syncfree`` cell or ``syncfree run`` watches its target:
    the mode and engine (asked for, or as chosen), measure_blocked and max_frames. ``syncfree.processes`` pickles it
    with the child's target (`SpawnedTarget`) and, in the child, starts the target's watch with `watch` (it needs no
    import of this module: the object names its class)."""

    mode: str | None
    engine: str | None
    measure_blocked: bool = True
    max_frames: int = 4

    def watch(self) -> Watch:
        """The child's watch, of every thread of the process (not yet entered)."""
        return Watch(self.mode, engine=self.engine, all_threads=True,
                     measure_blocked=self.measure_blocked, max_frames=self.max_frames)

    def follow_children(self) -> ForkedChildren:
        """The follower of the children a watch's (or a cell's) code starts, each watching its target as this says
        (capture/threads.py starts them through it)."""
        return ForkedChildren.for_watch(self)


def child_settings(engine: Engine, measure_blocked: bool, max_frames: int) -> ChildWatch | None:
    """How a child process started under a watch or a ``%%syncfree`` cell watches its target
    (syncfree.processes.SpawnedTarget): the engine's mode (error mode's stand-in stops at the first sync as well),
    engine, measure_blocked and max_frames; None: the static engine, nothing to run children under."""
    if engine.mode == "static":
        return None
    return ChildWatch("error" if getattr(engine, "stop_at_first", False) else engine.mode, engine.engine,
                      measure_blocked, max_frames)


def _watch_report(engine: Engine, recorder) -> WatchReport:
    kept, allowed = _split_allowed(recorder.sites)
    kept += recorder.inherited_sites()  # the children of the watches inside it (recorder.syncs counts them)
    fields = recorder.report_fields()
    # The recorder's note on syncs outside the cell's code is the report's own
    # "outside your code" line here, in the words of files rather than cells.
    notes = [n for n in fields["notes"] if "ran outside the cell's code" not in n]
    return WatchReport(recorder.mode, engine.device, _rank(kept), _rank(allowed),
                       recorder.syncs, recorder.wall_ms, engine.notes + notes + unseen_libraries(engine),
                       recorder.error, fields.get("predict_table"), cost=fields.get("cost"),
                       overflow=recorder.overflow_syncs)


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
