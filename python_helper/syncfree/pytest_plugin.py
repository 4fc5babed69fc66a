"""The pytest plugin (entry point ``pytest11``; loaded automatically once syncfree is
installed, ``-p no:syncfree`` turns it off).

* ``@pytest.mark.sync_free`` fails a test whose body synchronizes, with every site in the
  failure message; ``@pytest.mark.sync_free(budget=2)`` allows two syncs,
  ``mode="error"`` stops at the first. Without CUDA the test and its fixtures run on CPU
  stand-ins (predict mode), so ``device="cuda"`` in a fixture works on a CPU-only CI.
* The ``syncfree`` fixture gives a `SyncfreeFixture`: ``syncfree.watch()`` and
  ``syncfree.sync_free()`` blocks for finer assertions.
* ``--syncfree`` watches every test and ranks their syncs in the terminal summary.

The logic is `syncfree.session`'s; this module only places it in pytest's run.
"""

from __future__ import annotations

from typing import Any

import pytest

MARKER = "sync_free"

_SUMMARY_SITES = 20


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("syncfree", "host-device synchronizations (syncfree)")
    group.addoption("--syncfree", action="store_true", default=False,
                    help="watch every test for host-device syncs and rank them in the summary "
                         "(predicted on CPU stand-ins without CUDA)")
    group.addoption("--syncfree-mode", choices=("warn", "error", "predict"), default=None,
                    help="engine mode for marked and watched tests (default: warn with CUDA, "
                         "predict without)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(budget=0, mode=None): fail the test when its body synchronizes the host "
        "with the GPU more than `budget` times (syncfree; predicted on CPU without CUDA)")
    config.stash[_STATE] = _State()


class _State:
    def __init__(self) -> None:
        self.reports: list[tuple[str, Any]] = []  # (test id, WatchReport) of watched tests


_STATE = pytest.StashKey[_State]()


def _marker_options(item: pytest.Item) -> dict | None:
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return None
    options = dict(marker.kwargs)
    if marker.args:
        options.setdefault("budget", marker.args[0])
    unknown = set(options) - {"budget", "mode"}
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes budget= and mode=, not "
                                f"{', '.join(sorted(unknown))}")
    return options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # a misspelled marker argument stops the run before any test
        _marker_options(item)


def _watched(item: pytest.Item) -> bool:
    return _marker_options(item) is not None or item.config.getoption("syncfree")


def _standins_needed(item: pytest.Item) -> str | None:
    """How a watched test (or one that uses the ``syncfree`` fixture) runs its fixtures
    on CPU stand-ins, when predict mode is what its body will run under: ``"session"``,
    one predict session around set-up, call and tear-down (the call's watch nests in it
    and reports the call alone); ``"phases"``, one per phase (predict mode standing in
    for ``mode="error"``, whose call must stop at the first sync); None: no stand-ins."""
    if not (_watched(item) or "syncfree" in getattr(item, "fixturenames", ())):
        return None
    from syncfree.session import choose_engine

    options = _marker_options(item) or {}
    engine = choose_engine(options.get("mode") or item.config.getoption("syncfree_mode"))
    if engine.mode != "predict":
        return None
    return "phases" if engine.stop_at_first else "session"


_STANDINS = pytest.StashKey[str | None]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    how = item.stash[_STANDINS] = _standins_needed(item)
    if how != "session":
        return (yield)
    from syncfree.session import Watch

    host = Watch("predict")
    with host:
        # Only a host for the watches of the call and of the `syncfree` fixture, which
        # report their blocks; its own report is not shown.
        host._recorder.host_only = True
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _under_standins(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    return (yield from _under_standins(item))


def _under_standins(item: pytest.Item):
    """Fixture set-up and tear-down of a watched test, on CPU stand-ins without CUDA; their
    syncs are not the test's (a fixture is not the code under test) and are dropped."""
    if item.stash.get(_STANDINS, None) != "phases":
        return (yield)
    from syncfree.session import Watch

    with Watch("predict"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    __tracebackhide__ = True
    config = pyfuncitem.config
    options = _marker_options(pyfuncitem)
    if not _watched(pyfuncitem):
        return (yield)
    from syncfree.session import SyncError, Watch

    mode = (options or {}).get("mode") or config.getoption("syncfree_mode")
    budget = None if options is None else int(options.get("budget", 0))
    watch = Watch(mode)
    with watch:
        result = yield
    report = watch.report
    config.stash[_STATE].reports.append((_shown_id(pyfuncitem), report))
    if budget is not None and report.counted > budget:
        raise SyncError(report, budget)
    return result


def _shown_id(item: pytest.Item) -> str:
    """The test's id as pytest's short summary shows it: its file relative to the
    working directory, then the rest of the node id."""
    import os

    _, sep, rest = item.nodeid.partition("::")
    try:
        path = os.path.relpath(item.path)
    except ValueError:  # another drive (Windows)
        return item.nodeid
    return f"{path}{sep}{rest}" if sep else item.nodeid


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    # A SyncError is the test's finding, not a crash in the plugin: show its message
    # alone, as pytest shows an assertion, rather than a traceback into syncfree.
    if call.when == "call" and call.excinfo is not None:
        from syncfree.session import SyncError

        if isinstance(call.excinfo.value, SyncError):
            report = pytest.TestReport.from_item_and_call(item, call)
            report.longrepr = f"syncfree: {call.excinfo.value}"
            return report
    return None


class SyncfreeFixture:
    """What the ``syncfree`` fixture gives: blocks watched with the test's settings."""

    def __init__(self, mode: str | None) -> None:
        self.mode = mode

    def watch(self, **kwargs: Any):
        """``with syncfree.watch() as w:`` (see `syncfree.watch`)."""
        from syncfree.session import Watch

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
    state = config.stash.get(_STATE, None)
    if state is None or not config.getoption("syncfree"):
        return
    reports = state.reports
    write = terminalreporter.write_line
    terminalreporter.section("syncfree")
    syncing = [(nodeid, r) for nodeid, r in reports if r.syncs]
    total = sum(r.syncs for _, r in reports)
    predicted = any(r.predicted for _, r in reports)
    verb = "predicted" if predicted else "seen"
    write(f"{total} sync{'s' if total != 1 else ''} {verb} in {len(syncing)} of "
          f"{len(reports)} watched test{'s' if len(reports) != 1 else ''}"
          + (" (CPU stand-ins: no CUDA device)" if predicted else ""))
    rows = [(site, nodeid, r) for nodeid, r in syncing for site in r.sites + r.allowed]
    rows.sort(key=lambda row: (-(row[0].blocked_ms or 0.0), -row[0].count))
    for site, nodeid, report in rows[:_SUMMARY_SITES]:
        write(f"  {report.site_line(site)}  [{nodeid}]")
    if len(rows) > _SUMMARY_SITES:
        write(f"  ... and {len(rows) - _SUMMARY_SITES} more sites")
