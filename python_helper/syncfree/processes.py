"""The processes a watched program forks: each writes its own report into a folder that the parent merges.

A program run by ``syncfree run`` (`syncfree.script_run.run_script`) may fork: ``os.fork()``, a DataLoader's workers, a
``multiprocessing.Pool`` (the fork start method, Linux's default before Python 3.14). A forked child inherits the
parent's memory, so it runs under the same engine (the recorder, predict mode's stand-ins): it is watched, not left
with a half-installed copy. Each child counts its own syncs from the fork on and, when it ends, writes them to
``<folder>/<pid>.json``; the parent reads the folder once the program is done and reports each process apart. A
child prints nothing and keeps its exit status: the parent's report is the only one.

How a child ends decides where its report is written:

- ``os._exit(n)`` (how multiprocessing's and DataLoader's workers end: Lib/multiprocessing/popen_fork.py): the
  replacement installed here writes the report, then calls the real ``os._exit(n)``;
- ``SIGTERM`` (``Pool.terminate()``, a ``with Pool()`` block's end, a daemonic worker at the parent's exit): a
  handler writes the report, then the signal is raised again with its default action, so the status stays "killed
  by SIGTERM";
- returning from the program or ``sys.exit`` (a plain ``os.fork()`` child): ``run_script`` calls `finish_child`.

A Python-level SIGTERM handler runs only when the child's main thread is back in the interpreter: a child blocked
in C (a deadlocked mutex, a hung driver call) would take the signal and live on, and ``Pool.terminate()`` or
``Process.join()`` after ``terminate()`` would wait for it forever, where Python alone kills it. So a child this
process terminates through multiprocessing that is still alive ``TERM_GRACE_S`` seconds later is killed with
SIGKILL, and a note names it (its syncs are lost, the program goes on).

A child killed another way (SIGKILL, a crash) leaves no report; the parent knows every pid it forked and names the
ones it has no report for. ``os._exit`` in the parent itself goes to ``on_parent_exit`` first, so that even a
program that ends that way leaves its report.

A multiprocessing child started as a new interpreter (the spawn and forkserver start methods: ``torch.multiprocessing
.spawn``, a ``get_context("spawn")`` Pool, Python 3.14's default) inherits nothing: its target is wrapped before it
starts (`SpawnedTarget`, pickled with it), so that in the child the target runs under a watch of its own, with the
parent's mode and engine, and the child writes its report into the same folder when the target ends (or at SIGTERM).
A process whose class overrides ``run()`` instead of taking a target is named in a note, unwatched. A Python program
started with ``subprocess`` on this interpreter watches itself through its environment (syncfree/programs.py) and
reports into the folder as a spawned child does (`program_env`, `program_started`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from .capture.notes import Uncounted
from .torch_import import TorchImport, torch_installed

__all__ = ["ChildNote", "ForkedChildren", "LostChild", "lost_children", "ProcessReport", "SpawnedTarget", "WatchSettings", "running_recorder",
           "site_fields"]

_real_fork = os.fork
_real_forkpty = getattr(os, "forkpty", None)
_real_exit = os._exit
_folder_lock = threading.Lock()  # ForkedChildren._folder: one folder per follower
# os.execv and os.execve: every os.exec* function of os.py ends in one of them (execl, execvp, ... through
# os._execvpe, which tries each folder of PATH in turn).
_real_execv = os.execv
_real_execve = getattr(os, "execve", None)

class WatchSettings(Protocol):
    """How a child process watches its target (`syncfree.watches.ChildWatch`, made by the watch, cell or run that
    starts it): pickled with the target, it starts the child's watch (`watch`), so that this module never imports
    the watch API (which imports this one)."""

    engine: str | None  # "cupti": the watch starts with the child, not at its import of torch

    def watch(self) -> Any:
        """A new watch of every thread of the child, not yet entered (``__enter__``/``__exit__``)."""
        ...

    def follow_children(self) -> ForkedChildren:
        """The follower of the children that a watch's (or a cell's) code starts (`ForkedChildren.for_watch`):
        capture/threads.py asks the recorder's settings for one, and so imports nothing of this module."""
        ...


def running_recorder() -> Any:
    """The recorder already recording this thread or task, if any."""
    dispatch = sys.modules.get("syncfree.capture.dispatch")
    return None if dispatch is None else dispatch.owner_here()



# How long a child terminated through multiprocessing has to write its report and die before it is killed (a report
# takes milliseconds; a child whose main thread is stuck in C never runs the handler). Counted from terminate(), and
# at least TERM_JOIN_S from the join that waits for it: a pool terminates its workers and joins them after its
# handler threads, and on a loaded machine that can take longer than the grace itself.
TERM_GRACE_S = 10.0
TERM_JOIN_S = 5.0


class ChildNote(str):
    """A note on the child processes of a run, a block or a test (one still running at its end, a Python program run
    unwatched, a Pool made before it): the pytest summary shows these. A str, so that it is a note like the others
    everywhere it goes."""

    __slots__ = ()


class LostChild(ChildNote, Uncounted):
    """A note on a child process that ended and left no report of its syncs (killed, its report unreadable, or run
    unwatched: a `Process` subclass's own ``run()``): a verdict on the block cannot be given without them
    (`syncfree.watches.check_verdict`). A child still running at the block's end is a `ChildNote` only: it works on
    for the program (persistent DataLoader workers, a server), and what it synced during the block is not known."""

    __slots__ = ()


@dataclass
class ProcessReport:
    """What one forked child synchronized, from its fork to its end."""

    pid: int
    name: str  # multiprocessing's name for it ("ForkPoolWorker-2", "Process-1"), else "pid N"
    exit_code: int | None  # None: ended by a signal (`signal` names it)
    syncs: int
    sites: list[dict[str, Any]]  # `site_fields` of each site
    signal: int | None = None
    forked: list[int] = field(default_factory=list)  # the pids it forked in turn
    # The Python program it replaced itself with (os.exec*: `python worker.py`), which ran unwatched; None: none
    replaced_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "exit_code": self.exit_code, "signal": self.signal,
                "syncs": self.syncs, "sites": self.sites, "forked": self.forked, "replaced_by": self.replaced_by}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessReport:
        replaced = data.get("replaced_by")
        return cls(int(data["pid"]), str(data["name"]), data.get("exit_code"), int(data["syncs"]),
                   list(data["sites"]), data.get("signal"), [int(p) for p in data.get("forked", [])],
                   str(replaced) if replaced is not None else None)

    def replaced_note(self) -> LostChild | None:
        """The note on the Python program this child became with os.exec*: its syncs are not counted."""
        if self.replaced_by is None:
            return None
        return LostChild(f"child process {self.name} replaced itself with os.exec* ({self.replaced_by}): the program "
                         "it became ran unwatched, its syncs are not counted")


def site_fields(site: Any) -> dict[str, Any]:
    """A `SyncSite` as plain JSON-ready fields (a child's report crosses a process boundary as JSON)."""
    return {"files": list(site.files) if site.files else None, "chain": list(site.chain), "kind": site.kind,
            "rule": site.rule, "count": site.count, "blocked_ms": site.blocked_ms, "predicted": site.predicted,
            "detail": site.detail, "label": site.label, "thread": site.thread,
            "library": site.library.to_report() if getattr(site, "library", None) is not None else None,
            "phase": getattr(site, "phase", "recurring"), "first_ms": getattr(site, "first_ms", None),
            "cost_ms": getattr(site, "cost_ms", None), "span": list(site.span) if getattr(site, "span", None) else None}


_tokens = itertools.count(1)  # program_env's tokens, unique in this process


def lost_children(notes: list[str]) -> list[str]:
    """The notes on work whose syncs are not counted (`Uncounted`: a child process that left no report, `LostChild`;
    a thread of the user's that ran without predict mode's stand-ins): a verdict cannot be given without them."""
    return [note for note in notes if isinstance(note, Uncounted)]


class ForkedChildren:
    """Follows the forks of one program run: install with `start`, read with `collect`, remove with `stop`.

    ``recorder``: returns the recorder running in this process (None: nothing is recorded, children report no
    syncs). ``on_parent_exit``: called with the status when the parent itself calls ``os._exit``; an int it
    returns is the status the process ends with. When the parent replaces itself with ``os.exec*``, it is called
    with 0 and the new command, and a status other than 0 that it returns ends the process instead of the exec.
    """

    def __init__(self, recorder: Callable[[], Any], on_parent_exit: Callable[[int], None] | None = None,
                 watch_settings: WatchSettings | None = None, collector: Any = None) -> None:
        self._recorder = recorder
        # The watch whose report collects these children (syncfree run's, a watched test's): its recorder does not
        # read them again, and a watch inside it passes its own children's reports up to it, not into it.
        self.collector = collector
        # How a spawned child watches its target (`SpawnedTarget`): Watch's mode, engine, measure_blocked and
        # max_frames as the run chose them (`WatchSettings`); None: spawned children are not watched (a note names
        # them).
        self.watch_settings = watch_settings
        self.on_parent_exit = on_parent_exit
        self.parent = os.getpid()
        self.folder: str | None = None
        self.forked: list[int] = []  # pids this process forked while followed
        self._child_start: tuple[Any, int] | None = None  # in a child: (recorder checkpoint, syncs) at the fork
        self._child_recorder: Any = None  # in a child: the recorder its syncs go to
        self._finished = False
        self._writing = False  # finish_child is writing the report (a SIGTERM then waits for it: _terminated)
        self._deferred: int | None = None
        self._installed = False
        # What `stop` puts back: what `start` replaced (an outer follower's, a watched test under syncfree run).
        self._previous: tuple = (_real_fork, _real_exit, _real_execv, _real_execve)
        self.unwatched: list[str] = []  # multiprocessing children started a way that is not a fork
        self.spawned: set[int] = set()  # the pids among `forked` started as new interpreters
        self.programs: list[str] = []  # Python programs started with subprocess (unwatched)
        self.test_workers = 0  # pytest-xdist's worker processes (execnet's): they ran the program's tests unwatched
        self.followed_programs: dict[int, str] = {}  # pid -> Python program started with subprocess, watching itself
        # The commands the followed code ran with the start-up hook in their environment (`program_env`): token ->
        # (pid subprocess started, None where os.system ran it; whether that pid is the Python program's own,
        # expected to report until its programs tell their pids).
        self._commands: dict[str, tuple[int | None, bool]] = {}
        # pid of a program that told it -> (its command's token, the pid subprocess started where that was another:
        # a shell's; else None)
        self._told_pids: dict[int, tuple[str, int | None]] = {}
        self._told: set[str] = set()  # the files of `_commands`' programs read (`_resolve_programs`)
        self._command_names: dict[int, str] = {}  # pid -> a command other than a Python program (`program_started`)
        self.killed: list[int] = []  # children still alive TERM_GRACE_S after SIGTERM, killed
        self.stuck_in: dict[int, str] = {}  # where each killed child's main thread waited (`_kernel_wait`)
        self.raw_forks = 0  # children the followed code forked with os.fork() itself (`fork_done`)
        self._term_held: float | None = None  # in a child: when a SIGTERM that landed in the engine was held back
        self._raw_told = 0  # of those, the ones that told their pids (`_forks_told`)
        self.wrap_forks = False  # a watch's follower: forked children's targets are wrapped too (start_process)
        self.ended = "the program ended"  # what a child still running outlived (collect's note)
        self._names: dict[int, str] = {}  # pid -> name of the multiprocessing children started while followed
        # The children that are a Pool's ("pool") or a ProcessPoolExecutor's ("executor") workers: they run the tasks
        # the code hands the pool, and one still running at the end has written no report of them (`_unreported`).
        self.pool_workers: dict[int, str] = {}
        # The reports (and notes) of children that an inner follower took while it stood in front of this one (a
        # watched test under syncfree run): this one's too (`adopt`, `collect`).
        self._adopted: tuple[list[ProcessReport], list[str]] = ([], [])

    # ------------------------------------------------------------------ parent side
    def start(self, folder: str | None = None) -> None:
        """Follow the forks (and spawned children) from now on; ``folder``: where the reports go (a spawned
        child's own children report into its parent's folder), else a new one."""
        self.folder = folder  # None: made when the first child starts (most watched tests start none)
        self._finalizers_from = _finalizer_mark()  # multiprocessing's finalizers made from here on are the program's
        self._previous = (os.fork, os._exit, os.execv, os.execve if _real_execve is not None else None)
        os.fork = self._fork
        if _real_forkpty is not None:  # pty.fork, pty.spawn, pexpect: a fork of the program's too
            self._previous_forkpty = os.forkpty
            os.forkpty = self._forkpty
        os._exit = self._exit
        os.execv = self._execv
        if _real_execve is not None:
            os.execve = self._execve
        # A process started with spawn or forkserver (Python 3.14's default on Linux, macOS's) is a new interpreter:
        # its target runs under a watch of its own (SpawnedTarget); one without a target is named in a note.
        from .capture import threads

        threads.hook_process_start()  # BaseProcess.start: start_process, while this follows
        threads.followers.append(self)
        # A Python program the run starts with subprocess is a program of its own, unwatched: named in a note
        # (subprocess.Popen.__init__, threads.hook_popen: `programs`).
        threads.hook_popen()
        _hook_terminate()
        self._installed = True

    def start_process(self, real_start: Callable[[Any], None], process_self: Any) -> bool:
        """Start a multiprocessing child of the followed program (``real_start``: ``BaseProcess.start``). A fork
        is followed through ``os.fork`` (`start`); with ``wrap_forks`` (a watch, which patches no ``os.fork``) its
        target is wrapped as a new interpreter's is. True: the child is watched (it has a target)."""
        method = _start_method(process_self)
        watched = False
        pool_worker = _pool_kind(getattr(process_self, "_target", None))
        if (method != "fork" or self.wrap_forks) and self.watch_settings is not None \
                and getattr(process_self, "_target", None) is not None:
            process_self._target = SpawnedTarget(process_self._target, self._folder(), self.watch_settings)
            watched = True
        if watched and method != "fork":
            # A new interpreter imports the program's main module before it unpickles its target: its watch starts
            # before that import (`_WatchBeforeMain`), so that top-level code (dev = "cuda" if
            # torch.cuda.is_available() else "cpu") runs as it does on a GPU.
            _hook_preparation_data()
            _preparing.watch = _WatchBeforeMain(self._folder(), self.watch_settings)
        try:
            real_start(process_self)
        finally:
            _preparing.watch = None
        self._names[process_self.pid] = process_self.name
        if pool_worker is not None:
            self.pool_workers[process_self.pid] = pool_worker
            from .capture import threads

            threads.hook_pools_now()  # its pool's module is imported now: the tasks handed to it are told (`handed`)
        if watched:
            self.forked.append(process_self.pid)  # its report is expected, as a fork's
            self.spawned.add(process_self.pid)
            _terminable[process_self.pid] = self
        elif method != "fork" and not self.wrap_forks:
            self.unwatched.append(f"{process_self.name} ({method})")
        return watched

    def program_env(self, env: Any) -> tuple[dict[str, str], str] | None:
        """The environment for a Python program of this interpreter that the followed code starts with subprocess,
        so that it watches itself and reports here (syncfree/programs.py), and the token it tells its pid under;
        None: it is not followed (no watch settings, an environment that is not text)."""
        if self.watch_settings is None:
            return None
        from .programs import program_env

        token = f"program-{os.getpid()}-{next(_tokens)}"
        env = program_env(env, self._folder(), self.watch_settings, token)
        return None if env is None else (env, token)

    def program_started(self, pid: int | None, program: str | None, token: str, command: str | None = None) -> None:
        """A command started with the environment of `program_env`: ``pid`` (None: os.system's, unknown) is the
        process subprocess started, ``program`` the Python program it is (None: another command, a shell, a script
        whose Python programs, if any, tell their pids under ``token``). A Python program's report is expected as a
        spawned child's is, once it has started its watch; one that never started it (``python -I``, ``-S``) is
        named as unwatched; a command whose programs told nothing left no report to expect. ``command``: how the
        notes name a command that is not a Python program (``bash serve.sh``), should it outlive the block."""
        self._commands[token] = (pid, program is not None and pid is not None)
        if command is not None and program is None and pid is not None:
            self._command_names[pid] = command
        if pid is not None and program is not None:
            self.followed_programs[pid] = program
            self._names[pid] = program
            self.forked.append(pid)
            self.spawned.add(pid)

    def programs_of(self, token: str) -> list[int]:
        """The pids the Python programs of a command started with `program_env`'s ``token`` told so far, once each
        started its watch (a shell runs several: ``python prepare.py && python train.py``)."""
        self._resolve_programs()
        return [pid for pid, (told, _) in self._told_pids.items() if told == token]

    def _resolve_programs(self) -> None:
        """The programs of `_commands` that told their pids (``TOKEN.PID.program``: the program's own label; or
        ``.unwatched``: it could not watch itself, another interpreter, a launcher): each is a child of its own,
        in the place of the process subprocess started where that was the program (no shell between)."""
        if self.folder is None or not self._commands:
            return
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return
        for name in names:
            token, _, rest = name.partition(".")
            pid_text, _, kind = rest.partition(".")
            if token not in self._commands or kind not in ("program", "unwatched") or name in self._told \
                    or not pid_text.isdigit():
                continue
            try:
                with open(os.path.join(self.folder, name), encoding="utf-8") as handle:
                    label = handle.read().strip()
            except OSError:
                continue
            self._told.add(name)
            started, own = self._commands[token]
            pid = int(pid_text)
            if own and started is not None and started in self.followed_programs:
                # the program subprocess started: it runs in that process (exec'd) or in one its shell forked
                label = label or self.followed_programs[started]
                self.followed_programs.pop(started)
                self._names.pop(started, None)
                if started != pid and started in self.forked:
                    self.forked.remove(started)
                    self.spawned.discard(started)
            if kind == "unwatched":
                from .programs import Launch

                self.programs.append(Launch(label[7:]) if label.startswith("launch:") else label)
                continue
            self._told_pids[pid] = (token, started if started != pid else None)
            self.followed_programs[pid] = label or "python"
            self._names[pid] = label or "python"
            if pid not in self.forked:
                self.forked.append(pid)
            self.spawned.add(pid)

    def _run_by(self, pid: int) -> list[int]:
        """The children a pid given to `reports_of` stands for: the programs a command told (a shell's), else
        itself."""
        self._resolve_programs()
        told = [actual for actual, (_, started) in self._told_pids.items() if started == pid]
        if told:
            return told
        if any(started == pid and not own for started, own in self._commands.values()):
            return []  # a command none of whose programs told: no report to expect from it
        return [pid]

    def started_as(self, pid: int) -> int:
        """The pid subprocess started for the Python program that runs as ``pid``: a shell's, where a shell ran the
        program (dash forks every command; bash a compound line's), else ``pid``."""
        self._resolve_programs()
        return self._told_pids.get(pid, ("", None))[1] or pid

    def fork_starting(self) -> None:
        """In the parent, before a fork of the followed code's own (``os.fork()``: capture/threads.py's at-fork
        hooks, where nothing patches os.fork): the folder its child reports into."""
        self._folder()

    def fork_done(self) -> None:
        """In the parent, after such a fork: one more child expected (`forked_here` tells its pid)."""
        self.raw_forks += 1

    def forked_here(self) -> None:
        """In the child of such a fork: it follows its own children and reports its syncs from the fork on, when it
        ends (``os._exit``, an exec, SIGTERM) or its block does (`end_watch`), as a child of syncfree run's forks
        does; it tells its pid at once (``PID.forked``, holding its parent's)."""
        self._enter_child()
        self.start(self.folder)
        try:
            with open(os.path.join(self._folder(), f"{os.getpid()}.forked"), "w", encoding="utf-8") as handle:
                handle.write(str(self.parent))
        except OSError:
            pass

    def _forks_told(self) -> None:
        """The pids the children of `forked_here` told, among the children expected."""
        if not self.raw_forks or self.folder is None:
            return
        for name in os.listdir(self.folder):
            stem, _, kind = name.partition(".")
            if kind == "forked" and stem.isdigit() and int(stem) not in self.forked:
                try:
                    with open(os.path.join(self.folder, name), encoding="utf-8") as handle:
                        parent = int(handle.read() or 0)
                except (OSError, ValueError):
                    continue
                if parent == self.parent:
                    self.forked.append(int(stem))
                    self._raw_told += 1

    def collects_for(self, recorder: Any) -> bool:
        """Whether ``recorder`` is the one whose report collects these children (`collector`'s)."""
        return recorder is not None and getattr(self.collector, "_recorder", None) is recorder

    @classmethod
    def for_watch(cls, settings: WatchSettings) -> ForkedChildren:
        """The follower of the children that a ``syncfree.watch()``/``sync_free()`` block starts while nothing else
        follows the process's: multiprocessing children only (any start method: their targets run under a watch
        of their own), no ``os.fork`` patch; `end_watch` when the block ends."""
        children = cls(lambda: None, watch_settings=settings)
        children.wrap_forks = True
        children.ended = "the block ended"
        _hook_terminate()
        return children

    def end_watch(self, handed: Collection[int] = ()) -> tuple[list[ProcessReport], list[str]]:
        """The block has ended: its children's reports, and notes on those without one (still running, killed);
        what `for_watch` put in is taken out. In a child the block's code forked (`forked_here`) that runs on to the
        block's end: its report, and nothing to collect. ``handed``: the pool workers the block handed tasks."""
        if self.in_child:
            self.finish_child(0)
            return [], []
        try:
            return self.collect(handed)
        finally:
            self.remove_folder()
            _unhook_terminate()

    def reports_of(self, pids: list[int], ended: str) -> tuple[list[ProcessReport], list[str]]:
        """The reports of the children ``pids`` written so far (the folder stays: the follower collects them again
        at its own end), and a note for each one still running (``ended``: what it outlived)."""
        reports, notes = [], []
        self._resolve_programs()
        pending, seen = [child for pid in pids for child in self._run_by(pid)], set()
        while pending:
            pid = pending.pop(0)
            if pid in seen:
                continue
            seen.add(pid)
            path = os.path.join(self.folder, f"{pid}.json") if self.folder is not None else None
            try:
                with open(path, encoding="utf-8") as handle:  # type: ignore[arg-type]
                    report = ProcessReport.from_dict(json.load(handle))
            except (OSError, TypeError, ValueError, KeyError):
                report = None
            if report is not None:
                reports.append(self._named(report))
                if report.replaced_note() is not None:
                    notes.append(report.replaced_note())
                pending += report.forked  # its own children (a rank's DataLoader workers) are the block's too
                continue
            notes.append(self._unreported(pid, ended, " here"))
        return reports, notes

    def stop(self) -> None:
        """Put ``os.fork`` and ``os._exit`` back (in the process that installed them; a child keeps them until it
        ends)."""
        if self._installed and os.getpid() == self.parent:
            fork, exit_, execv, execve = self._previous
            owner = getattr(fork, "__self__", None)
            if isinstance(owner, ForkedChildren) and not owner._installed:  # it stopped first: nothing to put back
                fork, exit_, execv, execve = _real_fork, _real_exit, _real_execv, _real_execve
            # An outer follower's patches go back (they were the real ones: its later children went unfollowed).
            if os.fork == self._fork:
                os.fork = fork
            if _real_forkpty is not None and os.forkpty == self._forkpty:
                previous = getattr(self, "_previous_forkpty", _real_forkpty)
                owner = getattr(previous, "__self__", None)
                os.forkpty = _real_forkpty if isinstance(owner, ForkedChildren) and not owner._installed else previous
            if os._exit == self._exit:
                os._exit = exit_
            if os.execv == self._execv:
                os.execv = execv
            if _real_execve is not None and os.execve == self._execve:
                os.execve = execve
            from .capture import threads

            if self in threads.followers:
                threads.followers.remove(self)
            threads.unhook_process_start()
            threads.unhook_popen()
            _unhook_terminate()
            self._installed = False

    def end_children(self) -> None:
        """What Python does with multiprocessing's children at exit (Lib/multiprocessing/util.py, _exit_function),
        for the program's children and finalizers only: the finalizers with an exit priority of 0 or more first (a
        ``Pool`` the program never closed ends its workers and its threads there, as it does under Python: without
        it the workers were terminated holding the pool's queue lock, and the pool's end at the collection that
        follows waited on that lock forever), then daemonic children are terminated, the others joined, then the
        rest of the finalizers. The children's reports are then in the folder."""
        multiprocessing = sys.modules.get("multiprocessing")
        if multiprocessing is None:
            return
        since = getattr(self, "_finalizers_from", None)
        if since is not None:
            _run_finalizers(since, 0)
        if self.forked:
            ours = [p for p in multiprocessing.active_children() if p.pid in self.forked]
            for process in ours:
                if process.daemon:
                    process.terminate()
            for process in ours:
                process.join()
        if since is not None:
            _run_finalizers(since, None)

    def adopt(self, reports: list[ProcessReport], notes: list[str]) -> None:
        """The children an inner follower collected (a watched test's, which followed them in front of this one):
        they count for this one's program too, which never saw them."""
        self._adopted[0].extend(reports)
        self._adopted[1].extend(notes)

    def collect(self, handed: Collection[int] = ()) -> tuple[list[ProcessReport], list[str]]:
        """The reports of the children that ended, by pid, and a note for each forked child without one (``handed``:
        the pool workers the followed code handed tasks, `_unreported`)."""
        reports: dict[int, ProcessReport] = {}
        notes: list[str] = []
        self._resolve_programs()
        self._forks_told()
        if self.raw_forks > self._raw_told:  # a fork whose child never told its pid (its hook could not write)
            untold = self.raw_forks - self._raw_told
            notes.append(LostChild(f"{untold} process{'es' if untold > 1 else ''} forked with os.fork() told no pid "
                                   f"before {self.ended}: {'their' if untold > 1 else 'its'} syncs are not counted"))
        for name in sorted(os.listdir(self.folder)) if self.folder is not None else ():
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.folder, name), encoding="utf-8") as handle:
                    report = ProcessReport.from_dict(json.load(handle))
            except (OSError, ValueError, KeyError, TypeError) as error:
                notes.append(LostChild(f"a child process's report could not be read ({name}: {error})"))
                continue
            reports[report.pid] = self._named(report)
            if report.replaced_note() is not None:
                notes.append(report.replaced_note())
        # A new interpreter that ended before it started its watch ran none of the program's code (a Pool worker
        # terminated at once); one still starting runs it after the end, unreported: named.
        for report in self._adopted[0]:
            reports.setdefault(report.pid, report)
        notes.extend(self._adopted[1])
        expected = [pid for pid in self.forked if pid not in self.spawned
                    or os.path.exists(os.path.join(self._folder(), f"{pid}.started"))
                    or (pid not in self.followed_programs and _alive(pid))]  # a program: named below
        for report in reports.values():
            expected += report.forked
        missing = [pid for pid in dict.fromkeys(expected) if pid not in reports]
        if self.killed:
            one = len(self.killed) == 1
            shown = ", ".join(self._shown(pid) + (f" (waiting in {self.stuck_in[pid]})" if self.stuck_in.get(pid)
                                                  else "") for pid in self.killed)
            notes.append(LostChild(f"{len(self.killed)} child process{'' if one else 'es'}, {shown}, still "
                         f"ran {TERM_GRACE_S:g} s after multiprocessing's terminate() (busy in C code, where a "
                         f"signal handler cannot run): killed with SIGKILL, so {'its' if one else 'their'} syncs "
                         f"are not counted"))
            missing = [pid for pid in missing if pid not in self.killed]
        for pid in missing:
            notes.append(self._unreported(pid, self.ended, handed=handed))
        if self.unwatched:
            shown = ", ".join(self.unwatched[:4]) + (f" and {len(self.unwatched) - 4} more"
                                                      if len(self.unwatched) > 4 else "")
            one = len(self.unwatched) == 1
            notes.append(LostChild(f"{len(self.unwatched)} child process{'' if one else 'es'} started as "
                         f"{'a new interpreter' if one else 'new interpreters'} ({shown}) without a target (a "
                         f"Process subclass's own run()) ran unwatched: {'its' if one else 'their'} syncs are not in "
                         "this report (the fork start method keeps such a process watched)"))
        if self.test_workers:
            one = self.test_workers == 1
            notes.append(LostChild(
                f"{self.test_workers} pytest-xdist worker process{'' if one else 'es'} (-n) ran the tests unwatched: "
                f"{'its' if one else 'their'} syncs are not in this report (run pytest without -n under syncfree run, "
                "or `pytest -n N --syncfree`, whose summary collects each worker's tests)"))
        programs = list(self.programs)
        for pid, program in self.followed_programs.items():
            if pid in reports or os.path.exists(os.path.join(self._folder(), f"{pid}.started")):
                continue  # its report, or a note that it left none (`missing`)
            if _alive(pid):
                notes.append(ChildNote(f"child process {self._shown(pid)} was still running when {self.ended}: "
                                       "its syncs are not counted"))
            else:
                programs.append(program)  # it never started its watch (python -I, -S): unwatched
        still = {pid for pid in missing if pid in self._told_pids and _alive(pid)}
        for token, (pid, own) in self._commands.items():
            if pid is None or own or pid not in self._command_names or not _alive(pid):
                continue
            if any(self._told_pids.get(child, (None,))[0] == token for child in still):
                continue  # its Python program still running is named above
            notes.append(ChildNote(f"command {self._command_names[pid]} (pid {pid}) was still running when "
                                   f"{self.ended}: the Python programs it runs from then on are not counted"))
        if programs:
            from .programs import programs_note

            notes.extend(ChildNote(note) for note in programs_note(programs, "", "are not in this report"))
        return sorted(reports.values(), key=lambda r: r.pid), notes

    def _unreported(self, pid: int, ended: str, where: str = "", handed: Collection[int] = ()) -> ChildNote:
        """The note on a child without a report. One still running is a note (a server, persistent DataLoader workers:
        what the code hands them is rarely CUDA work, or an idle pool), except a pool's worker that ran tasks: those
        the code handed its Pool (``handed``: `capture.threads._pool_tasks`), or any of a ProcessPoolExecutor's (it
        starts its workers at a task's submit); their syncs are missing from the count (`LostChild`: not judged).
        One that ended without a report was killed: `LostChild`."""
        if not _alive(pid):
            return LostChild(f"child process {self._shown(pid)} ended without a report (killed): its syncs are not "
                             f"counted{where}")
        if self.pool_workers.get(pid) == "executor" or (pid in self.pool_workers and pid in handed):
            return LostChild(f"child process {self._shown(pid)}, a worker of a Pool or ProcessPoolExecutor, was still "
                             f"running when {ended}: the syncs of the tasks it ran are not counted{where} (close the "
                             "pool before the end: `with Pool(...) as pool:`, `executor.shutdown()`)")
        return ChildNote(f"child process {self._shown(pid)} was still running when {ended}: its syncs are not "
                         f"counted{where}")

    def _named(self, report: ProcessReport) -> ProcessReport:
        """A report as the notes and sites name its process: a Python program by its program (``train.py (pid
        N)``)."""
        program = self.followed_programs.get(report.pid)
        if program is not None:
            report.name = self._shown(report.pid)
        return report

    def _shown(self, pid: int) -> str:
        """A child as the notes name it: its multiprocessing name and pid, else its pid."""
        return f"{self._names[pid]} (pid {pid})" if pid in self._names else f"pid {pid}"

    def remove_folder(self) -> None:
        if self.folder is not None and os.getpid() == self.parent:
            shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ both sides
    def _folder(self) -> str:
        """Where the children write their reports (made on first use)."""
        if self.folder is None:
            # Once, under a lock: two threads starting their first children at once each made a folder, and the
            # children told the one that lost (a Python program run from each of two threads: one "ran unwatched").
            with _folder_lock:
                if self.folder is None:
                    self.folder = tempfile.mkdtemp(prefix="syncfree-processes-")
        return self.folder

    def _fork(self) -> int:
        self._folder()  # before the fork: the child writes there
        pid = _real_fork()
        self._forked(pid)
        return pid

    def _forked(self, pid: int) -> None:
        """After a fork this follows: the child takes its side; the parent expects its report."""
        if pid == 0:
            self._enter_child()
        else:
            self.forked.append(pid)
            _terminable[pid] = self
            self._counts_for_the_watch_here(pid)

    def _counts_for_the_watch_here(self, pid: int) -> None:
        """A child the code forks itself (``os.fork()``, ``pty.fork``) inside a watch of its own under this follower
        (a ``sync_free()`` block in a program syncfree run runs): its report counts for the watch too, as a
        multiprocessing child's or a Python program's does (capture/threads.py); the block passed without it."""
        from .capture import dispatch, threads

        if getattr(threads._starting, "depth", 0):  # multiprocessing's start: threads._start_child took it
            return
        inner = dispatch.owner_here()
        if inner is not None and inner.child_settings is not None and not self.collects_for(inner):
            inner.followed_children.append((self, pid))

    def _forkpty(self) -> tuple[int, int]:
        """``os.forkpty`` (``pty.fork``, ``pty.spawn``, pexpect): followed as ``os.fork`` is; its child ran unwatched
        and unnamed. Not a pty a command of a notebook's ``!cmd`` runs in (`threads._not_the_programs_fork`)."""
        from .capture import threads

        if getattr(threads._starting, "depth", 0):
            return _real_forkpty()
        self._folder()
        pid, fd = _real_forkpty()
        self._forked(pid)
        return pid, fd

    def _exit(self, status: int) -> None:
        try:
            if os.getpid() != self.parent:
                # A SIGTERM now (Pool.terminate() racing a worker's own end) would cut the report short.
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
                self.finish_child(status)
            elif self.on_parent_exit is not None:
                callback, self.on_parent_exit = self.on_parent_exit, None
                chosen = callback(status)  # the status the process ends with, when the callback decides one
                if isinstance(chosen, int):
                    status = chosen
            else:
                outer = self._outer(1)
                if outer is not None:  # a follower in front of syncfree run's (a watched test's): the run's report
                    outer(status)
        except BaseException:  # noqa: BLE001 - nothing may keep the process from exiting as asked
            pass
        _real_exit(status)

    def _outer(self, which: int) -> Any:
        """The hook this follower put itself in front of (``os._exit``: 1, ``os.execv``: 2, ``os.execve``: 3) when
        it is another follower's, which ends a run in this process: a watched test's follower (no ``on_parent_exit``
        of its own) stands in front of syncfree run's while the test runs, and a test that called ``os._exit`` or
        ``os.exec*`` ended the run with no report and exit 0."""
        previous = getattr(self, "_previous", None)
        hook = previous[which] if previous else None
        owner = getattr(hook, "__self__", None)
        return hook if isinstance(owner, ForkedChildren) and owner is not self else None

    def _execv(self, path: Any, args: Any) -> None:
        self._exec(path, args, None)

    def _execve(self, path: Any, args: Any, env: Any) -> None:
        self._exec(path, args, env)

    def _exec(self, path: Any, args: Any, env: Any) -> None:
        if os.getpid() == self.parent and self.on_parent_exit is None:
            outer = self._outer(2 if env is None else 3)
            if outer is not None:  # the run's follower decides (`_outer`)
                return outer(path, args) if env is None else outer(path, args, env)
        decision = self._before_exec(path, args, env)
        if isinstance(decision, tuple):  # followed: the new program runs under syncfree run, carrying the report
            path, args, more = decision
            env = {**(os.environ if env is None else env), **more}
        try:
            if env is None:
                _real_execv(path, args)
            else:
                _real_execve(path, args, env)  # type: ignore[misc]
        except OSError:
            if decision:  # the run is over, its report written: the status a shell gives an exec that failed
                _real_exit(127)
            raise

    def _before_exec(self, path: Any, args: Any, env: Any = None) -> bool | tuple:
        """The program replaces itself (``os.exec*``): nothing after that line of it runs, no ``atexit`` handler,
        and its report would go with the old image. A followed child writes its report first, as at its end; the
        followed program's own process (``on_parent_exit``: syncfree run) ends its run there, as at ``os._exit``:
        its callback returns a status (other than 0: a verdict that fails, the process ends with it instead of the
        exec, whose status would pass a run that synced), or the command and environment to exec instead (syncfree
        run follows a Python program: `syncfree.cli.run_script`). An exec that cannot succeed (``os.execvp`` tries
        each folder of PATH; a missing file) is left to fail as it would. True: the run has ended here."""
        if isinstance(path, int) or not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return False  # a file descriptor (fexecve), or a candidate that fails: nothing ends here
        try:
            if os.getpid() != self.parent:
                # A Python program it becomes runs unwatched (its environment no longer has the start-up hook):
                # said in its report, not passed over (a worker that re-executes itself lost its syncs, exit 0)
                self._replaced_by = _python_program_of_exec(os.fsdecode(path), [os.fsdecode(a) for a in args])
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
                try:
                    self.finish_child(None)
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                return False
            if self.on_parent_exit is None:
                return False
            callback, self.on_parent_exit = self.on_parent_exit, None
            command = [os.fsdecode(path), *(os.fsdecode(a) for a in list(args)[1:])]
            chosen = callback(0, command, env)  # env: the new program's environment (None: this one's)
        except BaseException:  # noqa: BLE001 - the exec goes on as the program asked
            return False
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a stream the program closed
                pass
        if isinstance(chosen, tuple):
            return chosen
        if isinstance(chosen, int) and chosen != 0:
            _real_exit(chosen)
        return True

    # ------------------------------------------------------------------ child side
    @property
    def in_child(self) -> bool:
        return self._child_start is not None and os.getpid() != self.parent

    def _enter_child(self) -> None:
        recorder = self._recorder()
        if recorder is None:
            # Forked from a thread that no recorder records by name (under syncfree run, any thread but the main
            # one: a Pool started in a thread, the worker handler of a Pool replacing a worker): this child's syncs
            # go where such a thread's go (the run's recorder), and its report reads them there.
            from .capture import dispatch

            recorder = dispatch.owner()
        self._child_recorder = recorder
        checkpoint = recorder.checkpoint() if recorder is not None else None
        self._child_start = (checkpoint, recorder.syncs if recorder is not None else 0)
        self.forked = []  # a grandchild is this child's to name
        self._finished = False
        from .capture import threads

        threads.predict_in_forked_child(recorder)  # forked from a thread without the stand-ins
        from .capture.interrupts import ending_signals

        for signum in ending_signals():  # SIGTERM (Pool.terminate()), SIGHUP (the session closed)...
            if signal.getsignal(signum) == signal.SIG_DFL:
                try:
                    signal.signal(signum, self._terminated)
                except ValueError:  # not the main thread: the report is written at a normal end only
                    break
        self._keep_handler_in_dataloader_worker()

    def recorder_started(self, recorder: Any) -> None:
        """In a child forked before the run's engine started (its program had not imported torch), which now
        imports torch and starts it: the child's syncs from here on are its report's."""
        if self.in_child and self._child_recorder is None:
            self._child_recorder = recorder
            self._child_start = (recorder.checkpoint(), recorder.syncs)
            self._keep_handler_in_dataloader_worker()

    def _keep_handler_in_dataloader_worker(self) -> None:
        """A DataLoader worker replaces the SIGTERM handler as it starts (torch/csrc/DataLoader.cpp,
        ``_set_worker_signal_handlers``): a C handler that ends the worker with ``_exit(0)`` when the parent sends
        the signal (multiprocessing terminates daemonic workers at the parent's exit, DataLoader's shutdown those
        still alive), so such a worker ended without its report and was called killed. Here torch's handlers are
        set, then SIGTERM comes back to `_worker_terminated`, which writes the report and ends as torch's would."""
        handling = sys.modules.get("torch.utils.data._utils.signal_handling")
        real = getattr(handling, "_set_worker_signal_handlers", None)
        if real is None or getattr(real, "_syncfree_keeps_report", False):
            return

        def set_worker_signal_handlers(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            try:
                signal.signal(signal.SIGTERM, self._worker_terminated)
            except ValueError:  # not the main thread (torch calls it from the worker's)
                pass
            return result

        set_worker_signal_handlers._syncfree_keeps_report = True  # type: ignore[attr-defined]
        handling._set_worker_signal_handlers = set_worker_signal_handlers  # this child's only: it forked already

    def _worker_terminated(self, signum: int, frame: Any) -> None:
        """A DataLoader worker's SIGTERM: its report, then torch's answer (DataLoader.cpp, handler_SIGTERM): from the
        parent, exit 0, so that the parent's DataLoader does not take it for a failed worker ("DataLoader worker is
        killed by signal: Terminated"); from anyone else, the signal's default action.

        A Python handler is not told the sender: the parent marks a child it terminates (`_hook_terminate`). Once the
        block that followed the worker has ended (its folder is gone: a watched test's persistent workers, ended at
        the program's exit), nothing marks it any more and no report is read: the SIGTERM is taken for the parent's,
        the usual one then (another sender's, rare, also ends the worker with 0, where torch's handler would let
        it die of the signal)."""
        folder = self.folder
        followed = folder is not None and os.path.isdir(folder)
        if not followed or os.path.exists(os.path.join(folder, f"{os.getpid()}.term")):
            self.finish_child(0)
            _real_exit(0)
        self._terminated(signum, frame)

    def _terminated(self, signum: int, frame: Any) -> None:
        from .capture import interrupts

        interrupts.handler_ran(signum)
        if self._writing:
            # The report is being written (a Pool worker ends on the pool's sentinel as Pool.terminate() signals
            # it; blocking the signal in this thread does not keep torch's threads from taking it): the signal's
            # default action comes once it is written.
            self._deferred = signum
            return
        now = time.monotonic()
        if interrupts.in_engine(frame) and (self._term_held is None or now - self._term_held < interrupts.MAX_HOLD_S):
            # Landed in the engine's own code, which may hold the recorder's lock that the report needs (a Pool
            # worker freeing its last task's tensors as terminate() signals it): raised again a moment later, where
            # the child is then, as syncfree run's own handler does (script_run.py).
            self._term_held = self._term_held or now
            interrupts.rearm_later(signum)
            return
        self.finish_child(None, signum)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def finish_child(self, status: int | None, signum: int | None = None) -> None:
        """Write this child's report (once) into the folder."""
        if self._finished or self._child_start is None or self.folder is None:
            return
        self._writing = True  # before _finished: a SIGTERM in between must wait for the report too
        self._finished = True
        try:
            self._write_report(status, signum)
        finally:
            self._writing = False
            deferred, self._deferred = self._deferred, None
            if deferred is not None:
                signal.signal(deferred, signal.SIG_DFL)
                os.kill(os.getpid(), deferred)

    def _write_report(self, status: int | None, signum: int | None) -> None:
        checkpoint, syncs_at_fork = self._child_start
        recorder = self._child_recorder
        sites = recorder.sites_since(checkpoint) if recorder is not None and checkpoint is not None else []
        syncs = recorder.syncs - syncs_at_fork if recorder is not None else 0
        report = ProcessReport(os.getpid(), _process_name(), status, syncs, [site_fields(s) for s in sites],
                               signum, list(self.forked), getattr(self, "_replaced_by", None))
        path = os.path.join(self.folder, f"{os.getpid()}.json")
        try:
            with open(path + ".part", "w", encoding="utf-8") as handle:
                json.dump(report.to_dict(), handle)
            os.replace(path + ".part", path)  # the parent never reads half a report
        except FileNotFoundError:
            if os.path.isdir(self.folder):
                raise
            # The watch or cell that started this child has ended and named it as still running (persistent
            # DataLoader workers outlive the cell that made them): nobody reads the report, and the child ends as
            # the program made it end.


def _kernel_wait(pid: int) -> str:
    """Where a child's main thread waits in the kernel, as Linux says (``/proc/PID/wchan``: ``futex_wait_queue``, a
    lock; ``pipe_read``), for the note on a child killed after terminate(); empty where it cannot be read."""
    try:
        with open(f"/proc/{pid}/wchan", encoding="ascii", errors="replace") as handle:
            where = handle.read().strip()
    except OSError:
        return ""
    return where if where and where != "0" else ""


def _python_program_of_exec(path: str, argv: list[str]) -> str | None:
    """The Python program an ``os.exec*`` of ``path`` may run, else None: python itself, or named anywhere on the
    command line (``env -u X python``, ``timeout 60 python``, ``nice python``), in a shell's command line (``sh -c``,
    ``bash -lc "cd d && exec python train.py"``) or in a script's text (a ``#!`` script, python's or a shell's that
    runs it). A shell or a script that does not name python (``sh -c "echo hi"``) is not one."""
    import re

    from .capture.threads import python_program, shell_words

    words = [path, *argv[1:]]
    found = python_program(words)
    if found is not None:
        return found
    mentions = re.compile(r"(^|[\s;&|(/=])python[\d.]*(\s|$|[;&|)])")
    for index, word in enumerate(words[1:], start=1):
        if word == sys.executable or mentions.search(os.path.basename(word) + " "):
            if os.path.basename(path) in ("sh", "bash", "dash", "zsh"):
                break  # a shell's own words: its command line below
            return python_program(words[index:]) or os.path.basename(word)
    if os.path.basename(path) in ("sh", "bash", "dash", "zsh"):
        flags = [i for i, word in enumerate(words[1:-1], start=1)
                 if word.startswith("-") and not word.startswith("--") and "c" in word]
        if flags:
            line = words[flags[0] + 1]
            if sys.executable in line or mentions.search(line):
                return python_program(shell_words(line) or []) or f"{os.path.basename(path)} -c ..."
        return None
    try:
        with open(path, "rb") as handle:
            text = handle.read(65536)
    except OSError:
        return None
    if text.startswith(b"#!") and mentions.search(text.decode("utf-8", "replace")):
        return os.path.basename(path)
    return None


# terminate() of a followed child, bounded (see the module's docstring): the children whose SIGTERM a handler of
# ours takes (pid -> their follower), when terminate() signalled each, and the replaced methods, shared by every
# follower and counted, so that followers that end in any order leave no layer behind.
_terminable: dict[int, ForkedChildren] = {}
_terminated_at: dict[int, float] = {}
_term_real: list[tuple[type, str, Any]] = []
_term_users = 0


def _hook_terminate() -> None:
    global _term_users
    _term_users += 1
    if _term_users > 1:
        return
    from multiprocessing import popen_fork

    classes: list[type] = [popen_fork.Popen]  # spawn's and forkserver's Popen are its subclasses
    try:
        from multiprocessing import popen_forkserver, popen_spawn_posix

        classes += [cls for cls in (popen_forkserver.Popen, popen_spawn_posix.Popen) if "wait" in vars(cls)]
    except ImportError:  # a platform without them
        pass
    real_terminate = vars(popen_fork.Popen)["terminate"]

    def terminate(popen_self: Any) -> None:
        if popen_self.returncode is None and popen_self.pid in _terminable:
            _terminated_at.setdefault(popen_self.pid, time.monotonic())
            folder = _terminable[popen_self.pid].folder
            if folder is not None:  # the child's handler tells this SIGTERM from another's (_worker_terminated)
                try:
                    with open(os.path.join(folder, f"{popen_self.pid}.term"), "w", encoding="utf-8"):
                        pass
                except OSError:
                    pass
        real_terminate(popen_self)

    _term_real.append((popen_fork.Popen, "terminate", real_terminate))
    popen_fork.Popen.terminate = terminate
    for cls in classes:
        real_wait = vars(cls)["wait"]

        def wait(popen_self: Any, timeout: float | None = None, real_wait: Any = real_wait) -> Any:
            sent = _terminated_at.get(popen_self.pid)
            if sent is None or popen_self.returncode is not None:
                return real_wait(popen_self, timeout)
            left = max(sent + TERM_GRACE_S - time.monotonic(), TERM_JOIN_S)
            if timeout is not None and timeout <= left:
                return real_wait(popen_self, timeout)
            started = time.monotonic()
            code = real_wait(popen_self, max(left, 0.0))
            if code is None:  # alive past the grace: its handler never ran
                _terminated_at.pop(popen_self.pid, None)
                follower = _terminable.get(popen_self.pid)
                if follower is not None:
                    follower.killed.append(popen_self.pid)
                    follower.stuck_in[popen_self.pid] = _kernel_wait(popen_self.pid)
                try:
                    os.kill(popen_self.pid, signal.SIGKILL)
                except OSError:
                    pass
                code = real_wait(popen_self, None if timeout is None
                                 else max(timeout - (time.monotonic() - started), 0.0))
            return code

        _term_real.append((cls, "wait", real_wait))
        cls.wait = wait


def _unhook_terminate() -> None:
    global _term_users
    if _term_users == 0:
        return
    _term_users -= 1
    if _term_users == 0:
        while _term_real:
            cls, name, method = _term_real.pop()
            setattr(cls, name, method)
        _terminable.clear()
        _terminated_at.clear()


class SpawnedTarget:
    """A multiprocessing child's target, wrapped in the parent for a child started as a new interpreter: in the
    child it runs the target under a watch of its own (the parent's mode and engine), following that child's own
    forks, and writes the child's report into the parent's folder when the target ends, returns or raises (or at
    SIGTERM: `ForkedChildren._terminated`). Pickled with the process object, so it holds plain values only (its
    `WatchSettings` a frozen dataclass, pickled by its class's name)."""

    def __init__(self, target: Callable[..., Any], folder: str, settings: WatchSettings) -> None:
        self.target = target
        self.folder = folder
        self.settings = settings

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Started before the main module's import (`_WatchBeforeMain`), else here.
        started = _spawned_watch.pop(os.getpid(), None) or _start_spawned_watch(self.folder, self.settings)
        if started is None:  # the program runs as it would; the parent notes the missing report
            return self.target(*args, **kwargs)
        watch, children = started
        status: int | None = 0
        try:
            return self.target(*args, **kwargs)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1 if exc.code else 0
            raise
        except BaseException:
            status = 1
            raise
        finally:
            try:
                children.finish_child(status)
            finally:
                children.parent = os.getpid()
                children.stop()
                watch.__exit__(None, None, None)


def _start_spawned_watch(folder: str, settings: WatchSettings, now: bool = False) -> tuple[Any, ForkedChildren] | None:
    """In a child started as a new interpreter: its watch (the parent's mode and engine) and the follower of its
    own forks, reporting into ``folder``; None when the watch cannot start. ``now``: started at once, not at the
    child's import of torch (a program that is `syncfree run` itself: its run's recorder goes inside the watch)."""
    children = ForkedChildren(running_recorder, watch_settings=settings)
    if not now and "torch" not in sys.modules and torch_installed() and settings.engine != "cupti":
        # Started at the child's own import of torch, as `syncfree run` starts its program's (`TorchImport`):
        # a child that never imports torch runs without it.
        watch: Any = _WatchAtTorchImport(settings, children)
    else:
        watch = settings.watch()
        try:
            watch.__enter__()
        except Exception:  # noqa: BLE001 - the program runs as it would; the parent notes the missing report
            return None
    children.parent = -1  # this process reports as a child does
    children._enter_child()
    children.start(folder)
    # Started: from now on a missing report means syncs lost (a Pool worker terminated before it started ran no
    # code of the program, and is not named).
    try:
        with open(os.path.join(folder, f"{os.getpid()}.started"), "w", encoding="utf-8"):
            pass
    except OSError:  # the folder is gone: the block that started this child has ended (and named it as running)
        pass
    return watch, children


class _WatchAtTorchImport:
    """A spawned child's watch, started when the child imports torch (in the importing thread, before the importer
    gets the module back: `TorchImport`); ended with ``__exit__`` as a watch is. A watch that cannot start
    then leaves the child unwatched and without a report (the parent names it), the program running as it would."""

    def __init__(self, settings: WatchSettings, children: ForkedChildren) -> None:
        self.settings, self.children = settings, children
        self.watch: Any = None
        self.ended = False
        self.hook = TorchImport(self._start)
        self.hook.install()

    def _start(self) -> None:
        if self.watch is not None or self.ended:
            return
        watch = self.settings.watch()
        try:
            watch.__enter__()
        except Exception:  # noqa: BLE001 - as a watch that cannot start before the main module's import
            self.children._finished = True  # no report: the parent notes it missing
            return
        self.watch = watch
        if watch._recorder is not None:
            self.children.recorder_started(watch._recorder)

    def __exit__(self, *exc_info: Any) -> None:
        self.ended = True
        self.hook.remove()
        if self.watch is not None:
            self.watch.__exit__(*exc_info)


# A spawned child's watch started before its main module's import (pid -> (watch, follower)), for its target.
_spawned_watch: dict[int, tuple[Any, ForkedChildren]] = {}
# The watch that the child being started now gets in its preparation data (per thread: threads may start processes
# at once).
_preparing = threading.local()
_PREPARATION_KEY = "syncfree_watch"
_real_preparation: list[Callable[[str], dict]] = []


class _WatchBeforeMain:
    """An entry of a spawned child's preparation data (``multiprocessing.spawn.get_preparation_data``), which the
    child unpickles before ``prepare()`` imports the parent's main module (Lib/multiprocessing/spawn.py, ``_main``;
    the forkserver's children alike): unpickling it puts `_watch_before_main` in front of that import. ``prepare()``
    ignores a key it does not know."""

    def __init__(self, folder: str, settings: WatchSettings) -> None:
        self.folder, self.settings = folder, settings

    def __reduce__(self) -> tuple:
        return _watch_before_main, (self.folder, self.settings)


def _watch_before_main(folder: str, settings: WatchSettings) -> None:
    """In the child, as its preparation data is unpickled: its watch starts as ``prepare()`` imports the main module
    (after ``sys.path`` and the working directory are the parent's), so that the module's top level runs watched."""
    from multiprocessing import spawn

    for name in ("_fixup_main_from_path", "_fixup_main_from_name"):
        real = getattr(spawn, name, None)
        if real is None:
            continue

        def fixup(main: str, real: Callable[[str], None] = real) -> None:
            if os.getpid() not in _spawned_watch:
                started = _start_spawned_watch(folder, settings)
                if started is not None:
                    _spawned_watch[os.getpid()] = started
            real(main)

        setattr(spawn, name, fixup)


def _hook_preparation_data() -> None:
    """``multiprocessing.spawn.get_preparation_data`` adds the `_WatchBeforeMain` of the child being started (once;
    without one it is the original)."""
    from multiprocessing import spawn

    if _real_preparation:
        return
    real = spawn.get_preparation_data
    _real_preparation.append(real)

    def get_preparation_data(name: str) -> dict:
        data = real(name)
        watch = getattr(_preparing, "watch", None)
        if watch is not None and isinstance(data, dict):
            data[_PREPARATION_KEY] = watch
        return data

    spawn.get_preparation_data = get_preparation_data


def followed_reports(started: list[tuple[ForkedChildren, int]]) -> tuple[list[ProcessReport], list[str]]:
    """For a watch whose children a follower of the process's children took (``started``: (follower, pid)), the
    reports of those that ended, and notes on the others."""
    reports, notes = [], []
    for follower_of in dict.fromkeys(f for f, _ in started):
        more, more_notes = follower_of.reports_of([pid for f, pid in started if f is follower_of], "the block ended")
        reports += more
        notes += more_notes
    return reports, notes


def pass_to_parents(recorder: Any, reports: list[ProcessReport], notes: list[str]) -> None:
    """A watch's children's reports count for the recorders around it too (an outer watch, a ``%%syncfree`` cell),
    up to the one whose follower collects them itself (syncfree run's, a watched test's)."""
    from .capture import threads

    parent = recorder.parent
    while parent is not None and not any(f.collects_for(parent) for f in threads.followers):
        parent.inherited_children.extend(reports)
        parent.inherited_notes.extend(notes)
        parent = parent.parent


def running_children() -> dict[int, str]:
    """The multiprocessing children of this process running now (pid -> name): those a watch or a cell finds
    already there when it begins (a Pool, persistent DataLoader workers made before it) work for it unwatched."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is None or not getattr(multiprocessing.process, "_children", True):
        return {}  # the usual case: no child ever started (no syscall)
    try:
        # A process forked with os.fork() inherits its parent's list of children: those are not its own.
        me = os.getpid()
        return {p.pid: p.name for p in sorted(multiprocessing.active_children(), key=lambda p: p.pid or 0)
                if p.pid is not None and getattr(p, "_parent_pid", me) == me}
    except Exception:  # a child object the program broke: nothing named rather than a failed watch
        return {}


def earlier_children_note(before: dict[int, str], where: str, handed: set[int] = frozenset()) -> str | None:
    """The note on the child processes that were already running when ``where`` (``block``, ``cell``) began:
    their syncs during it are in no report of it (the follower of the watch or cell that started them, if any,
    reads a child's report once, when it ends). Where its code handed some of them tasks (``handed``: a Pool's
    workers, a ProcessPoolExecutor's), their syncs are the block's and missing from its count: `LostChild`, and no
    budget is judged."""
    if not before:
        return None
    ran = [pid for pid in before if pid in handed]
    pids = ran or list(before)
    one = len(pids) == 1
    names = [f"{before[pid]} (pid {pid})" for pid in pids]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    if ran:
        return LostChild(
            f"{len(ran)} child process{'' if one else 'es'} started before this {where} ({shown}) ran its tasks (a "
            f"Pool's or a ProcessPoolExecutor's workers): syncs {'it' if one else 'they'} made are not counted (a "
            f"pool made inside the {where}{', or the test,' if where == 'block' else ''} is followed)")
    return ChildNote(
        f"{len(before)} child process{'' if one else 'es'} started before this {where} ({shown}) "
        f"{'was' if one else 'were'} running during it: syncs {'it' if one else 'they'} made are not counted "
        f"here (a Pool or persistent DataLoader workers made earlier: make them in the {where} to count them)")


def _finalizer_mark() -> int:
    """The last key of multiprocessing's finalizers so far (``util.Finalize``: each key is its exit priority and a
    running count): those made later have higher counts."""
    util = sys.modules.get("multiprocessing.util")
    registry = getattr(util, "_finalizer_registry", None) or {}
    return max((key[1] for key in list(registry)), default=-1)


def _run_finalizers(since: int, minpriority: int | None) -> None:
    """``multiprocessing.util._run_finalizers(minpriority)`` for the finalizers made after ``since`` only (the
    program's: this process goes on after it, with its own)."""
    util = sys.modules.get("multiprocessing.util")
    registry = getattr(util, "_finalizer_registry", None)
    if not registry:
        return
    keys = [key for key in list(registry)
            if key[0] is not None and key[1] > since and (minpriority is None or key[0] >= minpriority)]
    pool_class = getattr(sys.modules.get("multiprocessing.pool"), "Pool", None)
    for key in sorted(keys, reverse=True):
        finalizer = registry.get(key)
        if finalizer is not None:
            reference = getattr(finalizer, "_weakref", None)
            owner = reference() if callable(reference) else None
            try:
                finalizer()
            except Exception:  # noqa: BLE001 - as multiprocessing: printed, the others run
                import traceback

                traceback.print_exc()
            if pool_class is not None and isinstance(owner, pool_class) and owner._state == "RUN":
                # Its end has run (its workers and threads are gone): its __del__, at the collection of the
                # program's objects that follows, would write to the pipe of a thread already ended ("Exception
                # ignored ... Bad file descriptor"), where Python's exit prints nothing.
                owner._state = "TERMINATE"
            del owner


def merge_children(report: Any, reports: list[ProcessReport], notes: list[str]) -> None:
    """The children's syncs join a watch's `WatchReport` (its count, its sites, its verdict), with the notes on
    children it has no report for."""
    import linecache

    from .allow import allowed_by_comment
    from .capture.sites import child_sites

    for site in child_sites(reports):
        # A child's line that a `# syncfree: allow` comment covers is allowed, as the block's own: it counted
        # towards the budget (a Pool's workers, the API), where syncfree run left it out
        text = linecache.getline(site.file, site.line) if site.file else ""
        (report.allowed if text and allowed_by_comment(text, site.kind, site.rule) else report.sites).append(site)
    report.syncs += sum(r.syncs for r in reports)
    report.notes.extend(notes)
    if not getattr(report, "judged", True) and any(r.syncs for r in reports):
        # Predict mode could not judge the block from its own process, which touched CPU tensors only; its
        # children's syncs were predicted on CUDA ones (a DataLoader's workers made them): the CUDA work was theirs.
        from .capture.notes import NOT_JUDGED

        report.judged = True
        if NOT_JUDGED in report.notes:
            report.notes.remove(NOT_JUDGED)


def _pool_kind(target: Any) -> str | None:
    """"pool" for a process whose target is a Pool's worker loop (``multiprocessing.pool.worker``), "executor" for
    a ProcessPoolExecutor's (``_process_worker``), else None: such a process runs what the code hands its pool."""
    return {("multiprocessing.pool", "worker"): "pool", ("concurrent.futures.process", "_process_worker"): "executor"}.get(
        (getattr(target, "__module__", None), getattr(target, "__name__", None)))


def _start_method(process: Any) -> str:
    """The start method ``process`` will be started with (its context's, else the default one)."""
    method = getattr(process, "_start_method", None)
    if method is None:
        import multiprocessing

        method = multiprocessing.get_start_method()
    return str(method)


def _process_name() -> str:
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        process = multiprocessing.current_process()
        if process.name != "MainProcess":
            return process.name
    return f"pid {os.getpid()}"


def _alive(pid: int) -> bool:
    """Whether the child ``pid`` still runs. One that has ended is left unreaped (``WNOWAIT``): multiprocessing
    reaps it in ``join``/``is_alive``, and a process reaped behind its back reads as running to it forever (its
    ``waitpid`` fails with ECHILD, which ``Popen.poll`` takes for "not started yet"): ``active_children()`` would
    list it, and a DataLoader's shutdown would ``terminate()`` a pid that may be another process's by then."""
    try:
        if hasattr(os, "waitid") and hasattr(os, "WNOWAIT"):
            return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        finished, _ = os.waitpid(pid, os.WNOHANG)  # no waitid (macOS before Python 3.13): reaps it
    except ChildProcessError:  # reaped already (multiprocessing does), or not this process's child (a forkserver's)
        return _running(pid)
    except OSError:
        return False
    return finished == 0


def _running(pid: int) -> bool:
    """Whether ``pid``, which is not this process's child to wait for (a forkserver's child; one multiprocessing
    reaped), still runs: it exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True  # no /proc (macOS): it exists
