"""A made-up run folder for the viewer: episodes of three envs (EvolIF, StructFlow, FlexBench), a summary, plots.

Each episode is built from ifgym's own types and written as `ifgym eval` writes them (one JSON line
each, plus a failed-episode line), with verdicts drawn from a seeded generator: rule verdicts for
EvolIF's format constraint, judge verdicts (`judge:canned-judge`) for its tone and style constraints
and for StructFlow's and FlexBench's checklist items. The summary is made up too (its numbers are
what the viewer must show); the plots are drawn by ifgym's `report.write_plots` from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import ChecklistItem, Constraint, Episode, TurnRecord, TurnSpec, Verdict
from ifgym.runner.report import RunTally, write_plots, write_summary
from ifgym.runner.rollout import FailedEpisode

ENVS = ("ifgym/EvolIF-v1", "ifgym/StructFlow-v0", "ifgym/FlexBench-v0")
JUDGE = "judge:canned-judge"
EVOLIF = (
    Constraint("format.json", {}),
    Constraint("emotion.tone", {"emotion": "happy"}),
    Constraint("style.register", {"style": "formal"}),
)
STRUCTFLOW = (
    ChecklistItem("follow-up:1", "Does the reply build on the answer of turn 1?", "follow-up", kind="structural"),
    ChecklistItem("intra:1", "Is the reply written for a beginner?", "audience"),
)
FLEXBENCH = (
    ChecklistItem("greeting", "Does the agent greet the caller?", "greeting", kind="sop"),
    ChecklistItem("verify_identity", "Does the agent verify the caller's identity?", "verify_identity", kind="sop"),
)


FILLER = "Tea is brewed from the leaves of Camellia sinensis, steeped in water hot enough to draw out its flavour. "


def reply_text(env: str, seed: int, turn: int, tag: str = "", chars: int = 0) -> str:
    """The made-up reply of a turn: says whose it is, so tests can find it; `chars` pads it to about that length."""
    text = f"{tag}reply of seed {seed} turn {turn} in {env}.\nA second line."
    return text + ("\n\n" + FILLER * (chars // len(FILLER)) if chars > len(text) else "")


def made_up_episode(
    seed: int, rng: np.random.Generator, *, tag: str = "", reply: str | None = None, chars: int = 0
) -> Episode:
    """One episode of env ENVS[seed % 3]: 1-4 turns, verdicts drawn from `rng`."""
    env = ENVS[seed % 3]
    turns = []
    n_turns = int(rng.integers(1, 5))
    for k in range(n_turns):
        if env == ENVS[0]:
            spec = TurnSpec(constraints=EVOLIF, topic="tea", move="continue")
        else:
            spec = TurnSpec(checklist=STRUCTFLOW if env == ENVS[1] else FLEXBENCH, move="continue")
        sources = ["rule", JUDGE, JUDGE] if env == ENVS[0] else [JUDGE, JUDGE]
        verdicts, loose = [], []
        for n, source in enumerate(sources):
            label = str(rng.choice(["yes", "no", "unknown"], p=[0.55, 0.4, 0.05]))
            verdicts.append(Verdict(label, f"reason {n} of seed {seed} turn {k}", source))
            loose.append(Verdict("yes" if source == "rule" else label, f"loose reason {n}", source))
        ok = all(v.label == "yes" for v in verdicts)
        turns.append(
            TurnRecord(
                index=k + 1,
                user=f"user of seed {seed} turn {k + 1}: please answer",
                spec=spec,
                reply=reply if reply is not None and k == 0 else reply_text(env, seed, k + 1, tag, chars),
                verdicts=verdicts,
                loose_verdicts=loose,
                reward=float(np.mean([v.label == "yes" for v in verdicts])),
                patience=3 - k if not ok else 3,
            )
        )
    return Episode(f"ep-{seed}", env, seed, turns, done_reason="max_turns" if n_turns == 4 else "patience")


SUMMARY: dict[str, Any] = {
    "protocol": {
        "env_id": "three envs (made up)",
        "paper": "EvolIF",
        "max_turns": 4,
        "deviations": ["the user is made up, not the paper's simulator", "judged by canned-judge, not GPT-4o"],
    },
    # turns: a count (the episodes' turns, filled in by write_made_up_run); ROB: STA's earlier name (an alias)
    "strict": {
        "CSR": 0.51234,
        "ISR": 0.25,
        "STA": 0.3,
        "ROB": 0.3,
        "turns": 0.0,
        "pass_rate/emotion": 0.4,
        "pass_rate/format": 0.66667,
    },
    "loose": {
        "CSR": 0.6125,
        "ISR": 0.3,
        "STA": 0.35,
        "ROB": 0.35,
        "turns": 0.0,
        "pass_rate/emotion": 0.4,
        "pass_rate/format": 1.0,
    },
    "ci": {
        "strict": {
            "CSR": [0.45, 0.575],
            "ISR": [0.2, 0.3],
            "STA": [0.22, 0.38],
            "pass_rate/emotion": [0.3, 0.5],
            "pass_rate/format": None,
        },
        "loose": {"CSR": [0.55, 0.675], "ISR": [0.25, 0.35], "pass_rate/emotion": [0.3, 0.5], "pass_rate/format": None},
    },
    "ci_settings": {"method": "percentile bootstrap over dialogues", "resamples": 1000, "level": 0.95, "seed": 0},
    "aliases": {"ROB": "STA"},
    "headline_metric": "CSR",
    "run": {
        "run_key": "0123456789ab",
        "started": "2026-11-26T16:18:51+00:00",
        "env": "three envs (made up)",
        "policy": "chat",
        "judge": "llm",
        "models": {
            "policy": {"model": "made-up-model", "backend": "openai", "host": "127.0.0.1"},
            "judge": {"model": "canned-judge", "backend": "openai", "host": "127.0.0.1"},
        },
    },
    "headline": ["CSR", "ISR"],
    "definitions": {"ISR": "the env's own words for ISR"},  # CSR's comes from the viewer's list
    "judge": {
        "kind": "llm",
        "model": "canned-judge",
        "mode": "blind",
        "audit": {"set": "short", "passed": True, "accuracy": 0.91, "kappa": 0.82, "yes_rate_negatives": 0.07},
    },
    "output": "episodes.jsonl",
}


def write_made_up_run(
    folder: Path,
    episodes: int = 30,
    *,
    tag: str = "",
    reply: str | None = None,
    failed_seed: int | None = None,
    reply_chars: int = 0,
) -> dict[str, Any]:
    """A run folder of `episodes` made-up episodes (seeds 0..n-1) and a failed one (`failed_seed`); its summary.

    `reply` is seed 0's first reply; `reply_chars` pads every other reply to about that many characters.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    made = [
        made_up_episode(s, rng, tag=tag, reply=reply if s == 0 else None, chars=reply_chars) for s in range(episodes)
    ]
    lines = [e.to_jsonl() for e in made]
    if failed_seed is not None:
        failed = FailedEpisode(
            f"ep-{failed_seed}", ENVS[0], failed_seed, {"type": "BackendError", "message": "the model went away"}, 2
        )
        lines.append(failed.to_jsonl())
    (folder / "episodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    turns = float(sum(len(e.turns) for e in made))
    summary = dict(
        SUMMARY,
        episodes=episodes,
        strict=SUMMARY["strict"] | {"turns": turns},
        loose=SUMMARY["loose"] | {"turns": turns},
    )
    write_summary(summary, folder / "summary.json")
    tally = RunTally(lengths=[len(e.turns) for e in made], patience=True)
    write_plots(tally, summary, folder)
    return summary
