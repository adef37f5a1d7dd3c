"""ConstraintReward (TRL reward_funcs signature): EvolIF's rule constraints."""

from __future__ import annotations

import json
import pickle

import pytest

from ifgym.errors import ConfigError, ConstraintParamsError, DataFormatError, UnknownNameError
from ifgym.rewards.trl import ConstraintReward

SHORT = {"id": "length.words", "params": {"relation": "less_than", "n": 5}}
LOWER = {"id": "case.lower", "params": {}}
JSON_FORMAT = {"id": "format.json", "params": {}}
HAPPY = {"id": "emotion.tone", "params": {"emotion": "happy"}}


@pytest.mark.parametrize(
    ("completion", "constraints", "mode", "loose", "expected"),
    [
        # both hold
        ("hello there friend", [SHORT, LOWER], "fraction", False, 1.0),
        # capital H breaks case.lower: 1 of 2
        ("Hello there friend", [SHORT, LOWER], "fraction", False, 0.5),
        # all-or-nothing: one failure is 0
        ("Hello there friend", [SHORT, LOWER], "all", False, 0.0),
        ("hello there friend", [SHORT, LOWER], "all", False, 1.0),
        # six words and a capital: 0 of 2
        ("Hello there my dear old friend", [SHORT, LOWER], "fraction", False, 0.0),
        # the judged constraint is skipped: scored on the rule one only
        ("hello", [SHORT, HAPPY], "fraction", False, 1.0),
        # only judged constraints: not applicable -> None
        ("hello", [HAPPY], "fraction", False, None),
        # no constraints at all: None
        ("hello", [], "fraction", False, None),
        # a column value given as a JSON string
        ("hello", json.dumps([SHORT, LOWER]), "fraction", False, 1.0),
        # a conversational completion: the last assistant message counts
        (
            [{"role": "assistant", "content": "Hello There"}, {"role": "assistant", "content": "hi"}],
            [LOWER],
            "fraction",
            False,
            1.0,
        ),
        # TRL-style message without a role
        ([{"content": "hi"}], [LOWER], "fraction", False, 1.0),
        # JSON in a Markdown fence: strict no, loose yes (IFEval-style loose check)
        ('```json\n{"a": 1}\n```', [JSON_FORMAT], "fraction", False, 0.0),
        ('```json\n{"a": 1}\n```', [JSON_FORMAT], "fraction", True, 1.0),
    ],
)
def test_reward_table(completion, constraints, mode, loose, expected):
    reward = ConstraintReward(loose=loose, mode=mode)
    assert reward([completion], constraints=[constraints]) == [expected]


def test_batch_pairs_completions_with_their_own_row():
    reward = ConstraintReward()
    out = reward(
        ["hello", "HELLO", "hello"],
        constraints=[[LOWER], [LOWER], [HAPPY]],
        prompts=["a", "b", "c"],  # other TRL columns are ignored
        trainer_state=None,
    )
    assert out == [1.0, 0.0, None]


def test_pickle_round_trip():
    reward = ConstraintReward(loose=True, mode="all")
    again = pickle.loads(pickle.dumps(reward))
    assert again.__name__ == reward.__name__ == "ifgym_constraints_all_loose"
    batch = (["hello there", "Hello there"], [[SHORT, LOWER], [SHORT, LOWER]])
    assert again(batch[0], constraints=batch[1]) == reward(batch[0], constraints=batch[1]) == [1.0, 0.0]


def test_name_for_logging():
    assert ConstraintReward().__name__ == "ifgym_constraints_fraction"


def test_missing_column_is_a_clear_error():
    with pytest.raises(DataFormatError, match="dataset column 'constraints'.*'prompts'"):
        ConstraintReward()(["hello"], prompts=["hi"])


@pytest.mark.parametrize(
    ("completions", "column", "message"),
    [
        # one constraints entry short
        (["a", "b"], [[LOWER]], "2 completions but 1"),
        # a whole-batch string instead of one entry per completion
        (["a"], json.dumps([LOWER]), "one entry per completion"),
        # broken JSON string in a row
        (["a"], ["[{'id': 'case.lower'"], "not valid JSON"),
        # a row that is not a list
        (["a"], [{"id": "case.lower"}], "must be a list"),
        # a conversation without an assistant message
        ([[{"role": "user", "content": "hi"}]], [[LOWER]], "no assistant message"),
        # neither text nor messages
        ([42], [[LOWER]], "expected a str or a list of chat messages"),
    ],
)
def test_bad_input_is_a_clear_error(completions, column, message):
    with pytest.raises(DataFormatError, match=message):
        ConstraintReward()(completions, constraints=column)


def test_unknown_constraint_id_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="Did you mean 'case.lower'"):
        ConstraintReward()(["hi"], constraints=[[{"id": "case.lowr", "params": {}}]])


def test_bad_params_name_the_field():
    with pytest.raises(ConstraintParamsError, match="relation"):
        ConstraintReward()(["hi"], constraints=[[{"id": "length.words", "params": {"relation": "about", "n": 3}}]])


def test_bad_mode_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="Did you mean 'fraction'"):
        ConstraintReward(mode="fractoin")


def test_evolif_semantics_scores_as_evolifs_evaluator():
    fenced = '```json\n{"a": 1}\n```'  # EvolIF strips one enclosing fence; ifgym's strict reading does not
    evolif = ConstraintReward(semantics="evolif")
    assert evolif([fenced], constraints=[[JSON_FORMAT]]) == [1.0]
    assert ConstraintReward()([fenced], constraints=[[JSON_FORMAT]]) == [0.0]
    assert pickle.loads(pickle.dumps(evolif)).__name__ == "ifgym_constraints_fraction_evolif"
    with pytest.raises(UnknownNameError, match="Did you mean 'evolif'"):
        ConstraintReward(semantics="evolf")
    with pytest.raises(ConfigError, match="one reading"):
        ConstraintReward(loose=True, semantics="evolif")
