"""`ifgym reproduce PAPER smoke=true`: every row of each paper's tables, printed in its layout with the paper column.

The model under test, the judge and the user are canned OpenAI-compatible servers on 127.0.0.1
(standing in for served models: the smoke run's embedded model would take minutes per paper on two
cores), except in the StructFlowBench run, whose model under test is the embedded smollm2-135m.
"""

from __future__ import annotations

import json
import re

import pytest
from support.canned_judges import gold_or, yes_sayer
from support.canned_server import CannedServer
from support.canned_user import scripted_user_model, stating_draft
from support.paths import DATA
from support.prompts import prompt_kind

from ifgym.cli import compose, main
from ifgym.runner.paper_tables import decoding_of
from ifgym.runner.reproduce import compose_runs, plan


def yes_judge(body):
    """The gold set's answers for the audit before each row, then yes to every item of the episodes."""
    return gold_or(yes_sayer)(body)


def roles(tmp_path, policy, judge, *extra):
    return [
        f"out={tmp_path / 'rep'}",
        "smoke=true",
        "progress=false",
        "plots=false",
        f"policy.llm.base_url={policy.base_url}",
        "policy.llm.model=canned-model",
        f"judge.llm.base_url={judge.base_url}",
        "judge.llm.model=canned-model",
        *extra,
    ]


def tables_of(tmp_path):
    return json.loads((tmp_path / "rep" / "tables.json").read_text())


def paper_lines(out, label):
    """The row `label`'s line and the paper's line under it."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"[smoke] {label} ") and "smoke run" in line)
    return lines[at], lines[at + 1]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "cache"))


def test_graphif_runs_table_1_and_3_with_one_decoding(tmp_path, capsys):
    with CannedServer(replies=["An answer."]) as policy, CannedServer(yes_judge) as judge:
        code = main(["reproduce", "graphif", *roles(tmp_path, policy, judge)])
        wire = {(r.get("temperature"), r.get("top_p"), r.get("top_k"), r.get("max_tokens")) for r in policy.requests}
    out = capsys.readouterr().out
    assert code == 0, out
    # every call of every row (LLM-only, Self-Refine, GraphIF and its ablations) decodes alike
    assert wire == {(0.7, 0.8, 20, 48)}
    assert "[smoke] GraphIF Table 1" in out and "[smoke] GraphIF Table 3 (ablations)" in out
    assert "decoding (every row): temperature 0.7, top_p 0.8, top_k 20, max_tokens 48" in out
    for label in ("LLM-only", "Self-Refine", "GraphIF", "w/o Agent", "w/o Graph Prompt"):
        row, paper = paper_lines(out, label)
        # the judge says yes to every item: 100 % on each metric; no published number to set beside it
        assert row.split()[-4:] == ["100.0"] * 4 and "smoke run" in row
        assert paper.startswith("[smoke] ") and "paper" in paper and paper.split()[-4:] == ["—"] * 4
    assert all(line.startswith("[smoke]") for line in out.splitlines() if line.strip())
    data = tables_of(tmp_path)
    assert data["smoke"] and data["repeats"] == 1 and [t["id"] for t in data["tables"]] == ["table1", "table3"]
    markdown = (tmp_path / "rep" / "tables.md").read_text()
    assert markdown.count("| smoke run |") == 3 * 2 and markdown.count("| paper | — |") == 3 * 2  # 3 rows a table


def test_the_rows_of_a_table_share_the_papers_decoding_once_composed():
    # today's presets differ: truncation answers in 200 tokens, self_refine at temperature 0 in 300
    url = "policy.llm.base_url=http://127.0.0.1:8000/v1"
    the_plan = plan(["context_agent", url, "env.dataset=/data/ntm.jsonl"])
    composed = compose_runs(the_plan, compose)
    from omegaconf import OmegaConf

    decodings = {key: decoding_of(OmegaConf.to_container(cfg, resolve=True)) for key, (_, cfg) in composed.items()}
    assert set(key for key, _ in decodings) == {
        "full_history",
        "truncation",
        "context_agent",
        "wo_tree",
        "wo_retriever",
    }
    assert {json.dumps(d, sort_keys=True) for d in decodings.values()} == {
        json.dumps({"temperature": 0.0, "top_p": None, "max_tokens": 1024, "extra": {}}, sort_keys=True)
    }
    graphif = compose_runs(plan(["graphif", url, "env.dataset=/data/g.jsonl", "repeats=1"]), compose)
    for _, cfg in graphif.values():
        llm = OmegaConf.to_container(cfg, resolve=True)["policy"]["llm"]
        assert (llm["temperature"], llm["top_p"], llm["max_tokens"], llm["extra"]) == (0.7, 0.8, 2048, {"top_k": 20})


def test_context_agent_tables_3_and_4_on_a_made_up_ntm_file(tmp_path, capsys):
    with CannedServer(replies=["An answer."]) as policy, CannedServer(yes_judge) as judge:
        args = roles(tmp_path, policy, judge, f"env.dataset={DATA / 'ntm' / 'made_up.jsonl'}")
        code = main(["reproduce", "context_agent", *args, "policy.context_agent.embedder=hashing"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[smoke] Context-Agent Table 3" in out and "[smoke] Context-Agent Table 4 (ablations)" in out
    header = next(line for line in out.splitlines() if "method" in line and "TCR Gain" in line)
    assert re.search(
        r"TCR\s+TCR@10\s+TCR@15\s+TCR@20\s+TCR@25\s+TCR@other\s+ACT\s+ACT@10.*ACT@25\s+TCR Gain\s+ACT Drop", header
    )
    tables = {t["id"]: t for t in tables_of(tmp_path)["tables"]}
    rows = {r["row"]: r["cells"] for r in tables["table3"]["rows"]}
    # a yes-saying judge: every dialogue's TCR is 100 %, so no row gains on Full-History
    assert {r: c["TCR"]["mean"] for r, c in rows.items()} == dict.fromkeys(rows, 100.0)
    assert {c["TCR Gain"]["mean"] for c in rows.values()} == {0.0}
    # Truncation's context is shorter than the full history's: a positive drop, as its ACT says
    act = {r: c["ACT"]["mean"] for r, c in rows.items()}
    drop = 100 * (act["full_history"] - act["truncation"]) / act["full_history"]
    assert rows["truncation"]["ACT Drop"]["mean"] == pytest.approx(drop) and drop > 0
    assert [r["row"] for r in tables["table4"]["rows"]] == ["context_agent", "wo_tree", "wo_retriever"]


def test_evolif_main_row_without_system_prompt_and_the_patience_table(tmp_path, capsys):
    def rating(messages):
        n = messages[-1]["content"].count("<item")
        return json.dumps({"scores": [{"item": i + 1, "score": 8} for i in range(max(n, 1))]})

    def user(body):
        return scripted_user_model(generate=stating_draft)(body["messages"])

    with (
        CannedServer(replies=["An answer."]) as policy,
        CannedServer(gold_or(rating)) as judge,
        CannedServer(user) as user_model,
    ):
        args = roles(tmp_path, policy, judge, f"env.user_llm.base_url={user_model.base_url}")
        code = main(["reproduce", "evolif", *args, "env.user_llm.model=canned-model", "patiences=1,3"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[smoke] EvolIF main results" in out and "[smoke] EvolIF patience table" in out
    tables = {t["id"]: t for t in tables_of(tmp_path)["tables"]}
    assert [r["label"] for r in tables["main"]["rows"]] == ["the model", "w/o system prompt"]
    # patience 3 is the paper's setting: the main row, played once
    assert [r["row"] for r in tables["patience"]["rows"]] == ["patience_1", "main"]
    assert sorted(p.name for p in (tmp_path / "rep").iterdir() if p.is_dir()) == [
        "main",
        "patience_1",
        "wo_system_prompt",
    ]
    assert tables["main"]["columns"] == ["CSR", "ISR", "EDR_len", "EDR_acc", "EDR_succ", "EDR_lss", "REC", "STA"]


def flexbench_models(messages):
    """The caller, its end detector and the judge behind one canned server, by system prompt."""
    kind = prompt_kind(messages)
    if kind == "caller.design":
        return json.dumps(
            {"business_context": "A shop.", "goal": "Get paid.", "typical_questions": [], "catchphrases": []}
        )
    if kind == "caller.speak":
        return "Hi, what is this about?"
    if kind == "caller.end":
        return json.dumps({"user_hung_up": False, "assistant_closed": False, "helpful": True})
    if kind == "judge.dimensions":
        n = messages[-1]["content"].count("<item ")
        return json.dumps({"items": [{"item": i, "label": "yes" if i == 1 else "skipped"} for i in range(1, n + 1)]})
    raise AssertionError(messages[0]["content"][:80])


def test_flexbench_table_2_and_the_consistency_of_two_corpora(tmp_path, capsys):
    with CannedServer(replies=["An answer."]) as policy, CannedServer(gold_or(flexbench_models)) as models:
        args = roles(tmp_path, policy, models, f"env.user_llm.base_url={models.base_url}")
        code = main(["reproduce", "flexbench", *args, "env.user_llm.model=canned-model"])
        temperatures = {r.get("temperature") for r in policy.requests}
    out = capsys.readouterr().out
    assert code == 0, out
    assert temperatures == {0.3}  # §5.1: the evaluated models at 0.3
    assert "[smoke] FlexBench Table 2 (%)" in out and "[smoke] FlexBench §5.3 consistency" in out
    tables = {t["id"]: t for t in tables_of(tmp_path)["tables"]}
    assert tables["table2"]["columns"] == ["Coverage", "Achievement"]
    # the same judge's answers on both corpora: every dimension's rate agrees, so nothing differs
    cells = tables["consistency"]["rows"][0]["cells"]
    assert cells["MAD"]["mean"] == 0.0 and cells["Coverage diff"]["mean"] == 0.0 and cells["dimensions"]["mean"] > 0


def test_structflow_on_the_embedded_model_then_resumed(tmp_path, capsys):
    with CannedServer(yes_judge) as judge:
        args = [
            f"out={tmp_path / 'rep'}",
            "smoke=true",
            "progress=false",
            "plots=false",
            f"judge.llm.base_url={judge.base_url}",
            "judge.llm.model=canned-model",
        ]
        assert main(["reproduce", "structflow", *args]) == 0
        first = len(judge.requests)
        assert main(["reproduce", "structflow", *args]) == 0  # every seed finished: nothing is played again
        again = len(judge.requests) - first
    out = capsys.readouterr().out
    assert again == 0
    assert "model under test: the embedded smollm2-135m" in out
    for title in ("Table 2", "intra-turn constraint types", "tasks (WCSR per task"):
        assert f"[smoke] StructFlowBench {title}" in out
    table2 = tables_of(tmp_path)["tables"][0]
    assert table2["columns"] == [
        "follow-up", "refinement", "expansion", "summary", "recall", "CSR", "ISR", "WCSR", "DRFR"
    ]  # fmt: skip
    summary = json.loads((tmp_path / "rep" / "model" / "summary.json").read_text())
    assert summary["episodes"] == 2


def test_shards_of_every_row_then_the_table_from_their_episodes(tmp_path, capsys):
    with CannedServer(replies=["An answer."]) as policy, CannedServer(yes_judge) as judge:
        args = ["reproduce", "structflow", *roles(tmp_path, policy, judge), "episodes=3"]
        assert main([*args, "shard=0/2"]) == 0 and main([*args, "shard=1/2"]) == 0
        played = len(policy.requests)
        assert "run the command without shard=" in capsys.readouterr().out
        assert not (tmp_path / "rep" / "tables.json").exists()  # no table from half the seeds
        assert main(args) == 0
        assert len(policy.requests) == played  # the shards' seeds are not played again
    folder = tmp_path / "rep" / "model"
    assert sorted(p.name for p in folder.glob("episodes*.jsonl")) == [
        "episodes.jsonl",
        "episodes.shard-0-of-2.jsonl",
        "episodes.shard-1-of-2.jsonl",
    ]
    episodes = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["seed"] for e in episodes) == [0, 1, 2]
    assert tables_of(tmp_path)["tables"][0]["rows"][0]["cells"]["CSR"]["mean"] == 100.0


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["reproduce"], "name the paper first"),
        (["reproduce", "graphf"], "Did you mean"),
        (["reproduce", "graphif"], "env.dataset=PATH"),
        (["reproduce", "structflow"], "give policy.llm.base_url=URL policy.llm.model=M"),
        (["reproduce", "context_agent", "smoke=true"], "NTM is not shipped"),
        (["reproduce", "structflow", "policy=openai"], "chosen by the paper's rows"),
        (["reproduce", "structflow", "repeats=0"], "repeats=0 must be >= 1"),
        (["reproduce", "structflow", "patiences=1,2"], "EvolIF's patience table only"),
    ],
)
def test_mistakes_are_one_error_line_naming_the_fix(args, fragment, capsys):
    assert main(args) == 2
    assert fragment in capsys.readouterr().err
