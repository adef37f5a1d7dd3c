"""From verdicts to a reward, and the user's patience: the rubric a task plugs into the env's turn loop.

A turn *passes* when every verdict is yes, *fails* when any is no; a turn whose verdicts are
yes/unknown only (a judge that could not be parsed) does neither: patience stays where it was.

`Rubric` is what the loop asks of a task besides its user and scorer: a turn's reward from its
scores (`grade`), whether the dialogue ends before the user speaks again (`end`), an end-of-dialogue
term (`close`), and which turns to score at all (`scores_turn`). `VerdictRubric`, the default, is the
fraction / all_pass / weighted reward with `Patience`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ifgym.core import Verdict
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.rewards.scorer import Scores

REWARD_MODES = ("fraction", "all_pass", "weighted")


@dataclass(frozen=True)
class TurnOutcome:
    """A turn's verdict tally and reward. `defined` is False when no verdict was yes or no."""

    reward: float
    yes: int
    no: int
    unknown: int
    defined: bool

    @property
    def passed(self) -> bool:
        return self.no == 0 and self.unknown == 0

    @property
    def failed(self) -> bool:
        return self.no > 0


def turn_outcome(
    verdicts: Sequence[Verdict],
    groups: Sequence[str],
    mode: str = "fraction",
    weights: Mapping[str, float] | None = None,
    item_weights: Sequence[float] | None = None,
) -> TurnOutcome:
    """Reward for one turn.

    fraction: yes / (yes + no); all_pass: 1 if no verdict is no or unknown, else 0;
    weighted: like fraction with a weight per item: `weights[group]` where given, else the item's own
    weight from `item_weights` (e.g. 2 for StructFlow's structural items), else 1. Unknowns never count as yes or no;
    with no constraints at all the turn is vacuously satisfied (reward 1). With only unknowns the
    reward is 0 and `defined` is False so callers can report it.
    """
    if mode not in REWARD_MODES:
        raise UnknownNameError("reward mode", mode, REWARD_MODES)
    yes = sum(v.label == "yes" for v in verdicts)
    no = sum(v.label == "no" for v in verdicts)
    unknown = len(verdicts) - yes - no
    if not verdicts:
        return TurnOutcome(1.0, 0, 0, 0, True)
    if yes + no == 0:
        return TurnOutcome(0.0, yes, no, unknown, False)
    if mode == "all_pass":
        reward = float(no == 0 and unknown == 0)
    elif mode == "fraction":
        reward = yes / (yes + no)
    else:
        w = dict(weights or {})
        own = list(item_weights) if item_weights is not None else [1.0] * len(verdicts)
        known = [(v, w.get(g, o)) for v, g, o in zip(verdicts, groups, own, strict=True) if v.label != "unknown"]
        total = sum(weight for _, weight in known)
        reward = sum(weight for v, weight in known if v.label == "yes") / total if total else 0.0
    return TurnOutcome(reward, yes, no, unknown, True)


class Patience:
    """The user's patience: full after a passing turn, minus one after a failing one; 0 ends the dialogue.

    `full=None` switches patience off (never runs out).
    """

    def __init__(self, full: int | None = 3):
        if full is not None and (not isinstance(full, int) or isinstance(full, bool) or full < 1):
            raise ConfigError(f"patience must be a positive int or None (off), got {full!r}")
        self.full = full
        self.value = full

    def reset(self) -> int | None:
        self.value = self.full
        return self.value

    def update(self, outcome: TurnOutcome) -> int | None:
        if self.full is None:
            return None
        if outcome.passed:
            self.value = self.full
        elif outcome.failed:
            self.value -= 1
        return self.value

    @property
    def exhausted(self) -> bool:
        return self.value is not None and self.value <= 0


@dataclass(frozen=True)
class Ending:
    """Why a dialogue ends (the env's `done_reason`); `truncated` for a turn limit rather than a natural end."""

    reason: str
    truncated: bool = False


@dataclass(frozen=True)
class Grade:
    """What a rubric makes of one turn: the reward, whether it is defined, and what the env records beside it.

    `info` adds keys to the step's info dict; `record` is the turn record's `info`.
    """

    reward: float
    defined: bool
    info: Mapping[str, Any] = field(default_factory=dict)
    record: Mapping[str, Any] = field(default_factory=dict)


class Rubric(ABC):
    """Turn outcome -> reward, and the end rule, for the env's one turn loop (`ChatEnv`).

    Per turn the env calls `grade` with the turn's scores (None when `scores_turn` said not to score),
    `end` before the user would speak again, and `close` once the dialogue has ended (by `end`, or
    because the user stopped). `reset` starts an episode. `patience` is the meter the env reports
    (`Patience(None)`, off, for a rubric that keeps none).
    """

    patience: Patience

    def reset(self) -> None:
        """Forget the last episode (the patience meter refills)."""
        self.patience.reset()

    def scores_turn(self, ending: Ending | None) -> bool:
        """Whether this turn is scored, given how the dialogue ends (None: it goes on). Every turn by default."""
        return True

    @abstractmethod
    def grade(self, scores: Scores | None) -> Grade:
        """The turn's reward from its scores (None: not scored this turn); may update per-episode state."""

    def end(self, reply: str, last_turn: bool) -> Ending | None:
        """Whether the dialogue ends before the user speaks again; `last_turn`: the env's max_turns is reached."""
        return Ending("max_turns", truncated=True) if last_turn else None

    def close(self, grade: Grade, ending: Ending) -> Grade:
        """The last turn's grade with any end-of-dialogue term added (none by default)."""
        return grade


class VerdictRubric(Rubric):
    """The default rubric: the turn's verdicts give the reward (`turn_outcome`'s `mode`), failures cost patience.

    The dialogue ends when patience runs out (`done_reason="patience"`) or at max_turns (truncated).
    """

    def __init__(
        self, mode: str = "fraction", weights: Mapping[str, float] | None = None, patience: int | None = 3
    ) -> None:
        turn_outcome([], [], mode)  # validates the mode name now, not at the first step
        if weights and mode != "weighted":
            raise ConfigError(f"reward_weights only apply with reward='weighted' (got reward={mode!r})")
        for label, weight in (weights or {}).items():
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight >= 0:
                raise ConfigError(f"reward_weights[{label!r}] must be a number >= 0, got {weight!r}")
        self.mode = mode
        self.weights = dict(weights or {})
        self.patience = Patience(patience)

    def grade(self, scores: Scores | None) -> Grade:
        """Reward and tally of the turn's strict verdicts; a failing turn costs patience, a passing one refills it."""
        if scores is None:
            raise ValueError("VerdictRubric grades scored turns only (its scores_turn() is true for every turn)")
        outcome = turn_outcome(scores.strict, scores.groups, self.mode, self.weights, scores.weights)
        self.patience.update(outcome)
        tally = {"unknown": outcome.unknown, "reward_defined": outcome.defined}
        return Grade(outcome.reward, outcome.defined, info={"all_pass": outcome.passed, **tally}, record=tally)

    def end(self, reply: str, last_turn: bool) -> Ending | None:
        """Out of patience ends the dialogue; else max_turns truncates it."""
        if self.patience.exhausted:
            return Ending("patience")
        return super().end(reply, last_turn)
