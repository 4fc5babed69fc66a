"""TorchScript in predict mode: scripted and traced code runs its Python source on the
stand-ins, so its syncs are predicted op by op; TorchScript without Python source here runs
as TorchScript, its results are virtual, and the report's notes name it.

The TorchScript interpreter runs its graph in C++, where no ``TorchFunctionMode`` sees an
op: a ``@torch.jit.script`` function's ``.item()`` or ``if bool(mask.any())`` was never
predicted, its results were plain CPU tensors (so the syncs on them downstream were lost
too), and a ``sync_free`` test passed. While a session runs:

* ``torch.jit.ScriptFunction.__call__`` (``torch.jit.script`` and ``torch.jit.trace`` of
  a function) calls the Python function it was made from (``_torchdynamo_inline``, which
  torch keeps for dynamo to inline it the same way);
* a scripted or traced module's methods are its Python class's
  (``ConcreteModuleType.py_class``, or the class a traced module's qualified name names), looked up through ``RecursiveScriptModule.forward``
  and ``__getattr__`` (a traced module hands every lookup to its ``RecursiveScriptModule``)
  and bound to a view of the module (:class:`_AsPython`) whose own method lookups go the
  same way, so ``self.helper(x)`` inside ``forward`` runs Python too, and submodules are
  script modules that do the same;
* what has no Python source here (``torch.jit.load``, a method reached through a script
  object) runs as TorchScript (``ScriptFunction.__call__`` and ``ScriptMethod.__call__``):
  its results are marked virtual when an input is, and a note at the end of the session
  names it, where it was called and how often: the syncs inside it are not predicted.

Known limit: a traced function or module runs the Python it was traced from, so a value
the trace baked in (a ``.item()`` at trace time, which torch warns about) is predicted as
a sync that the traced graph does not make on a GPU.
"""

from __future__ import annotations

import re
import sys
import types
from typing import Any

from .here import CallNotes, Session, calling_line, predict_session_here
from .registry import call_tensors, tensors_in

# TorchScript's qualified names: __torch__.Net, __torch__.___torch_mangle_3.Net.
_MANGLING = re.compile(r"^__torch__\.|___torch_mangle_\d+\.")

#: How the report's note about TorchScript run without its Python starts.
TORCHSCRIPT_NOTE_PREFIX = "TorchScript without Python source ran in predict mode"

#: Calls of TorchScript without Python source on virtual inputs by any session of this
#: process, by name (only ever growing): what pytest --syncfree's summary reads before and
#: after each test (pytest_cuda.py).
unseen_torchscript_calls: dict[str, int] = {}


def install(session: Session, patch: Any) -> None:
    import torch
    import torch.jit

    script_function = torch.jit.ScriptFunction
    script_method = torch._C.ScriptMethod
    recursive = torch.jit.RecursiveScriptModule
    function_call = vars(script_function)["__call__"]
    method_call = vars(script_method)["__call__"]
    module_getattr = vars(recursive)["__getattr__"]

    def call_function(self: Any, *args: Any, **kwargs: Any) -> Any:
        current = predict_session_here()
        if current is None:
            return function_call(self, *args, **kwargs)
        python = getattr(self, "_torchdynamo_inline", None)
        if isinstance(python, types.FunctionType):
            return python(*args, **kwargs)
        name = str(getattr(self, "qualified_name", None) or getattr(self, "name", "?"))
        return _unseen(current, name, function_call, self, args, kwargs)

    def call_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        current = predict_session_here()
        if current is None:
            return method_call(self, *args, **kwargs)
        try:
            owner = self.owner._type().name()
        except (AttributeError, RuntimeError):
            owner = "a TorchScript module"
        return _unseen(current, f"{owner}.{self.name}", method_call, self, args, kwargs)

    def getattr_as_python(self: Any, attr: str) -> Any:
        if not self.__dict__.get("_initializing", True) and predict_session_here() is not None:
            function = _python_method(self, attr)
            if function is not None:
                return types.MethodType(function, _AsPython(self))
        return module_getattr(self, attr)

    patch(script_function, "__call__", call_function)
    patch(script_method, "__call__", call_method)
    patch(recursive, "__getattr__", getattr_as_python)
    # The first lookup of ``forward`` caches the ScriptMethod in the instance's __dict__,
    # which outranks ScriptModule's non-data descriptor: a data descriptor outranks both.
    patch(recursive, "forward", _ForwardAsPython(None))
    # A traced module's submodules refuse to be called (their forward raises "Trace
    # submodules cannot be called"): the Python forward of a traced module calls them.
    traced = torch.jit._trace.TracedModule
    patch(traced, "forward", _ForwardAsPython(vars(traced).get("forward")))


class _ForwardAsPython:
    """``forward`` of a script or traced module while a session runs: the Python class's
    forward in a thread that predicts, else what the class gave (``original``; for a
    ``RecursiveScriptModule``, what ``ScriptModule.forward`` gives)."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __get__(self, module: Any, owner: Any = None) -> Any:
        if module is None:
            return self
        script = module.__dict__.get("_actual_script_module", module)  # a traced module's
        if not script.__dict__.get("_initializing", True) and predict_session_here() is not None:
            function = _python_method(script, "forward")
            if function is not None:
                return types.MethodType(function, _AsPython(script))
        if self.original is not None:
            return self.original.__get__(module, owner)
        cached = module.__dict__.get("forward")
        return cached if cached is not None else module.__getattr__("forward")

    def __set__(self, module: Any, value: Any) -> None:
        module.__dict__["forward"] = value


def _python_method(module: Any, name: str) -> types.FunctionType | None:
    """The function ``name`` of the Python class a scripted or traced ``module`` was made
    from, when that class (not ``nn.Module`` or ``ScriptModule``) defines it and the
    module can run its Python (:func:`_runs_as_python`)."""
    function = _python_member(module, name)
    if isinstance(function, types.FunctionType) and _runs_as_python(module):
        return function
    return None


def _python_member(module: Any, name: str) -> Any:
    """What the Python class of ``module`` (below ``nn.Module``) defines as ``name``."""
    import torch

    py_class = _python_class(module)
    if py_class is None:
        return None
    for cls in py_class.__mro__:
        if cls is torch.nn.Module or cls is torch.jit.ScriptModule:
            return None
        member = vars(cls).get(name)
        if member is not None:
            return member
    return None


def _python_class(module: Any) -> type | None:
    """The Python class a scripted or traced ``module`` was made from, if it is known.

    A traced module's ``py_class`` is a stand-in carrying the qualified name of the traced
    module's class (torch/jit/_trace.py, ``QualnameWrapper``); that name is looked up among
    the modules already imported (a class defined in a notebook cell or a script's
    ``__main__`` under another name is not found: its calls are TorchScript's, noted)."""
    module = module.__dict__.get("_actual_script_module", module)  # a traced module's
    concrete = module.__dict__.get("_concrete_type")
    py_class = getattr(concrete, "py_class", None)
    if not isinstance(py_class, type):
        return None
    qualname = vars(py_class).get("_jit_override_qualname")
    if qualname is None:
        return py_class
    return _imported_class(_MANGLING.sub("", qualname))


def _imported_class(qualname: str) -> type | None:
    import torch

    parts = qualname.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        owner = sys.modules.get(".".join(parts[:cut]) if cut else "__main__")
        if owner is None:
            continue
        for name in parts[cut:]:
            owner = getattr(owner, name, None)
        if isinstance(owner, type) and issubclass(owner, torch.nn.Module):
            return owner
        return None
    return None


_RUNS_AS_PYTHON = "_syncfree_runs_as_python"


def _runs_as_python(module: Any) -> bool:
    """Whether every attribute that the Python methods of ``module``'s class read on
    ``self`` (from ``forward`` on, through the methods and properties they reach) is there
    on the script module: TorchScript keeps only what the compiled code uses (nn.LSTM's
    forward reads ``_flat_weight_refs``, which scripting drops). Decided once a module."""
    module = module.__dict__.get("_actual_script_module", module)  # a traced module's
    known = module.__dict__.get(_RUNS_AS_PYTHON)
    if known is None:
        known = module.__dict__[_RUNS_AS_PYTHON] = _all_there(module)
    return known


def _all_there(module: Any) -> bool:
    concrete = module.__dict__.get("_concrete_type")
    if "_jit_override_qualname" in vars(getattr(concrete, "py_class", None) or object):
        # A traced module's submodules cannot be called: each must run its Python too.
        for sub in module.__dict__.get("_modules", {}).values():
            if _python_class(sub) is None or not _runs_as_python(sub):
                return False
    seen: set[str] = set()
    todo = ["forward"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        member = _python_member(module, name)
        if isinstance(member, property):
            member = member.fget
        if isinstance(member, types.FunctionType):
            todo.extend(_self_attributes(member.__code__))
        elif member is None and name != "forward":
            try:
                object.__getattribute__(module, "__getattr__")(name)
            except AttributeError:
                if not hasattr(type(module), name):
                    return False
    return True


def _self_attributes(code: types.CodeType) -> set[str]:
    """The attributes a method's code reads or writes on its first argument (``self``),
    its nested functions and comprehensions included."""
    import dis

    if not code.co_argcount:
        return set()
    me = code.co_varnames[0]
    names: set[str] = set()
    codes = [code]
    while codes:
        current = codes.pop()
        previous = None
        for instruction in dis.get_instructions(current):
            if isinstance(instruction.argval, types.CodeType):
                codes.append(instruction.argval)
            if instruction.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR") \
                    and previous is not None and previous.opname.startswith(("LOAD_FAST", "LOAD_DEREF")) \
                    and me in (previous.argval if isinstance(previous.argval, tuple)
                               else (previous.argval,)):
                names.add(instruction.argval)
            previous = instruction
    return names


class _AsPython:
    """A scripted module seen from its Python source: the methods its Python class defines
    are that class's functions bound to this view; every other attribute, set or read, is
    the module's (its parameters, buffers, constants and submodules)."""

    __slots__ = ("_module",)

    def __init__(self, module: Any) -> None:
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        module = object.__getattribute__(self, "_module")
        member = _python_member(module, name)
        if isinstance(member, types.FunctionType):
            return types.MethodType(member, self)
        if isinstance(member, property) and member.fget is not None:
            return member.fget(self)
        return getattr(module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_module"), name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return object.__getattribute__(self, "_module")(*args, **kwargs)

    # Python looks special methods up on the type: a container's forward iterates itself.
    # The Python class's own (nn.Sequential's, over ``_modules``) where it has one: a traced
    # container's script module has none.
    def _syncfree_special(self, name: str, *args: Any) -> Any:
        module = object.__getattribute__(self, "_module")
        member = _python_member(module, name)
        if isinstance(member, types.FunctionType):
            return member(self, *args)
        return getattr(module, name)(*args)

    def __iter__(self) -> Any:
        return self._syncfree_special("__iter__")

    def __len__(self) -> int:
        return self._syncfree_special("__len__")

    def __getitem__(self, key: Any) -> Any:
        return self._syncfree_special("__getitem__", key)

    def __contains__(self, key: Any) -> bool:
        return self._syncfree_special("__contains__", key)

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_module"))


def _unseen(session: Session, name: str, call: Any, target: Any, args: tuple,
            kwargs: dict) -> Any:
    """Run TorchScript that has no Python source here; its results are virtual when an
    input is, and the session's note counts the call."""
    import torch

    registry = session.registry
    with torch._C.DisableTorchFunction():
        virtual, kept = registry.split_inputs(call_tensors(args, kwargs))
    result = call(target, *args, **kwargs)
    if virtual:
        with torch._C.DisableTorchFunction():
            registry.mark_results(tensors_in(result), kept)
        name = _MANGLING.sub("", name)
        session._unseen_torchscript.count(name, calling_line(sys._getframe(2)))
        unseen_torchscript_calls[name] = unseen_torchscript_calls.get(name, 0) + 1
    return result


class UnseenTorchScript(CallNotes):
    """Calls of TorchScript without Python source that a session ran on virtual inputs."""

    def text(self, calls: str) -> str:
        return (f"{TORCHSCRIPT_NOTE_PREFIX}: {calls}. Its syncs are not predicted (its "
                "results are on the virtual GPU); a GPU run sees them")
