"""Where the time of a big ``%%syncfree`` cell goes (a profiling aid for bench/slow_paths.py).

    python scripts/profile_big_cell.py [lines|reads|loop] [--top 40] [--options "--no-blocked"]

Runs the cell once to warm up, then once with its phases timed (CPU time of the static pass,
the sync hook, the site attribution, the report, and Python's cycle collections), then once
under cProfile (main thread), and prints the functions by own time and by cumulative time.
Needs IPython; on a GPU the magic runs in warn mode.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python_helper"))
sys.path.insert(0, str(ROOT / "bench"))

import slow_paths  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cell", choices=("lines", "reads", "loop"))
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--options", default="--quiet")
    args = parser.parse_args()
    import torch
    from IPython.testing import globalipapp

    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "syncfree")
    shell.user_ns["torch"] = torch
    if args.cell == "lines":
        body = slow_paths.distinct_lines(10_000)
    elif args.cell == "reads":
        body = slow_paths.reads(1_000)
    else:
        body = "for i in range(10000):\n    v = x[i % 64].item()\n"
    cell = slow_paths.PRELUDE + body
    magic = f"%%syncfree {args.options}\n{cell}"
    out = sys.stdout
    with open(os.devnull, "w") as null, redirect_stdout(null):
        shell.run_cell(slow_paths.PRELUDE)
        for text in (cell, magic):
            shell.run_cell(text)
        timings = {}
        for name, text in (("plain", cell), ("magic", magic)):
            start = time.thread_time()
            shell.run_cell(text)
            timings[name] = time.thread_time() - start
        phases = _timed_phases(shell, magic)
        profile = cProfile.Profile()
        profile.enable()
        shell.run_cell(magic)
        profile.disable()
    print(f"{args.cell}: plain {timings['plain']:.3f} s, {args.options!r} {timings['magic']:.3f} s CPU", file=out)
    print("phases (CPU s): " + ", ".join(f"{name} {seconds:.3f}" for name, seconds in phases.items()), file=out)
    for order in ("tottime", "cumtime"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:12000], file=out)
    return 0


def _timed_phases(shell, cell: str) -> dict[str, float]:
    """CPU time of the magic's parts during one run of ``cell`` (wrappers, not a profiler)."""
    from syncfree import magic
    from syncfree.capture import recorder, sites

    spent: dict[str, float] = {}
    undo = []

    def wrap(owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - start

        setattr(owner, name, timed)
        undo.append((owner, name, original))

    wrap(magic, "analyze_source", "static pass")
    wrap(magic, "_python_body", "body transforms")
    wrap(magic.SyncfreeMagics, "_compile", "compile")
    wrap(magic, "cell_report", "report")
    wrap(magic.SyncfreeMagics, "_publish", "publish")
    wrap(recorder.SyncRecorder, "_resolve", "new sites")
    wrap(sites, "_FindingIndex", "finding index")
    collections = {"start": 0.0, "seconds": 0.0, "full": 0}

    def on_collection(phase, info):
        if phase == "start":
            collections["start"] = time.perf_counter()
        else:
            collections["seconds"] += time.perf_counter() - collections["start"]
            collections["full"] += info["generation"] == 2

    gc.collect()
    gc.callbacks.append(on_collection)
    start = time.thread_time()
    try:
        shell.run_cell(cell)
    finally:
        spent["whole cell"] = time.thread_time() - start
        gc.callbacks.remove(on_collection)
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)
    spent["cycle collections (wall)"] = collections["seconds"]
    spent["full collections"] = collections["full"]
    return spent


if __name__ == "__main__":
    sys.exit(main())
