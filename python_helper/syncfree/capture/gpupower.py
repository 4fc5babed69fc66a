"""The GPU's power over a cost trace: its average draw, its power limit, and how much of the time it was held at it.

    window = PowerWindow()
    window.start()                   # reads every GPU's counters (NVML); never fails, never initialises CUDA
    ...                              # the watched code
    power = window.stop(torch_index) # syncfree.cost.Power for the GPU the program used, or None

Why: a GPU at its power limit runs its kernels at the clock the limit allows. A sync's idle time lowers its average
power, so its kernels run at a higher clock; once the sync is gone the GPU is busy all the time and runs them at a
lower clock. Part of the GPU time a sync loses comes back that way, and removing it saves less (syncfree.cost,
``Power``). Measured on an H200 at its 700 W limit: a 4096-wide MLP step with a `torch.cuda.synchronize()` ran its
kernels at 1815 MHz, without it at 1780 MHz, and its busy time grew by 0.1 ms a step of the 0.26 ms its sync's idle
time took.

NVML (the driver's management library, ``libnvidia-ml.so.1``) is read through ctypes: no package to install, and no
CUDA context (a forked child's CUDA stays usable). Two counters, read at the start and the stop: the energy the GPU
drew (``nvmlDeviceGetTotalEnergyConsumption``, mJ) and the time it was held back for power
(``nvmlDeviceGetViolationStatus`` with the power policy, ns). And, at the stop, the driver's own samples of the GPU's
draw over the window (``nvmlDeviceGetSamples``, one each 20 ms or so, a buffer of the last few seconds): the share
of them at the limit says how long the GPU was held at it, which the held-back counter does not (on an H200 it read
100% over loops drawing 140 W of 700 W), and over a short window their mean is the draw, which the energy counter's
is not (578-941 W over 0.23 s runs of one loop whose samples read 673-721 W). Where NVML or a counter is missing
there is no reading and the cost is the GPU time lost, unchanged.
"""

from __future__ import annotations

import ctypes
import time

from ..cost import AT_LIMIT_DRAW, Power

__all__ = ["PowerWindow"]

_NVML_PERF_POLICY_POWER = 0
_NVML_TOTAL_POWER_SAMPLES = 0
_MIN_SECONDS = 0.2  # the counters' resolution: a shorter window's average power means little
_MIN_SAMPLES = 5  # fewer power samples over the window say little
_SAMPLED_SECONDS = 2.0  # under this the samples' mean is the draw; over it the energy counter's (the buffer is short)


class _Violation(ctypes.Structure):
    _fields_ = [("reference_time", ctypes.c_ulonglong), ("violation_time", ctypes.c_ulonglong)]


class _Value(ctypes.Union):  # nvmlValue_t
    _fields_ = [("d", ctypes.c_double), ("ui", ctypes.c_uint), ("ul", ctypes.c_ulong), ("ull", ctypes.c_ulonglong),
                ("sll", ctypes.c_longlong)]


class _Sample(ctypes.Structure):  # nvmlSample_t
    _fields_ = [("timestamp", ctypes.c_ulonglong), ("value", _Value)]


_VALUE_FIELDS = {0: "d", 1: "ui", 2: "ul", 3: "ull", 4: "sll", 5: "ui"}  # nvmlValueType_t


def _power_samples(lib, handle, since_us: int, until_us: int) -> list[float] | None:
    """The driver's samples of the GPU's draw (W) taken between two wall-clock times (us), or None where it keeps
    none."""
    kind, count = ctypes.c_int(), ctypes.c_uint(0)
    if lib.nvmlDeviceGetSamples(handle, _NVML_TOTAL_POWER_SAMPLES, ctypes.c_ulonglong(since_us), ctypes.byref(kind),
                                ctypes.byref(count), None) != 0 or not count.value:
        return None
    samples = (_Sample * count.value)()
    if lib.nvmlDeviceGetSamples(handle, _NVML_TOTAL_POWER_SAMPLES, ctypes.c_ulonglong(since_us), ctypes.byref(kind),
                                ctypes.byref(count), samples) != 0:
        return None
    field = _VALUE_FIELDS.get(kind.value)
    if field is None:
        return None
    return [getattr(s.value, field) / 1000.0 for s in samples[:count.value] if since_us <= s.timestamp <= until_us]


_nvml: list = []  # [library or None], loaded once a process


def _library():
    if not _nvml:
        lib = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                lib = None
        except (OSError, AttributeError):
            lib = None
        _nvml.append(lib)
    return _nvml[0]


def _counters(lib, handle) -> tuple[int, int, int] | None:
    """(energy in mJ, time held back for power in ns, enforced power limit in mW), or None."""
    energy, violation, limit = ctypes.c_ulonglong(), _Violation(), ctypes.c_uint()
    if lib.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(energy)) != 0:
        return None
    if lib.nvmlDeviceGetViolationStatus(handle, _NVML_PERF_POLICY_POWER, ctypes.byref(violation)) != 0:
        return None
    if lib.nvmlDeviceGetEnforcedPowerLimit(handle, ctypes.byref(limit)) != 0 or not limit.value:
        return None
    return energy.value, violation.violation_time, limit.value


def _handle(lib, torch_device: int):
    """NVML's handle of torch's device ``torch_device`` (by its PCI address: CUDA_VISIBLE_DEVICES renumbers), or None."""
    import torch

    props = torch.cuda.get_device_properties(torch_device)
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0".encode()
    handle = ctypes.c_void_p()
    if lib.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(handle)) != 0:
        return None
    return handle


class PowerWindow:
    def __init__(self) -> None:
        self._start: dict[int, tuple[float, tuple[int, int, int]]] = {}  # handle -> (perf_counter, counters)
        self._wall_us = 0  # wall-clock us at the start (the power samples' clock)

    def start(self, torch_device: int | None = None) -> None:
        """Read the counters of torch's device ``torch_device``, or of every GPU where CUDA is not started yet (which
        one the program uses is known only at the stop). A read takes some milliseconds (the energy counter's most)."""
        try:
            lib = _library()
            if lib is None:
                return
            if torch_device is not None:
                handle = _handle(lib, torch_device)
                handles = [] if handle is None else [handle]
            else:
                count = ctypes.c_uint()
                if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
                    return
                handles = []
                for index in range(min(count.value, 64)):
                    handle = ctypes.c_void_p()
                    if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                        handles.append(handle)
            self._wall_us = int(time.time() * 1e6)
            for handle in handles:
                counters = _counters(lib, handle)
                if counters is not None:
                    self._start[handle.value] = (time.perf_counter(), counters)
        except Exception:  # no reading, never a broken run
            self._start.clear()

    def stop(self, torch_device: int) -> Power | None:
        """The power of the GPU that is torch's device ``torch_device`` over the window, or None."""
        if not self._start:
            return None
        try:
            lib = _library()
            handle = None if lib is None else _handle(lib, torch_device)
            if handle is None:
                return None
            began = self._start.get(handle.value)
            counters = _counters(lib, handle)
            now = time.perf_counter()
            sampled = None
            if began is not None:
                try:
                    sampled = _power_samples(lib, handle, self._wall_us, int(time.time() * 1e6))
                except Exception:
                    sampled = None
        except Exception:
            return None
        if began is None or counters is None:
            return None
        seconds = now - began[0]
        if seconds < _MIN_SECONDS:
            return None
        limit_w = counters[2] / 1000.0
        energy_mj, held_ns = tuple(b - a for a, b in zip(began[1][:2], counters[:2]))
        average_w = energy_mj / 1000.0 / seconds
        at_limit = None
        if sampled is not None and len(sampled) >= _MIN_SAMPLES:
            at_limit = sum(w >= AT_LIMIT_DRAW * limit_w for w in sampled) / len(sampled)
            if seconds < _SAMPLED_SECONDS:
                average_w = sum(sampled) / len(sampled)
        return Power(average_w=average_w, limit_w=limit_w, capped_share=min(max(held_ns / 1e9 / seconds, 0.0), 1.0),
                     seconds=seconds, at_limit_share=at_limit)
