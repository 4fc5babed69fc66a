"""Code under test for the example suite (examples/pytest_suite)."""

import torch


def normalize(x):
    """Sync-free: everything stays on the device."""
    return (x - x.mean()) / x.std().clamp_min(1e-6)


def count_positive(x):
    """Syncs: .item() copies the count to the host."""
    return (x > 0).sum().item()


def positive_values(x):
    """Syncs: boolean-mask indexing needs the number of selected elements on the host."""
    return x[x > 0]
