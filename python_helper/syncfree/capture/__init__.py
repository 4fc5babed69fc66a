"""The detection engine: run code and record its host-device syncs (no IPython here).

`SyncRecorder` is the entry point; `SyncSite` is what it aggregates syncs into.
"""

from .recorder import MODES, SYNC_MESSAGE, SyncRecorder
from .sites import KINDS, SyncSite, kind_label

__all__ = ["KINDS", "MODES", "SYNC_MESSAGE", "SyncRecorder", "SyncSite", "kind_label"]
