"""syncfree: find host-device synchronizations in PyTorch code.

In a notebook: ``%load_ext syncfree``, then put ``%%syncfree`` on a cell (see
``%%syncfree?``). In Python code::

    with syncfree.watch() as w:        # this thread's (or asyncio task's) syncs
        train_step()
    print(w.report)

    @syncfree.watch(on_report=print)   # each call (functions, generators, async code)
    def train_step(): ...

    with syncfree.sync_free():         # SyncError at the end of the block, listing every site
        train_step()

In a test suite: ``@pytest.mark.sync_free`` and the ``syncfree`` fixture (the plugin loads
itself). On the command line: ``syncfree run train.py``. The jupyterlab-syncfree package
adds the JupyterLab extension that shows the reports as gutter markers, hover cards and a
sidebar.

Importing this package imports neither IPython nor torch: the magic module is loaded by
`load_ipython_extension`, and torch by the recorder when a cell runs.

PYTEST_DONT_REWRITE: pytest rewrites the asserts of a plugin's package, and warns when it was
imported first (``syncfree run -m pytest`` has; a ``-W error`` suite then stopped at start-up).
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


_WATCH_API = ("watch", "sync_free", "SyncError", "NotJudged", "Watch", "WatchReport")
_API = (*_WATCH_API, "run_script")


def __getattr__(name):
    # The API lives in syncfree.watches and syncfree.script_run, imported on first use (importing syncfree stays
    # cheap).
    if name in _WATCH_API:
        from . import watches

        return getattr(watches, name)
    if name == "run_script":
        from . import script_run

        return script_run.run_script
    raise AttributeError(f"module 'syncfree' has no attribute {name!r}")


__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension", *_API]
