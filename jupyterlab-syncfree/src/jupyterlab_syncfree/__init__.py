"""jupyterlab-syncfree: the prebuilt JupyterLab extension of syncfree.

The extension itself is installed as data files (``share/jupyter/labextensions/jupyterlab-syncfree``), where
JupyterLab finds prebuilt extensions; everything that runs in the kernel or on the command line is the ``syncfree``
package, a dependency of this one at the same version. This module only names the version.
"""

from syncfree._version import __version__

__all__ = ["__version__"]
