"""The call cache (llm/cache.py) through LLMClient against a CannedServer: hits, misses, what it keeps out."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from support.canned_server import CannedServer

from ifgym.errors import ConfigError
from ifgym.llm import CallCache, make_client

HI = [{"role": "user", "content": "hello there"}]


def cached_client(srv, folder, role="judge", **fields):
    settings = {"base_url": srv.base_url, "model": srv.model, "api_key_env": None, **fields}
    return make_client(settings, role, cache=CallCache(folder))


def test_a_repeated_call_is_answered_from_the_cache_and_counted_as_a_hit(tmp_path):
    with CannedServer(replies=["first", "second"]) as srv:
        client = cached_client(srv, tmp_path)
        a = client.chat(HI)
        b = client.chat(HI)  # the same call: no request, the first answer
        c = client.chat([{"role": "user", "content": "something else"}])  # another call: a request
    assert (a.text, b.text, c.text) == ("first", "first", "second")
    assert len(srv.requests) == 2
    assert (client.usage.calls, client.usage.cache_hits) == (2, 1)
    assert client.usage.to_json()["cache_hits"] == 1
    assert (b.prompt_tokens, b.completion_tokens, b.model) == (a.prompt_tokens, a.completion_tokens, a.model)


def test_the_cache_outlives_the_client_and_serves_another_process_copy(tmp_path):
    with CannedServer(replies=["stored"]) as srv:
        cached_client(srv, tmp_path).chat(HI)
        again = pickle.loads(pickle.dumps(cached_client(srv, tmp_path)))  # as a Ray worker gets it
        assert again.cache is not None and again.cache.folder == tmp_path
        assert again.chat(HI).text == "stored"
        assert asyncio.run(again.achat(HI)).text == "stored"
    assert len(srv.requests) == 1 and again.usage.cache_hits == 2 and again.usage.calls == 0


def test_sampled_calls_are_not_cached_unless_asked(tmp_path):
    with CannedServer(replies=["a", "b", "c", "d"]) as srv:
        client = cached_client(srv, tmp_path / "deterministic")
        first, second = client.chat(HI, temperature=0.7), client.chat(HI, temperature=0.7)
        assert (first.text, second.text) == ("a", "b") and client.usage.cache_hits == 0
        sampled = make_client(
            {"base_url": srv.base_url, "model": srv.model, "api_key_env": None},
            "policy",
            cache=CallCache(tmp_path / "sampled", nondeterministic=True),
        )
        assert sampled.chat(HI, temperature=0.7).text == sampled.chat(HI, temperature=0.7).text == "c"
    assert len(srv.requests) == 3 and sampled.usage.cache_hits == 1


def test_the_key_holds_model_host_and_settings(tmp_path):
    cache = CallCache(tmp_path)
    key = cache.key("m", "127.0.0.1:1", HI, {"temperature": 0, "max_tokens": 10})
    assert key == cache.key("m", "127.0.0.1:1", HI, {"max_tokens": 10, "temperature": 0})
    assert key != cache.key("other", "127.0.0.1:1", HI, {"temperature": 0, "max_tokens": 10})
    assert key != cache.key("m", "127.0.0.1:2", HI, {"temperature": 0, "max_tokens": 10})
    assert key != cache.key("m", "127.0.0.1:1", HI, {"temperature": 0, "max_tokens": 11})
    assert cache.key("m", "127.0.0.1:1", HI, {"temperature": 0.5}) is None


def test_a_file_where_the_cache_folder_should_be_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        CallCache(tmp_path / "f")
