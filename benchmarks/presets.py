"""What a paper preset costs per turn, by role, so a run can be budgeted before it is paid for.

    python benchmarks/presets.py [--episodes 4] [--turns 20] [--reply-words 150] [--only structflow_paper]

For each `*_paper` preset in `PRESETS`, `ifgym eval env=<preset>` runs as a user runs it (a command in
a child process: Hydra config, the judge's audit, the episodes, the report) with every model role
(policy, judge, user) pointed at one canned OpenAI-compatible server in a process of its own, which
answers every prompt usably and at once: the policy with a fixed reply of `--reply-words` words, the
judges with a well-formed answer (yes to everything), the user model with a draft that passes its
checks, FlexBench's paper pipeline as tests/support's stand-in does, any other prompt of ifgym's as the golden
test's stand-in does
(tests/golden/doubles.py). The table gives, per played turn and role, the model calls and the prompt
and completion tokens (from the run's `summary.json`, as the server counts them: whitespace-separated
words, fewer than a real tokenizer's; the completions are canned, so only the prompt side says what a
real run sends), the calls outside the turns (the judge's audit, paid once per judge, mode and prompt, then
read from the cache; a dimension pipeline, once per SOP), and the wall seconds of the command's stages: the
audit, the episodes, the report, and any pipeline stage a preset names (FlexBench's paper pipeline, run on
tests/support's toy SOP, which the server's stand-in pipeline model answers stage by stage). A preset
whose dialogues last as long as the policy keeps its user's patience (EvolIF's) plays `--turns` turns with
patience off instead: the fixed reply fails most rules, and three-turn dialogues would say little about a
long run's turns.

Adding a preset is one row of `PRESETS`: its name, the overrides it needs besides the models' URLs,
the pipeline stages to time (`module:function`, wrapped where the command looks them up), and whether
its dialogue length depends on the replies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.canned_server import server_in_child  # noqa: E402

ROLES = ("user", "policy", "judge")


@dataclass(frozen=True)
class Preset:
    """One paper preset: its config name, the overrides a run needs besides the models, its stages to time."""

    name: str
    overrides: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()  # "module:function", timed where the command calls it
    files: tuple[tuple[str, Callable[[], str]], ...] = ()  # (name, its text) written to the run's folder: `{tmp}`
    open_ended: bool = False  # the dialogue lasts while the user's patience does: play --turns turns instead


def toy_sop() -> str:
    """The toy SOP the stand-in pipeline model answers (tests/support/flexbench_pipeline.py), as an SOP file."""
    from support.flexbench_pipeline import PAPER_SOP

    return f"---\nopening_line: Hello, this is PayCo calling about your new store.\n---\n{PAPER_SOP}\n"


# One row per preset. judge.trust=true: the canned judge says yes to everything, so it fails the audit
# (which is still run and timed); a real judge needs no such flag.
PRESETS = (
    Preset("evolif_paper", ("judge=llm", "judge.mode=rating", "judge.trust=true"), open_ended=True),
    Preset("structflow_paper", ("judge=llm", "judge.trust=true")),
    # the paper's dimension pipeline on tests/support's toy SOP, which the server's stand-in pipeline model
    # answers stage by stage (a first draft to correct: two verification rounds, then complete)
    Preset(
        "flexbench_paper",
        ("judge=llm", "judge.trust=true", "env.sop={tmp}/toy_sop.md"),
        stages=("ifgym.envs.flexbench:build_dimensions",),
        files=(("toy_sop.md", lambda: toy_sop()),),
    ),
)

# ---------------------------------------------------------------------------------------------
# the server's side (`--serve`, in its own process)


def pipeline_stage(messages: list[dict[str, str]]) -> str | None:
    """The stage of FlexBench's paper pipeline a prompt belongs to, or None."""
    from support.flexbench_pipeline import paper_stage

    try:
        return paper_stage(messages)
    except AssertionError:
        return None


def _pipeline_model():
    from support.flexbench_pipeline import paper_answerer

    return paper_answerer()


PIPELINE = None  # the server process's stand-in pipeline model (it counts each stage's calls), made in serve()


def answer(messages: list[dict[str, str]], reply: str) -> str:
    """A usable answer to any of ifgym's prompts; `reply` for the policy (a prompt that is none of ifgym's)."""
    from golden.doubles import TASKS, server_model
    from support.canned_judges import judge_kind, yes_sayer
    from support.canned_user import scripted_user_model, stating_draft
    from support.prompts import prompt_kind

    if pipeline_stage(messages) is not None:
        return PIPELINE(messages)
    if judge_kind(messages) is not None:
        return yes_sayer(messages)
    kind = prompt_kind(messages)
    if kind is not None and kind.startswith("user."):
        return scripted_user_model(generate=stating_draft)(messages)
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    if any(system.startswith(opening) for opening, _ in TASKS):  # a pipeline stage, a caller, a wrapper's call
        return server_model({"messages": messages})
    return reply


def serve(reply_words: int) -> None:
    """Serve `answer` on 127.0.0.1 until standard input ends; print the base URL, then the requests served."""
    from support.canned_server import CannedServer

    global PIPELINE
    PIPELINE = _pipeline_model()
    reply = " ".join(["Here is a careful answer that covers what you asked, point by point."] * 20).split()
    text = " ".join(reply[:reply_words])
    with CannedServer(
        lambda body: answer(body["messages"], text), max_requests=10**9, ttl=86_400, model="canned-model"
    ) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()
        print(json.dumps({"requests": len(server.requests)}), flush=True)


def server_process(reply_words: int) -> contextlib.AbstractContextManager[dict]:
    """The canned server in a child process; yields {"base_url"}, and on exit adds the requests it served."""
    cmd = [sys.executable, __file__, "--serve", "--reply-words", str(reply_words)]
    return server_in_child(cmd)


# ---------------------------------------------------------------------------------------------
# the command's side (a child process running `ifgym eval`, its stages timed)

CLI_CHILD = """
import importlib, json, sys, time
started = time.perf_counter()
cli, evaluate, rollout = map(importlib.import_module, ("ifgym.cli", "ifgym.runner.evaluate", "ifgym.runner.rollout"))
stages = {}


def timed(name, fn):
    def wrapper(*args, **kwargs):
        wall = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            stages[name] = stages.get(name, 0.0) + time.perf_counter() - wall

    return wrapper


# evaluate() looks these up by name when it calls them: wrapping the attributes times the real command's stages
evaluate.audit_judge = timed("audit", evaluate.audit_judge)
rollout.run = timed("episodes", rollout.run)
evaluate.report_run = timed("report", evaluate.report_run)
extra, argv = json.loads(sys.argv[1]), sys.argv[2:]
for where in extra:
    module, name = where.split(":")
    owner = importlib.import_module(module)
    setattr(owner, name, timed(name, getattr(owner, name)))
code = cli.main(["eval", *argv])
stages["command"] = time.perf_counter() - started
print(json.dumps({"code": code, "stages": stages}))
"""


def model_overrides(preset: Preset, base_url: str) -> list[str]:
    """Every model role of the preset at `base_url`: the policy, the judge, and the user model if it has one."""
    from ifgym.cli import compose

    roles = ["policy.llm", "judge.llm"]
    settled = [o for o in preset.overrides if "{tmp}" not in o]  # files the run writes later do not matter here
    if "user_llm" in compose([f"env={preset.name}", *settled]).env:
        roles.append("env.user_llm")
    out = ["policy=openai"]
    for role in roles:
        out += [f"{role}.base_url={base_url}", f"{role}.model=canned-model", f"{role}.api_key_env=null"]
    return out


def measure(preset: Preset, episodes: int, reply_words: int, turns: int = 20) -> dict:
    """One preset's row: calls and tokens per turn by role, the audit's calls, the stages' wall seconds."""
    with server_process(reply_words) as server, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "episodes.jsonl"
        for name, text in preset.files:
            (Path(tmp) / name).write_text(text())
        argv = [
            f"env={preset.name}",
            *(o.format(tmp=tmp) for o in preset.overrides),
            *model_overrides(preset, server["base_url"]),
            *(["env.patience=null", f"env.max_turns={turns}"] if preset.open_ended else []),
            f"episodes={episodes}",
            "progress=false",
            "plots=false",
            f"output={out}",
        ]
        child = subprocess.run(
            [sys.executable, "-c", CLI_CHILD, json.dumps(list(preset.stages)), *argv],
            capture_output=True,
            text=True,
            cwd=tmp,
            check=False,
            env=os.environ | {"IFGYM_CACHE": str(Path(tmp) / "cache"), "WANDB_MODE": "disabled"},
        )
        if child.returncode != 0:
            raise RuntimeError(f"ifgym eval env={preset.name} failed ({child.returncode}):\n{child.stderr[-3000:]}")
        data = json.loads(child.stdout.strip().splitlines()[-1])
        if data["code"] != 0:
            raise RuntimeError(f"ifgym eval env={preset.name} exited {data['code']}:\n{child.stderr[-3000:]}")
        summary = json.loads((out.parent / "summary.json").read_text())
        played = sum(len(json.loads(line).get("turns", [])) for line in out.read_text().splitlines() if line.strip())
    usage = summary["usage"]
    row = {"preset": preset.name, "episodes": summary["episodes"], "turns": played}
    calls = 0
    for role in ROLES:
        used = usage.get(role, {})
        calls += used.get("calls", 0)
        row[role] = {k: used.get(k, 0) / played for k in ("calls", "prompt_tokens", "completion_tokens")}
    row["other_calls"] = server["requests"] - calls  # outside the episodes: the audit, a pipeline
    row["stages"] = data["stages"]
    return row


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table: per turn, calls and prompt/completion tokens of each role; stage seconds."""
    stage_names = ["audit", "episodes", "report"]
    stage_names += sorted({s for r in rows for s in r["stages"]} - {*stage_names, "command"}) + ["command"]
    head = ["preset", "episodes", "turns"]
    head += [f"{role} calls / prompt / completion tok per turn" for role in ROLES]
    head += ["calls outside turns"] + [f"{s} s" for s in stage_names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["preset"], str(r["episodes"]), str(r["turns"])]
        for role in ROLES:
            u = r[role]
            cells.append(f"{u['calls']:.2f} / {u['prompt_tokens']:.0f} / {u['completion_tokens']:.0f}")
        cells.append(str(r["other_calls"]))
        cells += [f"{r['stages'][s]:.2f}" if s in r["stages"] else "-" for s in stage_names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    """Measure every preset (or `--only` one), print the table, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=4, help="episodes per preset (seeds 0..N-1)")
    parser.add_argument("--turns", type=int, default=20, help="turns per dialogue of an open-ended preset")
    parser.add_argument("--reply-words", type=int, default=150, help="words in the policy's every reply")
    parser.add_argument("--only", choices=[p.name for p in PRESETS], help="measure one preset")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server's own process
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.reply_words)
        return []
    rows = [measure(p, args.episodes, args.reply_words, args.turns) for p in PRESETS if args.only in (None, p.name)]
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
