"""Predict mode's stand-ins for the rest of the ``torch.cuda`` API that tests and training
code call around their tensors: the sync debug mode, autocast, memory statistics,
seeding, NVTX ranges and the like.

Inside a `PredictSession` code that asked ``torch.cuda.is_available()`` takes its CUDA
path, so what that path calls must answer as a GPU would rather than raise "Torch not
compiled with CUDA enabled" (the CPU build's answer) and fail a test that would pass on
a GPU (patches.py patches the device and stream queries; these are the rest):

* ``torch.cuda.set_sync_debug_mode``/``get_sync_debug_mode``: the mode is kept for the
  session, and a predicted sync then warns (``"warn"``) or raises (``"error"``) the way
  torch's debug mode does on a GPU (``shared/sync-facts.md``: a ``UserWarning`` /
  ``RuntimeError`` "called a synchronizing CUDA operation"; not for
  ``torch.cuda.synchronize()`` or ``Event.synchronize()``, which debug mode does not see).
* ``torch.autocast("cuda", dtype=...)`` (and ``torch.cuda.amp.autocast``): CPU autocast
  with the same dtype runs alongside, so matmuls and convolutions give float16/bfloat16
  results as on a GPU (CPU autocast casts fewer ops than CUDA's; those it does not cast
  stay float32).
* Memory statistics answer for an empty device (0 bytes; ``mem_get_info`` the host's
  memory); ``reset_*``/``empty_cache``/``ipc_collect``/``init`` do nothing;
  ``torch.cuda.manual_seed``/``seed``/``initial_seed`` act on the CPU generator, which
  virtual CUDA tensors draw from (patches.py treats its state as the CUDA RNG state);
  ``torch.cuda.nvtx`` ranges do nothing.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

#: torch's text for a sync under its debug mode (c10/cuda/CUDAFunctions.cpp).
SYNC_MESSAGE = "called a synchronizing CUDA operation"

# Kinds torch's debug mode does not see (shared/sync-facts.md, "What the debug mode does
# not see"): torch.cuda.synchronize() and Event.synchronize() are recorded as "explicit".
_NOT_SEEN_BY_DEBUG_MODE = frozenset({"explicit"})

_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


class _DebugMode:
    """The debug mode the code set on the stand-ins: process-wide, as torch's is."""

    mode = 0


#: Read by session.py at every predicted sync; reset when the session's patches go.
DEBUG = _DebugMode()


def install(session: Any, patch: Any) -> None:
    """Patch ``torch.cuda``'s remaining API for ``session`` through ``patch(owner, name,
    value)`` (patches.py's `Patches.replace`: undone when the session ends)."""
    import torch
    import torch.amp.autocast_mode

    cuda = torch.cuda

    def set_sync_debug_mode(debug_mode: int | str) -> None:
        if isinstance(debug_mode, str):
            if debug_mode not in _DEBUG_MODES:
                # torch/cuda/__init__.py's message
                raise RuntimeError("invalid value of debug_mode, expected one of "
                                   "`default`, `warn`, `error`")
            debug_mode = _DEBUG_MODES[debug_mode]
        DEBUG.mode = int(debug_mode)

    patch(DEBUG, "mode", 0)  # what the code sets is undone with the patches
    patch(cuda, "set_sync_debug_mode", set_sync_debug_mode)
    patch(cuda, "get_sync_debug_mode", lambda: DEBUG.mode)

    from .standins import host_memory_bytes

    total = host_memory_bytes()
    patch(cuda, "mem_get_info", lambda device=None: (total, total))
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "memory_cached", "max_memory_cached"):
        if hasattr(cuda, name):
            patch(cuda, name, lambda device=None: 0)
    patch(cuda, "memory_stats", lambda device=None: {})
    patch(cuda, "memory_summary", lambda device=None, abbreviated=False:
          "CPU stand-in (syncfree predict mode): no CUDA memory statistics\n")
    if hasattr(cuda, "memory_snapshot"):
        patch(cuda, "memory_snapshot", lambda *args, **kwargs: [])
    for name in ("reset_peak_memory_stats", "reset_max_memory_allocated",
                 "reset_max_memory_cached", "reset_accumulated_memory_stats", "empty_cache",
                 "ipc_collect", "init", "set_per_process_memory_fraction"):
        if hasattr(cuda, name):
            patch(cuda, name, lambda *args, **kwargs: None)
    if hasattr(cuda, "get_per_process_memory_fraction"):
        patch(cuda, "get_per_process_memory_fraction", lambda device=None: 1.0)

    generator = torch.random.default_generator

    def manual_seed(seed: int) -> None:
        generator.manual_seed(int(seed))

    def seed() -> None:
        generator.seed()

    patch(cuda, "manual_seed", manual_seed)
    patch(cuda, "manual_seed_all", manual_seed)
    patch(cuda, "seed", seed)
    patch(cuda, "seed_all", seed)
    patch(cuda, "initial_seed", generator.initial_seed)
    # torch.Generator(device="cuda"): the CPU build raises "Cannot get CUDA generator
    # without ATen_cuda library" (aten/src/ATen/Context.h, getDefaultGenerator).
    patch(torch, "Generator", _generator_type(torch))

    nvtx = getattr(cuda, "nvtx", None)
    if nvtx is not None:
        patch(nvtx, "range_push", lambda msg: 0)
        patch(nvtx, "range_pop", lambda: 0)
        patch(nvtx, "mark", lambda msg: None)
        patch(nvtx, "range_start", lambda msg: 0)
        patch(nvtx, "range_end", lambda range_id: None)
        patch(nvtx, "range", _nvtx_range)

    # torch/amp/autocast_mode.py: `autocast` sets the autocast state of its device type
    # in __enter__ and restores it in __exit__; torch.cuda.amp.autocast and
    # torch.autocast are that class (or a subclass calling it), so its two methods are
    # where every CUDA autocast region starts and ends.
    autocast = torch.amp.autocast_mode.autocast
    own_enter, own_exit = autocast.__enter__, autocast.__exit__

    cpu_state, set_cpu_state = _cpu_autocast_state(torch)

    def enter(region: Any) -> Any:
        result = own_enter(region)
        if getattr(region, "device", None) == "cuda" and not torch.jit.is_scripting():
            region._syncfree_cpu_autocast = cpu_state()
            set_cpu_state(bool(region._enabled), region.fast_dtype)
        return result

    def exit_(region: Any, *exc: Any) -> Any:
        saved = region.__dict__.pop("_syncfree_cpu_autocast", None)
        if saved is not None:
            set_cpu_state(*saved)
        return own_exit(region, *exc)

    patch(autocast, "__enter__", enter)
    patch(autocast, "__exit__", exit_)


def _generator_type(torch: Any) -> type:
    """A stand-in for ``torch.Generator``: ``torch.Generator(device="cuda")`` makes a CPU
    generator that answers ``device`` as ``cuda:0``, as the generator of the virtual device
    (virtual CUDA tensors draw from the CPU build's kernels, which take a CPU generator:
    ``torch.randn(3, device="cuda", generator=g)``, ``randperm``, ``normal_`` run as on a
    GPU). Any other device gets torch's own generator. Every generator, made before the
    session or not, is an instance (``isinstance(g, torch.Generator)``), as the metaclass
    asks torch's class."""
    real = torch._C.Generator

    class GeneratorType(type(real)):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, real)

        def __subclasscheck__(cls, other: type) -> bool:
            return issubclass(other, real)

    class Generator(real, metaclass=GeneratorType):
        __doc__ = real.__doc__

        def __new__(cls, device: Any = "cpu") -> Any:
            from .registry import is_cuda_device

            if not is_cuda_device(device):
                return real(device)
            return super().__new__(cls, "cpu")

        def __init__(self, device: Any = "cpu") -> None:
            pass

        @property
        def device(self) -> Any:
            return torch.device("cuda", 0)

        def __reduce__(self) -> Any:
            return (Generator, ("cuda",), self.get_state())

        def __setstate__(self, state: Any) -> None:
            self.set_state(state)

        def __repr__(self) -> str:
            return "<torch.Generator (syncfree predict stand-in, cuda:0)>"

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"
    return Generator


def _cpu_autocast_state(torch: Any) -> tuple[Any, Any]:
    """Read and set CPU autocast's (enabled, dtype): the device-type functions of torch >=
    2.4, else the CPU-specific ones they replaced."""
    if hasattr(torch, "get_autocast_dtype"):
        def state() -> tuple[bool, Any]:
            return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")

        def set_state(enabled: bool, dtype: Any) -> None:
            torch.set_autocast_enabled("cpu", enabled)
            torch.set_autocast_dtype("cpu", dtype)
    else:  # torch < 2.4
        def state() -> tuple[bool, Any]:
            return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()

        def set_state(enabled: bool, dtype: Any) -> None:
            torch.set_autocast_cpu_enabled(enabled)
            torch.set_autocast_cpu_dtype(dtype)
    return state, set_state


def react_to_sync(kind: str, frame: Any) -> None:
    """What torch's debug mode, as the code set it, does at a sync on a GPU."""
    mode = DEBUG.mode
    if not mode or kind in _NOT_SEEN_BY_DEBUG_MODE:
        return
    if mode >= 2:
        raise RuntimeError(SYNC_MESSAGE)
    if frame is None:
        warnings.warn(SYNC_MESSAGE, UserWarning, stacklevel=2)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(SYNC_MESSAGE, UserWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=module_globals.get("__name__"),
                           registry=module_globals.setdefault("__warningregistry__", {}),
                           module_globals=module_globals)


@contextlib.contextmanager
def _nvtx_range(msg: str, *args: Any, **kwargs: Any):
    yield

