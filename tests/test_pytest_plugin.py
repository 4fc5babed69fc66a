"""The pytest plugin through pytester, in a subprocess as a user's pytest would load it
(the pytest11 entry point of the installed package), on the CPU: predict mode."""

import shutil
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


def test_example_suite(pytester):
    for name in ("model.py", "test_model.py", "conftest.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    result = run(pytester)
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_count_positive_is_sync_free _*",
        "syncfree: would synchronize 1 time, budget 0",
        "  model.py:13: .item() ×1, predicted, SF101 (called from test_model.py:27)",
    ])
    result.stdout.fnmatch_lines(["  test_model.py:46: printing a tensor ×1, predicted, SF201"])
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
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*would synchronize 2 times, budget 1*"])
    result.stdout.fnmatch_lines(["*RuntimeError: called a synchronizing CUDA operation*"])
    assert "not reached" not in result.stdout.str()


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
        "6 syncs predicted in 2 of 3 watched tests (CPU stand-ins: no CUDA device)",
        "  test_all.py:6: .item() ×5, predicted, SF101  [[]test_all.py::test_many[]]",
        "  test_all.py:10: truth value of a tensor ×1, predicted, SF103  [[]test_all.py::test_one[]]",
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
    result.stderr.fnmatch_lines(["*sync_free takes budget= and mode=, not budjet*"])
