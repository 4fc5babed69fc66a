"""Explicit synchronization that torch's sync debug mode does not report.

`torch.cuda.synchronize()` (cudaDeviceSynchronize) and `torch.cuda.Event.synchronize()`
(cudaEventSynchronize) block the CPU but raise no debug-mode warning (sync-facts.md), so
while a recorder runs their Python entry points are replaced by wrappers that report to the
recorder that owns the calling thread or task (dispatch.owner). `Event.wait()` and
`Event.query()` do not block the CPU and are left alone.

The wrappers are installed when the first receiver attaches and removed when the last one
detaches, so nested recorders never stack wrappers (and never count a sync twice).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .. import dispatch


class ExplicitSyncReceiver(Protocol):
    def explicit_sync(self, frame, what: str, call: Callable[..., Any],
                      args: tuple, kwargs: dict) -> Any:
        """Run ``call(*args, **kwargs)`` (the original torch function) and record it."""


_MISSING = object()
_receivers: list[ExplicitSyncReceiver] = []
_installed: list[tuple[object, str, object, object]] = []  # (owner, attribute, original, wrapper)
# The wrappers made by the last attach, kept for the next ones: (key, [(owner, attribute,
# wrapped, wrapper)]). Making them reads 28 signatures of torch.distributed's functions
# (inspect.signature) and copies their metadata: 0.4-0.6 ms of every recorder's start on a
# GPU machine (bench/watch_fixed_cost.py), which a decorated step paid at each call.
# Reused only as a whole (the distributed wrappers share the state of one targets() call:
# an async work tagged by a collective's wrapper is found by Work.wait's), and only while
# every function they wrap is still the one in place and the environment they read is
# the same.
_made: list[tuple[tuple, list[tuple[object, str, object, Callable[..., Any]]]]] = []
# Wrappers found replaced at detach: (owner, attribute, original, wrapper) (_put_back_stale).
_stale: list[tuple[object, str, object, object]] = []


def _targets(torch) -> list[tuple[object, str, str]]:
    targets = [
        (torch.cuda, "synchronize", "torch.cuda.synchronize()", _marking),
        (torch.cuda.Event, "synchronize", "Event.synchronize()"),
    ]
    # torch.cuda.synchronize held from before the recorder began (`from torch.cuda import synchronize`, torchrl's
    # env keeps `torch.cuda.synchronize` as its device sync): it calls torch._C._cuda_synchronize, looked up then.
    if callable(getattr(torch._C, "_cuda_synchronize", None)):
        held = getattr(getattr(torch.cuda, "synchronize", None), "__code__", None)
        targets.append((torch._C, "_cuda_synchronize", "torch.cuda.synchronize()",
                        lambda original, what: _wrap(original, what, held=held)))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "synchronize"):
        targets.append((accelerator, "synchronize", "torch.accelerator.synchronize()"))
    # torch.distributed's host waits (barrier, gloo on CUDA, blocking wait), each with the
    # wrapper that decides when a call waits (explicit_distributed.py).
    from .explicit_distributed import targets as distributed_targets

    return targets + distributed_targets(torch, _wrap)


def attach(receiver: ExplicitSyncReceiver, torch) -> None:
    """Make ``receiver`` the one that explicit syncs report to, until `detach`.

    Each wrapper is listed in ``_installed`` before it is set, so `detach` finds it even
    when an interrupt lands in between (detach after a partial attach is harmless).
    """
    # dispatch's lock: two threads entering their watches at once would otherwise both
    # find no receiver and install wrappers over each other's (each sync counted twice).
    with dispatch.lock:
        if not _receivers and not _installed:
            _put_back_stale()
            for owner, attribute, _, wrapper in _wrappers(torch):
                _installed.append((owner, attribute, _current(owner, attribute), wrapper))
                setattr(owner, attribute, wrapper)
        _receivers.append(receiver)


def _put_back_stale() -> None:
    """The originals of wrappers that were replaced during a run and later put back by the
    one that replaced them: restored now (no recorder is attached). An entry leaves
    ``_stale`` once its attribute holds anything but the wrapper."""
    for entry in list(_stale):
        if _restore(*entry):
            _stale.remove(entry)  # else still replaced: its owner may yet put the wrapper back


def _current(owner: object, attribute: str) -> object:
    """What ``owner.attribute`` holds: a class's own dict entry (a plain function for
    Event.synchronize, _MISSING when inherited), so that restoring puts back the very
    same object."""
    return vars(owner).get(attribute, _MISSING) if isinstance(owner, type) else getattr(owner, attribute)


def _restore(owner: object, attribute: str, original: object, wrapper: object) -> bool:
    """Put ``original`` back where ``wrapper`` is; True when the original is in place
    (put back, or never replaced), False when something else holds the place."""
    current = _current(owner, attribute)
    if current is wrapper:
        if original is _MISSING:
            delattr(owner, attribute)
        else:
            setattr(owner, attribute, original)
        return True
    return current is original


def _wrappers(torch) -> list[tuple[object, str, object, Callable[..., Any]]]:
    """(owner, attribute, the function wrapped, its wrapper) for every target: those of
    the last attach while they still fit (``_made``), else made anew."""
    from .explicit_distributed import blocking_wait_set

    key = (id(torch), blocking_wait_set())
    if _made:
        made_key, entries = _made[0]
        if made_key == key and all(getattr(owner, attribute) is wrapped
                                   for owner, attribute, wrapped, _ in entries):
            return entries
    entries = []
    for owner, attribute, what, *make in _targets(torch):
        current = getattr(owner, attribute)
        entries.append((owner, attribute, current,
                        make[0](current, what) if make else _wrap(current, what)))
    _made[:] = [(key, entries)]
    return entries


def detach(receiver: ExplicitSyncReceiver) -> list[str]:
    """Stop reporting to ``receiver``; with no receiver left, put the originals back.

    Idempotent, and safe to run again after an interrupt: an entry leaves ``_installed``
    only once its original is back. Returns notes for the report when something else
    replaced a wrapper meanwhile (the cell did it; that replacement is left in place).
    """
    with dispatch.lock:
        return _detach(receiver)


def _detach(receiver: ExplicitSyncReceiver) -> list[str]:
    notes: list[str] = []
    for i in range(len(_receivers) - 1, -1, -1):
        # Normally the last one; a recorder left out of order is still removed.
        if _receivers[i] is receiver:
            del _receivers[i]
            break
    if _receivers:
        return notes
    while _installed:
        entry = _installed[-1]
        if not _restore(*entry):
            owner, attribute = entry[:2]
            notes.append(f"{getattr(owner, '__name__', owner)}.{attribute} was replaced during the "
                         "run; syncfree left the replacement in place")
            # Whoever replaced it may put the wrapper back when it ends (a predict session in
            # another thread restores what it found): the next attach or detach restores the
            # original then (_put_back_stale).
            _stale.append(entry)
        _installed.pop()
    _put_back_stale()
    from .explicit_distributed import forget_works

    forget_works()
    return notes


_inside = threading.local()  # depth: torch.cuda.synchronize's wrapper runs torch's function (`_marking`)


def _marking(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    """torch.cuda.synchronize's wrapper: it counts the sync, and torch._C._cuda_synchronize's, which torch's function
    calls, lets it through (one sync, counted once)."""
    def marked(*args, **kwargs):
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            _inside.depth -= 1

    return _wrap(functools.wraps(original)(marked), what)


def _wrap(original: Callable[..., Any], what: str, kind: str = "explicit",
          blocks: Callable[[tuple, dict], str | None] | None = None, held: Any = None) -> Callable[..., Any]:
    """A wrapper that records each call as a sync of ``kind``; with ``blocks``, only the
    calls it names (its answer is the ``what``), the others run as they are. ``held``: the code of the function
    whose call this one is inside (torch.cuda.synchronize's, for torch._C._cuda_synchronize): its frame is skipped,
    and a call made inside that function's own wrapper (`_marking`) is not counted again."""
    @functools.wraps(original)
    def synchronize(*args, **kwargs):
        __tracebackhide__ = True  # IPython hides this frame in tracebacks
        if not _receivers or (held is not None and getattr(_inside, "depth", 0)):
            return original(*args, **kwargs)
        label = what if blocks is None else blocks(args, kwargs)
        if label is None:
            return original(*args, **kwargs)
        receiver = dispatch.owner()
        if receiver is None or not any(r is receiver for r in _receivers):
            # Nobody's thread (counted apart), or a recorder that sees it otherwise (a
            # predict session's stand-in under this wrapper records it itself).
            if receiver is None:
                dispatch.unowned()
            return original(*args, **kwargs)
        frame = sys._getframe(1)
        if held is not None and frame.f_code is held and frame.f_back is not None:
            frame = frame.f_back  # the caller of the torch.cuda.synchronize it held
        if kind != "explicit":
            return receiver.explicit_sync(frame, label, original, args, kwargs, kind=kind)
        return receiver.explicit_sync(frame, label, original, args, kwargs)

    return synchronize
