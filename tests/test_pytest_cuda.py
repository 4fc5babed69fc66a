"""``pytest --syncfree-cuda`` (syncfree/pytest_cuda.py) through pytester, on the CPU: a
suite's CUDA variants, chosen at import and collection time, run on the stand-ins."""

import pytest

torch = pytest.importorskip("torch")
pytest_plugins = ["pytester"]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="predict-mode tests (no CUDA)")

# A suite that picks its devices the ways public suites do: a conftest device list for
# parametrization, skipif markers evaluated at import, and a collection hook that skips
# tests marked `gpu`. The color conversion is the per-call sync found in a public library.
SUITE = {
    "conftest.py": """
        import pytest
        import torch

        DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        ON_IMPORT = {"count": torch.cuda.device_count(),
                     "capability": torch.cuda.get_device_capability() if DEVICES[1:] else None}

        def pytest_configure(config):
            config.addinivalue_line("markers", "gpu: needs a GPU")

        def pytest_generate_tests(metafunc):
            if "device" in metafunc.fixturenames:
                metafunc.parametrize("device", DEVICES)

        def pytest_collection_modifyitems(config, items):
            if not torch.cuda.is_available():
                for item in items:
                    if "gpu" in item.keywords:
                        item.add_marker(pytest.mark.skip(reason="no GPU"))
    """,
    "test_suite.py": """
        import pytest
        import torch
        from conftest import ON_IMPORT

        requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")

        def rgb_to_grayscale(image):
            weights = torch.tensor([0.299, 0.587, 0.114], device=image.device)
            return (weights[:, None, None] * image).sum(0)

        def test_total(device):
            assert torch.ones(3, device=device).sum().item() == 3.0

        @requires_cuda
        def test_grayscale_on_cuda():
            assert ON_IMPORT == {"count": 1, "capability": (9, 0)}
            assert rgb_to_grayscale(torch.rand(3, 4, 4, device="cuda")).is_cuda

        @pytest.mark.gpu
        def test_marked_gpu():
            assert torch.zeros(2, device="cuda").is_cuda

        @pytest.mark.skipif(True, reason="flaky on Windows")
        def test_unrelated_skip():
            pass

        @pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
        def test_two_gpus():  # --syncfree-cuda stands in for one GPU: still skipped, and said so
            pass

        @pytest.mark.xfail(run=False, reason="wrong on the GPU")
        def test_known_bug():  # an expected failure is no skip for want of CUDA, whatever its reason names
            raise AssertionError

        @requires_cuda
        @pytest.mark.sync_free
        def test_step_is_sync_free():  # judged in predict mode: fails on the .item()
            torch.ones(2, device="cuda").sum().item()
    """,
}


def run(pytester, *args):
    pytester.makepyfile(**SUITE)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_the_option_is_offered(pytester):
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--syncfree-cuda*without a CUDA device*"])


def test_without_the_option_the_summary_counts_the_tests_skipped_for_want_of_cuda(pytester):
    result = run(pytester, "--syncfree", "-rs")
    result.assert_outcomes(passed=1, skipped=5, xfailed=1)
    result.stdout.fnmatch_lines([
        "*= syncfree =*",
        "0 syncs predicted in 0 of 1 watched test (on the CPU: no CUDA device)",
        "  4 tests skipped for want of CUDA (the skip reason names CUDA or a GPU): "
        "--syncfree-cuda runs those that ask torch.cuda.is_available() (or for one GPU) in predict mode on the CPU",
    ])


def test_cuda_variants_run_on_the_standins(pytester):
    result = run(pytester, "--syncfree-cuda", "-v")
    result.assert_outcomes(passed=4, skipped=2, failed=1, xfailed=1)
    result.stdout.fnmatch_lines([
        "syncfree: --syncfree-cuda: torch.cuda.is_available() answers True*",
        "*test_total?cuda? PASSED*",
        "*test_grayscale_on_cuda PASSED*",
        "*test_marked_gpu PASSED*",
        "*test_step_is_sync_free FAILED*",
    ])
    result.stdout.fnmatch_lines(["*syncfree: would synchronize 1 time, budget 0*"])
    result.stdout.fnmatch_lines([
        "*= syncfree =*",
        "3 syncs predicted in 3 of 5 watched tests (on the CPU: no CUDA device)",
        "  test_suite.py:8:*: SF401 Creating a CUDA tensor from Python or NumPy data waits for the copy (predicted) ×1 "
        "(called from test_suite.py:17)  ?test_suite.py::test_grayscale_on_cuda?",
        "  test_suite.py:12:*: SF101 `.item()` waits for the GPU (predicted) ×1  ?test_suite.py::test_total?cuda??",
        "  CUDA variants ran in predict mode on the CPU (--syncfree-cuda)*",
        "  1 test still skipped for want of CUDA (the skip reason names CUDA or a GPU): --syncfree-cuda answers "
        "is_available() and device_count() as one GPU does, not what else they asked",
    ])


def test_under_xdist_each_worker_stands_in(pytester):
    pytest.importorskip("xdist")
    result = run(pytester, "--syncfree-cuda", "-n", "1")
    result.assert_outcomes(passed=4, skipped=2, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(["3 syncs predicted in 3 of 5 watched tests*"])


def test_the_answers_are_put_back_after_the_run(pytester):
    before = (torch.cuda.is_available, torch.cuda.device_count,
              getattr(torch, "accelerator", None) and torch.accelerator.is_available)
    pytester.makepyfile(test_inline="""
        import torch

        def test_sees_cuda():
            assert torch.cuda.is_available() and torch.cuda.device_count() == 1
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncfree-cuda")
    result.assert_outcomes(passed=1)
    after = (torch.cuda.is_available, torch.cuda.device_count,
             getattr(torch, "accelerator", None) and torch.accelerator.is_available)
    assert after == before and torch.cuda.is_available() is False


def test_the_summary_names_tests_whose_compiled_code_ran_eagerly(pytester):
    pytester.makepyfile(test_compiles="""
        import torch

        def scale(t):
            return (t * 2).sum()

        compiled = torch.compile(scale)  # at import, as a library's suite does

        def test_it_compiles():
            x = torch.ones(3, device="cuda" if torch.cuda.is_available() else "cpu")
            assert compiled(x).item() == 6.0 and compiled(x).item() == 6.0

        def test_plain():
            assert scale(torch.ones(2)).item() == 4.0

        def count_frames(device):  # as pytorch-optimizer's compile tests do
            frames = []
            def backend(graph, inputs):
                frames.append(graph)
                return graph.forward
            counted = torch.compile(lambda t: t * 3, backend=backend)
            assert counted(torch.ones(2, device=device)).tolist() == [3.0, 3.0]
            assert len(frames) > 0

        def test_counts_compiled_frames():  # CPU tensors: compiled for real
            count_frames("cpu")

        def test_counts_compiled_frames_on_cuda():  # a virtual CUDA tensor: eager
            count_frames("cuda" if torch.cuda.is_available() else "cpu")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncfree",
                                           "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        "*= syncfree =*",
        "  torch.compile'd code ran eagerly in 2 tests (predict mode cannot compile for a GPU*",
        "    test_compiles.py::test_counts_compiled_frames_on_cuda: `*lambda*` ×1",
        "    test_compiles.py::test_it_compiles: `scale` ×2",
    ])
    # the failure says why the frame count is 0 under --syncfree
    result.stdout.fnmatch_lines(["*- syncfree: torch.compile ran eagerly -*",
                                 "*ran eagerly in predict mode (it cannot compile for a GPU)*"])


def test_the_summary_names_the_tests_whose_torchscript_predict_mode_could_not_see(pytester):
    # A loaded TorchScript module has no Python source: its syncs are not predicted, so a
    # sync_free test passes here that may fail on a GPU; the summary says which. Scripted
    # code with Python source is predicted (the failure below) and not named.
    pytester.makepyfile(test_scripts="""
        import io
        import pytest
        import torch

        class Positive(torch.nn.Module):
            def forward(self, t):
                return t[t > 0]

        buffer = io.BytesIO()
        torch.jit.save(torch.jit.script(Positive()), buffer)
        buffer.seek(0)
        loaded = torch.jit.load(buffer)
        scripted = torch.jit.script(Positive())

        @pytest.mark.sync_free
        def test_loaded():
            loaded(torch.randn(8, device="cuda"))

        @pytest.mark.sync_free
        def test_scripted():
            scripted(torch.randn(8, device="cuda"))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncfree",
                                           "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*= syncfree =*",
        "  TorchScript without Python source ran in 1 test: its syncs were not predicted*",
        "    test_scripts.py::test_loaded: `Positive.forward` ×1",
    ])
    assert "test_scripted: `" not in result.stdout.str()


def test_cpu_code_at_import_runs_where_cuda_is_answered(pytester):
    # Once is_available() says CUDA, torch asks more: Adam.step on CPU parameters asks the
    # current stream whether it is capturing (Optimizer._accelerator_graph_capture_health_check).
    # pytorch-optimizer's test modules step every optimizer at import to probe what it
    # supports: "Cannot access accelerator device when none is available" stopped the
    # collection under --syncfree-cuda.
    pytester.makepyfile(test_probe="""
        import torch

        def probe():
            p = torch.nn.Parameter(torch.ones(2))
            p.grad = torch.ones(2)
            torch.optim.Adam([p]).step()
            return p.detach().clone()

        STEPPED = probe()

        def test_probe_on_the_standins():
            assert torch.cuda.current_device() == 0 and not torch.cuda.is_current_stream_capturing()
            assert STEPPED.tolist() != [1.0, 1.0]
            assert probe().tolist() == STEPPED.tolist()
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncfree-cuda")
    result.assert_outcomes(passed=1)


def test_a_hosts_close_exits_its_watch_whatever_interrupts_the_bookkeeping():
    # The watch used to be forgotten first: an interrupt there left the stand-ins installed
    # for the rest of the process.
    from syncfree.pytest_worlds import Host

    class Hosts(list):
        def remove(self, item):
            super().remove(item)
            raise KeyboardInterrupt

    class Worlds:
        hosts = Hosts()

    host = Host(Worlds())
    host.open()
    assert torch.cuda.is_available()  # the stand-ins answer
    with pytest.raises(KeyboardInterrupt):
        host.close()
    assert host.watch is None and not Worlds.hosts
    from syncfree.capture.predict import real_cuda_available

    assert torch.cuda.is_available() == real_cuda_available()  # the stand-ins are gone
