"""``syncfree check``'s process pool where the system forks: the workers are forked children, each handed the
numbers of chunks of a list it already holds (the fork copied it) through a pipe of its own, and each chunk's
results come back pickled through another.

concurrent.futures' pool cost a cold check 25 ms of CPU before the first file (its imports: logging, traceback,
multiprocessing's context, connection and reduction, socket, tempfile, subprocess; then its threads), as much as
the analysis of twenty files; this one imports pickle and select only. Results come back in the items' order and an
exception raised in a worker is raised again here, as ``ProcessPoolExecutor.map`` does; a worker that dies makes
the run fail rather than wait.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_HEADER = 8  # a message's length, little endian, before its pickled bytes


class WorkerDied(RuntimeError):
    """A worker ended without sending a chunk's results (killed, or out of memory)."""


def forked_map(function: Callable[[Any], Any], items: Sequence[Any], jobs: int, chunksize: int) -> Iterator[Any]:
    """``function(item)`` of each item, in order, computed by ``jobs`` forked workers, ``chunksize`` items at a time
    (each worker takes the next chunk when it sends one back)."""
    chunks = [(start, min(start + chunksize, len(items))) for start in range(0, len(items), max(1, chunksize))]
    jobs = max(1, min(jobs, len(chunks)))
    workers: dict[int, tuple[int, int]] = {}  # the result pipe's end -> (pid, the task pipe's end)
    finished = False
    for stream in (sys.stdout, sys.stderr):  # (a child's copy of a buffer is never written: it leaves by _exit)
        if stream is not None:
            stream.flush()
    try:
        for _ in range(jobs):
            task_read, task_write = os.pipe()
            result_read, result_write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the caller's code
                status = 1
                try:
                    os.close(task_write)
                    os.close(result_read)
                    for result_end, (_, task_end) in workers.items():  # the earlier workers' ends: theirs alone
                        os.close(result_end)
                        os.close(task_end)
                    _work(function, items, chunks, task_read, result_write)
                    status = 0
                finally:
                    os._exit(status)
            os.close(task_read)
            os.close(result_write)
            workers[result_read] = (pid, task_write)
        given = 0
        for _, task_end in workers.values():
            _send_chunk(task_end, given)
            given += 1
        done: dict[int, list[Any]] = {}
        next_index = 0
        busy = set(workers)
        while next_index < len(chunks):
            results = done.pop(next_index, None)
            if results is not None:
                yield from results
                next_index += 1
                continue
            if not busy:
                raise WorkerDied(f"no worker holds chunk {next_index}")  # (never: each chunk given is sent back)
            ready, _, _ = select.select(list(busy), [], [])
            for result_end in ready:
                index, ok, payload = _receive(result_end)
                if not ok:
                    raise payload
                done[index] = payload
                task_end = workers[result_end][1]
                if given < len(chunks):
                    _send_chunk(task_end, given)
                    given += 1
                else:
                    busy.discard(result_end)
        finished = True
    finally:
        for result_end, (pid, task_end) in workers.items():
            _close(task_end)  # the end of its tasks: it leaves
            if not finished:
                try:
                    os.kill(pid, 15)  # SIGTERM: the run failed or was interrupted; its current chunk is not needed
                except OSError:
                    pass
            _close(result_end)
        for pid, _ in workers.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _work(function: Callable[[Any], Any], items: Sequence[Any], chunks: list[tuple[int, int]], tasks: int,
          results: int) -> None:
    gc.freeze()  # what the parent made before the fork is never garbage here: keep the collector off it
    while True:
        header = _read_exactly(tasks, 4)
        if header is None:
            break  # no more chunks
        index = int.from_bytes(header, "little")
        start, stop = chunks[index]
        try:
            message: tuple[int, bool, Any] = (index, True, [function(item) for item in items[start:stop]])
        except BaseException as error:  # raised again in the parent, as concurrent.futures does
            message = (index, False, error)
        try:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # an exception (or a result) that pickle cannot carry
            data = pickle.dumps((index, False, RuntimeError(f"a worker's result could not be sent back: {error!r}")),
                                protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(results, len(data).to_bytes(_HEADER, "little") + data)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


def _send_chunk(task_end: int, index: int) -> None:
    _write_all(task_end, index.to_bytes(4, "little"))


def _receive(result_end: int) -> tuple[int, bool, Any]:
    header = _read_exactly(result_end, _HEADER)
    data = _read_exactly(result_end, int.from_bytes(header, "little")) if header is not None else None
    if data is None:
        raise WorkerDied("a worker of syncfree check's pool ended without sending its results")
    return pickle.loads(data)  # type: ignore[no-any-return]


def _read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from the pipe; None at its end (before or within them)."""
    parts = []
    while size:
        part = os.read(fd, min(size, 1 << 20))
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
