"""Nothing syncfree does initializes CUDA before the program does.

A process that has initialized CUDA cannot use it in its forked children ("Cannot re-initialize CUDA in forked
subprocess"): a script whose parent never touches CUDA and whose fork Pool workers do ran under python and failed
under `syncfree run` on an H200, because the report's device name was read (torch.cuda.current_device) as the watch
began. GPU twin: tests/gpu/test_run_gpu.py::test_fork_pool_workers_use_cuda_as_under_python_and_replaced_ones_keep_\
their_syncs.
"""

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def uninitialized_cuda(fake_cuda, monkeypatch):
    """A CUDA device the program has not initialized: any call that would initialize it fails the test."""
    state = {"initialized": False}

    def would_initialize(*args, **kwargs):
        if not state["initialized"]:
            raise AssertionError("syncfree initialized CUDA before the program did")
        return 0

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: state["initialized"])
    monkeypatch.setattr(torch.cuda, "_lazy_call", lambda call, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "_lazy_init", would_initialize)
    monkeypatch.setattr(torch.cuda, "current_device", would_initialize)
    monkeypatch.setattr(torch.cuda, "get_device_name",
                        lambda device=None: would_initialize() or "Stand-in GPU")
    return state


def test_a_watch_reads_the_device_name_only_once_the_program_initialized_cuda(uninitialized_cuda):
    import syncfree

    with syncfree.watch() as untouched:
        pass
    assert untouched.report.device == {"kind": "cuda", "name": "CUDA device", "torch": torch.__version__}
    with syncfree.watch() as used:
        uninitialized_cuda["initialized"] = True  # the program's first CUDA call
    assert used.report.device["name"] == "Stand-in GPU"


def test_a_report_built_after_the_program_initialized_cuda_names_the_device(uninitialized_cuda):
    from syncfree.report import build_report, device_info

    device = device_info("cuda")
    assert device["name"] == "CUDA device"
    uninitialized_cuda["initialized"] = True
    assert build_report(source="x = 1\n", device=device, mode="warn")["device"]["name"] == "Stand-in GPU"


def test_the_engine_asks_whether_cuda_is_there_through_nvml_while_the_program_has_not_initialized_it(monkeypatch):
    # torch.cuda.is_available() asks the CUDA runtime (cudaGetDeviceCount) and torch then spoils the process's forks
    # for CUDA, even with CUDA itself left uninitialized (seen on an H200: the engine choice and the recorder asked
    # it in syncfree run's parent, and fork Pool workers failed). NVML answers without the runtime.
    from syncfree.capture.presence import cuda_present
    from syncfree.engine_choice import cuda_available

    def runtime_asked():
        raise AssertionError("asked the CUDA runtime")

    runtime_asked.__module__ = "torch.cuda"  # torch's own function
    monkeypatch.setattr(torch.cuda, "is_available", runtime_asked)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 2)
    assert cuda_available() is True
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 0)  # CUDA_VISIBLE_DEVICES="" hides them all
    assert cuda_available() is False
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1)  # NVML could not tell: the runtime is asked
    with pytest.raises(AssertionError, match="runtime"):
        cuda_present(torch, torch.cuda.is_available)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # initialized already: nothing left to spoil
    with pytest.raises(AssertionError, match="runtime"):
        cuda_present(torch, torch.cuda.is_available)
    assert cuda_present(torch, lambda: True) is True  # a replaced is_available answers as it was made to
