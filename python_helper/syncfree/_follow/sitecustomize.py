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
        spec = json.loads(spec_text)
        given = spec.get("pythonpath")
    except (ValueError, AttributeError):
        spec, given = {}, None
    if given is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = given
    if spec.get("prefix") != sys.prefix or spec.get("version") != "%d.%d" % sys.version_info[:2]:
        _unwatched(spec, here)  # another interpreter, which a shell the program ran started: named, unwatched
        return
    try:
        from syncfree.program_start import start
    except ImportError:  # this syncfree is not importable here: the program runs unwatched (the parent names it)
        return
    start(spec_text)
    # syncfree's own folder went on PYTHONPATH for the import above: taken off sys.path again where the program's
    # PYTHONPATH did not have it, or the program imported from it before its own PYTHONPATH and the standard library
    # (a site-packages folder put ahead of a source checkout the program's PYTHONPATH names)
    package_parent = os.path.dirname(os.path.dirname(here))
    if package_parent not in [os.path.abspath(p) for p in (given or "").split(os.pathsep) if p]:
        places = [i for i, entry in enumerate(sys.path) if os.path.abspath(entry or os.curdir) == package_parent]
        if places:
            entry = sys.path.pop(places[0])
            if len(places) == 1:  # site skipped it as a duplicate: back where site would have put it
                _put_back(entry)


def _put_back(entry):
    """``entry`` where ``site`` would have put it: each site folder (the user's, then a virtual environment's, then
    the system's) followed by the folders its ``.pth`` files add, in that order; else last."""
    import site

    try:
        folders = ([site.getusersitepackages()] if site.ENABLE_USER_SITE else []) + list(site.getsitepackages())
    except Exception:  # noqa: BLE001 - a site module without them (an embedded Python): last, as a .pth puts it
        folders = []
    order = []
    for folder in folders:
        folder = os.path.abspath(folder)
        order += [folder] + _pth_entries(folder)
    key = os.path.abspath(entry)
    if key in order:
        later = set(order[order.index(key) + 1:])
        for index, other in enumerate(sys.path):
            if os.path.abspath(other or os.curdir) in later:
                sys.path.insert(index, entry)
                return
    sys.path.append(entry)


def _pth_entries(folder):
    """The folders the ``.pth`` files of a site folder add, in the order site adds them."""
    found = []
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(".pth"))
    except OSError:
        return found
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    line = line.strip()
                    if line and not line.startswith(("#", "import ", "import\t")):
                        found.append(os.path.abspath(os.path.join(folder, line)))
        except OSError:
            continue
    return found


def _unwatched(spec, here):
    """This interpreter is not the parent's (another virtual environment, another Python): the parent's syncfree is
    not imported here; the program tells its pid as one that runs unwatched, and runs as it would."""
    package_parent = os.path.dirname(os.path.dirname(here))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != package_parent]
    folder, token = spec.get("folder"), spec.get("token")
    if not isinstance(folder, str) or not isinstance(token, str) or not os.path.isdir(folder):
        return
    label = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    told = os.path.join(folder, "%s.%d.unwatched" % (token, os.getpid()))
    try:
        with open(told + ".part", "w") as handle:
            handle.write("%s (%s)" % (label, sys.executable))
        os.replace(told + ".part", told)
    except OSError:
        pass


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
