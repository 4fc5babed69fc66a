"""The 73 measured patterns (data/patterns-torch2.11-h200.json) under SyncRecorder on CUDA.

For each pattern: as many syncs as torch's debug mode raised when it was measured, all on
the right cell line and of the right kind. One summary line per pattern goes to stdout
(``syncfree-gpu ...``; ``pytest -rA`` shows it).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

# A copy of ../shared/data/patterns-torch2.11-h200.json: only the repository travels to
# the GPU machine.
DATA = Path(__file__).with_name("data") / "patterns-torch2.11-h200.json"
PATTERNS: dict[str, dict] = json.loads(DATA.read_text(encoding="utf-8"))["patterns"]

# What the recorder must count where it differs from the measured debug-mode warnings:
# 'item' was measured first in its process and also counted torch's one-time "prototype
# feature" warning; torch.cuda.synchronize() and Event.synchronize() raise no debug-mode
# warning, but the recorder's explicit wrappers count them.
COUNT = {"item": 1, "cuda_synchronize": 1, "event_synchronize": 1}

# The kind each syncing pattern must be reported as.
KIND = {
    "item": "item", "float_tensor": "python_scalar", "int_tensor": "python_scalar",
    "print_tensor": "print", "fstring_tensor": "format", "tolist": "tolist",
    "cpu": "to_host", "to_cpu": "to_host", "numpy_via_cpu": "to_host",
    "cuda_pageable": "to_device", "to_cuda_pageable": "to_device",
    "type_LongTensor": "to_host", "tensor_list_cuda": "tensor_from_python",
    "tensor_scalar_cuda": "tensor_from_python", "as_tensor_numpy_cuda": "tensor_from_python",
    "cuda_BoolTensor": "tensor_from_python", "if_item": "item", "if_tensor": "python_bool",
    "python_max": "python_bool", "is_nonzero": "python_bool", "index_cpu_idx": "index",
    "index_list": "index", "setitem_scalar_gpuidx": "index_put",
    "setitem_int_scalar": "index_put", "slice_cuda_bounds": "slice_bounds",
    "mask_index": "mask_index", "nonzero": "nonzero", "masked_select": "masked_select",
    "unique": "unique", "repeat_interleave": "repeat_interleave", "bincount": "bincount",
    "bincount_minlength": "bincount", "any_item": "python_bool", "allclose": "allclose",
    "cuda_synchronize": "explicit", "stream_synchronize": "stream_sync",
    "event_synchronize": "explicit", "three_items": "item", "stacked_once": "to_host",
    "clip_grad_norm_nonfinite": "library", "histc": "histc", "nan_check_any": "item",
    "len_nonzero": "nonzero", "nonzero_as_tuple": "nonzero", "sum_bool_item": "item",
}

# The cell line of the sync where it is not the pattern's first line.
LINE = {"event_synchronize": 3, "clip_grad_norm_nonfinite": 2}


def expected_sites(name: str) -> list[tuple[int, str, int]]:
    """(line, kind, count) for each site the pattern must produce, by line."""
    count = COUNT.get(name, PATTERNS[name]["sync_warnings"])
    if count == 0:
        return []
    if name == "three_items":  # one .item() on each of three lines
        return [(1, "item", 1), (2, "item", 1), (3, "item", 1)]
    return [(LINE.get(name, 1), KIND[name], count)]


def test_every_measured_pattern_has_an_expectation():
    assert len(PATTERNS) == 73
    syncing = {name for name, p in PATTERNS.items() if COUNT.get(name, p["sync_warnings"])}
    assert syncing == set(KIND)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern(name, cell, cuda_namespace):
    import torch

    code = PATTERNS[name]["code"]
    if "np." in code and importlib.util.find_spec("numpy") is None:
        pytest.skip("numpy is not installed")
    c = cell(code + "\n")
    recorder = c.recorder("warn")
    with recorder:
        exec(c.code, cuda_namespace)
    torch.cuda.synchronize()
    got = [(s.line, s.kind, s.count) for s in recorder.sites]
    expected = expected_sites(name)
    rules = ",".join(sorted({s.rule or "-" for s in recorder.sites})) or "-"
    verdict = "ok" if got == expected and recorder.syncs == sum(e[2] for e in expected) else "MISMATCH"
    print(f"syncfree-gpu pattern {name:30s} syncs={recorder.syncs:<2d} sites={got} "
          f"rules={rules} {verdict}")
    assert got == expected, f"{name}: {code!r}"
    assert recorder.syncs == sum(e[2] for e in expected), recorder.report_fields()["notes"]
