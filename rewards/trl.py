"""Trainer-facing rewards: each env's turn reward, recomputed for a new completion, in TRL's shape.

Every reward here has the signature TRL's `GRPOTrainer(reward_funcs=...)` calls,
`reward(completions, **columns) -> list[float | None]`, reads what it needs from dataset columns
(written by `ifgym export prompts`, see `ifgym.rewards.export`), is a plain picklable class with a
`__name__` for TRL's logs, and returns None for a completion it cannot score (TRL leaves None out
of that function's mean; a row that every function leaves out gets no advantage).

| class | env | reads | scores |
|---|---|---|---|
| `ConstraintReward` | EvolIF | `constraints` | rule-checkable constraints (judged ones skipped) |
| `ChecklistReward` | StructFlow | `checklist`, `prompts` | rule items by rules; the rest by `judge`, or left out |
| `FlexBenchReward` | FlexBench | `dimensions`, `prompts` | the env's turn reward by the offline dimension rules |
| `TurnReward` | any | `scorer` + the above | dispatches each row to the three above |
| `EpisodeReturn` | any | `episode` | discounted return (+ survival), for whole-episode rollouts |
| `LengthFloor(reward, n)` | any | as `reward` | 0 for completions under n words (a guard against empty replies) |

Each turn reward is what the env would have given the completion at that turn (same rules, same
reward mode); tests check it against the rewards recorded by the envs. Two differences, both
documented on the classes: a row with nothing to score is None here (the env gives an empty
checklist 1), and FlexBench's end-of-call term (`end_weight` × the episode score) is not part of a
single turn's reward (it needs the whole call: use `EpisodeReturn`).

`AsyncReward(reward)` wraps any of them with an `async __call__`, so TRL awaits it with the other
async rewards of a step (useful with a judge: its calls then run concurrently).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ifgym.core import ChecklistItem, Episode, TurnSpec
from ifgym.core.constraints import Constraint
from ifgym.core.tasks import task_of
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm.conversation import Call, Steps, arun_steps, run_steps, steps_of, twin
from ifgym.rewards.checks import SEMANTICS, check
from ifgym.rewards.rubric import turn_outcome

if TYPE_CHECKING:
    from ifgym.rewards.flexbench import DimensionSet
    from ifgym.rewards.structflow.judge import ChecklistJudge

__all__ = [
    "SCORERS",
    "AsyncReward",
    "ChecklistReward",
    "ConstraintReward",
    "EpisodeReturn",
    "FlexBenchReward",
    "LengthFloor",
    "TurnReward",
    "episode_return",
    "scorer_of",
    "survived",
]

# What scores a row: which env's scorer the turn came from (the `scorer` column of a prompt row).
SCORERS = ("constraints", "checklist", "flexbench")

REWARD_MODES = ("fraction", "all")

_T = TypeVar("_T")


class ConstraintReward:
    """TRL reward: how well each completion meets its sample's rule-checkable constraints.

    `mode="fraction"`: the share of rule constraints satisfied; `mode="all"`: 1.0 when all hold,
    else 0.0. `loose=True` uses IFEval-style loose checking; `semantics="evolif"` the verdicts of
    EvolIF's released evaluator (see `ifgym.rewards.check`; it has no loose reading).

    Unknown rule verdicts (a branch that does not apply) count neither way. A plain class so that
    it pickles (TRL may copy reward functions into worker processes); `__name__` names it in logs.
    """

    def __init__(self, loose: bool = False, mode: str = "fraction", semantics: str = "ifgym"):
        if mode not in REWARD_MODES:
            raise UnknownNameError("ConstraintReward mode", mode, REWARD_MODES)
        if not isinstance(loose, bool):
            raise ConfigError(f"ConstraintReward loose must be True or False, got {loose!r}")
        if semantics not in SEMANTICS:
            raise UnknownNameError("ConstraintReward semantics", semantics, SEMANTICS)
        if loose and semantics == "evolif":
            raise ConfigError("ConstraintReward: semantics='evolif' has one reading; drop loose=True")
        self.loose = loose
        self.mode = mode
        self.semantics = semantics
        suffix = "_loose" if loose else "_evolif" if semantics == "evolif" else ""
        self.__name__ = f"ifgym_constraints_{mode}{suffix}"

    def __repr__(self) -> str:
        return f"ConstraintReward(loose={self.loose}, mode={self.mode!r}, semantics={self.semantics!r})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion against the constraints in the same row of `kwargs["constraints"]`."""
        return _logged(self.scored(completions, **kwargs), kwargs)

    def scored(self, completions: Sequence[Any], **kwargs: Any) -> list[Scored]:
        """Each completion's reward with the (group, label) of every verdict behind it."""
        column = _column(
            kwargs, "constraints", len(completions), "per sample a list of {'id': ..., 'params': {...}} dicts"
        )
        return [
            self._score(_completion_text(c, i), _parse_constraints(raw, i))
            for i, (c, raw) in enumerate(zip(completions, column, strict=True))
        ]

    def _score(self, text: str, constraints: Sequence[Constraint]) -> Scored:
        rule = [c for c in constraints if not c.judged]
        labels = [(c.group, check(c, text, loose=self.loose, semantics=self.semantics).label) for c in rule]
        yes = sum(label == "yes" for _, label in labels)
        no = sum(label == "no" for _, label in labels)
        if yes + no == 0:
            return None, labels
        return (float(no == 0) if self.mode == "all" else yes / (yes + no)), labels


Scored = tuple[float | None, list[tuple[str, str]]]  # a reward and the (group, label) of each verdict behind it


def _logged(scored: Sequence[Scored], kwargs: Mapping[str, Any]) -> list[float | None]:
    """The rewards; with TRL's `log_metric` (TRL >= 1.0 passes it), also each group's pass rate in this batch.

    Logged as `pass_rate/<group>` = yes / (yes + no) over the batch's verdicts of that group (a
    metric beside the reward, not part of it); TRL averages it over the step.
    """
    log = kwargs.get("log_metric")
    if callable(log):
        tally: dict[str, list[int]] = {}
        for _, labels in scored:
            for group, label in labels:
                if label != "unknown":
                    counts = tally.setdefault(group, [0, 0])
                    counts[label == "yes"] += 1
        for group, (no, yes) in sorted(tally.items()):
            log(f"pass_rate/{group}", yes / (yes + no))
    return [reward for reward, _ in scored]


def _each(steps: Sequence[Steps[_T]]) -> list[_T]:
    """Run each of `steps` to its end, one after the other, each call blocking."""
    return [run_steps(one) for one in steps]


async def _together(steps: Sequence[Steps[_T]]) -> list[_T]:
    """Run `steps` concurrently, each call awaited; the results in order."""
    return list(await asyncio.gather(*(arun_steps(one) for one in steps)))


class _Rewards:
    """A reward whose `scored` is written with `twin` (it may await a judge): `call`, and `acall` from it."""

    @twin
    def call(self, completions: Sequence[Any], **kwargs: Any) -> Steps[list[float | None]]:
        """The rewards `__call__` returns; `acall` awaits the judge's calls (what `AsyncReward` runs)."""
        return _logged((yield from steps_of(self, "scored", completions, **kwargs)), kwargs)


def _completion_text(completion: Any, index: int) -> str:
    """Return the text of a completion: a plain string, or the last assistant message of a conversation."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            # TRL builds {"role": "assistant", "content": ...}; some callers omit the role
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                raise DataFormatError(
                    f"completion {index}: the assistant message content must be a str, got {content!r}"
                )
        raise DataFormatError(f"completion {index}: a conversational completion has no assistant message")
    raise DataFormatError(
        f"completion {index}: expected a str or a list of chat messages, got {type(completion).__name__}"
    )


def _parse_constraints(raw: Any, index: int) -> tuple[Constraint, ...]:
    return _parse_column(raw, index, "constraints", _constraints_from_string, _constraints_from_list)


def _parse_column(raw: Any, index: int, name: str, from_string: Any, from_list: Any) -> Any:
    """A column entry given as a JSON string (parsed once, cached) or as a list; errors name the sample."""
    if isinstance(raw, str):
        try:
            return from_string(raw)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"sample {index}: {name!r} is not valid JSON ({err})") from None
        except DataFormatError as err:
            raise DataFormatError(f"sample {index}: {err}") from None
    return from_list(raw, index)


# GRPO scores several completions per prompt, so the same constraints string comes back again and
# again; Constraint objects are immutable, so parsed ones can be shared.
@functools.lru_cache(maxsize=4096)
def _constraints_from_string(raw: str) -> tuple[Constraint, ...]:
    return _constraints_from_list(json.loads(raw), None)


def _constraints_from_list(raw: Any, index: int | None) -> tuple[Constraint, ...]:
    where = "" if index is None else f"sample {index}: "
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise DataFormatError(f"{where}'constraints' must be a list of constraint dicts, got {type(raw).__name__}")
    return tuple(Constraint.from_json(c) for c in raw)


def _column(kwargs: Mapping[str, Any], name: str, n: int, what: str) -> Sequence[Any]:
    """The dataset column `name`, checked to hold one entry per completion."""
    if name not in kwargs:
        raise DataFormatError(
            f"this reward needs a dataset column {name!r} ({what}, or a JSON string of it); the columns received "
            f"were: {sorted(kwargs) or 'none'}. Build the dataset with `ifgym export prompts` "
            "(ifgym.rewards.export.prompt_rows)."
        )
    column = kwargs[name]
    if isinstance(column, str | bytes) or not isinstance(column, Sequence):
        raise DataFormatError(f"the {name!r} column must hold one entry per completion, got {type(column).__name__}")
    if len(column) != n:
        raise DataFormatError(f"{n} completions but {len(column)} {name!r} entries; they must pair up")
    return column


def _prompt_messages(prompts: Sequence[Any] | None, index: int, who: str) -> list[dict[str, str]]:
    """The conversation a completion answers (TRL's `prompts` entry for it), as chat messages."""
    if prompts is None:
        raise DataFormatError(f"{who} needs TRL's 'prompts' (the conversation each completion answers); none given")
    prompt = prompts[index]
    if isinstance(prompt, str) or not isinstance(prompt, Sequence):
        raise DataFormatError(
            f"sample {index}: {who} needs a conversational prompt (a list of chat messages), got "
            f"{type(prompt).__name__}; export prompts with `ifgym export prompts`, which writes them so"
        )
    return [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in prompt]


def _json_value(raw: Any, index: int, name: str) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw else None
        except json.JSONDecodeError as err:
            raise DataFormatError(f"sample {index}: {name!r} is not valid JSON ({err})") from None
    return raw


# ---------------------------------------------------------------------------------------------
# StructFlow: checklists
# ---------------------------------------------------------------------------------------------

CHECKLIST_REWARDS = ("weighted", "fraction", "all_pass")


@functools.lru_cache(maxsize=4096)
def _checklist_from_string(raw: str) -> tuple[ChecklistItem, ...]:
    return _checklist_from_list(json.loads(raw) if raw else [], None)


def _checklist_from_list(raw: Any, index: int | None) -> tuple[ChecklistItem, ...]:
    where = "" if index is None else f"sample {index}: "
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise DataFormatError(f"{where}'checklist' must be a list of checklist item dicts, got {type(raw).__name__}")
    try:
        return tuple(ChecklistItem.from_json(item) for item in raw)
    except (KeyError, TypeError, AttributeError) as err:
        raise DataFormatError(
            f"{where}a 'checklist' item is not a checklist item dict with id, question and type ({err!r})"
        ) from None


def _parse_checklist(raw: Any, index: int) -> tuple[ChecklistItem, ...]:
    return _parse_column(raw, index, "checklist", _checklist_from_string, _checklist_from_list)


class ChecklistReward(_Rewards):
    """TRL reward for StructFlow rows: the env's turn reward over the turn's checklist (`checklist` column).

    Items a rule decides (a rule-checkable constraint, or a question of a fixed form, see
    `ifgym.rewards.questions`) are decided by the rule, exactly as `StructFlowScorer` does in the
    env. The other items (structural relations, style, StructFlowBench's own questions) go to
    `judge` (a `ChecklistJudge`, one call per completion, with the row's `prompts` as the dialogue)
    when one is given; **without a judge they are left out**: the reward is computed over the
    rule-decided items only, and a row with none of those gets None (TRL leaves it out). A judge
    answer that cannot be read is `unknown` and counts neither way, as in the env.

    `mode`: `"weighted"` (the env's default: satisfied weight / weight, structural items 2),
    `"fraction"` (yes / (yes + no)) or `"all_pass"` (1 when every scored item is yes, else 0: an
    unknown counts as not passed, as in the env). `loose=True` uses the loose verdicts. A row with an
    empty checklist is None (the env gives it 1: nothing to fail, nothing to learn).
    """

    def __init__(self, judge: ChecklistJudge | None = None, mode: str = "weighted", loose: bool = False):
        if mode not in CHECKLIST_REWARDS:
            raise UnknownNameError("ChecklistReward mode", mode, CHECKLIST_REWARDS)
        if not isinstance(loose, bool):
            raise ConfigError(f"ChecklistReward loose must be True or False, got {loose!r}")
        if judge is not None and not (hasattr(judge, "judge") and hasattr(judge, "ajudge")):
            raise ConfigError(
                "ChecklistReward judge must be a ChecklistJudge (ifgym.rewards.structflow.judge) or None, "
                f"got {judge!r}"
            )
        self.judge = judge
        self.mode = mode
        self.loose = loose
        self.__name__ = f"ifgym_checklist_{mode}{'_loose' if loose else ''}{'_judged' if judge else ''}"

    def __repr__(self) -> str:
        return f"ChecklistReward(judge={self.judge!r}, mode={self.mode!r}, loose={self.loose})"

    def _scorer(self) -> Any:
        from ifgym.rewards.structflow.scorer import StructFlowScorer

        return StructFlowScorer(self.judge)

    def _rows(self, completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[str, TurnSpec, list | None]]:
        column = _column(kwargs, "checklist", len(completions), "per sample a list of checklist item dicts")
        prompts = kwargs.get("prompts")
        rows = []
        for i, (completion, raw) in enumerate(zip(completions, column, strict=True)):
            spec = TurnSpec(checklist=_parse_checklist(raw, i))
            history = _prompt_messages(prompts, i, "ChecklistReward with a judge") if self.judge else None
            rows.append((_completion_text(completion, i), spec, history))
        return rows

    def _reward(self, spec: TurnSpec, scores: Any) -> Scored:
        if not spec.checklist:
            return None, []
        verdicts = scores.loose if self.loose else scores.strict
        # without a judge, the items it would answer carry the scorer's "needs a judge" verdict: leave them out
        kept = [k for k, v in enumerate(verdicts) if v.source != "none"]
        labels = [(scores.groups[k], verdicts[k].label) for k in kept]
        if not kept:
            return None, labels
        outcome = turn_outcome(
            [verdicts[k] for k in kept],
            [scores.groups[k] for k in kept],
            self.mode,
            item_weights=[scores.weights[k] for k in kept],
        )
        return (outcome.reward if outcome.defined else None), labels

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion against the checklist in the same row of `kwargs["checklist"]`."""
        return self.call(completions, **kwargs)

    @twin
    def scored(self, completions: Sequence[Any], **kwargs: Any) -> Steps[list[Scored]]:
        """Each completion's reward with the (item type, label) of every verdict behind it.

        `ascored` runs the judge's calls for the batch concurrently; `scored` one after the other.
        """
        scorer = self._scorer()
        rows = [self._one(scorer, *row) for row in self._rows(completions, kwargs)]
        return (yield Call(_each, _together, (rows,)))

    def _one(self, scorer: Any, text: str, spec: TurnSpec, history: list | None) -> Steps[Scored]:
        if not spec.checklist:
            return None, []
        return self._reward(spec, (yield from steps_of(scorer, "score", text, spec, history)))


# ---------------------------------------------------------------------------------------------
# FlexBench: dimensions
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _dimensions_from_string(raw: str) -> DimensionSet:
    from ifgym.rewards.flexbench import DimensionSet

    return DimensionSet.from_json(json.loads(raw), "'dimensions' column")


def _parse_dimensions(raw: Any, index: int) -> DimensionSet | None:
    from ifgym.rewards.flexbench import DimensionSet

    if raw is None or raw == "":
        return None
    if isinstance(raw, DimensionSet):
        return raw
    try:
        if isinstance(raw, str):
            return _dimensions_from_string(raw)
        return DimensionSet.from_json(raw, "'dimensions' column")
    except json.JSONDecodeError as err:
        raise DataFormatError(f"sample {index}: 'dimensions' is not valid JSON ({err})") from None
    except DataFormatError as err:
        raise DataFormatError(f"sample {index}: {err}") from None


def _opening_line(history: Sequence[Mapping[str, str]]) -> str | None:
    """The assistant's scripted opening line: an assistant message before the caller's first words."""
    for m in history:
        if m["role"] == "user":
            return None
        if m["role"] == "assistant":
            return m["content"]
    return None


class FlexBenchReward:
    """TRL reward for FlexBench rows: the env's turn reward, by the dimension files' offline rules.

    The row's `prompts` entry is the call so far (SOP, the scripted opening line, the caller's
    latest words) and `dimensions` its SOP's dimension set (JSON). The completion is judged with
    the call, as the env's `judge="rules"` does after every reply, and against the call without it:
    reward = (base actions and branches newly satisfied − always-on rules newly broken) / number
    of dimensions, in [−1, 1] (see `FlexBenchEnv`'s Rewards). A dimension's verdict on this turn
    is what one more reply decides, given the call so far. Dimensions without an offline `rule`
    stay unknown (they never count); a row whose dimensions have none is None (an LLM-judged
    dimension set needs the env's LLM judge, which is not run per completion). The env's
    end-of-call term (`end_weight` × the episode score) needs the whole call: not included.
    """

    __name__ = "ifgym_flexbench_turn"

    def __repr__(self) -> str:
        return "FlexBenchReward()"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion in its call (`prompts`) against its row's `dimensions`."""
        return _logged(self.scored(completions, **kwargs), kwargs)

    def scored(self, completions: Sequence[Any], **kwargs: Any) -> list[Scored]:
        """Each completion's reward with the (dimension kind, label after the reply) of every ruled dimension."""
        column = _column(kwargs, "dimensions", len(completions), "per sample a FlexBench dimension set")
        prompts = kwargs.get("prompts")
        out: list[Scored] = []
        for i, (completion, raw) in enumerate(zip(completions, column, strict=True)):
            dims = _parse_dimensions(raw, i)
            text = _completion_text(completion, i)
            history = _prompt_messages(prompts, i, "FlexBenchReward")
            out.append((None, []) if dims is None else _flex_turn(dims, history, text))
        return out


def _flex_turn(dims: DimensionSet, history: list[dict[str, str]], reply: str) -> Scored:
    from ifgym.rewards.flexbench import FlexBenchRubric, FlexBenchScorer, RuleDimensionChecker
    from ifgym.rewards.scorer import Scores

    ruled = [d for d in dims.dimensions if d.rule is not None]
    if not ruled:
        return None, []
    judge = RuleDimensionChecker()
    scorer = FlexBenchScorer(dims, judge, _opening_line(history))
    trace = scorer.trace(history, reply)
    # the env's own rubric, graded turn by turn as the env did: a dimension counts the turn it is first met
    rubric = FlexBenchRubric(dims, reward="turn")
    for end, message in enumerate(trace, 1):
        if message["role"] == "assistant" and not message["scripted"]:
            verdicts = judge.judge(dims, trace[:end])
            grade = rubric.grade(Scores(verdicts, list(verdicts), list(dims.ids)))
    return grade.reward, [(d.kind, rubric.last.labels[d.id]) for d in ruled]


# ---------------------------------------------------------------------------------------------
# Any env: dispatch on the row
# ---------------------------------------------------------------------------------------------


def scorer_of(episode: Episode) -> str:
    """Which scorer an episode's turns were scored by: "flexbench", "checklist" (StructFlow) or "constraints".

    Its task's `training_reward` says (`ifgym.core.tasks.task_of`).
    """
    return task_of(episode).training_reward(episode)


class TurnReward(_Rewards):
    """TRL reward for rows of any env: each row goes to its env's reward by the row's `scorer` column.

    `constraints` → `ConstraintReward(mode="fraction", loose=loose)` (EvolIF's default turn
    reward); `checklist` → `ChecklistReward(judge, mode="weighted", loose=loose)` (StructFlow's);
    `flexbench` → `FlexBenchReward()`. So a dataset exported from runs of several envs trains on
    each turn's own reward. None where the env's reward cannot be computed (see each class).
    """

    def __init__(self, judge: ChecklistJudge | None = None, loose: bool = False):
        self.parts = {
            "constraints": ConstraintReward(loose=loose),
            "checklist": ChecklistReward(judge, loose=loose),
            "flexbench": FlexBenchReward(),
        }
        self.__name__ = f"ifgym_turn{'_loose' if loose else ''}{'_judged' if judge else ''}"

    def __repr__(self) -> str:
        return f"TurnReward(judge={self.parts['checklist'].judge!r}, loose={self.parts['checklist'].loose})"

    def _groups(self, completions: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, list[int]]:
        column = _column(kwargs, "scorer", len(completions), f"per sample one of {', '.join(SCORERS)}")
        groups: dict[str, list[int]] = {}
        for i, kind in enumerate(column):
            if kind not in SCORERS:
                raise UnknownNameError(f"sample {i}: scorer", str(kind), SCORERS)
            groups.setdefault(kind, []).append(i)
        return groups

    @staticmethod
    def _subset(kwargs: Mapping[str, Any], idx: list[int], n: int) -> dict[str, Any]:
        return {
            k: [v[i] for i in idx] if isinstance(v, Sequence) and not isinstance(v, str) and len(v) == n else v
            for k, v in kwargs.items()
        }

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion with the reward of its row's env."""
        return self.call(completions, **kwargs)

    @twin
    def scored(self, completions: Sequence[Any], **kwargs: Any) -> Steps[list[Scored]]:
        """Each completion's reward with the (group, label) of the verdicts behind it, from its row's reward.

        `ascored` awaits the checklist judge's calls (they run concurrently).
        """
        out: list[Scored] = [(None, [])] * len(completions)
        for kind, idx in self._groups(completions, kwargs).items():
            batch, columns = [completions[i] for i in idx], self._subset(kwargs, idx, len(completions))
            part = self.parts[kind]
            if hasattr(part, "ascored"):  # it may await a judge
                values = yield from steps_of(part, "scored", batch, **columns)
            else:  # rules only, no I/O
                values = part.scored(batch, **columns)
            for i, value in zip(idx, values, strict=True):
                out[i] = value
        return out


class AsyncReward:
    """Wraps a reward so that TRL awaits it: `async __call__`, the wrapped reward's `acall` when it has one.

    TRL runs the async rewards of a step together on one event loop; a reward without `acall`
    (no I/O) runs in a worker thread. Picklable when the wrapped reward is; named after it.
    """

    def __init__(self, reward: Any):
        if not callable(reward):
            raise ConfigError(f"AsyncReward wraps a reward function, got {reward!r}")
        self.reward = reward
        self.__name__ = getattr(reward, "__name__", type(reward).__name__)

    def __repr__(self) -> str:
        return f"AsyncReward({self.reward!r})"

    async def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Await the wrapped reward on this batch."""
        if hasattr(self.reward, "acall"):
            return await self.reward.acall(completions, **kwargs)
        return await asyncio.to_thread(self.reward, completions, **kwargs)


# ---------------------------------------------------------------------------------------------
# Whole episodes
# ---------------------------------------------------------------------------------------------

# Ends that mean the user gave up: the dialogue did not survive.
GAVE_UP = ("patience", "user_lost_patience", "user_hung_up")


def survived(episode: Episode) -> bool:
    """True unless the user gave up (patience ran out, the caller lost patience or hung up)."""
    return episode.done_reason not in GAVE_UP


def episode_return(turn_rewards: Sequence[float], discount: float = 1.0) -> float:
    """The discounted sum of turn rewards: sum over t of discount**t * r_t."""
    return float(sum(r * discount**t for t, r in enumerate(turn_rewards)))


class EpisodeReturn:
    """Reward for trainers that roll out whole episodes: an episode's discounted return, plus survival.

    Reads the column `episode` (an ifgym `Episode`, its JSON dict or JSON string: what a rollout
    function that plays the env returns as an extra field): reward = sum_t discount**t * r_t over
    the episode's recorded turn rewards (the env's rewards, FlexBench's end-of-call term
    included) + `survival_bonus` when the user did not give up (`survived`). Divided by the number
    of turns when `per_turn=True` (a mean that long episodes cannot inflate). With `min_words`, a
    reply of fewer words counts 0 whatever the env gave it (`LengthFloor`'s guard, turn by turn). An
    episode without turns is None.
    """

    def __init__(self, discount: float = 1.0, survival_bonus: float = 0.0, per_turn: bool = False, min_words: int = 0):
        for name, value in (("discount", discount), ("survival_bonus", survival_bonus)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"EpisodeReturn {name} must be a finite number, got {value!r}")
        if not 0 < discount <= 1:
            raise ConfigError(f"EpisodeReturn discount must be in (0, 1], got {discount!r}")
        if isinstance(min_words, bool) or not isinstance(min_words, int) or min_words < 0:
            raise ConfigError(f"EpisodeReturn min_words must be an int >= 0, got {min_words!r}")
        self.discount = float(discount)
        self.survival_bonus = float(survival_bonus)
        self.per_turn = bool(per_turn)
        self.min_words = min_words
        self.__name__ = "ifgym_episode_return"

    def __repr__(self) -> str:
        return (
            f"EpisodeReturn(discount={self.discount}, survival_bonus={self.survival_bonus}, per_turn={self.per_turn}"
            + (f", min_words={self.min_words})" if self.min_words else ")")
        )

    def turn_rewards(self, episode: Episode) -> list[float]:
        """Each turn's reward as credited: the env's, or 0 for a reply under `min_words` words."""
        return [0.0 if len(t.reply.split()) < self.min_words else t.reward for t in episode.turns]

    def score(self, episode: Episode) -> float | None:
        """The reward of one episode."""
        rewards = self.turn_rewards(episode)
        if not rewards:
            return None
        value = episode_return(rewards, self.discount)
        if self.per_turn:
            value /= len(rewards)
        return value + (self.survival_bonus if survived(episode) else 0.0)

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """One reward per completion, from the episode in the same row of `kwargs["episode"]`."""
        column = _column(kwargs, "episode", len(completions), "per sample the ifgym Episode the completion played")
        out: list[float | None] = []
        for i, raw in enumerate(column):
            if not isinstance(raw, Episode):
                data = _json_value(raw, i, "episode")
                if not isinstance(data, Mapping):
                    raise DataFormatError(
                        f"sample {i}: 'episode' must be an ifgym Episode or its JSON, got {raw!r:.80}"
                    )
                try:
                    raw = Episode.from_json(data)
                except (KeyError, TypeError) as err:
                    raise DataFormatError(f"sample {i}: 'episode' is not an ifgym Episode's JSON ({err!r})") from None
            out.append(self.score(raw))
        return out


class LengthFloor:
    """Wraps a reward: a completion of fewer than `min_words` words gets 0, whatever the wrapped reward says.

    A guard against the cheapest way to meet format rules (an almost empty reply meets "start with
    'Sure'", "no commas" and "lowercase" at once). Words are whitespace-separated tokens. Named
    after the wrapped reward; picklable when it is.
    """

    def __init__(self, reward: Any, min_words: int):
        if isinstance(min_words, bool) or not isinstance(min_words, int) or min_words < 1:
            raise ConfigError(f"LengthFloor min_words must be an int >= 1, got {min_words!r}")
        self.reward = reward
        self.min_words = min_words
        self.__name__ = f"{getattr(reward, '__name__', type(reward).__name__)}_min{min_words}w"

    def __repr__(self) -> str:
        return f"LengthFloor({self.reward!r}, min_words={self.min_words})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The wrapped reward, with 0 for every completion under the floor."""
        values = self.reward(completions, **kwargs)
        short = [len(_completion_text(c, i).split()) < self.min_words for i, c in enumerate(completions)]
        return [0.0 if s else v for s, v in zip(short, values, strict=True)]
