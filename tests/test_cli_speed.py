"""``syncfree check`` stays linear in runs of consecutive scalar reads (SF910 once took minutes on 5,000 lines)."""

from __future__ import annotations

import time

from syncfree.analyze import analyze_source


def _reads(count: int) -> str:
    return "import torch\nx = torch.randn(8, device='cuda')\n" + "".join(f"v{i} = x[{i % 8}].item()\n" for i in range(count))


def test_four_thousand_consecutive_item_reads_finish_fast():
    start = time.process_time()  # CPU time: other processes beside the suite's workers do not count
    findings = analyze_source(_reads(4000))
    elapsed = time.process_time() - start
    rows = [f for f in findings if f["rule"] == "SF910"]
    assert len(rows) == 125  # in parts of 32
    assert [(r["range"]["line"], r["range"]["end_line"]) for r in rows[:2]] == [(3, 34), (35, 66)]
    assert elapsed < 10, f"{elapsed:.1f} s of CPU for 4,000 reads"


def _analysis_times(make_source, small: int, large: int) -> tuple[float, float]:
    """Best of three CPU times of analysing ``make_source(small)`` and ``make_source(large)``."""
    def timed(count: int) -> float:
        source = make_source(count)
        start = time.process_time()
        analyze_source(source)
        return time.process_time() - start

    timed(small // 5)  # warm
    return min(timed(small) for _ in range(3)), min(timed(large) for _ in range(3))


def test_four_times_the_reads_take_far_less_than_sixteen_times_as_long():
    # Linear: about 4x; the quadratic path took 16x. 8x leaves room for a loaded machine.
    small, large = _analysis_times(_reads, 1000, 4000)
    assert large < 8.0 * small + 0.1, f"1,000 reads {small:.2f} s, 4,000 reads {large:.2f} s"


def _branchy(count: int) -> str:
    """``count`` if-statements in one scope, each binding names: the join after each ``if`` once copied and merged
    every name the scope held (quadratic)."""
    block = "y{i} = x @ x\nif y{i}.sum() > 0:\n    m{i} = y{i}[y{i} > 0]\nelse:\n    m{i} = y{i}\n"
    return "import torch\nx = torch.randn(8, 8, device='cuda')\n" + "".join(block.format(i=i) for i in range(count))


def test_four_times_the_branches_take_far_less_than_sixteen_times_as_long():
    small, large = _analysis_times(_branchy, 500, 2000)
    assert large < 8.0 * small + 0.1, f"500 ifs {small:.2f} s, 2,000 ifs {large:.2f} s"


def test_names_bound_in_branches_are_joined_after_the_if():
    source = (
        "import torch\n"
        "a = torch.zeros(3, device='cuda')\n"
        "if flag:\n    b = torch.zeros(3, device='cuda')\nelse:\n    b = torch.zeros(3, device='cuda') + 1\n"
        "if flag:\n    c = torch.zeros(3, device='cuda')\nelse:\n    c = [1.0]\n"
        "if flag:\n    del a\n"
        "b.item()\nc.item()\n"
    )
    by_line = {f["range"]["line"]: f["certainty"] for f in analyze_source(source) if f["rule"] == "SF101"}
    assert by_line.get(13) == "certain"  # a CUDA tensor on both paths
    assert by_line.get(14) == "likely"  # a tensor on one path, a list on the other
