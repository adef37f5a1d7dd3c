"""The golden test: fixed seeds of every env id and every policy wrapper play exactly as recorded.

Each case of `tests/golden/cases.py` is played on the sync path (`rollout`) and on the async path
(`arollout`) and compared with its fixture in `tests/golden/fixtures/`: episodes (turns, verdicts,
rewards, ends, meta), the env's summary (strict and loose), every prompt sent to the model servers,
and on the sync path every step's reward, flags and info. A refactor must leave all of it unchanged;
a deliberate change of behaviour regenerates the fixtures (`python tests/golden/regenerate.py`) and
says why in its commit.
"""

from __future__ import annotations

import json

import pytest
from golden.cases import CASES, fixture_path, play

import ifgym


def _fixture(case):
    path = fixture_path(case)
    if not path.is_file():
        pytest.fail(f"no fixture for golden case {case.name!r}: run python tests/golden/regenerate.py {case.name}")
    return json.loads(path.read_text(encoding="utf-8"))


def _same(got, want, what):
    for key in want:
        assert got[key] == want[key], f"{what}: {key} differs from the fixture"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sync_rollout_matches_the_fixture(case):
    want = _fixture(case)
    got = play(case, "sync")
    assert set(got) == set(want)
    _same(got, want, case.name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_async_rollout_matches_the_fixture(case):
    want = _fixture(case)
    got = play(case, "async")
    _same(got, {k: v for k, v in want.items() if k != "steps"}, case.name + " (async)")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_an_env_reset_for_each_seed_plays_as_fresh_ones(case):
    want = _fixture(case)
    got = play(case, "reused")
    _same(got, {k: v for k, v in want.items() if k != "steps"}, case.name + " (one env reset for each seed)")


def test_every_env_id_and_every_wrapper_has_a_golden_case():
    assert {c.env_id for c in CASES} == set(ifgym.ENV_IDS)
    wrappers = {c.policy for c in CASES if c.policy not in ("stand_in", "agent")}
    assert wrappers == {
        "full",
        "truncation",
        "graphif_fast",
        "graphif_loop",
        "graphif_paper",
        "context_agent",
        "self_refine",
    }
