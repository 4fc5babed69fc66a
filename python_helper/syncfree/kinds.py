"""What synced, in the user's words: the one list of sync kinds and their labels.

A sync site's ``kind`` (report.schema.json, ``SyncSite.kind``) is one of `KINDS`; every
catalog rule has one (`syncfree.catalog`), the recorder and the predict mode report them
(`syncfree.capture`). The labels are what people read: reports carry each site's label
(``SyncSite.label``), so the JupyterLab side never shows an internal id such as
``mask_index``. Text in backticks is code (the frontends render it as such).
"""

from __future__ import annotations

from types import MappingProxyType

#: Kind -> label, in the order the report schema lists the kinds.
KIND_LABELS = MappingProxyType({
    "item": "`.item()`",
    "python_scalar": "`float()`/`int()` of a tensor",
    "python_bool": "truth value of a tensor",
    "format": "formatting a tensor",
    "print": "printing a tensor",
    "tolist": "`.tolist()`",
    "to_host": "copy to the host",
    "to_device": "copy from pageable host memory",
    "tensor_from_python": "tensor built from Python data",
    "index": "indexing with a host index",
    "index_put": "index assignment",
    "slice_bounds": "a tensor read as an index",
    "mask_index": "boolean-mask indexing",
    "nonzero": "`nonzero`",
    "masked_select": "`masked_select`",
    "unique": "`torch.unique`",
    "repeat_interleave": "`repeat_interleave`",
    "bincount": "`bincount`",
    "histc": "`histc`",
    "one_hot": "`one_hot`",
    "allclose": "`allclose`",
    "library": "a sync inside library code",
    "explicit": "explicit synchronize",
    "stream_sync": "`Stream.synchronize()`",
    "distributed": "a `torch.distributed` call",
    "other": "a synchronizing CUDA operation",
})

#: Every sync kind.
KINDS: tuple[str, ...] = tuple(KIND_LABELS)


def kind_label(kind: str) -> str:
    """The label of a kind; an unknown kind reads as "a synchronizing CUDA operation"."""
    return KIND_LABELS.get(kind, KIND_LABELS["other"])


__all__ = ["KINDS", "KIND_LABELS", "kind_label"]
