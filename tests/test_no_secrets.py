"""No credential anywhere: an `ifgym eval` with canary credentials (in the URL, the API key variable and a
custom header), logged to W&B offline and run on Ray, leaves none of them in any file it or the libraries
it uses wrote (run folder, Hydra's records, W&B's run files, Ray's logs), nor in what it printed."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.canned_server import CannedServer

USER, PASSWORD = "canary-user-4d1e", "canary-password-7f3a"
API_KEY = "canary-api-key-91c2"
HEADER = "canary-header-5e0b"
CANARIES = [PASSWORD.encode(), USER.encode(), API_KEY.encode(), HEADER.encode()]
CANARIES.append(base64.b64encode(f"{USER}:{PASSWORD}".encode()))  # as a basic-auth header would carry them


def processes_naming(folder: Path) -> list[str]:
    """Command lines of the processes that name `folder` (the run's Ray instance's temp folder)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in command:
            found.append(command.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


def leaks(folders: list[Path]) -> list[str]:
    """`file: canary` for every canary found in the bytes of any file under `folders` (binary files too)."""
    found = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [f"{path}: {c.decode()}" for c in CANARIES if c in data]
    return found


@pytest.fixture
def ray_temp():
    """A short folder for the run's Ray instance (Ray's socket paths have a length limit), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_canary_credentials_reach_the_server_and_no_file_or_output(tmp_path, ray_temp):
    home = tmp_path / "home"
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env = {
        **base,
        "HOME": str(home),  # W&B's settings, cache and staging files land under it, where they are searched
        "NETRC": "/nonexistent/netrc",
        "WANDB_MODE": "offline",
        "IFGYM_CANARY_KEY": API_KEY,
        "TMPDIR": str(ray_temp),  # the Ray instance the run starts gets its folder here
    }
    with CannedServer(replies=["A short reply."]) as server:
        url = server.base_url.replace("http://", f"http://{USER}:{PASSWORD}@")
        r = subprocess.run(
            [sys.executable, "-m", "ifgym.cli", "eval", "policy=openai", f"policy.llm.base_url={url}"]
            + ["policy.llm.model=canned-model", "policy.llm.api_key_env=IFGYM_CANARY_KEY"]
            + [f"+policy.llm.headers={{X-Gateway-Key:{HEADER}}}", "logger=wandb", "executor=ray"]
            + ["executor.num_workers=2", "episodes=3", "env.max_turns=2", "ci_resamples=200"],
            capture_output=True,
            timeout=600,
            cwd=tmp_path,
            env=env,
        )
        headers = list(server.headers)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    # the canaries were in use: the server saw the header and the URL's credentials (as basic auth)
    assert headers and all(h.get("x-gateway-key") == HEADER for h in headers)
    assert all(h.get("authorization") == f"Basic {CANARIES[-1].decode()}" for h in headers)
    (folder,) = (tmp_path / "runs").iterdir()
    assert list(folder.glob("wandb/offline-run-*/run-*.wandb")) and list(ray_temp.rglob("*.log"))
    assert (folder / ".hydra" / "overrides.yaml").is_file()

    assert leaks([tmp_path, ray_temp]) == []  # run folder, Hydra, W&B (in the run folder and HOME), Ray
    printed = r.stdout + r.stderr  # the progress bar, the results, the messages
    assert [c.decode() for c in CANARIES if c in printed] == []
    assert "Ray: a local instance with 2 CPUs" in err and "SIGTERM handler is not set" not in err
    assert processes_naming(ray_temp) == []  # the run's Ray instance ended with it
