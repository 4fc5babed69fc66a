"""The whole kernel-side package, python_helper/syncfree, imports one way: no import circle anywhere in it (issue 41).
tests/test_capture_layout.py keeps capture/ and distributed/ apart and tests/test_core_layout.py the core's layers;
this one covers every module, the package roots (``syncfree``, ``syncfree.catalog``, ...) included. Imports inside
functions and under ``if TYPE_CHECKING`` count, as there: a lazy import that closes a loop is a loop (output.py and
report.py imported each other that way). And session.py, split by job into engine_choice.py, watches.py and
script_run.py, does not come back."""

from __future__ import annotations

from pathlib import Path

from test_capture_layout import PACKAGE, circles, import_graph


def package_problems(root: Path = PACKAGE.parent) -> list[str]:
    graph = import_graph(root, "syncfree")
    problems = []
    for circle in sorted(circles(graph)):
        members = set(circle)
        ties = "; ".join(f"{module} -> {', '.join(sorted(graph[module] & members))}" for module in circle)
        problems.append(f"import circle: {' <-> '.join(circle)} ({ties})")
    if (root / "syncfree" / "session.py").exists():
        problems.append("syncfree/session.py is back: engine choice is engine_choice.py, the watch API watches.py, "
                        "script runs script_run.py")
    return problems


def test_the_whole_package_has_no_import_circle():
    assert package_problems() == []


def test_the_check_sees_circles_anywhere_in_the_package(tmp_path):
    """The check itself, on a made-up tree: output.py and report.py closing a loop with imports inside functions,
    a package's __init__ and its submodule under ``if TYPE_CHECKING``, one through the package root (a command
    taking ``__version__`` from ``syncfree``, whose extension hook reaches the command), and session.py back."""
    package = tmp_path / "syncfree"
    for folder in (package, package / "catalog", package / "cli"):
        folder.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("__version__ = '0'\n\ndef load_ipython_extension(ip):\n"
                                         "    from .magic import load\n")
    (package / "magic.py").write_text("def load():\n    from syncfree.cli import main\n")
    (package / "cli" / "__init__.py").write_text("from syncfree import __version__\n")
    (package / "output.py").write_text("def text_line():\n    from syncfree.report import PHASE_WORDS\n")
    (package / "report.py").write_text("def report_text():\n    from .output import text_line\n")
    (package / "catalog" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from syncfree.catalog.scope import CellScope\n")
    (package / "catalog" / "scope.py").write_text("from syncfree.catalog import Edit\n")
    (package / "session.py").write_text("")
    (package / "watches.py").write_text("from .report import report_text\n")
    assert package_problems(tmp_path) == [
        "import circle: syncfree <-> syncfree.cli <-> syncfree.magic "
        "(syncfree -> syncfree.magic; syncfree.cli -> syncfree; syncfree.magic -> syncfree.cli)",
        "import circle: syncfree.catalog <-> syncfree.catalog.scope "
        "(syncfree.catalog -> syncfree.catalog.scope; syncfree.catalog.scope -> syncfree.catalog)",
        "import circle: syncfree.output <-> syncfree.report "
        "(syncfree.output -> syncfree.report; syncfree.report -> syncfree.output)",
        "syncfree/session.py is back: engine choice is engine_choice.py, the watch API watches.py, "
        "script runs script_run.py",
    ]
