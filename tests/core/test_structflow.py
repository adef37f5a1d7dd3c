"""Structural flows: the six relations, flow validation, structural checklist items, structure templates."""

from __future__ import annotations

import json
import re

import pytest
from support.paths import REPO

from ifgym.core.structflow import FLOW_RELATIONS as RELATIONS
from ifgym.core.structflow import (
    STRUCTURAL_TYPES,
    TYPE_WEIGHTS,
    Edge,
    Flow,
    flow_from_json,
    parse_turn_name,
    relation,
    turn_name,
)
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.simulators.structflow.flows import TEMPLATE_SETS, load_templates, templates_from_json


@pytest.fixture
def template_json():
    """StructFlowBench's template.json as it ships in the package."""
    return TEMPLATE_SETS["structflowbench"]


def edges(*triples):
    """Edges from (relation, sources, targets) with 1-based turn numbers, as a reader would write them."""
    return tuple(Edge(r, tuple(s - 1 for s in src), tuple(t - 1 for t in tgt)) for r, src, tgt in triples)


def test_six_relations_with_definitions():
    assert list(RELATIONS) == ["follow-up", "refinement", "recall", "expansion", "summary", "unrelatedness"]
    assert all(len(r.definition) > 40 for r in RELATIONS.values())
    # every relation but unrelatedness adds a checklist item, and those are the benchmark's structural types
    assert {r.name for r in RELATIONS.values() if r.structural} == set(STRUCTURAL_TYPES)
    assert all(TYPE_WEIGHTS[t] == 2.0 for t in STRUCTURAL_TYPES)


def test_unknown_relation_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="Did you mean 'follow-up'"):
        relation("folow-up")


@pytest.mark.parametrize(
    "n, triples",
    [
        (1, ()),  # a one-turn dialogue has no edges
        (2, [("follow-up", [1], [2])]),
        (3, [("refinement", [1], [2]), ("recall", [1], [3])]),  # recall two turns back
        (4, [("follow-up", [1], [2]), ("follow-up", [2], [3]), ("recall", [1], [4])]),  # recall three back
        (3, [("expansion", [1], [2, 3])]),  # fan-out to two targets
        (4, [("expansion", [1], [2, 3]), ("summary", [1, 2, 3], [4])]),  # fan-out then fan-in
        (3, [("unrelatedness", [1], [2]), ("summary", [1, 2], [3])]),  # summary of unrelated turns
        (3, [("follow-up", [1], [2]), ("unrelatedness", [1], [3])]),  # unrelated may name any earlier turn
    ],
)
def test_valid_flows(n, triples):
    flow = Flow(n, edges(*triples))
    assert flow.turns == tuple(f"c{i}" for i in range(1, n + 1))
    assert flow.relation_of(0) is None and all(flow.relation_of(k) for k in range(1, n))


@pytest.mark.parametrize(
    "n, triples, fragment",
    [
        (2, [("follow-up", [2], [1])], "point backwards"),  # an edge pointing forwards
        (2, [("follow-up", [1], [1]), ("follow-up", [1], [2])], "point backwards"),  # a turn relating to itself
        (3, [("follow-up", [1], [2]), ("summary", [2], [3])], "at least 2 source"),  # summary needs >= 2 sources
        (2, [("expansion", [1], [2])], "at least 2 target"),  # expansion fans out to >= 2 turns
        (3, [("recall", [1], [3]), ("follow-up", [1, 2], [2])], "exactly 1 source"),  # follow-up has one source
        (3, [("follow-up", [1], [2]), ("follow-up", [1], [3])], "right before"),  # follow-up skipping a turn
        (3, [("follow-up", [1], [2]), ("refinement", [1], [3])], "right before"),  # refinement skipping a turn
        (2, [("recall", [1], [2])], "at least two turns"),  # a recall of the previous turn is a follow-up
        (
            3,
            [("follow-up", [1], [2]), ("follow-up", [2], [3]), ("recall", [1], [3])],
            "already has an incoming edge",
        ),  # one relation per turn
        (3, [("follow-up", [1], [2])], "c3 have no incoming edge"),  # a turn without a relation
        (2, [("folow-up", [1], [2])], "Did you mean 'follow-up'"),  # a typo in the relation
        (2, [("follow-up", [1], [5])], "outside c1..c2"),  # a turn beyond the dialogue
        (4, [("summary", [1, 1], [2]), ("follow-up", [2], [3])], "lists a turn twice"),  # a duplicated source
        (0, [], "n_turns >= 1"),  # an empty dialogue
    ],
)
def test_invalid_flows_name_the_edge_and_turn(n, triples, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Flow(n, edges(*triples))


@pytest.mark.parametrize(
    "structure, fragment",
    [
        ({"source": "c1"}, "expected a list of edges"),  # not a list
        (["c1 -> c2"], "edge 0 must be an object"),  # an edge as a string
        ([{"source": "c1", "target": "c2"}], "missing field(s) ['relation']"),  # no relation
        ([{"source": "turn1", "target": "c2", "relation": "follow-up"}], "'turn1' is not of the form"),  # bad name
        ([{"source": "c0", "target": "c1", "relation": "follow-up"}], "'c0' is not of the form"),  # turns count from 1
        ([{"source": [], "target": "c2", "relation": "follow-up"}], "non-empty list"),  # no source
        ([{"source": "c2", "target": "c1", "relation": "follow-up"}], "edge 0 ('follow-up')"),  # names the edge
    ],
)
def test_flow_from_json_errors_name_where(structure, fragment):
    with pytest.raises(DataFormatError, match=r"^record 7: .*" + re.escape(fragment)):
        flow_from_json(structure, where="record 7")


def test_flow_from_json_accepts_names_or_lists_and_round_trips():
    raw = [
        {"source": "c1", "target": ["c2", "c3"], "relation": "expansion"},
        {"source": ["c1", "c2", "c3"], "target": "c4", "relation": "summary"},
    ]
    flow = flow_from_json(raw)
    assert flow.n_turns == 4
    assert flow.sources_of(3) == (0, 1, 2) and flow.relation_of(2) == "expansion"
    assert flow_from_json(flow.to_json()) == flow
    assert flow_from_json([], 1).n_turns == 1  # an empty structure is a one-turn dialogue


def test_structural_items_one_per_structural_target():
    flow = Flow(5, edges(("expansion", [1], [2, 3]), ("unrelatedness", [3], [4]), ("summary", [2, 3], [5])))
    assert flow.structural_items(0) == ()  # the first turn relates to nothing
    assert flow.structural_items(3) == ()  # unrelatedness adds no item
    (c2,) = flow.structural_items(1)
    (c3,) = flow.structural_items(2)
    assert c2.type == c3.type == "expansion" and c2.kind == "structural" and c2.weight == 2.0
    assert "c1" in c2.question and "c2" in c2.question
    (c5,) = flow.structural_items(4, id_prefix="d/")
    assert c5.id == "d/c5/summary" and c5.meta["sources"] == ["c2", "c3"] and "c2 and c3" in c5.question


def test_turn_names():
    assert [turn_name(i) for i in range(3)] == ["c1", "c2", "c3"]
    assert parse_turn_name(" c12 ") == 11
    with pytest.raises(ConfigError):
        parse_turn_name(3)


def test_packaged_templates_are_ours_and_cover_every_relation():
    templates = load_templates()
    assert len(templates) >= 10
    assert len({t.id for t in templates}) == len(templates)
    assert all(t.description and not t.id.startswith("structflowbench") for t in templates)
    used = {e.relation for t in templates for e in t.edges}
    assert used == set(RELATIONS)
    # the benchmark's template.json is read from the user's copy, never shipped with the package
    assets = REPO / "simulators" / "assets"
    assert not (assets / "template.json").exists()


def test_reads_structflowbench_template_format(template_json):
    templates = load_templates(template_json)
    raw = json.loads(template_json.read_text())
    assert len(templates) == len(raw) == 14
    assert templates[0].id == "structflowbench-1"
    assert [len(t.edges) for t in templates] == [len(r) for r in raw]
    # the last template: c1 fans out to c2..c4, which c5 summarizes
    last = templates[-1]
    assert last.n_turns == 5 and last.relation_of(4) == "summary" and last.sources_of(4) == (0, 1, 2, 3)


@pytest.mark.parametrize(
    "data, fragment",
    [
        ([], "non-empty JSON list"),  # nothing in the file
        ([{"id": "a", "structure": []}, {"id": "a", "structure": []}], "'a' already used"),  # duplicate id
        ([{"id": "a", "structure": [], "turns": 3}], "unknown field(s) ['turns']"),  # a field we do not read
        ([{"id": "a"}], "missing field 'structure'"),  # no structure
        ([{"structure": []}], "field 'id'"),  # no id
        ([{"id": "a", "structure": [{"source": "c1", "target": "c2", "relation": "summary"}]}], "template 0 (a)"),
        ([42], "expected an object or a list of edges"),  # neither format
    ],
)
def test_template_errors(data, fragment):
    with pytest.raises(DataFormatError, match=re.escape(fragment)):
        templates_from_json(data, "my_templates.json")


def test_missing_template_file(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        load_templates(tmp_path / "nope.json")
