"""MkDocs hook: let mkdocstrings find `ifgym` through its install.

The checkout folder is the package `ifgym` (setuptools maps it), whatever the folder's name, so griffe
cannot find it by name on disk. The `mkdocs` script's folder, first on `sys.path`, also holds the `ifgym`
console script, which griffe would take for a namespace package of that name; without that folder on the
path griffe finds no `ifgym` on disk and imports the installed package instead (`pip install -e .`).
"""

from __future__ import annotations

import sys
from pathlib import Path


def on_startup(**_) -> None:
    """Drop from `sys.path` every folder that holds a file named `ifgym` (the console script)."""
    sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "ifgym").is_file()]
