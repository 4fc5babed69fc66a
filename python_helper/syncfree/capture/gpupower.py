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
(``nvmlDeviceGetViolationStatus`` with the power policy, ns). Where NVML or a counter is missing there is no reading
and the cost is the GPU time lost, unchanged.
"""

from __future__ import annotations

import ctypes
import time

from ..cost import Power

__all__ = ["PowerWindow"]

_NVML_PERF_POLICY_POWER = 0
_MIN_SECONDS = 0.2  # the counters' resolution: a shorter window's average power means little


class _Violation(ctypes.Structure):
    _fields_ = [("reference_time", ctypes.c_ulonglong), ("violation_time", ctypes.c_ulonglong)]


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
        except Exception:
            return None
        if began is None or counters is None:
            return None
        seconds = now - began[0]
        if seconds < _MIN_SECONDS:
            return None
        limit_mw = counters[2]
        energy_mj, held_ns = tuple(b - a for a, b in zip(began[1][:2], counters[:2]))
        return Power(average_w=energy_mj / 1000.0 / seconds, limit_w=limit_mw / 1000.0,
                     capped_share=min(max(held_ns / 1e9 / seconds, 0.0), 1.0), seconds=seconds)
