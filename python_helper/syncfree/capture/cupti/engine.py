"""The CUPTI engine: every blocking CUDA call, whichever library makes it.

torch's sync debug mode (the default engine, recorder.py) sees only the syncs that go
through PyTorch; CuPy, Numba, a custom extension or any library that calls the CUDA
runtime or driver itself is invisible to it. NVIDIA's CUPTI callback API is called on
the thread that makes a CUDA call, at its enter and at its exit; this engine subscribes
to the calls that block the CPU (`BLOCKING_RUNTIME`, `BLOCKING_DRIVER`) and nothing else,
and records one sync per outermost blocking call of a thread:

- **One count per sync.** A runtime call runs the driver's (``cudaStreamSynchronize``
  then ``cuStreamSynchronize``: sync-facts.md); a per-thread depth counts the outermost
  blocking call only, so a call is counted once whatever layers fire.
- **Where.** At the exit callback ``sys._getframe(1)`` is the calling thread's innermost
  Python frame (the callback runs on that thread, with the GIL); the recorder attributes
  it to the user's line and classifies what synced, once per site (`SyncRecorder.record_sync`).
- **How long.** ``perf_counter`` at the outermost enter and exit: the blocked time.
- Warnings play no part, so a program's warnings handling cannot blind it.

The callback is kept to a timestamp at enter and, at exit, a frame lookup and the
recorder's dictionary update (bench/overhead.py measures it); with one layer it infers
enter from exit instead of reading cupti-python's callback data (`single_layer_callback`). CUPTI takes one subscriber
per process: when torch.profiler, Nsight Systems or another tool holds it, `CuptiBusy`
names the holder and the recorder falls back to debug mode (`CuptiEngine`).

NVIDIA's ``cupti-python`` (``pip install 'syncfree[cupti]'``) provides the bindings
(``from cupti import cupti``); its major version must match the CUDA major version that
torch was built with (``torch.version.cuda``).
"""

from __future__ import annotations

import _thread
import sys
import threading
from collections.abc import Callable, Iterable
from time import perf_counter
from types import FrameType
from typing import Any

from .. import dispatch
from ..engine import Engine

_get_ident = threading.get_ident

#: Blocking CUDA runtime calls (the names of cupti-python's ``runtime_api_trace_cbid``):
#: device, stream and event synchronize, and the synchronous copies. A name a CUPTI
#: version lacks is skipped.
BLOCKING_RUNTIME = (
    "cudaDeviceSynchronize_v3020", "cudaThreadSynchronize_v3020",
    "cudaStreamSynchronize_v3020", "cudaStreamSynchronize_ptsz_v7000",
    "cudaEventSynchronize_v3020",
    "cudaMemcpy_v3020", "cudaMemcpy_ptds_v7000",
    "cudaMemcpy2D_v3020", "cudaMemcpy2D_ptds_v7000",
    "cudaMemcpy3D_v3020", "cudaMemcpy3D_ptds_v7000",
    "cudaMemcpyToSymbol_v3020", "cudaMemcpyToSymbol_ptds_v7000",
    "cudaMemcpyFromSymbol_v3020", "cudaMemcpyFromSymbol_ptds_v7000",
    "cudaMemcpyToArray_v3020", "cudaMemcpyToArray_ptds_v7000",
    "cudaMemcpyFromArray_v3020", "cudaMemcpyFromArray_ptds_v7000",
    "cudaMemcpy2DToArray_v3020", "cudaMemcpy2DToArray_ptds_v7000",
    "cudaMemcpy2DFromArray_v3020", "cudaMemcpy2DFromArray_ptds_v7000",
)

#: Blocking CUDA driver calls (``driver_api_trace_cbid``): what Numba and other
#: driver-API users call, and what the runtime calls underneath. Device-to-device copies
#: (DtoD, AtoA, DtoA, AtoD) do not wait for the host and are left out.
BLOCKING_DRIVER = (
    "cuCtxSynchronize", "cuCtxSynchronize_v2",
    "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
    "cuEventSynchronize",
    "cuMemcpy", "cuMemcpy_v2", "cuMemcpy_ptds",
    "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds",
    "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds",
    "cuMemcpyAtoH", "cuMemcpyAtoH_v2", "cuMemcpyAtoH_v2_ptds",
    "cuMemcpyHtoA", "cuMemcpyHtoA_v2", "cuMemcpyHtoA_v2_ptds",
    "cuMemcpy2D", "cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds",
    "cuMemcpy2DUnaligned", "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds",
    "cuMemcpy3D", "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds",
)

#: The layers whose blocking calls raise a callback: "runtime", "driver" or both.
#: Every runtime call in `BLOCKING_RUNTIME` reaches one in `BLOCKING_DRIVER` (measured on
#: an H100, CUDA 13: tests/gpu/test_cupti_gpu.py checks it), so the driver layer alone sees
#: every blocking call at half the callbacks of both.
LAYERS = ("driver",)

INSTALL_HINT = "pip install 'syncfree[cupti]'"


class CuptiUnavailable(RuntimeError):
    """The CUPTI engine cannot run in this process; the message says why, in one line."""


class CuptiBusy(CuptiUnavailable):
    """Another tool holds CUPTI's one subscriber slot (torch.profiler, Nsight Systems...)."""

    def __init__(self, holder: str | None) -> None:
        self.holder = holder or None
        who = f" ({holder})" if holder else ""
        super().__init__(f"another tool holds CUPTI{who}, such as torch.profiler or Nsight "
                         "Systems")


def load_cupti():
    """cupti-python's ``cupti`` module, or `CuptiUnavailable` saying how to install it."""
    try:
        from cupti import cupti
    except ImportError as exc:
        raise CuptiUnavailable(f"cupti-python is not installed ({INSTALL_HINT}): {exc}") from None
    except Exception as exc:  # its CUDA libraries failed to load
        raise CuptiUnavailable(f"cupti-python could not load ({type(exc).__name__}: {exc})") from None
    return cupti


def blocking_callback(record: Callable[[FrameType | None, float], None], enter_site: int = 0,
                      on_error: Callable[[BaseException], None] | None = None):
    """The CUPTI callback: ``record(frame, blocked_s)`` once per outermost blocking call
    of a thread, with the calling thread's innermost Python frame.

    ``enter_site`` is CUPTI's ``API_ENTER`` (0). An exit whose enter came before the
    subscription (a call already waiting when the watch began) is not counted. A
    KeyboardInterrupt that lands in the callback (Ctrl-C during a long wait is handled at
    the first bytecode after it, which is here) is raised again in the main thread:
    cupti-python would otherwise report it as unraisable and drop it.
    """
    depths: dict[int, int] = {}
    starts: dict[int, float] = {}
    clock = perf_counter
    ident = threading.get_ident
    getframe = sys._getframe

    def on_blocking_call(userdata, domain, cbid, data):
        tid = ident()
        depth = depths.get(tid, 0)
        if data.callback_site == enter_site:
            depths[tid] = depth + 1
            if not depth:
                starts[tid] = clock()
        elif depth == 1:
            blocked = clock() - starts[tid]
            try:
                # Depth stays 1 while recording: a CUDA call made by the recorder itself
                # (first sync of a site) is nested, never counted.
                try:
                    frame = getframe(1)
                except ValueError:  # a thread that never ran Python code (a C++ worker)
                    frame = None
                record(frame, blocked)
            except KeyboardInterrupt:
                _thread.interrupt_main()
            except Exception as exc:  # never into CUDA's caller
                if on_error is not None:
                    on_error(exc)
            finally:
                depths[tid] = 0
        elif depth:
            depths[tid] = depth - 1

    return on_blocking_call


#: A single-layer callback asks CUPTI which side of a call an event is (enter or exit) on a
#: thread's first events and then on one event in `CHECK_EVERY`; in between it infers it.
CHECK_FIRST = 4
CHECK_EVERY = 64


def single_layer_callback(record: Callable[[FrameType | None, float], None], enter_site: int = 0,
                          on_error: Callable[[BaseException], None] | None = None):
    """`blocking_callback` for one layer (`LAYERS`, the driver's): the same counts, frames
    and blocked times, without reading ``data.callback_site`` at every event.

    Reading a field of cupti-python's callback data costs more than the rest of the
    callback (about 4 us on an H100, bench/cupti_layers.py part 2). Within one layer the
    blocking calls of a thread never nest, so its events alternate enter, exit, enter...
    and the side of an event follows from the one before. CUPTI is asked on a thread's
    first `CHECK_FIRST` events, which sets the alternation right for a thread that was
    already inside a call when the subscription began (that exit is not counted, as in
    `blocking_callback`), and on one event in `CHECK_EVERY` after that, so that a thread
    out of step (one that entered a call while its callback was being enabled) is put
    right within a few syncs; out of step, counts and frames stay right (each inferred
    exit is a real enter, at the same Python frame as the call's exit) and only that
    thread's blocked times are wrong. CUDA calls made while recording (a site's first
    sync) are ignored, enter and exit.
    """
    # Per thread: [phase (0 between calls, 1 inside one, 2 recording), enter time, events].
    states: dict[int, list] = {}
    clock = perf_counter
    ident = threading.get_ident
    getframe = sys._getframe

    def on_blocking_call(userdata, domain, cbid, data):
        state = states.get(ident())
        if state is None:
            state = states[ident()] = [0, 0.0, 0]
        phase = state[0]
        if phase == 2:
            return
        seen = state[2] = state[2] + 1
        if seen <= CHECK_FIRST or not seen % CHECK_EVERY:
            if data.callback_site == enter_site:
                phase = 0
            elif not phase:  # an exit whose enter came before the subscription
                return
            else:
                phase = 1
        if not phase:
            state[0] = 1
            state[1] = clock()
            return
        blocked = clock() - state[1]
        state[0] = 2
        try:
            try:
                frame = getframe(1)
            except ValueError:  # a thread that never ran Python code (a C++ worker)
                frame = None
            record(frame, blocked)
        except KeyboardInterrupt:
            _thread.interrupt_main()
        except Exception as exc:  # never into CUDA's caller
            if on_error is not None:
                on_error(exc)
        finally:
            state[0] = 0

    return on_blocking_call


def callback_ids(cupti, layers: Iterable[str] = LAYERS) -> list[tuple[int, int]]:
    """(domain, cbid) of every blocking call of ``layers`` that this CUPTI knows."""
    ids = []
    if "runtime" in layers:
        domain = int(cupti.CallbackDomain.RUNTIME_API)
        names = cupti.runtime_api_trace_cbid
        ids += [(domain, int(getattr(names, n))) for n in BLOCKING_RUNTIME if hasattr(names, n)]
    if "driver" in layers:
        domain = int(cupti.CallbackDomain.DRIVER_API)
        names = cupti.driver_api_trace_cbid
        ids += [(domain, int(getattr(names, n))) for n in BLOCKING_DRIVER if hasattr(names, n)]
    return ids


class CuptiSession:
    """Subscribes `blocking_callback` to CUPTI for the blocking calls, until `stop`.

    ``api`` is cupti-python's ``cupti`` module (loaded when None). `start` raises
    `CuptiBusy` when another subscriber holds CUPTI and `CuptiUnavailable` for any other
    failure; `stop` is idempotent and safe after a partial start.
    """

    def __init__(self, record: Callable[[FrameType | None, float], None], *, api: Any = None,
                 layers: Iterable[str] = LAYERS,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self._record = record
        self._api = api
        self._layers = tuple(layers)
        self._on_error = on_error
        self._handle: Any = None

    def start(self) -> None:
        cupti = self._api if self._api is not None else load_cupti()
        self._api = cupti
        make = single_layer_callback if len(set(self._layers)) == 1 else blocking_callback
        callback = make(self._record, int(cupti.ApiCallbackSite.API_ENTER), self._on_error)
        handle = self._subscribe(cupti, callback)
        self._handle = handle  # before enabling: stop() unsubscribes whatever follows
        try:
            for domain, cbid in callback_ids(cupti, self._layers):
                cupti.enable_callback(1, handle, domain, cbid)
        except cupti.cuptiError as exc:
            self.stop()
            raise CuptiUnavailable(f"CUPTI refused a callback ({_result_name(cupti, exc)})") from None

    @staticmethod
    def _subscribe(cupti, callback) -> Any:
        params = None
        try:
            if hasattr(cupti, "subscribe_v2"):  # names the subscriber, and tells us who holds it
                params = cupti.SubscriberParams()
                params.struct_size = cupti.SUBSCRIBER_PARAMS_SIZE
                params.subscriber_name = "syncfree"
                return cupti.subscribe_v2(callback, None, params.ptr)
            return cupti.subscribe(callback, None)
        except cupti.cuptiError as exc:
            if getattr(exc, "status", None) == cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
                holder = None
                if params is not None:
                    try:
                        holder = params.old_subscriber_name or None
                    except Exception:  # an older CUPTI leaves it unset
                        holder = None
                raise CuptiBusy(holder) from None
            raise CuptiUnavailable(f"CUPTI could not subscribe ({_result_name(cupti, exc)})") from None

    def stop(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                self._api.unsubscribe(handle)
            except Exception:  # CUDA already torn down (interpreter exit)
                pass

    @property
    def running(self) -> bool:
        return self._handle is not None


def _explicit_calls(torch) -> tuple[dict[int, str], list]:
    """id() of the code objects of torch's explicit synchronize functions -> the kind debug
    mode gives them (explicit.py wraps the same functions), and those code objects, kept
    alive so that no id is reused. Keyed by id: hashing a code object hashes its constants,
    on every blocking call."""
    kinds, codes = {}, []
    for owner, name in ((torch.cuda, "synchronize"), (torch.cuda.Event, "synchronize"),
                        (getattr(torch, "accelerator", None), "synchronize")):
        code = getattr(getattr(owner, name, None), "__code__", None)
        if code is not None:
            kinds[id(code)] = "explicit"
            codes.append(code)
    return kinds, codes


def _result_name(cupti, exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    try:
        return cupti.Result(status).name
    except Exception:
        return str(exc) or type(exc).__name__


class CuptiEngine(Engine):
    """The engine of a recorder whose syncs come from CUPTI instead of torch's debug mode.

    Warn mode only (error mode needs torch to raise before the sync, which a callback
    cannot do). CUPTI has one subscriber per process, so one subscription serves every
    CUPTI recorder running (`_acquire`); a blocking call goes to the recorder that owns
    the calling thread or task (dispatch.py), as a debug-mode warning does
    (`SyncRecorder.record_blocking`). When CUPTI cannot be had at start (busy, not
    installed), the recorder says so in a note and runs debug mode instead (``fallback``,
    the debug-mode engine, given by the recorder's maker); the recorder's ``engine`` then
    reads ``"debug"``.
    """

    name = "cupti"
    sees = "every blocking CUDA call, whichever library makes it (CUPTI's callbacks)"

    def __init__(self, fallback: Engine, cupti_api: Any = None) -> None:
        self.fallback = fallback
        self._cupti_api = cupti_api
        # id() of the code objects of torch's explicit synchronize functions -> "explicit" (`_explicit_calls`)
        self.explicit_calls: dict[int, str] = {}
        self._explicit_codes: list = []

    def check_mode(self, mode: str) -> None:
        if mode != "warn":
            raise ValueError(f"the CUPTI engine records warn mode only, not {mode!r}")

    def start(self, recorder: Any, torch: Any, undo: Any) -> None:
        undo.push(_release, recorder)
        try:
            _acquire(recorder, self._cupti_api)
        except CuptiUnavailable as exc:
            recorder.engine = "debug"
            recorder.note(f"CUPTI engine unavailable: {exc}; debug mode used instead (it sees "
                          "only the syncs that go through torch)")
            self.fallback.start(recorder, torch, undo)
            return
        self.explicit_calls, self._explicit_codes = _explicit_calls(torch)
        recorder.cuda = True
        # CUPTI sees the backward pass's syncs on autograd's device thread, C++ nodes
        # included: the recorder whose context called backward owns them, attributed
        # through that call (dispatch.backward_caller), as debug mode replays them.
        undo.push(dispatch.detach_backward, recorder)
        dispatch.attach_backward(recorder)


# One subscription for every CUPTI recorder running (CUPTI allows one per process).
_users: list[Any] = []  # the recorders whose engine is CUPTI
_session: list[CuptiSession] = []


def _acquire(recorder: Any, api: Any = None) -> None:
    if not _session:
        context_owner, process, unowned = dispatch.context_owner, dispatch.process_recorders, dispatch.unowned
        backward, backward_owner = dispatch.backward_passes, dispatch.backward_owner
        backward_caller = dispatch.backward_caller

        def deliver(frame, blocked):
            # dispatch.owner(), inlined: this runs once per blocking call.
            target = context_owner()
            if target is None:
                target = (backward_owner() if backward else None) or (process[-1] if process else None)
            if target is None:
                unowned()
            elif target.engine == "cupti":
                target.record_blocking(frame, blocked, backward_caller() if backward else None)
            # else: a debug-mode recorder owns this thread (or a CUPTI one fallen back to debug mode); it sees
            # torch's syncs itself

        def failed(exc):
            for user in _users:
                user.note(f"syncfree's CUPTI callback failed ({type(exc).__name__}: {exc}); "
                          "some blocking calls may be missing")

        session = CuptiSession(deliver, api=api, on_error=failed)
        session.start()  # CuptiBusy / CuptiUnavailable: nothing to undo
        _session.append(session)
    _users.append(recorder)


def _release(recorder: Any) -> None:
    """Idempotent: the last user out unsubscribes."""
    for i in range(len(_users) - 1, -1, -1):
        if _users[i] is recorder:
            del _users[i]
            break
    if not _users and _session:
        _session.pop().stop()


__all__ = ["BLOCKING_DRIVER", "BLOCKING_RUNTIME", "LAYERS", "CuptiBusy", "CuptiEngine",
           "CuptiSession", "CuptiUnavailable", "blocking_callback", "callback_ids", "load_cupti",
           "single_layer_callback"]
