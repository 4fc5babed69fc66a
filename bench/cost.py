"""What a sync costs, validated: syncfree's cost of each site against the step time saved by
its sync-free rewrite (issue #37; the attribution is syncfree/cost.py).

    python bench/cost.py [--steps 150] [--seconds 120] [--json out.json]

Each loop is a training step run with its sync and with its sync-free rewrite, paired and
alternated as bench/paired.py does (each timed run beside a run of the other variant, the
order drawn at random); the measured saving is the median of the pairs' differences per step,
with its 95% interval. syncfree's cost is the cost_ms of the loop's sites per step, from runs
of the synced variant under the recorder with the cost measured (the median of a few runs).
The figure to meet: every loop within +-25% or +-0.05 ms/step of the measured saving; in the
three-sync step, the order of the sites by cost equals their order by measured saving (each
site's saving: the step with all three against the step with that one rewritten).

GPU-bound loops train a 4 x 4096 MLP on a batch of 4096 (TF32), ``--steps`` steps a run;
launch-bound ones a 4 x 256 MLP on a batch of 64, four times as many steps. A mask index in
a launch-bound step is left out: there its rewrite saves the host work of the index's backward
(a sort-based index_put), not GPU time the sync loses. Needs CUDA; exits 0 with a line without it.
"""

from __future__ import annotations

import argparse
import json
import linecache
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import measure, median_ci  # noqa: E402

HEAD = "for _ in range(steps):\n    opt.zero_grad(set_to_none=True)\n"
STEP = "    out = model(x)\n    loss = F.mse_loss(out, y)\n    loss.backward()\n    opt.step()\n"

# name -> (model size, code with the sync, its sync-free rewrite, what synced)
LOOPS: dict[str, tuple[str, str, str, str]] = {
    "item, end of step": (
        "big", HEAD + STEP + "    losses.append(loss.item())\n",
        HEAD + STEP + "    losses.append(loss.detach())\n", "`loss.item()`"),
    "item, end of step (launch-bound)": (
        "small", HEAD + STEP + "    losses.append(loss.item())\n",
        HEAD + STEP + "    losses.append(loss.detach())\n", "`loss.item()`"),
    "mask index, mid-step": (
        "big", HEAD + "    per = (model(x) - y).square().mean(1)\n    loss = per[per > 1.0].mean()\n"
        "    loss.backward()\n    opt.step()\n",
        HEAD + "    per = (model(x) - y).square().mean(1)\n    keep = per > 1.0\n"
        "    loss = (per * keep).sum() / keep.sum()\n    loss.backward()\n    opt.step()\n", "`per[per > 1.0]`"),
    ".cpu() of metrics": (
        "big", HEAD + STEP + "    metrics.append(torch.stack([loss.detach(), out.detach().abs().mean()]).cpu())\n",
        HEAD + STEP + "    metrics.append(torch.stack([loss.detach(), out.detach().abs().mean()]))\n", "`.cpu()`"),
    "torch.cuda.synchronize() each step (launch-bound)": (
        "small", HEAD + STEP + "    torch.cuda.synchronize()\n", HEAD + STEP, "`torch.cuda.synchronize()`"),
    "torch.cuda.synchronize() each step": (
        "big", HEAD + STEP + "    torch.cuda.synchronize()\n", HEAD + STEP, "`torch.cuda.synchronize()`"),
    "clip_grad_norm_(error_if_nonfinite=True)": (
        "big", HEAD + "    out = model(x)\n    loss = F.mse_loss(out, y)\n    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)\n    opt.step()\n",
        HEAD + "    out = model(x)\n    loss = F.mse_loss(out, y)\n    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    opt.step()\n", "inside torch (clip_grad_norm_)"),
    ".tolist() of predictions (launch-bound)": (
        "small", HEAD + STEP + "    preds = out.argmax(1).tolist()\n",
        HEAD + STEP + "    preds = out.argmax(1)\n", "`.tolist()`"),
    "side stream synchronize()": (
        "big", HEAD + "    with torch.no_grad(), torch.cuda.stream(side):\n        target = teacher(x)\n"
        "    side.synchronize()\n" + STEP.replace("F.mse_loss(out, y)", "F.mse_loss(out, target)"),
        HEAD + "    with torch.no_grad(), torch.cuda.stream(side):\n        target = teacher(x)\n"
        "    torch.cuda.current_stream().wait_stream(side)\n"
        + STEP.replace("F.mse_loss(out, y)", "F.mse_loss(out, target)"), "`side.synchronize()`"),
}

# The three-sync step: an int() of a count mid-step followed by host work (dear), a .tolist() of the
# predictions followed by less host work, and an end-of-step .item() (cheap). Rewritten one at a time.
# (A boolean-mask index as the dear sync saved 0.58 ms/step more than its GPU time lost on an H200:
# its rewrite also drops the index's own work; the mid-step mask loop above measures a mask alone.)
THREE = {
    "B": ("    hard = int((per > 1.0).sum())\n    work(3)\n", "    hard = (per > 1.0).sum()\n    work(3)\n"),
    "C": ("    preds = out.argmax(1).tolist()\n    work(1)\n", "    preds = out.argmax(1)\n    work(1)\n"),
    "A": ("    losses.append(loss.item())\n", "    losses.append(loss.detach())\n"),
}
def three_code(rewritten: str | None) -> str:
    def part(name: str) -> str:
        with_sync, without = THREE[name]
        return without if name == rewritten else with_sync
    return (HEAD + "    out = model(x)\n    per = (out - y).square().mean(1)\n" + part("B")
            + "    loss = per.mean()\n    loss.backward()\n"
            "    opt.step()\n" + part("C") + part("A"))


# The cell lines of the three syncs.
THREE_LINES = {name: three_code(None).splitlines().index(THREE[name][0].splitlines()[0]) + 1 for name in THREE}


def work_fn(scale: float):
    """Host work of about ``units`` x 0.25 ms (calibrated on this machine): what a step does on the
    CPU after a sync (logging, decoding predictions) before it queues more GPU work."""
    def work(units: int) -> int:
        s = 0
        for i in range(int(units * scale)):
            s += i
        return s
    return work


def calibrate() -> float:
    n = 200_000
    started = time.perf_counter()
    work_fn(1.0)(n)
    per = (time.perf_counter() - started) / n
    return 0.25e-3 / per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps of one timed run (launch-bound loops: 4x)")
    parser.add_argument("--seconds", type=float, default=120.0, help="time for the paired rounds")
    parser.add_argument("--cost-runs", type=int, default=3, help="runs under the recorder per loop")
    parser.add_argument("--only", default="", help="comma-separated substrings of loop names to run")
    parser.add_argument("--json", default="", help="write the rows as JSON to this file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dump", default="", help="pickle each costed run's trace inputs and the savings here "
                        "(to study the attribution away from the GPU)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench/cost.py: no CUDA device; nothing measured")
        return 0
    from syncfree.engine_choice import choose_engine, new_recorder

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)

    def mlp(width: int, layers: int = 4):
        mods = []
        for _ in range(layers):
            mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        return torch.nn.Sequential(*mods[:-1]).cuda()

    sizes = {"big": (4096, 4096), "small": (256, 64)}
    steps_of = {"big": args.steps, "small": args.steps * 4}
    work = work_fn(calibrate())

    def namespace(size: str) -> dict:
        width, batch = sizes[size]
        model = mlp(width)
        return {"torch": torch, "F": torch.nn.functional, "model": model, "teacher": mlp(width),
                "opt": torch.optim.SGD(model.parameters(), lr=1e-6),
                "x": torch.randn(batch, width, device="cuda"), "y": torch.randn(batch, width, device="cuda"),
                "side": torch.cuda.Stream(), "work": work, "steps": steps_of[size]}

    def compiled(name: str, code: str):
        filename = f"<syncfree-cost-{name}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
        return filename, compile(code, filename, "exec")

    def runner(ns: dict, code) -> callable:
        def run():
            exec(code, {**ns, "losses": [], "metrics": []})
        return run

    def timer(run) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    engine = choose_engine("warn", "debug")

    def costed(ns: dict, filename: str, code) -> list[dict]:
        """Each run's sites (report dicts) under the recorder with the cost measured."""
        runs = []
        for _ in range(args.cost_runs):
            recorder = new_recorder(engine, files={filename: 0}, findings={filename: []}, measure_cost=True)
            torch.cuda.synchronize()
            with recorder:
                exec(code, {**ns, "losses": [], "metrics": []})
            fields = recorder.report_fields()
            if not trace_stats and getattr(recorder, "trace_stats", None):
                trace_stats.update(recorder.trace_stats)
                print("  trace:", trace_stats)
            if recorder.costs is None:
                raise SystemExit(f"cost not measured: {recorder.cost_note}; notes: {fields['notes']}")
            # The same trace read without taking the recorder's own time out (its effect on the cost).
            from syncfree.cost import Sync, compute_costs

            acts, syncs, copies, blocking, overhead, power = recorder.trace_inputs
            alt = compute_costs(acts, syncs, copies, barriers=blocking, observer=False)
            # And without a debug-mode sync's own call start (cost.py's call_starts, on in reports: the launch-bound
            # .tolist() and .item() rows came out under their savings without it).
            without_starts = compute_costs(acts, syncs, copies, barriers=blocking, launch_overhead_us=overhead,
                                           power=power, call_starts=False)
            lines = {id(s): s.line for s in recorder.sites}
            runs.append({"sites": fields["sites"], "cost": fields["cost"], "power": power,
                         "raw": [{"line": lines.get(k), "cost_ms": v.cost_us / 1000.0} for k, v in alt.sites.items()],
                         "without_starts": [{"line": lines.get(k), "cost_ms": v.cost_us / 1000.0}
                                            for k, v in without_starts.sites.items()],
                         "lost": [{"line": lines.get(k), "cost_ms": v.lost_us / 1000.0}
                                  for k, v in recorder.costs.sites.items()],
                         # every site removed at once (what a rewrite removing all of them saves: cost.py)
                         "together": recorder.costs.together_lost_us * (1.0 - recorder.costs.give_back) / 1000.0,
                         "site_count": len(recorder.costs.sites)})
            if args.dump:
                runs[-1]["inputs"] = (acts, [Sync(lines.get(s.site), s.end, s.hook, s.call, s.began) for s in syncs],
                                      copies, blocking, overhead, power)
        return runs

    def untraced_blocked(ns: dict, filename: str, code) -> list[dict]:
        """The sites of one run under the recorder without the cost's trace: their blocked time as a user's run
        without --cost reads it (the trace slows the host, and the GPU's queue is longer at each sync)."""
        recorder = new_recorder(engine, files={filename: 0}, findings={filename: []}, measure_cost=False)
        torch.cuda.synchronize()
        with recorder:
            exec(code, {**ns, "losses": [], "metrics": []})
        return [{"sites": recorder.report_fields()["sites"]}]

    def traced(ns: dict, filename: str, code) -> dict:
        """The GPU's busy and idle time of one run of a variant (the rewrite: no sync to cost)."""
        recorder = new_recorder(engine, files={filename: 0}, findings={filename: []}, measure_cost=True)
        torch.cuda.synchronize()
        with recorder:
            exec(code, {**ns, "losses": [], "metrics": []})
        return recorder.report_fields()["cost"]

    only = [s for s in args.only.split(",") if s]
    rows, variants, bases = [], {}, {}
    for name, (size, with_sync, without, what) in LOOPS.items():
        if only and not any(o in name for o in only):
            continue
        ns = namespace(size)
        filename, code_with = compiled(name, with_sync)
        _, code_without = compiled(name + "-rewrite", without)
        variants[name] = (runner(ns, code_with), name)
        bases[name] = runner(ns, code_without)
        rows.append({"name": name, "size": size, "what": what, "filename": filename, "ns": ns,
                     "code": code_with, "code_without": code_without})
    three = not only or any(o in "three syncs" for o in only)
    if three:
        ns3 = namespace("big")
        filename3, code3 = compiled("three", three_code(None))
        bases["three"] = runner(ns3, code3)
        for site in THREE:
            _, code = compiled(f"three-{site}", three_code(site))
            variants[f"three: {site}"] = (bases["three"], f"three without {site}")
            bases[f"three without {site}"] = runner(ns3, code)

    for run in bases.values():  # warm-up: cuBLAS, the allocator, each site's first sync
        run()
    trace_stats: dict = {}
    costs = {row["name"]: costed(row["ns"], row["filename"], row["code"]) for row in rows}
    blocked_runs = {row["name"]: untraced_blocked(row["ns"], row["filename"], row["code"]) for row in rows}
    rewrites = {row["name"]: traced(row["ns"], row["filename"] + "-rewrite", row["code_without"]) for row in rows}
    if three:
        costs["three"] = costed(ns3, filename3, code3)
        blocked_runs["three"] = untraced_blocked(ns3, filename3, code3)
    pairs, rounds = measure(variants, bases, timer, seconds=args.seconds, rng=random.Random(args.seed),
                            min_rounds=6)

    def per_step_cost(runs: list[dict], steps: int, line: int | None = None) -> float:
        values = []
        for run in runs:
            sites = [s for s in run["sites"] if line is None or s["line"] == line]
            values.append(sum(s["cost_ms"] or 0.0 for s in sites) / steps)
        return statistics.median(values)

    def raw_cost(runs: list[dict], steps: int, line: int | None = None, key: str = "raw") -> float:
        return statistics.median(sum(s["cost_ms"] for s in run[key] if line is None or s["line"] == line) / steps
                                 for run in runs)

    def power(runs: list[dict]) -> str:
        readings = [run["power"] for run in runs if run.get("power") is not None]
        if not readings:
            return "power not read"
        sampled = [p.at_limit_share for p in readings if p.at_limit_share is not None]
        return (f"{statistics.median(p.average_w for p in readings):4.0f} W of {readings[0].limit_w:.0f}, held "
                f"{statistics.median(p.held_share for p in readings):4.0%} (NVML's count "
                f"{statistics.median(p.capped_share for p in readings):4.0%}, samples at the limit "
                + (f"{statistics.median(sampled):4.0%})" if sampled else "none)"))

    def together(runs: list[dict], steps: int) -> str:
        """For a loop with several sites (a mask index syncs again in its backward): the cost of removing them all at
        once, as its rewrite does, beside the sum of each alone (the row's cost)."""
        if max(run["site_count"] for run in runs) < 2:
            return ""
        return (f"  {max(run['site_count'] for run in runs)} sites, removed together "
                f"{statistics.median(run['together'] for run in runs) / steps:.3f}")

    def blocked(runs: list[dict], steps: int, line: int | None = None) -> float:
        sites = [s for s in runs[0]["sites"] if line is None or s["line"] == line]
        return sum(s["blocked_ms"] or 0.0 for s in sites) / steps

    print(f"syncfree bench/cost.py | {torch.cuda.get_device_name()} | torch {torch.__version__} | Python "
          f"{platform.python_version()} | {rounds} paired rounds; GPU-bound: 4 x 4096 MLP, batch 4096 (TF32), "
          f"{steps_of['big']} steps a run; launch-bound: 4 x 256, batch 64, {steps_of['small']} steps a run; ms per step")
    header = (f"  {'loop':62s} {'step ms':>8s} {'blocked':>8s} {'saved (95% CI)':>22s} {'lost':>7s} {'cost':>7s}  "
              "verdict")
    print(header)
    out_rows, missed = [], []
    three_result: dict = {}

    def row(label: str, step_ms: float, blocked_ms: float, saved, cost_ms: float, lost_ms: float) -> None:
        ok = abs(cost_ms - saved.median) <= max(0.25 * abs(saved.median), 0.05)
        verdict = "ok" if ok else "MISSED"
        if not ok:
            missed.append(label)
        ci = f"{saved.median:.3f} [{saved.low:.3f}, {saved.high:.3f}]"
        print(f"  {label:62s} {step_ms:8.3f} {blocked_ms:8.3f} {ci:>22s} {lost_ms:7.3f} {cost_ms:7.3f}  {verdict}")
        out_rows.append({"loop": label, "step_ms": step_ms, "blocked_ms": blocked_ms, "saved_ms": saved.median,
                         "saved_low": saved.low, "saved_high": saved.high, "cost_ms": cost_ms, "lost_ms": lost_ms,
                         "ok": ok})

    for r in rows:
        p = pairs[r["name"]]
        steps = steps_of[r["size"]]
        saved = median_ci([(v - b) / steps * 1000.0 for v, b in zip(p.variant, p.base)])
        step_ms = statistics.median(p.variant) / steps * 1000.0
        row(f"{r['name']} ({r['what']})", step_ms, blocked(blocked_runs[r["name"]], steps), saved,
            per_step_cost(costs[r["name"]], steps), raw_cost(costs[r["name"]], steps, key="lost"))
    if three:
        by_saving, by_cost = {}, {}
        for site in THREE:
            p = pairs[f"three: {site}"]
            steps = steps_of["big"]
            saved = median_ci([(v - b) / steps * 1000.0 for v, b in zip(p.variant, p.base)])
            cost = per_step_cost(costs["three"], steps, THREE_LINES[site])
            step_ms = statistics.median(p.variant) / steps * 1000.0
            row(f"three syncs: {site} (line {THREE_LINES[site]}, {THREE[site][0].split(chr(10))[0].strip()})",
                step_ms, blocked(blocked_runs["three"], steps, THREE_LINES[site]), saved, cost,
                raw_cost(costs["three"], steps, THREE_LINES[site], key="lost"))
            by_saving[site], by_cost[site] = saved.median, cost
        order_saving = sorted(by_saving, key=lambda s: -by_saving[s])
        order_cost = sorted(by_cost, key=lambda s: -by_cost[s])
        same = order_saving == order_cost
        print(f"  three syncs, order by measured saving {' > '.join(order_saving)}, by cost "
              f"{' > '.join(order_cost)}: {'same' if same else 'DIFFERENT'}")
        if not same:
            missed.append("three-sync order")
        three_result = {"order_saving": order_saving, "order_cost": order_cost}
    print(f"  figures: {'met' if not missed else 'MISSED: ' + '; '.join(missed)} (each loop within +-25% or "
          "+-0.05 ms/step of the measured saving; ms per step)")
    gpu_rows: list[dict] = []
    print("  GPU time per step, from the traces (with the sync / its rewrite): busy, idle; the cost without "
          "taking the recorder's time out; the cost without a debug-mode sync's own call start (cost.py's call_starts)")
    for r in rows:
        steps = steps_of[r["size"]]
        w, wo = costs[r["name"]][0]["cost"], rewrites[r["name"]]
        print(f"    {r['name']:58s} busy {w['gpu_busy_ms'] / steps:7.3f} / {wo['gpu_busy_ms'] / steps:7.3f}  idle "
              f"{w['gpu_idle_ms'] / steps:7.3f} / {wo['gpu_idle_ms'] / steps:7.3f}  raw cost "
              f"{raw_cost(costs[r['name']], steps):7.3f}  without call starts "
              f"{raw_cost(costs[r['name']], steps, key='without_starts'):7.3f}  {power(costs[r['name']])}"
              + together(costs[r["name"]], steps))
        gpu_rows.append({"loop": r["name"], "busy_with": w["gpu_busy_ms"] / steps, "busy_without": wo["gpu_busy_ms"] / steps,
                         "idle_with": w["gpu_idle_ms"] / steps, "idle_without": wo["gpu_idle_ms"] / steps,
                         "raw_cost": raw_cost(costs[r["name"]], steps)})
    if three:
        for site in THREE:
            print(f"    three: {site} raw cost {raw_cost(costs['three'], steps_of['big'], THREE_LINES[site]):7.3f}  "
                  f"without call starts "
                  f"{raw_cost(costs['three'], steps_of['big'], THREE_LINES[site], key='without_starts'):7.3f}  "
                  f"{power(costs['three'])}")
    if args.dump:
        import pickle

        dumped = {"rows": out_rows, "steps": steps_of, "three_lines": THREE_LINES,
                  "runs": {name: [run.get("inputs") for run in runs] for name, runs in costs.items()}}
        Path(args.dump).write_bytes(pickle.dumps(dumped))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "rows": out_rows, "missed": missed,
                                               "three": three_result, "trace": trace_stats,
                                               "gpu": gpu_rows,
                                               # each pair's run times (s), variant then base, to study the noise
                                               "pairs": {name: [p.variant, p.base] for name, p in pairs.items()}},
                                              indent=1))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
