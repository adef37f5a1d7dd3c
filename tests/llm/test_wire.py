"""The model client's HTTP/1.1 transport (`ifgym.llm.wire`) against real sockets on 127.0.0.1.

`scripted` servers stand in for misbehaving model servers: each connection gets the bytes of its answers
written out here, so every framing the transport must read (Content-Length, chunked, ended by the close)
and every way a server can fail is played for real over TCP.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib

import pytest
from support.canned_server import CannedServer
from support.tls import localhost_tls

from ifgym.errors import BackendError, ConfigError, UnreachableError
from ifgym.llm import make_client, wire

HI = [{"role": "user", "content": "hello there"}]


@contextlib.asynccontextmanager
async def scripted(*answers_per_connection: list[bytes | None], hold: float = 0.05):
    """A server whose n-th connection answers its requests with the n-th list of raw answers, in order.

    None in a list closes the connection instead of answering; after its answers a connection is closed
    `hold` seconds later, or once the client closes it. Yields (port, requests seen, connections).
    """
    seen: list[bytes] = []
    connections = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answers = answers_per_connection[min(connections[0], len(answers_per_connection) - 1)]
        connections[0] += 1
        try:
            for answer in answers:
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
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
            else:
                await asyncio.wait_for(reader.read(), hold)  # b"" once the client closes
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], seen, connections


def ok(body: bytes, *extra: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + b"".join(extra)
        + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def pool(port: int, **kwargs) -> wire.Pool:
    settings = {"headers": {"Authorization": "Bearer k"}, "limit": 4, "timeout": 5.0} | kwargs
    return wire.Pool(f"http://127.0.0.1:{port}/v1", **settings)


def test_answers_framed_by_length_chunks_or_the_close_are_read_whole():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Seen: One\r\nx-seen: two\r\n\r\n"
    chunked += b'4\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n'
    # an interim 103 first (servers may send one unasked), then the answer, ended by the close
    until_close = (
        b'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nConnection: close\r\n\r\n{"b":2}'
    )

    async def go():
        async with scripted([ok(b'{"x":1}'), chunked, until_close]) as (port, seen, connections):
            p = pool(port)
            first = await p.request("POST", f"http://127.0.0.1:{port}/v1/chat/completions", b'{"q":1}')
            second = await p.request("GET", f"http://127.0.0.1:{port}/v1/models?all=1")
            third = await p.request("GET", f"http://127.0.0.1:{port}/v1/models")
            await p.close()
            return first, second, third, seen, connections[0]

    first, second, third, seen, connections = asyncio.run(go())
    assert first == (200, {"content-type": "application/json", "content-length": "7"}, b'{"x":1}')
    assert second.status == 200 and second.body == b'{"a":1}' and second.headers["x-seen"] == "One"  # the first kept
    assert third == (201, {"connection": "close"}, b'{"b":2}')
    assert connections == 1  # all three on one kept-alive connection
    assert seen[0].startswith(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % int(seen[0].split(b":")[2].split(b"\r")[0])
    )
    assert b"Authorization: Bearer k\r\n" in seen[0] and seen[0].endswith(b'Content-Length: 7\r\n\r\n{"q":1}')
    assert seen[1].startswith(b"GET /v1/models?all=1 HTTP/1.1\r\n") and b"Content-Length" not in seen[1]


def test_a_kept_alive_connection_the_server_closed_is_replaced_without_a_failure():
    async def go():
        # the first connection answers once and then closes (as an idle timeout would); the second answers
        async with scripted([ok(b"1")], [ok(b"2")]) as (port, seen, connections):
            p = pool(port)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            first = await p.request("POST", url, b"{}")
            await asyncio.sleep(0.2)  # the server closes the idle connection
            second = await p.request("POST", url, b"{}")
            await p.close()
            return first.body, second.body, connections[0]

    assert asyncio.run(go()) == (b"1", b"2", 2)

    async def closed_as_the_request_arrives():
        # the server reads the second request on the kept-alive connection and closes it unanswered (the race
        # between its idle timeout and the request): sent once more, on a new connection
        async with scripted([ok(b"1"), None], [ok(b"2")]) as (port, seen, connections):
            p = pool(port)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            answers = [(await p.request("POST", url, b"{}")).body for _ in range(2)]
            await p.close()
            return answers, len(seen), connections[0]

    assert asyncio.run(closed_as_the_request_arrives()) == ([b"1", b"2"], 3, 2)


def test_each_way_a_server_fails_is_its_own_error():
    async def failure(*answers: list[bytes | None], hold: float = 0.05) -> Exception:
        async with scripted(*answers, hold=hold) as (port, _, _):
            p = pool(port, timeout=1.0)
            try:
                await p.request("POST", f"http://127.0.0.1:{port}/v1/chat/completions", b"{}")
            except Exception as exc:  # noqa: BLE001 - the error is what is tested
                return exc
            finally:
                await p.close()
        raise AssertionError("the request did not fail")

    async def go():
        closed = await failure([None])
        dropped = await failure([b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial'])
        not_http = await failure([b"SSH-2.0-OpenSSH_9.6\r\n\r\n"])
        cut = await failure([b"HTTP/1.1 200 OK\r\nContent-Len"])  # closed 0.05 s later, inside the head
        silent = await failure([b"HTTP/1.1 200 OK\r\nContent-Len"], hold=5.0)  # then nothing, past the 1 s timeout
        return closed, dropped, not_http, cut, silent

    closed, dropped, not_http, cut, silent = asyncio.run(go())
    assert isinstance(closed, wire.ClosedBeforeAnswer)
    assert isinstance(dropped, wire.DroppedMidAnswer)
    assert isinstance(not_http, wire.NotHTTP) and "SSH-2.0" in str(not_http)
    assert isinstance(cut, wire.DroppedMidAnswer)
    assert isinstance(silent, TimeoutError)
    with socket_free_port() as port:
        with pytest.raises(wire.CannotConnect, match="ConnectionRefusedError"):
            asyncio.run(pool(port).request("GET", f"http://127.0.0.1:{port}/v1/models"))


@contextlib.contextmanager
def socket_free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield port


def test_at_most_limit_requests_at_once_and_the_wait_counts_against_the_timeout():
    async def go(server: CannedServer):
        p = wire.Pool(server.base_url, headers={}, limit=2, timeout=5.0)
        url = server.base_url + "/chat/completions"
        body = b'{"model": "canned-model", "messages": [{"role": "user", "content": "hi"}]}'
        answers = await asyncio.gather(*(p.request("POST", url, body) for _ in range(6)))
        waited = await asyncio.gather(
            p.request("POST", url, body, timeout=5.0),
            p.request("POST", url, body, timeout=5.0),
            p.request("POST", url, body, timeout=0.45),
            return_exceptions=True,
        )
        await p.close()
        return answers, waited

    with CannedServer(delay=0.3) as server:
        answers, waited = asyncio.run(go(server))
    assert [a.status for a in answers] == [200] * 6
    assert server.max_in_flight == 2 and len(set(server.ports)) == 2  # two connections, kept alive
    # the third waits 0.3 s for a slot, then its own 0.3 s answer does not fit in 0.45 s
    assert [type(w) for w in waited] == [wire.Answer, wire.Answer, TimeoutError]


def test_https_is_verified_against_the_trusted_certificates(tmp_path, monkeypatch):
    context, cert_file = localhost_tls(tmp_path)
    with CannedServer(replies=["over TLS"], tls=context) as server:
        assert server.base_url.startswith("https://localhost:")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
        client = make_client(
            {"base_url": server.base_url, "model": server.model, "api_key_env": None, "max_retries": 0}
        )
        assert client.chat(HI).text == "over TLS"
        monkeypatch.delenv("SSL_CERT_FILE")  # the system's CAs do not know this certificate
        untrusted = make_client(
            {"base_url": server.base_url, "model": server.model, "api_key_env": None, "max_retries": 0}
        )
        with pytest.raises(UnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.chat(HI)


@contextlib.contextmanager
def tunnel_proxy(answer: bytes | None = None):
    """A CONNECT proxy on 127.0.0.1 (a thread with its own loop); `answer` replaces its 200 (a refusal)."""
    import threading

    seen: list[bytes] = []
    ready = threading.Event()
    state: dict = {}

    async def pipe(reader, writer):
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(reader, writer):
        state["tasks"].add(asyncio.current_task())
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        if answer is not None:
            writer.write(answer)
            writer.close()
            return
        host, _, port = head.split(b" ")[1].decode().rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        state["port"], state["stop"], state["tasks"] = server.sockets[0].getsockname()[1], asyncio.Event(), set()
        ready.set()
        async with server:
            await asyncio.wait_for(state["stop"].wait(), 60)
            for task in state["tasks"]:  # tunnels still piping
                task.cancel()
            await asyncio.gather(*state["tasks"], return_exceptions=True)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield state["port"], seen
    finally:
        loop.call_soon_threadsafe(state["stop"].set)
        thread.join(10)


def test_https_through_a_proxy_goes_through_a_connect_tunnel(tmp_path, monkeypatch):
    context, cert_file = localhost_tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    with CannedServer(replies=["through the tunnel"], tls=context) as server, tunnel_proxy() as (port, seen):
        monkeypatch.setenv("HTTPS_PROXY", f"http://pat:s3cret@127.0.0.1:{port}")
        client = make_client({"base_url": server.base_url, "model": server.model, "api_key_env": None})
        assert client.chat(HI).text == "through the tunnel"
    authority = server.base_url.split("/")[2]
    credentials = base64.b64encode(b"pat:s3cret").decode()
    connect = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Basic {credentials}\r\n\r\n"
    assert seen == [connect.encode()]
    assert server.targets == ["/v1/chat/completions"]  # inside the tunnel: the origin form


def test_a_proxy_that_refuses_the_tunnel_is_named(tmp_path, monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    with tunnel_proxy(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n") as (port, _):
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        client = make_client(
            {"base_url": "https://model.example.invalid/v1", "model": "m", "api_key_env": None, "max_retries": 0}
        )
        with pytest.raises(UnreachableError, match="refused the tunnel: 'HTTP/1.1 407 Proxy Authentication Required'"):
            client.chat(HI)


def test_a_redirect_is_not_followed_and_its_target_is_named():
    async def go():
        moved = b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://api.example.invalid/v1/chat/completions\r\n"
        moved += b"Content-Length: 0\r\n\r\n"
        async with scripted([moved]) as (port, _, _):
            client = make_client({"base_url": f"http://127.0.0.1:{port}/v1", "model": "m", "api_key_env": None})
            with pytest.raises(BackendError) as err:
                await client.achat(HI)
            return err.value

    err = asyncio.run(go())
    assert err.status == 308
    assert "redirect to https://api.example.invalid/v1/chat/completions" in str(err) and "base_url" in str(err)


def test_a_header_that_would_split_the_request_or_a_socks_proxy_is_a_config_error(monkeypatch):
    with pytest.raises(ValueError, match="line break"):
        wire.Pool("http://127.0.0.1:1/v1", headers={"X-Team": "a\r\nX-Injected: 1"}, limit=1, timeout=1.0)
    settings = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key_env": None}
    client = make_client(settings | {"headers": {"X-Team": "a\r\nX-Injected: 1"}}, config_key="policy.llm")
    with pytest.raises(ConfigError, match=r"header 'X-Team' has a line break.*check `policy.llm.headers`"):
        client.chat(HI)
    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "socks5://pat:s3cret@127.0.0.1:1080")
    with pytest.raises(ConfigError, match="socks5://127.0.0.1 is not http://") as err:
        make_client(settings).chat(HI)
    assert "s3cret" not in str(err.value)
