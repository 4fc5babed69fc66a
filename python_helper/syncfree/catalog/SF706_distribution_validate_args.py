"""## What it does
Checks for `torch.distributions` objects built from tensors without `validate_args=False`, and for
`torch.normal(mean, std)` with a tensor `std`.

## Why is this bad?
With argument validation on (the default, `torch.distributions.Distribution.set_default_validate_args(True)`),
a distribution checks its parameters (`scale > 0`, probabilities in range) and every `log_prob` input against its
support, with a Python `if` on the result: each check copies a bool to the CPU and waits for the GPU.
`torch.normal` with a tensor `std` checks `std >= 0` the same way (measured: 2 syncs per call on an H100, torch
2.11). Once the code is known to be correct, these checks are false dependencies. (The default is on unless
Python runs with `-O`; once `torch.compile` has been used in the process, torch turns it off,
torch/_dynamo/eval_frame.py.)

## Example
```python
dist = torch.distributions.Normal(mu, sigma)
lp = dist.log_prob(x)
```

## Use instead
Pass `validate_args=False` in the hot path (or call
`torch.distributions.Distribution.set_default_validate_args(False)` once, after debugging).
```python
dist = torch.distributions.Normal(mu, sigma, validate_args=False)
lp = dist.log_prob(x)
```

## Fix safety
No automatic fix: turning validation off hides invalid parameters, which is for the author to decide.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import CellScope, keyword_value

#: Distributions that wrap another and check nothing themselves: no parameter constraints (`arg_constraints = {}`)
#: and a log_prob that leaves the input's check to the distribution it wraps (torch/distributions/independent.py).
_NOTHING_TO_VALIDATE = frozenset({"Independent"})


def _setting_of_self(node: ast.AST, scope: CellScope) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and scope.value(node).kind == "unknown"
    )


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call):
        return NO_MATCH
    func = node.func
    if type(func) is ast.Attribute and func.attr != "normal" and not func.attr[:1].isupper():
        # The last name of `x.attr(...)`'s qualified name is `attr`: neither torch.normal nor a distribution's class,
        # known without resolving the name (with by_callee=False, tests/test_analyze.py, this rule sees every call).
        return NO_MATCH
    # (a class of another module, `nn.Linear(...)`, `ValueError(...)`: told here, without a generator per call)
    name = scope.call_name(node)
    if name is None or not (name == "torch.normal" or name.startswith("torch.distributions.")):
        return NO_MATCH
    return _matches(node, scope, name)


def _matches(node: ast.Call, scope: CellScope, name: str) -> Iterator[Match]:
    if name == "torch.normal" and len(node.args) >= 2:
        std = scope.value(node.args[1])
        if std.kind == "tensor" and std.device != "cpu":
            yield Match(node, f"`{scope.snippet(node)}` checks std >= 0 on the CPU, waiting for the GPU",
                        "certain" if std.device == "cuda" else "likely")
        return
    if not name.startswith("torch.distributions.") or not name.rsplit(".", 1)[-1][:1].isupper():
        return
    if name.rsplit(".", 1)[-1] in _NOTHING_TO_VALIDATE:
        return
    flag = keyword_value(node, "validate_args")
    if isinstance(flag, ast.Constant) and flag.value is False:
        return
    operands = [a for a in node.args if not isinstance(a, ast.Starred)] + [k.value for k in node.keywords if k.arg]
    # A module's own setting (Beta(self.alpha, self.alpha) in mixup) is a Python number as a rule: torch makes CPU
    # tensors of it and checks them there. Known tensors and computed values (mu, sigma, net(x)) count.
    certainties = [
        scope.tensor_certainty(a, unknown=not _setting_of_self(a, scope)) for a in operands
    ]
    if "certain" in certainties or "likely" in certainties:
        yield Match(node, f"`{scope.snippet(node)}` validates its parameters (and later each log_prob input) on "
                          f"the CPU, waiting for the GPU", "certain" if "certain" in certainties else "likely")


RULE = Rule.from_docstring(
    __doc__,
    code="SF706",
    name="distribution-validate-args",
    title="`torch.distributions` validates its arguments on the CPU",
    kind="library",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    # torch.normal and the distributions' classes (capitalized): no other call can match (`match`), and most calls of
    # a library are neither, so this rule is not shown every call
    calls=("normal",),
    class_calls=True,
)
