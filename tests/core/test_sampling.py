"""Drawing constraints (ifgym.core.sampling): each type's sampler and variation, and drawing what fits the live set."""

import numpy as np
import pytest

from ifgym.core import GROUPS, REGISTRY, RULE_GROUPS, Constraint, conflicts
from ifgym.core.catalog import INCLUDE_MARKS, NATURAL_INCLUDE_MARKS, NATURAL_QUOTATION_PAIRS, QUOTATION_PAIRS
from ifgym.core.sampling import (
    Ranges,
    SampleContext,
    change_one,
    forbidden_tokens,
    required_tokens,
    sample,
    sample_compatible,
    title_tokens,
    vary_compatible,
)

KEYWORDS = ("solar panels", "battery", "inverter", "roof", "grid", "warranty")
CTX = SampleContext(Ranges(), KEYWORDS, title_tokens=title_tokens("Home solar power"))


def context(others):
    return SampleContext(Ranges(), KEYWORDS, required_tokens(others), forbidden_tokens(others), CTX.title_tokens)


@pytest.mark.parametrize("cid", sorted(REGISTRY))
def test_every_type_draws_valid_params_reproducibly(cid):
    drawn = [sample(np.random.default_rng(seed), cid, CTX) for seed in range(20)]
    assert all(isinstance(c, Constraint) and c.id == cid for c in drawn)  # Constraint() validated the params
    assert drawn == [sample(np.random.default_rng(seed), cid, CTX) for seed in range(20)]


def test_draws_stay_in_the_ranges_and_pools():
    ranges = Ranges(words=(10, 12), bullets=(3, 3))
    ctx = SampleContext(ranges, KEYWORDS)
    rng = np.random.default_rng(1)
    for _ in range(50):
        words = sample(rng, "length.words", ctx)
        assert 10 <= words.params["n"] <= 12 and words.params["relation"] != "exactly"  # not a fair ask in words
        assert sample(rng, "bullets.count", ctx).params == {"n": 3}
        quote = sample(rng, "start_with.quotation", ctx).params
        assert (quote["left"], quote["right"]) in NATURAL_QUOTATION_PAIRS
        assert sample(rng, "punctuation.include", ctx).params["mark"] in NATURAL_INCLUDE_MARKS
    assert set(NATURAL_QUOTATION_PAIRS) <= set(QUOTATION_PAIRS) and set(NATURAL_INCLUDE_MARKS) <= set(INCLUDE_MARKS)


def test_forbidden_words_avoid_the_title_and_required_words():
    required = Constraint("keywords.exact_count", {"counts": {"battery": 1}})
    rng = np.random.default_rng(0)
    for _ in range(50):
        words = sample(rng, "forbidden.words", context([required])).params["words"]
        assert not {"battery", "solar"} & {w for k in words for w in k.split()}  # required / title words


def test_no_keyword_to_draw_gives_none():
    empty = SampleContext(Ranges(), ())
    assert sample(np.random.default_rng(0), "keywords.exact_count", empty) is None
    assert sample(np.random.default_rng(0), "start_with.keyword", empty) is None


def test_sample_compatible_fills_free_groups_without_conflicts():
    rng, live = np.random.default_rng(3), ()
    for _ in range(len(RULE_GROUPS)):
        new = sample_compatible(rng, RULE_GROUPS, live, context(live))
        assert new is not None and new.group not in {c.group for c in live}
        assert all(conflicts(new, c) is None for c in live)
        live = (*live, new)
    assert sample_compatible(rng, RULE_GROUPS, live, context(live)) is None  # every group is taken
    assert {c.group for c in live} == set(RULE_GROUPS)


def test_vary_compatible_changes_one_constraint_within_its_group():
    live = (
        Constraint("length.words", {"relation": "less_than", "n": 100}),
        Constraint("format.json", {}),
    )
    rng = np.random.default_rng(0)
    for _ in range(30):
        i, new = vary_compatible(rng, live, context)
        assert new != live[i] and new.group == live[i].group


def test_change_one_respects_the_weights_and_the_cap():
    live = (Constraint("case.lower", {}),)
    rng = np.random.default_rng(0)
    grown, change, old, new = change_one(rng, live, {"add": 1.0}, GROUPS, context, cap=5)
    assert change == "add" and old is None and grown == (*live, new)
    same = change_one(rng, live, {"add": 1.0, "remove": 1.0}, GROUPS, context, cap=1)
    assert same == (live, None, None, None)  # full, and the last constraint is never removed
