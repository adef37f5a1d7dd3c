"""Composite: StructFlow's structure × EvolIF's evolving constraints × a persona, in one episode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifgym.core import TurnRecord
from ifgym.core.constraints import JUDGED_GROUPS, RULE_GROUPS
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import resolve_client
from ifgym.rewards.checks import SEMANTICS
from ifgym.rewards.rubric import VerdictRubric
from ifgym.rewards.structflow.judge import CHECKLIST_MODES, DEFAULT_CHECKLIST_MODE
from ifgym.rewards.tasks import COMPOSITE

RENDERERS = ("template", "llm")
JUDGES = ("rules", "llm")


class CompositeEnv(ChatEnv):
    """A user who structures the dialogue, keeps changing the rules, and has a personality, all at once.

    ## Description
    Each episode follows a StructFlow flow (a structure template of ifgym's, StructFlowBench's, a
    file or given inline; several chained by unrelated turns with `min_turns`): every turn after the
    first is a follow-up, refinement, recall, expansion, summary or unrelated turn. Every turn also
    carries EvolIF's live instruction state, moved by its three-layer tracker as the flow says (an
    unrelated turn opens a new topic; a recall, or any turn whose source lies on another topic,
    returns to that topic with its rules restored, stated only as the change; a refinement
    modifies a rule; the others make one change as EvolIF draws it). A persona (cooperativeness
    poor / general / good, verbosity, hedging, clarity of changes) words every turn from its own
    seeded stream; it never sees the replies, the verdicts or the checklist. See
    `ifgym.simulators.composite` for the mapping and the wording.

    The three axes switch off one by one (`structure`, `constraints`, `persona`); each corner is the
    single-axis benchmark's user on the same seed: structure off is EvolIF-v1's script, constraints
    off StructFlow-v0's offline dialogue (its own per-turn rules become the turn's constraints),
    persona off the neutral words. Both structure and constraints off is refused.

    ## Action Space
    `ReplySpace`: the assistant's reply, any `str` up to `max_reply_chars` characters.

    ## Observation Space
    `ChatSpace`: an optional system message, then alternating user/assistant messages (the
    policy's own replies), ending with the new user turn.

    ## Rewards
    Each turn's checklist: one item per live constraint (rule-checked as EvolIF's scorer checks
    it, `checker_semantics`), then the flow's structural item (weight 2), decided by a rule when its
    question is rule-decidable, else by the checklist judge (`judge="llm"`); with `judge="rules"`
    structural items are `unknown` and `protocol()["unscored"]` says so. `reward=`: `"fraction"`
    (default, EvolIF's: yes / known items), `"weighted"` (WCSR: structural items weigh 2, or
    `reward_weights` per label, a constraint group or an item type), `"all_pass"`. Unknown verdicts
    count as neither.

    ## Starting State
    The seed draws the flow, first topic, task type, StructFlow user type, persona and the tracker's
    script. `reset(options=...)` may pin `template`, `topic_id`, `task`, `user_type` and `persona` (a
    mapping of TalkStyle fields: level, verbosity, hedging, clarity). Same seed, same episode
    (template user); the user's words never depend on the replies.

    ## Episode End
    Terminated when the flow's last turn is answered (`"script_end"`) or when patience runs out
    (`"patience"`, as EvolIF: full after an all-pass turn, one less after a turn with a No, a
    structural No included); truncated at `max_turns`. With the structure axis off the episode
    runs, as EvolIF's, until patience or `max_turns`.

    ## Arguments
    | argument | default | meaning |
    |---|---|---|
    | `structure`, `constraints`, `persona` | `True` | the three axes, each on or off |
    | `renderer` | `"template"` | `"template"` (offline, deterministic) or `"llm"` (a user model, checked) |
    | `user_llm` | `None` | renderer="llm": client, `LLMConfig` or mapping; None = the embedded model |
    | `user_checks` | `"rules"` | renderer="llm": `"rules"` (EvolIF's) or `"model"` |
    | `regenerations` | `3` | renderer="llm": redrafts before the template text is used |
    | `judge` | `"rules"` | `"rules"` (structural items unknown) or `"llm"` (the checklist judge) |
    | `judge_llm` | `None` | the judge's client, `LLMConfig` or mapping; None = the embedded model |
    | `judge_mode` | `"plain"` | checklist judge: `"plain"`, `"evidence"` or `"probability"` |
    | `judge_threshold` | `None` | probability mode: P(yes) ≥ it is Yes; None = 0.5 |
    | `checker_semantics` | `"ifgym"` | `"ifgym"` (strict + loose) or `"evolif"` (EvolIF's evaluator) |
    | `templates` | `None` | structure templates: None (ifgym's), `"structflowbench"`, a path, or a list of templates |
    | `topics` | `None` | topic bank path; None = packaged |
    | `tasks`, `user_types` | `None` | restrict StructFlow's task types / user types drawn |
    | `constraints_per_turn` | `(1, 2)` | constraints off: StructFlow's rules per fresh turn |
    | `tracker` | `None` | `TrackerConfig` fields (groups, change weights, initial constraints, …) |
    | `persona_mix` | `None` | weights per level / verbosity / hedging / clarity (None = uniform) |
    | `min_turns` | `None` | chain templates until the flow has at least this many turns |
    | `patience` | `3` | int, or None (off) |
    | `max_turns` | `100` | truncation cap (int or None) |
    | `reward` | `"fraction"` | `"fraction"`, `"weighted"` or `"all_pass"` |
    | `reward_weights` | `None` | label (group or item type) → weight for `"weighted"` |
    | `system_prompt` | `None` | system message put first in every observation |
    | `max_reply_chars` | `100000` | longest accepted reply |

    The `user_` and `judge_` prefixes say whose setting it is: `CompositeUser` and the judge take them unprefixed
    (`client`, `checks`, `mode`). `tracker` is the user's `tracker_config` (its `tracker` is the tracker itself).

    Only rule-checked constraint groups are sampled (EvolIF's three judged groups are refused: the
    composite's judge is StructFlow's checklist judge).

    ## Version History
    - v0: first release.
    """

    env_name = "ifgym/Composite-v0"

    def __init__(
        self,
        *,
        structure: bool = True,
        constraints: bool = True,
        persona: bool = True,
        renderer: str = "template",
        user_llm: Any = None,
        user_checks: str = "rules",
        regenerations: int = 3,
        judge: str = "rules",
        judge_llm: Any = None,
        judge_mode: str = DEFAULT_CHECKLIST_MODE,
        judge_threshold: float | None = None,
        checker_semantics: str = "ifgym",
        templates: str | Path | Sequence[Any] | None = None,
        topics: str | Path | None = None,
        tasks: Sequence[str] | None = None,
        user_types: Sequence[str] | None = None,
        constraints_per_turn: Sequence[int] = (1, 2),
        tracker: Mapping[str, Any] | None = None,
        persona_mix: Mapping[str, Any] | None = None,
        min_turns: int | None = None,
        patience: int | None = 3,
        max_turns: int | None = 100,
        reward: str = "fraction",
        reward_weights: Mapping[str, float] | None = None,
        system_prompt: str | None = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
        env_name: str | None = None,
    ):
        from ifgym.rewards.composite import CompositeScorer
        from ifgym.rewards.evolif.scorer import EvolIFScorer
        from ifgym.rewards.structflow.judge import ChecklistJudge
        from ifgym.rewards.structflow.scorer import StructFlowScorer
        from ifgym.simulators.composite import CompositeUser

        UnknownNameError.check(
            ("renderer", renderer, RENDERERS),
            ("judge", judge, JUDGES),
            ("judge_mode", judge_mode, CHECKLIST_MODES),
            ("checker_semantics", checker_semantics, SEMANTICS),
        )
        rubric = VerdictRubric(reward, reward_weights, patience)
        fields = dict(tracker or {})
        judged = sorted(set(fields.get("groups") or ()) & set(JUDGED_GROUPS))
        if judged:
            raise ConfigError(
                f"tracker groups {judged} are judged groups; the composite scores rule-checked groups only "
                f"({', '.join(RULE_GROUPS)}): drop them"
            )
        if fields.get("groups") is None:
            fields["groups"] = tuple(RULE_GROUPS)
        name = env_name or self.env_name
        if "llm" in (renderer, judge) and name == "ifgym/Composite-v0":
            name = "ifgym/Composite-LLM-v0"  # a model in the loop: not deterministic
        self.env_name = name
        user = CompositeUser(
            structure=structure,
            constraints=constraints,
            persona=persona,
            renderer=renderer,
            client=resolve_client(user_llm, "user") if renderer == "llm" else None,
            regenerations=regenerations,
            checks=user_checks,
            templates=templates,
            topics=topics,
            tasks=tasks,
            user_types=user_types,
            constraints_per_turn=tuple(constraints_per_turn),
            tracker_config=fields,
            persona_mix=persona_mix,
            min_turns=min_turns,
        )
        checklist_judge = (
            ChecklistJudge(
                resolve_client(judge_llm, "judge"),
                mode=judge_mode,
                threshold=judge_threshold,
            )
            if judge == "llm"
            else None
        )
        scorer = CompositeScorer(EvolIFScorer(None, semantics=checker_semantics), StructFlowScorer(checklist_judge))
        self.settings = {
            "axes": dict(user.axes),
            "renderer": renderer,
            "judge": judge,
            "judge_model": getattr(checklist_judge.client, "model", None) if checklist_judge else None,
            "judge_mode": judge_mode if judge == "llm" else None,
            "checker_semantics": checker_semantics,
            "groups": list(fields["groups"]),
            "templates": None
            if templates is None
            else str(templates)
            if isinstance(templates, str | Path)
            else "given",
            "persona_mix": user.persona_mix.to_json() if persona else None,
            "min_turns": min_turns,
        }
        super().__init__(
            task=COMPOSITE,
            user=user,
            scorer=scorer,
            rubric=rubric,
            max_turns=max_turns,
            system_prompt=system_prompt,
            max_reply_chars=max_reply_chars,
            render_mode=render_mode,
        )

    # --- what this env measures ------------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """The env's settings, what goes unscored, and how each corner relates to the single-axis benchmarks."""
        axes = self.settings["axes"]
        unscored = []
        if self.settings["judge"] == "rules" and axes["structure"]:
            unscored.append(
                "structural items (follow-up, refinement, recall, expansion, summary) whose question no rule "
                "decides: unknown with judge=rules (pass judge=llm to score them)"
            )
        deviations = []
        if axes["structure"] and axes["constraints"]:
            deviations.append("composite user: no single benchmark's protocol (StructFlow × EvolIF)")
        if axes["structure"] and self.patience.full is not None:
            deviations.append(f"patience={self.patience.full}: StructFlowBench evaluates every turn (no patience)")
        if axes["persona"]:
            deviations.append("persona wording (cooperativeness and traits) on top of the benchmark's neutral user")
        return {
            **super().protocol(),
            "paper": "composite",
            **self.settings,
            "unscored": unscored,
            "deviations": deviations,
        }

    def _start(self, seed: int | None) -> None:
        super()._start(seed)
        self._episode.meta["composite"] = self.protocol()

    def _record_start(self) -> None:
        self._episode.meta.update(self.user.episode_meta())

    def _turn_info(self) -> dict[str, Any]:
        info = super()._turn_info()
        meta = self._turn.spec.meta
        info.update(
            relation=meta.get("relation"),
            tracker_move=meta.get("tracker_move"),
            checklist=[{"id": i.id, "type": i.type, "kind": i.kind} for i in self._turn.spec.checklist],
        )
        return info

    def _render_turn(self, t: TurnRecord) -> list[str]:
        """One turn: its relation, the request, the reply, every checklist item's verdict."""
        relation = t.spec.meta.get("relation") or t.spec.move
        lines = [f"[{t.index} | {relation}] USER: {t.user}", f"[{t.index}] MODEL: {t.reply}"]
        for item, v in zip(t.spec.checklist, t.verdicts, strict=True):
            lines.append(f"    {v.label:7} [{item.type}] {item.constraint.id if item.constraint else item.question}")
        return lines
