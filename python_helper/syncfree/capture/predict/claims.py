"""Which predict sessions run where: the process-wide bookkeeping of the sessions entered
(any thread), the one whose patches are installed, and the session whose mode runs in each
thread.

The patches are process-wide: the first session in installs them (it is `_active_session`
until the last one is out, which restores them). Function modes are per thread: each
thread with a session runs one mode, that of its first session (`thread_modes`); a second
PredictMode stacked in one thread would see the first one's calls again. No lock is held
across lines an interrupt could cut (capture/interrupts.py holds Ctrl-C back in the
engine); one guards the bookkeeping against other threads.
"""

from __future__ import annotations

import threading

from .here import Session, get_ident, thread_modes
from .mode import ModeRemoval, new_predict_mode
from .standins import EventStandIn, StreamStandIn

_claims: list[Session] = []  # sessions entered, in order, any thread
_active_session: Session | None = None  # the one whose patches are installed
_patch_holders: list[Session] = []  # sessions relying on the patches
_lock = threading.RLock()


def release_claim(session: Session) -> None:
    with _lock:
        for i in range(len(_claims) - 1, -1, -1):
            if _claims[i] is session:
                del _claims[i]


def hold_patches(session: Session) -> None:
    """The first session in installs the patches; later ones share them (their Event and
    Stream stand-ins, default stream and patch record are the first one's)."""
    global _active_session
    with _lock:
        owner = _active_session
        if owner is None:
            _active_session = session  # before anything is patched: the release restores it
            # Stand-in classes (what torch.cuda.Event/Stream become).
            bound = {"_session": session, "__module__": "torch.cuda"}
            session.event_type = type("Event", (EventStandIn,), bound)
            session.stream_type = type("Stream", (StreamStandIn,), bound)
            session._default_stream = session.stream_type()
            _patch_holders.append(session)
            session._install_patches()
            return
        session._patches = owner._patches
        session.event_type, session.stream_type = owner.event_type, owner.stream_type
        session._default_stream = owner._default_stream
        if not any(s is session for s in _patch_holders):
            _patch_holders.append(session)


def release_patches(session: Session) -> None:
    """Idempotent: the last session out restores the patches (whoever installed them)."""
    global _active_session
    with _lock:
        for i in range(len(_patch_holders) - 1, -1, -1):
            if _patch_holders[i] is session:
                del _patch_holders[i]
        if _patch_holders:
            return
        owner = _active_session
        if owner is not None:
            owner._patches.restore()
        _active_session = None


def claim_thread_mode(session: Session) -> bool:
    """Whether ``session`` runs this thread's mode (False: the thread runs one already)."""
    with _lock:
        current = thread_modes.get(session._thread)
        if current is not None and current is not session:
            return False
        thread_modes[session._thread] = session
        return True


def release_thread_mode(session: Session) -> None:
    """Idempotent. Run after the session's mode is off the stack: when an inert session of
    this thread is still running (asyncio tasks that end out of order), its mode takes over."""
    with _lock:
        if thread_modes.get(session._thread) is not session:
            return
        del thread_modes[session._thread]
        heir = next((s for s in _claims if s._thread == session._thread and s is not session
                     and s._undo is not None and s._mode is None), None)
        if heir is None or session._thread != get_ident():
            return
        thread_modes[heir._thread] = heir
        mode = heir._mode = new_predict_mode(heir)
        heir._undo.push(ModeRemoval(mode))
        mode.__enter__()
        heir.active = True


def first_session_here() -> Session | None:
    ident = get_ident()
    for session in _claims:
        if session._thread == ident:
            return session
    return None
