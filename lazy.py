"""Submodules that load on first attribute access (PEP 562), for the root package and each room's `__init__`.

A root module, so that a room's `__init__` never imports the root package (`tests/test_imports.py`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from types import ModuleType

__all__ = ["lazy_submodules"]


def lazy_submodules(package: str, path: Iterable[str]) -> Callable[[str], ModuleType]:
    """A module-level `__getattr__` for `package` that imports its submodules on first access (PEP 562)."""
    names = frozenset(m.name for m in pkgutil.iter_modules(list(path)))

    def __getattr__(name: str) -> ModuleType:
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
