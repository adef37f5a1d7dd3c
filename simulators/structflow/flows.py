"""StructFlow's structure templates: ifgym's own set, StructFlowBench's `template.json`, or any file in either format.

The flows themselves (relations, validation, turn names) are vocabulary: `ifgym.core.structflow`.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifgym.core.structflow import Edge, Flow, flow_from_json
from ifgym.errors import ConfigError, DataFormatError
from ifgym.simulators.assets_io import STRUCTFLOWBENCH_DIR, packaged_or_path

__all__ = ["TEMPLATE_SETS", "chain_flows", "load_templates", "templates_from_json"]

# Template sets that ship with ifgym, by the name `load_templates` / `templates=` accepts in place of a path.
TEMPLATE_SETS = {"structflowbench": STRUCTFLOWBENCH_DIR / "template.json"}


def templates_from_json(data: Any, source: str = "templates") -> tuple[Flow, ...]:
    """Structure templates from parsed JSON in either format, validated.

    ifgym's format: a list of objects `{"id", "description", "structure": [edges]}`.
    StructFlowBench's `template.json`: a list of edge lists; template k (0-based) gets the id
    `structflowbench-<k+1>`.
    """
    if not isinstance(data, list) or not data:
        raise DataFormatError(f"{source}: expected a non-empty JSON list of templates, got {type(data).__name__}")
    flows: list[Flow] = []
    seen: dict[str, int] = {}
    for k, entry in enumerate(data):
        where = f"{source}: template {k}"
        if isinstance(entry, list):  # StructFlowBench's format
            flow = flow_from_json(entry, where=where, id=f"structflowbench-{k + 1}")
        elif isinstance(entry, Mapping):
            extra = sorted(set(entry) - {"id", "description", "structure"})
            if extra:
                raise DataFormatError(f"{where}: unknown field(s) {extra}; allowed: id, description, structure")
            tid, text = entry.get("id"), entry.get("description", "")
            if not isinstance(tid, str) or not tid.strip():
                raise DataFormatError(f"{where}: field 'id' must be a non-empty string, got {tid!r}")
            if not isinstance(text, str):
                raise DataFormatError(f"{where}: field 'description' must be a string, got {text!r}")
            if "structure" not in entry:
                raise DataFormatError(f"{where}: missing field 'structure'")
            flow = flow_from_json(entry["structure"], where=f"{where} ({tid})", id=tid.strip(), description=text)
        else:
            raise DataFormatError(f"{where}: expected an object or a list of edges, got {type(entry).__name__}")
        if flow.id in seen:
            raise DataFormatError(f"{where}: id {flow.id!r} already used by template {seen[flow.id]}")
        seen[flow.id] = k
        flows.append(flow)
    return tuple(flows)


@functools.lru_cache(maxsize=8)
def _load_templates(path: str | None) -> tuple[Flow, ...]:
    if path is None:
        source = "ifgym/simulators/assets/structflow_templates.json"
        resource = importlib.resources.files("ifgym.simulators") / "assets" / "structflow_templates.json"
        try:
            text = resource.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataFormatError(f"{source} is missing from the installed package; reinstall ifgym") from None
    else:
        source = path
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataFormatError(f"{source}: no such file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    return templates_from_json(data, source)


def load_templates(path: str | Path | None = None) -> tuple[Flow, ...]:
    """Structure templates: ifgym's own set, a packaged set by name, or the file at `path` (either format).

    Packaged names: `TEMPLATE_SETS` ("structflowbench": StructFlowBench's template.json). Cached per path.
    """
    if path is None:
        return _load_templates(None)
    return _load_templates(str(packaged_or_path(path, TEMPLATE_SETS, "structure templates")))


def chain_flows(flows: Sequence[Flow]) -> Flow:
    """One flow that plays `flows` one after the other, each joined to the one before by an unrelated turn.

    The turns of flow j are renumbered after those of flows 0..j-1; the first turn of every flow after
    the first is `unrelatedness` to the last turn before it (a fresh topic). The id joins the ids with "+".
    """
    if not flows:
        raise ConfigError("chain_flows needs at least one flow")
    edges: list[Edge] = []
    offset = 0
    for j, flow in enumerate(flows):
        if j:
            edges.append(Edge("unrelatedness", (offset - 1,), (offset,)))
        edges.extend(
            Edge(e.relation, tuple(s + offset for s in e.sources), tuple(t + offset for t in e.targets))
            for e in flow.edges
        )
        offset += flow.n_turns
    if len(flows) == 1:
        return flows[0]
    return Flow(offset, tuple(edges), id="+".join(f.id or "flow" for f in flows), description="chained templates")
