"""`ifgym export`: the four schemas, each loaded back with `datasets`; preference pairs; the unscorable-row warning."""

from __future__ import annotations

import json

import datasets
import gymnasium as gym
import pytest
from support.flexbench_agents import AGENTS, Policy

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import main
from ifgym.core import Episode, TurnRecord, TurnSpec, Verdict
from ifgym.core.constraints import Constraint
from ifgym.errors import ConfigError
from ifgym.policies import ScriptedPolicy
from ifgym.rewards.export import SCHEMAS, export, observations, preference_rows, sft_rows
from ifgym.runner.rollout import rollout

LOWER = Constraint("case.lower", {})


def turn(index: int, user: str, reply: str, reward: float, defined: bool = True) -> TurnRecord:
    label = "yes" if reward == 1.0 else "no"
    info = {"reward_defined": defined}
    return TurnRecord(index, user, TurnSpec((LOWER,)), reply, [Verdict(label)], [Verdict(label)], reward, 3, info)


def ep(name: str, seed: int, *turns: TurnRecord, reason: str = "max_turns") -> Episode:
    return Episode(name, "ifgym/EvolIF-v1", seed, list(turns), reason, system_prompt="Be brief.")


@pytest.fixture(scope="module")
def played() -> list[Episode]:
    """Real episodes of the three envs (scripted policies), StructFlowBench's replay among them."""
    episodes = [
        rollout(gym.make("ifgym/EvolIF-v1", max_turns=4), ScriptedPolicy(["sure thing.", "OK"]), seed=s)
        for s in range(2)
    ]
    episodes.append(rollout(gym.make("ifgym/StructFlow-v0"), ScriptedPolicy(["Sure. A short answer."]), seed=0))
    replay = gym.make("ifgym/StructFlow-v0", dataset="structflowbench", allow_unjudged=True)
    episodes.append(rollout(replay, ScriptedPolicy(["ok"]), seed=0))
    episodes.append(rollout(gym.make("ifgym/FlexBench-v0"), Policy(AGENTS["merchant_onboarding"]()), seed=0))
    return episodes


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_schema_loads_with_datasets(tmp_path, played, schema):
    path = tmp_path / f"{schema}.jsonl"
    options = {"min_reward": 0.0} if schema == "sft" else {}
    if schema == "preferences":  # two policies over the same seeds
        other = ScriptedPolicy(["SURE THING, HERE IS A MUCH LONGER ANSWER - " * 30])
        played = played + [rollout(gym.make("ifgym/EvolIF-v1", max_turns=4), other, seed=s) for s in range(2)]
    report = export(schema, played, path, **options)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert report.rows == len(rows) > 0
    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert loaded.num_rows == len(rows)
    assert loaded.to_list() == rows  # nothing widened, padded or lost on the way in
    expected = {
        "prompts": {"prompt", "scorer", "constraints", "checklist", "dimensions", "reply", "reward", "turn"},
        "sft": {"messages", "reward", "env_id", "seed", "turn"},
        "preferences": {"prompt", "chosen", "rejected", "chosen_reward", "rejected_reward"},
        "turns": {"user", "reply", "reward", "verdicts", "loose_verdicts", "patience", "done_reason", "last"},
    }[schema]
    assert expected <= set(loaded.column_names)


def test_prompts_are_what_the_policy_saw(played):
    flex = next(e for e in played if e.env_id == "ifgym/FlexBench-v0")
    first, second = observations(flex)[:2]
    # the SOP, the scripted opening line, then the caller
    assert [m["role"] for m in first] == ["system", "assistant", "user"]
    assert second[3] == {"role": "assistant", "content": flex.turns[0].reply}
    replay = next(e for e in played if e.meta.get("dialogue", {}).get("context") == "golden")
    # golden context: the reference answer, not the policy's "ok", is the history
    kept = observations(replay)[1][-2]
    assert kept["role"] == "assistant" and kept["content"] == replay.turns[0].spec.meta["golden_answer"] != "ok"


def test_sft_keeps_passing_turns_only():
    episodes = [ep("a", 0, turn(0, "hi", "hello", 1.0), turn(1, "more", "MORE", 0.0), turn(2, "x", "", 0.0, False))]
    rows, report = sft_rows(episodes)
    assert [r["messages"][-1]["content"] for r in rows] == ["hello"]
    assert rows[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert report.counts == {"below_min_reward": 1, "reward_undefined": 1}
    assert sft_rows(episodes, min_reward=0.0)[1].rows == 2


def test_preference_pairs_margin_ties_and_counts():
    # four runs over seed 0: turn 0's prompt is the same in all of them
    runs = [
        ep("a", 0, turn(0, "hi", "hello", 1.0)),
        ep("b", 0, turn(0, "hi", "HELLO", 0.0)),
        ep("c", 0, turn(0, "hi", "Hello", 0.0)),  # ties with b
        ep("d", 0, turn(0, "hi", "hello", 1.0)),  # the same text as a: one reply
        ep("e", 1, turn(0, "bye", "bye", 1.0)),  # another prompt, a single reply
    ]
    rows, report = preference_rows(runs, margin=0.5)
    assert [(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows] == [
        ("hello", "HELLO"),
        ("hello", "Hello"),
    ]
    assert rows[0]["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert (rows[0]["chosen_reward"], rows[0]["rejected_reward"]) == (1.0, 0.0)
    assert report.counts == {
        "prompts": 2,
        "prompts_with_several_replies": 1,
        "ties": 1,
        "below_margin": 0,
        "duplicate_replies": 1,
        "reward_undefined": 0,
    }
    # a margin above every difference: no pair, each counted
    assert preference_rows(runs, margin=1.5)[1].counts["below_margin"] == 2
    best_worst, _ = preference_rows(runs, pairs="best_worst")
    assert len(best_worst) == 1
    with pytest.raises(ConfigError, match="margin must be a number >= 0"):
        preference_rows(runs, margin=-1)


def test_preferences_without_several_replies_warn():
    _, report = preference_rows([ep("a", 0, turn(0, "hi", "hello", 1.0))])
    assert report.rows == 0 and "several runs" in report.warnings[0]


def test_an_export_with_no_rows_writes_nothing_and_says_why(tmp_path):
    # an empty file would load in `datasets` as a bare StopIteration; an old file keeps its rows
    out = tmp_path / "pairs.jsonl"
    out.write_text('{"kept": true}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"export preferences: no rows to write \(prompts 1, .*several runs"):
        export("preferences", [ep("a", 0, turn(0, "hi", "hello", 1.0))], out)
    assert out.read_text(encoding="utf-8") == '{"kept": true}\n'
    with pytest.raises(ConfigError, match="export sft: no rows to write"):
        export("sft", [ep("a", 0, turn(0, "hi", "HELLO", 0.0))], tmp_path / "sft.jsonl")
    assert not (tmp_path / "sft.jsonl").exists()


def test_cli_counts_and_warns_about_rows_the_reward_cannot_score(tmp_path, played, capsys):
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(e.to_jsonl() + "\n" for e in played), encoding="utf-8")
    out = tmp_path / "prompts.jsonl"
    assert main(["export", "prompts", str(episodes), str(out)]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    # StructFlowBench's replay: turns whose checklist no rule decides
    unscorable = [r for r in rows if r["env_id"] == "ifgym/StructFlow-v0" and r["reward"] is None]
    assert unscorable
    assert f"unscorable without judge {len(unscorable)})" in captured.out
    assert f"ifgym: warning: {len(unscorable)} of {len(rows)} rows hold nothing the reward can score" in captured.err
    # several files in, preferences out: the same file twice holds one reply per prompt, so no pair, and no file
    pairs = tmp_path / "pairs.jsonl"
    assert main(["export", "preferences", str(episodes), str(episodes), str(pairs), "margin=0.2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ifgym: error: export preferences: no rows to write (") and "duplicate replies" in err
    assert "several runs" in err and f"nothing was written to {pairs}" in err and not pairs.exists()
    assert main(["export", "turns", str(episodes), str(episodes)]) == 2
    assert "is one of the episode files" in capsys.readouterr().err
