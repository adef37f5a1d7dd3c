"""No credential anywhere: an `ifgym eval` with canary credentials (in the URL, the API key variable and a
custom header), logged to W&B offline and run on Ray, or swept with `-m` against a server that echoes them
in its error bodies, leaves none of them in any file it or the libraries it uses wrote (run folders, Hydra's
records, W&B's run files, Ray's logs), nor in what it printed; nor does `--cfg job`."""

from __future__ import annotations

import base64
import json
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


def echo(headers: dict[str, str]) -> dict:
    """A gateway's error body that echoes the credentials it was sent (the Basic pair decoded too)."""
    auth = headers.get("authorization", "")
    decoded = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else ""
    message = f"rejected: headers {json.dumps(headers)}; basic user:password {decoded}"
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def ok(text: str) -> dict:
    """A normal chat answer, as a fault entry (the faults are answered in order)."""
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "canned-model", "choices": [choice]}


def test_a_sweep_against_an_echoing_server_and_cfg_job_leave_no_credential_anywhere(tmp_path):
    home = tmp_path / "home"
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    # a key variable whose name says nothing of a key: only `api_key_env` tells that it holds one
    env = {**base, "HOME": str(home), "NETRC": "/nonexistent/netrc", "WANDB_MODE": "offline", "LLM_CRED": API_KEY}
    # job 0 (user:password in the URL: Basic auth): its first request echoed, job 1 (the key: Bearer) likewise
    faults = [(400, {}, echo), (200, {}, ok("Fine.")), (200, {}, ok("Fine.")), (400, {}, echo)]
    with CannedServer(replies=["A short reply."], faults=faults) as server:
        secret_url = server.base_url.replace("http://", f"http://{USER}:{PASSWORD}@")
        overrides = ["policy=openai", f"policy.llm.base_url={secret_url},{server.base_url}"]
        overrides += ["policy.llm.model=canned-model", "policy.llm.api_key_env=LLM_CRED", "policy.llm.max_retries=0"]
        overrides += [f"+policy.llm.headers={{X-Gateway-Key:{HEADER}}}", "logger=wandb", "episodes=2"]
        overrides += ["env.max_turns=2", "concurrency=1", "max_failure_rate=1", "ci_resamples=200"]
        sweep = subprocess.run(
            [sys.executable, "-m", "ifgym.cli", "eval", "-m", *overrides],
            capture_output=True,
            timeout=600,
            cwd=tmp_path,
            env=env,
        )
        cfg = subprocess.run(
            [
                sys.executable,
                "-m",
                "ifgym.cli",
                "eval",
                "--cfg",
                "job",
                *overrides[:1],
                f"policy.llm.base_url={secret_url}",
            ]
            + overrides[2:],
            capture_output=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )
        headers, statuses = list(server.headers), list(server.statuses)
    err = sweep.stderr.decode(errors="replace")
    assert sweep.returncode == 1, err  # an echoed error failed one episode of each job
    assert cfg.returncode == 0 and b"X-Gateway-Key: [redacted]" in cfg.stdout, cfg.stderr
    # the canaries were in use: Basic for job 0, the key for job 1, the header for both; echoed twice
    assert all(h.get("x-gateway-key") == HEADER for h in headers)
    assert {h.get("authorization") for h in headers} == {f"Basic {CANARIES[-1].decode()}", f"Bearer {API_KEY}"}
    assert statuses.count(400) == 2
    (sweep_dir,) = (tmp_path / "runs").iterdir()
    jobs = [sweep_dir / "0", sweep_dir / "1"]
    for job in jobs:
        assert list(job.glob("wandb/offline-run-*/run-*.wandb")) and (job / ".hydra" / "overrides.yaml").is_file()
        summary = json.loads((job / "summary.json").read_text())
        assert summary["failures"]["episodes"] == 1 and "rejected: headers" in json.dumps(summary["failures"])
    assert b"#0 : " in sweep.stdout and b"#1 : " in sweep.stdout  # Hydra's launch lines, printed
    assert leaks([tmp_path]) == []  # run folders, .hydra, multirun.yaml, sweep table, W&B (run folders and HOME)
    printed = sweep.stdout + sweep.stderr + cfg.stdout + cfg.stderr
    assert [c.decode() for c in CANARIES if c in printed] == []
