"""Predict mode's stand-ins for the rest of ``torch.cuda`` (capture/predict/cuda_api.py):
the sync debug mode, autocast's CUDA dtype, memory statistics, seeds, NVTX, on the CPU
build of torch, through the public ``syncfree.watch("predict")``."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="predict-mode tests (no CUDA)")

import syncfree  # noqa: E402


def test_autocast_cuda_gives_the_lower_precision_of_a_gpu():
    autocast = torch.amp.autocast_mode.autocast
    enter, exit_ = autocast.__enter__, autocast.__exit__
    with syncfree.watch("predict"):
        a = torch.ones(4, 4, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            assert (a @ a).dtype == torch.float16
            assert torch.nn.functional.linear(a, a).dtype == torch.float16
            with torch.autocast("cuda", enabled=False):
                assert (a @ a).dtype == torch.float32
            assert (a @ a).dtype == torch.float16
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert (a @ a).dtype == torch.bfloat16
            assert torch.is_autocast_enabled("cuda")
        with torch.autocast("cuda"):  # CUDA's default dtype
            assert (a @ a).dtype == torch.float16
        assert (a @ a).dtype == torch.float32
        assert not torch.is_autocast_enabled("cpu")
    # nothing left behind: the class's own methods, CPU autocast off
    assert (autocast.__enter__, autocast.__exit__) == (enter, exit_)
    assert not torch.is_autocast_enabled("cpu")


def test_the_sync_debug_mode_acts_as_on_a_gpu_and_is_undone():
    with syncfree.watch("predict") as w:
        x = torch.ones(3, device="cuda")
        assert torch.cuda.get_sync_debug_mode() == 0
        torch.cuda.set_sync_debug_mode("error")
        assert torch.cuda.get_sync_debug_mode() == 2
        with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
            x.sum().item()
        torch.cuda.synchronize()  # debug mode does not see it: no error
        torch.cuda.set_sync_debug_mode(1)
        with pytest.warns(UserWarning, match="called a synchronizing CUDA operation") as seen:
            x.max().item()
        assert seen[0].filename == __file__  # at the user's line, as torch's warning
        with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
            torch.cuda.set_sync_debug_mode("loud")
        torch.cuda.set_sync_debug_mode("warn")  # left set: undone with the session
    assert w.report.syncs == 3
    with syncfree.watch("predict"):
        assert torch.cuda.get_sync_debug_mode() == 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.ones(2, device="cuda").sum().item()  # no warning at mode 0
    with pytest.raises((AssertionError, RuntimeError), match="not compiled with CUDA"):
        torch.cuda.set_sync_debug_mode(0)  # the CPU build's own answer again


def test_memory_seeds_and_nvtx_answer_for_an_empty_device():
    with syncfree.watch("predict") as w:
        torch.cuda.manual_seed(3)
        a = torch.randn(5, device="cuda")
        torch.cuda.manual_seed_all(3)
        assert torch.equal(a, torch.randn(5, device="cuda"))
        assert torch.cuda.initial_seed() == 3
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_max_memory_allocated()
        torch.cuda.reset_accumulated_memory_stats()
        assert torch.cuda.memory_allocated() == 0 and torch.cuda.max_memory_reserved(0) == 0
        assert torch.cuda.memory_stats() == {}
        free, total = torch.cuda.mem_get_info()
        assert 0 < free <= total
        assert "stand-in" in torch.cuda.memory_summary()
        torch.cuda.empty_cache()
        torch.cuda.ipc_collect()
        torch.cuda.nvtx.range_push("step")
        torch.cuda.nvtx.range_pop()
        with torch.cuda.nvtx.range("block"):
            pass
    assert w.report.syncs == 1, w.report.text()  # torch.equal's: the rest make none
    with pytest.raises((AssertionError, RuntimeError)):
        torch.cuda.mem_get_info()  # the CPU build's answer again
