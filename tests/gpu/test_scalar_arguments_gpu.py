"""A 0-dim CUDA tensor passed where torch takes a number (tests/data/scalar_arguments.json): the syncs torch's debug
mode counts on the GPU, against the JSON's count and predict mode's (on the CPU stand-ins, CUDA hidden), call by call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
CALLS: dict[str, list] = json.loads((ROOT / "tests" / "data" / "scalar_arguments.json").read_text())["calls"]
PREAMBLE = "import torch\nx = torch.arange(10., device='cuda')\nn = torch.randint(3, 4, (), device='cuda')\n"
COUNTER = """\
import json, sys, syncfree
calls = json.loads(sys.stdin.read())
counts = {}
for name, (code, _) in calls.items():
    namespace = {}
    with syncfree.watch(mode=sys.argv[1]):
        exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    with syncfree.watch(mode=sys.argv[1]) as w:
        exec(compile(code + "\\n", "<call>", "exec"), namespace)
    counts[name] = w.report.syncs
print(json.dumps(counts))
"""


def _counts(mode: str, env: dict) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", f"PREAMBLE = {PREAMBLE!r}\n" + COUNTER, mode],
                          input=json.dumps(CALLS), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cuda_tensor_read_as_a_number_syncs_on_the_gpu_as_predicted():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python_helper"),
                                                        *filter(None, [os.environ.get("PYTHONPATH")])])}
    gpu = _counts("warn", env)
    predicted = _counts("predict", {**env, "CUDA_VISIBLE_DEVICES": ""})
    rows = [(name, CALLS[name][0], CALLS[name][1], gpu[name], predicted[name]) for name in CALLS]
    print("\nsyncfree-gpu: a 0-dim CUDA tensor where torch takes a number (expected / GPU / predicted):")
    for name, code, expected, on_gpu, guess in rows:
        print(f"  {name:20s} {code:42s} {expected} / {on_gpu} / {guess}")
    assert [(name, on_gpu) for name, _, _, on_gpu, _ in rows] == [(name, exp) for name, _, exp, _, _ in rows]
    assert [(name, guess) for name, *_, guess in rows] == [(name, exp) for name, _, exp, _, _ in rows]
