"""``syncfree check`` on the sources of large installed libraries: findings per rule, sampled precision, speed.

For each library (by default transformers, timm, torchmetrics and lightning, and diffusers, kornia, torch_geometric,
monai and gpytorch, which the rules were not tuned on, and pyro (pyro-ppl), ultralytics, speechbrain, botorch and peft,
held out: labelled before any fix they led to, and ignite (pytorch-ignite) and stable_baselines3, held out and never
tuned on, and sentence_transformers and torchtune, held out after issue 40's fourth round, torchrl and flair, after
its fifth, captum and pytorch_metric_learning, after its sixth, trl and lightly, after its seventh, fastai and
composer (mosaicml), after its eighth, tianshou and mmengine, after its ninth, and accelerate and pykeen, held out
before its tenth's fixes, skorch and neuralforecast, after them; ``--libraries torch`` works too), found
in this Python without importing it, the script runs the command a user runs::

    syncfree check <the package's folder> --format json --exit-zero

times it, and prints the findings per rule (certain / likely). It then times a parallel ``ast.parse`` of the same
files, the floor for a checker that must parse them, compared like with like: a command of its own (interpreter
start-up and the listing of the files included, as in the check), a process pool as large as the check's (the
cores this process may use), forked alike and fed in chunks of the same size, each worker reading and parsing whole
files. The two commands run ``--repeat`` times, interleaved (a burst of load elsewhere hits both alike), and the
medians give the ratio. The check runs cold (an empty cache folder of its own each round, so the figure includes
reading and hashing each file and writing the cache) and then warm (the same folder again: unchanged files, their
results read back from syncfree/cli/cache.py's cache). Both commands run with Python's bytecode of the sources
compiled beforehand (in a temporary ``PYTHONPYCACHEPREFIX``), as a package is once pip installed it: where
``PYTHONDONTWRITEBYTECODE=1`` is set, each check would otherwise compile syncfree's hundred modules again, 0.3 s of
CPU time, most of a warm run. Where ``tests/data/check_precision.json`` holds findings read by hand for the installed version of
the library, it prints the sampled precision (strict: only the findings labelled true count as true; "plausible"
ones, whose device the code does not tell, count against it) and the labelled findings the rules no longer report.

    PYTHONPATH=python_helper .venv/bin/python bench/check_precision.py
    PYTHONPATH=python_helper .venv/bin/python bench/check_precision.py --libraries timm --draw 30 --seed 2026

``--draw N`` prints N findings drawn at random (``--seed``) with their code around them, for labelling: each becomes
an entry ``{"file", "line", "rule", "verdict", "reason"}`` of the library in the JSON file (verdict true, plausible or
false). The libraries are installed without their dependencies (only their sources are read)::

    .venv/bin/python -m pip install --no-deps transformers==5.24.0 timm==1.0.31 torchmetrics==1.9.0 lightning==2.6.6 \
        accelerate==1.15.0 diffusers==0.42.1 kornia==0.9.0 torch-geometric==2.8.1 monai==1.6.1 gpytorch==1.15.2 \
        pyro-ppl==1.9.2 ultralytics==8.4.190 speechbrain==1.1.2 botorch==0.18.1 peft==0.21.2 \
        pytorch-ignite==0.5.5 stable-baselines3==2.9.2 sentence-transformers==6.2.0 torchtune==0.6.1 \
        torchrl==0.14.1 flair==0.15.1 captum==0.9.0 pytorch-metric-learning==2.9.0 trl==1.16.0 lightly==1.6.0 \
        fastai==2.8.12 mosaicml==0.32.1 tianshou==2.0.1 mmengine==0.10.7 pykeen==1.11.1 skorch==1.4.0 \
        neuralforecast==3.3.0

(the Makefile's CORPUS_PINS, which ``make install`` installs).
"""

from __future__ import annotations

import argparse
import ast
import atexit
import collections
import gc
import importlib.metadata
import importlib.util
import json
import linecache
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python_helper"))

from syncfree.cli.sources import expand_paths  # noqa: E402

LABELS = ROOT / "tests" / "data" / "check_precision.json"
DEFAULT_LIBRARIES = ("transformers", "timm", "torchmetrics", "lightning", "diffusers", "kornia", "torch_geometric", "monai", "gpytorch",
                     "pyro", "ultralytics", "speechbrain", "botorch", "peft", "ignite", "stable_baselines3",
                     "sentence_transformers", "torchtune", "torchrl", "flair", "captum", "pytorch_metric_learning",
                     "trl", "lightly", "fastai", "composer", "tianshou", "mmengine", "accelerate", "pykeen",
                     "skorch", "neuralforecast")


def installed_version(name: str) -> str:
    """The installed version of the distribution that provides package ``name`` (pyro comes from pyro-ppl)."""
    distributions = importlib.metadata.packages_distributions().get(name) or [name]
    return importlib.metadata.version(distributions[0])


def package_folder(name: str) -> Path | None:
    """The folder of an installed package, found without importing it (their dependencies are not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


#: The syncfree sources the check command runs from (--sources: another commit's, to compare speed).
SOURCES = ROOT / "python_helper"
#: Where the timed commands keep their compiled bytecode (set up by :func:`compile_bytecode`).
BYTECODE: str | None = None


def command_env(sources: Path) -> dict[str, str]:
    """The environment of a timed command: ``sources`` first on the path, bytecode kept in :data:`BYTECODE`."""
    env = {**os.environ, "PYTHONPATH": str(sources)}
    if BYTECODE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = BYTECODE
    return env


def compile_bytecode() -> None:
    """Compile the sources both commands import, once, as pip does when it installs a package."""
    global BYTECODE
    BYTECODE = tempfile.mkdtemp(prefix="syncfree-bytecode-")
    atexit.register(shutil.rmtree, BYTECODE, True)
    for sources in {SOURCES, ROOT / "python_helper"}:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(sources)], check=True,
                       stdout=subprocess.DEVNULL, env=command_env(sources))


def _children_cpu() -> float:
    """CPU seconds of the finished child processes and theirs (a command's pool workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_check(folder: Path, cache: Path | None = None) -> tuple[tuple[float, float], list[dict]]:
    """Wall and CPU seconds of the ``syncfree check`` command on a folder, and its json diagnostics. ``cache``: the
    cache folder it uses (an empty one: a cold run; the same again: a warm one); None: ``--no-cache`` where the
    sources have a cache (the check as it was before there was one)."""
    options = ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"] if _has_cache() else []
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "syncfree", "check", str(folder), "--format", "json", "--exit-zero", *options],
        capture_output=True, text=True, check=False, env=command_env(SOURCES),
    )
    seconds = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"syncfree check failed on {folder} ({done.returncode}): {done.stderr.strip()[:500]}")
    return seconds, json.loads(done.stdout)


def _has_cache() -> bool:
    """Whether the sources timed have the per-file cache (``--sources`` may name a commit from before it)."""
    return (SOURCES / "syncfree" / "cli" / "cache.py").exists()


def _parse(path: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return len(ast.parse(path.read_bytes()).body)
        except (SyntaxError, ValueError):
            return 0


def _visit(node: ast.AST, AST=ast.AST) -> None:
    # The least a Python checker that looks at every node pays: each field of each node read once, nothing done.
    for name in node._fields:
        value = getattr(node, name)
        if isinstance(value, list):
            for item in value:
                if isinstance(item, AST):
                    _visit(item)
        elif isinstance(value, AST):
            _visit(value)


def _parse_and_visit(path: Path) -> int:
    gc.disable()  # as the check does for each file: the tree is freed by reference counting
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                tree = ast.parse(path.read_bytes())
            except (SyntaxError, ValueError, RecursionError):
                return 0
        try:
            _visit(tree)
        except RecursionError:  # a generated file deeper than the recursion limit
            pass
        return len(tree.body)
    finally:
        gc.enable()


def parse_floor(folder: str, visit: bool = False) -> int:
    """The floor command: list the files as ``syncfree check`` does, parse each once in a pool like the check's
    (syncfree/cli/check.py's ``_check_files``: as many workers as usable cores, fork, the same chunks); with
    ``visit``, then visit every node of the tree doing nothing."""
    files = [path for path in expand_paths([folder]) if path.suffix == ".py"]
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ProcessPoolExecutor(min(jobs, len(files)), mp_context=context) as pool:
        parsed = sum(pool.map(_parse_and_visit if visit else _parse, files,
                              chunksize=max(1, min(16, len(files) // (jobs * 8)))))
    print(parsed)
    return 0


def parallel_parse(folder: Path, visit: bool = False) -> tuple[float, float]:
    """Wall and CPU seconds of the floor command (:func:`parse_floor`) on a folder."""
    start, cpu = time.perf_counter(), _children_cpu()
    subprocess.run([sys.executable, __file__, "--visit-floor" if visit else "--parse-floor", str(folder)],
                   check=True, stdout=subprocess.DEVNULL, env=command_env(ROOT / "python_helper"))
    return time.perf_counter() - start, _children_cpu() - cpu


def relative(path: str, folder: Path) -> str:
    return str(Path(path).resolve().relative_to(folder.resolve()))


def precision(labelled: list[dict], reported: set[tuple[str, int, str]]) -> dict[str, object]:
    """Strict precision of the labelled findings the rules still report, and the labelled ones no longer reported."""
    still = [entry for entry in labelled if (entry["file"], entry["line"], entry["rule"]) in reported]
    gone = [entry for entry in labelled if (entry["file"], entry["line"], entry["rule"]) not in reported]
    verdicts = collections.Counter(entry["verdict"] for entry in still)
    return {
        "precision": verdicts["true"] / len(still) if still else None,
        "verdicts": dict(verdicts),
        "no_longer_reported": dict(collections.Counter(entry["verdict"] for entry in gone)),
    }


def draw(findings: list[dict], folder: Path, count: int, seed: int, labelled: list[dict]) -> None:
    """Print findings drawn at random (not yet labelled) with seven lines of code before each."""
    known = {(entry["file"], entry["line"], entry["rule"]) for entry in labelled}
    pool = [f for f in findings if (relative(f["path"], folder), f["line"], f["rule"]) not in known]
    for number, finding in enumerate(random.Random(seed).sample(pool, min(count, len(pool)))):
        print(f"#{number} {relative(finding['path'], folder)}:{finding['line']} {finding['rule']} "
              f"{finding['certainty']}: {finding['message']}")
        for line in range(max(1, finding["line"] - 7), finding["line"] + 2):
            marker = ">>" if line == finding["line"] else "  "
            print(marker + linecache.getline(finding["path"], line).rstrip()[:160])


def _rule_count(rule: str, per_rule: collections.Counter) -> str:
    certain = per_rule[rule, "certain"]
    return f"{rule} {certain + per_rule[rule, 'likely']}" + (f" ({certain} certain)" if certain else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--libraries", default=",".join(DEFAULT_LIBRARIES), help="comma-separated package names")
    parser.add_argument("--draw", type=int, metavar="N", help="print N unlabelled findings to label, then stop")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds of the check (cold and warm) and of the "
                        "parse floor (medians)")
    parser.add_argument("--sources", type=Path, metavar="DIR", help="time the check from these syncfree sources (a "
                        "python_helper folder, e.g. `git archive COMMIT python_helper | tar -x -C /tmp/old`)")
    parser.add_argument("--parse-floor", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--visit-floor", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.parse_floor:
        return parse_floor(args.parse_floor)
    if args.visit_floor:
        return parse_floor(args.visit_floor, visit=True)
    if args.sources:
        global SOURCES
        SOURCES = args.sources.resolve()
    labels = json.loads(LABELS.read_text())["libraries"] if LABELS.exists() else {}
    if not args.draw:
        compile_bytecode()
    print(f"{os.cpu_count()} cores; strict precision counts only findings labelled true")
    for name in args.libraries.split(","):
        folder = package_folder(name)
        if folder is None:
            print(f"== {name}: not installed (pip install --no-deps {name}==VERSION)")
            continue
        version = installed_version(name)
        files = list(expand_paths([str(folder)]))
        lines = sum(len(path.read_bytes().splitlines()) for path in files)
        _, diagnostics = run_check(folder)  # findings (no cache: --no-cache)
        findings = [d for d in diagnostics if d["rule"] not in ("E999", "syntax-error")]  # files that do not parse
        entry = labels.get(name, {})
        labelled = entry.get("findings", []) if entry.get("version") == version else []
        if args.draw:
            print(f"== {name} {version}: {len(findings)} findings")
            draw(findings, folder, args.draw, args.seed, labelled)
            continue
        # Each round: a cold check (an empty cache folder: every file read, hashed, parsed and analysed, the cache
        # written), a warm one (the same folder: the results read back), the parse floor.
        # And the parse followed by a visit of every node that does nothing: the least any checker written in Python
        # that looks at every node pays.
        check_times, warm_times, parse_times, visit_times = [], [], [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="syncfree-cache-") as cache:
                check_times.append(run_check(folder, Path(cache) if _has_cache() else None)[0])
                if _has_cache():
                    warm_times.append(run_check(folder, Path(cache))[0])
            parse_times.append(parallel_parse(folder))
            visit_times.append(parallel_parse(folder, visit=True))
        check_seconds, parse_seconds = (statistics.median(wall for wall, _ in t) for t in (check_times, parse_times))
        check_cpu, parse_cpu = (statistics.median(cpu for _, cpu in t) for t in (check_times, parse_times))
        per_rule = collections.Counter((f["rule"], f["certainty"]) for f in findings)
        rules = sorted({rule for rule, _ in per_rule}, key=lambda rule: -(per_rule[rule, "certain"] + per_rule[rule, "likely"]))
        print(f"== {name} {version}: {len(files):,} files, {lines:,} lines: {len(findings):,} findings "
              f"({len(diagnostics) - len(findings)} files that do not parse)")
        print("   " + ", ".join(_rule_count(rule, per_rule) for rule in rules))
        print(f"   check {check_seconds:.1f} s; parallel ast.parse {parse_seconds:.1f} s; "
              f"ratio {check_seconds / parse_seconds:.2f} (medians of {len(check_times)}; load average "
              f"{os.getloadavg()[0]:.1f}); CPU time {check_cpu:.1f} s against {parse_cpu:.1f} s, ratio "
              f"{check_cpu / parse_cpu:.2f}" + (" (cold: an empty cache)" if warm_times else ""))
        visit_cpu = statistics.median(cpu for _, cpu in visit_times)
        print(f"   parse + a visit of every node doing nothing: CPU time {visit_cpu:.1f} s, ratio "
              f"{visit_cpu / parse_cpu:.2f} to the parse (the least a Python checker that looks at every node pays)")
        if warm_times:
            warm_seconds = statistics.median(wall for wall, _ in warm_times)
            warm_cpu = statistics.median(cpu for _, cpu in warm_times)
            print(f"   warm (unchanged files, results from the cache): check {warm_seconds:.2f} s, ratio "
                  f"{warm_seconds / parse_seconds:.2f}; CPU time {warm_cpu:.2f} s, ratio {warm_cpu / parse_cpu:.2f}")
        if labelled:
            reported = {(relative(f["path"], folder), f["line"], f["rule"]) for f in findings}
            result = precision(labelled, reported)
            value = result["precision"]
            print(f"   sampled precision {value:.2f} strict over {sum(result['verdicts'].values())} labelled findings "
                  f"{result['verdicts']}; labelled but no longer reported: {result['no_longer_reported'] or 'none'}"
                  if value is not None else "   no labelled finding is reported any more")
        elif entry:
            print(f"   labels are for {name} {entry.get('version')}, installed {version}: no precision")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
