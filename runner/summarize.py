"""A run's episodes summarized: summary.json, plots, the results table, bootstrap intervals, the record finished."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ifgym.runner.judge_gate import audit_lines


def ci_settings_of(resolved: dict[str, Any]) -> Any:
    """The run's bootstrap-interval settings (`ci`, `ci_resamples`, `ci_level`, seeded with `seed`); None when off."""
    from ifgym.core.stats import CISettings

    if not resolved["ci"]:
        return None
    return CISettings(resolved["ci_resamples"], resolved["ci_level"], resolved["seed"])


def has_loose(env: Any) -> bool:
    """Whether the env reports a loose variant (FlexBench and EvolIF's paper reading do not)."""
    return env.task.loose_metrics and getattr(env, "checker_semantics", "ifgym") == "ifgym"


def run_intervals(tally: Any, summary: dict[str, Any], env: Any, settings: Any) -> dict[str, Any]:
    """`ci` (bootstrap interval per headline metric and pass rate, strict and loose) and `ci_settings`.

    Resamples the episodes' rows in the run's tally (`report.RunTally`) with the task's `summarize_rows`.
    """
    from ifgym.core.stats import intervals, metric_names

    task = env.task
    ci = {
        mode: intervals(
            getattr(tally, mode),
            task.summarize_rows,
            metric_names(summary[mode], task.headline),
            loose=mode == "loose",
            settings=settings,
            ratios=task.summary_ratios,
        )
        if summary[mode]
        else {}
        for mode in ("strict", "loose")
    }
    return {"ci": ci, "ci_settings": settings.to_json()}


def policy_decoding(policy: dict[str, Any]) -> dict[str, Any] | None:
    """The model under test's decoding settings from the resolved `policy` config (None: scripted replies)."""
    kind = policy.get("base") if policy.get("kind") not in ("chat", "scripted", "transformers") else policy.get("kind")
    if kind == "scripted":
        return None
    if kind == "transformers":
        t = policy.get("transformers") or {}
        return {"temperature": t.get("temperature"), "top_p": t.get("top_p"), "max_tokens": t.get("max_new_tokens")}
    llm = policy.get("llm") or {}
    out = {k: llm.get(k) for k in ("temperature", "top_p", "max_tokens")}
    if llm.get("extra"):
        out["extra"] = dict(llm["extra"])
    return out


def report_run(
    env: Any,
    resolved: dict[str, Any],
    out: Path,
    episodes: Sequence[Any],
    failures: dict[str, Any],
    *,
    worker_deaths: int,
    judge_record: dict[str, Any],
    record: Any,
    roles: Iterable[str],
    ci_settings: Any,
    shard: Any = None,
    ending: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Path], dict[str, Any]]:
    """Summarize a run's episodes, write its summary, plots and report, finish its record, print its table.

    Shared by `ifgym eval` and `ifgym merge`. `roles` are the run's model roles (each gets a usage
    row, zeros when it made no call; usage is summed from the records in `out`). A shard (`shard`)
    writes `summary.shard-I-of-N.json` and no plots (the merged run draws them). `ending` says how
    the run ended (`status`, `reason`, `unplayed_seeds`, `resume`; by default finished, with or
    without failed episodes): it goes into the summary and the record; an interrupted run writes
    no plots and prints nothing. Returns the summary, the plots written and the chart data.
    """
    from ifgym.llm import Usage
    from ifgym.runner.report import RunTally, chart_data, results_table, run_title, write_plots, write_summary
    from ifgym.runner.rollout import select_seeds, usage_totals

    semantics = getattr(env, "checker_semantics", "ifgym")
    # one pass over the episodes file: each episode is read, reduced to rows and counts, and dropped
    task = env.task
    tally = RunTally.of(episodes, task, loose=has_loose(env))
    finished = len(episodes) > 0  # none when every episode failed, or none finished before a stop: no metrics
    loose = task.summarize_rows(tally.loose, loose=True) if has_loose(env) and finished else {}
    strict = task.summarize_rows(tally.strict) if finished else {}
    summary = {"protocol": env.protocol(), "strict": strict, "loose": loose}
    if record.data.get("policy_protocol"):  # a wrapper's setup and its paper's differences
        summary["policy_protocol"] = record.data["policy_protocol"]
    summary["checker_semantics"] = semantics
    # every call of the run's episodes, from their records: earlier processes, Ray workers and retried failures too
    # (every role of the run is listed, one that made no call with zeros)
    key = record.data["run_key"]
    totals = usage_totals(out, key)
    summary["usage"] = {role: totals.get(role, Usage().to_json()) for role in roles} | totals
    summary["user_stats"] = tally.user_stats
    filter_rule = getattr(env, "seed_filter_rule", None)
    if filter_rule:  # the same choice the run made (`select_seeds` is deterministic): which seeds it passed over
        skipped = select_seeds(env, resolved["seed"], resolved["episodes"]).skipped
        summary["seed_filter"] = {"rule": filter_rule, "skipped": len(skipped), "skipped_seeds": skipped}
    cost = tally.policy_cost()
    if cost is not None:
        summary["policy_cost"] = cost
    summary["episodes"] = len(episodes)
    summary["failures"] = failures
    if ending is None:
        status = "finished_with_failures" if failures.get("episodes") else "finished"
        ending = {"status": status, "reason": None, "unplayed_seeds": [], "resume": None}
    summary["ending"] = ending
    quiet = ending["status"] == "interrupted"  # Ctrl-C: the summary and record, then one line
    summary["executor"] = dict(resolved["executor"]) | {"worker_deaths": worker_deaths}
    summary["output"] = str(out)
    if shard is not None:
        summary["shard"] = str(shard)
    summary["headline"] = list(task.headline)
    summary["headline_metric"] = task.headline_metric
    summary["definitions"] = {k: v for k, v in task.definitions.items() if k in summary["strict"] or k == "loose"}
    summary["aliases"] = {k: v for k, v in task.aliases.items() if k in summary["strict"]}
    summary["judge"] = judge_record
    policy = resolved["policy"]
    summary["run"] = record.summary_reference() | {
        "env": summary["protocol"].get("env_id") or resolved["env"]["id"],  # the id its episodes carry
        "policy": policy["kind"],
        "judge": resolved["judge"]["kind"],
        "models": record.data["models"],
    }
    if record.data.get("wandb"):  # the W&B run this run is logged to (run.json stores it too)
        summary["run"]["wandb"] = record.data["wandb"]
    if "transformers" in (policy["kind"], policy.get("base")):  # in process: no client names the model
        summary["run"]["policy_model"] = (policy.get("transformers") or {}).get("model")
    own = policy if policy["kind"] == "custom" else policy.get("base")
    if isinstance(own, dict) and own.get("_target_"):  # a policy of your own: its class names it
        summary["run"]["policy_model"] = own["_target_"]
    decoding = policy_decoding(policy)
    if decoding:
        summary["decoding"] = decoding
    if ci_settings is not None and finished:
        summary.update(run_intervals(tally, summary, env, ci_settings))
    charts = chart_data(tally, summary)
    files = shard is None and resolved["plots"] and not quiet and finished
    plots = write_plots(tally, summary, out.parent) if files else {}
    if shard is None and not quiet and finished and task.report_sections is not None:  # FlexBench: the dimension table
        sections = task.report_sections(episodes, out.parent, plots=resolved["plots"], subtitle=run_title(summary))
        plots.update(sections)
    summary_path = out.parent / (shard.file(Path("summary.json")).name if shard is not None else "summary.json")
    write_summary(summary, summary_path)
    facts = {k: v for k, v in ending.items() if k != "status"}
    record.finish(ending["status"], episodes=len(episodes), summary=summary_path.name, ending=facts)
    if quiet:
        return summary, plots, charts
    print(results_table(summary))
    for line in audit_lines(judge_record):
        print(line)
    if "seed_filter" in summary:
        skipped = summary["seed_filter"]["skipped_seeds"]
        listed = ", ".join(map(str, skipped[:20])) + (", …" if len(skipped) > 20 else "")
        print(
            f"seed filter ({summary['seed_filter']['rule']}): {len(skipped)} seeds skipped"
            + (f" ({listed})" if skipped else "")
        )
    if cost is not None:
        rewrite = cost["rewrite_tokens_per_turn"]
        print(
            f"policy cost: {cost['calls_per_turn']:.2f} calls/turn "
            f"({cost['base_calls_per_turn']:.2f} base + {cost['light_calls_per_turn']:.2f} light), "
            f"ACT {cost['ACT']:.1f} context tokens/turn" + (f", {rewrite:.1f} rewrite tokens/turn" if rewrite else "")
        )
        if cost["counters"]:
            print("policy counters: " + ", ".join(f"{name} {value}" for name, value in cost["counters"].items()))
    print(f"\nepisodes: {out}\nsummary:  {summary_path}\nrecord:   {record.path}")
    for name, path in plots.items():
        print(f"{name}: {path}")
    if files and charts["survival_note"]:
        print(f"survival_plot: {charts['survival_note']}")
    if shard is not None:
        print(f"shard {shard} done; once every shard has finished: ifgym merge {out.parent}")
    return summary, plots, charts
