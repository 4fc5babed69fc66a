"""The GPU suite: SyncRecorder against real CUDA syncs (``make test-gpu``).

Runs with plain pytest on a machine with torch + CUDA and without IPython: cells are
compiled here under a cell filename, as the magic does. Every test is skipped, with the
reason shown, where torch sees no CUDA device.
"""

from __future__ import annotations

import itertools
import linecache
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python_helper"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: injection.py

# The names the measured patterns use (sync-facts.md), all on CUDA unless the name says
# otherwise. Sizes keep every pattern valid: repeat_interleave(v, r) needs len(v) ==
# len(r), cross_entropy(x, r % 64) needs len(r) == x.shape[0], output_size=128 == r2.sum().
SETUP = """\
import numpy as np
import torch
torch.manual_seed(0)
x = torch.randn(64, 64, device="cuda")
xc = torch.randn(64, 64)
loss = x.abs().mean()
a = torch.tensor(1.0, device="cuda")
b = torch.tensor(2.0, device="cuda")
idx_cpu = torch.tensor([0, 2, 5])
idx_gpu = idx_cpu.cuda()
zero_gpu = torch.zeros((), device="cuda")
i_gpu = torch.tensor(1, device="cuda")
j_gpu = torch.tensor(5, device="cuda")
mask = x > 0
r = torch.randint(0, 4, (64,), device="cuda")
r2 = torch.full((64,), 2, device="cuda")
v = torch.randn(64, device="cuda")
model = torch.nn.Linear(64, 64).cuda()
torch.cuda.synchronize()
"""

_numbers = itertools.count(1)


@pytest.fixture(autouse=True)
def _needs_cuda():
    torch = pytest.importorskip("torch", reason="no torch: tests/gpu needs torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: tests/gpu runs on a machine with one (make test-gpu)")


class Cell:
    """Source compiled under a cell filename registered in linecache (as IPython's
    CachingCompiler does), with its static findings."""

    def __init__(self, source: str) -> None:
        from syncfree.analyze import analyze_source

        self.source = source
        self.filename = f"<syncfree-gpu-cell-{next(_numbers)}>"
        linecache.cache[self.filename] = (len(source), None, source.splitlines(keepends=True),
                                          self.filename)
        self.code = compile(source, self.filename, "exec")
        self.findings = analyze_source(source)

    def recorder(self, mode: str = "warn", **options):
        """The recorder as every surface makes it (`syncfree.engine_choice.new_recorder`)."""
        from syncfree.engine_choice import Engine, new_recorder
        from syncfree.report import device_info

        stop_at_first = options.pop("stop_at_first", False)
        engine = Engine(mode, device_info("cuda" if mode != "predict" else "predict"),
                        stop_at_first=stop_at_first)
        return new_recorder(engine, files={self.filename: 0},
                            findings={self.filename: self.findings}, **options)


@pytest.fixture
def cuda_namespace():
    """A fresh namespace holding the patterns' tensors (set up outside any recorder)."""
    namespace: dict = {}
    exec(compile(SETUP, "<syncfree-gpu-setup>", "exec"), namespace)
    return namespace


@pytest.fixture
def cell():
    return Cell
