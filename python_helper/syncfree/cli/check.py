"""``syncfree check PATH...``: analyse ``.py`` files and every code cell of ``.ipynb`` notebooks without running them.

Directories are searched for both; the findings are printed ruff style and the command exits 1 when there are any::

    train.ipynb:cell 3:line 4:col 9: SF101 `loss.item()` copies the value to the CPU and waits ... [fix: none]
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence

from syncfree._version import __version__
from syncfree.cli.cache import DEFAULT_CACHE_DIR, ResultCache, file_digest, file_stat
from syncfree.cli.exclusion import Exclusion
from syncfree.cli.sources import SourceCell, decode_python, read_cells, source_names
from syncfree.cli.usage import EXIT_CLEAN, EXIT_ERROR, EXIT_FOUND, UsageProblem, error
from syncfree.collector import paused as cycle_collection_paused
from syncfree.output import SYNTAX_ERROR, Diagnostic, write_diagnostics
from syncfree.records import Record

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any, TextIO

    from syncfree.analyze import Bindings

__all__ = ["FileResult", "check", "check_file"]


def check(
    paths: Sequence[str],
    *,
    output_format: str = "text",
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    budget: int | None = None,
    exclude: Exclusion | Sequence[str] = (),
    out: TextIO | None = None,
    state: dict[str, int] | None = None,
    jobs: int | None = None,
    fix: bool = False,
    diff: bool = False,
    unsafe_fixes: bool = False,
    statistics: bool = False,
    progress: bool | None = None,
    possible: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
) -> int:
    """Check the files; ``jobs`` worker processes (default: the cores this process may use) share them.

    ``fix``: apply the safe rewrites (``unsafe_fixes``: the ones marked for review too) in place, then report what
    is left. ``diff``: print those rewrites as a unified diff and change nothing. ``statistics``: counts per rule
    instead of the findings. ``possible``: the findings of certainty "possible" too (code that runs on the host by
    construction, catalog/host_code.py; an optimizer's step counts and scalars, catalog/optimizer_scalars.py), left
    out by default. ``progress``: a count of the files done on stderr (default: when stderr is a terminal and the
    run is long). ``cache_dir``: keep each file's result there and reuse it while the file's bytes, syncfree and the
    options are unchanged (:mod:`syncfree.cli.cache`; the command line's default, not this function's).
    """
    out = out or sys.stdout
    state = state if state is not None else {}
    unreadable = False

    def cannot_list(problem: UsageProblem) -> None:
        nonlocal unreadable
        error(problem)
        unreadable = True

    files = list(source_names(paths, exclude, on_error=cannot_list))  # (each made a Path only if it is checked)
    fixing = FixMode("diff" if diff else "write", unsafe_fixes) if fix or diff else None
    diagnostics: list[Diagnostic] = []
    syntax_errors = checked = fixed = 0
    diffs: list[str] = []
    meter = _Progress(len(files), progress)
    # --fix and --diff rewrite files and work out diffs: they check every file afresh.
    cache = _open_cache(cache_dir, select, ignore, possible) if fixing is None else None
    for result in _check_files(files, select, ignore, jobs, fixing, possible, cache):
        meter.step()
        if result.problem is not None:
            meter.clear()
            error(result.problem)
            unreadable = True
            continue
        checked += 1
        diagnostics.extend(result.diagnostics)
        syntax_errors += result.syntax_errors
        fixed += result.fixed
        diffs.extend(result.diffs)
    meter.clear()
    syncs = len(diagnostics) - syntax_errors
    if diff:
        out.write("".join(diffs))
        out.flush()
        print(f"Would fix {fixed} sync{'s' if fixed != 1 else ''}." if fixed else "No fixes available.", file=sys.stderr)
        status = EXIT_ERROR if unreadable or syntax_errors else EXIT_FOUND if fixed else EXIT_CLEAN
        state["status"] = status
        return status
    over = syncs > (budget if budget is not None else 0)
    status = EXIT_ERROR if unreadable or syntax_errors else EXIT_FOUND if over else EXIT_CLEAN
    state["status"] = status
    state["syntax_only"] = int(bool(syntax_errors) and not unreadable)
    # Nothing read and an error said why: a summary of "0 files" next to it would only confuse.
    summary = None if unreadable and not checked else _summary(diagnostics, checked, syntax_errors, budget, fixed)
    if statistics:
        write_statistics(diagnostics, output_format, out)
        if summary and output_format == "text":
            out.write(summary + "\n")
    else:
        write_diagnostics(diagnostics, output_format, out, summary=summary, tool_version=__version__)
    out.flush()
    if budget is not None and over:
        print(f"syncfree: {syncs} syncs exceed the budget of {budget}", file=sys.stderr)
    return status


class _Progress:
    """``syncfree: checked 1,200 of 2,912 files`` on one line of stderr, redrawn at most ten times a second: only on
    a terminal (a CI log or a pipe gets nothing) and only once a run has taken a second."""

    def __init__(self, total: int, wanted: bool | None) -> None:
        self.total, self.done = total, 0
        self.on = wanted if wanted is not None else _is_terminal(sys.stderr)
        self.started = self.drawn_at = time.monotonic()
        self.shown = False

    def step(self) -> None:
        self.done += 1
        if not self.on:
            return
        now = time.monotonic()
        if now - self.started < 1.0 or now - self.drawn_at < 0.1:
            return
        self.drawn_at, self.shown = now, True
        sys.stderr.write(f"\rsyncfree: checked {self.done:,} of {self.total:,} files")
        sys.stderr.flush()

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def write_statistics(diagnostics: Sequence[Diagnostic], output_format: str, out: TextIO) -> None:
    """Findings per rule, most first, ruff's ``--statistics``: ``count code [*] title`` (``[*]``: a rewrite can fix
    some); json: a list of ``{code, name, count, fixable}``."""
    counts: dict[str, list[int]] = {}
    for d in diagnostics:
        entry = counts.setdefault(d.rule, [0, 0])
        entry[0] += 1
        entry[1] += d.fix is not None
    rows = sorted(counts.items(), key=lambda item: (-item[1][0], item[0]))
    from syncfree.catalog import RULES

    if output_format == "json":
        import json

        json.dump([{"code": code, "name": RULES[code].name if code in RULES else code, "count": count,
                    "fixable": fixable} for code, (count, fixable) in rows], out, indent=1)
        out.write("\n")
        return
    width = max((len(str(count)) for _, (count, _) in rows), default=1)
    for code, (count, fixable) in rows:
        title = RULES[code].title if code in RULES else "the file does not parse"
        out.write(f"{count:>{width}}\t{code}\t{'[*]' if fixable else '[ ]'} {title}\n")


class FileResult(Record):
    """What checking one file gave: its diagnostics (syntax errors among them), or the problem that kept it unread;
    with fixing, how many findings the rewrites fixed and the unified diff of the rewrites (``--diff``)."""

    diagnostics: list[Diagnostic]
    syntax_errors: int
    problem: UsageProblem | None
    fixed: int
    diffs: tuple[str, ...]
    _fields = ("diagnostics", "syntax_errors", "problem", "fixed", "diffs")

    def __init__(self, diagnostics: list[Diagnostic], syntax_errors: int = 0, problem: UsageProblem | None = None,
                 fixed: int = 0, diffs: tuple[str, ...] = ()) -> None:
        values = self.__dict__
        values["diagnostics"], values["syntax_errors"], values["problem"] = diagnostics, syntax_errors, problem
        values["fixed"], values["diffs"] = fixed, diffs


class FixMode(Record):
    """``write``: rewrite the file in place (``--fix``); ``diff``: only show the rewrites (``--diff``). ``unsafe``:
    the rewrites marked for review too (``--unsafe-fixes``)."""

    action: str
    unsafe: bool
    _fields = ("action", "unsafe")

    def __init__(self, action: str, unsafe: bool = False) -> None:
        self.__dict__["action"], self.__dict__["unsafe"] = action, unsafe

    def takes(self, finding: dict[str, Any]) -> bool:
        fix = finding.get("fix")
        return bool(fix and fix["edits"] and (fix["safety"] == "safe" or self.unsafe))


#: Below this many files, or bytes in all, the files are checked in this process: starting workers costs more.
_POOL_MIN_FILES, _POOL_MIN_BYTES = 8, 256_000


def _open_cache(folder: str | os.PathLike[str] | None, select: list[str] | None, ignore: list[str] | None,
                possible: bool) -> ResultCache | None:
    if folder is None:
        return None
    if select is None and not ignore:
        # The default rules: which they are is the catalog's code, which the cache's key covers (code_digest), so a
        # run wholly from the cache does not import the catalog to list them.
        return ResultCache(folder, ["<default>"], possible)
    from syncfree.catalog import select_rules

    try:
        rules = [rule.code for rule in select_rules(select, ignore)]
    except ValueError:
        return None  # an unknown code: the first file's analysis says so
    return ResultCache(folder, rules, possible)


def _check_files(files: list[str], select: list[str] | None, ignore: list[str] | None,
                 jobs: int | None, fixing: FixMode | None = None, possible: bool = False,
                 cache: ResultCache | None = None) -> Iterator[FileResult]:
    """Each file's result in the order given (the files by their names, :func:`source_names`); with a ``cache``, a
    file whose bytes it holds a result for is not checked again, and the results of the others are added to it."""
    if cache is None:
        yield from _check_all(files, select, ignore, jobs, fixing, possible)
        return
    known: dict[int, FileResult] = {}
    digests: dict[int, tuple[str, list[int] | None]] = {}
    missing: list[str] = []
    # (the results read back are no garbage: no collection walks them while they are young)
    with cycle_collection_paused():
        for index, path in enumerate(files):
            if path == "-":
                missing.append(path)
                continue
            stat = file_stat(path)  # before the read: a write after it leaves a stat that no longer matches
            found = cache.unchanged(path, stat)
            if found is not None:
                known[index] = FileResult(found[0], found[1])  # the size and time recorded with its hash: not read
                continue
            try:
                with open(path, "rb") as stream:
                    data = stream.read()
            except OSError:
                missing.append(path)  # the worker reports it
                continue
            digest = file_digest(data)
            digests[index] = (digest, stat)
            found = cache.get(path, digest, stat)
            if found is None:
                missing.append(path)
            else:
                known[index] = FileResult(found[0], found[1])
    fresh = _check_all(missing, select, ignore, jobs, fixing, possible)
    try:
        for index, path in enumerate(files):
            result = known.get(index)
            if result is None:
                result = next(fresh)
                hashed = digests.get(index)
                if hashed is not None and result.problem is None:
                    cache.put(path, hashed[0], result.diagnostics, result.syntax_errors, hashed[1])
            yield result
    finally:
        cache.save()


def _path(name: str) -> Path:
    """A file's Path, pathlib imported on first use (not with the command: a run whose results all come from the cache
    makes none, and pathlib's import, with urllib.parse and ipaddress, was a tenth of such a run)."""
    from pathlib import Path

    return Path(name)


def _check_all(files: list[str], select: list[str] | None, ignore: list[str] | None,
               jobs: int | None, fixing: FixMode | None = None, possible: bool = False) -> Iterator[FileResult]:
    """Each file's result in the order given. Files are independent, so a process pool shares them out over the
    cores; each worker reads, parses (once) and analyses whole files and sends back only the diagnostics. The files
    go by their names (:func:`source_names`'s, each ``str(Path(name))``): a ``.py`` file is read without a Path
    (pathlib's parsing of each name's parts was a fifth of the parent's work on a large library)."""
    if not files:
        return
    # The analysis is imported here, not with the command (a warm run, all from the cache, never needs it), and
    # before the pool forks: each worker starts with it, and with what reading a file and its findings' fingerprints
    # need (hashlib's sha256 would load OpenSSL: 3 to 6 ms; CPython's own module makes the same digests).
    import tokenize  # noqa: F401

    _sha256()

    import syncfree.analyze  # noqa: F401

    jobs = jobs or _usable_cores()
    check_one = functools.partial(check_file, select=select, ignore=ignore, fixing=fixing, possible=possible)
    on_disk = [path for path in files if path != "-"]
    if jobs < 2 or len(on_disk) < _POOL_MIN_FILES or _total_bytes(on_disk) < _POOL_MIN_BYTES:
        yield from map(check_one, files)
        return
    # What the analysis makes on first use, made once here rather than in each worker (syncfree.analyze.prepare).
    syncfree.analyze.prepare(select, ignore)
    # Small chunks keep both cores busy to the end (a 10,000-line file next to many small ones).
    chunksize = max(1, min(16, len(on_disk) // (jobs * 8)))
    if hasattr(os, "fork"):
        # Forked workers of our own (forkpool.py): concurrent.futures' pool and its imports cost 25 ms of CPU.
        from syncfree.cli.forkpool import forked_map

        by_path = forked_map(check_one, on_disk, min(jobs, len(on_disk)), chunksize)
        for path in files:
            yield check_one(path) if path == "-" else next(by_path)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork where there is one: the workers start with syncfree and the catalog imported (spawn re-imports them).
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ProcessPoolExecutor(min(jobs, len(on_disk)), mp_context=context, initializer=_worker_started) as pool:
        results = pool.map(check_one, on_disk, chunksize=chunksize)
        by_path = iter(results)
        for path in files:
            yield check_one(path) if path == "-" else next(by_path)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what a container or taskset allows, not the machine's count
    except AttributeError:
        return os.cpu_count() or 1


def _total_bytes(files: list[str]) -> int:
    total = 0
    for path in files:
        try:
            total += os.stat(path).st_size
        except OSError:
            pass  # reported when the file is read
        if total >= _POOL_MIN_BYTES:
            break
    return total


def _worker_started() -> None:
    # The objects the parent made before the fork are never garbage here: keep the collector off them.
    gc.freeze()


def check_file(path: Path | str, *, select: list[str] | None = None, ignore: list[str] | None = None,
               fixing: FixMode | None = None, possible: bool = False) -> FileResult:
    """Read one file (``-``: stdin; a name as :func:`source_names` gives it, or a Path) and analyse it: every cell of a notebook, in order, each seeing what the cells
    above it bound. Each source is parsed once (twice only when it holds IPython syntax or does not parse).

    With ``fixing``, the chosen rewrites are applied (one per finding, none that overlaps an earlier one), the result
    must parse again or the cell keeps its text, and the findings reported are those of the rewritten source.
    """
    # One pause for the whole file: the collector resumes once its trees are freed (by reference counting), not
    # between the parse and the walk, when a collection would walk every node of a young tree (collector.py).
    with cycle_collection_paused():
        return _check_file(path, select, ignore, fixing, possible)


def _check_file(path: Path | str, select: list[str] | None, ignore: list[str] | None,
                fixing: FixMode | None, possible: bool = False) -> FileResult:
    try:
        if str(path) == "-":
            stdin = getattr(sys.stdin, "buffer", None)  # bytes, decoded as `python -` decodes them
            text = decode_python(stdin.read(), "-") if stdin is not None else sys.stdin.read()
            cells = [SourceCell("-", None, text)]
        else:
            cells = read_cells(path)
    except UsageProblem as problem:
        return FileResult([], problem=problem)
    diagnostics: list[Diagnostic] = []
    syntax_errors = fixed = 0
    rewritten: list[SourceCell] = []
    seen: dict[tuple[str, ...], int] = {}
    from syncfree.analyze import Bindings

    bindings = Bindings()  # a notebook's cells see what the cells above them bound
    for cell in cells:
        before = Bindings(dict(bindings.names), dict(bindings.aliases), set(bindings.imported), bindings.default_device)
        findings, problem = _analyse(cell, select, ignore, bindings, possible)
        if fixing is not None and problem is None and str(path) != "-":
            chosen = [finding for finding in findings if fixing.takes(finding)]
            new_source = _rewritten(cell.source, chosen) if chosen else None
            if new_source is not None:
                fixed += len(chosen)
                cell = SourceCell(cell.path, cell.number, new_source, cell.cell_id)
                bindings = before
                findings, problem = _analyse(cell, select, ignore, bindings, possible)
        rewritten.append(cell)
        if problem is not None:
            diagnostics.append(problem)
            syntax_errors += 1
        else:
            prints = _fingerprints(cell, findings, seen)
            diagnostics.extend(_diagnostic(cell, finding, digest) for finding, digest in zip(findings, prints))
    diffs: tuple[str, ...] = ()
    if fixed and fixing is not None:
        if fixing.action == "diff":
            diffs = tuple(_diff(old, new) for old, new in zip(cells, rewritten) if old.source != new.source)
        else:
            try:
                write_cells(_path(path) if type(path) is str else path, cells, rewritten)
            except UsageProblem as problem:
                return FileResult([], problem=problem)
    return FileResult(diagnostics, syntax_errors, fixed=fixed, diffs=diffs)


def _rewritten(source: str, findings: list[dict[str, Any]]) -> str | None:
    """The source with the findings' rewrites applied, or None when the result would not parse (a rewrite is kept
    only if the file is still Python afterwards)."""
    import ast

    from syncfree.analyze import apply_fixes, neutralize_ipython

    try:
        new = apply_fixes(source, findings)
    except ValueError:
        return None
    python = neutralize_ipython(new)
    if python is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(python)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return new if new != source else None


def _diff(old: SourceCell, new: SourceCell) -> str:
    name = old.path if old.number is None else f"{old.path}:cell {old.number}"
    import difflib

    lines = difflib.unified_diff(old.source.splitlines(keepends=True), new.source.splitlines(keepends=True),
                                 fromfile=name, tofile=name)
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return text


def write_cells(path: Path, cells: list[SourceCell], rewritten: list[SourceCell]) -> None:
    """Write the rewritten sources back: a ``.py`` file in the encoding it was read in (a BOM kept), a notebook's
    changed cells into its JSON, whose layout must be Jupyter's own (``indent=1``, sorted keys) so that the file
    changes only where the code did."""
    data = path.read_bytes()
    import json

    if path.suffix != ".ipynb":
        import io
        import tokenize

        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = rewritten[0].source
        payload = text.encode("utf-8-sig" if encoding == "utf-8-sig" else encoding)
        path.write_bytes(payload)
        return
    notebook = json.loads(data.decode("utf-8"))
    layout = json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if layout != data.decode("utf-8"):
        raise UsageProblem(f"{path}: not in Jupyter's JSON layout; not rewritten (open and save it in Jupyter first)")
    changed = {old.number: new.source for old, new in zip(cells, rewritten) if old.source != new.source}
    for number, cell in enumerate(notebook.get("cells", []), 1):
        if number in changed:
            cell["source"] = changed[number].splitlines(keepends=True)
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _analyse(cell: SourceCell, select: list[str] | None, ignore: list[str] | None,
             bindings: Bindings, possible: bool = False) -> tuple[list[dict[str, Any]], Diagnostic | None]:
    """The cell's findings, or the diagnostic saying it does not parse."""
    import ast  # (here: a run whose results all come from the cache parses nothing)

    from syncfree.analyze import analyze_source

    with cycle_collection_paused(), warnings.catch_warnings():  # a large file's tree is no garbage (syncfree.collector)
        warnings.simplefilter("ignore", SyntaxWarning)  # invalid escapes and the like: not ours to report
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            tree = compile(cell.source, cell.path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None  # IPython syntax (%magic, !cmd) to blank first, or no Python at all
    if tree is not None:
        return analyze_source(cell.source, select=select, ignore=ignore, earlier=bindings, tree=tree,
                              possible=possible), None
    findings = analyze_source(cell.source, select=select, ignore=ignore, earlier=bindings, possible=possible)
    # Findings mean the source parsed once its IPython lines were blanked; only a cell without any can be one that
    # does not parse.
    return findings, (_syntax_error(cell) if not findings else None)


def _syntax_error(cell: SourceCell) -> Diagnostic | None:
    import ast

    from syncfree.analyze import neutralize_ipython

    python_source = neutralize_ipython(cell.source)
    if python_source is None:
        return None
    try:
        with cycle_collection_paused():  # a large file's tree is no garbage (syncfree.collector)
            compile(python_source, cell.path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        line = error.lineno or 1
        col = max(error.offset or 1, 1)
        return Diagnostic(cell.path, line, col, error.end_lineno or line, max(error.end_offset or col, col), SYNTAX_ERROR,
                          f"SyntaxError: {error.msg} (nothing in this {'cell' if cell.number else 'file'} was checked)",
                          cell=cell.number, cell_id=cell.cell_id)
    except (ValueError, RecursionError, MemoryError) as error:
        return Diagnostic(cell.path, 1, 1, 1, 1, SYNTAX_ERROR, f"cannot parse: {error}", cell=cell.number, cell_id=cell.cell_id)
    return None


def _diagnostic(cell: SourceCell, finding: dict[str, Any], fingerprint: str | None = None) -> Diagnostic:
    r = finding["range"]
    fix = finding["fix"]
    edits = tuple(
        (e["range"]["line"], e["range"]["col"] + 1, e["range"]["end_line"], e["range"]["end_col"] + 1, e["text"])
        for e in fix["edits"]
    ) if fix else None
    return Diagnostic(cell.path, r["line"], r["col"] + 1, r["end_line"], r["end_col"] + 1, finding["rule"],
                      finding["message"], cell=cell.number, cell_id=cell.cell_id, certainty=finding["certainty"],
                      fix=fix["safety"] if fix else None, fix_title=fix["title"] if fix else None, fix_edits=edits,
                      fingerprint=fingerprint)


def _fingerprints(cell: SourceCell, findings: list[dict[str, Any]], seen: dict[tuple[str, ...], int]) -> list[str]:
    """A finding's identity across commits: its rule, file, cell, the code it covers (spaces collapsed) and how many
    identical ones come before it, hashed; lines moving up or down leave it unchanged (SARIF partialFingerprints)."""
    if not findings:
        return []
    sha256 = _sha256()
    lines = cell.source.splitlines()
    prints = []
    for finding in findings:
        r = finding["range"]
        covered = lines[r["line"] - 1 : r["end_line"]]
        if covered:
            covered[-1] = covered[-1][: r["end_col"]] if len(covered) > 1 else covered[-1][r["col"] : r["end_col"]]
            if len(covered) > 1:
                covered[0] = covered[0][r["col"] :]
        key = (finding["rule"], cell.path, cell.cell_id or str(cell.number or ""), " ".join(" ".join(covered).split()))
        seen[key] = seen.get(key, 0) + 1
        digest = sha256("\0".join((*key, str(seen[key]))).encode()).hexdigest()[:32]
        prints.append(digest)
    return prints


def _sha256() -> Callable[[bytes], Any]:
    """SHA-256 without hashlib where CPython has its own module (``_sha256``; 3.12's ``_sha2``): hashlib loads
    OpenSSL on import, a few milliseconds of a cold run's fixed cost, for digests of a few dozen bytes."""
    global _SHA256
    if _SHA256 is None:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]
        except ImportError:
            try:
                from _sha2 import sha256  # type: ignore[import-not-found,no-redef]
            except ImportError:
                from hashlib import sha256  # type: ignore[assignment]
        _SHA256 = sha256
    return _SHA256


_SHA256: Callable[[bytes], Any] | None = None


def _summary(diagnostics: list[Diagnostic], files: int, syntax_errors: int, budget: int | None, fixed: int = 0) -> str:
    counts = {"certain": 0, "likely": 0, "possible": 0}
    fixable = 0
    for d in diagnostics:
        if d.rule != SYNTAX_ERROR:
            counts[d.certainty] = counts.get(d.certainty, 0) + 1
            fixable += d.fix is not None
    total = sum(counts.values())
    where = f"{files} file{'s' if files != 1 else ''}"
    if total:
        text = (f"Found {total} sync{'s' if total != 1 else ''} in {where} ({counts['certain']} certain, "
                f"{counts['likely']} likely" + (f", {counts['possible']} possible" if counts["possible"] else "")
                + f"); {fixable} with a rewrite.")
    else:
        text = f"No syncs found in {where}."
    if fixed:
        text = f"Fixed {fixed} sync{'s' if fixed != 1 else ''}. " + text.replace("No syncs found", "No syncs left")
    if syntax_errors:
        text += f" {syntax_errors} could not be parsed."
    if budget is not None:
        text += f" Budget {budget}: {'exceeded' if total > budget else 'kept'}."
    return text


# --------------------------------------------------------------------------------------------------- options
def add_check_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``syncfree check`` beyond the common ones (ruff's names and meanings)."""
    parser.add_argument("--fix", action="store_true", help="apply the safe rewrites in place, then report what is left")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="with --fix or --diff: the rewrites marked for review too (read them before committing)")
    parser.add_argument("--diff", action="store_true",
                        help="print the rewrites --fix would apply as a unified diff and change nothing (exit 1 if any)")
    parser.add_argument("--statistics", action="store_true", help="print the number of findings per rule instead of the findings")
    parser.add_argument("--possible", action="store_true",
                        help="also report the findings of certainty 'possible' (code that runs on the host by construction, "
                        "such as a data processor's preprocessing: it syncs only if given CUDA tensors), left out by default")
    parser.add_argument("--exclude", type=_patterns, metavar="PATTERNS",
                        help="comma-separated glob patterns to leave out, instead of the configuration's exclude: a plain "
                        "name (models, *_pb2.py) matches a file or folder of that name anywhere, a pattern with / a path "
                        "from the working directory")
    parser.add_argument("--extend-exclude", type=_patterns, metavar="PATTERNS",
                        help="patterns to leave out in addition to the configuration's exclude")
    parser.add_argument("--no-cache", action="store_true",
                        help="check every file afresh, and keep no results (default: a file unchanged since an earlier "
                        "run with the same options and syncfree gets that run's result from the cache)")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help=f"the cache's folder (default: $SYNCFREE_CACHE_DIR, else {DEFAULT_CACHE_DIR} next to the "
                        "configuring pyproject.toml, else in the working directory)")


def check_options(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """``check()``'s keyword arguments from the parsed options and the ``[tool.syncfree]`` configuration."""
    if args.diff and args.fix:
        raise UsageProblem("--fix and --diff: --diff shows the rewrites without applying them, choose one")
    if args.unsafe_fixes and not (args.fix or args.diff):
        raise UsageProblem("--unsafe-fixes goes with --fix or --diff")
    if (args.fix or args.diff) and any(path == "-" for path in args.paths):
        raise UsageProblem("--fix and --diff rewrite files: not stdin (-)")
    root = config.path.parent if getattr(config, "path", None) is not None else None
    # The configuration's patterns are relative to its pyproject.toml, the command line's to the working directory.
    exclusion = Exclusion(args.exclude) if args.exclude is not None else Exclusion(config.exclude, root)
    if args.extend_exclude:
        exclusion = exclusion | Exclusion(args.extend_exclude)
    if args.no_cache:
        cache_dir = None
    else:
        cache_dir = args.cache_dir or os.environ.get("SYNCFREE_CACHE_DIR") or (
            os.path.join(root, DEFAULT_CACHE_DIR) if root is not None else DEFAULT_CACHE_DIR)  # (no pathlib: see above)
    return {"exclude": exclusion, "fix": args.fix, "diff": args.diff, "unsafe_fixes": args.unsafe_fixes,
            "statistics": args.statistics, "possible": args.possible, "cache_dir": cache_dir}


def _patterns(text: str) -> list[str]:
    return [pattern.strip() for pattern in text.split(",") if pattern.strip()]
