"""The kernel side's core, one job per module, imported downwards only (docs/development.md, "Repository layout"):
capture/, then torch_import.py, processes.py, engine_choice.py, watches.py and script_run.py. None imports a module
of a layer above it, and none is in an import circle. Imports inside functions count: a lazy import that closes a
loop is a loop (session.py and processes.py imported each other that way)."""

from __future__ import annotations

from pathlib import Path

from test_capture_layout import PACKAGE, circles, import_graph

#: The core's layers, lowest first: a module may import its own layer and those below.
LAYERS = ("syncfree.capture", "syncfree.torch_import", "syncfree.processes", "syncfree.engine_choice",
          "syncfree.watches", "syncfree.script_run")


def layer_of(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def core_problems(root: Path = PACKAGE.parent) -> list[str]:
    graph = import_graph(root, "syncfree")
    problems = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module)
        for target in sorted(targets):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(f"{module} imports {target}, above it")
    for circle in circles(graph):
        # capture/'s own circles are tests/test_capture_layout.py's
        if any(layer_of(module) not in (None, 0) for module in circle):
            problems.append(f"import circle: {' <-> '.join(circle)}")
    return problems


def test_the_core_modules_import_downwards_only_and_in_no_circle():
    assert core_problems() == []


def test_the_check_sees_a_lazy_circle_and_an_import_from_above(tmp_path):
    """The check itself, on a made-up tree: processes.py reaching up into the watch API inside a function (the
    circle session.py and processes.py made), and torch_import.py importing processes.py."""
    package = tmp_path / "syncfree"
    (package / "capture").mkdir(parents=True)
    for path in (package / "__init__.py", package / "capture" / "__init__.py"):
        path.write_text("")
    (package / "watches.py").write_text("from .processes import ForkedChildren\n")
    (package / "processes.py").write_text("def start():\n    from .watches import Watch\n")
    (package / "torch_import.py").write_text("from . import processes\n")
    assert core_problems(tmp_path) == [
        "syncfree.processes imports syncfree.watches, above it",
        "syncfree.torch_import imports syncfree.processes, above it",
        "import circle: syncfree.processes <-> syncfree.watches",
    ]
