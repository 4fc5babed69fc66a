"""The GPU's own timestamps for a sync's cost: a Kineto trace with CUDA activity only.

    trace = GpuTrace()
    reason = trace.start()          # None, or why there is no trace (the report's note)
    ...                             # the watched code; the recorder logs (site, perf_counter()) per sync
    costs = trace.stop(sync_log)    # syncfree.cost.Costs, or None (trace.reason says why)

Why Kineto (torch's profiler) and not CUPTI's activity API: Kineto is in every CUDA build of
torch, needs no extra package, and with CUDA activity alone (no CPU ops, no stacks, no
shapes) it records just what the cost needs: each kernel, copy and memset with its GPU start
and end, and each CUDA runtime/driver call (launches and blocking calls) with its host times
and the correlation id that ties a launch to its GPU work, all in one clock. It runs beside the
debug-mode engine. The CUPTI engine holds CUPTI's callback subscription itself and Kineto
would take the same CUPTI; a cost beside it would be CUPTI activity records in that engine,
not done yet: the CUPTI engine's reports say that the cost was not measured.

The trace's clock is told from its own timestamps (the system clock in recent torch, the
monotonic clock in some older builds): the recorder's syncs (`time.perf_counter`) are moved
into it by the offset sampled at `start`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..cost import Activity, Costs, Power, Sync, compute_costs
from .gpupower import PowerWindow

__all__ = ["GpuTrace", "trace_busy"]

# Host calls that block until GPU work is done (runtime and driver API names as Kineto records them),
# and copies, which block when the host memory is pageable (`.item()`, `.tolist()`: the wait is in
# cudaMemcpyAsync itself): a copy counts as a wait only where a recorded sync follows it.
_BARRIERS = ("Synchronize",)
_COPIES = ("Memcpy",)
_GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel")

_active: list[GpuTrace] = []  # at most one: Kineto runs one trace per process
# What tracing adds to each launch's host time, in us, per device (measured at a process's first trace).
_launch_overhead: dict[int, float] = {}


def trace_busy() -> bool:
    """Whether a cost trace (or another torch profiler) is running in this process."""
    if _active:
        return True
    try:
        import torch

        return bool(torch.autograd.profiler._is_profiler_enabled)  # type: ignore[attr-defined]
    except Exception:
        return False


class GpuTrace:
    def __init__(self) -> None:
        self._profile = None
        self._offsets: tuple[int, int] = (0, 0)  # (time_ns() - perf_counter_ns(), monotonic_ns() - perf_counter_ns())
        self._window: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.reason: str | None = None
        self.running = False
        self.stats: dict = {}  # what the trace held (bench/cost.py prints it)
        self.inputs: tuple = ()
        self.launch_overhead_us = 0.0
        self._mark: int | None = None  # perf_counter_ns() before the trace's own calibration launches (not the run's)
        self._power = PowerWindow()
        self.power: Power | None = None

    def start(self) -> str | None:
        """Start the trace; None when started, else why not (a line for the report's notes)."""
        if trace_busy():
            self.reason = ("cost not measured: another torch profiler (or an outer cost measurement) is "
                           "tracing this process")
            return self.reason
        try:
            import torch
            from torch.autograd import profiler as autograd_profiler

            profile = autograd_profiler.profile(use_kineto=True, use_cpu=False, use_device="cuda")
            profile._prepare_trace()
            profile._start_trace()
        except Exception as exc:  # a build without Kineto/CUPTI: no cost, the run goes on
            self.reason = f"cost not measured: torch's profiler could not trace the GPU ({type(exc).__name__}: {exc})"[:500]
            return self.reason
        self._profile = profile
        self._torch = torch
        self.running = True
        _active.append(self)
        try:  # only the program's GPU where it has started CUDA (never started here: forked children)
            device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        except Exception:
            device = None
        self._power.start(device)
        self._offsets = _offsets()
        return None

    def stop(self, syncs: Iterable[tuple]) -> Costs | None:
        """Stop the trace and work out the costs of ``syncs``: (site, perf_counter() at the
        sync's return as the recorder's hook saw it, perf_counter() when the hook was done,
        perf_counter() when the syncing call began where the recorder saw it (an explicit sync's wrapper), else None,
        and optionally perf_counter() when a debug-mode sync's own call began as the stall clock timed it, else None).
        None when nothing was traced (``reason`` says why)."""
        if not self.running:
            return None
        self.running = False
        if self in _active:
            _active.remove(self)
        torch = self._torch
        from torch.autograd import _disable_profiler

        try:
            _device_synchronize(torch)  # the last kernels' records; not the wrapped synchronize()
        except Exception:
            pass
        # What tracing adds to each launch (a traced host refills an emptied GPU queue more slowly than the program does
        # untraced: syncfree.cost takes it out): tiny launches timed traced now and untraced below, once a process. At
        # the end, not the start: only where the program made its CUDA context (one made here would break its forked
        # children's CUDA: capture/presence.py), and the start stays cheap.
        traced = device = None
        try:
            if torch.cuda.is_initialized():
                device = torch.cuda.current_device()
                self.power = self._power.stop(device)
                if device not in _launch_overhead:
                    self._mark = time.perf_counter_ns()
                    traced = _per_launch_us(torch)
        except Exception:
            traced = None
        try:
            result = _disable_profiler()
        except Exception as exc:  # the run's end must not fail for the cost: no cost, and why
            self.reason = f"cost not measured: the GPU trace could not be stopped ({type(exc).__name__}: {exc})"[:500]
            return None
        finally:
            try:
                from torch.autograd.profiler import _run_on_profiler_stop

                _run_on_profiler_stop()
            except Exception:
                pass
        end_offsets = _offsets()
        try:
            if traced is not None:
                _launch_overhead[device] = max(traced - _per_launch_us(torch), 0.0)
        except Exception:
            pass
        self.launch_overhead_us = _launch_overhead.get(device, 0.0)
        try:
            return self._costs(result.events(), list(syncs), end_offsets)
        except Exception as exc:  # a torch whose events read differently: no cost rather than a broken run
            self.reason = f"cost not measured: the GPU trace could not be read ({type(exc).__name__}: {exc})"[:500]
            return None

    def _costs(self, events, syncs: list[tuple], end_offsets) -> Costs | None:
        gpu, launches, waits, barriers = [], {}, [], []
        kinds: dict[str, int] = {}
        wait_names: dict[str, int] = {}
        for event in events:
            kind = _activity_type(event)
            kinds[str(kind)] = kinds.get(str(kind), 0) + 1
            start, end = event.start_ns(), event.end_ns()
            if kind in _GPU_KINDS or (kind is None and str(event.device_type()).endswith("CUDA")):
                gpu.append((start, end, event.correlation_id(), event.linked_correlation_id(), _stream(event)))
            elif kind in ("cuda_runtime", "cuda_driver", None):
                name = event.name()
                launches[event.correlation_id()] = start
                if any(b in name for b in _BARRIERS):
                    barriers.append((start, end))
                    wait_names[name] = wait_names.get(name, 0) + 1
                elif any(c in name for c in _COPIES):
                    waits.append((start, end))
        if not gpu:
            self.reason = "cost not measured: the trace recorded no GPU activity"
            return None
        # Which clock: the one that puts the GPU's first activity inside the watched span.
        first = min(g[0] for g in gpu)
        realtime = (self._offsets[0] + end_offsets[0]) / 2
        monotonic = (self._offsets[1] + end_offsets[1]) / 2
        now_perf = time.perf_counter_ns()
        offset = min((realtime, monotonic), key=lambda o: abs(first - (now_perf + o)))
        if self._mark is not None:  # the trace's own calibration launches (stop) are not the run's
            mark = self._mark + offset
            gpu = [g for g in gpu if (launches.get(g[2]) or launches.get(g[3]) or g[0]) < mark]
            waits = [w for w in waits if w[0] < mark]
            barriers = [b for b in barriers if b[0] < mark]
            if not gpu:
                self.reason = "cost not measured: the trace recorded no GPU activity"
                return None
            first = min(g[0] for g in gpu)
        activities = []
        matched = 0
        for start, end, corr, linked, stream in gpu:
            launch = launches.get(corr)
            if launch is None and linked:
                launch = launches.get(linked)
            matched += launch is not None
            activities.append(Activity(start / 1000.0, end / 1000.0, None if launch is None else launch / 1000.0,
                                       stream))
        def trace_us(t: float | None) -> float | None:
            return None if t is None else (t * 1e9 + offset) / 1000.0

        sync_list = [Sync(site, trace_us(t), max(left - t, 0.0) * 1e6, trace_us(call),
                          trace_us(began[0] if began else None))
                     for site, t, left, call, *began in syncs]
        self.stats = {"kinds": kinds, "gpu": len(gpu), "launch_known": matched, "waits": wait_names,
                      "clock": "realtime" if offset == realtime else "monotonic",
                      "streams": len({g[4] for g in gpu}), "syncs": len(sync_list),
                      "launch_overhead_us": round(self.launch_overhead_us, 2),
                      "first_sync_after_gpu_start_us": round(sync_list[0].end - first / 1000.0, 1) if sync_list else None}
        copies = [(s / 1000.0, e / 1000.0) for s, e in waits]
        blocking = [(s / 1000.0, e / 1000.0) for s, e in barriers]
        if self.power is not None:
            self.stats["power"] = {"average_w": round(self.power.average_w, 1), "limit_w": self.power.limit_w,
                                   "capped_share": round(self.power.capped_share, 3),
                                   "at_limit_share": (None if self.power.at_limit_share is None
                                                      else round(self.power.at_limit_share, 3))}
        # bench/cost.py's readings
        self.inputs = (activities, sync_list, copies, blocking, self.launch_overhead_us, self.power)
        return compute_costs(activities, sync_list, copies, barriers=blocking,
                             launch_overhead_us=self.launch_overhead_us, power=self.power)


def _per_launch_us(torch, launches: int = 100, rounds: int = 3) -> float:
    """The host's time per launch of a tiny kernel, in us (the best of a few rounds), on the current device."""
    x = torch.zeros(1, device="cuda")
    _device_synchronize(torch)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for _ in range(launches):
            x.add_(1)
        best = min(best, time.perf_counter_ns() - started)
    _device_synchronize(torch)
    return best / launches / 1000.0


def _device_synchronize(torch) -> None:
    """cudaDeviceSynchronize for the trace's own needs: torch's, not a recorder's wrapper of it (capture/debug)."""
    sync = torch._C._cuda_synchronize
    getattr(sync, "__wrapped__", sync)()


def _stream(event) -> int:
    try:
        return int(event.device_resource_id())
    except Exception:
        return 0


def _activity_type(event) -> str | None:
    try:
        return str(event.activity_type())
    except Exception:
        return None


def _offsets() -> tuple[int, int]:
    p0 = time.perf_counter_ns()
    real = time.time_ns()
    mono = time.monotonic_ns()
    p1 = time.perf_counter_ns()
    perf = (p0 + p1) // 2
    return real - perf, mono - perf
