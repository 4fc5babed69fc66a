"""Predict mode for operators registered from Python (``@torch.library.custom_op``,
``torch.library.Library.impl``, ``torch.library.register_kernel``): their Python kernels
run on the stand-ins, so the syncs in an operator's body are predicted one by one.

A call to such an operator (``my_op(x)``, ``torch.ops.mylib.my_op(x)``) comes to the mode
as one torch call, and torch takes the mode off the stack while it handles that call
(torch/overrides.py, ``_pop_mode_temporarily``). The dispatcher then ran the operator's
Python kernel without the mode: an ``int(t.sum())`` in the body was never predicted (the op
table could only say the unmeasured operator "may sync"), ``t.device`` read ``cpu`` there,
and a ``sync_free`` test passed.

An operator outside torch's own ``aten``/``prims`` namespaces now goes through the
dispatcher with the mode back on the stack: ``torch._C._dispatch_call_boxed`` is the
dispatcher's call without a torch-function layer, so the mode does not receive the same
operator again, and the kernel's own torch calls reach it as user code's do. A C++
kernel (an extension's) runs as before, unseen inside, and the op table's note names it.

What this cannot do: the CPU stand-ins run the kernel registered for the CPU (or for every
device); an operator with a separate ``"cuda"`` kernel (``register_kernel("cuda")``) runs
its CPU kernel here, and its CUDA kernel's syncs are not predicted (README, Limits).
"""

from __future__ import annotations

import functools
from typing import Any

#: Namespaces whose operators have C++ kernels the mode predicts by name (handlers.py and
#: the op table); every other namespace's operators may have Python kernels.
TORCH_NAMESPACES = frozenset({"aten", "prims"})

_op_types: tuple[type, ...] | None = None


def operator_types() -> tuple[type, ...]:
    """``torch._ops.OpOverload`` and ``OpOverloadPacket`` (bound on first use)."""
    global _op_types
    if _op_types is None:
        import torch._ops

        _op_types = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    return _op_types


@functools.lru_cache(maxsize=1024)
def _namespace(func: Any) -> str | None:
    qualified = getattr(func, "_qualified_op_name", None) or getattr(func, "name", None)
    if callable(qualified):  # OpOverload.name() is a method
        qualified = qualified()
    if not isinstance(qualified, str) or "::" not in qualified:
        return None
    return qualified.split("::", 1)[0]


def runs_python_kernels(func: Any) -> bool:
    """Whether ``func`` is an operator of a namespace outside torch's own."""
    try:
        namespace = _namespace(func)
    except TypeError:  # unhashable
        return False
    return namespace is not None and namespace not in TORCH_NAMESPACES


def _overload(func: Any, args: tuple, kwargs: dict) -> Any:
    """The OpOverload a call of ``func`` dispatches to (a packet resolves by its arguments,
    as torch.ops.ns.op(...) does in C++), or None."""
    import torch

    if isinstance(func, torch._ops.OpOverload):
        return func
    try:
        name = torch._C._jit_resolve_packet(func._qualified_op_name, *args, **kwargs)
    except (RuntimeError, TypeError, AttributeError):
        return None
    return getattr(func, name or "default", None)


def call_under_the_mode(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Call the operator ``func`` through the dispatcher with ``mode`` on the stack; its
    results are marked as any call's (mode.py, `call_generic`). Where the kernel that
    runs is Python, its calls are the prediction; a C++ kernel is left to the op table."""
    import torch

    from .calls import call_generic

    overload = _overload(func, args, kwargs)
    handle = getattr(overload, "_handle", None)
    if handle is None:
        return call_generic(mode, func, args, kwargs)
    C = torch._C

    def dispatch(*call_args: Any, **call_kwargs: Any) -> Any:
        depth = C._len_torch_function_stack()
        C._push_on_torch_function_stack(mode)
        try:
            return C._dispatch_call_boxed(handle, *call_args, **call_kwargs)
        finally:
            # The mode comes off again, with whatever the kernel left above it.
            while C._len_torch_function_stack() > depth:
                C._pop_torch_function_stack()

    return call_generic(mode, func, args, kwargs, run=dispatch,
                         ask_table=not _python_kernel(overload))


#: The dispatch keys whose kernel runs for CPU tensors that stand in for CUDA ones, in the
#: dispatcher's order (a backend's own kernel first, then the composite ones).
_STAND_IN_KEYS = ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd")


@functools.lru_cache(maxsize=1024)
def _python_kernel(overload: Any) -> bool:
    """Whether the kernel the stand-ins run for ``overload`` was registered from Python.

    The dispatcher's table (``torch._C._dispatch_dump``) says where each kernel was
    registered: ``CPU: registered at /path/to/ops.py:12 :: ...``; torch.library records the
    Python caller's file, a C++ extension its source file.
    """
    import torch

    try:
        dump = torch._C._dispatch_dump(overload.name())
    except (RuntimeError, AttributeError, TypeError):
        return False
    where: dict[str, str] = {}
    for line in dump.splitlines():
        key, _, rest = line.partition(": registered at ")
        if rest:
            where[key.removesuffix("[alias]").strip()] = rest.split(" :: ", 1)[0]
    for key in _STAND_IN_KEYS:
        if key in where:
            return where[key].rsplit(":", 1)[0].endswith(".py")
    return False
