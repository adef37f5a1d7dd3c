"""`ifgym eval` as a Hydra app: sweeps (-m) with a sweep table, run folders and hydra.run.dir, --cfg, --info,
user configs (--config-dir/--config-name), and the run record (run.json) every run folder holds."""

from __future__ import annotations

import copy
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.canned_server import CannedServer, eval_args

import ifgym
from ifgym.cli import compose, main
from ifgym.runner.records import run_key, run_name

QUICK = ["policy=scripted", "policy.replies=[A reply.]", "episodes=2", "env.max_turns=3", "progress=false"]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """Run in a fresh folder: run folders go to ./runs by default."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_multirun_sweep_of_two_jobs_writes_two_run_folders_and_a_sweep_table(cwd, capsys):
    # every reply fails its constraints, so each dialogue lasts exactly `patience` turns: EDR_len = patience
    args = ["eval", "-m", "env.patience=1,2", *QUICK, "plots=false"]
    assert main(args) == 0
    out = capsys.readouterr().out
    (sweep,) = (cwd / "runs").glob("sweep-*")
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for num, patience in ((0, 1), (1, 2)):
        job = sweep / str(num)
        assert [len(e["turns"]) for e in lines(job / "episodes.jsonl")] == [patience, patience]
        record = json.loads((job / "run.json").read_text())
        assert record["status"] == "finished" and record["hydra"]["mode"] == "MULTIRUN"
        assert record["hydra"]["job_num"] == num and f"env.patience={patience}" in record["hydra"]["overrides"]
        assert json.loads((job / "summary.json").read_text())["strict"]["EDR_len"] == patience
        assert (job / ".hydra" / "config.yaml").is_file()  # Hydra's own record of the job
    rows = list(csv.DictReader((sweep / "sweep.csv").open()))
    assert [(r["job"], r["varied"], r["status"], r["episodes"]) for r in rows] == [
        ("0", "env.patience=1", "finished", "2"),
        ("1", "env.patience=2", "finished", "2"),
    ]
    assert [float(r["strict/EDR_len"]) for r in rows] == [1.0, 2.0]
    assert [float(r["strict/CSR"]) for r in rows] == [0.0, 0.0]
    assert (sweep / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 1   | env.patience=2 | finished | 2" in out and (sweep / "sweep.md").read_text().startswith(
        "sweep: 2 jobs"
    )

    assert main(args) == 0  # the same command again resumes into the same folders: nothing new is played
    assert list((cwd / "runs").glob("sweep-*")) == [sweep]
    assert [len(lines(sweep / n / "episodes.jsonl")) for n in ("0", "1")] == [2, 2]
    assert main([*args, "episodes=3"]) == 0  # more episodes: still the same sweep folder, one more each
    assert [len(lines(sweep / n / "episodes.jsonl")) for n in ("0", "1")] == [3, 3]


def test_a_failing_sweep_job_is_reported_and_the_others_still_run(cwd, capsys):
    assert main(["eval", "--multirun", "env.max_turns=0,2", *QUICK[:-2], "progress=false", "plots=false"]) == 1
    err = capsys.readouterr().err
    assert "ifgym: error: sweep job #0 (env.max_turns=0" in err and "max_turns must be a positive int" in err
    assert "Traceback" not in err
    (sweep,) = (cwd / "runs").glob("sweep-*")
    rows = list(csv.DictReader((sweep / "sweep.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "failed"), ("1", "finished")]
    assert "max_turns must be a positive int" in rows[0]["error"]
    assert not (sweep / "0").exists()  # it wrote nothing worth keeping
    assert len(lines(sweep / "1" / "episodes.jsonl")) == 2


def test_default_run_folder_is_named_by_the_run_key_and_a_rerun_resumes_into_it(cwd):
    assert main(["eval", *QUICK, "plots=false"]) == 0
    resolved = compose(QUICK)
    from omegaconf import OmegaConf

    folder = cwd / "runs" / run_name(OmegaConf.to_container(resolved, resolve=True))
    env_name = resolved.env.id.split("/")[1]  # the default env, e.g. EvolIF-v1
    assert folder.name == f"{env_name}-{run_key(OmegaConf.to_container(resolved, resolve=True))}"
    assert [e["seed"] for e in lines(folder / "episodes.jsonl")] == [0, 1]
    assert main(["eval", *QUICK, "plots=false", "episodes=3"]) == 0
    assert [e["seed"] for e in lines(folder / "episodes.jsonl")] == [0, 1, 2]
    assert [p.name for p in (cwd / "runs").iterdir()] == [folder.name]


def test_hydra_run_dir_is_honoured(cwd):
    target = cwd / "elsewhere" / "run1"
    assert main(["eval", *QUICK, "plots=false", f"hydra.run.dir={target}"]) == 0
    assert len(lines(target / "episodes.jsonl")) == 2
    assert {"run.json", "summary.json", ".hydra"} <= {p.name for p in target.iterdir()}
    assert not (cwd / "runs").exists()


def test_hydra_sweep_dir_is_honoured(cwd):
    target = cwd / "my_sweep"
    assert main(["eval", "-m", "seed=0,10", *QUICK, "plots=false", f"hydra.sweep.dir={target}"]) == 0
    assert [e["seed"] for e in lines(target / "1" / "episodes.jsonl")] == [10, 11]
    assert (target / "sweep.csv").is_file()


def test_cfg_and_info_print_and_run_nothing(cwd, capsys):
    assert main(["eval", "--cfg", "job", "episodes=7"]) == 0
    assert "episodes: 7" in capsys.readouterr().out
    assert main(["eval", "--cfg"]) == 0  # bare --cfg: the job config
    assert f"env:\n  id: {compose([]).env.id}" in capsys.readouterr().out
    assert main(["eval", "--cfg", "hydra"]) == 0
    assert "sweep:" in capsys.readouterr().out
    # Hydra prints --info through its logger, set up once per process: run it as a user would
    info = subprocess.run(
        [sys.executable, "-m", "ifgym.cli", "eval", "--info", "searchpath"], capture_output=True, text=True
    )
    assert info.returncode == 0 and "pkg://ifgym.conf" in info.stdout
    assert not (cwd / "runs").exists()


def test_user_configs_through_config_dir_and_config_name(cwd, capsys):
    conf = cwd / "myconf"
    (conf / "env").mkdir(parents=True)
    (conf / "env" / "short.yaml").write_text("id: ifgym/EvolIF-v1\npatience: 1\nmax_turns: 2\n")
    (conf / "quick.yaml").write_text(
        "defaults:\n  - config\n  - override env: short\n  - override policy: scripted\n  - _self_\n"
        "policy:\n  replies: [From my config.]\nepisodes: 1\nprogress: false\nplots: false\n"
    )
    assert main(["eval", "--config-dir", str(conf), "--config-name", "quick"]) == 0
    (folder,) = (cwd / "runs").iterdir()
    record = json.loads((folder / "run.json").read_text())
    assert record["config"]["env"]["max_turns"] == 2 and record["config"]["episodes"] == 1
    assert record["hydra"]["config_name"] == "quick"
    assert lines(folder / "episodes.jsonl")[0]["turns"][0]["reply"] == "From my config."
    # a group option of the user's own is offered by a did-you-mean too
    assert main(["eval", "-cd", str(conf), "env=shrt"]) == 2
    assert "Did you mean 'short'" in capsys.readouterr().err


def test_run_record_names_what_produced_the_run_and_keeps_no_secrets(cwd):
    with CannedServer(replies=["A reply from the server."], model="served-model") as server:
        # credentials in a URL must not reach the record; the host does
        url = server.base_url.replace("http://", "http://alice:s3cret@")
        r = subprocess.run(
            [sys.executable, "-m", "ifgym.cli", "eval", "policy=openai", f"policy.llm.base_url={url}"]
            + ["policy.llm.model=served-model", "episodes=2", "env.max_turns=2", "progress=false", "plots=false"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=cwd,
            env={**os.environ, "OPENAI_API_KEY": "sk-never-stored"},
        )
    assert r.returncode == 0, r.stderr
    (folder,) = (cwd / "runs").iterdir()
    raw = (folder / "run.json").read_text()
    assert "s3cret" not in raw and "alice" not in raw and "sk-never-stored" not in raw
    for path in folder.rglob("*"):  # Hydra's own records (.hydra/overrides.yaml …) and every other file
        if path.is_file():
            assert "s3cret" not in path.read_text(errors="replace"), path
    overrides = (folder / ".hydra" / "overrides.yaml").read_text()
    assert f"policy.llm.base_url=http://{server.base_url.split('//')[1]}" in overrides  # the host stays
    record = json.loads(raw)
    host = server.base_url.split("//")[1].split("/")[0]
    assert record["models"] == {"policy": {"model": "served-model", "backend": "http", "host": host}}
    assert record["config"]["policy"]["llm"]["base_url"] == f"http://{host}/v1"
    assert record["config"]["policy"]["llm"]["api_key_env"] == "OPENAI_API_KEY"  # the variable's name, not its value
    assert record["status"] == "finished" and record["started"] <= record["finished"]
    assert record["episodes"] == 2 and record["ifgym_version"] == ifgym.__version__
    assert record["command"].startswith("ifgym eval policy=openai") and "s3cret" not in record["command"]
    assert record["machine"]["cores"] == os.cpu_count() and record["machine"]["cpu"]
    root = Path(ifgym.__file__).parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # run from a checkout: the record names its commit
        assert record["git"]["commit"] == head.stdout.strip()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["run"]["run_key"] == record["run_key"] == folder.name.rsplit("-", 1)[1]
    assert summary["run"]["record"] == "run.json"
    (title,) = [line for line in r.stdout.splitlines() if line.startswith("run: ")]
    assert title.startswith(f"run: {compose([]).env.id} · policy served-model (http 127.0.0.1:")
    assert " · judge rules · 2 episodes · " in title


def test_a_base_url_without_v1_reaches_the_check_base_url_message(cwd):
    # Hydra's comma-joined overrides (`override_dirname`: "…base_url=http://127.0.0.1:PORT,policy.llm.model=…")
    # are no URL; scrubbing Hydra's files must not read a port out of them, and the run's own error shows
    with CannedServer(replies=["A reply."]) as server:
        url = server.base_url.removesuffix("/v1")
        r = subprocess.run(
            [sys.executable, "-m", "ifgym.cli", "eval", "policy=openai", f"policy.llm.base_url={url}"]
            + ["policy.llm.model=fake", "episodes=2", "env.max_turns=2", "progress=false", "plots=false"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=cwd,
        )
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "Port could not be cast" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("ifgym: error:")]
    assert f"{url}/chat/completions" in line or url in line
    assert "base_url" in line and "/v1" in line  # what to check


def test_extra_request_fields_from_the_command_line_reach_the_server_and_the_run_key(cwd):
    # the paper's sampling (temperature 0.7, top_p 0.8, top_k 20): top_k has no field of its own, so it goes in `extra`
    sampling = ["policy.llm.temperature=0.7", "policy.llm.top_p=0.8", "++policy.llm.extra.top_k=20"]
    with CannedServer(replies=["A reply."]) as server:
        assert main([*eval_args(server, cwd / "a" / "episodes.jsonl", 1), *sampling]) == 0
        assert (
            main([*eval_args(server, cwd / "b" / "episodes.jsonl", 1), "+policy.llm.extra={top_k:20,min_p:0.05}"]) == 0
        )
    chats = [body for body in server.requests if body.get("messages")]
    first, second = chats[:2], chats[2:]
    assert first and second and len(chats) == 4  # two turns a run
    assert all((b["temperature"], b["top_p"], b["top_k"]) == (0.7, 0.8, 20) for b in first)
    assert all(b["top_k"] == 20 and b["min_p"] == 0.05 and "top_p" not in b for b in second)
    assert json.loads((cwd / "a" / "run.json").read_text())["config"]["policy"]["llm"]["extra"] == {"top_k": 20}
    # every role takes it; it changes what the model generates, so it is part of the run key (empty: left out)
    roles = ["++policy.light_llm.extra.top_k=5", "+judge.llm.extra={min_p:0.1}", "++env.user_llm.extra.top_k=3"]
    cfg = compose(["env=evolif_llm", *roles])
    assert cfg.policy.light_llm.extra == {"top_k": 5} and cfg.judge.llm.extra == {"min_p": 0.1}
    assert cfg.env.user_llm.extra == {"top_k": 3}

    def key(overrides):
        return run_key(OmegaConf.to_container(compose(overrides), resolve=True))

    before = OmegaConf.to_container(compose([]), resolve=True)  # as a run from before the field was
    for llm in (before["policy"]["llm"], before["policy"]["light_llm"], before["judge"]["llm"]):
        del llm["extra"]
    assert key(["++policy.llm.extra.top_k=20"]) != key([]) == run_key(before)


def test_flexbench_runs_from_before_the_paper_settings_keep_their_run_key():
    key = run_key
    for option in ("flexbench", "flexbench_llm"):
        now = OmegaConf.to_container(compose([f"env={option}"]), resolve=True)
        before = copy.deepcopy(now)
        del before["env"]["pipeline"], before["env"]["metrics"]  # as a run from before the settings was
        assert key(now) == key(before)
    # the paper's settings define other episodes: another key
    paper = OmegaConf.to_container(compose(["env=flexbench", "env.metrics=paper"]), resolve=True)
    assert key(paper) != key(OmegaConf.to_container(compose(["env=flexbench"]), resolve=True))


# Run keys of 44518c1 (before the paper presets of issues 19 and 20): settings added since, at their earlier
# value, must leave them as they were, or every older run folder stops resuming.
KEYS_BEFORE_THE_PAPER_PRESETS = {
    ("evolif", "openai"): "2b96ae56cf8e",
    ("flexbench", "context_agent"): "ecc0901dfb6e",
    ("ntm", "graphif"): "39993355b4ab",
    ("structflow", "truncation"): "80d55300a3f4",
}
# what changed on purpose since, and made other runs: env=ntm plays ifgym/NTM-v1 (checkpoints keep their
# negations), and truncation answers with 1024 tokens as the methods it is compared with (it had 200)
CHANGED_SINCE = {
    ("ntm", "graphif"): ["env.id=ifgym/NTM-v0"],
    ("structflow", "truncation"): ["policy.llm.max_tokens=200"],
}


@pytest.mark.parametrize(("env", "policy"), sorted(KEYS_BEFORE_THE_PAPER_PRESETS))
def test_runs_from_before_the_paper_presets_keep_their_run_key(env, policy):
    cfg = OmegaConf.to_container(compose([f"env={env}", f"policy={policy}"]), resolve=True)
    earlier = OmegaConf.to_container(
        compose([f"env={env}", f"policy={policy}", *CHANGED_SINCE.get((env, policy), [])]), resolve=True
    )
    assert run_key(earlier) == KEYS_BEFORE_THE_PAPER_PRESETS[env, policy]
    assert (run_key(cfg) == run_key(earlier)) == ((env, policy) not in CHANGED_SINCE)


def test_a_summary_model_of_its_own_changes_context_agents_run_key():
    def key(overrides):
        cfg = compose(["env=flexbench", "policy=context_agent", *overrides])
        return run_key(OmegaConf.to_container(cfg, resolve=True))

    assert key([]) == KEYS_BEFORE_THE_PAPER_PRESETS["flexbench", "context_agent"]
    assert key(["policy.summary_llm.model=other"]) != key([]) != key(["policy.context_agent.tree=false"])


def test_settings_added_later_keep_earlier_run_keys_at_their_defaults():
    from ifgym.runner.records import KEYS_ADDED_LATER

    def key(overrides):
        return run_key(OmegaConf.to_container(compose(overrides), resolve=True))

    for env in ("evolif", "structflow"):
        before = OmegaConf.to_container(compose([f"env={env}"]), resolve=True)  # as a run from before them
        for dotted in KEYS_ADDED_LATER:
            *path, name = dotted.split(".")
            node = before
            for part in path:
                node = node.get(part, {})
            node.pop(name, None)
        del before["policy"]["summary_llm"]
        assert key([f"env={env}"]) == run_key(before)
    changed = ["policy.graphif.summary=true", "policy.graphif.graph_prompt=false", "policy.self_refine.rounds=2"]
    assert len({key([o]) for o in changed} | {key([])}) == 4
    assert key(["env=structflow", "env.judge_golden=true"]) != key(["env=structflow"])
