"""Real interrupts at random moments of a short predict-mode cell: count leaks (issue 13).

    .venv/bin/python bench/stress_interrupts.py [tries] [seed]

A timer thread calls ``_thread.interrupt_main()`` after a random delay within the
cell's duration; after each try the state that tests/test_leaks.py snapshots (patched
torch functions, mode stack, warning filters, showwarning, active recorder/session) must
be as before. Prints tries, interrupts delivered, leaks.
"""

from __future__ import annotations

import _thread
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "python_helper")]

import test_leaks as t  # noqa: E402


def main(tries: int = 10_000, seed: int = 0) -> int:
    rng = random.Random(seed)
    t._run_traced(t.predict_cell, None)  # warm up
    start = time.perf_counter()
    for _ in range(20):
        t.predict_cell()
    duration = (time.perf_counter() - start) / 20
    delivered = leaks = 0
    for _ in range(tries):
        before = t.snapshot()
        timer = threading.Timer(rng.uniform(0, duration * 1.2), _thread.interrupt_main)
        try:
            timer.start()
            t.predict_cell()
            timer.join()
            time.sleep(0)  # an interrupt that arrives after the cell lands here
        except KeyboardInterrupt:
            delivered += 1
        finally:
            timer.cancel()
        try:
            timer.join()
            after = t.snapshot()
        except KeyboardInterrupt:
            delivered += 1
            after = t.snapshot()
        changed = t.diff(before, after)
        if changed:
            leaks += 1
            print("leak:", ", ".join(changed)[:300])
            t._repair()
    print(f"{tries} tries of a {duration * 1000:.2f} ms predict cell, {delivered} interrupts "
          f"delivered, {leaks} leaks")
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:3])))
