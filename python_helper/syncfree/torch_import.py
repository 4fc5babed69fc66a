"""The program's own import of torch, as the moment to start watching it: `TorchImport` calls back in the thread
that imports torch, once torch's ``__init__`` has run and before the importer gets the module back.

``syncfree run`` (``script_run.py``) starts its program's watch there, and a spawned child (``processes.py``) its
own: a program that never imports torch runs as fast and small as under python.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["TorchImport", "torch_installed"]


def torch_installed() -> bool:
    """Whether torch can be imported here (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


class TorchImport:
    """A ``sys.meta_path`` finder that calls ``on_import`` in the thread that imports torch, once torch's own
    ``__init__`` has run and before the importer gets the module back (``import torch``, ``from torch import nn``,
    ``import torch.nn``: each imports the package first). It finds torch through the finders after it and wraps
    only the loader's ``exec_module``; the module's ``__loader__`` and ``__spec__.loader`` are the real loader."""

    def __init__(self, on_import: Callable[[], None]) -> None:
        self.on_import = on_import
        self._searching = False

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch" or self._searching:  # another hook of this kind, after it, asks the finders again
            return None
        self._searching = True
        try:
            return self._find(name, path, target)
        finally:
            self._searching = False

    def _find(self, name: str, path: Any, target: Any) -> Any:
        # Found through the finders after this one; it stays in place until torch's code runs (`_LoaderThen`): a
        # look that loads nothing (``importlib.util.find_spec("torch")``, as transformers asks at its import) took
        # it out, and the import of torch that followed was never seen (a run watched nothing, said as "imported
        # past the hook").
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            self.remove()
            return spec
        spec.loader = _LoaderThen(spec.loader, self.on_import, self.remove, self._again)
        return spec

    def _again(self) -> None:
        """torch's code raised (a broken install the program catches): the next import of torch is watched too."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)


class _LoaderThen:
    """``loader``, whose ``exec_module`` calls ``then()`` after the module's code has run (`TorchImport`)."""

    def __init__(self, loader: Any, then: Callable[[], None], first: Callable[[], None] = lambda: None,
                 failed: Callable[[], None] = lambda: None) -> None:
        self.loader, self.then, self.first, self.failed = loader, then, first, failed

    def create_module(self, spec: Any) -> Any:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: Any) -> None:
        self.first()  # once: the import of torch from now on is Python's own
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        try:
            self.loader.exec_module(module)
        except BaseException:
            self.failed()
            raise
        self.then()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
