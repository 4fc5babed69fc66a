"""Bad input to `syncfree check|run`, as a shell sees it: one line on stderr, exit 2, no traceback; and source files
read as Python reads them (a BOM, a PEP 263 coding line)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYNCING = "import torch\nx = torch.randn(4, device='cuda')\ns = x.sum().item()\n"


def syncfree(*argv: str, cwd: Path | None = None, stdin: str | None = None, env: dict | None = None):
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper"), **(env or {})}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "syncfree", *argv], capture_output=True, text=True, cwd=cwd,
                          input=stdin, env=environment, timeout=120)


def one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one line on stderr that holds ``words``, and no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("syncfree: error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


# --------------------------------------------------------------------------------------------- [tool.syncfree]
@pytest.mark.parametrize("line, words", [
    ('select = ["SF999"]', ("select", "'SF999' matches no rule code")),
    ('ignore = ["SF1", "XX"]', ("ignore", "'XX' matches no rule code")),
    ('select = "SF1,SF2"', ("select must be a list of codes", '"SF1,SF2"')),
    ('exclude = "data"', ("exclude must be a list of glob patterns",)),
])
def test_bad_rule_selection_in_the_config_is_one_line(tmp_path, line, words):
    (tmp_path / "pyproject.toml").write_text(f"[tool.syncfree]\n{line}\n")
    (tmp_path / "a.py").write_text(SYNCING)
    one_line_error(syncfree("check", "a.py", cwd=tmp_path), "pyproject.toml", *words)
    one_line_error(syncfree("run", "a.py", cwd=tmp_path), "pyproject.toml", *words)


def test_a_syncfree_key_that_is_not_a_table_is_one_line(tmp_path):
    """`syncfree = 3` under [tool] was ignored in silence (a table was meant)."""
    (tmp_path / "pyproject.toml").write_text("[tool]\nsyncfree = 3\n")
    (tmp_path / "a.py").write_text(SYNCING)
    one_line_error(syncfree("check", "a.py", cwd=tmp_path), "pyproject.toml", "tool.syncfree must be a table",
                   "not 3")


# --------------------------------------------------------------------------------------------- symlink loops
def test_a_symlink_loop_is_named_as_one(tmp_path):
    """`run` said "no such file" for a symlink loop, and `check DIR` skipped one without a word."""
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "b.py").write_text(SYNCING)
    os.symlink("loop.py", tmp_path / "tree" / "loop.py")
    os.symlink("loop.ipynb", tmp_path / "loop.ipynb")
    loop = "Too many levels of symbolic links"
    one_line_error(syncfree("run", str(Path("tree", "loop.py")), cwd=tmp_path), "loop.py", loop)
    one_line_error(syncfree("run", "loop.ipynb", cwd=tmp_path), "loop.ipynb", loop)
    done = syncfree("check", "tree", cwd=tmp_path)
    one_line_error(done, f"cannot read {Path('tree', 'loop.py')}: {loop}")
    assert "b.py:3:5: SF101" in done.stdout  # the rest is checked
    one_line_error(syncfree("run", "missing.py", cwd=tmp_path), "cannot read missing.py: no such file")


def test_run_with_the_cupti_engine_and_no_gpu_says_it_was_not_used(tmp_path):
    pytest.importorskip("torch")
    if subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(torch.cuda.is_available())"],
                      timeout=120).returncode:
        pytest.skip("a CUDA device is here")
    (tmp_path / "a.py").write_text(SYNCING)
    done = syncfree("run", "--engine", "cupti", "a.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # the predicted sync
    assert "--engine cupti needs a CUDA device" in done.stdout + done.stderr


# --------------------------------------------------------------------------------------------- not a notebook
NOT_NOTEBOOKS = {
    "hello": {"hello": 1},
    "cell without metadata": {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                              "cells": [{"cell_type": "code", "source": "x = 1", "outputs": [],
                                         "execution_count": None}]},
    "a list": [1, 2],
    "cells not a list": {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {"a": 1}},
    "old format, broken": {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": 5}]},
}


# make test: every form with check, two with run (the same reader: make test-all runs them all)
@pytest.mark.parametrize("name, command", [
    (name, command) if command == "check" or name in ("hello", "cells not a list") else
    pytest.param(name, command, marks=pytest.mark.exhaustive)
    for command in ("check", "run") for name in NOT_NOTEBOOKS])
def test_json_that_is_not_a_notebook_is_one_line(tmp_path, name, command):
    pytest.importorskip("nbformat")
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(NOT_NOTEBOOKS[name]))
    done = syncfree(command, str(path))
    if command == "check":  # nothing was read: no summary of "0 files" beside the error (issue 23)
        assert done.stdout == ""
    one_line_error(done, f"cannot read {path} as a notebook")


# --------------------------------------------------------------------------------------------- directories
def test_a_directory_that_cannot_be_read_is_an_error_not_zero_files(tmp_path):
    (tmp_path / "tree" / "locked").mkdir(parents=True)
    (tmp_path / "tree" / "locked" / "a.py").write_text(SYNCING)
    (tmp_path / "tree" / "b.py").write_text(SYNCING)
    if os.geteuid() != 0:
        (tmp_path / "tree" / "locked").chmod(0)
        try:
            done = syncfree("check", "tree", cwd=tmp_path)
        finally:
            (tmp_path / "tree" / "locked").chmod(0o755)
    else:  # root reads every folder: the listing fails as it does for a user without the permission
        program = ("import os, sys\nreal = os.scandir\n"
                   "def scandir(path='.'):\n"
                   "    if os.path.basename(os.fspath(path)) == 'locked':\n"
                   "        raise PermissionError(13, 'Permission denied', os.fspath(path))\n"
                   "    return real(path)\n"
                   "os.scandir = scandir\n"
                   "from syncfree.cli import main\nsys.exit(main(['check', 'tree']))\n")
        environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path,
                              env=environment, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"syncfree: error: cannot read {Path('tree', 'locked')}: Permission denied"
    assert "b.py:3:5: SF101" in done.stdout and "in 1 file" in done.stdout  # the rest is checked


# --------------------------------------------------------------------------------------------- encodings
BOM = b"\xef\xbb\xbf" + SYNCING.encode()
LATIN = (b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\nx = torch.randn(4, device='cuda')\n"
         b"print(name, x.sum().item())\n")


@pytest.mark.parametrize("data, line", [(BOM, 3), (LATIN, 5)], ids=["bom", "latin-1"])
def test_source_encodings_are_read_as_python_reads_them(tmp_path, data, line):
    path = tmp_path / "enc.py"
    path.write_bytes(data)
    assert subprocess.run([sys.executable, str(path)], capture_output=True).returncode in (0, 1)  # Python reads it
    done = syncfree("check", "enc.py", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr == "", done.stdout + done.stderr
    assert done.stdout.startswith(f"enc.py:{line}:") and " SF101 " in done.stdout and "syntax-error" not in done.stdout
    done = subprocess.run([sys.executable, "-m", "syncfree", "check", "-"], input=data, capture_output=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}, timeout=120)
    assert done.returncode == 1 and done.stdout.startswith(f"-:{line}:".encode()), done.stdout + done.stderr
    pytest.importorskip("torch")
    done = syncfree("run", "enc.py", cwd=tmp_path)
    assert done.returncode == 1 and f"enc.py:{line}:" in done.stdout, done.stdout + done.stderr
    if data == LATIN:
        assert "café" in done.stdout  # the script's own output, decoded as Python decodes it


# --------------------------------------------------------------------------------------------- notebook runs
def loop_notebook(tmp_path: Path) -> Path:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("print('started', flush=True)\nwhile True: pass")]
    nbformat.write(notebook, tmp_path / "loop.ipynb")
    return tmp_path / "loop.ipynb"


def test_a_cell_timeout_is_one_line_without_the_kernels_traceback(tmp_path):
    done = syncfree("run", str(loop_notebook(tmp_path)), "--timeout", "5")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "ZMQError" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if not line.startswith("syncfree: cell ")]  # progress lines
    assert errors == [f"syncfree: error: {tmp_path / 'loop.ipynb'} did not run to the end: A cell timed out while "
                      "it was being executed, after 5 seconds."]


def test_a_notebook_runs_where_the_temp_folder_is_too_long_for_a_unix_socket(tmp_path):
    # The kernel's sockets go in TMPDIR: a path past a Unix socket's 107 bytes ended the run at the kernel's start
    # with zmq's "File name too long" (seen with pytest-xdist's longer temp folders). They go in a short folder of
    # /tmp then (over TCP, the other way out, a signal took the kernel a minute to stop).
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("print('ran', 6 * 7)")]
    nbformat.write(notebook, tmp_path / "short.ipynb")
    temp = tmp_path / ("t" * 40) / ("m" * 40)
    temp.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper"), "TMPDIR": str(temp),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    done = syncfree("run", str(tmp_path / "short.ipynb"), "--output", str(tmp_path / "out.ipynb"), env=env)
    assert done.returncode == 0, done.stderr
    assert "ran 42" in (tmp_path / "out.ipynb").read_text() and not list(temp.iterdir()), done.stderr


def test_sigterm_stops_a_notebook_run_leaving_no_kernel_or_temp_files(tmp_path, short_tmp):
    notebook = loop_notebook(tmp_path)
    temp, runtime = short_tmp, tmp_path / "runtime"
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper"), "TMPDIR": str(temp),
                   "JUPYTER_RUNTIME_DIR": str(runtime)}
    for phase in ("starting", "running"):
        process = subprocess.Popen([sys.executable, "-m", "syncfree", "run", str(notebook), "--timeout", "100"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(temp.glob("syncfree-kernel-*")):
            time.sleep(0.05)  # the kernel's sockets folder: the kernel is being started
        if phase == "running":
            while time.monotonic() < deadline and not list(temp.glob("syncfree-kernel-*/kernel-*")):
                time.sleep(0.05)  # its sockets: the kernel runs
            time.sleep(3)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        assert process.returncode == -signal.SIGTERM, err  # it dies of the signal, once it has cleaned up
        assert "Traceback" not in err, err
        left = [*temp.iterdir(), *(runtime.iterdir() if runtime.exists() else ())]
        assert not left, (phase, left)  # the sockets' folder, the connection file
        if Path("/proc").is_dir():  # no kernel left running: none names the run's sockets' folder
            running = []
            for entry in Path("/proc").iterdir():
                try:
                    if entry.name.isdigit() and str(temp).encode() in (entry / "cmdline").read_bytes():
                        running.append(entry.name)
                except OSError:
                    pass
            assert not running, (phase, running)


def test_what_a_stop_cut_short_in_a_kernels_start_is_collected_quietly(monkeypatch):
    # A SIGTERM as the notebook run started its kernel cut an event loop's construction short (no self-pipe): collected
    # later, it printed "Exception ignored in BaseEventLoop.__del__" and a traceback on the run's stderr (ci112), and
    # nbclient's start coroutine "was never awaited"
    import asyncio
    import warnings

    from syncfree.cli.run_notebook import _drop_what_the_stop_cut_short

    loop = asyncio.new_event_loop()
    loop._close_self_pipe()
    loop._ssock = None
    del loop._ssock  # as if its __init__ had stopped before making it
    loop.cycle = loop  # freed by the collector only, as the stop's frames hold it until then

    async def start():
        pass

    pending = [start()]
    pending.append(pending)
    del loop, pending
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _drop_what_the_stop_cut_short()
    assert unraisable == [] and [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
