"""Server configuration for the galata UI tests (never use it in production)."""
import atexit
import getpass
import glob
import os
import shutil
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

# galata makes a root folder (replaced below), a workspaces folder and a shell rc file in the temporary folder and
# leaves them there: each run of the UI tests left two folders behind. The root it made (empty: its default is made
# even where the environment names another) goes now, the others at exit.
ROOT = os.environ.get("SYNCFREE_UI_ROOT", str(Path(__file__).parent / ".root"))
os.environ["JUPYTERLAB_GALATA_ROOT_DIR"] = ROOT
_roots_before = set(glob.glob(os.path.join(tempfile.gettempdir(), "galata-test-*")))
configure_jupyter_server(c)  # noqa: F821
for _made in set(glob.glob(os.path.join(tempfile.gettempdir(), "galata-test-*"))) - _roots_before:
    shutil.rmtree(_made, ignore_errors=True)
atexit.register(shutil.rmtree, c.LabApp.workspaces_dir, ignore_errors=True)  # noqa: F821
_rcfile = c.ServerApp.terminado_settings.get("shell_command", [None])[-1]  # noqa: F821
if _rcfile and os.path.basename(_rcfile).startswith("tmp"):
    atexit.register(lambda: os.path.exists(_rcfile) and os.remove(_rcfile))

c.ServerApp.port = int(os.environ.get("SYNCFREE_UI_PORT", "8888"))  # noqa: F821

# CI runs as root.
if getpass.getuser() == "root":
    c.ServerApp.allow_root = True  # noqa: F821

# Serve the notebook fixtures from a scratch copy so that tests may save them.
c.ServerApp.root_dir = ROOT  # noqa: F821
Path(c.ServerApp.root_dir).mkdir(parents=True, exist_ok=True)  # noqa: F821
c.LabApp.news_url = None  # noqa: F821
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"  # noqa: F821
