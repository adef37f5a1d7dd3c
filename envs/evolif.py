"""EvolIF: a user who keeps changing topics and instructions until their patience runs out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import LLMConfig, make_client
from ifgym.rewards.constraints import GROUPS, JUDGED_GROUPS, RULE_GROUPS, SEMANTICS
from ifgym.rewards.scorer import Scorer

RENDERERS = ("template", "llm")
JUDGES = ("rules", "llm")


def resolve_client(client: Any, role: str):
    """A client object as given, or one built from an LLMConfig / mapping / None (None = embedded model)."""
    if client is None:
        return make_client(LLMConfig(), role)
    if isinstance(client, (LLMConfig, Mapping)):
        return make_client(client, role)
    if hasattr(client, "chat") and hasattr(client, "achat"):
        return client
    raise ConfigError(f"{role}_llm must be an LLMConfig, a mapping of its fields, a client, or None; got {client!r}")


class EvolIFEnv(ChatEnv):
    """Multi-topic dialogue whose instructions evolve turn by turn (EvolIF).

    ## Description
    A simulated user talks about a topic and attaches constraints (start/end with, format, case,
    punctuation, bullet count, length, keyword counts, forbidden words; with an LLM judge also
    emotion, style and reader age). Each turn the user makes one change: add, remove or modify a
    constraint; after more than three turns on a topic it may switch to a new topic or return to an
    earlier one, whose instruction state comes back with it. The model must satisfy every live
    constraint in every reply.

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
    A seeded user style, first topic, and one constraint. Same seed, same episode script.

    ## Episode End
    Terminated when patience reaches 0 (`done_reason="patience"`): patience starts full, is refilled
    after an all-pass turn and drops by one after a turn with a failed constraint; or when a replayed
    script ends (`"script_end"`). Truncated at `max_turns` (`"max_turns"`).

    ## Arguments
    | argument | default | meaning |
    |---|---|---|
    | `renderer` | `"template"` | `"template"` (offline, deterministic) or `"llm"` (a user model writes it) |
    | `judge` | `"rules"` | `"rules"`: only rule-checked groups are sampled; `"llm"`: judged groups too |
    | `checker_semantics` | `"ifgym"` | `"ifgym"` (strict + loose, stricter) or `"evolif"` (EvolIF's evaluator) |
    | `patience` | `3` | int, or `None` to switch patience off |
    | `max_turns` | `20` | truncation length (int or `None`) |
    | `reward` | `"fraction"` | `"fraction"`, `"all_pass"` or `"weighted"` |
    | `reward_weights` | `None` | group → weight for `"weighted"` |
    | `script` | `None` | path to an EvolIF dialogue JSONL to replay instead of simulating |
    | `user_llm`, `judge_llm` | `None` | client, `LLMConfig` or mapping; `None` = the embedded model |
    | `tracker` | `None` | mapping of `TrackerConfig` fields (switch probabilities, change weights, …) |
    | `regenerations` | `3` | renderer="llm": redrafts after a failed topic/constraint check, then the template text |
    | `system_prompt` | `None` | system message put first in every observation |
    | `max_reply_chars` | `100000` | longest accepted reply |

    `reset(options=...)` accepts `topic_id` and `style_id` to pin the opening. With `renderer="llm"` or
    `judge="llm"` the episodes are recorded as `ifgym/EvolIF-LLM-v0` (they are not deterministic).

    ## Version History
    - v0: first release.
    """

    env_name = "ifgym/EvolIF-v0"

    def __init__(
        self,
        *,
        renderer: str = "template",
        judge: str = "rules",
        checker_semantics: str = "ifgym",
        patience: int | None = 3,
        max_turns: int | None = 20,
        reward: str = "fraction",
        reward_weights: Mapping[str, float] | None = None,
        script: str | Path | None = None,
        user_llm: Any = None,
        judge_llm: Any = None,
        tracker: Mapping[str, Any] | None = None,
        regenerations: int = 3,
        system_prompt: str | None = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
        env_name: str | None = None,
    ):
        from ifgym.rewards.judge import LLMJudge
        from ifgym.simulators import EvolIFUser, ReplayUser, TrackerConfig

        if renderer not in RENDERERS:
            raise UnknownNameError("renderer", renderer, RENDERERS)
        if judge not in JUDGES:
            raise UnknownNameError("judge", judge, JUDGES)
        if checker_semantics not in SEMANTICS:
            raise UnknownNameError("checker_semantics", checker_semantics, SEMANTICS)
        self.checker_semantics = checker_semantics
        # an LLM user or judge makes episodes nondeterministic: record them under the LLM id
        self.env_name = env_name or ("ifgym/EvolIF-LLM-v0" if "llm" in (renderer, judge) else self.env_name)
        if reward_weights:
            for group in reward_weights:
                if group not in GROUPS:
                    raise UnknownNameError("reward_weights group", group, GROUPS)
        if script is not None:
            ignored = [
                name
                for name, given in (
                    ("renderer", renderer != "template"),
                    ("tracker", tracker),
                    ("user_llm", user_llm is not None),
                )
                if given
            ]
            if ignored:
                raise ConfigError(f"script= replays a fixed dialogue; {', '.join(ignored)} would be ignored: drop it")
            user = ReplayUser(script)
        else:
            fields = dict(tracker or {})
            fields.setdefault("groups", tuple(RULE_GROUPS) + (tuple(JUDGED_GROUPS) if judge == "llm" else ()))
            unjudged = sorted(set(fields["groups"] or ()) & set(JUDGED_GROUPS)) if judge == "rules" else []
            if unjudged:
                raise ConfigError(
                    f"tracker groups {unjudged} need an LLM judge: pass judge='llm' (and judge_llm) or drop them"
                )
            user = EvolIFUser(
                renderer=renderer,
                tracker_config=TrackerConfig.from_mapping(fields),
                client=resolve_client(user_llm, "user") if renderer == "llm" else None,
                k=regenerations,
            )
        judge_model = LLMJudge(resolve_client(judge_llm, "judge")) if judge == "llm" else None
        scorer = Scorer(judge_model, semantics=checker_semantics)
        super().__init__(
            user=user,
            scorer=scorer,
            patience=patience,
            max_turns=max_turns,
            reward=reward,
            reward_weights=reward_weights,
            system_prompt=system_prompt,
            max_reply_chars=max_reply_chars,
            render_mode=render_mode,
        )

    def _start(self, seed: int | None) -> None:
        super()._start(seed)
        self._episode.meta["checker_semantics"] = self.checker_semantics  # which rules produced the verdicts
