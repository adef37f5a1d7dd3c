"""`ifgym flexbench-dimensions`: an SOP's FlexBench dimension file built with a model, for review."""

from __future__ import annotations

import sys
from pathlib import Path


def flexbench_dimensions(args: list[str]) -> int:
    """`ifgym flexbench-dimensions SOP OUT [KEY=VALUE ...]`: run the dimension pipeline and save the file."""
    import yaml

    from ifgym.errors import ConfigError
    from ifgym.llm import make_client
    from ifgym.rewards.flexbench import build_dimensions
    from ifgym.simulators.flexbench import load_sop

    if len(args) < 2 or any("=" not in a for a in args[2:]):
        print(
            "usage: ifgym flexbench-dimensions SOP OUT.dimensions.json [pipeline=ifgym|paper] [KEY=VALUE ...]",
            file=sys.stderr,
        )
        return 2
    settings = {}
    for item in args[2:]:
        key, _, value = item.partition("=")
        if not key:
            raise ConfigError(f"flexbench-dimensions: {item!r} is not KEY=VALUE")
        settings[key] = yaml.safe_load(value) if value else None  # typed like a Hydra override
    pipeline = settings.pop("pipeline", "ifgym")  # the rest configure the model
    sop = load_sop(args[0])
    dims = build_dimensions(
        sop.instruction,
        make_client(settings, "judge"),
        sop_name=sop.name,
        opening_line=sop.opening_line,
        pipeline=pipeline,
    )
    out = Path(args[1]).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    dims.save(out)
    kinds = [d.kind for d in dims.dimensions]
    print(
        f"wrote {len(kinds)} dimensions ({kinds.count('base')} base actions, {kinds.count('branch')} branches, "
        f'{kinds.count("always")} always-on rules) to {out}; review them, then set "reviewed": true'
    )
    return 0
