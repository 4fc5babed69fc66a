"""The catalog: every rule well formed, documented, reachable from a runtime kind, and exercised by fixtures."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import jsonschema
import pytest

from syncfree import catalog
from syncfree.analyze import analyze_source
from syncfree.catalog import KINDS, RULES, Rule, get, parse_rule_doc, rule_for_kind, select_rules

ROOT = Path(__file__).resolve().parents[1]
CATALOG_DIR = ROOT / "python_helper" / "syncfree" / "catalog"
SCHEMA = json.loads((ROOT / "python_helper" / "syncfree" / "report.schema.json").read_text())
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def schema_for(definition: str) -> dict:
    return {"$ref": f"#/definitions/{definition}", "definitions": SCHEMA["definitions"]}


def test_every_rule_module_is_discovered():
    modules = sorted(p.stem for p in CATALOG_DIR.glob("SF*.py"))
    assert [m.split("_", 1)[0] for m in modules] == list(RULES)
    assert len(RULES) >= 30


@pytest.mark.parametrize("code", list(RULES))
def test_rule_is_well_formed(code):
    rule = RULES[code]
    rule.validate()  # the texts too: parsed from the docstring when first read, not at import
    jsonschema.validate(rule.to_report(), schema_for("Rule"))
    assert rule.category == catalog.CATEGORIES[int(code[2])]
    assert rule.kind in KINDS
    assert rule.node_types and all(issubclass(t, ast.AST) for t in rule.node_types)
    assert not rule.title.endswith(".")
    # The hover card's texts are prose, not the docstring's markdown headings.
    for text in (rule.why, rule.fix, rule.what):
        assert "##" not in text and "```" not in text
    ast.parse(rule.example_before)
    ast.parse(rule.example_after)


@pytest.mark.parametrize("code", list(RULES))
def test_example_before_is_flagged_by_its_rule(code):
    """The example the hover card shows is one the matcher recognises (with a cell that puts it on CUDA)."""
    rule = RULES[code]
    preamble = "import torch\n"
    findings = analyze_source(preamble + rule.example_before, select=[code])
    assert findings, f"{code}'s example_before is not flagged:\n{rule.example_before}"


def test_names_are_unique_and_codes_grouped_by_category():
    names = [rule.name for rule in RULES.values()]
    assert len(names) == len(set(names))
    assert {int(code[2]) for code in RULES} == set(catalog.CATEGORIES)


def test_every_runtime_kind_but_other_has_an_explaining_rule():
    for kind in KINDS:
        code = rule_for_kind(kind)
        if kind == "other":
            assert code is None
        else:
            assert code is not None and get(code).kind == kind, kind
    assert rule_for_kind("no-such-kind") is None
    assert rule_for_kind("item") == "SF101"
    assert rule_for_kind("library") == "SF700"
    assert rule_for_kind("explicit") == "SF801"
    assert rule_for_kind("distributed") == "SF901"


def test_the_measured_sync_patterns_each_have_a_rule():
    """sync-facts.md's categories: each pattern kind maps to a rule by name."""
    expected = {
        "item", "python-scalar-conversion", "tensor-truth-value", "python-builtin-on-tensors", "is-nonzero",
        "print-tensor", "format-tensor", "tolist", "copy-to-host", "blocking-copy-to-device", "legacy-type-to-cpu",
        "tensor-from-python-on-device", "legacy-cuda-constructor", "index-with-host-index", "index-put-python-scalar",
        "slice-with-cuda-bounds", "boolean-mask-index", "nonzero", "masked-select", "unique",
        "repeat-interleave-without-output-size", "bincount", "histc-without-range", "one-hot-without-num-classes",
        "allclose", "grad-scaler-step", "clip-grad-norm-error-if-nonfinite", "cuda-synchronize",
        "event-synchronize", "stream-synchronize", "barrier", "blocking-collective", "coalesce-scalar-reads",
    }
    assert expected <= {rule.name for rule in RULES.values()}


def test_texts_follow_the_measurements():
    """A few facts the hover cards must get right (sync-facts.md)."""
    assert "Event.wait()" in get("SF802").why and "not" in get("SF802").why
    assert "event" in get("SF301").fix.lower()  # a non_blocking D2H copy needs an event before the CPU reads
    assert "pinned" in get("SF302").fix_safety_note
    assert get("SF801").cuda_call == "cudaDeviceSynchronize"
    assert get("SF802").cuda_call == "cudaEventSynchronize"


def test_fixable_rules_have_a_rewrite_fixture():
    for code, rule in RULES.items():
        fixtures = list((FIXTURES / "rewrites").glob(f"*/{code}_*.in.py"))
        assert bool(fixtures) == (rule.fix_safety != "none"), code


def test_every_rule_appears_in_a_checker_fixture():
    expected_text = "\n".join(p.read_text() for p in (FIXTURES / "checker").glob("*/*.txt"))
    found = set(re.findall(r" (SF\d{3}) (?:certain|likely):", expected_text))
    assert found == set(RULES)


def test_noisy_rules_are_off_by_default():
    enabled = {rule.code for rule in catalog.enabled_rules()}
    assert "SF303" not in enabled and "SF901" not in enabled
    assert "SF101" in enabled


def test_select_rules():
    assert {r.code for r in select_rules(["SF6"])} == {c for c in RULES if c.startswith("SF6")}
    assert {r.code for r in select_rules(["ALL"], ["SF1", "SF2"])} == {c for c in RULES if c[2] not in "12"}
    assert "SF303" in {r.code for r in select_rules(["SF303"])}
    with pytest.raises(ValueError, match="matches no rule"):
        select_rules(["SF999"])
    with pytest.raises(KeyError, match="no rule"):
        get("SF000")


def test_docstring_sections_are_required():
    with pytest.raises(ValueError, match="lacks the section"):
        parse_rule_doc("## What it does\nx\n", "SF000")
    sections = parse_rule_doc(
        """## What it does
        Checks
        for things.

        ## Why is this bad?
        One.

        Two.

        ## Example
        ```python
        a = 1
        ```

        ## Use instead
        Do this.
        ```python
        b = 2
        ```

        ## Fix safety
        None.
        """
    )
    assert sections["What it does"] == ("Checks for things.", "")
    assert sections["Why is this bad?"] == ("One.\n\nTwo.", "")
    assert sections["Use instead"] == ("Do this.", "b = 2")


def test_rule_validation_rejects_inconsistent_entries():
    base = get("SF101")
    fields = {name: getattr(base, name) for name in Rule.FIELDS}
    with pytest.raises(ValueError, match="rewrite exactly when"):
        Rule(**{**fields, "fix_safety": "safe"}).validate()
    with pytest.raises(ValueError, match="unknown kind"):
        Rule(**{**fields, "kind": "sync"}).validate()
    with pytest.raises(ValueError, match="longer than 2000"):
        Rule(**{**fields, "why": "x" * 2001}).validate()


def test_rule_texts_are_parsed_from_the_docstring_when_first_read():
    # A check reads no rule's texts: parsing the 44 docstrings at import was a tenth of a cold check's fixed cost.
    import syncfree.catalog.SF101_item as module

    base = get("SF101")
    kept = ("code", "name", "title", "kind", "dependency", "cuda_call", "fix_safety", "node_types", "matcher",
            "rewrite", "enabled_by_default", "calls")
    fresh = Rule.from_docstring(module.__doc__, **{name: getattr(base, name) for name in kept})
    assert "why" not in fresh.__dict__ and fresh.category == base.category
    sections = parse_rule_doc(module.__doc__, "SF101")
    assert fresh.example_before == sections["Example"][1] and fresh.example_after == sections["Use instead"][1]
    assert "why" in fresh.__dict__ and fresh.why == sections["Why is this bad?"][0] and fresh.fix == sections["Use instead"][0]
    assert fresh.what == sections["What it does"][0] and fresh.fix_safety_note == sections["Fix safety"][0]
    assert fresh == base and hash(fresh) == hash(base) and fresh.to_report() == base.to_report()
    broken = Rule.from_docstring("## What it does\nx\n", **{name: getattr(base, name) for name in kept})
    with pytest.raises(ValueError, match="lacks the section"):
        broken.why  # noqa: B018
    with pytest.raises(AttributeError):
        fresh.nothing  # noqa: B018
    with pytest.raises(AttributeError):
        fresh.why = "x"  # type: ignore[misc]


# --------------------------------------------------------------------------- library entry points


def test_entry_points_name_existing_rules_and_torch_functions():
    torch = pytest.importorskip("torch")
    from syncfree.catalog.library_entry_points import ENTRY_POINTS

    root = Path(torch.__file__).resolve().parent.parent
    for fragment, qualname, code in ENTRY_POINTS:
        assert code in RULES, code
        path = root / fragment
        assert path.exists(), f"{fragment}: not in the installed torch"
        if qualname is not None and path.is_file():
            tree = ast.parse(path.read_text())
            found = {f"{cls.name}.{fn.name}" for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
                     for fn in cls.body if isinstance(fn, ast.FunctionDef)}
            found |= {fn.name for fn in tree.body if isinstance(fn, ast.FunctionDef)}
            assert qualname in found, f"{qualname} not in {fragment}"


def _sites_by_line(report) -> dict[int, tuple[str, str, int]]:
    return {s.line: (s.rule, s.kind, s.count) for s in report.sites}


def test_syncs_inside_library_calls_are_named_by_what_the_line_called():
    """Predict mode with real torch objects: the rule of the library entry point, not the
    innermost torch call (.item() in GradScaler.step, a copy in Module._apply)."""
    torch = pytest.importorskip("torch")
    import inspect

    import syncfree

    lines = {}

    def here(tag):
        lines[tag] = inspect.currentframe().f_back.f_lineno

    with syncfree.watch(mode="predict") as w:
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        here("to"); model.to("cuda")  # noqa: E702
        here("cuda"); torch.nn.Linear(3, 3).cuda()  # noqa: E702
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(model(torch.randn(2, 4, device="cuda")).sum()).backward()
        here("step"); scaler.step(opt)  # noqa: E702
        scaler.update()
        # validate_args explicit: torch._dynamo turns the default off for the whole process once used
        here("normal"); dist = torch.distributions.Normal(torch.zeros(3, device="cuda"), torch.ones(3, device="cuda"), validate_args=True)  # noqa: E702,E501
        here("sample"); dist.sample()  # noqa: E702
        here("clip"); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)  # noqa: E702
        here("item"); torch.ones((), device="cuda").item()  # noqa: E702
    sites = _sites_by_line(w.report)
    assert sites[lines["to"]] == ("SF303", "to_device", 4)  # 2 weights + 2 biases
    assert sites[lines["cuda"]] == ("SF303", "to_device", 2)
    assert sites[lines["step"]] == ("SF701", "library", 1)
    assert sites[lines["normal"]][0] == "SF706"
    assert sites[lines["sample"]][0] == "SF706"
    assert sites[lines["clip"]][0] == "SF702"
    assert sites[lines["item"]] == ("SF101", "item", 1)  # the user's own call is unchanged


def test_table_predicted_syncs_take_the_rule_of_the_called_function():
    """narrow with a tensor start, linalg.inv: predicted from the op table (kind library);
    the static pass cannot tell the start is a tensor, the callee's name names the rule."""
    torch = pytest.importorskip("torch")
    import inspect

    import syncfree

    lines = {}

    def here(tag):
        lines[tag] = inspect.currentframe().f_back.f_lineno

    def start_of(x):
        return (x > 0).sum() * 0 + 1  # a 0-d CUDA tensor

    with syncfree.watch(mode="predict") as w:
        a = torch.randn(4, 4, device="cuda") + 4 * torch.eye(4, device="cuda")
        s = start_of(a)
        here("narrow"); a.narrow(0, s, 0)  # noqa: E702
        here("inv"); torch.linalg.inv(a)  # noqa: E702
        here("combinations"); torch.combinations(a[0], r=2)  # noqa: E702
    sites = _sites_by_line(w.report)
    assert sites[lines["narrow"]][0] == "SF705"
    assert sites[lines["inv"]][0] == "SF704"
    assert sites[lines["combinations"]] == ("SF700", "library", 2)  # no rule of its own
