"""The start of a Python program that a followed run started with subprocess (syncfree/programs.py): its watch, and
its report written into the parent's folder when it ends. ``_follow/sitecustomize.py`` calls `start` at the program's
start-up; nothing in the package imports this module."""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

from .processes import _start_spawned_watch
from .watches import unended

__all__ = ["start"]


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
    label, launch = _program()
    if launch is not None:  # torchrun's ranks: its library starts them, which no follower sees; named
        _tell(folder, token, "unwatched", f"launch:{launch}")
        return
    if sys.argv[:1] == ["-c"]:
        # `python -c CODE`: its code is "<string>", the program's own (its syncs go to its lines, not "outside your
        # code").
        from .capture.sites import PROGRAM_CODE_NAMES

        PROGRAM_CODE_NAMES.add("<string>")
    # The exit message of watches that never ended goes after `finish` (atexit runs the last registered first), as
    # `syncfree run` registers it before its program's.
    unended.register()
    # `syncfree run` itself (a test of a CLI, a script that runs another under syncfree): its run's recorder, started
    # at its program's import of torch, must go inside this watch to pass its syncs up (the watch counted none).
    started = _start_spawned_watch(folder, settings, now=label in ("-m syncfree", "syncfree")
                                   and sys.argv[1:2] == ["run"])
    if started is None:
        return
    watch, children = started
    _tell(folder, token, "program", label)
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


def _program() -> tuple[str, str | None]:
    """What this program is, as its parent names it (``train.py``, ``-m package``, ``-c ...``), and the label of a
    distributed launcher's command line where it is one (``torchrun train.py``), else None."""
    from .capture.threads import python_program
    from .programs import launcher

    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    label = python_program(argv, sys.executable) or os.path.basename(sys.argv[0] if sys.argv else "") or "python"
    return label, launcher(argv, label) or launcher(argv[1:], None)


def _tell(folder: str, token: str, kind: str, label: str) -> None:
    """Tell the parent this program's pid under its command's token (``TOKEN.PID.program``: it watches itself and
    reports; ``.unwatched``: it does not), with its label."""
    told = os.path.join(folder, f"{token}.{os.getpid()}.{kind}")
    try:
        with open(told + ".part", "w", encoding="utf-8") as handle:
            handle.write(label)
        os.replace(told + ".part", told)
    except OSError:
        pass  # the parent then expects the report under the pid it started
