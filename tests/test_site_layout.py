"""One layout for a sync site in every text surface (`syncfree.output.text_line`), with the exact columns of the
call that synced: ``syncfree run`` (text, json, sarif) as ``syncfree check``, a watch's report, a notebook report's
text, a merged report. Real subprocesses for the command line, in predict mode on CPU."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncfree.output import Diagnostic, code_columns, text_line

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """\
import torch
x = torch.ones(3, device="cuda")
for i in range(3):
    v = x.sum().item()  # a comment (with `.item()` in it)
"""


def python(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper")}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=environment,
                          timeout=300)


def test_code_columns_leave_a_comment_out():
    assert code_columns("    v = x.sum().item()  # a comment\n") == (5, 23)
    assert code_columns("    s = '#' + str(x.item())  # why\n") == (5, 28)  # a '#' in a string is code
    assert code_columns("x.item()\n") == (1, 9)
    assert code_columns("    \n") == (1, 1)
    assert code_columns("    foo(a,  # first\n") == (5, 11)  # a line of a longer statement


def test_the_layout_puts_the_figures_in_one_order_after_the_message():
    d = Diagnostic("train.py", 41, 13, 41, 27, "SF101", "`.item()` waits for the GPU", certainty="measured",
                   count=64, cost_ms=1.2, cost_each_ms=0.019, blocked_ms=3.1, first_ms=2.0, first_calls=1,
                   phase=None, thread="loader", chains=(("train.py:54", "train.py:41"),))
    assert text_line(d) == ("train.py:41:13: SF101 `.item()` waits for the GPU ×64, cost 1.20 ms of GPU time "
                            "(0.019 ms each), blocked 3.1 ms (first sync 2.00 ms, then 0.017 ms per sync ×63), "
                            "in thread loader (called from train.py:54)")
    once = Diagnostic("", 2, 0, 2, 0, "SF303", "Moving a module to the GPU syncs once per parameter",
                      certainty="predicted", count=4, phase="once")
    assert text_line(once) == ("line 2: SF303 Moving a module to the GPU syncs once per parameter (predicted) ×4, "
                               "paid once: the line runs once")
    chains = tuple((f"a.py:{n}", "m.py:3") for n in range(5))
    assert text_line(Diagnostic("m.py", 3, 5, 3, 9, "SF101", "m", chains=chains)).endswith(
        "(called from a.py:0; a.py:1; a.py:2; 2 more call chains)")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="code positions (co_positions) are Python 3.11+")
def test_run_gives_the_exact_columns_of_the_call_as_check_does_and_a_watch_prints_the_same_line(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "t1.py").write_text(SCRIPT)
    (tmp_path / "t2.py").write_text("import syncfree\nwith syncfree.watch() as w:\n"
                                    + textwrap.indent(SCRIPT, "    ") + "print(w.report)\n")
    # A call over two lines with a comment between them: the range is its first line's code.
    (tmp_path / "t3.py").write_text(SCRIPT.replace("x.sum().item()  # a comment (with `.item()` in it)",
                                                   "float(x.sum()  # a comment\n              )"))
    commands = [("-m", "syncfree", "run", "t1.py"), ("-m", "syncfree", "check", "t1.py"),
                ("-m", "syncfree", "run", "--format", "sarif", "t1.py"), ("t2.py",),
                ("-m", "syncfree", "run", "--format", "json", "t3.py")]
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        run, check, sarif, watch, split = pool.map(lambda argv: python(*argv, cwd=tmp_path), commands)
    # The call `x.sum().item()` (columns 9 to 22), not the line's start nor its comment: check's columns.
    assert run.stdout.startswith("t1.py:4:9: SF101 `.item()` waits for the GPU (predicted) ×3\n"), run.stdout
    assert check.stdout.startswith("t1.py:4:9: SF101 "), check.stdout
    [result] = json.loads(sarif.stdout)["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"], region["endLine"], region["endColumn"]) == (4, 9, 4, 23)
    assert result["message"]["text"] == "`.item()` waits for the GPU (predicted)"
    # A watch's report: the same layout, figures and all (its line is a line further down).
    assert "\n  t2.py:6:13: SF101 `.item()` waits for the GPU (predicted) ×3\n" in watch.stdout, watch.stdout
    [row] = json.loads(split.stdout)
    assert (row["line"], row["col"], row["end_line"], row["end_col"]) == (4, 9, 4, 22), row  # `float(x.sum()`


def test_a_notebook_row_and_a_cell_reports_text_are_at_the_call_that_synced():
    from syncfree.cli.run_notebook import _cell_site_diagnostic
    from syncfree.report import build_report, device_info, report_text, validate_report

    source = "x = t.sum().item()  # the loss\n"
    site = {"line": 1, "kind": "item", "count": 2, "blocked_ms": None, "rule": "SF101", "chain": [1],
            "frames": [], "message": "`.item()` would sync 2x (predicted on CPU)", "label": "`.item()`",
            "predicted": True, "range": {"line": 1, "col": 4, "end_line": 1, "end_col": 18}}
    d = _cell_site_diagnostic("nb.ipynb", 3, {"source": source, "id": "c1"}, {"mode": "predict"}, site)
    assert (d.line, d.col, d.end_line, d.end_col) == (1, 5, 1, 19)  # `t.sum().item()`, the comment left out
    assert text_line(d) == "nb.ipynb:cell 3:line 1:col 5: SF101 `.item()` waits for the GPU (predicted) ×2"
    report = build_report(source=source, device=device_info("predict"), mode="predict", sites=[site])
    validate_report(report)  # report.schema.json's SyncSite.range
    assert report_text(report).splitlines()[1] == "  line 1:col 5: SF101 `.item()` waits for the GPU (predicted) ×2"
    # Without a range (a report written before it): the line, and in `run` the line's code without its comment.
    del site["range"]
    assert report_text(build_report(source=source, device=device_info("predict"), mode="predict", sites=[site])
                       ).splitlines()[1] == "  line 1: SF101 `.item()` waits for the GPU (predicted) ×2"
    d = _cell_site_diagnostic("nb.ipynb", 3, {"source": source, "id": "c1"}, {"mode": "predict"}, site)
    assert (d.col, d.end_col) == (1, 19)
