"""On a CUDA device: every safe rewrite removes the sync and computes the same.

For each rule whose fix is marked safe, its rewrite fixture (tests/fixtures/rewrites/*/<CODE>_*.in.py) runs twice,
as written and rewritten, under ``torch.cuda.set_sync_debug_mode("warn")`` with an "always" filter for the sync
warning. Each rewritten line must sync in the original (so the fixture exercises the rule) and not in the rewrite,
and every tensor the two versions bind must be equal (values, dtype, device, shape, leaf-ness).

Runs without IPython:  PYTHONPATH=python_helper python -m pytest tests/gpu/test_rewrites_gpu.py -m gpu -s -rs
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the safe rewrites are checked on a GPU machine", allow_module_level=True)

from regen import regen  # noqa: E402
from syncfree.catalog import RULES  # noqa: E402

SYNC_MESSAGE = "called a synchronizing CUDA operation"


SAFE_CASES = [case for case in regen.rewrite_cases() if RULES[regen.rewrite_rule(case)].fix_safety == "safe"]


def run_counting_syncs(source: str, filename: str) -> tuple[dict, Counter]:
    """Execute ``source``; return its namespace and the sync warnings per line of ``source``.

    The warning's own location is the innermost Python frame (a torch file for some ops), so the hook walks the
    stack out to the fixture's frame, as syncfree's recorder does.
    """
    per_line: Counter = Counter()

    def record(message, category, file, line, *_):
        if SYNC_MESSAGE not in str(message):
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != filename:
            frame = frame.f_back
        per_line[frame.f_lineno if frame is not None else None] += 1

    namespace: dict = {"__name__": "__fixture__"}
    code = compile(source, filename, "exec")
    torch.cuda.synchronize()
    previous_mode = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
        warnings.filterwarnings("always", message=f".*{SYNC_MESSAGE}")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            exec(code, namespace)
        finally:
            torch.cuda.set_sync_debug_mode(previous_mode)
    torch.cuda.synchronize()
    return namespace, per_line


def tensors(namespace: dict) -> dict:
    return {name: value for name, value in namespace.items() if isinstance(value, torch.Tensor)}


@pytest.mark.parametrize("case", SAFE_CASES, ids=lambda p: p.name.removesuffix(".in.py"))
def test_safe_rewrite_is_sync_free_and_equal(case):
    code = regen.rewrite_rule(case)
    original_source = case.read_text()
    rewritten_source = regen.render_rewrite(original_source, code)
    original_lines, rewritten_lines = original_source.splitlines(), rewritten_source.splitlines()
    assert len(original_lines) == len(rewritten_lines), "safe rewrites keep the line count"
    changed = [n for n, (a, b) in enumerate(zip(original_lines, rewritten_lines), start=1) if a != b]
    assert changed

    torch.manual_seed(0)
    original, original_syncs = run_counting_syncs(original_source, f"<{case.name}>")
    torch.manual_seed(0)
    rewritten, rewritten_syncs = run_counting_syncs(rewritten_source, f"<{case.name} rewritten>")

    silent = [n for n in changed if not original_syncs[n]]
    remaining = {n: rewritten_syncs[n] for n in changed if rewritten_syncs[n]}
    print(
        f"{code} {case.name}: {len(changed)} rewritten lines, syncs {sum(original_syncs[n] for n in changed)} -> "
        f"{sum(rewritten_syncs[n] for n in changed)}"
        + (f"; lines that did not sync before: {silent}" if silent else "")
    )
    assert not silent, f"{code}: the original does not sync on lines {silent}: the fixture or the rule is wrong"
    assert not remaining, f"{code}: the rewrite still syncs on lines {remaining}"

    before, after = tensors(original), tensors(rewritten)
    assert before.keys() == after.keys()
    for name, value in before.items():
        other = after[name]
        assert (value.dtype, value.device, value.shape, value.requires_grad, value.is_leaf) == (
            other.dtype, other.device, other.shape, other.requires_grad, other.is_leaf
        ), name
        assert torch.equal(value.detach().cpu(), other.detach().cpu()), name


def test_every_safe_rule_has_a_gpu_fixture():
    safe_rules = {code for code, rule in RULES.items() if rule.fix_safety == "safe"}
    assert safe_rules == {regen.rewrite_rule(case) for case in SAFE_CASES}


# --------------------------------------------------------------------------------------------------------------
# Claims the catalog's rules rest on, beyond the 73 measured patterns (sync-facts.md): each statement must sync
# (or not) on a CUDA tensor exactly as the rule that covers it says.
CLAIMS_SETUP = """
import math
import tempfile
import torch
x = torch.randn(64, 64, device="cuda")
mask = x > 0
zero = torch.zeros((), device="cuda")
idx_cpu = torch.arange(3)
labels = torch.randint(0, 10, (64,), device="cuda")
three = torch.full((), 3, dtype=torch.long, device="cuda")
flags = torch.zeros(4, dtype=torch.bool, device="cuda")
"""
_SCALER = (
    "model = torch.nn.Linear(8, 8, device='cuda')\n"
    "opt = torch.optim.AdamW(model.parameters(), fused={fused})\n"
    "scaler = torch.amp.GradScaler('cuda')\n"
    "scaler.scale(model(torch.randn(4, 8, device='cuda')).sum()).backward()\n"
)
CLAIMS = [
    # (rule, extra setup, statement, syncs)
    ("SF502", "", "x[0, 0] = 2.5", True),
    ("SF502", "", "x[:, 3] = 2.5", False),  # a destination that keeps a dimension is filled, not copied
    ("SF502", "", "x[0] = 0", False),
    ("SF502", "", "flags[1] = True", True),
    ("SF502", "", "x[mask] = 0", False),  # masked_fill_ path: the rule leaves masks alone
    ("SF601", "", "x[mask] = zero", True),
    ("SF601", "", "x[mask] += 1", True),
    ("SF601", "", "y = x[x.isnan()]", True),
    ("SF501", "", "x[idx_cpu] = zero", True),
    ("SF503", "", "y = x[: x.shape[0] // 2]", False),
    ("SF102", "", "y = torch.zeros(three)", True),
    ("SF102", "", "y = [i for i in range(three)]", True),
    ("SF102", "", "y = math.exp(x.mean())", True),
    ("SF103", "", "y = x.sum() and 1", True),
    ("SF104", "", "y = min(x.sum(), 0.5)", True),
    ("SF104", "", "y = any(x[0, :4] > 0)", True),
    ("SF202", "", "y = '%.2f' % x.sum()", True),
    ("SF202", "", "y = '{}'.format(x.sum())", True),
    ("SF301", "", "y = x.numpy(force=True)", True),
    ("SF302", "", "y = x.to(torch.float16)", False),
    ("SF402", "", "y = torch.cuda.FloatTensor(3)", False),
    ("SF602", "", "y = torch.where(mask)", True),
    ("SF602", "", "y = torch.argwhere(mask)", True),
    ("SF603", "", "y = x.masked_select(mask)", True),
    ("SF604", "", "y = torch.unique_consecutive(labels)", True),
    ("SF607", "", "y = torch.histc(x, bins=8)", True),
    ("SF607", "", "y = torch.histc(x, bins=8, min=-3.0, max=3.0)", False),
    ("SF608", "", "y = torch.nn.functional.one_hot(labels)", True),
    ("SF608", "", "y = torch.nn.functional.one_hot(labels, num_classes=10)", False),
    ("SF700", "", "torch.testing.assert_close(x, x)", True),
    ("SF700", "from torch.utils.tensorboard import SummaryWriter\nw = SummaryWriter(tempfile.mkdtemp())\n",
     "w.add_scalar('loss', x.sum(), 0)", True),
    ("SF701", _SCALER.format(fused=False), "scaler.step(opt)", True),
    ("SF701", _SCALER.format(fused=True), "scaler.step(opt)", False),  # the fix the rule recommends
]


@pytest.mark.parametrize(("rule", "setup", "statement", "syncs"), CLAIMS, ids=[f"{c[0]}:{c[2]}" for c in CLAIMS])
def test_catalog_claim(rule, setup, statement, syncs):
    if rule == "SF700" and "SummaryWriter" in setup:
        pytest.importorskip("tensorboard", reason="tensorboard is not installed")
    source = CLAIMS_SETUP + setup + statement + "\n"
    line = source.count("\n")
    _, per_line = run_counting_syncs(source, f"<claim {rule}>")
    print(f"{rule} `{statement}`: {per_line[line]} syncs")
    assert (per_line[line] > 0) == syncs, f"{rule}: `{statement}` made {per_line[line]} syncs"
