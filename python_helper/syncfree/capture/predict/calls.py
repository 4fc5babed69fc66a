"""What predict mode's handlers do with a torch call: run it on the CPU and mark its fresh results as virtual CUDA
tensors (`call_generic`, asking the measured op table, capture/optable.py, for ops no handler covers), parse a
``.to()``, record a predicted sync at the user's line. Used by the mode (mode.py) and by the handlers
(handlers.py, indexing.py, custom_ops.py); it imports neither.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from .autograd import mark_node
from .here import user_frame
from .registry import call_tensors, collect_tensors, is_cuda_device, tensors_in

_Tensor: Any = None  # torch.Tensor, bound by `bind` when the mode class is built (torch is imported lazily)


def bind(torch: Any) -> None:
    """Called by mode.py as it builds the mode class, with torch imported."""
    global _Tensor
    _Tensor = torch.Tensor


_CUDA = object()  # marker: the call targets the virtual CUDA device


def call_generic(mode: Any, func: Any, args: tuple, kwargs: dict, *, run: Any = None,
                  ask_table: bool = True, unhandled: bool = False) -> Any:
    """Run any torch call on the CPU and mark its fresh results as virtual CUDA tensors.

    Results are virtual when the call names a CUDA device (or is a factory under
    ``torch.set_default_device('cuda')``/``with torch.device('cuda')``), or names no
    device and has a virtual input. In-place and ``out=`` results (their storage is a
    non-virtual input's) keep their device, as on a GPU. ``run`` calls ``func`` some
    other way (custom_ops.py); ``ask_table`` False: the call's syncs are predicted inside
    it, not by the op table. ``unhandled``: a 0-dim CUDA tensor the call reads as a number is predicted here, one
    sync each (`_ScalarReads`): where no handler took the call (mode.py), or its handler predicted only the rest of
    it (histc, one_hot, bincount, repeat_interleave).
    """
    registry = mode.registry
    target: Any = None
    device = kwargs.get("device") if kwargs else None
    if device is None and _default_device_is_cuda() and func in _device_constructors():
        device = "cuda"  # the DeviceContext below us would fill in the CUDA default
    if device is not None:
        if is_cuda_device(device):
            kwargs = dict(kwargs, device="cpu")
            target = _CUDA
        else:
            target = device
    pin = False
    if kwargs and kwargs.get("pin_memory"):
        kwargs = dict(kwargs, pin_memory=False)
        pin = True
    inputs = call_tensors(args, kwargs)
    call = func if run is None else run
    if not inputs and target is None and not pin:
        return call(*args, **kwargs)  # no tensor in, no device named: nothing to mark
    # kept: storages of host inputs, where in-place and out= results stay
    virtual_input, kept = registry.split_inputs(inputs)
    if virtual_input and kept and getattr(func, "__name__", None) in _SAME_DEVICE_OPS:
        _check_same_device(registry, inputs)
    if virtual_input and getattr(func, "__name__", None) in _CUDA_AUTOCAST and _cuda_autocast_on():
        args, kwargs = _autocast_as_cuda(registry, _CUDA_AUTOCAST[func.__name__], args, kwargs)
    syncs = 0
    if virtual_input and ask_table:  # an op no handler covers: the measured table (capture/optable.py)
        syncs = _optable().on_call(mode.session, func, args, kwargs, mode.handlers)
        if syncs:
            record(mode, "library", syncs)
    if unhandled and virtual_input and ask_table and not syncs and _scalar_argument(registry, func, args, kwargs):
        # A 0-dim CUDA tensor passed where the op takes a number (`torch.arange(lengths.max())`, `x.view(n)`,
        # `torch.full(size, t)`, `x.topk(k)`): torch's argument parser reads it with .item() before the op runs, a
        # sync the table measured for a few ops only. Seen as the parser's own aten._local_scalar_dense (not one
        # inside a CPU kernel, which a CUDA kernel may not make: the dispatch mode is off while an op runs).
        reads = _ScalarReads(registry)
        told = mode.session.recorded
        with reads:
            result = call(*args, **kwargs)
        unseen = reads.count - (mode.session.recorded - told)  # less those the handlers of its own calls predicted
        if unseen > 0:
            record(mode, "python_scalar", unseen)
    else:
        result = call(*args, **kwargs)
    if target is _CUDA or (target is None and virtual_input):
        if isinstance(result, _Tensor):
            registry.mark_results((result,), kept)
            if result.requires_grad:
                mark_node(result)  # a backward that syncs on CUDA (autograd.py ENGINE_SYNCS)
        else:
            results: list[Any] = []
            collect_tensors(result, results, 0)
            registry.mark_results(results, kept)
            for out in results:
                if out.requires_grad:
                    mark_node(out)
    if pin:
        for out in tensors_in(result):
            registry.mark_pinned(out)
    return result


def _scalar_argument(registry: Any, func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a virtual CUDA 0-dim tensor is passed as an argument, or inside a list or tuple of them (a size):
    where the op takes a number, torch reads it on the CPU. Not a method's own tensor (``self``). Asked of every
    call with a CUDA input: a look at each argument, nothing more where none is a 0-dim tensor."""
    # The first argument is the op's tensor (its input, `self`, a list of tensors: torch.stack), never read as a
    # number, but a factory's (torch.arange(n), torch.zeros((n, 2))); a 0-dim tensor there is most often the input
    # (torch.clamp(coef, max=1.0) in clip_grad_norm_), and costs the dispatch mode nothing then.
    if isinstance(func, types.BuiltinFunctionType):  # torch.arange, torch._C._nn.pad
        name = func.__name__
        if name.startswith("_foreach_"):
            # Their first argument is a list of tensors; a 0-dim tensor after it is read as a number where the op
            # has no overload that takes it as an operand (lerp, maximum, clamp_min, sub, pow: measured on an H200)
            # and the dispatch mode counts that read; not a list of tensors (their List overloads)
            return any(isinstance(value, _Tensor) and value.dim() == 0 and registry.is_cuda(value)
                       for value in (*args[1:], *kwargs.values()))
        first = 0 if name in _FACTORIES else 1
    elif isinstance(func, (types.MethodDescriptorType, types.WrapperDescriptorType)):  # Tensor.view
        first = 1
    else:
        module = getattr(func, "__module__", None)
        if module in _PYTHON_FUNCTION_MODULES:  # F.*, torch.split, torch.tensordot written in Python
            first = 1
        elif module == "torch._tensor" and getattr(func, "__name__", None) in _PYTHON_TENSOR_METHODS:
            first = 1  # Tensor.split, written in Python: int(split_size) inside it
        else:  # another Python function (Tensor.backward, a user's op): not looked into (nor its arguments)
            return False
    for value in (*args[first:], *kwargs.values()) if kwargs else args[first:]:
        if isinstance(value, _Tensor):
            if value.dim() == 0 and registry.is_cuda(value):
                return True
        elif type(value) is tuple or type(value) is list:
            for item in value:
                if isinstance(item, _Tensor) and item.dim() == 0 and registry.is_cuda(item):
                    return True
    return False


# torch's functions written in Python that read a number argument given as a tensor themselves (int(), .item(): the
# mode is off while a handled call runs, so those reads are seen only by `_ScalarReads`): torch.split, tensordot's
# dims, stft's n_fft; F.* in Python.
_PYTHON_FUNCTION_MODULES = frozenset({"torch.nn.functional", "torch.functional"})
_PYTHON_TENSOR_METHODS = frozenset({"split", "unflatten", "stft", "istft"})
# torch's functions whose first argument is a size or a number (factories).
_FACTORIES = frozenset({"arange", "range", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
                        "linspace", "logspace", "eye", "tril_indices", "triu_indices", "empty_strided", "normal",
                        "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"})


class _ScalarReads:
    """A dispatch mode, for one call, counting the ``aten._local_scalar_dense`` torch dispatches at the call's top
    level on a virtual CUDA tensor (the argument parser's read of a number, or an ``int()`` in torch's own Python),
    not inside another op (a CPU kernel's, which the CUDA kernel may not make)."""

    _cls: Any = None

    def __init__(self, registry: Any) -> None:
        self.count = 0
        if _ScalarReads._cls is None:
            _ScalarReads._cls = _reads_mode_class()
        self._mode = _ScalarReads._cls(self, registry)

    def __enter__(self) -> _ScalarReads:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


def _reads_mode_class() -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    local_scalar = torch.ops.aten._local_scalar_dense.default

    class ReadsMode(TorchDispatchMode):
        def __init__(self, reads: _ScalarReads, registry: Any) -> None:
            super().__init__()
            self.reads = reads
            self.registry = registry

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
            if func is local_scalar and args and self.registry.is_cuda(args[0]):
                self.reads.count += 1
            return func(*args, **(kwargs or {}))

    return ReadsMode


# Ops whose CUDA kernels take no CPU operand but a 0-dim one (a CPU scalar): elementwise
# arithmetic and comparisons (TensorIteratorBase::compute_types, check_all_same_device in
# aten/src/ATen/TensorIterator.cpp), and matrix products and cat, whose wrappers check
# every argument's device (torchgen's check_and_update_common_device). On the CPU stand-ins
# these would run, and a test comparing a CPU tensor with its CUDA copy would fail for
# another reason than on a GPU, or pass where a GPU raises.
_SAME_DEVICE_OPS = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "eq", "ne", "lt", "le", "gt", "ge", "eq_", "ne_", "lt_", "le_", "gt_", "ge_",
    "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__",
    "__mul__", "__rmul__", "__imul__", "__truediv__", "__rtruediv__", "__itruediv__",
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "true_divide",
    "maximum", "minimum", "isclose", "allclose",
    "__matmul__", "__rmatmul__", "matmul", "mm", "mv", "bmm", "dot", "cat", "concat", "stack",
})
_SAME_DEVICE_MESSAGE = ("Expected all tensors to be on the same device, but found at least two "
                        "devices, cuda:0 and cpu!")


# CUDA autocast's policies that CPU autocast lacks (aten/src/ATen/autocast_mode.cpp, the CUDA
# lists): "fp32" ops run in float32 (exp, pow, layer_norm, losses...), "fp32_set_opt_dtype"
# ops (softmax, sum, cumsum...) give float32 when no dtype is asked for, "promote" ops take the
# widest floating type of their arguments. Inside torch.autocast("cuda", float16) the stand-ins
# run CPU autocast (cuda_api.py), which keeps all of these in float16: activations overflowed to
# inf where a GPU has float32 (NaN gradients in an AMP loop), and dot of a float16 and a float32
# tensor raised. Keyed by the Python-level name the mode sees (torch.softmax, F.softmax and
# Tensor.softmax alike; F.cross_entropy, F.interpolate and F.normalize start with such an op).
_FP32, _FP32_UNLESS_DTYPE, _PROMOTE = "fp32", "fp32_set_opt_dtype", "promote"
_CUDA_AUTOCAST = {
    **dict.fromkeys((
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
        "reciprocal", "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus",
        "layer_norm", "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity",
        "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div",
        "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
        "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
        "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
        "cross_entropy", "interpolate", "normalize"), _FP32),
    **dict.fromkeys((
        "prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum", "norm", "vector_norm",
        "matrix_norm", "linalg_vector_norm", "linalg_matrix_norm"), _FP32_UNLESS_DTYPE),
    **dict.fromkeys((
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "linalg_cross", "dot", "vdot",
        "grid_sample", "index_put", "scatter_add", "tensordot"), _PROMOTE),
}

_autocast_enabled: Any = None


def _cuda_autocast_on() -> bool:
    """Whether a ``torch.autocast("cuda")`` region is on in this thread (the stand-ins enter it
    with CPU autocast beside it: cuda_api.py)."""
    global _autocast_enabled
    if _autocast_enabled is None:
        import torch

        try:
            torch.is_autocast_enabled("cuda")
            _autocast_enabled = functools.partial(torch.is_autocast_enabled, "cuda")
        except TypeError:  # torch < 2.4: the CUDA state is the one without an argument
            _autocast_enabled = torch.is_autocast_enabled
    return _autocast_enabled()


def _autocast_as_cuda(registry: Any, policy: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` cast as CUDA autocast casts them for an op of ``policy``: the
    virtual float16/bfloat16 tensors to float32 (to the widest floating type for "promote").
    The casts are virtual tensors, and differentiable, as on a GPU."""
    import torch

    low = (torch.float16, torch.bfloat16)
    if policy == _FP32_UNLESS_DTYPE and kwargs.get("dtype") is not None:
        return args, kwargs
    target = torch.float32
    if policy == _PROMOTE:
        dtypes = {t.dtype for t in call_tensors(args, kwargs) if t.is_floating_point()}
        if len(dtypes) < 2:
            return args, kwargs
        target = torch.float64 if torch.float64 in dtypes else torch.float32

    def cast(value: Any) -> Any:
        if isinstance(value, _Tensor):
            if value.dtype in low and registry.is_cuda(value):
                value = value.to(target)
                registry.mark_cuda(value)
            return value
        if type(value) in (list, tuple):
            return type(value)(cast(item) for item in value)
        return value

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def parse_to(registry: Any, args: tuple, kwargs: dict) -> tuple:
    """``torch._C._nn._parse_to(*args, **kwargs)`` (what ``Tensor.to`` and ``nn.Module.to``
    parse their arguments with) as on a GPU machine: ``(device, dtype, non_blocking,
    memory_format)``.

    Two answers differ from the CPU build's: a bare int device is a CUDA ordinal (``m.to(0)``;
    the CPU build raises "Cannot access accelerator device"), and a virtual tensor argument
    (``m.to(t)``, ``m.to(tensor=t)``) names the CUDA device. It runs past the mode: under it a
    ``device="cuda"`` keyword would be rewritten to the host like a factory's (`call_generic`),
    and ``nn.Module.to(device="cuda")`` left every parameter on the host.
    """
    import torch

    def ordinal(device: Any) -> Any:
        if isinstance(device, int) and not isinstance(device, bool):
            return f"cuda:{device}"
        return device

    args = list(args)
    tensor = kwargs.get("tensor")
    if args:
        if isinstance(args[0], _Tensor):
            tensor = args[0]
        else:
            args[0] = ordinal(args[0])
    if "device" in kwargs:
        kwargs = dict(kwargs, device=ordinal(kwargs["device"]))
    with torch._C.DisableTorchFunction():
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        if isinstance(tensor, _Tensor) and registry.is_cuda(tensor):
            device = torch.device("cuda", 0)
    return device, dtype, non_blocking, memory_format


def handle_parse_to(mode: Any, func: Any, args: tuple, kwargs: dict) -> tuple:
    return parse_to(mode.registry, args, kwargs)


def _check_same_device(registry: Any, inputs: list) -> None:
    for tensor in inputs:
        if not registry.is_cuda(tensor) and tensor.device.type == "cpu" and tensor.dim() > 0:
            raise RuntimeError(_SAME_DEVICE_MESSAGE)


_optable_module: Any = None


def _optable() -> Any:
    global _optable_module
    if _optable_module is None:
        from .. import optable

        _optable_module = optable
    return _optable_module


_device_module: Any = None


def _default_device_is_cuda() -> bool:
    # torch/utils/_device.py: DeviceContext (set_default_device, `with torch.device(..)`)
    # keeps the default device in CURRENT_DEVICE and injects it into factory calls.
    global _device_module
    if _device_module is None:
        import torch.utils._device as device_module

        _device_module = device_module
    current = getattr(_device_module, "CURRENT_DEVICE", None)
    return current is not None and is_cuda_device(current)


def _device_constructors() -> Any:
    import torch.utils._device as device_module

    return device_module._device_constructors()


def virtual(mode: Any, value: Any) -> bool:
    return isinstance(value, _Tensor) and mode.registry.is_cuda(value)  # bound by the mode


def record(mode: Any, kind: str, count: int = 1) -> None:
    mode.session.record(kind, user_frame(), count)
