"""An example test suite guarded by syncfree: `pytest examples/pytest_suite`.

The plugin loads itself once syncfree is installed. Without a CUDA device the marked tests
and their fixtures run on CPU stand-ins, so `device="cuda"` works on a CPU-only CI. Two of
these tests fail on purpose, to show the message.
"""

import pytest
import torch

from model import count_positive, normalize, positive_values


@pytest.fixture
def batch():
    return torch.randn(1024, device="cuda")


@pytest.mark.sync_free
def test_normalize_is_sync_free(batch):
    out = normalize(batch)
    assert out.shape == batch.shape


@pytest.mark.sync_free
def test_count_positive_is_sync_free(batch):  # fails: .item() in model.py
    assert count_positive(batch) >= 0


@pytest.mark.sync_free(budget=1)
def test_positive_values_within_budget(batch):
    assert positive_values(batch).numel() <= batch.numel()


def test_fixture_blocks(syncfree, batch):
    with syncfree.watch() as w:
        for _ in range(2):
            count_positive(batch)
    assert w.report.syncs == 2
    site = w.report.sites[0]
    assert (site.kind, site.count, site.file.endswith("model.py")) == ("item", 2, True)


@pytest.mark.sync_free
def test_print_is_a_sync(batch):  # fails: printing a CUDA tensor copies it to the host
    print(batch[:4])
