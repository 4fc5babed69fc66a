"""Write the notebooks that the galata tests open: cells with syncfree reports already in
their outputs, so the UI tests need neither a GPU nor the kernel side.

    PYTHONPATH=python_helper .venv/bin/python ui-tests/tests/notebooks/generate.py [NAME.ipynb ...]

The findings (ranges, fixes) come from the real static pass and the rule texts from the
catalog (``syncfree.analyze``, ``syncfree.report.build_report``); the measured sites are
written here, with counts and times of the order measured on an H200
(shared/sync-facts.md). Every report is validated against report.schema.json and its
``source_hash`` is the hash of the exact cell text, so markers are fresh when opened.

``hostile.ipynb`` holds reports that a hand-edited or malicious notebook could carry.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from syncfree.analyze import analyze_source
from syncfree.kinds import kind_label
from syncfree.report import build_report, mime_bundle, source_hash, validate_report

HERE = Path(__file__).parent
CUDA = {"kind": "cuda", "name": "NVIDIA H200", "torch": "2.11.0+cu130"}
PREDICT = {"kind": "predict", "name": "CPU stand-ins (no CUDA device)", "torch": "2.13.0+cpu"}


def site(line: int, kind: str, count: int, blocked_ms: float | None, rule: str | None, message: str,
         chain: list[int] | None = None, frames: list[dict] | None = None, predicted: bool = False) -> dict:
    entry = {
        "line": line,
        "kind": kind,
        "count": count,
        "blocked_ms": blocked_ms,
        "chain": chain or [line],
        "frames": frames or [],
        "rule": rule,
        "message": message,
        "label": kind_label(kind),
        "thread": None,
    }
    if predicted:
        entry["predicted"] = True
    return entry


def code_cell(cell_id: str, source: str, outputs: list[dict] | None = None, count: int | None = None) -> dict:
    return {
        "id": cell_id,
        "cell_type": "code",
        "execution_count": count,
        "metadata": {},
        "source": source,
        "outputs": outputs or [],
    }


def report_output(report: dict) -> dict:
    return {"output_type": "display_data", "data": mime_bundle(report), "metadata": {}}


def raw_report_output(data: object) -> dict:
    """A report output as a notebook file could hold it, valid or not."""
    return {
        "output_type": "display_data",
        "data": {"application/vnd.syncfree.report.v1+json": data, "text/plain": "syncfree report"},
        "metadata": {},
    }


def checked_report(source: str, *, sites: list[dict], mode: str = "warn", device: dict = CUDA,
                   cell_id: str, wall_ms: float = 0.0, notes: tuple[str, ...] = ()) -> dict:
    body_first_line = 2 if source.startswith("%%syncfree") else 1
    body = source.split("\n", 1)[1] if body_first_line == 2 else source
    findings = analyze_source(body, first_line=body_first_line)
    report = build_report(source=source, device=device, mode=mode, sites=sites, findings=findings,
                          wall_ms=wall_ms, cell_id=cell_id, notes=notes)
    validate_report(report)
    return report


def notebook(cells: list[dict]) -> dict:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": cells,
    }


# ---------------------------------------------------------------------------- syncs.ipynb

TRAIN = "\n".join([
    "%%syncfree",
    "x = torch.randn(4096, 4096, device=\"cuda\")",
    "total = 0.0",
    "for step in range(64):",
    "    y = x @ x",
    "    total += y.sum().item()",
    "print(\"last\", y.mean())",
])

PREPARE = "\n".join([
    "%%syncfree",
    "scores = torch.rand(100_000, device=\"cuda\")",
    "weights = torch.tensor([0.5, 2.0], device=\"cuda\")",
    "best = max(scores.sum(), scores.mean())",
    "keep = scores[scores > 0.5]",
    "if keep.numel() == 0:",
    "    print(\"nothing kept\", torch.nonzero(scores))",
])

PREDICTED = "\n".join([
    "%%syncfree",
    "labels = torch.randint(0, 10, (1000,), device=\"cuda\")",
    "classes = torch.unique(labels)",
])

TORCH_FRAMES = [
    {"file": "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", "line": 568, "name": "__repr__"},
    {"file": "/opt/venv/lib/python3.11/site-packages/torch/_tensor_str.py", "line": 722, "name": "_str"},
    {"file": "/opt/venv/lib/python3.11/site-packages/torch/_tensor_str.py", "line": 643, "name": "_str_intern"},
]


def syncs_notebook() -> dict:
    train = checked_report(TRAIN, cell_id="train", wall_ms=1450.0, sites=[
        site(6, "item", 64, 41.2, "SF101", ".item() synced 64x: the CPU waited for each matmul"),
        site(7, "print", 8, 0.9, "SF201", "print of a CUDA tensor synced 8x", frames=TORCH_FRAMES),
    ])
    prepare = checked_report(PREPARE, cell_id="prepare", wall_ms=12.0, sites=[
        site(5, "mask_index", 1, 2.4, "SF601", "x[mask] synced: its size depends on the mask"),
        site(4, "python_bool", 2, 0.3, "SF104", "max() compared tensors on the CPU"),
        site(3, "tensor_from_python", 1, 0.06, "SF401", "torch.tensor(list, device='cuda') copied from pageable memory"),
    ])
    predicted = checked_report(PREDICTED, cell_id="predicted", mode="predict", device=PREDICT, wall_ms=3.0, sites=[
        site(3, "unique", 1, None, "SF604", "torch.unique sizes its output on the host", predicted=True),
    ], notes=("No CUDA device: syncs were predicted on CPU stand-ins.",))
    return notebook([
        {"id": "intro", "cell_type": "markdown", "metadata": {},
         "source": "# Where does this notebook wait for the GPU?"},
        code_cell("imports", "import torch\n%load_ext syncfree", count=1),
        code_cell("train", TRAIN, [report_output(train)], count=2),
        code_cell("prepare", PREPARE, [report_output(prepare)], count=3),
        code_cell("predicted", PREDICTED, [report_output(predicted)], count=4),
    ])


# ---------------------------------------------------------------------------- hostile.ipynb

HOSTILE_CELL = "%%syncfree\nx = t.sum().item()\nprint(x)"
EVIL = "<img src=x onerror=\"window.syncfreePwned=1\"><script>window.syncfreePwned=1</script>"


def hostile_notebook() -> dict:
    valid = checked_report(HOSTILE_CELL, cell_id="valid", sites=[
        site(2, "item", 3, 1.5, "SF101", "item synced 3x"),
    ])
    # Valid per the schema, but every string is markup and the lines are far outside the cell.
    markup = copy.deepcopy(valid)
    markup["cell_id"] = "markup"
    markup["sites"] = [
        site(2, "item", 1, 0.5, "SF101", EVIL, frames=[{"file": EVIL, "line": 1, "name": EVIL}]),
        site(999, "item", 1, 0.5, "SF101", "a line far past the end of the cell"),
    ]
    markup["notes"] = [EVIL]
    markup["rules"]["SF101"] = {**markup["rules"]["SF101"], "title": EVIL, "why": EVIL, "example_before": EVIL}
    markup["findings"] = [{"rule": "SF101", "range": {"line": 2, "col": 0, "end_line": 2, "end_col": 5},
                           "message": EVIL, "certainty": "certain",
                           "fix": {"title": EVIL, "safety": "review", "reason": EVIL,
                                   "edits": [{"range": {"line": 2, "col": 0, "end_line": 2, "end_col": 1},
                                              "text": EVIL}]}}]
    validate_report(markup)

    wrong_types = copy.deepcopy(valid)
    wrong_types["sites"][0]["line"] = "2"
    wrong_types["totals"]["syncs"] = -5
    unknown = {**copy.deepcopy(valid), "script": "<script>window.syncfreePwned=1</script>"}
    huge = copy.deepcopy(valid)
    huge["sites"][0]["message"] = "x" * 20_000
    negative = copy.deepcopy(valid)
    negative["sites"][0]["line"] = -3
    negative["sites"][0]["chain"] = [-3]

    cells = [
        code_cell("not-json", HOSTILE_CELL, [raw_report_output("{this is not json")]),
        code_cell("wrong-types", HOSTILE_CELL, [raw_report_output(wrong_types)]),
        code_cell("unknown-property", HOSTILE_CELL, [raw_report_output(unknown)]),
        code_cell("huge-string", HOSTILE_CELL, [raw_report_output(huge)]),
        code_cell("negative-line", HOSTILE_CELL, [raw_report_output(negative)]),
        code_cell("array", HOSTILE_CELL, [raw_report_output([1, 2, 3])]),
        code_cell("markup", HOSTILE_CELL, [raw_report_output(markup)]),
        code_cell("valid", HOSTILE_CELL, [report_output(valid)]),
    ]
    return notebook(cells)


# ---------------------------------------------------------------------------- review39.ipynb

# A report of this cell, crafted with a second site past the cell's end (issue 39, item 12c).
CRAFTED_CELL = "%%syncfree\nx = t.sum().item()\nprint(x)"
DDP_CELL = "%syncfree run --standalone --nproc-per-node 2 ddp_train.py"


def merged_output() -> dict:
    """The display output of a 2-rank job's merged report (issue 39, item 7), made by the
    kernel side's own merge (syncfree.distributed): rank 0 alone syncs on line 55."""
    import os
    import tempfile

    from syncfree.distributed import MergedReport, RankInfo, RankReport
    from syncfree.distributed.display import mime_bundle as merged_bundle

    def rank_site(job: str, line: int, count: int, kind: str, rule: str) -> dict:
        return {"file": f"{job}/ddp_train.py", "line": line, "kind": kind, "count": count, "blocked_ms": None,
                "chain": [line], "chain_files": [f"{job}/ddp_train.py"], "frames": [], "rule": rule,
                "label": kind_label(kind), "message": "", "predicted": True, "allowed": False}

    here = os.getcwd()
    with tempfile.TemporaryDirectory() as job:
        # The kernel runs in the notebook's folder, where the job's script is: paths are relative to it.
        os.chdir(job)
        try:
            ranks = []
            for rank, sites in ((0, [rank_site(job, 53, 10, "item", "SF101"), rank_site(job, 55, 1, "format", "SF202")]),
                                (1, [rank_site(job, 53, 10, "item", "SF101")])):
                env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
                       "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "none",
                       "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
                syncs = sum(s["count"] for s in sites)
                report = {"mode": "predict", "device": {"name": PREDICT["name"]}, "sites": sites, "error": None,
                          "notes": [], "totals": {"syncs": syncs, "counted": syncs, "sites": len(sites),
                                                  "blocked_ms": None, "wall_ms": 1.0},
                          "predict_table": None}
                ranks.append(RankReport(RankInfo.from_environ(env), report, f"{job}/ddp_train.py", [], job, 0,
                                        1_700_000_000.0, 1_700_000_001.0))
            bundle = merged_bundle(MergedReport(ranks))
        finally:
            os.chdir(here)
    text = json.dumps(bundle)
    assert job not in text, "the temporary folder leaked into the fixture"
    return {"output_type": "display_data", "data": bundle, "metadata": {}}


def review39_notebook() -> dict:
    crafted = checked_report(CRAFTED_CELL, cell_id="crafted", sites=[
        site(2, "item", 3, 1.5, "SF101", "item synced 3x"),
    ])
    # Valid per the schema, but its second site is on line 9 of a 3-line cell.
    crafted["sites"].append(site(9, "item", 5, 4.0, "SF101", "a line past the end of the cell"))
    crafted["totals"] = {**crafted["totals"], "syncs": 8, "sites": 2, "blocked_ms": 5.5}
    validate_report(crafted)
    return notebook([
        code_cell("crafted", CRAFTED_CELL, [report_output(crafted)], count=1),
        code_cell("ddp", DDP_CELL, [merged_output()], count=2),
    ])


# ---------------------------------------------------------------------------- cost.ipynb

# A training loop measured on a GPU with its cost (issue 37): what each site's syncs lose of
# the GPU's time, of the order measured on an H200 (issue 37's table): the mask index costs
# most though the `.item()` blocks longer; the table built on line 2 is paid once.
COSTED = "\n".join([
    "%%syncfree --cost",
    "table = torch.tensor(values, device=\"cuda\")",
    "for step in range(100):",
    "    out = model(x)",
    "    loss = out[out > 0].sum()",
    "    total = loss.item()",
    "    kept = out[out > 1].sum().item()",
])

COST_PREDICTED = "\n".join([
    "%%syncfree",
    "labels = torch.randint(0, 10, (1000,), device=\"cuda\")",
    "for step in range(3):",
    "    n = labels.sum().item()",
])


def costed_site(line: int, kind: str, count: int, blocked_ms: float, cost_ms: float, rule: str,
                phase: str | None = None, busy_ms: float = 6200.0) -> dict:
    entry = site(line, kind, count, blocked_ms, rule, f"{kind_label(kind)} synced {count}x")
    entry.update({"cost_ms": cost_ms, "cost_each_ms": round(cost_ms / count, 3),
                  "cost_share": round(cost_ms / busy_ms, 4)})
    if phase:
        entry["phase"] = phase
    return entry


def cost_notebook() -> dict:
    sites = [
        costed_site(2, "tensor_from_python", 1, 150.0, 3.2, "SF401", phase="once"),
        costed_site(5, "mask_index", 100, 1.9, 173.0, "SF601"),
        costed_site(6, "item", 100, 5960.0, 47.0, "SF101"),
        costed_site(7, "mask_index", 100, 1.2, 12.0, "SF601"),
        costed_site(7, "item", 100, 0.8, 2.5, "SF101"),
    ]
    costed = checked_report(COSTED, cell_id="costed", wall_ms=6400.0, sites=sites)
    costed["totals"] = {**costed["totals"], "cost_ms": round(sum(s["cost_ms"] for s in sites), 3),
                        "gpu_busy_ms": 6200.0, "gpu_idle_ms": 260.0}
    validate_report(costed)
    predicted = checked_report(COST_PREDICTED, cell_id="predicted", mode="predict", device=PREDICT, wall_ms=3.0,
                               sites=[site(4, "item", 3, None, "SF101", "item would sync 3x", predicted=True)])
    return notebook([
        code_cell("costed", COSTED, [report_output(costed)], count=1),
        code_cell("predicted", COST_PREDICTED, [report_output(predicted)], count=2),
    ])


NOTEBOOKS = {"syncs.ipynb": syncs_notebook, "hostile.ipynb": hostile_notebook, "review39.ipynb": review39_notebook,
             "cost.ipynb": cost_notebook}


def main(names: list[str]) -> None:
    """Write the named notebooks (all of them without names)."""
    for name in names or NOTEBOOKS:
        content = NOTEBOOKS[name]()
        (HERE / name).write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {HERE / name}")
    # The hash the frontend recomputes must match the one written (same text, same bytes).
    for name in ("syncs.ipynb", "review39.ipynb", "cost.ipynb"):
        nb = json.loads((HERE / name).read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                data = out.get("data", {}).get("application/vnd.syncfree.report.v1+json")
                if data:
                    assert data["source_hash"] == source_hash(cell["source"]), cell["id"]


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
