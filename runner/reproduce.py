"""`ifgym reproduce PAPER [KEY=VALUE ...]`: every row of a paper's main table(s) as one resumable sweep, then the table.

Each row (the method, its baselines, its ablations) is one `evaluate` into its own folder of the
sweep folder (`runs/reproduce-<paper>-<hash>/<row>[-r<k>]/`), composed from the paper's shared
settings, the row's own switches and the command's overrides, in that order, so that every row
shares the model, judge, episodes and decoding (`paper_tables.shared_decoding` refuses a table
whose rows would decode differently). Re-running the command resumes every row; `shard=I/N` plays
shard I of every row (run the N shards, then the command without `shard=` combines them and prints
the table). `repeats=N` plays each row N times with sampling seeds 0..N-1 (`policy.llm.seed`) and
reports mean ± SD. `smoke=true` runs every row on the embedded small model in every role, on a
handful of short episodes, with the judge trusted explicitly: the whole pipeline, labelled a smoke
run on every line, before paying for served models.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core.structflow import INTRA_TYPES, STRUCTURAL_TYPES
from ifgym.errors import ConfigError, IfgymError, did_you_mean
from ifgym.runner.paper_tables import (
    Column,
    TableSpec,
    build_table,
    decoding_line,
    load_published,
    shared_decoding,
    table_lines,
)

SMOKE_MODEL = "smollm2-135m"
SMOKE_MAX_TOKENS = 48
RESULTS_FILE = "results.txt"  # a row's own results table, as `ifgym eval` prints it
CHAT = "{chat}"  # the plain chat model's policy group: openai (served), embedded under smoke=true


@dataclass(frozen=True)
class Row:
    """A row of the paper's table: its id (its folder), its name as the paper prints it, and its own overrides."""

    id: str
    label: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Paper:
    """What `ifgym reproduce` runs for one paper: shared settings, rows, tables, and the smoke run's settings."""

    name: str
    title: str
    shared: tuple[str, ...]  # env, judge, episodes: what the paper shares across rows
    decoding: tuple[str, ...]  # the model under test's decoding, the same for every row
    rows: tuple[Row, ...]
    tables: tuple[TableSpec, ...]
    smoke: tuple[str, ...] = ()  # the smoke run's env settings (short episodes, embedded user)
    repeats: int = 1  # the paper's runs per row (mean ± SD over them)
    needs_dataset: str | None = None  # why `env.dataset=PATH` is required (the data is not shipped)
    notes: tuple[str, ...] = field(default=())


def _pct(label: str, *keys: str) -> Column:
    return Column(label, keys or (label,), scale=100.0)


_GRAPHIF_COLUMNS = (
    _pct("CSR"),
    _pct("ISR"),
    _pct("DRFR"),
    _pct("WCSR", "WCSR_pooled", "WCSR"),  # GraphIF's eq. 10 pools over constraints
)
_NTM_LENGTHS = (10, 15, 20, 25)
_EVOLIF_COLUMNS = tuple(
    Column(name, (name,), digits=3)
    for name in ("CSR", "ISR", "EDR_len", "EDR_acc", "EDR_succ", "EDR_lss", "REC", "STA")
)
_EVOLIF_PATIENCES = (1, 3, 5)
_LIGHT_SMOKE = (
    f"env.user_llm.embedded_model={SMOKE_MODEL}",
    "env.user_llm.base_url=null",
    f"env.user_llm.max_tokens={SMOKE_MAX_TOKENS}",
)

PAPERS: dict[str, Paper] = {
    "graphif": Paper(
        name="graphif",
        title="GraphIF (arXiv 2511.10051)",
        shared=("env=structflow_paper", "env.context=own", "env.judge_golden=true", "judge=llm", "episodes=32"),
        # the released code's sampling, for every row (the baselines too)
        decoding=(
            "policy.llm.temperature=0.7",
            "policy.llm.top_p=0.8",
            "++policy.llm.extra.top_k=20",
            "policy.llm.max_tokens=2048",
        ),
        rows=(
            Row("llm_only", "LLM-only", (f"policy={CHAT}",)),
            Row("self_refine", "Self-Refine", ("policy=self_refine",)),
            Row("graphif", "GraphIF", ("policy=graphif_paper",)),
            Row("wo_agent", "w/o Agent", ("policy=graphif_paper", "policy.graphif.extraction=fast")),
            Row("wo_graph_prompt", "w/o Graph Prompt", ("policy=graphif_paper", "policy.graphif.graph_prompt=false")),
        ),
        tables=(
            TableSpec("table1", "GraphIF Table 1", ("llm_only", "self_refine", "graphif"), _GRAPHIF_COLUMNS),
            TableSpec(
                "table3", "GraphIF Table 3 (ablations)", ("graphif", "wo_agent", "wo_graph_prompt"), _GRAPHIF_COLUMNS
            ),
        ),
        smoke=("env.max_turns=2", "episodes=1"),  # 5 rows of 5 to 7 calls a turn: one dialogue each
        repeats=3,
        needs_dataset="GraphIF's 24-turn sets are not shipped (no licence): give one with env.dataset=PATH "
        "(structflowbench_graphif.jsonl: episodes=32; mteval_graphif.jsonl: episodes=10)",
    ),
    "context_agent": Paper(
        name="context_agent",
        title="Context-Agent on NTM (arXiv 2604.05552)",
        shared=("env=ntm", "judge=llm", "episodes=405"),
        decoding=("policy.llm.temperature=0.0", "policy.llm.max_tokens=1024"),
        rows=(
            Row("full_history", "Full-History", (f"policy={CHAT}",)),
            Row("truncation", "Truncation (k=4)", ("policy=truncation", "policy.truncation.k=4")),
            Row("context_agent", "Context-Agent", ("policy=context_agent_paper",)),
            Row("wo_tree", "w/o tree", ("policy=context_agent_paper", "policy.context_agent.tree=false")),
            Row(
                "wo_retriever", "w/o retriever", ("policy=context_agent_paper", "policy.context_agent.retrieval=false")
            ),
        ),
        tables=(
            TableSpec(
                "table3",
                "Context-Agent Table 3 (TCR %, ACT tokens per turn)",
                ("full_history", "truncation", "context_agent"),
                (
                    _pct("TCR"),
                    *(_pct(f"TCR@{n}", f"TCR/{n}") for n in _NTM_LENGTHS),
                    _pct("TCR@other", "TCR/other"),  # the released file's dialogues of other lengths, apart
                    Column("ACT", ("ACT",), digits=0),
                    *(Column(f"ACT@{n}", (f"ACT/{n}",), digits=0) for n in _NTM_LENGTHS),
                    Column("TCR Gain", derived="gain", of="TCR", base="full_history"),
                    Column("ACT Drop", derived="drop", of="ACT", base="full_history"),
                ),
                notes=(
                    "TCR Gain: (TCR - Full-History's TCR) / Full-History's TCR, in %; ACT Drop: (Full-History's ACT - "
                    "ACT) / Full-History's ACT, in % (ifgym's reading of the paper's columns, from the means)",
                ),
            ),
            TableSpec(
                "table4",
                "Context-Agent Table 4 (ablations)",
                ("context_agent", "wo_tree", "wo_retriever"),
                (
                    _pct("TCR"),
                    Column("ACT", ("ACT",), digits=0),
                    Column("TCR change", derived="gain", of="TCR", base="context_agent"),
                ),
                notes=("TCR change: (TCR - Context-Agent's TCR) / Context-Agent's TCR, in %",),
            ),
        ),
        smoke=("episodes=1",),
        needs_dataset="NTM is not shipped (no licence): give its file with env.dataset=PATH (dataset-full.jsonl)",
    ),
    "evolif": Paper(
        name="evolif",
        title="EvolIF",
        shared=("env=evolif_paper", "judge=llm"),
        decoding=("policy.llm.temperature=0.0", "policy.llm.max_tokens=1024"),
        rows=(
            Row("main", "the model", (f"policy={CHAT}",)),
            Row("wo_system_prompt", "w/o system prompt", (f"policy={CHAT}", "env.system_prompt=null")),
        ),
        tables=(
            TableSpec("main", "EvolIF main results", ("main", "wo_system_prompt"), _EVOLIF_COLUMNS),
            TableSpec("patience", "EvolIF patience table", (), _EVOLIF_COLUMNS),  # rows from `patiences=`
        ),
        smoke=("env.max_turns=3", *_LIGHT_SMOKE),
        notes=("the paper ran each model at its own defaults; here every row decodes as the header says",),
    ),
    "structflow": Paper(
        name="structflow",
        title="StructFlowBench (arXiv 2502.14494)",
        shared=("env=structflow_paper", "judge=llm", "episodes=155"),
        decoding=("policy.llm.temperature=0.0", "policy.llm.max_tokens=1024"),
        rows=(Row("model", "the model", (f"policy={CHAT}",)),),
        tables=(
            TableSpec(
                "table2",
                "StructFlowBench Table 2 (%)",
                ("model",),
                (
                    *(_pct(t, f"pass_rate/{t}") for t in STRUCTURAL_TYPES),
                    _pct("CSR"),
                    _pct("ISR"),
                    _pct("WCSR", "WCSR_pooled", "WCSR"),  # §3.5's equation, pooled over constraints
                    _pct("DRFR"),
                ),
            ),
            TableSpec(
                "types",
                "StructFlowBench intra-turn constraint types (pass rate, %)",
                ("model",),
                tuple(_pct(t.removesuffix(" Constraint"), f"pass_rate/{t}") for t in INTRA_TYPES),
            ),
            TableSpec("tasks", "StructFlowBench tasks (WCSR per task, %)", ("model",), ()),  # columns from the run
        ),
        smoke=("env.max_turns=2",),
    ),
    "flexbench": Paper(
        name="flexbench",
        title="FlexBench",
        shared=("env=flexbench_paper", "judge=llm"),
        decoding=("policy.llm.temperature=0.3", "policy.llm.max_tokens=1024"),  # §5.1: evaluated models at 0.3
        rows=(
            Row("model", "the model", (f"policy={CHAT}",)),
            Row("second_corpus", "the model, other seeds", (f"policy={CHAT}", "seed=100000")),
        ),
        tables=(
            TableSpec("table2", "FlexBench Table 2 (%)", ("model",), (_pct("Coverage"), _pct("Achievement"))),
            TableSpec(
                "consistency",
                "FlexBench §5.3 consistency (two corpora of the same SOP, other seeds)",
                ("model",),
                (
                    Column("MAD", ("mad",), digits=3),
                    Column("Coverage diff", ("coverage_diff",), digits=3),
                    Column("Achievement diff", ("achievement_diff",), digits=3),
                    Column("dimensions", ("dimensions_compared",), digits=0),
                ),
            ),
        ),
        # the reviewed dimension file: building dimensions needs a model stronger than the smoke run's
        smoke=("env.max_turns=2", "env.dimensions=null", "env.pipeline=ifgym", *_LIGHT_SMOKE),
    ),
}
ALIASES = {"ntm": "context_agent", "context-agent": "context_agent", "structflowbench": "structflow"}
OWN_KEYS = ("smoke", "repeats", "out", "shard", "patiences")
ROW_KEYS = ("env", "policy", "judge", "output")  # groups the rows choose; output= is each row's own file


@dataclass
class Plan:
    """The resolved sweep: each run's folder, row, repeat and overrides."""

    paper: Paper
    folder: Path
    smoke: bool
    repeats: int
    shard: str | None
    rows: list[Row]
    runs: list[tuple[Row, int, list[str]]]  # (row, repeat, the paper's overrides for it)
    tables: list[TableSpec]
    user: list[str]  # the command's overrides, for every row they apply to


def _bool(key: str, value: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"reproduce: {key}={value!r} must be true or false")


def parse(args: Sequence[str]) -> tuple[Paper, dict[str, str], list[str]]:
    """`PAPER [KEY=VALUE ...]` as the paper, reproduce's own keys (smoke, repeats, out, shard, patiences), overrides."""
    if not args or "=" in args[0]:
        raise ConfigError(
            f"reproduce: name the paper first: ifgym reproduce PAPER [KEY=VALUE ...] (PAPER: {', '.join(PAPERS)})"
        )
    name = ALIASES.get(args[0].lower(), args[0].lower())
    if name not in PAPERS:
        raise ConfigError(
            f"reproduce: unknown paper {args[0]!r}.{did_you_mean(args[0], [*PAPERS, *ALIASES])} "
            f"Papers: {', '.join(PAPERS)}"
        )
    own: dict[str, str] = {}
    overrides: list[str] = []
    for item in args[1:]:
        if "=" not in item:
            raise ConfigError(f"reproduce: {item!r} is not KEY=VALUE (see `ifgym reproduce --help`)")
        key, value = item.split("=", 1)
        if key in OWN_KEYS:
            own[key] = value
        elif key.lstrip("+~") in ROW_KEYS:
            raise ConfigError(
                f"reproduce: {item!r}: {key!r} is chosen by the paper's rows (or each row's folder); set their fields "
                f"instead (e.g. policy.llm.model=M, env.dataset=PATH), or one of {', '.join(OWN_KEYS)}"
            )
        else:
            overrides.append(item)
    return PAPERS[name], own, overrides


def plan(args: Sequence[str], cwd: Path | None = None) -> Plan:
    """The sweep `ifgym reproduce` would run for `args`: its folder, rows and each run's overrides."""
    paper, own, user = parse(args)
    smoke = _bool("smoke", own.get("smoke", "false"))
    try:
        repeats = int(own.get("repeats", 1 if smoke else paper.repeats))
    except ValueError:
        raise ConfigError(f"reproduce: repeats={own['repeats']!r} must be a whole number >= 1") from None
    if repeats < 1:
        raise ConfigError(f"reproduce: repeats={repeats} must be >= 1")
    given_dataset = any(o.startswith("env.dataset=") for o in user)
    if paper.needs_dataset and not given_dataset and (paper.name == "context_agent" or not smoke):
        raise ConfigError(f"reproduce {paper.name}: {paper.needs_dataset}")
    rows = list(paper.rows)
    tables = list(paper.tables)
    if paper.name == "evolif":
        rows, tables = _patience_rows(rows, tables, own.get("patiences"))
    elif "patiences" in own:
        raise ConfigError(f"reproduce {paper.name}: patiences= is EvolIF's patience table only")
    chat = "embedded" if smoke else "openai"
    decoding = list(paper.decoding)
    common = [*paper.shared]
    if smoke:
        decoding = [d for d in decoding if not d.startswith("policy.llm.max_tokens=")]
        decoding.append(f"policy.llm.max_tokens={SMOKE_MAX_TOKENS}")
        common += [
            "episodes=2",
            "policy.llm.base_url=null",
            f"policy.llm.embedded_model={SMOKE_MODEL}",
            "judge.llm.base_url=null",
            f"judge.llm.embedded_model={SMOKE_MODEL}",
            "judge.trust=true",
            *paper.smoke,
        ]
    elif os.environ.get("OPENAI_BASE_URL"):  # policy=openai reads it; every row must reach the same server
        common.append(f"policy.llm.base_url={os.environ['OPENAI_BASE_URL']}")
    elif not any(o.startswith("policy.llm.base_url=") and o.split("=", 1)[1] not in ("", "null") for o in user):
        raise ConfigError(
            f"reproduce {paper.name}: the paper's rows run against a served model: give policy.llm.base_url=URL "
            "policy.llm.model=M (any OpenAI-compatible server; or set OPENAI_BASE_URL), or smoke=true to see every "
            "row run on the embedded small model first"
        )
    shard = own.get("shard")
    runs = []
    for row in rows:
        for repeat in range(repeats):
            overrides = [o.replace(CHAT, chat) for o in row.overrides] + common + decoding
            if repeats > 1:
                overrides.append(f"policy.llm.seed={repeat}")
            runs.append((row, repeat, overrides))
    if "out" in own:
        folder = Path(own["out"]).expanduser()
    else:
        defining = sorted(o for o in user if _defines(o))
        key = json.dumps([paper.name, smoke, repeats, [r.id for r in rows], defining])
        tag = "smoke-" if smoke else ""
        folder = (
            (cwd or Path()) / "runs" / f"reproduce-{paper.name}-{tag}{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        )
    if shard is not None:
        user = [*user, f"shard={shard}"]
    return Plan(paper, folder, smoke, repeats, shard, rows, runs, tables, user)


def _defines(item: str) -> bool:
    """Whether an override changes what a row's episodes are (so it names another sweep folder), as `run_key` counts."""
    from ifgym.runner.records import OPERATIONAL_KEYS, OPERATIONAL_LLM_KEYS

    parts = item.lstrip("+~").split("=", 1)[0].split(".")
    return parts[0] not in OPERATIONAL_KEYS and parts[-1] not in OPERATIONAL_LLM_KEYS


def last_wins(overrides: Sequence[str]) -> list[str]:
    """`overrides` with one value per key, the last given (the command's own beat the paper's and the smoke run's)."""
    by_key: dict[str, str] = {}
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        by_key.pop(key, None)
        by_key[key] = item
    return list(by_key.values())


def _patience_rows(rows: list[Row], tables: list[TableSpec], given: str | None) -> tuple[list[Row], list[TableSpec]]:
    """EvolIF's patience table: a row per patience (3 is the main row, the paper's setting)."""
    try:
        values = tuple(int(v) for v in given.strip("[]").split(",")) if given else _EVOLIF_PATIENCES
    except ValueError:
        raise ConfigError(
            f"reproduce evolif: patiences={given!r} must be whole numbers, e.g. patiences=1,3,5"
        ) from None
    if any(v < 1 for v in values):
        raise ConfigError(f"reproduce evolif: patiences={given!r} must be >= 1")
    ids = []
    for value in values:
        if value == 3:
            ids.append("main")
            continue
        row = Row(f"patience_{value}", f"patience {value}", (f"policy={CHAT}", f"env.patience={value}"))
        rows.append(row)
        ids.append(row.id)
    labels = [t if t.id != "patience" else TableSpec(t.id, t.title, tuple(ids), t.columns, t.notes) for t in tables]
    return rows, labels


def run_folder(the_plan: Plan, row: Row, repeat: int) -> Path:
    """Where a row's repeat plays: `<sweep folder>/<row id>` (`-r<k>` with repeats)."""
    return the_plan.folder / (row.id if the_plan.repeats == 1 else f"{row.id}-r{repeat}")


def smoke_label(smoke: bool) -> str:
    """The prefix of every line a smoke run prints."""
    return "[smoke] " if smoke else ""


def run_name(smoke: bool) -> str:
    """How a table names its own rows' numbers: a smoke run's are labelled as such on every row."""
    return "smoke run" if smoke else "this run"


def reproduce(args: Sequence[str], compose: Callable[[list[str]], Any]) -> int:
    """`ifgym reproduce PAPER [KEY=VALUE ...]`: compose every run, check the rows agree, play them, print the tables."""
    from omegaconf import OmegaConf

    from ifgym.runner.evaluate import evaluate

    the_plan = plan(args)
    composed = compose_runs(the_plan, compose)
    configs = {key: cfg for key, (_, cfg) in composed.items()}
    resolved = {key: OmegaConf.to_container(cfg, resolve=True) for key, cfg in configs.items()}
    # every row decodes alike, with the same model: the tables compare methods, nothing else
    decoding = shared_decoding({f"{r}-r{k}": c for (r, k), c in resolved.items()})
    label = smoke_label(the_plan.smoke)
    the_plan.folder.mkdir(parents=True, exist_ok=True)
    print(f"{label}reproduce {the_plan.paper.title}: {len(the_plan.runs)} runs into {the_plan.folder}", file=sys.stderr)
    failed: list[str] = []
    for row, repeat, _ in the_plan.runs:
        overrides = composed[(row.id, repeat)][0]
        folder = run_folder(the_plan, row, repeat)
        print(f"{label}row {row.label} (repeat {repeat + 1} of {the_plan.repeats}) -> {folder}", file=sys.stderr)
        command = ["ifgym", "reproduce", *args]
        job = {"mode": "REPRODUCE", "overrides": overrides, "sweep_dir": str(the_plan.folder.resolve())}
        folder.mkdir(parents=True, exist_ok=True)
        try:  # the row's own results table goes to its folder; the paper's table is what this command prints
            with (folder / RESULTS_FILE).open("w", encoding="utf-8") as results, redirect_stdout(results):
                evaluate(configs[(row.id, repeat)], folder, command=command, job=job)
        except IfgymError as exc:
            print(f"ifgym: error: {label}row {row.label} (repeat {repeat + 1}): {exc}", file=sys.stderr)
            failed.append(f"{row.id} r{repeat}")
    if the_plan.shard is not None:
        print(
            f"{label}shard {the_plan.shard} of every row played; when every shard is done, run the command without "
            "shard= to combine them and print the tables"
        )
        return 1 if failed else 0
    llm = next(iter(resolved.values()))["policy"]["llm"]
    model = llm["model"] if llm.get("base_url") else None  # the embedded model is none the papers ran
    described = model or f"the embedded {llm['embedded_model']}"
    tables = paper_tables(the_plan, model, decoding)
    write_tables(the_plan, tables, decoding, described)
    header = header_lines(the_plan, decoding, described)
    for table in tables:
        lines = table_lines(table, header=header, run=run_name(the_plan.smoke))
        print("\n".join(label + line for line in lines) + "\n")
    print(f"{label}wrote {the_plan.folder / 'tables.md'} and {the_plan.folder / 'tables.json'}")
    if failed:
        print(
            f"ifgym: error: {len(failed)} run(s) failed: {', '.join(failed)}; rerun the command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def compose_runs(the_plan: Plan, compose: Callable[[list[str]], Any]) -> dict[tuple[str, int], tuple[list[str], Any]]:
    """Each run's final overrides and composed config: the paper's, then the command's that apply to its policy.

    An override of a policy's own section (`policy.context_agent.embedder=...`, `policy.light_llm.model=...`)
    goes to the rows whose policy has that section; one that no row's policy has still goes to every row,
    so that a misspelt key fails with the usual message naming it.
    """
    sections: dict[str, set[str]] = {}
    for row, _, overrides in the_plan.runs:
        if row.id not in sections:
            sections[row.id] = set(compose(last_wins(overrides)).policy.keys())
    everywhere = set().union(*sections.values())
    out = {}
    for row, repeat, overrides in the_plan.runs:
        user = [o for o in the_plan.user if _applies(o, sections[row.id], everywhere)]
        final = last_wins([*overrides, *user])
        out[(row.id, repeat)] = (final, compose(final))
    return out


def _applies(item: str, own: set[str], everywhere: set[str]) -> bool:
    parts = item.lstrip("+~").split("=", 1)[0].split(".")
    return parts[0] != "policy" or len(parts) < 3 or parts[1] in own or parts[1] not in everywhere


def header_lines(the_plan: Plan, decoding: Mapping[str, Any], model: str) -> list[str]:
    """The settings every row shares, as the table's header says them."""
    lines = (
        [
            f"smoke run: a handful of short episodes, {SMOKE_MAX_TOKENS} tokens a reply, every role on the embedded "
            f"{SMOKE_MODEL} unless given a server, the judge trusted (judge.trust=true): the pipeline at work, not the "
            "paper's numbers"
        ]
        if the_plan.smoke
        else []
    )
    lines += [
        f"model under test: {model}; decoding (every row): {decoding_line(decoding)}",
        f"repeats: {the_plan.repeats} (sampling seeds 0..{the_plan.repeats - 1}; mean ± SD over them)"
        if the_plan.repeats > 1
        else "repeats: 1",
    ]
    lines += list(the_plan.paper.notes)
    return lines


def _summary(folder: Path) -> dict[str, Any] | None:
    path = folder / "summary.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def paper_tables(the_plan: Plan, model: str | None, decoding: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every table of the paper from the rows' summaries (and, for FlexBench, the consistency of two corpora)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for row, repeat, _ in the_plan.runs:
        summary = _summary(run_folder(the_plan, row, repeat))
        if summary is not None:
            runs.setdefault(row.id, []).append(summary)
    labels = {row.id: row.label for row in the_plan.rows}
    published = load_published(the_plan.paper.name)
    out = []
    for spec in the_plan.tables:
        if spec.id == "tasks":
            spec = _task_columns(spec, runs.get("model") or [])
        table_runs: Mapping[str, list[dict[str, Any]]] = runs
        if spec.id == "consistency":
            table_runs = {"model": _consistency(the_plan)}
        table = build_table(spec, table_runs, labels, published, model)
        table["smoke"] = the_plan.smoke
        table["decoding"] = dict(decoding)
        out.append(table)
    return out


def _task_columns(spec: TableSpec, summaries: Sequence[Mapping[str, Any]]) -> TableSpec:
    tasks = sorted(
        {
            k.split("/")[1]
            for s in summaries
            for k in (s.get("strict") or {})
            if k.startswith("task/") and k.endswith("/WCSR")
        }
    )
    return TableSpec(spec.id, spec.title, spec.rows, tuple(_pct(t, f"task/{t}/WCSR") for t in tasks), spec.notes)


def _consistency(the_plan: Plan) -> list[dict[str, Any]]:
    """FlexBench §5.3 per repeat: `consistency` of the two corpora (the same SOP, other seeds), as summaries."""
    from ifgym.rewards.flexbench.report import consistency
    from ifgym.runner.rollout import read_episodes

    out = []
    for repeat in range(the_plan.repeats):
        corpora = []
        for row_id in ("model", "second_corpus"):
            row = next(r for r in the_plan.rows if r.id == row_id)
            path = run_folder(the_plan, row, repeat) / "episodes.jsonl"
            corpora.append([e for e in read_episodes(path)] if path.exists() else [])
        if not all(corpora):
            continue
        try:
            result = consistency(*corpora)
        except IfgymError as exc:  # e.g. dimensions built anew for each corpus: nothing to compare
            print(f"{smoke_label(the_plan.smoke)}consistency not computed: {exc}", file=sys.stderr)
            continue
        out.append({"strict": {k: (math.nan if v is None else v) for k, v in result.items()}})
    return out


def write_tables(the_plan: Plan, tables: Sequence[Mapping[str, Any]], decoding: Mapping[str, Any], model: str) -> None:
    """`tables.md` and `tables.json` in the sweep folder (a smoke run says so on every line of both)."""
    header = header_lines(the_plan, decoding, model)
    label = smoke_label(the_plan.smoke)
    markdown = [f"# {label}{the_plan.paper.title}: reproduced tables", ""]
    for table in tables:
        lines = table_lines(table, header=header, markdown=True, run=run_name(the_plan.smoke))
        markdown += [f"## {label}{lines[0]}"]
        markdown += [f"{label}{h}" if h and not h.startswith("|") else h for h in lines[1:]]
        markdown.append("")
    (the_plan.folder / "tables.md").write_text("\n".join(markdown) + "\n", encoding="utf-8")
    data = {
        "paper": the_plan.paper.name,
        "model": model,
        "smoke": the_plan.smoke,
        "repeats": the_plan.repeats,
        "decoding": dict(decoding),
        "runs": {f"{row.id}-r{k}": str(run_folder(the_plan, row, k)) for row, k, _ in the_plan.runs},
        "tables": [_jsonable(t) for t in tables],
    }
    (the_plan.folder / "tables.json").write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def _jsonable(node: Any) -> Any:
    if isinstance(node, float) and math.isnan(node):
        return None
    if isinstance(node, Mapping):
        return {k: _jsonable(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_jsonable(v) for v in node]
    return node
