"""The judge audit before a run: an LLM judge below the gold set's floor is refused before any episode.

`audit_judge` writes the summary's `judge` record; `audit_lines` prints it under the results table;
`judge_audit` is `ifgym judge-audit` (the audit on its own, written as JSON).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def audit_judge(env: Any, judge_cfg: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """Audit the env's LLM judge on the gold set's short suite (cached) before any episode; the summary's `judge`.

    Refuses (ConfigError) a judge below the floor. The packaged embedded judge's audits ship with
    ifgym, so its verdict is known at once. `judge.trust=true` runs no audit (recorded as
    `audit_skipped`); it records one already known (cached or shipped), and a failing one as
    trusted below the floor. Says so when the judge is the embedded model (no
    `judge.llm.base_url`), and prints its audit.
    """
    from ifgym.errors import ConfigError
    from ifgym.llm import make_client
    from ifgym.rewards.audit import audit_key, cached_audit, format_report, known_audit

    kind = judge_cfg["kind"]
    if kind not in ("llm", "learned"):
        return {"kind": kind}
    judge = getattr(env.scorer, "judge", None)
    suite = env.task.judge_suite
    if judge is None or suite is None:
        return {"kind": kind, "audit": None, "note": f"{type(env).__name__} has no LLM judge to audit"}
    learned = kind == "learned"
    if not learned and judge_cfg["llm"]["base_url"] is None:
        print(
            f"judge=llm without judge.llm.base_url: the embedded model ({judge.client.model}) is the judge. "
            "Its audit on ifgym's gold set follows; pass judge.llm.base_url=... judge.llm.model=... for a "
            "stronger judge.",
            file=sys.stderr,
        )
    # a checklist judge is audited on real replies first (StructFlowBench's own verdicts), then on the hand-written set
    suites = ["structflow_real", suite] if suite == "structflow" else [suite]
    # a client of its own, so the run's judge usage counts the episodes only; the learned judge is its own client
    client = judge if learned else make_client(judge_cfg["llm"], "judge_audit", "judge.llm")
    modes = dict.fromkeys(suites, judge.mode)
    options = {"threshold": judge.threshold} if judge.mode == "probability" else None
    if judge_cfg.get("trust"):
        report = known_audit(audit_key(client, suites, modes, judge_options=options))
        if report is None:
            print("judge.trust=true: the judge runs unaudited (recorded in the summary)", file=sys.stderr)
            return {
                "kind": kind,
                "model": judge.model_name if learned else judge.client.model,
                "mode": judge.mode,
                "prompt_version": judge.prompt_version,
                "suite": suite,
                "trust": True,
                "audit": None,
                "audit_skipped": "judge.trust=true",
            }
    else:
        report = cached_audit(client, suites=suites, modes=modes, progress=progress, judge_options=options)
    print(format_report(report), file=sys.stderr)
    numbers = {k: v for k, v in report["suites"][suite].items() if k not in ("verdicts", "groups")}
    numbers["groups"] = {g: dict(v) for g, v in report["suites"][suite]["groups"].items()}
    record = {
        "kind": kind,
        "model": report["judge"].get("model"),
        "mode": judge.mode,
        **({"threshold": judge.threshold} if judge.mode == "probability" else {}),
        "prompt_version": judge.prompt_version,
        "suite": suite,
        "trust": bool(judge_cfg.get("trust")),
        "audit": {
            "set": report["set"],
            "gold_version": report["gold_version"],
            "floor": report["floor"],
            "passed": report["passed"][suite],
            "failures": report["failures"][suite],
            "cached": report.get("cached", False),
            "shipped": report.get("shipped", False),
            **numbers,
        },
    }
    if "structflow_real" in report["suites"]:
        real = report["suites"]["structflow_real"]
        keep = ("split", "turns", "items", "accuracy", "kappa", "yes_rate_negatives", "no_rate_positives", "ci")
        record["real_audit"] = {
            "suite": "structflow_real",
            "version": report.get("real_version"),
            "floor": report["floors"]["structflow_real"],
            "passed": report["passed"]["structflow_real"],
            "failures": report["failures"]["structflow_real"],
            **{k: real.get(k) for k in keep},
            "groups": {g: {k: v.get(k) for k in keep} for g, v in real["groups"].items()},
        }
    else:
        record["real_audit"] = {"suite": None, "note": report.get("real_material", {}).get(suite, "")}
    failures = [f"{s}: {f}" for s in suites for f in report["failures"][s]]
    if failures:
        if not record["trust"]:
            embedded = not learned and judge_cfg["llm"]["base_url"] is None
            raise ConfigError(audit_refusal(record, failures, embedded=embedded))
        record["trusted_below_floor"] = True
    return record


def audit_refusal(record: dict[str, Any], failures: Sequence[str] | None = None, *, embedded: bool) -> str:
    """The one-line refusal of a judge below the audit's floor (`audit_judge`'s record): what failed, and the fix.

    `failures` are every suite's ("suite: failure"); by default the record's own suite's. The embedded
    model is the judge only for want of a URL; the fix named first is a served judge.
    """
    failures = "; ".join(failures if failures is not None else record["audit"]["failures"])
    which = f"{record['model']}, mode {record['mode']}"
    if record.get("kind") == "learned":
        return (
            f"the learned checklist judge ({record['model']}) fails its audit on real replies: {failures}. Its "
            "verdicts would disagree with the benchmark's judge too often (docs/learned_judge.md): serve a judge and "
            "pass judge=llm judge.llm.base_url=URL judge.llm.model=NAME, or pass judge.trust=true to run anyway "
            "(recorded in the summary as trusted below the floor)"
        )
    if embedded:
        return (
            f"the embedded judge ({which}) fails its audit: {failures}. A small local model "
            "cannot judge this: serve a stronger judge and pass judge.llm.base_url=URL judge.llm.model=NAME "
            "(any OpenAI-compatible server), or pass judge.trust=true to run anyway (recorded in the summary as "
            "trusted below the floor)"
        )
    return (
        f"the judge ({which}) fails its audit: {failures}. Its verdicts would be noise that looks "
        "like a result. Use a stronger judge (judge.llm.base_url=... judge.llm.model=...), another judge.mode, "
        "or pass judge.trust=true to run anyway (recorded in the summary as trusted below the floor)"
    )


def audit_lines(judge: dict[str, Any]) -> list[str]:
    """The judge record as the lines printed under the results table (the real-suite agreement first)."""
    audit = judge.get("audit")
    if judge.get("kind") in ("llm", "learned") and judge.get("audit_skipped"):
        return [f"judge: {judge.get('model')}, mode {judge.get('mode')}; not audited ({judge['audit_skipped']})"]
    if judge.get("kind") not in ("llm", "learned") or not audit:
        return []

    def num(value: Any) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    lines = []
    real = judge.get("real_audit")
    if real and real.get("suite"):
        from ifgym.rewards.audit import real_line

        verdict = "passed" if real["passed"] else "FAILED (run with judge.trust=true)"
        lines.append(f"judge {judge['model']} on real replies {verdict}: {real_line(real)}")
    elif real:
        from ifgym.runner.report import real_agreement

        lines.append(f"judge {judge['model']}: {real_agreement(judge)}")
    verdict = "passed" if audit["passed"] else "FAILED (run with judge.trust=true)"
    lines.append(
        f"judge: {judge['model']}, mode {judge['mode']}; audit ({audit['set']} gold set, {judge['suite']}) {verdict}: "
        f"accuracy {num(audit['accuracy'])}, yes-rate on negatives {num(audit['yes_rate_negatives'])}, "
        f"kappa {num(audit['kappa'])}, injection flip {num(audit['injection_flip_rate'])}, "
        f"unknown {num(audit['unknown_rate'])}"
    )
    return lines


AUDIT_OPTIONS = ("suites", "set", "out", "split", "calibrate")


def judge_audit(args: list[str], compose_judge: Callable[[list[str]], dict[str, Any]]) -> int:
    """`ifgym judge-audit [KEY=VALUE ...]`: audit a judge on the short gold set (set=full: all), print, write JSON.

    `compose_judge` turns the judge overrides into the judge group's config, as `ifgym eval` composes it.
    """
    from ifgym.errors import ConfigError
    from ifgym.llm import make_client
    from ifgym.rewards.audit import audit, calibrate_on_real, format_report, resolve_modes

    options: dict[str, str] = {
        "suites": ",".join(("structflow_real", "evolif", "structflow", "flexbench")),
        "set": "short",
        "split": "test",
    }
    overrides = []
    for item in args:
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"judge-audit: {item!r} is not KEY=VALUE (see `ifgym --help`)")
        if key in AUDIT_OPTIONS:
            options[key] = value
        else:
            overrides.append(item)
    if options["set"] not in ("full", "short"):
        raise ConfigError(f"judge-audit: set must be full or short, got {options['set']!r}")
    if not any(o.startswith("judge=") for o in overrides):
        overrides.insert(0, "judge=llm")
    judge_cfg = compose_judge(overrides)
    suites = [s.strip() for s in options["suites"].split(",") if s.strip()]
    modes = resolve_modes(suites, judge_cfg["mode"])
    if judge_cfg["mode"] is not None:
        skipped = [s for s in suites if modes[s] != judge_cfg["mode"]]
        if skipped:  # a mode names one judge's way of asking; the other suites' judges have no such mode
            print(f"judge.mode={judge_cfg['mode']} is not a mode of {', '.join(skipped)}: skipped", file=sys.stderr)
            suites = [s for s in suites if s not in skipped]
    threshold = judge_cfg.get("threshold")
    if judge_cfg["kind"] == "learned":  # no model server: the judge itself stands where the client goes
        from ifgym.rewards.structflow.learned import LearnedChecklistJudge

        client = LearnedChecklistJudge(threshold=threshold)
        threshold = None
    else:
        if judge_cfg["llm"]["base_url"] is None:
            print("no judge.llm.base_url: auditing the embedded model", file=sys.stderr)
        client = make_client(judge_cfg["llm"], "judge", "judge.llm")
    if "calibrate" in options:  # the P(yes) threshold from the dev split, then the audit with it
        if options["calibrate"] != "dev" or judge_cfg["mode"] != "probability":
            raise ConfigError(
                "judge-audit: calibrate=dev calibrates probability mode's threshold on the real suite's dev split: "
                f"pass judge.mode=probability calibrate=dev (got judge.mode={judge_cfg['mode']}, "
                f"calibrate={options['calibrate']})"
            )
        if options["split"] == "dev":
            raise ConfigError("judge-audit: calibrate=dev with split=dev reports on what it fitted: use split=test")
        fitted = calibrate_on_real(client, split="dev", progress=True)
        threshold = fitted["threshold"]
        print(
            f"P(yes) threshold {threshold} calibrated on the real suite's dev split ({fitted['items']} items, "
            f"kappa {fitted['kappa']}, {fitted['no_logprobs']} without log-probabilities): "
            f"pass judge.threshold={threshold} to use it",
            file=sys.stderr,
        )
    report = audit(
        client,
        suites=suites,
        modes=modes,
        short=options["set"] == "short",
        split=options["split"],
        judge_options={"threshold": threshold} if threshold is not None else None,
    )
    out = Path(options.get("out") or "judge_audit.json").expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(format_report(report))
    print(f"\nreport: {out}")
    return 0
