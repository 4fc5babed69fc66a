"""Which engine sees the syncs: torch's sync debug mode, CUPTI, or the choice made for you.

- ``debug``: torch's sync debug mode plus wrappers of the explicit synchronize calls
  (recorder.py). Cheapest, but blind to CUDA calls that do not go through torch.
- ``cupti``: every blocking CUDA runtime/driver call from any library (capture/cupti/);
  needs ``pip install 'syncfree[cupti]'`` and costs more per sync (README, "Engines").
- ``auto`` (the default): ``cupti`` when a library that calls CUDA without torch is
  imported (or imported by the code about to run), else ``debug``.

Error mode and predict mode always use their own engines: error mode needs torch to raise
before the sync happens, which a CUPTI callback cannot do.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable
from typing import NamedTuple

ENGINES = ("debug", "cupti", "auto")
DEFAULT = "auto"

#: Modules whose CUDA calls bypass torch (sync-facts.md, "Beyond torch"), as imported.
# (Not cuda.bindings: torch and cupti-python themselves import it. Not triton: inductor
# imports it in every process that runs torch.compile, and on torch-only code, Triton
# kernels with triton.testing.do_bench included, debug mode plus the explicit wrappers
# missed no blocking call (sync-facts.md, "Beyond torch"); `--engine cupti` still sees it.)
BYPASSING_MODULES = ("cupy", "numba.cuda", "pycuda")

# `import cupy`, `from numba import cuda`, `import pycuda.autoinit`: the top package of a
# module in BYPASSING_MODULES, in import statements of code about to run.
_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+(cupy|numba|pycuda)\b", re.MULTILINE)


class EngineChoice(NamedTuple):
    engine: str          # "debug" or "cupti"
    notes: list[str]     # why, when it is not what was asked for or the choice was automatic


def check_engine(name: str | None) -> str:
    """``name`` if it is an engine (None: the default), else ValueError in one line."""
    if name is None:
        return DEFAULT
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {name!r}")
    return name


def bypassing_libraries(sources: Iterable[str] = ()) -> list[str]:
    """The libraries that call CUDA without torch which are imported in this process or
    by ``sources`` (code about to run), by top package name."""
    found = []
    for module in BYPASSING_MODULES:
        if module in sys.modules:
            found.append(module.split(".")[0])
    for text in sources:
        found += _IMPORT.findall(text or "")
    return sorted(set(found))


def unseen_note(loaded_before: Iterable[str]) -> str | None:
    """For a debug-mode run: a note naming the libraries that call CUDA without torch and
    were imported during the run (not in ``loaded_before``), whose syncs it did not see."""
    new = [name for name in bypassing_libraries() if name not in set(loaded_before)]
    if not new:
        return None
    names = ", ".join(new)
    verb = "was" if len(new) == 1 else "were"
    return (f"{names} {verb} imported during the run and call{'s' if len(new) == 1 else ''} CUDA "
            "without torch: debug mode did not see those syncs (--engine cupti does)")


def cupti_problem() -> str | None:
    """Why the CUPTI engine cannot run here (one line), or None when it can."""
    from .cupti.engine import CuptiUnavailable, load_cupti

    try:
        load_cupti()
    except CuptiUnavailable as exc:
        return str(exc)
    return _version_mismatch()


@functools.lru_cache(maxsize=1)
def _version_mismatch() -> str | None:
    # Once per process: importlib.metadata reads the installed distributions' metadata
    # (milliseconds), and every watch(engine="cupti") and every recorder asked this.
    try:
        from importlib.metadata import version

        import torch

        cupti_major = version("cupti-python").split(".")[0]
    except Exception:  # not installed as a distribution (a source build): trust it
        return None
    cuda = getattr(torch.version, "cuda", None)
    if not cuda or cuda.split(".")[0] == cupti_major:
        return None
    extra = "cupti" if cuda.split(".")[0] == "13" else f"cupti-cu{cuda.split('.')[0]}"
    return (f"cupti-python {cupti_major}.x does not match torch's CUDA {cuda} "
            f"(pip install 'syncfree[{extra}]')")


def choose(requested: str | None, mode: str, *, sources: Iterable[str] = ()) -> EngineChoice:
    """The engine for a watch in ``mode`` (warn|error|predict|static)."""
    requested = check_engine(requested)
    if mode != "warn" or requested == "debug":
        notes = []
        if requested == "cupti" and mode == "error":
            notes.append("--engine cupti counts syncs, it cannot stop one before it happens: "
                         "--mode error uses debug mode (torch's syncs only)")
        elif requested == "cupti" and mode in ("predict", "static"):
            # Without a GPU nothing calls CUDA for CUPTI to see: said, not dropped in silence.
            notes.append("--engine cupti needs a CUDA device (it sees the GPU's blocking calls): not used "
                         f"here, the code ran in {mode} mode")
        return EngineChoice("debug", notes)
    libraries = bypassing_libraries(sources)
    if requested == "auto" and not libraries:
        return EngineChoice("debug", [])
    problem = cupti_problem()
    named = ", ".join(libraries)
    if problem is None:
        why = [f"CUPTI engine: {named} call{'s' if len(libraries) == 1 else ''} CUDA without "
               "torch"] if requested == "auto" else []
        return EngineChoice("cupti", why)
    if requested == "auto":
        return EngineChoice("debug", [f"{named} call{'s' if len(libraries) == 1 else ''} CUDA "
                                      f"without torch, and debug mode does not see those syncs; "
                                      f"the CUPTI engine would ({problem})"])
    return EngineChoice("debug", [f"--engine cupti: {problem}; debug mode used instead (torch's "
                                  "syncs only)"])


__all__ = ["BYPASSING_MODULES", "DEFAULT", "ENGINES", "EngineChoice", "bypassing_libraries",
           "check_engine", "choose", "cupti_problem", "unseen_note"]
