"""benchmarks/build_judge_train.py: the learned judge's data, rebuilt byte for byte from a release's git history.

The release here is made up (a git repository created by the test, shaped as StructFlowBench's):
8 dialogues of 2 turns, each turn with 2 checklist items, and an evaluation file per model.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from support.paths import REPO

spec = importlib.util.spec_from_file_location("bench_build_judge_train", REPO / "benchmarks" / "build_judge_train.py")
builder = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = builder
spec.loader.exec_module(builder)

N_DIALOGUES = 8
MODELS = (*builder.MODELS, *builder.HELD_OUT)


def _git(repo, *args):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = "2025-01-01T00:00:00"
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def _turn(d, t):
    return {
        "name": f"c{t + 1}",
        "user prompt": f"Dialogue {d}, request {t}: write about topic {d}.",
        "assistant answer": f"Golden answer {d}.{t}.",
        "constraints": [
            {"type": "Content Constraint", "content": f"Does the response discuss topic {d}?"},
            {"type": "follow-up" if t else "Style Constraint", "content": f"Question two of {d}.{t}?"},
        ],
    }


def _release(repo, na_at=None):
    """A made-up release: StructFlowBench.json, LICENSE and one evaluation file per model; `na_at` = (model, d, t)."""
    repo.mkdir()
    _git(repo, "init", "-q")
    dataset = [
        {
            "conv_task": f"Task {d % 3}: something",
            "structure": [{"source": "c1", "target": "c2", "relation": "follow-up"}],
            "user_type": d % 2,
            "whole_conv": [_turn(d, t) for t in range(2)],
        }
        for d in range(N_DIALOGUES)
    ]
    (repo / "StructFlowBench.json").write_text(json.dumps(dataset))
    (repo / "LICENSE").write_text("MIT License (made up)\n")
    folder = repo / "evaluation" / "output" / "evaluation"
    folder.mkdir(parents=True)
    for m, model in enumerate(MODELS):
        records = json.loads(json.dumps(dataset))
        for d, record in enumerate(records):
            for t, turn in enumerate(record["whole_conv"]):
                turn["response"] = f"{model} replies to {d}.{t}"
                answers = ["Yes", "No" if (m + d + t) % 3 == 0 else "Yes"]
                if na_at == (model, d, t):
                    answers[0] = "N/A"
                turn["judge result"] = [{"judgement": a, "reason": "made up"} for a in answers]
        (folder / f"{model}_evaluate.json").write_text(json.dumps(records))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "made-up release")
    return _git(repo, "rev-parse", "HEAD")


def test_the_data_is_rebuilt_byte_for_byte_from_the_commit_whatever_the_working_tree(tmp_path):
    part = builder.dialogue_splits(N_DIALOGUES)
    fit_dialogue = next(d for d in range(N_DIALOGUES) if part[d] == "fit")
    repo = tmp_path / "release"
    commit = _release(repo, na_at=(builder.MODELS[0], fit_dialogue, 1))
    first = builder.write(builder.build(repo, commit), tmp_path / "a.json")
    # a later commit and a dirty working tree change nothing read at the first commit
    (repo / "StructFlowBench.json").write_text("[]")
    _git(repo, "commit", "-q", "-am", "emptied")
    (repo / "LICENSE").write_text("changed, not committed")
    second = builder.write(builder.build(repo, commit), tmp_path / "b.json")
    assert first == second
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["source"]["commit"] == commit and data["schema"] == "ifgym.judge_train/v1"

    # 8 dialogues: the suite's split gives 4 for evaluation; of the 4 for training, round(4 * 0.25) = 1 tunes
    assert sorted(part.values()).count("eval") == 4 and sorted(part.values()).count("tune") == 1
    # turns: 10 models x 3 fit dialogues x 2 turns, less the one with an "N/A"; 10 x 1 x 2 tune;
    # 10 x 4 x 2 on the evaluation dialogues; the 3 held-out models on those only: 3 x 4 x 2
    assert builder.counts(data)["fit"][0] == 59 and data["dropped_turns"] == 1
    assert [builder.counts(data)[s][0] for s in ("tune", "seen_models", "held_out_models")] == [20, 80, 24]
    for turn in data["turns"]:
        held_out = turn["model"] in builder.HELD_OUT
        assert (turn["split"] == "held_out_models") == held_out  # never trained or tuned on
        assert data["dialogues"][str(turn["dialogue"])]["part"] == (
            "eval" if turn["split"] in ("seen_models", "held_out_models") else turn["split"]
        )
        assert turn["reply"] == f"{turn['model']} replies to {turn['dialogue']}.{turn['turn']}"
    # the verdicts as the release gave them, lower-cased: (m + d + t) % 3 == 0 -> the second item is "no"
    m = MODELS.index("gpt4o")
    some = next(t for t in data["turns"] if t["model"] == "gpt4o")
    expected_no = (m + some["dialogue"] + some["turn"]) % 3 == 0
    assert some["verdicts"] == ["yes", "no" if expected_no else "yes"]
    # a dialogue's turns carry its relations, as the real suite's builder reads them
    assert [t["relation"] for t in data["dialogues"]["0"]["turns"]] == ["first_turn", "follow-up"]


def test_a_release_whose_replies_do_not_match_the_dataset_is_refused(tmp_path):
    repo = tmp_path / "release"
    _release(repo)
    path = repo / "evaluation" / "output" / "evaluation" / f"{builder.MODELS[2]}_evaluate.json"
    records = json.loads(path.read_text())
    records[3]["whole_conv"][1]["user prompt"] = "another request"
    path.write_text(json.dumps(records))
    _git(repo, "commit", "-q", "-am", "edited")
    with pytest.raises(SystemExit, match=f"{builder.MODELS[2]} record 3 turn 1: differs"):
        builder.build(repo, _git(repo, "rev-parse", "HEAD"))


def test_evaluation_dialogues_are_exactly_the_real_suites_test_dialogues():
    # the shipped suite (its own builder, its own seed) against this builder's split of the 155 dialogues
    suite = json.loads((REPO / "rewards" / "assets" / "structflow_real" / "suite.json").read_text())
    part = builder.dialogue_splits(155)
    assert len(suite["dialogues"]) > 60
    for d, dialogue in suite["dialogues"].items():
        assert (part[int(d)] == "eval") == (dialogue["split"] == "test"), d
    assert sum(p == "eval" for p in part.values()) == 155 - 155 // 2
