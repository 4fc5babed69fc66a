"""The CUPTI engine: every blocking CUDA call, whichever library makes it (engine.py).

It imports only the shared parts of capture/ (dispatch.py: whose sync it is; engine.py: the seam), never another
engine: its fallback, the debug-mode engine, is handed to it by the recorder's maker.
"""

from .engine import (
    BLOCKING_DRIVER,
    BLOCKING_RUNTIME,
    INSTALL_HINT,
    LAYERS,
    CuptiBusy,
    CuptiEngine,
    CuptiSession,
    CuptiUnavailable,
    blocking_callback,
    callback_ids,
    load_cupti,
    single_layer_callback,
)

__all__ = ["BLOCKING_DRIVER", "BLOCKING_RUNTIME", "INSTALL_HINT", "LAYERS", "CuptiBusy", "CuptiEngine",
           "CuptiSession", "CuptiUnavailable", "blocking_callback", "callback_ids", "load_cupti",
           "single_layer_callback"]
