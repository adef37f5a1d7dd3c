"""StructFlow: multi-turn dialogues with structure (follow-up, refinement, recall, expansion, summary, unrelated)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifgym.core import TurnRecord
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import resolve_client
from ifgym.rewards.rubric import VerdictRubric
from ifgym.rewards.structflow.judge import CHECKLIST_MODES, DEFAULT_CHECKLIST_MODE
from ifgym.rewards.tasks import STRUCTFLOW, STRUCTFLOW_PAPER

CONTEXTS = ("golden", "own")
GRAPHIF_JUDGE_RETRIES = 4  # GraphIF's evaluator asks the judge up to 5 times while the verdict count is off
# StructFlowBench's evaluation (arXiv 2502.14494; evaluation/ in github.com/MLGroupJLU/StructFlowBench):
# its 155 dialogues with the reference answers as history, every turn answered, every checklist question
# asked of GPT-4o in one call per turn. `env=structflow_paper` is these settings; `protocol()` lists
# every way a run differs from them, and the differences no setting removes.
PAPER_PROTOCOL: dict[str, Any] = {
    "dataset": "structflowbench",
    "context": "golden",
    "judge": "llm",
    "judge_mode": "paper",
    "judge_rule_items": True,
    "patience": None,
    "max_turns": None,
    "system_prompt": None,
    "metrics": "paper",
}
PAPER_JUDGE = "gpt-4o"
GENERATORS = ("template", "llm")
METRICS = ("ifgym", "paper")
JUDGES = ("rules", "llm", "learned")


def _by_rule(dialogue: Any) -> bool:
    """True when some checklist item of `dialogue` carries a rule-checkable constraint."""
    return any(i.constraint is not None and not i.constraint.judged for t in dialogue.turns for i in t.checklist)


class StructFlowEnv(ChatEnv):
    """Structured multi-turn instruction following (StructFlowBench), replayed or freshly generated.

    ## Description
    Each dialogue follows a structural flow: every turn after the first relates to earlier turns as
    a follow-up, a refinement, a recall, an expansion (fan-out), a summary (fan-in) or as unrelated.
    Each turn comes with a checklist of yes/no items: intra-turn constraints (StructFlowBench's eight
    types) and, for the five structural relations, one structural item. With `dataset=` the env
    replays StructFlowBench's dialogues (`dataset="structflowbench"`: the 155 dialogues that ship
    with ifgym, MIT, see `ifgym/simulators/assets/structflowbench/SOURCE`), or GraphIF's 24-turn
    evaluation sets (JSON Lines of `{"id", "conv"}`, detected from the file: every checklist item
    keeps its GraphIF type; `follow-up`, `expansion`, `refine`, `recall`, `summary`, `modify` and
    `anchored` are structural items of weight 2, `Instruction`/`instruction`/`Global` intra-turn
    items of weight 1; `sys` is the golden answer; no GraphIF data ships); without it, it generates
    dialogues from structure templates × topics × task types × user types (offline and seeded with
    `generator="template"`, whose intra-turn items are all rule-checkable; or through a user model
    with `generator="llm"`).

    ## Action Space
    `ReplySpace`: the assistant's reply, any `str` up to `max_reply_chars` characters.

    ## Observation Space
    `ChatSpace`: an optional system message, then alternating user/assistant messages, ending with
    the new user turn. With `context="golden"` (the default for a dataset and for the LLM
    generator, whose dialogues come with reference answers) the assistant messages are the
    reference answers, as the benchmark evaluates; with `"own"` (the default, and the only choice,
    for the offline generator) they are the policy's replies. (An LLM-generated dialogue that fell
    back to the offline generator has no reference answers; its turns keep the policy's replies.)
    Message dicts are shared with the env: treat them as read-only.

    ## Rewards
    Per turn, over the checklist (`reward=`): `"weighted"` (default) = the turn's WCSR over the
    known items: satisfied weight / known weight, structural items weighing 2 and intra-turn items
    1; `"fraction"` = the turn's CSR over the known items (yes / (yes + no)); `"all_pass"` = 1 when
    every item is yes, else 0. Items that carry a rule-checkable constraint, or whose question a
    rule decides (word/sentence/paragraph counts, keywords to use or avoid, the opening or closing
    words: `ifgym.rewards.questions`), are decided by the rule; the others by the LLM judge
    (`judge="llm"`), or by the checklist judge learned from StructFlowBench's GPT-4o verdicts
    (`judge="learned"`, no model server: `ifgym.rewards.structflow.learned`, docs/learned_judge.md; its
    P(yes) cut is `judge_threshold`); with `judge="rules"` they are `unknown` (in particular every
    structural item). `"weighted"` and `"fraction"` count unknown items as neither; `"all_pass"` gives 0 to
    a turn with an unknown item (it is not known to pass), where the ISR metric leaves such a turn
    out. A turn whose items are all unknown gets 0 with `info["reward_defined"]` False;
    `info["unknown"]` counts unknown items. A turn with an empty checklist gets 1 (nothing to
    fail), while the metrics follow the benchmark's script: CSR 0, ISR 1, WCSR 0 for such a turn.
    `summarize` gives CSR, ISR, WCSR, DRFR and their breakdowns (see `ifgym.rewards.structflow.metrics`):
    with `metrics="ifgym"` WCSR is the released script's per-turn mean (the paper's equation is
    `WCSR_pooled`); with `metrics="paper"` (env=structflow_paper) WCSR is the equation of
    StructFlowBench §3.5 and GraphIF eq. 10, pooled over items, and the script's is `WCSR_per_turn`.

    Replaying a dataset none of whose items carries a rule-checkable constraint (StructFlowBench's
    own file) with `judge="rules"` would leave every item unknown, every reward 0 and every metric
    NaN, so it is refused at `make` time with a ConfigError: pass `judge="llm"` (and `judge_llm`),
    or `allow_unjudged=True` to replay the dialogues unscored on purpose.

    ## Starting State
    Replay: `reset(options={"dialogue": index or id})` picks a dialogue; otherwise seed k plays
    dialogue k mod N (seeds 0..N-1 cover the dataset once) and no seed picks one at random.
    Generation: the seed draws template, topic, task and user type; `options` may pin `template`,
    `topic_id`, `task` and `user_type`. Same seed, same dialogue (offline generator).

    ## Episode End
    Terminated when the dialogue's last turn is answered (`done_reason="script_end"`), or when
    patience runs out (`"patience"`; off by default so every turn is evaluated, as in the
    benchmark). Truncated at `max_turns` (`"max_turns"`; default None).

    ## Arguments
    | argument | default | meaning |
    |---|---|---|
    | `dataset` | `None` | `"structflowbench"` (packaged), or a StructFlowBench or GraphIF file; None = generate |
    | `context` | `None` | `"golden"` (reference answers as history) or `"own"`; None = see Observation Space |
    | `generator` | `"template"` | without a dataset: `"template"` (offline) or `"llm"` (needs `user_llm`) |
    | `judge` | `"rules"` | `"rules"` (rule items only; the rest unknown), `"llm"`, `"learned"` (see Rewards) |
    | `allow_unjudged` | `False` | True: replay with `judge="rules"` even when it scores nothing (see Rewards) |
    | `judge_llm`, `user_llm` | `None` | client, `LLMConfig` or mapping; `None` = the embedded model |
    | `judge_mode` | `"plain"` | checklist judge: `"plain"`, `"evidence"` (Yes quotes), `"paper"`, `"probability"` |
    | `judge_rule_items` | `False` | True: the judge answers every item, rule-decidable ones too (the benchmark's way) |
    | `judge_golden` | `False` | True: the judge sees the turn's reference answer, if any (GraphIF's evaluator) |
    | `judge_max_retries` | `2` | re-asks when the judge's answer misses items |
    | `judge_max_tokens` | `None` | judge answer cap per call; None = 128 + 96 per item (or the client's, if larger) |
    | `judge_threshold` | `None` | probability mode: P(yes) ≥ it is Yes; None = 0.5 |
    | `templates` | `None` | structure templates: `"structflowbench"` (packaged) or a path; None = ifgym's own |
    | `topics` | `None` | topic bank path; None = packaged |
    | `tasks`, `user_types` | `None` | restrict the task types / user types drawn |
    | `constraints_per_turn` | `(1, 2)` | rule constraints of a generated turn (low, high) |
    | `patience` | `None` | int, or None (off) |
    | `max_turns` | `None` | truncation length (int or None) |
    | `reward` | `"weighted"` | `"weighted"`, `"fraction"` or `"all_pass"` |
    | `reward_weights` | `None` | item type → weight for `"weighted"` (default: each item's own weight) |
    | `metrics` | `"ifgym"` | WCSR as the released script (`"ifgym"`) or the papers' pooled equation (`"paper"`) |
    | `system_prompt` | `None` | system message put first in every observation |
    | `max_reply_chars` | `100000` | longest accepted reply |

    ## Version History
    - v0: first release. Since the judge audit (issue 9), checklist questions a rule can decide are
      decided by it rather than by the judge (`judge_rule_items=True` restores the benchmark's way),
      and `judge_mode="evidence"` makes the judge quote the reply for every Yes. `judge_mode="paper"`
      and `protocol()` (issue 20): `env=structflow_paper` is the benchmark's evaluation (`PAPER_PROTOCOL`).
      `metrics=` chooses which WCSR is the headline (metrics only). In GraphIF's sets, `Global` items
      weigh 2 (they weighed 1): the weighted reward of those turns changes; no GraphIF set ships, and
      StructFlowBench's own dialogues and the generated ones are scored as before, so the id stayed.
    """

    env_name = "ifgym/StructFlow-v0"

    def __init__(
        self,
        *,
        dataset: str | Path | None = None,
        context: str | None = None,
        generator: str = "template",
        judge: str = "rules",
        allow_unjudged: bool = False,
        judge_llm: Any = None,
        user_llm: Any = None,
        judge_mode: str = DEFAULT_CHECKLIST_MODE,
        judge_rule_items: bool = False,
        judge_golden: bool = False,
        judge_max_retries: int = 2,
        judge_max_tokens: int | None = None,
        judge_threshold: float | None = None,
        templates: str | Path | None = None,
        topics: str | Path | None = None,
        tasks: Sequence[str] | None = None,
        user_types: Sequence[str] | None = None,
        constraints_per_turn: Sequence[int] = (1, 2),
        patience: int | None = None,
        max_turns: int | None = None,
        reward: str = "weighted",
        reward_weights: Mapping[str, float] | None = None,
        metrics: str = "ifgym",
        system_prompt: str | None = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
        env_name: str | None = None,
    ):
        from ifgym.rewards.structflow.judge import ChecklistJudge
        from ifgym.rewards.structflow.learned import LearnedChecklistJudge
        from ifgym.rewards.structflow.scorer import StructFlowScorer
        from ifgym.simulators.structflow import (
            LLMDialogueGenerator,
            StructFlowUser,
            TemplateDialogueGenerator,
            load_dataset,
        )

        UnknownNameError.check(
            ("generator", generator, GENERATORS),
            ("judge", judge, JUDGES),
            ("judge_mode", judge_mode, CHECKLIST_MODES),
            ("metrics", metrics, METRICS),
        )
        self.metrics = metrics
        if context is not None:
            UnknownNameError.check(("context", context, CONTEXTS))
        rubric = VerdictRubric(reward, reward_weights, patience)
        for name, value in (("allow_unjudged", allow_unjudged), ("judge_golden", judge_golden)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
        self.judge_golden = judge_golden
        if env_name:
            self.env_name = env_name
        if dataset is not None:
            if generator != "template" or templates is not None or topics is not None or tasks or user_types:
                raise ConfigError(
                    "dataset= replays a file; generator, templates, topics, tasks and user_types apply only without it"
                )
            dialogues = load_dataset(dataset)
            context = context or "golden"
            if context == "golden":
                lacking = next((d for d in dialogues if not d.has_answers), None)
                if lacking is not None:
                    k = next(i for i, t in enumerate(lacking.turns) if t.answer is None)
                    raise ConfigError(
                        f"{dataset}: dialogue {lacking.id} turn c{k + 1} has no 'assistant answer', so golden context "
                        "is impossible; pass context='own'"
                    )
            if judge == "rules" and not allow_unjudged and not any(_by_rule(d) for d in dialogues):
                raise ConfigError(
                    f"{dataset}: judge='rules' would score nothing here: no checklist item of this dataset carries a "
                    "rule-checkable constraint, so every verdict would be unknown and every reward 0. Pass "
                    "judge='llm' with judge_llm=<client, LLMConfig or mapping> (on the command line: judge=llm "
                    "judge.llm.base_url=...), or allow_unjudged=True to replay it unscored"
                )
            user = StructFlowUser(dialogues=dialogues)
        else:
            options = dict(
                templates=templates,
                topics=topics,
                tasks=tasks,
                user_types=user_types,
                constraints_per_turn=tuple(constraints_per_turn),
            )
            offline = TemplateDialogueGenerator(**options)
            if generator == "template":
                context = context or "own"
                if context == "golden":
                    raise ConfigError(
                        "the offline generator writes no reference answers, so golden context is impossible; use "
                        "context='own', generator='llm', or dataset="
                    )
                user = StructFlowUser(generator=offline)
            else:
                context = context or "golden"  # the pipeline writes a reference answer for every turn
                llm = LLMDialogueGenerator(resolve_client(user_llm, "user"), **options)
                user = StructFlowUser(generator=llm, fallback=offline)
        self.context = context
        self.judge_kind = judge
        self.judge_rule_items = judge_rule_items
        # GraphIF's 24-turn sets: the env's protocol compares the run with GraphIF's own replay of them
        self.graphif_sets = dataset is not None and all(d.meta.get("format") == "graphif" for d in dialogues)
        self.replayed = len(dialogues) if dataset is not None else 0  # a replay picks dialogue seed % replayed
        self.dataset = str(dataset) if dataset is not None else None
        judge_obj: Any = None
        if judge == "llm":
            judge_obj = ChecklistJudge(
                resolve_client(judge_llm, "judge"),
                mode=judge_mode,
                max_retries=judge_max_retries,
                max_tokens=judge_max_tokens,
                threshold=judge_threshold,
            )
        elif judge == "learned":
            judge_obj = LearnedChecklistJudge(threshold=judge_threshold)
        super().__init__(
            task=STRUCTFLOW_PAPER if metrics == "paper" else STRUCTFLOW,
            user=user,
            scorer=StructFlowScorer(judge_obj, judge_rule_items=judge_rule_items, judge_golden=judge_golden),
            rubric=rubric,
            max_turns=max_turns,
            system_prompt=system_prompt,
            max_reply_chars=max_reply_chars,
            render_mode=render_mode,
        )

    # --- choosing the dialogue -------------------------------------------------------------------
    def _reset_options(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        if self.replayed and seed is not None and not (options and "dialogue" in options):
            return {**(options or {}), "dialogue": seed % self.replayed}
        return options

    def protocol(self) -> dict[str, Any]:
        """The env's settings and `deviations`: each way a run differs from StructFlowBench's evaluation, in words.

        A replay of GraphIF's sets is compared with GraphIF's own evaluation of them instead.
        """
        judge = getattr(self.scorer, "judge", None)
        settings = {
            "dataset": self.dataset,
            "context": self.context,
            "judge": self.judge_kind,
            "judge_mode": judge.mode if judge is not None else None,
            "judge_rule_items": self.judge_rule_items,
            "patience": self.patience.full,
            "max_turns": self.max_turns,
            "system_prompt": self.system_prompt,
            "metrics": self.metrics,
        }
        paper = "GraphIF" if self.graphif_sets else "StructFlowBench"
        out: dict[str, Any] = {**super().protocol(), "paper": paper, **settings}
        if self.graphif_sets or self.judge_golden:  # shown where it is a choice: GraphIF's evaluator shows it
            out["judge_golden"] = self.judge_golden
        out["system_prompt"] = None if self.system_prompt is None else "set"
        if self.replayed:
            out["dialogues"] = self.replayed
        out["deviations"] = self._graphif_deviations() if self.graphif_sets else _deviations(settings, judge)
        if self.judge_golden and not self.graphif_sets:
            out["deviations"].append("judge_golden=true: the judge sees the reference; StructFlowBench's does not")
        return out

    def _graphif_deviations(self) -> list[str]:
        """How a replay of GraphIF's sets differs from GraphIF's own evaluation of them, in words."""
        deviations = [
            "the judge is ifgym's checklist judge (one call per turn, unreadable verdicts unknown and counted as "
            "neither), not GraphIF's evaluator (StructFlowBench's prompt with a golden-response section and notes "
            "of its own; a turn whose verdicts it cannot read is left out of every metric)",
            "WCSR weighs structural items and Global items 2 (inter-turn, as the paper counts global constraints) "
            "and Instruction/instruction items 1; GraphIF's released scorer weighs upper-case Instruction 2 too",
        ]
        judge = getattr(self.scorer, "judge", None)
        if judge is not None:
            model = str(getattr(judge.client, "model", "") or "unknown")
            deviations.append(f"judge {model}: the judge model of this run (GraphIF's evaluator names its own)")
        if self.metrics != "paper":
            deviations.append(METRICS_DEVIATION)
        if judge is not None and judge.mode != "paper":
            deviations.append(
                f"judge_mode={judge.mode}: ifgym's own checklist prompt and output shape; GraphIF's evaluator asks as "
                "StructFlowBench's does (env=structflow_paper, or judge.mode=paper)"
            )
        if judge is not None and not self.judge_rule_items:
            deviations.append(
                "judge_rule_items=false: questions a rule can decide (word counts, keywords, opening and closing "
                "words) are decided by rules; GraphIF's evaluator asks the judge every question "
                "(env.judge_rule_items=true)"
            )
        if judge is not None and judge.max_retries != GRAPHIF_JUDGE_RETRIES:
            deviations.append(
                f"judge_max_retries={judge.max_retries}: GraphIF's evaluator tries up to "
                f"{GRAPHIF_JUDGE_RETRIES + 1} times when the verdict count is off "
                f"(env.judge_max_retries={GRAPHIF_JUDGE_RETRIES})"
            )
        if self.context != "own":
            deviations.append(
                "context=golden: reference answers as history; GraphIF replays its sets with the model's own "
                "replies (env.context=own)"
            )
        if not self.judge_golden:
            deviations.append(
                "judge_golden=false: the judge sees no reference answer; GraphIF's evaluator shows it "
                "(env.judge_golden=true)"
            )
        return deviations

    def _record_start(self) -> None:
        self._episode.meta["dialogue"] = {**self.user.episode_meta(), "context": self.context}

    # --- turn mechanics ----------------------------------------------------------------------------
    def _history_reply(self, reply: str) -> str:
        """Golden context keeps the dataset's reference answer (when the turn has one) instead of the reply."""
        if self.context == "golden":
            golden = self._turn.spec.meta.get("golden_answer")
            if golden is not None:
                return golden
        return reply

    def _turn_info(self) -> dict[str, Any]:
        info = super()._turn_info()
        meta = self._turn.spec.meta
        info.update(
            dialogue=meta.get("dialogue"),
            turn_name=meta.get("turn_name"),
            relation=meta.get("relation"),
            checklist=[
                {"id": i.id, "type": i.type, "kind": i.kind, "question": i.question, "rule": i.constraint is not None}
                for i in self._turn.spec.checklist
            ],
        )
        return info

    # --- rendering -------------------------------------------------------------------------------------
    def _render_turn(self, t: TurnRecord) -> list[str]:
        """One turn: its name and relation, the request, the reply, each checklist item's verdict."""
        relation = t.spec.meta.get("relation") or "first turn"
        lines = [f"[{t.spec.meta.get('turn_name', t.index)} | {relation}] USER: {t.user}", f"MODEL: {t.reply}"]
        lines += [f"    {v.label:7} [{i.type}] {i.question}" for i, v in zip(t.spec.checklist, t.verdicts, strict=True)]
        return lines


METRICS_DEVIATION = (
    "metrics=ifgym: WCSR is the released script's per-turn mean; the papers' equation (pooled over items) is "
    "WCSR_pooled (env.metrics=paper makes it WCSR)"
)


def _deviations(settings: Mapping[str, Any], judge: Any) -> list[str]:
    """How a run with these settings (and this checklist judge, or None) differs from `PAPER_PROTOCOL`, in words."""
    paper = PAPER_PROTOCOL
    out = []
    if settings["dataset"] is None:
        out.append("generated dialogues, not StructFlowBench's 155 (env.dataset=structflowbench replays them)")
    elif settings["dataset"] != paper["dataset"]:
        out.append(f"dataset={settings['dataset']}: another file, not the 155 dialogues StructFlowBench ships")
    if settings["context"] != paper["context"]:
        out.append("context=own: the policy's own earlier replies as history, not the reference answers")
    if settings["metrics"] != "paper":
        out.append(METRICS_DEVIATION)
    if judge is None:
        out.append(
            "judge=rules: only rule-checkable items are scored, the rest are unknown (the paper's judge is GPT-4o)"
        )
    elif settings["judge"] == "learned":
        out.append(
            f"judge=learned ({judge.model_name}): a logistic regression learned from StructFlowBench's released GPT-4o "
            "verdicts, no model call (docs/learned_judge.md has its agreement with GPT-4o); rule-decidable questions "
            "are decided by rules"
        )
    else:
        if settings["judge_mode"] != paper["judge_mode"]:
            out.append(
                f"judge_mode={settings['judge_mode']}: ifgym's own checklist prompt and output shape, not the "
                "paper-shaped one (judge.mode=paper)"
            )
        if not settings["judge_rule_items"]:
            out.append(
                "questions a rule can decide (word counts, keywords, opening and closing words) are decided by rules, "
                "not asked of the judge (env.judge_rule_items=true asks it every question)"
            )
        model = str(getattr(judge.client, "model", "") or "unknown")
        if PAPER_JUDGE in model.lower():
            out.append(f"judge {model}: GPT-4o by name; the snapshot the paper used is not stated")
        else:
            out.append(f"judge {model}, not GPT-4o (the paper's judge)")
        if settings["judge_mode"] == paper["judge_mode"]:
            out.append(
                "the judge prompt is ifgym's own wording of the paper's evaluator prompt (same material, strictness "
                "and output shape), with the questions numbered rather than bulleted and the material fenced in tags "
                "the judge is told to read as material, never as instructions"
            )
        config = getattr(judge.client, "config", None)
        temperature = getattr(config, "temperature", None)
        if temperature is not None and temperature != 1.0:
            out.append(
                f"judge temperature {temperature:g}: the paper's evaluator sends none, so GPT-4o samples at its "
                "default 1 (judge.llm.temperature=1 does the same)"
            )
        out.append(
            f"an answer that cannot be read leaves its items unknown after at most {judge.max_retries + 1} tries, "
            "counted and left out of the rates; the paper's evaluator re-asks (up to 5 tries) only when the count "
            "of judgements is wrong, and its score script cannot read a turn it failed to judge"
        )
        cap = (
            f"{judge.max_tokens} tokens"
            if judge.max_tokens is not None
            else "128 + 96 tokens per question (or judge.llm.max_tokens when larger)"
        )
        out.append(f"each judge answer is capped at {cap}; the paper's evaluator sets no cap")
    if settings["patience"] is not None:
        out.append(
            f"patience={settings['patience']}: a dialogue stops after failed turns; the paper answers every turn"
        )
    if settings["max_turns"] is not None:
        out.append(f"max_turns={settings['max_turns']}: only the first turns of each dialogue are played")
    if settings["system_prompt"] is not None:
        out.append("a system prompt the paper's inference does not send")
    out.append(
        "the policy sees the history as chat messages; the paper's inference sends it flattened into one user "
        "message ('user:…' and 'assistant:…' lines)"
    )
    return out
