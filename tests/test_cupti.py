"""The CUPTI engine without a GPU: engine choice, fallbacks, and the callback's counting
driven by callback data shaped as cupti-python passes it (tests/gpu/test_cupti_gpu.py runs
the real thing on a GPU)."""

from __future__ import annotations

import enum
import functools
import sys
import threading
import time
import types
import warnings
from types import SimpleNamespace

import pytest

from syncfree.capture import SYNC_MESSAGE, engines
from syncfree.capture.cupti import engine as cupti_engine
from syncfree.capture.cupti.engine import (
    BLOCKING_DRIVER,
    CuptiBusy,
    CuptiSession,
    blocking_callback,
    single_layer_callback,
)
from syncfree.capture.recorder import CuptiRecorder
from syncfree.capture.sites import UserFiles

pytest_plugins = ["pytester"]

ENTER, EXIT = SimpleNamespace(callback_site=0), SimpleNamespace(callback_site=1)
RUNTIME, DRIVER = 2, 1


class FakeCupti:
    """The part of cupti-python's ``cupti`` module the engine uses, for a CPU machine where
    CUPTI cannot load: subscribing records the callback, which tests then call as CUPTI
    would, on the thread of the CUDA call."""

    class ApiCallbackSite(enum.IntEnum):
        API_ENTER = 0
        API_EXIT = 1

    class CallbackDomain(enum.IntEnum):
        DRIVER_API = 1
        RUNTIME_API = 2

    driver_api_trace_cbid = enum.IntEnum("driver_api_trace_cbid", {
        "cuCtxSynchronize": 17, "cuStreamSynchronize": 126, "cuMemcpyDtoH_v2": 279,
        "cuMemcpyDtoD_v2": 281, "cuLaunchKernel": 307})
    runtime_api_trace_cbid = enum.IntEnum("runtime_api_trace_cbid", {
        "cudaStreamSynchronize_v3020": 131, "cudaMemcpyAsync_v3020": 41})

    class Result(enum.IntEnum):
        ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39
        ERROR_UNKNOWN = 999

    class cuptiError(Exception):
        def __init__(self, status):
            super().__init__(status)
            self.status = status

    SUBSCRIBER_PARAMS_SIZE = 32

    def __init__(self, holder: str | None = None) -> None:
        self.holder = holder
        self.callback = None
        self.enabled: list[tuple[int, int]] = []
        self.subscriptions = 0

    def SubscriberParams(self):  # noqa: N802 (cupti-python's name)
        self.params = SimpleNamespace(struct_size=0, subscriber_name="", old_subscriber_name="", ptr=1)
        return self.params

    def subscribe_v2(self, callback, userdata, ptr):
        if self.holder is not None:  # CUPTI names the subscriber in place
            self.params.old_subscriber_name = self.holder
            raise self.cuptiError(self.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        self.callback = callback
        self.subscriptions += 1
        return 7

    def enable_callback(self, enable, handle, domain, cbid):
        self.enabled.append((int(domain), int(cbid)))

    def unsubscribe(self, handle):
        self.callback = None


def _recorded():
    calls = []
    return calls, blocking_callback(lambda frame, blocked: calls.append((frame, blocked)))


# ---------------------------------------------------------------------------- the callback


def test_a_runtime_call_and_the_driver_call_inside_it_count_once():
    calls, callback = _recorded()
    callback(None, RUNTIME, 131, ENTER)
    callback(None, DRIVER, 126, ENTER)
    callback(None, DRIVER, 126, EXIT)
    callback(None, RUNTIME, 131, EXIT)
    callback(None, DRIVER, 17, ENTER)  # a driver call alone (Numba)
    callback(None, DRIVER, 17, EXIT)
    assert len(calls) == 2


def test_the_frame_is_the_calling_threads_python_frame_and_blocked_time_spans_the_call():
    calls, callback = _recorded()

    def user_code():
        callback(None, DRIVER, 126, ENTER)
        time.sleep(0.02)
        callback(None, DRIVER, 126, EXIT)
        return sys._getframe()

    frame = user_code()
    ((seen, blocked),) = calls
    assert seen is frame
    assert 0.02 <= blocked < 1.0


def test_an_exit_whose_enter_came_before_the_subscription_is_not_counted():
    calls, callback = _recorded()
    callback(None, DRIVER, 126, EXIT)
    assert calls == []


def test_threads_are_counted_apart():
    calls, callback = _recorded()
    inside = threading.Event()
    done = threading.Event()

    def worker():
        callback(None, DRIVER, 126, ENTER)
        inside.set()
        done.wait(5)
        callback(None, DRIVER, 126, EXIT)

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait(5)
    callback(None, DRIVER, 17, ENTER)  # the main thread's call, while the worker waits
    callback(None, DRIVER, 17, EXIT)
    done.set()
    thread.join(5)
    assert len(calls) == 2
    assert {frame.f_code.co_name for frame, _ in calls} == {"worker", "test_threads_are_counted_apart"}


def test_a_cuda_call_made_while_recording_is_not_counted_again():
    calls = []

    def record(frame, blocked):
        calls.append(frame)
        callback(None, DRIVER, 126, ENTER)  # e.g. a first-sync classification touching CUDA
        callback(None, DRIVER, 126, EXIT)

    callback = blocking_callback(record)
    callback(None, DRIVER, 126, ENTER)
    callback(None, DRIVER, 126, EXIT)
    assert len(calls) == 1
    callback(None, DRIVER, 126, ENTER)
    callback(None, DRIVER, 126, EXIT)
    assert len(calls) == 2


def test_a_failure_while_recording_is_reported_not_raised_into_cuda():
    errors = []

    def record(frame, blocked):
        raise LookupError("boom")

    callback = blocking_callback(record, on_error=errors.append)
    callback(None, DRIVER, 126, ENTER)
    callback(None, DRIVER, 126, EXIT)  # returns normally
    assert [type(e) for e in errors] == [LookupError]


def test_ctrl_c_inside_the_callback_reaches_the_main_thread():
    def record(frame, blocked):
        raise KeyboardInterrupt

    callback = blocking_callback(record)
    callback(None, DRIVER, 126, ENTER)
    with pytest.raises(KeyboardInterrupt):
        callback(None, DRIVER, 126, EXIT)  # swallowed there, raised again here
        for _ in range(1000):
            time.sleep(0.001)


class Side:
    """Callback data that counts how often the callback asks which side of a call it is
    (reading a field of cupti-python's data costs more than the rest of the callback)."""

    reads = 0

    def __init__(self, site: int) -> None:
        self._site = site

    @property
    def callback_site(self) -> int:
        Side.reads += 1
        return self._site


def test_one_layer_counts_each_call_once_asking_cupti_only_now_and_then():
    calls = []
    callback = single_layer_callback(lambda frame, blocked: calls.append((frame, blocked)))
    enter, exit_ = Side(0), Side(1)
    Side.reads = 0
    for _ in range(500):
        callback(None, DRIVER, 126, enter)
        callback(None, DRIVER, 126, exit_)
    assert len(calls) == 500
    assert Side.reads <= cupti_engine.CHECK_FIRST + 1000 // cupti_engine.CHECK_EVERY


def test_one_layer_an_exit_whose_enter_came_before_the_subscription_is_not_counted():
    calls = []
    callback = single_layer_callback(lambda frame, blocked: calls.append(blocked))
    callback(None, DRIVER, 126, EXIT)  # the thread was waiting when the watch began
    for _ in range(3):
        callback(None, DRIVER, 126, ENTER)
        time.sleep(0.01)
        callback(None, DRIVER, 126, EXIT)
    assert len(calls) == 3 and all(0.01 <= b < 1.0 for b in calls)


def test_one_layer_a_thread_out_of_step_keeps_its_counts_and_is_put_right():
    calls = []
    callback = single_layer_callback(lambda frame, blocked: calls.append(blocked))
    for _ in range(cupti_engine.CHECK_FIRST):  # in step, checked
        callback(None, DRIVER, 126, ENTER)
        callback(None, DRIVER, 126, EXIT)
    callback(None, DRIVER, 126, EXIT)  # entered while its callback was being enabled
    real = cupti_engine.CHECK_EVERY
    for _ in range(real):
        callback(None, DRIVER, 126, ENTER)
        callback(None, DRIVER, 126, EXIT)
    assert len(calls) - cupti_engine.CHECK_FIRST in (real, real + 1)  # every call once
    calls.clear()
    callback(None, DRIVER, 126, ENTER)
    time.sleep(0.02)
    callback(None, DRIVER, 126, EXIT)
    assert len(calls) == 1 and 0.02 <= calls[0] < 1.0  # in step again: timed from its enter


def test_one_layer_threads_apart_and_calls_made_while_recording_ignored():
    calls = []

    def record(frame, blocked):
        calls.append(frame.f_code.co_name)
        callback(None, DRIVER, 126, ENTER)  # e.g. a first-sync classification touching CUDA
        callback(None, DRIVER, 126, EXIT)

    callback = single_layer_callback(record)
    inside, done = threading.Event(), threading.Event()

    def worker():
        callback(None, DRIVER, 126, ENTER)
        inside.set()
        done.wait(5)
        callback(None, DRIVER, 126, EXIT)

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait(5)
    for _ in range(10):
        callback(None, DRIVER, 17, ENTER)
        callback(None, DRIVER, 17, EXIT)
    done.set()
    thread.join(5)
    assert sorted(calls) == ["test_one_layer_threads_apart_and_calls_made_while_recording_ignored"] * 10 \
        + ["worker"]


def test_the_session_on_one_layer_infers_the_side_of_most_events():
    api = FakeCupti()
    calls = []
    session = CuptiSession(lambda frame, blocked: calls.append(frame), api=api)
    session.start()
    enter, exit_ = Side(0), Side(1)
    Side.reads = 0
    for _ in range(200):
        api.callback(None, DRIVER, 126, enter)
        api.callback(None, DRIVER, 126, exit_)
    session.stop()
    assert len(calls) == 200 and Side.reads < 20


# ---------------------------------------------------------------------------- the session


def test_the_session_enables_the_blocking_driver_calls_only():
    api = FakeCupti()
    session = CuptiSession(lambda frame, blocked: None, api=api)
    session.start()
    assert session.running
    names = {FakeCupti.driver_api_trace_cbid(cbid).name for _, cbid in api.enabled}
    assert names == {"cuCtxSynchronize", "cuStreamSynchronize", "cuMemcpyDtoH_v2"}
    assert names <= set(BLOCKING_DRIVER)
    assert {domain for domain, _ in api.enabled} == {DRIVER}
    session.stop()
    session.stop()  # idempotent
    assert api.callback is None and not session.running


def test_a_busy_cupti_names_its_holder():
    with pytest.raises(CuptiBusy, match="another tool holds CUPTI"):
        CuptiSession(lambda frame, blocked: None, api=FakeCupti(holder="kineto")).start()


# ---------------------------------------------------------------------------- the recorder


def _sync_here(api):
    # A blocking call as CUPTI reports it: enter and exit callbacks on the calling thread,
    # from C (so the innermost Python frame is this line, the one every test expects).
    api.callback(None, DRIVER, 126, ENTER), time.sleep(0.005), api.callback(None, DRIVER, 126, EXIT)


SYNC_LINE = _sync_here.__code__.co_firstlineno + 3


def test_the_cupti_recorder_attributes_times_and_aggregates():
    api = FakeCupti()
    recorder = CuptiRecorder("warn", cell_files=UserFiles(), cupti_api=api)
    with recorder:
        for _ in range(3):
            _sync_here(api)
    assert recorder.engine == "cupti"
    (site,) = recorder.sites
    assert (site.file, site.line, site.count) == (__file__, SYNC_LINE, 3)
    assert site.blocked_ms >= 15
    assert api.callback is None  # unsubscribed at exit


def test_nested_cupti_recorders_share_one_subscription():
    api = FakeCupti()
    outer = CuptiRecorder("warn", cell_files=UserFiles(), cupti_api=api)
    inner = CuptiRecorder("warn", cell_files=UserFiles(), cupti_api=api)
    with outer:
        with inner:
            _sync_here(api)
        assert api.callback is not None  # the outer one still records
        _sync_here(api)
    assert api.subscriptions == 1 and api.callback is None
    # Each sync is delivered once, to the innermost recorder; a nested recorder's parent
    # (dispatch.py: the recorder already recording this thread) goes on counting it too.
    assert inner.syncs == 1
    assert outer.syncs == 1 + (getattr(inner, "parent", None) is outer)


def test_a_blocking_call_on_autograds_thread_belongs_to_the_watch_that_called_backward(monkeypatch):
    """CUPTI sees a backward pass's blocking calls on autograd's device thread (a library
    hook's, a C++ node's), whose context routes to no watch: a watched test (a context
    recorder) lost them to "unowned". They are the watch's whose thread called backward,
    attributed to that line (the device thread's own frames are the library's)."""
    torch = pytest.importorskip("torch")
    from standins import library_device_thread
    from syncfree.capture import dispatch

    monkeypatch.setattr(torch._C, "_current_graph_task_id", lambda: 0)
    api = FakeCupti()
    library = library_device_thread()
    x = torch.ones(3, requires_grad=True)
    blocking = functools.partial(library["blocking"], api, DRIVER, 126, ENTER, EXIT)  # no frame of this file
    x.register_hook(lambda grad: library["run_on_device"](blocking))
    recorder = CuptiRecorder("warn", cell_files=UserFiles(), cupti_api=api, scope="context")
    try:
        with recorder:
            token = dispatch.route(recorder)
            try:
                (x * 2).sum().backward()
                line = sys._getframe().f_lineno - 1
            finally:
                dispatch.unroute(token, recorder)
    finally:
        library["requests"].put(None)
    assert recorder.engine == "cupti" and recorder.syncs == 1, recorder.notes
    (site,) = recorder.sites
    assert (site.file, site.line, site.count, site.thread) == (__file__, line, 1, None)
    assert torch.autograd._engine_run_backward.__module__ == "torch.autograd.graph"


def test_a_busy_cupti_falls_back_to_debug_mode_and_says_so():
    # Seen on an H200: under torch.profiler the fallback's first sync raised a TypeError
    # out of the program (the hook passes the backward caller; the override took none).
    recorder = CuptiRecorder("warn", cell_files=UserFiles(), cupti_api=FakeCupti(holder="kineto"))
    with recorder:
        line = sys._getframe().f_lineno + 1
        warnings.warn(SYNC_MESSAGE, UserWarning)  # what debug mode issues at a torch sync
    assert recorder.engine == "debug"
    assert [(site.file, site.line, site.count) for site in recorder.sites] == [(__file__, line, 1)]
    assert any("CUPTI engine unavailable: another tool holds CUPTI (kineto)" in n
               and "debug mode used instead" in n for n in recorder.notes), recorder.notes


def test_the_cupti_recorder_is_warn_mode_only():
    with pytest.raises(ValueError, match="warn mode only"):
        CuptiRecorder("error", cell_files=UserFiles())


# ---------------------------------------------------------------------------- engine choice


@pytest.fixture
def cupti_installed(monkeypatch):
    monkeypatch.setattr(engines, "cupti_problem", lambda: None)


@pytest.fixture
def no_bypassing_library(monkeypatch):
    for name in engines.BYPASSING_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_auto_keeps_debug_mode_for_torch_only_code(cupti_installed, no_bypassing_library):
    assert engines.choose(None, "warn") == ("debug", [])
    assert engines.choose("auto", "warn") == ("debug", [])


def test_auto_takes_cupti_once_a_library_that_bypasses_torch_is_imported(
        cupti_installed, no_bypassing_library, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    choice = engines.choose("auto", "warn")
    assert choice.engine == "cupti"
    assert choice.notes == ["CUPTI engine: cupy calls CUDA without torch"]


def test_auto_keeps_debug_mode_when_only_triton_is_imported(cupti_installed, no_bypassing_library,
                                                            monkeypatch):
    # inductor imports triton in every torch.compile process; on torch-only code (Triton
    # kernels and do_bench included) debug mode missed nothing blocking (sync-facts.md).
    for name in ("triton", "triton.runtime", "triton.language"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    assert engines.choose("auto", "warn") == ("debug", [])
    assert engines.choose("auto", "warn", sources=["import triton\nimport triton.language as tl\n"]) \
        == ("debug", [])
    assert engines.unseen_note(()) is None


def test_auto_reads_the_imports_of_the_code_about_to_run(cupti_installed, no_bypassing_library):
    source = "import torch\nfrom numba import cuda\n"
    assert engines.choose("auto", "warn", sources=[source]).engine == "cupti"
    assert engines.choose("auto", "warn", sources=["x = 'import cupy'"]).engine == "debug"


def test_auto_without_cupti_python_says_what_debug_mode_misses(no_bypassing_library, monkeypatch):
    monkeypatch.setattr(engines, "cupti_problem", lambda: "cupti-python is not installed "
                        "(pip install 'syncfree[cupti]')")
    choice = engines.choose("auto", "warn", sources=["import cupy"])
    assert choice.engine == "debug"
    assert choice.notes == ["cupy calls CUDA without torch, and debug mode does not see those "
                            "syncs; the CUPTI engine would (cupti-python is not installed "
                            "(pip install 'syncfree[cupti]'))"]


def test_asking_for_cupti_without_cupti_python_falls_back_with_the_install_hint():
    if engines.cupti_problem() is None:
        pytest.skip("cupti-python is installed and loads here")
    choice = engines.choose("cupti", "warn")
    assert choice.engine == "debug"
    (note,) = choice.notes
    assert note.startswith("--engine cupti: cupti-python is not installed (pip install 'syncfree[cupti]')")
    assert note.endswith("debug mode used instead (torch's syncs only)")


def test_error_and_predict_modes_keep_their_engines(cupti_installed):
    choice = engines.choose("cupti", "error")
    assert choice.engine == "debug" and "cannot stop one before it happens" in choice.notes[0]
    # Without a GPU the engine asked for is not used, and the report says so (it was dropped in silence).
    choice = engines.choose("cupti", "predict")
    assert choice.engine == "debug" and "needs a CUDA device" in choice.notes[0] and "predict mode" in choice.notes[0]
    assert engines.choose("auto", "predict") == ("debug", [])


def test_an_unknown_engine_is_one_clear_error():
    with pytest.raises(ValueError, match=r"engine must be one of debug, cupti, auto, not 'fast'"):
        engines.choose("fast", "warn")
    import syncfree

    with pytest.raises(ValueError, match="engine must be one of"):
        syncfree.watch(engine="fast")


def test_watch_takes_an_engine_and_runs_without_cuda():
    import syncfree

    with syncfree.watch(engine="cupti") as watch:
        pass
    assert watch.report is not None
    assert watch.engine.engine in ("debug", "cupti")


def test_the_engine_module_names_its_install_hint():
    assert cupti_engine.INSTALL_HINT == "pip install 'syncfree[cupti]'"


def test_the_magic_takes_an_engine_and_rejects_an_unknown_one():
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("load_ext", "syncfree")
    ip.run_cell_magic("syncfree", "--engine debug --quiet", "x = 1\n")
    assert ip.user_ns["_syncfree_report"]["mode"] in ("warn", "predict", "static")
    with pytest.raises(UsageError):
        ip.run_cell_magic("syncfree", "--engine fast", "x = 1\n")


def test_pyproject_names_the_engine(tmp_path):
    from syncfree.config import ConfigError, find_config

    (tmp_path / "pyproject.toml").write_text('[tool.syncfree]\nengine = "cupti"\n')
    assert find_config(tmp_path).engine == "cupti"
    (tmp_path / "pyproject.toml").write_text('[tool.syncfree]\nengine = "fast"\n')
    with pytest.raises(ConfigError, match="engine must be debug, cupti or auto"):
        find_config(tmp_path)


def test_a_debug_mode_report_says_which_library_imported_meanwhile_it_did_not_see(
        no_bypassing_library, monkeypatch):
    from syncfree.engine_choice import Engine, unseen_libraries

    engine = Engine("warn", {"name": "GPU"}, engine="debug", libraries=())
    assert unseen_libraries(engine) == []
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))  # a script's `import cupy`
    assert unseen_libraries(engine) == ["cupy was imported during the run and calls CUDA without torch: "
                                        "debug mode did not see those syncs (--engine cupti does)"]
    assert unseen_libraries(Engine("warn", {}, engine="debug", libraries=("cupy",))) == []
    assert unseen_libraries(Engine("warn", {}, engine="cupti")) == []
    assert unseen_libraries(Engine("predict", {}, engine="debug")) == []


def test_pytest_takes_an_engine_option(pytester):
    pytest.importorskip("torch")
    pytester.makepyfile(test_loop="""
        import pytest

        @pytest.mark.sync_free
        def test_nothing_syncs():
            assert 1 + 1 == 2
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncfree-engine", "debug")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncfree-engine", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--syncfree-engine: invalid choice: 'fast'*"])


def test_syncfree_run_takes_an_engine(tmp_path):
    import subprocess

    script = tmp_path / "step.py"
    script.write_text("print('ran')\n")
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--engine", "debug", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ran" in done.stdout
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--engine", "fast", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "invalid choice: 'fast'" in done.stderr and "Traceback" not in done.stderr


def test_a_script_run_lets_auto_read_the_programs_imports(tmp_path, monkeypatch):
    from syncfree import script_run

    asked = []

    def choose(engine, mode, *, sources=()):
        asked.append((engine, list(sources)))
        return engines.EngineChoice("debug", [])

    monkeypatch.setattr(engines, "choose", choose)
    script = tmp_path / "mixed.py"
    script.write_text("import math  # stands for: import cupy\n")
    script_run.run_script(str(script), engine="auto")
    assert asked == [("auto", ["import math  # stands for: import cupy\n"])]
