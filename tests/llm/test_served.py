"""Served models through the `openai` SDK (`ifgym.llm.served`), against real servers on 127.0.0.1.

CannedServer stands in for an OpenAI-compatible model server (and for Azure OpenAI's routes); `scripted`
servers write the raw bytes of their answers (asyncio streams on 127.0.0.1), so what the SDK's transport
must refuse or keep apart is played for real over TCP: each test checks what the user relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import threading
import time

import pytest
from support.canned_server import CannedServer
from support.tls import localhost_tls

from ifgym.errors import (
    BackendError,
    BackendTimeoutError,
    ConfigError,
    RateLimitError,
    ServerError,
    UnreachableError,
)
from ifgym.llm import LLMConfig, make_client
from ifgym.llm.embeddings import EmbeddingClient

HI = [{"role": "user", "content": "hello there"}]


def client_for(base_url: str, **settings):
    return make_client({"base_url": base_url, "model": "canned-model", "api_key_env": None, **settings}, "policy")


def completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "canned-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }
    ).encode()


def answer(status: bytes, body: bytes, *headers: bytes) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: application/json\r\n"
        + b"".join(headers)
        + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


@contextlib.contextmanager
def scripted(*answers_per_connection: list[bytes]):
    """A server whose n-th connection answers its n-th request with the n-th list's bytes, in order.

    Runs on its own loop in a thread (the client's sync calls block this one); stops after 30 s at most.
    Yields (base_url, requests seen, connections made).
    """
    seen: list[bytes] = []
    connections = [0]
    ready, state = threading.Event(), {"tasks": set(), "writers": []}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state["tasks"].add(asyncio.current_task())
        state["writers"].append(writer)
        answers = answers_per_connection[min(connections[0], len(answers_per_connection) - 1)]
        connections[0] += 1
        try:
            for raw in answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(v)
                        for k, _, v in (x.partition(b":") for x in head.split(b"\r\n"))
                        if k.lower() == b"content-length"
                    ),
                    0,
                )
                seen.append(head + await reader.readexactly(length))
                writer.write(raw)  # one write: a second answer's bytes arrive with the first
                await writer.drain()
            await asyncio.wait_for(reader.read(), 2)  # b"" once the client closes
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        state["port"], state["stop"] = server.sockets[0].getsockname()[1], asyncio.Event()
        ready.set()
        async with server:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state["stop"].wait(), 30)
            for writer in state["writers"]:  # connections the client left open: their reads end
                writer.transport.abort()
            await asyncio.gather(*state["tasks"], return_exceptions=True)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}/v1", seen, connections
    finally:
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(10)


# -- what the SDK does: retries, timeouts, compression, TLS, proxies ---------------------------------


def test_429_with_retry_after_and_5xx_are_retried_by_the_sdks_rules_and_counted():
    faults = [(429, {"retry-after": "0.4"}), (503, {}), (500, {})]
    with CannedServer(replies=["Finally."], faults=faults) as server:
        client = client_for(server.base_url, max_retries=3)
        start = time.perf_counter()
        out = client.chat(HI)
        waited = time.perf_counter() - start
    assert server.statuses == [429, 503, 500, 200]
    # the SDK tells the server which attempt each is; its retry-after (0.4 s) and two backoffs (>= 0.375 s each)
    assert [h["x-stainless-retry-count"] for h in server.headers] == ["0", "1", "2", "3"]
    assert waited >= 0.4 + 2 * 0.375
    assert out.text == "Finally." and out.retries == 3
    assert client.usage.retries == 3 and client.usage.calls == 1


def test_retries_that_run_out_are_a_named_error_and_still_counted():
    with CannedServer(faults=[(429, {"retry-after-ms": "10"})] * 3) as server:
        client = client_for(server.base_url, max_retries=2)
        with pytest.raises(
            RateLimitError, match=r"HTTP 429 .*retried up to 2 times.*policy\.concurrency|`concurrency`"
        ):
            client.chat(HI)
    assert server.statuses == [429, 429, 429] and client.usage.retries == 2


def test_x_should_retry_false_is_obeyed():
    with CannedServer(faults=[(500, {"x-should-retry": "false"})]) as server:
        client = client_for(server.base_url, max_retries=3)
        with pytest.raises(ServerError, match="HTTP 500"):
            client.chat(HI)
    assert server.statuses == [500]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_timed_out_request_is_not_sent_again(mode):
    with CannedServer(replies=["late"], delay=1.5) as server:
        client = client_for(server.base_url, timeout=0.3, max_retries=3)
        start = time.perf_counter()
        with pytest.raises(
            BackendTimeoutError, match=r"did not answer within 0\.3s \(after 0 retries\); not sent again"
        ):
            client.chat(HI) if mode == "sync" else asyncio.run(client.achat(HI))
        assert time.perf_counter() - start < 1.2  # no second attempt, no backoff
        time.sleep(1.4)  # anything sent again would have reached the server by now
        assert len(server.requests) == 1
    assert client.usage.retries == 0


def test_a_refused_connection_is_retried_then_named():
    with CannedServer() as server:
        url = server.base_url
    client = client_for(url, max_retries=2)  # the server is gone: nothing listens on its port
    with pytest.raises(
        UnreachableError, match=r"cannot reach the model server at http://127\.0\.0\.1:\d+/v1 .*after 2 retries"
    ):
        client.chat(HI)
    assert client.usage.retries == 2


def test_a_gzip_answer_is_read():
    body = gzip.compress(completion("Compressed, and read.").decode().encode())
    fault = (200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, body)
    with CannedServer(faults=[fault]) as server:
        assert client_for(server.base_url).chat(HI).text == "Compressed, and read."


def test_https_is_verified_against_ssl_cert_file(tmp_path, monkeypatch):
    context, cert_file = localhost_tls(tmp_path)
    with CannedServer(replies=["over TLS"], tls=context) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
        assert client_for(server.base_url, max_retries=0).chat(HI).text == "over TLS"
        monkeypatch.delenv("SSL_CERT_FILE")  # the system's CAs do not know this certificate
        with pytest.raises(UnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
            client_for(server.base_url, max_retries=0).chat(HI)


def test_https_proxy_from_the_environment_is_used(monkeypatch):
    # a plain http server standing in for the proxy: the request comes to it in the absolute form
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    with CannedServer(replies=["through the proxy"]) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
        client = client_for("http://model.example.invalid/v1", max_retries=0)
        assert client.chat(HI).text == "through the proxy"
    assert proxy.targets == ["http://model.example.invalid/v1/chat/completions"]


# -- what the transport refuses or keeps apart ---------------------------------------------------


def test_a_second_responses_bytes_never_change_an_answer_already_returned():
    # the 500 arrives with the bytes of an unasked-for 429 in the same write: its retry-after (8 s) and
    # x-should-retry are not the 500's, so the 500 is retried at once, on a new connection
    foreign = answer(b"429 Too Many Requests", b"{}", b"retry-after: 8\r\n", b"x-should-retry: false\r\n")
    first = answer(b"500 Internal Server Error", b'{"error": {"message": "boom"}}') + foreign
    stale = answer(b"200 OK", completion("STALE-UNSOLICITED"))
    with scripted(
        [first], [answer(b"200 OK", completion("fresh")) + stale], [answer(b"200 OK", completion("next"))]
    ) as (
        url,
        seen,
        connections,
    ):
        client = client_for(url, max_retries=2)
        start = time.perf_counter()
        out = client.chat(HI)
        assert time.perf_counter() - start < 4
        later = client.chat(HI)  # the stale bytes left on the second connection are nobody's answer
    assert out.text == "fresh" and out.retries == 1
    assert later.text == "next" and later.retries == 0
    assert len(seen) == 3 and connections[0] == 3


def test_an_oversized_header_is_refused_by_the_transports_limits():
    huge = answer(b"200 OK", completion("never read"), b"x-padding: " + b"a" * 100_000 + b"\r\n")
    with scripted([huge]) as (url, _, _):
        client = client_for(url, max_retries=0)
        with pytest.raises(BackendError, match="refuses .*LineTooLong") as info:
            client.chat(HI)
    assert "never read" not in str(info.value) and "\n" not in str(info.value)


# -- Azure OpenAI --------------------------------------------------------------------------------


def test_azure_openai_routes_deployment_api_version_and_api_key(monkeypatch):
    monkeypatch.setenv("AZURE_KEY_FOR_TEST", "az-secret")
    with CannedServer(replies=["From Azure."], api_key="az-secret", embed=lambda t: [float(len(t)), 1.0]) as server:
        endpoint = server.base_url.removesuffix("/v1")
        settings = {
            "base_url": endpoint,
            "api_type": "azure",
            "api_version": "2024-10-21",
            "model": "canned-model",  # the deployment
            "api_key_env": "AZURE_KEY_FOR_TEST",
        }
        client = make_client(settings, "judge", "judge.llm")
        assert client.check_server() is None
        assert client.chat(HI).text == "From Azure."
        rows = EmbeddingClient(settings).embed(["ab", "abcd"])
        wrong = make_client({**settings, "api_key_env": None}, "judge", "judge.llm")
        with pytest.raises(BackendError, match="rejected the request"):
            wrong.chat(HI)
    assert server.targets[0] == "/openai/deployments/canned-model/chat/completions?api-version=2024-10-21"
    assert server.targets[1] == "/openai/deployments/canned-model/embeddings?api-version=2024-10-21"
    assert server.gets == ["/openai/models?api-version=2024-10-21"]
    assert server.headers[0]["api-key"] == "az-secret" and "authorization" not in server.headers[0]
    assert rows == [[2.0, 1.0], [4.0, 1.0]]


def test_azure_needs_an_api_version():
    with pytest.raises(ConfigError, match="api_type='azure' needs base_url .* and api_version"):
        LLMConfig(base_url="https://name.openai.azure.com", api_type="azure")


# -- what ifgym refuses before any call ----------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1\r\nX-Evil: injected",
        "http://127.0.0.1:8000/v1X-Evil:\ninjected",
        "http://127.0.0.1:8000/my models/v1",
        "http://127.0.0.1:8000/v1#section",
        "ftp://127.0.0.1:8000/v1",
        "127.0.0.1:8000/v1",
        "http:///v1",
        "http://127.0.0.1:port/v1",
    ],
)
def test_a_bad_base_url_is_refused_in_one_line_naming_the_key(url):
    with pytest.raises(ConfigError) as info:
        make_client({"base_url": url, "model": "m"}, "judge", "judge.llm")
    message = str(info.value)
    assert message.startswith("judge.llm.base_url must be None (embedded model) or an http(s) URL")
    assert "\n" not in message.split("; got ")[0]


def test_a_bad_base_url_is_shown_without_its_credentials():
    with pytest.raises(ConfigError) as info:
        make_client({"base_url": "http://pat:s3cret@host/v1 x?key=k3y", "model": "m"}, "policy", "policy.llm")
    assert "s3cret" not in str(info.value) and "k3y" not in str(info.value)


def test_a_model_named_without_a_base_url_is_refused_not_run_embedded():
    with pytest.raises(ConfigError) as info:
        make_client({"model": "gpt-4o-mini"}, "judge", "judge.llm")
    message = str(info.value)
    assert "`judge.llm.model`='gpt-4o-mini' names a served model but `judge.llm.base_url` is not set" in message
    assert "OPENAI_BASE_URL" in message


def test_openai_base_url_is_not_read(monkeypatch):
    with CannedServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        with pytest.raises(ConfigError, match="base_url` is not set"):
            make_client({"model": server.model}, "policy", "policy.llm")
    assert server.requests == []
