"""Predict mode's patches: what a ``TorchFunctionMode`` cannot see, replaced for the
session only and restored to the very same objects on every exit path.

``torch.cuda.*`` and ``torch.accelerator.*`` device queries and streams/events (they answer
as one GPU, in the threads that run a session), the legacy CUDA tensor types,
``torch.load``/``torch.save`` (checkpoints.py), ``torch.compile`` (compiles.py), the
backward pass's engine and hooks (autograd.py),
``torch._C._group_tensors_by_device_and_dtype`` (so that torch's foreach helpers group
virtual tensors under the CUDA device, as on a GPU), the DataLoader's pin-memory function
(its pinning thread has no mode), the fast-path checks of nn.TransformerEncoder and
nn.MultiheadAttention, cuDNN's weight check, the rest of ``torch.cuda`` (cuda_api.py),
``torch.distributed`` (distributed.py) and TorchScript's calls (torchscript.py).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..presence import cuda_present
from . import checkpoints, claims, compiles, cuda_api, here
from .here import ANSWERS, Session, per_thread, predict_mode_here, user_frame
from .mode import new_predict_mode
from .registry import is_cuda_device
from .standins import (
    _DEVICE_PROPERTIES,
    LEGACY_TYPE_NAMES,
    CudaDeviceContext,
    legacy_cuda_type,
    stream_context,
)

if TYPE_CHECKING:
    from .registry import VirtualCudaRegistry
    from .standins import StreamStandIn


class Patches:
    """Attribute replacements for one session, undone in reverse order.

    Each entry is saved before its attribute is set and dropped only after it has been
    put back, and putting one back twice is harmless: `restore` can be interrupted and
    run again (undo.py) without leaving a stand-in behind or losing an original.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []
        # Replacements entered in TorchScript's table of builtins (``_script_builtin``).
        self._builtins: list[Any] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        existed = name in vars(owner)
        self._saved.append((owner, name, existed, vars(owner).get(name)))
        if type(value) is types.FunctionType and type(owner) is types.ModuleType \
                and owner.__name__ in _COMPILER_ASKS:
            value = _real_for_compiler(value, getattr(owner, name, None))
        op = _script_builtin(getattr(owner, name, None))
        if op is not None:
            # torch.jit.script compiles a call of a torch builtin as its op, found by the
            # function's id (torch/jit/_builtins.py); a Python stand-in it would try to
            # compile from source, and fail. Put back with the original.
            self._builtins.append(value)
            _script_builtins()[id(value)] = op
        setattr(owner, name, value)

    def original(self, owner: Any, name: str) -> Any:
        """What ``owner.name`` was before this session replaced it (else what it is)."""
        for saved_owner, saved_name, existed, old in self._saved:
            if saved_owner is owner and saved_name == name:
                return old if existed else getattr(owner, name, None)
        return getattr(owner, name, None)

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """The originals in place for a while; the patches go back in after (compiles.py:
        torch._dynamo is imported in between, as it records torch's functions)."""
        current = []
        for owner, name, existed, old in reversed(self._saved):
            current.append((owner, name, name in vars(owner), vars(owner).get(name)))
            if existed:
                setattr(owner, name, old)
            elif name in vars(owner):
                delattr(owner, name)
        try:
            yield
        finally:
            for owner, name, present, value in reversed(current):
                if present:
                    setattr(owner, name, value)
                elif name in vars(owner):
                    delattr(owner, name)

    def restore(self) -> None:
        saved = self._saved
        while saved:
            owner, name, existed, old = saved[-1]
            if existed:
                setattr(owner, name, old)
            elif name in vars(owner):
                delattr(owner, name)
            saved.pop()
        builtins = self._builtins
        while builtins:
            _script_builtins().pop(id(builtins[-1]), None)  # while it lives: ids are reused
            builtins.pop()


def _script_builtins() -> dict[int, str]:
    """TorchScript's table of builtins, by function id (built on first use)."""
    from torch.jit import _builtins

    return _builtins._get_builtin_table()


def _script_builtin(function: Any) -> str | None:
    """The TorchScript op ``function`` compiles to when it is a torch builtin, else None."""
    if function is None or "torch.jit._builtins" not in sys.modules:
        return None
    return _script_builtins().get(id(function))


# Modules whose stand-ins torch's compiler asks while it compiles (dynamo saves the CUDA RNG
# state and asks for the current stream, fake tensors and inductor ask is_available and the
# device properties).
_COMPILER_ASKS = frozenset({"torch.cuda", "torch.accelerator"})


def _real_for_compiler(stand_in: Callable[..., Any], real: Any) -> Callable[..., Any]:
    """``stand_in``, but the real function for torch's compiler while it compiles code that
    predict mode stepped aside for (compiles.py): compiling CPU code sees a CPU machine, and
    the compiled code itself still sees the stand-ins."""
    # pytest --syncfree-cuda answers as a GPU machine for the whole run (pytest_cuda.py)
    real = getattr(real, "_syncfree_real", real)
    if not callable(real):
        return stand_in

    @functools.wraps(stand_in)
    def stand_in_or_real(*args: Any, **kwargs: Any) -> Any:
        if compiles.compiling_for_real() and compiles.asked_by_compiler(sys._getframe(1)):
            return real(*args, **kwargs)
        return stand_in(*args, **kwargs)

    return stand_in_or_real


def install(session: Session) -> None:
    """Install the patches for ``session`` (the first session in: claims.py), each undone
    by ``session._patches.restore``."""
    import torch
    import torch.serialization
    import torch.utils.data._utils.pin_memory as pin_memory_module

    cuda = torch.cuda
    patch = session._patches.replace
    compiles.prepare_dynamo(session)  # before anything is patched

    def synchronize(device: Any = None) -> None:
        session.record("explicit", user_frame())

    def current_stream(device: Any = None) -> StreamStandIn:
        return session._default_stream

    # Device queries answer for the stand-in in the cell's thread only: a thread the
    # cell did not run in (a background worker, another cell's thread) has no
    # stand-in tensors (function modes are per thread) and gets the real answers.
    patch(cuda, "is_available", per_thread(lambda: True, cuda.is_available))
    patch(cuda, "device_count", per_thread(lambda: 1, cuda.device_count))
    patch(cuda, "current_device", lambda: 0)
    patch(cuda, "set_device", lambda device: None)
    patch(cuda, "device", CudaDeviceContext)
    patch(cuda, "device_of", CudaDeviceContext)
    patch(cuda, "synchronize", synchronize)
    patch(cuda, "current_stream", current_stream)
    patch(cuda, "default_stream", current_stream)
    patch(cuda, "set_stream", lambda stream: None)
    patch(cuda, "stream", stream_context)
    patch(cuda, "Event", session.event_type)
    patch(cuda, "Stream", session.stream_type)
    patch(cuda, "get_device_name", lambda device=None: "CPU stand-in (syncfree predict mode)")
    # Lets torch.autocast('cuda', dtype=torch.bfloat16) enter as on a current GPU.
    patch(cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    patch(cuda, "reset_peak_memory_stats", lambda device=None: None)
    patch(cuda, "is_current_stream_capturing", lambda: False)
    # Predictions model the measured GPU (an H200, compute capability 9.0).
    patch(cuda, "get_device_capability", lambda device=None: (9, 0))
    patch(cuda, "get_device_properties", lambda device=None: _DEVICE_PROPERTIES)
    # Virtual CUDA tensors draw from the CPU generator: its state is the CUDA state
    # (torch.utils.checkpoint and torch.random.fork_rng save and restore it).
    patch(cuda, "get_rng_state", lambda device="cuda": torch.get_rng_state())
    patch(cuda, "set_rng_state",
          lambda new_state, device="cuda": torch.set_rng_state(new_state))
    patch(cuda, "get_rng_state_all", lambda: [torch.get_rng_state()])
    patch(cuda, "set_rng_state_all", lambda new_states: torch.set_rng_state(new_states[0]))
    for name in LEGACY_TYPE_NAMES:
        if hasattr(cuda, name):
            patch(cuda, name, legacy_cuda_type(session, name))
    # The debug mode, autocast, memory statistics, seeding, NVTX (cuda_api.py).
    cuda_api.install(session, patch)

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        # torch >= 2.6 tutorials pick the device with torch.accelerator.
        patch(accelerator, "is_available",
              per_thread(lambda: True, accelerator.is_available))
        patch(accelerator, "current_accelerator",
              per_thread(lambda check_available=False: torch.device("cuda"),
                               accelerator.current_accelerator))
        patch(accelerator, "device_count",
              per_thread(lambda: 1, accelerator.device_count))
        for name in ("current_device_index", "current_device_idx"):
            if hasattr(accelerator, name):
                patch(accelerator, name, lambda: 0)
        for name in ("set_device_index", "set_device_idx"):
            if hasattr(accelerator, name):
                patch(accelerator, name, lambda device: None)
        patch(accelerator, "synchronize", synchronize)
        if hasattr(accelerator, "current_stream"):
            patch(accelerator, "current_stream", current_stream)

    patch(torch, "load", checkpoints.load_wrapper(session, torch.load))
    # nn.TransformerEncoder(Layer) and nn.MultiheadAttention take their fast path
    # (nested tensors for padding masks, fused kernels) only when no argument
    # has_torch_function, which any active mode answers True: on a GPU no mode runs.
    patch(torch.overrides, "has_torch_function",
          _fast_path_has_torch_function(torch.overrides.has_torch_function))
    # nn.RNN/LSTM/GRU's flatten_parameters asks cuDNN about each weight; for a virtual
    # CUDA weight the CPU build warns "PyTorch was compiled without cuDNN" (and answers
    # False). torch/backends/cudnn/__init__.py, is_acceptable; rnn.py looks it up per call.
    import torch.backends.cudnn as cudnn

    patch(cudnn, "is_acceptable", _cudnn_wrapper(session, cudnn.is_acceptable))
    # torch.save of virtual CUDA tensors: tagged cuda:0, one copy per storage.
    checkpoints.install_saving(session, patch)
    # torch.compile'd code: compiled for real, or run eagerly and noted (compiles.py).
    compiles.install(session, patch)
    # torch/utils/_foreach_utils.py looks this up on torch._C at each call and then
    # moves scalars to the device keys it returns (clip_grad_norm_, optimizers).
    patch(torch._C, "_group_tensors_by_device_and_dtype",
          _grouping_wrapper(session, torch._C._group_tensors_by_device_and_dtype))
    # The DataLoader's pinning thread (torch/utils/data/_utils/pin_memory.py) looks
    # the function up in its module at each batch; it runs without our mode.
    patch(pin_memory_module, "pin_memory",
          _pinning_wrapper(session, pin_memory_module.pin_memory))
    # torch.distributed written for NCCL runs on gloo (distributed.py).
    from . import distributed

    distributed.install(session, patch)
    # The backward pass's hooks on the stand-ins, with virtual gradients (autograd.py).
    from . import autograd

    autograd.install(session, patch)
    # Scripted and traced code runs its Python source; TorchScript without one is noted.
    from . import torchscript

    torchscript.install(session, patch)
    # Wrapper subclasses made on the CUDA device are virtual (set on torch.Tensor, above
    # TensorBase's: the restore deletes it).
    patch(torch.Tensor, "_make_wrapper_subclass",
          staticmethod(_wrapper_subclass_maker(session, torch._C.TensorBase._make_wrapper_subclass)))


def _wrapper_subclass_maker(session: Session,
                            original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.Tensor._make_wrapper_subclass`` that marks a wrapper made on a CUDA device.

    A wrapper subclass (torchao's quantized tensors, a user's logging or masked tensor)
    holds its data in inner tensors and has a storage of its own without data, made in
    C++ where no mode marks it, on the device its code names: ``device=inner.device``,
    which for a virtual inner tensor answers ``cuda:0``. On a GPU the wrapper is on the
    device; here it was a host tensor to the session, so an ``.item()`` on it, or on what
    its operations return, was not predicted.
    """

    def make_wrapper_subclass(*args: Any, **kwargs: Any) -> Any:
        wrapper = original(*args, **kwargs)
        device = kwargs.get("device")
        registry = session.registry
        if device is not None and registry is not None and is_cuda_device(device) \
                and here.get_ident() in here.thread_modes:
            registry.mark_cuda(wrapper)
        return wrapper

    return make_wrapper_subclass


def standins_used() -> int:
    """A number that grows whenever code is touched by the stand-ins: a device query answered as
    a GPU machine's, a tensor put on the virtual CUDA device. Code that never grows it ran as it
    runs without syncfree (the pytest plugin says a failure ran on the stand-ins only then)."""
    from .registry import kernel_registry

    return ANSWERS.count + kernel_registry().marked


def _cudnn_wrapper(session: Session, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def is_acceptable(tensor: Any) -> bool:
        import torch

        registry = session.registry
        if registry is not None and issubclass(type(tensor), torch.Tensor):
            with torch._C.DisableTorchFunction():  # called by torch code under our mode
                virtual = registry.is_cuda(tensor)
            if virtual:
                # The CPU kernels run the module: no cuDNN, and nothing to warn about.
                # (On a GPU, flatten_parameters' cuDNN weight copy makes no sync.)
                return False
        return original(tensor)

    return is_acceptable


def _grouping_wrapper(session: Session,
                      original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def group_tensors_by_device_and_dtype(tensorlistlist: Any,
                                          with_indices: bool = False) -> Any:
        import torch

        first = tensorlistlist[0] if tensorlistlist else []
        registry = session.registry
        if registry is None or any(t is None for t in first):
            return original(tensorlistlist, with_indices)
        # Called by torch code under our mode: the registry's untyped_storage() and
        # the .device/.dtype reads below would each go through the mode again.
        with torch._C.DisableTorchFunction():
            return self_grouping(torch, registry, first, tensorlistlist, with_indices)

    def self_grouping(torch: Any, registry: VirtualCudaRegistry, first: Any,
                      tensorlistlist: Any, with_indices: bool) -> Any:
        if not registry.split_inputs(list(first))[0]:
            return original(tensorlistlist, with_indices)
        # Same grouping as the C++ (by the first list's device and dtype; empty lists
        # stay empty, None entries are kept), with virtual tensors under cuda:0 as
        # they would be on a GPU.
        cuda0 = torch.device("cuda", 0)
        groups: dict[Any, tuple[list[list[Any]], list[int]]] = {}
        for i, tensor in enumerate(first):
            device = cuda0 if registry.is_cuda(tensor) else tensor.device
            lists, indices = groups.setdefault(
                (device, tensor.dtype), ([[] for _ in tensorlistlist], []))
            for out, source in zip(lists, tensorlistlist):
                if source:
                    out.append(source[i])
            if with_indices:
                indices.append(i)
        return {key: (lists, indices) for key, (lists, indices) in groups.items()}

    return group_tensors_by_device_and_dtype


def _pinning_wrapper(session: Session,
                     original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def pin_memory(data: Any, device: Any = None) -> Any:
        if (claims._active_session is None or here.get_ident() in here.thread_modes
                or predict_mode_here()):
            return original(data, device)
        # In the DataLoader's pinning thread, which has no mode of its own (modes are
        # per thread): Tensor.pin_memory, its only torch call, needs our stand-in.
        with new_predict_mode(session):
            return original(data, device)

    return pin_memory


def _fast_path_files() -> frozenset[str]:
    import torch.nn.modules.activation as activation
    import torch.nn.modules.transformer as transformer

    return frozenset({activation.__file__, transformer.__file__})


def _fast_path_has_torch_function(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.overrides.has_torch_function`` that, asked by the fast-path checks of
    torch/nn/modules/transformer.py and activation.py (they look it up on the module at
    each call), answers for the arguments alone, as torch's C++ check does without a
    mode (torch/csrc/utils/disable_torch_function.cpp, check_has_torch_function: not an
    exact Tensor and a ``__torch_function__`` other than the disabled one). Every other
    caller (handle_torch_function dispatch, higher-order ops) gets the real answer."""
    import torch

    files = _fast_path_files()
    disabled = torch._C._disabled_torch_function_impl

    def own_torch_function(value: Any) -> bool:
        cls = type(value)
        if cls is torch.Tensor:
            return False
        function = getattr(cls, "__torch_function__", None)  # Parameter's is the disabled one
        return function is not None and getattr(function, "__func__", function) is not disabled

    @functools.wraps(original)
    def has_torch_function(args: Any) -> bool:
        if sys._getframe(1).f_code.co_filename in files:
            return any(own_torch_function(value) for value in args)
        return original(args)

    return has_torch_function


def real_cuda_available() -> bool:
    """``torch.cuda.is_available()`` as the process would answer without predict mode."""
    import torch

    session = claims._active_session
    is_available = (session.real(torch.cuda, "is_available") if session is not None
                    else torch.cuda.is_available)
    # pytest --syncfree-cuda answers as a GPU machine for the whole run (pytest_cuda.py)
    is_available = getattr(is_available, "_syncfree_real", is_available)
    return cuda_present(torch, is_available)  # torch's own through NVML: the runtime's answer spoils forks
