"""## What it does
Checks for a CUDA tensor formatted into a string: f-strings (`f"{loss:.3f}"`), `str(t)`, `repr(t)`, `format(t)`,
`"{}".format(t)` and `"%f" % t`.

## Why is this bad?
The string is built on the CPU from the tensor's values, so they are copied back and the CPU waits for the GPU to
finish the work queued before them. Log lines built every step sync every step, even when the logger then drops them.

## Example
```python
loss = F.cross_entropy(logits, labels)
logger.debug(f"step {step} loss {loss:.4f}")
```

## Use instead
Format only when the line is actually emitted, and from Python numbers read rarely and together (`.item()` every N
steps, or `torch.stack([...]).tolist()` for several values at once).
```python
loss = F.cross_entropy(logits, labels)
if step % 100 == 0:
    logger.debug(f"step {step} loss {loss.item():.4f}")  # one sync every 100 steps
```

## Fix safety
No automatic fix: the string needs the values.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import CellScope


def _best(certainties: list[str | None]) -> str | None:
    return "certain" if "certain" in certainties else "likely" if "likely" in certainties else None


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if type(node) is ast.BinOp and not (
        type(node.op) is ast.Mod and type(node.left) is ast.Constant and isinstance(node.left.value, str)
    ):
        return NO_MATCH  # (arithmetic: most of the operators this rule is shown)
    return _matches(node, scope)


def _matches(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if isinstance(node, ast.JoinedStr):
        # The f-string as a whole: CPython 3.11 attributes FORMAT_VALUE to the JoinedStr's columns.
        operands = [part.value for part in node.values if isinstance(part, ast.FormattedValue)]
        how = "the f-string"
    elif isinstance(node, ast.Call):
        name = scope.call_name(node)
        if name in ("builtins.str", "builtins.repr", "builtins.format"):
            operands = node.args[:1]
            how = f"{name.split('.')[1]}()"
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "format" and scope.value(node.func.value).kind == "python":
            operands = [*node.args, *(k.value for k in node.keywords)]
            how = "str.format()"
        else:
            return
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = node.left
        if not (isinstance(left, ast.Constant) and isinstance(left.value, str)):
            return
        operands = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        how = "%-formatting"
    else:
        return
    certainty = _best([scope.tensor_certainty(operand) for operand in operands])
    if certainty:
        yield Match(
            node,
            f"{how} formats a CUDA tensor in `{scope.snippet(node)}`: the CPU copies its values and waits for the GPU",
            certainty,
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF202",
    name="format-tensor",
    title="Formatting a CUDA tensor into a string waits for the GPU",
    kind="format",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.JoinedStr, ast.Call, ast.BinOp),
    matcher=match,
    operators=(ast.Mod,),  # (of its BinOps: `"%s" % t`; no arithmetic)
    calls=("str", "repr", "format"),
)
