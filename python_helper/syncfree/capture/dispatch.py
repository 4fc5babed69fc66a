"""Where a sync goes: one process-wide dispatcher in front of every running recorder.

Who owns a sync
---------------
* A recorder of scope ``"process"`` (a ``%%syncfree`` cell, ``syncfree run``,
  ``syncfree.watch(all_threads=True)``) owns every thread of the process: the syncs of
  threads its code starts are its own, reported "in thread X".
* A recorder of scope ``"context"`` (``syncfree.watch()``) owns the thread, or the asyncio
  task, that routes to it (`routing`): a `contextvars.ContextVar`, as vLLM scopes its
  ``gpu_sync_debug`` guard. Tasks created inside the block copy the context and so belong
  to it. Threads start with an empty context: the work the block starts is routed to it
  by hand (threads.py, installed with the first recorder and removed with the last): a
  ``threading.Thread`` started from the routed context runs its ``run()`` routed to the
  recorder, and a task submitted to a ``ThreadPoolExecutor`` from it runs so for the
  task's duration (the pool's threads belong to no watch); in predict mode a non-daemon
  thread, or the task, also runs under a `PredictSession` of its own (a daemon thread may
  outlive the watch and would keep the stand-ins installed). A thread started from a
  context routed to no watch (before the block, or by another thread) is not the block's.

A watch owns what runs on its behalf while it is open, and a context can be copied before
the watch opened: pytest-asyncio copies the test's context before the test's watch opens
and runs the test's coroutine in that copy (``runner.run(coro, context=context)``, called
from inside the watch); ``contextvars.copy_context().run(f)`` and an
``asyncio.Runner(context=...)`` do the same. So a recorder is also *anchored* to a live
frame of the thread that runs its code (`anchor`): the frame that entered the watch (its
``boundary``; pytest's caller of the test function for a watched test), or the frame of
threads.py's wrapper that runs a thread's or a pool task's code for it. Code whose stack
passes through that frame runs on the recorder's behalf (it was called from inside the
block, synchronously), whatever its context says, unless its context routes to a recorder
that is not one of the anchored recorder's parents (a watch of its own, or an unrelated
one: the route wins). An asyncio task interleaved with a watch's task is not the watch's:
a suspended coroutine's frame is on no stack, so the watch's anchor is not on the other
task's (a watch entered in a plain function keeps its frame on the thread's stack until
it ends, and every task of a loop that function runs is the watch's). See `context_owner`.

A backward pass's other threads: on a GPU autograd runs a CUDA graph's nodes (hooks, a
custom Function's ``backward``, checkpoint recomputation) on its device thread, whose
context routes to no watch. While an engine that sees other threads' syncs runs (debug
mode, CUPTI), ``torch.autograd._engine_run_backward`` is wrapped (`attach_backward`): a
sync on a thread inside a graph task is the recorder's whose context called the pass
(`_backward_owner`), and its frames go on at the frame that called the engine
(`backward_caller`), so that a library's hook is attributed to the user's
``loss.backward()`` line, as debug mode's replayed C++ warnings are.

A recorder entered while another one already records its thread or task (a watch in a
``%%syncfree`` cell, a decorated call inside a watch, a watch in a watch) gets that one as
its ``parent``: the sync goes to the inner recorder, which passes it on to its parents,
each attributing it in its own terms. So the block's report has exactly the block's syncs
(not those of another task interleaved with it), and the outer report has them too.

`owner()` is the recorder of the current context, else the innermost process recorder,
else None: an *unowned* sync (a thread with no watch of its own while another thread's
watch runs). Unowned syncs are counted per thread, and every recorder that ran meanwhile
says how many in its notes: never counted into a watch that does not own them, never lost
without a word.

The debug-mode engine (warn and error modes)
--------------------------------------------
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

import contextvars
import os
import re
import sys
import threading
import warnings
from typing import Any

#: The start of torch's warning (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync) and of
#: the RuntimeError it raises in error mode.
SYNC_MESSAGE = "called a synchronizing CUDA operation"
_PROTOTYPE_MESSAGE = "Synchronization debug mode is a prototype feature"
_LEVELS = {"default": 0, "warn": 1, "error": 2}
_LEVEL_NAMES = {0: "default", 1: "warn", 2: "error"}

_owner: contextvars.ContextVar[Any] = contextvars.ContextVar("syncfree_recorder", default=None)
_owner_get = _owner.get
_get_ident = threading.get_ident
_getframe = sys._getframe

_lock = threading.RLock()
_process: list[Any] = []      # recorders of scope "process" between enter and exit, innermost last
_running: list[Any] = []      # every recorder between enter and exit, any scope
_debug_users: list[Any] = []  # recorders using the debug-mode engine
_installed: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, replacement)
_filter_lists: list[list] = []  # the filters lists syncfree's entries were put in
_entries: list[tuple] = []      # syncfree's filter entries while installed
_exact: list[str | None] = []   # torch's sync message as it arrives, once seen (see _learn)
_mode_before: list[int] = []    # torch's debug mode before the first install
_real: dict[str, Any] = {}      # the functions replaced: "showwarnmsg", "set", "get", "mutated"
_program_mode: list[int] = []   # the debug mode the program set while the engine ran
_unowned: dict[str, int] = {}   # thread name -> syncs no recorder owned
_backward: list[tuple[int, Any, Any]] = []  # (thread, its context's recorder or None, the frame that
#                                              called the engine) for each backward pass in flight
_backward_users: list[Any] = []  # recorders whose engine tracks backward passes
_backward_real: list[Any] = []   # [torch.autograd._engine_run_backward, torch.autograd] while tracked
# thread ident -> [recorder, frame] anchors of the running recorders on that thread, innermost last (frame None:
# the recorder's boundary, read at each look-up: a watched test sets it after the enter). See `context_owner`.
_anchors: dict[int, list[list[Any]]] = {}


# ----------------------------------------------------------------------------- routing


def owner() -> Any:
    """The recorder a sync made here belongs to (None: nobody's)."""
    recorder = context_owner()
    if recorder is not None:
        return recorder
    if _backward:
        recorder = _backward_owner()
        if recorder is not None:
            return recorder
    return _process[-1] if _process else None


def context_owner() -> Any:
    """The running recorder that owns the code running here by its context or its stack (None: none): the one
    the context routes to, unless a recorder entered later is anchored on this stack and that one is among its
    parents (or the context routes to none). See the module docstring."""
    routed_to = recorder = _owner_get()
    if recorder is not None and not recorder.running:
        recorder = None
        if routed_to is not DETACHED:
            routed_to = None
    anchors = _anchors.get(_get_ident())
    if anchors and anchors[-1][0] is not recorder:
        anchored = _anchored(anchors, routed_to)
        if anchored is not None:
            return anchored
    return recorder


def _anchored(anchors: list[list[Any]], routed_to: Any) -> Any:
    """The innermost recorder of ``anchors`` (this thread's) entered after ``routed_to`` (the context's running
    recorder, or None, or `DETACHED`: none of them) whose anchor frame is on this thread's stack and of which
    ``routed_to`` is a parent."""
    candidates = []
    for recorder, frame in reversed(list(anchors)):  # a copy: another thread may end a watch meanwhile
        if recorder is routed_to:
            break
        if frame is None:
            frame = recorder.boundary
        if frame is not None and recorder.running and _is_parent(routed_to, recorder):
            candidates.append((frame, recorder))
    if not candidates:
        return None
    found = None
    f = _getframe(1)
    while f is not None:
        for frame, recorder in candidates:
            if frame is f and (found is None or _is_parent(found, recorder)):
                found = recorder  # the innermost of those on the stack
        f = f.f_back
    return found


def _is_parent(recorder: Any, of: Any) -> bool:
    """Whether ``recorder`` (None: no recorder, around everything) records around ``of`` (SyncRecorder.parent)."""
    if recorder is None:
        return True
    parent = of.parent
    while parent is not None:
        if parent is recorder:
            return True
        parent = parent.parent
    return False


class _Detached:
    """What a context routes to while it starts something that is nobody's (threads.py: a pool's worker thread,
    started by a submit from inside a watch): neither the routes nor the anchors make it a recorder's."""

    running = False
    parent = None

    def __repr__(self) -> str:
        return "DETACHED"


DETACHED = _Detached()


def anchor(recorder: Any, frame: Any) -> list[Any]:
    """Anchor ``recorder`` to ``frame``, a live frame of this thread, until `unanchor` (see the module docstring):
    the code that threads.py runs for a recorder in another thread. Returns the entry to give `unanchor`."""
    entry = [recorder, frame]
    with _lock:
        _anchors.setdefault(_get_ident(), []).append(entry)
    return entry


def unanchor(entry: list[Any] | None = None, recorder: Any = None) -> None:
    """Take away ``entry``, or every anchor of ``recorder``, whichever thread it is on (idempotent). A thread's
    list is replaced, never changed in place here: the thread may be reading it (a watch closed from another
    thread); only the thread itself appends to its own."""
    with _lock:
        for ident, entries in list(_anchors.items()):
            kept = [e for e in entries if e is not entry and (recorder is None or e[0] is not recorder)]
            if len(kept) == len(entries):
                continue
            if kept:
                _anchors[ident] = kept
            else:
                del _anchors[ident]


def _backward_owner() -> Any:
    """The recorder of the thread whose backward pass this thread is running a part of.

    On a GPU autograd runs a CUDA graph's nodes, and so the hooks, a custom Function's
    ``backward`` and checkpoint recomputation, on its device thread (torch/csrc/autograd/
    engine.cpp), which has a context of its own: a ``syncfree.watch()`` (a watched test)
    whose block called ``loss.backward()`` did not own its hooks' syncs. While a routed
    thread is inside the engine (`_engine_run_backward`), a thread with no owner of its own
    that runs a graph task is that thread's; with backward passes of several recorders
    running at once it cannot tell whose, and the sync stays unowned (noted)."""
    owners = {id(recorder): recorder for _, recorder, _ in list(_backward)
              if recorder is not None and recorder.running}
    if len(owners) != 1 or not _in_graph_task():
        return None
    return next(iter(owners.values()))


def backward_caller() -> tuple[int, Any] | None:
    """Who called the backward pass that this thread runs a part of: the thread that waits
    for it and the frame that called the engine there, for a sync made on autograd's device
    thread, whose own Python frames (a library's hook, checkpoint recomputation) or none at
    all (CUPTI sees the C++ nodes' syncs there) do not reach the user's line. The sync is
    that thread's, as debug mode's replayed C++ warnings are. None on the calling thread
    itself (a CPU backward runs there), outside a graph task, or with backward passes of
    several threads in flight (whose, it cannot tell)."""
    entries = list(_backward)
    callers = {ident for ident, _, _ in entries}
    if len(callers) != 1 or _get_ident() in callers or not _in_graph_task():
        return None
    ident, _, frame = entries[-1]
    return (ident, frame) if frame is not None else None


def _in_graph_task() -> bool:
    torch = sys.modules.get("torch")
    graph_task = getattr(getattr(torch, "_C", None), "_current_graph_task_id", None)
    return graph_task is not None and graph_task() >= 0


def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
    """torch.autograd's engine entry (torch/autograd/graph.py), while an engine that sees
    other threads' syncs is installed (debug mode, CUPTI): the calling context's recorder
    owns the pass's other threads, and their syncs are attributed through the frame that
    called the engine (`backward_caller`)."""
    recorder = context_owner()
    try:
        caller = _getframe(1)
    except ValueError:  # called from C with no Python frame: the sync keeps its own frames
        caller = None
    entry = (_get_ident(), recorder, caller)
    _backward.append(entry)
    try:
        return _backward_real[0](*args, **kwargs)
    finally:
        _discard(_backward, entry)


def attach_backward(recorder: Any) -> None:
    """Track backward passes for ``recorder`` (the first user installs the wrapper of
    ``torch.autograd._engine_run_backward``; the caller pushed `detach_backward` first)."""
    with _lock:
        if any(r is recorder for r in _backward_users):
            return
        if not _backward_users:
            autograd = sys.modules.get("torch.autograd")
            real = getattr(autograd, "_engine_run_backward", None)
            if not callable(real):  # a torch without it: backward passes are not tracked
                return
            _backward_real[:] = [real, autograd]
            autograd._engine_run_backward = _engine_run_backward
        _backward_users.append(recorder)


def detach_backward(recorder: Any) -> None:
    """Idempotent; the last user out puts the engine's entry back (if it is still ours)."""
    with _lock:
        if not _discard(_backward_users, recorder) or _backward_users or not _backward_real:
            return
        real, autograd = _backward_real
        _backward_real.clear()
        if getattr(autograd, "_engine_run_backward", None) is _engine_run_backward:
            autograd._engine_run_backward = real


def owner_here() -> Any:
    """The recorder already recording this thread or task (for a nested watch): the
    context's own (or its stack's: `context_owner`), else the innermost process recorder entered in this
    thread."""
    recorder = context_owner()
    if recorder is not None:
        return recorder
    ident = _get_ident()
    for recorder in reversed(_process):
        if recorder._thread == ident:
            return recorder
    return None


def route(recorder: Any) -> contextvars.Token:
    """Make ``recorder`` the owner of the current context; `unroute` with the token."""
    return _owner.set(recorder)


def routed() -> Any:
    """The recorder the current context is routed to (None: none), running or not."""
    return _owner_get()


def unroute(token: contextvars.Token | None, recorder: Any, before: Any = None) -> None:
    """Undo `route` (idempotent; in another context, or out of order, the value is put
    back by hand). Without a token (an interrupt between `route` and the store of its
    token), a context still routed to ``recorder`` goes back to ``before``, what `routed`
    said before the route."""
    if token is None:
        if recorder is not None and _owner_get() is recorder:
            _owner.set(before)
        return
    try:
        _owner.reset(token)
    except ValueError:  # created in another context (a generator resumed elsewhere)
        if _owner_get() is recorder:
            _owner.set(token.old_value if token.old_value is not contextvars.Token.MISSING
                       else None)
    except RuntimeError:  # used already: reset once
        pass


def enter(recorder: Any) -> None:
    """``recorder`` starts running (the caller pushed `leave` on its Undo first)."""
    with _lock:
        if any(r is recorder for r in _running):
            return
        recorder._unowned_before = dict(_unowned)
        # The recorder already recording this thread or task goes on counting this one's
        # syncs (a watch in a cell, a decorated call in a watch): SyncRecorder.parent.
        recorder.parent = owner_here()
        _threads.install()  # the first recorder in; `leave` by the last one out removes it
        if recorder.scope == "process":
            _process.append(recorder)
        _running.append(recorder)
        if getattr(recorder, "boundary", None) is not None:  # a watch's: the frame that entered it, on this thread
            _anchors.setdefault(_get_ident(), []).append([recorder, None])
        recorder.running = True


def leave(recorder: Any) -> None:
    """``recorder`` stops running (idempotent): its notes on syncs it did not own."""
    with _lock:
        recorder.running = False
        was_running = _discard(_running, recorder)
        _discard(_process, recorder)
        unanchor(recorder=recorder)
        if not _running:
            _threads.remove(recorder)
        if not was_running:
            return
        before = getattr(recorder, "_unowned_before", {})
        for thread, count in _unowned.items():
            new = count - before.get(thread, 0)
            if new > 0:
                recorder.note(f"{new} sync(s) in thread {thread!r}, which no syncfree watch "
                              "owned, ran during this one and are not counted in it")
        if recorder.scope == "context" and recorder.syncs:
            name = threading.current_thread().name
            for outer in _process:
                if outer._thread != recorder._thread:
                    outer.note(f"{recorder.syncs} sync(s) in thread {name!r} went to a "
                               "syncfree.watch() of that thread and are not counted here")
        if not _running:
            _unowned.clear()  # nobody left to tell


def unowned(count: int = 1) -> None:
    """Count syncs that no recorder owns (see the module docstring)."""
    if not _running:
        return
    name = threading.current_thread().name
    _unowned[name] = _unowned.get(name, 0) + count


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
    routed_to = recorder = _owner_get()
    if recorder is not None and not recorder.running:
        recorder = None
        if routed_to is not DETACHED:
            routed_to = None
    anchors = _anchors.get(_get_ident())
    if anchors and anchors[-1][0] is not recorder:  # context_owner(), inlined
        recorder = _anchored(anchors, routed_to) or recorder
    if recorder is None:
        recorder = (_backward_owner() if _backward else None) or (_process[-1] if _process else None)
    if recorder is not None:
        # Depth 1 is the frame that called the syncing torch function (warn is a C call);
        # the recorder skips frames of the warnings module (a wrapper another tool put
        # around this hook). On autograd's device thread the backward's caller goes on.
        recorder.sync_warning(_getframe(1), backward_caller() if _backward else None)
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
    with _lock:
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
    with _lock:
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
    with _lock:
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
    with _lock:
        _discard(_debug_users, recorder)
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


def _discard(items: list, item: Any) -> bool:
    for i in range(len(items) - 1, -1, -1):
        if items[i] is item:
            del items[i]
            return True
    return False


# Last: threads.py uses this module's names (the thread and thread-pool patches).
from . import threads as _threads  # noqa: E402

__all__ = ["SYNC_MESSAGE", "anchor", "attach_debug", "context_owner", "detach_debug", "enter", "installed",
           "leave", "owner", "owner_here", "route", "unanchor", "unowned", "unroute"]
