"""Write the catalog table into docs/catalog.md, between <!-- catalog:start --> and <!-- catalog:end -->.

    PYTHONPATH=python_helper .venv/bin/python scripts/gen_catalog_table.py           # update docs/catalog.md
    PYTHONPATH=python_helper .venv/bin/python scripts/gen_catalog_table.py --check   # exit 1 when it is stale
    PYTHONPATH=python_helper .venv/bin/python scripts/gen_catalog_table.py --print   # the table on stdout

The catalog (python_helper/syncfree/catalog/) is the one source: each rule's module docstring holds its texts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from syncfree.catalog import CATEGORIES, RULES

CATALOG_PAGE = Path(__file__).resolve().parent.parent / "docs" / "catalog.md"
START, END = "<!-- catalog:start -->", "<!-- catalog:end -->"
_SAFETY = {"safe": "safe rewrite", "review": "rewrite (review)", "none": "—"}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def catalog_table() -> str:
    lines = [
        f"{len(RULES)} rules. *Dependency* says whether the CPU really needs the value (true) or the sync can go "
        "without changing the logic (false); rules marked *off* run only when selected "
        "(`syncfree check --select SF303`).",
    ]
    for digit, category in CATEGORIES.items():
        rules = [rule for code, rule in RULES.items() if int(code[2]) == digit]
        if not rules:
            continue
        lines += ["", f"**SF{digit}xx · {category}**", "", "| Code | Rule | What it flags | Dependency | Fix |", "|---|---|---|---|---|"]
        for rule in rules:
            name = rule.name if rule.enabled_by_default else f"{rule.name} (off)"
            lines.append(
                f"| {rule.code} | {name} | {_cell(rule.title)} | {rule.dependency} | {_SAFETY[rule.fix_safety]} |"
            )
    return "\n".join(lines) + "\n"


def with_table(page: str, table: str) -> str:
    if START not in page or END not in page or page.index(START) > page.index(END):
        raise ValueError(f"{CATALOG_PAGE.name} needs the markers {START} and {END}")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 when docs/catalog.md's table is stale")
    group.add_argument("--print", action="store_true", help="print the table instead of writing docs/catalog.md")
    args = parser.parse_args(argv)
    table = catalog_table()
    if args.print:
        sys.stdout.write(table)
        return 0
    if not CATALOG_PAGE.exists():
        print(f"{CATALOG_PAGE} does not exist: use --print", file=sys.stderr)
        return 2
    try:
        updated = with_table(CATALOG_PAGE.read_text(), table)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    if args.check:
        stale = updated != CATALOG_PAGE.read_text()
        print("docs/catalog.md's catalog table is stale: run scripts/gen_catalog_table.py" if stale else "up to date")
        return 1 if stale else 0
    CATALOG_PAGE.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
