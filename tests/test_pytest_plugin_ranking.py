"""The order of ``pytest --syncfree``'s summary: the sites of every test ranked as a watch's
report ranks them (syncfree.capture.sites.rank_key), through pytester in a subprocess.

Blocked time needs a CUDA device as the recorder sees one: the pytester conftest makes one
up (as tests/conftest.py's ``fake_cuda`` does) whose ``torch.cuda.synchronize()`` blocks
for the time the test asks, so a warm-up and a per-step sync have times that the ranking
can tell apart; compilation is a torch.compile backend that syncs."""

import re

import pytest

torch = pytest.importorskip("torch")
pytest_plugins = ["pytester"]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a made-up CUDA device (no real one here)")

CONFTEST = """
    import time

    import torch

    # The recorder sees a CUDA device (warn mode, debug engine); a sync is
    # torch.cuda.synchronize(), which blocks for the next time in WAIT.
    WAIT = []
    _mode = [0]


    def synchronize(device=None):
        time.sleep(WAIT.pop(0) if WAIT else 0.0)


    torch.cuda.is_available = lambda: True
    torch.cuda.get_sync_debug_mode = lambda: _mode[0]
    torch.cuda.set_sync_debug_mode = lambda mode: _mode.__setitem__(
        0, {"default": 0, "warn": 1, "error": 2}.get(mode, mode))
    torch.cuda.get_device_name = lambda device=None: "Stand-in GPU"
    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = synchronize
    # torch.compile keeps the CUDA random state of a device it believes in
    # (torch/_dynamo/convert_frame.py preserve_global_state)
    torch.cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    torch.cuda.set_rng_state = lambda state, device="cuda": None
"""

# A torch.compile backend that syncs while it compiles, in an installed package's place
# (site-packages) so that its line is the library's, not the test's.
BACKEND = """\
import torch


def slow_backend(gm, example_inputs):
    torch.cuda.synchronize()
    return gm.forward
"""

TESTS = """
    import os
    import sys

    import torch

    from conftest import WAIT

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "vendor", "site-packages"))
    from slow_backend import slow_backend


    def test_warm_up():
        WAIT[:] = [0.2, 0.005, 0.005, 0.005]
        torch.cuda.synchronize()  # the warm-up: 200 ms, the larger total
        for step in range(3):
            torch.cuda.synchronize()  # every step: 5 ms


    def test_compiled():
        step = torch.compile(lambda x: x * 2, backend=slow_backend)
        WAIT[:] = [0.2, 0.005, 0.005, 0.005]
        for _ in range(3):
            step(torch.ones(2))  # compiles at the first call: 200 ms, once
            torch.cuda.synchronize()  # every step: 5 ms
"""


def _syncfree_section(result) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "= syncfree =" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start + 1:end]


def test_the_summary_ranks_per_step_syncs_above_a_larger_warm_up_and_compilation(pytester):
    pytester.makeconftest(CONFTEST)
    vendor = pytester.path / "vendor" / "site-packages"
    vendor.mkdir(parents=True)
    (vendor / "slow_backend.py").write_text(BACKEND)
    pytester.makepyfile(test_steps=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncfree")
    result.assert_outcomes(passed=2)
    section = [line for line in _syncfree_section(result) if line]
    assert section[0] == "8 syncs seen in 2 of 2 watched tests"
    rows = section[1:]
    # Recurring sites first, by their blocked time after the first call: the two per-step lines
    # (10 ms after their first call, whichever first), then the warm-up line, a site of one sync
    # whose 200 ms are all its first call.
    per_step = sorted(rows[:2])
    # Each row in the layout of every text surface (syncfree.output.text_line).
    assert re.match(r"  test_steps\.py:16:\d+: SF801 `torch\.cuda\.synchronize\(\)` ×3, blocked ", per_step[0])
    assert per_step[0].endswith("  [test_steps.py::test_warm_up]")
    assert re.match(r"  test_steps\.py:24:\d+: SF801 `torch\.cuda\.synchronize\(\)` ×3, blocked ", per_step[1])
    assert per_step[1].endswith("  [test_steps.py::test_compiled]")
    assert "(first sync " in per_step[0] and "(first sync " in per_step[1]
    assert re.match(r"  test_steps\.py:14:\d+: SF801 `torch\.cuda\.synchronize\(\)` ×1, blocked 2", rows[2])
    assert rows[2].endswith("  [test_steps.py::test_warm_up]")
    # Then what is paid once, under the text report's line (WatchReport.text): the
    # compilation's sync, with its library line under it.
    assert rows[3].startswith("  paid once (setup, compilation): 1 sync, blocked 2")
    assert "; the first call of each of the 3 sites above: blocked 2" in rows[3]
    assert re.match(r"  test_steps\.py:23:\d+: SF700 .* ×1, blocked 2", rows[4]), rows[4]
    assert rows[4].endswith(", paid once: torch.compile compiling  [test_steps.py::test_compiled]")
    assert rows[5].startswith("      inside slow_backend.py:5 `torch.cuda.synchronize()`")
    assert len(rows) == 6
