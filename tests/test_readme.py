"""The READMEs and docs/ say what the code does: every command they show runs as shown.

README.md's first screen (and the package READMEs that PyPI will show) give one command per kind of user; each
``syncfree ...`` command in a fenced block goes through the real ``syncfree.cli.main`` (parsing, the usage checks,
``[tool.syncfree]``) with only the final step (checking, running the program, merging) replaced by a stub, so a
command that would exit 2 (an unknown option, ``-o`` naming a notebook, syncfree's options given after the script,
where they become the program's) fails here. ``pytest ...`` commands name options the pytest plugin registers.
Every ``--option`` written in README.md or a package README belongs to syncfree (a subcommand, the magic or the
pytest plugin), and the docs' option tables agree with the ``--help`` texts. The rule count said anywhere is the
catalog's, and docs/catalog.md's table is what scripts/gen_catalog_table.py generates.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

import syncfree.cli as cli
from syncfree.capture import engines
from syncfree.catalog import RULES

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PACKAGE_READMES = [ROOT / "python_helper" / "README.md", ROOT / "jupyterlab-syncfree" / "README.md"]
DOCS = sorted((ROOT / "docs").glob("*.md"))
ALL_PAGES = [README, *PACKAGE_READMES, *DOCS]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _command_lines(page: Path) -> list[str]:
    """The shell command lines of a page's fenced blocks (console blocks: the lines after a `$ ` prompt)."""
    lines = []
    for lang, body in FENCE.findall(page.read_text()):
        if lang in ("bash", "sh", "shell", ""):
            lines += [line.strip() for line in body.splitlines()]
        elif lang == "console":
            lines += [line[2:].strip() for line in body.splitlines() if line.startswith("$ ")]
    return [line for line in lines if line and not line.startswith("#")]


def _argv(line: str) -> list[str]:
    """A command line as the shell splits it, without its comment and what follows a redirection or a pipe."""
    tokens = _split(line)
    for i, token in enumerate(tokens):
        if token in (">", ">>", "|", "&&", ";", "2>&1"):
            return tokens[:i]
    return tokens


def _commands(page: Path, program: str) -> list[list[str]]:
    """The page's `program ...` commands: in fenced blocks, and in a README also those written inline (docs/ pages
    name fragments inline: `syncfree check --possible`)."""
    inline = [text for text in _inline_code(page) if re.match(rf"{program} (check|run|merge) ", text)
              and page in (README, *PACKAGE_READMES)]
    return [argv for argv in map(_argv, _command_lines(page) + inline) if argv[:1] == [program]]


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose
        return text.split()


def _inline_code(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return re.findall(r"`([^`\n]+)`", text)


class _Stubs:
    """What main() would have done at the end: recorded, not done."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        for name in ("check", "run", "run_python", "merge", "_run_distributed"):
            monkeypatch.setattr(cli, name, self._stub(name))

    def _stub(self, name: str):
        def stub(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return 0
        return stub


def _run_options() -> set[str]:
    _, run_parser = cli._parser()
    return {option for action in run_parser._actions for option in action.option_strings}


def _syncfree_options() -> set[str]:
    parser, _ = cli._parser()
    options = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        for sub in (getattr(action, "choices", None) or {}).values():
            if hasattr(sub, "_actions"):
                options |= {option for a in sub._actions for option in a.option_strings}
    return options


def _magic_options() -> set[str]:
    from syncfree.magic import SyncfreeMagics

    parser = SyncfreeMagics.syncfree.parser
    return {option for action in parser._actions for option in action.option_strings}


def _pytest_knows(config: pytest.Config, option: str) -> bool:
    try:
        config.getoption(option)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ commands run as shown

@pytest.mark.parametrize("page", [README, *PACKAGE_READMES, *DOCS], ids=_name)
def test_syncfree_commands_run_as_shown(page, monkeypatch, tmp_path, capsys):
    """Each fenced `syncfree ...` command gets past main()'s parsing and usage checks to the step it asks for."""
    commands = _commands(page, "syncfree")
    if page in (README, *PACKAGE_READMES):
        assert commands, f"{_name(page)} shows no syncfree command"
    run_options = _run_options()
    monkeypatch.chdir(tmp_path)  # no [tool.syncfree] of this repository, and -o files land here
    for argv in commands:
        stubs = _Stubs(monkeypatch)
        try:
            status = cli.main(argv[1:])
        except SystemExit as exit_:  # argparse: an unknown option, a missing value
            status = exit_.code
        shown = " ".join(argv)
        assert status == 0, f"{_name(page)}: `{shown}` exits {status}: {capsys.readouterr().err.strip()}"
        if "--version" in argv or "--help" in argv or "-h" in argv:
            continue
        assert len(stubs.calls) == 1, f"{_name(page)}: `{shown}` did not reach a command"
        name, args, _ = stubs.calls[0]
        if name == "run_python":
            # After the script everything is the program's: a syncfree option there is the program's too.
            mistaken = [token for token in args[1] if token.split("=")[0] in run_options]
            assert not mistaken, (f"{_name(page)}: `{shown}` passes {mistaken} to the program, not to syncfree: "
                                  "syncfree's options go before the script")


def test_readme_check_example_runs(monkeypatch, tmp_path, capsys):
    """`syncfree check examples/` runs for real (static, no torch: a fraction of a second) and finds what the README
    shows it finding: the same locations and rules, exit 1."""
    readme = README.read_text()
    shown = readme[readme.index("syncfree check examples/"):]
    shown = shown[shown.index("```text\n") + 8:]
    shown = shown[:shown.index("```")].splitlines()
    locations = [" ".join(line.split(" ", 2)[:2]) for line in shown if line.startswith("examples/")]
    assert locations, "README.md shows no finding of syncfree check examples/"
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("SYNCFREE_CACHE_DIR", str(tmp_path))
    status = cli.main(["check", "examples/"])
    out = capsys.readouterr().out
    assert status == 1, out
    for location in locations:
        assert location in out, f"README.md shows `{location}`, which syncfree check examples/ no longer finds:\n{out}"
    assert any(line.startswith("Found ") for line in shown) and "\nFound " in out, out


def test_readme_first_screen_uses_files_of_this_repository():
    """The README's commands run from a clone: the scripts, notebooks and folders they name are here."""
    parser, _ = cli._parser()
    flags = {"--syncfree", "--syncfree-cuda"} | {
        option for action in parser._actions for sub in (getattr(action, "choices", None) or {}).values()
        if hasattr(sub, "_actions") for a in sub._actions if a.nargs == 0 for option in a.option_strings}
    inputs = []
    for program in ("syncfree", "pytest"):
        for argv in _commands(README, program):
            for previous, token in zip(argv, argv[1:]):
                value = previous.startswith("-") and previous not in flags  # an option's value: an output, a number
                if not token.startswith("-") and not value and ("/" in token or token.endswith((".py", ".ipynb"))):
                    inputs.append(token)
    assert inputs, "README.md names no file of the repository"
    missing = [token for token in inputs if not (ROOT / token).exists()]
    assert not missing, f"README.md names files this repository does not have: {missing}"


@pytest.mark.parametrize("page", [README, *PACKAGE_READMES, *DOCS], ids=_name)
def test_pytest_commands_name_registered_options(page, pytestconfig):
    for argv in _commands(page, "pytest"):
        unknown = [token.split("=")[0] for token in argv[1:] if token.startswith("--")
                   and not _pytest_knows(pytestconfig, token.split("=")[0])]
        assert not unknown, f"{_name(page)}: `{' '.join(argv)}`: pytest has no option {unknown}"


@pytest.mark.parametrize("page", [README, *PACKAGE_READMES], ids=_name)
def test_every_option_named_exists(page, pytestconfig):
    """An `--option` in a README's text or commands is one of syncfree's (a subcommand, the magic, the pytest
    plugin); the arguments of an example program after `syncfree run SCRIPT` are the program's own."""
    known = _syncfree_options() | _magic_options()
    texts = _inline_code(page) + _command_lines(page)
    unknown = set()
    for text in texts:
        if text.startswith("syncfree run "):
            options, _program = cli._split_run(_argv(text)[2:], cli._parser()[1])
            text = " ".join(options)
        for option in OPTION.findall(text):
            if option not in known and not _pytest_knows(pytestconfig, option):
                unknown.add(option)
    assert not unknown, f"{_name(page)} names options that do not exist: {sorted(unknown)}"


def test_docs_option_tables_agree_with_help():
    """The options tables of docs/cli.md (syncfree run) and docs/notebook.md (%%syncfree) name real options."""
    for page, known in ((ROOT / "docs" / "cli.md", _syncfree_options()), (ROOT / "docs" / "notebook.md", _magic_options())):
        rows = [line for line in page.read_text().splitlines() if line.startswith("| `")]
        assert rows, f"{_name(page)} has no options table"
        named = {option for row in rows for option in OPTION.findall(row.split(" | ")[0])}
        assert named and not named - known, f"{_name(page)}: {sorted(named - known)} are not options"


def test_every_option_in_help_is_documented():
    """The other way round: each option `syncfree check|run|merge --help` and `%%syncfree?` list is named in README.md
    or docs/ (torchrun's own options, passed through "as torchrun's", are documented as a group)."""
    text = "".join(page.read_text() for page in [README, *DOCS])
    parser, _ = cli._parser()
    subparsers = {name: sub for action in parser._actions
                  for name, sub in (getattr(action, "choices", None) or {}).items() if hasattr(sub, "_actions")}
    from syncfree.magic import SyncfreeMagics

    subparsers["%%syncfree"] = SyncfreeMagics.syncfree.parser
    missing = []
    for name, sub in subparsers.items():
        torchrun = {a for group in sub._action_groups if group.title and "torchrun" in group.title
                    for a in group._group_actions if "--nproc-per-node" not in a.option_strings}
        for action in sub._actions:
            if action in torchrun or "--help" in action.option_strings:
                continue
            long = [option for option in action.option_strings if option.startswith("--")]
            if long and not any(option in text for option in long):
                missing.append(f"{name} {long[0]}")
    assert not missing, f"options no page documents: {missing}"


# ------------------------------------------------------------------ one truth each

def test_engine_auto_is_described_as_it_chooses():
    """`auto` takes CUPTI for CuPy, Numba's CUDA target and PyCUDA (engines.BYPASSING_MODULES), not for Triton:
    run --help, the magic's help and docs/install.md say so."""
    assert engines.BYPASSING_MODULES == ("cupy", "numba.cuda", "pycuda"), "update the texts checked below"
    _, run_parser = cli._parser()
    from syncfree.magic import SyncfreeMagics

    def engine_help(parser) -> str:
        return next(action.help for action in parser._actions if "--engine" in action.option_strings)

    install = (ROOT / "docs" / "install.md").read_text()
    for where, text in (("syncfree run --help", engine_help(run_parser)),
                        ("%%syncfree?", engine_help(SyncfreeMagics.syncfree.parser)),
                        ("docs/install.md", install[install.index("- **auto**"):].split("\n- ", 1)[0])):
        text = " ".join(text.split())
        auto = text[text.index("auto"):]
        when = auto.split(";", 1)[0]  # "auto (default: CUPTI when ... is imported ..."
        for library in ("CuPy", "Numba", "PyCUDA"):
            assert library in when, f"{where} does not say that {library} makes auto pick CUPTI: {auto}"
        assert "Triton" not in when and re.search(r"Triton (alone )?does not count", auto), (
            f"{where} does not say that Triton leaves auto on debug mode: {auto}")


def test_rule_counts_are_the_catalogs():
    """Every "N rules" in the READMEs and docs is the number of rules in python_helper/syncfree/catalog."""
    seen = {}
    for page in ALL_PAGES:
        for count in re.findall(r"\b(\d+)\s+rules\b", page.read_text()):
            seen.setdefault(_name(page), set()).add(int(count))
    assert "python_helper/README.md" in seen, "the PyPI README no longer says how many rules: drop this page here"
    wrong = {name: counts for name, counts in seen.items() if counts != {len(RULES)}}
    assert not wrong, f"the catalog has {len(RULES)} rules; pages say {wrong}"


def test_catalog_page_is_generated_from_the_catalog():
    spec = importlib.util.spec_from_file_location("gen_catalog_table", ROOT / "scripts" / "gen_catalog_table.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.CATALOG_PAGE == ROOT / "docs" / "catalog.md"
    page = generator.CATALOG_PAGE.read_text()
    assert generator.with_table(page, generator.catalog_table()) == page, (
        "docs/catalog.md's table is stale: make catalog-table")


def test_readme_links_resolve():
    """README.md and docs/ link to pages and anchors that exist."""
    def anchors(page: Path) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
        return {re.sub(r"[^\w\- ]", "", head.lower()).replace(" ", "-") for head in heads}

    broken = []
    for page in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", page.read_text())):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{_name(page)} -> {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{_name(page)} -> {target} (no such heading)")
    assert not broken, broken


def test_readme_is_short():
    """The README is a first screen and a map; reference material lives in docs/."""
    assert len(README.read_text().splitlines()) <= 250
