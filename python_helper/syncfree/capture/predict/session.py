"""Predict mode's session: runs a block of code with CPU tensors standing in for CUDA ones
and tells its recorder each sync a GPU would make.

Entering installs the patches (patches.py; the first session in, claims.py) and pushes the
thread's mode (mode.py); every change is undone, in reverse, on every exit path, even one
cut short by an interrupt (capture/undo.py, capture/interrupts.py).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from .. import dispatch, interrupts
from ..undo import Undo
from . import cuda_api, patches
from .claims import (
    _claims,
    claim_thread_mode,
    first_session_here,
    hold_patches,
    release_claim,
    release_patches,
    release_thread_mode,
)
from .compiles import EagerCompiles
from .here import get_ident
from .mode import ModeRemoval, new_predict_mode
from .patches import Patches
from .registry import VirtualCudaRegistry, kernel_registry
from .standins import StreamStandIn
from .torchscript import UnseenTorchScript


class PredictSession:
    """Run a block of code with CPU tensors standing in for CUDA ones.

    ``recorder.record_sync(frame, kind, predicted=True)`` is called once per predicted
    sync event, on the recorder that owns the calling thread or task (dispatch.py; without
    one, the recorder of this thread's first session). Sessions in different threads run
    side by side, each with its own mode over the one set of patches; a session entered in
    a thread that already runs one is inert (that thread's mode sees its calls; should
    the outer one end first, the mode passes to it).
    """

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.recorded = 0  # the syncs `record` was told, whoever's (calls.py compares it across a call)
        self.registry: VirtualCudaRegistry | None = None
        self.active = False
        self.event_type: type | None = None
        self.stream_type: type | None = None
        self._patches = Patches()
        self._undo: contextlib.ExitStack | None = None
        self._mode: Any = None
        self._default_stream: StreamStandIn | None = None
        self._dynamo_hooked = False
        self._dynamo_ready = False  # compiles.prepare_dynamo
        self._trace_checked = False  # compiles.hook_dynamo: the tracer's checks are in
        self._eager_compiles = EagerCompiles(self)
        self._unseen_torchscript = UnseenTorchScript(self)
        self._marked_before = 0
        self._thread = threading.get_ident()

    @property
    def cuda_tensors_created(self) -> int:
        """How many tensors (storages) were put on the virtual CUDA device so far."""
        return self.registry.marked - self._marked_before if self.registry is not None else 0

    def __enter__(self) -> PredictSession:
        import torch  # noqa: F401  (imported lazily: the package must import without torch)

        # Each undo step is pushed before the change it undoes and is idempotent, so an
        # interrupt at any point of enter or exit leaves nothing behind (undo.py).
        undo = self._undo = Undo()
        try:
            # No lock held across lines (an interrupt could leave it held): a claim list
            # whose first entry is the active session; list.append is atomic.
            undo.push(interrupts.release, self)  # a Ctrl-C is raised outside (interrupts.py)
            interrupts.hold(self)
            undo.push(release_claim, self)
            _claims.append(self)
            self._thread = get_ident()
            # One registry for the kernel's life: a tensor put on the stand-in device by
            # an earlier predicted cell is still "on CUDA" in the next one, as it would be
            # on a GPU. It holds weak references only.
            self.registry = kernel_registry()
            self._marked_before = self.registry.marked
            # Each entry notes its own compiled calls run eagerly (compiles.py), whichever
            # session installed the patches.
            self._eager_compiles = EagerCompiles(self)
            undo.push(self._eager_compiles.note)
            self._unseen_torchscript = UnseenTorchScript(self)
            undo.push(self._unseen_torchscript.note)
            undo.push(release_patches, self)
            hold_patches(self)
            undo.push(release_thread_mode, self)
            if not claim_thread_mode(self):
                return self  # inert: this thread's mode sees its calls
            mode = self._mode = new_predict_mode(self)
            undo.push(ModeRemoval(mode))
            mode.__enter__()
            self.active = True
            return self
        except BaseException:
            try:
                self.close()
            finally:
                self.close()  # again, should a second interrupt have cut the first short
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        finally:
            self.close()  # a no-op unless an interrupt escaped the first

    def close(self) -> None:
        """Undo everything the session changed (idempotent; completes when interrupted)."""
        self.active = False
        undo = self._undo
        if undo is not None:
            undo.close()
            self._undo = None

    def real(self, owner: Any, name: str) -> Any:
        """The object ``owner.name`` was before this session patched it."""
        return self._patches.original(owner, name)

    # -- reporting ---------------------------------------------------------------------

    def record(self, kind: str, frame: Any, count: int = 1) -> None:
        self.recorded += count
        recorder = _owner()
        if recorder is None:
            # No recorder owns this thread (a session used without one, as tests do): the
            # first session of this thread; a thread without one: nobody's, counted apart. Nor
            # a watch's that counts its own context only: this is another task's sync (an asyncio
            # task made before the block, gathered beside it), which failed the block.
            session = first_session_here()
            if session is None or getattr(session.recorder, "scope", None) == "context":
                _unowned(count)
                return
            recorder = session.recorder
        for _ in range(count):
            recorder.record_sync(frame, kind, predicted=True)
        if cuda_api.DEBUG.mode:  # as torch's debug mode, set by the code, does on a GPU
            cuda_api.react_to_sync(kind, frame)

    # -- patches for what a TorchFunctionMode cannot see -------------------------------

    def _install_patches(self) -> None:
        patches.install(self)  # by the first session in (claims.py, hold_patches)


def _owner() -> Any:
    return dispatch.owner()


def _unowned(count: int) -> None:
    dispatch.unowned(count)
