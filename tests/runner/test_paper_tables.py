"""A paper's table from its rows' summaries: mean ± SD over repeats, TCR Gain, ACT Drop, published numbers."""

from __future__ import annotations

import math

import pytest

from ifgym.errors import ConfigError
from ifgym.runner.paper_tables import (
    Column,
    TableSpec,
    build_table,
    load_published,
    mean_sd,
    paper_model,
    shared_decoding,
    table_lines,
)
from ifgym.runner.reproduce import PAPERS


def summary(**strict):
    return {"strict": strict}


def test_mean_and_sample_sd_over_repeats():
    # 0.5, 0.7, 0.9: mean 0.7; deviations -0.2, 0, 0.2 -> squares sum 0.08, / (3 - 1) = 0.04 -> SD 0.2
    mean, sd = mean_sd([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7) and sd == pytest.approx(0.2)
    assert mean_sd([0.4]) == (0.4, None)  # one run: no SD
    assert mean_sd([0.2, math.nan, 0.4]) == (pytest.approx(0.3), pytest.approx(math.sqrt(0.02)))  # NaN left out
    nan, none = mean_sd([math.nan])
    assert math.isnan(nan) and none is None


def test_repeats_print_as_mean_plus_minus_sd_in_the_papers_units():
    spec = TableSpec("table1", "GraphIF Table 1", ("llm_only", "graphif"), (Column("CSR", ("CSR",), scale=100.0),))
    runs = {
        "llm_only": [summary(CSR=0.5), summary(CSR=0.7), summary(CSR=0.9)],
        "graphif": [summary(CSR=0.8)],
    }
    table = build_table(spec, runs, {"llm_only": "LLM-only", "graphif": "GraphIF"}, load_published("graphif"), None)
    cells = {row["row"]: row["cells"]["CSR"] for row in table["rows"]}
    assert cells["llm_only"]["mean"] == pytest.approx(70.0) and cells["llm_only"]["sd"] == pytest.approx(20.0)
    assert cells["llm_only"]["repeats"] == 3 and cells["graphif"]["sd"] is None
    text = "\n".join(table_lines(table))
    assert "70.0 ± 20.0" in text and "80.0" in text
    # no published numbers for GraphIF: every paper line is a dash, and the table says why
    assert text.count("—") == 2 and "published numbers missing" in text


NTM_RUNS = {
    "full_history": [summary(TCR=0.80, ACT=4000.0, **{"ACT/10": 3000.0})],
    "truncation": [summary(TCR=0.60, ACT=1000.0)],
    "context_agent": [summary(TCR=0.84, ACT=2000.0)],
}
NTM_LABELS = {"full_history": "Full-History", "truncation": "Truncation (k=4)", "context_agent": "Context-Agent"}


def ntm_table(model):
    spec = next(t for t in PAPERS["context_agent"].tables if t.id == "table3")
    return build_table(spec, NTM_RUNS, NTM_LABELS, load_published("context_agent"), model)


def test_tcr_gain_and_act_drop_against_full_history():
    rows = {row["row"]: row["cells"] for row in ntm_table(None)["rows"]}
    # Context-Agent: (84 - 80) / 80 = +5.0 %; (4000 - 2000) / 4000 = 50.0 % less context
    assert rows["context_agent"]["TCR Gain"]["mean"] == pytest.approx(5.0)
    assert rows["context_agent"]["ACT Drop"]["mean"] == pytest.approx(50.0)
    # Truncation: (60 - 80) / 80 = -25.0 %; (4000 - 1000) / 4000 = 75.0 %
    assert rows["truncation"]["TCR Gain"]["mean"] == pytest.approx(-25.0)
    assert rows["truncation"]["ACT Drop"]["mean"] == pytest.approx(75.0)
    assert rows["full_history"]["TCR Gain"]["mean"] == 0.0 and rows["full_history"]["ACT@10"]["mean"] == 3000.0
    assert math.isnan(rows["truncation"]["ACT@10"]["mean"])  # not in its summary: n/a, never 0


def test_published_numbers_beside_the_rows_of_the_model_the_paper_ran():
    assert paper_model(load_published("context_agent"), "openai/gpt-4.1-2025-04-14") == "GPT-4.1"
    assert paper_model(load_published("context_agent"), "DeepSeek-V3") == "DeepSeek-V3"
    assert paper_model(load_published("context_agent"), "qwen2.5-7b-instruct") is None
    table = ntm_table("gpt-4.1")
    published = {row["row"]: row["published"] for row in table["rows"]}
    # the paper's Table 3, GPT-4.1: Context-Agent 84.5 % TCR, ACT 2108 at 10 turns; TCR per length not transcribed
    assert published["context_agent"]["TCR"] == 84.5 and published["context_agent"]["ACT@10"] == 2108
    assert published["full_history"]["ACT@25"] == 12673 and published["truncation"]["TCR@10"] is None
    lines = table_lines(table)
    paper_line = lines[lines.index(next(x for x in lines if x.startswith("Context-Agent") and "this run" in x)) + 1]
    assert "paper (GPT-4.1)" in paper_line and "84.5" in paper_line and "2108" in paper_line
    # another model: no number beside any row, and the table names the models the paper ran
    other = "\n".join(table_lines(ntm_table("qwen2.5-7b-instruct")))
    assert "84.5" not in other and "GPT-4.1, DeepSeek-V3" in other and "qwen2.5-7b-instruct" in other


def test_shared_decoding_names_the_rows_and_fields_that_differ():
    a = {"policy": {"llm": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 2048, "extra": {"top_k": 20}}}}
    b = {"policy": {"llm": {"temperature": 0.0, "top_p": None, "max_tokens": 1024, "extra": {}}}}
    assert shared_decoding({"graphif": a, "again": a})["max_tokens"] == 2048
    with pytest.raises(ConfigError, match=r"'graphif' and 'self_refine'.*temperature 0\.7 vs 0\.0.*max_tokens 2048"):
        shared_decoding({"graphif": a, "self_refine": b})


def test_every_published_file_names_its_source_and_why_numbers_are_missing():
    for name in PAPERS:
        published = load_published(name)
        assert published["source"] and published["paper"]
        for spec in PAPERS[name].tables:
            entry = published["tables"][spec.id]
            assert "table" in entry and "page" in entry
            assert entry["numbers"] or entry["missing"]  # a table without numbers says why
