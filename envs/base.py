"""The dialogue env every ifgym task shares: a simulated user speaks, the policy replies, a scorer judges.

Subclasses build a `UserSimulator`, a `TurnScorer` and (unless the default `VerdictRubric` serves)
a `Rubric`; this class owns the one turn loop, the spaces, the episode record and the step, written once
for sync and async (`twin`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ifgym.core import Episode, TurnRecord, TurnSpec, UserTurn
from ifgym.core.tasks import Task
from ifgym.envs.spaces import ChatSpace, ReplySpace
from ifgym.errors import ActionError, ConfigError, UnknownNameError
from ifgym.llm.conversation import steps_of, twin
from ifgym.rewards.rubric import Ending, Patience, Rubric, VerdictRubric
from ifgym.rewards.scorer import TurnScorer
from ifgym.simulators.base import UserSimulator


class ChatEnv(gym.Env[list, str]):
    """Base class of the dialogue envs (see EvolIFEnv for the full docstring of the protocol).

    A step scores the reply, grades it with the rubric, asks the rubric whether the dialogue ends
    and otherwise lets the user speak. `user_sees_verdicts=False` passes the user no verdicts and
    scores the reply after the user has answered, so the rubric can score only the turns it needs
    (the last one, when `scores_turn` says so). `task` (`ifgym.core.tasks.Task`, no default) says what is
    task-specific: the metrics a run reports, the judge audit's suite, the training rewards and
    exports; it is `env.task`.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    env_name = "ifgym/Chat"
    user_sees_verdicts = True

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
        task: Task,
        user: UserSimulator,
        scorer: TurnScorer,
        rubric: Rubric | None = None,
        max_turns: int | None = 20,
        system_prompt: str | None = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
    ):
        """`rubric=None` is `VerdictRubric()`: the fraction reward with patience 3."""
        if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1):
            raise ConfigError(f"max_turns must be a positive int or None, got {max_turns!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if not isinstance(task, Task):
            raise ConfigError(f"task must be an ifgym.core.tasks.Task (e.g. ifgym.rewards.tasks.EVOLIF), got {task!r}")
        self.task = task
        self.rubric = rubric if rubric is not None else VerdictRubric()
        self.user = user
        self.scorer = scorer
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.render_mode = render_mode
        self.action_space = ReplySpace(max_reply_chars)
        self.observation_space = ChatSpace()
        self._messages: list[dict[str, str]] = []
        self._turn: UserTurn | None = None
        self._episode: Episode | None = None
        self._done = True

    @property
    def patience(self) -> Patience:
        """The rubric's patience meter (off for a rubric that keeps none)."""
        return self.rubric.patience

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
        self.rubric.reset()
        self.scorer.reset()
        self._episode = Episode(episode_id=f"seed-{seed}", env_id=self.env_name, seed=seed, system_prompt=prompt)
        self._done = False

    def _open_turn(self, turn: UserTurn) -> tuple[list, dict[str, Any]]:
        self._enter_turn(turn)
        return list(self._messages), self._turn_info()

    def _enter_turn(self, turn: UserTurn) -> None:
        """Make `turn` the current one (a step's info gives it as `next_*`: no observation or info of its own)."""
        self._turn = turn
        self._messages.append({"role": "user", "content": turn.text})

    def _turn_info(self) -> dict[str, Any]:
        spec = self._turn.spec
        return {
            "turn": len(self._episode.turns),
            "topic": spec.topic,
            "move": spec.move,
            "change": spec.change,
            "constraints": [c.to_json() for c in spec.constraints],
            "patience": self._patience(),
        }

    def _patience(self) -> int | None:
        """The patience the step info and turn record report: the rubric's (an env whose user keeps one overrides)."""
        return self.patience.value

    _seeds: np.random.Generator | None = None  # the seed sequence of resets without a seed

    def _episode_seed(self, seed: int | None) -> int:
        """The seed the episode is played with and recorded under: `seed`, else the next of this env's sequence.

        `reset(seed=s)` starts a sequence drawn from `s`; a later `reset()` (a vector env's autoreset)
        takes its next seed, so every episode has a seed that replays it (`reset(seed=episode.seed)`),
        and the same first seed gives the same sequence. A first `reset()` without a seed starts
        the sequence from fresh entropy (recorded all the same).
        """
        if seed is not None:  # the sequence is drawn from `seed` when an unseeded reset first needs it: most never do
            self._seeds, self._seeds_from = None, seed
            return seed
        if self._seeds is None:
            start = getattr(self, "_seeds_from", None)
            self._seeds = np.random.default_rng() if start is None else np.random.default_rng([start, 0x5EED])
        return int(self._seeds.integers(2**31 - 1))

    def _begin(self, seed: int | None) -> None:
        seed = self._episode_seed(seed)
        super().reset(seed=seed)
        self._start(seed)

    def _reset_options(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """The options the user's reset gets, from those and the seed given to `reset` (envs may add a choice)."""
        return options

    def _first_turn(self, turn: UserTurn) -> tuple[list, dict[str, Any]]:
        out = self._open_turn(turn)
        self._record_start()
        return out

    def _record_start(self) -> None:
        """Record what the user's reset decided (persona, dialogue …) in the episode's meta; nothing by default."""

    @twin
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a dialogue; the observation ends with the user's first turn (`areset` awaits an LLM user)."""
        options = self._reset_options(seed, options)
        self._begin(seed)
        return self._first_turn((yield from steps_of(self.user, "reset", self.np_random, options)))

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

    def _history_reply(self, reply: str) -> str:
        """What the dialogue keeps as this turn's answer: the model's own reply (golden-context envs override)."""
        return reply

    def _scoring_spec(self, spec: TurnSpec) -> TurnSpec:
        """The spec the reply is scored against and, when scored, recorded with: the user's (envs add a checklist)."""
        return spec

    def _record_end(self) -> None:
        """Record what only the end of the dialogue tells in the episode's meta; nothing by default."""

    @twin
    def step(self, action: str):
        """Score the reply, grade it with the rubric, let the user speak again (unless the dialogue ends).

        Written once: the scorer and the user are reached through their Steps (`steps_of`), which
        `step` makes blocking and `astep` awaits (the judge and an LLM user).
        """
        reply = self._validate(action)
        turn, rubric = self._turn, self.rubric
        history = list(self._messages)  # up to and including the user's request this reply answers
        spec = self._scoring_spec(turn.spec)
        scores = grade = None
        if self.user_sees_verdicts:
            scores = yield from steps_of(self.scorer, "score", reply, spec, history)
            grade = rubric.grade(scores)
        self._messages.append({"role": "assistant", "content": self._history_reply(reply)})
        info = self._turn_info()
        last = self.max_turns is not None and len(self._episode.turns) + 1 >= self.max_turns
        ending = rubric.end(reply, last)
        nxt = None
        if ending is None:
            nxt = yield from steps_of(
                self.user, "next", self._messages, scores.strict if self.user_sees_verdicts else []
            )
            if nxt is None:
                ending = Ending(self.user.end_reason)
        if grade is None:
            scores = (
                (yield from steps_of(self.scorer, "score", reply, spec, history))
                if rubric.scores_turn(ending)
                else None
            )
            grade = rubric.grade(scores)
        if ending is not None:
            grade = rubric.close(grade, ending)
        if scores is not None:
            info.update(
                verdicts=[v.to_json() for v in scores.strict], loose_verdicts=[v.to_json() for v in scores.loose]
            )
        info.update(grade.info, patience=self._patience())
        self._episode.turns.append(
            TurnRecord(
                index=len(self._episode.turns),
                user=turn.text,
                spec=spec if scores is not None else turn.spec,
                reply=reply,
                verdicts=list(scores.strict) if scores is not None else [],
                loose_verdicts=list(scores.loose) if scores is not None else [],
                reward=grade.reward,
                patience=info["patience"],
                info=dict(grade.record),
            )
        )
        if nxt is not None:
            self._enter_turn(nxt)
            info.update(self._next_turn_info())
        info["done_reason"] = ending.reason if ending is not None else None
        if ending is not None:
            self._done = True
            self._episode.done_reason = ending.reason
            self._record_end()
        truncated = ending is not None and ending.truncated
        return list(self._messages), grade.reward, ending is not None and not truncated, truncated, info

    def _next_turn_info(self) -> dict[str, Any]:
        nxt = self._turn_info()
        return {f"next_{k}": v for k, v in nxt.items() if k in ("topic", "move", "change", "constraints")}

    # --- metrics ---------------------------------------------------------------------------------
    def summarize(self, episodes: Sequence[Episode], loose: bool = False) -> dict[str, Any]:
        """The task's metrics over finished `episodes` (`self.task.summarize`; `loose=True`: the loose variant)."""
        return self.task.summarize(episodes, loose=loose)

    def protocol(self) -> dict[str, Any]:
        """What a run of this env measures: its settings, and `deviations` from the paper's protocol (envs override)."""
        return {"env_id": self.env_name, "patience": self.patience.full, "max_turns": self.max_turns, "deviations": []}

    # --- rendering -----------------------------------------------------------------------------
    def render(self) -> str | None:
        """With render_mode='ansi', the transcript so far with each turn's verdicts."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(self._render_lines())

    def _render_lines(self) -> list[str]:
        return [line for t in (self._episode.turns if self._episode else []) for line in self._render_turn(t)]

    def _render_turn(self, t: TurnRecord) -> list[str]:
        """One turn of the transcript: the request, the reply, each constraint's verdict."""
        lines = [f"[{t.index}] USER: {t.user}", f"[{t.index}] MODEL: {t.reply}"]
        lines += [f"    {v.label:7} {c.id}: {v.reason}" for c, v in zip(t.spec.constraints, t.verdicts, strict=True)]
        return lines
