"""What predict mode's handlers predict, torch call by torch call: host reads
(``item``, ``bool``, ``format``/``print``, ``tolist``, ``numpy``), moves between devices
(``to``/``cuda``/``cpu``/``type``/``copy_``), ops whose output size is read from the
device (``nonzero``, ``unique``, ``masked_select``, ``repeat_interleave``, ``bincount``,
``histc``, ``one_hot``, ``equal``/``allclose``), tensors built from host data, the padding
fast paths of nn.TransformerEncoder and the RNNs, pinning, and the device getters
(``.device``, ``.is_cuda``). Indexing has a module of its own (indexing.py); calls without a
handler go to the measured op table (mode.py, `call_generic`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .autograd import mark_node
from .calls import (
    _default_device_is_cuda,
    _device_constructors,
    call_generic,
    handle_parse_to,
    parse_to,
    record,
    virtual,
)
from .indexing import handle_getitem, handle_index_put, handle_setitem
from .linalg import matrix_exp_syncs
from .registry import call_tensors, is_cuda_device, tensors_in


def _when_virtual(kind: str, count: int = 1) -> Callable[..., Any]:
    """Handler: ``count`` syncs of ``kind`` when the tensor (first argument) is virtual."""

    def handler(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor = args[0] if args else next(iter(kwargs.values()), None)
        if virtual(mode, tensor):
            record(mode, kind, count)
        return call_generic(mode, func, args, kwargs)

    return handler


def _when_any_virtual(kind: str, count: int = 1) -> Callable[..., Any]:
    def handler(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        if any(mode.registry.is_cuda(t) for v in (args, kwargs) for t in tensors_in(v)):
            record(mode, kind, count)
        return call_generic(mode, func, args, kwargs)

    return handler


def _handle_format(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, spec = args[0], (args[1] if len(args) > 1 else kwargs.get("format_spec", ""))
    if virtual(mode, tensor):
        # torch/_tensor.py: a 0-d Tensor formats its item(); others (and subclasses such
        # as Parameter) go through object.__format__, which allows only '' -> str(self).
        if tensor.dim() == 0 and type(tensor) is torch.Tensor:
            record(mode, "format")
        elif spec == "":
            record(mode, "print")
    return func(*args, **kwargs)


def _handle_tolist(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if virtual(mode, args[0]) and _holds_data(args[0]):  # an empty copy makes no sync
        record(mode, "tolist")
    return func(*args, **kwargs)


def _handle_numpy(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    tensor = args[0]
    if virtual(mode, tensor):
        force = kwargs.get("force", args[1] if len(args) > 1 else False)
        if not force:
            # The error torch raises for a CUDA tensor (torch/csrc/utils/tensor_numpy.cpp).
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to "
                "copy the tensor to host memory first.")
        record(mode, "to_host")
    return func(*args, **kwargs)


def _handle_array(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if virtual(mode, args[0]):
        raise TypeError(
            "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to "
            "copy the tensor to host memory first.")
    return func(*args, **kwargs)


def _move(mode: Any, tensor: Any, to_cuda: bool | None, dtype: Any = None,
          non_blocking: bool = False, copy: bool = False, memory_format: Any = None) -> Any:
    """``tensor.to(device, dtype)`` with the virtual device: the shared core of
    ``to``/``cuda``/``cpu``/``type``. ``to_cuda`` None keeps the device."""
    import torch

    registry = mode.registry
    source_virtual = registry.is_cuda(tensor)
    extra = {} if memory_format is None else {"memory_format": memory_format}
    if to_cuda is not None:
        extra["device"] = "cpu"
    moves = to_cuda is not None and to_cuda != source_virtual
    if moves and not non_blocking and _holds_data(tensor):
        record(mode, "to_device" if to_cuda else "to_host")
    # A move between the virtual and the real device copies, as a device copy would.
    result = torch.Tensor.to(tensor, dtype=dtype, non_blocking=non_blocking,
                             copy=copy or moves, **extra)
    if to_cuda or (to_cuda is None and source_virtual):
        registry.mark_cuda(result)
    if moves and result.requires_grad:
        # its backward copies the gradient back across (ToCopyBackward0, blocking): one sync on CUDA
        mark_node(result, copy="to_host" if to_cuda else "to_device")
    return result


def _holds_data(tensor: Any) -> bool:
    """Whether a copy of ``tensor`` between devices moves anything: copy_ returns before
    any device work when there are no elements (aten/src/ATen/native/Copy.cpp,
    copy_impl: ``if (iter.numel() == 0) return self``), so an empty tensor's copy, and
    ``torch.tensor([], device='cuda')`` (a KV cache's lazy start), make no sync."""
    try:
        return tensor.numel() > 0
    except Exception:  # noqa: BLE001 - not a tensor torch can count: assume data
        return True


def _handle_to(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, rest = args[0], list(args[1:])
    kwargs = dict(kwargs)
    copy = kwargs.pop("copy", False)
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        device = "cuda" if mode.registry.is_cuda(other) else other.device
        rest = [device, other.dtype, *rest]
    if len(rest) == 4 and isinstance(rest[3], bool):  # to(device, dtype, non_blocking, copy)
        copy = rest.pop()
    try:
        device, dtype, non_blocking, memory_format = parse_to(mode.registry, tuple(rest), kwargs)
    except (TypeError, RuntimeError):
        # Arguments torch itself rejects: let torch raise its own error.
        return call_generic(mode, func, args, dict(kwargs, copy=copy) if copy else kwargs)
    if device is not None and device.type not in ("cuda", "cpu"):
        return call_generic(mode, func, args, dict(kwargs, copy=copy) if copy else kwargs)
    to_cuda = None if device is None else device.type == "cuda"
    return _move(mode, tensor, to_cuda, dtype, non_blocking, copy, memory_format)


def _handle_cuda(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    def bind(device: Any = None, non_blocking: bool = False, memory_format: Any = None) -> tuple:
        return non_blocking, memory_format

    non_blocking, memory_format = bind(*args[1:], **kwargs)
    if mode.registry.is_cuda(args[0]):
        return args[0]  # as on a GPU: already there, the same tensor
    return _move(mode, args[0], True, non_blocking=non_blocking, memory_format=memory_format)


def _handle_cpu(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if not mode.registry.is_cuda(args[0]):
        return func(*args, **kwargs)
    memory_format = kwargs.get("memory_format", args[1] if len(args) > 1 else None)
    return _move(mode, args[0], False, memory_format=memory_format)


def _legacy_type_target(spec: Any) -> tuple[bool, Any] | None:
    """(is_cuda, dtype) named by a legacy tensor type or its name, None otherwise."""
    import torch

    if isinstance(spec, str):
        name = spec.replace("torch.cuda.", "torch.", 1)
        base = getattr(torch, name[len("torch."):], None) if name.startswith("torch.") else None
        dtype = getattr(base, "dtype", None)
        return None if dtype is None else (spec.startswith("torch.cuda."), dtype)
    if isinstance(getattr(spec, "dtype", None), torch.dtype) and hasattr(spec, "is_cuda"):
        return bool(spec.is_cuda), spec.dtype
    return None


def _handle_type(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    def bind(dtype: Any = None, non_blocking: bool = False, **extra: Any) -> tuple:
        return dtype, non_blocking

    tensor = args[0]
    spec, non_blocking = bind(*args[1:], **kwargs)
    if spec is None:
        name = func(tensor)
        if mode.registry.is_cuda(tensor) and name.startswith("torch.") and ".cuda." not in name:
            name = "torch.cuda." + name[len("torch."):]
        return name
    target = _legacy_type_target(spec)
    if target is None:  # a torch.dtype: same device
        return call_generic(mode, func, args, kwargs)
    to_cuda, dtype = target
    return _move(mode, tensor, to_cuda, dtype, non_blocking)


def _handle_copy_(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    destination, source = args[0], (args[1] if len(args) > 1 else kwargs.get("src"))
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    dst_virtual, src_virtual = mode.registry.is_cuda(destination), virtual(mode, source)
    if dst_virtual != src_virtual and not non_blocking and _holds_data(destination):
        record(mode, "to_host" if src_virtual else "to_device")
    result = func(*args, **kwargs)
    if dst_virtual != src_virtual and getattr(destination, "requires_grad", False):
        # its backward copies the gradient back to the source's device (CopyBackwards, blocking)
        mark_node(destination, copy="to_device" if src_virtual else "to_host")
    return result


def _handle_aten_to_copy(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``torch.ops.aten._to_copy(x, device=...)``, what ``x.to(device)`` dispatches to: its
    arguments after ``self`` are keyword-only (native_functions.yaml)."""
    tensor = args[0] if args else kwargs.get("self")
    device = kwargs.get("device")
    if device is not None and not kwargs.get("non_blocking", False) and _holds_data(tensor):
        to_cuda = is_cuda_device(device)
        if to_cuda != mode.registry.is_cuda(tensor):
            record(mode, "to_device" if to_cuda else "to_host")
    return call_generic(mode, func, args, kwargs)


def _aten_handlers() -> dict[Any, Callable[..., Any]]:
    """Handlers for aten operators called directly (``torch.ops.aten.X``): the ops behind the
    Python calls whose syncs a handler predicts, under the packet and each overload. The op
    table knows most ops by their Python name; these it has no measurement for (it said they
    "may sync"), and each is a sync on a GPU: ``_local_scalar_dense`` is what ``.item()``
    and ``float(t)`` run, ``_to_copy`` and ``copy_`` what a copy between devices runs."""
    import torch

    aten = torch.ops.aten
    table: dict[Any, Callable[..., Any]] = {}
    for packet, handler in ((aten._local_scalar_dense, _when_virtual("item")),
                            (aten.item, _when_virtual("item")),
                            (aten._to_copy, _handle_aten_to_copy),
                            (aten.copy_, _handle_copy_)):
        table[packet] = handler
        for overload in packet.overloads():
            table[getattr(packet, overload)] = handler
    return table


def _handle_deepcopy(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.__deepcopy__(self, memo)``: the copy is where ``self`` is. Only ``self`` is
    looked at: the memo holds every object copied so far (user objects among them)."""
    import torch

    tensor = args[0]
    result = func(*args, **kwargs)
    if virtual(mode, tensor) and issubclass(type(result), torch.Tensor):
        mode.registry.mark_cuda(result)
        grad = result.grad  # copied inside torch's __deepcopy__, where our mode is popped
        if grad is not None and virtual(mode, tensor.grad):
            mode.registry.mark_cuda(grad)
    return result


def _handle_packed_sequence(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``torch._pack_padded_sequence``/``_pad_packed_sequence``: the data (padded output)
    is on the input's device, ``batch_sizes`` (``lengths``) stay on the host, as on a GPU
    (aten/src/ATen/native/PackedSequence.cpp; torch/nn/utils/rnn.py rejects a PackedSequence
    whose batch_sizes are not on the CPU). Neither reads the device: no sync."""
    import torch

    if func is torch._pack_padded_sequence:
        lengths = args[1] if len(args) > 1 else kwargs.get("lengths")
        if virtual(mode, lengths):
            # The error a GPU run gets (aten/src/ATen/native/PackedSequence.cpp,
            # checkLongTensor): the lengths must be on the host.
            raise RuntimeError("'lengths' argument should be a 1D CPU int64 tensor, but got "
                               f"{lengths.dim()}D cuda:0 {_type_name(lengths)} tensor")
    result = func(*args, **kwargs)
    data = args[0] if args else next(iter(kwargs.values()), None)
    if virtual(mode, data):
        mode.registry.mark_cuda(result[0])
    return result


def _type_name(tensor: Any) -> str:
    import torch

    return torch.Tensor.type(tensor)[len("torch."):].replace("Tensor", "")


def _from_torch_source(syncs: Callable[[tuple, dict], int]) -> Callable[..., Any]:
    """Handler for an op without a measurement of its own (nn.TransformerEncoder's padding
    fast path, cuDNN's RNNs), with its syncs on CUDA as torch's source makes them
    (UNMEASURED_RULES; checked by tests/gpu/test_workloads_gpu.py): results on the
    input's device."""

    def handler(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        if any(virtual(mode, t) for t in call_tensors(args, kwargs)):
            n = syncs(args, kwargs)
            if n:
                record(mode, "library", n)
            result = func(*args, **kwargs)
            for out in tensors_in(result):
                mode.registry.mark_cuda(out)
                if out.requires_grad:
                    mark_node(out, inputs=args)  # matrix_exp's backward syncs as its forward does
            return result
        return func(*args, **kwargs)

    return handler


def _from_mask_syncs(args: tuple, kwargs: dict) -> int:
    # aten/src/ATen/native/nested/NestedTensorTransformerFunctions.cpp,
    # NestedTensor_nested_tensor_from_mask: with mask_check the sizes check (an equal()),
    # then the sizes copied to the host (.to(kCPU)). nn.TransformerEncoder passes
    # mask_check=False: its own check is _nested_tensor_from_mask_left_aligned's equal().
    mask_check = args[2] if len(args) > 2 else kwargs.get("mask_check", True)
    return 1 + (1 if mask_check else 0)


def _nested_attention_syncs(query: Any, key: Any, value: Any, embed_dim: int, num_heads: int,
                            need_weights: bool, mask: Any) -> int:
    """The syncs of ``_native_multi_head_attention`` on CUDA (also the attention inside
    ``_transformer_encoder_layer_fwd``, aten/src/ATen/native/transformers/transformer.cpp).

    native_multi_head_attention_cuda (transformers/cuda/attention.cu) sends self-attention
    (q is k is v) without weights or a mask, with a head dim that is a multiple of 8 and
    no sequence shorter than 2 (check_for_seq_len_1_nested_tensor), through
    scaled_dot_product_attention when flash or memory-efficient attention takes it
    (sdp_utils.cpp: flash for float16/bfloat16, memory-efficient also for float32, each
    unless switched off in torch.backends.cuda). For a nested query that is
    sdpa_nested_preprocessing (nested/cuda/NestedTensorTransformerUtils.cpp), which copies
    the cumulative sequence lengths of q and of k/v to the device, blocking: 2 syncs
    (cumulative_and_max_seq_len_nnz). A dense query, or the other path (projection,
    masked softmax on the device, nested metadata copied non_blocking): 0. The H100
    (torch 2.11) counted 9 per forward of a 3-layer TransformerEncoder with a padding
    mask: 1 (left-aligned check) + 1 (from the mask) + 3 x 2 + 1 (back to padded)."""
    import torch

    if not getattr(query, "is_nested", False) or need_weights or mask is not None:
        return 0
    if not (query is key and key is value) or num_heads <= 0 or (embed_dim // num_heads) % 8:
        return 0
    cuda = torch.backends.cuda
    if query.dtype in (torch.float16, torch.bfloat16):
        fused = cuda.flash_sdp_enabled() or cuda.mem_efficient_sdp_enabled()
    else:
        fused = query.dtype == torch.float32 and cuda.mem_efficient_sdp_enabled()
    try:
        lengths = query._nested_tensor_size()  # [batch, ndim] on the host: (seq_len, embed_dim)
    except (RuntimeError, NotImplementedError, AttributeError):
        return 0  # a jagged-layout nested tensor: not the C++ fast path's strided kind
    if lengths.numel() == 0 or bool((lengths[:, 0] <= 1).any()):
        return 0
    if not fused:
        # Measured, not derived from the source: on the H100 (torch 2.11) a float64 nested
        # query here made 1 sync, a float32 one with memory-efficient attention switched
        # off none, as those turned away before (head dim 6, a sequence of length 1)
        # (tests/test_predict.py: test_nested_attention_rules_on_a_gpu and
        # test_nested_attention_off_switch_on_a_gpu).
        return 1 if query.dtype == torch.float64 else 0
    return 2


def _multi_head_attention_syncs(args: tuple, kwargs: dict) -> int:
    # _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight,
    # qkv_bias, proj_weight, proj_bias, mask=None, need_weights=True, ...)
    names = ("query", "key", "value", "embed_dim", "num_head", "qkv_weight", "qkv_bias",
             "proj_weight", "proj_bias", "mask", "need_weights")
    bound = {"mask": None, "need_weights": True, **dict(zip(names, args)), **kwargs}
    return _nested_attention_syncs(bound["query"], bound["key"], bound["value"],
                                   bound["embed_dim"], bound["num_head"],
                                   bound["need_weights"], bound["mask"])


def _encoder_layer_syncs(args: tuple, kwargs: dict) -> int:
    # _transformer_encoder_layer_fwd(src, embed_dim, num_heads, ..., mask=None, mask_type=None):
    # transformer_encoder_layer_forward returns early for an empty input, else runs
    # _native_multi_head_attention(x, x, x, ..., mask, need_weights=False) on src (or on
    # norm(src) with norm_first, which has src's nested sizes).
    names = ("src", "embed_dim", "num_heads")
    bound = {**dict(zip(names, args)), **kwargs}
    src = bound["src"]
    mask = args[18] if len(args) > 18 else kwargs.get("mask")
    if not getattr(src, "is_nested", False) or src.numel() == 0:
        return 0
    return _nested_attention_syncs(src, src, src, bound["embed_dim"], bound["num_heads"],
                                   False, mask)


def _handle_pin_memory(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor = args[0]
    if mode.registry.is_cuda(tensor):
        # The error torch raises for a CUDA tensor (aten/src/ATen/native/Memory.cpp).
        cuda_type = "torch.cuda." + torch.Tensor.type(tensor)[len("torch."):]
        raise RuntimeError(f"cannot pin '{cuda_type}' only dense CPU tensors can be pinned")
    if mode.registry.is_pinned(tensor):
        return tensor  # as torch does for a tensor that is pinned already
    pinned = tensor.clone(memory_format=torch.contiguous_format)  # a page-locked copy
    mode.registry.mark_pinned(pinned)
    return pinned


def _handle_is_pinned(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return mode.registry.is_pinned(args[0])


def _handle_record_stream(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return None


def _handle_register_hook(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # A gradient hook on a virtual tensor gets a virtual gradient, as on a GPU (autograd.py).
    tensor = args[0]
    hook = args[1] if len(args) > 1 else kwargs.pop("hook", None)
    if virtual(mode, tensor) and callable(hook):
        from .autograd import hook_on_virtual_gradient

        hook = hook_on_virtual_gradient(mode.session, hook)
    return func(tensor, hook, *args[2:], **kwargs)


def _handle_get_device(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return 0 if mode.registry.is_cuda(args[0]) else func(*args, **kwargs)


def _python_data_syncs(mode: Any, data: Any) -> int:
    """``torch.tensor([t0, t1])`` reads each CUDA element with item()."""
    import torch

    if isinstance(data, torch.Tensor):
        return 0
    return sum(1 for t in tensors_in(data) if mode.registry.is_cuda(t))


def _handle_tensor_from_data(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``torch.tensor/as_tensor/asarray``: building a CUDA tensor from host data syncs."""
    import torch

    if func is torch.as_tensor and len(args) > 1:  # as_tensor(data, dtype, device)
        kwargs = dict(kwargs, **dict(zip(("dtype", "device"), args[1:3])))
        args = args[:1]
    data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
    device = kwargs.get("device")
    if device is None and not isinstance(data, torch.Tensor) and _default_device_is_cuda() \
            and func in _device_constructors():
        device = "cuda"  # set_default_device("cuda") (DeviceContext below the mode) would build it on CUDA
    reads = _python_data_syncs(mode, data)
    if reads:
        record(mode, "python_scalar", reads)
    data_virtual = virtual(mode, data)
    if device is None:
        if isinstance(data, torch.Tensor):
            return call_generic(mode, func, args, kwargs)  # keeps the data's device
        # Host data and no device: a CPU tensor even when the elements were on CUDA.
        return func(*args, **kwargs)
    kind = None
    if is_cuda_device(device):
        if not isinstance(data, torch.Tensor):
            kind = "tensor_from_python"
        elif not data_virtual:
            kind = "to_device"
    elif data_virtual:
        kind = "to_host"
    result = call_generic(mode, func, args, kwargs)
    if kind is not None and _holds_data(result):  # torch.tensor([], device='cuda'): no copy
        record(mode, kind)
    return result


def _handle_new_tensor(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, data = args[0], (args[1] if len(args) > 1 else kwargs.get("data"))
    device = kwargs.get("device")
    to_cuda = is_cuda_device(device) if device is not None else mode.registry.is_cuda(tensor)
    reads = _python_data_syncs(mode, data)
    if reads:
        record(mode, "python_scalar", reads)
    kind = None
    if to_cuda:
        if isinstance(data, torch.Tensor):
            if not mode.registry.is_cuda(data):
                kind = "to_device"
        else:
            kind = "tensor_from_python"
    if device is not None:
        result = call_generic(mode, func, args, kwargs)
    else:
        result = func(*args, **kwargs)
        if to_cuda:
            mode.registry.mark_cuda(result)
    if kind is not None and _holds_data(result):
        record(mode, kind)
    return result


def _handle_where(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if len(args) + len(kwargs) == 1 and virtual(mode, (args or tuple(kwargs.values()))[0]):
        record(mode, "nonzero")  # torch.where(cond) is nonzero(cond, as_tuple=True)
    return call_generic(mode, func, args, kwargs)


def _handle_repeat_interleave(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # repeat_interleave(repeats) or repeat_interleave(input, repeats, dim, *, output_size)
    if len(args) == 1 and "repeats" not in kwargs:
        repeats = args[0]
    else:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    output_size = kwargs.get("output_size")
    if output_size is None and virtual(mode, repeats):
        record(mode, "repeat_interleave", 2)  # measured: the output size and a check
    # an output_size given as a CUDA tensor is read as a number (calls.py, `_ScalarReads`)
    return call_generic(mode, func, args, kwargs, unhandled=True)


def _handle_histc(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    names = ("input", "bins", "min", "max")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    low, high = bound.get("min", 0), bound.get("max", 0)
    numbers = not isinstance(low, _tensor_type()) and not isinstance(high, _tensor_type())
    if virtual(mode, bound.get("input")) and numbers and low == high:
        record(mode, "histc", 2)  # the range is read from the data: min and max
    # min and max given as CUDA tensors are read as numbers, one sync each (`_ScalarReads`)
    return call_generic(mode, func, args, kwargs, unhandled=True)


def _handle_one_hot(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    num_classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
    if isinstance(num_classes, int) and num_classes == -1 and virtual(mode, args[0] if args else kwargs.get("tensor")):
        record(mode, "one_hot")
    # num_classes given as a CUDA tensor (`i.max() + 1`) is read as a number (`_ScalarReads`)
    return call_generic(mode, func, args, kwargs, unhandled=True)


def _handle_bincount(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # bincount reads the input's min and max to size its output: 2 syncs; 1 for uint8 (no min check), none for an
    # empty input (zeros at once: aten/src/ATen/native/cuda/SummaryOps.cu); a minlength given as a CUDA tensor is read
    # as a number too (`_ScalarReads`).
    tensor = args[0] if args else kwargs.get("input")
    if virtual(mode, tensor) and tensor.numel() > 0:
        import torch

        record(mode, "bincount", 1 if tensor.dtype == torch.uint8 else 2)
    return call_generic(mode, func, args, kwargs, unhandled=True)


def _handle_masked_fill(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # masked_fill(mask, value) with a CUDA tensor value: the CUDA kernel takes it as a number, value.item(), one sync
    # whatever its dtype (the measured table answered 0 for an int value, from its nearest sample); a Python number or
    # a CPU tensor value: none.
    from .calls import _optable

    value = args[2] if len(args) > 2 else kwargs.get("value")
    if isinstance(value, _tensor_type()) and virtual(mode, value):
        record(mode, "library")
    elif any(virtual(mode, t) for t in tensors_in((args, kwargs))):
        # the other forms as the measured table answers them, its unmeasured ones named as before (it skips a call
        # that has a handler: asked here with none)
        syncs = _optable().on_call(mode.session, func, args, kwargs, ())
        if syncs:
            record(mode, "library", syncs)
    return call_generic(mode, func, args, kwargs, ask_table=False)


def _like_linalg_inv(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # torch.inverse is linalg_inv, which reads its info with .item() to raise on a singular matrix: the measured table
    # has the entry under torch.linalg.inv, not under inverse (it counted 0 for an op it had not measured).
    import torch

    from .calls import _optable

    if any(virtual(mode, t) for t in tensors_in((args, kwargs))):
        syncs = _optable().on_call(mode.session, torch.linalg.inv, args[:1], {}, mode.handlers)
        if syncs:
            record(mode, "library", syncs)
    return call_generic(mode, func, args, kwargs, ask_table=False)


def _tensor_type() -> type:
    import torch

    return torch.Tensor


def _handle_equal(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    values = [*args, *kwargs.values()]
    # A Python bool from the device; equal(x, x) and tensors of different shapes answer
    # on the host (measured: OpInfo `equal` samples of shapes (S,) and () gave 0), and so do
    # empty tensors and two views of the same elements (cuda_equal's fast path: the same storage,
    # offset, strides and dtype; measured on an H200: equal(x, x.view(100)) 0).
    if (len(values) >= 2 and values[0] is not values[1]
            and any(virtual(mode, v) for v in values)
            and not (isinstance(values[0], torch.Tensor) and isinstance(values[1], torch.Tensor)
                     and _equal_on_the_host(values[0], values[1]))):
        record(mode, "allclose")
    return func(*args, **kwargs)


def _equal_on_the_host(a: Any, b: Any) -> bool:
    """Whether torch.equal answers these two tensors without reading the device (aten/src/ATen/native/cuda/Equal.cpp)."""
    if a.shape != b.shape or a.numel() == 0:
        return True
    try:
        return (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
                and a.storage_offset() == b.storage_offset() and a.stride() == b.stride() and a.dtype == b.dtype
                and a.is_neg() == b.is_neg() and a.is_conj() == b.is_conj())
    except (RuntimeError, NotImplementedError):  # a tensor without a storage (a subclass, a functorch wrapper)
        return False


def _handle_contains(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if virtual(mode, args[0]):
        record(mode, "python_bool")  # torch/_tensor.py: bool((element == self).any().item())
    return func(*args, **kwargs)


# -- getters ----------------------------------------------------------------------------


def _getter_device(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    if mode.registry.is_cuda(args[0]):
        return torch.device("cuda", 0)
    return func(*args, **kwargs)


def _getter_is_cuda(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return True if mode.registry.is_cuda(args[0]) else func(*args, **kwargs)


def _getter_is_cpu(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return False if mode.registry.is_cuda(args[0]) else func(*args, **kwargs)


_HANDLERS: dict[Any, Callable[..., Any]] | None = None
_GETTERS: dict[Any, Callable[..., Any]] | None = None
# Where each handled function lives, to follow it when the program replaces it (a wrapper around Tensor.item):
# (owner, attribute name, handler), and the same by attribute name (`follow`).
_PLACES: list[tuple[Any, str, Callable[..., Any]]] = []
_PLACES_BY_NAME: dict[str, list[tuple[Any, str, Callable[..., Any]]]] = {}


def handler_table() -> dict[Any, Callable[..., Any]]:
    """The handler table, keyed on the functions torch passes to a TorchFunctionMode, as they are now: a
    function the program put in a handled one's place (``torch.Tensor.item = wrapper``, after the table was
    built by the first watch of the process) gets its handler too. torch passes the wrapper itself: a Tensor
    method's C binding looks its ``__torch_function__`` func up on ``torch.Tensor`` by name at each call
    (torch/csrc/utils/python_arg_parser.cpp, handle_torch_function), and the Python ones (``Tensor.__repr__``,
    ``Tensor.unique``: torch/_tensor.py) pass ``Tensor.<name>`` as it is then."""
    global _HANDLERS
    if _HANDLERS is not None:
        _follow_places(_HANDLERS)
        return _HANDLERS
    import torch
    import torch.nn.functional as F

    T = torch.Tensor
    table: dict[Any, Callable[..., Any]] = {
        getattr(T, name): _when_virtual("python_scalar")
        for name in ("__float__", "__int__", "__index__", "__complex__") if hasattr(T, name)
    }
    table.update({
        T.item: _when_virtual("item"),
        T.__bool__: _when_virtual("python_bool"),
        torch.is_nonzero: _when_virtual("python_bool"),
        T.__contains__: _handle_contains,
        T.__format__: _handle_format,
        T.__repr__: _when_virtual("print"),
        T.tolist: _handle_tolist,
        T.numpy: _handle_numpy,
        T.__array__: _handle_array,
        T.to: _handle_to,
        torch._C._nn._parse_to: handle_parse_to,  # nn.Module.to's arguments
        T.cuda: _handle_cuda,
        T.cpu: _handle_cpu,
        T.type: _handle_type,
        T.copy_: _handle_copy_,
        T.pin_memory: _handle_pin_memory,
        T.is_pinned: _handle_is_pinned,
        T.record_stream: _handle_record_stream,
        T.get_device: _handle_get_device,
        T.register_hook: _handle_register_hook,
        T.__deepcopy__: _handle_deepcopy,
        # nn.TransformerEncoder's fast path with a padding mask (nested tensors):
        # NestedTensor_nested_tensor_from_mask_left_aligned ends in an equal();
        # nested_from_padded copies its metadata non_blocking (no sync); each layer's
        # fused attention copies the nested sequence lengths blocking (two, see
        # _nested_attention_syncs); NestedTensor_to_padded_tensor_cuda copies its
        # metadata blocking (one).
        torch._nested_tensor_from_mask_left_aligned: _from_torch_source(lambda a, k: 1),
        torch._nested_tensor_from_mask: _from_torch_source(_from_mask_syncs),
        torch._transformer_encoder_layer_fwd: _from_torch_source(_encoder_layer_syncs),
        # nn.MultiheadAttention's fast path (attention.cu: masked softmax on the device;
        # a nested self-attention query as in an encoder layer)
        torch._native_multi_head_attention: _from_torch_source(_multi_head_attention_syncs),
        # nn.LSTM/GRU/RNN (packed or not): cuDNN takes batch_sizes as host numbers
        # (aten/src/ATen/native/cudnn/RNN.cpp), nothing read back
        **{getattr(torch, name): _from_torch_source(lambda a, k: 0)
           for name in ("lstm", "gru", "rnn_tanh", "rnn_relu") if hasattr(torch, name)},
        # matrix_exp: from the 1-norms (the measured table keeps only its largest count)
        **{f: _from_torch_source(matrix_exp_syncs) for f in (
            torch.matrix_exp, T.matrix_exp, getattr(torch.linalg, "matrix_exp", torch.matrix_exp))},
        T.to_padded_tensor: _from_torch_source(
            lambda a, k: 1 if getattr(a[0], "is_nested", False) else 0),
        torch._pack_padded_sequence: _handle_packed_sequence,
        torch._pad_packed_sequence: _handle_packed_sequence,
        T.__getitem__: handle_getitem,
        T.__setitem__: handle_setitem,
        torch.index_put_: handle_index_put,
        torch.index_put: handle_index_put,
        T.index_put_: handle_index_put,
        T.index_put: handle_index_put,
        torch.tensor: _handle_tensor_from_data,
        torch.as_tensor: _handle_tensor_from_data,
        T.new_tensor: _handle_new_tensor,
        torch.nonzero: _when_virtual("nonzero"),
        T.nonzero: _when_virtual("nonzero"),
        torch.argwhere: _when_virtual("nonzero"),
        T.argwhere: _when_virtual("nonzero"),
        torch.where: _handle_where,
        torch.masked_select: _when_virtual("masked_select"),
        T.masked_select: _when_virtual("masked_select"),
        torch.unique: _when_virtual("unique"),
        T.unique: _when_virtual("unique"),
        torch.unique_consecutive: _when_virtual("unique"),
        T.unique_consecutive: _when_virtual("unique"),
        torch.repeat_interleave: _handle_repeat_interleave,
        T.repeat_interleave: _handle_repeat_interleave,
        torch.bincount: _handle_bincount,
        T.bincount: _handle_bincount,
        torch.masked_fill: _handle_masked_fill,
        T.masked_fill: _handle_masked_fill,
        T.masked_fill_: _handle_masked_fill,
        torch.inverse: _like_linalg_inv,
        T.inverse: _like_linalg_inv,
        torch.histc: _handle_histc,
        T.histc: _handle_histc,
        F.one_hot: _handle_one_hot,
        torch.allclose: _when_any_virtual("allclose"),
        T.allclose: _when_any_virtual("allclose"),
        torch.equal: _handle_equal,
        T.equal: _handle_equal,
    })
    if hasattr(torch, "asarray"):
        table[torch.asarray] = _handle_tensor_from_data
    table.update(_aten_handlers())
    _find_places(table, torch, (T, torch, F, torch.linalg, torch.functional, torch._C._nn))
    _HANDLERS = table
    return table


def _attribute(owner: Any, name: str) -> Any:
    # A module's own attributes only: a module's __getattr__ may import a submodule (torch's lazy ones).
    return getattr(owner, name, None) if isinstance(owner, type) else vars(owner).get(name)


def _find_places(table: dict[Any, Callable[..., Any]], torch: Any, owners: tuple) -> None:
    """Note where each function of ``table`` is an attribute of ``owners``, under its own name."""
    for func, handler in table.items():
        name = getattr(func, "__name__", None)
        if not isinstance(name, str):
            continue
        for owner in owners:
            if _attribute(owner, name) is func:
                place = (owner, name, handler)
                _PLACES.append(place)
                _PLACES_BY_NAME.setdefault(name, []).append(place)


def _follow_places(table: dict[Any, Callable[..., Any]]) -> None:
    """Add the functions now in the handled ones' places (each PredictMode takes the table: each session)."""
    for owner, name, handler in _PLACES:
        current = _attribute(owner, name)
        if current is not None:
            try:
                if current not in table:
                    table[current] = handler
            except TypeError:  # an unhashable callable
                pass


def follow(func: Any) -> Callable[..., Any] | None:
    """The handler of ``func`` when it is now in a handled function's place (replaced during a block: the mode
    asks for a call that has no handler), else None; remembered in the table."""
    try:
        places = _PLACES_BY_NAME.get(func.__name__)  # functools.wraps keeps the name
    except (AttributeError, TypeError):
        return None
    if places is None:
        return None
    for owner, name, handler in places:
        if _attribute(owner, name) is func:
            if _HANDLERS is not None:
                _HANDLERS[func] = handler
            return handler
    return None


def getter_table() -> dict[Any, Callable[..., Any]]:
    global _GETTERS
    if _GETTERS is not None:
        return _GETTERS
    import torch

    base = vars(torch._C.TensorBase)
    _GETTERS = {
        (base["device"], "__get__"): _getter_device,
        (base["is_cuda"], "__get__"): _getter_is_cuda,
        (base["is_cpu"], "__get__"): _getter_is_cpu,
    }
    return _GETTERS
