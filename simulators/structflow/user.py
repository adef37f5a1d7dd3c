"""The StructFlow user: plays dialogues turn by turn (a fixed list, or one generated per episode)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ifgym.core import UserTurn, Verdict
from ifgym.errors import ConfigError, GenerationError, IfgymError
from ifgym.llm.conversation import Steps, steps_of, twin
from ifgym.simulators.base import UserSimulator, pick_dialogue
from ifgym.simulators.structflow.format import Dialogue
from ifgym.simulators.structflow.llm_generator import LLMDialogueGenerator
from ifgym.simulators.structflow.template_generator import TemplateDialogueGenerator

# ---------------------------------------------------------------------------------------------
# The user simulator
# ---------------------------------------------------------------------------------------------


class StructFlowUser(UserSimulator):
    """Plays a StructFlow dialogue turn by turn: one of `dialogues`, or one made by `generator` per episode.

    Replay: `reset(rng, {"dialogue": index or id})` picks a dialogue (without it, `rng` picks).
    Generation: options `template`, `topic_id`, `task`, `user_type` pin the parameters. With an
    `LLMDialogueGenerator`, a GenerationError falls back to `fallback` (an offline generator) for
    the same rng draw, and `stats["fallbacks"]` counts it. The script never depends on replies.
    """

    def __init__(
        self,
        dialogues: Sequence[Dialogue] | None = None,
        generator: TemplateDialogueGenerator | LLMDialogueGenerator | None = None,
        fallback: TemplateDialogueGenerator | None = None,
    ):
        if (dialogues is None) == (generator is None):
            raise ConfigError("StructFlowUser needs exactly one of dialogues (replay) or generator")
        self.dialogues = tuple(dialogues) if dialogues is not None else ()
        if dialogues is not None and not self.dialogues:
            raise ConfigError("StructFlowUser needs at least one dialogue to replay")
        self._by_id = {d.id: i for i, d in enumerate(self.dialogues)}
        self.generator = generator
        self.fallback = fallback
        self.dialogue: Dialogue | None = None
        self._next = 0
        self._stats: dict[str, int] = {}

    # -- choosing the dialogue ----------------------------------------------------------------
    def _pick(self, rng: np.random.Generator, options: Mapping | None) -> Dialogue:
        return pick_dialogue(
            self.dialogues, self._by_id, rng, options, option_kind="StructFlow replay option", id_kind="dialogue id"
        )

    def _generate(self, rng: np.random.Generator, options: Mapping | None) -> Steps[Dialogue]:
        if isinstance(self.generator, LLMDialogueGenerator):
            state = rng.bit_generator.state
            try:
                return (yield from steps_of(self.generator, "generate", rng, options))
            except GenerationError as exc:
                return self._fall_back(rng, state, options, exc)
        return self.generator.generate(rng, options)

    def _fall_back(self, rng: np.random.Generator, state: Any, options: Mapping | None, exc: Exception) -> Dialogue:
        if self.fallback is None:
            raise exc
        rng.bit_generator.state = state  # the same draw: same template, topic, task and user type
        self._stats["fallbacks"] = self._stats.get("fallbacks", 0) + 1
        dialogue = self.fallback.generate(rng, options)
        return Dialogue(**{**dialogue.__dict__, "meta": {**dialogue.meta, "fallback_reason": str(exc)}})

    # -- the protocol ---------------------------------------------------------------------------
    def _begin(self, dialogue: Dialogue, before: Mapping[str, int]) -> UserTurn:
        self.dialogue = dialogue
        self._next = 1
        stats = {"turns": len(dialogue.turns), "played": 1}
        if self.generator is not None:
            stats["generated"] = 1
            stats["fallbacks"] = self._stats.get("fallbacks", 0)
            if isinstance(self.generator, LLMDialogueGenerator):
                stats["generation_calls"] = self.generator.stats["calls"] - before["calls"]
                stats["unstated_prompts"] = self.generator.stats["unstated"] - before["unstated"]
        self._stats = stats
        return UserTurn(dialogue.turns[0].prompt, dialogue.spec(0))

    def _calls(self) -> dict[str, int]:
        if isinstance(self.generator, LLMDialogueGenerator):
            return {"calls": self.generator.stats["calls"], "unstated": self.generator.stats["unstated"]}
        return {"calls": 0, "unstated": 0}

    @twin
    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Pick (replay) or generate the episode's dialogue and return its first turn (`areset` awaits the model)."""
        before = self._calls()
        self._stats = {}
        dialogue = self._pick(rng, options) if self.generator is None else (yield from self._generate(rng, options))
        return self._begin(dialogue, before)

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The dialogue's next turn, or None after its last."""
        if self.dialogue is None:
            raise IfgymError("StructFlowUser.next() called before reset()")
        if self._next >= len(self.dialogue.turns):
            return None
        k = self._next
        self._next += 1
        self._stats["played"] = self._next
        return UserTurn(self.dialogue.turns[k].prompt, self.dialogue.spec(k))

    def episode_meta(self) -> dict[str, Any]:
        """The dialogue played: id, task, user type, topic, structure (None: the file states none), source."""
        d = self.dialogue
        if d is None:
            return {}
        return {
            "id": d.id,
            "task": d.task_name,
            "user_type": d.user_type,
            "topic": d.topic,
            "structure": d.flow.to_json() if d.flow else None,  # None: the file states no structure (GraphIF)
            "source": d.source,
            **({"template": d.meta["template"]} if "template" in d.meta else {}),
        }

    @property
    def stats(self) -> dict[str, int | float]:
        """Per-episode counters: turns and played.

        Generated dialogues add generated and fallbacks; the LLM generator adds generation_calls and
        unstated_prompts (answers of its prompts stage rejected by `unstated`).
        """
        return dict(self._stats)
