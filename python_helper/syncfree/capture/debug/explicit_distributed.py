"""The host waits in ``torch.distributed`` that torch's sync debug mode does not report.

Debug mode warns where torch's CUDA code synchronizes a stream from Python's thread; the
waits of ``torch.distributed`` happen in ProcessGroupNCCL's and ProcessGroupGloo's C++ (or
in gloo's worker threads) and raise no warning (PyTorch's docs: the debug mode does not
cover the ``torch.distributed`` namespace). While a recorder runs, explicit.py installs these
wrappers beside its own (same install, same restore) and they report to the recorder as
syncs of kind ``distributed``:

* ``barrier()`` on an NCCL group: ProcessGroupNCCL's barrier work synchronizes the device in
  ``wait()``: one sync at the call, or at ``Work.wait()`` with ``async_op=True`` (gloo's
  barrier waits for the other ranks on the CPU only: not a device sync);
* a collective on a gloo group with CUDA tensors: gloo copies through the host and the
  caller waits for it: one sync at the call, or at ``Work.wait()``;
* with ``TORCH_NCCL_BLOCKING_WAIT=1``: every collective on an NCCL group, at the call (c10d
  waits on its work) or, with ``async_op=True``, at ``Work.wait()``.

A call without ``async_op`` is recorded at the call, timed around it, whether it waits in
c10d's ``work.wait()`` (gloo) or inside C++: since torch 2.8 ProcessGroupNCCL returns no work
for such a call (ProcessGroupNCCL.cpp, ``return asyncOp ? work : nullptr``; its barrier blocks
the CPU itself), so distributed_c10d.py calls no ``Work.wait()`` that a wrapper could see.

NCCL's collectives and ``Work.wait()`` without blocking wait only order work on the GPU:
not reported. What object collectives sync (size reads, copies, ``.item()``) is tensor code
that debug mode sees. The counts rest on ProcessGroupNCCL.cpp/ProcessGroupGloo.cpp and
distributed_c10d.py (torch 2.13); ``tests/gpu/test_distributed_gpu.py`` checks them on a GPU.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["blocking_wait_set", "forget_works", "targets"]

_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "broadcast", "reduce", "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv",
)
_BLOCKING_WAIT_VARIABLES = ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT")


# Async works whose wait blocks the host: id -> (work, what). Emptied when the last recorder
# detaches (forget_works): a work never waited inside the run would otherwise keep its
# tensors alive, now that explicit.py keeps the wrappers for the next run.
_tagged: dict[int, tuple[Any, str]] = {}


def forget_works() -> None:
    _tagged.clear()


class _State(threading.local):
    inside: bool = False  # while a call recorded at the call runs (its own wait is not counted again)


def targets(torch: Any, wrap: Callable[..., Callable[..., Any]]) -> list[tuple[object, str, str, Callable]]:
    """explicit.py's targets for ``torch.distributed``: (owner, attribute, what, make
    wrapper). ``wrap(original, what, kind=..., blocks=...)`` is explicit.py's recording
    wrapper; ``blocks(args, kwargs)`` names the sync or says None (no host wait)."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return []
    c10d = dist.distributed_c10d
    state = _State()
    blocking_wait = blocking_wait_set()
    tagged = _tagged

    def wait_blocks(args: tuple, kwargs: dict) -> str | None:
        work = args[0] if args else None
        entry = tagged.pop(id(work), None)
        if entry is not None and entry[0] is work:
            return entry[1]
        return None  # no host wait, or c10d's own wait inside a call recorded at the call

    def backend(arguments: dict) -> str | None:
        try:
            return str(c10d.get_backend(arguments.get("group")))
        except (RuntimeError, ValueError):  # no process group yet: the call raises itself
            return None

    def marking(original: Callable[..., Any], name: str,
                reason: Callable[[dict], str | None]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def decide(args: tuple, kwargs: dict) -> tuple[str | None, bool]:
            try:
                arguments = signature.bind(*args, **kwargs).arguments
            except TypeError:  # let the function raise its own error
                return None, False
            return reason(arguments), bool(arguments.get("async_op"))

        def call(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            what, is_async = decide(args, kwargs)
            if what is None:
                return original(*args, **kwargs)
            if is_async:
                work = original(*args, **kwargs)
                if work is not None:
                    tagged[id(work)] = (work, what)  # the host waits at its wait()
                return work
            outer, state.inside = state.inside, True
            try:
                return original(*args, **kwargs)
            finally:
                state.inside = outer

        def at_the_call(args: tuple, kwargs: dict) -> str | None:
            if state.inside:  # a collective that c10d calls inside one already recorded
                return None
            what, is_async = decide(args, kwargs)
            return None if is_async else what

        # explicit.py's recording wrapper outside: the sync is recorded at the caller's line.
        return wrap(functools.wraps(original)(call), f"dist.{name}()", kind="distributed",
                    blocks=at_the_call)

    def barrier_reason(arguments: dict) -> str | None:
        # NCCL's barrier work synchronizes the device in wait(); gloo's waits for the other
        # ranks on the CPU only (no device sync: not reported).
        if backend(arguments) == "nccl":
            return "dist.barrier()"
        return None

    def collective_reason(name: str) -> Callable[[dict], str | None]:
        def reason(arguments: dict) -> str | None:
            used = backend(arguments)
            if used == "nccl" and blocking_wait:
                return f"dist.{name}() with TORCH_NCCL_BLOCKING_WAIT"
            if used == "gloo" and any(_is_cuda(value) for value in arguments.values()):
                return f"dist.{name}() on gloo with CUDA tensors"
            return None

        return reason

    found: list[tuple[object, str, str, Callable]] = [
        (c10d.Work, "wait", "Work.wait()",
         lambda current, what: wrap(current, what, kind="distributed", blocks=wait_blocks)),
    ]
    for module in (c10d, dist):
        found.append((module, "barrier", "dist.barrier()",
                      lambda current, what: marking(current, "barrier", barrier_reason)))
        for name in _COLLECTIVES:
            if module is dist and getattr(dist, name, None) is not getattr(c10d, name, None):
                continue  # not c10d's (torch.distributed re-exports it)
            if hasattr(module, name):
                found.append((module, name, f"dist.{name}()",
                              functools.partial(_make, marking, name, collective_reason(name))))
    return found


def blocking_wait_set() -> bool:
    """Whether c10d waits on every NCCL collective (``TORCH_NCCL_BLOCKING_WAIT``): read when
    the wrappers are made, and part of the key under which explicit.py keeps them."""
    return any(os.environ.get(n, "0").strip() not in ("", "0") for n in _BLOCKING_WAIT_VARIABLES)


def _make(marking: Callable[..., Any], name: str, reason: Callable[[dict], str | None],
          current: Callable[..., Any], what: str) -> Callable[..., Any]:
    return marking(current, name, reason)


def _is_cuda(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_is_cuda(item) for item in value[:64])
    return bool(getattr(value, "is_cuda", False))
