"""What a watch pays on enter, at its first syncs and on exit, beyond the per-sync hook
(bench/overhead.py times it; these tests check the work that is skipped is really the same
work, and is redone when it is not)."""

from __future__ import annotations

import linecache

import pytest

torch = pytest.importorskip("torch")
import syncfree  # noqa: E402
import syncfree.analyze  # noqa: E402


@pytest.fixture
def static_passes(monkeypatch):
    """The texts the static pass (``analyze_source``) ran on, in order."""
    texts: list[str] = []
    real = syncfree.analyze.analyze_source

    def counted(source, **kwargs):
        texts.append(source)
        return real(source, **kwargs)

    monkeypatch.setattr(syncfree.analyze, "analyze_source", counted)
    return texts


def _passes_over(texts: list[str], path: str) -> int:
    return sum(1 for text in texts if text == "".join(linecache.getlines(path)))


def test_the_users_file_is_analysed_once_for_every_watch_and_call(userlib, static_passes):
    # Each watch (and each call of a decorated step) has a recorder of its own; the first
    # sync of each used to run the static pass over the whole file again (45 us a line).
    reports = []
    for _ in range(3):
        with syncfree.watch() as w:
            userlib.read(torch.ones(8, device="cuda"))
        reports.append(w.report)

    @syncfree.watch(on_report=reports.append)
    def train_step():
        return userlib.read(torch.ones(8, device="cuda"))

    for _ in range(2):
        train_step()
    assert _passes_over(static_passes, userlib.__file__) == 1
    # Every report still names the sync from the findings: SF101 on line 5.
    assert [(s.kind, s.rule, s.line, s.count) for r in reports for s in r.sites] == \
        [("item", "SF101", 5, 1)] * 5


def test_an_edited_file_is_analysed_again(userlib, static_passes):
    with syncfree.watch():
        userlib.read(torch.ones(8, device="cuda"))
    path = userlib.__file__
    with open(path, "a") as file:  # lines below the function: its positions stay right
        file.write("\n\ndef later(x):\n    return x.nonzero()\n")
    linecache.checkcache(path)
    with syncfree.watch() as w:
        userlib.read(torch.ones(8, device="cuda"))
    assert _passes_over(static_passes, path) == 1  # the new text, once
    assert len(static_passes) >= 2
    assert [(s.rule, s.line) for s in w.report.sites] == [("SF101", 5)]


def test_an_instructions_source_is_parsed_once_for_every_watch(userlib, monkeypatch):
    # A new site's first sync parses the source of the syncing instruction (and of the
    # calls above it) to name the operation; each watch used to parse them all again.
    from syncfree.capture import sites

    parsed: list[str] = []
    real = sites.parse_quietly

    def counted(source, mode="exec"):
        parsed.append(source)
        return real(source, mode=mode)

    monkeypatch.setattr(sites, "parse_quietly", counted)
    sites._expression.cache_clear()
    reports = []
    for _ in range(3):
        with syncfree.watch() as w:
            userlib.read(torch.ones(8, device="cuda"))
        reports.append(w.report)
    # The calling line's call, parsed to tell a direct call (a line that runs once) from a
    # callback.
    assert parsed.count('(userlib.read(torch.ones(8, device="cuda"))\n)') == 1
    assert [(s.kind, s.rule, s.line) for r in reports for s in r.sites] == [("item", "SF101", 5)] * 3
