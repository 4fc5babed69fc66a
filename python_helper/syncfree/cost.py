"""What each sync costs: the GPU time it loses, from the GPU's own timestamps.

A pure function (no torch, no clock): `compute_costs` takes the GPU's activity records
(kernels, copies, memsets: start, end and the host time their launch call was made), the
blocking CUDA calls the host made (their host intervals: ``cudaStreamSynchronize``,
``cudaMemcpyAsync`` to pageable memory, ...) and the syncs the recorder saw (site and the host
time each returned), all in one clock, and returns each site's cost and the run's totals. The
trace itself is taken by `syncfree.capture.gputrace`.

Blocked time (the CPU's wait inside a sync) is the GPU work already queued: work the GPU
does anyway, not what the sync costs (sync-facts.md, "Blocked time is not the cost"). What a
sync costs is the GPU time it loses: once it returns the GPU's queue is empty and stays empty
until the CPU has queued the next work; on a GPU-bound step the CPU's lead is gone and the
GPU idles while the CPU launches, later in the step too; on a launch-bound step the GPU idles
between kernels anyway and the sync adds little more than its own wait.

The attribution replays the trace without the site's syncs. Each blocking call belongs to
the sync the recorder saw return right after it (within ``snap_us``, after the previous
sync). The replay walks the host's launches in order, each kernel or copy starting at the
later of its launch (plus the launch latency seen in the trace) and the end of the work before
it, and:

- a blocking call of the site takes no time: the host goes on at once, so every later
  launch comes earlier by what the site's waits took (the CPU keeps its lead);
- a blocking call of another site still waits: the host goes on only when the replayed GPU
  has done the work it waited for (so one site's cost is not another's);
- the cost is how much earlier the replayed GPU finishes its last work than the replayed
  trace with every sync kept: the GPU time the site's syncs lost, over the run.

``cost_share`` divides by the span from the GPU's first activity to its last (busy + idle).

A GPU at its power limit gives part of that time back. Its kernels run at the clock the limit allows; a sync's
idle time lowers its average power, and so raises that clock. Without the sync the GPU is busy all the time and
runs at a lower clock: its busy time grows, and removing the sync saves less than the GPU time it lost. At the limit,
the energy the idle time saved goes to a higher clock: with a share ``IDLE_POWER_SHARE`` of the limit drawn while idle
and busy power growing as the clock to the power ``CLOCK_POWER_EXPONENT``, removing idle time ``t`` lengthens the
busy time by ``t * (1 - IDLE_POWER_SHARE) / CLOCK_POWER_EXPONENT`` (to first order). With `Power` (the GPU's reading
over the trace, capture/gpupower.py) each site's cost is its GPU time lost less that, in the share of the time the
GPU was held at its limit; ``lost_us`` keeps the GPU time lost.
bench/cost.py validates this against the step time a sync-free rewrite saves, on a GPU.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["AT_LIMIT_DRAW", "COST_NOT_ASKED", "NO_GPU_NO_COST", "Activity", "Costs", "Power", "SiteCost", "Sync",
           "compute_costs", "SNAP_US"]

# The reports' one line where there is no cost: nothing is measured or guessed without a GPU trace.
NO_GPU_NO_COST = "no GPU, no cost: what a sync costs (GPU time lost) is measured only on a GPU; sites are ranked by count"
COST_NOT_ASKED = ("cost not measured (the GPU time each sync loses: --cost, watch(cost=True)): sites are ranked by "
                  "blocked time, which is the GPU work already queued, not what the sync costs")

# A sync the recorder saw returns at most this long after the blocking call the trace
# recorded ended (the warning reaches Python after the C++ call returns: stall.py): its
# window starts at that call's end.
SNAP_US = 2000.0
# The most a debug-mode sync's warning takes from the syncing call's return to the recorder's hook (Python's warnings
# module; 15-25 us on an H200 host with Python 3.12): what a run's syncs show is taken when less.
WARNING_US = 40.0
# A GPU between kernels, its clocks up, draws about this share of its power limit (H200: 190 W of 700 W).
IDLE_POWER_SHARE = 0.27
# Near the top of its clock range a GPU's busy power grows about as the square of its clock (H200 at 700 W: 1.9,
# from its clock and power with and without a sync's idle time).
CLOCK_POWER_EXPONENT = 2.0
# The share of a sync's GPU time lost that comes back as a higher clock while the GPU is held at its power limit.
POWER_GIVE_BACK = (1.0 - IDLE_POWER_SHARE) / CLOCK_POWER_EXPONENT
# NVML's "held back for power" counter is not enough by itself: on an H200 it read 100% over launch-bound loops
# drawing 140-180 W of a 700 W limit, and its power-cap reason was set in a GPU-bound loop with and without a sync.
# The GPU's own draw says it: a power sample (the driver's, every 20 ms) at 95% of the limit or more is at it (a GPU
# held at 700 W read 673-721 W). Without samples, a GPU whose average draw stays under half its limit is not held.
AT_LIMIT_DRAW = 0.95
POWER_BOUND_DRAW = 0.5


@dataclass(frozen=True)
class Activity:
    """One GPU activity (kernel, copy, memset), times in microseconds of the trace's clock;
    ``launch``: host time of the call that queued it, None when unknown (then never starved)."""

    start: float
    end: float
    launch: float | None = None
    stream: int = 0  # activities of one stream run in order; streams run side by side


@dataclass(frozen=True)
class Sync:
    """One sync the recorder saw: its site and the host time (trace clock, us) it returned."""

    site: Hashable
    end: float
    hook: float = 0.0  # us the recorder's hook took after it (not the program's time)
    call: float | None = None  # host time (us) the syncing call began, where the recorder saw it (explicit syncs)
    # A debug-mode sync whose call is its own (`.item()`, `.tolist()`): host time (us) that call began, as the stall
    # clock timed it (compute_costs' ``call_starts``).
    began: float | None = None


@dataclass(frozen=True)
class Power:
    """The GPU's power over the trace (capture/gpupower.py): its average draw, its limit, the share of the time NVML
    counted it held back to stay within it, the window's length in seconds, and the share of the driver's power
    samples over the window drawn at the limit (None where the driver keeps none)."""

    average_w: float
    limit_w: float
    capped_share: float
    seconds: float = 0.0
    at_limit_share: float | None = None

    @property
    def held_share(self) -> float:
        """The share of the window the GPU was held at its power limit: where the driver sampled its draw, the share
        of the samples at the limit (``AT_LIMIT_DRAW``); else NVML's count, where its average draw says it can be."""
        if self.limit_w <= 0:
            return 0.0
        if self.at_limit_share is not None:
            return min(max(self.at_limit_share, 0.0), 1.0)
        if self.average_w < POWER_BOUND_DRAW * self.limit_w:
            return 0.0
        return min(max(self.capped_share, 0.0), 1.0)


@dataclass
class SiteCost:
    cost_us: float = 0.0  # what removing the site's syncs saves: the GPU time lost, less what the clock gives back
    syncs: int = 0  # the syncs of the site inside the trace
    lost_us: float = 0.0  # the GPU time the site's syncs lost (idle time they caused)

    @property
    def cost_ms(self) -> float:
        return round(self.cost_us / 1000.0, 3)


@dataclass
class Costs:
    sites: dict = field(default_factory=dict)  # site -> SiteCost
    busy_us: float = 0.0
    idle_us: float = 0.0
    power: Power | None = None
    # The GPU time lost by every site's syncs removed together (one replay without any of them). Sites interact: one
    # sync's idle time moves to the next sync that drains the queue (a mask index's backward syncs again, in the same
    # step), so this is not the sum of the sites' lost_us. bench/cost.py prints it for loops with several sites.
    together_lost_us: float = 0.0

    @property
    def give_back(self) -> float:
        """The share of the GPU time lost that the clock gives back (0 without a power reading)."""
        if self.power is None:
            return 0.0
        return POWER_GIVE_BACK * self.power.held_share

    @property
    def power_note(self) -> str | None:
        """One line for the report where the GPU's power limit lowered the costs."""
        p = self.power
        if p is None or p.held_share < 0.05:
            return None
        return (f"the GPU ran at its power limit ({p.limit_w:.0f} W) {p.held_share:.0%} of the watched time: there "
                "a sync's idle time lets the GPU run its kernels at a higher clock, and removing the sync gives part of "
                f"the time back; each cost is the GPU time lost × {1 - self.give_back:.2f}")

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
                  waits: Iterable[tuple[float, float]] = (), *, snap_us: float = SNAP_US,
                  barriers: Iterable[tuple[float, float]] = (), observer: bool = True,
                  launch_overhead_us: float = 0.0, power: Power | None = None, call_starts: bool = True) -> Costs:
    """Each site's GPU time lost, and the GPU's busy and idle time (module docstring).

    ``waits``: host intervals (start, end) of the blocking CUDA calls in the trace; those that
    end within ``snap_us`` before a sync's recorded return (and after the previous sync's) are
    that sync's. ``barriers``: calls that block whether or not a recorded sync made them
    (``cudaStreamSynchronize``...): kept as waits in every replay unless they are a site's.
    ``observer``: take the recorder's own time out of the host's time: its hook (`Sync.hook`) and,
    before it, the time from the sync's last wait (or the program's last launch after it) to the
    sync's recorded return.
    ``launch_overhead_us``: what tracing adds to the host's time of each launch (measured at the trace's end):
    taken out of the host's time in every replay, so that the CPU launches as fast as it does untraced (a traced
    host refills an emptied queue more slowly, and the GPU's idle time after a sync would be overstated).
    ``power``: the GPU's power over the trace; at its limit a share of each site's GPU time lost comes back as a
    higher clock (module docstring), and the cost is the rest.
    ``call_starts``: a debug-mode sync with its call's start (`Sync.began`) saves, removed, the host time of its
    call before its wait too, as an explicit sync does (on a launch-bound step the host's time is the step's). On
    by default: without it bench/cost.py's launch-bound `.tolist()` came out under its saving in every H200 run
    (by 0.03-0.08 ms/step); in one run of all twelve rows the launch-bound `.item()` and `.tolist()` gave 0.027 and
    0.032 without it against savings of 0.047 and 0.059, and 0.042 and 0.054 with it. Off: bench/cost.py's
    "without call starts" figures.
    """
    acts = sorted((a for a in activities if a.end >= a.start), key=lambda a: (a.start, a.end))
    costs = Costs(power=power)
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
    if not sync_list:
        return costs

    # Each blocking call to the sync recorded right after it: (start, end) -> site.
    wait_list = sorted({(float(s), float(e)) for s, e in list(waits) + list(barriers) if e >= s},
                       key=lambda w: w[1])
    wait_ends = [e for _, e in wait_list]
    owner: dict[int, Hashable] = {}
    previous = float("-inf")
    slack = 20.0  # us: the clocks' sampled offset
    # The recorder's own time after each sync (the warning and the hook run before the program goes
    # on): not the program's, taken out of the host's time in every replay.
    # Before the hook too: a debug-mode sync reaches Python as a warning after the syncing call
    # returned (stall.py), so from the end of the sync's last wait (or the program's last launch
    # after it) to the hook's entry the host runs the warning's machinery, not the program.
    launch_times = sorted(a.launch for a in acts if a.launch is not None)
    observed: list[tuple[float, float]] = []
    calls: list[tuple[float, Hashable, float]] = []  # (when, site, host time a rewrite deleting the call saves)
    told: list[tuple[Sync, list[int], float]] = []  # each sync, its waits, and when the program's part of it ended
    for s in sync_list:
        low = max(s.end - snap_us, previous) + slack
        i = bisect.bisect_right(wait_ends, low)
        j = bisect.bisect_right(wait_ends, s.end + slack)
        mine = [k for k in range(i, j) if owner.setdefault(k, s.site) == s.site]
        since = s.end
        if mine:
            since = min(max(wait_ends[k] for k in mine), s.end)
            at = bisect.bisect_right(launch_times, s.end) - 1
            if at >= 0 and launch_times[at] > since:
                since = launch_times[at]  # the program launched work after the wait: its time
        told.append((s, mine, since))
        previous = s.end
    # A sync told by a warning (debug mode) reaches the hook after the syncing call returned: from its last wait to the
    # hook the host runs the rest of the call (a `.tolist()` builds its list: the program's time, which a rewrite
    # saves) and then the warning's path through Python's warnings module (the recorder's). That path takes about the
    # same time at every sync: the low tenth of the run's gaps, at most WARNING_US.
    gaps = sorted(s.end - since for s, mine, since in told if s.call is None and mine)
    warning = min(gaps[len(gaps) // 10], WARNING_US) if gaps else WARNING_US
    for s, mine, since in told:
        if not observer:
            rest = 0.0
        elif s.call is not None:
            rest = 0.0
            # Removing the call saves its whole host time (a rewrite deletes it), not only its waits: the rest of the
            # call (Python, the device guard, the runtime's own work) before the recorder's part.
            before = _before_the_wait(s.call, since, mine, wait_list)
            if 0 < before < snap_us:
                calls.append((s.call, s.site, before))
        else:
            rest = max(s.end - since - warning, 0.0) if mine else 0.0
            if rest > 0:
                calls.append((since, s.site, rest))
            if call_starts and s.began is not None and mine:
                before = _before_the_wait(s.began, since, mine, wait_list)
                if 0 < before < snap_us:
                    calls.append((s.began, s.site, before))
        if observer:
            took = (s.end - since - rest) + max(s.hook, 0.0)
            if took > 0:
                observed.append((since + rest, min(took, snap_us)))
    barrier_set = {(float(s), float(e)) for s, e in barriers}
    kept = [k for k in range(len(wait_list)) if k in owner or wait_list[k] in barrier_set]

    # Launch latency: what an activity launched onto an idle stream took to start (its own when
    # it was, else the median of those).
    starved: list[float] = []
    latency: list[float | None] = []
    free: dict = {}
    for a in acts:
        lat = None
        if a.launch is not None and a.launch >= free.get(a.stream, float("-inf")) and a.start >= a.launch:
            lat = a.start - a.launch
            starved.append(lat)
        latency.append(lat)
        free[a.stream] = max(free.get(a.stream, float("-inf")), a.end)
    typical = sorted(starved)[len(starved) // 2] if starved else 5.0
    # What each kept blocking call waited for: the activity launched before it that ended last
    # before it returned (on whichever stream).
    by_end = sorted(range(len(acts)), key=lambda k: acts[k].end)
    ends = [acts[k].end for k in by_end]
    waited_for: dict[int, int] = {}
    for w in kept:
        ws, we = wait_list[w]
        pos = bisect.bisect_right(ends, we + slack) - 1
        for _ in range(256):
            if pos < 0:
                break
            k = by_end[pos]
            launch = acts[k].launch if acts[k].launch is not None else acts[k].start
            if launch <= ws:
                waited_for[w] = k
                break
            pos -= 1
    # The host's events in its order: launches (0), blocking calls (1), the recorder's time (2).
    events = []
    for k, (a, lat) in enumerate(zip(acts, latency)):
        launch = a.launch if a.launch is not None else a.start - typical
        events.append((launch, 0, k, typical if lat is None else lat))
    for w in kept:
        events.append((wait_list[w][0], 1, w, 0.0))
    for when, took in observed:
        events.append((when, 2, took, 0.0))
    for when, site, rest in calls:
        events.append((when, 3, site, rest))
    events.sort(key=lambda e: (e[0], e[1]))

    def replay(removed: frozenset) -> float:
        delta = 0.0  # replayed host time less the trace's
        free: dict = {}
        sim_end = [0.0] * len(acts)
        last = float("-inf")
        for when, kind, x, lat in events:
            if kind == 0:  # a launch
                a = acts[x]
                start = max(when + delta + lat, free.get(a.stream, float("-inf")))
                end = sim_end[x] = start + (a.end - a.start)
                free[a.stream] = end
                last = max(last, end)
                delta -= launch_overhead_us
            elif kind == 2:
                delta -= x
            elif kind == 3:
                if x in removed:
                    delta -= lat  # the removed call's own host time
            elif owner.get(x) in removed:
                ws, we = wait_list[x]
                delta -= we - ws  # the wait takes no time
            else:  # it waits for what it waited for, as replayed
                ws, we = wait_list[x]
                k = waited_for.get(x)
                drift = sim_end[k] - acts[k].end if k is not None else 0.0
                end = max(ws + delta, we + drift)
                delta = end - we
        return last

    base = replay(frozenset())
    keep = 1.0 - costs.give_back
    waited = set(owner.values())
    for site in costs.sites:
        if site in waited:
            lost = costs.sites[site].lost_us = max(0.0, base - replay(frozenset([site])))
            costs.sites[site].cost_us = lost * keep
    if len(waited) > 1:
        costs.together_lost_us = max(0.0, base - replay(frozenset(waited)))
    else:
        costs.together_lost_us = sum(c.lost_us for c in costs.sites.values())
    return costs


def _before_the_wait(call: float, since: float, mine: list[int], wait_list: list[tuple[float, float]]) -> float:
    """A syncing call's host time from its start to the end of its last wait (``since``), its waits left out."""
    inside = sum(min(wait_list[k][1], since) - max(wait_list[k][0], call) for k in mine
                 if wait_list[k][0] < since and wait_list[k][1] > call)
    return (since - call) - inside
