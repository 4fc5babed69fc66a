"""``syncfree check`` stays linear in runs of consecutive scalar reads (SF910 once took minutes on 5,000 lines)."""

from __future__ import annotations

import time

from syncfree.analyze import analyze_source


def _reads(count: int) -> str:
    return "import torch\nx = torch.randn(8, device='cuda')\n" + "".join(f"v{i} = x[{i % 8}].item()\n" for i in range(count))


def test_four_thousand_consecutive_item_reads_finish_fast():
    start = time.perf_counter()
    findings = analyze_source(_reads(4000))
    elapsed = time.perf_counter() - start
    assert [f["rule"] for f in findings].count("SF910") == 1
    assert elapsed < 10, f"{elapsed:.1f} s for 4,000 reads"


def test_four_times_the_reads_take_far_less_than_sixteen_times_as_long():
    def timed(count: int) -> float:
        source = _reads(count)
        start = time.perf_counter()
        analyze_source(source)
        return time.perf_counter() - start

    timed(200)  # warm
    # Linear: about 4x; the quadratic path took 16x. 8x leaves room for a loaded machine.
    small, large = min(timed(1000) for _ in range(3)), min(timed(4000) for _ in range(3))
    assert large < 8.0 * small + 0.1, f"1,000 reads {small:.2f} s, 4,000 reads {large:.2f} s"
