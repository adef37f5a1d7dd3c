"""FlexBench from the command line: config files, `ifgym eval` reports, `ifgym flexbench-dimensions`."""

from __future__ import annotations

import csv
import inspect
import json

import pytest
from support.canned_judges import gold_or
from support.canned_server import CannedServer
from support.flexbench_pipeline import PAPER_SOP, TOY_SOP, paper_answerer, pipeline_answerer
from support.prompts import prompt_kind

from ifgym.cli import compose, main
from ifgym.envs.flexbench import FlexBenchEnv
from ifgym.rewards.flexbench import load_dimensions

# set by the judge group (judge, judge_mode, judge_llm), by the LLM config only (user_llm), or not a user setting
NOT_IN_YAML = {"judge", "judge_mode", "judge_llm", "user_llm", "render_mode", "env_name"}
# deliberate differences from the class defaults (the option's own caller); the CLI and gym.make agree otherwise
YAML_DEFAULTS = {
    "flexbench": {},
    "flexbench_llm": {"user": "llm"},
    "flexbench_paper": {
        "user": "llm",
        "dimensions": "build",
        "pipeline": "paper",
        "metrics": "paper",
        "patience": None,
    },
}


@pytest.mark.parametrize("option", sorted(YAML_DEFAULTS))
def test_env_options_list_every_argument_with_its_default(option):
    env = dict(compose([f"env={option}"]).env)
    params = {
        name: p.default for name, p in inspect.signature(FlexBenchEnv.__init__).parameters.items() if name != "self"
    }
    expected = {k: YAML_DEFAULTS[option].get(k, v) for k, v in params.items() if k not in NOT_IN_YAML}
    assert {k: env[k] for k in expected if k in env} == expected
    assert set(env) - {"id", "user_llm"} == set(expected)  # nothing missing, nothing unknown


@pytest.mark.parametrize(
    "override, key, value",
    [
        ("env.patience=3", "patience", 3),  # the audit's example: used to fail with a misleading did-you-mean
        ("env.patience=null", "patience", None),
        ("env.end_weight=2.5", "end_weight", 2.5),
        ("env.dimensions=build", "dimensions", "build"),
    ],
)
def test_every_env_key_can_be_overridden(override, key, value):
    assert compose(["env=flexbench", override]).env[key] == value


def test_flexbench_llm_with_the_default_rules_judge_is_one_clear_error(capsys):
    # the CLI's default judge group is rules; the env refuses it for a model caller and says how to fix it
    assert main(["eval", "env=flexbench_llm", "policy=scripted", "episodes=1", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert "judge=llm" in err and "user='llm'" in err


CALLER = ["Hi, what is this about?", "Yes, I'm the owner.", "We're on Shopify.", "Okay, thanks. Bye!"]


def models(messages):
    """The user model, end detector and judge behind one canned server, by system prompt."""
    if prompt_kind(messages) == "caller.speak":
        return CALLER[min(sum(m["role"] == "assistant" for m in messages), len(CALLER) - 1)]
    if prompt_kind(messages) == "caller.end":
        return json.dumps({"user_hung_up": False, "assistant_closed": False, "helpful": True})
    if prompt_kind(messages) == "judge.dimensions":
        n = messages[-1]["content"].count("<item ")
        return json.dumps({"items": [{"item": i, "label": "yes" if i == 1 else "skipped"} for i in range(1, n + 1)]})
    raise AssertionError(messages[0]["content"][:80])


def test_flexbench_llm_runs_end_to_end_with_judge_llm_and_writes_the_dimension_report(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run" / "episodes.jsonl"
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    # the gold set's transcripts (the judge's audit before the episodes) get perfect answers
    with CannedServer(gold_or(models), model="canned-model") as server:
        code = main(
            [
                "eval",
                "env=flexbench_llm",
                f"env.user_llm.base_url={server.base_url}",
                "env.user_llm.model=canned-model",
                "judge=llm",
                f"judge.llm.base_url={server.base_url}",
                "judge.llm.model=canned-model",
                "policy=scripted",
                "policy.replies=[Am I speaking with the person in charge?]",
                "episodes=2",
                f"output={out}",
                "progress=false",
                "plots=true",
            ]
        )
    printed = capsys.readouterr().out
    assert code == 0
    assert "compliance" in printed and "loose" not in printed.split("user simulator")[0]  # no copied column
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["loose"] == {} and summary["strict"]["end/user_hung_up"] == 1.0
    assert summary["strict"]["coverage"] == pytest.approx(1 / 4)  # "skipped" base actions do not count
    with (out.parent / "flexbench_dimensions.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == list(load_dimensions("merchant_onboarding").ids)
    assert rows[0]["yes"] == "2" and {r["kind"] for r in rows} == {"base", "branch", "always"}
    assert (out.parent / "flexbench_heatmap.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_with_plots_off_still_writes_the_table_but_no_heatmap(tmp_path):
    out = tmp_path / "episodes.jsonl"
    args = ["eval", "env=flexbench", "policy=scripted", "episodes=2", f"output={out}", "progress=false", "plots=false"]
    assert main(args) == 0
    assert (tmp_path / "flexbench_dimensions.csv").is_file() and not (tmp_path / "flexbench_heatmap.png").exists()
    assert not list(tmp_path.glob("*.dimensions.json"))  # the shipped set was not built here: no copy beside the run


def test_flexbench_dimensions_command_builds_and_saves_a_reviewable_file(tmp_path, capsys):
    sop = tmp_path / "toy.md"
    sop.write_text(f"---\nopening_line: Hello from Acme.\n---\n{TOY_SOP}\n")
    answer = pipeline_answerer()
    out = tmp_path / "dims" / "toy.dimensions.json"
    with CannedServer(lambda body: answer(body["messages"]), model="pipeline-model") as server:
        code = main(["flexbench-dimensions", str(sop), str(out), f"base_url={server.base_url}", "model=pipeline-model"])
        requests = len(server.requests)
    assert code == 0, capsys.readouterr().err
    dims = load_dimensions(str(out))
    assert dims.sop == "toy" and not dims.reviewed and len(dims.dimensions) == 5
    assert requests == 6  # segment, criteria, verify, modify, verify, logic: over HTTP
    assert "wrote 5 dimensions (3 base actions, 2 branches, 0 always-on rules)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["flexbench-dimensions", "merchant_onboarding"], "usage: ifgym flexbench-dimensions"),  # no OUT
        (["flexbench-dimensions", "merchant_onbording", "x.json"], "Did you mean 'merchant_onboarding'"),
        (["flexbench-dimensions", "merchant_onboarding", "x.json", "bogus=1"], "bogus"),  # not an LLM setting
    ],
)
def test_flexbench_dimensions_command_errors(args, fragment, capsys):
    assert main(args) == 2
    assert fragment in capsys.readouterr().err


def test_flexbench_paper_runs_the_papers_pipeline_and_leads_with_equations_6_and_7(tmp_path, capsys, monkeypatch):
    sop = tmp_path / "payco.md"
    sop.write_text(f"---\nopening_line: Hello from PayCo.\n---\n{PAPER_SOP}\n")
    out = tmp_path / "run" / "episodes.jsonl"
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))
    pipeline = paper_answerer()

    def model(messages):
        if prompt_kind(messages) == "caller.design":
            return json.dumps(
                {"business_context": "A shop.", "goal": "Get paid.", "typical_questions": [], "catchphrases": []}
            )
        if prompt_kind(messages) is None:
            return pipeline(messages)  # the pipeline's stages (one system prompt, told apart by their task)
        return models(messages)

    with CannedServer(gold_or(model), model="canned-model") as server:
        code = main(
            [
                "eval",
                "env=flexbench_paper",
                f"env.sop={sop}",
                f"env.user_llm.base_url={server.base_url}",
                "env.user_llm.model=canned-model",
                "judge=llm",
                f"judge.llm.base_url={server.base_url}",
                "judge.llm.model=canned-model",
                "policy=scripted",
                "policy.replies=[Am I speaking with the person in charge?]",
                "episodes=2",
                f"output={out}",
                "progress=false",
                "plots=false",
            ]
        )
        temperatures = {r.get("temperature") for r in server.requests if prompt_kind(r["messages"]) is None}
    printed = capsys.readouterr().out
    assert code == 0, printed
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["headline"][:2] == ["Coverage", "Achievement"]
    strict = summary["strict"]
    # 7 dimensions built (3 base actions, 3 branches of d1 in one exclusive cluster, 1 rule); the judge says
    # yes to d1 and "skipped" to the rest: 1 of 3 base actions attempted per call; the branches were due and
    # not done (no), counted once per call as one cluster; the rule unknown (skipped is no verdict for a rule)
    assert strict["Coverage"] == pytest.approx(1 / 3) and "coverage" not in strict
    assert strict["Achievement"] == 0.0 and strict["exclusive_conflicts"] == 2
    assert strict["coverage_per_call"] == pytest.approx(1 / 3)
    assert temperatures == {0.2}  # the pipeline at the paper's decoding
    assert "not FlexBench's protocol:" in printed and "ifgym's own words" in printed
    assert "Gradual is read as" in printed and "temperature 0.2, each re-ask 0.2 hotter" in printed
    built = load_dimensions(str(out.parent / "payco.dimensions.json"))
    assert [s["stage"] for s in built.meta["pipeline"]["stages"]][-2:] == ["gradual", "dependency"]
