"""`ifgym` CLI: help, eval with a scripted policy and over HTTP, config typos, W&B offline, export."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from support.canned_judges import gold_or
from support.canned_server import CannedServer

from ifgym.cli import main


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ifgym.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_help_lists_commands_and_groups(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    policies = (
        "policy={context_agent, context_agent_paper, custom, embedded, graphif, graphif_paper, openai, scripted, "
        "self_refine, transformers, truncation}"
    )
    assert "eval" in out and policies in out
    assert "trainer={cpu_episode, cpu_start_with, gpu_episode, grpo, smoke}" in out and "train [FLAGS]" in out
    assert (
        "env={composite, composite_editors, composite_llm, evolif, evolif_llm, evolif_paper, evolif_v0, flexbench, "
        "flexbench_llm, flexbench_paper, ntm, plugin, structflow, structflow_llm, structflow_paper}" in out
    )


def test_eval_with_scripted_policy_writes_table_jsonl_summary_and_plots(tmp_path):
    out = tmp_path / "run" / "episodes.jsonl"
    r = cli("eval", "policy=scripted", "episodes=3", "env.max_turns=3", f"output={out}", "progress=false")
    assert r.returncode == 0, r.stderr
    assert "CSR" in r.stdout and "strict" in r.stdout and "loose" in r.stdout
    assert len(out.read_text().splitlines()) == 3
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["episodes"] == 3 and "CSR" in summary["strict"]
    assert summary["user_stats"]["renders"] == 9  # 3 episodes x 3 turns, all from templates
    assert "user simulator: renders 9" in r.stdout
    for png in ("survival.png", "group_pass_rates.png"):
        assert (out.parent / png).read_bytes()[:4] == b"\x89PNG"


def test_rerun_into_the_same_output_resumes(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    args = ["eval", "policy=scripted", "env.max_turns=2", f"output={out}", "progress=false", "plots=false"]
    assert main([*args, "episodes=2"]) == 0
    assert main([*args, "episodes=3"]) == 0
    seeds = [json.loads(line)["seed"] for line in out.read_text().splitlines()]
    assert seeds == [0, 1, 2]


def test_eval_against_an_openai_compatible_server(tmp_path):
    with CannedServer(replies=["A reply from the server."], model="served-model") as server:
        r = cli(
            "eval",
            "policy=openai",
            f"policy.llm.base_url={server.base_url}",
            "policy.llm.model=served-model",
            "episodes=2",
            "env.max_turns=2",
            f"output={tmp_path / 'e.jsonl'}",
            "progress=false",
            "plots=false",
        )
        assert r.returncode == 0, r.stderr
        assert len(server.requests) == 4
    assert "usage[policy]: 4 calls" in r.stdout


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("episdes=3", "Did you mean 'episodes'"),  # top-level typo
        ("env.max_turn=3", "Did you mean 'env.max_turns'"),  # nested typo
        ("policy=scriptd", "Did you mean 'scripted'"),  # unknown group option
        ("episodes=many", "could not be converted to Integer"),  # wrong type: say which type
    ],
)
def test_config_typo_is_one_clear_error(override, fragment, capsys):
    assert main(["eval", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ifgym: error:") and fragment in err
    assert "Traceback" not in err


def test_wandb_offline_logging(tmp_path):
    out = tmp_path / "episodes.jsonl"
    r = cli(
        "eval",
        "policy=scripted",
        "logger=wandb",
        "episodes=2",
        "env.max_turns=2",
        f"output={out}",
        "progress=false",
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"},
    )
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb")), "the offline run must hold its log file"


def test_export_prompts(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    assert (
        main(
            [
                "eval",
                "policy=scripted",
                "episodes=1",
                "env.max_turns=3",
                f"output={out}",
                "progress=false",
                "plots=false",
            ]
        )
        == 0
    )
    rows = tmp_path / "rows.jsonl"
    capsys.readouterr()
    assert main(["export", "prompts", str(out), str(rows)]) == 0
    assert capsys.readouterr().out.strip().startswith(f"wrote 3 prompts rows to {rows}")
    lines = [json.loads(line) for line in rows.read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["prompt"][-1]["role"] == "user"


def test_llm_user_and_llm_judge_through_servers_report_usage_per_role(tmp_path):
    """env=evolif_llm + judge=llm: the user model and the judge are canned servers standing in for real models."""
    from support.canned_user import call_kind, scripted_user_model, stating_draft
    from support.prompts import prompt_kind

    user_model = scripted_user_model(generate=stating_draft)

    def user_or_judge(messages):
        if prompt_kind(messages) == "judge.blind":
            keys = re.findall(r'"(\w+)"', messages[-1]["content"].rsplit("Return only", 1)[1])
            first = {"emotion": "neutral", "reader_age": "adult", "register": "formal", "voice": "active"}
            return json.dumps({k: first[k] for k in keys})
        call_kind(messages)  # fails loudly on a prompt neither the user nor the judge sends
        return user_model(messages)

    # the gold set's prompts (the judge's audit before the episodes) get perfect answers
    with CannedServer(replies=gold_or(user_or_judge)) as models, CannedServer(replies=["An answer."]) as policy:
        r = cli(
            "eval",
            "env=evolif_llm",
            f"env.user_llm.base_url={models.base_url}",
            "env.user_llm.model=canned-model",
            "judge=llm",
            f"judge.llm.base_url={models.base_url}",
            "judge.llm.model=canned-model",
            "policy=openai",
            f"policy.llm.base_url={policy.base_url}",
            "policy.llm.model=canned-model",
            "episodes=2",
            "env.max_turns=3",
            f"output={tmp_path / 'e.jsonl'}",
            "progress=false",
            "plots=false",
            env={"IFGYM_CACHE": str(tmp_path / "cache")},
        )
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["usage"]) == {"policy", "user", "judge"}  # the audit's calls are not the run's
    assert summary["usage"]["policy"]["calls"] == 6
    assert summary["usage"]["user"]["calls"] >= 6  # a draft per turn (plus a topic check on a topic change)
    assert summary["user_stats"]["llm_fallbacks"] == 0
    # which model plays each role is said before the first reset (which may load and generate for minutes)
    (said,) = [line for line in r.stderr.splitlines() if line.startswith("models: ")]
    for role, server in (("policy", policy), ("user", models), ("judge", models)):
        assert f"{role} canned-model (http {server.base_url.split('//')[1].removesuffix('/v1')})" in said


def test_unknown_env_argument_names_the_accepted_ones(capsys):
    assert main(["eval", "policy=scripted", "+env.patiense=2"]) == 2
    err = capsys.readouterr().err
    assert "unknown EvolIFEnv argument 'patiense'" in err and "Did you mean 'patience'" in err


def test_policy_openai_without_a_server_url_is_an_error_not_the_embedded_model(capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["eval", "policy=openai", "episodes=1"]) == 2
    err = capsys.readouterr().err
    assert "policy.llm.base_url" in err and "reads no OPENAI_BASE_URL" in err


def test_two_runs_cannot_share_a_folder_for_their_summaries(tmp_path, capsys):
    args = ["eval", "policy=scripted", "episodes=1", "env.max_turns=1", "progress=false", "plots=false"]
    assert main([*args, f"output={tmp_path / 'a.jsonl'}"]) == 0
    assert main([*args, f"output={tmp_path / 'b.jsonl'}"]) == 2  # would overwrite a's summary.json
    assert "already holds the summary" in capsys.readouterr().err
    assert main([*args, f"output={tmp_path}"]) == 2  # a folder, not the episodes file
    assert "is a folder" in capsys.readouterr().err


def test_eval_writes_bootstrap_intervals_beside_the_point_estimates(tmp_path, capsys):
    args = ["eval", "policy=scripted", "episodes=4", "env.max_turns=3", "progress=false", "plots=false"]
    assert main([*args, f"output={tmp_path / 'a' / 'e.jsonl'}", "ci_resamples=200"]) == 0
    table = capsys.readouterr().out
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["ci_settings"] == {
        "method": "percentile bootstrap over dialogues",
        "resamples": 200,
        "level": 0.95,
        "seed": 0,
    }
    for mode in ("strict", "loose"):
        low, high = summary["ci"][mode]["CSR"]
        assert low <= summary[mode]["CSR"] <= high
        assert "turns" not in summary["ci"][mode]  # counts get no interval
    assert "95% CI" in table and f"[{low:.3f}, {high:.3f}]" in table
    # ci=false: no intervals, no interval column
    assert main([*args, f"output={tmp_path / 'b' / 'e.jsonl'}", "ci=false"]) == 0
    assert "CI" not in capsys.readouterr().out
    assert "ci" not in json.loads((tmp_path / "b" / "summary.json").read_text())


def test_policy_openai_reads_no_openai_base_url_and_the_key_from_the_environment(tmp_path):
    with CannedServer(replies=["From the configured server."], model="served-model") as server:
        args = ["eval", "policy=openai", "policy.llm.model=served-model", "episodes=1", "env.max_turns=2"]
        args += [f"output={tmp_path / 'e.jsonl'}", "progress=false", "plots=false"]
        refused = cli(*args, env={"OPENAI_BASE_URL": server.base_url})
        assert refused.returncode == 2 and "policy.llm.base_url" in refused.stderr and server.requests == []
        r = cli(*args, f"policy.llm.base_url={server.base_url}", env={"OPENAI_API_KEY": "sk-from-env"})
        assert r.returncode == 0, r.stderr
        assert len(server.requests) == 2 and server.headers[0]["authorization"] == "Bearer sk-from-env"


def test_a_judge_model_without_a_url_is_refused_not_played_by_the_embedded_model(tmp_path, capsys):
    args = ["eval", "policy=scripted", "judge=llm", "judge.llm.model=gpt-4o-mini", "episodes=1"]
    assert main([*args, f"output={tmp_path / 'e.jsonl'}", "progress=false", "plots=false"]) == 2
    err = capsys.readouterr().err
    assert "`judge.llm.model`='gpt-4o-mini' names a served model but `judge.llm.base_url` is not set" in err
    assert not (tmp_path / "e.jsonl").exists()


def test_a_rerun_after_the_server_moved_resumes_and_run_json_says_where_each_found_it(tmp_path, capsys):
    from support.canned_server import eval_args

    out = tmp_path / "run" / "episodes.jsonl"
    with CannedServer(replies=["First home."]) as first:
        assert main(eval_args(first, out, 2)) == 0
    with CannedServer(replies=["Second home."]) as second:
        assert first.base_url != second.base_url
        assert main(eval_args(second, out, 3)) == 0, capsys.readouterr().err
        assert len(second.requests) == 2  # one more episode of two turns; the first two were kept
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["seed"] for line in lines) == [0, 1, 2]
    record = json.loads((out.parent / "run.json").read_text())
    hosts = [i["servers"]["policy"] for i in record["invocations"]]
    assert hosts == [u.split("/")[2] for u in (first.base_url, second.base_url)]


def test_help_into_a_pipe_closed_early_ends_quietly():
    # `ifgym eval --help | head -1`: the reader is gone before the help is written; no traceback, exit 0
    code = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from ifgym.cli import main\n"
        "sys.exit(main(['eval', '--help']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
