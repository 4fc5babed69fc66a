"""``torch.compile`` in predict mode: compiled for real where no virtual CUDA value can reach
the compiled code, run eagerly (its syncs predicted op by op) where one does.

Each call of compiled code asks dynamo's ``_callback_from_stance`` for its frame callback
(torch/_dynamo/eval_frame.py, ``_TorchDynamoContext.__call__``'s ``compile_wrapper``, with
the call's ``fn``, ``args`` and ``kwargs`` in its frame); that is where predict mode
decides, per call:

* **For real**, when nothing virtual can flow in: no tensor was ever put on the virtual
  device in this process, or none is reachable from the call (its arguments, the
  function's closure, defaults and the globals its code names, a bound module's or
  optimizer's tensors; :func:`_reaches_virtual`). The session steps aside for the call: its
  ``TorchFunctionMode`` is popped (dynamo would trace the mode's ``__torch_function__``),
  and torch's compiler (dynamo, inductor, AOT autograd, fake tensors) gets the real
  ``torch.cuda`` functions where it asks them (patches.py, ``Patches.replace``), so CPU
  code compiles as on a CPU machine, with the user's backend, and counts as compiled. The
  compiled code still sees the stand-ins (``torch.cuda.is_available()`` is True there).
  Checks guard the verdict while the compiler traces (``VariableBuilder._wrap``,
  ``OutputGraph.call_user_compiler``): a tensor dynamo wraps, or a graph input, that is
  virtually on CUDA (one the walk did not reach), or a CUDA device in the traced graph
  (``device='cuda'``; ``.cuda()`` is refused by fake tensors on a CPU build) ends the real
  compile before that frame runs, and the call goes on eagerly from that frame, its syncs
  predicted and noted. What ran before it saw no virtual value: a resume function or a
  called frame is a frame of its own, and its inputs are traced. Compiled code is reused
  only where it was traced so: a real call files its cache entries under its own backend
  key (:class:`_CheckedBackend`; code compiled outside predict mode is traced again, once),
  and each tensor guard of such code also asks that the tensor is not virtual (a later
  call where it went on the virtual device is traced again, and falls back).
* **Eagerly** otherwise (dynamo's callback is withheld for the call, as dynamo's
  ``force_eager`` stance does), and the report's notes name each compiled function that ran
  so, where it was called and why (:data:`COMPILE_NOTE_PREFIX`): a GPU would compile it,
  and its syncs are predicted op by op as eager code.

Compiling code that a virtual CUDA value reaches does not give a GPU's syncs: the compiled
graph's CPU kernels would be invisible to the mode (no syncs, no virtual results), inductor
would generate CPU code, and a GPU also syncs while compiling (autotuning).

Real compiles need dynamo's tables of torch functions built on the real ones: dynamo keys
its handling of torch functions by the objects it finds at import and on first use
(trace_rules.py ``get_torch_obj_rule_map``, variables/torch.py ``_get_handlers``). Imported
before the session, they are checked and completed before any patch goes in
(:func:`prepare_dynamo`); first imported inside a session, dynamo is executed with the
patches set aside (:class:`_DynamoImport`), unless another thread runs a session meanwhile:
then compiled code runs eagerly (and the note says why).

Known limits: the stance is process-wide, so while one thread runs a call compiled for real
another thread's ``fullgraph=True`` call run eagerly may fail as "found no compiled frames";
what dynamo runs without tracing it (the C call at a graph break) is not checked: a CUDA
device met only there fails as on a CPU machine instead of falling back.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from .. import dynamo_tables
from . import claims, here
from .here import CallNotes, Session, calling_line, predict_files, predict_mode_here

#: How the report's note about compiled code run eagerly starts (pytest's summary looks
#: for it among a report's notes).
COMPILE_NOTE_PREFIX = "torch.compile ran eagerly"

#: Calls of compiled functions run eagerly by any session of this process, by function
#: name (only ever growing): what pytest --syncfree's summary reads before and after each
#: test (pytest_cuda.py), whatever watch the test ran under.
eager_compiled_calls: dict[str, int] = {}

# Objects the reachability walk visits before it gives up (and the call runs eagerly).
_WALK_BUDGET = 20_000


class EagerCompiles(CallNotes):
    """Calls of ``torch.compile``'d code while a session runs it eagerly, for the report.

    Counted per (compiled function, calling line); one note at the end of the session
    names them, so that no "does it compile" test or training script passes through
    predict mode believing it compiled.
    """

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.reasons: set[str] = set()

    def seen(self, frame: Any, reason: str) -> None:
        """A compiled function runs eagerly; ``frame`` is dynamo's compile_wrapper's."""
        import torch

        fn = frame.f_locals.get("fn") if frame.f_code.co_name == "compile_wrapper" else None
        owner = getattr(fn, "__self__", None)
        if owner is not None and issubclass(type(owner), torch.nn.Module):
            name = type(owner).__name__  # a compiled module (OptimizedModule, Module.compile)
        else:
            name = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
                       or "a torch._dynamo.optimize block")
        where = calling_line(frame.f_back)
        self.count(name, where)
        self.reasons.add(reason)
        eager_compiled_calls[name] = eager_compiled_calls.get(name, 0) + 1

    def text(self, calls: str) -> str:
        why = "; ".join(sorted(self.reasons))
        return (f"{COMPILE_NOTE_PREFIX} in predict mode: {calls} ({why}). Without a GPU it "
                "cannot compile for one: the syncs of the compiled code are predicted op by op "
                "as eager code; on a GPU compiling also syncs (once per graph) and a graph "
                "break can move a sync")


# Why a call ran eagerly (the note lists the reasons met).
_VIRTUAL_INPUT = "a tensor on the virtual CUDA device reaches it"
_UNSURE = "too many objects reach it to rule out a virtual CUDA tensor"
_CUDA_IN_CODE = "its code uses the CUDA device"
_DYNAMO_LATE = ("torch._dynamo was first imported inside predict mode while another thread "
                "ran a session")
_MODE_NOT_ON_TOP = "another torch function mode runs above predict mode's"
_UNCHECKED = "this torch's dynamo offers no place to check the tensors it traces"


# -- per-thread state of real compiles ---------------------------------------------------

class _RealCall:
    """One call of compiled code that predict mode stepped aside for."""

    __slots__ = ("frame", "session", "mode", "started", "fell_back")

    def __init__(self, frame: Any, session: Session, mode: Any) -> None:
        self.frame = frame  # dynamo's compile_wrapper frame of this call
        self.session = session
        self.mode = mode  # the PredictMode popped for the call
        self.started = False
        self.fell_back = False

    def rejoin(self) -> None:
        """Put the session's mode back on this thread's stack and force eager again
        (once: at the frame that falls back, or at the end of the call)."""
        mode, self.mode = self.mode, None
        if mode is None:
            return
        try:
            if self.session.active:
                import torch

                torch._C._push_on_torch_function_stack(mode)
        finally:
            _RealStance.leave()


_local = threading.local()


def _real_calls() -> list[_RealCall]:
    calls = getattr(_local, "calls", None)
    if calls is None:
        calls = _local.calls = []
    return calls


def compiling_for_real() -> bool:
    """Whether this thread runs compiled code that predict mode stepped aside for (and
    that has not fallen back to eager)."""
    calls = getattr(_local, "calls", None)
    return bool(calls) and not calls[-1].fell_back


# The packages of torch's compiler: a stand-in asked from there answers as the real
# function (patches.py), so that compiling CPU code sees a CPU machine.
_COMPILER_DIRS = ("_dynamo", "_inductor", "_functorch", "_subclasses", "fx", "_higher_order_ops",
                  "_export", "_prims", "_prims_common", "_decomp", "_refs", "_logging", "_library")
_COMPILER_FILES = ("_guards.py", os.path.join("utils", "_triton.py"))
# torch.cuda and torch.accelerator call each other: the asker is the first frame past them.
_PASSED_DIRS = ("cuda", "accelerator")


@functools.cache
def _compiler_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    import torch

    root = os.path.dirname(torch.__file__) + os.sep
    compiler = tuple(root + d + os.sep for d in _COMPILER_DIRS) + tuple(
        root + f for f in _COMPILER_FILES)
    passed = tuple(root + d + os.sep for d in _PASSED_DIRS)
    return compiler, passed


def asked_by_compiler(frame: Any) -> bool:
    """Whether the caller ``frame`` (past torch.cuda's own and this package's frames) is
    torch's compiler, in a thread that compiles for real."""
    if not compiling_for_real():
        return False
    compiler, passed = _compiler_prefixes()
    ours = predict_files()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(passed) or filename in ours):
            return filename.startswith(compiler)
        frame = frame.f_back
    return False


# -- installing ---------------------------------------------------------------------------

def prepare_dynamo(session: Session) -> None:
    """Before any patch goes in: whether dynamo's tables of torch functions hold the real
    ones, so that real compiles can be allowed in this session."""
    session._dynamo_ready = "torch._dynamo" in sys.modules and _dynamo_tables_real()


def _dynamo_tables_real() -> bool:
    """Whether dynamo's tables of torch functions hold the functions torch has now (call
    it where no patch is in place)."""
    try:
        import torch
        from torch._dynamo import trace_rules
        from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

        # Built at dynamo's import (a dynamo imported under the patches holds the stand-ins,
        # and keeps them); _get_handlers is built on first use: built now. The table of
        # torch functions is built on first use too, and again after torch.distributed's
        # init_process_group clears it: one built while something else stood in torch's
        # place is built again now, on what torch holds (dynamo_tables.py).
        dynamo_tables.drop_stale()
        ready = torch.cuda.synchronize in trace_rules.get_torch_obj_rule_map()
        TorchInGraphFunctionVariable._get_handlers()
    except Exception:  # another torch: no real compiles  # noqa: BLE001
        return False
    return bool(ready)


class _DynamoImport:
    """A ``sys.meta_path`` finder, while a session lasts and dynamo is not imported yet:
    ``torch._dynamo`` (first imported by ``torch.compile``, ``import torch._dynamo``, a
    ``from torch._dynamo.testing import ...``) is executed with the session's patches set
    aside, so that dynamo records the real torch functions (importlib's loader protocol)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        ident = here.get_ident()
        if name != "torch._dynamo" or any(s._thread != ident for s in claims._claims):
            return None  # another session's thread would meet the real functions meanwhile
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _RealTorchLoader(spec.loader, self.session)
        return spec

    def remove(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)


class _RealTorchLoader:
    def __init__(self, loader: Any, session: Session) -> None:
        self.loader = loader
        self.session = session

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        session = self.session
        with session._patches.set_aside():
            self.loader.exec_module(module)
            ready = _dynamo_tables_real()
        if claims._active_session is session:
            session._dynamo_ready = ready
            hook_dynamo(session)


def install(session: Session, patch: Callable[[Any, str, Any], None]) -> None:
    """Decide per call of compiled code while ``session`` lasts; note eager runs at its end."""
    import torch

    # Per patch set: a session entered again after its patches were restored hooks again
    # (else its compiled calls would run under the program's stance, dynamo tracing the mode).
    session._dynamo_hooked = False
    if "torch._dynamo" not in sys.modules:
        finder = _DynamoImport(session)
        session._undo.push(finder.remove)
        sys.meta_path.insert(0, finder)
    hook_dynamo(session)
    patch(torch, "compile", _compile_wrapper(session, torch.compile))


def hook_dynamo(session: Session) -> None:
    """Put the per-call decision into dynamo (once per process-wide patch set)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    stance_type = getattr(eval_frame, "DynamoStance", None)
    if (session._dynamo_hooked or stance_type is None
            or claims._active_session is not session):
        return
    session._dynamo_hooked = True
    replace = session._patches.replace
    # Dynamo's "force_eager" stance while the session lasts, not `config.disable`: under
    # `disable` dynamo's frame callback marks each code object it meets SKIP for good, so
    # functions compiled before the session never compiled (or recompiled) again after
    # it; with the stance nothing about a code object is remembered. The stance also
    # keeps a `fullgraph=True` function run eagerly from failing as "found no compiled
    # frames" (compile_wrapper checks that under the default stance only). A call
    # compiled for real runs under the stance the program had (_RealStance).
    replace(eval_frame, "_stance", stance_type(stance="force_eager"))
    replace(eval_frame, "_callback_from_stance",
            _deciding_callback_from_stance(session, eval_frame._callback_from_stance))
    replace(eval_frame, "_maybe_set_eval_frame",
            _rejoining_set_eval_frame(eval_frame._maybe_set_eval_frame))
    # The tracer's checks. `VariableBuilder._wrap`, not `wrap_tensor`: the builder reaches
    # `wrap_tensor` through a table built once per process (`_type_dispatch_impl`,
    # functools.cache) that holds the function the class had then, so a patch of it put in
    # after dynamo wrapped its first value (any compile before the session) is never called.
    builder = sys.modules.get("torch._dynamo.variables.builder")
    wrap = getattr(getattr(builder, "VariableBuilder", None), "_wrap", None)
    if wrap is not None:
        replace(builder.VariableBuilder, "_wrap", _checking_wrap(session, wrap))
    output_graph = sys.modules.get("torch._dynamo.output_graph")
    user_compiler = getattr(getattr(output_graph, "OutputGraph", None), "call_user_compiler", None)
    if user_compiler is not None:
        replace(output_graph.OutputGraph, "call_user_compiler",
                _checking_user_compiler(session, user_compiler))
    session._trace_checked = wrap is not None and user_compiler is not None
    # A tensor guard of code compiled for real also asks that the tensor is not virtual:
    # else a later call whose tensor (in a place the walk misses) went on the virtual
    # device meanwhile passes the guards (a CPU tensor, same dtype and shape) and runs the
    # compiled code untraced.
    guards = sys.modules.get("torch._dynamo.guards")
    tensor_match = getattr(getattr(guards, "GuardBuilder", None), "TENSOR_MATCH", None)
    if tensor_match is not None:
        replace(guards.GuardBuilder, "TENSOR_MATCH", _checking_tensor_match(session, tensor_match))


class _RealStance:
    """The program's own dynamo stance while any thread runs a call compiled for real
    (the stance is process-wide: the first such call puts it back, the last one out
    forces eager again)."""

    lock = threading.Lock()
    depth = 0
    forced: Any = None

    @classmethod
    def enter(cls, session: Session) -> None:
        eval_frame = sys.modules["torch._dynamo.eval_frame"]
        with cls.lock:
            if cls.depth == 0:
                cls.forced = eval_frame._stance
                eval_frame._stance = session.real(eval_frame, "_stance")
            cls.depth += 1

    @classmethod
    def leave(cls) -> None:
        eval_frame = sys.modules["torch._dynamo.eval_frame"]
        with cls.lock:
            cls.depth -= 1
            if cls.depth == 0:
                forced, cls.forced = cls.forced, None
                if claims._active_session is not None and forced is not None:
                    eval_frame._stance = forced  # else the patches are gone: leave it


def _compile_wrapper(session: Session,
                      original_compile: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original_compile)
    def compile(*args: Any, **kwargs: Any) -> Any:
        compiled = original_compile(*args, **kwargs)  # imports torch._dynamo
        owner = claims._active_session  # this one, or, once it ended, none (patches gone)
        hook_dynamo(owner or session)
        return compiled

    return compile


# -- the decision -------------------------------------------------------------------------

def _deciding_callback_from_stance(session: Session,
                                   original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def callback_from_stance(callback: Any) -> Any:
        if callback is None or callback is False:
            return original(callback)
        frame = sys._getframe(1)
        if frame.f_code.co_name != "compile_wrapper" or frame.f_globals.get("__name__") \
                != "torch._dynamo.eval_frame":
            # `with torch._dynamo.optimize(...)`: eager where a session's mode runs
            return None if predict_mode_here() else original(callback)
        calls = _real_calls()
        if calls:  # inside compiled code that predict mode stepped aside for
            return None if calls[-1].fell_back else original(callback)  # the program's stance
        owner = here.thread_modes.get(here.get_ident())
        if owner is None or owner._mode is None or not owner.active:
            # A thread without a session's mode: nothing of it is predicted; as before.
            return original(callback)
        reason = _why_eager(owner, frame)
        if reason is not None:
            owner._eager_compiles.seen(frame, reason)
            # Eager whatever the stance (a torch.compiler.set_stance inside the session
            # replaces the forced one): dynamo must never trace the session's mode.
            return None
        _RealStance.enter(owner)
        inner = original(callback)
        if inner is None or inner is False:  # the program's own stance runs it eagerly
            _RealStance.leave()
            return inner
        import torch

        call = _RealCall(frame, owner, torch._C._pop_torch_function_stack())  # ours: on top
        calls.append(call)
        return _RealCallback(inner, call)

    return callback_from_stance


def _why_eager(session: Session, frame: Any) -> str | None:
    """Why the call of compiled code in ``frame`` (compile_wrapper's) must run eagerly."""
    import torch

    registry = session.registry
    if registry is not None and registry.marked:  # else nothing was ever put on the device
        found = _reaches_virtual(registry, frame.f_locals)
        if found is None:
            return _UNSURE
        if found:
            return _VIRTUAL_INPUT
    installer = claims._active_session  # whose patches (and dynamo check) are in
    if installer is None or not installer._dynamo_ready:
        return _DYNAMO_LATE
    if registry is not None and registry.marked and not installer._trace_checked:
        return _UNCHECKED  # a tensor the walk missed would be compiled unseen
    n = torch._C._len_torch_function_stack()
    if n == 0 or torch._C._get_function_stack_at(n - 1) is not session._mode:
        return _MODE_NOT_ON_TOP
    return None


def _reaches_virtual(registry: Any, call: dict[str, Any]) -> bool | None:
    """Whether a virtual CUDA tensor is reachable from a compiled call (None: unsure).

    Walks the arguments, the function (its bound object, closure, defaults, and the globals
    and module attributes its code names, nested code included) and the objects' state,
    through the C-level referents (``gc.get_referents``: no user code runs), up to a
    budget. Classes and modules are not walked whole: a module only by the names the code
    uses. Where the walk cannot look (a C extension's state, a name built at run time), the
    tracer's checks (``_checking_wrap``, ``_checking_user_compiler``) see the tensors dynamo
    reads.
    """
    import torch

    tensor_type = torch.Tensor
    fn = call.get("fn")
    roots: list[Any] = [call.get("args", ()), call.get("kwargs", {}), fn]
    names: set[str] = set()
    seen: set[int] = set()
    budget = _WALK_BUDGET
    library = (os.path.dirname(torch.__file__) + os.sep, _package_dir())
    skipped = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device,
               torch.Size, type, types.CodeType, types.BuiltinFunctionType)
    while roots:
        obj = roots.pop()
        key = id(obj)
        if key in seen:
            continue
        seen.add(key)
        budget -= 1
        if budget < 0:
            return None
        cls = type(obj)
        if issubclass(cls, tensor_type):
            with torch._C.DisableTorchFunction():
                if registry.is_cuda(obj):
                    return True
            continue
        if issubclass(cls, skipped):
            continue
        if cls is types.ModuleType or issubclass(cls, types.ModuleType):
            namespace = vars(obj)
            roots.extend(namespace[n] for n in names if n in namespace)
            continue
        if cls is types.FunctionType:
            if obj.__code__.co_filename.startswith(library):
                continue  # torch's own functions, and the stand-ins (their session)
            _code_names(obj.__code__, names)
            globals_ = obj.__globals__
            roots.extend(globals_[n] for n in names if n in globals_)
            roots.extend(c.cell_contents for c in (obj.__closure__ or ()) if _filled(c))
            roots.extend(obj.__defaults__ or ())
            roots.extend((obj.__kwdefaults__ or {}).values())
            roots.extend(vars(obj).values())  # functools.wraps' __wrapped__
            continue
        roots.extend(gc.get_referents(obj))
    return False


@functools.cache
def _package_dir() -> str:
    """syncfree's own folder (the stand-ins' closures hold the session, and all of it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _code_names(code: types.CodeType, names: set[str]) -> None:
    names.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_names(const, names)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


# -- while compiling for real -------------------------------------------------------------

class _CudaInTrace(Exception):
    """Raised in dynamo when the code it traces for a real compile meets the CUDA device:
    a tensor virtually on CUDA, or a CUDA tensor in the graph."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason  # dynamo adds its hints to the message


def _checking_wrap(session: Session,
                   original: Callable[..., Any]) -> Callable[..., Any]:
    """``VariableBuilder._wrap``, through which dynamo turns each value it reads (a frame's
    argument, a global, an attribute, a closure's cell) into its tracker: a tensor virtually
    on CUDA ends the real compile (torch/_dynamo/variables/builder.py)."""

    @functools.wraps(original)
    def _wrap(self: Any, value: Any) -> Any:
        if compiling_for_real() and _is_virtual(session, value):
            raise _CudaInTrace(_VIRTUAL_INPUT)
        return original(self, value)

    return _wrap


def _is_virtual(session: Session, value: Any) -> bool:
    registry = session.registry
    return registry is not None and _registry_has(registry, value)


def _registry_has(registry: Any, value: Any) -> bool:
    import torch

    if not registry.marked or not isinstance(value, torch.Tensor):
        return False
    with torch._C.DisableTorchFunction():  # a subclass's __torch_function__ is not asked
        return registry.is_cuda(value)


def _checking_tensor_match(session: Session,
                           original: Callable[..., Any]) -> Callable[..., Any]:
    """``GuardBuilder.TENSOR_MATCH`` while compiling for real: one more guard on the tensor,
    that it is not virtually on CUDA (torch/_dynamo/guards.py). A call where it is fails
    the guards, and the frame is traced again: the tracer's check falls back to eager."""
    registry = session.registry  # the kernel's, for good: the guard must not hold the session

    @functools.wraps(original)
    def TENSOR_MATCH(self: Any, guard: Any, value: Any = None) -> None:  # noqa: N802
        original(self, guard, value)
        if compiling_for_real() and registry is not None:
            def not_virtual(tensor: Any) -> bool:
                return not _registry_has(registry, tensor)

            self.get_guard_manager(guard).add_lambda_guard(
                not_virtual, [f"syncfree: {guard.name} is not on predict mode's virtual CUDA device"],
                getattr(guard, "user_stack", None))

    return TENSOR_MATCH


def _checking_user_compiler(session: Session,
                            original: Callable[..., Any]) -> Callable[..., Any]:
    """``OutputGraph.call_user_compiler``: a graph with a CUDA tensor in it (fake tensors
    let ``torch.zeros(3, device='cuda')`` trace on a CPU build; it fails when it runs), or
    one whose inputs include a tensor virtually on CUDA (``example_inputs`` are the real
    tensors the graph will be called with; a second look, whatever path wrapped them),
    never reaches the backend of a real compile (torch/_dynamo/output_graph.py)."""

    @functools.wraps(original)
    def call_user_compiler(self: Any, gm: Any, example_inputs: Any) -> Any:
        if compiling_for_real():
            if any(_is_virtual(session, value) for value in example_inputs):
                raise _CudaInTrace(_VIRTUAL_INPUT)
            if _graph_uses_cuda(gm, example_inputs):
                raise _CudaInTrace(_CUDA_IN_CODE)
        return original(self, gm, example_inputs)

    return call_user_compiler


def _graph_uses_cuda(gm: Any, example_inputs: Any) -> bool:
    import torch
    from torch.utils._pytree import tree_leaves

    values = list(example_inputs)
    for node in gm.graph.nodes:
        values.extend(tree_leaves(node.meta.get("example_value")))
        values.extend(v for v in tree_leaves((node.args, node.kwargs))
                      if isinstance(v, (torch.device, str)))
    for value in values:
        if isinstance(value, torch.Tensor):
            value = value.device
        if isinstance(value, torch.device) and value.type == "cuda":
            return True
        if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
            return True
    return False


def _skip_frame() -> Any:
    """Run this frame and those it calls without dynamo, remembering nothing about its code
    (torch/_dynamo/types.py ConvertFrameReturn; eval_frame's SKIP strategy)."""
    from torch._dynamo.types import ConvertFrameReturn, FrameAction, FrameExecStrategy

    return ConvertFrameReturn(
        frame_exec_strategy=FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP),
        apply_to_code=False)


class _CheckedBackend:
    """The backend a cache entry of code compiled for real in predict mode is filed under.

    Dynamo's C hook reuses a frame's compiled code for a call only where the entry's
    backend is the call's (the same object, or of one type and equal:
    torch/csrc/dynamo/extra_state.cpp, backend_match). Code compiled outside predict mode
    (before the session, or between sessions) was traced without the checks, and its tensor
    guards pass for a virtual CUDA tensor (a CPU tensor with the same dtype and shape): under
    this key a real call never reuses it, and the frame is traced again, checked. Entries
    made under it are reused by later real calls (of any session) and by no call outside
    predict mode (each side compiles once)."""

    __slots__ = ("backend",)

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def __eq__(self, other: object) -> bool:
        return type(other) is _CheckedBackend and other.backend is self.backend

    def __hash__(self) -> int:
        return id(self.backend)

    def __repr__(self) -> str:
        return f"syncfree predict mode's {self.backend!r}"


class _RealCallback:
    """Dynamo's frame callback for a call compiled for real: falls back to eager at the
    frame where the tracer meets the virtual CUDA device."""

    def __init__(self, inner: Any, call: _RealCall) -> None:
        self._inner = inner
        self._call = call
        # The C eval-frame hook reads the backend off the callback, following
        # `_torchdynamo_orig_backend` to its end (torch/csrc/dynamo/eval_frame.c,
        # get_backend), and reuses a cache entry only for its backend (_CheckedBackend).
        backend = inner
        while hasattr(backend, "_torchdynamo_orig_backend"):
            backend = backend._torchdynamo_orig_backend
        self._torchdynamo_orig_backend = _CheckedBackend(backend)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, frame: Any, *args: Any, **kwargs: Any) -> Any:
        call = self._call
        if call.fell_back:
            return _skip_frame()
        try:
            return self._inner(frame, *args, **kwargs)
        except Exception as exc:
            reason = _cuda_cause(exc)
            if reason is None:
                raise
        # Nothing of this frame ran yet; what ran before it saw no virtual value.
        call.fell_back = True
        call.rejoin()
        call.session._eager_compiles.seen(call.frame, reason)
        return _skip_frame()


def _cuda_cause(exc: BaseException) -> str | None:
    """Whether tracing failed on the (virtual) CUDA device, and how to say so."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, _CudaInTrace):
            return exc.reason
        text = str(exc).lower()
        # Fake tensors on a CPU build: "PyTorch is not linked with support for cuda devices";
        # torch.cuda's lazy init: "Torch not compiled with CUDA enabled".
        if "cuda" in text and ("not linked" in text or "not compiled" in text):
            return _CUDA_IN_CODE
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _rejoining_set_eval_frame(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_maybe_set_eval_frame``, which compile_wrapper calls once as the call starts and
    once as it ends (its outermost ``finally``): at the end of a call compiled for real,
    the session's mode goes back on the stack."""

    @functools.wraps(original)
    def maybe_set_eval_frame(callback: Any) -> Any:
        result = original(callback)
        calls = getattr(_local, "calls", None)
        if calls and calls[-1].frame is sys._getframe(1):
            call = calls[-1]
            if not call.started:
                call.started = True
            else:
                calls.pop()
                call.frame = None
                call.rejoin()
        return result

    return maybe_set_eval_frame
