"""SyncRecorder on CPU, with stand-in syncs (see conftest.py): counting, attribution,
restoration of every global it touches, error mode, explicit syncs, threads, blocked time."""

from __future__ import annotations

import functools
import json
import re
import sys
import threading
import time
import warnings

import pytest

from standins import SYNC_WARNING, ErrorTensor, FakeTensor, compile_cell, library_device_thread, slow_sync, sync_now

torch = pytest.importorskip("torch")

from syncfree.capture import SYNC_MESSAGE, SyncRecorder, dispatch  # noqa: E402
from syncfree.capture.debug import explicit, hook  # noqa: E402

pytestmark = pytest.mark.usefixtures("fake_cuda")


def run(source: str, mode: str = "warn", *, namespace: dict | None = None, **options):
    """Run ``source`` as a cell under a recorder; ``namespace`` (if given) is the one it
    runs in, with the stand-ins added."""
    code, filename = compile_cell(source)
    ns = namespace if namespace is not None else {}
    for name, value in (("FakeTensor", FakeTensor), ("torch", torch), ("threading", threading),
                        ("sync_now", sync_now)):
        ns.setdefault(name, value)
    options.setdefault("findings", {filename: []})
    recorder = SyncRecorder(mode, cell_files={filename: 0}, **options)
    with recorder:
        exec(code, ns)
    return recorder


def sites(recorder):
    return [(s.line, s.kind, s.count) for s in recorder.sites]


# ----------------------------------------------------------------------------- counting


def test_the_first_sync_puts_its_exact_text_first_in_the_filters_and_other_texts_still_count(
        global_state, monkeypatch):
    monkeypatch.setattr(hook, "_exact", [])  # whatever an earlier test taught it
    # C compares a plain-str filter message with == (Python/_warnings.c, check_matched),
    # cheaper per sync than the pattern's match(); any other sync text meets the pattern.
    before = global_state()
    other = functools.partial(warnings.warn, SYNC_MESSAGE + " (Triggered internally at other.cpp:9.)",
                              UserWarning)
    seen = []
    recorder = run("for i in range(3):\n    t.item()\n    seen.append(warnings.filters[0])\nother()\n",
                   namespace={"t": FakeTensor(), "seen": seen, "warnings": warnings, "other": other})
    assert sites(recorder) == [(2, "item", 3), (4, "other", 1)]
    assert {entry for entry in seen} == {("always", SYNC_WARNING, Warning, None, 0)}
    _assert_restored(before, global_state())
    # The next recorder starts with it.
    recorder = SyncRecorder("warn", cell_files={"<none>": 0})
    with recorder:
        assert warnings.filters[0] == ("always", SYNC_WARNING, Warning, None, 0)
    _assert_restored(before, global_state())


def test_every_sync_in_a_loop_is_counted_on_its_line():
    recorder = run("t = FakeTensor()\nfor _ in range(5):\n    s = t.sum().item()\n")
    assert sites(recorder) == [(3, "item", 5)]
    assert recorder.syncs == 5


def test_two_operations_on_one_line_are_two_sites():
    recorder = run("t = FakeTensor()\na = t.item(); b = t.tolist(); c = t.item()\n")
    assert sites(recorder) == [(2, "item", 2), (2, "tolist", 1)]


def test_hot_path_resolves_each_stack_once(monkeypatch):
    calls = []
    original = SyncRecorder._resolve

    def counting(self, *args):
        calls.append(args[1])
        return original(self, *args)

    monkeypatch.setattr(SyncRecorder, "_resolve", counting)
    recorder = run("t = FakeTensor()\nfor _ in range(200):\n    t.item()\n")
    assert sites(recorder) == [(3, "item", 200)]
    assert len(calls) == 1


def test_site_carries_rule_and_message_from_the_catalog():
    from syncfree import catalog

    recorder = run("t = FakeTensor()\nt.item()\n", measure_blocked=False)
    (site,) = recorder.sites
    assert site.rule == catalog.rule_for_kind("item")
    report = site.to_report()
    assert report["message"] == "`.item()` synced 1x"
    assert report["blocked_ms"] is None


# ----------------------------------------------------------------------------- attribution


def test_chain_through_a_function_defined_in_the_cell():
    recorder = run(
        "def step(t):\n"
        "    return t.item()\n"
        "t = FakeTensor()\n"
        "step(t)\n"
        "step(t); step(t)\n")
    assert [(s.chain, s.kind, s.count) for s in recorder.sites] == [
        ((4, 2), "item", 1),
        ((5, 2), "item", 2),
    ]
    assert all(s.line == 2 and s.frames == () for s in recorder.sites)


def test_comprehension_on_one_line_adds_no_step_to_the_chain():
    recorder = run("t = FakeTensor()\nv = [t.item() for _ in range(3)]\n")
    assert [(s.chain, s.count) for s in recorder.sites] == [((2,), 3)]


def test_library_frames_between_cell_line_and_sync():
    recorder = run("t = FakeTensor()\ns = repr(t)\n")
    (site,) = recorder.sites
    assert (site.line, site.kind) == (2, "library")
    assert [(f["file"], f["name"]) for f in site.frames] == [("tests/standins.py", "FakeTensor.__repr__")]


def _deep(n):
    if n == 0:
        return sync_now()
    return _deep(n - 1)


def test_frames_are_trimmed_to_entry_points_and_the_innermost():
    recorder = run("deep(5)\n", namespace={"deep": _deep}, max_frames=3)
    (site,) = recorder.sites
    assert len(site.frames) == 3
    assert [f["name"] for f in site.frames] == ["_deep"] * 3
    lines = [f["line"] for f in site.frames]
    assert lines[-1] == _deep.__code__.co_firstlineno + 2  # the innermost: where it synced
    assert recorder.report_fields()["truncated_frames"] is True

    untrimmed = run("deep(1)\n", namespace={"deep": _deep}, max_frames=3)
    assert len(untrimmed.sites[0].frames) == 2
    assert untrimmed.report_fields()["truncated_frames"] is False


def test_offset_maps_code_lines_to_cell_lines():
    code, filename = compile_cell("t = FakeTensor()\nt.item()\n")
    recorder = SyncRecorder("warn", cell_files={filename: 7}, findings={filename: []})
    with recorder:
        exec(code, {"FakeTensor": FakeTensor})
    assert sites(recorder) == [(9, "item", 1)]


def test_kind_comes_from_the_finding_that_covers_the_instruction():
    # A finding (here hand-made; analyze.py makes them) decides the rule and so the kind.
    from syncfree import catalog

    print_rule = catalog.rule_for_kind("print")
    source = "t = FakeTensor()\ns = t.sum().item()\n"
    code, filename = compile_cell(source)
    finding = {"rule": print_rule, "range": {"line": 2, "col": 4, "end_line": 2, "end_col": 18},
               "message": "m", "certainty": "certain", "fix": None}
    recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: [finding]})
    with recorder:
        exec(code, {"FakeTensor": FakeTensor})
    (site,) = recorder.sites
    assert (site.rule, site.kind) == (print_rule, "print")


def test_an_ended_recorder_leaves_nothing_of_its_cell_in_the_caches():
    # A 10,000-line cell's finding index and instruction positions stayed alive after it,
    # and every full collection of the cells that followed walked them.
    from syncfree.analyze import analyze_source
    from syncfree.capture import sites as site_caches

    source = "t = FakeTensor()\ns = t.sum().item()\n"
    code, filename = compile_cell(source)
    findings = analyze_source(source)
    seen = {}
    with SyncRecorder("warn", cell_files={filename: 0}, findings={filename: findings}):
        exec(code, {"FakeTensor": FakeTensor})
        seen["index"] = id(findings) in site_caches._indexes
        seen["positions"] = any(c.co_filename == filename for c, _ in site_caches._positions_cache.values())
    assert seen == {"index": True, "positions": True}
    assert id(findings) not in site_caches._indexes
    assert not any(c.co_filename == filename for c, _ in site_caches._positions_cache.values())


def test_record_sync_with_a_known_kind_and_prediction():
    code, filename = compile_cell("import sys\nframe = sys._getframe()\n")
    ns: dict = {}
    recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: []})
    with recorder:
        exec(code, ns)
        recorder.record_sync(ns["frame"], "nonzero", predicted=True)
    (site,) = recorder.sites
    assert (site.line, site.kind, site.predicted) == (2, "nonzero", True)
    assert site.to_report()["predicted"] is True
    assert "would sync 1x" in site.message


def test_a_known_kind_keeps_the_rule_of_a_finding_of_that_kind():
    from syncfree import catalog

    source = "import sys\nframe = sys._getframe()\n"
    code, filename = compile_cell(source)
    whole_line = {"line": 2, "col": 0, "end_line": 2, "end_col": 24}
    event_rule = next(c for c, r in catalog.RULES.items()
                      if r.kind == "explicit" and c != catalog.rule_for_kind("explicit"))
    for finding_rule, kind, expected in [
        (event_rule, "explicit", event_rule),                          # same kind: its rule
        (catalog.rule_for_kind("item"), "explicit", catalog.rule_for_kind("explicit")),
    ]:
        finding = {"rule": finding_rule, "range": whole_line}
        ns: dict = {}
        recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: [finding]})
        with recorder:
            exec(code, ns)
            recorder.record_sync(ns["frame"], kind)
        assert [(s.kind, s.rule) for s in recorder.sites] == [(kind, expected)]


# ----------------------------------------------------------------------------- outside the cell


def test_sync_in_a_thread_running_cell_code_keeps_the_thread_name():
    recorder = run(
        "t = FakeTensor()\n"
        "def work():\n"
        "    t.item()\n"
        "th = threading.Thread(target=work, name='loader')\n"
        "th.start(); th.join()\n")
    (site,) = recorder.sites
    assert (site.line, site.chain, site.thread) == (3, (3,), "loader")
    assert site.to_report()["thread"] == "loader"


def test_syncs_outside_the_cell_code_are_counted_in_notes_not_lost():
    def library_worker():
        sync_now()
        sync_now()

    recorder = run(
        "th = threading.Thread(target=worker, name='prefetch')\n"
        "th.start(); th.join()\n"
        "sync_now()\n",
        namespace={"worker": library_worker})
    assert sites(recorder) == [(3, "other", 1)]
    assert recorder.syncs == 3
    fields = recorder.report_fields()
    assert any("2 syncs in thread 'prefetch'" in n for n in fields["notes"])

    code, filename = compile_cell("x = 1\n")
    recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: []})
    with recorder:
        sync_now()  # the test's own frame: not the cell's code
    assert recorder.sites == [] and recorder.syncs == 1
    assert any("in the cell's thread" in n for n in recorder.report_fields()["notes"])


# ----------------------------------------------------------------------------- restoration


def _engine_state():
    """What the debug-mode engine replaces besides conftest's global_state."""
    return (warnings._showwarnmsg, warnings._filters_mutated, torch.cuda.set_sync_debug_mode,
            torch.cuda.get_sync_debug_mode)


_ENGINE_BEFORE = {}


@pytest.fixture(autouse=True)
def _engine_removed():
    """After every test: the dispatcher's hooks are gone, the functions are the originals."""
    before = _engine_state()
    yield
    assert not hook.installed() and not dispatch.running() and not hook._debug_users
    assert _engine_state() == before


def _assert_restored(before, after):
    assert after["filters_list"] is before["filters_list"]
    assert after["filters"] == before["filters"]
    assert after["showwarning"] is before["showwarning"]
    assert after["synchronize"] is before["synchronize"]
    assert after["event_synchronize"] is before["event_synchronize"]
    assert after["debug_mode"] == before["debug_mode"]
    assert after["profile"] is before["profile"]
    assert after["thread_start"] is before["thread_start"]
    assert after["pool_submit"] is before["pool_submit"]


@pytest.mark.parametrize("raised", [ValueError("boom"), KeyboardInterrupt(), SystemExit(3)],
                         ids=["exception", "KeyboardInterrupt", "SystemExit"])
def test_everything_is_restored_after_the_cell_raises(global_state, fake_cuda, raised):
    before = global_state()
    code, filename = compile_cell("t = FakeTensor()\nt.item()\nraise err\n")
    recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: []})
    with pytest.raises(type(raised)):
        with recorder:
            assert torch.cuda.get_sync_debug_mode() == 1
            assert warnings._showwarnmsg is hook._showwarnmsg
            assert torch.cuda.synchronize is not before["synchronize"]
            exec(code, {"FakeTensor": FakeTensor, "err": raised})
    _assert_restored(before, global_state())
    assert sites(recorder) == [(2, "item", 1)]
    assert recorder.error["type"] == type(raised).__qualname__
    assert recorder.error["line"] == 3


def test_everything_is_restored_after_nested_use(global_state):
    # %%syncfree --mode error inside a cell watched by %syncfree on: the inner recorder
    # records, the outer does not count the inner run's syncs twice.
    before = global_state()
    outer_code, outer_file = compile_cell("t = FakeTensor()\nt.item()\n")
    inner_code, inner_file = compile_cell("t.item()\nt.item()\ntorch.cuda.synchronize()\n")
    ns = {"FakeTensor": FakeTensor, "torch": torch}
    outer = SyncRecorder("warn", cell_files={outer_file: 0}, findings={outer_file: []})
    inner = SyncRecorder("error", cell_files={inner_file: 0}, findings={inner_file: []})
    with outer:
        exec(outer_code, ns)
        wrapped = torch.cuda.synchronize
        with pytest.raises(RuntimeError, match="synchronizing"):
            with inner:
                # Error mode is warn mode plus an error from the hook (debug/hook.py).
                assert torch.cuda.get_sync_debug_mode() == 1
                assert torch.cuda.synchronize is wrapped  # wrappers are not stacked
                exec(inner_code, ns)
        assert torch.cuda.get_sync_debug_mode() == 1
        assert warnings._showwarnmsg is hook._showwarnmsg
        assert torch.cuda.synchronize is wrapped
        exec(outer_code, ns)
    _assert_restored(before, global_state())
    assert sites(inner) == [(1, "item", 1)]  # error mode stops at the first sync
    assert inner.error["line"] == 1
    assert sites(outer) == [(2, "item", 2)]  # its own two on its lines ...
    assert outer.syncs == 3  # ... and the inner run's, outside its code (dispatch.py: parent)


def test_the_cell_may_add_warning_filters_that_outlive_it(global_state):
    before = global_state()
    run("import warnings\nwarnings.filterwarnings('ignore', message='unrelated-test-filter')\n")
    after = global_state()
    assert after["filters_list"] is before["filters_list"]
    assert after["filters"][1:] == before["filters"]
    assert after["filters"][0][1].pattern == "unrelated-test-filter"
    warnings.filters.remove(after["filters"][0])


def test_unrelated_warnings_reach_the_previous_showwarning():
    shown = []
    previous = warnings.showwarning

    def collect(message, category, filename, lineno, file=None, line=None):
        shown.append((str(message), category, lineno))

    warnings.showwarning = collect
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", RuntimeWarning)
            recorder = run("t = FakeTensor()\nt.item()\n"
                           "import warnings\nwarnings.warn('keep me', RuntimeWarning)\n")
        assert warnings.showwarning is collect
    finally:
        warnings.showwarning = previous
    assert shown == [("keep me", RuntimeWarning, 4)]
    assert sites(recorder) == [(2, "item", 1)]


def test_debug_mode_leaves_cuda_uninitialized_until_the_program_initializes_it(fake_cuda, monkeypatch):
    # torch.cuda.set_sync_debug_mode initializes CUDA, and a process that has initialized CUDA cannot use it in its
    # forked children: a script whose fork Pool workers use CUDA, its parent never, failed under syncfree run on a GPU
    # ("Cannot re-initialize CUDA in forked subprocess") where python ran it. The mode is set when the program
    # initializes CUDA (torch's queue of calls made then), and a call left queued by an ended watch does nothing.
    initialized, queued = [False], []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized[0])
    monkeypatch.setattr(torch.cuda, "_lazy_call", lambda call, **kwargs: queued.append(call))
    code, filename = compile_cell("x = 1\n")
    recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: []})
    with recorder:
        assert fake_cuda.history == [] and len(queued) == 1  # nothing touched CUDA yet
        initialized[0] = True  # the program's first CUDA call: torch runs the queued calls
        queued.pop()()
        assert fake_cuda.history == [1]
    assert fake_cuda.history == [1, 0]
    initialized[0] = False
    with SyncRecorder("warn", cell_files={filename: 0}, findings={filename: []}):
        pass
    assert fake_cuda.history == [1, 0] and len(queued) == 1  # never initialized: nothing to set, nothing put back
    initialized[0] = True
    queued.pop()()  # CUDA initialized after that watch ended: its call does nothing
    assert fake_cuda.history == [1, 0]


def test_prototype_warning_is_dropped(fake_cuda, monkeypatch):
    # torch's set_sync_debug_mode warns once per process that the mode is a prototype; the
    # recorder switches the mode while its filter is in place, on enter and on exit.
    def set_mode(mode):
        fake_cuda.history.append(mode)
        warnings.warn("Synchronization debug mode is a prototype feature and does not yet "
                      "detect all synchronizing operations", UserWarning)

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    shown = []
    previous = warnings.showwarning
    warnings.showwarning = lambda message, *rest: shown.append(str(message))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            recorder = run("x = 1\n")
    finally:
        warnings.showwarning = previous
    assert fake_cuda.history == [1, 0]
    assert recorder.syncs == 0
    assert shown == []


# ----------------------------------------------------------------------------- error mode

@pytest.mark.parametrize("tensor", [FakeTensor, ErrorTensor], ids=["warning", "torch-error"])
def test_error_mode_names_the_cell_line_and_the_operation(fake_cuda, tensor):
    # The engine raises from its hook at the sync warning (debug/hook.py); an error torch
    # raised itself (its own error mode, set by code syncfree did not see) is named too.
    code, filename = compile_cell("t = Tensor()\nx = 1\nv = t.item()\nprint('never')\n")
    recorder = SyncRecorder("error", cell_files={filename: 0}, findings={filename: []})
    with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
        with recorder:
            assert torch.cuda.get_sync_debug_mode() == 1
            exec(code, {"Tensor": tensor})
    assert fake_cuda.mode == 0
    assert sites(recorder) == [(3, "item", 1)]
    assert recorder.stopped_by_sync
    assert recorder.error == {"type": "RuntimeError", "line": 3,
                              "message": "line 3: `.item()` synchronized; --mode error stops at the first sync"}


def test_error_mode_stops_at_explicit_synchronize():
    with pytest.raises(RuntimeError, match=r"torch\.cuda\.synchronize\(\)"):
        run("x = 1\ntorch.cuda.synchronize()\n", mode="error")


# ----------------------------------------------------------------------------- explicit syncs


def test_explicit_synchronize_is_counted_and_event_wait_query_are_not(fake_cuda):
    wait, query = torch.cuda.Event.wait, torch.cuda.Event.query
    recorder = run(
        "e = object()\n"
        "torch.cuda.synchronize()\n"
        "torch.cuda.Event.synchronize(e)\n"
        "assert torch.cuda.Event.wait is wait and torch.cuda.Event.query is query\n",
        namespace={"wait": wait, "query": query})
    # The blocked time is whatever the two no-op calls took: 0.0 ms, or a preemption's 20 ms beside busy processes.
    assert [(s.line, s.kind, re.sub(r"blocked \d+\.\d+ ms", "blocked T ms", s.message)) for s in recorder.sites] == [
        (2, "explicit", "`torch.cuda.synchronize()` synced 1x, blocked T ms"),
        (3, "explicit", "`Event.synchronize()` synced 1x, blocked T ms"),
    ]
    assert fake_cuda.history.count("device-synchronize") == 1
    assert fake_cuda.history.count("event-synchronize") == 1
    assert not explicit._receivers and not explicit._installed


def test_the_explicit_wrappers_are_made_once_and_remade_when_what_they_wrap_changes(fake_cuda, monkeypatch):
    # Making them read torch.distributed's signatures at every recorder's start (0.4-0.6 ms
    # of a decorated step's every call on a GPU machine): the next recorders reuse them.
    import inspect

    seen = {}
    spelled = "seen.setdefault(tag, []).append(torch.cuda.synchronize)\ntorch.cuda.synchronize()\n"
    run(spelled, namespace={"seen": seen, "tag": "first"})
    signatures = []
    real_signature = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda *a, **k: signatures.append(a) or real_signature(*a, **k))
    recorder = run(spelled, namespace={"seen": seen, "tag": "again"})
    assert seen["again"][0] is seen["first"][0] and not signatures
    assert [(s.line, s.count) for s in recorder.sites] == [(2, 1)]
    # Another tool (or the program) replaced torch.cuda.synchronize between the runs: the
    # wrapper then wraps what is there now, and restores it.
    calls = []
    replacement = lambda device=None: calls.append(device)  # noqa: E731
    monkeypatch.setattr(torch.cuda, "synchronize", replacement)
    recorder = run(spelled, namespace={"seen": seen, "tag": "replaced"})
    assert seen["replaced"][0] is not seen["first"][0] and calls == [None]
    assert [(s.line, s.count) for s in recorder.sites] == [(2, 1)]
    assert torch.cuda.synchronize is replacement
    assert not explicit._receivers and not explicit._installed


def test_a_synchronize_held_from_before_the_recorder_is_counted_once(fake_cuda, monkeypatch):
    # torch.cuda.synchronize held before the recorder began (`from torch.cuda import synchronize`; torchrl keeps it as
    # its env's device sync) went around the wrapper: its sync was not counted, and a block passed. It calls
    # torch._C._cuda_synchronize, which is wrapped too: counted at the caller's line, once (the wrapped
    # torch.cuda.synchronize's own call of it is not counted again).
    calls = []
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: calls.append("device"), raising=False)
    real = torch._C._cuda_synchronize

    def synchronize(device=None):  # as torch's: it looks torch._C._cuda_synchronize up at each call
        return torch._C._cuda_synchronize()

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    recorder = run("held()\nx = 1\ntorch.cuda.synchronize()\ntorch._C._cuda_synchronize()\n",
                   namespace={"held": synchronize})
    assert [(s.line, s.kind, s.count) for s in recorder.sites] == [(1, "explicit", 1), (3, "explicit", 1),
                                                                   (4, "explicit", 1)], recorder.sites
    assert calls == ["device"] * 3
    assert torch._C._cuda_synchronize is real and torch.cuda.synchronize is synchronize
    assert not explicit._receivers and not explicit._installed


def test_a_wrapper_put_back_by_whoever_replaced_it_is_removed_at_the_next_attach(fake_cuda):
    # A predict session in another thread replaces torch.cuda.synchronize over the wrapper
    # and, ending after the recorder, puts back what it found: the wrapper. It stayed.
    original = torch.cuda.synchronize
    receiver = object()
    explicit.attach(receiver, torch)
    wrapper = torch.cuda.synchronize
    stand_in = lambda device=None: None  # noqa: E731
    torch.cuda.synchronize = stand_in
    assert explicit.detach(receiver) == [
        "torch.cuda.synchronize was replaced during the run; syncfree left the replacement in place"]
    assert torch.cuda.synchronize is stand_in
    torch.cuda.synchronize = wrapper  # the other session ends
    recorder = run("torch.cuda.synchronize()\n")
    assert [(s.line, s.count) for s in recorder.sites] == [(1, 1)]  # counted once, not twice
    assert torch.cuda.synchronize is original and not explicit._stale
    assert fake_cuda.history.count("device-synchronize") == 1


def test_two_threads_attaching_at_once_install_one_set_of_wrappers(fake_cuda, monkeypatch):
    # Without the lock both found no receiver and installed: the second set wrapped the
    # first, and each explicit sync was counted twice.
    import threading

    original = torch.cuda.synchronize
    inside, go_on = threading.Event(), threading.Event()
    real_wrappers = explicit._wrappers

    def slow_wrappers(torch_module):
        entries = real_wrappers(torch_module)
        if threading.current_thread().name == "first":
            inside.set()
            go_on.wait(0.5)  # the second thread attaches meanwhile, if nothing stops it
        return entries

    monkeypatch.setattr(explicit, "_wrappers", slow_wrappers)
    receivers = [object(), object()]
    first = threading.Thread(target=explicit.attach, args=(receivers[0], torch), name="first")
    first.start()
    inside.wait(5)
    second = threading.Thread(target=explicit.attach, args=(receivers[1], torch), name="second")
    second.start()
    second.join(0.2)
    go_on.set()
    first.join(5)
    second.join(5)
    try:
        installed = [entry for entry in explicit._installed if entry[1] == "synchronize"
                     and entry[0] is torch.cuda]
        assert len(installed) == 1 and installed[0][2] is original
        assert len(explicit._receivers) == 2
    finally:
        for receiver in receivers:
            explicit.detach(receiver)
    assert torch.cuda.synchronize is original and not explicit._installed


# ----------------------------------------------------------------------------- blocked time


def sync_now_quietly() -> None:
    """A sync under a recorder of its own: the dispatcher learns torch's text, as at any
    sync after the first of a process."""
    run("sync_now()\n")


@pytest.mark.parametrize("first_sync_of_the_process", [False, True], ids=["later", "first-of-process"])
def test_blocked_time_is_the_time_spent_in_the_syncing_call(monkeypatch, first_sync_of_the_process):
    # The cell times the call itself, so a loaded machine slows both measurements alike.
    if first_sync_of_the_process:
        # The process's first sync warning teaches the dispatcher torch's exact text, from the
        # warning path before the hook pauses the clock: nothing it runs may restart the
        # interval (its filters helpers in another module did, on 3.10/3.11: ~0 ms blocked).
        monkeypatch.setattr(hook, "_exact", [])
    else:
        sync_now_quietly()
    # The interval restarts after each sync: the second sync's blocked time is its own (about 0), not the first's
    # call again. Beside busy processes a preemption can land in it (20 ms seen in one clean-clone run): an interval
    # that does not restart fails every try, a preemption one.
    for _ in range(3):
        namespace = {"slow_sync": slow_sync}
        recorder = run("from time import perf_counter\n"
                       "t = FakeTensor()\n"
                       "started = perf_counter(); slow_sync(); call_ms = (perf_counter() - started) * 1000\n"
                       "t.item()\n",
                       namespace=namespace)
        first, second = recorder.sites
        call_ms = namespace["call_ms"]
        assert (first.line, second.line) == (3, 4)
        assert 0.7 * call_ms <= first.blocked_ms <= call_ms
        assert sys.getprofile() is None
        if second.blocked_ms < 0.1 * call_ms:
            break
        if first_sync_of_the_process:
            monkeypatch.setattr(hook, "_exact", [])
    assert second.blocked_ms < 0.1 * call_ms


def test_no_blocked_measures_nothing():
    recorder = run("t = FakeTensor()\nt.item()\n", measure_blocked=False)
    assert recorder.sites[0].blocked_ms is None


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ times with sys.monitoring, "
                    "which runs beside a sys.setprofile profiler")
def test_another_profiler_keeps_its_place():
    def other_profiler(frame, event, arg):
        pass

    sys.setprofile(other_profiler)
    try:
        recorder = run("t = FakeTensor()\nt.item()\n")
        assert sys.getprofile() is other_profiler
    finally:
        sys.setprofile(None)
    assert recorder.sites[0].blocked_ms is None
    assert any("another profiler" in n for n in recorder.notes)


# ----------------------------------------------------------------------------- size


def test_a_million_syncs_on_three_lines_make_a_small_report():
    from syncfree.report import build_report, device_info

    source = ("import sys\nrecord, here = recorder.record_sync, sys._getframe\n"
              "for _ in range(250_001):\n"
              "    record(here())\n"
              "    record(here()); record(here())\n"
              "    record(here())\n")
    code, filename = compile_cell(source)
    recorder = SyncRecorder("warn", cell_files={filename: 0}, findings={filename: []})
    with recorder:
        exec(code, {"recorder": recorder})
    assert recorder.syncs == 4 * 250_001 >= 1_000_000
    assert [(s.line, s.count) for s in recorder.sites] == [(4, 250_001), (5, 500_002), (6, 250_001)]
    report = build_report(source=source, device=device_info("cuda", "Stand-in GPU"),
                          **recorder.report_fields())
    assert len(json.dumps(report)) < 64_000
    assert len(recorder._cache) == 4


def test_sites_are_capped_and_the_totals_stay_true():
    source = "t = FakeTensor()\n" + "t.item()\n" * 1003
    recorder = run(source)
    fields = recorder.report_fields()
    assert len(fields["sites"]) == 1000
    assert fields["truncated_sites"] is True
    assert fields["syncs"] == 1003
    assert any("3 syncs at sites beyond the first 1000" in n for n in fields["notes"])


def test_a_full_site_table_still_counts_a_known_site_reached_another_way():
    # Past the cap the attribution stops at the chain unless a site on it is held: the
    # else branch of line 2 comes after 1000 sites and still counts on its site.
    reads = "".join("    t.item()\n" for _ in range(999))
    source = ("t = FakeTensor()\n"
              "def read(second): return t.item() if second else t.item()\n"
              "def order():\n"
              "    yield False\n"
              f"{reads}"
              "    yield True\n"
              "for second in order(): read(second)\n")
    last = source.count("\n")
    fields = run(source).report_fields()
    assert len(fields["sites"]) == 1000 and fields["syncs"] == 1001
    (read,) = [site for site in fields["sites"] if site["chain"] == [last, 2]]
    assert read["count"] == 2 and fields["truncated_sites"] is False


def test_recorder_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        SyncRecorder("loud", cell_files={})
    with pytest.raises(ValueError, match="max_frames"):
        SyncRecorder("warn", cell_files={}, max_frames=9)


def test_predict_mode_enters_the_predict_session(monkeypatch, global_state):
    events = []

    class PredictSession:
        def __init__(self, recorder):
            self.recorder = recorder

        def __enter__(self):
            events.append("enter")
            return self

        def __exit__(self, *exc):
            events.append("exit")

    from syncfree.capture.predict import engine as predict_engine

    monkeypatch.setattr(predict_engine, "PredictSession", PredictSession)  # the predict engine's session
    before = global_state()
    code, filename = compile_cell("import sys\nframe = sys._getframe()\n")
    ns: dict = {}
    recorder = SyncRecorder("predict", cell_files={filename: 0}, findings={filename: []})
    with recorder:
        assert warnings.showwarning is before["showwarning"]  # no debug-mode machinery
        exec(code, ns)
        recorder.record_sync(ns["frame"], "item", predicted=True)
    assert events == ["enter", "exit"]
    assert [(s.line, s.kind, s.predicted) for s in recorder.sites] == [(2, "item", True)]
    _assert_restored(before, global_state())


# ----------------------------------------------------------------------------- the program's warnings handling
# Debug mode reports through Python's warnings, which the program shares (debug/hook.py).
# Each case runs inside syncfree.watch() in warn mode, as issue 20 measured on an H100.


def _watch_warn(**options):
    import syncfree

    return syncfree.watch("warn", measure_blocked=False, **options)


def test_a_catch_warnings_record_block_neither_gets_nor_hides_a_sync():
    # What pytest.warns and "no warnings" assertions use.
    with _watch_warn() as w:
        sync_now()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sync_now()
            warnings.warn("the program's own", RuntimeWarning)
    assert w.report.syncs == 2
    assert [str(c.message) for c in caught] == ["the program's own"]  # no sync warning in it


def test_pytest_warns_inside_a_watch_sees_only_the_programs_warning():
    with _watch_warn() as w:
        with pytest.warns(DeprecationWarning) as caught:
            sync_now()
            warnings.warn("old API", DeprecationWarning)
    assert w.report.syncs == 1
    assert [type(c.message) for c in caught] == [DeprecationWarning]


@pytest.mark.parametrize("silence", ["simplefilter", "filterwarnings", "resetwarnings+ignore"])
def test_ignore_filters_of_the_program_hide_no_sync(silence):
    with _watch_warn() as w:
        with warnings.catch_warnings():
            if silence == "simplefilter":
                warnings.simplefilter("ignore")
            elif silence == "filterwarnings":
                warnings.filterwarnings("ignore", category=UserWarning)
            else:
                warnings.resetwarnings()
                warnings.simplefilter("ignore")
            for _ in range(3):
                sync_now()
    assert w.report.syncs == 3


def test_an_error_filter_of_the_program_does_not_turn_a_sync_into_its_exception():
    before = list(warnings.filters)
    with _watch_warn() as w:
        with warnings.catch_warnings():
            warnings.filterwarnings("error")
            sync_now()
            sync_now()
            with pytest.raises(RuntimeWarning):  # the program's own warnings still raise
                warnings.warn("mine", RuntimeWarning)
    assert w.report.syncs == 2
    assert list(warnings.filters) == before


def test_a_catch_warnings_entered_before_the_watch_and_left_inside_it():
    outer = warnings.catch_warnings()
    outer.__enter__()
    try:
        with _watch_warn() as w:
            sync_now()
            outer.__exit__(None, None, None)  # back to the list from before the watch
            outer = None
            warnings.simplefilter("ignore", UserWarning)
            sync_now()
        assert w.report.syncs == 2
        assert not any(f[1] is not None and "synchronizing" in f[1].pattern
                       for f in warnings.filters if f[1] is not None)
    finally:
        if outer is not None:
            outer.__exit__(None, None, None)
        warnings.filters[:] = [f for f in warnings.filters
                               if f[:3] != ("ignore", None, UserWarning)]
        warnings._filters_mutated()


def test_the_program_setting_the_debug_mode_is_noted_and_counting_goes_on(fake_cuda):
    with _watch_warn() as w:
        sync_now()
        torch.cuda.set_sync_debug_mode(0); line = sys._getframe().f_lineno  # noqa: E702
        assert torch.cuda.get_sync_debug_mode() == 0  # what the program set
        sync_now()
        sync_now()
    assert w.report.syncs == 3
    where = f"tests/test_recorder.py:{line}"
    assert any(f"sync debug mode to 'default' at {where}; syncfree kept counting" in n
               for n in w.report.notes), w.report.notes
    assert fake_cuda.mode == 0 and fake_cuda.history == [1, 0]  # torch stayed in warn mode


def test_the_program_asking_for_error_mode_gets_torchs_error_after_the_count():
    with _watch_warn() as w:
        torch.cuda.set_sync_debug_mode("error")
        with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
            sync_now()
    assert w.report.syncs == 1


def test_a_debug_mode_changed_behind_syncfree_is_said(fake_cuda):
    real_set = fake_cuda.set  # a reference taken before the block (what the C call does)
    with _watch_warn() as w:
        sync_now()
        real_set(0)
    assert any("sync debug mode was set to 0 during the run by code syncfree could not see"
               in n for n in w.report.notes), w.report.notes


def test_a_hook_taken_by_another_tool_is_said():
    original = warnings._showwarnmsg

    def other_tools_hook(msg):
        pass

    try:
        with _watch_warn() as w:
            sync_now()
            warnings._showwarnmsg = other_tools_hook  # installed over syncfree's, kept
            sync_now()
        assert warnings._showwarnmsg is other_tools_hook  # what the program installed stays
    finally:
        warnings._showwarnmsg = original
    assert w.report.syncs == 1
    line = other_tools_hook.__code__.co_firstlineno
    assert any("warnings._showwarnmsg was replaced during the run by test_a_hook_taken_by_another_"
               f"tool_is_said.<locals>.other_tools_hook (tests/test_recorder.py:{line})" in n
               for n in w.report.notes), w.report.notes


# ----------------------------------------------------------------------------- threads in warn mode


def _in_threads(*targets):
    barrier = threading.Barrier(len(targets))
    errors = []

    def run(target):
        try:
            barrier.wait()
            target()
        except BaseException as exc:  # noqa: B036 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,), name=f"worker-{i}")
               for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_two_threads_each_in_a_watch_count_their_own(global_state):
    before = global_state()
    reports = {}

    both_in = threading.Barrier(2)

    def work(n):
        def target():
            with _watch_warn() as w:
                both_in.wait()  # both watches run while both threads sync
                for i in range(n):
                    sync_now()
                    if i % 10 == 0:
                        time.sleep(0.001)  # let the other thread in
            reports[n] = w.report.syncs
        return target

    _in_threads(work(30), work(60))
    assert reports == {30: 30, 60: 60}
    _assert_restored(before, global_state())


def test_watches_of_threads_ending_out_of_order_leave_no_hook(global_state):
    before = global_state()
    first_in = threading.Event()
    first_out = threading.Event()
    reports = {}

    def first():
        with _watch_warn() as w:
            sync_now()
            first_in.set()
            assert second_in.wait(10)
        reports["first"] = w.report.syncs
        first_out.set()

    second_in = threading.Event()

    def second():
        assert first_in.wait(10)
        with _watch_warn() as w:
            second_in.set()
            assert first_out.wait(10)  # the first watch has ended: this one still counts
            sync_now()
            sync_now()
        reports["second"] = w.report.syncs

    _in_threads(first, second)
    assert reports == {"first": 1, "second": 2}
    _assert_restored(before, global_state())
    shown = []  # no dead hook left to swallow the program's later warnings
    previous = warnings.showwarning
    warnings.showwarning = lambda message, *rest: shown.append(str(message))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("after", RuntimeWarning)
    finally:
        warnings.showwarning = previous
    assert shown == ["after"]


def test_error_mode_stops_its_own_thread_only():
    # torch's own error mode is process-wide: every thread's next sync would raise.
    import syncfree

    other = []

    def worker():
        sync_now()
        other.append("finished")

    with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
        with syncfree.watch("error") as w:
            t = threading.Thread(target=worker, name="worker")
            t.start()
            t.join()
            sync_now()
    assert other == ["finished"]
    # The thread the block started is the block's: its sync counted, not raised there.
    assert w.report.error is not None and w.report.syncs == 2
    assert sorted(s.thread or "" for s in w.report.sites) == ["", "worker"]


def _started_outside(target, name):
    """A thread started now (outside any watch) that runs ``target`` when told to: a
    thread no watch owns. Returns the function that runs it and joins it."""
    go = threading.Event()

    def wait_then_run():
        if go.wait(10):
            target()

    thread = threading.Thread(target=wait_then_run, name=name)
    thread.start()

    def run_and_join():
        go.set()
        thread.join()
    return run_and_join


def test_a_thread_started_in_a_watch_is_its_own_in_warn_mode(global_state):
    """Debug mode's path (torch's warning in the thread): a thread the block starts, and a
    thread-pool task it submits, count in the watch; one started outside it does not."""
    from concurrent.futures import ThreadPoolExecutor

    before = global_state()
    outside = _started_outside(sync_now, "outside")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(int).result()  # its worker started before the watch
        with _watch_warn() as w:
            t = threading.Thread(target=sync_now, name="inside")
            t.start()
            t.join()
            pool.submit(sync_now).result()
            outside()
        with warnings.catch_warnings(record=True):  # after the watch: not its (shown)
            assert pool.submit(sync_now).result() is None
    assert w.report.syncs == 2, w.report.notes
    assert any("1 sync in thread 'outside', which no syncfree watch owned" in n
               for n in w.report.notes), w.report.notes
    _assert_restored(before, global_state())


def test_a_sync_on_autograds_thread_belongs_to_the_watch_that_called_backward(fake_cuda, monkeypatch):
    """On a GPU autograd runs a CUDA graph's hooks (and a custom Function's backward) on its
    device thread, whose context routes to no watch: a watched test whose hook synced
    passed. Here the hook hands its sync to another thread, as the engine does, and that
    thread runs a graph task (what torch._C._current_graph_task_id says there)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch._C, "_current_graph_task_id", lambda: 0)

    # The engine's device thread is not started by the watch's code (a thread the block
    # starts is the block's anyway): one started before, told to sync by the hook.
    device_thread = _started_outside(sync_now, "pt_autograd_0")

    def hook(grad):
        device_thread()

    x = torch.ones(3, requires_grad=True)
    x.register_hook(hook)
    with _watch_warn() as w:
        (x * 2).sum().backward()
    assert w.report.syncs == 1, w.report.notes
    # Outside a backward pass a thread's sync stays nobody's (noted), as before.
    other_thread = _started_outside(sync_now, "other")
    with _watch_warn() as w:
        other_thread()
    assert w.report.syncs == 0
    assert torch.autograd._engine_run_backward.__module__ == "torch.autograd.graph"


def test_a_library_sync_on_autograds_thread_is_attributed_to_the_backward_line(fake_cuda, monkeypatch):
    """A hook whose sync runs on the device thread (started before the watch, as torch's
    are) in library code only, as a checkpointed library model recomputes its forward
    there: its frames never reach the user's code, so it was counted outside the lines.
    The walk goes on at the frame that called the backward pass, in the thread waiting."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch._C, "_current_graph_task_id", lambda: 0)
    library = library_device_thread()
    x = torch.ones(3, requires_grad=True)
    x.register_hook(lambda grad: library["run_on_device"](sync_now))
    try:
        with _watch_warn() as w:
            (x * 2).sum().backward()
        line = sys._getframe().f_lineno - 1
        with _watch_warn() as w2:  # a second pass: the same site, counted again
            for _ in range(2):
                (x * 2).sum().backward()
        line2 = sys._getframe().f_lineno - 1
    finally:
        library["requests"].put(None)
    assert w.report.syncs == 1, w.report.notes
    (site,) = w.report.sites
    # The backward caller's thread's sync, as debug mode's replayed C++ warnings are: not
    # a row "in thread pt_autograd_0" beside the same line's other syncs.
    assert (site.file, site.line, site.count, site.thread) == (__file__, line, 1, None), site
    (site,) = w2.report.sites
    assert (site.line, site.count) == (line2, 2), site
    assert torch.autograd._engine_run_backward.__module__ == "torch.autograd.graph"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the profile callback of Python 3.10/3.11 (per thread)")
def test_a_stall_clock_stopped_from_another_thread_leaves_no_profile_callback():
    # A watch closed from another thread stops its clock there, and sys.setprofile is per thread: the opening
    # thread kept the callback (stamping a dead clock at every call) and the report said another profiler took it.
    from syncfree.capture.stall import StallClock

    assert sys.getprofile() is None
    clock = StallClock({__file__: 0}, hook_globals=({}, {}))
    assert clock.start()
    stopper = threading.Thread(target=clock.stop)
    stopper.start()
    stopper.join(timeout=60)
    len([])  # any event of this thread: the callback takes itself off
    assert sys.getprofile() is None
    assert not clock.interrupted


def test_a_debug_mode_syncs_own_call_start_is_the_stall_clocks_stamp_for_its_own_calls_only():
    # The cost (cost.py's call_starts) takes a debug-mode sync's call start from the stall clock: the
    # hook's time less the blocked time it measured, which is the call's own for `.item()`, `.tolist()`, `.cpu()`,
    # `int(t)`, but an earlier call's for a sync without one (`x[mask]`, `if t:`) or a library's function.
    from syncfree.capture.recorder import _call_began
    from syncfree.capture.sites import SyncSite, SyncTally

    def site(kind):
        return SyncSite((1,), kind, None, (), None, False)

    assert _call_began(site("item"), 10.0, 0.25) == 9.75
    assert _call_began(site("tolist"), 10.0, 0.5) == 9.5
    assert [_call_began(site(kind), 10.0, 0.25) for kind in ("mask_index", "python_bool", "library")] == [None] * 3
    assert _call_began(site("item"), 10.0, None) is None and _call_began(SyncTally(), 10.0, 0.25) is None
