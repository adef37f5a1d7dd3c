"""Policies: ChatPolicy over a real CannedServer, ScriptedPolicy, and the no-leak import rule."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
from support.canned_server import CannedServer

import ifgym
from ifgym.errors import ConfigError, DataFormatError
from ifgym.llm import CannedClient, make_client
from ifgym.policies import ChatPolicy, Policy, ScriptedPolicy, embedded_policy

USER = {"role": "user", "content": "write a haiku"}
OWN_SYSTEM = {"role": "system", "content": "env system message"}


def server_client(srv: CannedServer):
    return make_client({"base_url": srv.base_url, "model": srv.model, "api_key_env": None}, "policy")


# -- ChatPolicy ----------------------------------------------------------------------------------


def test_chat_policy_over_http_forwards_overrides_and_reports_usage():
    with CannedServer(replies=["an old silent pond"]) as srv:
        policy = ChatPolicy(server_client(srv), system_prompt="Be brief.", temperature=0.3, max_tokens=20)
        reply = policy.act([USER])
        areply = asyncio.run(policy.aact([USER]))
    assert reply == areply == "an old silent pond"
    assert [m["role"] for m in srv.requests[0]["messages"]] == ["system", "user"]
    assert (srv.requests[1]["temperature"], srv.requests[1]["max_tokens"]) == (0.3, 20)
    assert policy.usage == {
        "calls": 2,
        "prompt_tokens": 10,
        "completion_tokens": 8,
        "missing_usage": 0,
        "retries": 0,
        "cleaned": 0,
        "truncated": 0,
        "max_tokens_stops": 0,
    }
    assert policy.last is not None and policy.last.finish_reason == "stop"


@pytest.mark.parametrize(
    ("system_prompt", "messages", "expected"),
    [
        # no system message in the observation: the policy's prompt goes first
        ("Be brief.", [USER], [{"role": "system", "content": "Be brief."}, USER]),
        # the env brought its own system message: it wins, nothing is added
        ("Be brief.", [OWN_SYSTEM, USER], [OWN_SYSTEM, USER]),
        # no system prompt configured: the observation is sent as it is
        (None, [USER], [USER]),
        # an empty string is still a deliberate system prompt
        ("", [USER], [{"role": "system", "content": ""}, USER]),
    ],
)
def test_system_prompt_handling(system_prompt, messages, expected):
    client = CannedClient(["ok"])
    ChatPolicy(client, system_prompt=system_prompt).act(messages)
    assert client.requests == [expected]


def test_chat_policy_does_not_mutate_the_observation():
    obs = [dict(USER)]
    ChatPolicy(CannedClient(["ok"]), system_prompt="S").act(obs)
    assert obs == [USER]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"temprature": 0.1}, "Did you mean 'temperature'"),  # typo in a generation setting
        ({"model": "x"}, "unknown generation setting 'model'"),  # the model is fixed by the client
        ({"system_prompt": 3}, "system_prompt must be a string"),  # wrong type
    ],
)
def test_chat_policy_rejects_bad_settings(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ChatPolicy(CannedClient(["ok"]), **kwargs)


def test_chat_policy_needs_a_client():
    with pytest.raises(ConfigError, match="client with chat/achat"):
        ChatPolicy("http://127.0.0.1:8000/v1")


def test_chat_policy_rejects_bad_observations():
    with pytest.raises(DataFormatError, match="role 'tool'"):
        ChatPolicy(CannedClient(["ok"])).act([{"role": "tool", "content": "x"}])


# -- ScriptedPolicy ------------------------------------------------------------------------------


def test_scripted_policy_cycles_and_reset_restarts():
    policy = ScriptedPolicy(["a", "b", "c"])
    assert [policy.act([USER]) for _ in range(5)] == ["a", "b", "c", "a", "b"]
    policy.reset()
    assert policy.act([USER]) == "a"
    assert asyncio.run(policy.aact([USER])) == "b"
    assert policy.usage == {
        "calls": 7,
        "prompt_tokens": 21,
        "completion_tokens": 7,
        "missing_usage": 0,
        "retries": 0,
        "cleaned": 0,
        "truncated": 0,
        "max_tokens_stops": 0,
    }


def test_scripted_policy_from_a_function_sees_the_messages():
    policy = ScriptedPolicy(lambda msgs: f"{len(msgs)} messages, last: {msgs[-1]['content']}")
    assert policy.act([OWN_SYSTEM, USER]) == "2 messages, last: write a haiku"


@pytest.mark.parametrize(
    ("replies", "fragment"),
    [
        ("just one string", "not one string"),  # a str is a Sequence but surely a mistake
        ([], "non-empty list"),  # nothing to say
        (["ok", 3], "non-empty list of strings"),  # a non-string reply
    ],
)
def test_scripted_policy_rejects_bad_replies(replies, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ScriptedPolicy(replies)


def test_scripted_function_must_return_a_string():
    with pytest.raises(ConfigError, match="must return a string; got NoneType"):
        ScriptedPolicy(lambda msgs: None).act([USER])


# -- the Policy base -----------------------------------------------------------------------------


def test_policy_needs_act_and_usage():
    class NoAct(Policy):
        @property
        def usage(self):
            return {}

    with pytest.raises(TypeError):
        NoAct()


def test_default_aact_runs_act():
    class Upper(Policy):
        def act(self, messages):
            return messages[-1]["content"].upper()

        @property
        def usage(self):
            return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    assert asyncio.run(Upper().aact([USER])) == "WRITE A HAIKU"


# -- embedded_policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"base_url": "http://127.0.0.1:1/v1"}, "sets base_url itself"),  # embedded means no server
        ({"embedded_model": "smollm2-135m"}, "pass the model as `model=`"),  # two ways to say one thing
        ({"max_tokns": 5}, "Did you mean 'max_tokens'"),  # typo in a config field
    ],
)
def test_embedded_policy_rejects_bad_config(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        embedded_policy("smollm2-135m", **kwargs)


@pytest.mark.embedded
def test_embedded_policy_answers_with_smollm2():
    policy = embedded_policy("smollm2-135m", n_ctx=1024, max_tokens=8, system_prompt="Answer briefly.")
    reply = policy.act([{"role": "user", "content": "What colour is the sky?"}])
    assert isinstance(reply, str) and reply.strip()
    assert policy.usage["calls"] == 1 and 0 < policy.usage["completion_tokens"] <= 8


# -- leak rule: the model under test sees only chat messages --------------------------------------

FORBIDDEN = ("ifgym.simulators", "ifgym.rewards", "ifgym.envs")


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module a file imports (relative imports resolved against ifgym.policies)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "ifgym.policies".rsplit(".", node.level - 1)[0] if node.level > 1 else "ifgym.policies"
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def is_forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


POLICY_FILES = sorted((Path(ifgym.__file__).parent / "policies").glob("*.py"))
# policies import ifgym.llm, so it must stay clean too
CHECKED_FILES = [*POLICY_FILES, *sorted((Path(ifgym.__file__).parent / "llm").glob("*.py"))]


def test_policy_package_has_files_to_check():
    assert {p.name for p in POLICY_FILES} >= {"__init__.py", "base.py", "chat.py"}


@pytest.mark.parametrize("path", CHECKED_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_policies_import_nothing_from_simulators_rewards_envs(path):
    bad = sorted(m for m in imported_modules(path) if is_forbidden(m))
    assert bad == [], f"{path} imports {bad}: policies may only see chat messages"


def test_leak_checker_catches_a_forbidden_import(tmp_path):
    # the checker itself must be able to fail: every spelling of a forbidden import is found
    sample = tmp_path / "leaky.py"
    sample.write_text(
        "import ifgym.envs\nfrom ifgym.rewards import scorer\nfrom ifgym import simulators\nfrom ..envs import base\n"
    )
    found = imported_modules(sample)
    assert {"ifgym.envs", "ifgym.rewards", "ifgym.simulators", "ifgym.envs.base"} <= found
    assert not is_forbidden("ifgym.llm") and not is_forbidden("ifgym.envsx")
