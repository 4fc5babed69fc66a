"""Python programs that a followed run starts with ``subprocess``: each watches itself and reports to the run.

A Python program started with ``subprocess`` (``subprocess.run([sys.executable, "train.py"])``) is a new interpreter
that inherits nothing of its parent but its environment. Where the parent follows its children (``syncfree run``, a
watched test, a ``watch()``/``sync_free()`` block) and the program runs on this same interpreter, the environment it
gets names a folder of this module's, ``_follow``, first on ``PYTHONPATH``, and the parent's watch settings and report
folder in ``SYNCFREE_FOLLOW``: at start-up the child's ``site`` imports ``_follow/sitecustomize.py``, which puts the
environment back as it was given (so the program and the programs it starts see their own ``PYTHONPATH``), calls
``syncfree.program_start.start``, and hands over to the program's own ``sitecustomize`` if there is one. That starts
the program's watch as a spawned multiprocessing child's is started (the parent's mode and engine; at its import of
torch), and its report is written into the parent's folder when the program ends (``atexit``, ``os._exit``,
SIGTERM), where the parent reads it with the other children's. This is how coverage.py and pytest-cov measure
subprocesses (a start-up hook and an environment variable). This module is the parent's side: it imports nothing of
syncfree, so that capture/threads.py and processes.py can use it.

A program on another interpreter (another virtual environment, ``python2``) may not have this syncfree to import:
it is named in a note, unwatched, as before.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, is_dataclass
from typing import Any

__all__ = ["ENV", "Launch", "launcher", "program_env", "programs_note", "same_interpreter"]

ENV = "SYNCFREE_FOLLOW"
_HOOK_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_follow")
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def same_interpreter(interpreter: str, env: Any = None) -> bool:
    """Whether ``interpreter`` (a subprocess's argv[0] or ``executable``) is this process's Python: its path, or the
    name the ``PATH`` resolves to it: ``env``'s, where the command is given one (subprocess searches that PATH)."""
    import shutil

    search = None
    if env is not None:
        try:
            search = os.pathsep.join(os.get_exec_path(env))
        except (TypeError, ValueError, AttributeError):  # not a mapping subprocess would take either
            search = None
    found = interpreter if os.sep in interpreter else shutil.which(interpreter, path=search)
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
            "pythonpath": given.get("PYTHONPATH"), "token": token, "prefix": sys.prefix,
            "version": "%d.%d" % sys.version_info[:2]}
    paths = [_HOOK_FOLDER, _PACKAGE_PARENT] + ([given["PYTHONPATH"]] if given.get("PYTHONPATH") else [])
    given["PYTHONPATH"] = os.pathsep.join(paths)
    given[ENV] = json.dumps(spec)
    return given


#: Distributed launchers: a follower sees the program start them, never their ranks, which the launcher's library code
#: starts (`syncfree run --nproc-per-node` runs the ranks watched and merges them).
_LAUNCHER_COMMANDS = {"torchrun": "torchrun", "deepspeed": "deepspeed"}
_LAUNCHER_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torch.distributed.launch",
                     "accelerate.commands.launch": "accelerate launch", "deepspeed.launcher.runner": "deepspeed"}


class Launch(str):
    """The label of a distributed launch among the programs a run names (`programs_note` says what counts its
    ranks)."""

    __slots__ = ()


def launcher(argv: Any, program: str | None) -> str | None:
    """The label of a distributed launcher's command line (``torchrun --nproc-per-node 2 train.py`` → ``torchrun
    train.py``), ``program`` being what the command runs where it is Python (``-m torch.distributed.run``); else
    None."""
    try:
        words = [os.fsdecode(w) for w in argv]
    except TypeError:
        return None
    if not words:
        return None
    name = os.path.basename(words[0])
    if program is not None and program.startswith("-m "):
        name = _LAUNCHER_MODULES.get(program[3:], "")
    elif name == "accelerate" and words[1:2] == ["launch"]:
        name = "accelerate launch"
    else:
        name = _LAUNCHER_COMMANDS.get(name, "")
    if not name:
        return None
    script = next((w for w in words[1:] if w.endswith(".py")), None)
    return Launch(f"{name} {os.path.basename(script)}" if script else name)


def programs_note(labels: list[str], where: str, lost: str) -> list[str]:
    """The notes on the Python programs started ``where`` (" here", "") that ran unwatched (``lost``: what is said of
    their syncs), launchers apart: their ranks' syncs need ``syncfree run --nproc-per-node``."""
    notes = []
    launches = [label for label in labels if isinstance(label, Launch)]
    programs = [label for label in labels if not isinstance(label, Launch)]
    for names, text in ((programs, "Python program"), (launches, "distributed launch")):
        if not names:
            continue
        one = len(names) == 1
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        its = "its" if one else "their"
        if names is programs:
            notes.append(f"{len(names)} {text}{'' if one else 's'} started{where} with subprocess ({shown}) ran "
                         f"unwatched: {its} syncs {lost} (`syncfree run` {'it' if one else 'them'} to see "
                         f"{'them' if one else 'theirs'})")
        else:
            notes.append(f"{len(names)} {text}{'' if one else 'es'} started{where} ({shown}) ran {its} ranks "
                         f"unwatched: their syncs {lost} (`syncfree run --nproc-per-node N train.py` runs the ranks "
                         "watched and merges their reports)")
    return notes
