"""Cleanup that completes whatever interrupts it.

`Undo` is a stack of cleanup steps, pushed *before* the change each one undoes (so an
interrupt between the change and the push cannot leave the change behind). Every step is
idempotent: it checks the state and undoes only what is still there, so running it twice,
or running a step whose change never happened, is harmless.

`close()` runs the steps last-pushed first and pops each one only once it has completed.
A KeyboardInterrupt (or any BaseException that is not an Exception: SystemExit, a
`_thread.interrupt_main` landing at a random bytecode) that arrives in a step makes the
step run again, up to `_TRIES` times; an Exception raised by a step drops that step (it
would raise again). The interrupt is raised after the last step has run, so Ctrl-C still
stops the program, with everything restored. Progress is kept in the stack, so a caller
that calls `close()` again from a ``finally`` carries on where an escaped interrupt (one
that landed in close()'s own bookkeeping) left off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_TRIES = 4  # runs of one step interrupted by KeyboardInterrupt before it is given up


class Undo:
    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: list[tuple[Callable[..., Any], tuple]] = []

    def push(self, step: Callable[..., Any], *args: Any) -> None:
        self._steps.append((step, args))

    def __len__(self) -> int:
        return len(self._steps)

    def close(self) -> None:
        """Run every step (see the module docstring); then raise the first interrupt
        caught, else the first error a step raised."""
        steps = self._steps
        errors: list[BaseException] = []
        tries = 0
        while steps:
            try:
                while steps:
                    tries += 1
                    if tries > _TRIES:  # interrupted again and again: give it up
                        steps.pop()
                        tries = 0
                        continue
                    step, args = steps[-1]
                    step(*args)
                    tries = 0
                    steps.pop()
            except BaseException as exc:  # noqa: B036 (an interrupt: run the step again)
                errors.append(exc)
                if isinstance(exc, Exception) and steps:
                    steps.pop()  # a step that failed would fail again
                    tries = 0
        if errors:
            interrupts = [e for e in errors if not isinstance(e, Exception)]
            raise (interrupts or errors)[0]


def close_all(*undos: Undo | None) -> None:
    """`close()` each, each even when an earlier one raised; the first error is raised."""
    first: BaseException | None = None
    for undo in undos:
        if undo is None:
            continue
        try:
            undo.close()
        except BaseException as exc:  # noqa: B036
            if first is None:
                first = exc
        finally:
            if len(undo):  # an interrupt escaped close()'s bookkeeping: once more
                undo.close()
    if first is not None:
        raise first
