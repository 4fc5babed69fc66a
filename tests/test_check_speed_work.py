"""The static pass's short cuts (issue #40's cold speed) do less work and find the same.

Each short cut skips work whose answer the text or the node already gives: counted here, not timed (a shared machine's
noise says nothing). The answers are held to the long way: the regex and import scans on awkward text, and the
findings of the whole pass on the corpus libraries (bench/check_precision.py) before and after, byte for byte.
"""

from __future__ import annotations

import ast
import re

import pytest

import syncfree.analyze as analyze
from syncfree.analyze import analyze_source
from syncfree.catalog import RULES
from syncfree.catalog import collectives as collectives_module
from syncfree.catalog import scope as scope_module
from syncfree.catalog.scope import CellScope

# What _attribute_stores scanned with before one pattern did it in one scan.
_OLD_STORES = (
    re.compile(r"self\.(\w+)[ \t]*(?:=(?!=)|[-+*/@%&|^<>]{1,2}=|:(?!=))"),
    re.compile(r"self\.register_(?:buffer|parameter)\(\s*[\"'](\w+)[\"']"),
)
_OLD_IN_TUPLE = re.compile(r"self\.(\w+)[ \t]*,")


def _old_attribute_stores(source: str) -> list[tuple[int, str]]:
    found = [(match.start(), match.group(1)) for pattern in _OLD_STORES for match in pattern.finditer(source)]
    for match in _OLD_IN_TUPLE.finditer(source):
        start = source.rfind("\n", 0, match.start()) + 1
        end = source.find("\n", match.start())
        text = source[start : end if end >= 0 else None]
        if text.count(")") > text.count("("):
            continue
        head, equals, tail = text.partition("=")
        if equals and not tail.startswith("=") and match.start() < start + len(head) and \
                scope_module._TARGET_LIST.fullmatch(head):
            found.append((match.start(), match.group(1)))
    found.sort()
    stores, line, position = [], 1, 0
    for start, name in found:
        line += source.count("\n", position, start)
        position = start
        stores.append((line, name))
    return stores


STORES_SOURCE = '''\
class A:
    def __init__(self, n):
        self.a = n; self.b: int = 2; self.c += 1; self.d //= 2; self.e **= 3; self.f @= m
        self.register_buffer("buf", t); self.register_parameter( 'w', p)
        self.register_buffer = 3
        self.g, self.h = 1, 2
        (self.i, self.j) = pair
        call(self.k, self.l, flag=True)
        self.m == self.n; self.o != 1; self.p := 4
        myself.q = 1; self.r.s = 2; self.t[0] = 3
        self.u, = single
'''


def test_attribute_stores_one_scan_finds_what_three_found() -> None:
    assert scope_module._attribute_stores(STORES_SOURCE) == _old_attribute_stores(STORES_SOURCE)
    names = [name for _, name in scope_module._attribute_stores(STORES_SOURCE)]
    assert {"a", "b", "c", "d", "e", "f", "buf", "w", "register_buffer", "g", "h", "i", "u"} <= set(names)
    assert not {"k", "l", "m", "n", "o", "s"} & set(names)


IMPORTS_SOURCE = '''\
import torch as th


def plain(x):
    return x.item()


def lazy(x):
    if x:
        from numpy import (
            asarray as aa,
        )
    return aa(x)


class Holder:
    def method(self):
        from \\
            torch.nn import functional \\
            as G
        return G


important = "no import statement on this line"
'''


@pytest.mark.parametrize("source", [IMPORTS_SOURCE, IMPORTS_SOURCE.replace("\n", "\r\n"), "x = 1\n", ""])
def test_imports_found_through_the_lines_that_hold_import_are_all_the_imports(source: str) -> None:
    tree = ast.parse(source)
    assert scope_module._imports(tree, source) == scope_module._imports(tree)
    if source == IMPORTS_SOURCE:
        assert len(scope_module._imports(tree, source)) == 3
        assert scope_module._import_lines(source) == [1, 10, 19, 24]


def test_statements_of_types_not_asked_for_are_not_visited() -> None:
    """A for, a with, a def or a class no rule looks at is not handed to the visit (each visit is a call)."""
    source = "import torch\nclass A:\n    def f(self, x):\n        for i in x:\n            with i:\n                i.item()\n"
    tree = ast.parse(source)
    seen: list[str] = []
    CellScope(tree, source).walk(lambda node: seen.append(type(node).__name__), types=frozenset({ast.Call}))
    assert seen == ["Call"]


def test_analyses_with_one_choice_of_rules_choose_them_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = analyze.select_rules
    monkeypatch.setattr(analyze, "_CHOSEN", {})
    monkeypatch.setattr(analyze, "select_rules", lambda *args: calls.append(args) or real(*args))
    for _ in range(3):
        analyze_source("x.item()\n", select=["SF101"])
    assert len(calls) == 1
    assert [f["rule"] for f in analyze_source("x.item()\n", select=["SF101"])] == ["SF101"]


def test_only_self_method_calls_are_recorded_in_a_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """``x.f()`` in a method can pass nothing to a method of the file: only ``self.f()`` is recorded."""
    recorded: list[str] = []
    real = CellScope._record_call

    def record(scope: CellScope, call: ast.Call) -> None:
        recorded.append(ast.unparse(call.func))
        real(scope, call)

    monkeypatch.setattr(CellScope, "_record_call", record)
    source = ("import torch\nclass M(torch.nn.Module):\n    def helper(self, t):\n        return t.sum()\n"
              "    def forward(self, x):\n        y = x.float().mean()\n        return self.helper(y).item()\n")
    findings = analyze_source(source)
    assert recorded == ["self.helper"]
    assert [f["rule"] for f in findings] == ["SF101"]


def test_calls_whose_attribute_names_no_match_are_not_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """SF706 sees every call and the collectives' look back every statement before a read: a callee ``x.attr``
    whose ``attr`` can name neither needs no qualified name."""
    resolved: list[str] = []
    real = CellScope.call_name
    monkeypatch.setattr(CellScope, "call_name", lambda scope, call: resolved.append(ast.unparse(call)) or real(scope, call))
    source = "import torch\nt = torch.ones(3)\nt.add_(1)\n"
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    call = tree.body[2].value  # type: ignore[attr-defined]
    assert list(RULES["SF706"].matcher(call, scope)) == []
    assert collectives_module.collective_output(call, scope) is None
    assert resolved == []
    normal = ast.parse("torch.distributions.Normal(t, 1.0)").body[0].value  # type: ignore[attr-defined]
    assert [m.certainty for m in RULES["SF706"].matcher(normal, scope)] == ["likely"]


def test_another_librarys_function_skips_torchs_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """``pandas.read_csv(...)`` and ``len(...)`` are told apart by their module, not after every torch test."""
    asked: list[object] = []
    monkeypatch.setattr(CellScope, "legacy_tensor_class", lambda scope, node: asked.append(node))
    source = "import pandas\nimport copy\nframe = pandas.read_csv('f')\nn = len(frame)\nc = copy.copy(frame)\n"
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    scope.walk(lambda node: None)
    assert asked == []
    assert scope.bindings().names["n"].kind == "python"
    assert scope.bindings().names["frame"].kind == "host"  # (a pandas table: host data, no tensor)


def test_rules_shown_many_calls_or_subscripts_make_no_generator_for_most(monkeypatch: pytest.MonkeyPatch) -> None:
    """SF706 (calls of `normal` and of classes), SF905 (every subscript) and SF910 (every `.item()` call) answer most
    nodes with the one empty iterator; SF905 and SF910 find their statement from the node they are shown."""
    from syncfree.catalog import NO_MATCH

    source = ("import os\nimport torch\ny = torch.ones(2)\nz = y.sum()\nos.environ['TORCH_NCCL_BLOCKING_WAIT'] = '1'\n"
              "print(y[0].item())\n")
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    plain, environ, printed = tree.body[3], tree.body[4], tree.body[5]
    assert RULES["SF706"].matcher(plain.value, scope) is NO_MATCH  # type: ignore[attr-defined]
    assert RULES["SF706"].matcher(ast.parse("ValueError('no')").body[0].value, scope) is NO_MATCH  # type: ignore[attr-defined]
    assert RULES["SF910"].matcher(plain.value, scope) is NO_MATCH  # type: ignore[attr-defined]
    assert RULES["SF910"].matcher(printed.value.args[0], scope) is NO_MATCH  # type: ignore[attr-defined]  # no assignment
    assert RULES["SF905"].matcher(plain, scope) is NO_MATCH
    assert RULES["SF905"].matcher(printed.value.args[0].func.value, scope) is NO_MATCH  # type: ignore[attr-defined]  # y[0]
    assert [m.certainty for m in RULES["SF905"].matcher(environ.targets[0], scope)] == ["certain"]  # type: ignore[attr-defined]
    assert [m.node for m in RULES["SF905"].matcher(environ.targets[0], scope)] == [environ]  # type: ignore[attr-defined]
    assert list(NO_MATCH) == []


def test_rules_shown_every_subscript_expression_or_operator_make_no_generator_for_most() -> None:
    """SF502, SF503 (every subscript), SF203, SF907 (every expression statement), SF202 (every operator) and SF904
    (every if and read, in a file that calls no collective) answer most nodes with the one empty iterator."""
    from syncfree.catalog import NO_MATCH

    source = "import torch\nx = torch.ones(4, device='cuda')\ny = x[0] + 1\nprint(y)\nif y:\n    z = y.item()\nw = 2\n"
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    scope.walk(lambda node: None)
    subscript = tree.body[2].value.left  # type: ignore[attr-defined]
    addition, statement, test = tree.body[2].value, tree.body[3], tree.body[4]  # type: ignore[attr-defined]
    assert RULES["SF502"].matcher(subscript, scope) is NO_MATCH
    assert RULES["SF503"].matcher(subscript, scope) is NO_MATCH
    assert RULES["SF203"].matcher(statement, scope) is NO_MATCH
    assert RULES["SF907"].matcher(statement, scope) is NO_MATCH
    assert RULES["SF202"].matcher(addition, scope) is NO_MATCH
    assert RULES["SF904"].matcher(test, scope) is NO_MATCH
    assert [f["rule"] for f in analyze_source(source)] == ["SF201", "SF103", "SF101"]


def test_a_conversion_that_matches_nothing_takes_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """SF102 sees every int(), range() and torch.zeros(): the call's text (which splits the file into lines) only
    for a match."""
    source = "import torch\nn = 3\nfor i in range(int(n)):\n    t = torch.zeros(n)\n"
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert all(list(RULES["SF102"].matcher(call, scope)) == [] for call in calls)
    assert "lines" not in vars(scope)


def test_the_rules_of_a_choice_are_sorted_by_type_once() -> None:
    rules = analyze._chosen_rules(None, None)
    assert analyze._dispatch(rules, True) is analyze._dispatch(rules, True)
    assert analyze._DISPATCH_BY_ID[id(rules), True][0] is rules


def test_a_transform_class_is_looked_through_once_for_model_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """HostCode.of asks at each pass over the file's classes whether a ...Transform class makes parameters or nn
    modules; the answer is the class's own: worked out once (a pass walks every node of such a class)."""
    from syncfree.catalog import host_code

    asked: list[str] = []
    real = host_code._is_model_layer
    monkeypatch.setattr(host_code, "_is_model_layer",
                        lambda node, names, *lines: asked.append(node.name) or real(node, names, *lines))
    source = ("from torch import nn\nclass Layer(Transform):\n    def __init__(self):\n        self.proj = nn.Linear(2, 2)\n"
              "class Plain(Transform):\n    pass\nclass Later(Plain):\n    pass\n")
    found = host_code.HostCode.of(ast.parse(source))
    assert asked == ["Layer", "Plain"]
    assert found is not None and sorted(found._kinds) == ["Later", "Plain"]


def test_a_class_counts_the_stores_in_its_own_lines_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each class counts the `self.x = ` stores of its lines: found among the file's (in line order) by bisection, not
    by going through all of them for each class (a file of many classes)."""

    class Stores(list):  # type: ignore[type-arg]
        iterated = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            Stores.iterated += 1
            return super().__iter__()

    real = scope_module._attribute_stores
    monkeypatch.setattr(scope_module, "_attribute_stores", lambda source: Stores(real(source)))
    source = ("class A:\n    def f(self):\n        self.a = 1\n"
              "class B:\n    def g(self):\n        self.b = 2\n        self.a = 3\n        self.b += 1\n")
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    scope.walk(lambda node: None)
    counts = {info.methods and next(iter(info.methods)): info.stores for info in scope._method_owner.values()}
    assert counts == {"f": {"a": 1}, "g": {"b": 2, "a": 1}}
    assert Stores.iterated == 0


def test_an_is_or_in_test_leaves_its_left_side_unevaluated(monkeypatch: pytest.MonkeyPatch) -> None:
    """``if self.cache is None:`` (SF103 asks every if's test): ``is`` and ``in`` answer with Python's own bool whatever
    their left side holds, so the left side is not worked out first (as the first link of a chain once was); another
    comparison's is."""
    source = "if t.grad is None:\n    pass\nif t.sum() not in (1, 2):\n    pass\nif t.sum() > 0:\n    pass\n"
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    evaluated: list[list[str]] = []
    kinds: list[str] = []
    real = CellScope._evaluate
    monkeypatch.setattr(CellScope, "_evaluate", lambda scope, node: (evaluated[-1].append(ast.unparse(node))
                                                                      if evaluated else None) or real(scope, node))

    def visit(node: ast.AST) -> None:
        if type(node) is ast.If:
            evaluated.append([])
            kinds.append(scope.value(node.test).kind)  # type: ignore[attr-defined]

    scope.walk(visit, types=frozenset({ast.If}))
    assert kinds[:2] == ["python", "python"]
    assert evaluated == [["t.grad is None"], ["t.sum() not in (1, 2)"], ["t.sum()", "t.sum() > 0", "0"]]


@pytest.mark.parametrize("with_source", [False, True])
def test_a_transform_class_whose_text_names_no_layer_is_not_walked(monkeypatch: pytest.MonkeyPatch,
                                                                    with_source: bool) -> None:
    """Whether a ...Transform class makes parameters or nn modules: told by its text where it names none of them (a
    walk of every node of the class, most of host_code's time on a library of transforms, for the others); the
    answers are the walk's. A class that names one in a docstring or a decorator is walked; so is one with non-ASCII
    text (a name may be another spelling of one); without the source, every class is."""
    from syncfree.catalog import host_code

    text = ("from torch import nn\n"
            "class Layer(Transform):\n    def __init__(self):\n        self.proj = nn.Linear(2, 2)\n"
            "class Plain(Transform):\n    def __call__(self, x):\n        return x.flip(0)\n"
            "class Said(Transform):\n    \"Not an nn.Module.\"\n"
            "@decorated(torch.nn.Parameter(t))\nclass Decorated(Transform):\n    pass\n"
            "class Wide(Transform):\n    \u00e9t\u00e9 = 1\n")
    walked: list[str] = []
    real_children = ast.iter_child_nodes

    def children(node: ast.AST):  # type: ignore[no-untyped-def]
        if type(node) is ast.ClassDef:
            walked.append(node.name)
        return real_children(node)

    monkeypatch.setattr(host_code.ast, "iter_child_nodes", children)
    found = host_code.HostCode.of(ast.parse(text), text if with_source else None)
    assert found is not None and sorted(found._kinds) == ["Plain", "Said", "Wide"]
    everything = ["Layer", "Plain", "Said", "Decorated", "Wide"]
    assert walked == ([name for name in everything if name != "Plain"] if with_source else everything)


@pytest.mark.parametrize(("text", "names"), [
    ("dist.all_reduce(t)", True),
    ("from torch.distributed import reduce as r\nr(t)", True),
    ("torch.distributed.all_gather_into_tensor(out, t)", True),
    ("dist.reduce_scatter_tensor(out, t)\n", True),
    ("x = dist.broadcast(t, 0)", True),
    ("def f(t):\n    if t.rank:\n        with g:\n            work = dist.all_reduce(t, async_op=True)\n", True),
    ("try:\n    pass\nexcept E:\n    dist.all_reduce(t)\n", True),
    ("broadcast(t, 0)", False),  # (a name of no import: no collective's call)
    ("\"Tensors broadcast together.\"\ny = a + b\n", False),  # (named in a docstring only: kornia's)
    ("self.add_state('x', dist_reduce_fx='sum')\ny = x.broadcast_to(s)\nall_gather_object(o, t)\n# a reduction", False),
    ("reduced = mean_reduce(t)\nbroadcasted = 1\n", False),
])
def test_a_file_calls_a_collective_only_where_it_names_one_as_a_name(text: str, names: bool) -> None:
    """SF904's and SF907's look back at every if and read runs only in a file that names a collective: as a name of
    its own (torchmetrics' `dist_reduce_fx` in half its files, `broadcast_to` in kornia's, named none), with a
    statement whose value is a call that may be one (kornia's docstrings say "broadcast")."""
    tree = ast.parse(text)
    scope = CellScope(tree, text)
    assert collectives_module.may_call_collectives(scope) is names


@pytest.mark.parametrize("text", ["nn", "nn.Linear", "torch.nn.Linear(2, 2)", "x = nn", "channels", "_nn", "nn_",
                                  "nnn", "inner nn", "a.nn.b", "", "n", "nn2", "2nn", "(nn)", "nn\nx", "xnn nnx"])
def test_the_nn_word_is_told_as_the_pattern_tells_it(text: str) -> None:
    """host_code's `_names_nn` (str.find and a look at its ends) answers as `\\bnn\\b` did for ASCII text."""
    from syncfree.catalog import host_code

    assert host_code._names_nn(text) == bool(re.search(r"\bnn\b", text))


@pytest.mark.parametrize("capitalized", [False, True])
def test_the_walk_leaves_out_the_calls_of_attributes_no_rule_takes(capitalized: bool) -> None:
    """walk's ``calls``: a call ``x.name(...)`` whose name no rule takes is not visited (the visitor would find no rule
    for it), a capitalized one only when some rule takes classes; a call of anything but an attribute is visited."""
    source = "y = t.sum().item()\nf(t)\nm = nn.Linear(2, 2)\nz = (g or h)(t)\n"
    scope = CellScope(ast.parse(source), source)
    seen: list[str] = []
    scope.walk(lambda node: seen.append(ast.unparse(node)), types=frozenset({ast.Call}),
               calls=(frozenset({"item"}), capitalized))
    assert seen == ["t.sum().item()", "f(t)", *(["nn.Linear(2, 2)"] if capitalized else []), "(g or h)(t)"]
