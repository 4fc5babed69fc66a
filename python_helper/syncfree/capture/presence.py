"""Whether a CUDA device is there, asked without spoiling the program's forks.

``torch.cuda.is_available()`` asks the CUDA runtime (``cudaGetDeviceCount``), and torch then marks the process so
that its forked children cannot use CUDA ("Cannot re-initialize CUDA in forked subprocess"): a script whose parent
never touches CUDA and whose fork Pool workers do ran under python and failed under ``syncfree run`` on an H200,
because the engine choice asked that question in the parent. NVML answers it without the runtime, as torch itself
does under ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (torch/cuda/__init__.py: is_available, _device_count_nvml).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable


def cuda_present(torch: Any, is_available: Callable[[], Any]) -> bool:
    """``is_available()``, answered through NVML while the program has not initialized CUDA.

    ``is_available`` is the function to ask (torch's own, or the one a predict session or ``--syncfree-cuda``
    replaced, which answers as it was made to). Only torch's own function is answered through NVML, and it is
    still asked when NVML cannot tell (no NVML library, MIG devices)."""
    cuda = torch.cuda
    if getattr(is_available, "__module__", None) != "torch.cuda" or cuda.is_initialized():
        return bool(is_available())
    if not cuda._is_compiled():
        return False
    count = _nvml_device_count(cuda)
    if count is None:
        return bool(is_available())
    return count > 0


def cuda_available(torch: Any) -> bool:
    """Whether CUDA is really there, asked of the function a predict session replaced
    when one is active (predict.real_cuda_available), never of its stand-in."""
    # getattr: another thread may be importing predict.py right now, and a module being
    # imported is in sys.modules before its functions exist (no session can run before).
    real = getattr(sys.modules.get(__package__ + ".predict"), "real_cuda_available", None)
    if real is not None:
        return real()
    return cuda_present(torch, torch.cuda.is_available)  # never torch's runtime question: it spoils forks


def _nvml_device_count(cuda: Any) -> int | None:
    """The visible devices NVML counts (CUDA_VISIBLE_DEVICES applied), or None when NVML cannot tell."""
    count_nvml = getattr(cuda, "_device_count_nvml", None)
    if count_nvml is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Can't initialize NVML": then the runtime is asked
            count = count_nvml()
    except Exception:  # no libnvidia-ml.so.1 (OSError), or a torch whose private helper changed
        return None
    return count if isinstance(count, int) and count >= 0 else None
