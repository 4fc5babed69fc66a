"""The pytest plugin through pytester, in a subprocess as a user's pytest would load it
(the pytest11 entry point of the installed package), on the CPU: predict mode."""

import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest_plugins = ["pytester"]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="predict-mode tests (no CUDA)")

EXAMPLE = Path(__file__).parent.parent / "examples" / "pytest_suite"


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_the_plugin_is_loaded_from_its_entry_point(pytester):
    result = run(pytester, "--help")
    result.stdout.fnmatch_lines(["*--syncfree*watch every test*"])
    result = run(pytester, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.sync_free(budget=0, mode=None)*"])


def test_a_plugin_named_with_p_or_by_a_conftest_where_its_entry_point_loads_it_too(pytester):
    # The entry point's load of a module -p had registered under its own name failed: pytest exited 3 with
    # "Plugin already registered under a different name", a usage the docs once gave; a conftest's pytest_plugins
    # (loaded after the entry points) failed the same way, exit 1.
    pytester.makepyfile(test_a="""
        import pytest, torch

        @pytest.mark.sync_free
        def test_sync():
            torch.ones(2, device="cuda").sum().item()
        """)
    result = run(pytester, "-p", "syncfree.pytest_plugin", "-p", "syncfree.pytest_marker")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["FAILED test_a.py::test_sync - syncfree: would synchronize 1 time, budget 0"])
    pytester.makeconftest('pytest_plugins = ["syncfree.pytest_plugin", "syncfree.pytest_marker"]')
    result = run(pytester)
    result.assert_outcomes(failed=1)


def test_example_suite(pytester):
    for name in ("model.py", "test_model.py", "conftest.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    result = run(pytester)
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_count_positive_is_sync_free _*",
        "syncfree: would synchronize 1 time, budget 0",
        "  model.py:13:*: SF101 `.item()` waits for the GPU (predicted) ×1 (called from test_model.py:27)",
    ])
    result.stdout.fnmatch_lines(["  test_model.py:46:*: SF201 Printing a CUDA tensor waits for the GPU (predicted) ×1"])
    # the short summary carries the message, not the test id twice
    result.stdout.fnmatch_lines(["FAILED test_model.py::test_print_is_a_sync - syncfree: would synchronize*"])
    # the failure is the test's finding, not a traceback into syncfree
    assert "pytest_plugin.py" not in result.stdout.str()


def test_a_clean_marked_test_passes_and_fixtures_make_cuda_tensors(pytester):
    pytester.makepyfile(test_clean="""
        import pytest, torch

        @pytest.fixture
        def w():
            t = torch.randn(4, 4, device="cuda")
            assert t.is_cuda
            assert t.sum().item() != 1e9  # a fixture's sync is not the test's
            yield t
            print(t)  # nor is a tear-down's

        @pytest.mark.sync_free
        def test_matmul(w):
            assert (w @ w).is_cuda

        @pytest.mark.sync_free(mode="error")
        def test_matmul_error_mode(w):
            assert (w @ w).is_cuda

        def test_fixture_watch(syncfree, w):
            with syncfree.watch() as block:
                w.max().item()
            assert block.report.syncs == 1, block.report.text()
            assert not any("nested" in note for note in block.report.notes), block.report.notes
    """)
    run(pytester, "--syncfree").assert_outcomes(passed=3)


def test_budget_and_mode(pytester):
    pytester.makepyfile(test_budget="""
        import pytest, torch

        @pytest.mark.sync_free(budget=2)
        def test_two_reads_within_budget():
            x = torch.ones(2, device="cuda")
            x.sum().item(); x.max().item()

        @pytest.mark.sync_free(budget=1)
        def test_two_reads_over_budget():
            x = torch.ones(2, device="cuda")
            x.sum().item()
            x.max().item()

        @pytest.mark.sync_free(mode="error")
        def test_error_mode_stops_at_the_first():
            x = torch.ones(2, device="cuda")
            x.sum().item()
            raise AssertionError("not reached")
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*would synchronize 2 times, budget 1*"])
    # Error mode's stop is the verdict: its traceback ends at the test's line (it went on into predict mode's hook and
    # the recorder), and it is neither "a failure on the stand-ins" nor a test "also" over its budget.
    result.stdout.fnmatch_lines(["    def test_error_mode_stops_at_the_first():", "*x = torch.ones(2*",
                                 ">       x.sum().item()",
                                 "E       RuntimeError: called a synchronizing CUDA operation*",
                                 "test_budget.py:17: RuntimeError"])
    out = result.stdout.str()
    assert "not reached" not in out and "syncfree/capture" not in out, out
    assert "ran in predict mode, CPU tensors" not in out and "also synchronized over its budget" not in out, out
    assert "failed in predict mode on the CPU" not in out, out


def test_a_test_interrupted_by_ctrl_c_keeps_its_syncs_in_the_summary(pytester):
    """pytest makes no report of the test Ctrl-C stops: its syncs until then were missing from --syncfree's summary
    with nothing said."""
    pytester.makepyfile(test_stopped="""
        import torch

        def test_stopped():
            x = torch.ones(2, device="cuda")
            x.sum().item()
            x.max().item()
            raise KeyboardInterrupt  # as Ctrl-C here
    """)
    result = run(pytester, "--syncfree")
    result.stdout.fnmatch_lines(["2 syncs predicted in 1 of 1 watched test*",
                                 "  test_stopped.py:5:5: SF101 * ×1  ?test_stopped.py::test_stopped (interrupted)?",
                                 "  test_stopped.py:6:5: SF101 * ×1  ?test_stopped.py::test_stopped (interrupted)?"])


def test_a_marked_test_whose_cuda_work_its_dataloader_workers_do_is_judged(pytester):
    """The test's own process collates host floats; its DataLoader's workers read them from CUDA tensors. It failed
    as "could not judge the block: no CUDA tensor was seen", within its budget too, where the workers' syncs were
    counted: they are CUDA work."""
    pytester.makepyfile(test_loader="""
        import pytest, torch

        class Reading(torch.utils.data.Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, index):
                return torch.ones(3, device="cuda").sum().item()

        @pytest.mark.sync_free(budget=4)
        def test_within():
            list(torch.utils.data.DataLoader(Reading(), batch_size=2, num_workers=2))

        @pytest.mark.sync_free(budget=3)
        def test_over():
            list(torch.utils.data.DataLoader(Reading(), batch_size=2, num_workers=2))
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_over*", "syncfree: would synchronize 4 times, budget 3*"])
    assert "could not" not in result.stdout.str()


def test_a_marked_tests_threads_and_pool_tasks_count_against_it(pytester):
    """Work a watched test starts in a thread or a thread pool is the test's: it ran
    without the predict mode (not predicted at all) and the test passed."""
    pytester.makepyfile(test_threads="""
        import threading
        from concurrent.futures import ThreadPoolExecutor
        import pytest, torch

        def read(x):
            return x.sum().item()

        @pytest.mark.sync_free
        def test_thread():
            x = torch.ones(2, device="cuda")
            t = threading.Thread(target=read, args=(x,), name="reader")
            t.start()
            t.join()

        @pytest.mark.sync_free(budget=1)
        def test_pool():
            x = torch.ones(2, device="cuda")
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(read, [x, x]))

        def test_fixture_watch(syncfree):
            with syncfree.watch() as block:
                x = torch.ones(2, device="cuda")
                t = threading.Thread(target=read, args=(x,))
                t.start()
                t.join()
            assert block.report.syncs == 1, block.report.text()

        def test_unmarked():
            t = threading.Thread(target=read, args=(torch.ones(2),))
            t.start()
            t.join()
    """)
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*_ test_thread _*", "syncfree: would synchronize 1 time, budget 0",
                                 "  test_threads.py:6:*: SF101 `.item()` waits for the GPU (predicted) ×1, in thread reader"])
    result.stdout.fnmatch_lines(["*_ test_pool _*", "syncfree: would synchronize 2 times, budget 1"])


def test_an_async_test_under_pytest_asyncio_counts_its_syncs(pytester):
    """pytest-asyncio runs an ``async def`` test in a copy of the context made before the test's watch opened:
    its syncs were nobody's, and a marked test that syncs passed ("0 syncs in 0 of 1 watched tests")."""
    pytest.importorskip("pytest_asyncio", reason="pytest-asyncio (the Makefile's DEV_PINS) is not installed")
    pytester.makepyfile(test_async="""
        import asyncio
        import pytest, torch

        def read(x):
            return x.sum().item()

        @pytest.mark.asyncio
        @pytest.mark.sync_free
        async def test_item():
            x = torch.ones(2, device="cuda")
            await asyncio.sleep(0)
            read(x)

        @pytest.mark.asyncio
        @pytest.mark.sync_free
        async def test_executor():
            x = torch.ones(2, device="cuda")
            await asyncio.get_running_loop().run_in_executor(None, read, x)
            await asyncio.to_thread(read, x)

        @pytest.mark.asyncio
        @pytest.mark.sync_free
        async def test_clean():
            x = torch.ones(2, device="cuda")
            await asyncio.sleep(0)
            assert (x + 1).is_cuda
    """)
    result = run(pytester, "--syncfree", "-o", "asyncio_default_fixture_loop_scope=function")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*_ test_item _*", "syncfree: would synchronize 1 time, budget 0",
                                 "  test_async.py:5:*: SF101 `.item()` waits for the GPU (predicted) ×1 (called from test_async.py:12)"])
    result.stdout.fnmatch_lines(["*_ test_executor _*", "syncfree: would synchronize 2 times, budget 0"])
    result.stdout.fnmatch_lines(["3 syncs predicted in 2 of 3 watched tests*"])


def test_a_marked_test_mixing_the_standins_with_a_device_chosen_at_import_is_not_judged(pytester):
    """A helper's module-level DEVICE (asked at collection, before predict mode: "cpu" here, "cuda" on a GPU) beside
    the test's own CUDA tensor: the helper's mask stayed on the CPU, its syncs (a mask index, a count) were not
    predicted, and the marked test passed with 0 syncs where a GPU syncs twice. A module-level GradScaler("cuda")
    disabled itself then: a test that steps it passed, where a GPU's step syncs on its overflow check; one made
    with enabled=False, or not stepped, changes nothing."""
    pytester.makepyfile(helpers="""
        import torch
        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

        def ones_mask(n):
            return torch.ones(n, device=DEVICE, dtype=torch.bool)
        """)
    pytester.makepyfile(test_mixed="""
        import pytest, torch
        from helpers import ones_mask

        pytestmark = pytest.mark.skipif(not torch.cuda.is_available() and False, reason="never")

        @pytest.mark.sync_free
        def test_mixed():
            x = torch.randn(8, device="cuda")
            keep = ones_mask(8)
            y = x[keep]
            n = int(keep.sum())

        @pytest.mark.sync_free
        def test_cuda_only():
            assert (torch.ones(4, device="cuda") * 2).is_cuda
        """)
    pytester.makepyfile(test_scaler="""
        import pytest, torch

        scaler = torch.amp.GradScaler("cuda")
        off = torch.amp.GradScaler("cuda", enabled=False)

        def step(scaler):
            model = torch.nn.Linear(4, 4, device="cuda")
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler.scale(model(torch.randn(2, 4, device="cuda")).sum()).backward()
            scaler.step(opt)
            scaler.update()

        @pytest.mark.sync_free
        def test_scaled():
            step(scaler)

        @pytest.mark.sync_free
        def test_unscaled():
            step(off)
            scaler.scale(torch.ones((), device="cuda"))
        """)
    # A flag or a function chosen by the answer at import, read by the test (no CPU tensor made), and an answer a
    # helper kept from an earlier, unwatched test: the CPU's way ran, where a GPU syncs.
    pytester.makepyfile(cached="""
        import functools, torch

        @functools.lru_cache(maxsize=None)
        def on_gpu():
            return torch.cuda.is_available()

        def to_host(t):
            return t.cpu() if on_gpu() else t
        """)
    pytester.makepyfile(test_flags="""
        import pytest, torch
        from cached import to_host

        SYNC = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

        def test_a_plain():
            assert to_host(torch.ones(2)).sum() == 2

        @pytest.mark.sync_free
        def test_b_gated():
            torch.ones(2, device="cuda").add_(1)
            SYNC()

        @pytest.mark.sync_free
        def test_c_cached():
            to_host(torch.ones(2, device="cuda"))

        @pytest.mark.sync_free
        def test_d_cuda_only():
            assert (torch.ones(2, device="cuda") + 1).is_cuda
        """)
    result = run(pytester, "-W", "ignore::UserWarning", "-p", "no:randomly")
    result.assert_outcomes(passed=4, failed=4)
    result.stdout.fnmatch_lines(["*_ test_b_gated _*", "syncfree: could not judge the block: 0 syncs counted, but "
                                 "torch.cuda.is_available() answered False at test_flags.py:4 as it was imported*"])
    result.stdout.fnmatch_lines(["*_ test_c_cached _*", "syncfree: could not judge the block: 0 syncs counted, but "
                                 "torch.cuda.is_available() answered False at cached.py:5 in an earlier test*"])
    result.stdout.fnmatch_lines(["*_ test_mixed _*", "syncfree: could not judge the block: 0 syncs counted, but "
                                 "torch.cuda.is_available() answered False at helpers.py:2 as it was imported*"])
    result.stdout.fnmatch_lines(["*_ test_scaled _*", "syncfree: could not judge the block: 0 syncs counted, but the "
                                 'GradScaler("cuda") made at test_scaler.py:3 as it was imported, before predict mode, '
                                 "disabled itself (no CUDA here)*"])


def test_a_marked_test_over_cpu_tensors_only_is_not_judged(pytester):
    """A device chosen at import, before the stand-ins, gives CPU tensors here and CUDA ones on a GPU: the test
    passed here ("0 syncs") and failed there. It now fails as not judged; chosen in the test or a fixture, the
    device is the stand-ins' CUDA."""
    pytester.makepyfile(test_device="""
        import pytest, torch

        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
        X = torch.ones(4, device=DEVICE)

        @pytest.fixture
        def device():
            return "cuda" if torch.cuda.is_available() else "cpu"

        @pytest.mark.sync_free
        def test_module_level_device():
            assert (X * 2).sum().item() == 8.0

        @pytest.mark.sync_free
        def test_fixture_device(device):
            assert (torch.ones(4, device=device) * 2).is_cuda

        @pytest.mark.sync_free
        def test_no_tensor_work():
            assert sum(range(4)) == 6

        def test_unmarked_module_level_device():
            assert X.sum().item() == 4.0
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["  2 tests could not be judged: no CUDA tensor was seen*",
                                 "    test_device.py::test_module_level_device",
                                 "    test_device.py::test_unmarked_module_level_device"])
    result.stdout.fnmatch_lines(["*_ test_module_level_device _*",
                                 "syncfree: could not judge the block: no CUDA tensor was seen*",
                                 "FAILED test_device.py::test_module_level_device - syncfree: could not judge*"])


def test_unmarked_tests_are_untouched(pytester):
    pytester.makepyfile(test_plain="""
        import torch

        def test_plain():
            assert not torch.cuda.is_available()
            torch.ones(2).sum().item()
    """)
    run(pytester).assert_outcomes(passed=1)


def test_syncfree_option_ranks_every_test(pytester):
    pytester.makepyfile(test_all="""
        import torch

        def test_many():
            x = torch.ones(2, device="cuda")
            for _ in range(5):
                x.sum().item()

        def test_one():
            x = torch.ones(2, device="cuda")
            bool(x.any())

        def test_none():
            x = torch.ones(2, device="cuda")
            (x + 1).sum()
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "*= syncfree =*",
        "6 syncs predicted in 2 of 3 watched tests (on the CPU: no CUDA device)",
        "  test_all.py:6:*: SF101 `.item()` waits for the GPU (predicted) ×5  [[]test_all.py::test_many[]]",
        "  test_all.py:10:*: SF103 A Python condition on a CUDA tensor waits for the GPU (predicted) ×1  [[]test_all.py::test_one[]]",
    ])


def test_bad_marker_arguments_are_a_usage_error(pytester):
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.sync_free(budjet=1)
        def test_x():
            pass
    """)
    result = run(pytester)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*sync_free takes budget=, budget_ms= and mode=, not budjet*"])


@pytest.mark.parametrize("arguments, words", [
    ('mode="turbo"', "(mode=...) must be 'warn', 'error' or 'predict', not 'turbo'"),
    ("budget=-1", "(budget=...) must be a whole number >= 0, not -1"),
    ('"two"', "(budget=...) must be a whole number >= 0, not 'two'"),
    # error mode stops at the first sync: the budget was ignored, and the test failed at its first allowed sync
    ('budget=1, mode="error"', "(mode='error') stops at the first sync, so budget=1 cannot allow any*"),
])
def test_bad_marker_values_are_a_usage_error_naming_the_test(pytester, arguments, words):
    """mode="turbo" reached the engine's choice inside a hook: 59 INTERNALERROR lines, exit 3."""
    pytester.makepyfile(test_bad=f"""
        import pytest

        @pytest.mark.sync_free({arguments})
        def test_x():
            pass
    """)
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"ERROR: test_bad.py::test_x: @pytest.mark.sync_free{words}"])


def test_error_mode_from_the_command_line_counts_against_a_markers_budget(pytester):
    """--syncfree-mode error stops at the first sync: a marked budget of 2 failed at its first allowed sync. The
    marker's budget is counted; a test without one still stops at its first."""
    pytester.makepyfile(test_budgets="""
        import pytest, torch

        @pytest.mark.sync_free(budget=2)
        def test_two_of_two():
            x = torch.ones(4, device="cuda")
            x.sum().item(); x.max().item()

        @pytest.mark.sync_free(budget=2)
        def test_three_of_two():
            x = torch.ones(4, device="cuda")
            x.sum().item(); x.max().item(); x.min().item()

        @pytest.mark.sync_free
        def test_none_allowed():
            torch.ones(4, device="cuda").sum().item()
    """)
    result = run(pytester, "--syncfree-mode", "error")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["FAILED test_budgets.py::test_three_of_two - syncfree: would synchronize 3 tim*",
                                 "FAILED test_budgets.py::test_none_allowed - RuntimeError: called a synchroniz*"])


# ----------------------------------------------------------------- verdicts independent of order and runner

SHARED_FIXTURES = """
    import pytest, torch

    SETUPS = []

    @pytest.fixture(scope="session")
    def batch():
        device = "cuda" if torch.cuda.is_available() else "cpu"
        SETUPS.append(device)
        yield torch.ones(8, device=device)
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the CUDA path's tear-down: on the stand-ins too
        with open("teardowns.txt", "a") as log:  # each in the world of its set-up
            log.write(f"{device} {torch.cuda.is_available()}\\n")

    @pytest.fixture(scope="module")
    def dev():
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
"""


def test_a_shared_fixture_is_made_on_the_standins_for_watched_tests_whatever_ran_first(pytester):
    # An unmarked test makes the session fixture first: a watched test after it still
    # gets it as on a GPU (and fails for its sync), the unmarked ones as on this CPU.
    pytester.makeconftest(SHARED_FIXTURES)
    pytester.makepyfile(test_order="""
        import pytest, torch
        from conftest import SETUPS

        def test_1_plain(batch, dev):
            assert batch.device.type == "cpu" and dev.type == "cpu"

        @pytest.mark.sync_free
        def test_2_marked(batch, dev):
            assert batch.is_cuda and dev.type == "cuda"
            batch.sum().item()

        def test_3_plain(batch, dev):
            assert batch.device.type == "cpu"
            torch.zeros(2, device=dev)

        @pytest.mark.sync_free
        def test_4_marked_clean(batch, dev):
            assert (batch * 2).is_cuda

        def test_5_one_setup_per_change_of_world():
            assert SETUPS == ["cpu", "cuda", "cpu", "cuda"]
    """)
    result = run(pytester)
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_order.py::test_2_marked - syncfree: would synchronize 1 time*"])
    teardowns = (pytester.path / "teardowns.txt").read_text().splitlines()
    assert teardowns == ["cpu False", "cuda True", "cpu False", "cuda True"], teardowns
    result.stdout.fnmatch_lines(["  test_order.py:10:*: SF101 `.item()` waits for the GPU (predicted) ×1"])


UNITTEST_SUITE = """
    import unittest, pytest, torch

    @pytest.mark.sync_free
    class TestClassMarked(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.w = torch.ones(4, device="cuda" if torch.cuda.is_available() else "cpu")

        def setUp(self):
            self.x = torch.ones(4, device="cuda")
            self.x.sum().item()  # setUp is a fixture: not the test's

        def test_clean(self):
            assert (self.x + self.w).is_cuda

        def test_syncs(self):
            self.w.max().item()

    class TestPytestmark(unittest.TestCase):
        pytestmark = pytest.mark.sync_free(mode="error")

        def setUp(self):
            self.x = torch.ones(4, device="cuda")

        def tearDown(self):
            print(self.x)

        def test_stops(self):
            self.x.sum().item()
            raise AssertionError("not reached")

        def test_clean(self):
            assert (self.x * 2).is_cuda

    class TestMethodMarked(unittest.TestCase):
        @pytest.mark.sync_free(budget=1)
        def test_within(self):
            torch.ones(2, device="cuda").sum().item()

        def test_plain(self):
            torch.ones(2).sum().item()  # a CPU tensor: no sync

    class TestAsync(unittest.IsolatedAsyncioTestCase):
        @pytest.mark.sync_free
        async def test_async_syncs(self):
            torch.ones(2, device="cuda").sum().item()
"""


def test_unittest_testcases_are_watched(pytester):
    pytester.makepyfile(test_cases=UNITTEST_SUITE)
    result = run(pytester, "--syncfree", "-rA")
    result.assert_outcomes(passed=4, failed=3)
    result.stdout.fnmatch_lines([
        "*_ TestClassMarked.test_syncs _*",
        "syncfree: would synchronize 1 time, budget 0",
        "  test_cases.py:17:*: SF101 `.item()` waits for the GPU (predicted) ×1",
    ])
    result.stdout.fnmatch_lines(["FAILED test_cases.py::TestPytestmark::test_stops - RuntimeError: called a*"])
    result.stdout.fnmatch_lines(["FAILED test_cases.py::TestAsync::test_async_syncs - syncfree: would*"])
    assert "not reached" not in result.stdout.str()
    # every TestCase test is counted in the summary, and setUp's sync in none of them
    result.stdout.fnmatch_lines([
        "*= syncfree =*",
        "4 syncs predicted in 4 of 7 watched tests (on the CPU: no CUDA device)",
    ])


def test_summary_counts_the_syncs_of_tests_that_failed_for_their_own_reason(pytester):
    pytester.makepyfile(test_failing="""
        import torch

        def test_fails_after_syncing():
            x = torch.ones(2, device="cuda")
            x.sum().item()
            x.max().item()
            assert False, "its own reason"

        def test_errors_after_syncing():
            torch.ones(2, device="cuda").tolist()
            raise ValueError("its own reason")
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "3 syncs predicted in 2 of 2 watched tests (on the CPU: no CUDA device)",
        "  test_failing.py:10:*: SF204 `.tolist()` waits for the GPU (predicted) ×1  [[]test_failing.py::test_errors_after_syncing[]]",
        "  test_failing.py:5:*: SF101 `.item()` waits for the GPU (predicted) ×1  [[]test_failing.py::test_fails_after_syncing[]]",
        "  test_failing.py:6:*: SF101 `.item()` waits for the GPU (predicted) ×1  [[]test_failing.py::test_fails_after_syncing[]]",
    ])


def _syncfree_section(result) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "= syncfree =" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start:end]


def test_xdist_workers_send_their_reports_to_the_controller(pytester):
    pytest.importorskip("xdist")
    for name in ("model.py", "test_model.py", "conftest.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    pytester.makepyfile(test_cases=UNITTEST_SUITE)
    alone = run(pytester, "--syncfree")
    alone.assert_outcomes(passed=7, failed=5)
    workers = run(pytester, "--syncfree", "-n", "2")
    workers.assert_outcomes(passed=7, failed=5)
    section = _syncfree_section(alone)
    assert section[1] == "9 syncs predicted in 8 of 12 watched tests (on the CPU: no CUDA device)", section
    assert _syncfree_section(workers) == section


def test_tests_that_skip_without_cuda_run_on_the_standins_under_syncfree(pytester):
    # Under --syncfree they take their CUDA path, as on a GPU: what they call there
    # answers as a GPU would (debug mode, autocast's dtype, memory, seeds, events).
    pytester.makepyfile(test_gpu_only="""
        import pytest, torch

        def needs_cuda():
            if not torch.cuda.is_available():
                pytest.skip("needs CUDA")

        def test_amp_step():
            needs_cuda()
            model = torch.nn.Linear(8, 4).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.amp.GradScaler("cuda")
            x = torch.randn(16, 8, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(x)
                assert out.dtype == torch.bfloat16
                loss = out.float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            with torch.autocast("cuda"):
                assert model(x).dtype == torch.float16
            assert model(x).dtype == torch.float32

        def test_sync_debug_mode():
            needs_cuda()
            x = torch.ones(3, device="cuda")
            previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error")
            try:
                with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
                    x.sum().item()
                torch.cuda.synchronize()  # debug mode does not see it
            finally:
                torch.cuda.set_sync_debug_mode(previous)
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with pytest.warns(UserWarning, match="called a synchronizing CUDA operation"):
                    x.sum().item()
            finally:
                torch.cuda.set_sync_debug_mode(0)

        def test_device_api():
            needs_cuda()
            torch.cuda.manual_seed(0); a = torch.randn(3, device="cuda")
            torch.cuda.manual_seed(0); b = torch.randn(3, device="cuda")
            assert torch.equal(a, b)
            torch.cuda.reset_peak_memory_stats()
            assert torch.cuda.max_memory_allocated() >= 0
            free, total = torch.cuda.mem_get_info()
            assert free <= total
            torch.cuda.empty_cache()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); end.record(); end.synchronize()
            assert start.elapsed_time(end) >= 0
            torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
            assert torch.cuda.get_device_name(0) and torch.cuda.current_device() == 0
            torch.cuda.memory_summary()
    """)
    run(pytester).assert_outcomes(skipped=3)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*syncs predicted in 3 of 3 watched tests*"])


def test_the_marker_is_known_with_the_plugin_off(pytester):
    # -p no:syncfree: no watching and no stand-ins, and a suite that marks tests (or keeps
    # --syncfree in its addopts) still collects under --strict-markers.
    pytester.makepyfile(test_off="""
        import unittest, pytest, torch

        @pytest.mark.sync_free
        def test_marked():
            assert not torch.cuda.is_available()
            torch.ones(2).sum().item()

        class TestCase(unittest.TestCase):
            pytestmark = pytest.mark.sync_free(budget=1)

            def test_x(self):
                assert not torch.cuda.is_available()
    """)
    result = run(pytester, "-p", "no:syncfree", "--strict-markers", "--syncfree", "--syncfree-mode=error",
                 "--syncfree-cuda")
    result.assert_outcomes(passed=2)
    assert "= syncfree =" not in result.stdout.str()
    result = run(pytester, "-p", "no:syncfree", "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.sync_free(budget=0, mode=None)*"])


def test_chains_stop_at_the_test(pytester):
    # A runner script calling pytest.main is not part of any chain.
    shutil.copy(EXAMPLE / "model.py", pytester.path / "model.py")
    pytester.makepyfile(
        run_tests="""
            import sys, pytest
            sys.exit(pytest.main(["-p", "no:cacheprovider", "test_chain.py", *sys.argv[1:]]))
        """,
        test_chain="""
            import unittest, pytest, torch
            from model import count_positive

            @pytest.mark.sync_free
            def test_function():
                count_positive(torch.ones(4, device="cuda"))

            @pytest.mark.sync_free(mode="error")
            def test_function_error_mode():
                torch.ones(4, device="cuda").sum().item()

            @pytest.mark.sync_free
            class TestCase(unittest.TestCase):
                def test_method(self):
                    count_positive(torch.ones(4, device="cuda"))
        """)
    result = pytester.run(sys.executable, "run_tests.py", "--syncfree")
    result.stdout.fnmatch_lines([
        "  model.py:13:*: SF101 `.item()` waits for the GPU (predicted) ×1 (called from test_chain.py:15)  [[]test_chain.py::TestCase::test_method[]]",
        "  model.py:13:*: SF101 `.item()` waits for the GPU (predicted) ×1 (called from test_chain.py:6)  [[]test_chain.py::test_function[]]",
        "  test_chain.py:10:*: SF101 `.item()` waits for the GPU (predicted) ×1  [[]test_chain.py::test_function_error_mode[]]",
    ])
    assert "run_tests.py" not in result.stdout.str()


def test_doctests_are_not_run_on_the_standins(pytester):
    # --syncfree watches test functions and TestCase methods; a doctest has no body to
    # watch and keeps the outcome it has without syncfree.
    pytester.makepyfile(mod='''
        def f():
            """
            >>> import torch
            >>> torch.cuda.is_available()
            False
            """
    ''')
    run(pytester, "--syncfree", "--doctest-modules").assert_outcomes(passed=1)


def test_a_failure_on_the_standins_says_so(pytester):
    # A test that passes plain on the CPU (its CUDA branch skipped) and fails on the CUDA
    # branch under --syncfree: the failure and the summary say it ran on the stand-ins,
    # so a user comparing with the plain run knows why the outcome differs.
    pytester.makepyfile(test_branch="""
        import pytest, torch

        def test_cuda_branch():
            weight = torch.ones(3, 2)
            if not torch.cuda.is_available():
                return
            assert weight.cuda().sum() == 7

        @pytest.fixture
        def on_gpu():
            if torch.cuda.is_available():
                raise RuntimeError("no such GPU kernel")

        def test_fixture_branch(on_gpu):
            pass

        @pytest.mark.sync_free
        def test_syncs():
            torch.ones(2, device="cuda").sum().item()
    """)
    plain = run(pytester)
    plain.assert_outcomes(passed=2, failed=1)  # the marked test, watched without --syncfree
    assert "ran in predict mode" not in plain.stdout.str()  # a SyncError says "predicted"
    for args in ((), ("-n", "2")):
        if args:
            pytest.importorskip("xdist")
        result = run(pytester, "--syncfree", *args)
        result.assert_outcomes(failed=2, errors=1)
        out = result.stdout.str()
        assert out.count("- syncfree: ran in predict mode, CPU tensors in place of CUDA ones -") == 2, out
        assert out.count("torch.cuda.is_available() answered True") == 2, out
        section = _syncfree_section(result)
        assert section[-3:] == [
            "  2 tests failed in predict mode on the CPU, where torch.cuda.is_available() was True "
            "(plain pytest runs their CPU path; each failure says so):",
            "    test_branch.py::test_cuda_branch",
            "    test_branch.py::test_fixture_branch",
        ], section


def test_the_standins_note_only_where_they_answered_and_a_failing_marked_test_shows_its_syncs(pytester):
    """Every failing watched test was told it "ran in predict mode", also one that never touched
    CUDA and fails the same under plain pytest; a marked test that synced and then failed for its
    own reason showed only its own error."""
    pytester.makepyfile(test_mixed="""
        import pytest, torch

        def test_host_only():
            assert sum([1, 2]) == 4

        @pytest.mark.sync_free
        def test_syncs_then_fails():
            torch.ones(2, device="cuda").sum().item()
            assert "its own" == "reason"
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    host_only = out[out.index("_ test_host_only _"):out.index("_ test_syncs_then_fails _")]
    assert "predict mode" not in host_only, host_only
    marked = out[out.index("_ test_syncs_then_fails _"):]
    assert "AssertionError: assert 'its own' == 'reason'" in marked, marked
    assert "- syncfree: ran in predict mode, CPU tensors in place of CUDA ones -" in marked
    result.stdout.fnmatch_lines([
        "*- syncfree: the test also synchronized over its budget -*",
        "would synchronize 1 time, budget 0",
        "  test_mixed.py:8:*: SF101 `.item()` waits for the GPU (predicted) ×1",
    ])
    assert _syncfree_section(result)[-2:] == [
        "  1 test failed in predict mode on the CPU, where torch.cuda.is_available() was True "
        "(plain pytest runs their CPU path; each failure says so):",
        "    test_mixed.py::test_syncs_then_fails",
    ]


def test_tests_with_subtests_are_in_the_summary(pytester):
    """Tests using unittest's subTest or pytest's subtests were missing from the --syncfree
    summary: a subtest's report, made while the body still ran, took the test's watch."""
    pytester.makepyfile(test_sub="""
        import unittest
        import torch

        class T(unittest.TestCase):
            def test_sub(self):
                x = torch.ones(2, device="cuda")
                for i in range(3):
                    with self.subTest(i=i):
                        x.sum().item()

        def test_pytest_subtests(subtests):
            x = torch.ones(2, device="cuda")
            for i in range(2):
                with subtests.test(i=i):
                    x.sum().item()
    """)
    if not hasattr(pytest, "Subtests"):
        pytest.skip("this pytest has no subtests fixture (pytest >= 9)")
    result = run(pytester, "--syncfree")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "5 syncs predicted in 2 of 2 watched tests (on the CPU: no CUDA device)",
        "  test_sub.py:9:*: SF101 `.item()` waits for the GPU (predicted) ×3  [[]test_sub.py::T::test_sub[]]",
        "  test_sub.py:15:*: SF101 `.item()` waits for the GPU (predicted) ×2  [[]test_sub.py::test_pytest_subtests[]]",
    ])


def test_persistent_dataloader_workers_outliving_a_watched_test_end_as_without_syncfree(pytester):
    """Workers that outlive the test's watch are ended at pytest's exit by multiprocessing's SIGTERM, which torch's
    handler answers with exit 0; syncfree's handler (which writes a followed worker's report first) let them die of
    the signal, and the parent's DataLoader raised "DataLoader worker (pid N) is killed by signal: Terminated"."""
    pytester.makepyfile(test_loader="""
        import pytest, torch
        from torch.utils.data import DataLoader

        LOADERS = []

        @pytest.mark.sync_free(budget=100)
        def test_loader():
            loader = DataLoader(torch.arange(8.0), batch_size=2, num_workers=2, persistent_workers=True,
                                multiprocessing_context="fork")
            LOADERS.append(loader)
            batches = [batch.to("cuda") for batch in loader]
            assert len(batches) == 4 and batches[0].is_cuda
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    assert "killed by signal" not in result.stdout.str() + result.stderr.str(), result.stderr.str()


def test_a_process_a_watched_test_spawns_sees_cuda_as_the_test_does(pytester):
    # A test on the stand-ins sees CUDA; a child started with spawn (a new interpreter)
    # must too, as on a GPU machine, or the two take different paths (torch's
    # init_device_mesh makes a group of its own when CUDA is there: the parent waited
    # forever for a child that never joined, in pytorch-optimizer's sharded Muon tests).
    pytester.makepyfile(test_spawn="""
        import multiprocessing as mp
        import pytest, torch

        def child(queue, device):
            x = torch.ones(2, device=device)
            queue.put((torch.cuda.is_available(), str(x.device)))

        @pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
        def test_child_sees_what_the_test_sees(method):
            ctx = mp.get_context(method)
            queue = ctx.Queue()
            device = "cuda" if torch.cuda.is_available() else "cpu"
            process = ctx.Process(target=child, args=(queue, device))
            process.start()
            answer = queue.get(timeout=60)
            process.join(timeout=60)
            assert process.exitcode == 0
            assert answer == (torch.cuda.is_available(), "cuda:0" if device == "cuda" else "cpu")
    """)
    run(pytester, "--syncfree").assert_outcomes(passed=3)


def test_the_ranks_a_watched_test_spawns_count_towards_its_verdict(pytester):
    # torch.multiprocessing.spawn is how distributed tests start their ranks: their syncs
    # were not the test's, and a sync_free test whose ranks synced passed.
    pytester.makepyfile(test_ranks="""
        import multiprocessing
        import pytest
        import torch
        import torch.multiprocessing as mp

        def rank(index):
            x = torch.randn(4, device="cuda")
            for _ in range(index + 1):
                x.sum().item()

        def quiet(index):
            torch.randn(4, device="cuda") * 2

        def work(i):
            return torch.ones(2, device="cuda").sum().item()

        @pytest.mark.sync_free
        def test_ranks_sync():
            mp.spawn(rank, nprocs=2)

        @pytest.mark.sync_free
        def test_ranks_quiet():
            mp.spawn(quiet, nprocs=2)

        @pytest.mark.sync_free(budget=4)
        def test_pool_within_budget():
            with multiprocessing.get_context("spawn").Pool(2) as pool:
                assert pool.map(work, range(4)) == [2.0] * 4
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*syncfree: would synchronize 3 times, budget 0",
        "  test_ranks.py:9:*: SF101 `.item()` waits for the GPU (predicted) ×3 (in child processes SpawnProcess-1, "
        "SpawnProcess-2)",
    ])
    # The pool may hand all four items to one worker: "in child process SpawnPoolWorker-3" or two names.
    result.stdout.fnmatch_lines(["  test_ranks.py:15:*: SF101 `.item()` waits for the GPU (predicted) ×4 (in child process*"
                                 "SpawnPoolWorker-*  ?test_ranks.py::test_pool_within_budget?"])


def test_a_watched_test_whose_child_left_no_report_is_not_judged_and_says_why(pytester):
    # A child process killed before it wrote its report took its syncs with it: the test's count is short by an
    # unknown number. The test passed on that count, and the note naming the child was in no output.
    pytester.makepyfile(test_killed="""
        import multiprocessing
        import os
        import signal
        import pytest
        import torch

        def syncs_then_dies():
            torch.ones(2, device="cuda").sum().item()
            os.kill(os.getpid(), signal.SIGKILL)

        @pytest.mark.sync_free(budget=2)
        def test_child_killed():
            child = multiprocessing.get_context("fork").Process(target=syncs_then_dies, name="Doomed")
            child.start()
            child.join()

        @pytest.mark.sync_free(budget=2)
        def test_child_ends():
            child = multiprocessing.get_context("fork").Process(target=os.getpid, name="Fine")
            child.start()
            child.join()
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*could not judge the block: 0 syncs counted, but child process Doomed (pid *) ended without a report "
        "(killed): its syncs are not counted",
        "  1 test could not be judged: work they started ran where it was not counted (a child process that left "
        "no report, a pool made before them, a thread predict mode could not see), so their syncs are missing from "
        "the count:",
        "    child process Doomed (pid *) ended without a report (killed): its syncs are not counted  "
        "[[]test_killed.py::test_child_killed[]]",
    ])


def test_the_python_programs_a_marked_test_runs_through_a_shell_asyncio_or_posix_spawn_fail_it(pytester):
    # `bash -c "python child.py"`, the second program of a shell line, asyncio's create_subprocess_exec and
    # os.posix_spawn ran their Python program unwatched and unnamed: each marked test passed with its child's sync.
    pytester.makepyfile(child="import torch\ntorch.ones(2, device='cuda').sum().item()\n")
    pytester.makepyfile(test_programs="""
        import asyncio, os, subprocess, sys
        import pytest

        CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")

        @pytest.mark.sync_free
        def test_bash():
            subprocess.run(["bash", "-c", f"{sys.executable} {CHILD}"], check=True)

        @pytest.mark.sync_free
        def test_second_of_a_line():
            subprocess.run(f"{sys.executable} -c pass && {sys.executable} {CHILD}", shell=True, check=True)

        @pytest.mark.sync_free
        def test_asyncio():
            async def main():
                started = await asyncio.create_subprocess_exec(sys.executable, CHILD)
                await started.wait()
            asyncio.run(main())

        @pytest.mark.sync_free
        def test_posix_spawn():
            os.waitpid(os.posix_spawn(sys.executable, [sys.executable, CHILD], os.environ), 0)

        @pytest.mark.sync_free
        def test_no_python():
            subprocess.run(["bash", "-c", "true"], check=True)
    """)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=4)
    result.stdout.fnmatch_lines(["*child.py:2:* SF101 *(in child process child.py (pid *)*"])


def test_pool_workers_forked_by_the_pools_own_thread_run_predicted(pytester):
    # maxtasksperchild: the pool's worker handler, a daemon thread, forks the new workers; they ran without predict
    # mode's stand-ins ("Torch not compiled with CUDA enabled") instead of being counted.
    pytester.makepyfile(test_pool="""
        import multiprocessing
        import pytest
        import torch

        def work(i):
            return torch.ones(2, device="cuda").sum().item()

        @pytest.mark.sync_free
        def test_pool():
            with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
                assert pool.map(work, range(4), chunksize=1) == [2.0] * 4
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*syncfree: would synchronize 4 times, budget 0"])
    assert "not compiled with CUDA" not in result.stdout.str()


def test_a_sync_free_block_inside_a_watched_test_counts_the_ranks_it_starts(pytester):
    # The test's follower takes the children a watched test starts: a sync_free block of the test's own around its
    # ranks passed under --syncfree (it raised under plain pytest). The block reads its children's reports too, and
    # the test's report counts them once.
    pytester.makepyfile(test_block="""
        import multiprocessing
        import pytest
        import syncfree
        import torch

        def rank(index):
            torch.ones(2, device="cuda").sum().item()

        def test_block_raises():
            with pytest.raises(syncfree.SyncError, match="would synchronize 2 times"):
                with syncfree.sync_free():
                    ranks = [multiprocessing.get_context("spawn").Process(target=rank, args=(i,)) for i in range(2)]
                    for r in ranks:
                        r.start()
                    for r in ranks:
                        r.join()
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_block.py:7:*: SF101 `.item()` waits for the GPU (predicted) ×2 (in child processes*"])


# Syncs on lines a `# syncfree: allow` comment covers: the last line syncs twice, an .item()
# that its allow[SF101] covers and a copy to the host (SF301) that it does not.
ALLOWED_SUITE = """
    import pytest
    import torch

    def test_allowed_item():
        x = torch.ones(3, device="cuda")
        for _ in range(3):
            x.sum().item()  # syncfree: allow[SF101]

    def test_bare_allow():
        torch.ones(3, device="cuda").cpu()  # syncfree: allow

    def test_plain():
        torch.ones(3, device="cuda").sum().item()

    @pytest.mark.sync_free
    def test_marked_allowed():
        torch.ones(3, device="cuda").sum().item()  # syncfree: allow[item]

    def test_mixed_line():
        x = torch.ones(3, device="cuda")
        x.sum().item() + x.cpu().sum().item()  # syncfree: allow[SF101]
"""

ALLOWED_SECTION = [
    "2 syncs predicted in 2 of 5 watched tests (on the CPU: no CUDA device); "
    "6 allowed by comments, not counted",
    "  test_allowed.py:21:22: SF301 A blocking copy to the CPU waits for the GPU (predicted) ×1  [test_allowed.py::test_mixed_line]",
    "  test_allowed.py:13:5: SF101 `.item()` waits for the GPU (predicted) ×1  [test_allowed.py::test_plain]",
    "  allowed by comments (not counted): 6 syncs at 4 sites",
    "  test_allowed.py:7:9: SF101 `.item()` waits for the GPU (predicted) ×3  [test_allowed.py::test_allowed_item]"
    "  [allowed: # syncfree: allow[SF101]]",
    "  test_allowed.py:10:5: SF301 A blocking copy to the CPU waits for the GPU (predicted) ×1  [test_allowed.py::test_bare_allow]"
    "  [allowed: # syncfree: allow]",
    "  test_allowed.py:17:5: SF101 `.item()` waits for the GPU (predicted) ×1  [test_allowed.py::test_marked_allowed]"
    "  [allowed: # syncfree: allow[item]]",
    "  test_allowed.py:21:5: SF101 `.item()` waits for the GPU (predicted) ×1  [test_allowed.py::test_mixed_line]"
    "  [allowed: # syncfree: allow[SF101]]",
]


def test_the_summary_shows_allowed_syncs_apart_and_does_not_count_them(pytester):
    pytester.makepyfile(test_allowed=ALLOWED_SUITE)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=5)
    assert [line for line in _syncfree_section(result)[1:] if line] == ALLOWED_SECTION


def test_an_allow_for_one_rule_does_not_allow_another_sync_on_its_line(pytester):
    pytester.makepyfile(test_rules="""
        import pytest
        import torch

        @pytest.mark.sync_free
        def test_copy_on_an_item_line():
            x = torch.ones(3, device="cuda")
            x.sum().item() + x.cpu().sum().item()  # syncfree: allow[SF101]
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(failed=1)  # the copy to the host counts
    section = [line for line in _syncfree_section(result)[1:] if line]
    assert section == [
        "1 sync predicted in 1 of 1 watched test (on the CPU: no CUDA device); 1 allowed by comments, not counted",
        "  test_rules.py:7:22: SF301 A blocking copy to the CPU waits for the GPU (predicted) ×1  [test_rules.py::test_copy_on_an_item_line]",
        "  allowed by comments (not counted): 1 sync at 1 site",
        "  test_rules.py:7:5: SF101 `.item()` waits for the GPU (predicted) ×1  [test_rules.py::test_copy_on_an_item_line]"
        "  [allowed: # syncfree: allow[SF101]]",
    ], section


def test_a_run_whose_syncs_are_all_allowed_counts_none(pytester):
    pytester.makepyfile(test_all_allowed="""
        import torch

        def test_allowed():
            torch.ones(3, device="cuda").sum().item()  # syncfree: allow
    """)
    result = run(pytester, "--syncfree")
    result.assert_outcomes(passed=1)
    section = [line for line in _syncfree_section(result)[1:] if line]
    assert section[0] == ("0 syncs predicted in 0 of 1 watched test (on the CPU: no CUDA device); "
                          "1 allowed by comments, not counted"), section
    assert section[2].endswith("  [allowed: # syncfree: allow]"), section


def test_allowed_syncs_travel_from_xdist_workers_marked(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_allowed=ALLOWED_SUITE)
    alone = run(pytester, "--syncfree")
    alone.assert_outcomes(passed=5)
    workers = run(pytester, "--syncfree", "-n", "2")
    workers.assert_outcomes(passed=5)
    section = [line for line in _syncfree_section(workers)[1:] if line]
    assert section == ALLOWED_SECTION, section
    assert section == [line for line in _syncfree_section(alone)[1:] if line]


def test_a_budget_in_gpu_time_without_a_gpu_leaves_the_count_budget_deciding(pytester):
    """``budget_ms`` (GPU time lost, measured on a GPU): without a GPU there is no cost, so the count budget decides
    (no pass on a number not measured), and ``--syncfree-cost`` says in one line why there is none."""
    pytester.makepyfile(test_ms="""
        import pytest
        import torch

        @pytest.mark.sync_free(budget_ms=100.0)
        def test_syncs():
            torch.ones(2, device="cuda").sum().item()

        @pytest.mark.sync_free(budget=1, budget_ms=100.0)
        def test_within():
            torch.ones(2, device="cuda").sum().item()
    """)
    result = run(pytester, "--syncfree", "--syncfree-cost")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED test_ms.py::test_syncs - syncfree: would synchronize 1 time, budget 0*"])
    result.stdout.fnmatch_lines(["*cost not measured (no GPU, or the CUPTI engine): sites ranked by count*"])
    pytester.makepyfile(test_ms="""
        import pytest

        @pytest.mark.sync_free(budget_ms=-1)
        def test_bad():
            pass
    """)
    result = run(pytester)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*budget_ms=...) must be a number of milliseconds >= 0, not -1*"])


def test_pytest_main_in_a_watch_or_a_cell_counts_the_children_of_its_marked_tests(pytester):
    """pytest.main in a watched block or a %%syncfree cell: a marked test's follower took the children the test forked,
    and only the test counted them. The block and the cell said 1 sync where the two tests' children made 2."""
    pytester.makepyfile(test_two="""
        import os, pytest, torch

        def child():
            pid = os.fork()
            if pid == 0:
                torch.ones(2, device="cuda").sum().item()
                os._exit(0)
            os.waitpid(pid, 0)

        @pytest.mark.sync_free
        def test_marked():
            child()

        def test_plain():
            child()
    """)
    args = "['-q', '-p', 'no:cacheprovider', '-p', 'no:randomly', 'test_two.py']"
    driver = pytester.makepyfile(driver=f"""
        import pytest, syncfree
        from IPython.testing.globalipapp import start_ipython

        with syncfree.watch() as w:
            pytest.main({args})
        print("block", w.report.syncs)
        ip = start_ipython()
        ip.run_line_magic("load_ext", "syncfree")
        ip.run_cell_magic("syncfree", "", "import pytest\\npytest.main({args})\\n")
    """)
    result = pytester.runpython(driver)
    out = result.stdout.str()
    assert "block 2" in out, out + result.stderr.str()
    assert "2 syncs at" in out, out + result.stderr.str()
