"""Issue 20 on CUDA: a warn-mode watch that the program's warnings handling cannot blind,
watches scoped to their thread or task, and the decorators (``make test-gpu``).

Each case was measured wrong on an H100 before capture/dispatch.py: a
``catch_warnings(record=True)`` block got syncfree's warning and syncfree counted 1 of 2;
``simplefilter("ignore")`` 0 of 3; ``set_sync_debug_mode(0)`` 0 of 2 with no note;
``filterwarnings("error")`` turned a sync into an exception; two threads making 30 and 60
syncs were counted 0 and 58. One ``syncfree-gpu:`` line sums them up.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import warnings

import pytest

pytestmark = pytest.mark.gpu

_FIGURES: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    if _FIGURES:
        print("\nsyncfree-gpu: capture among the program's warnings handling and threads: "
              + "; ".join(f"{k} {v}" for k, v in _FIGURES.items()))


def _state():
    import torch

    return (warnings.filters, list(warnings.filters), warnings.showwarning,
            warnings._showwarnmsg, warnings._filters_mutated, torch.cuda.set_sync_debug_mode,
            torch.cuda.get_sync_debug_mode, torch.cuda.get_sync_debug_mode(),
            torch.cuda.synchronize)


@pytest.fixture
def x():
    import torch

    t = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    return t


@pytest.fixture(autouse=True)
def _restored():
    before = _state()
    yield
    assert _state() == before


def _watch(**options):
    import syncfree

    # These cases are about torch's debug mode among the program's warnings handling: pin
    # it (auto would take CUPTI in a process where an earlier test imported CuPy or Numba).
    options.setdefault("engine", "debug")
    return syncfree.watch(**options)


def test_a_record_block_neither_gets_nor_hides_a_sync(x):
    with _watch() as w:
        (x @ x).sum().item()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (x @ x).max().item()
    assert w.report.mode == "warn"
    assert w.report.syncs == 2, w.report.text()
    assert not any("synchronizing" in str(c.message) for c in caught), [str(c.message) for c in caught]
    _FIGURES["catch_warnings(record=True)"] = f"{w.report.syncs}/2, {len(caught)} in the program's list"


def test_an_ignore_filter_hides_no_sync(x):
    with _watch() as w:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                x.sum().item()
    assert w.report.syncs == 3, w.report.text()
    _FIGURES["simplefilter('ignore')"] = f"{w.report.syncs}/3"


def test_an_error_filter_does_not_turn_a_sync_into_an_exception(x):
    with _watch() as w:
        with warnings.catch_warnings():
            warnings.filterwarnings("error")
            x.sum().item()
            x.max().item()
    assert w.report.syncs == 2, w.report.text()
    _FIGURES["filterwarnings('error')"] = f"{w.report.syncs}/2, no exception"


def test_the_debug_mode_set_in_the_block_is_noted_and_counting_goes_on(x):
    import torch

    with _watch() as w:
        torch.cuda.set_sync_debug_mode(0); line = sys._getframe().f_lineno  # noqa: E702
        assert torch.cuda.get_sync_debug_mode() == 0
        x.sum().item()
        x.max().item()
    assert w.report.syncs == 2, w.report.text()
    note = next((n for n in w.report.notes if "set torch's sync debug mode to 'default'" in n), "")
    assert f"test_capture_gpu.py:{line}" in note, w.report.notes
    _FIGURES["set_sync_debug_mode(0) inside"] = f"{w.report.syncs}/2, noted at line {line}"


def test_a_mode_changed_behind_syncfree_is_said(x):
    import torch

    with _watch() as w:
        x.sum().item()
        torch._C._cuda_set_sync_debug_mode(0)  # what syncfree cannot wrap
        x.sum().item()
    assert w.report.syncs == 1
    assert any("could not see" in n for n in w.report.notes), w.report.notes
    _FIGURES["torch._C._cuda_set_sync_debug_mode(0)"] = "said in the report"


def test_two_threads_each_in_a_watch_count_their_own(x):
    both_in = threading.Barrier(2)
    counts, errors = {}, []

    def work(n):
        try:
            with _watch() as w:
                both_in.wait()
                y = x.clone()
                for _ in range(n):
                    (y @ y).sum().item()
            counts[n] = w.report.syncs
        except BaseException as exc:  # noqa: B036 (the test reports it)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in (30, 60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and counts == {30: 30, 60: 60}, (errors, counts)
    _FIGURES["two threads' watches (30 and 60 syncs)"] = f"{counts[30]} and {counts[60]}"


def test_error_mode_stops_its_own_thread_only(x):
    other = []

    def worker():
        x.sum().item()
        other.append("finished")

    with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
        with _watch(mode="error") as w:
            t = threading.Thread(target=worker)
            t.start()
            t.join()
            x.sum().item()
            other.append("never")
    assert other == ["finished"]
    # The worker was started inside the watch: its sync is the watch's (capture/threads.py),
    # counted, not raised there.
    assert w.report.error is not None and w.report.syncs == 2
    _FIGURES["error mode"] = "stopped its thread, not the worker"


def test_decorators_report_each_call(x, userlib):
    import syncfree

    reports = []

    @syncfree.watch(on_report=reports.append, engine="debug")
    def step():
        return userlib.read(x @ x)

    @syncfree.watch(on_report=reports.append, engine="debug")
    def batches():
        for _ in range(3):
            userlib.read(x)
            yield

    @syncfree.watch(on_report=reports.append, engine="debug")
    async def async_step():
        userlib.read(x)
        await asyncio.sleep(0)
        userlib.read(x)

    step()
    for _ in batches():
        x.max().item()  # the consumer: not the generator's
    asyncio.run(async_step())
    assert [r.syncs for r in reports] == [1, 3, 2], [r.text() for r in reports]
    assert step.syncfree_report is reports[0] and reports[0].sites[0].blocked_ms is not None
    _FIGURES["decorators (function, generator, async)"] = "/".join(str(r.syncs) for r in reports)
