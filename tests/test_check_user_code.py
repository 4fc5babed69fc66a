"""Recall on user-like code (issue 40, round 12): the syncs `syncfree check` reports likely or certain on the
repository's examples, the GPU tests' scripts and tests/data/user_code (training steps, evaluation loops, metric
helpers taking the model's tensors, with and without a device word in the module) stay likely or certain. A gate that
makes findings possible for precision on libraries must not reach the code users run the check on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncfree.cli.check import check_file

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "tests" / "data" / "user_code" / "findings.json").read_text())["files"]


@pytest.mark.parametrize("relative", sorted(RECORDED))
def test_user_code_keeps_its_likely_and_certain_findings(relative):
    found = {(d.rule, d.line, d.certainty) for d in check_file(ROOT / relative, possible=True).diagnostics}
    kept = {(rule, line) for rule, line, certainty in found if certainty != "possible"}
    lost = [(rule, line, certainty) for rule, line, certainty in RECORDED[relative]
            if certainty != "possible" and (rule, line) not in kept]
    assert not lost, f"{relative}: no longer likely or certain: {lost}"


def test_the_corpus_holds_every_user_code_file():
    names = {p.relative_to(ROOT).as_posix() for folder in ("examples", "examples/pytest_suite", "tests/gpu/data",
                                                           "tests/data/user_code")
             for p in (ROOT / folder).glob("*.py")}
    assert names == set(RECORDED)
    likely = sum(certainty != "possible" for findings in RECORDED.values() for _, _, certainty in findings)
    assert likely >= 50
