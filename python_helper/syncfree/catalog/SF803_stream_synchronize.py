"""## What it does
Checks for `Stream.synchronize()`, e.g. `torch.cuda.current_stream().synchronize()`.

## Why is this bad?
It blocks the CPU until all work queued on the stream has finished (`cudaStreamSynchronize`), draining the GPU's
queue. The sync debug mode reports it from inside torch (torch/cuda/streams.py), not from your line.

## Example
```python
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    y = f(x)
side.synchronize()
z = g(y)
```

## Use instead
Order the streams on the GPU: `torch.cuda.current_stream().wait_stream(side)` (or an event's `wait`) makes later work
wait for the side stream without blocking the CPU. Keep `y` alive for the side stream with `y.record_stream(...)` if
it is freed early.
```python
with torch.cuda.stream(side):
    y = f(x)
torch.cuda.current_stream().wait_stream(side)
z = g(y)
```

## Fix safety
No automatic fix: only a CPU that reads results needs the wait.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    method = scope.method_call(node)
    if method is None or method[1] != "synchronize" or node.args or node.keywords:
        return
    receiver = method[0]
    kind = scope.value(receiver).kind
    if kind == "stream":
        certainty = "certain"
    elif kind == "unknown" and "event" not in scope.text(receiver).lower():
        certainty = "likely"  # an unknown object's synchronize(): most often a stream (events are SF802)
    else:
        return
    yield Match(node, f"`{scope.snippet(node)}` blocks the CPU until the stream's queued work has finished", certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF803",
    name="stream-synchronize",
    title="`Stream.synchronize()` blocks the CPU",
    kind="stream_sync",
    dependency="false",
    cuda_call="cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("synchronize",),
)
