"""`ifgym` command line: `ifgym eval [overrides…]`, `ifgym export-prompts …`, `ifgym flexbench-dimensions …`.

`eval` is a Hydra app (`hydra.main` over the config groups in ifgym/conf: env, policy, judge,
logger) and takes Hydra's own flags: `-m/--multirun` sweeps (basic sweeper; each job its own run
folder; `SweepSummary` writes a table across jobs at the end), `--cfg`, `--info`,
`--config-dir`/`--config-name`, `hydra.run.dir=`/`hydra.sweep.dir=`. Each job runs the episodes
(resuming into its folder), prints the results table, writes the run record, summary and plots,
and logs to W&B when `logger=wandb`. Mistakes in the config end in one `ifgym: error:` line.
Exit status (`EXIT_*`): 0 finished, 1 finished with failed episodes (or failed sweep jobs), 2 usage
or configuration error, 3 stopped early, 130 Ctrl-C, 143 SIGTERM; every ending but 2 writes the
run's summary.json and run.json status first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from ifgym.records import public_config, run_key, scrub_hydra_files

USAGE_TEMPLATE = """usage: ifgym <command> [args]   (ifgym <command> --help: that command; ifgym --version)

commands:
  eval [FLAGS] [KEY=VALUE ...]  evaluate a policy in an env (Hydra overrides, e.g. env.max_turns=10
                             policy=openai policy.llm.base_url=http://127.0.0.1:8000/v1 policy.llm.model=M
                             judge=llm logger=wandb episodes=20). Hydra's flags: -m/--multirun (sweep,
                             e.g. -m env.patience=2,3), --cfg [job|hydra|all], --info, -cd/--config-dir DIR
                             and -cn/--config-name NAME (your own configs), hydra.run.dir=… hydra.sweep.dir=…
  train [FLAGS] [KEY=VALUE ...]  GRPO (TRL) on an env's prompts with ifgym's turn reward, then ifgym eval of
                             the model before and after on held-out seeds (env/judge/logger groups as in eval,
                             plus trainer=…; e.g. trainer=smoke, trainer.model=PATH, trainer.grpo.max_steps=50;
                             trainer.rollout=episode: GRPO over whole episodes played in the env).
                             Writes metrics.jsonl, model/, eval_before/, eval_after/, train_summary.json
  judge-audit [KEY=VALUE ...]  measure an LLM judge on ifgym's gold set (accuracy, yes-rate on negatives,
                             kappa, injection flips, unknowns, calls, time) and write the report as JSON:
                             judge.llm.base_url=URL judge.llm.model=M judge.mode=MODE suites=evolif,structflow
                             (structflow_real: real replies with StructFlowBench's GPT-4o verdicts, split=dev|test|all)
                             set=short|full (short by default: a screen; full before reporting a judge)
                             out=judge_audit.json (no base_url: the embedded model);
                             judge.mode=probability calibrate=dev: fit judge.threshold on the dev split first
  compare RUN_A RUN_B [KEY=VALUE ...]  pair two runs' episodes by seed: each metric's difference B - A with
                             a paired bootstrap interval and a permutation-test p-value (resamples=, seed=,
                             level=, out=FILE.json, plot=FILE.png: the runs side by side; beside out= by default)
  merge RUN_FOLDER | SHARD_FILES...  combine the shard files of a run (eval shard=I/N wrote
                             episodes.shard-I-of-N.jsonl) into its episodes.jsonl, one record per seed, and write its
                             summary and plots as eval does; shards of another configuration are refused
  rescore RUN [KEY=VALUE ...]  judge a run's replies again without calling the policy, into a new run folder:
                             judge=rules|llm judge.KEY=VALUE checker_semantics=ifgym|evolif out=FOLDER cache=DIR
  export SCHEMA EPISODES... OUT [KEY=VALUE ...]  training data from episodes JSONL files, one schema:
                             prompts (GRPO/PPO rows for ifgym.rewards.trl.TurnReward), sft (passing turns;
                             min_reward=1.0), preferences (DPO pairs of replies to the same prompt; margin=0.1
                             pairs=all|best_worst), turns (one row per turn with verdicts); JSON Lines
  view RUN [RUN_B] [--serve]  write report.html into RUN's folder (one run, or two side by side by seed): results
                             with intervals, plots, judge audit, transcripts; --serve serves it on 127.0.0.1 to label
                             a sample of the judge's verdicts into labels.jsonl (--port N --idle-seconds S --sample N)
  agreement RUN [resamples= level= seed=]  the judge against the human labels of RUN (labels.jsonl): kappa,
                             accuracy and yes-rate on the human's negatives per group with bootstrap intervals,
                             written to summary.json and to the run's W&B run when it has one
  flexbench-dimensions SOP OUT [KEY=VALUE ...]  build an SOP's FlexBench dimension file with a model
                             (KEY=VALUE: LLM settings, e.g. base_url=http://127.0.0.1:8000/v1 model=M;
                             pipeline=paper runs the FlexBench paper's appendix B stages)

config groups (options are the YAML files in ifgym/conf/<group>/):
{groups}
policy wrappers: policy={{truncation, graphif, context_agent, self_refine}} wrap policy.base=chat|scripted|transformers
               (chat uses policy.llm); graphif and context_agent call a light model at policy.light_llm
               policy=graphif_paper, context_agent_paper: each paper's settings (Context-Agent's summaries at
               policy.summary_llm)
"""


GROUPS = ("env", "policy", "judge", "logger")
TRAIN_GROUP = "trainer"  # `ifgym train` has the env, judge and logger groups too
COMMANDS = (
    "eval",
    "train",
    "judge-audit",
    "compare",
    "merge",
    "rescore",
    "export",
    "flexbench-dimensions",
    "view",
    "agreement",
)


def group_options(group: str, config_dir: str | None = None) -> list[str]:
    """The options of a config group: the YAML files in ifgym/conf/<group>/ (and in `config_dir`/<group>/)."""
    from importlib.resources import files

    folders = [files("ifgym.conf") / group]
    if config_dir:
        folders.append(Path(config_dir) / group)
    return sorted(
        {p.name.removesuffix(".yaml") for f in folders if f.is_dir() for p in f.iterdir() if p.name.endswith(".yaml")}
    )


def option_lines() -> list[str]:
    """`group={option, …}` per config group, from the YAML files on disk (`--help` and the README show these)."""
    return [f"{group}={{{', '.join(group_options(group))}}}" for group in (*GROUPS, TRAIN_GROUP)]


def usage() -> str:
    """The help text, listing each config group's options as they are on disk (never stale)."""
    return USAGE_TEMPLATE.format(groups="\n".join(f"  {line}" for line in option_lines()))


def command_help(command: str) -> str:
    """`ifgym COMMAND --help`: that command's entry of the help text (eval and train add the groups and keys)."""
    text = usage()
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"  {command} ")), None)
    if start is None:  # a command the help text does not describe: all of it
        return text
    end = start + 1
    while end < len(lines) and lines[end].startswith("       "):  # its continuation lines
        end += 1
    out = [f"usage: ifgym {lines[start].strip()}", *lines[start + 1 : end]]
    if command in ("eval", "train"):
        groups = text[text.index("config groups") :]
        out += ["", groups.rstrip(), "", "keys:", config_help(command)]
    return "\n".join(out)


def _compose(overrides: list[str], config_dir: str | None = None, config_name: str | None = None):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from ifgym.conf.schema import register_configs

    register_configs()
    if config_dir:  # as --config-dir does: the folder's configs come before ifgym's
        overrides = [*overrides, f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"]
    with initialize_config_module(config_module="ifgym.conf", version_base="1.3"):
        return hydra_compose(config_name=config_name or "config", overrides=overrides)


def compose(overrides: list[str], *, config_dir: str | None = None, config_name: str | None = None):
    """The eval config with overrides applied (as `ifgym eval` composes it); any mistake raises one ConfigError."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.errors import ConfigError

    try:
        cfg = _compose(overrides, config_dir, config_name)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc, overrides, config_dir, config_name)) from None
    check_schema(cfg, overrides)
    return cfg


def check_schema(cfg: Any, overrides: Sequence[str] = ()) -> None:
    """Refuse keys the schema does not have (added with `+key=…`), naming the override and the closest key.

    `env` is open (its keys are the env's arguments, which the env itself checks, with a
    did-you-mean); every other node is typed (`ifgym.conf.schema`).
    """
    from dataclasses import fields, is_dataclass

    from omegaconf import DictConfig, OmegaConf

    from ifgym.errors import ConfigError, did_you_mean

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, DictConfig):
            return
        schema = OmegaConf.get_type(node)
        if is_dataclass(schema):
            allowed = [f.name for f in fields(schema)]
            for key in node:
                if key not in allowed:
                    name = prefix + str(key)
                    culprit = next((o for o in overrides if o.lstrip("+~").split("=", 1)[0] == name), None)
                    where = f" (from {culprit!r})" if culprit else ""
                    known = [prefix + k for k in allowed]
                    raise ConfigError(
                        f"unknown config key {name!r}{where}.{did_you_mean(name, known)} `ifgym eval --help` lists the "
                        "keys; a config group of your own goes in a folder given with --config-dir"
                    )
        for key, child in node.items_ex(resolve=False):
            if prefix + str(key) != "env":
                walk(child, f"{prefix}{key}.")

    walk(cfg, "")


def _flat_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return []
    keys = []
    for k, v in node.items():
        keys.append(prefix + k)
        keys.extend(_flat_keys(v, prefix + k + "."))
    return keys


def _explain(
    exc: Exception, overrides: Sequence[str], config_dir: str | None = None, config_name: str | None = None
) -> str:
    """Name the override at fault, with the closest real key, for a failed composition."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.errors import did_you_mean

    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if exc.__cause__ is not None:  # Hydra wraps the reason (e.g. "could not be converted to Integer")
        message += f": {str(exc.__cause__).splitlines()[0]}"
    generic = f"{message} — see `ifgym eval --help` for the config groups and keys"
    choices = [o for o in overrides if o.split("=", 1)[0] in (*GROUPS, TRAIN_GROUP)]
    for item in choices:
        group, option = item.split("=", 1)
        options = group_options(group, config_dir)
        if "," not in option and option not in options:  # a sweep (a,b) is checked per job
            return f"unknown {group} option {option!r}.{did_you_mean(option, options)} Options: {', '.join(options)}"
    try:  # the keys that exist once the chosen group options are in
        single = [o for o in choices if "," not in o]
        known = _flat_keys(OmegaConf.to_container(_compose(single, config_dir, config_name)))
    except (HydraException, OmegaConfBaseException):
        return generic
    for item in overrides:
        key = item.lstrip("+~").split("=", 1)[0]
        if key.startswith("hydra.") or key in ("hydra", "-m", "--multirun"):  # Hydra's own keys: not the config's
            continue
        if "=" in item and key not in known and key not in (*GROUPS, TRAIN_GROUP):
            if key.startswith("env.") and not item.startswith("+"):  # env keys are the env's arguments
                env_keys = [k for k in known if k.startswith("env.")]
                close = did_you_mean(key, env_keys)
                return (
                    f"{key!r} is not in the env's config.{close} If it is an argument of the env that its YAML "
                    f"leaves out, add it with '+{item}'"
                )
            return f"unknown config key {key!r} in override {item!r}.{did_you_mean(key, known)} ({message})"
    return generic


def config_help(command: str = "eval") -> str:
    """Every typed config key of `command` (eval or train) with its help text (the dataclasses in ifgym.conf.schema)."""
    from dataclasses import MISSING, fields, is_dataclass

    from ifgym.conf.schema import EvalConf, LLMConf, TrainConf

    lines = []

    def walk(schema: Any, prefix: str) -> None:
        for f in fields(schema):
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            if is_dataclass(default) and not isinstance(default, LLMConf):
                walk(type(default), f"{prefix}{f.name}.")
            elif "help" in f.metadata:
                lines.append(f"  {prefix + f.name:<28} {f.metadata['help']}")

    walk(TrainConf if command == "train" else EvalConf, "")
    lines.append("\nLLM settings (under policy.llm, policy.light_llm, judge.llm and env.*_llm):")
    walk(LLMConf, "*.")
    return "\n".join(lines)


# Where each role's model settings are given (env roles: env.<role>_llm), for messages that name them.
ROLE_CONFIG_KEYS = {
    "policy": "policy.llm",
    "light": "policy.light_llm",
    "summary": "policy.summary_llm",
    "judge": "judge.llm",
}


def _client_for(role: str, settings: Any, clients: dict[str, Any], config_key: str | None = None) -> Any:
    """One client per role for the whole run (shared by every episode: one semaphore, one usage counter).

    `config_key` is where the settings were given, when not the role's own key (a light model that
    takes policy.llm's settings).
    """
    from ifgym.llm import make_client

    clients[role] = make_client(settings, role, config_key or ROLE_CONFIG_KEYS.get(role, f"env.{role}_llm"))
    return clients[role]


def use_cache(clients: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Give every client of the run the call cache `cache=DIR` names (one cache for every role); nothing when off."""
    from ifgym.llm import CallCache

    if resolved.get("cache"):
        cache = CallCache(resolved["cache"], nondeterministic=bool(resolved.get("cache_nondeterministic")))
        for client in clients.values():
            client.cache = cache


def check_model_servers(resolved: dict[str, Any], clients: dict[str, Any]) -> None:
    """Ask each role's server once (`ifgym.llm.check_servers`) and print its notes.

    A model the check filled in goes into the config: the judge audit uses it, `run.json` records it.
    """
    from ifgym.llm import check_servers

    for note in check_servers(clients.values()):
        print(note, file=sys.stderr)
    for client in clients.values():
        group, _, name = (getattr(client, "config_key", None) or "").partition(".")
        settings = resolved.get(group, {}).get(name)
        if isinstance(settings, dict) and settings.get("base_url"):
            settings["model"] = client.config.model


def fill_request_limits(resolved: dict[str, Any], concurrency: int) -> None:
    """Give every model setting without its own `concurrency` (policy.llm, judge.llm, env.*_llm …) the run's."""
    groups = [resolved["policy"], resolved["judge"], resolved["env"]]
    for group in groups:
        for key, value in group.items():
            if (key == "llm" or key.endswith("_llm")) and isinstance(value, dict) and value.get("concurrency") is None:
                value["concurrency"] = concurrency


def build_policy(policy_cfg: dict[str, Any], clients: dict[str, Any]) -> Callable[[], Any]:
    """A factory of fresh policies (one per episode: policies keep per-episode state).

    Wrapper kinds (truncation, graphif, context_agent, self_refine) wrap a fresh base policy (`policy.base`:
    chat, scripted or transformers); graphif and context_agent share one light-model client (role "light").
    Context_agent's decision and summary models each default to the other: of `policy.light_llm` and
    `policy.summary_llm`, one left equal to `policy.llm` takes the other's settings; the summaries go
    to a client of their own (role "summary") only when the two differ.
    Kinds chat (policy=embedded, openai) and transformers are the full-history baseline: they run through
    `Truncation(k=None)`, which sends the transcript unchanged and keeps the same per-turn cost
    records as the wrappers (calls, tokens, context tokens), so its calls/turn and ACT are reported.
    """
    from ifgym.errors import ConfigError, UnknownNameError
    from ifgym.policies import ChatPolicy, ContextAgent, GraphIF, ScriptedPolicy, SelfRefine, Truncation
    from ifgym.policies.embeddings import make_embedder

    kind = policy_cfg["kind"]
    if kind not in POLICY_KINDS:
        raise UnknownNameError("policy kind", kind, POLICY_KINDS)
    base = kind if kind in BASE_KINDS else policy_cfg.get("base", "chat")
    if base not in BASE_KINDS:
        raise UnknownNameError("policy.base (the policy a wrapper wraps)", base, BASE_KINDS)
    if base == "chat":
        if policy_cfg.get("require_server") and not policy_cfg["llm"]["base_url"]:
            raise ConfigError(
                "policy=openai needs the server: policy.llm.base_url=http://HOST:PORT/v1 (or OPENAI_BASE_URL in the "
                "environment, as the openai client reads it; https://api.openai.com/v1 for OpenAI) and "
                "policy.llm.model=NAME (without a URL ifgym would run the embedded model instead)"
            )
        client = _client_for("policy", policy_cfg["llm"], clients)

        def make_base() -> Any:
            return ChatPolicy(client, system_prompt=policy_cfg["system_prompt"])
    elif base == "transformers":
        from ifgym.policies.transformers import TransformersPolicy, load_pretrained, set_threads

        settings = dict(policy_cfg["transformers"])
        set_threads(settings.pop("threads"))
        # one model for the run (episodes take turns on it); each episode gets its own policy object
        model, tokenizer = load_pretrained(settings.pop("model"), settings.pop("device"))

        def make_base() -> Any:
            return TransformersPolicy(model, tokenizer, system_prompt=policy_cfg["system_prompt"], **settings)
    else:
        if not policy_cfg["replies"]:
            where = "policy=scripted" if kind == "scripted" else f"policy={kind} with policy.base=scripted"
            raise ConfigError(f"{where} needs policy.replies=[...] (at least one reply)")

        def make_base() -> Any:
            return ScriptedPolicy(policy_cfg["replies"])

    if kind in ("chat", "transformers"):
        return lambda: Truncation(make_base(), k=None)
    if kind in BASE_KINDS:
        return make_base
    if kind == "truncation":
        k = policy_cfg["truncation"]["k"]
        Truncation(make_base(), k=k)  # a bad k fails now, before any episode
        return lambda: Truncation(make_base(), k=k)
    if kind == "self_refine":
        rounds = policy_cfg["self_refine"]["rounds"]
        SelfRefine(make_base(), rounds=rounds)  # a bad setting fails now, before any episode
        return lambda: SelfRefine(make_base(), rounds=rounds)
    light_key, light_cfg = "policy.light_llm", policy_cfg["light_llm"]
    summary_cfg = policy_cfg.get("summary_llm") if kind == "context_agent" else None
    if summary_cfg is not None:  # a decision or summary model left as the backbone takes the other's settings
        if light_cfg == policy_cfg["llm"] and summary_cfg != policy_cfg["llm"]:
            light_key, light_cfg = "policy.summary_llm", summary_cfg
        elif summary_cfg == policy_cfg["llm"]:
            summary_cfg = light_cfg
    light = _client_for("light", light_cfg, clients, light_key)
    if kind == "graphif":
        settings = dict(policy_cfg["graphif"])
        GraphIF(make_base(), light, **settings)
        return lambda: GraphIF(make_base(), light, **settings)
    summary = _client_for("summary", summary_cfg, clients) if summary_cfg not in (None, light_cfg) else None
    settings = dict(policy_cfg["context_agent"])
    # one embedder (and loaded model) for the whole run
    embedder = make_embedder(settings.pop("embedder"), settings.pop("embedder_model", None))
    probe = ContextAgent(make_base(), light, summary=summary, embedder=embedder, **settings)
    note = next((d for d in probe.protocol()["deviations"] if d.startswith("embedder ")), None)
    if note is not None:  # θ was set for the paper's embedder: say so before the run, once
        print(f"ifgym: note: Context-Agent's {note}", file=sys.stderr)
    return lambda: ContextAgent(make_base(), light, summary=summary, embedder=embedder, **settings)


BASE_KINDS = ("chat", "scripted", "transformers")
POLICY_KINDS = (*BASE_KINDS, "truncation", "graphif", "context_agent", "self_refine")


def build_env(env_cfg: dict[str, Any], judge_cfg: dict[str, Any], clients: dict[str, Any]) -> Callable[[], Any]:
    """A factory of envs from the env and judge groups; model settings (`*_llm`) become shared clients."""
    import gymnasium as gym

    from ifgym.errors import ConfigError, IfgymError

    env_id = env_cfg["id"]
    kwargs: dict[str, Any] = {}
    for key, value in env_cfg.items():
        if key == "id":
            continue
        kwargs[key] = _client_for(key[: -len("_llm")], value, clients) if key.endswith("_llm") else value
    kwargs["judge"] = judge_cfg["kind"]
    if judge_cfg["kind"] == "llm":
        kwargs["judge_llm"] = _client_for("judge", judge_cfg["llm"], clients)
        if judge_cfg.get("mode") is not None:
            kwargs["judge_mode"] = judge_cfg["mode"]
        if judge_cfg.get("threshold") is not None:
            if judge_cfg.get("mode") != "probability":
                raise ConfigError(
                    f"judge.threshold={judge_cfg['threshold']} is read in probability mode only: "
                    "add judge.mode=probability, or drop judge.threshold"
                )
            kwargs["judge_threshold"] = judge_cfg["threshold"]

    def make_env() -> Any:
        return gym.make(env_id, **kwargs)

    try:  # fail on a bad env config (misspelt arguments get a did-you-mean) before any model call
        make_env().close()
    except gym.error.Error as exc:  # gymnasium's own: an unknown id, with its did-you-mean
        ids = ", ".join(i for i in gym.registry if i.startswith("ifgym/"))
        raise ConfigError(f"env.id={env_id}: {exc} (ifgym's ids: {ids})") from None
    except IfgymError as exc:  # the env refused an argument: say which env it was
        raise ConfigError(f"env ({env_id}): {exc}") from None
    return make_env


def _claim_run_folder(out: Path) -> None:
    """Summary and plots go beside the episodes file: refuse a folder whose summary belongs to another file."""
    from ifgym.errors import ConfigError

    if out.is_dir():
        raise ConfigError(f"output={out} is a folder; give the episodes file, e.g. output={out / 'episodes.jsonl'}")
    summary = out.parent / "summary.json"
    if summary.exists():
        owner = json.loads(summary.read_text(encoding="utf-8")).get("output")
        if owner is not None and Path(owner).resolve() != out.resolve():  # one file, however it was written
            raise ConfigError(
                f"{out.parent} already holds the summary and plots of {owner}; give this run its own folder "
                f"(e.g. output={out.parent / out.stem / 'episodes.jsonl'})"
            )


def run_intervals(tally: Any, summary: dict[str, Any], env: Any, settings: Any) -> dict[str, Any]:
    """`ci` (bootstrap interval per headline metric and pass rate, strict and loose) and `ci_settings`.

    Resamples the episodes' rows in the run's tally (`report.RunTally`) with the env's `summarize_rows`.
    """
    from ifgym.stats import intervals, metric_names

    ci = {
        mode: intervals(
            getattr(tally, mode),
            env.summarize_rows,
            metric_names(summary[mode], env.headline_metrics),
            loose=mode == "loose",
            settings=settings,
            ratios=getattr(env, "summary_ratios", None),
        )
        if summary[mode]
        else {}
        for mode in ("strict", "loose")
    }
    return {"ci": ci, "ci_settings": settings.to_json()}


def audit_judge(env: Any, judge_cfg: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """Audit the env's LLM judge on the gold set's short suite (cached) before any episode; the summary's `judge`.

    Refuses (ConfigError) a judge below the floor unless `judge.trust=true`, which is recorded.
    Says so when the judge is the embedded model (no `judge.llm.base_url`), and prints its audit.
    """
    from ifgym.errors import ConfigError
    from ifgym.llm import make_client
    from ifgym.rewards.audit import cached_audit, format_report

    if judge_cfg["kind"] != "llm":
        return {"kind": judge_cfg["kind"]}
    judge = getattr(env.scorer, "judge", None)
    suite = getattr(env, "judge_suite", None)
    if judge is None or suite is None:
        return {"kind": "llm", "audit": None, "note": f"{type(env).__name__} has no LLM judge to audit"}
    if judge_cfg["llm"]["base_url"] is None:
        print(
            f"judge=llm without judge.llm.base_url: the embedded model ({judge.client.model}) is the judge. "
            "Its audit on ifgym's gold set follows; pass judge.llm.base_url=... judge.llm.model=... for a "
            "stronger judge.",
            file=sys.stderr,
        )
    # a checklist judge is audited on real replies first (StructFlowBench's own verdicts), then on the hand-written set
    suites = ["structflow_real", suite] if suite == "structflow" else [suite]
    # a client of its own, so the run's judge usage counts the episodes only
    report = cached_audit(
        make_client(judge_cfg["llm"], "judge_audit", "judge.llm"),
        suites=suites,
        modes=dict.fromkeys(suites, judge.mode),
        progress=progress,
        judge_options={"threshold": judge.threshold} if judge.mode == "probability" else None,
    )
    print(format_report(report), file=sys.stderr)
    numbers = {k: v for k, v in report["suites"][suite].items() if k not in ("verdicts", "groups")}
    numbers["groups"] = {g: dict(v) for g, v in report["suites"][suite]["groups"].items()}
    record = {
        "kind": "llm",
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
            raise ConfigError(audit_refusal(record, failures, embedded=judge_cfg["llm"]["base_url"] is None))
        record["trusted_below_floor"] = True
    return record


def audit_refusal(record: dict[str, Any], failures: Sequence[str] | None = None, *, embedded: bool) -> str:
    """The one-line refusal of a judge below the audit's floor (`audit_judge`'s record): what failed, and the fix.

    `failures` are every suite's ("suite: failure"); by default the record's own suite's. The embedded
    model is the judge only for want of a URL; the fix named first is a served judge.
    """
    failures = "; ".join(failures if failures is not None else record["audit"]["failures"])
    which = f"{record['model']}, mode {record['mode']}"
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
    if judge.get("kind") != "llm" or not audit:
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
        from ifgym.report import real_agreement

        lines.append(f"judge {judge['model']}: {real_agreement(judge)}")
    verdict = "passed" if audit["passed"] else "FAILED (run with judge.trust=true)"
    lines.append(
        f"judge: {judge['model']}, mode {judge['mode']}; audit ({audit['set']} gold set, {judge['suite']}) {verdict}: "
        f"accuracy {num(audit['accuracy'])}, yes-rate on negatives {num(audit['yes_rate_negatives'])}, "
        f"kappa {num(audit['kappa'])}, injection flip {num(audit['injection_flip_rate'])}, "
        f"unknown {num(audit['unknown_rate'])}"
    )
    return lines


def evaluate(
    cfg: Any,
    run_dir: str | Path | None = None,
    *,
    command: Sequence[str] | None = None,
    job: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one evaluation for a composed config; returns the summary dict it also writes.

    The run folder is `run_dir` (Hydra's output directory under `ifgym eval`), else the folder of
    `output=`, else `runs/<env>-<run_key>/`. It receives `episodes.jsonl` (unless `output=` names
    another file), `run.json` (the run record), `summary.json` and the plots. `command` and `job`
    (the Hydra job: mode, number, sweep folder, overrides) go into the run record.

    With `shard=I/N` the run plays its share of the seeds into `episodes.shard-I-of-N.jsonl` (with
    `run.` and `summary.shard-I-of-N.json`, no plots), skipping seeds finished in the folder's other
    episodes files; without it, shard files found beside the episodes file are combined into it
    first (`ifgym.envs.shards.combine`), so their seeds are not played again.
    """
    from omegaconf import OmegaConf

    import ifgym  # noqa: F401  (registers the env ids)
    from ifgym.envs.rollout import claim_output, select_seeds
    from ifgym.envs.shards import Shard, combine, finished_seeds, shard_files
    from ifgym.errors import ConfigError
    from ifgym.records import RECORD_FILE, RunRecord, default_run_dir

    check_schema(cfg, (job or {}).get("overrides", ()))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    _ci_settings(resolved)  # a bad interval setting fails now, not after the episodes
    key = run_key(resolved)
    if resolved["episodes"] < 1:
        raise ConfigError(f"episodes must be >= 1, got {resolved['episodes']}")
    if (job or {}).get("mode") == "MULTIRUN" and resolved["output"]:
        raise ConfigError(
            f"output={resolved['output']} would give every job of the sweep the same episodes file; drop output= "
            "(each job writes episodes.jsonl in its own folder under hydra.sweep.dir)"
        )
    if any(o.startswith("shard=") and "," in o for o in (job or {}).get("overrides", ())):
        raise ConfigError(
            "shard= swept with -m would put each shard in a job folder of its own; run the shards as separate "
            "commands (the same overrides with shard=0/N … shard=N-1/N), then `ifgym merge` the run folder"
        )
    shard = Shard.parse(resolved["shard"]) if resolved["shard"] is not None else None
    folder = Path(run_dir) if run_dir is not None else default_run_dir(resolved)
    out = Path(resolved["output"]).expanduser() if resolved["output"] else folder / "episodes.jsonl"
    _claim_run_folder(out)
    if resolved["concurrency"] < 1:
        raise ConfigError(f"concurrency must be >= 1, got {resolved['concurrency']}")
    run_file = out
    if shard is not None:
        out = shard.file(run_file)
        if not shard.seeds(range(resolved["episodes"])):  # a run plays `episodes` seeds, filtered or not
            raise ConfigError(
                f"shard={shard} has no seeds: episodes={resolved['episodes']} makes only {resolved['episodes']} "
                "shards; use fewer shards or more episodes"
            )
    # the episodes file's writer lock before anything is written: a second writer refused here (ConfigError
    # naming the first) leaves the first run's run.json, summary.json and episodes untouched
    with claim_output(out):
        if shard is None and shard_files(out):
            combined = combine(out, [p for _, p in shard_files(out)], key)
            print(
                f"combined the shard files into {out}: {combined.finished} finished and {combined.failed} failed "
                f"episodes ({combined.added} lines from the shards); their seeds are not played again",
                file=sys.stderr,
            )
        fill_request_limits(resolved, resolved["concurrency"])
        clients: dict[str, Any] = {}
        make_policy = build_policy(resolved["policy"], clients)
        make_env = build_env(resolved["env"], resolved["judge"], clients)
        check_model_servers(resolved, clients)  # a wrong URL, key or model ends the run here, before any call
        use_cache(clients, resolved)
        first_env = make_env().unwrapped
        # the run's seeds, after any filter of the env's (EvolIF's trivial dialogues): no model call decides them
        seeds = select_seeds(first_env, resolved["seed"], resolved["episodes"]).seeds
        if shard is not None:
            # seeds another shard (or the run itself) finished are done: no replays to merge later
            elsewhere = finished_seeds([run_file, *(p for _, p in shard_files(run_file) if p != out)], key)
            done = elsewhere - finished_seeds([out], key)
            seeds = [s for s in shard.seeds(seeds) if s not in done]
            if not seeds:
                print(
                    f"shard {shard}: every one of its seeds is finished in the run folder {out.parent}; nothing to play"
                )
                return {"output": str(out), "episodes": 0}
        judge_record = audit_judge(first_env, resolved["judge"], progress=resolved["progress"])

        record_name = shard.file(Path(RECORD_FILE)).name if shard else RECORD_FILE
        record = RunRecord(
            out.parent, config=resolved, key=key, command=command or sys.argv, hydra=job, name=record_name
        )
        stale = record.stale_run()
        if stale is not None:  # we hold the lock, so the process that wrote "running" is gone
            print(
                f"ifgym: {record.path} says a run (pid {stale['pid']}, started {stale['started']}) is still running, "
                f"but nothing holds {out.name}: that process is gone (killed?); this run takes over and resumes it",
                file=sys.stderr,
            )
            record.data["took_over"] = stale
        setup = getattr(make_policy(), "protocol", None)  # a wrapper names its setup and its paper's differences
        if callable(setup):
            record.data["policy_protocol"] = setup()
        record.start(clients)
        if clients:  # said once, before a first reset that may load a model and generate for minutes
            from ifgym.llm.client import model_place

            print("models: " + ", ".join(f"{role} {model_place(c)}" for role, c in clients.items()), file=sys.stderr)
        if resolved["progress"] or clients:
            from ifgym.report import count

            limits = ", ".join(f"{role} {c.config.concurrency}" for role, c in clients.items())
            print(
                f"concurrency: {count(resolved['concurrency'], 'episode')} at once"
                + (f"; requests in flight at most: {limits}" if limits else ""),
                file=sys.stderr,
            )
        return _play_and_report(
            resolved, make_env, make_policy, seeds, out, record, first_env, judge_record, clients, shard, job
        )


def _play_and_report(
    resolved: dict[str, Any],
    make_env: Callable[[], Any],
    make_policy: Callable[[], Any],
    seeds: list[int],
    out: Path,
    record: Any,
    first_env: Any,
    judge_record: dict[str, Any],
    clients: dict[str, Any],
    shard: Any,
    job: dict[str, Any] | None,
) -> dict[str, Any]:
    """Play the run's seeds and write its summary and record, however the run ends (README: "Every ending").

    Finished, or finished with failed episodes: returns the summary. Stopped early (RunStoppedError)
    or interrupted (Ctrl-C, SIGTERM: RunInterrupted): the summary of what the episodes file holds is
    written first, then the error is raised, naming the seeds never played and the command to resume.
    """
    from ifgym.envs.rollout import file_result, run
    from ifgym.errors import ConfigError, RunInterrupted, RunStoppedError

    ci_settings = _ci_settings(resolved)
    logger = None
    signals: list[str] = []
    stopped: RunStoppedError | None = None
    interrupted = False
    try:
        with _sigterm_interrupts(signals):
            try:
                if resolved["logger"]["kind"] == "wandb":
                    logger = _wandb_logger(
                        resolved,
                        record.data["run_key"],
                        first_env.summarize,
                        out.parent,
                        job,
                        loose=_has_loose(first_env),
                    )
                executor = resolved["executor"]
                if executor["kind"] not in ("local", "ray"):
                    raise ConfigError(f"executor.kind must be local or ray, got {executor['kind']!r}")
                if executor["kind"] == "ray":  # Ray is imported only when chosen
                    from functools import partial

                    from ifgym.envs.ray_executor import run_ray

                    runner: Callable[..., Any] = partial(
                        run_ray, num_workers=executor["num_workers"], address=executor["address"]
                    )
                else:
                    runner = run
                result = runner(
                    make_env,
                    make_policy,
                    seeds,
                    output=out,
                    run_key=record.data["run_key"],
                    concurrency=resolved["concurrency"],
                    progress=resolved["progress"],
                    on_episode=logger.log_episode if logger else None,
                    retry_failed=resolved["retry_failed"],
                    max_failure_rate=resolved["max_failure_rate"],
                    episode_timeout=resolved["episode_timeout"],
                )
                unplayed: list[int] = []
            except RunStoppedError as exc:  # what the file holds is summarized: the stop names what ended it
                stopped = exc
                result, unplayed = file_result(out, seeds)
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM: the episodes in flight were cancelled
                interrupted = True
                result, unplayed = file_result(out, seeds)
            ending = _ending(result, unplayed, stopped, signals if interrupted else None, record.data["command"])
            summary, plots, charts = report_run(
                first_env,
                resolved,
                out,
                result.episodes,
                result.failures,
                worker_deaths=result.worker_deaths,
                judge_record=judge_record,
                record=record,
                roles=clients,
                ci_settings=ci_settings,
                shard=shard,
                ending=ending,
            )
    except KeyboardInterrupt:  # interrupted again while the summary was being written: the record says so
        record.finish("interrupted", summary=None)
        signal_name = "SIGTERM" if signals else "SIGINT"
        raise RunInterrupted(
            f"interrupted ({signal_name}) while the summary was written: {record.path} says so; the episodes are in "
            f"{out}; resume with: {record.data['command']}",
            signal_name,
        ) from None
    except BaseException as exc:
        record.fail(exc)
        raise
    if logger and not interrupted:
        logger.finish(result.episodes, summary, plots, charts=charts)
        if logger.settings["mode"] == "offline":
            print(f"W&B: offline run in {logger.run.dir}; upload it with `wandb sync {Path(logger.run.dir).parent}`")
    written = (
        f"wrote {out.parent / record.data['summary']} and {record.path.name} ({len(result.episodes)} finished, "
        f"{len(result.failed)} failed, {len(unplayed)} never played); resume with: {ending['resume']}"
    )
    if stopped is not None:
        raise RunStoppedError(f"{stopped}. {written}")
    if interrupted:
        signal_name = ending["signal"]
        raise RunInterrupted(f"interrupted ({signal_name}): {written}", signal_name)
    return summary


def _ending(
    result: Any, unplayed: list[int], stopped: BaseException | None, signals: list[str] | None, command: str
) -> dict[str, Any]:
    """How a run ended, as summary.json's `ending` and run.json say it: status, why, seeds never played, resume."""
    if signals is not None:
        signal_name = "SIGTERM" if signals else "SIGINT"
        status, reason = "interrupted", f"{signal_name} ({'Ctrl-C' if signal_name == 'SIGINT' else 'terminated'})"
    elif stopped is not None:
        status, reason = "stopped_early", str(stopped)
    elif result.failed:
        status, reason = (
            "finished_with_failures",
            f"{len(result.failed)} of {len(result.failed) + len(result.episodes)} episodes failed",
        )
        if not result.episodes:
            kind, messages = next(iter(result.failures["examples"].items()))
            reason = f"every episode failed; commonest error: {kind}: {messages[0]}"
    else:
        status, reason = "finished", None
    ending: dict[str, Any] = {"status": status, "reason": reason, "unplayed_seeds": unplayed}
    ending["resume"] = command if status != "finished" else None
    if signals is not None:
        ending["signal"] = signal_name
    return ending


@contextmanager
def _sigterm_interrupts(signals: list[str]) -> Iterator[None]:
    """A block in which SIGTERM ends the run as Ctrl-C does (noted in `signals`); in the main thread only."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        signals.append("SIGTERM")
        on_sigint = signal.getsignal(signal.SIGINT)
        if not callable(on_sigint):
            raise KeyboardInterrupt
        on_sigint(signal.SIGINT, frame)  # asyncio.run's cancels the run's task, then raises KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _ci_settings(resolved: dict[str, Any]) -> Any:
    """The run's bootstrap-interval settings (`ci`, `ci_resamples`, `ci_level`, seeded with `seed`); None when off."""
    from ifgym.stats import CISettings

    if not resolved["ci"]:
        return None
    return CISettings(resolved["ci_resamples"], resolved["ci_level"], resolved["seed"])


def _has_loose(env: Any) -> bool:
    """Whether the env reports a loose variant (FlexBench and EvolIF's paper reading do not)."""
    return getattr(env, "loose_metrics", True) and getattr(env, "checker_semantics", "ifgym") == "ifgym"


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
    from ifgym.envs.rollout import select_seeds, usage_totals
    from ifgym.llm import Usage
    from ifgym.report import RunTally, chart_data, results_table, run_title, write_plots, write_summary

    semantics = getattr(env, "checker_semantics", "ifgym")
    # one pass over the episodes file: each episode is read, reduced to rows and counts, and dropped
    tally = RunTally.of(episodes, env, loose=_has_loose(env))
    finished = len(episodes) > 0  # none when every episode failed, or none finished before a stop: no metrics
    loose = env.summarize_rows(tally.loose, loose=True) if _has_loose(env) and finished else {}
    strict = env.summarize_rows(tally.strict) if finished else {}
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
    summary["headline"] = list(getattr(env, "headline_metrics", ()))
    summary["headline_metric"] = getattr(env, "headline_metric", None)
    definitions = getattr(env, "metric_definitions", {})
    summary["definitions"] = {k: v for k, v in definitions.items() if k in summary["strict"] or k == "loose"}
    aliases = getattr(env, "metric_aliases", {})
    summary["aliases"] = {k: v for k, v in aliases.items() if k in summary["strict"]}
    summary["judge"] = judge_record
    policy = resolved["policy"]
    summary["run"] = record.summary_reference() | {
        "env": summary["protocol"].get("env_id") or resolved["env"]["id"],  # the id its episodes carry
        "policy": policy["kind"],
        "judge": resolved["judge"]["kind"],
        "models": record.data["models"],
    }
    if "transformers" in (policy["kind"], policy.get("base")):  # in process: no client names the model
        summary["run"]["policy_model"] = (policy.get("transformers") or {}).get("model")
    if ci_settings is not None and finished:
        summary.update(run_intervals(tally, summary, env, ci_settings))
    charts = chart_data(tally, summary)
    files = shard is None and resolved["plots"] and not quiet and finished
    plots = write_plots(tally, summary, out.parent) if files else {}
    if hasattr(env, "write_report") and shard is None and not quiet and finished:  # FlexBench: dimension table
        plots.update(env.write_report(episodes, out.parent, plots=resolved["plots"], subtitle=run_title(summary)))
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


def _wandb_logger(
    resolved: dict[str, Any],
    key: str,
    summarize: Callable[..., Any],
    folder: Path,
    job: dict[str, Any] | None,
    *,
    loose: bool,
) -> Any:
    """The run's W&B logger (None when W&B is disabled); a sweep's jobs are grouped under the sweep's name."""
    from ifgym.tracking import WandbLogger, resolve_settings

    job = job or {}
    sweep = Path(job["sweep_dir"]).name if job.get("mode") == "MULTIRUN" else None
    name = f"{sweep}-{job['job_num']}" if sweep else folder.name
    settings = resolve_settings(resolved["logger"], run_dir=folder, name=name, group=sweep)
    if settings["mode"] == "disabled":
        print("W&B: disabled (logger.mode or WANDB_MODE); nothing is logged to W&B")
        return None
    config = resolved | {"hydra": job} if job else resolved
    return WandbLogger(settings, config=config, run_key=key, summarize=summarize, loose=loose)


class JobFailed:
    """What a sweep job returns when it stopped on an ifgym error (the sweep goes on with the next job)."""

    def __init__(self, error: str):
        self.error = error


class RunFolders(Callback):
    """Hydra callback: before Hydra makes a run's (or a sweep's) folder, note which of its folders already exist.

    A run that stops on a config error leaves its folder empty; `_drop_if_empty` then removes the
    folders this invocation made, and only those: never one the user made (`mkdir -p work/mydir &&
    cd work/mydir && ifgym eval … hydra.run.dir=$PWD/run` keeps `mydir`).
    """

    existed: set[Path] | None = None  # this invocation's note (None: nothing noted, so nothing above a run is removed)

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        RunFolders.note(config, "hydra.run.dir")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        RunFolders.note(config, "hydra.sweep.dir")

    @staticmethod
    def note(config: Any, key: str) -> None:
        """Record the folder at `key` of the Hydra config, what it holds, and each of its parents that exists now."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            folder = Path(str(OmegaConf.select(config, key))).resolve()
        except (OmegaConfBaseException, OSError, ValueError):
            return  # Hydra reports the same error when it makes the folder
        held = set(folder.iterdir()) if folder.is_dir() else set()
        RunFolders.existed = {p for p in (folder, *folder.parents) if p.is_dir()} | held


def _drop_if_empty(folder: Path) -> None:
    """Remove what a failed run wrote before its first episode, when that is all it wrote, and the folders it made.

    Only what this invocation made goes (`RunFolders` noted what existed before): a folder the user
    made keeps everything it held, and the working directory and those above it always stay.
    """
    written_first = re.compile(r"\.hydra|run(\.shard-\d+-of-\d+)?\.json")  # a shard's record too
    existed = RunFolders.existed
    folder = folder.resolve()
    if existed is None or not folder.is_dir():
        return
    made = [p for p in folder.iterdir() if p not in existed]
    if not all(written_first.fullmatch(p.name) for p in made):
        return  # episodes were written: nothing is dropped
    for path in made:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    kept = existed | {Path.cwd().resolve(), *Path.cwd().resolve().parents}
    while folder not in kept and folder.is_dir() and not any(folder.iterdir()):  # e.g. ./runs, made for this run
        folder.rmdir()
        folder = folder.parent


def _job(cfg: Any, *, command: Sequence[str], failures: list[Any]) -> dict[str, Any] | JobFailed:
    """The Hydra task: one evaluation in Hydra's output directory.

    An ifgym error does not escape (Hydra would print its own report around it): it is kept in
    `failures` for `run_eval` to report, and in a sweep the next job still runs.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ifgym.errors import IfgymError

    hc = HydraConfig.get()
    folder = Path(hc.runtime.output_dir)
    sweep = hc.mode == RunMode.MULTIRUN
    scrub_hydra_files(folder)
    if sweep:
        scrub_hydra_files(hc.sweep.dir)
    job = {
        "mode": hc.mode.name,
        "job_num": hc.job.num if sweep else None,
        "sweep_dir": str(Path(hc.sweep.dir).resolve()) if sweep else None,
        "overrides": list(hc.overrides.task),
        "config_name": hc.job.config_name,
    }
    try:
        return evaluate(cfg, folder, command=command, job=job)
    except IfgymError as exc:
        _drop_if_empty(folder)
        if sweep:
            label = " ".join(hc.overrides.task)
            print(f"ifgym: error: sweep job #{hc.job.num} ({label}): {exc}", file=sys.stderr)
            failures.append(label)
        else:
            failures.append(exc)
        return JobFailed(str(exc))


class SweepSummary(Callback):
    """Hydra callback: after a sweep, a table of every job's headline metrics (with intervals) as text and CSV.

    Writes `sweep.csv`, `sweep.md` and `sweep.png` (each headline metric per job, with its interval)
    into the sweep folder and prints the table. Jobs report through `on_job_end`, in the same process
    (Hydra's basic launcher).
    """

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self.jobs = []

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        if job_return.hydra_cfg.hydra.mode != RunMode.MULTIRUN:
            return
        if job_return.status == JobStatus.FAILED:  # not an ifgym error (those return JobFailed): Hydra reports it
            value: Any = {"error": "an unexpected exception (its traceback follows the sweep)"}
        else:
            value = job_return.return_value
            if isinstance(value, JobFailed):
                value = {"error": value.error}
        self.jobs.append(
            {
                "job": job_return.hydra_cfg.hydra.job.num,
                "overrides": public_config(list(job_return.overrides)),
                "folder": job_return.hydra_cfg.hydra.runtime.output_dir,
                "summary": value,
            }
        )

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from ifgym.report import write_sweep

        if not self.jobs:
            return
        files = write_sweep(self.jobs, Path(str(config.hydra.sweep.dir)))
        print("\n" + files.pop("table_text"))
        for name, path in files.items():
            print(f"{name}: {path}")


AUDIT_OPTIONS = ("suites", "set", "out", "split", "calibrate")


def judge_audit(args: list[str]) -> int:
    """`ifgym judge-audit [KEY=VALUE ...]`: audit a judge on the short gold set (set=full: all), print, write JSON."""
    from omegaconf import OmegaConf

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
    judge_cfg = OmegaConf.to_container(compose(overrides).judge, resolve=True)
    suites = [s.strip() for s in options["suites"].split(",") if s.strip()]
    modes = resolve_modes(suites, judge_cfg["mode"])
    if judge_cfg["mode"] is not None:
        skipped = [s for s in suites if modes[s] != judge_cfg["mode"]]
        if skipped:  # a mode names one judge's way of asking; the other suites' judges have no such mode
            print(f"judge.mode={judge_cfg['mode']} is not a mode of {', '.join(skipped)}: skipped", file=sys.stderr)
            suites = [s for s in suites if s not in skipped]
    if judge_cfg["llm"]["base_url"] is None:
        print("no judge.llm.base_url: auditing the embedded model", file=sys.stderr)
    client = make_client(judge_cfg["llm"], "judge", "judge.llm")
    threshold = judge_cfg.get("threshold")
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


def _load_run(arg: str) -> tuple[dict[str, Any], list[Any], Path]:
    """A finished run's record (run.json: its resolved config) and episodes, from its folder or episodes file."""
    from ifgym.envs.rollout import read_episodes
    from ifgym.errors import ConfigError
    from ifgym.records import RECORD_FILE

    path = Path(arg).expanduser()
    if not path.exists():
        raise ConfigError(f"{arg}: no such run folder or episodes file")
    folder = path if path.is_dir() else path.parent
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        raise ConfigError(f"{arg}: no summary.json in {folder}; give a finished run's folder or episodes file")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    episodes_path = path if path.is_file() else folder / Path(summary.get("output") or "episodes.jsonl").name
    episodes = read_episodes(episodes_path)
    if not episodes:
        raise ConfigError(f"{arg}: no episodes in {episodes_path}")
    record_path = folder / RECORD_FILE
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    return record, episodes, episodes_path


def _comparable(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Refuse two runs whose episodes do not measure the same thing: env or judge settings differ."""
    from ifgym.errors import ConfigError
    from ifgym.records import OPERATIONAL_LLM_KEYS, RECORD_FILE

    def settings(record: dict[str, Any], name: str) -> dict[str, Any]:
        config = record.get("config")
        if not config:
            raise ConfigError(
                f"run {name} has no {RECORD_FILE} with its config (written by an older ifgym), so nothing says what "
                "it measured; re-run it"
            )

        def strip(node: Any) -> Any:
            if isinstance(node, dict):
                return {k: strip(v) for k, v in node.items() if k not in (*OPERATIONAL_LLM_KEYS, "trust")}
            return node

        return {"env": strip(config["env"]), "judge": strip(config["judge"])}

    sa, sb = settings(a, "A"), settings(b, "B")
    diffs = [d for d in _differences(sa, sb, "")]
    if diffs:
        shown = "; ".join(f"{key}: A={va!r}, B={vb!r}" for key, va, vb in diffs[:5])
        raise ConfigError(f"the runs are not comparable (their env or judge settings differ): {shown}")


def _differences(a: Any, b: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


def compare_runs(args: list[str]) -> int:
    """`ifgym compare RUN_A RUN_B [KEY=VALUE ...]`: paired differences of two runs, by seed."""
    import gymnasium as gym

    import ifgym  # noqa: F401  (registers the env ids)
    from ifgym.errors import ConfigError
    from ifgym.stats import CISettings, compare, metric_names

    positional = [a for a in args if "=" not in a]
    if len(positional) != 2:
        print(
            "usage: ifgym compare RUN_A RUN_B [resamples=1000 seed=0 level=0.95 out=FILE.json plot=FILE.png]",
            file=sys.stderr,
        )
        return 2
    options = dict(a.split("=", 1) for a in args if "=" in a)
    unknown = sorted(set(options) - {"resamples", "seed", "level", "out", "plot"})
    if unknown:
        raise ConfigError(
            f"compare: unknown option(s) {', '.join(unknown)}; options: resamples, seed, level, out, plot"
        )
    try:
        settings = CISettings(
            int(options.get("resamples", 1000)), float(options.get("level", 0.95)), int(options.get("seed", 0))
        )
    except ValueError as exc:
        raise ConfigError(f"compare: resamples and seed take integers, level a number ({exc})") from None
    (sa, ea, pa), (sb, eb, pb) = _load_run(positional[0]), _load_run(positional[1])
    _comparable(sa, sb)
    env_ids = {e.env_id for e in ea} | {e.env_id for e in eb}
    if len(env_ids) != 1:
        raise ConfigError(f"the runs hold episodes of different envs ({', '.join(sorted(env_ids))}): not comparable")
    env_id = env_ids.pop()
    env_cls = gym.envs.registration.load_env_creator(gym.spec(env_id).entry_point)
    modes = ("strict", "loose") if getattr(env_cls, "loose_metrics", True) else ("strict",)
    result: dict[str, Any] = {"a": str(pa), "b": str(pb), "pairs": len(ea), "settings": settings.to_json()}
    lines = [f"A: {pa}\nB: {pb}\n{len(ea)} episodes paired by seed; B - A with a paired bootstrap interval"]
    for mode in modes:
        metrics = metric_names(env_cls.summarize(ea, loose=mode == "loose"), env_cls.headline_metrics)
        table = compare(ea, eb, env_cls.summarize, metrics, loose=mode == "loose", settings=settings)
        result[mode] = table
        lines.append(_compare_table(mode, table, settings.level))
    print("\n\n".join(lines))
    if options.get("out"):
        out = Path(options["out"]).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"\nwritten to {out}")
    plot = options.get("plot") or (str(Path(options["out"]).with_suffix(".png")) if options.get("out") else None)
    if plot:  # the two runs side by side, each metric with each run's own interval
        from ifgym.report import SHOWN_METRICS, policy_label, shown_first, write_comparison_plot

        read = [json.loads((p.parent / "summary.json").read_text(encoding="utf-8")) for p in (pa, pb)]
        names = [policy_label(s.get("run") or {}) for s in read]
        if names[0] == names[1]:  # the same policy: the folders tell them apart
            names = [f"{n} ({p.parent.name})" for n, p in zip(names, (pa, pb), strict=True)]
        summaries = {f"{label}: {name}": s for label, name, s in zip("AB", names, read, strict=True)}
        headline = [m for m in env_cls.headline_metrics if m in result["strict"]]
        metrics = shown_first(headline, getattr(env_cls, "headline_metric", None))[:SHOWN_METRICS]
        title = f"{env_id}: A and B, {len(ea)} episodes"
        path = write_comparison_plot(summaries, metrics, Path(plot).expanduser(), title=title)
        print(f"plot: {path} (the paired differences B - A are in the table)")
    return 0


def _compare_table(mode: str, table: dict[str, dict[str, Any]], level: float) -> str:
    def num(value: Any) -> str:
        return "n/a" if value is None or value != value else f"{value:.3f}"

    head = (mode, "A", "B", "B - A", f"{level:.0%} CI", "p")
    rows = [
        (
            name,
            num(r["a"]),
            num(r["b"]),
            num(r["diff"]),
            f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r["ci"] else "",
            "" if r["p_value"] is None else f"{r['p_value']:.3f}",
        )
        for name, r in table.items()
    ]
    widths = [max(len(head[k]), *(len(r[k]) for r in rows)) for k in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if k == 0 else f"{{:>{w}}}" for k, w in enumerate(widths))
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)])


def merge_runs(args: list[str]) -> int:
    """`ifgym merge RUN_FOLDER | SHARD_FILE...`: combine a run's shard files into its episodes file and report it.

    The episodes file gets one record per seed (`ifgym.envs.shards.combine`); the summary, plots
    and results table are written as `ifgym eval` writes them (`report_run`), from the config the
    shards recorded in their `run.shard-I-of-N.json`. Returns 1 when episodes failed, as eval does.
    """
    import ifgym  # noqa: F401  (registers the env ids)
    from ifgym.envs.rollout import StoredEpisodes, failure_summary, latest_lines
    from ifgym.envs.shards import combine, shards_of
    from ifgym.errors import ConfigError
    from ifgym.records import RECORD_FILE, RunRecord

    if not args or any(a.startswith("-") for a in args):
        print("usage: ifgym merge RUN_FOLDER | SHARD_FILE.jsonl [SHARD_FILE.jsonl ...]", file=sys.stderr)
        return 2
    run_file, shards = shards_of([Path(a).expanduser().absolute() for a in args])  # as Hydra's run folders are
    folder = run_file.parent
    records = {}
    for shard, path in shards:
        record_path = shard.file(folder / RECORD_FILE)
        if not record_path.is_file():
            raise ConfigError(
                f"merge: {record_path.name} (the record {path.name}'s run wrote, with its config) is not in {folder}; "
                "copy it there with the shard file"
            )
        records[record_path] = json.loads(record_path.read_text(encoding="utf-8"))
    (first_path, first), *others = records.items()
    for path, other in others:
        if other["run_key"] != first["run_key"]:
            raise ConfigError(
                f"merge: {path.name} is a run of another configuration (run_key {other['run_key']}) than "
                f"{first_path.name} (run_key {first['run_key']}); merge only the shards of one run"
            )
    key, resolved = first["run_key"], first["config"]
    _claim_run_folder(run_file)
    combined = combine(run_file, [p for _, p in shards], key)
    print(
        f"merged {len(shards)} shard files into {run_file}: {combined.finished} finished and {combined.failed} "
        f"failed episodes ({combined.added} lines from the shards)",
        file=sys.stderr,
    )
    # a seed's last line is its record; finished episodes are read from the file when summarized
    latest = {line.seed: line for line in latest_lines(run_file).values()}
    records_by_seed = [latest[seed] for seed in sorted(latest)]
    failed = [r.failed for r in records_by_seed if r.failed is not None]
    episodes = StoredEpisodes(run_file, [r.offset for r in records_by_seed if r.failed is None])
    if not episodes:
        raise ConfigError(f"merge: no finished episodes in {run_file}; rerun the shards to retry the failed ones")
    shard_summaries = [
        json.loads(p.read_text(encoding="utf-8"))
        for shard, _ in shards
        if (p := shard.file(folder / "summary.json")).is_file()
    ]
    env = build_env(resolved["env"], resolved["judge"], {})().unwrapped
    record = RunRecord(folder, config=resolved, key=key, command=["ifgym", "merge", *args])
    record.data["models"] = first.get("models", {})
    if first.get("policy_protocol"):
        record.data["policy_protocol"] = first["policy_protocol"]
    record.data["merged"] = [p.name for _, p in shards]
    record.write()
    judge = next((s["judge"] for s in shard_summaries if "judge" in s), {"kind": resolved["judge"]["kind"]})
    report_run(
        env,
        resolved,
        run_file,
        episodes,
        failure_summary(failed, len(records_by_seed)),
        worker_deaths=sum(s.get("executor", {}).get("worker_deaths", 0) for s in shard_summaries),
        judge_record=judge,
        record=record,
        roles=record.data["models"],
        ci_settings=_ci_settings(resolved),
    )
    if failed:
        print(
            f"ifgym: error: {len(failed)} of {len(records_by_seed)} episodes failed (seeds "
            f"{', '.join(str(f.seed) for f in failed)}); rerun the shards (or the run) to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def rescore_run(args: list[str]) -> int:
    """`ifgym rescore RUN [KEY=VALUE ...]`: RUN's replies judged again into a new run folder (see `ifgym.rescore`).

    The env, judge clients, audit, run record and report are made as `ifgym eval` makes them; the policy is never
    built. Returns 1 when episodes failed, as eval does.
    """
    from omegaconf import OmegaConf

    from ifgym.envs.rollout import failure_summary
    from ifgym.errors import ConfigError
    from ifgym.records import RunRecord
    from ifgym.report import write_summary
    from ifgym.rescore import endings_that_differ, judge_named, plan, rescore_episodes, user_reacts

    job = plan(args, lambda kind: OmegaConf.to_container(compose([f"judge={kind}"]).judge, resolve=True))
    resolved, source = job.resolved, job.source_record
    fill_request_limits(resolved, resolved["concurrency"])
    clients: dict[str, Any] = {}
    make_env = build_env(resolved["env"], resolved["judge"], clients)
    use_cache(clients, resolved)
    env = make_env()
    judge_record = audit_judge(env.unwrapped, resolved["judge"], progress=resolved["progress"])
    record = RunRecord(job.folder, config=resolved, key=job.key, command=["ifgym", "rescore", *args])
    if source.get("policy_protocol"):  # the replies are the source run's: so is the policy's setup
        record.data["policy_protocol"] = source["policy_protocol"]
    record.start(clients)
    semantics = (
        resolved["env"].get("checker_semantics", "ifgym"),
        source["config"]["env"].get("checker_semantics", "ifgym"),
    )
    notes = {
        "source": job.source,
        "source_judge": judge_named(source["config"]["judge"], source.get("models", {}), semantics[1]),
        "judge": judge_named(resolved["judge"], record.data["models"], semantics[0]),
        "user_reacts_to_replies": user_reacts(env),
        "scored_as_played": "the recorded user turns and endings are kept; the policy is not called",
        "source_failed_seeds": job.failed_seeds,
    }
    record.data["rescore"] = notes
    record.write()
    print(
        f"rescoring {len(job.seeds)} episodes of {job.source_file} (judge {resolved['judge']['kind']}, checker "
        f"semantics {semantics[0]}) into {job.folder}; the policy is not called"
        + (f"; {len(job.failed_seeds)} failed episodes of the source are not rescored" if job.failed_seeds else ""),
        file=sys.stderr,
    )
    try:
        result = rescore_episodes(job, make_env)
        if not result.episodes:
            kind, message = next(iter(result.failures["examples"].items()))
            raise ConfigError(f"rescore: every episode failed; commonest error: {kind}: {message}")
    except BaseException as exc:
        record.fail(exc)
        raise
    notes["ending_would_differ"] = differs = endings_that_differ(result.episodes)
    summary, _, _ = report_run(
        env.unwrapped,
        resolved,
        job.folder / "episodes.jsonl",
        result.episodes,
        failure_summary(result.failed, len(job.seeds)),
        worker_deaths=0,
        judge_record=judge_record,
        record=record,
        roles=clients,
        ci_settings=_ci_settings(resolved),
    )
    summary["rescore"] = notes
    write_summary(summary, job.folder / "summary.json")
    if notes["user_reacts_to_replies"]:
        print("note: this env's user may answer other replies differently; the transcript is scored as played")
    if differs:
        print(
            f"note: in {len(differs)} episodes (seeds {', '.join(map(str, differs))}) the new verdicts would have "
            "ended the dialogue at another turn (meta.rescore.would_end); they are scored as played"
        )
    return 1 if result.failed else 0


EXPORT_OPTIONS = {"min_reward": float, "margin": float, "pairs": str}


def export_data(args: list[str]) -> int:
    """`ifgym export SCHEMA EPISODES... OUT [KEY=VALUE ...]`: write one training-data schema, print the counts."""
    from ifgym.envs.rollout import read_episodes
    from ifgym.errors import ConfigError
    from ifgym.rewards.export import SCHEMAS, check_options, export

    positional = [a for a in args if "=" not in a]
    if len(positional) < 3:
        print(f"usage: ifgym export {{{','.join(SCHEMAS)}}} EPISODES.jsonl [MORE.jsonl ...] OUT.jsonl", file=sys.stderr)
        return 2
    schema, sources, out = positional[0], positional[1:-1], Path(positional[-1]).expanduser()
    options: dict[str, Any] = {}
    for item in (a for a in args if "=" in a):
        key, _, value = item.partition("=")
        if key not in EXPORT_OPTIONS:
            raise ConfigError(f"export: unknown option {key!r}; options: {', '.join(EXPORT_OPTIONS)}")
        try:
            options[key] = EXPORT_OPTIONS[key](value)
        except ValueError:
            raise ConfigError(f"export: {key} takes a number, got {value!r}") from None
    check_options(schema, options)
    if any(out.resolve() == Path(s).expanduser().resolve() for s in sources):
        raise ConfigError(f"export: the output {out} is one of the episode files; give another output file")
    episodes = []
    for source in sources:
        found = read_episodes(source)
        if not found:
            raise ConfigError(f"{source}: no episodes there (give the episodes.jsonl of a run)")
        episodes.extend(found)
    report = export(schema, episodes, out, **options)
    print(report.line(out))
    for warning in report.warnings:
        print(f"ifgym: warning: {warning}", file=sys.stderr)
    return 0


def flexbench_dimensions(args: list[str]) -> int:
    """`ifgym flexbench-dimensions SOP OUT [KEY=VALUE ...]`: run the dimension pipeline and save the file."""
    import yaml

    from ifgym.errors import ConfigError
    from ifgym.llm import make_client
    from ifgym.rewards.flexbench import build_dimensions
    from ifgym.simulators.flexbench import load_sop

    if len(args) < 2 or any("=" not in a for a in args[2:]):
        print(
            "usage: ifgym flexbench-dimensions SOP OUT.dimensions.json [pipeline=ifgym|paper] [KEY=VALUE ...]",
            file=sys.stderr,
        )
        return 2
    settings = {}
    for item in args[2:]:
        key, _, value = item.partition("=")
        if not key:
            raise ConfigError(f"flexbench-dimensions: {item!r} is not KEY=VALUE")
        settings[key] = yaml.safe_load(value) if value else None  # typed like a Hydra override
    pipeline = settings.pop("pipeline", "ifgym")  # the rest configure the model
    sop = load_sop(args[0])
    dims = build_dimensions(
        sop.instruction,
        make_client(settings, "judge"),
        sop_name=sop.name,
        opening_line=sop.opening_line,
        pipeline=pipeline,
    )
    out = Path(args[1]).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    dims.save(out)
    kinds = [d.kind for d in dims.dimensions]
    print(
        f"wrote {len(kinds)} dimensions ({kinds.count('base')} base actions, {kinds.count('branch')} branches, "
        f'{kinds.count("always")} always-on rules) to {out}; review them, then set "reviewed": true'
    )
    return 0


CFG_CHOICES = ("job", "hydra", "all")


def _hydra_flags(args: Sequence[str], command: str = "eval") -> tuple[list[str], Any]:
    """`args` checked by Hydra's own parser (a bad flag is one ConfigError); a bare `--cfg` means `--cfg job`."""
    from hydra._internal.utils import get_args_parser

    from ifgym.errors import ConfigError

    args = list(args)
    for i, arg in enumerate(args):
        if arg in ("--cfg", "-c") and (i + 1 == len(args) or args[i + 1] not in CFG_CHOICES):
            args.insert(i + 1, "job")
            break
    parser = get_args_parser()
    parser.prog = f"ifgym {command}"

    def refuse(message: str) -> None:
        raise ConfigError(f"{message} (see `ifgym {command} --help` for Hydra's flags and the config keys)")

    parser.error = refuse  # type: ignore[method-assign]
    return args, parser.parse_args(args)


def run_eval(args: Sequence[str]) -> int:
    """`ifgym eval [FLAGS] [KEY=VALUE ...]` through Hydra's app machinery (`hydra.main`), with ifgym's errors.

    Hydra's errors are raised (not printed and exited) so that they become one ConfigError naming
    the override at fault; in a sweep a failing job is reported and the others still run. Returns
    the exit status: 0, or 1 when sweep jobs or episodes failed; a single run stopped early or
    interrupted raises (RunStoppedError, RunInterrupted) for `main` to give 3, 130 or 143.
    """
    return _hydra_app("eval", "config", _job, args)


def run_train(args: Sequence[str]) -> int:
    """`ifgym train [FLAGS] [KEY=VALUE ...]`: `ifgym.integrations.trl.train` as a Hydra app (config `train`)."""
    return _hydra_app("train", "train", _train_job, args)


def _hydra_app(command: str, config_name: str, job: Callable[..., Any], args: Sequence[str]) -> int:
    from unittest import mock

    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ifgym.conf.schema import register_configs
    from ifgym.errors import ConfigError

    args, parsed = _hydra_flags(args, command)
    register_configs()
    failures: list[Any] = []  # a single run's exception, or the labels of the sweep jobs that failed
    line = ["ifgym", command, *args]

    failed_episodes: list[str] = []  # runs that finished with failed episodes (exit status 1)

    def task(cfg: Any) -> Any:
        out = job(cfg, command=line, failures=failures)
        failed = out.get("failures", {}) if isinstance(out, dict) else {}
        if failed.get("episodes"):
            failed_episodes.append(f"{failed['episodes']} of {failed['of']} in {out['output']}")
        return out

    app = hydra.main(config_path="pkg://ifgym.conf", config_name=config_name, version_base="1.3")(task)
    RunFolders.existed = None  # noted afresh by this invocation's Hydra callback
    # Hydra reads its arguments from sys.argv; HYDRA_FULL_ERROR makes it raise instead of printing a traceback
    raise_errors = mock.patch.dict(os.environ, {"HYDRA_FULL_ERROR": "1"})
    try:
        with mock.patch.object(sys, "argv", [f"ifgym {command}", *args]), raise_errors:
            app()
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(
            _explain(exc, parsed.overrides, parsed.config_dir, parsed.config_name or config_name)
        ) from None
    if len(failures) == 1 and isinstance(failures[0], Exception):  # a single run's error, for main to report
        raise failures[0]
    if failures:
        print(f"ifgym: error: {len(failures)} sweep job(s) failed: {'; '.join(failures)}", file=sys.stderr)
        return EXIT_FAILED_EPISODES
    if failed_episodes:
        print(
            f"ifgym: error: episodes failed ({'; '.join(failed_episodes)}); their errors are in the episodes file "
            "and summary.json; rerun the same command to retry them",
            file=sys.stderr,
        )
        return EXIT_FAILED_EPISODES
    return EXIT_FINISHED


def _train_job(cfg: Any, *, command: Sequence[str], failures: list[Any]) -> dict[str, Any] | JobFailed:
    """The Hydra task of `ifgym train`: one training run in Hydra's output directory."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from ifgym.errors import IfgymError

    folder = Path(HydraConfig.get().runtime.output_dir)
    scrub_hydra_files(folder)
    try:
        check_schema(cfg, list(HydraConfig.get().overrides.task))
        from ifgym.integrations.trl import train

        return train(OmegaConf.to_container(cfg, resolve=True), folder, build_env=build_env, evaluate=evaluate)
    except IfgymError as exc:
        failures.append(exc)
        return JobFailed(str(exc))


# exit statuses of the ifgym command (README "Run folders": endings)
EXIT_FINISHED = 0  # every episode finished
EXIT_FAILED_EPISODES = 1  # finished with failed episodes, or sweep jobs that failed
EXIT_USAGE = 2  # a usage or configuration error: nothing ran
EXIT_STOPPED = 3  # stopped early (max_failure_rate): summary.json says which seeds were never played
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report 128 + 2
EXIT_TERMINATED = 143  # SIGTERM, as shells report 128 + 15


def _emit(text: str) -> int:
    """Print `text` to standard output; a reader that closed the pipe early (`| head`) is no error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # what is left unflushed would fail again at exit: standard output goes nowhere from here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point; returns the exit status (`EXIT_*`)."""
    from ifgym.errors import IfgymError, RunInterrupted, RunStoppedError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        return _emit(usage())
    if argv[0] in ("-V", "--version"):
        from ifgym import __version__

        return _emit(f"ifgym {__version__}")
    command, rest = argv[0], argv[1:]
    if command in COMMANDS and ("-h" in rest or "--help" in rest):  # every command takes --help
        return _emit(command_help(command))
    try:
        if command == "eval":
            return run_eval(rest)
        if command == "train":
            return run_train(rest)
        if command == "export":
            return export_data(rest)
        if command == "flexbench-dimensions":
            return flexbench_dimensions(rest)
        if command == "judge-audit":
            return judge_audit(rest)
        if command == "compare":
            return compare_runs(rest)
        if command == "merge":
            return merge_runs(rest)
        if command == "rescore":
            return rescore_run(rest)
        if command == "view":
            from ifgym.view import view_command

            return view_command(rest)
        if command == "agreement":
            from ifgym.view import agreement_command

            return agreement_command(rest)
        from ifgym.errors import did_you_mean

        print(
            f"ifgym: error: unknown command {command!r}.{did_you_mean(command, COMMANDS)} "
            f"Commands: {', '.join(COMMANDS)} (see ifgym --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except RunStoppedError as exc:  # its summary and record are written; the message says how to resume
        print(f"ifgym: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    except IfgymError as exc:
        print(f"ifgym: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # one line, no traceback
        if isinstance(exc, RunInterrupted):
            print(f"ifgym: {exc}", file=sys.stderr)
            return EXIT_TERMINATED if exc.signal_name == "SIGTERM" else EXIT_INTERRUPTED
        print("ifgym: interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # Hydra's --hydra-help and friends exit; a console entry point returns
        return exc.code if isinstance(exc.code, int) else 0


if __name__ == "__main__":
    # `python -m ifgym.cli`: run the imported module's main, whose classes Hydra's callbacks instantiate
    # (`ifgym.cli.RunFolders`), not this __main__ copy's
    from ifgym.cli import main as imported_main

    sys.exit(imported_main())
