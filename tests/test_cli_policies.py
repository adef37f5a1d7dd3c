"""`ifgym eval policy=truncation|graphif|context_agent` over canned servers, and the policy benchmark."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support.canned_light import context_agent_light, from_body, graphif_light
from support.canned_server import CannedServer

from ifgym.cli import compose, main
from ifgym.policies import ContextAgent, GraphIF, SelfRefine, Truncation
from ifgym.runner.build import build_policy

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["progress=false", "plots=false"]


def summary_of(out: Path) -> dict:
    return json.loads((out.parent / "summary.json").read_text())


def test_truncation_over_an_openai_compatible_server(tmp_path, capsys):
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=["A reply."], model="served-model") as srv:
        code = main(
            [
                "eval",
                "policy=truncation",
                f"policy.llm.base_url={srv.base_url}",
                "policy.llm.model=served-model",
                "policy.truncation.k=2",
                "env.patience=null",
                "episodes=1",
                "env.max_turns=4",
                f"output={out}",
                *QUIET,
            ]
        )
    assert code == 0
    # the model never sees more than the previous exchange and the new message
    assert [sum(m["role"] == "user" for m in r["messages"]) for r in srv.requests] == [1, 2, 2, 2]
    summary = summary_of(out)
    assert summary["usage"]["policy"]["calls"] == 4
    assert summary["policy_cost"]["calls_per_turn"] == 1.0 and summary["policy_cost"]["estimated_calls"] == 0
    assert "policy cost: 1.00 calls/turn (1.00 base + 0.00 light)" in capsys.readouterr().out
    episode = json.loads(out.read_text().splitlines()[0])
    assert episode["meta"]["policy_usage"]["turns"] == 4


def test_full_history_chat_policy_reports_its_cost(tmp_path, capsys):
    # policy=openai (kind chat) is the full-history row of a comparison: it needs the same cost records
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=["A reply."], model="served-model") as srv:
        code = main(
            [
                "eval",
                "policy=openai",
                f"policy.llm.base_url={srv.base_url}",
                "policy.llm.model=served-model",
                "policy.llm.api_key_env=null",
                "env.patience=null",
                "episodes=2",
                "concurrency=1",
                "env.max_turns=3",
                f"output={out}",
                *QUIET,
            ]
        )
    assert code == 0
    assert [sum(m["role"] == "user" for m in r["messages"]) for r in srv.requests] == [1, 2, 3] * 2  # nothing cut
    cost = summary_of(out)["policy_cost"]
    words = [sum(len(m["content"].split()) for m in r["messages"]) for r in srv.requests]
    assert cost["calls_per_turn"] == 1.0 and cost["light_calls_per_turn"] == 0
    assert cost["ACT"] == pytest.approx(sum(words) / 6)
    assert "policy cost: 1.00 calls/turn (1.00 base + 0.00 light)" in capsys.readouterr().out
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["meta"]["policy_usage"]["calls"] for e in episodes] == [3, 3]  # per episode, not run totals


def test_truncation_k_null_is_full_history(tmp_path):
    out = tmp_path / "e.jsonl"
    code = main(
        [
            "eval",
            "policy=truncation",
            "policy.base=scripted",
            "policy.replies=[Fine.]",
            "policy.truncation.k=null",
            "env.patience=null",
            "episodes=1",
            "env.max_turns=2",
            f"output={out}",
            *QUIET,
        ]
    )
    assert code == 0
    episode = json.loads(out.read_text().splitlines()[0])
    assert episode["meta"]["policy_trace"]["policy"] == {"policy": "truncation", "k": None}


def test_graphif_with_scripted_base_and_a_light_server(tmp_path, capsys):
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=from_body(graphif_light({}))) as light:
        code = main(
            [
                "eval",
                "policy=graphif",
                "policy.base=scripted",
                "policy.replies=[Fine.]",
                f"policy.light_llm.base_url={light.base_url}",
                "policy.light_llm.model=canned-model",
                "policy.light_llm.api_key_env=null",
                "env.patience=null",
                "episodes=1",
                "env.max_turns=3",
                f"output={out}",
                *QUIET,
            ]
        )
        assert code == 0
        assert len(light.requests) == 3  # one extraction call per turn
    summary = summary_of(out)
    assert summary["usage"]["light"]["calls"] == 3 and "policy" not in summary["usage"]
    # nothing binds (no relations, no rules): no rewrite, so one base call and one light call a turn
    assert summary["policy_cost"]["calls_per_turn"] == 2.0
    # the defaults and counters each episode recorded, added up over the run
    assert summary["policy_cost"]["counters"] == {
        "extraction_failures": 0,
        "dropped_relations": 0,
        "rewrites": 0,
        "rewrite_fallbacks": 0,
        "rewrites_skipped": 3,
        "unknown_rule_ids": 0,
        "summary_failures": 0,
    }
    out_text = capsys.readouterr().out
    assert "policy counters: extraction_failures 0, dropped_relations 0, rewrites 0" in out_text
    # the default extraction is the paper's w/o-agent ablation, and the table says so
    assert "policy: GraphIF w/o agent (fast)\nnot GraphIF's setup:\n  - prompts in ifgym's own words" in out_text
    assert "\n  - extraction=fast: one structured extraction call" in out_text
    assert summary["policy_protocol"]["name"] == "GraphIF w/o agent (fast)"
    trace = json.loads(out.read_text().splitlines()[0])["meta"]["policy_trace"]
    assert [n["turn"] for n in trace["graph"]["nodes"]] == [1, 2, 3] and len(trace["costs"]) == 3


def test_context_agent_with_the_hashing_embedder(tmp_path):
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=from_body(context_agent_light({}, {}))) as light:
        code = main(
            [
                "eval",
                "policy=context_agent",
                "policy.base=scripted",
                "policy.replies=[Fine.]",
                "policy.context_agent.embedder=hashing",
                f"policy.light_llm.base_url={light.base_url}",
                "policy.light_llm.model=canned-model",
                "policy.light_llm.api_key_env=null",
                "env.patience=null",
                "episodes=1",
                "env.max_turns=3",
                f"output={out}",
                *QUIET,
            ]
        )
        assert code == 0
    # the unscripted topic calls fall back to "continue": one tree holds all three turns
    cost = summary_of(out)["policy_cost"]
    assert cost["light_calls_per_turn"] == pytest.approx((1 + 2 + 2) / 3)
    assert cost["counters"]["topic_defaults"] == 2
    trace = json.loads(out.read_text().splitlines()[0])["meta"]["policy_trace"]
    assert len(trace["forest"]["nodes"]) == 3 and trace["counters"]["topic_defaults"] == 2


@pytest.mark.parametrize(
    ("overrides", "wrapper", "attrs"),
    [
        (["policy=truncation", "policy.base=scripted", "policy.replies=[x]"], Truncation, {"k": 4}),
        (
            ["policy=truncation", "policy.base=scripted", "policy.replies=[x]", "policy.truncation.k=null"],
            Truncation,
            {"k": None},
        ),
        (
            [
                "policy=graphif",
                "policy.base=scripted",
                "policy.replies=[x]",
                "policy.graphif.extraction=loop",
                "policy.graphif.view_chars=120",
                "policy.graphif.linked_chars=900",
            ],
            GraphIF,
            {
                "extraction": "loop",
                "rewrite": "always",
                "explain_relations": True,
                "view_chars": 120,
                "linked_chars": 900,
            },
        ),
        (
            [
                "policy=context_agent",
                "policy.base=scripted",
                "policy.replies=[x]",
                "policy.context_agent.theta=0.5",
                "policy.context_agent.embed_chars=400",
                "policy.context_agent.summary_chars=700",
            ],
            ContextAgent,
            {"theta": 0.5, "embed_chars": 400, "summary_chars": 700},
        ),
        (
            ["policy=graphif_paper", "policy.base=scripted", "policy.replies=[x]"],
            GraphIF,
            {
                "extraction": "loop",
                "summary": True,
                "rewrite": "always",
                "rewrite_format": "final_response",
                "use_graph_prompt": True,
            },
        ),
        (
            ["policy=graphif", "policy.base=scripted", "policy.replies=[x]", "policy.graphif.graph_prompt=false"],
            GraphIF,
            {"extraction": "fast", "use_graph_prompt": False, "summary": False},
        ),
        (
            ["policy=self_refine", "policy.base=scripted", "policy.replies=[x]", "policy.self_refine.rounds=2"],
            SelfRefine,
            {"rounds": 2},
        ),
        # kind=chat runs through the full-history path, so it has the wrappers' cost records
        (["policy=openai", "policy.llm.base_url=http://127.0.0.1:9/v1", "policy.llm.model=m"], Truncation, {"k": None}),
    ],
)
def test_each_wrapper_is_built_from_its_config_group(overrides, wrapper, attrs):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose([*overrides, "policy.context_agent.embedder=hashing"]), resolve=True)
    clients: dict = {}
    make = build_policy(cfg["policy"], clients)
    first, second = make(), make()
    assert isinstance(first, wrapper) and first is not second and first.base is not second.base
    assert not isinstance(first.base, Truncation)  # one wrapper, around the base policy
    assert {k: getattr(first, k) for k in attrs} == attrs


@pytest.mark.parametrize(
    ("kind", "override", "fragment"),
    [
        ("truncation", "policy.base=scriptd", "Did you mean 'scripted'"),  # a typo in the wrapped policy
        ("truncation", "policy.truncation.k=0", "k must be an integer >= 1"),  # fails before any episode
        ("graphif", "policy.graphif.extraction=lop", "Did you mean 'loop'"),  # a typo in a wrapper choice
        ("context_agent", "policy.context_agent.embedder=hash", "Did you mean 'hashing'"),
    ],
)
def test_wrapper_config_errors_are_one_clear_line(kind, override, fragment, capsys):
    assert main(["eval", f"policy={kind}", "policy.base=scripted", "policy.replies=[x]", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ifgym: error:") and fragment in err and "Traceback" not in err


def test_help_lists_the_wrapper_settings(capsys):
    assert main(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    assert "policy={truncation, graphif, context_agent, self_refine}" in out
    keys = ("policy.truncation.k", "policy.graphif.extraction", "policy.context_agent.theta", "policy.light_llm")
    keys += ("policy.graphif.view_chars", "policy.graphif.linked_chars", "policy.graphif.graph_prompt")
    keys += ("policy.graphif.summary", "policy.graphif.rewrite_format", "policy.self_refine.rounds")
    keys += ("policy.context_agent.embed_chars", "policy.context_agent.summary_chars")
    for key in keys:
        assert key in out


def test_graphif_papers_light_model_is_the_backbone_unless_set():
    from omegaconf import OmegaConf

    served = ["policy=graphif_paper", "policy.llm.base_url=http://127.0.0.1:9/v1", "policy.llm.model=big"]
    policy = OmegaConf.to_container(compose(served), resolve=True)["policy"]
    fields = ("base_url", "model", "temperature", "top_p", "max_tokens", "extra")
    assert {k: policy["light_llm"][k] for k in fields} == {k: policy["llm"][k] for k in fields}
    assert (policy["llm"]["temperature"], policy["llm"]["top_p"], policy["llm"]["extra"]) == (0.7, 0.8, {"top_k": 20})
    # one field of the light model set: only that one differs
    policy = OmegaConf.to_container(compose([*served, "policy.light_llm.model=small"]), resolve=True)["policy"]
    assert policy["light_llm"]["model"] == "small" and policy["light_llm"]["base_url"] == "http://127.0.0.1:9/v1"


def test_benchmark_runs_side_by_side_on_the_same_episodes(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_policies", ROOT / "benchmarks" / "policies.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--lengths", "6", "--episodes", "1", "--repeats", "2", "--json", str(tmp_path / "b.json")]
    result = bench.main([*argv, "--base-latency", "0.002", "--light-latency", "0.001"])
    text = capsys.readouterr().out
    assert "offline: canned OpenAI-compatible servers" in text and "identical user turns across policies: yes" in text
    assert "latency per call: base 2.0 ms, light 1.0 ms" in text and "median of 2 repeats" in text
    rows = result["results"]
    assert set(rows) == {"full history", "truncation k=4", "graphif fast", "graphif loop", "context-agent"}
    assert rows["full history"][6]["ACT_ratio"] == 1.0 and rows["full history"][6]["calls"] == 1.0
    assert rows["graphif fast"][6]["calls"] <= 3 and rows["graphif loop"][6]["calls"] >= 5
    assert all(len(r[6]["policy_seconds"]) == 2 for r in rows.values())  # one timing per repeat
    assert json.loads((tmp_path / "b.json").read_text())["same_episodes"] is True
    # relation quality on the hand-written dialogues, measured from what the light model was shown
    relations = result["relations"]
    assert "rule-based stand-in that reads the prompt" in relations["light"]
    assert {(r["dialogue"], r["extraction"]) for r in relations["rows"]} >= {("all", "fast"), ("all", "loop")}
    pooled = {r["extraction"]: r for r in relations["rows"] if r["dialogue"] == "all"}
    assert pooled["fast"]["f1"] == pooled["loop"]["f1"] == 1.0 and relations["agreement"]["f1"] == 1.0
    assert "fast vs loop" in text and "precision" in text


def test_benchmark_branch_stand_in_exercises_the_branch_path(capsys):
    spec = importlib.util.spec_from_file_location("bench_policies", ROOT / "benchmarks" / "policies.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--lengths", "20", "--episodes", "3", "--repeats", "1", "--base-latency", "0", "--light-latency", "0"]
    result = bench.main([*argv, "--parts", "costs"])
    row = result["results"]["context-agent"][20]
    assert row["branch_calls"] > 0 and row["branches_created"] > 0
    assert "relations" not in result
