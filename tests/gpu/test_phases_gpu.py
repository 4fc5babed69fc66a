"""Phases and generated code on a GPU (issue 21): torch.compile's compilation and autotuning
are told apart from the recurring syncs, and no sync is attributed to code inductor generated
(``/tmp/torchinductor_<user>/...``): those go to the user's line that called the compiled
function. Prints one ``syncfree-gpu:`` line with the counts per phase."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import syncfree  # noqa: E402
from syncfree.capture.sites import is_generated  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@torch.compile
def step(x):
    y = x * 2
    total = y[y > 0].sum()          # a boolean mask: a dynamic shape, a sync in the graph
    return total.item() + 1.0      # .item(): a graph break and a sync


def test_compile_syncs_are_one_off_and_generated_code_is_never_yours():
    torch._dynamo.reset()
    x = torch.randn(4096, device="cuda")
    with syncfree.watch("warn") as w:
        for _ in range(20):
            step(x)
    report = w.report
    sites = report.sites + report.allowed
    phases: dict[str, int] = {}
    for site in sites:
        phases[site.phase] = phases.get(site.phase, 0) + site.count
        assert not any(is_generated(f) for f in site.files or ()), site.files
        assert site.file == __file__, site.file
    print(f"syncfree-gpu: torch.compile phases {dict(sorted(phases.items()))}; syncs={report.syncs}; "
          f"sites={len(sites)}")
    # Nothing lost by telling phases apart: every sync is on a line of this file.
    assert sum(phases.values()) == report.syncs
    assert phases.get("compile", 0) > 0
    # The step's own syncs recur every call (20 calls: at least one sync per call).
    assert phases.get("recurring", 0) >= 20
    text = report.text()
    assert "once (setup, compilation)" in text
