"""The measured op table against predict mode: the OpInfo samples replayed on the CPU.

The table (``syncfree/data/optable-torch2.11-cuda.json``) was measured on a GPU by
``scripts/measure_optable.py``: every OpInfo entry's first samples, made on the CPU with
``torch.manual_seed(0)`` per (op, dtype) and moved to CUDA. Here the very same samples are
made again on the CPU, marked as virtual CUDA tensors in a PredictSession, and the op is
called: the predicted syncs are compared with the measured ones, per op and per sample.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

torch = pytest.importorskip("torch")

import measure_optable as sweep  # noqa: E402  (scripts/: the sweep's Python-scalar forms)

from syncfree.capture import optable  # noqa: E402
from syncfree.capture.predict import PredictSession  # noqa: E402


class CountingRecorder:
    def __init__(self) -> None:
        self.n = 0
        self.kinds: Counter = Counter()

    def record_sync(self, frame, kind=None, *, predicted=False):
        self.n += 1
        self.kinds[kind] += 1


def test_table_loads_with_its_provenance():
    table = optable.load("2.11.0")
    assert table is not None and table.torch_version.startswith("2.11")
    assert "H100" in table.device or "H200" in table.device
    assert table.note is None
    assert {"linalg.inv", "narrow", "isin", "combinations"} <= set(table.syncing_names()) | {
        n for n in table.entries if table.entries[n].syncs_sometimes()}


def test_nearest_version_carries_a_note():
    table = optable.load("2.9.1")
    assert table is not None and table.note and "2.9.1" in table.note


def test_argument_dependent_ops_follow_the_signature():
    table = optable.load("2.11.0")
    x = torch.randn(4, 4)
    assert table.predicted_syncs(torch.narrow, (x, 0, 1, 2), {}) == 0
    assert table.predicted_syncs(torch.narrow, (x, 0, torch.tensor(1), 2), {}) == 1
    assert table.predicted_syncs(torch.linalg.inv, (x,), {}) == 1
    assert table.predicted_syncs(torch.add, (x, x), {}) == 0
    assert table.predicted_syncs(lambda t: t, (x,), {}) is None


def test_unmeasured_calls_are_counted_not_silently_zero():
    # An op with a C++ kernel and no measurement (a custom op's Python kernel runs on the
    # stand-ins instead, its syncs predicted: test_predict.py, custom ops).
    recorder = CountingRecorder()
    with PredictSession(recorder):
        x = torch.randn(3, 3, device="cuda")
        y = torch.linalg.inv(x)
        torch.narrow(x, 0, torch.tensor(1, device="cuda"), 1)
        torch.ops.aten.sin.default(y)  # measured under its Python name
        for _ in range(3):
            torch.ops.aten._test_serialization_subcmul(y, y)  # no measurement
    tally = optable.tally_of(recorder)
    assert recorder.kinds["library"] == 2
    assert dict(tally.unmeasured) == {"aten::_test_serialization_subcmul": 3}
    fields = optable.report_of(recorder)
    assert fields["unmeasured_calls"] == 3 and fields["predicted_syncs"] == 2
    from syncfree.output import predict_table_lines

    assert predict_table_lines({"predict_table": fields})[0] == (
        "predict mode: 3 calls to 1 op without a measurement (aten::_test_serialization_subcmul); "
        "they may sync")


def test_an_optimizer_loop_has_no_unmeasured_calls():
    recorder = CountingRecorder()
    with PredictSession(recorder):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.LayerNorm(16), torch.nn.Linear(16, 2)).to("cuda")
        opt = torch.optim.AdamW(model.parameters())
        x, y = torch.randn(4, 8, device="cuda"), torch.randint(0, 2, (4,), device="cuda")
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    assert optable.tally_of(recorder).unmeasured_calls == 0, optable.tally_of(recorder).unmeasured


def _op_db():
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


@pytest.mark.exhaustive
def test_opinfo_samples_replayed_in_predict_mode(capsys):
    # The whole table: about a minute on a 2-core machine, so `make test-all` (nightly, GPU machine) runs it and
    # `make test` runs the representative subset below.
    _replay_opinfo_samples(capsys, lambda ops: set(ops))


def test_opinfo_samples_of_a_representative_subset_replayed_in_predict_mode(capsys):
    # make test's share of the sweep above: every op the GPU measured syncing (the recall is the whole table's) and
    # every 8th of the others in the table's order (a sample of the ops where predict mode could over-predict).
    def representative(ops: dict) -> set[str]:
        syncing = {key for key, entry in ops.items() if any(s.get("syncs") for s in entry["samples"])}
        return syncing | set([key for key in ops if key not in syncing][::8])

    _replay_opinfo_samples(capsys, representative)


def _replay_opinfo_samples(capsys, select) -> None:
    """Replays the OpInfo samples of the table's ops that ``select(ops)`` names and checks the predicted syncs
    against the measured ones: the op-level recall and precision and the sample-level exact count, 0.97 each."""
    table_path = optable.available()[-1][1]
    import json

    data = json.loads(table_path.read_text())
    chosen = select(data["ops"])
    by_key = {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in _op_db()}
    measured_ops: dict[str, bool] = {}
    predicted_ops: dict[str, bool] = {}
    exact = total = 0
    sample_misses: list[str] = []
    changed: list[str] = []
    for key, entry in data["ops"].items():
        op = by_key.get(key)
        if op is None or key not in chosen:
            continue
        per_dtype: dict[str, list[dict]] = {}
        for s in entry["samples"]:
            if s.get("syncs") is not None:
                per_dtype.setdefault(s["dtype"], []).append(s)
        for dtype_name, recs in per_dtype.items():
            dtype = getattr(torch, dtype_name)
            torch.manual_seed(0)
            try:
                samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), 4))
            except Exception:  # noqa: BLE001
                continue
            for rec in recs:
                if rec["i"] >= len(samples):
                    continue
                sample = samples[rec["i"]]
                args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
                name = f"{key}[{rec['dtype']}#{rec['i']}{' ' + rec['form'] if rec.get('form') else ''}]"
                if rec.get("form"):  # the sample with a Python scalar kind at a value place
                    variant = sweep.form_variant(args, kwargs, rec["form"])
                    if variant is None:
                        changed.append(name)
                        continue
                    args, kwargs = variant
                if rec.get("fp") and rec["fp"] != optable.fingerprint(args, kwargs):
                    changed.append(name)
                    continue  # this torch's OpInfo yields another sample at that index
                recorder = CountingRecorder()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        with PredictSession(recorder) as session:
                            for t in optable_tensors((args, kwargs)):
                                session.registry.mark_cuda(t)
                            op.op(*args, **kwargs)
                except Exception:  # noqa: BLE001 - ops the CPU cannot run (jiterator, ...)
                    continue
                total += 1
                if recorder.n == rec["syncs"]:
                    exact += 1
                else:
                    sample_misses.append(f"{name} gpu {rec['syncs']} predicted {recorder.n}")
                measured_ops[key] = measured_ops.get(key, False) or rec["syncs"] > 0
                predicted_ops[key] = predicted_ops.get(key, False) or recorder.n > 0
    gpu = {k for k, v in measured_ops.items() if v}
    pred = {k for k, v in predicted_ops.items() if v}
    recall = len(gpu & pred) / max(1, len(gpu))
    precision = len(gpu & pred) / max(1, len(pred))
    sample_exact = exact / max(1, total)
    with capsys.disabled():
        print(f"\nop table {table_path.name}: {len(measured_ops)} ops, {total} samples replayed on CPU")
        print(f"op-level recall {recall:.3f} ({len(gpu & pred)}/{len(gpu)}), precision {precision:.3f} "
              f"({len(gpu & pred)}/{len(pred)}), sample-level exact count {sample_exact:.3f} ({exact}/{total})")
        print("ops missed:", sorted(gpu - pred))
        print("ops over-predicted:", sorted(pred - gpu))
        print(f"samples skipped (changed since the measurement's torch {data['torch']}):",
              len(changed), changed[:10])
        print("sample misses:", len(sample_misses))
        for line in sample_misses[:60]:
            print("  ", line)
    # Target (issue 10): 0.97 each. With the torch 2.11 table and torch 2.13 installed:
    # recall 0.987 (74/75), precision 1.000, exact 0.999 (3876/3881; matrix_exp's count
    # depends on the values). The one op missed, histc, is a changed sample, not a wrong
    # prediction: 2.11's OpInfo made its first samples with min=max=0
    # (the range is read from the data: 2 syncs), 2.13's with min=0, max=10 (no sync, as
    # predicted; tests/gpu/test_rewrites_gpu.py checks both on a GPU). A table measured with
    # fingerprints ("fp") skips such samples instead.
    assert recall >= 0.97 and precision >= 0.97 and sample_exact >= 0.97


def optable_tensors(obj):
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def test_isin_follows_its_size_heuristic():
    table = optable.load("2.11.0")
    small, large = torch.arange(5.0), torch.arange(20.0)
    # brute force when test_elements is small next to elements; sort + unique otherwise
    assert table.predicted_syncs(torch.isin, (large, small), {}) == 0
    assert table.predicted_syncs(torch.isin, (small, large), {}) == 3
    assert table.predicted_syncs(torch.isin, (large, 3.0), {}) == 0
    assert table.predicted_syncs(torch.isin, (torch.empty(0), large), {}) == 0


def test_svd_of_a_non_empty_matrix_syncs_like_svdvals():
    table = optable.load("2.11.0")
    a = torch.randn(4, 3)
    assert table.predicted_syncs(torch.linalg.svd, (a,), {"full_matrices": False}) == 2
    assert table.predicted_syncs(torch.linalg.svd, (torch.empty(0, 3),), {}) == 0
    recorder = CountingRecorder()
    with PredictSession(recorder):
        torch.svd_lowrank(a.to("cuda", non_blocking=True), q=2)
    # a Python function the mode does not see: its one linalg.svd call syncs twice
    assert recorder.kinds["library"] == 2, recorder.kinds


def test_equal_of_different_shapes_answers_on_the_host():
    recorder = CountingRecorder()
    with PredictSession(recorder):
        x = torch.ones(3, device="cuda")
        torch.equal(x, torch.ones((), device="cuda"))
        assert recorder.n == 0
        torch.equal(x, torch.ones(3, device="cuda"))
    assert recorder.n == 1


def test_the_magic_reports_unmeasured_calls_and_the_table_version():
    IPython = pytest.importorskip("IPython")  # noqa: F841
    from IPython.testing import globalipapp
    from IPython.utils.capture import capture_output

    from syncfree.report import MIME_TYPE, validate_report

    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    loaded_before = "syncfree" in shell.extension_manager.loaded
    shell.run_line_magic("load_ext", "syncfree")
    cell = '''%%syncfree --mode predict
x = torch.ones(4, device="cuda")
for _ in range(5):
    x = torch.ops.aten._test_serialization_subcmul(x, x)
'''
    shell.user_ns["torch"] = torch
    try:
        with capture_output() as captured:
            shell.run_cell(cell, store_history=False)
    finally:
        if not loaded_before:
            shell.run_line_magic("unload_ext", "syncfree")
    (bundle,) = [o.data for o in captured.outputs if MIME_TYPE in o.data]
    report = bundle[MIME_TYPE]
    validate_report(report)
    table = report["predict_table"]
    assert table["unmeasured_calls"] == 5
    assert table["unmeasured_ops"] == [{"name": "aten::_test_serialization_subcmul", "calls": 5}]
    text = bundle["text/plain"]
    assert ("note: predict mode: 5 calls to 1 op without a measurement "
            "(aten::_test_serialization_subcmul); they may sync") in text
    installed = optable._version_tuple(torch.__version__)
    measured = optable._version_tuple(table["torch"])
    assert (table["version_note"] is not None) == (installed != measured)
    if table["version_note"]:
        assert table["version_note"] in text and torch.__version__ in table["version_note"]
        assert "installed torch is" in bundle["text/html"]


def test_reports_without_the_field_stay_valid():
    from syncfree.report import build_report, device_info, validate_report

    old = build_report(source="x = 1", device=device_info("predict"), mode="predict")
    assert "predict_table" not in old
    validate_report(old)
    validate_report(dict(old, predict_table=None))
    bad = dict(old, predict_table={"torch": "2.11", "device": "H100", "version_note": None,
                                   "predicted_syncs": 0, "unmeasured_calls": -1,
                                   "unmeasured_ops": []})
    with pytest.raises(Exception):
        validate_report(bad)


def test_fingerprint_tells_a_changed_sample_from_the_same_one():
    x = torch.randn(())
    same = optable.fingerprint((torch.randn(()),), {"min": 0, "max": 0})
    assert optable.fingerprint((x,), {"min": 0, "max": 0}) == same  # values of tensors do not count
    assert optable.fingerprint((x,), {"min": 0, "max": 10}) != same  # torch 2.13's histc sample
    assert optable.fingerprint((torch.randn(3),), {"min": 0, "max": 0}) != same


def test_combinations_syncs_once_per_column():
    table = optable.load("2.11.0")
    x = torch.arange(4.0)
    assert [table.predicted_syncs(torch.combinations, (x,), {"r": r}) for r in (0, 1, 2, 3)] == [0, 1, 2, 3]
    assert table.predicted_syncs(torch.combinations, (x,), {}) == 2  # r defaults to 2


def test_masked_ops_do_not_speak_for_the_core_ops_of_the_same_name():
    # torch.masked.sum's __name__ is "sum": its samples (which sync on the mask) must not
    # make torch.sum of a 0-d bool tensor, or cumsum, look syncing.
    table = optable.load("2.11.0")
    flag = torch.tensor(True)
    assert table.predicted_syncs(torch.sum, (flag,), {"dim": None, "keepdim": False}) == 0
    for name in ("sum", "cumsum", "mean", "softmax", "amax", "std"):
        assert table.entries[name].syncs_sometimes() is False, name
    assert table.lookup(torch.masked.sum).name == "masked.sum"


# ---------------------------------------------------------------------------- overloads


def test_a_python_scalar_value_takes_the_scalar_overload():
    # masked_fill(mask, float) is aten::masked_fill.Scalar: no sync on CUDA (issue 22, H100);
    # a 0-d tensor value is masked_fill.Tensor, which reads the value with item().
    table = optable.load("2.11.0")
    x = torch.randn(4, 4)
    mask = x > 0
    fill = torch.Tensor.masked_fill
    assert table.predicted_syncs(fill, (x, mask, float("-inf")), {}) == 0
    assert table.predicted_syncs(fill, (x, mask), {"value": float("-inf")}) == 0
    assert table.predicted_syncs(torch.Tensor.masked_fill_, (x, mask, -1e9), {}) == 0
    assert table.predicted_syncs(fill, (x, mask, 0), {}) == 0
    assert table.predicted_syncs(fill, (x, mask, torch.tensor(0.0)), {}) == 1
    assert table.predicted_syncs(fill, (x, mask), {"value": torch.tensor(0.0)}) == 1


def _table_with_samples(name: str, samples: list[tuple[str, int]]) -> optable.OpTable:
    return optable.OpTable({"torch": "2.11.0", "device": "test", "ops": {name: {
        "name": name, "names": [name],
        "samples": [{"dtype": "float32", "i": i, "sig": sig, "syncs": n}
                    for i, (sig, n) in enumerate(samples)]}}})


def test_an_unmeasured_python_scalar_form_is_unmeasured_not_a_sync():
    # Samples with an int and a 0-d tensor value only (the torch 2.11 table's masked_fill
    # before its Python-scalar forms were measured): the int decides nothing about a bool
    # or complex, and the tensor's sync must not be guessed for them.
    table = _table_with_samples("masked_fill", [("Tnf|Tnb|int;", 0), ("Tnf|Tnb|T0f;", 1),
                                                ("Tnf|T1b|int;", 0), ("T0f|T0b|int;", 0),
                                                ("Tni|Tnb|T0i;", 1)])
    x = torch.randn(4, 4)
    mask = x > 0
    fill = torch.Tensor.masked_fill
    entry = table.lookup(fill)
    assert table.predicted_syncs(fill, (x, mask, True), {}) is None
    assert table.predicted_syncs(fill, (x, mask), {"value": 1j}) is None
    assert table.unmeasured_form(entry, (x, mask), {"value": 1j}) == "a Python complex value"
    assert table.predicted_syncs(fill, (x, mask, 2), {}) == 0
    assert table.predicted_syncs(fill, (x, mask, torch.tensor(1.0)), {}) == 1
    # FORM_FACTS: measured outside the sweep, used where the table has no sample of its own
    assert table.predicted_syncs(fill, (x, mask, float("-inf")), {}) == 0
    # a table that measured the form answers from its samples
    measured = _table_with_samples("masked_fill", [("Tnf|Tnb|int;", 0), ("Tnf|Tnb|T0f;", 1),
                                                   ("Tnf|Tnb|True;", 0), ("Tnf|Tnb|complex;", 0)])
    assert measured.predicted_syncs(fill, (x, mask, False), {}) == 0
    assert measured.predicted_syncs(fill, (x, mask, 1j), {}) == 0


def test_the_report_names_an_unmeasured_form(monkeypatch):
    table = _table_with_samples("masked_fill", [("Tnf|Tnb|int;", 0), ("Tnf|Tnb|T0f;", 1),
                                                ("Tni|Tnb|T0i;", 1)])
    monkeypatch.setattr(optable, "_installed", table)
    monkeypatch.setattr(optable, "_decisions", {})
    recorder = CountingRecorder()
    with PredictSession(recorder):
        x = torch.randn(4, 4, device="cuda")
        for _ in range(3):
            x.masked_fill(x > 0, True)
        x.masked_fill(x > 0, torch.zeros((), device="cuda"))
    assert recorder.kinds == {"library": 1}
    unmeasured = optable.tally_of(recorder).unmeasured  # (this table has no `gt` either)
    assert {k: n for k, n in unmeasured.items() if "masked_fill" in k} == {
        "Tensor.masked_fill with a Python bool value": 3}


CAUSAL_ATTENTION = '''
import math
import torch
import torch.nn.functional as F

class CausalSelfAttention(torch.nn.Module):
    """nanoGPT's attention without flash: the causal mask is filled with -inf."""

    def __init__(self, n_embd=32, n_head=4, block_size=16):
        super().__init__()
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = torch.nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

model = CausalSelfAttention().to("cuda")
x = torch.randn(2, 16, 32, device="cuda")
for _ in range(3):
    y = model(x)
    scores = torch.randn(2, 16, device="cuda")
    scores = scores.masked_fill(scores < 0, torch.finfo(scores.dtype).min)  # transformers' idiom
    scores.masked_fill_(scores > 1, -1e4)
'''


def test_causal_attention_masks_predict_no_sync():
    """The GPT training idiom was 59% of a public script's predicted syncs (issue 22)."""
    recorder = CountingRecorder()
    with PredictSession(recorder):
        exec(compile(CAUSAL_ATTENTION, "<gpt-attention>", "exec"), {})
    assert recorder.kinds == {"to_device": 5}, recorder.kinds  # model.to: 4 params + bias
    assert optable.tally_of(recorder).unmeasured_calls == 0


def test_the_sweep_measures_every_python_scalar_form_of_a_value_argument():
    x, mask = torch.randn(3, 3), torch.ones(3, 3, dtype=torch.bool)
    samples = [((x, mask, 0), {}), ((x, mask, torch.tensor(1.5)), {})]
    places = sweep.value_places(samples)
    assert places == [2]  # the mask is never 0-d here; the value is, in the second sample
    forms = {form: args[2] for form, args, _ in sweep.scalar_forms(*samples[1], places)}
    assert forms == {"p2=float": 1.5, "p2=int": 1, "p2=bool": True, "p2=complex": 1.5 + 0j}
    assert [form for form, _, _ in sweep.scalar_forms(*samples[0], places)] == [
        "p2=float", "p2=bool", "p2=complex"]
    args, kwargs = sweep.form_variant((x,), {"value": torch.tensor(2)}, "k:value=float")
    assert kwargs == {"value": 2.0} and isinstance(kwargs["value"], float)
    assert sweep.form_variant((x, mask, None), {}, "p2=float") is None


# ---------------------------------------------------------------------------- residue (issue 22)


def test_mode_syncs_once_per_slice_beyond_the_fused_kernel():
    # Held-out OpInfo sample 6 of `mode`, a (3000,) vector, synced on the H100: slices longer
    # than 2048 take TensorModeKernel.cpp's per-slice thrust path (memcpy_and_sync each).
    table = optable.load("2.11.0")
    assert table.predicted_syncs(torch.mode, (torch.randn(5, 5, 5),), {}) == 0
    assert table.predicted_syncs(torch.mode, (torch.randn(3000),), {}) == 1
    assert table.predicted_syncs(torch.Tensor.mode, (torch.randn(4, 3000), 1), {}) == 4
    assert table.predicted_syncs(torch.mode, (torch.randn(3000, 4),), {"dim": 0}) == 4
    assert table.predicted_syncs(torch.mode, (torch.randn(()),), {}) == 0


def test_matrix_norms_through_svd_sync_as_svdvals():
    # Held-out OpInfo samples of linalg.matrix_norm with ord 'nuc', 2, -2 synced on the H100
    # (the first four, 'fro', did not): they compute linalg.svdvals inside.
    table = optable.load("2.11.0")
    svdvals = table.predicted_syncs(torch.linalg.svdvals, (torch.randn(2, 2),), {})
    assert svdvals == 2
    a = torch.randn(2, 3, 2)
    for order in ("nuc", 2, -2):
        assert table.predicted_syncs(torch.linalg.matrix_norm, (a, order, (-2, -1), True), {}) == svdvals
        assert table.predicted_syncs(torch.linalg.norm, (a[0], order), {}) == svdvals
        # matrix_norm's dim defaults to the last two: a batch of matrices without dim too
        # (ord=2 on a (2, 3, 2) input: 2 syncs on the H100, predicted 0 before).
        assert table.predicted_syncs(torch.linalg.matrix_norm, (a, order), {}) == svdvals
        assert table.predicted_syncs(torch.linalg.matrix_norm, (a,), {"ord": order}) == svdvals
    for order in ("fro", 1, -1, float("inf")):
        assert table.predicted_syncs(torch.linalg.matrix_norm, (a, order), {}) == 0
    assert table.predicted_syncs(torch.linalg.norm, (torch.randn(5), 2), {}) == 0  # a vector
    assert table.predicted_syncs(torch.linalg.matrix_norm, (torch.empty(0, 3), "nuc"), {}) == 0
    recorder = CountingRecorder()
    with PredictSession(recorder):
        x = torch.randn(4, 4, device="cuda")
        torch.linalg.matrix_norm(x, ord="nuc")
        torch.linalg.norm(x)  # Frobenius
    assert recorder.kinds == {"library": svdvals}


def test_operators_and_torch_c_functions_are_found_under_their_measured_names():
    recorder = CountingRecorder()
    with PredictSession(recorder):
        m = torch.ones(2, 4, dtype=torch.bool, device="cuda")
        q = torch.randn(1, 2, 4, 8, device="cuda")
        (m | ~m) & (m ^ m)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert recorder.n == 0
    assert optable.tally_of(recorder).unmeasured_calls == 0, optable.tally_of(recorder).unmeasured
