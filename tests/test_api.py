"""The public API (syncfree.watch, syncfree.sync_free, SyncError, run_script) in predict
mode: attribution to user files through functions in other files, budgets, allow comments."""

import multiprocessing
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import syncfree  # noqa: E402
from syncfree.allow import allowed_by_comment  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="predict-mode tests (no CUDA)")


def test_watch_attributes_to_the_user_file_with_its_chain(userlib):
    with syncfree.watch() as w:
        x = torch.ones(8, device="cuda")
        for _ in range(3):
            userlib.read(x)
    report = w.report
    assert report.mode == "predict" and report.syncs == 3
    [site] = report.sites
    assert (site.kind, site.count, site.rule, site.line) == ("item", 3, "SF101", 5)
    assert site.file == userlib.__file__
    assert site.files[0] == __file__ and site.files[-1] == userlib.__file__
    text = report.text()
    assert "userlib.py:5:12: SF101 `.item()` waits for the GPU (predicted) ×3 (called from " in text
    assert f"test_api.py:{site.chain[0]}" in text  # the calling line of this file
    as_dict = report.to_dict()
    assert as_dict["sites"][0]["file"] == userlib.__file__
    assert as_dict["totals"]["syncs"] == 3


def test_a_user_files_positions_stay_cached_after_the_watch(userlib):
    # A notebook cell's code goes with its cell, so the recorder drops its positions; a
    # user file's functions run again in the next watch or test, so theirs stay.
    from syncfree.capture import sites

    with syncfree.watch():
        userlib.read(torch.ones(8, device="cuda"))
    assert any(code is userlib.read.__code__ for code, _ in sites._positions_cache.values())


def test_sync_free_lists_every_site_not_only_the_first(userlib):
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            x = torch.arange(4.0, device="cuda")
            userlib.read(x)
            if x.sum() > 0:
                pass
            print(x, file=open(os.devnull, "w"))
    message = str(raised.value)
    assert message.startswith("would synchronize 3 times, budget 0")
    lines = message.splitlines()[1:]
    assert len(lines) == 3
    assert any("userlib.py:5:12: SF101 `.item()` waits for the GPU (predicted) ×1" in line for line in lines)
    assert any(": SF103 A Python condition on a CUDA tensor waits for the GPU (predicted) ×1" in line for line in lines)
    assert any(": SF201 Printing a CUDA tensor waits for the GPU (predicted) ×1" in line for line in lines)
    assert raised.value.report.counted == 3


def test_budget_allows_up_to_n_syncs(userlib):
    with syncfree.sync_free(budget=2) as w:
        x = torch.ones(2, device="cuda")
        userlib.read(x)
        userlib.read(x)
    assert w.report.syncs == 2
    with pytest.raises(syncfree.SyncError, match="budget 1"):
        with syncfree.sync_free(budget=1):
            x = torch.ones(2, device="cuda")
            userlib.read(x)
            userlib.read(x)


def test_allow_comment_keeps_the_site_out_of_the_budget(userlib):
    with syncfree.sync_free() as w:
        userlib.positives(torch.ones(4, device="cuda"))
    assert w.report.syncs == 1 and w.report.counted == 0
    assert [s.kind for s in w.report.allowed] == ["mask_index"]
    assert ", allowed by a comment" in w.report.text()


def test_allow_comment_forms():
    assert allowed_by_comment("x.item()  # syncfree: allow", "item", "SF101")
    assert allowed_by_comment("x.item()  # syncfree: allow[item]", "item", "SF101")
    assert allowed_by_comment("x.item()  # syncfree: allow[SF101, SF601]", "item", "SF101")
    assert not allowed_by_comment("x.item()  # syncfree: allow[mask_index]", "item", "SF101")
    assert not allowed_by_comment("x.item()  # allow", "item", "SF101")
    # The same reading as `syncfree check`'s (syncfree/allow.py): code prefixes as noqa takes
    # them, empty brackets allow every sync, a longer word is no allow comment.
    assert allowed_by_comment("x.item()  # syncfree: allow[SF1]", "item", "SF101")
    assert not allowed_by_comment("x.item()  # syncfree: allow[SF6]", "item", "SF101")
    assert allowed_by_comment("x.item()  # syncfree: allow[]", "item", "SF101")
    assert not allowed_by_comment("x.item()  # syncfree: allowance for later", "item", "SF101")


def test_a_block_that_raises_is_still_judged_as_pytest_warns_checks_through_an_exception(userlib):
    # `with pytest.raises(ValueError): with sync_free(): ...` passed a block that synced before it raised (the block's
    # exception won over the budget), and so did `with sync_free(): sys.exit(main())`. The verdict is given through an
    # Exception and a successful exit, its context the block's exception; not through an interrupt, a failing exit or
    # a count it could not judge, which would replace the program's own exception.
    with pytest.raises(syncfree.SyncError, match="1 time, budget 0") as raised:
        with syncfree.sync_free():
            userlib.read(torch.ones(2, device="cuda"))
            1 / 0
    assert isinstance(raised.value.__context__, ZeroDivisionError)
    assert "the block raised ZeroDivisionError too" in " ".join(getattr(raised.value, "__notes__", [])) \
        or sys.version_info < (3, 11)
    for ending in (SystemExit(0), SystemExit(None)):
        with pytest.raises(syncfree.SyncError) as raised:
            with syncfree.sync_free():
                userlib.read(torch.ones(2, device="cuda"))
                raise ending
        assert raised.value.__context__ is ending
    for ending in (SystemExit(3), KeyboardInterrupt(), ZeroDivisionError()):
        with pytest.raises(type(ending)):
            with syncfree.sync_free(budget=1):  # within: the program's exception, as raised
                userlib.read(torch.ones(2, device="cuda"))
                raise ending
    for ending in (SystemExit(3), KeyboardInterrupt()):
        with pytest.raises(type(ending)):
            with syncfree.sync_free():
                userlib.read(torch.ones(2, device="cuda"))
                raise ending
    with pytest.raises(ValueError):  # not judged (nothing on CUDA before it raised): the program's exception
        with syncfree.sync_free():
            raise ValueError("bad input")
    with pytest.raises(syncfree.SyncError, match="2 times, budget 0"):  # an inner verdict as given
        with syncfree.sync_free():
            with syncfree.sync_free():
                userlib.read(torch.ones(2, device="cuda"))
                userlib.read(torch.ones(2, device="cuda"))

    @syncfree.sync_free()
    def check(x):
        if (x < 0).any():
            raise ValueError("negative input")

    with syncfree.watch():
        x = -torch.ones(2, device="cuda")
    with pytest.raises(syncfree.SyncError) as raised:
        check(x)
    assert isinstance(raised.value.__context__, ValueError)


def test_decorator_watches_each_call(userlib):
    @syncfree.sync_free()
    def step(x):
        return userlib.read(x)

    with syncfree.watch():
        x = torch.ones(2, device="cuda")
    with pytest.raises(syncfree.SyncError):
        step(x)


def test_state_is_restored_after_the_block(userlib):
    available = torch.cuda.is_available
    with syncfree.watch():
        assert torch.cuda.is_available()
        torch.ones(2, device="cuda")
    assert torch.cuda.is_available is available and not torch.cuda.is_available()


def test_run_script_as_python_runs_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import sys
        import torch
        assert __name__ == "__main__"
        x = torch.ones(3, device="cuda")
        total = 0.0
        for _ in range(4):
            total += x.sum().item()
        print("argv", sys.argv[1:])
        sys.exit(int(sys.argv[1]))
    """))
    run = syncfree.run_script(str(script), ["3"])
    assert run.exit_code == 3
    [site] = run.report.sites
    assert (site.file, site.line, site.count) == (str(script), 7, 4)
    assert sys.argv[0] != str(script)  # restored
    # What the run follows the program's processes through is put back: os.fork, os._exit, os.execv, os.execve.
    from syncfree import processes

    assert (os.fork, os._exit, os.execv, os.execve) == (processes._real_fork, processes._real_exit,
                                                        processes._real_execv, processes._real_execve)


def test_run_script_uncaught_exception_exits_1(tmp_path, capsys):
    script = tmp_path / "boom.py"
    script.write_text("raise ValueError('boom')\n")
    run = syncfree.run_script(str(script))
    assert run.exit_code == 1 and isinstance(run.error, ValueError)
    err = capsys.readouterr().err
    assert "ValueError: boom" in err and "runpy" not in err and "script_run.py" not in err


def test_run_script_syntax_error_runs_nothing(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("def f(:\n")
    with pytest.raises(SyntaxError):
        syncfree.run_script(str(script))


def test_examples_train_script_predicts_its_syncs():
    examples = Path(__file__).parent.parent / "examples"
    run = syncfree.run_script(str(examples / "train.py"), ["--steps", "6", "--log-every", "2"])
    assert run.exit_code == 0
    by_kind = {s.kind: s for s in run.report.sites}
    assert by_kind["python_bool"].count == 6 and by_kind["item"].count == 3
    assert by_kind["item"].file.endswith("examples/train.py")


def test_importing_syncfree_imports_neither_torch_nor_ipython():
    code = "import sys, syncfree; syncfree.watch; print('torch' in sys.modules, 'IPython' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=str(Path(syncfree.__file__).parent.parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_a_watch_nested_in_another_reports_its_own_block(userlib):
    with syncfree.watch() as outer:
        x = torch.ones(4, device="cuda")
        userlib.read(x)
        with syncfree.watch() as inner:
            userlib.read(x)
            userlib.read(x)
        with pytest.raises(syncfree.SyncError, match="would synchronize 1 time, budget 0"):
            with syncfree.sync_free():
                userlib.read(x)
    assert outer.report.syncs == 4
    assert inner.report.syncs == 2 and inner.report.mode == "predict"
    # Two sites: the same userlib line reached from two lines of this test.
    assert [(s.line, s.count, s.file) for s in inner.report.sites] == [(5, 1, userlib.__file__)] * 2
    assert len({s.chain for s in inner.report.sites}) == 2
    assert not any("nested" in n for n in inner.report.notes)  # its own recorder's report


def test_a_watch_inside_a_syncfree_cell_reports_its_block():
    globalipapp = pytest.importorskip("IPython.testing.globalipapp")
    ip = globalipapp.start_ipython() or globalipapp.get_ipython()
    ip.run_line_magic("load_ext", "syncfree")
    ip.user_ns.update(torch=torch, syncfree=syncfree)
    result = ip.run_cell("%%syncfree --quiet\n"
                         "x = torch.ones(3, device='cuda')\n"
                         "x.sum().item()\n"
                         "with syncfree.watch() as w:\n"
                         "    x.sum().item()\n"
                         "    x.max().item()\n")
    assert result.success, result.error_in_exec
    inner = ip.user_ns["w"].report
    assert [(s.line, s.count) for s in inner.sites] == [(5, 1), (6, 1)]
    assert ip.user_ns["_syncfree_report"]["totals"]["syncs"] == 3  # the cell saw all three


def test_syncfree_run_mode_error_stops_at_the_first_sync_with_a_traceback_at_the_users_line(tmp_path):
    script = tmp_path / "step.py"
    script.write_text("import torch\n\n\ndef step(x):\n    return x.sum().item()\n\n\n"
                      "x = torch.ones(4, device='cuda')\nstep(x)\nprint('never')\n")
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", "--mode", "error", str(script)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stderr  # a finding, not a failed script
    assert "never" not in done.stdout.splitlines() and "step.py:5:12: SF101" in done.stdout  # `x.sum().item()`
    frames = [line for line in done.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert frames[-1].strip().startswith(f'File "{script}", line 5'), done.stderr
    assert "syncfree" not in "".join(frames).replace(str(tmp_path), ""), done.stderr
    assert "stopped at its first sync (--mode error)" in done.stderr


# ----------------------------------------------------------------------------- decorators


def test_a_decorator_keeps_each_calls_report(userlib):
    reports = []
    w = syncfree.watch(on_report=reports.append)

    @w
    def step(x, n):
        for _ in range(n):
            userlib.read(x)

    with syncfree.watch():
        x = torch.ones(2, device="cuda")
    step(x, 2)
    step(x, 3)
    assert [r.syncs for r in reports] == [2, 3]  # each call's, in order
    assert w.report is reports[-1] and step.syncfree_report is reports[-1]  # the last call's
    assert step.__name__ == "step" and w.report.sites[0].file == userlib.__file__


def test_a_decorated_generator_is_watched_across_yields_but_not_its_consumer(userlib):
    reports = []

    @syncfree.watch(on_report=reports.append)
    def batches(x):
        for i in range(3):
            userlib.read(x)          # the body: watched
            yield i
        return "done"

    with syncfree.watch():
        x = torch.ones(2, device="cuda")
    consumer = syncfree.watch()
    seen = []
    gen = batches(x)
    with consumer:
        for i in gen:
            seen.append(i)
            x.sum().item()           # the consumer's own code, between two items
    assert seen == [0, 1, 2]
    [report] = reports
    assert report.syncs == 3 and [(s.line, s.count) for s in report.sites] == [(5, 3)]
    # The consumer's watch is this thread's: the generator's report is its own part.
    assert consumer.report.syncs >= 3


def test_a_decorated_generator_reports_when_closed_and_checks_its_budget_when_exhausted(userlib):
    @syncfree.sync_free()
    def reads(x):
        while True:
            userlib.read(x)
            yield

    with syncfree.watch():
        x = torch.ones(2, device="cuda")
    gen = reads(x)
    next(gen)
    next(gen)
    gen.close()  # a consumer that stops early: a report, no SyncError
    assert reads.syncfree_report.syncs == 2

    @syncfree.sync_free()
    def finite(x):
        yield userlib.read(x)

    with pytest.raises(syncfree.SyncError, match="would synchronize 1 time"):
        list(finite(x))


def test_decorated_async_functions_and_generators_run_inside_their_watch(userlib):
    import asyncio

    reports = []

    @syncfree.watch(on_report=reports.append)
    async def step(x, n):
        for _ in range(n):
            userlib.read(x)
            await asyncio.sleep(0)   # other tasks run here: not counted
        return n

    @syncfree.watch(on_report=reports.append)
    async def stream(x):
        for i in range(2):
            userlib.read(x)
            await asyncio.sleep(0)
            yield i

    async def other_task(x):
        for _ in range(5):
            x.sum().item()
            await asyncio.sleep(0)

    async def main():
        with syncfree.watch():
            x = torch.ones(2, device="cuda")
        with syncfree.watch() as around:
            results = await asyncio.gather(step(x, 3), other_task(x))
            items = [i async for i in stream(x)]
        return results, items, around

    results, items, around = asyncio.run(main())
    assert results[0] == 3 and items == [0, 1]
    assert [r.syncs for r in reports] == [3, 2]
    assert around.report.syncs == 10  # its task and the tasks it created: 3 + 5 + 2


def test_sync_free_on_an_async_function_fails_when_its_body_syncs(userlib):
    import asyncio

    @syncfree.sync_free()
    async def step(x):
        await asyncio.sleep(0)
        return userlib.read(x)

    with syncfree.watch():
        x = torch.ones(2, device="cuda")
    with pytest.raises(syncfree.SyncError, match="would synchronize 1 time"):
        asyncio.run(step(x))


def test_code_a_block_runs_in_a_context_copied_before_it_began_is_the_blocks(userlib):
    """pytest-asyncio copies a test's context before the test's watch opens and runs the coroutine in the copy
    from inside the watch: that code runs on the block's behalf (it used to count 0 in the inner watch and 1 in
    the outer one, the copy's). Threads and pool tasks it starts are the block's too."""
    import asyncio
    import contextvars

    async def body(x):
        userlib.read(x)
        await asyncio.sleep(0)
        await asyncio.to_thread(userlib.read, x)  # runs in a copy of this (early) context in a pool thread
        with syncfree.watch() as nested:  # nested in the block: its syncs count there too
            userlib.read(x)
        return nested

    with syncfree.watch() as outer:
        x = torch.ones(2, device="cuda")
        early = contextvars.copy_context()
        with syncfree.watch() as inner:
            early.run(userlib.read, x)
            nested = early.run(asyncio.run, body(x))  # asyncio.Runner(context=early), as pytest-asyncio does
        early.run(userlib.read, x)  # after the inner block: the copy's own watch, the outer one
    assert nested.report.syncs == 1
    assert inner.report.syncs == 4, inner.report.text()
    assert outer.report.syncs == 5, outer.report.text()

    # A task interleaved with a watch's task is not the watch's, though its context was copied before the watch.
    async def other(x, started):
        started.set()
        for _ in range(3):
            userlib.read(x)
            await asyncio.sleep(0)

    async def main(x):
        started = asyncio.Event()
        task = asyncio.create_task(other(x, started))
        await started.wait()
        with syncfree.watch() as own:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            userlib.read(x)
        await task
        return own

    with syncfree.watch() as around:
        x = torch.ones(2, device="cuda")
        own = asyncio.run(main(x))
    assert own.report.syncs == 1, own.report.text()
    assert around.report.syncs == 4


def test_a_block_over_cpu_tensors_only_is_not_judged_without_cuda():
    """Tensors made before the block with the usual device choice are CPU tensors on this machine: predict mode
    cannot tell what they would sync on a GPU. sync_free() passed such a block ("0 syncs predicted"), where a GPU
    raises; it now raises NotJudged, and a watch's report says so."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.ones(4, device=device)
    with pytest.raises(syncfree.NotJudged, match="could not judge the block: no CUDA tensor was seen") as raised:
        with syncfree.sync_free():
            (x * 2).sum().item()
    assert isinstance(raised.value, syncfree.SyncError)  # an AssertionError, as a failed budget is
    report = raised.value.report
    assert (report.syncs, report.judged) == (0, False)
    assert report.notes[0].startswith("no CUDA tensor was seen"), report.notes
    with syncfree.watch() as w:
        x.sum()
    assert not w.report.judged and "no CUDA tensor was seen" in w.report.text()

    @syncfree.sync_free()
    def step(t):
        return (t + 1).sum()

    with pytest.raises(syncfree.NotJudged):
        step(x)
    # Judged: CUDA work on the stand-ins (beside host tensors) that syncs nowhere, a block without torch work, and
    # one over its budget (its syncs are the finding).
    with syncfree.sync_free() as clean:
        y = torch.ones(4, device="cuda")
        (y * 2).sum()
        x.sum()
    assert clean.report.judged and not any("no CUDA tensor" in note for note in clean.report.notes)
    with syncfree.sync_free() as empty:
        sum(range(10))
    assert empty.report.judged
    with syncfree.sync_free():
        y.add_(1)  # in place, on a tensor made before the block: nothing new on the stand-ins
    with pytest.raises(syncfree.SyncError, match="would synchronize 1 time") as over:
        with syncfree.sync_free():
            y.sum().item()
    assert not isinstance(over.value, syncfree.NotJudged)


def test_predict_mode_asked_for_on_a_gpu_machine_judges_its_blocks(monkeypatch):
    # There the program's tensors are real CUDA ones, which are no stand-ins: they are not "CPU tensors only".
    import syncfree.watches

    monkeypatch.setattr(syncfree.watches, "cuda_available", lambda: True)
    x = torch.ones(4)  # standing in for a real CUDA tensor
    with syncfree.sync_free(mode="predict") as block:
        (x * 2).sum()
    assert block.report.judged


def test_a_method_the_program_wraps_after_the_first_watch_is_still_predicted():
    """Predict mode's handler table was keyed on the methods as the first watch of the process found them: a
    wrapper the program put over ``Tensor.item`` (or ``__repr__``, ``unique``) afterwards is what torch passes
    to the mode, and later blocks passed with 0 syncs (``.item()`` fell back to the op table as a library
    sync). A wrapper put in place inside a block is followed too."""
    import functools

    names = ("item", "__repr__", "__format__", "unique", "tolist")
    saved = {name: vars(torch.Tensor).get(name) for name in names}

    def wrap(name, keep_name=True):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            return original(self, *args, **kwargs)

        setattr(torch.Tensor, name, functools.wraps(original)(wrapper) if keep_name else wrapper)

    with syncfree.watch():  # the tables are built
        torch.ones(2, device="cuda").sum()
    try:
        for name in ("item", "__repr__", "__format__"):
            wrap(name)
        wrap("unique", keep_name=False)  # a plain function in its place, not even named so
        with pytest.raises(syncfree.SyncError, match="would synchronize 4 times") as raised:
            with syncfree.sync_free():
                x = torch.ones(3, device="cuda")
                x.sum().item()
                repr(x)
                f"{x.sum():.1f}"
                x.unique()
        kinds = sorted(site.kind for site in raised.value.report.sites)
        assert kinds == ["format", "item", "print", "unique"], raised.value.report.text()
        with syncfree.watch() as w:
            x = torch.ones(3, device="cuda")
            wrap("tolist")  # replaced inside the block
            x.tolist()
        assert [site.kind for site in w.report.sites] == ["tolist"], w.report.text()
    finally:
        for name, value in saved.items():
            if value is None:
                if name in vars(torch.Tensor):
                    delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, value)


# ----------------------------------------------------------------------------- threads


def _item(x):
    return x.sum().item()  # the line the thread syncs on


_ITEM_LINE = _item.__code__.co_firstlineno + 1


def _thread_sites(report):
    return sorted((s.line, s.kind, s.count, s.thread) for s in report.sites
                  if s.file == __file__ and s.line == _ITEM_LINE)


def test_a_thread_started_in_a_sync_free_block_is_its_own(userlib):
    """A thread the watched block starts and joins runs under the block's watch (routed
    to it, and in predict mode under a predict session of its own): its .item() fails the
    block. It used to run without the predict mode at all: not predicted, the test passed."""
    import threading

    with pytest.raises(syncfree.SyncError, match="would synchronize 1 time") as raised:
        with syncfree.sync_free():
            x = torch.ones(2, device="cuda")
            t = threading.Thread(target=_item, args=(x,), name="reader")
            t.start()
            t.join()
    report = raised.value.report
    assert _thread_sites(report) == [(_ITEM_LINE, "item", 1, "reader")], report.text()
    assert not any("no syncfree watch owned" in n for n in report.notes), report.notes
    assert "in thread reader" in report.text() and "in thread reader" in str(raised.value), report.text()


def _rank_syncs(index):  # a child process's target (module level: a spawned child imports it)
    x = torch.randn(4, device="cuda")
    for _ in range(index + 1):
        x.sum().item()


class _OwnRun(multiprocessing.get_context("fork").Process):
    def run(self):
        pass


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_child_processes_a_sync_free_block_starts_are_its_own(method):
    # A sync_free block whose ranks synced passed (a block followed no child process): the children's targets now
    # run under a watch of their own with the block's mode, and their syncs are the block's.
    context = multiprocessing.get_context(method)
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            ranks = [context.Process(target=_rank_syncs, args=(i,), name=f"Rank-{i}") for i in range(2)]
            for rank in ranks:
                rank.start()
            for rank in ranks:
                rank.join()
    report = raised.value.report
    assert report.syncs == 3, report.text()
    [site] = report.sites
    assert (site.kind, site.count, site.process) == ("item", 3, "Rank-0, Rank-1"), report.text()
    assert "in child processes Rank-0, Rank-1" in str(raised.value)


def test_a_python_program_a_block_starts_with_subprocess_watches_itself_and_its_syncs_count(tmp_path):
    # A sync_free block whose Python subprocess synced passed, the program only named in a note: a program of this
    # interpreter now watches itself (syncfree/programs.py) and reports to the block. It sees the environment it was
    # given (no SYNCFREE_FOLLOW, its own PYTHONPATH).
    child = tmp_path / "child.py"
    child.write_text("import os, torch\nprint(os.environ.get('PYTHONPATH'), os.environ.get('SYNCFREE_FOLLOW'), "
                     "os.environ.get('MINE'))\ntorch.ones(3, device='cuda').sum().item()\n")
    env = {**os.environ, "MINE": "kept"}
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            done = subprocess.run([sys.executable, str(child)], check=True, capture_output=True, text=True, env=env)
    assert done.stdout.split() == [os.environ.get("PYTHONPATH", "None"), "None", "kept"], done.stdout
    message = str(raised.value)
    assert message.startswith("would synchronize 1 time, budget 0") and "child.py:3:" in message, message
    assert f"in child process child.py (pid {message.split('(pid ')[1].split(')')[0]})" in message, message
    # Through the shell too (its first command's words): `python child.py > log`.
    with syncfree.watch() as shelled:
        subprocess.run(f"{shlex.quote(sys.executable)} {shlex.quote(str(child))} > {tmp_path / 'log'}",
                       shell=True, check=True)
    assert [(s.count, s.process.split(" (pid")[0]) for s in shelled.report.sites] == [(1, "child.py")], \
        shelled.report.text()
    assert not [n for n in shelled.report.notes if "process" in n or "subprocess" in n], shelled.report.notes
    # Nested: the innermost watch follows it, the block around it counts it too.
    with pytest.raises(syncfree.SyncError):
        with syncfree.sync_free():
            with syncfree.watch() as inner:
                subprocess.run([sys.executable, str(child)], check=True, capture_output=True)
    assert inner.report.syncs == 1, inner.report.text()
    # A program that never starts its watch (-I ignores PYTHONPATH) is named; Python without a program (--version)
    # and other programs are not.
    with syncfree.sync_free() as w:
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        subprocess.run([sys.executable, "--version"], check=True, capture_output=True)
        subprocess.run(["true"], check=True)
    assert [n for n in w.report.notes if "subprocess" in n] == [
        "1 Python program started with subprocess (-c ...) ran unwatched: its syncs are not in this report "
        "(`syncfree run` it to see them)"], w.report.notes
    import subprocess as module

    assert vars(module.Popen)["__init__"] is not None and "syncfree" not in vars(module.Popen)["__init__"].__module__


def test_a_python_program_a_block_runs_with_os_system_or_os_popen_counts(tmp_path):
    # os.system and os.popen ran the program unwatched and unnamed: the block passed with its syncs uncounted.
    child = tmp_path / "child.py"
    child.write_text("import os, torch\nprint(os.environ.get('SYNCFREE_FOLLOW'))\n"
                     "torch.ones(3, device='cuda').sum().item()\n")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(child))}"
    path_before = os.environ.get("PYTHONPATH")
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            assert os.system(command + f" > {tmp_path / 'log'}") == 0
    assert "child.py:3:" in str(raised.value) and "in child process child.py (pid" in str(raised.value), raised.value
    assert (tmp_path / "log").read_text() == "None\n"  # the program sees the environment as it was
    assert os.environ.get("PYTHONPATH") == path_before and "SYNCFREE_FOLLOW" not in os.environ
    with syncfree.watch() as w:
        assert os.popen(command).read() == "None\n"
    assert [(s.count, s.process.split(" (pid")[0]) for s in w.report.sites] == [(1, "child.py")], w.report.text()
    # An assignment before the command is the command's environment: the program is followed through it, unless it
    # sets PYTHONPATH itself (the hook's would not reach it: named).
    with syncfree.watch() as assigned:
        os.system(f"MINE=1 {command} > /dev/null")
    assert [s.count for s in assigned.report.sites] == [1], assigned.report.text()
    # A program that never starts its watch (-I ignores PYTHONPATH) is named.
    with syncfree.watch() as unwatched:
        os.system(f"{shlex.quote(sys.executable)} -I {shlex.quote(str(child))} > /dev/null")
        os.system(f"PYTHONPATH=. {command} > /dev/null 2>&1")
        subprocess.run(f"PYTHONPATH=. {command} > /dev/null 2>&1", shell=True)
    assert [n for n in unwatched.report.notes if "ran unwatched" in n] == [
        "3 Python programs started here with subprocess (child.py, child.py, child.py) ran unwatched: their syncs are "
        "not counted (`syncfree run` them to see theirs)"], unwatched.report.notes
    assert vars(os)["system"].__module__ == "posix"


@pytest.mark.exhaustive  # make test-all: a block's followed programs are make test's os.system/os.popen test; shells under run are test_cli_run's
def test_the_python_programs_a_shell_or_script_runs_watch_themselves_and_count(tmp_path):
    # `bash run.sh`, `bash -c "python a.py; python b.py"`, `make`: a command that is not Python ran its Python
    # programs unwatched and unnamed, and a sync_free block around it passed. Any command the block's code runs now
    # passes the start-up hook on; each Python program of this interpreter under it watches itself and tells its pid.
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    second.write_text("import torch\nx = torch.ones(2, device='cuda')\nx.sum().item(); x.max().item()\n")
    script = tmp_path / "run.sh"
    script.write_text(f"{shlex.quote(sys.executable)} {shlex.quote(str(first))}\n")
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            subprocess.run(["bash", str(script)], check=True)
    assert "first.py:2:" in str(raised.value) and "in child process first.py (pid" in str(raised.value), raised.value
    both = f"{shlex.quote(sys.executable)} {shlex.quote(str(first))}; {shlex.quote(sys.executable)} " \
           f"{shlex.quote(str(second))}"
    with syncfree.watch() as w:
        subprocess.run(["sh", "-c", both], check=True)
        subprocess.run(f"{both} && true", shell=True, check=True)  # the first command is Python: both still count
        assert os.system(f"sh -c {shlex.quote(both)}") == 0
        subprocess.run(["true"], check=True)
    assert sorted((s.file.rsplit("/", 1)[-1], s.count, len(s.process.split(", "))) for s in w.report.sites) == [
        ("first.py", 3, 3), ("second.py", 6, 3)], w.report.text()
    assert not [n for n in w.report.notes if "process" in n], w.report.notes
    # Another interpreter under the shell cannot import this syncfree: it is named, unwatched, and runs as it would.
    base = os.path.join(sys.base_prefix, "bin", "python3")
    if sys.prefix == sys.base_prefix or not os.path.exists(base):
        pytest.skip("not in a virtual environment: no other interpreter to run")
    (tmp_path / "other.py").write_text("import sys\nprint(sys.prefix)\n")
    with syncfree.watch() as other:
        done = subprocess.run(["sh", "-c", f"{shlex.quote(base)} {shlex.quote(str(tmp_path / 'other.py'))}"],
                              check=True, capture_output=True, text=True)
    assert done.stdout.strip() == sys.base_prefix and not done.stderr, done
    assert [n for n in other.report.notes if "unwatched" in n] == [
        f"1 Python program started with subprocess (other.py ({base})) ran unwatched: its syncs are not in this "
        "report (`syncfree run` it to see them)"], other.report.notes


def test_a_python_program_an_async_block_starts_with_asyncio_subprocesses_counts(tmp_path):
    # asyncio.create_subprocess_exec / _shell: the caller of Popen was asyncio's transport, not the program's code,
    # so the program ran unwatched and unnamed and the block passed. The coroutine that awaits them is the caller.
    import asyncio

    child = tmp_path / "child.py"
    child.write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")

    async def main():
        started = await asyncio.create_subprocess_exec(sys.executable, str(child))
        await started.wait()
        started = await asyncio.create_subprocess_shell(f"{shlex.quote(sys.executable)} {shlex.quote(str(child))}")
        await started.wait()

    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            asyncio.run(main())
    assert raised.value.report.syncs == 2 and "in child processes child.py (pid" in str(raised.value), raised.value


def test_a_pool_made_before_a_block_that_runs_its_tasks_is_not_passed():
    # A Pool (or ProcessPoolExecutor) made before the block ran the block's tasks in processes nothing watched: the
    # block passed with a note, whatever they synced (a session fixture's pool in a marked test). The tasks the block
    # hands such workers make its count short: not judged (test_a_block_names_the_pool_made_before_it_...: a note).
    import concurrent.futures

    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool, concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as executor:
        assert pool.map(abs, [-1, -2]) == [1, 2] and list(executor.map(abs, [-3])) == [3]
        for hand in (lambda: pool.map(abs, [-1, -2]), lambda: pool.apply_async(abs, (-1,)).get(30),
                     lambda: executor.submit(dict, pool=1).result(30)):  # a keyword named as the wrapper's first
            with pytest.raises(syncfree.NotJudged) as raised:
                with syncfree.sync_free():
                    torch.ones(2, device="cuda").sum()
                    hand()
            assert "ran its tasks (a Pool's or a ProcessPoolExecutor's workers): syncs" in str(raised.value), raised.value


def _sync_in_worker(n):
    return torch.ones(n, device="cuda").sum().item()


class _ReadingDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.ones(3, device="cuda").sum().item()  # a sync in the worker


def test_a_block_whose_cuda_work_its_dataloader_workers_do_is_judged():
    # Predict mode judges a block that touched CPU tensors only as "not judged" (the device was chosen where CUDA is
    # not available). A block whose own process only collates the host floats its DataLoader's workers read from
    # CUDA tensors was not judged either, under its budget or over it: the workers' syncs are CUDA work.
    loader = torch.utils.data.DataLoader(_ReadingDataset(), batch_size=2, num_workers=2)
    with syncfree.sync_free(budget=4) as block:
        assert [batch.tolist() for batch in loader] == [[3.0, 3.0], [3.0, 3.0]]
    assert block.report.judged and block.report.syncs == 4, block.report.text()
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free(budget=3):
            list(loader)
    assert type(raised.value) is syncfree.SyncError and raised.value.report.syncs == 4, raised.value


def test_a_pool_made_in_a_block_and_left_running_at_its_end_is_not_passed():
    # A pool made in the block and not closed in it: its workers had written no report of the tasks they ran when
    # the block ended, and the block passed with a note, whatever the tasks synced. Their syncs are missing from the
    # count: not judged, the workers named. A child that is no pool's worker (a server, persistent DataLoader
    # workers) still running is a note, as before.
    import concurrent.futures

    context = multiprocessing.get_context("fork")
    pools = []
    try:
        for make, hand in ((lambda: context.Pool(1), lambda pool: pool.apply(_sync_in_worker, (2,))),
                           (lambda: concurrent.futures.ProcessPoolExecutor(1, mp_context=context),
                            lambda pool: pool.submit(_sync_in_worker, 2).result(30))):
            with pytest.raises(syncfree.NotJudged) as raised:
                with syncfree.sync_free():
                    pools.append(make())
                    assert hand(pools[-1]) == 2.0
            assert "a worker of a Pool or ProcessPoolExecutor, was still running when the block ended: the syncs of " \
                   "the tasks it ran are not counted" in str(raised.value), raised.value
        server = context.Process(target=time.sleep, args=(30,), daemon=True)
        with syncfree.sync_free() as block:
            server.start()
        assert block.report.judged and "was still running when the block ended: its syncs are not counted" in \
            block.report.text()
        server.terminate()
        server.join(10)  # reaped: a later test's block must not find it still running
        if server.is_alive():  # seen once in a clean-clone run: SIGTERM waited for the sleep's end (30 s)
            server.kill()
            server.join()
        with syncfree.sync_free() as block:  # a Pool made for later, handed nothing here
            pools.append(context.Pool(1))
        assert block.report.judged and "was still running when the block ended: its syncs are not counted" in \
            block.report.text()
    finally:
        for pool in pools:
            (pool.terminate if hasattr(pool, "terminate") else pool.shutdown)()


def test_a_block_counts_the_syncs_of_a_syncfree_run_it_starts(tmp_path):
    # `python -m syncfree run child.py` under a block (a test of a CLI, a script that runs another under syncfree):
    # the program's watch waited for its import of torch, and the run's recorder, started at the same import, went
    # outside it: the block counted 0 of the child's syncs, with nothing said. The watch of a program that is
    # syncfree itself starts at once, and the run's syncs pass up to it.
    (tmp_path / "child.py").write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            done = subprocess.run([sys.executable, "-m", "syncfree", "run", "child.py"], cwd=tmp_path,
                                  capture_output=True, text=True)
    assert done.returncode == 1 and "child.py:2:" in done.stdout, (done.stdout, done.stderr)
    assert raised.value.report.syncs == 1 and "in child process -m syncfree (pid" in str(raised.value), raised.value


def test_a_command_still_running_when_its_block_ends_is_named(tmp_path):
    # A command run in the background (a shell script that starts its Python program later) outlived the block
    # without a word: the programs it ran after the block's end were neither counted nor named.
    done = tmp_path / "go"
    with syncfree.watch() as w:
        command = subprocess.Popen(["sh", "-c", f"while [ ! -e {shlex.quote(str(done))} ]; do sleep 0.05; done"])
    done.touch()
    assert command.wait(30) == 0
    [note] = [n for n in w.report.notes if "command" in n]
    assert note.startswith("command sh -c while [ ! -e ") and note.endswith(
        f"... (pid {command.pid}) was still running when the block ended: the Python programs it runs from then on "
        "are not counted"), note
    assert not w.report.lost_children  # it works on for the program, as a child still running does
    with syncfree.watch() as finished:
        subprocess.run(["sh", "-c", "true"], check=True)
    assert not [n for n in finished.report.notes if "command" in n], finished.report.notes


@pytest.mark.skipif(not hasattr(os, "posix_spawn"), reason="os.posix_spawn is POSIX")
@pytest.mark.exhaustive  # make test-all: posix_spawn under a block; under a marked test (the same follower) it is make test's
def test_a_python_program_started_with_os_spawn_or_posix_spawn_counts(tmp_path):
    # os.posix_spawn ran the program unwatched and unnamed (the block passed); os.spawn* was named as an os.fork().
    child = tmp_path / "child.py"
    child.write_text("import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    exe = sys.executable
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            os.waitpid(os.posix_spawn(exe, [exe, str(child)], os.environ), 0)
    assert raised.value.report.syncs == 1, raised.value
    with syncfree.watch() as w:
        assert os.spawnv(os.P_WAIT, exe, [exe, str(child)]) == 0
        os.waitpid(os.spawnlp(os.P_NOWAIT, "sh", "sh", "-c", f"{exe} {child}; {exe} {child}"), 0)
        os.waitpid(os.posix_spawnp("sh", ["sh", "-c", f"{exe} {child}"], dict(os.environ)), 0)
    assert [(s.count, len(s.process.split(", "))) for s in w.report.sites] == [(4, 4)], w.report.text()
    assert not [n for n in w.report.notes if "process" in n or "program" in n], w.report.notes


def test_a_python_program_of_the_users_that_a_library_starts_counts(tmp_path, monkeypatch):
    # A library that runs the user's script again in a subprocess (Lightning's DDP launcher: one per rank past the
    # first) ran it unwatched and unnamed: the block passed with those ranks' syncs lost. A library's Popen of the
    # user's own code (a script of theirs, a module of the program's by -m) is followed as the program's own is; a
    # library's own Python (torch.compile's workers, a -c helper, a script of its own) goes through as it is.
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "launchlib_sf.py").write_text(textwrap.dedent("""\
        import subprocess, sys
        def launch(*argv, cwd=None):
            return subprocess.run([sys.executable, *argv], check=True, cwd=cwd, capture_output=True, text=True).stdout
    """))
    watched = "import sys; print(sorted(m for m in sys.modules if m.startswith('syncfree'))[:1])"
    (library / "launchlib_helper.py").write_text(watched + "\n")
    rank = tmp_path / "train.py"
    rank.write_text("import torch\nx = torch.ones(2, device='cuda')\nx.sum().item()\n")
    monkeypatch.syspath_prepend(str(library))
    import launchlib_sf

    from syncfree.capture.threads import runs_the_programs_code

    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            launchlib_sf.launch(str(rank))
            launchlib_sf.launch("train.py", cwd=str(tmp_path))  # relative to the child's cwd
    assert raised.value.report.syncs == 2 and "train.py:3:" in str(raised.value), raised.value
    assert "in child processes train.py (pid" in str(raised.value), raised.value
    import sysconfig

    shim = Path(sysconfig.get_path("scripts")) / "pytest"  # an installed command (Lightning runs bin/pytest again)
    with syncfree.watch() as passed:  # the library's own Python: not the user's code
        outputs = [launchlib_sf.launch("-c", watched), launchlib_sf.launch(str(library / "launchlib_helper.py"))]
        assert runs_the_programs_code([sys.executable, str(shim), "--version"], None, None) is False
        assert runs_the_programs_code([sys.executable, str(rank)], None, None) is True
    assert outputs == ["[]\n", "[]\n"], outputs
    assert not [n for n in passed.report.notes if "process" in n or "program" in n], passed.report.notes


def test_a_childs_sigterm_that_lands_in_the_engine_is_raised_again_outside_it(monkeypatch):
    # A followed child's SIGTERM handler wrote its report wherever the signal landed: in the engine's own code, which
    # may hold the recorder's lock the report needs, the child could wait until it was killed (a spawn Pool worker
    # SIGKILLed 10 s after terminate(), its syncs lost). It is raised again a moment later, as syncfree run's is,
    # and written there; held back no longer than interrupts.MAX_HOLD_S.
    from syncfree import processes
    from syncfree.capture import interrupts

    children = processes.ForkedChildren(lambda: None)
    done: list[tuple] = []
    monkeypatch.setattr(children, "finish_child", lambda *args: done.append(("report",)))
    monkeypatch.setattr(interrupts, "rearm_later", lambda signum: done.append(("again", signum)))
    monkeypatch.setattr(signal, "signal", lambda *args: None)
    monkeypatch.setattr(os, "kill", lambda pid, signum: done.append(("dies", signum)))
    namespace: dict = {}
    code = "import sys\ndef landed(handler, signum):\n    handler(signum, sys._getframe())\n"
    exec(compile(code, os.path.join(interrupts._ENGINE_DIR, "recorder.py"), "exec"), namespace)
    namespace["landed"](children._terminated, signal.SIGTERM)
    assert done == [("again", signal.SIGTERM)]
    children._term_held -= interrupts.MAX_HOLD_S + 1  # held back as long as it may be: written where it lands
    namespace["landed"](children._terminated, signal.SIGTERM)
    assert done[1:] == [("report",), ("dies", signal.SIGTERM)]
    done.clear()
    fresh = processes.ForkedChildren(lambda: None)  # outside the engine: written at once
    monkeypatch.setattr(fresh, "finish_child", lambda *args: done.append(("report",)))
    fresh._terminated(signal.SIGTERM, sys._getframe())
    assert done == [("report",), ("dies", signal.SIGTERM)]


def test_a_child_that_is_not_this_process_to_wait_for_reads_as_running_while_it_runs():
    # A forkserver's children are the forkserver's, not the block's to wait for: one still running at the block's end
    # was said to have "ended without a report (killed)", and the block could not be judged.
    from syncfree.processes import _alive

    shell = subprocess.run(["sh", "-c", "sleep 30 > /dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                           check=True)
    grandchild = int(shell.stdout)
    try:
        assert _alive(grandchild)
    finally:
        os.kill(grandchild, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:  # init reaps it
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_coroutine_a_block_hands_to_a_loop_in_another_thread_counts_for_the_block():
    # A loop running in a thread started before the block (a server's, a background loop): the coroutine the block
    # handed it with run_coroutine_threadsafe ran in a thread routed to no watch, and the block passed.
    import asyncio

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def reads():
        return torch.ones(2, device="cuda").sum().item()

    async def idle():
        return 1

    try:
        with pytest.raises(syncfree.SyncError) as raised:
            with syncfree.sync_free():
                assert asyncio.run_coroutine_threadsafe(reads(), loop).result(timeout=60) == 2.0
        [site] = raised.value.report.sites
        assert (site.count, site.thread) == (1, thread.name), raised.value
        assert asyncio.run_coroutine_threadsafe(idle(), loop).result(timeout=60) == 1  # outside a block: as it was
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()


def test_a_python_c_programs_syncs_are_at_its_own_lines():
    # `python -c CODE`: its code was "outside your code" (its file "<string>" is no file); it is the program's own.
    code = "import torch\nx = torch.ones(2, device='cuda')\nv = x.sum().item()\n"
    with syncfree.watch() as w:
        subprocess.run([sys.executable, "-c", code], check=True)
    assert [(s.file, s.line, s.count, s.process.split(" (pid")[0]) for s in w.report.sites] == [
        ("<string>", 3, 1, "-c ...")], w.report.text()
    from syncfree.capture.sites import UserFiles

    assert "<string>" not in UserFiles()  # in this process "<string>" is still exec'd code


def test_a_distributed_launch_a_block_starts_is_named_not_silent(tmp_path):
    # torchrun's ranks are its library's children, which nothing follows: a block that launched a job said nothing of
    # it and passed. It is named, with the command that counts its ranks.
    (tmp_path / "train.py").write_text("pass\n")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with syncfree.watch() as w:
        subprocess.run([torchrun, "--help"], capture_output=True)
        # --help: the launcher starts no rank (and takes no port beside the suite's torchrun jobs)
        os.system(f"cd {shlex.quote(str(tmp_path))} && {shlex.quote(sys.executable)} -m torch.distributed.run "
                  "--help --nproc-per-node 1 train.py > /dev/null 2>&1")
    assert [n for n in w.report.notes if "launch" in n] == [
        "2 distributed launches started here (torchrun, torchrun train.py) ran their ranks unwatched: their syncs are "
        "not counted (`syncfree run --nproc-per-node N train.py` runs the ranks watched and merges their reports)"], \
        w.report.notes
    assert not [n for n in w.report.notes if "Python program" in n], w.report.notes
    # Under a shell the launcher itself tells its parent what it is.
    with syncfree.watch() as shelled:
        subprocess.run(["sh", "-c", f"{shlex.quote(torchrun)} --help > /dev/null"], check=True)
    assert [n for n in shelled.report.notes if "launch" in n] == [
        "1 distributed launch started (torchrun) ran its ranks unwatched: their syncs are not in this report "
        "(`syncfree run --nproc-per-node N train.py` runs the ranks watched and merges their reports)"], \
        shelled.report.notes


def test_the_python_program_of_a_shell_command_line_is_its_first_commands_words():
    from syncfree.capture.threads import python_program, shell_words

    assert shell_words("python train.py --lr 1 > log 2>&1") == ["python", "train.py", "--lr", "1"]
    assert shell_words("python3 -m pkg.mod; echo done") == ["python3", "-m", "pkg.mod"]
    assert shell_words("'my python' 'a b.py'|tee x") == ["my python", "a b.py"]
    assert shell_words("python $SCRIPT") is None
    assert shell_words("python 'unclosed") is None and shell_words("") is None
    assert python_program(shell_words("python train.py > log")) == "train.py"
    assert shell_words("cd dir && python train.py 2>&1 | tee log") == ["python", "train.py"]
    assert shell_words("ls > out; python a.py --n 3 >log") == ["python", "a.py", "--n", "3"]
    assert shell_words("CUDA_VISIBLE_DEVICES=0 python a.py; echo done") == ["python", "a.py"]
    assert shell_words("X=1") is None and shell_words("echo hi") == ["echo", "hi"]
    assert shell_words("cd run && torchrun --nproc-per-node 2 train.py") == ["torchrun", "--nproc-per-node", "2",
                                                                             "train.py"]


def test_a_python_program_still_starting_when_the_block_ends_is_named_as_running():
    with syncfree.watch() as w:
        started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    started.wait()
    assert [n for n in w.report.notes if "still running" in n] == [
        f"child process -c ... (pid {started.pid}) was still running when the block ended: its syncs are not "
        "counted"], w.report.notes


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_children_of_a_watch_inside_a_sync_free_block_count_for_the_block(method):
    # The inner watch followed the ranks and counted their syncs; the sync_free block around it passed (its report
    # had none of them). A watch's children are the watches' around it too, as its own syncs are.
    context = multiprocessing.get_context(method)
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            with syncfree.watch() as inner:
                ranks = [context.Process(target=_rank_syncs, args=(i,), name=f"Rank-{i}") for i in range(2)]
                for rank in ranks:
                    rank.start()
                for rank in ranks:
                    rank.join()
            torch.ones(2, device="cuda").sum().item()  # the block's own sync, beside its children's
    assert inner.report.syncs == 3, inner.report.text()
    outer = raised.value.report
    assert outer.syncs == 4, outer.text()
    assert sorted((s.count, s.process) for s in outer.sites) == [(1, None), (3, "Rank-0, Rank-1")], outer.text()


def test_a_process_a_block_forks_with_os_fork_is_followed_and_its_syncs_count():
    # A child forked with os.fork() itself ran the block's code on in a copy of the watch that reported nowhere: a
    # sync_free block whose forked child synced passed (it was named in a note only). The block's follower now takes
    # the fork as syncfree run's does: the child reports its syncs from the fork on, at os._exit or at the block's
    # end; the child does not judge the block (the parent does).
    with pytest.raises(syncfree.SyncError) as raised:
        with syncfree.sync_free():
            torch.ones(2, device="cuda").sum().item()  # before the fork: the parent's alone
            pid = os.fork()
            if pid == 0:
                torch.ones(2, device="cuda").sum().item()
                os._exit(0)
            os.waitpid(pid, 0)
            child = multiprocessing.get_context("fork").Process(target=os.getpid)
            child.start()
            child.join()
    report = raised.value.report
    assert report.syncs == 2 and sorted(s.process or "" for s in report.sites) == ["", f"pid {pid}"], report.text()
    assert not [n for n in report.notes if "fork" in n or "process" in n], report.notes
    status = pid = None
    with pytest.raises(syncfree.SyncError) as raised:  # a child that runs on to the block's end reports there
        try:
            with syncfree.sync_free():
                pid = os.fork()
                if pid == 0:
                    for _ in range(2):
                        torch.ones(2, device="cuda").sum().item()
                else:
                    _, status = os.waitpid(pid, 0)
        except BaseException:
            if pid == 0:
                os._exit(3)  # the child judged the block: the parent does
            raise
        if pid == 0:
            os._exit(0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [(s.count, s.process) for s in raised.value.report.sites] == [(2, f"pid {pid}")], raised.value
    with syncfree.sync_free():  # a fork that execs (a subprocess with preexec_fn) is the command's, not counted
        subprocess.run(["true"], preexec_fn=os.getpid, check=True)
    pid = os.fork()  # outside any watch: nobody's
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_a_block_names_the_pool_made_before_it_that_works_for_it():
    # A sync_free block whose work ran in a Pool made before it passed whatever the workers synced, with nothing
    # said: they run unwatched. It names them; a Pool made inside the block is followed, and not named so.
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        with syncfree.watch() as w:
            pool.apply(os.getpid)
        [worker] = multiprocessing.active_children()
        assert f"1 child process started before this block ({worker.name} (pid {worker.pid})) ran its tasks (a " \
               "Pool's or a ProcessPoolExecutor's workers): syncs it made are not counted (a pool made inside the " \
               "block, or the test, is followed)" in w.report.lost_children, w.report.notes
        with syncfree.watch() as w:  # running beside the block, given nothing of it
            os.getpid()
        assert f"1 child process started before this block ({worker.name} (pid {worker.pid})) was running during " \
               "it: syncs it made are not counted here (a Pool or persistent DataLoader workers made earlier: make " \
               "them in the block to count them)" in w.report.notes, w.report.notes
        assert not w.report.lost_children
    with syncfree.watch() as w:
        with context.Pool(1) as pool:
            pool.apply(os.getpid)
    assert not [n for n in w.report.notes if "before this block" in n], w.report.notes


def test_a_child_the_block_names_as_killed_is_left_for_multiprocessing_to_reap():
    # A child that ended without a report is named "ended without a report (killed)". Telling whether it still ran
    # reaped it (waitpid), behind multiprocessing's back: its join() then returned with exitcode None, and is_alive()
    # said True forever (its waitpid failed with ECHILD, which multiprocessing reads as "not started yet").
    context = multiprocessing.get_context("fork")
    started = context.Event()
    with syncfree.watch() as w:
        child = context.Process(target=_wait_to_be_killed, args=(started,), name="Doomed")
        child.start()
        assert started.wait(60)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert f"child process Doomed (pid {child.pid}) ended without a report (killed): its syncs are not counted" \
        in w.report.notes, w.report.notes
    child.join(60)
    assert (child.exitcode, child.is_alive()) == (-signal.SIGKILL, False)


def _wait_to_be_killed(started) -> None:
    started.set()
    time.sleep(60)


def test_a_sync_free_block_whose_child_left_no_report_is_not_judged():
    # Its syncs are missing from the count: a pass on "0 syncs" could pass a block whose child synced.
    context = multiprocessing.get_context("fork")
    started = context.Event()
    with pytest.raises(syncfree.NotJudged) as raised:
        with syncfree.sync_free():
            child = context.Process(target=_wait_to_be_killed, args=(started,), name="Doomed")
            child.start()
            assert started.wait(60)
            os.kill(child.pid, signal.SIGKILL)
            child.join(60)
    message = str(raised.value)
    assert message.startswith("could not judge the block: 0 syncs counted, but child process Doomed (pid "), message
    assert "ended without a report (killed): its syncs are not counted" in message, message
    assert raised.value.report.lost_children == [n for n in raised.value.report.notes if "Doomed" in n]
    # A child that ends as the program made it end leaves its report: the block is judged.
    with syncfree.sync_free() as w:
        child = context.Process(target=os.getpid, name="Quick")
        child.start()
        child.join(60)
    assert w.report.lost_children == [] and child.exitcode == 0


def test_a_process_hook_the_program_replaces_during_a_watch_stays_and_is_named():
    # BaseProcess.start and Popen.__init__ are shared, counted replacements: one the program put over ours stays (taking
    # it out would undo the program's), and the report says so; the originals are back once the program's goes.
    original_start, original_init = vars(multiprocessing.process.BaseProcess)["start"], vars(subprocess.Popen)["__init__"]

    def programs_start(self):
        return original_start(self)

    def programs_init(self, *args, **kwargs):
        return original_init(self, *args, **kwargs)

    try:
        with syncfree.watch() as w:
            multiprocessing.process.BaseProcess.start = programs_start
            subprocess.Popen.__init__ = programs_init
        assert vars(multiprocessing.process.BaseProcess)["start"] is programs_start
        assert vars(subprocess.Popen)["__init__"] is programs_init
        for name in ("multiprocessing.process.BaseProcess.start", "subprocess.Popen.__init__"):
            assert f"{name} was replaced during the run; syncfree left the replacement in place" in w.report.notes, \
                w.report.notes
    finally:
        multiprocessing.process.BaseProcess.start = original_start
        subprocess.Popen.__init__ = original_init


def _wait_for(running, release):
    running.set()
    release.wait(60)


def test_a_child_process_still_running_when_the_block_ends_is_named():
    context = multiprocessing.get_context("fork")
    running, release = context.Event(), context.Event()
    with syncfree.watch() as w:
        child = context.Process(target=_wait_for, args=(running, release), name="Server")
        child.start()
        assert running.wait(60)  # its target runs (a child still starting up ran none of the program's code)
    release.set()
    child.join()
    assert any(note.startswith(f"child process Server (pid {child.pid}) was still running when the block ended")
               for note in w.report.notes), w.report.notes


def test_a_child_process_a_watch_cannot_follow_is_named_not_silently_left_out():
    # A Process subclass with its own run() has no target to watch.
    with syncfree.watch() as w:
        child = _OwnRun(name="OwnRun")
        child.start()
        child.join()
    assert ("1 child process started here (OwnRun) ran unwatched: its syncs are not counted"
            in " ".join(w.report.notes)), w.report.notes
    with syncfree.watch() as quiet:  # none started: no note
        torch.ones(2, device="cuda").sum()
    assert not any("child process" in note for note in quiet.report.notes)


def test_torch_compiles_own_worker_processes_are_not_named():
    # inductor's compile workers (a ProcessPoolExecutor it starts) run none of the program's code.
    import sys

    from syncfree.capture.threads import _compile_worker

    def frame_in(filename: str, module: str):
        namespace = {"__name__": module, "sys": sys}
        exec(compile("def here():\n    return sys._getframe()\n", filename, "exec"), namespace)
        return namespace["here"]()

    assert _compile_worker(frame_in("/x/site-packages/torch/_inductor/async_compile.py", "torch._inductor.x"))
    assert not _compile_worker(frame_in("/x/site-packages/torch/multiprocessing/spawn.py", "torch.multiprocessing"))
    assert not _compile_worker(frame_in("/home/me/train.py", "__main__"))


def test_a_thread_pool_mapped_in_a_watch_counts_in_it():
    from concurrent.futures import ThreadPoolExecutor

    with pytest.raises(syncfree.SyncError, match="would synchronize 3 times, budget 0") as raised:
        with syncfree.sync_free():
            x = torch.ones(2, device="cuda")
            with ThreadPoolExecutor(2) as pool:
                assert list(pool.map(_item, [x, x, x])) == [2.0, 2.0, 2.0]
    report = raised.value.report
    assert sum(c for _, _, c, _ in _thread_sites(report)) == 3, report.text()
    assert all(t.startswith("ThreadPoolExecutor") for *_, t in _thread_sites(report))


def test_a_pool_made_before_the_watch_runs_its_tasks_for_it():
    """Per task: the pool's threads were started outside the watch (and serve other code
    after it), each task submitted from the block is the block's, for its duration."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from syncfree.capture import dispatch
    from syncfree.capture.predict import claims

    x = torch.ones(2, device="cpu")
    with ThreadPoolExecutor(2) as pool:
        pool.submit(threading.get_ident).result()  # a worker started before the watch
        with syncfree.watch() as w:
            y = torch.ones(2, device="cuda")
            assert pool.submit(_item, y).result() == 2.0
            assert list(pool.map(_item, [y, y])) == [2.0, 2.0]
        assert w.report.syncs == 3, w.report.text()
        assert sum(c for _, _, c, _ in _thread_sites(w.report)) == 3
        # After the watch the workers run as before: no routing, no predict session.
        assert pool.submit(dispatch.routed).result() is None
        assert pool.submit(lambda: list(claims._claims)).result() == []
        assert pool.submit(_item, x).result() == 2.0


def test_a_multiprocessing_thread_pools_tasks_count_for_the_block_that_hands_them():
    """multiprocessing.pool.ThreadPool (multiprocessing.dummy.Pool): its daemon threads, made before the block or in
    it, ran the block's tasks unrouted: in predict mode without the stand-ins (the task raised "Torch not compiled
    with CUDA enabled"), on a GPU as no watch's syncs, and the block passed. Each task is the block's, as a
    ThreadPoolExecutor's is; the class is as it was after the block."""
    from multiprocessing.pool import ThreadPool

    before = dict(vars(ThreadPool))
    y = torch.ones(2, device="cpu")
    with ThreadPool(2) as early:
        early.map(abs, [1, 2])  # its threads start before the block
        with syncfree.watch() as w:
            x = torch.ones(2, device="cuda")
            assert early.apply(_item, (x,)) == 2.0 and early.map(_item, [x, x]) == [2.0, 2.0]
            assert list(early.imap_unordered(_item, [x])) == [2.0] and early.starmap(_item, [(x,)]) == [2.0]
            with ThreadPool(1) as inside:
                assert inside.map(_item, [x]) == [2.0]
        assert w.report.syncs == 6, w.report.text()
        assert sum(c for _, _, c, _ in _thread_sites(w.report)) == 6
        assert early.apply(_item, (y,)) == 2.0  # after the block: as before, unrouted
    assert dict(vars(ThreadPool)) == before


def test_a_pool_started_in_a_watch_is_not_bound_to_it_afterwards():
    from concurrent.futures import ThreadPoolExecutor

    from syncfree.capture import dispatch
    from syncfree.capture.predict import claims

    pool = ThreadPoolExecutor(1)
    try:
        with syncfree.watch() as first:
            x = torch.ones(2, device="cuda")
            pool.submit(_item, x).result()  # the worker thread starts here
        assert first.report.syncs == 1
        assert pool.submit(dispatch.routed).result() is None
        assert pool.submit(lambda: list(claims._claims)).result() == []
        with syncfree.watch() as second:
            pool.submit(_item, x).result()
            pool.submit(_item, x).result()
        assert (first.report.syncs, second.report.syncs) == (1, 2)
    finally:
        pool.shutdown()


def test_a_budget_counts_the_threads_syncs(userlib):
    import threading

    with syncfree.sync_free(budget=2):  # the block's own sync and its thread's
        x = torch.ones(2, device="cuda")
        userlib.read(x)
        t = threading.Thread(target=_item, args=(x,))
        t.start()
        t.join()
    with pytest.raises(syncfree.SyncError, match="would synchronize 3 times, budget 2"):
        with syncfree.sync_free(budget=2):
            userlib.read(x)
            threads = [threading.Thread(target=_item, args=(x,)) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()


def test_a_thread_started_outside_any_watch_is_not_counted_into_one(userlib):
    """A thread started before the watch, and one that thread starts during it, belong to
    no watch: their syncs are noted, not counted."""
    import threading

    go = threading.Event()

    def worker():
        go.wait(10)
        torch.cuda.synchronize()  # predict's stand-in: a sync of this thread
        inner = threading.Thread(target=torch.cuda.synchronize, name="grandchild")
        inner.start()
        inner.join()

    t = threading.Thread(target=worker, name="prefetch")
    t.start()
    with syncfree.watch() as w:
        x = torch.ones(2, device="cuda")
        userlib.read(x)
        go.set()
        t.join()
    assert w.report.syncs == 1
    for name in ("prefetch", "grandchild"):
        assert any(f"1 sync in thread {name!r}, which no syncfree watch owned" in n
                   for n in w.report.notes), w.report.notes


def test_a_block_of_all_threads_predicts_the_threads_and_pool_tasks_it_starts():
    # all_threads=True left the threads its code started, and the tasks it handed a pool, without the stand-ins: a
    # block whose thread synced passed with 0 syncs, where the block that watches one thread failed.
    import concurrent.futures

    def step(x):
        x.sum().item()

    for all_threads in (False, True):
        with pytest.raises(syncfree.SyncError, match="would synchronize 1 time"):
            with syncfree.sync_free(all_threads=all_threads):
                x = torch.randn(4, device="cuda")
                worker = threading.Thread(target=step, args=(x,))
                worker.start()
                worker.join()
        with syncfree.watch(all_threads=all_threads) as w:
            x = torch.randn(4, device="cuda")
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                list(pool.map(step, [x, x, x]))
        assert w.report.syncs == 3, (all_threads, w.report.notes)
    # A thread of the user's already running runs without them: named, not passed over in silence.
    jobs = __import__("queue").Queue()
    consumer = threading.Thread(target=lambda: [step(x) for x in iter(jobs.get, None)], name="consumer")
    consumer.start()
    try:
        with syncfree.watch(all_threads=True) as w:
            pass
    finally:
        jobs.put(None)
        consumer.join()
    assert any(n.startswith("thread 'consumer', started before the block, runs without predict mode") for n in
               w.report.notes), w.report.notes


def _allowed_work(i):
    return torch.randn(4, device="cuda").sum().item()  # syncfree: allow


def test_a_childs_line_that_a_comment_allows_is_allowed_as_the_blocks_own(tmp_path):
    # A Pool worker's sync on a `# syncfree: allow` line counted towards the block's budget: it failed.
    with syncfree.sync_free() as w:
        # closed and joined, not terminated: a worker's SIGTERM handler that cannot run within the grace on a loaded
        # machine (tests/test_cli_run.py's pool tests) makes the block not judged, which is not this test's subject
        pool = multiprocessing.get_context("fork").Pool(2)
        pool.map(_allowed_work, range(2))
        pool.close()
        pool.join()
    assert (w.report.syncs, w.report.counted) == (2, 0), w.report.text()
    assert [(s.line, s.count) for s in w.report.allowed] == [(_allowed_work.__code__.co_firstlineno + 1, 2)]
    # syncfree run: its rows left them out, but its count of the allowed did not have them
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent("""\
        import multiprocessing, torch
        def work(i):
            return torch.randn(4, device="cuda").sum().item()  # syncfree: allow
        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2) as pool:
                pool.map(work, range(2))
        """))
    done = subprocess.run([sys.executable, "-m", "syncfree", "run", str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "0 syncs at 0 sites (predicted); 2 allowed" in done.stdout, done.stdout
    assert "would sync 2 times: all allowed or left out" in done.stdout, done.stdout


def test_a_daemon_thread_is_routed_but_runs_no_predict_session():
    """A daemon thread may outlive the watch: it would keep the stand-ins installed."""
    import threading

    from syncfree.capture import dispatch
    from syncfree.capture.predict import claims

    seen = []

    def look():
        seen.append((dispatch.routed(), [s for s in claims._claims
                                         if s._thread == threading.get_ident()]))
        torch.cuda.synchronize()  # a patched function: predicted without the thread's mode

    with syncfree.watch() as w:
        t = threading.Thread(target=look, daemon=True)
        t.start()
        t.join()
    [(routed, sessions)] = seen
    assert routed is not None and sessions == []
    assert w.report.syncs == 1
    # What the thread's CUDA work would sync is not predicted: the report says so (a library's daemon threads, a
    # Pool's handlers, are not named).
    [note] = [n for n in w.report.notes if "daemon thread" in n]
    assert note.startswith(f"daemon thread {t.name!r} ran without predict mode ("), note
    with syncfree.watch() as w:
        with multiprocessing.get_context("fork").Pool(1):
            pass
    assert not [n for n in w.report.notes if "daemon thread" in n], w.report.notes


def test_a_thread_whose_work_predict_mode_cannot_see_is_not_passed():
    # A thread started with _thread.start_new_thread ran unrouted and without the stand-ins: its sync was neither
    # counted nor named, and the block passed (syncfree run's report left it out too). It is routed now; in predict
    # mode it gets no session (as a daemon thread: it may outlive the block), and neither does a daemon thread of
    # the user's: what they synced is not known, so a sync_free block is not judged (it passed, with a note).
    import _thread
    import threading

    def work(x, done):
        x.sum().item()
        done.set()

    for start in (lambda x, done: _thread.start_new_thread(work, (x, done)),
                  lambda x, done: threading.Thread(target=work, args=(x, done), daemon=True).start()):
        with pytest.raises(syncfree.NotJudged) as raised:
            with syncfree.sync_free():
                done = threading.Event()
                start(torch.ones(2, device="cuda"), done)
                assert done.wait(30)
        assert "ran without predict mode" in str(raised.value), raised.value
    seen = []
    with syncfree.watch() as w:  # routed: a sync the thread makes outside predict mode's tensors is the watch's
        done = threading.Event()
        _thread.start_new_thread(lambda: (seen.append(syncfree.capture.dispatch.routed()), done.set()), ())
        assert done.wait(30)
    assert seen and seen[0] is not None
    with syncfree.watch() as w:  # a library's function: nothing of the user's ran there, no note
        done = threading.Event()
        _thread.start_new_thread(done.set, ())
        assert done.wait(30)
    assert not w.report.lost_children, w.report.notes


def test_a_thread_in_a_watch_inside_syncfree_run_runs_under_one_session(tmp_path, monkeypatch):
    """`syncfree run` predicts every program thread; a thread started inside a watch of
    the program is the watch's: one predict session (not the run's and the watch's), its
    sync counted once in the watch and once in the run (the watch's parent)."""
    script = tmp_path / "threaded.py"
    script.write_text(textwrap.dedent("""\
        import threading
        import torch, syncfree
        from syncfree.capture import dispatch
        from syncfree.capture.predict import claims
        import threaded_results as program

        sessions = program.sessions = {}
        reports = program.reports = []

        def work(x, name):
            mine = [s for s in claims._claims if s._thread == threading.get_ident()]
            sessions[name] = ([s.recorder for s in mine], dispatch.routed())
            x.sum().item()

        x = torch.ones(2, device="cuda")
        plain = threading.Thread(target=work, args=(x, "plain"))
        plain.start(); plain.join()
        with syncfree.watch() as w:
            inside = threading.Thread(target=work, args=(x, "inside"))
            inside.start(); inside.join()
        reports.append(w)
    """))
    import types

    program = types.ModuleType("threaded_results")  # what the program leaves for the test
    monkeypatch.setitem(sys.modules, "threaded_results", program)
    run = syncfree.run_script(str(script))
    assert run.exit_code == 0, run.error
    [w] = program.reports
    (plain_sessions, plain_routed) = program.sessions["plain"]
    (inside_sessions, inside_routed) = program.sessions["inside"]
    assert len(plain_sessions) == 1 and plain_routed is None  # the run's, as before
    assert len(inside_sessions) == 1 and inside_routed is inside_sessions[0]  # the watch's
    assert plain_sessions[0] is not inside_sessions[0]
    assert w.report.syncs == 1, w.report.text()
    assert run.report.syncs == 2, run.report.text()  # the plain thread's, and the watch's once
    line = script.read_text().splitlines().index("    x.sum().item()") + 1
    assert {s.line for s in run.report.sites} == {line}, run.report.text()
    assert sum(s.count for s in run.report.sites) == 2, run.report.text()


def test_watches_in_two_threads_count_their_own_from_the_first_use(tmp_path):
    # A fresh interpreter: the first watches of the process import predict mode at once
    # (they raced on the import), and each thread's code runs on the stand-ins.
    script = tmp_path / "threads.py"
    script.write_text(textwrap.dedent("""\
        import threading
        import torch, syncfree
        barrier = threading.Barrier(2)
        counts, errors = {}, []

        def work(n):
            try:
                barrier.wait()
                with syncfree.watch() as w:
                    y = torch.ones(3, device="cuda")
                    for _ in range(n):
                        y.sum().item()
                counts[n] = (w.report.syncs, [s.count for s in w.report.sites])
            except BaseException as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=work, args=(n,)) for n in (30, 60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(sorted(counts.items()), errors)
    """))
    env = dict(os.environ, PYTHONPATH=str(Path(syncfree.__file__).parent.parent))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.stdout.strip() == "[(30, (30, [30])), (60, (60, [60]))] []", done.stdout + done.stderr


def test_a_watch_closed_from_another_thread_leaves_its_thread_as_it_was():
    """Predict mode's function mode is on the opening thread's stack, which another thread cannot pop: a watch
    closed from another thread left it there, and every later watch of the opening thread counted each sync twice.
    It now predicts nothing once its watch is closed, and the thread's next session takes it off."""
    import threading

    from torch.overrides import _get_current_function_mode_stack

    before = list(_get_current_function_mode_stack())
    hook_before = sys.unraisablehook
    got = []
    handler_before = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        program_handler = signal.getsignal(signal.SIGINT)
        w = syncfree.watch()
        w.__enter__()
        torch.ones(2, device="cuda").sum().item()
        closer = threading.Thread(target=w.__exit__, args=(None, None, None))
        closer.start()
        closer.join(timeout=60)
        assert w.report.syncs == 1, w.report.text()
        assert not torch.cuda.is_available()  # the stand-ins are gone, for this thread too
        assert torch.ones(2).sum().item() == 2.0
        # Ctrl-C's handler (only the main thread can put it back): it reaches the program's handler, which is back
        assert sys.unraisablehook is hook_before
        signal.raise_signal(signal.SIGINT)
        assert got == [signal.SIGINT] and signal.getsignal(signal.SIGINT) is program_handler
        with syncfree.watch() as again:
            torch.ones(2, device="cuda").sum().item()
        assert again.report.syncs == 1, again.report.text()
        assert list(_get_current_function_mode_stack()) == before
        assert signal.getsignal(signal.SIGINT) is program_handler
    finally:
        signal.signal(signal.SIGINT, handler_before)


def test_a_threads_own_watch_inside_a_process_wide_recorder(userlib):
    """A %%syncfree cell (or `syncfree run`) owns the process; a thread with a watch of its
    own counts its syncs there, and the cell says so."""
    import threading

    from syncfree.capture import SyncRecorder
    from syncfree.capture.sites import UserFiles

    thread_reports = []

    def worker(x):
        with syncfree.watch() as w:
            userlib.read(x)
            userlib.read(x)
        thread_reports.append(w.report)

    def no_watch():
        torch.cuda.synchronize()

    cell = SyncRecorder("predict", cell_files=UserFiles(()))
    with cell:
        x = torch.ones(2, device="cuda")
        userlib.read(x)
        for target, args, name in ((worker, (x,), "own-watch"), (no_watch, (), "loader")):
            t = threading.Thread(target=target, args=args, name=name)
            t.start()
            t.join()
    [report] = thread_reports
    assert report.syncs == 2 and report.mode == "predict"
    assert cell.syncs == 2  # its own line, and the loader thread's synchronize
    assert {s.thread for s in cell.sites} == {None, "loader"}
    assert any("2 syncs in thread 'own-watch' went to a syncfree.watch()" in n
               for n in cell.notes), cell.notes


def test_a_watch_never_ended_says_so_at_exit(tmp_path):
    script = tmp_path / "unended.py"
    script.write_text("import torch, syncfree\n"
                      "w = syncfree.watch()\n"
                      "w.__enter__()\n"
                      "torch.ones(2, device='cuda').sum().item()\n")
    env = dict(os.environ, PYTHONPATH=str(Path(syncfree.__file__).parent.parent))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0
    assert done.stderr.strip().splitlines()[-1] == (
        f"syncfree: the watch of {script}:3 never ended (the program exited inside it); "
        "1 sync seen in it were not reported"), done.stderr


def test_a_doctests_examples_are_your_code():
    """A doctest's example ("<doctest mod.f[1]>", compiled from its docstring) is the line a
    sync is attributed to, as a notebook cell's is: `pytest --syncfree --doctest-modules`
    lists it (it was library code, its syncs in no row)."""
    import doctest

    def f():
        """
        >>> x = torch.ones(2, device="cuda")
        >>> _ = x.sum().item()
        """

    import builtins

    had, underscore = hasattr(builtins, "_"), getattr(builtins, "_", None)
    try:
        with syncfree.watch() as w:
            doctest.run_docstring_examples(f, {"torch": torch}, name="f")
    finally:  # doctest leaves builtins._ = None, and IPython then stops setting a shell's `_` (test_magic.py)
        if not had:
            vars(builtins).pop("_", None)
        else:
            builtins._ = underscore
    assert [(s.file, s.line, s.kind, s.count) for s in w.report.sites] == [("<doctest f[1]>", 1, "item", 1)]


def test_followers_of_children_put_back_what_they_replaced_in_any_order():
    # A watched test's follower stands in front of syncfree run's while the test runs: its stop put the real os.fork
    # back, and the run's later children went unfollowed. It puts back the run's; and where the run's stopped first,
    # the real one, not a stopped follower's.
    from syncfree.processes import ForkedChildren, _real_fork

    for first in ("inner", "outer"):
        outer = ForkedChildren(lambda: None)
        outer.start()
        inner = ForkedChildren(lambda: None)
        inner.start()
        try:
            if first == "inner":
                inner.stop()
                assert os.fork == outer._fork
            else:
                outer.stop()
                inner.stop()
        finally:
            inner.stop()
            outer.stop()
        assert os.fork == _real_fork


def _cuda_ones():
    """A CUDA tensor for the work a test hands its threads (made under a watch: a stand-in in predict mode)."""
    with syncfree.watch():
        return torch.ones(2, device="cuda")


def _late_item(gate, x):
    gate.wait(30)
    return x.sum().item()  # after the block's end


def test_an_asyncio_task_still_pending_when_the_block_ends_is_not_passed():
    # A task the block creates copies its context: its syncs are the block's while the block runs, and no watch's
    # after. One still pending at the block's end passed with nothing said (threads were named); it is named now and
    # the block not judged. One the block awaits is counted; a task made before the block is not the block's.
    import asyncio

    async def later(x, gate):
        await gate.wait()
        return x.sum().item()

    async def main():
        with syncfree.watch():
            x = torch.ones(2, device="cuda")
        gate = asyncio.Event()
        earlier = asyncio.create_task(later(x, gate))
        try:
            with pytest.raises(syncfree.NotJudged) as raised:
                with syncfree.sync_free():
                    task = asyncio.create_task(later(x, gate), name="saver")
                    await asyncio.sleep(0)
            assert "asyncio task 'saver' (later) was still pending when the block ended: the syncs it makes after " \
                   "that are not counted (await it before the block ends)" in str(raised.value), raised.value
            open_gate = asyncio.Event()
            open_gate.set()
            with syncfree.watch() as awaited:
                assert await asyncio.create_task(later(x, open_gate)) == 2.0
            assert awaited.report.syncs == 1 and awaited.report.judged and not awaited.report.lost_children, \
                awaited.report.notes
            gate.set()
            await task
        finally:
            gate.set()
            await earlier

    asyncio.run(main())


def test_a_thread_or_task_whose_target_is_a_partial_is_the_users():
    # A thread whose target is a functools.partial (and asyncio.to_thread's task, a partial of Context.run) was taken
    # for a library's: a daemon one ran without predict mode and a block passed it with 0 syncs, unnamed; one still
    # running at the block's end was not named either.
    import asyncio
    import functools

    gate = threading.Event()
    x = _cuda_ones()
    gate.set()
    with pytest.raises(syncfree.NotJudged) as raised:
        with syncfree.sync_free():
            daemon = threading.Thread(target=functools.partial(_late_item, gate, x), daemon=True)
            daemon.start()
            daemon.join()
    assert "daemon thread 'Thread-" in str(raised.value) and "ran without predict mode" in str(raised.value), \
        raised.value
    late = threading.Event()
    started = []
    try:
        with pytest.raises(syncfree.NotJudged) as raised:
            with syncfree.sync_free():
                started.append(threading.Thread(target=functools.partial(_late_item, late, x), name="saver"))
                started[-1].start()
        assert "thread 'saver' was still running when the block ended" in str(raised.value), raised.value

        async def main():
            try:
                with syncfree.sync_free():
                    started.append(asyncio.ensure_future(asyncio.to_thread(_late_item, late, x)))
                    await asyncio.sleep(0)
            finally:
                late.set()  # after the block's verdict: asyncio.run's end waits for the thread

        with pytest.raises(syncfree.NotJudged) as raised:
            asyncio.run(main())
        assert "1 task handed to a thread pool was still running or queued when the block ended" \
            in str(raised.value), raised.value
    finally:
        late.set()
        for thread in started:
            if isinstance(thread, threading.Thread):
                thread.join(30)


def test_a_thread_or_pool_task_still_running_when_the_block_ends_is_not_passed():
    # A background thread (a logger, a checkpoint writer) or a task handed to a thread pool, started in the block and
    # not waited for: its syncs after the block's end were no watch's, and sync_free passed the block with nothing
    # said. Each is named, and the block not judged; one the block waits for, and a library's thread, as before.
    from concurrent.futures import ThreadPoolExecutor
    from multiprocessing.pool import ThreadPool

    gate = threading.Event()
    x = _cuda_ones()
    started = []
    try:
        with pytest.raises(syncfree.NotJudged) as raised:
            with syncfree.sync_free():
                started.append(threading.Thread(target=_late_item, args=(gate, x), name="saver"))
                started[-1].start()
        assert "thread 'saver' was still running when the block ended: the syncs it makes after that are not " \
               "counted (join it before the block ends)" in str(raised.value), raised.value
        with ThreadPoolExecutor(1) as pool, ThreadPool(1) as threads:
            with pytest.raises(syncfree.NotJudged) as raised:
                with syncfree.sync_free():
                    pool.submit(_late_item, gate, x)
                    threads.apply_async(_late_item, (gate, x))
            assert "2 tasks handed to a thread pool were still running or queued when the block ended" \
                   in str(raised.value), raised.value
            gate.set()
            with syncfree.watch() as waited:  # waited for: counted, nothing named
                assert pool.submit(_late_item, gate, x).result(30) == 2.0
                assert threads.apply_async(_late_item, (gate, x)).get(30) == 2.0
                thread = threading.Thread(target=_late_item, args=(gate, x))
                thread.start()
                thread.join()
            assert waited.report.syncs == 3 and waited.report.judged and not waited.report.lost_children, \
                waited.report.notes
    finally:
        gate.set()
        for thread in started:
            thread.join(30)
    with syncfree.sync_free() as clean:  # a library's thread left running (a timer of the standard library's)
        timer = threading.Timer(30, print)
        timer.start()
    timer.cancel()
    assert clean.report.judged and not clean.report.lost_children, clean.report.notes


def test_error_mode_takes_no_budget():
    # mode="error" stops at the first sync: budget=1 was ignored, and the block raised at its one allowed sync
    with pytest.raises(ValueError, match=r"mode='error' stops at the first sync, so budget=1 cannot allow any"):
        syncfree.sync_free(budget=1, mode="error")
    assert syncfree.sync_free(budget=0, mode="error").budget == 0


def test_a_sync_inside_torchs_grad_scaler_has_the_rule_a_gpu_run_gives():
    # scaler.get_scale() reads the scale with .item() inside torch: a GPU run names the line a library call (SF700),
    # predict mode named it SF101 for the .item() it saw, so --select/--ignore and baselines differed between them
    with syncfree.watch() as w:
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(torch.ones((), device="cuda", requires_grad=True) * 2)
        scale = scaler.get_scale()
    assert scale == 65536.0
    assert [(s.rule, s.count) for s in w.report.sites] == [("SF700", 1)], w.report.text()


def test_entering_a_running_watch_again_leaves_the_first_block_judged():
    # `with w:` inside `with w:` (or a second thread entering a shared sync_free()): the second entry's RuntimeError
    # tore down the first one's recorder, whose block then ended with no report and no verdict (a sync passed)
    w = syncfree.sync_free()
    with pytest.raises(syncfree.SyncError):
        with w:
            torch.ones(2, device="cuda").sum().item()
            with pytest.raises(RuntimeError, match="already running"):
                with w:
                    pass
    assert w.report is not None and w.report.syncs == 1


def test_a_block_around_a_yield_closed_early_is_judged():
    # The consumer's g.close() (or a break) raised GeneratorExit at the yield: the block's syncs passed, no word
    def batches():
        with syncfree.sync_free():
            x = torch.ones(4, device="cuda")
            for i in range(10):
                x.sum().item()
                yield i

    g = batches()
    next(g), next(g)
    with pytest.raises(syncfree.SyncError, match="would synchronize 2 times"):
        g.close()


def test_a_watch_of_all_threads_predicts_the_threads_a_library_runs_its_code_in():
    # What %%syncfree cells do (capture/threads.py _watching_cell): a Timer's function, asyncio.run's coroutine and a
    # map's function given to a thread ran without the stand-ins (their runner is a library's): 0 syncs. And a pool task
    # still running at the end was neither counted nor named.
    import asyncio
    import concurrent.futures

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    with syncfree.watch(all_threads=True) as w:
        x = torch.ones(4, device="cuda")
        timer = threading.Timer(0.01, lambda: x.sum().item())
        timer.start(), timer.join()

        async def main():
            return x.sum().item()

        for thread in (threading.Thread(target=asyncio.run, args=(main(),)),
                       threading.Thread(target=list, args=(map(lambda i: x[i].item(), range(3)),))):
            thread.start(), thread.join()
        asyncio.run_coroutine_threadsafe(main(), loop).result(10)  # a loop thread running before the block
    loop.call_soon_threadsafe(loop.stop)
    assert w.report.syncs == 6, w.report.text()
    gate = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with syncfree.watch(all_threads=True) as w:
            y = torch.ones(2, device="cuda")
            future = pool.submit(lambda: (gate.wait(10), y.sum().item()))
        gate.set(), future.result()
    assert any("1 task handed to a thread pool was still running or queued" in note for note in w.report.notes), \
        w.report.notes


def test_a_decorated_plain_callable_that_returns_a_coroutine_or_generator_watches_its_body():
    # An object's `async def __call__`, or a plain decorator over an async function: the call only made the coroutine,
    # its watch judged an empty body and the sync after it passed
    import asyncio

    class Step:
        async def __call__(self):
            return torch.ones(4, device="cuda").sum().item()

    with pytest.raises(syncfree.SyncError, match="would synchronize 1 time"):
        asyncio.run(syncfree.sync_free()(Step())())

    def items():
        yield torch.ones(2, device="cuda").sum().item()

    with pytest.raises(syncfree.SyncError, match="would synchronize 1 time"):
        list(syncfree.sync_free()(lambda: items())())


def test_a_decorated_generator_consumed_in_another_thread_counts_its_syncs_there():
    # Started in this thread, consumed by a prefetching thread: the body's syncs there ran without the stand-ins
    # (0 syncs, passed), where `syncfree run` counted them
    @syncfree.sync_free()
    def batches():
        x = torch.ones(4, device="cuda")
        yield 0
        for i in range(1, 4):
            x.sum().item()
            yield i

    g = batches()
    next(g)
    raised = []

    def prefetch():
        try:
            list(g)
        except syncfree.SyncError as error:
            raised.append(str(error).splitlines()[0])

    thread = threading.Thread(target=prefetch)
    thread.start(), thread.join()
    assert raised == ["would synchronize 3 times, budget 0"]


def test_an_unwatched_tasks_syncs_are_not_counted_into_a_watched_task_beside_it():
    # Predict mode gave a sync no watch owned to the thread's first session: another task's syncs failed a block
    # that made none (syncfree run put them on the other task's line)
    import asyncio

    async def other(started, done):
        await started.wait()  # the block has begun
        x = torch.ones(4, device="cuda")
        for _ in range(3):
            x.sum().item()
            await asyncio.sleep(0)
        done.set()

    @syncfree.sync_free()
    async def clean(started, done):
        y = torch.ones(4, device="cuda")
        started.set()
        await done.wait()  # the other task syncs meanwhile
        y = y * 2

    async def main():
        started, done = asyncio.Event(), asyncio.Event()
        await asyncio.gather(clean(started, done), other(started, done))

    asyncio.run(main())
    assert clean.syncfree_report.syncs == 0
    assert any("3 syncs in thread" in note and "no syncfree watch owned" in note
               for note in clean.syncfree_report.notes), clean.syncfree_report.notes


def test_a_decorated_generator_left_open_at_exit_is_named_without_a_traceback(tmp_path):
    # Closed as Python tore its modules down, its watch's undoing printed "Exception ignored ... sys.meta_path is None"
    script = tmp_path / "left_open.py"
    script.write_text(textwrap.dedent("""\
        import torch, syncfree

        @syncfree.sync_free()
        def batches():
            x = torch.ones(2, device="cuda")
            while True:
                x.sum().item()
                yield 1

        g = batches(); next(g); next(g)
        """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python_helper")})
    assert done.returncode == 0, done.stderr
    assert "syncfree: the watch of batches() never ended (the program exited inside it); 2 syncs" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
