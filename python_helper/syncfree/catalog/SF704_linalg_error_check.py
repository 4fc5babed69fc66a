"""## What it does
Checks for `torch.linalg` functions that check their result for errors on the CPU: `inv`, `solve`, `cholesky`,
`eig`, `eigvals`, `eigh`, `eigvalsh`, `lstsq`, `lu_factor`, `ldl_factor`, `pinv`, `matrix_rank`, `svdvals`, `cond`,
`matrix_power`, `tensorinv`, `tensorsolve`, `matrix_exp`, and `torch.inverse`/`torch.cholesky`, on CUDA tensors.

## Why is this bad?
These functions run a LAPACK-style kernel that writes an `info` status per matrix (singular, not positive-definite,
did not converge). To raise a Python error they copy `info` to the CPU, so the CPU waits for the GPU to finish the
factorization and everything queued before it. Measured on an H100 with torch 2.11 (OpInfo sweep): 1 to 3 syncs
per call. The check is a false dependency: the result is already on the GPU.

## Example
```python
w = torch.linalg.inv(a)
y = torch.linalg.solve(a, b)
l = torch.linalg.cholesky(cov)
```

## Use instead
Call the `_ex` variant with `check_errors=False`: it returns the result and the `info` tensor without reading it.
Check `info` later, where a sync is cheap (once after a loop, or `torch._assert_async(info.eq(0).all())`), or not
at all when the matrices are known to be well formed. For `pinv`/`lstsq` of full-rank systems, `solve_ex` or
`cholesky_ex` with `cholesky_solve` avoid the check too.
```python
w, info = torch.linalg.inv_ex(a, check_errors=False)
y, info = torch.linalg.solve_ex(a, b, check_errors=False)
l, info = torch.linalg.cholesky_ex(cov, check_errors=False)
```

## Fix safety
No automatic fix: the error the check raised becomes a value (`info`) that the code must look at itself.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule, callee_names
from syncfree.catalog.scope import CellScope

CHECKED = {
    "torch.linalg." + name: name
    for name in ("inv", "solve", "cholesky", "eig", "eigvals", "eigh", "eigvalsh", "lstsq", "lu_factor",
                 "ldl_factor", "pinv", "matrix_rank", "svdvals", "cond", "matrix_power", "tensorinv",
                 "tensorsolve", "matrix_exp")
}
CHECKED.update({"torch.inverse": "inverse", "torch.cholesky": "cholesky", "torch.pinverse": "pinverse",
                "torch.matrix_exp": "matrix_exp"})
EX_VARIANT = {"inv": "inv_ex", "inverse": "linalg.inv_ex", "solve": "solve_ex", "cholesky": "cholesky_ex",
              "lu_factor": "lu_factor_ex", "ldl_factor": "ldl_factor_ex"}


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call) or not node.args:
        return
    name = CHECKED.get(scope.call_name(node) or "")
    if name is None:
        return
    certainty = scope.tensor_certainty(node.args[0], unknown=True)
    if not certainty:
        return
    ex = EX_VARIANT.get(name)
    hint = f"; `{ex}(..., check_errors=False)` returns the info tensor instead" if ex else ""
    yield Match(node, f"`{scope.snippet(node)}` reads its error status on the CPU, waiting for the GPU{hint}",
                certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF704",
    name="linalg-error-check",
    title="`torch.linalg` checks its errors on the CPU",
    kind="library",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) of the info tensor + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(CHECKED),
)
