"""Predict mode's checkpoints: ``torch.save`` of virtual CUDA tensors and ``torch.load``
of storages saved on CUDA (or mapped there), as on a GPU.

``torch.save`` writes each virtual CUDA storage as a CUDA one (tagged ``cuda:0``) and is
one predicted device-to-host copy per storage; ``torch.load`` without ``map_location``
puts storages saved on CUDA on the stand-in device, and ``map_location`` maps them as on
a GPU (a mapped host-to-device copy is one predicted sync per storage).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from .here import Session, user_frame


def install_saving(session: Session, patch: Callable[[Any, str, Any], None]) -> None:
    """``torch.save`` of virtual CUDA tensors: tagged "cuda:0" in the file (so torch.load
    restores them to CUDA, as a file saved on a GPU) and one device-to-host copy per
    storage. torch/serialization.py: `save` looks `_save`/`_legacy_save` up in its module
    at each call, and their persistent_id calls `location_tag` per storage."""
    import torch.serialization

    saving = _Saving(session)
    patch(torch.serialization, "location_tag", saving.location_tag_wrapper(
        torch.serialization.location_tag))
    for name in ("_save", "_legacy_save"):
        if hasattr(torch.serialization, name):
            patch(torch.serialization, name,
                  saving.save_wrapper(getattr(torch.serialization, name)))


def load_wrapper(session: Session,
                 original_load: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.load`` with storages saved on (or mapped to) CUDA put on the stand-in device."""

    @functools.wraps(original_load)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if callable(map_location):
            return original_load(f, map_location, *args, **kwargs)
        frame = user_frame()
        import torch.serialization

        def to_cpu_standing_in(storage: Any, location: str) -> Any:
            target = _mapped_location(map_location, location)
            if target.startswith("cuda"):
                session.registry.mark_storage(storage)
                if storage.nbytes():  # an empty storage's copy moves nothing
                    session.record("to_device", frame)
                return storage
            if target.startswith("cpu"):
                return storage
            return torch.serialization.default_restore_location(storage, target)

        return original_load(f, to_cpu_standing_in, *args, **kwargs)

    return load


def _mapped_location(map_location: Any, location: str) -> str:
    import torch

    if map_location is None:
        return location
    if isinstance(map_location, dict):
        return str(map_location.get(location, location))
    if isinstance(map_location, torch.device):
        return str(map_location)
    if isinstance(map_location, int) and not isinstance(map_location, bool):
        return f"cuda:{map_location}"
    return str(map_location)


class _Saving:
    """``torch.save`` of virtual CUDA tensors, as on a GPU.

    On a GPU, ``_save`` copies each CUDA storage to the host (``storage.cpu()``): one sync
    per storage, however many tensors view it (measured: 60 tensors of a state dict, 60
    syncs per checkpoint; H100, torch 2.11), and the file records ``cuda:0`` as the
    storage's location, which ``torch.load`` without ``map_location`` restores to CUDA.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.local = threading.local()  # per thread: the storages of the saves under way

    def location_tag_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        saving = self

        @functools.wraps(original)
        def location_tag(storage: Any) -> Any:
            registry = saving.session.registry
            untyped = getattr(storage, "_untyped_storage", storage)  # a TypedStorage's
            if registry is None or not registry.is_cuda_storage(untyped):
                return original(storage)
            saves = getattr(saving.local, "saves", None)
            if saves and untyped.nbytes():  # an empty storage's copy moves nothing
                saves[-1].setdefault(untyped._cdata, True)  # torch's id_map key
            return "cuda:0"

        return location_tag

    def save_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        saving = self

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            saves = saving.local.__dict__.setdefault("saves", [])
            saves.append({})
            frame = user_frame()
            try:
                result = original(*args, **kwargs)
            finally:
                storages = saves.pop()
            if storages and saving.session.active:
                saving.session.record("to_host", frame, len(storages))
            return result

        return save
