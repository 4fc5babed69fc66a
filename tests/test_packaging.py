"""The two distributions: the kernel-side ``syncfree`` (the repository root, what ``pip install .`` and the pre-commit
hook install) goes into a fresh virtual environment without JupyterLab and works there (command line,
``python -m syncfree``, the pytest plugin); ``jupyterlab-syncfree`` (jupyterlab-syncfree/) carries the prebuilt
extension and pins ``syncfree`` to its own version.

The fresh environment installs the wheel's dependencies (IPython and what it needs) with pip from the package index;
torch is never installed (``syncfree check`` does not need it). About a minute on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
KERNEL_PROJECT = ROOT  # the syncfree distribution
EXTENSION_PROJECT = ROOT / "jupyterlab-syncfree"
# What the kernel side must never pull in: JupyterLab and the server stack it brought before the split.
FORBIDDEN = ("jupyterlab", "jupyter-server", "jupyter-lsp", "notebook", "nbclient", "nbconvert", "torch")


def _run(command: list[str], *, cwd: Path | None = None, timeout: float = 600, env: dict | None = None):
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def _build_wheel(project: Path, into: Path) -> Path:
    # --no-build-isolation: the build backends come from the development environment (make setup installs them),
    # so the build itself needs no network.
    result = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
                   "-q", "-w", str(into), str(project)], env={**os.environ, "SKIP_JUPYTER_BUILDER": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = list(into.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _version() -> str:
    return json.loads((ROOT / "package.json").read_text())["version"]


@pytest.fixture(scope="module")
def kernel_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv holding the kernel-side wheel (and pytest, to see the plugin); returns (venv, wheel)."""
    base = tmp_path_factory.mktemp("kernel-wheel")
    wheel = _build_wheel(KERNEL_PROJECT, base / "dist")
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel), "pytest"],
                     timeout=900)
    if installed.returncode != 0 and "No matching distribution" in installed.stderr + installed.stdout:
        pytest.skip(f"the package index is not reachable: {installed.stderr.strip().splitlines()[-1]}")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv, wheel


def test_kernel_wheel_holds_the_module_and_no_labextension(kernel_venv):
    _, wheel = kernel_venv
    names = zipfile.ZipFile(wheel).namelist()
    assert "syncfree/cli/__init__.py" in names and "syncfree/report.schema.json" in names
    assert any(name.startswith("syncfree/catalog/SF101") for name in names)
    assert any(name.startswith("syncfree/data/") and name.endswith(".json") for name in names)
    assert "syncfree/_follow/sitecustomize.py" in names  # a Python subprocess's start-up hook (syncfree/programs.py)
    assert not [name for name in names if "labextension" in name]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("dist-info/METADATA"))).decode()
    assert "License-File: LICENSE" in metadata
    assert re.search(r"^Requires-Dist: ipython>=8\.10$", metadata, re.M)
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "syncfree = syncfree.cli:main" in entry_points and "[pytest11]" in entry_points


def test_fresh_venv_has_no_jupyterlab_and_no_torch(kernel_venv):
    venv, _ = kernel_venv
    listed = _run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"])
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}
    assert "syncfree" in names and "ipython" in names
    assert not names & set(FORBIDDEN), sorted(names & set(FORBIDDEN))


def test_version_command_and_module_entry(kernel_venv):
    venv, _ = kernel_venv
    script = _run([str(venv / "bin" / "syncfree"), "--version"])
    assert (script.returncode, script.stdout.strip()) == (0, f"syncfree {_version()}")
    module = _run([str(venv / "bin" / "python"), "-m", "syncfree", "--version"])
    assert (module.returncode, module.stdout.strip()) == (0, f"syncfree {_version()}")


def test_check_of_a_python_file_works_and_imports_neither_ipython_nor_nbformat(kernel_venv, tmp_path):
    venv, _ = kernel_venv
    source = tmp_path / "train.py"
    source.write_text("import torch\nx = torch.randn(8, device='cuda')\nloss = x.sum()\nprint(loss.item())\n")
    checked = _run([str(venv / "bin" / "syncfree"), "check", str(source)], cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"{source}:4:" in checked.stdout and "SF101" in checked.stdout
    probe = (
        "import sys\nfrom syncfree.cli import main\nstatus = main(['check', sys.argv[1]])\n"
        "loaded = sorted(m for m in ('IPython', 'nbformat', 'nbclient', 'jupyter_client', 'torch') if m in sys.modules)\n"
        "print(status, loaded)\n"
    )
    imported = _run([str(venv / "bin" / "python"), "-c", probe, str(source)], cwd=tmp_path)
    assert imported.stdout.strip().splitlines()[-1] == "1 []", imported.stdout + imported.stderr


def test_check_of_a_notebook_needs_no_nbformat(kernel_venv, tmp_path):
    venv, _ = kernel_venv
    notebook = tmp_path / "nb.ipynb"
    cells = [{"cell_type": "markdown", "id": "m", "metadata": {}, "source": ["# title"]},
             {"cell_type": "code", "id": "c", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ["import torch\n", "x = torch.ones(2, device='cuda')\n", "x.item()\n"]}]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    checked = _run([str(venv / "bin" / "syncfree"), "check", str(notebook)], cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"{notebook}:cell 2:line 3:" in checked.stdout


def test_running_a_notebook_without_the_notebook_extra_says_what_to_install(kernel_venv, tmp_path):
    venv, _ = kernel_venv
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    ran = _run([str(venv / "bin" / "syncfree"), "run", str(notebook)], cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.strip() == ("syncfree: error: running a notebook needs nbformat, which is not installed: "
                                  "pip install 'syncfree[notebook]'")


def test_pytest_plugin_is_registered(kernel_venv, tmp_path):
    venv, _ = kernel_venv
    markers = _run([str(venv / "bin" / "python"), "-m", "pytest", "--markers"], cwd=tmp_path)
    assert markers.returncode == 0, markers.stdout + markers.stderr
    assert "@pytest.mark.sync_free" in markers.stdout
    plugins = _run([str(venv / "bin" / "python"), "-c",
                    "from importlib.metadata import entry_points; print([e.value for e in entry_points(group='pytest11')])"])
    assert "syncfree.pytest_plugin" in plugins.stdout


def test_versions_agree_and_the_extension_pins_syncfree():
    version = _version()
    assert re.search(rf'^__version__ = "{re.escape(version)}"$',
                     (ROOT / "python_helper" / "syncfree" / "_version.py").read_text(), re.M)
    extension = tomllib.loads((EXTENSION_PROJECT / "pyproject.toml").read_text())
    assert f"syncfree[notebook]=={version}" in extension["project"]["dependencies"]
    # The build environment's JupyterLab is the floor the extension declares (its core packages set the bundle's
    # shared-module ranges), and package.json's JupyterLab packages are at that floor too.
    floor = re.search(r">=([\d.]+)", next(d for d in extension["project"]["dependencies"]
                                          if d.startswith("jupyterlab"))).group(1)
    assert f"jupyterlab=={floor}" in extension["build-system"]["requires"]
    package = json.loads((ROOT / "package.json").read_text())
    assert package["dependencies"]["@jupyterlab/application"] == f"^{floor}"
    # The kernel side builds with hatchling alone: no Node.js, no JupyterLab (pip install ., pre-commit).
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"] == ["hatchling>=1.5.0"]


def test_pypi_descriptions_show_no_images_pypi_cannot_load():
    # PyPI hosts no images and the project has no public address yet: a relative image would show broken.
    kernel = tomllib.loads((KERNEL_PROJECT / "pyproject.toml").read_text())["project"]["readme"]
    extension = tomllib.loads((EXTENSION_PROJECT / "pyproject.toml").read_text())["project"]["readme"]
    for readme in (KERNEL_PROJECT / kernel, EXTENSION_PROJECT / extension):
        text = readme.read_text()
        assert "syncfree" in text
        assert not re.search(r"!\[[^\]]*\]\((?!https://)", text) and "<img" not in text, readme


@pytest.mark.skipif(not (ROOT / "python_helper/syncfree/labextension/package.json").is_file(),
                    reason="the labextension is not built (make build)")
def test_extension_wheel_carries_the_prebuilt_extension(tmp_path):
    wheel = _build_wheel(EXTENSION_PROJECT, tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    share = "share/jupyter/labextensions/jupyterlab-syncfree/"
    assert any(name.endswith(share + "package.json") for name in names)
    assert any(share + "static/remoteEntry." in name for name in names)
    assert any(name.endswith(share + "install.json") for name in names)
    assert not [name for name in names if name.startswith("syncfree/")]  # the module is the other distribution's
    assert any(name.endswith("dist-info/licenses/LICENSE") for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("dist-info/METADATA"))).decode()
    assert f"Requires-Dist: syncfree[notebook]=={_version()}" in metadata
    built = json.loads((ROOT / "python_helper/syncfree/labextension/package.json").read_text())
    assert built["version"] == _version()


@pytest.mark.exhaustive  # make test-all: a fresh venv and pre-commit's own install (33 s); the wheels' tests stay in make test
def test_pre_commit_hook_installs_the_light_package_and_reports(kernel_venv, tmp_path):
    """`.pre-commit-hooks.yaml` as a project uses it: pre-commit pip-installs this repository (the root, i.e.
    syncfree) into the hook's own environment and runs `syncfree check` on the staged files."""
    venv, _ = kernel_venv
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                      "pre-commit"], timeout=900)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import torch\nx = torch.randn(3, device='cuda')\nv = x.sum().item()\n")
    (project / "clean.py").write_text("import torch\nx = torch.randn(3)\n")
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@example.com", "PRE_COMMIT_HOME": str(tmp_path / "cache")}
    env = {**os.environ, **identity}
    for command in (["git", "init", "-q"], ["git", "add", "train.py", "clean.py"]):
        assert _run(command, cwd=project, env=env).returncode == 0
    hook = [str(venv / "bin" / "pre-commit"), "try-repo", str(ROOT), "syncfree-check"]
    found = _run([*hook, "--files", "train.py"], cwd=project, env=env, timeout=900)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "train.py:3:5: SF101" in found.stdout
    clean = _run([*hook, "--files", "clean.py"], cwd=project, env=env, timeout=900)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_extension_accepts_any_jupyterlab_of_its_minor_series():
    # JupyterLab marks an extension incompatible (`jupyter labextension list`: X) when a dependency on one of its own
    # packages is an exact version other than the host's: "4.6.4" failed on JupyterLab 4.6.6. Ranges only.
    dependencies = json.loads((ROOT / "package.json").read_text())["dependencies"]
    exact = {name: spec for name, spec in dependencies.items()
             if name.startswith(("@jupyterlab/", "@lumino/", "@codemirror/")) and not spec.startswith(("^", "~", ">"))}
    assert not exact, exact
