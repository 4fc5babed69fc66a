"""Python programs that a followed run starts with ``subprocess``: each watches itself and reports to the run.

A Python program started with ``subprocess`` (``subprocess.run([sys.executable, "train.py"])``) is a new interpreter
that inherits nothing of its parent but its environment. Where the parent follows its children (``syncfree run``, a
watched test, a ``watch()``/``sync_free()`` block) and the program runs on this same interpreter, the environment it
gets names a folder of this module's, ``_follow``, first on ``PYTHONPATH``, and the parent's watch settings and report
folder in ``SYNCFREE_FOLLOW``: at start-up the child's ``site`` imports ``_follow/sitecustomize.py``, which puts the
environment back as it was given (so the program and the programs it starts see their own ``PYTHONPATH``), calls
`start`, and hands over to the program's own ``sitecustomize`` if there is one. `start` starts the program's watch as a
spawned multiprocessing child's is started (the parent's mode and engine; at its import of torch), and its report is
written into the parent's folder when the program ends (``atexit``, ``os._exit``, SIGTERM), where the parent reads it
with the other children's. This is how coverage.py and pytest-cov measure subprocesses (a start-up hook and an
environment variable).

A program on another interpreter (another virtual environment, ``python2``) may not have this syncfree to import:
it is named in a note, unwatched, as before.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from dataclasses import asdict, is_dataclass
from typing import Any

__all__ = ["ENV", "program_env", "same_interpreter", "start"]

ENV = "SYNCFREE_FOLLOW"
_HOOK_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_follow")
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def same_interpreter(interpreter: str) -> bool:
    """Whether ``interpreter`` (a subprocess's argv[0] or ``executable``) is this process's Python: its path, or the
    name the ``PATH`` resolves to it."""
    import shutil

    found = interpreter if os.sep in interpreter else shutil.which(interpreter)
    if not found or not sys.executable:
        return False
    try:
        return os.path.samefile(os.path.dirname(os.path.abspath(found)), os.path.dirname(sys.executable)) \
            and os.path.samefile(found, sys.executable)
    except OSError:
        return False


def program_env(env: Any, folder: str, settings: Any, token: str) -> dict[str, str] | None:
    """The environment for a Python program a follower starts: ``env`` (the caller's, or None: this process's) with
    the start-up hook and ``settings`` (a dataclass of the follower's `WatchSettings`); ``token``: the name of the
    file the program writes its pid to (a shell between them has a pid of its own). None where ``env`` is not a
    mapping of strings or the settings cannot travel."""
    if not is_dataclass(settings):
        return None
    try:
        given = dict(os.environ if env is None else env)
    except (TypeError, ValueError):
        return None
    if any(not isinstance(k, str) or not isinstance(v, str) for k, v in given.items()):
        return None  # bytes keys and values: left as the caller made them
    cls = type(settings)
    spec = {"folder": folder, "settings": asdict(settings), "class": f"{cls.__module__}:{cls.__qualname__}",
            "pythonpath": given.get("PYTHONPATH"), "token": token}
    paths = [_HOOK_FOLDER, _PACKAGE_PARENT] + ([given["PYTHONPATH"]] if given.get("PYTHONPATH") else [])
    given["PYTHONPATH"] = os.pathsep.join(paths)
    given[ENV] = json.dumps(spec)
    return given


def start(spec_text: str) -> None:
    """In the program, at start-up: its watch, reporting into the parent's folder when it ends. Never stops the
    program: a watch that cannot start leaves it unwatched (the parent names its missing report)."""
    try:
        spec = json.loads(spec_text)
        module_name, _, name = spec["class"].partition(":")
        module = __import__(module_name, fromlist=[name])
        settings = getattr(module, name)(**spec["settings"])
        folder, token = str(spec["folder"]), str(spec["token"])
    except Exception:  # noqa: BLE001 - a spec this syncfree cannot read: the program runs unwatched
        return
    if not os.path.isdir(folder):
        return  # the block that started it has ended: nobody reads a report
    from .processes import _start_spawned_watch
    from .watches import unended

    # The exit message of watches that never ended goes after `finish` (atexit runs the last registered first), as
    # `syncfree run` registers it before its program's.
    unended.register()

    started = _start_spawned_watch(folder, settings)
    if started is None:
        return
    watch, children = started
    told = os.path.join(folder, f"{token}.program")
    try:
        with open(told + ".part", "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
        os.replace(told + ".part", told)
    except OSError:
        pass  # the parent then expects the report under the pid it started
    outcome = {"status": 0}
    previous_hook = sys.excepthook

    def excepthook(kind: Any, value: Any, traceback: Any) -> None:
        outcome["status"] = 1  # an uncaught exception ends the program with 1
        previous_hook(kind, value, traceback)

    sys.excepthook = excepthook

    def finish() -> None:
        # atexit runs after the program's own handlers (registered later, run first) and its threads' joins.
        try:
            children.finish_child(outcome["status"])
        finally:
            children.parent = os.getpid()
            children.stop()
            watch.__exit__(None, None, None)

    atexit.register(finish)
