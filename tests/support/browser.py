"""A real headless browser for the viewer's tests: Debian's `chromium`, driven over the Chrome DevTools protocol.

`Browser` starts chromium with `--remote-debugging-port=0`, reads the port it took from the
profile's `DevToolsActivePort`, and talks to the page over its websocket (the pinned `websockets`
package, dev extra): navigate, evaluate JavaScript, take a screenshot. No browser is downloaded:
`.ci/run` (make setup) installs chromium with apt. Under CI=true a missing chromium or websockets
fails the test loudly; on a developer's machine it skips, saying what to install.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str:
    """The chromium executable; fails (CI) or skips (elsewhere) the calling test when there is none."""
    found = next((p for p in map(shutil.which, CANDIDATES) if p), None)
    try:
        import websockets.sync.client  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        message = (
            "the viewer's browser tests need Debian's chromium (apt-get install chromium) and websockets (dev extra)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


class Browser:
    """One headless chromium with one page, driven over the DevTools protocol."""

    def __init__(self, width: int = 1280, height: int = 900):
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="ifgym-chromium-")
        self.process = subprocess.Popen(
            [
                chromium_path(),
                "--headless=new",
                "--no-sandbox",  # tests run as root in CI
                "--disable-gpu",
                "--no-proxy-server",
                "--no-first-run",
                "--no-default-browser-check",
                "--allow-file-access-from-files",
                f"--window-size={width},{height}",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self._stack = contextlib.ExitStack()
        self.socket = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, proxy=None))
        self._ids = itertools.count(1)
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events that arrive meanwhile are dropped)."""
        number = next(self._ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=120))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited); a JS exception raises."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still falsy after {timeout} s: {expression}")
            time.sleep(0.05)

    def open(self, url: str) -> None:
        """Load `url` afresh (not a jump within the page already open) and wait until the viewer is ready."""
        self.send("Page.navigate", url="about:blank")
        self.wait_for("location.href === 'about:blank'")
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && window.ifgymReady === true")

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """A PNG of the page (the viewport, or the whole page)."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return path

    def close(self) -> None:
        if getattr(self, "_stack", None) is not None:
            self._stack.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
