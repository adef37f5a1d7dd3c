"""What every policy wrapper shares: truncation boundaries, cost accounting, JSON parsing, token counts."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import pytest
from support.canned_server import CannedServer

from ifgym.errors import ConfigError, DataFormatError
from ifgym.llm import CannedClient, Completion, make_client
from ifgym.policies import ChatPolicy, ScriptedPolicy, Truncation, cost_summary
from ifgym.policies.truncation import truncate
from ifgym.policies.wrapper import BaseCall, split_transcript

SYS = {"role": "system", "content": "be brief"}


def u(n):
    return {"role": "user", "content": f"question {n}"}


def a(n):
    return {"role": "assistant", "content": f"answer {n}"}


THREE_TURNS = [SYS, u(1), a(1), u(2), a(2), u(3)]


def server_client(srv, role="policy"):
    return make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": None, "max_retries": 0}, role)


# -- truncation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "k", "expected"),
    [
        # k=1: the new message alone, the system message kept
        (THREE_TURNS, 1, [SYS, u(3)]),
        # k=2: one earlier exchange and the new message
        (THREE_TURNS, 2, [SYS, u(2), a(2), u(3)]),
        # exactly as many turns as k: nothing is cut
        (THREE_TURNS, 3, THREE_TURNS),
        # fewer turns than k (the default 4): nothing is cut
        (THREE_TURNS, 4, THREE_TURNS),
        # k=None: full history
        (THREE_TURNS, None, THREE_TURNS),
        # no system message: none is invented
        ([u(1), a(1), u(2)], 1, [u(2)]),
        # two assistant messages after one question stay with that question
        ([u(1), a(1), a(9), u(2), a(2), u(3)], 2, [u(2), a(2), u(3)]),
        # the cut never starts on an assistant message, even when one opens the transcript
        ([a(0), u(1), a(1), u(2)], 1, [u(2)]),
    ],
)
def test_truncate_boundaries(messages, k, expected):
    assert truncate(messages, k) == expected


@pytest.mark.parametrize("k", [0, -1, True, "4", 2.0])
def test_truncation_rejects_bad_k(k):
    with pytest.raises(ConfigError, match="k must be an integer >= 1"):
        Truncation(ScriptedPolicy(["ok"]), k=k)


def test_truncation_sends_the_window_through_a_real_server_and_counts_its_usage():
    with CannedServer(replies=["one two three"]) as srv:
        policy = Truncation(ChatPolicy(server_client(srv)), k=2)
        reply = policy.act(THREE_TURNS)
    assert reply == "one two three"
    assert srv.requests[0]["messages"] == [SYS, u(2), a(2), u(3)]
    (cost,) = policy.costs
    # the server counts whitespace words: "be brief" + "question 2" + "answer 2" + "question 3"
    assert (cost.calls, cost.prompt_tokens["base"], cost.completion_tokens["base"]) == (
        {"base": 1, "light": 0},
        8,
        3,
    )
    assert cost.context_tokens == 8 and cost.estimated_calls == 0


def test_wrapper_needs_a_transcript_ending_with_a_user_message():
    with pytest.raises(DataFormatError, match="ends with a user message"):
        Truncation(ScriptedPolicy(["ok"])).act([u(1), a(1)])


def test_wrapper_needs_a_policy():
    with pytest.raises(ConfigError, match="wraps a policy"):
        Truncation(CannedClient(["ok"]))


# -- accounting ----------------------------------------------------------------------------------


def test_a_response_without_usage_is_estimated_and_flagged():
    with CannedServer(replies=["one two"], include_usage=False) as srv:
        policy = Truncation(ChatPolicy(server_client(srv)), k=None)
        policy.act([u(1)])
    (cost,) = policy.costs
    # an HTTP client has no tokenizer: the words of the prompt stand in, and the call is flagged
    assert (cost.prompt_tokens["base"], cost.completion_tokens["base"], cost.estimated_calls) == (2, 2, 1)
    assert policy.usage["missing_usage"] == 1


def test_a_policy_without_completions_is_estimated_in_words():
    policy = Truncation(ScriptedPolicy(["a b c"]), k=None)
    policy.act([SYS, u(1)])
    assert policy.costs[0].prompt_tokens["base"] == 4 and policy.costs[0].estimated_calls == 1


def test_usage_totals_outlive_reset_but_costs_and_episode_usage_do_not():
    policy = Truncation(ChatPolicy(CannedClient(["x y"])), k=None)
    policy.act([u(1)])
    policy.act([u(1), a(1), u(2)])
    assert [c.turn for c in policy.costs] == [0, 1]
    assert policy.episode_usage["turns"] == 2 and policy.episode_usage["context_tokens"] == 2 + 6
    policy.reset()
    assert policy.costs == [] and policy.episode_usage["calls"] == 0
    policy.act([u(1)])
    usage = policy.usage
    assert (usage["turns"], usage["calls"], usage["base_calls"], usage["light_calls"]) == (3, 3, 3, 0)
    assert usage["context_tokens"] == usage["base_prompt_tokens"] == 2 + 6 + 2
    episode = policy.episode_usage
    assert (episode["turns"], episode["calls"], episode["context_tokens"], episode["rewrite_tokens"]) == (1, 1, 2, 0)
    assert set(episode) == set(usage)  # the same keys, counted since the last reset


@pytest.mark.parametrize(
    "make",
    [
        lambda client: ChatPolicy(client),  # the client (and its totals) is shared by every episode of a run
        lambda client: Truncation(ChatPolicy(client), k=None),
        lambda client: ScriptedPolicy(["a b"]),
    ],
    ids=["chat", "truncation", "scripted"],
)
def test_rollout_stores_per_episode_usage(make):
    import gymnasium as gym

    import ifgym  # noqa: F401  (registers the env ids)
    from ifgym.runner.rollout import rollout

    client = CannedClient(["a b"])
    policy = make(client)
    rollout(gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None), policy, seed=0)
    second = rollout(gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None), policy, seed=1)
    assert second.meta["policy_usage"]["calls"] == 2  # this episode's calls, not 3 + 2
    assert second.meta["policy_usage"]["completion_tokens"] == 4
    assert policy.usage["calls"] == 5  # lifetime totals stay available


def test_rollout_stores_the_wrappers_trace():
    import gymnasium as gym

    import ifgym  # noqa: F401
    from ifgym.runner.rollout import rollout

    episode = rollout(
        gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None),
        Truncation(ChatPolicy(CannedClient(["r"])), k=2),
        seed=0,
    )
    trace = json.loads(episode.to_jsonl())["meta"]["policy_trace"]
    assert trace["policy"] == {"policy": "truncation", "k": 2}
    assert [c["calls"] for c in trace["costs"]] == [{"base": 1, "light": 0}] * 2
    assert trace["counters"] == {}
    # a policy without the hook leaves no trace
    assert "policy_trace" not in rollout(gym.make("ifgym/EvolIF-v1", max_turns=1), ScriptedPolicy(["r"]), seed=0).meta


def test_a_rewrite_call_counts_apart_from_the_context():
    class Reviser(Truncation):
        def _turn(self, messages):
            draft = yield BaseCall(messages)
            return (yield BaseCall([{"role": "user", "content": f"revise: {draft}"}], rewrite=True))

    policy = Reviser(ChatPolicy(CannedClient(["one two"])), k=None)
    policy.act([u(1)])
    (cost,) = policy.costs
    assert (cost.calls["base"], cost.context_tokens, cost.rewrite_tokens, cost.prompt_tokens["base"]) == (2, 2, 3, 5)
    assert cost.to_json()["rewrite_tokens"] == 3 and policy.cost_summary()["rewrite_tokens_per_turn"] == 3


def test_sync_and_async_turns_cost_the_same():
    sync, asyn = (Truncation(ChatPolicy(CannedClient(["r"])), k=2) for _ in range(2))
    assert sync.act(THREE_TURNS) == asyncio.run(asyn.aact(THREE_TURNS)) == "r"
    strip = lambda c: {**c.to_json(), "seconds": 0}  # noqa: E731
    assert strip(sync.costs[0]) == strip(asyn.costs[0])


def test_a_wrapper_around_a_sync_only_policy_runs_its_act_blocking_or_in_a_worker_thread():
    import threading

    from ifgym.policies import Policy

    class Echo(Policy):
        """A user's policy with only `act`: `aact` is the base's (a worker thread)."""

        threads: list[str] = []

        def act(self, messages):
            self.threads.append(threading.current_thread().name)
            return messages[-1]["content"].upper()

        @property
        def usage(self):
            return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    sync, asyn = Truncation(Echo(), k=1), Truncation(Truncation(Echo(), k=2), k=1)  # the second nests a wrapper
    assert sync.act(THREE_TURNS) == asyncio.run(asyn.aact(THREE_TURNS)) == "QUESTION 3"
    main = threading.current_thread().name
    assert Echo.threads[0] == main and Echo.threads[1] != main
    assert sync.costs[0].calls["base"] == asyn.costs[0].calls["base"] == asyn.base.costs[0].calls["base"] == 1


def test_cost_summary_means_and_empty():
    policy = Truncation(ChatPolicy(CannedClient(["r s"])), k=None)
    policy.act([u(1)])
    policy.act([u(1), a(1), u(2)])
    summary = policy.cost_summary()
    assert summary["turns"] == 2 and summary["calls_per_turn"] == 1.0
    assert summary["ACT"] == (2 + 6) / 2
    # no turns: means are undefined, not zero
    assert math.isnan(cost_summary([])["ACT"])


def test_split_transcript():
    system, exchanges, current = split_transcript(THREE_TURNS)
    assert system == [SYS] and current == "question 3"
    assert [(e.turn, e.user, e.assistant) for e in exchanges] == [
        (1, "question 1", "answer 1"),
        (2, "question 2", "answer 2"),
    ]


# -- token counts (ifgym.llm) ---------------------------------------------------------------------


def test_canned_client_counts_words_and_http_has_no_tokenizer():
    assert CannedClient(["x"]).count_tokens([SYS, u(1)]) == 4
    with CannedServer() as srv:
        assert server_client(srv).count_tokens([u(1)]) is None
        assert srv.requests == []  # counting never spends a call


def test_http_completion_says_whether_usage_was_reported():
    with CannedServer(replies=["a b"]) as with_usage, CannedServer(replies=["a b"], include_usage=False) as without:
        assert server_client(with_usage).chat([u(1)]).usage_reported is True
        assert server_client(without).chat([u(1)]).usage_reported is False
    assert Completion("x").usage_reported is True


@pytest.mark.embedded
def test_embedded_count_tokens_matches_the_models_own_usage():
    client = make_client({"base_url": None, "embedded_model": "smollm2-135m", "n_ctx": 1024, "max_tokens": 2})
    msgs = [SYS, {"role": "user", "content": "What colour is the sky on a clear day?"}]
    counted = client.count_tokens(msgs)
    assert counted == client.chat(msgs).prompt_tokens > 10


# -- import weight -------------------------------------------------------------------------------


def test_importing_the_wrappers_loads_no_heavy_library():
    code = (
        "import sys, ifgym.policies, ifgym.policies.context_agent; "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_stop_iteration_from_a_call_is_not_taken_for_the_end_of_the_turn():
    # a generator-driven turn must not mistake an error inside a call for its own return
    def broken(messages):
        return next(iter([]))

    with pytest.raises(StopIteration):
        Truncation(ScriptedPolicy(broken)).act([u(1)])
