"""The command line as a shell and a CI job see it: a real subprocess, exit codes, pipes, formats, config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
SYNCING = "import torch\nx = torch.randn(4, device='cuda')\ns = x.sum().item()\n"


def syncfree(*argv: str, cwd: Path | None = None, stdin: str | None = None, env: dict | None = None,
             limit: float = 120):
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper"), **(env or {})}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "syncfree", *argv], capture_output=True, text=True, cwd=cwd,
                          input=stdin, env=environment, timeout=limit)


def test_version_and_python_m():
    done = syncfree("--version")
    assert done.returncode == 0 and done.stdout.startswith("syncfree ")


def test_stdin_and_plain_output_when_piped(tmp_path):
    done = syncfree("check", "-", stdin=SYNCING)
    assert done.returncode == 1
    assert done.stdout.startswith("-:3:5: SF101 ") and "\x1b" not in done.stdout


def test_exit_zero_and_budget(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(SYNCING + "t = x.mean().item()\n")
    assert syncfree("check", "--exit-zero", str(path)).returncode == 0
    assert syncfree("check", "--budget", "3", str(path)).returncode == 0  # two SF101 and one SF910
    over = syncfree("check", "--budget", "2", str(path))
    assert over.returncode == 1 and "exceed the budget of 2" in over.stderr


def test_allow_comments(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(SYNCING.replace(".item()\n", ".item()  # syncfree: allow[item]\n") + "print(x)  # syncfree: allow[SF2]\n")
    done = syncfree("check", str(path))
    assert done.returncode == 0, done.stdout


def test_syntax_error_is_a_diagnostic_with_its_location(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("import torch\nx = (\n")
    done = syncfree("check", str(path))
    assert done.returncode == 2
    assert done.stdout.startswith(f"{path}:2:") and "syntax-error SyntaxError" in done.stdout
    assert syncfree("check", "--exit-zero", str(path)).returncode == 0


def test_missing_path_is_one_line_and_exit_2(tmp_path):
    done = syncfree("check", str(tmp_path / "nope.py"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "cannot read" in done.stderr and "Traceback" not in done.stderr


def test_unknown_kernel_and_unwritable_output(tmp_path):
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    done = syncfree("run", str(notebook), "--kernel", "no-such-kernel")
    assert done.returncode == 2 and "no kernel named 'no-such-kernel'" in done.stderr and "Traceback" not in done.stderr
    done = syncfree("run", str(notebook), "--output", str(tmp_path / "missing" / "out.ipynb"))
    assert done.returncode == 2 and "cannot write" in done.stderr and "Traceback" not in done.stderr


def test_closed_pipe_ends_quietly(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}.py").write_text(SYNCING * 40)
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    done = subprocess.run(f"{sys.executable} -m syncfree check {tmp_path} | head -1", shell=True, capture_output=True,
                          text=True, env=environment, timeout=120)
    assert done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_run_whose_program_closed_its_stdout_says_so(tmp_path):
    script = tmp_path / "closing.py"
    script.write_text("import sys\nsys.stdout.close()\n")
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", str(script)], capture_output=True, text=True,
                          env=environment, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "stdout is closed (the program closed it); the report follows on stderr" in done.stderr, done.stderr


def test_run_whose_program_output_closed_the_pipe_reports_on_stderr(tmp_path):
    # `syncfree run train.py | head -2`: the program's prints close the pipe (it dies of BrokenPipeError, as under
    # python); the report is not lost with stdout, it goes to stderr, said in a line, and the traceback shows the
    # program's line, not syncfree's.
    script = tmp_path / "printing.py"
    script.write_text("import torch\nx = torch.ones(3, device='cuda')\nfor i in range(20000):\n"
                      "    print('line', i, x.sum().item())\n")
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    done = subprocess.run(f"{sys.executable} -m syncfree run {script} | head -2", shell=True, capture_output=True,
                          text=True, env=environment, timeout=120, cwd=tmp_path)
    assert done.stdout == "line 0 3.0\nline 1 3.0\n"
    assert "stdout is closed (its reader has gone); the report follows on stderr" in done.stderr, done.stderr
    assert "printing.py:4:" in done.stderr and "SF101" in done.stderr and "syncs at 1 site" in done.stderr
    traceback = done.stderr[done.stderr.index("Traceback"):done.stderr.index("BrokenPipeError")]
    assert "printing.py\", line 4" in traceback and "syncfree" not in traceback, traceback


def test_run_report_starts_on_a_line_of_its_own(tmp_path):
    # A program whose last print leaves its line open (end="", a progress line) does not glue the report's first row
    # to it; a program that ends its lines gets no blank line.
    for end, expected in (('end=""', "2.0\nopen.py:2:"), ("", "2.0\nopen.py:2:")):
        (tmp_path / "open.py").write_text(f"import torch\nprint(torch.ones(2, device='cuda').sum().item(), {end})\n")
        done = syncfree("run", "open.py", cwd=tmp_path)
        assert done.returncode == 1 and done.stdout.startswith(expected), done.stdout


def test_sarif_is_valid_sarif_2_1_0(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    nbformat = pytest.importorskip("nbformat")
    (tmp_path / "a.py").write_text(SYNCING)
    (tmp_path / "bad.py").write_text("x = (\n")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SYNCING)]
    nbformat.write(notebook, tmp_path / "n.ipynb")
    done = syncfree("check", "--format", "sarif", str(tmp_path))
    log = json.loads(done.stdout)
    jsonschema.validate(log, SARIF_SCHEMA)
    results = log["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"SF101", "syntax-error"}
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert any(rule["id"] == "SF101" and rule["help"]["text"] for rule in rules)
    assert any(loc.get("logicalLocations") for r in results for loc in r["locations"])  # the notebook cell


def test_github_annotations(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(SYNCING)
    done = syncfree("check", "--format", "github", str(path))
    assert done.stdout.startswith(f"::warning file={path},line=3,endLine=3,col=5,endColumn=")
    assert "title=syncfree SF101::" in done.stdout


def test_json_entries_are_stable(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(SYNCING)
    [entry] = json.loads(syncfree("check", "--format", "json", str(path)).stdout)
    assert entry["rule"] == "SF101" and (entry["line"], entry["col"]) == (3, 5)


def test_config_found_from_a_parent_folder(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.syncfree]\nignore = ["SF101"]\nexclude = ["*skip*"]\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(SYNCING + "print(x)\n")
    (tmp_path / "pkg" / "skip_me.py").write_text(SYNCING)
    done = syncfree("check", ".", cwd=tmp_path / "pkg")
    assert " SF201 " in done.stdout and " SF101 " not in done.stdout and "skip_me" not in done.stdout
    (tmp_path / "pyproject.toml").write_text("[tool.syncfree]\nbudget = 5\n")
    assert syncfree("check", ".", cwd=tmp_path / "pkg").returncode == 0
    (tmp_path / "pyproject.toml").write_text("[tool.syncfree]\nbudjet = 5\n")
    bad = syncfree("check", ".", cwd=tmp_path / "pkg")
    assert bad.returncode == 2 and "unknown key" in bad.stderr


@pytest.fixture
def with_torch():
    pytest.importorskip("torch")


def test_run_script_reports_sites_passes_arguments_and_keeps_the_exit_status(tmp_path, with_torch):
    script = tmp_path / "train.py"
    script.write_text("import sys, torch\nx = torch.randn(4, device='cuda')\nfor _ in range(3):\n"
                      "    s = x.sum().item()\nprint('args', sys.argv[1:])\n")
    done = syncfree("run", str(script), "--lr", "3", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "args ['--lr', '3']" in done.stdout
    assert "train.py:4:9: SF101 " in done.stdout and "×3" in done.stdout  # the column of `x.sum().item()`
    [entry] = json.loads(syncfree("run", "--format", "json", str(script), cwd=tmp_path).stdout)
    assert (entry["line"], entry["count"], entry["rule"]) == (4, 3, "SF101")
    assert syncfree("run", "--budget", "3", str(script), cwd=tmp_path).returncode == 0
    failing = tmp_path / "fail.py"
    failing.write_text("raise SystemExit(3)\n")
    done = syncfree("run", str(failing), cwd=tmp_path)
    assert done.returncode == 2 and "exited with status 3" in done.stderr


@pytest.fixture
def notebooks(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")

    def write(name: str, *cells):
        notebook = nbformat.v4.new_notebook()
        notebook.cells = list(cells)
        nbformat.write(notebook, tmp_path / name)
        return tmp_path / name

    return nbformat, write


def test_run_timeout_on_an_infinite_loop_and_a_dead_kernel_end_promptly(notebooks, with_torch):
    import time

    nbformat, write = notebooks
    loop = write("loop.ipynb", nbformat.v4.new_code_cell("while True: pass"))
    # Promptly: not for ever (a blocking kernel manager never saw the timeout or the dead kernel). The bound leaves room
    # for a loaded machine's kernel start (25-30 s beside two other test runs on 2 cores); the helper's own limit is 300 s.
    start = time.monotonic()
    done = syncfree("run", str(loop), "--timeout", "3", limit=300)
    assert done.returncode == 2 and "timed out" in done.stderr and time.monotonic() - start < 150
    dead = write("dead.ipynb", nbformat.v4.new_code_cell("import os; os._exit(3)"))
    start = time.monotonic()
    done = syncfree("run", str(dead), limit=300)
    assert done.returncode == 2 and "did not run to the end" in done.stderr and time.monotonic() - start < 150
    # the cell the kernel died in is named: its syncs went with the kernel (a cell's report is written at its end)
    assert "Kernel died in cell 1 (its syncs are not in the report: it did not end)" in done.stderr, done.stderr


def test_run_reads_only_this_runs_outputs_and_strips_control_characters(notebooks, with_torch):
    nbformat, write = notebooks
    stale = nbformat.v4.new_code_cell("")
    stale.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.syncfree.report.v1+json": {"totals": {"syncs": 5}}, "text/plain": "\x1b[2J5 syncs"})]
    shown = nbformat.v4.new_code_cell(
        "from IPython.display import display\n"
        "display({'application/vnd.syncfree.report.v1+json': 'garbage', 'text/plain': '\\x1b]0;title\\x07x'}, raw=True)")
    done = syncfree("run", str(write("stale.ipynb", stale, shown)))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "5 syncs" not in done.stdout and "Traceback" not in done.stderr


def test_run_ends_at_sigint_without_waiting_for_the_cell_leaving_no_kernel_or_temp_files(notebooks, with_torch, tmp_path,
                                                                                         short_tmp):
    import signal
    import time

    nbformat, write = notebooks
    loop = write("loop.ipynb", nbformat.v4.new_code_cell("print('started', flush=True)\nwhile True: pass"))
    temp = short_tmp
    runtime = tmp_path / "runtime"
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper"), "TMPDIR": str(temp),
                   "JUPYTER_RUNTIME_DIR": str(runtime)}
    process = subprocess.Popen([sys.executable, "-m", "syncfree", "run", str(loop), "--timeout", "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(temp.glob("syncfree-kernel-*/kernel-*")):
        time.sleep(0.05)  # the kernel's sockets: it runs (a fixed wait is too short on a loaded machine)
    time.sleep(3)  # the cell is running
    process.send_signal(signal.SIGINT)
    # It stops the cell rather than waiting for it (--timeout 100). How fast it stops is a figure for a benchmark,
    # not a test: on a loaded 2-core machine the old 2.5 s limit failed without any change in syncfree.
    _, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT and "interrupted" in err  # dies by SIGINT, as python does
    assert not list(temp.glob("syncfree-kernel-*")) and not list(runtime.glob("kernel-*.json"))
