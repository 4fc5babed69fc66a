"""The names syncfree adds to pytest: the ``sync_free`` marker and the ``--syncfree``
options (entry point ``pytest11`` ``syncfree-marker``).

A plugin of its own, apart from the one that watches tests (`syncfree.pytest_plugin`,
entry point ``syncfree``): ``-p no:syncfree`` turns watching off, and a suite that
marks tests, runs with ``--strict-markers`` or keeps ``--syncfree`` in its ``addopts``
still collects and runs, its marked tests as plain tests. Both plugins call the two
functions below, which add each name once, so either loads alone as well.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

MARKER = "sync_free"

MARKER_LINE = (f"{MARKER}(budget=0, mode=None): fail the test when its body synchronizes the "
               "host with the GPU more than `budget` times (syncfree; predicted on CPU without "
               "CUDA); budget_ms=MS: or when its syncs lose more than MS ms of GPU time (measured on a GPU)")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("syncfree", "host-device synchronizations (syncfree)")
    if any("--syncfree" in option.names() for option in group.options):
        return
    group.addoption("--syncfree", action="store_true", default=False,
                    help="watch every test for host-device syncs and rank them in the summary "
                         "(predicted on the CPU without CUDA)")
    group.addoption("--syncfree-mode", choices=("warn", "error", "predict"), default=None,
                    help="engine mode for marked and watched tests (default: warn with CUDA, "
                         "predict without)")
    group.addoption("--syncfree-cost", action="store_true", default=False,
                    help="measure what each sync costs, the GPU time it loses (a GPU trace; debug-mode "
                         "engine), and rank the summary by it; about 2x on a launch-bound test")
    group.addoption("--syncfree-engine", choices=("debug", "cupti", "auto"), default=None,
                    help="what sees the syncs on a GPU: torch's debug mode, CUPTI (every blocking "
                         "CUDA call, any library; pip install 'syncfree[cupti]'), or auto (default: "
                         "CUPTI once CuPy, Numba or PyCUDA is imported)")
    # --syncfree-cuda belongs to pytest_cuda.py (loaded with the watching plugin); known
    # here too, so a suite's addopts keep parsing under -p no:syncfree.
    from . import pytest_cuda

    pytest_cuda.pytest_addoption(parser)


def add_marker(config: pytest.Config) -> None:
    if MARKER_LINE not in config.getini("markers"):
        config.addinivalue_line("markers", MARKER_LINE)


#: The entry point (pyproject.toml's pytest11) of each of the two modules.
ENTRY_POINTS = {"syncfree.pytest_plugin": "syncfree", "syncfree.pytest_marker": "syncfree-marker"}


def skip_own_entry_point(module: str, plugin: Any, manager: Any) -> None:
    """``pytest -p syncfree.pytest_plugin`` where the entry point is installed: pytest registers the module under its
    own name, then loads the entry points, whose load of the same module under the entry point's name failed
    ("Plugin already registered under a different name", exit 3). The entry point is skipped then, as pytest skips
    one whose name ``-p`` gave. From each module's ``pytest_plugin_registered``, which sees its own registration."""
    if plugin is not sys.modules.get(module):
        return
    entry = ENTRY_POINTS[module]
    name = manager.get_name(plugin)
    # The other name of the same module is taken as loaded: the entry point's after `-p` (registered under the
    # module's name), the module's after the entry point (a conftest's `pytest_plugins = ["syncfree.pytest_plugin"]`
    # failed the same way, exit 1)
    other = entry if name == module else module if name == entry else None
    if other is not None and manager.get_plugin(other) is None and not manager.is_blocked(other):
        manager.set_blocked(other)


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    skip_own_entry_point(__name__, plugin, manager)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    add_marker(config)
