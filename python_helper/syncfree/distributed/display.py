"""A merged report in Jupyter: one display output that the JupyterLab extension renders as
a table (src/merged/: a column per rank, divergent sites marked, sites that open their
file), with the text of ``syncfree merge`` for every other frontend (VS Code, nbconvert,
a terminal IPython).

    display_merged(MergedReport.from_directory("syncfree-ranks"))

`%syncfree merge DIR` and `%syncfree run --nproc-per-node N train.py` (magic.py) show it
so; a `MergedReport` that is a cell's last expression displays itself the same way.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from .merge import SPREAD_AFTER, MergedReport

__all__ = ["MAX_SITES", "MIME_TYPE", "SCHEMA_PATH", "display_merged", "merged_data", "mime_bundle",
           "validate_merged"]

#: The MIME type of a merged report (src/merged/tokens.ts says the same).
MIME_TYPE = "application/vnd.syncfree.merged.v1+json"
SCHEMA_PATH = Path(__file__).with_name("merged.schema.json")
#: The most sites a displayed report carries (merged.schema.json: sites maxItems); the
#: least costly are left out, and counted in ``truncated``.
MAX_SITES = 1000


def merged_data(merged: MergedReport) -> dict[str, Any]:
    """The MIME type's data: the merge as a dict, plus what the renderer needs to show it
    (merged.schema.json)."""
    data = merged.to_dict()
    sites = data["sites"]
    data["truncated"] = max(len(sites) - MAX_SITES, 0)
    data["sites"] = sites[:MAX_SITES]  # ranked costliest first
    data["version"] = 1
    data["spread_after"] = SPREAD_AFTER
    data["directory"] = merged.directory
    # JupyterLab names its root with '~' for the home folder (jupyter_server's
    # server_root_dir); the renderer maps the sites' absolute paths through it.
    home = os.path.expanduser("~")
    data["home"] = home if home != "~" else None
    return data


def mime_bundle(merged: MergedReport) -> dict[str, Any]:
    return {MIME_TYPE: merged_data(merged), "text/plain": merged.text()}


def display_merged(merged: MergedReport) -> None:
    """One display output carrying the merged report (needs IPython, imported here only)."""
    from IPython.display import display

    display(mime_bundle(merged), raw=True)


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def validate_merged(data: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` is a valid merged report (needs
    the ``jsonschema`` package, the ``test`` extra)."""
    _validator().validate(data)
    if json.loads(json.dumps(data)) != data:
        raise ValueError("merged report does not survive a JSON round trip")
