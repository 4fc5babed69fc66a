"""SIGINT delivered at the N-th line the engine (``syncfree/capture/``) executes, for the
leak tests on CPU (tests/test_leaks.py) and on CUDA (tests/gpu/test_interrupts_gpu.py).

A ``sys.settrace`` function counts the lines executed in capture/ and, at the ``at``-th,
delivers SIGINT there as CPython does: it calls the installed Python handler with the frame
(Python's default raises KeyboardInterrupt; the engine's own handler may hold it back and
raise it at the next check outside the engine, capture/interrupts.py). A KeyboardInterrupt
raised by the trace function leaves the frame at that line and CPython removes the trace
function. A helper module (not conftest.py): tests/gpu has a conftest of its own.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import syncfree.capture as capture_package
from syncfree.capture import interrupts

CAPTURE_DIR = str(Path(capture_package.__file__).resolve().parent)


class Injector:
    """The trace function of one run, interrupting at executed engine line ``at`` (None:
    only count)."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.lines = 0
        self.fired = False
        self.delivered = False
        self.where = ""

    def global_trace(self, frame, event, arg):
        if frame.f_code.co_filename.startswith(CAPTURE_DIR):
            return self.local_trace
        return None

    def local_trace(self, frame, event, arg):
        if event == "line":
            self.lines += 1
            if self.lines == self.at:
                self.fired = True
                code = frame.f_code
                self.where = f"{Path(code.co_filename).name}:{frame.f_lineno} ({code.co_name})"
                handler = signal.getsignal(signal.SIGINT)
                if callable(handler):
                    handler(signal.SIGINT, frame)
                else:
                    raise KeyboardInterrupt(f"injected at line {self.at}")
        return self.local_trace


# The injector's functions run on top of the traced engine frame: a held-back interrupt
# that the handler meets there belongs to the engine frame below (interrupts.in_engine).
interrupts.transparent.update({Injector.local_trace.__code__, Injector.global_trace.__code__})


def _check_signals() -> None:
    """A Python call: CPython runs pending signal handlers on entering it."""


def run_traced(scenario: Callable[[], object], at: int | None) -> Injector:
    """Run ``scenario`` once, interrupted at executed engine line ``at``."""
    injector = Injector(at)
    sys.settrace(injector.global_trace)
    try:
        try:
            scenario()
        except KeyboardInterrupt:
            injector.delivered = True
        except BaseException:  # noqa: B036 (what the cell raises, e.g. in error mode)
            pass
        finally:
            sys.settrace(None)
        # An interrupt the engine held back is raised again a moment later (interrupts.py).
        deadline = time.monotonic() + 2.0
        while interrupts.outstanding() and time.monotonic() < deadline:
            time.sleep(0.0005)
        _check_signals()  # ... here, when the run ended first
    except KeyboardInterrupt:
        injector.delivered = True
    return injector


def diff(before: dict, after: dict) -> list[str]:
    """The keys of two snapshots whose values differ (or that one of them lacks)."""
    keys = set(before) | set(after)
    return sorted(str(k) for k in keys if before.get(k, "<absent>") != after.get(k, "<absent>"))


def inject_everywhere(scenario: Callable[[], object], snapshot: Callable[[], dict], *,
                      every: int = 1, repair: Callable[[], None] | None = None
                      ) -> tuple[int, int, list[str]]:
    """Run ``scenario`` once per executed engine line (or every ``every``-th line),
    interrupted there, comparing ``snapshot()`` before and after each run; return (lines
    executed per run, injections made, leaks found). ``repair`` puts the process back after
    a leak, so that the next injection is judged on its own."""
    run_traced(scenario, None)  # warm up: first-use imports and caches
    lines = run_traced(scenario, None).lines
    leaks: list[str] = []
    injected = 0
    for at in range(1, lines + 1, every):
        before = snapshot()
        injector = run_traced(scenario, at)
        injected += injector.fired
        changed = diff(before, snapshot())
        if injector.fired and not injector.delivered:
            changed.append("the interrupt was swallowed")
        if changed:
            leaks.append(f"interrupt at engine line {at}, {injector.where}: {', '.join(changed)}")
            if repair is not None:
                repair()
    return lines, injected, leaks
