"""What a sync costs, on a GPU (issue #37): the GPU trace gives each site a cost, and in the
three-sync step of bench/cost.py the sites come out in the order of the step time their
rewrites save, measured in the same run (paired, alternated). Prints ``syncfree-gpu:`` lines."""

from __future__ import annotations

import importlib.util
import json
import linecache
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from syncfree.session import choose_engine, new_recorder  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cost.py"


def _bench():
    spec = importlib.util.spec_from_file_location("syncfree_bench_cost", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_gpu_bound_item_costs_gpu_time_and_the_totals_add_up():
    code = ("for _ in range(30):\n    y = x @ w\n    z = y.relu() @ w\n    total = z.sum().item()\n")
    filename = "<syncfree-cost-gpu-item>"
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    recorder = new_recorder(choose_engine("warn", "debug"), files={filename: 0}, findings={filename: []},
                            measure_cost=True)
    with recorder:
        exec(compile(code, filename, "exec"), {"x": x, "w": w})
    fields = recorder.report_fields()
    print("syncfree-gpu: cost trace", recorder.trace_stats, fields["cost"])
    (site,) = [s for s in fields["sites"] if s["line"] == 4]
    assert site["count"] == 30 and site["cost_ms"] is not None and site["cost_ms"] > 0
    assert 0 < site["cost_share"] < 1 and site["cost_each_ms"] == pytest.approx(site["cost_ms"] / 30, rel=0.01)
    totals = fields["cost"]
    assert totals["gpu_busy_ms"] > 0 and totals["cost_ms"] <= totals["gpu_idle_ms"] + 1e-3
    assert not any("cost not measured" in n for n in fields["notes"])


def test_three_sync_step_sites_come_out_in_the_measured_order(tmp_path):
    out = tmp_path / "cost.json"
    _bench().main(["--only", "three", "--seconds", "30", "--steps", "60", "--cost-runs", "3", "--json", str(out)])
    data = json.loads(out.read_text())
    print("syncfree-gpu: three-sync step", data["three"], [(r["loop"], r["saved_ms"], r["cost_ms"])
                                                          for r in data["rows"]])
    assert data["three"]["order_cost"] == data["three"]["order_saving"]
