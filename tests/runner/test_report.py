"""What the plots and tables show, checked on the matplotlib figures themselves: titles that say what was measured,
zero bars that are visible and labelled, no survival curve when patience is off, whole-turn ticks, FlexBench's
dimension labels, and the side-by-side plot of runs with their intervals."""

from __future__ import annotations

import math

import gymnasium as gym
import matplotlib
import pytest
from matplotlib.container import ErrorbarContainer

import ifgym  # noqa: F401
from ifgym.policies import ScriptedPolicy
from ifgym.rewards.flexbench import heatmap_figure, heatmap_matrix, short_name
from ifgym.runner.report import (
    SURVIVAL_OFF,
    RunTally,
    chart_data,
    comparison_figure,
    group_figure,
    max_tokens_warnings,
    protocol_lines,
    results_table,
    run_title,
    survival_figure,
    write_comparison_plot,
    write_plots,
    write_sweep,
)
from ifgym.runner.rollout import rollout

matplotlib.use("Agg")

RUN = {
    "env": "ifgym/EvolIF-v1",
    "policy": "chat",
    "judge": "rules",
    "models": {"policy": {"model": "my-model", "backend": "http", "host": "127.0.0.1:8000"}},
    "started": "2026-11-23T10:00:00+00:00",
}


def play(n=3, **env_kwargs):
    env = gym.make("ifgym/EvolIF-v1", **env_kwargs)
    return [rollout(env, ScriptedPolicy(["No."]), seed=s) for s in range(n)]


def summary_of(episodes):
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    return {
        "strict": env.summarize(episodes),
        "loose": env.summarize(episodes, loose=True),
        "episodes": len(episodes),
        "run": RUN,
    }


def test_run_title_names_env_policy_judge_episodes_and_date():
    assert run_title({"run": RUN, "episodes": 12}) == (
        "ifgym/EvolIF-v1 · policy my-model (http 127.0.0.1:8000) · judge rules · 12 episodes · 2026-11-23"
    )
    judged = {**RUN, "judge": "llm", "models": {"judge": {"model": "judge-m", "backend": "embedded", "host": None}}}
    assert " · policy chat · judge judge-m (embedded) · " in run_title({"run": judged, "episodes": 1})


def test_survival_curve_has_whole_turn_ticks_and_says_what_was_measured():
    episodes = play(3, patience=2, max_turns=6)  # every reply fails: each dialogue ends after 2 turns
    data = chart_data(RunTally.of(episodes), summary_of(episodes))
    assert data["survival"] == [(0, 1.0), (1, 1.0), (2, 1.0)] and data["survival_note"] is None
    fig = survival_figure(data["survival"], run_title(summary_of(episodes)))
    (ax,) = fig.axes
    first, *rest = ax.get_title().splitlines()
    assert first == "Survival" and " ".join(rest) == run_title(summary_of(episodes))  # wrapped to fit
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)  # no half turns
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0, 1, 2] and list(line.get_ydata()) == [1.0, 1.0, 1.0]


def test_no_survival_curve_when_patience_is_off(tmp_path):
    episodes = play(2, patience=None, max_turns=3)
    summary = summary_of(episodes)
    data = chart_data(RunTally.of(episodes), summary)
    assert data["survival"] is None and data["survival_note"] == SURVIVAL_OFF and "patience is off" in SURVIVAL_OFF
    paths = write_plots(RunTally.of(episodes), summary, tmp_path)
    assert set(paths) == {"group_plot"} and not (tmp_path / "survival.png").exists()


def test_zero_bars_are_visible_and_labelled_and_a_missing_rate_says_n_a():
    rates = {"strict": {"case": 0.0, "length": 0.5, "format": math.nan}, "loose": {"case": 0.0, "length": 0.75}}
    intervals = {"strict": {"length": [0.25, 0.75]}}
    fig = group_figure(rates, intervals, "ifgym/EvolIF-v1 · 4 episodes")
    (ax,) = fig.axes
    assert ax.get_title() == "Pass rate per group\nifgym/EvolIF-v1 · 4 episodes"
    bars = ax.patches
    assert [round(b.get_height(), 2) for b in bars] == [0.0, 0.5, 0.0, 0.0, 0.75, 0.0]
    assert all(b.get_linewidth() > 0 for b in bars)  # a zero bar is drawn as an outline at 0
    assert ax.get_ylim()[0] < 0  # ... above the bottom of the axes, so it shows
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["0.00", "0.50", "n/a", "0.00", "0.75", "n/a"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["case", "length", "format"]
    assert len(ax.collections) == 1  # one error bar: the strict interval of `length`


def test_group_plot_of_a_run_shows_its_intervals(tmp_path):
    episodes = play(3, patience=2, max_turns=4)
    summary = summary_of(episodes)
    groups = [k.split("/", 1)[1] for k in summary["strict"] if k.startswith("pass_rate/")]
    summary["ci"] = {"strict": {f"pass_rate/{g}": [0.0, 0.0] for g in groups}}
    data = chart_data(RunTally.of(episodes), summary)
    assert set(data["group_pass_rates"]) == {"strict", "loose"} and list(data["group_pass_rates"]["strict"]) == groups
    assert data["group_intervals"]["strict"] == {g: [0.0, 0.0] for g in groups}
    paths = write_plots(RunTally.of(episodes), summary, tmp_path)
    assert paths["group_plot"].read_bytes()[:4] == b"\x89PNG"


def _draws_when_saved(fig, tmp_path):
    """How many times `savefig` draws `fig` (a figure with a layout engine set is drawn once more to lay it out)."""
    draws = []
    draw = fig.draw
    fig.draw = lambda renderer: draws.append(1) or draw(renderer)
    fig.savefig(tmp_path / "figure.png", dpi=120)
    return len(draws)


def test_every_report_figure_is_drawn_once_when_saved(tmp_path):
    rates = {"strict": {"length": 0.5, "format": 0.0}, "loose": {"length": 0.75, "format": math.nan}}
    summaries = {"a": {"strict": {"ISR": 0.5}, "ci": {"strict": {"ISR": [0.25, 0.75]}}}}
    env = gym.make("ifgym/FlexBench-v0", sop="merchant_onboarding").unwrapped
    flexbench = [rollout(env, ScriptedPolicy(["Hello, thanks for calling. Goodbye."]), seed=0)]
    figures = [
        group_figure(rates, {}, "run"),
        survival_figure([(0, 1.0), (1, 0.5)], "run"),
        comparison_figure(summaries, ["ISR"], title="runs"),
        heatmap_figure(heatmap_matrix({"scripted": flexbench}), "FlexBench", "run"),
    ]
    assert [_draws_when_saved(fig, tmp_path) for fig in figures] == [1, 1, 1, 1]


def test_group_plot_error_bars_span_each_interval():
    rates = {"strict": {"a": 0.5, "b": 0.25, "c": math.nan}, "loose": {"a": 0.75, "b": 0.5, "c": 0.1}}
    intervals = {"strict": {"a": [0.4, 0.6], "b": [0.1, 0.3], "c": [0.0, 0.2]}, "loose": {"a": [0.7, 0.9]}}
    ax = group_figure(rates, intervals, "run").axes[0]
    spans = sorted(
        (round(float(segment[0][1]), 6), round(float(segment[1][1]), 6))
        for container in ax.containers
        if isinstance(container, ErrorbarContainer)
        for collection in container.lines[2]
        for segment in collection.get_segments()
    )
    # every interval of a group with a rate, none for strict "c" (no rate: n/a) or loose "b" and "c" (no interval)
    assert spans == [(0.1, 0.3), (0.4, 0.6), (0.7, 0.9)]


def test_flexbench_heatmap_rows_are_named_by_their_sop_clause():
    env = gym.make("ifgym/FlexBench-v0", sop="merchant_onboarding").unwrapped
    episodes = [rollout(env, ScriptedPolicy(["Hello, thanks for calling. Goodbye."]), seed=0)]
    matrix = heatmap_matrix({"scripted": episodes})
    assert matrix["labels"][0].startswith("d1 Ask whether you are speaking")
    assert all(len(label) <= 44 for label in matrix["labels"])  # id + at most 40 characters
    fig = heatmap_figure(matrix, "FlexBench merchant_onboarding", "run title")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == matrix["labels"]
    assert ax.get_title() == "FlexBench merchant_onboarding\nrun title"


@pytest.mark.parametrize(
    ("text", "short"),
    [
        ("Do not discuss the account before this is settled.", "Do not discuss the account before this…"),
        ("Say goodbye.", "Say goodbye"),  # short enough: whole, without the full stop
    ],
)
def test_short_dimension_names(text, short):
    assert short_name(text) == short


def test_comparison_plot_draws_each_run_with_its_interval(tmp_path):
    level = {"level": 0.95}
    summaries = {
        "patience=1": {
            "strict": {"CSR": 0.25, "EDR_len": 1.0},
            "ci": {"strict": {"CSR": [0.1, 0.4]}},
            "ci_settings": level,
        },
        "patience=2": {
            "strict": {"CSR": 0.5, "EDR_len": 2.0},
            "ci": {"strict": {"CSR": [0.3, 0.7]}},
            "ci_settings": level,
        },
    }
    fig = comparison_figure(summaries, ["CSR", "EDR_len"], title="Sweep of 2 jobs")
    csr, edr = fig.axes
    assert fig._suptitle.get_text() == "Sweep of 2 jobs (strict; bars: 95% bootstrap intervals)"
    assert [csr.get_title(), edr.get_title()] == ["CSR", "EDR_len"]
    assert [t.get_text() for t in csr.get_xticklabels()] == ["patience=1", "patience=2"]
    (low1, high1), (low2, high2) = (c.get_segments()[0][:, 1] for c in csr.collections if c.get_segments())
    assert (low1, high1, low2, high2) == pytest.approx((0.1, 0.4, 0.3, 0.7))  # the intervals as error bars
    assert [t.get_text() for t in csr.texts] == ["0.25", "0.50"] and csr.get_ylim() == (-0.02, 1.05)
    assert edr.get_ylim()[1] > 2  # not a rate: its own scale
    path = write_comparison_plot(summaries, ["CSR"], tmp_path / "cmp.png", title="Sweep of 2 jobs")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_a_long_title_is_wrapped_inside_the_figure():
    long = {**RUN, "policy": "graphif", "models": {"policy": {"model": "Qwen2.5-Coder-1.5B-Instruct-GGUF-q4_k_m"}}}
    title = run_title({"run": long, "episodes": 200})
    for fig in (survival_figure([(0, 1.0), (1, 0.5)], title), group_figure({"strict": {"case": 0.5}}, {}, title)):
        fig.canvas.draw()
        box = fig.axes[0].title.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.x1  # nothing clipped at either edge


def test_run_title_tells_wrapped_and_in_process_policies_apart():
    plain = run_title({"run": RUN, "episodes": 1})
    wrapped = run_title({"run": {**RUN, "policy": "graphif"}, "episodes": 1})
    local = run_title({"run": {**RUN, "policy": "transformers", "models": {}, "policy_model": "smollm2-135m"}})
    assert " · policy my-model (http 127.0.0.1:8000) · " in plain and "1 episode ·" in plain
    assert " · policy graphif over my-model (http 127.0.0.1:8000) · " in wrapped
    assert " · policy transformers over smollm2-135m · " in local


def test_results_table_marks_the_headline_defines_every_metric_and_says_why_n_a():
    episodes = play(3, patience=1)  # "No." fails every turn: one-turn dialogues, nothing to recover in
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    summary = summary_of(episodes) | {"headline_metric": env.task.headline_metric, "definitions": env.task.definitions}
    text = results_table(summary)
    rows = {line.split()[0]: line for line in text.splitlines() if line and line.split()[0] in summary["strict"]}
    assert rows["STA"].split()[1] == "*"  # EvolIF's holistic metric, marked as the headline
    assert rows["REC"].split()[1:3] == ["n/a", "n/a"]  # unmeasured strict and loose
    assert rows["episodes"].split()[1] == "3" and rows["CSR"].split()[1] == "0.000"  # a count is a count
    assert "* headline metric: STA" in text
    for name in ("CSR", "ISR", "EDR_len", "EDR_acc", "EDR_succ", "EDR_lss", "REC", "STA", "loose"):
        assert f"  {name}: " in text
    assert "n/a: REC had nothing to measure in this run" in text


def test_a_wrappers_protocol_follows_the_envs_in_the_results_table():
    summary = summary_of(play(1, patience=1))
    summary["protocol"] = gym.make("ifgym/EvolIF-v1").unwrapped.protocol()
    plain = results_table(summary).splitlines()
    summary["policy_protocol"] = {
        "name": "Context-Agent",
        "paper": "Context-Agent",
        "theta": 0.6,
        "linear_k": None,  # unset: not shown
        "deviations": ["prompts in ifgym's own words, not the paper's"],
    }
    lines = results_table(summary).splitlines()
    start = len(protocol_lines(summary["protocol"]))
    assert lines[:start] == plain[:start]  # the env's protocol first, unchanged
    assert lines[start : start + 3] == [
        "policy: Context-Agent (theta=0.6)",
        "not Context-Agent's setup:",
        "  - prompts in ifgym's own words, not the paper's",
    ]
    assert lines[start + 3 :] == plain[start:]
    summary["policy_protocol"]["deviations"] = []
    assert "Context-Agent's setup" in results_table(summary).splitlines()[start + 1]


def test_a_role_whose_replies_often_stop_at_max_tokens_gets_a_warning():
    usage = {"policy": {"calls": 40, "max_tokens_stops": 12}, "judge": {"calls": 40, "max_tokens_stops": 1}}
    assert max_tokens_warnings(usage) == [
        "warning: 12 of 40 policy replies (30%) stopped at max_tokens (finish_reason 'length'), cut mid-answer; "
        "raise it: policy.llm.max_tokens=N"
    ]
    # an env's model role is set at env.<role>_llm
    assert max_tokens_warnings({"user": {"calls": 10, "max_tokens_stops": 5}})[0].endswith("env.user_llm.max_tokens=N")


def test_a_sweep_shows_the_headline_metric_first_in_its_table_and_plot(tmp_path):
    env = gym.make("ifgym/EvolIF-v1").unwrapped
    jobs = [
        {
            "job": k,
            "overrides": [f"env.patience={k + 1}"],
            "folder": str(tmp_path / str(k)),
            "summary": summary_of(play(2, patience=k + 1))
            | {"headline": list(env.task.headline), "headline_metric": env.task.headline_metric},
        }
        for k in range(2)
    ]
    files = write_sweep(jobs, tmp_path)
    header = files["table_text"].splitlines()[1]
    assert header.split("|")[5].strip() == "STA (strict)"  # STA was not among the first four before
    assert "strict/STA" in files["sweep_table"].read_text(encoding="utf-8").splitlines()[0]
    assert files["sweep_plot"].read_bytes()[:4] == b"\x89PNG"


def test_the_results_table_names_the_decoding_and_any_difference_from_the_papers():
    from ifgym.runner.summarize import policy_decoding

    chat = {"kind": "chat", "llm": {"temperature": 0.0, "top_p": None, "max_tokens": 1024, "extra": {}}}
    wrapped = {"kind": "truncation", "base": "chat", "llm": {"temperature": 0.7, "top_p": 0.8, "max_tokens": 2048}}
    local = {"kind": "transformers", "transformers": {"temperature": 0.0, "top_p": None, "max_new_tokens": 128}}
    assert policy_decoding(chat) == {"temperature": 0.0, "top_p": None, "max_tokens": 1024}
    assert policy_decoding(wrapped) == {"temperature": 0.7, "top_p": 0.8, "max_tokens": 2048}
    assert policy_decoding(local) == {"temperature": 0.0, "top_p": None, "max_tokens": 128}
    assert policy_decoding({"kind": "scripted"}) is None  # fixed replies decode nothing
    flexbench = {"paper": "FlexBench", "paper_decoding": {"temperature": 0.3, "stated": "FlexBench §5.1: at 0.3"}}
    summary = {"strict": {}, "loose": {}, "protocol": flexbench, "decoding": policy_decoding(chat)}
    lines = results_table(summary).splitlines()
    at = lines.index("decoding (model under test): temperature 0, top_p server default, max_tokens 1024")
    assert lines[at + 1] == "  - not the paper's decoding: FlexBench §5.1: at 0.3 (policy.llm.temperature=0.3)"
    same = results_table({**summary, "decoding": {**summary["decoding"], "temperature": 0.3}})
    assert "not the paper's decoding" not in same  # at the paper's temperature nothing more is said
    evolif = {"paper": "EvolIF", "paper_decoding": {"stated": "EvolIF ran each model at its defaults"}}
    assert "  - EvolIF ran each model at its defaults" in results_table({**summary, "protocol": evolif})
