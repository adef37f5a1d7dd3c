"""A real OpenAI-compatible HTTP server on 127.0.0.1 that answers with canned replies.

Tests that exercise the HTTP path (llm, env, CLI, rollout) start one of these instead of a model::

    with CannedServer(replies=["Hello."]) as srv:
        client = make_client({"base_url": srv.base_url, "model": srv.model}, "policy")
        client.chat([{"role": "user", "content": "hi"}])
        assert srv.requests[0]["messages"][-1]["content"] == "hi"

Serves ``POST /v1/chat/completions`` (OpenAI schema, with ``usage`` counted in whitespace words)
and ``GET /v1/models``; with ``embed`` (a function text -> list of floats) also ``POST
/v1/embeddings`` (OpenAI schema: one ``data`` row per input, with its ``index``; without ``embed``
the route is a 404). A request with ``"stream": true`` gets the same reply as server-sent
events, as OpenAI streams it: ``chat.completion.chunk`` events (the role, the text in pieces, the
finish reason; then the usage in a chunk without choices when ``stream_options.include_usage``
is set) and ``data: [DONE]``. A request for another model gets a 404 with an OpenAI-style error body.
A reply longer than the request's ``max_tokens`` (counted in words) is cut there, finish reason ``length``.
``faults`` are (status, headers) pairs answered to the first chat requests, in order, e.g.
``[(429, {"retry-after": "0.2"}), (500, {})]``; a third item, if given, is the body to send instead
of an OpenAI-style error: a dict is sent as JSON (e.g. ``(200, {}, {"choices": []})`` for a
malformed answer), bytes as they are (a gzip-compressed body with its ``Content-Encoding``, say),
a string as it is, labelled ``text/html`` unless the fault's headers set a
``Content-Type`` (e.g. ``(200, {"Content-Type": "application/json"}, "{not json")``, or an HTML
error page from a gateway); a function is given the request's headers and makes the body (a
gateway that echoes the credentials it was sent). A fault of status ``0`` closes the connection without answering a byte
(a server that crashed or reset the connection).
``logprobs`` (a function of the request body giving the first answer token's alternatives as
(token, log-probability) pairs, likeliest first) makes a request with ``"logprobs": true`` get them
in ``choices[0].logprobs.content``, at most ``top_logprobs`` of them, as OpenAI and llama.cpp's
server send them; without it such a request is answered without log-probabilities, as by a server
that does not support them.
Azure OpenAI's routes are served too: ``POST /openai/deployments/{deployment}/chat/completions`` (and
``/embeddings``) with an ``api-version`` query, the deployment standing for the model, and ``GET
/openai/models``; there ``api_key`` is checked in the ``api-key`` header, as Azure reads it, and a
request without ``api-version`` gets a 404, as Azure answers it.
``list_models=False`` makes ``GET /v1/models`` answer 404 (a server without the listing), ``also_lists``
names more models it lists (it serves only ``model``), and ``api_key`` makes every request without
``Authorization: Bearer <api_key>`` get a 401, listing included. With ``slots=N`` it presents itself as
llama.cpp's server does: its models are ``owned_by: llamacpp`` and ``GET /props`` gives ``total_slots``.
The server stops itself after ``ttl`` seconds or ``max_requests`` requests, so a forgotten
server cannot hang a test run. Connections are kept alive (HTTP/1.1), as model servers keep them,
so a client's connection pool is exercised; stopping closes them.

Run as a program (``python tests/support/canned_server.py --delay 0.2``) it serves in a process of
its own (benchmarks: its CPU is not the client's, and it holds no GIL the client needs), prints its
base URL, and on end of standard input prints the CPU seconds it spent serving and exits.

What it records: ``gets`` (the path of every GET), ``requests`` (every chat request body, faulted
ones included, in arrival order), ``statuses`` (the status answered to each), ``headers`` (each
one's request headers, names lower-cased), ``embedding_requests`` (every embeddings request
body), ``ports`` (the client port each came from: one per connection) and ``max_in_flight`` (the
most chat requests being served at the same time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Sequence[str] | Callable[[dict[str, Any]], str]


class CannedServer:
    """OpenAI-compatible chat server with scripted replies and faults; a context manager."""

    def __init__(
        self,
        replies: Reply = ("OK.",),
        *,
        model: str = "canned-model",
        faults: Sequence[tuple[int, dict[str, str]] | tuple[int, dict[str, str], Any]] = (),
        delay: float = 0.0,
        include_usage: bool = True,
        max_requests: int = 1000,
        ttl: float = 120.0,
        list_models: bool = True,
        also_lists: Sequence[str] = (),
        api_key: str | None = None,
        slots: int | None = None,
        embed: Callable[[str], Sequence[float]] | None = None,
        logprobs: Callable[[dict[str, Any]], list[tuple[str, float]]] | None = None,
        tls: ssl.SSLContext | None = None,
    ):
        if isinstance(replies, str) or (not callable(replies) and not replies):
            raise ValueError("replies must be a non-empty list of strings or a function body -> str")
        self.replies = replies
        self.model = model
        self.faults = list(faults)
        self.delay = delay
        self.include_usage = include_usage
        self.max_requests = max_requests
        self.ttl = ttl
        self.list_models = list_models
        self.also_lists = list(also_lists)
        self.api_key = api_key
        self.slots = slots
        self.embed = embed
        self.embedding_requests: list[dict[str, Any]] = []
        self.logprobs = logprobs
        self.tls = tls  # serve https (base_url https://localhost:PORT/v1) with this server context
        self.gets: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.headers: list[dict[str, str]] = []
        self.targets: list[str] = []  # each chat request's target as sent (absolute through a proxy)
        self.ports: list[int] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._handled = 0
        self._next_reply = 0
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None
        self._stopped = threading.Event()

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. http://127.0.0.1:PORT/v1."""
        if self._httpd is None:
            raise RuntimeError("CannedServer is not running; use it as a context manager")
        if self.tls is not None:
            return f"https://localhost:{self._httpd.server_address[1]}/v1"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> CannedServer:
        handler = type("Handler", (_Handler,), {"canned": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        httpd = self._httpd
        if self.tls is not None:  # the handshake runs in the handler's thread, not the accepting one
            httpd.socket = self.tls.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._timer = threading.Timer(self.ttl, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent); later connections are refused."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for connection in open_connections:  # kept-alive connections would otherwise go on being served
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- called by the handler ------------------------------------------------------------------

    def _count_request(self) -> bool:
        """Count one request; past max_requests stop the server (from another thread) and refuse."""
        with self._lock:
            self._handled += 1
            over = self._handled > self.max_requests
        if over:
            threading.Thread(target=self.stop, daemon=True).start()
        return not over

    def _answer_chat(
        self, body: dict[str, Any], headers: dict[str, str], port: int
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.ports.append(port)
            self.statuses.append(0)  # filled in below, so statuses[i] always belongs to requests[i]
            index = len(self.requests) - 1
        status, headers, out = self._reply(index, body, headers)
        with self._lock:
            self.statuses[index] = status
        return status, headers, out

    def _reply(
        self, index: int, body: dict[str, Any], request_headers: dict[str, str]
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        if index < len(self.faults):
            status, headers, *body_given = self.faults[index]
            out = body_given[0] if body_given else _error_body(f"injected fault {status}", "server_error", None)
            if callable(out):  # a body made from the request's headers (a gateway echoing what it was sent)
                out = out(request_headers)
            return status, dict(headers), out
        if body.get("model") != self.model:
            message = f"The model `{body.get('model')}` does not exist or you do not have access to it."
            return 404, {}, _error_body(message, "invalid_request_error", "model_not_found")
        if callable(self.replies):
            text = self.replies(body)
        else:
            with self._lock:
                text = self.replies[self._next_reply % len(self.replies)]
                self._next_reply += 1
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        finish = "stop"
        limit = body.get("max_tokens")
        if isinstance(limit, int) and len(text.split()) > limit:  # as a model server does: cut at max_tokens
            text, finish = " ".join(text.split()[:limit]), "length"
        completion = len(text.split())
        out: dict[str, Any] = {
            "id": f"chatcmpl-canned-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        }
        if body.get("logprobs") and self.logprobs is not None:
            top = self.logprobs(body)[: int(body.get("top_logprobs") or 1)]
            alternatives = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]
            out["choices"][0]["logprobs"] = {"content": [{**alternatives[0], "top_logprobs": alternatives}]}
        if self.include_usage:
            out["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return 200, {}, out

    def _answer_embeddings(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.embedding_requests.append(body)
        if body.get("model") != self.model:
            message = f"The model `{body.get('model')}` does not exist or you do not have access to it."
            return 404, _error_body(message, "invalid_request_error", "model_not_found")
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return 400, _error_body("input must be a string or a list of strings", "invalid_request_error", None)
        rows = [{"object": "embedding", "index": i, "embedding": list(self.embed(t))} for i, t in enumerate(texts)]
        words = sum(len(t.split()) for t in texts)
        usage = {"prompt_tokens": words, "total_tokens": words}
        return 200, {"object": "list", "data": rows, "model": self.model, "usage": usage}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default 5 drops connections when many clients connect at once


def _error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    canned: CannedServer  # set on a per-server subclass
    protocol_version = "HTTP/1.1"  # keep-alive: every reply carries a Content-Length
    # Headers and body go out in two writes; with Nagle on, the body waits for the client's delayed ACK
    # (40 ms on Linux) on a kept-alive connection. Model servers (uvicorn) turn it off too.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        with self.canned._lock:
            self.canned._connections.add(self.connection)

    def finish(self) -> None:
        with self.canned._lock:
            self.canned._connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the base
        """Keep test output quiet; the server records what tests need."""

    def _send(self, status: int, body: dict[str, Any] | str | bytes, headers: dict[str, str] | None = None) -> None:
        raw = isinstance(body, str | bytes)
        if isinstance(body, bytes):
            data = body
        else:
            data = body.encode("utf-8", "surrogatepass") if raw else json.dumps(body).encode()
        self.send_response(status)
        if not any(key.lower() == "content-type" for key in headers or {}):
            self.send_header("Content-Type", "text/html; charset=utf-8" if raw else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        try:
            self.end_headers()  # flushes the headers: the first write
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
            pass

    def _refused_key(self) -> bool:
        """Answer 401 (True) when the server wants a key and the request does not carry it (Azure: `api-key`)."""
        key = self.canned.api_key
        if self.path.startswith("/openai/"):
            given = self.headers.get("api-key")
        else:
            given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if key is None or given == key:
            return False
        self._send(401, _error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
        return True

    def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
        if not self.canned._count_request():
            return self._send(503, _error_body("server stopped (max_requests)", "server_error", None))
        with self.canned._lock:
            self.canned.gets.append(self.path)
        if self._refused_key():
            return
        where = urllib.parse.urlsplit(self.path)
        if where.path.startswith("/openai/") and "api-version" not in urllib.parse.parse_qs(where.query):
            return self._send(404, _error_body("Resource not found", "invalid_request_error", "404"))
        if self.canned.list_models and where.path.rstrip("/") in ("/v1/models", "/openai/models"):
            ids = [self.canned.model, *self.canned.also_lists]
            owner = "ifgym-tests" if self.canned.slots is None else "llamacpp"
            models = [{"id": i, "object": "model", "created": 0, "owned_by": owner} for i in ids]
            return self._send(200, {"object": "list", "data": models})
        if self.canned.slots is not None and urllib.parse.urlsplit(self.path).path == "/props":
            return self._send(200, {"total_slots": self.canned.slots, "model_path": f"{self.canned.model}.gguf"})
        self._send(404, _error_body(f"no route {self.path}", "invalid_request_error", None))

    def do_POST(self) -> None:  # noqa: N802 - name fixed by http.server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.canned._count_request():
            return self._send(503, _error_body("server stopped (max_requests)", "server_error", None))
        self.canned.targets.append(self.path)
        if self._refused_key():
            return
        # a target in absolute form (a request through a proxy) is served too, as HTTP/1.1 servers must
        where = urllib.parse.urlsplit(self.path)
        route = where.path.rstrip("/")
        deployment = re.fullmatch(r"/openai/deployments/([^/]+)/(chat/completions|embeddings)", route)
        if route.startswith("/openai/") and (deployment is None or "api-version" not in where.query):
            return self._send(404, _error_body("Resource not found", "invalid_request_error", "404"))
        if deployment is not None:  # Azure: the deployment is the model, whatever the body says
            route = f"/v1/{deployment.group(2)}"
        if route == "/v1/embeddings" and self.canned.embed is not None:
            try:
                body = json.loads(raw)
                if deployment is not None:
                    body["model"] = deployment.group(1)
                return self._send(*self.canned._answer_embeddings(body))
            except json.JSONDecodeError as exc:
                return self._send(400, _error_body(f"invalid JSON: {exc}", "invalid_request_error", None))
        if route != "/v1/chat/completions":
            return self._send(404, _error_body(f"no route {self.path}", "invalid_request_error", None))
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
            return self._send(400, _error_body(f"invalid JSON: {exc}", "invalid_request_error", None))
        if deployment is not None:
            body["model"] = deployment.group(1)
        srv = self.canned
        with srv._lock:
            srv._in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv._in_flight)
        try:
            if srv.delay:
                time.sleep(srv.delay)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, headers, out = srv._answer_chat(body, headers, self.client_address[1])
        finally:
            with srv._lock:
                srv._in_flight -= 1
        if status == 0:  # a crash or reset: the connection closes before any byte of an answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if status == 200 and body.get("stream"):
            return self._stream(out, include_usage=bool((body.get("stream_options") or {}).get("include_usage")))
        self._send(status, out, headers)

    def _stream(self, out: dict[str, Any], include_usage: bool) -> None:
        """Send a completion as OpenAI's streaming chunks (server-sent events)."""
        text = out["choices"][0]["message"]["content"]
        base = {"id": out["id"], "object": "chat.completion.chunk", "created": out["created"], "model": out["model"]}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        pieces = [text[i : i + 16] for i in range(0, len(text), 16)]
        events = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in pieces)]
        events.append(chunk({}, out["choices"][0]["finish_reason"]))
        if include_usage and "usage" in out:
            events.append({**base, "choices": [], "usage": out["usage"]})
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def eval_args(server: CannedServer, out: Any, episodes: int) -> list[str]:
    """`ifgym eval` arguments for a quick run of policy=openai against `server` (2 turns, no plots or intervals)."""
    return [
        "eval",
        "policy=openai",
        f"policy.llm.base_url={server.base_url}",
        "policy.llm.model=canned-model",
        f"episodes={episodes}",
        "env.max_turns=2",
        f"output={out}",
        "progress=false",
        "plots=false",
        "ci=false",
    ]


@contextlib.contextmanager
def server_in_child(cmd: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Run a server command in a child process (the benchmarks' servers: their CPU is not the driver's).

    The child prints its base URL first, serves until its standard input ends, then prints one JSON
    line (what it measured), which is added to the yielded {"base_url": ...} on exit.
    """
    proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    info = {"base_url": proc.stdout.readline().strip()}
    try:
        yield info
    finally:
        proc.stdin.close()
        info.update(json.loads(proc.stdout.readline()))
        proc.wait(timeout=30)


def main() -> None:
    """Serve canned replies until standard input ends; then print the CPU seconds spent serving."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--reply", default="A short reply about it.", help="the text of every answer")
    parser.add_argument("--model", default="canned-model")
    args = parser.parse_args()
    with CannedServer([args.reply], model=args.model, delay=args.delay, max_requests=10**9, ttl=86_400) as server:
        print(server.base_url, flush=True)
        start = time.process_time()
        sys.stdin.read()
        print(json.dumps({"cpu_s": time.process_time() - start, "requests": len(server.requests)}), flush=True)


if __name__ == "__main__":
    main()
