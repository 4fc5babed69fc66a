"""Which "GPU evidence" a single file shows around each labelled finding, against its verdict (issue 40, round 11).

For every finding read by hand in ``tests/data/check_precision.json`` (file, line, rule, verdict true / plausible /
false) whose library is installed at the labelled version, the file is checked again as ``syncfree check
--possible`` checks it, the finding found by (line, rule), and features a one-file analysis can see are computed:

- the finding's certainty now (``certain``: the analysis placed the value on CUDA; ``likely``: it did not);
- in the enclosing function (the innermost ``def``; the module's top level where there is none): a word
  ``device`` (a parameter, an attribute, a keyword), a move (``.to(``, ``.cuda(``, ``device=``), the word
  ``cuda``/``gpu``, ``.parameters()``/``.buffers()`` (``next(self.parameters()).device``);
- the same words in the enclosing class and in the module;
- the enclosing class derives from a ``...Module``/``...Model``/``...Layer`` base (a layer: its parameters go
  where the user moves the model), and the function is its ``forward`` or a training/validation step or loss;
- a parameter of the enclosing function read by the finding (annotated, or not);
- the file is test code (a ``tests``/``test`` folder, ``test_*.py`` or ``*_test.py``).

It prints, per feature and per gate (a combination: "a likely finding needs this, or it is ``possible``"), the
true / plausible / false labels with and without it, the strict precision of the findings that keep ``likely`` or
``certain`` under the gate, the *true* labels the gate would demote, and the same on two halves of the libraries
(``--split``: the gates are ranked on one half, measured on the other). Nothing is changed::

    PYTHONPATH=python_helper .venv/bin/python bench/precision_evidence.py
    PYTHONPATH=python_helper .venv/bin/python bench/precision_evidence.py --rows   # one row per labelled finding
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.metadata
import importlib.util
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python_helper"))

from syncfree.cli.check import check_file  # noqa: E402

LABELS = ROOT / "tests" / "data" / "check_precision.json"

_DEVICE = re.compile(r"\bdevice\b")
_MOVE = re.compile(r"\.(?:to|cuda)\(|\bdevice\s*=")
_CUDA = re.compile(r"cuda|\bgpu\b", re.IGNORECASE)
_PARAMETERS = re.compile(r"\.(?:parameters|buffers)\(\)")
_LAYER_BASE = re.compile(r"(?:Module|Model|Layer|MessagePassing)\b")
_STEP = re.compile(r"^(?:forward|_forward|training_step|validation_step|test_step|predict_step|train_step|"
                   r"compute_loss|loss|.*_loss|__call__)$")


def folder(name: str, version: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    distributions = importlib.metadata.packages_distributions().get(name) or [name]
    if importlib.metadata.version(distributions[0]) != version:
        return None
    return Path(spec.origin).parent


def _enclosing(tree: ast.Module, line: int) -> tuple[ast.AST | None, ast.ClassDef | None]:
    """The innermost function and class around a line."""
    function = klass = None
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if child.lineno <= line <= child.end_lineno:
                    if isinstance(child, ast.ClassDef):
                        klass, function = child, None
                    else:
                        function = child
                    stack.append(child)
            elif hasattr(child, "body") or isinstance(child, (ast.If, ast.With, ast.Try, ast.For, ast.While)):
                stack.append(child)
    return function, klass


def _text(lines: list[str], node: ast.AST | None) -> str:
    return "" if node is None else "\n".join(lines[node.lineno - 1:node.end_lineno])


def features(path: Path, relative: str, line: int, rule: str, cache: dict) -> dict | None:
    if path not in cache:
        result = check_file(path, possible=True)
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])
        cache[path] = (result.diagnostics, text, text.splitlines(), tree)
    diagnostics, text, lines, tree = cache[path]
    found = [d for d in diagnostics if d.line == line and d.rule == rule]
    if not found:
        return None
    diagnostic = found[0]
    function, klass = _enclosing(tree, line)
    ftext = _text(lines, function) if function is not None else text
    ctext = _text(lines, klass)
    span = "\n".join(lines[diagnostic.line - 1:diagnostic.end_line])
    params: dict[str, ast.arg] = {}
    if function is not None:
        args = function.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.arg not in ("self", "cls"):
                params[arg.arg] = arg
    read = {name for name in re.findall(r"\b\w+\b", span) if name in params}
    bases = " ".join(ast.unparse(base) for base in klass.bases) if klass is not None else ""
    layer = bool(_LAYER_BASE.search(bases))
    parts = relative.split("/")
    return {
        "certain": diagnostic.certainty == "certain",
        "possible_now": diagnostic.certainty == "possible",
        "fn_device": bool(_DEVICE.search(ftext)),
        "fn_move": bool(_MOVE.search(ftext)),
        "fn_cuda": bool(_CUDA.search(ftext)),
        "fn_parameters": bool(_PARAMETERS.search(ftext)),
        "cls_device": bool(_DEVICE.search(ctext)),
        "cls_cuda": bool(_CUDA.search(ctext)),
        "mod_device": bool(_DEVICE.search(text)),
        "mod_cuda": bool(_CUDA.search(text)),
        "layer_class": layer,
        "layer_step": layer and function is not None and bool(_STEP.match(function.name)),
        "reads_param": bool(read),
        "reads_unannotated_param": any(params[name].annotation is None for name in read),
        "in_function": function is not None,
        "test_path": any(p in ("tests", "test", "testing") for p in parts[:-1])
        or parts[-1].startswith("test_") or parts[-1].endswith("_test.py"),
    }


def rows() -> list[dict]:
    labels = json.loads(LABELS.read_text())["libraries"]
    out = []
    for library, entry in sorted(labels.items()):
        base = folder(library, entry["version"])
        if base is None:
            print(f"({library} {entry['version']} not installed: left out)", file=sys.stderr)
            continue
        cache: dict = {}
        for finding in entry["findings"]:
            got = features(base / finding["file"], finding["file"], finding["line"], finding["rule"], cache)
            if got is None:
                continue  # no longer reported, even as possible
            out.append({"library": library, "file": finding["file"], "line": finding["line"], "rule": finding["rule"],
                        "verdict": finding["verdict"], **got})
    return out


def _evidence(row: dict) -> bool:
    return row["fn_device"] or row["fn_move"] or row["fn_cuda"] or row["fn_parameters"]


#: Each gate: the findings it keeps likely (certain ones are always kept: the analysis placed them on CUDA).
GATES = {
    "none (today)": lambda r: True,
    "fn: device word": lambda r: r["fn_device"],
    "fn: move (.to/.cuda/device=)": lambda r: r["fn_move"],
    "fn: cuda/gpu word": lambda r: r["fn_cuda"],
    "fn: device|move|cuda|parameters": _evidence,
    "fn or class: device|move|cuda|parameters": lambda r: _evidence(r) or r["cls_device"] or r["cls_cuda"],
    "module: device|cuda word": lambda r: r["mod_device"] or r["mod_cuda"],
    "layer class": lambda r: r["layer_class"],
    "fn evidence or layer class": lambda r: _evidence(r) or r["layer_class"],
    "fn/class evidence or layer class": lambda r: _evidence(r) or r["cls_device"] or r["cls_cuda"] or r["layer_class"],
    "not test path": lambda r: not r["test_path"],
    "no unannotated param read": lambda r: not r["reads_unannotated_param"],
    "fn evidence or no param read": lambda r: _evidence(r) or not r["reads_param"],
    "fn evidence or layer or no param read": lambda r: _evidence(r) or r["layer_class"] or not r["reads_param"],
    "fn evidence or no param read; tests: fn evidence": lambda r: (_evidence(r) or not r["reads_param"])
    and (_evidence(r) or not r["test_path"]),
    "fn evidence or no unannotated param read": lambda r: _evidence(r) or not r["reads_unannotated_param"],
}

#: How a gate is chosen on one half of the libraries (cross-validation): the highest strict precision among the gates
#: that keep at least this share of that half's true labels likely or certain.
KEEP_TRUE = 0.85


def counts(selected: list[dict]) -> tuple[int, int, int]:
    c = collections.Counter(r["verdict"] for r in selected)
    return c["true"], c["plausible"], c["false"]


def fmt(t: int, p: int, f: int) -> str:
    n = t + p + f
    return f"{t:4d} /{p:4d} /{f:4d}  {t / n if n else 0:5.3f}"


def gate_result(table: list[dict], keep) -> tuple[int, int, int, int, int]:
    """(true, plausible, false) kept likely/certain; true labels demoted; findings demoted."""
    live = [r for r in table if not r["possible_now"]]
    kept = [r for r in live if r["certain"] or keep(r)]
    demoted = [r for r in live if not (r["certain"] or keep(r))]
    t, p, f = counts(kept)
    return t, p, f, sum(r["verdict"] == "true" for r in demoted), len(demoted)


def per_library(table: list[dict], keep) -> float:
    """The mean over libraries of each library's strict precision under the gate (each library weighs alike)."""
    values = []
    for library in sorted({r["library"] for r in table}):
        t, p, f, _, _ = gate_result([r for r in table if r["library"] == library], keep)
        if t + p + f:
            values.append(t / (t + p + f))
    return sum(values) / len(values) if values else 0.0


def report(table: list[dict], title: str) -> None:
    live = [r for r in table if not r["possible_now"]]
    print(f"\n== {title}: {len(live)} labelled findings reported likely or certain "
          f"({len({r['library'] for r in table})} libraries), true / plausible / false, strict precision")
    print(f"{'feature':34s} {'with it':>26s}   {'without it':>26s}")
    for name in [k for k in live[0] if isinstance(live[0][k], bool) and k != "possible_now"]:
        yes = [r for r in live if r[name]]
        no = [r for r in live if not r[name]]
        print(f"{name:34s} {fmt(*counts(yes)):>26s}   {fmt(*counts(no)):>26s}")
    likely = [r for r in live if not r["certain"]]
    print(f"\nlikely findings only ({len(likely)}):")
    for name in ("fn_device", "fn_move", "fn_cuda", "fn_parameters", "cls_device", "layer_class", "layer_step",
                 "reads_param", "reads_unannotated_param", "test_path"):
        yes = [r for r in likely if r[name]]
        no = [r for r in likely if not r[name]]
        print(f"  {name:32s} {fmt(*counts(yes)):>26s}   {fmt(*counts(no)):>26s}")
    print(f"\n{'gate (likely needs ...)':44s} {'kept: true / plaus / false  prec':>34s} {'true demoted':>13s}"
          f" {'demoted':>8s} {'mean/lib':>9s}")
    for name, keep in GATES.items():
        t, p, f, lost, demoted = gate_result(table, keep)
        print(f"{name:44s} {fmt(t, p, f):>34s} {lost:13d} {demoted:8d} {per_library(table, keep):9.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", action="store_true", help="print one row per labelled finding")
    parser.add_argument("--seed", type=int, default=11, help="the seed of the split of the libraries in halves")
    args = parser.parse_args()
    table = rows()
    if args.rows:
        for r in table:
            flags = " ".join(k for k, v in r.items() if v is True)
            print(f"{r['library']:22s} {r['file']}:{r['line']} {r['rule']} {r['verdict']:9s} {flags}")
    report(table, "all labels")
    libraries = sorted({r["library"] for r in table})
    random.Random(args.seed).shuffle(libraries)
    half = set(libraries[: len(libraries) // 2])
    halves = {"half A": half, "half B": set(libraries) - half}
    for name, chosen in halves.items():
        print(f"\n{name}: {', '.join(sorted(chosen))}")
        report([r for r in table if r["library"] in chosen], name)
    print(f"\ncross-validation: a gate chosen on one half (highest strict precision keeping >= {KEEP_TRUE:.0%} of its "
          "true labels), measured on the other")
    for name, chosen in halves.items():
        (other_name, other), = [(n, c) for n, c in halves.items() if n != name]
        choose = [r for r in table if r["library"] in chosen]
        measure = [r for r in table if r["library"] in other]
        true = sum(r["verdict"] == "true" and not r["possible_now"] for r in choose)
        best = max((gate for gate in GATES if gate_result(choose, GATES[gate])[3] <= (1 - KEEP_TRUE) * true),
                   key=lambda gate: gate_result(choose, GATES[gate])[:3][0] / max(1, sum(gate_result(choose, GATES[gate])[:3])))
        for label, rows_ in ((name, choose), (other_name, measure)):
            t, p, f, lost, demoted = gate_result(rows_, GATES[best])
            t0, p0, f0, _, _ = gate_result(rows_, GATES["none (today)"])
            print(f"  chosen on {name}: {best!r}; on {label}: {t0}/{t0 + p0 + f0} = {t0 / (t0 + p0 + f0):.3f} today -> "
                  f"{t}/{t + p + f} = {t / (t + p + f):.3f}, {lost} true demoted ({demoted} findings)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
