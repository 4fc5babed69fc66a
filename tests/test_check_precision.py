"""The labelled sample of tests/data/check_precision.json as a test of the rules (issue 23).

Findings of ``syncfree check`` on large installed libraries were read by hand (bench/check_precision.py draws them):
here each labelled file is checked again as the command checks it, and

- every finding labelled true is still reported (the rules keep what they found on real code);
- the strict precision of the labelled findings still reported stays at or above the library's floor in the file
  (a finding labelled false or plausible that a change brings back lowers it).

The libraries are read, not imported: ``pip install --no-deps`` of the Makefile's CORPUS_PINS (transformers, timm,
torchmetrics, lightning, and diffusers, kornia, torch_geometric and monai, added by issue 40 as libraries the rules were
not tuned on; ``make install`` does it; gpytorch 1.15.2, added later by issue 40, and pyro-ppl 1.9.2, ultralytics
8.4.190, speechbrain 1.1.2 and botorch 0.18.1, held out: labelled before the fixes they led to; peft 0.21.2, pytorch-ignite
0.5.5 and stable-baselines3 2.9.2, held out and labelled after the last rule change, never tuned on; and sentence-transformers
6.2.0 and torchtune 0.6.1, held out the same way after issue 40's fourth round, torchrl 0.14.1 and flair 0.15.1 after
its fifth, captum 0.9.0 and pytorch-metric-learning 2.9.0 after its sixth, trl 1.16.0 and lightly 1.6.0 after its
seventh, fastai 2.8.12 and mosaicml (composer) 0.32.1 after its eighth, tianshou 2.0.1 and mmengine 0.10.7 after
its ninth, accelerate 1.15.0 and pykeen 1.11.1 before its tenth's fixes, and skorch 1.4.0 and neuralforecast 3.3.0
after them). A library missing, or at another version, skips its case.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest

from syncfree.cli.check import check_file

LABELS = json.loads((Path(__file__).resolve().parent / "data" / "check_precision.json").read_text())


def _folder(name: str, version: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip(f"{name} is not installed (pip install --no-deps {name}=={version})")
    distributions = importlib.metadata.packages_distributions().get(name) or [name]  # pyro comes from pyro-ppl
    installed = importlib.metadata.version(distributions[0])
    if installed != version:
        pytest.skip(f"the labels are for {name} {version}, {installed} is installed")
    return Path(spec.origin).parent


def _reported(folder: Path, files: set[str]) -> set[tuple[str, int, str]]:
    found = set()
    for file in sorted(files):
        result = check_file(folder / file)
        assert result.problem is None, result.problem
        found.update((file, d.line, d.rule) for d in result.diagnostics)
    return found


@pytest.mark.parametrize("library", sorted(LABELS["libraries"]))
def test_labelled_findings(library):
    entry = LABELS["libraries"][library]
    folder = _folder(library, entry["version"])
    labelled = entry["findings"]
    reported = _reported(folder, {finding["file"] for finding in labelled})
    key = lambda finding: (finding["file"], finding["line"], finding["rule"])  # noqa: E731
    lost = [f"{f['file']}:{f['line']} {f['rule']}" for f in labelled if f["verdict"] == "true" and key(f) not in reported]
    assert not lost, f"{library}: findings labelled true are no longer reported: {lost}"
    still = [f for f in labelled if key(f) in reported]
    precision = sum(f["verdict"] == "true" for f in still) / len(still)
    assert precision >= entry["precision_floor"], (
        f"{library}: sampled precision {precision:.2f} < {entry['precision_floor']}: reported again "
        f"{[key(f) for f in still if f['verdict'] != 'true']}"
    )
