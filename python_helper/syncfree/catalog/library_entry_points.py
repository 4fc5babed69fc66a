"""Library functions whose syncs a catalog rule explains as a whole.

A sync inside library code is found at its innermost call (``found_inf.item()`` inside
``GradScaler.step``, ``t.cuda()`` inside ``Module._apply``, ``bool(valid.all())`` inside
``Distribution.__init__``). What the user's line called is the function to change, and
its rule says how: the runtime attribution (``syncfree.capture.sites.attribute``) walks the
library frames between the user's line and the sync, outermost first, and the first frame
listed here names the rule of the site.

Each entry: a fragment of the file path (``/``-separated, from the ``torch/`` folder on), the
function's qualified name (``co_qualname``; None for any function of that file or folder),
the rule code. Only torch's own files match (a ``/torch/`` folder in the path).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import FrameType

ENTRY_POINTS: tuple[tuple[str, str | None, str], ...] = (
    # GradScaler.step reads found_inf with .item() (torch/amp/grad_scaler.py, _maybe_opt_step);
    # torch.cuda.amp.GradScaler subclasses it without a step of its own.
    ("torch/amp/grad_scaler.py", "GradScaler.step", "SF701"),
    # Module.to/.cuda copy each parameter and buffer (Module._apply): one sync per tensor.
    ("torch/nn/modules/module.py", "Module.to", "SF303"),
    ("torch/nn/modules/module.py", "Module.cuda", "SF303"),
    # clip_grad_norm_ syncs only with error_if_nonfinite=True (torch/nn/utils/clip_grad.py).
    ("torch/nn/utils/clip_grad.py", "clip_grad_norm_", "SF702"),
    ("torch/nn/utils/clip_grad.py", "_clip_grads_with_norm_", "SF702"),
    # Constructors check their arguments' constraints on the CPU (validate_args); sample()
    # of Normal-like distributions calls torch.normal with a tensor std, which checks it.
    ("torch/distributions/", None, "SF706"),
    # Object collectives pickle into byte tensors and read sizes and bytes back on the host
    # (torch/distributed/distributed_c10d.py, _object_to_tensor/_tensor_to_object); barrier's
    # wait synchronizes the device.
    *(("torch/distributed/distributed_c10d.py", name, "SF903") for name in (
        "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
        "send_object_list", "recv_object_list")),
    ("torch/distributed/distributed_c10d.py", "barrier", "SF902"),
)


def _matches(path: str, qualname: str) -> str | None:
    for fragment, name, rule in ENTRY_POINTS:
        # "/torch/...": torch's own files, not lightning/pytorch/... that merely end in "torch"
        if "/" + fragment in path and (name is None or name == qualname):
            return rule
    return None


def rule_for_frames(library: Sequence[FrameType]) -> str | None:
    """The rule of the outermost listed library frame; ``library`` is inner -> outer."""
    for frame in reversed(library):
        code = frame.f_code
        path = code.co_filename.replace("\\", "/")
        if "/torch/" not in path:
            continue
        rule = _matches(path, getattr(code, "co_qualname", code.co_name))
        if rule is not None:
            return rule
    return None


# Torch functions whose syncs the op table predicts (kind "library") and that a rule explains,
# by the name the line calls them with (`torch.linalg.inv(a)`, `a.narrow(0, start, n)`): used
# when the static pass found nothing at the line (the argument's type is not known there).
CALLEE_RULES: dict[str, str] = {
    **{name: "SF704" for name in (
        "inv", "solve", "cholesky", "eig", "eigvals", "eigh", "eigvalsh", "lstsq", "lu_factor",
        "ldl_factor", "pinv", "pinverse", "matrix_rank", "svdvals", "cond", "matrix_power",
        "tensorinv", "tensorsolve", "cholesky_inverse", "cholesky_solve")},
    "narrow": "SF705", "linspace": "SF705", "logspace": "SF705",
    "normal": "SF706",
}


def rule_for_callee(name: str | None) -> str | None:
    """The rule of a table-predicted sync made by a call of ``name`` from the user's line."""
    return CALLEE_RULES.get(name) if name else None
