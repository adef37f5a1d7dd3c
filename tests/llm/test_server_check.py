"""Before the first episode each role's server is asked for its models once; a wrong URL, key or model ends the run.

Every case is a real server on 127.0.0.1 (CannedServer, or a socket that never answers); the CLI
cases check that `ifgym eval` stops with one line naming the setting to change, before any episode.
"""

from __future__ import annotations

import json
import socket

import pytest
from support.canned_server import CannedServer, eval_args

from ifgym.cli import main
from ifgym.errors import AuthenticationError, BackendTimeoutError, ConfigError, NotFoundError, UnreachableError
from ifgym.llm import LLMConfig, check_servers, make_client

HI = [{"role": "user", "content": "hi"}]


def policy_client(base_url, **settings):
    return make_client({"base_url": base_url, "api_key_env": None, **settings}, "policy", "policy.llm")


def test_a_server_that_serves_the_model_passes_with_nothing_to_say():
    with CannedServer() as server:
        assert check_servers([policy_client(server.base_url, model="canned-model")]) == []
        assert server.gets == ["/v1/models"] and server.requests == []  # one GET, no generation


def test_an_unreachable_url_names_the_base_url_key():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(UnreachableError, match=r"cannot reach .*checked before the run.*`policy.llm.base_url`"):
        check_servers([policy_client(url, model="m")])


def test_a_base_url_without_the_api_prefix_is_refused_with_the_fixed_url():
    with CannedServer() as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(NotFoundError, match=rf"set `policy.llm.base_url`={root}/v1$"):
            check_servers([policy_client(root, model="canned-model")])
        assert server.requests == []


def test_a_rejected_key_names_the_variable_and_the_key(monkeypatch):
    monkeypatch.delenv("IFGYM_TEST_KEY", raising=False)
    with CannedServer(api_key="right-key") as server:
        client = make_client(
            {"base_url": server.base_url, "model": "canned-model", "api_key_env": "IFGYM_TEST_KEY"},
            "judge",
            "judge.llm",
        )
        with pytest.raises(AuthenticationError, match="set the environment variable IFGYM_TEST_KEY.*`judge.llm"):
            check_servers([client])
        monkeypatch.setenv("IFGYM_TEST_KEY", "right-key")
        assert check_servers([make_client(client.config, "judge", "judge.llm")]) == []


def test_a_model_the_server_does_not_list_is_refused_with_the_list():
    with CannedServer(also_lists=["other-model"]) as server:
        with pytest.raises(
            NotFoundError, match=r"Did you mean 'canned-model'\? It serves: canned-model, other-model; "
        ):
            check_servers([policy_client(server.base_url, model="canned-modle")])


def test_an_unset_model_is_taken_from_a_one_model_server_and_used():
    with CannedServer(replies=["Hello."]) as server:
        client = policy_client(server.base_url)  # no model: LLMConfig's default, the embedded model's name
        assert client.model == LLMConfig().model
        (note,) = check_servers([client])
        assert note == (
            f"policy model server: `policy.llm.model` is not set and {server.base_url} serves one model: evaluating "
            "'canned-model' (recorded in run.json)"
        )
        assert client.model == client.config.model == client.describe()["model"] == "canned-model"
        assert client.chat(HI).text == "Hello."
        assert server.requests[0]["model"] == "canned-model"


def test_an_unset_model_with_several_served_is_refused_naming_the_key():
    with CannedServer(also_lists=["b-model"]) as server:
        with pytest.raises(ConfigError, match=r"`policy.llm.model` is not set .*: b-model, canned-model; set `policy"):
            check_servers([policy_client(server.base_url)])


def test_a_server_without_a_model_list_is_allowed_with_a_note():
    with CannedServer(list_models=False) as server:
        (note,) = check_servers([policy_client(server.base_url, model="canned-model")])
        assert note == (
            f"policy model server: {server.base_url} does not list its models (GET /models: 404); model "
            "'canned-model' not checked"
        )
        assert [r["max_tokens"] for r in server.requests] == [1]  # its chat route was asked for one token


def test_a_server_without_a_model_list_or_chat_route_at_that_url_is_refused():
    with CannedServer(list_models=False) as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(
            NotFoundError, match=r"404 to GET /models and to POST /chat/completions.*`policy.llm.base_url`"
        ):
            check_servers([policy_client(root, model="canned-model")])


def test_a_server_that_does_not_answer_in_time_names_the_timeout_key():
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        client = make_client({"base_url": url, "model": "m", "timeout": 0.3}, "user", "env.user_llm")
        with pytest.raises(BackendTimeoutError, match=r"within 0.3s.*raise `env.user_llm.timeout`"):
            check_servers([client])


def test_a_llama_cpp_server_with_fewer_slots_than_the_concurrency_gets_a_note():
    with CannedServer(slots=1) as server:
        (note,) = check_servers([policy_client(server.base_url, model="canned-model", concurrency=4, timeout=60)])
        assert note == (
            "policy model server: this llama.cpp server has 1 slot(s) and `policy.llm.concurrency` is 4: the other "
            "requests queue there, and the wait counts against `policy.llm.timeout` (60s); set "
            "`policy.llm.concurrency`=1 or start the server with --parallel 4"
        )
        assert check_servers([policy_client(server.base_url, model="canned-model", concurrency=1)]) == []
        assert server.gets[-2:] == ["/v1/models", "/props"]
    with CannedServer() as other:  # a server that is not llama.cpp's is not asked for /props
        check_servers([policy_client(other.base_url, model="canned-model", concurrency=4)])
        assert other.gets == ["/v1/models"]


def test_embedded_clients_and_test_doubles_are_not_checked():
    from ifgym.llm import CannedClient

    assert check_servers([CannedClient(["x"])]) == []


# -- ifgym eval -----------------------------------------------------------------------------------


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return tmp_path


def test_eval_stops_before_any_episode_on_a_bad_model_name(in_tmp, capsys):
    with CannedServer() as server:
        args = [
            a if not a.startswith("policy.llm.model=") else "policy.llm.model=gpt-4o"
            for a in eval_args(server, in_tmp / "e.jsonl", 2)
        ]
        assert main(args) == 2
        assert server.requests == []  # no episode, no judge audit
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ifgym: error: ") and "set `policy.llm.model` to one of them" in err[-1]
    assert "It serves: canned-model" in err[-1]
    assert not (in_tmp / "e.jsonl").exists()


def test_eval_without_a_model_evaluates_the_one_served_and_records_it(in_tmp, capsys):
    with CannedServer() as server:
        args = [a for a in eval_args(server, in_tmp / "e.jsonl", 1) if not a.startswith("policy.llm.model=")]
        assert main(args) == 0
    assert "`policy.llm.model` is not set" in capsys.readouterr().err
    record = json.loads((in_tmp / "run.json").read_text())
    assert record["models"]["policy"]["model"] == record["config"]["policy"]["llm"]["model"] == "canned-model"


def test_train_stops_before_loading_a_model_on_an_unreachable_judge(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    args = ["train", "trainer=smoke", "judge=llm", f"judge.llm.base_url={url}", "judge.llm.model=m"]
    assert main([*args, f"hydra.run.dir={tmp_path / 'run'}", "progress=false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ifgym: error: ") and "`judge.llm.base_url`" in err[-1]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # stopped before training
