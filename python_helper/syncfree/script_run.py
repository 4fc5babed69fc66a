"""Script runs: `run_script` runs a program as ``python`` would (``syncfree run``; argv, cwd, stdin, ``-m``, exit
status, atexit handlers, tracebacks, forked and spawned children), under a watch that starts at the program's own
import of torch (``torch_import.py``).

The command line (``cli/run_script.py``, ``cli/run_rank.py``) is glue over this module; the watch is
``watches.py``'s, the children are followed by ``processes.py``.
"""

from __future__ import annotations

import linecache
import os
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from .capture import interrupts, signal_view, stuck_main, threads
from .engine_choice import is_sync_stop
from .processes import ForkedChildren, running_recorder
from .torch_import import TorchImport, torch_installed
from .watches import ChildWatch, Watch, WatchReport, unended

_real_abort = os.abort

__all__ = ["COMMAND_FILENAME", "ModuleNotRunnable", "NO_TORCH", "ScriptRun", "run_script"]

#: The file name of ``python -c``'s code in a run (tracebacks, the recorder's sites): not Python's "<string>", which
#: every exec()'d string shares.
COMMAND_FILENAME = "<command line>"


@dataclass
class ScriptRun:
    """A program run by `run_script`: its exit status and what it synchronized.

    ``children``: a `syncfree.processes.ProcessReport` for each forked child that ended (a DataLoader or Pool
    worker, an ``os.fork()``), ``notes`` what the run could not see (children without a report);
    ``hard_exit``: the program ended with ``os._exit``, or replaced itself with ``os.exec*`` (``replaced_by``: the
    new program's command).
    """

    path: str
    exit_code: int
    report: WatchReport
    error: BaseException | None = None  # the exception that ended the script, if any
    children: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hard_exit: bool = False
    replaced_by: list[str] | None = None
    earlier: dict | None = None  # syncfree run: the report of the program this one replaced (os.exec*, followed)
    replaced_env: Any = None  # the environment the program gave the one that replaces it (None: its own)
    signal: int | None = None  # the signal that ended the program (SIGTERM): the process dies of it once reported
    in_atexit: bool = False  # the hard exit came from one of its atexit handlers (the others did not run)


class ModuleNotRunnable(ImportError):
    """``run_script(name, module=True)``: no module of that name to run (``python -m`` says so in one line)."""


def run_script(path: str, argv: Sequence[str] = (), *, mode: str | None = None,
               measure_blocked: bool = True, max_frames: int = 4,
               on_error: Callable[[BaseException], None] | None = None, module: bool = False,
               source: bytes | str | None = None,
               on_exit: Callable[[ScriptRun], None] | None = None,
               engine: str | None = None, pass_rules: Sequence[str] = (), cost: bool = False) -> ScriptRun:
    """Run a program as ``python path argv...`` would, under the engine: ``path`` a script
    file, ``"-"`` the code in ``source`` (default: read from stdin, as ``python -``), ``"-c"`` the code in
    ``source`` (``python -c source``) or, with ``module=True``, a module name (``python -m path``).

    As Python does: ``sys.argv[0]`` is the path as given ("-", "-c", or the module's file for
    ``-m``), ``__main__`` is the program, the script's folder (``-m``: the working
    directory) comes first on ``sys.path``, and after the program's end the threads it
    started are joined and its ``atexit`` handlers run, still inside the watch (their
    syncs are counted); multiprocessing's children of the run are ended as at Python's
    exit. Forked children (``os.fork``, DataLoader and Pool workers) stay watched, and
    multiprocessing's children started as new interpreters (spawn, forkserver) watch their
    targets as this run does; each reports apart (``children``, `syncfree.processes`). Afterwards the working directory,
    ``sys.argv``, ``sys.path``, ``__main__`` and the standard streams are as before.

    The exit status is what Python's would be: 0, the ``SystemExit`` code, 1 for an
    uncaught exception (130 for KeyboardInterrupt), whose traceback goes to ``on_error``
    (default: printed to stderr as Python prints it, before the atexit handlers run). ``os._exit(n)`` in the program
    ends this process too, as it would Python's: ``on_exit`` gets the run first. A file
    that cannot be read or compiled raises OSError or SyntaxError before anything runs; a
    module that cannot be found, `ModuleNotRunnable`. ``pass_rules``: rule codes whose syncs
    ``mode="error"`` records without stopping (a one-off ``model.to(device)``).

    torch is imported when the program imports it: the engine starts then, in the importing thread, before the
    program gets the module back (`TorchImport`; at once when torch is already imported). A program that never
    imports it gets a report of mode "static" without an engine, whose note says that no torch code ran.
    """
    import builtins
    import signal
    import threading
    import types

    saved_cwd = os.getcwd()
    # A folder or a zip file with a __main__.py (a zipapp): Python puts it first on sys.path and runs its __main__.
    main_of_path = not module and path not in ("-", "-c") and _runs_its_main(path)
    if module:
        code, filename, argv0, path0 = None, None, "-m", saved_cwd
    elif main_of_path:
        # its __main__.py runs as a script whose folder is the path (sys.argv[0] the path as given)
        folder = os.path.abspath(path)
        filename = os.path.join(folder, "__main__.py")
        data = _main_of(path)  # OSError (none there) for the caller
        text = _decoded(data)
        code = compile(data, filename, "exec", dont_inherit=True)
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # a zip's lines too
        argv0, path0 = path, folder
    elif path in ("-", "-c"):
        if source is None:
            if path == "-c":
                raise ValueError("run_script('-c') runs the code given as source")
            source = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        # Python names -c's code "<string>", as it names every exec()'d string (a dataclass's methods): the
        # command's own name keeps the syncs of such code out of the program's lines.
        filename, argv0, path0 = ("<stdin>" if path == "-" else COMMAND_FILENAME), path, ""
        code = compile(source, filename, "exec", dont_inherit=True)  # SyntaxError for the caller
        text = source if isinstance(source, str) else _decoded(source)
        # Lines for the recorder's attribution and for tracebacks (Python keeps none for stdin).
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    else:
        filename = os.path.abspath(path)  # __file__ and code filenames are absolute, as Python's (3.9+)
        with open(filename, "rb") as handle:  # OSError for the caller
            data = handle.read()
        code = compile(data, filename, "exec", dont_inherit=True)  # SyntaxError for the caller, before anything runs
        # sys.path[0]: the folder of the script's real file, as Python gives it (a script linked into ~/bin imports
        # the modules beside its real file)
        argv0, path0 = path, os.path.dirname(os.path.realpath(filename))
    saved = (sys.argv, list(sys.path), sys.modules.get("__main__"), sys.stdin, sys.stdout, sys.stderr,
             sys.modules.get("__mp_main__"))
    sys.argv = [argv0, *argv]
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    exit_code, failure = 0, None
    # ``engine="auto"`` reads the program's imports (import cupy: the CUPTI engine).
    program_text = "" if module else text if path in ("-", "-c") or main_of_path else _decoded(data)

    def new_runner() -> Watch:
        watch = Watch(mode, measure_blocked=measure_blocked, max_frames=max_frames, all_threads=True,
                      engine=engine, sources=(program_text,), cost=cost)
        watch._names_earlier_threads = False  # named below, at the program's import of torch
        return watch

    # A program that has not imported torch yet is watched from its import of torch on (`TorchImport`): nothing
    # syncs before it, and a program that never imports it runs as fast and small as under python.
    # Not for the CUPTI engine (asked for, or "auto" where the program imports a library that calls CUDA without
    # torch): it sees CUDA calls that no torch import comes before.
    later = "torch" not in sys.modules and torch_installed() and not _cupti_wanted(engine, program_text)
    runner: Watch | None = None if later else new_runner()
    boundary, run_thread = sys._getframe(), threading.get_ident()
    began = perf_counter()
    exit_handlers = _ExitHandlers()
    threads_before = set(threading.enumerate())
    run: ScriptRun | None = None
    closed = []

    def close_watch(exc: BaseException | None) -> None:
        if not closed:  # once: os._exit may have closed it from inside the program
            closed.append(True)
            if runner is not None:
                runner.__exit__(type(exc) if exc is not None else None, exc,
                                exc.__traceback__ if exc is not None else None)

    def finish(status: int, error: BaseException | None, hard: bool) -> ScriptRun:
        exit_handlers.remove()
        children.stop()
        reports, notes = children.collect()
        children.remove_folder()
        if runner is None:  # torch never imported: no torch code ran
            report = _report_without_torch(round((perf_counter() - began) * 1000.0, 3), libraries_before)
            if "torch" in sys.modules:  # imported past the hook (a finder of the program's own found it first)
                report.notes[:] = ["torch was imported by a finder of the program's own, past syncfree's import "
                                   "hook: no sync of this process was watched"]
        else:
            assert runner.report is not None
            report = runner.report
        return ScriptRun(filename or path, status, report, error, reports, notes, hard)

    def configure(watch: Watch) -> None:
        """What the run sets on its recorder once it runs (at the start, or at the program's import of torch)."""
        recorder = watch._recorder
        children.collector = watch
        children.watch_settings = watch.child_settings()
        if recorder is None:
            return
        if filename in ("<stdin>", COMMAND_FILENAME):
            _attribute_to(filename, recorder)
        if pass_rules:
            recorder.passes_rules = frozenset(pass_rules)
        if recorder.mode == "predict":
            # Torch function modes are per thread: each thread the program starts, daemon threads too (the
            # process ends with the run), runs in a predict session of its own that reports to the run's
            # recorder, as debug mode on a GPU sees every thread's syncs (capture/threads.py).
            recorder.predicts_threads = True
        if children.in_child:  # a forked child that imports torch itself: its syncs from here are its report's
            children.recorder_started(recorder)

    start_lock = threading.Lock()

    def start_at_torch_import() -> None:
        # In the thread that imports torch, before the importer gets it back: the engine and mode are chosen now
        # (cuda_available() needs torch), and the program's first torch call already runs under the watch.
        nonlocal runner
        with start_lock:
            if runner is not None or closed:
                return
            watch = new_runner()
            # A library calling CUDA without torch that the program imported before torch was imported during the
            # run all the same: debug mode's note on the syncs it did not see names it (engines.unseen_note).
            watch.engine.libraries = libraries_before
            in_run_thread = threading.get_ident() == run_thread
            try:
                # Another thread's stack never passes through run_script's frame: its own frame bounds nothing.
                watch._begin(boundary if in_run_thread else sys._getframe())
                runner = watch  # before the route: close_watch ends it
                if in_run_thread:
                    watch._resume()
            except BaseException:  # noqa: B036 (an interrupt half way: nothing left running)
                watch._abandon()
                runner = None
                raise
            if watch.engine.mode == "predict":
                # Torch function modes are per thread: the threads running now, but for this one, go on without
                # the stand-ins (a thread's mode is entered in that thread only).
                here = threading.current_thread()
                running = [t.name for t in threading.enumerate() if t is not here and t.is_alive()
                           and (t not in threads_before or t.ident == run_thread)]
                if running:
                    watch.engine.notes.append(
                        f"torch was first imported in thread {here.name!r} while {_names_of(running)} ran: predict "
                        "mode runs in it and in the threads started from then on, not in those (their "
                        "CUDA work is not predicted)")
            configure(watch)

    from .capture import engines

    libraries_before = tuple(engines.bypassing_libraries())
    if later:
        child_watch = ChildWatch(mode, engine, measure_blocked, max_frames)
    else:
        child_watch = runner.child_settings()

    def hard_exit(status: int, replaced_by: list[str] | None = None, env: Any = None,
                  signum: int | None = None) -> int | None:
        # os._exit in the program, an os.exec* that replaces it, or a signal that kills it (SIGTERM): no thread
        # joined, no atexit handler (Python runs none), only the report.
        ending.append(True)
        close_watch(None)
        if on_exit is not None:
            ended = finish(os_status(status) if isinstance(status, int) else status, None, True)
            ended.replaced_by, ended.replaced_env, ended.signal = replaced_by, env, signum
            ended.in_atexit = exit_handlers.running
            return on_exit(ended)
        return None

    term_held: list[float] = []  # when a SIGTERM that landed in the engine was first held back
    ending: list[bool] = []  # the run is ending (hard_exit): a signal's watch on a stuck main thread stands down
    stuck: list[Any] = []  # the StuckMainWatch, while the program runs

    def held_term(signum: int, frame: Any) -> None:
        if os.getpid() != run_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def terminated(signum: int, frame: Any) -> None:
        # SIGTERM with Python's default action: the process dies at once, without finally blocks or atexit
        # handlers. Here the report is written first (as at os._exit), then the process dies of the signal.
        interrupts.handler_ran(signum)
        if children.in_child:  # a forked child inherited this handler: it reports as a child does
            children._terminated(signum, frame)
            return
        if os.getpid() != run_pid:
            # A child forked a moment ago, before its follower took it (a Pool's worker that Pool.terminate()
            # signals as its handler thread forks it): it has run nothing of the program's; it dies of the signal.
            # It wrote the run's report, a second one on the run's stdout.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        import time

        now = time.monotonic()
        if interrupts.in_engine(frame) and (not term_held or now - term_held[0] < interrupts.MAX_HOLD_S):
            # In the engine's own code (a recorder's lock may be held): raised again a moment later, where the
            # program is then (as interrupts.py does for Ctrl-C).
            term_held[:1] = term_held[:1] or [now]
            interrupts.rearm_later(signum)
            return
        # once: a second SIGTERM while the report is written waits for it. Not SIG_IGN, which a process started
        # meanwhile inherits (a spawn Pool worker the pool's thread starts then lived on, SIGTERM ignored, after the
        # run, holding its output pipe open); a handler is reset by exec, and a forked child dies of it
        signal.signal(signum, held_term)
        try:
            hard_exit(128 + signum, signum=signum)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a stream the program closed
                    pass
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    run_pid = os.getpid()

    def aborted() -> None:
        os.abort = _real_abort
        if children.in_child:  # a forked child: its report, ended by SIGABRT (it was named as killed)
            try:
                children.finish_child(None, signal.SIGABRT)
            except BaseException:  # noqa: BLE001 - nothing may keep the process from aborting as asked
                pass
        elif os.getpid() == run_pid and not ending:
            try:
                hard_exit(128 + signal.SIGABRT, signum=signal.SIGABRT)
            except BaseException:  # noqa: BLE001 - nothing may keep the process from aborting as asked
                pass
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a stream the program closed
                    pass
        _real_abort()

    # A child started as a new interpreter (spawn, forkserver) watches its target as this run does: with the mode
    # and engine asked for until torch is imported here (the child chooses as this process would), then as chosen.
    children = ForkedChildren(running_recorder, on_parent_exit=hard_exit, watch_settings=child_watch,
                              collector=runner)
    torch_import = TorchImport(start_at_torch_import) if later else None
    try:
        if runner is not None:
            runner.__enter__()
        try:
            if runner is not None:
                configure(runner)
            children.start()  # followed from the start: a child started before torch is imported is watched too
            unended.register()
            exit_handlers.install()
            if on_exit is not None and threading.current_thread() is threading.main_thread():
                handled = []
                for signum in interrupts.ending_signals():  # the program's own handler, if it sets one, replaces it
                    if signal.getsignal(signum) == signal.SIG_DFL:
                        signal.signal(signum, terminated)
                        signal_view.hide(signum, terminated, signal.SIG_DFL, keep_default=True)  # as SIG_DFL
                        handled.append(signum)
                # ...also where the main thread is blocked in C, which runs no Python handler (capture/stuck_main.py)
                if handled:
                    stuck.append(stuck_main.StuckMainWatch(
                        handled, lambda signum: hard_exit(128 + signum, signum=signum), lambda: bool(ending)))
                    stuck[0].start()
                # os.abort() dies of SIGABRT in C, where no Python handler runs: the report is written first.
                os.abort = aborted
            if torch_import is not None:
                torch_import.install()
            # The program's main module (its globals, from runpy), held here alone: torn down as at Python's exit
            # (_finalize_program).
            program: list = []
            try:
                if module:
                    sys.modules["__mp_main__"] = _MainAlias("__mp_main__")  # runpy makes the module: see _MainAlias
                    _run_module(path, program)
                else:
                    program.append(types.ModuleType("__main__"))
                    program[0].__dict__.update(__builtins__=builtins, __spec__=None, __package__=None,
                                               __loader__=_loader(filename))
                    if filename != COMMAND_FILENAME:  # python -c's __main__ has no __file__ (spawn then runs none)
                        program[0].__file__ = filename
                    if main_of_path:
                        # As python runs a folder's or a zipapp's __main__ (runpy, by name): a spawned child then
                        # does not run its top level again as __mp_main__
                        from importlib.machinery import ModuleSpec

                        program[0].__spec__ = ModuleSpec("__main__", program[0].__loader__, origin=filename)
                    # multiprocessing's alias of the main module (Lib/multiprocessing/__init__.py sets it when it is
                    # imported, here: syncfree's launcher): a spawned child runs the script as __mp_main__, and the
                    # objects of its classes come back pickled under that name.
                    sys.modules["__main__"] = sys.modules["__mp_main__"] = program[0]
                    exec(code, program[0].__dict__)
            except SystemExit as exc:
                exit_code = _exit_status(exc.code)
            except ModuleNotRunnable:
                raise
            except (Exception, KeyboardInterrupt) as exc:
                # Python's end for an uncaught exception: sys.excepthook (the traceback, or the program's own
                # hook), then the rest below; Ctrl-C's status is 130, and `syncfree run` then dies by SIGINT as
                # Python does (what ran so far is reported first).
                exit_code, failure = (130 if isinstance(exc, KeyboardInterrupt) else 1), exc
                if isinstance(exc, KeyboardInterrupt):
                    interrupts.cut_handler_frames(exc)  # raised by the engine's SIGINT handler: not the program's
                (on_error or _uncaught)(exc)
            # What Python does after the main module: join the non-daemon threads, run the atexit
            # handlers (Lib/threading.py _shutdown, Modules/atexitmodule.c), end multiprocessing's children.
            _join_threads(threads_before)
            exit_handlers.run()
            if children.in_child:
                # A forked child that ran to the program's end (a plain os.fork()): its report, then its exit
                # as Python's, with the status the program gave it.
                children.finish_child(exit_code)
                # Its copy of the engine ends with it, undone by nothing: restoring torch's state here would
                # touch CUDA, which cannot follow a fork.
                closed.append(True)
                if runner is not None:
                    unended.watch_ended(runner)  # reported with the child's report: not a watch left unended
                raise SystemExit(exit_code)
            children.end_children()
            _finalize_program(program, threads_before, saved)
        except BaseException as exc:
            close_watch(exc)
            raise
        close_watch(failure)
        run = finish(exit_code, failure, False)
    finally:
        if torch_import is not None:
            torch_import.remove()
        if os.abort is aborted:
            os.abort = _real_abort
        if threading.current_thread() is threading.main_thread():
            for watch_ in stuck:
                watch_.stop()
            for signum in interrupts.ending_signals():
                signal_view.unhide(signum, terminated)
                if signal.getsignal(signum) is terminated:
                    signal.signal(signum, signal.SIG_DFL)
        exit_handlers.remove()
        children.stop()
        children.remove_folder()
        _restore(saved, saved_cwd)
    return run


def _names_of(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"thread{'s' if len(names) != 1 else ''} {shown}"


#: The note of a run whose program never imported torch.
NO_TORCH = "no torch code ran: the program never imported torch, so its process made no sync"


def _cupti_wanted(engine: str | None, program_text: str) -> bool:
    """Whether a run may use the CUPTI engine, which sees syncs without torch: asked for, or chosen by "auto" for a
    program that imports a library calling CUDA without torch (capture/engines.py)."""
    from .capture import engines

    requested = engines.check_engine(engine)
    return requested == "cupti" or (requested == "auto" and bool(engines.bypassing_libraries([program_text])))


def _report_without_torch(wall_ms: float, libraries_before: Sequence[str]) -> WatchReport:
    """The report of a program that never imported torch (run_script started no engine for it); a library that
    calls CUDA without torch imported meanwhile (``import_module``, unseen in the program's text) is named: its
    syncs were not watched."""
    from .capture.engines import bypassing_libraries
    from .report import device_info

    notes = [NO_TORCH]
    new = [name for name in bypassing_libraries() if name not in set(libraries_before)]
    if new:
        notes = [f"no torch code ran: the program never imported torch; {', '.join(new)}, imported during the run, "
                 f"call{'s' if len(new) == 1 else ''} CUDA without torch, and no engine watched "
                 f"{'its' if len(new) == 1 else 'their'} syncs "
                 "(--engine cupti does)"]
    return WatchReport("static", device_info("none", "torch not imported"), [], [], 0, wall_ms, notes)


class _ExitHandlers:
    """The program's ``atexit`` registrations, kept to run when the program ends (last registered first, as
    Python does) rather than at this process's exit, after the watch."""

    def __init__(self) -> None:
        import atexit

        self._atexit = atexit
        self._real = (atexit.register, atexit.unregister)
        self.handlers: list[tuple[Callable, tuple, dict]] = []
        self.running = False  # the handlers are being run

    def install(self) -> None:
        self._atexit.register, self._atexit.unregister = self.register, self.unregister

    def remove(self) -> None:
        if self._atexit.register == self.register:
            self._atexit.register, self._atexit.unregister = self._real

    def register(self, func: Callable, *args: Any, **kwargs: Any) -> Callable:
        self.handlers.append((func, args, kwargs))
        return func

    def unregister(self, func: Callable) -> None:
        self.handlers = [h for h in self.handlers if h[0] != func]
        self._real[1](func)

    def run(self) -> None:
        import traceback

        self.running = True
        while self.handlers:
            func, args, kwargs = self.handlers.pop()
            try:
                func(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - as Python: printed, the exit status unchanged
                print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
                # from the handler on, as Python prints it: not this frame
                trace = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
                traceback.print_exception(type(exc), exc, trace, file=sys.stderr)


def _finalize_program(program: list, threads_before: set, saved: tuple) -> None:
    """What Python does with the main module at its exit, after the atexit handlers (Python/pylifecycle.c,
    finalize_modules): it takes the module out of ``sys.modules`` and collects, so that what only the program held is
    finalized with its names still there (a ``__del__``, a suspended generator's ``finally``), then clears the dict
    of a module still alive, last names first. Done here, inside the watch: such code that synced ran after the
    report had been written (its syncs lost without a word), and in predict mode raised "Torch not compiled with CUDA
    enabled" once the stand-ins were gone. A dict still alive is not cleared while a daemon thread the program started
    runs: it would see the names go, where Python stops such threads first (what the collection finalizes, nothing
    else holds). ``program``: the main module (``python -m``: its globals), the only reference kept; ``saved``: what
    `_restore` puts back, the ``sys.modules`` entries here."""
    import gc
    import threading
    import weakref

    if not program:
        return
    daemons = any(t.daemon and t.is_alive() for t in threading.enumerate() if t not in threads_before)
    _main_modules_back(saved[2], saved[6])
    held = program.pop()
    if isinstance(held, types.ModuleType):
        # A sentinel in the dict tells whether the collection took the dict too (nothing else held it) or it lives on
        # (the frames of an uncaught exception's traceback, a library's registry): then its names are cleared.
        sentinel = _Finalizing(held.__dict__)
        held.__dict__[_Finalizing.NAME] = sentinel
        survived = weakref.ref(sentinel)
        del sentinel
    else:  # runpy's copy of the globals (its module is gone, their dict held by its functions): dropped
        survived = None
        held.clear()
    del held
    gc.collect()
    sentinel = survived() if survived is not None else None
    if sentinel is not None and not daemons:
        namespace, sentinel.namespace = sentinel.namespace, None
        del sentinel
        for name in reversed(list(namespace)):
            if name != "__builtins__":
                namespace[name] = None
        del namespace
        gc.collect()


class _Finalizing:
    """`_finalize_program`'s sentinel in the main module's dict, holding the dict."""

    NAME = "__syncfree_finalizing__"

    def __init__(self, namespace: dict) -> None:
        self.namespace: dict | None = namespace


def _runs_its_main(path: str) -> bool:
    """Whether ``python path`` runs the ``__main__`` module inside ``path``: a folder, or a zip file (a zipapp)."""
    import zipfile

    return os.path.isdir(path) or (os.path.isfile(path) and zipfile.is_zipfile(path))


def _main_of(path: str) -> bytes:
    """The source of the ``__main__.py`` that ``python path`` runs in a folder or a zip file."""
    if os.path.isdir(path):
        with open(os.path.join(path, "__main__.py"), "rb") as handle:
            return handle.read()
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return archive.read("__main__.py")
    except KeyError:
        raise FileNotFoundError(f"can't find '__main__' module in {path!r}") from None


def _run_module(name: str, program: list) -> None:
    """``python -m name``, inside the watch (a package's ``__init__`` runs under it too); its globals (runpy's copy)
    into ``program``."""
    import importlib.util
    import runpy

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as error:
        raise ModuleNotRunnable(f"no module named {name!r} ({error})") from None
    if spec is None:
        raise ModuleNotRunnable(f"no module named {name!r}")
    if spec.submodule_search_locations is not None and importlib.util.find_spec(f"{name}.__main__") is None:
        raise ModuleNotRunnable(f"{name!r} is a package without a __main__ module: it cannot be run")
    program.append(runpy.run_module(name, run_name="__main__", alter_sys=True))  # sys.argv[0]: the module's file


def _loader(filename: str) -> Any:
    if filename.startswith("<"):  # -c's code and stdin's, as python gives them
        from importlib.machinery import BuiltinImporter

        return BuiltinImporter
    from importlib.machinery import SourceFileLoader

    return SourceFileLoader("__main__", filename)


def _decoded(data: bytes) -> str:
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", "replace")


def _attribute_to(filename: str, recorder: Any) -> None:
    """Count the syncs of code compiled under ``filename`` ("<stdin>", `COMMAND_FILENAME`) as the user's: file attribution leaves out
    code without a file."""
    files = getattr(recorder, "_cell_files", None)
    if isinstance(files, dict):
        files[filename] = 0


def _join_threads(before: set) -> None:
    """What Python's ``threading._shutdown`` does as the program ends: its exit calls first (concurrent.futures'
    ``_python_exit``: the executors' threads are told the interpreter is going down, and end once their queued work
    is done), then every non-daemon thread is joined. For the program's threads only: an executor it never shut down
    (``ex = ThreadPoolExecutor(2)`` at module level) kept its workers waiting, and the run waited for them forever."""
    import threading

    _end_executors(before)
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread not in before and thread is not current and not thread.daemon:
            thread.join()


def _end_executors(before: set) -> None:
    """concurrent.futures' ``_python_exit`` (thread.py, process.py) for the executors whose threads the program
    started: the module's shutdown flag is set while their threads are woken and joined, and put back after (this
    process goes on, and may use executors of its own)."""
    process = sys.modules.get("concurrent.futures.process")
    wakeups = getattr(process, "_threads_wakeups", None)
    mine = [(t, w) for t, w in list(wakeups.items()) if t not in before and t.is_alive()] if wakeups else []
    if mine:
        saved = process._global_shutdown  # type: ignore[union-attr]
        process._global_shutdown = True  # type: ignore[union-attr]
        try:
            for _, wakeup in mine:
                wakeup.wakeup()
            for thread, _ in mine:
                thread.join()
        finally:
            process._global_shutdown = saved  # type: ignore[union-attr]
    thread_module = sys.modules.get("concurrent.futures.thread")
    queues = getattr(thread_module, "_threads_queues", None)
    mine = [(t, q) for t, q in list(queues.items()) if t not in before and t.is_alive()] if queues else []
    if mine:
        lock = thread_module._global_shutdown_lock  # type: ignore[union-attr]
        with lock:
            saved = thread_module._shutdown  # type: ignore[union-attr]
            thread_module._shutdown = True  # type: ignore[union-attr]
        try:
            for _, queue in mine:
                queue.put(None)
            for thread, _ in mine:
                thread.join()
        finally:
            with lock:
                thread_module._shutdown = saved  # type: ignore[union-attr]


def _restore(saved: tuple, cwd: str) -> None:
    argv, path, main, stdin, stdout, stderr, mp_main = saved
    for name, stream in (("stdout", stdout), ("stderr", stderr)):
        current = getattr(sys, name)
        if current is not stream:  # the program's own stream (a tee to a log file): flushed as at exit
            try:
                current.flush()
            except Exception:  # noqa: BLE001 - a closed or broken replacement
                pass
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    sys.argv = argv
    sys.path[:] = path
    _main_modules_back(main, mp_main)
    try:
        os.chdir(cwd)
    except OSError:  # the folder is gone
        pass


def _main_modules_back(main: Any, mp_main: Any) -> None:
    """``sys.modules``' ``__main__`` and ``__mp_main__`` as they were before the program (syncfree's own)."""
    if main is not None:
        sys.modules["__main__"] = main
    if mp_main is not None:
        sys.modules["__mp_main__"] = mp_main
    else:
        sys.modules.pop("__mp_main__", None)


def _exit_status(code: Any) -> int:
    """The status a process ends with for ``sys.exit(code)``, as Python gives it: None 0, an int as the OS sees it
    (`os_status`; a bool is one), anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return os_status(code if -2**63 <= code < 2**63 else -1)  # Python reads a C long: -1 where it overflows
    print(code, file=sys.stderr)  # as Python does for sys.exit("message")
    return 1


def os_status(code: int) -> int:
    """The exit status the OS gives the parent for a process that exits with ``code`` (POSIX: its low 8 bits):
    ``sys.exit(256)`` and ``os._exit(256)`` end with 0, ``sys.exit(-1)`` with 255."""
    return int(code) & 0xFF if os.name == "posix" else int(code)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class _MainAlias(types.ModuleType):
    """``sys.modules["__mp_main__"]`` while ``python -m``'s program runs: runpy makes its ``__main__`` module, so the
    alias reads whatever ``__main__`` is (pickle looks a class up with getattr)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.modules["__main__"], name)


def _uncaught(exc: BaseException) -> None:
    """An exception that ended the program, shown as Python shows it: through ``sys.excepthook`` when the program
    set its own (with the traceback from the program's first frame on), else its traceback without syncfree's
    frames."""
    hook = sys.excepthook
    if hook is sys.__excepthook__ or hook is None:
        _print_traceback(exc)
        return
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)
                              or "runpy" in os.path.basename(tb.tb_frame.f_code.co_filename)):
        tb = tb.tb_next
    try:
        hook(type(exc), exc, tb)
    except BaseException as error:  # noqa: BLE001 - as Python: the hook's failure, then the original traceback
        print("Error in sys.excepthook:", file=sys.stderr)
        _print_traceback(error)
        print("\nOriginal exception was:", file=sys.stderr)
        _print_traceback(exc)


def _print_traceback(exc: BaseException) -> None:
    import traceback

    from .output import STDOUT_FOLLOWER

    # Without the frames of runpy and syncfree: the traceback starts at the program and ends
    # at the user's (or the library's) line that synced. The exception's own traceback is
    # left whole (the recorder describes it after the atexit handlers have run).
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    frames = list(shown.stack)
    while frames and (frames[0].filename.startswith(_PACKAGE_DIR)
                      or "runpy" in os.path.basename(frames[0].filename)):
        frames.pop(0)
    if is_sync_stop(exc):
        while frames and frames[-1].filename.startswith(_PACKAGE_DIR):
            frames.pop()
    elif frames and (frames[-1].filename, frames[-1].name) == STDOUT_FOLLOWER:
        frames.pop()  # the program's print() failed in the stream's own write, under `run`'s line-end follower
    shown.stack = traceback.StackSummary.from_list(frames)
    # Predict mode's own frames between a torch call and torch's error (its mode, the call it hands on): not the
    # program's, nor there under python; in the exceptions it chains too ("During handling of the above...")
    predict = os.path.join(_PACKAGE_DIR, "capture", "predict") + os.sep
    seen: set[int] = set()
    pending = [shown]
    while pending:
        one = pending.pop()
        if one is None or id(one) in seen:
            continue
        seen.add(id(one))
        one.stack = traceback.StackSummary.from_list([frame for frame in one.stack
                                                      if not frame.filename.startswith(predict)])
        pending += [one.__cause__, one.__context__]
    print("".join(shown.format()), end="", file=sys.stderr)


# A program's atexit handler that is subprocess.run or os.system itself runs its command from here: the program's own
threads.DISPATCHERS.add(_ExitHandlers.run.__code__)
