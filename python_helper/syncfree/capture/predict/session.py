"""Predict mode: run code written for CUDA on the CPU and report the syncs it would make.

When the kernel has no CUDA device, ``%%syncfree`` runs the cell inside a
:class:`PredictSession`. Inside it:

* ``device='cuda'`` arguments, ``.cuda()``, ``.to('cuda')``, ``module.cuda()``,
  ``torch.tensor(..., device='cuda')``, the legacy ``torch.cuda.FloatTensor`` types and
  ``torch.load`` of storages saved on CUDA (or mapped there by ``map_location``) create
  ordinary CPU tensors that the session remembers as *virtually on CUDA*; ``torch.save``
  writes virtual CUDA storages as CUDA ones (one predicted sync per storage). ``torch.cuda.is_available()`` (and
  ``torch.accelerator.is_available()``) answer True, so ``'cuda' if
  torch.cuda.is_available() else 'cpu'`` takes the CUDA path, and virtual tensors answer
  ``device == cuda:0`` and ``is_cuda == True``.
* Every operation that would make the CPU wait for the GPU if those tensors were on a
  GPU is reported to the recorder through ``recorder.record_sync(frame, kind,
  predicted=True)``, one call per sync event, with the innermost user-level frame.
* What the cell computes is unchanged apart from running on the CPU: the same values,
  the same copy-versus-alias semantics (``x.cpu()`` of a virtual tensor is a copy, as on
  a GPU), the same exceptions. Two GPU errors are reproduced on purpose because the
  code cannot run on a GPU either: ``.numpy()``/``np.asarray`` of a CUDA tensor and
  ``.pin_memory()`` of a CUDA tensor.

How it sees the operations. A ``torch.overrides.TorchFunctionMode`` receives every
Python-level torch call (``Tensor.item/__bool__/__format__/__repr__/__getitem__``,
``torch.nonzero``, factory functions, property getters such as ``Tensor.device``). The
mode is popped while its handler runs (torch/overrides.py, ``_pop_mode_temporarily``),
so the torch calls that torch itself makes while handling, say, ``repr(t)`` are not seen
again: a sync is counted once, at the outermost call that user code (or library code
outside torch's own handling, such as ``clip_grad_norm_``) made. What a mode cannot see
is patched for the session only and restored to the very same objects on every exit
path: ``torch.cuda.*`` and ``torch.accelerator.*`` device queries and streams/events,
the legacy CUDA tensor types, ``torch.load``, ``torch.compile``,
``torch._C._group_tensors_by_device_and_dtype``
(so that torch's foreach helpers group virtual tensors under the CUDA device, as on a
GPU) and the DataLoader's pin-memory function (its pinning thread has no mode).

Virtual-CUDA membership is a property of the *storage* (weakly referenced): views,
``.data``, ``nn.Parameter(t)``, ``param.data = t`` and ``unbind`` share it for free, as
they share a device on a GPU. Fresh results of an operation with a virtual input, and of
a factory with a CUDA device, are marked too.

Counting conventions (ground truth: ``shared/sync-facts.md`` and the 73 patterns in
``shared/data/patterns-torch2.11-h200.json``, measured with torch 2.11 on an H200):

* ``repr(t)``/``print(t)``/``str(t)`` of a virtual tensor is **one** predicted event of
  kind ``print``. A GPU reports several warnings for one print (8 for a scalar with
  torch 2.11) because ``torch/_tensor_str.py`` reads the tensor piece by piece; the
  number depends on the values and the torch version and says nothing more to the user.
* ``x[i:j]`` with CUDA scalar bounds: 2 (one per bound); ``repeat_interleave(v, r)``,
  ``bincount``, ``histc`` (default range): 2; everything else: 1 per call.
* Not syncs: ``.to(..., non_blocking=True)`` either way, ``x[idx_gpu]``,
  ``x[idx_gpu] = t_gpu``, ``x[mask] = 0`` (masked_fill fast path), ``nonzero_static``,
  ``torch.where(c, a, b)``, ``repeat_interleave(..., output_size=n)``, factories with a
  CUDA device, ``Event.wait``/``Event.query``.

Predictions that rest on torch's source rather than on a measurement (listed in
:data:`UNMEASURED_RULES`; re-measure on a GPU before relying on them) are kept few.

``torch.compile``'d code runs eagerly in a session (dynamo's ``force_eager`` stance), so
its syncs are predicted op by op, and the report's notes name each compiled function that
ran so and where it was called (:data:`COMPILE_NOTE_PREFIX`).

Known limits: torch function modes are per thread, so code in threads the cell starts
runs without the stand-ins (the DataLoader's pinning thread is handled); syncs in
``torch.distributed`` and custom CUDA extensions are not predicted; device-mismatch errors that a GPU would raise (a CPU and a CUDA operand)
are not reproduced; ``torch.cuda.mem_get_info`` and other device queries not listed
above still answer as the CPU build does (most raise "Torch not compiled with CUDA");
a ``torch.set_default_device('cuda')`` made by the cell outlives the session, as it
would on a GPU, and then fails in code run outside predict mode. Likewise a module
first imported inside a predicted cell runs its top level there, so a module-level
``DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'`` stays ``'cuda'`` afterwards
(Python runs a module's top level once; nothing in torch can re-run it): import such
modules before the cell, or ``importlib.reload`` them after.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .. import interrupts
from ..undo import Undo
from . import cuda_api

# The patches are process-wide: the first session in installs them (it is
# `_active_session` until the last one is out, which restores them). Function modes are per
# thread: each thread with a session runs one mode, that of its first session
# (`_thread_modes`); a second PredictMode stacked in one thread would see the first one's
# calls again. No lock is held across lines an interrupt could cut (interrupts.py holds
# Ctrl-C back in the engine); one guards the bookkeeping against other threads.
_claims: list[PredictSession] = []  # sessions entered, in order, any thread
_active_session: PredictSession | None = None  # the one whose patches are installed
_patch_holders: list[PredictSession] = []  # sessions relying on the patches
_thread_modes: dict[int, PredictSession] = {}  # thread ident -> the session whose mode runs there
_lock = threading.RLock()
_get_ident = threading.get_ident

#: The sync kinds this module reports (a subset of the report's kind vocabulary).
PREDICTED_KINDS = frozenset({
    "item", "python_scalar", "python_bool", "format", "print", "tolist", "to_host",
    "to_device", "tensor_from_python", "index", "index_put", "slice_bounds",
    "mask_index", "nonzero", "masked_select", "unique", "repeat_interleave", "bincount",
    "histc", "one_hot", "allclose", "explicit", "stream_sync",
})

#: Predictions derived from torch's C++/Python source, not from the measured patterns.
UNMEASURED_RULES = (
    "x[t] with a 0-d integer or bool CUDA index t: 1 (handleDimInMultiDimIndexing calls "
    "item(), aten/src/ATen/TensorIndexing.h)",
    "x[mask] = 0 with a CUDA bool mask: 0 (index_put_ dispatches to masked_fill_ for a "
    "CPU scalar value, canDispatchToMaskedFill in TensorAdvancedIndexingUtils.h)",
    "x[mask] = t_gpu: 1 (no masked_fill_ fast path for a CUDA value: nonzero)",
    "x[0] = 0 (destination larger than the scalar): 0 (copy_to uses fill_, TensorIndexing.h)",
    "torch.equal(a, b) of two different tensors: 1 (the measured 0 is the a-is-b shortcut)",
    "histc with an explicit range (min != max): 0",
    "one_hot without num_classes: 1; with num_classes: 0",
    "torch.tensor([cuda scalars...]): 1 per element (each is read with item())",
    "x.numpy(force=True), t_cpu.copy_(x), x.copy_(t_cpu): 1 each",
    "torch.load(map_location='cuda'): 1 per storage (a pageable host-to-device copy)",
    "nn.TransformerEncoder's padding fast path: _nested_tensor_from_mask_left_aligned 1 "
    "(equal), _nested_tensor_from_mask 2 (+1 with mask_check), to_padded_tensor 1, "
    "_transformer_encoder_layer_fwd 0, _native_multi_head_attention 0 "
    "(aten/src/ATen/native/nested/, transformers/attention.cu)",
    "torch.lstm/gru/rnn_tanh/rnn_relu (nn.LSTM, GRU, RNN forward), packed or not: 0 "
    "(cudnn/RNN.cpp takes batch_sizes on the host)",
    "torch.save: 1 per storage, not per tensor (_save copies each storage to the host once, "
    "torch/serialization.py; measured: 1 per tensor of a state dict, whose tensors each "
    "have their own storage)",
)

_LEGACY_TYPE_NAMES = (
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor",
    "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "BoolTensor",
)


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
    attribute, are kept in weak identity sets.
    """

    def __init__(self) -> None:
        self._flag = f"_syncfree_virtual_cuda_{next(_registry_serial)}"
        self._cuda_storages = _WeakIdentitySet()  # storages that refused the attribute
        self._cuda_tensors = _WeakIdentitySet()
        self._pinned_storages = _WeakIdentitySet()
        self.marked = 0

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
            return tensor in self._cuda_tensors
        return getattr(storage, self._flag, False) or (
            bool(self._cuda_storages._refs) and storage in self._cuda_storages)

    def mark_cuda(self, tensor: Any) -> None:
        storage = self.storage_of(tensor)
        if storage is not None:
            self.mark_storage(storage)
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
                virtual = virtual or tensor in self._cuda_tensors
                continue
            if getattr(storage, flag, False) or storage in refused:
                virtual = True
            else:
                kept.add(id(storage))
        return virtual, kept

    def mark_results(self, results: Any, kept: set[int]) -> None:
        """Mark fresh results virtual; results on a host input's storage (in-place,
        ``out=``) stay where they are."""
        for out in results:
            try:
                storage = out.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                if self._cuda_tensors.add(out):
                    self.marked += 1
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


_registry: VirtualCudaRegistry | None = None


def _kernel_registry() -> VirtualCudaRegistry:
    global _registry
    if _registry is None:
        _registry = VirtualCudaRegistry()
    return _registry


def _tensors_in(obj: Any) -> list[Any]:
    """Tensors in an argument: nested lists/tuples and dict values, a few levels deep."""
    found: list[Any] = []
    _collect_tensors(obj, found, 0)
    return found


_Tensor: Any = None  # torch.Tensor, bound on first use (torch is imported lazily)
_MethodWrapper = type(object().__str__)  # what Tensor.device.__get__ is

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


def _call_tensors(args: tuple, kwargs: dict | None) -> list[Any]:
    """The tensors among a call's arguments: `_collect_tensors` of args and kwargs, with
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
            _collect_tensors(value, found, 1)
    if kwargs:
        for value in kwargs.values():
            cls = type(value)
            if issubclass(cls, tensor_type):
                found.append(value)
            elif cls in _ITEMS or (cls not in _NUMBERS and _items_of(cls) is not None):
                _collect_tensors(value, found, 1)
    return found


def _collect_tensors(obj: Any, found: list[Any], depth: int) -> None:
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
        _collect_tensors(item, found, depth + 1)


def _is_cuda_device(device: Any) -> bool:
    import torch

    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    # A bare int names a CUDA ordinal in torch's device arguments.
    return isinstance(device, int) and not isinstance(device, bool)


def _is_python_number(value: Any) -> bool:
    import numbers

    return isinstance(value, numbers.Number)


def _is_index_sequence(obj: Any) -> bool:
    """PySequence_Check as torch's indexing code uses it (lists, tuples, ndarrays)."""
    return isinstance(obj, (list, tuple, range)) or type(obj).__name__ == "ndarray"


class _Patches:
    """Attribute replacements for one session, undone in reverse order.

    Each entry is saved before its attribute is set and dropped only after it has been
    put back, and putting one back twice is harmless: `restore` can be interrupted and
    run again (undo.py) without leaving a stand-in behind or losing an original.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        existed = name in vars(owner)
        self._saved.append((owner, name, existed, vars(owner).get(name)))
        setattr(owner, name, value)

    def original(self, owner: Any, name: str) -> Any:
        """What ``owner.name`` was before this session replaced it (else what it is)."""
        for saved_owner, saved_name, existed, old in self._saved:
            if saved_owner is owner and saved_name == name:
                return old if existed else getattr(owner, name, None)
        return getattr(owner, name, None)

    def restore(self) -> None:
        saved = self._saved
        while saved:
            owner, name, existed, old = saved[-1]
            if existed:
                setattr(owner, name, old)
            elif name in vars(owner):
                delattr(owner, name)
            saved.pop()


class PredictSession:
    """Run a block of code with CPU tensors standing in for CUDA ones.

    ``recorder.record_sync(frame, kind, predicted=True)`` is called once per predicted
    sync event, on the recorder that owns the calling thread or task (dispatch.py; without
    one, the recorder of this thread's first session). Sessions in different threads run
    side by side, each with its own mode over the one set of patches; a session entered in
    a thread that already runs one is inert (that thread's mode sees its calls; should
    the outer one end first, the mode passes to it).
    """

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.registry: VirtualCudaRegistry | None = None
        self.active = False
        self.event_type: type | None = None
        self.stream_type: type | None = None
        self._patches = _Patches()
        self._undo: contextlib.ExitStack | None = None
        self._mode: Any = None
        self._default_stream: _Stream | None = None
        self._dynamo_disabled = False
        self._eager_compiles = _EagerCompiles(self)
        self._marked_before = 0
        self._thread = threading.get_ident()

    @property
    def cuda_tensors_created(self) -> int:
        """How many tensors (storages) were put on the virtual CUDA device so far."""
        return self.registry.marked - self._marked_before if self.registry is not None else 0

    def __enter__(self) -> PredictSession:
        global _active_session
        import torch  # noqa: F401  (imported lazily: the package must import without torch)

        # Each undo step is pushed before the change it undoes and is idempotent, so an
        # interrupt at any point of enter or exit leaves nothing behind (undo.py).
        undo = self._undo = Undo()
        try:
            # No lock held across lines (an interrupt could leave it held): a claim list
            # whose first entry is the active session; list.append is atomic.
            undo.push(interrupts.release, self)  # a Ctrl-C is raised outside (interrupts.py)
            interrupts.hold(self)
            undo.push(_release_claim, self)
            _claims.append(self)
            self._thread = _get_ident()
            # One registry for the kernel's life: a tensor put on the stand-in device by
            # an earlier predicted cell is still "on CUDA" in the next one, as it would be
            # on a GPU. It holds weak references only.
            self.registry = _kernel_registry()
            self._marked_before = self.registry.marked
            undo.push(_release_patches, self)
            _hold_patches(self)
            undo.push(_release_thread_mode, self)
            if not _claim_thread_mode(self):
                return self  # inert: this thread's mode sees its calls
            mode = self._mode = _new_predict_mode(self)
            undo.push(_ModeRemoval(mode))
            mode.__enter__()
            self.active = True
            return self
        except BaseException:
            try:
                self.close()
            finally:
                self.close()  # again, should a second interrupt have cut the first short
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        finally:
            self.close()  # a no-op unless an interrupt escaped the first

    def close(self) -> None:
        """Undo everything the session changed (idempotent; completes when interrupted)."""
        self.active = False
        undo = self._undo
        if undo is not None:
            undo.close()
            self._undo = None

    def real(self, owner: Any, name: str) -> Any:
        """The object ``owner.name`` was before this session patched it."""
        return self._patches.original(owner, name)

    # -- reporting ---------------------------------------------------------------------

    def record(self, kind: str, frame: Any, count: int = 1) -> None:
        recorder = _owner()
        if recorder is None:
            # No recorder owns this thread (a session used without one, as tests do): the
            # first session of this thread; a thread without one: nobody's, counted apart.
            session = _first_session_here()
            if session is None:
                _unowned(count)
                return
            recorder = session.recorder
        for _ in range(count):
            recorder.record_sync(frame, kind, predicted=True)
        if cuda_api.DEBUG.mode:  # as torch's debug mode, set by the code, does on a GPU
            cuda_api.react_to_sync(kind, frame)

    # -- patches for what a TorchFunctionMode cannot see -------------------------------

    def _install_patches(self) -> None:
        import torch
        import torch.serialization
        import torch.utils.data._utils.pin_memory as pin_memory_module

        session = self
        cuda = torch.cuda
        patch = self._patches.replace

        def synchronize(device: Any = None) -> None:
            session.record("explicit", _user_frame())

        def current_stream(device: Any = None) -> _Stream:
            return session._default_stream

        # Device queries answer for the stand-in in the cell's thread only: a thread the
        # cell did not run in (a background worker, another cell's thread) has no
        # stand-in tensors (function modes are per thread) and gets the real answers.
        patch(cuda, "is_available", self._per_thread(lambda: True, cuda.is_available))
        patch(cuda, "device_count", self._per_thread(lambda: 1, cuda.device_count))
        patch(cuda, "current_device", lambda: 0)
        patch(cuda, "set_device", lambda device: None)
        patch(cuda, "device", _DeviceContext)
        patch(cuda, "device_of", _DeviceContext)
        patch(cuda, "synchronize", synchronize)
        patch(cuda, "current_stream", current_stream)
        patch(cuda, "default_stream", current_stream)
        patch(cuda, "set_stream", lambda stream: None)
        patch(cuda, "stream", _stream_context)
        patch(cuda, "Event", self.event_type)
        patch(cuda, "Stream", self.stream_type)
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
        for name in _LEGACY_TYPE_NAMES:
            if hasattr(cuda, name):
                patch(cuda, name, _legacy_cuda_type(self, name))
        # The debug mode, autocast, memory statistics, seeding, NVTX (cuda_api.py).
        cuda_api.install(self, patch)

        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None:
            # torch >= 2.6 tutorials pick the device with torch.accelerator.
            patch(accelerator, "is_available",
                  self._per_thread(lambda: True, accelerator.is_available))
            patch(accelerator, "current_accelerator",
                  self._per_thread(lambda check_available=False: torch.device("cuda"),
                                   accelerator.current_accelerator))
            patch(accelerator, "device_count",
                  self._per_thread(lambda: 1, accelerator.device_count))
            for name in ("current_device_index", "current_device_idx"):
                if hasattr(accelerator, name):
                    patch(accelerator, name, lambda: 0)
            for name in ("set_device_index", "set_device_idx"):
                if hasattr(accelerator, name):
                    patch(accelerator, name, lambda device: None)
            patch(accelerator, "synchronize", synchronize)
            if hasattr(accelerator, "current_stream"):
                patch(accelerator, "current_stream", current_stream)

        patch(torch, "load", self._load_wrapper(torch.load))
        # nn.TransformerEncoder(Layer) and nn.MultiheadAttention take their fast path
        # (nested tensors for padding masks, fused kernels) only when no argument
        # has_torch_function, which any active mode answers True: on a GPU no mode runs.
        patch(torch.overrides, "has_torch_function",
              _fast_path_has_torch_function(torch.overrides.has_torch_function))
        # nn.RNN/LSTM/GRU's flatten_parameters asks cuDNN about each weight; for a virtual
        # CUDA weight the CPU build warns "PyTorch was compiled without cuDNN" (and answers
        # False). torch/backends/cudnn/__init__.py, is_acceptable; rnn.py looks it up per call.
        import torch.backends.cudnn as cudnn

        patch(cudnn, "is_acceptable", self._cudnn_wrapper(cudnn.is_acceptable))
        # torch.save of virtual CUDA tensors: tagged "cuda:0" in the file (so torch.load
        # restores them to CUDA, as a file saved on a GPU) and one device-to-host copy per
        # storage. torch/serialization.py: `save` looks `_save`/`_legacy_save` up in its
        # module at each call, and their persistent_id calls `location_tag` per storage.
        saving = _Saving(self)
        patch(torch.serialization, "location_tag", saving.location_tag_wrapper(
            torch.serialization.location_tag))
        for name in ("_save", "_legacy_save"):
            if hasattr(torch.serialization, name):
                patch(torch.serialization, name,
                      saving.save_wrapper(getattr(torch.serialization, name)))
        # torch.compile'd code runs eagerly, and the report says so (_EagerCompiles).
        # Compiling for real on the stand-ins does not give a GPU's syncs: dynamo fails on
        # the patched torch.cuda (its eager backend re-registers torch.cuda.current_stream),
        # inductor asks the device properties of a CUDA device to generate Triton code for,
        # and the compiled graph's CPU kernels would be invisible to the mode (no syncs, no
        # virtual results), while a GPU also syncs while compiling (autotuning).
        self._undo.push(self._eager_compiles.note)
        self._disable_dynamo()
        patch(torch, "compile", self._compile_wrapper(torch.compile))
        # torch/utils/_foreach_utils.py looks this up on torch._C at each call and then
        # moves scalars to the device keys it returns (clip_grad_norm_, optimizers).
        patch(torch._C, "_group_tensors_by_device_and_dtype",
              self._grouping_wrapper(torch._C._group_tensors_by_device_and_dtype))
        # The DataLoader's pinning thread (torch/utils/data/_utils/pin_memory.py) looks
        # the function up in its module at each batch; it runs without our mode.
        patch(pin_memory_module, "pin_memory", self._pinning_wrapper(pin_memory_module.pin_memory))
        # torch.distributed written for NCCL runs on gloo (distributed.py).
        from . import distributed

        distributed.install(self, patch)

    def _disable_dynamo(self) -> None:
        # Dynamo's "force_eager" stance, not `config.disable`: under `disable` dynamo's
        # frame callback marks each code object it meets SKIP for good, so functions
        # compiled before the session never compiled (or recompiled) again after it.
        # With the stance the callback is not installed at all (eval_frame.py,
        # _callback_from_stance) and nothing about a code object is remembered.
        # The stance is process-wide: compiled code in other threads runs eagerly too
        # while the session lasts.
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        stance_type = getattr(eval_frame, "DynamoStance", None)
        if self._dynamo_disabled or stance_type is None or _active_session is not self:
            return
        self._dynamo_disabled = True
        self._patches.replace(eval_frame, "_stance", stance_type(stance="force_eager"))
        # Each call of compiled code asks _callback_from_stance for its frame callback
        # (eval_frame.py, _TorchDynamoContext.__call__'s compile_wrapper): where the
        # report learns which compiled function ran eagerly, and from where.
        original = getattr(eval_frame, "_callback_from_stance", None)
        if original is not None:
            self._patches.replace(eval_frame, "_callback_from_stance",
                                  self._eager_compiles.wrapper(original))

    def _per_thread(self, stand_in: Callable[..., Any],
                    real: Callable[..., Any]) -> Callable[..., Any]:
        """``stand_in`` in a thread that runs a session (and the DataLoader pinning thread,
        which runs under a session's mode), ``real`` elsewhere."""
        modes = _thread_modes

        @functools.wraps(real)
        def query(*args: Any, **kwargs: Any) -> Any:
            if _get_ident() in modes or _predict_mode_here():
                return stand_in(*args, **kwargs)
            return real(*args, **kwargs)

        return query

    def _compile_wrapper(self, original_compile: Callable[..., Any]) -> Callable[..., Any]:
        session = self

        @functools.wraps(original_compile)
        def compile(*args: Any, **kwargs: Any) -> Any:
            compiled = original_compile(*args, **kwargs)  # imports torch._dynamo
            owner = _active_session  # this one, or, once it ended, none (patches gone)
            (owner or session)._disable_dynamo()
            return compiled

        return compile

    def _cudnn_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self

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

    def _load_wrapper(self, original_load: Callable[..., Any]) -> Callable[..., Any]:
        session = self

        @functools.wraps(original_load)
        def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
            if callable(map_location):
                return original_load(f, map_location, *args, **kwargs)
            frame = _user_frame()
            import torch.serialization

            def to_cpu_standing_in(storage: Any, location: str) -> Any:
                target = _mapped_location(map_location, location)
                if target.startswith("cuda"):
                    session.registry.mark_storage(storage)
                    if storage.nbytes():  # an empty storage's copy moves nothing
                        session.record("to_device", frame)
                    return storage
                if target.startswith("cpu"):
                    return storage
                return torch.serialization.default_restore_location(storage, target)

            return original_load(f, to_cpu_standing_in, *args, **kwargs)

        return load

    def _grouping_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self

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

    def _pinning_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        session = self

        @functools.wraps(original)
        def pin_memory(data: Any, device: Any = None) -> Any:
            if _active_session is None or _get_ident() in _thread_modes or _predict_mode_here():
                return original(data, device)
            # In the DataLoader's pinning thread, which has no mode of its own (modes are
            # per thread): Tensor.pin_memory, its only torch call, needs our stand-in.
            with _new_predict_mode(session):
                return original(data, device)

        return pin_memory


#: How the report's note about compiled code run eagerly starts (pytest's summary looks
#: for it among a report's notes).
COMPILE_NOTE_PREFIX = "torch.compile ran eagerly"

#: Calls of compiled functions run eagerly by any session of this process, by function
#: name (only ever growing): what pytest --syncfree's summary reads before and after each
#: test (pytest_cuda.py), whatever watch the test ran under.
eager_compiled_calls: dict[str, int] = {}


class _EagerCompiles:
    """Calls of ``torch.compile``'d code while a session runs it eagerly, for the report.

    Counted per (compiled function, calling line); one note at the end of the session
    names them, so that no "does it compile" test or training script passes through
    predict mode believing it compiled.
    """

    MAX_NAMED = 3

    def __init__(self, session: PredictSession) -> None:
        self.session = session
        self.calls: dict[tuple[str, str], int] = {}
        self.noted = False

    def wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        eager = self

        @functools.wraps(original)
        def callback_from_stance(callback: Any) -> Any:
            if callback is not None and callback is not False and eager.session.active:
                eager.seen(sys._getframe(1))
            return original(callback)

        return callback_from_stance

    def seen(self, frame: Any) -> None:
        """A compiled function is being called; ``frame`` is dynamo's wrapper's."""
        import torch

        fn = frame.f_locals.get("fn") if frame.f_code.co_name == "compile_wrapper" else None
        owner = getattr(fn, "__self__", None)
        if owner is not None and issubclass(type(owner), torch.nn.Module):
            name = type(owner).__name__  # a compiled module (OptimizedModule, Module.compile)
        else:
            name = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
                       or "a torch._dynamo.optimize block")
        torch_dir = os.path.dirname(torch.__file__) + os.sep
        caller = frame.f_back
        while caller is not None and (caller.f_code.co_filename.startswith(torch_dir)
                                      or caller.f_code.co_filename == __file__):
            caller = caller.f_back
        where = "?"
        if caller is not None:
            filename = caller.f_code.co_filename
            if filename.startswith("<"):  # a notebook cell
                where = f"line {caller.f_lineno}"
            else:
                try:
                    relative = os.path.relpath(filename)
                except ValueError:  # another drive (Windows)
                    relative = filename
                where = f"{filename if relative.startswith('..') else relative}:{caller.f_lineno}"
        key = (name, where)
        self.calls[key] = self.calls.get(key, 0) + 1
        eager_compiled_calls[name] = eager_compiled_calls.get(name, 0) + 1

    def note(self) -> None:
        """Tell the recorder (once, at the end of the session)."""
        note = getattr(self.session.recorder, "note", None)
        if self.noted or not self.calls or note is None:
            return
        self.noted = True
        named = sorted(self.calls.items(), key=lambda item: -item[1])
        parts = [f"`{name}` called at {where} ×{n}" for (name, where), n in named[:self.MAX_NAMED]]
        more = f" and {len(named) - self.MAX_NAMED} more" if len(named) > self.MAX_NAMED else ""
        note(f"{COMPILE_NOTE_PREFIX} in predict mode: {', '.join(parts)}{more}. Without a GPU "
             "it cannot compile for one: the syncs of the compiled code are predicted op by "
             "op as eager code; on a GPU compiling also syncs (once per graph) and a graph "
             "break can move a sync")


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


class _Saving:
    """``torch.save`` of virtual CUDA tensors, as on a GPU.

    On a GPU, ``_save`` copies each CUDA storage to the host (``storage.cpu()``): one sync
    per storage, however many tensors view it (measured: 60 tensors of a state dict, 60
    syncs per checkpoint; H100, torch 2.11), and the file records ``cuda:0`` as the
    storage's location, which ``torch.load`` without ``map_location`` restores to CUDA.
    """

    def __init__(self, session: PredictSession) -> None:
        self.session = session
        self.local = threading.local()  # per thread: the storages of the saves under way

    def location_tag_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        saving = self

        @functools.wraps(original)
        def location_tag(storage: Any) -> Any:
            registry = saving.session.registry
            untyped = getattr(storage, "_untyped_storage", storage)  # a TypedStorage's
            if registry is None or not registry.is_cuda_storage(untyped):
                return original(storage)
            saves = getattr(saving.local, "saves", None)
            if saves and untyped.nbytes():  # an empty storage's copy moves nothing
                saves[-1].setdefault(untyped._cdata, True)  # torch's id_map key
            return "cuda:0"

        return location_tag

    def save_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        saving = self

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            saves = saving.local.__dict__.setdefault("saves", [])
            saves.append({})
            frame = _user_frame()
            try:
                result = original(*args, **kwargs)
            finally:
                storages = saves.pop()
            if storages and saving.session.active:
                saving.session.record("to_host", frame, len(storages))
            return result

        return save


def _release_claim(session: PredictSession) -> None:
    with _lock:
        for i in range(len(_claims) - 1, -1, -1):
            if _claims[i] is session:
                del _claims[i]


def _hold_patches(session: PredictSession) -> None:
    """The first session in installs the patches; later ones share them (their Event and
    Stream stand-ins, default stream and patch record are the first one's)."""
    global _active_session
    with _lock:
        owner = _active_session
        if owner is None:
            _active_session = session  # before anything is patched: the release restores it
            # Stand-in classes (what torch.cuda.Event/Stream become).
            bound = {"_session": session, "__module__": "torch.cuda"}
            session.event_type = type("Event", (_Event,), bound)
            session.stream_type = type("Stream", (_Stream,), bound)
            session._default_stream = session.stream_type()
            _patch_holders.append(session)
            session._install_patches()
            return
        session._patches = owner._patches
        session.event_type, session.stream_type = owner.event_type, owner.stream_type
        session._default_stream = owner._default_stream
        if not any(s is session for s in _patch_holders):
            _patch_holders.append(session)


def _release_patches(session: PredictSession) -> None:
    """Idempotent: the last session out restores the patches (whoever installed them)."""
    global _active_session
    with _lock:
        for i in range(len(_patch_holders) - 1, -1, -1):
            if _patch_holders[i] is session:
                del _patch_holders[i]
        if _patch_holders:
            return
        owner = _active_session
        if owner is not None:
            owner._patches.restore()
        _active_session = None


def _claim_thread_mode(session: PredictSession) -> bool:
    """Whether ``session`` runs this thread's mode (False: the thread runs one already)."""
    with _lock:
        current = _thread_modes.get(session._thread)
        if current is not None and current is not session:
            return False
        _thread_modes[session._thread] = session
        return True


def _release_thread_mode(session: PredictSession) -> None:
    """Idempotent. Run after the session's mode is off the stack: when an inert session of
    this thread is still running (asyncio tasks that end out of order), its mode takes over."""
    with _lock:
        if _thread_modes.get(session._thread) is not session:
            return
        del _thread_modes[session._thread]
        heir = next((s for s in _claims if s._thread == session._thread and s is not session
                     and s._undo is not None and s._mode is None), None)
        if heir is None or session._thread != _get_ident():
            return
        _thread_modes[heir._thread] = heir
        mode = heir._mode = _new_predict_mode(heir)
        heir._undo.push(_ModeRemoval(mode))
        mode.__enter__()
        heir.active = True


def _first_session_here() -> PredictSession | None:
    ident = _get_ident()
    for session in _claims:
        if session._thread == ident:
            return session
    return None


def _owner() -> Any:
    dispatch = _dispatch_module()
    return dispatch.owner() if dispatch is not None else None


def _unowned(count: int) -> None:
    dispatch = _dispatch_module()
    if dispatch is not None:
        dispatch.unowned(count)


_dispatch: list[Any] = []


def _dispatch_module() -> Any:
    if not _dispatch:
        from .. import dispatch

        _dispatch.append(dispatch)
    return _dispatch[0]


def _predict_mode_here() -> bool:
    """Whether a predict session's mode is on this thread's function-mode stack."""
    if _predict_mode_class is None:
        return False
    from torch.overrides import _get_current_function_mode_stack

    return any(type(m) is _predict_mode_class for m in _get_current_function_mode_stack())


def _mapped_location(map_location: Any, location: str) -> str:
    import torch

    if map_location is None:
        return location
    if isinstance(map_location, dict):
        return str(map_location.get(location, location))
    if isinstance(map_location, torch.device):
        return str(map_location)
    if isinstance(map_location, int) and not isinstance(map_location, bool):
        return f"cuda:{map_location}"
    return str(map_location)


_SKIPPED: frozenset[str] | None = None


def _user_frame() -> Any:
    """The innermost frame outside this module and torch's torch-function dispatch
    (torch/overrides.py, handle_torch_function)."""
    global _SKIPPED
    if _SKIPPED is None:
        import torch.overrides

        _SKIPPED = frozenset({_user_frame.__code__.co_filename,
                              torch.overrides.handle_torch_function.__code__.co_filename})
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in _SKIPPED:
        frame = frame.f_back
    return frame


def _function_mode_active(mode: Any) -> bool:
    from torch.overrides import _get_current_function_mode_stack

    return any(m is mode for m in _get_current_function_mode_stack())


class _ModeRemoval:
    """Takes ``mode`` off torch's function-mode stack even if code left modes above it.

    Modes pushed above ours (``torch.set_default_device`` pushes one and never pops it)
    are put back in order. The stack to end with is worked out once; each run pops until
    the stack is a prefix of it and pushes the rest, so a run cut short by an interrupt
    and run again loses no mode (torch/overrides.py: _pop_mode/_push_mode).
    """

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.keep: list[Any] | None = None

    def __call__(self) -> None:
        import torch

        C = torch._C
        keep = self.keep
        if keep is None:
            stack = [C._get_function_stack_at(i) for i in range(C._len_torch_function_stack())]
            if not any(m is self.mode for m in stack):
                return  # never pushed (or already removed)
            keep = self.keep = [m for m in stack if m is not self.mode]
        while True:
            n = C._len_torch_function_stack()
            if n <= len(keep) and all(C._get_function_stack_at(i) is keep[i] for i in range(n)):
                break
            C._pop_torch_function_stack()
        while C._len_torch_function_stack() < len(keep):
            C._push_on_torch_function_stack(keep[C._len_torch_function_stack()])


def real_cuda_available() -> bool:
    """``torch.cuda.is_available()`` as the process would answer without predict mode."""
    import torch

    session = _active_session
    is_available = (session.real(torch.cuda, "is_available") if session is not None
                    else torch.cuda.is_available)
    # pytest --syncfree-cuda answers as a GPU machine for the whole run (pytest_cuda.py)
    is_available = getattr(is_available, "_syncfree_real", is_available)
    return bool(is_available())


# -- CPU stand-ins for torch.cuda streams, events and device contexts -------------------


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class _DeviceProperties:
    """What ``torch.cuda.get_device_properties`` answers for the virtual device."""

    name = "CPU stand-in (syncfree predict mode)"
    major, minor = 9, 0
    total_memory = _host_memory_bytes()
    multi_processor_count = os.cpu_count() or 1
    is_integrated = False
    is_multi_gpu_board = False

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB)")


_DEVICE_PROPERTIES = _DeviceProperties()


class _DeviceContext(contextlib.AbstractContextManager):
    """``torch.cuda.device(i)`` / ``device_of(t)``: there is one virtual device."""

    def __init__(self, device: Any = None) -> None:
        self.idx = 0

    def __exit__(self, *exc: Any) -> None:
        return None


@contextlib.contextmanager
def _stream_context(stream: Any = None) -> Iterator[Any]:
    yield stream


class _Event:
    """``torch.cuda.Event`` on the CPU: ``synchronize`` is a sync, ``wait``/``query`` are not."""

    _session: PredictSession

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
        self._session.record("explicit", _user_frame())

    def elapsed_time(self, end_event: _Event) -> float:
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def __repr__(self) -> str:
        return "<torch.cuda.Event (syncfree predict stand-in)>"


class _Stream:
    """``torch.cuda.Stream`` on the CPU: ``synchronize`` is a sync, the rest are no-ops."""

    _session: PredictSession

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.priority = priority
        self.cuda_stream = 0

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", 0)

    def synchronize(self) -> None:
        self._session.record("stream_sync", _user_frame())

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

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "<torch.cuda.Stream (syncfree predict stand-in)>"


class _LegacyCudaType(type):
    """Metaclass of the ``torch.cuda.FloatTensor``-style stand-ins."""

    _session: PredictSession
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
            cls._session.record("tensor_from_python", _user_frame())
        cls._session.registry.mark_cuda(tensor)
        return tensor

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


def _legacy_cuda_type(session: PredictSession, name: str) -> type:
    import torch

    cpu_type = getattr(torch, name)
    return _LegacyCudaType(name, (), {
        "_session": session, "_cpu_type": cpu_type, "dtype": cpu_type.dtype,
        "__module__": "torch.cuda",
    })


# -- the mode ---------------------------------------------------------------------------


def _make_mode_class() -> type:
    global _Tensor
    import torch
    from torch.overrides import TorchFunctionMode

    _Tensor = torch.Tensor

    class PredictMode(TorchFunctionMode):
        """Routes torch calls to the stand-in handlers of one PredictSession."""

        def __init__(self, session: PredictSession) -> None:
            super().__init__()
            self.session = session
            self.registry = session.registry
            self.handlers = _handlers()
            self.getters = _getters()
            self._handler_for = self.handlers.get

        def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            try:
                handler = self._handler_for(func)
            except TypeError:  # an unhashable callable
                handler = None
            if handler is not None:
                return handler(self, func, args, kwargs)
            if type(func) is not _MethodWrapper:  # attribute access comes as a method-wrapper
                return _call_generic(self, func, args, kwargs)
            name = func.__name__
            if name == "__get__" or name == "__set__":
                handler = self.getters.get((getattr(func, "__self__", None), name))
                if handler is not None:
                    return handler(self, func, args, kwargs)
                # Attribute reads and writes never sync, and a read that gives no tensor
                # (dtype, shape, requires_grad: most of them) has nothing to mark.
                result = func(*args, **kwargs)
                if name == "__set__" or not isinstance(result, _Tensor):
                    return result
                registry = self.registry
                # .grad, .data, .T, ...: mostly virtual already (an optimizer reads each
                # parameter's .grad several times a step); else virtual if the tensor is.
                if not registry.is_cuda(result) and args and isinstance(args[0], _Tensor) \
                        and registry.is_cuda(args[0]):
                    registry.mark_results((result,), set())
                return result
            return _call_generic(self, func, args, kwargs)

    return PredictMode


_predict_mode_class: type | None = None


def _new_predict_mode(session: PredictSession) -> Any:
    """A TorchFunctionMode for ``session`` (the class is built on first use: torch is
    imported lazily)."""
    global _predict_mode_class
    if _predict_mode_class is None:
        _predict_mode_class = _make_mode_class()
    return _predict_mode_class(session)


_CUDA = object()  # marker: the call targets the virtual CUDA device


def _call_generic(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run any torch call on the CPU and mark its fresh results as virtual CUDA tensors.

    Results are virtual when the call names a CUDA device (or is a factory under
    ``torch.set_default_device('cuda')``/``with torch.device('cuda')``), or names no
    device and has a virtual input. In-place and ``out=`` results (their storage is a
    non-virtual input's) keep their device, as on a GPU.
    """
    registry = mode.registry
    target: Any = None
    device = kwargs.get("device") if kwargs else None
    if device is None and _default_device_is_cuda() and func in _device_constructors():
        device = "cuda"  # the DeviceContext below us would fill in the CUDA default
    if device is not None:
        if _is_cuda_device(device):
            kwargs = dict(kwargs, device="cpu")
            target = _CUDA
        else:
            target = device
    pin = False
    if kwargs and kwargs.get("pin_memory"):
        kwargs = dict(kwargs, pin_memory=False)
        pin = True
    inputs = _call_tensors(args, kwargs)
    if not inputs and target is None and not pin:
        return func(*args, **kwargs)  # no tensor in, no device named: nothing to mark
    # kept: storages of host inputs, where in-place and out= results stay
    virtual_input, kept = registry.split_inputs(inputs)
    if virtual_input:  # an op no handler covers: the measured table (capture/optable.py)
        syncs = _optable().on_call(mode.session, func, args, kwargs, mode.handlers)
        if syncs:
            _record(mode, "library", syncs)
    result = func(*args, **kwargs)
    if target is _CUDA or (target is None and virtual_input):
        if isinstance(result, _Tensor):
            registry.mark_results((result,), kept)
        else:
            results: list[Any] = []
            _collect_tensors(result, results, 0)
            registry.mark_results(results, kept)
    if pin:
        for out in _tensors_in(result):
            registry.mark_pinned(out)
    return result


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
    return current is not None and _is_cuda_device(current)


def _device_constructors() -> Any:
    import torch.utils._device as device_module

    return device_module._device_constructors()


def _virtual(mode: Any, value: Any) -> bool:
    return isinstance(value, _Tensor) and mode.registry.is_cuda(value)  # bound by the mode


def _record(mode: Any, kind: str, count: int = 1) -> None:
    mode.session.record(kind, _user_frame(), count)


def _when_virtual(kind: str, count: int = 1) -> Callable[..., Any]:
    """Handler: ``count`` syncs of ``kind`` when the tensor (first argument) is virtual."""

    def handler(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor = args[0] if args else next(iter(kwargs.values()), None)
        if _virtual(mode, tensor):
            _record(mode, kind, count)
        return _call_generic(mode, func, args, kwargs)

    return handler


def _when_any_virtual(kind: str, count: int = 1) -> Callable[..., Any]:
    def handler(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        if any(mode.registry.is_cuda(t) for v in (args, kwargs) for t in _tensors_in(v)):
            _record(mode, kind, count)
        return _call_generic(mode, func, args, kwargs)

    return handler


def _handle_format(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, spec = args[0], (args[1] if len(args) > 1 else kwargs.get("format_spec", ""))
    if _virtual(mode, tensor):
        # torch/_tensor.py: a 0-d Tensor formats its item(); others (and subclasses such
        # as Parameter) go through object.__format__, which allows only '' -> str(self).
        if tensor.dim() == 0 and type(tensor) is torch.Tensor:
            _record(mode, "format")
        elif spec == "":
            _record(mode, "print")
    return func(*args, **kwargs)


def _handle_tolist(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if _virtual(mode, args[0]) and _holds_data(args[0]):  # an empty copy makes no sync
        _record(mode, "tolist")
    return func(*args, **kwargs)


def _handle_numpy(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    tensor = args[0]
    if _virtual(mode, tensor):
        force = kwargs.get("force", args[1] if len(args) > 1 else False)
        if not force:
            # The error torch raises for a CUDA tensor (torch/csrc/utils/tensor_numpy.cpp).
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to "
                "copy the tensor to host memory first.")
        _record(mode, "to_host")
    return func(*args, **kwargs)


def _handle_array(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if _virtual(mode, args[0]):
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
        _record(mode, "to_device" if to_cuda else "to_host")
    # A move between the virtual and the real device copies, as a device copy would.
    result = torch.Tensor.to(tensor, dtype=dtype, non_blocking=non_blocking,
                             copy=copy or moves, **extra)
    if to_cuda or (to_cuda is None and source_virtual):
        registry.mark_cuda(result)
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
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs)
    except (TypeError, RuntimeError):
        # Arguments torch itself rejects: let torch raise its own error.
        return _call_generic(mode, func, args, dict(kwargs, copy=copy) if copy else kwargs)
    if device is not None and device.type not in ("cuda", "cpu"):
        return _call_generic(mode, func, args, dict(kwargs, copy=copy) if copy else kwargs)
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
        return _call_generic(mode, func, args, kwargs)
    to_cuda, dtype = target
    return _move(mode, tensor, to_cuda, dtype, non_blocking)


def _handle_copy_(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    destination, source = args[0], (args[1] if len(args) > 1 else kwargs.get("src"))
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    dst_virtual, src_virtual = mode.registry.is_cuda(destination), _virtual(mode, source)
    if dst_virtual != src_virtual and not non_blocking and _holds_data(destination):
        _record(mode, "to_host" if src_virtual else "to_device")
    return func(*args, **kwargs)


def _handle_deepcopy(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``Tensor.__deepcopy__(self, memo)``: the copy is where ``self`` is. Only ``self`` is
    looked at: the memo holds every object copied so far (user objects among them)."""
    tensor = args[0]
    result = func(*args, **kwargs)
    if _virtual(mode, tensor) and issubclass(type(result), _Tensor):
        mode.registry.mark_cuda(result)
        grad = result.grad  # copied inside torch's __deepcopy__, where our mode is popped
        if grad is not None and _virtual(mode, tensor.grad):
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
        if _virtual(mode, lengths):
            # The error a GPU run gets (aten/src/ATen/native/PackedSequence.cpp,
            # checkLongTensor): the lengths must be on the host.
            raise RuntimeError("'lengths' argument should be a 1D CPU int64 tensor, but got "
                               f"{lengths.dim()}D cuda:0 {_type_name(lengths)} tensor")
    result = func(*args, **kwargs)
    data = args[0] if args else next(iter(kwargs.values()), None)
    if _virtual(mode, data):
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
        if any(_virtual(mode, t) for t in _call_tensors(args, kwargs)):
            n = syncs(args, kwargs)
            if n:
                _record(mode, "library", n)
            result = func(*args, **kwargs)
            for out in _tensors_in(result):
                mode.registry.mark_cuda(out)
            return result
        return func(*args, **kwargs)

    return handler


def _from_mask_syncs(args: tuple, kwargs: dict) -> int:
    # aten/src/ATen/native/nested/NestedTensorTransformerFunctions.cpp,
    # NestedTensor_nested_tensor_from_mask: the optional left-aligned check (an equal()),
    # the sizes check (another equal()) and the sizes copied to the host (.to(kCPU)).
    mask_check = args[2] if len(args) > 2 else kwargs.get("mask_check", True)
    return 2 + (1 if mask_check else 0)


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


def _handle_get_device(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return 0 if mode.registry.is_cuda(args[0]) else func(*args, **kwargs)


def _python_data_syncs(mode: Any, data: Any) -> int:
    """``torch.tensor([t0, t1])`` reads each CUDA element with item()."""
    import torch

    if isinstance(data, torch.Tensor):
        return 0
    return sum(1 for t in _tensors_in(data) if mode.registry.is_cuda(t))


def _handle_tensor_from_data(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """``torch.tensor/as_tensor/asarray``: building a CUDA tensor from host data syncs."""
    import torch

    if func is torch.as_tensor and len(args) > 1:  # as_tensor(data, dtype, device)
        kwargs = dict(kwargs, **dict(zip(("dtype", "device"), args[1:3])))
        args = args[:1]
    data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
    device = kwargs.get("device")
    reads = _python_data_syncs(mode, data)
    if reads:
        _record(mode, "python_scalar", reads)
    data_virtual = _virtual(mode, data)
    if device is None:
        if isinstance(data, torch.Tensor):
            return _call_generic(mode, func, args, kwargs)  # keeps the data's device
        # Host data and no device: a CPU tensor even when the elements were on CUDA.
        return func(*args, **kwargs)
    kind = None
    if _is_cuda_device(device):
        if not isinstance(data, torch.Tensor):
            kind = "tensor_from_python"
        elif not data_virtual:
            kind = "to_device"
    elif data_virtual:
        kind = "to_host"
    result = _call_generic(mode, func, args, kwargs)
    if kind is not None and _holds_data(result):  # torch.tensor([], device='cuda'): no copy
        _record(mode, kind)
    return result


def _handle_new_tensor(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, data = args[0], (args[1] if len(args) > 1 else kwargs.get("data"))
    device = kwargs.get("device")
    to_cuda = _is_cuda_device(device) if device is not None else mode.registry.is_cuda(tensor)
    reads = _python_data_syncs(mode, data)
    if reads:
        _record(mode, "python_scalar", reads)
    kind = None
    if to_cuda:
        if isinstance(data, torch.Tensor):
            if not mode.registry.is_cuda(data):
                kind = "to_device"
        else:
            kind = "tensor_from_python"
    if device is not None:
        result = _call_generic(mode, func, args, kwargs)
    else:
        result = func(*args, **kwargs)
        if to_cuda:
            mode.registry.mark_cuda(result)
    if kind is not None and _holds_data(result):
        _record(mode, kind)
    return result


def _handle_where(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if len(args) + len(kwargs) == 1 and _virtual(mode, (args or tuple(kwargs.values()))[0]):
        _record(mode, "nonzero")  # torch.where(cond) is nonzero(cond, as_tuple=True)
    return _call_generic(mode, func, args, kwargs)


def _handle_repeat_interleave(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    # repeat_interleave(repeats) or repeat_interleave(input, repeats, dim, *, output_size)
    if len(args) == 1 and "repeats" not in kwargs:
        repeats = args[0]
    else:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    output_size = kwargs.get("output_size")
    if output_size is None and _virtual(mode, repeats):
        _record(mode, "repeat_interleave", 2)  # measured: the output size and a check
    return _call_generic(mode, func, args, kwargs)


def _handle_histc(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    names = ("input", "bins", "min", "max")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if _virtual(mode, bound.get("input")) and bound.get("min", 0) == bound.get("max", 0):
        _record(mode, "histc", 2)  # the range is read from the data: min and max
    return _call_generic(mode, func, args, kwargs)


def _handle_one_hot(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    num_classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
    if num_classes == -1 and _virtual(mode, args[0] if args else kwargs.get("tensor")):
        _record(mode, "one_hot")
    return _call_generic(mode, func, args, kwargs)


def _handle_equal(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    values = [*args, *kwargs.values()]
    # A Python bool from the device; equal(x, x) and tensors of different shapes answer
    # on the host (measured: OpInfo `equal` samples of shapes (S,) and () gave 0).
    if (len(values) >= 2 and values[0] is not values[1]
            and any(_virtual(mode, v) for v in values)
            and not (isinstance(values[0], torch.Tensor) and isinstance(values[1], torch.Tensor)
                     and values[0].shape != values[1].shape)):
        _record(mode, "allclose")
    return func(*args, **kwargs)


def _handle_contains(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    if _virtual(mode, args[0]):
        _record(mode, "python_bool")  # torch/_tensor.py: bool((element == self).any().item())
    return func(*args, **kwargs)


# -- indexing ---------------------------------------------------------------------------


def _index_components(index: Any) -> tuple:
    """The index as torch's Python indexing splits it (wrapTuple/treatSequenceAsTuple in
    torch/csrc/autograd/python_variable_indexing.cpp)."""
    import torch

    if issubclass(type(index), tuple):
        return tuple(tuple.__iter__(index))
    # A list is read through list's own slots (as _collect_tensors reads containers).
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
                    # handleDimInMultiDimIndexing reads a 0-d index with item().
                    if virtual:
                        self.kinds.append("index")
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


def _handle_getitem(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    tensor, index = args[0], args[1]
    self_virtual = mode.registry.is_cuda(tensor)
    syncs = _IndexSyncs(mode, self_virtual, index)
    kinds = list(syncs.kinds)
    if self_virtual:
        kinds += ["mask_index"] * syncs.virtual_masks  # nonzero() of each CUDA mask
    for kind in kinds:
        _record(mode, kind)
    return _call_generic(mode, func, args, kwargs)


def _handle_setitem(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    import torch

    tensor, index, value = args[0], args[1], args[2]
    registry = mode.registry
    self_virtual = registry.is_cuda(tensor)
    if index is False:
        return func(*args, **kwargs)  # python_variable_indexing.cpp: a no-op
    syncs = _IndexSyncs(mode, self_virtual, index)
    kinds = list(syncs.kinds)
    value_virtual = _virtual(mode, value)
    if isinstance(value, torch.Tensor):
        value_host_scalar = not value_virtual and value.dim() == 0
        value_host_single = not value_virtual and value.numel() == 1
        value_host_tensor = not value_virtual and value.dim() > 0
    else:
        # A Python number becomes a 0-d host tensor for a CUDA destination.
        value_host_scalar = value_host_single = _is_python_number(value)
        value_host_tensor = False
    scalar_into_slice = False
    if self_virtual:
        if syncs.advanced == 0:
            # copy_to (aten/src/ATen/TensorIndexing.h): a same-shape copy_ from the host
            # syncs; a host scalar into a larger slice is a fill_ (decided below, once
            # the index is known to be valid).
            if value_host_tensor:
                kinds.append("index_put")
            scalar_into_slice = value_host_scalar
        elif value_host_single and syncs.virtual_masks == 1 and syncs.other_advanced == 0:
            pass  # index_put_ -> masked_fill_(mask, value.item()): no sync
        else:
            kinds += ["mask_index"] * syncs.virtual_masks
            if value_host_scalar:
                kinds.append("index_put")  # value.to(self.device()) in _index_put_impl_
    elif value_virtual:
        kinds.append("to_host")  # a CUDA value copied into a host tensor
    for kind in kinds:
        _record(mode, kind)
    result = func(*args, **kwargs)
    if scalar_into_slice and torch.Tensor.__getitem__(tensor, index).dim() == 0:
        _record(mode, "index_put")
    return result


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


def _handlers() -> dict[Any, Callable[..., Any]]:
    global _HANDLERS
    if _HANDLERS is not None:
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
        T.cuda: _handle_cuda,
        T.cpu: _handle_cpu,
        T.type: _handle_type,
        T.copy_: _handle_copy_,
        T.pin_memory: _handle_pin_memory,
        T.is_pinned: _handle_is_pinned,
        T.record_stream: _handle_record_stream,
        T.get_device: _handle_get_device,
        T.__deepcopy__: _handle_deepcopy,
        # nn.TransformerEncoder's fast path with a padding mask (nested tensors):
        # NestedTensor_nested_tensor_from_mask_left_aligned ends in an equal();
        # nested_from_padded and the layers copy their metadata non_blocking (no sync);
        # NestedTensor_to_padded_tensor_cuda copies it blocking (one).
        torch._nested_tensor_from_mask_left_aligned: _from_torch_source(lambda a, k: 1),
        torch._nested_tensor_from_mask: _from_torch_source(_from_mask_syncs),
        torch._transformer_encoder_layer_fwd: _from_torch_source(lambda a, k: 0),
        # nn.MultiheadAttention's fast path (attention.cu: masked softmax on the device)
        torch._native_multi_head_attention: _from_torch_source(lambda a, k: 0),
        # nn.LSTM/GRU/RNN (packed or not): cuDNN takes batch_sizes as host numbers
        # (aten/src/ATen/native/cudnn/RNN.cpp), nothing read back
        **{getattr(torch, name): _from_torch_source(lambda a, k: 0)
           for name in ("lstm", "gru", "rnn_tanh", "rnn_relu") if hasattr(torch, name)},
        T.to_padded_tensor: _from_torch_source(
            lambda a, k: 1 if getattr(a[0], "is_nested", False) else 0),
        torch._pack_padded_sequence: _handle_packed_sequence,
        torch._pad_packed_sequence: _handle_packed_sequence,
        T.__getitem__: _handle_getitem,
        T.__setitem__: _handle_setitem,
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
        # bincount reads min and max to size its output: 2 syncs.
        torch.bincount: _when_virtual("bincount", 2),
        T.bincount: _when_virtual("bincount", 2),
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
    _HANDLERS = table
    return table


def _getters() -> dict[Any, Callable[..., Any]]:
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
