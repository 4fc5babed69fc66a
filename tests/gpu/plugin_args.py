"""The ``-p`` a pytest run in a GPU test needs to load syncfree's plugin.

Where syncfree is installed (a wheel, ``pip install -e .``) its pytest11 entry point loads the plugin, and
``-p syncfree.pytest_plugin`` on top of it fails ("Plugin already registered"); where it only is on
PYTHONPATH (``make test-gpu`` from a checkout) nothing loads it without ``-p``.
"""

from __future__ import annotations

from importlib.metadata import entry_points


def plugin_args() -> list[str]:
    installed = any(ep.value == "syncfree.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "syncfree.pytest_plugin"]
