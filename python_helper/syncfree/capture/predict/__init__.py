"""Predict mode (moved here from capture/predict.py; split by job in the next commit)."""

from .session import *  # noqa: F401,F403
from .session import (  # noqa: F401
    _DEVICE_PROPERTIES,
    COMPILE_NOTE_PREFIX,
    PREDICTED_KINDS,
    UNMEASURED_RULES,
    PredictSession,
    eager_compiled_calls,
    real_cuda_available,
)
