"""The shapes issue 23 made quiet (or kept) in ``syncfree check``, run on CUDA (``make test-gpu``).

Each case is a small program: the static pass's findings on its marked line are compared with the syncs torch's
sync debug mode counts when that line runs on a GPU. A case the rules leave quiet must not sync; a case they report
must sync. Skipped where torch sees no CUDA device. Runs as a script too.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python_helper"))

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

from syncfree.analyze import analyze_source  # noqa: E402

MESSAGE = "called a synchronizing CUDA operation"

# name: (setup run on the GPU first, the line whose syncs are counted, the code as a library writes it with the
# line marked `# here`: what the static pass reads, with values arriving as parameters it cannot place).
CASES = {
    "histc with a written range": (
        "x = torch.randn(1000, device='cuda'); n = 10", "h = torch.histc(x, bins=n, min=0, max=n - 1)",
        "def f(x, n):\n    return torch.histc(x, bins=n, min=0, max=n - 1)  # here"),
    "histc without a range": (
        "x = torch.randn(1000, device='cuda')", "h = torch.histc(x, bins=10)",
        "def f(x):\n    return torch.histc(x, bins=10)  # here"),
    "layer drop draw": (
        "p = 0.1", "drop = bool(torch.rand([]) < p)",
        "def f(self, x):\n    p = torch.rand([])\n    if p < self.layerdrop:  # here\n        return x"),
    "repeat_interleave with an int": (
        "x = torch.randn(8, 4, device='cuda'); n, k = 6, 2", "y = x.repeat_interleave(n // k, dim=0)",
        "def f(x: torch.Tensor, n, k):\n    return x.repeat_interleave(n // k, dim=0)  # here"),
    "repeat_interleave with counts": (
        "x = torch.randn(8, 4, device='cuda'); grid = torch.ones(8, 3, dtype=torch.long, device='cuda')",
        "y = torch.repeat_interleave(x, grid[:, 0], dim=0)",
        "def f(x, grid):\n    return torch.repeat_interleave(x, grid[:, 0], dim=0)  # here"),
    "index assign after enumerate": (
        "x = torch.zeros(4, 8, device='cuda'); rows = [1, 2, 3, 4]",
        "for k, row in enumerate(rows):\n    x[k, 3:] = 0.0",
        "x = torch.zeros(4, 8, device='cuda')\nfor k, row in enumerate(rows):\n    x[k, 3:] = 0.0  # here"),
    "named mask assign": (
        "scores = torch.randn(4, 8, device='cuda'); beam_mask = scores > 0", "scores[beam_mask] = 0",
        "def f(scores: torch.Tensor, beam_mask):\n    scores[beam_mask] = 0  # here"),
    "CPU mask on a GPU tensor": (
        "feats = torch.randn(16, 4, device='cuda'); n = torch.full((16,), 3, device='cuda')\n"
        "m = (torch.arange(16, device='cuda') < n).cpu()", "sel = feats[m]",
        "def f(feats: torch.Tensor, n: torch.Tensor):\n    m = (torch.arange(16, device=n.device) < n).cpu()\n"
        "    return feats[m]  # here"),
    "as_tensor of a GPU tensor": (
        "labels = torch.ones(8, dtype=torch.long, device='cuda')",
        "y = torch.as_tensor(labels, dtype=torch.float32, device=labels.device)",
        "def f(labels: torch.Tensor):\n    return torch.as_tensor(labels, dtype=torch.float32, device=labels.device)  # here"),
    "device-agnostic move": (
        "labels = torch.ones(8, device='cuda'); logits = torch.randn(8, 3, device='cuda')",
        "labels = labels.to(logits.device)",
        "def f(labels, logits):\n    return labels.to(logits.device)  # here"),
    "CPU-made tensor moved": (
        "x = torch.randn(8, device='cuda')", "w = torch.arange(8).to(x.device)",
        "def f(x):\n    return torch.arange(8).to(x.device)  # here"),
    "fused GradScaler step": (
        "model = torch.nn.Linear(8, 8).cuda(); opt = torch.optim.AdamW(model.parameters(), fused=True)\n"
        "scaler = torch.amp.GradScaler()\nscaler.scale(model(torch.randn(4, 8, device='cuda')).sum()).backward()",
        "scaler.step(opt)",
        "scaler = torch.amp.GradScaler()\nopt = torch.optim.AdamW(params, fused=True)\nscaler.step(opt)  # here"),
    "a loss module's item": (
        "import torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\n"
        "out = torch.randn(4, 3, device='cuda'); y = torch.tensor([0, 1, 2, 0], device='cuda')",
        "v = criterion(out, y).item()",
        "import torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\ndef step(out, y):\n"
        "    return criterion(out, y).item()  # here"),
    "0-dim CPU index from iterating arange": (
        "x = torch.randn(8, 4, device='cuda')", "for i in torch.arange(3):\n    y = x[i]",
        "def f(x: torch.Tensor):\n    for i in torch.arange(3):\n        y = x[i]  # here\n    return y"),
    "0-dim CPU index writing a row": (
        "x = torch.zeros(8, 4, device='cuda'); i = torch.tensor(3)", "x[i] = 1.0",
        "def f():\n    x = torch.zeros(8, 4, device='cuda')\n    i = torch.tensor(3)\n    x[i] = 1.0  # here"),
    "0-dim CPU index writing one element": (
        "x = torch.zeros(8, device='cuda'); i = torch.tensor(3)", "x[i] = 1.0",
        "def f():\n    x = torch.zeros(8, device='cuda')\n    i = torch.tensor(3)\n    x[i] = 1.0  # here"),
    "0-dim CUDA index from argmax": (
        "x = torch.randn(8, 4, device='cuda')", "y = x[x.sum(1).argmax()]",
        "def f(x: torch.Tensor):\n    x = x.cuda()\n    return x[x.sum(1).argmax()]  # here"),
    "0-dim CUDA index from an element": (
        "x = torch.randn(8, 4, device='cuda'); idx = torch.arange(3, device='cuda')", "y = x[idx[0]]",
        "def f():\n    x = torch.randn(8, 4, device='cuda')\n    idx = torch.arange(3, device='cuda')\n"
        "    return x[idx[0]]  # here"),
    "0-dim CUDA index writing a row": (
        "x = torch.zeros(8, 4, device='cuda'); i = torch.tensor(3, device='cuda')", "x[i] = 1.0",
        "def f(i):\n    x = torch.zeros(8, 4, device='cuda')\n    i = x.sum(1).argmax()\n    x[i] = 1.0  # here"),
    "1-dim CPU index": (
        "x = torch.randn(8, 4, device='cuda'); idx = torch.tensor([1, 2])", "y = x[idx]",
        "def f(x: torch.Tensor):\n    idx = torch.tensor([1, 2])\n    return x[idx]  # here"),
}


def _syncs(setup: str, line: str) -> int:
    scope: dict = {"torch": torch}
    exec(setup, scope)  # noqa: S102 - the test's own code
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", message=MESSAGE)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            exec(line, scope)  # noqa: S102
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return sum(str(w.message).startswith(MESSAGE) for w in caught)


def _reported(static: str) -> bool:
    """Whether the static pass reports a finding on the line marked ``# here``."""
    source = "import torch\n" + static + "\n"
    marked = next(number for number, text in enumerate(source.splitlines(), 1) if text.endswith("# here"))
    return any(f["range"]["line"] <= marked <= f["range"]["end_line"] for f in analyze_source(source, select=["ALL"]))


@pytest.mark.parametrize("name", list(CASES))
def test_static_verdict_matches_the_gpu(name):
    setup, line, static = CASES[name]
    syncs = _syncs(setup, line)
    reported = _reported(static)
    print(f"syncfree-gpu: {name}: {syncs} syncs on CUDA, reported statically: {reported}")
    assert reported == (syncs > 0), f"{name}: {syncs} syncs on the GPU, reported: {reported}"


if __name__ == "__main__":
    for case, (setup, line, static) in CASES.items():
        print(f"{case}: {_syncs(setup, line)} syncs, reported {_reported(static)}")
