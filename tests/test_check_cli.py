"""``syncfree check`` on many files: worker processes, one parse per file (issue 23)."""

from __future__ import annotations

import ast
import importlib
import io
import json

from syncfree.cli.check import check
from syncfree.output import SYNTAX_ERROR

check_module = importlib.import_module("syncfree.cli.check")  # syncfree.cli.check is also the function's name
SYNCING = "import torch\n\ndef step(x: torch.Tensor):\n    return x.sum().item()\n"
CLEAN = "import torch\n\ndef step(x: torch.Tensor):\n    return x.sum()\n"


def _tree(folder, count: int = 24) -> None:
    for number in range(count):
        (folder / f"m{number:02d}.py").write_text(SYNCING if number % 3 else CLEAN)
    (folder / "broken.py").write_text("def f(:\n")
    (folder / "cells.ipynb").write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [
            {"cell_type": "code", "id": "a", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "%matplotlib inline\nimport torch\nx = torch.ones(3, device='cuda')\n"},
            {"cell_type": "code", "id": "b", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "x.item()\n"},
        ],
    }))


def test_worker_processes_give_the_diagnostics_of_one_process_in_order(tmp_path, monkeypatch):
    _tree(tmp_path)
    monkeypatch.setattr(check_module, "_POOL_MIN_BYTES", 0)  # small files: the pool anyway
    outputs = {}
    for jobs in (1, 2):
        out = io.StringIO()
        status = check([str(tmp_path)], output_format="json", out=out, jobs=jobs)
        outputs[jobs] = json.loads(out.getvalue())
        assert status == 2  # broken.py
    assert outputs[1] == outputs[2]
    rules = [(d["path"].rsplit("/", 1)[-1], d["rule"], d["certainty"]) for d in outputs[2]]
    assert [(p, r) for p, r, _ in rules if r == SYNTAX_ERROR] == [("broken.py", SYNTAX_ERROR)]
    assert ("cells.ipynb", "SF101", "certain") in rules  # the notebook's second cell sees the first's x
    assert sum(1 for p, r, _ in rules if r == "SF101" and p.startswith("m")) == 16
    paths = [d["path"] for d in outputs[2]]
    assert paths == sorted(paths)  # in the order the files were found


def test_each_file_is_parsed_once(tmp_path, monkeypatch):
    for number in range(5):
        (tmp_path / f"m{number}.py").write_text(SYNCING if number % 2 else CLEAN)
    parses = []
    real_parse, real_compile = ast.parse, compile

    def counting_parse(*args, **kwargs):
        parses.append("ast.parse")
        return real_parse(*args, **kwargs)

    def counting_compile(source, filename, mode, flags=0, *args, **kwargs):
        if flags & ast.PyCF_ONLY_AST:
            parses.append("compile")
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    monkeypatch.setattr(check_module, "compile", counting_compile, raising=False)
    status = check([str(tmp_path)], out=io.StringIO(), jobs=1)
    assert status == 1
    assert len(parses) == 5, parses
