"""syncfree: find host-device synchronizations in PyTorch notebook code.

In a notebook: ``%load_ext syncfree``, then put ``%%syncfree`` on a cell (see
``%%syncfree?``). The package also holds the prebuilt JupyterLab extension that shows the
reports as gutter markers, hover cards and a sidebar.

Importing this package imports neither IPython nor torch: the magic module is loaded by
`load_ipython_extension`, and torch by the recorder when a cell runs.
"""

try:
    from ._version import __version__  # written by the build (hatch version hook)
except ImportError:  # a source checkout that was never built
    __version__ = "0.0.0"


def _jupyter_labextension_paths():
    """Where JupyterLab finds the prebuilt extension inside this package."""
    return [{"src": "labextension", "dest": "jupyterlab-syncfree"}]


def load_ipython_extension(ip):
    """``%load_ext syncfree``: register ``%%syncfree`` and ``%syncfree``."""
    from .magic import load_ipython_extension as load

    load(ip)


def unload_ipython_extension(ip):
    """``%unload_ext syncfree``: remove the magics and stop watching cells."""
    from .magic import unload_ipython_extension as unload

    unload(ip)


__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension"]
