"""Sharded runs: `ifgym eval shard=I/N` writes its own files, `ifgym merge` (or the next run) combines them.

Every run goes through the CLI with the offline scripted policy (or the canned OpenAI-compatible
server on 127.0.0.1 where the test counts model calls); the files are the ones the runs wrote.
"""

from __future__ import annotations

import json
import shutil

import pytest
from support.canned_server import CannedServer, eval_args

from ifgym.cli import main
from ifgym.errors import ConfigError
from ifgym.llm import Usage
from ifgym.runner.shards import Shard

RUN = ["eval", "policy=scripted", "env.max_turns=2", "progress=false", "ci_resamples=200"]


def lines_by_seed(path):
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        out.setdefault(json.loads(line)["seed"], []).append(line)
    return out


def seeds_in(path):
    return [json.loads(line)["seed"] for line in path.read_text(encoding="utf-8").splitlines()]


def shard_runs(folder, episodes=5, shards=2, extra=()):
    for i in range(shards):
        args = [*RUN, f"episodes={episodes}", f"output={folder / 'episodes.jsonl'}", f"shard={i}/{shards}", *extra]
        assert main(args) == 0


@pytest.mark.parametrize(
    "text",
    [
        "2/2",  # index past the last shard
        "0/0",  # no shards
        "1",  # no count
        "-1/2",  # negative index
        "a/b",  # not numbers
    ],
)
def test_a_shard_is_i_of_n_with_i_below_n(text):
    with pytest.raises(ConfigError, match="shard must be I/N with 0 <= I < N"):
        Shard.parse(text)


def test_shards_take_the_seeds_by_position():
    assert Shard.parse("0/3").seeds([10, 11, 12, 13, 14, 15, 16]) == [10, 13, 16]
    assert Shard.parse(" 2 / 3 ").seeds([10, 11, 12, 13, 14, 15, 16]) == [12, 15]


def test_two_shards_merged_are_the_unsharded_run(tmp_path, capsys):
    sharded, whole = tmp_path / "sharded", tmp_path / "whole"
    shard_runs(sharded)
    # each shard wrote files of its own, named after it; nothing of the run's own yet
    assert seeds_in(sharded / "episodes.shard-0-of-2.jsonl") == [0, 2, 4]
    assert seeds_in(sharded / "episodes.shard-1-of-2.jsonl") == [1, 3]
    for name in ("run.shard-0-of-2.json", "summary.shard-1-of-2.json"):
        assert (sharded / name).is_file()
    assert not (sharded / "episodes.jsonl").exists() and not (sharded / "summary.json").exists()
    assert json.loads((sharded / "summary.shard-1-of-2.json").read_text())["episodes"] == 2

    assert main(["merge", str(sharded)]) == 0
    assert main([*RUN, "episodes=5", f"output={whole / 'episodes.jsonl'}"]) == 0
    assert "merged 2 shard files" in capsys.readouterr().err

    merged = sharded / "episodes.jsonl"
    assert seeds_in(merged) == [0, 1, 2, 3, 4]  # one line per seed
    assert lines_by_seed(merged) == lines_by_seed(whole / "episodes.jsonl")  # byte-identical lines, seed by seed
    a = json.loads((sharded / "summary.json").read_text())
    b = json.loads((whole / "summary.json").read_text())
    assert a["episodes"] == 5 and a["usage"] == b["usage"]
    for key in ("strict", "loose", "ci", "user_stats", "failures", "protocol", "headline", "judge"):
        assert a[key] == b[key], key
    assert (sharded / "survival.png").read_bytes()[:4] == b"\x89PNG"  # the merged run is reported as eval does
    record = json.loads((sharded / "run.json").read_text())
    assert record["status"] == "finished"
    assert record["merged"] == ["episodes.shard-0-of-2.jsonl", "episodes.shard-1-of-2.jsonl"]

    assert main(["merge", str(sharded)]) == 0  # merging again changes nothing
    assert lines_by_seed(merged) == lines_by_seed(whole / "episodes.jsonl")


def test_the_next_run_counts_the_shards_seeds_as_done(tmp_path, capsys):
    out = tmp_path / "episodes.jsonl"
    with CannedServer(replies=["A short reply."]) as server:
        args = eval_args(server, out, 4)
        assert main([*args, "shard=0/2"]) == 0
        assert len(server.requests) == 4  # seeds 0 and 2, two turns each
        assert main(args) == 0  # no shard=: combines shard 0's file, plays seeds 1 and 3 only
        served = len(server.requests)
    assert served == 8  # not 12: shard 0's seeds were not played again
    assert "combined the shard files" in capsys.readouterr().err
    assert sorted(seeds_in(out)) == [0, 1, 2, 3]
    shard_lines = lines_by_seed(tmp_path / "episodes.shard-0-of-2.jsonl")
    assert {s: lines_by_seed(out)[s] for s in (0, 2)} == shard_lines  # taken over byte for byte
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["usage"]["policy"]["calls"] == 8


def test_a_shard_skips_seeds_another_shard_count_finished(tmp_path):
    shard_runs(tmp_path, episodes=4, shards=2)  # 0/2: 0, 2; 1/2: 1, 3
    args = [*RUN, "episodes=4", f"output={tmp_path / 'episodes.jsonl'}", "shard=0/3"]  # its seeds: 0, 3
    assert main(args) == 0
    assert not (tmp_path / "episodes.shard-0-of-3.jsonl").exists()  # both finished already: nothing played


def overlapping_shard(folder, lines, count=3):
    """Another shard of the same run whose file holds `lines` (as shards of different counts that overlap)."""
    (folder / f"episodes.shard-0-of-{count}.jsonl").write_text("".join(line + "\n" for line in lines))
    shutil.copy(folder / "run.shard-0-of-2.json", folder / f"run.shard-0-of-{count}.json")


def test_an_overlapping_shard_with_the_same_episode_merges_once(tmp_path):
    shard_runs(tmp_path, episodes=4)
    seed0 = lines_by_seed(tmp_path / "episodes.shard-0-of-2.jsonl")[0]
    overlapping_shard(tmp_path, seed0)
    assert main(["merge", str(tmp_path)]) == 0
    assert seeds_in(tmp_path / "episodes.jsonl") == [0, 1, 2, 3]


def test_a_finished_episode_beats_a_failed_one_of_the_same_seed(tmp_path):
    shard_runs(tmp_path, episodes=4)
    finished = lines_by_seed(tmp_path / "episodes.shard-1-of-2.jsonl")[1][0]
    meta = json.loads(finished)["meta"]
    failed = {
        "episode_id": json.loads(finished)["episode_id"],
        "env_id": "ifgym/EvolIF-v1",
        "seed": 1,
        "failed": True,
        "error": {"type": "EpisodeTimeoutError", "message": "too slow", "at": ""},
        "turns": 1,
        "meta": {"run_key": meta["run_key"], "usage": {}},
    }
    overlapping_shard(tmp_path, [json.dumps(failed)])
    assert main(["merge", str(tmp_path)]) == 0
    merged = lines_by_seed(tmp_path / "episodes.jsonl")
    assert merged[1] == [json.dumps(failed), finished]  # the attempt is kept (its usage would count), the episode last
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["failures"]["episodes"] == 0


def test_two_different_finished_episodes_of_one_seed_are_an_error(tmp_path, capsys):
    shard_runs(tmp_path, episodes=4)
    (line,) = lines_by_seed(tmp_path / "episodes.shard-0-of-2.jsonl")[2]
    other = json.loads(line)
    other["turns"][0]["reply"] = "Another answer, from a model that samples."
    overlapping_shard(tmp_path, [json.dumps(other)])
    assert main(["merge", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "seed 2 has two different finished episodes" in err
    assert "episodes.shard-0-of-2.jsonl:2" in err and "episodes.shard-0-of-3.jsonl:1" in err
    assert not (tmp_path / "episodes.jsonl").exists()  # nothing picked silently


TIMED = ["policy=truncation", "policy.base=scripted", "policy.replies=[A reply.]"]  # records per-turn wall time


def test_overlapping_shards_that_agree_on_the_dialogue_merge_though_their_timings_differ(tmp_path):
    # two shard counts played seed 0 each, in folders of their own (a shard skips seeds finished beside it)
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, shard in ((a, "0/2"), (b, "0/3")):
        assert main([*RUN, *TIMED, "episodes=4", f"output={folder / 'episodes.jsonl'}", f"shard={shard}"]) == 0
    for name in ("episodes.shard-0-of-3.jsonl", "run.shard-0-of-3.json"):
        shutil.copy(b / name, a / name)
    (first,), (second,) = (lines_by_seed(a / f"episodes.shard-0-of-{n}.jsonl")[0] for n in (2, 3))
    assert first != second  # the same dialogue, timed twice
    costs = [json.loads(line)["meta"]["policy_trace"]["costs"] for line in (first, second)]
    assert [c["seconds"] for c in costs[0]] != [c["seconds"] for c in costs[1]]
    assert json.loads(first)["turns"] == json.loads(second)["turns"]

    assert main(["merge", str(a)]) == 0
    merged = lines_by_seed(a / "episodes.jsonl")
    assert sorted(merged) == [0, 2, 3]
    assert merged[0] == [first, second]  # both plays are kept (their calls were made); the last is the record
    summary = json.loads((a / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["failures"]["episodes"] == 0
    assert main(["merge", str(a)]) == 0  # merging again changes nothing
    assert lines_by_seed(a / "episodes.jsonl") == merged


@pytest.mark.parametrize(
    ("change", "agree"),
    [
        (lambda r: r["meta"]["usage"].update(policy={**Usage().to_json(), "retries": 3}), True),  # a flaky server
        (lambda r: r["meta"]["policy_usage"].update(calls=99), True),  # the policy's calls: cost
        (lambda r: r["meta"]["policy_trace"]["costs"][0].update(seconds=12.5), True),  # wall time: cost
        (lambda r: r["turns"][0]["verdicts"][0].update(label="unknown"), False),  # another verdict: another episode
        (lambda r: r["turns"][0].update(user="Something else."), False),  # another user turn
        (lambda r: r.update(done_reason="max_turns_was_different"), False),  # another ending
    ],
)
def test_overlapping_episodes_differ_only_in_content_not_in_cost(tmp_path, capsys, change, agree):
    shard_runs(tmp_path, episodes=4, extra=TIMED)
    (line,) = lines_by_seed(tmp_path / "episodes.shard-0-of-2.jsonl")[2]
    other = json.loads(line)
    change(other)
    overlapping_shard(tmp_path, [json.dumps(other)])
    assert main(["merge", str(tmp_path)]) == (0 if agree else 2)
    if agree:
        assert lines_by_seed(tmp_path / "episodes.jsonl")[2] == [line, json.dumps(other)]
    else:
        assert "seed 2 has two different finished episodes" in capsys.readouterr().err
        assert not (tmp_path / "episodes.jsonl").exists()


def test_shards_of_another_configuration_are_refused(tmp_path, capsys):
    mine, other = tmp_path / "mine", tmp_path / "other"
    shard_runs(mine, episodes=2, shards=2)
    shard_runs(other, episodes=2, shards=2, extra=["env.max_turns=3"])  # another run_key
    # its record beside it: merge compares the records' run keys
    shutil.copy(other / "episodes.shard-1-of-2.jsonl", mine / "episodes.shard-1-of-2.jsonl")
    shutil.copy(other / "run.shard-1-of-2.json", mine / "run.shard-1-of-2.json")
    assert main(["merge", str(mine)]) == 2
    assert "run.shard-1-of-2.json is a run of another configuration" in capsys.readouterr().err
    # the next run reads the lines themselves
    assert main([*RUN, "episodes=2", f"output={mine / 'episodes.jsonl'}"]) == 2
    err = capsys.readouterr().err
    assert "episodes.shard-1-of-2.jsonl:1 holds an episode of another configuration" in err


def test_merge_names_what_it_was_given_wrong(tmp_path, capsys):
    shard_runs(tmp_path, episodes=2)
    assert main(["merge", str(tmp_path / "run.shard-0-of-2.json")]) == 2
    assert "is not a shard file" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "nowhere")]) == 2
    assert "is not a shard file" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["merge", str(empty)]) == 2
    assert "no shard files" in capsys.readouterr().err
    (tmp_path / "run.shard-1-of-2.json").unlink()
    assert main(["merge", str(tmp_path / "episodes.shard-1-of-2.jsonl")]) == 2
    assert "run.shard-1-of-2.json" in capsys.readouterr().err


def test_a_shard_without_seeds_is_refused(capsys):
    assert main([*RUN, "episodes=2", "shard=2/3"]) == 2
    assert "shard=2/3 has no seeds" in capsys.readouterr().err


def test_merge_then_the_same_command_in_the_default_run_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Hydra's run folder: runs/<env>-<run_key>/ under the working directory
    args = [*RUN, "episodes=2", "plots=false"]
    for shard in ("shard=0/2", "shard=1/2"):
        assert main([*args, shard]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    assert main(["merge", f"runs/{folder.name}"]) == 0  # a relative path, where Hydra's folders are absolute
    merged = (folder / "episodes.jsonl").read_text()
    assert main(args) == 0  # the same command again: the merged run is its own, nothing to play
    assert (folder / "episodes.jsonl").read_text() == merged
