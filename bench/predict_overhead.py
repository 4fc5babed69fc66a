"""Predict mode's overhead on a small CPU training loop: the same loop run plainly on the CPU
and under predict mode (``device="cuda"`` answered by CPU stand-ins), medians of interleaved
runs. Target (issue 10): predict ≤ 2.0x the plain run.

    PYTHONPATH=python_helper .venv/bin/python bench/predict_overhead.py [--steps 60] [--repeats 9] [--strict]

The loop is what a notebook user would run before moving to a GPU: an MLP with AdamW,
cross-entropy, ``clip_grad_norm_`` and a logged ``loss.item()`` every 10 steps, at two sizes:

* ``small``: 784 -> 256 -> 256 -> 10, batch 64 (an MNIST-sized model);
* ``tiny``: 32 -> 64 -> 64 -> 10, batch 16, where each op takes about a microsecond and
  the loop is bound by Python: the worst case for any per-call hook. For reference the
  same loop also runs under a ``TorchFunctionMode`` that does nothing but call the op:
  the part of the overhead that is torch's own dispatch to a Python mode.

Predict mode runs the loop through ``SyncRecorder("predict")`` with the code compiled under
a cell filename, as ``%%syncfree`` does, so that the syncs it predicts (the ``.item()``
reads) are attributed to lines as in a notebook. Times are CPU time of the process (one
torch thread), which a loaded machine disturbs less than wall time; wall time is printed
too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))

LOOP = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                            torch.nn.ReLU(), torch.nn.Linear(hidden, 10)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(batch, n_in, device=device)
y = torch.randint(0, 10, (batch,), device=device)
losses = []
for step in range(steps):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step % 10 == 0:
        losses.append(loss.item())
"""

SIZES = {"small": {"n_in": 784, "hidden": 256, "batch": 64},
         "tiny": {"n_in": 32, "hidden": 64, "batch": 16}}

CELL_FILE = "<syncfree-cell-bench>"


def run(code, steps: int, size: dict, how: str) -> tuple[float, float, int]:
    """(wall s, CPU s, syncs predicted) of one run: ``plain``, ``predict`` or ``mode``."""
    import torch
    from torch.overrides import TorchFunctionMode

    from syncfree.capture import SyncRecorder

    class PassThrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    namespace = {"torch": torch, "device": "cuda" if how == "predict" else "cpu",
                 "steps": steps, **size}
    watcher = (SyncRecorder("predict", measure_blocked=False, cell_files={CELL_FILE: 0})
               if how == "predict" else PassThrough() if how == "mode" else None)
    start, cpu = time.perf_counter(), time.process_time()
    if watcher is None:
        exec(code, namespace)
    else:
        with watcher:
            exec(code, namespace)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return wall, cpu, watcher.syncs if how == "predict" else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when predict mode takes more than 2x the plain run")
    ns = parser.parse_args()
    if ns.steps < 1 or ns.repeats < 1:
        print("predict_overhead.py: error: --steps and --repeats must be at least 1", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)  # the machine's other work disturbs one thread least
    code = compile(LOOP, CELL_FILE, "exec")
    print(f"torch {torch.__version__}, {ns.steps} steps, medians of {ns.repeats} interleaved runs "
          "(CPU time of the process; wall time in brackets)")
    missed = False
    for label, size in SIZES.items():
        kinds = ("plain", "predict", "mode") if label == "tiny" else ("plain", "predict")
        for how in kinds:
            run(code, 3, size, how)  # warm-up: imports, allocator, first-call paths
        times: dict[str, list[tuple[float, float]]] = {how: [] for how in kinds}
        syncs = 0
        for _ in range(ns.repeats):  # interleaved, so that drift reaches each alike
            for how in kinds:
                wall, cpu, n = run(code, ns.steps, size, how)
                times[how].append((wall, cpu))
                syncs = max(syncs, n)
        med = {how: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
               for how, t in times.items()}
        plain_wall, plain_cpu = med["plain"]
        print(f"{label} MLP {size['n_in']}-{size['hidden']}-{size['hidden']}-10, batch {size['batch']}:")
        names = {"plain": "plain CPU run", "predict": f"predict mode ({syncs} syncs predicted)",
                 "mode": "do-nothing TorchFunctionMode"}
        for how in kinds:
            wall, cpu = med[how]
            print(f"  {names[how]:38s} {cpu * 1000:7.1f} ms  ({wall * 1000:7.1f} ms)  "
                  f"{cpu / plain_cpu:5.2f}x  ({wall / plain_wall:4.2f}x)")
        missed |= med["predict"][1] / plain_cpu > 2.0
    print("target: predict mode <= 2.00x the plain run")
    return 1 if ns.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
