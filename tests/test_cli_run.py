"""`syncfree run` on Python programs behaves as `python` does (argv, cwd, stdin, -m, atexit, os._exit, forked
children, exit status) and its report is a stream of its own: a real subprocess each, in predict mode on CPU."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())


def syncfree(*argv: str, cwd: Path, stdin: str | None = None):
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "syncfree", *argv], capture_output=True, text=True, cwd=cwd,
                          input=stdin, env=environment, timeout=180)


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


PRINTING = """\
    import sys, torch
    x = torch.randn(4, device="cuda")
    for step in range(3):
        print("LOSSLINE", step, x.sum().item())
    print("argv", sys.argv)
    """


# --------------------------------------------------------------------------------------------- the report's stream
@pytest.mark.parametrize("output_format", ["json", "sarif", "github"])
def test_machine_formats_keep_stdout_to_the_report_and_the_programs_output_on_stderr(tmp_path, output_format):
    write(tmp_path, "train.py", PRINTING)
    done = syncfree("run", "--format", output_format, "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "LOSSLINE 2" in done.stderr and "argv ['train.py']" in done.stderr  # the user still sees it
    assert "LOSSLINE" not in done.stdout
    if output_format == "sarif":
        jsonschema = pytest.importorskip("jsonschema")
        log = json.loads(done.stdout)
        jsonschema.validate(log, SARIF_SCHEMA)
        assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in log["runs"][0]["results"]] == [4]
    elif output_format == "json":
        [row] = json.loads(done.stdout)
        assert (row["path"], row["line"], row["count"]) == ("train.py", 4, 3)
    else:
        assert done.stdout.startswith("::warning file=train.py,line=4,") and done.stdout.count("\n") == 1
        assert done.stdout.endswith("(predicted) (×3)\n"), done.stdout  # how often: not one sync a row


@pytest.mark.parametrize("output_format", ["text", "sarif"])
def test_output_file_holds_the_report_and_stdout_the_programs_output(tmp_path, output_format):
    write(tmp_path, "train.py", PRINTING)
    done = syncfree("run", "--format", output_format, "-o", "out.report", "train.py", "--lr", "3", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-1] == "argv ['train.py', '--lr', '3']"  # untouched, and nothing else
    assert done.stdout.count("\n") == 4
    report = (tmp_path / "out.report").read_text()
    assert "LOSSLINE" not in report and "train.py" in report
    if output_format == "sarif":
        json.loads(report)
    # The long name, on check too; a folder that does not exist is said before anything runs.
    done = syncfree("check", "--output-file", "check.txt", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == "" and " SF101 " in (tmp_path / "check.txt").read_text()
    done = syncfree("run", "-o", "missing/out.json", "train.py", cwd=tmp_path)
    assert done.returncode == 2 and "cannot write missing/out.json" in done.stderr and "LOSSLINE" not in done.stdout


def test_notebook_options_given_for_a_script_are_an_error(tmp_path):
    write(tmp_path, "train.py", PRINTING)
    done = syncfree("run", "--output", "out.ipynb", "train.py", cwd=tmp_path)
    assert done.returncode == 2 and "LOSSLINE" not in done.stdout
    assert done.stderr.strip() == ("syncfree: error: --output applies to notebooks, not to train.py; the report "
                                   "goes to a file with --output-file (-o)")
    done = syncfree("run", "--timeout", "5", "--kernel", "python3", "train.py", cwd=tmp_path)
    assert done.returncode == 2 and "--timeout, --kernel apply to notebooks" in done.stderr


# --------------------------------------------------------------------------------------------- as python does
def test_argv_as_python_sets_it_with_a_double_dash_kept(tmp_path):
    write(tmp_path, "sub/train.py", PRINTING)
    done = syncfree("run", "sub/train.py", "--format", "json", "--", "-o", "x", cwd=tmp_path)
    assert "argv ['sub/train.py', '--format', 'json', '--', '-o', 'x']" in done.stdout, done.stdout + done.stderr
    assert "sub/train.py:4:29: SF101 " in done.stdout  # the options after the script were the script's


def test_paths_stay_relative_to_where_run_started_after_the_program_changes_folder(tmp_path):
    write(tmp_path, "train.py", """\
        import os, torch
        os.makedirs("outputs/run1", exist_ok=True)
        os.chdir("outputs/run1")
        x = torch.randn(4, device="cuda")
        x.sum().item()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.stdout.startswith("train.py:5:1: SF101 ") and "run1" not in done.stdout, done.stdout
    [row] = json.loads(syncfree("run", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert (row["path"], row["line"], row["col"]) == ("train.py", 5, 1)


def test_atexit_handlers_run_inside_the_watch(tmp_path):
    write(tmp_path, "train.py", """\
        import atexit, torch
        x = torch.randn(4, device="cuda")

        @atexit.register
        def save():
            print("saved", x.mean().item() is not None)

        def not_run():
            print("unregistered handler ran")

        atexit.register(not_run)
        atexit.unregister(not_run)
        x.sum().item()
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "saved True" in done.stderr and "unregistered" not in done.stderr  # no crash on the stand-ins
    assert sorted(row["line"] for row in json.loads(done.stdout)) == [6, 13]


def test_os_exit_still_leaves_a_report_and_its_status(tmp_path):
    write(tmp_path, "train.py", """\
        import atexit, os, torch
        atexit.register(lambda: print("atexit ran"))
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("done", flush=True)
        os._exit(4)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert done.stdout.startswith("done\ntrain.py:4:1: SF101 ")
    assert "the program ended with os._exit(4)" in done.stdout and "atexit ran" not in done.stdout
    done = syncfree("run", "--format", "sarif", "-o", "out.sarif", "train.py", cwd=tmp_path)
    assert done.returncode == 4 and json.loads((tmp_path / "out.sarif").read_text())["runs"][0]["results"]


def test_syncs_that_no_line_holds_are_said_in_every_format_and_carried_over_an_exec(tmp_path):
    # A thread whose target is torch's own (no line of the program's on its stack): "1 sync at 0 sites" with nothing
    # on where, JSON `[]` with exit 1 and nothing on stderr. After os.execv of itself the sync was lost: exit 0.
    write(tmp_path, "train.py", """\
        import os, sys, threading, torch
        x = torch.randn(4, device="cuda")
        if os.environ.get("STAGE") != "2":
            worker = threading.Thread(target=torch.Tensor.item, args=(x.sum(),))
            worker.start(); worker.join()
            if len(sys.argv) > 1:
                os.environ["STAGE"] = "2"
                os.execv(sys.executable, [sys.executable, sys.argv[0]])
        """)
    for argv in ([], ["again"]):
        done = syncfree("run", "train.py", *argv, cwd=tmp_path)
        assert done.returncode == 1, (argv, done.stdout, done.stderr)
        assert "1 sync at 0 sites (predicted)" in done.stdout, done.stdout
        assert "note: 1 sync outside your code (library or other threads)" in done.stdout, done.stdout
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and json.loads(done.stdout) == [], done.stdout
    assert "syncfree: note: 1 sync outside your code (library or other threads)\n" in done.stderr, done.stderr
    assert "No CUDA device" not in done.stderr, done.stderr  # what every predicted run says is no news there


def test_syncs_past_the_sites_limit_are_counted_and_said_not_taken_for_a_librarys(tmp_path):
    write(tmp_path, "many.py", "import torch\nx = torch.randn(4, device='cuda')\n" + "x.sum().item()\n" * 1003)
    done = syncfree("run", "--format", "json", "--budget", "1000", "many.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert sum(row["count"] for row in json.loads(done.stdout)) == 1000
    assert "syncfree: note: 3 syncs at sites beyond the first 1000 are counted in the totals only" in done.stderr
    assert "outside your code" not in done.stderr, done.stderr


def test_a_sync_on_a_line_an_allow_comment_covers_keeps_its_rule(tmp_path):
    # The recorder's rule of a sync came from the static findings with the allowed ones left out: a wider finding
    # around the line named it (SF910, "several .item() reads in a row"), and --ignore SF910 left a real .item() out.
    write(tmp_path, "train.py", """\
        import torch
        x = torch.randn(4, device="cuda")
        for i in range(3):
            c = x.min().item()
            d = x.max().item()
            e = (x.sum()  # syncfree: allow
                 .item())
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert [(row["line"], row["rule"]) for row in json.loads(done.stdout)] == [(4, "SF101"), (5, "SF101"),
                                                                               (7, "SF101")], done.stdout


def test_a_torch_error_in_predict_mode_shows_the_programs_traceback_alone(tmp_path):
    # Predict mode's own frames (its mode, the call it hands on) sat between the program's line and torch's error.
    write(tmp_path, "train.py", """\
        import torch
        def step(a, b):
            return a @ b
        step(torch.ones(2, 3, device="cuda"), torch.ones(2, 3, device="cuda"))
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    frames = [line for line in done.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert [frame.split(",")[1].strip() for frame in frames] == ["line 4", "line 3"], done.stderr
    assert "syncfree" not in "".join(frames), done.stderr
    # and in an exception it chains
    write(tmp_path, "chained.py", """\
        import torch
        try:
            torch.ones(2, device="cuda") + torch.ones(3, device="cuda")
        except RuntimeError as error:
            raise ValueError("shapes") from error
        """)
    done = syncfree("run", "chained.py", cwd=tmp_path)
    assert done.returncode == 2 and "ValueError: shapes" in done.stderr, done.stderr
    assert "syncfree" not in "".join(line for line in done.stderr.splitlines() if line.lstrip().startswith("File "))


def test_a_child_signalled_as_it_is_forked_writes_no_second_report(tmp_path):
    # A SIGTERM that reached a child between its fork and its follower taking it (Pool.terminate() as the pool's
    # handler thread forks a worker: a clean-clone CI run) ran the run's handler there: the run's report was written
    # twice on stdout, and a JSON reader failed ("Extra data").
    write(tmp_path, "train.py", """\
        import os, signal, torch
        torch.ones(2, device="cuda").sum().item()
        os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert [row["line"] for row in json.loads(done.stdout)] == [2], (done.stdout, done.stderr)


def test_a_function_called_from_two_lines_that_run_once_is_said_so(tmp_path):
    # "×2, paid once: the line runs once": the line ran twice; each line that called it ran once.
    write(tmp_path, "train.py", """\
        import torch
        x = torch.ones(2, device="cuda")
        def f():
            return x.sum().item()
        f()
        f()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert "×2, paid once: each line that calls it runs once (called from train.py:5; train.py:6)" in done.stdout


def test_the_programs_import_of_torch_is_watched_after_a_look_or_a_failed_attempt(tmp_path):
    # importlib.util.find_spec("torch") (transformers asks so at its import) took the run's one-shot import hook out:
    # the import of torch after it went unseen, no sync of the program was watched ("imported past the hook"). A
    # broken torch first on sys.path, caught, then the real one: the hook had left at the first attempt.
    write(tmp_path, "fake/torch/__init__.py", "raise ImportError('a broken torch')\n")
    write(tmp_path, "looks.py", """\
        import importlib.util
        assert importlib.util.find_spec("torch") is not None
        import torch
        torch.ones(2, device="cuda").sum().item()
        """)
    write(tmp_path, "fails.py", """\
        import os, sys
        sys.path.insert(0, os.path.join(os.getcwd(), "fake"))
        try:
            import torch
        except ImportError:
            sys.path.pop(0)
            sys.modules.pop("torch", None)
        import torch
        torch.ones(2, device="cuda").sum().item()
        """)
    for program, line in (("looks.py", 4), ("fails.py", 9)):
        done = syncfree("run", "--format", "json", program, cwd=tmp_path)
        assert done.returncode == 1, (program, done.stdout, done.stderr)
        assert [row["line"] for row in json.loads(done.stdout)] == [line], (program, done.stdout)


def test_os_abort_leaves_a_report_and_dies_of_sigabrt(tmp_path):
    # os.abort() dies of SIGABRT in C, where no Python handler runs: the report was lost, with nothing said.
    write(tmp_path, "train.py", """\
        import os, torch
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("done", flush=True)
        os.abort()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == -signal.SIGABRT, (done.stdout, done.stderr)
    assert done.stdout.startswith("done\ntrain.py:3:1: SF101 "), done.stdout
    assert "note: the program was ended by SIGABRT" in done.stdout, done.stdout
    # A forked child's os.abort(): its report first (its sync was lost, the child named as killed)
    write(tmp_path, "child.py", """\
        import os, torch
        x = torch.randn(4, device="cuda")
        pid = os.fork()
        if pid == 0:
            x.sum().item()
            os.abort()
        os.waitpid(pid, 0)
        """)
    done = syncfree("run", "child.py", cwd=tmp_path)
    assert done.returncode == 1 and "child.py:5:5: SF101" in done.stdout, (done.stdout, done.stderr)
    assert "killed" not in done.stdout + done.stderr, done.stdout


def test_os_exit_0_after_syncs_over_the_budget_fails_the_run(tmp_path):
    # A script that ends with os._exit(0) (skipping its workers' shutdown) must not pass a CI gate its syncs fail.
    write(tmp_path, "train.py", """\
        import os, torch
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("done", flush=True)
        os._exit(0)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the program ended with os._exit(0)" in done.stdout and "exceed" not in done.stderr
    assert syncfree("run", "--budget", "1", "train.py", cwd=tmp_path).returncode == 0
    assert syncfree("run", "--exit-zero", "train.py", cwd=tmp_path).returncode == 0


def test_a_program_that_replaces_itself_with_exec_after_syncs_over_the_budget_fails_the_run(tmp_path):
    # os.exec* replaces the program: its report went with the old image, and the new program's status was the
    # run's. A gate whose script synced and then re-executed itself passed, with no report at all.
    write(tmp_path, "train.py", """\
        import atexit, os, sys, torch
        atexit.register(lambda: print("atexit ran"))
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("before exec", flush=True)
        os.execv("/bin/sh", ["/bin/sh", "-c", "echo NEW''PROGRAM; exit 3"])  # not Python: not followed
        """)
    done = syncfree("run", "--budget", "0", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.startswith("before exec\ntrain.py:4:1: SF101 "), done.stdout
    assert "note: the program replaced itself with os.exec* (" in done.stdout
    assert "NEWPROGRAM" not in done.stdout and "atexit ran" not in done.stdout
    assert "replaced itself with os.exec* after syncs over the budget of 0: ended here with status 1" in done.stderr
    # Within the budget (or --exit-zero) the new program runs, after the report, and its status is the run's.
    for options in (["--budget", "1"], ["--exit-zero"]):
        done = syncfree("run", *options, "train.py", cwd=tmp_path)
        assert done.returncode == 3, (options, done.stdout, done.stderr)
        assert re.search(r"SF101 .*\n(.*\n)*note: the program replaced itself with os\.exec\* .*\n(.*\n)*NEWPROGRAM",
                         done.stdout), done.stdout
    # A machine format: the report is written whole before the new program runs.
    done = syncfree("run", "--format", "json", "-o", "out.json", "--exit-zero", "train.py", cwd=tmp_path)
    assert done.returncode == 3 and [row["line"] for row in json.loads((tmp_path / "out.json").read_text())] == [4]


def test_exec_through_path_and_a_forked_child_that_execs(tmp_path):
    # os.execvp tries each folder of PATH (through os.execv): a candidate that does not exist ends nothing. A forked
    # child that replaces itself writes its report first: it was named "ended without a report (killed)".
    bin_folder = Path(sys.executable).parent
    write(tmp_path, "train.py", f"""\
        import os, sys, torch
        x = torch.randn(4, device="cuda")
        pid = os.fork()
        if pid == 0:
            x.sum().item()
            os.execv(sys.executable, [sys.executable, "-c", "pass"])
        os.waitpid(pid, 0)
        os.environ["PATH"] = os.pathsep.join(["/nonexistent-folder", {str(bin_folder)!r}])
        os.execvp({Path(sys.executable).name!r}, ["python", "-c", "print('NEW' + 'PROGRAM')"])
        """)
    done = syncfree("run", "--exit-zero", "train.py", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "killed" not in done.stdout, done.stdout
    assert re.search(r"train\.py:5:\d+: SF101 .*in child process", done.stdout), done.stdout
    # the new program is this Python's -c: followed, its output before the report that counts both
    assert f"note: the program replaced itself with os.exec* ({bin_folder / Path(sys.executable).name} -c " \
           "print('NEW' + 'PROGRAM')): followed" in done.stdout, done.stdout
    assert done.stdout.startswith("NEWPROGRAM\n"), done.stdout
    # the new program imported no torch: said of it, not of the run whose first program synced
    assert "note: no torch code ran after the os.exec*: the program that replaced the first one never imported " \
           "torch" in done.stdout and "its process made no sync" not in done.stdout, done.stdout


REEXEC = """\
    import os, sys, torch
    x = torch.randn(4, device="cuda")
    if "STAGE" not in os.environ:  # re-executes itself once with a setting, as some launch scripts do
        x.sum().item()
        os.environ["STAGE"] = "2"
        os.execv(sys.executable, [sys.executable, "-u", *sys.argv])
    print("stage 2", sys.argv[1:], flush=True)
    for _ in range(3):
        x.max().item()
    """


@pytest.mark.exhaustive  # make test-all: an exec'd program is followed in make test's python -c exec test
def test_a_program_that_re_executes_itself_is_followed_and_both_count(tmp_path):
    # The new program runs the training: unwatched, a gate passed it whatever it synced. The run follows an exec of
    # its own Python (same options), and the report counts both programs' syncs, its status the new run's.
    write(tmp_path, "train.py", REEXEC)
    carries = set(Path(tempfile.gettempdir()).glob("syncfree-exec-*.json"))
    done = syncfree("run", "--budget", "3", "train.py", "--lr", "1", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "stage 2 ['--lr', '1']" in done.stdout
    assert re.search(r"train\.py:9:\d+: SF101 .*×3\n.*train\.py:4:\d+: SF101 .*×1", done.stdout), done.stdout
    assert "4 syncs at 2 sites" in done.stdout and "Budget 3: exceeded." in done.stdout
    assert f"note: the program replaced itself with os.exec* ({sys.executable} -u train.py --lr 1): followed, this " \
           "report counts the syncs of both" in done.stdout
    assert syncfree("run", "--budget", "4", "train.py", cwd=tmp_path).returncode == 0
    done = syncfree("run", "--format", "json", "-o", "out.json", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "stage 2" in done.stdout  # -o: the report goes to the file
    assert sorted((row["line"], row["count"]) for row in json.loads((tmp_path / "out.json").read_text())) == [(4, 1),
                                                                                                             (9, 3)]
    assert set(Path(tempfile.gettempdir()).glob("syncfree-exec-*.json")) <= carries  # each run removed its own


def test_a_program_that_execs_python_c_is_followed_and_both_count(tmp_path):
    # A launcher that hands over to `python -c "from app import main; main()"`: before -c was followed the new
    # program ran unwatched, its syncs neither counted nor named beyond a note.
    write(tmp_path, "launch.py", """\
        import os, sys, torch
        torch.ones(1, device="cuda").item()
        os.execv(sys.executable, [sys.executable, "-c", "import sys, torch\\nprint('stage 2', sys.argv)\\n"
                 "x = torch.ones(2, device='cuda')\\nfor _ in range(3): x.sum().item()", "--fast"])
        """)
    done = syncfree("run", "--format", "json", "launch.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "stage 2 ['-c', '--fast']" in done.stderr
    assert sorted((row["path"], row["line"], row["count"]) for row in json.loads(done.stdout)) == [
        ("-c", 4, 3), ("launch.py", 2, 1)], done.stdout


def test_an_exec_whose_python_cannot_import_syncfree_runs_unwatched_not_broken(tmp_path):
    # Following needs syncfree in the new program: without site-packages (-S) and the environment's PYTHONPATH, the
    # followed run would end in "No module named syncfree" instead of running the program. It runs as asked.
    write(tmp_path, "child.py", "print('CHILD' + 'RAN')\nraise SystemExit(5)\n")
    write(tmp_path, "train.py", """\
        import os, sys
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        os.execve(sys.executable, [sys.executable, "-S", "-E", "child.py"], env)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 5, (done.stdout, done.stderr)
    assert "CHILDRAN" in done.stdout and "No module named" not in done.stderr
    assert f"note: the program replaced itself with os.exec* ({sys.executable} -S -E child.py): this report ends " \
           "there" in done.stdout, done.stdout


def test_an_exec_of_a_program_that_is_not_there_keeps_the_report_and_pythons_own_error(tmp_path):
    # Followed, the new run would end at its usage error ("cannot read ...") and the report carried to it with it.
    # Not followed: the report is written at the exec, and Python says what is missing, as without syncfree.
    write(tmp_path, "train.py", """\
        import os, sys, torch
        torch.randn(2, device="cuda").sum().item()
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
        """)
    carries = set(Path(tempfile.gettempdir()).glob("syncfree-exec-*.json"))
    done = syncfree("run", "train.py", "missing.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "train.py:2:1: SF101 " in done.stdout and "this report ends there" in done.stdout, done.stdout
    assert "ended here with status 1" in done.stderr, done.stderr
    done = syncfree("run", "--exit-zero", "train.py", "missing.py", cwd=tmp_path)
    assert done.returncode == 2 and "can't open file" in done.stderr, (done.stdout, done.stderr)
    assert "train.py:2:1: SF101 " in done.stdout, done.stdout
    done = syncfree("run", "--exit-zero", "train.py", "-m", "no_such_module_here", cwd=tmp_path)
    assert done.returncode == 1 and "No module named no_such_module_here" in done.stderr, (done.stdout, done.stderr)
    assert "train.py:2:1: SF101 " in done.stdout, done.stdout
    assert set(Path(tempfile.gettempdir()).glob("syncfree-exec-*.json")) <= carries  # none was written and left


def test_a_carried_report_that_no_run_takes_is_removed(tmp_path, monkeypatch):
    # A followed exec whose run stops at an error before taking the report handed to it (a broken [tool.syncfree]
    # where the program went) left the file behind.
    carry = tmp_path / "carry.json"
    carry.write_text(json.dumps({"start": str(tmp_path), "sites": []}))
    write(tmp_path, "pyproject.toml", "[tool.syncfree]\nbudget = 'many'\n")
    write(tmp_path, "train.py", "pass\n")
    monkeypatch.setenv("SYNCFREE_EXEC_CARRY", str(carry))
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 2 and "budget" in done.stderr, done.stderr
    assert not carry.exists()


def test_which_execs_the_run_follows():
    sys.path.insert(0, str(ROOT / "python_helper"))
    from syncfree.cli.run_script import _followed

    here, options = sys.executable, ["--budget", "0"]
    run = [here, "-m", "syncfree", "run", *options, "--"]
    assert _followed([here, "train.py", "--lr", "1"], options) == [*run, "train.py", "--lr", "1"]
    assert _followed([here, "-u", "-X", "dev", "-Wignore", "-m", "pkg.train", "-x"], options) == [
        here, "-u", "-X", "dev", "-Wignore", "-m", "syncfree", "run", *options, "--", "-m", "pkg.train", "-x"]
    assert _followed([here, "-mpkg", "a"], options) == [*run, "-m", "pkg", "a"]
    assert _followed([here, "-"], options) == [*run, "-"]
    assert _followed([here, "-uB", "--", "-weird.py"], options) == [here, "-uB", *run[1:], "-weird.py"]
    assert _followed([here, "-c", "import t; t.main()", "-x"], options) == [*run, "-c", "import t; t.main()", "-x"]
    assert _followed([here, "-u", "-cimport t"], options) == [here, "-u", *run[1:], "-c", "import t"]
    # Not followed: the interactive interpreter, a long option, another interpreter, -c or -m without a program.
    for command in ([here], [here, "-u"], [here, "--check-hash-based-pycs", "always", "x.py"],
                    ["/usr/bin/env", "python", "x.py"], [here + "-other", "x.py"], [here, "-m"], [here, "-c"]):
        assert _followed(command, options) is None, command


def test_ctrl_c_reports_the_syncs_until_then_with_status_130(tmp_path):
    import signal
    import time

    write(tmp_path, "train.py", """\
        import atexit, torch
        atexit.register(lambda: print("atexit ran", flush=True))
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("training", flush=True)
        while True:
            pass
        """)
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    process = subprocess.Popen([sys.executable, "-m", "syncfree", "run", "train.py"], cwd=tmp_path, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
    assert process.stdout.readline() == "training\n"
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    # As Python: the process dies by SIGINT (a shell shows 130), not an exit with status 130, and the traceback
    # ends at the program's line, not in syncfree's SIGINT handler.
    assert process.returncode == -signal.SIGINT, err
    assert "KeyboardInterrupt" in err and "interrupted; the syncs until then are reported" in err
    assert "interrupts.py" not in err and "syncfree" not in err.split("KeyboardInterrupt")[0], err
    assert out.startswith("atexit ran\ntrain.py:4:1: SF101 "), out  # as Python: atexit after the traceback


def _default_signals() -> None:
    """In a child about to exec: the signals a background job or ``nohup`` ignores (SIGINT, SIGQUIT, SIGHUP) back at
    their default, as in a terminal, where the signal tests' programs ignored what they were sent."""
    import signal

    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _started(script: str, *options: str, cwd: Path) -> subprocess.Popen:
    """``syncfree run OPTIONS script`` in the background, once the program printed its first line on stderr."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    process = subprocess.Popen([sys.executable, "-m", "syncfree", "run", *options, script], cwd=cwd, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment,
                               preexec_fn=_default_signals)
    assert process.stderr.readline() == "training\n"
    return process


def _signalled(process: subprocess.Popen, signum: int) -> tuple[str, str]:
    """Send ``signum`` to a `_started` run; its stdout and stderr once it has ended (killed after 120 s)."""
    try:
        process.send_signal(signum)
        return process.communicate(timeout=120)
    finally:
        process.kill()


def test_the_programs_excepthook_shows_its_uncaught_exception(tmp_path):
    # The program's sys.excepthook was never called: syncfree printed the traceback itself.
    write(tmp_path, "train.py", """\
        import sys, torch
        def hook(kind, error, tb):
            print("HOOK", kind.__name__, error, tb.tb_frame.f_code.co_filename == __file__, file=sys.stderr)
        sys.excepthook = hook
        torch.randn(4, device="cuda").sum().item()
        raise ValueError("boom")
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 2 and "HOOK ValueError boom True" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "train.py:5:1: SF101 " in done.stdout, (done.stdout, done.stderr)


def test_sigterm_writes_the_report_then_dies_of_the_signal(tmp_path):
    import signal

    # SIGTERM killed `syncfree run` as it kills python (status 143 from a shell), and the report went with it.
    write(tmp_path, "train.py", """\
        import atexit, sys, torch
        atexit.register(lambda: print("atexit ran", flush=True))
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("training", file=sys.stderr, flush=True)
        while True:
            x.sum()
        """)
    process = _started("train.py", "--format", "json", cwd=tmp_path)
    out, err = _signalled(process, signal.SIGTERM)
    assert process.returncode == -signal.SIGTERM, err
    [row] = json.loads(out)
    assert (row["line"], row["count"]) == (4, 1), row
    assert "was ended by SIGTERM; the syncs until then are reported" in err and "atexit ran" not in out + err, err


def test_sigterm_to_a_program_blocked_in_c_writes_the_report_and_ends_it(tmp_path):
    import signal

    # Python runs a signal's Python handler only when the main thread is back in the interpreter: a program blocked
    # in C (a collective waiting for a peer, a deadlocked mutex) took syncfree run's SIGTERM and lived on, where
    # python dies of it at once; a scheduler's SIGKILL then ended it without a report.
    write(tmp_path, "stuck.py", """\
        import ctypes, sys, torch
        lib = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)
        lib.pthread_mutex_init(mutex, None)
        lib.pthread_mutex_lock(mutex)
        torch.ones(2, device="cuda").sum().item()
        print("training", file=sys.stderr, flush=True)
        lib.pthread_mutex_lock(mutex)  # a deadlock: blocked in C, no signal interrupts it
        """)
    process = _started("stuck.py", "--format", "json", cwd=tmp_path)
    out, err = _signalled(process, signal.SIGTERM)
    assert process.returncode == -signal.SIGTERM, err
    assert [(row["line"], row["count"]) for row in json.loads(out)] == [(6, 1)], out
    assert "was ended by SIGTERM; the syncs until then are reported" in err, err


def test_the_program_sees_the_default_handlers_and_a_handler_that_dies_of_its_signal_keeps_the_report(tmp_path):
    import signal

    # syncfree run's handler of the ending signals showed through signal.getsignal: Lightning installs its SLURM
    # requeue handler for SIGUSR1 only where it finds SIG_DFL (under syncfree the signal killed the job), and chains
    # the SIGTERM handler it finds. A handler that saves, then dies of the signal (SIG_DFL, os.kill) took syncfree's
    # handler out: the process died without the report.
    write(tmp_path, "train.py", """\
        import os, signal, sys, time, torch
        x = torch.randn(4, device="cuda")
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL, signal.getsignal(signal.SIGUSR1)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.getsignal(signal.SIGTERM)

        def save_then_die(signum, frame):
            x.max().item()  # the checkpoint
            assert signal.signal(signum, signal.SIG_DFL) is save_then_die
            assert signal.getsignal(signum) is signal.SIG_DFL
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, save_then_die)
        x.sum().item()
        print("training", file=sys.stderr, flush=True)
        time.sleep(60)
        """)
    process = _started("train.py", "--format", "json", cwd=tmp_path)
    out, err = _signalled(process, signal.SIGTERM)
    assert process.returncode == -signal.SIGTERM, err
    assert sorted((row["line"], row["count"]) for row in json.loads(out)) == [(7, 1), (13, 1)], (out, err)
    assert "was ended by SIGTERM; the syncs until then are reported" in err, err


@pytest.mark.parametrize("signum", ["SIGHUP", "SIGUSR1", "SIGQUIT"])
def test_a_signal_whose_default_ends_the_program_writes_the_report_then_ends_it(tmp_path, signum):
    import signal

    # SIGHUP (the terminal or SSH session closed), SIGUSR1 (Slurm's warning before its time limit), SIGQUIT: Python
    # dies of them at once, and `syncfree run` lost the report with it. The report is written first, then the run
    # dies of the signal as python does.
    signum = getattr(signal, signum)
    write(tmp_path, "train.py", """\
        import sys, time, torch
        x = torch.randn(4, device="cuda")
        x.sum().item()
        print("training", file=sys.stderr, flush=True)
        time.sleep(60)
        """)
    process = _started("train.py", "--format", "json", cwd=tmp_path)
    out, err = _signalled(process, signum)
    assert process.returncode == -signum, err
    assert [(row["line"], row["count"]) for row in json.loads(out)] == [(3, 1)], out
    assert f"was ended by {signal.Signals(signum).name}; the syncs until then are reported" in err, err


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM", pytest.param("SIGHUP", marks=pytest.mark.exhaustive)])
def test_a_signal_to_a_notebook_run_keeps_the_reports_of_the_cells_that_ran(tmp_path, signum):
    import signal

    nbformat = pytest.importorskip("nbformat")
    signum = getattr(signal, signum)
    # SIGINT or SIGTERM after cell 1 ran: cell 1's report was never printed (exit 2, or death by SIGTERM).
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell('import torch\nx = torch.randn(4, device="cuda")\nx.sum().item()'),
                      nbformat.v4.new_code_cell("import time\nwhile True:\n    time.sleep(0.05)")]
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    process = subprocess.Popen([sys.executable, "-m", "syncfree", "run", "nb.ipynb"], cwd=tmp_path, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment,
                               preexec_fn=_default_signals)
    try:
        for line in process.stderr:
            if line.startswith("syncfree: cell 1 done"):
                break
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == -signum, err
    assert "nb.ipynb:cell 1:" in out and "1 sync at 1 site" in out, (out, err)
    assert "the kernel was stopped" in err, err


def test_a_notebook_runs_shell_cells_and_commands_whose_python_programs_count(tmp_path):
    # In a kernel (ipykernel's shell): a %%bash cell running two programs, `!python child.py` (a pty that pexpect
    # forks: it was named as an unwatched os.fork()) and a shell script started with subprocess.
    nbformat = pytest.importorskip("nbformat")
    (tmp_path / "child.py").write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    (tmp_path / "run.sh").write_text(f"{sys.executable} child.py\n")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(f"%%bash\n{sys.executable} child.py && {sys.executable} child.py"),
                      nbformat.v4.new_code_cell(f"!{sys.executable} child.py"),
                      nbformat.v4.new_code_cell("import subprocess\nsubprocess.run(['bash', 'run.sh'], check=True)")]
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    done = syncfree("run", "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    counted = re.findall(r"^nb.ipynb:cell (\d+): .*?: (\d+) syncs? at (\d+) sites?", done.stdout, re.M)
    assert counted == [("1", "2", "1"), ("2", "1", "1"), ("3", "1", "1")], done.stdout
    assert "os.fork" not in done.stdout + done.stderr and "unwatched" not in done.stdout + done.stderr, done.stdout


def test_a_notebook_cannot_take_the_runs_watch_away(tmp_path):
    # The run's watch lived in the kernel's extension, where the notebook's own magics reach it: a --quiet cell or
    # watch published no report, and `%syncfree off`, `%reload_ext` and `%unload_ext syncfree` switched the watch
    # off; each passed the cells after it, and the run said "no cell synchronized" and exited 0.
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in (
        'import torch\nx = torch.randn(4, device="cuda")',
        "%%syncfree --quiet\nx.sum().item()",
        "%syncfree off",
        "x.max().item()",
        "%reload_ext syncfree",
        "x.min().item()",
        "%unload_ext syncfree",
        "x.mean().item()",
        "%load_ext syncfree\n%syncfree on --quiet",
        "x.std().item()",
    )]
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    done = syncfree("run", "--format", "json", "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert sorted((row["cell"], row["count"]) for row in json.loads(done.stdout)) == \
        [(2, 1), (4, 1), (6, 1), (8, 1), (10, 1)], done.stdout


def test_a_notebooks_totals_count_a_sync_once_and_its_formats_say_the_syncs_without_a_line(tmp_path):
    # A %%syncfree run from a watched cell's code (run_cell_magic in a loop) made a report of its own inside the
    # cell's, and the run added both up: 5 syncs counted as 8. JSON and SARIF dropped the syncs no line holds (a
    # thread an earlier cell made): an empty list beside exit 1, the cause said nowhere.
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import threading, torch\nx = torch.randn(4, device='cuda')\n"
                                  "worker = threading.Thread(target=lambda: x.sum().item())"),
        nbformat.v4.new_code_cell("worker.start(); worker.join()"),
        nbformat.v4.new_code_cell("for i in range(3):\n    get_ipython().run_cell_magic('syncfree', '', 'x.max().item()')",
                                  metadata={"syncfree": {"budget": 3}}),
    ]
    nbformat.write(notebook, tmp_path / "nb.ipynb")
    done = syncfree("run", "nb.ipynb", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "nb.ipynb: 4 counted syncs; budgets exceeded." in done.stdout, done.stdout
    assert done.stdout.count("nb.ipynb:cell 3 (a run inside the cell, counted in the cell's report below): ") == 3
    assert "cell 2: 1 (1 without a line)" in done.stderr and "cell's budget" not in done.stderr, done.stderr
    done = syncfree("run", "--format", "json", "nb.ipynb", cwd=tmp_path)  # sarif and github write it the same way
    assert done.returncode == 1, done.stderr
    assert "syncfree: note: nb.ipynb:cell 2: 1 sync not in this output; 1 sync in thread" in done.stderr, done.stderr
    assert [(row["cell"], row["count"]) for row in json.loads(done.stdout)] == [(3, 3)], done.stdout


def test_programs_started_from_threads_pools_and_atexit_are_followed(tmp_path):
    # The program handed subprocess.run / os.system to a thread pool, a thread or atexit itself: the first frame
    # above the call was the pool's, not the program's, and the programs ran unwatched with nothing said (0 syncs,
    # exit 0). Four threads starting their first programs at once each made the follower's folder, and the
    # children told the ones that lost: "ran unwatched".
    write(tmp_path, "child.py", """\
        import torch
        torch.ones(3, device="cuda").sum().item()
        """)
    write(tmp_path, "parent.py", """\
        import atexit, os, subprocess, sys, threading
        from concurrent.futures import ThreadPoolExecutor
        code = "import torch; torch.ones(2, device='cuda').sum().item()"
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(os.system, [f"{sys.executable} child.py"]))
            pool.submit(subprocess.run, [sys.executable, "-c", code]).result()
        worker = threading.Thread(target=subprocess.run, args=([sys.executable, "child.py"],))
        worker.start(); worker.join()
        atexit.register(os.system, f"{sys.executable} child.py")
        """)
    write(tmp_path, "together.py", """\
        import subprocess, sys, threading
        workers = [threading.Thread(target=lambda: subprocess.run([sys.executable, "child.py"])) for _ in range(2)]
        [worker.start() for worker in workers]; [worker.join() for worker in workers]
        """)
    done = syncfree("run", "parent.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "4 syncs at 2 sites (predicted)" in done.stdout and "unwatched" not in done.stdout, done.stdout
    done = syncfree("run", "together.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "2 syncs at 1 site (predicted)" in done.stdout and "unwatched" not in done.stdout, done.stdout


@pytest.mark.parametrize("how", ["subprocess", "fork", "shell", pytest.param("login-shell", marks=pytest.mark.exhaustive)])
def test_a_child_that_replaces_itself_with_a_python_program_is_not_passed(tmp_path, how):
    # A followed child that os.exec*'d a Python program (a launcher re-executing with new settings): the program it
    # became ran without the start-up hook, its sync lost, and the run said "ran without a sync", exit 0.
    write(tmp_path, "child.py", """\
        import torch
        torch.ones(3, device="cuda").sum().item()
        """)
    write(tmp_path, "parent.py", """\
        import os, subprocess, sys
        if sys.argv[1:] == ["mid"]:
            os.execv(sys.executable, [sys.executable, "child.py"])
        elif sys.argv[1:] == ["fork"]:
            pid = os.fork()
            if pid == 0:
                os.execv(sys.executable, [sys.executable, "child.py"])
            os.waitpid(pid, 0)
        elif sys.argv[1:] == ["shell"]:  # through a shell's -c line
            pid = os.fork()
            if pid == 0:
                os.execvp("sh", ["sh", "-c", f"{sys.executable} child.py"])
            os.waitpid(pid, 0)
        elif sys.argv[1:] == ["login-shell"]:  # bash -lc "cd . && exec python child.py"
            pid = os.fork()
            if pid == 0:
                os.execvp("bash", ["bash", "-lc", f"cd . && exec {sys.executable} child.py"])
            os.waitpid(pid, 0)
        elif sys.argv[1:] == ["echo"]:  # a shell that runs no Python: nothing to say
            pid = os.fork()
            if pid == 0:
                os.execvp("sh", ["sh", "-c", "echo hi"])
            os.waitpid(pid, 0)
        else:
            subprocess.run([sys.executable, __file__, "mid"])
        """)
    done = syncfree("run", "parent.py", *([how] if how != "subprocess" else []), cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    label = "bash -c ..." if how == "login-shell" else "child.py"
    assert f"replaced itself with os.exec* ({label}): the program it became ran unwatched" in done.stdout, done.stdout
    assert "ran without a sync until the os.exec* below" in done.stdout, done.stdout
    assert "syncfree: could not judge the run: 0 syncs counted" in done.stderr, done.stderr
    if how == "fork":
        done = syncfree("run", "parent.py", "echo", cwd=tmp_path)
        assert done.returncode == 0 and "replaced itself" not in done.stdout, (done.stdout, done.stderr)


def test_a_block_in_the_program_counts_the_children_it_forks_itself(tmp_path):
    # A sync_free() block in a program under syncfree run: the run's follower took the child os.fork() made, and
    # only the run counted it; the block passed (under python it failed).
    write(tmp_path, "train.py", """\
        import os, torch, syncfree
        try:
            with syncfree.sync_free():
                torch.zeros(1, device="cuda")
                pid = os.fork()
                if pid == 0:
                    torch.ones(2, device="cuda").sum().item()
                    os._exit(0)
                os.waitpid(pid, 0)
            print("block passed")
        except syncfree.SyncError as error:
            print("block failed:", str(error).splitlines()[0])
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert "block failed: would synchronize 1 time, budget 0" in done.stdout, (done.stdout, done.stderr)
    assert "1 sync at 1 site" in done.stdout, done.stdout  # the run counts it once


def test_a_child_forked_with_a_pty_is_followed(tmp_path):
    # os.forkpty (pty.fork, pty.spawn, pexpect) went around the patched os.fork: its child's sync was lost, exit 0.
    write(tmp_path, "train.py", """\
        import os, torch
        x = torch.ones(2, device="cuda")
        pid, fd = os.forkpty()
        if pid == 0:
            x.sum().item()
            os._exit(0)
        os.waitpid(pid, 0)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "train.py:5:5: SF101" in done.stdout and "would sync 1 time" in done.stdout, done.stdout


def test_spawn_children_of_command_code_and_of_a_folder_program_start_as_under_python(tmp_path):
    # `run -c` gave __main__ a __file__ ("<command line>"): a spawned child tried to run that file and failed (exit 1,
    # "ended without a report (killed)"). A folder's __main__ had no __spec__: a spawned child ran its top level again.
    code = textwrap.dedent("""\
        import multiprocessing
        if __name__ == "__main__":
            child = multiprocessing.get_context("spawn").Process(target=print, args=("hi",))
            child.start(); child.join()
            print("exitcode", child.exitcode, "__file__" in globals())
        else:
            print("top level again as", __name__)
        """)
    write(tmp_path, "app/__main__.py", code)
    for argv in (["-c", code], ["app"]):
        python = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        done = syncfree("run", *argv, cwd=tmp_path)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert done.stdout.startswith(python.stdout), (argv, python.stdout, done.stdout)
        assert "top level again" not in done.stdout, done.stdout


def test_python_found_on_the_commands_own_path_is_this_interpreter(tmp_path):
    # subprocess looks `python` up on the PATH of the env= it is given: that PATH led to this interpreter, but the
    # run looked on its own, took it for another Python and named the program unwatched (its syncs lost).
    write(tmp_path, "child.py", """\
        import torch
        torch.ones(3, device="cuda").sum().item()
        """)
    write(tmp_path, "parent.py", """\
        import os, subprocess, sys
        own = os.path.dirname(sys.executable)
        os.environ["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != own)
        subprocess.run(["python", "child.py"], env={**os.environ, "PATH": own}, check=True)
        """)
    done = syncfree("run", "parent.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "1 sync at 1 site" in done.stdout and "unwatched" not in done.stdout, done.stdout


def test_a_followed_programs_sys_path_is_pythons(tmp_path):
    # The start-up hook put syncfree's own folder (site-packages, for an installed syncfree) on PYTHONPATH and left
    # it on sys.path ahead of the program's PYTHONPATH and the standard library: the child could import other code.
    write(tmp_path, "child.py", "import json, sys\nprint(json.dumps(sys.path))\n")
    write(tmp_path, "parent.py", "import subprocess, sys\nsubprocess.run([sys.executable, 'child.py'], check=True)\n")
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    python = subprocess.run([sys.executable, "parent.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            env=environment)
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "parent.py"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env=environment)
    assert python.returncode == 0 and done.returncode == 0, (python.stderr, done.stderr)
    expected, seen = json.loads(python.stdout.splitlines()[0]), json.loads(done.stdout.splitlines()[0])
    assert seen == expected  # syncfree's folder back where site put it (an editable install's .pth: after the rest)


def test_a_run_counts_the_ranks_a_library_starts_by_running_the_program_again(tmp_path):
    # Lightning's DDP launcher starts the program again for each rank past the first (`python -m app.train` where
    # it was run with -m, else the script): its subprocess call is a library's, and those ranks ran unwatched and
    # unnamed. A library's Python program whose main is the program's own code is followed.
    write(tmp_path, "site-packages/launchlib_sf.py", """\
        import subprocess, sys
        def launch(*argv):
            subprocess.run([sys.executable, *argv], check=True)
        """)
    write(tmp_path, "app/__init__.py", "")
    write(tmp_path, "app/train.py", """\
        import os, sys
        sys.path.insert(0, os.path.join(os.getcwd(), "site-packages"))
        import launchlib_sf
        import torch
        torch.ones(2, device="cuda").sum().item()
        if os.environ.get("RANK") != "1":
            os.environ["RANK"] = "1"
            launchlib_sf.launch("-m", sys.modules["__main__"].__spec__.name)
            launchlib_sf.launch(os.path.join("app", "train.py"))
        """)
    done = syncfree("run", "-m", "app.train", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # syncs found
    rows = re.findall(r"^app/train.py:5:1: SF101 .*? ×(\d)(.*)$", done.stdout, re.M)
    assert [count for count, _ in rows] == ["1", "2"], done.stdout
    assert re.search(r"in child processes -m app.train \(pid \d+\), train.py \(pid \d+\)\)$", rows[1][1]), done.stdout
    assert "unwatched" not in done.stdout, done.stdout


def test_a_machine_report_says_on_stderr_which_syncs_it_could_not_count(tmp_path):
    # A worker whose report never came (killed) was named in the text report's notes only: with --format json the
    # run counted 5 syncs of 6 without a word.
    write(tmp_path, "train.py", """\
        import os, signal, torch
        x = torch.randn(4, device="cuda")
        pid = os.fork()
        if pid == 0:
            x.sum().item()
            os.kill(os.getpid(), signal.SIGKILL)
        os.waitpid(pid, 0)
        x.sum().item()
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    [row] = json.loads(done.stdout)
    assert row["line"] == 8, row
    assert re.search(r"syncfree: note: child process pid \d+ ended without a report \(killed\)", done.stderr), \
        done.stderr


def test_a_followed_exec_writes_its_machine_report_to_stdout(tmp_path):
    # The report keeps a descriptor of its own once the program has ended (its daemon threads may print on): a
    # program that re-executes itself is followed with descriptor 1 back on the report's stdout, else the new run's
    # JSON went to stderr.
    write(tmp_path, "train.py", """\
        import os, sys, torch
        torch.randn(4, device="cuda").sum().item()
        if len(sys.argv) == 1:
            os.execv(sys.executable, [sys.executable, sys.argv[0], "again"])
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    [row] = json.loads(done.stdout)
    assert (row["line"], row["count"]) == (2, 2), row


def test_a_daemon_thread_printing_at_the_end_stays_out_of_the_machine_report(tmp_path):
    # The program's stdout was given back to the report while its daemon threads still ran: their lines landed in
    # the JSON (5 of 5 runs in the issue).
    write(tmp_path, "train.py", """\
        import sys, threading, time, torch

        def chatter():
            while sys.stdout is sys.stderr:  # the program runs: its stdout is on stderr
                time.sleep(0.001)
            while True:
                print("chatter from a daemon thread")

        threading.Thread(target=chatter, daemon=True).start()
        torch.randn(4, device="cuda").sum().item()
        """)
    for _ in range(2):
        done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
        assert "chatter" not in done.stdout, done.stdout[-500:]
        [row] = json.loads(done.stdout)
        assert row["line"] == 10, row


def test_a_forked_child_keeps_its_status_and_its_syncs_are_rows_of_the_one_report(tmp_path):
    write(tmp_path, "train.py", """\
        import os, sys, torch
        x = torch.randn(4, device="cuda")
        pid = os.fork()
        if pid == 0:
            for _ in range(2):
                x.sum().item()
            sys.exit(5)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        x.max().item()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # the parent's syncs; the child's status stays its own
    assert "child exit 5" in done.stdout
    assert done.stdout.count("syncs at") == 1  # one report
    assert "train.py:10:1: SF101 " in done.stdout
    child = [line for line in done.stdout.splitlines() if line.startswith("train.py:6:")]
    assert len(child) == 1 and "×2" in child[0] and "in child process pid " in child[0]
    assert "3 syncs at 2 sites" in done.stdout
    [_, row] = json.loads(syncfree("run", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert row["line"] == 6 and row["count"] == 2 and row["processes"][0].startswith("pid ")


def test_a_run_killed_before_its_report_leaves_no_earlier_report_in_its_output_file(tmp_path):
    # --output-file is written whole at the end: a run killed before it (SIGKILL, a crash) left an earlier run's
    # report in place, and a CI step that uploads it read a clean report of another run.
    write(tmp_path, "killed.py", """\
        import os, signal, torch
        torch.ones(2, device="cuda").sum().item()
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    (tmp_path / "out.json").write_text("[]\n")  # an earlier, clean run's
    done = syncfree("run", "--format", "json", "-o", "out.json", "killed.py", cwd=tmp_path)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("end, capture", [
    ("os._exit(0)", "-s"), ("os.execv('/bin/true', ['true'])", "--capture=fd"),
    pytest.param("os._exit(0)", "--capture=fd", marks=pytest.mark.exhaustive),
    pytest.param("os.execv('/bin/true', ['true'])", "-s", marks=pytest.mark.exhaustive)])
def test_a_watched_test_that_ends_the_process_under_run_m_pytest_keeps_the_runs_report(tmp_path, end, capture):
    # The test's follower stands in front of the run's while a marked test runs; the test's os._exit or os.exec*
    # went past the run's: exit 0 and no report, where the same test unmarked gave the report and exit 1. Without
    # -s, pytest had file descriptors 1 and 2 in its capture files, which it never puts back then: the report went
    # there, and was lost with them.
    write(tmp_path, "test_ends.py", f"""\
        import os, pytest, torch

        @pytest.mark.sync_free
        def test_ends():
            torch.randn(4, device="cuda").sum().item()
            {end}
        """)
    done = syncfree("run", "-m", "pytest", "-q", capture, "-p", "no:cacheprovider", "test_ends.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "test_ends.py:5:5: SF101 `.item()` waits for the GPU (predicted) ×1\n" in done.stdout, done.stdout
    assert "1 sync at 1 site (predicted)" in done.stdout, done.stdout


@pytest.mark.parametrize("pool, count", [
    ("concurrent.futures.ThreadPoolExecutor(2)", 4),
    ("concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context('fork'))", 4),
    ("multiprocessing.get_context('fork').Pool(2)", 4),
    ("multiprocessing.get_context('spawn').Pool(2)", 4),
])
def test_a_program_that_leaves_its_pool_running_ends_as_under_python(tmp_path, pool, count):
    # A pool or executor the program never shut down ends with the program under Python (concurrent.futures' exit
    # call in threading's shutdown, multiprocessing's finalizers at exit). `syncfree run` joined the executor's
    # threads without telling them, and ended a Pool's workers holding its queue lock: it waited forever.
    write(tmp_path, "left.py", f"""\
        import concurrent.futures, multiprocessing, torch

        def work(i):
            return torch.randn(3, device="cuda").sum().item()

        if __name__ == "__main__":
            pool = {pool}
            print(len(list(pool.map(work, range({count})))))
        """)
    done = syncfree("run", "--format", "json", "left.py", cwd=tmp_path)  # the helper's timeout: 180 s
    assert done.returncode == 1, done.stderr
    [row] = json.loads(done.stdout)
    # A Pool's end terminates its workers: one that cannot run its handler within the grace (busy in C code, seen
    # once in a clean-clone run on a loaded 2-core machine) is killed, and the run says so: never fewer in silence.
    assert row["line"] == 4 and (row["count"] == count or (
        row["count"] < count and "killed with SIGKILL, so its syncs are not counted" in done.stderr)), \
        (row, done.stderr)
    assert "Exception" not in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("method, worker", [("fork", "ForkPoolWorker-"), ("spawn", "SpawnPoolWorker-"),
                                            pytest.param("forkserver", "ForkServerPoolWorker-",
                                                         marks=pytest.mark.exhaustive)])
def test_pool_workers_syncs_are_collected(tmp_path, method, worker):
    # A forked worker inherits the watch. A new interpreter (spawn, forkserver) inherits none: its syncs were left
    # out (a note named it); its target now runs under a watch of its own.
    # A pool closed and joined: every worker ends its loop and writes its report, so every sync is counted.
    write(tmp_path, "joined.py", f"""\
        import multiprocessing, torch

        def work(i):
            return torch.randn(3, device="cuda").sum().item()

        if __name__ == "__main__":
            pool = multiprocessing.get_context("{method}").Pool(2)
            print(len(pool.map(work, range(6))))
            pool.close()
            pool.join()
        """)
    done = syncfree("run", "--format", "json", "joined.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["line"], row["count"]) == (4, 6), (row, done.stderr)
    assert all(name.startswith(worker) for name in row["processes"]), row
    # `with Pool(...)` ends with terminate(): each worker writes its report from its SIGTERM handler. A worker that
    # cannot run the handler within the grace (busy in C code, seen once in about 300 runs on a loaded 2-core
    # machine) is killed, and the report says so: all 6 syncs, or fewer and the lost worker named, never fewer in
    # silence (the JSON run says it on stderr).
    write(tmp_path, "train.py", f"""\
        import multiprocessing, torch

        def work(i):
            return torch.randn(3, device="cuda").sum().item()

        if __name__ == "__main__":
            with multiprocessing.get_context("{method}").Pool(2) as pool:
                print(len(pool.map(work, range(6))))
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    text = done.stdout
    assert "unwatched" not in text, (text, done.stderr)
    assert "6 syncs at 1 site" in text or "its syncs are not counted" in text, (text, done.stderr)
    assert "6 syncs at 1 site" not in text or "without a report" not in text, (text, done.stderr)


def test_a_daemon_thread_of_the_program_is_predicted(tmp_path):
    # A daemon thread reading the program's CUDA tensors (a logger, a prefetcher) ran without the stand-ins: its
    # reads were plain CPU reads, and the run reported 0 syncs and passed where a GPU syncs 3 times.
    write(tmp_path, "train.py", """\
        import queue, threading, torch

        results, x = queue.Queue(), torch.randn(4, device="cuda")

        def log():
            for _ in range(3):
                results.put(x.sum().item())

        threading.Thread(target=log, daemon=True).start()
        print(len([results.get() for _ in range(3)]))
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert (row["line"], row["count"]) == (7, 3), row


def test_a_pool_made_before_torch_is_imported_leaves_the_threads_watched(tmp_path):
    # The pool's worker starts before the run's recorder (at the import of torch): the pools' patch that its start
    # puts in must not stand for the others, or the recorder's threads patch stays out and a thread's sync is lost.
    write(tmp_path, "train.py", """\
        import multiprocessing as mp
        pool = mp.get_context("fork").Pool(1)
        import threading
        import torch

        def work():
            torch.ones(2, device="cuda").sum().item()

        t = threading.Thread(target=work)
        t.start()
        t.join()
        pool.close()
        pool.join()
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, (done.stdout, done.stderr)
    assert [(row["line"], row["count"]) for row in json.loads(done.stdout)] == [(7, 1)], done.stdout


def test_a_test_suite_run_under_syncfree_run_keeps_the_children_of_its_watched_tests(tmp_path):
    # `syncfree run -m pytest`: a marked test's follower stood in front of the run's while the test ran, and its stop
    # put the real os.fork back: every child forked after it went unfollowed, and the run's report lost its syncs
    # with nothing said. The children the test's follower took were the test's alone, not the run's either.
    write(tmp_path, "test_suite.py", """\
        import multiprocessing, pytest, torch

        def work():
            torch.ones(2, device="cuda").sum().item()

        def child():
            process = multiprocessing.get_context("fork").Process(target=work)
            process.start()
            process.join()

        @pytest.mark.sync_free
        def test_marked_child():
            child()

        def test_later_child():
            child()
        """)
    # -W error for the plugin's package, imported before pytest marks it for assert rewriting: the warning stopped
    # a suite whose warnings are errors at start-up (PYTEST_DONT_REWRITE in syncfree's docstring)
    done = syncfree("run", "--format", "json", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "-W", "error::pytest.PytestAssertRewriteWarning", "test_suite.py", cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)  # pytest failed: the marked test synced
    rows = json.loads(done.stdout)
    assert sum(row["count"] for row in rows if row["line"] == 4) == 2, rows


def test_a_test_suite_run_with_xdist_under_syncfree_run_is_not_passed(tmp_path):
    # `syncfree run -m pytest -n 2`: execnet starts the workers (python -c, a library's), which ran the tests
    # unwatched: the run said "0 syncs" and passed. They are named, and the run is not judged.
    write(tmp_path, "test_suite.py", """\
        import torch

        def test_syncs():  # on a GPU it syncs; unwatched here it runs on the CPU
            device = "cuda" if torch.cuda.is_available() else "cpu"
            assert torch.ones(2, device=device).sum().item() == 2
        """)
    done = syncfree("run", "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "test_suite.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "note: 2 pytest-xdist worker processes (-n) ran the tests unwatched" in done.stdout, done.stdout
    assert "could not judge the run" in done.stderr, done.stderr


def test_a_pool_started_from_a_thread_keeps_its_workers_syncs(tmp_path):
    # A child forked from any thread but the main one read no recorder for its report: the run said "2 child
    # processes ran without a sync", 0 syncs, and passed.
    write(tmp_path, "train.py", """\
        import multiprocessing, threading, torch

        def work(i):
            return torch.randn(3, device="cuda").sum().item()

        def launch():
            with multiprocessing.get_context("fork").Pool(2) as pool:
                print(len(pool.map(work, range(4))))

        thread = threading.Thread(target=launch)
        thread.start()
        thread.join()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "4 syncs at 1 site" in done.stdout, (done.stdout, done.stderr)
    assert "without a sync" not in done.stdout, done.stdout


def test_pool_workers_that_replace_themselves_keep_their_syncs(tmp_path):
    # With maxtasksperchild the pool's worker handler, a daemon thread, forks the new workers: their one thread is
    # one that no recorder records by name. Their reports read no recorder (on a GPU their syncs were lost from the
    # report in silence), and in predict mode they ran without the stand-ins ("Torch not compiled with CUDA").
    write(tmp_path, "train.py", """\
        import multiprocessing, torch

        def work(i):
            return torch.randn(3, device="cuda").sum().item()

        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
                print(len(pool.map(work, range(6), chunksize=1)))
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and "Torch not compiled" not in done.stderr, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert (row["line"], row["count"]) == (4, 6), row
    assert len(row["processes"]) == 6, row  # every worker, each one task


def test_a_terminated_child_stuck_in_c_is_killed_instead_of_hanging_the_program(tmp_path):
    # A Python SIGTERM handler (the one that writes a child's report) runs only when the main thread is back in the
    # interpreter: a child stuck in C lived on, and terminate() then join() waited for it forever, where Python
    # alone kills it. Seen as a `with Pool()` block that never ended.
    write(tmp_path, "stuck.py", """\
        import ctypes, multiprocessing, time

        def stuck():
            mutex = ctypes.create_string_buffer(64)  # PTHREAD_MUTEX_INITIALIZER is all zeros
            libc = ctypes.CDLL(None)
            libc.pthread_mutex_lock(mutex)
            libc.pthread_mutex_lock(mutex)  # never returns, and no signal interrupts it

        if __name__ == "__main__":
            process = multiprocessing.get_context("fork").Process(target=stuck, name="Stuck")
            process.start()
            time.sleep(1)
            process.terminate()
            process.join()
            print("ended", process.exitcode)
        """)
    done = syncfree("run", "stuck.py", cwd=tmp_path)
    # 1: its syncs are not known, so the run's count of 0 is not a pass (could not judge the run)
    assert done.returncode == 1 and "ended -9" in done.stderr + done.stdout, done
    assert "syncfree: could not judge the run: 0 syncs counted, but 1 child process, Stuck (pid" in done.stderr, done
    # where it waited, where Linux says (a mutex: a futex), to tell a lock from work in C
    assert re.search(r"1 child process, Stuck \(pid \d+\)( \(waiting in \w*futex\w*\))?, still ran 10 s after "
                     r"multiprocessing's terminate\(\)", done.stdout), done.stdout
    assert "without a report" not in done.stdout, done.stdout


def test_objects_of_the_scripts_classes_cross_spawned_processes(tmp_path):
    # sys.modules["__mp_main__"] named syncfree's launcher: a spawn Pool's result thread died with AttributeError
    # unpickling a worker's Result (p.map hung for ever), and a spawn Queue's get raised it in the program.
    write(tmp_path, "train.py", """\
        import multiprocessing, torch

        class Result:
            def __init__(self, value):
                self.value = value

        def work(i):
            return Result(torch.randn(3, device="cuda").sum().item())

        def put(queue):
            queue.put(Result(1.0))

        if __name__ == "__main__":
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                print("pool", type(pool.apply_async(work, (0,)).get(timeout=90)).__name__)
            queue = context.Queue()
            process = context.Process(target=put, args=(queue,))
            process.start()
            print("queue", type(queue.get(timeout=90)).__name__)
            process.join()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert "pool Result" in done.stdout and "queue Result" in done.stdout, (done.stdout, done.stderr)
    assert done.returncode == 1 and "train.py:8:19: SF101 " in done.stdout, (done.stdout, done.stderr)


def test_a_spawned_childs_main_module_is_imported_under_its_watch(tmp_path):
    # A new interpreter imports the program's main module before it unpickles its target, where its watch started:
    # `dev` was "cpu" there, the run said 0 syncs and exited 0 where a GPU makes 4.
    write(tmp_path, "train.py", """\
        import multiprocessing, torch

        dev = "cuda" if torch.cuda.is_available() else "cpu"

        def work(i):
            return torch.randn(3, device=dev).sum().item()

        if __name__ == "__main__":
            pool = multiprocessing.get_context("spawn").Pool(2)
            print(len(pool.map(work, range(4))))
            pool.close()  # the workers end on their own (terminate's SIGTERM is another test's)
            pool.join()
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    [row] = json.loads(done.stdout)
    assert (row["line"], row["count"]) == (6, 4), (row, done.stderr)  # stderr: the notes on children


def test_torch_multiprocessing_spawn_children_are_watched(tmp_path):
    # How DDP scripts start their ranks without torchrun.
    write(tmp_path, "train.py", """\
        import torch
        import torch.multiprocessing as mp

        def main(rank):
            x = torch.randn(4, device="cuda")
            for _ in range(rank + 1):
                x.sum().item()

        if __name__ == "__main__":
            mp.spawn(main, nprocs=2)
            print("spawned")
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "spawned" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("train.py:7:")]
    assert len(rows) == 1 and "×3" in rows[0] and "in child processes SpawnProcess-1, SpawnProcess-2" in rows[0], \
        done.stdout
    assert "note: 2 child processes (SpawnProcess-1, SpawnProcess-2) would sync 3 times" in done.stdout


def test_a_process_without_a_target_started_as_a_new_interpreter_is_named(tmp_path):
    write(tmp_path, "train.py", """\
        import multiprocessing

        class Worker(multiprocessing.get_context("spawn").Process):
            def run(self):
                pass

        if __name__ == "__main__":
            worker = Worker()
            worker.start()
            worker.join()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # its syncs are not known: the run is not judged a pass
    assert ("note: 1 child process started as a new interpreter (Worker-1 (spawn)) without a target (a Process "
            "subclass's own run()) ran unwatched: its syncs") in done.stdout
    assert "syncfree: could not judge the run: 0 syncs counted, but 1 child process started" in done.stderr


# make test: fork (spawn's children, a new interpreter each, are the pool tests' [spawn]; make test-all runs both)
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.exhaustive)])
def test_a_sync_free_block_of_the_program_counts_its_children_as_under_python(tmp_path, method):
    # Under syncfree run the run's follower takes the children: the program's own sync_free block around its ranks
    # passed, where plain python raised. The block now reads its children's reports too; the run counts them once.
    write(tmp_path, "ranks.py", f"""\
        import multiprocessing, syncfree, torch

        def rank(i):
            torch.ones(2, device="cuda").sum().item()

        if __name__ == "__main__":
            try:
                with syncfree.sync_free():
                    ranks = [multiprocessing.get_context("{method}").Process(target=rank, args=(i,)) for i in range(2)]
                    [r.start() for r in ranks]
                    [r.join() for r in ranks]
                print("passed")
            except syncfree.SyncError as error:
                print(str(error).splitlines()[0])
        """)
    plain = subprocess.run([sys.executable, "ranks.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "python_helper")})
    done = syncfree("run", "--format", "json", "ranks.py", cwd=tmp_path)
    # --format json: the program's own output goes to stderr, the report to stdout
    assert plain.stdout == done.stderr == "would synchronize 2 times, budget 0\n", (plain, done)
    [row] = json.loads(done.stdout)
    assert (row["line"], row["count"]) == (4, 2), row


def test_the_grandchildren_of_a_sync_free_block_count_for_it_under_the_run(tmp_path):
    # A rank's own children (its DataLoader workers) are the block's too: 2 ranks and 2 grandchildren, one sync each.
    write(tmp_path, "tree.py", """\
        import multiprocessing, syncfree, torch

        def leaf():
            torch.ones(2, device="cuda").sum().item()

        def rank():
            child = multiprocessing.get_context("fork").Process(target=leaf)
            child.start(); child.join()
            torch.ones(2, device="cuda").sum().item()

        if __name__ == "__main__":
            try:
                with syncfree.sync_free():
                    ranks = [multiprocessing.get_context("fork").Process(target=rank) for _ in range(2)]
                    [r.start() for r in ranks]
                    [r.join() for r in ranks]
            except syncfree.SyncError as error:
                print(str(error).splitlines()[0])
        """)
    done = syncfree("run", "--format", "json", "tree.py", cwd=tmp_path)
    assert done.stderr == "would synchronize 4 times, budget 0\n", done.stderr
    assert sorted((row["line"], row["count"]) for row in json.loads(done.stdout)) == [(4, 2), (9, 2)]


def test_a_python_program_the_run_starts_with_subprocess_is_watched_and_reported(tmp_path):
    # Its syncs were its own program's, only named in a note: a program of this interpreter now watches itself and
    # its sites are the run's, marked with its name; one that cannot (-I ignores PYTHONPATH) is named.
    write(tmp_path, "child.py", "import torch\nprint('child', torch.ones(2, device='cuda').sum().item())\n")
    write(tmp_path, "launch.py", """\
        import os, subprocess, sys
        subprocess.run([sys.executable, "child.py"], check=True)
        assert os.system(sys.executable + " child.py") == 0
        subprocess.run([sys.executable, "-I", "-m", "json.tool", "--help"], capture_output=True)
        subprocess.run(["echo", "not python"], check=True)
        """)
    done = syncfree("run", "--mode", "predict", "launch.py", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # the child's sync is over the budget of 0
    assert done.stdout.count("child 2.0") == 2, done.stdout  # os.system's too (the shell's fork and exec)
    assert "child.py:2:" in done.stdout and "×2" in done.stdout and "(in child processes child.py (pid" in \
        done.stdout, done.stdout
    assert ("note: 1 Python program started with subprocess (-m json.tool) ran unwatched: its syncs "
            "are not in this report") in done.stdout, done.stdout


def test_dataloader_workers_syncs_are_collected(tmp_path):
    write(tmp_path, "train.py", """\
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Scaled(Dataset):
            def __init__(self):
                self.scale = torch.ones(1, device="cuda")
            def __len__(self):
                return 8
            def __getitem__(self, i):
                return torch.full((2,), float(i)) * self.scale.item()

        for batch in DataLoader(Scaled(), batch_size=2, num_workers=2, multiprocessing_context="fork"):
            batch.sum().item()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    workers = [line for line in done.stdout.splitlines() if line.startswith("train.py:10:")]
    assert len(workers) == 1 and "×8" in workers[0] and "in child processes" in workers[0], done.stdout
    assert "ended without a report" not in done.stdout


def test_persistent_dataloader_workers_ended_at_exit_keep_their_syncs(tmp_path):
    """Persistent workers are ended at the program's exit by multiprocessing's SIGTERM, which torch's own handler
    answers with _exit(0): each was called "ended without a report (killed)" and its syncs were lost."""
    write(tmp_path, "train.py", """\
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Scaled(Dataset):
            def __init__(self):
                self.scale = torch.ones(1, device="cuda")
            def __len__(self):
                return 8
            def __getitem__(self, i):
                return torch.full((2,), float(i)) * self.scale.item()

        loader = DataLoader(Scaled(), batch_size=2, num_workers=2, persistent_workers=True,
                            multiprocessing_context="fork")
        for batch in loader:
            pass
        print("epoch done")
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ended without a report" not in done.stdout and "DataLoader worker" not in done.stderr, done.stdout
    workers = [line for line in done.stdout.splitlines() if line.startswith("train.py:10:")]
    assert len(workers) == 1 and "×8" in workers[0] and "in child processes" in workers[0], done.stdout


def test_the_programs_threads_are_watched_and_joined_before_the_report(tmp_path):
    write(tmp_path, "train.py", """\
        import threading, time, torch
        x = torch.randn(4, device="cuda")

        def log():
            time.sleep(1)
            for _ in range(3):
                x.sum().item()
            print("thread done", flush=True)

        threading.Thread(target=log).start()
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout.startswith("thread done\ntrain.py:7:9: SF101 "), done.stdout
    assert "×3" in done.stdout and "3 syncs at 1 site" in done.stdout


# ------------------------------------------------------------------------------ torch imported when the program does
NO_TORCH = """\
    import atexit, sys
    atexit.register(lambda: print("torch at exit:", "torch" in sys.modules))
    print("sum", sum(range(10)))
    """


@pytest.mark.parametrize("how", ["script", "module", "stdin"])
def test_a_program_that_never_imports_torch_runs_without_it(tmp_path, how):
    # torch was imported for it (3-4.6 s and 235 MB where python takes 0.05 s and 9 MB), and the report carried the
    # torch-version note and "predicted on CPU stand-ins" although no torch code ran.
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/plain.py", NO_TORCH)
    write(tmp_path, "plain.py", NO_TORCH)
    argv = {"script": ["plain.py"], "module": ["-m", "pkg.plain"], "stdin": ["-"]}[how]
    done = syncfree("run", *argv, cwd=tmp_path, stdin=textwrap.dedent(NO_TORCH) if how == "stdin" else None)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "sum 45\ntorch at exit: False\n" in done.stdout, done.stdout
    assert "note: no torch code ran: the program never imported torch" in done.stdout, done.stdout
    assert "torch 2." not in done.stdout and "predicted" not in done.stdout and "stand-ins" not in done.stdout
    assert done.stderr == ""


def test_a_spawned_child_that_never_imports_torch_runs_without_it(tmp_path):
    # Its watch started before its main module's import, and imported torch for it (seconds per worker).
    write(tmp_path, "plain.py", """\
        import multiprocessing, sys

        def work(i):
            return "torch" in sys.modules

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                print("torch in the workers:", pool.map(work, range(2)))
        """)
    done = syncfree("run", "plain.py", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "torch in the workers: [False, False]" in done.stdout, done.stdout
    assert "ran without a sync" in done.stdout and "unwatched" not in done.stdout, done.stdout


def test_a_program_without_torch_that_may_use_the_cupti_engine_is_watched_from_its_start(tmp_path):
    # The CUPTI engine sees CUDA calls no torch import comes before (cupy's): asked for, or chosen by "auto" for a
    # program that imports such a library, it starts with the program as before. A library imported in a way the
    # program's text does not show is named in the report, not passed over with "no sync".
    write(tmp_path, "cupy.py", "")  # a stand-in for the library, importable here
    write(tmp_path, "plain.py", NO_TORCH)
    done = syncfree("run", "--engine", "cupti", "plain.py", cwd=tmp_path)
    assert "torch at exit: True" in done.stdout and "--engine cupti needs a CUDA device" in done.stdout, done.stdout
    write(tmp_path, "uses_cupy.py", textwrap.dedent(NO_TORCH) + "import cupy\n")
    done = syncfree("run", "uses_cupy.py", cwd=tmp_path)
    assert "torch at exit: True" in done.stdout and "no torch code ran" not in done.stdout, done.stdout
    write(tmp_path, "hidden.py", textwrap.dedent(NO_TORCH) + "import importlib\nimportlib.import_module('cu' + 'py')\n")
    done = syncfree("run", "hidden.py", cwd=tmp_path)
    assert "torch at exit: False" in done.stdout, done.stdout
    assert ("note: no torch code ran: the program never imported torch; cupy, imported during the run, calls CUDA "
            "without torch, and no engine watched its syncs (--engine cupti does)") in done.stdout, done.stdout


def test_a_program_that_imports_torch_in_a_function_is_watched_from_that_import(tmp_path):
    write(tmp_path, "train.py", """\
        import sys
        total = sum(range(1000))

        def train():
            import torch
            dev = "cuda" if torch.cuda.is_available() else "cpu"  # asked under the watch: True on the stand-ins
            x = torch.randn(4, device=dev)
            for _ in range(3):
                x.sum().item()
            return torch.nonzero(x > 0)

        print("torch before:", "torch" in sys.modules)
        train()
        """)
    done = syncfree("run", "--format", "json", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "torch before: False" in done.stderr
    rows = sorted((row["line"], row["count"]) for row in json.loads(done.stdout))
    assert rows == [(9, 3), (10, 1)], rows
    text = syncfree("run", "train.py", cwd=tmp_path)
    assert "4 syncs at 2 sites (predicted)" in text.stdout and "no torch code ran" not in text.stdout, text.stdout
    assert "never ended" not in text.stderr, text.stderr


def test_a_thread_that_imports_torch_is_watched(tmp_path):
    write(tmp_path, "train.py", """\
        import threading

        def work():
            import torch
            x = torch.randn(4, device="cuda")
            for _ in range(2):
                x.sum().item()

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        print("done")
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.startswith("done\ntrain.py:7:9: SF101 ") and "×2" in done.stdout, done.stdout
    assert "2 syncs at 1 site (predicted)" in done.stdout
    # The main thread was running when torch came: it has no stand-ins of its own, and the report says so.
    assert "torch was first imported in thread 'Thread-1 (work)' while thread 'MainThread' ran" in done.stdout


def test_a_thread_whose_mode_outlives_its_watch_leaves_nothing_on_its_stack_at_its_end(tmp_path):
    # The thread that imports torch gets predict mode; the watch ends from the main thread, which cannot take a
    # mode off another thread's stack. What was left there was freed by torch's C++ thread-local destructor after
    # the thread's Python state was gone, racing the interpreter's exit: a clean-clone make test saw the program
    # die of "terminate called without an active exception" (SIGABRT). The thread's stack is emptied at its end
    # while its Python state lives, before join() returns: a mode it left there (here a library's) is freed by
    # then. (The main thread keeps the GIL after join(): a destructor after the thread's state could not run.)
    write(tmp_path, "train.py", """\
        import sys, threading

        freed = []

        def work():
            import torch
            from torch.overrides import TorchFunctionMode

            class Library(TorchFunctionMode):
                def __torch_function__(self, func, types, args=(), kwargs=None):
                    return func(*args, **(kwargs or {}))

                def __del__(self):
                    freed.append(True)

            def push():  # (the mode in no frame's locals)
                Library().__enter__()  # never left

            push()
            torch.randn(4, device="cuda").sum().item()

        thread = threading.Thread(target=work)
        sys.setswitchinterval(1000)
        thread.start()
        thread.join()
        gone = bool(freed)
        sys.setswitchinterval(0.005)
        print("freed when join() returned:", gone)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.startswith("freed when join() returned: True\n"), done.stdout


def test_children_that_import_torch_when_the_parent_never_does_are_watched(tmp_path):
    write(tmp_path, "train.py", """\
        import multiprocessing, os, sys

        def work(i):
            import torch
            return torch.randn(3, device="cuda").sum().item()

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(2) as pool:
                print(len(pool.map(work, range(4))))
            pid = os.fork()
            if pid == 0:
                work(0)
                sys.exit(0)
            os.waitpid(pid, 0)
            print("torch in the parent:", "torch" in sys.modules)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    assert "torch in the parent: False" in done.stdout, (done.stdout, done.stderr)
    assert "never ended" not in done.stderr, done.stderr
    text = done.stdout
    assert "unwatched" not in text, text
    if "its syncs are not counted" in text:  # a pool worker busy in C at terminate() is killed, and named (above)
        return
    rows = [line for line in text.splitlines() if line.startswith("train.py:5:")]
    assert len(rows) == 1 and "×5 " in rows[0] and "SpawnPoolWorker-" in rows[0] and ", pid " in rows[0], text
    assert "5 syncs at 1 site (predicted)" in text and "note: no torch code ran" in text, text
    assert done.returncode == 1


def test_run_a_module_with_its_arguments(tmp_path):
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/train.py", PRINTING)
    done = syncfree("run", "-m", "pkg.train", "--lr", "3", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"argv ['{tmp_path / 'pkg' / 'train.py'}', '--lr', '3']" in done.stdout
    assert "pkg/train.py:4:29: SF101 " in done.stdout  # the call that synced: `x.sum().item()`
    missing = syncfree("run", "-m", "pkg.nothing", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("syncfree: error: no module named 'pkg.nothing'")
    assert missing.stderr.count("\n") == 1


def test_run_reads_the_program_from_stdin(tmp_path):
    done = syncfree("run", "-", "a", cwd=tmp_path, stdin=textwrap.dedent(PRINTING))
    assert done.returncode == 1, done.stderr
    assert "argv ['-', 'a']" in done.stdout
    assert "-:4:29: SF101 " in done.stdout and "×3" in done.stdout


def test_run_runs_code_given_with_c_as_python_does(tmp_path):
    # python -c CODE ARGS: argv ['-c', ARGS...], the working directory first on sys.path, the code's lines its own
    code = ("import sys, torch\nprint('argv', sys.argv, repr(sys.path[0]))\nx = torch.ones(3, device='cuda')\n"
            "for _ in range(2):\n    x.sum().item()\nsys.exit(int(sys.argv[2]))\n")
    done = syncfree("run", "--format", "json", "-c", code, "-x", "0", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "argv ['-c', '-x', '0'] ''" in done.stderr  # a machine format: the program's stdout goes to stderr
    rows = json.loads(done.stdout)
    assert [(r["path"], r["line"], r["count"]) for r in rows] == [("-c", 5, 2)], rows
    # its status, -cCODE in one word, after a --, and a dataclass's exec'd methods (Python's "<string>") not taken
    # for the command's lines
    done = syncfree("run", "-cimport sys; sys.exit(3)", cwd=tmp_path)
    assert done.returncode == 2 and "-c exited with status 3" in done.stderr, done.stderr
    code = ("import dataclasses, torch\n@dataclasses.dataclass\nclass P:\n    t: object\n"
            "a, b = P(torch.ones(1, device='cuda')), P(torch.ones(1, device='cuda'))\nprint(a == b)\n")
    done = syncfree("run", "--format", "json", "--", "-c" + code, cwd=tmp_path)
    rows = json.loads(done.stdout)
    assert all(r["path"] != "-c" or r["line"] == 6 for r in rows) and any(r["line"] == 6 for r in rows), rows
    missing = syncfree("run", "-c", cwd=tmp_path)
    assert missing.returncode == 2 and "-c takes the program's code" in missing.stderr


def test_run_script_restores_the_working_directory_and_sets_argv0_as_given(tmp_path, monkeypatch, capsys):
    import syncfree

    write(tmp_path, "sub/train.py", """\
        import os, sys
        os.chdir("/")
        print(sys.argv[0], __file__)
        """)
    monkeypatch.chdir(tmp_path)
    import atexit
    import threading
    from multiprocessing import process

    hooks = lambda: (os.fork, os._exit, atexit.register, atexit.unregister, threading.Thread.start,  # noqa: E731
                     process.BaseProcess.start, sys.argv, list(sys.path), sys.modules["__main__"])
    before = hooks()
    run = syncfree.run_script("sub/train.py", [])
    assert run.exit_code == 0 and os.getcwd() == str(tmp_path)
    assert hooks() == before  # what the run put in place to follow the program is gone
    assert capsys.readouterr().out == f"sub/train.py {tmp_path / 'sub' / 'train.py'}\n"


# --------------------------------------------------------------------------------------------- rule selection
SETUP = """\
    import torch
    model = torch.nn.Linear(4, 4).to("cuda")
    x = torch.randn(2, 4, device="cuda")
    print(model(x).sum().item())
    """


def test_select_and_ignore_apply_to_run_as_to_check(tmp_path):
    write(tmp_path, "train.py", SETUP)
    done = syncfree("run", "--format", "json", "--ignore", "SF101,SF303", "train.py", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout
    done = syncfree("run", "--select", "SF3", "train.py", cwd=tmp_path)
    assert "\ntrain.py:2:9: SF303 " in done.stdout and " SF101 " not in done.stdout, done.stdout
    assert "2 syncs at 1 site" in done.stdout and "1 left out by --select/--ignore" in done.stdout
    # --mode error goes past the syncs of the rules left out (a one-off model.to(device)), stops at the others.
    done = syncfree("run", "--mode", "error", "--ignore", "SF303", "train.py", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout.startswith("train.py:4:7: SF101 ") and " SF303 " not in done.stdout
    assert "stopped at its first sync (--mode error)" in done.stderr and "line 4, in <module>" in done.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.syncfree]\nignore = ["SF101", "SF303"]\n')
    assert syncfree("run", "train.py", cwd=tmp_path).returncode == 0


# --------------------------------------------------------------------------------------------- one row per site
def test_one_row_per_site_with_its_call_chains(tmp_path):
    write(tmp_path, "model.py", """\
        def read(t):
            return t.sum().item()
        """)
    write(tmp_path, "train.py", """\
        import torch
        from model import read
        x = torch.randn(4, device="cuda")
        for _ in range(3):
            read(x)
        read(x)
        """)
    done = syncfree("run", "train.py", cwd=tmp_path)
    rows = [line for line in done.stdout.splitlines() if line.startswith("model.py")]
    assert len(rows) == 1, done.stdout
    assert "×4" in rows[0] and "called from train.py:5; train.py:6" in rows[0]
    [row] = json.loads(syncfree("run", "--format", "json", "train.py", cwd=tmp_path).stdout)
    assert (row["path"], row["line"], row["count"]) == ("model.py", 2, 4)
    assert row["chains"] == [["train.py:5", "model.py:2"], ["train.py:6", "model.py:2"]]


@pytest.mark.parametrize("engine", ["debug", "cupti"])
def test_syncfree_run_initializes_no_cuda_before_the_program_does(tmp_path, monkeypatch, engine):
    """A parent that has initialized CUDA (or asked torch's runtime how many devices there are) cannot give CUDA to
    its fork children ("Cannot re-initialize CUDA in forked subprocess"): fork Pool workers that use CUDA failed
    under syncfree run on an H200, with both engines, where python ran them. Here every torch call that initializes
    CUDA is a trap, on a CUDA device the program never touches, and the whole run (engine choice, recorder, debug
    mode or CUPTI, stall clock, report) must call none of them. GPU twin: tests/gpu/test_run_gpu.py::
    test_fork_pool_workers_use_cuda_as_under_python_and_replaced_ones_keep_their_syncs."""
    import torch

    sys.path.insert(0, str(ROOT / "python_helper"))
    from syncfree.capture import engines
    from syncfree.capture.cupti import engine as cupti_engine
    from syncfree.script_run import run_script

    calls: list[str] = []

    def trap(name):
        def initializes(*args, **kwargs):
            calls.append(name)
            raise RuntimeError(f"{name} initializes CUDA")
        return initializes

    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 1)  # a device, as NVML counts it
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    queued: list = []
    monkeypatch.setattr(torch.cuda, "_lazy_call", lambda call, **kwargs: queued.append(call))
    for name in ("_lazy_init", "init", "current_device", "current_stream", "default_stream", "synchronize",
                 "get_device_name", "get_device_properties", "get_device_capability", "set_sync_debug_mode",
                 "get_sync_debug_mode", "memory_allocated", "max_memory_allocated", "mem_get_info", "set_device",
                 "device_count"):
        monkeypatch.setattr(torch.cuda, name, trap(name))
    monkeypatch.setattr(torch.cuda.Event, "__init__", trap("Event()"))
    for name in ("_cuda_getDeviceCount", "_cuda_init", "_cuda_setDevice", "_cuda_getDevice",
                 "_cuda_set_sync_debug_mode", "_cuda_get_sync_debug_mode", "_cuda_synchronize"):
        if hasattr(torch._C, name):
            monkeypatch.setattr(torch._C, name, trap(f"torch._C.{name}"))
    if engine == "cupti":
        sys.path.insert(0, str(ROOT / "tests"))
        from test_cupti import FakeCupti

        monkeypatch.setattr(cupti_engine, "load_cupti", FakeCupti)
        monkeypatch.setattr(engines, "_version_mismatch", lambda: None)
    script = write(tmp_path, "train.py", "import os\nprint('no CUDA here')\n")
    monkeypatch.chdir(tmp_path)
    run = run_script(str(script), mode="warn", engine=engine)
    assert run.exit_code == 0 and run.report.mode == "warn", run
    assert calls == [], calls
    assert run.report.device["kind"] == "cuda"
    if engine == "debug":
        assert queued, "debug mode waits for the program's CUDA initialization"


def test_a_run_whose_child_left_no_report_is_not_a_pass_within_its_budget(tmp_path):
    # A child killed before it wrote its report took its syncs with it: `--budget 2` passed on the count that was
    # left (the note naming the child was the only word). Now the run exits 1 and says why; a run whose children all
    # reported keeps its status.
    write(tmp_path, "train.py", """\
        import multiprocessing, os, signal, sys, torch

        def syncs_then_dies():
            torch.ones(2, device="cuda").sum().item()
            os.kill(os.getpid(), signal.SIGKILL)

        if __name__ == "__main__":
            target = syncs_then_dies if sys.argv[1:] == ["kill"] else os.getpid
            child = multiprocessing.get_context("fork").Process(target=target, name="Doomed")
            child.start()
            child.join()
        """)
    done = syncfree("run", "--mode", "predict", "--budget", "2", "train.py", "kill", cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert ("syncfree: could not judge the run: 0 syncs counted, but child process Doomed (pid "
            in done.stderr and "ended without a report (killed)" in done.stderr), done.stderr
    done = syncfree("run", "--mode", "predict", "--budget", "2", "train.py", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)


def test_syncs_the_program_makes_as_python_ends_it_are_counted(tmp_path):
    # At its exit Python finalizes the main module's objects: a __del__ that reads a tensor, a suspended generator's
    # finally. They ran after syncfree run's report (their syncs lost, 0 syncs and exit 0), and in predict mode failed
    # with "Torch not compiled with CUDA enabled" once the stand-ins were gone. They run inside the watch now, with
    # the program's names still there (a collection first, as Python does), after an uncaught exception too.
    write(tmp_path, "ends.py", """\
        import torch

        class Logger:
            def __init__(self):
                self.total = torch.ones(2, device="cuda")
            def __del__(self):
                print("final", self.total.sum().item())

        def steps():
            try:
                yield 1
            finally:
                print("cleanup", torch.zeros(1, device="cuda").item())

        log = Logger()
        g = steps()
        next(g)
        print("main end")
        """)
    logger = """\
        import threading, time, torch

        class Logger:
            def __init__(self):
                self.total = torch.ones(2, device="cuda")
            def __del__(self):
                print("final", self.total.sum().item())

        log = Logger()
        """.rstrip(" ")
    write(tmp_path, "fails.py", logger + '        raise ValueError("boom")\n')
    # a daemon thread still running at the end
    write(tmp_path, "daemon.py", logger + "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    for args, status in ((("ends.py",), 1), (("-m", "ends"), 1), (("fails.py",), 2), (("daemon.py",), 1)):
        done = syncfree("run", "--format", "json", *args, cwd=tmp_path)
        assert done.returncode == status, (args, done.stdout, done.stderr)
        assert "Torch not compiled" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
        rows = json.loads(done.stdout)
        expected = [(7, 1), (13, 1)] if args[0] in ("ends.py", "-m") else [(7, 1)]
        assert sorted((row["line"], row["count"]) for row in rows) == expected, (args, rows)
        assert "final 2.0" in done.stderr or "final 2.0" in done.stdout, done.stderr


@pytest.mark.parametrize("ending, status", [("sys.exit(256)", 0), ("sys.exit(2**40)", 0), ("os._exit(256)", 0),
                                            ("sys.exit(-1)", 255), ("sys.exit(2**70)", 255), ("sys.exit(True)", 1)])
def test_the_programs_exit_status_is_the_one_the_os_sees(tmp_path, ending, status):
    # sys.exit(256) ends a Python process with status 0 (the OS keeps the low 8 bits): syncfree run called it a failure
    # ("exited with status 256", exit 2); sys.exit(-1) is 255, not -1.
    write(tmp_path, "ends.py", f"import os, sys\n{ending}\n")
    python = subprocess.run([sys.executable, "ends.py"], cwd=tmp_path, capture_output=True, timeout=60)
    assert python.returncode == status
    done = syncfree("run", "ends.py", cwd=tmp_path)
    if status == 0:
        assert done.returncode == 0 and "exited with status" not in done.stderr, done.stderr
    else:
        assert done.returncode == 2 and f"ends.py exited with status {status}\n" in done.stderr, done.stderr


def test_a_program_that_closes_stderr_ends_as_under_python(tmp_path):
    # The program closed sys.stderr (the process's own): the run's last messages raised, the interpreter's last-resort
    # dump ("lost sys.stderr") followed, and the run ended with status 1, its verdict not given.
    write(tmp_path, "quiet.py", "import sys, torch\ntorch.ones(2, device='cuda').sum().item()\nsys.stderr.close()\n")
    done = syncfree("run", "--budget", "1", "quiet.py", cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "lost sys.stderr" not in done.stderr and "ValueError" not in done.stderr, done.stderr
    done = syncfree("run", "quiet.py", cwd=tmp_path)
    assert done.returncode == 1 and "quiet.py:2:1" in done.stdout, (done.stdout, done.stderr)


def test_a_linked_script_imports_beside_its_real_file_and_a_folder_or_zipapp_runs_its_main(tmp_path):
    # Python puts the folder of the script's real file first on sys.path (a script linked into ~/bin); syncfree run
    # put the link's. A folder or a zip file with a __main__.py runs it, as `python app` does: syncfree run refused
    # the folder and read the zip as source ("source code string cannot contain null bytes").
    import zipfile

    write(tmp_path, "real/tool.py", "import helper\nprint('helper from', helper.where)\n")
    write(tmp_path, "real/helper.py", "where = 'real'\n")
    write(tmp_path, "bin/helper.py", "where = 'bin'\n")
    (tmp_path / "bin" / "tool.py").symlink_to(tmp_path / "real" / "tool.py")
    done = syncfree("run", "bin/tool.py", cwd=tmp_path)
    assert "helper from real" in done.stdout, (done.stdout, done.stderr)
    main = "import sys, torch\nprint('main', sys.argv)\ntorch.ones(2, device='cuda').sum().item()\n"
    write(tmp_path, "app/__main__.py", main)
    with zipfile.ZipFile(tmp_path / "app.pyz", "w") as archive:
        archive.writestr("__main__.py", main)
    for target in ("app", "app.pyz"):
        done = syncfree("run", "--format", "json", target, "x", cwd=tmp_path)
        assert done.returncode == 1 and f"main ['{target}', 'x']" in done.stderr, (done.stdout, done.stderr)
        assert [(row["line"], row["count"]) for row in json.loads(done.stdout)] == [(3, 1)], done.stdout
    (tmp_path / "empty").mkdir()
    done = syncfree("run", "empty", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == "syncfree: error: cannot run empty: it is a folder without " \
        "a __main__.py", done.stderr


def test_an_atexit_handler_that_raises_is_printed_as_python_prints_it(tmp_path):
    # "Exception ignored in atexit callback", then the traceback from the handler on: syncfree run's own frame came
    # first in it.
    write(tmp_path, "ax.py", "import atexit\ndef bad():\n    raise ValueError('x')\natexit.register(bad)\n")
    python = subprocess.run([sys.executable, "ax.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    done = syncfree("run", "ax.py", cwd=tmp_path)
    assert done.returncode == python.returncode == 0
    shown = done.stderr[done.stderr.index("Exception ignored"):].splitlines()[1:5]
    assert shown == python.stderr.splitlines()[1:5], (done.stderr, python.stderr)


def test_os_exit_in_an_atexit_handler_is_said_as_it_happened(tmp_path):
    # The note said "no atexit handler ran" where the one that called os._exit, and those before it, had.
    write(tmp_path, "ox.py", "import atexit, os\natexit.register(os._exit, 0)\natexit.register(print, 'first')\n")
    done = syncfree("run", "ox.py", cwd=tmp_path)
    assert done.returncode == 0 and "first" in done.stdout, (done.stdout, done.stderr)
    assert "os._exit(0) in an atexit handler: the handlers after it did not run" in done.stdout + done.stderr
    assert "no atexit handler ran" not in done.stdout + done.stderr
