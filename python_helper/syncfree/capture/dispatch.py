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

The engines that see syncs (capture/debug/, capture/cupti/, capture/predict/) ask `owner()` whose each
sync is; `enter`/`leave` are the recorder's. This module imports no engine.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from typing import Any

_owner: contextvars.ContextVar[Any] = contextvars.ContextVar("syncfree_recorder", default=None)
#: The recorder the current context is routed to (None: none), running or not: `route` sets it.
routed = _owner.get
_get_ident = threading.get_ident
_getframe = sys._getframe

#: Held while the running recorders, the anchors and the engines' installs change (an RLock).
lock = threading.RLock()
process_recorders: list[Any] = []  # recorders of scope "process" between enter and exit, innermost last
_running: list[Any] = []      # every recorder between enter and exit, any scope
_unowned: dict[str, int] = {}   # thread name -> syncs no recorder owned
backward_passes: list[tuple[int, Any, Any]] = []  # (thread, its context's recorder or None, the frame that
#                                                    called the engine) for each backward pass in flight
_backward_users: list[Any] = []  # recorders whose engine tracks backward passes
_backward_real: list[Any] = []   # [torch.autograd._engine_run_backward, torch.autograd] while tracked
# thread ident -> [recorder, frame] anchors of the running recorders on that thread, innermost last (frame None:
# the recorder's boundary, read at each look-up: a watched test sets it after the enter). See `context_owner`.
thread_anchors: dict[int, list[list[Any]]] = {}


# ----------------------------------------------------------------------------- routing


def owner() -> Any:
    """The recorder a sync made here belongs to (None: nobody's)."""
    recorder = context_owner()
    if recorder is not None:
        return recorder
    if backward_passes:
        recorder = backward_owner()
        if recorder is not None:
            return recorder
    return process_recorders[-1] if process_recorders else None


def context_owner() -> Any:
    """The running recorder that owns the code running here by its context or its stack (None: none): the one
    the context routes to, unless a recorder entered later is anchored on this stack and that one is among its
    parents (or the context routes to none). See the module docstring."""
    routed_to = recorder = routed()
    if recorder is not None and not recorder.running:
        recorder = None
        if routed_to is not DETACHED:
            routed_to = None
    anchors = thread_anchors.get(_get_ident())
    if anchors and anchors[-1][0] is not recorder:
        anchored = anchored_owner(anchors, routed_to)
        if anchored is not None:
            return anchored
    return recorder


def anchored_owner(anchors: list[list[Any]], routed_to: Any) -> Any:
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
    with lock:
        thread_anchors.setdefault(_get_ident(), []).append(entry)
    return entry


def unanchor(entry: list[Any] | None = None, recorder: Any = None) -> None:
    """Take away ``entry``, or every anchor of ``recorder``, whichever thread it is on (idempotent). A thread's
    list is replaced, never changed in place here: the thread may be reading it (a watch closed from another
    thread); only the thread itself appends to its own."""
    with lock:
        for ident, entries in list(thread_anchors.items()):
            kept = [e for e in entries if e is not entry and (recorder is None or e[0] is not recorder)]
            if len(kept) == len(entries):
                continue
            if kept:
                thread_anchors[ident] = kept
            else:
                del thread_anchors[ident]


def backward_owner() -> Any:
    """The recorder of the thread whose backward pass this thread is running a part of.

    On a GPU autograd runs a CUDA graph's nodes, and so the hooks, a custom Function's
    ``backward`` and checkpoint recomputation, on its device thread (torch/csrc/autograd/
    engine.cpp), which has a context of its own: a ``syncfree.watch()`` (a watched test)
    whose block called ``loss.backward()`` did not own its hooks' syncs. While a routed
    thread is inside the engine (`_engine_run_backward`), a thread with no owner of its own
    that runs a graph task is that thread's; with backward passes of several recorders
    running at once it cannot tell whose, and the sync stays unowned (noted)."""
    owners = {id(recorder): recorder for _, recorder, _ in list(backward_passes)
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
    entries = list(backward_passes)
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
    backward_passes.append(entry)
    try:
        return _backward_real[0](*args, **kwargs)
    finally:
        discard(backward_passes, entry)


def attach_backward(recorder: Any) -> None:
    """Track backward passes for ``recorder`` (the first user installs the wrapper of
    ``torch.autograd._engine_run_backward``; the caller pushed `detach_backward` first)."""
    with lock:
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
    with lock:
        if not discard(_backward_users, recorder) or _backward_users or not _backward_real:
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
    for recorder in reversed(process_recorders):
        if recorder._thread == ident:
            return recorder
    return None


def route(recorder: Any) -> contextvars.Token:
    """Make ``recorder`` the owner of the current context; `unroute` with the token."""
    return _owner.set(recorder)


def unroute(token: contextvars.Token | None, recorder: Any, before: Any = None) -> None:
    """Undo `route` (idempotent; in another context, or out of order, the value is put
    back by hand). Without a token (an interrupt between `route` and the store of its
    token), a context still routed to ``recorder`` goes back to ``before``, what `routed`
    said before the route."""
    if token is None:
        if recorder is not None and routed() is recorder:
            _owner.set(before)
        return
    try:
        _owner.reset(token)
    except ValueError:  # created in another context (a generator resumed elsewhere)
        if routed() is recorder:
            _owner.set(token.old_value if token.old_value is not contextvars.Token.MISSING
                       else None)
    except RuntimeError:  # used already: reset once
        pass


def enter(recorder: Any) -> None:
    """``recorder`` starts running (the caller pushed `leave` on its Undo first)."""
    with lock:
        if any(r is recorder for r in _running):
            return
        recorder._unowned_before = dict(_unowned)
        # The recorder already recording this thread or task goes on counting this one's
        # syncs (a watch in a cell, a decorated call in a watch): SyncRecorder.parent.
        recorder.parent = owner_here()
        if recorder.scope == "process":
            process_recorders.append(recorder)
        _running.append(recorder)
        if getattr(recorder, "boundary", None) is not None:  # a watch's: the frame that entered it, on this thread
            thread_anchors.setdefault(_get_ident(), []).append([recorder, None])
        recorder.running = True


def leave(recorder: Any) -> None:
    """``recorder`` stops running (idempotent): its notes on syncs it did not own."""
    with lock:
        recorder.running = False
        was_running = discard(_running, recorder)
        discard(process_recorders, recorder)
        unanchor(recorder=recorder)
        if not was_running:
            return
        before = getattr(recorder, "_unowned_before", {})
        for thread, count in _unowned.items():
            new = count - before.get(thread, 0)
            if new > 0:
                recorder.note(f"{new} sync{'s' if new != 1 else ''} in thread {thread!r}, which no syncfree watch "
                              "owned, ran during this one and are not counted in it")
        if recorder.scope == "context" and recorder.syncs:
            name = threading.current_thread().name
            for outer in process_recorders:
                if outer._thread != recorder._thread:
                    syncs = recorder.syncs
                    outer.note(f"{syncs} sync{'s' if syncs != 1 else ''} in thread {name!r} went to a "
                               "syncfree.watch() of that thread and are not counted here")
        if not _running:
            _unowned.clear()  # nobody left to tell


def unowned(count: int = 1) -> None:
    """Count syncs that no recorder owns (see the module docstring)."""
    if not _running:
        return
    name = threading.current_thread().name
    _unowned[name] = _unowned.get(name, 0) + count


def discard(items: list, item: Any) -> bool:
    """Remove ``item`` from ``items`` by identity, the last one first; whether it was there."""
    for i in range(len(items) - 1, -1, -1):
        if items[i] is item:
            del items[i]
            return True
    return False


def running() -> bool:
    """Whether any recorder is running now."""
    return bool(_running)


__all__ = ["DETACHED", "anchor", "anchored_owner", "attach_backward", "backward_caller", "backward_owner",
           "backward_passes", "context_owner", "detach_backward", "discard", "enter", "leave", "lock", "owner",
           "owner_here", "process_recorders", "route", "routed", "running", "thread_anchors", "unanchor", "unowned",
           "unroute"]
