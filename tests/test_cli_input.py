"""Bad input to `syncfree check|run`, as a shell sees it: one line on stderr, exit 2, no traceback; and source files
read as Python reads them (a BOM, a PEP 263 coding line)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYNCING = "import torch\nx = torch.randn(4, device='cuda')\ns = x.sum().item()\n"


def syncfree(*argv: str, cwd: Path | None = None, stdin: str | None = None, env: dict | None = None):
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "python_helper"), **(env or {})}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "syncfree", *argv], capture_output=True, text=True, cwd=cwd,
                          input=stdin, env=environment, timeout=120)


def one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one line on stderr that holds ``words``, and no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("syncfree: error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


# --------------------------------------------------------------------------------------------- [tool.syncfree]
@pytest.mark.parametrize("line, words", [
    ('select = ["SF999"]', ("select", "'SF999' matches no rule code")),
    ('ignore = ["SF1", "XX"]', ("ignore", "'XX' matches no rule code")),
    ('select = "SF1,SF2"', ("select must be a list of codes", '"SF1,SF2"')),
    ('exclude = "data"', ("exclude must be a list of glob patterns",)),
])
def test_bad_rule_selection_in_the_config_is_one_line(tmp_path, line, words):
    (tmp_path / "pyproject.toml").write_text(f"[tool.syncfree]\n{line}\n")
    (tmp_path / "a.py").write_text(SYNCING)
    one_line_error(syncfree("check", "a.py", cwd=tmp_path), "pyproject.toml", *words)
    one_line_error(syncfree("run", "a.py", cwd=tmp_path), "pyproject.toml", *words)
