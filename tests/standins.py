"""Stand-ins for the source of syncs, for the CPU suite.

The CPU build of torch cannot synchronize. torch turns its C++ warning into a Python
``UserWarning`` raised from the frame that called the C function, and ``warnings.warn`` is
itself a C function, so calling it (through a ``functools.partial``, which adds no Python
frame) from cell code reproduces exactly the stack the recorder sees on a GPU.

A module of its own (not conftest.py): tests/gpu has a conftest too, and pytest imports
both under the name ``conftest``.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import warnings

from syncfree.capture import SYNC_MESSAGE

#: The text torch warns with (c10/cuda/CUDAFunctions.cpp adds where it was triggered).
SYNC_WARNING = SYNC_MESSAGE + " (Triggered internally at stand-in/CUDAFunctions.cpp:0.)"

#: A C-level callable that warns like a syncing torch op: no Python frame of its own.
sync_now = functools.partial(warnings.warn, SYNC_WARNING, UserWarning)


def slow_sync(iterations: int = 400_000) -> None:
    """CPU work then a sync, in library code: a stand-in for a call that waits on the GPU.
    The loop is bytecode only, so no profiling event splits the interval."""
    x = 0
    for i in range(iterations):
        x += i
    sync_now()


class FakeTensor:
    """Methods that "sync" like the CUDA tensor methods of the same names (C functions)."""

    item = staticmethod(sync_now)
    tolist = staticmethod(sync_now)
    cpu = staticmethod(sync_now)

    def sum(self):
        return self

    def __repr__(self):  # a Python frame between the cell and the sync, as in torch/_tensor_str.py
        sync_now()
        return "FakeTensor()"


def _raise_sync_error(tensor):
    # What torch raises in error mode, from a C-level callable: throw() on an exhausted
    # generator raises without running a frame, so the caller's frame is the innermost one.
    # A new exception each time: a reused one would keep its old traceback.
    exhausted = (x for x in ())
    list(exhausted)
    return functools.partial(exhausted.throw, RuntimeError(SYNC_MESSAGE))


class ErrorTensor:
    """``.item()`` raises like a CUDA tensor's under ``set_sync_debug_mode("error")``."""

    item = property(_raise_sync_error)


_cell_numbers = itertools.count(1)


def compile_cell(source: str, filename: str | None = None):
    """Compile ``source`` under a fresh cell filename registered in linecache (as IPython's
    CachingCompiler does), so the recorder can read instruction columns."""
    filename = filename or f"<syncfree-test-cell-{next(_cell_numbers)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return compile(source, filename, "exec"), filename


#: Library code (a path under site-packages, so no watch takes it for the user's): a
#: stand-in for autograd's device thread, started once per process as torch starts its
#: own, which runs what a backward pass hands it, and a gradient hook that hands it work.
LIBRARY_THREAD_SOURCE = """\
import queue, threading
requests = queue.Queue()
def device_loop():
    while True:
        item = requests.get()
        if item is None:
            return
        work, done = item
        try:
            work()
        finally:
            done.set()
def run_on_device(work):
    done = threading.Event()
    requests.put((work, done))
    assert done.wait(10)
def blocking(api, driver, cbid, enter, leave):
    api.callback(None, driver, cbid, enter), api.callback(None, driver, cbid, leave)
"""


def library_device_thread() -> dict:
    """The namespace of `LIBRARY_THREAD_SOURCE`, its device thread started (daemon; put None
    on ``requests`` to end it)."""
    import threading

    namespace: dict = {}
    exec(compile(LIBRARY_THREAD_SOURCE, "/opt/venv/lib/python3/site-packages/fakelib/engine.py", "exec"),
         namespace)
    threading.Thread(target=namespace["device_loop"], name="pt_autograd_0", daemon=True).start()
    return namespace
