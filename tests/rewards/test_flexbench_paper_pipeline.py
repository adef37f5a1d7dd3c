"""FlexBench's dimension pipeline as the paper runs it (appendix B), against a canned model over HTTP.

Every stage's prompt and parse, the coverage-first control flow, the stages' outputs kept in the
dimension file, the paper's decoding with re-asks sent hotter, and a verification that never
completes (a clear error after the bounded rounds, nothing written).
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from support.canned_server import CannedServer
from support.flexbench_pipeline import (
    ENTITIES,
    NEVER,
    PAPER_SOP,
    SCRIPT,
    SEGMENTS,
    paper_answerer,
    paper_stage,
)

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.cli import main
from ifgym.errors import DataFormatError, IncompleteDimensionsError, UnknownNameError
from ifgym.llm import make_client
from ifgym.rewards.flexbench import build_dimensions, fingerprint, load_dimensions
from ifgym.rewards.flexbench.pipeline import canonicalise, paper_temperatures


def build(overrides=None, **kwargs):
    """Run the paper's pipeline on PAPER_SOP against a canned server; return (dims or error, requests)."""
    answer = paper_answerer(overrides)
    with CannedServer(lambda body: answer(body["messages"]), model="pipeline-model") as server:
        client = make_client({"base_url": server.base_url, "model": "pipeline-model"}, "judge")
        try:
            result = build_dimensions(PAPER_SOP, client, sop_name="payco", pipeline="paper", **kwargs)
        except DataFormatError as exc:
            result = exc
        return result, list(server.requests)


def stages(dims):
    return [(s["stage"], s.get("round")) for s in dims.meta["pipeline"]["stages"]]


def test_the_stages_run_in_the_papers_order_coverage_first_and_each_output_is_kept(tmp_path):
    dims, requests = build()
    assert [paper_stage(r["messages"]) for r in requests] == [
        "segmentation",
        "criteria",
        "verification",
        "modification",  # the missing rule first ...
        "verification",
        "modification",  # ... then the invented criterion
        "verification",
        "gradual",
        "dependency",
    ]
    assert stages(dims) == [
        ("segmentation", None),
        ("criteria", None),
        ("verification", 0),
        ("modification", 1),
        ("verification", 1),
        ("modification", 2),
        ("verification", 2),
        ("gradual", None),
        ("dependency", None),
    ]
    kept = dims.meta["pipeline"]["stages"]
    # coverage first: round 1 was told only what is missing, round 2 only what is invented
    assert '"Never quote fees."' in requests[3]["messages"][1]["content"]
    assert "(numbers) []" in requests[3]["messages"][1]["content"]
    assert "missing requirements []" in requests[5]["messages"][1]["content"]
    assert "(numbers) [2]" in requests[5]["messages"][1]["content"]
    assert kept[3]["addressed"] == "coverage" and kept[5]["addressed"] == "invented"
    # what each stage changed: round 1 added the rule, round 2 swapped criterion 2, gradual split one in two
    assert [r["criterion"] for r in kept[3]["added"]] == [NEVER[1]] and kept[3]["removed"] == []
    assert [r["criterion"] for r in kept[5]["removed"]] == [
        "Does the assistant ask for the store owner's name and date of birth?"
    ]
    assert kept[7]["split"] == {
        "3": ["Does the assistant ask for the caller's email?", "Does the assistant ask for the caller's phone?"]
    }
    assert [d.kind for d in dims.dimensions] == ["base", "branch", "branch", "branch", "base", "base", "always"]
    assert dims.dimensions[2].unit == dims.dimensions[3].unit == SEGMENTS[2][0]  # the split keeps its unit
    assert dims.groups == (("d1", ("d2", "d3", "d4")),) and dims.exclusive == (("d2", "d3"), ("d2", "d4"))
    assert not dims.reviewed and dims.sop_sha256 == fingerprint(PAPER_SOP)
    assert dims.meta["pipeline"]["verification"]["complete"] and dims.meta["pipeline"]["modification_rounds"] == 2
    # the file a person reviews holds every stage's output
    assert load_dimensions(str(dims.save(tmp_path / "payco.dimensions.json"))).meta == dims.meta


def test_the_paper_decodes_at_a_low_temperature_not_greedily():
    _, requests = build()
    assert {r["temperature"] for r in requests} == {0.2}
    assert paper_temperatures(2) == (0.2, 0.4, 0.6) and paper_temperatures(6)[-1] == 1.0  # capped


def test_segmentation_decontextualises_canonicalises_and_splits_scripts_in_two():
    dims, requests = build()
    prompt = requests[0]["messages"][1]["content"]
    assert PAPER_SOP in prompt and "standalone" in prompt and "canonical name" in prompt and '"wording"' in prompt
    seg = dims.meta["pipeline"]["stages"][0]
    assert seg["entities"] == ENTITIES
    texts = [(s["text"], s["standalone"], s["canonical"]) for s in seg["segments"]]
    # the model's stand-alone rewrite resolves "they"; the canonical form names the caller and the store one way
    assert texts[1] == (
        "If they are not in charge, ask for the owner's name.",
        "If the merchant is not in charge of the store, ask for the store owner's name.",
        "If the caller is not in charge of the store, ask for the store owner's name.",
    )
    assert texts[3][2] == "Ask which platform the store uses."
    assert seg["segments"][4]["script"] == SCRIPT and seg["segments"][0]["script"] is None
    # the criteria stage reads the canonical segments and the script's intent and wording
    criteria_prompt = requests[1]["messages"][1]["content"]
    assert "1. Ask whether the caller is in charge of the store." in criteria_prompt
    assert "intent: thank the caller and say goodbye" in criteria_prompt and SCRIPT["wording"] in criteria_prompt
    assert "conveys its intent" in criteria_prompt


def test_canonicalise_replaces_whole_mentions_longest_first_in_any_case():
    entities = [{"name": "the caller", "mentions": ["the merchant", "merchant"]}]
    assert canonicalise("The merchant asks; a merchants' fee.", entities) == "the caller asks; a merchants' fee."


def bad_then(good_stage, *bad):
    """An override answering the first calls of a stage with `bad` texts, then as the default model would."""
    fallback = paper_answerer()

    def answer(messages, n):
        return bad[n - 1] if n <= len(bad) else fallback(messages)

    return {good_stage: answer}


@pytest.mark.parametrize(
    "stage, bad, fragment",
    [
        ("segmentation", "Sure! Here are the segments.", 'non-empty "segments" list'),  # no JSON at all
        # cut-off JSON: the repaired object lacks the stand-alone rewrite
        ("segmentation", '{"segments": [{"text": "Ask whether', "needs 'text' and 'standalone'"),
        # a script's wording that the procedure does not contain
        (
            "segmentation",
            json.dumps(
                {
                    "segments": [
                        {"text": t, "standalone": s, "script": {"intent": "x", "wording": "Bye now!"}}
                        for t, s in SEGMENTS
                    ]
                }
            ),
            "wording is not copied",
        ),
        ("criteria", '{"criteria": [{"unit": 1, "criterion": "Is it nice?"}]}', "no criterion for unit(s) 2"),
        ("verification", '{"complete": "maybe"}', '"complete": true or false'),
        ("gradual", '{"splits": [{"criterion": 9, "into": ["a?", "b?"]}]}', "a number from 1 to 6"),
        ("gradual", '{"splits": [{"criterion": 1, "into": ["Does the assistant ask?"]}]}', "two or more"),
        ("dependency", '{"groups": [{"base": 1, "branches": [7]}]}', "groups"),
    ],
)
def test_a_malformed_answer_is_re_asked_hotter_naming_the_problem(stage, bad, fragment):
    dims, requests = build(bad_then(stage, bad))
    assert not isinstance(dims, Exception), dims
    asked = [r for r in requests if paper_stage(r["messages"]) == stage]
    first = next(i for i, r in enumerate(requests) if paper_stage(r["messages"]) == stage)
    assert requests[first]["temperature"] == 0.2 and requests[first + 1]["temperature"] == 0.4
    assert fragment in requests[first + 1]["messages"][-1]["content"]  # the re-ask says what was wrong
    assert len(asked) >= 2
    step = [s for s in dims.meta["pipeline"]["steps"] if s["problems"]][0]
    assert step["temperature"] == 0.2 and fragment in "; ".join(step["problems"])


def test_retries_are_bounded_and_the_error_names_the_tries_and_temperatures():
    error, requests = build(bad_then("segmentation", "no", "still no", "nope"), max_retries=2)
    assert isinstance(error, DataFormatError)
    assert "after 3 tries (temperature 0.2, 0.4, 0.6)" in str(error) and "segments" in str(error)
    assert [r["temperature"] for r in requests] == [0.2, 0.4, 0.6]


def test_the_env_says_the_judge_model_builds_the_dimensions_and_which_keys_to_change(tmp_path):
    sop = tmp_path / "payco.md"
    sop.write_text(f"---\nopening_line: Hello from PayCo.\n---\n{PAPER_SOP}\n")
    answer = paper_answerer(bad_then("segmentation", "no", "still no", "nope"))
    with CannedServer(lambda body: answer(body["messages"]), model="tiny-judge") as server:
        judge = {"base_url": server.base_url, "model": "tiny-judge", "api_key_env": None, "max_retries": 0}
        with pytest.raises(DataFormatError) as exc:
            gym.make(
                "ifgym/FlexBench-v0",
                sop=str(sop),
                dimensions="build",
                pipeline="paper",
                judge="llm",
                judge_llm=judge,
                user="llm",
                user_llm=judge,  # never called: the dimensions are built first
            )
    message = str(exc.value)
    assert "the judge model builds them, and tiny-judge" in message and server.base_url in message  # the role
    assert "judge.llm.model=NAME" in message and "env.dimensions=null" in message  # the keys that fix it
    assert "could not produce segments after 3 tries" in message  # the pipeline's own account stays


def never_complete(messages, n):
    return json.dumps({"complete": False, "missing": ["Never quote fees."], "invented": []})


def test_a_verification_that_never_completes_stops_after_the_bounded_rounds():
    error, requests = build({"verification": never_complete}, max_rounds=2)
    assert isinstance(error, IncompleteDimensionsError)
    assert "after 2 modification round(s)" in str(error) and "nothing was written" in str(error)
    assert [paper_stage(r["messages"]) for r in requests].count("modification") == 2
    assert "gradual" not in [paper_stage(r["messages"]) for r in requests]  # an incomplete set goes no further


def test_the_command_line_writes_nothing_when_the_verification_never_completes(tmp_path, capsys):
    sop = tmp_path / "payco.md"
    sop.write_text(f"---\nopening_line: Hello from PayCo.\n---\n{PAPER_SOP}\n")
    out = tmp_path / "dims" / "payco.dimensions.json"
    answer = paper_answerer({"verification": never_complete})
    with CannedServer(lambda body: answer(body["messages"]), model="m") as server:
        code = main(
            ["flexbench-dimensions", str(sop), str(out), f"base_url={server.base_url}", "model=m", "pipeline=paper"]
        )
    assert code == 2 and "did not find the criteria of 'payco' complete" in capsys.readouterr().err
    assert not out.exists() and not out.parent.exists()


def test_the_command_line_builds_with_the_papers_pipeline(tmp_path, capsys):
    sop = tmp_path / "payco.md"
    sop.write_text(f"---\nopening_line: Hello from PayCo.\n---\n{PAPER_SOP}\n")
    out = tmp_path / "payco.dimensions.json"
    answer = paper_answerer()
    with CannedServer(lambda body: answer(body["messages"]), model="m") as server:
        code = main(
            ["flexbench-dimensions", str(sop), str(out), f"base_url={server.base_url}", "model=m", "pipeline=paper"]
        )
    assert code == 0, capsys.readouterr().err
    dims = load_dimensions(str(out))
    assert dims.meta["pipeline"]["method"] == "paper" and len(dims.dimensions) == 7


def test_the_env_refuses_a_paper_pipeline_without_building_and_an_unknown_one():
    with pytest.raises(Exception, match="needs dimensions='build'"):
        gym.make("ifgym/FlexBench-v0", pipeline="paper")
    with pytest.raises(UnknownNameError, match="paper"):
        gym.make("ifgym/FlexBench-v0", pipeline="papr", dimensions="build")


def test_dependency_is_skipped_when_no_criterion_has_a_condition():
    sop = "Ask which platform the shop uses. Never quote fees."
    segments = [
        {
            "text": "Ask which platform the shop uses.",
            "standalone": "Ask which platform the shop uses.",
            "script": None,
        },
        {"text": "Never quote fees.", "standalone": "Never quote fees.", "script": None},
    ]
    rows = [
        {"unit": 1, "criterion": "Does the assistant ask for the platform?", "precondition": None},
        {"unit": 2, "criterion": "Does the assistant avoid quoting fees?", "precondition": "always"},
    ]
    answers = {
        "segmentation": json.dumps({"entities": [], "segments": segments}),
        "criteria": json.dumps({"criteria": rows}),
        "verification": json.dumps({"complete": True, "missing": [], "invented": []}),
        "gradual": json.dumps({"splits": []}),
    }
    with CannedServer(lambda body: answers[paper_stage(body["messages"])], model="m") as server:
        client = make_client({"base_url": server.base_url, "model": "m"}, "judge")
        dims = build_dimensions(sop, client, pipeline="paper")
        asked = [paper_stage(r["messages"]) for r in server.requests]
    assert asked == ["segmentation", "criteria", "verification", "gradual"]
    assert (
        dims.meta["pipeline"]["stages"][-1]["stage"] == "dependency"
        and "skipped" in dims.meta["pipeline"]["stages"][-1]
    )
    assert dims.groups == () and [d.kind for d in dims.dimensions] == ["base", "always"]
