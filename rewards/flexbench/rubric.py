"""FlexBench's rubric: the reward of a call judged dimension by dimension, and how the call ends.

The env's turn loop (`ChatEnv`) asks it for each turn's reward from the gated dimension labels:
base actions and branches newly satisfied this turn count up, always-on rules newly broken count
down (each once), over the number of dimensions; the last turn can add `end_weight` × the episode
score. The rubric's own end rule is the turn limit, where a reply that closes the call still ends it
properly. The caller's patience lives in the caller, not here as in the other tasks: it drops on the
caller's own reading of the agent's message (the scripted caller's: asked nothing new, gave nothing
useful, repeated itself; the LLM caller's: its end detector's, else an empty or repeated message),
never on the verdicts, which may not exist that turn (`judge_every_turn=False`); how full it starts
is drawn with the caller's profile at its reset; and running out is the caller's last words (a
hang-up line from its own rng). Rescoring reads it back from the recorded turns (`caller_meta`),
where no caller runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ifgym.errors import ConfigError, UnknownNameError
from ifgym.rewards.flexbench.dimensions import DimensionSet
from ifgym.rewards.flexbench.gating import FlexScores, gate
from ifgym.rewards.rubric import Ending, Grade, Patience, Rubric
from ifgym.rewards.scorer import Scores

REWARDS = ("turn", "episode", "both")
_RECORDED = ("coverage", "achievement", "compliance", "newly_satisfied", "newly_broken")


def _never_closes(reply: str) -> bool:
    return False


class FlexBenchRubric(Rubric):
    """Turn rewards from newly satisfied / newly broken dimensions, an episode term at the end, the turn-limit rule.

    `reward`: "turn" (the per-turn term only), "episode" (0 until the last turn, which gets
    `end_weight` × the episode score) or "both". `judge_every_turn=False` scores the last turn
    only (then only "episode" makes sense). `closes(reply)` says whether a reply closes the call:
    on the last allowed turn such a reply ends it as "assistant_closed" rather than "max_turns".
    `last` is the latest scores (what `render` shows and the episode records at the end).
    """

    def __init__(
        self,
        dimensions: DimensionSet,
        *,
        reward: str = "both",
        end_weight: float = 1.0,
        judge_every_turn: bool = True,
        closes: Callable[[str], bool] = _never_closes,
    ) -> None:
        self.check_settings(reward, end_weight, judge_every_turn)
        self.dimensions = dimensions
        self.mode = reward
        self.end_weight = float(end_weight)
        self.judge_every_turn = judge_every_turn
        self.closes = closes
        self.patience = Patience(None)  # the caller keeps its own (it hangs up when it runs out)
        self._kinds = {d.id: d.kind for d in dimensions.dimensions}
        self._satisfied: set[str] = set()
        self._broken: set[str] = set()
        self.last: FlexScores | None = None

    @staticmethod
    def check_settings(reward: str, end_weight: float, judge_every_turn: bool) -> None:
        """Refuse bad settings with the fix (the env checks before it builds anything)."""
        if reward not in REWARDS:
            raise UnknownNameError("FlexBench reward", reward, REWARDS)
        if isinstance(end_weight, bool) or not isinstance(end_weight, int | float) or not math.isfinite(end_weight):
            raise ConfigError(f"end_weight must be a finite number, got {end_weight!r}")
        if not judge_every_turn and reward != "episode":
            raise ConfigError(
                f"reward={reward!r} needs a verdict every turn: set judge_every_turn=True or reward='episode'"
            )

    def reset(self) -> None:
        """A new call: nothing satisfied or broken yet."""
        super().reset()
        self._satisfied, self._broken, self.last = set(), set(), None

    def scores_turn(self, ending: Ending | None) -> bool:
        """Every turn, or with judge_every_turn=False the last one only (the final trace is always judged)."""
        return self.judge_every_turn or ending is not None

    def grade(self, scores: Scores | None) -> Grade:
        """The per-turn term: (newly satisfied base/branch dimensions − newly broken rules) / number of dimensions."""
        if scores is None:
            return Grade(0.0, False, info={"unknown": 0, "reward_defined": False})
        flex = gate(self.dimensions, scores.strict)
        ids = self.dimensions.ids
        # an always-on rule earns nothing for being kept (saying nothing keeps it) and costs once when broken
        new = [d for d in ids if self._kinds[d] != "always" and flex.labels[d] == "yes" and d not in self._satisfied]
        broken = [d for d in ids if self._kinds[d] == "always" and flex.labels[d] == "no" and d not in self._broken]
        self._satisfied.update(new)
        self._broken.update(broken)
        self.last = flex
        reward = 0.0
        if self.mode in ("turn", "both"):
            reward += (len(new) - len(broken)) / len(ids)
        info = {
            "labels": dict(flex.labels),
            "coverage": flex.coverage,
            "achievement": None if math.isnan(flex.achievement) else flex.achievement,  # None = n/a (NaN != NaN)
            "compliance": None if math.isnan(flex.compliance) else flex.compliance,
            "newly_satisfied": new,
            "newly_broken": broken,
            "unknown": sum(v.label == "unknown" for v in scores.strict),
            "reward_defined": True,
        }
        return Grade(reward, True, info=info, record={k: info[k] for k in _RECORDED})

    def end(self, reply: str, last_turn: bool) -> Ending | None:
        """At the turn limit: "assistant_closed" when the reply closes the call, else "max_turns" (truncated)."""
        if last_turn and self.closes(reply):
            return Ending("assistant_closed")
        return super().end(reply, last_turn)

    def close(self, grade: Grade, ending: Ending) -> Grade:
        """With reward "episode"/"both": add `end_weight` × the episode score of the final (always judged) trace."""
        info = {**grade.info, "reward_defined": True}
        reward = grade.reward
        if self.mode in ("episode", "both"):
            end = self.last.score
            reward += self.end_weight * end
            info["episode_score"] = end
        return Grade(reward, True, info=info, record=grade.record)
