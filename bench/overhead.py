"""What watching a sync-heavy loop costs: plain loop vs debug mode's floor vs the recorder
(as %%syncfree runs it) vs the CUPTI engine vs ``syncfree.watch()`` over a script's function
vs torch.profiler, and a training-shaped loop.

    PYTHONPATH=python_helper python3 bench/overhead.py [--iterations 5000] [--repeats 15] [--strict]
    PYTHONPATH=python_helper python3 bench/overhead.py --cpu     # the hook's cost, no GPU needed

The loop (sync-facts.md, "Overhead of ways to observe"): 5000 iterations of
``y = x @ w; s += y.sum().item()`` on 256x256 CUDA tensors, compiled under a cell filename
as ``%%syncfree`` compiles a cell. The recorder is made as every surface makes it
(``syncfree.session.new_recorder``); the ``syncfree.watch()`` variant runs the same loop
defined in a real ``.py`` file (attribution to user files, as for scripts and tests).
"debug mode floor" is what any engine built on torch's debug-mode warnings pays: warn mode,
the ``always`` filter and a minimal ``showwarning`` that walks to the cell frame and bumps a
dict entry. "CUPTI engine" is the recorder with ``engine="cupti"`` (capture/cupti_engine.py;
skipped, with the reason, without cupti-python). The MLP loop: a small MLP trained with
AdamW on one batch, one ``.item()`` of the loss per step (``--steps``).

How it stays trustworthy in one run: after a warm-up, ``--repeats`` rounds each run every
variant once, in a shuffled order (``--seed``), so that drift of the CPU and GPU clocks
reaches every variant alike and no variant always follows the same one. A variant's ratio
is the median over the rounds of its time over the plain loop's time *of the same round*
(its spread, the quartiles of those ratios, is printed beside it); the time added per sync
is the median of the paired differences; "fastest" is the fastest run's time over the
fastest plain run's (interference only adds time). The CUPTI variants run in rounds of their own
after the others, with their own plain loops: CUPTI, once attached, may leave the driver
slower for the rest of the process, so the debug-mode variants are measured before it ever
is, and the plain loop after CUPTI is printed against the one before it. torch.profiler
runs last.

Targets: the recorder (warn mode, attribution and aggregation) and the recorder with
blocked time (the default of ``%%syncfree``, ``syncfree run`` and ``watch()``) <= the floor
+ 0.03; ``watch()`` <= 1.10x of its plain loop; CUPTI engine <= 1.5x, on the MLP loop <=
1.05x. ``--strict`` exits 1 when a target is missed. Without CUDA it says so and exits 0.

``--cpu`` measures the same Python path without a GPU: the loop calls ``warnings.warn``
with torch's sync message where the GPU loop calls ``.item()`` (the warning reaches the
hook through the same C warnings machinery, from the same frame), and reports the CPU time
each variant adds per sync (thread time, so that other processes on the machine do not
count).
"""

from __future__ import annotations

import argparse
import linecache
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))

CELL = """\
s = 0.0
for _ in range(iterations):
    y = x @ w
    s += y.sum().item()
"""
FILENAME = "<syncfree-bench-cell>"
SCRIPT = """\
def loop(x, w, iterations):
    s = 0.0
    for _ in range(iterations):
        y = x @ w
        s += y.sum().item()
    return s
"""
MLP = """\
for _ in range(steps):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(data), target)
    loss.backward()
    opt.step()
    losses.append(loss.item())
"""
MLP_FILENAME = "<syncfree-bench-mlp>"
# --cpu: the .item() of the GPU loop becomes a call that raises torch's sync warning from
# the cell's frame, as torch's PyWarningHandler does (PyErr_WarnEx, stacklevel 1) when the
# C++ call returns; `len(y)` stands for the other call of the line (y.sum()).
CPU_CELL = """\
s = 0.0
for _ in range(iterations):
    y = message
    s += len(y) + (warn(y, category) or 0)
"""
# What torch 2.11 warns with (c10/cuda/CUDAFunctions.cpp, through TORCH_WARN's formatting).
# --cpu's syncfree.watch() variant: the same loop in a function of a real .py file.
CPU_SCRIPT = """\
def loop(iterations, message, category, warn):
    s = 0
    for _ in range(iterations):
        y = message
        s += len(y) + (warn(y, category) or 0)
    return s
"""
CPU_MESSAGE = ("called a synchronizing CUDA operation (Triggered internally at "
               "/pytorch/c10/cuda/CUDAFunctions.cpp:173.)")
SYNC_PREFIX = "called a synchronizing CUDA operation"
TARGETS = {"syncfree.watch() (.py file)": 1.10, "CUPTI engine": 1.5, "MLP: CUPTI engine": 1.05}
FLOOR_MARGIN = 0.03  # the recorder's target: the floor's ratio + this


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=15, help="rounds (each runs every variant once)")
    parser.add_argument("--steps", type=int, default=1000, help="steps of the MLP loop")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffled order of each round")
    parser.add_argument("--cpu", action="store_true",
                        help="measure the hook's Python path on CPU (no GPU needed)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.cpu:
        return cpu_main(args)

    import torch

    if not torch.cuda.is_available():
        print("bench/overhead.py needs a CUDA device (torch sees none): nothing measured "
              "(--cpu measures the hook's Python path)")
        return 0

    import importlib.util
    import tempfile

    import syncfree
    from syncfree.capture.engines import cupti_problem
    from syncfree.session import choose_engine, new_recorder

    linecache.cache[FILENAME] = (len(CELL), None, CELL.splitlines(keepends=True), FILENAME)
    code = compile(CELL, FILENAME, "exec")
    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")

    def plain():
        exec(code, {"x": x, "w": w, "iterations": args.iterations})

    def recorded(measure_blocked: bool, engine: str = "debug"):
        def run():
            recorder = new_recorder(choose_engine("warn", engine), measure_blocked=measure_blocked,
                                    files={FILENAME: 0}, findings={FILENAME: []})
            with recorder:
                plain()
            (site,) = recorder.sites  # the loop's one .item() site, every sync counted
            assert (site.line, site.count) == (4, args.iterations), site.to_report()
            assert getattr(recorder, "engine", "debug") == engine, recorder.notes
        return run

    def floor():
        with debug_mode_floor(FILENAME) as counts:
            mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(1)
            try:
                plain()
            finally:
                torch.cuda.set_sync_debug_mode(mode)
        assert sum(counts.values()) == args.iterations, counts

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randn(256, 256, device="cuda")
    target = torch.randint(0, 10, (256,), device="cuda")
    linecache.cache[MLP_FILENAME] = (len(MLP), None, MLP.splitlines(keepends=True), MLP_FILENAME)
    mlp_code = compile(MLP, MLP_FILENAME, "exec")

    def mlp():
        exec(mlp_code, {"torch": torch, "model": model, "opt": opt, "data": data,
                        "target": target, "losses": [], "steps": args.steps})

    def mlp_recorded(engine: str):
        def run():
            recorder = new_recorder(choose_engine("warn", engine), measure_blocked=True,
                                    files={MLP_FILENAME: 0}, findings={MLP_FILENAME: []})
            with recorder:
                mlp()
            assert recorder.syncs == args.steps, (recorder.syncs, recorder.notes)
            assert getattr(recorder, "engine", "debug") == engine, recorder.notes
        return run

    folder = tempfile.mkdtemp(prefix="syncfree-bench-")
    script = Path(folder) / "bench_loop.py"
    script.write_text(SCRIPT)
    spec = importlib.util.spec_from_file_location("bench_loop", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def plain_script():
        module.loop(x, w, args.iterations)

    def watched():
        with syncfree.watch("warn") as watch:  # blocked time on, as by default
            plain_script()
        (site,) = watch.report.sites  # attributed to the .py file's line 5
        assert (site.file, site.line, site.count) == (str(script), 5, args.iterations), \
            watch.report.text()

    burst = compile(CELL.replace("range(iterations)", "range(300)"), "<syncfree-bench-burst>", "exec")

    def timer(run: Callable[[], None]) -> float:
        # The same short burst of the loop before every timed run, so that each one starts
        # with the GPU and CPU clocks where the loop keeps them (the H100's plain loop spread
        # by +-10% between rounds without it), whatever ran before it.
        exec(burst, {"x": x, "w": w})
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    def profiled():
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities, with_stack=True):
            plain()

    rng = random.Random(args.seed)
    # Phase 1: debug mode and its floor, before CUPTI was ever attached in this process.
    debug = rounds({
        "plain loop": plain,
        "debug mode floor": floor,
        "recorder": recorded(False),
        "recorder + blocked": recorded(True),
        "plain loop (.py file)": plain_script,
        "syncfree.watch() (.py file)": watched,
        "MLP: plain loop": mlp,
        "MLP: recorder + blocked": mlp_recorded("debug"),
    }, args.repeats, timer, rng)
    # Phase 2: the CUPTI engine, with plain loops of its own rounds.
    problem = cupti_problem()
    cupti: dict[str, list[float]] = {}
    if problem is None:
        cupti = rounds({
            "plain loop": plain,
            "CUPTI engine": recorded(True, "cupti"),
            "MLP: plain loop": mlp,
            "MLP: CUPTI engine": mlp_recorded("cupti"),
        }, args.repeats, timer, rng)
    # Phase 3: the profiler, for comparison (a few rounds: it is slow).
    profiler = rounds({"plain loop": plain, "torch.profiler with_stack": profiled},
                      max(3, args.repeats // 3), timer, rng)

    print(f"syncfree bench: {args.iterations} x (y = x @ w; s += y.sum().item()), 256x256, "
          f"{args.repeats} rounds, median of paired ratios (quartiles) | "
          f"{torch.cuda.get_device_name()} | torch {torch.__version__} "
          f"| Python {platform.python_version()}; MLP: {args.steps} steps, 256x256 -> 512 -> 512 "
          "-> 10, AdamW, one .item() a step")
    print(f"  (this machine: {clock_cost()}; blocked time and the CUPTI engine read the clock "
          "2-4 times a sync)")
    floor_ratio = paired(debug["debug mode floor"], debug["plain loop"])[0]
    targets = dict(TARGETS)
    targets["recorder"] = targets["recorder + blocked"] = round(floor_ratio + FLOOR_MARGIN, 2)
    missed: list[str] = []
    rows = [(name, times, debug[_base(name)], _per(name, args)) for name, times in debug.items()]
    if problem is not None:
        print(f"  CUPTI engine: not measured ({problem})")
    else:
        rows.append(("plain loop, CUPTI used before", _median_ratio_row(cupti["plain loop"],
                                                                          debug["plain loop"]),
                     None, args.iterations))
        rows += [(name, times, cupti[_base(name)], _per(name, args))
                 for name, times in cupti.items() if name not in ("plain loop", "MLP: plain loop")]
    rows.append(("torch.profiler with_stack", profiler["torch.profiler with_stack"],
                 profiler["plain loop"], args.iterations))
    for name, times, base, per in rows:
        if base is None:  # already a row of its own
            print(times)
            continue
        ratio, low, high, added = paired(times, base)
        target = targets.get(name)
        verdict = ""
        if target is not None:
            verdict = f"target <= {target:.2f}x: {'ok' if ratio <= target else 'MISSED'}"
            if ratio > target:
                missed.append(name)
        if times is base:  # a plain loop: how much its own rounds spread
            q1, _, q3 = statistics.quantiles(times, n=4) if len(times) >= 4 else \
                (min(times), 0.0, max(times))
            spread = (q3 - q1) / statistics.median(times) / 2 * 100
            print(f"  {name:30s} {statistics.median(times):7.3f} s  1.00x  (its rounds: "
                  f"+-{spread:.1f}% between quartiles)")
            continue
        # Beside it, the fastest run over the fastest plain run: interference only adds time,
        # so on a noisy machine the minima show the cost itself (timeit's reasoning).
        fastest = min(times) / min(base)
        print(f"  {name:30s} {statistics.median(times):7.3f} s  {ratio:5.2f}x ({low:.2f}-{high:.2f})"
              f"  {added / per * 1e6:+6.2f} us/sync  fastest {fastest:.2f}x  {verdict}")
    return 1 if args.strict and missed else 0


def _base(name: str) -> str:
    return ("plain loop (.py file)" if ".py file" in name else
            "MLP: plain loop" if name.startswith("MLP") else "plain loop")


def _per(name: str, args) -> int:
    return args.steps if name.startswith("MLP") else args.iterations


def _median_ratio_row(after: list[float], before: list[float]) -> str:
    ratio = statistics.median(after) / statistics.median(before)
    return (f"  {'plain loop, CUPTI used before':30s} {statistics.median(after):7.3f} s  "
            f"{ratio:5.2f}x of the plain loop before CUPTI was attached (unpaired)")


def clock_cost() -> str:
    """What one ``perf_counter()`` costs here, and the kernel's clock source: on a virtual
    machine whose clock is read by a system call it costs a microsecond or more."""
    import timeit

    cost = min(timeit.repeat("perf_counter()", "from time import perf_counter", number=100_000,
                             repeat=5)) / 100_000 * 1e9
    try:
        source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        source = "unknown"
    return f"perf_counter() {cost:.0f} ns, clock source {source}"


def rounds(variants: dict[str, Callable[[], None]], repeats: int, timer: Callable[..., float],
           rng: random.Random) -> dict[str, list[float]]:
    """Each variant's times: a warm-up, then ``repeats`` rounds of every variant once, in a
    shuffled order."""
    for run in variants.values():
        timer(run)  # warm-up: cuBLAS handles, code caches, first syncs of each site
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for _ in range(repeats):
        rng.shuffle(names)
        for name in names:
            times[name].append(timer(variants[name]))
    return times


def paired(times: list[float], base: list[float]) -> tuple[float, float, float, float]:
    """(median ratio, its lower and upper quartile, median added seconds) of ``times`` over
    ``base``, round by round."""
    ratios = [t / b for t, b in zip(times, base)]
    if len(ratios) >= 4:
        low, _, high = statistics.quantiles(ratios, n=4)
    else:
        low, high = min(ratios), max(ratios)
    return (statistics.median(ratios), low, high,
            statistics.median([t - b for t, b in zip(times, base)]))


class debug_mode_floor:
    """``with debug_mode_floor(filename) as counts``: the ``always`` filter for torch's sync
    warning and a minimal ``showwarning`` that walks to the frame of ``filename`` and
    counts per (code, instruction): what any engine built on debug-mode warnings pays."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.counts: dict = {}

    def __enter__(self) -> dict:
        counts, filename, getframe = self.counts, self.filename, sys._getframe

        def minimal(message, category, filename_, lineno, file=None, line=None):
            if not str(message).startswith(SYNC_PREFIX):
                return  # torch's one-time "prototype feature" warning
            frame = getframe(1)
            while frame is not None and frame.f_code.co_filename != filename:
                frame = frame.f_back
            if frame is None:
                return
            key = (id(frame.f_code), frame.f_lasti)
            counts[key] = counts.get(key, 0) + 1

        self._filters = warnings.filters[:]
        self._showwarning = warnings.showwarning
        warnings.filterwarnings("always", SYNC_PREFIX)
        warnings.showwarning = minimal
        return counts

    def __exit__(self, *exc) -> None:
        warnings.showwarning = self._showwarning
        warnings.filters[:] = self._filters
        warnings._filters_mutated()


def cpu_main(args) -> int:
    """--cpu: the per-sync cost of the hook's Python path, in CPU time, without a GPU."""
    import importlib.util
    import tempfile

    import torch  # noqa: F401 (the recorder imports it; importing it here keeps it out of the timing)

    import syncfree
    from syncfree import session
    from syncfree.capture import SyncRecorder
    from syncfree.report import device_info

    code = compile(CPU_CELL, FILENAME, "exec")
    iterations = args.iterations * 4  # CPU syncs are cheap: more of them for a stable figure

    def namespace(warn) -> dict:
        return {"iterations": iterations, "message": CPU_MESSAGE, "category": UserWarning,
                "warn": warn}

    def plain():
        exec(code, namespace(isinstance))  # a C call of two arguments that warns nothing

    def floor():
        with debug_mode_floor(FILENAME) as counts:
            exec(code, namespace(warnings.warn))
        assert sum(counts.values()) == iterations, counts

    def recorded(measure_blocked: bool):
        def run():
            recorder = SyncRecorder("warn", measure_blocked=measure_blocked,
                                    cell_files={FILENAME: 0}, findings={FILENAME: []})
            with recorder:
                exec(code, namespace(warnings.warn))
            (site,) = recorder.sites
            assert (site.line, site.count) == (4, iterations), site.to_report()
            if measure_blocked:
                assert site.measured == iterations, site.measured
        return run

    folder = tempfile.mkdtemp(prefix="syncfree-bench-")
    script = Path(folder) / "bench_cpu_loop.py"
    script.write_text(CPU_SCRIPT)
    spec = importlib.util.spec_from_file_location("bench_cpu_loop", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def plain_script():
        module.loop(iterations, CPU_MESSAGE, UserWarning, isinstance)

    def watched():
        with syncfree.watch("warn") as watch:  # blocked time on, as by default
            module.loop(iterations, CPU_MESSAGE, UserWarning, warnings.warn)
        (site,) = watch.report.sites  # attributed to the .py file's line 5
        assert (site.file, site.line, site.count, site.measured) == \
            (str(script), 5, iterations, iterations), watch.report.text()

    def timer(run) -> float:
        started = time.thread_time()
        run()
        return time.thread_time() - started

    with _as_on_a_gpu(session, SyncRecorder, device_info):
        times = rounds({"plain loop": plain, "debug mode floor": floor,
                        "recorder": recorded(False), "recorder + blocked": recorded(True),
                        "plain loop (.py file)": plain_script,
                        "syncfree.watch() (.py file)": watched},
                       args.repeats, timer, random.Random(args.seed))
    print(f"syncfree bench --cpu: {iterations} x (len(y) + warnings.warn(torch's sync message)), "
          f"{args.repeats} rounds, CPU time added per sync over the plain loop (median, quartiles)"
          f" | Python {platform.python_version()} | {clock_cost()}")
    for name, values in times.items():
        base = times[_base(name)]
        added = sorted((t - b) / iterations * 1e6 for t, b in zip(values, base))
        low, mid, high = statistics.quantiles(added, n=4) if len(added) >= 4 else \
            (added[0], statistics.median(added), added[-1])
        print(f"  {name:28s} {statistics.median(values) / iterations * 1e6:6.3f} us/iteration  "
              f"{mid:+6.3f} us/sync ({low:+.3f} to {high:+.3f})")
    floor_added = statistics.median(f - b for f, b in zip(times["debug mode floor"], times["plain loop"]))
    for name in ("recorder", "recorder + blocked", "syncfree.watch() (.py file)"):
        base = times[_base(name)]
        over = statistics.median(t - b for t, b in zip(times[name], base)) - floor_added
        print(f"  {name} - floor: {over / iterations * 1e6:+.3f} us/sync")
    return 0


class _as_on_a_gpu:
    """--cpu: the recorder and ``watch()`` take the path they take on a GPU (warn mode,
    blocked time) although torch sees no CUDA device: ``watch("warn")`` gets warn mode
    rather than predict mode, and a recorder that measures blocked time starts the clock
    it starts on a GPU (SyncRecorder._install_hooks starts none without CUDA)."""

    def __init__(self, session, recorder_class, device_info) -> None:
        self.session, self.recorder_class, self.device_info = session, recorder_class, device_info

    def __enter__(self) -> None:
        from syncfree.capture import dispatch
        from syncfree.capture import recorder as recorder_module
        from syncfree.capture.stall import StallClock

        session, device_info = self.session, self.device_info
        self._choose_mode = session._choose_mode
        self._install_hooks = install_hooks = self.recorder_class._install_hooks

        def choose_mode(requested):
            return session.Engine(requested or "warn", device_info("cuda", "none (bench --cpu)"))

        def install(recorder, torch, undo):
            install_hooks(recorder, torch, undo)
            if recorder.measure_blocked and recorder.mode == "warn" and recorder._clock is None:
                clock = recorder._clock = StallClock(
                    recorder._cell_files, hook_globals=(vars(recorder_module), vars(dispatch)))
                undo.push(recorder._stop_clock)
                assert clock.start(), "no profiling slot free"

        session._choose_mode = choose_mode
        self.recorder_class._install_hooks = install

    def __exit__(self, *exc) -> None:
        self.session._choose_mode = self._choose_mode
        self.recorder_class._install_hooks = self._install_hooks


if __name__ == "__main__":
    sys.exit(main())
