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
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

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
        "SF706 Normal.log_prob": (lambda: D.Normal(mu, sigma, validate_args=True).log_prob(v),
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
                args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
                if rec.get("form"):  # a Python-scalar form of the sample (measure_optable.py)
                    variant = sweep.form_variant(args, kwargs, rec["form"])
                    if variant is None:
                        continue
                    args, kwargs = variant
                args, kwargs = sweep.to_cuda((args, kwargs))
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


# Predictions that rest on torch's source or on another entry's samples rather than on a
# sample of their own (capture/optable.py: SHARED_KERNEL_SAMPLES, SIZE_BRANCHES; the histc
# handler of capture/predict.py): the GPU count must equal predict mode's on the CPU.
def _derived_cases():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(6, 4, generator=g)
    small, large = torch.arange(5.0), torch.arange(40.0)
    data = torch.randn(100, generator=g)
    return {
        "linalg.svd non-empty": lambda d: torch.linalg.svd(m.to(d), full_matrices=False),
        "svd non-empty": lambda d: torch.svd(m.to(d)),
        "svd_lowrank": lambda d: torch.svd_lowrank(m.to(d), q=2),
        "isin sorting path": lambda d: torch.isin(small.to(d), large.to(d)),
        "isin sorting path, assume_unique": lambda d: torch.isin(small.to(d), large.to(d),
                                                                 assume_unique=True),
        "isin brute force": lambda d: torch.isin(large.to(d), small.to(d)),
        "histc min=max": lambda d: torch.histc(data.to(d), bins=8),
        "histc range": lambda d: torch.histc(data.to(d), bins=8, min=-3, max=3),
        "equal different shapes": lambda d: torch.equal(small.to(d), large.to(d)),
        "combinations r=3": lambda d: torch.combinations(small.to(d), r=3),
        # the Scalar and Tensor overloads of a value argument (optable.FORM_FACTS, issue 22)
        "masked_fill python float": lambda d: m.to(d).masked_fill(m.to(d) > 0, float("-inf")),
        "masked_fill python bool": lambda d: m.to(d).masked_fill(m.to(d) > 0, True),
        "masked_fill 0-d tensor": lambda d: m.to(d).masked_fill(m.to(d) > 0, torch.tensor(0.0).to(d)),
        # held-out OpInfo samples the table missed (issue 22): optable._mode_reads, VIA
        "mode of 3000": lambda d: torch.mode(torch.arange(3000.0).to(d)),
        "mode of 4 slices of 3000": lambda d: torch.mode(torch.arange(12000.0).reshape(4, 3000).to(d), 1),
        "matrix_norm nuc": lambda d: torch.linalg.matrix_norm(m.to(d), ord="nuc"),
        "matrix_norm 2 batched": lambda d: torch.linalg.matrix_norm(torch.randn(2, 3, 2).to(d), ord=2),
        "linalg.norm -2": lambda d: torch.linalg.norm(m.to(d), ord=-2),
    }


DERIVED = ("linalg.svd non-empty", "svd non-empty", "svd_lowrank", "isin sorting path",
           "isin sorting path, assume_unique", "isin brute force", "histc min=max", "histc range",
           "equal different shapes", "combinations r=3", "masked_fill python float",
           "masked_fill python bool", "masked_fill 0-d tensor", "mode of 3000",
           "mode of 4 slices of 3000", "matrix_norm nuc", "matrix_norm 2 batched", "linalg.norm -2")


class _Counting:
    def __init__(self) -> None:
        self.n = 0

    def record_sync(self, frame, kind=None, *, predicted=False):
        if kind != "to_device":  # the cases' own .to("cuda") copies of CPU-made inputs
            self.n += 1


@pytest.mark.parametrize("name", DERIVED)
def test_derived_prediction_matches_the_gpu(name):
    from syncfree.capture.predict import PredictSession

    case = _derived_cases()[name]
    inputs_moved = (2 if name.startswith(("isin", "equal", "masked_fill")) else 1) + (
        name == "masked_fill 0-d tensor")
    measured, _ = syncs(lambda: case("cuda"))
    measured_copies, _ = syncs(lambda: [t.to("cuda") for t in [torch.ones(3)] * inputs_moved])
    recorder = _Counting()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with PredictSession(recorder):
            case("cuda")
    gpu = measured - measured_copies
    print(f"{name}: gpu {gpu}, predicted {recorder.n}")
    assert recorder.n == gpu, name


# Library calls whose syncs the catalog names by what the line called
# (catalog/library_entry_points.py), in warn mode on the GPU.
def test_library_entry_points_on_the_gpu():
    import inspect

    import syncfree

    lines = {}

    def here(tag):
        lines[tag] = inspect.currentframe().f_back.f_lineno

    with syncfree.watch(mode="warn") as w:
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        here("to"); model.to("cuda")  # noqa: E702
        opt = torch.optim.SGD(model.parameters(), lr=0.1)  # not fused: step reads found_inf
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(model(torch.randn(2, 4, device="cuda")).sum()).backward()
        here("step"); scaler.step(opt)  # noqa: E702
        scaler.update()
        # validate_args explicit: torch._dynamo turns the default off for the whole process once used
        here("normal"); torch.distributions.Normal(torch.zeros(3, device="cuda"), torch.ones(3, device="cuda"), validate_args=True)  # noqa: E702,E501
    with syncfree.watch(mode="warn") as w2:
        a = torch.randn(4, 4, device="cuda") + 4 * torch.eye(4, device="cuda")
        start = torch.tensor(1, device="cuda")
        here("narrow"); a.narrow(0, start, 2)  # noqa: E702
        here("inv"); torch.linalg.inv(a)  # noqa: E702
    by_line = {s.line: s for s in w.report.sites + w2.report.sites}
    for tag, rule in (("to", "SF303"), ("step", "SF701"), ("normal", "SF706"), ("narrow", "SF705"),
                      ("inv", "SF704")):
        site = by_line.get(lines[tag])
        print(f"{tag}: {site.rule if site else None} x{site.count if site else 0}")
        assert site is not None and site.rule == rule, (tag, site and site.rule)


if __name__ == "__main__":
    failures = 0
    runs = [*((test_rule_alternative_removes_the_sync, (name,)) for name in CASES),
            *((test_derived_prediction_matches_the_gpu, (name,)) for name in DERIVED),
            (test_library_entry_points_on_the_gpu, ()), (test_table_sample_remeasured, ())]
    for test, arguments in runs:
        try:
            test(*arguments)
        except Exception as exc:  # noqa: BLE001
            failures += 1
            print("FAIL", test.__name__, *arguments, type(exc).__name__, exc)
    print("failures:", failures)
    sys.exit(1 if failures else 0)
