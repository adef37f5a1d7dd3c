"""Ray for the tests: the ray extra or a failing run (never a silent skip), and a cluster started by `ray start`.

`import_ray()` is how the Ray tests import `ray`: without the extra they fail, saying how to
install it. `RayHead` starts a real Ray head node with the venv's `ray` CLI (`ray start --head
--block`, its own free port and temp folder) for tests that join an existing cluster by address,
and stops exactly that node: SIGTERM to the `ray start` process (it stops the processes it
started), then SIGKILL to its session, each wait bounded. Never `ray stop`: it would stop every
Ray instance of the user on the machine, other test runs' included.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ifgym.runner.ray_executor  # noqa: F401  (sets Ray's environment: no usage stats, no token auth)


def import_ray() -> Any:
    """`ray`, or an ImportError that says to install the ray extra (the Ray tests fail without it, never skip)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "the Ray tests need the ray extra: pip install 'ifgym[ray]' (make's set-up installs it)"
        ) from exc
    return ray


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead:
    """A Ray head node with `num_cpus` CPUs started by `ray start`; `address` is `127.0.0.1:<port>`."""

    def __init__(self, num_cpus: int = 2, start_timeout: float = 120.0, stop_timeout: float = 30.0):
        self.num_cpus, self.start_timeout, self.stop_timeout = num_cpus, start_timeout, stop_timeout
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RayHead:
        import_ray()
        self.temp = Path(tempfile.mkdtemp(prefix="ifgym-ray-"))  # short: Ray's socket paths have a length limit
        self.log = self.temp / "ray-start.log"
        command = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--head",
            "--block",
            f"--num-cpus={self.num_cpus}",
            f"--port={self.port}",
            "--include-dashboard=false",
            "--node-ip-address=127.0.0.1",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--temp-dir={self.temp}",  # its address file too: a bare ray.init() elsewhere does not find it
            "--disable-usage-stats",
        ]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ)
            )
        deadline = time.monotonic() + self.start_timeout
        while "Ray runtime started" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = self.log.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"`ray start --head` did not come up:\n{output}")
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the node this object started (its session's processes), then remove its temp folder."""
        process = self.process
        if process is not None and process.returncode is None:
            process.terminate()  # `ray start --block` stops the processes it started on SIGTERM
            self._exited(process.pid)
            try:  # what is left of its session (a new session: the group id is its pid, still held, not reaped)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(self.stop_timeout)
        shutil.rmtree(self.temp, ignore_errors=True)

    def _exited(self, pid: int) -> bool:
        """Wait (bounded) for `pid` to exit without reaping it, so its id cannot be reused meanwhile."""
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
            time.sleep(0.2)
        return False
