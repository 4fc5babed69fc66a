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


def test_doubling_a_run_of_reads_at_most_about_doubles_the_time():
    def timed(count: int) -> float:
        source = _reads(count)
        start = time.perf_counter()
        analyze_source(source)
        return time.perf_counter() - start

    timed(200)  # warm
    small, large = min(timed(1500) for _ in range(2)), min(timed(3000) for _ in range(2))
    assert large < 3.0 * small + 0.05, f"1,500 reads {small:.2f} s, 3,000 reads {large:.2f} s"
