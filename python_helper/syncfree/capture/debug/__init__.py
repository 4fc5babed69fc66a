"""The debug-mode engine: torch's sync debug mode (warn and error modes) and what it does not see.

- hook.py: the warning hook, the filters kept first and torch's debug mode (one install for every
  recorder using it);
- explicit.py (and explicit_distributed.py): wrappers of the explicit synchronize calls and blocking
  collectives that the debug mode does not report;
- ops_calls.py: ``torch.ops`` calls, whose C++ sync warnings reach Python only inside a binding that
  converts them.

It imports only the shared parts of capture/ (dispatch.py: whose sync it is; engine.py: the seam; presence.py;
optable.py), never another engine.
"""

from .engine import DebugEngine

__all__ = ["DebugEngine"]
