"""The prebuilt labextension as the wheel's data files (share/jupyter/labextensions/jupyterlab-syncfree), in
standard wheels only.

Not in editable installs: there ``make install`` links that folder to the build output
(python_helper/syncfree/labextension), and data files that pip installed through the link would be deleted through
it by the next reinstall, taking the build with them.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUILD = "../python_helper/syncfree/labextension"
SHARE = "share/jupyter/labextensions/jupyterlab-syncfree"


class LabextensionDataHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version != "standard":
            return
        # The build's three outputs one by one, not the whole folder: a stray install.json there (`jupyter
        # labextension develop` writes one) would be added twice.
        build_data["shared_data"].update({
            f"{BUILD}/package.json": f"{SHARE}/package.json",
            f"{BUILD}/static": f"{SHARE}/static",
            f"{BUILD}/schemas": f"{SHARE}/schemas",
            "../install.json": f"{SHARE}/install.json",
        })
