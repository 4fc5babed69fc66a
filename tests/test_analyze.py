"""The static pass: golden fixtures, the measured patterns, IPython syntax, positions and device inference."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest

from regen import regen
from syncfree.analyze import Bindings, analyze_source, neutralize_ipython

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SCHEMA = json.loads((ROOT / "python_helper" / "syncfree" / "report.schema.json").read_text())
FINDING_SCHEMA = {"$ref": "#/definitions/Finding", "definitions": SCHEMA["definitions"]}


def rules_at(source: str, **kwargs) -> list[tuple[str, int, str]]:
    return [(f["rule"], f["range"]["line"], f["certainty"]) for f in analyze_source(source, **kwargs)]


def covered_text(source: str, finding: dict) -> str:
    r = finding["range"]
    lines = source.splitlines()
    assert r["line"] == r["end_line"], "single-line ranges only in this helper"
    return lines[r["line"] - 1][r["col"] : r["end_col"]]


# --------------------------------------------------------------------------------------------- golden fixtures
@pytest.mark.parametrize("case", regen.checker_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_checker_fixture(case):
    expected = case.with_suffix(".txt").read_text()
    assert regen.render_checker(case.read_text()) == expected, (
        f"{case.name} changed; if intended, run: PYTHONPATH=python_helper .venv/bin/python scripts/regen_fixtures.py"
    )


@pytest.mark.parametrize("case", regen.checker_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_inline_markers_agree_with_findings(case):
    """A line marked `# OK` has no finding; a line marked `# SFnnn` has that rule's finding."""
    found = {}
    for finding in analyze_source(case.read_text(), select=["ALL"]):
        found.setdefault(finding["range"]["line"], set()).add(finding["rule"])
    for number, line in enumerate(case.read_text().splitlines(), start=1):
        comment = line.split("#", 1)[1].strip() if "#" in line else ""
        if comment.startswith("OK"):
            assert number not in found, f"{case.name}:{number} is marked OK but has {found[number]}"
        elif comment.startswith("SF"):
            code = comment.split()[0].rstrip(":,")
            assert code in found.get(number, set()), f"{case.name}:{number} is marked {code} but has {found.get(number)}"


# --------------------------------------------------------------------------------------------- measured patterns
PREAMBLE = """import numpy as np
import torch
x = torch.randn(64, 64, device='cuda')
xc = torch.randn(64, 64)
loss = x.sum()
a = torch.randn((), device='cuda')
b = torch.randn((), device='cuda')
mask = x > 0
idx_cpu = torch.arange(3)
idx_gpu = torch.arange(3, device='cuda')
zero_gpu = torch.zeros((), device='cuda')
i_gpu = torch.ones((), dtype=torch.long, device='cuda')
j_gpu = torch.full((), 5, dtype=torch.long, device='cuda')
v = torch.randn(128, device='cuda')
r = torch.randint(0, 4, (128,), device='cuda')
r2 = torch.ones(128, dtype=torch.long, device='cuda')
model = torch.nn.Linear(64, 64, device='cuda')
"""
PATTERNS = json.loads((TESTS / "data" / "patterns-torch2.11-h200.json").read_text())["patterns"]
# Calls that block the CPU without a debug-mode warning (sync-facts.md, "What the debug mode does not see").
_SILENT_BLOCKING = {"cudaDeviceSynchronize", "cudaEventSynchronize", "cudaStreamSynchronize"}


def test_preamble_is_sync_free():
    assert analyze_source(PREAMBLE, select=["ALL"]) == []


def test_measured_patterns_recall_and_false_findings(capsys):
    """Static recall on the 73 patterns measured on an H200 (torch 2.11).

    Syncing: the debug mode warned (the 'item' pattern's 2 includes the one-time prototype warning: it is 1).
    Explicit waits the debug mode cannot see (cudaDeviceSynchronize, cudaEventSynchronize) block the CPU too: they
    count as syncing and are reported apart. Everything else is non-syncing.
    """
    offset = PREAMBLE.count("\n")
    warned, silent, clean = [], [], []
    for name, pattern in PATTERNS.items():
        findings = [f for f in analyze_source(PREAMBLE + pattern["code"]) if f["range"]["line"] > offset]
        if pattern["sync_warnings"] > 0:
            warned.append((name, findings))
        elif _SILENT_BLOCKING & set(pattern["runtime_calls"]):
            silent.append((name, findings))
        else:
            clean.append((name, findings))
    missed = [name for name, findings in warned if not findings]
    false = [(name, [f["rule"] for f in findings]) for name, findings in clean if findings]
    recall = 1 - len(missed) / len(warned)
    with capsys.disabled():
        print(
            f"\nstatic recall: {len(warned) - len(missed)}/{len(warned)} syncing patterns = {recall:.1%} "
            f"(missed: {missed or 'none'}); explicit waits found: {sum(bool(f) for _, f in silent)}/{len(silent)}; "
            f"false findings: {len(false)} on {len(clean)} non-syncing patterns {false or ''}"
        )
    assert len(PATTERNS) == 73
    assert recall >= 0.95, missed
    assert all(findings for _, findings in silent)
    assert len(false) <= 3, false


def test_measured_patterns_are_certain_with_the_preamble():
    offset = PREAMBLE.count("\n")
    for name, pattern in PATTERNS.items():
        if pattern["sync_warnings"]:
            findings = [f for f in analyze_source(PREAMBLE + pattern["code"]) if f["range"]["line"] > offset]
            assert all(f["certainty"] == "certain" for f in findings), name


# --------------------------------------------------------------------------------------------- IPython syntax
CUDA = "import torch\nx = torch.randn(4, device='cuda')\n"


def test_cell_magic_line_and_first_line():
    body = "s = x.sum().item()\n"
    whole = analyze_source("%%syncfree --mode warn\n" + CUDA + body)
    assert [(f["rule"], f["range"]["line"]) for f in whole] == [("SF101", 4)]
    shifted = analyze_source(CUDA + body, first_line=2)
    assert [(f["rule"], f["range"]["line"]) for f in shifted] == [("SF101", 4)]
    assert analyze_source("\n\n%%time\n" + CUDA + body)[0]["range"]["line"] == 6


def test_non_python_cell_magic_is_not_analysed():
    assert analyze_source("%%bash\nx.item()\n") == []
    assert analyze_source("%%writefile f.py\n" + CUDA + "x.sum().item()\n") == []


@pytest.mark.parametrize(
    "line",
    ["%time y = x.sum()", "!nvidia-smi", "files = !ls", "y = %timeit -o f()", "x?", "torch.cuda.synchronize??", "?x",
     "%matplotlib inline"],
)
def test_ipython_lines_are_neutralised_in_place(line):
    source = CUDA + line + "\ns = x.sum().item()\n"
    findings = analyze_source(source)
    assert [(f["rule"], f["range"]["line"]) for f in findings] == [("SF101", 4)]
    cleaned = neutralize_ipython(source)
    assert cleaned.count("\n") == source.count("\n")
    assert cleaned.splitlines()[2] == "pass"


def test_indented_magic_keeps_the_block():
    source = CUDA + "for i in range(3):\n    %time y = x * i\n    s = y.sum().item()\n"
    assert [(f["rule"], f["range"]["line"]) for f in analyze_source(source)] == [("SF101", 5)]


def test_percent_and_question_marks_inside_code_are_left_alone():
    source = (
        CUDA
        + 's = """\n%not a magic\n!nor this?\n"""\n'
        + "y = (x.sum()\n     % 2)\n"
        + "q = 'why?'  # really?\n"
        + "z = x.sum().item()\n"
    )
    assert neutralize_ipython(source) == source
    assert [(f["rule"], f["range"]["line"]) for f in analyze_source(source)] == [("SF101", 10)]


def test_syntax_errors_give_no_findings():
    assert analyze_source("x = (\n") == []
    assert analyze_source("def f(:\n") == []
    assert analyze_source("") == []
    assert analyze_source("\0") == []
    assert analyze_source("await something()\n") == []  # top-level await: not Python outside IPython


def test_invalid_escape_does_not_warn(recwarn):
    analyze_source(CUDA + "p = '\\d'\n")
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]


# --------------------------------------------------------------------------------------------- positions
def test_ranges_cover_the_syncing_expression():
    source = CUDA + (
        "y = x.sum()\n"
        "s = y.sum().item()\n"
        "m = x[x > 0]\n"
        "if y > 0:\n    pass\n"
        "print(y)\n"
        "t = f'{y:.2f} ok'\n"
        "x[0] = 1\n"
        "n = len(x.nonzero())\n"
    )
    texts = {f["rule"]: covered_text(source, f) for f in analyze_source(source)}
    assert texts == {
        "SF101": "y.sum().item()",
        "SF601": "x[x > 0]",
        "SF103": "y > 0",
        "SF201": "print(y)",
        "SF202": "f'{y:.2f} ok'",
        "SF502": "x[0]",
        "SF602": "x.nonzero()",
    }


def test_columns_are_characters_not_bytes():
    source = CUDA + "étiquette = 'ünïcödé'; s = x.sum().item()\n"
    [finding] = analyze_source(source)
    assert covered_text(source, finding) == "x.sum().item()"
    assert finding["range"]["col"] == source.splitlines()[2].index("x.sum()")


def test_fix_edits_are_cell_relative_characters():
    source = "%%syncfree\nimport torch\nétiquette = 'é'; z = torch.tensor(0, device='cuda')\n"
    [finding] = analyze_source(source)
    [edit] = finding["fix"]["edits"]
    assert edit["range"]["line"] == 3
    line = source.splitlines()[2]
    assert line[edit["range"]["col"] : edit["range"]["end_col"]] == "torch.tensor(0, device='cuda')"


def test_findings_validate_and_are_sorted():
    source = (TESTS / "fixtures" / "checker" / "control_flow" / "conditions.py").read_text()
    findings = analyze_source(source, select=["ALL"])
    for finding in findings:
        jsonschema.validate(finding, FINDING_SCHEMA)
    keys = [(f["range"]["line"], f["range"]["col"]) for f in findings]
    assert keys == sorted(keys)


def test_multi_line_range():
    source = CUDA + "a = x.sum().item()\nb = x.mean().item()\n"
    [span] = [f for f in analyze_source(source) if f["rule"] == "SF910"]
    assert span["range"] == {"line": 3, "col": 0, "end_line": 4, "end_col": 19}


# --------------------------------------------------------------------------------------------- device inference
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("y = torch.randn(3)\ns = y.sum().item()\n", []),  # CPU tensor
        ("y = torch.randn(3, device='cuda')\ns = y.sum().item()\n", [("SF101", 3, "certain")]),
        ("s = batch.sum().item()\n", [("SF101", 2, "likely")]),  # unknown device
        ("import numpy as np\na = np.ones(3)\ns = a.sum().item()\n", []),  # NumPy
        ("y = torch.randn(3).cuda()\ns = y.item()\n", [("SF101", 3, "certain"), ("SF302", 2, "certain")]),
        ("y = torch.randn(3, device='cuda').cpu()\ns = y.item()\n", [("SF301", 2, "certain")]),
        ("dev = torch.device('cuda', 0)\ny = torch.zeros(3, device=dev)\nprint(y)\n", [("SF201", 4, "certain")]),
        ("torch.set_default_device('cuda')\ny = torch.zeros(3)\nprint(y)\n", [("SF201", 4, "certain")]),
        # a model moved to CUDA in place, and its outputs
        ("m = torch.nn.Linear(3, 3)\nm.cuda()\nout = m(torch.ones(3))\nprint(out)\n",
         [("SF201", 5, "certain"), ("SF303", 3, "certain")]),
        ("class Net(torch.nn.Module):\n    pass\nnet = Net().to('cuda')\nprint(net(inp))\n",
         [("SF201", 5, "certain"), ("SF303", 4, "certain")]),
        ("m = torch.nn.Linear(3, 3)\nfor p in m.parameters():\n    print(p)\n", []),  # the model stayed on the CPU
        # branches join: CUDA on one path, CPU on the other -> unknown device -> likely
        ("if flag:\n    y = torch.ones(3, device='cuda')\nelse:\n    y = torch.ones(3)\nprint(y)\n",
         [("SF201", 6, "likely")]),
        # a function's parameters are unknown, its annotated tensors are tensors
        ("def f(t: torch.Tensor):\n    print(t)\n", [("SF201", 3, "likely")]),
        ("def f(t):\n    print(t)\n", []),
        # ... and a helper's parameters are what the cell passes to it
        ("def clamp(loss):\n    if loss > 10:\n        return loss / 10\n    return loss\n"
         "for _ in range(5):\n    l = clamp(torch.rand((), device='cuda') * 20)\n", [("SF103", 3, "certain")]),
        ("def show(t, label=''):\n    print(label, t)\nshow(torch.ones(3))\n", []),  # only CPU tensors passed
        ("def show(t):\n    print(t)\nshow(torch.ones(3))\nshow(t=torch.ones(3, device='cuda'))\n",
         [("SF201", 3, "likely")]),  # CPU in one call, CUDA in the other
        # comprehension variables shadow the cell's names
        ("t = torch.ones(3)\nvals = [t.item() for t in cuda_list]\n", [("SF101", 3, "likely")]),
        ("import torch as th\ny = th.ones(3, device='cuda')\nz = th.nonzero(y)\n", [("SF602", 4, "certain")]),
    ],
)
def test_device_inference(source, expected):
    assert sorted(rules_at("import torch\n" + source, select=["ALL"])) == sorted(expected)


# ------------------------------------------------------------------------ shapes from large libraries (issue 23)
# Each was a false finding (or a miss) on the sources of transformers; the labelled sample in tests/data holds them
# in context (test_check_precision.py).
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # SF302: a device-agnostic move of a tensor from nowhere in sight is no copy from the host
        ("def f(labels, logits):\n    return labels.to(logits.device)\n", []),
        ("def f(inv_freq, x):\n    return inv_freq.to(device=x.device, dtype=torch.float32)\n", []),
        ("def f(mask, device):\n    return mask.to(device)\n", []),
        # ... but a tensor the code makes on the CPU is copied, and a CUDA target is a copy from wherever it is
        ("def f(n, x):\n    return torch.arange(n).to(x.device)\n", [("SF302", 3, "likely")]),
        ("def f(a, device):\n    return torch.from_numpy(a).to(device)\n", [("SF302", 3, "likely")]),
        ("def f(batch):\n    return batch.to('cuda')\n", [("SF302", 3, "likely")]),
        # SF607: a range written out does not sync, whatever the expressions; min == max does
        ("def f(x, n):\n    return torch.histc(x, bins=n, min=0, max=n - 1)\n", []),
        ("def f(x):\n    return torch.histc(x.float(), 10, 0, 10)\n", []),
        ("def f(x):\n    return x.histc(bins=10, min=1, max=1)\n", [("SF607", 3, "likely")]),
        # SF103: a CPU-made tensor (layer drop) and identity tests ask no GPU
        ("def f(self, x):\n    p = torch.rand([])\n    if p < self.layerdrop:\n        return x\n", []),
        ("def f(x: torch.Tensor):\n    if x is not None and x in cache:\n        return x\n", []),
        ("def f(lengths):\n    if (torch.arange(8) < lengths).all():\n        pass\n", []),
        ("x = torch.ones(3, device='cuda')\nif torch.rand([]) < x.mean():\n    pass\n", [("SF103", 3, "certain")]),
        # SF601: a parameter annotated as a Python number stores a Python scalar (x[mask] = 0 does not sync)
        ("def f(x: torch.Tensor, n: int):\n    x[x == 0] = -4 * n\n", []),
        ("def f(x: torch.Tensor, n):\n    x[x == 0] = -4 * n\n", [("SF601", 3, "likely")]),
        # SF706: a branch that raises binds nothing for the code after the if (alpha is a float either way)
        ("def f(a: float, b: float, c):\n    if c:\n        alpha = a\n    elif b:\n        alpha = b\n"
         "    else:\n        raise ValueError(c)\n    return torch.distributions.Beta(alpha, alpha)\n", []),
        ("def f(a: float, b, c):\n    if c:\n        alpha = a\n    else:\n        alpha = b\n"
         "    return torch.distributions.Beta(alpha, alpha)\n", [("SF706", 7, "likely")]),
        # SF102: torch.seed() returns a Python int (torch/random.py)
        ("import sys\ndef f(self):\n    self.seed = int(torch.seed() % sys.maxsize)\n", []),
        # SF605: an int count (a name, arithmetic, a size) does not sync; a tensor of counts does
        ("def f(x: torch.Tensor, n, k):\n    return x.repeat_interleave(n // k, dim=0), x.repeat_interleave(x.shape[0])\n", []),
        ("def f(x, grid):\n    return torch.repeat_interleave(x, grid[:, 0], dim=0)\n", [("SF605", 3, "likely")]),
        # SF502: an int from enumerate is a basic index; a mask takes masked_fill_
        ("x = torch.zeros(4, 8, device='cuda')\nfor k, row in enumerate(rows):\n    x[k, 3:] = 0.0\n", []),
        ("def f(scores: torch.Tensor, beam_mask):\n    scores[beam_mask] = 0\n", []),
        # SF701: a fused optimizer takes the overflow flag on the GPU; an optimizer out of sight may be fused
        ("s = torch.amp.GradScaler()\nopt = torch.optim.AdamW(params, fused=True)\ns.step(opt)\n", []),
        ("s = torch.amp.GradScaler()\nopt = torch.optim.AdamW(params)\ns.step(opt)\n", [("SF701", 4, "certain")]),
        ("s = torch.amp.GradScaler()\ndef f(opt):\n    s.step(opt)\n", [("SF701", 4, "likely")]),
        ("s = torch.amp.GradScaler(enabled=False)\nopt = torch.optim.SGD(params)\ns.step(opt)\n", []),
        ("s = torch.amp.GradScaler('cpu')\nopt = torch.optim.SGD(params)\ns.step(opt)\n", []),
        # the miss: a module-level loss module has no device of its own; its output follows its inputs
        ("import torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\nmodel = nn.Linear(8, 4).cuda()\n"
         "def step(x, y):\n    return criterion(model(x), y).item()\n", [("SF101", 6, "certain"), ("SF303", 4, "certain")]),
        ("import torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\n"
         "def step(out, y):\n    loss = criterion(out, y)\n    return loss.item()\n", [("SF101", 6, "likely")]),
        ("m = torch.nn.Linear(8, 4)\nprint(m(torch.ones(8)))\n", []),  # a CPU model on CPU data stays quiet
        # isinstance narrows: no tensor is formatted under `if not isinstance(x, Tensor): raise ...`
        ("def f(x: torch.Tensor):\n    if not isinstance(x, torch.Tensor):\n        raise TypeError(f'got {x}')\n", []),
        ("z = torch.ones(3, device='cuda')\nif isinstance(z, torch.Tensor):\n    pass\nz.item()\n",
         [("SF101", 5, "certain")]),  # narrowing is not rebinding: z stays what it was
        # torch's is_/are_/get_ functions answer in Python; a legacy CPU class makes a CPU tensor
        ("if torch.get_float32_matmul_precision() == 'highest' or torch.are_deterministic_algorithms_enabled():\n"
         "    pass\n", []),
        ("t, _ = torch.sort(torch.IntTensor([1, 10, 100]))\nk = t.tolist()\n", []),
        # a tensor converted where it is: no copy from the host
        ("def f(labels: torch.Tensor):\n    return torch.as_tensor(labels, dtype=torch.float32, device=labels.device)\n", []),
        # x[mask] = a setting or a name the text does not tell: as often a number (masked_fill_) as a tensor
        ("def f(self, ids: torch.Tensor, m: torch.Tensor):\n    ids[m > 0] = self.config.pad_token_id\n"
         "    ids[m > 0] = self.fill\n    ids[m > 0] = self.embed.to(ids.dtype)\n", [("SF601", 5, "likely")]),
        # a CPU tensor of one or more dimensions keeps a torch function's result on the CPU
        ("def f(self):\n    cx = torch.randint(0, 5, (1,))\n    return torch.clamp(cx - 2, 0, self.w).item()\n", []),
        # a CPU bool mask is counted on the CPU: x[mask.cpu()] does not sync (measured), with either rule
        ("def f(feats: torch.Tensor, n: torch.Tensor):\n    m = (torch.arange(8, device=n.device) < n[:, None]).cpu()\n"
         "    return feats[m]\n", [("SF301", 3, "likely")]),
        # a CPU tensor of unknown rank (reshaped) stays on the CPU through a torch function with unknown operands
        ("def f(k, p):\n    i = torch.arange(k).reshape(2, -1)\n    j = torch.nn.functional.pad(i, (0, p))\n"
         "    return j[j != -100]\n", []),
        # a barrier where the code says the backend is not NCCL waits for no GPU
        ("import torch.distributed as dist\ndef b():\n    if dist.get_backend() == 'nccl':\n        dist.barrier(device_ids=[0])\n"
         "    else:\n        dist.barrier()\n    dist.monitored_barrier()\n", [("SF902", 5, "certain")]),
        # a module's own setting as a distribution's parameter is a Python number as a rule
        ("def mix(self, mu, sigma):\n    lam = torch.distributions.Beta(self.alpha, self.alpha).sample()\n"
         "    return torch.distributions.Normal(mu, sigma)\n", [("SF706", 4, "likely")]),
        # a type's subscript is no index
        ("from typing import Callable, Iterable\nOptimizerCallable = Callable[[Iterable], int]\n", []),
    ],
)
def test_precision_on_library_shapes(source, expected):
    assert sorted(rules_at("import torch\n" + source, select=["ALL"])) == sorted(expected)


def test_bindings_carry_what_earlier_cells_bound():
    earlier = Bindings()
    assert analyze_source("import torch as th\nx = th.randn(3, device='cuda')\n", earlier=earlier) == []
    assert rules_at("s = x.sum().item()\n", earlier=earlier) == [("SF101", 1, "certain")]
    assert rules_at("y = th.nonzero(x)\n", earlier=earlier) == [("SF602", 1, "certain")]  # the alias carried too
    assert rules_at("x = x.cpu()\n", earlier=earlier) == [("SF301", 1, "certain")]
    assert analyze_source("s = x.sum().item()\n", earlier=earlier) == []  # x is now a CPU tensor
    assert rules_at("s = x.sum().item()\n") == [("SF101", 1, "likely")]  # without them: unknown


def test_event_wait_and_query_are_not_syncs():
    source = "import torch\ne = torch.cuda.Event()\ne.record()\ne.wait()\nready = e.query()\n"
    assert analyze_source(source, select=["ALL"]) == []


def test_non_blocking_copies_are_not_syncs():
    source = CUDA + "h = x.to('cpu', non_blocking=True)\nd = torch.ones(3).pin_memory().cuda(non_blocking=True)\n"
    assert analyze_source(source) == []


def test_select_and_ignore():
    source = CUDA + "s = x.sum().item()\nprint(x)\n"
    assert [f["rule"] for f in analyze_source(source, select=["SF2"])] == ["SF201"]
    assert [f["rule"] for f in analyze_source(source, ignore=["SF101"])] == ["SF201"]


# --------------------------------------------------------------------------------------------- robustness
def _all_fixture_sources():
    return [p.read_text() for p in sorted((TESTS / "fixtures").glob("*/*/*.py"))]


def test_never_raises_on_truncated_sources():
    """Every prefix of every fixture, cut at each line: parse errors give [], nothing raises."""
    for source in _all_fixture_sources():
        lines = source.splitlines(keepends=True)
        for end in range(len(lines) + 1):
            for findings in (analyze_source("".join(lines[:end])), analyze_source("".join(lines[end:]))):
                assert isinstance(findings, list)


def test_large_cell_is_fast():
    body = "\n".join(f"y{i} = x * {i}\ns{i} = y{i}.sum().item()\nif y{i}.mean() > 0:\n    print(y{i})" for i in range(150))
    # This process's CPU time, not the clock's: under make test's pytest-xdist workers, beside other processes on a
    # 2-core machine, the clock counts their time too.
    start = time.process_time()
    findings = analyze_source(CUDA + body)
    elapsed = time.process_time() - start
    assert len(findings) == 450
    assert elapsed < 2.0, f"{elapsed:.2f} s of CPU for a 600-line cell"


def test_deeply_nested_expressions():
    """Generated code nests deeper than Python's recursion limit: the walk and the inference do not recurse per level."""
    chain = " + ".join(["x"] * 800)
    calls = "x" + ".abs()" * 800
    findings = analyze_source(CUDA + f"y = {chain}\ns = y.item()\nz = {calls}.item()\n")
    assert [(f["rule"], f["certainty"]) for f in findings] == [("SF910", "certain"), ("SF101", "certain"), ("SF101", "certain")]
    assert analyze_source("y = " + " + ".join(["x"] * 5000) + "\n") == []  # beyond the parser's own limit


# --------------------------------------------------------------------------------------------- dispatch by callee
ALIASED = """\
import math
from builtins import float as as_float
from math import floor as fl
from pprint import pprint as pp

import torch
import torch.nn.functional as F
from torch import cuda as c
from torch import linalg as la
from torch.distributed import barrier as bar
from torch.linalg import inv as invert
from torch.nn.functional import one_hot as oh
from torch.nn.utils import clip_grad_norm_ as clip

x = torch.randn(8, device="cuda")
oh(x.long())
F.one_hot(x.long())
c.synchronize()
invert(x.reshape(2, 4)[:, :2])
la.inv(x)
bar()
as_float(x)
fl(x)
math.ceil(x)
pp(x)
clip(params, 1.0, error_if_nonfinite=True)
display(x)
"""


def _corpus() -> list[str]:
    from syncfree.catalog import RULES

    sources = [case.read_text() for case in regen.checker_cases()]
    sources += [path.read_text() for path in sorted((TESTS / "fixtures" / "rewrites").rglob("*.py"))]
    # ui-tests/tests/notebooks only: galata's working folders under ui-tests come and go while it runs
    notebooks = [*sorted((ROOT / "examples").glob("*.ipynb")), *sorted((ROOT / "ui-tests" / "tests").rglob("*.ipynb"))]
    for notebook in notebooks:
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code":
                sources.append("".join(cell["source"]))
    return [*sources, *(rule.example_before for rule in RULES.values()), ALIASED]


def test_rules_see_every_call_they_match():
    # Each rule on calls is shown only the calls of the names in its Rule.calls; over every fixture, notebook and
    # example (and calls spelled through import aliases) that finds what showing it every call finds.
    import ast

    from syncfree.analyze import _Analysis
    from syncfree.catalog import RULES, select_rules

    rules = select_rules(["ALL"])
    found: set[str] = set()
    for source in _corpus():
        python = neutralize_ipython(source)
        if python is None:
            continue
        every_call = _Analysis(ast.parse(python), python, rules, 1, None, by_callee=False).run()
        by_callee = _Analysis(ast.parse(python), python, rules, 1, None).run()
        assert by_callee == every_call, source
        found.update(finding["rule"] for finding in every_call)
    assert {code for code, rule in RULES.items() if rule.calls is not None} <= found
    aliased = rules_at(ALIASED)
    assert {rule for rule, _, _ in aliased} >= {"SF102", "SF201", "SF608", "SF702", "SF704", "SF801", "SF902"}
    assert [line for rule, line, _ in aliased if rule == "SF102"] == [22, 23, 24]


def test_a_limit_keeps_the_first_findings_and_stops_the_walk():
    # %%syncfree reports at most 1,000 findings: its static pass stops once it has them, and what it keeps is
    # what the whole walk would have put first (a function defined at the top is still walked).
    cell = ("import torch\n"
            "x = torch.randn(64, device='cuda')\n"
            "def helper(t):\n"
            "    return t.tolist()\n"
            + "".join(f"v{i} = x[{i % 64}].item() + helper(x)[0]\n" for i in range(2000)))
    everything = analyze_source(cell)
    limited = analyze_source(cell, limit=1000)
    assert len(everything) == 2001 and 1000 < len(limited) < 1010
    assert limited[:1000] == everything[:1000]
    assert any(f["rule"] == "SF204" and f["range"]["line"] == 4 for f in limited)


def test_values_keep_their_fields_and_stay_frozen():
    import inspect

    from syncfree.catalog.scope import Value, replace

    parameters = inspect.signature(Value.__init__).parameters
    assert list(Value.FIELDS) == [name for name in parameters if name != "self"]
    value = Value("tensor", "cuda", ndim=2)
    assert list(value.__dict__) == list(Value.FIELDS)
    assert replace(value, device=None) == Value("tensor", None, ndim=2)
    assert replace(value, device=None) != value and hash(Value("tensor", "cuda", ndim=2)) == hash(value)
    assert repr(Value("python")) == (
        "Value(kind='python', device=None, dtype=None, pinned=False, int_data=None, const=None, ndim=None)"
    )
    with pytest.raises(AttributeError):
        value.kind = "numpy"  # type: ignore[misc]


# --------------------------------------------------------------------------------------------- host code
PROCESSOR = '''\
import torch

def prepare_annotation(image, target):
    boxes = torch.as_tensor(target["boxes"], device=image.device)
    keep = boxes[:, 2] > boxes[:, 0]
    return boxes[keep]

def shared_area(masks):
    return masks.sum().item()

class FooImageProcessor(TorchvisionBackend):
    def _preprocess(self, images, annotations):
        for image, target in zip(images, annotations):
            prepare_annotation(image, target)
            self.resize_annotation(target)
            shared_area(target["masks"])
        sizes = torch.tensor([len(images)]).cuda()
        return sizes.item()

    def resize_annotation(self, target):
        return target["size"].tolist()

    def post_process_object_detection(self, outputs, threshold):
        scores = outputs.logits.softmax(-1)
        keep = scores > threshold
        shared_area(outputs.pred_masks)
        return scores[keep].tolist()

class BarImageProcessor(FooImageProcessor):
    def __call__(self, images):
        def helper(x):
            return x.max().item()
        return helper(images)

class FooPipeline(Pipeline):
    def preprocess(self, inputs):
        return inputs["size"].tolist()

    def _forward(self, model_inputs):
        return model_inputs["sizes"].tolist()

    def postprocess(self, outputs):
        return outputs["logits"].argmax().item()
'''


def test_preprocessing_code_is_a_possible_sync_left_out_by_default():
    """Functions reached from a data processor's preprocessing entry points (and a pipeline's preprocess and
    postprocess, which transformers hands CPU tensors) run on the host by construction: their likely findings become
    possible, left out unless asked for; post-processing of model outputs, helpers it shares, a pipeline's _forward
    and findings the code shows on CUDA keep their certainty."""
    everything = rules_at(PROCESSOR, possible=True)
    by_line = {line: (rule, certainty) for rule, line, certainty in everything}
    lines = PROCESSOR.splitlines()

    def at(text: str) -> tuple[str, str]:
        return by_line[next(number for number, line in enumerate(lines, 1) if text in line)]

    assert at("return boxes[keep]") == ("SF601", "possible")  # a module function reached from _preprocess
    assert at('target["size"].tolist()') == ("SF204", "possible")  # a method reached through self.
    assert at("x.max().item()") == ("SF101", "possible")  # a def inside __call__ of an in-file subclass
    assert at('inputs["size"].tolist()') == ("SF204", "possible")  # Pipeline.preprocess
    assert at('outputs["logits"].argmax().item()') == ("SF101", "possible")  # Pipeline.postprocess: CPU outputs
    assert at("return masks.sum().item()") == ("SF101", "likely")  # shared with post-processing
    assert at("return scores[keep].tolist()") == ("SF204", "likely")  # model outputs
    assert at('model_inputs["sizes"].tolist()') == ("SF204", "likely")  # _forward: inputs on the model's device
    assert at("return sizes.item()") == ("SF101", "certain")  # the code puts it on CUDA
    default = rules_at(PROCESSOR)
    assert [finding for finding in default if finding[2] == "possible"] == []
    assert sorted(default) == sorted(finding for finding in everything if finding[2] != "possible")


def test_logits_processors_and_models_are_not_host_code():
    source = PROCESSOR.replace("TorchvisionBackend", "LogitsProcessor").replace("ImageProcessor", "LogitsProcessor")
    source = source.replace("(Pipeline)", "(nn.Module)")
    assert not [finding for finding in rules_at(source, possible=True) if finding[2] == "possible"]


DATA_PIPELINE = '''\
import torch
from torch.utils.data import Sampler, Dataset as BaseDataset

class WeightedBatchSampler(Sampler[list]):
    def __init__(self, weights):
        self.weights = weights

    def _draw(self):
        return int(torch.multinomial(self.weights, 1).item())

    def __iter__(self):
        yield self._draw()

class CropDataset(BaseDataset):
    def __init__(self, images):
        self.images = images

    def crop(self, image):
        top = image.argmax().item()
        return image[top:]

    def __getitem__(self, index):
        return self.crop(self.images[index])

    def statistics(self, batch):
        return batch.mean().item()

class OnGpu(torch.utils.data.Dataset):
    def __getitem__(self, index):
        return self.data[index].sum().item()

class TokenSampler(nn.Module):
    def forward(self, logits):
        return logits.argmax().item()
'''


def test_samplers_and_datasets_of_torch_utils_data_are_host_code():
    """A sampler (every method) and what a dataset's __getitem__ reaches run in the data pipeline, on the host: their
    likely findings become possible. A dataset's other methods, and a class named like a sampler that is not
    torch.utils.data's, keep theirs."""
    everything = rules_at(DATA_PIPELINE, possible=True)
    by_line = {line: (rule, certainty) for rule, line, certainty in everything}
    lines = DATA_PIPELINE.splitlines()

    def at(text: str) -> tuple[str, str]:
        return by_line[next(number for number, line in enumerate(lines, 1) if text in line)]

    assert at("torch.multinomial(self.weights, 1).item()") == ("SF101", "possible")  # any method of a sampler
    assert at("image.argmax().item()") == ("SF101", "possible")  # reached from __getitem__
    assert at("self.data[index].sum().item()") == ("SF101", "possible")  # torch.utils.data.Dataset spelled out
    assert at("batch.mean().item()") == ("SF101", "likely")  # not reached from the data entry points
    assert at("logits.argmax().item()") == ("SF101", "likely")  # a model named like a sampler
    source = DATA_PIPELINE.replace("from torch.utils.data import", "from mylib.data import")
    source = source.replace("torch.utils.data.Dataset", "mylib.Dataset")
    assert not [finding for finding in rules_at(source, possible=True) if finding[2] == "possible"]


OPTIMIZER = '''\
import torch
from torch import Tensor
from torch.optim import Optimizer

def _get_value(x):
    return x.item() if isinstance(x, torch.Tensor) else x

def _check_scalar(value):
    if torch.is_tensor(value):
        value = float(value.detach().cpu())
    else:
        value = float(value)

def _single_tensor_step(params, grads, state_steps, lr):
    for param, grad, step_t in zip(params, grads, state_steps):
        step = _get_value(step_t)
        if torch.is_tensor(step):
            cap = torch.tensor(0.999, dtype=step.dtype, device=step.device)
        else:
            cap = 0.999
        if grad.norm().item() > 1.0:
            grad.div_(2)
        param.add_(grad, alpha=-lr)

class MyAdam(Optimizer):
    def __init__(self, params, lr=1e-3):
        _check_scalar(lr)
        super().__init__(params, dict(lr=lr))

    def step(self):
        for group in self.param_groups:
            lr = group["lr"].item() if isinstance(group["lr"], Tensor) else group["lr"]
            _single_tensor_step(group["params"], [p.grad for p in group["params"]], [], lr)

def is_causal(mask):
    flag = torch.all(mask <= 0)
    return flag.item() if isinstance(flag, torch.Tensor) else flag

class Logger:
    def log(self, metrics):
        return {k: v.item() if isinstance(v, Tensor) else v for k, v in metrics.items()}
'''


def test_an_optimizers_step_counts_and_scalars_are_possible_syncs():
    """In optimizer code, the tensor branch of a number-or-tensor test (torch.optim's _get_value: step counts are
    CPU tensors unless capturable or fused, hyperparameters Python numbers) is a possible sync, left out by default.
    A gradient's norm in the same function, a function the optimizer does not reach, another class, and a file that
    defines no optimizer keep theirs."""
    everything = rules_at(OPTIMIZER, possible=True)
    by_line: dict[int, list[tuple[str, str]]] = {}
    for rule, line, certainty in everything:
        by_line.setdefault(line, []).append((rule, certainty))
    lines = OPTIMIZER.splitlines()

    def at(text: str) -> list[tuple[str, str]]:
        return by_line[next(number for number, line in enumerate(lines, 1) if text in line)]

    assert at("return x.item() if isinstance(x, torch.Tensor)") == [("SF101", "possible")]  # reached via a helper
    assert at("float(value.detach().cpu())") == [("SF301", "possible")]  # reached from __init__
    assert at("torch.tensor(0.999, dtype=step.dtype") == [("SF401", "possible")]  # device=step.device
    assert at('group["lr"].item()') == [("SF101", "likely")]  # a subscript is tested, not a name: kept
    assert at("grad.norm().item()") == [("SF101", "likely")]  # a gradient in the same function
    assert at("return flag.item()") == [("SF101", "likely")]  # a mask check beside the optimizer, not reached
    assert at("v.item() if isinstance(v, Tensor)") == [("SF101", "likely")]  # a logger's metrics
    assert not [finding for finding in rules_at(OPTIMIZER) if finding[2] == "possible"]
    # No optimizer class, no torch.optim.optimizer internals: no demotion.
    source = OPTIMIZER.replace("(Optimizer)", "(object)")
    assert not [finding for finding in rules_at(source, possible=True) if finding[2] == "possible"]
    # A file of optimizer internals (it imports torch.optim.optimizer's private helpers) is optimizer code whole.
    helpers = "from torch.optim.optimizer import _default_to_fused_or_foreach\n" + source
    assert ("SF101", "possible") in [
        (rule, certainty) for rule, line, certainty in rules_at(helpers, possible=True)
        if lines[line - 2].strip().startswith("return flag.item()")
    ]


def test_a_distribution_of_python_numbers_samples_on_the_cpu():
    """torch.distributions makes Python parameters into CPU tensors (broadcast_all, Beta's torch.tensor([a, b])):
    what it samples is on the CPU; a distribution of a CUDA tensor samples on CUDA."""
    source = (
        "import torch\n"
        "def f(alpha: float, x):\n"
        "    a = torch.distributions.Beta(alpha, alpha).sample().item()\n"
        "    b = torch.distributions.Beta(0.4, 0.4).sample((4,)).tolist()\n"
        "    c = torch.distributions.Normal(x.cuda(), 1.0, validate_args=False).sample().item()\n"
        "    d = torch.distributions.Normal(x, 1.0, validate_args=False).sample().item()\n"
    )
    found = {(rule, line): certainty for rule, line, certainty in rules_at(source, ignore=["SF910", "SF302"])}
    assert found == {("SF101", 5): "certain", ("SF101", 6): "likely"}

def test_a_collective_named_in_an_earlier_cell_is_still_looked_back_for():
    """SF904 looks back for the collective that wrote a tensor only in cells that can call one: this cell's text
    names none, but an earlier cell bound ``ar`` to all_reduce."""
    cell = "t = torch.ones(1, device='cuda')\nar(t)\nif t > 0:\n    pass\n"
    earlier = Bindings()
    analyze_source("import torch\nfrom torch.distributed import all_reduce as ar\n", earlier=earlier)
    assert ("SF904", 3, "likely") in rules_at(cell, earlier=earlier)
    assert "SF904" not in {rule for rule, _, _ in rules_at(cell.replace("ar(t)", "print(t.shape)"), earlier=earlier)}


# --------------------------------------------------------------------------------------------- issue 40
# What a value is, from where it comes and what its type says, on code the rules were not tuned on.
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # a method annotated `torch.Tensor` that its own class calls with NumPy data (a scheduler's sigmas): a
        # private one gets what its callers pass, a public one is a tensor only on some paths
        ("import numpy as np\nclass S:\n    def set_timesteps(self, n):\n        s = np.linspace(0, 1, n)\n"
         "        a = self._karras(in_sigmas=np.flip(s).copy())\n        b = self.karras(s.copy(), n)\n"
         "    def _karras(self, in_sigmas: torch.Tensor):\n        return in_sigmas[-1].item()\n"
         "    def karras(self, in_sigmas: torch.Tensor, n: int):\n        return in_sigmas[0].item()\n",
         [("SF101", 11, "possible")]),
        # ... and a private method called with a value the text does not tell keeps its annotation
        ("class S:\n    def run(self, logs):\n        self._stop(logs['loss'])\n"
         "    def _stop(self, current: torch.Tensor):\n        return current.item()\n", [("SF101", 6, "likely")]),
        # an index with no tensor: a DataFrame's columns, a tuple of slices, a list of names
        ("import pandas as pd\ndef f(df: pd.DataFrame, b, slices):\n    a = df[['col']]\n    c = b[tuple(slices)]\n"
         "    d = b[['x', 'y']]\n    return df[[0, 1]], b[[0, 1]]\n", [("SF501", 7, "likely")]),
        # x[m] = a 0-dim CPU tensor takes masked_fill_ as a number does; a 0-dim CUDA value is read back
        ("x = torch.randn(4, device='cuda')\nm = x > 0\nx[m] = torch.tensor(1.0)\nx[m] = 1.0\n"
         "x[m] = torch.zeros((), device='cuda')\n", [("SF601", 6, "likely")]),
        # a union of a tensor and a number: a condition on it syncs only when it is a tensor
        ("from typing import Optional, Union\ndef f(n: Optional[Union[int, torch.Tensor]], t: 'torch.Tensor | None'):\n"
         "    if n > 0:\n        pass\n    if t:\n        pass\n", [("SF103", 4, "possible"), ("SF103", 6, "likely")]),
        # ... and used as a size or a number: possible too
        ("from typing import Optional, Union\ndef f(n: Optional[Union[int, torch.Tensor]], t: torch.Tensor):\n"
         "    a = torch.zeros(n)\n    b = range(n)\n    c = range(t)\n    d = torch.zeros(t)\n",
         [("SF102", 4, "possible"), ("SF102", 5, "possible"), ("SF102", 6, "likely")]),
        # an instance's attributes: what the class's methods store in them
        ("import numpy as np\nclass Scheduler:\n    def __init__(self):\n"
         "        self.masks = torch.nn.ParameterDict({'a': torch.nn.Parameter(torch.ones(3))})\n"
         "        self.timesteps = torch.from_numpy(np.arange(10))\n"
         "    def set_timesteps(self, device):\n        self.timesteps = torch.from_numpy(np.arange(10)).to(device)\n"
         "        self.sigmas = torch.ones(3).to(device)\n        self.sigmas = self.sigmas.to('cpu')\n"
         "    def step(self, x, t):\n        y = x[self.masks['a'] > 0]\n        i = (self.timesteps == t).nonzero()\n"
         "        return self.sigmas[-1].item()\n",
         [("SF302", 8, "likely"), ("SF302", 9, "likely"), ("SF301", 10, "likely"), ("SF601", 12, "likely"),
          ("SF602", 13, "likely")]),
        # ... believed only once every store of the class's text is walked (a later method may store a tensor)
        ("class C:\n    def __init__(self):\n        self.best = 0.0\n    def check(self):\n"
         "        return self.best.item()\n    def update(self, current: torch.Tensor):\n"
         "        self.best = current\n    def done(self):\n        return self.best.item()\n",
         [("SF101", 6, "likely"), ("SF101", 10, "likely")]),
        # ... and right after a store of the method's own body, what it stored (`self.sigmas = sigmas.to("cpu")`)
        ("class S:\n    def __init__(self, sigmas: torch.Tensor):\n        self.sigmas = sigmas.to('cpu')\n"
         "        self.sigma_min = self.sigmas[-1].item()\n    def set(self, sigmas: torch.Tensor):\n"
         "        self.sigmas = sigmas\n", [("SF301", 4, "likely")]),
        # a function annotated to take and return tensors that returns a NumPy array: its Tensor annotations are
        # not believed (diffusers' `_convert_to_karras`)
        ("import numpy as np\ndef karras(in_sigmas: torch.Tensor, n: int) -> torch.Tensor:\n"
         "    lo = in_sigmas[-1].item()\n    ramp = np.linspace(0, 1, n)\n    sigmas = lo * ramp\n    return sigmas\n"
         "def proper(x: torch.Tensor) -> torch.Tensor:\n    lo = x[-1].item()\n    return x * lo\n",
         [("SF101", 4, "possible"), ("SF101", 9, "likely")]),
        # what a function of the file returns (walked before its caller), and a factory whose **kwargs may hold a device
        ("def betas(n):\n    return torch.tensor([0.1] * n, dtype=torch.float32)\n"
         "def kernel(n, device=None):\n    dd = dict(device=device)\n    return torch.eye(n, **dd)\n"
         "class S:\n    def __init__(self, n):\n        self.betas = betas(n)\n        self.betas[-1] = 0.5\n"
         "        k = kernel(n, device='cuda')\n        k[0, 0] = 1.0\n", [("SF502", 12, "likely")]),
        # a module's buffer follows the module: torch.as_tensor(self.kernel, device=...) copies no Python data
        ("class L(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
         "        self.register_buffer('kernel', torch.ones(3, 3))\n    def forward(self, pred: torch.Tensor):\n"
         "        k = torch.as_tensor(self.kernel, device=pred.device)\n        w = torch.as_tensor([1.0], device=pred.device)\n"
         "        return k * w\n", [("SF401", 8, "likely")]),
        # torch.Size is a tuple; a branch only TorchScript takes; a union with a list: its own method says tensor
        ("def f(boxes: torch.Tensor, cys: torch.Tensor | list[float], n: int | list[int] | torch.Tensor):\n"
         "    if boxes.shape[-2:] == torch.Size([4, 2]):\n        pass\n    if torch.jit.is_scripting():\n"
         "        return torch.tensor([1.0], device=boxes.device)\n    c = cys.tolist() if isinstance(cys, torch.Tensor) else cys\n"
         "    if n:\n        pass\n",
         [("SF401", 6, "possible"), ("SF204", 7, "likely"), ("SF103", 8, "possible")]),
        # methods only NumPy has (`astype`, a random generator's `choice`) give NumPy data; NumPy data times a value
        # the text does not tell may be a tensor (torch's __array_priority__), if that value is one: possible (issue
        # 40: the premise, a CUDA tensor, is not established; transformers' pp_doclayout passes NumPy boxes there)
        ("import numpy as np\ndef f(self, labels, boxes, scale):\n    a = labels.astype(np.int16).tolist()\n"
         "    b = self.R.choice(4, 2).tolist()\n    x = boxes[0].astype(np.int32)\n    return (x * scale).item()\n",
         [("SF101", 7, "possible")]),
        # a function's annotation holds where its calls pass values the text does not tell
        ("def iou(pred: torch.Tensor, device='cpu'):\n    return torch.as_tensor(pred == 1, device=device)\n"
         "def run(x, d):\n    return iou(x, d)\n", []),
        # torch.load gives whatever was saved (a checkpoint's dict), through the file's own function too
        ("def load(path):\n    return torch.load(path, map_location='cpu')\n"
         "def resume(path):\n    ckpt = load(path)\n    if ckpt['version'] > 1:\n        pass\n", []),
        # `self` in a torch.Tensor subclass is a tensor
        ("class T(torch.Tensor):\n    def g(self, x: torch.Tensor):\n        mask = x.sum(1) > 0\n"
         "        return self[:, mask].tolist()\n", [("SF204", 5, "likely"), ("SF601", 5, "likely")]),
        # a branch that runs only when an optional attribute of the instance is set (an offload hook)
        ("class P:\n    def __call__(self, x):\n"
         "        if hasattr(self, 'final_offload_hook') and self.final_offload_hook is not None:\n"
         "            self.unet.to('cpu')\n        if getattr(self, '_hook', None) is not None:\n"
         "            x.cpu()\n        if not hasattr(self, 'cache'):\n            x.cpu()\n"
         "        if hasattr(x, 'cpu'):\n            x.cpu()\n",
         [("SF301", 5, "possible"), ("SF301", 7, "possible"), ("SF301", 9, "likely"), ("SF301", 11, "likely")]),
    ],
)
def test_where_values_come_from_and_what_type_they_have(source, expected):
    assert sorted(rules_at("import torch\n" + source, select=["ALL"], possible=True)) == sorted(expected)


def test_a_call_of_a_walrus_is_followed_not_a_crash():
    """`(f := g)(x)` called a NamedExpr, which has no `.id`: the whole check stopped with an AttributeError. The call
    goes to the function it names, as `g(x)` does."""
    source = "def g(t):\n    return t.item()\n(f := g)(torch.ones(2, device='cuda'))\n"
    assert sorted(rules_at("import torch\n" + source)) == [("SF101", 3, "certain")]


def test_a_call_of_a_module_itself_is_no_crash():
    """`torch()` (a module called, as a typo or a callable module) qualifies to a name without a dot: the static pass
    took its last part with `rsplit(".", 1)[1]`, an IndexError that stopped the whole check."""
    assert rules_at("import torch\nimport numpy as np\nx = torch()\ny = np(x)\n") == []


def test_issue_40s_misses_are_possible_findings_with_their_reason():
    """Lines that sync on a GPU that the text cannot type (issue 40's misses): found as `possible` (off by default),
    each saying what it waits on; a mask named so beside a real mask leaves the real one to decide."""
    source = textwrap.dedent("""\
        import torch

        class Scheduler:
            def step(self, t):
                return (self.timesteps == t).nonzero()

        class Masked(torch.Tensor):
            def pick(self, mask):
                return self[:, mask]

        def select(x: torch.Tensor, mask, rows_mask, scores: torch.Tensor):
            keep = scores > 0
            return x[mask], x[rows_mask, keep]

        def table(arr, mask):
            return arr[mask], arr.nonzero
        """)
    findings = analyze_source(source, possible=True)
    got = {(f["rule"], f["range"]["line"], f["certainty"]) for f in findings}
    assert got == {("SF602", 5, "possible"), ("SF601", 9, "possible"), ("SF601", 13, "possible"),
                   ("SF601", 13, "likely")}, findings
    messages = {f["range"]["line"]: f["message"] for f in findings if f["certainty"] == "possible"}
    assert messages[5].endswith("(possible: NumPy arrays and pandas objects have `nonzero()` too, and the text does "
                                "not say this is a tensor)")
    assert "(possible: only when `mask` is a boolean tensor: its name says a mask" in messages[9]
    assert messages[9].count("(possible:") == 1
    assert [f for f in analyze_source(source) if f["certainty"] == "possible"] == []
