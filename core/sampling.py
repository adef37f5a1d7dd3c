"""Drawing constraints: the ranges and context a constraint type samples from, and drawing one that fits.

Each constraint type says how it is drawn and varied, beside its check (`ConstraintType.sample`,
`ConstraintType.vary` in `ifgym.core.catalog`); this module holds what they share:

- `Ranges`: the numeric ranges params are drawn from (words, bullets, keyword counts, …);
- `SampleContext`: the ranges plus the topic's keywords and the words the other live constraints
  require or forbid (a sampler never forbids a required word, nor a word of the topic's title);
- `sample_compatible`: one new constraint, from a group not yet live, that conflicts with none of
  the live ones; `vary_compatible`: one live constraint changed (a param moved, or another id of its
  group) so that it still fits the others; `change_one`: one weighted add / remove / modify.

The EvolIF tracker and the StructFlow planner both draw through these, from the rng they are given.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ifgym.core.constraints import Constraint, conflicts, constraint_type, ids_in_group

__all__ = [
    "RANGE_FIELDS",
    "Change",
    "Ranges",
    "SampleContext",
    "change_one",
    "choice",
    "forbidden_tokens",
    "pick_keywords",
    "randint",
    "required_tokens",
    "sample",
    "sample_compatible",
    "title_tokens",
    "tokens",
    "vary_compatible",
]


@dataclass(frozen=True)
class Ranges:
    """The inclusive (low, high) ranges params are drawn from; defaults follow EvolIF.

    `ifgym.simulators.evolif.TrackerConfig` exposes (and validates) the same fields.
    """

    keywords_per_constraint: tuple[int, int] = (1, 3)
    keyword_count: tuple[int, int] = (1, 3)
    disjoint_keywords: bool = True
    words: tuple[int, int] = (30, 300)
    sentences: tuple[int, int] = (2, 12)
    paragraphs: tuple[int, int] = (1, 5)
    characters: tuple[int, int] = (200, 1500)
    bullets: tuple[int, int] = (2, 7)
    upper_ratio: tuple[int, int] = (20, 80)
    upper_ratio_step: int = 5
    exact_length_units: tuple[str, ...] = ("sentences", "paragraphs")


RANGE_FIELDS: tuple[str, ...] = tuple(Ranges.__dataclass_fields__)


@dataclass(frozen=True)
class SampleContext:
    """What a sampler may draw from: the ranges, the topic's keywords, the words others require or forbid."""

    ranges: Ranges = field(default_factory=Ranges)
    keywords: tuple[str, ...] = ()
    required_tokens: frozenset[str] = frozenset()  # words inside required keywords of the other live constraints
    forbidden_tokens: frozenset[str] = frozenset()  # words inside forbidden keywords of the other live constraints
    title_tokens: frozenset[str] = frozenset()  # words of the topic title (a user would not forbid those)

    def required_pool(self) -> list[str]:
        """The topic keywords a constraint may require (none forbidden by another, when keywords are disjoint)."""
        avoid = self.forbidden_tokens if self.ranges.disjoint_keywords else frozenset()
        return [k for k in self.keywords if tokens(k).isdisjoint(avoid)]

    def forbidden_pool(self) -> list[str]:
        """The topic keywords a constraint may forbid (not in the title, none required by another)."""
        avoid = self.title_tokens | (self.required_tokens if self.ranges.disjoint_keywords else frozenset())
        return [k for k in self.keywords if tokens(k).isdisjoint(avoid)]


_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=4096)  # every episode's tracker asks again for the same bank's titles
def title_tokens(title: str) -> frozenset[str]:
    """The lower-cased words of a topic title (a user would not forbid those)."""
    return frozenset(_WORD.findall(title.lower()))


@functools.lru_cache(maxsize=8192)  # each sampling context asks again for the tokens of every topic keyword
def tokens(keyword: str) -> frozenset[str]:
    """The lower-cased words of a keyword."""
    return frozenset(keyword.lower().split())


def randint(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    """An int in the inclusive range `bounds`."""
    return int(rng.integers(bounds[0], bounds[1] + 1))


def choice(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    """One of `options`, uniformly."""
    return options[int(rng.integers(len(options)))]


def pick_keywords(rng: np.random.Generator, pool: Sequence[str], k: int) -> list[str]:
    """Up to k keywords from pool, no two sharing a word (so exact counts cannot contradict)."""
    chosen: list[str] = []
    used: set[str] = set()
    for i in rng.permutation(len(pool)):
        kw = pool[int(i)]
        if not (tokens(kw) & used):
            chosen.append(kw)
            used |= tokens(kw)
            if len(chosen) == k:
                break
    return chosen


def _required_words(c: Constraint) -> tuple[str, ...]:
    if c.id in ("start_with.keyword", "end_with.keyword"):
        return (c.params["keyword"],)
    if c.id == "keywords.exact_count":
        return tuple(c.params["counts"])
    return ()


def forbidden_tokens(constraints: Sequence[Constraint]) -> frozenset[str]:
    """Lower-cased words inside the forbidden keywords of `constraints`."""
    out: set[str] = set()
    for c in constraints:
        if c.id == "forbidden.words":
            for w in c.params["words"]:
                out |= tokens(w)
    return frozenset(out)


def required_tokens(constraints: Sequence[Constraint]) -> frozenset[str]:
    """Lower-cased words inside the keywords `constraints` require."""
    out: set[str] = set()
    for c in constraints:
        for w in _required_words(c):
            out |= tokens(w)
    return frozenset(out)


def sample(rng: np.random.Generator, cid: str, ctx: SampleContext) -> Constraint | None:
    """A constraint of id `cid` with params drawn by its type, or None when the context leaves nothing to draw."""
    params = constraint_type(cid).sample(rng, ctx)
    return None if params is None else Constraint(cid, params)


def _compatible(candidate: Constraint, others: Sequence[Constraint]) -> bool:
    return all(conflicts(candidate, other) is None for other in others)


def sample_compatible(
    rng: np.random.Generator,
    groups: Sequence[str],
    live: Sequence[Constraint],
    ctx: SampleContext,
    tries: int = 8,
) -> Constraint | None:
    """One new constraint that fits `live`: from a group of `groups` not yet live, conflicting with none of them.

    Free groups are tried in a random order, `tries` draws each (a random id of the group, its
    params drawn by its type); None when no group yields a fitting constraint.
    """
    taken = {c.group for c in live}
    free = [g for g in groups if g not in taken]
    for gi in rng.permutation(len(free)):
        ids = ids_in_group(free[int(gi)])
        for _ in range(tries):
            candidate = sample(rng, choice(rng, ids), ctx)
            if candidate is not None and _compatible(candidate, live):
                return candidate
    return None


def vary_compatible(
    rng: np.random.Generator,
    live: Sequence[Constraint],
    context: Callable[[Sequence[Constraint]], SampleContext],
    tries: int = 8,
) -> tuple[int, Constraint] | None:
    """One live constraint changed so that it still fits the others: `(index, new)`, or None.

    Live constraints are tried in a random order, `tries` times each: the same id with a param
    moved the way a user would (`ConstraintType.vary`), or another id of the same group.
    `context(others)` is the sampling context without the constraint being changed.
    """
    live = tuple(live)
    for li in rng.permutation(len(live)):
        i = int(li)
        old, others = live[i], live[:i] + live[i + 1 :]
        ctx = context(others)
        siblings = [cid for cid in ids_in_group(old.group) if cid != old.id]
        for _ in range(tries):
            if old.params and (not siblings or rng.random() < 0.5):
                params = old.kind.vary(rng, old.params, ctx)
                new = None if params is None else Constraint(old.id, params)
            elif siblings:
                new = sample(rng, choice(rng, siblings), ctx)
            else:
                break  # a lone parameterless id cannot change
            if new is not None and new != old and _compatible(new, others):
                return i, new
    return None


# (live after the change, "add" | "remove" | "modify" | None, the constraint removed or replaced, the one added)
Change = tuple[tuple[Constraint, ...], str | None, Constraint | None, Constraint | None]


def change_one(
    rng: np.random.Generator,
    live: Sequence[Constraint],
    weights: Mapping[str, float],
    groups: Sequence[str],
    context: Callable[[Sequence[Constraint]], SampleContext],
    cap: int,
    tries: int = 8,
) -> Change:
    """One change to `live`, add / remove / modify drawn by `weights` over the changes that are possible.

    Never removes the last constraint, never adds beyond `cap`; a change that finds nothing to do
    is dropped and the draw repeated over the rest. Returns `(live, change, old, new)`; `change` is
    None (and `live` unchanged) when no change is possible.
    """
    live = tuple(live)
    weights = {c: w for c, w in weights.items() if w > 0}
    if len(live) < 2:
        weights.pop("remove", None)  # never leave the state empty
    if len(live) >= cap:
        weights.pop("add", None)
    if not live:
        weights.pop("modify", None)
    while weights:
        names = list(weights)
        roll = rng.random() * sum(weights.values())
        name = names[-1]
        for candidate in names:
            roll -= weights[candidate]
            if roll < 0:
                name = candidate
                break
        if name == "add":
            new = sample_compatible(rng, groups, live, context(live), tries)
            if new is not None:
                return (*live, new), "add", None, new
        elif name == "remove":
            i = int(rng.integers(len(live)))
            return live[:i] + live[i + 1 :], "remove", live[i], None
        else:
            varied = vary_compatible(rng, live, context, tries)
            if varied is not None:
                i, new = varied
                return live[:i] + (new,) + live[i + 1 :], "modify", live[i], new
        del weights[name]
    return live, None, None, None
