"""## What it does
Checks for `torch.nn.functional.one_hot(t)` without `num_classes` (or with `num_classes=-1`) on CUDA tensors.

## Why is this bad?
Without `num_classes` the width of the output is `t.max() + 1`, which torch reads back to the CPU, waiting for the
GPU. The width then also changes with the batch's content.

## Example
```python
targets = F.one_hot(labels)
```

## Use instead
Pass the number of classes, which the model's output size usually already fixes.
```python
targets = F.one_hot(labels, num_classes=logits.shape[-1])
```

## Fix safety
No automatic fix: the number of classes must come from the author.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, keyword_value, number_literal


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call) or scope.call_name(node) != "torch.nn.functional.one_hot" or not node.args:
        return
    classes = node.args[1] if len(node.args) > 1 else keyword_value(node, "num_classes")
    if classes is not None and number_literal(classes) != -1:
        return
    certainty = scope.tensor_certainty(node.args[0], unknown=True)
    if certainty:
        yield Match(
            node,
            f"`{scope.snippet(node)}` without num_classes reads the input's maximum back to the CPU, waiting for the GPU",
            certainty,
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF608",
    name="one-hot-without-num-classes",
    title="`one_hot` without num_classes waits for the input's maximum",
    kind="one_hot",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("one_hot",),
)
