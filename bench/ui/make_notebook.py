"""Write the notebook that the UI benchmark opens: a scratch cell without a report, then
CELLS code cells whose saved reports hold SITES sites each (one per line), as a long
training notebook after a full `%syncfree on` run would look.

    PYTHONPATH=python_helper .venv/bin/python bench/ui/make_notebook.py OUT.ipynb [CELLS [SITES]]

Each report is built by `syncfree.report.build_report` (catalog texts included) and
its `source_hash` matches the cell, so every marker is fresh when the notebook opens.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from syncfree.report import build_report, mime_bundle, validate_report

KINDS = [("item", "SF101"), ("print", "SF201"), ("to_host", "SF301"), ("mask_index", "SF601"), ("nonzero", "SF602")]
LINES = {
    "item": "v{n} = (x{n} * w).sum().item()",
    "print": "print(\"step\", x{n}.mean())",
    "to_host": "h{n} = x{n}.cpu()",
    "mask_index": "k{n} = x{n}[x{n} > 0]",
    "nonzero": "z{n} = torch.nonzero(x{n})",
}
#: A cell without a report, to type in for comparison.
SCRATCH = {
    "id": "scratch",
    "cell_type": "code",
    "execution_count": None,
    "metadata": {},
    "source": "\n".join(f"x{n} = torch.randn(1000, device=\"cuda\")" for n in range(21)),
    "outputs": [],
}
DEVICE = {"kind": "cuda", "name": "NVIDIA H200", "torch": "2.11.0+cu130"}


def cell(index: int, sites: int, rng: random.Random) -> dict:
    lines = ["%%syncfree"]
    found = []
    for n in range(sites):
        kind, rule = KINDS[(index + n) % len(KINDS)]
        lines.append(LINES[kind].format(n=n))
        count = rng.choice([1, 1, 2, 8, 64, 500])
        found.append({
            "line": n + 2,
            "kind": kind,
            "count": count,
            "blocked_ms": round(rng.uniform(0.01, 3.0) * count ** 0.5, 3),
            "chain": [n + 2],
            "frames": [],
            "rule": rule,
            "message": f"{kind} synced {count}x",
            "thread": None,
        })
    source = "\n".join(lines)
    report = build_report(source=source, device=DEVICE, mode="warn", sites=found, wall_ms=25.0,
                          cell_id=f"bench-{index}")
    if index == 0:
        validate_report(report)
    return {
        "id": f"bench-{index}",
        "cell_type": "code",
        "execution_count": index + 1,
        "metadata": {},
        "source": source,
        "outputs": [{"output_type": "display_data", "data": mime_bundle(report), "metadata": {}}],
    }


def main() -> None:
    out = Path(sys.argv[1])
    cells = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    sites = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    rng = random.Random(0)
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}},
        "cells": [SCRATCH] + [cell(i, sites, rng) for i in range(cells)],
    }
    out.write_text(json.dumps(notebook), encoding="utf-8")
    print(f"wrote {out}: {cells} cells x {sites} sites ({out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
