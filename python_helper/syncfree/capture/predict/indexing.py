"""Predict mode's ``x[index]`` and ``x[index] = value``: the syncs of each index component
as torch's indexing code makes them on CUDA (torch/csrc/autograd/python_variable_indexing.cpp,
aten/src/ATen/TensorIndexing.h): CUDA slice bounds and 0-d indices read with ``item()``,
CUDA boolean masks through ``nonzero``, host indices and values copied to the device, and
the ``masked_fill_`` and ``fill_`` shortcuts that make none.
"""

from __future__ import annotations

from typing import Any

from .autograd import mark_node
from .calls import call_generic, record, virtual


def _is_python_number(value: Any) -> bool:
    import numbers

    return isinstance(value, numbers.Number)


def _is_index_sequence(obj: Any) -> bool:
    """PySequence_Check as torch's indexing code uses it (lists, tuples, ndarrays)."""
    return isinstance(obj, (list, tuple, range)) or type(obj).__name__ == "ndarray"


def _index_components(index: Any) -> tuple:
    """The index as torch's Python indexing splits it (wrapTuple/treatSequenceAsTuple in
    torch/csrc/autograd/python_variable_indexing.cpp)."""
    import torch

    if issubclass(type(index), tuple):
        return tuple(tuple.__iter__(index))
    # A list is read through list's own slots (as collect_tensors reads containers).
    if issubclass(type(index), list) and list.__len__(index) < 32 and any(
            isinstance(item, (torch.Tensor, slice)) or item is None or item is Ellipsis
            or _is_index_sequence(item) for item in list.__iter__(index)):
        return tuple(list.__iter__(index))
    return (index,)


class _IndexSyncs:
    """The syncs of one ``__getitem__``/``__setitem__`` index, component by component."""

    def __init__(self, mode: Any, self_virtual: bool, index: Any) -> None:
        import torch

        registry = mode.registry
        self.kinds: list[str] = []
        self.advanced = 0          # tensor/sequence indices left for index / index_put_
        self.virtual_masks = 0
        self.other_advanced = 0    # advanced indices that are not virtual masks
        for item in _index_components(index):
            if isinstance(item, slice):
                for bound in (item.start, item.stop, item.step):
                    if isinstance(bound, torch.Tensor) and registry.is_cuda(bound):
                        self.kinds.append("slice_bounds")  # __index__ -> item()
            elif isinstance(item, torch.Tensor):
                virtual = registry.is_cuda(item)
                is_mask = item.dtype in (torch.bool, torch.uint8)
                if item.dim() == 0 and (is_mask or not item.is_floating_point()):
                    # handleDimInMultiDimIndexing reads a 0-d index with item(): a read of a CUDA tensor as an
                    # integer, as a slice bound is (SF503), not a copy of a host index.
                    if virtual:
                        self.kinds.append("slice_bounds")
                    if is_mask:
                        self.advanced += 1
                        self.other_advanced += 1
                    continue
                self.advanced += 1
                if virtual and is_mask:
                    self.virtual_masks += 1
                else:
                    self.other_advanced += 1
                    if not virtual and self_virtual and not is_mask:
                        # Host indices copied to the device sync; a host boolean mask does
                        # not (its nonzero runs on the CPU: measured on an H200, torch 2.11).
                        self.kinds.append("index")
            elif _is_index_sequence(item) and not isinstance(item, str):
                self.advanced += 1
                self.other_advanced += 1
                if self_virtual:
                    self.kinds.append("index")  # a host index tensor copied to the device


def handle_getitem(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    tensor, index = args[0], args[1]
    self_virtual = mode.registry.is_cuda(tensor)
    syncs = _IndexSyncs(mode, self_virtual, index)
    kinds = list(syncs.kinds)
    if self_virtual:
        kinds += ["mask_index"] * syncs.virtual_masks  # nonzero() of each CUDA mask
    for kind in kinds:
        record(mode, kind)
    result = call_generic(mode, func, args, kwargs)
    if self_virtual and syncs.virtual_masks and getattr(result, "requires_grad", False):
        mark_node(result, masks=syncs.virtual_masks)  # its backward reads the masks again (autograd.py)
    return result


def handle_setitem(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, index, value = args[0], args[1], args[2]
    registry = mode.registry
    self_virtual = registry.is_cuda(tensor)
    if index is False:
        return func(*args, **kwargs)  # python_variable_indexing.cpp: a no-op
    syncs = _IndexSyncs(mode, self_virtual, index)
    kinds = list(syncs.kinds)
    value_virtual = virtual(mode, value)
    if isinstance(value, torch.Tensor):
        value_host_scalar = not value_virtual and value.dim() == 0
        value_host_single = not value_virtual and value.numel() == 1
        value_host_tensor = not value_virtual and value.dim() > 0
    else:
        # A Python number becomes a 0-d host tensor for a CUDA destination.
        value_host_scalar = value_host_single = _is_python_number(value)
        value_host_tensor = False
    scalar_into_slice = False
    masked_fill = False  # index_put_ -> masked_fill_: its backward too (a CPU 0-dim value), no nonzero
    if self_virtual:
        if syncs.advanced == 0:
            # copy_to (aten/src/ATen/TensorIndexing.h): a same-shape copy_ from the host
            # syncs; a host scalar into a larger slice is a fill_ (decided below, once
            # the index is known to be valid).
            if value_host_tensor:
                kinds.append("index_put")
            scalar_into_slice = value_host_scalar
        elif value_host_single and syncs.virtual_masks == 1 and syncs.other_advanced == 0:
            masked_fill = True  # index_put_ -> masked_fill_(mask, value.item()): no sync
        else:
            kinds += ["mask_index"] * syncs.virtual_masks
            if value_host_scalar:
                kinds.append("index_put")  # value.to(self.device()) in _index_put_impl_
    elif value_virtual:
        kinds.append("to_host")  # a CUDA value copied into a host tensor
    for kind in kinds:
        record(mode, kind)
    result = func(*args, **kwargs)
    if self_virtual and syncs.virtual_masks and not masked_fill and tensor.requires_grad:
        mark_node(tensor, masks=syncs.virtual_masks)  # an index_put_ node: its backward reads the masks again
    if scalar_into_slice and torch.Tensor.__getitem__(tensor, index).dim() == 0:
        record(mode, "index_put")
    return result


def handle_index_put(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``index_put_`` / ``index_put`` called as such (``x.index_put_((mask,), value)``), as ATen's _index_put_impl_
    makes its syncs on CUDA: without accumulate, a CPU one-element value and a single boolean mask on the device go
    to ``masked_fill_(mask, value.item())`` (none); else a 0-d CPU value is copied to the device (one) and each CUDA
    boolean mask becomes indices through ``nonzero`` (one each). Measured on an H200: 0, 2 with accumulate=True (the
    measured table had 1 for both), 1 for a CUDA value (tests/data/predict_calls_h200.json)."""
    import torch

    names = ("input", "indices", "values", "accumulate")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    tensor, indices, value = bound.get("input"), bound.get("indices"), bound.get("values")
    if not (isinstance(tensor, torch.Tensor) and mode.registry.is_cuda(tensor)) \
            or not isinstance(indices, (list, tuple)) or not isinstance(value, torch.Tensor):
        return call_generic(mode, func, args, kwargs)
    defined = [i for i in indices if isinstance(i, torch.Tensor)]
    masks = [i for i in defined if i.dtype in (torch.bool, torch.uint8)]
    host_single = not virtual(mode, value) and value.numel() == 1
    if not bound.get("accumulate", False) and host_single and len(defined) == 1 and masks \
            and virtual(mode, masks[0]):
        return call_generic(mode, func, args, kwargs, ask_table=False)  # masked_fill_ with value.item(): no sync
    if not virtual(mode, value) and value.dim() == 0:
        record(mode, "index_put")  # value.to(self.device())
    for mask in masks:
        if virtual(mode, mask):
            record(mode, "mask_index")  # expandTensors: nonzero
    result = call_generic(mode, func, args, kwargs, ask_table=False)
    count = sum(1 for mask in masks if virtual(mode, mask))
    for out in (result, tensor):
        if count and isinstance(out, torch.Tensor) and out.requires_grad:
            mark_node(out, masks=count, accumulate=bool(bound.get("accumulate", False)))
    return result
