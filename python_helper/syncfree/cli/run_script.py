"""``syncfree run script.py ARGS...`` (also ``-m module``, ``-c code``, ``-`` for stdin): the program under the engine
(`syncfree.script_run.run_script`), one row per sync site in any format.

A row is a site: a file, a line and a rule. Syncs that reach the same line through different call chains are one
row that lists the chains (``called from ...``); the syncs of forked child processes (DataLoader and Pool workers)
are rows of their own that name the processes. Paths are relative to the folder ``run`` started in, whatever
folder the program moved to. ``--select``/``--ignore`` (or ``[tool.syncfree]``) leave out the rows of other rules,
and the summary says how many syncs that left out.
"""

from __future__ import annotations

import linecache
import os
import signal as _signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from syncfree._version import __version__
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, not_a_file
from syncfree.output import (
    SYNTAX_ERROR,
    Diagnostic,
    ReportOutput,
    code_columns,
    outside_line,
    site_what,
    write_diagnostics,
)

__all__ = ["die_by_signal", "run_python"]


def run_python(
    target: str,
    argv: Sequence[str],
    *,
    module: bool = False,
    code: str | None = None,
    mode: str | None = None,
    engine: str | None = None,
    output_format: str = "text",
    budget: int | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    output: ReportOutput | None = None,
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
    exit_zero: bool = False,
    run_options: Sequence[str] | None = None,
    cost: bool = False,
    budget_ms: float | None = None,
) -> int:
    """``syncfree run script.py args...``: the program under the engine, its sync sites as diagnostics.

    ``output``: where the report goes (default: ``out``, else stdout); with a machine format it also keeps the
    program's stdout out of the report's stream. Returns the exit status; a program that calls ``os._exit(n)``
    ends this process once its report is written, with status n, or 1 when n is 0 and its syncs exceed the budget
    (``exit_zero``: n), as a run that ended by itself would.

    ``run_options``: the command line's own options (``syncfree run OPTIONS program...``). With them, a program
    that replaces itself with this Python (``os.execv(sys.executable, [sys.executable, *sys.argv])``, a script
    that re-executes itself with new settings) is followed: the new program runs under ``syncfree run`` with the
    same options, and its report carries on this one's (`EXEC_CARRY`); the status is the new run's.

    ``cost``: measure what each sync costs, the GPU time it loses (syncfree.cost; rows are ranked by it);
    ``budget_ms``: exit 1 when the counted rows lost more GPU time than that (implies ``cost``; not checked, and
    said so, where the cost is not measured).
    """
    output = output or ReportOutput(None, output_format, out)
    state = state if state is not None else {}
    earlier = _take_carry()  # what the program synced before it replaced itself with this run's program
    start = earlier["start"] if earlier else os.getcwd()  # paths are shown relative to it, wherever the program goes
    if not module and code is None and target != "-":
        if Path(target).is_dir():  # python runs a folder's __main__.py
            if not (Path(target) / "__main__.py").is_file():
                raise UsageProblem(f"cannot run {target}: it is a folder without a __main__.py")
        elif not Path(target).is_file():
            raise not_a_file(target)
    selected = _selected_rules(select, ignore)
    from syncfree.script_run import ModuleNotRunnable, run_script

    shown_target = f"-m {target}" if module else "-c" if code is not None else target

    def on_exit(result: Any) -> int | tuple:  # os._exit(n) in the program: its report, then the status to end with
        output.restore_stdout()
        output.take_back_streams()
        _carry_on(result, earlier)
        if result.replaced_by and run_options is not None:
            followed = _followed(result.replaced_by, run_options)
            # os.exec* of this Python: the new program runs under syncfree run too, when it can start there.
            if followed is not None and _can_start(followed, getattr(result, "replaced_env", None)):
                output.hand_back_stdout()  # the new run's report goes where this one's would have
                return sys.executable, followed, {EXEC_CARRY: _write_carry(result, start)}
        status = _write(result, shown_target, output_format, output, budget, selected, start, state, hard=True,
                        budget_ms=budget_ms)
        status = result.exit_code if exit_zero and status == EXIT_FOUND else status
        if result.replaced_by and status:
            # os.exec* after syncs over the budget: the new program's status would pass the run, so it ends here.
            print(f"syncfree: {shown_target} replaced itself with os.exec* after syncs over the budget of "
                  f"{budget or 0}: ended here with status {status} instead of running {result.replaced_by[0]} "
                  "(--exit-zero lets it run)", file=sys.stderr)
            sys.stderr.flush()
        return status

    try:
        with output.program_output():
            result = run_script("-c" if code is not None else target, list(argv), mode=mode, module=module,
                                source=code, on_exit=on_exit, engine=engine,
                                pass_rules=_passed_rules(selected), cost=cost or budget_ms is not None)
    except SyntaxError as error:
        d = Diagnostic(_shown_path(error.filename or target, start), error.lineno or 1, max(error.offset or 1, 1),
                       error.end_lineno or error.lineno or 1, max(error.end_offset or 1, 1), SYNTAX_ERROR,
                       f"SyntaxError: {error.msg} (nothing ran)")
        write_diagnostics([d], output_format, output.stream(), tool_version=__version__)
        state["status"], state["syntax_only"] = EXIT_ERROR, 1
        return EXIT_ERROR
    except ModuleNotRunnable as error:
        raise UsageProblem(str(error)) from None
    except OSError as error:
        raise UsageProblem(f"cannot read {target}: {error.strerror or error}") from None
    _carry_on(result, earlier)
    return _write(result, shown_target, output_format, output, budget, selected, start, state, budget_ms=budget_ms)


def die_by_signal(signum: int) -> None:
    """End this process as Python ends after an uncaught KeyboardInterrupt (Modules/main.c, exit_sigint): its exit
    handlers run and its streams are flushed, then it kills itself with the signal's default action, so that a
    shell or a parent sees a death by the signal (status -2 for Popen; a shell stops a script that ran it)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream
            pass
    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# ------------------------------------------------------------------------------------------- os.exec* followed
#: The environment variable that hands a followed ``os.exec*``'s new run the report of the program it replaced.
EXEC_CARRY = "SYNCFREE_EXEC_CARRY"
#: Python's options that take no value (they combine: ``-uB``).
_PYTHON_FLAGS = frozenset("bBdEiIOPqsSuvx")


def _followed(command: list[str], run_options: Sequence[str]) -> list[str] | None:
    """The command that runs ``command`` under ``syncfree run`` (same options), when it runs a script, a module or
    stdin with the very Python of this run (another interpreter may not have syncfree); else None."""
    if not command or os.path.abspath(command[0]) != os.path.abspath(sys.executable):
        return None
    args, flags, i = command[1:], [], 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            module = [arg[2:]] if len(arg) > 2 else args[i + 1:i + 2]
            program = ["-m", *module, *args[i + 1 + (len(arg) == 2):]] if module else None
            break
        if arg == "--":
            program = args[i + 1:] or None
            break
        if arg in ("-X", "-W"):
            flags += args[i:i + 2]
            i += 2
            continue
        if arg.startswith(("-X", "-W")) or (arg.startswith("-") and len(arg) > 1 and set(arg[1:]) <= _PYTHON_FLAGS):
            flags.append(arg)
            i += 1
            continue
        if arg == "-c" or (arg.startswith("-c") and len(arg) > 2):
            code = [arg[2:]] if len(arg) > 2 else args[i + 1:i + 2]
            program = ["-c", *code, *args[i + 1 + (len(arg) == 2):]] if code else None
            break
        # The long options are not followed; a script or "-" (stdin) is.
        program = args[i:] if arg == "-" or not arg.startswith("-") else None
        break
    else:
        program = None  # the interactive interpreter
    if not program:
        return None
    return [sys.executable, *flags, "-m", "syncfree", "run", *run_options, "--", *program]


def _can_start(followed: list[str], env: Any) -> bool:
    """Whether the followed command can start: its Python, with its flags and the environment the program gives it,
    imports syncfree (a PYTHONPATH the program leaves out, ``-E``, ``-I``, ``-S``), and its program is there (the
    script's file, ``-m``'s module). Else following it would break the program ("No module named syncfree") or end
    the followed run at its usage error with the report carried to it: the exec then runs as the program asked,
    unwatched (noted), after this run's report is written."""
    import subprocess

    flags = followed[1:followed.index("-m")]
    program = followed[followed.index("--") + 1:]
    check = "import syncfree"
    if program[0] == "-m":
        # The top-level package only: finding a submodule imports its parents, code that should run once.
        top = program[1].partition(".")[0]
        check += f"\nimport importlib.util, sys\nsys.exit(importlib.util.find_spec({top!r}) is None)"
    elif program[0] not in ("-", "-c"):
        check += f"\nimport os, sys\nsys.exit(not os.path.isfile({program[0]!r}))"
    try:
        return subprocess.run([sys.executable, *flags, "-c", check], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _said_by_every_run(note: str) -> bool:
    """A note every run of its kind has (predicted on the CPU, no cost measured): no news on stderr, none to carry."""
    from syncfree.cost import COST_NOT_ASKED, NO_GPU_NO_COST
    from syncfree.engine_choice import PREDICTED_ON_CPU

    return note in (PREDICTED_ON_CPU, NO_GPU_NO_COST) or note.startswith(COST_NOT_ASKED[:40])


def _write_carry(result: Any, start: str) -> str:
    """The run so far (its program's sites, its children's reports, its notes), for the run of the program that
    replaces it: a file named in `EXEC_CARRY`, read and removed by that run."""
    import json
    import tempfile

    from syncfree.processes import site_fields

    earlier = getattr(result, "earlier", None) or {}
    report = result.report
    data = {
        "start": start,
        "sites": [*earlier.get("sites", []), *(site_fields(site) for site in report.sites)],
        "allowed": earlier.get("allowed", 0) + report.syncs - report.counted,
        # The syncs no site holds (no line of the program's on their stack; past the sites' limit) count too: a
        # program that re-executed itself lost them, and passed
        "outside": earlier.get("outside", 0) + report.outside,
        "overflow": earlier.get("overflow", 0) + report.overflow,
        "children": [child.to_dict() for child in result.children],
        "notes": [*result.notes, *(note for note in report.notes if not _said_by_every_run(note))],
        "replaced": [*earlier.get("replaced", []), result.replaced_by],
        "predicted": report.predicted,
    }
    handle, path = tempfile.mkstemp(prefix="syncfree-exec-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        json.dump(data, stream)
    return path


def _take_carry() -> dict[str, Any] | None:
    """The report a program that replaced itself with this run's program handed on (`_write_carry`), taken out of
    the environment (the program's own children do not see it)."""
    import json

    path = os.environ.get(EXEC_CARRY)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as stream:
            data = json.load(stream)
    except (OSError, ValueError):
        data = None
    discard_carry()
    return data if isinstance(data, dict) and "sites" in data else None


def discard_carry() -> None:
    """Remove the file of a carried report that no run took (the followed run ended at a usage error first)."""
    path = os.environ.pop(EXEC_CARRY, None)
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def _carry_on(result: Any, earlier: dict[str, Any] | None) -> None:
    """The run's result carries on the report of the program it replaced (``result.earlier``): its children and
    notes join the run's; its own sites are rows of the program (`_rows`)."""
    if not earlier or getattr(result, "earlier", None) is not None:
        return
    from syncfree.processes import ProcessReport
    from syncfree.script_run import NO_TORCH

    result.earlier = earlier
    result.children = [ProcessReport.from_dict(child) for child in earlier.get("children", [])] + result.children
    result.notes = [*earlier.get("notes", []), *result.notes]
    notes = getattr(result.report, "notes", None)
    if isinstance(notes, list) and NO_TORCH in notes:  # said of the program that replaced the one that synced
        notes[notes.index(NO_TORCH)] = ("no torch code ran after the os.exec*: the program that replaced the first "
                                        "one never imported torch, so it made no sync")


def _shown_command(command: Sequence[str]) -> str:
    shown = " ".join(command)
    return shown[:120] + ("..." if len(shown) > 120 else "")


def _reopen_stderr() -> None:
    """A program that closed ``sys.stderr`` (the process's own: its file descriptor stays open, as Python opens it)
    closed it for syncfree's messages too: a new writer on descriptor 2, as Python's exit ignores the closed one.
    The run's messages raised there, and the interpreter's last-resort dump ended the run with status 1."""
    if getattr(sys.stderr, "closed", False):
        try:
            sys.stderr = open(2, "w", encoding=getattr(sys.__stderr__, "encoding", None) or "utf-8",  # noqa: SIM115
                              errors="backslashreplace", closefd=False)
        except OSError:  # descriptor 2 closed too: nowhere to say it
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115


def _write(result: Any, target: str, output_format: str, output: ReportOutput, budget: int | None,
           selected: set[str] | None, start: str, state: dict[str, int], *, hard: bool = False,
           budget_ms: float | None = None) -> int:
    from syncfree.engine_choice import is_sync_stop

    _reopen_stderr()
    report = result.report
    # A program that never imported torch ran no engine of its own; its children's syncs say whether they predicted.
    predicted = report.predicted or (report.mode == "static" and any(
        site.get("predicted") for child in result.children for site in child.sites))
    rows, left_out, child_counted = _rows(result, selected, start)
    earlier = getattr(result, "earlier", None) or {}
    earlier_sites = earlier.get("sites", [])
    carried = earlier.get("outside", 0) + earlier.get("overflow", 0)  # the syncs no carried site holds
    counted = max(report.counted + sum(site["count"] for site in earlier_sites) + carried - left_out[0], 0) \
        + child_counted
    over = counted > (budget if budget is not None else 0)
    # The budget in GPU time lost (--budget-ms; syncfree.cost): the counted rows' cost, where it was measured.
    costs = [row.cost_ms for row in rows if row.cost_ms is not None and not row.processes]
    cost_ms = round(sum(costs), 3) if costs else None
    if budget_ms is not None and cost_ms is not None:
        # With --budget-ms alone the count no longer decides; with both, either one over fails the run. Where no
        # cost was measured (no GPU) the count budget decides as without it: no pass on a number not measured.
        over = (over if budget is not None else False) or cost_ms > budget_ms
    # A child process that left no report (killed) took its syncs with it: a count within the budget is then not a
    # pass (as `sync_free()`'s NotJudged), and the run says which child.
    from syncfree.processes import lost_children

    lost_notes = lost_children(result.notes)
    unjudged = bool(lost_notes) and not over
    stopped = result.exit_code == 1 and is_sync_stop(result.error)  # --mode error: a finding
    interrupted = isinstance(result.error, KeyboardInterrupt)
    signum = getattr(result, "signal", None)  # SIGTERM: the process dies of it once this is written
    if interrupted:
        status = result.exit_code
        state["die_by"] = _signal.SIGINT  # as Python after an uncaught KeyboardInterrupt (cli.main)
    elif signum:
        status = 128 + signum
    elif hard:
        # os._exit(n): the status the program asked for, but not a success that hides syncs over the budget (a
        # training script that ends with os._exit(0) to skip its workers' shutdown would pass a CI gate).
        status = EXIT_FOUND if result.exit_code == 0 and (over or unjudged) else result.exit_code
    else:
        status = (EXIT_FOUND if stopped else EXIT_ERROR if result.exit_code not in (0, None)
                  else EXIT_FOUND if over or unjudged else EXIT_CLEAN)
    state["status"] = status
    sites = len(rows)
    measured = [site["blocked_ms"] for site in earlier_sites if site.get("blocked_ms") is not None]
    blocked_ms = (report.blocked_ms or 0.0) + sum(measured) if report.blocked_ms is not None or measured else None
    blocked = f", blocked {blocked_ms:.1f} ms" if blocked_ms is not None else ""
    # the children's lines that a `# syncfree: allow` comment covers too (_rows leaves them out of the rows)
    child_allowed = sum(child.syncs for child in result.children) - child_counted - left_out[1]
    allowed = report.syncs - report.counted + earlier.get("allowed", 0) + child_allowed
    lost = f", cost {cost_ms:.2f} ms of GPU time" if cost_ms is not None else ""
    summary = (f"{counted} sync{'s' if counted != 1 else ''} at {sites} site{'s' if sites != 1 else ''}"
               f"{' (predicted)' if predicted else ''}{lost}{blocked}"
               f"{f'; {allowed} allowed' if allowed else ''}"
               f"{f'; {sum(left_out)} left out by --select/--ignore' if sum(left_out) else ''}, "
               f"ranked by {'cost' if cost_ms is not None else 'count' if report.blocked_ms is None else 'blocked time after the first call'}"
               f"{_once_text(rows)}.")
    if budget is not None:
        summary += f" Budget {budget}: {'exceeded' if counted > budget else 'kept'}."
    if budget_ms is not None:
        summary += (f" Budget {budget_ms:g} ms of GPU time: {'exceeded' if cost_ms > budget_ms else 'kept'}."
                    if cost_ms is not None else f" Budget {budget_ms:g} ms of GPU time: not checked (no cost measured: "
                    f"the count budget of {budget or 0} decides).")
    children = result.children
    if children:
        syncs = sum(child.syncs for child in children)
        them = (f"{len(children)} child process{'es' if len(children) != 1 else ''} "
                f"({_names([c.name for c in children])})")
        if syncs:
            shown = sum(row.count for row in rows if row.processes)
            where = ("the rows marked 'in child process'" if shown == syncs else
                     f"{shown} in the rows marked 'in child process', the rest allowed or left out" if shown else
                     "all allowed or left out")
            summary += (f"\nnote: {them} {'would sync' if predicted else 'synced'} {syncs} "
                        f"time{'s' if syncs != 1 else ''}: {where}")
        else:
            replaced = any(getattr(child, "replaced_by", None) for child in children)
            summary += f"\nnote: {them} ran without a sync" + (" until the os.exec* below" if replaced else "")
    for command in earlier.get("replaced", []):
        summary += (f"\nnote: the program replaced itself with os.exec* ({_shown_command(command)}): followed, this "
                    "report counts the syncs of both")
    replaced_by = getattr(result, "replaced_by", None)
    if replaced_by:
        summary += (f"\nnote: the program replaced itself with os.exec* ({_shown_command(replaced_by)}): this report "
                    "ends there, no atexit handler ran, and what the new program does is not watched (syncfree run "
                    "it, or run it from the program with subprocess)")
    elif signum:
        summary += (f"\nnote: the program was ended by {_signal.Signals(signum).name}: the syncs until then are "
                    "reported; no atexit handler ran (as under python)")
    elif hard and getattr(result, "in_atexit", False):
        summary += (f"\nnote: the program ended with os._exit({result.exit_code}) in an atexit handler: the handlers "
                    "after it did not run")
    elif hard:
        summary += f"\nnote: the program ended with os._exit({result.exit_code}): no atexit handler ran"
    # Syncs that no row holds: no line of the program's was on their stack (a thread whose target is torch's own,
    # an atexit handler that is a torch function); counted, and said where the rows do not add up to the count.
    outside = counted - sum(row.count for row in rows) - report.overflow - earlier.get("overflow", 0)
    unplaced = [outside_line(outside)] if outside > 0 else []
    # How it ran (e.g. "No CUDA device: --mode warn needs one"), the children it could not see, then predict
    # mode's table: unmeasured ops and the table's torch version.
    for line in (f"note: {n}" for n in [*unplaced, *report.notes, *result.notes, *report.predict_table_lines()]):
        summary += f"\n{line}"
    output.begin_report()
    write_diagnostics([row.diagnostic(predicted) for row in rows], output_format, output.stream(),
                      summary=summary, tool_version=__version__)
    output.stream().flush()
    output.close()
    if output_format != "text":
        # json, sarif and github carry no notes: the syncs no row holds, those the run could not count (a child
        # process without a report, one started unwatched, a thread predict mode did not reach, sites past the
        # report's limit) are said on stderr, never left out in silence; not the notes every predicted run has.
        for note in [*unplaced, *report.notes, *result.notes]:
            if not _said_by_every_run(note):
                print(f"syncfree: note: {note}", file=sys.stderr)
    if interrupted:
        print(f"syncfree: {target} interrupted; the syncs until then are reported", file=sys.stderr)
    elif signum:
        print(f"syncfree: {target} was ended by {_signal.Signals(signum).name}; the syncs until then are reported",
              file=sys.stderr)
    elif stopped:
        print(f"syncfree: {target} stopped at its first sync (--mode error)", file=sys.stderr)
    elif result.exit_code not in (0, None):
        print(f"syncfree: error: {target} exited with status {result.exit_code}", file=sys.stderr)
    elif replaced_by and over:
        pass  # the run's caller says whether the new program runs (run_python's on_exit)
    elif budget is not None and over and counted > budget:
        print(f"syncfree: {counted} syncs exceed the budget of {budget}", file=sys.stderr)
    elif budget_ms is not None and cost_ms is not None and over:
        print(f"syncfree: the syncs lost {cost_ms:.2f} ms of GPU time, over the budget of {budget_ms:g} ms",
              file=sys.stderr)
    elif unjudged and status == EXIT_FOUND:
        print(f"syncfree: could not judge the run: {counted} sync{'s' if counted != 1 else ''} counted, but "
              + "; ".join(lost_notes), file=sys.stderr)
    sys.stderr.flush()
    return status


# --------------------------------------------------------------------------------------------------- rows
@dataclass
class _Row:
    """The syncs of one site (path, line, rule) in the program or in its forked children."""

    path: str
    line: int
    rule: str
    what: str
    count: int = 0
    blocked_ms: float | None = None
    chains: dict[tuple[str, ...], int] = field(default_factory=dict)  # chain -> count, in order of appearance
    processes: list[str] = field(default_factory=list)  # children only
    path_on_disk: str = ""  # for the line's text: the path as the program knew it
    inside: dict[str, Any] | None = None  # the library line under the user's line (capture/sites.py)
    phase: str | None = None  # once | compile; None: recurring
    # Blocked time paid once inside a recurring row: the first call (first sync) of each of its sites, and the whole
    # of a site of it that runs once; ``firsts`` syncs make it up. None: not measured (predict mode).
    first_ms: float | None = None
    firsts: int = 0
    cost_ms: float | None = None  # GPU time its syncs lost (--cost; syncfree.cost); None: not measured
    # (line, col, end_line, end_col), 0-based columns: the call that synced, from its first site that knows it
    # (SyncSite.span); None: the line's code stands for it
    span: tuple[int, int, int, int] | None = None

    def diagnostic(self, predicted: bool) -> Diagnostic:
        if self.span is not None and self.span[0] == self.line:
            col, end_line, end_col = self.span[1] + 1, self.span[2], self.span[3] + 1
        else:
            col, end_col = code_columns(linecache.getline(self.path_on_disk, self.line))
            end_line = self.line
        chains = tuple(sorted(self.chains, key=lambda chain: -self.chains[chain]))
        return Diagnostic(self.path, self.line, col, end_line, end_col, self.rule, self.what,
                          certainty="predicted" if predicted else "measured", count=self.count,
                          blocked_ms=self.blocked_ms,
                          chains=chains if any(len(chain) > 1 for chain in chains) else None,
                          processes=tuple(self.processes) or None, inside=self.inside, phase=self.phase,
                          cost_ms=self.cost_ms,
                          cost_each_ms=round(self.cost_ms / self.count, 4) if self.cost_ms is not None and self.count
                          else None,
                          first_ms=self.first_ms if self.phase is None else None,
                          first_calls=self.firsts if self.phase is None and self.first_ms is not None else None)

    def rank_key(self) -> tuple:
        from syncfree.capture.sites import rank_key

        return rank_key(self.phase is not None, self.blocked_ms, self.first_ms, self.count, self.cost_ms)


def _rows(result: Any, selected: set[str] | None, start: str) -> tuple[list[_Row], tuple[int, int], int]:
    """One row per (process kind, path, line, rule), ranked costliest first; the syncs the rule selection left out
    (of the program, of its children); the syncs of the children that count towards a budget."""
    from syncfree.allow import allowed_by_comment
    from syncfree.processes import site_fields

    rows: dict[tuple, _Row] = {}
    left_out = [0, 0]
    child_counted = sum(child.syncs for child in result.children)
    sources = [(None, site) for site in (getattr(result, "earlier", None) or {}).get("sites", [])]
    sources += [(None, site_fields(site)) for site in result.report.sites]
    sources += [(child.name, site) for child in result.children for site in child.sites]
    for process, site in sources:
        rule = site["rule"] or site["kind"]
        if selected is not None and site["rule"] and site["rule"] not in selected:
            left_out[process is not None] += site["count"]
            child_counted -= site["count"] if process is not None else 0
            continue
        files = site["files"] or [result.path]
        chain = site["chain"]
        path = files[-1]
        if process is not None and allowed_by_comment(linecache.getline(path, chain[-1]), site["kind"], site["rule"]):
            child_counted -= site["count"]  # as the program's own allowed sites: not shown, not counted
            continue
        library = site.get("library")
        phase = site.get("phase") if site.get("phase") != "recurring" else None
        # One row per library line under a user line: regrouping keeps every count. A row is paid
        # once only when every chain into it is (a function called once at setup and in the loop recurs).
        inside = (library["file"], library["line"], library.get("rule")) if library else None
        key = (process is not None, path, chain[-1], rule, inside)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _Row(_shown_path(path, start), chain[-1], rule, _what(site))
            row.path_on_disk = path
            row.inside, row.phase = library, phase
        elif row.phase != phase:
            row.phase = None if phase is None or row.phase is None else "once"
        row.count += site["count"]
        if row.span is None and site.get("span"):
            row.span = tuple(site["span"])
        if site["blocked_ms"] is not None:
            row.blocked_ms = round((row.blocked_ms or 0.0) + site["blocked_ms"], 3)
        if site.get("cost_ms") is not None:
            row.cost_ms = round((row.cost_ms or 0.0) + site["cost_ms"], 3)
        once_ms, once_count = ((site["blocked_ms"], site["count"]) if phase is not None
                               else (site.get("first_ms"), 1))
        if once_ms is not None:
            row.first_ms = round((row.first_ms or 0.0) + once_ms, 3)
            row.firsts += once_count
        steps = tuple(f"{_shown_path(f, start)}:{n}" for f, n in zip(files, chain))
        row.chains[steps] = row.chains.get(steps, 0) + site["count"]
        if process is not None and process not in row.processes:
            row.processes.append(process)
    # Recurring syncs first, by their cost after the first call; those paid once (setup, compilation) after them.
    ranked = sorted(rows.values(), key=lambda r: (bool(r.processes), *r.rank_key(), r.path, r.line))
    return ranked, (left_out[0], left_out[1]), child_counted


def _once_text(rows: list[_Row]) -> str:
    """`sites.once_text` of the rows of this process (forked children's are listed apart)."""
    from syncfree.capture.sites import once_text

    own = [row for row in rows if not row.processes]
    return once_text([(row.count, row.blocked_ms) for row in own if row.phase],
                     [row.first_ms for row in own if not row.phase and row.first_ms is not None])


def _what(site: dict[str, Any]) -> str:
    return site_what(site["rule"], site["kind"], site.get("label"))


def _shown_path(path: str, start: str) -> str:
    """``path`` relative to the folder ``run`` started in when it is under it, else as it is; "-" for stdin, "-c" for
    the code of ``-c``."""
    if path == "<stdin>":
        return "-"
    from syncfree.script_run import COMMAND_FILENAME  # (imported by the run this row is from)

    if path == COMMAND_FILENAME:
        return "-c"
    if path.startswith("<"):
        return path
    try:
        relative = os.path.relpath(os.path.join(start, path), start)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


def _selected_rules(select: list[str] | None, ignore: list[str] | None) -> set[str] | None:
    """The rule codes whose syncs ``run`` reports: every rule unless ``select`` narrows them, less ``ignore``; None
    for every rule. Syncs without a rule (a library's, an unknown op) are always reported."""
    if select is None and not ignore:
        return None
    from syncfree.catalog import select_rules

    try:
        return {rule.code for rule in select_rules(select if select is not None else ["ALL"], ignore)}
    except ValueError as error:
        raise UsageProblem(str(error)) from None


def _passed_rules(selected: set[str] | None) -> list[str]:
    """The rules that --mode error goes past: those the selection leaves out."""
    if selected is None:
        return []
    from syncfree.catalog import RULES

    return sorted(set(RULES) - selected)


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
