"""`Record`: what a frozen dataclass gives its objects (``==``, a hash, a repr, no assignment), for the few classes a
``syncfree check`` makes before it checks anything (a file's result, a source cell, the configuration).

A ``@dataclass`` class is made at import by generating and compiling its methods' source: half a millisecond to a
millisecond each, a few percent of a run whose results all come from the cache. A subclass names its fields in
``_fields`` and sets them in its own ``__init__`` through ``__dict__`` (pickling, which a worker's result goes through,
restores ``__dict__`` without ``__setattr__``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's constant, without typing's import (2 ms of a warm check): annotations only
if TYPE_CHECKING:
    from typing import Any


__all__ = ["Record"]


class Record:
    """The base of a frozen record class: ``_fields``, its fields in order (see the module docstring)."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        values = self.__dict__  # type: ignore[attr-defined]
        return tuple(values[name] for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        values = self.__dict__  # type: ignore[attr-defined]
        return f"{type(self).__qualname__}({', '.join(f'{name}={values[name]!r}' for name in self._fields)})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")
