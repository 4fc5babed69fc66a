"""The measured op table: which torch ops synchronize on CUDA, per torch version.

The table is written by ``scripts/measure_optable.py`` on a machine with a CUDA GPU: it
sweeps PyTorch's OpInfo database (``op_db``), runs the first sample inputs of every entry
on CUDA under ``torch.cuda.set_sync_debug_mode('warn')`` and counts the sync warnings of
each call. Files live in ``syncfree/data/optable-torch<major.minor>-cuda.json`` and record
the torch version and the device they were measured on.

Predict mode asks :func:`predicted_syncs` about every torch call that its own handlers do
not cover: the answer is the number of syncs the call would make on a GPU, looked up by the
function's name and the *signature* of its arguments (tensor rank class and dtype kind,
Python scalar types, keyword values), so that an op whose sync depends on its arguments
(``narrow`` with a tensor start versus a Python int, ``check_errors``, ``validate_args``)
is answered by the samples that look like the call.

Torch is imported lazily; nothing here imports IPython.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_FILE_RE = re.compile(r"optable-torch(\d+)\.(\d+)-cuda\.json$")

# Calls that never sync and have no OpInfo entry (metadata, views of the tensor object,
# autograd plumbing): predict mode neither counts them nor calls them unmeasured.
NO_SYNC_NAMES = frozenset({
    "size", "dim", "ndimension", "stride", "numel", "nelement", "element_size",
    "is_contiguous", "is_floating_point", "is_complex", "is_signed", "storage_offset",
    "data_ptr", "untyped_storage", "storage", "requires_grad_", "retain_grad", "detach",
    "detach_", "backward", "register_hook", "contiguous", "__len__", "__iter__", "__hash__",
    "__eq__", "__ne__", "__setstate__", "__reduce_ex__", "__deepcopy__", "_is_view",
    "is_shared", "share_memory_", "clone", "view", "view_as", "reshape", "reshape_as",
    "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "permute", "transpose", "t",
    "__get__", "__set__", "type_as", "float", "double", "half", "bfloat16", "long", "int",
    "bool", "short", "byte", "char", "new_zeros", "new_ones", "new_empty", "new_full",
    "zero_", "fill_", "normal_", "uniform_", "random_", "bernoulli_", "copy_", "set_",
    "apply_", "map_", "dim_order", "is_set_to", "__torch_function__", "as_subclass",
    "_make_subclass", "__format__", "__repr__", "__array__", "__dlpack__", "numpy",
    "grad_fn", "is_leaf", "get_device", "is_pinned", "pin_memory", "record_stream",
    "_has_compatible_shallow_copy_type",
})

# Families OpInfo's op_db does not cover, multi-tensor kernels that never read a value on
# the host: `torch._foreach_*` (optimizer steps, clip_grad_norm_: `_foreach_norm` and
# `_foreach_mul_` measured 0 in the clip_grad_norm_ pattern, H200, torch 2.11) and the AMP
# kernels `_amp_foreach_non_finite_check_and_unscale_`/`_amp_update_scale_`, which exist to
# keep found_inf on the device (GradScaler.step with a fused optimizer measured 0). Neither
# counted nor called unmeasured.
NO_SYNC_PREFIXES = ("_foreach_", "_amp_")

# Internal ops measured under another name: `torch._is_all_true(t)` is `t.all()` for a bool
# tensor (torch/distributions/constraints.py checks with it). `torch.matrix_power` (and the
# method) is `linalg.matrix_power`; `torch.nuclear_norm(A)` sums `linalg.svdvals(A)`: they were
# answered "unmeasured, 0" where a GPU syncs as those do.
ALIASES = {"_is_all_true": "all", "_is_any_true": "any", "matrix_power": "linalg_matrix_power",
           "nuclear_norm": "linalg_svdvals"}


# --------------------------------------------------------------------------- signatures

def _kind(dtype: Any) -> str:
    if dtype.is_complex:
        return "c"
    if dtype.is_floating_point:
        return "f"
    if str(dtype) == "torch.bool":
        return "b"
    return "i"


def describe(value: Any, depth: int = 0) -> str:
    """A short, device-free description of one argument.

    Tensors: ``T0`` (0-d), ``T1``, ``Tn`` (2-d or more) with the dtype kind (b/i/f/c);
    Python scalars by type (bools by value); sequences by the set of their items'
    descriptions; other values by type name or their string for dtypes/devices/strings.
    """
    import torch

    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            return f"S{_kind(value.dtype)}"
        nd = value.dim()
        empty = "e" if value.numel() == 0 else ""
        return f"T{nd if nd < 2 else 'n'}{_kind(value.dtype)}{empty}"
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return "int-" if value < 0 else "int"  # negative: matrix_power's inverse, one_hot's -1
    if isinstance(value, float):
        return "float"
    if isinstance(value, complex):
        return "complex"
    if isinstance(value, str):
        return "s:" + value[:24]
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return "dtype"
    if isinstance(value, torch.device):
        return "device"
    if isinstance(value, (list, tuple, torch.Size)):
        if depth > 1:
            return "seq"
        items = sorted({describe(v, depth + 1) for v in value})
        return "[" + ",".join(items[:6]) + "]"
    if isinstance(value, slice):
        return "slice"
    if value is Ellipsis:
        return "..."
    if callable(value):
        return "fn"
    return type(value).__name__


def signature(args: tuple, kwargs: dict | None) -> str:
    """The signature of one call: positional descriptions, then sorted keyword ones."""
    pos = "|".join(describe(a) for a in args)
    kw = ",".join(f"{k}={describe(kwargs[k])}" for k in sorted(kwargs or {}))
    return pos + ";" + kw


def fingerprint(args: tuple, kwargs: dict | None) -> str:
    """Which sample this is, beyond its signature: tensor shapes and dtypes, Python values.

    Recorded by the measurement with each sample so that a replay under another torch
    version (whose OpInfo may yield different samples at the same index: torch 2.13's
    ``histc`` samples use ``min=0, max=10`` where 2.11's used ``min=max=0``) can tell a
    changed sample from a wrong prediction.
    """
    import hashlib

    import torch
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten((args, dict(kwargs or {})))
    parts = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append(f"T{tuple(leaf.shape)}{leaf.dtype}{leaf.layout}")
        elif isinstance(leaf, (bool, int, float, complex, str)) or leaf is None:
            parts.append(repr(leaf))
        else:
            parts.append(type(leaf).__name__)
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def features(sig: str) -> set[str]:
    """The parts of a signature, each tagged with its place (``p0:T0f``, ``k:dim=int``)."""
    pos, _, kw = sig.partition(";")
    out = {f"p{i}:{d}" for i, d in enumerate(pos.split("|")) if pos}
    out.update(f"k:{part}" for part in kw.split(",") if kw)
    out.update(f"kn:{part.split('=')[0]}" for part in kw.split(",") if kw)
    # place-free values: a call may pass by keyword what a sample passed by position
    out.update(f"v:{d}" for d in pos.split("|") if pos)
    out.update(f"v:{part.split('=', 1)[1]}" for part in kw.split(",") if kw and "=" in part)
    out.discard("v:None")
    return out


# The Python scalar kinds of `describe` (a bool is described by its value, an int by its
# sign). torch binds all four to an op's `Scalar` overload, a 0-d tensor to its `Tensor`
# overload: `masked_fill(mask, float('-inf'))` is aten::masked_fill.Scalar (no sync on
# CUDA), `masked_fill(mask, t0_cuda)` is masked_fill.Tensor, which reads t0 with item().
PYTHON_SCALAR_KINDS = {"float": "float", "int": "int", "int-": "int", "True": "bool",
                       "False": "bool", "complex": "complex"}


@functools.cache
def argument_positions(name: str) -> dict[str, int]:
    """Positions of an aten op's positional arguments by name, over all its overloads
    (``value`` -> 2 for ``masked_fill``): a value passed by keyword is the same form as the
    same value passed by position. Empty for names that are no aten op."""
    import torch

    try:
        schemas = torch._C._jit_get_schemas_for_operator("aten::" + name.replace(".", "_"))
    except Exception:  # noqa: BLE001 - a name torch's registry does not parse
        return {}
    positions: dict[str, int] = {}
    for schema in schemas:
        for i, argument in enumerate(schema.arguments):
            if not argument.kwarg_only:
                positions.setdefault(argument.name, i)
    return positions


def places(sig: str, positions: dict[str, int]) -> list[tuple[str, str]]:
    """(place, description) of each argument of a signature; keyword arguments that are
    positional in the op's schema take their position's place (``p2``), others ``k:name``."""
    pos, _, kw = sig.partition(";")
    out = [(f"p{i}", d) for i, d in enumerate(pos.split("|")) if pos]
    for part in kw.split(",") if kw else ():
        name, _, d = part.partition("=")
        where = positions.get(name)
        out.append((f"p{where}" if where is not None else f"k:{name}", d))
    return out


def func_names(func: Any) -> list[str]:
    """Names under which a callable may be found in the table (most specific first)."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>":
        return []
    names = [name]
    if name in ALIASES:
        names.append(ALIASES[name])
    if type(func).__name__ == "OpOverload" and getattr(func, "namespace", None) in ("aten", "prims"):
        # torch.ops.aten.sin.default: measured under its Python name, `sin`
        names.append(name.split(".", 1)[0])
        return names
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core.startswith("r") and core[1:] in _REFLECTED:
            core = core[1:]
        if core.startswith("i") and core[1:] in _REFLECTED:
            core = core[1:]
        names.append(core)
        if core in _BITWISE:  # x | y is measured as bitwise_or, ~x as bitwise_not
            names.append(_BITWISE[core])
    elif name.endswith("_") and not name.endswith("__"):
        names.append(name[:-1])
    return names


MASKED = "masked."  # OpInfo entries of torch.masked.*, whose functions share core ops' names

_BITWISE = {"or": "bitwise_or", "and": "bitwise_and", "xor": "bitwise_xor",
            "invert": "bitwise_not", "lshift": "bitwise_left_shift",
            "rshift": "bitwise_right_shift"}

_REFLECTED = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and",
              "or", "xor", "lshift", "rshift", "div"}


# --------------------------------------------------------------------------- the table

class OpEntry:
    """What the table says about one callable name: its samples, pooled over variants."""

    __slots__ = ("name", "by_sig", "counts", "rule", "value_places", "scalar_forms")

    def __init__(self, name: str) -> None:
        self.name = name
        self.by_sig: dict[str, Counter] = {}
        self.counts: Counter = Counter()
        self.rule: tuple[str, int, int] | None = None  # (feature, count with, count without)
        # Places where a sample passed a 0-d tensor (a value argument: the op has a Tensor
        # and a Scalar form there), and the Python scalar kinds measured at each of them.
        self.value_places: set[str] = set()
        self.scalar_forms: set[tuple[str, str]] = set()

    def add(self, sig: str, syncs: int) -> None:
        self.by_sig.setdefault(sig, Counter())[syncs] += 1
        self.counts[syncs] += 1

    def finish(self) -> None:
        positions = argument_positions(self.name)
        for sig in self.by_sig:
            for place, d in places(sig, positions):
                if d.startswith("T0"):
                    self.value_places.add(place)
        for sig in self.by_sig:
            for place, d in places(sig, positions):
                kind = PYTHON_SCALAR_KINDS.get(d)
                if kind is not None and place in self.value_places:
                    self.scalar_forms.add((place, kind))
        if len(self.counts) < 2:
            return
        # One feature that separates the samples' counts exactly (tensor vs scalar, ...).
        feats: dict[str, set[int]] = {}
        absent: dict[str, set[int]] = {}
        all_feats: set[str] = set()
        per_sig = [(features(s), c.most_common(1)[0][0]) for s, c in self.by_sig.items()]
        for fs, _ in per_sig:
            all_feats |= fs
        best = None
        for f in sorted(all_feats):
            with_c = {n for fs, n in per_sig if f in fs}
            without_c = {n for fs, n in per_sig if f not in fs}
            if len(with_c) == 1 and len(without_c) == 1 and with_c != without_c:
                cand = (f, next(iter(with_c)), next(iter(without_c)))
                # prefer a feature that makes the syncing side the narrow one
                if best is None or (cand[1] > 0 and best[1] == 0) or (
                        f.startswith("v:") and not best[0].startswith("v:") and cand[1] > 0):
                    best = cand
        del feats, absent
        self.rule = best

    @property
    def always(self) -> int | None:
        return next(iter(self.counts)) if len(self.counts) == 1 else None

    def predict(self, sig: str) -> int:
        hit = self.by_sig.get(sig)
        if hit is not None:
            return hit.most_common(1)[0][0]
        if len(self.counts) == 1:
            return next(iter(self.counts))
        if self.rule is not None:
            f, with_n, without_n = self.rule
            return with_n if f in features(sig) else without_n
        # nearest sample: most shared features
        fs = features(sig)
        best_sig = max(self.by_sig, key=lambda s: (len({f for f in fs & features(s) if f.startswith("v:")}),
                                                     len(fs & features(s)), -len(features(s) ^ fs)))
        return self.by_sig[best_sig].most_common(1)[0][0]

    def syncs_sometimes(self) -> bool:
        return any(n > 0 for n in self.counts)

    def unmeasured_form(self, sig: str) -> tuple[str, str] | None:
        """The first (place, Python scalar kind) of a call at one of this op's value
        places that no sample measured (``("p2", "float")`` for ``masked_fill(mask,
        float('-inf'))`` when only int and 0-d tensor values were sampled); None when the
        call's form was measured."""
        if not self.value_places or sig in self.by_sig:
            return None
        for place, d in places(sig, argument_positions(self.name)):
            kind = PYTHON_SCALAR_KINDS.get(d)
            if kind is not None and place in self.value_places \
                    and (place, kind) not in self.scalar_forms:
                return place, kind
        return None


# Entries whose own samples miss a case that another entry measured on the same kernel.
# OpInfo's `linalg.svd` and `svd` samples are all empty matrices (0 syncs); every entry
# built on the same `_linalg_svd` kernel (svdvals, pinv, matrix_rank, cond, norm 'nuc')
# measured 2 syncs on a non-empty one (the kernel checks its `info` on the host,
# aten/src/ATen/native/BatchLinearAlgebra.cpp), and so did `svd_lowrank`, whose only
# syncing call is one `linalg.svd` of a non-empty matrix. `tests/gpu/test_optable_gpu.py`
# re-measures it.
SHARED_KERNEL_SAMPLES: dict[str, str] = {
    "linalg_svd": "linalg.svdvals",
    "svd": "linalg.svdvals",
}


def _isin_sorts(args: tuple, kwargs: dict) -> bool | None:
    """Whether ``torch.isin`` takes its sorting path (which syncs: unique() sizes); with
    ``assume_unique=True`` that path syncs once (an int: the count).

    aten/src/ATen/native/TensorCompare.cpp, isin_Tensor_Tensor_out: the brute-force
    kernel when ``test_elements.numel() < int(10 * elements.numel() ** 0.145)`` (numpy's
    heuristic), else sort + unique. The signature cannot tell the two: only sizes do.
    """
    import torch

    names = ("elements", "test_elements")
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    elements, test = bound.get("elements"), bound.get("test_elements")
    if not isinstance(test, torch.Tensor):
        return False  # isin(Tensor, Scalar) is eq/ne
    n_elements = elements.numel() if isinstance(elements, torch.Tensor) else 1
    if n_elements == 0:
        return False
    sorts = test.numel() >= int(10.0 * float(n_elements) ** 0.145)
    assume_unique = _bound_flag(args, kwargs, 2, "assume_unique")
    if sorts and assume_unique:
        # No unique() of either input: the sort path's one remaining host read (measured
        # 1 sync on an H100 with torch 2.11, tests/gpu/test_optable_gpu.py).
        return 1
    return sorts


def _bound_flag(args: tuple, kwargs: dict, position: int, name: str) -> bool:
    """A boolean argument given by position or by keyword (False when absent)."""
    value = args[position] if len(args) > position else kwargs.get(name, False)
    return bool(value) if isinstance(value, bool) else False


def _combinations_reads(args: tuple, kwargs: dict) -> int | None:
    """``torch.combinations(x, r)``: one ``masked_select`` per output column, each sizing
    its result on the host (aten/src/ATen/native/Itertools.cpp): r syncs, 0 for r=0.
    Measured 1 for r=1 and 2 for r=2 (OpInfo samples, H100, torch 2.11)."""
    r = args[1] if len(args) > 1 else kwargs.get("r", 2)
    return r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else None


# Forms measured outside the OpInfo sweep, for tables whose samples lack them (the sweep
# samples every Python scalar kind at an op's value places since its forms pass; older
# tables have only the kinds OpInfo's samples happened to use). A table's own samples of
# a form take precedence. (op name, place, Python scalar kind) -> syncs.
FORM_FACTS: dict[tuple[str, str, str], int] = {
    # masked_fill(mask, float('-inf')), causal attention's mask: the Scalar overload, no
    # sync (issue 22, measured on an H100 with torch 2.11; the sweep's int samples, the
    # same overload, measured 0 too). The 0-d CUDA tensor value syncs once.
    ("masked_fill", "p2", "float"): 0,
}


def _mode_reads(args: tuple, kwargs: dict) -> int | None:
    """``torch.mode(x, dim)`` on CUDA (aten/src/ATen/native/cuda/TensorModeKernel.cpp): a
    fused kernel when a slice has at most 2048 elements (and 32-bit indexing does), else
    one thrust pass per slice ending in ``memcpy_and_sync``: one sync per slice. OpInfo's
    first samples are all small (0 syncs); its seventh, a (3000,) vector, syncs once."""
    import torch

    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return None
    dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    if not isinstance(dim, int) or isinstance(dim, bool):
        return None
    slice_size = x.shape[dim] if x.dim() else 1
    if slice_size <= 1:
        return 0  # values.copy_(self): no kernel of its own
    slices = x.numel() // slice_size
    fused = slice_size <= 2048 and slices <= 65535 ** 3 and x.numel() < 2 ** 31
    return 0 if fused else slices


# Ops whose sync depends on argument sizes or values that a signature does not record:
# a bool says whether the call takes the syncing branch (the count is the one the table
# measured for that branch, the entry's largest); an int is the count; None: ask the table.
def _cross_entropy_reads(args: tuple, kwargs: dict) -> int | None:
    """``cross_entropy`` with class weights, label smoothing and a mean over class-index targets
    (aten/src/ATen/native/LossNLL.cpp, cross_entropy_loss_label_smoothing) divides by the targets'
    weights, gathered with ``target.masked_select(~ignore_mask)``: one sync, the default
    ``ignore_index`` included. Without a weight, smoothing, the mean or with probabilities as
    targets: none (OpInfo's samples have neither weight nor smoothing: all 0)."""
    import torch

    names = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
             "label_smoothing")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    target, weight = bound.get("target"), bound.get("weight")
    smoothing = bound.get("label_smoothing", 0.0)
    if not isinstance(target, torch.Tensor) or not isinstance(smoothing, (int, float)):
        return None
    size_average, reduce = bound.get("size_average"), bound.get("reduce")
    if size_average is not None or reduce is not None:  # the legacy pair: a mean unless either is False
        mean = size_average is not False and reduce is not False
    else:
        mean = bound.get("reduction", "mean") == "mean"
    takes = (isinstance(weight, torch.Tensor) and smoothing > 0 and mean
             and not target.is_floating_point() and not target.is_complex())
    return 1 if takes else 0


def _checked_errors(args: tuple, kwargs: dict) -> int | None:
    """``torch.linalg.*_ex(..., check_errors=True)`` reads ``info`` back on the host
    (at::_linalg_check_errors: ``infos.item()``, or a copy to the CPU for a batch): one sync,
    for an input with elements. torch's own docs say so (torch/linalg/__init__.py). No
    OpInfo sample passes check_errors: the table's 0 is the unchecked form's."""
    import torch

    if not kwargs.get("check_errors", False):
        return 0
    a = args[0] if args else kwargs.get("A", kwargs.get("input"))
    return 1 if isinstance(a, torch.Tensor) and a.numel() > 0 else 0


def _searchsorted_sorter(args: tuple, kwargs: dict) -> int | None:
    """``searchsorted(..., sorter=s)`` checks the sorter's range on the host
    (aten/src/ATen/native/BucketizationUtils.h, searchsorted_pre_check: its minimum and maximum
    read with ``.item()``), for the CPU and CUDA kernels alike: two syncs for a non-empty sorter.
    OpInfo's samples are all empty tensors: they measured 0."""
    import torch

    sorter = kwargs.get("sorter")
    return 2 if isinstance(sorter, torch.Tensor) and sorter.numel() > 0 else 0


SIZE_BRANCHES: dict[str, Any] = {
    "linalg_cholesky_ex": _checked_errors,
    "linalg_inv_ex": _checked_errors,
    "linalg_solve_ex": _checked_errors,
    "linalg_lu_factor_ex": _checked_errors,
    "linalg_ldl_factor_ex": _checked_errors,
    "searchsorted": _searchsorted_sorter,
    "isin": _isin_sorts,
    "combinations": _combinations_reads,
    "mode": _mode_reads,
    "cross_entropy": _cross_entropy_reads,  # nn.functional.cross_entropy (the table names it so)
}

_SVD_ORDERS = (2, -2, "nuc")


def _matrix_norm_via_svdvals(args: tuple, kwargs: dict) -> tuple[str, tuple, dict] | None:
    """``linalg.matrix_norm``: its ``dim`` defaults to the last two, so an input of any
    batch of matrices is a matrix norm (a (2, 3, 2) input with ord=2 measured 2 syncs on an
    H100, torch 2.11)."""
    return _norm_via_svdvals(args, kwargs, batches=True)


def _norm_via_svdvals(args: tuple, kwargs: dict, batches: bool = False) -> tuple[str, tuple, dict] | None:
    """``linalg.matrix_norm``/``linalg.norm`` of a matrix with ord 2, -2 or 'nuc' computes
    ``linalg.svdvals`` inside (aten/src/ATen/native/LinearAlgebra.cpp, linalg_matrix_norm),
    which checks its ``info`` on the host: they sync as svdvals does (OpInfo's first
    matrix_norm samples use 'fro': 0 syncs). Other orders: no svd, ask the table.
    ``linalg.norm`` without ``dim`` is a matrix norm of a 2-D input only; ``batches``:
    of any input of two dimensions or more (``linalg.matrix_norm``)."""
    import torch

    names = ("A", "ord", "dim", "keepdim")
    bound = dict(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names or k == "input"})
    a = bound.get("A", bound.get("input"))
    order = bound.get("ord")
    if not isinstance(a, torch.Tensor) or isinstance(order, bool) or order not in _SVD_ORDERS:
        return None
    dim = bound.get("dim")
    matrix = (dim is None and (a.dim() >= 2 if batches else a.dim() == 2)) \
        or (isinstance(dim, (tuple, list)) and len(dim) == 2)
    if not matrix:
        return None  # a vector norm: no svd
    return "linalg.svdvals", (a,), {}


# Ops computed by another measured op (a composite whose syncs are its part's): the
# function gives (the part's entry, its arguments) or None when the call takes no such part.
VIA: dict[str, Any] = {
    "linalg.matrix_norm": _matrix_norm_via_svdvals,
    "linalg_matrix_norm": _matrix_norm_via_svdvals,
    "linalg.norm": _norm_via_svdvals,
    "linalg_norm": _norm_via_svdvals,
}


class OpTable:
    """A loaded table file: entries by callable name, plus the file's metadata."""

    def __init__(self, data: dict, path: Path | None = None) -> None:
        self.data = data
        self.path = path
        self.torch_version: str = data.get("torch", "?")
        self.device: str = data.get("device", "?")
        self.entries: dict[str, OpEntry] = {}
        ops = data.get("ops", {})
        for key, op in ops.items():
            names = set(op.get("names", [])) | {op.get("name", key)}
            if key.startswith(MASKED):
                # torch.masked.sum is named `sum`: under that name its samples (which sync
                # on the mask) would speak for torch.sum, which never syncs.
                names = {key.split(".", 2)[0] + "." + key.split(".", 2)[1]}
            for sample in op.get("samples", []):
                if sample.get("error") is not None or sample.get("syncs") is None:
                    continue
                for name in names:
                    entry = self.entries.get(name)
                    if entry is None:
                        entry = self.entries[name] = OpEntry(name)
                    entry.add(sample["sig"], int(sample["syncs"]))
        for name, source in SHARED_KERNEL_SAMPLES.items():
            entry, op = self.entries.get(name), ops.get(source)
            if entry is None or op is None:
                continue
            for sample in op.get("samples", []):
                if sample.get("error") is None and sample.get("syncs") is not None:
                    entry.add(sample["sig"], int(sample["syncs"]))
        for entry in self.entries.values():
            entry.finish()
        self.note: str | None = None

    def lookup(self, func: Any) -> OpEntry | None:
        module = getattr(func, "__module__", None) or ""
        if module.startswith("torch.masked"):
            return self.entries.get(MASKED + str(getattr(func, "__name__", "")))
        for name in func_names(func):
            entry = self.entries.get(name)
            if entry is not None:
                return entry
            module = getattr(func, "__module__", None) or ""
            # torch.linalg.inv.__name__ == 'linalg_inv'; F.one_hot is 'one_hot'.
            for prefix in ("linalg_", "special_", "fft_", "nn.functional."):
                if name.startswith(prefix):
                    entry = self.entries.get(prefix.rstrip("_.").replace("_", ".") + "."
                                             + name[len(prefix):])
                    if entry is not None:
                        return entry
            # F.scaled_dot_product_attention is torch._C._nn's: measured under F's name
            if module.endswith("nn.functional") or module == "torch._C._nn":
                entry = self.entries.get("nn.functional." + name)
                if entry is not None:
                    return entry
        return None

    def predicted_syncs(self, func: Any, args: tuple, kwargs: dict | None) -> int | None:
        """Syncs a GPU would make for this call, or None when the table has no entry or
        did not measure the call's form (see :meth:`predict_entry`)."""
        entry = self.lookup(func)
        if entry is None:
            return None
        return self.predict_entry(entry, args, kwargs)

    def predict_entry(self, entry: OpEntry, args: tuple, kwargs: dict | None) -> int | None:
        """Syncs a GPU would make for a call of ``entry``'s op with these arguments; None
        instead of a sync when the call passes a Python scalar kind at a value place that
        no sample (nor :data:`FORM_FACTS`) measured: which overload the call takes decides
        the sync, and a sync guessed from the other overload's samples is one the GPU may
        well not make."""
        via = VIA.get(entry.name)
        if via is not None:
            part = via(args, kwargs or {})
            if part is not None and part[0] in self.entries:
                return self.predict_entry(self.entries[part[0]], part[1], part[2])
        branch = SIZE_BRANCHES.get(entry.name)
        if branch is not None:
            takes = branch(args, kwargs or {})
            if isinstance(takes, bool):
                return max(entry.counts) if takes else 0
            if takes is not None:
                return takes
        always = entry.always
        if always == 0:
            return 0
        sig = signature(args, kwargs)
        n = always if always is not None else entry.predict(sig)
        if n:
            form = entry.unmeasured_form(sig)
            if form is not None:
                return FORM_FACTS.get((entry.name, *form))
        return n

    def unmeasured_form(self, entry: OpEntry, args: tuple, kwargs: dict | None) -> str:
        """How the report names the form of a call :meth:`predict_entry` had no
        measurement for: ``"a Python float value"``."""
        form = entry.unmeasured_form(signature(args, kwargs))
        if form is None:
            return ""
        place, kind = form
        if place.startswith("k:"):
            return f"a Python {kind} {place[2:]}"
        index = int(place[1:])
        names = [n for n, i in argument_positions(entry.name).items() if i == index]
        return f"a Python {kind} {names[0] if names else f'argument {index + 1}'}"

    def syncing_names(self) -> list[str]:
        return sorted(n for n, e in self.entries.items() if e.syncs_sometimes())


def available() -> list[tuple[tuple[int, int], Path]]:
    """Measured tables shipped with the package, by (major, minor) torch version."""
    found = []
    if DATA_DIR.is_dir():
        for path in DATA_DIR.iterdir():
            m = _FILE_RE.search(path.name)
            if m:
                found.append(((int(m.group(1)), int(m.group(2))), path))
    return sorted(found)


def _version_tuple(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


_cache: dict[Path, OpTable] = {}


def load(torch_version: str | None = None) -> OpTable | None:
    """The table for ``torch_version`` (default: the installed torch), or the nearest one.

    When the nearest differs from the installed version, ``table.note`` says so.
    """
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    tables = available()
    if not tables:
        return None
    want = _version_tuple(torch_version)
    version, path = min(tables, key=lambda vp: (abs((vp[0][0] - want[0]) * 100 + vp[0][1] - want[1]),
                                                 -vp[0][1]))
    table = _cache.get(path)
    if table is None:
        table = OpTable(json.loads(path.read_text()), path)
        _cache[path] = table
    table = copy.copy(table)  # the note is this call's; the entries are shared
    if version != want:
        table.note = (f"sync table measured with torch {table.torch_version} on {table.device}; "
                      f"installed torch is {torch_version}: predictions for ops whose behaviour "
                      f"changed between versions may be off")
    else:
        table.note = None
    return table


# --------------------------------------------------------------------------- predict hook

class Tally:
    """Per predict run: the table's predictions and the calls it could not answer."""

    def __init__(self) -> None:
        self.predicted = 0
        self.unmeasured: Counter = Counter()  # display name -> calls

    @property
    def unmeasured_calls(self) -> int:
        return sum(self.unmeasured.values())


def tally_of(owner: Any) -> Tally:
    """The :class:`Tally` kept on ``owner`` (the recorder of a predict run)."""
    tally = getattr(owner, "optable_tally", None)
    if tally is None:
        tally = Tally()
        try:
            owner.optable_tally = tally
        except AttributeError:
            pass
    return tally


def display_name(func: Any) -> str:
    """How the report names an op: ``mylib::fused_op`` for a registered op, the module
    path for a Python function, ``Tensor.name`` for a tensor method."""
    qualified = getattr(func, "_qualified_op_name", None)  # an OpOverloadPacket
    if isinstance(qualified, str):
        return qualified
    name_of = getattr(func, "name", None)
    if callable(name_of) and type(func).__name__ == "OpOverload":
        return str(name_of())
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__name__
    owner = getattr(func, "__objclass__", None)
    if owner is not None:
        return f"Tensor.{getattr(func, '__name__', name)}" if owner.__name__ in (
            "TensorBase", "_TensorBase", "Tensor") else f"{owner.__name__}.{getattr(func, '__name__', name)}"
    if isinstance(name, str) and name.startswith("_VariableFunctionsClass."):
        return "torch." + name.split(".", 1)[1]  # torch's C functions (torch.xxx)
    module = getattr(func, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


MAX_UNMEASURED_OPS = 20  # report.schema.json: predict_table.unmeasured_ops maxItems


def report_of(owner: Any) -> dict | None:
    """The report's ``predict_table``: which table answered, and what it could not.

    None when no table ships with the package.
    """
    table = installed_table()
    if table is None:
        return None
    tally = getattr(owner, "optable_tally", None) or Tally()
    return {
        "torch": str(table.torch_version)[:100],
        "device": str(table.device)[:200],
        "version_note": table.note[:500] if table.note else None,
        "predicted_syncs": int(tally.predicted),
        "unmeasured_calls": int(tally.unmeasured_calls),
        "unmeasured_ops": [{"name": name[:200], "calls": int(calls)}
                           for name, calls in tally.unmeasured.most_common(MAX_UNMEASURED_OPS)],
    }


_installed: Any = None  # the table for the installed torch, loaded once (False: none)


def installed_table() -> OpTable | None:
    """The table for the installed torch (or the nearest one), loaded once per process."""
    global _installed
    if _installed is None:
        try:
            _installed = load() or False
        except Exception:  # a broken data file must not break the user's cell
            _installed = False
    return _installed or None


_SKIP = object()  # a decision: the call never syncs (or a handler counts it)
# Per callable: _SKIP, an OpEntry whose answer depends on the arguments, or the display
# name of an op without a measurement. Predict mode asks for every torch call with a
# virtual input (about 160 per step of a small training loop): the names, the table
# lookup and the "never syncs" answer are worked out once per callable.
_decisions: dict[Any, Any] = {}


def _decide(func: Any, handled: Any) -> Any:
    try:
        if func in handled:  # a function-level handler counts it (or calls us back for it)
            return _SKIP
    except TypeError:
        pass
    names = func_names(func)
    if (not names or names[0] in NO_SYNC_NAMES or names[0].startswith(NO_SYNC_PREFIXES)
            or (len(names) > 1 and names[1] in NO_SYNC_NAMES)):
        return _SKIP
    table = installed_table()
    if table is None:
        return _SKIP
    entry = table.lookup(func)
    if entry is None:
        return display_name(func)
    if entry.always == 0 and entry.name not in SIZE_BRANCHES and entry.name not in VIA:
        return _SKIP
    return entry


def on_call(session: Any, func: Any, args: tuple, kwargs: dict, handled: Any = ()) -> int:
    """Predict mode's hook for a call with a virtual CUDA input that no handler took.

    Returns how many syncs the table predicts (0 when none or unmeasured); counts the
    unmeasured calls on the recorder's :class:`Tally`.
    """
    try:
        decision = _decisions.get(func)
        if decision is None:
            if len(_decisions) >= 4096:  # user callables that dispatch torch functions
                _decisions.clear()
            decision = _decisions[func] = _decide(func, handled)
    except TypeError:  # an unhashable callable
        decision = _decide(func, handled)
    if decision is _SKIP:
        return 0
    tally = tally_of(session.recorder)
    if isinstance(decision, str):
        tally.unmeasured[decision] += 1
        return 0
    table = installed_table()
    n = table.predict_entry(decision, args, kwargs)
    if n is None:  # a form of the op the table did not measure: said, not guessed
        form = table.unmeasured_form(decision, args, kwargs)
        tally.unmeasured[f"{display_name(func)} with {form}"] += 1
        return 0
    tally.predicted += n
    return n
