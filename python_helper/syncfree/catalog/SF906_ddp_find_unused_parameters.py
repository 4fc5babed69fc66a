"""## What it does
Checks for `DistributedDataParallel(..., find_unused_parameters=True)`.

## Why is this bad?
DDP then walks the autograd graph after every forward on the CPU to find the parameters that get no gradient, and
all-reduces a map of used parameters. In an iteration where a parameter goes unused on a rank, the reducer waits
for that all-reduce and copies the map to the host with a blocking copy (torch/csrc/distributed/c10d/reducer.cpp,
"Blocking copy, if local_used_map_dev_ is cuda"): a sync inside `loss.backward()` on every such step. When every
parameter is used, the flag costs the graph walk and finds nothing. (From torch's source; to be measured on a GPU:
tests/gpu/test_distributed_gpu.py.) FSDP has a switch of the same kind on by default: `limit_all_gathers=True` makes
the CPU wait on a CUDA event once two all-gathers are in flight (torch/distributed/fsdp/_runtime_utils.py), which
syncfree reports as `Event.synchronize()` (SF802).

## Example
```python
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=[local_rank], find_unused_parameters=True)
```

## Use instead
Leave it off when every parameter takes part in every forward (DDP raises an error naming the unused ones if not).
When the same parameters go unused every step, `static_graph=True` finds them once.
```python
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=[local_rank], static_graph=True)
```

## Fix safety
No automatic fix: whether every parameter is used is known at run time only.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, is_constant, keyword_value

_DDP = frozenset({"torch.nn.parallel.DistributedDataParallel",
                  "torch.nn.parallel.distributed.DistributedDataParallel"})


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if type(node) is ast.Call and scope.call_name(node) in _DDP \
            and is_constant(keyword_value(node, "find_unused_parameters"), True):
        yield Match(node, "`find_unused_parameters=True`: a CPU walk of the graph every step, and a blocking copy "
                    "inside backward whenever a parameter goes unused on a rank", "likely")


RULE = Rule.from_docstring(
    __doc__,
    code="SF906",
    name="ddp-find-unused-parameters",
    title="DDP's find_unused_parameters adds a sync in backward",
    kind="distributed",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize in the reducer",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("DistributedDataParallel",),
)
