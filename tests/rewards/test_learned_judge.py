"""The checklist judge learned from StructFlowBench's verdicts: training, the judge, its weights, its audit.

The made-up items below stand in for the release's: a pattern a tiny model can learn in a second.
`HashingEmbedder` (a bag-of-words test double) stands in for MiniLM where the embedding blocks are trained.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from ifgym.core import ChecklistItem, TurnSpec
from ifgym.errors import ConfigError, DataFormatError
from ifgym.policies.embeddings import HashingEmbedder
from ifgym.rewards.structflow.learned import (
    FeatureInput,
    Featurizer,
    LearnedChecklistJudge,
    LinearModel,
)
from ifgym.rewards.structflow.scorer import StructFlowScorer
from ifgym.rewards.trl import ChecklistReward

TOPICS = ["volcanoes", "gardening", "chess", "bridges", "whales", "bread", "comets", "violins", "glaciers", "bees"]
QUESTION = "Does the response fully explain the topic?"
FINISHED = "Here is a full explanation of {t}, point by point, ending properly."
CUT_OFF = "Here is an explanation of {t}, point by point, and then the"


def _finished_or_cut(topics):
    """Finished replies are judged yes, replies cut off mid-sentence no (the pattern to learn)."""
    inputs, yes = [], []
    for t in topics:
        for template, label in ((FINISHED, True), (CUT_OFF, False)):
            inputs.append(FeatureInput(QUESTION, "Content Constraint", template.format(t=t), f"Explain {t}."))
            yes.append(label)
    return inputs, np.array(yes)


def _untrained(n_features, blocks):
    """All weights zero: P(yes) 0.5 for every item, so every item is yes at threshold 0.5."""
    zeros = np.zeros(n_features)
    return LinearModel(zeros, np.ones(n_features), zeros, 0.0, 0.5, tuple(blocks))


def test_a_tiny_model_learns_a_pattern_the_untrained_one_does_not(tmp_path):
    featurizer = Featurizer(("hand",))
    train_x, train_y = _finished_or_cut(TOPICS[:7])
    test_x, test_y = _finished_or_cut(TOPICS[7:])  # topics never trained on
    x, x_test = featurizer.matrix(train_x), featurizer.matrix(test_x)
    untrained = _untrained(x.shape[1], ("hand",))
    trained = LinearModel.fit(x, train_y, ("hand",), c=1.0)
    # untrained: yes to all 6 test items, so 3 of 6 right; trained: all 6
    assert ((untrained.p_yes(x_test) >= 0.5) == test_y).sum() == 3
    assert ((trained.p_yes(x_test) >= 0.5) == test_y).all()

    # saved, loaded, and judging through the StructFlow scorer: the model's items and the rules' items
    path = tmp_path / "weights.npz"
    trained.save(path)
    judge = LearnedChecklistJudge(path)
    assert np.allclose(LinearModel.load(path).p_yes(x_test), trained.p_yes(x_test), atol=1e-5)
    items = (
        ChecklistItem("q1", QUESTION, "Content Constraint"),
        ChecklistItem("q2", "Is the response limited to 5 words?", "Quantity Format Constraint"),
    )
    history = [{"role": "user", "content": "Explain comets."}]
    finished = StructFlowScorer(judge).score(FINISHED.format(t="comets"), TurnSpec(checklist=items), history)
    cut = StructFlowScorer(judge).score(CUT_OFF.format(t="comets"), TurnSpec(checklist=items), history)
    assert [v.label for v in finished.strict] == ["yes", "no"]  # the rule counts 11 words: no
    assert [v.label for v in cut.strict] == ["no", "no"]
    assert finished.strict[0].source == judge.source and judge.source.startswith("judge:learned-")
    assert finished.strict[1].source == "rule"
    assert judge.stats == {"calls": 2, "items": 2, "unknown": 0}  # the rule's item never reached the model


def test_the_embedding_blocks_learn_whether_the_reply_is_about_the_question():
    # cosine of question and reply (HashingEmbedder: shared words) -> yes; a reply about another topic -> no
    def items(topics):
        out, yes = [], []
        for k, t in enumerate(topics):
            other = topics[(k + 1) % len(topics)]
            for about, label in ((t, True), (other, False)):
                reply = f"{about} {about} facts about {about}"
                out.append(FeatureInput(f"Does the response talk about {t}?", "Content Constraint", reply))
                yes.append(label)
        return out, np.array(yes)

    featurizer = Featurizer(("cosines", "embeddings"), HashingEmbedder())
    train_x, train_y = items(TOPICS[:6])
    test_x, test_y = items(TOPICS[6:])
    x, x_test = featurizer.matrix(train_x), featurizer.matrix(test_x)
    assert x.shape[1] == 5 + 3 * 384
    trained = LinearModel.fit(x, train_y, ("cosines", "embeddings"), c=1.0)
    untrained = _untrained(x.shape[1], ("cosines", "embeddings"))
    assert ((untrained.p_yes(x_test) >= 0.5) == test_y).mean() == 0.5
    assert ((trained.p_yes(x_test) >= 0.5) == test_y).all()


def test_bad_weights_and_arguments_are_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        LearnedChecklistJudge(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(DataFormatError, match="bad.npz"):
        LearnedChecklistJudge(tmp_path / "bad.npz")
    featurizer = Featurizer(("hand",))
    inputs, yes = _finished_or_cut(TOPICS[:3])
    LinearModel.fit(featurizer.matrix(inputs), yes, ("hand",)).save(tmp_path / "w.npz")
    with pytest.raises(ConfigError, match="threshold"):
        LearnedChecklistJudge(tmp_path / "w.npz", threshold=1.5)
    judge = LearnedChecklistJudge(tmp_path / "w.npz")
    with pytest.raises(ConfigError, match="judge_golden=false"):
        judge.judge("reply", [ChecklistItem("q1", QUESTION, "Content Constraint")], golden="a reference")
    with pytest.raises(ConfigError, match="ChecklistItem"):
        judge.judge("reply", ["a question as a string"])
    with pytest.raises(ConfigError, match="feature blocks"):
        Featurizer(("words",))
    with pytest.raises(ConfigError, match="both answers"):
        LinearModel.fit(featurizer.matrix(inputs), np.ones(len(inputs), dtype=bool), ("hand",))


def test_as_a_trl_reward_it_scores_rows_and_survives_pickling(tmp_path):
    featurizer = Featurizer(("hand",))
    inputs, yes = _finished_or_cut(TOPICS)
    LinearModel.fit(featurizer.matrix(inputs), yes, ("hand",)).save(tmp_path / "w.npz")
    reward = ChecklistReward(LearnedChecklistJudge(tmp_path / "w.npz"))
    rows = json.dumps([ChecklistItem("q1", QUESTION, "Content Constraint").to_json()])
    prompts = [{"role": "user", "content": "Explain bees."}]
    completions = [FINISHED.format(t="bees"), CUT_OFF.format(t="bees")]
    assert reward(completions, checklist=[rows, rows], prompts=[prompts, prompts]) == [1.0, 0.0]
    again = pickle.loads(pickle.dumps(reward))
    assert again(completions, checklist=[rows, rows], prompts=[prompts, prompts]) == [1.0, 0.0]
