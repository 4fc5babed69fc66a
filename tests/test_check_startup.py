"""What a ``syncfree check`` pays before it checks anything (issue 40's warm-run figure: a run whose results all come
from the cache is mostly start-up): the configuration is parsed only where a syncfree table may be, and the cache's
key knows syncfree's sources by their stat, not by reading them."""

from __future__ import annotations

import os
import time

import pytest

from syncfree.cli.cache import tree_digest
from syncfree.config import Config, find_config, may_hold_syncfree_table


@pytest.mark.parametrize("text", [
    "[tool.syncfree]\nbudget = 3\n",
    "[ \"tool\" . 'syncfree' ]\nbudget = 3\n",
    "[tool.\"syncfree\"]\nbudget = 3\n",
    "tool.syncfree.budget = 3\n",
    "tool . syncfree = {budget = 3}\n",
    "[tool]\nsyncfree = {budget = 3}\n",
    "[tool]\n\"syncfree\".budget = 3\n",
    "[tool]\nruff = {}\n  syncfree . budget = 3\n",
    "tool = {syncfree = {budget = 3}}\n",
    "[\"tool\".\"\\u0073yncfree\"]\nbudget = 3\n",  # a quoted key spelled with an escape
])
def test_every_spelling_of_a_syncfree_table_is_read(tmp_path, text):
    assert may_hold_syncfree_table(text)
    (tmp_path / "pyproject.toml").write_text(text + "[project]\nname = \"demo\"\n")
    assert find_config(tmp_path).budget == 3


@pytest.mark.parametrize("text", [
    "[project]\nname = \"demo\"\ndependencies = [\"syncfree\"]\n",
    # syncfree's own pyproject.toml: its name, its command and its pytest plugin, no table of settings
    "[project]\nname = \"syncfree\"\n[project.scripts]\nsyncfree = \"syncfree.cli:main\"\n"
    "[project.entry-points.pytest11]\nsyncfree = \"syncfree.pytest_plugin\"\n[tool.ruff]\nline-length = 120\n",
])
def test_a_pyproject_without_a_syncfree_table_is_not_parsed(tmp_path, text, monkeypatch):
    # TOML's parser takes 5 ms to import and run, a tenth of a warm run: a file that cannot hold the table is left
    # unparsed, and TOML that is not valid there is another tool's to report.
    import tomllib

    def refused(text: str) -> dict:
        raise AssertionError("parsed a pyproject.toml that holds no syncfree table")

    monkeypatch.setattr(tomllib, "loads", refused)
    assert not may_hold_syncfree_table(text)
    (tmp_path / "pyproject.toml").write_text(text + "[tool.other]\nbroken = \n")
    assert find_config(tmp_path) == Config()


def test_syncfree_sources_are_known_by_their_stat_and_just_edited_ones_by_their_bytes(tmp_path):
    # Reading and hashing syncfree's 2 MB of sources was a tenth of a warm run: as Python's bytecode cache, the
    # cache's key trusts each file's size and modification time, except for a file modified within two seconds (an
    # edit within the clock's reach may leave its time as it was), whose bytes count too.
    package = tmp_path / "package"
    (package / "catalog").mkdir(parents=True)
    (package / "__pycache__").mkdir()
    rule = package / "catalog" / "rule.py"
    rule.write_text("A = 1\n")
    past = time.time_ns() - 3600 * 10**9
    os.utime(rule, ns=(past, past))
    first = tree_digest(str(package))
    (package / "__pycache__" / "rule.cpython-311.pyc").write_bytes(b"bytecode")  # not a source
    (package / "notes.md").write_text("not a source either")
    assert tree_digest(str(package)) == first
    os.utime(rule, ns=(past + 1000, past + 1000))
    assert tree_digest(str(package)) != first  # touched: another time
    (package / "data.json").write_text("{}")
    assert tree_digest(str(package)) != first
    now = time.time_ns() + 60 * 10**9  # "just edited" however long this process waits for a core before the digest
    rule.write_text("A = 2\n")
    os.utime(rule, ns=(now, now))
    just_edited = tree_digest(str(package))
    rule.write_text("A = 3\n")  # the same size and time
    os.utime(rule, ns=(now, now))
    assert tree_digest(str(package)) != just_edited


def test_the_listing_walks_as_os_walk_did(tmp_path):
    # The folder walk takes a regular file from its directory entry, without a stat each (half the listing's time,
    # which both a warm run and issue 40's parse floor pay); the files, their order and what is said stay os.walk's.
    from syncfree.cli.sources import expand_paths

    for folder in ("a/b", "a-b", "__pycache__", "venv"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("a/b.py", "a-b/c.py", "a/b/..py", "a/z.ipynb", ".py", "x.PY", "__pycache__/c.py", "venv/v.py"):
        (tmp_path / name).write_text("x = 1\n")
    os.symlink("a", tmp_path / "linked")  # a linked folder: listed by os.walk, not entered
    os.symlink("a/b.py", tmp_path / "link.py")  # a link to a file: checked
    os.symlink("nowhere.py", tmp_path / "dangling.py")  # skipped
    os.symlink("loop.py", tmp_path / "loop.py")  # said
    said: list[str] = []
    found = [str(path.relative_to(tmp_path)) for path in expand_paths([str(tmp_path)], on_error=lambda p: said.append(str(p)))]
    # sorted part by part, as paths sort: a/... before a-b/... (as strings, "-" sorts before "/")
    assert found == ["a/b/..py", "a/b.py", "a/z.ipynb", "a-b/c.py", "link.py"]
    assert len(said) == 1 and "loop.py" in said[0]
    assert [p.name for p in expand_paths([str(tmp_path)], exclude=["a"])] == ["c.py", "link.py"]


def test_diagnostics_read_back_from_the_cache_equal_the_analysed_ones(tmp_path):
    # Read back by setting their fields (a frozen dataclass's __init__ was a twentieth of a warm run): equal, hashed
    # and shown alike, a fix's edits as tuples, a row not as written still refused.
    from syncfree.cli.cache import ResultCache, _diagnostic, _row
    from syncfree.cli.check import check_file

    path = tmp_path / "a.py"
    path.write_text("import torch\n\ndef f(x: torch.Tensor):\n    y = torch.tensor([1.0, 2.0], device='cuda')\n"
                    "    return x.sum().item() + y\n")
    analysed = check_file(path).diagnostics
    assert {d.rule for d in analysed} == {"SF101", "SF401"} and any(d.fix_edits for d in analysed)
    cache = ResultCache(tmp_path / "cache", ["<default>"], False)
    cache.put(str(path), "digest", analysed, 0)
    cache.save()
    read = ResultCache(tmp_path / "cache", ["<default>"], False).get(str(path), "digest")
    assert read is not None and read[0] == analysed
    assert [hash(d) for d in read[0]] == [hash(d) for d in analysed] and [repr(d) for d in read[0]] == [repr(d) for d in analysed]
    row = _row(analysed[0])
    for index, wrong in ((0, None), (1, "1"), (6, 3)):
        broken = list(row)
        broken[index] = wrong
        with pytest.raises(ValueError):
            _diagnostic(broken)


def test_the_analysis_is_prepared_once_before_the_pool_forks():
    # Each worker of check's pool made the rule choice's tables and the walk's function of each node type on its
    # first files (10 to 20 ms a worker); prepare() makes them in the parent, whose fork the workers start from.
    import syncfree.analyze as analyze
    from syncfree.catalog.scope import _WALKERS

    select, ignore = ["SF104", "SF202", "SF604"], ["SF604"]  # a choice no other test makes
    key = (tuple(select), tuple(ignore))
    assert key not in analyze._CHOSEN
    analyze.prepare(select, ignore)
    types, _, calls, operators = analyze._dispatch(analyze._CHOSEN[key], True)[2:]
    assert len(_WALKERS[types, calls, operators]) >= 40  # the node types of most code
    found = {finding["rule"] for finding in analyze.analyze_source(analyze._PREPARE_SOURCE, possible=True)}
    assert {"SF101", "SF103", "SF301", "SF501"} <= found  # the rules' own paths are taken too


def test_a_run_wholly_from_the_cache_makes_no_dataclass_and_imports_no_parser_or_launcher(tmp_path):
    # A warm run is mostly start-up: dataclasses (with inspect, dis and tokenize, 4 ms) and the making of each
    # dataclass (0.5 to 2 ms a class), the parser's ast, the launcher and its signal were a sixth of what it took
    # beyond the interpreter's own start. Only what a bare interpreter had not imported already counts.
    import subprocess
    import sys

    (tmp_path / "a.py").write_text("import torch\n\ndef f(x: torch.Tensor):\n    return x.sum().item()\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\n\n[tool.syncfree]\nbudget = 3\n')
    for name in ("a.py", "pyproject.toml"):  # edited an hour ago: the cache trusts them at once (no racy re-stamp)
        os.utime(tmp_path / name, (time.time() - 3600, time.time() - 3600))
    watched = ("dataclasses", "inspect", "dis", "ast", "tokenize", "signal", "tempfile", "shutil", "random",
               "syncfree.cli.launch", "syncfree.cli.job")
    program = ("import sys\nbefore = set(sys.modules)\nfrom syncfree.cli import main\n"
               "status = main(['check', sys.argv[1], '--cache-dir', sys.argv[2], '-o', sys.argv[3]])\n"
               f"print(status, sorted(set(sys.modules) - before & set({watched!r})))\n")
    command = [sys.executable, "-c", program, str(tmp_path), str(tmp_path / "cache"), str(tmp_path / "report.txt")]
    import syncfree

    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(syncfree.__file__))}  # this syncfree
    cold = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    assert cold.stdout.startswith("0 ") and "'ast'" in cold.stdout, cold.stderr  # one finding, within the budget
    # Writing the cache takes no tempfile (with shutil and random, 4 ms), and argparse's formatter no shutil.
    assert "'tempfile'" not in cold.stdout and "'shutil'" not in cold.stdout, cold.stdout
    cache_files = [path for path in (tmp_path / "cache").rglob("*") if path.is_file() and path.suffix == ".json"]
    assert cache_files and all(path.stat().st_mode & 0o777 == 0o600 for path in cache_files)  # as mkstemp made it
    assert not list((tmp_path / "cache").rglob(".tmp-*"))
    report = (tmp_path / "report.txt").read_text()
    assert "SF101" in report
    warm = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    assert warm.stdout == "0 []\n", warm.stderr
    assert (tmp_path / "report.txt").read_text() == report


def test_a_cold_run_makes_no_dataclass_and_parses_no_rule_docstring(tmp_path):
    # A cold run's fixed cost, paid by every process: the catalog's and scope's records were dataclasses (dataclasses
    # imports inspect, dis and copy: 4 ms; making the seven classes 3 ms more), and each rule parsed its docstring's
    # texts at import (5 ms), which a check never shows.
    import subprocess
    import sys

    (tmp_path / "a.py").write_text("import torch\n\ndef f(x: torch.Tensor):\n    return x.sum().item()\n")
    watched = ("dataclasses", "inspect", "dis", "pkgutil", "copy")
    program = ("import sys\nbefore = set(sys.modules)\nfrom syncfree.cli import main\n"
               "status = main(['check', sys.argv[1], '--no-cache', '-o', sys.argv[2]])\n"
               "from syncfree.catalog import RULES\n"
               "parsed = [code for code, rule in RULES.items() if '_doc' not in rule.__dict__]\n"
               f"print(status, sorted(set(sys.modules) - before & set({watched!r})), parsed)\n")
    command = [sys.executable, "-c", program, str(tmp_path / "a.py"), str(tmp_path / "report.txt")]
    import syncfree

    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(syncfree.__file__))}  # this syncfree
    cold = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    assert cold.stdout == "1 [] []\n", cold.stderr
    assert "SF101" in (tmp_path / "report.txt").read_text()


def test_catalog_records_behave_as_the_frozen_dataclasses_they_replace():
    import pickle

    from syncfree.catalog import Edit, Fix, Match
    from syncfree.catalog.scope import Bindings

    edit = Edit((1, 2), (1, 5), "x")
    assert edit == Edit((1, 2), (1, 5), "x") != Edit((1, 2), (1, 5), "y") and hash(edit) == hash(Edit((1, 2), (1, 5), "x"))
    assert repr(edit) == "Edit(start=(1, 2), end=(1, 5), text='x')" and pickle.loads(pickle.dumps(edit)) == edit
    fix = Fix("t", "safe", (edit,))
    assert fix == Fix("t", "safe", (edit,), None) != Fix("t", "review", (edit,), "r") and fix.reason is None
    assert {fix: 1}[Fix("t", "safe", (edit,))] == 1
    match = Match(None, "m", "likely")  # type: ignore[arg-type]
    assert match.parts == {} and match.end_node is None and match != Match(None, "m", "likely")  # type: ignore[arg-type]
    assert Match(None, "m", "likely").parts is not match.parts  # type: ignore[arg-type]
    for record in (edit, fix, match):
        with pytest.raises(AttributeError):
            record.text = "z"  # type: ignore[union-attr]
    assert Bindings() == Bindings({}, {}, set(), "cpu") != Bindings(default_device=None)
    assert Bindings().names is not Bindings().names
    match = Match(1, "m", "likely", 2, {"a": 3})  # type: ignore[arg-type]
    again = pickle.loads(pickle.dumps(match))
    assert (again.node, again.message, again.certainty, again.end_node, again.parts) == (1, "m", "likely", 2, {"a": 3})
    assert pickle.loads(pickle.dumps(fix)) == fix


def test_records_behave_as_the_frozen_dataclasses_they_replace():
    # Diagnostic, FileResult, FixMode, SourceCell and Config (syncfree.records): equal by value and class, hashed by
    # value, shown with their fields, not assignable, and a worker's result goes through pickle whole.
    import pickle

    from syncfree.cli.check import FileResult, FixMode
    from syncfree.cli.sources import SourceCell
    from syncfree.distributed.emit import RankedDiagnostic
    from syncfree.output import Diagnostic

    d = Diagnostic("a.py", 1, 2, 1, 5, "SF101", "m", certainty="likely", fix_edits=((1, 2, 1, 5, "x"),))
    assert d == Diagnostic("a.py", 1, 2, 1, 5, "SF101", "m", None, None, "likely", fix_edits=((1, 2, 1, 5, "x"),))
    assert d != Diagnostic("a.py", 1, 2, 1, 5, "SF101", "m") and hash(d) == hash(pickle.loads(pickle.dumps(d)))
    assert repr(d).startswith("Diagnostic(path='a.py', line=1, col=2, end_line=1, end_col=5, rule='SF101', ")
    assert d.cell is None and d.count is None and d.fix_edits == ((1, 2, 1, 5, "x"),)
    with pytest.raises(AttributeError):
        d.line = 3  # type: ignore[misc]
    ranked = RankedDiagnostic("a.py", 1, 2, 1, 5, "SF101", "m", ranks=({"rank": 0},), divergent=True)
    assert ranked.ranks == ({"rank": 0},) and ranked.divergent and ranked != Diagnostic("a.py", 1, 2, 1, 5, "SF101", "m")
    assert RankedDiagnostic._fields[-2:] == ("ranks", "divergent") and RankedDiagnostic("p", 1, 1, 1, 1, "r", "m").ranks == ()
    result = FileResult([d], 1, fixed=2)
    assert pickle.loads(pickle.dumps(result)) == result and result.problem is None and result.diffs == ()
    assert FixMode("diff") == FixMode("diff", False) != FixMode("diff", True)
    cell = SourceCell("n.ipynb", 3, "x = 1\n")
    assert cell.cell_id is None and cell.location(2, 0) == "n.ipynb:cell 3:line 2:col 1" and {cell: 1}[SourceCell("n.ipynb", 3, "x = 1\n")]
    assert Config() == Config(None, None, None, None, None, [], None) and Config().exclude == [] and Config().exclude is not Config().exclude


def test_the_help_formatter_takes_the_width_shutil_gives(monkeypatch):
    # argparse's formatter asks shutil for the terminal's width (importing shutil, bz2 and lzma in every check);
    # syncfree's reads it the same way without them.
    import argparse
    import shutil

    from syncfree.cli import _HelpFormatter, _parser

    for columns in ("100", "37", "0", "x", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        expected = argparse.HelpFormatter("syncfree")
        assert _HelpFormatter("syncfree")._width == expected._width == shutil.get_terminal_size().columns - 2
    monkeypatch.setenv("COLUMNS", "90")
    parser, check_parser = _parser(every_command=False)
    assert check_parser.formatter_class is _HelpFormatter and parser.formatter_class is _HelpFormatter
    assert max(len(line) for line in check_parser.format_help().splitlines()) <= 88


def test_a_run_wholly_from_the_cache_imports_no_typing_nor_pathlib(tmp_path):
    # typing's import was 2 ms of a warm run: the modules a warm run imports name typing's names in annotations only
    # (a pyproject.toml with a syncfree table brings it back: tomllib imports it).
    import subprocess
    import sys

    import syncfree

    (tmp_path / "a.py").write_text("import torch\n\ndef f(x: torch.Tensor):\n    return x.sum().item()\n")
    os.utime(tmp_path / "a.py", (time.time() - 3600, time.time() - 3600))
    program = ("import sys\nbefore = set(sys.modules)\nfrom syncfree.cli import main\n"
               "status = main(['check', sys.argv[1], '--cache-dir', sys.argv[2], '-o', sys.argv[3]])\n"
               "print(status, 'typing' in set(sys.modules) - before, 'pathlib' in set(sys.modules) - before,\n"
               "      sorted(set(sys.modules) - before & {'argparse', 're', 'enum', 'json', 'gettext', 'locale'}))\n")
    command = [sys.executable, "-c", program, str(tmp_path), str(tmp_path / "cache"), str(tmp_path / "report.txt")]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(syncfree.__file__))}  # this syncfree
    cold = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    assert cold.stdout.startswith("1 True "), cold.stderr  # the analysis needs it
    warm = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    # nor pathlib (with urllib.parse, ipaddress and fnmatch, 3-4 ms): the listing, the cache and the config on names;
    # nor argparse, json and re (with enum, gettext and locale, 8 ms): a plain command line is read without argparse
    # (cli._plain_check), the cache and a json report through json's C code (syncfree.jsontext)
    assert warm.stdout == "1 False False []\n", warm.stderr


def test_the_tool_key_scan_says_what_the_patterns_say():
    # config._tool_key answers for the patterns without importing re (with enum, a tenth of a warm check where the
    # project's pyproject.toml names syncfree, as this repository's does): the same answer on texts made of the
    # pieces the patterns look at, None only where a `[tool]` table leaves it to them.
    import random
    import re

    from syncfree import config

    def patterns(text: str) -> bool:
        return bool(re.search(config._TOOL_SYNCFREE, text) or re.search(config._TOOL_INLINE, text)
                    or (re.search(config._TOOL_TABLE, text) and re.search(config._SYNCFREE_KEY, text)))

    pieces = ["tool", "syncfree", ".", "=", "{", "]", "[", '"', "'", " ", "\t", "\n", "x", "tools", "hatch"]
    rng = random.Random(40)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        known = config._tool_key(text)
        assert known is None or known == patterns(text), text
        if "syncfree" in text:
            assert may_hold_syncfree_table(text) == patterns(text), text
    repository = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    with open(repository, encoding="utf-8") as stream:
        assert config._tool_key(stream.read()) is False  # it names syncfree, and holds no syncfree table


_CHECK_LINES = [
    ["check", "a.py"],
    ["check", "a.py", "b", "-"],
    ["check", "--format", "json", "--exit-zero", "src", "tests"],
    ["check", "src", "--format=sarif", "-o", "out.sarif", "--no-cache"],
    ["check", "--select", "SF1,SF601", "--ignore=SF103", "x.py", "--budget", "3"],
    ["check", "--select", "ALL", "--select", "SF1", "x.py"],
    ["check", "--fix", "--unsafe-fixes", "--statistics", "--possible", "x.py"],
    ["check", "--diff", "--exclude", "a,b/*.py", "--extend-exclude", " c ,", "--cache-dir", "cache", "."],
    ["check", "--output-file", "r.txt", "-o", "s.txt", "x.py"],
    # argparse's own cases, its answers or errors: left to argparse
    ["check", "x.py", "--fix", "y.py"],
    ["check", "--format", "yaml", "x.py"],
    ["check", "--format", "yaml", "--format", "json", "x.py"],
    ["check", "--budget", "-1", "x.py"],
    ["check", "--budget", "x", "x.py"],
    ["check", "--select", "SF999", "x.py"],
    ["check", "--exit", "x.py"],
    ["check", "--fix=1", "x.py"],
    ["check", "-ofile", "x.py"],
    ["check", "-o=file", "x.py"],
    ["check", "--cache-dir", "-x", "x.py"],
    ["check", "--cache-dir=-x", "x.py"],
    ["check", "--cache-dir", "", "x.py"],
    ["check", "--", "-x.py"],
    ["check", "-1"],
    ["check"],
    ["check", "--format"],
    ["check", "-h"],
    ["check", "x.py", "--version"],
]


@pytest.mark.parametrize("argv", _CHECK_LINES)
def test_a_plain_check_command_line_reads_as_argparse_reads_it(argv, capsys):
    # syncfree.cli._plain_check reads a plain `syncfree check` command line without argparse (its import, with re,
    # enum, gettext and locale, and the making of the parser were a third of a warm check): the same namespace as
    # argparse's, or None, and then argparse reads it as before.
    from syncfree import cli

    parser, _ = cli._parser(every_command=False)
    try:
        expected = vars(parser.parse_args(argv))
    except SystemExit:
        expected = None
    capsys.readouterr()
    plain = cli._plain_check(argv)
    assert (plain is not None) == (_CHECK_LINES.index(argv) < 9)  # the others: argparse's (an abbreviation, `--`...)
    if plain is not None:
        assert vars(plain) == expected


def test_the_plain_check_options_are_the_parsers():
    # Each option of argparse's check parser (help aside) is in _plain_check's table, with its dest, whether it takes
    # a value, the type its value goes through, and its default; and nothing else is.
    from syncfree import cli

    _, check_parser = cli._parser(every_command=False)
    seen = set()
    for action in check_parser._actions:
        if action.dest in ("help", "paths"):
            continue
        for option in action.option_strings:
            dest, kind = cli._CHECK_OPTIONS[option]
            seen.add(option)
            assert dest == action.dest
            if action.nargs == 0:
                assert kind is None and action.const is True
            else:
                assert action.nargs is None and kind is not None
                assert (cli._CHECK_TYPES[kind] if kind != "str" else None) is action.type
                assert (action.choices is not None) == (dest == "format")
        assert cli._CHECK_DEFAULTS[action.dest] == action.default
    assert seen == set(cli._CHECK_OPTIONS)
    assert set(cli._CHECK_DEFAULTS) == {action.dest for action in check_parser._actions} - {"help", "paths"}


@pytest.mark.parametrize("value", [
    [], {}, "", "a\"b\\\u00e9\U0001f600", [1, -2, 3.5, 1e300, True, False, None, "x"], {"a": [1, {"b": None}], "é": ()},
    {"entries": {"/p.py": ["abc", 0, [["p", 1, 2, 3, 4, "SF101", "m", None, None, "likely"]], 1_700_000_000, [1, 2, 3]]}},
    [float("nan"), float("inf"), -float("inf")], {1: 2, None: 3, 2.5: "x"},
])
def test_jsontext_writes_and_reads_as_json_does(value):
    import json

    from syncfree import jsontext

    for separators in (None, (",", ":")):
        assert jsontext.dumps(value, separators) == json.dumps(value, separators=separators)
    text = json.dumps(value)
    for data in (text.encode(), f" \n{text}\t\r\n".encode(), ("\ufeff" + text).encode(), text.encode("utf-16")):
        assert repr(jsontext.loads(data)) == repr(json.loads(data))


@pytest.mark.parametrize("data", [b"", b" ", b"{", b"[1] 2", b"{\"a\": 1,}", b"\xff", b"nul", b"[" * 100_000])
def test_jsontext_refuses_what_json_refuses(data):
    import json

    from syncfree import jsontext

    with pytest.raises(Exception) as expected:
        json.loads(data)
    with pytest.raises(expected.type):
        jsontext.loads(data)
    with pytest.raises(TypeError):
        jsontext.dumps({"a": object()})


def test_clean_text_without_control_characters_is_the_text():
    # output.clean_text returns a text with no control character as it is, without compiling its patterns (re's
    # import, with enum, in a warm check's text report): the patterns' answer on every such text and on the others.
    import random
    import re

    from syncfree import output

    escape, control = re.compile(output._ESCAPE), re.compile(output._CONTROL)
    characters = [chr(code) for code in range(0xB0)] + ["\u2028", "é", "\U0001f600", "\x1b[31m", "\x1b]0;t\x07", "\x1b\\"]
    rng = random.Random(40)
    for _ in range(20_000):
        text = "".join(rng.choice(characters) for _ in range(rng.randint(0, 8)))
        assert output.clean_text(text) == control.sub("", escape.sub("", text)), repr(text)


def test_the_tree_digest_is_os_walks(tmp_path):
    # cache.tree_digest lists the folders with os.scandir and updates its digest once: the digest os.walk's listing
    # made, a file at a time (each folder's files sorted, then its folders; __pycache__ and other suffixes left out).
    from _blake2 import blake2b

    from syncfree.cli.cache import _CODE_SUFFIXES, _RACY_NS

    def walked(package: str) -> str:
        digest = blake2b(digest_size=16)
        racy = time.time_ns() - _RACY_NS
        for folder, folders, files in os.walk(package):
            folders[:] = sorted(name for name in folders if name != "__pycache__")
            relative = os.path.relpath(folder, package)
            for name in sorted(files):
                if name.endswith(_CODE_SUFFIXES):
                    stat = os.stat(os.path.join(folder, name))
                    digest.update(f"{os.path.join(relative, name)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
                    if stat.st_mtime_ns > racy:
                        with open(os.path.join(folder, name), "rb") as stream:
                            digest.update(stream.read() + b"\0")
        return digest.hexdigest()

    for name in ("a.py", "b.json", "c.bin", "Z.txt", "__pycache__/a.pyc", "__pycache__/x.py", "sub/d.py", "sub/e/f.toml",
                 "sub/e/g.py", "sub2/h.py", "sub.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    old = time.time() - 3600
    os.utime(tmp_path / "sub" / "d.py", (old, old))  # one file not racy: only its stat counts
    assert tree_digest(str(tmp_path)) == walked(str(tmp_path))
    import syncfree

    package = os.path.dirname(syncfree.__file__)
    assert tree_digest(package) == walked(package)
