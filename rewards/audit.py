"""Measure an LLM judge before trusting it: ifgym's gold calibration set through the scorers evaluation uses.

The gold set (`rewards/assets/judge_gold.json`, written for this project) has three suites:

- **evolif**: short texts labelled by hand on EvolIF's judged axes (emotion, reader age, register,
  voice); each text is a positive for its label and a clear negative for the labels it lists under
  `not` (at least 4 positives and 4 negatives per label). Scored by `EvolIFScorer(EvolIFJudge)`.
- **structflow**: replies with checklist questions whose answers are known: computed by a rule
  checker where the question is rule-decidable (`rule`), hand-labelled otherwise. Scored by
  `StructFlowScorer(ChecklistJudge)` with the questions as a replayed StructFlowBench turn holds
  them (no constraint attached), so rule-decidable questions reach the judge unless the scorer
  decides them itself.
- **flexbench**: call transcripts against a small SOP's dimensions, each labelled yes / no /
  unknown in FlexBench's meaning. Scored by `FlexBenchScorer(LLMDimensionJudge)`.

A fourth suite, **structflow_real**, holds real replies: a seeded sample of StructFlowBench's
released evaluation outputs (`rewards/assets/structflow_real/`, MIT, built by
`benchmarks/build_judge_suite.py`; 120 turns, 350 items, 97 answered "No" by the benchmark's GPT-4o
judge; 10 models, Mistral-7B, Llama-3.1-8B and Qwen2.5-7B held out), split by dialogue into dev
and test. Its reference is GPT-4o's verdict, scored with `StructFlowScorer(ChecklistJudge)` as a
replay is (earlier turns are the golden ones the benchmark's judge saw; question rules decide
what they can). Per constraint type (`type/...`) and turn relation (`relation/...`) it reports the
numbers above, the no-rate on the reference's "yes" items, and bootstrap intervals over turns
(`ifgym.core.stats.intervals`). The pre-eval audit of a checklist judge runs it (the short set: 30 test
turns) with the hand-written suite, and its own floor (`REAL_FLOOR`: agreement >= 0.85, kappa >= 0.6,
"yes" to at most a quarter of the reference's "no" items) refuses a judge below it, one that says "yes"
to most of those items first of all. `REAL_MATERIAL` says what real verdicts exist for the other
suites' judges (none that ifgym can use).

Injection variants append text to a negative case that tells the judge to pass it (naming the
required label where there is one). Every probe is scored through the same scorer, judge,
prompt and parser as an evaluation; only the client is wrapped so that an identical request is
sent once (blind prompts repeat across a text's items).

Per group and suite the audit reports: accuracy (share of clean items whose verdict equals the
gold label; unknown counts as wrong), yes-rate on negatives (share of clean items whose gold
label is not yes that were judged yes), Cohen's kappa against gold (`ifgym.core.stats.cohen_kappa`, labels
yes / no / unknown), injection flip rate (of the injected negatives whose clean twin was judged no, the
share judged yes; a clean unknown counts as not yes), the share of injected negatives judged yes,
unknown rate (items judged unknown where the gold answer is yes or no, injected ones included),
and per suite the model calls, tokens and seconds. `ifgym eval` runs the short set first (cached per
judge, mode, prompt version and gold version) and refuses a judge below `FLOOR`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core import ChecklistItem, TurnSpec
from ifgym.core.constraints import Constraint
from ifgym.errors import DataFormatError, UnknownNameError
from ifgym.llm.loop import run_async
from ifgym.llm.models import QWEN_FILE, QWEN_NAME, QWEN_SHA256
from ifgym.rewards.checks import check

__all__ = [
    "DEFAULT_MODES",
    "FLOOR",
    "LEARNED_MODE",
    "GOLD_PATH",
    "REAL_FLOOR",
    "REAL_MATERIAL",
    "REAL_PATH",
    "REAL_SPLITS",
    "SUITE_MODES",
    "SUITES",
    "Floor",
    "audit",
    "cached_audit",
    "calibrate_on_real",
    "calibrate_threshold",
    "format_report",
    "gold_version",
    "audit_key",
    "judge_identity",
    "known_audit",
    "load_gold",
    "load_real",
    "probes",
    "real_line",
    "real_version",
]

GOLD_PATH = Path(__file__).parent / "assets" / "judge_gold.json"
SCHEMA = "ifgym.judge_audit/v1"
REAL_PATH = Path(__file__).parent / "assets" / "structflow_real" / "suite.json"
# Audits of the packaged embedded judge, measured (benchmarks/judge_audits.py) and shipped so that its
# verdict, a refusal for most suites, is known before any model call; named by their cache key.
SHIPPED_AUDITS = Path(__file__).parent / "assets" / "judge_audits"
REAL_SPLITS = ("dev", "test", "all")
SUITES = ("evolif", "structflow", "flexbench", "structflow_real")
# What real material (a benchmark's own verdicts on real replies) exists for each suite's judge.
REAL_MATERIAL = {
    "structflow": "structflow_real: StructFlowBench's released GPT-4o verdicts on 10 models' replies (a sample)",
    "evolif": "none: EvolIF's repository (github.com/JiaQiSJTU/EvolvingInstructionFollowing at 4fcbc1a) releases "
    "user-side dialogues (queries, instructions, synthesis success flags) without model replies or judge scores, "
    "and without a licence; its judged groups are audited on the hand-written suite only",
    "flexbench": "none: FlexBench's paper reports its judge's agreement with experts, but ifgym has no real FlexBench "
    "verdicts; its dimensions are audited on the hand-written suite only",
}
AXIS_CONSTRAINTS = {  # axis -> (constraint id, param, suffix added to the label)
    "emotion": ("emotion.tone", "emotion", ""),
    "reader_age": ("reader_age.audience", "age", ""),
    "register": ("style.register", "style", ""),
    "voice": ("style.register", "style", " voice"),
}
LABELS = ("yes", "no", "unknown")
# The checklist judge learned from StructFlowBench's verdicts (`ifgym.rewards.structflow.learned`): no client;
# audited by passing the judge itself where a client goes (or any client, and its options in `judge_options`).
LEARNED_MODE = "learned"


def _modes() -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    from ifgym.rewards import flexbench
    from ifgym.rewards.evolif import judge as evolif_judge
    from ifgym.rewards.structflow import judge as structflow_judge

    return (
        {
            "evolif": evolif_judge.MODES,
            "structflow": (*structflow_judge.CHECKLIST_MODES, LEARNED_MODE),
            "flexbench": flexbench.DIMENSION_MODES,
            "structflow_real": (*structflow_judge.CHECKLIST_MODES, LEARNED_MODE),
        },
        {
            "evolif": evolif_judge.DEFAULT_MODE,
            "structflow": structflow_judge.DEFAULT_CHECKLIST_MODE,
            "flexbench": flexbench.DEFAULT_DIMENSION_MODE,
            "structflow_real": structflow_judge.DEFAULT_CHECKLIST_MODE,
        },
    )


SUITE_MODES, DEFAULT_MODES = _modes()  # each suite's judge modes, and the one its judge uses by default


@dataclass(frozen=True)
class Floor:
    """The least a judge must show on its suite before `ifgym eval` uses it."""

    accuracy: float = 0.75
    yes_rate_negatives: float = 0.5
    kappa: float | None = None  # None: not part of the floor

    def failures(self, numbers: Mapping[str, Any]) -> list[str]:
        """What falls short, in words ("accuracy 0.62 < 0.75"); empty when the judge passes."""
        out = []
        accuracy, yes_rate = numbers.get("accuracy"), numbers.get("yes_rate_negatives")
        if accuracy is None or accuracy < self.accuracy:
            out.append(f"accuracy {_num(accuracy)} < {self.accuracy}")
        if yes_rate is not None and yes_rate > self.yes_rate_negatives:
            out.append(f"yes-rate on negatives {_num(yes_rate)} > {self.yes_rate_negatives}")
        kappa = numbers.get("kappa")
        if self.kappa is not None and (kappa is None or kappa < self.kappa):
            out.append(f"kappa {_num(kappa, 2)} < {self.kappa}")
        return out

    def to_json(self) -> dict[str, float]:
        out = {"accuracy": self.accuracy, "yes_rate_negatives": self.yes_rate_negatives}
        return out if self.kappa is None else {**out, "kappa": self.kappa}


FLOOR = Floor()
# On real replies, what a checklist judge must show to be used without judge.trust=true: agreement with the
# benchmark's judge, chance-corrected agreement, and "yes" to at most a quarter of the reference's "no" items.
# A judge that cannot reach it (the embedded 1.5B model, measured in the README) is refused by default.
REAL_GOAL = {"accuracy": 0.85, "kappa": 0.6, "yes_rate_negatives": 0.25}
REAL_FLOOR = Floor(**REAL_GOAL)


# ---------------------------------------------------------------------------------------------
# The gold set, as probes (one scorer call each)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldItem:
    """One judged item with its known answer. `clean` names the uninjected twin of an injected item."""

    key: str
    group: str
    gold: str
    source: str = "hand"  # "hand" (labelled by a person), "rule" (computed by a rule checker), or "gpt-4o"
    clean: str | None = None
    tags: tuple[str, ...] = ()  # more groups the item is counted in (the real suite: its turn's relation)


@dataclass
class Probe:
    """One scorer call: a reply (and the messages before it) with the items it is judged on."""

    suite: str
    case: str
    reply: str
    history: list[dict[str, str]]
    items: list[GoldItem]
    # what the scorer is given: Constraints (evolif), ChecklistItems (structflow), or for flexbench the
    # positions of the probe's items among the dimensions (the scorer judges them all)
    payload: list[Any] = field(default_factory=list)


def load_gold(path: str | Path = GOLD_PATH) -> dict[str, Any]:
    """The gold set (a JSON file in the format of the shipped one)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"judge gold set {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != "ifgym.judge_gold/v1":
        raise DataFormatError(f"judge gold set {path}: schema must be 'ifgym.judge_gold/v1'")
    return data


def gold_version(gold: Mapping[str, Any] | None = None) -> str:
    """A short hash of the gold set (the shipped file by default): audits of different sets never mix in the cache."""
    if gold is None:
        return hashlib.sha256(GOLD_PATH.read_bytes()).hexdigest()[:12]
    return hashlib.sha256(json.dumps(gold, sort_keys=True).encode()).hexdigest()[:12]


def _claim(template: str, axis: str, label: str, claims: Mapping[str, str]) -> str:
    claim = claims[axis].format(label=label)
    return template.format(claim=claim, Claim=claim[:1].upper() + claim[1:], label=label, Label=label.capitalize())


def _evolif_probes(gold: Mapping[str, Any], short: bool) -> list[Probe]:
    section = gold["evolif"]
    out: list[Probe] = []
    for t_index, t in enumerate(section["texts"]):
        if short and not t.get("short"):
            continue
        items: list[tuple[str, str, str]] = []  # (axis, label, gold)
        for axis, label in t["labels"].items():
            negatives = t["not"].get(axis, [])
            items.append((axis, label, "yes"))
            items += [(axis, neg, "no") for neg in (negatives[:1] if short else negatives)]
        # one probe per item set holding at most one constraint per catalog group (as a turn does)
        probes: list[tuple[list[GoldItem], list[Constraint]]] = []
        for axis, label, answer in items:
            cid, param, suffix = AXIS_CONSTRAINTS[axis]
            constraint = Constraint(cid, {param: label + suffix})
            item = GoldItem(f"{t['id']}/{axis}={label}", axis, answer)
            slot = next((p for p in probes if all(c.group != constraint.group for c in p[1])), None)
            if slot is None:
                probes.append(([item], [constraint]))
            else:
                slot[0].append(item)
                slot[1].append(constraint)
        for k, (gold_items, constraints) in enumerate(probes):
            out.append(Probe("evolif", f"{t['id']}#{k}", t["text"], [], gold_items, constraints))
        if short and not t.get("short_injection"):
            continue
        # the first negative of the first axis, injected with a claim of that negative label
        axis, label, _ = next((i for i in items if i[2] == "no"), (None, None, None))
        if axis is None:
            continue
        template = section["injections"][t_index % len(section["injections"])]
        cid, param, suffix = AXIS_CONSTRAINTS[axis]
        clean_key = f"{t['id']}/{axis}={label}"
        out.append(
            Probe(
                "evolif",
                f"{t['id']}+injection",
                t["text"] + _claim(template, axis, label, section["claims"]),
                [],
                [GoldItem(clean_key + "+injection", axis, "no", clean=clean_key)],
                [Constraint(cid, {param: label + suffix})],
            )
        )
    return out


def _rule_answer(rule: Mapping[str, Any], reply: str) -> str:
    verdict = check(Constraint.from_json(rule["constraint"]), reply).label
    return {"yes": "no", "no": "yes"}.get(verdict, verdict) if rule.get("negate") else verdict


def _structflow_probes(gold: Mapping[str, Any], short: bool) -> list[Probe]:
    from ifgym.core.structflow import TYPE_WEIGHTS

    section = gold["checklist"]
    out: list[Probe] = []
    for c_index, case in enumerate(section["cases"]):
        if short and not case.get("short"):
            continue
        history = [*case.get("history", []), {"role": "user", "content": case["request"]}]
        checklist = [
            ChecklistItem(
                id=f"q{i}",
                question=item["question"],
                type=item["type"],
                kind=item.get("kind", "intra"),
                weight=float(TYPE_WEIGHTS.get(item["type"], 1.0)),
            )
            for i, item in enumerate(case["items"], start=1)
        ]

        def items_for(reply: str, suffix: str = "", case: Mapping[str, Any] = case) -> list[GoldItem]:
            out_items = []
            for i, item in enumerate(case["items"], start=1):
                answer = _rule_answer(item["rule"], reply) if "rule" in item else item["gold"]
                key = f"{case['id']}/q{i}"
                source = "rule" if "rule" in item else "hand"
                clean = key if suffix else None
                out_items.append(GoldItem(key + suffix, f"structflow/{source}", answer, source, clean))
            return out_items

        out.append(Probe("structflow", case["id"], case["reply"], history, items_for(case["reply"]), checklist))
        injection = section["injections"][c_index % len(section["injections"])]
        injected = case["reply"] + injection
        items = items_for(injected, "+injection")
        clean = {i.key: i.gold for i in items_for(case["reply"])}
        # only negatives that stay negative with the injection appended are scored as injected
        kept = [(it, c) for it, c in zip(items, checklist, strict=True) if it.gold == "no" and clean[it.clean] == "no"]
        if kept:
            out.append(
                Probe(
                    "structflow",
                    f"{case['id']}+injection",
                    injected,
                    history,
                    [it for it, _ in kept],
                    [c for _, c in kept],
                )
            )
    return out


def _flexbench_probes(gold: Mapping[str, Any], short: bool) -> list[Probe]:
    from ifgym.rewards.flexbench import DimensionSet

    section = gold["flexbench"]
    dims = DimensionSet.from_json(section["dimensions"], "judge gold flexbench dimensions")
    kinds = {d.id: d.kind for d in dims.dimensions}
    out: list[Probe] = []
    for c_index, case in enumerate(section["cases"]):
        if short and not case.get("short"):
            continue
        trace = case["trace"]
        history = [{"role": m["role"], "content": m["content"]} for m in trace[:-1]]
        reply = trace[-1]["content"]

        def items(suffix: str = "", case: Mapping[str, Any] = case) -> list[GoldItem]:
            return [
                GoldItem(
                    f"{case['id']}/{d}{suffix}",
                    f"flexbench/{kinds[d]}",
                    case["gold"][d],
                    clean=f"{case['id']}/{d}" if suffix else None,
                )
                for d in dims.ids
            ]

        out.append(Probe("flexbench", case["id"], reply, history, items(), list(range(len(dims.ids)))))
        # injected: the dimensions whose gold answer is not yes (the verdicts the injection asks to flip)
        negatives = [(k, item) for k, item in enumerate(items("+injection")) if item.gold != "yes"]
        if negatives:
            injection = section["injections"][c_index % len(section["injections"])]
            out.append(
                Probe(
                    "flexbench",
                    f"{case['id']}+injection",
                    reply + injection,
                    history,
                    [item for _, item in negatives],
                    [k for k, _ in negatives],
                )
            )
    return out


def load_real(path: str | Path = REAL_PATH) -> dict[str, Any]:
    """The real suite (a JSON file in the format of the shipped one, `benchmarks/build_judge_suite.py`'s)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"judge real suite {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != "ifgym.judge_real/v1":
        raise DataFormatError(f"judge real suite {path}: schema must be 'ifgym.judge_real/v1'")
    return data


def real_version(real: Mapping[str, Any] | None = None) -> str:
    """A short hash of the real suite (the shipped file by default), for the audit cache."""
    if real is None:
        return hashlib.sha256(REAL_PATH.read_bytes()).hexdigest()[:12]
    return hashlib.sha256(json.dumps(real, sort_keys=True).encode()).hexdigest()[:12]


def _real_probes(real: Mapping[str, Any], split: str, short: bool) -> list[Probe]:
    """One probe per sampled turn: the golden earlier turns, the request, the model's reply, GPT-4o's verdicts.

    `short` keeps the turns marked short (test split); else `split` picks dev, test or all.
    """
    from ifgym.core.structflow import TYPE_WEIGHTS

    if split not in REAL_SPLITS:
        raise UnknownNameError("real suite split", split, REAL_SPLITS)
    out: list[Probe] = []
    for turn in real["turns"]:
        if (short and not turn.get("short")) or (not short and split != "all" and turn["split"] != split):
            continue
        dialogue = real["dialogues"][str(turn["dialogue"])]
        turns = dialogue["turns"]
        history: list[dict[str, str]] = []
        for earlier in turns[: turn["turn"]]:
            history += [
                {"role": "user", "content": earlier["prompt"]},
                {"role": "assistant", "content": earlier["answer"]},
            ]
        current = turns[turn["turn"]]
        history.append({"role": "user", "content": current["prompt"]})
        if len(current["items"]) != len(turn["verdicts"]):
            raise DataFormatError(
                f"judge real suite turn {turn['id']}: {len(turn['verdicts'])} verdicts for "
                f"{len(current['items'])} items"
            )
        checklist, items = [], []
        for i, (item, verdict) in enumerate(zip(current["items"], turn["verdicts"], strict=True), start=1):
            kind = item["type"]
            structural = kind in ("follow-up", "refinement", "expansion", "summary", "recall")
            checklist.append(
                ChecklistItem(
                    id=f"q{i}",
                    question=item["question"],
                    type=kind,
                    kind="structural" if structural else "intra",
                    weight=float(TYPE_WEIGHTS.get(kind, 1.0)),
                )
            )
            items.append(
                GoldItem(
                    f"{turn['id']}/q{i}", f"type/{kind}", verdict, "gpt-4o", tags=(f"relation/{current['relation']}",)
                )
            )
        out.append(Probe("structflow_real", turn["id"], turn["reply"], history, items, checklist))
    return out


def probes(
    suite: str,
    short: bool = False,
    gold: Mapping[str, Any] | None = None,
    *,
    split: str = "test",
    real: Mapping[str, Any] | None = None,
) -> list[Probe]:
    """The probes of one suite (the short subset with `short=True`; the real suite's `split` otherwise)."""
    if suite == "structflow_real":
        return _real_probes(real if real is not None else load_real(), split, short)
    gold = gold if gold is not None else load_gold()
    builders = {"evolif": _evolif_probes, "structflow": _structflow_probes, "flexbench": _flexbench_probes}
    if suite not in builders:
        raise UnknownNameError("audit suite", suite, SUITES)
    return builders[suite](gold, short)


# ---------------------------------------------------------------------------------------------
# Running the judge
# ---------------------------------------------------------------------------------------------


class _OnceClient:
    """Sends each distinct request once and shares its answer (blind prompts repeat across a text's items).

    Counts the requests actually sent and their tokens; everything else is the wrapped client's.
    """

    def __init__(self, client: Any):
        self._client = client
        self._answers: dict[str, Any] = {}
        self.sent = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _key(self, messages: list[dict[str, str]], overrides: Mapping[str, Any]) -> str:
        return json.dumps([messages, overrides], sort_keys=True, ensure_ascii=False)

    def _sent(self, completion: Any) -> Any:
        self.sent += 1
        self.prompt_tokens += int(getattr(completion, "prompt_tokens", 0) or 0)
        self.completion_tokens += int(getattr(completion, "completion_tokens", 0) or 0)
        return completion

    def chat(self, messages: list[dict[str, str]], **overrides: Any) -> Any:
        key = self._key(messages, overrides)
        if key not in self._answers:
            self._answers[key] = self._sent(self._client.chat(messages, **overrides))
        return self._answers[key]

    async def achat(self, messages: list[dict[str, str]], **overrides: Any) -> Any:
        key = self._key(messages, overrides)
        if key not in self._answers:

            async def send() -> Any:
                return self._sent(await self._client.achat(messages, **overrides))

            self._answers[key] = asyncio.ensure_future(send())
        return await self._answers[key]


def build_scorer(
    suite: str,
    client: Any,
    mode: str,
    gold: Mapping[str, Any] | None = None,
    judge_options: Mapping[str, Any] | None = None,
) -> Any:
    """The scorer an env of this suite builds around an LLM judge, with the gold set's FlexBench dimensions.

    `judge_options` go to the checklist judge (e.g. `threshold` for probability mode).
    """
    if mode not in SUITE_MODES[suite]:
        raise UnknownNameError(f"{suite} judge mode", mode, SUITE_MODES[suite])
    if suite == "evolif":
        from ifgym.rewards.evolif.judge import EvolIFJudge
        from ifgym.rewards.evolif.scorer import EvolIFScorer

        return EvolIFScorer(EvolIFJudge(client, mode=mode))
    if suite in ("structflow", "structflow_real"):
        from ifgym.rewards.structflow.judge import ChecklistJudge
        from ifgym.rewards.structflow.learned import LearnedChecklistJudge
        from ifgym.rewards.structflow.scorer import StructFlowScorer

        if mode == LEARNED_MODE:
            given = client._client if isinstance(client, _OnceClient) else client
            if isinstance(given, LearnedChecklistJudge):
                return StructFlowScorer(given)
            return StructFlowScorer(LearnedChecklistJudge(**dict(judge_options or {})))

        return StructFlowScorer(ChecklistJudge(client, mode=mode, **dict(judge_options or {})))
    from ifgym.rewards.flexbench import DimensionSet, FlexBenchScorer, LLMDimensionJudge

    section = (gold if gold is not None else load_gold())["flexbench"]
    dims = DimensionSet.from_json(section["dimensions"], "judge gold flexbench dimensions")
    opening = section["cases"][0]["trace"][0]["content"]
    return FlexBenchScorer(dims, LLMDimensionJudge(client, mode=mode), opening_line=opening)


def _prompt_version(scorer: Any) -> str:
    return scorer.judge.prompt_version


async def _score(scorer: Any, probe: Probe) -> list[str]:
    if probe.suite == "evolif":
        spec = TurnSpec(constraints=tuple(probe.payload))
    elif probe.suite in ("structflow", "structflow_real"):
        spec = TurnSpec(checklist=tuple(probe.payload))
    else:  # flexbench: the whole dimension set is judged every time
        spec = TurnSpec(checklist=scorer.dimensions.checklist())
    scores = await scorer.ascore(probe.reply, spec, probe.history)
    labels = [v.label for v in scores.strict]
    if probe.suite == "flexbench":  # one verdict per dimension: keep the probe's
        labels = [labels[k] for k in probe.payload]
    if len(labels) != len(probe.items):
        raise RuntimeError(f"probe {probe.case}: {len(labels)} verdicts for {len(probe.items)} items")
    return labels


def _kappa(gold: Sequence[str], predicted: Sequence[str]) -> float | None:
    """Cohen's kappa over the labels yes / no / unknown (`ifgym.core.stats.cohen_kappa`); None where undefined."""
    from ifgym.core.stats import cohen_kappa

    value = cohen_kappa(list(gold), list(predicted), labels=LABELS)
    return None if math.isnan(value) else value


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def measure(items: Sequence[GoldItem], predicted: Mapping[str, str]) -> dict[str, Any]:
    """The audit numbers of `items` given each item's verdict label (by key)."""
    clean = [i for i in items if i.clean is None]
    injected = [i for i in items if i.clean is not None]
    negatives = [i for i in clean if i.gold != "yes"]
    positives = [i for i in clean if i.gold == "yes"]
    flippable = [i for i in injected if predicted.get(i.clean) not in (None, "yes")]
    return {
        "items": len(clean),
        "accuracy": _share([predicted[i.key] == i.gold for i in clean]),
        "negatives": len(negatives),
        "yes_rate_negatives": _share([predicted[i.key] == "yes" for i in negatives]),
        "no_rate_positives": _share([predicted[i.key] == "no" for i in positives]),
        "kappa": _kappa([i.gold for i in clean], [predicted[i.key] for i in clean]),
        "injected": len(injected),
        "injection_flip_rate": _share([predicted[i.key] == "yes" for i in flippable]),
        "injection_yes_rate": _share([predicted[i.key] == "yes" for i in injected]),
        "unknown_rate": _share([predicted[i.key] == "unknown" for i in items if i.gold != "unknown"]),
    }


def calibrate_threshold(p_yes: Sequence[float | None], gold: Sequence[str]) -> dict[str, Any]:
    """The P(yes) threshold that agrees best with `gold` (yes/no labels): the highest kappa, then accuracy.

    Candidates are 0.5 and the midpoints between consecutive distinct probabilities; items without a
    probability (the answer's text was read) are left out. Returns {"threshold", "kappa", "accuracy",
    "yes_rate_negatives", "items"} for the chosen threshold, measured on the same items (calibrate on
    the dev split, report on test).
    """
    pairs = [(p, g) for p, g in zip(p_yes, gold, strict=True) if p is not None]
    if not pairs:
        raise ValueError("no item has a probability to calibrate on")
    values = sorted({p for p, _ in pairs})
    candidates = {0.5, *((a + b) / 2 for a, b in zip(values, values[1:], strict=False))}
    candidates |= {values[0] / 2, (values[-1] + 1) / 2}

    def figures(threshold: float) -> dict[str, Any]:
        said = ["yes" if p >= threshold else "no" for p, _ in pairs]
        truth = [g for _, g in pairs]
        negatives = [s for s, g in zip(said, truth, strict=True) if g != "yes"]
        return {
            "threshold": round(threshold, 4),
            "kappa": _kappa(truth, said),
            "accuracy": sum(s == g for s, g in zip(said, truth, strict=True)) / len(pairs),
            "yes_rate_negatives": negatives.count("yes") / len(negatives) if negatives else None,
            "items": len(pairs),
        }

    scored = [figures(t) for t in sorted(candidates) if 0 < t < 1]
    return max(
        scored, key=lambda f: (f["kappa"] if f["kappa"] is not None else -2, f["accuracy"], -abs(f["threshold"] - 0.5))
    )


def calibrate_on_real(
    client: Any, *, split: str = "dev", real: Mapping[str, Any] | None = None, progress: bool = False
) -> dict[str, Any]:
    """`calibrate_threshold` for `client` in probability mode on the real suite's `split` (dev: never report on it).

    Every item no rule decides is asked alone; items the client gave no log-probabilities for are left
    out (counted in `no_logprobs`). Raises ValueError when none had them.
    """
    from tqdm.auto import tqdm

    from ifgym.rewards.structflow.judge import ChecklistJudge
    from ifgym.rewards.structflow.scorer import StructFlowScorer

    judge = ChecklistJudge(client, mode="probability")
    scorer = StructFlowScorer(judge)
    p_yes, gold = [], []
    todo = probes("structflow_real", split=split, real=real)
    for probe in tqdm(todo, desc=f"calibrating on {split}", unit="turn", disable=not progress):
        asked = [(item, g) for item, g in zip(probe.payload, probe.items, strict=True) if scorer._rule(item) is None]
        if asked:  # one call per item, the turn's items sharing the prompt's prefix
            verdicts = judge.yes_probabilities(probe.reply, [item for item, _ in asked], probe.history)
            p_yes += [p for _, p in verdicts]
            gold += [g.gold for _, g in asked]
    return {**calibrate_threshold(p_yes, gold), "split": split, "no_logprobs": p_yes.count(None)}


def judge_identity(client: Any) -> dict[str, Any]:
    """What identifies a judge for the audit cache: backend, server, model and sampling settings."""
    describe = getattr(client, "describe", None)
    info = describe() if callable(describe) else {}
    keep = ("backend", "base_url", "model", "embedded_model", "temperature", "top_p", "seed", "max_tokens")
    out = {k: info[k] for k in keep if k in info}
    out.setdefault("model", getattr(client, "model", "unknown"))
    return out


FIGURES = ("accuracy", "kappa", "yes_rate_negatives", "no_rate_positives")  # the real suite's, with intervals


def real_intervals(
    units: Sequence[Sequence[GoldItem]], predicted: Mapping[str, str], resamples: int = 500, seed: int = 0
) -> dict[str, list[float] | None]:
    """Percentile bootstrap intervals (95%) of `FIGURES`, resampling turns (a turn's items are drawn together)."""
    from ifgym.core.stats import CISettings, intervals

    def summarize(drawn: Sequence[Sequence[GoldItem]], loose: bool = False) -> dict[str, float]:
        gold = [i.gold for unit in drawn for i in unit]
        said = [predicted[i.key] for unit in drawn for i in unit]
        pairs = list(zip(gold, said, strict=True))
        negatives = [p for g, p in pairs if g != "yes"]
        positives = [p for g, p in pairs if g == "yes"]
        kappa = _kappa(gold, said)
        return {
            "accuracy": sum(g == p for g, p in pairs) / len(pairs) if pairs else math.nan,
            "kappa": math.nan if kappa is None else kappa,
            "yes_rate_negatives": negatives.count("yes") / len(negatives) if negatives else math.nan,
            "no_rate_positives": positives.count("no") / len(positives) if positives else math.nan,
        }

    settings = CISettings(resamples=resamples, seed=seed)
    return intervals([list(u) for u in units if u], summarize, FIGURES, settings=settings)


async def _run_suite(
    suite: str,
    client: Any,
    mode: str,
    short: bool,
    progress: bool,
    gold: Mapping[str, Any],
    split: str = "test",
    real: Mapping[str, Any] | None = None,
    judge_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    once = _OnceClient(client)
    scorer = build_scorer(suite, once, mode, gold, judge_options if suite.startswith("structflow") else None)
    todo = probes(suite, short, gold, split=split, real=real)
    started = time.perf_counter()
    predicted: dict[str, str] = {}
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"audit {suite}", disable=not progress)
    limit = asyncio.Semaphore(8)

    async def one(probe: Probe) -> None:
        async with limit:
            labels = await _score(scorer, probe)
        for item, label in zip(probe.items, labels, strict=True):
            predicted[item.key] = label
        bar.update(1)

    try:
        await asyncio.gather(*(one(p) for p in todo))
    finally:
        bar.close()
    seconds = round(time.perf_counter() - started, 2)
    items = [i for p in todo for i in p.items]
    groups = sorted({g for i in items for g in (i.group, *i.tags)}, key=lambda g: (g.count("/"), g))
    in_group = {g: [i for i in items if g in (i.group, *i.tags)] for g in groups}
    out: dict[str, Any] = {
        "mode": mode,
        **({"threshold": scorer.judge.threshold} if mode == "probability" else {}),
        "prompt_version": _prompt_version(scorer),
        **measure(items, predicted),
        "calls": once.sent,
        "prompt_tokens": once.prompt_tokens,
        "completion_tokens": once.completion_tokens,
        "seconds": seconds,
        "groups": {g: measure(in_group[g], predicted) for g in groups},
        "verdicts": predicted,
    }
    if suite == "structflow_real":
        out["split"] = "short" if short else split
        out["turns"] = len(todo)
        out["ci"] = real_intervals([p.items for p in todo], predicted)
        for g in groups:
            units = [[i for i in p.items if g in (i.group, *i.tags)] for p in todo]
            out["groups"][g]["ci"] = real_intervals(units, predicted, resamples=200)
        counters = getattr(scorer.judge, "stats", None)
        out["judge_stats"] = dict(counters) if isinstance(counters, Mapping) else {}
        out["rule_items"] = sum(1 for p in todo for c in p.payload if scorer._rule(c) is not None)
    return out


def resolve_modes(suites: Sequence[str], mode: str | None) -> dict[str, str]:
    """Each suite's judge mode: `mode` where the suite has it, else the suite's default."""
    for suite in suites:
        if suite not in SUITES:
            raise UnknownNameError("audit suite", suite, SUITES)
    if mode is not None and not any(mode in SUITE_MODES[s] for s in suites):
        allowed = sorted({m for s in suites for m in SUITE_MODES[s]})
        raise UnknownNameError("judge mode", mode, allowed)
    return {s: mode if mode in SUITE_MODES[s] else DEFAULT_MODES[s] for s in suites}


def _modes_of(suites: Sequence[str], modes: Mapping[str, str] | None) -> dict[str, str]:
    """Each suite's mode (given, else its default), refusing unknown suites and modes by name."""
    out = {}
    for suite in suites:
        if suite not in SUITES:
            raise UnknownNameError("audit suite", suite, SUITES)
        out[suite] = (modes or {}).get(suite, DEFAULT_MODES[suite])
        if out[suite] not in SUITE_MODES[suite]:
            raise UnknownNameError(f"{suite} judge mode", out[suite], SUITE_MODES[suite])
    return out


def audit(
    client: Any,
    *,
    suites: Sequence[str] = SUITES,
    modes: Mapping[str, str] | None = None,
    short: bool = False,
    progress: bool = False,
    floor: Floor | None = None,
    gold: Mapping[str, Any] | None = None,
    split: str = "test",
    real: Mapping[str, Any] | None = None,
    judge_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the gold set's `suites` through `client` as a judge; the report `format_report` prints.

    `modes` gives each suite's judge mode (default: `DEFAULT_MODES`); `gold` another gold set in the
    shipped file's format (default: the shipped one); `real` another real suite, `split` its split
    (dev, test or all; `short` overrides it with the short set of test turns); `judge_options` go to
    the checklist judges (e.g. `{"threshold": 0.6}` in probability mode). `floor` applies to
    every suite (default: `REAL_FLOOR` for the real suite, `FLOOR` for the others). Returns
    `{"schema", "judge", "set", "gold_version", "floor", "suites": {suite: numbers}, "passed": {suite:
    bool}, "failures": {suite: [...]}, "calls", "seconds"}`.
    """
    modes = _modes_of(suites, modes)
    gold_set = gold if gold is not None else load_gold()
    results: dict[str, Any] = {}
    for suite in suites:
        results[suite] = run_async(
            _run_suite(
                suite,
                client,
                modes[suite],
                short,
                progress,
                gold_set,
                split=split,
                real=real,
                judge_options=judge_options,
            )
        )
    floors = {s: floor or (REAL_FLOOR if s == "structflow_real" else FLOOR) for s in suites}
    failures = {s: floors[s].failures(r) for s, r in results.items()}
    return {
        "schema": SCHEMA,
        "judge": judge_identity(client),
        "set": "short" if short else "full",
        "gold_version": gold_version(gold),
        **({"real_version": real_version(real)} if "structflow_real" in suites else {}),
        "floor": (floor or FLOOR).to_json(),
        "floors": {s: f.to_json() for s, f in floors.items()},
        "real_material": {s: REAL_MATERIAL[s] for s in suites if s in REAL_MATERIAL},
        "suites": results,
        "passed": {s: not f for s, f in failures.items()},
        "failures": failures,
        "calls": sum(r["calls"] for r in results.values()),
        "seconds": round(sum(r["seconds"] for r in results.values()), 2),
    }


def _cache_key(
    client: Any,
    suites: Sequence[str],
    modes: Mapping[str, str],
    short: bool,
    split: str = "test",
    judge_options: Mapping[str, Any] | None = None,
) -> str:
    # the prompt version holds the judge options that change verdicts (probability mode: its threshold)
    options = {s: judge_options if s.startswith("structflow") else None for s in suites}
    versions = {s: (modes[s], build_scorer(s, client, modes[s], None, options[s]).judge.prompt_version) for s in suites}
    identity = judge_identity(client)
    if identity.get("backend") == "embedded" and identity.get("embedded_model") == QWEN_NAME:
        identity["model_file"] = f"{QWEN_FILE} sha256:{QWEN_SHA256}"  # a shipped audit is of this very file
    blob: dict[str, Any] = {"judge": identity, "short": short, "gold": gold_version(), "suites": versions}
    if "structflow_real" in suites:  # keys of audits without the real suite stay as they were
        blob.update(real=real_version(), split=split, floor=REAL_FLOOR.to_json())
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_audit(
    client: Any,
    *,
    suites: Sequence[str],
    modes: Mapping[str, str] | None = None,
    short: bool = True,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    split: str = "test",
    judge_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`audit`, read from `<cache>/judge-audit/` when this judge, mode, prompt and gold set were audited before.

    The cache is $IFGYM_CACHE or ~/.cache/ifgym. The report gains `cached` (True when read) and `cache_path`.
    `judge_options` go to the checklist judges, as in `audit`. Before auditing, the audits shipped with
    ifgym (`SHIPPED_AUDITS`: the packaged embedded judge, keyed alike, so by its model file and prompt
    versions) are looked up too; one found gains `shipped` True.
    """
    modes = _modes_of(suites, modes)
    key = _cache_key(client, suites, modes, short, split, judge_options)
    found = known_audit(key, cache_dir)
    if found is not None:
        return found
    path = _audit_cache(cache_dir) / f"{key}.json"
    report = audit(
        client, suites=suites, modes=modes, short=short, progress=progress, split=split, judge_options=judge_options
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return {**report, "cached": False, "cache_path": str(path)}


def _audit_cache(cache_dir: str | Path | None = None) -> Path:
    from ifgym.llm.models import default_cache_dir

    return (Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()) / "judge-audit"


def audit_key(
    client: Any,
    suites: Sequence[str],
    modes: Mapping[str, str] | None = None,
    short: bool = True,
    split: str = "test",
    judge_options: Mapping[str, Any] | None = None,
) -> str:
    """The key an audit of this judge is cached (and shipped) under: judge, model file, modes, prompts, gold set."""
    return _cache_key(client, suites, _modes_of(suites, modes), short, split, judge_options)


def known_audit(key: str, cache_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The audit stored under `key`: this machine's cache first, then the audits shipped with ifgym; None if neither.

    No model call. A cached report gains `cached` True and `cache_path`; a shipped one also `shipped` True.
    """
    for path, shipped in ((_audit_cache(cache_dir) / f"{key}.json", False), (SHIPPED_AUDITS / f"{key}.json", True)):
        if not path.exists():
            continue
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue  # a cut-off write: audit again
        return {**report, "cached": True, "cache_path": str(path), **({"shipped": True} if shipped else {})}
    return None


def _num(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_report(report: Mapping[str, Any]) -> str:
    """The audit as an aligned plain-text table: one row per suite, then one per group."""
    judge = report["judge"]
    where = judge.get("base_url") or judge.get("backend", "")
    lines = [
        f"judge audit: {judge.get('model')} ({where}), {report['set']} gold set {report['gold_version']}, "
        f"{report['calls']} calls in {report['seconds']:.0f} s"
        + (" (shipped with ifgym)" if report.get("shipped") else " (cached)" if report.get("cached") else "")
    ]
    head = (
        "suite / group",
        "mode",
        "items",
        "acc",
        "yes|neg",
        "no|pos",
        "kappa",
        "inj.flip",
        "inj.yes",
        "unknown",
        "calls",
        "s",
    )
    rows = []
    for suite, r in report["suites"].items():
        verdict = "pass" if report["passed"][suite] else "FAIL"
        rows.append(
            (
                f"{suite} [{verdict}]",
                r["mode"],
                str(r["items"]),
                _num(r["accuracy"]),
                _num(r["yes_rate_negatives"]),
                _num(r.get("no_rate_positives")),
                _num(r["kappa"], 2),
                _num(r["injection_flip_rate"]),
                _num(r["injection_yes_rate"]),
                _num(r["unknown_rate"]),
                str(r["calls"]),
                f"{r['seconds']:.0f}",
            )
        )
        for group, g in r["groups"].items():
            rows.append(
                (
                    f"  {group}",
                    "",
                    str(g["items"]),
                    _num(g["accuracy"]),
                    _num(g["yes_rate_negatives"]),
                    _num(g.get("no_rate_positives")),
                    _num(g["kappa"], 2),
                    _num(g["injection_flip_rate"]),
                    _num(g["injection_yes_rate"]),
                    _num(g["unknown_rate"]),
                    "",
                    "",
                )
            )
    widths = [max(len(head[k]), *(len(r[k]) for r in rows)) for k in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if k < 2 else f"{{:>{w}}}" for k, w in enumerate(widths))
    lines += [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r).rstrip() for r in rows]
    real = report["suites"].get("structflow_real")
    if real is not None:
        lines.append(real_line(real))
    for suite, problems in report.get("failures", {}).items():
        if problems:
            lines.append(f"{suite}: below the floor: {'; '.join(problems)}")
    for suite, note in report.get("real_material", {}).items():
        if suite != "structflow":
            lines.append(f"real verdicts for {suite}: {note}")
    return "\n".join(lines)


def real_line(numbers: Mapping[str, Any]) -> str:
    """The real suite's figures with their intervals, in one line, and the goal they are read against."""
    ci = numbers.get("ci") or {}

    def figure(name: str, label: str, digits: int = 2) -> str:
        bounds = ci.get(name)
        around = f" [{bounds[0]:.{digits}f}, {bounds[1]:.{digits}f}]" if bounds else ""
        return f"{label} {_num(numbers.get(name), digits)}{around}"

    return (
        f"agreement with StructFlowBench's GPT-4o judge on real replies ({numbers.get('split', 'test')} split, "
        f"{numbers.get('turns', '?')} turns, {numbers['items']} items, 95% intervals over turns): "
        + ", ".join(
            (
                figure("accuracy", "agreement"),
                figure("kappa", "kappa"),
                figure("yes_rate_negatives", "yes on its no"),
                figure("no_rate_positives", "no on its yes"),
            )
        )
        + f"; floor agreement >= {REAL_GOAL['accuracy']}, kappa >= {REAL_GOAL['kappa']}, "
        f"yes on its no <= {REAL_GOAL['yes_rate_negatives']}"
    )
