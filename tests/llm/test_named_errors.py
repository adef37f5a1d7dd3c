"""Each way a model call fails is its own BackendError subclass, and a run counts failures by type and status.

A CannedServer on 127.0.0.1 answers each status (429, 5xx, 401/403, 400 with each server's
context-length message, a reset before any byte, a stall); a run through it with a mix of them gives
the counts and examples of `summary.json`'s `failures` and the results table's lines.
"""

from __future__ import annotations

import itertools
import socket
import time

import gymnasium as gym
import pytest
from support.canned_server import CannedServer

import ifgym  # noqa: F401
from ifgym.errors import (
    AuthenticationError,
    BackendError,
    BackendTimeoutError,
    BadRequestError,
    ConnectionDroppedError,
    ContextLengthError,
    NotFoundError,
    RateLimitError,
    ServerError,
    UnreachableError,
)
from ifgym.llm import LLMConfig, make_client
from ifgym.policies import ChatPolicy
from ifgym.runner.report import failure_line
from ifgym.runner.rollout import run

HI = [{"role": "user", "content": "hi"}]


def error(message: str, kind: str = "invalid_request_error", code: str | int | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# The messages servers answer for a conversation longer than the context window (400 unless said).
OPENAI_CONTEXT = error(
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. "
    "Please reduce the length of the messages.",
    code="context_length_exceeded",
)
VLLM_CONTEXT = error(
    "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4096 in the "
    "messages, 1024 in the completion). Please reduce the length of the messages or completion.",
    kind="BadRequestError",
    code=400,
)
VLLM_PROMPT = error(
    "The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
    kind="BadRequestError",
    code=400,
)
LLAMA_CPP_CONTEXT = error(
    "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it",
    kind="exceed_context_size_error",
    code=400,
)
OLLAMA_CONTEXT = error("the input length exceeds the context length", kind="api_error")


def client_for(server, **settings):
    settings = {"max_retries": 0, "api_key_env": None, **settings}
    return make_client(LLMConfig(base_url=server.base_url, model="canned-model", **settings), "policy", "policy.llm")


@pytest.mark.parametrize(
    "fault, named, fragment",
    [
        ((429, {}), RateLimitError, "HTTP 429 .*rate limited.*lower `policy.llm.concurrency`"),
        ((500, {}), ServerError, "HTTP 500 .*server error"),
        ((503, {}), ServerError, "HTTP 503"),
        ((401, {}), AuthenticationError, "401: authentication.*`policy.llm.api_key_env`"),
        ((403, {}), AuthenticationError, "403: authentication"),
        ((400, {}, error("'messages' must not be empty")), BadRequestError, "HTTP 400 .*must not be empty"),
        ((422, {}, error("temperature: value is not a valid float")), BadRequestError, "HTTP 422"),
        ((400, {}, OPENAI_CONTEXT), ContextLengthError, "longer than the context window of model 'canned-model'"),
        ((400, {}, VLLM_CONTEXT), ContextLengthError, "maximum context length is 4096"),
        ((400, {}, VLLM_PROMPT), ContextLengthError, "lower `policy.llm.max_tokens`"),
        ((400, {}, LLAMA_CPP_CONTEXT), ContextLengthError, "exceeds the available context size"),
        ((500, {}, OLLAMA_CONTEXT), ContextLengthError, "HTTP 500"),  # named whatever the status
        ((0, {}), UnreachableError, "cannot reach .*`policy.llm.base_url`"),  # reset before any byte
        ((409, {}), BackendError, "HTTP 409"),  # a status without a name of its own stays the base type
    ],
)
def test_each_answer_maps_to_its_named_type(fault, named, fragment):
    with CannedServer(faults=[fault]) as server:
        with pytest.raises(BackendError, match=fragment) as info:
            client_for(server).chat(HI)
    assert type(info.value) is named  # exactly: a plain 400 is not a context-length error
    assert info.value.status == (fault[0] or None)


def test_a_refused_port_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    client = make_client({"base_url": url, "max_retries": 0, "api_key_env": None}, "judge", "judge.llm")
    with pytest.raises(UnreachableError, match="is the server running.*`judge.llm.base_url`") as info:
        client.chat(HI)
    assert info.value.status is None


def test_an_answer_cut_off_mid_body_is_a_dropped_connection():
    import threading

    with socket.socket() as listener:  # a server that sends half its answer and closes
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve_half():
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"id"')

        threading.Thread(target=serve_half, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        client = make_client({"base_url": url, "model": "m", "max_retries": 0}, "policy", "policy.llm")
        with pytest.raises(ConnectionDroppedError, match="dropped the connection in the middle of its answer"):
            client.chat(HI)


def test_an_unknown_model_is_not_found():
    with CannedServer() as server:
        client = make_client(
            {"base_url": server.base_url, "model": "other", "api_key_env": None}, "policy", "policy.llm"
        )
        with pytest.raises(NotFoundError, match="It serves: canned-model. Set `policy.llm.model`"):
            client.chat(HI)


def test_a_timeout_names_the_roles_key_and_is_not_sent_again():
    with CannedServer(delay=1.5) as server:
        client = make_client(
            {"base_url": server.base_url, "model": "canned-model", "timeout": 0.3, "max_retries": 3},
            "user",
            "env.user_llm",
        )
        with pytest.raises(BackendTimeoutError, match=r"within 0.3s .*raise `env.user_llm.timeout`") as info:
            client.chat(HI)
        # a server still busy with the abandoned request gets no second copy (max_retries allows 3)
        assert len(server.targets) == 1
    assert "lower `env.user_llm.concurrency`" in str(info.value) and info.value.status is None
    assert client.usage.retries == 0


def test_a_run_with_mixed_failures_counts_them_by_type_and_status(tmp_path):
    faults = [(429, {}), (500, {}), (429, {}), (502, {}), (503, {}), (504, {}), (400, {}, VLLM_CONTEXT)]
    calls = itertools.count()

    def reply(body):  # the first answered call (episode 7's first turn) stalls past the client's timeout
        if next(calls) == 0:
            time.sleep(1.2)
        return "Fine."

    with CannedServer(replies=reply, faults=faults) as server:
        client = client_for(server, timeout=0.4)
        result = run(
            lambda: gym.make("ifgym/EvolIF-v1", max_turns=2, patience=None),
            lambda: ChatPolicy(client),
            range(10),
            output=tmp_path / "e.jsonl",
            progress=False,
            concurrency=1,
            max_failure_rate=1,
        )
    failures = result.failures
    assert (failures["episodes"], failures["of"]) == (8, 10)
    assert failures["by_type"] == {
        "ServerError": 4,
        "RateLimitError": 2,
        "ContextLengthError": 1,
        "BackendTimeoutError": 1,
    }
    assert failures["by_status"] == {"429": 2, "500": 1, "502": 1, "503": 1, "504": 1, "400": 1}
    examples = failures["examples"]
    assert [len(examples[t]) for t in failures["by_type"]] == [3, 1, 1, 1]  # at most 3; the same 429 text once
    assert [("HTTP 500" in m, "HTTP 502" in m, "HTTP 503" in m) for m in examples["ServerError"]] == [
        (True, False, False),
        (False, True, False),
        (False, False, True),
    ]
    assert "maximum context length is 4096" in examples["ContextLengthError"][0]
    assert failures["seeds"] == [0, 1, 2, 3, 4, 5, 6, 7]
    lines = failure_line(failures).splitlines()
    assert lines[0] == (
        "failed episodes: 8 of 10 (ServerError 4, RateLimitError 2, ContextLengthError 1, other 1; "
        "HTTP 429 2, 500 1, 502 1, 503 1, 504 1, 400 1); rerun into the same output to retry them"
    )
    assert [line.split(":")[0] for line in lines[1:]] == ["  ServerError", "  RateLimitError", "  ContextLengthError"]


def test_wandb_summary_counts_failures_by_type_and_status():
    from ifgym.runner.tracking import run_summary

    failures = {
        "episodes": 3,
        "of": 9,
        "by_type": {"RateLimitError": 2, "BackendTimeoutError": 1},
        "by_status": {"429": 2},
        "examples": {"RateLimitError": ["HTTP 429"], "BackendTimeoutError": ["did not answer"]},
        "seeds": [1, 4, 7],
    }
    out = run_summary({"episodes": 6, "failures": failures})
    assert {k: v for k, v in out.items() if k.startswith("failures/")} == {
        "failures/episodes": 3,
        "failures/by_type/RateLimitError": 2,
        "failures/by_type/BackendTimeoutError": 1,
        "failures/by_status/429": 2,
    }


def test_the_table_reads_a_summary_written_before_by_status():
    old = {"episodes": 2, "of": 5, "by_type": {"BackendError": 2}, "examples": {"BackendError": "HTTP 429"}}
    assert failure_line(old).splitlines() == [
        "failed episodes: 2 of 5 (BackendError 2); rerun into the same output to retry them",
        "  BackendError: HTTP 429",
    ]
