"""``syncfree check`` on many files: worker processes, one parse per file (issue 23)."""

from __future__ import annotations

import ast
import gc
import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# --------------------------------------------------------------------------------------------------- ruff's options
ROOT = Path(__file__).resolve().parents[1]
FIXABLE = (
    "import torch\n\n"
    "x = torch.randn(8, device='cuda')\n"
    "xc = torch.randn(8)\n"
    "g = xc.cuda()\n"  # SF302: a rewrite marked for review
    "v = torch.tensor(1.5, device='cuda')\n"  # SF401: a safe rewrite
    "print(x.sum().item())\n"  # SF101: no rewrite
)


def syncfree(*argv: str, cwd: Path | None = None):
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    return subprocess.run([sys.executable, "-m", "syncfree", *argv], capture_output=True, text=True, cwd=cwd,
                          env=environment, timeout=120)


def test_fix_applies_the_safe_rewrites_and_reports_what_is_left(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(FIXABLE)
    done = syncfree("check", "--fix", str(path))
    text = path.read_text()
    assert "v = torch.full((), 1.5, device='cuda')" in text  # the safe one
    assert "g = xc.cuda()\n" in text  # the one marked for review stays without --unsafe-fixes
    assert done.returncode == 1 and " SF401 " not in done.stdout and " SF302 " in done.stdout and " SF101 " in done.stdout
    assert "Fixed 1 sync." in done.stdout
    again = syncfree("check", "--fix", "--unsafe-fixes", str(path))
    assert "g = xc.cuda(non_blocking=True)" in path.read_text() and " SF302 " not in again.stdout
    assert again.returncode == 1  # the .item() has no rewrite


def test_diff_shows_the_rewrites_and_changes_nothing(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(FIXABLE)
    done = syncfree("check", "--diff", str(path))
    assert path.read_text() == FIXABLE
    assert done.returncode == 1
    assert "-v = torch.tensor(1.5, device='cuda')\n+v = torch.full((), 1.5, device='cuda')\n" in done.stdout
    assert "xc.cuda(non_blocking" not in done.stdout and "Would fix 1 sync." in done.stderr
    unsafe = syncfree("check", "--diff", "--unsafe-fixes", str(path))
    assert "+g = xc.cuda(non_blocking=True)" in unsafe.stdout
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nprint(torch.ones(3))\n")
    nothing = syncfree("check", "--diff", str(clean))
    assert nothing.returncode == 0 and nothing.stdout == "" and "No fixes available." in nothing.stderr
    assert syncfree("check", "--fix", "--diff", str(path)).returncode == 2
    assert syncfree("check", "--unsafe-fixes", str(path)).returncode == 2


def _notebook(sources: list[str]) -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                       "source": source.splitlines(keepends=True)} for i, source in enumerate(sources)],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_fix_rewrites_a_notebook_cell_in_jupyters_layout_only(tmp_path):
    notebook = _notebook(["import torch\n", "v = torch.tensor(2.5, device='cuda')\nv.item()\n"])
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    done = syncfree("check", "--fix", str(path))
    assert done.returncode == 1, done.stderr
    cells = json.loads(path.read_text())["cells"]
    assert cells[1]["source"] == ["v = torch.full((), 2.5, device='cuda')\n", "v.item()\n"]
    assert cells[0]["source"] == ["import torch\n"]
    assert path.read_text() == json.dumps(json.loads(path.read_text()), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    other = tmp_path / "compact.ipynb"
    compact = json.dumps(notebook)
    other.write_text(compact)
    refused = syncfree("check", "--fix", str(other))
    assert refused.returncode == 2 and "Jupyter's JSON layout" in refused.stderr and other.read_text() == compact


def test_a_rewrite_that_would_not_parse_is_not_applied():
    source = "x = f(1)\n"
    breaking = {"fix": {"safety": "safe", "edits": [{"range": {"line": 1, "col": 4, "end_line": 1, "end_col": 8},
                                                     "text": "f(("}]}}
    assert check_module._rewritten(source, [breaking]) is None


def test_statistics_counts_per_rule(tmp_path):
    (tmp_path / "a.py").write_text(FIXABLE)
    (tmp_path / "b.py").write_text(FIXABLE)
    done = syncfree("check", "--statistics", str(tmp_path))
    lines = done.stdout.splitlines()
    assert lines[0].split("\t")[:2] == ["2", "SF101"] and "[ ]" in lines[0]
    assert any(line.startswith("2\tSF401\t[*] ") for line in lines)
    assert lines[-1].startswith("Found 6 syncs in 2 files")
    rows = json.loads(syncfree("check", "--statistics", "--format", "json", str(tmp_path)).stdout)
    assert {"code": "SF302", "name": "blocking-copy-to-device", "count": 2, "fixable": 2} in rows


def test_exclude_matches_names_anywhere_and_paths_from_the_root(tmp_path):
    for folder in ("pkg/models/sub", "pkg/other", "models"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "m.py").write_text(FIXABLE)
    (tmp_path / "pkg" / "keep.py").write_text(FIXABLE)

    def checked(*argv: str) -> set[str]:
        done = syncfree("check", "--format", "json", *argv, ".", cwd=tmp_path)
        return {entry["path"] for entry in json.loads(done.stdout)}

    everything = {"pkg/models/sub/m.py", "pkg/other/m.py", "models/m.py", "pkg/keep.py"}
    assert checked() == everything
    assert checked("--exclude", "models") == {"pkg/other/m.py", "pkg/keep.py"}  # a folder name at any depth
    assert checked("--exclude", "pkg/other") == everything - {"pkg/other/m.py"}  # a path from the root
    assert checked("--exclude", "keep.py", "--extend-exclude", "other") == {"pkg/models/sub/m.py", "models/m.py"}
    (tmp_path / "pyproject.toml").write_text('[tool.syncfree]\nexclude = ["models"]\n')
    assert checked() == {"pkg/other/m.py", "pkg/keep.py"}  # the configuration's plain name, as ruff reads it
    assert checked("--extend-exclude", "other") == {"pkg/keep.py"}
    assert checked("--exclude", "other") == everything - {"pkg/other/m.py"}  # replaces the configuration's


def test_a_missing_path_is_an_error_without_a_summary_of_nothing(tmp_path):
    done = syncfree("check", str(tmp_path / "missing.py"))
    assert done.returncode == 2 and "missing.py" in done.stderr
    assert "0 files" not in done.stdout and done.stdout == ""


def test_progress_only_on_a_terminal(tmp_path, capsys, monkeypatch):
    for number in range(3):
        (tmp_path / f"m{number}.py").write_text(CLEAN)
    done = syncfree("check", str(tmp_path))
    assert "checked" not in done.stderr  # a pipe: no progress
    meter = check_module._Progress(3, None)
    assert not meter.on  # pytest's stderr is no terminal
    meter = check_module._Progress(3, True)
    meter.started -= 5  # a run that has taken a while
    meter.drawn_at -= 5
    meter.step()
    meter.clear()
    assert capsys.readouterr().err == "\rsyncfree: checked 1 of 3 files\r\x1b[K"


def test_json_carries_the_rewrite_and_sarif_its_fix_fingerprint_and_help_uri(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    path = tmp_path / "train.py"
    path.write_text(FIXABLE)
    entries = json.loads(syncfree("check", "--format", "json", str(path)).stdout)
    tensor = next(e for e in entries if e["rule"] == "SF401")
    assert tensor["fix_title"] == "Fill on the GPU with torch.full"
    [edit] = tensor["fix_edits"]
    line = FIXABLE.splitlines()[edit["line"] - 1]
    assert line[: edit["col"] - 1] + edit["text"] + line[edit["end_col"] - 1 :] == "v = torch.full((), 1.5, device='cuda')"
    assert "fix_edits" not in next(e for e in entries if e["rule"] == "SF101")  # no rewrite: no key

    def sarif(env: dict | None = None) -> dict:
        environment = {key: value for key, value in os.environ.items() if key != "SYNCFREE_DOCS_URL"}
        environment.update({"PYTHONPATH": str(ROOT / "python_helper"), **(env or {})})
        done = subprocess.run([sys.executable, "-m", "syncfree", "check", "--format", "sarif", str(path)],
                              capture_output=True, text=True, env=environment, timeout=120)
        return json.loads(done.stdout)

    log = sarif()
    schema = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validate(log, schema)
    results = log["runs"][0]["results"]
    prints = {r["ruleId"]: r["partialFingerprints"]["syncfreeFinding/v1"] for r in results}
    fix = next(r for r in results if r["ruleId"] == "SF401")["fixes"][0]
    assert fix["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == "torch.full((), 1.5, device='cuda')"
    assert all("helpUri" not in rule for rule in log["runs"][0]["tool"]["driver"]["rules"])  # no URL invented
    path.write_text("# a comment above moves every line down\n\n" + FIXABLE)
    moved = sarif()
    assert {r["ruleId"]: r["partialFingerprints"]["syncfreeFinding/v1"] for r in moved["runs"][0]["results"]} == prints
    documented = sarif({"SYNCFREE_DOCS_URL": "https://docs.example/catalog"})
    uris = {rule["id"]: rule["helpUri"] for rule in documented["runs"][0]["tool"]["driver"]["rules"]}
    assert uris["SF101"] == "https://docs.example/catalog#sf101-item"


def test_a_checked_file_leaves_nothing_for_the_cycle_collector(tmp_path):
    """A file's tree is freed by reference counting once it is checked: the collector, paused while the file is
    parsed and walked, then has no young tree of thousands of nodes to walk (the cost of one collection per file
    was a fifth of a large run)."""
    path = tmp_path / "m.py"
    path.write_text(SYNCING + "class Foo(TorchvisionBackend):\n    def _preprocess(self, x):\n        return x.item()\n")
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        assert check_module.check_file(path).diagnostics
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


HOST_CODE = '''\
import torch

class FooImageProcessor(BaseImageProcessor):
    def preprocess(self, images):
        return images.max().item()
'''


def test_possible_findings_are_shown_only_when_asked_for(tmp_path):
    """Code that runs on the host by construction (a data processor's preprocessing) gives findings of certainty
    'possible': left out by default (precision on real libraries), reported with --possible, marked as such in the
    text, counted apart in the summary, a SARIF 'note' rather than a warning."""
    path = tmp_path / "image_processing_foo.py"
    path.write_text(HOST_CODE)
    default = syncfree("check", str(path))
    assert default.returncode == 0, default.stdout + default.stderr
    assert "No syncs found in 1 file." in default.stdout
    shown = syncfree("check", "--possible", str(path))
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "image_processing_foo.py:5:" in shown.stdout and "(possible)" in shown.stdout
    assert "(0 certain, 0 likely, 1 possible)" in shown.stdout
    sarif = json.loads(syncfree("check", "--possible", "--format", "sarif", str(path)).stdout)
    assert [result["level"] for result in sarif["runs"][0]["results"]] == ["note"]
    github = syncfree("check", "--possible", "--format", "github", str(path)).stdout
    assert github.startswith("::notice ")
