"""IPython glue: the ``%%syncfree`` cell magic and ``%syncfree on|off|status``.

The logic lives in `syncfree.capture` (the recorder), `syncfree.analyze` (static findings)
and `syncfree.report`; this module only finds the cell text, compiles the body so that its
frames map to the cell's lines, runs it under a `SyncRecorder` and shows the report.

Two IPython events carry the cell: ``pre_run_cell`` gives the raw text and the cell id of
the execute request (``ExecutionInfo.raw_cell``/``cell_id``), ``post_run_cell`` comes after
the cell's own outputs (its value, its traceback), which is where the report is shown.
"""

from __future__ import annotations

import ast
import builtins
import functools
import linecache
import os
import sys
import types
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, NamedTuple

from IPython.core import magic_arguments
from IPython.core.displayhook import DisplayHook
from IPython.core.error import UsageError
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from . import collector
from .analyze import analyze_source
from .capture import SyncRecorder
from .capture.sites import MAX_FRAMES, name_notebook_cells
from .engine_choice import (
    Engine,
    cell_report,
    choose_engine,
    describe_error,
    end_children,
    hide_engine_frames,
    new_recorder,
)
from .processes import running_children
from .report import MAX_FINDINGS, display_report
from .watches import child_settings

MAGIC = "%%syncfree"
SHOWN_NAME = "__syncfree_shown__"  # the value of a cell's last expression, for its repr (_compile)
REPORT_NAME = "_syncfree_report"  # the last report, in the user namespace
MERGED_NAME = "_syncfree_merged"  # the last merged report of a distributed job (%syncfree merge|run)


@dataclass(frozen=True)
class RunOptions:
    mode: str | None  # None: warn with CUDA, predict without
    measure_blocked: bool
    max_frames: int
    quiet: bool
    engine: str | None = None  # debug | cupti | auto (capture/engines.py); None: auto
    cost: bool = False  # measure what each sync costs, the GPU time it loses (syncfree.cost)

    def describe(self) -> str:
        blocked = "blocked time on" if self.measure_blocked else "blocked time off"
        cost = ", cost measured" if self.cost else ""
        return f"mode {self.mode or 'auto'}, {blocked}{cost}, {self.max_frames} frames per site"


@dataclass(frozen=True)
class CellText:
    """The cell as the user wrote it and where the magic's body starts in it."""

    raw: str                 # the whole cell text, magic line included (source_hash)
    cell_id: str | None      # from the execute request
    body_line: int           # cell line of the body's first line
    own_cell: bool = False   # the magic is the cell's own (run_cell runs it, with its displayhook)


@dataclass
class WatchedCell:
    """A cell run under ``%syncfree on``: its recorder lives from pre_ to post_run_cell."""

    recorder: SyncRecorder
    text: CellText
    engine: Engine
    findings: list
    options: RunOptions
    children_before: dict = field(default_factory=dict)  # the multiprocessing children running when it began
    inner_sources: Any = None  # _InnerSources: a %%time body's source while the cell runs


@magics_class
class SyncfreeMagics(Magics):
    """``%%syncfree`` and ``%syncfree``; see the magic's docstring (``%%syncfree?``)."""

    def __init__(self, shell):
        super().__init__(shell)
        self._cell_info = None          # ExecutionInfo of the cell running now
        self._outer: list = []          # _cell_info of the cells around it (nested runs)
        self._pending: list[tuple[dict, bool, bool]] = []  # (report, quiet, nested) for post_run_cell
        # Under `syncfree run NOTEBOOK` (`watch_for_run`): its watch of every cell, kept on the shell, where an
        # extension reloaded (`%reload_ext syncfree`) finds it again.
        self._watch: RunOptions | None = _run_watch(shell)
        self._watched: WatchedCell | None = None
        shell.events.register("pre_run_cell", self._pre_run_cell)
        shell.events.register("post_run_cell", self._post_run_cell)

    @property
    def watching(self) -> bool:
        """Whether ``%syncfree on`` is in effect (read-only; the JupyterLab Watch button
        asks the kernel for it after cells that mention syncfree)."""
        return self._watch is not None

    def close(self) -> None:
        """Undo everything (``%unload_ext syncfree``), a watched cell's recorder included."""
        self.shell.events.unregister("pre_run_cell", self._pre_run_cell)
        self.shell.events.unregister("post_run_cell", self._post_run_cell)
        self._watch = None
        self._trim_sync_tracebacks(False)
        self._outer.clear()
        watched, self._watched = self._watched, None
        if watched is not None:
            watched.recorder.__exit__(None, None, None)

    # ------------------------------------------------------------------ the magic

    @no_var_expand
    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "action", nargs="?", choices=("on", "off", "status"),
        help="Line magic only: watch every cell (on), stop (off), or say which (status). "
             "`%%syncfree merge DIR` and `%%syncfree run --nproc-per-node N train.py` show a "
             "distributed job's merged report (see below).")
    @magic_arguments.argument(
        "--mode", choices=("warn", "error", "predict"),
        help="warn: count every sync (default with CUDA); error: raise at the first sync; "
             "predict: the syncs a GPU would make, predicted on the CPU (the default without CUDA).")
    @magic_arguments.argument(
        "--engine", choices=("debug", "cupti", "auto"),
        help="What sees the syncs: torch's debug mode, CUPTI (every blocking CUDA call, "
             "any library; pip install 'syncfree[cupti]'), or auto (default: CUPTI when "
             "CuPy, Numba's CUDA target or PyCUDA is imported and cupti-python is installed, "
             "else debug mode; Triton alone does not count).")
    @magic_arguments.argument(
        "--no-blocked", dest="measure_blocked", action="store_false",
        help="Do not time how long each sync blocked the CPU.")
    @magic_arguments.argument(
        "--cost", action="store_true",
        help="Measure what each sync costs, the GPU time it loses, from a trace of the GPU (torch's "
             "profiler, CUDA activity only; a GPU and the debug-mode engine); sites are then ranked by it.")
    @magic_arguments.argument(
        "--frames", type=int, default=4, metavar="N",
        help=f"Library frames kept per site, 0 to {MAX_FRAMES} (default 4).")
    @magic_arguments.argument(
        "--quiet", action="store_true",
        help=f"Show no report; it is still stored as {REPORT_NAME}.")
    @line_cell_magic
    def syncfree(self, line, cell=None):
        """Find where a cell makes the CPU wait for the GPU.

        Put ``%%syncfree`` on the first line of a cell and run it. The cell runs exactly as
        without the magic (same outputs, same value, same exception), under torch's sync
        debug mode; below it comes one report: each line that synchronized, what synced,
        how often and how long the CPU was blocked, with the catalog's explanation and
        sync-free rewrite (shown as gutter markers in JupyterLab). The report dict is also
        stored in the user namespace as ``_syncfree_report``.

        Usage, in a cell::

          %%syncfree [--mode warn|error|predict] [--engine debug|cupti|auto] [--no-blocked] [--frames N] [--quiet]
          code...

        Usage, for every cell from now on::

          %syncfree on [--mode ...] [--no-blocked] [--frames N] [--quiet]
          %syncfree off
          %syncfree status

        Options:

        --mode warn
          Count every sync (the default when the kernel has a CUDA device)::

            %%syncfree --mode warn
            loss = model(x).sum()
            print(loss.item())

        --mode error
          Raise at the first sync, pointing at its cell line: the "verify it is
          sync-free" step. ``torch.cuda.synchronize()`` raises too::

            %%syncfree --mode error
            for step in range(100):
                train_step()

        --mode predict
          Run on CPU stand-ins and report the syncs the code would make on a GPU (the
          default when the kernel has no CUDA device)::

            %%syncfree --mode predict
            y = x[mask]

        --engine debug|cupti|auto
          What sees the syncs: ``debug`` is torch's sync debug mode (torch's syncs
          only, the cheapest); ``cupti`` counts every blocking CUDA call whichever
          library makes it (CuPy, Numba, a custom extension; needs
          ``pip install 'syncfree[cupti]'``); ``auto``, the default, takes CUPTI when a
          library that calls CUDA without torch is imported or imported by the cell::

            %%syncfree --engine cupti
            total = float(cupy_array.sum())

        --no-blocked
          Skip timing each sync. Blocked time is measured with a profile callback
          (``sys.setprofile``) that costs a little on every Python call; use this for
          CPU-bound cells or when another profiler is running::

            %%syncfree --no-blocked
            run_epoch()

        --frames N
          Keep up to N (0 to 8, default 4) library frames per site, between the cell
          line and the sync, e.g. ``torch/amp/grad_scaler.py`` under ``scaler.step(opt)``::

            %%syncfree --frames 8
            scaler.step(opt)

        --quiet
          Show nothing; the report is still stored as ``_syncfree_report``::

            %%syncfree --quiet
            train_step()

        Distributed training (torchrun), one merged report of every rank's syncs::

          %syncfree run --nproc-per-node 2 train.py ARGS     # torchrun's options as for `syncfree run`
          %syncfree merge syncfree-ranks                     # the rank reports a job left in a folder

        ``run`` starts the job as ``syncfree run --nproc-per-node N`` does (torchrun, each
        rank under syncfree; ``--mode``, ``--engine``, ``--rank-report-dir DIR`` to keep
        the rank reports), its output streamed into the cell; then, as ``merge`` does, it
        shows the merged report: per site each rank's count and blocked time, sites made on
        some ranks only marked divergent, per-rank totals. It is stored as
        ``_syncfree_merged`` (a ``MergedReport``: ``.text()``, ``.to_dict()``).

        ``%syncfree on`` watches every following cell with the options given; a cell
        gets a report only if it synchronized. Cells that start with ``%%syncfree``
        keep their own options. ``%syncfree off`` stops watching and ``%syncfree status``
        says whether it is on.

        The report comes after the cell's own outputs, so a ``%%capture`` cell captures
        what it displays but not the report, which is shown below the cell (``--quiet``
        hides it; it is always stored as ``_syncfree_report``). A body that starts with
        ``%%time``, ``%%timeit`` or ``%%capture`` is reported on its own lines, a sync in
        its loops as recurring (``%%timeit`` repeats its whole body).

        Without torch in the kernel the cell runs as usual and the report holds only the
        static findings. IPython syntax inside the body (``%time``, ``!ls``) works;
        top-level ``await`` does not. Explicit ``torch.cuda.synchronize()`` is seen when
        called through ``torch.cuda``, not through a name imported before the cell.
        """
        __tracebackhide__ = True
        if cell is None and line.split()[:1] in (["merge"], ["run"]):
            return self._distributed_command(line)
        args = magic_arguments.parse_argstring(self.syncfree, line)
        if not 0 <= args.frames <= MAX_FRAMES:
            raise UsageError(f"--frames must be between 0 and {MAX_FRAMES}, not {args.frames}")
        options = RunOptions(args.mode, args.measure_blocked, args.frames, args.quiet, args.engine, args.cost)
        if cell is None:
            if args.action is None:
                raise UsageError("%syncfree needs on, off, status, merge DIR or run (e.g. `%syncfree on`); "
                                 "to check one cell, put %%syncfree on its first line")
            return self._watch_command(args.action, options)
        if args.action is not None:
            raise UsageError(f"%%syncfree takes options only; `{args.action}` belongs to the "
                             f"line magic: %syncfree {args.action}")
        return self._run_cell(line, cell, options)

    def _run_cell(self, line: str, cell: str, options: RunOptions):
        __tracebackhide__ = True
        shell = self.shell
        text = self._cell_text(line, cell)
        blank = _leading_blank_lines(cell)
        first_line = text.body_line + blank  # transform_cell drops the blank lines
        transformed = _python_body(shell, cell, blank)
        # Padding puts line n of the code on cell line n, so the traceback shows the cell's
        # own line numbers under "Cell In[n]" (CachingCompiler.cache registers the name).
        padding = _padding(text, first_line)
        code_text = padding + (transformed or shell.transform_cell(cell))
        filename = shell.compile.cache(code_text, self._execution_count(), raw_code=code_text)
        engine = choose_engine(options.mode, options.engine, sources=[cell])
        # From the parse to the compiled code Python's cycle collector is held off: a big
        # cell's tree (some 110,000 nodes for 10,000 lines) is no garbage, and each young
        # collection in between walked all of it. The tree is gone before it runs again.
        with collector.paused():
            tree = None
            if transformed is not None:
                # One parse serves the static pass and the compile (a body with IPython
                # syntax fails here and takes IPython's transforms below, as before).
                try:
                    tree = shell.compile.ast_parse(code_text, filename=filename)
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    code_text = padding + shell.transform_cell(cell)
                    filename = shell.compile.cache(code_text, self._execution_count(),
                                                   raw_code=code_text)
            # In cell lines; IPython syntax lines skipped.
            findings = analyze_source(text.raw, tree=tree, limit=MAX_FINDINGS)
            try:
                # The cell's own value is shown from inside the run (under the recorder,
                # at its line): showing it is a sync (repr copies a CUDA tensor's values).
                compiled = self._compile(code_text, filename, tree, display_last=text.own_cell,
                                         stops=engine.mode == "error" or engine.stop_at_first)
                del tree  # not kept alive while the cell runs
            except BaseException as exc:  # SyntaxError and the like: shown by IPython as usual
                error = describe_error(exc, exc.lineno if isinstance(exc, SyntaxError) else None)
                self._publish(cell_report(source=text.raw, engine=engine, findings=findings,
                                          cell_id=text.cell_id, error=error), options.quiet)
                if isinstance(exc, SyntaxError):
                    # Without the compiler's frames below this one: IPython lists every
                    # frame of a SyntaxError raised by running code (showsyntaxerror), as
                    # for %%time.
                    raise exc.with_traceback(None) from None
                raise
        if engine.mode == "static":
            return self._run_static(text, compiled, filename, findings, engine, options)

        inner = _inner_code(shell, cell, text.body_line)
        files = {filename: 0, **inner.files}
        recorder = new_recorder(engine, files=files, findings=dict.fromkeys(files, findings),
                                measure_blocked=options.measure_blocked,
                                max_frames=options.max_frames, measure_cost=options.cost)
        # The multiprocessing children the cell starts watch their targets as the cell is watched; their syncs
        # are the cell's (capture/threads.py, engine_choice.end_children).
        recorder.child_settings = child_settings(engine, options.measure_blocked, options.max_frames)
        before = running_children()  # a Pool or persistent DataLoader workers of an earlier cell: named
        try:
            try:
                with _InnerSources(inner.sources), recorder:
                    value = self._execute(compiled)
            finally:
                end_children(recorder, before)
        except BaseException as exc:
            hide_engine_frames(exc)
            if text.own_cell:
                _start_traceback_at_cell(self.shell, exc, filename)
            self._report(text, engine, findings, recorder, options)
            raise
        self._report(text, engine, findings, recorder, options)
        return value

    def _run_static(self, text: CellText, compiled: tuple, filename: str, findings: list,
                    engine: Engine, options: RunOptions):
        __tracebackhide__ = True
        started = perf_counter()
        error = None
        try:
            return self._execute(compiled)
        except BaseException as exc:
            error = describe_error(exc, _cell_line(exc.__traceback__, filename))
            if text.own_cell:
                _start_traceback_at_cell(self.shell, exc, filename)
            raise
        finally:
            report = cell_report(source=text.raw, engine=engine, findings=findings,
                                 cell_id=text.cell_id, error=error,
                                 wall_ms=(perf_counter() - started) * 1000.0)
            self._publish(report, options.quiet)

    def _compile(self, code_text: str, filename: str, tree: ast.Module | None = None,
                 display_last: bool = False, stops: bool = False) -> tuple:
        """(chunks, last expression) compiled like IPython compiles a cell, with its AST
        transformers and __future__ flags. ``chunks`` run in turn; the value of ``last``
        (None when nothing is shown) is the magic's, shown as Out[n]. Which values are
        shown follows ``InteractiveShell.ast_node_interactivity`` as IPython's
        run_ast_nodes does: ``all`` and ``last`` run those statements in "single" mode,
        whose expression values go to the displayhook one by one.

        With ``display_last`` (the magic is the cell's own, run by ``run_cell``, whose
        display trap makes the shell's displayhook ``sys.displayhook``) the last expression
        runs in "single" mode too, as IPython runs a cell's: it is shown, as Out[n], from
        the cell's line while the recorder runs, so the sync of showing it (a CUDA tensor's
        repr copies its values) is on that line in every mode, as in watch mode. When the run
        ``stops`` at the first sync (error mode), IPython's formatters would catch the stop
        and print it as a formatter error: the value's repr is taken first, from the cell's
        line (``shown``), so that a sync there stops the cell as any other does, then the
        value is shown from the displayhook."""
        shell = self.shell
        if tree is None:
            tree = shell.compile.ast_parse(code_text, filename=filename)
        tree = shell.transform_ast(tree)
        body = tree.body
        interactivity = shell.ast_node_interactivity
        if body and interactivity == "last_expr_or_assign":
            name = _assigned_name(body[-1])
            if name is not None:  # `x = 5` as the last line shows 5
                shown = ast.copy_location(ast.Expr(ast.Name(name, ast.Load())), body[-1])
                body.append(ast.fix_missing_locations(shown))
            interactivity = "last_expr"
        if interactivity == "last_expr":
            interactivity = "last" if body and isinstance(body[-1], ast.Expr) else "none"
        last = shown = None
        if interactivity == "last" and isinstance(body[-1], ast.Expr):
            interactive = []
            if DisplayHook.semicolon_at_end_of_expression(code_text):  # `;` hides it
                pass
            elif display_last and not stops:
                interactive = [body.pop()]
            else:
                node = body.pop()
                last = shell.compile(ast.Expression(node.value), filename, "eval")
                if display_last:  # `__syncfree_shown__` alone, shown as the cell's line shows it
                    probe = ast.copy_location(ast.Name(SHOWN_NAME, ast.Load()), node.value)
                    probe = ast.fix_missing_locations(ast.copy_location(ast.Expr(probe), node))
                    shown = compile(ast.Interactive([probe]), filename, "single")
        elif interactivity == "last":
            interactive = body[-1:]
            body = body[:-1]
        elif interactivity == "all":
            interactive, body = body, []
        else:
            interactive = []
        chunks = [shell.compile(ast.Module(body, []), filename, "exec")] if body else []
        chunks += [shell.compile(ast.Interactive([node]), filename, "single")
                   for node in interactive]
        return chunks, last, shown

    def _execute(self, compiled: tuple):
        """Run the body in the user namespace and return its last expression's value
        (shown as Out[n] by the displayhook, as for %%time), or show it here (``shown``:
        see `_compile`) and return None."""
        __tracebackhide__ = True
        shell = self.shell
        chunks, last, shown = compiled
        for code in chunks:
            exec(code, shell.user_global_ns, shell.user_ns)
        if last is None:
            return None
        value = eval(last, shell.user_global_ns, shell.user_ns)
        if shown is None or value is None:
            return value
        # The probe's PRINT_EXPR hands the value to sys.displayhook, here repr: its sync is
        # the display of the value (sites.shows_value: SF203), not a print() in the cell.
        hook, sys.displayhook = sys.displayhook, repr
        try:
            exec(shown, {"__builtins__": builtins, SHOWN_NAME: value})
        finally:
            sys.displayhook = hook
        sys.displayhook(value)
        return None

    def _report(self, text: CellText, engine: Engine, findings: list, recorder: SyncRecorder,
                options: RunOptions) -> dict:
        report = cell_report(source=text.raw, engine=engine, findings=findings,
                             recorder=recorder, cell_id=text.cell_id)
        self._publish(report, options.quiet)
        return report

    def _name_cells(self, report: dict) -> None:
        """Frames in functions from earlier cells name the cell, not IPython's temp file
        (sites.name_notebook_cells). The files are IPython's CachingCompiler._filename_map
        (IPython/core/compilerop.py: cache() fills it, format_code_name() reads it)."""
        name_notebook_cells(report["sites"], getattr(self.shell.compile, "_filename_map", None) or {})

    def _publish(self, report: dict, quiet: bool) -> None:
        self._name_cells(report)
        self.shell.user_ns[REPORT_NAME] = report
        if self._cell_info is None:  # called outside a cell run: nothing will come after
            if self._shown(quiet):
                display_report(report)
        else:
            self._pending.append((report, quiet, False))

    def _distributed_command(self, line: str) -> None:
        """``%syncfree merge DIR`` / ``%syncfree run --nproc-per-node N ...``
        (syncfree/distributed/notebook.py); the merge is kept as ``_syncfree_merged``."""
        import shlex

        from .cli.usage import UsageProblem
        from .distributed.notebook import merge_command, run_command

        try:
            tokens = shlex.split(line)
        except ValueError as problem:
            raise UsageError(f"%syncfree {line.split()[0]}: {problem}") from None
        command = merge_command if tokens[0] == "merge" else run_command
        try:
            merged = command(tokens[1:])
        except UsageProblem as problem:
            raise UsageError(f"%syncfree {tokens[0]}: {problem}") from None
        if merged is not None:
            self.shell.user_ns[MERGED_NAME] = merged

    # ------------------------------------------------------------------ the cell

    def _cell_text(self, line: str, cell: str) -> CellText:
        """The raw cell from pre_run_cell when it is this magic's cell, else the magic line
        and body put back together (the magic was called from code)."""
        info = self._cell_info
        if info is not None and info.raw_cell:
            raw = info.raw_cell
            index = _magic_line_index(raw, under_magics=True)
            if index is not None:
                body = "".join(raw.splitlines(keepends=True)[index + 1:])
                if body.rstrip() == cell.rstrip():
                    if raw[:raw.index(MAGIC)].strip():
                        # under another cell magic (%%time, %%capture): the cell's lines, but not its own run (that
                        # magic shows the value; a watch-mode report of the cell stays apart from this one)
                        return CellText(raw, None, index + 2)
                    return CellText(raw, getattr(info, "cell_id", None), index + 2, own_cell=True)
        raw = (f"{MAGIC} {line}".rstrip() + "\n" + cell)
        return CellText(raw, None, 2)

    def _execution_count(self) -> int:
        # IPython 9 advances shell.execution_count before running the cell; the number of
        # the running cell (In[n]) is on the displayhook's ExecutionResult.
        result = getattr(self.shell.displayhook, "exec_result", None)
        if result is not None and result.execution_count is not None:
            return result.execution_count
        return self.shell.execution_count

    # ------------------------------------------------------------------ watch mode

    def _watch_command(self, action: str, options: RunOptions) -> None:
        if action == "on":
            self._watch = options
            self._trim_sync_tracebacks(True)
            print(f"syncfree: watching every cell ({options.describe()})")
            engine = choose_engine(options.mode, options.engine)
            for note in engine.notes:
                print(f"syncfree: {note}")
            if engine.mode == "static":
                print("syncfree: cells run unwatched; %%syncfree still gives static findings")
        elif action == "off" and _run_watch(self.shell) is not None:
            # The run judges every cell: a notebook's own `%syncfree off` would pass the cells after it unwatched.
            print("syncfree: syncfree run watches every cell: %syncfree off is not applied under it")
        elif action == "off":
            self._watch = None
            self._trim_sync_tracebacks(False)
            print("syncfree: off")
        elif self._watch is None:
            print("syncfree: off (use %%syncfree on a cell, or %syncfree on)")
        else:
            print(f"syncfree: watching every cell ({self._watch.describe()})")

    def _trim_sync_tracebacks(self, on: bool) -> None:
        """In watch mode the error mode's stop is raised in a cell without the magic, so
        IPython shows it: through its custom-exception hook, syncfree's own frames are cut
        off its traceback first (as ``%%syncfree`` does). Only while no other custom
        exception handler is set, and only this one is removed again."""
        shell = self.shell
        ours = getattr(shell.CustomTB, "__func__", None) is _show_trimmed_traceback
        if on and not shell.custom_exceptions:
            shell.CustomTB = types.MethodType(_show_trimmed_traceback, shell)
            shell.custom_exceptions = (RuntimeError,)
        elif not on and ours:
            shell.set_custom_exc((), None)

    def _pre_run_cell(self, info) -> None:
        outer = self._cell_info
        self._outer.append(outer)
        self._cell_info = info
        if outer is not None:
            # A cell run from inside a cell (%%capture runs its body so): the outer cell
            # keeps its recorder, and its reports come after it, not inside the capture.
            return
        collector.resume_interrupted()  # a pause of the cycle collector an interrupt cut short
        stale = self._watched
        if stale is not None:
            # post_run_cell came but an interrupt kept it from ending the recorder.
            self._watched = None
            if stale.inner_sources is not None:
                stale.inner_sources.__exit__(None, None, None)
            stale.recorder.__exit__(None, None, None)
        raw = info.raw_cell or ""
        options = self._watch
        if options is None or not raw.strip() or _magic_line_index(raw) is not None:
            return
        shell = self.shell
        transformed = getattr(info, "transformed_cell", None) or shell.transform_cell(raw)
        blank = _leading_blank_lines(raw)
        # The filename IPython compiles this cell under (InteractiveShell.run_cell_async:
        # compiler.cache(cell, execution_count, raw_code=raw_cell)); the number is taken
        # before or after IPython advances execution_count depending on its version, and
        # ipykernel's compiler ignores it, so both candidates are watched.
        count = shell.execution_count
        names = {shell.compile.get_code_name(raw, transformed, n) for n in (count, count - 1)}
        engine = choose_engine(options.mode, options.engine, sources=[raw])
        if engine.mode == "static":
            return
        findings = analyze_source(raw, limit=MAX_FINDINGS)
        inner = _inner_code(shell, raw, 1)
        files = {**dict.fromkeys(names, blank), **inner.files}
        recorder = new_recorder(engine, files=files,
                                findings=dict.fromkeys(files, findings),
                                measure_blocked=options.measure_blocked,
                                max_frames=options.max_frames, measure_cost=options.cost)
        recorder.child_settings = child_settings(engine, options.measure_blocked, options.max_frames)
        text = CellText(raw, getattr(info, "cell_id", None), 1)
        # Kept before it is entered: an interrupt between the two would otherwise leave a
        # running recorder that nothing ends (exiting one never entered is harmless).
        sources = _InnerSources(inner.sources)
        self._watched = WatchedCell(recorder, text, engine, findings, options, running_children(), sources)
        sources.__enter__()
        recorder.__enter__()

    def _post_run_cell(self, result) -> None:
        self._cell_info = self._outer.pop() if self._outer else None
        if self._cell_info is not None:  # the end of a cell run inside a cell
            return
        collector.resume_interrupted()  # a pause the cell's interrupt cut short: over now
        watched = self._watched
        pending, self._pending = self._pending, []
        if watched is not None:
            error = result.error_in_exec
            recorder = watched.recorder
            # Ended before it is forgotten (an interrupt before this leaves it to the next
            # cell); forgotten however its exit ends (a Ctrl-C held back during the exit is
            # raised as soon as it is done).
            try:
                try:
                    if error is not None:
                        recorder.__exit__(type(error), error, error.__traceback__)
                    else:
                        recorder.__exit__(None, None, None)
                finally:
                    end_children(recorder, watched.children_before)
            finally:
                self._watched = None
                if watched.inner_sources is not None:
                    watched.inner_sources.__exit__(None, None, None)
            # A cell shows a report when it synced, or when processes of its ran or worked for it unwatched
            # (their syncs would otherwise go without a word).
            if recorder.syncs or recorder.stopped_by_sync or recorder.inherited_notes \
                    or recorder.unwatched_children or recorder.unwatched_programs or recorder.unwatched_forks:
                report = cell_report(source=watched.text.raw, engine=watched.engine,
                                     findings=watched.findings, recorder=recorder,
                                     cell_id=watched.text.cell_id)
                self._name_cells(report)
                self.shell.user_ns[REPORT_NAME] = report
                # The reports of %%syncfree runs from the cell's code came while its watch counted the same syncs:
                # shown, but marked, so that what adds reports up (syncfree run NB) counts them once.
                pending = [(earlier, quiet, True) for earlier, quiet, _ in pending]
                pending.append((report, watched.options.quiet, False))
        for report, quiet, nested in pending:
            if self._shown(quiet):
                display_report(report, nested=nested)

    def _shown(self, quiet: bool) -> bool:
        """Whether a report is displayed: not with ``--quiet``, but always under ``syncfree run NOTEBOOK``, whose
        verdict reads the displayed reports."""
        return not quiet or _under_run(self.shell)


def _show_trimmed_traceback(shell, etype, value, tb, tb_offset=None):
    """IPython's CustomTB while watch mode is on: the traceback without syncfree's frames
    when ``value`` is the error mode's stop at a sync; any other RuntimeError as usual."""
    hide_engine_frames(value)
    shell.showtraceback((etype, value, value.__traceback__), tb_offset=tb_offset,
                        running_compiled_code=True)


# --------------------------------------------------------------------------- cell text


def _magic_line_index(raw: str, under_magics: bool = False) -> int | None:
    """Index of the ``%%syncfree`` line when the cell starts with it (after blank lines,
    which IPython drops before it looks for a cell magic). ``under_magics``: or below cell
    magics that run their body as a cell (``%%time`` over ``%%syncfree``: every line was put
    one or more lines off); the caller checks that the body is this run's."""
    for index, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        word = line.split(None, 1)[0]
        if word == MAGIC:
            return index
        if not (under_magics and word.startswith("%%")):
            return None
    return None


def _assigned_name(node: ast.stmt) -> str | None:
    """The name a last ``x = ...`` / ``x: T = ...`` / ``x += ...`` binds, as IPython's
    ``last_expr_or_assign`` shows it (InteractiveShell.run_ast_nodes)."""
    target = None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and getattr(node, "value", 1):
        target = node.target
    return target.id if isinstance(target, ast.Name) else None


def _python_body(shell, cell: str, blank: int) -> str | None:
    """What ``shell.transform_cell(cell)`` returns, without tokenizing the cell, when the
    body may be plain Python; None when IPython's transforms must run.

    IPython's token transforms (``%magic``, ``!cmd``, ``obj?``, ``x = %m``) tokenize the
    whole body, which for a big cell took as long as running it, and change only lines that
    are not Python: a body that parses (the caller checks) with IPython's default
    transforms comes out of them as it went in. The cheap cleanup transforms (leading blank
    lines, indentation, prompts) and the cell-magic one still run here, and the body must
    come out of them unchanged but for its leading blank lines and whitespace-only lines,
    so that its lines and columns are the cell's. A one-line body takes IPython's way (its
    prefilter applies).
    """
    manager = shell.input_transformer_manager
    default = _default_transforms()
    if (type(shell).transform_cell is not InteractiveShell.transform_cell
            or type(manager).transform_cell is not TransformerManager.transform_cell
            or manager.cleanup_transforms != default.cleanup_transforms
            or manager.line_transforms != default.line_transforms
            or manager.token_transformers != default.token_transformers
            or shell.input_transformers_post):
        return None
    if not cell.endswith("\n"):
        cell += "\n"
    lines = cell.splitlines(keepends=True)
    body = lines[blank:]
    if len(body) < 2:
        return None
    cleaned = lines
    for transform in manager.cleanup_transforms + manager.line_transforms:
        if getattr(transform, "doctest", False) and ">>>" not in cell:
            continue  # a doctest PromptStripper changes nothing without a ">>>" line; it scans every line
        cleaned = transform(cleaned)
    # leading_indent (textwrap.dedent) empties whitespace-only lines; nothing else may change.
    if len(cleaned) != len(body) or any(new != old for new, old in zip(cleaned, body) if old.strip()):
        return None
    return "".join(cleaned)


@functools.cache
def _default_transforms() -> TransformerManager:
    return TransformerManager()


def _padding(text: CellText, first_line: int) -> str:
    """The lines above the body's first line as the code of the cell has them: blank but
    for the magic line, kept as a comment. IPython's traceback shows the lines around the
    one that failed from this code (linecache), so a failure on line 2 or 3 shows the
    ``%%syncfree`` line above it rather than leaving it out as a blank line."""
    lines = [""] * (first_line - 1)
    magic_at = text.body_line - 2
    if 0 <= magic_at < len(lines):
        magic = text.raw.splitlines()[magic_at].strip()
        if magic.startswith(MAGIC):
            lines[magic_at] = f"# {magic}"
    return "".join(line + "\n" for line in lines)


def _leading_blank_lines(text: str) -> int:
    """Lines IPython's ``leading_empty_lines`` transform removes (inputtransformer2.py)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line and not line.isspace():
            return index
    return 0


#: The code names IPython's %%time compiles its body under (IPython/core/magics/execution.py
#: `time`): the body's lines, from 1, with its leading blank lines dropped by transform_cell.
TIMED_CODE_NAMES = ("<timed exec>", "<timed eval>")
#: The code name %%timeit compiles its body under (execution.py `timeit`: the body's statements,
#: their lines kept, in the loop of a generated ``inner`` function).
TIMEIT_CODE_NAME = "<magic-timeit>"


class InnerCode(NamedTuple):
    """The code a cell magic at the top of a watched cell compiles its body under: each code
    name with its line offset (line n of that code is cell line n + offset), and the body's
    text for the names that no cache registers (IPython's %%time and %%timeit keep none:
    without it a sync's line could not be seen to be in a loop, and every one was "once")."""

    files: dict[str, int]
    sources: dict[str, str]


def _inner_code(shell, text: str, first_line: int) -> InnerCode:
    """When ``text`` (whose first line is cell line ``first_line``) starts with ``%%time``,
    ``%%timeit`` or ``%%capture``, where the body that magic runs is compiled, so that a sync
    in it is on its own line, not on the magic's line that runs it; else nothing.

    ``%%capture`` runs its body as a cell of its own (``shell.run_cell``), compiled under the
    name the shell's compiler gives that cell; IPython numbers it with the execution count,
    taken before or after IPython advances it (as watch mode's names)."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        magic = line.split(None, 1)[0]
        if magic not in ("%%time", "%%timeit", "%%capture"):
            return InnerCode({}, {})
        body = "".join(lines[index + 1:])
        offset = first_line + index + _leading_blank_lines(body)
        if magic == "%%capture":
            # IPython's transform_cell ends a cell with a newline before it takes the body out
            # (inputtransformer2.TransformerManager): %%capture runs that body, compiled under
            # its name.
            body = body if body.endswith("\n") else body + "\n"
            count = shell.execution_count
            transformed = shell.transform_cell(body)
            names = {shell.compile.get_code_name(body, transformed, n) for n in (count, count - 1)}
            return InnerCode(dict.fromkeys(names, offset), {})
        names = TIMED_CODE_NAMES if magic == "%%time" else (TIMEIT_CODE_NAME,)
        source = shell.transform_cell(body)
        return InnerCode(dict.fromkeys(names, offset), dict.fromkeys(names, source))
    return InnerCode({}, {})


class _InnerSources:
    """The bodies of `InnerCode.sources` in ``linecache`` while the cell runs (sites.py reads
    a line's loops there), then linecache as it was: IPython shows a %%time body's traceback
    without source lines, and a later cell's code under the same name is other code."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> _InnerSources:
        for name, source in self.sources.items():
            self.saved[name] = linecache.cache.get(name)
            linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, old in self.saved.items():
            if old is None:
                linecache.cache.pop(name, None)
            else:
                linecache.cache[name] = old
        self.saved = {}


def _start_traceback_at_cell(shell, exc: BaseException, filename: str) -> None:
    """Show ``exc``'s traceback from the first frame of the cell's own code and, for an
    interrupt, up to the last frame outside syncfree. Without this it starts at the
    ``get_ipython().run_cell_magic('syncfree', '', '<the whole cell, escaped>')`` line that
    IPython runs for the cell, and a Ctrl-C held back while syncfree's engine ran ends in
    syncfree's signal handler (capture/interrupts.py).

    Only for the cell's own magic, whose exception goes straight to IPython: IPython shows
    an exception that has a ``_render_traceback_`` through it (InteractiveShell
    .showtraceback). The one set here formats the traceback the exception has then, once,
    with the shell's own formatter, and removes itself. An exception that takes no
    attribute, or whose class renders itself, is shown as before."""

    def render():
        try:
            del exc._render_traceback_
        except AttributeError:
            pass
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        if isinstance(exc, KeyboardInterrupt) and tb is not None:
            last = inner = tb
            while inner is not None:
                if not inner.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
                    last = inner
                inner = inner.tb_next
            last.tb_next = None
        elif tb is None and not isinstance(exc, KeyboardInterrupt):
            tb = exc.__traceback__  # raised before the cell's code ran: all of it
        return shell.InteractiveTB.structured_traceback(type(exc), exc, tb, tb_offset=0)

    if getattr(type(exc), "_render_traceback_", None) is not None:
        return  # the exception's class shows itself (ipyparallel's remote errors)
    try:
        exc._render_traceback_ = render
    except (AttributeError, TypeError):
        pass


#: syncfree's own files (a frame there is never the user's).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _cell_line(tb, filename: str) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# --------------------------------------------------------------------------- extension


def load_ipython_extension(ip) -> None:
    # Idempotent: a second load (`syncfree run` loads the extension before the notebook's
    # own `%load_ext syncfree`) keeps the instance and its event callbacks.
    if SyncfreeMagics.__name__ in ip.magics_manager.registry:
        return
    ip.register_magics(SyncfreeMagics(ip))


_RUN_ATTRIBUTE = "_syncfree_run_watch"


def _run_watch(shell: Any) -> RunOptions | None:
    """The watch of every cell that `syncfree run NOTEBOOK` holds (`watch_for_run`), else None."""
    held = getattr(shell, _RUN_ATTRIBUTE, None)
    return held if isinstance(held, RunOptions) else None


def _under_run(shell: Any) -> bool:
    """Whether `syncfree run NOTEBOOK` runs this kernel's cells (`watch_for_run`)."""
    return getattr(shell, _RUN_ATTRIBUTE, None) is not None


def watch_for_run(ip, line: str) -> None:
    """`syncfree run NOTEBOOK`'s setup, before the notebook's first cell: the extension, and ``%syncfree LINE``
    (``on ...``, or nothing: the notebook's own ``%%syncfree`` cells only) held for the whole run. The notebook's
    own ``%syncfree off``, ``--quiet`` and ``%unload_ext``/``%reload_ext syncfree`` then leave it: each passed the
    cells after it with no report, and the run exited 0 ("no cell synchronized")."""
    load_ipython_extension(ip)
    setattr(ip, _RUN_ATTRIBUTE, False)  # held: the report of a --quiet cell is shown anyway
    if line:
        ip.run_line_magic("syncfree", line)
        magics = ip.magics_manager.registry.get(SyncfreeMagics.__name__)
        if magics is not None and magics._watch is not None:
            setattr(ip, _RUN_ATTRIBUTE, magics._watch)


def unload_ipython_extension(ip) -> None:
    if _under_run(ip):  # the run's watch stays (watch_for_run); a reload finds it loaded
        print("syncfree: syncfree run keeps the extension loaded: every cell is watched")
        return
    magics = ip.magics_manager.registry.pop(SyncfreeMagics.__name__, None)
    if magics is not None:
        magics.close()
    for kind in ("line", "cell"):
        ip.magics_manager.magics[kind].pop("syncfree", None)


__all__ = ["SyncfreeMagics", "load_ipython_extension", "unload_ipython_extension", "watch_for_run", "REPORT_NAME"]
