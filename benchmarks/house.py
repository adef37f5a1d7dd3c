"""The house walked: which files and rooms one turn and one run pass through (issue 22's measures).

    python benchmarks/house.py

Traces Python calls (`sys.setprofile`) into the package's own files during: one EvolIF turn and one
FlexBench turn (`env.step` with a scripted reply and the rule judge, after a warm-up step), and one
`ifgym eval` of one scripted EvolIF episode (the command in this process). For each it prints the files
and rooms entered, the changes of room along the calls (a call into another room, or a return back out of
it), and the entries into `cli.py` after the first. A room is a top-level folder (`envs`, `rewards`, …) or,
for a module at the root, the module.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))  # the checkout holding this file, whatever ifgym is installed

import ifgym  # noqa: E402

PACKAGE = Path(ifgym.__file__).resolve().parent


def room_of(path: Path) -> str:
    """The room of a file of the package: its top-level folder, or the module itself at the root."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def walk(action: Callable[[], object]) -> dict[str, object]:
    """Run `action` under a profiler and count the package files, rooms and room changes its calls pass."""
    stack: list[str] = []  # the room of each open frame of the package (None-rooms dropped)
    files: set[str] = set()
    rooms: set[str] = set()
    changes = 0
    cli_entries = 0
    last_room: str | None = None
    cache: dict[str, str | None] = {}

    def room(filename: str) -> str | None:
        if filename not in cache:
            path = Path(filename).resolve()
            top = path.relative_to(PACKAGE).parts[0] if PACKAGE in path.parents else ".venv"
            inside = top not in (".venv", "tests", "benchmarks")
            cache[filename] = room_of(path) if inside and path.suffix == ".py" else None
        return cache[filename]

    def profile(frame, event, _arg):
        nonlocal changes, cli_entries, last_room
        if event not in ("call", "return"):
            return
        here = room(frame.f_code.co_filename)
        if here is None:
            return
        if event == "call":
            files.add(frame.f_code.co_filename)
            rooms.add(here)
            if here != last_room and last_room is not None:
                changes += 1
                cli_entries += here == "cli"
            stack.append(here)
            last_room = here
        else:
            if stack:
                stack.pop()
            back = stack[-1] if stack else None
            if back is not None and back != last_room:
                changes += 1
                cli_entries += back == "cli"
                last_room = back

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return {
        "files": len(files),
        "rooms": sorted(rooms),
        "changes of room": changes,
        "re-entries of cli.py": cli_entries,
    }


def one_turn(env_id: str, **kwargs) -> dict[str, object]:
    """One `env.step` after a warm-up step."""
    import gymnasium as gym

    import ifgym  # noqa: F401  (registers the envs)

    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    env.step("A first reply, to warm the caches.")
    return walk(lambda: env.step("A reply about it, in a few words."))


def one_run() -> dict[str, object]:
    """One `ifgym eval` of one scripted EvolIF episode, in this process."""
    from ifgym import cli

    folder = tempfile.mkdtemp(prefix="ifgym-house-")
    argv = ["eval", "episodes=1", "env.max_turns=3", "policy=scripted", "logger=none", f"hydra.run.dir={folder}"]
    cli.main(argv)  # warm-up: imports and first-call caches are not the path
    folder2 = tempfile.mkdtemp(prefix="ifgym-house-")
    return walk(lambda: cli.main([*argv[:-1], f"hydra.run.dir={folder2}"]))


def main() -> None:
    """Print the three walks."""
    os.environ.setdefault("WANDB_MODE", "disabled")
    for name, walked in (
        ("one EvolIF turn", lambda: one_turn("ifgym/EvolIF-v1", judge="rules")),
        ("one FlexBench turn", lambda: one_turn("ifgym/FlexBench-v0", judge="rules")),
        ("one ifgym eval (1 episode, 3 turns)", one_run),
    ):
        print(f"{name}: {walked()}")


if __name__ == "__main__":
    main()
