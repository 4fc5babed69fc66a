"""SIGINT delivered at the N-th line the engine (``syncfree/capture/``) executes, for the
leak tests on CPU (tests/test_leaks.py) and on CUDA (tests/gpu/test_interrupts_gpu.py).

A ``sys.settrace`` function counts the lines executed in capture/ and, at the ``at``-th,
delivers SIGINT there as CPython does: it calls the installed Python handler with the frame
(Python's default raises KeyboardInterrupt; the engine's own handler may hold it back and
raise it at the next check outside the engine, capture/interrupts.py). A KeyboardInterrupt
raised by the trace function leaves the frame at that line and CPython removes the trace
function. A helper module (not conftest.py): tests/gpu has a conftest of its own.

`OpcodeInjector` interrupts at instruction granularity instead, in given code objects only
(a recorder's and a watch's enter and exit, the attach and detach of each engine): at the
N-th point where CPython runs a pending signal handler (Python/ceval.c, CHECK_EVAL_BREAKER:
a function's first instruction, the return of a call, a backward jump), which a real signal
hits and a line-based injection does not (the first instruction of ``Watch.__exit__``, the
return of ``setattr`` before the bookkeeping on the next line). With ``expired`` it is an
interrupt the engine has held back for `interrupts.MAX_HOLD_S` already, as under load.
"""

from __future__ import annotations

import dis
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
                self.fire(frame)
        return self.local_trace

    def fire(self, frame, expired: bool = False) -> None:
        """Deliver SIGINT at ``frame`` as CPython does (``expired``: to an engine that has
        held it back for MAX_HOLD_S already)."""
        self.fired = True
        code = frame.f_code
        self.where = f"{Path(code.co_filename).name}:{frame.f_lineno} ({code.co_name})"
        handler = signal.getsignal(signal.SIGINT)
        if expired and handler is interrupts._handler:
            interrupts._held_since[:] = [time.monotonic() - interrupts.MAX_HOLD_S - 0.1]
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt(f"injected at {self.where}")


#: Instructions after which CPython checks for a pending signal (the return of a call),
#: and those that check it themselves (backward jumps); a function's entry is the other.
_CALLS = ("CALL", "CALL_FUNCTION_EX", "CALL_KW")
_BACKWARD = ("JUMP_BACKWARD", "POP_JUMP_BACKWARD_IF_")  # not JUMP_BACKWARD_NO_INTERRUPT
_OPNAMES: dict = {}


def _opnames(code) -> dict:
    names = _OPNAMES.get(code)
    if names is None:
        names = _OPNAMES[code] = {i.offset: i.opname for i in dis.get_instructions(code)}
    return names


class _FrameOpcodes:
    """The opcode trace of one frame: the instruction before (a call's return is a check)."""

    __slots__ = ("injector", "previous")

    def __init__(self, injector: OpcodeInjector) -> None:
        self.injector = injector
        self.previous: str | None = None  # None: the function's first instruction

    def trace(self, frame, event, arg):
        if event != "opcode":
            return self.trace
        name = _opnames(frame.f_code).get(frame.f_lasti, "")
        previous, self.previous = self.previous, name
        if previous is None or previous in _CALLS or (name.startswith(_BACKWARD)
                                                      and not name.endswith("NO_INTERRUPT")):
            injector = self.injector
            injector.lines += 1
            if injector.lines == injector.at:
                injector.fire(frame, injector.expired)
        return self.trace


class OpcodeInjector(Injector):
    """Interrupting at the ``at``-th signal check (see the module docstring) executed in
    the code objects ``codes``; ``lines`` counts those checks."""

    def __init__(self, at: int | None, codes: set, expired: bool = False) -> None:
        super().__init__(at)
        self.codes = codes
        self.expired = expired

    def global_trace(self, frame, event, arg):
        if frame.f_code in self.codes:
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
            return _FrameOpcodes(self).trace
        return None


# The injector's functions run on top of the traced engine frame: a held-back interrupt
# that the handler meets there belongs to the engine frame below (interrupts.in_engine).
interrupts.transparent.update({Injector.local_trace.__code__, Injector.global_trace.__code__,
                               Injector.fire.__code__, OpcodeInjector.global_trace.__code__,
                               _FrameOpcodes.trace.__code__})


def _check_signals() -> None:
    """A Python call: CPython runs pending signal handlers on entering it."""


def run_traced(scenario: Callable[[], object], at: int | None,
               make: Callable[[int | None], Injector] = Injector) -> Injector:
    """Run ``scenario`` once, interrupted at executed engine line ``at`` (``make``: the
    injector, e.g. an `OpcodeInjector`)."""
    injector = make(at)
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
                      every: int = 1, repair: Callable[[], None] | None = None,
                      make: Callable[[int | None], Injector] = Injector
                      ) -> tuple[int, int, list[str]]:
    """Run ``scenario`` once per executed engine line (or every ``every``-th line; with an
    `OpcodeInjector` from ``make``, per signal check), interrupted there, comparing
    ``snapshot()`` before and after each run; return (lines executed per run, injections
    made, leaks found). ``repair`` puts the process back after a leak, so that the next
    injection is judged on its own."""
    run_traced(scenario, None, make)  # warm up: first-use imports and caches
    lines = run_traced(scenario, None, make).lines
    leaks: list[str] = []
    injected = 0
    for at in range(1, lines + 1, every):
        before = snapshot()
        injector = run_traced(scenario, at, make)
        injected += injector.fired
        changed = diff(before, snapshot())
        if injector.fired and not injector.delivered:
            changed.append("the interrupt was swallowed")
        if changed:
            leaks.append(f"interrupt at engine point {at}, {injector.where}: {', '.join(changed)}")
            if repair is not None:
                repair()
    return lines, injected, leaks
