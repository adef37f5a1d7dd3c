"""The LLM StructFlow generator: plan, prompts and checklist stages through a model, each answer checked."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ifgym.core import ChecklistItem, unstated
from ifgym.core.structflow import (
    FLOW_RELATIONS,
    INTRA_TYPES,
    TYPE_WEIGHTS,
    Flow,
    constraint_item,
    turn_name,
)
from ifgym.errors import ConfigError, GenerationError, did_you_mean
from ifgym.llm import Conversation
from ifgym.llm.conversation import asking, chat_call, twin
from ifgym.model_answers import json_object
from ifgym.simulators.assets_io import Topic
from ifgym.simulators.base import text_of
from ifgym.simulators.structflow.format import INTRA_DEFINITIONS, USER_VOICES, Dialogue, DialogueTurn, Message, TaskType
from ifgym.simulators.structflow.planner import GeneratorBase, TurnPlan

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The LLM generation pipeline
# ---------------------------------------------------------------------------------------------


class _Invalid(Exception):
    """A stage's answer is unusable; the message says why (sent back to the model)."""


def _relations_text() -> str:
    return "\n".join(f"- {r.name}: {r.definition}" for r in FLOW_RELATIONS.values())


def _flow_text(flow: Flow) -> str:
    lines = []
    for k in range(flow.n_turns):
        relation = flow.relation_of(k)
        if relation is None:
            lines.append(f"{turn_name(k)}: opens the conversation")
        elif relation == "unrelatedness":
            lines.append(f"{turn_name(k)}: unrelated to the earlier turns")
        else:
            sources = ", ".join(turn_name(s) for s in flow.sources_of(k))
            lines.append(f"{turn_name(k)}: {relation} of {sources}")
    return "\n".join(lines)


def _named_list(data: Any, key: str, n: int, fields: Sequence[str]) -> list[dict[str, str]]:
    """Validate `data[key]` as n objects named c1..cn in order, each with non-empty string `fields`."""
    if not isinstance(data, Mapping) or not isinstance(data.get(key), list):
        raise _Invalid(f'the answer must be a JSON object with a list under "{key}"')
    entries = data[key]
    if len(entries) != n:
        raise _Invalid(f'"{key}" must have exactly {n} entries (c1 to c{n}), it has {len(entries)}')
    out = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise _Invalid(f'entry {k + 1} of "{key}" is not an object')
        name = entry.get("name", turn_name(k))
        if name != turn_name(k):
            raise _Invalid(f'entry {k + 1} of "{key}" is named {name!r}; the entries must be c1 to c{n} in order')
        values = {}
        for f in fields:
            value = entry.get(f)
            if not isinstance(value, str) or not value.strip():
                raise _Invalid(f'entry {turn_name(k)} needs a non-empty string "{f}"')
            values[f] = value.strip()
        out.append(values)
    return out


def _intra_type(value: Any) -> str:
    if isinstance(value, str):
        text = value.strip()
        for t in INTRA_TYPES:
            if text.lower() in (t.lower(), t.lower().removesuffix(" constraint")):
                return t
    hint = did_you_mean(value, INTRA_TYPES) if isinstance(value, str) else ""
    raise _Invalid(f"{value!r} is not one of the allowed types.{hint} Allowed: {', '.join(INTRA_TYPES)}")


class LLMDialogueGenerator(GeneratorBase):
    """StructFlow dialogues written by a model: plan -> user prompts -> checklist per turn -> structural items.

    `client` is any ifgym chat client (`chat`/`achat` returning `.text`). Each stage's answer that
    cannot be used is re-asked up to `max_retries` times with the reason; then GenerationError.
    The other arguments are those of TemplateDialogueGenerator. `.stats` counts calls, re-asks and
    "unstated": answers of the prompts stage rejected because a user prompt left out one of its
    sampled rule requirements (see `unstated`).
    """

    def __init__(self, client: Any, *, max_retries: int = 2, **kwargs: Any):
        super().__init__(**kwargs)
        if not (hasattr(client, "chat") and hasattr(client, "achat")):
            raise ConfigError(f"LLMDialogueGenerator needs a chat client (with chat and achat), got {client!r}")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ConfigError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.client = client
        self.model = getattr(client, "model", None) or type(client).__name__  # named in the progress lines
        self.max_retries = max_retries
        self.stats = {"calls": 0, "retries": 0, "unstated": 0}
        self._lock = threading.Lock()

    @twin
    def generate(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Dialogue:
        """Generate one dialogue (`generate` makes the calls blocking, `agenerate` awaits them)."""
        return (yield from asking(self.session(rng, options), chat_call(self.client), read=text_of))

    def session(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Conversation[Dialogue]:
        """The pipeline as a generator: yields the messages of each call, receives the model's text."""
        flow, topic, task, user = self.parameters(rng, options)
        plans = self.planner.plan(flow, topic, rng)
        return self._pipeline(flow, topic, task, user, plans, int(rng.integers(10**6)))

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _ask(self, messages: list[Message], validate: Callable[[Any], Any], stage: str) -> Conversation[Any]:
        attempts = 0
        while True:
            # progress of a reset that can take minutes on a CPU model (the CLI shows these INFO lines)
            logger.info("generating a StructFlow dialogue with %s: %s, call %d", self.model, stage, attempts + 1)
            text = yield messages
            attempts += 1
            self._count("calls")
            data = json_object(text)
            try:
                if data is None:
                    raise _Invalid("no JSON object was found in the answer")
                return validate(data)
            except _Invalid as exc:
                problem = str(exc)
            if attempts > self.max_retries:
                raise GenerationError(f"stage {stage!r}: {problem} (after {attempts} call(s))")
            self._count("retries")
            messages = [
                *messages,
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": f"That answer could not be used: {problem}. Reply again with only the JSON object "
                    "in the form asked for.",
                },
            ]

    def _pipeline(
        self, flow: Flow, topic: Topic, task: TaskType, user: str, plans: list[TurnPlan], draw: int
    ) -> Conversation[Dialogue]:
        n = flow.n_turns
        system = (
            "You design realistic multi-turn conversations between a user and an AI assistant. Answer with JSON only."
        )
        plan_prompt = (
            f"Relations between turns:\n{_relations_text()}\n\n"
            f"The conversation has {n} user turns with this structure:\n{_flow_text(flow)}\n\n"
            f"Topic: {topic.title} (domain: {topic.domain}).\n"
            f"Task type: {task.name}: {task.definition}\n"
            + "".join(
                f"Turn {turn_name(k)} is about: {p.topic.title}{f' (focus: {p.focus})' if p.focus else ''}.\n"
                for k, p in enumerate(plans)
            )
            + "\nWrite the user's purpose and a one-sentence summary of each user turn that makes its relation clear. "
            'Return {"purpose": "...", "plan": [{"name": "c1", "description": "..."}, ...]} with exactly '
            f"{n} entries, c1 to c{n}."
        )

        def check_plan(data: Any) -> tuple[str, list[str]]:
            purpose = data.get("purpose") if isinstance(data, Mapping) else None
            if not isinstance(purpose, str) or not purpose.strip():
                raise _Invalid('"purpose" must be a non-empty string')
            return purpose.strip(), [e["description"] for e in _named_list(data, "plan", n, ["description"])]

        purpose, plan = yield from self._ask(
            [{"role": "system", "content": system}, {"role": "user", "content": plan_prompt}], check_plan, "plan"
        )
        required = []
        for k, p in enumerate(plans):
            asks = "; ".join(c.describe().rstrip(".") for c in p.constraints) or "nothing fixed"
            required.append(f"{turn_name(k)}: {plan[k]}\n    requirements it must state: {asks}.")
        prompt_prompt = (
            f"The plan of a {n}-turn conversation ({task.name}; purpose: {purpose}):\n" + "\n".join(required) + "\n\n"
            f"The user {USER_VOICES[user]}. Write each user message as this user would, stating every listed "
            "requirement in the user's own words (other natural requirements may be added), and a good assistant "
            'answer to it. Return {"turns": [{"name": "c1", "user prompt": "...", "assistant answer": "..."}, ...]} '
            f"with exactly {n} entries, c1 to c{n}."
        )

        def check_turns(data: Any) -> list[dict[str, str]]:
            turns = _named_list(data, "turns", n, ["user prompt", "assistant answer"])
            gaps = []
            for k, turn in enumerate(turns):
                for c in plans[k].constraints:
                    missing = ", ".join(unstated(c, turn["user prompt"]))
                    if missing:
                        gaps.append(f'{turn_name(k)} does not state "{c.describe().rstrip(".")}" (missing: {missing})')
            if gaps:
                self._count("unstated")  # rule items stay on the checklist, so the user must have asked for them
                raise _Invalid("every user prompt must state each requirement listed for it: " + "; ".join(gaps))
            return turns

        turns = yield from self._ask(
            [{"role": "system", "content": system}, {"role": "user", "content": prompt_prompt}],
            check_turns,
            "prompts",
        )
        did = f"llm/{flow.id or 'flow'}/{topic.id}/{task.name}/{user}/{draw:06d}"
        out_turns = []
        for k, turn in enumerate(turns):
            rule_items = tuple(
                constraint_item(c, f"{did}/{turn_name(k)}/{j + 1}") for j, c in enumerate(plans[k].constraints)
            )
            history = "\n".join(f"{turn_name(i)}: {turns[i]['user prompt']}" for i in range(k)) or "(none)"
            covered = "\n".join(f"- {i.question}" for i in rule_items) or "- (none)"
            extract_prompt = (
                "Kinds of requirements a user message can make:\n"
                + "\n".join(f"- {t}: {INTRA_DEFINITIONS[t]}" for t in INTRA_TYPES)
                + f"\n\nEarlier user messages:\n{history}\n\nThe user message to analyse:\n<message>\n"
                f"{turn['user prompt']}\n</message>\n\nAlready on the checklist (do not repeat them):\n{covered}\n\n"
                "List every other requirement the message makes of the reply, one per kind at most, each as a yes/no "
                'question about the reply. Return {"constraints": [{"type": "<kind>", "content": "<question>"}]} '
                '("constraints": [] when there is nothing more).'
            )

            def check_items(data: Any, k: int = k, rule_items: tuple = rule_items) -> list[ChecklistItem]:
                raw = data.get("constraints") if isinstance(data, Mapping) else None
                if not isinstance(raw, list):
                    raise _Invalid('the answer must be a JSON object with a list under "constraints"')
                items = []
                for j, entry in enumerate(raw):
                    if not isinstance(entry, Mapping):
                        raise _Invalid(f"constraint {j + 1} is not an object")
                    kind = _intra_type(entry.get("type"))
                    if any(i.type == kind for i in items):
                        raise _Invalid(f"two constraints of the kind {kind!r}; merge them into one question")
                    question = entry.get("content")
                    if not isinstance(question, str) or not question.strip():
                        raise _Invalid(f'constraint {j + 1} needs a non-empty "content" question')
                    items.append(
                        ChecklistItem(
                            id=f"{did}/{turn_name(k)}/{len(rule_items) + j + 1}",
                            question=question.strip(),
                            type=kind,
                            weight=TYPE_WEIGHTS[kind],
                        )
                    )
                if not items and not rule_items:
                    raise _Invalid("the message makes at least one requirement; list it")
                return items

            extracted = yield from self._ask(
                [{"role": "system", "content": system}, {"role": "user", "content": extract_prompt}],
                check_items,
                f"checklist {turn_name(k)}",
            )
            checklist = rule_items + tuple(extracted) + flow.structural_items(k, id_prefix=f"{did}/")
            out_turns.append(DialogueTurn(turn["user prompt"], turn["assistant answer"], checklist, plan[k]))
        return Dialogue(
            id=did,
            flow=flow,
            turns=tuple(out_turns),
            task=f"{task.name}: {task.definition}",
            topic=topic.domain,
            user_type=user,
            purpose=purpose,
            source="llm-generator",
            meta={"template": flow.id, "topic_id": topic.id, "topic_title": topic.title, "generator": "llm"},
        )
