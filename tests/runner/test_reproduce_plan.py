"""The sweep `ifgym reproduce` plans: rows and repeats, the order overrides win in, and where the folder is."""

from __future__ import annotations

from ifgym.runner.reproduce import last_wins, plan, run_folder


def test_repeats_give_each_row_its_sampling_seeds_in_folders_of_their_own():
    url = "policy.llm.base_url=http://127.0.0.1:8000/v1"
    the_plan = plan(["graphif", url, "env.dataset=/d.jsonl", "repeats=2", "out=/tmp/x"])
    seeds = [
        (row.id, [o for o in overrides if o.startswith("policy.llm.seed=")]) for row, _, overrides in the_plan.runs
    ]
    assert seeds[:2] == [("llm_only", ["policy.llm.seed=0"]), ("llm_only", ["policy.llm.seed=1"])]
    assert len(the_plan.runs) == 5 * 2
    row, repeat, _ = the_plan.runs[3]
    assert str(run_folder(the_plan, row, repeat)) == "/tmp/x/self_refine-r1"
    single = plan(["graphif", url, "env.dataset=/d.jsonl", "repeats=1", "out=/tmp/x"])
    assert not any(o.startswith("policy.llm.seed=") for _, _, overrides in single.runs for o in overrides)
    assert str(run_folder(single, *single.runs[0][:2])) == "/tmp/x/llm_only"


def test_the_commands_overrides_win_and_the_smoke_run_sets_every_role():
    assert last_wins(["episodes=32", "policy=openai", "episodes=2", "++policy.llm.extra.top_k=20", "episodes=5"]) == [
        "policy=openai",
        "++policy.llm.extra.top_k=20",
        "episodes=5",
    ]
    smoke = plan(["structflow", "smoke=true"])
    ((_, _, overrides),) = smoke.runs
    assert "policy=embedded" in overrides and "judge.trust=true" in overrides
    assert (
        "policy.llm.embedded_model=smollm2-135m" in overrides and "judge.llm.embedded_model=smollm2-135m" in overrides
    )
    assert "policy.llm.max_tokens=48" in overrides and "policy.llm.max_tokens=1024" not in overrides
    assert smoke.repeats == 1 and "smoke" in smoke.folder.name
    served = plan(["structflow", "policy.llm.base_url=http://127.0.0.1:8000/v1"])
    assert served.runs[0][2][0] == "policy=openai"  # a served model outside the smoke run


def test_the_folder_is_the_same_for_the_same_rows_whatever_the_server_or_count():
    url = "policy.llm.base_url=http://127.0.0.1:8000/v1"
    a = plan(["structflow", url, "policy.llm.model=m", "episodes=5", "policy.llm.timeout=9"]).folder
    b = plan(["structflow", url, "policy.llm.model=m", "episodes=155", "shard=0/2"]).folder
    c = plan(["structflow", url, "policy.llm.model=other"]).folder
    assert a == b != c and a.parent.name == "runs"
