"""Predict mode's CPU stand-ins for the ``torch.cuda`` objects code holds: the device's
properties, ``torch.cuda.device``/``device_of`` contexts, ``Stream`` and ``Event`` (their
``synchronize`` is a predicted sync, the rest are no-ops) and the legacy
``torch.cuda.FloatTensor``-style types (they make virtual CUDA tensors).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from .here import Session, user_frame

LEGACY_TYPE_NAMES = (
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor",
    "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "BoolTensor",
)


def host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class _DeviceProperties:
    """What ``torch.cuda.get_device_properties`` answers for the virtual device."""

    name = "CPU stand-in (syncfree predict mode)"
    major, minor = 9, 0
    total_memory = host_memory_bytes()
    multi_processor_count = os.cpu_count() or 1
    is_integrated = False
    is_multi_gpu_board = False

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB)")


_DEVICE_PROPERTIES = _DeviceProperties()


class CudaDeviceContext(contextlib.AbstractContextManager):
    """``torch.cuda.device(i)`` / ``device_of(t)``: there is one virtual device."""

    def __init__(self, device: Any = None) -> None:
        self.idx = 0

    def __exit__(self, *exc: Any) -> None:
        return None


@contextlib.contextmanager
def stream_context(stream: Any = None) -> Iterator[Any]:
    yield stream


class EventStandIn:
    """``torch.cuda.Event`` on the CPU: ``synchronize`` is a sync, ``wait``/``query`` are not."""

    _session: Session

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False) -> None:
        self.enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._recorded_at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        self._session.record("explicit", user_frame())

    def elapsed_time(self, end_event: EventStandIn) -> float:
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def __repr__(self) -> str:
        return "<torch.cuda.Event (syncfree predict stand-in)>"


class StreamStandIn:
    """``torch.cuda.Stream`` on the CPU: ``synchronize`` is a sync, the rest are no-ops."""

    _session: Session

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.priority = priority
        self.cuda_stream = 0

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", 0)

    def synchronize(self) -> None:
        self._session.record("stream_sync", user_frame())

    def wait_event(self, event: Any) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        event = event if event is not None else self._session.event_type()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False

    def __enter__(self) -> StreamStandIn:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "<torch.cuda.Stream (syncfree predict stand-in)>"


class _LegacyCudaType(type):
    """Metaclass of the ``torch.cuda.FloatTensor``-style stand-ins."""

    _session: Session
    _cpu_type: Any
    dtype: Any
    is_cuda = True
    is_sparse = False

    def __instancecheck__(cls, obj: Any) -> bool:
        import torch

        registry = cls._session.registry
        return (isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype
                and registry is not None and registry.is_cuda(obj))

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        import torch

        tensor = cls._cpu_type(*args, **kwargs)
        data = args[0] if len(args) == 1 else None
        if ((isinstance(data, (list, tuple)) and not isinstance(data, torch.Size)) or (
                type(data).__name__ == "ndarray")) and tensor.numel() > 0:
            cls._session.record("tensor_from_python", user_frame())
        cls._session.registry.mark_cuda(tensor)
        return tensor

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


def legacy_cuda_type(session: Session, name: str) -> type:
    import torch

    cpu_type = getattr(torch, name)
    return _LegacyCudaType(name, (), {
        "_session": session, "_cpu_type": cpu_type, "dtype": cpu_type.dtype,
        "__module__": "torch.cuda",
    })
