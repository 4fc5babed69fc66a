"""Predict mode: run code written for CUDA on the CPU and report the syncs it would make.

When the kernel has no CUDA device, ``%%syncfree`` runs the cell inside a
:class:`PredictSession`. Inside it:

* ``device='cuda'`` arguments, ``.cuda()``, ``.to('cuda')``, ``module.cuda()``,
  ``torch.tensor(..., device='cuda')``, the legacy ``torch.cuda.FloatTensor`` types and
  ``torch.load`` of storages saved on CUDA (or mapped there by ``map_location``) create
  ordinary CPU tensors that the session remembers as *virtually on CUDA*; ``torch.save``
  writes virtual CUDA storages as CUDA ones (one predicted sync per storage).
  ``torch.cuda.is_available()`` (and ``torch.accelerator.is_available()``) answer True,
  so ``'cuda' if torch.cuda.is_available() else 'cpu'`` takes the CUDA path, and virtual
  tensors answer ``device == cuda:0`` and ``is_cuda == True``.
* Every operation that would make the CPU wait for the GPU if those tensors were on a
  GPU is reported to the recorder through ``recorder.record_sync(frame, kind,
  predicted=True)``, one call per sync event, with the innermost user-level frame.
* What the cell computes is unchanged apart from running on the CPU: the same values,
  the same copy-versus-alias semantics (``x.cpu()`` of a virtual tensor is a copy, as on
  a GPU), the same exceptions. Two GPU errors are reproduced on purpose because the
  code cannot run on a GPU either: ``.numpy()``/``np.asarray`` of a CUDA tensor and
  ``.pin_memory()`` of a CUDA tensor.

Where each part lives (one job per module):

* ``session.py``: `PredictSession`, entering and leaving (every change undone on every
  exit path) and telling the recorder each predicted sync;
* ``claims.py``: which sessions run where (process-wide patches, one mode per thread);
* ``registry.py``: which tensors are virtually on CUDA, and finding the tensors in a
  call's arguments without running user code;
* ``mode.py``: the ``TorchFunctionMode`` and the generic path of every call (fresh results
  marked virtual, the measured op table for ops no handler covers);
* ``custom_ops.py``: operators registered from Python (``torch.library``), whose kernels
  run with the mode on the stack;
* ``handlers.py`` and ``indexing.py``: what each torch call predicts (``linalg.py``: ``matrix_exp``'s count, which
  its backward formula shares);
* ``standins.py``: the stand-in streams, events, device contexts and properties and the
  legacy ``torch.cuda.FloatTensor``-style types;
* ``patches.py``: what a mode cannot see, patched for the session (with
  ``checkpoints.py`` for ``torch.save``/``torch.load``, ``compiles.py`` for
  ``torch.compile``, ``cuda_api.py`` for the rest of ``torch.cuda``,
  ``distributed.py`` for ``torch.distributed``, ``autograd.py`` for the backward pass and
  ``torchscript.py`` for scripted and traced code).

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

``torch.compile``'d code (compiles.py) compiles for real when no virtual CUDA value reaches
it (CPU code: the session steps aside for the call, and torch's compiler sees the real
``torch.cuda``); where one does, or where its code uses the CUDA device, it runs eagerly, its
syncs are predicted op by op, and the report's notes name each compiled function that ran
so, where it was called and why (:data:`COMPILE_NOTE_PREFIX`).

Known limits: torch function modes are per thread, so code in threads the cell starts
runs without the stand-ins (the DataLoader's pinning thread is handled); syncs in custom
CUDA extensions are not predicted (``torch.distributed``'s are: distributed.py);
device-mismatch errors that a GPU would raise (a CPU and a CUDA operand) are not
reproduced; device queries without a stand-in (patches.py, cuda_api.py) still answer
as the CPU build does (most raise "Torch not compiled with CUDA");
a ``torch.set_default_device('cuda')`` made by the cell outlives the session, as it
would on a GPU, and then fails in code run outside predict mode. Likewise a module
first imported inside a predicted cell runs its top level there, so a module-level
``DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'`` stays ``'cuda'`` afterwards
(Python runs a module's top level once; nothing in torch can re-run it): import such
modules before the cell, or ``importlib.reload`` them after.
"""

from __future__ import annotations

from .compiles import COMPILE_NOTE_PREFIX, eager_compiled_calls
from .engine import PredictEngine
from .patches import real_cuda_available
from .registry import VirtualCudaRegistry
from .session import PredictSession
from .standins import _DEVICE_PROPERTIES  # noqa: F401  (pytest_cuda.py reads it here)
from .torchscript import TORCHSCRIPT_NOTE_PREFIX, unseen_torchscript_calls

__all__ = [
    "COMPILE_NOTE_PREFIX", "PREDICTED_KINDS", "TORCHSCRIPT_NOTE_PREFIX", "UNMEASURED_RULES",
    "PredictEngine", "PredictSession", "VirtualCudaRegistry", "eager_compiled_calls", "real_cuda_available",
    "unseen_torchscript_calls",
]

#: The sync kinds predict mode reports (a subset of the report's kind vocabulary).
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
    "(equal), _nested_tensor_from_mask 1 (+1 with mask_check), to_padded_tensor 1, "
    "_transformer_encoder_layer_fwd and _native_multi_head_attention of a nested "
    "self-attention query 2 where flash or memory-efficient attention takes it (the "
    "cumulative sequence lengths of q and k/v copied to the device), else 0 "
    "(aten/src/ATen/native/nested/, transformers/cuda/attention.cu; the H100's total on "
    "tests/gpu/data/transformer_padding.py, 59, is what these add up to)",
    "torch.lstm/gru/rnn_tanh/rnn_relu (nn.LSTM, GRU, RNN forward), packed or not: 0 "
    "(cudnn/RNN.cpp takes batch_sizes on the host)",
    "matrix_exp: one matrix 2, or 6 past the last Taylor degree's norm; a batch 3; sizes 0 "
    "and 1 and an empty batch 0 (mexp_impl, aten/src/ATen/native/LinearAlgebra.cpp; the "
    "measured 6 and 3 are two of these)",
    "torch.save: 1 per storage, not per tensor (_save copies each storage to the host once, "
    "torch/serialization.py; measured: 1 per tensor of a state dict, whose tensors each "
    "have their own storage)",
)
