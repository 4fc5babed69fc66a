r"""The parser's warnings (invalid escapes, numbers glued to keywords) never reach the user
from syncfree's own parses, and those parses leave the program's warning filters alone:
in other threads meanwhile, after two threads' static passes interleave, after a watch
(syncfree.parsing; the interrupts are in test_leaks.py)."""

from __future__ import annotations

import ast
import random
import textwrap
import threading
import warnings

import pytest

from standins import sync_now
from syncfree import parsing
from syncfree.analyze import analyze_source
from syncfree.parsing import parse_quietly, parser_may_warn

#: A cell the parser warns about: "\d" is an invalid escape (DeprecationWarning on 3.11,
#: SyntaxWarning from 3.12).
ESCAPE_CELL = "import re\npattern = re.compile('\\d+')\nx.item()\n"

PARSER_WARNINGS = (SyntaxWarning, DeprecationWarning)


def _parser_warnings(seen) -> list[str]:
    return [str(w.message) for w in seen
            if issubclass(w.category, PARSER_WARNINGS) and "invalid" in str(w.message)]


def _parse_warns(source: str) -> bool:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            ast.parse(source)
        except (SyntaxError, ValueError):
            pass  # a warning before the error still counts
    return bool(seen)


# ----------------------------------------------------------------------------- threads


def test_two_static_passes_interleaved_in_two_threads_leave_every_threads_filters_alone(monkeypatch):
    """A enters its parse, B enters its parse, A leaves, B leaves: with catch_warnings the
    filters were left as A's copy, ignoring DeprecationWarning and SyntaxWarning for good,
    and the program's warnings in between met the copies."""
    assert parser_may_warn(ESCAPE_CELL)  # the quiet path, not the untouched one
    real_parse = ast.parse
    a_in, b_in, checked, a_out = (threading.Event() for _ in range(4))
    order: list[str] = []

    def parse(source, *args, **kwargs):
        # Inside the static pass, between whatever it does to the filters before and after.
        if threading.current_thread().name == "pass-A":
            order.append("A in")
            a_in.set()
            assert b_in.wait(10) and checked.wait(10)
        else:
            order.append("B in")
            b_in.set()
            assert a_out.wait(10)
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    findings: dict[str, list] = {}
    errors: list[BaseException] = []

    def static_pass(name: str) -> None:
        try:
            if name == "B":
                assert a_in.wait(10)
            findings[name] = analyze_source(ESCAPE_CELL)
            order.append(f"{name} out")
        except BaseException as exc:  # noqa: B036 (reported below)
            errors.append(exc)
        finally:
            if name == "A":
                a_out.set()

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # the program's filters: everything shows
        programs_list, programs_entries = warnings.filters, list(warnings.filters)
        threads = [threading.Thread(target=static_pass, args=(n,), name=f"pass-{n}") for n in "AB"]
        for t in threads:
            t.start()
        assert b_in.wait(10)
        # Both passes are inside their parse: the program's own warnings still show here.
        warnings.warn("the program's, during the passes", DeprecationWarning)
        warnings.warn("the program's syntax warning", SyntaxWarning)
        checked.set()
        for t in threads:
            t.join(10)
        assert errors == []
        assert order == ["A in", "B in", "A out", "B out"]
        assert warnings.filters is programs_list
        assert warnings.filters == programs_entries
        warnings.warn("the program's, after the passes", DeprecationWarning)
    assert [f["rule"] for f in findings["A"]] == [f["rule"] for f in findings["B"]] != []
    assert [str(w.message) for w in seen] == ["the program's, during the passes",
                                              "the program's syntax warning",
                                              "the program's, after the passes"]


def test_a_quiet_parse_ignores_the_parsers_warnings_of_its_own_thread_only():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        tree = parse_quietly("x = '\\d' if y else 1if z else 2\n")
        assert warnings.filters == before
    assert isinstance(tree, ast.Module) and _parser_warnings(seen) == []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ast.parse("x = '\\d'\n")  # what it hides (the check above is not vacuous)
    assert len(_parser_warnings(seen)) == 1


def test_source_the_parser_cannot_warn_about_is_parsed_with_no_filter_entry(monkeypatch):
    made = []
    real = parsing._ThisParse
    monkeypatch.setattr(parsing, "_ThisParse", lambda: made.append(1) or real())
    parse_quietly("x = torch.randn(4, device='cuda:0')\ny = x.sum().item()\n")
    assert made == []
    parse_quietly(ESCAPE_CELL)
    assert made == [1]


# ----------------------------------------------------------------------------- the pre-check


@pytest.mark.parametrize("source", [
    "p = '\\d'", "p = b'\\N{DOLLAR SIGN}'", "p = b'\\u0041'", "p = '\\777'", "p = f'\\{x}'",
    "p = '''\n\\d'''", "p = '\\\\\\d'", "p = '\\é'", "x = 1if y else 2", "x = 0x1for y in z",
    "x = [0o7or 1]", "x = 1.5else", "x = 1e-5or 2", "x = 1jif y else 2", "x = y.5if z else 1",
    "x = 0b1and 1", "x = 1not in y", "x = 1is y", "x = 1in y",
])
def test_parser_may_warn_says_yes(source):
    assert parser_may_warn(source)


@pytest.mark.parametrize("source", [
    "x = torch.randn(4, 4, device='cuda')\ny = x.sum().item()\n",
    "conv2d_input = layer2if_enabled = float32 = 1\n",
    "s = 'a\\nb\\t\\'\\\"\\\\\\x41\\0\\12\\377\\a\\b\\f\\v\\r'\n",
    "x = 1 + \\\n    2\n", "x = 1 + \\\r\n    2\n", "n = 1e10 + 0x1f + 1_000 + 2j + 0o17 + 0b101\n",
    "s = 'layer.0.weight'\n", "p = '\\\\d'\n",
])
def test_parser_may_warn_says_no(source):
    assert not parser_may_warn(source)
    assert not _parse_warns(source)


def test_parser_may_warn_says_yes_for_every_source_the_running_parser_warns_about():
    """Random sources made of what the parser's warnings are about (escapes in every kind
    of literal, numbers in every base glued to every keyword): no source that makes this
    Python's parser warn is called warning-free."""
    body = ["\\", "\\\\", "a", "d", "N", "u", "U", "x", "x4", "4", "7", "0", "3", "8", "{", "}",
            "{x}", "{{", "\n", "\r", "é", " ", "'", '"', "\\N{DOLLAR SIGN}", "0041", "\\\n", "b",
            "f", "v", "z", "(", ":", "!r", "="]
    numbers = ["1", "0", "1.", ".5", "1e5", "1e-5", "0x1f", "0o7", "0b1", "1j", "1_0", "9"]
    after = ["if", "in", "is", "or", "and", "not", "else", "for", "", " ", "x", "e", "j", "a",
             "n", "o", "f", "i", "l", ".real", "_"]
    rng = random.Random(20261125)
    warned = missed = 0
    for _ in range(6000):
        if rng.random() < 0.6:
            prefix = rng.choice(["", "b", "r", "f", "rb", "u", "F", "B", "fr"])
            quote = rng.choice(["'", '"', "'''", '"""'])
            source = "x = " + prefix + quote + "".join(
                rng.choice(body) for _ in range(rng.randint(0, 8))) + quote
        else:
            source = "y = [" + "".join(rng.choice(numbers) + rng.choice(after) + rng.choice(
                [" ", "", " x ", "x", " 2"]) for _ in range(rng.randint(1, 3))) + "]"
        if _parse_warns(source):
            warned += 1
            missed += not parser_may_warn(source)
    assert warned > 500 and missed == 0


# ----------------------------------------------------------------------------- a watch


@pytest.mark.usefixtures("fake_cuda")
def test_a_watched_file_with_an_invalid_escape_shows_no_parser_warning(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import syncfree
    import syncfree.analyze

    path = tmp_path / "escapes.py"
    path.write_text(textwrap.dedent("""\
        import re

        DIGITS = re.compile('\\d+')


        def step(sync_now):
            sync_now()
        """), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its own compile warns, as Python always does
        code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    namespace: dict = {}
    exec(code, namespace)
    analysed = []
    real = syncfree.analyze.analyze_source
    monkeypatch.setattr(syncfree.analyze, "analyze_source",
                        lambda source, **kw: analysed.append(source) or real(source, **kw))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        before_list, before = warnings.filters, list(warnings.filters)
        with syncfree.watch("warn", measure_blocked=False) as w:
            namespace["step"](sync_now)
        assert warnings.filters is before_list and warnings.filters == before
    assert w.report.syncs == 1
    assert any("re.compile('\\d+')" in source for source in analysed)  # the static pass ran on it
    assert _parser_warnings(seen) == []


def test_an_entry_left_in_a_copy_made_during_a_parse_matches_nothing_after_it(monkeypatch):
    """Another thread's catch_warnings entered during the parse copies the list with the
    parse's entries in it; once the parse is over they hide nothing, not even in the
    thread that parsed."""
    real_parse = ast.parse
    parsing_now, copied, leave = threading.Event(), threading.Event(), threading.Event()

    def parse(source, *args, **kwargs):
        parsing_now.set()
        assert copied.wait(10)
        return real_parse(source, *args, **kwargs)

    def programs_block() -> None:
        assert parsing_now.wait(10)
        with warnings.catch_warnings():
            copied.set()
            assert leave.wait(10)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        programs_list = warnings.filters
        monkeypatch.setattr(ast, "parse", parse)
        other = threading.Thread(target=programs_block)
        other.start()
        try:
            parse_quietly(ESCAPE_CELL)
            monkeypatch.setattr(ast, "parse", real_parse)
            assert warnings.filters is not programs_list  # the other thread's copy
            assert any(isinstance(e[1], parsing._ThisParse) for e in warnings.filters)
            warnings.warn("the parsing thread's own, after", DeprecationWarning)
        finally:
            leave.set()
            other.join(10)
        assert warnings.filters is programs_list
        assert not any(isinstance(e[1], parsing._ThisParse) for e in warnings.filters)
    assert [str(w.message) for w in seen] == ["the parsing thread's own, after"]
