"""Interrupts during a warn/error-mode cell on a real GPU leave nothing behind (issue 13).

The CPU suite injects interrupts into predict mode and into a stand-in debug mode
(tests/test_leaks.py); here the sync debug mode, the explicit-sync wrappers and the
blocked-time profiler are torch's and CUDA's own. SIGINT is delivered as CPython does:
the installed Python handler is called with the frame of the engine line reached
(capture/interrupts.py may hold it back and raise it a moment later, outside the engine).
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
import warnings

import pytest

import injection  # tests/injection.py: the same SIGINT injection as the CPU leak tests

pytestmark = pytest.mark.gpu

CELL = ("y = x @ x\n"
        "s = y.sum().item()\n"
        "torch.cuda.synchronize()\n"
        "m = x[x > 0]\n")


def _state():
    import torch

    from syncfree.capture import dispatch, interrupts
    from syncfree.capture.debug import explicit, hook

    return {
        "filters": (id(warnings.filters), [id(f) for f in warnings.filters]),
        "showwarning": warnings.showwarning,
        "showwarnmsg": warnings._showwarnmsg,
        "filters_mutated": warnings._filters_mutated,
        "debug_mode_functions": (torch.cuda.set_sync_debug_mode, torch.cuda.get_sync_debug_mode),
        "synchronize": torch.cuda.synchronize,
        "event_synchronize": vars(torch.cuda.Event).get("synchronize"),
        "debug_mode": torch.cuda.get_sync_debug_mode(),
        "profile": sys.getprofile(),
        "sigint": signal.getsignal(signal.SIGINT),
        "running": (list(dispatch._running), list(hook._debug_users),
                    list(hook._installed), list(hook._entries)),
        "explicit": (list(explicit._receivers), list(explicit._installed)),
        "holders": list(interrupts._holders),
    }


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_interrupt_at_engine_lines_of_a_cuda_cell(cell, cuda_namespace, mode):
    import torch

    namespace = dict(cuda_namespace, torch=torch)
    c = cell(CELL)

    def run():
        with c.recorder(mode):
            exec(c.code, namespace)

    before = _state()
    lines, injected, leaks = injection.inject_everywhere(run, _state, every=3)
    print(f"\n[leaks] {mode} on CUDA: {lines} engine lines, {injected} interrupts injected, "
          f"{len(leaks)} leaks")
    assert lines > 50 and injected > 15
    assert leaks == []
    assert _state() == before


def test_ctrl_c_stops_a_loop_of_real_syncs(cell, cuda_namespace):
    import torch

    namespace = dict(cuda_namespace, torch=torch)
    c = cell("while True:\n    s = x.sum().item()\n")
    before = _state()
    recorder = c.recorder("warn")
    timer = threading.Timer(0.5, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with recorder:
                exec(c.code, namespace)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 10
    assert recorder.syncs > 10 and recorder.error["type"] == "KeyboardInterrupt"
    assert _state() == before
