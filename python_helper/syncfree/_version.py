# The one Python version of both distributions (syncfree reads it here; jupyterlab-syncfree takes package.json's,
# which must be the same: tests/test_packaging.py checks, and its dependency pins syncfree to it).
__version__ = "0.1.0"
