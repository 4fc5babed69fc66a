"""report.py: the report dict against the schema, its HTML (escaped) and text renderings."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from syncfree import catalog
from syncfree.analyze import analyze_source
from syncfree.capture.sites import SyncSite
from syncfree.report import (
    MIME_TYPE,
    build_report,
    device_info,
    mime_bundle,
    report_html,
    report_text,
    source_hash,
    validate_report,
)

jsonschema = pytest.importorskip("jsonschema")

CELL = "%%syncfree\nx = model(batch)\nloss = x.sum().item()\nprint(loss)\n"
DEVICE = {"kind": "cuda", "name": "NVIDIA H200", "torch": "2.11.0+cu130"}


def item_site(count=64, blocked_s=0.0412):
    site = SyncSite((3,), "item", catalog.rule_for_kind("item"), (), None, False)
    site.count, site.blocked_s, site.measured = count, blocked_s, count
    return site.to_report()


def test_a_full_report_is_valid_and_carries_every_rule_it_names():
    findings = analyze_source(CELL)
    report = build_report(source=CELL, device=DEVICE, mode="warn", sites=[item_site()],
                          findings=findings, syncs=66, wall_ms=120.25, cell_id="c-1",
                          notes=["2 sync(s) in thread 'loader' ran outside the cell's code"])
    validate_report(report)
    assert report["source_hash"] == "sha256:" + hashlib.sha256(CELL.encode()).hexdigest()
    assert report["totals"] == {"syncs": 66, "sites": 1, "cost_ms": None, "gpu_busy_ms": None, "gpu_idle_ms": None,
                                "blocked_ms": 41.2, "wall_ms": 120.25}
    named = {s["rule"] for s in report["sites"]} | {f["rule"] for f in findings}
    assert named and set(report["rules"]) == named
    for code, rule in report["rules"].items():
        assert rule == catalog.get(code).to_report()
    assert any(f["range"]["line"] == 3 for f in findings)


def test_an_empty_report_is_valid():
    report = build_report(source="x = 1", device=device_info("none"), mode="static")
    validate_report(report)
    assert report["totals"] == {"syncs": 0, "sites": 0, "cost_ms": None, "gpu_busy_ms": None, "gpu_idle_ms": None,
                                "blocked_ms": None, "wall_ms": 0.0}
    assert report["rules"] == {} and report["error"] is None and report["cell_id"] is None


def test_blocked_total_is_null_when_nothing_was_measured():
    site = item_site()
    site["blocked_ms"] = None
    report = build_report(source=CELL, device=DEVICE, mode="warn", sites=[site])
    assert report["totals"]["blocked_ms"] is None
    validate_report(report)


def test_lists_are_capped_with_flags():
    finding = analyze_source("x.item()\n")[0]
    report = build_report(source="x", device=DEVICE, mode="warn", findings=[finding] * 1001,
                          notes=[f"note {i}" for i in range(25)], truncated_sites=True)
    validate_report(report)
    assert len(report["findings"]) == 1000
    assert report["truncated"] == {"sites": True, "findings": True, "frames": False}
    assert len(report["notes"]) == 20 and report["notes"][-1] == "... and 7 more notes"
    few = build_report(source="x", device=DEVICE, mode="warn", findings=[finding] * 1001)
    assert few["notes"] == ["static findings: the first 1,000, up to line 1; syncs after it are still "
                            "counted and named"]


def test_validation_rejects_what_the_schema_forbids():
    report = build_report(source=CELL, device=DEVICE, mode="warn", sites=[item_site()])
    for broken in (
        {**report, "mode": "loud"},
        {**report, "sites": [{**report["sites"][0], "line": 0}]},
        {**report, "extra": 1},
        {k: v for k, v in report.items() if k != "totals"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate_report(broken)


def test_html_escapes_every_string():
    hostile = "<img src=x onerror=alert(1)>"
    site = item_site()
    site["message"] = hostile
    report = build_report(source=CELL, device={**DEVICE, "name": hostile}, mode="warn",
                          sites=[site], notes=[hostile],
                          error={"type": "ValueError", "message": hostile, "line": 3})
    html = report_html(report)
    assert "<img" not in html and "onerror=alert(1)>" not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") == 4
    assert set(re.findall(r"<(\w+)", html)) <= {"div", "table", "thead", "tbody", "tr", "th", "td", "span"}


def test_html_and_text_summaries():
    findings = analyze_source(CELL)
    report = build_report(source=CELL, device=DEVICE, mode="warn", sites=[item_site()],
                          findings=findings, wall_ms=12.5)
    text = report_text(report)
    rule = report["sites"][0]["rule"]
    assert text.splitlines()[0] == ("syncfree (warn, NVIDIA H200): 64 syncs at 1 site, "
                                    "blocked 41.2 ms, cell ran 12.5 ms")
    # The layout of every text surface (syncfree.output.text_line): location, code, message, then the figures.
    assert text.splitlines()[1] == f"  line 3: {rule} `.item()` waits for the GPU ×64, blocked 41.2 ms"
    html = report_html(report)
    assert ">41.2 ms<" in html and ">64<" in html and rule in html
    assert "color:#" not in html and "background" not in html  # inherits the theme's colours


def test_static_and_predict_summaries():
    static = build_report(source=CELL, device=device_info("none"), mode="static",
                          findings=analyze_source(CELL), notes=["torch is not installed"])
    assert report_text(static).startswith("syncfree (static, ")
    assert "static finding" in report_text(static).splitlines()[0]
    assert "  line 3:col 8: SF101 " in report_text(static) and " (static check)" in report_text(static)
    site = item_site()
    site.update(predicted=True, blocked_ms=None, message="`.item()` would sync 1x (predicted on CPU)")
    predicted = build_report(source=CELL, device=device_info("predict"), mode="predict", sites=[site])
    validate_report(predicted)
    assert "(predicted)" in report_text(predicted).splitlines()[0]


def test_mime_bundle_is_json_serialisable():
    report = build_report(source=CELL, device=DEVICE, mode="warn", sites=[item_site()])
    bundle = mime_bundle(report)
    assert set(bundle) == {MIME_TYPE, "text/html", "text/plain"}
    assert json.loads(json.dumps(bundle))[MIME_TYPE] == report
    assert MIME_TYPE == "application/vnd.syncfree.report.v1+json"


def test_source_hash_and_device_kinds():
    assert source_hash("é") == "sha256:" + hashlib.sha256("é".encode()).hexdigest()
    assert device_info("predict", "x")["kind"] == "predict"
    with pytest.raises(ValueError):
        device_info("tpu")


def test_a_recurring_sites_first_call_in_the_text_and_html():
    site = SyncSite((3,), "item", "SF101", (), None, False, first_s=0.098)
    site.count, site.blocked_s, site.measured = 20, 0.098 + 19 * 0.000013, 20
    once = SyncSite((2,), "to_device", "SF303", (), None, False, phase="once", first_s=0.004)
    once.count, once.blocked_s, once.measured = 16, 0.120, 16
    report = build_report(source=CELL, device=DEVICE, mode="warn", sites=[site.to_report(), once.to_report()])
    validate_report(report)
    assert report["sites"][0]["first_ms"] == 98.0
    text = report_text(report).splitlines()
    assert text[1] == ("  line 3: SF101 `.item()` waits for the GPU ×20, blocked 98.2 ms (first sync 98.0 ms, "
                       "then 0.013 ms per sync ×19)")
    # All of a one-off site is paid once: no split.
    assert text[2] == ("  line 2: SF303 Moving a module to the GPU syncs once per parameter ×16, blocked 120.0 ms, "
                       "paid once: the line runs once")
    assert "(first sync 98.0 ms, then 0.013 ms per sync ×19)" in report_html(report)
    # Reports written before first_ms, and negative times, per the schema.
    old = dict(report, sites=[{k: v for k, v in s.items() if k != "first_ms"} for s in report["sites"]])
    validate_report(old)
    with pytest.raises(jsonschema.ValidationError):
        validate_report(dict(report, sites=[dict(report["sites"][0], first_ms=-1.0)]))


def test_a_site_that_synced_once_has_no_split():
    from syncfree.output import first_call_text

    assert first_call_text(1, 5.0, 5.0) == ""
    assert first_call_text(3, 5.0, None) == "" and first_call_text(3, None, None) == ""
    assert first_call_text(4, 9.0, 6.0, firsts=2) == "first syncs 6.00 ms, then 1.50 ms per sync ×2"


def test_a_cell_site_carries_the_text_of_its_chain_lines():
    """The notebook finds a site's line again by its text (issue 39): after a line is typed
    above it, after a move or a reopen, and compares runs by it, not by line number."""
    site = SyncSite((2, 3), "item", catalog.rule_for_kind("item"), (), None, False)
    site.count = 1
    long_line = "y = " + "x" * 300
    report = build_report(source=CELL + "  " + long_line + "\n", device=DEVICE, mode="warn",
                          sites=[site.to_report(), {**item_site(), "line": 5, "chain": [5]}])
    validate_report(report)
    assert report["sites"][0]["chain_text"] == ["x = model(batch)", "loss = x.sum().item()"]
    assert report["sites"][1]["chain_text"] == [long_line[:200]]
    # Lines are counted as the compiler counts them: a form feed inside a line is no line break.
    ff = build_report(source="%%syncfree\nx = 1  # \x0c page\nloss = x.sum().item()\n", device=DEVICE,
                      mode="warn", sites=[item_site()])
    assert ff["sites"][0]["chain_text"] == ["loss = x.sum().item()"]
    past_end = build_report(source="x = 1\n", device=DEVICE, mode="warn", sites=[item_site()])
    assert "chain_text" not in past_end["sites"][0]
