"""## What it does
Checks for a blocking copy of a CUDA tensor to the CPU: `.cpu()`, `.to("cpu")`, `.to(torch.device("cpu"))`,
`.numpy(force=True)`, including the usual `.cpu().numpy()`.

## Why is this bad?
Without `non_blocking=True` the copy returns only when the data has arrived, so the CPU waits for the GPU to finish
every kernel queued before it, then for the transfer itself (`cudaMemcpyAsync` + `cudaStreamSynchronize`).

## Example
```python
for batch in loader:
    preds.append(model(batch).cpu())
```

## Use instead
Keep the data on the GPU until the CPU really needs it, and transfer once (concatenate first). To overlap the copy
with other work, copy into pinned memory with `non_blocking=True` and wait on a CUDA event before the CPU reads the
result: reading it earlier returns garbage, because the copy has not happened yet.
```python
outs = [model(batch) for batch in loader]
preds = torch.cat(outs).cpu()  # one sync

host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
host.copy_(out, non_blocking=True)
done = torch.cuda.Event()
done.record()
...  # more GPU work
done.synchronize()  # only now may the CPU read host
```

## Fix safety
No automatic fix: adding `non_blocking=True` alone would let the CPU read the data before it has arrived.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, is_constant, keyword_value


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    method = scope.method_call(node)
    if method is None:
        return
    receiver, name = method
    if is_constant(keyword_value(node, "non_blocking"), True):
        return
    if name == "cpu":
        pass
    elif name == "to":
        target = scope.to_target(node)
        if target is None or target[1] != "cpu" or (len(node.args) > 2 and is_constant(node.args[2], True)):
            return
    elif name == "numpy":
        if not is_constant(keyword_value(node, "force"), True):
            return
    else:
        return
    certainty = scope.tensor_certainty(receiver, unknown=True)
    if certainty is None or scope.value(receiver).kind == "module":
        return
    parent = scope.parent(node)
    then_numpy = isinstance(parent, ast.Attribute) and parent.attr == "numpy"
    yield Match(
        node,
        f"`{scope.snippet(node)}` copies to the CPU and waits for the GPU"
        + (" (the `.numpy()` after it needs the data on the CPU)" if then_numpy else ""),
        certainty,
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF301",
    name="copy-to-host",
    title="A blocking copy to the CPU waits for the GPU",
    kind="to_host",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("cpu", "to", "numpy"),
)
