"""The public API, the pytest plugin and ``syncfree run script.py`` on CUDA in warn mode:
real syncs, measured blocked time, attribution to user files (``make test-gpu``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from plugin_args import plugin_args

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT / "python_helper"), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_watch_warn_mode_attributes_real_syncs_to_user_files(userlib):
    import torch

    import syncfree

    x = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    with syncfree.watch() as w:
        for _ in range(5):
            userlib.read(x @ x)  # a matmul in flight: .item() waits for it
        userlib.positives(x)
    report = w.report
    assert report.mode == "warn" and not report.predicted
    assert [(s.kind, s.count, s.rule, s.line) for s in report.sites] == [("item", 5, "SF101", 5)]
    [site] = report.sites
    assert site.file == userlib.__file__ and site.files[0] == __file__
    assert site.blocked_ms is not None and site.blocked_ms > 0
    [allowed] = report.allowed
    assert (allowed.kind, allowed.line, allowed.file) == ("mask_index", 9, userlib.__file__)
    assert report.syncs == 6 and report.counted == 5
    print(f"\nsyncfree-gpu: watch warn mode: {report.text()}")


def test_sync_free_on_cuda_lists_every_site_with_blocked_time(userlib):
    import torch

    import syncfree

    x = torch.randn(512, 512, device="cuda")
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            userlib.read(x @ x)
            if (x > 0).any():
                pass
            torch.cuda.synchronize()
    message = str(raised.value)
    assert message.startswith("synchronized 3 times, budget 0"), message
    lines = message.splitlines()[1:]
    assert len(lines) == 3, message
    assert any("userlib.py:5:12: SF101 `.item()` waits for the GPU ×1, blocked" in line
               for line in lines), message
    assert sum(line.lstrip().startswith("tests/gpu/test_api_gpu.py:") for line in lines) == 2, message
    print(f"\nsyncfree-gpu: SyncError message:\n{message}")


def test_sync_free_budget_and_a_sync_free_rewrite_on_cuda():
    import torch

    import syncfree

    x = torch.randn(256, device="cuda")
    with syncfree.sync_free(budget=1) as w:
        x.sum().item()
    assert w.report.counted == 1
    with syncfree.sync_free():  # the rewrite: keep the sum on the device
        total = torch.zeros((), device="cuda")
        for _ in range(10):
            total += x.sum()
    assert total.device.type == "cuda"


def test_pytest_plugin_on_cuda(tmp_path):
    (tmp_path / "test_cuda_suite.py").write_text(textwrap.dedent("""\
        import pytest
        import torch


        @pytest.fixture
        def batch():
            return torch.randn(64, 64, device="cuda")


        @pytest.mark.sync_free
        def test_clean(batch):
            y = (batch @ batch).relu()
            assert y.is_cuda


        @pytest.mark.sync_free
        def test_reads(batch):
            for _ in range(3):
                batch.sum().item()


        @pytest.mark.sync_free(budget=3)
        def test_within_budget(batch):
            for _ in range(3):
                batch.sum().item()


        def test_fixture(syncfree, batch):
            with syncfree.watch() as w:
                batch.max().item()
            assert w.report.syncs == 1 and w.report.mode == "warn"
    """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider",
         "-q", "--syncfree", str(tmp_path / "test_cuda_suite.py")],
        capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "1 failed, 3 passed" in out, out
    assert "synchronized 3 times, budget 0" in out, out
    assert "test_cuda_suite.py:19:9: SF101 `.item()` waits for the GPU ×3, blocked" in out, out
    assert "syncs seen in" in out and "CPU stand-ins" not in out, out
    print("\nsyncfree-gpu: pytest plugin on CUDA:\n" + "\n".join(  # indented: not the log's FAILED
        "    " + line for line in out.splitlines() if "syncfree" in line or "test_cuda_suite" in line
        or "passed" in line))


def test_syncfree_run_script_on_cuda_with_argv():
    result = subprocess.run(
        [sys.executable, "-m", "syncfree", "run", "examples/train.py", "--steps", "7",
         "--log-every", "2"],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out  # syncs found
    assert "4 logged losses" in out, out  # argv reached the script: steps 7, every 2
    assert "examples/train.py:38:" in out and "×7" in out, out   # torch.isnan(loss) truth value
    assert "examples/train.py:41:" in out and "×4" in out, out   # loss.item() every 2nd step
    assert "predict" not in out.lower().split("examples/train.py")[0], out
    print("\nsyncfree-gpu: syncfree run examples/train.py --steps 7 --log-every 2:\n" + out)


def test_syncfree_run_mode_error_on_cuda_stops_at_the_users_line(tmp_path):
    script = tmp_path / "step.py"
    script.write_text("import torch\n\n\ndef step(x):\n    return x.sum().item()\n\n\n"
                      "x = torch.ones(4, device='cuda')\nstep(x)\nprint('never')\n")
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--mode", "error", str(script)],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "never" not in done.stdout.splitlines() and "step.py:5:12: SF101" in done.stdout
    frames = [line for line in done.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert frames[-1].strip().startswith(f'File "{script}", line 5'), done.stderr
    assert "called a synchronizing CUDA operation" in done.stderr
    print("\nsyncfree-gpu: syncfree run --mode error step.py:\n" + done.stdout + done.stderr)


def test_watch_owns_the_syncs_of_its_backward_pass_on_autograds_thread():
    """autograd runs a CUDA graph's hooks and a custom Function's backward on its device
    thread: the watch whose block called backward() owns their syncs (a sync_free test
    whose gradient hook synced passed when they went unowned)."""
    import threading

    import torch

    import syncfree

    threads = []

    class Checked(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            threads.append(threading.current_thread().name)
            if g.sum() > 0:  # one sync
                pass
            return g * 2

    x = torch.ones(64, device="cuda", requires_grad=True)
    net = torch.nn.Linear(64, 64).cuda()
    net.register_full_backward_hook(lambda m, gi, go: go[0].norm().item() and None)  # one
    x.register_hook(lambda g: g.sum().item() and None)  # one
    torch.cuda.synchronize()
    with syncfree.watch() as w:
        net(Checked.apply(x)).sum().backward()
    assert threads and threads[0] != threading.current_thread().name, threads
    assert w.report.syncs == 3, (w.report.text(), w.report.notes)
    with pytest.raises(syncfree.SyncError, match="synchronized 3 times"):
        with syncfree.sync_free():
            net(Checked.apply(x)).sum().backward()
    print(f"\nsyncfree-gpu: backward on {threads[0]!r}: {w.report.text()}")


def _read_in_thread(x):
    return x.sum().item()  # the thread's sync


def test_a_thread_and_a_pool_task_of_a_watched_block_count_for_it():
    """A thread the block starts and joins, and a ThreadPoolExecutor task it submits, run
    routed to the block's watch (capture/threads.py): their syncs count for it, not as
    unowned notes (a sync_free test whose worker thread synced passed)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch

    import syncfree

    x = torch.ones(64, device="cuda")
    torch.cuda.synchronize()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(int).result()  # the worker started before the watch
        with syncfree.watch() as w:
            t = threading.Thread(target=_read_in_thread, args=(x,), name="reader")
            t.start()
            t.join()
        assert w.report.syncs == 1, (w.report.text(), w.report.notes)
        assert not any("no syncfree watch owned" in n for n in w.report.notes), w.report.notes
        [site] = w.report.sites
        assert (site.kind, site.thread, site.file) == ("item", "reader", __file__)
        with pytest.raises(syncfree.SyncError, match="synchronized 2 times"):
            with syncfree.sync_free():
                t = threading.Thread(target=_read_in_thread, args=(x,))
                t.start()
                t.join()
                pool.submit(_read_in_thread, x).result()
    print(f"\nsyncfree-gpu: a watch's thread: {w.report.text()}")


def _rank_reads(index):  # a spawned child's target (module level: the child imports it)
    import torch

    x = torch.ones(8, device="cuda")
    for _ in range(index + 1):
        x.sum().item()  # the ranks' syncs: 1 + 2


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("engine", ["debug", "cupti"])
def test_the_cuda_ranks_a_watched_block_starts_count_for_it(engine, method):
    """A block's child processes run their targets under a watch with the block's mode and
    engine (processes.ForkedChildren.for_watch): the ranks' real CUDA syncs are the block's,
    and a sync_free block whose ranks synced raises (it passed, with nothing said, before)."""
    import multiprocessing

    import syncfree

    if engine == "cupti":
        from syncfree.capture.engines import cupti_problem

        problem = cupti_problem()
        if problem is not None:
            pytest.skip(f"CUPTI engine unavailable: {problem}")
    context = multiprocessing.get_context(method)

    def ranks():
        started = [context.Process(target=_rank_reads, args=(i,), name=f"Rank-{i}") for i in range(2)]
        for rank in started:
            rank.start()
        for rank in started:
            rank.join()
        assert [rank.exitcode for rank in started] == [0, 0]

    with syncfree.watch(engine=engine) as w:
        ranks()
    report = w.report
    assert not any("CUPTI engine unavailable" in note for note in report.notes), report.notes
    items = [s for s in report.sites if s.kind == "item"]
    assert [(s.file, s.count, s.process) for s in items] == [(__file__, 3, "Rank-0, Rank-1")], report.text()
    assert all(s.blocked_ms is not None and s.blocked_ms > 0 for s in items), report.text()
    if engine == "debug":
        assert report.syncs == 3, report.text()
    with pytest.raises(syncfree.SyncError, match="in child processes Rank-0, Rank-1"):
        with syncfree.sync_free(engine=engine):
            ranks()
    print(f"\nsyncfree-gpu: {method} ranks under {engine}: {report.text()}")


@pytest.mark.parametrize("engine", ["debug", "cupti"])
def test_a_python_program_a_block_starts_with_subprocess_counts_its_real_syncs(tmp_path, engine):
    """A Python program of this interpreter started with subprocess watches itself with the block's engine
    (syncfree/programs.py): its measured CUDA syncs are the block's, and a sync_free block whose worker program
    synced raises (it passed before, the program only named in a note)."""
    import syncfree

    if engine == "cupti":
        from syncfree.capture.engines import cupti_problem

        problem = cupti_problem()
        if problem is not None:
            pytest.skip(f"CUPTI engine unavailable: {problem}")
    worker = tmp_path / "worker.py"
    worker.write_text("import torch\nx = torch.randn(512, 512, device='cuda')\n"
                      "for _ in range(3):\n    v = (x @ x).sum().item()\nprint('worker done')\n")
    with syncfree.watch(engine=engine) as w:
        done = subprocess.run([sys.executable, str(worker)], check=True, capture_output=True, text=True)
    assert "worker done" in done.stdout
    report = w.report
    items = [s for s in report.sites if s.kind == "item"]
    assert [(s.file, s.line, s.count) for s in items] == [(str(worker), 4, 3)], report.text()
    assert items[0].process.startswith("worker.py (pid "), report.text()
    assert all(s.blocked_ms is not None and s.blocked_ms > 0 for s in items), report.text()
    with pytest.raises(syncfree.SyncError, match=r"in child process worker.py \(pid"):
        with syncfree.sync_free(engine=engine):
            subprocess.run([sys.executable, str(worker)], check=True, capture_output=True)
    # os.system (the shell's own fork and exec) too: the program watches itself through the environment.
    with syncfree.watch(engine=engine) as shelled:
        assert os.system(f"cd {tmp_path} && {sys.executable} worker.py > /dev/null") == 0
    assert [(s.line, s.count) for s in shelled.report.sites if s.kind == "item"] == [(4, 3)], shelled.report.text()
    print(f"\nsyncfree-gpu: a subprocess worker under {engine}: {report.text()}\nos.system: {shelled.report.text()}")


def test_a_multiprocessing_thread_pools_tasks_count_for_the_block_on_cuda():
    """multiprocessing.pool.ThreadPool's tasks (multiprocessing.dummy.Pool, joblib's threading backend) are routed to
    the block that hands them, as a ThreadPoolExecutor's are: on CUDA their real syncs are the block's, and a
    sync_free block whose ThreadPool task synced raises (they were no watch's, and the block passed)."""
    from multiprocessing.pool import ThreadPool

    import torch

    import syncfree

    x = torch.ones(64, device="cuda")
    torch.cuda.synchronize()
    with ThreadPool(2) as early:
        early.map(abs, [1, 2])  # its threads start before the block
        with syncfree.watch() as w:
            assert early.map(_read_in_thread, [x, x]) == [64.0, 64.0]
            with ThreadPool(1) as inside:
                assert inside.apply(_read_in_thread, (x,)) == 64.0
        with pytest.raises(syncfree.SyncError, match="synchronized 2 times"):
            with syncfree.sync_free():
                early.apply(_read_in_thread, (x,))
                early.apply_async(_read_in_thread, (x,)).get(30)
    report = w.report
    assert report.syncs == 3, (report.text(), report.notes)
    # a site per worker thread (as for any thread), each the task's .item()
    line = _read_in_thread.__code__.co_firstlineno + 1
    assert {(s.kind, s.file, s.line) for s in report.sites} == {("item", __file__, line)}, report.text()
    assert sum(s.count for s in report.sites) == 3 and all(s.thread for s in report.sites), report.text()
    assert not any("no syncfree watch owned" in n for n in report.notes), report.notes
    print(f"\nsyncfree-gpu: ThreadPool tasks: {report.text()}")


def test_a_spawn_pool_handed_cuda_work_and_left_running_is_not_judged():
    """A spawn Pool made in a block, handed a task that syncs on CUDA and left running at its end: its worker had not
    written the tasks' syncs when the block ended. The block is not judged (NotJudged, the worker named); it passed
    before with a note."""
    import multiprocessing

    import syncfree

    pool = None
    try:
        with pytest.raises(syncfree.NotJudged) as raised:
            with syncfree.sync_free():
                pool = multiprocessing.get_context("spawn").Pool(1)
                pool.apply(_rank_reads, (0,))
        assert "was still running when the block ended: the syncs of the tasks it ran are not counted" in \
            str(raised.value), raised.value
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    with pytest.raises(syncfree.SyncError, match="in child process"):
        with syncfree.sync_free():
            with multiprocessing.get_context("spawn").Pool(1) as closed:
                closed.apply(_rank_reads, (1,))
                closed.close()
                closed.join()
    print(f"\nsyncfree-gpu: a spawn Pool left running: {str(raised.value).splitlines()[0]}")


def test_syncfree_run_c_counts_the_command_lines_real_syncs():
    """``syncfree run -c CODE`` runs as ``python -c``: its rows are ``-c:LINE`` and its CUDA syncs are counted."""
    code = "import torch\nx = torch.randn(256, 256, device='cuda')\nfor _ in range(3):\n    (x @ x).sum().item()\n"
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--format", "json", "-c", code],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 1, done.stderr  # syncs found
    rows = json.loads(done.stdout)
    assert [(r["path"], r["line"], r["count"]) for r in rows] == [("-c", 4, 3)], rows
    assert all(r["blocked_ms"] > 0 for r in rows), rows
    print(f"\nsyncfree-gpu: syncfree run -c: {rows}")
