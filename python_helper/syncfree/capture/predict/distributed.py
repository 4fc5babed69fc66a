"""Predict mode for ``torch.distributed``: code written for NCCL and CUDA runs on gloo and
the CPU, and the syncs it would make on GPUs are predicted.

A training script for GPUs calls ``init_process_group("nccl")`` (or ``backend=None`` with a
CUDA ``device_id``), ``torch.cuda.set_device(local_rank)`` and ``DDP(model.cuda(),
device_ids=[local_rank])``. Inside a predict session (`session.PredictSession`; patches.py
calls `install` as it installs the session's stand-ins):

* process groups asked for NCCL are made with gloo, which runs the same collectives on the
  CPU tensors that stand in for CUDA ones; ``is_nccl_available()`` answers True and
  ``torch.cuda.device_count()`` answers the ranks of this node (``LOCAL_WORLD_SIZE``), so
  ``set_device(local_rank)`` and ``device_ids=[local_rank]`` are valid;
* object collectives (``all_gather_object``, ``broadcast_object_list``, ...) of such a
  group exchange their pickles through stand-in CUDA tensors, as NCCL's do through real
  ones (torch/distributed/distributed_c10d.py, ``_get_object_coll_device``): the size reads,
  copies and ``.item()`` inside them are predicted op by op, as on a GPU;
* ``barrier()`` is one predicted sync (ProcessGroupNCCL's barrier makes the CPU wait for the
  device: its work's ``wait`` synchronizes the stream), at the call or, with
  ``async_op=True``, at ``Work.wait()``;
* with ``TORCH_NCCL_BLOCKING_WAIT=1`` (read when the group is made, as NCCL does) every
  ``Work.wait()`` is a predicted sync, and with it every collective called without
  ``async_op=True`` (c10d waits on its work): blocking wait makes the CPU wait for each
  collective to finish;
* a collective on a group the script made with gloo, on stand-in CUDA tensors, is one
  predicted sync (gloo copies CUDA tensors through the host and the caller waits), at the
  call or, with ``async_op=True``, at ``Work.wait()``;
* a collective's result read on the host (``all_reduce(t)`` then ``t.item()``) is predicted
  as every read of a CUDA tensor is: the result is still a stand-in CUDA tensor.

Without blocking wait, NCCL collectives and ``Work.wait()`` order work on the GPU and do not
block the CPU: nothing is predicted for them (sync-facts.md; re-measure on GPUs, see
``tests/gpu/test_distributed_gpu.py``). DDP's input copies to ``device_ids[0]`` run on a
stand-in side stream (``_get_stream``, ``torch.accelerator.device_index``,
``Tensor.record_stream``). Not predicted: what DDP's and FSDP's C++ does on the device (the
reducer's blocking copy with ``find_unused_parameters=True``, SF906: a DDP made so is named in
a note that leaves the block unjudged), and a name bound before the session
(``from torch.distributed import barrier``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["BLOCKING_WAIT_VARIABLES", "install"]

UNUSED_PARAMETERS_NOTE = ("DistributedDataParallel(find_unused_parameters=True): its reducer copies the map of the "
                          "parameters used to the CPU in each backward (a sync on a GPU, SF906), which predict mode "
                          "does not see: the count may be short (measure it on a GPU)")

#: NCCL's blocking wait switch (the old name is still read by torch 2.x).
BLOCKING_WAIT_VARIABLES = ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT")

_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "broadcast", "reduce", "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv",
)


def _blocking_wait() -> bool:
    return any(os.environ.get(name, "0").strip() not in ("", "0") for name in BLOCKING_WAIT_VARIABLES)


def _routed_backend(backend: Any) -> tuple[Any, bool]:
    """(the backend to make the group with, whether NCCL was asked for).

    ``"nccl"`` becomes ``"gloo"``; ``"cuda:nccl,cpu:gloo"`` keeps its CPU part and takes gloo
    for CUDA; None (torch's default for both devices) becomes the same pair with gloo."""
    if backend is None:
        return "cpu:gloo,cuda:gloo", False
    text = str(backend).lower()
    if "nccl" not in text:
        return backend, False
    if ":" not in text:
        return "gloo", True
    pairs = dict(part.split(":", 1) for part in text.split(",") if ":" in part)
    only_nccl = "cpu" not in pairs
    pairs = {device: ("gloo" if name == "nccl" else name) for device, name in pairs.items()}
    pairs.setdefault("cpu", "gloo")
    return ",".join(f"{device}:{name}" for device, name in pairs.items()), only_nccl


def install(session: Any, patch: Callable[[Any, str, Any], None]) -> None:
    """Route NCCL to gloo and predict the syncs of ``torch.distributed`` for ``session``;
    ``patch(owner, name, value)`` is the session's undoable attribute replacement."""
    import torch

    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available():
        return
    c10d = dist.distributed_c10d
    cuda = torch.cuda
    # Groups made from an NCCL request, by id (ProcessGroup objects live as long as the
    # job's registry holds them): their object collectives use the CUDA device.
    nccl_groups: dict[int, Any] = {}
    state = {"blocking": False}
    barrier_works: dict[int, Any] = {}

    def record(frame: Any) -> None:
        session.record("distributed", frame)

    real_init = c10d.init_process_group

    @functools.wraps(real_init)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> None:
        routed, nccl = _routed_backend(backend)
        if _is_cuda(kwargs.get("device_id")):
            kwargs["device_id"] = None  # gloo on the CPU binds to no CUDA device
        result = real_init(routed, *args, **kwargs)
        state["blocking"] = nccl and _blocking_wait()
        if nccl:
            group = c10d._get_default_group()
            nccl_groups[id(group)] = group
        return result

    real_new_group = c10d.new_group
    new_group_signature = inspect.signature(real_new_group)

    @functools.wraps(real_new_group)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        bound = new_group_signature.bind(*args, **kwargs)
        backend = bound.arguments.get("backend")
        if backend is None:  # the default group's backend
            nccl = c10d.is_initialized() and id(c10d._get_default_group()) in nccl_groups
        else:
            bound.arguments["backend"], nccl = _routed_backend(backend)
        if _is_cuda(bound.arguments.get("device_id")):
            bound.arguments["device_id"] = None
        group = real_new_group(*bound.args, **bound.kwargs)
        if nccl and group is not None:
            nccl_groups[id(group)] = group
        return group

    real_object_device = c10d._get_object_coll_device

    @functools.wraps(real_object_device)
    def _get_object_coll_device(group: Any = None) -> str:
        chosen = group or c10d._get_default_group()
        if id(chosen) in nccl_groups:
            return "cuda"  # NCCL's object collectives go through CUDA tensors
        return real_object_device(group)

    real_barrier = c10d.barrier
    barrier_signature = inspect.signature(real_barrier)

    @functools.wraps(real_barrier)
    def barrier(*args: Any, **kwargs: Any) -> Any:
        group = barrier_signature.bind(*args, **kwargs).arguments.get("group")
        work = real_barrier(*args, **kwargs)
        if _in_nccl_group(c10d, nccl_groups, group) and not state["blocking"]:
            # (With blocking wait, the wait inside barrier() is recorded by the wait stand-in.)
            if work is None:
                record(sys._getframe(1))
            else:
                barrier_works[id(work)] = work  # the CPU waits at work.wait()
        return work

    work_type = c10d.Work
    real_wait = work_type.wait

    gloo_works: dict[int, Any] = {}  # async gloo-on-CUDA works: the caller waits at wait()

    @functools.wraps(real_wait)
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_wait(self, *args, **kwargs)
        if (barrier_works.pop(id(self), None) is not None or gloo_works.pop(id(self), None) is not None
                or state["blocking"]):
            record(sys._getframe(1))
        return result

    patch(c10d, "init_process_group", init_process_group)
    patch(dist, "init_process_group", init_process_group)
    patch(c10d, "new_group", new_group)
    patch(dist, "new_group", new_group)
    patch(c10d, "_get_object_coll_device", _get_object_coll_device)
    patch(c10d, "barrier", barrier)
    patch(dist, "barrier", barrier)
    patch(work_type, "wait", wait)
    patch(c10d, "is_nccl_available", lambda: True)
    patch(dist, "is_nccl_available", lambda: True)
    for name in _COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is not None:
            wrapper = _collective(torch, original, session, c10d, nccl_groups, gloo_works, record)
            patch(c10d, name, wrapper)
            if getattr(dist, name, None) is original:
                patch(dist, name, wrapper)
    # DDP with find_unused_parameters=True: its reducer's copy of the used-parameter map to the host in each backward
    # (SF906) is C++ predict mode does not see. A job that made it passed as "0 syncs": said, and not judged.
    ddp_class = getattr(torch.nn.parallel, "DistributedDataParallel", None)
    real_ddp_init = getattr(ddp_class, "__init__", None)
    if real_ddp_init is not None:
        @functools.wraps(real_ddp_init)
        def ddp_init(module: Any, *args: Any, **kwargs: Any) -> None:
            real_ddp_init(module, *args, **kwargs)
            recorder = getattr(session, "recorder", None)
            if getattr(module, "find_unused_parameters", False) and recorder is not None:
                from ..notes import Uncounted

                recorder.note(Uncounted(UNUSED_PARAMETERS_NOTE))

        patch(ddp_class, "__init__", ddp_init)
    # DDP copies its inputs to device_ids[0] on a side stream (torch/distributed/utils.py,
    # _recursive_to -> torch/nn/parallel/_functions.py, _get_stream), made with torch.Stream,
    # which needs a real device: a stand-in stream instead.
    import torch.nn.parallel._functions as parallel_functions

    real_get_stream = parallel_functions._get_stream

    @functools.wraps(real_get_stream)
    def _get_stream(device: Any) -> Any:
        if getattr(device, "type", None) == "cuda":
            return session.stream_type(device)
        return real_get_stream(device)

    patch(parallel_functions, "_get_stream", _get_stream)
    real_record_stream = torch.Tensor.record_stream

    @functools.wraps(real_record_stream)
    def record_stream(self: Any, stream: Any) -> None:
        # ... and records the copy on the current stream: a stand-in stream, which torch's
        # argument parser rejects before any torch function mode could see the call.
        if isinstance(stream, session.stream_type):
            return None
        return real_record_stream(self, stream)

    patch(torch.Tensor, "record_stream", record_stream)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "device_index"):
        # ... and switches to that device around the copy (one stand-in device).
        patch(accelerator, "device_index", _DeviceIndex)
    local_world = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local_world.isdigit() and int(local_world) > 1:
        from .here import per_thread

        # device_ids=[local_rank] and set_device(local_rank) name a device of this node.
        for owner in (cuda, getattr(torch, "accelerator", None)):
            if owner is not None and hasattr(owner, "device_count"):
                real_count = session.real(owner, "device_count")
                patch(owner, "device_count", per_thread(lambda: int(local_world), real_count))


def _collective(torch: Any, original: Callable[..., Any], session: Any, c10d: Any,
                nccl_groups: dict[int, Any], gloo_works: dict[int, Any],
                record: Callable[[Any], None]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        # What a collective does is C++ (NCCL's kernels on the GPU's stream, gloo's here):
        # nothing for the op table, which would call it unmeasured, and no tensor
        # operation inside that the mode should see.
        with torch._C.DisableTorchFunction():
            work = original(*args, **kwargs)
            gloo_on_cuda = _gloo_on_cuda(session, c10d, nccl_groups, signature, args, kwargs)
        if gloo_on_cuda:
            # A group the script itself made with gloo, on (stand-in) CUDA tensors: gloo
            # copies through the host and the caller waits (explicit_distributed.py sees
            # the same on a GPU), at the call or at wait().
            if gloo_on_cuda == "async":
                gloo_works[id(work)] = work
            else:
                record(sys._getframe(1))
        # With blocking wait, the sync is the Work.wait() that c10d calls for a collective
        # without async_op (distributed_c10d.py, e.g. all_reduce): the wait stand-in records it.
        return work

    return collective


def _gloo_on_cuda(session: Any, c10d: Any, nccl_groups: dict[int, Any], signature: Any,
                  args: tuple, kwargs: dict) -> str | None:
    """``"sync"``/``"async"`` for a collective on a gloo group (not one routed from NCCL)
    with stand-in CUDA tensors; None otherwise."""
    try:
        arguments = signature.bind(*args, **kwargs).arguments
    except TypeError:
        return None
    group = arguments.get("group")
    if _in_nccl_group(c10d, nccl_groups, group):
        return None
    try:
        if c10d.get_backend(group) != "gloo":
            return None
    except (RuntimeError, ValueError):
        return None
    registry = session.registry
    tensors = [v for value in arguments.values()
               for v in (value if isinstance(value, (list, tuple)) else (value,))]
    if not any(registry is not None and _is_tensor(t) and registry.is_cuda(t) for t in tensors[:64]):
        return None
    return "async" if arguments.get("async_op") else "sync"


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _in_nccl_group(c10d: Any, nccl_groups: dict[int, Any], group: Any) -> bool:
    if group is None or group is getattr(c10d.GroupMember, "WORLD", None):
        group = c10d._get_default_group() if c10d.is_initialized() else None
    return group is not None and id(group) in nccl_groups


class _DeviceIndex(contextlib.AbstractContextManager):
    """``torch.accelerator.device_index(i)``: there is one stand-in device."""

    def __init__(self, device: Any = None) -> None:
        self.device = device

    def __exit__(self, *exc: Any) -> None:
        return None


def _is_cuda(device: Any) -> bool:
    if device is None:
        return False
    if isinstance(device, int):
        return True  # an index names a CUDA device
    return str(device).startswith("cuda")
