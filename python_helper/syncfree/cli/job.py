"""What ``syncfree run`` was asked for, as the two sides of a distributed job take it: the
launcher (``syncfree run --nproc-per-node N``, `syncfree.cli.launch`) and each rank
(``torchrun ... -m syncfree run``, `syncfree.cli.run_rank`). One object rather than the
same ten keyword arguments passed twice.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

__all__ = ["JobOptions"]


@dataclass(frozen=True)
class JobOptions:
    """The program and how its syncs are seen and reported."""

    target: str                       # the script, or the module with ``module``
    argv: tuple[str, ...]             # the program's own arguments
    module: bool = False              # ``-m module``
    mode: str | None = None           # warn | error | predict; None: warn with CUDA, predict without
    engine: str | None = None         # debug | cupti | auto
    output_format: str = "text"       # of the merged report
    budget: int | None = None         # counted syncs per rank
    selected: frozenset[str] | None = None  # rule codes reported (None: all)
    output: Any = None                # syncfree.output.ReportOutput: where the merged report goes

    @classmethod
    def from_args(cls, args: argparse.Namespace, config: Any, output: Any) -> JobOptions:
        """From ``syncfree run``'s arguments, ``[tool.syncfree]`` (`syncfree.config.Config`) filling what they leave
        out."""
        from syncfree.cli.run_script import _selected_rules

        select = args.select if args.select is not None else config.select
        ignore = args.ignore if args.ignore is not None else config.ignore
        selected = _selected_rules(select, ignore)
        return cls(args.target, tuple(args.args), module=args.module, mode=args.mode or config.mode,
                   engine=args.engine or config.engine, output_format=args.format,
                   budget=args.budget if args.budget is not None else config.budget,
                   selected=frozenset(selected) if selected is not None else None, output=output)

    def rank_arguments(self) -> list[str]:
        """What follows ``syncfree run`` on each rank's command line: the options a rank needs, then the program."""
        return [*(["--mode", self.mode] if self.mode else []), *(["--engine", self.engine] if self.engine else []),
                *(["-m"] if self.module else []), self.target, *self.argv]
