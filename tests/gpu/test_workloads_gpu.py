"""Predict mode against the GPU on whole workloads, per line (issue 22; ``make test-gpu``).

Each script in ``tests/gpu/data/`` (a GPT-style training script with causal masking,
torch.save checkpoints and an evaluation loop; nn.TransformerEncoder and MultiheadAttention
with padding masks; RNN packing; transformers' ``generate`` and train steps on a tiny random
GPT-2; a Llama-style model with padding and left-padded ``generate``; BERT classification
with an evaluation loop; torchmetrics' metrics; a Lightning ``Trainer.fit`` logging a metric;
accelerate with fp16; an AMP CNN step with GradScaler and OneCycleLR; torch ops and modules
that sync or not) runs twice through ``syncfree run --format json``: on the GPU (warn mode: the syncs
torch's debug mode sees, plus explicit synchronize calls) and with the GPU hidden
(``CUDA_VISIBLE_DEVICES=""``: predict mode on CPU stand-ins). The syncs per line of the
script must be the same. Each prints a ``syncfree-gpu:`` line with its figures.

Skipped where torch sees no CUDA device; the transformers workload where it is not installed.
Runs as a script too (``python tests/gpu/test_workloads_gpu.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

# The last seven came from a hunt that compared them on an H200 (torch 2.11, transformers 5.17, lightning 2.6.6,
# accelerate 1.15, torchmetrics 1.9): 88 lines, every count equal, the debug-mode and CUPTI engines alike.
WORKLOADS = ("gpt_train.py", "transformer_padding.py", "rnn_packing.py", "hf_gpt2.py", "hf_llama.py",
             "hf_bert_cls.py", "tm_metrics.py", "pl_fit.py", "accel.py", "amp_cnn.py", "torch_misc.py")
NEEDS = {"hf_gpt2.py": "transformers", "hf_llama.py": "transformers", "hf_bert_cls.py": "transformers",
         "tm_metrics.py": "torchmetrics", "pl_fit.py": "lightning", "accel.py": "accelerate"}


def syncs_per_line(script: Path, hide_cuda: bool) -> dict[int, int]:
    """{line of the script: syncs} from ``syncfree run --format json`` (lines of other
    files, should a sync be attributed there, are keyed by ``path:line``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python_helper"),
                                                      env.get("PYTHONPATH")]))
    if hide_cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    # --engine debug: torch's debug mode, what predict mode models (auto would take CUPTI,
    # which also counts thrust's and other libraries' blocking calls, if a workload
    # imported Triton).
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(
            [sys.executable, "-m", "syncfree", "run", "--format", "json", "--exit-zero",
             "--engine", "debug", str(script)], capture_output=True, text=True, env=env, cwd=cwd,
            timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts: dict = {}
    for entry in json.loads(proc.stdout):
        if entry.get("certainty") not in ("measured", "predicted") or not entry.get("count"):
            continue
        key = entry["line"] if Path(entry["path"]).name == script.name else \
            f"{entry['path']}:{entry['line']}"
        counts[key] = counts.get(key, 0) + entry["count"]
    return counts


@pytest.mark.parametrize("name", WORKLOADS)
def test_predicted_syncs_per_line_equal_the_gpu(name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    script = DATA / name
    gpu = syncs_per_line(script, hide_cuda=False)
    predicted = syncs_per_line(script, hide_cuda=True)
    lines = sorted(set(gpu) | set(predicted), key=str)
    exact = [line for line in lines if gpu.get(line) == predicted.get(line)]
    print(f"\nsyncfree-gpu: {name}: {len(exact)}/{len(lines)} lines exact, "
          f"gpu {sum(gpu.values())} syncs, predicted {sum(predicted.values())}")
    for line in lines:
        if gpu.get(line) != predicted.get(line):
            print(f"  line {line}: gpu {gpu.get(line, 0)}, predicted {predicted.get(line, 0)}")
    assert predicted == gpu


if __name__ == "__main__":
    failures = 0
    for workload in WORKLOADS:
        try:
            test_predicted_syncs_per_line_equal_the_gpu(workload)
        except BaseException as exc:  # noqa: BLE001 - a skip or a failure, reported
            failures += not isinstance(exc, pytest.skip.Exception)
            print("FAIL" if not isinstance(exc, pytest.skip.Exception) else "SKIP",
                  workload, type(exc).__name__, str(exc)[:300])
    print("failures:", failures)
    sys.exit(1 if failures else 0)
