"""W&B logging: settings precedence (config, then W&B's environment variables, then ifgym's defaults), and what an
offline run holds, read back with W&B's own reader (`wandb leet inspect`, which reads the run's .wandb file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.canned_server import CannedServer
from support.wandb_reader import inspect, offline_runs

from ifgym.errors import ConfigError, UnknownNameError
from ifgym.runner.tracking import TRANSCRIPT_COLUMNS, WandbLogger, api_key_configured, import_wandb, resolve_settings

UNSET = {"project": None, "entity": None, "mode": None, "dir": None, "name": None, "group": None, "tags": None}
NO_KEY = {"NETRC": "/nonexistent/netrc"}  # no API key anywhere: W&B would have nothing to log in with


def settings(env=None, **config):
    return resolve_settings(
        {**UNSET, **config}, run_dir=Path("/runs/r1"), name="r1", group=None, environ={**NO_KEY, **(env or {})}
    )


@pytest.mark.parametrize(
    ("config", "env", "key", "expected"),
    [
        ({}, {}, "project", "ifgym"),  # nothing set: ifgym's default
        ({}, {"WANDB_PROJECT": "myproj"}, "project", "myproj"),  # the environment, when the config says nothing
        ({"project": "cfg"}, {"WANDB_PROJECT": "myproj"}, "project", "cfg"),  # a value set in the config wins
        ({}, {"WANDB_ENTITY": "lab"}, "entity", "lab"),
        ({}, {}, "mode", "offline"),  # no API key: offline, never a login prompt
        ({}, {"WANDB_API_KEY": "k" * 40}, "mode", "online"),  # a key configured: online
        ({}, {"WANDB_MODE": "disabled", "WANDB_API_KEY": "k" * 40}, "mode", "disabled"),
        ({"mode": "offline"}, {"WANDB_MODE": "disabled"}, "mode", "offline"),
        ({}, {"WANDB_MODE": "dryrun"}, "mode", "offline"),  # W&B's old name for offline
        ({}, {}, "dir", "/runs/r1"),  # W&B's files live in the run folder
        ({}, {"WANDB_DIR": "/tmp/wb"}, "dir", "/tmp/wb"),
        ({}, {}, "name", "r1"),
        ({}, {"WANDB_NAME": "nice"}, "name", "nice"),
        ({}, {"WANDB_TAGS": "a, b,,c"}, "tags", ["a", "b", "c"]),  # comma-separated, blanks dropped
        ({"tags": []}, {"WANDB_TAGS": "a"}, "tags", []),  # an explicit empty list is a choice
        ({}, {"WANDB_RUN_GROUP": "g"}, "group", "g"),
    ],
)
def test_settings_precedence(config, env, key, expected):
    assert settings(env, **config)[key] == expected


def test_a_sweep_groups_its_runs_unless_told_otherwise():
    args = {"run_dir": Path("/runs/sweep-1/0"), "name": "sweep-1-0", "group": "sweep-1"}
    assert resolve_settings(UNSET, environ=NO_KEY, **args)["group"] == "sweep-1"
    env = {**NO_KEY, "WANDB_RUN_GROUP": "mine"}
    assert resolve_settings(UNSET, environ=env, **args)["group"] == "mine"


def test_a_bad_mode_names_the_allowed_ones():
    with pytest.raises(UnknownNameError, match="Did you mean 'offline'"):
        settings({"WANDB_MODE": "ofline"})


def test_api_key_from_netrc(tmp_path):
    rc = tmp_path / "netrc"
    rc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    rc.chmod(0o600)
    assert api_key_configured({"NETRC": str(rc)})
    assert not api_key_configured({"NETRC": str(rc), "WANDB_BASE_URL": "https://wandb.example.org"})


def cli(*args, cwd, env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    # W&B stages an artifact's files in its data folder (~/.local/share/wandb by default): the test's own
    staging = {"WANDB_DATA_DIR": str(Path(cwd) / "wandb-data")}
    return subprocess.run(
        [sys.executable, "-m", "ifgym.cli", "eval", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**base, **NO_KEY, "WANDB_SILENT": "true", **staging, **env},
    )


def test_wandb_disabled_logs_nothing(tmp_path):
    r = cli(
        "policy=scripted",
        "logger=wandb",
        "episodes=1",
        "env.max_turns=2",
        "progress=false",
        cwd=tmp_path,
        env={"WANDB_MODE": "disabled"},
    )
    assert r.returncode == 0, r.stderr
    assert "W&B: disabled" in r.stdout
    assert not list(tmp_path.rglob("wandb")) and not list(tmp_path.rglob("*.wandb"))


def test_offline_run_holds_summary_history_charts_and_transcripts(tmp_path):
    # the model under test is a canned server (usage counted per request), W&B runs offline
    with CannedServer(replies=["No."], model="served-model") as server:
        r = cli(
            "policy=openai",
            f"policy.llm.base_url={server.base_url}",
            "policy.llm.model=served-model",
            "logger=wandb",
            "episodes=3",
            "env.max_turns=3",
            "progress=false",
            cwd=tmp_path,
            env={"WANDB_PROJECT": "myproj", "WANDB_TAGS": "nightly,ifgym"},
        )
        calls = len(server.requests)
    assert r.returncode == 0, r.stderr
    (folder,) = (tmp_path / "runs").iterdir()
    (run_file,) = offline_runs(folder)  # offline (no API key), in the run folder
    state = json.loads(inspect(run_file, "--summary"))
    assert state["project"] == "myproj" and state["tags"] == ["nightly", "ifgym"] and state["state"] == "finished"
    summary = state["summary"]
    local = json.loads((folder / "summary.json").read_text())
    assert summary["strict/CSR"] == local["strict"]["CSR"] and summary["strict/ISR"] == local["strict"]["ISR"]
    assert [summary["strict/CSR/ci_low"], summary["strict/CSR/ci_high"]] == local["ci"]["strict"]["CSR"]
    assert summary["loose/ISR"] == local["loose"]["ISR"] and summary["episodes"] == 3
    assert summary["usage/policy/calls"] == calls == local["usage"]["policy"]["calls"]
    assert summary["usage/policy/prompt_tokens"] == local["usage"]["policy"]["prompt_tokens"] > 0
    assert not [k for k in summary if k.startswith("episode/")]  # the summary is the run's, not the last episode's
    assert state["config"]["run_key"] == folder.name.rsplit("-", 1)[1]
    assert state["config"]["protocol"]["env_id"] == local["protocol"]["env_id"]

    records = [json.loads(line) for line in inspect(run_file).splitlines()]
    history = [rec["history"]["item"] for rec in records if rec["type"] == "history"]
    episodes = [h for h in history if "episode/seed" in h]
    assert sorted(h["episode/seed"] for h in episodes) == [0, 1, 2]
    by_seed = {h["episode/seed"]: h for h in episodes}
    played = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    for ep in played:  # one history step per episode: its own length, metrics and policy calls
        h = by_seed[ep["seed"]]
        assert h["episode/length"] == len(ep["turns"]) == h["episode/policy/calls"]
        assert "episode/CSR" in h and "episode/loose/CSR" in h
    (run,) = [rec["run"] for rec in records if rec["type"] == "run"]
    assert run["project"] == "myproj"
    panels = {}
    for rec in records:
        if rec["type"] == "config":
            for key, value in rec["config"]["update"].items():
                if key.startswith("_wandb.visualize."):
                    panels[key.removeprefix("_wandb.visualize.")] = value["panel_config"]["panelDefId"]
    assert panels["charts/survival"] == "wandb/line/v0"  # native charts, not only images
    assert panels["charts/group_pass_rates_strict"] == panels["charts/group_pass_rates_loose"] == "wandb/bar/v0"
    assert summary["plots/survival_plot"]["_type"] == "image-file"

    table = json.loads((run_file.parent / "files" / summary["transcripts"]["path"]).read_text())
    assert table["columns"] == list(TRANSCRIPT_COLUMNS)
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert len(rows) == sum(len(e["turns"]) for e in played)
    first = played[0]["turns"][0]
    row = next(r for r in rows if r["seed"] == played[0]["seed"] and r["turn"] == first["index"])
    assert row["reply"] == "No." and row["reward"] == first["reward"] and row["patience"] == first["patience"]
    ids = [c["id"] for c in first["spec"]["constraints"]]  # each line names the constraint it is about
    assert [line.split(": ", 1)[0] for line in row["strict"].splitlines()] == ids
    for mode, key in (("strict", "verdicts"), ("loose", "loose_verdicts")):
        assert [line.split(": ", 1)[1] for line in row[mode].splitlines()] == [v["label"] for v in first[key]]
        assert [line.split(": ", 1)[1] for line in row[f"{mode}_reasons"].splitlines()] == [
            v["reason"] for v in first[key]
        ]


def test_sweep_jobs_are_grouped_by_the_sweep(tmp_path):
    r = cli(
        "-m",
        "env.patience=1,2",
        "policy=scripted",
        "logger=wandb",
        "episodes=1",
        "env.max_turns=2",
        "progress=false",
        "plots=false",
        cwd=tmp_path,
        env={},
    )
    assert r.returncode == 0, r.stderr
    (sweep,) = (tmp_path / "runs").glob("sweep-*")
    groups, names = set(), set()
    for job in ("0", "1"):
        (run_file,) = offline_runs(sweep / job)
        (run,) = [json.loads(line)["run"] for line in inspect(run_file).splitlines() if '"type":"run"' in line]
        groups.add(run["run_group"])
        names.add(run["display_name"])
    assert groups == {sweep.name} and names == {f"{sweep.name}-0", f"{sweep.name}-1"}


def test_public_argv_shows_libraries_the_arguments_without_credentials_and_restores_them(monkeypatch):
    # W&B (eval, train, agreement) reads sys.argv while a run starts; inside the block it reads the public form,
    # the credentials as the variables the recorded command names
    from ifgym.runner.redaction import public_argv

    argv = ["ifgym", "eval", "policy.llm.base_url=http://u:canary-pw-7@127.0.0.1:9/v1", "episodes=2"]
    monkeypatch.setattr(sys, "argv", list(argv))
    with public_argv():
        url = "http://${oc.env:IFGYM_POLICY_LLM_BASE_URL_USERINFO}@127.0.0.1:9/v1"
        assert sys.argv == ["ifgym", "eval", f"policy.llm.base_url={url}", "episodes=2"]
    assert sys.argv == argv


def test_logger_wandb_without_wandb_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if the wandb extra were not installed
    with pytest.raises(ConfigError, match=r"logger=wandb needs Weights & Biases: pip install 'ifgym\[wandb\]'"):
        import_wandb()
    with pytest.raises(ConfigError, match=r"ifgym\[wandb\]"):
        WandbLogger({"dir": str(tmp_path)}, config={}, run_key="k", summarize=dict)


def test_an_offline_run_logs_the_run_files_as_an_artifact_and_stores_its_id(tmp_path):
    import base64
    import hashlib

    wandb_dir, data_dir = tmp_path / "wb", tmp_path / "wb-data"
    r = cli(
        "policy=scripted",
        "logger=wandb",
        "episodes=2",
        "env.max_turns=2",
        "progress=false",
        cwd=tmp_path,
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_DATA_DIR": str(data_dir)},
    )
    assert r.returncode == 0, r.stderr
    (folder,) = (tmp_path / "runs").iterdir()
    (run_dir,) = wandb_dir.glob("wandb/offline-run-*")
    # the id is stored, in run.json and summary.json, and it is the one W&B named its run folder by
    stored = json.loads((folder / "run.json").read_text())["wandb"]
    assert run_dir.name.endswith("-" + stored["id"]) and (run_dir / f"run-{stored['id']}.wandb").is_file()
    assert stored == {"id": stored["id"], "project": "ifgym", "entity": None, "mode": "offline", "url": None}
    assert json.loads((folder / "summary.json").read_text())["run"]["wandb"] == stored
    (run_file,) = run_dir.glob("run-*.wandb")
    records = [json.loads(line) for line in inspect(run_file).splitlines()]
    # (W&B logs the transcript table and the charts' tables as artifacts of their own types)
    (artifact,) = [
        rec["artifact"] for rec in records if rec["type"] == "artifact" and rec["artifact"]["type"] == "evaluation"
    ]
    # named after the run's settings, as its folder (`<env>-<run_key>`): each evaluation of them is a version
    assert artifact["name"] == folder.name
    assert artifact["run_id"] == stored["id"]
    metadata = json.loads(artifact["metadata"])
    assert metadata["run_key"] == folder.name.rsplit("-", 1)[1] and metadata["episodes"] == 2
    files = {entry["path"]: entry for entry in artifact["manifest"]["contents"]}
    written = ["episodes.jsonl", "summary.json", "run.json", "survival.png", "group_pass_rates.png"]
    assert sorted(files) == sorted(written)
    for name in written:  # each file as the run wrote it: W&B's digest is the base64 of its MD5
        data = (folder / name).read_bytes()
        assert files[name]["digest"] == base64.b64encode(hashlib.md5(data).digest()).decode()
        assert int(files[name]["size"]) == len(data)
        staged = Path(files[name]["local_path"])  # the copy `wandb sync` uploads
        assert staged.is_relative_to(data_dir) and staged.read_bytes() == data
