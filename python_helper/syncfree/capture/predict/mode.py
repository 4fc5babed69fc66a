"""Predict mode's ``TorchFunctionMode``: every Python-level torch call of the session's
thread comes here, goes to its handler (handlers.py, indexing.py) or else runs on the CPU
with its fresh results marked virtual (`call_generic`, which asks the measured op table,
capture/optable.py, for ops no handler covers).

The mode is popped while its handler runs (torch/overrides.py, ``_pop_mode_temporarily``),
so the torch calls that torch itself makes while handling, say, ``repr(t)`` are not seen
again: a sync is counted once, at the outermost call that user code (or library code
outside torch's own handling, such as ``clip_grad_norm_``) made.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from . import calls
from .calls import call_generic
from .here import MODE_CLASS, Session

_Tensor: Any = None  # torch.Tensor, bound when the mode class is built (torch is imported lazily)
_MethodWrapper = type(object().__str__)  # what Tensor.device.__get__ is


def _make_mode_class() -> type:
    global _Tensor
    import torch
    from torch.overrides import TorchFunctionMode

    from .custom_ops import call_under_the_mode, operator_types, runs_python_kernels
    from .handlers import follow, getter_table, handler_table

    _Tensor = torch.Tensor
    calls.bind(torch)
    _operator_types = operator_types()

    class PredictMode(TorchFunctionMode):
        """Routes torch calls to the stand-in handlers of one PredictSession."""

        def __init__(self, session: Session) -> None:
            super().__init__()
            self.session = session
            self.registry = session.registry
            self.handlers = handler_table()
            self.getters = getter_table()
            self._handler_for = self.handlers.get

        def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            try:
                handler = self._handler_for(func)
            except TypeError:  # an unhashable callable
                handler = None
            if handler is None:  # or a function the program put in a handled one's place meanwhile
                handler = follow(func)
            if handler is not None:
                return handler(self, func, args, kwargs)
            if type(func) is not _MethodWrapper:  # attribute access comes as a method-wrapper
                if type(func) in _operator_types and runs_python_kernels(func):
                    return call_under_the_mode(self, func, args, kwargs)
                return call_generic(self, func, args, kwargs, unhandled=True)
            name = func.__name__
            if name == "__get__" or name == "__set__":
                handler = self.getters.get((getattr(func, "__self__", None), name))
                if handler is not None:
                    return handler(self, func, args, kwargs)
                # Attribute reads and writes never sync, and a read that gives no tensor
                # (dtype, shape, requires_grad: most of them) has nothing to mark.
                result = func(*args, **kwargs)
                if name == "__set__" or not isinstance(result, _Tensor):
                    return result
                registry = self.registry
                # .grad, .data, .T, ...: mostly virtual already (an optimizer reads each
                # parameter's .grad several times a step); else virtual if the tensor is.
                if not registry.is_cuda(result) and args and isinstance(args[0], _Tensor) \
                        and registry.is_cuda(args[0]):
                    registry.mark_results((result,), set())
                return result
            return call_generic(self, func, args, kwargs)

    return PredictMode


def new_predict_mode(session: Session) -> Any:
    """A TorchFunctionMode for ``session`` (the class is built on first use: torch is
    imported lazily), made in the thread that pushes it: the modes of this thread's sessions
    closed from another thread leave its stack first (`_orphan`)."""
    for orphan in _orphans.pop(threading.get_ident(), ()):
        ModeRemoval(orphan)()
    if threading.current_thread() is not threading.main_thread() and getattr(_ends, "guard", None) is None:
        _ends.guard = _ThreadEnd()
    if not MODE_CLASS:
        MODE_CLASS.append(_make_mode_class())  # here.py asks whether a mode of this class runs on a thread
    return MODE_CLASS[0](session)


# thread ident -> the modes of that thread's sessions closed from another thread, still on its function-mode stack
_orphans: dict[int, list[Any]] = {}
_ends = threading.local()


class _ThreadEnd:
    """Empties a thread's torch function-mode stack when the thread ends (its Python state is cleared, in that
    thread, before ``join()`` returns). A mode left there, such as a session's closed from another thread (the
    thread that first imported torch under ``syncfree run``), was freed by torch's C++ thread-local destructor
    after the thread's Python state was gone, racing the interpreter's exit: now and then the program died of
    "terminate called without an active exception" (SIGABRT) after it had ended well."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def __del__(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None or threading.get_ident() != self.thread:
            return  # a fork's child clears the other threads' states in its own thread: their stacks are not its
        try:
            C = torch._C
            while C._len_torch_function_stack():
                C._pop_torch_function_stack()
        except Exception:  # noqa: S110 (a thread's end: nothing to tell, nobody to tell it to)
            pass
        _orphans.pop(threading.get_ident(), None)
_orphan_classes: dict[type, type] = {}


def _pass_through(self: Any, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
    return func(*args, **(kwargs or {}))


def _orphan(mode: Any, thread: int) -> None:
    """``mode``'s session was closed from another thread than the one whose function-mode stack holds it: torch's
    stack is per thread and only that thread can take it off. Until it does (`new_predict_mode`, at its next
    session), the mode runs every call as it is: it predicts and counts nothing (a later session of that thread
    pushes a mode of its own, which counted each sync a second time)."""
    cls = type(mode)
    orphaned = _orphan_classes.get(cls)
    if orphaned is None:
        orphaned = _orphan_classes[cls] = type("OrphanedPredictMode", (cls,), {
            "__torch_function__": _pass_through, "__module__": __name__,
            "__doc__": "A PredictMode whose session ended in another thread (mode.py, _orphan)."})
    mode.__class__ = orphaned
    _orphans.setdefault(thread, []).append(mode)


class ModeRemoval:
    """Takes ``mode`` off torch's function-mode stack even if code left modes above it.

    Modes pushed above ours (``torch.set_default_device`` pushes one and never pops it)
    are put back in order. The stack to end with is worked out once; each run pops until
    the stack is a prefix of it and pushes the rest, so a run cut short by an interrupt
    and run again loses no mode (torch/overrides.py: _pop_mode/_push_mode).
    """

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.keep: list[Any] | None = None
        self.thread = threading.get_ident()  # whose stack holds the mode (made where it is pushed)

    def __call__(self) -> None:
        torch = sys.modules.get("torch")  # loaded since the mode was pushed; an import fails as Python shuts down
        if torch is None:
            return
        if threading.get_ident() != self.thread:  # a session closed from another thread
            if self.keep is None:
                self.keep = []
                _orphan(self.mode, self.thread)
            return
        C = torch._C
        keep = self.keep
        if keep is None:
            stack = [C._get_function_stack_at(i) for i in range(C._len_torch_function_stack())]
            if not any(m is self.mode for m in stack):
                return  # never pushed (or already removed)
            keep = self.keep = [m for m in stack if m is not self.mode]
        while True:
            n = C._len_torch_function_stack()
            if n <= len(keep) and all(C._get_function_stack_at(i) is keep[i] for i in range(n)):
                break
            C._pop_torch_function_stack()
        while C._len_torch_function_stack() < len(keep):
            C._push_on_torch_function_stack(keep[C._len_torch_function_stack()])



