"""The example task: each turn the user asks for a reply that starts with a word; a rule checks it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ifgym.core import Episode, TurnSpec, UserTurn, Verdict
from ifgym.core.constraints import Constraint
from ifgym.core.tasks import Task
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError
from ifgym.rewards.scorer import Scores
from ifgym.simulators.base import UserSimulator

WORDS = ("apple", "river", "stone", "cloud")


class EchoUser(UserSimulator):
    """Asks `turns` times for a reply starting with a word drawn from WORDS."""

    def __init__(self, turns: int):
        self.turns = turns
        self._rng: np.random.Generator | None = None
        self._asked = 0

    def _turn(self) -> UserTurn:
        word = WORDS[int(self._rng.integers(len(WORDS)))]
        constraint = Constraint("start_with.keyword", {"keyword": word})
        self._asked += 1
        return UserTurn(f"Tell me something. {constraint.describe()}", TurnSpec(constraints=(constraint,)))

    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        self._rng, self._asked = rng, 0
        return self._turn()

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        return self._turn() if self._asked < self.turns else None


class RuleScorer:
    """Each live constraint checked by its rule."""

    def reset(self) -> None:
        """No per-episode state."""

    def score(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores:
        verdicts = [c.kind.check(reply, c.params) for c in spec.constraints]
        return Scores(verdicts, verdicts, [c.group for c in spec.constraints])

    async def ascore(self, reply: str, spec: TurnSpec, history: list[dict] | None = None) -> Scores:
        return self.score(reply, spec, history)


def episode_row(episode: Episode, loose: bool = False) -> tuple[int, int]:
    """(items passed, items decided) of one episode."""
    verdicts = [v for t in episode.turns for v in (t.loose_verdicts if loose else t.verdicts)]
    return sum(v.label == "yes" for v in verdicts), sum(v.label != "unknown" for v in verdicts)


def summarize_rows(rows: Sequence[tuple[int, int]], loose: bool = False) -> dict[str, Any]:
    """pass_rate: items passed over items decided, over every episode."""
    passed, decided = sum(r[0] for r in rows), sum(r[1] for r in rows)
    return {"pass_rate": passed / decided if decided else float("nan")}


def summarize(episodes: Sequence[Episode], loose: bool = False) -> dict[str, Any]:
    """The task's metrics over finished episodes."""
    return summarize_rows([episode_row(e, loose) for e in episodes], loose)


def constraints_reward(episode: Episode) -> str:
    """Its turns are scored against their constraints (ifgym.rewards.trl's "constraints" reward)."""
    return "constraints"


ECHO = Task(
    name="echo",
    summarize=summarize,
    episode_row=episode_row,
    summarize_rows=summarize_rows,
    headline=("pass_rate",),
    headline_metric="pass_rate",
    definitions={"pass_rate": "replies that start with the asked word, of all asked"},
    training_reward=constraints_reward,
    loose_metrics=False,
)


class EchoEnv(ChatEnv):
    """The user asks `turns` times for a reply that starts with a given word."""

    env_name = "example/Echo-v0"

    def __init__(self, turns: int = 3, max_turns: int | None = 20, judge: str = "rules"):
        if judge != "rules":
            raise ConfigError(f"example/Echo-v0 is scored by rules only; got judge={judge!r}")
        super().__init__(task=ECHO, user=EchoUser(turns), scorer=RuleScorer(), max_turns=max_turns)
