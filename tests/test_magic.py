"""%%syncfree and %syncfree through a real IPython shell (IPython.testing.globalipapp)."""

from __future__ import annotations

import hashlib
import linecache
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from standins import ErrorTensor, FakeTensor

IPython = pytest.importorskip("IPython")
torch = pytest.importorskip("torch")

from IPython.core.error import UsageError  # noqa: E402
from IPython.testing import globalipapp  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

import syncfree  # noqa: E402
from syncfree.magic import SyncfreeMagics  # noqa: E402
from syncfree.report import MIME_TYPE, validate_report  # noqa: E402


@pytest.fixture(scope="module")
def ip():
    # start_ipython() returns None once a test module before this one started the shell.
    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "syncfree")
    yield shell
    shell.run_line_magic("unload_ext", "syncfree")


@pytest.fixture(autouse=True)
def _displayhook_unders():
    """A cell that assigns `_` (`for _ in range(3)`) stops IPython's displayhook from ever
    updating `_` again in this worker's shell: after each test, put its values back."""
    yield
    shell = globalipapp.get_ipython()
    for unders in ("_", "__", "___"):
        if shell is not None and unders in shell.user_ns:
            shell.user_ns[unders] = getattr(shell.displayhook, unders)


@pytest.fixture
def cuda_ip(ip, fake_cuda):
    """The shell with a stand-in CUDA device and stand-in tensors in its namespace."""
    ip.user_ns.update(FakeTensor=FakeTensor, ErrorTensor=ErrorTensor)
    return ip


def run(ip, cell: str, **kwargs):
    """Run a cell as the kernel does; return (result, stdout, report bundles)."""
    with capture_output() as captured:
        result = ip.run_cell(cell, store_history=True, **kwargs)
    bundles = [o.data for o in captured.outputs if MIME_TYPE in o.data]
    return result, captured.stdout, bundles


def the_report(bundles):
    assert len(bundles) == 1, f"expected one report output, got {len(bundles)}"
    (bundle,) = bundles
    assert set(bundle) == {MIME_TYPE, "text/html", "text/plain"}
    report = bundle[MIME_TYPE]
    validate_report(report)
    return report


# ----------------------------------------------------------------------------- the cell runs as usual


def test_outputs_and_last_expression_are_unchanged(cuda_ip):
    result, stdout, bundles = run(cuda_ip, "%%syncfree\nprint('hello')\nx = 41\nx + 1\n")
    assert result.success and result.result == 42
    assert stdout.startswith("hello\n")
    assert cuda_ip.user_ns["x"] == 41
    report = the_report(bundles)
    assert report["mode"] == "warn" and report["totals"]["syncs"] == 0


def test_trailing_semicolon_hides_the_value_as_without_the_magic(cuda_ip):
    result, _, _ = run(cuda_ip, "%%syncfree\n1 + 1;\n")
    assert result.success and result.result is None


def test_exception_traceback_shows_the_cell_line(cuda_ip):
    result, stdout, bundles = run(cuda_ip, "%%syncfree\na = 1\nraise ValueError('boom')\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert f"Cell In[{result.execution_count}], line 3" in stdout
    assert "----> 3 raise ValueError('boom')" in stdout
    assert "syncfree/magic.py" not in stdout  # the magic's frames are hidden
    report = the_report(bundles)
    assert report["error"] == {"type": "ValueError", "message": "boom", "line": 3}


def test_ipython_syntax_inside_the_body(cuda_ip):
    result, stdout, bundles = run(cuda_ip, "%%syncfree\n%time y = 2\nout = !echo hi\ny, list(out)\n")
    assert result.success and result.result == (2, ["hi"])
    assert "Wall time" in stdout
    the_report(bundles)


@pytest.fixture
def body_transforms(ip, monkeypatch):
    """The texts the shell's transform_cell was asked to transform (the magic's own
    cell, with its %%syncfree line, comes first: IPython transforms that itself)."""
    asked = []
    transform = ip.transform_cell

    def recording(raw_cell):
        asked.append(raw_cell)
        return transform(raw_cell)

    monkeypatch.setattr(ip, "transform_cell", recording)
    return asked


def test_a_plain_python_body_is_tokenized_once(cuda_ip, body_transforms):
    # IPython's token transforms tokenized a big body a second time, for the magic.
    cell = "%%syncfree\n\nt = FakeTensor()\n    \nv = t.item()\nn = 41\nn + 1\n"
    result, _, bundles = run(cuda_ip, cell)
    assert result.success and result.result == 42
    assert [text for text in body_transforms if not text.startswith("%%syncfree")] == []
    report = the_report(bundles)
    assert [(s["line"], s["kind"]) for s in report["sites"]] == [(5, "item")]
    assert [(f["rule"], f["range"]["line"], f["range"]["col"]) for f in report["findings"]] == [("SF101", 5, 4)]


@pytest.mark.parametrize(("body", "expected"), [
    ("y = 2\nz = %pwd\nisinstance(z, str)\n", True),  # IPython syntax after plain lines
    ("    a = 1\n    a + 1\n", 2),               # indented: IPython dedents it
    ("a = 5\na?\n", None),                       # help: IPython's pager, nothing raised
    ("x = 1\nx = = 2\n", SyntaxError),           # not Python at all
])
def test_bodies_that_need_ipythons_transforms_still_get_them(cuda_ip, body_transforms, body, expected):
    result, _, bundles = run(cuda_ip, "%%syncfree\n" + body)
    if expected is SyntaxError:
        assert isinstance(result.error_in_exec, SyntaxError)
    else:
        assert result.success and result.result == expected
    assert body in body_transforms  # the fast path declined and IPython's way ran
    the_report(bundles)


def test_input_transformers_of_the_users_apply_to_the_body(cuda_ip, body_transforms):
    def replace_one(lines):  # the body's lines only: the magic's own cell is one get_ipython() line
        return [line.replace("ONE", "1") if line.startswith("a") else line for line in lines]

    cuda_ip.input_transformers_post.append(replace_one)
    try:
        result, _, bundles = run(cuda_ip, "%%syncfree\na = ONE\na + ONE\n")
    finally:
        cuda_ip.input_transformers_post.remove(replace_one)
    assert result.success and result.result == 2
    assert "a = ONE\na + ONE\n" in body_transforms
    the_report(bundles)


def test_a_cell_with_more_findings_than_a_report_holds(cuda_ip):
    cell = "%%syncfree --quiet\nt = FakeTensor()\n" + "v = t.item()\n" * 1200
    result, _, _ = run(cuda_ip, cell)
    assert result.success
    report = cuda_ip.user_ns["_syncfree_report"]
    validate_report(report)
    assert len(report["findings"]) == 1000 and report["truncated"]["findings"] is True
    assert report["totals"]["syncs"] == 1200 and len(report["sites"]) == 1000
    assert "static findings: the first 1,000, up to line 1002; syncs after it are still counted and named" in (
        report["notes"])


def test_a_cell_turns_the_cycle_collector_back_on_after_an_interrupted_pause(ip):
    import gc

    from syncfree import collector

    pause = collector.paused()
    pause.__enter__()  # and no __exit__: what an interrupt at the end of a pause can leave
    assert not gc.isenabled()
    result, _, _ = run(ip, "x = 1\n")
    assert result.success and gc.isenabled() and collector._pauses == []
    del pause  # its generator's finally finds no pause left to end
    assert gc.isenabled()


def test_syntax_error_points_at_the_cell_line(cuda_ip):
    result, stdout, bundles = run(cuda_ip, "%%syncfree\nx = 1\nx = = 2\n")
    assert isinstance(result.error_in_exec, SyntaxError)
    assert f"Cell In[{result.execution_count}], line 3" in stdout
    error = the_report(bundles)["error"]
    assert (error["type"], error["line"]) == ("SyntaxError", 3)


# ----------------------------------------------------------------------------- the report


def test_item_on_cell_line_3_gives_a_site_and_a_finding_on_line_3(cuda_ip):
    cell = "%%syncfree\nt = FakeTensor()\nv = t.item()\n"
    result, _, bundles = run(cuda_ip, cell, cell_id="cell-abc")
    assert result.success
    report = the_report(bundles)
    assert report["cell_id"] == "cell-abc"
    assert report["source_hash"] == "sha256:" + hashlib.sha256(cell.encode()).hexdigest()
    assert report["device"] == {"kind": "cuda", "name": "Stand-in GPU", "torch": torch.__version__}
    (site,) = report["sites"]
    assert (site["line"], site["kind"], site["count"], site["chain"]) == (3, "item", 1, [3])
    assert [f["range"]["line"] for f in report["findings"]] == [3]
    assert site["rule"] == report["findings"][0]["rule"] and site["rule"] in report["rules"]
    assert cuda_ip.user_ns["_syncfree_report"] == report


def test_lines_count_from_the_cell_top_with_blank_lines_anywhere(cuda_ip):
    cell = "\n%%syncfree --no-blocked\n\n\nt = FakeTensor()\nfor _ in range(3):\n    t.item()\n"
    _, _, bundles = run(cuda_ip, cell)
    report = the_report(bundles)
    assert [(s["line"], s["count"], s["blocked_ms"]) for s in report["sites"]] == [(7, 3, None)]


def test_frames_option_and_chain(cuda_ip):
    cell = ("%%syncfree --frames 0\n"
            "def show(t):\n"
            "    return repr(t)\n"
            "show(FakeTensor())\n")
    _, _, bundles = run(cuda_ip, cell)
    (site,) = the_report(bundles)["sites"]
    assert (site["chain"], site["frames"]) == ([4, 3], [])


def test_error_mode_reports_the_line_that_synced(cuda_ip):
    result, stdout, bundles = run(cuda_ip, "%%syncfree --mode error\nt = ErrorTensor()\nv = t.item()\n")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "----> 3 v = t.item()" in stdout
    report = the_report(bundles)
    assert report["mode"] == "error"
    assert report["error"]["line"] == 3
    assert report["error"]["message"].startswith("line 3: `.item()` synchronized")


def test_quiet_shows_nothing_but_stores_the_report(cuda_ip):
    cuda_ip.user_ns.pop("_syncfree_report", None)
    _, stdout, bundles = run(cuda_ip, "%%syncfree --quiet\nt = FakeTensor()\nt.item()\n")
    assert bundles == [] and stdout == ""
    validate_report(cuda_ip.user_ns["_syncfree_report"])
    assert cuda_ip.user_ns["_syncfree_report"]["sites"][0]["line"] == 3


@pytest.mark.parametrize("line, cell, message", [
    ("--mode loud", "x = 1", "invalid choice: 'loud'"),
    ("--frames 99", "x = 1", "--frames must be between 0 and 8"),
    ("--frames many", "x = 1", "invalid int value"),
    ("on", "x = 1", "takes options only"),
    ("", None, "needs on, off, status, merge DIR or run"),
    ("maybe", None, "invalid choice: 'maybe'"),
])
def test_bad_options_raise_usage_error(ip, line, cell, message):
    with pytest.raises(UsageError, match=message):
        if cell is None:
            ip.run_line_magic("syncfree", line)
        else:
            ip.run_cell_magic("syncfree", line, cell)


def test_importing_syncfree_imports_neither_ipython_nor_torch():
    code = ("import sys, syncfree, syncfree.capture, syncfree.report; "
            "print(sorted(m for m in ('IPython', 'torch') if m in sys.modules), syncfree.__version__, "
            "syncfree._jupyter_labextension_paths())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(syncfree.__file__).parents[1])})
    assert out.stdout.split(" ", 1)[0] == "[]"
    assert "[{'src': 'labextension', 'dest': 'jupyterlab-syncfree'}]" in out.stdout


def test_docstring_is_the_manual():
    doc = SyncfreeMagics.syncfree.__doc__
    for option in ("--mode warn", "--mode error", "--mode predict", "--no-blocked",
                   "--frames N", "--quiet", "%syncfree on", "%syncfree off", "%syncfree status"):
        assert option in doc


# ----------------------------------------------------------------------------- watch mode


@pytest.mark.filterwarnings("ignore:called a synchronizing CUDA operation")
def test_watch_mode_reports_cells_that_synced_once(cuda_ip):
    _, stdout, _ = run(cuda_ip, "%syncfree on --no-blocked")
    assert "watching every cell" in stdout
    try:
        _, stdout, bundles = run(cuda_ip, "\nt = FakeTensor()\nt.item(); t.item()\n", cell_id="w1")
        report = the_report(bundles)
        assert report["cell_id"] == "w1"
        assert [(s["line"], s["count"]) for s in report["sites"]] == [(3, 2)]
        assert [f["range"]["line"] for f in report["findings"]] == [3, 3]

        _, _, bundles = run(cuda_ip, "x = 1\n")
        assert bundles == []  # no sync, no report

        _, _, bundles = run(cuda_ip, "%%syncfree\nt.item()\n")
        assert the_report(bundles)["sites"][0]["line"] == 2  # the cell magic's report only

        _, stdout, _ = run(cuda_ip, "%syncfree status")
        assert "watching every cell (mode auto, blocked time off" in stdout
    finally:
        _, stdout, _ = run(cuda_ip, "%syncfree off")
    assert stdout == "syncfree: off\n"
    _, _, bundles = run(cuda_ip, "t.item()\n")
    assert bundles == []


# ----------------------------------------------------------------------------- kernels without CUDA or torch


def test_without_torch_the_cell_runs_with_static_findings(ip, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    result, stdout, bundles = run(ip, "%%syncfree\nprint('ran')\nx = [1]\n")
    assert result.success and stdout.startswith("ran\n")
    report = the_report(bundles)
    assert (report["mode"], report["device"]["kind"], report["device"]["torch"]) == ("static", "none", None)
    assert report["notes"][0].startswith("torch is not installed")


def test_without_cuda_the_cell_is_predicted_or_static(ip, monkeypatch):
    result, _, bundles = run(ip, "%%syncfree --mode warn\nimport torch\nv = torch.ones(3).sum().item()\n")
    assert result.success and ip.user_ns["v"] == 3.0
    report = the_report(bundles)
    assert report["notes"][0].startswith("No CUDA device: --mode warn needs one")
    if report["mode"] == "predict":
        assert report["notes"][0] == ("No CUDA device: --mode warn needs one; the syncs a GPU would make are "
                                      "predicted on the CPU instead")
        assert report["device"]["kind"] == "predict"
    else:
        assert report["mode"] == "static" and "predict mode is unavailable" in report["notes"][1]

    monkeypatch.setitem(sys.modules, "syncfree.capture.predict", None)
    _, _, bundles = run(ip, "%%syncfree\nx = 1\n")
    report = the_report(bundles)
    assert report["mode"] == "static"
    assert "predict mode is unavailable" in report["notes"][0]


def test_a_cell_counts_the_syncs_of_the_child_processes_it_starts(ip):
    # A cell follows its children as a watch does (their syncs were left out, named in a note): a child's target
    # runs under a watch of its own and its syncs are the cell's, at the cell's lines. A child without a target (a
    # Process subclass's own run()) is still named.
    cell = ("%%syncfree --mode predict\nimport multiprocessing, torch\n"
            "def load(n):\n    for _ in range(n):\n        torch.ones(2, device='cuda').sum().item()\n"
            "child = multiprocessing.get_context('fork').Process(target=load, args=(2,), name='Loader')\n"
            "child.start(); child.join()\n"
            "class Own(multiprocessing.get_context('fork').Process):\n    def run(self):\n        pass\n"
            "own = Own(name='OwnRun'); own.start(); own.join()\n")
    result, _, bundles = run(ip, cell)
    assert result.success
    report = the_report(bundles)
    assert report["totals"]["syncs"] == 2, report["totals"]
    [site] = report["sites"]
    assert (site["line"], site["kind"], site["count"]) == (5, "item", 2), site
    assert site["message"].endswith("(predicted on CPU) (in child process Loader)"), site["message"]
    assert not any("Loader" in note for note in report["notes"]), report["notes"]
    assert any(note.startswith("1 child process started here (OwnRun) ran unwatched")
               for note in report["notes"]), report["notes"]


def test_a_cell_counts_the_children_a_thread_of_it_starts(ip):
    # A cell counts every thread's syncs, but the processes a thread of it started were nobody's: not followed, not
    # named. Their syncs were lost without a word on a GPU, and in predict mode their CUDA code failed.
    cell = ("%%syncfree --mode predict\nimport multiprocessing, threading, torch\n"
            "def load(n):\n    for _ in range(n):\n        torch.ones(2, device='cuda').sum().item()\n"
            "def launch():\n"
            "    child = multiprocessing.get_context('fork').Process(target=load, args=(2,), name='Loader')\n"
            "    child.start(); child.join()\n"
            "thread = threading.Thread(target=launch); thread.start(); thread.join()\n")
    result, _, bundles = run(ip, cell)
    assert result.success
    report = the_report(bundles)
    assert report["totals"]["syncs"] == 2, (report["totals"], report["notes"])
    [site] = report["sites"]
    assert (site["line"], site["count"]) == (5, 2) and "(in child process Loader)" in site["message"], site


def test_a_predicted_cell_predicts_the_threads_of_the_users_code_it_starts(ip):
    # A cell counts every thread's syncs, but in predict mode a thread it started ran without the stand-ins: its
    # `.item()` was neither counted nor named (a GPU counts it). A non-daemon thread running the user's code now gets
    # a predict session, as one a watch's block starts does; a daemon thread of the user's (or a _thread one) may
    # outlive the cell and gets none: its work is not predicted, and the report names it among lost_children.
    cell = ("%%syncfree --mode predict\nimport _thread, threading, torch\nx = torch.ones(2, device='cuda')\n"
            "def work(done=None):\n    x.sum().item()\n    done and done.set()\n"
            "thread = threading.Thread(target=work); thread.start(); thread.join()\n"
            "ev = threading.Event(); threading.Thread(target=work, args=(ev,), daemon=True).start(); ev.wait(30)\n"
            "ev2 = threading.Event(); _thread.start_new_thread(work, (ev2,)); ev2.wait(30)\n")
    result, _, bundles = run(ip, cell)
    assert result.success
    report = the_report(bundles)
    [site] = report["sites"]
    assert (site["line"], site["count"]) == (5, 1) and site["thread"].startswith("Thread-"), site
    assert [re.sub(r"Thread-\d+", "Thread-N", note.split(" ran without")[0]) for note in report["lost_children"]] == [
        "daemon thread 'Thread-N (work)'", "a thread started with _thread.start_new_thread (work)"], report["notes"]


def test_a_predicted_cell_predicts_the_tasks_it_hands_pools_of_earlier_cells(ip):
    # A ThreadPoolExecutor or a multiprocessing ThreadPool made in an earlier cell: a predicted cell that handed it a
    # task ran it without the stand-ins, and the cell failed ("Torch not compiled with CUDA enabled") where a GPU
    # runs it and counts its sync. Each task runs under the cell's predict session now.
    setup = ("import concurrent.futures, multiprocessing.pool, torch\nexecutor = concurrent.futures.ThreadPoolExecutor(1)\n"
             "executor.submit(abs, 1).result()\nthreads = multiprocessing.pool.ThreadPool(1)\nthreads.map(abs, [1])\n"
             "def work(n):\n    return torch.ones(n, device='cuda').sum().item()\n")
    assert ip.run_cell(setup).success
    try:
        result, _, bundles = run(ip, "%%syncfree --mode predict\nexecutor.submit(work, 2).result()\n"
                                     "threads.map(work, [2, 3])\n")
        assert result.success, result.error_in_exec
        report = the_report(bundles)
        assert report["totals"]["syncs"] == 3, report
        assert "1 sync in thread 'ThreadPoolExecutor-" in " ".join(report["notes"]) \
            and "ran outside the cell's code and is not attributed to a line" in " ".join(report["notes"])
    finally:
        ip.run_cell("executor.shutdown(); threads.terminate()")


def test_a_cell_counts_the_children_of_a_watch_inside_it(ip):
    # A watch in the cell follows the children it starts: their syncs are the cell's too (they were only the watch's).
    cell = ("%%syncfree --mode predict\nimport multiprocessing, syncfree, torch\n"
            "def rank(i):\n    torch.ones(2, device='cuda').sum().item()\n"
            "with syncfree.watch() as w:\n"
            "    child = multiprocessing.get_context('fork').Process(target=rank, args=(0,), name='Rank-0')\n"
            "    child.start(); child.join()\n")
    result, _, bundles = run(ip, cell)
    assert result.success
    assert ip.user_ns["w"].report.syncs == 1
    report = the_report(bundles)
    assert report["totals"]["syncs"] == 1, report["totals"]
    [site] = report["sites"]
    assert (site["line"], site["kind"], site["count"]) == (4, "item", 1), site


def test_a_child_process_that_outlives_its_cell_ends_as_the_program_made_it_end(ip):
    # Persistent DataLoader workers outlive the cell that made them: named as still running when the cell ended, and
    # their report, which nobody reads any more, is not written (it was, into a removed folder: the worker then
    # exited with status 1, and the DataLoader's shutdown raised "worker exited unexpectedly").
    cell = ("%%syncfree --mode predict\nimport multiprocessing\n"
            "started, release = multiprocessing.get_context('fork').Event(), multiprocessing.get_context('fork').Event()\n"
            "def serve():\n    started.set(); release.wait(60)\n"
            "worker = multiprocessing.get_context('fork').Process(target=serve, name='Worker')\n"
            "worker.start(); assert started.wait(60)\n")
    result, _, bundles = run(ip, cell)
    assert result.success
    notes = the_report(bundles)["notes"]
    worker = ip.user_ns["worker"]
    assert f"child process Worker (pid {worker.pid}) was still running when the cell ended: its syncs are not " \
           "counted" in notes, notes
    ip.user_ns["release"].set()
    worker.join(60)
    assert worker.exitcode == 0


def test_a_cell_names_the_child_processes_of_an_earlier_cell_that_work_for_it(ip):
    # Persistent DataLoader workers (a Pool kept open) made by an earlier cell run this cell's work unwatched: their
    # syncs went into no report, and the cell said nothing. It names them now; once they have ended, it does not.
    started = ("%%syncfree --mode predict\nimport multiprocessing\n"
               "release = multiprocessing.get_context('fork').Event()\n"
               "started = multiprocessing.get_context('fork').Event()\n"
               "def serve():\n    started.set(); release.wait(60)\n"
               "worker = multiprocessing.get_context('fork').Process(target=serve, name='Worker')\n"
               "worker.start(); assert started.wait(60)\n")
    assert run(ip, started)[0].success
    worker = ip.user_ns["worker"]
    result, _, bundles = run(ip, "%%syncfree --mode predict\nimport torch\nx = torch.ones(2, device='cuda')\n")
    assert result.success
    notes = the_report(bundles)["notes"]
    assert f"1 child process started before this cell (Worker (pid {worker.pid})) was running during it: syncs it " \
           "made are not counted here (a Pool or persistent DataLoader workers made earlier: make them in the cell " \
           "to count them)" in notes, notes
    ip.user_ns["release"].set()
    worker.join(60)
    _, _, bundles = run(ip, "%%syncfree --mode predict\nimport torch\nx = torch.ones(2, device='cuda')\n")
    assert not [n for n in the_report(bundles)["notes"] if "before this cell" in n]


def test_watch_mode_shows_a_cell_without_syncs_whose_processes_ran_unwatched(ip):
    # Watch mode shows a report for a cell that synced; one whose syncs may be in processes it could not watch (an
    # earlier cell's workers, a Python program it started) said nothing at all.
    assert run(ip, "import multiprocessing\nrelease = multiprocessing.get_context('fork').Event()\n"
                   "worker = multiprocessing.get_context('fork').Process(target=release.wait, args=(60,),"
                   " name='Worker')\nworker.start()\n")[0].success
    ip.run_line_magic("syncfree", "on --mode predict --quiet")
    try:
        ip.user_ns.pop("_syncfree_report", None)
        run(ip, "y = 1 + 1\n")
        report = ip.user_ns.get("_syncfree_report")
        assert report is not None and report["totals"]["syncs"] == 0
        assert [n for n in report["notes"] if "started before this cell (Worker" in n], report["notes"]
        ip.user_ns["release"].set()
        ip.user_ns["worker"].join(60)
        ip.user_ns.pop("_syncfree_report", None)
        run(ip, "y = 1 + 1\n")
        assert "_syncfree_report" not in ip.user_ns  # nothing synced, nothing ran unwatched: no report
    finally:
        ip.user_ns["release"].set()
        ip.run_line_magic("syncfree", "off")


def test_a_cell_counts_the_python_programs_it_starts_with_subprocess(ip, tmp_path):
    # A Python program of the kernel's interpreter started with subprocess watches itself: its syncs are the cell's,
    # at the cell line that started it; one that cannot watch itself (-I ignores PYTHONPATH) is named.
    child = tmp_path / "child.py"
    child.write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    cell = ("%%syncfree --mode predict\nimport subprocess, sys\n"
            f"subprocess.run([sys.executable, {str(child)!r}], check=True)\n"
            "subprocess.run([sys.executable, '-I', '-c', 'pass'], check=True)\n"
            "subprocess.run([sys.executable, '--version'], check=True, capture_output=True)\n")
    result, _, bundles = run(ip, cell)
    assert result.success
    report = the_report(bundles)
    assert [(s["line"], s["count"]) for s in report["sites"]] == [(3, 1)], "\n".join(report["notes"])
    assert [n for n in report["notes"] if "subprocess" in n] == [
        "1 Python program started with subprocess (-c ...) ran unwatched: its syncs are not in this report "
        "(`syncfree run` it to see them)"], report["notes"]


@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
def test_a_cell_counts_the_python_programs_its_shell_commands_run(ip, tmp_path, monkeypatch, shell):
    # `!python train.py` (IPython's system, through a pty), `x = !python ...` (getoutput) and os.system ran the program
    # unwatched and unnamed: the cell reported 0 syncs. Each now watches itself, its syncs at the line that ran it.
    # The shell IPython runs them with is $SHELL (unset: /bin/sh): dash forks the program where bash execs it, and the
    # cell's line was then lost (its syncs were "not attributed to a line"); `; true` makes any shell fork it.
    if not os.path.exists(shell):
        pytest.skip(f"no {shell}")
    monkeypatch.setenv("SHELL", shell)
    child = tmp_path / "child.py"
    child.write_text("import torch\nprint('ran')\ntorch.ones(2, device='cuda').sum().item()\n")
    cell = ("%%syncfree --mode predict\nimport os, subprocess, sys\n"
            f"!{{sys.executable}} {str(child)!r}\n"
            f"out = !{{sys.executable}} {str(child)!r}\n"
            f"status = os.system(sys.executable + ' ' + {str(child)!r})\n"
            f"subprocess.run(sys.executable + ' ' + {str(child)!r} + '; true', shell=True, check=True)\n")
    result, _, bundles = run(ip, cell)
    assert result.success and ip.user_ns["status"] == 0 and "ran" in ip.user_ns["out"]
    report = the_report(bundles)
    assert [(s["line"], s["count"]) for s in report["sites"]] == [(3, 1), (4, 1), (5, 1), (6, 1)], \
        "\n".join(report["notes"])
    assert not [n for n in report["notes"] if "unwatched" in n], report["notes"]
    assert "SYNCFREE_FOLLOW" not in os.environ


@pytest.mark.exhaustive  # make test-all: a cell's shell programs are test_cli_run's notebook shell cells and test_magic's shell commands
def test_a_script_cell_counts_the_python_programs_it_runs(ip, tmp_path):
    # A %%bash cell that runs `python train.py` (or two), a shell script, or `bash -c`, ran them unwatched and
    # unnamed: the cell reported 0 syncs. The shell now passes the start-up hook to the Python programs it runs;
    # each watches itself, tells its pid, and its syncs are at the cell line that ran the script.
    child = tmp_path / "child.py"
    child.write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    script = tmp_path / "run.sh"
    script.write_text(f"{sys.executable} {child}\n")
    def counted(cell: str) -> tuple[list, list]:
        result, _, bundles = run(ip, cell)
        assert result.success
        report = the_report(bundles)
        return sorted((s["line"], s["count"]) for s in report["sites"]), report["notes"]

    sites, notes = counted("%%syncfree --mode predict\n%%bash\n"
                           f"{sys.executable} {child} && {sys.executable} {child}\n"
                           f"bash {script}\n")
    assert sites == [(2, 3)], "\n".join(notes)
    assert not [n for n in notes if "unwatched" in n or "not attributed" in n], notes
    sites, notes = counted("%%syncfree --mode predict\nimport subprocess\n"
                           f"subprocess.run(['bash', {str(script)!r}], check=True)\n"
                           f"subprocess.run(['sh', '-c', {f'{sys.executable} {child}; {sys.executable} {child}'!r}], "
                           "check=True)\n")
    assert sites == [(3, 1), (4, 2)], "\n".join(notes)
    assert "SYNCFREE_FOLLOW" not in os.environ


def test_error_mode_without_cuda_stops_at_the_first_predicted_sync(ip):
    cell = ("%%syncfree --mode error\nimport torch\nx = torch.ones(3, device='cuda')\n"
            "y = x * 2\nv = y.sum().item()\nafter = True\n")
    result, _, bundles = run(ip, cell)
    assert not result.success and isinstance(result.error_in_exec, RuntimeError)
    assert "after" not in ip.user_ns  # stopped at line 5
    report = the_report(bundles)
    assert report["mode"] == "predict"
    assert "--mode error stops at the first predicted sync" in report["notes"][0]
    assert report["error"]["line"] == 5
    assert "would synchronize on a GPU" in report["error"]["message"]
    ((line, kind, count),) = [(s["line"], s["kind"], s["count"]) for s in report["sites"]]
    assert (line, kind, count) == (5, "item", 1)


def test_error_mode_traceback_ends_at_the_cell_line(ip):
    cell = "%%syncfree --mode error\nimport torch\nx = torch.ones(3, device='cuda')\nv = x.sum().item()\n"
    result, stdout, bundles = run(ip, cell)
    if the_report(bundles)["mode"] != "predict":
        pytest.skip("predict mode is unavailable in this kernel")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "----> 4 v = x.sum().item()" in stdout
    assert "syncfree/capture" not in stdout and "syncfree/magic.py" not in stdout
    # The user's frame is the last one: the error line follows it.
    tail = stdout[stdout.index("----> 4 v = x.sum().item()"):]
    assert "File " not in tail and "RuntimeError: called a synchronizing CUDA operation" in tail


def test_a_traceback_shows_the_magic_line_above_the_cells_first_lines(ip):
    """Issue 39 (12b): line 1 of the code that ran was blank (IPython leaves it out), so a
    stop on line 3 showed lines 2 and 3 only; the magic line is there, as a comment."""
    cell = "%%syncfree --mode error\nimport torch\nv = torch.ones(3, device='cuda').sum().item()\n"
    result, stdout, bundles = run(ip, cell)
    if the_report(bundles)["mode"] != "predict":
        pytest.skip("predict mode is unavailable in this kernel")
    assert isinstance(result.error_in_exec, RuntimeError)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", stdout)
    assert re.search(r"^ +1 # %%syncfree --mode error\n +2 import torch\n----> 3 v = ", shown, flags=re.M), shown


def test_watch_mode_counts_the_syncs_of_a_cells_child_processes(ip):
    ip.run_line_magic("syncfree", "on --mode predict --quiet")
    try:
        run(ip, "import multiprocessing, torch\ndef load():\n    torch.ones(2, device='cuda').sum().item()\n")
        run(ip, "child = multiprocessing.get_context('fork').Process(target=load, name='Loader')\n"
                "child.start(); child.join()\n")
        report = ip.user_ns["_syncfree_report"]
        assert report["totals"]["syncs"] == 1, report
        [site] = report["sites"]
        # load() is another cell's: the sync is put on the line of this cell that started the child
        assert (site["line"], site["count"]) == (2, 1), site
        assert site["message"].endswith("(in child process Loader)"), site
    finally:
        ip.run_line_magic("syncfree", "off")


def test_watch_mode_error_traceback_ends_at_the_cell_line_and_the_hook_is_removed(ip):
    ip.run_line_magic("syncfree", "on --mode error --quiet")
    try:
        assert ip.custom_exceptions == (RuntimeError,)
        result, stdout, _ = run(ip, "import torch\nx = torch.ones(3, device='cuda')\nv = x.sum().item()\n")
        if "predicted without a CUDA device" not in str(result.error_in_exec):
            pytest.skip("predict mode is unavailable in this kernel")
        assert "----> 3 v = x.sum().item()" in stdout
        assert "syncfree/capture" not in stdout and "syncfree/magic.py" not in stdout
        # Any other RuntimeError keeps its traceback and is still shown.
        result, stdout, _ = run(ip, "def f():\n    raise RuntimeError('mine')\nf()\n")
        assert str(result.error_in_exec) == "mine" and "----> 2     raise RuntimeError('mine')" in stdout
    finally:
        ip.run_line_magic("syncfree", "off")
    assert ip.custom_exceptions == ()


def test_watch_mode_keeps_a_custom_exception_handler_of_the_users(ip):
    def handler(shell, etype, value, tb, tb_offset=None):
        print("handled by the user")

    ip.set_custom_exc((ValueError,), handler)
    try:
        ip.run_line_magic("syncfree", "on --quiet")
        ip.run_line_magic("syncfree", "off")
        assert ip.custom_exceptions == (ValueError,)
        _, stdout, _ = run(ip, "raise ValueError('x')\n")
        assert "handled by the user" in stdout
    finally:
        ip.set_custom_exc((), None)


def test_other_errors_keep_their_whole_traceback():
    from syncfree.engine_choice import hide_engine_frames
    from syncfree.report import device_info

    try:
        device_info("bogus")  # raises ValueError inside syncfree
    except ValueError as exc:
        hide_engine_frames(exc)
        files = []
        tb = exc.__traceback__
        while tb is not None:
            files, tb = files + [tb.tb_frame.f_code.co_filename], tb.tb_next
        assert files[-1].endswith("syncfree/report.py")  # kept: not the sync error


def test_watching_property_follows_on_and_off(ip):
    magics = ip.magics_manager.registry["SyncfreeMagics"]
    assert magics.watching is False
    run(ip, "%syncfree on")
    try:
        assert magics.watching is True
        with pytest.raises(AttributeError):
            magics.watching = False  # read-only
    finally:
        run(ip, "%syncfree off")
    assert magics.watching is False


def test_unload_removes_the_magics_and_callbacks(ip):
    ip.run_line_magic("unload_ext", "syncfree")
    try:
        assert "syncfree" not in ip.magics_manager.magics["cell"]
        assert "syncfree" not in ip.magics_manager.magics["line"]
        assert not any(getattr(cb, "__self__", None).__class__ is SyncfreeMagics
                       for cb in ip.events.callbacks["pre_run_cell"])
    finally:
        ip.run_line_magic("load_ext", "syncfree")
    assert "syncfree" in ip.magics_manager.magics["cell"]


# ----------------------------------------------------------------------------- as IPython shows a cell (issue 13)


@pytest.mark.parametrize("interactivity, shown", [
    ("all", ["2", "4"]),
    ("last", ["4"]),
    ("last_expr", ["4"]),
    ("none", []),
])
def test_ast_node_interactivity_decides_which_values_show(ip, interactivity, shown):
    saved = ip.ast_node_interactivity
    ip.ast_node_interactivity = interactivity
    try:
        for cell in ("1 + 1\nx = 3\n2 + 2\n", "%%syncfree --quiet\n1 + 1\nx = 3\n2 + 2\n"):
            _, stdout, _ = run(ip, cell)
            values = [line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith("Out[")]
            assert values == shown, (cell, stdout)
    finally:
        ip.ast_node_interactivity = saved


def test_last_assignment_shows_with_last_expr_or_assign(ip):
    saved = ip.ast_node_interactivity
    ip.ast_node_interactivity = "last_expr_or_assign"
    try:
        result, _, _ = run(ip, "%%syncfree --quiet\ny = 1\nz = y + 41\n")
        assert result.result == 42
    finally:
        ip.ast_node_interactivity = saved


def test_exception_whose_str_raises_is_the_users_exception(ip):
    cell = ("class Unprintable(Exception):\n"
            "    def __str__(self):\n"
            "        raise RuntimeError('no str')\n"
            "raise Unprintable()\n")
    # store_history=False: IPython's own history formatting calls str() on the error.
    for source in (cell, "%%syncfree --quiet\n" + cell):
        with capture_output():
            result = ip.run_cell(source, store_history=False)
        assert type(result.error_in_exec).__name__ == "Unprintable", source
    report = ip.user_ns["_syncfree_report"]
    assert report["error"]["type"] == "Unprintable"
    assert report["error"]["message"] == "Unprintable" and report["error"]["line"] == 5


def test_syntax_error_without_the_compilers_frames(ip):
    _, stdout, bundles = run(ip, "%%syncfree\nx = 1\nx = (\n")
    assert "SyntaxError" in stdout and "line 3" in stdout
    assert "compilerop.py" not in stdout and "in _compile" not in stdout
    # What IPython lists for a SyntaxError raised in any cell magic (%%time shows 6).
    frames = [ln for ln in stdout.splitlines() if ln.lstrip().startswith(("File ", "Cell In"))]
    assert len(frames) <= 6, stdout
    assert the_report(bundles)["error"]["type"] == "SyntaxError"


def test_watch_mode_report_comes_after_a_capture_cell_not_inside_it(ip):
    run(ip, "%syncfree on --no-blocked")
    try:
        cell = "%%capture out\nimport torch\nx = torch.ones(2, device='cuda')\nx.sum().item()\nprint('hi')\n"
        _, stdout, bundles = run(ip, cell)
        captured = ip.user_ns["out"]
        assert captured.stdout == "hi\n" and stdout == ""
        assert [o for o in captured.outputs if MIME_TYPE in o.data] == []
        assert the_report(bundles)["totals"]["syncs"] >= 1  # below the cell, as IPython
        # shows what is displayed after %%capture's body has run

        # %%syncfree inside %%capture: its report also comes after the cell (with the
        # watched cell's own: in predict mode the outer session sees the syncs).
        _, _, bundles = run(ip, "%%capture out2\n%%syncfree\nx.sum().item()\n")
        reports = [b[MIME_TYPE] for b in bundles]
        assert len(reports) == 2
        assert ["item"] in [[s["kind"] for s in r["sites"]] for r in reports]
        assert [o for o in ip.user_ns["out2"].outputs if MIME_TYPE in o.data] == []

        # The next cell is watched as usual (the nested run did not end the watch).
        _, _, bundles = run(ip, "x.sum().item()\n")
        assert the_report(bundles)["totals"]["syncs"] == 1
    finally:
        run(ip, "%syncfree off")
    magics = ip.magics_manager.registry["SyncfreeMagics"]
    assert magics._watched is None and magics._outer == [] and magics._cell_info is None


@pytest.mark.filterwarnings("ignore:invalid escape sequence")
def test_no_warning_filter_outlives_a_cell(ip):
    import warnings

    before = warnings.filters, list(warnings.filters)
    # An invalid escape: the static pass parses it without showing its SyntaxWarning.
    result, _, bundles = run(ip, "%%syncfree\nimport re\npattern = re.compile('\\d+')\n")
    assert result.success
    the_report(bundles)
    assert warnings.filters is before[0] and warnings.filters == before[1]


# ----------------------------------------------------------------------------- the right line everywhere (issue 26)


def test_a_time_cell_reports_its_syncs_on_their_own_lines(cuda_ip):
    # "Check cell" puts %%syncfree above a %%time cell: the sync is on line 4, where
    # .item() is, not on the %%time line that runs the body; no line that ran lacks a site.
    cell = "%%syncfree\n%%time\n\nt = FakeTensor()\nv = t.item()\nn = 1\n"
    result, stdout, bundles = run(cuda_ip, cell)
    assert result.success and "Wall time" in stdout
    report = the_report(bundles)
    assert [(s["line"], s["kind"], s["chain"]) for s in report["sites"]] == [(5, "item", [5])]
    assert [(f["rule"], f["range"]["line"]) for f in report["findings"]] == [("SF101", 5)]


def test_syncfree_under_a_time_cell_reports_its_syncs_on_their_own_lines(cuda_ip):
    # %%time above %%syncfree: the magic rebuilt its cell with the body at line 2, every line one off, no cell id
    result, stdout, bundles = run(cuda_ip, "%%time\n%%syncfree\n\nt = FakeTensor()\nv = t.item()\nn = 1\n")
    assert result.success and "Wall time" in stdout
    report = the_report(bundles)
    assert [(s["line"], s["kind"], s["chain"]) for s in report["sites"]] == [(5, "item", [5])]


def test_a_time_cell_in_watch_mode_reports_its_syncs_on_their_own_lines(cuda_ip):
    cuda_ip.run_line_magic("syncfree", "on --quiet")
    try:
        run(cuda_ip, "%%time\nt = FakeTensor()\nv = t.item()\n")
    finally:
        cuda_ip.run_line_magic("syncfree", "off")
    report = cuda_ip.user_ns["_syncfree_report"]
    assert [(s["line"], s["kind"]) for s in report["sites"]] == [(3, "item")]


def _sites(report):
    return [(s["line"], s["count"], s.get("phase", "recurring")) for s in report["sites"]]


LOOP_BODY = "t = FakeTensor()\nfor i in range(3):\n    t.item()\nt.item()\n"


def test_a_time_cell_tells_syncs_in_a_loop_from_those_paid_once(cuda_ip):
    """Syncs in a loop of a %%time body were marked "once": its code name has no source in linecache."""
    result, stdout, bundles = run(cuda_ip, "%%syncfree\n%%time\n" + LOOP_BODY)
    assert result.success and "Wall time" in stdout
    assert _sites(the_report(bundles)) == [(5, 3, "recurring"), (6, 1, "once")]
    assert "<timed exec>" not in linecache.cache  # as IPython leaves it
    # The next %%time body, as long, has no loop where the last one had: its lines' loops are its own.
    result, _, bundles = run(cuda_ip, "%%syncfree\n%%time\nt = FakeTensor()\ni = 0\nt.item()\nn = 1\n")
    assert _sites(the_report(bundles)) == [(5, 1, "once")]


def test_a_capture_cell_reports_its_syncs_on_their_own_lines(cuda_ip):
    """%%capture runs its body as a cell of its own: every sync was on line 1 (the magic's line)."""
    result, stdout, bundles = run(cuda_ip, "%%syncfree\n%%capture captured\n\n" + LOOP_BODY.replace(
        "t.item()\n", "t.item()\n    print('hidden')\n", 1))
    assert result.success and "hidden" not in stdout
    assert "hidden" in cuda_ip.user_ns["captured"].stdout
    assert _sites(the_report(bundles)) == [(6, 3, "recurring"), (8, 1, "once")]


@pytest.mark.parametrize("end", ["\n", ""])
def test_a_capture_cell_in_watch_mode_reports_its_syncs_on_their_own_lines(cuda_ip, end, monkeypatch):
    # In a kernel, a cell without a newline at its end (as a notebook saves its last line) put every sync on line 1:
    # IPython adds the newline before it takes %%capture's body out, and ipykernel's compiler names the body's code
    # by the hash of that text.
    compiler = pytest.importorskip("ipykernel.compiler")
    monkeypatch.setattr(cuda_ip, "compile", compiler.XCachingCompiler())
    cuda_ip.run_line_magic("syncfree", "on --quiet")
    try:
        run(cuda_ip, "%%capture\n" + LOOP_BODY.rstrip("\n") + end)
    finally:
        cuda_ip.run_line_magic("syncfree", "off")
    assert _sites(cuda_ip.user_ns["_syncfree_report"]) == [(4, 3, "recurring"), (5, 1, "once")]


def test_a_timeit_cell_reports_its_syncs_on_their_own_lines_as_recurring(cuda_ip):
    result, stdout, bundles = run(cuda_ip, "%%syncfree\n%%timeit -n 2 -r 1\nt = FakeTensor()\nt.item()\n")
    assert result.success and "per loop" in stdout
    assert _sites(the_report(bundles)) == [(4, 2, "recurring")]


def test_the_last_expression_is_shown_under_the_recorder_as_a_sync_on_its_line(cuda_ip):
    # Showing a tensor (its repr copies the values) syncs: counted on line 3 in %%syncfree
    # as in watch mode, the value still shown once as Out[n] and still the cell's result.
    result, stdout, bundles = run(cuda_ip, "%%syncfree\nt = FakeTensor()\nt\n")
    assert result.success and isinstance(result.result, FakeTensor)
    assert stdout.count("FakeTensor()") == 1 and f"Out[{result.execution_count}]: FakeTensor()" in stdout
    assert cuda_ip.user_ns["_"] is result.result
    report = the_report(bundles)
    assert [(s["line"], s["count"]) for s in report["sites"]] == [(3, 1)]
    assert report["totals"]["syncs"] == 1


def test_the_last_expression_in_predict_mode_is_a_predicted_sync(ip):
    cell = "%%syncfree --mode predict\nimport torch\nx = torch.ones(3, device='cuda')\nx\n"
    result, stdout, bundles = run(ip, cell)
    report = the_report(bundles)
    if report["mode"] != "predict":
        pytest.skip("predict mode is unavailable in this kernel")
    assert result.success and "tensor([1., 1., 1.])" in stdout
    assert [(s["line"], s["rule"]) for s in report["sites"]] == [(4, "SF203")]
    assert [f["range"]["line"] for f in report["findings"]] == [4]


@pytest.mark.parametrize("mode", ["predict", "error"])
def test_showing_the_last_expression_is_sf203_when_the_static_pass_cannot_tell_its_a_tensor(ip, mode):
    """Issue 39 (9): the display's sync was SF201 (print) when nothing in the cell says the
    value is a CUDA tensor; print(...) as the last line syncs in the call and stays SF201."""
    ip.run_cell("import torch\ndef make():\n    return torch.ones(3, device='cuda')\n")
    result, stdout, bundles = run(ip, f"%%syncfree --mode {mode}\nx = make()\nx\n")
    report = the_report(bundles)
    if report["mode"] != "predict":
        pytest.skip("predict mode is unavailable in this kernel")
    assert report["findings"] == []
    assert [(s["line"], s["kind"], s["rule"]) for s in report["sites"]] == [(3, "print", "SF203")]
    if mode == "error":
        assert isinstance(result.error_in_exec, RuntimeError) and "----> 3 x" in stdout
    _, _, bundles = run(ip, f"%%syncfree --mode {mode}\nprint(make())\n")
    assert [(s["line"], s["rule"]) for s in the_report(bundles)["sites"]] == [(2, "SF201")]


def test_the_magic_called_from_code_still_returns_the_value(cuda_ip):
    result, stdout, _ = run(cuda_ip, "v = get_ipython().run_cell_magic('syncfree', '--quiet', '40 + 2')\nv\n")
    assert result.success and result.result == 42


def _frames_shown(stdout: str) -> list[str]:
    return re.findall(r"^(Cell In\[\d+\], line \d+.*|File .*)$", re.sub(r"\x1b\[[0-9;]*m", "", stdout),
                      flags=re.M)


def test_a_traceback_starts_at_the_cell_line_not_at_the_magic_call(cuda_ip):
    result, stdout, _ = run(cuda_ip, "%%syncfree\na = 1\ndef f():\n    raise ValueError('boom')\nf()\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert "run_cell_magic" not in stdout and "skipping hidden" not in stdout
    count = result.execution_count
    assert _frames_shown(stdout) == [f"Cell In[{count}], line 5", f"Cell In[{count}], line 4, in f()"]


def test_an_interrupted_cell_ends_at_the_user_line_not_in_syncfree(cuda_ip):
    cell = "%%syncfree\nimport os, signal\nos.kill(os.getpid(), signal.SIGINT)\nafter = 1\n"
    result, stdout, _ = run(cuda_ip, cell)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert "interrupts.py" not in stdout and "_handler" not in stdout and "run_cell_magic" not in stdout
    assert _frames_shown(stdout) == [f"Cell In[{result.execution_count}], line 3"]


def test_error_mode_stops_at_the_display_of_the_last_expression(ip):
    # Showing a tensor is a sync: --mode error stops there, as a cell error at its line
    # (IPython's formatters would otherwise catch the stop and print it as their own error).
    cell = "%%syncfree --mode error\nimport torch\nx = torch.ones(3, device='cuda')\nx\n"
    result, stdout, bundles = run(ip, cell)
    report = the_report(bundles)
    if report["mode"] != "predict":
        pytest.skip("predict mode is unavailable in this kernel")
    assert isinstance(result.error_in_exec, RuntimeError) and result.result is None
    assert "----> 4 x" in stdout and "FormatterWarning" not in stdout and "Out[" not in stdout
    assert report["error"]["line"] == 4
    assert [(s["line"], s["kind"]) for s in report["sites"]] == [(4, "print")]


def test_a_sync_in_a_function_from_an_earlier_cell_names_that_cell_and_line(cuda_ip):
    """Issue 39: the site is the calling line (its chain), and says where inside the earlier
    cell's function it synced; no frame names IPython's temp file for that cell."""
    defined, _, _ = run(cuda_ip, "def helper(t):\n    y = t\n    return y.item()\n")
    _, _, bundles = run(cuda_ip, "%%syncfree\nt = FakeTensor()\nv = helper(t)\n")
    report = the_report(bundles)
    (site,) = report["sites"]
    assert site["chain"] == [3] and site["line"] == 3
    cell = f"In [{defined.execution_count}]"
    assert site["defined_in"] == {"cell": cell, "execution_count": defined.execution_count, "line": 3,
                                  "text": "return y.item()", "function": "helper"}
    assert [f["file"] for f in site["frames"]] == [cell]
    text = bundles[0]["text/plain"]
    assert f"in helper(), defined in {cell} line 3: `return y.item()`" in text
    assert "ipykernel" not in text and "ipython-input" not in str(report)
    assert f"defined in {cell} line 3" in bundles[0]["text/html"]


def test_cost_option_measures_or_says_why_not(cuda_ip):
    """``--cost``: what each sync costs (GPU time lost); where it cannot be measured (here a stand-in
    GPU, no trace of it) the report says why in a note and every cost is null, never a guess."""
    from syncfree.cost import COST_NOT_ASKED

    cell = "%%syncfree --cost\nt = FakeTensor()\nt.item()\n"
    _, _, bundles = run(cuda_ip, cell)
    report = the_report(bundles)
    (site,) = report["sites"]
    assert (site["cost_ms"], site["cost_each_ms"], site["cost_share"]) == (None, None, None)
    assert report["totals"]["cost_ms"] is None
    assert any(n.startswith("cost not measured: ") for n in report["notes"]), report["notes"]
    assert COST_NOT_ASKED not in report["notes"]
    _, _, bundles = run(cuda_ip, "%%syncfree\nt = FakeTensor()\nt.item()\n")
    assert COST_NOT_ASKED in the_report(bundles)["notes"]


def test_a_thread_still_running_when_its_cell_ends_is_named(ip):
    # A background thread the cell starts and does not join: its syncs after the cell's end were nobody's, and the
    # cell's report said nothing. It is named; a thread the cell joins is counted as before.
    assert ip.run_cell("import threading, torch\ngate = threading.Event()\n"
                       "def late(x):\n    gate.wait(30)\n    return x.sum().item()\n").success
    try:
        result, _, bundles = run(ip, "%%syncfree --mode predict\nx = torch.ones(2, device='cuda')\n"
                                     "saver = threading.Thread(target=late, args=(x,), name='saver')\nsaver.start()\n")
        assert result.success, result.error_in_exec
        notes = " ".join(the_report(bundles)["notes"])
        assert "thread 'saver' was still running when the cell ended: the syncs it makes after that are not counted " \
               "(join it before the cell ends)" in notes, notes
    finally:
        ip.run_cell("gate.set(); saver.join(30)")
    result, _, bundles = run(ip, "%%syncfree --mode predict\nx = torch.ones(2, device='cuda')\n"
                                 "t = threading.Thread(target=late, args=(x,))\nt.start(); t.join()\n")
    report = the_report(bundles)
    assert report["totals"]["syncs"] == 1 and "still running" not in " ".join(report["notes"]), report
