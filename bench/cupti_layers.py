"""Which CUDA calls a blocking call makes, layer by layer, and what a CUPTI callback costs.

    PYTHONPATH=python_helper python3 bench/cupti_layers.py [--iterations 5000] [--repeats 5]

Part 1 (the facts the CUPTI engine rests on, capture/cupti_engine.py): for torch, CuPy,
Numba and Triton operations that block, the runtime and driver calls that CUPTI reports
(both layers, every synchronize/copy call, nesting shown with braces), and whether every
runtime call of ``BLOCKING_RUNTIME`` reached a driver call of ``BLOCKING_DRIVER`` (then the
driver layer alone sees every blocking call). Part 2: the cost per sync of a callback on
the 5000 x (``x @ w``; ``.item()``) loop: an empty callback on the driver layer, on both
layers, the engine's callback, and the plain loop again after unsubscribing. Needs CUDA
and cupti-python; says so and exits 0 otherwise.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench/cupti_layers.py needs a CUDA device: nothing measured")
        return 0
    from syncfree.capture.cupti_engine import (
        BLOCKING_DRIVER,
        BLOCKING_RUNTIME,
        CuptiUnavailable,
        blocking_callback,
        callback_ids,
        load_cupti,
    )

    try:
        cupti = load_cupti()
    except CuptiUnavailable as exc:
        print(f"bench/cupti_layers.py: {exc}")
        return 0
    runtime = cupti.runtime_api_trace_cbid
    driver = cupti.driver_api_trace_cbid
    rt_domain, drv_domain = int(cupti.CallbackDomain.RUNTIME_API), int(cupti.CallbackDomain.DRIVER_API)
    interesting = re.compile(r"Synchron|Memcpy|Free|Query|Wait|Malloc")
    watched = [(rt_domain, int(m)) for m in runtime if interesting.search(m.name)]
    watched += [(drv_domain, int(m)) for m in driver if interesting.search(m.name)]
    names = {(rt_domain, int(m)): "R:" + m.name for m in runtime}
    names.update({(drv_domain, int(m)): "D:" + m.name for m in driver})
    blocking = {(rt_domain, int(getattr(runtime, n))) for n in BLOCKING_RUNTIME if hasattr(runtime, n)}
    blocking_drv = {(drv_domain, int(getattr(driver, n))) for n in BLOCKING_DRIVER if hasattr(driver, n)}
    enter = int(cupti.ApiCallbackSite.API_ENTER)
    events: list[tuple[int, tuple[int, int], bool]] = []

    def trace(userdata, domain, cbid, data):
        events.append((threading.get_ident(), (int(domain), int(cbid)), data.callback_site == enter))

    def nested(evts):
        out, stack, covered, missing = [], [], [], []
        for _tid, key, is_enter in evts:
            if is_enter:
                stack.append([key, False])
                out.append(("{" if len(stack) > 1 else "") + names.get(key, str(key)))
                if key in blocking_drv:
                    for item in stack[:-1]:
                        item[1] = True
            else:
                key_, reached = stack.pop()
                if len(stack):
                    out.append("}")
                if key_ in blocking:
                    (covered if reached else missing).append(names[key_])
        return " ".join(out).replace(" }", "}"), covered, missing

    scenarios = _scenarios(torch)
    print("== Part 1: blocking calls by layer (R: runtime, D: driver; {...} = called inside)")
    handle = cupti.subscribe(trace, None)
    for domain, cbid in watched:
        cupti.enable_callback(1, handle, domain, cbid)
    all_missing = []
    for title, run in scenarios:
        try:
            run()  # warm-up: lazy init, kernel compilation
            torch.cuda.synchronize()
        except Exception as exc:  # a library missing or failing: say so, go on
            print(f"  {title}: skipped ({type(exc).__name__}: {exc})")
            continue
        events.clear()
        run()
        mine = [e for e in events if e[0] == threading.get_ident()]
        text, covered, missing = nested(mine)
        all_missing += missing
        print(f"  {title}: {text or '(no call)'}")
    cupti.unsubscribe(handle)
    print(f"runtime blocking calls that reached no blocking driver call: {sorted(set(all_missing)) or 'none'}")

    print("== Part 2: cost per sync, 5000 x (y = x @ w; s += y.sum().item()), 256x256, "
          f"median of {args.repeats}")
    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")

    def loop():
        s = 0.0
        for _ in range(args.iterations):
            y = x @ w
            s += y.sum().item()
        torch.cuda.synchronize()
        return s

    def timed() -> float:
        values = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            loop()
            values.append(time.perf_counter() - t)
        return statistics.median(values)

    loop()
    results = {"plain loop": timed()}
    seen = [0]

    def count(frame, blocked):
        seen[0] += 1

    def empty(userdata, domain, cbid, data):
        pass

    variants = {
        "empty callback, driver layer": (empty, ("driver",)),
        "empty callback, both layers": (empty, ("driver", "runtime")),
        "engine callback (count only), driver layer": (blocking_callback(count, enter), ("driver",)),
        "engine callback (count only), both layers": (blocking_callback(count, enter), ("driver", "runtime")),
    }
    for name, (callback, layers) in variants.items():
        handle = cupti.subscribe(callback, None)
        for domain, cbid in callback_ids(cupti, layers):
            cupti.enable_callback(1, handle, domain, cbid)
        seen[0] = 0
        loop()
        per_loop = seen[0]
        results[name] = timed()
        cupti.unsubscribe(handle)
        if callback is not empty:
            results[name + f" [{per_loop} syncs a loop]"] = results.pop(name)
    results["plain loop after unsubscribing"] = timed()
    base = results["plain loop"]
    for name, value in results.items():
        print(f"  {name:58s} {value:7.3f} s  {value / base:5.2f}x  "
              f"{(value - base) / args.iterations * 1e6:+6.2f} us/sync")
    return 0


def _scenarios(torch):
    import numpy as np

    x = torch.randn(256, 256, device="cuda")
    ev = torch.cuda.Event()
    host = torch.randn(1024)
    out = []
    out.append(("torch .item()", lambda: (x @ x).sum().item()))
    out.append(("torch .cpu()", lambda: x.cpu()))
    out.append(("torch .cuda() from pageable", lambda: host.cuda()))
    out.append(("torch.nonzero", lambda: torch.nonzero(x > 0)))
    out.append(("torch.cuda.synchronize()", torch.cuda.synchronize))
    out.append(("Event.synchronize()", lambda: (ev.record(), ev.synchronize())))
    out.append(("Stream.synchronize()", lambda: torch.cuda.current_stream().synchronize()))

    def cupy_ops():
        import cupy as cp

        a = cp.arange(1000, dtype=cp.float32)
        return [("cupy float(a.sum())", lambda: float(a.sum())),
                ("cupy cp.asnumpy(a)", lambda: cp.asnumpy(a)),
                ("cupy cp.asarray(numpy)", lambda: cp.asarray(np.ones(1000, np.float32))),
                ("cupy Device().synchronize()", lambda: cp.cuda.Device().synchronize()),
                ("cupy Stream.synchronize()", lambda: cp.cuda.get_current_stream().synchronize())]

    def numba_ops():
        from numba import cuda

        d = cuda.to_device(np.ones(1000, np.float32))
        return [("numba cuda.to_device", lambda: cuda.to_device(np.ones(1000, np.float32))),
                ("numba copy_to_host", lambda: d.copy_to_host()),
                ("numba cuda.synchronize()", cuda.synchronize)]

    for factory in (cupy_ops, numba_ops):
        try:
            out += factory()
        except Exception as exc:
            out.append((factory.__name__, lambda exc=exc: (_ for _ in ()).throw(exc)))
    return out


if __name__ == "__main__":
    sys.exit(main())
