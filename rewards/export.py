"""Episodes to training data: four JSON Lines schemas, each loadable with `datasets.load_dataset("json", ...)`.

`ifgym export SCHEMA EPISODES... OUT` (or `export(schema, episodes, path)`) writes one of:

- `prompts` (GRPO/PPO): one row per turn. `prompt` is the conversation the policy saw before
  answering (the env's observation: system prompt, FlexBench's scripted opening line, earlier
  turns with the answers the env kept, golden ones under StructFlow's golden context, then the
  user's message); `scorer` says which reward scores the row ("constraints", "checklist",
  "flexbench"); `constraints`, `checklist` and `dimensions` are JSON strings of what that reward
  reads ("[]" / "" where not used: a column of dicts whose keys differ from row to row would be
  widened by `datasets`, corrupting them); `reply` and `reward` are the recorded reply and its
  turn reward; `env_id`, `episode_id`, `seed`, `turn` say where the row came from. Train with
  `ifgym.rewards.trl.TurnReward` (or the env's own reward class).
- `sft`: the turns whose reply passed (turn reward >= `min_reward`, default 1.0: every scored
  item satisfied) as `messages` (the prompt plus the reply), with `reward` and the ids.
- `preferences` (DPO): from several replies to the same prompt (several runs, policies or samples
  over the same seeds), pairs `prompt`, `chosen`, `rejected` (one assistant message each) where the
  chosen reply's turn reward is higher by at least `margin`; `chosen_reward`, `rejected_reward` and
  the ids beside them. Prompts match when the whole conversation is identical, so EvolIF's
  own-context turns after the first pair up only where the earlier replies were the same, while
  StructFlow's golden-context turns pair up across policies at every turn. Ties (equal rewards) and
  differences below the margin are skipped and counted; identical reply texts are one reply.
  `pairs="all"` (default) writes every qualifying pair of a prompt, `"best_worst"` one pair per
  prompt (its best against its worst reply).
- `turns`: one row per turn, for analysis: `user`, `reply`, `reward`, `reward_defined`, `passed`,
  `verdicts` and `loose_verdicts` (each `{item, group, label, reason, source}`), `patience`,
  `last` and the episode's `done_reason`.

The turn reward is the env's: EvolIF's and StructFlow's recorded reward, and for FlexBench the
turn term only, (newly satisfied − newly broken) / dimensions, without the end-of-call term, so
that the last turn compares with the others. A turn whose reward is undefined (every verdict
unknown, or a FlexBench turn that was not judged) has `reward` null and takes no part in `sft` or
`preferences` (counted). Every export reports its counts (`ExportReport`), and a `prompts` export
counts the rows the reward cannot score without a judge (StructFlowBench's own checklists, whose
items need one): `TurnReward` returns None for those rows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core import Episode, TurnRecord
from ifgym.core.tasks import task_of
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.rewards.flexbench.report import dimensions_record, episode_dimensions
from ifgym.rewards.trl import TurnReward, scorer_of

__all__ = [
    "PAIRINGS",
    "SCHEMAS",
    "ExportReport",
    "check_options",
    "export",
    "observations",
    "preference_rows",
    "prompt_rows",
    "sft_rows",
    "turn_reward",
    "turn_rows",
]

SCHEMAS = ("prompts", "sft", "preferences", "turns")
PAIRINGS = ("all", "best_worst")
Message = dict[str, str]


@dataclass
class ExportReport:
    """What an export wrote and what it left out, with a warning per problem worth a look."""

    schema: str
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def line(self, path: str | Path | None = None) -> str:
        """One line for the console: rows written and the counts behind them."""
        counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.counts.items())
        where = f" to {path}" if path is not None else ""
        return f"wrote {self.rows} {self.schema} rows{where}" + (f" ({counts})" if counts else "")


def observations(episode: Episode) -> list[list[Message]]:
    """The conversation the policy saw before each turn of `episode`, rebuilt from the record.

    System prompt, FlexBench's scripted opening line, and for each earlier turn the user's message
    and the answer the env kept in the dialogue: the reply, or under StructFlow's golden context
    the turn's reference answer. Ends with the turn's user message.
    """
    history: list[Message] = []
    if episode.system_prompt:
        history.append({"role": "system", "content": episode.system_prompt})
    task = task_of(episode)
    opening = task.opening_line(episode) if task.opening_line is not None else None
    if opening:
        history.append({"role": "assistant", "content": opening})
    golden = episode.meta.get("dialogue", {}).get("context") == "golden"
    out = []
    for turn in episode.turns:
        prompt = [*history, {"role": "user", "content": turn.user}]
        out.append(prompt)
        kept = turn.spec.meta.get("golden_answer") if golden else None
        history = [*prompt, {"role": "assistant", "content": turn.reply if kept is None else kept}]
    return out


def turn_reward(episode: Episode, turn: TurnRecord) -> float | None:
    """The turn's own reward (see the module docstring); None when it is undefined."""
    task = task_of(episode)
    if task.turn_reward is not None:  # FlexBench's: dimensions newly satisfied less newly broken
        return task.turn_reward(episode, turn)
    if turn.info.get("reward_defined", True) is False:
        return None
    return float(turn.reward)


def _spec_columns(episode: Episode, turn: TurnRecord, scorer: str) -> dict[str, str]:
    spec = turn.spec
    checklist = [item.to_json() for item in spec.checklist] if scorer == "checklist" else []
    dimensions = dimensions_record(episode) if scorer == "flexbench" else None
    return {
        "scorer": scorer,
        "constraints": json.dumps([c.to_json() for c in spec.constraints], ensure_ascii=False),
        "checklist": json.dumps(checklist, ensure_ascii=False),
        "dimensions": json.dumps(dimensions, ensure_ascii=False) if dimensions is not None else "",
    }


def _ids(episode: Episode, turn: TurnRecord) -> dict[str, Any]:
    return {"env_id": episode.env_id, "episode_id": episode.episode_id, "seed": episode.seed, "turn": turn.index}


def _turns(episodes: Iterable[Episode]) -> Iterable[tuple[Episode, TurnRecord, list[Message]]]:
    for episode in episodes:
        if not isinstance(episode, Episode):
            raise ConfigError(
                f"export takes ifgym Episodes (see ifgym.runner.rollout.read_episodes), got {episode!r:.60}"
            )
        yield from zip(itertools.repeat(episode), episode.turns, observations(episode), strict=False)


def prompt_rows(episodes: Iterable[Episode]) -> tuple[list[dict[str, Any]], ExportReport]:
    """`prompts` rows (one per turn) and the report, which counts the rows `TurnReward()` cannot score."""
    rows = []
    for episode, turn, prompt in _turns(episodes):
        scorer = scorer_of(episode)
        row = {"prompt": prompt, **_spec_columns(episode, turn, scorer), "reply": turn.reply}
        rows.append(row | {"reward": turn_reward(episode, turn), **_ids(episode, turn)})
    report = ExportReport("prompts", len(rows))
    if rows:
        # what the rules-only reward makes of each row (its recorded reply stands in for a completion)
        columns = {k: [r[k] for r in rows] for k in ("scorer", "constraints", "checklist", "dimensions", "prompt")}
        scored = TurnReward()([r["reply"] for r in rows], prompts=columns.pop("prompt"), **columns)
        unscorable = sum(value is None for value in scored)
        report.counts["unscorable_without_judge"] = unscorable
        if unscorable:
            report.warnings.append(
                f"{unscorable} of {len(rows)} rows hold nothing the reward can score without a judge (their items "
                "need an LLM judge, or they have none): TurnReward() returns None for them. Give "
                "ChecklistReward/TurnReward a judge (ifgym.rewards.structflow.judge.ChecklistJudge), or drop those rows"
            )
    return rows, report


def sft_rows(episodes: Iterable[Episode], min_reward: float = 1.0) -> tuple[list[dict[str, Any]], ExportReport]:
    """`sft` rows: the turns whose reward is at least `min_reward`, as chat messages."""
    rows, below, undefined = [], 0, 0
    for episode, turn, prompt in _turns(episodes):
        reward = turn_reward(episode, turn)
        if reward is None:
            undefined += 1
        elif reward < min_reward:
            below += 1
        else:
            messages = [*prompt, {"role": "assistant", "content": turn.reply}]
            rows.append({"messages": messages, "reward": reward, **_ids(episode, turn)})
    report = ExportReport("sft", len(rows), {"below_min_reward": below, "reward_undefined": undefined})
    if not rows:
        report.warnings.append(f"no turn reached min_reward={min_reward}: nothing to fine-tune on")
    return rows, report


def _prompt_key(env_id: str, prompt: Sequence[Message]) -> str:
    return hashlib.sha256(json.dumps([env_id, prompt], ensure_ascii=False).encode()).hexdigest()


def preference_rows(
    episodes: Iterable[Episode], margin: float = 0.1, pairs: str = "all"
) -> tuple[list[dict[str, Any]], ExportReport]:
    """`preferences` rows: chosen/rejected pairs of replies to the same prompt (see the module docstring)."""
    if pairs not in PAIRINGS:
        raise UnknownNameError("preference pairs", pairs, PAIRINGS)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or margin < 0:
        raise ConfigError(f"margin must be a number >= 0, got {margin!r}")
    groups: dict[str, list[tuple[Episode, TurnRecord, list[Message], float]]] = {}
    undefined = duplicates = 0
    for episode, turn, prompt in _turns(episodes):
        reward = turn_reward(episode, turn)
        if reward is None:
            undefined += 1
            continue
        group = groups.setdefault(_prompt_key(episode.env_id, prompt), [])
        if any(turn.reply == other.reply for _, other, _, _ in group):
            duplicates += 1  # the same text again: one reply, not a pair with itself
            continue
        group.append((episode, turn, prompt, reward))
    rows, ties, below = [], 0, 0
    for group in groups.values():
        ranked = sorted(group, key=lambda g: -g[3])  # stable: equal rewards keep their input order
        candidates = [(ranked[0], ranked[-1])] if pairs == "best_worst" and len(ranked) > 1 else []
        if pairs == "all":
            candidates = list(itertools.combinations(ranked, 2))
        for hi, lo in candidates:
            if hi[3] == lo[3]:
                ties += 1
            elif hi[3] - lo[3] < margin:
                below += 1
            else:
                rows.append(_pair(hi, lo))
    counts = {
        "prompts": len(groups),
        "prompts_with_several_replies": sum(len(g) > 1 for g in groups.values()),
        "ties": ties,
        "below_margin": below,
        "duplicate_replies": duplicates,
        "reward_undefined": undefined,
    }
    report = ExportReport("preferences", len(rows), counts)
    if not counts["prompts_with_several_replies"]:
        report.warnings.append(
            "no prompt has two different replies: preferences need several runs, policies or samples over the same "
            "seeds (give several episode files)"
        )
    return rows, report


def _pair(hi: tuple, lo: tuple) -> dict[str, Any]:
    (ep_hi, t_hi, prompt, r_hi), (ep_lo, t_lo, _, r_lo) = hi, lo
    return {
        "prompt": prompt,
        "chosen": [{"role": "assistant", "content": t_hi.reply}],
        "rejected": [{"role": "assistant", "content": t_lo.reply}],
        "chosen_reward": r_hi,
        "rejected_reward": r_lo,
        "env_id": ep_hi.env_id,
        "seed": ep_hi.seed,
        "turn": t_hi.index,
        "chosen_episode": ep_hi.episode_id,
        "rejected_episode": ep_lo.episode_id,
    }


def _items(episode: Episode, turn: TurnRecord, scorer: str) -> list[tuple[str, str]]:
    """(item, group) per verdict: constraint id and group, checklist item id and type, or dimension id and kind."""
    if scorer == "constraints":
        return [(c.id, c.group) for c in turn.spec.constraints]
    if scorer == "flexbench":
        return [(d.id, d.kind) for d in episode_dimensions(episode).dimensions]
    return [(item.id, item.type) for item in turn.spec.checklist]


def _verdicts(verdicts: Sequence[Any], items: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    padded = list(items) + [("", "")] * (len(verdicts) - len(items))  # a FlexBench turn that was not judged: none
    return [
        {"item": item, "group": group, "label": v.label, "reason": v.reason, "source": v.source}
        for v, (item, group) in zip(verdicts, padded, strict=False)
    ]


def turn_rows(episodes: Iterable[Episode]) -> tuple[list[dict[str, Any]], ExportReport]:
    """`turns` rows: one per turn with its reward, strict and loose verdicts, patience and how the episode ended."""
    rows = []
    for episode, turn, _ in _turns(episodes):
        items = _items(episode, turn, scorer_of(episode))
        reward = turn_reward(episode, turn)
        rows.append(
            {
                **_ids(episode, turn),
                "user": turn.user,
                "reply": turn.reply,
                "reward": reward,
                "reward_defined": reward is not None,
                "passed": bool(turn.verdicts) and all(v.label == "yes" for v in turn.verdicts),
                "verdicts": _verdicts(turn.verdicts, items),
                "loose_verdicts": _verdicts(turn.loose_verdicts, items),
                "patience": turn.patience,
                "last": turn.index == len(episode.turns) - 1,
                "done_reason": episode.done_reason,
            }
        )
    return rows, ExportReport("turns", len(rows))


OPTIONS = {"prompts": (), "sft": ("min_reward",), "preferences": ("margin", "pairs"), "turns": ()}


def check_options(schema: str, options: dict[str, Any]) -> None:
    """Refuse an unknown schema, or an option `schema` does not take (naming the ones it does)."""
    if schema not in OPTIONS:
        raise UnknownNameError("export schema", schema, SCHEMAS)
    for key in options:
        if key not in OPTIONS[schema]:
            takes = ", ".join(OPTIONS[schema]) or "none"
            raise ConfigError(f"export {schema}: unknown option {key!r}; {schema} takes {takes}")


def export(schema: str, episodes: Iterable[Episode], path: str | Path, **options: Any) -> ExportReport:
    """Write `schema`'s rows for `episodes` to `path` (JSON Lines, UTF-8); return the report.

    Options: `min_reward` (sft), `margin` and `pairs` (preferences); others are refused. No rows
    (e.g. no prompt with two different replies for preferences) raise ConfigError saying why, and
    nothing is written.
    """
    check_options(schema, options)
    builders = {"prompts": prompt_rows, "sft": sft_rows, "preferences": preference_rows, "turns": turn_rows}
    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigError(f"export: {path} is a folder; give the output file, e.g. {path / f'{schema}.jsonl'}")
    rows, report = builders[schema](list(episodes), **options)
    if not rows:  # an empty file would load as a bare StopIteration in `datasets`, far from the cause
        counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report.counts.items())
        why = f" ({counts})" if counts else ""
        advice = f"; {report.warnings[0]}" if report.warnings else ""
        raise ConfigError(f"export {schema}: no rows to write{why}{advice}; nothing was written to {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return report
