"""An optimizer's scalars: step counts and hyperparameters that are Python numbers or CPU tensors as a rule.

``torch.optim`` keeps each parameter's ``step`` count on the CPU unless the optimizer is capturable or fused
(torch/optim/adam.py, ``_init_group``: "Deliberately host `step` on CPU if both capturable and fused are off. This
is because kernel launches are costly on CUDA and XLA": ``torch.tensor(0.0, dtype=_get_scalar_dtype(),
device="cpu")``; adamw.py, nadam.py, radam.py, adagrad.py alike), and its hyperparameters (``lr: float | Tensor``,
betas, weight decay) are Python numbers unless the user passes a tensor, which only a capturable or fused
optimizer may keep on the GPU ("lr as a Tensor is not supported for capturable=False and foreach=True"). Optimizer
code reads these values through helpers written for numbers and tensors alike, torch's own
``torch.optim.optimizer._get_value`` the model of them::

    def _get_value(x):
        # item is significantly faster than a cpu tensor in eager mode
        ...
        return x.item() if isinstance(x, torch.Tensor) else x

Parameters, gradients and state buffers are always tensors there: a value optimizer code tests with
``isinstance(x, torch.Tensor)`` or ``torch.is_tensor(x)`` and handles as a Python number otherwise is one of those
scalars, and the tensor branch's ``.item()``, ``float(x.cpu())`` or ``torch.tensor(c, device=x.device)`` syncs only
for a capturable or fused optimizer's CUDA scalars: a *possible* sync, not a likely one. Measured on timm 1.0.31
(bench/check_precision.py, tests/data/check_precision.json): its optimizers' ``_get_value`` and scalar checks were
each read by hand as "CPU unless capturable/fused".

What counts as optimizer code, by what the file shows:

- a file that imports one of ``torch.optim.optimizer``'s private helpers (``_get_value``,
  ``_default_to_fused_or_foreach``, ``_use_grad_for_differentiable``...): optimizer internals, the whole file;
- a file that defines a subclass of ``torch.optim.Optimizer``: the methods of those classes and the module-level
  functions they name, directly or through each other (the ``_single_tensor_*``/``_multi_tensor_*``
  implementations and their helpers), not the file's other functions and classes.

Only a finding inside the tensor branch of such a test (the ``if``'s body, or its ``else`` for a ``not`` test, with
the other branch present: the code handles a number too), on an expression that reads the tested name, is demoted;
a ``loss.item()`` or a test of a gradient elsewhere in the file keeps its certainty, and so does every finding of a
file that only uses optimizers (a training loop, a logger: ``v.item() if isinstance(v, Tensor) else v`` on logged
metrics stays likely there).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

__all__ = ["OptimizerScalars"]

_OPTIMIZER_BASES = frozenset({"torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"})
_TENSOR_TYPES = frozenset({"torch.Tensor"})

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _qualified(node: ast.AST, aliases: Mapping[str, str]) -> str | None:
    """``torch.optim.Optimizer`` for ``Optimizer`` imported from torch.optim, ``optim.Optimizer``... (imports only)."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _qualified(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _tested_name(test: ast.expr, aliases: Mapping[str, str]) -> tuple[str, bool] | None:
    """``(name, True)`` for ``isinstance(name, torch.Tensor)`` / ``torch.is_tensor(name)``, ``(name, False)`` for
    their negation; None for any other test."""
    positive = True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, positive = test.operand, False
    if not isinstance(test, ast.Call) or test.keywords or not test.args or not isinstance(test.args[0], ast.Name):
        return None
    callee = _qualified(test.func, aliases) or (test.func.id if isinstance(test.func, ast.Name) else None)
    if callee == "torch.is_tensor" and len(test.args) == 1:
        return test.args[0].id, positive
    if callee == "isinstance" and len(test.args) == 2:
        kinds = test.args[1]
        options = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        if any(_qualified(option, aliases) in _TENSOR_TYPES for option in options):
            return test.args[0].id, positive
    return None


class OptimizerScalars:
    """The expressions of a file's optimizer code that sit in the tensor branch of a number-or-tensor test, with the
    names tested (see the module's docstring). Made only for optimizer code (:meth:`of`)."""

    def __init__(self) -> None:
        self._guarded: dict[int, set[str]] = {}  # id of a node in a tensor branch -> the names tested there

    @classmethod
    def of(cls, tree: ast.Module, aliases: Mapping[str, str]) -> OptimizerScalars | None:
        """The guarded expressions of ``tree``, or None when it is no optimizer code (most files)."""
        internals = any(
            target.startswith("torch.optim.optimizer._") for target in aliases.values()
        )
        functions: list[Function] = []
        if internals:
            functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        else:
            classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
            optimizers: set[str] = set()
            changed = True
            while changed:  # in-file subclasses, in any order of definition
                changed = False
                for node in classes:
                    if node.name not in optimizers and any(
                        _qualified(base, aliases) in _OPTIMIZER_BASES
                        or (isinstance(base, ast.Name) and base.id in optimizers)
                        for base in node.bases
                    ):
                        optimizers.add(node.name)
                        changed = True
            if not optimizers:
                return None
            top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for node in classes:
                if node.name in optimizers:
                    functions.extend(
                        item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                    )
            # The module-level functions the optimizers' methods name (call or pick: ``func = _multi_tensor_adam``),
            # and those these name in turn; not the file's other functions (a mask check beside an optimizer).
            reached = {id(function) for function in functions}
            for function in functions:
                for inner in ast.walk(function):
                    if isinstance(inner, ast.Name) and inner.id in top and id(top[inner.id]) not in reached:
                        reached.add(id(top[inner.id]))
                        functions.append(top[inner.id])
        found = cls()
        seen: set[int] = set()
        for function in functions:
            if id(function) not in seen:
                found._collect(function, aliases, seen)
        return found

    def _collect(self, function: Function, aliases: Mapping[str, str], seen: set[int]) -> None:
        seen.add(id(function))
        for node in ast.walk(function):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                seen.add(id(node))  # a nested def is walked here, with its definer
            if not isinstance(node, (ast.If, ast.IfExp)) or not node.orelse:
                continue
            tested = _tested_name(node.test, aliases)
            if tested is None:
                continue
            name, positive = tested
            branch = node.body if positive else node.orelse
            for part in branch if isinstance(branch, list) else [branch]:
                for inner in ast.walk(part):
                    self._guarded.setdefault(id(inner), set()).add(name)

    def demotes(self, node: ast.AST, names: list[str]) -> bool:
        """Whether a finding on ``node``, which reads ``names``, is in the tensor branch of a test of one of them."""
        tested = self._guarded.get(id(node))
        return bool(tested) and any(name in tested for name in names)
