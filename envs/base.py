"""The dialogue env every ifgym task shares: a simulated user speaks, the policy replies, a scorer judges.

Subclasses build a `UserSimulator` and a `Scorer`; this class owns the turn loop, the spaces, the
reward, the patience meter, the episode record and the sync/async step.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from ifgym.core import Episode, TurnRecord, UserTurn
from ifgym.envs.spaces import ChatSpace, ReplySpace
from ifgym.errors import ActionError, ConfigError, UnknownNameError
from ifgym.rewards.evolif_metrics import HEADLINE as METRICS_HEADLINE
from ifgym.rewards.rubric import Patience, TurnOutcome, turn_outcome
from ifgym.rewards.scorer import Scores, TurnScorer
from ifgym.simulators.base import UserSimulator


class ChatEnv(gym.Env[list, str]):
    """Base class of the dialogue envs (see EvolIFEnv for the full docstring of the protocol)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    env_name = "ifgym/Chat"
    headline_metrics: tuple[str, ...] = METRICS_HEADLINE  # keys of `summarize` that get bootstrap intervals

    def __init_subclass__(cls, **kwargs: Any):
        """Give every env's constructor a did-you-mean for misspelt keyword arguments (gym.make passes them on)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        params = inspect.signature(init).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        names = [name for name in params if name != "self"]

        @functools.wraps(init)
        def checked_init(self: ChatEnv, *args: Any, **kw: Any) -> None:
            for key in kw:
                if key not in params:
                    raise UnknownNameError(f"{cls.__name__} argument", key, names)
            init(self, *args, **kw)

        cls.__init__ = checked_init  # type: ignore[method-assign]

    def __init__(
        self,
        *,
        user: UserSimulator,
        scorer: TurnScorer,
        patience: int | None = 3,
        max_turns: int | None = 20,
        reward: str = "fraction",
        reward_weights: Mapping[str, float] | None = None,
        system_prompt: str | None = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
    ):
        if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1):
            raise ConfigError(f"max_turns must be a positive int or None, got {max_turns!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        turn_outcome([], [], reward)  # validates the mode name now, not at the first step
        if reward_weights and reward != "weighted":
            raise ConfigError(f"reward_weights only apply with reward='weighted' (got reward={reward!r})")
        for label, weight in (reward_weights or {}).items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight >= 0:
                raise ConfigError(f"reward_weights[{label!r}] must be a number >= 0, got {weight!r}")
        self.user = user
        self.scorer = scorer
        self.patience = Patience(patience)
        self.max_turns = max_turns
        self.reward_mode = reward
        self.reward_weights = dict(reward_weights or {})
        self.system_prompt = system_prompt
        self.render_mode = render_mode
        self.action_space = ReplySpace(max_reply_chars)
        self.observation_space = ChatSpace()
        self._messages: list[dict[str, str]] = []
        self._turn: UserTurn | None = None
        self._episode: Episode | None = None
        self._done = True

    # --- public record -------------------------------------------------------------------------
    @property
    def episode(self) -> Episode:
        """The episode so far (complete once `terminated` or `truncated`)."""
        if self._episode is None:
            raise RuntimeError("no episode yet: call reset() first")
        self._episode.meta["user_stats"] = dict(self.user.stats)
        return self._episode

    # --- reset ---------------------------------------------------------------------------------
    def _start(self, seed: int | None) -> None:
        self._messages = []
        prompt = self.system_prompt or self.user.system_prompt
        if prompt:
            self._messages.append({"role": "system", "content": prompt})
        self.patience.reset()
        self.scorer.reset()
        self._episode = Episode(episode_id=f"seed-{seed}", env_id=self.env_name, seed=seed, system_prompt=prompt)
        self._done = False

    def _open_turn(self, turn: UserTurn) -> tuple[list, dict[str, Any]]:
        self._turn = turn
        self._messages.append({"role": "user", "content": turn.text})
        return list(self._messages), self._turn_info()

    def _turn_info(self) -> dict[str, Any]:
        spec = self._turn.spec
        return {
            "turn": len(self._episode.turns),
            "topic": spec.topic,
            "move": spec.move,
            "change": spec.change,
            "constraints": [c.to_json() for c in spec.constraints],
            "patience": self.patience.value,
        }

    _seeds: np.random.Generator | None = None  # the seed sequence of resets without a seed

    def _episode_seed(self, seed: int | None) -> int:
        """The seed the episode is played with and recorded under: `seed`, else the next of this env's sequence.

        `reset(seed=s)` starts a sequence drawn from `s`; a later `reset()` (a vector env's autoreset)
        takes its next seed, so every episode has a seed that replays it (`reset(seed=episode.seed)`),
        and the same first seed gives the same sequence. A first `reset()` without a seed starts
        the sequence from fresh entropy (recorded all the same).
        """
        if seed is not None:
            self._seeds = np.random.default_rng([seed, 0x5EED])
            return seed
        if self._seeds is None:
            self._seeds = np.random.default_rng()
        return int(self._seeds.integers(2**31 - 1))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a dialogue; the observation ends with the user's first turn."""
        seed = self._episode_seed(seed)
        super().reset(seed=seed)
        self._start(seed)
        return self._open_turn(self.user.reset(self.np_random, options))

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Async twin of `reset` (an LLM user renders without blocking the event loop)."""
        seed = self._episode_seed(seed)
        super().reset(seed=seed)
        self._start(seed)
        return self._open_turn(await self.user.areset(self.np_random, options))

    # --- step ----------------------------------------------------------------------------------
    def _validate(self, action: Any) -> str:
        if self._done:
            raise ActionError("the episode is over (or never started): call reset() before step()")
        if not isinstance(action, str):
            raise ActionError(f"action must be the reply as a str, got {type(action).__name__}: {action!r:.80}")
        if len(action) > self.action_space.max_chars:
            raise ActionError(
                f"reply has {len(action)} characters, more than max_reply_chars={self.action_space.max_chars}; "
                "truncate it or make the env with a larger max_reply_chars"
            )
        return action

    def _close_turn(self, reply: str, scores: Scores) -> tuple[TurnOutcome, dict[str, Any]]:
        spec = self._turn.spec
        outcome = turn_outcome(scores.strict, scores.groups, self.reward_mode, self.reward_weights, scores.weights)
        patience = self.patience.update(outcome)
        info = self._turn_info()
        info.update(
            verdicts=[v.to_json() for v in scores.strict],
            loose_verdicts=[v.to_json() for v in scores.loose],
            all_pass=outcome.passed,
            unknown=outcome.unknown,
            reward_defined=outcome.defined,
            patience=patience,
        )
        self._episode.turns.append(
            TurnRecord(
                index=len(self._episode.turns),
                user=self._turn.text,
                spec=spec,
                reply=reply,
                verdicts=scores.strict,
                loose_verdicts=scores.loose,
                reward=outcome.reward,
                patience=patience,
                info={"unknown": outcome.unknown, "reward_defined": outcome.defined},
            )
        )
        self._messages.append({"role": "assistant", "content": self._history_reply(reply)})
        return outcome, info

    def _history_reply(self, reply: str) -> str:
        """What the dialogue keeps as this turn's answer: the model's own reply (golden-context envs override)."""
        return reply

    def _end_reason(self) -> tuple[bool, bool, str | None]:
        if self.patience.exhausted:
            return True, False, "patience"
        if self.max_turns is not None and len(self._episode.turns) >= self.max_turns:
            return False, True, "max_turns"
        return False, False, None

    def _finish(self, reason: str | None, terminated: bool, truncated: bool, outcome: TurnOutcome, info: dict):
        info["done_reason"] = reason
        if reason is not None:
            self._done = True
            self._episode.done_reason = reason
        return list(self._messages), outcome.reward, terminated, truncated, info

    def step(self, action: str):
        """Score the reply against the live constraints, update patience, let the user speak again."""
        reply = self._validate(action)
        history = list(self._messages)  # up to and including the user's request this reply answers
        scores = self.scorer.score(reply, self._turn.spec, history)
        outcome, info = self._close_turn(reply, scores)
        terminated, truncated, reason = self._end_reason()
        if reason is None:
            nxt = self.user.next(self._messages, scores.strict)
            if nxt is None:
                terminated, reason = True, self.user.end_reason
            else:
                self._open_turn(nxt)
                info.update(self._next_turn_info())
        return self._finish(reason, terminated, truncated, outcome, info)

    async def astep(self, action: str):
        """Async twin of `step` (judge and LLM user awaited)."""
        reply = self._validate(action)
        history = list(self._messages)  # up to and including the user's request this reply answers
        scores = await self.scorer.ascore(reply, self._turn.spec, history)
        outcome, info = self._close_turn(reply, scores)
        terminated, truncated, reason = self._end_reason()
        if reason is None:
            nxt = await self.user.anext(self._messages, scores.strict)
            if nxt is None:
                terminated, reason = True, self.user.end_reason
            else:
                self._open_turn(nxt)
                info.update(self._next_turn_info())
        return self._finish(reason, terminated, truncated, outcome, info)

    def _next_turn_info(self) -> dict[str, Any]:
        nxt = self._turn_info()
        return {f"next_{k}": v for k, v in nxt.items() if k in ("topic", "move", "change", "constraints")}

    # --- metrics ---------------------------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """What a run of this env measures: its settings, and `deviations` from the paper's protocol (envs override)."""
        return {"env_id": self.env_name, "patience": self.patience.full, "max_turns": self.max_turns, "deviations": []}

    @staticmethod
    def summarize(episodes: list[Episode], loose: bool = False) -> dict[str, float]:
        """Headline metrics of this env over finished episodes (EvolIF's by default; envs override)."""
        from ifgym.rewards.evolif_metrics import summarize

        return summarize(episodes, loose=loose)

    # --- rendering -----------------------------------------------------------------------------
    def render(self) -> str | None:
        """With render_mode='ansi', the transcript so far with each turn's verdicts."""
        if self.render_mode != "ansi":
            return None
        lines: list[str] = []
        for t in self._episode.turns if self._episode else []:
            lines.append(f"[{t.index}] USER: {t.user}")
            lines.append(f"[{t.index}] MODEL: {t.reply}")
            for c, v in zip(t.spec.constraints, t.verdicts, strict=True):
                lines.append(f"    {v.label:7} {c.id}: {v.reason}")
        return "\n".join(lines)
