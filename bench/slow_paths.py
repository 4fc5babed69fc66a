"""Big cells under ``%%syncfree`` against the same cells run plainly (issue 13).

    .venv/bin/python bench/slow_paths.py [--repeat 3] [--lines 10000] [--reads 1000]

Two cells, each run in a real IPython shell (IPython.testing.globalipapp) with and without
``%%syncfree`` on its first line; the figure is the ratio of the medians:

* ``--lines`` distinct syncing lines (``v17 = x[17].item()``): one site per line, so the
  per-site bookkeeping (attribution, the static finding that covers each line, positions)
  is paid once per line;
* a cell of ``--reads`` scalar reads, each a different tensor expression (``float(x[3])``,
  ``x.sum().item()``, ``int(x.argmax())``, ...).

Without CUDA (this machine: say so when quoting) the magic runs in predict mode: the
tensors are CPU stand-ins and each sync is predicted, and the plain run computes the same
on the CPU; with CUDA both run on the GPU and the magic counts the real syncs. The static
pass over the cell is timed on its own too (``analyze_source`` over the parsed cell, as the
magic runs it: the one parse serves the pass and the compile, and the pass stops once it has
the 1,000 findings a report holds), as part of the magic's cost.
Ratios are of CPU time (the main thread), which a loaded machine disturbs far less than wall
time; the wall times are printed too. Each run starts from a collected heap (``gc.collect()``
before it), so that a full collection that the previous run's garbage made due does not land
in whichever run comes next, and plain and ``%%syncfree`` runs alternate, so that both see
the same load on the machine.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python_helper"))

PRELUDE = ("device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
           "x = torch.arange(1.0, 65.0, device=device)\n")

_READS = ("v{i} = x[{j}].item()", "v{i} = float(x[{j}])", "v{i} = int(x[{j}])",
          "v{i} = x.sum().item() + {i}", "v{i} = bool(x[{j}] > {i})", "v{i} = x[{j}].tolist()",
          "v{i} = int(x.argmax()) + {i}", "v{i} = x[:{k}].mean().item()")


def distinct_lines(n: int) -> str:
    return "".join(f"v{i} = x[{i % 64}].item()\n" for i in range(n))


def reads(n: int) -> str:
    return "".join(_READS[i % len(_READS)].format(i=i, j=i % 64, k=1 + i % 63) + "\n"
                   for i in range(n))


def run_once(shell, cell: str) -> tuple[float, float]:
    """(wall time, CPU time of this thread) of one run, from a collected heap."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    result = shell.run_cell(cell, store_history=False)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    if not result.success:
        raise SystemExit(f"the cell failed: {result.error_before_exec or result.error_in_exec!r}")
    return wall, cpu


def time_pair(shell, plain: str, magic: str, repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Medians (wall, CPU) of ``repeat`` runs of each cell, alternated so that both see the
    same load on the machine."""
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "magic": []}
    for _ in range(repeat):
        runs["plain"].append(run_once(shell, plain))
        runs["magic"].append(run_once(shell, magic))
    return tuple(  # type: ignore[return-value]
        (statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs))
        for pairs in (runs["plain"], runs["magic"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=1_000)
    args = parser.parse_args(argv)
    if min(args.repeat, args.lines, args.reads) < 1:
        parser.error("--repeat, --lines and --reads must be at least 1")

    import torch
    from IPython.testing import globalipapp

    from syncfree.analyze import analyze_source
    from syncfree.engine_choice import choose_engine
    from syncfree.report import MAX_FINDINGS

    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "syncfree")
    shell.user_ns["torch"] = torch
    mode = choose_engine(None).mode
    where = "predict mode on the CPU" if mode == "predict" else f"{mode} mode"
    out = sys.stdout
    rows = []
    with open(os.devnull, "w") as null, redirect_stdout(null):
        shell.run_cell(PRELUDE, store_history=False)
        for label, body in ((f"{args.lines:,} distinct syncing lines", distinct_lines(args.lines)),
                            (f"{args.reads:,} scalar reads", reads(args.reads))):
            cell = PRELUDE + body
            magic = f"%%syncfree --quiet\n{cell}"
            time_pair(shell, cell, magic, 1)  # warm up both
            plain, under = time_pair(shell, cell, magic, args.repeat)
            tree = ast.parse("\n" + cell)  # the magic's padded code text: line n is cell line n
            gc.collect()
            start = time.thread_time()
            analyze_source(magic, tree=tree, limit=MAX_FINDINGS)
            static = time.thread_time() - start
            report = shell.user_ns["_syncfree_report"]
            rows.append((label, plain, under, static, report["totals"]["syncs"],
                         len(report["sites"])))
    print(f"syncfree slow paths ({where}, median of {args.repeat}, torch {torch.__version__}):",
          file=out)
    for label, plain, under, static, syncs, sites in rows:
        print(f"  {label}: CPU time plain {plain[1]:.3f} s, %%syncfree {under[1]:.3f} s, "
              f"ratio {under[1] / plain[1]:.2f}x, {(under[1] - static) / plain[1]:.2f}x without "
              f"the static pass ({static:.3f} s); wall {plain[0]:.3f} s vs {under[0]:.3f} s; "
              f"{syncs:,} syncs, {sites:,} sites in the report", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
