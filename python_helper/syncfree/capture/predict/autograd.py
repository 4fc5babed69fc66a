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
    return _under_the_mode(real)


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
