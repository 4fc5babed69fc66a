"""## What it does
Checks for a tensor created on the GPU from Python or NumPy data: `torch.tensor(obj, device="cuda")`,
`torch.as_tensor(array, device="cuda")`, `torch.asarray(obj, device="cuda")`.

## Why is this bad?
The data starts in CPU memory, so creating the tensor on the GPU is a blocking copy: the CPU waits for the copy and
for the work queued before it (`cudaMemcpyAsync` + `cudaStreamSynchronize`). A constant such as
`torch.tensor(0.0, device="cuda")` inside a loop pays this every iteration.

## Example
```python
zero = torch.tensor(0, device="cuda")
weights = torch.tensor([0.2, 0.3, 0.5], device="cuda")
```

## Use instead
Create constants with a factory that fills on the GPU (`torch.zeros`, `torch.ones`, `torch.full`: no copy at all),
or build the tensor on the CPU and copy it with `non_blocking=True` (pin it for a truly asynchronous copy). Better
still, create such tensors once, outside loops.
```python
zero = torch.zeros((), dtype=torch.long, device="cuda")
weights = torch.tensor([0.2, 0.3, 0.5]).to("cuda", non_blocking=True)
```

## Fix safety
Safe. A literal number becomes `torch.zeros`/`torch.ones`/`torch.full` with the dtype `torch.tensor` would infer
(int: `torch.long`, float: the default dtype, bool: `torch.bool`). Other data becomes a CPU tensor copied with
`non_blocking=True`: the CPU tensor is a fresh temporary, so no later write can race with the copy.
`torch.as_tensor`/`torch.asarray` of a variable need review, as the source may be a pinned buffer the code reuses.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule, callee_names
from syncfree.catalog.scope import CellScope, keyword, number_literal

_CONSTRUCTORS = frozenset({"torch.tensor", "torch.as_tensor", "torch.asarray"})


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    name = scope.call_name(node)
    if name not in _CONSTRUCTORS or not node.args:
        return
    device = keyword(node, "device")
    if device is None:
        return
    is_device, where = scope.device_argument(device.value)
    if not is_device or where == "cpu":
        return
    if type(node.args[0]) in (ast.List, ast.Tuple) and not node.args[0].elts:  # type: ignore[attr-defined]
        # torch.tensor([], device=d): no element, no copy (ATen's copy_ returns before any transfer when numel is 0)
        return
    data = scope.value(node.args[0])
    if data.kind == "tensor" and data.device != "cpu":
        # A GPU tensor, or a tensor of unknown device (a module's buffer, `torch.as_tensor(self.kernel,
        # device=pred.device)`): no Python data to copy; where it is on the CPU, the copy is a CPU tensor's.
        return
    if isinstance(device.value, ast.Attribute) and device.value.attr == "device" and scope.text(device.value.value) == scope.text(node.args[0]):
        return  # torch.as_tensor(labels, dtype=..., device=labels.device): a tensor converted where it is
    certainty = "certain" if where == "cuda" else "possible" if scope.is_callers_device(device.value) else "likely"
    if (
        name != "torch.tensor"
        and certainty == "likely"
        and data.kind == "unknown"
        and scope.is_parameter(node.args[0])
        and scope.is_parameter(device.value)
    ):
        # torch.as_tensor(value, device=device), both parameters the text does not type: a conversion utility, the
        # caller's data (a tensor where it is, or host data) to the caller's device (None by default: the CPU)
        certainty = "possible"
    yield Match(
        node,
        f"`{scope.snippet(node)}` copies Python/NumPy data from the CPU to the GPU and waits for the copy",
        certainty,
        parts={"name": name, "data": node.args[0], "device": device},
    )


def _keywords_text(call: ast.Call, scope: CellScope, skip: tuple[str, ...]) -> list[str]:
    return [scope.text(k) for k in call.keywords if k.arg not in skip]


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    call: ast.Call = found.node  # type: ignore[assignment]
    if len(call.args) != 1 or any(k.arg is None for k in call.keywords):
        return None  # positional dtype/device or **kwargs: leave it to the author
    torch = scope.torch
    device_text = scope.text(found.parts["device"].value)
    literal = number_literal(call.args[0]) if found.parts["name"] == "torch.tensor" else None
    if literal is not None and not isinstance(literal, complex):
        explicit_dtype = keyword(call, "dtype")
        if explicit_dtype is not None:
            dtype = scope.text(explicit_dtype.value)
        elif isinstance(literal, bool):
            dtype = f"{torch}.bool"
        elif isinstance(literal, int):
            dtype = f"{torch}.long"
        else:
            dtype = None  # a float literal: the default dtype, which torch.zeros/full also use
        rest = _keywords_text(call, scope, ("device", "dtype"))
        dtype_text = [f"dtype={dtype}"] if dtype else []
        if literal in (0, 1):  # also False/True and 0.0/1.0
            factory = f"{torch}.zeros" if literal == 0 else f"{torch}.ones"
            arguments = ["()", *dtype_text, f"device={device_text}", *rest]
        else:
            factory = f"{torch}.full"
            arguments = ["()", scope.text(call.args[0]), *dtype_text, f"device={device_text}", *rest]
        text = f"{factory}({', '.join(arguments)})"
        return Fix(f"Fill on the GPU with {factory}", "safe", (Edit.replace(call, text),))
    requires_grad = keyword(call, "requires_grad")
    inner = [scope.text(call.args[0]), *_keywords_text(call, scope, ("device", "requires_grad"))]
    text = f"{scope.text(call.func)}({', '.join(inner)}).to({device_text}, non_blocking=True)"
    if requires_grad is not None:
        # A leaf that requires grad, like the original (a .to() result of a tensor without grad is a leaf).
        text += f".requires_grad_({scope.text(requires_grad.value)})"
    source_is_fresh = found.parts["name"] == "torch.tensor" or isinstance(call.args[0], (ast.List, ast.Tuple, ast.Constant))
    return Fix(
        "Build on the CPU, copy with non_blocking=True",
        "safe" if source_is_fresh else "review",
        (Edit.replace(call, text),),
        None if source_is_fresh else (
            "as_tensor/asarray reuse a CPU tensor's memory: if it is pinned and the code overwrites it right after, "
            "the asynchronous copy may read the new values."
        ),
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF401",
    name="tensor-from-python-on-device",
    title="Creating a CUDA tensor from Python or NumPy data waits for the copy",
    kind="tensor_from_python",
    dependency="false",
    cuda_call="cudaMemcpyAsync (host to device) + cudaStreamSynchronize",
    fix_safety="safe",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_CONSTRUCTORS),
    rewrite=rewrite,
)
