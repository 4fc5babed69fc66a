"""``torch.ops`` calls under debug mode: the sync warnings they raise reach Python.

Torch's sync debug mode warns in C++ (``warn_or_error_on_sync``), and a C++ warning becomes
a Python warning only inside a binding that converts them (``HANDLE_TH_ERRORS``, a
``torch::PyWarningHandler``). The generated bindings (``torch.nonzero``, ``Tensor.item``)
do; the operator objects of ``torch.ops`` (``OpOverload``, ``OpOverloadPacket``: pybind
functions) do not, so a sync made through one printed ``Warning: called a synchronizing
CUDA operation`` to stderr and was never counted (sync-facts.md). Code reaches them more
often than it seems: ``torch.ops.aten.nonzero.default(t)`` called directly, an extension's
operators, and ``torch.compile``'d code, whose generated wrapper calls inductor's fallback
kernels through them (an H200 run counted 0 of the 3 syncs of a compiled function that
CUPTI saw).

While a warn-mode recorder with CUDA runs, ``OpOverload.__call__`` and
``OpOverloadPacket.__call__`` run an operator that can sync (:func:`can_sync`: the op
table's syncing ops, the internal ones behind ``.item()``, copies and error checks, and
every operator outside torch's own namespaces, an extension's) inside ``Tensor.apply_`` of
a one-element CPU tensor: ``apply_`` is a binding with ``HANDLE_TH_ERRORS`` that calls a Python function
once per element, so the operator's C++ warnings are held by its warning handler and
issued as Python warnings when it returns, where the recorder's hook counts them as any
other sync (one per warning, as for every torch call). A call nested in another binding's
handler (a ``__torch_dispatch__`` or an ``autograd.Function`` reached from a torch call)
has its warnings issued once, by the innermost handler: ours. Exceptions pass through as
they were raised. Calls from a thread or task that no recorder owns run as before.

Any other C++ warning of such a call (a deprecation) then comes as a Python warning too,
as it does from the operator's generated binding; other operators are left alone.
Error mode needs none of this: there the C++ check raises, and the error reaches Python.
The wrappers are installed when the first recorder attaches and removed when the last one
detaches, as explicit.py's are.
"""

from __future__ import annotations

from typing import Any

from .. import dispatch

_users: list[Any] = []
_installed: list[tuple[type, Any, Any]] = []  # (class, original __call__, wrapper)
_trampoline: list[Any] = []  # the one-element CPU tensor whose apply_ runs the calls

#: This module's globals: the recorder's hook skips the frames of the wrapper below, from
#: which the warnings are issued, to find the frame that called the operator.
OPS_CALLS_GLOBALS = globals()


#: aten operators behind the Python calls that sync, by the names the op table does not
#: have: ``.item()``/``float(t)``/``bool(t)``, copies between devices, the linear-algebra
#: error checks, the forms of unique and indexing, and those whose output size is data.
_INTERNAL = frozenset({
    "_local_scalar_dense", "item", "is_nonzero", "_to_copy", "copy_", "_copy_from", "to",
    "_linalg_check_errors", "nonzero_numpy", "_unique", "_unique2", "unique_dim",
    "unique_dim_consecutive", "index", "_index_put_impl_", "index_put_", "masked_scatter",
    "masked_scatter_", "_ctc_loss", "histogram", "_histogramdd_bin_edges",
})

#: Namespaces whose operators are torch's own (the rest are an extension's or a library's).
_TORCH_NAMESPACES = frozenset({"aten", "prims", "profiler", "_c10d_functional", "c10d",
                               "_dtensor", "inductor", "higher_order"})

_decided: dict[str, bool] = {}
_syncing: set[str] = set()


def can_sync(qualified_name: str) -> bool:
    """Whether the operator ``namespace::name`` can make a sync (decided once a name)."""
    known = _decided.get(qualified_name)
    if known is None:
        namespace, _, name = qualified_name.partition("::")
        if not _syncing:
            from .. import optable

            table = optable.installed_table()
            names = table.syncing_names() if table is not None else []
            _syncing.update(name.replace(".", "_").rsplit("nn_functional_", 1)[-1] for name in names)
            _syncing.update(_INTERNAL)
        known = _decided[qualified_name] = (name in _syncing if namespace in _TORCH_NAMESPACES
                                            else True)
    return known


def _wrapper(original: Any, name_of: Any) -> Any:
    owner = dispatch.owner

    def __call__(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if owner() is None or not _trampoline or not can_sync(name_of(self)):
            return original(self, *args, **kwargs)
        result: list[Any] = []

        def run(_: Any) -> int:
            result.append(original(self, *args, **kwargs))
            return 0

        _trampoline[0].apply_(run)
        return result[0]

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    return __call__


def attach(recorder: Any, torch: Any) -> None:
    """Install the wrappers for ``recorder`` (the first one in installs them)."""
    if not _installed and not _users:
        import torch._ops

        if not _trampoline:
            _trampoline.append(torch.zeros(1))
        for cls, name_of in ((torch._ops.OpOverload, _overload_name),
                             (torch._ops.OpOverloadPacket, _packet_name)):
            original = vars(cls).get("__call__")
            if original is None:
                continue
            wrapper = _wrapper(original, name_of)
            _installed.append((cls, original, wrapper))
            cls.__call__ = wrapper
    _users.append(recorder)


def _overload_name(op: Any) -> str:
    return op._schema.name  # "aten::nonzero"


def _packet_name(packet: Any) -> str:
    return packet._qualified_op_name


def detach(recorder: Any) -> None:
    """Remove ``recorder``; the last one out puts the originals back (idempotent)."""
    for i in range(len(_users) - 1, -1, -1):
        if _users[i] is recorder:
            del _users[i]
            break
    if _users:
        return
    while _installed:
        cls, original, wrapper = _installed[-1]
        if vars(cls).get("__call__") is wrapper:
            cls.__call__ = original
        _installed.pop()
