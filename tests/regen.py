"""scripts/regen_fixtures.py, loaded once for the golden-fixture tests (it is a script, not a package module)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("regen_fixtures", ROOT / "scripts" / "regen_fixtures.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)
