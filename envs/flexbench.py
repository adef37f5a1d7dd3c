"""FlexBench: one SOP instruction becomes an environment with a persona caller and Coverage/Achievement scoring."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ifgym.core import TurnRecord, TurnSpec
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, DataFormatError, UnknownNameError
from ifgym.llm import resolve_client
from ifgym.rewards.flexbench import (
    DEFAULT_DIMENSION_MODE,
    DIMENSION_MODES,
    DIMENSIONS_SUFFIX,
    METRICS,
    PAPER_TEMPERATURE,
    PAPER_TEMPERATURE_STEP,
    PIPELINES,
    DimensionSet,
    FlexBenchRubric,
    FlexBenchScorer,
    LLMDimensionJudge,
    RuleDimensionChecker,
    build_dimensions,
    fingerprint,
    load_dimensions,
)
from ifgym.rewards.tasks import FLEXBENCH, FLEXBENCH_PAPER
from ifgym.simulators.flexbench import SOP_DIR, LLMUser, ScriptedUser, assistant_closed, load_sop

USERS = ("scripted", "llm")
PAPER = "FlexBench"
JUDGES = ("rules", "llm")


# Dimensions built by the pipeline, once per process for an SOP text and a model (the CLI makes
# several envs per run: one to check the config, one per episode).
_BUILT: dict[tuple[str, str, str, str, str], DimensionSet] = {}
_BUILT_LOCK = threading.Lock()


def _client_key(client: Any) -> str:
    base_url = getattr(getattr(client, "config", None), "base_url", None)
    return f"{type(client).__name__}:{getattr(client, 'model', '')}@{base_url or ''}"


def built_dimensions(sop: Any, client: Any, pipeline: str = "ifgym") -> DimensionSet:
    """Run the dimension pipeline for an SOP, or return this process's earlier result for the same text and model."""
    key = (fingerprint(sop.instruction), sop.name, sop.opening_line, _client_key(client), pipeline)
    with _BUILT_LOCK:  # held while building: two envs made at once build once
        if key not in _BUILT:
            _BUILT[key] = build_dimensions(
                sop.instruction, client, sop_name=sop.name, opening_line=sop.opening_line, pipeline=pipeline
            )
        return _BUILT[key]


class FlexBenchEnv(ChatEnv):
    """An SOP call: the assistant follows a long procedure while a persona caller talks to it (FlexBench).

    ## Description
    The SOP (a standard operating procedure: a support call script, a dispatcher's check call …)
    is the system prompt. The assistant has already spoken the SOP's opening line; a simulated
    caller answers. The caller is a persona: a meta profile by cooperativeness (poor / general /
    good) plus an SOP-specific delta, with a fact sheet sampled from the seed (in charge or not,
    platform, fee plan chosen …) that decides which branches of the procedure apply. The trace is
    scored against the SOP's dimensions (one checkable clause each, base actions and their
    branches, always-on rules) with yes / no / unknown verdicts; the caller never sees them.

    ## Action Space
    `ReplySpace`: the assistant's next message, any `str` up to `max_reply_chars` characters.

    ## Observation Space
    `ChatSpace`: the system message (the SOP), the assistant's opening line, then alternating
    user/assistant messages ending with the caller's latest words. Treat the dicts as read-only.

    ## Rewards
    Each step the whole trace so far is judged. `reward="turn"`: (base actions and branches newly
    satisfied this turn − always-on rules newly broken this turn) / number of dimensions. A
    dimension is satisfied when its gated label is yes for the first time (a branch only counts
    once its base action was attempted); an always-on rule ("never promise discounts", "under 80
    words") earns nothing for being kept, since saying nothing keeps it, and costs once when
    broken; so a turn can be negative and an episode's turn rewards lie in [−1, 1]. `"episode"`: 0
    until the last step, which gets `end_weight` × the episode score,
    mean(Coverage, Achievement) × Compliance (Coverage alone when no branch was exercised;
    factor 1 when no rule was judged; see `ifgym.rewards.flexbench`). `"both"` (default): the two
    added. `info` carries `coverage`, `achievement` (None = n/a: no branch exercised yet),
    `compliance` (None = n/a), `labels`, `newly_satisfied` and `newly_broken`.

    ## Starting State
    The seed draws the caller's cooperativeness (unless pinned), facts and phrasing. Same seed and
    same replies, same episode (scripted caller).

    ## Episode End
    Terminated when the assistant closes the call (`done_reason="assistant_closed"`), the caller
    hangs up (`"user_hung_up"`) or runs out of patience (`"user_lost_patience"`: a poor caller has
    2 points, a general one 4, a good one never runs out; an unhelpful turn costs one). Truncated
    at `max_turns` (`"max_turns"`).

    ## Arguments
    | argument | default | meaning |
    |---|---|---|
    | `sop` | `"merchant_onboarding"` | shipped name (see `sop_names()`) or a path to a `.md`/`.json` SOP |
    | `user` | `"scripted"` | `"scripted"` (offline, deterministic; needs a caller file) or `"llm"` (a user model) |
    | `judge` | `"rules"` | `"rules"` (the dimension file's offline rules; scripted user only) or `"llm"` |
    | `judge_mode` | `"plain"` | LLM judge: `"plain"` or `"evidence"` (a yes must quote the agent) |
    | `cooperativeness` | `None` | `"poor"`, `"general"`, `"good"`; `None` draws one per episode |
    | `persona` | `None` | caller file (`.user.json`); `None` = the SOP's companion file or (LLM user) inferred |
    | `dimensions` | `None` | file, mapping, `DimensionSet`; `None` = shipped / next to the SOP; `"build"` = pipeline |
    | `dimensions_out` | `None` | with `"build"`: where to save the built file (built once per process and model) |
    | `pipeline` | `"ifgym"` | with `"build"`: `"ifgym"` (segment, criteria, verify, modify, logic) or `"paper"` |
    | `metrics` | `"ifgym"` | `"ifgym"` (per-call means, the score first) or `"paper"` (equations (6) and (7) first) |
    | `patience` | `"persona"` | the persona's own patience, `None` (off) or an int for every persona |
    | `max_turns` | `20` | truncation length (int or `None`) |
    | `reward` | `"both"` | `"turn"`, `"episode"` or `"both"` |
    | `end_weight` | `1.0` | weight of the episode-end term |
    | `judge_every_turn` | `True` | judge after every reply (needed by `"turn"`/`"both"`); `False`: the end only |
    | `end_detector` | `True` | LLM user only: an LLM end detector on top of the keyword rules |
    | `user_llm`, `judge_llm` | `None` | client, `LLMConfig` or mapping; `None` = the embedded model |
    | `max_reply_chars` | `100000` | longest accepted reply |

    `reset(options=...)` accepts `cooperativeness` and `facts` (a mapping pinning fact values).

    ## Version History
    - v0: first release. `metrics="paper"` and `pipeline="paper"` (env=flexbench_paper) were added
      later; they change no default. Revised before any published result after an audit: always-on rules
      are scored as Compliance (they were base actions), a base action without evidence is never
      yes, the closing dimensions check the summary of the next step, turn rewards can be
      negative, and the end-of-call keyword rules are anchored.
    """

    env_name = "ifgym/FlexBench-v0"

    def __init__(
        self,
        *,
        sop: str | Path | Mapping[str, Any] = "merchant_onboarding",
        user: str = "scripted",
        judge: str = "rules",
        judge_mode: str = DEFAULT_DIMENSION_MODE,
        cooperativeness: str | None = None,
        persona: str | Path | Mapping[str, Any] | None = None,
        dimensions: str | Path | Mapping[str, Any] | DimensionSet | None = None,
        dimensions_out: str | Path | None = None,
        pipeline: str = "ifgym",
        metrics: str = "ifgym",
        patience: int | str | None = "persona",
        max_turns: int | None = 20,
        reward: str = "both",
        end_weight: float = 1.0,
        judge_every_turn: bool = True,
        end_detector: bool = True,
        user_llm: Any = None,
        judge_llm: Any = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
        env_name: str | None = None,
    ):
        UnknownNameError.check(
            ("user", user, USERS),
            ("judge", judge, JUDGES),
            ("judge_mode", judge_mode, DIMENSION_MODES),
            ("pipeline", pipeline, PIPELINES),
            ("metrics", metrics, METRICS),
        )
        FlexBenchRubric.check_settings(reward, end_weight, judge_every_turn)
        if user == "llm" and judge == "rules":
            # the offline rules see a branch's precondition through the scripted caller's own wording;
            # a model caller words things its own way, so every branch would silently stay unknown
            raise ConfigError(
                "user='llm' needs judge='llm' (on the command line: judge=llm): the offline rules recognise a "
                "branch's precondition by the scripted caller's lines, so with a model playing the caller they "
                "would score no branch at all. Use judge='llm', or user='scripted' with judge='rules'"
            )
        if dimensions_out is not None and not (isinstance(dimensions, str) and dimensions == "build"):
            raise ConfigError(
                f"dimensions_out={str(dimensions_out)!r} saves dimensions built by the pipeline; it needs "
                "dimensions='build'"
            )
        if pipeline != "ifgym" and not (isinstance(dimensions, str) and dimensions == "build"):
            raise ConfigError(
                f"pipeline={pipeline!r} chooses how dimensions are built; it needs dimensions='build' (on the command "
                "line: env.dimensions=build), or pipeline='ifgym' to use a dimension file"
            )
        if env_name:
            self.env_name = env_name
        self.pipeline, self.metrics = pipeline, metrics
        self.sop = load_sop(sop)
        if user == "scripted":
            simulator = ScriptedUser(self.sop, persona, cooperativeness=cooperativeness, patience=patience)
        else:
            simulator = LLMUser(
                self.sop,
                persona,
                client=resolve_client(user_llm, "user"),
                end_detector=end_detector,
                cooperativeness=cooperativeness,
                patience=patience,
            )
        judge_client = resolve_client(judge_llm, "judge") if judge == "llm" or dimensions == "build" else None
        self.dimensions = self._dimensions(dimensions, judge_client)
        self.dimensions_built = isinstance(dimensions, str) and dimensions == "build"
        self._models = {"user": getattr(simulator, "client", None), "judge": judge_client}
        if dimensions_out is not None:
            Path(dimensions_out).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.dimensions.save(Path(dimensions_out).expanduser())
        if judge == "rules":
            missing = [d.id for d in self.dimensions.dimensions if d.rule is None]
            if missing:
                raise ConfigError(
                    f"judge='rules' needs an offline rule on every dimension; {', '.join(missing)} have none. "
                    "Use judge='llm', or add 'rule' entries to the dimension file"
                )
            dimension_judge: RuleDimensionChecker | LLMDimensionJudge = RuleDimensionChecker()
        else:
            dimension_judge = LLMDimensionJudge(judge_client, mode=judge_mode)
        self.user_kind, self.judge_kind = user, judge
        rubric = FlexBenchRubric(
            self.dimensions,
            reward=reward,
            end_weight=end_weight,
            judge_every_turn=judge_every_turn,
            closes=assistant_closed,
        )
        super().__init__(
            task=FLEXBENCH_PAPER if metrics == "paper" else FLEXBENCH,  # the paper's table leads with its (6), (7)
            user=simulator,
            scorer=FlexBenchScorer(self.dimensions, dimension_judge, self.sop.opening_line),
            rubric=rubric,  # the caller's own patience ends the call (see the user simulator)
            max_turns=max_turns,
            system_prompt=self.sop.instruction,
            max_reply_chars=max_reply_chars,
            render_mode=render_mode,
        )

    def _dimensions(self, source: Any, client: Any) -> DimensionSet:
        sop = self.sop
        if isinstance(source, DimensionSet):
            dims = source
        elif isinstance(source, str) and source == "build":
            try:
                dims = built_dimensions(sop, client, self.pipeline)
            except DataFormatError as exc:
                where = getattr(getattr(client, "config", None), "base_url", None) or "embedded"
                raise DataFormatError(
                    f"building the dimensions of SOP {sop.name!r} (env.dimensions=build, env.pipeline={self.pipeline}) "
                    f"failed: the judge model builds them, and {getattr(client, 'model', '?')} ({where}) did not: "
                    f"{exc}. Serve a stronger judge model (judge.llm.base_url=URL judge.llm.model=NAME), or score "
                    "with ifgym's reviewed dimension file (env.dimensions=null)"
                ) from None
        elif source is not None:
            dims = load_dimensions(source)
        elif sop.path is not None and sop.path.parent == SOP_DIR:
            dims = load_dimensions(sop.name)
        else:
            companion = sop.path.with_name(sop.path.stem + DIMENSIONS_SUFFIX) if sop.path is not None else None
            if companion is None or not companion.is_file():
                where = f" (looked for {companion})" if companion is not None else ""
                raise ConfigError(
                    f"no dimensions for SOP {sop.name!r}{where}: pass dimensions=<file>, or dimensions='build' "
                    "to run the pipeline with judge_llm (then review and save it with DimensionSet.save)"
                )
            dims = load_dimensions(companion)
        if dims.sop_sha256 is not None and dims.sop_sha256 != fingerprint(sop.instruction):
            raise ConfigError(
                f"the dimensions were built for another version of SOP {sop.name!r} (sop_sha256 differs); "
                'rebuild them, or after checking them set "sop_sha256" to null or to '
                f"{fingerprint(sop.instruction)!r}"
            )
        return dims

    # --- the loop's hooks ----------------------------------------------------------------------
    user_sees_verdicts = False  # the caller never sees the evaluation; the reply is judged after it answered

    def _start(self, seed: int | None) -> None:
        """The dialogue starts with the SOP's opening line, already spoken by the assistant."""
        super()._start(seed)
        self._messages.append({"role": "assistant", "content": self.sop.opening_line})
        self._episode.meta["flexbench"] = {
            "sop": self.sop.name,
            "opening_line": self.sop.opening_line,
            "user": self.user_kind,
            "judge": self.judge_kind,
            "reward": self.rubric.mode,
            "dimensions": self.dimensions.to_json(),
        }
        if self.metrics != "ifgym":  # recorded only when not the default, so earlier episodes keep their form
            self._episode.meta["flexbench"]["metrics"] = self.metrics
        if self.dimensions_built:  # the run's report saves the set it built beside the summary (likewise)
            self._episode.meta["flexbench"]["dimensions_built"] = True

    def protocol(self) -> dict[str, Any]:
        """The env's settings; with `metrics="paper"` also each way a run differs from the FlexBench paper's."""
        out = super().protocol()
        if self.metrics != "paper":
            return out  # ifgym's own measure: no paper to differ from
        out.update(
            paper=PAPER,
            sop=self.sop.name,
            user=self.user_kind,
            judge=self.judge_kind,
            dimensions="built (pipeline=" + self.pipeline + ")" if self.dimensions_built else "file",
            metrics=self.metrics,
            caller_patience=self.user.patience_setting,
            paper_decoding={
                "temperature": 0.3,
                "stated": "FlexBench §5.1: the evaluated models decode at temperature 0.3",
            },
        )
        deviations = [
            f"SOP {self.sop.name!r} is not one of the paper's scenarios (neither its SOPs nor its conversation "
            "corpus ship with ifgym)",
            "the caller's, the judge's and the pipeline's prompts are written in ifgym's own words, not the paper's",
            "always-on rules (unconditional prohibitions and limits) are counted in Achievement as requirements whose "
            "condition holds on every agent message, and known branches of one mutually exclusive set count once "
            "with the worst label: ifgym's reading of the paper's sets",
        ]
        models = ", ".join(
            f"{role} {getattr(client, 'model', '?')}" for role, client in self._models.items() if client is not None
        )
        if models:
            deviations.append(f"models: {models} (the paper's results come from its own user and judge models)")
        if self.user.patience_setting is not None:
            deviations.append(
                f"patience={self.user.patience_setting}: the caller hangs up after unhelpful turns (ifgym's; the "
                "paper's callers have no patience: env.patience=null)"
            )
        if self.user_kind == "scripted":
            deviations.append("user=scripted: a scripted caller with fixed lines, not the paper's LLM persona caller")
        if self.judge_kind == "rules":
            deviations.append("judge=rules: the dimension files' offline rules, not the paper's LLM judge")
        elif getattr(self.scorer.judge, "mode", None) == "evidence":
            deviations.append("judge_mode=evidence: a yes must quote the agent (ifgym's stricter judge)")
        if not self.dimensions_built:
            deviations.append(
                "dimensions from a file (ifgym's hand-reviewed set for the shipped SOPs), not built by the paper's "
                "pipeline (env.dimensions=build env.pipeline=paper)"
            )
        elif self.pipeline != "paper":
            deviations.append("pipeline=ifgym: segment, criteria, verify, modify, logic; not appendix B's stages")
        else:
            deviations += [
                "pipeline=paper: Gradual is read as splitting criteria that check several things into single checks, "
                "Dependency as ifgym's precondition groups and exclusive sets (ifgym's reading of appendix B's stages)",
                f"pipeline decoding: temperature {PAPER_TEMPERATURE:g}, each re-ask {PAPER_TEMPERATURE_STEP:g} hotter, "
                "3 tries per stage and 2 modification rounds (ifgym's values for the paper's low temperature and "
                "bounded retries)",
            ]
        out["deviations"] = deviations
        return out

    def _record_start(self) -> None:
        caller = self.user.episode_meta()
        self._episode.meta["flexbench"].update(cooperativeness=caller["cooperativeness"], facts=caller["facts"])

    def _record_end(self) -> None:
        meta = self._episode.meta["flexbench"]
        meta["final_user_message"] = self.user.episode_meta()["final_user_message"]
        meta["scores"] = self.rubric.last.to_json()  # the final trace is always judged

    def _patience(self) -> int | None:
        return self.user.episode_meta()["patience"]  # the caller's own

    def _turn_info(self) -> dict[str, Any]:
        info = super()._turn_info()
        info["sop"] = self.sop.name
        info["cooperativeness"] = self.user.episode_meta()["cooperativeness"]
        return info

    def _scoring_spec(self, spec: TurnSpec) -> TurnSpec:
        """The caller's turn spec with the dimensions as its checklist: what every judged turn is scored against."""
        return dataclasses.replace(spec, checklist=self.dimensions.checklist())

    # --- rendering ---------------------------------------------------------------------------
    def _render_lines(self) -> list[str]:
        """The call so far, then the latest per-dimension labels and scores."""
        lines = [f"[opening] ASSISTANT: {self.sop.opening_line}", *super()._render_lines()]
        if self.rubric.last is not None:
            s = self.rubric.last
            for d in self.dimensions.dimensions:
                lines.append(f"    {s.labels[d.id]:7} {d.id} ({d.kind}): {d.criterion}")
            achievement = "n/a" if math.isnan(s.achievement) else f"{s.achievement:.3f}"
            compliance = "n/a" if math.isnan(s.compliance) else f"{s.compliance:.3f}"
            lines.append(f"    coverage {s.coverage:.3f}  achievement {achievement}  compliance {compliance}")
        return lines

    def _render_turn(self, t: TurnRecord) -> list[str]:
        return [f"[{t.index}] CALLER: {t.user}", f"[{t.index}] ASSISTANT: {t.reply}"]
