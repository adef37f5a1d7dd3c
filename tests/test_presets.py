"""benchmarks/presets.py: every paper preset has its row, and the canned server it runs answers each role usably."""

from __future__ import annotations

import importlib.util
import json
import sys

from support.paths import REPO

from ifgym.core import ChecklistItem
from ifgym.llm import CannedClient
from ifgym.rewards.structflow.judge import ChecklistJudge, parse_judgements

spec = importlib.util.spec_from_file_location("bench_presets", REPO / "benchmarks" / "presets.py")
presets = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = presets  # its dataclasses look their module up
spec.loader.exec_module(presets)


def test_every_paper_preset_has_a_row():
    on_disk = {p.stem for p in (REPO / "conf" / "env").glob("*_paper.yaml")}
    assert on_disk >= {"evolif_paper", "structflow_paper"}
    assert {p.name for p in presets.PRESETS} == on_disk  # a new *_paper preset needs its one-line row


def test_the_server_answers_the_paper_judge_usably_and_the_policy_with_its_reply():
    items = [ChecklistItem(f"q{i}", f"Is question {i} met?", "Content Constraint") for i in range(3)]
    client = CannedClient(lambda m: presets.answer(m, "A reply."), role="judge")
    judge = ChecklistJudge(client, mode="paper")
    verdicts = judge.judge("A reply.", items, [{"role": "user", "content": "Write it."}])
    assert [v.label for v in verdicts] == ["yes"] * 3 and judge.stats["calls"] == 1
    assert parse_judgements(presets.answer(client.requests[0], "x"), 3).complete(3)
    assert presets.answer([{"role": "user", "content": "Write about rivers."}], "A reply.") == "A reply."
    assert json.loads(presets.answer(client.requests[0], "x"))  # JSON, not the policy's reply


def test_the_server_answers_flexbench_papers_pipeline_stages_on_the_toy_sop():
    from ifgym.rewards.flexbench.pipeline import paper_segment_messages

    presets.PIPELINE = presets._pipeline_model()  # as serve() makes it
    sop = presets.toy_sop()
    assert sop.startswith("---\nopening_line: ") and "Never quote fees." in sop
    messages = paper_segment_messages(sop.split("---\n", 2)[2], "Hello.")
    assert presets.pipeline_stage(messages) == "segmentation"
    assert "segments" in json.loads(presets.answer(messages, "A reply."))
    assert presets.pipeline_stage([{"role": "user", "content": "Write about rivers."}]) is None
