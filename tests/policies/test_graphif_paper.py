"""GraphIF as its paper runs it, and the Self-Refine baseline, over canned model servers.

The loop's calls per turn (a light model that finds no relation, one, two), the per-turn summary
call, the final-response rewrite, the w/o-graph-prompt ablation, the names and deviations on the
results table, the judge's golden-response block, `policy=graphif_paper` replaying a made-up GraphIF
set with the model's own replies as history, GraphIF's ACT on NTM, and Self-Refine's calls per turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.canned_judges import gold_or
from support.canned_light import client, from_body, graphif_light, play
from support.canned_server import CannedServer
from support.paths import DATA

from ifgym.core import ChecklistItem
from ifgym.llm import CannedClient, make_client
from ifgym.policies import ChatPolicy, GraphIF, SelfRefine
from ifgym.policies.graphif import (
    FINAL_RESPONSE_SYSTEM,
    IDENTIFY_SYSTEM,
    LOOP_DIFFERENCES,
    NO_SYSTEM_PROMPT,
    PROMPTS,
    REWRITE_DIFFERENCE,
    REWRITE_SYSTEM,
    SUMMARY_DIFFERENCE,
    SUMMARY_SYSTEM,
    final_response,
)
from ifgym.policies.self_refine import FEEDBACK_SYSTEM, REVISE_SYSTEM
from ifgym.rewards.structflow.judge import ChecklistJudge
from ifgym.runner.report import policy_protocol_lines, results_table

USERS = [
    "Name three rivers of Europe.",
    "Which of those is the longest?",
    "Rewrite your first answer as a table, and keep to the rivers of turn 1.",
]
# turn 1: no relation; turn 2: one; turn 3: two
TRUTH = {
    2: [{"type": "context_anchored", "turns": [1], "binds": "choose among the rivers named"}],
    3: [
        {"type": "modify", "turns": [1], "binds": "the answer of turn 1 as a table"},
        {"type": "context_anchored", "turns": [1], "binds": "only the rivers of turn 1"},
    ],
}


def ablated(system):
    """A rewrite system message as the w/o-graph-prompt ablation words it: no relation graph, the turns shown."""
    graph = "the relation graph, which says how earlier turns of the conversation bind this answer"
    assert graph in system
    return system.replace(graph, "the earlier turns of the conversation shown with it")


def paper_base(body):
    """The model under test: a draft, or for a final-response rewrite a check and the revised answer."""
    messages = body["messages"]
    system = messages[0]["content"]
    if system in (FINAL_RESPONSE_SYSTEM, ablated(FINAL_RESPONSE_SYSTEM)):
        return "1. The rivers of turn 1: kept.\nFinal response:\nrevised answer"
    if system in (REWRITE_SYSTEM, ablated(REWRITE_SYSTEM)):
        return json.dumps({"reply": "revised answer"})
    return f"draft answer to: {messages[-1]['content']}"


@pytest.fixture
def servers():
    with (
        CannedServer(replies=paper_base) as base,
        CannedServer(replies=from_body(graphif_light(TRUTH))) as light,
    ):
        yield base, light


def paper_graphif(servers, **kwargs):
    base, light = servers
    settings = {"extraction": "loop", "summary": True, "rewrite_format": "final_response", **kwargs}
    return GraphIF(ChatPolicy(client(base, "policy")), client(light, "light"), **settings)


def systems(server):
    return [r["messages"][0]["content"] for r in server.requests]


# -- the loop's calls per turn ----------------------------------------------------------------------


@pytest.mark.parametrize(("summary", "totals"), [(True, [5, 7, 9]), (False, [4, 6, 8])])
def test_loop_calls_per_turn_with_no_one_and_two_relations(servers, summary, totals):
    base, light = servers
    policy = paper_graphif(servers, summary=summary)
    play(policy, USERS)
    # intention + a "done" identification (+ the summary), and an identification and a location per relation;
    # the draft and the rewrite (always) on the model under test
    light_calls = [2 + summary + 2 * len(TRUTH.get(t, [])) for t in (1, 2, 3)]
    assert [c.calls for c in policy.costs] == [{"base": 2, "light": n} for n in light_calls]
    assert [c.total_calls for c in policy.costs] == totals
    assert len(light.requests) == sum(light_calls) and len(base.requests) == 6  # what the servers saw
    assert [len(n.relations) for n in policy.graph.nodes] == [0, 1, 2]


def test_the_summary_call_summarizes_the_final_reply_and_stands_for_it_in_later_views(servers):
    _, light = servers
    policy = paper_graphif(servers)
    play(policy, USERS)
    asked = [r["messages"][-1]["content"] for r in light.requests if r["messages"][0]["content"] == SUMMARY_SYSTEM]
    assert len(asked) == 3  # one per turn, after the reply
    assert asked[0] == f"User (turn 1):\n{USERS[0]}\n\nAssistant:\nrevised answer"  # the rewritten reply
    assert [n.summary for n in policy.graph.nodes] == ["summary of turn 1", "summary of turn 2", "summary of turn 3"]
    last_identify = [r for r in light.requests if r["messages"][0]["content"] == IDENTIFY_SYSTEM][-1]
    view = last_identify["messages"][-1]["content"]
    assert "[turn 2] summary: summary of turn 2" in view and "[turn 2] assistant:" not in view
    assert policy.stats["summary_failures"] == 0


def test_an_unreadable_summary_is_counted_and_leaves_the_answer_in_view(servers):
    base, _ = servers
    with CannedServer(replies=["no JSON here"]) as light:
        policy = GraphIF(ChatPolicy(client(base, "policy")), client(light, "light"), extraction="loop", summary=True)
        play(policy, USERS[:2])
    assert policy.stats["summary_failures"] == 2 and [n.summary for n in policy.graph.nodes] == ["", ""]


# -- the rewrite with a final-response section ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ("Final response:\nThe answer.", "The answer."),  # the plain marker
        ("Check: ok.\n**Final Response:** The answer.", "The answer."),  # bold, on the same line
        ("Check: ok.\n### Final response\nThe answer.\nSecond line.", "The answer.\nSecond line."),  # a heading
        ("The final response must be short.\nFinal response:\nShort.", "Short."),  # the phrase inside a line is not it
        ("Final response:\ndraft\nFinal response:\nbetter", "better"),  # the last section wins
        ("I checked everything.", None),  # no section: the rewrite is unusable
        ("Final response:\n   ", None),  # an empty section too
        ("## ANALYSIS & RATIONALE\nAll met.\n## FINAL-RESPONSE\nThe answer.", "The answer."),  # the released code's
        ("Check.\nfinal_response: The answer.", "The answer."),  # an underscore
    ],
)
def test_final_response_reads_the_section_after_the_marker(text, reply):
    assert final_response(text) == reply


def test_the_final_response_rewrite_is_the_reply_and_a_missing_section_falls_back_to_the_draft(servers):
    policy = paper_graphif(servers)
    replies = [m["content"] for m in play(policy, USERS) if m["role"] == "assistant"]
    assert replies == ["revised answer"] * 3 and all(n.rewritten for n in policy.graph.nodes)
    _, light = servers
    with CannedServer(replies=["I checked everything and it is fine."]) as base:
        policy = GraphIF(
            ChatPolicy(client(base, "policy")),
            client(light, "light"),
            extraction="loop",
            rewrite_format="final_response",
        )
        replies = [m["content"] for m in play(policy, USERS) if m["role"] == "assistant"]
    assert replies == ["I checked everything and it is fine."] * 3
    assert policy.stats["rewrite_fallbacks"] == 3 and not any(n.rewritten for n in policy.graph.nodes)


# -- Table 3's ablations and what the results table says -----------------------------------------------


def rewrite_prompts(base, system=FINAL_RESPONSE_SYSTEM):
    return [r["messages"][-1]["content"] for r in base.requests if r["messages"][0]["content"] == system]


def test_without_the_graph_prompt_the_rewrite_sees_the_linked_content_and_no_relation_explanation(servers):
    base, _ = servers
    play(paper_graphif(servers), USERS)
    full = rewrite_prompts(base)
    assert "Context-anchored (turn 2 -> turn 1)" in full[1] and "What it means:" in full[1]
    assert "How it binds this answer: choose among the rivers named." in full[1]
    assert "Turn 1, user: Name three rivers of Europe." in full[1]
    base.requests.clear()
    policy = paper_graphif(servers, graph_prompt=False)
    play(policy, USERS)
    assert rewrite_prompts(base) == []  # the system message names no relation graph either
    without = rewrite_prompts(base, ablated(FINAL_RESPONSE_SYSTEM))
    # "only relevant dialogue content without semantic relation explanations" (Table 3): turn 1 is linked
    # at turn 2 (context-anchored) and twice at turn 3 (modify, context-anchored), shown once
    turn1 = "Turn 1, user: Name three rivers of Europe.\nTurn 1, assistant: revised answer"
    assert without == [
        f"User's request:\n{USERS[0]}\n\nRelevant earlier dialogue content for this request (turn 1): none.\n\n"
        f"Draft answer:\ndraft answer to: {USERS[0]}",
        f"User's request:\n{USERS[1]}\n\nRelevant earlier dialogue content for this request (turn 2):\n{turn1}\n\n"
        f"Draft answer:\ndraft answer to: {USERS[1]}",
        f"User's request:\n{USERS[2]}\n\nRelevant earlier dialogue content for this request (turn 3):\n{turn1}\n\n"
        f"Draft answer:\ndraft answer to: {USERS[2]}",
    ]
    assert [len(n.relations) for n in policy.graph.nodes] == [0, 1, 2]  # relations are still extracted
    assert policy.variant() == "GraphIF w/o graph prompt"
    assert policy.protocol()["deviations"][1] == "graph_prompt=false: the paper's w/o-graph-prompt ablation (Table 3)"


def served(server, role, **settings):
    config = {"base_url": server.base_url, "model": server.model, "api_key_env": None, "max_retries": 0}
    return make_client({**config, **settings}, role)


PAPER_SAMPLING = {
    "temperature": 0.7,
    "top_p": 0.8,
    "max_tokens": 2048,
    "extra": {"top_k": 20, "repetition_penalty": 1.05},
}
# what no setting removes: the paper's loop with its summary call and rewrite, as ifgym implements it
FIXED = [PROMPTS, *LOOP_DIFFERENCES, SUMMARY_DIFFERENCE, REWRITE_DIFFERENCE]


def test_the_paper_setup_lists_only_what_no_setting_removes_and_each_setting_difference_is_named(servers):
    base, light = servers
    backbone = served(base, "policy", **PAPER_SAMPLING)

    def paper(system_prompt):
        chat = ChatPolicy(backbone, system_prompt=system_prompt)
        light_model = served(base, "light", **PAPER_SAMPLING)
        return GraphIF(chat, light_model, extraction="loop", summary=True, rewrite_format="final_response")

    assert paper("Be helpful.").protocol()["name"] == "GraphIF"
    assert paper("Be helpful.").protocol()["deviations"] == FIXED
    # without a system prompt of its own the answering call differs from the released code's
    assert paper(None).protocol()["deviations"] == [*FIXED, NO_SYSTEM_PROMPT]
    assert paper(None).protocol()["env"] == {"context": "own", "judge_golden": True}
    fast = GraphIF(ChatPolicy(served(base, "policy")), served(light, "light", model="small"))
    said = fast.protocol()
    assert said["name"] == "GraphIF w/o agent (fast)"
    assert [d.split(": ")[0] for d in said["deviations"]] == [
        PROMPTS,
        "extraction=fast",
        "summary=false",
        "rewrite=when_bound",
        "rewrite_format=json",
        "rewrite prompt",
        "the answering call has no system prompt unless the env sets one; the released code's has a generic "
        "helpful-assistant one (policy.system_prompt=...)",
        "light model small (" + light.base_url + ") is not the backbone canned-model",
        "sampling temperature=0.0, top_p=None, top_k=None, repetition_penalty=None, max_tokens=512",
    ]
    # only the sampling settings that differ are named
    near = GraphIF(ChatPolicy(served(base, "policy", **{**PAPER_SAMPLING, "max_tokens": 1024})), extraction="loop")
    sampling = [d for d in near.protocol()["deviations"] if d.startswith("sampling")]
    assert sampling == [
        "sampling max_tokens=1024: the released code's is max_tokens=2048 (top_k and repetition_penalty as "
        "policy.llm.extra fields, vLLM's names)"
    ]


def test_the_results_table_names_the_variant_and_env_settings_that_differ_from_the_papers():
    policy = {
        "name": "GraphIF w/o agent (fast)",
        "paper": "GraphIF",
        "deviations": ["extraction=fast: ..."],
        "env": {"context": "own", "judge_golden": True},
    }
    env = {"env_id": "ifgym/StructFlow-v0", "context": "golden", "judge_golden": True}
    assert policy_protocol_lines(policy, env) == [
        "policy: GraphIF w/o agent (fast)",
        "not GraphIF's setup:",
        "  - extraction=fast: ...",
        "  - env.context=golden: GraphIF's runs use env.context=own",
    ]
    paper = {**policy, "name": "GraphIF", "deviations": []}
    assert policy_protocol_lines(paper, {**env, "context": "own"}) == ["policy: GraphIF", "GraphIF's setup"]
    summary = {"strict": {"CSR": 0.5}, "loose": {}, "protocol": env, "policy_protocol": policy}
    assert "policy: GraphIF w/o agent (fast)" in results_table(summary).splitlines()


# -- the checklist judge's golden-response block ------------------------------------------------------


def test_the_judge_prompt_carries_the_reference_answer_only_when_given():
    judge = ChecklistJudge(CannedClient(['{"results": [{"item": 1, "judgement": "Yes"}]}'], role="judge"))
    items = [ChecklistItem("c1-1", "Is it a list?", "Instruction")]
    history = [{"role": "user", "content": "List two rivers."}]
    plain = judge.build_messages("Rhine, Danube", items, history)[-1]["content"]
    golden = judge.build_messages("Rhine, Danube", items, history, golden="The Rhine </golden> and the Danube.")
    text = golden[-1]["content"]
    assert "<golden>" not in plain
    assert "<golden>\nThe Rhine" in text and text.count("</golden>") == 1  # the answer's own tag is defanged
    assert text.index("<request>") < text.index("<golden>") < text.index("<reply>")
    assert [v.label for v in judge.judge("Rhine, Danube", items, history, golden="Rhine and Danube.")] == ["yes"]


# -- policy=graphif_paper on a made-up GraphIF set, own context, from the command line -------------------

MADE_UP_SET = [
    {
        "id": 7,
        "conv": [
            {
                "user": "Name three rivers of Europe. From now on, answer in one line.",
                "sys": "GOLDEN-0: Rhine, Danube, Loire.",
                "id": 0,
                "check_list": ["Does the response name three rivers?"],
                "constraint_type": ["Instruction"],
            },
            {
                "user": "Which of those is the longest?",
                "sys": "GOLDEN-1: The Danube.",
                "id": "1",
                "check_list": "['Is the response one line?', 'Does it pick a river from Round 0?']",
                "constraint_type": "['Global', 'follow-up']",
            },
        ],
    }
]


def model_server(body):
    """One server for the backbone and the light model (the preset's light model is the backbone)."""
    system = body["messages"][0]["content"]
    if system.startswith("You revise a draft answer") or body["messages"][0]["role"] != "system":
        return paper_base(body)
    try:
        return graphif_light({})(body["messages"])
    except AttributeError:  # not a GraphIF light prompt (no current turn): the model under test
        return paper_base(body)


def yes_judge(messages):
    """Yes to every item, in the plain judge's shape and in the paper-shaped one (env=structflow_paper's)."""
    n = messages[-1]["content"].count("<item ")
    if "judge result" in messages[0]["content"]:
        return json.dumps({"judge result": [{"judgement": "Yes", "reason": "it does"}] * n})
    return json.dumps({"results": [{"item": i + 1, "judgement": "Yes"} for i in range(n)]})


def eval_cli(tmp_path, model, judge, *overrides, env="structflow"):
    data = tmp_path / "graphif_set.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in MADE_UP_SET), encoding="utf-8")
    args = [
        "eval",
        f"env={env}",
        f"env.dataset={data}",
        "judge=llm",
        f"judge.llm.base_url={judge.base_url}",
        "judge.llm.model=canned-model",
        "judge.llm.api_key_env=null",
        f"policy.llm.base_url={model.base_url}",
        "policy.llm.model=canned-model",
        "policy.llm.api_key_env=null",
        "episodes=1",
        f"output={tmp_path / 'run' / 'episodes.jsonl'}",
        "progress=false",
        "plots=false",
        "ci=false",
        *overrides,
    ]
    r = subprocess.run(
        [sys.executable, "-m", "ifgym.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "IFGYM_CACHE": str(tmp_path / "cache")},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout, json.loads((tmp_path / "run" / "summary.json").read_text())


def test_graphif_paper_replays_a_graphif_set_with_its_own_replies_and_the_golden_block(tmp_path):
    with CannedServer(replies=model_server) as model, CannedServer(replies=gold_or(yes_judge)) as judge:
        out, summary = eval_cli(
            tmp_path,
            model,
            judge,
            "policy=graphif_paper",
            "env.context=own",
            "env.judge_golden=true",
            "policy.system_prompt=Be helpful.",
            "+policy.llm.extra.repetition_penalty=1.05",
            env="structflow_paper",
        )
        bodies = list(model.requests)
        judged = [r["messages"][-1]["content"] for r in judge.requests if "<item " in r["messages"][-1]["content"]]
    # the released code's sampling reaches every request, light calls included (one server: the light model is
    # the backbone)
    sampling = {(b["temperature"], b["top_p"], b["top_k"], b["repetition_penalty"], b["max_tokens"]) for b in bodies}
    assert sampling == {(0.7, 0.8, 20, 1.05, 2048)}
    assert SUMMARY_SYSTEM in [b["messages"][0]["content"] for b in bodies]
    # own context: the second turn's draft carries the model's own first reply, not the reference answer
    drafts = [b["messages"] for b in bodies if b["messages"][0]["content"] == "Be helpful."]  # the answering calls
    assert [m["content"] for m in drafts[1] if m["role"] == "assistant"] == ["revised answer"]
    assert "GOLDEN-0" not in json.dumps(drafts)
    # the judge sees each turn's reference answer in its own block
    turn_prompts = [p for p in judged if "Round 0" in p or "three rivers" in p]
    assert any("<golden>\nGOLDEN-0: Rhine, Danube, Loire.\n</golden>" in p for p in turn_prompts)
    assert any("<golden>\nGOLDEN-1: The Danube.\n</golden>" in p for p in turn_prompts)
    # and names the turns as the set's questions do ("Does it pick a river from Round 0?")
    assert any("[Round 0] User: Name three rivers" in p and "request (Round 1)" in p for p in judged)
    # what no setting removes: the policy's fixed lines, ifgym's judge and StructFlowBench's weights
    assert summary["policy_protocol"]["name"] == "GraphIF" and summary["policy_protocol"]["deviations"] == FIXED
    assert summary["protocol"]["context"] == "own" and summary["protocol"]["judge_golden"] is True
    assert [d.split(" ")[:3] for d in summary["protocol"]["deviations"]] == [
        ["the", "judge", "is"],
        ["WCSR", "weighs", "structural"],
        ["judge", "canned-model:", "the"],  # the judge model is named
    ]
    assert f"policy: GraphIF\nnot GraphIF's setup:\n  - {PROMPTS}" in out
    assert summary["policy_cost"]["calls_per_turn"] == 5.0  # no relation found: 3 light + 2 base per turn


def test_graphif_with_golden_context_says_it_is_not_the_papers_setup(tmp_path):
    with CannedServer(replies=model_server) as model, CannedServer(replies=gold_or(yes_judge)) as judge:
        out, summary = eval_cli(
            tmp_path,
            model,
            judge,
            "policy=graphif",
            f"policy.light_llm.base_url={model.base_url}",
            "policy.light_llm.model=canned-model",
            "policy.light_llm.api_key_env=null",
        )
        judged = [r["messages"][-1]["content"] for r in judge.requests if "<item " in r["messages"][-1]["content"]]
    assert summary["protocol"]["context"] == "golden" and not any("<golden>" in p for p in judged)
    assert "policy: GraphIF w/o agent (fast)" in out
    # the env compares the replay of GraphIF's set with GraphIF's own (the policy's lines do not repeat it)
    # env=structflow's judge settings are not GraphIF's evaluator's either: each names the setting that fixes it
    deviations = summary["protocol"]["deviations"]
    assert summary["protocol"]["paper"] == "GraphIF"
    assert [d.split(":")[0] for d in deviations[2:]] == [
        "judge canned-model",
        "metrics=ifgym",
        "judge_mode=plain",
        "judge_rule_items=false",
        "judge_max_retries=2",
        "context=golden",
        "judge_golden=false",
    ]
    assert deviations[3].startswith("metrics=ifgym: WCSR is the released script's per-turn mean")
    assert deviations[7].startswith("context=golden: reference answers as history")
    assert deviations[8].startswith("judge_golden=false: the judge sees no reference answer")
    assert "not GraphIF's protocol:\n  - the judge is ifgym's checklist judge" in out
    assert "env.context=golden: GraphIF's runs use" not in out


# -- GraphIF's ACT on NTM -------------------------------------------------------------------------------


def test_act_of_a_graphif_run_on_ntm_is_the_wrappers_own_count(servers):
    import gymnasium as gym

    from ifgym.rewards.ntm import summarize
    from ifgym.runner import rollout

    base, light = servers
    policy = paper_graphif(servers)
    env = gym.make("ifgym/NTM-v1", dataset=DATA / "ntm" / "made_up.jsonl", judge="rules", allow_unjudged=True)
    episode = rollout(env, policy, seed=1)  # the 15-turn dialogue
    sent = [c.context_tokens for c in policy.costs]
    drafts = [r for r in base.requests if r["messages"][0]["content"] != FINAL_RESPONSE_SYSTEM]
    # the drafts' prompts are the context; rewrites and light calls are not
    assert len(sent) == 15 and sent == [len(" ".join(m["content"] for m in r["messages"]).split()) for r in drafts]
    assert episode.meta["policy_usage"]["context_tokens"] == sum(sent)
    assert summarize([episode])["ACT/15"] == pytest.approx(sum(sent) / 15)
    assert [c.total_calls for c in policy.costs] == [5, 7, 9] + [5] * 12  # TRUTH's relations at turns 2 and 3


# -- Self-Refine ------------------------------------------------------------------------------------------


def refiner(feedback):
    def answer(body):
        system = body["messages"][0]["content"]
        if system == FEEDBACK_SYSTEM:
            return feedback
        if system == REVISE_SYSTEM:
            return "revised answer"
        return "draft answer"

    return answer


@pytest.mark.parametrize(
    ("feedback", "rounds", "calls", "reply"),
    [
        ("The request asks for a table: not met.", 1, 3, "revised answer"),  # draft, feedback, revision
        ("Everything is met.\n**ALL REQUIREMENTS MET**", 1, 2, "draft answer"),  # nothing to fix: stop early
        ("The request asks for a table: not met.", 2, 5, "revised answer"),  # two rounds
    ],
)
def test_self_refine_calls_per_turn(feedback, rounds, calls, reply):
    with CannedServer(replies=refiner(feedback)) as base:
        policy = SelfRefine(ChatPolicy(client(base, "policy")), rounds=rounds)
        transcript = play(policy, USERS[:2])
        requests = list(base.requests)
    assert [c.calls for c in policy.costs] == [{"base": calls, "light": 0}] * 2
    assert [m["content"] for m in transcript if m["role"] == "assistant"] == [reply] * 2
    # only the draft's prompt is context; the feedback and revision passes are rewrite tokens
    drafts = [r for r in requests if r["messages"][0]["content"] not in (FEEDBACK_SYSTEM, REVISE_SYSTEM)]
    assert [c.context_tokens for c in policy.costs] == [
        len(" ".join(m["content"] for m in r["messages"]).split()) for r in drafts
    ]
    assert all(c.rewrite_tokens > 0 for c in policy.costs)
    # the feedback sees the conversation (the earlier turn included) and the draft
    feedbacks = [r["messages"][-1]["content"] for r in requests if r["messages"][0]["content"] == FEEDBACK_SYSTEM]
    second_turn = [p for p in feedbacks if f"[turn 1] User: {USERS[0]}" in p]
    assert len(second_turn) == calls // 2 and "Draft answer:\ndraft answer" in second_turn[0]
    assert all("Draft answer:\nrevised answer" in p for p in second_turn[1:])  # a later round critiques the revision
    assert policy.protocol()["name"].startswith("Self-Refine")


def test_the_baselines_name_themselves_on_the_results_table():
    from ifgym.policies import ScriptedPolicy, Truncation

    assert Truncation(ScriptedPolicy(["x"]), k=None).protocol()["name"] == "full history"
    assert Truncation(ScriptedPolicy(["x"]), k=4).protocol() == {
        "name": "truncation (k=4)",
        "paper": None,
        "deviations": [],
        "env": {},
    }
    assert policy_protocol_lines(SelfRefine(ScriptedPolicy(["x"]), rounds=2).protocol()) == [
        "policy: Self-Refine (2 rounds)"
    ]


# -- the benchmark ------------------------------------------------------------------------------------------


def test_wrappers_paper_benchmark_puts_every_policy_in_one_table(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "wrappers_paper.py"
    spec = importlib.util.spec_from_file_location("bench_wrappers_paper", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--lengths", "4", "--episodes", "1", "--json", str(tmp_path / "b.json")])
    rows = {name: by_length[4] for name, by_length in out["results"].items()}
    assert set(rows) == {
        "full history",
        "truncation k=4",
        "context-agent",
        "context-agent (paper)",
        "context-agent w/o tree",
        "context-agent w/o retriever",
        "graphif (paper)",
        "graphif w/o agent",
        "graphif w/o graph prompt",
        "self-refine",
    }
    assert out["same_episodes"] is True and json.loads((tmp_path / "b.json").read_text())["same_episodes"] is True
    # the stand-in light model finds one relation a turn: 2 + 1 (summary) + 2 light calls, draft and rewrite
    assert rows["graphif (paper)"]["calls"] == rows["graphif w/o graph prompt"]["calls"] == 7.0
    assert rows["graphif w/o agent"]["calls"] == 4.0 and rows["self-refine"]["calls"] == 3.0
    assert rows["full history"]["calls"] == rows["truncation k=4"]["calls"] == 1.0
    assert rows["context-agent w/o tree"]["calls"] == 1.0  # no decision, no summary: the base call alone
    # the rewrites return the draft, so every policy but the window and the trees sends the full transcript
    for name in ("graphif (paper)", "graphif w/o agent", "self-refine"):
        assert rows[name]["ACT"] == rows["full history"]["ACT"] and rows[name]["rewrite_tokens"] > 0
    assert rows["graphif w/o graph prompt"]["rewrite_tokens"] < rows["graphif (paper)"]["rewrite_tokens"]
    assert "graphif w/o graph prompt" in capsys.readouterr().out
