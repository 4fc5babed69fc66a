"""Per-site bookkeeping grows linearly with the cell (issue 13, "slow paths").

Ratios of CPU time (robust on a loaded 2-core machine), not times: 4x the lines must cost
well under 16x (what a scan of every finding per new site, or CPython 3.11's f_lineno,
cost). The figures against a plain run are printed by bench/slow_paths.py.
"""

from __future__ import annotations

import ast
import gc
import time

import pytest

from standins import compile_cell

torch = pytest.importorskip("torch")

from syncfree.capture import SyncRecorder, sites  # noqa: E402


def _best(fn, repeat: int = 3) -> float:
    # This process's CPU time, without the cycle collector (its passes grow with everything the suite made before:
    # under xdist beside other workers a linear 4x read 7.3x once).
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        finally:
            gc.enable()
    return min(times)


def _interleaved(small_fn, large_fn, repeat: int = 6) -> tuple[float, float]:
    """The fastest of ``repeat`` runs of each, alternated so both see the same load."""
    small, large = [], []
    for _ in range(repeat):
        small.append(_best(small_fn, 1))
        large.append(_best(large_fn, 1))
    return min(small), min(large)


def _findings(n: int) -> list[dict]:
    return [{"rule": "SF101", "range": {"line": i, "col": 4, "end_line": i, "end_col": 17}}
            for i in range(1, n + 1)]


def test_rule_lookup_is_linear_in_the_number_of_findings():
    def lookups(n):
        findings = _findings(n)
        return lambda: [sites._rule_at(findings, (i, 0, i, 20)) for i in range(1, n + 1)]

    small, large = _interleaved(lookups(1000), lookups(4000))
    assert sites._rule_at(_findings(3), (2, 0, 2, 20)) == "SF101"
    assert large / small < 9, (small, large)  # a scan per lookup: 16x


def test_a_cell_of_distinct_syncing_lines_is_linear():
    def run(n):
        source = "x = torch.ones(4, device='cuda')\n" + "".join(
            f"v{i} = x[{i % 4}].item()\n" for i in range(n))
        code, filename = compile_cell(source)
        findings = _findings(n + 1)

        def once():
            with SyncRecorder("predict", cell_files={filename: 0},
                              findings={filename: findings}) as recorder:
                exec(code, {"torch": torch})
            assert recorder.syncs == n

        return once

    small, large = _interleaved(run(2000), run(8000))
    assert large / small < 7, (small, large)  # a scan per site: 25x, f_lineno: 10x


def test_instruction_positions_cost_the_same_in_a_big_cell():
    def spans(n):
        code, _ = compile_cell("".join(f"v{i} = {i}.5\n" for i in range(n)))
        lasti = 0
        return lambda: [sites.instruction_span(code, lasti, 0) for _ in range(2000)]

    small, large = _interleaved(spans(10), spans(20_000))
    assert large / small < 4, (small, large)  # hashing the code object: 240x


def test_the_cells_static_pass_costs_what_its_first_thousand_findings_do():
    # %%syncfree's static pass stops at the 1,000 findings a report holds: 4x the lines costs
    # about the same, where the whole walk costs 4x.
    from syncfree.analyze import analyze_source
    from syncfree.report import MAX_FINDINGS

    def cell(n):
        source = "x = torch.ones(4, device='cuda')\n" + "".join(f"v{i} = x[{i % 4}].item()\n" for i in range(n))
        tree = ast.parse(source)  # the magic's one parse, which its compile uses too
        return lambda: analyze_source(source, tree=tree, limit=MAX_FINDINGS)

    small, large = _interleaved(cell(2000), cell(8000))
    assert large / small < 2, (small, large)  # the whole walk: 4x
