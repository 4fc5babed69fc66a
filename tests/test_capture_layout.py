"""The layout of capture/ and distributed/, read from their imports (docs/development.md, "Where the code lives"):
no import circles, and each engine behind the recorder's seam (capture/engine.py) imports only the shared parts,
never another engine. Imports inside functions and under ``if TYPE_CHECKING`` count: a lazy import that closes a
loop is a loop."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python_helper" / "syncfree"
ENGINES = ("debug", "cupti", "predict")


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` (dotted, under ``root``) it imports, anywhere in its code."""
    modules: dict[str, Path] = {}
    for path in (root / package.replace(".", "/")).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for candidate in candidates:
                while candidate and candidate not in modules:
                    candidate = candidate.rpartition(".")[0]
                if candidate and candidate != name:
                    targets.add(candidate)
                    break
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def engine_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["syncfree", "capture"] and parts[2] in ENGINES else None


def layout_problems(root: Path = PACKAGE.parent) -> list[str]:
    problems = []
    for package in ("syncfree.capture", "syncfree.distributed"):
        for circle in circles(import_graph(root, package)):
            problems.append(f"import circle: {' <-> '.join(circle)}")
    # capture/ imports the rest of syncfree only downwards: no circle runs out of it and back in.
    for circle in circles(import_graph(root, "syncfree")):
        inside = [m for m in circle if m.startswith("syncfree.capture")]
        if inside and len(inside) < len(circle):
            problems.append(f"import circle through capture/: {' <-> '.join(circle)}")
    graph = import_graph(root, "syncfree.capture")
    for module, targets in sorted(graph.items()):
        mine = engine_of(module)
        for target in sorted(targets):
            theirs = engine_of(target)
            if mine is not None and theirs is not None and theirs != mine:
                problems.append(f"engine {mine} imports engine {theirs}: {module} -> {target}")
            if mine is None and theirs is not None and module.rpartition(".")[2] in (
                    "dispatch", "threads", "sites", "stall", "engine", "undo", "interrupts", "presence"):
                problems.append(f"shared module imports an engine: {module} -> {target}")
    return problems


def test_capture_and_distributed_have_no_import_circles_and_engines_stay_apart():
    assert layout_problems() == []


def test_the_check_sees_a_circle_and_an_engine_reaching_into_another(tmp_path):
    """The check itself, on a made-up tree: a loop closed by a lazy import, one out of capture/ and back, and the
    CUPTI engine importing the debug-mode engine."""
    capture = tmp_path / "syncfree" / "capture"
    for folder in (capture / "debug", capture / "cupti", tmp_path / "syncfree" / "distributed"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (tmp_path / "syncfree" / "__init__.py").write_text("")
    (capture / "dispatch.py").write_text("def f():\n    from . import threads\n")
    (capture / "threads.py").write_text("from . import dispatch\n")
    (capture / "cupti" / "engine.py").write_text("from ..debug import hook\n")
    (capture / "debug" / "hook.py").write_text("from .. import dispatch\n")
    (capture / "sites.py").write_text("def f():\n    from syncfree.output import columns\n")
    (tmp_path / "syncfree" / "output.py").write_text("from syncfree.capture.sites import f\n")
    assert layout_problems(tmp_path) == [
        "import circle: syncfree.capture.dispatch <-> syncfree.capture.threads",
        "import circle through capture/: syncfree.capture.sites <-> syncfree.output",
        "engine cupti imports engine debug: syncfree.capture.cupti.engine -> syncfree.capture.debug.hook",
    ]
