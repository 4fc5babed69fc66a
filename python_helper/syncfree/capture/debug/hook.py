"""The debug-mode engine's warning hook: torch's sync debug mode, seen through Python's warnings.

torch reports a sync in debug mode through Python's ``warnings``, which the program
shares. The machinery is installed by the first recorder that needs it and removed by the
last one, whatever the order they end in (threads), each step pushed on the recorder's
`Undo` before it is made:

* ``warnings._showwarnmsg`` is replaced. The C warning path (``call_show_warning`` in
  Python/_warnings.c, 3.10-3.13) looks it up on the warnings module for every warning it
  shows; ``catch_warnings`` saves and replaces ``showwarning`` and ``_showwarnmsg_impl``
  but never ``_showwarnmsg`` (Lib/warnings.py), so a ``catch_warnings(record=True)`` block
  (``pytest.warns``, "no warnings" assertions) neither receives syncfree's warning nor
  hides it from syncfree. Warnings that are not torch's sync warning go on to the
  function replaced, which calls the program's ``showwarning`` as before.
* Two filters go first in the current ``warnings.filters``: ``always`` for the sync
  warning (Python's default shows one per code location) and ``ignore`` for torch's
  one-time "prototype feature" warning. ``warnings._filters_mutated`` is wrapped:
  ``simplefilter``, ``filterwarnings``, ``resetwarnings`` and ``catch_warnings`` (enter
  and exit) call it after changing the filters, and the wrapper puts syncfree's two back
  in front of whatever list is current. So a program's ``simplefilter("ignore")`` or
  ``filterwarnings("error")`` neither hides a sync from syncfree nor turns syncfree's
  warning into the program's exception.
* ``torch.cuda.set_sync_debug_mode`` and ``get_sync_debug_mode`` are wrapped: a change the
  program makes is noted in the report with its file and line, and the engine keeps
  counting: torch stays in warn mode, the program's getter answers what it set, and a
  program that asked for ``"error"`` gets torch's error at each sync (after it is
  counted), one that asked for ``"warn"`` gets the warning, as without syncfree.
* Error mode is warn mode plus an error raised from the hook, only for a sync owned by an
  error-mode recorder in that recorder's thread: torch's own error mode is process-wide
  and would stop every thread.

On the way out each replaced function is put back only if it is still syncfree's (what
the program installed over it stays, and the report says so); a change that bypassed the
wrappers (``torch._C._cuda_set_sync_debug_mode``, or a ``_showwarnmsg`` replaced under
syncfree) is noted too.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from typing import Any

from ..dispatch import (
    DETACHED,
    anchored_owner,
    backward_caller,
    backward_owner,
    backward_passes,
    discard,
    lock,
    owner,
    process_recorders,
    routed,
    thread_anchors,
    unowned,
)

#: The start of torch's warning (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync) and of
#: the RuntimeError it raises in error mode.
SYNC_MESSAGE = "called a synchronizing CUDA operation"
_PROTOTYPE_MESSAGE = "Synchronization debug mode is a prototype feature"
_LEVELS = {"default": 0, "warn": 1, "error": 2}
_LEVEL_NAMES = {0: "default", 1: "warn", 2: "error"}

_get_ident = threading.get_ident
_getframe = sys._getframe

_debug_users: list[Any] = []  # recorders using the debug-mode engine
_installed: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, replacement)
_filter_lists: list[list] = []  # the filters lists syncfree's entries were put in
_entries: list[tuple] = []      # syncfree's filter entries while installed
_exact: list[str | None] = []   # torch's sync message as it arrives, once seen (see _learn)
_mode_before: list[int] = []    # torch's debug mode before the first install
_real: dict[str, Any] = {}      # the functions replaced: "showwarnmsg", "set", "get", "mutated"
_program_mode: list[int] = []   # the debug mode the program set while the engine ran


# ----------------------------------------------------------------------------- the hook


def _showwarnmsg(msg: Any) -> None:
    # The hot path: on a GPU loop it runs once per sync (bench/overhead.py measures it):
    # a prefix test, one ContextVar read, then the owner's frame walk and dict lookup.
    text = str(msg.message)
    if not text.startswith(SYNC_MESSAGE):
        if msg.filename == _OPS_CALLS_FILE:
            _at_the_operators_caller_from(msg, _getframe(1))
        return _real["showwarnmsg"](msg)
    if not _exact:
        _learn(text)
    routed_to = recorder = routed()
    if recorder is not None and not recorder.running:
        recorder = None
        if routed_to is not DETACHED:
            routed_to = None
    anchors = thread_anchors.get(_get_ident())
    if anchors and anchors[-1][0] is not recorder:  # context_owner(), inlined
        recorder = anchored_owner(anchors, routed_to) or recorder
    if recorder is None:
        recorder = (backward_owner() if backward_passes else None) or (process_recorders[-1] if process_recorders else None)
    if recorder is not None:
        # Depth 1 is the frame that called the syncing torch function (warn is a C call);
        # the recorder skips frames of the warnings module (a wrapper another tool put
        # around this hook). On autograd's device thread the backward's caller goes on.
        recorder.sync_warning(_getframe(1), backward_caller() if backward_passes else None)
    else:
        unowned()
    if _program_mode:
        _as_the_program_asked(msg)


# ops_calls.py issues the C++ warnings of a torch.ops call from its wrapper's frame.
_OPS_CALLS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_calls.py")


def _at_the_operators_caller_from(msg: Any, frame: Any) -> None:
    """Show another warning of a torch.ops call at the line that called the operator: the
    first frame out from ``frame`` outside ops_calls.py and the warnings module."""
    while frame is not None and (frame.f_code.co_filename == _OPS_CALLS_FILE
                                 or frame.f_code.co_filename == warnings.__file__):
        frame = frame.f_back
    if frame is not None:
        msg.filename, msg.lineno = frame.f_code.co_filename, frame.f_lineno


def _as_the_program_asked(msg: Any) -> None:
    """The program set torch's debug mode itself inside the block: what it would get."""
    level = _program_mode[-1]
    if level == 2:
        raise RuntimeError(str(msg.message))
    if level == 1:
        _real["showwarnmsg"](msg)


def _filters_mutated() -> None:
    """Lib/warnings.py calls this after every change of the filters (simplefilter,
    filterwarnings, resetwarnings, catch_warnings enter and exit)."""
    # Under the lock: a sync in another thread may be putting the entries first right now
    # (_learn), and two interleaved moves would leave an entry twice in the list.
    with lock:
        _put_entries_first()
    _real["mutated"]()


def _put_entries_first() -> None:
    entries = _entries
    if not entries:
        return
    filters = warnings.filters
    if not isinstance(filters, list):
        return
    if len(filters) >= len(entries) and all(f is e for f, e in zip(filters, entries)):
        return
    if not any(f is filters for f in _filter_lists):
        _filter_lists.append(filters)  # before the insert: leaving finds it
    remove_entries(filters, tuple(entries))
    filters[0:0] = entries



def remove_entries(filters: list, entries: tuple) -> None:
    """Remove each of ``entries`` from ``filters`` by identity (idempotent).

    Here, not in a module of its own: the first sync of a process runs it from the warning
    path (_learn), before the recorder's hook pauses the stall clock, and on Python 3.10/3.11
    the clock's profile callback leaves only this module's calls (and the warnings
    module's) out of a sync's blocked time (stall.py). Called from another module, it
    restarted the interval: the first sync of a process read about 0 ms blocked."""
    for entry in entries:
        for i in range(len(filters) - 1, -1, -1):
            if filters[i] is entry:
                del filters[i]
                break


def filters_changed() -> None:
    # warnings.filterwarnings() bumps the filters version so that the modules' "already
    # warned" registries are invalidated (Lib/warnings.py); editing warnings.filters
    # directly must do the same, or a warning seen before would be skipped.
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()
    else:  # Python 3.14: Lib/_py_warnings.py
        with warnings._lock:
            warnings._filters_mutated_lock_held()

# Case-sensitive patterns: filterwarnings() would add re.I, a cost on every sync. Compiled
# once: each watch installs the engine afresh (re.escape alone cost ~10 us an install).
_SYNC_PATTERN = re.compile(re.escape(SYNC_MESSAGE))
_PROTOTYPE_PATTERN = re.compile(re.escape(_PROTOTYPE_MESSAGE))


def _sync_entries() -> list[tuple]:
    # New tuples at each install: entries are found and removed by identity.
    entries = [("always", _SYNC_PATTERN, Warning, None, 0),
               ("ignore", _PROTOTYPE_PATTERN, Warning, None, 0)]
    if _exact and _exact[0] is not None:
        entries.insert(0, ("always", _exact[0], Warning, None, 0))
    return entries


def _learn(text: str) -> None:
    """The first sync warning's text becomes a filter entry of its own, first in the list:
    C's filter check compares a plain-str message with ``==`` where a pattern costs a
    ``match()`` call per sync (check_matched in Python/_warnings.c). torch's message is the
    same text at every sync (TORCH_WARN in warn_or_error_on_sync adds the C++ file and line
    of that one function); any other text still meets the pattern behind it. Only where
    the warnings module runs on that C implementation: Lib/warnings.py's Python fallback
    would call ``.match`` on the str."""
    with lock:
        if _exact:
            return
        if not _C_FILTERS:
            _exact.append(None)
            return
        _exact.append(text)
        if _entries:
            _entries.insert(0, ("always", text, Warning, None, 0))
            _put_entries_first()


# warn() and warn_explicit() of Python/_warnings.c (builtins), not Lib/warnings.py's fallback.
_C_FILTERS = type(warnings.warn_explicit) is type(len)


def _set_sync_debug_mode(debug_mode: Any) -> None:
    level = _LEVELS.get(debug_mode, debug_mode) if isinstance(debug_mode, str) else debug_mode
    if level not in (0, 1, 2) or isinstance(level, bool):
        return _real["set"](debug_mode)  # torch's own error for a bad value
    frame = _getframe(1)
    where = f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else "?"
    _program_mode[:] = [level]
    text = (f"the program set torch's sync debug mode to {_LEVEL_NAMES[level]!r} at {where}; "
            "syncfree kept counting (the mode from before the block is back after it)")
    recorder = owner()
    for target in ([recorder] if recorder is not None else list(_debug_users)):
        target.note(text)


def _get_sync_debug_mode() -> int:
    if _program_mode:
        return _program_mode[-1]
    return _real["get"]()


def _short(path: str) -> str:
    import os

    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


# ----------------------------------------------------------------------------- install


def attach_debug(recorder: Any, torch: Any, cuda: bool) -> None:
    """Install the debug-mode engine for ``recorder`` (the first user installs it). The
    caller pushed `detach_debug` on its Undo first; every step here is recorded before it
    is made, so a detach after a partial attach removes exactly what is there."""
    with lock:
        if not any(r is recorder for r in _debug_users) and not _debug_users:
            _install(torch, cuda)
        if not any(r is recorder for r in _debug_users):
            _debug_users.append(recorder)


def _install(torch: Any, cuda: bool) -> None:
    if not _entries:
        _entries[:] = _sync_entries()
    _put_entries_first()
    _replace(warnings, "_showwarnmsg", _showwarnmsg, "showwarnmsg")
    if hasattr(warnings, "_filters_mutated"):  # Python 3.14 moved it (Lib/_py_warnings.py)
        _replace(warnings, "_filters_mutated", _filters_mutated, "mutated")
    filters_changed()  # registries that saw a sync warning before forget it
    if cuda:
        _real["set"] = torch.cuda.set_sync_debug_mode
        _real["get"] = torch.cuda.get_sync_debug_mode
        _real["cuda"] = torch.cuda
        if not _mode_before:
            # Before CUDA is initialized nothing can have set the mode through torch.cuda (its setter initializes).
            _mode_before.append(_real["get"]() if _cuda_initialized() else 0)
        _replace(torch.cuda, "set_sync_debug_mode", _set_sync_debug_mode, "set")
        _replace(torch.cuda, "get_sync_debug_mode", _get_sync_debug_mode, "get")
        _enable_debug_mode(torch.cuda)


def _cuda_initialized() -> bool:
    """Whether torch has initialized CUDA (True when the engine was installed without CUDA: nothing to wait for)."""
    cuda = _real.get("cuda")
    return cuda is None or bool(cuda.is_initialized())


def _enable_debug_mode(cuda: Any) -> None:
    """Torch's sync debug mode to warn, without initializing CUDA. ``set_sync_debug_mode`` initializes it first, and a
    process that has initialized CUDA cannot use it in its forked children ("Cannot re-initialize CUDA in forked
    subprocess"): a program whose parent never touches CUDA and whose fork Pool workers do ran under ``python`` and
    failed under ``syncfree run``. Until the program initializes CUDA (no sync can come before), the call waits in
    torch's queue of calls made at initialization (``torch.cuda._lazy_call``, as ``manual_seed``'s does), and does
    nothing if the engine has been removed by then; a forked child inherits the queue."""
    lazy_call = getattr(cuda, "_lazy_call", None)
    if lazy_call is None or cuda.is_initialized():
        _real["set"](1)
        return

    def at_cuda_init() -> None:
        if _debug_users:  # still installed (a later install queues its own call)
            _real["set"](1)

    lazy_call(at_cuda_init)


def _replace(owner: Any, name: str, replacement: Any, key: str) -> None:
    original = getattr(owner, name)
    _real[key] = original
    _installed.append((owner, name, original, replacement))
    setattr(owner, name, replacement)


def detach_debug(recorder: Any) -> None:
    """Stop ``recorder``'s use of the engine (idempotent); the last user out removes it.
    Notes for the report go to ``recorder``."""
    with lock:
        discard(_debug_users, recorder)
        if _debug_users:
            _check_still_ours(recorder)
            return
        _check_still_ours(recorder)
        if _mode_before:
            setter = _real.get("set")
            for owner_, name, original, replacement in _installed:
                if name == "set_sync_debug_mode":
                    setter = original
            if setter is not None and _cuda_initialized():  # else the mode was never set: nothing to put back
                setter(_mode_before[0])
            _mode_before.clear()
        _program_mode.clear()
        while _installed:
            owner_, name, original, replacement = _installed[-1]
            current = getattr(owner_, name, None)
            if current is replacement:
                setattr(owner_, name, original)
            elif current is not original:
                recorder.note(f"{getattr(owner_, '__name__', owner_)}.{name} was replaced during "
                              "the run; syncfree left the replacement in place")
            _installed.pop()
        entries = tuple(_entries)
        current = warnings.filters
        if entries and isinstance(current, list) and not any(f is current for f in _filter_lists):
            _filter_lists.append(current)
        while _filter_lists:
            remove_entries(_filter_lists[-1], entries)
            _filter_lists.pop()
        _entries.clear()
        filters_changed()


def _check_still_ours(recorder: Any) -> None:
    """Notes on what took the engine away from under the wrappers during ``recorder``'s run."""
    for owner_, name, original, replacement in _installed:
        current = getattr(owner_, name, None)
        if name == "_showwarnmsg" and current is not replacement:
            code = getattr(current, "__code__", None)
            by = (f" by {getattr(current, '__qualname__', current)!s}"
                  + (f" ({_short(code.co_filename)}:{code.co_firstlineno})" if code else ""))
            recorder.note(f"warnings._showwarnmsg was replaced during the run{by[:200]} (another "
                          "tool took the warning hook); syncs after that point were not counted")
    if _mode_before and "get" in _real and _cuda_initialized():
        try:
            level = _real["get"]()
        except Exception:  # noqa: BLE001 (a broken getter is not the report's business)
            level = 1
        if level != 1:
            recorder.note(f"torch's sync debug mode was set to {level} during the run by code "
                          "syncfree could not see (torch._C._cuda_set_sync_debug_mode, or a "
                          "reference to set_sync_debug_mode taken before the block): syncs "
                          "after that point were not counted")
    entries = _entries
    current = warnings.filters
    if entries and isinstance(current, list) and not any(f is entries[0] for f in current):
        recorder.note("the program replaced warnings.filters without the warnings module's "
                      "functions; syncs after that point may not have been counted")


def installed() -> bool:
    """Whether the debug-mode engine is installed now (tests)."""
    return bool(_installed or _entries or _filter_lists or _mode_before)


__all__ = ["SYNC_MESSAGE", "attach_debug", "detach_debug", "filters_changed", "installed", "remove_entries"]
