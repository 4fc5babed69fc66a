"""Work a recorder's code starts in other threads (and processes) runs under that recorder's engine.

Six patches, installed by the first recorder in (`hold`) and removed by the last one out (`release`), under
``dispatch.lock``:

* ``threading.Thread.start``. A thread started from a context routed to a running
  recorder of scope ``"context"`` (a ``syncfree.watch()``, a watched test) runs its
  ``run()`` routed to that recorder, as an asyncio task created in the block copies the
  block's context: its syncs are the watch's, reported "in thread X". A non-daemon thread
  also runs under a predict session of its own (``recorder.thread_session()``) when the recorder predicts (torch function
  modes are per thread: without one its CUDA code would run on the stand-ins unseen), or,
  failing that, when a running process recorder asked for the threads of its program to
  be predicted (``syncfree run``: ``predicts_threads``, daemon threads included: the
  process ends with the run). Otherwise daemon threads get no session: one may outlive
  the watch and would keep the stand-ins installed (a watch's own daemon thread running
  the user's code is named in its report). A child process forked from such a thread gets
  one for its whole life (`predict_in_forked_child`).
* ``_thread.start_new_thread`` (threading keeps its own name for it): a thread started so from a routed context
  runs routed to that recorder as a daemon thread does, and so without a predict session of its own.
* ``concurrent.futures.ThreadPoolExecutor.submit`` (and so ``map``). A task submitted from
  a routed context runs routed to that recorder, under a predict session for the task's
  duration when it predicts, whichever thread of the pool runs it and whenever that
  thread was started. The pool's own worker threads are started outside the routing: a
  worker started during a watch is not bound to it for later tasks. So with
  ``asyncio.run_coroutine_threadsafe`` (where asyncio was imported before the first recorder): a coroutine handed
  from a routed context to a loop running in another thread runs routed to that recorder.

* ``multiprocessing.process.BaseProcess.start`` (one shared replacement, counted: `hook_process_start`). While a
  follower of the process's children runs (``syncfree run``, a watched test: `current_follower`), it
  starts each child its way. Else a child that a watch's code starts runs its target under a watch of its own and
  reports into the watch's report (the follower that the recorder's ``child_settings.follow_children()`` makes:
  `syncfree.processes.ForkedChildren.for_watch`); one without a target (a
  ``Process`` subclass's own ``run()``), or started by a recorder that is not a watch's (a ``%%syncfree`` cell), is
  named in the recorder's report, never silently left out. torch.compile's own workers are left alone.

* ``multiprocessing.pool.Pool._check_running`` and ``ProcessPoolExecutor.submit``, once the program imported them
  (`_hook_pools`): the recorder whose code hands a pool tasks notes its workers (`_pool_tasks`); those made before
  its block run them unwatched, and its count is short (`syncfree.processes.earlier_children_note`).

* ``subprocess.Popen.__init__`` (one shared replacement, counted: `hook_popen`). A Python program that the
  program's own code starts with subprocess (``python child.py``, ``-m``, ``-c``) on this interpreter gets an
  environment in which it watches itself and reports to the follower (``syncfree run``'s, a watched test's, or the
  one a watch makes for its children: syncfree/programs.py); one on another interpreter is named in the follower's
  notes or in the report of the recorder whose code started it, so a block whose subprocess synced never passes in
  silence.

A thread started from a context routed to no watch (the main thread outside a watch,
another thread of the program) is untouched: its syncs stay unowned (dispatch.py), or go
to a process recorder. Exactly one of these wrappers runs per thread or task, so a thread
started inside a watch inside ``syncfree run`` runs under one session and its syncs reach
the watch, which passes them on to its parent, the run's recorder (each counts them once).
"""

from __future__ import annotations

import _thread
import concurrent.futures.thread as _futures_thread
import contextlib
import functools
import os
import re
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from multiprocessing import process as _mp_process
from typing import Any

from . import dispatch
from .notes import Uncounted

_installed: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, replacement)
# The user's threads a watch's code started and the tasks it handed a pool's threads, routed to it, that have not
# ended: recorder -> {key: what it is}. One still running when the block ends makes its later syncs no watch's
# (`unfinished_note`).
_in_flight: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_tasks_before: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # recorder -> asyncio tasks at its start
_in_flight_lock = threading.Lock()
_real: dict[str, Any] = {}  # "start", "submit": the functions replaced


def _routed_recorder() -> Any:
    """The running recorder of scope "context" that owns the code here (None: none): the one this context routes
    to, or the watch whose block called this code in a context copied before it began (dispatch.context_owner:
    pytest-asyncio runs a test's coroutine so)."""
    recorder = dispatch.context_owner()
    if recorder is not None and recorder.scope == "context":
        return recorder
    return None


def _predicting_process() -> Any:
    """The innermost running process recorder whose program's threads are predicted."""
    for recorder in reversed(dispatch.process_recorders):
        if recorder.running and getattr(recorder, "predicts_threads", False) \
                and recorder.mode == "predict":
            return recorder
    return None


def _run_for(recorder: Any, predicting: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` routed to ``recorder`` (None: as it is), under a predict
    session reporting to ``predicting`` (None: none) while that one still runs. ``recorder`` is also anchored to
    this frame: ``func`` may run its code in a context of its own (``asyncio.to_thread`` runs it in a copy of the
    caller's context, routed to no watch when that was copied before the watch began: dispatch.context_owner)."""
    token = dispatch.route(recorder) if recorder is not None else None
    anchor = dispatch.anchor(recorder, sys._getframe()) if recorder is not None else None
    try:
        if predicting is not None and predicting.running:
            with predicting.thread_session():
                return func(*args, **kwargs)
        return func(*args, **kwargs)
    finally:
        if anchor is not None:
            dispatch.unanchor(anchor)
        if token is not None:
            dispatch.unroute(token, recorder)


def _began(recorder: Any, what: str, running: Any = None) -> object:
    """A key for the user's work ``what`` routed to ``recorder`` until `_ended` with it, or while ``running()`` says
    it still runs (a ThreadPool's result: its tasks may never run if the pool is ended, so nothing ends them)."""
    key = object()
    with _in_flight_lock:
        work = _in_flight.setdefault(recorder, {})
        if running is not None and len(work) > 64:  # a long block handing many: keep only those not done
            for old, (_, check) in list(work.items()):
                if check is not None and not check():
                    del work[old]
        work[key] = (what, running)
    return key


def _ended(recorder: Any, key: object) -> None:
    with _in_flight_lock:
        _in_flight.get(recorder, {}).pop(key, None)


def remember_tasks(recorder: Any) -> None:
    """The asyncio tasks of the loop running in this thread as ``recorder`` starts: `unfinished_note` names the user's
    tasks made after, still pending at its end."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or asyncio._get_running_loop() is None:
        return
    try:
        _tasks_before[recorder] = weakref.WeakSet(asyncio.all_tasks())  # kept alive by their loop, not here
    except (RuntimeError, TypeError):  # no running loop after all; a recorder that takes no weak reference
        pass


def _pending_tasks(recorder: Any) -> list[str]:
    """The user's asyncio tasks made while ``recorder`` ran (in the loop running in its thread) and not done at its
    end: "asyncio task 'Task-5' (later)". A task created in the block copies its context, so its syncs until the
    block ends are the block's; those after are no watch's."""
    before = _tasks_before.pop(recorder, None)
    asyncio = sys.modules.get("asyncio")
    if before is None or asyncio is None or asyncio._get_running_loop() is None:
        return []
    current = asyncio.current_task()
    pending = []
    for task in asyncio.all_tasks():
        if task in before or task is current or task.done():
            continue
        coroutine = task.get_coro()
        code = getattr(coroutine, "cr_code", None) or getattr(coroutine, "gi_code", None)
        filename = getattr(code, "co_filename", None)
        if filename is not None and _users_file(filename, recorder):
            pending.append(f"asyncio task {task.get_name()!r} ({code.co_name})")
    return sorted(pending)


def unfinished_note(recorder: Any, where: str = "block") -> Uncounted | None:
    """The note on the user's threads that ``recorder``'s code started, and the tasks it handed a pool's threads,
    that were still running (or queued) when its block ended: the syncs they make after it are no watch's, so the
    count may be short (`Uncounted`: `sync_free` does not pass it). Taken out of the tracking: a later block's."""
    with _in_flight_lock:
        work = [what for what, running in _in_flight.pop(recorder, {}).values() if running is None or running()]
    pending = _pending_tasks(recorder)
    if not work and not pending:
        return None
    threads_ = [w for w in work if w.startswith("thread ")]
    tasks = len(work) - len(threads_)
    parts = []
    if threads_:
        shown = ", ".join(threads_[:3]) + (f" and {len(threads_) - 3} more" if len(threads_) > 3 else "")
        parts.append(shown)
    if tasks:
        parts.append(f"{tasks} task{'s' if tasks > 1 else ''} handed to a thread pool")
    if pending:
        parts.append(", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else ""))
    one = len(work) + len(pending) == 1
    state = "still running or queued" if tasks else "still pending" if pending and not threads_ else "still running"
    advices = []
    if threads_:
        advices.append("join it" if len(threads_) == 1 else "join them")
    if tasks:
        advices.append("wait for its result" if tasks == 1 else "wait for their results")
    if pending:
        advices.append("await it" if len(pending) == 1 else "await them")
    advice = " and ".join(advices)
    return Uncounted(f"{' and '.join(parts)} {'was' if one else 'were'} {state} when the {where} ended: the syncs "
                     f"{'it makes' if one else 'they make'} after that are not counted ({advice} before the {where} "
                     "ends)")


def _start(thread: Any) -> Any:
    recorder = _routed_recorder()
    judge = recorder  # the recorder that predicts the thread's work, or names it where it cannot
    if recorder is None:
        # A cell's recorder counts every thread's syncs, but a thread of the user's that the cell started ran without
        # the stand-ins: its CUDA work went unpredicted, its syncs uncounted and unnamed (a GPU counts them).
        cell = _predicting_cell()
        if cell is not None and _users_code(thread, cell):
            judge = cell
    if not thread.daemon:
        predicting = judge if judge is not None and judge.mode == "predict" else _predicting_process()
    else:
        # A daemon thread may outlive a watch, and would keep the stand-ins installed: only a run that predicts
        # its program's threads (syncfree run, whose process ends with the run) gives it a session. Without one,
        # a daemon thread's work on the program's CUDA tensors (a prefetcher, a logger) went unpredicted: 0 syncs.
        predicting = _predicting_process()
        if predicting is None and judge is not None and judge.mode == "predict" and _users_code(thread, judge):
            judge.note(Uncounted(
                f"daemon thread {thread.name!r} ran without predict mode (a daemon thread may outlive the block, and "
                "would keep predict mode on after it): its CUDA work is not predicted, so its syncs are not counted (a "
                "non-daemon thread, or syncfree run, predicts them)"))
    # The user's thread started by a watch's code (or a %%syncfree cell's): one still running at the block's end is
    # named (`unfinished_note`); not a daemon thread predict mode left out (named already), nor a library's (a
    # DataLoader's pin-memory thread).
    tracked = recorder if recorder is not None else _watching_cell()
    if tracked is not None and ((predicting is None and tracked.mode == "predict")
                                or not _users_code(thread, tracked)):
        tracked = None
    if recorder is None and predicting is None and tracked is None:
        return _real["start"](thread)
    run = thread.run
    key = _began(tracked, f"thread {thread.name!r}") if tracked is not None else None

    def run_for_recorder() -> None:
        try:
            _run_for(recorder, predicting, run)
        finally:
            if key is not None:
                _ended(tracked, key)
            if vars(thread).get("run") is run_for_recorder:
                del thread.run  # no recorder kept alive by a finished thread

    thread.run = run_for_recorder  # the instance's: Thread._bootstrap_inner calls self.run()
    try:
        return _real["start"](thread)
    except BaseException:
        if key is not None:
            _ended(tracked, key)
        raise


def _start_new_thread(function: Any, args: Any, kwargs: Any = None, /) -> Any:
    """``_thread.start_new_thread`` (a thread started without threading: the program's own low-level one, a
    library's): routed to the watch whose code started it, as a daemon thread (`_start`) is. Its syncs were owned by
    no watch, and in predict mode not even seen: the block passed, and ``syncfree run``'s report left them out."""
    real = _real["start_new_thread"]
    recorder = _routed_recorder()
    predicting = _predicting_process()
    judge = recorder if recorder is not None else _predicting_cell()
    filename = getattr(getattr(function, "__code__", None), "co_filename", None)
    if predicting is None and judge is not None and judge.mode == "predict" and filename is not None \
            and _users_file(filename, judge):
        judge.note(Uncounted(
            f"a thread started with _thread.start_new_thread ({getattr(function, '__name__', function)}) ran without "
            "predict mode (such a thread may outlive the block, and would keep predict mode on after it): its CUDA "
            "work is not predicted, so its syncs are not counted (syncfree run predicts them)"))
    if recorder is None and predicting is None:
        return real(function, args) if kwargs is None else real(function, args, kwargs)
    return real(_run_for, (recorder, predicting, function, *tuple(args)), dict(kwargs or {}))


def _pool_tasks(pool: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``multiprocessing.pool.Pool._check_running`` (each call that hands a Pool tasks: map, apply_async, imap...)
    and ``ProcessPoolExecutor.submit``: the recorder whose code hands them notes the worker processes (one made
    before its block runs them unwatched: `syncfree.processes.earlier_children_note`)."""
    executor = isinstance(pool, _executor_type())
    real = _real["executor_submit" if executor else "pool_check_running"]
    recorder = _recorder_here()
    if recorder is not None:
        try:
            workers = list(vars(pool).get("_processes") or ()) if executor \
                else [p.pid for p in vars(pool).get("_pool") or ()]
            recorder.handed_work_to.update(pid for pid in workers if pid is not None)
        except Exception:  # a pool the program broke: it is its own business
            pass
    return real(pool, *args, **kwargs)


def _executor_type() -> Any:
    module = sys.modules.get("concurrent.futures.process")
    return getattr(module, "ProcessPoolExecutor", ()) if module is not None else ()


def _users_code(thread: Any, recorder: Any) -> bool:
    """Whether the thread runs code of ``recorder``'s user files (its target, or its class's ``run``), not a
    library's (a Pool's handlers, a DataLoader's pin-memory thread): the threads a note about the stand-ins concerns.
    A cell's recorder: the notebook's cells, and the user's own modules. Through what a library's runner is given
    too: a ``threading.Timer``'s function, ``Thread(target=asyncio.run, args=(main(),))``'s coroutine,
    ``Thread(target=list, args=(map(work, items),))``'s function (such threads ran without the stand-ins: 0 syncs)."""
    run = type(thread).run
    if run is threading.Timer.run:
        code = _callee_code(getattr(thread, "function", None), getattr(thread, "args", ()))
        extra = getattr(thread, "args", ())
    elif run is not threading.Thread.run:
        code, extra = getattr(run, "__code__", None), ()
    else:
        code = _callee_code(getattr(thread, "_target", None), getattr(thread, "_args", ()))
        extra = getattr(thread, "_args", ())
    filename = getattr(code, "co_filename", None)
    if filename is not None and _users_file(filename, recorder):
        return True
    return _users_code_among(extra, recorder)


def _users_code_among(args: Any, recorder: Any) -> bool:
    """Whether one of ``args`` (what a thread's or a task's library function is handed) holds the user's code: a
    function or lambda, a coroutine or generator of theirs, a ``map``/``filter`` over one, a partial of one."""
    if recorder is None or not isinstance(args, (tuple, list)):
        return False
    seen = 0
    stack = list(args)[:8]
    while stack and seen < 32:
        value = stack.pop()
        seen += 1
        code = (getattr(value, "cr_code", None) or getattr(value, "gi_code", None) or getattr(value, "ag_code", None)
                or (_callee_code(value) if callable(value) and not isinstance(value, type) else None))
        filename = getattr(code, "co_filename", None)
        if filename is not None and _users_file(filename, recorder):
            return True
        if isinstance(value, (map, filter)):
            try:
                stack.extend(value.__reduce__()[1][:1])
            except (TypeError, IndexError, AttributeError):
                pass
    return False


def _callee_code(fn: Any, args: Any = ()) -> Any:
    """The code object of the Python function that calling ``fn(*args)`` runs: through ``functools.partial``
    (``Thread(target=partial(work, x))``; ``asyncio.to_thread``'s ``partial(context.run, func, ...)``),
    ``contextvars.Context.run``, bound methods and callable objects. A partial's target was taken for a library's
    thread (no ``__code__``): its syncs went unpredicted and unnamed, and one still running at the block's end was
    not named."""
    import contextvars

    args = tuple(args) if isinstance(args, (tuple, list)) else ()
    for _ in range(16):
        if isinstance(fn, functools.partial):
            fn, args = fn.func, tuple(fn.args) + args
        elif isinstance(getattr(fn, "__self__", None), contextvars.Context) and getattr(fn, "__name__", "") == "run" \
                and args:
            fn, args = args[0], args[1:]
        elif isinstance(getattr(fn, "__func__", None), type(_callee_code)):  # a bound method
            fn = fn.__func__
        else:
            break
    code = getattr(fn, "__code__", None)
    if code is None and fn is not None and not isinstance(fn, type):
        code = getattr(getattr(type(fn), "__call__", None), "__code__", None)  # an object with a __call__ of Python
    return code


def _users_file(filename: str, recorder: Any) -> bool:
    """Whether ``filename`` is the user's code for ``recorder``: its user files (a watch), or a cell's recorder's
    cells and the user's own modules."""
    from .sites import UserFiles

    return filename in recorder._cell_files or (recorder.watches_cells and filename in UserFiles())


def _watching_cell() -> Any:
    """The running recorder that counts every thread's syncs and names the user's threads still running at its end:
    a notebook cell's (`%%syncfree`) or a ``watch(all_threads=True)``'s; not ``syncfree run``'s, which predicts all
    of its program's threads (`_predicting_process`). None: none."""
    for recorder in reversed(dispatch.process_recorders):
        if recorder.running and not getattr(recorder, "predicts_threads", False):
            return recorder
    return None


def earlier_threads_note(recorder: Any) -> str | None:
    """A ``watch(all_threads=True)`` in predict mode: the user's threads running as it begins (a consumer fed
    through a queue), but for this one. A thread's predict session is entered in that thread only: their CUDA work
    runs without the stand-ins, its syncs not counted (a GPU counts them)."""
    here = threading.current_thread()
    names = [thread.name for thread in threading.enumerate()
             if thread is not here and thread.is_alive() and _users_code(thread, recorder)]
    if not names:
        return None
    one = len(names) == 1
    shown = ", ".join(repr(name) for name in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"thread{'' if one else 's'} {shown}, started before the block, {'runs' if one else 'run'} without predict "
            f"mode: {'its' if one else 'their'} CUDA work is not predicted, so {'its' if one else 'their'} syncs are "
            f"not counted (start {'it' if one else 'them'} in the block, or use syncfree run)")


def _predicting_cell() -> Any:
    """`_watching_cell`'s recorder where it predicts (no CUDA): the user's threads its code starts, and the tasks it
    hands a pool, run under its stand-ins. A ``watch(all_threads=True)`` left them without: a block whose thread
    synced passed with 0 syncs, as the block that watches one thread failed."""
    recorder = _watching_cell()
    return recorder if recorder is not None and recorder.mode == "predict" else None


def _task_owner() -> tuple[Any, Any] | None:
    """``(recorder, predicting)`` for a task that code hands a pool's threads now: the recorder it is routed to and, in
    predict mode, the one whose session it runs under; in a predicted notebook cell (whose recorder counts every
    thread's syncs, as debug mode on a GPU does), no route and the cell's session: a pool made in an earlier cell ran
    the task without the stand-ins ("Torch not compiled with CUDA enabled"). None: the task runs as it is."""
    recorder = _routed_recorder()
    if recorder is not None:
        return recorder, recorder if recorder.mode == "predict" else None
    cell = _predicting_cell()
    return (None, cell) if cell is not None else None


def _submit(pool: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    owner = _task_owner()
    if owner is None:
        return _real["submit"](pool, fn, *args, **kwargs)
    recorder, predicting = owner
    began = _task_began(recorder, fn, args)
    # The pool may start a worker thread here: it belongs to the pool, not to this watch (nor to one whose block
    # called this code: DETACHED stops the anchors too).
    token = dispatch.route(dispatch.DETACHED)
    try:
        future = _real["submit"](pool, _run_for, recorder, predicting, fn, *args, **kwargs)
    except BaseException:
        if began is not None:
            _ended(*began)
        raise
    finally:
        dispatch.unroute(token, dispatch.DETACHED)
    if began is not None:  # done, failed or cancelled
        future.add_done_callback(lambda _future: _ended(*began))
    return future


def _task_tracker(recorder: Any) -> Any:
    """The recorder that names a task of the user's still running at its end: the watch the code handing it is
    routed to, or a watching cell's (`%%syncfree`, ``watch(all_threads=True)``: no route there). A cell's task still
    running at the cell's end was neither counted nor named: the cell said 0 syncs and `syncfree run NOTEBOOK`
    passed. Not a process recorder that predicts its program's threads (``syncfree run``)."""
    if recorder is not None:
        return recorder if recorder.scope == "context" else None
    return _watching_cell()


def _users_task(recorder: Any, fn: Any, args: Any = ()) -> bool:
    """Whether ``fn``, handed to a pool's threads by a watch's code, is the user's (not a library's task)."""
    if recorder is None:
        return False
    filename = getattr(_callee_code(fn), "co_filename", None)
    if filename is not None and _users_file(filename, recorder):
        return True
    return _users_code_among(args, recorder)


def _task_began(recorder: Any, fn: Any, args: Any = ()) -> tuple[Any, object] | None:
    """`_began` for a task of the user's code that a watch's (or a watching cell's) code handed a ThreadPoolExecutor
    (ended by its future): the tracking recorder and the key."""
    tracker = _task_tracker(recorder)
    return (tracker, _began(tracker, "task")) if _users_task(tracker, fn, args) else None


def _pool_result_running(result: Any) -> Any:
    """Whether a ThreadPool's result (``apply_async``/``map``'s, or ``imap``'s iterator) has tasks not done; None
    where it cannot tell."""
    ready = getattr(result, "ready", None)
    if callable(ready):
        return lambda: not ready()
    if hasattr(result, "_index") and hasattr(result, "_length"):  # IMapIterator: all results in when they match
        return lambda: result._length is None or result._index < result._length
    return None


#: multiprocessing.pool.ThreadPool's methods that hand its threads a function (map, starmap and their _async forms go
#: through _map_async): each is routed as `_submit` routes a ThreadPoolExecutor's task (`_thread_pool_tasks`).
_THREAD_POOL_METHODS = ("apply_async", "_map_async", "imap", "imap_unordered")


def _thread_pool_task(key: str) -> Any:
    def hand(pool: Any, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        """``ThreadPool.<method>(func, ...)``: the function runs in the pool's threads (started before the block, or
        daemon threads of it) routed to the recorder whose code hands it, under its predict session, as a
        ThreadPoolExecutor's task does (`_submit`): its syncs were no watch's, and a block passed."""
        owner = _task_owner()
        if owner is None or not callable(func):
            return _real[key](pool, func, *args, **kwargs)
        result = _real[key](pool, functools.partial(_run_for, *owner, func), *args, **kwargs)
        tracker = _task_tracker(owner[0])
        running = _pool_result_running(result) if _users_task(tracker, func) else None
        if running is not None:
            _began(tracker, "task", running)
        return result

    hand.__name__ = hand.__qualname__ = key
    return hand


def _run_coroutine_threadsafe(coro: Any, loop: Any) -> Any:
    """``asyncio.run_coroutine_threadsafe``: a coroutine that a routed context hands to an event loop running in
    another thread (a server's, a background loop started before the block) runs routed to that recorder, as a pool's
    task does (`_submit`): its syncs were the loop thread's, owned by no watch, and the block passed."""
    owner = _task_owner()  # in a predicted cell: its session (a %%syncfree cell's coroutine ran without: 0 syncs)
    if owner is None or not sys.modules["asyncio"].iscoroutine(coro):
        return _real["run_coroutine_threadsafe"](coro, loop)
    return _real["run_coroutine_threadsafe"](_routed_coroutine(*owner, coro), loop)


async def _routed_coroutine(recorder: Any, predicting: Any, coro: Any) -> Any:
    """``coro`` awaited routed to ``recorder`` (its task's own context) and anchored to this frame, under a predict
    session reporting to ``predicting`` (None: none) while that one still runs (`_run_for`'s, for a coroutine)."""
    token = dispatch.route(recorder) if recorder is not None else None
    anchor = dispatch.anchor(recorder, sys._getframe()) if recorder is not None else None
    try:
        if predicting is not None and predicting.running:
            with predicting.thread_session():
                return await coro
        return await coro
    finally:
        if recorder is not None:
            dispatch.unanchor(anchor)
            dispatch.unroute(token, recorder)


def predict_in_forked_child(recorder: Any) -> None:
    """In a child just forked: its one thread is the thread that forked, and it runs the child's code from here to
    the child's end. When that thread ran without the stand-ins (a watched test's daemon thread, which gets no
    session: the worker handler of a ``multiprocessing.Pool`` replacing a worker, ``maxtasksperchild``) and
    ``recorder`` predicts, the child's CUDA code would fail on a CPU build ("Torch not compiled with CUDA enabled")
    instead of being predicted: the thread gets a predict session for the rest of the child's life
    (``recorder.predict_forked_child()``)."""
    if recorder is None or not recorder.running or recorder.mode != "predict":
        return
    recorder.predict_forked_child()


def _recorder_here() -> Any:
    """The recorder whose report the processes this thread starts belong to: the one recording the thread by name (a
    watch's context, a process recorder's own thread), else the one its syncs go to (a ``%%syncfree`` cell counts
    every thread of the process: a Pool that a thread of the cell starts is the cell's, as its syncs are)."""
    return dispatch.owner_here() or dispatch.owner()


_starting = threading.local()  # depth: a child is being started in this thread (`_not_the_programs_fork`)


@contextlib.contextmanager
def _not_the_programs_fork() -> Iterator[None]:
    """A fork in this thread meanwhile starts a child another way (multiprocessing's `_process_start`, subprocess's
    ``preexec_fn``, os.spawn*, a pty for ``!cmd``): not one of the program's own ``os.fork()`` (`_before_fork`)."""
    _starting.depth = getattr(_starting, "depth", 0) + 1
    try:
        yield
    finally:
        _starting.depth -= 1

#: The followers of this process's children now (`syncfree.processes.ForkedChildren`: syncfree run's, a watched
#: test's), innermost last, which each puts in and takes out: the multiprocessing children started meanwhile are its
#: (`_process_start`); while none follows, a watch follows those its code starts (its ``child_settings``).
followers: list[Any] = []


def current_follower() -> Any:
    """The follower (`syncfree.processes.ForkedChildren`) that the multiprocessing children started now belong to,
    if any."""
    return followers[-1] if followers else None


def _before_fork() -> None:
    """``os.register_at_fork``: a process that a recorder's code forks with ``os.fork()`` itself (not through
    multiprocessing, which `_process_start` sees, nor subprocess), while nothing follows the process's forks
    (``syncfree run`` and a watched test patch ``os.fork``), is followed by the follower of the watch's or the
    cell's children (`_watch_follower`), which expects its report (`ForkedChildren.forked_here`); a recorder that
    follows no children names it as unwatched."""
    _forking.taker = None
    if getattr(_starting, "depth", 0) or current_follower() is not None:
        return
    recorder = _recorder_here()
    if recorder is None or not recorder.running:
        return
    follower = _watch_follower(recorder)
    if follower is not None:
        follower.fork_starting()  # its folder, before the child needs it
    _forking.taker = (recorder, follower)


def _after_fork_in_parent() -> None:
    taker, _forking.taker = getattr(_forking, "taker", None), None
    if taker is not None:
        recorder, follower = taker
        if follower is None:
            recorder.unwatched_forks += 1
        else:
            follower.fork_done()


def _after_fork_in_child() -> None:
    taker, _forking.taker = getattr(_forking, "taker", None), None
    if taker is not None and taker[1] is not None:
        taker[1].forked_here()  # this child reports its syncs from the fork on, as a followed fork does


_forking = threading.local()  # taker: (recorder, follower) of the fork under way in this thread (`_before_fork`)

if hasattr(os, "register_at_fork"):  # POSIX; once per process, and it cannot be taken back: it checks, nothing else
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def _process_start(process: Any) -> Any:
    """``BaseProcess.start``: a follower of the process's children (syncfree.processes) starts it its way; else a
    child that a recorder's code starts is named in that recorder's report."""
    with _not_the_programs_fork():
        return _start_child(process)


def _start_child(process: Any) -> Any:
    follower = current_follower()
    if follower is not None:
        follower.start_process(_real["process_start"], process)
        recorder = dispatch.owner_here()
        if recorder is not None and recorder.child_settings is not None and process.pid is not None \
                and not follower.collects_for(recorder):
            # a watch inside syncfree run or a watched test: its child's report counts for the watch too
            recorder.followed_children.append((follower, process.pid))
        return None
    recorder = _recorder_here()
    if recorder is None or _compile_worker(sys._getframe(1)):
        return _real["process_start"](process)
    children = _watch_follower(recorder)
    if children is not None:  # a watch: its children are its own
        if children.start_process(_real["process_start"], process):
            recorder.child_started(process.pid, sys._getframe(1))
            return None
    else:
        _real["process_start"](process)
    recorder.unwatched_children.append(str(process.name))
    return None


class _SharedPatch:
    """One shared replacement of ``owner.name``, counted: each user (the thread patches, a follower of child
    processes) hooks it once and unhooks it once, and the last one out puts the original back, so that users that end
    in any order leave no layer behind. The original is ``_real[key]``."""

    def __init__(self, owner: Any, name: str, replacement: Any, key: str) -> None:
        self.owner, self.name, self.replacement, self.key = owner, name, replacement, key
        self.users = 0

    def hook(self) -> None:
        if self.users == 0 and vars(self.owner).get(self.name) is not self.replacement:
            _real[self.key] = vars(self.owner)[self.name]
            setattr(self.owner, self.name, self.replacement)
        self.users += 1

    def unhook(self, recorder: Any = None) -> None:
        """One user fewer (a replacement the program put over ours stays: ``recorder``'s report says so)."""
        if self.users == 0:
            return
        self.users -= 1
        if self.users == 0:
            current = vars(self.owner).get(self.name)
            if current is self.replacement:
                setattr(self.owner, self.name, _real[self.key])
            elif recorder is not None:
                owner = getattr(self.owner, "__qualname__", None)  # a class's, or a module's (os.system)
                owner = f"{self.owner.__module__}.{owner}" if owner else self.owner.__name__
                recorder.note(f"{owner}.{self.name} was replaced during the run; syncfree left the replacement "
                              "in place")


def _popen_init(popen: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
    """``subprocess.Popen.__init__``: a Python program that the program's own code starts is named in the notes of
    the follower of the process's children, else of the recorder whose code started it (it runs unwatched)."""
    real = _real["popen_init"]
    follower = current_follower()
    recorder = _recorder_here() if follower is None else None
    if (follower is None and recorder is None) or not (
            called_by_the_program(sys._getframe(1))
            or runs_the_programs_code(args, kwargs.get("executable"), kwargs.get("cwd", rest[8] if len(rest) > 8 else None))):
        if follower is not None and _started_by_execnet(sys._getframe(1)):
            follower.test_workers += 1  # pytest-xdist's workers run the program's tests: named, not judged
        with _not_the_programs_fork():  # a library's command (its preexec_fn's fork too)
            return real(popen, args, *rest, **kwargs)
    shell = bool(kwargs.get("shell")) or (len(rest) > 7 and bool(rest[7]))  # shell: Popen's 9th parameter
    argv = shell_words(args) if shell else args  # `python train.py` through /bin/sh: its first command's words
    program = python_program(argv, None if shell else kwargs.get("executable"))
    launch = _launcher(argv, program)
    if launch is not None:  # torchrun's ranks: its library starts them, which no follower sees; named
        _unwatched(follower, recorder, launch)
        return real(popen, args, *rest, **kwargs)
    # The follower the program reports to, watching itself (syncfree/programs.py). Another command the program's
    # own code runs (a shell script, `bash -c "python a.py; python b.py"`, make) gets the hook too: the Python
    # programs of this interpreter it runs watch themselves and tell their pids.
    taker = None
    if len(rest) < 10:  # env is Popen's 11th parameter: given by name, as a rule
        taker = follower if follower is not None else _watch_follower(recorder)
        interpreter = None if shell else kwargs.get("executable")
        if interpreter is None:
            interpreter = next(iter(argv or ()), None)
        given = None
        if taker is not None and (program is None or _same_interpreter(os.fsdecode(interpreter), kwargs.get("env"))) \
                and not (shell and isinstance(args, str) and _SETS_PYTHONPATH.search(args)):
            given = taker.program_env(kwargs.get("env"))
        if given is None:
            taker = None
        else:
            kwargs["env"], token = given
    with _not_the_programs_fork():  # a preexec_fn's fork runs the command
        real(popen, args, *rest, **kwargs)
    if taker is not None:
        taker.program_started(popen.pid, program, token, command_label(args))
        _program_is_followed(follower, recorder, popen.pid, sys._getframe(1))
    elif program is not None:
        _unwatched(follower, recorder, program)
    return None


def _watch_follower(recorder: Any) -> Any:
    """The follower of the children that a watch's (or a cell's) code starts, made with its first child
    (multiprocessing's or a Python program's), or None where the recorder watches no children (not a watch's)."""
    settings = recorder.child_settings
    if settings is None:
        return None
    if recorder.children is None:
        recorder.children = settings.follow_children()
        if recorder.watches_cells:
            recorder.children.ended = "the cell ended"  # what a child still running outlived (its note)
    return recorder.children


def adopt_children(reports: list, notes: list[str], frame: Any) -> None:
    """The children an inner follower collected (a watched test's, which stood in front while they ran) count for the
    follower around it too: the one in front now (``syncfree run``'s), else that of the recorder recording this thread
    (a ``%%syncfree`` cell's or a watch's around ``pytest.main``, made now). A cell's recorder puts their syncs on
    the cell line on ``frame``'s stack (`SyncRecorder.child_started`), as for the children it follows itself."""
    follower, recorder = current_follower(), None
    if follower is None:
        recorder = _recorder_here()
        if recorder is None or not getattr(recorder, "running", False):
            return
        follower = _watch_follower(recorder)
        if follower is None:
            return
    follower.adopt(reports, notes)
    if recorder is not None:
        for report in reports:
            recorder.child_started(report.pid, frame)


def _launcher(argv: Any, program: str | None) -> str | None:
    from ..programs import launcher

    return launcher(argv, program) if argv is not None and not isinstance(argv, (str, bytes, os.PathLike)) else None


def _same_interpreter(interpreter: str, env: Any = None) -> bool:
    from ..programs import same_interpreter

    return same_interpreter(interpreter, env)


def _started_by_execnet(frame: Any) -> bool:
    """Whether execnet starts this process (pytest-xdist's workers: ``python -c`` reading its gateway from stdin, which
    then runs the program's tests)."""
    while frame is not None:
        if frame.f_globals.get("__name__", "").partition(".")[0] == "execnet":
            return True
        frame = frame.f_back
    return False


def called_by_the_program(frame: Any) -> bool:
    """Whether the subprocess being started from ``frame`` (the caller of ``Popen.__init__``, of ``os.system``) is
    the program's own (its code called subprocess, ``os.popen``, ``os.system``, or a notebook's ``!cmd``), not a
    library's (torch.compile's compile workers, a package's helpers)."""
    from .sites import UserFiles

    shell = False  # IPython's or asyncio's code ran the command (a %%bash cell's, which its cell's hook follows)
    while frame is not None and (frame.f_code.co_filename in _RUNNER_FILES
                                 or frame.f_globals.get("__name__", "").startswith(_RUNNER_PACKAGES)):
        shell = shell or frame.f_code.co_filename not in _RUNNER_FILES
        frame = frame.f_back
    # What only calls a function it was handed (a thread's target, a pool's task, an atexit handler: the program
    # handed it subprocess.run or os.system itself): looked past. Where nothing else is above, no library started the
    # command: the program's (it ran unwatched and unnamed).
    dispatched = False
    while frame is not None and (frame.f_code.co_filename in _DISPATCH_FILES or frame.f_code in DISPATCHERS):
        dispatched = True
        frame = frame.f_back
    if frame is None or (dispatched and frame.f_globals.get("__name__", "").startswith("syncfree.")):
        return dispatched and not shell  # a thread's bottom, or syncfree run's launcher below an atexit handler
    return frame.f_code.co_filename in UserFiles()


# What runs a command the program asks for: subprocess, and os (os.popen; "<frozen os>" where os is frozen).
_RUNNER_FILES = (subprocess.__file__, os.popen.__code__.co_filename)
#: syncfree's code that calls a function of the program's (a routed thread's run, a pool task's; syncfree run's
#: atexit handlers add theirs): looked past, as the standard library's below.
DISPATCHERS: set = set()
# What calls a function it was handed: a thread's run, a thread pool's work item, a ThreadPool's worker.
_DISPATCH_FILES = frozenset({threading.__file__, _futures_thread.__file__,
                             os.path.join(os.path.dirname(threading.__file__), "multiprocessing", "pool.py")})
# A notebook's `!cmd` and `x = !cmd` (their shell's system, getoutput); asyncio's create_subprocess_exec and _shell
# (the coroutine that awaits them is the caller: a task's frames are chained through the awaits).
_RUNNER_PACKAGES = ("IPython.", "ipykernel.", "asyncio.")


def _run_command(key: str, command: Any, args: tuple, kwargs: dict, frame: Any) -> Any:
    """``os.system(command)`` and IPython's ``system`` (a notebook's ``!python train.py``; ``_real[key]``): the
    command line runs with the start-up hook in the environment (`_run_hooked`), where it is the program's own."""
    real = _real[key]
    follower = current_follower()
    recorder = _recorder_here() if follower is None else None
    if (follower is None and recorder is None) or not called_by_the_program(frame):
        return real(command, *args, **kwargs)
    words = shell_words(command)
    program = python_program(words) if words else None
    launch = _launcher(words, program) if words else None
    if launch is not None:  # torchrun's ranks: its library starts them, which no follower sees; named
        _unwatched(follower, recorder, launch)
        return real(command, *args, **kwargs)
    if (program is not None and not _same_interpreter(words[0])) \
            or (isinstance(command, str) and _SETS_PYTHONPATH.search(command)):
        if program is not None:
            _unwatched(follower, recorder, program)
        return real(command, *args, **kwargs)
    return _run_hooked(follower, recorder, program, frame, lambda: real(command, *args, **kwargs))


def _run_hooked(follower: Any, recorder: Any, program: str | None, frame: Any, run: Any) -> Any:
    """``run()`` a command the program's own code runs and waits for (``os.system``, a notebook's ``!cmd`` and
    ``%%bash`` cell), with the start-up hook in the process's environment (syncfree/programs.py), which the shell and
    what it starts inherit: the Python programs of this interpreter it runs (``program``: the one it is, where it is
    one; None: a shell line, a script) watch themselves, tell their pids under a token and report to the follower of
    this code's children, as programs started with subprocess do (`_popen_init`)."""
    taker = follower if follower is not None else _watch_follower(recorder)
    given = taker.program_env(None) if taker is not None else None
    if given is None:
        if program is not None:
            _unwatched(follower, recorder, program)
        return run()
    env, token = given
    # os.environ's assignments reach the C environment; the hook's variables are taken out after.
    saved = {name: os.environ.get(name) for name in env if os.environ.get(name) != env[name]}
    try:
        os.environ.update({name: env[name] for name in saved})
        with _not_the_programs_fork():  # ipykernel's `!cmd` forks a pty (pexpect) for the command
            return run()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        taker.program_started(None, program, token)
        told = taker.programs_of(token)
        if not told and program is not None:  # it never started its watch (-I, a failure before it): unwatched
            _unwatched(follower, recorder, program)
        for pid in told:
            _program_is_followed(follower, recorder, pid, frame)


def _unwatched(follower: Any, recorder: Any, program: str) -> None:
    """A Python program (or a launch) the code started runs unwatched: named in the notes of the follower of the
    process's children, else of the recorder whose code started it."""
    (follower.programs if follower is not None else recorder.unwatched_programs).append(program)


def _program_is_followed(follower: Any, recorder: Any, pid: int, frame: Any) -> None:
    """A Python program started from ``frame`` reports to ``follower`` (or to ``recorder``'s own follower): the
    recorder of a cell puts its syncs at the line that started it, a watch inside a follower counts them too."""
    if follower is None:
        recorder.child_started(pid, frame)
        return
    inner = dispatch.owner_here()
    if inner is not None and inner.child_settings is not None and not follower.collects_for(inner):
        # a watch inside syncfree run or a watched test: the program's report counts for the watch too
        inner.followed_children.append((follower, pid))


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?(\.exe)?$")


_DESCRIPTOR = re.compile(r"(^|\s)\d+(?=[<>])")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# A command line that sets PYTHONPATH itself (PYTHONPATH=src python train.py): the start-up hook's own PYTHONPATH
# would not reach its Python, which then runs unwatched (named).
_SETS_PYTHONPATH = re.compile(r"(^|[\s;&|(])PYTHONPATH=")


def shell_words(command: Any) -> list[str] | None:
    """The words of the command that a shell command line runs Python with (``"cd run && python train.py --lr 1 >
    log"`` → python, train.py, --lr, 1), else of its first command; None where it is not plain (a variable, a
    substitution, a quote it cannot read)."""
    import shlex

    if isinstance(command, (bytes, os.PathLike)):
        command = os.fsdecode(command)
    if not isinstance(command, str) or any(c in command for c in "$`"):
        return None
    commands: list[list[str]] = [[]]
    command = _DESCRIPTOR.sub(r"\1", command)  # 2>log, 2>&1: a descriptor's number, not a word
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        redirected = False  # the word after a redirection is its file
        for word in lexer:
            if word and set(word) <= set("();<>|&"):
                if set(word) & set("<>"):
                    redirected = True
                elif commands[-1]:
                    commands.append([])  # a command ends at ; && || | & ( )
                continue
            if redirected:
                redirected = False
                continue
            commands[-1].append(word)
    except ValueError:
        return None
    for words in commands:  # CUDA_VISIBLE_DEVICES=0 python train.py: the command after its assignments
        while words and _ASSIGNMENT.match(words[0]):
            del words[0]
    return next((words for words in commands if words and (python_program(words) is not None
                                                           or _launcher(words, None))), commands[0] or None)


def command_label(args: Any) -> str:
    """How a note names a command (``bash serve.sh``, ``make train``): its words, the program by its file name."""
    try:
        words = [os.fsdecode(args)] if isinstance(args, (str, bytes, os.PathLike)) else [os.fsdecode(a) for a in args]
    except TypeError:
        return "?"
    if len(words) > 1:
        words[0] = os.path.basename(words[0])
    text = " ".join(words)
    return text if len(text) <= 60 else text[:57] + "..."


def python_program(args: Any, executable: Any = None) -> str | None:
    """What a subprocess command runs when it is a Python program (``script.py``, ``-m package``, ``-c``), else
    None: the interpreter is this one or is named python*, and it is given a program rather than a flag alone."""
    main = _python_main(args, executable)
    if main is None:
        return None
    kind, value = main
    return {"script": os.path.basename(value) if value != "-" else "-", "module": f"-m {value}",
            "code": "-c ..."}[kind]


def _python_main(args: Any, executable: Any = None) -> tuple[str, str] | None:
    """The program of a Python command: ("script", its path as given), ("module", its name) or ("code", "")."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return None  # a shell line or a bare program: not read
    try:
        argv = [os.fsdecode(a) for a in args]
    except TypeError:
        return None
    if not argv:
        return None
    interpreter = os.fsdecode(executable) if executable is not None else argv[0]
    if interpreter != sys.executable and not _PYTHON.search(os.path.basename(interpreter)):
        return None
    rest = iter(argv[1:])
    for arg in rest:
        if arg in ("-m", "-c"):
            value = next(rest, "")
            return ("module", value) if arg == "-m" else ("code", "")
        if arg.startswith("-m") and len(arg) > 2:
            return ("module", arg[2:])
        if arg in ("-W", "-X"):
            next(rest, None)
            continue
        if not arg.startswith("-"):
            return ("script", arg)
    return None


def runs_the_programs_code(args: Any, executable: Any, cwd: Any) -> bool:
    """Whether a command a library starts is a Python program of this interpreter whose main is the program's own
    code: one of the user's scripts (Lightning's DDP launcher runs the training script again for each rank) or a
    module of the program's by ``-m``. A library's own Python (torch.compile's workers, a ``-c`` helper, an installed
    command's shim: bin/pytest) is not."""
    import sysconfig

    from .sites import UserFiles

    main = _python_main(args, executable)
    if main is None or main[0] == "code" or main[1] in ("", "-"):
        return False
    interpreter = os.fsdecode(executable) if executable is not None else os.fsdecode(next(iter(args)))
    if not _same_interpreter(interpreter):
        return False
    kind, value = main
    if kind == "script":
        path = os.path.join(os.fsdecode(cwd) if cwd is not None else os.getcwd(), value)
    else:
        running = sys.modules.get("__main__")
        spec = getattr(running, "__spec__", None)
        module = running if spec is not None and spec.name == value else sys.modules.get(value)
        path = getattr(module, "__file__", None)
        if not path:
            return False
    path = os.path.abspath(path)
    scripts = sysconfig.get_path("scripts")
    if scripts and os.path.dirname(path) == os.path.abspath(scripts):
        return False
    return path in UserFiles()


def _command_runner(key: str) -> Any:
    """The replacement of a function that runs a shell command line and waits for it (`_run_command`)."""

    def run_command(command: Any, *args: Any, **kwargs: Any) -> Any:
        return _run_command(key, command, args, kwargs, sys._getframe(1))

    run_command.__name__ = run_command.__qualname__ = key
    return run_command


def _spawn(key: str, mode: Any, path: Any, argv: Any, rest: tuple, kwargs: dict, frame: Any) -> Any:
    """``os.posix_spawn[p](path, argv, env)`` and ``os.spawnv[p][e](mode, file, args[, env])`` (``key``: which;
    ``mode`` None for posix_spawn): a command the program's own code starts gets the start-up hook in its
    environment, as one started with subprocess does (`_popen_init`): a Python program of this interpreter, or
    another command whose Python programs watch themselves and tell their pids. os.spawn* forks, then execs: that
    fork is not one of the program's (`_after_fork_in_parent`)."""
    real, posix = _real[key], mode is None
    with_env = posix or key.endswith("e")
    env = (rest[0] if rest else kwargs.pop("env", None)) if with_env else None
    rest = rest[1:] if with_env and rest else rest
    follower = current_follower()
    recorder = _recorder_here() if follower is None else None
    if (follower is None and recorder is None) or frame.f_code.co_filename == subprocess.__file__ \
            or not called_by_the_program(frame):
        return _spawned(real, mode, path, argv, env, rest, kwargs, with_env)
    program = python_program(argv, path)
    launch = _launcher(argv, program)
    if launch is not None or (program is not None and not _same_interpreter(os.fsdecode(path))):
        _unwatched(follower, recorder, launch if launch is not None else program)
        return _spawned(real, mode, path, argv, env, rest, kwargs, with_env)
    taker = follower if follower is not None else _watch_follower(recorder)
    given = taker.program_env(env) if taker is not None else None
    if given is None:
        if program is not None:
            _unwatched(follower, recorder, program)
        return _spawned(real, mode, path, argv, env, rest, kwargs, with_env)
    env, token = given
    if not with_env:  # spawnv[p]: its e variant, with the environment
        key = key + "e"
        real = _real[key]
    with _not_the_programs_fork():  # os.spawn* forks, then execs the command
        result = _spawned(real, mode, path, argv, env, rest, kwargs, True)
    pid = None if mode is not None and mode == getattr(os, "P_WAIT", 0) else result  # P_WAIT: the exit status
    taker.program_started(pid, program, token, command_label(argv))
    told = [pid] if pid is not None else taker.programs_of(token)
    if not told and program is not None:  # it never started its watch (-I): it ran unwatched
        _unwatched(follower, recorder, program)
    for child in told:
        _program_is_followed(follower, recorder, child, frame)
    return result


def _spawned(real: Any, mode: Any, path: Any, argv: Any, env: Any, rest: tuple, kwargs: dict, with_env: bool) -> Any:
    head = (path, argv) if mode is None else (mode, path, argv)
    return real(*head, *((env,) if with_env else ()), *rest, **kwargs)


def _spawn_runner(key: str, posix: bool) -> Any:
    """The replacement of ``os.<key>`` (`_spawn`)."""

    if posix:
        def spawn(path: Any, argv: Any, *rest: Any, **kwargs: Any) -> Any:
            return _spawn(f"os_{key}", None, path, argv, rest, kwargs, sys._getframe(1))
    else:
        def spawn(mode: Any, path: Any, argv: Any, *rest: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            return _spawn(f"os_{key}", mode, path, argv, rest, kwargs, sys._getframe(1))

    spawn.__name__ = spawn.__qualname__ = key
    return spawn


_process_patch = _SharedPatch(_mp_process.BaseProcess, "start", _process_start, "process_start")
_popen_patch = _SharedPatch(subprocess.Popen, "__init__", _popen_init, "popen_init")
_command_patches = {"os": _SharedPatch(os, "system", _command_runner("os_system"), "os_system")}
for _name in ("posix_spawn", "posix_spawnp", "spawnv", "spawnve", "spawnvp", "spawnvpe"):  # POSIX; os.spawnl* call these
    if callable(getattr(os, _name, None)):
        _command_patches[_name] = _SharedPatch(os, _name, _spawn_runner(_name, _name.startswith("posix")), f"os_{_name}")
#: The modules whose ``system`` runs a notebook's ``!cmd`` (IPython's shell, ipykernel's): patched once imported.
_SHELL_MODULES = ("IPython.core.interactiveshell", "ipykernel.zmqshell")


_SCRIPT_MAGICS = "IPython.core.magics.script"  # %%bash, %%sh, %%script, %%python3...: ScriptMagics.shebang


def _run_cell_magic(shell: Any, magic_name: str, line: str, cell: str, *args: Any, **kwargs: Any) -> Any:
    """``InteractiveShell.run_cell_magic``: a script cell (``%%bash`` with ``python train.py`` in it) runs its
    interpreter with the start-up hook in the environment (`_run_hooked`), where the cell is the program's own; the
    other cell magics run as they would."""
    real = _real["run_cell_magic"]
    try:
        function = shell.find_cell_magic(magic_name)
    except Exception:  # noqa: BLE001 - IPython's own error follows from the real call
        function = None
    follower = current_follower()
    recorder = _recorder_here() if follower is None else None
    if getattr(function, "__module__", None) != _SCRIPT_MAGICS or (follower is None and recorder is None) \
            or not called_by_the_program(sys._getframe(1)):
        return real(shell, magic_name, line, cell, *args, **kwargs)
    return _run_hooked(follower, recorder, None, sys._getframe(1),
                       lambda: real(shell, magic_name, line, cell, *args, **kwargs))


def _command_runners() -> list[_SharedPatch]:
    for name in _SHELL_MODULES:
        module = sys.modules.get(name)
        if name not in _command_patches and module is not None and callable(vars(module).get("system")):
            key = f"{name}.system"
            _command_patches[name] = _SharedPatch(module, "system", _command_runner(key), key)
    shell = sys.modules.get("IPython.core.interactiveshell")
    if "run_cell_magic" not in _command_patches and shell is not None \
            and callable(vars(getattr(shell, "InteractiveShell", object)).get("run_cell_magic")):
        _command_patches["run_cell_magic"] = _SharedPatch(shell.InteractiveShell, "run_cell_magic", _run_cell_magic,
                                                          "run_cell_magic")
    return list(_command_patches.values())


#: `_process_start` in ``BaseProcess.start`` for one more user, and one fewer.
hook_process_start, unhook_process_start = _process_patch.hook, _process_patch.unhook


def hook_popen() -> None:
    """`_popen_init` in ``subprocess.Popen.__init__``, and `_run_command` in ``os.system`` and IPython's ``system``,
    for one more user."""
    _popen_patch.hook()
    for patch in _command_runners():
        patch.hook()


def unhook_popen(recorder: Any = None) -> None:
    """One user fewer of `hook_popen`'s patches (a replacement the program put over one stays: ``recorder``'s report
    says so)."""
    _popen_patch.unhook(recorder)
    for patch in _command_runners():
        patch.unhook(recorder)


_STARTERS = ("multiprocessing", "concurrent")  # the standard library's process starters
_COMPILERS = ("torch/_inductor/", "torch/_dynamo/", "torch\\_inductor\\", "torch\\_dynamo\\")


def _compile_worker(frame: Any) -> bool:
    """Whether the process being started is torch.compile's (inductor's compile workers run no program code): the
    first caller outside the standard library's process starters is torch's compiler."""
    while frame is not None:
        filename = frame.f_code.co_filename
        package = frame.f_globals.get("__name__", "").partition(".")[0]
        if package not in _STARTERS and filename != __file__:
            return any(part in filename for part in _COMPILERS)
        frame = frame.f_back
    return False


def hold() -> None:
    """A recorder enters: the patches go in if they are not (the recorder pushed `release` on its Undo first)."""
    with dispatch.lock:
        install()
        _hook_pools()


def hook_pools_now() -> None:
    """A pool's worker has started (syncfree.processes): its module is imported now, and the tasks handed to it from
    here on are told (`_pool_tasks`), where the patches are in (a recorder holds them; none goes in alone: `install`
    puts the rest in only where none is)."""
    with dispatch.lock:
        if _installed:
            _hook_pools()


def _hook_pools() -> None:
    """Put the pools' patches in (`_pool_tasks`) once their modules are imported: a Pool made before a block means
    the program imported them, maybe after the first recorder came in (syncfree run's); never imported here."""
    pools = sys.modules.get("multiprocessing.pool")
    if pools is not None and callable(vars(pools.Pool).get("_check_running")) \
            and vars(pools.Pool)["_check_running"] is not _pool_tasks:
        _replace(pools.Pool, "_check_running", _pool_tasks, "pool_check_running")
    thread_pool = getattr(pools, "ThreadPool", None) if pools is not None else None
    if isinstance(thread_pool, type) and "apply_async" not in vars(thread_pool):
        for name in _THREAD_POOL_METHODS:
            if callable(getattr(thread_pool, name, None)):
                _replace(thread_pool, name, _thread_pool_task(f"thread_pool_{name}"), f"thread_pool_{name}")
    executors = sys.modules.get("concurrent.futures.process")
    if executors is not None and callable(vars(executors.ProcessPoolExecutor).get("submit")) \
            and vars(executors.ProcessPoolExecutor)["submit"] is not _pool_tasks:
        _replace(executors.ProcessPoolExecutor, "submit", _pool_tasks, "executor_submit")


def release(recorder: Any) -> None:
    """A recorder has left (idempotent): the last one out takes the patches out; what the program put over one
    stays, and ``recorder``'s report says so."""
    with dispatch.lock:
        if not dispatch.running():
            remove(recorder)


def install() -> None:
    """Put the patches in (idempotent; the caller holds dispatch.lock)."""
    if _installed:
        return
    _replace(threading.Thread, "start", _start, "start")
    _replace(_futures_thread.ThreadPoolExecutor, "submit", _submit, "submit")
    _replace(_thread, "start_new_thread", _start_new_thread, "start_new_thread")  # threading keeps its own name
    asyncio = sys.modules.get("asyncio")  # a loop running before the block imported it; else not imported here
    if asyncio is not None and callable(vars(asyncio.tasks).get("run_coroutine_threadsafe")):
        _replace(asyncio.tasks, "run_coroutine_threadsafe", _run_coroutine_threadsafe, "run_coroutine_threadsafe")
        if vars(asyncio).get("run_coroutine_threadsafe") is _real["run_coroutine_threadsafe"]:  # asyncio's own name
            _replace(asyncio, "run_coroutine_threadsafe", _run_coroutine_threadsafe,
                     "asyncio.run_coroutine_threadsafe")
    hook_process_start()  # after the two: remove() unhooks only when they are in
    hook_popen()


#: The original of a patch put on a class that inherited the attribute: `remove` deletes the patch.
_INHERITED = object()


def _replace(owner: Any, name: str, replacement: Any, key: str) -> None:
    original = vars(owner).get(name, _INHERITED)
    _real[key] = getattr(owner, name) if original is _INHERITED else original
    _installed.append((owner, name, original, replacement))
    setattr(owner, name, replacement)


def remove(recorder: Any) -> None:
    """Take the patches out (idempotent; the caller holds dispatch.lock). A function the
    program put over one stays, and ``recorder``'s report says so."""
    if _installed:
        unhook_popen(recorder)
        unhook_process_start(recorder)
    while _installed:
        owner, name, original, replacement = _installed[-1]
        current = vars(owner).get(name)
        if current is replacement and original is _INHERITED:
            delattr(owner, name)
        elif current is replacement:
            setattr(owner, name, original)
        elif current is not original and not (original is _INHERITED and current is None) and recorder is not None:
            where = owner.__name__ if isinstance(owner, type(os)) else f"{owner.__module__}.{owner.__qualname__}"
            recorder.note(f"{where}.{name} was replaced during the run; syncfree left the replacement in place")
        _installed.pop()


def installed() -> bool:
    """Whether the patches are in now (tests)."""
    return bool(_installed)


__all__ = ["hold", "hook_pools_now", "install", "installed", "release", "remove"]


DISPATCHERS.add(_run_for.__code__)
DISPATCHERS.update(const for const in _start.__code__.co_consts
                   if getattr(const, "co_name", None) == "run_for_recorder")
