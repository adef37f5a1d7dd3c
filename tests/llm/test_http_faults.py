"""Model-server faults named: each unusable answer is its own error type, and a run records it per episode.

CannedServer is a real OpenAI-compatible HTTP server on 127.0.0.1 that injects each fault (a body
that is not JSON, an HTML error page, null content, no choices, 5xx before a good answer, a stall);
it stands in for a misbehaving vLLM/OpenAI deployment or the proxy in front of it.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from support.canned_server import CannedServer

import ifgym  # noqa: F401
from ifgym.errors import (
    BackendError,
    HTMLReplyError,
    NoChoicesError,
    NonJSONReplyError,
    NullContentError,
    ReplyTooLongError,
)
from ifgym.llm import LLMConfig, make_client
from ifgym.policies import ChatPolicy
from ifgym.runner.rollout import read_episodes, run

HI = [{"role": "user", "content": "hi"}]
HTML = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
NULL_CONTENT = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "canned-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}],
}
NO_CHOICES = {"id": "x", "object": "chat.completion", "created": 0, "model": "canned-model", "choices": []}


def client_for(server, **settings):
    settings = {"max_retries": 0, **settings}
    return make_client(LLMConfig(base_url=server.base_url, model="canned-model", **settings), "policy")


@pytest.mark.parametrize(
    "fault, error, fragment",
    [
        ((200, {"Content-Type": "application/json"}, "upstream timed out {"), NonJSONReplyError, "not JSON"),
        ((200, {"Content-Type": "text/plain"}, "upstream timed out"), NonJSONReplyError, "not JSON"),
        ((200, {}, HTML), HTMLReplyError, "title '502 Bad Gateway'"),
        ((200, {"Content-Type": "application/json"}, HTML), HTMLReplyError, "502 Bad Gateway"),
        ((502, {}, HTML), HTMLReplyError, "HTTP 502 with an HTML error page"),
        ((200, {}, NULL_CONTENT), NullContentError, "content null"),
        ((200, {}, NO_CHOICES), NoChoicesError, "without choices"),
        ((200, {}, {"id": "x", "object": "chat.completion", "model": "canned-model"}), NoChoicesError, "choices"),
        ((200, {"Content-Type": "application/json"}, "[1, 2]"), NoChoicesError, r"without choices.*\(a JSON list\)"),
        ((200, {}, {**NULL_CONTENT, "choices": [{"message": {"content": [1]}}]}), NonJSONReplyError, "not text"),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_unusable_answer_is_a_named_error(fault, error, fragment, mode):
    import asyncio

    with CannedServer(faults=[fault]) as server:
        client = client_for(server)
        with pytest.raises(error, match=fragment) as info:
            client.chat(HI) if mode == "sync" else asyncio.run(client.achat(HI))
    assert isinstance(info.value, BackendError)


def test_lone_surrogates_are_cleaned_both_ways_and_counted():
    with CannedServer(replies=["broken \ud800 half"]) as server:
        client = client_for(server)
        out = client.chat([{"role": "user", "content": "a \udc00 b"}])
        sent = server.requests[0]["messages"][0]["content"]
    assert out.text == "broken \ufffd half" and out.cleaned == 1
    assert sent == "a \ufffd b"  # the request could be encoded at all
    assert client.usage.cleaned == 2  # one message sent, one reply received


def test_an_over_long_reply_is_cut_and_counted_or_fails_as_configured():
    long = "word " * 30_000  # 150,000 characters
    with CannedServer(replies=[long]) as server:
        cut = client_for(server, max_reply_chars=1000, max_tokens=40_000)  # a reply the server does not cut
        out = cut.chat(HI)
        assert len(out.text) == 1000 and out.truncated and cut.usage.truncated == 1
        strict = client_for(server, max_reply_chars=1000, long_reply="fail", max_tokens=40_000)
        with pytest.raises(ReplyTooLongError, match="150,000 characters, more than max_reply_chars=1,000"):
            strict.chat(HI)
        assert strict.usage.calls == 1  # the call was made and is counted


def test_retries_are_counted_in_usage_and_on_the_completion():
    faults = [(500, {"retry-after-ms": "10"}), (503, {"retry-after-ms": "10"})]
    with CannedServer(replies=["Finally."], faults=faults) as server:
        client = client_for(server, max_retries=3)
        out = client.chat(HI)
        assert server.statuses == [500, 503, 200]
    assert out.text == "Finally." and out.retries == 2
    assert client.usage.to_json()["retries"] == 2 and client.usage.calls == 1


def test_a_stalled_server_times_out_per_request():
    assert LLMConfig().timeout == 60.0  # the default suits chat models
    with CannedServer(replies=["late"], delay=3.0) as server:
        client = client_for(server, timeout=0.3)
        with pytest.raises(BackendError, match="did not answer within 0.3s"):
            client.chat(HI)


def test_a_run_records_each_fault_on_its_own_episode_and_finishes(tmp_path):
    faults = [
        (200, {"Content-Type": "application/json"}, "{not json"),
        (200, {}, HTML),
        (200, {}, NULL_CONTENT),
        (200, {}, NO_CHOICES),
        (500, {}),
    ]
    out = tmp_path / "e.jsonl"
    with CannedServer(replies=["A fine \ud800 reply."], faults=faults) as server:
        client = client_for(server)
        result = run(
            lambda: gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None),
            lambda: ChatPolicy(client),
            range(8),
            output=out,
            progress=False,
            concurrency=1,
            max_failure_rate=1,
        )
    types = [f.error["type"] for f in result.failed]
    assert types == ["NonJSONReplyError", "HTMLReplyError", "NullContentError", "NoChoicesError", "ServerError"]
    assert [e.seed for e in result.episodes] == [5, 6, 7]
    # the cleaned replies were written (no UnicodeEncodeError at the append) and read back
    assert all("\ufffd" in t.reply for e in read_episodes(out) for t in e.turns)
    assert all(json.loads(line) for line in out.read_text(encoding="utf-8").splitlines())
