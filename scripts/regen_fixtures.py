"""Regenerate the expected files of the golden fixtures (the one command for it).

    PYTHONPATH=python_helper .venv/bin/python scripts/regen_fixtures.py          # rewrite the expected files
    PYTHONPATH=python_helper .venv/bin/python scripts/regen_fixtures.py --check  # exit 1 when one is stale

Fixtures are found by glob (torchfix style):

- ``tests/fixtures/checker/<category>/<name>.py`` -> ``<name>.txt``: every finding of every rule (also the rules
  that are off by default), one line each, ``line:col-end_line:end_col CODE certainty: message``, followed by an
  indented ``fix [safety]: title`` line when the finding has a fix.
- ``tests/fixtures/rewrites/<category>/<CODE>_<name>.in.py`` -> ``<CODE>_<name>.out.py``: the source with the fixes
  of rule CODE applied (all of them that do not overlap).

Review the diff of the expected files before committing: they are what the tests hold the analyzer to.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from syncfree.analyze import analyze_source, apply_fixes

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CHECKER_DIR = FIXTURES / "checker"
REWRITE_DIR = FIXTURES / "rewrites"


def checker_cases() -> list[Path]:
    return sorted(CHECKER_DIR.glob("*/*.py"))


def rewrite_cases() -> list[Path]:
    return sorted(REWRITE_DIR.glob("*/*.in.py"))


def render_checker(source: str) -> str:
    lines = []
    for finding in analyze_source(source, select=["ALL"]):
        r = finding["range"]
        lines.append(
            f"{r['line']}:{r['col']}-{r['end_line']}:{r['end_col']} {finding['rule']} {finding['certainty']}: {finding['message']}"
        )
        if finding["fix"]:
            lines.append(f"    fix [{finding['fix']['safety']}]: {finding['fix']['title']}")
    return "\n".join(lines) + "\n" if lines else ""


def rewrite_rule(case: Path) -> str:
    """The rule a rewrite fixture exercises: the code its file name starts with."""
    return case.name.split("_", 1)[0]


def render_rewrite(source: str, rule: str) -> str:
    findings = [f for f in analyze_source(source, select=[rule]) if f["rule"] == rule]
    return apply_fixes(source, findings)


def expected_files() -> dict[Path, str]:
    """Every expected file and the text it should hold."""
    expected = {case.with_suffix(".txt"): render_checker(case.read_text()) for case in checker_cases()}
    for case in rewrite_cases():
        expected[case.with_name(case.name.replace(".in.py", ".out.py"))] = render_rewrite(case.read_text(), rewrite_rule(case))
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="only report stale expected files (exit 1 if any)")
    args = parser.parse_args(argv)
    stale = []
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path.relative_to(FIXTURES.parent.parent)}")
    if not stale:
        print("fixtures are up to date")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
