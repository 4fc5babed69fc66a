"""Rewrites: golden fixtures (x.in.py -> x.out.py), what they compute, and applying text edits."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from regen import regen
from syncfree.analyze import analyze_source, apply_edits, apply_fixes
from syncfree.catalog import RULES

CASES = regen.rewrite_cases()


def case_id(path: Path) -> str:
    return path.name.removesuffix(".in.py")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rewrite_fixture(case):
    expected = case.with_name(case.name.replace(".in.py", ".out.py")).read_text()
    assert regen.render_rewrite(case.read_text(), regen.rewrite_rule(case)) == expected, (
        f"{case.name} changed; if intended, run: PYTHONPATH=python_helper .venv/bin/python scripts/regen_fixtures.py"
    )


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rewrite_removes_the_finding_and_parses(case):
    code = regen.rewrite_rule(case)
    before = [f for f in analyze_source(case.read_text(), select=[code]) if f["fix"]]
    assert before, f"{case.name} has no fixable {code} finding"
    assert {f["fix"]["safety"] for f in before} <= {"safe", "review"}
    rewritten = regen.render_rewrite(case.read_text(), code)
    ast.parse(rewritten)
    fixed_lines = {f["range"]["line"] for f in before}
    remaining = [f for f in analyze_source(rewritten, select=[code]) if f["fix"]]
    assert not remaining, f"{code} still offers a fix after rewriting: {remaining}"
    if code != "SF910":  # the coalesced reads become one line
        assert len(rewritten.splitlines()) <= len(case.read_text().splitlines())
    assert fixed_lines


def test_review_fixes_explain_what_to_check():
    for case in CASES:
        for finding in analyze_source(case.read_text(), select=["ALL"]):
            fix = finding["fix"]
            if fix and fix["safety"] == "review":
                assert fix["reason"], (case.name, finding["rule"])


def _run_on_cpu(source: str) -> dict:
    """Run a rewrite fixture with the GPU swapped for the CPU (torch's CPU build cannot sync, but it can compute)."""
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    torch.manual_seed(0)  # both versions draw the same random numbers
    exec(compile(source.replace('"cuda"', '"cpu"'), "<fixture>", "exec"), namespace)
    return {k: v for k, v in namespace.items() if isinstance(v, (torch.Tensor, int, float, bool, list, tuple))}


SAFE_CASES = [c for c in CASES if RULES[regen.rewrite_rule(c)].fix_safety == "safe" and "torch.cuda." not in c.read_text()]


@pytest.mark.parametrize("case", SAFE_CASES, ids=case_id)
def test_safe_rewrite_computes_the_same_on_cpu(case):
    """A safe rewrite must not change what the code computes: same values, dtypes, shapes, leaf-ness."""
    torch = pytest.importorskip("torch")
    original = _run_on_cpu(case.read_text())
    rewritten = _run_on_cpu(regen.render_rewrite(case.read_text(), regen.rewrite_rule(case)))
    assert original.keys() == rewritten.keys()
    for name, value in original.items():
        other = rewritten[name]
        if isinstance(value, torch.Tensor):
            assert (value.dtype, value.shape, value.requires_grad, value.is_leaf) == (
                other.dtype, other.shape, other.requires_grad, other.is_leaf
            ), name
            assert torch.equal(value, other), name
        else:
            assert value == other, name


def test_rewrites_of_where_and_max_compute_the_same_on_cpu():
    """review fixes: the same values in the cases they are offered for (tensors of one shape and dtype)."""
    torch = pytest.importorskip("torch")
    for code in ("SF103", "SF104"):
        [case] = [c for c in CASES if regen.rewrite_rule(c) == code]
        original = _run_on_cpu(case.read_text())
        rewritten = _run_on_cpu(regen.render_rewrite(case.read_text(), code))
        for name, value in original.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, rewritten[name]), (code, name)


def test_repeat_interleave_fix_only_with_static_repeats():
    source = "import torch\nv = torch.ones(3, device='cuda')\ny = torch.repeat_interleave(v, lengths_from_elsewhere.sum(dim=1))\n"
    [finding] = analyze_source(source)
    assert finding["rule"] == "SF605" and finding["fix"] is None
    single = "import torch\nv = torch.ones(3, device='cuda')\nr = torch.tensor([2]).cuda(non_blocking=True)\ny = v.repeat_interleave(r)\n"
    assert [f["fix"] for f in analyze_source(single, select=["SF605"])] == [None]  # one count broadcasts


def test_max_fix_only_for_two_tensors():
    source = "import torch\na = torch.ones((), device='cuda')\nm = max(a, 0.5)\nn = max(a, b)\n"
    findings = analyze_source(source, select=["SF104"])
    assert [f["fix"] for f in findings] == [None, None]  # 0.5 is a number; b's kind is unknown


def test_index_put_fix_needs_review_for_an_index_of_unknown_dtype():
    source = "import torch\nx = torch.zeros(4, device='cuda')\nx[idx] = 0\nx[0] = 0\n"
    safeties = [f["fix"]["safety"] for f in analyze_source(source, select=["SF502"])]
    assert safeties == ["review", "safe"]


def test_index_put_fix_skips_receivers_with_side_effects():
    source = "import torch\nget_buffer()[0] = 0\n"
    assert analyze_source(source, select=["SF502"]) == []  # unknown receiver: not known to be a tensor
    source = "import torch\nbufs = [torch.zeros(3, device='cuda')]\nbufs[0][1] = 0\n"
    assert analyze_source(source, select=["SF502"]) == []


# --------------------------------------------------------------------------------------------- apply_edits
def edit(line, col, end_line, end_col, text):
    return {"range": {"line": line, "col": col, "end_line": end_line, "end_col": end_col}, "text": text}


def test_apply_edits_in_characters_and_cell_lines():
    source = "%%syncfree\né = 1; y = max(a, b)\n"
    assert apply_edits(source, [edit(2, 11, 2, 14, "torch.max")]) == "%%syncfree\né = 1; y = torch.max(a, b)\n"
    body = "é = 1; y = max(a, b)\n"
    assert apply_edits(body, [edit(2, 11, 2, 14, "torch.max")], first_line=2) == "é = 1; y = torch.max(a, b)\n"


def test_apply_edits_rejects_overlaps_and_positions_outside():
    with pytest.raises(ValueError, match="overlap"):
        apply_edits("abcdef\n", [edit(1, 0, 1, 3, "x"), edit(1, 2, 1, 4, "y")])
    with pytest.raises(ValueError, match="outside"):
        apply_edits("abc\n", [edit(3, 0, 3, 1, "x")])
    with pytest.raises(ValueError, match="outside"):
        apply_edits("abc\n", [edit(1, 9, 1, 9, "x")])


def test_apply_fixes_skips_overlapping_fixes():
    source = "import torch\nx = torch.randn(3, device='cuda')\na = x.sum().item()\nb = x.mean().item()\n"
    findings = analyze_source(source)
    assert {f["rule"] for f in findings} == {"SF101", "SF910"}
    fixed = apply_fixes(source, findings)
    assert "torch.stack([x.sum(), x.mean()]).tolist()" in fixed
