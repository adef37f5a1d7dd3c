"""LLMClient over real HTTP to a CannedServer on 127.0.0.1: params, usage, retries, errors, limits."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from support.canned_server import CannedServer
from support.loops import running_loop

from ifgym.errors import BackendError, ConfigError, DataFormatError, UnreachableError
from ifgym.llm import CannedClient, LLMClient, LLMConfig, Usage, make_client, resolve_client, validate_messages
from ifgym.llm.loop import event_loop_name

HI = [{"role": "user", "content": "hello there"}]


def http_client(srv: CannedServer, role: str = "policy", **fields) -> LLMClient:
    return make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": None, **fields}, role)


# -- happy path ----------------------------------------------------------------------------------


def test_chat_returns_reply_and_counts_usage():
    with CannedServer(replies=["first reply", "second"]) as srv:
        client = http_client(srv)
        a = client.chat(HI)
        b = client.chat(HI)
    assert (a.text, b.text) == ("first reply", "second")
    assert (a.prompt_tokens, a.completion_tokens, a.model, a.finish_reason) == (2, 2, "canned-model", "stop")
    assert client.usage == Usage(calls=2, prompt_tokens=4, completion_tokens=3, missing_usage=0)
    assert srv.requests[0]["messages"] == HI and srv.requests[0]["model"] == "canned-model"


def test_achat_returns_reply_and_counts_usage():
    with CannedServer(replies=lambda body: "echo " + body["messages"][-1]["content"]) as srv:
        client = http_client(srv)
        out = asyncio.run(client.achat(HI))
    assert out.text == "echo hello there"
    assert client.usage.to_json() == {
        "calls": 1,
        "prompt_tokens": 2,
        "completion_tokens": 3,
        "missing_usage": 0,
        "retries": 0,
        "cleaned": 0,
        "truncated": 0,
        "max_tokens_stops": 0,
    }


def test_replies_cut_at_max_tokens_are_counted_per_role():
    # the server stops a reply at max_tokens and says so (finish_reason "length"); the client counts them
    with CannedServer(replies=["one two three four five six", "short"]) as srv:
        client = http_client(srv, "judge", max_tokens=4)
        cut, whole = client.chat(HI), client.chat(HI)
    assert (cut.text, cut.finish_reason) == ("one two three four", "length")
    assert (whole.text, whole.finish_reason) == ("short", "stop")
    assert client.usage.max_tokens_stops == 1 and client.usage.calls == 2


def test_achat_works_across_separate_event_loops():
    # asyncio.run makes a new loop each time; per-loop semaphores/clients must not leak across loops
    with CannedServer() as srv:
        client = http_client(srv)
        texts = [asyncio.run(client.achat(HI)).text for _ in range(3)]
    assert texts == ["OK."] * 3 and client.usage.calls == 3


@pytest.mark.parametrize(
    ("fields", "overrides", "expected"),
    [
        # config values are sent as they are
        ({"temperature": 0.7, "top_p": 0.9, "max_tokens": 33, "seed": 5}, {}, (0.7, 0.9, 33, 5)),
        # per-call overrides win over the config
        ({"temperature": 0.7, "seed": 5}, {"temperature": 0.1, "seed": 9, "max_tokens": 7}, (0.1, None, 7, 9)),
        # None-valued settings (top_p, seed) are left out of the request, not sent as null
        ({}, {}, (0.0, None, 512, None)),
    ],
)
def test_generation_params_reach_the_server(fields, overrides, expected):
    with CannedServer() as srv:
        http_client(srv, **fields).chat(HI, **overrides)
    body = srv.requests[0]
    assert tuple(body.get(k) for k in ("temperature", "top_p", "max_tokens", "seed")) == expected
    assert "top_p" in body if expected[1] is not None else "top_p" not in body


def test_extra_fields_are_sent_in_the_body():
    with CannedServer() as srv:
        http_client(srv, extra={"top_k": 20}).chat(HI)
    assert srv.requests[0]["top_k"] == 20


def test_usage_is_counted_per_role():
    with CannedServer(replies=["one two three"]) as srv:
        policy, judge = http_client(srv, "policy"), http_client(srv, "judge")
        policy.chat(HI)
        policy.chat(HI)
        judge.chat([{"role": "user", "content": "a b c d"}])
    assert (policy.role, policy.usage.calls, policy.usage.prompt_tokens, policy.usage.completion_tokens) == (
        "policy",
        2,
        4,
        6,
    )
    assert (judge.role, judge.usage.calls, judge.usage.prompt_tokens, judge.usage.completion_tokens) == (
        "judge",
        1,
        4,
        3,
    )


def test_missing_usage_counts_the_call_and_zero_tokens():
    with CannedServer(include_usage=False) as srv:
        client = http_client(srv)
        out = client.chat(HI)
    assert (out.prompt_tokens, out.completion_tokens) == (0, 0)
    assert client.usage == Usage(calls=1, prompt_tokens=0, completion_tokens=0, missing_usage=1)


# -- retries (llm/http.py: the openai client's rules) --------------------------------------------


def test_429_with_retry_after_is_honoured_then_succeeds():
    with CannedServer(faults=[(429, {"retry-after": "0.2"})]) as srv:
        client = http_client(srv, max_retries=2)
        start = time.monotonic()
        out = client.chat(HI)
        elapsed = time.monotonic() - start
    assert out.text == "OK."
    assert srv.statuses == [429, 200]
    assert elapsed >= 0.2
    assert client.usage.calls == 1  # one logical call, however many HTTP attempts


def test_5xx_is_retried_until_success():
    # retry-after-ms keeps the test fast; the plain 500 uses the client's own backoff
    with CannedServer(faults=[(500, {}), (503, {"retry-after-ms": "50"})]) as srv:
        out = asyncio.run(http_client(srv, max_retries=3).achat(HI))
    assert out.text == "OK."
    assert srv.statuses == [500, 503, 200]


def test_5xx_beyond_max_retries_is_a_backend_error():
    faults = [(500, {"retry-after-ms": "10"})] * 3
    with CannedServer(faults=faults) as srv:
        with pytest.raises(BackendError, match=r"HTTP 500.*retried up to 1"):
            http_client(srv, max_retries=1).chat(HI)
    assert srv.statuses == [500, 500]


@pytest.mark.parametrize(
    "fault, statuses",
    [
        ((503, {"x-should-retry": "false"}), [503]),  # the server says no: a 5xx is not sent again
        ((400, {"x-should-retry": "true", "retry-after-ms": "10"}), [400, 200]),  # the server says yes: a 400 is
        ((409, {"retry-after-ms": "10"}), [409, 200]),
        ((422, {}), [422]),  # a request the server cannot take is not sent again
        ((429, {"retry-after": "300"}), [429]),  # a wait past the SDK's two minutes: not sent again
    ],
)
def test_which_statuses_are_sent_again(fault, statuses):
    with CannedServer(faults=[fault]) as srv:
        client = http_client(srv, max_retries=2)
        try:
            client.chat(HI)
        except BackendError as exc:
            assert f"HTTP {fault[0]}" in str(exc)
    assert srv.statuses == statuses


def test_sync_calls_run_on_the_loop_runs_use(monkeypatch):
    # the client's loop thread starts the loop of `ifgym.llm.loop` (uvloop's where installed)
    from ifgym.llm.served import NoResendHTTPClient

    seen = []
    send = NoResendHTTPClient.send

    async def recorded(self, *args, **kwargs):
        seen.append(running_loop()[0])
        return await send(self, *args, **kwargs)

    monkeypatch.setattr(NoResendHTTPClient, "send", recorded)
    with CannedServer(replies=["one"]) as srv:
        client = http_client(srv)
        assert client.chat(HI).text == "one"
        client.close()
    assert seen == [event_loop_name()]


def test_sync_calls_count_in_the_callers_episode_and_survive_close():
    from ifgym.llm.conversation import count_episode_usage

    before = set(threading.enumerate())
    with CannedServer(faults=[(500, {"retry-after-ms": "10"})], replies=["one", "two"]) as srv:
        client = http_client(srv, max_retries=1)
        with count_episode_usage() as episode:
            assert client.chat(HI).text == "one"  # runs on the client's loop thread, counted here
        client.close()
        assert client.chat(HI).text == "two"  # a closed client opens its connections again
        client.close()
    assert (episode["policy"].calls, episode["policy"].retries) == (1, 1)
    assert (client.usage.calls, client.usage.retries) == (2, 1)
    assert not [t for t in set(threading.enumerate()) - before if t.name == "ifgym-served"]  # close() stopped them


# -- errors that name the fix --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = make_client({"base_url": url, "max_retries": 0, "api_key_env": None}, "judge")
    with pytest.raises(BackendError, match="is the server running") as err:
        client.chat(HI)
    assert url in str(err.value)


def test_timeout_is_a_backend_error_naming_the_setting():
    with CannedServer(delay=1.0) as srv:
        client = http_client(srv, timeout=0.2, max_retries=0)
        with pytest.raises(BackendError, match=r"did not answer within 0.2s \(after 0 retries\).*raise `timeout`"):
            client.chat(HI)


@pytest.mark.parametrize("use_async", [False, True])
def test_unknown_model_lists_the_served_models(use_async):
    with CannedServer(model="canned-model") as srv:
        client = make_client({"base_url": srv.base_url, "model": "canned-modle", "api_key_env": None})
        with pytest.raises(BackendError) as err:
            asyncio.run(client.achat(HI)) if use_async else client.chat(HI)
    message = str(err.value)
    assert "does not serve model 'canned-modle'" in message
    assert "It serves: canned-model" in message and "Did you mean 'canned-model'?" in message


def test_401_names_the_env_var(monkeypatch):
    monkeypatch.delenv("IFGYM_TEST_KEY", raising=False)
    with CannedServer(faults=[(401, {})]) as srv:
        client = make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": "IFGYM_TEST_KEY"})
        with pytest.raises(BackendError, match="set the environment variable IFGYM_TEST_KEY"):
            client.chat(HI)
    assert srv.statuses == [401]  # an auth failure is not retried


def test_empty_choices_is_a_backend_error():
    with CannedServer(faults=[(200, {}, {"id": "x", "object": "chat.completion", "model": "m", "choices": []})]) as srv:
        with pytest.raises(BackendError, match="without choices"):
            http_client(srv).chat(HI)


# -- secrets -------------------------------------------------------------------------------------


def test_api_key_is_sent_but_never_described(monkeypatch):
    secret = "sk-ifgym-test-sentinel-7781"
    monkeypatch.setenv("IFGYM_TEST_KEY", secret)
    with CannedServer() as srv:
        client = make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": "IFGYM_TEST_KEY"})
        client.chat(HI)
    assert srv.headers[0]["authorization"] == f"Bearer {secret}"
    described = json.dumps(client.describe())
    assert secret not in described and secret not in repr(client)
    assert client.describe()["api_key_env"] == "IFGYM_TEST_KEY" and client.describe()["role"] == "policy"


def test_repr_names_the_host_never_a_urls_credentials_or_query():
    # a repr lands in tracebacks, logs and exception messages: user:password@ and ?key= must not
    client = make_client({"base_url": "http://alice:pw-sentinel-31@127.0.0.1:8011/v1?key=q-sentinel-9", "model": "m"})
    assert repr(client) == "LLMClient(role='policy', m (http 127.0.0.1:8011))"


def test_unset_key_sends_a_placeholder(monkeypatch):
    monkeypatch.delenv("IFGYM_TEST_KEY", raising=False)
    with CannedServer() as srv:
        make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": "IFGYM_TEST_KEY"}).chat(HI)
    assert srv.headers[0]["authorization"].startswith("Bearer ") and len(srv.headers[0]["authorization"]) > 7


def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_shown():
    with CannedServer(faults=[(200, {}, "not json")]) as srv:
        url = srv.base_url.replace("http://", "http://alice:s%40cret@")
        client = make_client({"base_url": url, "model": srv.model, "api_key_env": None})
        with pytest.raises(BackendError) as err:
            client.chat(HI)
    assert srv.headers[0]["authorization"] == "Basic YWxpY2U6c0BjcmV0"  # base64 of "alice:s@cret"
    assert srv.base_url in str(err.value) and "alice" not in str(err.value) and "cret" not in str(err.value)


def test_a_proxy_named_in_the_environment_is_used_unless_no_proxy_says_otherwise(monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with CannedServer(replies=["through the proxy"]) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
        client = make_client({"base_url": "http://model.example.invalid/v1", "model": proxy.model, "api_key_env": None})
        assert client.chat(HI).text == "through the proxy"
        monkeypatch.setenv("NO_PROXY", "model.example.invalid")
        direct = make_client(
            {"base_url": "http://model.example.invalid/v1", "model": proxy.model, "api_key_env": None, "max_retries": 0}
        )
        with pytest.raises(UnreachableError, match="model.example.invalid"):  # looked up itself: no such host
            direct.chat(HI)
    assert proxy.targets == ["http://model.example.invalid/v1/chat/completions"]  # the absolute form a proxy gets


# -- concurrency limit ---------------------------------------------------------------------------


def test_async_concurrency_limit_per_client():
    with CannedServer(delay=0.2) as srv:
        client = http_client(srv, concurrency=2)

        async def six():
            return await asyncio.gather(*(client.achat(HI) for _ in range(6)))

        outs = asyncio.run(six())
    assert len(outs) == 6 and len(srv.requests) == 6
    assert srv.max_in_flight == 2  # never more than the limit, and the limit is actually used


def test_sync_concurrency_limit_across_threads():
    with CannedServer(delay=0.15) as srv:
        client = http_client(srv, concurrency=2)
        threads = [threading.Thread(target=client.chat, args=(HI,)) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(srv.requests) == 5 and srv.max_in_flight == 2
    assert client.usage.calls == 5


def test_calls_reuse_kept_alive_connections_up_to_the_concurrency():
    with CannedServer(delay=0.1) as srv:
        client = http_client(srv, concurrency=3)
        for _ in range(4):
            client.chat(HI)
        assert len(set(srv.ports)) == 1  # one connection for calls one after another

        async def nine():
            return await asyncio.gather(*(client.achat(HI) for _ in range(9)))

        asyncio.run(nine())
    assert len(set(srv.ports[4:])) == 3  # three rounds of three over the same three connections


# -- configuration -------------------------------------------------------------------------------


def test_make_client_rejects_unknown_keys_with_a_suggestion():
    with pytest.raises(ConfigError, match="unknown LLMConfig field 'temprature'. Did you mean 'temperature'"):
        make_client({"base_url": "http://127.0.0.1:1/v1", "temprature": 0.3})


def test_make_client_rejects_other_types():
    with pytest.raises(ConfigError, match="LLMConfig or a mapping"):
        make_client("http://127.0.0.1:1/v1")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base_url", "127.0.0.1:8000/v1"),  # scheme missing: openai would build a broken URL
        ("temperature", -0.1),  # negative temperature is meaningless
        ("top_p", 0.0),  # top_p must keep at least some mass
        ("top_p", 1.5),  # above 1
        ("max_tokens", 0),  # nothing could be generated
        ("max_tokens", True),  # a bool is not a token count
        ("seed", 1.5),  # seeds are integers
        ("timeout", 0),  # zero timeout fails every call
        ("max_retries", -1),  # negative retries
        ("concurrency", 0),  # would block forever
        ("n_ctx", 8),  # too small for any chat template
        ("api_key_env", ""),  # an empty variable name
        ("extra", ["top_k"]),  # must be a mapping of field -> value
    ],
)
def test_config_values_are_validated(field, value):
    with pytest.raises(ConfigError, match=f"LLMConfig.{field} must be"):
        LLMConfig(**{field: value})


def test_extra_cannot_shadow_a_field():
    with pytest.raises(ConfigError, match="extra must not set seed, temperature"):
        LLMConfig(extra={"temperature": 1.0, "seed": 2, "top_k": 5})


def test_unknown_override_suggests_the_close_name():
    with CannedServer() as srv:
        with pytest.raises(ConfigError, match="Did you mean 'max_tokens'"):
            http_client(srv).chat(HI, max_token=5)
        with pytest.raises(ConfigError, match="LLMConfig.temperature must be"):
            http_client(srv).chat(HI, temperature=-1)
    assert srv.requests == []  # rejected before any request


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([], "non-empty list"),  # nothing to answer
        ("hello", "non-empty list"),  # a bare string, not a transcript
        ([{"role": "bot", "content": "x"}], "role 'bot'"),  # not an OpenAI role
        ([{"role": "usr", "content": "x"}], "Did you mean 'user'"),  # typo gets a suggestion
        ([{"role": "user", "content": None}], "content must be a string"),  # null content
        (["user: hi"], "must be a dict"),  # a string item
    ],
)
def test_bad_messages_are_rejected(messages, fragment):
    with pytest.raises(DataFormatError, match=fragment):
        validate_messages(messages)


def test_describe_lists_config_for_logging():
    client = make_client({"base_url": "http://127.0.0.1:9/v1", "model": "m1", "concurrency": 3}, "user")
    d = client.describe()
    assert (d["role"], d["backend"], d["base_url"], d["model"], d["concurrency"]) == (
        "user",
        "http",
        "http://127.0.0.1:9/v1",
        "m1",
        3,
    )
    json.dumps(d)  # must be JSON-serialisable for the run log


def test_importing_llm_loads_no_heavy_backend():
    heavy = ("llama_cpp", "openai", "aiohttp", "httpx2")
    code = f"import sys, ifgym.llm; print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


# -- the canned server itself (other tests rely on it) -------------------------------------------


def test_canned_server_stops_after_max_requests():
    with CannedServer(max_requests=2) as srv:
        client = http_client(srv, max_retries=0)
        client.chat(HI)
        client.chat(HI)
        with pytest.raises(BackendError):
            client.chat(HI)  # answered 503, then the server shuts down
    assert len(srv.requests) == 2


def test_canned_server_stop_closes_kept_alive_connections():
    with CannedServer() as srv:
        client = http_client(srv, max_retries=0)
        client.chat(HI)
        srv.stop()
        with pytest.raises(BackendError, match="cannot reach the model server"):
            client.chat(HI)  # the kept-alive connection is closed too, not served on


def test_canned_server_stops_after_ttl():
    with CannedServer(ttl=0.2) as srv:
        url = srv.base_url + "/models"
        with urllib.request.urlopen(url, timeout=2) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "canned-model"
        time.sleep(0.5)
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url, timeout=1)


# -- resolve_client: how every env and policy wrapper takes its clients ---------------------------


def test_resolve_client_builds_from_a_config_or_passes_a_client_through():
    canned = CannedClient(["x"])
    assert resolve_client(canned, "user") is canned
    built = resolve_client({"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": None}, "judge")
    assert (type(built), built.role, built.backend, built.model) == (LLMClient, "judge", "http", "m")
    config = LLMConfig(base_url="http://127.0.0.1:9/v1", model="n")
    assert resolve_client(config, "light").config is config
    embedded = resolve_client(None, "user")  # None: the embedded model (loaded on the first call, not here)
    assert (embedded.role, embedded.backend, embedded.model) == ("user", "embedded", "qwen2.5-coder-1.5b")


@pytest.mark.parametrize(("kwargs", "named"), [({}, "user_llm must be"), ({"name": "light"}, "light must be")])
def test_resolve_client_names_the_argument_it_refuses(kwargs, named):
    with pytest.raises(ConfigError, match=named) as err:
        resolve_client("gpt-4o", "user", **kwargs)
    assert "'gpt-4o'" in str(err.value) and "LLMConfig" in str(err.value)


def test_a_built_client_names_its_model_once(caplog):
    # gym.make(..., user_llm=CONFIG) builds the client: which model plays the role is said once per process
    with CannedServer() as srv, caplog.at_level(logging.INFO, logger="ifgym"):
        config = {"base_url": srv.base_url, "model": srv.model, "api_key_env": None}
        for _ in range(2):
            resolve_client(config, "judge")
        given = http_client(srv, "user")
        assert resolve_client(given, "user") is given  # a client passed in is the caller's own: not announced
        host = srv.base_url.split("//")[1].split("/")[0]
    said = [r.getMessage() for r in caplog.records if r.name == "ifgym.llm.client"]
    assert said == [f"the judge is played by canned-model (http {host})"]


def test_the_embedded_model_is_announced_as_a_warning_before_it_loads(caplog):
    with caplog.at_level(logging.WARNING, logger="ifgym"):
        resolve_client({"embedded_model": "smollm2-135m"}, "user")
    (record,) = [r for r in caplog.records if r.name == "ifgym.llm.client"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "the user is played by the embedded model smollm2-135m (embedded), on this CPU"
    )
