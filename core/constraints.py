"""Constraints: an id plus params, and the machinery every constraint type shares.

A `Constraint` is an id plus params, frozen and JSON-round-trippable. Its behaviour lives in
a `ConstraintType` registered under that id (`length.words`, `format.json`, …), grouped into
the twelve EvolIF groups; at most one constraint per group is live at a time. Rule types
implement `check`; judged types (emotion, style, reader age) are scored by
`ifgym.rewards.evolif.judge.EvolIFJudge`.

This module holds the machinery (registry, groups, keyword matching, the conflicts table, and
`unstated`: what a user's text leaves out of a constraint, by its type's `cues`); the
concrete types live in `ifgym.core.catalog`, registered when `ifgym.core` is imported (which
importing any of its modules does first). Scoring a reply against a constraint, strict or loose,
with ifgym's or EvolIF's reading, is `ifgym.rewards.check`.
"""

from __future__ import annotations

import functools
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ifgym.core.cues import VARIATION, Cue, param_cues
from ifgym.core.verdicts import Verdict
from ifgym.core.wording import clause
from ifgym.errors import ConstraintParamsError, JudgeRequiredError, UnknownNameError

# The twelve groups, in EvolIF's order. Rule groups first, judged groups last.
GROUPS: tuple[str, ...] = (
    "start_with",
    "end_with",
    "format",
    "case",
    "punctuation",
    "bullets",
    "length",
    "keywords",
    "forbidden",
    "emotion",
    "style",
    "reader_age",
)
RULE_GROUPS: tuple[str, ...] = GROUPS[:9]
JUDGED_GROUPS: tuple[str, ...] = GROUPS[9:]


class ConstraintType:
    """Behaviour of one constraint id. Subclass, set the class vars, register with `@register`.

    A registered type must define two classmethods, and rule types a third:

    - ``normalize(params) -> dict``: validate params and return them in canonical form (tuples,
      not lists; strings stripped). Raise ConstraintParamsError naming the constraint id, the
      field, the value received and what is allowed.
    - ``describe(params) -> str``: the requirement in plain words, as the user would state it.
    - ``check(reply, params) -> Verdict`` (rule types only): the strict verdict for `reply`.
    - ``sample(rng, ctx) -> dict | None``: params drawn from `rng` within the sampling context
      (`ifgym.core.sampling.SampleContext`), or None when the context leaves nothing to draw.

    ``vary(rng, params, ctx)`` (how a user would change the params of a live constraint) defaults
    to drawing them afresh; ``cues(params, before)`` (what a user's text must carry to state it, see
    `unstated`) to its param values. All methods are pure functions of their arguments (no hidden state).
    `register` refuses a class that lacks one of them, so a half-written type fails at import time,
    not mid-episode.
    """

    id: ClassVar[str]
    group: ClassVar[str]
    judged: ClassVar[bool] = False

    if TYPE_CHECKING:  # declared for type checkers only; `register` insists subclasses define them

        @classmethod
        def normalize(cls, params: Mapping[str, Any]) -> dict[str, Any]: ...

        @classmethod
        def describe(cls, params: Mapping[str, Any]) -> str: ...

        @classmethod
        def sample(cls, rng: np.random.Generator, ctx: Any) -> dict[str, Any] | None: ...

    @classmethod
    def phrasings(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """Ways a user states the requirement: infinitive clauses ("keep it under 40 words"), none a negation.

        They fit "Please …", "You no longer need to …" and "… rather than …". Default: `describe` as a clause.
        """
        return (clause(cls.describe(params)),)

    @classmethod
    def cues(cls, params: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> tuple[Cue, ...]:
        """What a user's text must carry to state the requirement (`unstated` looks for them).

        `before` holds the params a modify replaces (same id): then only what changed is asked for.
        Default: every param value (numbers as digits or words, words, marks), or the id's last part.
        """
        found = [cue for key, value in params.items() for cue in param_cues(key, value)]
        if not found:
            name = cls.id.rsplit(".", 1)[-1].replace("_", " ")
            found.append(Cue(f"the {name}", param_cues("name", name)[0].pattern))
        return tuple(found)

    @classmethod
    def vary(cls, rng: np.random.Generator, params: Mapping[str, Any], ctx: Any) -> dict[str, Any] | None:
        """New params for a live constraint of this id, as a user would change them (default: drawn afresh).

        `ctx` is an `ifgym.core.sampling.SampleContext` (that module imports this one).
        """
        return cls.sample(rng, ctx)

    @classmethod
    def check(cls, reply: str, params: Mapping[str, Any]) -> Verdict:
        """Rule verdict for `reply` (strict). Judged types keep this default and raise."""
        raise JudgeRequiredError(f"{cls.id} is judged by an LLM; score it with ifgym.rewards.evolif.judge.EvolIFJudge")


REGISTRY: dict[str, type[ConstraintType]] = {}


def register(cls: type[ConstraintType]) -> type[ConstraintType]:
    """Class decorator adding a ConstraintType to the registry under its id.

    Raises TypeError when the class is incomplete: no id/group, a group outside GROUPS, an id not
    prefixed by its group, a missing `normalize`/`describe`, a rule type without its own `check`,
    or a judged type that overrides `check`.
    """
    name = cls.__name__
    cid = getattr(cls, "id", None)
    group = getattr(cls, "group", None)
    if not isinstance(cid, str) or not isinstance(group, str):
        raise TypeError(f"{name} must set the class vars `id` and `group` (strings)")
    if group not in GROUPS:
        raise TypeError(f"{name}.group {group!r} is not one of {', '.join(GROUPS)}")
    if not cid.startswith(group + "."):
        raise TypeError(f"{name}.id {cid!r} must start with its group prefix {group + '.'!r}")
    for method in ("normalize", "describe", "sample"):
        if not callable(getattr(cls, method, None)):
            raise TypeError(f"{name} ({cid}) must define the classmethod `{method}`")
    overrides_check = getattr(cls.check, "__func__", None) is not ConstraintType.check.__func__
    if cls.judged and overrides_check:
        raise TypeError(f"{name} ({cid}) is judged and must not define `check` (the judge scores it)")
    if not cls.judged and not overrides_check:
        raise TypeError(f"{name} ({cid}) is a rule type and must define the classmethod `check`")
    if cid in REGISTRY:
        raise ValueError(f"constraint id {cid!r} registered twice")
    REGISTRY[cid] = cls
    _GROUP_IDS.clear()
    return cls


def constraint_type(constraint_id: str) -> type[ConstraintType]:
    """The registered type for an id; unknown ids get a did-you-mean error."""
    try:
        return REGISTRY[constraint_id]
    except (KeyError, TypeError):
        raise UnknownNameError("constraint id", constraint_id, REGISTRY) from None


# ids_in_group's answers with the registry's size they were read at: the samplers ask for a group's ids on
# every draw. `register` empties it; a size that changed (a type deleted from REGISTRY) reads the registry again.
_GROUP_IDS: dict[str, tuple[int, tuple[str, ...]]] = {}


def ids_in_group(group: str) -> tuple[str, ...]:
    """The constraint ids of one group, in catalog order; unknown groups get a did-you-mean error."""
    hit = _GROUP_IDS.get(group)
    if hit is not None and hit[0] == len(REGISTRY):
        return hit[1]
    if group not in GROUPS:
        raise UnknownNameError("constraint group", group, GROUPS)
    ids = tuple(cid for cid, kind in REGISTRY.items() if kind.group == group)
    _GROUP_IDS[group] = (len(REGISTRY), ids)
    return ids


def params_error(cid: str, field: str, value: Any, allowed: str) -> ConstraintParamsError:
    """A ConstraintParamsError naming the id, the field, the value received and what is allowed.

    The field name is also kept on the error as `.field`, so adapters (e.g. the EvolIF reader)
    can say which of their own arguments it came from.
    """
    err = ConstraintParamsError(f"{cid}: param {field!r} got {value!r}; allowed: {allowed}")
    err.field = field  # type: ignore[attr-defined]
    return err


# Types a param value is left as by `_to_json_value` and `_freeze`, tested first: a test through the Mapping ABC
# for each scalar was most of a constraint's `to_json` (three of them a turn, for every live constraint)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _to_json_value(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, tuple):
        return [_to_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_json_value(v) for k, v in value.items()}
    return value


def _typed_key(value: Any) -> Any:
    """A hashable stand-in for JSON-like `value` that keeps types apart (1, 1.0 and True are different params)."""
    if isinstance(value, Mapping):
        return (type(value), tuple((k, _typed_key(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(_typed_key(v) for v in value))
    return (type(value), value)


# Constraint.from_json's constraints by (id, typed params), the least recently used dropped first. 512 keep the
# common ones: in a 4-turn run of 1,024 episodes (7,268 constraints, ~1,500 distinct) 78% are found (1,024: 79%,
# 256: 75%), in well under 1 MB (unbounded it held 4 MB of a 2,000-episode run's peak RSS)
_FROM_JSON: OrderedDict[Any, Constraint] = OrderedDict()
_FROM_JSON_SIZE = 512


class FrozenParams(dict):
    """A read-only dict: constraint params cannot change after validation (specs are shared across turns).

    A dict subclass, so params still serialise, compare and pickle like the dict they were built from.
    """

    def _readonly(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("constraint params are read-only; build a new Constraint with the params you want")

    __setitem__ = __delitem__ = __ior__ = _readonly  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenParams, (dict(self),))


def _freeze(value: Any) -> Any:
    if type(value) in _SCALARS or type(value) is tuple:
        return value
    if isinstance(value, Mapping):
        return FrozenParams({k: _freeze(v) for k, v in value.items()})
    return value


@dataclass(frozen=True, eq=False)
class Constraint:
    """A requirement on a reply: a registered id plus its params (validated on construction)."""

    id: str
    params: Mapping[str, Any]

    def __post_init__(self) -> None:
        kind = constraint_type(self.id)
        if not isinstance(self.params, dict) and not isinstance(self.params, Mapping):  # a dict: no ABC test
            raise ConstraintParamsError(
                f"{self.id}: params must be a mapping, got {type(self.params).__name__} {self.params!r}"
            )
        object.__setattr__(self, "params", _freeze(kind.normalize(self.params)))

    @property
    def kind(self) -> type[ConstraintType]:
        """The registered ConstraintType of this id."""
        return REGISTRY[self.id]

    @property
    def group(self) -> str:
        """The group this constraint belongs to (one of GROUPS)."""
        return self.kind.group

    @property
    def judged(self) -> bool:
        """True for constraints an LLM judge must score (emotion, style, reader age)."""
        return self.kind.judged

    def describe(self) -> str:
        """The requirement in plain words, as the user would state it."""
        return self.kind.describe(self.params)

    def phrasings(self) -> tuple[str, ...]:
        """Ways a user states the requirement (infinitive clauses, lowercase start): see `ConstraintType.phrasings`."""
        return self.kind.phrasings(self.params)

    def to_json(self) -> dict[str, Any]:
        """`{"id": ..., "params": {...}}` with tuples as lists."""
        return {"id": self.id, "params": {k: _to_json_value(v) for k, v in self.params.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Constraint:
        """Rebuild (and re-validate) a constraint from `to_json` output.

        The same id and params (same values of the same JSON types) give the constraint already built
        from them: an episodes file repeats a few hundred distinct constraints thousands of times, and
        the summary reads every one back. Constraints are immutable, so sharing one is safe.
        """
        if not isinstance(data, Mapping) or "id" not in data:
            raise ConstraintParamsError(f"a constraint needs the form {{'id': ..., 'params': {{...}}}}, got {data!r}")
        params = data.get("params", {})
        try:
            key = (data["id"], _typed_key(params))
            built = _FROM_JSON.get(key)
        except TypeError:  # something unhashable (not JSON): validate it without the cache
            return cls(data["id"], params)
        if built is None:
            built = _FROM_JSON[key] = cls(data["id"], params)
            if len(_FROM_JSON) > _FROM_JSON_SIZE:
                _FROM_JSON.popitem(last=False)
        else:
            _FROM_JSON.move_to_end(key)
        return built

    def _identity(self) -> str:
        """The canonical JSON that eq and hash compare: computed on first use, then kept (params are frozen).

        Not at construction: most constraints (each turn's sampled ones, every one read back from an
        episodes file) are never compared, and the dump was a third of building one.
        """
        key = self.__dict__.get("_json_key")
        if key is None:
            key = json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False)
            object.__setattr__(self, "_json_key", key)
        return key

    def __eq__(self, other: object) -> bool:
        # different ids never compare equal (the identity starts with the id): no JSON dump for them
        return isinstance(other, Constraint) and self.id == other.id and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return f"Constraint({self.id!r}, {_to_json_value(self.params)!r})"


# ---------------------------------------------------------------------------------------------
# Keyword matching, shared by the keyword/forbidden/start/end checkers and the conflicts table.


@functools.lru_cache(maxsize=4096)
def keyword_pattern(keyword: str) -> re.Pattern[str]:
    """The compiled, case-insensitive pattern that counts `keyword` in a reply.

    A single word (no whitespace) matches as a whole word: not preceded or followed by a word
    character, so "art" does not match inside "party". A multi-word keyword matches as a
    substring (EvolIF's rule), with any run of whitespace between its words, so a phrase broken
    across a line still counts.
    """
    words = keyword.split()
    if len(words) > 1:
        return re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)
    head = r"(?<!\w)" if re.match(r"\w", keyword) else ""
    tail = r"(?!\w)" if re.search(r"\w$", keyword) else ""
    return re.compile(head + re.escape(keyword) + tail, re.IGNORECASE)


def may_contain(text: str, keyword: str) -> bool:
    """False only where `keyword` cannot match in `text` (see `keyword_pattern`): both ASCII, a word of it absent.

    Checked before a keyword's pattern is used, so that a pattern is compiled only for text it may match
    (case-insensitive, about 0.15 ms each; a run meets a thousand keywords, most of them never in the text).
    In ASCII, matching any case is comparing lower case; elsewhere case folding has exceptions ("ſ" is an "s").
    """
    if not (text.isascii() and keyword.isascii()):
        return True
    lowered = text.lower()
    return all(word in lowered for word in keyword.lower().split())


def count_keyword(text: str, keyword: str) -> int:
    """Non-overlapping occurrences of `keyword` in `text` (see `keyword_pattern`)."""
    if not may_contain(text, keyword):
        return 0
    return len(keyword_pattern(keyword).findall(text))  # one item per match, counted in C


# ---------------------------------------------------------------------------------------------
# Conflicts: pairs of constraints that cannot (or only by contrived output) hold together.


@dataclass(frozen=True)
class ConflictRule:
    """Constraints with an id in `left` and one with an id in `right` cannot hold together.

    `when(left, right)`, if given, narrows the rule to some params (it receives the constraint
    matching `left` first). The rule applies in both orders, so the table is symmetric.
    """

    left: tuple[str, ...]
    right: tuple[str, ...]
    reason: str
    when: Callable[[Constraint, Constraint], bool] | None = None


def _quotation_not_json(_fmt: Constraint, quote: Constraint) -> bool:
    # A JSON text can open with { [ " and close with } ] ": those quotation marks fit.
    if quote.id == "start_with.quotation":
        return quote.params["left"] not in ("{", "[", '"')
    return quote.params["right"] not in ("}", "]", '"')


def _quotation_not_angle(_fmt: Constraint, quote: Constraint) -> bool:
    # XML/HTML open with "<" and close with ">": only that bracket fits.
    if quote.id == "start_with.quotation":
        return quote.params["left"] != "<"
    return quote.params["right"] != ">"


def _excludes_comma(_fmt: Constraint, punct: Constraint) -> bool:
    return punct.params["mark"] == ","


def _several_paragraphs(_fmt: Constraint, length: Constraint) -> bool:
    relation, n = length.params["relation"], length.params["n"]
    return relation == "more_than" or (relation == "exactly" and n > 1)


def _keywords_of(constraint: Constraint) -> tuple[str, ...]:
    if constraint.id == "keywords.exact_count":
        return tuple(constraint.params["counts"])
    return (constraint.params["keyword"],)


def _required_word_forbidden(required: Constraint, forbidden: Constraint) -> bool:
    # Every occurrence of the required keyword would contain a forbidden word.
    words = forbidden.params["words"]
    return any(count_keyword(keyword, word) for keyword in _keywords_of(required) for word in words)


_WORD_RUN = re.compile(r"\w+")


def _keywords_outgrow_length(keywords: Constraint, length: Constraint) -> bool:
    relation, n = length.params["relation"], length.params["n"]
    if relation == "more_than":
        return False
    needed = sum(count * len(_WORD_RUN.findall(kw)) for kw, count in keywords.params["counts"].items())
    return needed > (n - 1 if relation == "less_than" else n)


_STRUCTURED = ("format.json", "format.csv", "format.xml", "format.html")
_TAGGED = ("format.xml", "format.html")

CONFLICTS: tuple[ConflictRule, ...] = (
    ConflictRule(
        _STRUCTURED,
        ("bullets.count",),
        "JSON, CSV, XML and HTML have no bullet lines; a '- item' line breaks the format or makes a junk row",
    ),
    ConflictRule(
        ("format.json",),
        ("start_with.emoji", "end_with.emoji"),
        'a JSON reply starts with { [ " or a literal and ends likewise, never with an emoji',
    ),
    ConflictRule(
        ("format.json",),
        ("start_with.quotation", "end_with.quotation"),
        'a JSON reply can only open with { [ " and close with } ] "',
        _quotation_not_json,
    ),
    ConflictRule(
        _TAGGED,
        ("start_with.emoji", "end_with.emoji"),
        "a strict XML/HTML reply opens with '<' and closes with '>', with no text outside its tags",
    ),
    ConflictRule(
        _TAGGED,
        ("start_with.letter", "end_with.letter", "start_with.keyword", "end_with.keyword"),
        "a strict XML/HTML reply opens and closes with a tag, so its first/last letter or word is a tag name",
    ),
    ConflictRule(
        _TAGGED,
        ("start_with.quotation", "end_with.quotation"),
        "a strict XML/HTML reply can only open with '<' and close with '>'",
        _quotation_not_angle,
    ),
    ConflictRule(
        ("format.csv",),
        ("punctuation.exclude",),
        "CSV columns are separated by commas, so a CSV reply cannot avoid ','",
        _excludes_comma,
    ),
    ConflictRule(
        ("format.csv", "format.json"),
        ("length.paragraphs",),
        "a CSV or JSON reply is one block: a blank line breaks CSV rows, and JSON is not written in paragraphs",
        _several_paragraphs,
    ),
    ConflictRule(
        ("keywords.exact_count", "start_with.keyword", "end_with.keyword"),
        ("forbidden.words",),
        "a required keyword contains a forbidden word",
        _required_word_forbidden,
    ),
    ConflictRule(
        ("keywords.exact_count",),
        ("length.words",),
        "the required keyword occurrences alone need more words than the length limit allows",
        _keywords_outgrow_length,
    ),
)


def conflicts(a: Constraint, b: Constraint) -> str | None:
    """Why `a` and `b` cannot be live together, or None when they can. Symmetric in a and b.

    Two constraints of the same group always conflict (one constraint per group is live);
    otherwise the first matching rule of CONFLICTS, tried in both orders, gives the reason.
    """
    if a.group == b.group:
        first, second = sorted((a.id, b.id))
        return f"{first} and {second} are both in the group {a.group!r}; only one constraint per group is live"
    for rule, swapped in _rules_between(a.id, b.id):
        left, right = (b, a) if swapped else (a, b)
        if rule.when is None or rule.when(left, right):
            return f"{left.id} vs {right.id}: {rule.reason}"
    return None


@functools.lru_cache(maxsize=4096)
def _rules_between(a: str, b: str) -> tuple[tuple[ConflictRule, bool], ...]:
    """The rules of CONFLICTS whose ids match ids `a` and `b`, in the order `conflicts` tries them (True: as (b, a)).

    The samplers test every candidate against every live constraint: this reads the table once per pair of ids.
    """
    return tuple(
        (rule, swapped)
        for rule in CONFLICTS
        for swapped, (left, right) in ((False, (a, b)), (True, (b, a)))
        if left in rule.left and right in rule.right
    )


def unstated(constraint: Constraint, text: str, old: Constraint | None = None) -> list[str]:
    """What `text` leaves out of `constraint`: the labels of its cues not found (empty when it states it).

    `old` is the constraint a modify replaces: of the same id, only what changed must appear.
    """
    before = old.params if old is not None and old.id == constraint.id else None
    clean = text.replace(VARIATION, "")
    missing: list[str] = []
    pending = list(constraint.kind.cues(constraint.params, before))
    while pending:
        cue = pending.pop(0)
        if re.search(cue.pattern, clean, re.IGNORECASE):
            pending[:0] = cue.then
        else:
            missing.append(cue.label)
    return missing
