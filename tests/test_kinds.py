"""The sync kinds and their labels are defined once (syncfree/kinds.py); the other lists
derive from it, and reports carry each site's label so the frontends show user words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import syncfree
from syncfree import capture, catalog, kinds
from syncfree.capture.sites import SiteTable
from syncfree.report import build_report, device_info, validate_report

SCHEMA = Path(syncfree.__file__).with_name("report.schema.json")


def test_every_kind_has_a_label_in_user_words():
    assert kinds.KINDS == tuple(kinds.KIND_LABELS)
    assert len(set(kinds.KINDS)) == len(kinds.KINDS)
    for kind, label in kinds.KIND_LABELS.items():
        assert label and label != kind, kind  # never the internal id
        assert label.count("`") % 2 == 0, label  # code spans are closed
        assert len(label) <= 200


def test_other_lists_are_the_same_object():
    assert catalog.KINDS is kinds.KINDS
    assert capture.KINDS is kinds.KINDS
    assert capture.kind_label is kinds.kind_label


def test_schema_description_lists_exactly_the_kinds():
    schema = json.loads(SCHEMA.read_text())
    description = schema["definitions"]["SyncSite"]["properties"]["kind"]["description"]
    listed = re.search(r":\s*(.*)\.$", description).group(1).split(", ")
    assert tuple(listed) == kinds.KINDS


def test_predicted_kinds_and_rule_kinds_are_known():
    from syncfree.capture.predict import PREDICTED_KINDS

    assert PREDICTED_KINDS <= set(kinds.KINDS)
    assert {rule.kind for rule in catalog.RULES.values()} <= set(kinds.KINDS)


def test_report_sites_carry_their_label_and_old_reports_stay_valid():
    table = SiteTable()
    for site in (table.site_for((3,), "mask_index", "SF601", (), None, False),
                 table.site_for((4,), "explicit", None, (), None, False, detail="torch.cuda.synchronize()")):
        site.count = 1
    sites = [s.to_report() for s in table.sites()]
    assert [s["label"] for s in sites] == ["boolean-mask indexing", "`torch.cuda.synchronize()`"]
    report = build_report(source="x\n" * 4, device=device_info("none"), mode="warn", sites=sites)
    validate_report(report)
    for site in report["sites"]:
        del site["label"]  # a report written before the field existed
    validate_report(report)
