"""## What it does
Checks for library calls known to read tensor values on the CPU inside: `torch.testing.assert_close`,
TensorBoard's `SummaryWriter.add_scalar`/`add_histogram` with a CUDA tensor, `wandb.log` of a dict holding CUDA
tensors. It is also the general entry for a runtime sync that happened inside a library function.

## Why is this bad?
The sync is not in your line but in the library: to log, compare or check a value it calls `.item()`, `.cpu()` or a
Python `if` on a tensor, and the CPU waits for the GPU to finish the work queued before it. Called every step,
logging becomes the training loop's slowest part.

## Example
```python
for step, (x, y) in enumerate(loader):
    loss = F.cross_entropy(model(x), y)
    writer.add_scalar("loss", loss, step)
```

## Use instead
Log less often, and hand the library Python numbers read in one transfer, so that the sync happens once, where you
chose. For checks (`assert_close`), run them outside the hot loop or on a sample of steps.
```python
if step % 100 == 0:
    writer.add_scalar("loss", loss.item(), step)
```

## Fix safety
No automatic fix: how often to log or check is the author's choice.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, is_constant, keyword_value

_LOGGER_METHODS = frozenset({"add_scalar", "add_histogram"})


def _best(certainties: list[str | None]) -> str | None:
    return "certain" if "certain" in certainties else "likely" if "likely" in certainties else None


def _one_on_the_cpu(call: ast.Call, scope: CellScope) -> bool:
    """``assert_close(out.cpu(), expected)``: with one tensor known on the CPU, the values are compared only when the
    other is there too. torch checks the devices first (torch/testing/_comparison.py, ``_compare_attributes``: a CPU
    and a CUDA tensor fail on the ``device`` attribute before any value is read), unless ``check_device=False``, which
    moves both to the CPU (``_equalize_attributes``)."""
    check_device = keyword_value(call, "check_device")
    if check_device is not None and not is_constant(check_device, True):
        return False
    for argument in call.args[:2]:
        value = scope.value(argument)
        if value.kind == "tensor" and value.device == "cpu":
            return True
    return False


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call):
        return
    name = scope.call_name(node)
    if name == "torch.testing.assert_close":
        if _one_on_the_cpu(node, scope):
            return
        certainty = _best([scope.tensor_certainty(a, unknown=True) for a in node.args[:2]])
        what = "compares the tensors and builds its message on the CPU"
    elif name == "wandb.log" and node.args and isinstance(node.args[0], ast.Dict):
        certainty = _best([scope.tensor_certainty(v) for v in node.args[0].values])
        what = "converts each tensor in the dict with .item()/.cpu()"
    else:
        method = scope.method_call(node)
        if method is None or method[1] not in _LOGGER_METHODS:
            return
        values = [*node.args[1:2], *(k.value for k in node.keywords if k.arg in ("scalar_value", "values"))]
        certainty = _best([scope.tensor_certainty(v) for v in values])
        what = "converts the tensor to a Python number (.item()) to write it"
    if certainty:
        yield Match(node, f"`{scope.snippet(node)}` {what}: the CPU waits for the GPU inside the call", certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF700",
    name="library-call",
    title="A library call waits for the GPU to read tensor values",
    kind="library",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, inside the library",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls={"assert_close", "log", *_LOGGER_METHODS},
)
