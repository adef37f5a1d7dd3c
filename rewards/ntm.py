"""NTM's scoring: the final reply judged against the dialogue's checkpoints, TCR and ACT per length bucket.

The scorer sends every checkpoint to ifgym's checklist judge (`ChecklistJudge`, one call per
dialogue: no rule decides a checkpoint); without a judge every checkpoint is unknown. The rubric
scores the final turn only (intermediate turns: reward 0, `info["scored"]` False) and keeps no
patience (the paper has none).

Metrics (`summarize`, from one `NTMRow` per dialogue):
- `TCR`: per dialogue, met checkpoints / judged checkpoints (unknown verdicts are neither met nor
  unmet, and counted in `unknown_share`), averaged over dialogues (the paper's headline);
  `TCR_pooled`: met / judged over all checkpoints at once; `TCR/<bucket>`: the mean per length
  bucket (10, 15, 20, 25 turns, other); `TCR/paper_lengths`: the mean over the dialogues at the
  paper's lengths, the other lengths left out (the released file holds both; `env.lengths` restricts a run).
- `ACT`: context tokens sent to the policy model per turn, from the policy's own usage records
  (`meta["policy_usage"]`: a wrapper's `context_tokens`, else a plain chat policy's
  `prompt_tokens`; a dialogue whose server left a call's usage unreported is left out), pooled over
  the turns of the bucket's dialogues (`ACT/<bucket>`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ifgym.core import Episode, TurnSpec, Verdict
from ifgym.errors import DataFormatError
from ifgym.rewards.metrics import rows_of
from ifgym.rewards.rubric import Ending, Grade, Patience, Rubric
from ifgym.rewards.scorer import RulesThenJudgeScorer, Scores, no_judge

BUCKETS = ("10", "15", "20", "25", "other")  # the same as ifgym.simulators.ntm.LENGTH_BUCKETS


def _final_request(history: list[dict] | None) -> list[dict]:
    """The last user message of `history` alone: the judge reads the final request and reply, as the paper's."""
    users = [m for m in history or () if m.get("role") == "user"]
    return users[-1:]


class NTMScorer(RulesThenJudgeScorer):
    """Every checkpoint goes to the checklist judge in one call; with no judge each is unknown.

    The judge sees the final user request and the reply, not the earlier turns (the paper's judge
    reads the final reply and the checkpoint question; a 25-turn history would only add cost).
    """

    def __init__(self, judge: Any = None):
        self.judge = judge

    def _judge_history(self, history: list[dict] | None) -> list[dict] | None:
        """The final user request alone (see the class docstring)."""
        return _final_request(history)

    unjudged = no_judge("NTM checkpoints need a judge (judge='llm'); no rule decides them")

    def _items(self, spec: TurnSpec) -> Sequence[Any]:
        return spec.checklist

    def _split(self, reply: str, spec: TurnSpec) -> tuple[dict[int, Verdict], dict[int, Verdict], list[int]]:
        return {}, {}, list(range(len(spec.checklist)))

    def _merge(self, spec: TurnSpec, strict: dict[int, Verdict], loose: dict[int, Verdict]) -> Scores:
        n = range(len(spec.checklist))
        return Scores([strict[i] for i in n], [loose[i] for i in n], [item.type for item in spec.checklist])


def tcr(labels: Sequence[str]) -> float:
    """Met / judged checkpoints (NaN when none was judged)."""
    yes, no = labels.count("yes"), labels.count("no")
    return yes / (yes + no) if yes + no else math.nan


class NTMRubric(Rubric):
    """Scores the final turn only: its reward is the dialogue's TCR; no patience; ends after the last user turn.

    The env sets `max_turns` to the dialogue's length, so `end` sees `last_turn` on the final reply,
    which ends the dialogue as "script_end" (terminated, not truncated).
    """

    def __init__(self) -> None:
        self.patience = Patience(None)

    def scores_turn(self, ending: Ending | None) -> bool:
        """Only the final reply is judged."""
        return ending is not None

    def grade(self, scores: Scores | None) -> Grade:
        """0 and `scored` False for an intermediate turn; the final turn's TCR (0, undefined, if all unknown)."""
        if scores is None:
            return Grade(0.0, False, info={"scored": False, "unknown": 0, "reward_defined": False}, record={})
        labels = [v.label for v in scores.strict]
        value = tcr(labels)
        defined = not math.isnan(value)
        tally = {"unknown": labels.count("unknown"), "reward_defined": defined}
        return Grade(value if defined else 0.0, defined, info={"scored": True, "TCR": value, **tally}, record=tally)

    def end(self, reply: str, last_turn: bool) -> Ending | None:
        """The dialogue's last user turn answered: the end of the script."""
        return Ending("script_end") if last_turn else None


@dataclass(frozen=True, slots=True)
class NTMRow:
    """One dialogue as the metrics see it: its checkpoint labels, length bucket, and the policy's context cost."""

    dialogue: str
    bucket: str
    labels: tuple[str, ...]
    context_tokens: float | None  # None: the policy kept no usage record
    turns: int


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _context_tokens(usage: dict[str, Any]) -> float | None:
    """A wrapper's own count, else a plain policy's prompt tokens; None when unknown or incomplete."""
    if _number(usage.get("context_tokens")):
        return float(usage["context_tokens"])
    if _number(usage.get("prompt_tokens")) and not usage.get("missing_usage"):  # a call without usage: not known
        return float(usage["prompt_tokens"])
    return None


def episode_row(episode: Episode, loose: bool = False) -> NTMRow:
    """The dialogue's row: the final turn's verdicts (strict, or loose), its length bucket and context tokens."""
    meta = episode.meta.get("dialogue", {})
    final = episode.turns[-1] if episode.turns else None
    verdicts = (final.loose_verdicts if loose else final.verdicts) if final is not None else []
    usage = episode.meta.get("policy_usage", {})
    turns = usage.get("turns") if isinstance(usage.get("turns"), int) else len(episode.turns)
    return NTMRow(
        dialogue=str(meta.get("id", episode.episode_id)),
        bucket=str(meta.get("bucket", "other")),
        labels=tuple(v.label for v in verdicts),
        context_tokens=_context_tokens(usage),
        turns=int(turns),
    )


def _mean(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return sum(known) / len(known) if known else math.nan


def _act(rows: Sequence[NTMRow]) -> float:
    counted = [r for r in rows if r.context_tokens is not None and r.turns]
    turns = sum(r.turns for r in counted)
    return sum(r.context_tokens for r in counted) / turns if turns else math.nan


def summarize_rows(rows: Sequence[NTMRow], loose: bool = False) -> dict[str, float]:
    """`summarize` from the dialogues' rows (`episode_row`); `loose` is the rows' business and is ignored here."""
    if not rows:
        raise DataFormatError("metrics need at least one episode; got an empty list")
    labels = [label for r in rows for label in r.labels]
    yes, no, unknown = labels.count("yes"), labels.count("no"), labels.count("unknown")
    out: dict[str, float] = {
        "TCR": _mean([tcr(r.labels) for r in rows]),
        "TCR_pooled": yes / (yes + no) if yes + no else math.nan,
        "unknown_share": unknown / len(labels) if labels else math.nan,
        "ACT": _act(rows),
    }
    paper = [r for r in rows if r.bucket != "other"]
    if paper:
        out["TCR/paper_lengths"] = _mean([tcr(r.labels) for r in paper])
    for bucket in BUCKETS:
        group = [r for r in rows if r.bucket == bucket]
        if group:
            out[f"TCR/{bucket}"] = _mean([tcr(r.labels) for r in group])
            out[f"ACT/{bucket}"] = _act(group)
            out[f"dialogues/{bucket}"] = float(len(group))
    out.update(
        episodes=float(len(rows)),
        checkpoints=float(len(labels)),
        unknown=float(unknown),
        undetermined_dialogues=float(sum(math.isnan(tcr(r.labels)) for r in rows)),
    )
    return out


def summarize(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """TCR (mean and pooled, per bucket), the unknown share and ACT (overall and per bucket) over finished dialogues."""
    return summarize_rows(rows_of(episodes, episode_row, loose))


HEADLINE = (
    "TCR",
    "TCR_pooled",
    "unknown_share",
    "ACT",
    "TCR/paper_lengths",
    *(f"TCR/{b}" for b in BUCKETS),
    *(f"ACT/{b}" for b in BUCKETS),
)  # the metrics that get bootstrap intervals in `ifgym eval`
HEADLINE_METRIC = "TCR"  # the paper's headline number
DEFINITIONS: dict[str, str] = {
    "TCR": "task completion rate: per dialogue, checkpoints met / checkpoints judged in the final reply, averaged",
    "TCR_pooled": "checkpoints met / checkpoints judged, pooled over every dialogue's checkpoints",
    "unknown_share": "share of checkpoints the judge left unknown (neither met nor unmet)",
    "ACT": "average context tokens: tokens sent to the policy model per turn (its own usage records)",
    **{f"TCR/{b}": f"TCR of the {b}-turn dialogues" for b in BUCKETS[:-1]},
    "TCR/other": "TCR of the dialogues of other lengths",
    "TCR/paper_lengths": "TCR of the dialogues at the paper's lengths (10, 15, 20, 25 turns), the others left out",
    **{f"ACT/{b}": f"ACT of the {b}-turn dialogues" for b in BUCKETS[:-1]},
    "ACT/other": "ACT of the dialogues of other lengths",
}
