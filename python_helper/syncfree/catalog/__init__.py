"""The sync catalog: what synchronizes the CPU with the GPU, why, and what to write instead.

One rule per module (``SF101_item.py``, ...), ruff style: the module docstring is the rule's documentation, with the
sections *What it does*, *Why is this bad?*, *Example*, *Use instead* and *Fix safety*. The texts the frontend's hover
card shows (``why``, ``fix``, ``example_before``, ``example_after``) are read from those sections, so the docstring is
their one source.

Codes are stable and grouped by category (torchfix style):

- SF1xx data-dependent control flow
- SF2xx printing and conversion to Python
- SF3xx device transfers
- SF4xx tensor creation from Python and NumPy data
- SF5xx indexing and slicing
- SF6xx dynamic output shapes
- SF7xx library calls that sync inside
- SF8xx explicit synchronization
- SF9xx distributed and coalescing

Each rule carries a static matcher (run by :mod:`syncfree.analyze` on the cell's AST) and optionally a rewrite that
turns a match into text edits. Noisy rules exist but are off by default (``enabled_by_default=False``).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

# How sure a match is and the edits of a fix: below this module and scope.py, which both use them.
from syncfree.catalog.edits import Certainty, Edit, Frozen

# What a runtime sync site's ``kind`` may be (report.schema.json, SyncSite.kind); every rule
# has exactly one. Defined once, with the labels people read, in syncfree.kinds.
from syncfree.kinds import KINDS

if TYPE_CHECKING:
    from syncfree.catalog.scope import CellScope

__all__ = [
    "CATEGORIES",
    "KINDS",
    "RULES",
    "Edit",
    "Fix",
    "Match",
    "Rule",
    "enabled_rules",
    "get",
    "rule_for_kind",
    "select_rules",
]


#: The category of a code is fixed by its hundreds digit.
CATEGORIES: Mapping[int, str] = MappingProxyType(
    {
        1: "Data-dependent control flow",
        2: "Printing and conversion to Python",
        3: "Device transfers",
        4: "Tensor creation from Python and NumPy data",
        5: "Indexing and slicing",
        6: "Dynamic output shapes",
        7: "Library calls that sync inside",
        8: "Explicit synchronization",
        9: "Distributed and coalescing",
    }
)

Safety = Literal["safe", "review", "none"]


class Fix(Frozen):
    """A proposed rewrite of one match: what the frontend's *Apply rewrite* does."""

    __slots__ = ("title", "safety", "edits", "reason")
    title: str
    safety: Literal["safe", "review"]
    edits: tuple[Edit, ...]
    reason: str | None  # required for review: what to check before applying

    def __init__(self, title: str, safety: Literal["safe", "review"], edits: tuple[Edit, ...],
                 reason: str | None = None) -> None:
        setter = object.__setattr__
        setter(self, "title", title)
        setter(self, "safety", safety)
        setter(self, "edits", edits)
        setter(self, "reason", reason)

    def _fields(self) -> tuple[object, ...]:
        return (self.title, self.safety, self.edits, self.reason)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Fix(title={self.title!r}, safety={self.safety!r}, edits={self.edits!r}, "
                f"reason={self.reason!r})")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (Fix, self._fields())


class Match(Frozen):
    """One place where a rule's matcher found a sync.

    ``node`` is the expression or statement whose range the finding covers (the call expression that syncs, so
    that the engine can join a runtime site to it by the executing instruction's columns); ``end_node`` extends
    the range to the end of a later node (several statements that could be one sync). ``parts`` holds the nodes a
    rewrite needs. Compared by identity.
    """

    __slots__ = ("node", "message", "certainty", "end_node", "parts")
    node: ast.AST
    message: str
    certainty: Certainty
    end_node: ast.AST | None
    parts: Mapping[str, Any]

    def __init__(self, node: ast.AST, message: str, certainty: Certainty, end_node: ast.AST | None = None,
                 parts: Mapping[str, Any] | None = None) -> None:
        setter = object.__setattr__
        setter(self, "node", node)
        setter(self, "message", message)
        setter(self, "certainty", certainty)
        setter(self, "end_node", end_node)
        setter(self, "parts", {} if parts is None else parts)

    def __repr__(self) -> str:
        return (f"Match(node={self.node!r}, message={self.message!r}, certainty={self.certainty!r}, "
                f"end_node={self.end_node!r}, parts={self.parts!r})")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (Match, (self.node, self.message, self.certainty, self.end_node, self.parts))


Matcher = Callable[[ast.AST, "CellScope"], Iterator[Match]]
#: The node types whose operator (their ``op``) :attr:`Rule.operators` can name.
OPERATOR_NODES = (ast.BinOp, ast.UnaryOp)
#: What a matcher returns for a node that fails its first, cheap test: an iterator that is empty for good. (A matcher
#: that is a generator function makes a generator for each node it is shown, and some rules are shown every call or
#: assignment: they test first and hand the rest to a generator.)
NO_MATCH: Iterator[Match] = iter(())
Rewrite = Callable[[Match, "CellScope"], "Fix | None"]


def callee_names(qualified: Iterable[str]) -> frozenset[str]:
    """The last names of qualified callee names (``torch.cuda.synchronize`` -> ``synchronize``), for
    :attr:`Rule.calls`."""
    return frozenset(name.rpartition(".")[2] for name in qualified)


#: The texts a rule reads from its module docstring's sections, and the section (prose or its code) each comes from.
_TEXTS: Mapping[str, tuple[str, int]] = MappingProxyType({
    "why": ("Why is this bad?", 0),
    "fix": ("Use instead", 0),
    "example_before": ("Example", 1),
    "example_after": ("Use instead", 1),
    "what": ("What it does", 0),
    "fix_safety_note": ("Fix safety", 0),
})


class Rule(Frozen):
    """A catalog entry: the texts the frontend shows, plus the static matcher and the optional rewrite.

    A rule built by :meth:`from_docstring` parses its docstring the first time one of its texts (``why``, ``fix``,
    ``example_before``, ``example_after``, ``what``, ``fix_safety_note``) is read: a check reads none, and parsing
    the 44 docstrings was a tenth of a cold check's fixed cost. Two rules are equal when all their fields are.
    """

    #: The fields, in the order of the constructor's parameters.
    FIELDS = ("code", "name", "title", "category", "kind", "dependency", "cuda_call", "why", "fix", "example_before",
              "example_after", "fix_safety", "what", "fix_safety_note", "node_types", "matcher", "rewrite",
              "enabled_by_default", "calls", "class_calls", "operators")

    code: str
    name: str
    title: str
    category: str
    kind: str
    dependency: Literal["false", "true"]
    cuda_call: str | None
    why: str
    fix: str
    example_before: str
    example_after: str
    fix_safety: Safety
    what: str
    fix_safety_note: str
    node_types: tuple[type[ast.AST], ...]
    matcher: Matcher
    rewrite: Rewrite | None
    enabled_by_default: bool
    #: For a rule on ``ast.Call``: the names a callee it can match ends with, once import aliases are resolved
    #: (``item`` for ``t.item()``; ``one_hot`` for ``F.one_hot(...)`` and for ``oh(...)`` after ``from
    #: torch.nn.functional import one_hot as oh``). The static pass calls the matcher only for those calls; None:
    #: for every call. tests/test_analyze.py checks the sets against showing every call to every rule.
    calls: frozenset[str] | None
    #: With :attr:`calls`: every call of a capitalized name as well, a class's (``torch.distributions.Normal(...)``
    #: whatever the distribution): what a rule on the classes of a module matches, which no list of names can hold.
    class_calls: bool
    #: For a rule on ``ast.BinOp`` or ``ast.UnaryOp``: the operators (``ast.Mod``, ``ast.Not``...) of those nodes it can
    #: match; the static pass shows it only those (``-x`` and ``a * b`` are most of a file's operators). None: every
    #: one. Its other node types are shown as ever.
    operators: frozenset[type[ast.AST]] | None

    def __init__(
        self,
        code: str,
        name: str,
        title: str,
        category: str,
        kind: str,
        dependency: Literal["false", "true"],
        cuda_call: str | None,
        why: str,
        fix: str,
        example_before: str,
        example_after: str,
        fix_safety: Safety,
        what: str,
        fix_safety_note: str,
        node_types: tuple[type[ast.AST], ...],
        matcher: Matcher,
        rewrite: Rewrite | None = None,
        enabled_by_default: bool = True,
        calls: frozenset[str] | None = None,
        class_calls: bool = False,
        operators: frozenset[type[ast.AST]] | None = None,
    ) -> None:
        self.__dict__.update(
            code=code, name=name, title=title, category=category, kind=kind, dependency=dependency,
            cuda_call=cuda_call, why=why, fix=fix, example_before=example_before, example_after=example_after,
            fix_safety=fix_safety, what=what, fix_safety_note=fix_safety_note, node_types=node_types,
            matcher=matcher, rewrite=rewrite, enabled_by_default=enabled_by_default, calls=calls,
            class_calls=class_calls, operators=operators,
        )

    def __getattr__(self, name: str) -> Any:
        # Called only for what the instance lacks: the texts of a rule built from its docstring, until first read.
        doc = self.__dict__.get("_doc")
        if doc is None or name not in _TEXTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        sections = parse_rule_doc(doc, self.__dict__["code"])
        texts = {text: sections[section][part] for text, (section, part) in _TEXTS.items()}
        self._check_texts(texts)
        self.__dict__.update(texts)
        del self.__dict__["_doc"]
        return texts[name]

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        # Equal rules have the same code and name: hashing reads no text (a set of rules parses no docstring).
        return hash((self.code, self.name))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS[:15] + ("enabled_by_default",))
        return f"Rule({shown})"

    @classmethod
    def from_docstring(
        cls,
        doc: str | None,
        *,
        code: str,
        name: str,
        title: str,
        kind: str,
        dependency: Literal["false", "true"],
        cuda_call: str | None,
        fix_safety: Safety,
        node_types: tuple[type[ast.AST], ...],
        matcher: Matcher,
        rewrite: Rewrite | None = None,
        enabled_by_default: bool = True,
        calls: Iterable[str] | None = None,
        class_calls: bool = False,
        operators: Iterable[type[ast.AST]] | None = None,
    ) -> Rule:
        """Build a rule whose texts come from its module docstring (the ruff-style sections), parsed when first
        read; the rest of the entry is validated now, the texts (and the sections' presence) when parsed."""
        rule = cls.__new__(cls)
        rule.__dict__.update(
            code=code, name=name, title=title, category=CATEGORIES[int(code[2])], kind=kind, dependency=dependency,
            cuda_call=cuda_call, fix_safety=fix_safety, node_types=node_types, matcher=matcher, rewrite=rewrite,
            enabled_by_default=enabled_by_default, calls=frozenset(calls) if calls is not None else None,
            class_calls=class_calls, operators=frozenset(operators) if operators is not None else None,
            _doc=doc or "",
        )
        rule._check_entry()
        return rule

    def validate(self) -> None:
        """Raise ValueError when the entry breaks the catalog's invariants (its texts included: they are parsed)."""
        self._check_entry()
        self._check_texts({text: getattr(self, text) for text in _TEXTS})

    def _check_entry(self) -> None:
        """The invariants of what is not a docstring's text (checked at import)."""
        problems = []
        if not re.fullmatch(r"SF[1-9][0-9]{2}", self.code):
            problems.append("code must look like SF101")
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.name):
            problems.append("name must be a kebab-case slug")
        if self.kind not in KINDS:
            problems.append(f"unknown kind {self.kind!r}")
        if self.dependency not in ("false", "true"):
            problems.append("dependency must be 'false' or 'true'")
        if self.fix_safety not in ("safe", "review", "none"):
            problems.append("fix_safety must be safe, review or none")
        if self.calls is not None and (ast.Call not in self.node_types or not self.calls):
            problems.append("calls (callee names) is for a rule on ast.Call and names at least one")
        if self.class_calls and self.calls is None:
            problems.append("class_calls goes with calls (the names besides the classes')")
        if self.operators is not None and (not self.operators or not (set(self.node_types) & set(OPERATOR_NODES))):
            problems.append("operators is for a rule on ast.BinOp or ast.UnaryOp and names at least one")
        if (self.rewrite is None) != (self.fix_safety == "none"):
            problems.append("a rule has a rewrite exactly when its fix_safety is not 'none'")
        if not self.title.strip():
            problems.append("title is empty")
        if len(self.title) > 200:
            problems.append("title is longer than 200 characters")
        if self.cuda_call is not None and len(self.cuda_call) > 200:
            problems.append("cuda_call is longer than 200 characters")
        if problems:
            raise ValueError(f"{self.code}: " + "; ".join(problems))

    def _check_texts(self, texts: Mapping[str, str]) -> None:
        problems = []
        limits = {"why": 2000, "fix": 2000, "example_before": 2000, "example_after": 2000}
        for attribute, limit in limits.items():
            text = texts[attribute]
            if not text.strip():
                problems.append(f"{attribute} is empty")
            if len(text) > limit:
                problems.append(f"{attribute} is longer than {limit} characters")
        if problems:
            raise ValueError(f"{self.code}: " + "; ".join(problems))

    def to_report(self) -> dict[str, Any]:
        """The entry as report.schema.json's ``definitions/Rule`` (what the frontend's hover card shows)."""
        return {
            "code": self.code,
            "title": self.title,
            "category": self.category,
            "dependency": self.dependency,
            "cuda_call": self.cuda_call,
            "why": self.why,
            "fix": self.fix,
            "example_before": self.example_before,
            "example_after": self.example_after,
            "fix_safety": self.fix_safety,
        }


_SECTION_NAMES = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def parse_rule_doc(doc: str, code: str = "rule") -> dict[str, tuple[str, str]]:
    """Split a rule docstring into ``{section: (prose, code)}``.

    Prose paragraphs are unwrapped (lines joined with spaces, paragraphs kept apart by a blank line) because the
    frontend wraps text itself; fenced code blocks are kept verbatim.
    """
    import inspect  # here, not at import: only a rule's texts need it (inspect imports dis, 2 ms of a cold check)

    text = inspect.cleandoc(doc)
    parts = re.split(r"^## (.+?)\s*$", text, flags=re.MULTILINE)
    sections = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    missing = [name for name in _SECTION_NAMES if name not in sections]
    if missing:
        raise ValueError(f"{code}: docstring lacks the section(s) {', '.join(missing)}")
    parsed = {}
    for name in _SECTION_NAMES:
        body = sections[name]
        code_blocks = [block.rstrip("\n") for block in _FENCE.findall(body)]
        prose = _FENCE.sub("", body)
        paragraphs = [
            " ".join(line.strip() for line in paragraph.splitlines() if line.strip())
            for paragraph in re.split(r"\n\s*\n", prose)
        ]
        parsed[name] = ("\n\n".join(p for p in paragraphs if p), "\n\n".join(code_blocks))
    return parsed


def _discover() -> dict[str, Rule]:
    """Import every ``SFnnn_*.py`` module of this package and collect its ``RULE``."""
    rules: dict[str, Rule] = {}
    # The folder's listing, not pkgutil.iter_modules (whose import is a millisecond of a cold check): the rules are
    # modules of their own files, as installed from the wheel.
    names = {name.partition(".")[0] for folder in __path__ for name in os.listdir(folder)
             if name.endswith((".py", ".pyc"))}
    for module_name in sorted(names):
        found = re.fullmatch(r"(SF[0-9]{3})_[a-z0-9_]+", module_name)
        if not found:
            continue
        module = importlib.import_module(f"{__name__}.{module_name}")
        rule = getattr(module, "RULE", None)
        if not isinstance(rule, Rule):
            raise TypeError(f"{module.__name__} defines no RULE")
        if rule.code != found.group(1):
            raise ValueError(f"{module.__name__} defines {rule.code}, not {found.group(1)}")
        if rule.code in rules:
            raise ValueError(f"{rule.code} is defined twice")
        rules[rule.code] = rule
    return dict(sorted(rules.items()))


RULES: Mapping[str, Rule] = MappingProxyType(_discover())

_DEFAULT_RULE_FOR_KIND: Mapping[str, str] = MappingProxyType(
    # The lowest code of a kind is its general explanation (SF700 for any library call, SF901 for distributed).
    {rule.kind: code for code, rule in reversed(list(RULES.items()))}
)


def get(code: str) -> Rule:
    """The rule with this code; KeyError with the known codes otherwise."""
    try:
        return RULES[code]
    except KeyError:
        raise KeyError(f"no rule {code!r} in the catalog (known: {', '.join(RULES)})") from None


def rule_for_kind(kind: str) -> str | None:
    """The code of the rule that explains a runtime sync site of this kind; None for ``other`` or an unknown kind."""
    return _DEFAULT_RULE_FOR_KIND.get(kind)


def enabled_rules() -> tuple[Rule, ...]:
    """The rules that run when the user selects nothing (noisy ones are off by default)."""
    return tuple(rule for rule in RULES.values() if rule.enabled_by_default)


def select_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> tuple[Rule, ...]:
    """Rules chosen ruff style: ``select``/``ignore`` hold codes or code prefixes (``SF6``, ``SF601``) or ``ALL``.

    ``select=None`` means the rules enabled by default. A prefix that matches no rule raises ValueError so that a
    typo in a CI configuration does not silently check nothing.
    """

    def matching(prefixes: list[str]) -> set[str]:
        chosen: set[str] = set()
        for prefix in prefixes:
            prefix = prefix.strip().upper()
            hits = set(RULES) if prefix == "ALL" else {code for code in RULES if code.startswith(prefix)}
            if not hits:
                raise ValueError(f"{prefix!r} matches no rule code")
            chosen |= hits
        return chosen

    codes = {rule.code for rule in enabled_rules()} if select is None else matching(select)
    codes -= matching(ignore or [])
    return tuple(RULES[code] for code in sorted(codes))
