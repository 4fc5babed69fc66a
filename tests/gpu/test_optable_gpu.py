"""The op table and the SF704-SF706 rules, re-measured on CUDA (``make test-gpu``).

* A sample of the committed table (every op that synced, and as many that did not) is
  measured again with the sweep's own method (scripts/measure_optable.py): the counts
  must match the table's.
* Each new rule's example syncs, and its sync-free alternative makes no sync and gives
  the same result.

Skipped where torch sees no CUDA device. Runs as a script too (``python tests/gpu/test_optable_gpu.py``).
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python_helper"))
sys.path.insert(0, str(ROOT / "scripts"))

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

MESSAGE = "called a synchronizing CUDA operation"


def syncs(fn):
    """(number of sync warnings during fn(), its result)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", message=MESSAGE)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    return sum(str(w.message).startswith(MESSAGE) for w in caught), out


def _cases():
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(16, 16, generator=g) + 16 * torch.eye(16)).cuda()
    b = torch.randn(16, 3, generator=g).cuda()
    spd = a @ a.T
    x = torch.randn(10, 8, generator=g).cuda()
    start = torch.tensor(3, device="cuda")
    lo, hi = torch.tensor(0.0, device="cuda"), torch.tensor(2.0, device="cuda")
    mu, sigma = torch.zeros(8, device="cuda"), torch.ones(8, device="cuda")
    v = torch.randn(8, generator=g).cuda()
    D = torch.distributions
    return {
        "SF704 inv": (lambda: torch.linalg.inv(a), lambda: torch.linalg.inv_ex(a, check_errors=False)[0]),
        "SF704 solve": (lambda: torch.linalg.solve(a, b), lambda: torch.linalg.solve_ex(a, b, check_errors=False)[0]),
        "SF704 cholesky": (lambda: torch.linalg.cholesky(spd),
                           lambda: torch.linalg.cholesky_ex(spd, check_errors=False)[0]),
        "SF705 narrow": (lambda: x.narrow(0, start, 4), lambda: x.narrow(0, 3, 4)),
        "SF102 linspace": (lambda: torch.linspace(lo, hi, 5, device="cuda"),
                           lambda: lo + (hi - lo) * torch.linspace(0, 1, 5, device="cuda")),
        "SF706 Normal.log_prob": (lambda: D.Normal(mu, sigma).log_prob(v),
                                  lambda: D.Normal(mu, sigma, validate_args=False).log_prob(v)),
    }


CASES = ("SF704 inv", "SF704 solve", "SF704 cholesky", "SF705 narrow", "SF102 linspace", "SF706 Normal.log_prob")


@pytest.mark.parametrize("name", CASES)
def test_rule_alternative_removes_the_sync(name):
    before, after = _cases()[name]
    n_before, out_before = syncs(before)
    n_after, out_after = syncs(after)
    print(f"{name}: {n_before} sync(s) -> {n_after}")
    assert n_before >= 1, name
    assert n_after == 0, name
    torch.testing.assert_close(out_after, out_before, rtol=1e-4, atol=1e-5)


def test_table_sample_remeasured():
    pytest.importorskip("expecttest")
    import measure_optable as sweep
    from torch.testing._internal.common_methods_invocations import op_db

    from syncfree.capture import optable

    path = optable.available()[-1][1]
    data = json.loads(path.read_text())
    by_key = {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db}
    syncing = [k for k, e in data["ops"].items() if e["summary"] in ("always", "depends") and k in by_key]
    quiet = [k for k, e in data["ops"].items() if e["summary"] == "never" and k in by_key]
    keys = syncing + random.Random(0).sample(quiet, min(len(quiet), len(syncing)))
    agree = total = 0
    differ = []
    for key in keys:
        op = by_key[key]
        recs = [s for s in data["ops"][key]["samples"] if s.get("syncs") is not None]
        for dtype_name in sorted({s["dtype"] for s in recs}):
            torch.manual_seed(0)
            samples = list(itertools.islice(op.sample_inputs("cpu", getattr(torch, dtype_name),
                                                             requires_grad=False), 4))
            for rec in (s for s in recs if s["dtype"] == dtype_name and s["i"] < len(samples)):
                sample = samples[rec["i"]]
                args, kwargs = sweep.to_cuda(((sample.input, *sample.args), dict(sample.kwargs)))
                n, err = sweep.count_syncs(op.op, args, kwargs)
                if err is not None:
                    continue
                total += 1
                if n == rec["syncs"]:
                    agree += 1
                else:
                    differ.append(f"{key}[{dtype_name}#{rec['i']}] table {rec['syncs']} now {n}")
    print(f"\n{path.name} (measured {data['torch']} on {data['device']}), re-measured on "
          f"{torch.__version__} {torch.cuda.get_device_name(0)}: {agree}/{total} samples agree "
          f"over {len(keys)} ops ({len(syncing)} that sync)")
    for line in differ:
        print("  ", line)
    assert total and agree / total >= 0.97


if __name__ == "__main__":
    failures = 0
    for name in CASES:
        try:
            test_rule_alternative_removes_the_sync(name)
        except Exception as exc:  # noqa: BLE001
            failures += 1
            print("FAIL", name, type(exc).__name__, exc)
    try:
        test_table_sample_remeasured()
    except Exception as exc:  # noqa: BLE001
        failures += 1
        print("FAIL table", type(exc).__name__, exc)
    print("failures:", failures)
    sys.exit(1 if failures else 0)
