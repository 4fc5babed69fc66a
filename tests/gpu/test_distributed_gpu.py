"""Distributed training on a GPU (``make test-gpu``; one GPU is enough): the counts that warn
mode sees (debug mode plus capture/explicit_distributed.py's wrappers) against the counts
predict mode gives for the same script on the CPU stand-ins with gloo.

- a 1-rank NCCL job of examples/ddp_train.py;
- a 2-rank gloo job on CUDA tensors (both ranks on the one GPU);
- a 1-rank NCCL job of the catalog's distributed facts (barrier, object collectives,
  find_unused_parameters, blocking wait).

Each test prints both reports (``pytest -s``) so that the figures can be quoted.
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
DATA = Path(__file__).resolve().parent / "data"


def env(**extra: str) -> dict[str, str]:
    result = {k: v for k, v in os.environ.items()
              if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SYNCFREE_RUN_ID", "SYNCFREE_RANK_MERGE")}
    result["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python_helper"), *filter(None, [os.environ.get("PYTHONPATH")])])
    result.update(extra)
    return result


def merged_sites(script: Path, nproc: int, *args: str, mode: str | None = None, **extra: str) -> dict:
    """``{(file, line): (count per rank, rule)}`` of ``syncfree run --nproc-per-node`` in json."""
    command = [sys.executable, "-m", "syncfree", "run", "--standalone", "--nproc-per-node", str(nproc),
               "--format", "json", "--exit-zero", *(["--mode", mode] if mode else []), str(script), *args]
    result = subprocess.run(command, cwd=ROOT, env=env(**extra), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    start = out.index("[\n") if not out.startswith("[") else 0  # the script's own prints come first
    entries = json.loads(out[start:])
    print(f"--- {script.name} ({mode or 'warn'}):")
    for e in entries:
        print(f"  {e['path']}:{e['line']} {e['rule']} {[r['count'] for r in e['ranks']]} "
              f"{'divergent ' if e['divergent'] else ''}{e['message']}")
    return {(e["path"], e["line"]): ([r["count"] for r in e["ranks"]], e["rule"]) for e in entries}


def counts(sites: dict) -> dict:
    return {key: value[0] for key, value in sites.items()}


def test_one_rank_nccl_ddp_example_warn_matches_predict():
    example = ROOT / "examples" / "ddp_train.py"
    warn = merged_sites(example, 1, "--steps", "6", "--log-every", "3")
    predicted = merged_sites(example, 1, "--steps", "6", "--log-every", "3", mode="predict")
    item = ("examples/ddp_train.py", 53)
    assert warn[item] == ([6], "SF101")  # the all-reduced loss read every step
    assert warn[("examples/ddp_train.py", 55)][0] == [2]  # rank 0's log line
    assert counts(warn) == counts(predicted), "warn mode (debug mode + wrappers) and predict mode disagree"


def test_two_rank_gloo_on_cuda_tensors_warn_matches_predict():
    script = DATA / "dist_gloo_cuda.py"
    warn = merged_sites(script, 2)
    predicted = merged_sites(script, 2, mode="predict")
    where = "tests/gpu/data/dist_gloo_cuda.py"
    assert counts(warn)[(where, 8)] == [3, 3]  # gloo on CUDA: each collective waits (explicit_distributed.py)
    assert counts(warn)[(where, 9)] == [3, 3]
    assert counts(warn)[(where, 11)] == [1, 1]
    assert (where, 12) not in warn  # gloo's barrier: no device sync
    assert counts(warn)[(where, 14)] == [1, 0]  # divergent
    assert counts(warn) == counts(predicted)


def test_one_rank_nccl_catalog_facts():
    script = DATA / "dist_nccl_facts.py"
    warn = merged_sites(script, 1)
    predicted = merged_sites(script, 1, mode="predict")
    where = "tests/gpu/data/dist_nccl_facts.py"
    c = counts(warn)
    assert (where, 14) not in c and (where, 17) not in c  # NCCL all_reduce and wait(): no host wait
    assert c[(where, 15)] == [3]
    assert c[(where, 18)] == [1] and warn[(where, 18)][1] == "SF902"  # barrier
    assert warn[(where, 20)][1] == "SF903" and warn[(where, 22)][1] == "SF903"  # object collectives
    # Facts to quote (sync-facts.md): the object collectives' syncs per call on one rank, and
    # whether find_unused_parameters with an unused parameter syncs in backward (reducer.cpp
    # says a blocking copy; predict mode does not model it).
    print("all_gather_object syncs:", c.get((where, 20)), "broadcast_object_list syncs:", c.get((where, 22)),
          "backward with an unused parameter:", c.get((where, 38)))
    for line in (20, 22):
        assert c[(where, line)] == counts(predicted)[(where, line)], f"line {line}: warn {c[(where, line)]}, " \
            f"predicted {counts(predicted).get((where, line))}"


def test_one_rank_nccl_blocking_wait():
    script = DATA / "dist_nccl_facts.py"
    warn = merged_sites(script, 1, TORCH_NCCL_BLOCKING_WAIT="1")
    predicted = merged_sites(script, 1, mode="predict", TORCH_NCCL_BLOCKING_WAIT="1")
    where = "tests/gpu/data/dist_nccl_facts.py"
    assert counts(warn)[(where, 14)] == [3]  # each collective waits on the CPU
    assert counts(warn)[(where, 17)] == [1]  # and each wait()
    for line in (14, 17, 18):
        assert counts(warn)[(where, line)] == counts(predicted)[(where, line)]


def test_the_notebook_bundle_carries_each_ranks_measured_blocked_time(tmp_path):
    """What the JupyterLab table shows (%syncfree merge DIR, syncfree/distributed/display.py) for a measured job:
    each rank's count and blocked time per site, the ranks ranked by blocked time."""
    from syncfree.distributed.display import merged_data
    from syncfree.distributed.merge import MergedReport

    script = DATA / "dist_gloo_cuda.py"
    command = [sys.executable, "-m", "syncfree", "run", "--standalone", "--nproc-per-node", "2", "--exit-zero",
               "--rank-report-dir", str(tmp_path), str(script)]
    result = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    data = merged_data(MergedReport.from_directory(tmp_path))
    try:
        from syncfree.distributed.display import validate_merged

        validate_merged(data)
    except ImportError:  # no jsonschema on the GPU machine
        pass
    sites = {(s["file"], s["line"]): s for s in data["sites"]}
    where = "tests/gpu/data/dist_gloo_cuda.py"
    for line in (8, 9):
        rows = sites[(where, line)]["per_rank"]
        print(f"  line {line}: " + ", ".join(f"rank {r['rank']} ×{r['count']} {r['blocked_ms']} ms" for r in rows))
        assert [r["count"] for r in rows] == [3, 3]
        assert all(isinstance(r["blocked_ms"], float) for r in rows)  # measured on each rank
    assert sites[(where, 14)]["divergent"] and [r["count"] for r in sites[(where, 14)]["per_rank"]] == [1, 0]
    assert all(isinstance(t["blocked_ms"], float) for t in data["ranks"])
    assert data["extremes"] is not None and data["totals"]["blocked_ms"] > 0
    assert "ranked by blocked time" in data["summary"]
    # Ranked as every report ranks its sites (sites.rank_key): the recurring lines by their time after the first
    # calls, which each rank timed apart; the ranks compared by that time at their recurring sites.
    from syncfree.capture.sites import rank_key

    own = [s for s in data["sites"] if not s["in_children"]]
    keys = [rank_key("phase" in s, s["blocked_ms"], s.get("first_ms"), s["count"]) for s in own]
    assert keys == sorted(keys), own
    for line in (8, 9):
        assert all(isinstance(r.get("first_ms"), float) for r in sites[(where, line)]["per_rank"])
    assert all(isinstance(t["recurring_ms"], float) for t in data["ranks"])
    print(f"  summary: {data['summary']}")
