"""syncfree.cost: a sync's cost (GPU time lost) from synthetic GPU timelines, on CPU.

Times are microseconds. A GPU-bound step: 2 ms kernels launched 10 us apart, the CPU far
ahead. A launch-bound step: 5 us kernels launched 40 us apart, the GPU idling between them.
"""

from __future__ import annotations

from syncfree.cost import Activity, Sync, compute_costs


def _gpu_bound(steps: int, sync_after: int | None, kernels: int = 6, dur: float = 2000.0,
               spacing: float = 10.0, latency: float = 5.0, restart: float = 300.0, warning: float = 30.0):
    """Activities, waits and syncs of ``steps`` steps; with ``sync_after`` the CPU syncs after
    that kernel of each step (waits for the GPU to drain, returns, then needs ``restart`` us
    before its next launch)."""
    acts, waits, syncs = [], [], []
    cpu = 0.0
    gpu_free = 0.0
    for _ in range(steps):
        for k in range(kernels):
            start = max(cpu + latency, gpu_free)
            acts.append(Activity(start, start + dur, cpu))
            gpu_free = start + dur
            cpu += spacing
            if sync_after is not None and k == sync_after:
                wait_start, wait_end = cpu, max(cpu, gpu_free) + 8.0
                waits.append((wait_start, wait_end))
                # the sync reaches the recorder's hook as a warning 30 us after its wait; the hook takes 20 us
                syncs.append(Sync("item", wait_end + warning, hook=20.0))
                cpu = wait_end + restart
    return acts, waits, syncs


def test_gpu_bound_sync_costs_the_gap_after_it():
    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    costs = compute_costs(acts, syncs, waits)
    site = costs.sites["item"]
    assert site.syncs == 4
    # Each of the 3 syncs followed by work loses 8 us (wait end) + 300 us (restart) + 5 us (launch latency),
    # less the 30 us the warning took to reach the recorder and the 20 us its hook took (not the program's time).
    assert abs(site.cost_us - 3 * 263.0) < 1.0
    assert abs(compute_costs(acts, syncs, waits, observer=False).sites["item"].cost_us - 3 * 313.0) < 1.0
    assert abs(costs.idle_us - 3 * 313.0) < 1.0
    assert abs(costs.busy_us - 24 * 2000.0) < 1e-6


def test_the_programs_launches_after_the_wait_are_its_own_time_not_the_recorders():
    # .nonzero()-like: after its wait the op launches more work 25 us later, then the warning reaches the hook.
    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    late = [Activity(w_end + 25.0 + 5.0, w_end + 25.0 + 7.0, w_end + 25.0) for _, w_end in waits[:-1]]
    costs = compute_costs(acts + late, syncs, waits)
    # the observer's time is only the 5 us from that launch to the hook, and the hook's 20 us; the late
    # kernel's 2 us, run in the gap with the sync, runs on the busy GPU without it
    assert abs(costs.sites["item"].cost_us - 3 * (313.0 - 25.0 - 2.0)) < 1.0


def test_without_the_sync_there_is_no_idle_and_no_cost():
    acts, waits, syncs = _gpu_bound(4, sync_after=None)
    costs = compute_costs(acts, syncs, waits)
    assert costs.idle_us == 0.0 and costs.cost_us == 0.0 and costs.sites == {}


def test_launch_bound_sync_costs_only_its_own_wait():
    # 5 us kernels launched every 40 us: the GPU idles 35 us before each anyway.
    acts, waits, syncs = [], [], []
    cpu = 0.0
    for step in range(5):
        for _ in range(10):
            acts.append(Activity(cpu + 5.0, cpu + 10.0, cpu))
            cpu += 40.0
        # .item(): a copy launched now, then a wait of 12 us for it
        acts.append(Activity(cpu + 5.0, cpu + 7.0, cpu))
        waits.append((cpu + 1.0, cpu + 13.0))
        syncs.append(Sync("item", cpu + 14.0))
        cpu += 13.0 + 40.0
    costs = compute_costs(acts, syncs, waits)
    assert costs.idle_us > 5 * 10 * 30.0  # most of the span is idle anyway
    # what the sync adds per step: its wait (12 us), less the 1 us before it, less ~nothing else
    assert costs.sites["item"].cost_us < 5 * 15.0


def test_a_removed_explicit_sync_saves_its_whole_call_not_only_its_wait():
    # torch.cuda.synchronize() in a launch-bound step: the call takes 60 us of host time, of which the runtime's
    # wait is 10 us; deleting the call (the rewrite) gives all 60 back to the host, which is the step's time.
    acts, syncs, barriers = [], [], []
    cpu = 0.0
    for _ in range(5):
        for _ in range(10):
            acts.append(Activity(cpu + 5.0, cpu + 10.0, cpu))
            cpu += 40.0
        call = cpu
        barriers.append((cpu + 45.0, cpu + 55.0))
        syncs.append(Sync("sync", cpu + 60.0, call=call))  # the recorder sees it return 5 us after the wait
        cpu += 70.0
    with_call = compute_costs(acts, syncs, barriers=barriers).sites["sync"].cost_us
    syncs_unknown = [Sync(s.site, s.end) for s in syncs]
    wait_only = compute_costs(acts, syncs_unknown, barriers=barriers).sites["sync"].cost_us
    assert abs(wait_only - 4 * 10.0) < 2.0  # the wait of each sync followed by work
    assert abs(with_call - 4 * 55.0) < 2.0  # the call's 45 us before its wait, and the wait (the 5 us after: the recorder's)


def test_a_debug_mode_syncs_call_start_counts_its_host_time_before_the_wait():
    # `.tolist()` in a launch-bound step, seen by debug mode: the call runs 30 us of host time before its copy waits
    # (10 us), and the warning reaches the recorder 20 us after. The trace cannot tell those 30 us from the program's
    # own time before the call; the stall clock's stamp can (Sync.began): they are the call's, which a rewrite
    # deleting it saves. Without a start (or with call_starts off: bench/cost.py's column), only the wait and after.
    acts, syncs, copies = [], [], []
    cpu = 0.0
    for _ in range(5):
        for _ in range(10):
            acts.append(Activity(cpu + 5.0, cpu + 10.0, cpu))
            cpu += 40.0
        began = cpu
        copies.append((cpu + 30.0, cpu + 40.0))
        syncs.append(Sync("tolist", cpu + 60.0, began=began))
        cpu += 70.0
    reported = compute_costs(acts, syncs, copies).sites["tolist"].cost_us
    plain = compute_costs(acts, syncs, copies, call_starts=False).sites["tolist"].cost_us
    assert abs(reported - plain - 4 * 30.0) < 2.0, (plain, reported)  # 4: the last sync is followed by no work
    no_start = [Sync(s.site, s.end) for s in syncs]
    assert compute_costs(acts, no_start, copies).sites["tolist"].cost_us == plain


def test_tracing_s_launch_overhead_is_taken_out_of_the_gap_a_sync_leaves():
    # A GPU-bound step: after the sync the host launches 20 small kernels, 10 us apart as traced; untraced it
    # launches them 6 us apart (4 us a launch is the trace's). The GPU starves until it catches up: less so untraced.
    acts, waits, syncs = [], [], []
    cpu, gpu = 0.0, 0.0
    for _ in range(3):
        for _ in range(4):  # long kernels: the host runs ahead
            start = max(cpu + 5.0, gpu)
            acts.append(Activity(start, start + 1000.0, cpu))
            gpu = start + 1000.0
            cpu += 10.0
        waits.append((cpu, gpu + 2.0))
        syncs.append(Sync("item", gpu + 3.0))
        cpu = gpu + 3.0
        for _ in range(20):  # small kernels, each 2 us on the GPU
            start = max(cpu + 5.0, gpu)
            acts.append(Activity(start, start + 2.0, cpu))
            gpu = start + 2.0
            cpu += 10.0
    traced = compute_costs(acts, syncs, waits, observer=False).sites["item"].cost_us
    untraced = compute_costs(acts, syncs, waits, observer=False, launch_overhead_us=4.0).sites["item"].cost_us
    # after each of the 3 syncs the GPU waits for the small kernels' launches: 20 x 10 us traced, 20 x 6 us untraced
    assert abs(traced - untraced - 3 * 20 * 4.0) < 10.0, (traced, untraced)


def test_gaps_belong_to_the_last_sync_before_them_and_sites_rank_by_cost():
    # One GPU-bound step with three syncs: a cheap one (CPU back in 50 us), a dear one (1 ms of
    # CPU work before the next launch) and a middle one (400 us).
    acts, waits, syncs = [], [], []
    cpu, gpu_free = 0.0, 0.0
    for _ in range(3):
        for name, restart in (("a", 50.0), ("b", 1000.0), ("c", 400.0)):
            for _k in range(3):
                start = max(cpu + 5.0, gpu_free)
                acts.append(Activity(start, start + 1500.0, cpu))
                gpu_free = start + 1500.0
                cpu += 10.0
            waits.append((cpu, gpu_free + 5.0))
            syncs.append(Sync(name, gpu_free + 5.0, hook=0.0))  # a recorder with no time of its own
            cpu = gpu_free + 5.0 + restart
    acts.append(Activity(cpu + 5.0, cpu + 100.0, cpu))  # the last sync is followed by work too
    costs = compute_costs(acts, syncs, waits)
    ranked = sorted(costs.sites, key=lambda s: -costs.sites[s].cost_us)
    assert ranked == ["b", "c", "a"]
    assert abs(costs.sites["b"].cost_us - 3 * 1010.0) < 1.0
    assert costs.share("b") is not None and 0 < costs.share("b") < 1
    assert abs(costs.cost_us - costs.idle_us) < 1.0  # every gap here is a sync's


def test_a_gap_whose_work_was_queued_is_not_a_syncs():
    # The second kernel was launched long before the first ended: the gap is the GPU's own.
    acts = [Activity(0.0, 100.0, 0.0), Activity(150.0, 200.0, 10.0)]
    costs = compute_costs(acts, [Sync("s", 20.0)])
    assert costs.idle_us == 50.0 and costs.sites["s"].cost_us == 0.0


def test_gaps_before_the_first_sync_and_without_launch_times_are_nobodys():
    acts = [Activity(0.0, 10.0, 0.0), Activity(500.0, 510.0, 490.0), Activity(900.0, 910.0, None)]
    costs = compute_costs(acts, [Sync("s", 600.0)])
    assert costs.sites["s"].cost_us == 0.0 and costs.idle_us == 880.0


def test_no_gpu_activity_gives_no_span_and_no_share():
    costs = compute_costs([], [Sync("s", 1.0)])
    assert costs.span_us == 0.0 and costs.share("s") is None and costs.sites["s"].syncs == 1


def test_a_side_stream_sync_costs_only_what_the_main_stream_then_idles():
    # Stream 1 (main) is 2 ms ahead of the host; a side-stream (2) sync waits for a short side
    # kernel only: the main stream never runs dry, so the sync costs nothing.
    acts, waits, syncs = [], [], []
    cpu, main_free = 0.0, 0.0
    for _ in range(5):
        start = max(cpu + 5.0, main_free)
        acts.append(Activity(start, start + 2000.0, cpu, stream=1))
        main_free = start + 2000.0
        cpu += 10.0
        acts.append(Activity(cpu + 5.0, cpu + 55.0, cpu, stream=2))
        waits.append((cpu + 1.0, cpu + 60.0))
        syncs.append(Sync("side", cpu + 61.0))
        cpu += 100.0
    costs = compute_costs(acts, syncs, barriers=waits)
    assert costs.sites["side"].syncs == 5 and costs.sites["side"].cost_us == 0.0
    assert costs.idle_us == 0.0


# ---------------------------------------------------------------- the reports, without a GPU


def test_a_predicted_report_says_there_is_no_cost_in_one_line(userlib):
    import pytest

    torch = pytest.importorskip("torch")
    import syncfree
    from syncfree.cost import NO_GPU_NO_COST

    with syncfree.watch(cost=True) as w:
        userlib.read(torch.ones(2, device="cuda"))
    report = w.report
    assert report.predicted and report.cost_ms is None
    assert report.notes.count(NO_GPU_NO_COST) == 1
    (site,) = report.sites
    assert site.cost_ms is None and site.to_report()["cost_ms"] is None
    assert "ms of GPU time" not in report.site_line(site)  # never an invented number
    totals = report.to_dict()["totals"]
    assert (totals["cost_ms"], totals["gpu_busy_ms"], totals["gpu_idle_ms"]) == (None, None, None)


def test_a_budget_in_gpu_time_is_not_checked_without_a_gpu_and_says_so(userlib):
    import pytest

    torch = pytest.importorskip("torch")
    import syncfree

    with syncfree.sync_free(budget=None, budget_ms=0.5) as w:  # predicted: no cost, no verdict on it
        userlib.read(torch.ones(2, device="cuda"))
    assert any("budget of 0.5 ms of GPU time was not checked" in n for n in w.report.notes), w.report.notes
    with pytest.raises(ValueError, match="budget_ms"):
        syncfree.sync_free(budget_ms=-1)


def test_a_budget_in_gpu_time_fails_a_block_whose_syncs_lost_more():
    import pytest

    from syncfree.capture.sites import SyncSite
    from syncfree.watches import SyncError, WatchReport, check_cost_budget

    site = SyncSite((3,), "item", "SF101", (), None, False, files=("train.py",))
    site.count, site.cost_s, site.cost_share = 10, 0.0042, 0.02
    report = WatchReport("warn", {"kind": "cuda", "name": "H200", "torch": "2.11"}, [site], [], 10, 50.0, [],
                         cost={"cost_ms": 4.2, "gpu_busy_ms": 200.0, "gpu_idle_ms": 10.0})
    check_cost_budget(report, 5.0)  # within
    with pytest.raises(SyncError, match=r"losing 4\.20 ms of GPU time, budget 4 ms") as raised:
        check_cost_budget(report, 4.0)
    assert ("train.py:3: SF101 `.item()` waits for the GPU ×10, cost 4.20 ms of GPU time (0.420 ms each, 2.0% of the "
            "GPU's time)") in str(raised.value)
    assert "cost 4.20 ms of GPU time (GPU busy 200.0 ms, idle 10.0 ms)" in report.summary()


# ---------------------------------------------------------------- syncfree run and its formats


def _syncfree(tmp_path, *argv: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    environment = {**os.environ, "PYTHONPATH": str(root / "python_helper")}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "syncfree", *argv], capture_output=True, text=True, cwd=tmp_path,
                          env=environment, timeout=300)


TRAIN = ("import torch\nx = torch.randn(4, device='cuda')\nfor step in range(3):\n"
         "    print('LOSS', x.sum().item())\n")


def test_run_budget_ms_without_a_measured_cost_leaves_the_count_budget_deciding(tmp_path):
    import pytest

    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN)
    done = _syncfree(tmp_path, "run", "--budget-ms", "5", "train.py")
    assert done.returncode == 1, done.stderr  # predicted syncs, no cost: the count budget of 0 decides
    assert "Budget 5 ms of GPU time: not checked (no cost measured: the count budget of 0 decides)." in done.stdout
    assert "no GPU, no cost" in done.stdout and "ms of GPU time," not in done.stdout
    done = _syncfree(tmp_path, "run", "--budget", "3", "--budget-ms", "5", "train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _syncfree(tmp_path, "run", "--budget-ms", "-1", "train.py")
    assert done.returncode == 2 and "a budget in milliseconds is a number >= 0" in done.stderr


def test_a_rows_cost_leads_in_text_json_and_sarif():
    import io
    import json

    from syncfree.output import Diagnostic, write_diagnostics

    d = Diagnostic("train.py", 4, 5, 4, 30, "SF101", "`.item()`", certainty="measured", count=3, blocked_ms=41.2,
                   cost_ms=1.2, cost_each_ms=0.4)
    out = io.StringIO()
    write_diagnostics([d], "text", out, tool_version="0")
    text = out.getvalue()
    assert "×3, cost 1.20 ms of GPU time (0.400 ms each), blocked 41.2 ms" in text
    out = io.StringIO()
    write_diagnostics([d], "json", out, tool_version="0")
    (entry,) = json.loads(out.getvalue())
    assert (entry["cost_ms"], entry["cost_each_ms"], entry["blocked_ms"]) == (1.2, 0.4, 41.2)
    out = io.StringIO()
    write_diagnostics([d], "sarif", out, tool_version="0")
    (result,) = json.loads(out.getvalue())["runs"][0]["results"]
    assert (result["properties"]["costMs"], result["properties"]["costEachMs"]) == (1.2, 0.4)
    assert list(result["properties"]).index("costMs") < list(result["properties"]).index("blockedMs")


def test_a_cell_report_with_costs_lists_the_costliest_site_first_and_says_what_they_cost():
    from syncfree.capture.sites import SyncSite
    from syncfree.report import build_report, report_text

    cheap = SyncSite((2,), "item", "SF101", (), None, False)
    cheap.count, cheap.blocked_s, cheap.measured, cheap.cost_s, cheap.cost_share = 50, 3.0, 50, 0.001, 0.001
    dear = SyncSite((3,), "mask_index", "SF601", (), None, False)
    dear.count, dear.blocked_s, dear.measured, dear.cost_s, dear.cost_share = 50, 0.05, 50, 0.04, 0.05
    report = build_report(source="a\nb\nc\n", device={"kind": "cuda", "name": "H200", "torch": "2.11"}, mode="warn",
                          sites=[cheap.to_report(), dear.to_report()],
                          cost={"cost_ms": 41.0, "gpu_busy_ms": 760.0, "gpu_idle_ms": 40.0})
    assert [s["line"] for s in report["sites"]] == [3, 2]  # by cost, not by blocked time (3000 ms vs 50 ms)
    text = report_text(report)
    assert "cost 41.00 ms of GPU time (40.0 ms of 800.0 ms idle), blocked 3050.0 ms" in text
    assert ("  line 3: SF601 Indexing with a boolean mask waits for the number of selected elements ×50, cost 40.00 ms "
            "of GPU time (0.800 ms each, 5.0% of the GPU's time), blocked 50.0 ms") in text


# ---------------------------------------------------------------- reading a trace (gputrace), with made-up events


class _Event:
    """A Kineto event as `GpuTrace` reads it (torch._C._autograd._KinetoEvent's methods)."""

    def __init__(self, name, start_us, end_us, correlation, device="DeviceType.CPU", stream=7):
        self._name, self._start, self._end = name, start_us, end_us
        self._correlation, self._device, self._stream = correlation, device, stream
        self.base = 0

    def name(self):
        return self._name

    def start_ns(self):
        return self.base + int(self._start * 1000)

    def end_ns(self):
        return self.base + int(self._end * 1000)

    def correlation_id(self):
        return self._correlation

    def linked_correlation_id(self):
        return 0

    def device_type(self):
        return self._device

    def device_resource_id(self):
        return self._stream

    def activity_type(self):
        raise AttributeError("not in this torch")  # torch 2.11 has none: the device type decides


def test_a_trace_in_the_system_clock_is_read_into_costs_on_the_recorders_clock():
    import time

    from syncfree.capture.gputrace import GpuTrace, _offsets

    gpu = "DeviceType.CUDA"
    events = [  # us from the trace's base; a GPU-bound step: .item() (a blocking copy, then a stream sync), then
        # 300 us of host work before the next kernel
        _Event("cudaLaunchKernel", 0, 5, 1), _Event("gemm", 5, 1000, 1, gpu),
        _Event("cudaMemcpyAsync", 10, 1003, 2), _Event("Memcpy DtoH (Device -> Pageable)", 1000, 1002, 2, gpu),
        _Event("cudaStreamSynchronize", 1003, 1004, 3),
        _Event("cudaLaunchKernel", 1300, 1305, 4), _Event("gemm", 1305, 2305, 4, gpu),
    ]
    trace = GpuTrace()
    trace._offsets = _offsets()
    real_offset = trace._offsets[0]  # time_ns() - perf_counter_ns()
    base = time.time_ns() - 5_000_000
    for event in events:
        event.base = base
    returned = (base + 1005 * 1000 - real_offset) / 1e9  # the hook saw the sync return 1 us after the call did
    # The end's clock offsets are the start's: a second sample on a loaded machine could differ by microseconds.
    costs = trace._costs(events, [("item", returned, returned + 1e-6, None)], trace._offsets)
    assert trace.stats["clock"] == "realtime" and trace.stats["launch_known"] == 3, trace.stats
    assert costs.sites["item"].syncs == 1
    # Without the wait (the copy's 993 us and the sync's 1 us) the next kernel is queued at once: the gap goes.
    assert abs(costs.sites["item"].cost_us - 302.0) < 3.0, costs.sites
    assert abs(costs.busy_us - 1997.0) < 1.0 and abs(costs.idle_us - 303.0) < 1.0


def test_a_distributed_run_or_a_notebook_refuses_cost_options_it_would_not_check(tmp_path):
    import pytest

    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN)
    done = _syncfree(tmp_path, "run", "--nproc-per-node", "2", "--budget-ms", "5", "train.py")
    assert done.returncode == 2 and "not measured in a distributed job's ranks yet" in done.stderr, done.stderr
    (tmp_path / "nb.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    done = _syncfree(tmp_path, "run", "--cost", "nb.ipynb")
    assert done.returncode == 2 and "--cost/--budget-ms apply to scripts" in done.stderr, done.stderr


def test_at_the_power_limit_part_of_the_gpu_time_lost_comes_back_as_clock():
    from syncfree.cost import POWER_GIVE_BACK, Power

    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    free = compute_costs(acts, syncs, waits).sites["item"]
    held = compute_costs(acts, syncs, waits, power=Power(average_w=693.0, limit_w=700.0, capped_share=1.0))
    site = held.sites["item"]
    # the GPU time lost is the same; the cost is what removing the sync saves at the limit
    assert abs(site.lost_us - free.cost_us) < 1e-6 and abs(free.lost_us - free.cost_us) < 1e-6
    assert abs(site.cost_us - free.cost_us * (1 - POWER_GIVE_BACK)) < 1e-6
    assert 0.3 < POWER_GIVE_BACK < 0.4  # H200: 0.1 ms of busy time came back of 0.26 ms of idle
    assert "power limit (700 W) 100%" in held.power_note and "× 0.64" in held.power_note
    # held at the limit a fifth of the time: a fifth of the give-back
    part = compute_costs(acts, syncs, waits, power=Power(average_w=640.0, limit_w=700.0, capped_share=0.2))
    assert abs(part.sites["item"].cost_us - free.cost_us * (1 - 0.2 * POWER_GIVE_BACK)) < 1e-6


def test_a_gpu_below_its_power_limit_keeps_the_whole_gpu_time_lost():
    from syncfree.cost import Power

    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    free = compute_costs(acts, syncs, waits).sites["item"].cost_us
    costs = compute_costs(acts, syncs, waits, power=Power(average_w=300.0, limit_w=700.0, capped_share=0.0))
    assert costs.sites["item"].cost_us == free and costs.power_note is None


def test_a_gpu_drawing_under_half_its_limit_is_not_held_at_it_whatever_nvml_counted():
    """On an H200 NVML's held-for-power counter read 100% over launch-bound loops drawing 140-180 W of 700 W."""
    from syncfree.cost import Power

    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    free = compute_costs(acts, syncs, waits).sites["item"].cost_us
    costs = compute_costs(acts, syncs, waits, power=Power(average_w=141.0, limit_w=700.0, capped_share=1.0))
    assert costs.sites["item"].cost_us == free and costs.power_note is None
    held = compute_costs(acts, syncs, waits, power=Power(average_w=360.0, limit_w=700.0, capped_share=1.0))
    assert held.sites["item"].cost_us < free and "100%" in held.power_note



def test_the_drivers_power_samples_say_whether_the_gpu_was_held_at_its_limit_not_nvmls_count():
    """On an H200 NVML's held-for-power count read 100% over loops drawing 140 W of 700 W, and its power-cap reason was
    set in a GPU-bound loop with and without a sync: where the driver sampled the draw, the samples at the limit say."""
    from syncfree.cost import POWER_GIVE_BACK, Power

    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    free = compute_costs(acts, syncs, waits).sites["item"].cost_us
    below = compute_costs(acts, syncs, waits, power=Power(average_w=560.0, limit_w=700.0, capped_share=1.0,
                                                          at_limit_share=0.0))
    assert below.sites["item"].cost_us == free and below.power_note is None
    held = compute_costs(acts, syncs, waits, power=Power(average_w=690.0, limit_w=700.0, capped_share=0.0,
                                                         at_limit_share=0.5))
    assert abs(held.sites["item"].cost_us - free * (1 - 0.5 * POWER_GIVE_BACK)) < 1e-6 and "50%" in held.power_note


def test_sites_removed_together_can_lose_more_than_the_sum_of_each_alone():
    # A mask index's step: its forward sync (A) drains the queue; 400 us of host work later its backward syncs again
    # (B, on the work queued since); 300 us more and the next big kernels come. Without A alone, B drains the queue
    # where A did; without B alone, A already had: each alone saves little, both together save the whole gap (what a
    # rewrite of the mask index saves). Each site's cost stays what removing it alone saves.
    acts, waits, syncs = [], [], []
    cpu = gpu_free = 0.0
    for _ in range(4):
        for _ in range(6):
            start = max(cpu + 5.0, gpu_free)
            acts.append(Activity(start, start + 2000.0, cpu))
            gpu_free, cpu = start + 2000.0, cpu + 10.0
        for site, after in (("A", 300.0), ("B", 300.0)):
            wait_end = max(cpu, gpu_free) + 8.0
            waits.append((cpu, wait_end))
            syncs.append(Sync(site, wait_end))
            cpu = wait_end + 100.0 if site == "A" else wait_end + after
            if site == "A":  # a small kernel of the backward, launched before B's sync
                start = max(cpu + 5.0, gpu_free)
                acts.append(Activity(start, start + 3.0, cpu))
                gpu_free, cpu = start + 3.0, cpu + 300.0
    costs = compute_costs(acts, syncs, waits, observer=False)
    alone = costs.sites["A"].lost_us + costs.sites["B"].lost_us
    assert costs.together_lost_us > alone + 3 * 250.0, (costs.together_lost_us, costs.sites)
    assert abs(costs.together_lost_us - costs.idle_us) < 3 * 30.0, (costs.together_lost_us, costs.idle_us)
    acts, waits, syncs = _gpu_bound(4, sync_after=5)
    one = compute_costs(acts, syncs, waits)
    assert one.together_lost_us == one.sites["item"].lost_us > 0
