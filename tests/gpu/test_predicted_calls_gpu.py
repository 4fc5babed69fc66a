"""PyTorch calls whose syncs predict mode predicts on the CPU, measured on the GPU: a 0-dim CUDA tensor passed where
torch takes a number (tests/data/scalar_arguments.json) and calls of training and evaluation code
(tests/data/predict_calls_h200.json), each file's calls on the names its "preamble" makes. For each call, the syncs
torch's debug mode counts here against the file's count, and predict mode's (on the CPU stand-ins, CUDA hidden) against
the same, but the differences the file names.
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
DATA = ROOT / "tests" / "data"
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


def _counts(preamble: str, calls: dict, mode: str, env: dict) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", f"PREAMBLE = {preamble!r}\n" + COUNTER, mode],
                          input=json.dumps(calls), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("data", ["scalar_arguments.json", "predict_calls_h200.json"])
def test_calls_sync_on_the_gpu_as_measured_and_predicted(data):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    content = json.loads((DATA / data).read_text())
    calls, known = content["calls"], content.get("known", {})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python_helper"),
                                                        *filter(None, [os.environ.get("PYTHONPATH")])])}
    gpu = _counts(content["preamble"], calls, "warn", env)
    predicted = _counts(content["preamble"], calls, "predict", {**env, "CUDA_VISIBLE_DEVICES": ""})
    print(f"\nsyncfree-gpu: {data} (in the file / GPU / predicted):")
    for name, (code, expected) in calls.items():
        print(f"  {name:40s} {code[:48]:48s} {expected} / {gpu[name]} / {predicted[name]}"
              + ("  (known)" if name in known else ""))
    assert {name: gpu[name] for name in calls} == {name: expected for name, (_, expected) in calls.items()}
    assert {name: predicted[name] for name in calls if name not in known} \
        == {name: expected for name, (_, expected) in calls.items() if name not in known}
