"""Which CUDA calls a blocking call makes, layer by layer, and what a CUPTI callback costs.

    PYTHONPATH=python_helper python3 bench/cupti_layers.py [--part 1|2|all] [--repeats 7]

Part 1 (the facts the CUPTI engine rests on, capture/cupti_engine.py): for torch, CuPy,
Numba and Triton operations that block, the runtime and driver calls that CUPTI reports
(both layers, every synchronize/copy call, nesting shown with braces), and whether every
runtime call of ``BLOCKING_RUNTIME`` reached a driver call of ``BLOCKING_DRIVER`` (then the
driver layer alone sees every blocking call).

Part 2 (run first: it needs a process that never attached CUPTI): what CUPTI costs on the
5000 x (``x @ w``; ``.item()``) loop and on a small MLP trained with one ``.item()`` a step,
taken apart: subscribed with no callback enabled (what CUPTI adds to every CUDA call), an
empty Python callback on the driver layer's blocking calls (cupti-python's cost per
callback), one that reads ``data.callback_site``, the engine's callback counting only (as
the engine runs it on one layer, and reading the callback data at every event as on two),
the same on both layers; each against a plain loop of the same round (shuffled rounds, median
of the paired ratios), and the plain loop of those rounds against one measured before
CUPTI was ever attached. Needs CUDA and cupti-python; says so and exits 0 otherwise.

"""

from __future__ import annotations

import argparse
import random
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
    parser.add_argument("--steps", type=int, default=500, help="steps of the MLP loop")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--part", choices=("1", "2", "all"), default="all")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench/cupti_layers.py needs a CUDA device: nothing measured")
        return 0
    from syncfree.capture.cupti_engine import CuptiUnavailable, load_cupti

    try:
        cupti = load_cupti()
    except CuptiUnavailable as exc:
        print(f"bench/cupti_layers.py: {exc}")
        return 0
    if args.part in ("2", "all"):
        costs(torch, cupti, args)  # first: the plain loop of a process without CUPTI
    if args.part in ("1", "all"):
        layers(torch, cupti)
    return 0


def layers(torch, cupti) -> None:
    """Part 1: the runtime and driver calls of each blocking operation."""
    from syncfree.capture.cupti_engine import BLOCKING_DRIVER, BLOCKING_RUNTIME

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

    print(f"runtime blocking calls that reached no blocking driver call: {sorted(set(all_missing)) or 'none'}")


def costs(torch, cupti, args) -> None:
    """Part 2: what CUPTI costs, taken apart (see the module docstring)."""
    from syncfree.capture.cupti_engine import blocking_callback, callback_ids, single_layer_callback

    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randn(256, 256, device="cuda")
    target = torch.randint(0, 10, (256,), device="cuda")

    def item_loop():
        s = 0.0
        for _ in range(args.iterations):
            y = x @ w
            s += y.sum().item()

    def mlp_loop():
        for _ in range(args.steps):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(data), target)
            loss.backward()
            opt.step()
            loss.item()

    loops = {"item": (item_loop, args.iterations), "MLP": (mlp_loop, args.steps)}
    enter = int(cupti.ApiCallbackSite.API_ENTER)
    seen = [0]

    def count(frame, blocked):
        seen[0] += 1

    def empty(userdata, domain, cbid, data):
        pass

    def reads_site(userdata, domain, cbid, data):
        data.callback_site  # noqa: B018 (what reading one field of the callback data costs)

    def subscribed(callback, layers):
        def run(loop):
            handle = cupti.subscribe(callback, None)
            try:
                for domain, cbid in callback_ids(cupti, layers):
                    cupti.enable_callback(1, handle, domain, cbid)
                return timed(loop)
            finally:
                cupti.unsubscribe(handle)
        return run

    def timed(loop) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        loop()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    variants = {
        "plain loop": timed,
        "subscribed, no callback enabled": subscribed(empty, ()),
        "empty callback, driver layer": subscribed(empty, ("driver",)),
        "callback reading data.callback_site, driver": subscribed(reads_site, ("driver",)),
        "engine callback (count only), driver layer": subscribed(single_layer_callback(count, enter),
                                                                 ("driver",)),
        "same, reading data.callback_site at every event": subscribed(blocking_callback(count, enter),
                                                                      ("driver",)),
        "engine callback (count only), both layers": subscribed(blocking_callback(count, enter),
                                                                ("driver", "runtime")),
    }
    print(f"== Part 2: what CUPTI costs: {args.iterations} x (y = x @ w; s += y.sum().item()), "
          f"256x256; MLP {args.steps} steps, one .item() a step; {args.repeats} shuffled rounds, "
          "median of ratios to the plain loop of the same round")
    rng = random.Random(0)
    before = {}
    for label, (loop, _) in loops.items():  # CUPTI never attached yet in this process
        loop()
        before[label] = [timed(loop) for _ in range(args.repeats)]
    for label, (loop, per) in loops.items():
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for name in names:
            variants[name](loop)  # warm-up
        seen[0] = 0
        variants["engine callback (count only), driver layer"](loop)
        counted = seen[0]
        for _ in range(args.repeats):
            rng.shuffle(names)
            for name in names:
                times[name].append(variants[name](loop))
        base = times["plain loop"]
        print(f"  {label} loop: plain before any CUPTI {statistics.median(before[label]):.3f} s; "
              f"plain between the rounds {statistics.median(base):.3f} s; "
              f"the engine's callback counted {counted} a loop")
        for name, values in times.items():
            ratios = [v / b for v, b in zip(values, base)]
            added = statistics.median([v - b for v, b in zip(values, base)]) / per * 1e6
            print(f"    {name:50s} {statistics.median(values):7.3f} s  "
                  f"{statistics.median(ratios):5.2f}x  {added:+7.2f} us/sync")


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
