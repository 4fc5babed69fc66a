"""Where a sync came from, what it was, and syncs aggregated into sites.

A sync arrives as the innermost Python frame that was running when torch synchronized.
`attribute()` walks outward from that frame to the frames of the cell (code compiled under
a filename in ``cell_files``), finds the exact instruction on the innermost cell line
(``co_positions``), and names the operation: first by the static finding of the catalog
that covers that instruction, then by well-known torch frames, then by the instruction
itself. `SiteTable` folds syncs into `SyncSite`s keyed by (chain of cell lines, kind), so
the report grows with the number of sites, never with the number of syncs.

Nothing here imports torch or IPython: torch is looked up in ``sys.modules`` only when a
frame's locals must be inspected, which happens only after torch has produced a sync.
"""

from __future__ import annotations

import ast
import dis
import functools
import linecache
import sys
import threading
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from types import CodeType, FrameType
from typing import Any, NamedTuple

# What synced, in user terms: one list for the recorder, the predict mode and the catalog.
from .. import collector
from ..kinds import KINDS, kind_label  # noqa: F401  (KINDS re-exported by syncfree.capture)
from ..parsing import code_columns, parse_quietly

MAX_SITES = 1000          # report.schema.json: sites maxItems
MAX_CHAIN = 32            # report.schema.json: SyncSite.chain maxItems
MAX_FRAMES = 8            # report.schema.json: SyncSite.frames maxItems


# --------------------------------------------------------------------------- sites


class SyncTally:
    """Counts of syncs that share one destination; the recorder's hot path adds to it.

    ``blocked_s`` sums the measured events only; ``measured`` says how many were measured,
    so a tally whose syncs were never timed reports ``blocked_ms: null``, not 0.
    """

    __slots__ = ("count", "blocked_s", "measured")

    def __init__(self) -> None:
        self.count = 0
        self.blocked_s = 0.0
        self.measured = 0

    @property
    def blocked_ms(self) -> float | None:
        return round(self.blocked_s * 1000.0, 3) if self.measured else None


class SyncSite(SyncTally):
    """Syncs aggregated by (chain of cell lines, kind): what a report's ``sites[]`` holds."""

    __slots__ = ("chain", "kind", "rule", "frames", "thread", "predicted", "detail", "files",
                 "library", "phase", "first_s", "process", "cost_s", "cost_share", "span")

    def __init__(self, chain: tuple[int, ...], kind: str, rule: str | None,
                 frames: tuple[dict, ...], thread: str | None, predicted: bool,
                 detail: str | None = None, files: tuple[str, ...] | None = None,
                 library: LibraryLine | None = None, phase: str = "recurring",
                 first_s: float | None = None, process: str | None = None,
                 span: tuple[int, int, int, int] | None = None) -> None:
        super().__init__()
        # (line, col, end_line, end_col) of the call that synced on the innermost user line, columns 0-based
        # (`instruction_span`: the code's own positions, Python 3.11+), from the first sync; None: not known.
        self.span = span
        # What the site's syncs cost, the GPU time they lost (syncfree.cost), and its share of the
        # watched span's GPU time: set after the run when a GPU trace measured it, else None.
        self.cost_s: float | None = None
        self.cost_share: float | None = None
        # The child process(es) whose syncs these are, by name (a watched test's spawned
        # ranks: syncfree.processes); None: the watching process's own.
        self.process = process
        # The blocked time of the site's first sync, its first call (None: not timed). Set
        # once, when the sync that creates the site resolves (`SiteTable.site_for`), so the
        # recorder's per-sync path adds nothing: that call pays the warm-up (cuBLAS/cuDNN
        # handles, lazy module loading, the allocator's first blocks, a compilation that
        # finished just before it, a framework's setup before its first sync).
        self.first_s = first_s
        # The line inside an installed package where the sync happened, when the user's line
        # called into one (trainer.train()): shown under the user's line with its own rule.
        self.library = library
        # "recurring", "once" (the line runs once: setup, a checkpoint at the end) or "compile"
        # (torch.compile compiling or autotuning): see `phase_of`.
        self.phase = phase
        self.chain = chain
        # The file of each chain line when the sync was attributed to user files (scripts,
        # tests, watch()) rather than to one notebook cell; None for a cell.
        self.files = files
        self.kind = kind
        self.rule = rule
        self.frames = frames
        self.thread = thread
        self.predicted = predicted
        self.detail = detail  # e.g. which explicit call: "torch.cuda.synchronize()"

    @property
    def line(self) -> int:
        return self.chain[-1]

    @property
    def file(self) -> str | None:
        """The file of the innermost user line (None for a notebook cell)."""
        return self.files[-1] if self.files else None

    @property
    def label(self) -> str:
        return f"`{self.detail}`" if self.detail else kind_label(self.kind)

    @property
    def one_off(self) -> bool:
        """Paid once, not every step: the line runs once, or torch.compile compiled."""
        return self.phase != "recurring"

    @property
    def cost_ms(self) -> float | None:
        """GPU time lost to the site's syncs over the run (None: not measured)."""
        return round(self.cost_s * 1000.0, 3) if self.cost_s is not None else None

    @property
    def cost_each_ms(self) -> float | None:
        return round(self.cost_s * 1000.0 / self.count, 4) if self.cost_s is not None and self.count else None

    @property
    def first_ms(self) -> float | None:
        """Blocked time of the first sync, the site's first call; included in `blocked_ms`."""
        return round(self.first_s * 1000.0, 3) if self.first_s is not None and self.measured else None

    @property
    def steady_ms(self) -> float | None:
        """Blocked time after the first call (`blocked_ms` less `first_ms`): what a
        recurring site is ranked by (`rank_key`); None when nothing was timed."""
        return steady_ms(self.blocked_ms, self.first_ms)

    @property
    def message(self) -> str:
        inside = f" inside {self.library.package}" if self.library is not None else ""
        where = ""
        if self.process:  # the syncs of child processes (a notebook cell's DataLoader workers, a watch's ranks)
            where = f" (in child process{'es' if ', ' in self.process else ''} {self.process})"
        if self.predicted:
            return f"{self.label} would sync {self.count}x{inside} (predicted on CPU){where}"
        text = f"{self.label} synced {self.count}x{inside}"
        cost = self.cost_ms
        if cost is not None:  # what it cost leads (syncfree.cost); blocked time is second
            share = f" ({self.cost_share * 100:.1f}%)" if self.cost_share is not None else ""
            text += f", cost {cost:.1f} ms of GPU time{share}"
        blocked = self.blocked_ms
        if blocked is not None:
            text += f", blocked {blocked:.1f} ms"
        if self.thread:
            text += f" (thread {self.thread})"
        return text + where

    def to_report(self) -> dict:
        site = {
            "line": self.line,
            "kind": self.kind,
            "count": self.count,
            "cost_ms": self.cost_ms,
            "cost_each_ms": self.cost_each_ms,
            "cost_share": self.cost_share,
            "blocked_ms": self.blocked_ms,
            "chain": list(self.chain),
            "frames": [dict(f) for f in self.frames],
            "rule": self.rule,
            "message": self.message[:500],
            "label": self.label[:200],
        }
        if self.thread:
            site["thread"] = self.thread[:200]
        if self.files:
            site["file"] = self.files[-1]
            site["chain_files"] = list(self.files)
        if self.predicted:
            site["predicted"] = True
        if self.library is not None:
            site["library"] = self.library.to_report()
        if self.phase != "recurring":
            site["phase"] = self.phase
        if self.span is not None:
            site["range"] = span_range(self.span)
        first = self.first_ms
        if first is not None:
            site["first_ms"] = first
        return site


def span_range(span: tuple[int, int, int, int]) -> dict:
    """A site's `SyncSite.span` as report.schema.json's Range (0-based columns, end exclusive)."""
    line, col, end_line, end_col = span
    return {"line": line, "col": col, "end_line": end_line, "end_col": end_col}


def steady_ms(blocked_ms: float | None, first_ms: float | None) -> float | None:
    """A site's blocked time after its first call (never below 0: both are rounded)."""
    if blocked_ms is None:
        return None
    return round(max(blocked_ms - (first_ms or 0.0), 0.0), 3)


def once_text(once: list[tuple[int, float | None]], firsts: list[float]) -> str:
    """``, repeated syncs first; 16 syncs paid once (setup, compilation), 80.0 ms, and 3.1 ms at the first call of
    each repeated one``: what a ranking by `rank_key` says of its order. ``once``: (count, blocked ms or None) of the
    one-off rows; ``firsts``: the recurring rows' first-call blocked times (paid once too, so listed with them)."""
    count = sum(n for n, _ in once)
    blocked = [ms for _, ms in once if ms is not None]
    parts = []
    if count:
        parts.append(f"{count} sync{'s' if count != 1 else ''} paid once (setup, compilation)"
                     + (f", {sum(blocked):.1f} ms" if blocked else ""))
    if firsts:
        parts.append(f"{sum(firsts):.1f} ms at the first call of each repeated one")
    return (", repeated syncs first; " + ", and ".join(parts)) if parts else ""


def rank_key(one_off: bool, blocked_ms: float | None, first_ms: float | None, count: int,
             cost_ms: float | None = None) -> tuple:
    """How sites are ranked in every listing (watch, ``syncfree run``; in JupyterLab the
    port in src/sidebar/cost.ts, used by the Syncs panel, the card and the notebook summary
    through model.ts compareCost): recurring ones first, by their blocked time after the first call
    (the total less `first_ms`: what the rest of the run paid, measured, nothing
    extrapolated), then by count; one-off ones (``once``/``compile``) after them, by their
    whole blocked time, then count. A first call that took 100 ms and then 0.01 ms per call
    ranks below 1 ms per step; a 100 ms module move paid once ranks below both. In predict
    mode nothing is timed: by count alone, as before. Where the GPU trace measured what a site
    costs (``cost_ms``, the GPU time its syncs lost: syncfree.cost) that leads instead, blocked
    time second; sites without it (a child process's) after those with it."""
    cost = blocked_ms if one_off else steady_ms(blocked_ms, first_ms)
    return (one_off, cost_ms is None, -(cost_ms or 0.0), -(cost or 0.0), -count)


def child_sites(reports: Sequence[Any]) -> list[SyncSite]:
    """The children's sites as `SyncSite`s of the watching process's report, one per (files, line, kind, rule)
    with the names of the processes that synced there (``process``), for a watch that takes its children's syncs
    into its own count (a watched test's ranks: pytest_plugin.py). ``reports``: the children's
    `syncfree.processes.ProcessReport`s, whose sites are `syncfree.processes.site_fields`."""
    merged: dict[tuple, SyncSite] = {}
    names: dict[tuple, list[str]] = {}
    for report in reports:
        for fields in report.sites:
            files = tuple(fields["files"]) if fields.get("files") else None
            key = (files, tuple(fields["chain"]), fields["kind"], fields.get("rule"), fields.get("detail"))
            site = merged.get(key)
            if site is None:
                site = merged[key] = SyncSite(tuple(fields["chain"]), fields["kind"], fields.get("rule"), (),
                                              None, bool(fields.get("predicted")), fields.get("detail"), files,
                                              phase=fields.get("phase") or "recurring",
                                              span=tuple(fields["span"]) if fields.get("span") else None)
                names[key] = []
            site.count += int(fields["count"])
            if fields.get("blocked_ms") is not None:
                site.blocked_s += float(fields["blocked_ms"]) / 1000.0
                site.measured += int(fields["count"])
            if report.name not in names[key]:
                names[key].append(report.name)
    for key, site in merged.items():
        site.process = ", ".join(names[key])
    return list(merged.values())


class SiteTable:
    """Sites by (chain, kind, thread, predicted, detail), capped at `MAX_SITES`.

    Past the cap, syncs still count (in `overflow`) and `truncated` says some sites were
    left out, so totals stay honest.
    """

    def __init__(self, limit: int = MAX_SITES) -> None:
        self._sites: dict[tuple, SyncSite] = {}
        self._chains: set[tuple] = set()  # (chain, files) of the sites held
        self._limit = limit
        self.overflow = SyncTally()
        self.truncated = False

    def takes(self, chain: tuple[int, ...], files: tuple[str, ...] | None) -> bool:
        """Whether a sync on ``chain`` may get a site: below the cap, or a site on that
        chain is held already (another kind on the line, say). Asked before the rest of
        the attribution is worked out, which a cell of thousands of syncing lines would
        otherwise pay for every line past the cap."""
        return len(self._sites) < self._limit or (chain, files) in self._chains

    def site_for(self, chain: tuple[int, ...], kind: str, rule: str | None,
                 frames: tuple[dict, ...], thread: str | None, predicted: bool,
                 detail: str | None = None, files: tuple[str, ...] | None = None,
                 library: LibraryLine | None = None, phase: str = "recurring",
                 first_s: float | None = None,
                 span: tuple[int, int, int, int] | None = None) -> SyncTally:
        """The site for a sync about to be counted; a new site keeps ``first_s``, the
        blocked time of this sync, as its first call's, and ``span``, where on its line the
        call that synced is (two calls of one kind on a line share a site: the first's)."""
        key = (chain, kind, thread, predicted, detail, files, library, phase)
        site = self._sites.get(key)
        if site is not None:
            return site
        if len(self._sites) >= self._limit:
            self.truncated = True
            return self.overflow
        site = self._sites[key] = SyncSite(chain, kind, rule, frames, thread, predicted, detail,
                                            files, library, phase, first_s, span=span)
        self._chains.add((chain, files))
        return site

    def sites(self) -> list[SyncSite]:
        """Sites that saw at least one sync, by cell line then kind."""
        live = [s for s in self._sites.values() if s.count]
        live.sort(key=lambda s: (s.files or (), s.line, s.chain, s.kind, s.thread or "",
                                 s.library or (), s.phase))
        return live


# --------------------------------------------------------------------------- user files


@functools.lru_cache(maxsize=1)
def library_roots() -> tuple[str, ...]:
    """The standard library, installed packages and syncfree itself: not the user's code.
    Computed once per process (``sysconfig.get_paths`` costs ~0.4 ms a call)."""
    import os
    import sysconfig

    paths = sysconfig.get_paths()
    library = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    library.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # syncfree
    return tuple(sorted(p for p in library if p))


#: Names of code compiled from a string that is the program's own code: ``python -c``'s "<string>" in a program a
#: followed run started (syncfree/program_start.py). Elsewhere "<string>" is exec'd or generated code (dynamo's).
PROGRAM_CODE_NAMES: set[str] = set()


class UserFiles(dict):
    """The user's own source files, for attribution outside notebook cells.

    Used where the recorder takes ``cell_files`` (filename -> line offset): a filename is
    "in" it when it is the user's code, the script, the test file, the project's own
    package, a notebook cell, rather than the standard library, an installed package
    (site-packages), torch or syncfree itself. Offsets are 0. The answer is cached per
    filename, so the recorder's hot path stays a dict lookup after the first time.
    """

    def __init__(self, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> None:
        super().__init__()
        import os

        self._include = tuple(os.path.abspath(p) for p in include)
        self._exclude = tuple(sorted({*library_roots(), *map(os.path.abspath, exclude)}))
        self._rejected: set[str] = set()

    def _is_user(self, filename: str) -> bool:
        # Code compiled from a string (exec, python -c) has no file to point at; IPython's
        # "<ipython-input-...>" cells and doctest's examples ("<doctest mod.f[1]>") do.
        if filename in PROGRAM_CODE_NAMES:
            return True
        if not filename or filename.startswith("<") and not filename.startswith(("<ipython-input",
                                                                                  "<doctest ")):
            return False
        norm = filename.replace("\\", "/")
        if "/site-packages/" in norm or "/dist-packages/" in norm or norm.startswith("<frozen"):
            return False
        if is_generated(filename):
            return False
        import os

        path = os.path.abspath(filename) if not filename.startswith("<") else filename
        if self._include:
            return any(path == p or path.startswith(p + os.sep) for p in self._include)
        return not any(path == p or path.startswith(p + os.sep) for p in self._exclude)

    def __contains__(self, filename: object) -> bool:
        if dict.__contains__(self, filename):
            return True
        if filename in self._rejected or not isinstance(filename, str):
            return False
        if self._is_user(filename):
            self[filename] = 0
            return True
        self._rejected.add(filename)
        return False

    def __missing__(self, filename: str) -> int:
        if filename in self:
            return 0
        raise KeyError(filename)

    def get(self, filename, default=None):  # type: ignore[override]
        return self[filename] if filename in self else default


# --------------------------------------------------------------------------- generated code

# Code that torch.compile and Triton write and import at run time: inductor's output code
# (torch/_inductor/codecache.py writes it under cache_dir(), by default
# <tmp>/torchinductor_<user>, or $TORCHINDUCTOR_CACHE_DIR), Triton's kernel cache
# (triton/runtime/cache.py: ~/.triton/cache or $TRITON_CACHE_DIR). FX's
# "<eval_with_key>.N" and dynamo's "<string>" start with "<" and are left out anyway.
_GENERATED_FRAGMENTS = ("/torchinductor_", "/.triton/cache/", "/triton/cache/")


@functools.lru_cache(maxsize=1)
def _generated_roots() -> tuple[str, ...]:
    import os

    roots = [os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")]
    return tuple(os.path.abspath(r).replace("\\", "/") + "/" for r in roots if r)


def is_generated(filename: str) -> bool:
    """Whether ``filename`` is code that torch.compile or Triton generated: never the
    user's, so its syncs go to the user line that called the compiled function."""
    norm = filename.replace("\\", "/")
    if norm.startswith("<"):
        return norm.startswith(("<eval_with_key", "<string>", "<torch"))
    return any(f in norm for f in _GENERATED_FRAGMENTS) or norm.startswith(_generated_roots())


# --------------------------------------------------------------------------- library lines

# Top-level names of installed packages whose frames are torch itself or the machinery
# around the user's code, not a framework the user called: a sync in them is explained by
# the user's line (or by library_entry_points), not by a library line.
_NOT_FRAMEWORKS = frozenset({"torch", "functorch", "torchgen", "triton", "syncfree", "_pytest",
                             "pytest", "pluggy", "IPython", "ipykernel", "xdist", "numpy"})


def package_of(filename: str) -> str | None:
    """The top-level package an installed file belongs to (``transformers`` for
    ``.../site-packages/transformers/trainer.py``); None for the user's files, the standard
    library, torch and the packages in `_NOT_FRAMEWORKS`."""
    norm = filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        at = norm.rfind(marker)
        if at >= 0:
            top = norm[at + len(marker):].split("/", 1)[0]
            name = top[:-3] if top.endswith(".py") else top
            return None if name in _NOT_FRAMEWORKS or not name else name
    return None


class LibraryLine(NamedTuple):
    """The line inside an installed package where a sync happened, under the user's line
    that entered the package: what the user can act on when their own line is
    ``trainer.train()``. ``rule`` explains this line (SF103 for the Trainer's NaN check),
    ``entry`` is a known library sync with its switch (`syncfree.catalog.libraries`)."""

    package: str
    file: str       # shortened: transformers/trainer.py
    line: int
    function: str
    text: str       # the line's source, stripped
    rule: str | None
    entry: str | None = None  # SFL code

    def to_report(self) -> dict:
        library = {"package": self.package[:100], "file": self.file[:300], "line": max(self.line, 1),
                   "function": self.function[:200], "text": self.text[:200], "rule": self.rule}
        if self.entry is not None:
            from syncfree.catalog.libraries import ENTRIES

            library["entry"] = ENTRIES[self.entry].to_report()
        return library

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _library_line(library: Sequence[FrameType],
                  kind: str | None) -> tuple[LibraryLine, str, int] | None:
    """The library line of a sync whose frames between the user's line and the sync are
    ``library`` (inner -> outer), the kind of what synced and the index of the line's frame;
    None when none of those frames is in an installed framework. Runs once per new site."""
    at = next((i for i, fr in enumerate(library) if package_of(fr.f_code.co_filename)), None)
    if at is None:
        return None
    from syncfree.catalog.libraries import ENTRIES, entry_for_frames

    frame = library[at]
    code = frame.f_code
    below = library[:at]  # inner -> outer, torch's frames under the library line
    known = entry_for_frames(library, _executing_text)
    entry = known[0] if known is not None else None
    rule = _rule_of_library_entry(below) if below else None
    if rule is None:
        span = instruction_span(code, frame.f_lasti, 0)
        rule = _rule_at(_library_findings(code), span) if span else None
    rule_kind = _kind_of_rule(rule) if rule else None
    if kind is None:
        kind = (rule_kind or (entry.kind if entry is not None else None)
                or _kind_from_library_frames(below)
                or (classify_instruction(frame) if at == 0 else None) or "library")
    elif rule_kind is not None and rule_kind != kind and not below:
        rule = None
    if rule is None:
        rule = _rule_for_kind(kind)
    line = frame_line(frame) or 1
    # The statement as one line (a condition spread over lines reads whole: `if (...)`).
    text = " ".join(part.strip() for part in _executing_text(frame).splitlines()).replace("( ", "(")
    text = text.replace(" )", ")") or linecache.getline(code.co_filename, line).strip()
    return LibraryLine(package_of(code.co_filename) or "", shorten_path(code.co_filename), line,
                       getattr(code, "co_qualname", code.co_name)[:200], text[:200], rule,
                       entry.code if entry is not None and entry.code in ENTRIES else None), kind, at


def _executing_text(frame: FrameType) -> str:
    """The source lines of the instruction ``frame`` is executing (a condition spread over
    several lines is matched whole)."""
    code = frame.f_code
    span = instruction_span(code, frame.f_lasti, 0)
    first = span[0] if span else (frame_line(frame) or 0)
    lines, depth, n = [], 0, first
    # The first line and, while a bracket it opened is open, the next ones (`if (` ... `):`).
    while n <= first + 20:
        text = linecache.getline(code.co_filename, n)
        if not text:
            break
        if not text.strip().startswith("#"):
            lines.append(text)
            depth += text.count("(") + text.count("[") - text.count(")") - text.count("]")
        n += 1
        if depth <= 0:
            break
    return "".join(lines)


_library_findings_cache: dict[tuple, Sequence[Mapping]] = {}
# filename -> (each def's (first line with decorators, def line, last line), the module's
# import lines) or None when it does not parse: what `_library_findings` needs of a library
# file, kept instead of its AST (megabytes for a framework's 5,000-line file).
_library_layouts: dict[str, tuple[list[tuple[int, int, int]], list[int]] | None] = {}


def _library_findings(code: CodeType) -> Sequence[Mapping]:
    """The static findings of the library function ``code`` belongs to, once per function
    and process. Only that function is analysed, with the module's imports (a framework
    file of 5,000 lines takes a second as a whole, its one function milliseconds): the
    other lines are blanked, so lines and columns stay the file's own."""
    filename = code.co_filename
    lines = linecache.getlines(filename)
    layout = _library_layout(filename, lines)
    span = None
    if layout is not None:
        # The innermost def whose code starts at the code object's first line.
        spans = [d for d in layout[0] if d[0] <= code.co_firstlineno <= d[1]]
        span = max(spans) if spans else None
    key = (filename, span[1] if span is not None else 0)
    findings = _library_findings_cache.get(key)
    if findings is not None:
        return findings
    text = _function_source(lines, span, layout[1]) if span is not None and layout is not None else None
    try:
        from syncfree.analyze import analyze_source

        findings = analyze_source(text if text is not None else "".join(lines), first_line=1, honour_allow=False)
    except Exception:  # noqa: BLE001 - without findings the opcode still names the sync
        findings = []
    if len(_library_findings_cache) >= 1024:
        _library_findings_cache.pop(next(iter(_library_findings_cache)))
    _library_findings_cache[key] = findings
    return findings


def _library_layout(filename: str, lines: list[str]) -> tuple[list[tuple[int, int, int]], list[int]] | None:
    if filename in _library_layouts:
        return _library_layouts[filename]
    try:
        tree = parse_quietly("".join(lines))
    except (SyntaxError, ValueError):
        layout = None
    else:
        defs = [(min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.lineno,
                 node.end_lineno or node.lineno)
                for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        imports = [n for statement in tree.body if isinstance(statement, (ast.Import, ast.ImportFrom))
                   for n in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)]
        layout = (defs, imports)
    if len(_library_layouts) >= 256:
        _library_layouts.pop(next(iter(_library_layouts)))
    _library_layouts[filename] = layout
    return layout


def _function_source(lines: list[str], span: tuple[int, int, int], imports: list[int]) -> str | None:
    first, _, last = span
    kept = ["\n"] * len(lines)
    for n in range(first, min(last, len(lines)) + 1):
        kept[n - 1] = lines[n - 1] if lines[n - 1].endswith("\n") else lines[n - 1] + "\n"
    for n in imports:
        if n <= len(lines):
            kept[n - 1] = lines[n - 1]
    if lines[first - 1][:1] in (" ", "\t"):
        # An indented def: a header one line above opens the block it is in.
        if first < 2 or kept[first - 2].strip():
            return None
        kept[first - 2] = "if 1:\n"
    return "".join(kept)


# --------------------------------------------------------------------------- phases

# Frames that run only while torch.compile compiles or autotunes (torch/_dynamo/convert_frame.py
# is entered from the eval-frame callback for a frame not compiled yet; inductor's
# compile_fx/select_algorithm/autotune_process compile and benchmark; triton_heuristics
# benchmarks the configs of a kernel at its first launch; Triton's compiler/autotuner).
_COMPILE_FRAMES: tuple[tuple[str, Callable[[str], bool] | None], ...] = (
    ("torch/_dynamo/convert_frame.py", None),
    ("torch/_inductor/compile_fx.py", None),
    ("torch/_inductor/select_algorithm.py", None),
    ("torch/_inductor/autotune_process.py", None),
    ("torch/_inductor/codecache.py", None),
    ("torch/_inductor/runtime/triton_heuristics.py",
     lambda n: "autotune" in n or "benchmark" in n or "precompile" in n),
    ("torch/_functorch/aot_autograd.py", None),
    ("triton/compiler/", None),
    ("triton/runtime/autotuner.py", None),
)

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>"})


def _compiling(stack: Sequence[FrameType]) -> bool:
    for fr in stack:
        path = fr.f_code.co_filename.replace("\\", "/")
        for fragment, name_test in _COMPILE_FRAMES:
            if fragment in path and (name_test is None or name_test(fr.f_code.co_name)):
                return True
    return False


_looping_cache: dict[tuple[str, int], frozenset[int]] = {}


def _looping_lines(filename: str, size: int) -> frozenset[int]:
    """The lines of ``filename`` that a loop may run more than once: the bodies (and the
    tests) of for/while loops, and comprehensions. Cached per file (and its length) until
    a recorder that watched the file ends (`forget`): a code name such as %%time's
    ``<timed exec>`` is other code in the next cell, maybe as long."""
    key = (filename, size)
    cached = _looping_cache.get(key)
    if cached is None:
        if len(_looping_cache) >= 256:
            _looping_cache.clear()
        cached = _looping_cache[key] = _loops_in(filename)
    return cached


def _loops_in(filename: str) -> frozenset[int]:
    text = "".join(linecache.getlines(filename))
    try:
        tree = parse_quietly(text)
    except (SyntaxError, ValueError):
        return frozenset(range(1, text.count("\n") + 2))  # unknown: every line may repeat
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, _LOOPS) or isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp,
                                                          ast.GeneratorExp)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return frozenset(lines)


def phase_of(stack: Sequence[FrameType], user_at: Sequence[int], start: int | None = None) -> str:
    """``compile`` when torch.compile is compiling or autotuning; ``once`` when the line
    that synced provably runs once per run of the code; ``recurring`` otherwise, which is
    the safe answer.

    ``user_at``: the indexes of the user frames in ``stack`` (inner -> outer); ``start``:
    the index of the library line's frame when the sync happened inside a framework (its
    line and those between it and the user's line must run once too: the Trainer's step
    loop does not), else the innermost user frame (what it calls may sync many times in
    one call: torch.save, model.to). Once means: the outermost frame is a module, a cell or
    the frame that entered the watch; each frame from ``start`` out was called directly,
    by name, from the next one out; no line is in a loop or a comprehension; no function is
    on the stack twice. Runs once per new site."""
    if _compiling(stack[:user_at[0]] if user_at else stack):
        return "compile"
    if not user_at:
        return "recurring"
    outer = stack[user_at[-1]]
    if outer.f_code.co_name != "<module>" and outer is not stack[-1]:
        return "recurring"
    first = user_at[0] if start is None else start
    checked = list(range(first, user_at[0])) + list(user_at)
    seen: set[int] = set()
    for k, i in enumerate(checked):
        fr = stack[i]
        code = fr.f_code
        if code.co_name in _COMPREHENSIONS or id(code) in seen:
            return "recurring"
        seen.add(id(code))
        if k + 1 < len(checked):
            caller_at = checked[k + 1]
            if caller_at != i + 1:  # a library frame between: it may call back many times
                return "recurring"
            node = _instruction_node(stack[caller_at].f_code, stack[caller_at].f_lasti)
            if not isinstance(node, ast.Call) or (_callee_name(node.func) != code.co_name
                                                  and code.co_name != "__init__"):
                return "recurring"  # map(f, xs), a hook, a decorator: not one direct call
        filename = code.co_filename
        lines = _looping_lines(filename, len(linecache.getlines(filename)))
        line = frame_line(fr)
        if line is None or line in lines:
            return "recurring"
    return "once"


# --------------------------------------------------------------------------- attribution


class Attribution(NamedTuple):
    """Where one sync belongs: the cell lines (outer -> inner) and what synced. (A named
    tuple: one is made per new site, thousands in a big cell.)"""

    chain: tuple[int, ...]
    kind: str
    rule: str | None
    frames: tuple[dict, ...]
    frames_truncated: bool
    files: tuple[str, ...] | None = None  # per chain line, for user files (not cells)
    library: LibraryLine | None = None
    phase: str = "recurring"
    # (line, col, end_line, end_col) of the call that synced on the innermost user line, 0-based columns; None:
    # not known (Python 3.10, a value being displayed)
    span: tuple[int, int, int, int] | None = None


#: ``findings_for(filename)`` returns the static findings (schema Finding dicts, in cell
#: coordinates) of the cell compiled under ``filename``.
FindingsLookup = Callable[[str], Sequence[Mapping]]


#: What `attribute` returns when the ``table`` it was given has no room for the sync's site.
TABLE_FULL = Attribution((), "other", None, (), False)


def attribute(frame: FrameType, cell_files: Mapping[str, int], findings_for: FindingsLookup,
              max_frames: int, kind: str | None = None, *,
              table: SiteTable | None = None,
              boundary: FrameType | None = None,
              caller: FrameType | None = None) -> Attribution | None:
    """Attribute a sync whose innermost Python frame is ``frame``; None without a cell
    frame, `TABLE_FULL` when ``table`` (if given) would not take a site on its lines.

    The frames are walked up to ``boundary`` (the frame that entered a watch) or, for
    notebook cells, to the cell's module frame: what is above is the same for every sync
    (a kernel's ~30 frames of IPython, tornado and asyncio). ``caller``: where the walk
    goes on once ``frame``'s thread has no more frames (a sync on autograd's device
    thread goes on at the frame that called the backward pass, in the thread waiting
    for it), so that a library's hook or a recomputed forward is attributed to the
    user's ``loss.backward()`` line."""
    by_file = isinstance(cell_files, UserFiles)
    stack: list[FrameType] = []
    f: FrameType | None = frame
    while True:
        if f is None:
            if caller is None:
                break
            f, caller = caller, None
        stack.append(f)
        if f is boundary:
            break
        code = f.f_code
        if not by_file and code.co_name == "<module>" and code.co_filename in cell_files:
            break
        f = f.f_back
    cell_at = [i for i, fr in enumerate(stack) if fr.f_code.co_filename in cell_files]
    if not cell_at:
        return None
    inner = cell_at[0]
    chain: list[int] = []
    files: list[str] = []
    for i in reversed(cell_at):  # outermost cell frame first
        fr = stack[i]
        filename = fr.f_code.co_filename
        line = max((frame_line(fr) or 1) + cell_files[filename], 1)
        # A comprehension on the same line adds no step.
        if not chain or chain[-1] != line or (by_file and files[-1] != filename):
            chain.append(line)
            files.append(filename)
    if len(chain) > MAX_CHAIN:
        chain = chain[:1] + chain[-(MAX_CHAIN - 1):]
        files = files[:1] + files[-(MAX_CHAIN - 1):]
    if table is not None and not table.takes(tuple(chain), tuple(files) if by_file else None):
        return TABLE_FULL
    library = stack[:inner]  # inner -> outer
    frames, frames_truncated = _trimmed_frames(library, max_frames)
    found = _library_line(library, kind) if library else None
    phase = phase_of(stack, cell_at, found[2] if found is not None else None)
    cell_frame = stack[inner]
    offset = cell_files[cell_frame.f_code.co_filename]
    # A sync while an expression statement's value is shown (sys.displayhook: IPython's
    # Out[n]) is the display's; the static findings on that text are about computing it.
    shows = shows_value(cell_frame)
    # Where on the line the call that synced is: the instruction the user's frame is executing (a call into
    # torch or a library, a condition's jump); the same range a traceback marks, comments never in it.
    span = None if shows else instruction_span(cell_frame.f_code, cell_frame.f_lasti, offset)
    if span is not None and span[0] != chain[-1]:
        span = None
    elif span is not None and span[2] != span[0]:
        # A call spread over lines (`float(x.sum()  # why` / `)`): its first line's code, where the site is, so
        # that a comment between its lines is never inside the range.
        _, end = code_columns(linecache.getline(cell_frame.f_code.co_filename, span[0] - offset))
        span = (span[0], span[1], span[0], max(end - 1, span[1]))
    if found is not None:
        # The line entered an installed framework (trainer.train()) that synced inside: the
        # site names the framework's line with that line's rule; the user's line gets the
        # rule of a library call, which is what it is.
        line_inside, inner_kind, _ = found
        return Attribution(tuple(chain), inner_kind, _rule_for_kind("library"), frames,
                           frames_truncated, tuple(files) if by_file else None, line_inside, phase, span)
    entry_rule = _rule_of_library_entry(library) if library else None
    if entry_rule is not None:
        # The line called a library function whose syncs a rule explains as a whole
        # (scaler.step(opt), model.to(device)): name that, not the innermost torch call.
        return Attribution(tuple(chain), _kind_of_rule(entry_rule) or kind or "library",
                           entry_rule, frames, frames_truncated,
                           tuple(files) if by_file else None, None, phase, span)
    if kind is not None and library and _kind_from_library_frames(library) == "library":
        # Predict mode knows the op (the `.item()` inside `scaler.get_scale()`); the user's line made a library call,
        # as a GPU run names it (SF700 there and here: one rule for `--select`, baselines and fingerprints)
        kind = "library"
    rule = _rule_at(findings_for(cell_frame.f_code.co_filename), span) if span else None
    rule_kind = _kind_of_rule(rule) if rule else None
    if kind is None:
        kind = (rule_kind or _kind_from_library_frames(library) or classify_instruction(stack[0])
                or ("library" if library else "other"))
    elif rule_kind != kind:  # the caller knows what synced; a finding of another kind is not it
        rule = None
    if rule is None and kind in ("library", "other") and not library:
        # An op called from the line that syncs inside (torch.linalg.inv(a), a.narrow(0, t, 2)):
        # predicted from the op table, or seen on a GPU with nothing else to name it.
        rule = _rule_of_callee(cell_frame)
        if rule is not None:
            kind = _kind_of_rule(rule) or kind
    if rule is None and shows and kind == "print":
        rule = DISPLAY_RULE  # whatever the static pass knew of the value
    if rule is None:
        rule = _rule_for_kind(kind)
    return Attribution(tuple(chain), kind, rule, frames, frames_truncated,
                       tuple(files) if by_file else None, None, phase, span)


def name_notebook_cells(sites: Iterable[dict], cells: Mapping[str, int]) -> None:
    """A site whose sync happened inside a function defined in an earlier notebook cell:
    its frames in such cells name the cell (``In [3]``) rather than the file IPython
    compiled the cell under (``ipykernel_26912/3210457752.py``, a temp file that means
    nothing to the user and is gone with the kernel), and the innermost of them is the
    site's ``defined_in`` (cell, line, its text, the function). The chain stays the
    calling cell's lines. ``cells``: each cell file IPython compiled (its full name) ->
    its execution count (IPython's ``CachingCompiler._filename_map``). Report dicts
    (`SyncSite.to_report`), changed in place."""
    by_short: dict[str, tuple[str, int]] | None = None
    for site in sites:
        inner: dict | None = None
        for frame in site.get("frames") or ():
            if by_short is None:
                by_short = {shorten_path(name): (name, count) for name, count in cells.items()}
            found = by_short.get(frame["file"])
            if found is None or frame["line"] < 1:
                continue
            name, count = found
            frame["file"] = cell_name(count)
            text = linecache.getline(name, frame["line"]).strip()[:200]
            inner = {"cell": cell_name(count), "execution_count": count, "line": frame["line"],
                     "text": text, "function": frame["name"]}
        if inner is not None:
            site["defined_in"] = inner


def cell_name(execution_count: int) -> str:
    """``In [3]``: a notebook cell as IPython numbers it."""
    return f"In [{execution_count}]"


def _trimmed_frames(library: list[FrameType], max_frames: int) -> tuple[tuple[dict, ...], bool]:
    """Library frames outer -> inner; past ``max_frames`` keep the outermost ones (what the
    cell called) and the innermost one (where the sync happened)."""
    outer_first = list(reversed(library))
    truncated = len(outer_first) > max_frames
    if truncated:
        kept_outer = outer_first[:max_frames - 1] if max_frames > 1 else []
        outer_first = kept_outer + outer_first[-1:] if max_frames else []
    frames = tuple(
        {"file": shorten_path(fr.f_code.co_filename),
         "line": max(fr.f_lineno or 0, 0),
         "name": getattr(fr.f_code, "co_qualname", fr.f_code.co_name)[:200]}
        for fr in outer_first
    )
    return frames, truncated


def shorten_path(path: str) -> str:
    """``.../site-packages/torch/_tensor.py`` -> ``torch/_tensor.py``; other files keep
    their last two path components."""
    norm = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        at = norm.rfind(marker)
        if at >= 0:
            return norm[at + len(marker):][-300:]
    at = norm.rfind("/torch/")
    if at >= 0:
        return norm[at + 1:][-300:]
    return "/".join(norm.split("/")[-2:])[-300:]


# --------------------------------------------------------------------------- instruction span

_positions_cache: dict[int, tuple[CodeType, list]] = {}
_positions_lock = threading.RLock()  # reentrant: an interrupt inside `with` can leave it held


def frame_line(frame: FrameType) -> int | None:
    """``frame.f_lineno``, from the cached positions: CPython 3.11 works ``f_lineno`` out
    by scanning the code's line table from its start (PyCode_Addr2Line), which made each
    new site of a 10,000-line cell cost as much as the cell is long."""
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if positions is not None and 0 <= index < len(positions):
        line = positions[index][0]
        if line is not None:
            return line
    return frame.f_lineno


def _positions(code: CodeType) -> list | None:
    positions_of = getattr(code, "co_positions", None)
    if positions_of is None:
        return None
    # Keyed by id(): hashing a code object hashes its constants, thousands of them for
    # a big cell. The code object is kept with its positions, so its id is not reused.
    # Bounded wait: a KeyboardInterrupt that lands between a `with`'s acquire and its block
    # leaves the lock held by that thread (a CPython race), and another thread's sync then
    # waited for ever; it works the positions out uncached instead.
    if not _positions_lock.acquire(timeout=_POSITIONS_WAIT_S):
        return list(positions_of())
    try:
        return _cached_positions(code, positions_of)
    finally:
        _positions_lock.release()


_POSITIONS_WAIT_S = 0.5


def _cached_positions(code: CodeType, positions_of) -> list:
    """`_positions` under the lock: from the cache, else worked out and kept."""
    cached = _positions_cache.get(id(code))
    if cached is not None and cached[0] is code:
        return cached[1]
    # A 10,000-line cell has some 270,000 instructions: without the cycle collector
    # running between their tuples (none of them garbage) the list takes a third of
    # the time.
    with collector.paused():
        positions = list(positions_of())
    _positions_cache[id(code)] = (code, positions)
    if len(_positions_cache) > 4096:  # code objects of finished cells: drop the oldest
        del _positions_cache[next(iter(_positions_cache))]
    return positions


def instruction_span(code: CodeType, lasti: int, offset: int) -> tuple[int, int, int, int] | None:
    """(line, col, end_line, end_col) of the instruction at ``lasti``, in cell lines and
    character columns (``co_positions`` gives UTF-8 byte columns, Python 3.11+)."""
    positions = _positions(code) if lasti >= 0 else None
    if positions is None:
        return None
    index = lasti // 2  # f_lasti is a byte offset into 2-byte code units
    if index >= len(positions):
        return None
    line, end_line, col, end_col = positions[index]
    if line is None or col is None:
        return None
    end_line = end_line if end_line is not None else line
    end_col = end_col if end_col is not None else col
    filename = code.co_filename
    col = _char_column(filename, line, col)
    end_col = _char_column(filename, end_line, end_col)
    return line + offset, col, end_line + offset, end_col


def _char_column(filename: str, line: int, byte_col: int) -> int:
    text = linecache.getline(filename, line)
    if not text or text.isascii():
        return byte_col
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


def _rule_at(findings: Sequence[Mapping], span: tuple[int, int, int, int]) -> str | None:
    """The rule of the static finding that best covers the instruction's span.

    A finding that contains the span wins (the tightest one); otherwise one that lies
    inside the span (the widest one): an instruction ``x.sum().item()`` contains a finding
    on ``.item()``. Only the findings on the span's lines are looked at (`_FindingIndex`),
    so a cell with thousands of findings costs the same per new site as a small one.
    """
    start, end = (span[0], span[1]), (span[2], span[3])
    containing, inside = [], []
    for f_start, f_end, rule in _index_for(findings).near(span[0], span[2]):
        if f_start <= start and end <= f_end:
            containing.append((_extent(f_start, f_end), rule))
        elif start <= f_start and f_end <= end:
            lines, cols = _extent(f_start, f_end)
            inside.append(((-lines, -cols), rule))
    if containing:
        return min(containing)[1]
    if inside:
        return min(inside)[1]
    return None


class _FindingIndex:
    """Static findings by cell line: each under every line it spans (those spanning more
    than `_WIDE` lines, a loop's body say, are kept apart and always looked at)."""

    _WIDE = 64

    def __init__(self, findings: Sequence[Mapping]) -> None:
        self.by_line: dict[int, list[tuple]] = {}
        self.wide: list[tuple] = []
        for finding in findings:
            r = finding.get("range") or {}
            try:
                entry = ((r["line"], r["col"]), (r["end_line"], r["end_col"]), finding["rule"])
            except KeyError:
                continue
            first, last = r["line"], r["end_line"]
            if last - first > self._WIDE:
                self.wide.append(entry)
                continue
            for line in range(first, last + 1):
                self.by_line.setdefault(line, []).append(entry)

    def near(self, first: int, last: int) -> list[tuple]:
        found = list(self.wide)
        for line in range(first, last + 1):
            found.extend(self.by_line.get(line, ()))
        return found


# id(findings list) -> (the list, kept alive so the id is not reused; its index)
_indexes: dict[int, tuple[Sequence[Mapping], _FindingIndex]] = {}


def _index_for(findings: Sequence[Mapping]) -> _FindingIndex:
    cached = _indexes.get(id(findings))
    if cached is not None and cached[0] is findings:
        return cached[1]
    index = _FindingIndex(findings)
    if len(_indexes) >= 64:  # findings of finished cells: drop the oldest
        _indexes.pop(next(iter(_indexes)), None)
    _indexes[id(findings)] = (findings, index)
    return index


def forget(findings: Iterable[Sequence[Mapping]], files: Container[str]) -> None:
    """Drop what this module's caches keep for a recorder that has ended: the index of
    its findings and the instruction positions of the code in its ``files``. A
    10,000-line cell's come to some 270,000 tuples and 10,000 lists and dicts, which each
    of Python's full collections would otherwise walk in every cell that follows.
    Idempotent."""
    for listing in findings:
        cached = _indexes.get(id(listing))
        if cached is not None and cached[0] is listing:
            _indexes.pop(id(listing), None)
    with _positions_lock:
        for key, (code, _) in list(_positions_cache.items()):
            if code.co_filename in files:
                _positions_cache.pop(key, None)
    for key in [key for key in list(_looping_cache) if key[0] in files]:
        _looping_cache.pop(key, None)


def _extent(start: tuple[int, int], end: tuple[int, int]) -> tuple[int, int]:
    return (end[0] - start[0], end[1] - start[1])


_rule_kinds: dict[str, str | None] = {}


def _kind_of_rule(rule: str) -> str | None:
    kind = _rule_kinds.get(rule)
    if kind is None:
        from syncfree import catalog

        kind = _rule_kinds[rule] = catalog.get(rule).kind
    return kind


def _rule_of_callee(frame: FrameType) -> str | None:
    from syncfree.catalog.library_entry_points import rule_for_callee

    node = _instruction_node(frame.f_code, frame.f_lasti)
    return rule_for_callee(_callee_name(node.func)) if isinstance(node, ast.Call) else None


def _rule_of_library_entry(library: Sequence[FrameType]) -> str | None:
    from syncfree.catalog.library_entry_points import rule_for_frames

    return rule_for_frames(library)


def _rule_for_kind(kind: str) -> str | None:
    from syncfree import catalog

    return catalog.rule_for_kind(kind)


# --------------------------------------------------------------------------- classification

# Library frames whose code is torch's own and that name the operation: the warning's
# location is inside torch for these (see sync-facts: print(t) -> torch/_tensor_str.py,
# torch.unique -> torch/functional.py, Stream.synchronize -> torch/cuda/streams.py).
_LIBRARY_FRAME_KINDS: tuple[tuple[str, Callable[[str], bool] | None, str], ...] = (
    ("torch/_tensor_str.py", None, "print"),
    ("torch/_tensor.py", lambda n: n in ("__repr__", "__str__"), "print"),
    ("torch/_tensor.py", lambda n: n == "__format__", "format"),
    ("torch/_tensor.py", lambda n: n == "__array__", "to_host"),
    ("torch/functional.py", lambda n: "unique" in n, "unique"),
    ("torch/cuda/streams.py", lambda n: n == "synchronize", "stream_sync"),
    ("torch/amp/grad_scaler.py", None, "library"),
    ("torch/cuda/amp/grad_scaler.py", None, "library"),
    ("torch/nn/utils/clip_grad.py", None, "library"),
    # Module.cuda()/.to() copy every parameter through Module._apply(lambda t: t.cuda()).
    ("torch/nn/modules/module.py", lambda n: n in ("<lambda>", "convert", "_apply", "cuda", "to"), "to_device"),
    ("torch/distributed/", None, "distributed"),
)


def _kind_from_library_frames(library: Sequence[FrameType]) -> str | None:
    # Outermost first: the library call the cell made names the operation (print(t) reaches
    # Tensor.__format__ inside torch/_tensor_str.py, and is still a print).
    for fr in reversed(library):
        path = fr.f_code.co_filename.replace("\\", "/")
        name = fr.f_code.co_name
        for fragment, name_test, kind in _LIBRARY_FRAME_KINDS:
            if fragment in path and (name_test is None or name_test(name)):
                return kind
    return None


# Methods and torch functions, by the name the cell calls them with (``t.item()``,
# ``torch.nonzero(m)``, or ``nonzero(m)`` after ``from torch import nonzero``).
_CALLEE_KINDS = {
    "item": "item",
    "tolist": "tolist",
    "cpu": "to_host",
    "numpy": "to_host",
    "type": "to_host",  # .type(torch.LongTensor) moves a CUDA tensor to the CPU
    "cuda": "to_device",
    "nonzero": "nonzero",
    "argwhere": "nonzero",
    "masked_select": "masked_select",
    "unique": "unique",
    "unique_consecutive": "unique",
    "repeat_interleave": "repeat_interleave",
    "bincount": "bincount",
    "histc": "histc",
    "histogram": "histc",
    "one_hot": "one_hot",
    "allclose": "allclose",
    "is_nonzero": "python_bool",
    "tensor": "tensor_from_python",
    "as_tensor": "tensor_from_python",
    "synchronize": "stream_sync",
}

# Python builtins applied to a tensor, only when called by their bare name (``max(a, b)``
# compares tensors and takes their truth value; ``torch.max(a, b)`` does not sync).
_BUILTIN_KINDS = {
    "float": "python_scalar",
    "int": "python_scalar",
    "complex": "python_scalar",
    "bool": "python_bool",
    "max": "python_bool",
    "min": "python_bool",
    "sorted": "python_bool",
    "any": "python_bool",
    "all": "python_bool",
    "print": "print",
    "repr": "print",
    "str": "print",
    "format": "format",
}

_SUBSCRIPT_LOAD = {"BINARY_SUBSCR", "BINARY_SLICE"}
_SUBSCRIPT_STORE = {"STORE_SUBSCR", "STORE_SLICE"}
_FORMAT_OPS = {"FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC"}
_BOOL_OPS = {"UNARY_NOT", "TO_BOOL", "COMPARE_OP"}
_CALL_OPS = {"CALL", "PRECALL", "CALL_FUNCTION_EX", "CALL_KW", "CALL_FUNCTION", "CALL_METHOD"}


#: The rule of a tensor's repr taken to show an expression statement's value.
DISPLAY_RULE = "SF203"
_PRINT_EXPR = dis.opmap.get("PRINT_EXPR")  # Python 3.10, 3.11
_CALL_INTRINSIC_1 = dis.opmap.get("CALL_INTRINSIC_1")  # 3.12+: its argument 1 is INTRINSIC_PRINT


def shows_value(frame: FrameType) -> bool:
    """Whether ``frame`` is showing the value of an expression statement through
    ``sys.displayhook``: code compiled in "single" mode (an interactive cell's last
    expression, IPython's run_ast_nodes) shows each expression statement's value with
    PRINT_EXPR (CPython 3.12+: CALL_INTRINSIC_1 INTRINSIC_PRINT, Python/intrinsics.c).
    ``print(x)`` as the last line syncs in its CALL, before anything is shown."""
    code = frame.f_code.co_code
    lasti = frame.f_lasti
    if lasti < 0 or lasti + 1 >= len(code):
        return False
    op = code[lasti]
    return op == _PRINT_EXPR or (op == _CALL_INTRINSIC_1 and code[lasti + 1] == 1)


def classify_instruction(frame: FrameType) -> str | None:
    """Name what the instruction being executed in ``frame`` does, from its opcode and its
    source text (for a CALL: the name of the callee). None when it says nothing."""
    code = frame.f_code
    lasti = frame.f_lasti
    try:
        opname = dis.opname[code.co_code[lasti]]
    except IndexError:
        return None
    if opname in _FORMAT_OPS:
        return "format"
    if opname.startswith(("POP_JUMP", "JUMP_IF_")) or opname in _BOOL_OPS:
        return "python_bool"
    if opname in _SUBSCRIPT_STORE:
        return "index_put"
    if opname == "BINARY_OP" and sys.version_info >= (3, 14):
        opname = "BINARY_SUBSCR"  # 3.14 folds subscripts into BINARY_OP; the source decides
    node = _instruction_node(code, lasti)
    if opname in _SUBSCRIPT_LOAD:
        if isinstance(node, ast.Subscript):
            return _subscript_kind(node, frame)
        return "index"
    if opname in _CALL_OPS and isinstance(node, ast.Call):
        return _call_kind(node, frame)
    return None


def _instruction_node(code: CodeType, lasti: int) -> ast.expr | None:
    span = instruction_span(code, lasti, 0)
    if span is None:
        return None
    line, col, end_line, end_col = span
    lines = [linecache.getline(code.co_filename, n) for n in range(line, end_line + 1)]
    if not lines or not lines[0]:
        return None
    if line == end_line:
        text = lines[0][col:end_col]
    else:
        text = lines[0][col:] + "".join(lines[1:-1]) + lines[-1][:end_col]
    return _expression(text)


@functools.lru_cache(maxsize=1024)
def _expression(text: str) -> ast.expr | None:
    """The AST of one instruction's source text (read, never changed, by its callers):
    each watch and each decorated call attributes its sites afresh, and the same few lines
    came back to the parser every time (three parses a new site)."""
    try:
        # The user's code already compiled; parsing a piece of it again must not repeat
        # its SyntaxWarnings to the user (nor swap the filters list: syncfree/parsing.py).
        tree = parse_quietly("(" + text + "\n)", mode="eval")
    except SyntaxError:
        return None
    return tree.body


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _call_kind(node: ast.Call, frame: FrameType) -> str | None:
    name = _callee_name(node.func)
    if name is None:
        return None
    if name == "to":
        return _to_kind(node, frame)
    if name.endswith("Tensor") and name[:1].isupper():  # torch.cuda.BoolTensor([...])
        return "tensor_from_python"
    if isinstance(node.func, ast.Name) and name in _BUILTIN_KINDS:
        return _BUILTIN_KINDS[name]
    return _CALLEE_KINDS.get(name)


def _to_kind(node: ast.Call, frame: FrameType) -> str:
    """``t.to(...)`` syncs copying to the host, or from pageable host memory to the GPU."""
    for arg in [*node.args, *(k.value for k in node.keywords if k.arg in ("device", None))]:
        for sub in ast.walk(arg):
            target = None
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                target = sub.value
            elif isinstance(sub, ast.Name):
                value = _lookup(frame, sub.id)
                target = str(value) if value is not None and type(value).__name__ in ("str", "device") else None
            if target is not None:
                if target.startswith("cpu"):
                    return "to_host"
                if target.startswith("cuda"):
                    return "to_device"
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    tensor = _tensor_named(frame, receiver)
    if tensor is not None:
        return "to_host" if tensor.is_cuda else "to_device"
    return "to_host"


def _subscript_kind(node: ast.Subscript, frame: FrameType) -> str:
    index = node.slice
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for part in parts:
        if isinstance(part, ast.Slice):
            bounds = (part.lower, part.upper, part.step)
            if any(b is not None and not isinstance(b, ast.Constant) for b in bounds):
                return "slice_bounds"
    for part in parts:
        if isinstance(part, ast.Compare) or (isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Invert)):
            return "mask_index"  # x[x > 0], x[~m]
        if _zero_dim_cuda_index(part, frame):
            return "slice_bounds"  # x[i] with a 0-dim CUDA index: torch reads it with item() (SF503)
        tensor = _tensor_named(frame, part)
        if tensor is not None and str(tensor.dtype) == "torch.bool":
            return "mask_index"
    return "index"


#: Methods whose call without arguments gives a 0-dim tensor (`x[scores.argmax()]`).
_FULL_REDUCTIONS = frozenset("argmax argmin sum mean max min prod amax amin count_nonzero".split())


def _zero_dim_cuda_index(part: ast.expr, frame: FrameType) -> bool:
    """Whether the index ``part`` of a subscript that synced is a 0-dim CUDA tensor, which torch reads with item():
    a name bound to one, an element of a CUDA tensor (``idx[0]``), or a full reduction (``scores.argmax()``: a CPU
    one would be read on the CPU without a sync, so the one that synced is on the GPU). Never evaluates code."""
    tensor = _tensor_named(frame, part)
    if tensor is not None:
        return bool(tensor.is_cuda) and tensor.dim() == 0
    if isinstance(part, ast.Subscript):
        base = _tensor_named(frame, part.value)
        ints = part.slice.elts if isinstance(part.slice, ast.Tuple) else [part.slice]
        return base is not None and bool(base.is_cuda) and base.dim() == len(ints) and all(
            isinstance(i, ast.Constant) and type(i.value) is int for i in ints)
    return (isinstance(part, ast.Call) and isinstance(part.func, ast.Attribute)
            and part.func.attr in _FULL_REDUCTIONS and not part.args and not part.keywords)


def _tensor_named(frame: FrameType, node: ast.expr | None):
    """The torch.Tensor a plain name refers to in ``frame``; never evaluates code."""
    if not isinstance(node, ast.Name):
        return None
    torch = sys.modules.get("torch")
    value = _lookup(frame, node.id)
    if torch is not None and isinstance(value, torch.Tensor):
        return value
    return None


_MISSING = object()


def _lookup(frame: FrameType, name: str):
    value = frame.f_locals.get(name, _MISSING)
    if value is _MISSING:
        value = frame.f_globals.get(name, None)
    return value
