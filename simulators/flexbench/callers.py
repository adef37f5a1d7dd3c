"""FlexBench's callers: the scripted caller and the LLM caller."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import TurnSpec, UserTurn, Verdict
from ifgym.errors import ConfigError, IfgymError, UnknownNameError
from ifgym.llm.conversation import asking, chat_call, twin
from ifgym.simulators.base import UserSimulator, text_of
from ifgym.simulators.flexbench.ending import EndDetector, assistant_closed, user_hung_up
from ifgym.simulators.flexbench.personas import (
    CallerSheet,
    Fact,
    Persona,
    PersonaDelta,
    _delta_dialogue,
    _Dialogue,
    caller_sheet_for,
    load_caller_sheet,
    load_personas,
)
from ifgym.simulators.flexbench.sops import CALLER_SUFFIX, LEVELS, Message, Sop, _unquote, load_sop

# ---------------------------------------------------------------------------------------------
# The callers
# ---------------------------------------------------------------------------------------------

_OPTIONS = ("cooperativeness", "facts")
END_REASONS = ("assistant_closed", "user_hung_up", "user_lost_patience")


def _normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


_LOWERABLE = frozenset("the that this it its we we're our my you your yes no not try around there it's".split())


def _lower_first(text: str) -> str:
    """Lower-case the first word when it is a common word (names and "I" keep their capital)."""
    first = text.split(" ", 1)[0].strip(",.!").lower()
    return text[:1].lower() + text[1:] if first in _LOWERABLE else text


def _join(parts: Sequence[str], facts: Mapping[str, str | None]) -> str:
    """The caller's lines as one turn; a line after a lead-in ending in a comma ("Look,") goes on in lower case.

    "I" (and "I'm" …) and words that start a fact value (a name, a platform) keep their capital.
    """
    out: list[str] = []
    proper = {str(v).split()[0] for v in facts.values() if v}
    for part in parts:
        if out and out[-1].endswith(","):
            first = part.split(" ", 1)[0]
            if not re.match(r"^I\b", first) and first.strip(",.!?") not in proper:
                part = part[:1].lower() + part[1:]
        out.append(part)
    return " ".join(out)


class FlexBenchUser(UserSimulator):
    """What both FlexBench callers share: SOP, persona draw, facts, patience and the end of the call.

    `cooperativeness` pins the meta profile ("poor" | "general" | "good"); None draws one per
    episode from the seed. `patience` is "persona" (the profile's own: poor 2, general 4, good
    never), None (off) or an int for every profile. `reset(rng, options)` accepts options
    `cooperativeness` and `facts` (a mapping pinning fact values).
    """

    kind = "base"

    def __init__(
        self,
        sop: str | Path | Sop | Mapping[str, Any],
        sheet: CallerSheet | str | Path | Mapping[str, Any] | None = None,
        *,
        cooperativeness: str | None = None,
        patience: int | str | None = "persona",
        personas: str | Path | Mapping[str, Any] | None = None,
    ):
        self.sop = load_sop(sop)
        if sheet is None:
            self.sheet = caller_sheet_for(self.sop)
        elif isinstance(sheet, CallerSheet):
            self.sheet = sheet
        else:
            self.sheet = load_caller_sheet(sheet)
        self.profiles = load_personas(personas)
        if cooperativeness is not None and cooperativeness not in self.profiles:
            raise UnknownNameError("cooperativeness", cooperativeness, self.profiles)
        if (
            patience != "persona"
            and patience is not None
            and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1)
        ):
            raise ConfigError(f"patience must be 'persona', None (off) or a positive int, got {patience!r}")
        self.cooperativeness = cooperativeness
        self.patience_setting = patience
        self.persona: Persona | None = None
        self.facts: dict[str, str | None] = {}
        self.patience: int | None = None
        self.final_message: str | None = None
        self._end_reason = "script_end"
        self._rng: np.random.Generator | None = None
        self._turn = 0
        self._stats: dict[str, int] = {}
        self._previous_agent = ""  # the agent's last message, to spot repeats

    # -- bookkeeping ----------------------------------------------------------------------------
    @property
    def end_reason(self) -> str:
        """Why the call ended: "assistant_closed", "user_hung_up" or "user_lost_patience"."""
        return self._end_reason

    @property
    def stats(self) -> dict[str, int | float]:
        return dict(self._stats)

    def episode_meta(self) -> dict[str, Any]:
        """The caller's cooperativeness and facts, its last words once the call is over, and its patience left."""
        return {
            "cooperativeness": self.persona.profile.level if self.persona else None,
            "facts": dict(self.facts),
            "final_user_message": self.final_message,
            "patience": self.patience,
        }

    def _count(self, key: str, n: int = 1) -> None:
        self._stats[key] = self._stats.get(key, 0) + n

    def _delta(self) -> PersonaDelta:
        return self.sheet.delta if self.sheet is not None else PersonaDelta()

    def _begin(self, rng: np.random.Generator, options: Mapping | None) -> None:
        options = dict(options or {})
        for key in options:
            if key not in _OPTIONS:
                raise UnknownNameError("FlexBench user reset option", key, _OPTIONS)
        level = options.get("cooperativeness", self.cooperativeness)
        if level is not None and level not in self.profiles:
            raise UnknownNameError("cooperativeness", level, self.profiles)
        # separate streams: facts, persona and phrasing do not shift when one of them draws more
        facts_seed, persona_seed, phrasing_seed = (int(s) for s in rng.integers(0, 2**63 - 1, size=3))
        levels = sorted(self.profiles, key=lambda name: (LEVELS.index(name) if name in LEVELS else len(LEVELS), name))
        if level is None:
            level = levels[int(np.random.default_rng(persona_seed).integers(len(levels)))]
        profile = self.profiles[level]
        pinned = options.get("facts")
        if pinned is not None and not isinstance(pinned, Mapping):
            raise ConfigError(f"reset option 'facts' must be a mapping fact -> value, got {pinned!r}")
        if pinned and self.sheet is None:
            raise ConfigError(f"SOP {self.sop.name!r} has no caller file, so there are no facts to pin")
        self.facts = self.sheet.sample_facts(np.random.default_rng(facts_seed), pinned) if self.sheet else {}
        self.persona = Persona(profile, self._delta())
        self.patience = profile.patience if self.patience_setting == "persona" else self.patience_setting
        self._rng = np.random.default_rng(phrasing_seed)
        self._turn = 0
        self._end_reason = "script_end"
        self.final_message = None
        self._stats = {}
        self._previous_agent = ""

    def _spend_patience(self, helpful: bool | None) -> bool:
        """Update patience after the agent's turn; True when it has run out."""
        if helpful is False:
            self._count("unhelpful_turns")
            if self.patience is not None:
                self.patience -= 1
                return self.patience <= 0
        return False

    def _end(self, reason: str, final: str | None = None) -> None:
        self._end_reason = reason
        self.final_message = final
        self._count(f"end_{reason}")

    def _spec(self, **meta: Any) -> TurnSpec:
        data = {
            "sop": self.sop.name,
            "user": self.kind,
            "cooperativeness": self.persona.profile.level if self.persona else None,
            "facts": dict(self.facts),
            "patience": self.patience,
            "turn": self._turn,
        }
        data.update(meta)
        return TurnSpec(topic=self.sop.name, move="open" if self._turn == 0 else "continue", meta=data)

    def situation(self) -> list[str]:
        """The sampled facts as lines for the user model ("label: value"); facts that do not apply are left out."""
        if self.sheet is None:
            return []
        return [f"{f.label}: {self.facts[f.name]}" for f in self.sheet.facts if self.facts.get(f.name) is not None]

    @staticmethod
    def _last_agent(history: Sequence[Mapping[str, str]]) -> str:
        for message in reversed(history):
            if message.get("role") == "assistant":
                return str(message.get("content", ""))
        return ""


class ScriptedUser(FlexBenchUser):
    """The offline caller: answers the agent's questions from the seeded fact sheet; no model.

    Per agent message: facts whose cues match and that the caller has not told yet are answered
    (a poor caller may first deflect a question); a question about a fact already told is
    answered again ("As I said, …"); otherwise the caller asks one of its typical questions or
    says a filler. A turn helps the caller when it asks about a fact not yet told or matches a
    progress cue; an unhelpful turn costs patience. Needs a caller file with facts.
    """

    kind = "scripted"

    def __init__(self, sop: str | Path | Sop | Mapping[str, Any], sheet: Any = None, **kwargs: Any):
        super().__init__(sop, sheet, **kwargs)
        if self.sheet is None or not self.sheet.facts:
            raise ConfigError(
                f"the scripted user needs a caller file with facts for SOP {self.sop.name!r}: write "
                f"{self.sop.name}{CALLER_SUFFIX} next to the SOP (see ifgym.simulators.flexbench.load_caller_sheet) "
                "and pass it as persona=..., or use user='llm'"
            )
        self._told: set[str] = set()
        self._deflected: set[str] = set()
        self._questions: list[str] = []

    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Draw persona and facts; the first words answer the opening line."""
        self._begin(rng, options)
        self._told, self._deflected = set(), set()
        self._questions = list(self._delta().typical_questions)
        opener = self._fill(_pick(self._rng, self.sheet.openers))
        answers, _ = self._answers(self.sop.opening_line)
        text = " ".join([opener, *answers]) if answers else opener
        self._previous_agent = self.sop.opening_line
        return UserTurn(text, self._spec(told=sorted(self._told)))

    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The caller's answer to the agent's last message, or None when the call is over."""
        if self.persona is None:
            raise IfgymError("ScriptedUser.next() called before reset()")
        agent = self._last_agent(history)
        self._turn += 1
        if assistant_closed(agent):
            self._end("assistant_closed")
            return None
        answers, fresh = self._answers(agent)
        progress = any(p.search(agent) for p in self.sheet.progress_cues)
        repeated = _normalise(agent) == _normalise(self._previous_agent)
        # asking about something not told yet helps even word for word again: after a deflection
        # ("Why do you need that?") asking again is the agent's proper move
        helpful = fresh or (progress and not repeated)
        self._previous_agent = agent
        parts = answers or [self._idle()]
        if self._spend_patience(helpful):
            final = " ".join([*parts, _pick(self._rng, self.persona.profile.hangup_lines)])
            self._end("user_lost_patience", final)
            return None
        phrases = self.persona.catchphrases
        if phrases and self._rng.random() < self.persona.profile.catchphrase_probability:
            parts = [_pick(self._rng, phrases), *parts]
        return UserTurn(_join(parts, self.facts), self._spec(told=sorted(self._told), helpful=helpful))

    # -- composing the reply -----------------------------------------------------------------------
    def _fill(self, template: str) -> str:
        return template.format_map({k: (v if v is not None else "") for k, v in self.facts.items()})

    def _answer(self, fact: Fact) -> str:
        value = self.facts.get(fact.name)
        if value is None:
            self._told.add(fact.name)  # "I don't know" is its answer: asking again is a repeat
            return _pick(self._rng, self.sheet.unknown_answers)
        self._told.add(fact.name)
        return self._fill(_pick(self._rng, fact.templates(value)))

    def _answers(self, agent: str) -> tuple[list[str], bool]:
        """Lines answering what the agent asked, and whether it asked about anything not told yet."""
        asked = [f for f in self.sheet.facts if f.asked(agent)]
        known = [f for f in asked if self.facts.get(f.name) is not None]
        if known:  # a question that fits a fact the caller has beats one about a fact that does not apply
            asked = known
        fresh = [f for f in asked if f.name not in self._told]
        parts: list[str] = []
        profile = self.persona.profile
        for fact in fresh:
            first_time = fact.name not in self._deflected
            if first_time and profile.deflections and self._rng.random() < profile.deflect_probability:
                self._deflected.add(fact.name)
                self._count("deflections")
                parts.append(_pick(self._rng, profile.deflections))
                break  # a deflecting caller answers nothing else this turn
            self._deflected.add(fact.name)
            parts.append(self._answer(fact))
        if not fresh and asked:
            self._count("repeated_questions")
            parts.append("As I said, " + _lower_first(self._answer(asked[0])))
        return parts, bool(fresh)

    def _idle(self) -> str:
        profile = self.persona.profile
        if self._questions and self._rng.random() < profile.question_probability:
            return self._questions.pop(int(self._rng.integers(len(self._questions))))
        return _pick(self._rng, profile.fillers)


CALLER_SYSTEM = (
    "You are role-playing a person who is on a phone call with a company's agent; the agent called you. "
    "You are not an AI assistant and you never say you are one. Stay in character.\n\n"
    "{persona}\n\n{situation}"
    "Rules:\n"
    "- Reply with only your next spoken line: one to three short sentences, no stage directions, no labels.\n"
    "- Answer questions from the facts above; if asked something they do not cover, say you do not know.\n"
    "- Do not help the agent with its procedure; react as this person would.\n"
    "- When the agent has said goodbye or your matter is settled, say goodbye.\n"
    "- If you want to end the call, say so and finish your line with [hangs up]."
)
_HISTORY_MESSAGES = 20  # the latest messages shown to the user model; calls are short


class LLMUser(FlexBenchUser):
    """A user model plays the caller in character, with the episode's persona and sampled facts.

    `client` is any ifgym chat client. Without a caller file the persona delta is inferred from
    the SOP by the same model once (cached), and the caller has no fact sheet. `end_detector=True`
    adds one LLM call per turn (`EndDetector`) on top of the keyword rules; it also decides
    whether the agent's turn helped (patience). Without it, only an empty or repeated agent message
    counts as unhelpful. An empty generation is retried `max_retries` times, then the caller says
    a filler line (counted in `.stats["fallbacks"]`).
    """

    kind = "llm"

    def __init__(
        self,
        sop: str | Path | Sop | Mapping[str, Any],
        sheet: Any = None,
        *,
        client: Any,
        end_detector: bool = True,
        max_retries: int = 1,
        **kwargs: Any,
    ):
        super().__init__(sop, sheet, **kwargs)
        if client is None or not (hasattr(client, "chat") and hasattr(client, "achat")):
            raise ConfigError("LLMUser needs a chat client for the user model (e.g. ifgym.llm.make_client)")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ConfigError(f"LLMUser max_retries must be an int >= 0, got {max_retries!r}")
        self.client = client
        self.detector = EndDetector(client) if end_detector else None
        self.max_retries = max_retries
        self._inferred: PersonaDelta | None = None

    def _delta(self) -> PersonaDelta:
        if self.sheet is not None:
            return self.sheet.delta
        if self._inferred is None:
            raise IfgymError("persona delta not inferred yet")  # reset infers it first
        return self._inferred

    # -- prompts -------------------------------------------------------------------------------
    def system_message(self) -> str:
        """The user model's system prompt: persona, situation, rules (no SOP text, no dimensions)."""
        situation = self.situation()
        block = ("Facts about your situation:\n" + "\n".join(f"- {s}" for s in situation) + "\n\n") if situation else ""
        return CALLER_SYSTEM.format(persona=self.persona.describe(), situation=block)

    def generation_messages(self, history: Sequence[Mapping[str, str]]) -> list[Message]:
        """The prompt for the caller's next line; roles are flipped (the agent's words are 'user')."""
        talk = [m for m in history if m.get("role") in ("user", "assistant")][-_HISTORY_MESSAGES:]
        messages = [{"role": "system", "content": self.system_message()}]
        for m in talk:
            role = "user" if m["role"] == "assistant" else "assistant"
            messages.append({"role": role, "content": str(m.get("content", ""))})
        return messages

    # -- the dialogue of one turn ---------------------------------------------------------------
    def _generate(self, history: Sequence[Mapping[str, str]]) -> _Dialogue:
        messages = self.generation_messages(history)
        for _ in range(self.max_retries + 1):
            self._count("llm_calls")
            text = _clean((yield messages))
            if text:
                return text
            self._count("empty_generations")
        self._count("fallbacks")
        return _pick(self._rng, self.persona.profile.fillers)

    def _reset_dialogue(self, rng: np.random.Generator, options: Mapping | None) -> _Dialogue:
        if self.sheet is None and self._inferred is None:
            self._inferred = yield from _delta_dialogue(self.sop, self.max_retries + 1)
        self._begin(rng, options)
        if self.detector is not None:
            self.detector.stats = {key: 0 for key in self.detector.stats}
        history = [{"role": "assistant", "content": self.sop.opening_line}]
        text = yield from self._generate(history)
        self._previous_agent = self.sop.opening_line
        return UserTurn(text, self._spec())

    def _next_dialogue(self, history: Sequence[Mapping[str, str]]) -> _Dialogue:
        if self.persona is None:
            raise IfgymError("LLMUser.next() called before reset()")
        agent = self._last_agent(history)
        self._turn += 1
        if assistant_closed(agent):
            self._end("assistant_closed")
            return None
        text = yield from self._generate(history)
        if user_hung_up(text):
            self._end("user_hung_up", text)
            return None
        helpful: bool | None
        if self.detector is not None:
            check = yield from self.detector.dialogue(agent, text)
            if check is not None and check.assistant_closed:
                self._end("assistant_closed", text)
                return None
            if check is not None and check.user_hung_up:
                self._end("user_hung_up", text)
                return None
            helpful = check.helpful if check is not None else None
        else:
            helpful = bool(agent.strip()) and _normalise(agent) != _normalise(self._previous_agent)
        self._previous_agent = agent
        if self._spend_patience(helpful):
            self._end("user_lost_patience", f"{text} {_pick(self._rng, self.persona.profile.hangup_lines)}")
            return None
        return UserTurn(text, self._spec(helpful=helpful))

    @twin
    def reset(self, rng: np.random.Generator, options: Mapping | None = None) -> UserTurn:
        """Draw persona and facts (inferring the delta once if there is no caller file); the caller's first line."""
        return (yield from asking(self._reset_dialogue(rng, options), chat_call(self.client), read=text_of))

    @twin
    def next(self, history: list[dict[str, str]], verdicts: list[Verdict]) -> UserTurn | None:
        """The caller's next line, or None when the call is over (see `end_reason`)."""
        return (yield from asking(self._next_dialogue(history), chat_call(self.client), read=text_of))

    @property
    def stats(self) -> dict[str, int | float]:
        out = dict(self._stats)
        if self.detector is not None:
            out.update(self.detector.stats)
        return out


def _clean(text: str) -> str:
    """Strip a speaker label and wrapping quotes from a generated line."""
    text = _unquote((text or "").strip())
    text = re.sub(r"^(caller|user|me|customer|driver|associate)\s*:\s*", "", text, flags=re.IGNORECASE)
    return _unquote(text)
