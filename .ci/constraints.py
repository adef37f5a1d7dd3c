"""Print the exact versions of everything ifgym and the given extras pull, as installed here: constraints.txt.

    python .ci/constraints.py local,dev,embed,… > constraints.txt   (`make constraints`)

`pip freeze` filtered to the dependency closure of `ifgym[EXTRAS]` (markers evaluated for this machine),
torch included (pulled by the embed and train extras), ifgym itself and anything installed by hand left out.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version


def closure(root: str, extras: set[str]) -> dict[str, str]:
    """Installed name -> version of every distribution `root[extras]` requires, directly or not."""
    found: dict[str, str] = {}
    todo = [(root, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            sys.exit(f"{name} is required but not installed: install the extras first (make setup)")
        if canonicalize_name(name) != canonicalize_name(root):
            # the public version: torch==2.13.0 matches the CPU build 2.13.0+cpu, and is found on every index
            found[canonicalize_name(dist.metadata["Name"])] = Version(dist.version).public
        for line in dist.requires or []:
            requirement = Requirement(line)
            environments = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(env) for env in environments):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return found


def main() -> None:
    """Print the constraints of the extras named in the first argument (comma-separated)."""
    extras = {e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e}
    pins = closure("ifgym", extras)
    print("# The exact set ifgym's tests pass with: pip install -c constraints.txt -e '.[EXTRAS]'")
    print(f"# Written by `make constraints` (.ci/constraints.py {','.join(sorted(extras))}) from the working .venv.")
    for name in sorted(pins):
        print(f"{name}=={pins[name]}")


if __name__ == "__main__":
    main()
