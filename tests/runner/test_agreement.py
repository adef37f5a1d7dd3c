"""`ifgym agreement`: the labelling sample, the labels file, kappa by hand, the summary and W&B (offline)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from support.made_up_run import write_made_up_run
from support.wandb_reader import inspect

from ifgym.cli import main
from ifgym.core import Constraint, Episode, TurnRecord, TurnSpec, Verdict
from ifgym.core.stats import CISettings
from ifgym.errors import DataFormatError
from ifgym.runner.agreement import LABELS_FILE, agreement, append_label, read_labels, sample_items, turn_items
from ifgym.runner.rollout import read_episodes

EMOTION = Constraint("emotion.tone", {"emotion": "happy"})
STYLE = Constraint("style.register", {"style": "formal"})

# (group's constraint, human, judge): one episode each. By hand:
# all 11: agree on 8, po = 8/11; human yes 6 / no 5; judge yes 5 / no 5 / unknown 1;
#   pe = 6/11*5/11 + 5/11*5/11 = 55/121; kappa = (88/121 - 55/121) / (66/121) = 1/2;
#   accuracy 8/11; the human's 5 "no": the judge said yes to 1, yes-rate 1/5.
# emotion (first 6): po = 4/6, human 3/3, judge 3/3, pe = 1/2, kappa = (2/3 - 1/2) / (1/2) = 1/3.
# style (last 5): po = 4/5, human yes 3 no 2, judge yes 2 no 2 unknown 1, pe = 6/25 + 4/25 = 2/5,
#   kappa = (4/5 - 2/5) / (3/5) = 2/3; no human "no" said yes by the judge: yes-rate 0.
PAIRS = [
    (EMOTION, "yes", "yes"),
    (EMOTION, "yes", "yes"),
    (EMOTION, "yes", "no"),
    (EMOTION, "no", "no"),
    (EMOTION, "no", "yes"),
    (EMOTION, "no", "no"),
    (STYLE, "yes", "yes"),
    (STYLE, "no", "no"),
    (STYLE, "yes", "yes"),
    (STYLE, "no", "no"),
    (STYLE, "yes", "unknown"),
]


def episodes_and_labels():
    episodes, labels = [], []
    for n, (constraint, human, judge) in enumerate(PAIRS):
        turn = TurnRecord(
            1, "hi", TurnSpec(constraints=(constraint,)), "reply", [Verdict(judge, "", "judge:m")], [], 0.0
        )
        episodes.append(Episode(f"ep-{n}", "ifgym/EvolIF-v1", n, [turn]))
        labels.append({"key": f"ep-{n}/0/0", "human": human})
    return episodes, labels


def test_kappa_accuracy_and_yes_rate_match_the_hand_computed_values():
    episodes, labels = episodes_and_labels()
    result = agreement(episodes, labels, CISettings(resamples=200))
    everything, emotion, style = (result["groups"][g] for g in ("all", "emotion", "style"))
    assert everything["n"] == 11 and everything["kappa"] == pytest.approx(1 / 2)
    assert everything["accuracy"] == pytest.approx(8 / 11) and everything["yes_rate_negatives"] == pytest.approx(1 / 5)
    assert emotion["kappa"] == pytest.approx(1 / 3) and style["kappa"] == pytest.approx(2 / 3)
    assert style["yes_rate_negatives"] == 0.0 and emotion["yes_rate_negatives"] == pytest.approx(1 / 3)
    low, high = everything["ci"]["kappa"]
    assert low <= 0.5 <= high and low < high  # episodes resampled: an interval around the point
    assert result["matched"] == 11 and result["unmatched"] == []


def test_a_relabelled_item_counts_once_with_its_last_label():
    episodes, labels = episodes_and_labels()
    flipped = labels + [{"key": "ep-2/0/0", "human": "no"}, {"key": "ep-404/0/0", "human": "no"}]  # 3rd now agrees
    result = agreement(episodes, flipped, CISettings(resamples=50))
    assert result["groups"]["all"]["n"] == 11 and result["groups"]["all"]["accuracy"] == pytest.approx(9 / 11)
    assert result["unmatched"] == ["ep-404/0/0"]


def test_the_sample_is_stratified_by_group_and_judge_label_and_seeded(tmp_path):
    write_made_up_run(tmp_path, 60)
    episodes = read_episodes(tmp_path / "episodes.jsonl")
    sample = sample_items(episodes, 24, seed=3)
    assert sample == sample_items(episodes, 24, seed=3) and sample != sample_items(episodes, 24, seed=4)
    strata = Counter((s["group"], s["judge"]) for s in sample)
    judged = Counter()
    for e in episodes:
        for t in e.turns:
            for (_, group, _), v in zip(turn_items(t), t.verdicts, strict=True):
                if v.source.startswith("judge"):
                    judged[(group, v.label)] += 1
    assert "format" not in {g for g, _ in strata}  # a rule's verdict is never offered
    # equal allocation: every stratum gets min(its size, the share) and the shares differ by at most one
    share = sorted(strata.values())
    assert len(sample) == 24 and share[-1] - share[0] <= 1 or all(strata[s] == judged[s] for s in strata)
    assert set(strata) <= set(judged)
    big = sample_items(episodes, 10_000)
    assert Counter((s["group"], s["judge"]) for s in big) == judged  # all of them when asked for more


def test_append_label_checks_and_keeps_every_line(tmp_path):
    append_label(tmp_path, {"key": "ep-1/0/1", "human": "yes", "judge": "no", "extra": "dropped"})
    append_label(tmp_path, {"key": "ep-1/0/1", "human": "no"})
    with pytest.raises(DataFormatError, match="human"):
        append_label(tmp_path, {"key": "ep-1/0/1", "human": "perhaps"})
    with pytest.raises(DataFormatError, match="key"):
        append_label(tmp_path, {"human": "yes"})
    lines = read_labels(tmp_path)
    assert [(x["key"], x["human"]) for x in lines] == [("ep-1/0/1", "yes"), ("ep-1/0/1", "no")]
    assert "extra" not in lines[0] and lines[0]["judge"] == "no" and lines[0]["time"]
    with (tmp_path / LABELS_FILE).open("a") as f:
        f.write('{"key": "ep-2/0/1", "hu')  # an interrupted append: ignored
    assert len(read_labels(tmp_path)) == 2


def label_some(folder, count=20):
    episodes = read_episodes(folder / "episodes.jsonl")
    for n, item in enumerate(sample_items(episodes, count)):
        said = item["judge"] if item["judge"] != "unknown" else "no"
        human = said if n % 4 else ("no" if said == "yes" else "yes")  # every 4th disagrees
        append_label(folder, {"key": item["key"], "human": human})


def test_agreement_command_writes_the_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    write_made_up_run(tmp_path, 40)
    assert main(["agreement", str(tmp_path)]) == 2
    assert "ifgym view" in capsys.readouterr().err  # no labels yet: says how to make them
    label_some(tmp_path)
    assert main(["agreement", str(tmp_path), "resamples=100"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    result = summary["agreement"]
    assert result["groups"]["all"]["n"] == 20 and result["ci_settings"]["resamples"] == 100
    assert summary["strict"]["CSR"] == 0.51234  # the rest of the summary is kept
    assert out.splitlines()[1].split()[:2] == ["group", "n"] and "all" in out and "W&B" not in out
    assert main(["agreement", str(tmp_path), "resample=3"]) == 2
    assert "unknown option(s) resample" in capsys.readouterr().err


def test_agreement_goes_to_the_runs_wandb_run(tmp_path, monkeypatch, capsys):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    write_made_up_run(tmp_path, 40)
    run = wandb.init(project="ifgym", dir=str(tmp_path), mode="offline", name="made-up")  # as eval's logger does
    run_id = run.id
    run.finish()
    # eval stores the W&B run it logged to in run.json; agreement resumes that run by its id
    stored = {"id": run_id, "project": "ifgym", "entity": None, "mode": "offline", "url": None}
    (tmp_path / "run.json").write_text(json.dumps({"wandb": stored}))
    label_some(tmp_path)
    assert main(["agreement", str(tmp_path), "resamples=50"]) == 0
    assert "W&B: agreement added to the run's summary (offline)" in capsys.readouterr().out
    # W&B names a resumed run's folder like the first, with "-1" added when both start in the same second
    files = sorted(tmp_path.glob(f"wandb/offline-run-*-{run_id}*/run-{run_id}.wandb"))
    assert len(files) == 2  # the run, and its resumption with the agreement
    summary = json.loads(inspect(files[-1], "--summary"))["summary"]
    kappa = json.loads((tmp_path / "summary.json").read_text())["agreement"]["groups"]["all"]["kappa"]
    assert summary["agreement/all/kappa"] == pytest.approx(kappa) and summary["agreement/all/n"] == 20
    assert "agreement/all/kappa/ci_low" in summary


def test_agreement_of_a_run_without_a_stored_wandb_id_stays_local(tmp_path, monkeypatch, capsys):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    write_made_up_run(tmp_path, 40)
    wandb.init(project="ifgym", dir=str(tmp_path), mode="offline", name="made-up").finish()  # no id in run.json
    label_some(tmp_path)
    assert main(["agreement", str(tmp_path), "resamples=50"]) == 0
    captured = capsys.readouterr()
    assert "W&B: agreement added" not in captured.out and "stores no W&B run id" in captured.err
    assert len(list(tmp_path.glob("wandb/offline-run-*"))) == 1  # no run resumed or started
    assert "agreement" in json.loads((tmp_path / "summary.json").read_text())
