"""``syncfree run`` against plain nbclient on a 50-cell notebook in which no cell syncs: prints the medians and the
ratio (the target is at most 1.2x).

    .venv/bin/python bench/run_overhead.py [--repeats 5]

Measured twice: in one process (``NotebookClient(...).execute()`` against ``syncfree.cli.run``: what syncfree adds
to nbclient), and as the commands a user types (``jupyter execute`` against ``syncfree run``: start-up and imports
included). Wall time is what a user waits for; CPU time (this process, the command and the kernel) is what a busy
machine disturbs least.

Both execute the same notebook in a fresh ``python3`` kernel from start to end (kernel start-up included, as a user
waits for it). The notebook is PyTorch code that never makes the CPU wait: matmuls, activations and reductions that
stay tensors, on CUDA when this machine has it, else on the CPU (where ``syncfree run`` is in predict mode).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from syncfree import cli

ROOT = Path(__file__).resolve().parents[1]
CELLS = 50


def notebook() -> nbformat.NotebookNode:
    device = "cuda" if _cuda() else "cpu"
    nb = nbformat.v4.new_notebook()
    cells = [f"import torch\nx = torch.randn(128, 128, device={device!r})\nw = torch.randn(128, 128, device={device!r})"]
    for i in range(1, CELLS):
        cells.append(
            f"y{i} = torch.relu(x @ w) + {i}\n"
            f"z{i} = y{i}.sum(dim=0).softmax(dim=0)\n"
            f"x = x * 0.5 + y{i} * 0.001\n"
            f"steps = [{i} * k for k in range(10)]"
        )
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def plain(folder: Path) -> tuple[float, float]:
    """nbclient alone (its documented use: NotebookClient(...).execute()): wall and CPU seconds (this process's and
    the kernel's, which nbclient waits for when it shuts the kernel down)."""
    nb = notebook()
    start, cpu = time.perf_counter(), _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return time.perf_counter() - start, _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - cpu


def syncfree_run(folder: Path) -> tuple[float, float, int]:
    """``syncfree run`` in this process (``syncfree.cli.run``, what the command calls): wall and CPU seconds, exit
    status."""
    path = folder / "nb.ipynb"
    nbformat.write(notebook(), path)
    start, cpu = time.perf_counter(), _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    with contextlib.redirect_stderr(io.StringIO()) as progress:
        status = cli.run(str(path), timeout=600, out=io.StringIO())
    elapsed = time.perf_counter() - start
    if status not in (0, 1):
        sys.exit(f"syncfree run failed ({status}): {progress.getvalue().strip()[-2000:]}")
    return elapsed, _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - cpu, status


def commands(folder: Path, command: list[str]) -> tuple[float, float, int]:
    """A command line on the notebook (start-up and imports included): wall and CPU seconds, exit status."""
    path = folder / "nb.ipynb"
    nbformat.write(notebook(), path)
    start, cpu = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, cwd=folder)
    elapsed, cpu = time.perf_counter() - start, _cpu(resource.RUSAGE_CHILDREN) - cpu
    if done.returncode not in (0, 1):
        sys.exit(f"{command[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return elapsed, cpu, done.returncode


def _line(label: str, base: list[tuple[float, float]], ours: list[tuple[float, float]], base_name: str) -> str:
    wall = statistics.median(t for t, _ in base), statistics.median(t for t, _ in ours)
    cpu = statistics.median(c for _, c in base), statistics.median(c for _, c in ours)
    return (f"{label}: {base_name} {wall[0]:.2f} s, syncfree run {wall[1]:.2f} s: x{wall[1] / wall[0]:.2f} "
            f"(CPU time {cpu[0]:.2f} s vs {cpu[1]:.2f} s: x{cpu[1] / cpu[0]:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "ours": [], "plain-cli": [], "ours-cli": []}
    statuses = set()
    with tempfile.TemporaryDirectory(prefix="syncfree-run-overhead-") as scratch:
        folder = Path(scratch)
        plain(folder)  # warm: the page cache (torch's libraries) and this process's imports, for both
        for _ in range(args.repeats):  # interleaved, so that load elsewhere hits both alike
            runs["plain"].append(plain(folder))
            *measured, status = syncfree_run(folder)
            runs["ours"].append(tuple(measured))
            statuses.add(status)
            *measured, status = commands(folder, [str(bin_dir / "jupyter-execute"), "--timeout", "600"])
            runs["plain-cli"].append(tuple(measured))
            *measured, status = commands(folder, [str(bin_dir / "syncfree"), "run", "--timeout", "600"])
            runs["ours-cli"].append(tuple(measured))
            statuses.add(status)
    ratio = statistics.median(t for t, _ in runs["ours"]) / statistics.median(t for t, _ in runs["plain"])
    print(f"{CELLS}-cell notebook in which no cell syncs, medians of {args.repeats} (target: syncfree run <= 1.2x plain "
          "nbclient)")
    print(_line("  in one process (NotebookClient.execute vs syncfree.cli.run)", runs["plain"], runs["ours"], "nbclient"))
    print(_line("  as commands (jupyter execute vs syncfree run)", runs["plain-cli"], runs["ours-cli"],
                "jupyter execute"))
    if statuses != {0}:
        print("  syncfree run reported syncs: the notebook is not sync-free, the comparison is off")
    return 0 if ratio <= 1.2 and statuses == {0} else 1


if __name__ == "__main__":
    sys.exit(main())
