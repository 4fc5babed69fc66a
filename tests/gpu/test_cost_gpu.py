"""What a sync costs, on a GPU (issue #37): the GPU trace gives each site a cost, and in the
three-sync step of bench/cost.py the sites come out in the order of the step time their
rewrites save, measured in the same run (paired, alternated). Prints ``syncfree-gpu:`` lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cost.py"


# Each test measures in a process of its own: torch's profiler (Kineto) keeps CUPTI's one subscriber slot once it has
# traced, so a later in-process test of the CUPTI engine found CUPTI held ("another tool holds CUPTI") in a suite
# run, a fault of the suite's order and not of what it tests.
ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, tmp_path: Path, ok: tuple[int, ...] = (0,)) -> str:
    script = tmp_path / "measure.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "python_helper"),
                                                                      os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=400)
    assert done.returncode in ok, done.stdout + done.stderr
    return done.stdout


ITEM = """\
import json, linecache
import torch
from syncfree.engine_choice import choose_engine, new_recorder

code = "for _ in range(30):\\n    y = x @ w\\n    z = y.relu() @ w\\n    total = z.sum().item()\\n"
filename = "<syncfree-cost-gpu-item>"
linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
x = torch.randn(4096, 4096, device="cuda")
w = torch.randn(4096, 4096, device="cuda")
recorder = new_recorder(choose_engine("warn", "debug"), files={filename: 0}, findings={filename: []},
                        measure_cost=True)
with recorder:
    exec(compile(code, filename, "exec"), {"x": x, "w": w})
fields = recorder.report_fields()
print(json.dumps({"stats": recorder.trace_stats, "fields": fields}, default=str))
"""


def test_a_gpu_bound_item_costs_gpu_time_and_the_totals_add_up(tmp_path):
    data = json.loads(_python(ITEM, tmp_path).strip().splitlines()[-1])
    fields = data["fields"]
    print("syncfree-gpu: cost trace", data["stats"], fields["cost"])
    (site,) = [s for s in fields["sites"] if s["line"] == 4]
    assert site["count"] == 30 and site["cost_ms"] is not None and site["cost_ms"] > 0
    assert 0 < site["cost_share"] < 1 and site["cost_each_ms"] == pytest.approx(site["cost_ms"] / 30, rel=0.01)
    totals = fields["cost"]
    assert totals["gpu_busy_ms"] > 0 and totals["cost_ms"] <= totals["gpu_idle_ms"] + 1e-3
    assert not any("cost not measured" in n for n in fields["notes"])


def test_three_sync_step_sites_come_out_in_the_measured_order(tmp_path):
    out = tmp_path / "cost.json"
    _python(f"import runpy, sys\nsys.argv = [{str(BENCH)!r}, '--only', 'three', '--seconds', '30', '--steps', '60', "
            f"'--cost-runs', '3', '--json', {str(out)!r}]\nrunpy.run_path({str(BENCH)!r}, run_name='__main__')\n",
            tmp_path, ok=(0, 1))  # 1: a loop missed bench/cost.py's figure, which the bench reports; the order is this test's
    data = json.loads(out.read_text())
    print("syncfree-gpu: three-sync step", data["three"], [(r["loop"], r["saved_ms"], r["cost_ms"])
                                                          for r in data["rows"]])
    assert data["three"]["order_cost"] == data["three"]["order_saving"]
    # the GPU's power over the trace was read (NVML): the costs know whether the GPU ran at its power limit
    power = data["trace"].get("power")
    print("syncfree-gpu: power over the three-sync trace", power)
    assert power is not None and power["limit_w"] > 0 and 0.0 <= power["capped_share"] <= 1.0
    # and the driver's samples of the draw over it (an H200's driver keeps them: one each 20 ms)
    assert power["at_limit_share"] is not None and 0.0 <= power["at_limit_share"] <= 1.0
