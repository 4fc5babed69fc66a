"""`syncfree check` and `syncfree run` as a user and a CI job see them: output, exit codes, JSON reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
nbformat = pytest.importorskip("nbformat")  # the GPU machine lacks it

from syncfree.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "python_helper" / "syncfree" / "report.schema.json").read_text())

SYNCING = "import torch\nx = torch.randn(4, device='cuda')\ns = x.sum().item()\n"
CLEAN = "import torch\nx = torch.randn(4)\ns = x.sum().item()\n"


def write_notebook(path: Path, *cells) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = list(cells)
    nbformat.write(notebook, path)
    return path


def code(source: str):
    return nbformat.v4.new_code_cell(source)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def notebook(tmp_path):
    return write_notebook(
        tmp_path / "train.ipynb",
        nbformat.v4.new_markdown_cell("# Training"),
        code("import torch\nx = torch.randn(8, device='cuda')"),
        code("%%syncfree\ny = x * 2\nloss = y.sum().item()"),
        code("!nvidia-smi\nprint(x.shape)"),
        code("%%bash\necho $((1 + 1))"),
        code("mask = x > 0\nsel = x[mask]"),
    )


# --------------------------------------------------------------------------------------------- check, text
def test_check_python_file_with_findings(tmp_path, capsys):
    path = tmp_path / "step.py"
    path.write_text(SYNCING)
    status, out, err = run_cli(capsys, "check", str(path))
    assert status == 1 and err == ""
    assert out.splitlines() == [
        f"{path}:3:5: SF101 `x.sum().item()` copies the value to the CPU and waits for the GPU to finish the work "
        "queued before it",
        "Found 1 sync in 1 file (1 certain, 0 likely); 0 with a rewrite.",
    ]


def test_check_clean_file(tmp_path, capsys):
    path = tmp_path / "clean.py"
    path.write_text(CLEAN)
    status, out, _ = run_cli(capsys, "check", str(path))
    assert status == 0
    assert out == "No syncs found in 1 file.\n"


def test_check_notebook_reports_cells_and_lines(notebook, capsys):
    status, out, _ = run_cli(capsys, "check", str(notebook))
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{notebook}:cell 3:line 3:col 8: SF101 `y.sum().item()`")
    assert lines[1].startswith(f"{notebook}:cell 6:line 2:col 7: SF601 `x[mask]`")
    assert lines[2].startswith("Found 2 syncs in 1 file (2 certain, 0 likely)")


def test_check_marks_likely_findings_and_rewrites(tmp_path, capsys):
    path = tmp_path / "loop.py"
    path.write_text("import torch\nfor b in loader:\n    b = b.cuda()\n    print(b.sum().item())\n")
    status, out, _ = run_cli(capsys, "check", str(path))
    assert status == 1
    assert f"{path}:3:9: SF302 `b.cuda()` copies to the GPU and waits until the copy is done (likely) [fix: review]" in out
    assert "(1 certain, 1 likely); 1 with a rewrite." in out


def test_check_select_and_ignore(tmp_path, capsys):
    path = tmp_path / "two.py"
    path.write_text(SYNCING + "print(x)\n")
    _, out, _ = run_cli(capsys, "check", "--select", "SF2", str(path))
    assert " SF201 " in out and " SF101 " not in out
    _, out, _ = run_cli(capsys, "check", "--ignore", "SF101,SF201", str(path))
    assert out == "No syncs found in 1 file.\n"


def test_check_directories(tmp_path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(SYNCING)
    write_notebook(tmp_path / "pkg" / "b.ipynb", code(SYNCING))
    (tmp_path / "pkg" / ".ipynb_checkpoints").mkdir()
    write_notebook(tmp_path / "pkg" / ".ipynb_checkpoints" / "b-checkpoint.ipynb", code(SYNCING))
    (tmp_path / "pkg" / "notes.txt").write_text("x.item()")
    status, out, _ = run_cli(capsys, "check", str(tmp_path / "pkg"))
    assert status == 1
    assert "Found 2 syncs in 2 files" in out
    assert "checkpoint" not in out


# --------------------------------------------------------------------------------------------- check, json
def test_check_json_prints_one_entry_per_diagnostic(notebook, capsys):
    status, out, _ = run_cli(capsys, "check", "--format", "json", str(notebook))
    assert status == 1
    entries = json.loads(out)
    assert [(e["cell"], e["line"], e["col"], e["rule"]) for e in entries] == [(3, 3, 8, "SF101"), (6, 2, 7, "SF601")]
    assert set(entries[0]) >= {"path", "line", "col", "end_line", "end_col", "rule", "message", "cell", "cell_id",
                               "certainty", "fix"}


def test_check_json_python_file(tmp_path, capsys):
    path = tmp_path / "step.py"
    path.write_text(SYNCING)
    status, out, _ = run_cli(capsys, "check", "--format", "json", str(path))
    [entry] = json.loads(out)
    assert status == 1 and entry["cell"] is None and entry["path"] == str(path) and entry["line"] == 3


# --------------------------------------------------------------------------------------------- check, errors
def test_unreadable_files_exit_2_but_the_rest_is_checked(tmp_path, capsys):
    good = tmp_path / "good.py"
    good.write_text(SYNCING)
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    (tmp_path / "x.txt").write_text("text")
    status, out, err = run_cli(capsys, "check", str(tmp_path / "missing.py"), str(broken), str(good), str(tmp_path / "x.txt"),
                               str(tmp_path / "missing_folder"))
    assert status == 2
    assert f"cannot read {tmp_path / 'missing.py'}" in err
    assert f"cannot read {broken} as a notebook" in err
    assert f"{tmp_path / 'x.txt'}: not a .py file or an .ipynb notebook" in err
    assert f"cannot read {tmp_path / 'missing_folder'}: No such file or directory" in err
    assert " SF101 " in out


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["check"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--select", "SF999", "x.py"])
    assert exit_info.value.code == 2
    assert "matches no rule" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2


def test_run_in_process_keeps_the_programs_prints_out_of_a_json_report(tmp_path, capsys):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(SYNCING + "print('LOSSLINE', s)\n")
    status, out, err = run_cli(capsys, "run", "--format", "json", str(tmp_path / "train.py"))
    assert status == 1 and "LOSSLINE" in err
    [row] = json.loads(out)
    assert (row["line"], row["rule"]) == (3, "SF101")


def test_run_takes_any_other_file_as_a_python_program_as_python_does(tmp_path, capsys):
    status, _, err = run_cli(capsys, "run", str(tmp_path / "train.txt"))
    assert status == 2 and err == f"syncfree: error: cannot read {tmp_path / 'train.txt'}: no such file\n"
    (tmp_path / "train.txt").write_text("print('ran')\n")
    status, out, _ = run_cli(capsys, "run", str(tmp_path / "train.txt"))
    assert status == 0 and out.startswith("ran\n0 syncs")


# --------------------------------------------------------------------------------------------- run (a real kernel)
@pytest.fixture
def kernel_env(monkeypatch):
    """The kernel is a subprocess: it finds syncfree through PYTHONPATH (an installed package needs nothing)."""
    pytest.importorskip("torch")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "python_helper"))


def test_run_prints_each_cells_report_and_writes_the_notebook(tmp_path, capsys, kernel_env):
    source = write_notebook(
        tmp_path / "demo.ipynb",
        nbformat.v4.new_markdown_cell("Setup"),
        code("import torch"),
        code("x = torch.randn(8, device='cuda')\ns = x.sum().item()\nprint('done')"),
    )
    output = tmp_path / "executed.ipynb"
    status, out, err = run_cli(capsys, "run", str(source), "--output", str(output), "--timeout", "120")
    assert status == 1, err
    assert f"{source}:cell 3: syncfree (" in out
    assert "SF101" in out
    executed = nbformat.read(output, as_version=4)
    assert len(executed.cells) == 3  # the extension was loaded outside the notebook's cells
    outputs = executed.cells[2].outputs
    assert any(o.get("name") == "stdout" and "done" in o["text"] for o in outputs)
    [report] = [o["data"]["application/vnd.syncfree.report.v1+json"] for o in outputs if "data" in o]
    jsonschema.validate(report, SCHEMA)
    assert report["totals"]["syncs"] >= 1


def test_run_stops_at_an_error_with_exit_2(tmp_path, capsys, kernel_env):
    source = write_notebook(tmp_path / "fails.ipynb", code("raise ValueError('boom')"), code("print('never')"))
    status, out, err = run_cli(capsys, "run", str(source), "--timeout", "120")
    assert status == 2
    assert "did not run to the end" in err and "boom" in err


# --------------------------------------------------------------------------------------------- run: budgets, formats
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())


def _budgeted_notebook(path: Path, cell_budget: int):
    return write_notebook(
        path,
        nbformat.v4.new_markdown_cell("# Budgets"),
        code("import torch"),
        code("x = torch.randn(8, device='cuda')\ns = x.sum().item()"),
        nbformat.v4.new_code_cell("y = x.sum().item()  # syncfree: allow\nz = x.max().item()",
                                  metadata={"syncfree": {"budget": cell_budget}}),
    )


def test_run_notebook_json_names_the_cell_over_the_shared_budget(tmp_path, capsys, kernel_env):
    source = _budgeted_notebook(tmp_path / "b.ipynb", cell_budget=1)
    status, out, err = run_cli(capsys, "run", str(source), "--format", "json", "--timeout", "120")
    assert status == 1, err
    entries = json.loads(out)
    # The allowed read (cell 4, line 1) is left out; one entry per remaining site, located by cell and line.
    assert [(e["cell"], e["line"], e["rule"], e["count"]) for e in entries] == [(3, 2, "SF101", 1), (4, 2, "SF101", 1)]
    assert all(e["path"] == str(source) and e["certainty"] in ("predicted", "measured") for e in entries)
    assert (f"syncfree: {source}: 1 sync in the cells without a budget of their own exceeds the budget of 0: "
            "cell 3: 1 (line 2 .item() ×1)") in err
    assert "cell's budget" not in err  # cell 4 kept its own budget


def test_run_notebook_within_budgets_exits_0_and_writes_sarif(tmp_path, capsys, kernel_env):
    source = _budgeted_notebook(tmp_path / "b.ipynb", cell_budget=1)
    output = tmp_path / "annotated.ipynb"
    status, _, err = run_cli(capsys, "run", str(source), "-o", str(output))
    assert status == 2 and "write the executed notebook with --output" in err and not output.exists()
    report = tmp_path / "report.sarif"
    status, out, err = run_cli(capsys, "run", str(source), "--format", "sarif", "--budget", "1", "--output",
                               str(output), "--timeout", "120", "--output-file", str(report))
    assert status == 0 and out == "", err
    log = json.loads(report.read_text())
    jsonschema.validate(log, SARIF_SCHEMA)
    results = log["runs"][0]["results"]
    assert len(results) == 2 and {r["ruleId"] for r in results} == {"SF101"}
    # The executed notebook keeps its reports (JupyterLab draws the markers from them) and the budget metadata.
    executed = nbformat.read(output, as_version=4)
    assert executed.cells[3].metadata["syncfree"] == {"budget": 1}
    assert any("application/vnd.syncfree.report.v1+json" in o.get("data", {}) for o in executed.cells[3].outputs)


def test_run_notebook_cell_over_its_own_budget_is_named(tmp_path, capsys, kernel_env):
    source = _budgeted_notebook(tmp_path / "b.ipynb", cell_budget=0)
    status, out, err = run_cli(capsys, "run", str(source), "--budget", "5", "--timeout", "120")
    assert status == 1, err
    assert f"syncfree: {source}:cell 4: 1 sync exceeds the cell's budget of 0 (line 2 .item() ×1)" in err
    assert "budgets exceeded" in out


def test_run_notebook_whose_cell_child_left_no_report_is_not_judged(tmp_path, capsys, kernel_env):
    # A forked child of a cell SIGKILLed before it wrote its report took its syncs with it: the cell's count of 0 is
    # no pass of the notebook's budget of 0 (as `syncfree run SCRIPT` and `sync_free()`), and the run says which.
    source = write_notebook(
        tmp_path / "lost.ipynb",
        code("import multiprocessing, os, signal, time"),
        code("context = multiprocessing.get_context('fork')\n"
             "started = context.Event()\n"
             "def work(started):\n"
             "    started.set()\n"
             "    time.sleep(60)\n"
             "child = context.Process(target=work, args=(started,), name='Doomed')\n"
             "child.start()\n"
             "assert started.wait(60)\n"
             "os.kill(child.pid, signal.SIGKILL)\n"
             "child.join(60)"),
    )
    status, out, err = run_cli(capsys, "run", str(source), "--timeout", "120")
    assert status == 1, (out, err)
    assert f"syncfree: could not judge {source}:cell 2: " in err, err
    assert "Doomed (pid" in err and "ended without a report (killed)" in err, err
    assert f"{source}: 0 counted syncs; budgets not judged." in out, out
    # The cell's report keeps the lost child apart from its other notes (report.schema.json lost_children).
    status, out, err = run_cli(capsys, "run", str(source), "--format", "json", "--timeout", "120")
    assert status == 1 and json.loads(out) == [], (out, err)


@pytest.mark.parametrize("value", [-1, "2", 1.5, True, None])
def test_run_notebook_bad_cell_budget_is_a_usage_error(tmp_path, capsys, value):
    source = write_notebook(tmp_path / "bad.ipynb", nbformat.v4.new_code_cell("x = 1", metadata={"syncfree": {"budget": value}}))
    status, out, err = run_cli(capsys, "run", str(source))
    assert status == 2 and out == ""
    assert err.startswith(f'syncfree: error: {source}:cell 1: the metadata "syncfree": {{"budget": N}} takes a whole number')
    assert len(err.strip().splitlines()) == 1


def test_report_outputs_are_checked_against_the_schema():
    from syncfree.cli.run_notebook import _valid_report
    from syncfree.report import build_report, device_info

    report = build_report(source="x = 1", device=device_info("none"), mode="static")
    assert _valid_report(report) is report
    assert _valid_report(json.dumps(report)) == report  # JSON MIME data saved as text
    broken = {**report, "totals": {**report["totals"], "syncs": "many"}}
    assert _valid_report(broken) is None
    assert _valid_report({**report, "extra": 1}) is None
    assert _valid_report("not json") is None and _valid_report(None) is None
