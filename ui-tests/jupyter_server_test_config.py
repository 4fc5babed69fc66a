"""Server configuration for the galata UI tests (never use it in production)."""
import getpass
import os
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821

c.ServerApp.port = int(os.environ.get("SYNCFREE_UI_PORT", "8888"))  # noqa: F821

# CI runs as root.
if getpass.getuser() == "root":
    c.ServerApp.allow_root = True  # noqa: F821

# Serve the notebook fixtures from a scratch copy so that tests may save them.
c.ServerApp.root_dir = os.environ.get("SYNCFREE_UI_ROOT", str(Path(__file__).parent / ".root"))  # noqa: F821
Path(c.ServerApp.root_dir).mkdir(parents=True, exist_ok=True)  # noqa: F821
c.LabApp.news_url = None  # noqa: F821
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"  # noqa: F821
