"""HTTP/1.1 for the model client: kept-alive connections on asyncio's transports, answers parsed by httptools.

A model call is one small POST and one JSON answer over a connection to one server, so the client needs
little of a general HTTP library, and at concurrency 64 its CPU per call was most of a turn's: aiohttp's
request and response objects took 0.55-0.60 ms a call here against the canned server, this module
0.19-0.22 ms, orjson included (`python benchmarks/runner.py --only transport`). Parsing is httptools'
(llhttp in C, the parser uvicorn uses); this module frames requests and keeps the connections.

What it does: one origin per `Pool` (http or https, through the proxy the environment names: the
absolute form to an http proxy, a CONNECT tunnel for https), at most `limit` requests at once, each
on a kept-alive connection (a new one when none is idle), a total timeout per request that includes
the wait for a connection, bodies sized by Content-Length, chunked or ended by the close. A kept-alive
connection the server closed while idle is found out when it answers nothing, and the request is sent
once more on a new connection. No redirects, cookies or compression: a model API needs none (a
redirect comes back as its 3xx status).

Failures are the `WireError`s below; `ifgym.llm.http` names them for the user. `httptools` and `ssl`
load on the first pool, not at import.
"""

from __future__ import annotations

import asyncio
import base64
import urllib.parse
from collections.abc import Mapping
from typing import Any, NamedTuple

from ifgym.version import __version__


class WireError(Exception):
    """A request that got no usable answer."""


class Unreached(WireError):
    """No byte of an answer came back: the server was not reached, or closed the connection before answering."""


class CannotConnect(Unreached):
    """No connection: refused, unknown host, a failed TLS handshake, or a proxy that refused the tunnel."""


class ClosedBeforeAnswer(Unreached):
    """The server closed the connection before the first byte of its answer."""


class DroppedMidAnswer(WireError):
    """The server closed the connection in the middle of its answer."""


class NotHTTP(WireError):
    """The server answered bytes that are not an HTTP/1.1 response."""


class Answer(NamedTuple):
    """A server's answer: status, headers (names in lower case, the first of repeated ones) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Connection(asyncio.Protocol):
    """One connection: sends a request, parses its answer, resolves `answer` when the answer is whole."""

    def __init__(self, parser_type: Any, errors: tuple[type[Exception], ...]):
        self._parser_type, self._parse_errors = parser_type, errors
        self.transport: Any = None
        self.reused = False
        self.answer: asyncio.Future[Answer] | None = None
        self._tunnel: asyncio.Future[bytes] | None = None  # set while a proxy's CONNECT answer is awaited
        self._buffer = b""

    def send(self, request: bytes) -> asyncio.Future[Answer]:
        self.parser = self._parser_type(self)
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.got_bytes = self.headers_done = False
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.answer

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._tunnel is not None:
            self._read_tunnel_answer(data)
            return
        if self.answer is None:  # bytes nobody asked for: the connection cannot be trusted with the next request
            self.transport.abort()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except self._parse_errors as exc:
            why = f"{type(exc).__name__}: {exc}; the first bytes: {data[:60]!r}"
            self._fail(NotHTTP(f"the answer is not HTTP/1.1 ({why})"))
            self.transport.abort()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:  # an interim answer (100 Continue, 103): the real one follows
            self.headers, self.body, self.headers_done = {}, [], False
            return
        if not self.parser.should_keep_alive():
            self.transport.close()
        self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tunnel is not None and not self._tunnel.done():
            why = f"the proxy closed the connection before answering CONNECT ({exc or 'EOF'})"
            self._tunnel.set_exception(CannotConnect(why))
        if self.answer is None or self.answer.done():
            return
        why = exc or "EOF"
        if self.headers_done and "content-length" not in self.headers and "transfer-encoding" not in self.headers:
            self._finish()  # a body that ends with the connection
        elif not self.got_bytes:
            self._fail(ClosedBeforeAnswer(f"the server closed the connection before answering ({why})"))
        else:
            self._fail(DroppedMidAnswer(f"the server closed the connection in the middle of its answer ({why})"))

    def _finish(self) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_result(Answer(self.parser.get_status_code(), self.headers, b"".join(self.body)))

    def _fail(self, error: WireError) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)

    async def open_tunnel(self, request: bytes) -> None:
        """Send a proxy's CONNECT and wait for its 2xx (any other answer: CannotConnect)."""
        self._tunnel = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            head = await self._tunnel
        finally:
            self._tunnel = None
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].startswith("2"):
            raise CannotConnect(f"the proxy refused the tunnel: {status_line!r}")

    def _read_tunnel_answer(self, data: bytes) -> None:
        self._buffer += data
        head, sep, rest = self._buffer.partition(b"\r\n\r\n")
        if sep and not self._tunnel.done():
            self._buffer = b""
            if rest:  # the server spoke before the TLS handshake: nothing this client can use
                self._tunnel.set_exception(CannotConnect("the proxy sent bytes after its CONNECT answer"))
            else:
                self._tunnel.set_result(head)


class Pool:
    """Kept-alive connections to the origin of `base_url`: at most `limit` requests at once.

    `headers` go with every request (Host, Content-Length, User-Agent and Accept are the pool's own);
    `proxy` is an http:// proxy URL (credentials in it are sent as Proxy-Authorization) or None;
    `timeout` bounds each request, the wait for a connection included, unless `request` is given one.
    """

    def __init__(
        self, base_url: str, *, headers: Mapping[str, str], limit: int, timeout: float, proxy: str | None = None
    ):
        import httptools

        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL with a host")
        self._parser_type = httptools.HttpResponseParser
        self._parse_errors = (httptools.HttpParserError,)
        self.origin = (parts.scheme, parts.hostname, _port(parts))
        self.timeout = timeout
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self._host = host if parts.port in (None, DEFAULT_PORTS[parts.scheme]) else f"{host}:{parts.port}"
        own = {"host", "content-length", "user-agent", "accept", "connection", "transfer-encoding"}
        fixed = {"User-Agent": f"ifgym/{__version__}", "Accept": "application/json"}
        fixed.update((k, v) for k, v in headers.items() if k.lower() not in own)
        self._proxy = _proxy_address(proxy) if proxy else None
        self._absolute_form = self._proxy is not None and parts.scheme == "http"
        if self._absolute_form and self._proxy[2]:
            fixed["Proxy-Authorization"] = self._proxy[2]
        self._headers = b"".join(_header_line(k, v) for k, v in fixed.items())
        self._ssl: Any = None
        if parts.scheme == "https":
            import ssl

            self._ssl = ssl.create_default_context()  # the system's CAs (SSL_CERT_FILE / SSL_CERT_DIR honoured)
        self._heads: dict[tuple[str, str], bytes] = {}
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def request(self, method: str, url: str, body: bytes | None = None, timeout: float | None = None) -> Answer:
        """One request to `url` (on this pool's origin); raises TimeoutError past the timeout, else a WireError."""
        data = self._request_bytes(method, url, body)
        async with asyncio.timeout(self.timeout if timeout is None else timeout), self._slots:
            while True:
                conn = self._idle.pop() if self._idle else await self._connect()
                if conn.transport.is_closing():
                    self._drop(conn)
                    continue
                try:
                    answer = await conn.send(data)
                except ClosedBeforeAnswer:
                    self._drop(conn)
                    if conn.reused:  # closed by the server while idle: once more on a new connection
                        continue
                    raise
                except BaseException:
                    self._drop(conn)
                    raise
                if conn.transport.is_closing():
                    self._drop(conn)
                else:
                    conn.reused = True
                    self._idle.append(conn)
                return answer

    async def close(self) -> None:
        """Close every connection of the pool."""
        self._idle.clear()
        for conn in list(self._open):
            self._drop(conn)
        await asyncio.sleep(0)  # the transports' connection_lost runs

    def _request_bytes(self, method: str, url: str, body: bytes | None) -> bytes:
        head = self._heads.get((method, url))
        if head is None:  # a pool posts to a handful of URLs: each one's request head is made once
            parts = urllib.parse.urlsplit(url)
            if (parts.scheme, parts.hostname, _port(parts)) != self.origin:
                raise ValueError(f"{url!r} is not on this pool's origin {self.origin}")
            target = url if self._absolute_form else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            head = f"{method} {target} HTTP/1.1\r\nHost: {self._host}\r\n".encode() + self._headers
            self._heads[method, url] = head
        if body is None:
            return head + b"\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, host, port = self.origin
        make = lambda: _Connection(self._parser_type, self._parse_errors)  # noqa: E731
        try:
            if self._proxy is None:
                _, conn = await loop.create_connection(make, host, port, ssl=self._ssl)
            elif self._absolute_form:
                _, conn = await loop.create_connection(make, self._proxy[0], self._proxy[1])
            else:  # https through a proxy: a tunnel, then TLS inside it
                raw, conn = await loop.create_connection(make, self._proxy[0], self._proxy[1])
                try:
                    authority = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
                    auth = _header_line("Proxy-Authorization", self._proxy[2]) if self._proxy[2] else b""
                    head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode()
                    await conn.open_tunnel(head + auth + b"\r\n")
                    conn.transport = await loop.start_tls(raw, conn, self._ssl, server_hostname=host)
                except BaseException:
                    raw.abort()
                    raise
        except OSError as exc:  # refused, unknown host (gaierror), TLS (ssl.SSLError): all OSErrors
            raise CannotConnect(f"{type(exc).__name__}: {exc}") from exc
        self._open.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:  # a connection in use, or one `close` took out of the idle ones
        self._open.discard(conn)
        conn.transport.abort()


def split_credentials(url: str) -> tuple[str, str | None]:
    """The URL without `user:password@`, and those credentials as a basic-auth header value (None without)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), "Basic " + base64.b64encode(pair.encode()).decode()


def _proxy_address(proxy: str) -> tuple[str, int, str | None]:
    """Host, port and Proxy-Authorization value (None without credentials) of an http:// proxy URL."""
    bare, auth = split_credentials(proxy if "://" in proxy else f"http://{proxy}")
    parts = urllib.parse.urlsplit(bare)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the proxy {parts.scheme}://{parts.hostname} is not http:// (the only kind supported)")
    return parts.hostname, _port(parts), auth


DEFAULT_PORTS = {"http": 80, "https": 443}


def _port(parts: urllib.parse.SplitResult) -> int | None:
    """The URL's port, or its scheme's."""
    return parts.port or DEFAULT_PORTS.get(parts.scheme)


def _header_line(name: str, value: str) -> bytes:
    if any(c in name + value for c in "\r\n\0") or not name or ":" in name:
        raise ValueError(f"header {name!r} has a line break, NUL or colon in its name or value; HTTP cannot send it")
    return f"{name}: {value}\r\n".encode()
