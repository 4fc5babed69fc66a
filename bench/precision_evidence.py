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

``--search`` (round 12) adds atoms of host-code evidence (a module with no device word, NumPy/pandas in the module and
the function, a host folder or utils name in the path, an array-like annotation or docstring, a dataset / transform /
callback / metric-like class...) and searches gates that demote a likely finding where a conjunction of atoms holds,
none of which may demote a likely or certain finding of the user-code corpus (tests/data/user_code/findings.json) nor
3% of the true labels; the gate is chosen on one half of the libraries and measured on the other.
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
#: Round 12's evidence that code is host-side or device-agnostic library code.
_NUMPY_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:numpy|pandas)\b", re.MULTILINE)
_NUMPY_USE = re.compile(r"\b(?:np|numpy|pd|pandas)\.")
_TORCH_USE = re.compile(r"\btorch\.")
_HOST_FOLDER = {"data", "datasets", "dataset", "transforms", "transform", "augmentation", "augmentations", "io",
                "plot", "plotting", "vis", "visualization", "preprocessing", "processing", "sampler", "samplers",
                "loader", "loaders", "storage", "storages", "tokenizers", "export", "_export", "backends",
                "serialization", "_serialization", "analysis", "evaluation", "hooks", "callbacks", "callback",
                "structures", "triples", "interpret", "replay_buffers"}
_UTILS_NAME = re.compile(r"^_?(?:utils?|helpers?|common|misc|tools)(?:\.py)?$")
_ARRAY_ANNOTATION = re.compile(r"ndarray|ArrayLike|NdarrayOrTensor|np\.|numpy|DataFrame|Sequence|List\[|list\[|"
                               r"Iterable|Union\[")
_ARRAY_DOC = re.compile(r"numpy|ndarray|array[- ]like|np\.|DataFrame|pandas", re.IGNORECASE)
_HOST_CLASS = re.compile(r"Dataset|Transform|Callback|Hook|Logger|Sampler|Collat|Loader|Writer|Storage|Processor|"
                         r"Tokeni[sz]er|Evaluator|Plot|Visuali[sz]|Exporter|Backend|Factory|Checkpoint|Recorder|"
                         r"Interpret|Buffer|Metric|Stat")
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
    numpy_uses = len(_NUMPY_USE.findall(ftext))
    doc = ast.get_docstring(function) if function is not None else None
    class_words = (klass.name + " " + bases) if klass is not None else ""
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
        "mod_no_device": not (_DEVICE.search(text) or _CUDA.search(text)),
        "fn_no_evidence": not (_DEVICE.search(ftext) or _MOVE.search(ftext) or _CUDA.search(ftext)
                               or _PARAMETERS.search(ftext)),
        "mod_numpy": bool(_NUMPY_IMPORT.search(text)),
        "fn_numpy": numpy_uses >= 1,
        "fn_numpy2": numpy_uses >= 2,
        "fn_numpy_over_torch": numpy_uses > len(_TORCH_USE.findall(ftext)),
        "host_folder": any(p in _HOST_FOLDER for p in parts[:-1]),
        "utils_name": any(_UTILS_NAME.match(p) for p in parts),
        "param_arraylike": any(params[name].annotation is not None
                               and _ARRAY_ANNOTATION.search(ast.unparse(params[name].annotation)) for name in read),
        "doc_array": bool(doc and _ARRAY_DOC.search(doc)),
        "host_class": bool(_HOST_CLASS.search(class_words)),
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


USER_CODE = ROOT / "tests" / "data" / "user_code" / "findings.json"


def user_rows() -> list[dict]:
    """The likely and certain findings of the user-code corpus (round 12), verdict "user": a gate may demote none."""
    recorded = json.loads(USER_CODE.read_text())["files"]
    out, cache = [], {}
    for relative, findings in sorted(recorded.items()):
        for rule, line, certainty in findings:
            if certainty == "possible":
                continue
            got = features(ROOT / relative, relative, line, rule, cache)
            if got is not None:
                out.append({"library": "(user code)", "file": relative, "line": line, "rule": rule,
                            "verdict": "user", **got})
    return out


#: Round 12's atoms: a likely finding is demoted where every atom of a conjunction holds.
ATOMS = ("mod_no_device", "fn_no_evidence", "reads_param", "reads_unannotated_param", "mod_numpy", "fn_numpy",
         "fn_numpy2", "fn_numpy_over_torch", "host_folder", "utils_name", "param_arraylike", "doc_array",
         "host_class", "test_path", "not_layer_class")


def _atom(row: dict, atom: str) -> bool:
    return not row["layer_class"] if atom == "not_layer_class" else row[atom]


def demoting(conjunctions: tuple[tuple[str, ...], ...]):
    """The keep function of a gate that demotes a likely finding where one of the conjunctions holds."""
    return lambda r: not any(all(_atom(r, a) for a in c) for c in conjunctions)


def search(table: list[dict], users: list[dict], max_true_share: float = 0.03, size: int = 3, unions: int = 2):
    """The best gate on ``table`` (highest strict precision), demoting no user-code finding and under
    ``max_true_share`` of the true labels: conjunctions of up to ``size`` atoms, then unions of up to ``unions``."""
    import itertools

    true = sum(r["verdict"] == "true" and not r["possible_now"] for r in table)
    live_users = [r for r in users if not r["certain"] and not r["possible_now"]]
    single = []
    for k in range(1, size + 1):
        for c in itertools.combinations(ATOMS, k):
            keep = demoting((c,))
            if any(not keep(r) for r in live_users):
                continue
            t, p, f, lost, demoted = gate_result(table, keep)
            if demoted and lost < max_true_share * true:
                single.append(((c,), t / max(1, t + p + f)))
    single.sort(key=lambda x: -x[1])
    best = single[:1]
    pool = [g for g, _ in single[:60]]
    for n in range(2, unions + 1):
        for combo in itertools.combinations(pool, n):
            gate = tuple(c for g in combo for c in g)
            keep = demoting(gate)
            t, p, f, lost, demoted = gate_result(table, keep)
            if lost < max_true_share * true:
                best.append((gate, t / max(1, t + p + f)))
    best.sort(key=lambda x: -x[1])
    return best[0][0] if best else (), single[:15]


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


def _line(table: list[dict], keep) -> str:
    t, p, f, lost, demoted = gate_result(table, keep)
    t0, p0, f0, _, _ = gate_result(table, lambda r: True)
    return (f"{t0}/{t0 + p0 + f0} = {t0 / (t0 + p0 + f0):.3f} -> {t}/{t + p + f} = {t / max(1, t + p + f):.3f} "
            f"({lost} true of {t0} demoted, {demoted} findings)")


def search_report(table: list[dict], users: list[dict], seed: int) -> int:
    def name(gate):
        return " | ".join(" & ".join(c) for c in gate) or "(none)"

    print(f"user code: {len(users)} likely or certain findings ({sum(not r['certain'] for r in users)} likely)")
    print("\nper atom, likely findings where it holds: true / plausible / false  precision; user-code findings")
    likely = [r for r in table if not r["certain"] and not r["possible_now"]]
    for atom in ATOMS:
        yes = [r for r in likely if _atom(r, atom)]
        print(f"  {atom:26s} {fmt(*counts(yes))}   user {sum(_atom(r, atom) for r in users if not r['certain'])}")
    gate, top = search(table, users)
    print("\nall labels, best single conjunctions (no user-code finding demoted, < 3% of true labels):")
    for g, _ in top:
        print(f"  {name(g):60s} {_line(table, demoting(g))}")
    print(f"\nall labels, best gate: {name(gate)}\n  {_line(table, demoting(gate))}")
    libraries = sorted({r["library"] for r in table})
    random.Random(seed).shuffle(libraries)
    half = set(libraries[: len(libraries) // 2])
    halves = {"half A": half, "half B": set(libraries) - half}
    for label, chosen in halves.items():
        (other_label, other), = [(n, c) for n, c in halves.items() if n != label]
        gate, _ = search([r for r in table if r["library"] in chosen], users)
        print(f"\nchosen on {label} ({', '.join(sorted(chosen))}): {name(gate)}")
        print(f"  on {label}: {_line([r for r in table if r['library'] in chosen], demoting(gate))}")
        print(f"  on {other_label}: {_line([r for r in table if r['library'] in other], demoting(gate))}")
        print(f"  all labels: {_line(table, demoting(gate))}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", action="store_true", help="print one row per labelled finding")
    parser.add_argument("--search", action="store_true",
                        help="round 12: search conjunctions of host-code evidence, cross-validated, user code kept")
    parser.add_argument("--seed", type=int, default=11, help="the seed of the split of the libraries in halves")
    args = parser.parse_args()
    table = rows()
    if args.search:
        return search_report(table, user_rows(), args.seed)
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
