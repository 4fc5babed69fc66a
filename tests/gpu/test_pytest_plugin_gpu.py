"""The pytest plugin on CUDA (warn mode), and predict mode's autocast stand-in against a
real GPU's autocast (``make test-gpu``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from plugin_args import plugin_args

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT / "python_helper"), *filter(None, [os.environ.get("PYTHONPATH")])])}

SUITE = """\
import unittest
import pytest
import torch


@pytest.fixture(scope="session")
def batch():
    return torch.randn(64, 64, device="cuda" if torch.cuda.is_available() else "cpu")


def test_plain(batch):
    assert batch.is_cuda


@pytest.mark.sync_free
def test_marked_reads(batch):
    batch.sum().item()


@pytest.mark.sync_free
class TestCaseStyle(unittest.TestCase):
    def setUp(self):
        self.x = torch.ones(8, device="cuda")
        self.x.sum().item()  # a fixture's sync: not the test's

    def test_clean(self):
        assert (self.x * 2).is_cuda

    def test_reads(self):
        for _ in range(2):
            self.x.max().item()


def test_fails_after_a_sync(batch):
    batch.max().item()
    assert False
"""

RUNNER = f"""\
import sys, pytest
sys.exit(pytest.main([*{plugin_args()!r}, "-p", "no:cacheprovider", "-q", *sys.argv[1:]]))
"""


def _run(tmp_path, *args):
    result = subprocess.run([sys.executable, "run_tests.py", "test_cuda_suite.py", *args],
                            capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    return result, result.stdout + result.stderr


def _section(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "= syncfree =" in line)
    # Under -q the run ends with a bare "1 passed ..." line, not a "=" rule.
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("=") or re.match(r"\d+ (passed|failed)", lines[i])), len(lines))
    return lines[start:end]


def test_pytest_plugin_on_cuda_testcases_failed_tests_chains_and_xdist(tmp_path):
    (tmp_path / "test_cuda_suite.py").write_text(SUITE)
    (tmp_path / "run_tests.py").write_text(RUNNER)
    result, out = _run(tmp_path, "--syncfree")
    assert "3 failed, 2 passed" in out, out
    assert "FAILED test_cuda_suite.py::TestCaseStyle::test_reads - syncfree: " in out, out
    section = _section(out)
    # setUp's sync is in no test; the failed test's is in the summary; no chain reaches the runner
    assert section[1].startswith("4 syncs seen in 3 of 5 watched tests"), section
    assert "run_tests.py" not in out, out
    assert any("test_fails_after_a_sync" in line for line in section), section
    print("\nsyncfree-gpu: pytest plugin on CUDA (TestCase, failed test, runner script):\n"
          + "\n".join("    " + line for line in section))
    try:
        import xdist  # noqa: F401
    except ImportError:
        print("syncfree-gpu: pytest-xdist not installed here: -n 2 not compared")
        return
    _, workers = _run(tmp_path, "--syncfree", "-n", "2")
    # the same sites and counts (rows rank by blocked time, which differs from run to run, as
    # do the first calls' total on the 'once (setup, compilation)' line)
    assert sorted(_untimed(line) for line in _section(workers)) == \
        sorted(_untimed(line) for line in section), workers


def _untimed(line: str) -> str:
    return re.sub(r"\d+(\.\d+)? ms", "_ ms", line.split(", blocked")[0])


RANKED_SUITE = """\
import torch


def step(x, w):
    return (x @ w).sum().item()  # every step


def test_train():
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    big = torch.randn(8192, 8192, device="cuda")
    (big @ big @ big).sum().item()  # the warm-up: one large read, the larger total
    for _ in range(50):
        step(x, w)
    compiled = torch.compile(lambda t: (t * 2).relu().sum())
    for _ in range(3):
        compiled(x).item()
"""


def test_the_summary_ranks_a_per_step_sync_above_a_larger_warm_up(tmp_path):
    """``--syncfree``'s summary ranks as a watch's report does (sites.rank_key): the per-step
    ``.item()`` (50 small reads) above the warm-up's one large read, whose blocked time is all
    its first call; what torch.compile paid once after the 'once (setup, compilation)' line."""
    (tmp_path / "test_cuda_suite.py").write_text(RANKED_SUITE)
    (tmp_path / "run_tests.py").write_text(RUNNER)
    result, out = _run(tmp_path, "--syncfree")
    assert "1 passed" in out, out
    section = _section(out)
    print("\nsyncfree-gpu: --syncfree summary ranked by the time after the first call:\n"
          + "\n".join("    " + line for line in section))
    rows = [line for line in section[2:] if line.startswith("  test_cuda_suite.py:")]
    step = next(i for i, line in enumerate(rows) if line.startswith("  test_cuda_suite.py:5:") and "`.item()` waits for the GPU ×50" in line)
    warm_up = next(i for i, line in enumerate(rows) if line.startswith("  test_cuda_suite.py:12:") and "`.item()` waits for the GPU ×1," in line)
    assert step < warm_up, section
    once = next(i for i, line in enumerate(section) if line.startswith("  paid once (setup, compilation): "))
    assert all(not line.startswith("  test_cuda_suite.py:5:") for line in section[once:]), section


AUTOCAST_PROBE = """\
import json, sys
import torch
import syncfree

def probe():
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).cuda()
    conv = torch.nn.Conv2d(3, 4, 3).cuda()
    norm = torch.nn.LayerNorm(16).cuda()
    x = torch.randn(4, 16, device="cuda")
    img = torch.randn(2, 3, 8, 8, device="cuda")
    ops = {
        "matmul": lambda: x @ x.T, "mm": lambda: torch.mm(x, x.T), "bmm": lambda: torch.bmm(x[None], x.T[None]),
        "linear": lambda: lin(x), "conv2d": lambda: conv(img), "addmm": lambda: torch.addmm(x[:, :4], x, x.T),
        "softmax": lambda: torch.softmax(x, -1), "layer_norm": lambda: norm(x), "add": lambda: x + x,
        "sum": lambda: x.sum(), "relu": lambda: torch.relu(x), "exp": lambda: x.exp(),
        "log_softmax": lambda: torch.log_softmax(x, -1), "mse_loss": lambda: torch.nn.functional.mse_loss(x, x),
        "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None]),
    }
    found = {}
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast("cuda", dtype=dtype):
            for name, op in ops.items():
                found[f"{name}/{dtype}"] = str(op().dtype)
    return found

if sys.argv[1] == "predict":
    with syncfree.watch("predict"):
        print(json.dumps(probe()))
else:
    print(json.dumps(probe()))
"""


def test_autocast_stand_in_gives_the_gpus_dtypes(tmp_path):
    """The stand-in runs CPU autocast with the CUDA region's dtype: the ops a GPU casts to
    float16/bfloat16 are cast on the CPU too, as far as CPU autocast's op lists go."""
    (tmp_path / "probe.py").write_text(textwrap.dedent(AUTOCAST_PROBE))

    def probe(mode: str, env: dict) -> dict:
        done = subprocess.run([sys.executable, "probe.py", mode], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    gpu = probe("gpu", ENV)
    stand_in = probe("predict", {**ENV, "CUDA_VISIBLE_DEVICES": ""})
    differ = {name: (gpu[name], stand_in[name]) for name in gpu if gpu[name] != stand_in[name]}
    print(f"\nsyncfree-gpu: autocast dtypes, {len(gpu) - len(differ)} of {len(gpu)} op/dtype pairs as on "
          f"the GPU; differ (gpu, stand-in): {differ}")
    for name in ("matmul", "mm", "bmm", "linear", "conv2d", "addmm"):
        for dtype in ("torch.float16", "torch.bfloat16"):
            key = f"{name}/{dtype}"
            assert gpu[key] == stand_in[key] == dtype, (key, gpu[key], stand_in[key])


def test_syncfree_option_watches_doctests_on_a_gpu(tmp_path):
    """`pytest --syncfree --doctest-modules` on a GPU: a doctest's syncs are in the summary
    (doctests ran unwatched, their syncs in no total)."""
    (tmp_path / "steps.py").write_text(textwrap.dedent('''\
        def step():
            """
            >>> import torch
            >>> x = torch.ones(2, device="cuda")
            >>> for _ in range(2):
            ...     _ = x.sum().item()
            """
    '''))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             *plugin_args(), "--syncfree", "--doctest-modules",
                             "steps.py"],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    out = result.stdout
    assert "2 syncs seen in 1 of 1 watched test" in out, out + result.stderr
    assert "<doctest steps.step[2]>:2:9: SF101 `.item()` waits for the GPU ×2" in out, out
    print(f"\nsyncfree-gpu: doctest watched: {out.splitlines()[-3:]}")
