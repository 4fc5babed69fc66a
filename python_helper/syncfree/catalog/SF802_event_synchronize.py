"""## What it does
Checks for `torch.cuda.Event.synchronize()`.

## Why is this bad?
It blocks the CPU until the GPU reaches the event (`cudaEventSynchronize`). Waiting once, to read a timing or before
the CPU reads a `non_blocking` copy, is what events are for; waiting every step serializes the CPU and the GPU. Like
`torch.cuda.synchronize`, it is not reported by `set_sync_debug_mode`. `Event.wait()` and `Event.query()` do not
block the CPU and are not reported.

## Example
```python
done = torch.cuda.Event()
for batch in loader:
    out = model(batch)
    done.record()
    done.synchronize()
```

## Use instead
Make other GPU work wait with `event.wait(stream)` (ordering on the GPU, no CPU wait), poll with `event.query()`, or
synchronize once after the loop.
```python
done = torch.cuda.Event()
for batch in loader:
    out = model(batch)
done.record()
done.synchronize()  # once
```

## Fix safety
No automatic fix: whether the CPU must wait here is the author's call.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    method = scope.method_call(node)
    if method is None or method[1] != "synchronize":
        return
    receiver = method[0]
    kind = scope.value(receiver).kind
    if kind == "event":
        certainty = "certain"
    elif kind == "unknown" and isinstance(receiver, (ast.Name, ast.Attribute)) and "event" in scope.text(receiver).lower():
        certainty = "likely"
    else:
        return
    yield Match(node, f"`{scope.snippet(node)}` blocks the CPU until the GPU reaches the event", certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF802",
    name="event-synchronize",
    title="`Event.synchronize()` blocks the CPU",
    kind="explicit",
    dependency="false",
    cuda_call="cudaEventSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("synchronize",),
)
