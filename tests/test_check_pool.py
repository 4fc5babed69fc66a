"""syncfree check's process pool where the system forks (syncfree/cli/forkpool.py): the results in the items' order,
a worker's exception raised again in the caller, a worker that dies a failure, not a wait; and a pooled check
imports neither concurrent.futures nor multiprocessing (their imports were 25 ms of a cold run's CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the pool forks")


def _square(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def _fails_on_seven(item: int) -> int:
    if item == 7:
        raise ValueError("seven")
    return item


def _dies_on_five(item: int) -> int:
    if item == 5:
        os._exit(3)
    return item


def _children() -> set[int]:
    """This process's children, zombies included (Linux's /proc; empty where there is none). Not os.waitpid(-1):
    a test process (an xdist worker) can hold children of other tests (a multiprocessing resource tracker, a
    forkserver), which are not the pool's, and waiting for any child could reap one of them."""
    me, found = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.add(int(entry))
    return found


@pytest.fixture()
def no_children_left():
    """After the test, none of the children it started is left (running or unreaped)."""
    before = _children()
    yield
    assert _children() - before == set()


def test_results_come_back_in_order_from_forked_workers(no_children_left):
    from syncfree.cli.forkpool import forked_map

    for jobs, chunksize, count in ((2, 3, 50), (3, 1, 7), (2, 16, 5), (4, 2, 1)):
        results = list(forked_map(_square, list(range(count)), jobs, chunksize))
        assert [square for square, _ in results] == [item * item for item in range(count)]
        assert os.getpid() not in {pid for _, pid in results}


def test_a_workers_exception_is_raised_in_the_caller(no_children_left):
    from syncfree.cli.forkpool import forked_map

    with pytest.raises(ValueError, match="seven"):
        list(forked_map(_fails_on_seven, list(range(20)), 2, 2))


def test_a_worker_that_dies_fails_the_run(no_children_left):
    from syncfree.cli.forkpool import WorkerDied, forked_map

    with pytest.raises(WorkerDied):
        list(forked_map(_dies_on_five, list(range(20)), 2, 2))


def test_a_pooled_check_imports_no_concurrent_futures_and_finds_as_one_process(tmp_path):
    import syncfree

    body = "import torch\n\n" + "".join(
        f"def f{i}(x: torch.Tensor):\n    if x.sum() > {i}:\n        return x.max().item()\n    return 0\n\n"
        for i in range(400)
    )
    for number in range(12):  # over check's thresholds for a pool (8 files, 256 kB)
        (tmp_path / f"m{number}.py").write_text(body)
    program = ("import sys\nfrom syncfree.cli.check import check\n"
               "with open(sys.argv[3], 'w') as out:\n"
               "    status = check([sys.argv[1]], jobs=int(sys.argv[2]), out=out)\n"
               "print(status, sorted(name for name in sys.modules if name.startswith(('concurrent', 'multiprocessing'))))\n")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(syncfree.__file__))}  # this syncfree
    reports = []
    for jobs in ("2", "1"):
        report = tmp_path / f"report-{jobs}.txt"
        ran = subprocess.run([sys.executable, "-c", program, str(tmp_path), jobs, str(report)], capture_output=True,
                             text=True, timeout=300, check=False, cwd=tmp_path, env=env)
        assert ran.stdout == "1 []\n", ran.stderr
        reports.append(report.read_text())
    assert reports[0] == reports[1] and reports[0].count("SF101") == 12 * 400
