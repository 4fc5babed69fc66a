"""The static pass: a cell's source -> the catalog's findings, with exact cell-relative ranges and fixes.

Nothing is executed. The cell may hold IPython syntax (``%magic``, a ``%%magic`` first line, ``!cmd``, ``x?``): those
lines are replaced by ``pass`` at the same indentation before parsing, so every other line keeps its text and its
columns. A cell that still does not parse gives no findings.

Positions: report ranges are 1-based lines relative to the cell as the editor shows it and 0-based columns counted in
characters. Python's ``ast`` counts columns in UTF-8 bytes, so every column is converted.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from typing import Any

from syncfree.allow import allowances, allowed
from syncfree.catalog import OPERATOR_NODES, Edit, Fix, Match, Rule, select_rules
from syncfree.catalog.optimizer_scalars import OptimizerScalars
from syncfree.catalog.scope import Bindings, CellScope, is_constant
from syncfree.collector import paused as cycle_collection_paused
from syncfree.parsing import parse_quietly

__all__ = [
    "PYTHON_CELL_MAGICS",
    "Bindings",
    "allowed",
    "allowances",
    "analyze_source",
    "apply_edits",
    "apply_fixes",
    "neutralize_ipython",
    "prepare",
]

#: Cell magics whose body is Python run in the user namespace; other cell magics (%%bash, %%html, %%writefile...)
#: hold text that is not executed as Python here, so such a cell is not analysed.
PYTHON_CELL_MAGICS = frozenset({"syncfree", "time", "timeit", "prun", "capture", "debug"})

_MAGIC_ASSIGNMENT = re.compile(r"^\s*[\w.\[\], ()*]+=\s*[%!]")



def analyze_source(
    source: str,
    *,
    first_line: int = 1,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    earlier: Bindings | None = None,
    honour_allow: bool = True,
    tree: ast.Module | None = None,
    limit: int | None = None,
    possible: bool = False,
) -> list[dict[str, Any]]:
    """Findings (report.schema.json ``definitions/Finding``) for one cell body, sorted by position.

    ``first_line`` is the cell line number of the source's first line (2 when a ``%%syncfree`` line precedes the
    body). ``select``/``ignore`` choose rules by code or prefix (see :func:`syncfree.catalog.select_rules`); by
    default the rules enabled by default run. ``earlier`` carries what the cells above bound (see
    :class:`~syncfree.catalog.scope.Bindings`); it is updated in place with this cell's bindings. A finding whose
    first or last line carries a matching ``# syncfree: allow`` comment is left out unless ``honour_allow`` is
    False.

    ``tree`` is the source's AST when the caller has parsed it already (the magic parses a cell once for this pass
    and for running it): every line that holds code must be the source's own line, IPython-only lines blank. The
    analysis reads it and leaves it as it was.

    ``possible``: keep the findings of certainty ``possible`` too (code that runs on the host by construction, such
    as a data processor's preprocessing: it syncs only if the user asks it for a CUDA device; see
    :mod:`syncfree.catalog.host_code`; an optimizer's step counts and scalars, on the GPU only for a capturable or
    fused optimizer: :mod:`syncfree.catalog.optimizer_scalars`). They are left out by default.

    ``limit``: stop once more than this many findings are found (a report holds 1,000: ``MAX_FINDINGS``), at a
    top-level statement. The findings returned are then every finding before that statement, so the first
    ``limit`` by position are the same as without a limit; a 10,000-line cell costs what its first lines do.
    """
    python_source = source if tree is not None else neutralize_ipython(source)
    if python_source is None:
        return []
    rules = _chosen_rules(list(select) if select is not None else None, list(ignore) if ignore is not None else None)
    with cycle_collection_paused():
        if tree is None:
            try:
                # Invalid escape sequences and the like would otherwise print in the user's notebook. Not
                # catch_warnings: two threads' blocks that interleave leave its copy of the filters behind
                # (syncfree.parsing).
                tree = parse_quietly(python_source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return []  # not Python we can read (ValueError: a null byte); the cell's own run reports the error
        analysis = _Analysis(tree, python_source, rules, first_line, earlier, limit=limit)
        try:
            findings = analysis.run()
        except RecursionError:
            return []  # nested deeper than the analyzer can follow (parse succeeded just below the limit)
    if earlier is not None:
        left = analysis.scope.bindings()
        earlier.names, earlier.aliases, earlier.imported = left.names, left.aliases, left.imported
        earlier.default_device = left.default_device
    if not possible:
        findings = [f for f in findings if f["certainty"] != "possible"]
    if honour_allow:
        allows = allowances(source, first_line=first_line)
        if allows:
            findings = [f for f in findings if not _finding_allowed(allows, f)]
    return findings


def prepare(select: Iterable[str] | None = None, ignore: Iterable[str] | None = None) -> None:
    """Make what the analysis of a file with these rules makes on first use, once per process: the rule choice's
    tables, the walk's generated function for each node type (CellScope.walk), the rules' and the walk's compiled
    patterns. ``syncfree check`` calls it before its process pool forks, so that each worker starts with them (each
    made its own: 10 to 20 ms a worker, half a second over a large library's files on two cores is 1 to 2 %). It
    analyses :data:`_PREPARE_SOURCE`, a small module that holds most of Python's statements and expressions."""
    analyze_source(_PREPARE_SOURCE, select=select, ignore=ignore, possible=True, honour_allow=False)


#: What :func:`prepare` analyses: a model's module with the statements and expressions of most code, and syncs.
_PREPARE_SOURCE = """\
import torch
import numpy as np
from torch import nn


class Net(nn.Module):
    scale: float = 1.0

    def __init__(self, size: int, *args, flag=None, **kwargs) -> None:
        super().__init__()
        self.linear = nn.Linear(size, size)
        self.items = [i * 2 for i in range(size) if i % 2]

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        global counter
        y = self.linear(x)[:, 0] + x[..., 1:-1].sum() - (-x).abs()
        y += 1
        z = {k: v for k, v in zip("ab", (1, 2))} | {None}.union(set(v for v in ()))
        w = (lambda a, b=2: a ** b)(y, b=3)
        if mask is not None and not y.any() or x.shape[0] > 1:
            y = y[mask] if mask.dtype == torch.bool else y[[0, 1]]
        elif bool(x):
            y[mask] = 0
        while False:
            break
        for index, value in enumerate(list(y)):
            continue
        with torch.no_grad() as nothing:
            del nothing
        try:
            assert x.item() < 1, f"{x!r:>4}"
        except (ValueError, KeyError) as error:
            raise RuntimeError("no") from error
        finally:
            pass
        match x:
            case [a, *rest] if a:
                pass
            case {"k": b, **other}:
                pass
            case Net(size=c) | None:
                pass
            case _:
                pass
        print(y, np.asarray(w), z, (n := 3), *self.items, **{})
        return torch.where(y > 0, y, torch.zeros_like(y)).cpu().numpy().tolist()

    async def stream(self):
        async with self.lock:
            async for item in self.queue:
                await item

    def outer(self):
        total = 0

        def inner():
            nonlocal total
            yield from ()
            yield total

        return inner
"""


#: The rules of each choice of select and ignore met so far (``syncfree check`` analyses thousands of files with the
#: same choice: the catalog's codes matched once, not per file).
_CHOSEN: dict[tuple[tuple[str, ...] | None, tuple[str, ...] | None], tuple[Rule, ...]] = {}


def _chosen_rules(select: list[str] | None, ignore: list[str] | None) -> tuple[Rule, ...]:
    key = (tuple(select) if select is not None else None, tuple(ignore) if ignore is not None else None)
    try:
        rules = _CHOSEN.get(key)
    except TypeError:  # not strings: select_rules says what is wrong
        return select_rules(select, ignore)
    if rules is None:
        rules = select_rules(select, ignore)
        if len(_CHOSEN) < 64:
            _CHOSEN[key] = rules
    return rules


def _finding_allowed(allows: dict[int, frozenset[str] | None], finding: dict[str, Any]) -> bool:
    from syncfree.catalog import RULES

    rule = RULES.get(finding["rule"])
    kind = rule.kind if rule is not None else None
    r = finding["range"]
    return any(allowed(allows, line, rule=finding["rule"], kind=kind) for line in {r["line"], r["end_line"]})


class _Analysis:
    def __init__(
        self,
        tree: ast.Module,
        source: str,
        rules: tuple[Rule, ...],
        first_line: int,
        earlier: Bindings | None,
        *,
        by_callee: bool = True,
        limit: int | None = None,
    ) -> None:
        self.scope = CellScope(tree, source, earlier)
        self.limit = limit
        self.line_offset = first_line - 1
        # Most rules look at calls, and each only at calls of a few names (Rule.calls): a call is shown to the
        # rules for its callee's name, not to all thirty of them (by_callee=False shows every call to every
        # rule: the tests compare the two).
        self.by_type, self.by_callee, self.types, self.by_class, self.calls, self.operators = _dispatch(rules, by_callee)
        self.findings: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.functions: dict[tuple[Any, ...], int] = {}  # finding key -> id of the function it is in (host_code)
        # finding key -> (id of its function, the names it reads): the likely findings in functions, for
        # CellScope.contradicted
        self.annotated: dict[tuple[Any, ...], tuple[int, set[str]]] = {}
        # An optimizer's step counts and scalars (optimizer_scalars.py): None for a file that is no optimizer code.
        self.optimizer = OptimizerScalars.of(tree, self.scope.aliases)

    def run(self) -> list[dict[str, Any]]:
        limit = self.limit
        self.scope.forget = self._forget
        self.scope.walk(self._visit, stop=None if limit is None else lambda: len(self.findings) > limit, types=self.types,
                        calls=self.calls, operators=self.operators)
        contradicted, numpy_too = self.scope.contradicted, self.scope.numpy_too
        for key, (function, names) in self.annotated.items():
            finding = self.findings[key]
            if finding["certainty"] == "likely" and contradicted.get(function, ()) and names & contradicted[function]:
                finding["certainty"] = "possible"
                finding["message"] = (
                    f"{finding['message']} (possible: its function is annotated to take and return tensors but "
                    "returns a NumPy array)"
                )[:500]
            elif finding["certainty"] == "likely" and numpy_too.get(function, ()) and names & numpy_too[function]:
                finding["certainty"] = "possible"
                finding["message"] = (
                    f"{finding['message']} (possible: its function takes NumPy arrays as well as tensors, the "
                    "caller's, on the CPU as a rule)"
                )[:500]
        if self.scope.host is not None:
            host = self.scope.host.functions()
            for key, function in self.functions.items():
                finding = self.findings[key]
                if function in host and finding["certainty"] == "likely":
                    finding["certainty"] = "possible"  # the code shows no CUDA value, and runs on the host by design
        return sorted(self.findings.values(), key=_position_key)

    def _forget(self, function: int) -> None:
        """Drop the findings in a function's body before the walk goes through it again (CellScope._walk_again)."""
        for key in [key for key, owner in self.functions.items() if owner == function]:
            del self.findings[key], self.functions[key]
            self.annotated.pop(key, None)

    def _visit(self, node: ast.AST) -> None:
        kind = type(node)
        rules = self.by_type.get(kind)
        if kind is ast.Call and self.by_callee:
            func = node.func  # type: ignore[attr-defined]
            # t.item(), torch.nonzero(...): the callee's last name is the attribute's, qualified or not
            name = func.attr if type(func) is ast.Attribute else self.scope.callee_name(node)  # type: ignore[arg-type]
            chosen = self.by_callee.get(name)
            if chosen:
                rules = chosen  # the rules for every call are in each name's list (_dispatch)
            elif name is not None and name[:1].isupper() and self.by_class:
                rules = self.by_class  # a class's name (Rule.class_calls)
        if rules:
            scope = self.scope
            for rule in rules:
                for found in rule.matcher(node, scope):
                    finding = self._finding(rule, found)
                    key = (finding["rule"], *finding["range"].values())
                    if key not in self.findings:
                        self.findings[key] = finding
                        optimizer = self.optimizer
                        if (
                            optimizer is not None
                            and finding["certainty"] == "likely"
                            and optimizer.demotes(found.node, scope.names_in(found.node))
                        ):
                            finding["certainty"] = "possible"  # a step count or scalar: CPU unless capturable/fused
                        if finding["certainty"] == "likely" and scope.only_cpu_by_default(found.node):
                            # a mask of a metric's state, `.item()` reads in a row of it: on the device the caller
                            # picks, the CPU by default (scope.CPU_DEFAULT), whatever the rule's own device test
                            finding["certainty"] = "possible"
                            finding["message"] = (
                                finding["message"] + _CALLERS_DEVICE
                            )[:500]
                        if finding["certainty"] == "likely":
                            guard = _optional_guard(found.node, scope)
                            if guard is not None:
                                # Only when an optional attribute is there (an offload hook): the branch may never
                                # run, and the text cannot tell how often it does.
                                finding["certainty"] = "possible"
                                where = (f"in `{guard}`, named for another accelerator than CUDA" if guard.startswith("def ")
                                         else f"only under `if {guard}`")
                                finding["message"] = f"{finding['message']} (possible: {where})"[:500]
                        if scope.function is not None:
                            # (for host_code.py's demotion after the walk: the walk may find a function that imports
                            # a host-only library after the findings of the file's earlier functions)
                            self.functions[key] = id(scope.function)
                            if finding["certainty"] == "likely":
                                self.annotated[key] = (id(scope.function), set(scope.names_in(found.node)))

    def _finding(self, rule: Rule, found: Match) -> dict[str, Any]:
        end = found.end_node or found.node
        start_position = (found.node.lineno, found.node.col_offset)  # type: ignore[attr-defined]
        end_position = (end.end_lineno, end.end_col_offset)  # type: ignore[attr-defined]
        fix = rule.rewrite(found, self.scope) if rule.rewrite is not None else None
        message = found.message
        if found.certainty == "possible" and self.scope.on_cpu_by_default(found.node):
            # (a tensor of a device parameter `device="cpu"`, or kept in `self._device`: scope.CPU_DEFAULT)
            message += _CALLERS_DEVICE
        elif found.certainty == "possible" and "(possible: " not in message:
            # a matcher's own `possible` without its own reason: a value that is a tensor on some paths only
            message += " (possible: only when it is a tensor; its annotation or its callers allow host data too)"
        return {
            "rule": rule.code,
            "range": self._range(start_position, end_position),
            "message": message[:500],
            "certainty": found.certainty,
            "fix": self._fix(fix) if fix is not None else None,
        }

    def _fix(self, fix: Fix) -> dict[str, Any]:
        return {
            "title": fix.title[:200],
            "safety": fix.safety,
            "reason": fix.reason[:500] if fix.reason else None,
            "edits": [self._edit(edit) for edit in fix.edits],
        }

    def _edit(self, edit: Edit) -> dict[str, Any]:
        return {"range": self._range(edit.start, edit.end), "text": edit.text}

    def _range(self, start: tuple[int, int], end: tuple[int, int]) -> dict[str, int]:
        return {
            "line": start[0] + self.line_offset,
            "col": self._characters(start),
            "end_line": end[0] + self.line_offset,
            "end_col": self._characters(end),
        }

    def _characters(self, position: tuple[int, int]) -> int:
        """A UTF-8 byte column (what ast gives) as a character column (what editors and the report use)."""
        line, byte_column = position
        text = self.scope.lines[line - 1]
        if text.isascii():
            return byte_column
        return len(text.encode()[:byte_column].decode("utf-8", errors="replace"))


# Why a finding on a tensor of a device parameter `device="cpu"` (scope.CPU_DEFAULT) is only possible.
_CALLERS_DEVICE = " (possible: on the device its caller picks, the CPU by default)"

_Operators = frozenset[tuple[type[ast.AST], frozenset[type[ast.AST]]]]
_DISPATCH: dict[tuple[Any, ...], tuple[dict[type[ast.AST], list[Rule]], dict[str, list[Rule]], frozenset[type],
                                       list[Rule], tuple[frozenset[str], bool] | None, _Operators | None]] = {}


_DISPATCH_BY_ID: dict[tuple[int, bool], tuple[tuple[Rule, ...], Any]] = {}


def _dispatch(rules: tuple[Rule, ...], by_callee: bool) -> tuple[
    dict[type[ast.AST], list[Rule]], dict[str, list[Rule]], frozenset[type], list[Rule], tuple[frozenset[str], bool] | None,
    _Operators | None,
]:
    """The rules by node type and by callee name, the node types some rule looks at, the rules of a call of a
    capitalized name that has none of its own (Rule.class_calls), and the calls the walk need not visit (its
    ``calls``: the names of ``x.name(...)`` that some rule takes, and whether a capitalized one is taken; None when
    some rule takes every call), and the operators of the BinOps and UnaryOps the walk need visit (its ``operators``:
    per node type whose every rule names its operators, Rule.operators, their union; None when there is none; with
    ``by_callee`` False, as calls, none left out): made once per choice of rules (``syncfree check`` analyses thousands of files with
    the same rules; the tables are only read)."""
    # (the same tuple of rules comes back for each file from _chosen_rules: known by its identity, the tuple kept
    # alive beside the tables so that its id stays its own)
    kept = _DISPATCH_BY_ID.get((id(rules), by_callee))
    if kept is not None and kept[0] is rules:
        return kept[1]
    key = (by_callee, *(rule.code for rule in rules))
    found = _DISPATCH.get(key)
    if found is None:
        by_type: dict[type[ast.AST], list[Rule]] = {}
        by_name: dict[str, list[Rule]] = {}
        for rule in rules:
            for node_type in rule.node_types:
                if node_type is ast.Call and rule.calls is not None and by_callee:
                    for name in rule.calls:
                        by_name.setdefault(name, []).append(rule)
                else:
                    by_type.setdefault(node_type, []).append(rule)
        # A call's rules: those of its callee's name after those of every call, in one list made here rather than
        # joined at each call.
        every_call = by_type.get(ast.Call, [])
        # (a rule shown the calls of classes too: in the list of each capitalized name, in code order, and in the list
        # of a capitalized name no rule names)
        classes = [rule for rule in rules if rule.class_calls] if by_callee else []
        order = {rule.code: index for index, rule in enumerate(rules)}
        for name, chosen in by_name.items():
            if name[:1].isupper():
                chosen += [rule for rule in classes if all(rule is not other for other in chosen)]  # (no ==: texts)
                chosen.sort(key=lambda rule: order[rule.code])
        by_name = {name: [*every_call, *chosen] for name, chosen in by_name.items()}
        by_class = [*every_call, *classes] if classes else []
        types = frozenset({*by_type, *((ast.Call,) if by_name else ())})
        # (a call of `x.name(...)` whose name has no rules of its own, when no rule takes every call and the name is
        # no class's: _visit finds no rule for it; the walk leaves it out, a call fewer for most calls of a file)
        calls = (frozenset(by_name), bool(by_class)) if by_name and not every_call else None
        # (`-x`, `a * b`: a BinOp or UnaryOp whose operator no rule on it takes is not visited, as a call above)
        operators = frozenset(
            (kind, frozenset().union(*(rule.operators for rule in by_type[kind])))  # type: ignore[arg-type]
            for kind in OPERATOR_NODES
            if by_callee and by_type.get(kind) and all(rule.operators is not None for rule in by_type[kind])
        ) or None
        found = _DISPATCH[key] = (by_type, by_name, types, by_class, calls, operators)
    if len(_DISPATCH_BY_ID) < 64:
        _DISPATCH_BY_ID[id(rules), by_callee] = (rules, found)
    return found


def _optional_guard(node: ast.AST, scope: CellScope) -> str | None:
    """The test of an ``if`` around ``node`` (in its method) that runs the branch only when an optional attribute of
    the instance exists: ``hasattr(self, "final_offload_hook") and ...``, ``getattr(self, "_hf_hook", None) is not
    None`` (set by a feature few runs use), only in a mode few runs are in (``torch.jit.is_scripting()``), or only on
    another accelerator than CUDA (``if self.device.type == "mps":``, ``if is_npu_available():``, ``elif rng_type ==
    RNGType.XLA:``, or anywhere in a function named for one, ``def get_max_musa_memory``: then ``def name``). Not
    ``if not hasattr(self, "cache")`` (the first run takes it), nor a test of its value (``getattr(self, "method", None) == HQQ``), nor another object's (``hasattr(config, ...)``)."""
    child, parent = node, scope.parent(node)
    while parent is not None and type(parent) not in _SCOPES:
        if type(parent) is ast.If and child is not parent.test and child in parent.body:  # type: ignore[attr-defined]
            test = parent.test  # type: ignore[attr-defined]
            conjuncts = test.values if type(test) is ast.BoolOp and type(test.op) is ast.And else [test]
            for conjunct in conjuncts:
                if (
                    type(conjunct) is ast.Compare
                    and len(conjunct.ops) == 1
                    and type(conjunct.ops[0]) is ast.IsNot
                    and is_constant(conjunct.comparators[0], None)
                ):
                    conjunct = conjunct.left
                if type(conjunct) is ast.Call and (
                    _instance_attribute_test(conjunct, scope) or scope.call_name(conjunct) in _MODE_TESTS
                ):
                    return scope.snippet(test, 60)
                if _other_backend_test(conjunct) or _available_test(conjunct):
                    return scope.snippet(test, 60)
        child, parent = parent, scope.parent(parent)
    while parent is not None:  # the function itself, and the functions around it
        if type(parent) in (ast.FunctionDef, ast.AsyncFunctionDef) and _names_another_backend(parent.name):  # type: ignore[attr-defined]
            return f"def {parent.name}"  # type: ignore[attr-defined]
        parent = scope.parent(parent)
    return None


def _other_backend_test(test: ast.expr) -> bool:
    """``x.device.type == "mps"``, ``device.type in ("xla", "xpu")``, ``str(device) == "npu"``: a test that holds only
    on another accelerator than CUDA (Apple's MPS, XLA, Intel's XPU, Ascend's NPU, Gaudi's HPU). The branch never
    runs when the code runs on CUDA: what syncs there waits for that device, not for a CUDA GPU."""
    if type(test) is not ast.Compare or len(test.ops) != 1:
        return False
    operator, right = test.ops[0], test.comparators[0]
    if type(operator) is ast.Eq:
        names = [right]
    elif type(operator) is ast.In and type(right) in (ast.Tuple, ast.List, ast.Set):
        names = right.elts  # type: ignore[attr-defined]
    else:
        return False
    return bool(names) and all(
        (type(name) is ast.Constant and name.value in _OTHER_BACKENDS)  # type: ignore[attr-defined]
        # `rng_type == RNGType.XLA`, `distributed_type == DistributedType.MULTI_NPU`: an enumeration's member named
        # for the accelerator (upper case, as enumerations' members are)
        or (type(name) is ast.Attribute and name.attr.isupper()  # type: ignore[attr-defined]
            and name.attr.lower().removeprefix("multi_") in _OTHER_BACKENDS)  # type: ignore[attr-defined]
        for name in names
    )


def _available_test(test: ast.expr) -> bool:
    """``is_npu_available()``, ``is_torch_xla_available()``, ``torch.musa.is_available()``: a test that holds only
    where another accelerator than CUDA is installed and present (accelerate's and transformers' ``is_..._available``
    helpers); the branch is that accelerator's code."""
    if type(test) is not ast.Call:
        return False
    function = test.func  # type: ignore[attr-defined]
    if type(function) is ast.Attribute and function.attr == "is_available":  # type: ignore[attr-defined]
        owner = function.value  # type: ignore[attr-defined]
        return type(owner) is ast.Attribute and owner.attr in _OTHER_BACKENDS  # type: ignore[attr-defined]
    name = function.id if type(function) is ast.Name else function.attr if type(function) is ast.Attribute else ""  # type: ignore[attr-defined]
    if not (name.startswith("is_") and name.endswith("_available")):
        return False
    return name[3:-10].removeprefix("torch_") in _OTHER_BACKENDS


def _names_another_backend(name: str) -> bool:
    """``get_max_musa_memory``, ``_neuron_broadcast_object_list``, ``_tpu_gather``: a function named for another
    accelerator than CUDA (one word of its snake_case name), whose code is that accelerator's (a helper its callers
    call only in a branch for it, often in another module)."""
    return any(word in _OTHER_BACKENDS for word in name.lower().split("_"))


# Device types of accelerators other than CUDA (torch.device's types, and the names of their helpers: Apple's MPS,
# XLA and TPUs, Intel's XPU, Ascend's NPU, Gaudi's HPU, Cambricon's MLU, Moore Threads' MUSA, AWS Neuron, Tecorigin's
# SDAA, SenseTime's DIPU, Meta's MTIA; "cpu" and "meta" are not among them: a CPU branch may still copy to the GPU,
# and "meta" names other things too).
_OTHER_BACKENDS = frozenset({"mps", "xla", "tpu", "xpu", "npu", "hpu", "mlu", "musa", "neuron", "sdaa", "dipu", "mtia"})


def _instance_attribute_test(call: ast.Call, scope: CellScope) -> bool:
    """``hasattr(self, name)`` or ``getattr(self, name, None)`` in a method."""
    arguments = call.args
    if len(arguments) < 2 or type(arguments[0]) is not ast.Name or arguments[0].id != scope.self_name:
        return False
    name = scope.call_name(call)
    return (name == "builtins.hasattr" and len(arguments) == 2) or (
        name == "builtins.getattr" and len(arguments) == 3 and is_constant(arguments[2], None)
    )


# Branches for a mode few runs are in: TorchScript, tracing, torch.compile's tracing, an ONNX export.
_MODE_TESTS = frozenset(
    {
        "torch.jit.is_scripting",
        "torch.jit.is_tracing",
        "torch.compiler.is_compiling",
        "torch.compiler.is_dynamo_compiling",
        "torch._dynamo.is_compiling",
        "torch.onnx.is_in_onnx_export",
    }
)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module, ast.Lambda)


def _position_key(finding: dict[str, Any]) -> tuple[Any, ...]:
    r = finding["range"]
    return (r["line"], r["col"], r["end_line"], r["end_col"], finding["rule"])


def apply_edits(source: str, edits: Iterable[dict[str, Any]], *, first_line: int = 1) -> str:
    """Apply report TextEdits (cell-relative ranges, ``first_line`` as in :func:`analyze_source`) to ``source``.

    What the frontend's *Apply rewrite* does, for the CLI and the tests. Raises ValueError on overlapping edits or a
    range outside the source.
    """
    lines = source.splitlines(keepends=True) or [""]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        index = line - first_line
        if not 0 <= index < len(lines) or not 0 <= column <= len(lines[index]):
            raise ValueError(f"edit position {line}:{column} is outside the source")
        return starts[index] + column

    spans = sorted(
        (offset(e["range"]["line"], e["range"]["col"]), offset(e["range"]["end_line"], e["range"]["end_col"]), e["text"])
        for e in edits
    )
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        if start < end:
            raise ValueError("edits overlap")
    for start, end, text in reversed(spans):
        source = source[:start] + text + source[end:]
    return source


def apply_fixes(source: str, findings: Iterable[dict[str, Any]], *, first_line: int = 1) -> str:
    """Apply the fixes of ``findings`` (all computed on ``source``) in order, skipping a fix whose edits overlap an
    earlier one's."""
    chosen: list[dict[str, Any]] = []
    for finding in findings:
        fix = finding.get("fix")
        if not fix or not fix["edits"]:
            continue
        try:
            apply_edits(source, [*chosen, *fix["edits"]], first_line=first_line)
        except ValueError:
            continue
        chosen.extend(fix["edits"])
    return apply_edits(source, chosen, first_line=first_line)


def neutralize_ipython(source: str) -> str | None:
    """The cell with IPython-only lines replaced by ``pass`` (same line count, other lines untouched).

    Returns None for a cell magic whose body is not Python (``%%bash``...). Only lines that start a logical line
    are considered, so a ``%`` or ``?`` inside a string or inside brackets is left alone.
    """
    lines = source.splitlines(keepends=True)
    # IPython drops leading blank lines before it looks for a cell magic (inputtransformer2.leading_empty_lines).
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return source
    if lines[first].lstrip().startswith("%%"):
        words = lines[first].lstrip()[2:].split(None, 1)
        if not words or words[0] not in PYTHON_CELL_MAGICS:
            return None
        lines[first] = _line_ending(lines[first])
    scanner = _LogicalLines()
    for index, line in enumerate(lines):
        if scanner.at_statement_start() and _is_ipython_line(line, scanner):
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = f"{indent}pass{_line_ending(line)}"
            continue
        scanner.feed(line)
    return "".join(lines)


def _line_ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def _is_ipython_line(line: str, scanner: _LogicalLines) -> bool:
    stripped = line.strip()
    if not stripped:
        return False
    if stripped[0] in "%!?" or _MAGIC_ASSIGNMENT.match(line):
        return True
    return scanner.has_help_mark(line)


class _LogicalLines:
    """Tracks open brackets, strings and backslash continuations across physical lines (a small tokenizer that,
    unlike :mod:`tokenize`, does not give up on IPython syntax)."""

    def __init__(self) -> None:
        self.depth = 0
        self.string: str | None = None
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.string is None and not self.continued

    def has_help_mark(self, line: str) -> bool:
        """``obj?``/``obj??``: a ``?`` outside strings and comments (never valid Python)."""
        return self._scan(line, dry_run=True)

    def feed(self, line: str) -> None:
        self._scan(line, dry_run=False)

    def _scan(self, line: str, *, dry_run: bool) -> bool:
        depth, string = self.depth, self.string
        question = comment = False
        i, length = 0, len(line)
        while i < length:
            char = line[i]
            if string is not None:
                if char == "\\":
                    i += 2
                    continue
                if line.startswith(string, i):
                    i += len(string)
                    string = None
                    continue
                if char in "\r\n" and len(string) == 1:
                    string = None  # an unterminated one-quote string ends with the line
                i += 1
                continue
            if char == "#":
                comment = True
                break
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth = max(0, depth - 1)
            elif char in "\"'":
                string = char * 3 if line.startswith(char * 3, i) else char
                i += len(string)
                continue
            elif char == "?":
                question = True
            i += 1
        continued = not comment and string is None and line.rstrip("\r\n").endswith("\\")
        if not dry_run:
            self.depth, self.string, self.continued = depth, string, continued
        return question
