"""What watching a sync-heavy loop costs: plain loop vs debug mode's floor vs the recorder
(as %%syncfree runs it) vs the CUPTI engine vs ``syncfree.watch()`` over a script's function
vs torch.profiler, and a training-shaped loop.

    PYTHONPATH=python_helper python3 bench/overhead.py [--seconds 200] [--iterations 2000] [--strict]
    PYTHONPATH=python_helper python3 bench/overhead.py --cpu     # the hook's cost, no GPU needed

The loop (sync-facts.md, "Overhead of ways to observe"): ``--iterations`` of
``y = x @ w; s += y.sum().item()`` on 256x256 CUDA tensors, compiled under a cell filename
as ``%%syncfree`` compiles a cell. The recorder is made as every surface makes it
(``syncfree.engine_choice.new_recorder``); the ``syncfree.watch()`` variant runs the same loop
defined in a real ``.py`` file (attribution to user files, as for scripts and tests).
"debug mode floor" is what any engine built on torch's debug-mode warnings pays: warn mode,
the ``always`` filter and a minimal ``showwarning`` that walks to the cell frame and bumps a
dict entry. "CUPTI engine" is the recorder with ``engine="cupti"`` (capture/cupti/engine.py;
skipped, with the reason, without cupti-python). The MLP loop: a small MLP trained with
AdamW on one batch, one ``.item()`` of the loss per step (``--steps``).

How one run decides (bench/paired.py): every timed run of a variant is paired with a run of
its plain loop right before or after it (in a random order), the variants are shuffled in
every round, and rounds go on until the phase's share of ``--seconds`` is spent. A
variant's ratio is the median of its pairs' ratios, its added time per sync the median of
the pairs' differences, each with a 95% confidence interval (order statistics: no
assumption on the noise); the recorder's distance to the floor is the median of their
per-round differences, with its interval. A target is "met" when the whole interval is
within it, "MISSED" when the whole interval is beyond it, "undecided" otherwise (give it
more ``--seconds``). The CUPTI variants run in rounds of their own after the others (CUPTI,
once attached, may leave the driver slower for the rest of the process, so the debug-mode
variants are measured before it ever is; the plain loop after CUPTI is printed against the
one before it), and torch.profiler last.

Targets: the recorder (warn mode, attribution and aggregation) and the recorder with
blocked time (the default of ``%%syncfree``, ``syncfree run`` and ``watch()``) <= the floor
+ 0.03, and so is ``watch()`` (a watch is the same engine: its ratio to its own plain loop
against the floor's; issue 24's "debug-mode engine <= floor + 0.03", where an absolute 1.10x
lay below the H100's floor itself); CUPTI engine <= 1.5x, on the MLP loop <= 1.05x. ``--strict`` exits 1 when a target is not met (missed or undecided). Without CUDA
it says so and exits 0.

``--cpu`` measures the same Python path without a GPU: the loop calls ``warnings.warn``
with torch's sync message where the GPU loop calls ``.item()`` (the warning reaches the
hook through the same C warnings machinery, from the same frame), and reports the CPU time
each variant adds per sync (thread time, so that other processes on the machine do not
count), in the same paired rounds. Without a GPU ``watch("warn")`` would run predict mode:
``--cpu`` makes it take the GPU's path (warn mode, the blocked-time clock).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import Pairs, added_difference, measure, ratio_difference, shown, spread  # noqa: E402

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


def mlp_loop(torch):
    """The MLP loop's code (compiled under its cell filename) and its globals but
    ``losses`` and ``steps``: a 256 -> 512 -> 512 -> 10 MLP on CUDA, AdamW, one batch."""
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randn(256, 256, device="cuda")
    target = torch.randint(0, 10, (256,), device="cuda")
    linecache.cache[MLP_FILENAME] = (len(MLP), None, MLP.splitlines(keepends=True), MLP_FILENAME)
    return compile(MLP, MLP_FILENAME, "exec"), {"torch": torch, "model": model, "opt": opt, "data": data,
                                                 "target": target}
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
TARGETS = {"CUPTI engine": 1.5, "MLP: CUPTI engine": 1.05}
COST_TARGET = 1.10  # issue #37: the cost measurement is on by default on a GPU only within this on the MLP loop
FLOOR_MARGIN = 0.03  # the recorder's target: the floor's ratio + this


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None,
                        help="time budget of the timed rounds, all phases together (default 200; "
                             "--cpu: 30)")
    parser.add_argument("--iterations", type=int, default=2000, help="syncs of one run of the loop")
    parser.add_argument("--steps", type=int, default=400, help="steps of one run of the MLP loop")
    parser.add_argument("--min-rounds", type=int, default=6,
                        help="rounds run whatever the budget (6: the least a 95%% interval needs)")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffled orders")
    parser.add_argument("--shares", default=None,
                        help="the budget's split between the debug-mode, CUPTI and profiler phases, "
                             "e.g. 0.2,0.75,0.05 to decide the CUPTI targets (default 0.55,0.3,0.15; "
                             "without cupti-python 0.85,0,0.15); a phase still runs its least rounds")
    parser.add_argument("--cpu", action="store_true",
                        help="measure the hook's Python path on CPU (no GPU needed)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a target is not met (missed, or undecided by this run)")
    args = parser.parse_args(argv)
    if args.shares:
        try:
            args.shares = tuple(float(share) for share in args.shares.split(","))
        except ValueError:
            args.shares = ()
        if len(args.shares) != 3 or min(args.shares) < 0 or sum(args.shares) <= 0:
            parser.error("--shares takes three fractions, e.g. 0.2,0.75,0.05")
    if args.cpu:
        return cpu_main(args)
    if args.seconds is None:
        args.seconds = 200.0

    import torch

    if not torch.cuda.is_available():
        print("bench/overhead.py needs a CUDA device (torch sees none): nothing measured "
              "(--cpu measures the hook's Python path)")
        return 0

    import importlib.util
    import tempfile

    import syncfree
    from syncfree.capture import dispatch
    from syncfree.capture.engines import cupti_problem
    from syncfree.capture.sites import UserFiles
    from syncfree.engine_choice import choose_engine, new_recorder

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

    def floor_of(filename: str, loop: Callable[[], None], syncs: int) -> Callable[[], None]:
        def floor():
            with debug_mode_floor(filename) as counts:
                mode = torch.cuda.get_sync_debug_mode()
                torch.cuda.set_sync_debug_mode(1)
                try:
                    loop()
                finally:
                    torch.cuda.set_sync_debug_mode(mode)
            assert sum(counts.values()) == syncs, counts
        return floor

    mlp_code, mlp_globals = mlp_loop(torch)

    def mlp():
        exec(mlp_code, {**mlp_globals, "losses": [], "steps": args.steps})

    floor, mlp_floor = floor_of(FILENAME, plain, args.iterations), floor_of(MLP_FILENAME, mlp, args.steps)

    def mlp_recorded(engine: str, measure_blocked: bool = True, measure_cost: bool = False):
        def run():
            recorder = new_recorder(choose_engine("warn", engine), measure_blocked=measure_blocked,
                                    files={MLP_FILENAME: 0}, findings={MLP_FILENAME: []},
                                    measure_cost=measure_cost)
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

    def recorded_script():
        # The recorder as a watch makes it (user files, the entering frame as the boundary,
        # blocked time), without the watch around it: against the cell's recorder, the walk
        # over the function's frames; against watch(), what a watch adds once.
        recorder = new_recorder(choose_engine("warn", "debug"), measure_blocked=True,
                                files=UserFiles(), scope="context")
        recorder.boundary = sys._getframe()
        with recorder:
            token = dispatch.route(recorder)
            try:
                plain_script()
            finally:
                dispatch.unroute(token, recorder)
        (site,) = recorder.sites
        assert (site.line, site.count) == (5, args.iterations), site.to_report()

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
    bases = {"plain loop": plain, "plain loop (.py file)": plain_script, "MLP: plain loop": mlp}
    # The budget: most of it to the debug-mode phase (five pairs a round), the CUPTI phase's
    # share when it can run, the profiler's last (it is slow and only for comparison). Only
    # looked up here: loading cupti-python waits until the debug-mode phase is done.
    has_cupti = importlib.util.find_spec("cupti") is not None
    shares = (0.55, 0.3, 0.15) if has_cupti else (0.85, 0.0, 0.15)
    if args.shares:
        shares = args.shares
    started = time.monotonic()
    # Phase 1: debug mode and its floor, before CUPTI was ever attached in this process.
    debug, debug_rounds = measure({
        "debug mode floor": (floor, "plain loop"),
        "recorder": (recorded(False), "plain loop"),
        "recorder + blocked": (recorded(True), "plain loop"),
        "recorder + blocked (.py file)": (recorded_script, "plain loop (.py file)"),
        "syncfree.watch() (.py file)": (watched, "plain loop (.py file)"),
        "MLP: debug mode floor": (mlp_floor, "MLP: plain loop"),
        "MLP: recorder": (mlp_recorded("debug", False), "MLP: plain loop"),
        "MLP: recorder + blocked": (mlp_recorded("debug"), "MLP: plain loop"),
        # The cost of each sync (GPU time lost, issue #37): a Kineto trace of the GPU beside the recorder.
        "MLP: recorder + blocked + cost": (mlp_recorded("debug", measure_cost=True), "MLP: plain loop"),
    }, bases, timer, seconds=args.seconds * shares[0], rng=rng, min_rounds=args.min_rounds)
    # Phase 2: the CUPTI engine, paired with plain loops of its own rounds.
    cupti: dict[str, Pairs] = {}
    cupti_rounds = 0
    problem = cupti_problem()
    if problem is None:
        cupti, cupti_rounds = measure({
            "CUPTI engine": (recorded(True, "cupti"), "plain loop"),
            "MLP: CUPTI engine": (mlp_recorded("cupti"), "MLP: plain loop"),
        }, bases, timer, seconds=args.seconds * shares[1], rng=rng, min_rounds=args.min_rounds)
    # Phase 3: the profiler, for comparison.
    profiler, profiler_rounds = measure({"torch.profiler with_stack": (profiled, "plain loop")},
                                        bases, timer, seconds=args.seconds * shares[2], rng=rng,
                                        min_rounds=3)
    elapsed = time.monotonic() - started

    print(f"syncfree bench: {args.iterations} x (y = x @ w; s += y.sum().item()), 256x256 | "
          f"{torch.cuda.get_device_name()} | torch {torch.__version__} | Python "
          f"{platform.python_version()}; MLP: {args.steps} steps, 256x256 -> 512 -> 512 -> 10, "
          "AdamW, one .item() a step")
    print(f"  {debug_rounds} rounds (CUPTI {cupti_rounds}, profiler {profiler_rounds}) in "
          f"{elapsed:.0f} s, each run paired with its plain loop's run beside it; median of the "
          "pairs [95% interval]")
    print(f"  (this machine: {clock_cost()}; blocked time and the CUPTI engine read the clock "
          "2-4 times a sync)")
    missed = print_rows(debug, cupti, profiler, problem, args.iterations, args.steps)
    return 1 if args.strict and missed else 0


def print_rows(debug: dict[str, Pairs], cupti: dict[str, Pairs], profiler: dict[str, Pairs],
               problem: str | None, iterations: int, steps: int) -> list[str]:
    """The GPU run's table; returns the targets not met."""
    missed: list[str] = []

    def base_row(name: str, pairs: list[Pairs]) -> None:
        times = [t for p in pairs for t in p.base]
        print(f"  {name:30s} {statistics.median(times):7.3f} s  1.00x  (its runs: "
              f"+-{spread(times):.1f}% between quartiles)")

    def row(name: str, pairs: Pairs, per: int, unit: str, target: float | None = None) -> None:
        ratio, added = pairs.ratio(), pairs.added(per)
        text = (f"  {name:30s} {statistics.median(pairs.variant):7.3f} s  {shown(ratio, 'x')}"
                f"  {shown(added, ' us/' + unit, scale=1e6, signed=True)}")
        if target is not None:
            text += f"  target <= {target:.2f}x: {_judged(ratio.verdict(target), missed, name)}"
        print(text)

    def floor_row(name: str, label: str | None = None) -> None:
        over = ratio_difference(debug[name], debug["debug mode floor"])
        label = (label or name) + " - floor"
        print(f"  {'  ' + label:30s} {'':9s} {shown(over, 'x', signed=True)}  "
              f"target <= +{FLOOR_MARGIN:.2f}x: {_judged(over.verdict(FLOOR_MARGIN), missed, label)}")

    base_row("plain loop", [debug[n] for n in ("debug mode floor", "recorder", "recorder + blocked")])
    row("debug mode floor", debug["debug mode floor"], iterations, "sync")
    for name in ("recorder", "recorder + blocked"):
        row(name, debug[name], iterations, "sync")
        floor_row(name)
    watch, script = "syncfree.watch() (.py file)", "recorder + blocked (.py file)"
    base_row("plain loop (.py file)", [debug[watch], debug[script]])
    row(script, debug[script], iterations, "sync")
    row(watch, debug[watch], iterations, "sync")
    floor_row(watch, "watch()")
    # Per sync against the recorder of the same rounds (their plain loops differ: a ratio
    # would compare two denominators): what a watch adds over a cell's recorder, and where.
    for name, other in ((watch, "recorder + blocked"), (watch, "debug mode floor"),
                        (script, "recorder + blocked"), (watch, script)):
        over = added_difference(debug[name], debug[other], iterations)
        label = f"{'watch' if name == watch else '.py recorder'} - {'floor' if other == 'debug mode floor' else other}"
        print(f"  {'  ' + label:42s} {shown(over, ' us/sync', scale=1e6, signed=True)}")
    mlp_names = ("MLP: debug mode floor", "MLP: recorder", "MLP: recorder + blocked", "MLP: recorder + blocked + cost")
    base_row("MLP: plain loop", [debug[n] for n in mlp_names])
    for name in mlp_names:
        # The cost's trace: on by default on a GPU only within COST_TARGET on this loop (README says which).
        row(name, debug[name], steps, "step", COST_TARGET if name.endswith("+ cost") else None)
    over = added_difference(debug["MLP: recorder + blocked"], debug["MLP: debug mode floor"], steps)
    print(f"  {'  MLP: recorder + blocked - floor':42s} {shown(over, ' us/step', scale=1e6, signed=True)}")
    if problem is not None:
        print(f"  CUPTI engine: not measured ({problem})")
    else:
        after = statistics.median(cupti["CUPTI engine"].base)
        before = statistics.median([t for n in ("debug mode floor", "recorder", "recorder + blocked")
                                    for t in debug[n].base])
        print(f"  {'plain loop, CUPTI used before':30s} {after:7.3f} s  {after / before:5.2f}x of "
              "the plain loop before CUPTI was attached (unpaired)")
        row("CUPTI engine", cupti["CUPTI engine"], iterations, "sync", TARGETS["CUPTI engine"])
        row("MLP: CUPTI engine", cupti["MLP: CUPTI engine"], steps, "step", TARGETS["MLP: CUPTI engine"])
    row("torch.profiler with_stack", profiler["torch.profiler with_stack"], iterations, "sync")
    if missed:
        print(f"  not met: {', '.join(missed)}")
    return missed


def _judged(verdict: str, missed: list[str], name: str) -> str:
    if verdict != "met":
        missed.append(f"{name} ({verdict})")
    return verdict if verdict != "undecided" else "undecided (the interval holds the target: more --seconds)"


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
    from syncfree import engine_choice
    from syncfree.capture import SyncRecorder, dispatch
    from syncfree.capture.sites import UserFiles
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

    def recorded_script():
        # The recorder as a watch makes it (user files, the entering frame as the
        # boundary), without the watch around it: the difference to the cell's recorder is
        # the walk over the function's frames at each sync, the difference to watch() is
        # what a watch adds on enter, at its first sync and on exit.
        recorder = SyncRecorder("warn", cell_files=UserFiles(), scope="context")
        recorder.boundary = sys._getframe()
        with recorder:
            token = dispatch.route(recorder)
            try:
                module.loop(iterations, CPU_MESSAGE, UserWarning, warnings.warn)
            finally:
                dispatch.unroute(token, recorder)
        (site,) = recorder.sites
        assert (site.line, site.count, site.measured) == (5, iterations, iterations), site.to_report()

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

    bases = {"plain loop": plain, "plain loop (.py file)": plain_script}
    variants = {
        "debug mode floor": (floor, "plain loop"),
        "recorder": (recorded(False), "plain loop"),
        "recorder + blocked": (recorded(True), "plain loop"),
        "recorder + blocked (.py file)": (recorded_script, "plain loop (.py file)"),
        "syncfree.watch() (.py file)": (watched, "plain loop (.py file)"),
    }
    with _as_on_a_gpu(engine_choice, SyncRecorder, device_info):
        pairs, count = measure(variants, bases, timer,
                               seconds=args.seconds if args.seconds is not None else 30.0,
                               rng=random.Random(args.seed), min_rounds=args.min_rounds)
    print(f"syncfree bench --cpu: {iterations} x (len(y) + warnings.warn(torch's sync message)), "
          f"{count} rounds, CPU time (thread time) each variant adds per sync over its plain "
          f"loop's run beside it: median of the pairs [95% interval] | Python "
          f"{platform.python_version()} | {clock_cost()}")
    for base in bases:
        times = [t for name, (_, b) in variants.items() if b == base for t in pairs[name].base]
        print(f"  {base:30s} {statistics.median(times) / iterations * 1e6:6.3f} us/iteration")
    for name, p in pairs.items():
        print(f"  {name:30s} {statistics.median(p.variant) / iterations * 1e6:6.3f} us/iteration  "
              f"{shown(p.added(iterations), ' us/sync', scale=1e6, signed=True)}")
    for name, other in (("recorder", "debug mode floor"), ("recorder + blocked", "debug mode floor"),
                        ("recorder + blocked (.py file)", "recorder + blocked"),
                        ("syncfree.watch() (.py file)", "recorder + blocked (.py file)"),
                        ("syncfree.watch() (.py file)", "debug mode floor")):
        over = added_difference(pairs[name], pairs[other], iterations)
        label = f"{name} - {'floor' if other == 'debug mode floor' else other}"
        print(f"  {label:60s} {shown(over, ' us/sync', scale=1e6, signed=True)}")
    return 0


class _as_on_a_gpu:
    """--cpu: the recorder and ``watch()`` take the path they take on a GPU (warn mode,
    blocked time) although torch sees no CUDA device: ``watch("warn")`` gets warn mode
    rather than predict mode, and a recorder that measures blocked time starts the clock
    it starts on a GPU (the debug-mode engine's start turns none on without CUDA)."""

    def __init__(self, engine_choice, recorder_class, device_info) -> None:
        self.engine_choice, self.recorder_class, self.device_info = engine_choice, recorder_class, device_info

    def __enter__(self) -> None:
        from syncfree.capture import recorder as recorder_module
        from syncfree.capture.debug import DebugEngine, hook
        from syncfree.capture.stall import StallClock

        engine_choice, device_info = self.engine_choice, self.device_info
        self._choose_mode = engine_choice._choose_mode
        self._start = start = DebugEngine.start

        def choose_mode(requested):
            return engine_choice.Engine(requested or "warn", device_info("cuda", "none (bench --cpu)"))

        def install(engine, recorder, torch, undo):
            start(engine, recorder, torch, undo)
            if recorder.measure_blocked and recorder.mode == "warn" and recorder._clock is None:
                clock = recorder._clock = StallClock(
                    recorder._cell_files, hook_globals=(vars(recorder_module), vars(hook)))
                undo.push(recorder._stop_clock)
                assert clock.start(), "no profiling slot free"

        engine_choice._choose_mode = choose_mode
        DebugEngine.start = install

    def __exit__(self, *exc) -> None:
        from syncfree.capture.debug import DebugEngine

        self.engine_choice._choose_mode = self._choose_mode
        DebugEngine.start = self._start


if __name__ == "__main__":
    sys.exit(main())
