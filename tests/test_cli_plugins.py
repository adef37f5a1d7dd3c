"""Your own policy under `ifgym eval` (policy=custom, `_target_`), alone and inside a wrapper, through the CLI.

The policies are plain classes and functions of `tests/support/own_policies.py` (on the path as `support`),
built by Hydra's instantiate from the dotted name and the arguments given under `policy`.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.canned_light import from_body, graphif_light
from support.canned_server import CannedServer

from ifgym.cli import compose, main

QUIET = ["progress=false", "plots=false"]
AGENT = "support.own_policies.CountingAgent"


def episodes_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def replies(episode: dict) -> list[str]:
    return [t["reply"] for t in episode["turns"]]


def run(tmp_path: Path, *overrides: str, turns: int = 3, episodes: int = 2) -> tuple[int, Path]:
    out = tmp_path / "e.jsonl"
    code = main(
        [
            "eval",
            *overrides,
            "env.patience=null",
            f"episodes={episodes}",
            f"env.max_turns={turns}",
            f"output={out}",
            *QUIET,
        ]
    )
    return code, out


def test_a_class_of_your_own_is_the_policy_with_its_arguments(tmp_path, capsys):
    code, out = run(tmp_path, "policy=custom", f"policy._target_={AGENT}", "policy.prefix=Saw", "policy.start=10")
    assert code == 0
    # a fresh agent per episode, built with prefix and start: it saw the whole transcript, one more user a turn
    for episode in episodes_of(out):
        assert replies(episode) == ["Saw 1 users, call 11", "Saw 2 users, call 12", "Saw 3 users, call 13"]
        # its calls, counted without token counts (it reports none)
        usage = episode["meta"]["policy_usage"]
        assert (usage["calls"], usage["missing_usage"], usage["prompt_tokens"]) == (3, 3, 0)
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["run"]["policy"] == "custom" and summary["run"]["policy_model"] == AGENT
    assert summary["policy_protocol"]["name"] == AGENT
    assert f"policy: {AGENT}" in capsys.readouterr().out.splitlines()


def test_an_async_agent_and_a_function_of_the_messages(tmp_path):
    code, out = run(tmp_path, "policy=custom", "policy._target_=support.own_policies.AsyncAgent", turns=2)
    assert code == 0
    assert [replies(e) for e in episodes_of(out)] == [["async 1", "async 2"]] * 2
    # a function messages -> str is the policy itself (Hydra's _partial_), its other arguments bound
    code, out = run(
        tmp_path / "f",
        "policy=custom",
        "policy._target_=support.own_policies.last_words",
        "policy._partial_=true",
        "policy.words=1",
        turns=2,
    )
    assert code == 0
    for episode in episodes_of(out):
        assert replies(episode) == [t["user"].split()[-1] for t in episode["turns"]]


def test_a_wrapper_wraps_your_policy(tmp_path, capsys):
    code, out = run(tmp_path, "policy=truncation", f"policy.base._target_={AGENT}", "policy.truncation.k=1")
    assert code == 0
    # truncation k=1: the agent is shown the new message alone, every turn
    for episode in episodes_of(out):
        assert replies(episode) == ["Seen 1 users, call 1", "Seen 1 users, call 2", "Seen 1 users, call 3"]
        assert episode["meta"]["policy_trace"]["policy"] == {"policy": "truncation", "k": 1}
    lines = capsys.readouterr().out.splitlines()
    assert f"policy: truncation (k=1) (base={AGENT})" in lines
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["run"]["policy_model"] == AGENT and summary["policy_cost"]["base_calls_per_turn"] == 1.0


def test_graphif_papers_setup_around_your_policy(tmp_path, capsys):
    # the light model (the paper's: the backbone's settings) is a canned server; the base is your agent
    with CannedServer(replies=from_body(graphif_light({})), model="canned-model") as light:
        code, out = run(
            tmp_path,
            "policy=graphif_paper",
            f"policy.base._target_={AGENT}",
            "policy.base.prefix=Draft",
            f"policy.llm.base_url={light.base_url}",
            "policy.llm.model=canned-model",
            "policy.llm.api_key_env=null",
            episodes=1,
        )
    assert code == 0
    (episode,) = episodes_of(out)
    # every turn: a draft over the whole transcript, then a rewrite without a final-response section, so the
    # draft stands (call 1, 3, 5: the rewrites are calls 2, 4, 6)
    assert replies(episode) == ["Draft 1 users, call 1", "Draft 2 users, call 3", "Draft 3 users, call 5"]
    assert episode["meta"]["policy_trace"]["counters"]["rewrite_fallbacks"] == 3
    assert f"policy: GraphIF (base={AGENT})" in capsys.readouterr().out.splitlines()


def test_your_policy_in_a_preset_of_your_own(tmp_path):
    # a preset file may hold the arguments beside _target_ (the policy node takes keys the schema lacks)
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "mine.yaml").write_text(f"kind: custom\n_target_: {AGENT}\nprefix: Mine\n")
    cfg = compose(["policy=mine"], config_dir=str(tmp_path))
    assert (cfg.policy._target_, cfg.policy.prefix) == (AGENT, "Mine")


def test_bad_targets_name_the_key_the_import_error_and_the_closest_name(tmp_path, capsys):
    cases = [
        # (overrides, what the one error line says)
        (
            ["policy=custom", "policy._target_=support.own_policies.CountingAgnet"],
            "policy._target_=support.own_policies.CountingAgnet: support.own_policies has no 'CountingAgnet'. "
            "Did you mean 'support.own_policies.CountingAgent'?",
        ),
        (
            ["policy=custom", "policy._target_=support.own_polices.CountingAgent"],
            "policy._target_=support.own_polices.CountingAgent: support has no 'own_polices'. "
            "Did you mean 'support.own_policies'?",
        ),
        (
            ["policy=custom", "policy._target_=no_such_package.Agent"],
            "policy._target_=no_such_package.Agent: no module named 'no_such_package'",
        ),
        (
            ["policy=custom", f"policy._target_={AGENT}", "policy.prefx=Saw"],
            f"policy._target_={AGENT}: calling it with its arguments (policy.prefx) failed: TypeError:",
        ),
        (
            ["policy=custom", "policy._target_=support.own_policies.last_words"],
            "(a function messages -> str is the policy itself: add policy._partial_=true)",
        ),
        (
            ["policy=custom", "policy._target_=support.own_policies.NotAPolicy"],
            "a policy of your own is a callable messages -> str or an object with act(messages) or aact(messages)",
        ),
        (["policy=custom"], "policy needs policy._target_=pkg.module.Name"),
        (
            ["policy=truncation", f"policy._target_={AGENT}"],
            "is read with policy=custom only (policy.kind is 'truncation'): give your policy as policy.base._target_=",
        ),
        (["policy=truncation", "policy.base.prefix=Saw"], "policy.base needs policy.base._target_=pkg.module.Name"),
        (
            ["policy=scripted", f"policy.base._target_={AGENT}"],
            "policy.base (a policy of your own to wrap) is read by the wrappers only, not by policy.kind=scripted",
        ),
        # without a _target_, a key the policy schema lacks is a typo, named with the closest key
        (["policy.system_promt=Brief."], "unknown config key 'policy.system_promt'"),
    ]
    for overrides, expected in cases:
        code, out = run(tmp_path, *overrides, episodes=1)
        err = capsys.readouterr().err
        assert code == 2, overrides
        assert expected in err, (overrides, err)
        assert not out.exists()
