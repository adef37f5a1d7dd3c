"""Renderers turn a turn's spec (topic, move, change, live constraints) into the user's words.

What the user states (`restate`): `"change"` (default, as EvolIF's released query synthesis does)
says only what is new on this turn: a new topic's request and its first constraints; on the same
topic only the change (add: the new rule; modify: from the old value to the new one; remove: which
rule is dropped); on a return to an earlier topic a clear cue to it plus the change, never the
restored constraints, which the model has to remember. `"all"` also restates every live constraint
on every turn (the reply can then be judged on that turn alone): an easier, reading-test variant.

`TemplateRenderer` is deterministic given the rng and costs microseconds: several phrasings per
move, per change and per constraint id.

`LLMRenderer` asks a user model to write the message in the episode's user style, then checks the
draft. `checks="rules"` (default, EvolIF's): the key values of every constraint the turn states
(keyword, number, emoji, letter, mode, format) must appear in the text, a rule check with no model
call (`ifgym.core.unstated`); when the topic changes the user model also answers whether the message points
to the topic with a concrete clue. `checks="model"` (ifgym/EvolIF-v0's): the user model answers
whether every draft is on topic and asks for each stated constraint. A failed or unparseable check
triggers a regeneration, up to `k` of them; after that the template text is used and the fallback
is counted. The renderer words what the request holds: the user simulator leaves the dialogue out
of the request unless it is adaptive. `render` is written once (`twin`): a Conversation yields the
messages of each call, and `render` makes the calls blocking, `arender` awaits them.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ifgym.core.constraints import Constraint, unstated
from ifgym.core.sampling import choice, tokens
from ifgym.core.wording import a, and_list
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import ChatClient, Conversation
from ifgym.llm.conversation import Call, asking, awaits_blocking, chat_call, steps_of, twin
from ifgym.model_answers import extract_json, item_number, leading_yes_no, place, yes_no
from ifgym.simulators.assets_io import Style, Topic
from ifgym.simulators.base import text_of

__all__ = [
    "CHECKS",
    "RESTATE",
    "LLMRenderer",
    "RenderRequest",
    "RenderResult",
    "Renderer",
    "TemplateRenderer",
]

Message = dict[str, str]

RESTATE = ("change", "all")
CHECKS = ("rules", "model")


@dataclass(frozen=True)
class RenderResult:
    """The user's message, whether it is the template fallback, and how many generations it took."""

    text: str
    fallback: bool = False
    attempts: int = 1


@dataclass(frozen=True)
class RenderRequest:
    """Everything a renderer may use to word one user turn.

    `old`/`new` are the constraints the change touched (add: new only; remove: old only;
    modify: both). `history` (the dialogue so far) and `missed` (descriptions of constraints the
    previous reply failed) are filled only for an adaptive user, one that reacts to the replies.
    """

    topic: Topic
    move: str
    change: str | None
    constraints: tuple[Constraint, ...]
    old: Constraint | None = None
    new: Constraint | None = None
    turn: int = 1
    style: Style | None = None
    history: Sequence[Message] = ()
    missed: tuple[str, ...] = ()
    forbidden_tokens: frozenset[str] = field(default_factory=frozenset)
    structure: str = ""  # what the turn does to earlier turns, in words (the composite user's StructFlow relation)


class Renderer(ABC):
    """Turns a RenderRequest into text. `stats` counts since the last `reset_stats`.

    A renderer that calls a model writes `render` with `twin` (it gets `arender` too); a plain one
    gets `arender` from this base, calling `render`.
    """

    @abstractmethod
    def render(self, request: RenderRequest, rng: np.random.Generator) -> RenderResult:
        """Word one user turn."""

    arender = awaits_blocking("render")

    @property
    @abstractmethod
    def stats(self) -> dict[str, int]:
        """Counters for logging."""

    @abstractmethod
    def reset_stats(self) -> None:
        """Zero the counters (the simulator calls this at the start of each episode)."""


def _sentence(clause: str) -> str:
    clause = clause.strip()
    return clause[:1].upper() + clause[1:] + ("" if clause.endswith((".", "?", "!")) else ".")


def _title(topic: Topic) -> str:
    return topic.title.strip().rstrip(".?!")


# ---------------------------------------------------------------------------------------------
# Template renderer
# ---------------------------------------------------------------------------------------------

_OPEN_FIRST = (
    "Hi! Could you help me with this: {title}.",
    "Hello, here is my request: {title}.",
    "“{title}” — can you write something on that for me?",
    "I'd like a piece of writing on this topic: {title}.",
    "Please help me out with the following: {title}.",
)
_OPEN_NEW = (
    "Let's switch to something new: {title}.",
    "Different topic now: “{title}”. Please write about it.",
    "Moving on to another subject: {title}. Can you write something on it?",
    "New request, unrelated to the previous one: {title}.",
    "Let's leave that and start a fresh topic: {title}.",
)
_OPEN_CONTINUE = (
    "Staying with the same topic, please write a follow-up that covers a different aspect.",
    "Thanks. Can you continue on this and go deeper into {focus}?",
    "Following up on that: write another piece on the same subject, this time focusing on {focus}.",
    "Keep going with this topic, but take a new angle on it.",
    "Let's stay on this a bit longer. What else should I know about {focus}?",
)
_OPEN_RETURN = (
    "Let's go back to an earlier topic: {title}. I have another request about it.",
    "Going back to “{title}” — please write something more on it.",
    "Returning to what we discussed before (“{title}”), please give me another take on it.",
    "Back to the earlier subject: {title}. Write a new piece on it, with a different focus.",
)
_NOTE_ADD = (
    "One more requirement from now on: {new}.",
    "I'd also like you to {new}.",
    "New rule to add: {new}.",
)
_NOTE_REMOVE = (
    "You no longer need to {old}.",
    "Drop the earlier requirement to {old}.",
    "Forget about the rule to {old}; it no longer applies.",
)
_NOTE_MODIFY = (
    "Change of plan: instead of the rule to {old}, please {new}.",
    "One update — rather than {old}, {new}.",
    "Please {new}, instead of the earlier request to {old}.",
)
_LIST_HEADS = (
    "Requirements for your reply:",
    "Please follow all of these:",
    "To be clear, the full set of rules is now:",
    "Everything that applies to this answer:",
)
_INLINE_HEADS = ("Please {clauses}.", "For this answer, {clauses}.", "Make sure you {clauses}.")


# Change-only wording (restate="change"): no restatement, no topic words on a continue turn.
_LEAD_CONTINUE = ("", "Thanks.", "Okay, thanks.", "Good, thank you.", "Alright.")
_AGAIN = (
    "Please write it once more.",
    "Can you give me another version of it?",
    "Let's have another go at that one.",
)
_NEW_TOPIC_LIST_HEADS = ("Requirements for your reply:", "Please follow these rules:")


def _check_choice(name: str, value: str, allowed: Sequence[str], owner: str) -> str:
    if value not in allowed:
        raise UnknownNameError(f"{owner} {name}", value, allowed)
    return value


class TemplateRenderer(Renderer):
    """Deterministic wording from phrase tables; the rng picks among phrasings.

    `restate="change"` (default) states only what is new on the turn; `"all"` adds every live
    constraint to every turn (ifgym/EvolIF-v0's wording, kept word for word). Ignores the user
    style and the dialogue (the LLM renderer uses the style): the template is the cheap,
    reproducible baseline and the LLM renderer's fallback.
    """

    def __init__(self, restate: str = "change") -> None:
        self.restate = _check_choice("restate", restate, RESTATE, "TemplateRenderer")
        self._renders = 0

    def render(self, request: RenderRequest, rng: np.random.Generator) -> RenderResult:
        """The turn's words: see the module docstring for what each `restate` states."""
        self._renders += 1
        parts = self._change_parts(request, rng) if self.restate == "change" else self._all_parts(request, rng)
        return RenderResult("\n\n".join(parts) if "\n" in parts[-1] else " ".join(parts), False, 1)

    def _all_parts(self, request: RenderRequest, rng: np.random.Generator) -> list[str]:
        """Opening for the move, a note for the change, then every live constraint."""
        parts = [self._opening(request, rng)]
        note = self.change_note(request, rng)
        if note:
            parts.append(note)
        clauses = [choice(rng, c.phrasings()) for c in request.constraints]
        if clauses:
            parts.append(self._requirements(clauses, rng, request.change is not None))
        return parts

    def _change_parts(self, request: RenderRequest, rng: np.random.Generator) -> list[str]:
        """A new topic: its request and constraints; a return: a cue and the change; else the change only."""
        if request.move == "new_topic":
            parts = [self._opening(request, rng)]
            clauses = [choice(rng, c.phrasings()) for c in request.constraints]
            if len(clauses) > 2:
                lines = [f"- {_sentence(c)}" for c in clauses]
                parts.append(choice(rng, _NEW_TOPIC_LIST_HEADS) + "\n" + "\n".join(lines))
            elif clauses:
                parts.append(choice(rng, _INLINE_HEADS).format(clauses=and_list(clauses)))
            return parts
        note = self.change_note(request, rng)
        if request.move == "return":
            return [self._opening(request, rng)] + ([note] if note else [])
        lead = choice(rng, _LEAD_CONTINUE)
        return [p for p in (lead, note or choice(rng, _AGAIN)) if p]

    @staticmethod
    def _opening(request: RenderRequest, rng: np.random.Generator) -> str:
        title = _title(request.topic)
        if request.move == "new_topic":
            table = _OPEN_FIRST if request.turn <= 1 else _OPEN_NEW
        elif request.move == "return":
            table = _OPEN_RETURN
        else:
            table = _OPEN_CONTINUE
        # the focus word must not be one the user has forbidden
        focus = [k for k in request.topic.keywords if tokens(k).isdisjoint(request.forbidden_tokens)]
        template = choice(rng, table)
        word = choice(rng, focus) if focus else "the details"
        return template.format(title=title, focus=word)

    @staticmethod
    def change_note(request: RenderRequest, rng: np.random.Generator) -> str | None:
        """The sentence stating the turn's change (add: the new rule; remove: the old; modify: old to new), or None."""
        if request.change == "add" and request.new is not None:
            return choice(rng, _NOTE_ADD).format(new=choice(rng, request.new.phrasings()))
        if request.change == "remove" and request.old is not None:
            return choice(rng, _NOTE_REMOVE).format(old=choice(rng, request.old.phrasings()))
        if request.change == "modify" and request.old is not None and request.new is not None:
            old, new = choice(rng, request.old.phrasings()), choice(rng, request.new.phrasings())
            return _sentence(choice(rng, _NOTE_MODIFY).format(old=old, new=new))
        return None

    @staticmethod
    def _requirements(clauses: list[str], rng: np.random.Generator, after_change: bool) -> str:
        # one or two rules read best inline; longer sets as a list the reader can tick off
        if len(clauses) <= 2 and rng.random() < 0.5:
            head = choice(rng, _INLINE_HEADS).format(clauses=and_list(clauses))
            return ("All together: " + head[:1].lower() + head[1:]) if after_change else head
        head = choice(rng, _LIST_HEADS)
        if rng.random() < 0.5:
            lines = [f"- {_sentence(c)}" for c in clauses]
        else:
            lines = [f"{i}. {_sentence(c)}" for i, c in enumerate(clauses, 1)]
        return head + "\n" + "\n".join(lines)

    @property
    def stats(self) -> dict[str, int]:
        """{"renders": n}."""
        return {"renders": self._renders}

    def reset_stats(self) -> None:
        """Zero the counters."""
        self._renders = 0


# ---------------------------------------------------------------------------------------------
# LLM renderer
# ---------------------------------------------------------------------------------------------

GENERATE_SYSTEM = (
    "You play the user in a conversation with an AI assistant. {persona}{voice}{traits}"
    "Stay in character. Output only the text of your next message to the assistant: "
    "no preamble, no quotation marks around it, no labels such as 'User:'."
)
TOPIC_SYSTEM = "You review messages that a user wrote to an AI assistant. Answer with exactly one word: yes or no."
CHECKLIST_SYSTEM = "You review whether a user's message states given requirements. Answer only with a JSON object."
_HISTORY_MESSAGES = 4  # recent messages shown to the user model; keeps prompts flat in turn count
_HISTORY_CHARS = 600


def _persona(persona: str) -> str:
    persona = persona.strip().rstrip(".")
    if persona.lower().startswith(("a ", "an ", "the ")):
        return persona[:1].lower() + persona[1:]
    return a(persona)


def _move_instruction(request: RenderRequest) -> str:
    title = _title(request.topic)
    if request.move == "new_topic":
        if request.turn <= 1:
            return f"Open the conversation by asking the assistant to write about this topic: {title}."
        return f"Switch to a new topic, unrelated to the previous one, and ask for writing about it: {title}."
    if request.move == "return":
        return f"Go back to an earlier topic of the conversation ({title}) and ask for something more about it."
    return f"Stay on the current topic ({title}) and ask for a follow-up or another aspect of it."


def _change_only_move(request: RenderRequest) -> str:
    title = _title(request.topic)
    if request.move == "new_topic":
        return _move_instruction(request)
    if request.move == "return":
        return (
            "Begin with a phrase that goes back to an earlier topic of the conversation and points to it "
            f"clearly (e.g. 'Going back to …'): {title}. Do not repeat what you asked about it before."
        )
    return "Stay on the current topic without restating it: say only what changes."


def _stated(request: RenderRequest, restate: str) -> tuple[tuple[Constraint, Constraint | None], ...]:
    """The constraints the turn must state, each with the one it replaces: all live ones, or only the new."""
    if restate == "all" or request.move == "new_topic":
        return tuple((c, None) for c in request.constraints)
    if request.change in ("add", "modify") and request.new is not None:
        return ((request.new, request.old if request.change == "modify" else None),)
    return ()  # a removal names what it drops; EvolIF asks nothing more of it


def _change_instruction(request: RenderRequest) -> str | None:
    if request.change == "add" and request.new is not None:
        return f"Introduce this new requirement: {request.new.describe()}"
    if request.change == "remove" and request.old is not None:
        return f"Tell the assistant that this earlier requirement no longer applies: {request.old.describe()}"
    if request.change == "modify" and request.old is not None and request.new is not None:
        return (
            f"Tell the assistant that the requirement '{request.old.describe()}' is replaced by: "
            f"{request.new.describe()}"
        )
    return None


def parse_checklist(text: str, n: int) -> list[bool] | None:
    """Answers 1..n from the checker's JSON ({"1": "yes", …} or a list); None if anything is missing or not yes/no."""
    data = extract_json(text, lambda d: isinstance(d, list) or (isinstance(d, dict) and bool(d)))
    if isinstance(data, dict):
        if not all(item_number(k) is not None for k in data):
            return None
        entries = [(item_number(k), yes_no(v)) for k, v in data.items()]
    elif isinstance(data, list):
        entries = [(None, yes_no(v)) for v in data]
    else:
        return None
    placed = place(entries, n)
    if placed.missing or placed.unplaced:  # numbers beyond n are ignored
        return None
    return [placed.items[i] == "yes" for i in range(1, n + 1)]


def _clean_generation(text: str) -> str:
    text = text.strip()
    text = re.sub(r"^(user|me)\s*:\s*", "", text, flags=re.IGNORECASE)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


# The render dialogue yields the messages of the next call; the driver sends back its text.
_Dialogue = Conversation[RenderResult]


class LLMRenderer(Renderer):
    """A user model writes the message in the user's style; checks decide whether to keep it.

    `restate` and `checks`: see the module docstring. Up to `regenerations` redrafts (so at most
    regenerations + 1 drafts) before falling back to `fallback` (a TemplateRenderer with the same `restate` by
    default). The fallback text is computed first on every turn, so the rng stream does not depend
    on what the model says. Regenerations carry the reason the previous draft was rejected, so a
    deterministic model does not repeat itself. The prompt shows the dialogue only when the request
    carries it (an adaptive user).
    """

    def __init__(
        self,
        client: ChatClient,
        regenerations: int = 3,
        fallback: Renderer | None = None,
        *,
        restate: str = "change",
        checks: str = "rules",
        **gen_overrides: Any,
    ):
        if not isinstance(regenerations, int) or isinstance(regenerations, bool) or regenerations < 0:
            raise ConfigError(f"LLMRenderer regenerations must be an int >= 0, got {regenerations!r}")
        self.client = client
        self.regenerations = regenerations
        self.restate = _check_choice("restate", restate, RESTATE, "LLMRenderer")
        self.checks = _check_choice("checks", checks, CHECKS, "LLMRenderer")
        self.fallback = fallback if fallback is not None else TemplateRenderer(restate)
        self.gen_overrides = gen_overrides
        self.reset_stats()

    def reset_stats(self) -> None:
        """Zero the counters."""
        self._stats = {
            "renders": 0,
            "llm_calls": 0,
            "drafts": 0,  # checked tries: every draft the user model wrote (at most regenerations + 1 per render)
            "regenerations": 0,
            "llm_fallbacks": 0,
            "topic_check_failures": 0,
            "constraint_check_failures": 0,
            "unparseable_checks": 0,
            "empty_generations": 0,
        }

    @property
    def stats(self) -> dict[str, int]:
        """Renders, model calls, drafts (checked tries), regenerations, fallbacks and why drafts were rejected."""
        return dict(self._stats)

    # -- prompts ------------------------------------------------------------------------------
    def generation_messages(self, request: RenderRequest, feedback: str | None = None) -> list[Message]:
        """The prompt asking the user model for the next user message."""
        style = request.style
        system = GENERATE_SYSTEM.format(
            persona=f"You are {_persona(style.persona)}. " if style else "",
            voice=f"{style.voice.rstrip('.')}. " if style else "",
            traits=f"Your traits: {', '.join(style.traits)}. " if style else "",
        )
        lines: list[str] = []
        recent = request.history[-_HISTORY_MESSAGES:]  # slicing only the tail keeps this O(1) in turns
        if recent:
            lines.append("The conversation so far (most recent last):")
            for m in recent:
                content = m.get("content", "")
                if len(content) > _HISTORY_CHARS:
                    content = content[:_HISTORY_CHARS] + " […]"
                lines.append(f"[{m.get('role', '?')}] {content}")
            lines.append("")
        lines.append("Write your next message. It must:")
        if self.restate == "all":
            lines.append(f"- {_move_instruction(request)}")
            change = _change_instruction(request)
            if change:
                lines.append(f"- {change}")
            if request.constraints:
                lines.append("- State every one of these requirements clearly, so the assistant cannot miss any:")
                lines.extend(f"  {i}. {c.describe()}" for i, c in enumerate(request.constraints, 1))
            else:
                lines.append("- Ask for the writing without adding formatting or length requirements.")
        else:
            lines.append(f"- {_change_only_move(request)}")
            if request.structure:
                lines.append(f"- {request.structure}")
            if request.move == "new_topic":
                lines.extend(f"- State this requirement: {c.describe()}" for c in request.constraints)
            else:
                lines.append(f"- {_change_instruction(request) or 'Ask for another version, with no new requirement.'}")
            lines.append(
                "- Give every value exactly as written (words, numbers, emoji, letters, format names). Do not "
                "repeat or sum up any other requirement: the assistant has to remember the earlier ones."
            )
        if request.missed:
            lines.append(
                "- The assistant's previous reply ignored: "
                + "; ".join(request.missed)
                + ". You may mention that briefly, in character."
            )
        lines.append("- Add no requirements of your own beyond those listed. Keep it under 150 words.")
        if feedback:
            lines.append("")
            lines.append(f"Your previous draft was rejected: {feedback} Write a new draft.")
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]

    @staticmethod
    def topic_messages(request: RenderRequest, text: str) -> list[Message]:
        """checks="model": the yes/no prompt (is the message about the topic, and does it ask for content)."""
        question = (
            f"Topic: {_title(request.topic)}\n\nMessage:\n<<<\n{text}\n>>>\n\n"
            "Is this message about the topic above (or a follow-up on it), and does it ask the assistant "
            "to write or produce something? Answer yes or no."
        )
        return [{"role": "system", "content": TOPIC_SYSTEM}, {"role": "user", "content": question}]

    @staticmethod
    def related_messages(request: RenderRequest, text: str) -> list[Message]:
        """checks="rules", on a topic change: the yes/no prompt (does the message point to the topic concretely)."""
        question = (
            f"Topic: {_title(request.topic)}\n\nMessage:\n<<<\n{text}\n>>>\n\n"
            "Does the message point to this topic with a concrete clue (its subject in other words, or one "
            "of its key terms)? A generic reference such as 'the earlier topic' or 'what we discussed' does "
            "not count. Answer yes or no."
        )
        return [{"role": "system", "content": TOPIC_SYSTEM}, {"role": "user", "content": question}]

    @staticmethod
    def checklist_messages(request: RenderRequest, text: str) -> list[Message]:
        """checks="model": the JSON prompt (does the message clearly ask for each live constraint)."""
        items = "\n".join(f"{i}. {c.describe()}" for i, c in enumerate(request.constraints, 1))
        example = json.dumps({str(i): "yes" for i in range(1, min(len(request.constraints), 2) + 1)})
        question = (
            f"Message:\n<<<\n{text}\n>>>\n\nRequirements:\n{items}\n\n"
            "For each numbered requirement, does the message clearly ask the assistant to follow it? "
            f'Answer with one JSON object mapping every number to "yes" or "no", e.g. {example}.'
        )
        return [{"role": "system", "content": CHECKLIST_SYSTEM}, {"role": "user", "content": question}]

    # -- the shared dialogue ------------------------------------------------------------------
    def _dialogue(self, request: RenderRequest, template_text: str) -> _Dialogue:
        stats = self._stats
        stats["renders"] += 1
        feedback: str | None = None
        check = self._model_checks if self.checks == "model" else self._rule_checks
        for attempt in range(1, self.regenerations + 2):
            stats["drafts"] += 1
            if attempt > 1:
                stats["regenerations"] += 1
            text = _clean_generation((yield self.generation_messages(request, feedback)))
            if not text:
                stats["empty_generations"] += 1
                feedback = "it was empty."
                continue
            feedback = yield from check(request, text)
            if feedback is None:
                return RenderResult(text, False, attempt)
        stats["llm_fallbacks"] += 1
        return RenderResult(template_text, True, self.regenerations + 1)

    def _rule_checks(self, request: RenderRequest, text: str) -> Conversation[str | None]:
        """EvolIF's checks: the stated constraints' key values by rule; the topic by the model on a topic change."""
        stats = self._stats
        missing = [m for new, old in _stated(request, self.restate) for m in unstated(new, text, old)]
        if missing:
            stats["constraint_check_failures"] += 1
            return "it did not state " + "; ".join(missing) + " (give each value exactly)."
        if request.move in ("new_topic", "return") and request.turn > 1:
            related = leading_yes_no((yield self.related_messages(request, text)))
            if related is None:
                stats["unparseable_checks"] += 1
            if not related:
                stats["topic_check_failures"] += 1
                return f"it did not point clearly to the topic ({_title(request.topic)})."
        return None

    def _model_checks(self, request: RenderRequest, text: str) -> Conversation[str | None]:
        """ifgym/EvolIF-v0's checks: on topic and asking for content, then a checklist of the live constraints."""
        stats = self._stats
        on_topic = leading_yes_no((yield self.topic_messages(request, text)))
        if on_topic is None:
            stats["unparseable_checks"] += 1
        if not on_topic:
            stats["topic_check_failures"] += 1
            return "it was not clearly about the topic, or did not ask the assistant to write something."
        if request.constraints:
            answers = parse_checklist((yield self.checklist_messages(request, text)), len(request.constraints))
            if answers is None:
                stats["unparseable_checks"] += 1
                stats["constraint_check_failures"] += 1
                return "the requirements were not stated clearly."
            missing = [c.describe() for c, ok in zip(request.constraints, answers, strict=True) if not ok]
            if missing:
                stats["constraint_check_failures"] += 1
                return "it did not clearly ask for: " + "; ".join(missing)
        return None

    def _ask(self, messages: list[Message]) -> Call:
        """One call to the user model, counted."""
        self._stats["llm_calls"] += 1
        return chat_call(self.client, **self.gen_overrides)(messages)

    @twin
    def render(self, request: RenderRequest, rng: np.random.Generator) -> RenderResult:
        """Generate, check, regenerate up to k times, else fall back."""
        template_text = (yield from steps_of(self.fallback, "render", request, rng)).text
        return (yield from asking(self._dialogue(request, template_text), self._ask, read=text_of))
