"""What each sync costs: the GPU time it loses, from the GPU's own timestamps.

A pure function (no torch, no clock): `compute_costs` takes the GPU's activity records
(kernels, copies, memsets: start, end and the host time their launch call was made), the
blocking CUDA calls the host made (their host intervals: ``cudaStreamSynchronize``,
``cudaMemcpy``, ...) and the syncs the recorder saw (site and the host time each returned),
all in one clock, and returns each site's cost and the run's totals. The trace itself is
taken by `syncfree.capture.gputrace`.

Blocked time (the CPU's wait inside a sync) is the GPU work already queued: work the GPU
does anyway, not what the sync costs (sync-facts.md, "Blocked time is not the cost"). What a
sync costs is the GPU time it loses: once it returns the GPU's queue is empty and stays empty
until the CPU has queued the next work. The attribution:

- A sync's window runs from its return to the next sync's return (of any site), so each
  GPU-idle gap belongs to at most one sync: the last one before it.
- In its window, walking the GPU's activities in start order (all streams: the GPU is idle
  only when none runs), a gap before an activity counts when the GPU was *starved*: the
  activity was launched after the GPU had finished everything before it (its launch time is
  at or after the end of the previous work). A gap whose next work was already queued
  (the CPU was ahead) is the GPU's own (a cross-stream wait, scheduling) and is not counted.
- Of a starved gap, only what the step would not idle anyway counts: without the sync the
  GPU would still wait for the CPU when the CPU's time between the two launches (less the
  host's blocking calls between them: the sync's wait, which the rewrite removes) is longer
  than the previous activity ran. On a launch-bound step that is nearly the whole gap, and the
  sync costs about its own wait; on a GPU-bound one it is nothing, and the sync costs the
  whole gap, plus any later starved gaps in the window while the CPU catches up.
- Gaps before the first sync belong to none. ``cost_share`` divides by the span from the
  GPU's first activity to its last (busy + idle).

bench/cost.py validates this against the step time a sync-free rewrite saves, on a GPU.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["Activity", "Costs", "SiteCost", "Sync", "compute_costs", "SNAP_US"]

# A sync the recorder saw returns at most this long after the blocking call the trace
# recorded ended (the warning reaches Python after the C++ call returns: stall.py): its
# window starts at that call's end.
SNAP_US = 2000.0


@dataclass(frozen=True)
class Activity:
    """One GPU activity (kernel, copy, memset), times in microseconds of the trace's clock;
    ``launch``: host time of the call that queued it, None when unknown (then never starved)."""

    start: float
    end: float
    launch: float | None = None


@dataclass(frozen=True)
class Sync:
    """One sync the recorder saw: its site and the host time (trace clock, us) it returned."""

    site: Hashable
    end: float


@dataclass
class SiteCost:
    cost_us: float = 0.0
    syncs: int = 0  # the syncs of the site inside the trace

    @property
    def cost_ms(self) -> float:
        return round(self.cost_us / 1000.0, 3)


@dataclass
class Costs:
    sites: dict = field(default_factory=dict)  # site -> SiteCost
    busy_us: float = 0.0
    idle_us: float = 0.0

    @property
    def span_us(self) -> float:
        return self.busy_us + self.idle_us

    @property
    def cost_us(self) -> float:
        return sum(s.cost_us for s in self.sites.values())

    def share(self, site: Hashable) -> float | None:
        """A site's cost as a share (0..1) of the span's GPU time; None without GPU activity."""
        if self.span_us <= 0 or site not in self.sites:
            return None
        return round(min(self.sites[site].cost_us / self.span_us, 1.0), 4)


def compute_costs(activities: Iterable[Activity], syncs: Iterable[Sync],
                  waits: Iterable[tuple[float, float]] = (), *, snap_us: float = SNAP_US) -> Costs:
    """Each site's GPU time lost, and the GPU's busy and idle time (module docstring).

    ``waits``: host intervals (start, end) of the blocking CUDA calls in the trace; a sync
    whose recorded return is within ``snap_us`` after the end of one returns at that end.
    """
    acts = sorted((a for a in activities if a.end >= a.start), key=lambda a: (a.start, a.end))
    costs = Costs()
    sync_list = sorted(syncs, key=lambda s: s.end)
    for s in sync_list:
        costs.sites.setdefault(s.site, SiteCost()).syncs += 1
    if not acts:
        return costs
    # Busy: the union of the activity intervals; idle: the rest of the span.
    busy = 0.0
    run_start, run_end = acts[0].start, acts[0].end
    for a in acts[1:]:
        if a.start > run_end:
            busy += run_end - run_start
            run_start, run_end = a.start, a.end
        else:
            run_end = max(run_end, a.end)
    busy += run_end - run_start
    span = max(a.end for a in acts) - acts[0].start
    costs.busy_us = busy
    costs.idle_us = max(span - busy, 0.0)

    wait_list = sorted((float(s), float(e)) for s, e in waits if e >= s)
    wait_ends = [e for _, e in wait_list]
    # Prefix sums of wait durations by end time, to subtract the blocking calls between two launches.
    wait_sum = [0.0]
    for s, e in wait_list:
        wait_sum.append(wait_sum[-1] + (e - s))

    def waited(t0: float, t1: float) -> float:
        """Host time spent in blocking calls that ended in (t0, t1] (whole calls)."""
        if t1 <= t0 or not wait_list:
            return 0.0
        i = bisect.bisect_right(wait_ends, t0)
        j = bisect.bisect_right(wait_ends, t1)
        return wait_sum[j] - wait_sum[i]

    returns = []
    for s in sync_list:
        end = s.end
        i = bisect.bisect_right(wait_ends, end) - 1
        if i >= 0 and end - wait_ends[i] <= snap_us:
            end = wait_ends[i]
        returns.append((end, s.site))
    returns.sort(key=lambda r: r[0])
    if not returns:
        return costs
    ret_times = [r for r, _ in returns]

    busy_end = acts[0].end
    prev = acts[0]
    for a in acts[1:]:
        gap = a.start - busy_end
        if gap > 0 and a.launch is not None:
            # The sync whose window this gap is in: the last to return before the GPU got the work.
            k = bisect.bisect_right(ret_times, a.start) - 1
            if k >= 0 and a.launch >= busy_end - 1e-9:  # starved: not queued when the GPU ran dry
                cpu = a.launch - prev.launch - waited(prev.launch, a.launch) if prev.launch is not None else 0.0
                anyway = max(0.0, cpu - (prev.end - prev.start))
                lost = max(0.0, gap - anyway)
                if lost > 0:
                    costs.sites[returns[k][1]].cost_us += lost
        if a.end > busy_end:
            busy_end = a.end
        prev = a
    return costs
