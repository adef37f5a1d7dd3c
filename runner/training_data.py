"""`ifgym export`: training data (one schema: prompts, sft, preferences, turns) from runs' episodes files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

EXPORT_OPTIONS = {"min_reward": float, "margin": float, "pairs": str}


def export_data(args: list[str]) -> int:
    """`ifgym export SCHEMA EPISODES... OUT [KEY=VALUE ...]`: write one training-data schema, print the counts."""
    from ifgym.errors import ConfigError
    from ifgym.rewards.export import SCHEMAS, check_options, export
    from ifgym.runner.rollout import read_episodes

    positional = [a for a in args if "=" not in a]
    if len(positional) < 3:
        print(f"usage: ifgym export {{{','.join(SCHEMAS)}}} EPISODES.jsonl [MORE.jsonl ...] OUT.jsonl", file=sys.stderr)
        return 2
    schema, sources, out = positional[0], positional[1:-1], Path(positional[-1]).expanduser()
    options: dict[str, Any] = {}
    for item in (a for a in args if "=" in a):
        key, _, value = item.partition("=")
        if key not in EXPORT_OPTIONS:
            raise ConfigError(f"export: unknown option {key!r}; options: {', '.join(EXPORT_OPTIONS)}")
        try:
            options[key] = EXPORT_OPTIONS[key](value)
        except ValueError:
            raise ConfigError(f"export: {key} takes a number, got {value!r}") from None
    check_options(schema, options)
    if any(out.resolve() == Path(s).expanduser().resolve() for s in sources):
        raise ConfigError(f"export: the output {out} is one of the episode files; give another output file")
    episodes = []
    for source in sources:
        found = read_episodes(source)
        if not found:
            raise ConfigError(f"{source}: no episodes there (give the episodes.jsonl of a run)")
        episodes.extend(found)
    report = export(schema, episodes, out, **options)
    print(report.line(out))
    for warning in report.warnings:
        print(f"ifgym: warning: {warning}", file=sys.stderr)
    return 0
