"""Phases and generated code on a GPU (issue 21): torch.compile's compilation and autotuning
are told apart from the recurring syncs, and no sync is attributed to code inductor generated
(``/tmp/torchinductor_<user>/...``): those go to the user's line that called the compiled
function; a site's first call (its first sync: warm-up) is kept apart and recurring sites are ranked by what
they blocked after it. Prints ``syncfree-gpu:`` lines with the counts per phase and the first-call figures."""

from __future__ import annotations

import linecache

import pytest

torch = pytest.importorskip("torch")
import syncfree  # noqa: E402
from syncfree.capture.sites import is_generated, rank_key  # noqa: E402

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
    # Every recurring site with blocked time has its first call apart, and the listing follows rank_key.
    recurring = [s for s in report.sites if not s.one_off and s.blocked_ms is not None]
    assert recurring and all(s.first_ms is not None and s.first_ms <= s.blocked_ms + 0.001 for s in recurring)
    keys = [rank_key(s.one_off, s.blocked_ms, s.first_ms, s.count) for s in report.sites]
    assert keys == sorted(keys)
    print("syncfree-gpu: torch.compile first calls " + "; ".join(
        f"line {s.line} ×{s.count}: first {s.first_ms:.3f} ms, then {s.steady_ms:.3f} ms" for s in recurring))


# torch.cuda._sleep spins this many GPU clock cycles: about 1 ms at 1.5 GHz (an H100 runs at 1.1-1.98 GHz; only
# the ratio of the two lines below matters).
CYCLES_PER_MS = 1_500_000


def _line_of(marker: str) -> int:
    return next(n for n, text in enumerate(linecache.getlines(__file__), 1) if text.rstrip().endswith(marker))


def test_a_first_call_does_not_outrank_a_per_step_sync():
    x = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    with syncfree.watch("warn") as w:
        for step in range(20):
            if step == 0:
                torch.cuda._sleep(100 * CYCLES_PER_MS)  # a warm-up paid by the first call only
            warm = x.sum().item()  # line: warm
            torch.cuda._sleep(CYCLES_PER_MS)  # about 1 ms of GPU work every step
            steady = x.sum().item()  # line: steady
    assert warm == steady == 1.0
    by_line = {s.line: s for s in w.report.sites}
    first, every = by_line[_line_of("# line: warm")], by_line[_line_of("# line: steady")]
    print(f"syncfree-gpu: first call: warm-up line ×{first.count} blocked {first.blocked_ms:.3f} ms = first "
          f"{first.first_ms:.3f} + {first.steady_ms:.3f} ms; per-step line ×{every.count} blocked "
          f"{every.blocked_ms:.3f} ms = first {every.first_ms:.3f} + {every.steady_ms:.3f} ms")
    assert first.count == every.count == 20
    # The warm-up line blocked more in all (its first call waited for the 100 ms kernel) ...
    assert first.first_ms > 30 and first.blocked_ms > every.blocked_ms
    assert first.steady_ms < first.first_ms / 10
    # ... but the line that waits every step costs more after the first call, and ranks first.
    assert every.steady_ms > first.steady_ms
    assert w.report.sites.index(every) < w.report.sites.index(first)
    assert "then" in w.report.site_line(every) and "per sync ×19" in w.report.site_line(every)
