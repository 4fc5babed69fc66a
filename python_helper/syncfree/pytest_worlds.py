"""Fixtures of watched tests on the CPU stand-ins, whatever ran before them.

Without CUDA a watched test (marked, under ``--syncfree``, or using the ``syncfree``
fixture) runs on the stand-ins of predict mode, and so do its fixtures: there
``torch.cuda.is_available()`` is True and ``device="cuda"`` makes tensors that predict
mode follows. A fixture wider than a function is shared with the tests around it, and
an unwatched test sees the plain CPU build; a tensor a fixture made for one is not what
the other would see on a GPU. So each such fixture is cached per *world* (stand-ins or
plain), the way pytest caches a parametrized fixture per parameter: a test that needs
the other world than the cached instance's gets the fixture torn down and set up again
in its own, and every tear-down runs in the world its set-up ran in. With ``--syncfree``
(every test watched) there is one world and nothing is set up twice.

Fixtures keyed so: those defined in the user's files (not by installed plugins:
``tmp_path_factory`` or a database fixture is the same in both worlds) and pytest's
own xunit fixtures that call the user's ``setup_module``/``setUpClass``/``setup_class``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

from syncfree.capture import interrupts

STANDINS, PLAIN = "stand-ins", "plain"

# pytest's fixtures that run the user's xunit-style set-up (_pytest/python.py,
# _pytest/unittest.py): named after the module or class they set up.
_XUNIT_PREFIXES = ("_xunit_setup_", "_unittest_setUpClass_fixture_", "_unittest_setup_method_fixture_")


class WorldKey(NamedTuple):
    """A keyed fixture's cache key: pytest's own (the parameter), and the world."""

    param: Any
    world: str


class Host:
    """A predict-mode watch that only hosts the stand-ins (its syncs are not reported:
    a fixture is not the code under test). ``boundary`` is a live frame above every
    frame the block runs in, so chains stop at the test rather than run into the
    program that called pytest."""

    def __init__(self, worlds: FixtureWorlds, boundary: Any = None) -> None:
        self.worlds = worlds
        self.boundary = boundary
        self.watch: Any = None

    def open(self) -> None:
        from .watches import Watch

        watch = Watch("predict")
        watch.__enter__()
        self.watch = watch
        self.worlds.hosts.append(self)
        recorder = getattr(watch, "_recorder", None)
        if recorder is not None:
            recorder.host_only = True  # the watches nested in it report their blocks
            if self.boundary is not None:
                recorder.boundary = self.boundary

    def close(self, exc: BaseException | None = None) -> None:
        # The watch is exited before it is forgotten: an interrupt landing in between (the
        # handler holds it back only inside the engine) left its stand-ins installed.
        watch = self.watch
        if watch is None:
            return
        try:
            watch.__exit__(type(exc) if exc is not None else None, exc,
                           exc.__traceback__ if exc is not None else None)
        finally:
            self.watch = None
            hosts = self.worlds.hosts
            if self in hosts:
                hosts.remove(self)

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """The stand-ins closed for a block that runs without them (a plain fixture's
        tear-down) or opens its own (an error-mode watch must be the recorder, not nested
        in this one); virtual-CUDA tensors stay so (predict mode keeps one registry for
        the process)."""
        if self.watch is None:
            yield
            return
        self.close()
        try:
            yield
        finally:
            self.open()


@contextlib.contextmanager
def on_standins(worlds: FixtureWorlds, boundary: Any = None) -> Iterator[Host]:
    host = Host(worlds, boundary)
    host.open()
    try:
        yield host
    except BaseException as exc:
        host.close(exc)
        raise
    host.close()


class FixtureWorlds:
    """Which world the running test is in, and the fixtures keyed by it."""

    def __init__(self) -> None:
        self.enabled = False  # some test of the run is on the stand-ins
        self.current = PLAIN
        self.hosts: list[Host] = []  # the stand-ins open now, innermost last
        self._user_files: Any = None

    def keyed(self, fixturedef: Any) -> bool:
        if fixturedef.scope == "function" or "cache_key" in vars(fixturedef):
            return False
        if fixturedef.argname.startswith(_XUNIT_PREFIXES):
            return True
        func = inspect.unwrap(getattr(fixturedef, "func", None))
        code = getattr(getattr(func, "__func__", func), "__code__", None)
        if code is None:
            return False
        if self._user_files is None:
            from .capture.sites import UserFiles

            self._user_files = UserFiles()
        return code.co_filename in self._user_files

    def key(self, fixturedef: Any) -> None:
        """Cache ``fixturedef`` per world from now on (called before its set-up)."""
        if not self.enabled or not self.keyed(fixturedef):
            return
        own_key = fixturedef.cache_key
        own_finish = fixturedef.finish
        worlds = self

        def cache_key(request: Any) -> WorldKey:
            return WorldKey(own_key(request), worlds.current)

        @functools.wraps(own_finish)
        def finish(request: Any) -> None:
            cached = fixturedef.cached_result
            world = cached[1].world if cached is not None and isinstance(cached[1], WorldKey) else None
            if world == STANDINS and not worlds.hosts:
                with on_standins(worlds):
                    return own_finish(request)
            if world == PLAIN and worlds.hosts:  # torn down in a watched test's set-up
                with worlds.hosts[-1].suspended():
                    return own_finish(request)
            return own_finish(request)

        # Instance attributes: FixtureDef.execute looks both up on the instance
        # (_pytest/fixtures.py: `self.cache_key(request)`, `partial(self.finish, ...)`).
        fixturedef.cache_key = cache_key
        fixturedef.finish = finish


def standins_answer_here() -> bool:
    """Whether this process answers ``torch.cuda.is_available()`` through syncfree (the
    stand-ins of a watched test, or ``--syncfree-cuda``) rather than as its CUDA build does."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    from .capture.predict import real_cuda_available

    return torch.cuda.is_available() and not real_cuda_available()


class OnStandins:
    """A multiprocessing child's target that runs on the stand-ins in the child too.

    A test on the stand-ins sees CUDA; a process it starts with the spawn or forkserver
    start method (``torch.multiprocessing.spawn``, ``get_context("spawn").Process``, a
    spawn ``Pool`` or DataLoader workers) is a new interpreter that would see the plain CPU
    build, and the two would take different paths where a GPU machine's take the same
    (torch's ``init_device_mesh`` makes a group of its own when CUDA is there and the
    default group is gloo: the parent waits for a child that never joins). The child
    opens predict mode's stand-ins around the target (inside them the target runs under
    the watch `syncfree.processes.SpawnedTarget` gives it, whose syncs join the test's
    report: pytest_plugin.py, ``_children_of``). A forked child inherits the parent's
    stand-ins and runs the target as is."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        from .capture.predict import real_cuda_available

        if real_cuda_available() or torch.cuda.is_available():  # a GPU, or forked
            return self.target(*args, **kwargs)
        with on_standins(FixtureWorlds()):
            return self.target(*args, **kwargs)


class ChildProcesses:
    """``multiprocessing``'s ``BaseProcess.start`` wrapping the target of a process
    started while this process answers CUDA through syncfree (`OnStandins`), from
    `install` to `restore`. The process object's target is put back once started (where
    ``start`` keeps it)."""

    def __init__(self) -> None:
        self._real_start: Any = None

    def install(self) -> None:
        from multiprocessing import process

        if self._real_start is not None:
            return
        real_start = self._real_start = process.BaseProcess.start

        @functools.wraps(real_start)
        def start(process_self: Any) -> None:
            target = getattr(process_self, "_target", None)
            if target is None or isinstance(target, OnStandins) or not standins_answer_here():
                return real_start(process_self)
            process_self._target = OnStandins(target)
            try:
                return real_start(process_self)  # spawn pickles the process object here
            finally:
                if "_target" in vars(process_self):  # start() drops it (bpo-30775)
                    process_self._target = target

        process.BaseProcess.start = start

    def restore(self) -> None:
        from multiprocessing import process

        if self._real_start is not None:
            process.BaseProcess.start = self._real_start
            self._real_start = None


def is_unittest_item(item: Any) -> bool:
    unittest_module = sys.modules.get("_pytest.unittest")
    return unittest_module is not None and isinstance(item, unittest_module.TestCaseFunction)


# A stand-in host's close exits its watch: an interrupt landing there is held back as in the
# watch's own exit (capture/interrupts.py), so the stand-ins are never left installed.
interrupts.engine_code(Host.close)
interrupts.teardown_code(Host.close)
