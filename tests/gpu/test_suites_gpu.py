"""Third-party suites' CUDA paths that fail under ``pytest --syncfree`` on CPU stand-ins:
does a GPU fail them too? (``bench/third_party_suites.py`` finds them; ``make test-gpu``.)

The libraries are not installed on the GPU machine, so each test reproduces the library
test's code path in a few lines, runs it on the GPU, and runs the same lines in predict
mode with CUDA hidden (a subprocess, ``CUDA_VISIBLE_DEVICES=""``): the outcome must match.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]

# torch-optimizer 0.3.0, tests/test_optimizer.py, TestOptim._test_state_dict: past
# `if not torch.cuda.is_available(): return` it steps a CPU copy and a CUDA copy of the
# parameters and compares them with `assert weight == weight_cuda` (35 tests: LARS, PID,
# Ranger, RangerVA, SGDW x 7 parametrizations pass plain on a CPU and fail under
# --syncfree, which takes this branch).
STATE_DICT_BRANCH = """\
import torch
weight = torch.randn(10, 5)
weight_cuda = weight.float().cuda()
outcome = []
try:
    assert weight == weight_cuda
    outcome.append("passed")
except RuntimeError as error:
    outcome.append(str(error).splitlines()[0])
try:
    assert weight.cuda() == weight_cuda  # were both on the GPU: a bool of 50 elements
    outcome.append("passed")
except RuntimeError as error:
    outcome.append(str(error).splitlines()[0])
"""


def _on_gpu(code: str) -> list[str]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    namespace: dict = {}
    exec(compile(code, "<suite-branch>", "exec"), namespace)
    return namespace["outcome"]


def _on_standins(code: str) -> list[str]:
    runner = textwrap.dedent("""\
        import json, sys, syncfree
        with syncfree.watch(mode="predict"):
            namespace = {}
            exec(compile(sys.stdin.read(), "<suite-branch>", "exec"), namespace)
        print(json.dumps(namespace["outcome"]))
    """)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python_helper"),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", runner], input=code, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cpu_tensor_compared_with_its_cuda_copy_fails_on_the_gpu_as_on_the_standins():
    gpu = _on_gpu(STATE_DICT_BRANCH)
    # The GPU refuses to compare a CPU tensor with a CUDA one, and a bool of a
    # many-element comparison is ambiguous on any device: the library test fails there.
    assert "same device" in gpu[0], gpu
    assert "more than one value is ambiguous" in gpu[1], gpu
    standins = _on_standins(STATE_DICT_BRANCH)
    # The same errors (the wording after torch's common prefix differs between its checks).
    assert [_error_kind(o) for o in standins] == [_error_kind(o) for o in gpu], (standins, gpu)


def _error_kind(outcome: str) -> str:
    for kind in ("Expected all tensors to be on the same device", "more than one value is ambiguous"):
        if kind in outcome:
            return kind
    return outcome
