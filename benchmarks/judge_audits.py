"""Measure the packaged embedded judge's audits and ship them: `python benchmarks/judge_audits.py [--only NAME ...]`.

`ifgym eval judge=llm` audits its judge before any episode. For the embedded Qwen2.5-Coder-1.5B the
verdict is known in advance (it fails most suites, README "Judges you can check"), yet on 2 CPU cores
the audit takes minutes before the refusal. This script runs each audit `ifgym eval` would run with
the embedded judge at `conf/judge/llm.yaml`'s settings, once per judge mode a preset uses, and writes
each report to `ifgym/rewards/assets/judge_audits/<key>.json`, the key `ifgym eval` looks it up by
(`ifgym.rewards.audit.audit_key`: the judge's settings, the model file and its sha256, each suite's
mode and prompt version, the gold set's and the real suite's versions). A prompt or gold-set change
changes the key, so a stale report is never used: re-run this script after such a change.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from omegaconf import OmegaConf

import ifgym
from ifgym.conf.schema import JudgeConf
from ifgym.llm import make_client
from ifgym.rewards.audit import SHIPPED_AUDITS, audit, audit_key, format_report

# What `ifgym eval judge=llm` audits, per preset: (name, suites, mode)
AUDITS = (
    ("evolif_blind", ("evolif",), "blind"),  # env=evolif, env=evolif_llm
    ("evolif_rating", ("evolif",), "rating"),  # env=evolif_paper
    ("flexbench_plain", ("flexbench",), "plain"),  # env=flexbench_llm, env=flexbench_paper
    ("structflow_plain", ("structflow_real", "structflow"), "plain"),  # env=structflow, ntm, composite
    ("structflow_paper", ("structflow_real", "structflow"), "paper"),  # env=structflow_paper
)


def judge_config() -> dict:
    """The judge group `ifgym eval judge=llm` composes: the schema's defaults under conf/judge/llm.yaml."""
    llm_yaml = Path(ifgym.__file__).parent / "conf" / "judge" / "llm.yaml"
    merged = OmegaConf.merge(OmegaConf.structured(JudgeConf), OmegaConf.load(llm_yaml))
    return OmegaConf.to_container(merged, resolve=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=[name for name, _, _ in AUDITS], help="audits to run")
    args = parser.parse_args()
    cfg = judge_config()
    client = make_client(cfg["llm"], "judge_audit", "judge.llm")
    SHIPPED_AUDITS.mkdir(parents=True, exist_ok=True)
    for name, suites, mode in AUDITS:
        if args.only and name not in args.only:
            continue
        modes = dict.fromkeys(suites, mode)
        key = audit_key(client, suites, modes)
        start = time.perf_counter()
        report = audit(client, suites=suites, modes=modes, short=True, progress=True)
        path = SHIPPED_AUDITS / f"{key}.json"
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(format_report(report))
        print(f"{name}: {path.name}, {time.perf_counter() - start:.0f} s, passed {report['passed']}\n", flush=True)


if __name__ == "__main__":
    main()
