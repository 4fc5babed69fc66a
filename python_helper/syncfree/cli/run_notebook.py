"""``syncfree run NOTEBOOK.ipynb``: execute the notebook in a fresh kernel with the syncfree IPython extension loaded
and every cell watched (``%syncfree on``); print each cell's report (or, with ``--format json|sarif|github``, one
diagnostic per sync site). It exits 1 when a budget is exceeded: a cell's own (``"syncfree": {"budget": N}`` in its
metadata) or ``--budget`` (default 0) for the cells without one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from syncfree._version import __version__
from syncfree.cli.sources import read_notebook_json
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, not_a_file
from syncfree.output import Diagnostic, clean_text, site_diagnostic, write_diagnostics
from syncfree.report import is_nested


def _drop_what_the_stop_cut_short() -> None:
    """A signal's stop raised inside the kernel's start can cut an event loop's construction short (no self-pipe
    yet) and leave nbclient's start coroutine unawaited: collected later, they printed "Exception ignored in
    BaseEventLoop.__del__" with a traceback and a RuntimeWarning on the run's stderr. Collected now, quietly: the
    run is ending, and its message says why."""
    import gc
    import warnings

    def unraisable(info: Any) -> None:
        if type(getattr(info, "object", None)).__name__.endswith("EventLoop") or \
                getattr(getattr(info, "object", None), "__qualname__", "").endswith("EventLoop.__del__"):
            return
        previous(info)

    previous = sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "coroutine ... was never awaited"
            gc.collect()
    finally:
        sys.unraisablehook = previous

__all__ = ["REPORT_MIME_TYPE", "CellReport", "run"]

REPORT_MIME_TYPE = "application/vnd.syncfree.report.v1+json"
# The longest path a Unix socket may have: sun_path holds 108 bytes on Linux and 104 on macOS, the final NUL
# included (jupyter_client names each of the kernel's sockets <ip>-<port>).
_SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 107


def _fits(folder: str) -> bool:
    """Whether the kernel's sockets (<folder>/kernel-<port>) fit a Unix socket's path."""
    return len(os.fsencode(os.path.join(folder, "kernel-65535"))) <= _SOCKET_PATH_MAX


def _short_folder() -> str | None:
    """A private folder with a short path for the kernel's sockets, or None."""
    try:
        folder = tempfile.mkdtemp(prefix="syncfree-kernel-", dir="/tmp")
    except OSError:
        return None
    if _fits(folder):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    return None


def run(
    notebook_path: str,
    *,
    timeout: float = 600,
    output: str | None = None,
    watch_all: bool = True,
    allow_errors: bool = False,
    kernel_name: str = "python3",
    output_format: str = "text",
    budget: int | None = None,
    mode: str | None = None,
    engine: str | None = None,
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
) -> int:
    """``syncfree run NOTEBOOK.ipynb``: execute it in a fresh kernel, every cell watched; report each cell's syncs.

    Budgets: a cell whose metadata holds ``"syncfree": {"budget": N}`` may sync N times; the cells without a budget
    of their own share ``budget`` (default 0). Exit 1 only when a budget is exceeded or cannot be judged (a child
    process of a cell ended without a report of its syncs), 2 when the notebook did not run to the end. Syncs on a
    line with a ``# syncfree: allow`` comment are reported but not counted.
    """
    out = out or sys.stdout
    state = state if state is not None else {}
    path = Path(notebook_path)
    if path.suffix != ".ipynb":
        raise UsageProblem(f"{notebook_path}: syncfree run takes a .py script or an .ipynb notebook")
    if not path.is_file():
        raise not_a_file(notebook_path)
    if output:
        _check_writable(output)
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as error:
        raise UsageProblem(
            f"running a notebook needs {error.name or 'nbclient'}, which is not installed: "
            "pip install 'syncfree[notebook]'"
        ) from None
    _check_kernel(kernel_name)
    from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageProblem(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    # Checked first: nbformat answers JSON that is no notebook with a traceback of jsonschema's.
    read_notebook_json(text, str(path))
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat.ValidationError and what its validator raises: never a traceback
        lines = str(error).strip().splitlines()
        raise UsageProblem(f"cannot read {path} as a notebook: {lines[0] if lines else type(error).__name__}") from None
    cell_budgets = _cell_budgets(notebook, str(path))
    # Loaded directly rather than with %load_ext, so that the notebook's own
    # `%load_ext syncfree` still runs quietly (the extension's load is idempotent).
    watch_line = (f"on{f' --mode {mode}' if mode else ''}{f' --engine {engine}' if engine else ''}"
                  if watch_all else "")
    setup = ("import syncfree.magic as _syncfree_magic\n"
             f"_syncfree_magic.watch_for_run(get_ipython(), {watch_line!r})\ndel _syncfree_magic")
    for cell in notebook.cells:
        # Only this run's outputs are read: nbclient skips empty cells and the cells after a failing one, which
        # would otherwise keep the outputs saved in the file.
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    failure = None
    stopped: list[int] = []  # the signal that stopped the run

    started: list[Any] = []  # the NotebookClient, once made
    cut_short = False  # a signal's stop (_Stopped) ended the run

    def on_signal(signum: int, frame: Any) -> None:
        # A KeyboardInterrupt raised inside nbclient's event loop is not seen until the running cell ends (never,
        # for an infinite loop): kill the kernel instead, which nbclient reports at once as a dead kernel. Before
        # the kernel has a process, stop the start; either way the kernel, its sockets and its connection file
        # are cleaned up below, for SIGTERM (a CI job cancelled, a `timeout` run out) as for Ctrl-C.
        stopped.append(signum)
        provisioner = getattr(getattr(started[0], "km", None), "provisioner", None) if started else None
        pid = getattr(provisioner, "pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        else:
            raise _Stopped(signum)

    from syncfree.capture.interrupts import ending_signals

    handled = (signal.SIGINT, *(signum for signum in ending_signals() if signal.getsignal(signum) == signal.SIG_DFL))
    previous = ({signum: signal.signal(signum, on_signal) for signum in handled}
                if threading.current_thread() is threading.main_thread() else {})
    # The handlers are in place before anything is made that a signal would leave behind (the sockets' folder, the
    # connection file, the kernel): from here every exit goes through the finally below.
    sockets = None
    kernel_log = None
    client = None
    progress: _Progress | None = None
    try:
        extra = {}
        if os.name == "posix":
            # Unix sockets rather than TCP: the kernel stays private to this run (and ipykernel
            # does not warn about unencrypted TCP).
            # The async manager: nbclient's event loop keeps polling (cell timeouts, a dead kernel) while a cell
            # runs; a blocking KernelManager would stall it (nbclient/client.py, async_wait_for_reply).
            from jupyter_client.manager import AsyncKernelManager

            # An absolute socket path: the kernel runs in the notebook's folder, not ours.
            with _signals_held():  # made and named at once: a signal cannot come between
                sockets = tempfile.mkdtemp(prefix="syncfree-kernel-")
            if not _fits(sockets):
                # A TMPDIR too long for a socket's path: the sockets go in a short folder of /tmp instead (over TCP a
                # signal takes the kernel about a minute to stop).
                with _signals_held():
                    short = _short_folder()
                    if short is not None:
                        shutil.rmtree(sockets, ignore_errors=True)
                        sockets = short
            # The connection file goes in the same folder: left to jupyter_client it is a mkstemp file of TMPDIR
            # (jupyter_client/connect.py, write_connection_file), which a signal between its creation and the manager
            # learning its name would leave behind.
            connection = {"connection_file": os.path.join(sockets, "connection.json")}
            if _fits(sockets):
                extra["km"] = AsyncKernelManager(kernel_name=kernel_name, transport="ipc",
                                                 ip=os.path.join(sockets, "kernel"), **connection)
            else:
                # A TMPDIR too long for a socket's path ("File name too long" from zmq, and the run ended at the
                # kernel's start) and no short folder to put them in: the kernel talks over TCP on the loopback. Still our manager, made here, so that a
                # signal finds the kernel to stop (the folder still holds the kernel's log).
                extra["km"] = AsyncKernelManager(kernel_name=kernel_name, **connection)
        progress = _Progress(notebook, sys.stderr)
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name=kernel_name,
            **extra,
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.resolve().parent)}},
            on_cell_executed=progress,
            on_cell_execute=progress.started,
        )
        # nbclient shuts down only a kernel whose manager it made itself (nbclient/client.py,
        # setup_kernel): ours too.
        client.owns_km = True
        started.append(client)
        kernel_log = open(os.path.join(sockets, "kernel.log"), "w+b") if sockets else None  # noqa: SIM115
        _execute(client, notebook, setup, timeout, kernel_log)
    except (CellExecutionError, CellControlSignal, DeadKernelError, TimeoutError, RuntimeError) as error:
        failure = error
    except _Stopped:
        cut_short = True
    finally:
        if cut_short:  # here, the stop's traceback (and the frames it holds) let go
            _drop_what_the_stop_cut_short()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if client is not None:
            _forget_kernel(client)
        if sockets:
            # A signal that came while the kernel's process was being made (its pid not yet known to its manager)
            # leaves it running: it is found by its connection file, in its arguments.
            _kill_children_naming(sockets)
        if kernel_log is not None:
            kernel_log.close()
        if sockets:
            shutil.rmtree(sockets, ignore_errors=True)
    reports = _cell_reports(notebook, str(path))
    verdict = _judge(reports, cell_budgets, budget, str(path))
    if output_format == "text":
        _print_reports(reports, str(path), out)
        if verdict.summary:
            print(verdict.summary, file=out)
    else:
        # As `check` leaves out allowed findings, the sites a `# syncfree: allow` comment covers are left out here.
        counted = [found for found in reports if not found.nested]
        diagnostics = [_cell_site_diagnostic(str(path), found.number, found.cell, found.report, site)
                       for found in counted for site in _counted_syncs(found.cell, found.report)[1]]
        write_diagnostics(diagnostics, output_format, out, tool_version=__version__)
        # json, sarif and github carry no notes: syncs without a line (a thread of an earlier cell, a %%script
        # child) and those not counted are said on stderr, as `syncfree run SCRIPT` says its notes.
        for note in _unplaced_notes(counted, str(path)):
            print(f"syncfree: note: {note}", file=sys.stderr)
    out.flush()
    if stopped:
        # The cells that ran before the signal have their reports above; then the process ends as the signal ends a
        # program without a handler.
        what = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}.get(
            stopped[0], f"ended by {signal.Signals(stopped[0]).name}")
        print(f"syncfree: error: {path} {what}; the kernel was stopped (the reports above are those of the cells "
              "that ran)", file=sys.stderr)
        state["status"] = EXIT_ERROR
        if stopped[0] != signal.SIGINT:  # SIGTERM, SIGHUP...: the process dies of it
            sys.stderr.flush()
            signal.signal(stopped[0], signal.SIG_DFL)
            os.kill(os.getpid(), stopped[0])
        state["die_by"] = signal.SIGINT  # cli.main: after the report, as Python after Ctrl-C
        return EXIT_ERROR
    if output:
        nbformat.write(notebook, output)
    if failure is not None:
        lines = [line for line in clean_text(str(failure)).strip().splitlines() if line.strip("-= ")]
        if isinstance(failure, CellExecutionError) or not lines:
            message = lines[-1] if lines else type(failure).__name__
        else:  # a timeout or a dead kernel says what happened first
            message = lines[0]
        running = progress.running if progress is not None else None
        if isinstance(failure, DeadKernelError) and running is not None:
            # Each cell's report is written as the cell ends: the dying cell's syncs went with its kernel.
            message += f" in cell {running + 1} (its syncs are not in the report: it did not end)"
        print(f"syncfree: error: {path} did not run to the end: {message}", file=sys.stderr)
        state["status"] = EXIT_ERROR
        return EXIT_ERROR
    for line in verdict.exceeded + verdict.unjudged:
        print(f"syncfree: {line}", file=sys.stderr)
    state["status"] = EXIT_FOUND if verdict.exceeded or verdict.unjudged else EXIT_CLEAN
    return state["status"]


def _cell_budgets(notebook: Any, path: str) -> dict[int, int]:
    """The budgets of the cells that carry one in their metadata (``"syncfree": {"budget": N}``), by cell number."""
    budgets = {}
    for number, cell in enumerate(notebook.cells, start=1):
        settings = cell.get("metadata", {}).get("syncfree")
        if settings is None:
            continue
        value = settings.get("budget") if isinstance(settings, dict) else settings
        if isinstance(settings, dict) and "budget" not in settings:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageProblem(f'{path}:cell {number}: the metadata "syncfree": {{"budget": N}} takes a whole number '
                               f">= 0, not {json.dumps(value)[:40]}")
        budgets[number] = value
    return budgets


@dataclass
class _Verdict:
    summary: str
    exceeded: list[str]
    unjudged: list[str]  # the cells whose child processes left no report, when no budget was exceeded


def _counted_syncs(cell: Any, report: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """A cell's syncs that count towards a budget (all but those a ``# syncfree: allow`` comment covers) and the
    sites they come from."""
    from syncfree.allow import allowed_by_comment

    lines = str(cell.get("source", "")).splitlines()
    allowed, counted = 0, []
    for site in report["sites"]:
        text = lines[site["line"] - 1] if 0 < site["line"] <= len(lines) else ""
        if allowed_by_comment(text, site["kind"], site.get("rule")):
            allowed += site["count"]
        else:
            counted.append(site)
    return max(report["totals"]["syncs"] - allowed, 0), counted


def _judge(reports: list[CellReport], cell_budgets: dict[int, int], budget: int | None,
           path: str) -> _Verdict:
    """Which budgets the run exceeded, each named with the cells and lines that did it."""
    exceeded = []
    shared, shared_cells = 0, []
    total = 0
    for found in reports:
        if found.nested:  # its syncs are in the cell's own report, which comes after it
            continue
        number = found.number
        count, sites = _counted_syncs(found.cell, found.report)
        total += count
        if number in cell_budgets:
            if count > cell_budgets[number]:
                exceeded.append(f"{path}:cell {number}: {_syncs(count)} the cell's budget of {cell_budgets[number]} "
                                f"({_where(sites, count)})")
        elif count:
            shared += count
            shared_cells.append(f"cell {number}: {count} ({_where(sites, count)})")
    limit = budget if budget is not None else 0
    if shared > limit:
        scope = "the cells without a budget of their own" if cell_budgets else "the notebook"
        exceeded.append(f"{path}: {_syncs(shared, scope)} the budget of {limit}: " + "; ".join(shared_cells))
    # A child process that left no report (killed) took its syncs with it: a count within the budgets is then no
    # pass (as `syncfree run SCRIPT` and `sync_free()`), and the run says which cell and which child.
    unjudged = [] if exceeded else [f"could not judge {path}:cell {found.number}: {note}"
                                    for found in reports for note in found.report.get("lost_children") or ()]
    summary = ""
    if budget is not None or cell_budgets or unjudged:
        kept = "exceeded" if exceeded else "not judged" if unjudged else "kept"
        summary = f"{path}: {total} counted sync{'s' if total != 1 else ''}; budgets {kept}."
    return _Verdict(summary, exceeded, unjudged)


def _unplaced_notes(reports: list[CellReport], path: str) -> list[str]:
    """For the formats without notes: each cell's syncs that no site holds (``2 syncs outside your code ...``) and
    its notes, a note every cell repeats (no CUDA device, no cost) left out."""
    notes = []
    everywhere = set.intersection(*(set(found.report.get("notes") or ()) for found in reports)) if reports else set()
    for found in reports:
        report = found.report
        outside = report["totals"]["syncs"] - sum(site["count"] for site in report["sites"])
        own = [note for note in report.get("notes") or () if note not in everywhere]
        if outside > 0 or own:
            said = [f"{outside} sync{'s' if outside != 1 else ''} not in this output"] if outside > 0 else []
            notes.append(f"{path}:cell {found.number}: " + "; ".join(said + own))
    return notes


def _syncs(count: int, where: str = "") -> str:
    """``1 sync exceeds`` / ``3 syncs in the notebook exceed``."""
    return f"{count} sync{'s' if count != 1 else ''}{f' in {where}' if where else ''} exceed{'s' if count == 1 else ''}"


def _where(sites: list[dict[str, Any]], count: int | None = None) -> str:
    """``line 3 .item() ×2, line 5 .cpu() ×1``: where a cell's ``count`` counted syncs are, and how many have no line
    (a thread of an earlier cell, a child process)."""
    unplaced = count - sum(site["count"] for site in sites) if count is not None else 0
    if unplaced > 0:
        without = f"{unplaced} without a line"
        return f"{_where(sites)}, {without}" if sites else without
    ranked = sorted(sites, key=lambda site: -site["count"])
    from syncfree.kinds import kind_label

    def label(site: dict[str, Any]) -> str:  # what synced, in words (not the kind's id)
        text = site.get("label") if isinstance(site.get("label"), str) else kind_label(str(site.get("kind")))
        return text.replace("`", "")

    shown = ", ".join(f"line {site['line']} {label(site)} ×{site['count']}" for site in ranked[:3])
    return shown + (f", {len(ranked) - 3} more sites" if len(ranked) > 3 else "")


def _cell_site_diagnostic(path: str, number: int, cell: Any, report: dict[str, Any], site: dict[str, Any]) -> Diagnostic:
    lines = str(cell.get("source", "")).splitlines()
    text = lines[site["line"] - 1] if 0 < site["line"] <= len(lines) else ""
    predicted = bool(site.get("predicted", report.get("mode") == "predict"))
    # At the call that synced where the report has its range (SyncSite.range), else the line's code; in the words
    # of every text surface (syncfree.output.text_line).
    return site_diagnostic({**site, "predicted": predicted}, path, line_text=text or " ", cell=number,
                           cell_id=cell.get("id"), **_first_call(site))


def _first_call(site: dict[str, Any]) -> dict[str, Any]:
    """A recurring site's first call (its first sync's blocked time), for the row's ``first_ms``/``first_calls``."""
    if site.get("phase", "recurring") != "recurring" or site.get("first_ms") is None:
        return {}
    return {"first_ms": site["first_ms"], "first_calls": 1}


class _Progress:
    """nbclient's ``on_cell_executed`` hook: ``cell 3/50 done, 4 syncs so far`` as one updating line on a terminal,
    plain lines otherwise."""

    def __init__(self, notebook: Any, stream: TextIO) -> None:
        self.total = sum(1 for cell in notebook.cells if cell.cell_type == "code")
        self.done = 0
        self.syncs = 0
        self.stream = stream
        self.running: int | None = None  # the index of the cell running now (started)
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"

    def started(self, cell: Any, cell_index: int) -> None:
        """nbclient's ``on_cell_execute`` hook: the cell running now (named if its kernel dies in it)."""
        self.running = cell_index

    def __call__(self, cell: Any, cell_index: int, execute_reply: Any = None) -> None:
        self.running = None
        self.done += 1
        for output in cell.get("outputs", []):
            if is_nested(output):  # counted in the cell's own report
                continue
            report = output.get("data", {}).get(REPORT_MIME_TYPE) if isinstance(output.get("data"), dict) else None
            totals = report.get("totals") if isinstance(report, dict) else None
            if isinstance(totals, dict) and isinstance(totals.get("syncs"), int):
                self.syncs += totals["syncs"]
        line = f"syncfree: cell {cell_index + 1} done ({self.done}/{self.total} code cells), {self.syncs} syncs so far"
        try:
            if self.tty:
                self.stream.write("\r\x1b[K" + line + ("\n" if self.done >= self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass


def _check_writable(output: str) -> None:
    folder = Path(output).resolve().parent
    if not folder.is_dir():
        raise UsageProblem(f"cannot write {output}: no folder {folder}")
    if not os.access(folder, os.W_OK) or (Path(output).exists() and not os.access(output, os.W_OK)):
        raise UsageProblem(f"cannot write {output}: permission denied")


def _check_kernel(kernel_name: str) -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        known = ", ".join(sorted(KernelSpecManager().find_kernel_specs())) or "none"
        raise UsageProblem(f"no kernel named {kernel_name!r} (installed: {known})") from None


class ExtensionNotLoaded(RuntimeError):
    """The kernel could not load the syncfree extension (not installed in the kernel's environment)."""


class _Stopped(BaseException):
    """SIGINT or SIGTERM before the kernel had a process."""


@contextlib.contextmanager
def _signals_held() -> Any:
    """SIGINT and SIGTERM held back (delivered at the end) while a temp file is made and named."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask (Windows): as before
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _kill_children_naming(text: str) -> None:
    """Kill (and reap) this process's children whose command line contains ``text`` (Linux; elsewhere nothing)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    me = os.getpid()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if text.encode() not in cmdline.read():
                    continue
            os.kill(int(entry), signal.SIGKILL)
            os.waitpid(int(entry), 0)
        except (OSError, IndexError, ValueError, ChildProcessError):
            continue


def _forget_kernel(client: Any) -> None:
    """Whatever is left of the kernel after any exit (a start cut short included): its process killed, its
    connection file removed (jupyter_client's cleanup_resources)."""
    km = getattr(client, "km", None)
    if km is None:
        return
    process = getattr(getattr(km, "provisioner", None), "process", None)  # a Popen: never a reused pid
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()
    connection_file = getattr(km, "connection_file", None)
    if connection_file:
        try:
            os.remove(connection_file)
        except OSError:
            pass


def _execute(client: Any, notebook: Any, setup: str, timeout: float | None = None,
             kernel_log: Any = None) -> None:
    """What ``NotebookClient.execute`` does, with ``setup`` run in the kernel before the first cell.

    The setup goes through the kernel client, not into the notebook as a cell, so the executed notebook holds only
    the user's cells; nbclient collects a cell's outputs by parent message id (nbclient/client.py,
    _async_poll_output_msg), so the setup's own output never lands in a cell. ``setup_kernel`` shuts the kernel
    down on every exit path.
    """
    client.reset_execution_trackers()
    # The kernel's own stderr (its log: a ZMQ error at a shutdown after a timeout, say) goes to a file, not among
    # syncfree's one-line messages; the cells' output reaches the notebook through the kernel's messages anyway.
    kernel_output = {"stderr": kernel_log} if kernel_log is not None else {}
    with client.setup_kernel(**kernel_output):
        info = client.wait_for_reply(client.kc.kernel_info())
        if info is not None and "language_info" in info["content"]:
            notebook.metadata["language_info"] = info["content"]["language_info"]
        # --timeout is per cell: the setup (importing syncfree, torch) gets at least a minute of its own. nbclient
        # cannot time out a wait that belongs to no cell (nbclient/client.py, _async_handle_timeout asserts a cell).
        client.timeout = max(timeout or 0, 60) if timeout is not None else None
        try:
            reply = client.wait_for_reply(client.kc.execute(setup, store_history=False))
        except (TimeoutError, AssertionError):
            raise TimeoutError(f"the kernel did not load syncfree within {client.timeout:.0f} seconds") from None
        finally:
            client.timeout = timeout
        content = (reply or {}).get("content", {})
        if content.get("status") != "ok":
            raise ExtensionNotLoaded(
                f"the kernel could not load syncfree ({content.get('ename', 'no reply')}: "
                f"{content.get('evalue', '')}); install syncfree in the kernel's environment"
            )
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)


def _valid_report(report: Any) -> dict[str, Any] | None:
    """The report if it matches report.schema.json (checked with jsonschema when installed, by shape otherwise)."""
    if isinstance(report, str):  # some writers store JSON MIME data as text
        try:
            report = json.loads(report)
        except ValueError:
            return None
    if not isinstance(report, dict):
        return None
    validator = _report_validator()
    if validator is None:
        totals = report.get("totals")
        ok = isinstance(totals, dict) and isinstance(totals.get("syncs"), int) and isinstance(report.get("sites"), list)
        return report if ok else None
    return report if validator.is_valid(report) else None


@functools.lru_cache(maxsize=1)
def _report_validator() -> Any:
    """report.schema.json's validator, made once per run (a notebook has a report per cell); None without
    jsonschema."""
    try:
        import jsonschema
    except ImportError:
        return None
    schema = json.loads((Path(__file__).parent.parent / "report.schema.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


@dataclass(frozen=True)
class CellReport:
    """A valid report output of an executed notebook: the cell's number among all cells, the cell, the report and
    its plain-text rendering."""

    number: int
    cell: Any
    report: dict[str, Any]
    text: str
    # Made inside another report of the cell that counts its syncs too (a %%syncfree run from a watched cell's code:
    # syncfree.report.NESTED_METADATA): shown, not added up again
    nested: bool = False


def _cell_reports(notebook: Any, path: str) -> list[CellReport]:
    """Every valid report output of the run; invalid ones are left out with a warning."""
    reports = []
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
            if REPORT_MIME_TYPE not in data:
                continue
            report = _valid_report(data[REPORT_MIME_TYPE])
            if report is None:
                print(f"syncfree: warning: {path}:cell {number}: a report output that does not match the schema was "
                      "left out", file=sys.stderr)
                continue
            text = data.get("text/plain") or f"syncfree: {report['totals']['syncs']} syncs"
            reports.append(CellReport(number, cell, report,
                                      clean_text("".join(text) if isinstance(text, list) else str(text)),
                                      nested=is_nested(output)))
    return reports


def _print_reports(reports: list[CellReport], path: str, out: TextIO) -> None:
    """Print the text of each cell's report output; a note that every cell repeats (no CUDA
    device, the op table's torch version) is printed with the first cell that has it."""
    shown_notes: set[str] = set()
    for found in reports:
        lines = []
        for line in found.text.splitlines():
            if line.lstrip().startswith("note: "):
                if line.strip() in shown_notes:
                    continue
                shown_notes.add(line.strip())
            lines.append(line)
        text = "\n".join(lines)
        within = " (a run inside the cell, counted in the cell's report below)" if found.nested else ""
        print(f"{path}:cell {found.number}{within}: {text}", file=out)
    if not reports:
        print(f"{path}: no syncfree reports (no cell synchronized)", file=out)


