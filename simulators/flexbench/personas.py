"""FlexBench's callers' personas: meta profiles by cooperativeness, the SOP-specific delta and fact sheet."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.errors import BackendError, DataFormatError, UnknownNameError, did_you_mean
from ifgym.files import not_a_folder, read_json_file
from ifgym.llm import Conversation
from ifgym.llm.conversation import asking, chat_call, run_steps
from ifgym.model_answers import json_object
from ifgym.simulators.base import text_of
from ifgym.simulators.flexbench.sops import CALLER_SUFFIX, PERSONAS_PATH, Message, Sop

# ---------------------------------------------------------------------------------------------
# Persona: meta profiles by cooperativeness
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonaProfile:
    """How cooperative the caller is (the meta profile); the same for every SOP.

    `patience` None means the caller never loses patience. The probabilities drive the scripted
    caller: deflecting a question the first time it is asked, starting with a catchphrase, and
    asking one of the caller's typical questions when the agent asked nothing answerable.
    """

    level: str
    communication_style: str
    information_disclosure: str
    problem_solving: str
    catchphrases: tuple[str, ...]
    patience: int | None
    deflect_probability: float = 0.0
    catchphrase_probability: float = 0.0
    question_probability: float = 0.0
    deflections: tuple[str, ...] = ()
    fillers: tuple[str, ...] = ("Okay.",)
    hangup_lines: tuple[str, ...] = ("I have to go. Bye. [hangs up]",)


def _strings(value: Any, where: str, *, allow_empty: bool = True) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DataFormatError(f"{where}: must be a list of non-empty strings, got {value!r:.120}")
    if not value and not allow_empty:
        raise DataFormatError(f"{where}: must not be empty")
    return tuple(v.strip() for v in value)


def _string(value: Any, where: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise DataFormatError(f"{where}: must be a non-empty string, got {value!r:.120}")
    return value.strip()


def _probability(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise DataFormatError(f"{where}: must be a probability in [0, 1], got {value!r}")
    return float(value)


def _check_keys(data: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise DataFormatError(
                f"{where}: unknown field {key!r}.{did_you_mean(key, allowed)} Allowed: {', '.join(allowed)}"
            )


_PROFILE_KEYS = (
    "communication_style",
    "information_disclosure",
    "problem_solving",
    "catchphrases",
    "patience",
    "deflect_probability",
    "catchphrase_probability",
    "question_probability",
    "deflections",
    "fillers",
    "hangup_lines",
)


def load_personas(source: str | Path | Mapping[str, Any] | None = None) -> dict[str, PersonaProfile]:
    """The meta profiles by level (the shipped poor/general/good file by default, or a path/mapping)."""
    where = "personas mapping"
    if source is None or isinstance(source, str | Path):
        path = not_a_folder(source, "personas file") if source is not None else PERSONAS_PATH
        where = str(path)
        try:
            source = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DataFormatError(f"{where}: cannot read the personas file ({exc})") from None
    if not isinstance(source, Mapping) or not source:
        raise DataFormatError(f"{where}: personas are an object mapping a level name to its profile")
    out = {}
    for level, entry in source.items():
        here = f"{where}[{level!r}]"
        if not isinstance(entry, Mapping):
            raise DataFormatError(f"{here}: a profile is an object with fields {', '.join(_PROFILE_KEYS)}")
        _check_keys(entry, _PROFILE_KEYS, here)
        patience = entry.get("patience")
        if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
            raise DataFormatError(f"{here}.patience: must be a positive int or null (never loses patience)")
        out[level] = PersonaProfile(
            level=level,
            communication_style=_string(entry.get("communication_style"), f"{here}.communication_style"),
            information_disclosure=_string(entry.get("information_disclosure"), f"{here}.information_disclosure"),
            problem_solving=_string(entry.get("problem_solving"), f"{here}.problem_solving"),
            catchphrases=_strings(entry.get("catchphrases", []), f"{here}.catchphrases"),
            patience=patience,
            deflect_probability=_probability(entry.get("deflect_probability", 0.0), f"{here}.deflect_probability"),
            catchphrase_probability=_probability(
                entry.get("catchphrase_probability", 0.0), f"{here}.catchphrase_probability"
            ),
            question_probability=_probability(entry.get("question_probability", 0.0), f"{here}.question_probability"),
            deflections=_strings(entry.get("deflections", []), f"{here}.deflections"),
            fillers=_strings(entry.get("fillers", ["Okay."]), f"{here}.fillers", allow_empty=False),
            hangup_lines=_strings(
                entry.get("hangup_lines", ["I have to go. Bye. [hangs up]"]), f"{here}.hangup_lines", allow_empty=False
            ),
        )
        if out[level].deflect_probability > 0 and not out[level].deflections:
            raise DataFormatError(f"{here}: deflect_probability > 0 needs at least one line in 'deflections'")
    return out


# ---------------------------------------------------------------------------------------------
# Persona: the instruction-specific delta and the fact sheet
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonaDelta:
    """What this SOP's caller is like: business context, goal, typical questions, catchphrases."""

    business_context: str = ""
    goal: str = ""
    typical_questions: tuple[str, ...] = ()
    catchphrases: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "business_context": self.business_context,
            "goal": self.goal,
            "typical_questions": list(self.typical_questions),
            "catchphrases": list(self.catchphrases),
        }


@dataclass(frozen=True)
class Fact:
    """One thing about the caller's situation, sampled per episode, and how the caller says it.

    `values` are the possible values with sampling `weights`; `when` restricts the fact to
    episodes where other facts have given values (else the caller does not know it and answers
    with an "unknown" line). `cues` are regular expressions that recognise the agent asking about
    it; `answers` map a value (or "*" for any) to answer lines, which may name any fact as
    `{fact_name}`.
    """

    name: str
    label: str
    values: tuple[str, ...]
    weights: tuple[float, ...]
    cues: tuple[re.Pattern[str], ...]
    answers: Mapping[str, tuple[str, ...]]
    when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def applies(self, facts: Mapping[str, str | None]) -> bool:
        """Tell whether the fact holds in a situation (its `when` conditions are met)."""
        return all(facts.get(name) in allowed for name, allowed in self.when.items())

    def asked(self, text: str) -> bool:
        """Tell whether an agent message asks about this fact."""
        return any(p.search(text) for p in self.cues)

    def templates(self, value: str) -> tuple[str, ...]:
        """Answer lines for a value."""
        return self.answers.get(value) or self.answers["*"]


@dataclass(frozen=True)
class CallerSheet:
    """The SOP-specific side of the caller: persona delta, fact sheet and scripted lines.

    Loaded from `<sop>.user.json` (see `load_caller_sheet`). `progress_cues` recognise agent
    messages that move the caller's matter forward (steps, offers, next steps) for the scripted
    caller's patience; `openers` are the caller's first words after the opening line.
    """

    delta: PersonaDelta
    facts: tuple[Fact, ...] = ()
    openers: tuple[str, ...] = ("Hello? Yes, what is this about?",)
    progress_cues: tuple[re.Pattern[str], ...] = ()
    unknown_answers: tuple[str, ...] = ("I'm not sure about that, sorry.",)
    path: Path | None = None

    def sample_facts(self, rng: np.random.Generator, pinned: Mapping[str, str] | None = None) -> dict[str, str | None]:
        """Draw one value per fact in file order (None where its `when` fails); `pinned` fixes some values."""
        pinned = dict(pinned or {})
        names = [f.name for f in self.facts]
        for name, value in pinned.items():
            if name not in names:
                raise UnknownNameError("fact", name, names)
            fact = self.facts[names.index(name)]
            if value not in fact.values:
                raise UnknownNameError(f"value of fact {name!r}", value, fact.values)
        out: dict[str, str | None] = {}
        for fact in self.facts:
            # one draw per fact whatever is pinned, so pinning one fact leaves the others' draws alone
            draw = fact.values[int(rng.choice(len(fact.values), p=np.asarray(fact.weights)))]
            value = pinned.get(fact.name, draw)
            out[fact.name] = value if fact.applies(out) else None
        return out


_SHEET_KEYS = (
    "business_context",
    "goal",
    "typical_questions",
    "catchphrases",
    "openers",
    "progress_cues",
    "unknown_answers",
    "facts",
)
_FACT_KEYS = ("name", "label", "values", "cues", "answers", "when")


def _regexes(value: Any, where: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for i, pattern in enumerate(_strings(value, where)):
        try:
            out.append(re.compile(pattern, re.IGNORECASE))
        except re.error as exc:
            raise DataFormatError(f"{where}[{i}]: bad regular expression {pattern!r} ({exc})") from None
    return tuple(out)


def _placeholders(template: str, where: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError as exc:
        raise DataFormatError(f"{where}: bad placeholder in {template!r} ({exc}); use {{fact_name}}") from None


def _fact(entry: Any, index: int, known: Sequence[Fact], where: str) -> Fact:
    here = f"{where}.facts[{index}]"
    if not isinstance(entry, Mapping):
        raise DataFormatError(f"{here}: a fact is an object with fields {', '.join(_FACT_KEYS)}")
    _check_keys(entry, _FACT_KEYS, here)
    name = _string(entry.get("name"), f"{here}.name")
    if not name.isidentifier():
        raise DataFormatError(f"{here}.name: {name!r} must be an identifier (letters, digits, _)")
    if any(f.name == name for f in known):
        raise DataFormatError(f"{here}.name: fact {name!r} is defined twice")
    raw = entry.get("values")
    if isinstance(raw, Mapping):
        values = tuple(str(v) for v in raw)
        weights = [raw[v] for v in raw]
        if not all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in weights) or not sum(
            weights
        ):
            raise DataFormatError(f"{here}.values: weights must be numbers >= 0 with a positive sum, got {dict(raw)!r}")
    elif isinstance(raw, list):
        values = _strings(raw, f"{here}.values", allow_empty=False)
        weights = [1.0] * len(values)
    else:
        raise DataFormatError(f"{here}.values: a list of values or an object value -> weight, got {raw!r:.80}")
    if not values:
        raise DataFormatError(f"{here}.values: must not be empty")
    total = float(sum(weights))
    answers_raw = entry.get("answers")
    if not isinstance(answers_raw, Mapping) or not answers_raw:
        raise DataFormatError(f'{here}.answers: an object mapping a value (or "*") to a list of answer lines')
    answers = {str(k): _strings(v, f"{here}.answers[{k!r}]", allow_empty=False) for k, v in answers_raw.items()}
    for key in answers:
        if key != "*" and key not in values:
            raise DataFormatError(f"{here}.answers: {key!r} is not one of the values {list(values)}")
    if "*" not in answers and set(answers) != set(values):
        missing = [v for v in values if v not in answers]
        raise DataFormatError(f'{here}.answers: no lines for value(s) {missing}; add them or a "*" entry')
    names = {f.name for f in known} | {name}
    for key, lines in answers.items():
        for line in lines:
            for placeholder in _placeholders(line, f"{here}.answers[{key!r}]"):
                if placeholder not in names:
                    raise DataFormatError(
                        f"{here}.answers[{key!r}]: {{{placeholder}}} names no fact defined so far "
                        f"(known: {', '.join(sorted(names))})"
                    )
    when_raw = entry.get("when", {})
    if not isinstance(when_raw, Mapping):
        raise DataFormatError(f"{here}.when: an object mapping an earlier fact to a value or list of values")
    when: dict[str, tuple[str, ...]] = {}
    for other, allowed in when_raw.items():
        match = next((f for f in known if f.name == other), None)
        if match is None:
            raise UnknownNameError(
                f"fact in {here}.when (facts must be defined before they are used)", other, [f.name for f in known]
            )
        allowed = (allowed,) if isinstance(allowed, str) else tuple(_strings(allowed, f"{here}.when[{other!r}]"))
        for value in allowed:
            if value not in match.values:
                raise UnknownNameError(f"value of fact {other!r} in {here}.when", value, match.values)
        when[other] = allowed
    return Fact(
        name=name,
        label=_string(entry.get("label"), f"{here}.label"),
        values=values,
        weights=tuple(w / total for w in weights),
        cues=_regexes(entry.get("cues"), f"{here}.cues"),
        answers=answers,
        when=when,
    )


def load_caller_sheet(source: str | Path | Mapping[str, Any]) -> CallerSheet:
    """Read a caller file (`<sop>.user.json`), or a mapping with the same fields.

    Fields: `business_context`, `goal` (strings), `typical_questions`, `catchphrases`, `openers`,
    `unknown_answers` (lists of lines), `progress_cues` (regular expressions), `facts` (a list of
    `{"name", "label", "values", "cues", "answers", "when"}`; see `Fact`). Every field is optional
    except that an LLM-only persona needs no facts while the scripted caller needs some.
    """
    path = None
    where = "caller mapping"
    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        where = str(path)
        source = read_json_file(path, "caller file")
    if not isinstance(source, Mapping):
        raise DataFormatError(f"{where}: a caller file is a JSON object with fields {', '.join(_SHEET_KEYS)}")
    _check_keys(source, _SHEET_KEYS, where)
    facts: list[Fact] = []
    raw_facts = source.get("facts", [])
    if not isinstance(raw_facts, list):
        raise DataFormatError(f"{where}.facts: must be a list of fact objects")
    for i, entry in enumerate(raw_facts):
        facts.append(_fact(entry, i, facts, where))
    names = {f.name for f in facts}
    openers = _strings(
        source.get("openers", ["Hello? Yes, what is this about?"]), f"{where}.openers", allow_empty=False
    )
    for line in openers:
        for placeholder in _placeholders(line, f"{where}.openers"):
            if placeholder not in names:
                raise DataFormatError(f"{where}.openers: {{{placeholder}}} names no fact")
    return CallerSheet(
        delta=PersonaDelta(
            business_context=_string(source.get("business_context"), f"{where}.business_context", required=False),
            goal=_string(source.get("goal"), f"{where}.goal", required=False),
            typical_questions=_strings(source.get("typical_questions", []), f"{where}.typical_questions"),
            catchphrases=_strings(source.get("catchphrases", []), f"{where}.catchphrases"),
        ),
        facts=tuple(facts),
        openers=openers,
        progress_cues=_regexes(source.get("progress_cues", []), f"{where}.progress_cues"),
        unknown_answers=_strings(
            source.get("unknown_answers", ["I'm not sure about that, sorry."]),
            f"{where}.unknown_answers",
            allow_empty=False,
        ),
        path=path,
    )


def caller_sheet_for(sop: Sop) -> CallerSheet | None:
    """The companion caller file of an SOP (`<stem>.user.json` next to it), or None when there is none."""
    if sop.path is None:
        return None
    companion = sop.path.with_name(sop.path.stem + CALLER_SUFFIX)
    return load_caller_sheet(companion) if companion.is_file() else None


@dataclass(frozen=True)
class Persona:
    """Meta profile + instruction-specific delta: everything the user model is told about who it is."""

    profile: PersonaProfile
    delta: PersonaDelta

    @property
    def catchphrases(self) -> tuple[str, ...]:
        return self.profile.catchphrases + self.delta.catchphrases

    def describe(self) -> str:
        """The persona as prose for the user model's system prompt."""
        lines = []
        if self.delta.business_context:
            lines.append(f"Who you are: {self.delta.business_context}")
        if self.delta.goal:
            lines.append(f"What you want from this call: {self.delta.goal}")
        p = self.profile
        lines.append(f"Cooperativeness: {p.level}.")
        lines.append(f"How you talk: {p.communication_style}")
        lines.append(f"What you share: {p.information_disclosure}")
        lines.append(f"How you handle problems: {p.problem_solving}")
        if self.catchphrases:
            lines.append("Phrases you tend to use: " + " / ".join(f'"{c}"' for c in self.catchphrases))
        if self.delta.typical_questions:
            lines.append("Questions you might ask: " + " / ".join(f'"{q}"' for q in self.delta.typical_questions))
        return "\n".join(lines)


# Model dialogues are Conversations: one generator yields the messages of each call; `asking` turns
# it into Steps whose calls `twin` makes blocking or awaited.
_Dialogue = Conversation[Any]


# ---------------------------------------------------------------------------------------------
# Persona delta inference (reads the SOP; never the dimensions)
# ---------------------------------------------------------------------------------------------

DELTA_SYSTEM = (
    "You design callers for call-centre training. Given the procedure an agent follows, describe the "
    "kind of person on the other end of the line. Answer with one JSON object only."
)


def delta_messages(sop: Sop) -> list[Message]:
    """The prompt that asks a model for the SOP-specific persona delta."""
    body = (
        f"The agent's procedure:\n<<<\n{sop.instruction}\n>>>\n\n"
        "Describe the person the agent calls, as JSON with these fields:\n"
        '{"business_context": "one or two sentences: who they are and their situation", '
        '"goal": "what they want from the call", '
        '"typical_questions": ["2 to 4 questions they would ask"], '
        '"catchphrases": ["1 to 3 short phrases they say"]}'
    )
    return [{"role": "system", "content": DELTA_SYSTEM}, {"role": "user", "content": body}]


def parse_delta(text: str) -> PersonaDelta | None:
    """A PersonaDelta from a model answer, or None when the JSON or its fields are unusable."""
    data = json_object(text)
    if data is None:
        return None
    try:
        context = _string(data.get("business_context"), "business_context")
        goal = _string(data.get("goal"), "goal")
        questions = _strings(data.get("typical_questions", []), "typical_questions")
        phrases = _strings(data.get("catchphrases", []), "catchphrases")
    except DataFormatError:
        return None
    return PersonaDelta(context, goal, questions, phrases)


def _delta_dialogue(sop: Sop, max_retries: int) -> _Dialogue:
    messages = delta_messages(sop)
    for _ in range(max_retries + 1):
        text = yield messages
        delta = parse_delta(text)
        if delta is not None:
            return delta
        messages = [
            *messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": "That was not usable. Reply with only the JSON object with all four fields."},
        ]
    raise BackendError(
        f"the user model gave no usable persona for SOP {sop.name!r} after {max_retries + 1} tries; "
        "write the persona in a caller file (persona=<path to .user.json>) instead"
    )


def infer_delta(client: Any, sop: Sop, *, max_retries: int = 2) -> PersonaDelta:
    """Ask a model for the SOP-specific persona delta (business context, goal, questions, catchphrases)."""
    return run_steps(asking(_delta_dialogue(sop, max_retries), chat_call(client), read=text_of))
