"""Known syncs inside widely used libraries, and the switch or rewrite that avoids each.

A sync that happens inside a framework (``trainer.train()``, ``trainer.fit(model)``) is shown
on the user's line with the library line where it happened under it (`syncfree.capture.sites`).
When that library line, or a library function on the way to it, is one of the places listed
here, the site also names the entry: what syncs, how often, and the option or the small change
that avoids it.

One entry per file (``SFL101_transformers_nan_inf_filter.py``), the same format as the rules
(`syncfree.catalog`): the module docstring holds the sections *What it does*, *Why is this bad?*,
*Example*, *Use instead* and *Fix safety*; ``ENTRY`` names the package, how often the sync
happens, the switch, and the places (`LibrarySite`) it is recognised at. Codes: SFL1xx
transformers, SFL2xx Lightning, SFL3xx accelerate, SFL4xx torchmetrics, SFL5xx torch's own
training utilities. The before/after counts are measured by tests/gpu/test_library_switches_gpu.py.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType, MappingProxyType
from typing import Any

from syncfree.catalog import parse_rule_doc
from syncfree.kinds import KINDS


@dataclass(frozen=True)
class LibrarySite:
    """Where an entry's sync is recognised: a library frame whose file path contains ``path``
    (``/``-separated, from the package folder on), whose function is ``function``
    (``co_qualname``; None: any) and whose current line matches ``text`` (a regex; None: any)."""

    path: str
    function: str | None = None
    text: str | None = None

    def matches(self, filename: str, qualname: str, line_text: str) -> bool:
        if "/" + self.path not in filename.replace("\\", "/"):
            return False
        if self.function is not None and self.function != qualname:
            return False
        return self.text is None or re.search(self.text, line_text) is not None


@dataclass(frozen=True)
class LibraryEntry:
    code: str
    name: str
    title: str
    package: str
    kind: str
    how_often: str
    switch: str
    sites: tuple[LibrarySite, ...]
    what: str
    why: str
    fix: str
    example_before: str
    example_after: str
    fix_safety_note: str

    @classmethod
    def from_docstring(cls, doc: str | None, *, code: str, name: str, title: str, package: str, kind: str,
                       how_often: str, switch: str, sites: Sequence[LibrarySite]) -> LibraryEntry:
        sections = parse_rule_doc(doc or "", code)
        entry = cls(code=code, name=name, title=title, package=package, kind=kind, how_often=how_often,
                    switch=switch, sites=tuple(sites), what=sections["What it does"][0],
                    why=sections["Why is this bad?"][0], fix=sections["Use instead"][0],
                    example_before=sections["Example"][1], example_after=sections["Use instead"][1],
                    fix_safety_note=sections["Fix safety"][0])
        entry.validate()
        return entry

    def validate(self) -> None:
        problems = []
        if not re.fullmatch(r"SFL[1-9][0-9]{2}", self.code):
            problems.append("code must look like SFL101")
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.name):
            problems.append("name must be a kebab-case slug")
        if self.kind not in KINDS:
            problems.append(f"unknown kind {self.kind!r}")
        if not self.sites:
            problems.append("an entry names at least one LibrarySite")
        for attribute, limit in {"title": 200, "switch": 300, "how_often": 100, "why": 2000, "fix": 2000,
                                 "example_before": 2000, "example_after": 2000}.items():
            text = getattr(self, attribute)
            if not text.strip():
                problems.append(f"{attribute} is empty")
            if len(text) > limit:
                problems.append(f"{attribute} is longer than {limit} characters")
        if problems:
            raise ValueError(f"{self.code}: " + "; ".join(problems))

    def to_report(self) -> dict[str, Any]:
        """report.schema.json's ``LibraryEntry``: what a site's library line says about it."""
        return {"code": self.code, "title": self.title, "how_often": self.how_often, "switch": self.switch}


def _discover() -> dict[str, LibraryEntry]:
    entries: dict[str, LibraryEntry] = {}
    for module_info in pkgutil.iter_modules(__path__):
        found = re.fullmatch(r"(SFL[0-9]{3})_[a-z0-9_]+", module_info.name)
        if not found:
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        entry = getattr(module, "ENTRY", None)
        if not isinstance(entry, LibraryEntry):
            raise TypeError(f"{module.__name__} defines no ENTRY")
        if entry.code != found.group(1) or entry.code in entries:
            raise ValueError(f"{module.__name__}: code {entry.code} is not its file's or is defined twice")
        entries[entry.code] = entry
    return dict(sorted(entries.items()))


ENTRIES = MappingProxyType(_discover())


def entry_for_frames(frames: Sequence[FrameType],
                     text_of: Callable[[FrameType], str] | None = None) -> tuple[LibraryEntry, int] | None:
    """The entry of the outermost listed frame and that frame's index; ``frames`` inner -> outer (the
    library frames between the user's line and the sync); ``text_of`` gives the source a frame is executing
    (by default its current line). Runs once per new site."""
    import linecache

    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        code = frame.f_code
        qualname = getattr(code, "co_qualname", code.co_name)
        text = text_of(frame) if text_of is not None else linecache.getline(code.co_filename, frame.f_lineno or 0)
        for entry in ENTRIES.values():
            if any(site.matches(code.co_filename, qualname, text) for site in entry.sites):
                return entry, index
    return None


__all__ = ["ENTRIES", "LibraryEntry", "LibrarySite", "entry_for_frames"]
