"""What a cell's names hold, as far as the cell's own text tells: the static pass's light device inference.

A :class:`CellScope` walks one cell's AST in execution order and keeps an abstract :class:`Value` for every name the
cell binds: a tensor on CUDA, a CPU tensor, a NumPy array, a Python number, a module moved to CUDA, a CUDA event...
Rules ask it about the expressions they match (``scope.value(node)``, ``scope.tensor_certainty(node)``) so that code
working on known-CPU tensors is not flagged and code on known-CUDA tensors is flagged as certain.

It never executes anything. Names the cell does not bind are unknown, which rules report as *likely* at most, unless
the caller hands over what earlier cells bound (:class:`Bindings`, as ``syncfree check`` does for a notebook). Imports
are resolved so that ``import torch as th`` / ``from torch.nn import functional as F`` work; the usual aliases
(``torch``, ``np``, ``F``, ``nn``, ``dist``) are assumed when an earlier cell imported them.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import functools
import operator
import re
from collections import ChainMap
from collections.abc import Callable, Container, Iterable
from typing import Any, Literal

from syncfree.catalog.edits import Certainty, Edit, Frozen, Position
from syncfree.catalog.host_code import HostCode, imports_host_library

Device = Literal["cuda", "cpu"]


class Value(Frozen):
    """An abstract value.

    kind: ``tensor``, ``tensors`` (an iterable of tensors, e.g. ``model.parameters()``), ``module``,
    ``module_class``, ``numpy``, ``python`` (numbers, strings, lists of those), ``sequence`` (a list/tuple literal),
    ``device``, ``event``, ``stream``, ``grad_scaler``, ``work`` (an async collective's handle), ``function``,
    ``distribution`` (a ``torch.distributions`` object: ``device`` is where it samples) or ``unknown``. ``device``
    is known only when the text says so. ``int_data`` keeps the elements of a 1-D integer tensor built from
    constants (so ``repeat_interleave`` can know its output size); ``ndim`` a tensor's number of dimensions where
    the text shows it (``torch.zeros(8, 8)``), which decides whether ``x[0, 0] = 0`` syncs.
    """

    #: The fields, in the order of the constructor's parameters (a frozen record written out by hand: no
    #: dataclasses on a check's path, edits.Frozen).
    FIELDS = ("kind", "device", "dtype", "pinned", "int_data", "const", "ndim")

    kind: str
    device: Device | None
    dtype: Literal["bool", "int", "float"] | None
    pinned: bool
    int_data: tuple[int, ...] | None
    const: object
    ndim: int | None

    def __init__(
        self,
        kind: str = "unknown",
        device: Device | None = None,
        dtype: Literal["bool", "int", "float"] | None = None,
        pinned: bool = False,
        int_data: tuple[int, ...] | None = None,
        const: object = None,
        ndim: int | None = None,
    ) -> None:
        # The fields above, set in one step, a dict of them as the instance's own: a frozen dataclass's __init__ set
        # each through object.__setattr__, and the static pass makes several values per line of a cell (a keyword
        # call of __dict__.update took twice as long as this).
        _set_dict(self, "__dict__", {"kind": kind, "device": device, "dtype": dtype, "pinned": pinned,
                                     "int_data": int_data, "const": const, "ndim": ndim})

    def _fields(self) -> tuple[object, ...]:
        return (self.kind, self.device, self.dtype, self.pinned, self.int_data, self.const, self.ndim)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        # (the same seven keys in both, set by __init__: the dicts are equal when the fields are, pairwise by ==)
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return ("Value(" + ", ".join(f"{name}={value!r}" for name, value in zip(self.FIELDS, self._fields())) + ")")

    @property
    def is_tensor(self) -> bool:
        return self.kind == "tensor"


_set_dict = object.__setattr__  # (Frozen's own __setattr__ refuses: Value.__init__ sets its dict through object's)


def replace(value: Value, **changes: Any) -> Value:
    """``value`` with some fields changed (what ``dataclasses.replace`` did)."""
    return Value(**{**value.__dict__, **changes})


UNKNOWN = Value()
_UNSEEN = object()  # no answer kept yet (None is an answer)
PYTHON = Value("python")
#: A value that is a tensor on some paths and host data on others (``n: int | Tensor``; a parameter annotated
#: ``torch.Tensor`` that the file passes NumPy arrays): a sync on it is ``possible``, never ``likely``.
MAYBE_TENSOR = Value("maybe_tensor")
#: ... or a NumPy array, which has the tensor's methods (``.item()``, ``.nonzero()``) too.
MAYBE_NUMPY = Value("maybe_tensor", const="numpy")
#: A tensor that is on the CPU on some paths and the caller's on others: a parameter that takes a list or a tensor,
#: the list made into a tensor without a device (`torch.tensor(sigmas)`), or a schedule made on the CPU and
#: replaced on one branch by a function's result. The code is written for host data: a sync on it is ``possible``.
PARTLY_CPU = Value("maybe_tensor", const="cpu")
#: ``Value.const`` of a tensor the text moves to a device (``x.to(device)``, ``x.cpu()``, ``torch.zeros(n,
#: device=device)``): code that places its tensors, not host code: a CPU tensor on one path and a tensor of unknown
#: device on the other stay likely when either was placed so (a scheduler's CPU timesteps later moved to the
#: device; an MPS fallback's `coeffs.cpu()` beside `coeffs.double()`).
MOVED = "moved"
#: ``Value.const`` of a CPU tensor made from host data or numbers (``torch.tensor(sigmas)``, ``torch.from_numpy(a)``,
#: ``torch.linspace(b0, b1, n)``), not sized out of nothing (``torch.ones(n)``): beside a tensor of unknown device on
#: another path it says the code takes host data (a list or a tensor; a schedule) (:func:`join`); a model's
#: ``torch.ones(n, dtype=torch.bool)`` on its last layer's path says nothing of the kind.
HOST_DATA = "host data"
# The factories that make a tensor of data (not only of sizes).
_DATA_FACTORIES = frozenset({"tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "linspace", "logspace"})
#: A host object that is no tensor, no array and no number (``df: pd.DataFrame``, ``img: PIL.Image.Image``).
HOST_OBJECT = Value("host")
#: A tuple (``tuple(slices)``, ``(0, slice(None))``) or a list of strings (``["col"]``): as an index, basic indexing
#: or a column selection, never an index tensor (``Value.const`` of a ``sequence``).
TUPLE = "tuple"
STRINGS = "strings"
#: ``Value.const`` of an empty list (``srcs = []``): what ``srcs.append(t)`` puts in it decides what it holds, a list
#: of tensors on ``t``'s device (``tensors``) when each append is of a tensor (:meth:`CellScope._appended`).
EMPTY = "empty"
#: ``Value.const`` of a dict of CPU tensors made by a display (``{Events.STARTED: torch.zeros(1), ...}``, kind
#: ``tensors``): reading an item gives a CPU tensor; iterating it gives its keys, not tensors (:func:`element_of`).
DICT = "dict"
_HOST_KINDS = frozenset({"numpy", "python", "sequence", "host"})
# Annotations: typing's unions, and the classes that say "a tensor" or "host data".
_UNIONS = frozenset({"typing.Optional", "typing.Union"})
_TENSOR_TYPES = frozenset(
    {"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.FloatTensor", "torch.LongTensor",
     "torch.BoolTensor"}
)
_NUMPY_TYPES = frozenset({"numpy.ndarray", "numpy.array", "numpy.typing.NDArray"})
# Methods of NumPy arrays and random generators (np.random.RandomState, Generator) that torch.Tensor does not have
# (its own are `normal_`, `random_`, `uniform_`...): what they give is NumPy data.
_NUMPY_METHODS = frozenset(
    "astype choice uniform permutation shuffle randint rand randn integers random beta binomial poisson "
    "standard_normal multivariate_normal dirichlet".split()
)
_CONTAINER_TYPES = frozenset(
    {"builtins.list", "builtins.tuple", "builtins.dict", "builtins.set", "typing.List", "typing.Tuple", "typing.Dict",
     "typing.Sequence", "collections.abc.Sequence"}
)
_PYTHON_TYPES = frozenset({"builtins.int", "builtins.float", "builtins.bool", "builtins.str", "builtins.complex"})
_HOST_MODULES = ("pandas.", "PIL.", "numpy.")
#: Libraries whose functions give objects in host memory that are neither arrays nor tensors (tables, images).
_HOST_LIBRARIES = ("pandas.", "PIL.")
#: A type named for arrays and tensors alike (``NdarrayOrTensor``, ``TensorOrArray``, ``ArrayTensor``): a union of
#: ``np.ndarray`` and ``torch.Tensor`` spelled by an alias of another module, which the text does not show.
_ARRAY_OR_TENSOR = re.compile(r"(?i)array.*tensor|tensor.*array")
#: ``Value.const`` of the ``device`` of a value that is a tensor on some paths and host data on others
#: (``x.device`` for ``x: NdarrayOrTensor``): the caller's device, the CPU when the caller's data is host data.
CALLERS = "the caller's"
MAYBE_DEVICE = Value("device", const=CALLERS)
#: ``Value.const`` of a device the caller picks, the CPU when it picks none: a parameter ``device="cpu"`` or
#: ``device=torch.device("cpu")`` (as passed, converted by ``torch.device(device)``, kept in ``self._device``, or
#: handed to the base class's ``__init__`` that keeps it), and of a tensor made or moved there (``torch.zeros(n,
#: device=self._device)``, ``x.to(self._device)``) and what is computed from it beside CPU data. Code that keeps its
#: tensors (a metric's running sums) where its user says, the CPU by default: a sync on them is ``possible``, since
#: nothing in the text puts them on the GPU. Not so a device that a model is moved to (``model.to(device)``), nor a
#: module's (an ``nn.Module``'s device is where it runs), nor ``device="auto"``, ``"cuda"`` or a device worked out
#: from ``torch.cuda.is_available()``. (``device=None`` made the CPU when left out, ``torch.device(device or
#: "cpu")``, is left out too: timm's evaluators take it so, and timm's tasks hand them the model's device.)
CPU_DEFAULT = "the caller's, the CPU by default"
CPU_BY_DEFAULT = Value("device", const=CPU_DEFAULT)
_COPIES = frozenset({"copy.copy", "copy.deepcopy"})

DEFAULT_ALIASES = {
    "torch": "torch",
    "np": "numpy",
    "numpy": "numpy",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "dist": "torch.distributed",
}

# torch functions that create a tensor from sizes or data rather than from tensor operands.
FACTORIES = frozenset(
    "torch." + name
    for name in (
        "tensor as_tensor asarray zeros ones empty full rand randn randint arange range linspace logspace eye "
        "randperm scalar_tensor empty_strided tril_indices triu_indices from_numpy frombuffer zeros_like ones_like "
        "empty_like full_like rand_like randn_like randint_like normal"
    ).split()
)
# The modules whose functions _function_call tells apart (any other's: what _passed_through makes of it, or Python for a
# _PYTHON_RESULTS name).
_KNOWN_ROOTS = ("torch.", "numpy.", "builtins.", "math.")
# torch functions (and tensor methods) whose result is a Python object, not a tensor (a string: `torch.typename(p)`;
# a dtype: `torch.result_type(a, b)`; a bool: `torch.can_cast`).
_PYTHON_RESULTS = frozenset(
    "is_tensor numel is_nonzero equal allclose is_floating_point is_complex get_default_dtype is_grad_enabled "
    "manual_seed initial_seed seed save set_default_dtype set_default_device set_printoptions "
    "use_deterministic_algorithms typename result_type promote_types can_cast is_storage".split()
)
# Namespaces whose functions take and return tensors (torch.utils, torch.optim... hold other objects).
_TENSOR_NAMESPACES = frozenset(
    {"torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch.nested", "torch.sparse"}
)
_TENSOR_PYTHON_METHODS = frozenset(
    "item tolist size dim numel nelement stride element_size is_contiguous data_ptr get_device is_floating_point "
    "storage_offset is_complex ndimension __len__ is_pinned is_set_to equal allclose".split()
)
# Tensor methods that return None or a handle, not a tensor (so a cell ending with one displays nothing).
_TENSOR_NONE_METHODS = frozenset("backward retain_grad record_stream register_hook register_post_accumulate_grad_hook".split())
_TENSOR_PYTHON_ATTRIBUTES = frozenset(
    "shape dtype ndim is_cuda requires_grad is_leaf layout names is_sparse is_quantized is_meta itemsize nbytes".split()
)
# What a torch.distributions object draws: tensors on its parameters' device.
_SAMPLING_METHODS = frozenset({"sample", "rsample", "sample_n"})
_TENSOR_SAME_ATTRIBUTES = frozenset("T mT H mH data grad real imag".split())
_BOOL_RESULTS = frozenset(
    "isnan isinf isfinite isposinf isneginf isreal logical_and logical_or logical_xor logical_not eq ne gt lt ge le "
    "greater less greater_equal less_equal not_equal isclose isin signbit bool any all".split()
)
_INT_RESULTS = frozenset(
    "nonzero argwhere argmax argmin argsort long int short char byte bincount searchsorted bucketize".split()
)
_FLOAT_RESULTS = frozenset("float double half bfloat16".split())
# Methods whose result has the receiver's shape, and full reductions (no dim given) that give a 0-dim tensor.
_SHAPE_KEEPING_METHODS = frozenset(
    "clone detach contiguous abs neg float double half bfloat16 long int short char byte bool sigmoid relu exp log "
    "sqrt clamp clamp_min clamp_max isnan isinf isfinite logical_not masked_fill pow add sub mul div".split()
)
_FULL_REDUCTIONS = frozenset("sum mean max min prod norm amax amin any all std var count_nonzero argmax argmin".split())
_DTYPE_KEEPING_METHODS = frozenset(
    "clone detach view reshape contiguous squeeze unsqueeze flatten t transpose permute expand expand_as repeat "
    "flip roll narrow select index_select gather masked_select masked_fill where cuda cpu to pin_memory abs neg "
    "maximum minimum clamp clamp_min clamp_max cumsum".split()
)
_DTYPES = {
    "bool": "bool",
    **dict.fromkeys("uint8 int8 int16 int32 int64 short int long".split(), "int"),
    **dict.fromkeys("float16 float32 float64 bfloat16 half float double".split(), "float"),
}
# Legacy tensor classes, e.g. torch.LongTensor (CPU) and torch.cuda.LongTensor, with the dtype they stand for.
LEGACY_TENSOR_DTYPES = {
    "DoubleTensor": "float64",
    "FloatTensor": "float32",
    "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16",
    "LongTensor": "long",
    "IntTensor": "int32",
    "ShortTensor": "int16",
    "CharTensor": "int8",
    "ByteTensor": "uint8",
    "BoolTensor": "bool",
}
GRAD_SCALERS = frozenset(
    {
        "torch.cuda.amp.GradScaler",
        "torch.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
_MODULE_WRAPPERS = frozenset(
    {
        "torch.compile",
        "torch.jit.script",
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.DistributedDataParallel",
    }
)
_BUILTINS = frozenset(dir(builtins))
_BUILTIN_NAMES = {name: f"builtins.{name}" for name in _BUILTINS}  # what a builtin's name qualifies to
# The parameters and buffers of torch.nn's modules, by their usual names (`self.proj.weight`).
_PARAMETER_NAMES = frozenset({"weight", "bias", "running_mean", "running_var", "in_proj_weight", "in_proj_bias"})
_NUMPY_OPERANDS, _PYTHON_OPERANDS = frozenset({"numpy", "python"}), frozenset({"python"})  # (_operator)
_MAYBE_NUMPY_OPERANDS = frozenset({"numpy", "python", "unknown"})
_EXITS = frozenset({ast.Raise, ast.Return})  # not continue/break: the loop's later code sees their bindings
_PYTHON_COMPARISONS = frozenset({ast.Is, ast.IsNot, ast.In, ast.NotIn})
_BITWISE = frozenset({ast.BitAnd, ast.BitOr, ast.BitXor})
_TRY_STAR = getattr(ast, "TryStar", ast.Try)  # (3.11's except*)
_SEQUENCES = frozenset({ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp, ast.Set})  # (ast.Dict: _dict_display)
# torch.nn modules that hold no parameters or buffers: their output is on their inputs' device, wherever the
# module was built (losses, activations, dropout, pooling, reshaping).
_STATELESS_MODULE_SUFFIXES = ("Loss", "Pool1d", "Pool2d", "Pool3d", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d")
_STATELESS_MODULES = frozenset(
    "ReLU ReLU6 GELU SiLU Mish ELU SELU CELU LeakyReLU Sigmoid Tanh Softmax LogSoftmax Softmin Softplus "
    "Softsign Hardtanh Hardswish Hardsigmoid Hardshrink Softshrink Tanhshrink Threshold LogSigmoid GLU Identity "
    "Flatten Unflatten Upsample UpsamplingNearest2d UpsamplingBilinear2d PixelShuffle PixelUnshuffle "
    "ChannelShuffle AlphaDropout FeatureAlphaDropout ZeroPad2d ConstantPad1d ConstantPad2d ConstantPad3d "
    "ReflectionPad1d ReflectionPad2d ReplicationPad1d ReplicationPad2d CosineSimilarity PairwiseDistance Fold "
    "Unfold".split()
)


def device_of_literal(text: object) -> Device | None:
    """'cuda', 'cuda:1' -> cuda; 'cpu' -> cpu; anything else -> None."""
    if not isinstance(text, str) or ("cuda" not in text and "cpu" not in text):
        return None
    kind = text.split(":", 1)[0].strip()
    return "cuda" if kind == "cuda" else "cpu" if kind == "cpu" else None


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    """The keyword argument ``name=`` of a call, if written."""
    for item in call.keywords:
        if item.arg == name:
            return item
    return None


def keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    item = keyword(call, name)
    return item.value if item is not None else None


def is_constant(node: ast.AST | None, value: object) -> bool:
    """``node`` is the literal ``value`` (``True`` is not ``1`` here)."""
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value


def number_literal(node: ast.AST | None) -> int | float | bool | None:
    """The value of a numeric literal, including a negated one (``-1``); None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = number_literal(node.operand)
        return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float)):
        return node.value
    return None


def int_list_literal(node: ast.AST | None) -> tuple[int, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        values = []
        for element in node.elts:  # (most lists hold names: the first says no)
            value = number_literal(element)
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            values.append(value)
        return tuple(values)
    return None


def is_side_effect_free(node: ast.AST) -> bool:
    """A name or attribute chain (``x``, ``self.buf``): safe to repeat in a rewrite."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


class Bindings:
    """What the cells run so far left behind: names, imports and the default device.

    ``syncfree check`` analyses a notebook's cells in order and hands each cell what the cells above it bound, so
    ``x = torch.randn(8, device="cuda")`` in one cell makes ``x.item()`` in a later cell certain.
    """

    names: dict[str, Value]
    aliases: dict[str, str]
    imported: set[str]
    default_device: Device | None

    def __init__(self, names: dict[str, Value] | None = None, aliases: dict[str, str] | None = None,
                 imported: set[str] | None = None, default_device: Device | None = "cpu") -> None:
        self.names = {} if names is None else names
        self.aliases = {} if aliases is None else aliases
        self.imported = set() if imported is None else imported
        self.default_device = default_device

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return (f"Bindings(names={self.names!r}, aliases={self.aliases!r}, imported={self.imported!r}, "
                f"default_device={self.default_device!r})")


class CellScope:
    """The parsed cell plus what its names hold at the statement being visited.

    :meth:`walk` visits every node in execution order and calls the callback with the environment of that moment;
    rules query :meth:`value` and friends from inside the callback.
    """

    def __init__(self, tree: ast.Module, source: str, earlier: Bindings | None = None) -> None:
        earlier = earlier or Bindings()
        self.tree = tree
        self.source = source
        self.aliases: dict[str, str] = {**DEFAULT_ALIASES, **earlier.aliases}
        self.imported: set[str] = set(earlier.imported)
        self.default_device: Device | None = earlier.default_device
        # Each node's parent (ask :meth:`parent`): the walk records those of the statements as it enters a compound
        # statement; those of the expressions inside a statement are recorded when a rule first asks for one of
        # them (most statements hold nothing a rule asks about, and recording every node's parent cost a fifth of
        # the walk): the statement the walk is in is taken apart then, and the whole cell if the node is elsewhere.
        self.parents: dict[ast.AST, ast.AST] = {}
        self._statement_now: ast.AST | None = None
        self._taken_apart: set[int] = set()  # ids of the statements whose expressions' parents are recorded
        self._all_recorded = False
        self._env: ChainMap[str, Value] = ChainMap(dict(earlier.names))
        self._cache: dict[int, Value] = {}
        self._names: dict[int, str | None] = {}
        self._types: Container[type] | None = None  # set by walk()
        self._walkers: dict[type, _Walker] | None = None  # set by walk()
        self._model_moves: dict[int, list[list[ast.expr]]] = {}  # id of a function or class -> _model_moves(it)
        self.memo: dict[str, Any] = {}  # what a rule keeps for the rest of the walk of this cell, by a key of its own
        # The function whose body the walk is in (None at the top level) and the class whose body it is in: what
        # host_code needs to tell preprocessing from the rest (collected only for files with processor classes).
        self.function: ast.FunctionDef | ast.AsyncFunctionDef | None = None
        self._owner: ast.ClassDef | None = None
        self.host = HostCode.of(tree, source)
        #: Called with a function's id before its body is walked again (:meth:`_walk_again`): the visitor drops
        #: what it found there the first time.
        self.forget: Callable[[int], None] | None = None
        self._collect_imports(_imports(tree, source))

    def _adopt(self, node: ast.AST) -> None:
        """Record the parents of the statements a compound statement holds, of its handlers and match cases and of
        theirs, of its with items and of a function's arguments: what :meth:`siblings` and the walk read. The
        expressions the walk goes through are given their parent as it enters them (``_expression(node, parent)``);
        anything else's is recorded when asked for (:meth:`parent`)."""
        parents = self.parents
        kind = type(node)
        for field_name in _BLOCK_FIELDS[kind]:
            for child in getattr(node, field_name):
                parents[child] = node
                if type(child) in _HOLDERS:  # an except handler, a match case
                    for statement in child.body:  # type: ignore[attr-defined]
                        parents[statement] = child
        if kind is ast.With or kind is ast.AsyncWith:
            for item in node.items:  # type: ignore[attr-defined]
                parents[item] = node
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            parents[node.args] = node  # type: ignore[attr-defined]

    @functools.cached_property
    def lines(self) -> list[str]:
        """The source's lines, their endings kept: split when first asked for (by a finding's range or message; most
        files of a library have none to give)."""
        return self.source.splitlines(keepends=True)

    def bindings(self) -> Bindings:
        """What this cell leaves for the next one (call after :meth:`walk`)."""
        return Bindings(dict(self._env.maps[-1]), dict(self.aliases), set(self.imported), self.default_device)

    # ----------------------------------------------------------------------------------------------- source text
    def text(self, node: ast.AST) -> str:
        """The exact source text of a node."""
        return self.text_between((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def text_between(self, start: Position, end: Position) -> str:
        (line, col), (end_line, end_col) = start, end
        if line == end_line:
            text = self.lines[line - 1]
            return text[col:end_col] if text.isascii() else text.encode()[col:end_col].decode()
        first = self.lines[line - 1].encode()[col:].decode()
        middle = "".join(self.lines[line : end_line - 1])
        last = self.lines[end_line - 1].encode()[:end_col].decode()
        return first + middle + last

    def snippet(self, node: ast.AST, limit: int = 48) -> str:
        """A node's text on one line, shortened for messages."""
        text = " ".join(self.text(node).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def append_keyword(self, call: ast.Call, text: str) -> Edit:
        """An edit adding ``text`` (``name=value``) as the call's last argument, keeping the author's layout: right
        after the last argument (before a trailing comma), or inside empty parentheses."""
        arguments = [*call.args, *call.keywords]
        if not arguments:
            return Edit.insert((call.end_lineno, call.end_col_offset - 1), text)  # type: ignore[arg-type]
        last = max(arguments, key=lambda node: (node.end_lineno, node.end_col_offset))
        return Edit.insert((last.end_lineno, last.end_col_offset), f", {text}")  # type: ignore[arg-type]

    @property
    def torch(self) -> str:
        """How this cell spells the torch module (``th`` after ``import torch as th``)."""
        spellings = sorted(alias for alias in self.imported if self.aliases[alias] == "torch")
        return "torch" if not spellings or "torch" in spellings else spellings[0]

    def siblings(self, statement: ast.stmt) -> tuple[list[ast.stmt], int]:
        """The statement list holding ``statement`` and its index there."""
        parent = self.parent(statement) or self.tree
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, field_name, None)
            if isinstance(block, list) and statement in block:
                return block, block.index(statement)
        return [statement], 0

    def parent(self, node: ast.AST) -> ast.AST | None:
        found = self.parents.get(node)
        if found is None and not self._all_recorded and node is not self.tree:
            found = self._record_parents(node)
        return found

    def is_parameter(self, node: ast.AST) -> bool:
        """Whether ``node`` is a name that holds, unchanged, a parameter of a function or lambda it is in (the
        caller's value: ``key`` and ``device`` in ``def as_key(key, device=None): return torch.as_tensor(key,
        device=device)``)."""
        if type(node) is not ast.Name:
            return False
        name = node.id  # type: ignore[attr-defined]
        scope: ast.AST | None = self.parent(node)
        while scope is not None:  # the innermost function or lambda (around this one) that has the parameter
            if type(scope) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
                arguments = scope.args  # type: ignore[attr-defined]
                if name in {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}:
                    break
            scope = self.parent(scope)
        if scope is None:
            return False
        if type(scope) is ast.Lambda:
            return True
        # not bound again on the lines before (`x = np.asarray(x)`)
        line = node.lineno  # type: ignore[attr-defined]
        return not any(
            type(target) is ast.Name and target.id == name  # type: ignore[attr-defined]
            for statement in ast.walk(scope)
            if type(statement) in (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For) and statement.lineno < line  # type: ignore[attr-defined]
            for target in (statement.targets if type(statement) is ast.Assign else [statement.target])  # type: ignore[attr-defined]
        )

    def _record_parents(self, node: ast.AST) -> ast.AST | None:
        """The parent of a node the walk has not recorded: those of the statement being walked are recorded first
        (down to, not into, the statements it holds, which have theirs), then, if the node is elsewhere (or in no
        statement of this cell), those of the whole cell."""
        parents = self.parents
        statement = self._statement_now
        if statement is not None and id(statement) not in self._taken_apart:
            self._taken_apart.add(id(statement))
            nodes = [statement]
            for item in nodes:
                for child in child_nodes(item):
                    parents[child] = item
                    if not isinstance(child, ast.stmt):
                        nodes.append(child)
            found = parents.get(node)
            if found is not None:
                return found
        self._all_recorded = True
        nodes = [self.tree]
        for item in nodes:
            children = child_nodes(item)
            for child in children:
                parents[child] = item
            nodes += children
        return parents.get(node)

    def names_in(self, node: ast.AST) -> list[str]:
        """The names an expression reads or binds (``ast.walk`` over its ``Name`` nodes, without the generators)."""
        found = []
        stack = [node]
        while stack:
            item = stack.pop()
            if type(item) in _LEAVES:
                if type(item) is ast.Name:
                    found.append(item.id)  # type: ignore[attr-defined]
                continue
            stack.extend(reversed(child_nodes(item)))
        return found

    # ----------------------------------------------------------------------------------------------- names
    def _collect_imports(self, imports: Iterable[ast.Import | ast.ImportFrom]) -> None:
        for node in imports:
            if isinstance(node, ast.Import):
                for name in node.names:
                    if name.asname:
                        self.aliases[name.asname] = name.name
                        self.imported.add(name.asname)
                    else:
                        top = name.name.split(".", 1)[0]
                        self.aliases[top] = top
                        self.imported.add(top)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for name in node.names:
                    if name.name != "*":
                        bound = name.asname or name.name
                        self.aliases[bound] = f"{node.module}.{name.name}"
                        self.imported.add(bound)

    def qualified_name(self, node: ast.AST) -> str | None:
        """``torch.nn.functional.one_hot`` for ``F.one_hot`` and the like; None when the base is a variable."""
        kind = type(node)
        if kind is ast.Name:
            # A name's answer is a few lookups: cheaper to work out again than to keep.
            # (Most names are the code's own variables, neither an import nor a builtin: None, whatever the scope
            # binds, without looking through its maps.)
            name = node.id  # type: ignore[attr-defined]
            found = self.aliases.get(name) or _BUILTIN_NAMES.get(name)
            if found is None:
                return None
            for names in self._env.maps:
                if names.get(name) is not None:
                    return found if name in self.imported else None
            return found
        if kind is not ast.Attribute:
            return None
        # Rules ask this of the same attributes many times per statement; the answer holds until a name is bound.
        key = id(node)
        found = self._names.get(key, _UNSEEN)
        if found is _UNSEEN:
            base = self.qualified_name(node.value)  # type: ignore[attr-defined]
            found = self._names[key] = (
                f"{base}.{node.attr}" if base and not base.startswith("builtins.") else None  # type: ignore[attr-defined]
            )
        return found  # type: ignore[return-value]

    def call_name(self, call: ast.Call) -> str | None:
        return self.qualified_name(call.func)

    def callee_name(self, call: ast.Call) -> str | None:
        """The last name of what ``call`` calls, import aliases resolved: ``one_hot`` for ``F.one_hot(x)`` and for
        ``oh(x)`` after ``from torch.nn.functional import one_hot as oh``; ``item`` for ``t.item()``; ``f`` for a
        function ``f`` of the cell. What :attr:`Rule.calls <syncfree.catalog.Rule.calls>` lists."""
        func = call.func
        qualified = self.qualified_name(func)
        if qualified is not None:
            return qualified.rpartition(".")[2]
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
        return None

    def method_call(self, call: ast.AST) -> tuple[ast.expr, str] | None:
        """``(receiver, method)`` for ``receiver.method(...)`` where the receiver is a value, not a module path."""
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            if self.qualified_name(call.func) is None:
                return call.func.value, call.func.attr
        return None

    def tensor_operation(
        self, call: ast.AST, names: Iterable[str], *, unknown_receiver: bool = False
    ) -> tuple[ast.Call, ast.expr, str, Certainty] | None:
        """Match ``torch.name(t, ...)`` or ``t.name(...)`` for a name in ``names``.

        Returns ``(call, t, name, certainty)`` where certainty comes from ``t`` (and the other tensor arguments of
        the function form). A torch function's unknown argument is a tensor (likely); an unknown method receiver
        counts only with ``unknown_receiver`` (NumPy and pandas share names like ``unique`` and ``nonzero``).
        """
        if not isinstance(call, ast.Call):
            return None
        names = set(names)
        qualified = self.call_name(call)
        if qualified is not None:
            short = qualified.rsplit(".", 1)[-1]
            if qualified != f"torch.{short}" or short not in names or not call.args:
                return None
            operand = call.args[0]
            certainties = [self.tensor_certainty(a, unknown=True) for a in call.args if not isinstance(a, ast.Starred)]
            certainties = [c for c in certainties[:1] if c] + [c for c in certainties[1:] if c == "certain"]
            if not certainties:
                return None
            return call, operand, short, "certain" if "certain" in certainties else "likely"
        method = self.method_call(call)
        if method is None or method[1] not in names:
            return None
        certainty = self.tensor_certainty(method[0], unknown=unknown_receiver)
        if certainty is None:
            argument_certainties = [self.tensor_certainty(a) for a in call.args if not isinstance(a, ast.Starred)]
            if "certain" in argument_certainties and self.value(method[0]).kind in ("tensor", "unknown"):
                certainty = "certain"
        return (call, method[0], method[1], certainty) if certainty else None

    # ----------------------------------------------------------------------------------------------- queries
    def value(self, node: ast.AST) -> Value:
        """The abstract value of an expression in the environment of the statement being visited."""
        if type(node) is ast.Name:  # what the name holds now (the cache would hold the same: it goes at each bind)
            name = node.id  # type: ignore[attr-defined]
            for names in self._env.maps:
                found = names.get(name)
                if found is not None:
                    return found
            return UNKNOWN
        cache = self._cache
        key = id(node)
        found = cache.get(key)
        if found is not None:
            return found
        # The operand a chain's next link would be (as below): when there is none, or it is a name or known already,
        # the node is evaluated on its own (most nodes), without the chain's list and loop.
        kind = type(node)
        if kind is ast.Attribute or kind is ast.Subscript:
            inner = node.value  # type: ignore[attr-defined]
        elif kind is ast.Call:
            inner = node.func.value if type(node.func) is ast.Attribute else None  # type: ignore[attr-defined]
        elif kind is ast.BinOp:
            inner = node.left  # type: ignore[attr-defined]
        elif kind is ast.Compare:
            # (`x.attr is None`, `k in d`: Python's own bool, whatever the left side holds (_evaluate), which is not
            # worked out first)
            ops = node.ops  # type: ignore[attr-defined]
            if len(ops) == 1:
                python = type(ops[0]) in _PYTHON_COMPARISONS
            else:
                python = all(type(op) in _PYTHON_COMPARISONS for op in ops)
            inner = None if python else node.left  # type: ignore[attr-defined]
        elif kind is ast.UnaryOp:
            inner = node.operand  # type: ignore[attr-defined]
        else:
            inner = None
        if inner is None or type(inner) is ast.Name or id(inner) in cache:
            found = cache[key] = self._evaluate(node)
            return found
        # Evaluate a long left-leaning chain (x + x + ..., t.a().b().c()) from its innermost operand out, so that
        # each step finds its operand cached and the recursion stays shallow.
        # (A name ends the chain: its value is read from the scope, not kept.)
        chain = []
        inner: Any = node
        while inner is not None and id(inner) not in cache:
            chain.append(inner)
            kind = type(inner)
            if kind is ast.Attribute or kind is ast.Subscript:
                inner = inner.value
            elif kind is ast.Call:
                inner = inner.func.value if type(inner.func) is ast.Attribute else None
            elif kind is ast.BinOp or kind is ast.Compare:
                inner = inner.left
            elif kind is ast.UnaryOp:
                inner = inner.operand
            else:
                break
            if type(inner) is ast.Name:
                break
        for link in reversed(chain):
            cache[id(link)] = self._evaluate(link)
        return cache[id(node)]

    def tensor_certainty(self, node: ast.AST, *, unknown: bool = False) -> Certainty | None:
        """How sure a sync is when ``node`` is the operand that must be on CUDA.

        certain: a tensor known on CUDA; likely: a tensor of unknown device (or, with ``unknown=True``, a value of
        unknown kind: for operations only tensors have, like ``.item()``); None: known CPU, NumPy or Python data.
        """
        value = self.value(node)
        if value.kind == "tensor":
            if value.device is None:
                # (on the device its caller picks, the CPU by default: nothing in the text puts it on the GPU)
                return "possible" if value.const == CPU_DEFAULT else "likely"
            return "certain" if value.device == "cuda" else None
        if value.kind == "maybe_tensor":
            if unknown and value.const is None:
                # grid_thw: list[int] | Tensor, then grid_thw[0].item(): only the tensor has the method
                return "likely"
            return "possible"  # a tensor on some paths only (`n: int | Tensor`): the premise is not established
        if value.kind == "unknown" and unknown:
            return "certain" if value.device == "cuda" else "likely"
        return None

    def device_argument(self, node: ast.AST | None) -> tuple[bool, Device | None]:
        """Whether ``node`` names a device and which: ``'cuda'``, ``torch.device('cuda')``, a device variable...

        Returns ``(is_device, device)``: ``(True, None)`` for a device the text does not settle (a name ``device``
        from an earlier cell); ``(False, None)`` for something that is no device (a dtype).
        """
        if node is None:
            return False, None
        if isinstance(node, ast.Constant):
            device = device_of_literal(node.value)
            if device:
                return True, device
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                return True, "cuda"  # .to(0) / .cuda(0): a CUDA device index
            return False, None
        value = self.value(node)
        if value.kind == "device":
            return True, value.device
        if value.kind == "tensor":  # .to(other): other's device
            return True, value.device
        if value.kind == "maybe_tensor" and value.const is not None:
            return True, None  # .to(x) for x: NdarrayOrTensor: the caller's device (is_callers_device)
        if isinstance(node, ast.Name) and value.kind in ("unknown", "python") and "dev" in node.id.lower():
            # (a parameter `device: str = "cpu"` is a device all the same, the caller's)
            return True, device_of_literal(value.const)
        if isinstance(node, ast.Attribute) and node.attr == "device":
            return True, None
        return False, None

    def dtype_family(self, node: ast.AST | None) -> Literal["bool", "int", "float"] | None:
        if node is None:
            return None
        name = self.qualified_name(node)
        if name and name.startswith("torch."):
            return _DTYPES.get(name.rsplit(".", 1)[1])  # type: ignore[return-value]
        return None

    # ----------------------------------------------------------------------------------------------- evaluation
    def _bound(self, name: str) -> Value | None:
        """What ``name`` holds, None when unbound (``ChainMap`` lookups, without its generator per lookup)."""
        for names in self._env.maps:
            value = names.get(name)
            if value is not None:
                return value
        return None

    def _evaluate(self, node: ast.AST) -> Value:
        kind = type(node)  # parsed trees hold the node classes themselves, no subclasses
        if kind is ast.Name:
            bound = self._bound(node.id)  # type: ignore[attr-defined]
            return UNKNOWN if bound is None else bound
        if kind is ast.Call:
            return self._call(node)  # type: ignore[arg-type]
        if kind is ast.Attribute:
            return self._attribute(node)  # type: ignore[arg-type]
        # (by the node's class, not isinstance: a parsed tree holds no subclasses, and the tests below were a
        # third of the walk's isinstance calls)
        if kind is ast.Constant:
            if isinstance(node.value, str) and device_of_literal(node.value):  # type: ignore[attr-defined]
                return Value("device", device_of_literal(node.value), const=node.value)  # type: ignore[attr-defined]
            return Value("python", const=node.value)  # type: ignore[attr-defined]
        if kind is ast.Subscript:
            base = self.value(node.value)  # type: ignore[attr-defined]
            if base.kind == "tensor":
                return Value("tensor", base.device, base.dtype, const=base.const,
                             ndim=self._basic_index_ndim(base.ndim, node) if base.ndim is not None else None)
            if base.kind in ("tensors", "module"):
                return Value("tensor" if base.kind == "tensors" else "module", base.device)
            if base.kind == "numpy" or base.kind == "maybe_tensor" or base.kind == "host":
                return base  # (`df["wav"]`: a column of a pandas table, host data)
            if base.kind == "python" and base.const is None:
                return PYTHON  # an element of a shape, of a list of numbers
            return UNKNOWN
        if kind is ast.BinOp:
            return self._operator([node.left, node.right], boolean=type(node.op) in _BITWISE)  # type: ignore[attr-defined]
        if kind is ast.UnaryOp:
            op = type(node.op)  # type: ignore[attr-defined]
            if op is ast.Not:
                return PYTHON
            operand = self.value(node.operand)  # type: ignore[attr-defined]
            if op is ast.USub and operand.kind == "python" and isinstance(operand.const, (int, float)):
                return Value("python", const=-operand.const)  # type: ignore[operator]
            # (`-torch.ones(n, device=self._device)`: where its operand is)
            return replace(operand, const=CPU_DEFAULT if operand.const == CPU_DEFAULT else None, int_data=None)
        if kind is ast.Compare:
            ops = node.ops  # type: ignore[attr-defined]
            if (type(ops[0]) in _PYTHON_COMPARISONS if len(ops) == 1
                    else all(type(op) in _PYTHON_COMPARISONS for op in ops)):
                return PYTHON  # `t is None`, `k in d`: Python answers these with a bool of its own
            return self._operator([node.left, *node.comparators], comparison=True)  # type: ignore[attr-defined]
        if kind is ast.IfExp:
            if self._none_made_cpu(node):  # type: ignore[arg-type]
                # torch.device(device) if device is not None else torch.device("cpu"): the caller's, the CPU unless
                # it asks for another
                return CPU_BY_DEFAULT
            body, orelse = self.value(node.body), self.value(node.orelse)  # type: ignore[attr-defined]
            if body.kind == orelse.kind == "device" and "cuda" in (body.device, orelse.device):
                # torch.device("cuda" if torch.cuda.is_available() else "cpu"): on a GPU machine, CUDA.
                return Value("device", "cuda")
            return join(body, orelse)
        if kind is ast.BoolOp:
            if self._none_made_cpu(node):  # type: ignore[arg-type]
                return CPU_BY_DEFAULT  # torch.device(device or "cpu") of a parameter `device=None`
            values = [self.value(v) for v in node.values]  # type: ignore[attr-defined]
            if all(v == values[0] for v in values):
                return values[0]
            if all(v.kind == "device" for v in values):
                return functools.reduce(join, values)  # `device or "cpu"`: the caller's, the CPU by default
            return UNKNOWN
        if kind is ast.Tuple:
            return Value("sequence", int_data=int_list_literal(node), const=TUPLE)
        if kind is ast.List:
            if not node.elts:  # type: ignore[attr-defined]
                return Value("sequence", const=EMPTY)
            strings = all(type(e) is ast.Constant and isinstance(e.value, str) for e in node.elts)  # type: ignore[attr-defined]
            return Value("sequence", int_data=int_list_literal(node), const=STRINGS if strings else None)
        if kind is ast.Dict:
            return self._dict_display(node)  # type: ignore[arg-type]
        if kind in _SEQUENCES:
            return Value("sequence")
        if kind is ast.JoinedStr:
            parts = node.values  # type: ignore[attr-defined]
            if len(parts) == 2 and is_constant(parts[0], "cuda:") and type(parts[1]) is ast.FormattedValue:
                return Value("device", "cuda")  # f"cuda:{rank}": a CUDA device of an index worked out at run time
            return PYTHON
        if kind is ast.NamedExpr:
            return self.value(node.value)  # type: ignore[attr-defined]
        return UNKNOWN

    def _self_attribute(self, node: ast.Attribute) -> Value | None:
        """What ``self.name`` holds in a method of a class of the file, as far as the class's text tells; None: not
        told."""
        stored = self._bound(_ATTRIBUTE + node.attr)
        if stored is not None and stored is not UNKNOWN:
            # what this method stored in it on the way here, joined over the branches as a name's value is
            # (`self.sigmas = s.to("cpu")`, an if/elif chain of CPU schedules), or a `self.method()` it called
            # before stored (_record_call)
            return stored
        owner = self._method_owner[id(self.function)]
        stored = owner.attributes.get(node.attr)
        if stored is not None and owner.seen[node.attr] == owner.stores.get(node.attr):
            # self.timesteps: what the class's methods store in it, once the walk has seen every store the
            # class's text holds (a store in a method walked later may change it: until then, unknown)
            if stored.const == EMPTY and self._cpu_list(owner, node.attr):
                return Value("tensors", "cpu")  # `self.preds = []`, then only `self.preds.append(p.cpu())`
            return stored
        if node.attr not in owner.stores:
            return self._unstored_attribute(owner, node.attr)
        return None

    def _dict_display(self, node: ast.Dict) -> Value:
        """``{}``: an empty dict, what is stored in it later decides (:func:`join`); ``{k: torch.zeros(n), ...}``, every
        value a CPU tensor and no ``**`` unpacking: a dict of CPU tensors (:data:`DICT`), its items on the CPU (a
        profiler's timings)."""
        if not node.keys:
            return Value("sequence", const=EMPTY)
        if any(key is None for key in node.keys):
            return Value("sequence")
        for item in node.values:
            value = self.value(item)
            if value.kind != "tensor" or value.device != "cpu":
                return Value("sequence")
        return Value("tensors", "cpu", const=DICT)

    def _attribute(self, node: ast.Attribute) -> Value:
        if self.qualified_name(node) is not None:
            return UNKNOWN  # a module attribute such as torch.float32
        if self.self_name is not None and type(node.value) is ast.Name and node.value.id == self.self_name:  # type: ignore[attr-defined]
            found = self._self_attribute(node)
            if found is not None:
                if found.const == CPU_DEFAULT and found.kind == "device":
                    owner = self._method_owner[id(self.function)]
                    if owner.mixed or any(ancestor.mixed for ancestor in owner.ancestors):
                        # the device an object keeps whose state takes the caller's data as it is (timm's
                        # evaluators): that data's device
                        return Value("device")
                return found
        base = self.value(node.value)
        if base.kind == "tensor":
            if node.attr in _TENSOR_PYTHON_ATTRIBUTES:
                return PYTHON
            if node.attr == "device":
                return CPU_BY_DEFAULT if base.const == CPU_DEFAULT else Value("device", base.device)
            if node.attr in _TENSOR_SAME_ATTRIBUTES:
                return Value("tensor", base.device, base.dtype if node.attr not in ("grad", "real", "imag") else None)
            if base.device == "cpu" and base.const == MOVED:
                # `boxes = boxes.cpu()` of an object with tensors (a detection result, a graph, a batch): what it
                # holds is on the CPU now (`boxes.xywhn.tolist()`, `d.cls.item()` copy nothing)
                return Value("tensor", "cpu", const=MOVED)
            return UNKNOWN
        if base.kind == "module":
            attribute = node.attr
            if attribute == "device":
                return Value("device", base.device)
            if attribute in _PARAMETER_NAMES:
                return Value("tensor", base.device)  # conv.weight: a parameter, on the module's device
            if attribute in ("dtype", "training"):
                return PYTHON
            return Value("module", base.device)  # a submodule or a parameter: on the module's device
        if base.kind == "numpy":
            return Value("numpy") if node.attr in ("T", "real", "imag") else PYTHON
        if base.kind == "host":
            return HOST_OBJECT  # df.wav, df.values: a table's columns and data, in host memory
        if base.kind == "maybe_tensor" and base.const is not None and node.attr == "device":
            return MAYBE_DEVICE  # the caller's device, the CPU for host data
        if base.kind == "unknown" and node.attr in ("shape", "ndim"):
            return PYTHON  # a tensor's or an array's sizes: Python ints either way
        if base.kind == "unknown" and type(base.const) is tuple and base.const[0] is _INSTANCE:
            # `colors.pose_palette` of `colors = Colors()`: what the class's methods store in it, once the walk has
            # seen every store its text holds, when that is host data (a palette of `np.array(...)`); a tensor of
            # unknown device or an untold value says nothing more than the attribute did.
            info: _ClassInfo = base.const[1]
            stored = info.attributes.get(node.attr)
            if stored is not None and info.seen.get(node.attr) == info.stores.get(node.attr) and (
                stored.kind in _HOST_KINDS or (stored.kind == "tensor" and stored.device == "cpu")
            ):
                return stored
        if base.kind == "unknown" and _names_a_config(node.value):
            return PYTHON  # self.config.pad_token_id, config.hidden_size: settings, not tensors
        return UNKNOWN

    def _operator(self, operands: list[ast.expr], *, comparison: bool = False, boolean: bool = False) -> Value:
        values = [self.value(operand) for operand in operands]
        kinds = {v.kind for v in values}  # (one pass, for the tests below that look at kinds only)
        if "maybe_tensor" in kinds and _partly_cpu(values):
            return PARTLY_CPU
        if "tensor" in kinds:
            dtypes = {v.dtype for v in values if v.kind == "tensor"}
            dtype = "bool" if comparison or (boolean and dtypes == {"bool"}) else None
            ndims = [v.ndim for v in values if v.kind != "python"]
            ndim = max(ndims) if ndims and None not in ndims else None  # broadcasting
            device = combine_devices(values)
            if device is None and _host_result(values, comparison=comparison):
                device = "cpu"
            return Value("tensor", device, dtype, ndim=ndim, const=_placed(values))
        if "numpy" in kinds and kinds <= _NUMPY_OPERANDS:
            return Value("numpy")
        if "numpy" in kinds and kinds <= _MAYBE_NUMPY_OPERANDS:
            # NumPy data with a value the text does not tell: an array, or a tensor if that value is one (torch's
            # __array_priority__ wins): a sync on it is possible
            return MAYBE_NUMPY
        if kinds <= _PYTHON_OPERANDS:
            return PYTHON
        if "maybe_tensor" in kinds:  # `n > 0` for `n: int | Tensor`: a tensor when n is one
            return MAYBE_NUMPY if any(v.kind == "maybe_tensor" and v.const == "numpy" for v in values) else MAYBE_TENSOR
        if "unknown" in kinds and any(v.kind == "unknown" and v.device == "cuda" for v in values):
            return Value("unknown", "cuda")
        return UNKNOWN

    def _tensor_operands(self, call: ast.Call) -> list[Value]:
        """Values of a call's arguments, looking inside list and tuple literals (``torch.stack([a, b])``)."""
        values = []
        for argument in [*call.args, *(k.value for k in call.keywords if k.arg not in ("dtype", "out"))]:
            if isinstance(argument, (ast.List, ast.Tuple)):
                values.extend(self.value(element) for element in argument.elts)
            elif isinstance(argument, ast.Starred):
                values.append(UNKNOWN)
            else:
                value = self.value(argument)
                # a list of tensors (`torch.cat(srcs)`): its tensors are the operands
                values.append(element_of(value) if value.kind == "tensors" else value)
        return values

    def _call(self, call: ast.Call) -> Value:
        name = self.call_name(call)
        if name is not None:
            return self._function_call(name, call)
        method = self.method_call(call)
        if method is not None:
            return self._method_call(method[0], method[1], call)
        callee = self.value(call.func)
        if callee.kind == "module":
            operands = [v for v in self._tensor_operands(call) if v.kind in ("tensor", "unknown")]
            inputs = combine_devices(operands, strict=False)
            # A module's device is its parameters' (None for a module without any: a loss, an activation); a CUDA
            # input means the output is on CUDA either way (a CPU module with parameters would have raised).
            device = "cuda" if inputs == "cuda" else callee.device or inputs
            return Value("tensor", device)
        if callee.kind == "module_class":
            # (an nn.Module subclass of the file: its instances' calls reach its forward, _record_call)
            return Value("module", "cpu", const=callee.const)
        if callee.kind == "function":
            self._read_return(id(callee.const))
            returned = self.returns.get(id(callee.const))
            if returned is not None and returned.kind == "tensor" and returned.device is None and (
                self._on_default_device(callee.const, call)
            ):
                # `int(as_key_tensor([index]))`: a function of the module whose return is of no one device (its
                # calls pass different devices) given host data and its device left at None: made on the CPU
                return Value("tensor", self.default_device or "cpu", returned.dtype, ndim=returned.ndim)
            return returned or self._passed_through(call)
        if callee is UNKNOWN and type(call.func) is ast.Name:
            found = self._classes.get(call.func.id)  # type: ignore[attr-defined]
            if found is not None and not found[0].tensor:
                # `colors = Colors()`: an object of a class of the file, of unknown kind as before, whose attributes
                # are what the class's methods store in them (_attribute)
                return Value("unknown", const=(_INSTANCE, found[0]))
        return self._passed_through(call)

    def _function_call(self, name: str, call: ast.Call) -> Value:
        short = name.rpartition(".")[2]  # (`torch()`: a module called, a name without a dot)
        # What the tests below come to for another library's function and for a builtin, without going through
        # them (a tenth of the static pass's calls): a test added below for a name outside _KNOWN_ROOTS, or for a
        # builtin, goes above these two.
        if not name.startswith(_KNOWN_ROOTS):
            if name.startswith(_HOST_LIBRARIES):
                return HOST_OBJECT  # pd.read_csv(...), PIL.Image.open(...): a table, an image in host memory
            if short in _PYTHON_RESULTS:
                return PYTHON
            passed = self._passed_through(call)
            if passed is UNKNOWN and not short[:1].isupper() and (call.args or call.keywords) and self._cpu_arguments(call):
                # A function (not a class) of another module given CPU tensors and host data only (a test's
                # torch.randn, a dataset's tensors, no device): it computes where they are, on the CPU
                return Value("tensor", "cpu")
            return passed
        if name.startswith("builtins.") and short not in _PYTHON_RESULTS:
            return self._builtin_call(short, call)
        if name in FACTORIES:
            return self._factory(name, call)
        if name == "torch.device":
            argument = call.args[0] if call.args else keyword_value(call, "type")
            if self.cpu_by_default(argument):
                return CPU_BY_DEFAULT  # torch.device(device) of a parameter `device="cpu"`: the caller's, the CPU by default
            is_device, device = self.device_argument(argument)
            return Value("device", device if is_device else None)
        if name in ("torch.cuda.Event", "torch.Event"):
            return Value("event")
        if name in ("torch.cuda.Stream", "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.Stream"):
            return Value("stream")
        if name in GRAD_SCALERS:
            return self._grad_scaler(name, call)
        if name.startswith("torch.optim.") and short[:1].isupper() and name.count(".") == 2:
            # fused=True: the optimizer takes GradScaler's overflow flag on the GPU (_step_supports_amp_scaling)
            fused = is_constant(keyword_value(call, "fused"), True)
            return Value("optimizer", const="fused" if fused else None)
        if name in _MODULE_WRAPPERS and call.args:
            return self.value(call.args[0])
        if name.startswith("torch.distributions.") and short[:1].isupper():
            return self._distribution(call)
        if name.startswith("torch.distributed.") and not short[:1].isupper():  # functions, not classes
            return Value("work") if is_constant(keyword_value(call, "async_op"), True) else PYTHON
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"):
            # A parameter or buffer follows its module to the module's device: where its data was made says nothing.
            data = self.value(call.args[0]) if call.args else UNKNOWN
            return Value("tensor", "cuda" if data.device == "cuda" else None, data.dtype, ndim=data.ndim)
        if name in ("torch.nn.ParameterDict", "torch.nn.ParameterList"):
            return Value("tensors", self.default_device)  # its items are parameters (tensors), made on the CPU
        if name.startswith("torch.nn.") and not name.startswith("torch.nn.functional.") and short[:1].isupper():
            if short in _STATELESS_MODULES or short.endswith(_STATELESS_MODULE_SUFFIXES):
                return Value("module")  # no parameters: it computes wherever its inputs are
            is_device, device = self.device_argument(keyword_value(call, "device"))
            return Value("module", device if is_device else self.default_device)
        if name == "torch.Tensor":
            # torch.Tensor([...]) / torch.Tensor(2, 3): a float tensor on the default device, as torch.FloatTensor
            return Value("tensor", self.default_device, "float",
                         const=HOST_DATA if self.default_device == "cpu" and call.args else None)
        legacy = self.legacy_tensor_class(call.func)
        if legacy is not None:
            return Value("tensor", legacy[0], _DTYPES.get(legacy[1]))  # type: ignore[arg-type]
        if name.startswith(("torch.cuda.", "torch.backends.", "torch.testing.")) or short in _PYTHON_RESULTS:
            return PYTHON
        if name == "torch.Size":
            return PYTHON  # a tuple of ints: `x.shape[-2:] == torch.Size([4, 2])` compares on the host
        if name == "torch.load":
            return UNKNOWN  # whatever was saved: a checkpoint's dict as a rule, not a tensor
        if name.startswith("torch.") and name.count(".") == 1 and short.startswith(("is_", "are_", "get_", "_has_")):
            # torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled(), torch.get_..., and
            # torch._has_compatible_shallow_copy_type(a, b), a Python bool (not `_is_`: torch._is_all_true gives a
            # tensor)
            return PYTHON
        if name.rsplit(".", 1)[0] in _TENSOR_NAMESPACES:
            operands = self._tensor_operands(call)
            if name == "torch.where" and len(call.args) == 1 and not call.keywords:
                return Value("tensors", combine_devices(operands))
            if _partly_cpu(operands):
                return PARTLY_CPU  # torch.cumprod(alphas): where its operand is
            dtype = "bool" if short in _BOOL_RESULTS else "int" if short in _INT_RESULTS else None
            device = combine_devices(operands)
            if device is None and _host_result(operands, comparison=False):
                device = "cpu"  # torch.clamp(cpu_tensor, 0, w): a CPU tensor of 1+ dims keeps it on the CPU
            return Value("tensor", device, dtype, const=_placed(operands))
        if name == "numpy.ndindex":
            return PYTHON  # it yields tuples of Python ints: `for b, n in np.ndindex(*shape)`
        if name.startswith("numpy."):
            return Value("numpy")
        if name.startswith("builtins."):
            return self._builtin_call(short, call)
        if name.startswith("math."):
            return PYTHON
        return self._passed_through(call)

    def _on_default_device(self, function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call) -> bool:
        """Whether ``call`` of a function defined at the module's top level passes it host data only (numbers, lists,
        arrays, CPU tensors) and leaves its device parameter (``device=None``) at None: the tensors it makes are
        made on the default device, whatever other calls pass it."""
        if self.parents.get(function) is not self.tree:
            return False  # a method reads its object, a nested function its definer's names
        signature = function.args
        positional = [*signature.posonlyargs, *signature.args]
        devices = [name for name, default in _defaults(signature).items()
                   if "dev" in name.lower() and is_constant(default, None)]
        if len(devices) != 1:
            return False
        passed = dict(zip([a.arg for a in positional], call.args))
        for item in call.keywords:
            if item.arg is None:
                return False  # f(**kwargs): the device may be in it
            passed[item.arg] = item.value
        if any(type(argument) is ast.Starred for argument in call.args) or not passed:
            return False
        device = passed.pop(devices[0], None)
        if device is not None and not is_constant(device, None):
            return False
        for argument in passed.values():
            value = self.value(argument)
            if not (value.kind in _HOST_KINDS or (value.kind == "tensor" and value.device == "cpu")):
                return False
        return True

    def _cpu_arguments(self, call: ast.Call) -> bool:
        """Whether a call's arguments are CPU tensors, one at least, and host data: nothing the text does not tell
        (a tensor of unknown device, an object that may hold one), no device but the CPU."""
        cpu = False
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            if type(argument) is ast.Starred:
                return False
            value = self.value(argument)
            if value.kind == "tensor" or value.kind == "device":
                if value.device != "cpu":
                    return False
                cpu = cpu or value.kind == "tensor"
            elif value.kind not in _HOST_KINDS:
                return False
        return cpu

    def _passed_through(self, call: ast.Call) -> Value:
        """A copy of the caller's NumPy-or-tensor data (``deepcopy(x)`` for ``x: NdarrayOrTensor``), or of a NumPy
        array: what it copies. (Not what other functions give for it: ``convert_data_type(x, torch.Tensor)`` is a
        tensor, the caller's, as the tensors a model's helper gets are; a model calls its NMS with them on the GPU.)"""
        if len(call.args) == 1 and self.call_name(call) in _COPIES:
            value = self.value(call.args[0])
            if value.kind in ("maybe_tensor", "numpy"):
                return value
        return UNKNOWN

    def _distribution(self, call: ast.Call) -> Value:
        """``torch.distributions.Beta(a, b)``: a ``distribution`` on the default device when every parameter is a
        Python number (torch/distributions/utils.py ``broadcast_all`` makes numbers into ``torch.tensor(v)`` of the
        default dtype, without a device, unless a tensor is among them; ``Beta`` turns two numbers into
        ``torch.tensor([float(a), float(b)])``), on its tensors' device when they share a known one, else of
        unknown device. What ``sample()``/``rsample()`` of it return is on that device."""
        operands = [UNKNOWN if isinstance(a, ast.Starred) else self.value(a) for a in call.args]
        operands += [self.value(k.value) for k in call.keywords if k.arg not in (None, "validate_args")]
        if not operands or any(v.kind not in ("python", "tensor") for v in operands):
            return Value("distribution")
        tensors = [v for v in operands if v.kind == "tensor"]
        if not tensors:
            return Value("distribution", self.default_device)
        return Value("distribution", combine_devices(tensors))

    def _grad_scaler(self, name: str, call: ast.Call) -> Value:
        """A GradScaler; ``const`` "off" when the text shows it does nothing on a GPU (``enabled=False``, or a
        ``torch.amp.GradScaler("cpu")`` whose flags live on the CPU)."""
        enabled = keyword_value(call, "enabled")
        device = call.args[0] if call.args and name == "torch.amp.GradScaler" else keyword_value(call, "device")
        if is_constant(enabled, False) or (device is not None and self.device_argument(device) == (True, "cpu")):
            return Value("grad_scaler", const="off")
        return Value("grad_scaler")

    def _builtin_call(self, short: str, call: ast.Call) -> Value:
        if short in ("len", "int", "float", "bool", "str", "repr", "isinstance", "hasattr", "format", "round", "id"):
            if short == "round" and call.args and self.value(call.args[0]).kind == "tensor":
                return Value("tensor", self.value(call.args[0]).device)
            return PYTHON
        if short in ("abs",) and call.args:
            return self.value(call.args[0])
        if short in ("max", "min") and len(call.args) >= 2:
            values = [self.value(a) for a in call.args]
            if any(v.kind == "tensor" for v in values):
                return Value("tensor", combine_devices(values))
            return PYTHON if all(v.kind == "python" for v in values) else UNKNOWN
        if short == "range":
            return PYTHON  # iterating it yields Python ints
        if short == "tuple":
            return Value("sequence", const=TUPLE)
        if short in ("list", "sorted", "zip", "enumerate", "reversed"):
            return Value("sequence")
        return UNKNOWN

    def _factory(self, name: str, call: ast.Call) -> Value:
        short = name.rsplit(".", 1)[1]
        data = call.args[0] if call.args else keyword_value(call, "data")
        is_device, device = self.device_argument(keyword_value(call, "device"))
        # torch.zeros(n, device=self._device) for a device the caller picks, the CPU by default (zeros_like of a
        # tensor made so): there too
        placed = CPU_DEFAULT if is_device and device is None and self.cpu_by_default(keyword_value(call, "device")) or (
            not is_device and short.endswith("_like") and call.args and self.cpu_by_default(call.args[0])) else None
        if is_device and device is None and placed is None and self.is_callers_device(keyword_value(call, "device")):
            return PARTLY_CPU  # torch.zeros(n, device=x.device) for x: NdarrayOrTensor: where the caller's data is
        if not is_device:
            if short.endswith("_like") and call.args:
                device = self.value(call.args[0]).device
            elif short in ("from_numpy", "frombuffer"):
                device = "cpu"
            elif short in ("as_tensor", "asarray") and data is not None and self.value(data).kind == "tensor":
                device = self.value(data).device
            elif any(item.arg is None for item in call.keywords):
                device = None  # torch.eye(n, **dd): the device may be in there
            else:
                device = self.default_device
        dtype = self.dtype_family(keyword_value(call, "dtype"))
        int_data = None
        if short in ("tensor", "as_tensor", "asarray") and data is not None:
            literal = number_literal(data)
            if dtype is None and literal is not None:
                dtype = "bool" if isinstance(literal, bool) else "int" if isinstance(literal, int) else "float"
            int_data = int_list_literal(data)
            if dtype is None and int_data is not None:
                dtype = "int"
            elif dtype is None and isinstance(data, (ast.List, ast.Tuple)) and data.elts:
                if all(isinstance(number_literal(e), bool) for e in data.elts):
                    dtype = "bool"
            if dtype not in (None, "int"):
                int_data = None
        elif short in ("randint", "randperm", "randint_like"):
            dtype = dtype or "int"
        elif short in ("arange", "range"):
            bounds = [number_literal(a) for a in call.args]
            if bounds and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
                dtype = dtype or "int"
                if dtype == "int" and len(bounds) <= 3:
                    int_data = tuple(range(*bounds))  # type: ignore[arg-type]
        elif short in ("full", "ones") and dtype in ("int", None):
            int_data = self._constant_fill(short, call, dtype)
            if short == "full" and dtype is None and call.args[1:2]:
                fill = number_literal(call.args[1])
                dtype = "bool" if isinstance(fill, bool) else "int" if isinstance(fill, int) else dtype
        pinned = is_constant(keyword_value(call, "pin_memory"), True)
        return Value("tensor", device, dtype, pinned=pinned, int_data=int_data, ndim=self._factory_ndim(short, call, data),
                     const=placed or (MOVED if is_device and device is None else HOST_DATA if device == "cpu" and short in
                     _DATA_FACTORIES else None))

    def _basic_index_ndim(self, ndim: int, subscript: ast.Subscript) -> int | None:
        """The dimensions left by a basic index of a tensor of ``ndim`` dimensions (``x[0]``, ``x[:, i]``,
        ``x[None]``): an integer takes one away, a slice keeps one, None adds one; None where the text does not
        settle it (an index tensor, a list, an Ellipsis)."""
        for part in index_parts(subscript):
            kind = type(part)
            if kind is ast.Slice:
                continue
            if kind is ast.Constant and part.value is None:  # type: ignore[attr-defined]
                ndim += 1
                continue
            value = self.value(part)
            if value.kind == "python" and (value.const is None or type(value.const) is int):
                ndim -= 1  # (a name bound to a number, `n - 1`, a literal)
            elif value.kind == "tensor" and value.ndim == 0:
                ndim -= 1
            else:
                return None
        return ndim if ndim >= 0 else None

    def _factory_ndim(self, short: str, call: ast.Call, data: ast.expr | None) -> int | None:
        """The number of dimensions a factory call creates, when its arguments spell it out."""
        if short in ("tensor", "as_tensor", "asarray"):
            depth, node = 0, data
            while isinstance(node, (ast.List, ast.Tuple)) and node.elts:
                depth, node = depth + 1, node.elts[0]
            if isinstance(node, (ast.List, ast.Tuple)):
                return depth + 1  # an empty list: one dimension of size 0
            if number_literal(node) is not None:
                return depth
            return self.value(data).ndim if depth == 0 and data is not None else None
        if short.endswith("_like"):
            return self.value(call.args[0]).ndim if call.args else None
        if short in ("arange", "range", "linspace", "logspace", "randperm", "frombuffer"):
            return 1
        if short == "eye":
            return 2
        if short == "scalar_tensor":
            return 0
        size = keyword_value(call, "size")
        if size is None and short == "randint":
            size = call.args[-1] if call.args else None
        elif size is None and call.args:
            size = call.args[0] if short == "full" or isinstance(call.args[0], (ast.List, ast.Tuple)) else None
            if size is None and short in ("zeros", "ones", "empty", "rand", "randn"):
                if any(isinstance(a, ast.Starred) for a in call.args):
                    return None
                return len(call.args)  # torch.zeros(8, 8)
        if isinstance(size, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in size.elts):
            return len(size.elts)
        return None

    def _constant_fill(self, short: str, call: ast.Call, dtype: str | None) -> tuple[int, ...] | None:
        """Data of ``torch.full((n,), k)`` / ``torch.ones(n, dtype=torch.long)`` with literal n and k."""
        if not call.args:
            return None
        size_node = call.args[0]
        sizes = int_list_literal(size_node) if isinstance(size_node, (ast.List, ast.Tuple)) else None
        if sizes is None:
            single = number_literal(size_node)
            sizes = (single,) if isinstance(single, int) and not isinstance(single, bool) else None
        if sizes is None or len(sizes) != 1 or sizes[0] > 1_000_000:
            return None
        if short == "ones":
            return (1,) * sizes[0] if dtype == "int" else None
        fill = number_literal(call.args[1]) if len(call.args) > 1 else None
        if isinstance(fill, int) and not isinstance(fill, bool):
            return (fill,) * sizes[0]
        return None

    def _method_call(self, receiver_node: ast.expr, method: str, call: ast.Call) -> Value:
        if self.self_name is not None and type(call.func) is ast.Attribute:
            own = self._own_method(call.func)  # type: ignore[arg-type]
            if own is not None:
                self._read_return(id(own))
                return self.returns.get(id(own), UNKNOWN)  # self.method(...): what that method returns
        receiver = self.value(receiver_node)
        if receiver.kind == "unknown" and method in _NUMPY_METHODS:
            return Value("numpy")  # x.astype(np.int16), rng.choice(n, k): no tensor has these methods
        if receiver.kind in ("tensor", "unknown"):
            return self._tensor_method(receiver, receiver_node, method, call)
        if receiver.kind == "host":
            return HOST_OBJECT  # df.groupby(...), df["wav"].tolist(), image.convert("RGB"): host objects and data
        if receiver.kind == "module":
            if method in ("cuda", "to", "cpu"):
                return Value("module", self._moved_device(receiver, method, call))
            if method in ("parameters", "buffers"):
                return Value("tensors", receiver.device)
            if method in ("eval", "train", "requires_grad_", "half", "float", "double", "bfloat16", "zero_grad"):
                return receiver
            if method == "forward":
                return Value("tensor", receiver.device)
            return UNKNOWN
        if receiver.kind == "distribution":
            return Value("tensor", receiver.device) if method in _SAMPLING_METHODS else UNKNOWN
        if receiver.kind == "grad_scaler" and method == "scale" and call.args:
            return self.value(call.args[0])
        if receiver.kind == "numpy":
            return PYTHON if method in ("item", "tolist") else Value("numpy")
        if receiver.kind in ("python", "event", "stream", "device"):
            return PYTHON
        if receiver.kind == "maybe_tensor" and receiver.const != "numpy" and method in ("cuda", "to", "cpu"):
            # (NumPy arrays have no such method: a tensor)
            if method == "to" and self._to_cpu_by_default(call):
                return Value("tensor", const=CPU_DEFAULT)
            if method == "to" and (self.to_target(call) is None or self._to_callers_device(call)):
                return receiver  # .to(dtype=torch.float32): where it was
            return Value("tensor", self._moved_device(receiver, method, call), const=MOVED)
        if receiver.kind == "maybe_tensor":
            # What a tensor's method gives, kept as uncertain as the receiver (`sigmas[-1].abs()`).
            return PYTHON if method in _TENSOR_PYTHON_METHODS or method in _TENSOR_NONE_METHODS else receiver
        return UNKNOWN

    def _unstored_attribute(self, owner: _ClassInfo, attribute: str) -> Value | None:
        """What ``self.name`` holds in a method of a class of the file whose text stores nothing in it: what the
        class's property of that name returns (``@property def device(self): return self._device``); or, for a
        device attribute (``self._device``, ``self.device``) of a class whose ``__init__`` hands its parameter
        ``device="cpu"`` to its base's (``super().__init__(output_transform, device)``, the base, in another module,
        keeping it), a device the caller picks, the CPU by default. None: the text does not tell."""
        method = owner.methods.get(attribute)
        if method is not None and _is_property(method):
            self._read_return(id(method))
            returned = self.returns.get(id(method))
            return returned if returned is not None and returned is not UNKNOWN else None
        if "device" not in attribute.lower() or owner.module:
            return None
        for ancestor in owner.ancestors:
            if attribute in ancestor.stores:
                # `self.device` that a base class of the file stores (`torch.device(device) if device is not None
                # else torch.device("cpu")`) once the walk has seen each of its stores: a device the caller picks,
                # the CPU by default, unless this class moves a model there
                stored = ancestor.attributes.get(attribute)
                if stored is not None and stored.const == CPU_DEFAULT and not ancestor.module and (
                        ancestor.seen.get(attribute) == ancestor.stores[attribute]) and not self._moves_a_model(
                            owner.node, attribute):
                    return stored
                break
        if owner.base_device is None:
            init = owner.methods.get("__init__")
            owner.base_device = self._hands_cpu_device_to_base(init) and not self._moves_a_model(owner.node, attribute)
        return CPU_BY_DEFAULT if owner.base_device else None

    def _hands_cpu_device_to_base(self, init: ast.FunctionDef | ast.AsyncFunctionDef | None) -> bool:
        """Whether ``__init__`` takes a device parameter whose default is the CPU and passes it on to its base's
        ``__init__`` (``super().__init__(..., device)``, ``Base.__init__(self, ..., device=device)``)."""
        if init is None:
            return False
        names = {name for name, default in _defaults(init.args).items()
                 if "dev" in name.lower() and self._names_the_cpu(default)}
        if not names:
            return False
        for node in ast.walk(init):
            if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr == "__init__" and any(  # type: ignore[attr-defined]
                type(argument) is ast.Name and argument.id in names  # type: ignore[attr-defined]
                for argument in [*node.args, *(item.value for item in node.keywords)]  # type: ignore[attr-defined]
            ):
                return True
        return False

    def _none_made_cpu(self, node: ast.IfExp | ast.BoolOp) -> bool:
        """Whether ``node`` makes a device parameter of the function being walked the CPU when it is None and leaves
        it as given otherwise: ``device or "cpu"``, ``torch.device(device) if device is not None else
        torch.device("cpu")`` (or the test the other way round). The device is then the caller's, the CPU unless it
        asks for another (:data:`CPU_DEFAULT`), as a parameter whose default names the CPU is; not so in an
        ``nn.Module`` or in code that moves a model there (:meth:`_moves_a_model`)."""
        if type(node) is ast.BoolOp:
            if type(node.op) is not ast.Or or len(node.values) != 2:
                return False
            given, cpu = node.values
        else:
            test = node.test
            if not (type(test) is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) in (ast.Is, ast.IsNot)
                    and is_constant(test.comparators[0], None)):
                return False
            given, cpu = (node.body, node.orelse) if type(test.ops[0]) is ast.IsNot else (node.orelse, node.body)
            given = given.args[0] if type(given) is ast.Call and len(given.args) == 1 and not given.keywords and (
                self.qualified_name(given.func) == "torch.device") else given
            if type(test.left) is not ast.Name or type(given) is not ast.Name or given.id != test.left.id:
                return False
        return type(given) is ast.Name and self._spells_the_cpu(cpu) and self._untold_device_parameter(given.id)

    def _spells_the_cpu(self, node: ast.expr) -> bool:
        """``"cpu"``, ``torch.device("cpu")``: the CPU by name (not the default device, ``torch.tensor(()).device``,
        which code that sets it makes CUDA)."""
        if type(node) is ast.Call and len(node.args) == 1 and not node.keywords and (
                self.qualified_name(node.func) == "torch.device"):
            node = node.args[0]
        return type(node) is ast.Constant and device_of_literal(node.value) == "cpu" and node.value.strip() == "cpu"

    def _none_made_cpu_statement(self, node: ast.If) -> str | None:
        """The device parameter that ``if device is None: device = "cpu"`` (no else, nothing else bound to it in the
        body) makes the CPU when the caller leaves it None; None for any other if."""
        test = node.test
        if node.orelse or not (type(test) is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) is ast.Is
                               and type(test.left) is ast.Name and is_constant(test.comparators[0], None)):
            return None
        name = test.left.id
        assigns = [statement for statement in node.body if type(statement) is ast.Assign and len(statement.targets) == 1
                   and type(statement.targets[0]) is ast.Name and statement.targets[0].id == name]
        if len(assigns) != 1 or not self._spells_the_cpu(assigns[0].value):
            return None  # (before the walk through the body below: most such ifs bind something else)
        stores = [part for part in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                  if type(part) is ast.Name and part.id == name and type(part.ctx) is not ast.Load]
        if len(stores) != 1:
            return None
        return name if self._untold_device_parameter(name) else None

    def _untold_device_parameter(self, name: str) -> bool:
        """Whether ``name`` is a device parameter of the ``__init__`` being walked (a device an object keeps for its
        user) whose value the text does not tell (nor the file's calls), outside an ``nn.Module`` and a class that
        moves a model to it."""
        function = self.function
        if function is None or "dev" not in name.lower() or function.name != "__init__":
            return False  # (a helper's `device=None` is what each call passes, the data's device as a rule)
        arguments = function.args
        if not any(a.arg == name for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]):
            return False
        value = self._bound(name)
        if value is not None and not (value.kind in ("unknown", "python") or (
                value.kind == "device" and value.device is None and value.const is None)):
            return False
        owner = self._method_owner.get(id(function))
        if owner is None or owner.module or owner.node is None:
            return False
        return not self._moves_a_model(owner.node, name)

    def _moves_a_model(self, node: ast.AST, device: str) -> bool:
        """Whether ``node`` (a function, or a class: its methods) moves a model to the device named ``device`` (the
        parameter, or ``self.device`` and its kin): ``self.model = model.to(self.device)``, ``_LPIPS(net).to(device)``.
        Then that device is where the code runs the model, the GPU when it runs on one, whatever its default. (The
        moves of each node looked through once: a class is asked of each of its device attributes.)"""
        moves = self._model_moves.get(id(node))
        if moves is None:
            moves = self._model_moves[id(node)] = _model_moves(node)
        return any((type(t) is ast.Name and t.id == device) or (type(t) is ast.Attribute and "device" in t.attr.lower())  # type: ignore[attr-defined]
                   for targets in moves for t in targets)

    def _names_the_cpu(self, node: ast.expr) -> bool:
        """``"cpu"``, ``torch.device("cpu")``: a default that names the CPU."""
        value = self.value(node)
        return value.kind == "device" and value.device == "cpu"

    def _read_return(self, callee: int) -> None:
        """The body being walked reads what function ``callee`` returns (:meth:`_walk_again`)."""
        function = self.function
        if function is not None:
            self._return_readers.setdefault(callee, set()).add(id(function))
            if callee not in self._walked:
                self._early_readers.setdefault(callee, set()).add(id(function))

    def _moved_device(self, receiver: Value, method: str, call: ast.Call) -> Device | None:
        """Where ``x.cuda()`` / ``x.cpu()`` / ``x.to(...)`` puts its result."""
        if method == "cuda":
            return "cuda"
        if method == "cpu":
            return "cpu"
        target = self.to_target(call)
        return receiver.device if target is None else target[1]

    def to_target(self, call: ast.Call) -> tuple[ast.expr, Device | None] | None:
        """The device argument of ``x.to(...)`` and where it points; None for a dtype-only ``.to``."""
        candidates = [*call.args[:1], *(k.value for k in call.keywords if k.arg in ("device", "other"))]
        for candidate in candidates:
            is_device, device = self.device_argument(candidate)
            if is_device:
                return candidate, device
        return None

    def _to_callers_device(self, call: ast.Call) -> bool:
        target = self.to_target(call)
        return target is not None and target[1] is None and self.is_callers_device(target[0])

    def _to_cpu_by_default(self, call: ast.Call) -> bool:
        """``x.to(self._device)`` for a device the caller picks, the CPU by default (:data:`CPU_DEFAULT`)."""
        target = self.to_target(call)
        return target is not None and target[1] is None and self.cpu_by_default(target[0])

    def is_callers_device(self, node: ast.AST | None) -> bool:
        """Whether ``node`` is the device of the caller's NumPy-or-tensor data (:data:`MAYBE_DEVICE`): a copy there
        is a copy to the GPU only when the caller's data is a CUDA tensor."""
        if node is None:
            return False
        value = self.value(node)
        return (value.kind == "device" and value.const in (CALLERS, CPU_DEFAULT)) or (
            value.kind == "maybe_tensor" and value.const is not None) or (
            value.kind == "tensor" and value.const == CPU_DEFAULT)

    def cpu_by_default(self, node: ast.AST | None) -> bool:
        """Whether ``node`` is a device the caller picks, the CPU by default, or a tensor placed on one
        (:data:`CPU_DEFAULT`)."""
        return node is not None and self.value(node).const == CPU_DEFAULT

    def on_cpu_by_default(self, node: ast.AST) -> bool:
        """Whether an expression in ``node`` (a finding's range) is a tensor or a device of :data:`CPU_DEFAULT`:
        what a possible finding's message gives as its reason."""
        return any(isinstance(part, ast.expr) and self.value(part).const == CPU_DEFAULT for part in ast.walk(node))

    def only_cpu_by_default(self, node: ast.AST) -> bool:
        """Whether the values ``node`` computes with are tensors on the CPU or on a device the caller picks, the CPU
        by default (one at least), and host data: nothing the text does not tell (a tensor of unknown device, a value
        of unknown kind). A rule that works out its certainty from the devices of its operands (a mask and the
        tensor it indexes) then finds at most a possible sync."""
        found = False
        stack: list[ast.AST] = [node]
        while stack:
            part = stack.pop()
            kind = type(part)
            if kind is ast.Call:
                func = part.func  # type: ignore[attr-defined]
                stack.extend((*part.args, *(item.value for item in part.keywords)))  # type: ignore[attr-defined]
                if type(func) is ast.Attribute and self.qualified_name(func) is None:
                    stack.append(func.value)  # the receiver of a method (not the callee's name)
            elif kind is ast.Assign or kind is ast.Expr:
                stack.append(part.value)  # type: ignore[attr-defined]  # (a statement's finding: `a = t.item()`)
            elif not isinstance(part, ast.expr) or kind is ast.Constant or kind is ast.Slice:
                continue
            elif kind is ast.Name and part.id == self.self_name:  # type: ignore[attr-defined]
                continue
            else:
                value = self.value(part)
                if value.kind == "tensor":
                    if value.const == CPU_DEFAULT:
                        found = True
                    elif value.device != "cpu":
                        return False
                elif value.kind in ("unknown", "maybe_tensor", "tensors", "module"):
                    if kind is not ast.Attribute or self.qualified_name(part) is None:
                        return False
                if kind is ast.Attribute:
                    continue  # (its object: `self`, or a tensor whose attribute is read)
                stack.extend(child_nodes(part))
        return found

    def _tensor_method(self, receiver: Value, receiver_node: ast.expr, method: str, call: ast.Call) -> Value:
        unknown_receiver = receiver.kind == "unknown"
        if method == "to" and self._to_cpu_by_default(call) and not (unknown_receiver and self.looks_like_module(receiver_node)):
            # y.sum().to(self._device): on the device the caller picks, the CPU by default
            return Value("tensor", None, self.dtype_family(call.args[0]) or receiver.dtype if call.args else receiver.dtype,
                         ndim=receiver.ndim if receiver.kind == "tensor" else None, const=CPU_DEFAULT)
        if method == "to" and receiver.device != "cuda" and self._to_callers_device(call):
            return PARTLY_CPU  # t.to(x.device) for x: NdarrayOrTensor: where the caller's data is
        if method in ("cuda", "to", "cpu"):
            device = self._moved_device(receiver, method, call)
            if unknown_receiver and self.looks_like_module(receiver_node):
                return Value("module", device)
            if unknown_receiver and device is None:
                return UNKNOWN
            dtype = self.dtype_family(call.args[0]) if method == "to" and call.args else None
            if method != "to" or self.to_target(call) is not None:
                moved = MOVED  # moved on purpose: to a device the text does not name, or to the CPU (`.cpu()`)
            else:
                moved = receiver.const  # .to(torch.float32): where it was, as it was
            if dtype is None:
                return Value("tensor", device, receiver.dtype, int_data=receiver.int_data, ndim=receiver.ndim,
                             const=moved)
            return Value("tensor", device, dtype, ndim=receiver.ndim, const=moved)
        if method == "pin_memory":
            return replace(receiver, kind="tensor", device="cpu", pinned=True)
        if method in ("clone", "detach", "contiguous"):
            return replace(receiver, pinned=False)
        if method in _TENSOR_NONE_METHODS:
            return PYTHON
        if method == "numpy":
            return Value("numpy")
        if method in _TENSOR_PYTHON_METHODS:
            return PYTHON
        if method == "type":
            return self._type_result(receiver, call)
        if unknown_receiver:
            return Value("unknown", "cuda") if receiver.device == "cuda" else UNKNOWN
        if method in _FULL_REDUCTIONS and not call.args and not call.keywords:
            ndim: int | None = 0
        else:
            ndim = receiver.ndim if method in _SHAPE_KEEPING_METHODS else None
        if method in _BOOL_RESULTS:
            return Value("tensor", receiver.device, "bool", ndim=ndim, const=receiver.const)
        if method in _INT_RESULTS:
            return Value("tensor", receiver.device, "int", ndim=ndim, const=receiver.const)
        if method in _FLOAT_RESULTS:
            return Value("tensor", receiver.device, "float", ndim=ndim, const=receiver.const)
        dtype = receiver.dtype if method in _DTYPE_KEEPING_METHODS else None
        return Value("tensor", receiver.device, dtype, ndim=ndim, const=receiver.const)

    def _type_result(self, receiver: Value, call: ast.Call) -> Value:
        if not call.args and not call.keywords:
            return PYTHON  # x.type() is the type's name
        argument = call.args[0] if call.args else keyword_value(call, "dtype")
        legacy = self.legacy_tensor_class(argument)
        if legacy is not None:
            device, dtype = legacy
            return Value("tensor", device, _DTYPES.get(dtype))  # type: ignore[arg-type]
        return Value("tensor", receiver.device, self.dtype_family(argument))

    def legacy_tensor_class(self, node: ast.AST | None) -> tuple[Device, str] | None:
        """``torch.LongTensor`` -> ('cpu', 'long'), ``'torch.cuda.FloatTensor'`` -> ('cuda', 'float32')."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        elif node is not None:
            name = self.qualified_name(node) or ""
        else:
            return None
        prefix, _, short = name.rpartition(".")
        if short not in LEGACY_TENSOR_DTYPES or prefix not in ("torch", "torch.cuda"):
            return None
        return ("cuda" if prefix == "torch.cuda" else "cpu"), LEGACY_TENSOR_DTYPES[short]

    def looks_like_module(self, node: ast.AST) -> bool:
        """A module value, or ``Net()``: an instance of a CamelCase class is most likely an nn.Module."""
        if self.value(node).kind == "module":
            return True
        if isinstance(node, ast.Call):
            func = node.func
            last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            return last[:1].isupper() and not last.endswith("Tensor")
        return False

    # ----------------------------------------------------------------------------------------------- the walk
    def walk(
        self,
        visit: Callable[[ast.AST], None],
        *,
        stop: Callable[[], bool] | None = None,
        types: Container[type] | None = None,
        calls: tuple[frozenset[str], bool] | None = None,
        operators: frozenset[tuple[type, frozenset[type]]] | None = None,
    ) -> None:
        """Call ``visit(node)`` for every node of the cell, in execution order, with the environment of that moment.

        Function bodies are visited after the cell's top level, with each parameter bound to what the cell passes
        for it (joined over the calls the walk saw), so a sync inside a helper called with a CUDA tensor is found.
        ``stop`` (asked before each top-level statement) ends the top level early; the bodies of the functions
        defined above that point are still visited, so every node before it is. ``types``: visit only nodes of
        these classes (the walk still goes through the others). ``calls``, ``(names, capitalized)``: of the calls
        of an attribute (``x.name(...)``), visit only those whose name is in ``names`` or, with ``capitalized``,
        starts with a capital letter (the visitor does nothing with the others; any other call is visited as
        ``types`` says, and a subtree nested too deep for the generated functions may visit them all).
        ``operators``, pairs ``(node type, operator types)``: of the nodes of such a type (``ast.BinOp``,
        ``ast.UnaryOp``), visit only those whose ``op`` is of one of those types (as ``calls``: the visitor does
        nothing with the others).
        """
        self._visit = visit
        self._types = types
        try:
            self._walkers = _WALKERS.setdefault((types, calls, operators), {})  # type: ignore[arg-type]
        except TypeError:  # an unhashable container of types: the walk without generated functions
            self._walkers = None
        self._deferred: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ChainMap[str, Value]]] = []
        self._call_arguments: dict[int, dict[str, Value]] = {}  # function id -> parameter -> what the calls pass
        self._method_owner: dict[int, _ClassInfo] = {}  # method id -> its class (methods of the class body only)
        self._classes: dict[str, tuple[_ClassInfo, list[str]]] = {}  # class name -> its info and its bases' names
        self.self_name: str | None = None  # `self` in a method of a class of the file (None elsewhere)
        self._attribute_stores: list[tuple[int, str]] | None = None  # (line, name) of each `self.name = ` in the text
        self._annotated_tensors: set[str] | None = None  # in a function annotated `-> Tensor`: its Tensor parameters
        #: (`self.name` stores of the method being walked are names `.name` of its scope: _ATTRIBUTE)
        #: the `self.method(...)` calls of the simple statement being walked whose stores it takes on after it
        self._effects: list[dict[str, Value]] | None = None
        #: function id -> its parameters annotated `torch.Tensor`, for the functions whose code contradicts their
        #: annotations (annotated to return a tensor, they return a NumPy array): read after the walk
        self.contradicted: dict[int, set[str]] = {}
        self.returns: dict[int, Value] = {}  # function id -> what its return statements give (walked functions)
        #: function id -> its parameters that it tests for NumPy arrays, in a branch of their own
        #: (`isinstance(x, np.ndarray)`): code written for host data as well as tensors, whose tensors are the
        #: caller's (a conversion between the two, a NumPy-or-torch utility). Read after the walk.
        self.numpy_too: dict[int, set[str]] = {}
        self._returned: Value | None = None
        self._returns_wanted: bool | None = False  # (None: not worked out yet for the function being walked)
        self._calls_in_text: dict[str, bool] | None = None  # name -> whether the text calls it
        self._handed_callbacks: set[int] | None = None  # (_callbacks, worked out once the top level was walked)
        #: function id -> (its node, its enclosing scope, what the calls seen before its walk passed it)
        self._walked: dict[int, tuple[ast.FunctionDef | ast.AsyncFunctionDef, ChainMap[str, Value], dict[str, Value] | None]] = {}
        #: function id -> the ids of the functions whose bodies read what it returns (and, for the second set,
        #: read it before it was walked: nothing)
        self._return_readers: dict[int, set[int]] = {}
        self._early_readers: dict[int, set[int]] = {}
        self._again = False
        self._written_items: dict[tuple[int, str], bool] = {}  # (class id, attribute) -> _items_written
        for statement in self.tree.body:
            if stop is not None and stop():
                break
            self.parents[statement] = self.tree
            self._statement(statement)
        top = self._env
        index = 0
        while index < len(self._deferred):  # bodies may define (and defer) functions of their own
            function, enclosing = self._deferred[index]
            index += 1
            self._function_body(function, enclosing)
        if self._walked:
            self._walk_again(index)
        self.function = None
        self.self_name = None
        self._env = top
        self._changed()
        # The callback is usually a bound method of an object holding this scope: dropping it leaves no cycle, so
        # the cell's tree is freed by reference counting, without the cycle collector walking it (collector.py).
        self._visit = None  # type: ignore[assignment]
        self.forget = None

    def _changed(self) -> None:
        self._cache.clear()
        self._names.clear()

    def bind(self, name: str, value: Value) -> None:
        self._env.maps[0][name] = value  # ChainMap.__setitem__'s own step, without its call
        self._cache.clear()
        if name in self.aliases or name in _BUILTIN_NAMES:
            # (a qualified name depends on the scope only through the names that are imports or builtins, which a
            # binding shadows: the qualified names kept stay true when any other name is bound, most bindings)
            self._names.clear()

    def _block(self, statements: Iterable[ast.stmt]) -> None:
        for statement in statements:
            self._statement(statement)

    def _branches(self, *blocks: list[ast.stmt], narrowed: list[dict[str, Value]] | None = None) -> None:
        """Run each block from the same environment, then join what they bound (an if/else, a try's handlers).

        Each block binds into an overlay of its own in front of the scope's names, so the cost is the names the
        blocks bind, not the names the scope holds: a file of thousands of ``if`` statements stays linear.
        """
        scope = self._env.maps[0]
        outcomes: list[dict[str, Value]] = []
        for index, block in enumerate(blocks):
            overlay: dict[str, Value] = dict(narrowed[index]) if narrowed else {}
            self._env.maps.insert(0, overlay)
            self._changed()
            self._block(block)
            # Lambdas and comprehensions leave through ``ChainMap.parents`` (a new chain of the same maps), so the
            # chain may be another object now; its front map is this block's overlay either way.
            assert self._env.maps[0] is overlay and self._env.maps[1] is scope
            del self._env.maps[0]
            for name, value in (narrowed[index] if narrowed else {}).items():
                if overlay.get(name) is value:
                    del overlay[name]  # narrowed, not rebound: after the if the name holds what it held before
            if not (block and type(block[-1]) in _EXITS):
                outcomes.append(overlay)  # a block that raises or returns binds nothing for the code after it
        for name in set().union(*outcomes):
            result = None
            for outcome in outcomes:
                value = outcome[name] if name in outcome else scope.get(name, UNKNOWN)
                result = value if result is None else join(result, value)
            if result is UNKNOWN and self._converted_parameter(name, outcomes, scope):
                result = PARTLY_CPU
            scope[name] = result
        self._changed()

    def _converted_parameter(self, name: str, outcomes: list[dict[str, Value]], scope: dict[str, Value]) -> bool:
        """Whether the branches made a parameter the text knows nothing of into a CPU tensor of host data on some
        paths and left it as passed on the others: ``if isinstance(nu, Number): nu = torch.tensor(float(nu))``. The
        code takes numbers (or lists) as well as tensors, the tensors the caller's: a sync on it is possible."""
        function = self.function
        if function is None or scope.get(name) is not UNKNOWN:
            return False
        arguments = function.args
        if not any(a.arg == name for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]):
            return False
        converted = False
        for outcome in outcomes:
            value = outcome.get(name)
            if value is None or value is UNKNOWN:
                continue  # the path that left it as passed (or bound it to what the text does not tell)
            if not (value.kind == "tensor" and value.device == "cpu" and value.const == HOST_DATA):
                return False
            converted = True
        return converted and any(name not in outcome for outcome in outcomes)

    def _statement(self, node: ast.stmt) -> None:
        outer, self._statement_now = self._statement_now, node
        if type(node) in _COMPOUND:
            self._adopt(node)  # the statements it holds: their parents (siblings() reads them)
            self._compound(node)
        else:
            self._simple(node)
        self._statement_now = outer

    def _compound(self, node: ast.stmt) -> None:
        types = self._types
        # (only the node types asked for: most compound statements are of none, and a call costs)
        kind = type(node)  # (a parsed tree's classes: the tests below by class, not isinstance)
        visit = self._visit if types is None or kind in types else _skip_visit
        if kind is ast.If:
            visit(node)
            self._expression(node.test, node)
            narrowed = self._narrowing(node.test)
            made_cpu = self._none_made_cpu_statement(node)
            self._branches(node.body, node.orelse, narrowed=narrowed)
            if made_cpu is not None:
                # `if device is None: device = torch.device("cpu")` of a device parameter: the caller's, the CPU
                # unless it asks for another
                self.bind(made_cpu, CPU_BY_DEFAULT)
            if narrowed is not None and not node.orelse and node.body and type(node.body[-1]) in _EXITS:
                for name, value in narrowed[1].items():
                    if _device_test_in(node.test) and self._bound(name) is not None:
                        # `if not x.is_cuda: return fallback(x)`: the code after it runs only for a CUDA x
                        self.bind(name, value)
        elif kind is ast.While:
            visit(node)
            self._expression(node.test, node)
            self._branches(node.body + node.orelse, [])
        elif kind is ast.For or kind is ast.AsyncFor:
            visit(node)
            self._expression(node.iter, node)
            self._bind_iteration(node.target, node.iter)
            self._expression(node.target, node)
            self._branches(node.body + node.orelse, [])
        elif kind is ast.With or kind is ast.AsyncWith:
            visit(node)
            for item in node.items:
                self._expression(item.context_expr, item)
                if item.optional_vars is not None:
                    self._bind_target(item.optional_vars, UNKNOWN)
                    self._expression(item.optional_vars, item)
            self._block(node.body)
        elif kind is ast.Try or kind is _TRY_STAR:
            visit(node)
            handlers = []
            for handler in node.handlers:
                if types is None or ast.ExceptHandler in types:
                    self._visit(handler)
                if handler.type is not None:
                    self._expression(handler.type, handler)
                handlers.append(handler.body)
            self._branches(node.body + node.orelse, *handlers)
            self._block(node.finalbody)
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            self._function(node)  # type: ignore[arg-type]
        elif kind is ast.ClassDef:
            self._class(node)  # type: ignore[arg-type]
        elif kind is ast.Match:
            visit(node)
            self._expression(node.subject, node)
            cases = []
            for case in node.cases:
                self._generic(case.pattern, case)
                if case.guard is not None:
                    self._expression(case.guard, case)
                cases.append(case.body)
            self._branches(*cases, [])

    def _simple(self, node: ast.stmt) -> None:
        outer, self._effects = self._effects, []
        self._generic(node)
        effects, self._effects = self._effects, outer
        for stores in effects:  # `self.init_sigmas()`: what that method leaves in `self.sigmas`
            for name, value in stores.items():
                self.bind(name, value)
        kind = type(node)
        if kind is ast.Assign:
            # The value is worked out only for a target that binds a name: `self.conv = nn.Conv2d(...)`, the most
            # common assignment of a model's code, binds none (evaluation reads the scope and changes nothing).
            value = None
            for target in node.targets:  # type: ignore[attr-defined]
                if type(target) is ast.Subscript and type(target.value) is ast.Name:  # type: ignore[attr-defined]
                    self._item_stored(target.value.id, node.value)  # type: ignore[attr-defined]
                if type(target) not in _NAMELESS_TARGETS:
                    if value is None:
                        value = self.value(node.value)  # type: ignore[attr-defined]
                    self._bind_target(target, value, node.value)  # type: ignore[attr-defined]
        elif kind is ast.AnnAssign and node.value is not None and type(node.target) is ast.Name:  # type: ignore[attr-defined]
            self._bind_target(node.target, self.value(node.value), node.value)  # type: ignore[attr-defined]
        elif kind is ast.AugAssign and type(node.target) is ast.Name:  # type: ignore[attr-defined]
            self.bind(node.target.id, self._augmented(node.target, node.value))  # type: ignore[attr-defined]
        elif kind is ast.AugAssign and type(node.target) is ast.Attribute:  # type: ignore[attr-defined]
            self._store_attribute(node.target, self._augmented_attribute(node.target, node.value))  # type: ignore[attr-defined]
        elif kind is ast.AugAssign and type(node.target) is ast.Subscript:  # type: ignore[attr-defined]
            self._item_updated(node.target, node.value)  # type: ignore[attr-defined]
        elif kind is ast.Expr and type(node.value) is ast.Call:  # type: ignore[attr-defined]
            self._in_place_effect(node.value)  # type: ignore[attr-defined]
        elif kind is ast.Return and node.value is not None and (  # type: ignore[attr-defined]
                self._returns_wanted or (self._returns_wanted is None and self._wants_returns())):
            # (A bare `return` says nothing: a generator's ends so.)
            value = self.value(node.value)  # type: ignore[attr-defined]
            self._returned = value if self._returned is None else join(self._returned, value)
            if self._annotated_tensors is not None and value.kind == "numpy":
                # `-> torch.Tensor` yet it returns a NumPy array: the function's Tensor annotations are not to be
                # believed (diffusers' `_convert_to_karras(in_sigmas: torch.Tensor)` takes and gives NumPy sigmas)
                self.contradicted[id(self.function)] = self._annotated_tensors
        elif (kind is ast.Import or kind is ast.ImportFrom) and self.function is not None:
            if self.host is None and imports_host_library(node):  # type: ignore[arg-type]
                self.host = HostCode({})  # a function that imports a host-only library: interop code (host_code.py)
            if self.host is not None:
                self.host.imported(self.function, node)  # type: ignore[arg-type]
        elif kind is ast.Delete:
            for target in node.targets:  # type: ignore[attr-defined]
                if type(target) is ast.Name:
                    self._env.pop(target.id, None)
                    if target.id in self._env:  # inside a branch the name lives on in the scope behind the overlay
                        self._env[target.id] = UNKNOWN
                    self._changed()
        if self.self_name is not None and (kind is ast.Assign or kind is ast.AnnAssign) and node.value is not None:  # type: ignore[attr-defined]
            for target in node.targets if kind is ast.Assign else [node.target]:  # type: ignore[attr-defined]
                if type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == self.self_name:  # type: ignore[attr-defined]
                    self._store_attribute(target, self.value(node.value))  # type: ignore[attr-defined]

    def _augmented(self, target: ast.Name, operand: ast.expr) -> Value:
        """What ``target op= operand`` leaves in ``target``: an array or a tensor of known device is changed in place
        (``allow &= iou.max(1) <= thr`` on a NumPy mask stays a NumPy mask, whatever the function gave)."""
        current = self.value(target)
        result = self._operator([target, operand])
        if current.kind == "numpy":
            return current
        if current.kind == "tensor" and current.device is not None and result.kind == "tensor":
            return replace(result, device=current.device)
        return result

    def _augmented_attribute(self, target: ast.Attribute, operand: ast.expr) -> Value:
        """What ``self.name op= operand`` leaves in ``self.name``: a tensor placed on a device is changed in place, where
        it is (``self._sum += y.sum().to(self._device)``), and a number plus a number is a number, also before the walk
        has seen every store of the attribute (what the stores walked so far give: a metric's ``reset`` walked, its
        ``update`` adding to it)."""
        current = self.value(target)
        if current.kind != "tensor" and self.self_name is not None and type(target.value) is ast.Name and (
            target.value.id == self.self_name  # type: ignore[attr-defined]
        ):
            current = self._method_owner[id(self.function)].attributes.get(target.attr, current)
        if current.kind == "tensor" and current.const == CPU_DEFAULT and self._unplaced_tensor(operand):
            # `self.loss_sum += loss * n` of the caller's data, not moved to the object's device: the state is
            # where that data is (a CPU tensor takes no CUDA operand in place), no longer the CPU by default
            self._mixed()
            return Value("tensor", None, current.dtype, ndim=current.ndim)
        if current.kind == "tensor" and (current.device is not None or current.const == CPU_DEFAULT):
            return current
        if current.kind == "python" and self.value(operand).kind == "python":
            return PYTHON  # a count (`self._num_examples += y.shape[0]`)
        return self._operator([target, operand])

    def _mixed(self) -> None:
        """The class of the method being walked updates its state of CPU default with the caller's data: the device it
        keeps is that data's, no longer the CPU by default (:attr:`_ClassInfo.mixed`)."""
        owner = self._method_owner.get(id(self.function)) if self.function is not None else None
        if owner is not None and not owner.mixed:
            owner.mixed = True
            self._changed()

    def _unplaced_tensor(self, node: ast.expr) -> bool:
        """Whether ``node`` is a tensor of a device the text does not tell, not one placed on a device of CPU default
        (the caller's data, or what is computed from it)."""
        if self.on_cpu_by_default(node):
            return False  # `average_loss.to(self._device) * n`: moved to the object's device
        value = self.value(node)
        if value.kind == "unknown" and value.device is None and type(node) in (ast.Call, ast.BinOp, ast.Subscript):
            # (`loss.to(dtype) * n`, `correct[:, 0].sum()` of the caller's values that the walk does not tell: a
            # tensor as a rule; a number or an array would leave the state where it is, and the finding as likely
            # as before)
            return True
        return value.kind == "tensor" and value.device is None and value.const != CPU_DEFAULT

    def _item_updated(self, target: ast.Subscript, operand: ast.expr) -> None:
        """``self.counts[1] += correct.sum()`` (or ``=``) of the caller's data, not moved to the object's device, on
        a tensor of a device of CPU default (:data:`CPU_DEFAULT`): that tensor is where the caller's data is (a CPU
        tensor takes no CUDA operand in place), for the class's methods walked after this one."""
        attribute = target.value
        if self.self_name is None or type(attribute) is not ast.Attribute or type(attribute.value) is not ast.Name or (
                attribute.value.id != self.self_name):
            return
        owner = self._method_owner.get(id(self.function))
        if owner is None or self._again:
            return
        current = owner.attributes.get(attribute.attr)
        if current is None or current.kind != "tensor" or current.const != CPU_DEFAULT or not self._unplaced_tensor(operand):
            return
        owner.mixed = True
        owner.attributes[attribute.attr] = Value("tensor", None, current.dtype, ndim=current.ndim)
        if self._bound(_ATTRIBUTE + attribute.attr) is not None:
            self.bind(_ATTRIBUTE + attribute.attr, owner.attributes[attribute.attr])
        self._changed()

    def _store_attribute(self, target: ast.Attribute, value: Value) -> None:
        """Keep what ``self.name = value`` stores, for the class's methods walked after this one."""
        if self.self_name is None or type(target.value) is not ast.Name or target.value.id != self.self_name:  # type: ignore[attr-defined]
            return
        owner = self._method_owner[id(self.function)]
        attributes, stored_by = owner.attributes, owner.stored_by
        if value.const == DICT and self._items_written(owner, target.attr):
            value = Value("sequence")  # `self.times[k] = t`, `self.times.update(...)`: what it holds is not all told
        elif value.device == "cpu" and value.kind in ("module", "tensors") and value.const != DICT:
            # A submodule, a ParameterDict: made on the CPU, they follow the model to its device (model.to("cuda")),
            # which this file does not tell.
            value = replace(value, device=None)
        before = attributes.get(target.attr)
        function = self.function
        in_body = self.parents.get(self._statement_now) is function  # a statement of the body, not of a branch
        self.bind(_ATTRIBUTE + target.attr, value)  # for this method's later statements (branches join it)
        if self._again:
            return  # a method walked again (_walk_again): the class's stores were all counted the first time
        if before is None or (stored_by.get(target.attr) is function and in_body):
            after = value  # a later statement of the same method's body replaces what an earlier one stored
        else:
            after = join(before, value)
        stored_by[target.attr] = function
        owner.seen[target.attr] = owner.seen.get(target.attr, 0) + 1
        if after != before:
            attributes[target.attr] = after
            self._changed()

    def _items_written(self, owner: _ClassInfo, attribute: str) -> bool:
        """Whether the class's text writes items of ``self.attribute`` (``self.times[k] = t``, ``del``) or changes it
        by a method (``self.times.update(...)``, ``setdefault``, ``pop``): a dict of CPU tensors it stores then holds
        what the walk does not follow."""
        key = (id(owner), attribute)
        found = self._written_items.get(key)
        if found is None:
            found = False
            for node in ast.walk(owner.node) if owner.node is not None else ():
                if type(node) is ast.Subscript and type(node.ctx) is not ast.Load:
                    target = node.value
                elif type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _DICT_CHANGES:
                    target = node.func.value
                else:
                    continue
                if type(target) is ast.Attribute and target.attr == attribute and type(target.value) is ast.Name:
                    found = True
                    break
            self._written_items[key] = found
        return found

    def _cpu_list(self, owner: _ClassInfo, attribute: str) -> bool:
        """Whether ``self.attribute``, stored only as an empty list (``self.preds = []``), gets nothing but CPU tensors:
        the class's text changes it only by ``self.attribute.append(t)`` (and ``clear``, ``pop``), the walk has seen
        each of those appends, and each appended a CPU tensor (``p.cpu()``, a kNN prediction moved to the host each
        validation step and ``torch.cat``'d at the epoch's end)."""
        seen, cpu = owner.appended.get(attribute, (0, False))
        if not seen or not cpu:
            return False
        key = (id(owner), "append " + attribute)
        found = self._written_items.get(key)
        if found is None:
            appends, other = 0, False
            for node in ast.walk(owner.node) if owner.node is not None else ():
                kind = type(node)
                if kind is not ast.Attribute and kind is not ast.Subscript:
                    continue
                held = node.value  # type: ignore[attr-defined]
                if not (type(held) is ast.Attribute and held.attr == attribute and type(held.value) is ast.Name):
                    continue
                if kind is ast.Subscript:
                    other = other or type(node.ctx) is not ast.Load  # type: ignore[attr-defined]  # `self.preds[i] = t`
                elif node.attr == "append":  # type: ignore[attr-defined]
                    appends += 1
                elif node.attr not in ("clear", "pop", "copy"):  # type: ignore[attr-defined]
                    other = True  # `extend`, `insert`: what else it holds is not told
            found = self._written_items[key] = appends if not other else -1  # type: ignore[assignment]
        return found == seen  # type: ignore[comparison-overlap]

    def _narrowing(self, test: ast.expr) -> list[dict[str, Value]] | None:
        """What ``if isinstance(x, torch.Tensor):`` tells each branch about ``x``: a tensor in one, no tensor in the
        other (``raise TypeError(f"... {x}")`` under ``if not isinstance(x, Tensor)`` formats no tensor)."""
        positive = True
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, positive = test.operand, not positive
        if not (
            isinstance(test, ast.Call)
            and self.call_name(test) == "builtins.isinstance"
            and len(test.args) == 2
            and isinstance(test.args[0], ast.Name)
            and self.qualified_name(test.args[1]) == "torch.Tensor"
        ):
            host = self._host_instance_test(test)
            if host is not None:
                # `elif isinstance(value, np.generic): return value.item()`: a NumPy scalar in that branch; the
                # other branch is told nothing
                name = test.args[0].id  # type: ignore[attr-defined]
                return [{name: host}, {}] if positive else [{}, {name: host}]
            return self._device_narrowing(test, positive)
        name = test.args[0].id
        current = self.value(test.args[0])
        if current.kind == "maybe_tensor" and current.const is not None:
            # x: NdarrayOrTensor: a tensor in one branch, the caller's (the CPU's when they convert host data), and
            # the array in the other
            other = Value("numpy") if current.const == "numpy" else PYTHON
            return [{name: PARTLY_CPU}, {name: other}] if positive else [{name: other}, {name: PARTLY_CPU}]
        if current.kind not in ("unknown", "tensor"):
            return None
        tensor = current if current.kind == "tensor" else Value("tensor", current.device)
        other = Value("python")  # whatever it is, not a tensor
        return [{name: tensor}, {name: other}] if positive else [{name: other}, {name: tensor}]

    def _host_instance_test(self, test: ast.expr) -> Value | None:
        """``isinstance(x, np.generic)``, ``isinstance(x, (np.ndarray, np.number))``, ``isinstance(x, (int, float))``:
        what ``x`` is where the test holds, NumPy data (a class of NumPy's, Python numbers beside) or a Python number
        (every class a Python scalar's); None for any other test (a container may hold tensors)."""
        if not (
            type(test) is ast.Call
            and len(test.args) == 2  # type: ignore[attr-defined]
            and type(test.args[0]) is ast.Name  # type: ignore[attr-defined]
            and self.call_name(test) == "builtins.isinstance"  # type: ignore[arg-type]
        ):
            return None
        classes = test.args[1]  # type: ignore[attr-defined]
        names = [self.qualified_name(c) for c in (classes.elts if type(classes) is ast.Tuple else [classes])]  # type: ignore[attr-defined]
        if not names or None in names:
            return None
        numpy = [name.startswith("numpy.") for name in names]  # type: ignore[union-attr]
        if not all(found or name in _PYTHON_SCALAR_CLASSES for found, name in zip(numpy, names)):
            return None
        return Value("numpy") if any(numpy) else PYTHON

    def _device_narrowing(self, test: ast.expr, positive: bool) -> list[dict[str, Value]] | None:
        """What ``if x.is_cuda:`` (``x.device.type == "cuda"``, ``!= "cpu"``...) tells each branch about the tensor
        ``x``: on the GPU in one, not on it in the other (a CPU fallback's ``x.cpu()`` copies nothing). Beside other
        tests (``if WITH_CUDA_MAP and x.is_cuda:``), the branch where the whole test fails has ``x`` off the GPU only
        where the device test failed: the caller's tensor on the other paths, a possible sync (:data:`PARTLY_CPU`)."""
        conjuncts = test.values if type(test) is ast.BoolOp else [test]  # type: ignore[attr-defined]
        tests = [found for found in map(_device_test, conjuncts) if found is not None]
        if len(tests) != 1:
            return None
        name, when_true, when_false, tensor_only = tests[0]
        current = self._bound(name) or UNKNOWN
        if not (current.kind == "tensor" or (current.kind == "unknown" and tensor_only and name != self.self_name)):
            return None  # (`self.device.type` of a module, a device's `.type`: no tensor to place)
        if type(test) is ast.BoolOp and len(conjuncts) > 1:  # the other tests may decide the branch instead
            if type(test.op) is ast.And:  # type: ignore[attr-defined]
                when_false = "partly" if when_false == "cpu" else None
            else:
                when_true = "partly" if when_true == "cpu" else None

        def placed(device: str | None) -> Value:
            if device == "partly":
                return PARTLY_CPU
            if device is None:
                return current
            return Value("tensor", device, current.dtype, ndim=current.ndim)  # type: ignore[arg-type]

        branches = [{name: placed(when_true)}, {name: placed(when_false)}]
        return branches if positive else branches[::-1]

    def _bind_iteration(self, target: ast.expr, iterable: ast.expr) -> None:
        """Bind what a ``for`` takes from ``iterable``: ``for i, row in enumerate(rows)`` binds a Python int to
        ``i`` (an index that is not a tensor) and an element of ``rows`` to ``row``."""
        if (
            isinstance(target, (ast.Tuple, ast.List))
            and len(target.elts) == 2
            and not any(isinstance(element, ast.Starred) for element in target.elts)
            and isinstance(iterable, ast.Call)
            and self.call_name(iterable) == "builtins.enumerate"
            and len(iterable.args) == 1
            and not isinstance(iterable.args[0], ast.Starred)
        ):
            self._bind_target(target.elts[0], PYTHON)
            self._bind_iteration(target.elts[1], iterable.args[0])
            return
        if (
            isinstance(target, (ast.Tuple, ast.List))
            and isinstance(iterable, ast.Call)
            and len(target.elts) == len(iterable.args) > 1
            and all(item.arg == "strict" for item in iterable.keywords)  # (`zip(a, b, strict=True)`: the same pairs)
            and not any(isinstance(node, ast.Starred) for node in (*target.elts, *iterable.args))
            and self.call_name(iterable) == "builtins.zip"
        ):
            # `for s, e in zip(starts, ends)`: each name takes an element of its own iterable
            for element_target, iterated in zip(target.elts, iterable.args):
                self._bind_iteration(element_target, iterated)
            return
        if (
            isinstance(iterable, ast.Call)
            and len(iterable.args) == 1
            and not iterable.keywords
            and not isinstance(iterable.args[0], ast.Starred)
            and self.call_name(iterable) in ("builtins.reversed", "builtins.list", "builtins.tuple")
        ):
            self._bind_iteration(target, iterable.args[0])  # `for d in reversed(boxes)`: the elements of boxes
            return
        self._bind_target(target, element_of(self.value(iterable)))

    def _in_place_effect(self, call: ast.Call) -> None:
        """Statements that change what a name holds without assigning it: ``model.cuda()``, set_default_device."""
        if self.call_name(call) == "torch.set_default_device" and call.args:
            is_device, device = self.device_argument(call.args[0])
            self.default_device = device if is_device else None
            self._changed()
            return
        method = self.method_call(call)
        if (
            method
            and method[1] in ("register_buffer", "register_parameter")
            and self.self_name is not None
            and type(method[0]) is ast.Name
            and method[0].id == self.self_name  # type: ignore[attr-defined]
            and len(call.args) >= 2
            and type(call.args[0]) is ast.Constant
            and isinstance(call.args[0].value, str)  # type: ignore[attr-defined]
        ):
            # self.register_buffer("kernel", t): self.kernel is a tensor that follows the module to its device
            data = self.value(call.args[1])
            value = Value("tensor", "cuda" if data.device == "cuda" else None, data.dtype, ndim=data.ndim)
            self._store_attribute(ast.Attribute(value=method[0], attr=call.args[0].value), value)  # type: ignore[attr-defined]
            if data.kind == "tensor" and data.device == "cpu":
                # Registering moves nothing: the rest of this method (an __init__ filling a transfer matrix made by
                # torch.zeros) writes the CPU tensor it made; the class's other methods see the module's device.
                self.bind(_ATTRIBUTE + call.args[0].value, data)  # type: ignore[attr-defined]
            return
        if (
            method
            and method[1] == "append"
            and type(method[0]) is ast.Attribute
            and type(method[0].value) is ast.Name  # type: ignore[attr-defined]
            and method[0].value.id == self.self_name  # type: ignore[attr-defined]
            and self.self_name is not None
            and not self._again
        ):
            # `self.preds.append(p.cpu())`: counted, for what `self.preds` holds in the class's other methods
            owner = self._method_owner[id(self.function)]
            attribute = method[0].attr  # type: ignore[attr-defined]
            item = self.value(call.args[0]) if len(call.args) == 1 and not call.keywords else UNKNOWN
            seen, cpu = owner.appended.get(attribute, (0, True))
            owner.appended[attribute] = (seen + 1, cpu and item.kind == "tensor" and item.device == "cpu")
            self._changed()
            return
        if method and isinstance(method[0], ast.Name):
            receiver = self.value(method[0])
            if method[1] == "append" and len(call.args) == 1 and not call.keywords:
                self._appended(method[0].id, receiver, call.args[0])
                return
            if method[1] in _DICT_CHANGES:
                self._item_stored(method[0].id, None)
                return
            if receiver.kind == "module" and method[1] in ("cuda", "to", "cpu"):
                self.bind(method[0].id, Value("module", self._moved_device(receiver, method[1], call)))

    def _item_stored(self, name: str, item: ast.expr | None) -> None:
        """``d[k] = t`` (``item``; None: ``d.update(...)`` and the like) on a dict of CPU tensors: it stays one only
        where ``t`` is a CPU tensor."""
        current = self._bound(name)
        if current is None or current.const != DICT:
            return
        value = self.value(item) if item is not None else UNKNOWN
        if value.kind != "tensor" or value.device != "cpu":
            self.bind(name, Value("sequence"))

    def _appended(self, name: str, receiver: Value, item: ast.expr) -> None:
        """``srcs.append(t)`` on a list the cell made empty (``srcs = []``) or filled with tensors so far: a list of
        tensors on ``t``'s device, then ``torch.cat(srcs)`` is where they are (a dataset's ``process()`` builds CPU
        tensors from files that way); anything else appended leaves a list of unknown elements."""
        if receiver.kind != "tensors" and not (receiver.kind == "sequence" and receiver.const == EMPTY):
            return  # (a list of the caller's, a module's list: what it holds is not the cell's to tell)
        value = self.value(item)
        if value.kind == "tensor":
            device = value.device if receiver.kind == "sequence" or receiver.device == value.device else None
            self.bind(name, Value("tensors", device))
        else:
            self.bind(name, Value("sequence"))

    def _bind_target(self, target: ast.expr, value: Value, source: ast.expr | None = None) -> None:
        kind = type(target)
        if kind is ast.Name:
            self.bind(target.id, value)  # type: ignore[attr-defined]
        elif kind is ast.Attribute:
            self._store_attribute(target, value)  # type: ignore[arg-type]  # `self.a, self.b = ...` (a single target is stored by _simple)
        elif kind is ast.Tuple or kind is ast.List:
            if (type(source) is ast.Tuple or type(source) is ast.List) and len(source.elts) == len(target.elts):  # type: ignore[union-attr,attr-defined]
                for element_target, element in zip(target.elts, source.elts):
                    if type(element_target) not in _NAMELESS_TARGETS or type(element_target) is ast.Attribute:
                        self._bind_target(element_target, self.value(element), element)
                return
            if type(source) is ast.Call and type(source.func) in (ast.Name, ast.Attribute):  # type: ignore[attr-defined]
                annotated = self._returned_tuple(source, len(target.elts))  # type: ignore[arg-type]
                if annotated is not None:
                    # `embeddings, labels, names = load(path)` of a `def load(...) -> Tuple[NDArray, List[int],
                    # List[str]]` of the file: a name its part of the annotation says is host data (an array, a
                    # number, a table) holds that; the others what unpacking the call's value gives, as before.
                    # So too `self.data_bytes, self.data_address = self._serialize_data()` of a method of the
                    # class annotated `-> Tuple[np.ndarray, np.ndarray]`: what the attributes hold for the class's
                    # other methods
                    for element_target, element in zip(target.elts, annotated):  # type: ignore[attr-defined]
                        part = self.annotation_value(element)
                        self._bind_target(element_target, part if part.kind in _HOST_KINDS else element_of(value))
                    return
            for element_target in target.elts:
                inner = element_target.value if isinstance(element_target, ast.Starred) else element_target
                self._bind_target(inner, element_of(value) if not isinstance(element_target, ast.Starred) else UNKNOWN)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self._types is None or type(node) in self._types:
            self._visit(node)
        if self.host is not None:
            self.host.defined(node, definer=self.function, owner=self._owner)
        for decorator in node.decorator_list:
            self._expression(decorator, node)
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self._expression(default, node.args)
        self.bind(node.name, Value("function", const=node))
        self._deferred.append((node, self._env))

    def _walk_again(self, index: int) -> None:
        """Walk again, once, the bodies walked before what they depend on was known, where it is host data.

        Bodies are walked in definition order: a helper defined above its callers is walked before their calls pass
        it anything, and a function that calls one defined below it reads no return. Where the calls the whole walk
        saw pass a parameter host data or a CPU tensor that its walk did not have (`as_key_tensor([index])`, its
        device left out: the CPU), or where a function read before its walk returns host data, that body is walked
        again with it, and then the bodies that read a return the first of these changed. Only host data starts
        this: the walk takes a tensor it cannot place for one on the GPU already, so a CUDA argument changes little.
        """
        stale = []
        for key, (node, enclosing, seen) in self._walked.items():
            passed = self._call_arguments.get(key)
            if passed and any((_host_side(value) or (value.kind == "device" and "dev" in name.lower()))
                              and (seen is None or seen.get(name) != value) for name, value in passed.items()):
                # (a device the calls pass: the body took its parameter `device="cpu"` for the caller's, the CPU by
                # default, where the file's own calls hand it a tensor's device)
                stale.append(key)
        for callee, readers in self._early_readers.items():
            returned = self.returns.get(callee)
            if returned is not None and _host_side(returned):
                stale.extend(reader for reader in readers if reader in self._walked)
        self._again = True
        done: set[int] = set()
        for _ in range(2):
            stale = [key for key in dict.fromkeys(stale) if key not in done]
            if not stale:
                break
            before = {key: self.returns.get(key) for key in stale}
            for key in stale:
                node, enclosing, _seen = self._walked[key]
                self._deferred.append((node, enclosing))
            done.update(stale)
            while index < len(self._deferred):
                function, enclosing = self._deferred[index]
                index += 1
                self._function_body(function, enclosing)
            # the bodies that read a return the walk above changed
            stale = [reader for key, returned in before.items() if self.returns.get(key) != returned
                     for reader in self._return_readers.get(key, ()) if reader in self._walked]
        self._again = False

    def _function_body(self, node: ast.FunctionDef | ast.AsyncFunctionDef, enclosing: ChainMap[str, Value]) -> None:
        """Walk a function's body in its enclosing scope as it stands after the cell's top level ran."""
        self.function = node
        self._env = enclosing.new_child()
        self._changed()
        calls = self._call_arguments.get(id(node))
        if self._again:
            if self.forget is not None:
                self.forget(id(node))
        else:
            self._walked[id(node)] = (node, enclosing, dict(calls) if calls else None)
        arguments = node.args
        owner = self._method_owner.get(id(node))
        positional = [*arguments.posonlyargs, *arguments.args]
        first = positional[0] if positional and owner is not None and not _is_static(node) else None
        self.self_name = first.arg if first is not None else None
        annotated: set[str] = set()  # the parameters that are tensors by their annotation alone
        callback = self._callback_parameters(node) if owner is None else ()
        defaults = _defaults(arguments) if arguments.defaults or arguments.kw_defaults else None
        for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
            if argument is None:
                continue
            value = self.annotation_value(argument.annotation) if argument.annotation is not None else UNKNOWN
            if first is argument and owner is not None and owner.tensor:
                value = Value("tensor")  # `self` in a method of a torch.Tensor subclass
            elif calls is not None and argument not in (arguments.vararg, arguments.kwarg):
                passed = calls.get(argument.arg, UNKNOWN)
                if owner is None:
                    # a function of the file: the calls seen are the calls it gets (an annotation says more than
                    # calls that pass values the text does not tell)
                    value = passed if passed.kind != "unknown" or value.kind in ("unknown", "maybe_tensor") else value
                elif passed.kind != "unknown" and (node.name.startswith("_") or (
                        node.name == "forward" and owner.node is not None and owner.node.name.startswith("_"))):
                    # a private method, or the forward of a private module whose objects the file calls
                    # (_record_instance_call): the calls seen are the calls it gets
                    value = passed
                elif value.kind == "tensor" and (passed.kind in _HOST_KINDS or passed == MAYBE_NUMPY):
                    # A public method annotated `torch.Tensor` that the file itself calls with NumPy or Python
                    # data (or with what is an array on some paths): the annotation is not the whole truth
                    # (diffusers' schedulers pass NumPy sigmas).
                    value = MAYBE_NUMPY if passed.kind in ("numpy", "maybe_tensor") else MAYBE_TENSOR
            if owner is None and first is not argument and argument.arg in callback and (
                    value.kind == "unknown" or (value.kind == "tensor" and value.device is None)):
                # `roc_auc_compute_fn(y_preds, y_targets)` handed to the base's `__init__` beside a device of CPU
                # default (`super().__init__(roc_auc_compute_fn, ..., device=device)`): the base calls it on the
                # state it keeps there, the caller's device, the CPU unless it asks for another
                value = Value("tensor", None, value.dtype, const=CPU_DEFAULT)
            if value.kind == "tensor" and value.device is None and argument.annotation is not None and first is not argument:
                annotated.add(argument.arg)
            if defaults is not None and (value.kind == "unknown" or value.kind == "python") and "dev" in argument.arg.lower() and not (
                owner is not None and owner.module
            ):
                default = defaults.get(argument.arg)
                if default is not None and self._names_the_cpu(default) and not self._moves_a_model(
                    owner.node if owner is not None else node, argument.arg
                ):
                    # `device: str | torch.device = torch.device("cpu")`: the caller's, the CPU by default. (Not a
                    # model's: an nn.Module's device, or one a model is moved to, is where it runs, the GPU when it
                    # trains there, whatever its default.)
                    value = CPU_BY_DEFAULT
            self.bind(argument.arg, value)
        returns_tensor = node.returns is not None and self.annotation_value(node.returns).kind == "tensor"
        self._annotated_tensors = annotated if returns_tensor and annotated else None
        self._returned: Value | None = None
        self._returns_wanted = None  # (worked out at its first `return value`: _wants_returns)
        self._block(node.body)
        self._annotated_tensors = None
        if self._returned is not None and self._returned.kind != "unknown":
            # What the function gives its callers walked after it (`betas_for_alpha_bar(...)`: a CPU tensor).
            self.returns[id(node)] = self._returned
        if self.self_name is not None and owner is not None:
            # What a method leaves in `self.name` when it ends without a return on the way (joined over its
            # branches): its callers walked after it read that after a `self.method()` statement.
            stores = {name: value for name, value in self._env.maps[0].items()
                      if name[:1] == _ATTRIBUTE and value is not UNKNOWN}
            if stores:
                owner.effects[id(node)] = stores

    def _record_call(self, call: ast.Call) -> None:
        """Remember what a call of a function defined in this cell passes, for :meth:`_function_body`."""
        if self.host is not None:
            self.host.called(self.function, call, lambda name: self.value(name).const)
        func = call.func
        if type(func) is ast.Attribute:
            # self.method(...) in a method of a class of the file: what it passes is what that method gets.
            function = self._own_method(func)  # type: ignore[arg-type]
            if function is None:
                if type(func.value) is ast.Name and func.value.id == self.self_name:  # type: ignore[attr-defined]
                    self._record_instance_call(self.value(func), call)  # self.core(...) of `self.core = _Core()`
                return
            stores = self._method_owner[id(function)].effects.get(id(function)) if self._effects is not None else None
            if stores:
                self._effects.append(stores)  # type: ignore[union-attr]
            parameters = [a.arg for a in [*function.args.posonlyargs, *function.args.args]][0 if _is_static(function) else 1:]
            for override in self._method_owner[id(function)].overrides.get(func.attr, ()):  # type: ignore[attr-defined]
                # a subclass's method of that name in the file gets the call when `self` is one of the subclass's
                # (a searcher's decode_beams handing NumPy rows to each subclass's decode_log_probs)
                self._record_arguments(
                    override, [a.arg for a in [*override.args.posonlyargs, *override.args.args]][0 if _is_static(override) else 1:], call)
        elif type(func) is not ast.Name and type(func) is not ast.NamedExpr:
            return  # x[0](...): only a name holds a function of the cell (Value "function")
        elif type(func) is ast.Name and func.id == "isinstance":  # type: ignore[attr-defined]
            self._isinstance_test(call)
            return
        else:
            function = self.value(func).const
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if type(function) is tuple:
                    self._record_instance_call(self.value(func), call)  # core(...) of `core = _Core()`
                return
            parameters = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        self._record_arguments(function, parameters, call)

    def _record_instance_call(self, callee: Value, call: ast.Call) -> None:
        """``core(x)`` of an object of a class of the file (``core = _Core()``, ``self.core = _Core(...)``): what it
        passes is what the class's ``forward`` (an ``nn.Module``) or ``__call__`` gets, when the class is the
        module's own (its name private): a public class's objects are called from other files too."""
        const = callee.const
        if type(const) is not tuple or const[0] is not _INSTANCE:
            return
        info: _ClassInfo = const[1]
        if info.node is None or not info.node.name.startswith("_"):
            return
        function = info.methods.get("forward" if callee.kind == "module" else "__call__")
        if function is None or _is_static(function):
            return
        self._record_arguments(function, [a.arg for a in [*function.args.posonlyargs, *function.args.args]][1:], call)

    def _record_arguments(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, parameters: list[str], call: ast.Call
    ) -> None:
        """Join what ``call`` passes ``function``'s parameters (named ``parameters`` by position) into what the calls
        walked so far passed it."""
        if any(type(argument) is ast.Starred for argument in call.args[: len(parameters)]):
            return  # f(*args): the text does not say which parameter gets what
        if any(item.arg is None for item in call.keywords):
            return  # f(**kwargs): nor here
        arguments: dict[str, ast.expr] = dict(zip(parameters, call.args))
        for item in call.keywords:
            arguments[item.arg] = item.value  # type: ignore[index]
        # A device parameter the call leaves out gets its default: `device=None` is the default device, the CPU (a
        # helper whose every call in the file omits its device makes its tensors there).
        signature = function.args
        for parameter, default in [
            *zip([*signature.posonlyargs, *signature.args][::-1], signature.defaults[::-1]),
            *zip(signature.kwonlyargs, signature.kw_defaults),
        ]:
            if type(default) is ast.Constant and "dev" in parameter.arg.lower() and parameter.arg not in arguments:
                arguments[parameter.arg] = default
        # What the calls so far pass, joined parameter by parameter in call order (a parameter missing from it was
        # left out by some call: unknown, whatever the others pass, so its arguments need no working out).
        joined = self._call_arguments.get(id(function))
        if joined is None:
            self._call_arguments[id(function)] = {name: self._argument(name, node) for name, node in arguments.items()}
            return
        for name in list(joined):
            node = arguments.get(name)
            value = join(joined[name], self._argument(name, node)) if node is not None else UNKNOWN
            if value == UNKNOWN:
                del joined[name]
            else:
                joined[name] = value

    def _argument(self, parameter: str, node: ast.expr) -> Value:
        """What a call passes a parameter: None for a device (``device=None``, given or by default) is the default
        device, the CPU unless the cell set another."""
        if type(node) is ast.Constant and node.value is None and "dev" in parameter.lower():  # type: ignore[attr-defined]
            return Value("device", self.default_device or "cpu")
        value = self.value(node)
        if value is UNKNOWN and type(node) is ast.Attribute and node.attr == "device" and "dev" in parameter.lower():  # type: ignore[attr-defined]
            return Value("device")  # `device=pairwise_iou.device`: a device, the one of a value the text does not tell
        return value

    def _isinstance_test(self, call: ast.Call) -> None:
        """``isinstance(x, np.ndarray)`` in a function, ``x`` one of its parameters: see :attr:`numpy_too`."""
        function = self.function
        if function is None or len(call.args) != 2 or type(call.args[0]) is not ast.Name:
            return
        classes = call.args[1]
        members = classes.elts if type(classes) is ast.Tuple else [classes]  # type: ignore[attr-defined]
        names = [self.qualified_name(member) for member in members]
        if not any(name in _NUMPY_TYPES for name in names) or any(name in _TENSOR_TYPES for name in names):
            # (`isinstance(x, (torch.Tensor, np.ndarray))` takes either alike: a check of the type, no NumPy branch
            # of its own; a model's image sizes pass it on the GPU)
            return
        name = call.args[0].id  # type: ignore[attr-defined]
        arguments = function.args
        if any(a.arg == name for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]):
            self.numpy_too.setdefault(id(function), set()).add(name)

    def _own_method(self, func: ast.Attribute) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method of this file's class that ``self.name`` names, in a method of that class."""
        function = self.function
        if function is None or type(func.value) is not ast.Name or func.value.id != self.self_name:  # type: ignore[attr-defined]
            return None
        return self._method_owner[id(function)].methods.get(func.attr)

    def _callback_parameters(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        """The parameters (without a default) of a function the file hands, uncalled, to a base class's ``__init__``
        beside a device parameter whose default is the CPU (:meth:`_callbacks`); empty for any other function."""
        callbacks = self._handed_callbacks
        if callbacks is None:
            callbacks = self._handed_callbacks = self._callbacks()
        if id(function) not in callbacks:
            return frozenset()
        arguments = function.args
        positional = [*arguments.posonlyargs, *arguments.args]
        return frozenset(a.arg for a in positional[: len(positional) - len(arguments.defaults)])

    def _callbacks(self) -> set[int]:
        """The functions of the file that a class's ``__init__`` hands to its base's beside its device parameter of CPU
        default, ``super().__init__(roc_auc_compute_fn, ..., device=device)`` (or what a function of the file returns,
        a function it defines: ``super().__init__(_get_kendall_tau(variant), ..., device)``): an epoch metric's
        compute function, which the base, in another module, calls on the outputs it keeps on that device. Not so in
        an ``nn.Module`` or where the class moves a model to the device (:meth:`_moves_a_model`)."""
        functions = {statement.name: statement for statement in self.tree.body
                     if type(statement) in (ast.FunctionDef, ast.AsyncFunctionDef)}
        found: set[int] = set()
        if not functions:
            return found
        for statement in self.tree.body:
            if type(statement) is not ast.ClassDef:
                continue
            info = self._classes.get(statement.name)
            if info is None or info[0].module:
                continue
            init = info[0].methods.get("__init__")
            if init is None:
                continue
            devices = {name for name, default in _defaults(init.args).items()
                       if "dev" in name.lower() and self._names_the_cpu(default) and not self._moves_a_model(statement, name)}
            if not devices:
                continue
            for call in ast.walk(init):
                if type(call) is not ast.Call or type(call.func) is not ast.Attribute or call.func.attr != "__init__":
                    continue
                arguments = [*call.args, *(item.value for item in call.keywords)]
                if not any(type(argument) is ast.Name and argument.id in devices for argument in arguments):
                    continue
                for argument in arguments:
                    if type(argument) is ast.Name and argument.id in functions:
                        found.add(id(functions[argument.id]))
                    elif type(argument) is ast.Call and type(argument.func) is ast.Name and argument.func.id in functions:
                        maker = functions[argument.func.id]
                        nested = {item.name: item for item in maker.body
                                  if type(item) in (ast.FunctionDef, ast.AsyncFunctionDef)}
                        for part in maker.body:
                            if type(part) is ast.Return and type(part.value) is ast.Name and part.value.id in nested:
                                found.add(id(nested[part.value.id]))
        if found:
            # (a function the file also calls by name: those calls tell what it gets)
            called = {node.func.id for node in ast.walk(self.tree) if type(node) is ast.Call and type(node.func) is ast.Name}
            found = {key for key in found if not any(id(f) == key and f.name in called for f in _functions_in(self.tree))}
        return found

    def _wants_returns(self) -> bool:
        """Whether what the function being walked returns matters, asked at its first ``return value`` (most functions
        return nothing: ``__init__``, ``reset``): only if the file calls it by name (most functions of a library are
        called from elsewhere: ``forward``, ``step``), for its annotations (:meth:`_function_body`), or for a property
        of a class of the file."""
        function = self.function
        wanted = self._returns_wanted = (
            self._annotated_tensors is not None or self._called_in_text(function.name)  # type: ignore[union-attr]
            or (self._method_owner.get(id(function)) is not None and _is_property(function))  # type: ignore[arg-type]
        )
        return wanted

    def _called_in_text(self, name: str) -> bool:
        """Whether ``name(`` is in the text more often than ``def``s of that name (a call, or a mention)."""
        calls = self._calls_in_text
        if calls is None:
            calls = self._calls_in_text = {}
        found = calls.get(name)
        if found is None:
            # An occurrence of `name(` that is not a `def name(`: what comparing the two counts tells, in one scan
            # that stops at the first call (two counts over the whole text per function cost a file of many
            # functions a scan of its text per function, twice).
            source, needle = self.source, f"{name}("
            start = source.find(needle)
            while start >= 4 and source.startswith("def ", start - 4):
                start = source.find(needle, start + 1)
            found = calls[name] = start >= 0
        return found

    def annotation_value(self, node: ast.expr) -> Value:
        """What a parameter's annotation says it holds, believed both ways: ``torch.Tensor`` a tensor, ``int`` a
        Python number, ``np.ndarray`` an array, ``pd.DataFrame`` a host object; a union of a tensor and host data
        (``Optional[Union[int, Tensor]]``, ``int | Tensor``) :data:`MAYBE_TENSOR`; anything else unknown."""
        members: list[ast.expr] = []
        stack = [node]
        while stack:
            item = stack.pop()
            if type(item) is ast.Constant and isinstance(item.value, str):  # a quoted annotation: "torch.Tensor"
                item = _quoted_annotation(item.value)  # type: ignore[attr-defined]
                if item is None:
                    return UNKNOWN
            if type(item) is ast.BinOp and type(item.op) is ast.BitOr:  # type: ignore[attr-defined]
                stack += [item.right, item.left]  # type: ignore[attr-defined]
            elif type(item) is ast.Subscript and self.qualified_name(item.value) in _UNIONS:  # type: ignore[attr-defined]
                inner = item.slice  # type: ignore[attr-defined]
                stack += reversed(inner.elts) if type(inner) is ast.Tuple else [inner]  # type: ignore[attr-defined]
            elif not (type(item) is ast.Constant and item.value is None):  # type: ignore[attr-defined]
                members.append(item)
        kinds = set()
        for member in members:
            if type(member) is ast.Subscript and self.qualified_name(member.value) in _CONTAINER_TYPES:  # type: ignore[attr-defined]
                kinds.add("sequence")  # list[float], Tuple[int, int]: a container, no tensor itself
                continue
            if type(member) is ast.Subscript and self.qualified_name(member.value) in _NUMPY_TYPES:  # type: ignore[attr-defined]
                kinds.add("numpy")  # NDArray[np.float64]
                continue
            name = self.qualified_name(member)
            if name in _CONTAINER_TYPES:
                kinds.add("sequence")  # a bare `Sequence`, `list`: a container as well
            elif name in _TENSOR_TYPES:
                kinds.add("tensor")
            elif name in _PYTHON_TYPES:
                kinds.add("python")
            elif name in _NUMPY_TYPES:
                kinds.add("numpy")
            elif name is not None and name.startswith(_HOST_MODULES):
                kinds.add("host")
            elif _ARRAY_OR_TENSOR.search(member.id if type(member) is ast.Name else  # type: ignore[attr-defined]
                                         member.attr if type(member) is ast.Attribute else ""):  # type: ignore[attr-defined]
                kinds.update(("tensor", "numpy"))  # NdarrayOrTensor: a union of both, by its name
            else:
                return UNKNOWN  # a class the text does not tell (it may hold tensors, or be one)
        if kinds == {"tensor"}:
            return Value("tensor")
        if "tensor" in kinds:
            return MAYBE_NUMPY if "numpy" in kinds else MAYBE_TENSOR
        if len(kinds) == 1 and "sequence" not in kinds:  # (a container's elements may be tensors: unknown)
            return {"python": PYTHON, "numpy": Value("numpy"), "host": HOST_OBJECT}[kinds.pop()]
        return UNKNOWN

    def _returned_tuple(self, call: ast.Call, count: int) -> list[ast.expr] | None:
        """The parts of the ``Tuple[...]`` return annotation of the file's function that ``call`` calls, where it has
        ``count`` of them (no ``...``); None otherwise. ``self.method(...)``: the method of the class (of the file) whose
        method this is, where no class of the file that derives from it overrides it."""
        function = call.func
        if type(function) is ast.Attribute:
            owner = self._method_owner.get(id(self.function)) if self.self_name is not None else None
            if owner is None or type(function.value) is not ast.Name or function.value.id != self.self_name:  # type: ignore[attr-defined]
                return None
            function = owner.methods.get(function.attr) if not owner.overrides.get(function.attr) else None  # type: ignore[assignment,attr-defined]
        else:
            callee = self.value(function)
            function = callee.const if callee.kind == "function" else None
        returns = getattr(function, "returns", None)
        if type(returns) is not ast.Subscript or self.qualified_name(returns.value) not in (  # type: ignore[attr-defined]
            "typing.Tuple", "builtins.tuple"
        ):
            return None
        parts = returns.slice.elts if type(returns.slice) is ast.Tuple else [returns.slice]  # type: ignore[attr-defined]
        if len(parts) != count or any(type(part) is ast.Constant and part.value is Ellipsis for part in parts):  # type: ignore[attr-defined]
            return None
        return parts

    def _class(self, node: ast.ClassDef) -> None:
        if self._types is None or ast.ClassDef in self._types:
            self._visit(node)
        for base in node.bases:
            self._expression(base, node)
        is_module = any(
            self.qualified_name(base) == "torch.nn.Module" or self.value(base).kind == "module_class"
            for base in node.bases
        )
        stores = self._attribute_stores
        if stores is None:
            stores = self._attribute_stores = _attribute_stores(self.source)
        counts: dict[str, int] = {}
        # The stores in the class's lines (they are in line order: a file of many classes looks at each store once)
        first = bisect.bisect_left(stores, node.lineno, key=_LINE)
        for _, name in stores[first : bisect.bisect_right(stores, node.end_lineno, key=_LINE)]:  # type: ignore[arg-type]
            counts[name] = counts.get(name, 0) + 1
        info = _ClassInfo(
            tensor=any(self.qualified_name(base) in _TENSOR_TYPES for base in node.bases),
            module=is_module,
            node=node,
            methods={f.name: f for f in node.body if type(f) in (ast.FunctionDef, ast.AsyncFunctionDef)},  # type: ignore[union-attr]
            stores=counts,
        )
        for method in info.methods.values():
            self._method_owner[id(method)] = info
        # The classes of the file it derives from (by name, at any depth): their calls `self.name(...)` reach its own
        # `name` when `self` is one of this class's
        ancestors, bases = [], [base.id for base in node.bases if type(base) is ast.Name]  # type: ignore[attr-defined]
        while bases:
            base = self._classes.get(bases.pop())
            if base is not None and base[0] not in ancestors:
                ancestors.append(base[0])
                bases.extend(base[1])
        info.ancestors = ancestors
        for ancestor in ancestors:
            for name, method in info.methods.items():
                if name in ancestor.methods:
                    ancestor.overrides.setdefault(name, []).append(method)
        self._classes[node.name] = (info, [base.id for base in node.bases if type(base) is ast.Name])  # type: ignore[attr-defined]
        self._env = self._env.new_child()
        self._changed()
        owner, self._owner = self._owner, node
        self._block(node.body)
        self._owner = owner
        self._env = self._env.parents
        self.bind(node.name, Value("module_class", const=(_INSTANCE, info)) if is_module else UNKNOWN)

    def _generic(self, node: ast.AST, parent: ast.AST | None = None) -> None:
        """Visit a node and everything under it, parents first, giving comprehensions and lambdas their own names.

        Through functions made per node type for the node types being visited (:func:`_walker`): each visits its
        node and calls those of its children directly, the leaves (names, constants) handled in line. Nested deeper
        than ``_DEPTH`` (``a + b + c + ...`` of generated code), a subtree goes to :meth:`_generic_deep`, which
        visits it the same way without recursion.
        """
        walkers = self._walkers
        if walkers is None:
            self._generic_deep(node)
        else:
            (walkers.get(type(node)) or _walker(walkers, node))(node, self, 0, parent)

    def _generic_deep(self, node: ast.AST) -> None:
        """:meth:`_generic` through an explicit stack rather than recursion: generated code nests expressions deeper
        than Python's recursion limit allows."""
        stack: list[ast.AST | object] = [node]
        visit, record_call, types = self._visit, self._record_call, self._types
        functions = _CHILDREN
        while stack:
            item = stack.pop()
            kind = type(item)  # parsed trees hold the node classes themselves, no subclasses
            if item is _LEAVE_SCOPE:
                self._leave_scope()
                continue
            if kind in _LEAVES:
                if types is None or kind in types:
                    visit(item)  # type: ignore[arg-type]
                continue
            if types is None or kind in types:
                visit(item)  # type: ignore[arg-type]
            if kind is ast.Call:
                record_call(item)  # type: ignore[arg-type]
            elif kind in _COMPREHENSIONS:
                self._comprehension(item)  # type: ignore[arg-type]
                continue
            elif kind is ast.Lambda:
                self._enter_lambda(item)  # type: ignore[arg-type]
                stack.append(_LEAVE_SCOPE)
                stack.append(item.body)  # type: ignore[attr-defined]
                continue
            function = functions.get(kind)
            children = (function or _children_function(item))(item)  # type: ignore[arg-type]
            children.reverse()
            stack.extend(children)

    def _enter_lambda(self, node: ast.Lambda) -> None:
        arguments = {a.arg: UNKNOWN for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        self._env = self._env.new_child(arguments)
        self._changed()

    def _leave_scope(self) -> None:
        self._env = self._env.parents
        self._changed()

    _expression = _generic

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        self._env = self._env.new_child()
        self._changed()
        for generator in node.generators:
            self.parents[generator] = node
            self._generic(generator.iter, generator)
            self._bind_iteration(generator.target, generator.iter)
            self._generic(generator.target, generator)
            if self._types is None or ast.comprehension in self._types:
                self._visit(generator)
            for condition in generator.ifs:
                self._generic(condition, generator)
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for element in elements:
            self._generic(element, node)
        self._env = self._env.parents
        self._changed()


#: The prefix of the names under which a method's scope keeps what it stored in `self.name` (no identifier has it).
_ATTRIBUTE = "."
#: ``Value.const[0]`` of an object made by calling a class of the file (``(_INSTANCE, its _ClassInfo)``).
_INSTANCE = "instance of a class of the file"
#: Methods that change what a dict holds (:meth:`CellScope._items_written`).
_DICT_CHANGES = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__"})
_NAMELESS_TARGETS = frozenset({ast.Attribute, ast.Subscript})  # assigning to these binds no name
_LEAVES = frozenset({ast.Name, ast.Constant})  # nodes without children: a str, a constant
_CHILDREN: dict[type, Callable[[ast.AST], list[ast.AST]]] = dict.fromkeys(_LEAVES, lambda node: [])
_COMPREHENSIONS = frozenset({ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp})
_LEAVE_SCOPE = object()  # on the walk's stack: a lambda's body ends here
# Statements the walk takes apart by hand (_statement), and the parts of nodes it goes through by hand.
_COMPOUND = frozenset({ast.If, ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try,
                       getattr(ast, "TryStar", ast.Try), ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                       ast.Match})
_HOLDERS = frozenset({ast.ExceptHandler, ast.match_case})  # parts that hold statements (_adopt)




# A generated walker: (node, scope, depth, parent) -> None.
_Walker = Callable[[ast.AST, "CellScope", int, "ast.AST | None"], None]
#: How deep the generated walkers recurse into one expression before the rest goes through an explicit stack.
_DEPTH = 48
#: Per choice of node types to visit (``walk``'s ``types``): the walker of each node type met so far.
_WALKERS: dict[Any, dict[type, _Walker]] = {}  # (types, calls, operators): walk's arguments


def _walker(walkers: dict[type, _Walker], node: object) -> _Walker:
    """The function that walks nodes of ``node``'s type as :meth:`CellScope._generic_deep` does (the same visits in
    the same order, the same names bound), made from the type's fields at its first node: visit the node when its
    type is chosen, then each child in field order, the leaves (``Name``, ``Constant``) in line. Kept in
    ``walkers``, the table of the chosen types (its key in ``_WALKERS``)."""
    kind = type(node)
    if not isinstance(node, ast.AST):  # an identifier in Global.names, a constant in MatchSingleton.value
        walkers[kind] = _skip
        return _skip
    types, calls, operators = next(key for key, table in _WALKERS.items() if table is walkers)
    kept = next((chosen_operators for node_type, chosen_operators in operators or () if node_type is kind), None)
    chosen = types is None or kind in types
    leaves = [leaf for leaf in _LEAVES if types is None or leaf in types]
    lines = ["def walk(node, scope, depth, parent):"]
    if kind not in _LEAVES:  # the parents of names and constants are recorded when asked for (CellScope.parent)
        lines += ["    if parent is not None:", "        scope.parents[node] = parent"]
    lines += ["    if depth > DEPTH:",
             "        scope._generic_deep(node)",
             "        return"]
    if chosen and kept is not None:  # (walk's `operators`: the operators of this node type the visitor takes)
        lines += ["    if type(node.op) in OPERATORS:", "        scope._visit(node)"]
    elif chosen and (kind is not ast.Call or calls is None):
        lines.append("    scope._visit(node)")
    if kind in _LEAVES:
        lines.append("    return")
    elif kind is ast.Call:
        lines += ["    func = node.func",
                  "    func_kind = type(func)"]
        if chosen and calls is not None:  # (walk's `calls`: the attributes' names the visitor takes)
            lines += ["    if func_kind is not Attribute or func.attr in CALLS or (CAPITALIZED and func.attr[:1].isupper()):",
                      "        scope._visit(node)"]
        # (`x.f()` in a method: recorded only for `self.f()`, as _record_call would take no other)
        lines += ["    if scope.host is not None or func_kind is Name or func_kind is NamedExpr or (",
                  "            func_kind is Attribute and scope.self_name is not None and type(func.value) is Name",
                  "            and func.value.id == scope.self_name):",
                  "        scope._record_call(node)"]
    elif kind in _COMPREHENSIONS:
        lines += ["    scope._comprehension(node)", "    return"]
    elif kind is ast.Lambda:
        lines += ["    scope._enter_lambda(node)",
                  "    body = node.body",
                  "    (walkers.get(type(body)) or make(walkers, body))(body, scope, depth + 1, node)",
                  "    scope._leave_scope()",
                  "    return"]
    if kind not in _LEAVES and kind not in _COMPREHENSIONS and kind is not ast.Lambda:
        lines.append("    depth += 1")
        for name, holds in _field_kinds(node):
            if holds is _ONE:
                lines += [f"    child = node.{name}", "    if child is not None:"]
                indent = "        "
            else:
                lines.append(f"    for child in node.{name}:")
                indent = "        "
                if holds is _MIXED_LIST:
                    lines.append("        if child is not None:")
                    indent = "            "
            lines.append(f"{indent}child_kind = type(child)")
            lines.append(f"{indent}if child_kind is Name or child_kind is Constant:")
            if leaves:
                lines.append(f"{indent}    if child_kind in LEAVES:")
                lines.append(f"{indent}        scope._visit(child)")
            else:
                lines.append(f"{indent}    pass")
            lines.append(f"{indent}else:")
            lines.append(f"{indent}    (walkers.get(child_kind) or make(walkers, child))(child, scope, depth, node)")
    namespace: dict[str, Any] = {"DEPTH": _DEPTH, "Name": ast.Name, "Attribute": ast.Attribute, "Constant": ast.Constant, "NamedExpr": ast.NamedExpr,
                                 "LEAVES": frozenset(leaves), "walkers": walkers, "make": _walker,
                                 "CALLS": calls[0] if calls is not None else None,
                                 "CAPITALIZED": calls[1] if calls is not None else None, "OPERATORS": kept}
    exec(compile("\n".join(lines), f"<walk {kind.__name__}>", "exec"), namespace)  # noqa: S102 - code made here from the node type's field names only
    function = walkers[kind] = namespace["walk"]
    return function


def _skip(node: object, scope: CellScope, depth: int, parent: ast.AST | None) -> None:
    pass


def _skip_visit(node: ast.AST) -> None:
    pass


def _imports(tree: ast.Module, source: str | None = None) -> list[ast.Import | ast.ImportFrom]:
    """The cell's imports in ``ast.walk``'s order (breadth first, so a later import of a name wins), found through
    the statements alone: imports are statements, and statements hold no expressions that hold statements. Given
    the ``source``, a compound statement none of whose lines holds the word ``import`` is not entered (most functions
    import nothing): an import's lines hold its keyword."""
    found: list[ast.Import | ast.ImportFrom] = []
    nodes: list[ast.AST] = [tree]
    blocks = _BLOCK_FIELDS
    lines = _import_lines(source) if source is not None else None
    for node in nodes:
        kind = type(node)
        if kind is ast.Import or kind is ast.ImportFrom:
            found.append(node)  # type: ignore[arg-type]
            continue
        fields = blocks.get(kind)
        if fields is None:
            continue
        if lines is not None and kind in _COMPOUND:
            index = bisect.bisect_left(lines, node.lineno)  # type: ignore[attr-defined]
            if index == len(lines) or lines[index] > node.end_lineno:  # type: ignore[attr-defined]
                continue
        for name in fields:
            nodes.extend(getattr(node, name))
    return found


def statements(tree: ast.AST) -> list[ast.AST]:
    """Every statement under ``tree`` (with the except handlers and match cases that hold some), block by block:
    statements hold no expressions that hold statements, so no expression is gone through."""
    found: list[ast.AST] = []
    fields = _BLOCK_FIELDS
    blocks = [getattr(tree, name) for name in fields.get(type(tree), ())]
    for block in blocks:  # (the list grows as the loop goes)
        for statement in block:
            found.append(statement)
            held = fields.get(type(statement))
            if held is not None:
                blocks += [getattr(statement, name) for name in held]
    return found


def _import_lines(source: str) -> list[int] | None:
    """The numbers of the lines that hold ``import``, in order; None where ``\r`` may end lines (the parser's line
    numbers then need more than counting ``\n``)."""
    if "\r" in source:
        return None
    found: list[int] = []
    line, counted = 1, 0
    position = source.find("import")
    while position >= 0:
        line += source.count("\n", counted, position)
        counted = position
        if not found or found[-1] != line:
            found.append(line)
        position = source.find("import", position + 6)
    return found


# The fields that hold statements, handlers or match cases, per node type (Parser/Python.asdl), in field order.
_BLOCK_FIELDS: dict[type, tuple[str, ...]] = {
    kind: tuple(name for name in ("body", "handlers", "orelse", "finalbody", "cases") if name in kind._fields)
    for kind in (ast.Module, ast.Interactive, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For,
                 ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Match, ast.Try,
                 getattr(ast, "TryStar", ast.Try), ast.ExceptHandler, ast.match_case)
}


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))`` without the ``ctx`` and operator markers, several times faster: a function
    per node type, made at its first node, reads its node fields by name (no generator, no loop over the fields):
    the static pass takes the children of every node of a file."""
    function = _CHILDREN.get(type(node))
    if function is None:
        function = _children_function(node)
    return function(node)


def _children_function(node: ast.AST) -> Callable[[ast.AST], list[ast.AST]]:
    kind = type(node)
    lines = ["def children(node):", "    found = []"]
    for name, holds in _field_kinds(node):
        if holds is _LIST:
            lines.append(f"    found += node.{name}")
        elif holds is _MIXED_LIST:
            lines.append(f"    found += [item for item in node.{name} if isinstance(item, AST)]")
        else:
            lines += [f"    value = node.{name}", "    if isinstance(value, AST):", "        found.append(value)"]
    lines.append("    return found")
    namespace: dict[str, Any] = {"AST": ast.AST}
    exec(compile("\n".join(lines), f"<walk {kind.__name__}>", "exec"), namespace)  # noqa: S102 - code made here from the node type's field names only
    function = _CHILDREN[kind] = namespace["children"]
    return function


_LIST, _MIXED_LIST, _ONE = object(), object(), object()
# List fields that may hold something other than nodes: None for ``**`` in a dict and for keyword-only arguments
# without a default, identifiers in global/nonlocal and class patterns.
_MIXED_LISTS = frozenset({(ast.Dict, "keys"), (ast.arguments, "kw_defaults"), (ast.Global, "names"),
                          (ast.Nonlocal, "names"), (ast.MatchClass, "kwd_attrs")})
# Fields holding identifiers, numbers or strings, never a node (Constant.value is a Python constant).
_MARKER_FIELDS = frozenset({"ctx", "op", "ops"})
_SCALAR_FIELDS = frozenset({"id", "name", "arg", "attr", "module", "asname", "level", "is_async", "kind",
                            "conversion", "simple", "type_comment", "tag"})


def _field_kinds(node: ast.AST) -> tuple[tuple[str, object], ...]:
    """Per node type, from its first node: each field that can hold nodes, and whether it is a list of nodes, a list
    that may hold other things too, or one node or None (a field is a list in every node of a type: the grammar's
    ``*``, Parser/Python.asdl). ``ctx`` (Load, Store, Del) and the operators (``op``, ``ops``: Add, Not, Lt...) are
    left out: shared objects without children, of types no rule looks at."""
    kind = type(node)
    kinds = []
    for name in kind._fields:
        if name in _MARKER_FIELDS or name in _SCALAR_FIELDS or (kind is ast.Constant and name == "value"):
            continue
        value = getattr(node, name, None)
        if isinstance(value, list):
            kinds.append((name, _MIXED_LIST if (kind, name) in _MIXED_LISTS else _LIST))
        else:
            kinds.append((name, _ONE))
    return tuple(kinds)


#: Python's scalar classes, as ``isinstance`` names them (not its containers: a list may hold tensors).
_PYTHON_SCALAR_CLASSES = frozenset(
    {"builtins.int", "builtins.float", "builtins.bool", "builtins.complex", "builtins.str", "builtins.bytes"}
)


class _ClassInfo:
    """A class of the file: whether it subclasses torch.Tensor (its ``self`` is a tensor), and its methods by name."""

    tensor: bool
    #: whether it is a torch.nn.Module (derives from it, or from a module class of the file)
    module: bool
    node: ast.ClassDef | None
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    #: How many statements of the class's text store each ``self.name`` (:func:`_attribute_stores`).
    stores: dict[str, int]
    #: What ``self.name = ...`` in its methods stores, joined over the assignments walked so far.
    attributes: dict[str, Value]
    stored_by: dict[str, object]  # the method that stored each last
    seen: dict[str, int]  # the stores of each walked so far
    #: method id -> what it stores in `self.name` by its end (_function_body), for `self.method()` calls after it
    effects: dict[int, dict[str, Value]]
    #: method name -> the methods of that name of the file's classes that derive from this one (directly or not)
    overrides: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]
    #: whether its __init__ hands a device parameter of CPU default to its base's (None: not worked out yet)
    base_device: bool | None
    #: the classes of the file it derives from (by name, at any depth)
    ancestors: list[_ClassInfo]
    #: whether its methods update a tensor it keeps on a device of CPU default with the caller's data, not moved
    #: there (`self.loss_sum += loss * n`): the device it keeps is then that data's (timm's evaluators)
    mixed: bool
    #: attribute -> (how many ``self.name.append(t)`` the walk has seen, whether each appended a CPU tensor)
    appended: dict[str, tuple[int, bool]]

    def __init__(self, tensor: bool, methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
                 stores: dict[str, int], module: bool = False, node: ast.ClassDef | None = None) -> None:
        self.tensor = tensor
        self.module = module
        self.node = node
        self.methods = methods
        self.stores = stores
        self.attributes = {}
        self.stored_by = {}
        self.seen = {}
        self.effects = {}
        self.overrides = {}
        self.base_device = None
        self.ancestors = []
        self.mixed = False
        self.appended = {}


# `self.name = `, `self.name += `, `self.name: T = ` and the names of `self.a, self.b = ...`: what a class's text
# stores in its instances' attributes, counted so that an attribute is believed only once the walk saw each store.
# One pattern, one scan of the text (the three were three scans, a tenth of a class-heavy file's walk): group 1 the
# name of `self.register_buffer("name"`, else group 2 the name of `self.name = ` (an operator in group 3) or of
# `self.name,` (`self.a, self.b = ...` when the line is a target list, below). No match holds a `self.` but at its
# start, so the one scan finds what each pattern found alone.
# (no \b: a literal first makes the search fast; `myself.x = ` counted too only makes an attribute less believed)
# The name is taken whole, `(?=(\w+))\2` (an atomic group, which Python's re has only from 3.11): a shorter part of
# it is followed by a word character, which nothing after it can match, so the search gives up on `self.conv1(x)` at
# once rather than trying each shorter name (a third of the scan, `self.` being on most lines of a model).
_STORES = re.compile(
    r"self\.(?:register_(?:buffer|parameter)\(\s*[\"'](\w+)[\"']|(?=(\w+))\2[ \t]*(?:(=(?!=)|[-+*/@%&|^<>]{1,2}=|:(?!=))|,))"
)
_TARGET_LIST = re.compile(r"[ \t]*\(?[\w. \t,*]*\)?[ \t]*")


_QUOTED: dict[str, ast.expr | None] = {}


def _quoted_annotation(text: str) -> ast.expr | None:
    """A quoted annotation's expression, parsed once per process (files repeat the same few), None if not Python."""
    found = _QUOTED.get(text, _UNSEEN)
    if found is _UNSEEN:
        try:
            found = ast.parse(text, mode="eval").body if len(text) < 200 else None
        except (SyntaxError, ValueError):
            found = None
        if len(_QUOTED) < 4096:
            _QUOTED[text] = found  # type: ignore[assignment]
    return found  # type: ignore[return-value]


_LINE = operator.itemgetter(0)  # the line of an (line, name) of _attribute_stores


def _attribute_stores(source: str) -> list[tuple[int, str]]:
    """(line, name) of each store of ``self.name`` in the text (:data:`_STORES`, and the names of a target list)."""
    found: list[tuple[int, str]] = []
    # The line of the last `self.name,` looked at: where it ends, and where its target list ends (-1: it has none).
    # Worked out once per line: `f(self.a, self.b, self.c)` is three matches on one line.
    line_end = target_end = -1
    for match in _STORES.finditer(source):
        registered, name, stored = match.groups()
        position = match.start()
        if registered is not None or stored is not None:
            found.append((position, registered or name))
            continue
        if position > line_end:
            start = source.rfind("\n", 0, position) + 1
            end = source.find("\n", position)
            line_end = end if end >= 0 else len(source)
            text = source[start:line_end]
            head, equals, tail = text.partition("=")
            # (not the last line of a call's arguments, `    self.a, self.b, flag=True)`: no target list)
            target_end = start + len(head) if (
                equals and not tail.startswith("=") and text.count(")") <= text.count("(")
                and _TARGET_LIST.fullmatch(head)
            ) else -1
        if position < target_end:
            found.append((position, name))
    found.sort()
    stores, line, position = [], 1, 0
    for start, name in found:
        line += source.count("\n", position, start)
        position = start
        stores.append((line, name))
    return stores


def _is_static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(type(d) is ast.Name and d.id == "staticmethod" for d in function.decorator_list)


def _is_property(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``@property`` or ``@functools.cached_property``: read as an attribute, ``self.device``."""
    return any((type(d) is ast.Name and d.id in ("property", "cached_property"))  # type: ignore[attr-defined]
               or (type(d) is ast.Attribute and d.attr == "cached_property")  # type: ignore[attr-defined]
               for d in function.decorator_list)


def _defaults(arguments: ast.arguments) -> dict[str, ast.expr]:
    """The parameters of a signature that have a default, with it."""
    positional = [*arguments.posonlyargs, *arguments.args]
    found = {a.arg: d for a, d in zip(positional[::-1], arguments.defaults[::-1])}
    found.update((a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)
    return found


def _host_side(value: Value) -> bool:
    """An array or host object, or a tensor or device the text places on the CPU (not a list or tuple, which may hold
    tensors, nor a Python number or flag, which most helpers take beside their tensors and which seldom decides a
    finding: walking again for those would walk a tenth of a library's functions twice)."""
    kind = value.kind
    return kind == "numpy" or kind == "host" or (value.device == "cpu" and kind in ("tensor", "device", "tensors")) or (
        value.const == CPU_DEFAULT)


def combine_devices(values: Iterable[Value], *, strict: bool = True) -> Device | None:
    """The device of an op's result: CUDA when any tensor operand is on CUDA (PyTorch allows only CPU scalars
    beside it), CPU when every operand is a CPU tensor or Python data, otherwise unknown."""
    # (one pass: CUDA as soon as an operand is on it; else CPU when every tensor operand is, one at least, and, with
    # `strict`, every other operand is host data)
    tensors = cpu_tensors = False
    only_host_operands = True
    for v in values:
        kind = v.kind
        if v.device == "cuda" and (kind == "tensor" or kind == "unknown" or kind == "tensors"):
            return "cuda"
        if kind == "tensor":
            tensors = True
            if v.device != "cpu":
                cpu_tensors = None  # (a tensor elsewhere: no CPU result)
            elif cpu_tensors is not None:
                cpu_tensors = True
        elif not (kind == "python" or kind == "sequence" or kind == "device"):
            only_host_operands = False
    if tensors and cpu_tensors and (only_host_operands or not strict):
        return "cpu"
    return None


def _names_a_config(node: ast.AST) -> bool:
    """``config``, ``self.config``, ``model.generation_config``: an object of settings (transformers, Lightning)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "config" or name.endswith("_config")


def _host_result(values: list[Value], *, comparison: bool) -> bool:
    """Whether an operator over a CPU tensor and operands of unknown device gives a CPU tensor.

    PyTorch mixes devices only for a 0-dim CPU tensor beside CUDA ones (c10's "CPU scalar" exception in
    TensorIterator): a CPU tensor of one or more dimensions makes the result a CPU tensor (or an error). A 0-dim
    CPU tensor compared with something (``torch.rand([]) < p``, layer drop) is a host-side draw against a threshold;
    in arithmetic (``scale * x``) it may scale a CUDA tensor, so that stays unknown.
    """
    # ndim unknown counts as dimensions: the 0-dim CPU tensors met beside CUDA ones are constants the text spells
    # out (torch.tensor(2.0), whose ndim is known). (One pass over the operands, no generator.)
    found = False
    for v in values:
        if v.device == "cuda":
            return False
        if v.device == "cpu" and v.kind == "tensor" and (comparison or v.ndim != 0):
            found = True
    return found


def _placed(values: list[Value]) -> str | None:
    """:data:`MOVED` when a tensor operand was placed on a device by the text (the result is where it is); else
    :data:`CPU_DEFAULT` when the tensor operands are on a device the caller picks, the CPU by default, or on the CPU;
    else :data:`HOST_DATA` when the operands are CPU tensors, one of host data, and numbers."""
    host = None
    cpu_by_default: bool | None = None  # (every tensor on the CPU or on a device of CPU default, one at least so)
    for value in values:
        if value.kind == "tensor":
            if value.const == MOVED:
                return MOVED
            if value.const == CPU_DEFAULT:
                cpu_by_default = cpu_by_default is not False
                host = False
            elif value.device != "cpu":
                host = cpu_by_default = False
            elif value.const == HOST_DATA and host is None:
                host = True
        elif value.kind not in ("python", "sequence", "device"):
            host = cpu_by_default = False
    return CPU_DEFAULT if cpu_by_default else HOST_DATA if host else None


def _partly_cpu(values: list[Value]) -> bool:
    """Whether an operation's operands are :data:`PARTLY_CPU` tensors (or the caller's NumPy-or-tensor data,
    :data:`MAYBE_NUMPY`) beside host data and CPU tensors only."""
    partly = False
    for value in values:
        kind = value.kind
        if kind == "maybe_tensor" and value.const in ("cpu", "numpy"):
            partly = True
        elif not (kind in ("python", "sequence", "device") or (kind == "tensor" and value.device == "cpu")):
            return False
    return partly


def strongest(certainties: Iterable[Certainty | None]) -> Certainty | None:
    """The surest of several operands' certainties: a finding is as sure as its surest operand, and no surer (a
    `possible` operand alone, a value that is a tensor on some paths or on a device of CPU default, makes a
    `possible` finding, not a `likely` one)."""
    found = set(certainties)
    for certainty in ("certain", "likely", "possible"):
        if certainty in found:
            return certainty  # type: ignore[return-value]
    return None


def join(first: Value, second: Value) -> Value:
    """What a name holds after two paths that bound it differently."""
    if first == second:
        return first
    kinds = {first.kind, second.kind}
    if first.kind == second.kind and CPU_DEFAULT in (first.const, second.const) and (
        _on_cpu_by_default(first) and _on_cpu_by_default(second)
    ):
        # the CPU on one path, the caller's device of CPU default on the other (a metric's sum made there, a CPU
        # tensor)
        if first.kind == "device":
            return CPU_BY_DEFAULT
        return Value("tensor", None, first.dtype if first.dtype == second.dtype else None,
                     ndim=first.ndim if first.ndim == second.ndim else None, const=CPU_DEFAULT)
    if "tensor" in kinds and kinds <= {"tensor", "maybe_tensor"} and (first.device == "cpu" or second.device == "cpu"):
        # A CPU tensor on one path; on the other a tensor of unknown device, or what a union annotation admits
        # (`block_sizes: list[int] | Tensor`, the list made into a CPU tensor): the code is written for host data.
        cpu, other = (first, second) if first.device == "cpu" and first.kind == "tensor" else (second, first)
        if other.kind == "maybe_tensor":
            return other if other.const == "numpy" else PARTLY_CPU
        if other.device is None and other.const != MOVED and cpu.const == HOST_DATA:
            return PARTLY_CPU
    if kinds == {"maybe_tensor", "numpy"} or (
        kinds == {"unknown", "maybe_tensor"} and MAYBE_NUMPY in (first, second) and UNKNOWN in (first, second)
    ):
        # the caller's tensor (x: NdarrayOrTensor, narrowed) on one path, an array on the other; or what NumPy
        # arithmetic made on one path and what the text does not tell on the other (`x = interpreter.get_tensor(i)`,
        # then `x = (x.astype(np.float32) - zero_point) * scale` on one branch): code written for arrays. (An
        # array on one path and an untold value on the other stays untold: `x.clone() if isinstance(x, Tensor) else
        # np.copy(x)` takes the tensor too.)
        return MAYBE_NUMPY
    if kinds == {"sequence", "tensors"} and EMPTY in (first.const, second.const):
        return first if first.kind == "tensors" else second  # a loop that appended tensors, or ran no time
    if first.kind != second.kind:
        return UNKNOWN
    device = first.device if first.device == second.device else None
    dtype = first.dtype if first.dtype == second.dtype else None
    ndim = first.ndim if first.ndim == second.ndim else None
    placed = None
    if first.kind == "tensors" and first.const == second.const == DICT:
        placed = DICT if device == "cpu" else None
    if first.kind == "tensor":
        placed = MOVED if MOVED in (first.const, second.const) else (
            HOST_DATA if device == "cpu" and HOST_DATA in (first.const, second.const) else None)
    return Value(first.kind, device, dtype, ndim=ndim, const=placed)


def _on_cpu_by_default(value: Value) -> bool:
    """A CPU tensor or device, or one of :data:`CPU_DEFAULT` (:func:`join`)."""
    return (value.kind == "tensor" or value.kind == "device") and (value.device == "cpu" or value.const == CPU_DEFAULT)


#: Names of what a model is held in (``self.model``, ``sim_net``, ``generator.module``).
_MODEL_WORDS = ("model", "net", "module")


def _functions_in(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions defined anywhere in ``tree``."""
    return [node for node in ast.walk(tree) if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef)]


def _model_moves(node: ast.AST) -> list[list[ast.expr]]:
    """The devices of each move of a model in ``node`` (a function, or a class: its methods), the arguments that may
    name the device of ``self.model = model.to(self.device)``, ``_LPIPS(net).to(device)`` (what
    :meth:`CellScope._moves_a_model` looks through)."""
    found = []
    for call in ast.walk(node):
        if type(call) is not ast.Call or type(call.func) is not ast.Attribute or call.func.attr != "to":  # type: ignore[attr-defined]
            continue
        receiver = call.func.value  # type: ignore[attr-defined]
        if type(receiver) is ast.Call:
            receiver = receiver.func  # type: ignore[attr-defined]
        name = receiver.id if type(receiver) is ast.Name else receiver.attr if type(receiver) is ast.Attribute else ""  # type: ignore[attr-defined]
        if (type(call.func.value) is ast.Call and name[:1].isupper()) or any(word in name.lower() for word in _MODEL_WORDS):  # type: ignore[attr-defined]
            found.append([*call.args[:1], *(item.value for item in call.keywords if item.arg == "device")])  # type: ignore[attr-defined]
    return found


def _device_test_in(test: ast.expr) -> bool:
    """Whether an if's test is (or holds, in an ``and``/``or``) a test of a tensor's device."""
    return any(_device_test(part) is not None for part in (test.values if type(test) is ast.BoolOp else [test]))  # type: ignore[attr-defined]


def _device_test(test: ast.expr) -> tuple[str, str | None, str | None, bool] | None:
    """``(x, device when true, device when false, only a tensor has it)`` for a test of a name's device: ``x.is_cuda``
    -> (x, cuda, cpu, True), ``x.device.type != "cpu"`` -> (x, None, cpu, False) ("cpu" for a tensor off the GPU, None
    for nothing learnt; a module has a ``.device`` too, not an ``.is_cuda``)."""
    flip = False
    while type(test) is ast.UnaryOp and type(test.op) is ast.Not:  # type: ignore[attr-defined]
        test, flip = test.operand, not flip  # type: ignore[attr-defined]
    found: tuple[str, str | None, str | None, bool] | None = None
    if type(test) is ast.Attribute and test.attr == "is_cuda" and type(test.value) is ast.Name:  # type: ignore[attr-defined]
        found = (test.value.id, "cuda", "cpu", True)  # type: ignore[attr-defined]
    elif (
        type(test) is ast.Compare
        and len(test.ops) == 1  # type: ignore[attr-defined]
        and type(test.ops[0]) in (ast.Eq, ast.NotEq)  # type: ignore[attr-defined]
        and type(test.left) is ast.Attribute  # type: ignore[attr-defined]
        and test.left.attr == "type"  # type: ignore[attr-defined]
        and type(test.left.value) is ast.Attribute  # type: ignore[attr-defined]
        and test.left.value.attr == "device"  # type: ignore[attr-defined]
        and type(test.left.value.value) is ast.Name  # type: ignore[attr-defined]
        and type(test.comparators[0]) is ast.Constant  # type: ignore[attr-defined]
        and test.comparators[0].value in ("cuda", "cpu")  # type: ignore[attr-defined]
    ):
        name = test.left.value.value.id  # type: ignore[attr-defined]
        cuda = test.comparators[0].value == "cuda"  # type: ignore[attr-defined]
        found = (name, "cuda", "cpu", False) if cuda else (name, "cpu", None, False)
        if type(test.ops[0]) is ast.NotEq:  # type: ignore[attr-defined]
            found = (name, found[2], found[1], False)
    if found is not None and flip:
        found = (found[0], found[2], found[1], found[3])
    return found


def element_of(container: Value) -> Value:
    """What iterating (or unpacking) a value yields."""
    if container.kind == "maybe_tensor" and container.const is not None:
        return container  # rows of the caller's NumPy-or-tensor data
    if container.const == DICT:
        return UNKNOWN  # iterating a dict gives its keys
    if container.kind in ("tensor", "tensors"):
        # (an element of what the text moved is where it was moved: `for d in boxes.cpu()`, a row of detections)
        # (one dimension fewer: `for i in torch.arange(n)` gives 0-dim tensors)
        ndim = container.ndim - 1 if container.kind == "tensor" and container.ndim else None
        return Value("tensor", container.device, container.dtype if container.kind == "tensor" else None, ndim=ndim,
                     const=container.const if container.const in (MOVED, CPU_DEFAULT) else None)
    if container.kind in ("numpy", "python"):
        return container if container.kind == "numpy" else PYTHON
    return UNKNOWN


def truth_tested(node: ast.expr) -> list[ast.expr]:
    """The operands whose truth value Python asks for when it tests ``node`` (``a and not b`` -> [a, b]); a list, not
    a generator per operand (SF103 asks it of every test that is an ``and``, ``or`` or ``not``)."""
    kind = type(node)
    if kind is ast.BoolOp:
        return [operand for value in node.values for operand in truth_tested(value)]  # type: ignore[attr-defined]
    if kind is ast.UnaryOp and type(node.op) is ast.Not:  # type: ignore[attr-defined]
        return truth_tested(node.operand)  # type: ignore[attr-defined]
    return [node]


def index_parts(subscript: ast.Subscript) -> list[ast.expr]:
    """The comma-separated parts of an index: ``x[0, mask, 1:3]`` -> [0, mask, 1:3]."""
    index = subscript.slice
    return list(index.elts) if isinstance(index, ast.Tuple) else [index]


def assigned_value(subscript: ast.Subscript, scope: CellScope) -> ast.expr | None:
    """The value stored by ``x[...] = value`` when ``subscript`` is the single target; None otherwise."""
    parent = scope.parent(subscript)
    if isinstance(parent, ast.Assign) and parent.targets == [subscript]:
        return parent.value
    return None
