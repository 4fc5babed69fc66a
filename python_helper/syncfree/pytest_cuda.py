"""``pytest --syncfree-cuda``: a suite's CUDA tests on a CPU machine, in predict mode.

Suites decide which tests need a GPU before any test runs: ``@pytest.mark.skipif(not
torch.cuda.is_available(), ...)`` is evaluated when the module is imported, a conftest
builds ``DEVICES = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]`` for its
parametrizations, a ``pytest_collection_modifyitems`` hook skips ``@gpu`` tests. Predict
mode's stand-ins answer "yes, CUDA" only inside a watched test, too late for all of that:
on a CPU machine the CUDA variants stay skipped and ``--syncfree`` never sees them.

With ``--syncfree-cuda`` (and no real CUDA device) the availability queries answer as on a
one-GPU machine from ``pytest_load_initial_conftests`` on, before conftests and test
modules are imported: ``torch.cuda.is_available()``, ``device_count()``,
``get_device_capability()``, ``get_device_name()``, ``get_device_properties()``,
``is_bf16_supported()`` and ``torch.accelerator``'s ``is_available()``,
``device_count()``, ``current_accelerator()``, with the current device (0) and an idle
current stream for code that asks next. Every test is then watched in predict mode
(``--syncfree-cuda`` implies ``--syncfree``), where ``device="cuda"`` makes tensors on the
stand-ins. The answers are put back when pytest's configuration is cleaned up. syncfree
itself still knows the real answer (`real_cuda_available` unwraps them).

Without it, ``--syncfree``'s summary says how many tests were skipped for want of CUDA
(their skip reason names CUDA or a GPU) and that ``--syncfree-cuda`` would run them. Either
way it names the tests that called ``torch.compile``'d code, which predict mode runs eagerly
(a "does it compile" test passes there without compiling anything), and the tests that ran
TorchScript without Python source, whose syncs predict mode cannot see (a ``sync_free``
test passes there and may fail on a GPU).

Without it and without CUDA, ``torch.cuda.is_available()`` answers False to the suite's code
that asks outside predict mode (`EarlyAnswers`): as pytest imports it (a helper's ``DEVICE =
"cuda" if torch.cuda.is_available() else "cpu"``, ``USE_CUDA = ...``), or in an unwatched
test whose answer a helper keeps (``functools.lru_cache``). A marked test whose code took the
CPU's way by that answer has syncs predict mode does not see, and passed where a GPU syncs:
it is not judged (`early_answer_note`), naming the line and ``--syncfree-cuda``. That is a
test working on CPU tensors beside the stand-ins (a mask the helper made on the CPU) whose
code may have run such a line; or one whose function reads a name (a flag, a device, a
function) of a module where such a line is. So is a marked test that steps a
``GradScaler("cuda")`` made then: it disabled itself for want of CUDA, and its step's
overflow check, a sync on a GPU, never runs.

Loaded by `syncfree.pytest_plugin` (its ``pytest_plugins``); module code that creates CUDA
tensors at import time still fails, as predict mode runs only inside the tests.
"""

from __future__ import annotations

import re
import sys
import weakref
from typing import Any

import pytest

OPTION = "--syncfree-cuda"
_STANDING_IN = pytest.StashKey[bool]()  # whether this run answers the queries as a GPU's
_SKIPS = pytest.StashKey["_CudaSkips"]()
# predict's eager_compiled_calls and unseen_torchscript_calls when the test began
_COUNTED_BEFORE = pytest.StashKey[dict]()
# The counters, and the report attribute that carries each one's growth during a test.
_COUNTERS = {"eager_compiled_calls": "syncfree_eager_compiles",
             "unseen_torchscript_calls": "syncfree_unseen_torchscript"}
_SHOWN_TESTS = 5

# A skip reason that says the test wants a GPU: "CUDA not available", "requires a GPU",
# "no cuda device", "test requires CUDA".
_CUDA_REASON = re.compile(r"\b(cuda|gpus?)\b", re.IGNORECASE)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("syncfree", "host-device synchronizations (syncfree)")
    if any(OPTION in option.names() for option in group.options):
        return
    group.addoption(OPTION, action="store_true", default=False, dest="syncfree_cuda",
                    help="without a CUDA device: answer torch.cuda.is_available() and "
                         "device_count() as a GPU machine does from start-up on (skipif "
                         "conditions, device lists built at import or collection), so the "
                         "suite's CUDA tests run in predict mode on the CPU; implies "
                         "--syncfree")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    # Before the initial conftests are imported (pytest's own implementation of this
    # hook imports them): their module-level device lists must already see CUDA.
    if getattr(early_config.known_args_namespace, "syncfree_cuda", False):
        _stand_in(early_config)
    elif _EARLY not in early_config.stash:
        early = early_config.stash[_EARLY] = EarlyAnswers()
        early.install()
        early_config.add_cleanup(early.stop)
        early_config.add_cleanup(early.unwatch_scalers)


def pytest_collection_finish(session: pytest.Session) -> None:
    early = session.config.stash.get(_EARLY, None)
    if early is not None:
        # Watched tests run under predict mode's own answers; the others' code gets the real one, which it can keep
        # for a marked test (`functools.lru_cache` on a helper asking it): recorded on.
        early.collected = True
        early.watch_scalers()


_EARLY = pytest.StashKey["EarlyAnswers"]()


class EarlyAnswers:
    """``torch.cuda.is_available()``'s False answers to the suite's own code before its tests run (conftests, test
    modules and the modules they import, at collection), where there is no CUDA and no ``--syncfree-cuda``: each
    file's first such line. A skip condition's line (``skipif``, ``pytest.skip``) is left out: it decides whether a
    test runs, not where its tensors go."""

    def __init__(self) -> None:
        self.lines: dict[str, dict[int, bool]] = {}  # each file's lines that got False: recorded after collection?
        self.collected = False  # the tests are collected: an answer now is one a test's code got
        self._hook: Any = None
        self._saved: Any = None
        # GradScaler("cuda")s made then, disabled for want of CUDA, with the suite's line that made each; and the
        # steps of one so far (`watch_scalers`), each scaler's place per step.
        self.scalers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.scaler_steps: list[tuple[str, int]] = []
        self._step: Any = None

    def install(self) -> None:
        from .torch_import import TorchImport, torch_installed

        if "torch" in sys.modules:
            self._wrap()
        elif torch_installed():
            self._hook = TorchImport(self._wrap)
            self._hook.install()

    def _wrap(self) -> None:
        import torch

        real = torch.cuda.is_available
        if self._saved is not None or getattr(real, "_syncfree_real", None) is not None or real():
            return  # wrapped already, or CUDA is here: its answers are a GPU's

        def is_available() -> bool:
            answer = real()
            if not answer:
                self._record(sys._getframe(1))
            return answer

        is_available.__name__ = is_available.__qualname__ = "is_available"
        is_available.__doc__ = real.__doc__
        is_available._syncfree_real = real  # type: ignore[attr-defined]  # predict.real_cuda_available unwraps it
        self._saved = (torch.cuda, real, is_available)
        torch.cuda.is_available = is_available

    def _record(self, frame: Any) -> None:
        """The suite's line that asked, directly or through a library call it made (``GradScaler("cuda")`` asks
        inside torch); not a library's own module code run by an import (an import machinery frame between)."""
        import linecache

        from .capture.sites import UserFiles

        user = UserFiles()
        scaler = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith("<frozen importlib"):
                return
            if filename in user:
                text = linecache.getline(filename, frame.f_lineno)
                if re.search(r"skip|xfail|pytestmark", text):
                    return
                if scaler is not None:  # judged by its steps (`watch_scalers`), not as a choice made by the answer
                    self.scalers[scaler] = (filename, frame.f_lineno)
                else:
                    self.lines.setdefault(filename, {}).setdefault(frame.f_lineno, self.collected)
                return
            if scaler is None and frame.f_code.co_name == "__init__":
                scaler = _grad_scaler(frame.f_locals.get("self"))
            frame = frame.f_back

    def watch_scalers(self) -> None:
        """Once the tests are collected, where a disabled GradScaler("cuda") was made then: count its steps."""
        if not len(self.scalers) or self._step is not None:
            return
        from torch.amp.grad_scaler import GradScaler

        real = GradScaler.step
        scalers, steps = self.scalers, self.scaler_steps

        def step(scaler: Any, *args: Any, **kwargs: Any) -> Any:
            place = scalers.get(scaler)
            if place is not None:
                steps.append(place)
            return real(scaler, *args, **kwargs)

        step.__wrapped__ = real  # type: ignore[attr-defined]
        self._step = (GradScaler, real, step)
        GradScaler.step = step  # type: ignore[method-assign]

    def stop(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._saved is not None:
            owner, real, ours = self._saved
            if owner.is_available is ours:
                owner.is_available = real
            self._saved = None

    def unwatch_scalers(self) -> None:
        if self._step is not None:
            owner, real, ours = self._step
            if owner.__dict__.get("step") is ours:
                owner.step = real
            self._step = None

    @property
    def places(self) -> dict[str, int]:
        """Each file's first line that got False."""
        return {file: next(iter(lines)) for file, lines in self.lines.items()}

    def places_for(self, item: pytest.Item) -> list[tuple[str, int]]:
        """The recorded places in the files of ``item``'s code: its module, the modules and the definitions of the
        names its function uses, its fixtures'."""
        if not self.places:
            return []
        files = {str(getattr(item, "path", ""))}
        function = getattr(item, "function", None)
        for value in list(getattr(function, "__globals__", {}).values()):
            if isinstance(value, type(sys)):
                files.add(str(getattr(value, "__file__", "") or ""))
            else:
                module = sys.modules.get(str(getattr(value, "__module__", "") or ""))
                files.add(str(getattr(module, "__file__", "") or ""))
        for fixture in _fixture_functions(item):
            code = getattr(fixture, "__code__", None)
            if code is not None:
                files.add(code.co_filename)
        return sorted((file, line) for file, line in self.places.items() if file in files)

    def places_read(self, item: pytest.Item) -> list[tuple[str, int, bool]]:
        """The recorded lines whose answer ``item``'s code read, with whether each was recorded after collection:
        a name its test function or fixtures read (through the suite's functions they call, a cache's too) that
        was bound from the answer at module level (``USE_CUDA = torch.cuda.is_available()``, ``SYNC =
        torch.cuda.synchronize if ... else noop``, and what module code made from those: `_chosen`), or such a line
        inside a function it calls (a helper asking, or caching its answer). The test's and its fixtures' own code
        runs on the stand-ins (a fixture is set up again there), answered True: their own lines do not count."""
        if not self.lines:
            return []
        import inspect

        from .capture.sites import UserFiles

        user = UserFiles()
        found: set[tuple[str, int]] = set()
        seen: set[tuple[int, str]] = set()
        stack = [(f.__code__, f.__globals__, False) for f in [getattr(item, "function", None), *_fixture_functions(item)]
                 if hasattr(f, "__code__") and hasattr(f, "__globals__")]
        while stack:
            code, namespace, followed = stack.pop()
            if followed:
                lines = {number for _, _, number in code.co_lines()}
                found.update((code.co_filename, line) for line in self.lines.get(code.co_filename, ()) if line in lines)
            home = str(namespace.get("__file__", "") or "")
            names = _names_read(code)
            for name in names:
                if name not in namespace or (id(namespace), name) in seen:
                    continue
                seen.add((id(namespace), name))
                value = namespace[name]
                if isinstance(value, type(sys)):  # helpers.USE_CUDA
                    found.update(self._chosen_in(str(getattr(value, "__file__", "") or ""), names))
                elif isinstance(value, type):
                    continue
                elif callable(value) and getattr(value, "__name__", None) == name:
                    try:
                        value = inspect.unwrap(value)
                    except ValueError:
                        continue
                    inner = getattr(value, "__code__", None)
                    if inner is not None and inner.co_filename in user and hasattr(value, "__globals__"):
                        stack.append((inner, value.__globals__, True))
                else:
                    found.update(self._chosen_in(home, {name}))
                    for file in self.lines:  # from helpers import USE_CUDA
                        if file != home and _binds(file, name, value):
                            found.update(self._chosen_in(file, {name}))
        return sorted((file, line, self.lines[file][line]) for file, line in found)

    def _chosen_in(self, file: str, names: set[str]) -> set[tuple[str, int]]:
        return {(file, line) for line in self.lines.get(file, ()) if names & _chosen(file, line)}


def _fixture_functions(item: pytest.Item) -> list:
    info = getattr(item, "_fixtureinfo", None)
    return [getattr(definition, "func", None)
            for definitions in (getattr(info, "name2fixturedefs", None) or {}).values()
            for definition in definitions]


def _names_read(code: Any) -> set[str]:
    """The global (and attribute) names a code object and the functions, lambdas and comprehensions in it read."""
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(const for const in current.co_consts if hasattr(const, "co_names"))
    return names


def _binds(file: str, name: str, value: Any) -> bool:
    """Whether the module loaded from ``file`` binds ``name`` to ``value`` itself (``from helpers import USE_CUDA``)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == file:
            return getattr(module, name, _binds) is value
    return False


_CHOSEN: dict[tuple[str, int], frozenset] = {}


def _chosen(file: str, line: int) -> frozenset:
    """The module-level names of ``file`` bound from what its ``line`` answered: the names the module-level
    statement holding the line binds, then those of each later module-level statement that reads one of them
    (``DEVICE = ...``, then ``X = torch.ones(4, device=DEVICE)``, ``if USE_CUDA: ...``, a ``def`` reading it).
    Empty where the line is in no module-level statement or the file does not parse."""
    key = (file, line)
    if key not in _CHOSEN:
        _CHOSEN[key] = frozenset(_chosen_names(file, line))
    return _CHOSEN[key]


def _chosen_names(file: str, line: int) -> set[str]:
    import ast

    try:
        with open(file, "rb") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return set()
    chosen: set[str] = set()
    for statement in tree.body:
        end = getattr(statement, "end_lineno", statement.lineno)
        holds = statement.lineno <= line <= end
        if not holds and not chosen:
            continue
        reads = {node.id for node in ast.walk(statement) if isinstance(node, ast.Name)}
        if holds or reads & chosen:
            chosen |= _bound_by(statement)
    return chosen


def _bound_by(statement: Any) -> set[str]:
    """The module-level names a statement binds (assignments, imports, definitions, and those of its blocks)."""
    import ast

    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    names: set[str] = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _grad_scaler(value: Any) -> Any:
    """``value`` if it is a torch.amp GradScaler for CUDA (torch.cuda.amp's too), else None."""
    if value is None or getattr(value, "_device", None) != "cuda":
        return None
    try:
        from torch.amp.grad_scaler import GradScaler
    except ImportError:
        return None
    return value if isinstance(value, GradScaler) else None


def scaler_steps_so_far(config: pytest.Config) -> int:
    """How many steps of a GradScaler disabled at import the suite has made so far (`early_answer_note`)."""
    early = config.stash.get(_EARLY, None)
    return len(early.scaler_steps) if early is not None else 0


def _shown(file: str, line: int) -> str:
    import os

    relative = os.path.relpath(file)
    return f"{file if relative.startswith('..') else relative}:{line}"


def early_answer_note(config: pytest.Config, item: pytest.Item, host_calls: int, steps_before: int) -> Any:
    """For a marked test in predict mode: the note (`Uncounted`: it is not judged) on the suite's code it uses that
    asked ``torch.cuda.is_available()`` before the tests ran and got False, where the test worked on CPU tensors
    (``host_calls``) or stepped a GradScaler("cuda") disabled then (since ``steps_before``); None where neither."""
    early = config.stash.get(_EARLY, None)
    if early is None:
        return None
    from .capture.notes import Uncounted

    stepped = sorted(set(early.scaler_steps[steps_before:]))
    if stepped:
        shown = ", ".join(_shown(file, line) for file, line in stepped[:3])
        return Uncounted(f"the GradScaler(\"cuda\") made at {shown} as it was imported, before predict mode, disabled "
                         "itself (no CUDA here): its step's overflow check, a sync on a GPU, did not run and is not "
                         f"predicted (pytest {OPTION} answers True from the start)")
    # CPU tensors beside the stand-ins: any place in the code it may have run; else what its code read of an answer
    # (a flag or a function chosen by it: `t.cpu() if USE_CUDA else t` ran its CPU path, with no CPU tensor made)
    places = ([(file, line, False) for file, line in early.places_for(item)] if host_calls
              else early.places_read(item))
    if not places:
        return None
    shown = ", ".join(_shown(file, line) for file, line, _ in places[:3])
    when = "in an earlier test" if all(later for _, _, later in places[:3]) else "as it was imported"
    return Uncounted(f"torch.cuda.is_available() answered False at {shown} {when}, outside predict mode (no CUDA "
                     "here): what was chosen by it (a device, a flag, a function) took the CPU's way, whose syncs are "
                     f"not predicted (pytest {OPTION} answers True from the start)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SKIPS] = _CudaSkips()
    config.pluginmanager.register(config.stash[_SKIPS], "syncfree-cuda-skips")
    if config.getoption("syncfree_cuda", False):
        config.option.syncfree = True  # the CUDA variants need the stand-ins: every test
        _stand_in(config)  # a no-op when pytest_load_initial_conftests did it


def pytest_report_header(config: pytest.Config) -> str | None:
    if not config.getoption("syncfree_cuda", False):
        return None
    if config.stash.get(_STANDING_IN, False):
        return ("syncfree: --syncfree-cuda: torch.cuda.is_available() answers True (predict "
                "mode on the CPU)")
    return "syncfree: --syncfree-cuda: a CUDA device is present; its real answers stand"


def _stand_in(config: pytest.Config) -> None:
    if _STANDING_IN in config.stash:
        return
    answers = AvailabilityAnswers()
    config.stash[_STANDING_IN] = answers.install()
    config.add_cleanup(answers.restore)


class AvailabilityAnswers:
    """The availability queries answering as on a one-GPU machine, process-wide, until
    `restore` (each replaced function keeps the real one as ``_syncfree_real``)."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> bool:
        """Replace the queries; False (nothing replaced) when CUDA is really there."""
        import torch

        # predict.real_cuda_available is where syncfree asks the real question: imported
        # now so that no engine choice ever reads these answers.
        from .capture import predict

        if predict.real_cuda_available():
            return False
        cuda = torch.cuda
        properties = predict._DEVICE_PROPERTIES
        self._replace(cuda, "is_available", lambda: True)
        self._replace(cuda, "device_count", lambda: 1)
        self._replace(cuda, "get_device_capability", lambda device=None: (
            properties.major, properties.minor))
        self._replace(cuda, "get_device_name", lambda device=None: properties.name)
        self._replace(cuda, "get_device_properties", lambda device=None: properties)
        self._replace(cuda, "is_bf16_supported", lambda *args, **kwargs: True)
        # What code asks once it has seen CUDA, outside a test too (a module stepping an
        # optimizer at import: torch.optim.Adam's _accelerator_graph_capture_health_check
        # asks the current stream whether it is capturing): a device with an idle stream.
        # A predict session inside a test answers them with its own stand-ins meanwhile.
        stream = IdleStream()
        self._replace(cuda, "current_device", lambda: 0)
        self._replace(cuda, "current_stream", lambda device=None: stream)
        self._replace(cuda, "default_stream", lambda device=None: stream)
        self._replace(cuda, "is_current_stream_capturing", lambda: False)
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None:
            self._replace(accelerator, "is_available", lambda: True)
            self._replace(accelerator, "device_count", lambda: 1)
            self._replace(accelerator, "current_accelerator",
                          lambda check_available=False: torch.device("cuda"))
            for name in ("current_device_index", "current_device_idx"):
                self._replace(accelerator, name, lambda: 0)
            self._replace(accelerator, "current_stream", lambda device=None: stream)
        return True

    def _replace(self, owner: Any, name: str, answer: Any) -> None:
        real = getattr(owner, name, None)
        if real is None:
            return
        answer.__name__ = name
        answer.__qualname__ = f"{owner.__name__}.{name}"
        answer.__doc__ = f"syncfree --syncfree-cuda: the answer of a GPU machine ({name})."
        answer._syncfree_real = real
        self._saved.append((owner, name, real))
        setattr(owner, name, answer)

    def restore(self) -> None:
        while self._saved:
            owner, name, real = self._saved.pop()
            setattr(owner, name, real)


class IdleStream:
    """The current CUDA stream outside a test's stand-ins under ``--syncfree-cuda``: no
    CUDA tensor exists there, so nothing is queued on it."""

    cuda_stream = 0
    priority = 0

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", 0)

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None


class _CudaSkips:
    """Tests skipped for want of CUDA, tests whose compiled code ran eagerly and tests that
    ran TorchScript without Python source, for ``--syncfree``'s summary (counted where the
    reports arrive: the controller under pytest-xdist, where each report carries its test's
    ``syncfree_eager_compiles`` and ``syncfree_unseen_torchscript``)."""

    def __init__(self) -> None:
        self.count = 0
        self.eager: list[tuple[str, dict]] = []  # (test id, {compiled function: calls})
        self.unseen: list[tuple[str, dict]] = []  # (test id, {TorchScript name: calls})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and report.when in ("setup", "call") and not hasattr(report, "wasxfail") \
                and _CUDA_REASON.search(_skip_reason(report)):  # an expected failure is "skipped" too
            self.count += 1
        if report.when != "call":
            return
        for attribute, tests in (("syncfree_eager_compiles", self.eager),
                                 ("syncfree_unseen_torchscript", self.unseen)):
            calls = getattr(report, attribute, None)
            if isinstance(calls, dict) and calls:
                tests.append((report.nodeid, calls))


def _counted() -> dict:
    import sys

    predict = sys.modules.get("syncfree.capture.predict")
    return {counter: dict(getattr(predict, counter, {})) for counter in _COUNTERS}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("syncfree", False):
        item.stash[_COUNTED_BEFORE] = _counted()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    before = item.stash.get(_COUNTED_BEFORE, None)
    if call.when == "call" and before is not None:
        for counter, now in _counted().items():
            was = before[counter]
            grown = {name: n - was.get(name, 0) for name, n in now.items() if n > was.get(name, 0)}
            if grown:
                # An attribute of the report: pytest-xdist carries a report's attributes to
                # the controller (_pytest/reports.py, _report_to_json).
                setattr(report, _COUNTERS[counter], grown)
        grown = getattr(report, "syncfree_eager_compiles", None)
        if grown and report.failed:  # a check that the code compiled (a frame count) fails
            names = ", ".join(f"`{name}`" for name in sorted(grown))
            report.sections.append(("syncfree: torch.compile ran eagerly", (
                f"{names} ran eagerly in predict mode (it cannot compile for a GPU): "
                "nothing was compiled, so a check that compilation happened (a backend's "
                "frame count, dynamo's counters, fullgraph errors) fails here and not on "
                "a GPU machine.")))
    return report


def _write_tests(write: Any, tests: list[tuple[str, dict]], heading: str) -> None:
    """A summary heading (``{tests}``: "N tests") and the first tests, each with its calls by name."""
    if not tests:
        return
    write("  " + heading.format(tests=f"{len(tests)} test{'s' if len(tests) != 1 else ''}"))
    for nodeid, calls in sorted(tests)[:_SHOWN_TESTS]:
        write(f"    {nodeid}: " + ", ".join(f"`{name}` ×{n}" for name, n in sorted(calls.items())))
    if len(tests) > _SHOWN_TESTS:
        write(f"    ... and {len(tests) - _SHOWN_TESTS} more")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    # Written after syncfree's own summary (pytest_plugin.py), in its section.
    if not config.getoption("syncfree", False):
        return
    write = terminalreporter.write_line
    skips = config.stash.get(_SKIPS, None)
    if skips is not None:
        _write_tests(write, skips.eager, "torch.compile'd code ran eagerly in {tests} (predict mode cannot "
                     "compile for a GPU; their syncs are predicted as eager code, nothing was compiled):")
        _write_tests(write, skips.unseen, "TorchScript without Python source ran in {tests}: its syncs were "
                     "not predicted (a GPU run sees them; a sync_free verdict there is unverified):")
    tests = f"{skips.count} test{'s' if skips.count != 1 else ''}" if skips is not None else ""
    if config.stash.get(_STANDING_IN, False):
        write("  CUDA variants ran in predict mode on the CPU (--syncfree-cuda): torch.cuda.is_available() "
              "answered True from start-up")
        if skips is not None and skips.count:  # a CUDA build asked for (torch.version.cuda), or several GPUs
            write(f"  {tests} still skipped for want of CUDA (the skip reason names CUDA or a GPU): {OPTION} "
                  "answers is_available() and device_count() as one GPU does, not what else they asked")
        return
    if skips is not None and skips.count and not config.getoption("syncfree_cuda", False):
        write(f"  {tests} skipped for want of CUDA (the skip reason names CUDA or a GPU): {OPTION} runs those "
              "that ask torch.cuda.is_available() (or for one GPU) in predict mode on the CPU")
