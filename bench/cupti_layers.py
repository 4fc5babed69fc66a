"""Which CUDA calls a blocking call makes, layer by layer, and what a CUPTI callback costs.

    PYTHONPATH=python_helper python3 bench/cupti_layers.py [--part 1|2|all] [--seconds 150]

Part 1 (the facts the CUPTI engine rests on, capture/cupti/engine.py): for torch, CuPy,
Numba and Triton operations that block, the runtime and driver calls that CUPTI reports
(both layers, every synchronize/copy call, nesting shown with braces), and whether every
runtime call of ``BLOCKING_RUNTIME`` reached a driver call of ``BLOCKING_DRIVER`` (then the
driver layer alone sees every blocking call).

Part 2 (run first: it needs a process that never attached CUPTI): what CUPTI costs on the
``x @ w; .item()`` loop and on a small MLP trained with one ``.item()`` a step (the loops of
bench/overhead.py, compiled as cells), taken apart: subscribed with no callback enabled
(what CUPTI adds to every CUDA call: the floor under the engine), an empty Python callback
enabled on a driver call the loops never make (what CUPTI's dispatch costs every CUDA call
once a callback of the domain is on), an empty callback on the driver layer's blocking calls
and on the runtime layer's (cupti-python's cost per callback), one that reads
``data.callback_site``, the engine's callback counting only (as the engine runs it on one
layer, and reading the callback data at every event as on two), the same on both layers,
and the CUPTI engine itself (the recorder with ``engine="cupti"``); each timed from after
its subscription to before its unsubscription. In the protocol of bench/overhead.py
(bench/paired.py): each run paired with a plain run beside it, shuffled rounds until the
loop's share of ``--seconds`` is spent, medians with 95% intervals; the engine's distance
to the subscription alone is the median of their per-round differences. The plain loop of
those rounds is printed against one measured before CUPTI was ever attached. Needs CUDA
and cupti-python; says so and exits 0 otherwise.

"""

from __future__ import annotations

import argparse
import linecache
import random
import re
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import Pairs, measure, ratio_difference, shown, spread  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000, help="syncs of one run of the loop")
    parser.add_argument("--steps", type=int, default=200,
                        help="steps of one run of the MLP loop (1.5 ms a step on an H100)")
    parser.add_argument("--seconds", type=float, default=150.0,
                        help="part 2's time budget (a third to the loop, the rest to the MLP)")
    parser.add_argument("--min-rounds", type=int, default=6)
    parser.add_argument("--part", choices=("1", "2", "all"), default="all")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench/cupti_layers.py needs a CUDA device: nothing measured")
        return 0
    from syncfree.capture.cupti import CuptiUnavailable, load_cupti

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
    from syncfree.capture.cupti import BLOCKING_DRIVER, BLOCKING_RUNTIME

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


def costs(torch, cupti, args) -> None:
    """Part 2: what CUPTI costs, taken apart (see the module docstring)."""
    import overhead

    from syncfree.capture.cupti import blocking_callback, callback_ids, single_layer_callback
    from syncfree.engine_choice import choose_engine, new_recorder

    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randn(256, 256, device="cuda")
    target = torch.randint(0, 10, (256,), device="cuda")
    cells = {}
    for label, source, filename in (("item", overhead.CELL, overhead.FILENAME),
                                    ("MLP", overhead.MLP, overhead.MLP_FILENAME)):
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        cells[label] = (compile(source, filename, "exec"), filename)

    def item_loop():
        exec(cells["item"][0], {"x": x, "w": w, "iterations": args.iterations})

    def mlp_loop():
        exec(cells["MLP"][0], {"torch": torch, "model": model, "opt": opt, "data": data,
                               "target": target, "losses": [], "steps": args.steps})

    loops = {"item": (item_loop, args.iterations, "sync"), "MLP": (mlp_loop, args.steps, "step")}
    enter = int(cupti.ApiCallbackSite.API_ENTER)
    seen = [0]

    def count(frame, blocked):
        seen[0] += 1

    def empty(userdata, domain, cbid, data):
        pass

    def reads_site(userdata, domain, cbid, data):
        data.callback_site  # noqa: B018 (what reading one field of the callback data costs)

    def timed(loop) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        loop()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    def subscribed(callback, layers):
        def run(loop) -> float:
            handle = cupti.subscribe(callback, None)
            try:
                for domain, cbid in callback_ids(cupti, layers):
                    cupti.enable_callback(1, handle, domain, cbid)
                return timed(loop)
            finally:
                cupti.unsubscribe(handle)
        return run

    def engine(label):
        def run(loop) -> float:
            filename = cells[label][1]
            recorder = new_recorder(choose_engine("warn", "cupti"), measure_blocked=True,
                                    files={filename: 0}, findings={filename: []})
            torch.cuda.synchronize()
            started = time.perf_counter()
            with recorder:  # timed's own synchronize() calls stay outside: CUPTI would count them
                loop()
            torch.cuda.synchronize()
            took = time.perf_counter() - started
            assert recorder.engine == "cupti", recorder.notes
            assert recorder.syncs == loops[label][1], (recorder.syncs, recorder.notes)
            return took
        return run

    def enabled_elsewhere(run_loop) -> float:
        """An empty callback enabled on a driver call the loops never make: what CUPTI's
        dispatch costs every CUDA call once one callback of the domain is on."""
        handle = cupti.subscribe(empty, None)
        try:
            cupti.enable_callback(1, handle, int(cupti.CallbackDomain.DRIVER_API), unused)
            return timed(run_loop)
        finally:
            cupti.unsubscribe(handle)

    driver_ids = cupti.driver_api_trace_cbid
    unused = next(int(getattr(driver_ids, name)) for name in ("cuMemcpyAtoH_v2", "cuMemcpyAtoH",
                                                               "cuArrayCreate_v2") if hasattr(driver_ids, name))
    variants = {
        "subscribed, no callback enabled": subscribed(empty, ()),
        "empty callback on a call never made, driver": enabled_elsewhere,
        "empty callback, runtime layer": subscribed(empty, ("runtime",)),
        "empty callback, driver layer": subscribed(empty, ("driver",)),
        "callback reading data.callback_site, driver": subscribed(reads_site, ("driver",)),
        "engine callback (count only), driver layer": subscribed(single_layer_callback(count, enter),
                                                                 ("driver",)),
        "same, reading data.callback_site at every event": subscribed(blocking_callback(count, enter),
                                                                      ("driver",)),
        "engine callback (count only), both layers": subscribed(blocking_callback(count, enter),
                                                                ("driver", "runtime")),
    }
    rng = random.Random(0)
    before = {}
    for label, (loop, _, _) in loops.items():  # CUPTI never attached yet in this process
        timed(loop)
        before[label] = [timed(loop) for _ in range(max(args.min_rounds, 5))]
    print(f"== Part 2: what CUPTI costs: {args.iterations} x (y = x @ w; s += y.sum().item()), "
          f"256x256; MLP {args.steps} steps, one .item() a step. Each run paired with a plain "
          "run beside it, shuffled rounds; median of the pairs [95% interval]")
    for label, (loop, per, unit) in loops.items():
        runs = {name: (lambda run=run, loop=loop: run(loop), "plain loop")
                for name, run in {**variants, "CUPTI engine": engine(label)}.items()}
        seen[0] = 0
        variants["engine callback (count only), driver layer"](loop)
        counted = seen[0]
        fired = [0]

        def fires(userdata, domain, cbid, data, fired=fired):
            fired[0] += 1

        subscribed(fires, ("driver",))(loop)
        share = 1 / 3 if label == "item" else 2 / 3
        pairs, rounds = measure(runs, {"plain loop": lambda loop=loop: timed(loop)},
                                lambda run: run(), seconds=args.seconds * share, rng=rng,
                                min_rounds=args.min_rounds)
        plain = [t for p in pairs.values() for t in p.base]
        print(f"  {label} loop, {rounds} rounds: plain before any CUPTI "
              f"{statistics.median(before[label]):.3f} s; plain in the rounds "
              f"{statistics.median(plain):.3f} s (+-{spread(plain):.1f}% between quartiles); "
              f"the engine's callback counted {counted} a loop, from {fired[0]} callbacks "
              "(enter and exit) on the driver layer")
        for name, p in pairs.items():
            print(f"    {name:50s} {statistics.median(p.variant):7.3f} s  "
                  f"{shown(p.ratio(), 'x')}  {shown(p.added(per), f' us/{unit}', scale=1e6, signed=True)}")
        floor = pairs["subscribed, no callback enabled"]
        over = ratio_difference(pairs["CUPTI engine"], floor)
        print(f"    {'CUPTI engine - subscription alone':50s} {'':9s} {shown(over, 'x', signed=True)}")
        if label == "MLP":
            _target_line(pairs["CUPTI engine"], floor)


def _target_line(engine: Pairs, floor: Pairs) -> None:
    """The MLP target (<= 1.05x, bench/overhead.py) against what the subscription alone costs."""
    target = 1.05
    floor_ratio = floor.ratio()
    print(f"    MLP target <= {target:.2f}x: the engine {engine.ratio().verdict(target)}; the "
          f"subscription alone {floor_ratio.verdict(target)} "
          f"({shown(floor_ratio, 'x')}: no callback runs there, every CUDA call pays it)")


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
