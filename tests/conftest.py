"""Shared fixtures for the CPU suite: a stand-in CUDA debug-mode switch and a snapshot of
the process-global state a recorder touches (the stand-in syncs are in standins.py).

IPython is not imported here: the GPU machine runs tests/gpu without it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import shutil
import signal
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import pytest

# The suite's Ctrl-C tests (engine hold-back, `syncfree run` and torchrun children exiting 130) need SIGINT
# delivered as at a terminal. A shell without job control (`make test &`, nohup, some CI runners) starts its
# background commands with SIGINT ignored, and every child would inherit that: Python then installs no
# KeyboardInterrupt handler and the tests' interrupts land nowhere. Put Python's default back, as pytest run
# from a terminal has it; the processes the suite starts then get SIGINT's default too (exec resets a handled
# signal, not an ignored one).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# `syncfree check` from the command line keeps a result cache (syncfree/cli/cache.py): the suite's commands keep
# theirs in a folder of their own, not in the checkout's .syncfree_cache.
if "SYNCFREE_CACHE_DIR" not in os.environ:
    os.environ["SYNCFREE_CACHE_DIR"] = tempfile.mkdtemp(prefix="syncfree-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SYNCFREE_CACHE_DIR"], ignore_errors=True)

# Each pytest process (each pytest-xdist worker: `make test` runs several) keeps its temporary files, and those of
# the programs it starts, in a folder of its own: a test that checks its runs left nothing in the temp folder
# (tests/test_cli_run.py's syncfree-exec-*.json) must not see the files of a run beside it in another worker, or
# of another checkout's suite on the same machine. The folder's path stays short (a kernel's Unix sockets go under
# it: 107 bytes at most). pytest's own tmp_path folders stay where they were (PYTEST_DEBUG_TEMPROOT).
# One folder per process: a worker inherits the controller's environment, TMPDIR included.
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
os.environ["TMPDIR"] = tempfile.tempdir = tempfile.mkdtemp(prefix="sf-", dir=os.environ["PYTEST_DEBUG_TEMPROOT"])
atexit.register(shutil.rmtree, tempfile.tempdir, ignore_errors=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))


@pytest.fixture(autouse=True)
def _excepthook_as_before():
    """torch.distributed's init_process_group puts its own sys.excepthook in for good (it prefixes "[rank0]:"): a
    test that starts a process group in-process changed how every later test's uncaught exception is printed."""
    hook = sys.excepthook
    yield
    sys.excepthook = hook


@pytest.fixture(autouse=True)
def _checkout_in_pytester_subprocesses(request):
    """A pytester subprocess runs in a folder of its own, where a relative
    ``PYTHONPATH=python_helper`` finds nothing: its pytest then loads the installed
    syncfree's plugin (another checkout's, for an editable install in a shared venv),
    not this checkout's. Its PYTHONPATH starts with this checkout's python_helper."""
    if "pytester" not in request.fixturenames:
        yield
        return
    monkeypatch = request.getfixturevalue("monkeypatch")
    here = str(Path(__file__).resolve().parents[1] / "python_helper")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    yield


class FakeDebugMode:
    """torch.cuda.{is_available,get_sync_debug_mode,set_sync_debug_mode} of a CUDA build."""

    def __init__(self) -> None:
        self.mode = 0
        self.history: list[int] = []

    def get(self) -> int:
        return self.mode

    def set(self, mode) -> None:
        self.mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode)
        self.history.append(self.mode)


@pytest.fixture
def short_tmp():
    """A temp folder with a short path (under /tmp): a kernel's Unix sockets fit in it whatever pytest's
    basetemp is (xdist's is longer), so a notebook run's sockets are where the test looks for them."""
    folder = Path(tempfile.mkdtemp(prefix="sf-t-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Make the recorder believe a CUDA device is there; explicit syncs become no-ops."""
    torch = pytest.importorskip("torch")
    debug = FakeDebugMode()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # A program that has used CUDA already (the engine sets the mode at once; before that it waits: test_recorder's
    # test_debug_mode_leaves_cuda_uninitialized_until_the_program_initializes_it).
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", debug.get)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", debug.set)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Stand-in GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def synchronize(device=None):
        debug.history.append("device-synchronize")

    def event_synchronize(self):
        debug.history.append("event-synchronize")

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", event_synchronize)
    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: None)
    yield debug
    # torch's own functions back, then dynamo's table of them where a compile built it on these stand-ins (after
    # torch.distributed's init_process_group had cleared it): later compiles in this worker see torch's functions.
    monkeypatch.undo()
    from syncfree.capture import dynamo_tables

    dynamo_tables.drop_stale()


@pytest.fixture
def global_state():
    """A snapshot of everything a recorder touches, to compare after it exits."""
    torch = pytest.importorskip("torch")

    def snapshot():
        return {
            "filters_list": warnings.filters,
            "filters": list(warnings.filters),
            "showwarning": warnings.showwarning,
            "synchronize": torch.cuda.synchronize,
            "event_synchronize": vars(torch.cuda.Event).get("synchronize"),
            "debug_mode": torch.cuda.get_sync_debug_mode() if torch.cuda.is_available() else None,
            "profile": sys.getprofile(),
            "thread_start": threading.Thread.start,  # capture/threads.py
            "pool_submit": concurrent.futures.ThreadPoolExecutor.submit,
        }

    return snapshot


USERLIB = '''\
import torch


def read(x):
    return x.sum().item()


def positives(x):
    return x[x > 0]  # syncfree: allow[mask_index]
'''


@pytest.fixture
def userlib(tmp_path, monkeypatch):
    """A user's module in another file (``userlib.py``: ``read`` syncs on line 5,
    ``positives`` on line 9 under an allow comment), imported from sys.path like a
    project's package; for the API tests on CPU and on CUDA."""
    (tmp_path / "userlib.py").write_text(USERLIB)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("userlib", None)
    import userlib

    yield userlib
    sys.modules.pop("userlib", None)
