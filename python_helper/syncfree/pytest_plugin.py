"""The pytest plugin (entry point ``pytest11`` ``syncfree``; loaded automatically once
syncfree is installed, ``-p no:syncfree`` turns watching off while the marker and the
options stay known: `syncfree.pytest_marker`).

* ``@pytest.mark.sync_free`` fails a test whose body synchronizes, with every site in the
  failure message; ``@pytest.mark.sync_free(budget=2)`` allows two syncs,
  ``mode="error"`` stops at the first. On a ``unittest.TestCase`` the marker goes on the
  class (or ``pytestmark``) or the method, and the body is the test method. Without CUDA
  the test and its fixtures, of every scope, run on CPU stand-ins (predict mode), so
  ``device="cuda"`` in a fixture works on a CPU-only CI (`syncfree.pytest_worlds`).
* The ``syncfree`` fixture gives a `SyncfreeFixture`: ``syncfree.watch()`` and
  ``syncfree.sync_free()`` blocks for finer assertions.
* ``--syncfree`` watches every test and ranks their syncs in the terminal summary, failed
  tests included; syncs on lines a ``# syncfree: allow`` comment covers are listed apart,
  each with its comment, and left out of the totals, which say how many were allowed.
  Under pytest-xdist each test's sites travel with its report to the controller.

The logic is `syncfree.watches`' (and `syncfree.engine_choice`'s); this module only places it in pytest's run.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import Any

import pytest

from .pytest_marker import MARKER, add_marker, add_options, skip_own_entry_point
from .pytest_worlds import PLAIN, STANDINS, ChildProcesses, FixtureWorlds, Host, is_unittest_item, on_standins

# --syncfree-cuda (a suite's CUDA tests on CPU stand-ins): a plugin of its own.
pytest_plugins = ["syncfree.pytest_cuda"]

_SUMMARY_SITES = 20
_SHOWN_FAILED = 5
_SHOWN_ALLOWED = 10  # sites allowed by comments, listed apart
_SHOWN_NOTES = 10  # the notes of the watched tests' reports


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    skip_own_entry_point(__name__, plugin, manager)  # `-p syncfree.pytest_plugin` with the entry point installed


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)  # once: pytest_marker.py adds them when its entry point loaded first


def pytest_configure(config: pytest.Config) -> None:
    add_marker(config)
    state = config.stash[_STATE] = _State(config)
    config.pluginmanager.register(state, "syncfree-state")
    # A process a test on the stand-ins starts as a new interpreter runs on them too.
    children = ChildProcesses()
    children.install()
    config.add_cleanup(children.restore)


class _State:
    """The run's fixture worlds, and the watched tests' entries for the summary, taken
    from their reports (under pytest-xdist the controller's come from the workers)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.entries: list[tuple[str, dict]] = []  # (test id, summary entry)
        self.failed_on_standins: dict[str, None] = {}  # test ids, in the order of failure
        self.worlds = FixtureWorlds()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and getattr(report, "syncfree_standins", False):
            self.failed_on_standins[_shown_id(self.config, report.nodeid)] = None
        entry = getattr(report, "syncfree", None)
        if report.when == "call" and isinstance(entry, dict):
            self.entries.append((_shown_id(self.config, report.nodeid), entry))


_STATE = pytest.StashKey[_State]()
_STANDINS = pytest.StashKey[str | None]()  # how the test's stand-ins are placed, if any
_HOST = pytest.StashKey[Host | None]()  # the stand-ins open around a phase of the test
_WATCH = pytest.StashKey[Any]()  # the Watch of the test's body (its report once ended)
_SCALER_STEPS = pytest.StashKey[int]()  # pytest_cuda.scaler_steps_so_far as the watch began
_USED_BEFORE = pytest.StashKey[int]()  # the stand-ins' use count when the test started


def _marker_options(item: pytest.Item) -> dict | None:
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return None
    options = dict(marker.kwargs)
    if marker.args:
        options.setdefault("budget", marker.args[0])
    unknown = set(options) - {"budget", "mode", "budget_ms"}
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes budget=, budget_ms= and mode=, not "
                                f"{', '.join(sorted(unknown))}")
    budget_ms = options.get("budget_ms")
    if budget_ms is not None and (isinstance(budget_ms, bool) or not isinstance(budget_ms, (int, float))
                                  or not budget_ms >= 0):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(budget_ms=...) must be a number of "
                                f"milliseconds >= 0, not {budget_ms!r}")
    # Checked here, at collection, with the test named: a bad value reached the engine's
    # choice inside a hook, an INTERNALERROR of 59 lines (exit 3).
    mode = options.get("mode")
    if mode is not None and mode not in ("warn", "error", "predict"):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(mode=...) must be "
                                f"'warn', 'error' or 'predict', not {mode!r}")
    budget = options.get("budget", 0)
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(budget=...) must be a whole "
                                f"number >= 0, not {budget!r}")
    if mode == "error" and budget:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER}(mode='error') stops at the first sync, so "
                                f"budget={budget} cannot allow any: leave the mode out to count against the budget")
    return options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    worlds = config.stash[_STATE].worlds
    for item in items:  # a misspelled marker argument stops the run before any test
        _marker_options(item)
        how = item.stash[_STANDINS] = _standins_needed(item)
        worlds.enabled = worlds.enabled or how is not None


def _watched(item: pytest.Item) -> bool:
    # Test functions and TestCase methods; under --syncfree on a GPU doctests too (their
    # examples are the body: their syncs were in no total). Without CUDA a doctest keeps the
    # outcome it has without syncfree (no stand-ins: its examples print what the CPU build
    # gives). Items of other kinds (linters' items) run as without syncfree.
    if _is_doctest(item):
        if not item.config.getoption("syncfree"):
            return False
        from .engine_choice import choose_engine

        return choose_engine(item.config.getoption("syncfree_mode")).mode != "predict"
    return isinstance(item, pytest.Function) and (
        _marker_options(item) is not None or item.config.getoption("syncfree"))


def _is_doctest(item: pytest.Item) -> bool:
    doctest_module = sys.modules.get("_pytest.doctest")
    return doctest_module is not None and isinstance(item, doctest_module.DoctestItem)


def _standins_needed(item: pytest.Item) -> str | None:
    """How a watched test (or one that uses the ``syncfree`` fixture) runs its fixtures
    on CPU stand-ins, when predict mode is what its body will run under: ``"session"``,
    one predict session around set-up, call and tear-down (the call's watch nests in it
    and reports the call alone); ``"phases"``, one per phase (predict mode standing in
    for ``mode="error"``, whose call must stop at the first sync); None: no stand-ins."""
    if not (_watched(item) or "syncfree" in getattr(item, "fixturenames", ())):
        return None
    from .engine_choice import choose_engine

    options = _marker_options(item) or {}
    engine = choose_engine(options.get("mode") or item.config.getoption("syncfree_mode"))
    if engine.mode != "predict":
        return None
    return "phases" if engine.stop_at_first else "session"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    how = item.stash.get(_STANDINS, None)
    worlds = item.config.stash[_STATE].worlds
    worlds.current = STANDINS if how else PLAIN
    if how is not None:
        item.stash[_USED_BEFORE] = _standins_used()
    if how != "session":
        return (yield)
    # The frame that runs this hook's implementations (pluggy's _multicall) is above
    # every frame of the test's set-up, call and tear-down: chains stop below it.
    with on_standins(worlds, sys._getframe(1)) as host:
        item.stash[_HOST] = host
        try:
            return (yield)
        finally:
            item.stash[_HOST] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _under_standins(item, sys._getframe(1)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    return (yield from _under_standins(item, sys._getframe(1)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    __tracebackhide__ = True
    if _is_doctest(item) and _watched(item):
        # A doctest's examples are its body: watched as a test function's is.
        watch = item.stash[_WATCH] = _new_watch(item)
        with watch:
            _set_boundary(watch, sys._getframe(1))
            return (yield)
    if not is_unittest_item(item):
        return (yield)
    # A TestCase's call phase runs setUp, the test method and tearDown (unittest's
    # TestCase.run): setUp and tearDown are its fixtures, on the stand-ins like them;
    # the method is its body, watched.
    boundary = sys._getframe(1)
    if not _watched(item):
        return (yield from _under_standins(item, boundary))
    original = item.obj
    instance = item.instance
    # TestCaseFunction.runtest puts item.obj on the instance for a plain method; an async
    # one unittest looks up itself (_pytest/unittest.py), so it goes there too.
    item.obj = _watched_method(item, original)
    setattr(instance, item.name, item.obj)
    try:
        return (yield from _under_standins(item, boundary))
    finally:
        item.obj = original
        if item.name in vars(instance):  # runtest took it off again for a plain method
            delattr(instance, item.name)


def _under_standins(item: pytest.Item, boundary):
    """A phase of a watched test on the CPU stand-ins without CUDA, when the call's watch
    is not a host for it (``"phases"``: predict mode standing in for ``mode="error"``)."""
    if item.stash.get(_STANDINS, None) != "phases":
        return (yield)
    with on_standins(item.config.stash[_STATE].worlds, boundary) as host:
        item.stash[_HOST] = host
        try:
            return (yield)
        finally:
            item.stash[_HOST] = None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    request.config.stash[_STATE].worlds.key(fixturedef)
    return (yield)


def _new_watch(item: pytest.Item):
    from .pytest_cuda import scaler_steps_so_far
    from .watches import Watch

    item.stash[_SCALER_STEPS] = scaler_steps_so_far(item.config)
    options = _marker_options(item)
    # The cost (GPU time lost): asked for the run, or by a marker's budget in milliseconds.
    cost = bool(item.config.getoption("syncfree_cost", False)) or (options or {}).get("budget_ms") is not None
    mode = (options or {}).get("mode") or item.config.getoption("syncfree_mode")
    if mode == "error" and (options or {}).get("budget", 0):
        mode = None  # --syncfree-mode error stops at the first sync: a marker's budget of N counts them instead
    return Watch(mode, engine=item.config.getoption("syncfree_engine", None), cost=cost)


def _verdict(item: pytest.Item, report) -> None:
    """A marked test's verdict: over its budget of syncs (`check_verdict`), or with ``budget_ms`` where the cost was
    measured, over its budget of GPU time lost (and of syncs, if it gives ``budget`` too). Where no cost was
    measured (no GPU) the count budget decides as without ``budget_ms``: no pass on a number not measured."""
    __tracebackhide__ = True
    from .watches import check_cost_budget, check_verdict

    options = _marker_options(item)
    if options is None:
        return
    if report.predicted:  # CPU tensors beside the stand-ins, or a GradScaler disabled at import: no CUDA then?
        from .pytest_cuda import early_answer_note

        note = early_answer_note(item.config, item, report.host_calls, item.stash.get(_SCALER_STEPS, 0))
        if note is not None:
            report.notes.append(note)
    budget_ms = options.get("budget_ms")
    if budget_ms is not None and report.cost_ms is not None:
        if "budget" in options:
            check_verdict(report, int(options["budget"]))
        check_cost_budget(report, budget_ms)
        return
    if budget_ms is not None:
        report.notes.append(f"the budget of {budget_ms:g} ms of GPU time was not checked (no cost measured): "
                            "the count budget decides")
    check_verdict(report, int(options.get("budget", 0)))


def _budget(item: pytest.Item) -> int | None:
    options = _marker_options(item)
    return None if options is None else int(options.get("budget", 0))


def _host_suspended(item: pytest.Item):
    """In ``"phases"``, the call's error-mode watch is the recorder: the stand-ins a
    TestCase's setUp ran on are closed meanwhile."""
    host = item.stash.get(_HOST, None)
    if host is not None and item.stash.get(_STANDINS, None) == "phases":
        return host.suspended()
    import contextlib

    return contextlib.nullcontext()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    __tracebackhide__ = True
    if not _watched(pyfuncitem):
        return (yield)
    watch = pyfuncitem.stash[_WATCH] = _new_watch(pyfuncitem)
    try:
        with _children_of(watch), watch:
            _set_boundary(watch, sys._getframe(1))
            with _stop_at_the_test_line():
                result = yield
    except KeyboardInterrupt as exc:
        _interrupted(pyfuncitem, watch, exc)
        raise
    # SyncError over the budget; NotJudged: predict mode saw CPU tensors only
    _verdict(pyfuncitem, watch.report)
    return result


def _interrupted(item: pytest.Item, watch: Any, exc: KeyboardInterrupt) -> None:
    """Ctrl-C in a watched test: pytest makes no report of it, so its syncs until then were missing from the summary
    with nothing said. They join it, the test named as interrupted; and the KeyboardInterrupt that the engine's
    handler raised points at the test's line (pytest's "!!! KeyboardInterrupt" location), not at the handler."""
    from .capture import interrupts

    interrupts.cut_handler_frames(exc)
    state = item.config.stash.get(_STATE, None)
    report = getattr(watch, "report", None)
    if state is None or report is None:
        return
    item.stash[_WATCH] = None
    state.entries.append((_shown_id(item.config, item.nodeid) + " (interrupted)", _summary_entry(report)))


@contextlib.contextmanager
def _stop_at_the_test_line():
    """Error mode's stop at the first sync (``sync_free(mode="error")``) is raised inside syncfree (predict mode's
    hook, the recorder): its traceback ends at the test's line that synced, as in a notebook cell, not in the
    engine's frames."""
    try:
        yield
    except BaseException as exc:
        from .engine_choice import hide_engine_frames

        hide_engine_frames(exc)
        raise


@contextlib.contextmanager
def _children_of(watch):
    """The child processes the test starts are its own: forked ones stay watched, those started as new
    interpreters (``torch.multiprocessing.spawn``, how distributed tests start their ranks; a spawn Pool) watch
    their targets as the test is watched (syncfree.processes), and once the watch is over their syncs join the
    test's report, so that a ``sync_free`` verdict counts them. Entered before the watch, left after it."""
    from .processes import ForkedChildren, merge_children, running_recorder

    children = ForkedChildren(running_recorder, watch_settings=watch.child_settings(), collector=watch)
    children.start()
    try:
        yield
    finally:
        children.stop()
        try:
            reports, notes = children.collect()
        finally:
            children.remove_folder()
        report = watch.report
        if report is not None:  # the watch has ended: its children's syncs are the test's too
            merge_children(report, reports, notes)
        from .capture import threads

        if reports or notes:
            # ...and those of the run or cell around the test (pytest under syncfree run, pytest.main in a %%syncfree
            # cell or a watched block), which counts the test's own syncs: these children reported to this follower
            # alone (it stood in front of the run's while the test ran).
            threads.adopt_children(reports, notes, sys._getframe())


def _set_boundary(watch, frame) -> None:
    """Chains stop at ``frame`` (pluggy's caller of the test function, above the test
    and below the program that called pytest) rather than at the `with` in this module,
    which is a suspended generator's and so on no sync's stack."""
    recorder = getattr(watch, "_recorder", None)
    if recorder is not None:
        recorder.boundary = frame


def _watched_method(item: pytest.Item, method):
    """The TestCase's test method, run in a watch (the report kept on the item)."""

    def finish(watch) -> None:
        _verdict(item, watch.report)

    if inspect.iscoroutinefunction(method):  # IsolatedAsyncioTestCase awaits it
        @functools.wraps(method)
        async def watched_async(*args, **kwargs):
            __tracebackhide__ = True
            with _host_suspended(item):
                watch = item.stash[_WATCH] = _new_watch(item)
                with watch, _stop_at_the_test_line():
                    result = await method(*args, **kwargs)
                finish(watch)
            return result

        return watched_async

    @functools.wraps(method)
    def watched(*args, **kwargs):
        __tracebackhide__ = True
        with _host_suspended(item):
            watch = item.stash[_WATCH] = _new_watch(item)
            with _children_of(watch), watch, _stop_at_the_test_line():
                result = method(*args, **kwargs)
            finish(watch)
        return result

    return watched


def _summary_entry(report) -> dict:
    """What the summary needs of a test's `WatchReport`, as plain data that pytest-xdist
    carries from a worker to the controller with the test's report. Each site says
    whether a ``# syncfree: allow`` comment covers it (``allowed``, as `WatchReport.to_dict`
    says) and which comment (``allowed_by``); ``counted`` leaves allowed syncs out."""
    import linecache

    from .allow import comment_covering

    def entry(site, allowed: bool) -> dict:
        # one_off and first_ms: what the summary ranks by (syncfree.capture.sites.rank_key).
        data = {"text": report.site_line(site), "count": site.count, "blocked_ms": site.blocked_ms,
                "one_off": site.one_off, "first_ms": site.first_ms, "allowed": allowed, "cost_ms": site.cost_ms}
        if allowed:  # read where the test ran (the worker's files, under xdist)
            line = linecache.getline(site.file, site.line) if site.file else ""
            data["allowed_by"] = comment_covering(line, site.kind, site.rule) or "# syncfree: allow"
        return data

    sites = [entry(site, False) for site in report.sites] + [entry(site, True) for site in report.allowed]
    # The notes on the test's child processes, as plain text (one still running at the test's end, a Python program
    # run unwatched): the summary shows them; ``lost``: those on children that left no report, whose syncs are
    # missing from the count (the test was not judged).
    from .processes import ChildNote

    lost = report.lost_children
    return {"syncs": report.syncs, "counted": report.counted, "predicted": report.predicted,
            "sites": sites, "judged": getattr(report, "judged", True),
            "notes": [str(n) for n in report.notes if isinstance(n, ChildNote) and n not in lost],
            "lost": [str(n) for n in lost]}


_STANDINS_SECTION = (
    "This test ran in predict mode on the CPU (no CUDA device here): "
    "torch.cuda.is_available() answered True and its 'cuda' tensors were CPU tensors "
    "in place of CUDA ones, so any CUDA path in it ran, as on a GPU machine; plain "
    "pytest on this machine runs its CPU path.")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and item.stash.get(_STANDINS, None) is not None \
            and not _is_sync_error(call) and _touched_standins(item):
        # A failure on the stand-ins says so: the user compares it with a plain run that
        # passed on the CPU path. A section of the report (shown under the failure, as
        # captured output is; pytest-xdist carries report sections to the controller).
        # A SyncError is the verdict on the test's syncs, whose message says "predicted".
        # Only when the stand-ins answered the test (a CUDA query, a tensor on the device):
        # a test that never touched them failed as plain pytest fails it.
        report.sections.append(("syncfree: ran in predict mode, CPU tensors in place of CUDA ones",
                                _STANDINS_SECTION))
        report.syncfree_standins = True  # for the summary (the controller's, under xdist)
    if call.when != "call":
        return report
    from .watches import SyncError

    watch = item.stash.get(_WATCH, None)
    watch_report = getattr(watch, "report", None)  # also of a body that failed
    if watch_report is not None:
        # Taken by the test's own call report only: a subtest's (unittest's subTest,
        # pytest's subtests fixture) is made while the body, and its watch, still run.
        item.stash[_WATCH] = None
        # An attribute of the report: pytest-xdist serializes a report's attributes
        # (_pytest/reports.py, _report_to_json) and the controller's logreport gets it.
        report.syncfree = _summary_entry(watch_report)
        budget = _budget(item)
        if report.failed and not _is_sync_error(call) and budget is not None \
                and watch_report.counted > budget:
            # A marked test that synced over its budget and then failed for its own reason:
            # its error is the failure, and the syncs, a failure of their own, are under it.
            report.sections.append(("syncfree: the test also synchronized over its budget",
                                    str(SyncError(watch_report, budget))))
    # A SyncError is the test's finding, not a crash in the plugin: show its message
    # alone, as pytest shows an assertion, rather than a traceback into syncfree.
    if call.excinfo is not None and isinstance(call.excinfo.value, SyncError):  # not a stop: its traceback stays
        report.longrepr = f"syncfree: {call.excinfo.value}"
    return report


def _standins_used() -> int:
    from .capture.predict.patches import standins_used

    return standins_used()


def _touched_standins(item: pytest.Item) -> bool:
    """Whether the stand-ins answered the test since it started (`_USED_BEFORE`)."""
    before = item.stash.get(_USED_BEFORE, None)
    return before is None or _standins_used() > before


def _is_sync_error(call: pytest.CallInfo) -> bool:
    """Whether the test failed for its syncs: a `SyncError` (over its budget, not judged) or error mode's stop at
    its first sync (the verdict itself: neither a failure "on the stand-ins" nor one with syncs beside it)."""
    if call.excinfo is None:
        return False
    from .engine_choice import is_sync_stop
    from .watches import SyncError

    return isinstance(call.excinfo.value, SyncError) or is_sync_stop(call.excinfo.value)


def _shown_id(config: pytest.Config, nodeid: str) -> str:
    """The test's id as pytest's short summary shows it: its file relative to the
    working directory, then the rest of the node id."""
    import os

    path, sep, rest = nodeid.partition("::")
    try:
        shown = os.path.relpath(os.path.join(str(config.rootpath), path))
    except ValueError:  # another drive (Windows)
        return nodeid
    return f"{shown}{sep}{rest}" if sep else nodeid


class SyncfreeFixture:
    """What the ``syncfree`` fixture gives: blocks watched with the test's settings."""

    def __init__(self, mode: str | None) -> None:
        self.mode = mode

    def watch(self, **kwargs: Any):
        """``with syncfree.watch() as w:`` (see `syncfree.watch`)."""
        from .watches import Watch

        kwargs.setdefault("mode", self.mode)
        return Watch(**kwargs)

    def sync_free(self, budget: int = 0, **kwargs: Any):
        """``with syncfree.sync_free(budget=0):`` (see `syncfree.sync_free`)."""
        return self.watch(budget=budget, **kwargs)


@pytest.fixture
def syncfree(request: pytest.FixtureRequest) -> SyncfreeFixture:
    """Watch blocks of the test for host-device syncs::

        def test_step(syncfree):
            with syncfree.watch() as w:
                step()
            assert w.report.syncs == 0, w.report.text()
    """
    return SyncfreeFixture(request.config.getoption("syncfree_mode"))


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    from .capture.sites import rank_key

    state = config.stash.get(_STATE, None)
    if state is None or not config.getoption("syncfree"):
        return
    entries = state.entries
    write = terminalreporter.write_line
    terminalreporter.section("syncfree")
    # Syncs on lines a `# syncfree: allow` comment covers are shown apart and counted in no
    # total but their own, as `syncfree run` and WatchReport.text treat them.
    syncing = [(nodeid, e) for nodeid, e in entries if _counted(e)]
    total = sum(_counted(e) for _, e in entries)
    allowed = sum(e["syncs"] - _counted(e) for _, e in entries)
    predicted = any(e["predicted"] for _, e in entries)
    verb = "predicted" if predicted else "seen"
    write(f"{total} sync{'s' if total != 1 else ''} {verb} in {len(syncing)} of "
          f"{len(entries)} watched test{'s' if len(entries) != 1 else ''}"
          + (" (on the CPU: no CUDA device)" if predicted else "")
          + (f"; {allowed} allowed by comments, not counted" if allowed else ""))
    costs = [site["cost_ms"] for _, e in entries for site in e["sites"]
             if site.get("cost_ms") is not None and not site.get("allowed")]
    if costs:  # --syncfree-cost: what they cost leads (syncfree.cost)
        write(f"  cost {sum(costs):.2f} ms of GPU time lost to syncs; sites ranked by it")
    elif config.getoption("syncfree_cost", False):
        write("  cost not measured (no GPU, or the CUPTI engine): sites ranked by "
              + ("count" if predicted else "blocked time"))
    rows = [(site, nodeid) for nodeid, e in entries for site in e["sites"]]
    # Ranked as a watch's report ranks its sites (sites.rank_key): recurring ones first, by their
    # blocked time after the first call; those paid once (setup, compilation) after them, under a
    # line of their own, as WatchReport.text lists them. Ties in the order of the tests' ids, so a
    # run under xdist (reports arrive in any order) prints what a run without it does.
    rows.sort(key=lambda row: (*rank_key(_one_off(row[0]), row[0]["blocked_ms"], row[0].get("first_ms"),
                                         row[0]["count"], row[0].get("cost_ms")), row[1], row[0]["text"]))
    allowed_rows = [row for row in rows if row[0].get("allowed")]
    rows = [row for row in rows if not row[0].get("allowed")]
    recurring = [row for row in rows if not _one_off(row[0])]
    once = [row for row in rows if _one_off(row[0])]
    shown = rows[:_SUMMARY_SITES]
    for site, nodeid in shown[:len(recurring)]:
        write(_row_text(site, nodeid))
    firsts = [site["first_ms"] for site, _ in recurring if site.get("first_ms") is not None]
    if once or firsts:
        write(f"  {_once_line([site for site, _ in once], firsts)}")
    for site, nodeid in shown[len(recurring):]:
        write(_row_text(site, nodeid))
    if len(rows) > _SUMMARY_SITES:
        write(f"  ... and {len(rows) - _SUMMARY_SITES} more sites")
    if allowed_rows:
        syncs = sum(site["count"] for site, _ in allowed_rows)
        write(f"  allowed by comments (not counted): {syncs} sync{'s' if syncs != 1 else ''} at "
              f"{len(allowed_rows)} site{'s' if len(allowed_rows) != 1 else ''}")
        for site, nodeid in allowed_rows[:_SHOWN_ALLOWED]:
            write(_row_text(site, nodeid, f"  [allowed: {site.get('allowed_by') or '# syncfree: allow'}]"))
        if len(allowed_rows) > _SHOWN_ALLOWED:
            write(f"  ... and {len(allowed_rows) - _SHOWN_ALLOWED} more allowed sites")
    unjudged = sorted(nodeid for nodeid, e in entries if not e.get("judged", True))
    if unjudged:  # WatchReport.judged: their 0 syncs say nothing of a GPU
        tests = f"{len(unjudged)} test{'s' if len(unjudged) != 1 else ''}"
        write(f"  {tests} could not be judged: no CUDA tensor was seen, their torch calls ran on CPU tensors only "
              "(a device chosen at import, before predict mode started?):")
        for nodeid in unjudged[:_SHOWN_FAILED]:
            write(f"    {nodeid}")
        if len(unjudged) > _SHOWN_FAILED:
            write(f"    ... and {len(unjudged) - _SHOWN_FAILED} more")
    lost = sorted((nodeid, e["lost"]) for nodeid, e in entries if e.get("lost"))
    if lost:  # a child process left no report: the test's count is short, it was not judged (NotJudged)
        tests = f"{len(lost)} test{'s' if len(lost) != 1 else ''}"
        write(f"  {tests} could not be judged: work they started ran where it was not counted (a child process "
              "that left no report, a pool made before them, a thread predict mode could not see), so their syncs "
              "are missing from the count:")
        for nodeid, notes in lost[:_SHOWN_FAILED]:
            for note in notes:
                write(f"    {note}  [{nodeid}]")
        if len(lost) > _SHOWN_FAILED:
            write(f"    ... and {len(lost) - _SHOWN_FAILED} more")
    notes = sorted((nodeid, note) for nodeid, e in entries for note in e.get("notes", ()))
    notes = [(note, nodeid) for nodeid, note in notes]
    if notes:  # the tests' child processes: still running at the test's end, Python programs run unwatched...
        write(f"  on child processes ({len(notes)}):")
        for note, nodeid in notes[:_SHOWN_NOTES]:
            write(f"    {note}  [{nodeid}]")
        if len(notes) > _SHOWN_NOTES:
            write(f"    ... and {len(notes) - _SHOWN_NOTES} more")
    failed = sorted(state.failed_on_standins)
    if failed:
        tests = f"{len(failed)} test{'s' if len(failed) != 1 else ''}"
        write(f"  {tests} failed in predict mode on the CPU, where torch.cuda.is_available() "
              "was True (plain pytest runs their CPU path; each failure says so):")
        for nodeid in failed[:_SHOWN_FAILED]:
            write(f"    {nodeid}")
        if len(failed) > _SHOWN_FAILED:
            write(f"    ... and {len(failed) - _SHOWN_FAILED} more")


def _row_text(site: dict, nodeid: str, mark: str = "") -> str:
    """The site's line with its test's id (and ``mark``) after it, before the library line
    under it, if any."""
    first, newline, rest = site["text"].partition("\n")
    return f"  {first}  [{nodeid}]{mark}{newline}{rest}"


def _counted(entry: dict) -> int:
    """A test's syncs that count: all but those allowed by comments."""
    return entry.get("counted", entry["syncs"])


def _one_off(site: dict) -> bool:
    return bool(site.get("one_off"))


def _once_line(once: list[dict], firsts: list[float]) -> str:
    """``paid once (setup, compilation): 7 syncs, blocked 80.0 ms; the first call of each of the 2 sites
    above: blocked 3.1 ms``: WatchReport.text's line, over every test."""
    from .output import once_line

    return once_line(sum(site["count"] for site in once),
                     [site["blocked_ms"] for site in once if site["blocked_ms"] is not None], firsts)
