"""A hand-made FlexBench dimension set and verdict helper shared by the metric tests."""

from __future__ import annotations

from ifgym.rewards.flexbench import SCHEMA


def small() -> dict:
    """A hand-made set: two base actions with exclusive branches, and one free-standing branch."""
    return {
        "schema": SCHEMA,
        "sop": "toy",
        "sop_sha256": None,
        "reviewed": True,
        "dimensions": [
            {
                "id": "d1",
                "criterion": "Does the assistant ask if the caller is in charge?",
                "precondition": None,
                "rule": {"evidence": ["in charge"]},
            },
            {
                "id": "d2",
                "criterion": "Does the assistant ask for the owner's name?",
                "precondition": "If the caller is not in charge",
                "rule": {"when": ["not me"], "evidence": ["name"]},
            },
            {
                "id": "d3",
                "criterion": "Does the assistant ask for the email?",
                "precondition": "If the caller is in charge",
                "rule": {"when": ["that's me"], "evidence": ["e-?mail"]},
            },
            {
                "id": "d4",
                "criterion": "Does the assistant ask for the platform?",
                "precondition": None,
                "rule": {"evidence": ["platform"]},
            },
            {
                "id": "d5",
                "criterion": "Does the assistant give the Shopify steps?",
                "precondition": "If the store runs on Shopify",
                "rule": {"when": ["shopify"], "evidence": ["settings"], "violation": ["plugin"]},
            },
            {
                "id": "d6",
                "criterion": "Does the assistant give the plugin steps?",
                "precondition": "If the store runs on WooCommerce",
                "rule": {"when": ["woo"], "evidence": ["plugin"]},
            },
            {
                "id": "d7",
                "criterion": "Does the assistant apologise?",
                "precondition": "If the caller is upset",
                "rule": {"when": ["annoyed"], "evidence": ["sorry"]},
            },
            {
                "id": "d8",
                "criterion": "Does the assistant avoid promising discounts?",
                "precondition": "always",
                "rule": {"violation": ["discount"], "max_questions": 1},
            },
        ],
        "groups": [{"base": "d1", "branches": ["d2", "d3"]}, {"base": "d4", "branches": ["d5", "d6"]}],
        "exclusive": [["d2", "d3"], ["d5", "d6"]],
        "meta": {},
    }


BASELINE = dict.fromkeys(["d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8"], "unknown")


def labels(**kw):
    """Every dimension of `small` unknown but the ones given (id=label)."""
    return {**BASELINE, **kw}
