"""Weights & Biases logging for `ifgym eval` (wandb is imported only when this logger is used)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ifgym.core import Episode
from ifgym.errors import BackendError, UnknownNameError

MODES = ("online", "offline", "disabled")


def _strip_secrets(config: Any) -> Any:
    """Drop anything that looks like a secret value; API keys never live in config, this is a second guard."""
    if isinstance(config, dict):
        return {k: _strip_secrets(v) for k, v in config.items() if k.lower() not in ("api_key", "token", "password")}
    if isinstance(config, list):
        return [_strip_secrets(v) for v in config]
    return config


class WandbLogger:
    """Logs the resolved config, per-episode metrics, a transcript table and the plots."""

    def __init__(
        self,
        settings: dict[str, Any],
        *,
        config: dict[str, Any],
        run_key: str,
        summarize: Callable[[list[Episode]], dict[str, float]],
    ):
        if settings["mode"] not in MODES:
            raise UnknownNameError("wandb mode", settings["mode"], MODES)
        try:
            import wandb
        except ImportError as exc:  # pragma: no cover - wandb is a core dependency
            raise BackendError("logger=wandb needs wandb: pip install 'wandb>=0.17,<0.32'") from exc
        self._wandb = wandb
        self.run = wandb.init(
            project=settings["project"],
            entity=settings["entity"],
            name=settings["name"],
            tags=list(settings["tags"]),
            mode=settings["mode"],
            config=_strip_secrets(config) | {"run_key": run_key},
            reinit="finish_previous",
        )
        self._step = 0
        self._summarize = summarize

    def log_episode(self, episode: Episode) -> None:
        """Per-episode metrics as one W&B step."""
        metrics = {f"episode/{k}": v for k, v in self._summarize([episode]).items()}
        metrics["episode/seed"] = episode.seed
        self.run.log(metrics, step=self._step)
        self._step += 1

    def finish(self, episodes: Sequence[Episode], summary: dict[str, Any], plots: dict[str, Path]) -> None:
        """Summary metrics, the transcript table and the plots; then close the run."""
        wandb = self._wandb
        for mode in ("strict", "loose"):
            for k, v in summary[mode].items():
                self.run.summary[f"{mode}/{k}"] = v
            for k, bounds in summary.get("ci", {}).get(mode, {}).items():  # bootstrap intervals, when computed
                if bounds:
                    self.run.summary[f"{mode}/{k}/ci_low"], self.run.summary[f"{mode}/{k}/ci_high"] = bounds
        table = wandb.Table(
            columns=[
                "episode_id",
                "seed",
                "turn",
                "user",
                "reply",
                "constraints",
                "verdicts",
                "reward",
                "patience",
            ]
        )
        for ep in episodes:
            for t in ep.turns:
                table.add_data(
                    ep.episode_id,
                    ep.seed,
                    t.index,
                    t.user,
                    t.reply,
                    json.dumps([c.to_json() for c in t.spec.constraints], ensure_ascii=False),
                    json.dumps([v.label for v in t.verdicts]),
                    t.reward,
                    t.patience,
                )
        payload: dict[str, Any] = {"transcripts": table}
        payload.update({name: wandb.Image(str(path)) for name, path in plots.items()})
        self.run.log(payload, step=self._step)
        self.run.finish()
