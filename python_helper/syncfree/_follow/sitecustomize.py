"""Start-up of a Python program that a followed run started with subprocess (syncfree/programs.py).

``site`` imports this module at the program's start because the parent put this folder first on ``PYTHONPATH``. It
puts the environment back as the parent's code gave it, starts the program's watch, then hands over to the program's
own ``sitecustomize`` (the next one on ``sys.path``), if any.
"""

import os
import sys


def _follow() -> None:
    spec_text = os.environ.pop("SYNCFREE_FOLLOW", None)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    if spec_text is None:
        return
    import json

    try:
        given = json.loads(spec_text).get("pythonpath")
    except ValueError:
        given = None
    if given is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = given
    try:
        from syncfree.program_start import start
    except ImportError:  # this syncfree is not importable here: the program runs unwatched (the parent names it)
        return
    start(spec_text)


def _hand_over() -> None:
    """Import the program's own sitecustomize, the next one on sys.path, in place of this one."""
    import importlib

    this = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        if this is not None:
            sys.modules["sitecustomize"] = this


_follow()
_hand_over()
