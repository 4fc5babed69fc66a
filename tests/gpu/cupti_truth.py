"""Ground truth for test_cupti_gpu.py: the blocking CUDA calls of a script, by script line,
as CUPTI's activity API records them.

    python tests/gpu/cupti_truth.py SCRIPT OUT.json     # truth
    python tests/gpu/cupti_truth.py --syncfree SCRIPT OUT.json   # syncfree's CUPTI engine

Independent of the engine under test: activity records (not callbacks) of the runtime and
driver layers for the calls the engine treats as blocking; a record inside another
blocking record of the same thread (the driver call a runtime call makes) is not counted
again; each call goes to the script line that was running on its thread when it started,
from a line tracer stamped with CUPTI's own clock (``cupti.get_timestamp``). Writes
``{"total": N, "lines": {"line": count}, "unattributed": n, "names": {...}}``.
"""

from __future__ import annotations

import bisect
import json
import runpy
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python_helper"))


def truth(script: str) -> dict:
    from cupti import cupti

    from syncfree.capture.cupti import BLOCKING_DRIVER, BLOCKING_RUNTIME

    runtime_kind, driver_kind = int(cupti.ActivityKind.RUNTIME), int(cupti.ActivityKind.DRIVER)
    blocking = {(runtime_kind, int(getattr(cupti.runtime_api_trace_cbid, n)))
                for n in BLOCKING_RUNTIME if hasattr(cupti.runtime_api_trace_cbid, n)}
    blocking |= {(driver_kind, int(getattr(cupti.driver_api_trace_cbid, n)))
                 for n in BLOCKING_DRIVER if hasattr(cupti.driver_api_trace_cbid, n)}
    records: list[tuple] = []

    def requested():
        return 8 * 1024 * 1024, 0

    def completed(activities):
        for a in activities:
            key = (int(a.kind), int(a.cbid))
            if key in blocking:
                records.append((a.thread_id, a.start, a.end, key))

    stamps: dict[int, list[tuple[int, int | None]]] = {}
    clock = cupti.get_timestamp

    def stamp(line):
        stamps.setdefault(threading.get_native_id(), []).append((clock(), line))

    def local(frame, event, arg):
        if event == "line":
            stamp(frame.f_lineno)
        elif event == "return":
            parent = frame.f_back
            while parent is not None and parent.f_code.co_filename != script:
                parent = parent.f_back
            stamp(parent.f_lineno if parent is not None else None)
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == script else None

    # Records name threads by the system's id (gettid), as threading.get_native_id() does.
    cupti.set_thread_id_type(cupti.ActivityThreadIdType.SYSTEM)
    cupti.activity_register_callbacks(requested, completed)
    cupti.activity_enable(cupti.ActivityKind.RUNTIME)
    cupti.activity_enable(cupti.ActivityKind.DRIVER)
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.settrace(None)
        threading.settrace(None)
        cupti.activity_flush_all(1)
        cupti.activity_disable(cupti.ActivityKind.RUNTIME)
        cupti.activity_disable(cupti.ActivityKind.DRIVER)
        cupti.activity_flush_all(1)

    names = {(runtime_kind, int(m)): m.name for m in cupti.runtime_api_trace_cbid}
    names.update({(driver_kind, int(m)): m.name for m in cupti.driver_api_trace_cbid})
    lines: Counter = Counter()
    counted: Counter = Counter()
    unattributed = 0
    by_thread: dict[int, list] = {}
    for rec in records:
        by_thread.setdefault(rec[0], []).append(rec)
    for tid, recs in by_thread.items():
        recs.sort(key=lambda r: (r[1], -r[2]))
        outer_end = -1
        times = [t for t, _ in stamps.get(tid, [])]
        for _, start, end, key in recs:
            if start >= outer_end:  # not inside the previous outermost call
                outer_end = end
                counted[names.get(key, str(key))] += 1
                i = bisect.bisect_right(times, start) - 1
                line = stamps[tid][i][1] if i >= 0 else None
                if line is None:
                    unattributed += 1
                else:
                    lines[str(line)] += 1
    return {"total": sum(counted.values()), "lines": dict(lines), "unattributed": unattributed,
            "names": dict(counted)}


def with_syncfree(script: str) -> dict:
    import syncfree

    with syncfree.watch(engine="cupti", measure_blocked=True) as watch:
        runpy.run_path(script, run_name="__main__")
    report = watch.report
    lines: Counter = Counter()
    for site in report.sites + report.allowed:
        if site.file == script:
            lines[str(site.line)] += site.count
    attributed = sum(lines.values())
    return {"total": report.syncs, "lines": dict(lines), "unattributed": report.syncs - attributed,
            "notes": list(report.notes), "mode": report.mode,
            "kinds": sorted({f"{s.line}:{s.kind}" for s in report.sites if s.file == script})}


if __name__ == "__main__":
    args = sys.argv[1:]
    engine = args[0] == "--syncfree"
    if engine:
        args = args[1:]
    script, out = str(Path(args[0]).resolve()), args[1]
    result = with_syncfree(script) if engine else truth(script)
    Path(out).write_text(json.dumps(result, indent=1))
