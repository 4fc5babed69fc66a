"""## What it does
Checks for `TORCH_NCCL_BLOCKING_WAIT` (or the older `NCCL_BLOCKING_WAIT`) set to a true value in the program:
`os.environ[...] = "1"`, `os.environ.setdefault(...)`, `os.environ.update(...)`, `os.putenv(...)`.

## Why is this bad?
Blocking wait makes every `Work.wait()`, and so every collective called without `async_op=True`, wait on the CPU
until NCCL has finished it: each collective becomes a host sync, and the CPU can no longer queue the next kernels
while communication runs. It exists to turn hangs into timeouts while debugging; the debug mode does not see these
waits (syncfree reports each as a `distributed` sync).

## Example
```python
import os

os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"
```

## Use instead
Leave it off in training runs; the default asynchronous error handling (`TORCH_NCCL_ASYNC_ERROR_HANDLING`, on by
default) already aborts a hung collective after the process group's timeout without blocking the CPU.
```python
dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=10))
```

## Fix safety
No automatic fix.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import CellScope

_VARIABLES = frozenset({"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"})


def _turned_on(key: ast.AST | None, value: ast.AST | None) -> str | None:
    """The variable's name when ``key`` names blocking wait and ``value`` is a true setting."""
    if not (isinstance(key, ast.Constant) and key.value in _VARIABLES):
        return None
    if isinstance(value, ast.Constant) and str(value.value).strip() in ("", "0", "False", "false", "None"):
        return None
    return key.value


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = None
    if type(node) is ast.Subscript:
        # `os.environ[...] = ...`: shown each subscript (far fewer than a file's assignments), its statement's targets
        # are looked at as a whole when it is one of them (the same finding for each: kept once)
        statement = scope.parent(node)
        if type(statement) is not ast.Assign or not any(target is node for target in statement.targets):  # type: ignore[attr-defined]
            return NO_MATCH
        node = statement
        for target in node.targets:  # type: ignore[attr-defined]
            if type(target) is ast.Subscript and scope.qualified_name(target.value) == "os.environ":
                found = _turned_on(target.slice, node.value) or found  # type: ignore[attr-defined]
    elif type(node) is ast.Call:
        name = scope.call_name(node)
        if name in ("os.environ.setdefault", "os.putenv") and len(node.args) == 2:
            found = _turned_on(node.args[0], node.args[1])
        elif name == "os.environ.update":
            pairs = [(k.arg and ast.Constant(k.arg), k.value) for k in node.keywords]
            if node.args and isinstance(node.args[0], ast.Dict):
                pairs += list(zip(node.args[0].keys, node.args[0].values))
            for key, value in pairs:
                found = _turned_on(key, value) or found
    if found:
        return iter((Match(node, f"`{found}` on: every collective and `Work.wait()` makes the CPU wait for NCCL",
                           "certain"),))
    return NO_MATCH  # (most subscripts: this rule is shown each, and a generator per node costs)


RULE = Rule.from_docstring(
    __doc__,
    code="SF905",
    name="nccl-blocking-wait",
    title="NCCL blocking wait turns every collective into a host sync",
    kind="distributed",
    dependency="false",
    cuda_call="cudaStreamQuery polled until the collective ends (ProcessGroupNCCL blocking wait)",
    fix_safety="none",
    node_types=(ast.Subscript, ast.Call),
    matcher=match,
    calls=("setdefault", "putenv", "update"),
)
