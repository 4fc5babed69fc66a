"""Real interrupts at random moments of a short ``%%syncfree`` cell: count leaks (issue 13).

    .venv/bin/python bench/stress_interrupts.py [--tries 10000] [--seed 0]

Runs in a real IPython shell (IPython.testing.globalipapp) on this machine's torch, so on a
CPU-only machine the cell runs in predict mode (the stand-ins, the patched torch
functions, the function mode). Half the tries run a ``%%syncfree`` cell, half a plain
cell watched by ``%syncfree on``. For each try a timer thread calls
``_thread.interrupt_main()`` after a random delay within the cell's duration (as
ipykernel's interrupt does: SIGINT's Python handler runs in the main thread). After each
try the state that tests/test_leaks.py snapshots (patched torch functions, torch's
function-mode stack, warning filters and ``showwarning``, the sync debug mode, active
recorders and predict sessions, the SIGINT handler) must be as before, and the magic must
hold no running recorder. Prints tries, interrupts delivered, leaks and the wall time.
"""

from __future__ import annotations

import _thread
import argparse
import os
import random
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "python_helper")]

from IPython.testing import globalipapp  # noqa: E402

import test_leaks as t  # noqa: E402
from syncfree.capture import interrupts  # noqa: E402

CELL = ("x = torch.ones(3, device='cuda')\n"
        "s = x.sum().item()\n"
        "torch.cuda.synchronize()\n"
        "ok = bool(x.sum() > 0)\n")


def _check_signals() -> None:
    """A Python call: CPython runs pending signal handlers on entering it."""


def _settle() -> None:
    """Wait for an interrupt the engine held back to be raised again (interrupts.py)."""
    deadline = time.monotonic() + 2.0
    while interrupts.outstanding() and time.monotonic() < deadline:
        time.sleep(0.0005)
    _check_signals()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.tries < 1:
        parser.error("--tries must be at least 1")
    rng = random.Random(args.seed)
    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "syncfree")
    magics = shell.magics_manager.registry["SyncfreeMagics"]
    shell.user_ns["torch"] = t.torch
    cells = {"%%syncfree": "%%syncfree\n" + CELL, "%syncfree on": CELL}
    out = sys.stdout
    # IPython shows an interrupt that lands in an event callback (EventManager.trigger)
    # without failing the cell: seen here.
    shown: list[str] = []
    showtraceback = shell.showtraceback

    def recording_showtraceback(*a, **k):
        exc = sys.exc_info()[1]
        if isinstance(exc, KeyboardInterrupt):
            shown.append(type(exc).__name__)
        return showtraceback(*a, **k)

    shell.showtraceback = recording_showtraceback
    # CPython drops an interrupt that lands in a finalizer outside the engine ("Exception
    # ignored in"): counted apart (the engine raises those again while it holds SIGINT).
    dropped: list[str] = []
    unraisablehook = sys.unraisablehook

    def counting_unraisablehook(unraisable):
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            dropped.append(repr(unraisable.object)[:80])
            return
        unraisablehook(unraisable)

    sys.unraisablehook = counting_unraisablehook
    delivered = leaks = lost_in_finalizer = 0
    by_kind = dict.fromkeys(cells, 0)
    with open(os.devnull, "w") as null, redirect_stdout(null), redirect_stderr(null):
        durations = {}
        for kind, cell in cells.items():
            if kind == "%syncfree on":
                shell.run_line_magic("syncfree", "on --quiet")
            else:
                shell.run_line_magic("syncfree", "off")
            for _ in range(5):  # warm up
                shell.run_cell(cell, store_history=False)
            start = time.perf_counter()
            for _ in range(20):
                shell.run_cell(cell, store_history=False)
            durations[kind] = (time.perf_counter() - start) / 20
        shell.run_line_magic("syncfree", "off")
        started = time.perf_counter()
        for i in range(args.tries):
            kind = "%%syncfree" if i % 2 == 0 else "%syncfree on"
            shell.run_line_magic("syncfree", "on --quiet" if kind == "%syncfree on" else "off")
            before = t.snapshot()
            timer = threading.Timer(rng.uniform(0, durations[kind] * 1.2), _thread.interrupt_main)
            got = False
            shown.clear()
            dropped_before = len(dropped)
            shell.last_execution_result = None
            try:
                try:
                    timer.start()
                    shell.run_cell(cells[kind], store_history=False)
                    timer.join()
                    _settle()
                except KeyboardInterrupt:
                    got = True
                finally:
                    timer.cancel()
                timer.join()
                _settle()
            except KeyboardInterrupt:  # one that arrived after the cell
                got = True
            # IPython catches an interrupt inside the cell and shows it; either way it came.
            result = shell.last_execution_result
            came = got or bool(shown) or (
                result is not None and isinstance(result.error_in_exec, KeyboardInterrupt))
            delivered += came
            lost_in_finalizer += not came and len(dropped) > dropped_before
            changed = t.diff(before, t.snapshot())
            if magics._watched is not None and magics._cell_info is None:
                changed.append("the magic holds a watched recorder after the cell")
            if changed:
                leaks += 1
                by_kind[kind] += 1
                print(f"leak ({kind}, try {i}):", ", ".join(changed)[:300], file=out)
                t._repair()
                magics._watched = None
        wall = time.perf_counter() - started
        shell.run_line_magic("syncfree", "off")
    shell.showtraceback = showtraceback
    sys.unraisablehook = unraisablehook
    cells_ms = ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in durations.items())
    print(f"{args.tries} tries of a short cell in predict mode ({cells_ms}), {delivered} "
          f"interrupts delivered ({lost_in_finalizer} more dropped by CPython in a finalizer "
          f"outside the engine), {leaks} leaks "
          f"({', '.join(f'{k}: {v}' for k, v in by_kind.items())}); wall {wall:.1f} s",
          file=out)
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
