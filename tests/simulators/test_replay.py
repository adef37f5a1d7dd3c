"""ReplayUser: plays back an EvolIF dialogue file (tests/data/evolif_dialogue.jsonl)."""

import json

import numpy as np
import pytest
from support.paths import DATA

from ifgym.core.constraints import Constraint
from ifgym.core.evolif import from_evolif
from ifgym.errors import ConfigError, DataFormatError, IfgymError
from ifgym.simulators.evolif.replay import ReplayUser, load_evolif_dialogue

FIXTURE = DATA / "evolif_dialogue.jsonl"
RECORDS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]


def play(user):
    turns = [user.reset(np.random.default_rng(0))]
    while (turn := user.next([], [])) is not None:
        turns.append(turn)
    return turns


def test_replay_plays_every_line_then_ends():
    user = ReplayUser(FIXTURE)
    turns = play(user)
    assert len(turns) == len(RECORDS) == 7
    assert user.next([], []) is None  # stays at the end
    assert user.stats == {"turns": 7, "played": 7}
    for turn, record in zip(turns, RECORDS, strict=True):
        verified = record.get("user_query_verified")
        expected = verified if isinstance(verified, str) and verified.strip() else record["user_query"]
        assert turn.text == expected
        assert turn.spec.topic == str(record["active_topic"]) and turn.spec.move == "replay"
        assert list(turn.spec.constraints) == [from_evolif(i["id"], i["args"]) for i in record["instructions"]]
        assert turn.spec.meta["turn"] == record["turn"] and turn.spec.meta["style_id"] == "p-0031"
        json.dumps(turn.spec.to_json())  # JSON-serialisable


def test_replay_text_field_choice():
    turns = load_evolif_dialogue(FIXTURE)
    fields = [t.spec.meta["text_field"] for t in turns]
    # line 1: verified is "", line 5: verified is null, lines 3/6: no verified field
    assert fields == [
        "user_query",
        "user_query_verified",
        "user_query",
        "user_query_verified",
        "user_query",
        "user_query",
        "user_query_verified",
    ]


def test_replay_infers_the_change_against_the_topic_state():
    turns = load_evolif_dialogue(FIXTURE)
    changes = [(t.spec.change, t.spec.meta["changed_group"]) for t in turns]
    assert changes == [
        (None, None),  # first turn of a topic: no earlier state
        ("add", "keywords"),
        ("add", "format"),
        ("modify", "keywords"),  # hive 2 -> 3
        (None, None),  # a new topic
        ("add", "forbidden"),
        ("remove", "start_with"),  # back on topic 1207, compared with its state at line 4
    ]
    assert [t.spec.meta["line"] for t in turns] == [1, 2, 3, 4, 5, 7, 8]  # line 6 is blank


def test_replay_reset_restarts_and_ignores_the_rng():
    user = ReplayUser(FIXTURE)
    a = [t.text for t in play(user)]
    b = [t.text for t in play(user)]
    assert a == b
    assert user.reset(np.random.default_rng(123)).text == a[0]


def test_replay_misuse():
    user = ReplayUser(FIXTURE)
    with pytest.raises(IfgymError, match="before reset"):
        user.next([], [])
    with pytest.raises(ConfigError, match="takes no options"):
        user.reset(np.random.default_rng(0), {"topic_id": "1207"})


GOOD = {"turn": 1, "active_topic": 5, "user_query": "Write a poem.", "instructions": []}


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        # not JSON at all
        (["{turn: 1"], r":1: invalid JSON"),
        # a JSON list instead of an object, on line 2
        ([json.dumps(GOOD), "[1, 2]"], r":2: expected a JSON object"),
        # no usable text
        ([json.dumps({**GOOD, "user_query": ""})], r":1: field 'user_query'"),
        # topic missing
        ([json.dumps({k: v for k, v in GOOD.items() if k != "active_topic"})], r":1: missing field 'active_topic'"),
        # topic of the wrong type
        ([json.dumps({**GOOD, "active_topic": [5]})], r":1: field 'active_topic'"),
        # turn of the wrong type
        ([json.dumps({**GOOD, "turn": "one"})], r":1: field 'turn'"),
        # instructions not a list
        ([json.dumps({**GOOD, "instructions": {"id": "format"}})], r":1: field 'instructions'"),
        # an instruction without args
        ([json.dumps({**GOOD, "instructions": [{"id": "format"}]})], r":1: field 'instructions\[0\]'"),
        # an unknown EvolIF id gets the catalog's suggestion
        (
            [json.dumps({**GOOD, "instructions": [{"id": "formatt", "args": {"mode": "json"}}]})],
            r":1: field 'instructions\[0\]' \(id 'formatt'\).*Did you mean 'format'",
        ),
        # bad args name the argument
        (
            [json.dumps({**GOOD, "instructions": [{"id": "countableItems", "args": {"num": -2}}]})],
            r":1: field 'instructions\[0\]' \(id 'countableItems'\).*num",
        ),
        # an empty file
        ([""], "has no turns"),
    ],
)
def test_replay_errors_name_file_line_and_field(tmp_path, lines, fragment):
    path = tmp_path / "dialogue.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataFormatError, match=fragment) as err:
        ReplayUser(path)
    assert "dialogue.jsonl" in str(err.value)


def test_replay_missing_file():
    with pytest.raises(DataFormatError, match="no such file"):
        ReplayUser("/nonexistent/dialogue.jsonl")


def test_replay_accepts_string_topics_and_keeps_unicode(tmp_path):
    record = {
        "active_topic": "t-7",
        "user_query": "Écris un poème, s'il te plaît.",
        "instructions": [{"id": "endwith", "args": {"mode": "emoji", "value": "🤩"}, "description": ""}],
    }
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    turns = load_evolif_dialogue(path)
    assert turns[0].spec.topic == "t-7" and turns[0].text.startswith("Écris")
    assert turns[0].spec.constraints == (Constraint("end_with.emoji", {"emoji": "🤩"}),)
