"""What a watch costs once (start and stop) against what it costs a step, on overhead.py's MLP loop.

``overhead.py`` times a recorder over a run of ``--steps`` (400) MLP steps, so what a
recorder pays once per run (installing debug mode, filters, the blocked-time clock and the
CUPTI subscription, the first call of each call site under ``sys.monitoring``, the report)
is spread over 400 steps of 1.5 ms. Here each variant runs ``--short`` (1) and ``--long``
(401) steps per run, paired with the plain loop of the same length in shuffled rounds;
the fixed cost is the median of the short pairs' differences, and the cost a step the
median of the long pairs' differences less the fixed cost, over the extra steps.

    PYTHONPATH=python_helper python3 bench/watch_fixed_cost.py [--seconds 120]

Without CUDA it says so and exits 0; the CUPTI variant needs cupti-python (skipped with the
reason otherwise).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import MLP_FILENAME, mlp_loop  # noqa: E402
from paired import measure, median_ci, shown  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="time budget of the timed rounds")
    parser.add_argument("--short", type=int, default=1, help="steps of a short run")
    parser.add_argument("--long", type=int, default=401, help="steps of a long run")
    args = parser.parse_args(argv)
    if args.long <= args.short:
        parser.error("--long must be more steps than --short")
    import torch

    if not torch.cuda.is_available():
        print("bench/watch_fixed_cost.py needs a CUDA device (torch sees none): nothing measured")
        return 0
    from syncfree.capture.engines import cupti_problem
    from syncfree.engine_choice import choose_engine, new_recorder

    code, loop_globals = mlp_loop(torch)

    def plain(steps: int):
        def run():
            exec(code, {**loop_globals, "losses": [], "steps": steps})
        return run

    def recorded(steps: int, engine: str, blocked: bool):
        def run():
            recorder = new_recorder(choose_engine("warn", engine), measure_blocked=blocked,
                                    files={MLP_FILENAME: 0}, findings={MLP_FILENAME: []})
            with recorder:
                plain(steps)()
            assert recorder.syncs == steps, (recorder.syncs, recorder.notes)
        return run

    def timer(run) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    variants = {"recorder": ("debug", False), "recorder + blocked": ("debug", True)}
    problem = cupti_problem()
    if problem is None:
        variants["CUPTI engine"] = ("cupti", True)
    bases = {f"plain {args.short}": plain(args.short), f"plain {args.long}": plain(args.long)}
    runs = {}
    for name, (engine, blocked) in variants.items():
        runs[f"{name} {args.short}"] = (recorded(args.short, engine, blocked), f"plain {args.short}")
        runs[f"{name} {args.long}"] = (recorded(args.long, engine, blocked), f"plain {args.long}")
    pairs, rounds = measure(runs, bases, timer, seconds=args.seconds, rng=random.Random(0))
    extra = args.long - args.short
    print(f"syncfree bench: a watch's fixed cost and its cost a step | {torch.cuda.get_device_name()} | "
          f"torch {torch.__version__}; MLP 256x256 -> 512 -> 512 -> 10, AdamW, one .item() a step; runs of "
          f"{args.short} and {args.long} steps, {rounds} rounds, median [95% interval]")
    plain_step = statistics.median(pairs[f"recorder {args.long}"].base) / args.long
    print(f"  plain loop: {plain_step * 1e6:.0f} us a step")
    for name in variants:
        short, long = pairs[f"{name} {args.short}"], pairs[f"{name} {args.long}"]
        fixed = median_ci([v - b for v, b in zip(short.variant, short.base)])
        whole = [v - b for v, b in zip(long.variant, long.base)]
        per_step = median_ci([(w - fixed.median) / extra for w in whole])
        print(f"  {name:20s} once {shown(fixed, ' ms', scale=1e3, signed=True)}   a step "
              f"{shown(per_step, ' us', scale=1e6, signed=True)}   "
              f"({per_step.median / plain_step:+.1%} of a step; a run of {args.long} steps "
              f"{statistics.median(long.variant) / statistics.median(long.base):.3f}x)")
    if problem is not None:
        print(f"  CUPTI engine: not measured ({problem})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
