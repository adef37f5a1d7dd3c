"""EvolIF: a user who keeps changing topics and instructions until their patience runs out.

`PAPER_PROTOCOL` holds the settings of EvolIF's own evaluation; `EvolIFEnv.protocol()` reports an
env's settings and every way they differ from it, so a results table can say what its numbers mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gymnasium.utils import seeding

from ifgym.core.constraints import GROUPS, JUDGED_GROUPS, RULE_GROUPS
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import resolve_client
from ifgym.rewards.checks import SEMANTICS
from ifgym.rewards.evolif.scorer import EvolIFScorer
from ifgym.rewards.rubric import VerdictRubric
from ifgym.rewards.tasks import EVOLIF, EVOLIF_PAPER

RENDERERS = ("template", "llm")
METRICS = ("ifgym", "paper")  # REC's count for a dialogue with nothing to recover: 1.0, or score.py's 0
JUDGES = ("rules", "llm")
# EvolIF's evaluation: patience 3, no cap but a safety cap of 100 turns (it reports survival past
# 50), all 12 groups, a user who states only the change and never sees the replies, verdicts as
# EvolIF's released evaluator gives them.
# Its queries were written by user models and checked (k = 3 tries), it evaluates with a task system prompt,
# and it discards trivial dialogues (fewer than 2 constraints on average over the first 20 turns).
PAPER_PROTOCOL: dict[str, Any] = {
    "patience": 3,
    "max_turns": 100,
    "groups": GROUPS,
    "restate": "change",
    "adaptive": False,
    "checker_semantics": "evolif",
    "judge_mode": "rating",
    "renderer": "llm",
    "regenerations": 3,
    "system_prompt": "task",
    "min_mean_constraints": 2,
    "filter_turns": 20,
    "metrics": "paper",
}
PAPER_USER_MODELS = "GPT-4.1, Gemini-2.5-Flash and DeepSeek-V3.1"
FILTER_TURNS = PAPER_PROTOCOL["filter_turns"]  # the trivial-dialogue filter looks at this many first turns

# `system_prompt="task"`: ifgym's own wording of what EvolIF's task prompt asks of the model.
TASK_SYSTEM_PROMPT = (
    "You are an assistant in a long conversation in which the user keeps adjusting how your replies must be "
    "written: their format, length, case, punctuation, words to include or avoid, how they open and close, "
    "their tone, style and intended readers. A requirement the user sets stays in force for every later "
    "reply on that topic until the user changes or drops it; when the user comes back to an earlier topic, "
    "the requirements that were in force for it apply again. Each message may state only what changed, so "
    "keep track of everything still in force. In every reply, do what the user asks and follow every "
    "requirement that is still in force, not only the newest one."
)
SYSTEM_PROMPTS = ("task", "none")  # named values of `system_prompt`; any other string is sent as given


def _model_kind(client: Any) -> str:
    """`MODEL (embedded)` or `MODEL (served)`, never the host: a protocol is the same wherever the server ran."""
    model = getattr(client, "model", None) or type(client).__name__
    backend = getattr(client, "backend", None)
    if backend is None:
        return str(model)
    return f"{model} ({'embedded' if backend == 'embedded' else 'served'})"


class EvolIFEnv(ChatEnv):
    """Multi-topic dialogue whose instructions evolve turn by turn (EvolIF).

    ## Description
    A simulated user talks about a topic and attaches constraints (start/end with, format, case,
    punctuation, bullet count, length, keyword counts, forbidden words; with an LLM judge also
    emotion, style and reader age). Each turn the user makes one change: add, remove or modify a
    constraint; after more than three turns on a topic it may switch to a new topic or return to an
    earlier one, whose instruction state comes back with it. The model must satisfy every live
    constraint in every reply. As in EvolIF, the user states only the change (`restate="change"`):
    a new topic's request and its first constraint; then only the rule added, modified (old → new)
    or dropped; on a return, a cue to the earlier topic and the change, never the restored rules.
    The model must remember everything else. `restate="all"` (easier) restates every live rule on
    every turn.

    ## Action Space
    `ReplySpace`: the assistant's reply, any `str` up to `max_reply_chars` characters.

    ## Observation Space
    `ChatSpace`: the chat messages to answer: an optional system message, then alternating
    user/assistant messages, ending with the new user turn. Message dicts are shared with the env's
    history: treat them as read-only.

    ## Rewards
    Per turn, over the live constraints (`reward=`): `"fraction"` (default) = yes / (yes + no);
    `"all_pass"` = 1 only if every constraint holds; `"weighted"` = fraction with `reward_weights`
    per group. Unknown verdicts (a judge that could not be parsed) count as neither; they are
    reported in `info["unknown"]`, and `info["reward_defined"]` is False when nothing was known.

    ## Starting State
    A seeded user style, first topic, and one constraint. Same seed, same episode script; with the
    default (non-adaptive) user the user's turns do not depend on the replies either.

    ## Episode End
    Terminated when patience reaches 0 (`done_reason="patience"`): patience starts full, is refilled
    after an all-pass turn and drops by one after a turn with a failed constraint; or when a replayed
    script ends (`"script_end"`). Truncated at `max_turns` (`"max_turns"`), a safety cap.

    ## Arguments
    | argument | default | meaning |
    |---|---|---|
    | `renderer` | `"template"` | `"template"` (offline, deterministic) or `"llm"` (a user model writes it) |
    | `restate` | `"change"` | `"change"`: the user states only the change (EvolIF); `"all"`: every live rule too |
    | `adaptive` | `False` | `True`: the LLM user sees the recent dialogue and what the last reply missed |
    | `user_checks` | `"rules"` | renderer="llm": `"rules"` (EvolIF's, see below) or `"model"` (v0's) |
    | `judge` | `"rules"` | `"rules"`: only rule-checked groups are sampled; `"llm"`: judged groups too |
    | `checker_semantics` | `"ifgym"` | `"ifgym"` (strict + loose, stricter) or `"evolif"` (EvolIF's evaluator) |
    | `judge_mode` | `"blind"` | `"blind"` (classify the reply, requirement unseen) or `"rating"` (1-10, pass > 6) |
    | `patience` | `3` | int, or `None` to switch patience off |
    | `max_turns` | `100` | safety cap on the dialogue's length (int or `None`) |
    | `reward` | `"fraction"` | `"fraction"`, `"all_pass"` or `"weighted"` |
    | `reward_weights` | `None` | group → weight for `"weighted"` |
    | `script` | `None` | path to an EvolIF dialogue JSONL to replay instead of simulating |
    | `user_llm`, `judge_llm` | `None` | client, `LLMConfig` or mapping; `None` = the embedded model |
    | `tracker` | `None` | mapping of `TrackerConfig` fields (switch probabilities, change weights, …) |
    | `regenerations` | `3` | renderer="llm": redrafts after a failed check, then the template text |
    | `system_prompt` | `None` | `"task"`: ifgym's task prompt (EvolIF's protocol); `None`/`"none"`: none; or any text |
    | `min_mean_constraints` | `None` | skip seeds whose first 20 turns average fewer live constraints (EvolIF: 2) |
    | `metrics` | `"ifgym"` | `"paper"`: REC counts a dialogue with nothing to recover 0, as EvolIF's score.py |
    | `max_reply_chars` | `100000` | longest accepted reply |

    The `user_` and `judge_` prefixes say whose setting it is: `EvolIFUser` and the judge take them unprefixed
    (`client`, `checks`, `mode`). `tracker` is the user's `tracker_config` (its `tracker` is the tracker itself).

    `user_checks="rules"`: a draft must contain the key values (keyword, number, emoji, letter, mode,
    format) of each rule it states, a rule check with no model call, and on a topic change the user
    model must find it points to the topic; `"model"`: the user model checks the topic and every
    stated rule on every draft. After `regenerations` failed redrafts the template text is used
    (counted in `user_stats["llm_fallbacks"]`).

    `system_prompt="task"` sends `TASK_SYSTEM_PROMPT` first in every observation: in ifgym's words, what
    EvolIF's task prompt states (requirements stay in force per topic until the user changes them; follow
    every live one); `None` is the paper's "w/o system prompt" row. `min_mean_constraints` is EvolIF's
    trivial-dialogue filter: `keeps_seed(seed)` is False when the tracker's script for that seed has fewer
    live constraints on average over its first 20 turns; it plays the script without the renderer, so it
    makes no model call. `ifgym eval` skips those seeds (still playing `episodes` dialogues) and lists
    them in `summary.json` (`seed_filter`); `reset(seed)` itself plays any seed. `script` may be a folder of
    dialogue files: seed `s` replays file `s % count` in name order.

    `reset(options=...)` accepts `topic_id` and `style_id` to pin the opening. With `renderer="llm"` or
    `judge="llm"` the episodes are recorded under the LLM id (`ifgym/EvolIF-LLM-v1`: not deterministic).

    EvolIF's protocol (`PAPER_PROTOCOL`; `ifgym eval env=evolif_paper judge=llm …`) is these defaults
    with an LLM user, an LLM judge rating 1-10 (all 12 groups in play), EvolIF's evaluator's verdicts,
    the task system prompt and the trivial-dialogue filter: `gym.make("ifgym/EvolIF-v1", renderer="llm",
    user_llm=USER, judge="llm", judge_llm=JUDGE, judge_mode="rating", checker_semantics="evolif",
    system_prompt="task", min_mean_constraints=2)`.
    `protocol()` lists an env's settings and how they differ from it; every episode records them in
    `episode.meta["evolif"]`.

    ## Version History
    - v1: the user states only the change (a return to a topic does not restate its rules), and the
      LLM user never sees the replies and is checked as EvolIF checks its queries; `max_turns`
      defaults to 100 (EvolIF's safety cap) instead of 20. With an LLM judge the judged groups are
      judged blind (`judge_mode="blind"`): the judge audit showed a small judge asked EvolIF's 1-10
      question passing every reply; `judge_mode="rating"` keeps that question. Later, `metrics=`
      (REC's count for a dialogue with nothing to recover; rewards and episodes unchanged) and STA
      as the headline metric.
    - v0: first release: every turn restated all live rules, the LLM user saw the recent dialogue
      and was checked by the user model, `max_turns` 20, the judge rated 1-10. Still registered with
      that behaviour (`restate="all"`, `adaptive=True`, `user_checks="model"`, `judge_mode="rating"`),
      so earlier results reproduce.
    """

    env_name = "ifgym/EvolIF-v1"

    def __init__(
        self,
        *,
        renderer: str = "template",
        restate: str = "change",
        adaptive: bool = False,
        user_checks: str = "rules",
        judge: str = "rules",
        checker_semantics: str = "ifgym",
        judge_mode: str = "blind",
        patience: int | None = 3,
        max_turns: int | None = 100,
        reward: str = "fraction",
        reward_weights: Mapping[str, float] | None = None,
        script: str | Path | None = None,
        user_llm: Any = None,
        judge_llm: Any = None,
        tracker: Mapping[str, Any] | None = None,
        regenerations: int = 3,
        system_prompt: str | None = None,
        min_mean_constraints: float | None = None,
        metrics: str = "ifgym",
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
        env_name: str | None = None,
    ):
        from ifgym.rewards.evolif.judge import MODES, EvolIFJudge
        from ifgym.simulators import EvolIFUser, ReplayUser, TrackerConfig

        UnknownNameError.check(
            ("renderer", renderer, RENDERERS),
            ("judge", judge, JUDGES),
            ("checker_semantics", checker_semantics, SEMANTICS),
            ("judge_mode", judge_mode, MODES),
            ("metrics", metrics, METRICS),
        )
        self.checker_semantics = checker_semantics
        self.metrics = metrics
        # an LLM user or judge makes episodes nondeterministic: record them under the LLM id
        name = env_name or self.env_name
        if "llm" in (renderer, judge) and name.startswith("ifgym/EvolIF-v"):
            name = name.replace("ifgym/EvolIF-", "ifgym/EvolIF-LLM-", 1)
        self.env_name = name
        UnknownNameError.check(*(("reward_weights group", group, GROUPS) for group in reward_weights or ()))
        rubric = VerdictRubric(reward, reward_weights, patience)
        if min_mean_constraints is not None and (
            not isinstance(min_mean_constraints, int | float)
            or isinstance(min_mean_constraints, bool)
            or not min_mean_constraints > 0
        ):
            raise ConfigError(
                f"min_mean_constraints must be a number > 0 (EvolIF's filter: 2) or None, got {min_mean_constraints!r}"
            )
        self.min_mean_constraints = min_mean_constraints
        self.script = script
        if script is not None:
            # the released dialogues were written by EvolIF's user models and filtered by its rule, over all 12
            # groups: the paper's user settings describe them; anything else would change a simulated user
            paper_groups = set((tracker or {}).get("groups") or ()) in (set(), set(GROUPS))
            ignored = [
                name
                for name, given in (
                    ("tracker", set(tracker or {}) - {"groups"} or not paper_groups),
                    (
                        "min_mean_constraints",
                        min_mean_constraints not in (None, PAPER_PROTOCOL["min_mean_constraints"]),
                    ),
                )
                if given
            ]
            if ignored:
                raise ConfigError(f"script= replays fixed dialogues; {', '.join(ignored)} would be ignored: drop it")
            self.min_mean_constraints = None
            user = ReplayUser(script)
            self.groups: tuple[str, ...] = ()
            self.tracker_overrides: dict[str, Any] = {}
        else:
            fields = dict(tracker or {})
            if fields.get("groups") is None:  # absent, or None (= all twelve): what the judge can score
                fields["groups"] = tuple(RULE_GROUPS) + (tuple(JUDGED_GROUPS) if judge == "llm" else ())
            unjudged = sorted(set(fields["groups"]) & set(JUDGED_GROUPS)) if judge == "rules" else []
            if unjudged:
                whose = "EvolIF's protocol samples all 12 groups; " if set(fields["groups"]) == set(GROUPS) else ""
                raise ConfigError(
                    f"{whose}tracker groups {unjudged} need an LLM judge: pass judge='llm' and judge_llm "
                    "(command line: judge=llm judge.llm.base_url=URL judge.llm.model=NAME), or drop those groups"
                )
            config = TrackerConfig.from_mapping(fields)
            self.groups = tuple(config.groups or GROUPS)
            self.tracker_overrides = {k: v for k, v in (tracker or {}).items() if k != "groups"}
            user = EvolIFUser(
                renderer=renderer,
                tracker_config=config,
                client=resolve_client(user_llm, "user") if renderer == "llm" else None,
                regenerations=regenerations,
                restate=restate,
                adaptive=adaptive,
                checks=user_checks,
            )
        judge_client = resolve_client(judge_llm, "judge") if judge == "llm" else None
        llm_user = renderer == "llm" and script is None
        user_client = getattr(getattr(user, "renderer", None), "client", None) if llm_user else None
        if isinstance(system_prompt, str) and system_prompt in SYSTEM_PROMPTS:
            self.system_prompt_kind = system_prompt
            system_prompt = TASK_SYSTEM_PROMPT if system_prompt == "task" else None
        else:
            self.system_prompt_kind = "none" if system_prompt is None else "custom"
        self.settings = {  # None: does not apply to this user
            "renderer": "replay" if script is not None else renderer,
            "user_model": _model_kind(user_client) if user_client is not None else None,
            "restate": restate,
            "adaptive": adaptive if llm_user else None,
            "user_checks": user_checks if llm_user else None,
            "regenerations": regenerations if llm_user else None,
            "judge": judge,
            "judge_model": getattr(judge_client, "model", None),
            "judge_mode": judge_mode if judge == "llm" else None,
            "checker_semantics": checker_semantics,
            "system_prompt": self.system_prompt_kind,
            "min_mean_constraints": self.min_mean_constraints,
            "metrics": metrics,
        }
        self._judge_place = _model_kind(judge_client) if judge_client is not None else None
        judge_obj = EvolIFJudge(judge_client, mode=judge_mode) if judge_client is not None else None
        scorer = EvolIFScorer(judge_obj, semantics=checker_semantics)
        super().__init__(
            task=EVOLIF_PAPER if metrics == "paper" else EVOLIF,
            user=user,
            scorer=scorer,
            rubric=rubric,
            max_turns=max_turns,
            system_prompt=system_prompt,
            max_reply_chars=max_reply_chars,
            render_mode=render_mode,
        )

    # --- which seeds are played ------------------------------------------------------------------
    def mean_constraints(self, seed: int) -> float:
        """The mean number of live constraints over the first 20 turns of `seed`'s script (EvolIF's filter).

        Plays the tracker alone (`EvolIFUser.constraint_counts`) with the rng `reset(seed=seed)` would
        give the user: no model call, no text, and this env's episode is untouched.
        """
        if self.script is not None:
            raise ConfigError("mean_constraints needs a simulated user; a replayed dialogue has no tracker script")
        rng, _ = seeding.np_random(seed)
        counts = self.user.constraint_counts(rng, FILTER_TURNS)
        return sum(counts) / len(counts)

    @property
    def seed_filter_rule(self) -> str | None:
        """The filter `keeps_seed` applies, in words (None without one): what a run's summary records."""
        if self.min_mean_constraints is None:
            return None
        return f"at least {self.min_mean_constraints:g} live constraints on average over the first {FILTER_TURNS} turns"

    def keeps_seed(self, seed: int) -> bool:
        """False when EvolIF's filter discards `seed`'s dialogue as trivial (`min_mean_constraints`), else True."""
        return self.min_mean_constraints is None or self.mean_constraints(seed) >= self.min_mean_constraints

    # --- what this env measures ------------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """The env's settings and `deviations`: each way it differs from EvolIF's protocol, in words.

        Settings that differ from the paper's come first, then what no setting removes (models, assets,
        prompts in ifgym's own words), so a run at the paper's settings still says what it is not.
        """
        paper, patience = PAPER_PROTOCOL, self.patience.full
        out: dict[str, Any] = {
            **super().protocol(),
            "paper": "EvolIF",
            **self.settings,
            "groups": list(self.groups),
            "tracker": dict(self.tracker_overrides),
        }
        if self.script is not None:
            out["script"] = str(self.script)
            out["dialogues"] = len(self.user.dialogues)
            for key in ("restate", "adaptive", "user_checks", "regenerations", "groups", "user_model"):
                out.pop(key)
        out["deviations"] = self._deviations(paper, patience)
        out["paper_decoding"] = {"stated": "EvolIF ran each evaluated model at its provider's default decoding"}
        return out

    def _deviations(self, paper: dict[str, Any], patience: int | None) -> list[str]:
        settings = self.settings
        deviations = []
        if self.max_turns is not None and self.max_turns < paper["max_turns"]:
            cap = paper["max_turns"]
            deviations.append(
                f"max_turns={self.max_turns}: a quick demo, not EvolIF's protocol (safety cap {cap} turns)"
            )
        if self.checker_semantics != paper["checker_semantics"]:
            deviations.append(
                f"checker_semantics={self.checker_semantics}: ifgym's stricter checkers, not the verdicts of "
                "EvolIF's evaluator (checker_semantics=evolif)"
            )
        if settings["judge_mode"] not in (None, paper["judge_mode"]):
            deviations.append(
                f"judge_mode={settings['judge_mode']}: the judged groups are classified without the judge seeing "
                "the requirement, not rated 1-10 as EvolIF's judge does (judge.mode=rating)"
            )
        if patience != paper["patience"]:
            setting = "patience off" if patience is None else f"patience={patience}"
            deviations.append(f"{setting}: EvolIF's user gives up after {paper['patience']} failed turns in a row")
        if self.metrics != paper["metrics"]:
            deviations.append(
                "metrics=ifgym: REC counts a dialogue with no failed turn that has a next turn as 1.0 (nothing left "
                "unrecovered); EvolIF's score.py counts it 0 (env.metrics=paper)"
            )
        if self.system_prompt_kind == "none":
            deviations.append(
                "no system prompt: EvolIF's 'w/o system prompt' row; its protocol sends a task system prompt "
                "(env.system_prompt=task)"
            )
        elif self.system_prompt_kind == "custom":
            deviations.append("a system prompt of your own, not the task prompt (env.system_prompt=task)")
        if self.script is None:
            deviations += self._user_deviations(paper)
        else:
            deviations.append(
                "replayed dialogue files: the user turns are the files' queries, whatever the user settings say"
            )
        if settings["judge"] == "llm":
            deviations.append(
                f"judge {self._judge_place}: not EvolIF's judge model; the judge prompt "
                f"({settings['judge_mode']}) is in ifgym's own words"
            )
            if settings["judge_mode"] == "rating":
                deviations.append(
                    "judge answers that cannot be read leave their items unknown (counted, left out of the rates); "
                    "EvolIF's evaluator fails the turn"
                )
        if settings["system_prompt"] == "task":
            deviations.append("the task system prompt is in ifgym's own words, stating what EvolIF's prompt outlines")
        return deviations

    def _user_deviations(self, paper: dict[str, Any]) -> list[str]:
        """How the simulated user differs from EvolIF's query synthesis."""
        settings, out = self.settings, []
        if set(self.groups) != set(paper["groups"]):
            left_out = [g for g in paper["groups"] if g not in self.groups]
            why = " (judge=rules cannot score the judged ones)" if settings["judge"] == "rules" else ""
            out.append(f"{len(self.groups)} of 12 constraint groups: {', '.join(left_out)} left out{why}")
        if settings["restate"] != paper["restate"]:
            out.append("restate=all: every turn restates all live rules (easier than EvolIF)")
        if self.min_mean_constraints is None:
            out.append(
                f"trivial dialogues kept: EvolIF discards a dialogue whose first {FILTER_TURNS} turns average fewer "
                f"than {paper['min_mean_constraints']} live constraints (env.min_mean_constraints=2)"
            )
        elif self.min_mean_constraints != paper["min_mean_constraints"]:
            out.append(
                f"min_mean_constraints={self.min_mean_constraints}: EvolIF's filter keeps dialogues averaging at "
                f"least {paper['min_mean_constraints']} live constraints over their first {FILTER_TURNS} turns"
            )
        if settings["renderer"] == "template":
            out.append(
                f"queries worded by ifgym's templates, not written by a model (EvolIF's: {PAPER_USER_MODELS}); "
                "env.renderer=llm with env.user_llm.* uses a user model"
            )
        else:
            if settings["adaptive"] != paper["adaptive"]:
                out.append("adaptive user: the user model sees the replies (EvolIF's never does)")
            if settings["user_checks"] != "rules":
                out.append("user_checks=model: drafts checked by the user model, not by EvolIF's rules")
            where = "the embedded model" if "(embedded)" in str(settings["user_model"]) else "a served model"
            out.append(
                f"queries written by {settings['user_model']}, {where}, not by EvolIF's user models "
                f"({PAPER_USER_MODELS})"
                + (
                    "; a small local model: env.user_llm.base_url=URL env.user_llm.model=NAME for a served one"
                    if where == "the embedded model"
                    else ""
                )
            )
            tries = settings["regenerations"] + 1
            out.append(
                f"up to {tries} checked drafts per turn (env.regenerations={settings['regenerations']}), then "
                f"ifgym's template text (counted as llm_fallbacks); EvolIF checks k = {paper['regenerations']} "
                "tries; the user model's prompts are in ifgym's own words"
            )
        if self.tracker_overrides:
            changed = ", ".join(f"{k}={v}" for k, v in self.tracker_overrides.items())
            out.append(f"tracker settings differ from ifgym's defaults: {changed}")
        out.append(
            "the tracker's probabilities are ifgym's (a topic switch possible after 3 turns, then with p 0.8, new 0.4 "
            "/ back 0.6; add:remove:modify 5:1:4): neither EvolIF's paper nor its release states them"
        )
        out.append("topics and user styles are ifgym's own banks, not EvolIF's")
        return out

    def _reset_options(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """A replay of several files plays file `seed % count` (in name order) unless `dialogue` is given."""
        if self.script is not None and seed is not None and not (options and "dialogue" in options):
            return {**(options or {}), "dialogue": seed % len(self.user.dialogues)}
        return options

    def _record_start(self) -> None:
        if self.script is not None:
            self._episode.meta["dialogue"] = self.user.episode_meta()

    def _start(self, seed: int | None) -> None:
        super()._start(seed)
        self._episode.meta["checker_semantics"] = self.checker_semantics  # which rules produced the verdicts
        self._episode.meta["evolif"] = self.protocol()
