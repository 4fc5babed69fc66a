"""``syncfree check``'s per-file result cache (issue 23, ruff's ``.ruff_cache``): a repeat run on unchanged files
reads their results instead of analysing them; a changed file or changed options are checked again; a cache that is
not as written is ignored; ``--no-cache`` does without."""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path

import pytest

from syncfree.cli import main
from syncfree.cli.check import check

check_module = importlib.import_module("syncfree.cli.check")
SYNCING = "import torch\n\ndef step(x: torch.Tensor):\n    return x.sum().item()\n"
CLEAN = "import torch\n\ndef step(x: torch.Tensor):\n    return x.sum()\n"
POSSIBLE = (  # a likely finding in a processor's preprocessing: possible, shown only with --possible
    "import torch\n\nclass FooImageProcessor(BaseImageProcessor):\n    def preprocess(self, images):\n"
    "        return images.max().item()\n"
)


@pytest.fixture
def analysed(monkeypatch):
    """The paths each run analysed (read and parsed), in this process (one job)."""
    seen: list[str] = []
    original = check_module._check_file

    def spy(path, *args, **kwargs):
        seen.append(Path(path).name)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(check_module, "_check_file", spy)
    return seen


def _run(paths, cache_dir, **options) -> list[dict]:
    out = io.StringIO()
    check([str(p) for p in paths], output_format="json", out=out, jobs=1, cache_dir=cache_dir, **options)
    return json.loads(out.getvalue())


def _files(folder: Path) -> list[Path]:
    files = [folder / "a.py", folder / "b.py", folder / "broken.py"]
    files[0].write_text(SYNCING)
    files[1].write_text(CLEAN)
    files[2].write_text("def f(:\n")
    return files


def test_a_second_run_reads_the_results_from_the_cache(tmp_path, analysed):
    (tmp_path / "src").mkdir()
    _files(tmp_path / "src")
    cache = tmp_path / "cache"
    first = _run([tmp_path / "src"], cache)
    assert sorted(analysed) == ["a.py", "b.py", "broken.py"]
    analysed.clear()
    second = _run([tmp_path / "src"], cache)
    assert analysed == []  # nothing parsed again
    assert second == first  # fingerprints, fixes and the syntax error included
    assert [d["rule"] for d in first] == ["SF101", "syntax-error"]
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_changed_file_is_checked_again(tmp_path, analysed):
    a, b, _ = _files(tmp_path)
    cache = tmp_path / "cache"
    _run([a, b], cache)
    analysed.clear()
    b.write_text(SYNCING)  # same size or not, the bytes decide
    again = _run([a, b], cache)
    assert analysed == ["b.py"]
    assert [(Path(d["path"]).name, d["rule"]) for d in again] == [("a.py", "SF101"), ("b.py", "SF101")]


def test_changed_options_are_checked_again(tmp_path, analysed):
    (tmp_path / "image_processing_foo.py").write_text(POSSIBLE)
    cache = tmp_path / "cache"
    assert _run([tmp_path / "image_processing_foo.py"], cache) == []
    analysed.clear()
    shown = _run([tmp_path / "image_processing_foo.py"], cache, possible=True)
    assert analysed == ["image_processing_foo.py"] and {d["certainty"] for d in shown} == {"possible"}
    analysed.clear()
    assert _run([tmp_path / "image_processing_foo.py"], cache, select=["SF101"]) == []
    assert analysed == ["image_processing_foo.py"]
    analysed.clear()
    assert _run([tmp_path / "image_processing_foo.py"], cache, possible=True) == shown  # each choice keeps its own results
    assert analysed == []


def test_a_corrupt_cache_is_ignored_and_rewritten(tmp_path, analysed):
    a, b, _ = _files(tmp_path)
    cache = tmp_path / "cache"
    expected = _run([a, b], cache)
    (stored,) = cache.rglob("*.json")
    entries = json.loads(stored.read_text())["entries"]
    entries[str(a)][2][0][1] = "not a line"  # one entry not as written
    stored.write_text(json.dumps({"entries": entries}))
    analysed.clear()
    assert _run([a, b], cache) == expected
    assert analysed == ["a.py"]
    stored.write_bytes(b"\x00{truncated")  # the whole file unreadable
    analysed.clear()
    assert _run([a, b], cache) == expected
    assert sorted(analysed) == ["a.py", "b.py"]
    analysed.clear()
    assert _run([a, b], cache) == expected and analysed == []  # written again


def test_diff_bypasses_the_cache(tmp_path, analysed):
    a, _, _ = _files(tmp_path)
    cache = tmp_path / "cache"
    _run([a], cache)
    analysed.clear()
    out = io.StringIO()
    check([str(a)], output_format="json", out=out, jobs=1, cache_dir=cache, diff=True)
    assert analysed == ["a.py"]


def test_the_command_line_caches_by_default_and_no_cache_does_without(tmp_path, monkeypatch, capsys, analysed):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SYNCFREE_CACHE_DIR", raising=False)
    Path("a.py").write_text(SYNCING)
    assert main(["check", "a.py", "--format", "json", "--exit-zero"]) == 0
    assert Path(".syncfree_cache", "CACHEDIR.TAG").is_file()
    first = capsys.readouterr().out
    analysed.clear()
    assert main(["check", "a.py", "--format", "json", "--exit-zero"]) == 0
    assert analysed == [] and capsys.readouterr().out == first
    assert main(["check", "a.py", "--format", "json", "--exit-zero", "--no-cache"]) == 0
    assert analysed == ["a.py"] and capsys.readouterr().out == first
    analysed.clear()
    assert main(["check", "a.py", "--format", "json", "--exit-zero", "--cache-dir", "elsewhere"]) == 0
    assert analysed == ["a.py"] and Path("elsewhere", "CACHEDIR.TAG").is_file()
    monkeypatch.setenv("SYNCFREE_CACHE_DIR", str(tmp_path / "from-env"))
    analysed.clear()
    assert main(["check", "a.py", "--format", "json", "--exit-zero"]) == 0
    assert analysed == ["a.py"] and (tmp_path / "from-env" / "CACHEDIR.TAG").is_file()


def test_an_unwritable_cache_folder_leaves_the_run_uncached(tmp_path, analysed):
    a, _, _ = _files(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert [d["rule"] for d in _run([a], blocker / "cache")] == ["SF101"]


def test_edited_syncfree_sources_invalidate_the_cache(tmp_path, analysed, monkeypatch):
    a, _, _ = _files(tmp_path)
    cache = tmp_path / "cache"
    _run([a], cache)
    analysed.clear()
    cache_module = importlib.import_module("syncfree.cli.cache")
    monkeypatch.setattr(cache_module, "_code_digest", "another version of the rules")
    _run([a], cache)
    assert analysed == ["a.py"]


def test_a_file_whose_stat_is_unchanged_is_not_read_again(tmp_path, analysed, monkeypatch):
    """Issue 40's warm-run figure: a file with the size and modification time recorded when its bytes were hashed is
    not read or hashed again (ruff and git trust a file's stat); one modified just before it was hashed (within the
    file system's clock's reach) is hashed again on the next run, not analysed, and trusted on the run after."""
    import os
    import time

    old, racy = tmp_path / "old.py", tmp_path / "racy.py"
    old.write_text(SYNCING)
    racy.write_text(SYNCING)
    past = time.time() - 3600
    os.utime(old, (past, past))
    hashed: list[int] = []
    original = check_module.file_digest
    monkeypatch.setattr(check_module, "file_digest", lambda data: hashed.append(len(data)) or original(data))
    cache = tmp_path / "cache"
    first = _run([old, racy], cache)
    assert len(hashed) == 2 and sorted(analysed) == ["old.py", "racy.py"]
    hashed.clear()
    analysed.clear()
    assert _run([old, racy], cache) == first
    assert len(hashed) == 1 and analysed == []  # racy.py hashed again (modified just before its hash), old.py not
    hashed.clear()
    os.utime(racy, (past, past))  # ... then still: its stat no longer matches, so hashed again (the same bytes)
    assert _run([old, racy], cache) == first
    assert len(hashed) == 1 and analysed == []
    hashed.clear()
    assert _run([old, racy], cache) == first
    assert hashed == [] and analysed == []


def test_a_run_wholly_from_the_cache_imports_neither_the_analysis_nor_the_other_commands(tmp_path):
    # A warm run's time is mostly imports: it needs the cache and the output, not the rules, the walk or the runners;
    # nor OpenSSL (hashlib: 6 ms), the launcher's subprocess and uuid, or TOML's parser for a pyproject.toml that
    # holds no syncfree table.
    import subprocess
    import sys

    _files(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\ndependencies = ["syncfree"]\n')
    program = ("import sys\nfrom syncfree.cli import main\n"
               "status = main(['check', sys.argv[1], '--cache-dir', sys.argv[2], '--format', 'json', '-o', sys.argv[3]])\n"
               "print(status, sorted(name for name in sys.modules if name.startswith(('syncfree.analyze', "
               "'syncfree.catalog', 'syncfree.cli.run_', 'syncfree.cli.merge', 'multiprocessing', 'difflib', "
               "'_hashlib', 'subprocess', 'uuid', 'tomllib'))))\n")
    command = [sys.executable, "-c", program, str(tmp_path), str(tmp_path / "cache"), str(tmp_path / "report.json")]
    cold = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert cold.stdout.startswith("2 ") and "'syncfree.analyze'" in cold.stdout, cold.stderr  # broken.py: exit 2
    report = (tmp_path / "report.json").read_text()
    warm = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert warm.stdout == "2 []\n", warm.stderr
    assert (tmp_path / "report.json").read_text() == report


def test_json_is_one_diagnostic_a_line(tmp_path):
    # Written by json's C encoder (indent=1 runs the pure-Python one): a list of one-line entries, still a JSON list.
    out = io.StringIO()
    check([str(path) for path in _files(tmp_path)], output_format="json", out=out, jobs=1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 4
    entries = [json.loads(line.rstrip(",")) for line in lines[1:-1]]
    assert entries == json.loads(out.getvalue()) and {entry["rule"] for entry in entries} == {"SF101", "syntax-error"}
    assert "fix_edits" not in entries[0] or isinstance(entries[0]["fix_edits"], list)
    empty = io.StringIO()
    check([str(tmp_path / "b.py")], output_format="json", out=empty, jobs=1)
    assert empty.getvalue() == "[]\n"


def test_the_cache_is_written_by_the_c_encoder(tmp_path, monkeypatch):
    # json.dump never takes json's C encoder (it streams the pure-Python one's pieces): a cold run of a large library
    # spent a tenth of a second of its parent's time there. json.dumps (no indent) does, and is written in one piece.
    _files(tmp_path)
    cache = tmp_path / "cache"

    def streamed(*args, **kwargs):
        raise AssertionError("the cache was written by json.dump, the pure-Python encoder")

    monkeypatch.setattr(json, "dump", streamed)
    first = _run([tmp_path / "a.py"], cache)
    [written] = cache.glob("*/*.json")
    assert first and list(json.loads(written.read_text())["entries"]) == [str(tmp_path / "a.py")]
