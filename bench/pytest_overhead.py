"""What the pytest plugin costs: a generated suite of 200 CPU tests, 20 of them marked
``@pytest.mark.sync_free``, run by plain pytest (plugin off), with the plugin loaded, and
with ``--syncfree`` (every test watched).

    PYTHONPATH=python_helper python3 bench/pytest_overhead.py [--repeats 5] [--style unittest]

``--style unittest`` writes the suite as ``unittest.TestCase`` classes (setUp makes the
tensor; the marker on the method), as many third-party suites are.

Each variant runs in its own pytest process, round-robin, ``--repeats`` times; the median
wall time of each is printed with its ratio to plain pytest. Target: ``--syncfree``
<= 1.2x plain. Without CUDA the watched tests run in predict mode (CPU stand-ins).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS, MARKED = 200, 20
TARGET = 1.2

TEST_FILE = '''\
import pytest
import torch

@pytest.fixture
def x():
    return torch.randn(64, 64)

{tests}
'''

PLAIN = '''
def test_{n}(x):
    y = (x @ x).relu()
    assert y.shape == (64, 64)
    assert float(y.sum()) >= 0
'''

SYNC_FREE = '''
@pytest.mark.sync_free
def test_{n}(x):
    y = (x @ x).relu()
    assert y.shape == (64, 64)
'''


UNITTEST_FILE = '''\
import unittest
import pytest
import torch

class TestSuite(unittest.TestCase):
    def setUp(self):
        self.x = torch.randn(64, 64)
{tests}
'''

UNITTEST_PLAIN = '''
    def test_{n}(self):
        y = (self.x @ self.x).relu()
        self.assertEqual(y.shape, (64, 64))
        self.assertGreaterEqual(float(y.sum()), 0)
'''

UNITTEST_SYNC_FREE = '''
    @pytest.mark.sync_free
    def test_{n}(self):
        y = (self.x @ self.x).relu()
        self.assertEqual(y.shape, (64, 64))
'''


def write_suite(folder: Path, style: str = "pytest") -> None:
    per_file = 20
    template, plain, marked = ((UNITTEST_FILE, UNITTEST_PLAIN, UNITTEST_SYNC_FREE)
                               if style == "unittest" else (TEST_FILE, PLAIN, SYNC_FREE))
    for f in range(TESTS // per_file):
        tests = []
        for i in range(per_file):
            n = f * per_file + i
            tests.append((marked if n % (TESTS // MARKED) == 0 else plain).format(n=n))
        (folder / f"test_suite_{f}.py").write_text(template.format(tests="".join(tests)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--style", choices=("pytest", "unittest"), default="pytest",
                        help="test functions with fixtures, or unittest.TestCase classes")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root / "python_helper"))
    variants = {
        "plain pytest (-p no:syncfree)": ["-p", "no:syncfree"],
        "plugin loaded (20 marked)": [],
        "--syncfree (every test)": ["--syncfree"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_suite(folder, args.style)
        (folder / "pytest.ini").write_text("[pytest]\n")  # the marker is registered by syncfree
        times: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, extra in variants.items():
                command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
                times[name].append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                if done.returncode != 0:
                    print(done.stdout[-2000:], done.stderr[-2000:])
                    return 1
    base = statistics.median(times["plain pytest (-p no:syncfree)"])
    base_cpu = statistics.median(cpu["plain pytest (-p no:syncfree)"])
    print(f"syncfree bench: pytest on {TESTS} CPU tests ({MARKED} marked sync_free"
          f"{', unittest.TestCase classes' if args.style == 'unittest' else ''}), "
          f"median of {args.repeats} runs per pytest process: wall time, and CPU time "
          f"(user + system; steadier on a loaded machine) | {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        value, used = statistics.median(values), statistics.median(cpu[name])
        ratio, cpu_ratio = value / base, used / base_cpu
        verdict = f"target <= {TARGET:.1f}x: {'ok' if ratio <= TARGET else 'MISSED'}" \
            if name.startswith("--syncfree") else ""
        print(f"  {name:32s} wall {value:6.2f} s {ratio:5.2f}x   cpu {used:6.2f} s "
              f"{cpu_ratio:5.2f}x  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
