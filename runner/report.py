"""Turn episodes and their metrics into things people read: a results table, PNG plots, a summary file."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core import Episode
from ifgym.core.tasks import Task

COUNTS = ("episodes", "turns", "items", "failed_turns", "undetermined_turns", "unknown")  # whole numbers


def metric_text(value: Any, name: str = "") -> str:
    """A metric's value as tables print it: a count (`COUNTS`) as a whole number, a rate to 3 places, NaN as n/a."""
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.0f}" if name in COUNTS and value.is_integer() else f"{value:.3f}"
    return str(value)


def count(n: Any, noun: str) -> str:
    """'1 episode', '3 episodes' ('?' stays plural)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def wrap_title(text: str, fig: Any, fontsize: float = 10) -> str:
    """`text` broken into lines that fit the figure's width (a long run title is never clipped)."""
    import textwrap

    width = max(20, int(fig.get_figwidth() * 72 / (fontsize * 0.6)))  # about 0.6 em per character
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def _interval(ci: dict[str, Any], name: str) -> str:
    bounds = ci.get(name)
    return f"[{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else ""


def protocol_lines(protocol: dict[str, Any]) -> list[str]:
    """What the numbers measure: the env's settings on one line, then each way they differ from the paper's."""
    if not protocol:
        return []
    shown = {
        k: (len(v) if k == "groups" else v)
        for k, v in protocol.items()
        if k not in ("env_id", "paper", "deviations") and not isinstance(v, dict) and v is not None
    }
    lines = [f"protocol: {protocol.get('env_id', '?')} (" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"]
    paper, deviations = protocol.get("paper"), protocol.get("deviations", [])
    if deviations:
        lines.append(f"not {paper}'s protocol:" if paper else "differs from the paper's protocol:")
        lines += [f"  - {d}" for d in deviations]
    elif paper:
        lines.append(f"{paper}'s protocol")
    return lines


def policy_protocol_lines(policy: dict[str, Any] | None, env_protocol: dict[str, Any] | None = None) -> list[str]:
    """The policy's setup (a wrapper's `protocol()`): its name and settings, then each way it differs from its paper's.

    Env settings the paper's runs use (`policy["env"]`) that the env's protocol shows with another
    value are deviations too (e.g. GraphIF's own-context replay run with golden context).
    """
    if not policy:
        return []
    deviations = list(policy.get("deviations", []))
    same_paper = (env_protocol or {}).get("paper") == policy.get("paper")  # the env's own lines already say it
    for key, wanted in ({} if same_paper else policy.get("env") or {}).items():
        value = (env_protocol or {}).get(key)
        if value is not None and value != wanted:
            deviations.append(f"env.{key}={value}: {policy.get('paper')}'s runs use env.{key}={wanted}")
    settings = {
        k: v
        for k, v in policy.items()
        if k not in ("name", "paper", "deviations", "env") and v is not None and not isinstance(v, (dict, list))
    }
    shown = " (" + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")" if settings else ""
    lines = [f"policy: {policy.get('name')}{shown}"]
    paper = policy.get("paper")
    if deviations:
        lines.append(f"not {paper}'s setup:" if paper else "differs from the paper's setup:")
        lines += [f"  - {d}" for d in deviations]
    elif paper:
        lines.append(f"{paper}'s setup")
    return lines


def _model(run: dict[str, Any], role: str) -> str | None:
    """`model (backend host)` of a role in a run's summary, or None when the run has no client for it."""
    info = run.get("models", {}).get(role)
    if not info:
        return None
    where = " ".join(str(x) for x in (info.get("backend"), info.get("host")) if x)
    return f"{info.get('model')} ({where})" if where else str(info.get("model"))


PLAIN_POLICIES = ("chat", "scripted")  # kinds named by their model alone; a wrapper (graphif, …) is named too


def policy_label(run: dict[str, Any]) -> str:
    """The policy of a run's summary in a few words: its model, and the wrapper or in-process kind around it."""
    kind = str(run.get("policy", "scripted"))
    model = _model(run, "policy") or run.get("policy_model")
    if model is None:
        return kind
    return str(model) if kind in PLAIN_POLICIES else f"{kind} over {model}"


def judge_label(run: dict[str, Any]) -> str:
    """The judge of a run's summary in a few words: its model, or `rules`."""
    judge = str(run.get("judge", "rules"))
    return "rules" if judge == "rules" else str(_model(run, "judge") or judge)


def run_title(summary: dict[str, Any]) -> str:
    """What was measured, in one line: env, policy model, judge, protocol, episodes and date (from `summary["run"]`)."""
    run = summary.get("run") or {}
    parts = [str(run.get("env", "?"))]
    parts.append(f"policy {policy_label(run)}")
    agreement = real_agreement(summary.get("judge") or {}, short=True)
    parts.append(f"judge {judge_label(run)}" + (f" ({agreement})" if agreement else ""))
    parts.append(count(summary.get("episodes", "?"), "episode"))
    if run.get("started"):
        parts.append(str(run["started"])[:10])
    return " · ".join(parts)


def real_agreement(judge: dict[str, Any], short: bool = False) -> str | None:
    """An LLM judge's agreement with the benchmark's own judge on real replies (its cached audit), in a few words.

    None for a run without an LLM judge or with a judge record from before real audits; for a judge
    that has no real material (EvolIF's, FlexBench's), says so. `short` gives only the two numbers.
    """
    real = judge.get("real_audit") if isinstance(judge, dict) else None
    if judge.get("kind") != "llm" or not real:
        return None
    if not real.get("suite"):
        return "no real-suite audit" if short else "no real-suite audit: " + str(real.get("note") or "no real verdicts")

    def num(value: Any) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    figures = f"real-suite agreement {num(real.get('accuracy'))}, kappa {num(real.get('kappa'))}"
    if short:
        return figures
    return (
        f"{figures}, yes on the reference's no {num(real.get('yes_rate_negatives'))} "
        f"({real.get('items')} items of StructFlowBench's GPT-4o verdicts, {real.get('split')} split"
        + ("" if real.get("passed") else ", below the floor: trusted by judge.trust=true")
        + ")"
    )


def results_table(summary: dict[str, Any]) -> str:
    """The protocol, then metrics side by side, strict and loose (strict only when `loose` is empty), as plain text.

    With intervals in the summary (`ci`), each value is followed by its bootstrap interval. A
    summary written by `ifgym eval` (with `run`) names the run after the protocol (`run_title`).
    """
    strict, loose = summary["strict"], summary["loose"]
    ci = summary.get("ci") or {}
    ci_strict, ci_loose = ci.get("strict", {}), ci.get("loose", {})
    headline = summary.get("headline_metric")
    aliases = summary.get("aliases") or {}  # an earlier name of a metric in the table: in summary.json only
    rows = [
        (
            f"{name} *" if name == headline else name,
            metric_text(strict[name], name),
            _interval(ci_strict, name),
            metric_text(loose.get(name, ""), name),
            _interval(ci_loose, name),
        )
        for name in strict
        if name not in aliases
    ]
    width = max(len(r[0]) for r in rows) if rows else 6
    columns = [("strict" if loose else "value", 1)]
    if ci:
        level = summary.get("ci_settings", {}).get("level", 0.95)
        columns.append((f"{level:.0%} CI", 2))
    if loose:
        columns.append(("loose", 3))
        if ci:
            columns.append((columns[1][0], 4))
    widths = [max([len(title)] + [len(r[i]) for r in rows]) for title, i in columns]
    lines = protocol_lines(summary.get("protocol", {}))
    lines += policy_protocol_lines(summary.get("policy_protocol"), summary.get("protocol"))
    lines += decoding_lines(summary)
    lines += [f"run: {run_title(summary)}"] if summary.get("run") else []
    agreement = real_agreement(summary.get("judge") or {})
    lines += [f"judge: {agreement}"] if agreement else []
    lines += [
        "  ".join([f"{'metric':<{width}}", *(f"{t:>{w}}" for (t, _), w in zip(columns, widths, strict=True))]),
        "  ".join(["-" * width, *("-" * w for w in widths)]),
    ]
    for row in rows:
        cells = [f"{row[i]:>{w}}" for (_, i), w in zip(columns, widths, strict=True)]
        lines.append("  ".join([f"{row[0]:<{width}}", *cells]).rstrip())
    lines += definition_lines(summary)
    if summary.get("checker_semantics") == "evolif":
        lines.append("checker semantics: evolif (the verdicts of EvolIF's released evaluator, one reading)")
    if summary.get("user_stats"):
        lines.append("user simulator: " + ", ".join(f"{k} {v}" for k, v in summary["user_stats"].items()))
    if summary.get("failures", {}).get("episodes"):
        lines.append(failure_line(summary["failures"]))
    for role, usage in summary.get("usage", {}).items():
        extra = [
            f"{usage[k]} {k}"
            for k in ("retries", "cleaned", "truncated", "max_tokens_stops", "cache_hits")
            if usage.get(k)
        ]
        lines.append(
            f"usage[{role}]: {usage['calls']} calls, {usage['prompt_tokens']} prompt + "
            f"{usage['completion_tokens']} completion tokens" + (f" ({', '.join(extra)})" if extra else "")
        )
    lines += max_tokens_warnings(summary.get("usage", {}))
    return "\n".join(lines)


MAX_TOKENS_WARN_SHARE = 0.1  # a role's replies cut at max_tokens, from this share of its calls on, get a warning


def max_tokens_warnings(usage: dict[str, dict[str, int]]) -> list[str]:
    """A warning line per role whose replies often stopped at `max_tokens` (finish_reason "length": cut mid-answer)."""
    from ifgym.runner.build import role_config_key

    lines = []
    for role, counts in usage.items():
        stops, calls = counts.get("max_tokens_stops", 0), counts.get("calls", 0)
        if calls and stops / calls >= MAX_TOKENS_WARN_SHARE:
            lines.append(
                f"warning: {stops} of {calls} {role} replies ({stops / calls:.0%}) stopped at max_tokens "
                f"(finish_reason 'length'), cut mid-answer; raise it: {role_config_key(role)}.max_tokens=N"
            )
    return lines


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _decoding_text(decoding: dict[str, Any]) -> str:
    """Decoding settings in words: 'temperature 0, top_p server default, max_tokens 1024'."""
    temperature = decoding.get("temperature")
    parts = [f"temperature {temperature:g}" if isinstance(temperature, int | float) else "temperature server default"]
    parts.append(f"top_p {decoding['top_p']:g}" if decoding.get("top_p") is not None else "top_p server default")
    if decoding.get("max_tokens") is not None:
        parts.append(f"max_tokens {decoding['max_tokens']}")
    parts += [f"{k} {v}" for k, v in (decoding.get("extra") or {}).items()]
    return ", ".join(parts)


def decoding_lines(summary: dict[str, Any]) -> list[str]:
    """How the model under test decoded, and, where the env's paper states how its models decoded, any difference."""
    decoding = summary.get("decoding")
    if not decoding:
        return []
    lines = [f"decoding (model under test): {_decoding_text(decoding)}"]
    paper = (summary.get("protocol") or {}).get("paper_decoding") or {}
    if paper:
        differs = [k for k in ("temperature", "top_p", "max_tokens") if k in paper and decoding.get(k) != paper[k]]
        if differs:
            keys = " ".join(f"policy.llm.{k}={paper[k]}" for k in differs)
            lines.append(f"  - not the paper's decoding: {paper['stated']} ({keys})")
        elif not any(k in paper for k in ("temperature", "top_p", "max_tokens")):
            lines.append(f"  - {paper['stated']}")
    return lines


def definition_lines(summary: dict[str, Any]) -> list[str]:
    """Under the results table: what `*` marks, each shown metric's one-line definition, and why a value is n/a."""
    definitions = summary.get("definitions") or {}
    headline = summary.get("headline_metric")
    lines = [f"* headline metric: {headline}"] if headline in summary["strict"] else []
    shown = [name for name in summary["strict"] if name in definitions]
    if summary.get("loose") and "loose" in definitions:
        shown.append("loose")
    lines += [f"  {name}: {definitions[name]}" for name in shown]
    missing = [name for name in shown if name != "loose" and _missing(summary["strict"].get(name))]
    if missing:
        lines.append(f"n/a: {', '.join(missing)} had nothing to measure in this run (see the definitions above)")
    return lines


# Error types named in the results table (the rest are counted), and the length an example is cut to there.
TOP_FAILURE_TYPES = 3
EXAMPLE_CHARS = 200


def failure_line(failures: dict[str, Any]) -> str:
    """Failed episodes for the results table: counts by type and HTTP status, then an example of each top type.

    E.g. 'failed episodes: 5 of 40 (RateLimitError 3, ServerError 2; HTTP 429 3, 503 2); rerun …' and
    an indented line per type. Reads summaries written before `by_status` (one example string per type) too.
    """
    by_type = list(failures["by_type"].items())
    kinds = ", ".join(f"{t} {n}" for t, n in by_type[:TOP_FAILURE_TYPES])
    if len(by_type) > TOP_FAILURE_TYPES:
        kinds += f", other {sum(n for _, n in by_type[TOP_FAILURE_TYPES:])}"
    statuses = ", ".join(f"{s} {n}" for s, n in failures.get("by_status", {}).items())
    count = f"{failures['episodes']} of {failures['of']}"
    lines = [
        f"failed episodes: {count} ({kinds}{'; HTTP ' + statuses if statuses else ''}); rerun into the same "
        "output to retry them"
    ]
    for kind, _ in by_type[:TOP_FAILURE_TYPES]:
        example = failures.get("examples", {}).get(kind)
        example = example[0] if isinstance(example, list) and example else example
        if example:
            cut = example if len(example) <= EXAMPLE_CHARS else example[:EXAMPLE_CHARS] + " …"
            lines.append(f"  {kind}: {cut}")
    return "\n".join(lines)


def _add(total: dict[str, Any], counts: dict[str, Any]) -> None:
    for key, value in counts.items():
        total[key] = total.get(key, 0) + value


_WRAPPER_USAGE = ("turns", "context_tokens")  # what only a wrapper's usage has
POLICY_COST_USAGE = (
    "turns",
    "calls",
    "base_calls",
    "light_calls",
    "base_prompt_tokens",
    "light_prompt_tokens",
    "rewrite_tokens",
    "context_tokens",
    "missing_usage",
)


@dataclass
class RunTally:
    """What a run's summary, intervals and plots need from its episodes, gathered in one pass: no Episode is kept.

    `strict` / `loose`: the env's `episode_row` of each episode (strict and loose verdicts; the
    loose ones only when asked); `lengths`: turns played per episode; `patience`: whether any turn
    had a patience value; `user_stats`: the user simulator's counters (renders, LLM fallbacks,
    regenerations …) summed; `policy_usage`: the `meta["policy_usage"]` figures `policy_cost`
    reads, summed, and `policy_wrapped` whether every episode had them (a wrapper played it);
    `policy_counters`: the counters of `meta["policy_trace"]` summed.
    """

    strict: list[Any] = field(default_factory=list)
    loose: list[Any] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    patience: bool = False
    user_stats: dict[str, int | float] = field(default_factory=dict)
    policy_usage: dict[str, int | float] = field(default_factory=dict)
    policy_wrapped: bool = True
    policy_counters: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, episodes: Iterable[Episode], task: Task | None = None, *, loose: bool = False) -> RunTally:
        """One pass over `episodes` (a run's `StoredEpisodes` reads each from its file); rows only with a `task`."""
        tally = cls()
        for episode in episodes:
            if task is not None:
                tally.strict.append(task.episode_row(episode))
                if loose:
                    tally.loose.append(task.episode_row(episode, loose=True))
            tally.lengths.append(len(episode.turns))
            tally.patience = tally.patience or any(t.patience is not None for t in episode.turns)
            _add(tally.user_stats, episode.meta.get("user_stats", {}))
            usage = episode.meta.get("policy_usage", {})
            tally.policy_wrapped = tally.policy_wrapped and all(key in usage for key in _WRAPPER_USAGE)
            if tally.policy_wrapped:
                _add(tally.policy_usage, {key: usage.get(key, 0) for key in POLICY_COST_USAGE})
            trace = episode.meta.get("policy_trace", {})
            _add(tally.policy_counters, trace.get("counters", {}))
        return tally

    def policy_cost(self) -> dict[str, Any] | None:
        """Calls per turn, ACT, rewrite and per-role tokens per turn over episodes played by a wrapper; else None.

        From each episode's `meta["policy_usage"]`, which wrappers fill with per-episode totals
        (turns, calls and tokens per role, context and rewrite tokens), and `meta["policy_trace"]`,
        whose counters of defaults taken are added up over the episodes (`counters`).
        """
        usage = self.policy_usage
        if not self.lengths or not self.policy_wrapped or usage["turns"] == 0:
            return None
        turns = usage["turns"]
        out: dict[str, Any] = {"turns": turns, "calls_per_turn": usage["calls"] / turns}
        for key in ("base_calls", "light_calls", "base_prompt_tokens", "light_prompt_tokens", "rewrite_tokens"):
            out[f"{key}_per_turn"] = usage[key] / turns
        out["ACT"] = usage["context_tokens"] / turns
        out["estimated_calls"] = usage["missing_usage"]
        out["counters"] = dict(self.policy_counters)
        return out


def write_summary(summary: dict[str, Any], path: Path) -> None:
    """Write the summary as JSON (NaN written as null)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    from ifgym.runner.redaction import redact_data

    path.write_text(json.dumps(redact_data(clean(summary)), indent=2) + "\n", encoding="utf-8")


SURVIVAL_OFF = (
    "not drawn: patience is off, so no dialogue ends by running out of patience "
    "(each ran to its script end or max_turns) and the curve would say nothing"
)


def chart_data(tally: RunTally, summary: dict[str, Any]) -> dict[str, Any]:
    """What the plots (and W&B's native charts) show, computed once from the run's tally and summary.

    `survival`: (turn, share of dialogues still going) points, or None when patience is off in
    every episode (`survival_note` says so); `group_pass_rates`: {mode: {group: rate}} from the
    summary's `pass_rate/<group>` (strict, and loose when the env has it); `group_intervals`: their
    bootstrap intervals when the summary has them.
    """
    from ifgym.rewards.metrics import survival_of_lengths

    out: dict[str, Any] = {"survival": None, "survival_note": None}
    if tally.patience:
        out["survival"] = list(enumerate(survival_of_lengths(tally.lengths)))
    else:
        out["survival_note"] = SURVIVAL_OFF
    prefix = "pass_rate/"
    rates: dict[str, dict[str, float]] = {}
    bounds: dict[str, dict[str, Any]] = {}
    for mode in ("strict", "loose"):
        groups = {k[len(prefix) :]: v for k, v in summary.get(mode, {}).items() if k.startswith(prefix)}
        if groups:
            rates[mode] = groups
            ci = (summary.get("ci") or {}).get(mode, {})
            bounds[mode] = {g: ci[prefix + g] for g in groups if ci.get(prefix + g)}
    out["group_pass_rates"], out["group_intervals"] = rates, bounds
    return out


def _subtitle(summary: dict[str, Any]) -> str:
    return run_title(summary) if summary.get("run") else count(summary.get("episodes", "?"), "episode")


def fit_layout(fig: Any) -> None:
    """Lay `fig` out tightly once, for good: no layout engine stays behind to make `savefig` draw it twice."""
    fig.tight_layout()
    fig.set_layout_engine(None)  # tight_layout leaves a placeholder engine, and with one savefig draws to lay out


def survival_figure(points: Sequence[tuple[int, float]], subtitle: str) -> Any:
    """The survival curve as a matplotlib Figure: a step line over whole turns, titled with what was measured."""
    from ifgym.plotting import new_figure

    fig = new_figure("the survival plot", figsize=(7, 4))
    from matplotlib.ticker import MaxNLocator

    turns, shares = zip(*points, strict=True)
    ax = fig.subplots()
    ax.step(turns, shares, where="post")
    ax.set(xlabel="turn", ylabel="share of dialogues still going", ylim=(0, 1.05), xlim=(0, max(turns) + 0.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # turns are whole numbers
    ax.set_title(wrap_title(f"Survival\n{subtitle}", fig), fontsize=10)
    ax.grid(alpha=0.3)
    fit_layout(fig)
    return fig


def group_figure(
    rates: dict[str, dict[str, float]], intervals: dict[str, dict[str, Any]], subtitle: str, what: str = "group"
) -> Any:
    """Pass rate per group as a matplotlib Figure: a bar per mode, each labelled with its value.

    A rate of 0 is drawn as a visible bar outline with "0.00" above it (not a gap that looks like
    a missing group); a group without a rate is labelled "n/a"; intervals are error bars.
    """
    from ifgym.plotting import new_figure

    groups = list(next(iter(rates.values())))
    modes = list(rates)
    width = 0.8 / len(modes)
    fig = new_figure(f"the pass-rate plot per {what}", figsize=(max(6.0, 0.9 * len(groups) + 2), 4.2))
    ax = fig.subplots()
    for m, mode in enumerate(modes):
        xs = [i + (m - (len(modes) - 1) / 2) * width for i in range(len(groups))]
        values = [rates[mode].get(g, math.nan) for g in groups]
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(xs, heights, width=width, label=mode, color=f"C{m}", edgecolor=f"C{m}", linewidth=1.5)
        ci = intervals.get(mode, {})
        known = [(x, g, v) for x, g, v in zip(xs, groups, values, strict=True) if g in ci and not math.isnan(v)]
        if known:  # one errorbar call for the mode's bars, not one per bar: each call builds its own artists
            below = [v - ci[g][0] for _, g, v in known]
            above = [ci[g][1] - v for _, g, v in known]
            bar_xs, bar_values = [x for x, _, _ in known], [v for _, _, v in known]
            ax.errorbar(bar_xs, bar_values, yerr=[below, above], fmt="none", ecolor="black", capsize=3)
        ax.bar_label(bars, labels=["n/a" if math.isnan(v) else f"{v:.2f}" for v in values], padding=2, fontsize=8)
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    ax.set(ylabel="pass rate", ylim=(-0.03, 1.12))  # below 0 so that a bar at 0 shows as a line
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_title(wrap_title(f"Pass rate per {what}\n{subtitle}", fig), fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)  # outside: never over a bar's label
    fit_layout(fig)
    return fig


def write_plots(tally: RunTally, summary: dict[str, Any], folder: Path) -> dict[str, Path]:
    """The survival curve (when patience is on) and the pass rates per group as PNGs; returns their paths.

    `chart_data` decides what is drawn: no survival curve when patience is off, no group plot for
    an env whose summary has no `pass_rate/<group>`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    data = chart_data(tally, summary)
    subtitle = _subtitle(summary)
    paths: dict[str, Path] = {}
    figures = {}
    if data["survival"]:
        figures["survival_plot"] = (folder / "survival.png", survival_figure(data["survival"], subtitle))
    if data["group_pass_rates"]:
        fig = group_figure(data["group_pass_rates"], data["group_intervals"], subtitle)
        figures["group_plot"] = (folder / "group_pass_rates.png", fig)
    for name, (path, fig) in figures.items():
        fig.savefig(path, dpi=120)  # a bare Figure renders with Agg; nothing to close (pyplot never held it)
        paths[name] = path
    return paths


def _headline(summary: dict[str, Any]) -> list[str]:
    """A summary's headline metrics: as the env names them (`headline`), else every top-level number.

    The env's headline metric (`headline_metric`, e.g. EvolIF's REC) comes first, so that tables and
    plots that show only the first few (`SHOWN_METRICS`) always show it.
    """
    if summary.get("headline"):
        names = [n for n in summary["headline"] if n in summary["strict"]]
    else:
        names = [n for n, v in summary["strict"].items() if "/" not in n and isinstance(v, int | float)]
    return shown_first(names, summary.get("headline_metric"))


def shown_first(names: Sequence[str], headline_metric: str | None) -> list[str]:
    """`names` with `headline_metric` moved to the front (when it is one of them)."""
    return [headline_metric, *(n for n in names if n != headline_metric)] if headline_metric in names else list(names)


def _varying(overrides: Sequence[Sequence[str]]) -> list[str]:
    """Per job, the overrides that are not shared by every job (what the sweep varies), as one label."""
    common = set.intersection(*(set(o) for o in overrides)) if overrides else set()
    return [" ".join(o for o in job if o not in common) or "(defaults)" for job in overrides]


SHOWN_METRICS = 4  # headline metrics in printed tables and comparison plots


def write_sweep(jobs: Sequence[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """Write a sweep's table across jobs: `sweep.csv`, `sweep.md` and `sweep.png`.

    The CSV has every headline metric, strict and loose, with its interval bounds; the Markdown
    table the strict values with intervals; the plot is `write_comparison_plot`.

    `jobs`: dicts with `job` (number), `overrides`, `folder` and `summary` (a run summary, or
    `{"error": message}` for a failed job). Returns the paths and, under `table_text`, the text table.
    """
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    labels = _varying([j["overrides"] for j in jobs])
    done = [(label, j) for label, j in zip(labels, jobs, strict=True) if "error" not in j["summary"]]
    metrics: list[str] = []
    for _, j in done:
        metrics += [m for m in _headline(j["summary"]) if m not in metrics]
    modes = ("strict", "loose")
    header = ["job", "status", "varied", "episodes"]
    header += [f"{mode}/{m}{part}" for mode in modes for m in metrics for part in ("", "/ci_low", "/ci_high")]
    header += ["folder", "error"]
    rows = []
    for label, j in zip(labels, jobs, strict=True):
        summary = j["summary"]
        row: dict[str, Any] = {"job": j["job"], "varied": label, "folder": j["folder"]}
        if "error" in summary:
            row.update(status="failed", error=summary["error"])
        else:
            row.update(status="finished", episodes=summary.get("episodes"))
            for mode in modes:
                ci = (summary.get("ci") or {}).get(mode, {})
                for m in metrics:
                    value = summary.get(mode, {}).get(m)
                    bounds = ci.get(m) or (None, None)
                    row[f"{mode}/{m}"] = value
                    row[f"{mode}/{m}/ci_low"], row[f"{mode}/{m}/ci_high"] = bounds
        rows.append(row)
    paths: dict[str, Any] = {"sweep_table": folder / "sweep.csv", "sweep_markdown": folder / "sweep.md"}
    with paths["sweep_table"].open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)

    def cell(row: dict[str, Any], m: str) -> str:
        value, low, high = row.get(f"strict/{m}"), row.get(f"strict/{m}/ci_low"), row.get(f"strict/{m}/ci_high")
        if value is None:
            return ""
        return metric_text(float(value)) + (f" [{low:.3f}, {high:.3f}]" if low is not None else "")

    shown = metrics[:SHOWN_METRICS]  # the CSV has them all
    table = [["job", "varied", "status", "episodes", *(f"{m} (strict)" for m in shown)]]
    for row in rows:
        status = row["status"] if row["status"] != "failed" else f"failed: {row['error']}"
        table.append(
            [str(row["job"]), row["varied"], status, str(row.get("episodes", "")), *(cell(row, m) for m in shown)]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in table]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = f"sweep: {len(jobs)} jobs ({len(jobs) - len(done)} failed) in {folder}\n" + "\n".join(lines)
    paths["sweep_markdown"].write_text(text + "\n", encoding="utf-8")
    if done and metrics:
        summaries = {label: j["summary"] for label, j in done}
        paths["sweep_plot"] = write_comparison_plot(
            summaries, shown, folder / "sweep.png", title=f"Sweep of {len(jobs)} jobs"
        )
    paths["table_text"] = text
    return paths


def write_comparison_plot(
    summaries: dict[str, dict[str, Any]], metrics: Sequence[str], path: Path, *, title: str, mode: str = "strict"
) -> Path:
    """Save `comparison_figure` as a PNG at `path` and return the path (sweeps and `ifgym compare`)."""
    comparison_figure(summaries, metrics, title=title, mode=mode).savefig(path, dpi=120)
    return path


def comparison_figure(
    summaries: dict[str, dict[str, Any]], metrics: Sequence[str], *, title: str, mode: str = "strict"
) -> Any:
    """Runs side by side: one panel per metric, one point per run with its interval as an error bar.

    `summaries` maps a label (a sweep job's varied overrides, a run name) to its run summary; a run
    without an interval for a metric gets a bare point, one without the metric "n/a".
    """
    from ifgym.plotting import new_figure

    metrics = list(metrics)
    labels = list(summaries)
    fig = new_figure("the comparison plot", figsize=(max(4.0, 1.2 * len(labels)) * len(metrics) / 1.5, 3.8))
    axes = fig.subplots(1, len(metrics))
    axes = [axes] if len(metrics) == 1 else list(axes)
    for ax, metric in zip(axes, metrics, strict=True):
        for x, label in enumerate(labels):
            summary = summaries[label]
            value = summary.get(mode, {}).get(metric)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                ax.annotate("n/a", (x, 0.02), ha="center", fontsize=8)
                continue
            bounds = ((summary.get("ci") or {}).get(mode) or {}).get(metric)
            err = [[value - bounds[0]], [bounds[1] - value]] if bounds else None
            ax.errorbar([x], [value], yerr=err, fmt="o", capsize=4, color="C0")
            ax.annotate(f"{value:.2f}", (x, value), textcoords="offset points", xytext=(6, 0), fontsize=8)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
        ax.set(title=metric, xlim=(-0.6, len(labels) - 0.4))
        if ax.get_ylim()[1] <= 1.05:  # a rate: the whole 0-1 scale (EDR_len and counts keep their own)
            ax.set_ylim(-0.02, 1.05)
        ax.grid(alpha=0.3, axis="y")
    levels = {(s.get("ci_settings") or {}).get("level") for s in summaries.values()} - {None}
    bars = f"bars: {levels.pop():.0%} bootstrap intervals" if len(levels) == 1 else "no intervals"
    fig.suptitle(wrap_title(f"{title} ({mode}; {bars})", fig), fontsize=10)
    fit_layout(fig)
    return fig
