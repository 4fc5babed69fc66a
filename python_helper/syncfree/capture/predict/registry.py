"""Predict mode's record of which tensors are virtually on CUDA (and virtually pinned), and
how the engine finds the tensors among a torch call's arguments without running user code.

Virtual-CUDA membership is a property of the *storage*: views, ``.data``,
``nn.Parameter(t)``, ``param.data = t`` and ``unbind`` share it for free, as they share a
device on a GPU. One registry serves the kernel's life (`kernel_registry`): a tensor put
on the stand-in device by an earlier predicted cell is still "on CUDA" in the next one.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import Any


class _WeakIdentitySet:
    """Objects held weakly and compared by identity (a storage's ``==`` is not identity).

    A plain dict from ``id`` to a weak reference: cheaper per lookup than
    torch.utils.weak.WeakIdKeyDictionary, which builds a reference for every query. Dead
    references are swept when the dict has doubled, not by a weakref callback: a callback
    is Python code run from the garbage collector, where CPython drops a KeyboardInterrupt
    that lands in it ("Exception ignored in"), and a dead entry answers False anyway.
    """

    _FIRST_SWEEP = 1024

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}
        self._sweep_at = self._FIRST_SWEEP

    def __contains__(self, obj: Any) -> bool:
        ref = self._refs.get(id(obj))
        return ref is not None and ref() is obj

    def __len__(self) -> int:
        return sum(1 for ref in self._refs.values() if ref() is not None)

    def add(self, obj: Any) -> bool:
        """Add ``obj``; False when it was there already."""
        key = id(obj)
        refs = self._refs
        ref = refs.get(key)
        if ref is not None and ref() is obj:
            return False
        refs[key] = weakref.ref(obj)
        if len(refs) >= self._sweep_at:
            for dead in [k for k, r in refs.items() if r() is None]:
                del refs[dead]
            self._sweep_at = max(self._FIRST_SWEEP, 2 * len(refs))
        return True


_registry_serial = itertools.count()


class VirtualCudaRegistry:
    """Which tensors are virtually on CUDA, and which are virtually pinned.

    Kept on the tensor's storage object, as an attribute named for this registry: torch
    keeps one Python object per storage alive as long as the storage lives (PyObject
    preservation, torch/csrc/Storage.cpp), so every view and alias of a virtual tensor
    finds it, and it goes with the storage: no table to sweep, no weak reference per
    result (predict mode marks the results of every op with a virtual input). Tensors
    without an accessible storage (sparse, wrapper subclasses), and storages that take no
    attribute, are kept in weak identity sets. A ``torch.func`` transform's wrapper
    (``grad``'s TensorWrapper, ``vmap``'s BatchedTensor: no storage) answers for the tensor
    it wraps (`_functorch_base`): the transform's inputs are wrapped by torch in C++, where
    no mode marks them, and its outputs are unwrapped the same way.
    """

    def __init__(self) -> None:
        self._flag = f"_syncfree_virtual_cuda_{next(_registry_serial)}"
        self._cuda_storages = _WeakIdentitySet()  # storages that refused the attribute
        self._cuda_tensors = _WeakIdentitySet()
        self._pinned_storages = _WeakIdentitySet()
        self.marked = 0
        # Torch calls seen with a virtual CUDA input, and with host tensors only: a block whose calls were all on
        # host tensors could not be judged (its tensors may be CUDA ones on a GPU: session.Watch).
        self.cuda_calls = 0
        self.host_calls = 0

    @staticmethod
    def storage_of(tensor: Any) -> Any:
        try:
            return tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return None

    def is_cuda(self, tensor: Any) -> bool:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            base = _functorch_base(tensor)
            if base is not None:
                return self.is_cuda(base)
            return tensor in self._cuda_tensors
        return getattr(storage, self._flag, False) or (
            bool(self._cuda_storages._refs) and storage in self._cuda_storages)

    def mark_cuda(self, tensor: Any) -> None:
        storage = self.storage_of(tensor)
        if storage is not None:
            self.mark_storage(storage)
            return
        base = _functorch_base(tensor)
        if base is not None:
            self.mark_cuda(base)
        elif self._cuda_tensors.add(tensor):
            self.marked += 1

    def mark_storage(self, storage: Any) -> None:
        flag = self._flag
        if getattr(storage, flag, False):
            return
        try:
            setattr(storage, flag, True)
        except (AttributeError, TypeError):
            if not self._cuda_storages.add(storage):
                return
        self.marked += 1

    def split_inputs(self, inputs: Any) -> tuple[bool, set[int]]:
        """Whether any input is virtual, and the ids of the host inputs' storages.

        `is_cuda` for each input, unrolled: predict mode asks this for every torch call.
        """
        virtual = False
        kept: set[int] = set()
        flag = self._flag
        refused = self._cuda_storages if self._cuda_storages._refs else ()
        for tensor in inputs:
            try:
                storage = tensor.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                virtual = virtual or self.is_cuda(tensor)
                continue
            if getattr(storage, flag, False) or storage in refused:
                virtual = True
            else:
                kept.add(id(storage))
        if virtual:
            self.cuda_calls += 1
        elif kept:
            self.host_calls += 1
        return virtual, kept

    def activity(self) -> tuple[int, int]:
        """(CUDA work, host-only calls) so far, monotonic: what a block did is the change over it. CUDA work: the
        tensors put on the virtual device and the calls with a virtual input."""
        return self.marked + self.cuda_calls, self.host_calls

    def mark_results(self, results: Any, kept: set[int]) -> None:
        """Mark fresh results virtual; results on a host input's storage (in-place,
        ``out=``) stay where they are."""
        for out in results:
            cls = type(out)
            if cls is not _Tensor and (hasattr(cls, "__tensor_flatten__")
                                       or getattr(cls, "__torch_dispatch__", None) is not _base_dispatch()):
                self.mark_results(_inner_tensors(out), kept)  # a wrapper subclass: what it holds
            try:
                storage = out.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                self.mark_cuda(out)
                continue
            if id(storage) not in kept:  # else it stays on the host input's storage
                self.mark_storage(storage)

    def is_cuda_storage(self, storage: Any) -> bool:
        """Whether an (untyped) storage object is virtually on CUDA."""
        return getattr(storage, self._flag, False) or (
            bool(self._cuda_storages._refs) and storage in self._cuda_storages)

    def is_pinned(self, tensor: Any) -> bool:
        storage = self.storage_of(tensor)
        return storage is not None and storage in self._pinned_storages

    def mark_pinned(self, tensor: Any) -> None:
        storage = self.storage_of(tensor)
        if storage is not None:
            self._pinned_storages.add(storage)


_base_dispatch_impl: Any = None


def _base_dispatch() -> Any:
    """``torch.Tensor.__torch_dispatch__`` as a class attribute reads it (a subclass that defines its own is a
    wrapper of other tensors, as MaskedTensor, torchao's and a user's logging tensors are)."""
    global _base_dispatch_impl
    if _base_dispatch_impl is None:
        import torch

        _base_dispatch_impl = torch.Tensor.__torch_dispatch__
    return _base_dispatch_impl


def _inner_tensors(wrapper: Any) -> list[Any]:
    """The tensors a wrapper subclass holds: those ``__tensor_flatten__`` names (a traceable wrapper's parts), else
    the tensors among its instance attributes (MaskedTensor's data and mask).

    A wrapper subclass works on its inner tensors in its own ``__torch_function__``/``__torch_dispatch__``, which
    runs with predict mode popped: the wrapper a call returns is marked, but what it holds was made on the host.
    On a GPU they are on the wrapper's device: ``masked_tensor(x, m).sum().get_data().item()`` syncs. Nested
    wrappers are marked in turn (`mark_results`)."""
    flatten = getattr(type(wrapper), "__tensor_flatten__", None)
    try:
        if flatten is not None:
            names, _ = flatten(wrapper)
            inner = [getattr(wrapper, name) for name in names]
        else:  # read as a plain dict: no attribute code of the subclass runs
            inner = list(dict.values(object.__getattribute__(wrapper, "__dict__")))
    except Exception:  # noqa: BLE001 - a subclass's protocol method: it cannot break the call it describes
        return []
    import torch

    return [tensor for tensor in inner if isinstance(tensor, torch.Tensor)]


_functorch: Any = None  # torch._C._functorch, bound on first use (False: none)


def _functorch_base(tensor: Any) -> Any:
    """The plain tensor under a ``torch.func`` transform's wrappers (``grad``/``vjp``/
    ``jacrev``'s TensorWrapper, ``vmap``'s BatchedTensor, nested to any depth), else None.

    Inside ``torch.func.grad(f)(x)`` ``f`` sees its input wrapped (torch/_functorch/
    eager_transforms.py, ``_create_differentiable``) and every op on it makes a wrapper;
    the transform's result is the plain tensor inside. A wrapper has no storage, so without
    this a virtual input lost its device inside ``f`` (a ``.item()`` there was not
    predicted) and the transform returned host tensors (the caller's ``.item()`` on the
    gradient was not predicted either).
    """
    global _functorch
    if _functorch is None:
        import torch

        functorch = getattr(torch._C, "_functorch", None)
        _functorch = functorch if hasattr(functorch, "get_unwrapped") else False
    if not _functorch:
        return None
    try:
        if not _functorch.is_functorch_wrapped_tensor(tensor):
            return None
        base = _functorch.get_unwrapped(tensor)
        while _functorch.is_functorch_wrapped_tensor(base):
            base = _functorch.get_unwrapped(base)
    except (RuntimeError, TypeError):
        return None
    return base


_registry: VirtualCudaRegistry | None = None


def kernel_registry() -> VirtualCudaRegistry:
    global _registry
    if _registry is None:
        _registry = VirtualCudaRegistry()
    return _registry


def tensors_in(obj: Any) -> list[Any]:
    """Tensors in an argument: nested lists/tuples and dict values, a few levels deep."""
    found: list[Any] = []
    collect_tensors(obj, found, 0)
    return found


_Tensor: Any = None  # torch.Tensor, bound on first use (torch is imported lazily)

# How the engine reads the standard containers: through the base classes' own slots,
# never through a subclass's overrides. The arguments of a torch call can be anything
# (`copy.deepcopy`'s memo reaches Tensor.__deepcopy__, holding every object copied so
# far): user code (`__len__`, `__getitem__`, `__iter__`, `values`, a `__class__`
# property) must never run because predict mode looked at an argument.
_ITEMS: dict[type, Callable[[Any], Any]] = {
    list: list.__iter__, tuple: tuple.__iter__, dict: dict.values,
    set: set.__iter__, frozenset: frozenset.__iter__,
}
_NUMBERS = (int, float, complex)


def _items_of(cls: type) -> Callable[[Any], Any] | None:
    """The base-class iterator for an instance of ``cls``: exact standard containers and
    their subclasses (namedtuples, torch.return_types, OrderedDict, a library's tuple
    subclass), found by the type alone."""
    items = _ITEMS.get(cls)
    if items is None:
        for base in (tuple, list, dict, set, frozenset):
            if issubclass(cls, base):
                return _ITEMS[base]
    return items


def call_tensors(args: tuple, kwargs: dict | None) -> list[Any]:
    """The tensors among a call's arguments: `collect_tensors` of args and kwargs, with
    the usual flat case (tensors and plain values) handled without recursion."""
    global _Tensor
    if _Tensor is None:
        import torch

        _Tensor = torch.Tensor
    tensor_type = _Tensor
    found: list[Any] = []
    for value in args:
        cls = type(value)
        if issubclass(cls, tensor_type):
            found.append(value)
        elif cls in _ITEMS or (cls not in _NUMBERS and _items_of(cls) is not None):
            collect_tensors(value, found, 1)
    if kwargs:
        for value in kwargs.values():
            cls = type(value)
            if issubclass(cls, tensor_type):
                found.append(value)
            elif cls in _ITEMS or (cls not in _NUMBERS and _items_of(cls) is not None):
                collect_tensors(value, found, 1)
    return found


def collect_tensors(obj: Any, found: list[Any], depth: int) -> None:
    """Append the tensors in ``obj`` to ``found``: a real tensor (by its type, not by
    ``isinstance``, which asks a proxy's ``__class__``), or the items of a standard
    container, read through the base class (see :data:`_ITEMS`), a few levels deep."""
    global _Tensor
    if _Tensor is None:
        import torch

        _Tensor = torch.Tensor
    cls = type(obj)
    if issubclass(cls, _Tensor):
        found.append(obj)
        return
    if depth >= 4 or cls in _NUMBERS:
        return
    items = _items_of(cls)
    if items is None:
        return
    if issubclass(cls, (list, tuple)):
        # A sequence that starts with a plain number (or a torch.Size) holds numbers: not
        # scanned element by element, so torch.tensor(big_list) stays cheap.
        first = next(items(obj), None)
        if first is not None and issubclass(type(first), _NUMBERS):
            return
    for item in items(obj):
        collect_tensors(item, found, depth + 1)


def is_cuda_device(device: Any) -> bool:
    import torch

    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    # A bare int names a CUDA ordinal in torch's device arguments.
    return isinstance(device, int) and not isinstance(device, bool)

