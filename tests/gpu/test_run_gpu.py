"""``syncfree run`` on CUDA in warn and error mode: the report's own stream, os._exit, forked children, and
--mode error going past the rules left out (``make test-gpu``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT / "python_helper"), *filter(None, [os.environ.get("PYTHONPATH")])])}


def syncfree(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "syncfree", "run", *argv], capture_output=True, text=True,
                          env=ENV, cwd=tmp_path, timeout=300)


def write(tmp_path: Path, source: str) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(source))


def test_mode_error_goes_past_an_ignored_rule_and_stops_at_the_next_sync(tmp_path):
    write(tmp_path, """\
        import torch
        model = torch.nn.Linear(64, 64).to("cuda")
        x = torch.randn(8, 64, device="cuda")
        print("after setup", flush=True)
        print(model(x).sum().item())
        print("never")
        """)
    done = syncfree(tmp_path, "--mode", "error", "--ignore", "SF303", "train.py")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "after setup" in done.stdout and "never" not in done.stdout, out
    assert "train.py:5:7: SF101 " in done.stdout and "(predicted)" not in done.stdout, out
    assert "line 5, in <module>" in done.stderr, out
    print("\nsyncfree-gpu: run --mode error --ignore SF303:\n" + out)


def test_sarif_stays_valid_while_the_program_prints_and_os_exit_keeps_its_report(tmp_path):
    write(tmp_path, """\
        import os, torch
        x = torch.randn(1024, 1024, device="cuda")
        for step in range(5):
            print("loss", (x @ x).sum().item(), flush=True)
        os._exit(3)
        """)
    done = syncfree(tmp_path, "--format", "sarif", "train.py")
    assert done.returncode == 3, done.stderr
    results = json.loads(done.stdout)["runs"][0]["results"]
    assert [(r["properties"]["count"], r["properties"]["certainty"]) for r in results] == [(5, "measured")]
    assert results[0]["properties"]["blockedMs"] > 0
    assert done.stderr.count("loss") == 5


def test_a_forked_child_is_reported_apart_with_its_status(tmp_path):
    write(tmp_path, """\
        import os, sys, torch
        x = torch.randn(4, device="cuda")
        x.sum().item()
        pid = os.fork()
        if pid == 0:
            print("child", torch.randn(3).sum().item() is not None)  # CPU work only: CUDA cannot follow a fork
            sys.exit(7)
        print("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        """)
    done = syncfree(tmp_path, "train.py")
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "child exit 7" in done.stdout, out
    assert done.stdout.count("syncs at") + done.stdout.count("sync at") == 1, out
    assert "train.py:3:1: SF101 " in done.stdout and "ran without a sync" in done.stdout, out


@pytest.mark.parametrize("engine", ["debug", "cupti"])
def test_a_sync_free_block_of_the_program_counts_its_cuda_ranks_as_under_python(tmp_path, engine):
    """Under syncfree run the run's follower takes the ranks a program starts; the program's own sync_free block
    around them passed where plain python raised. Both raise now, and the run counts the ranks' syncs once."""
    if engine == "cupti":
        from syncfree.capture.engines import cupti_problem

        if cupti_problem() is not None:
            pytest.skip(f"CUPTI engine unavailable: {cupti_problem()}")
    write(tmp_path, f"""\
        import multiprocessing, syncfree, torch

        def rank(i):
            torch.ones(8, device="cuda").sum().item()

        if __name__ == "__main__":
            try:
                with syncfree.sync_free(engine="{engine}"):
                    ranks = [multiprocessing.get_context("spawn").Process(target=rank, args=(i,)) for i in range(2)]
                    [r.start() for r in ranks]
                    [r.join() for r in ranks]
                print("passed")
            except syncfree.SyncError as error:
                print(str(error).splitlines()[0])
        """)
    plain = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                           timeout=300)
    done = syncfree(tmp_path, "--engine", engine, "--format", "json", "train.py")
    print(f"\nsyncfree-gpu: sync_free around spawned CUDA ranks under syncfree run --engine {engine}: python "
          f"{plain.stdout.strip()!r}, syncfree run {done.stderr.strip()!r}")
    assert plain.stdout.startswith("synchronized 2 times"), plain.stdout + plain.stderr
    assert done.stderr.startswith("synchronized 2 times"), done.stderr
    rows = [row for row in json.loads(done.stdout) if row["line"] == 4]
    assert [row["count"] for row in rows] == [2], done.stdout


@pytest.mark.parametrize("engine", ["debug", "cupti"])
def test_fork_pool_workers_use_cuda_as_under_python_and_replaced_ones_keep_their_syncs(tmp_path, engine):
    """A parent that never touches CUDA may fork workers that do. torch.cuda.set_sync_debug_mode initialized CUDA in
    the parent, and the workers failed under syncfree run ("Cannot re-initialize CUDA in forked subprocess", H200,
    2026-11-28) where python ran the script; debug mode is now set when the program initializes CUDA. With
    maxtasksperchild the pool's own thread forks the new workers: their reports read no recorder, and their syncs
    left the report in silence."""
    if engine == "cupti":
        from syncfree.capture.engines import cupti_problem

        if cupti_problem() is not None:
            pytest.skip(f"CUPTI engine unavailable: {cupti_problem()}")
    write(tmp_path, """\
        import multiprocessing, torch

        def work(i):
            return torch.randn(256, device="cuda").sum().item()

        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
                print("results", len(pool.map(work, range(6), chunksize=1)))
        """)
    plain = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                           timeout=300)
    assert plain.returncode == 0 and "results 6" in plain.stdout, plain.stdout + plain.stderr
    done = syncfree(tmp_path, "--engine", engine, "--format", "json", "train.py")
    print(f"\nsyncfree-gpu: fork Pool(maxtasksperchild=1) of CUDA workers, --engine {engine}: status "
          f"{done.returncode}, {done.stdout.strip()[:300]!r}")
    assert done.returncode == 1 and "results 6" in done.stderr, done.stderr
    [row] = [row for row in json.loads(done.stdout) if row["line"] == 4]
    assert row["count"] == 6 and len(row["processes"]) == 6, row
