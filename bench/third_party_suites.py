"""Public libraries' own pytest suites under ``pytest --syncfree``: does any test change
outcome?

    .venv/bin/python bench/third_party_suites.py [--suite NAME ...] [--xdist] [--cuda-variants]

Each suite is a pinned sdist from PyPI (``pip download --no-deps --no-binary :all:``: its
tests ship in it) unpacked under ``--workdir`` and run from there against this
interpreter's torch; nothing is installed. Before a suite runs, every requirement its
metadata names must already be satisfied here, so no run ever pulls another torch (the
suite is skipped with the unmet requirement named otherwise).

Each suite runs as plain ``pytest`` and as ``pytest --syncfree`` (every test watched; on
this CPU-only machine, on predict mode's stand-ins); with ``--xdist`` also as ``pytest
--syncfree -n 2``; with ``--cuda-variants`` its CUDA tests (its own switch, such as
pytorch-optimizer's ``--device cuda``) under ``--syncfree-cuda``. Printed per suite: tests,
outcomes, the tests whose outcome changed (plain outcome -> syncfree outcome, with
syncfree's failure line), the syncs predicted (and in how many tests), and the wall time
of each run with its ratio to plain. The figure asked of syncfree: no test changes
outcome under ``--syncfree``.

This file is also the small pytest plugin (``-p third_party_suites``) that records each
test's outcome and predicted syncs as JSON, from the reports pytest (or pytest-xdist's
controller) receives.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUTCOMES_ENV = "SYNCFREE_SUITE_OUTCOMES"


@dataclass
class Suite:
    pin: str  # name==version on PyPI
    tests: list[str]  # paths inside the unpacked sdist
    env: dict[str, str] = field(default_factory=dict)
    addopts: str | None = None  # replaces the suite's own addopts (coverage plugins not here)
    # the suite's own way to run its tests on CUDA, for --cuda-variants (--syncfree-cuda)
    cuda_args: list[str] | None = None


SUITES: dict[str, Suite] = {
    # Tensor rearrangement; its tests run every backend named in EINOPS_TEST_BACKENDS.
    "einops": Suite("einops==0.8.2", ["einops/tests"], env={"EINOPS_TEST_BACKENDS": "torch,numpy"}),
    # Exponential moving average of a module's weights (lucidrains): a few tests.
    "ema-pytorch": Suite("ema-pytorch==0.8.3", ["tests"]),
    # 100+ optimizers and schedulers; the whole suite (3,258 tests) takes ~20 min on 2 cores
    # plain: the files below are its optimizers' step, state and gradient checks without
    # the 1,454-test parametrized sweep of tests/test_optimizers.py.
    "pytorch-optimizer": Suite(
        "pytorch-optimizer==4.1.0",
        ["tests/test_gradients.py", "tests/test_optimizer_variants.py",
         "tests/test_wrapper_optimizers.py", "tests/test_base.py",
         "tests/test_lr_schedulers.py", "tests/test_loss_functions.py", "tests/optimizers",
         "tests/utils"],
        addopts="-p no:pastebin -p no:doctest --disable-warnings", cuda_args=["--device", "cuda"]),
    # All of it (~6 min plain on 2 cores): --suite pytorch-optimizer-all.
    "pytorch-optimizer-all": Suite(
        "pytorch-optimizer==4.1.0", ["tests"],
        addopts="-p no:pastebin -p no:doctest --disable-warnings", cuda_args=["--device", "cuda"]),
}
DEFAULT = ["einops", "ema-pytorch", "pytorch-optimizer"]


# -- the plugin (-p third_party_suites) ------------------------------------------------

_outcomes: dict[str, dict] = {}


def pytest_runtest_logreport(report) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"outcome": None, "syncs": 0, "message": ""})
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            entry["outcome"] = "xpassed" if xfail else "passed"
        elif report.skipped:
            entry["outcome"] = "xfailed" if xfail else "skipped"
        else:
            entry["outcome"] = "failed"
        sf = getattr(report, "syncfree", None)
        if isinstance(sf, dict):
            entry["syncs"] = sf.get("syncs", 0)
    elif report.failed:  # set-up or tear-down
        entry["outcome"] = "error"
    elif report.skipped and entry["outcome"] is None:
        entry["outcome"] = "skipped"
    if report.failed and not entry["message"]:
        entry["message"] = _failure_line(report)
    if report.skipped and not xfail and isinstance(report.longrepr, tuple):
        entry["message"] = str(report.longrepr[2])[:200]  # the skip reason


def _failure_line(report) -> str:
    text = getattr(report, "longreprtext", "") or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if errors:
        return errors[0][:200]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def pytest_sessionfinish(session) -> None:
    path = os.environ.get(OUTCOMES_ENV)
    if path and not hasattr(session.config, "workerinput"):  # the controller under xdist
        Path(path).write_text(json.dumps(_outcomes, indent=0))


# -- the bench ---------------------------------------------------------------------------

def unpack(suite: Suite, workdir: Path) -> Path:
    name, version = suite.pin.split("==")
    downloads = workdir / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}"
    found = [p for p in downloads.glob("*.tar.gz")
             if p.name.lower() in (f"{stem}.tar.gz".lower(), f"{name}-{version}.tar.gz".lower())]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "--disable-pip-version-check", "-q", suite.pin, "-d", str(downloads)],
                       check=True)
        found = [p for p in downloads.glob("*.tar.gz") if p.name.lower().startswith(
            (stem.lower(), f"{name}-{version}".lower()))]
    archive = found[0]
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        target = workdir / top
        if not target.exists():
            tar.extractall(workdir, filter="data")
    return target


def unmet_requirements(source: Path) -> list[str]:
    """The requirements of the sdist's metadata that this interpreter does not satisfy
    (extras' requirements apart): running its tests here must not need an install."""
    from importlib import metadata

    from packaging.requirements import Requirement

    unmet = []
    for line in (source / "PKG-INFO").read_text(encoding="utf-8").splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            unmet.append(str(requirement))
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement} (installed {version})")
    return unmet


def _text(output: bytes | str | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def run_pytest(suite: Suite, source: Path, extra: list[str], out: Path,
               timeout: float) -> tuple[dict, float, str]:
    env = dict(os.environ, **suite.env)
    env[OUTCOMES_ENV] = str(out)
    # The caller's PYTHONPATH after ours (a folder of a suite's optional dependencies, say).
    env["PYTHONPATH"] = os.pathsep.join([str(source), str(HERE), str(ROOT / "python_helper"),
                                         *filter(None, [os.environ.get("PYTHONPATH")])])
    env.pop("PYTEST_ADDOPTS", None)
    args = [sys.executable, "-m", "pytest", *suite.tests, "-q", "-p", "no:cacheprovider",
            "-p", "third_party_suites", "--tb=short", *extra]
    if suite.addopts is not None:
        args += ["-o", f"addopts={suite.addopts}"]
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    log = out.with_suffix(".log")
    try:
        done = subprocess.run(args, cwd=source, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as expired:  # a test that hangs is an outcome to show
        log.write_text(_text(expired.stdout) + _text(expired.stderr))
        raise RuntimeError(f"pytest ran past {timeout:.0f} s (a test hangs?); see {log}") from None
    wall = time.perf_counter() - start
    log.write_text(done.stdout + done.stderr)
    if not out.exists():
        raise RuntimeError(f"pytest wrote no outcomes (exit {done.returncode}); see {log}")
    return json.loads(out.read_text()), wall, str(log)


def counts(outcomes: dict) -> str:
    tally: dict[str, int] = {}
    for entry in outcomes.values():
        tally[entry["outcome"]] = tally.get(entry["outcome"], 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(tally.items(), key=lambda kv: -kv[1]))


# A skip reason that says the test wants a GPU (as syncfree.pytest_cuda reads one).
_CUDA_REASON = re.compile(r"\b(cuda|gpus?)\b", re.IGNORECASE)


def compare(plain: dict, watched: dict) -> list[tuple[str, str, str, str]]:
    """(test id, plain outcome, watched outcome, what the watched run said) per change; a
    test that skipped plain for want of CUDA and ran its CUDA path watched says so."""
    changes = []
    for nodeid in sorted(set(plain) | set(watched)):
        before = plain.get(nodeid, {}).get("outcome", "absent")
        after = watched.get(nodeid, {}).get("outcome", "absent")
        if before != after:
            message = watched.get(nodeid, {}).get("message", "")
            reason = plain.get(nodeid, {}).get("message", "")
            if before == "skipped" and _CUDA_REASON.search(reason):
                message = f"skipped plain for want of CUDA ({reason}): its CUDA path ran" + (
                    f"; {message}" if message else "")
            changes.append((nodeid, before, after, message))
    return changes


def cuda_path(change: tuple[str, str, str, str]) -> bool:
    return "its CUDA path ran" in change[3]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", choices=sorted(SUITES),
                        help=f"suites to run (default: {', '.join(DEFAULT)})")
    parser.add_argument("--xdist", action="store_true", help="also run pytest --syncfree -n 2")
    parser.add_argument("--cuda-variants", action="store_true",
                        help="also run the suite's CUDA variants (its own option, e.g. --device "
                             "cuda) with --syncfree-cuda")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds one pytest run may take (default 1800)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/syncfree-suites"),
                        help="where sdists are downloaded, unpacked and run (kept between runs)")
    options = parser.parse_args(argv)
    workdir = options.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    import torch

    print(f"torch {torch.__version__}, CUDA {'available' if torch.cuda.is_available() else 'absent'}"
          f", python {sys.version.split()[0]}; working in {workdir}")
    rows = []
    failures = 0
    for name in options.suite or DEFAULT:
        suite = SUITES[name]
        source = unpack(suite, workdir)
        unmet = unmet_requirements(source)
        if unmet:
            print(f"\n{suite.pin}: skipped, requirements not installed here: {', '.join(unmet)}")
            continue
        runs = [("plain", []), ("--syncfree", ["--syncfree"])]
        if options.xdist:
            runs.append(("--syncfree -n 2", ["--syncfree", "-p", "xdist", "-n", "2"]))
        if options.cuda_variants and suite.cuda_args:
            # Not the figure's comparison: the CUDA path of every test, on the stand-ins,
            # against the CPU path of the plain run.
            runs.append(("--syncfree-cuda", ["--syncfree-cuda", *suite.cuda_args]))
        results = {}
        for label, extra in runs:
            out = workdir / f"{name}.{label.strip('-').replace(' ', '_')}.json"
            results[label] = run_pytest(suite, source, extra, out, options.timeout)
        plain, plain_wall, _ = results["plain"]
        print(f"\n{suite.pin}: {len(plain)} tests ({' '.join(suite.tests)})")
        for label, (outcomes, wall, log) in results.items():
            syncs = sum(e["syncs"] for e in outcomes.values())
            syncing = sum(1 for e in outcomes.values() if e["syncs"])
            changes = compare(plain, outcomes) if label != "plain" else []
            if label != "--syncfree-cuda":  # the figure: --syncfree (with or without -n 2)
                failures += len(changes) - sum(map(cuda_path, changes))
            extra = "" if label == "plain" else (
                f"; {len(changes)} outcome change{'s' if len(changes) != 1 else ''}; "
                f"{syncs} syncs predicted in {syncing} tests")
            print(f"  {label:16} {wall:7.1f} s  x{wall / plain_wall:4.2f}  {counts(outcomes)}{extra}")
            for nodeid, before, after, message in changes:
                print(f"      {nodeid}: {before} -> {after}" + (f"  ({message})" if message else ""))
            if label != "plain":
                rows.append((name, len(plain), label, len(changes),
                             sum(map(cuda_path, changes)), syncs, syncing, wall / plain_wall))
    if rows:
        print("\nsuite              tests  run               changes (CUDA path)  syncs (tests)  time")
        for name, tests, label, changes, cuda, syncs, syncing, ratio in rows:
            print(f"{name:18} {tests:5}  {label:16}  {changes:7} ({cuda:9})  {syncs:6} ({syncing:4})"
                  f"  x{ratio:.2f}")
        print("CUDA path: the test skipped plain for want of CUDA and ran its CUDA path on the "
              "stand-ins, as on a GPU machine")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
