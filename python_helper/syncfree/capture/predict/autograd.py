"""Predict mode in the backward pass: the Python code autograd calls (tensor hooks, module
backward hooks, a custom ``autograd.Function``'s ``backward``, checkpoint recomputation)
runs on the stand-ins, and the gradients it receives are virtual CUDA tensors when the
tensors they are the gradients of are.

Two things kept them out:

* ``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad`` reach the
  session's mode (they dispatch on ``has_torch_function``), and a ``TorchFunctionMode`` is
  off the stack while it handles a call (torch/overrides.py, ``_pop_mode_temporarily``);
  the engine runs the whole pass with the thread-local state of that moment, so every
  hook ran without the mode: a ``.item()`` there was never predicted and
  ``torch.zeros(3, device="cuda")`` raised "Torch not compiled with CUDA enabled".
  ``_engine_run_backward`` (torch/autograd/graph.py, looked up in torch/autograd/__init__.py
  at each call) puts the thread's mode back on the stack for the engine's run.
* The engine makes the gradients in C++, where no mode sees them: a hook's ``grad`` is a
  plain CPU tensor. On a GPU it is on the device of the tensor it is the gradient of, so a
  hook registered on a virtual tensor (``Tensor.register_hook``, handlers.py) and the
  ``backward`` of a Function whose outputs are virtual (the forward's ``Function.apply``
  marks its node; ``BackwardCFunction.apply`` marks the gradients it is called with) get
  virtual gradients. Module full backward hooks go through such a Function
  (torch/utils/hooks.py, ``BackwardHookFunction``), so their gradients are virtual too.
"""

from __future__ import annotations

import functools
from typing import Any

from . import here
from .here import Session, predict_mode_here
from .registry import tensors_in


def install(session: Session, patch: Any) -> None:
    import torch.autograd
    import torch.autograd.function as function
    import torch.autograd.graph as graph

    real_run = torch.autograd._engine_run_backward
    run = _engine_run_backward(real_run)
    patch(torch.autograd, "_engine_run_backward", run)
    if getattr(graph, "_engine_run_backward", None) is real_run:
        patch(graph, "_engine_run_backward", run)

    autograd_c = torch._C._autograd
    real_push = getattr(autograd_c, "_push_saved_tensors_default_hooks", None)
    if real_push is not None:
        patch(autograd_c, "_push_saved_tensors_default_hooks", _push_saved_tensors_hooks(real_push))

    base = function.Function
    real_apply = vars(base).get("apply")
    if isinstance(real_apply, classmethod):
        patch(base, "apply", classmethod(_function_apply(session, real_apply.__func__)))
    # The engine calls a custom Function's node through ``apply`` (and, torch >= 2.13, ``apply_boxed`` for a
    # Function with boxed_grads_call), looked up on the node at each call (torch/csrc/autograd/python_function.cpp,
    # PyNode::apply). In torch versions whose ``apply`` calls the user's backward itself (2.11 among them: no
    # ``_get_user_fn``), patching ``_get_user_fn`` alone left the gradients plain CPU tensors, and ``grad * saved``
    # in a backward failed the same-device check ("cuda:0 and cpu", a Gaussian-process library on torch 2.11).
    backward_class = function.BackwardCFunction
    for name in ("apply", "apply_boxed"):
        real_node_apply = vars(backward_class).get(name)
        if real_node_apply is not None:
            patch(backward_class, name, _node_apply(session, real_node_apply))


def _under_the_mode(real: Any) -> Any:
    """``real`` run with this thread's predict mode on the stack, where a session runs here
    and its mode is off the stack (popped by the dispatch of the call that got here)."""

    @functools.wraps(real)
    def under_the_mode(*args: Any, **kwargs: Any) -> Any:
        session = here.thread_modes.get(here.get_ident())
        mode = session._mode if session is not None else None
        if mode is None or predict_mode_here():
            return real(*args, **kwargs)
        import torch

        C = torch._C
        depth = C._len_torch_function_stack()
        C._push_on_torch_function_stack(mode)
        try:
            return real(*args, **kwargs)
        finally:
            # The mode comes off again, with whatever a hook left above it.
            while C._len_torch_function_stack() > depth:
                C._pop_torch_function_stack()

    return under_the_mode


def _engine_run_backward(real: Any) -> Any:
    """``real`` under the mode, with the syncs of the engine's own backward formulas counted (`_engine_syncs`)."""
    under = _under_the_mode(real)

    @functools.wraps(real)
    def run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        session = here.thread_modes.get(here.get_ident())
        handles = _engine_syncs(session, t_outputs) if session is not None else []
        try:
            return under(t_outputs, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()

    return run_backward


# -------------------------------------------------------------------------- the engine's own syncs
# The backward formulas the engine runs in C++ (torch/csrc/autograd/FunctionsManual.cpp) call ops no mode sees. Those
# that read a value back on CUDA, by their node's name: what each run of the node syncs, from its saved values and the
# gradients it gets (measured on an H200, torch 2.11, debug mode's count per backward; tests/test_predict.py's GPU
# twins measure them again).

# What a hook reads of a node: never a saved tensor, whose unpacking runs the saved-tensor hooks (a non-reentrant
# checkpoint recomputes the forward at its first unpack and refuses a second: reading `_saved_self` here made the
# engine's own unpack fail; save_on_cpu's copies it back to the device). What a count needs of the forward is put in
# the node's `metadata` when the forward runs (`mark_node`, `MASKS`); the rest comes from the gradients it gets.

#: metadata keys: the node's forward ran on the stand-ins (its backward runs on CUDA), and how many boolean CUDA masks
#: an index (or an index assignment) took
CUDA = "syncfree.cuda"
MASKS = "syncfree.masks"
#: metadata key: a copy between the host and the device (`.cpu()`, `.cuda()`), whose backward copies the gradient
#: back, blocking: the kind of that copy
COPY = "syncfree.copy"
#: metadata key: an index assignment's accumulate, on a CopySlices node (which saves none)
ACCUMULATE = "syncfree.accumulate"


def _prod_syncs(node: Any, grads: Any) -> int:
    # prod_backward: `(input == 0).nonzero()` (the whole product), `zero_mask.sum(dim).sum().item()` (along a dim);
    # a 0-dim input returns the gradient as it is (counted all the same: the input is not read here)
    return 1


def _cumprod_syncs(node: Any, grads: Any) -> int:
    # cumprod_backward: `(input == 0).any().item()` once the input has more than one element along dim (the gradient
    # has the input's shape)
    grad = grads[0] if grads else None
    dim = node._saved_dim
    if dim >= 1 << 63:  # a negative dim, saved as an unsigned 64-bit number
        dim -= 1 << 64
    if grad is None or grad.numel() <= 1 or grad.dim() == 0 or grad.size(dim) == 1:
        return 0
    return 1


def _index_syncs(node: Any, grads: Any) -> int:
    # index_backward: `_index_put_impl_(zeros, indices, grad, accumulate=true)`: a boolean index is made integer there
    # with nonzero (its forward did the same)
    return int(node.metadata.get(MASKS, 0))


def _index_put_syncs(node: Any, grads: Any) -> int:
    # index_put's derivative: the values' gradient `grad.index(indices)`, and with accumulate=False the input's
    # `grad.index_put(indices, zeros, false)`: each reads a boolean index with nonzero, for each input that needs one
    masks = int(node.metadata.get(MASKS, 0))
    if not masks:
        return 0
    # an assignment into a view: the base's CopySlices runs the IndexPutBackward0 it wraps on the view's part of the
    # gradient, with that node's edges (the base's first) and no saved attribute of its own
    accumulate = node.metadata[ACCUMULATE] if ACCUMULATE in node.metadata else node._saved_accumulate
    edges = [fn is not None for fn, _ in node.next_functions[:2]]
    needed = (edges[0] and not accumulate) + (len(edges) > 1 and edges[1])
    return masks * needed


def _matrix_exp_backward_syncs(node: Any, grads: Any) -> int:
    # linalg_matrix_exp_differential: matrix_exp of the 2n x 2n block matrix [[A^H, G], [0, A^H]], whose 1-norm
    # decides its Taylor degree: A's column sums (kept by `mark_node`) and the gradient's
    import torch

    from .linalg import matrix_exp_syncs_of_norm

    sums, grad = node.metadata.get(MATRIX_EXP_SUMS), grads[0] if grads else None
    if sums is None or not isinstance(grad, torch.Tensor):
        return 0
    double, batch, adjoint_sums = sums
    grad_sums = grad.abs().sum(-2).reshape(-1, grad.size(-1))
    norm = max(float(adjoint_sums.max()), float((grad_sums + adjoint_sums).max()))
    return matrix_exp_syncs_of_norm(norm, double, batch)


#: metadata key: a matrix_exp's (double, batch size, the column sums of |A^H| per matrix) for its backward's count
MATRIX_EXP_SUMS = "syncfree.matrix_exp"


def mark_node(result: Any, masks: int = 0, inputs: Any = (), copy: str | None = None,
              accumulate: bool = False) -> None:
    """The forward of ``result`` ran on the stand-ins: its node, where its backward syncs on CUDA (`ENGINE_SYNCS`),
    gets the `CUDA` mark, and what its count needs (``masks``: the boolean CUDA masks of an index or an index
    assignment, and the assignment's ``accumulate``; a matrix_exp's input's column sums). An index assignment into a
    view (``y[:, 1][mask] = v``) marks the base's CopySlices, which runs the assignment's backward."""
    import torch

    with torch._C.DisableTorchFunction():
        node = getattr(result, "grad_fn", None)
        if node is None:
            return
        name = node.name()
        if masks and name not in ENGINE_SYNCS and result._is_view():
            base = getattr(getattr(result, "_base", None), "grad_fn", None)
            if base is not None and base.name() == "torch::autograd::CopySlices":
                node, name = base, base.name()
                node.metadata[ACCUMULATE] = accumulate
        if name not in ENGINE_SYNCS:
            return
        node.metadata[CUDA] = True
        if masks:
            node.metadata[MASKS] = masks
        if copy:
            node.metadata[COPY] = copy
        if name == "LinalgMatrixExpBackward0" and inputs:
            a = inputs[0]
            adjoint = a.detach().transpose(-2, -1).conj().abs()
            double = a.dtype in (torch.float64, torch.complex128)
            batch = a.numel() // max(a.size(-1) * a.size(-2), 1)
            node.metadata[MATRIX_EXP_SUMS] = (double, batch, adjoint.sum(-2).reshape(-1, a.size(-1)))


#: node name -> (kind, syncs of one run of it); a count of 0 is no sync
ENGINE_SYNCS: dict[str, tuple[str, Any]] = {
    "ProdBackward0": ("nonzero", _prod_syncs),
    "ProdBackward1": ("item", _prod_syncs),
    "CumprodBackward0": ("item", _cumprod_syncs),
    "MaskedScatterBackward0": ("masked_select", lambda node, grads: 1),
    # _to_copy's backward: the gradient copied back to the other device, blocking (`.cpu()` of a loss's part)
    "ToCopyBackward0": ("to_device", lambda node, grads: 1 if node.metadata.get(COPY) else 0),
    "torch::autograd::CopyBackwards": ("to_device", lambda node, grads: 1 if node.metadata.get(COPY) else 0),
    "IndexBackward0": ("mask_index", _index_syncs),
    "IndexPutBackward0": ("mask_index", _index_put_syncs),
    "torch::autograd::CopySlices": ("mask_index", _index_put_syncs),  # marked only for an index assignment into a view (`mark_node`)
    # linalg_eig_backward of the eigenvalues alone: linalg_solve's error check of its LU factorisation (2, measured)
    "LinalgEigBackward0": ("other", lambda node, grads: 2),
    "LinalgMatrixExpBackward0": ("other", _matrix_exp_backward_syncs),
}


def _engine_syncs(session: Session, roots: Any) -> list:
    """Hooks on the nodes of the graph behind ``roots`` (virtual CUDA tensors) whose backward formula syncs on CUDA
    (`ENGINE_SYNCS`), and under ``detect_anomaly`` on every node (the engine reads each gradient a node makes with
    ``isnan(...).item()``): each run of such a node records its syncs, at the line that started the backward pass.
    A ``sync_free`` block around ``loss.backward()`` passed a product's, a cumulative product's (volume rendering)
    or a boolean mask's backward, which sync on a GPU. The hooks come off when the pass ends."""
    registry = session.registry
    if registry is None:
        return []
    import torch

    with torch._C.DisableTorchFunction():
        tensors = [roots] if isinstance(roots, torch.Tensor) else [t for t in roots or () if isinstance(t, torch.Tensor)]
        nodes = [t.grad_fn for t in tensors if t.grad_fn is not None]
        # A loss made on the CPU (`.cpu()` before it) runs the CUDA part of its graph on CUDA all the same: the nodes
        # are judged one by one (`mark_node`), not by the root
        anomaly = torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled() \
            and any(registry.is_cuda(t) for t in tensors)
    if not nodes:
        return []
    frame = _starting_frame()
    handles, seen = [], set()
    while nodes:
        node = nodes.pop()
        if node in seen:
            continue
        seen.add(node)
        try:
            counted = ENGINE_SYNCS.get(node.name())
            if counted is not None and node.metadata.get(CUDA):
                handles.append(node.register_prehook(functools.partial(_node_ran, session, frame, *counted, node)))
            if anomaly:
                handles.append(node.register_hook(functools.partial(_anomaly_checked, session, frame)))
            nodes.extend(fn for fn, _ in node.next_functions if fn is not None)
        except (AttributeError, RuntimeError, TypeError):  # a node that takes no hooks: the pass runs as it would
            continue
    return handles


def _node_ran(session: Session, frame: Any, kind: str, syncs: Any, node: Any, grads: Any) -> None:
    import torch

    try:
        with torch._C.DisableTorchFunction():  # the engine runs the hook under the mode: its reads go past it
            count = syncs(node, grads)
    except (AttributeError, RuntimeError, TypeError, IndexError, ValueError):  # a saved value freed, another shape
        return
    if count:
        session.record(node.metadata.get(COPY, kind), frame, count)


def _anomaly_checked(session: Session, frame: Any, grad_inputs: Any, grad_outputs: Any) -> None:
    count = sum(1 for grad in grad_inputs if grad is not None)
    if count:
        session.record("item", frame, count)


def _starting_frame() -> Any:
    """The frame that started the backward pass: the innermost one outside torch and this package (``loss.backward()``
    in the user's code, or the library's line that called it)."""
    import os
    import sys

    import torch

    torch_folder = os.path.dirname(torch.__file__) + os.sep
    skipped = here.predict_files()
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(torch_folder)
                                 or frame.f_code.co_filename in skipped):
        frame = frame.f_back
    return frame


def _push_saved_tensors_hooks(real: Any) -> Any:
    """Saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``: checkpointing,
    ``save_on_cpu``) run on the stand-ins: the engine calls them from inside an op, whose
    dispatch took the mode off the stack, so a pack hook read a virtual tensor's
    ``.device`` as ``cpu`` and its copies to the host were not predicted."""

    @functools.wraps(real)
    def push_saved_tensors_default_hooks(pack_hook: Any, unpack_hook: Any) -> Any:
        return real(_under_the_mode(pack_hook), _under_the_mode(unpack_hook))

    return push_saved_tensors_default_hooks


def mark_gradients(session: Session, grads: Any) -> None:
    """The gradients in ``grads`` (a tensor, a tuple or list, Nones) are virtual."""
    registry = session.registry
    if registry is None:
        return
    import torch

    with torch._C.DisableTorchFunction():  # called under the mode: storage reads go past it
        registry.mark_results(tensors_in(grads), set())


def _function_apply(session: Session, real: Any) -> Any:
    @functools.wraps(real)
    def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(cls, *args, **kwargs)
        registry = session.registry
        if registry is None or here.get_ident() not in here.thread_modes:
            return result
        import torch

        with torch._C.DisableTorchFunction():
            for out in tensors_in(result) if not isinstance(result, torch.Tensor) else [result]:
                node = out.grad_fn
                if node is not None and registry.is_cuda(out):
                    try:
                        setattr(node, registry._flag, True)
                    except (AttributeError, TypeError):
                        pass
        return result

    return apply


def _node_apply(session: Session, real: Any) -> Any:
    """A custom Function's node method ``real`` (``apply``/``apply_boxed``), its gradients marked virtual first
    when the Function's outputs were (`_function_apply` flagged the node)."""

    @functools.wraps(real)
    def apply(ctx: Any, *grads: Any) -> Any:
        registry = session.registry
        if registry is not None and getattr(ctx, registry._flag, False):
            mark_gradients(session, grads)
        return real(ctx, *grads)

    return apply


def hook_on_virtual_gradient(session: Session, hook: Any) -> Any:
    """``hook`` (of ``Tensor.register_hook`` on a virtual tensor) called with its
    gradient marked virtual."""

    def on_virtual_gradient(grad: Any) -> Any:
        mark_gradients(session, grad)
        return hook(grad)

    try:
        return functools.wraps(hook)(on_virtual_gradient)
    except (AttributeError, TypeError):
        return on_virtual_gradient
