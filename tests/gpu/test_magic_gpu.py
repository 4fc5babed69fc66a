"""%%syncfree end to end on a real CUDA device, through a real IPython shell.

The GPU machine has no IPython of its own; `make test-gpu` there runs with IPython carried
as wheels (README, "GPU checks"). Without IPython these tests are skipped with the reason.
"""

from __future__ import annotations

import pytest

IPython = pytest.importorskip("IPython", reason="no IPython on this machine: carry it as wheels")

from IPython.testing import globalipapp  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from syncfree.report import MIME_TYPE, validate_report  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ip():
    # start_ipython() returns None once a test module before this one started the shell.
    shell = globalipapp.start_ipython() or globalipapp.get_ipython()
    shell.run_line_magic("load_ext", "syncfree")
    shell.run_cell("import torch")
    yield shell
    shell.run_line_magic("unload_ext", "syncfree")


def run(ip, cell):
    with capture_output() as captured:
        result = ip.run_cell(cell, store_history=True)
    reports = [o.data[MIME_TYPE] for o in captured.outputs if MIME_TYPE in o.data]
    assert len(reports) == 1, captured.stdout + captured.stderr
    validate_report(reports[0])
    return result, captured.stdout, reports[0]


def test_item_on_line_3_is_measured_on_line_3(ip):
    result, stdout, report = run(ip, "%%syncfree\nx = torch.randn(2048, 2048, device='cuda')\ns = (x @ x).sum().item()\nprint('ok')\n")
    assert result.success and "ok" in stdout
    assert report["mode"] == "warn" and report["device"]["kind"] == "cuda"
    (site,) = report["sites"]
    assert (site["line"], site["kind"], site["count"], site["rule"]) == (3, "item", 1, "SF101")
    assert site["blocked_ms"] is not None and site["blocked_ms"] > 0
    print(f"syncfree-gpu magic: .item() line 3 x1 blocked {site['blocked_ms']:.3f} ms on {report['device']['name']}")


def test_loop_counts_every_sync_and_print_through_torch_is_on_the_cell_line(ip):
    _, _, report = run(ip, "%%syncfree\ny = torch.ones(4, device='cuda')\nfor _ in range(64):\n    v = y.sum().item()\nprint(y.sum())\n")
    by_line = {(s["line"], s["kind"]): s["count"] for s in report["sites"]}
    assert by_line[(4, "item")] == 64
    assert by_line[(5, "print")] == 8  # repr of a CUDA scalar syncs 8 times inside torch (sync-facts.md)


def test_function_defined_in_the_cell_gives_the_chain(ip):
    _, _, report = run(ip, "%%syncfree\ndef f(t):\n    if t > 0:\n        return t\n    return -t\nf(torch.ones((), device='cuda'))\n")
    sites = {s["line"]: s for s in report["sites"]}
    assert sites[3]["chain"] == [6, 3]
    # The cell's last line is an expression: IPython displays its value (Out[...]), and the
    # repr of a CUDA tensor syncs, on that line.
    assert sites[6]["kind"] == "print" and sites[6]["chain"] == [6]
    assert set(sites) == {3, 6}


def test_error_mode_raises_at_the_cell_line(ip):
    result, _, report = run(ip, "%%syncfree --mode error\nz = torch.ones(3, device='cuda')\nw = z * 2\nn = z.sum().item()\n")
    assert not result.success
    assert isinstance(result.error_in_exec, RuntimeError)
    assert report["mode"] == "error" and report["error"]["line"] == 4
    tb = result.error_in_exec.__traceback__
    while tb.tb_next is not None and "syncfree" not in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    lines = []
    t = result.error_in_exec.__traceback__
    while t is not None:
        lines.append(t.tb_lineno)
        t = t.tb_next
    assert 4 in lines


@pytest.mark.parametrize("line", ["n = z.sum().item()"])
def test_error_mode_traceback_shows_no_syncfree_frames(ip, line):
    cell = f"%%syncfree --mode error\nz = torch.ones(3, device='cuda')\n{line}\n"
    result, stdout, report = run(ip, cell)
    assert isinstance(result.error_in_exec, RuntimeError)
    assert f"----> 3 {line}" in stdout
    assert "syncfree/capture" not in stdout and "syncfree/magic.py" not in stdout, stdout
    print(f"syncfree-gpu magic: --mode error traceback for {line!r} ends at the cell line")


def test_sync_free_cell_reports_nothing_and_state_is_restored(ip):
    import warnings

    import torch

    before = (torch.cuda.get_sync_debug_mode(), list(warnings.filters), warnings.showwarning, torch.cuda.synchronize)
    _, _, report = run(ip, "%%syncfree\nt = torch.zeros((), device='cuda')\nfor _ in range(10):\n    t += torch.ones((), device='cuda')\n")
    assert report["totals"]["syncs"] == 0 and report["sites"] == []
    after = (torch.cuda.get_sync_debug_mode(), list(warnings.filters), warnings.showwarning, torch.cuda.synchronize)
    assert after == before
