"""The golden cases: fixed seeds of every registered env id and every policy wrapper, played and recorded.

`play(case, mode)` runs one case and returns its record, normalised for comparison:

- `episodes`: per seed, the episode as `Episode.to_json()` gives it (turns, verdicts strict and
  loose, rewards, patience, done reason, meta with the policy's usage and trace);
- `steps` (sync only): per seed, the reset info and every step's reward, terminated, truncated and
  info, and the final observation;
- `summary`: the env's own `summarize` over the case's episodes, strict and loose;
- `requests`: every request each model server received (the prompts ifgym sent, in order), by role.

`mode="sync"` drives the env through `rollout` behind a recording wrapper; `mode="async"` through
`arollout` on a fresh env for each seed (its steps are not recorded: `arollout` drives the env it is given,
so the episodes, summary and requests are compared); `mode="reused"` as "async", on one env that first
plays another seed's episode (what a runner's worker does: reset starts an env's next episode anew).
Models are `doubles.server_model` behind real HTTP servers on 127.0.0.1
(`support.canned_server.CannedServer`), reached through ifgym's own client.

Normalisation excludes exactly what is not deterministic, and nothing else: wall times (keys in
`TIME_KEYS`), the absolute path of this checkout (replaced by `<repo>`), and the servers' ports
(a client's base URL, replaced by `<server>`). Floats are rounded to 10 decimals and NaN/inf written
as strings, so a fixture is plain JSON.
"""

from __future__ import annotations

import asyncio
import math
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from golden.doubles import server_model, stand_in
from support.canned_server import CannedServer

import ifgym  # noqa: F401  (registers the env ids)
from ifgym.llm import make_client
from ifgym.policies import ChatPolicy, ContextAgent, GraphIF, HashingEmbedder, ScriptedPolicy, SelfRefine, Truncation
from ifgym.runner import arollout, rollout

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(ifgym.__file__).parent  # the checkout, or a link to it named ifgym (a worktree on PYTHONPATH)
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TIME_KEYS = frozenset({"seconds", "seconds_per_turn"})  # wall time of a policy's turn (policy_trace)
DATA = REPO / "tests" / "data"
JUDGED_AND_LENGTH = ("emotion", "style", "reader_age", "length")  # every turn has a judged constraint


@dataclass(frozen=True)
class Case:
    """One golden case: an env id with its arguments, the seeds, the policy, and which roles are models.

    `models` names the env arguments that get a model server (`user_llm`, `judge_llm`); `policy`
    is "stand_in" (the scripted model under test), "agent" (the FlexBench SOP-following agent of
    `support.flexbench_agents` for the case's `sop`), or a wrapper around a chat model served over
    HTTP: "full" (no wrapper), "truncation", "graphif_fast", "graphif_loop", "graphif_paper", "context_agent",
    "self_refine".
    """

    name: str
    env_id: str
    seeds: tuple[int, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ()
    policy: str = "stand_in"


CASES: tuple[Case, ...] = (
    # EvolIF: template user and rules; v1 variants; an LLM judge (blind, rating); the LLM user; v0; replay
    Case("evolif_v1", "ifgym/EvolIF-v1", (0, 1, 2), {"max_turns": 8}),
    Case(
        "evolif_v1_restate_all_evolif_semantics",
        "ifgym/EvolIF-v1",
        (3, 4),
        {"max_turns": 6, "restate": "all", "checker_semantics": "evolif", "reward": "all_pass"},
    ),
    Case(
        "evolif_v1_judge_blind",
        "ifgym/EvolIF-v1",
        (5, 6),
        {"max_turns": 10, "judge": "llm", "patience": None, "tracker": {"groups": JUDGED_AND_LENGTH}},
        ("judge_llm",),
    ),
    Case(
        "evolif_v1_judge_rating",
        "ifgym/EvolIF-v1",
        (7,),
        {
            "max_turns": 10,
            "judge": "llm",
            "judge_mode": "rating",
            "patience": None,
            "tracker": {"groups": JUDGED_AND_LENGTH},
        },
        ("judge_llm",),
    ),
    Case("evolif_llm_v1", "ifgym/EvolIF-LLM-v1", (0, 1), {"max_turns": 8, "patience": None}, ("user_llm", "judge_llm")),
    Case("evolif_v0", "ifgym/EvolIF-v0", (0, 1), {"max_turns": 6}),
    Case("evolif_llm_v0", "ifgym/EvolIF-LLM-v0", (2,), {"max_turns": 8, "patience": None}, ("user_llm", "judge_llm")),
    Case("evolif_v1_script", "ifgym/EvolIF-v1", (0,), {"script": str(DATA / "evolif_dialogue.jsonl")}),
    # StructFlow: offline generator and rules; an LLM judge (evidence); the packaged replay; the benchmark's
    # templates; the LLM generator
    Case("structflow_v0", "ifgym/StructFlow-v0", (0, 1, 2)),
    Case(
        "structflow_v0_judge_evidence",
        "ifgym/StructFlow-v0",
        (3, 5),
        {"judge": "llm", "judge_mode": "evidence", "reward": "fraction"},
        ("judge_llm",),
    ),
    Case(
        "structflow_v0_replay",
        "ifgym/StructFlow-v0",
        (0, 17),
        {"dataset": "structflowbench", "judge": "llm", "max_turns": 3},
        ("judge_llm",),
    ),
    Case("structflow_v0_benchmark_templates", "ifgym/StructFlow-v0", (4,), {"templates": "structflowbench"}),
    Case("structflow_llm_v0", "ifgym/StructFlow-LLM-v0", (0, 1), {}, ("user_llm", "judge_llm")),
    # FlexBench: the scripted caller with rules for every shipped SOP; the LLM caller and judge (both modes)
    *(
        Case(f"flexbench_v0_{sop}", "ifgym/FlexBench-v0", (0,), {"sop": sop}, policy="agent")
        for sop in ("merchant_onboarding", "freight_dispatch", "station_lead")
    ),
    Case("flexbench_v0_stand_in", "ifgym/FlexBench-v0", (2,), {"max_turns": 6}),
    Case("flexbench_llm_v0", "ifgym/FlexBench-LLM-v0", (0, 1), {"max_turns": 8}, ("user_llm", "judge_llm")),
    Case(
        "flexbench_llm_v0_evidence",
        "ifgym/FlexBench-LLM-v0",
        (2,),
        {"max_turns": 8, "judge_mode": "evidence", "cooperativeness": "poor"},
        ("user_llm", "judge_llm"),
    ),
    # Composite: the template user with rules (all axes; each axis off); the checklist judge; the LLM user
    Case("composite_v0", "ifgym/Composite-v0", (0, 1, 2), {"min_turns": 8, "max_turns": 10}),
    *(
        Case(f"composite_v0_no_{axis}", "ifgym/Composite-v0", (3,), {"min_turns": 6, "max_turns": 8, axis: False})
        for axis in ("structure", "constraints", "persona")
    ),
    Case(
        "composite_v0_judge",
        "ifgym/Composite-v0",
        (4, 5),
        {"min_turns": 6, "judge": "llm", "patience": None, "reward": "weighted"},
        ("judge_llm",),
    ),
    Case(
        "composite_llm_v0",
        "ifgym/Composite-LLM-v0",
        (0, 1),
        {"min_turns": 6, "patience": None},
        ("user_llm", "judge_llm"),
    ),
    # NTM: made-up dialogues in its format (none ships), the checklist judge on the final reply; a chat model
    # served over HTTP as the policy, so ACT has its usage records
    Case(
        "ntm_v1",
        "ifgym/NTM-v1",
        (0, 2),
        {"dataset": str(DATA / "ntm" / "made_up.jsonl")},
        ("judge_llm",),
        policy="full",
    ),
    Case(
        "ntm_v0",
        "ifgym/NTM-v0",
        (0, 2),
        {"dataset": str(DATA / "ntm" / "made_up.jsonl")},
        ("judge_llm",),
        policy="full",
    ),
    # Policy wrappers around a chat model, in the EvolIF env (patience off so every turn is played)
    *(
        Case(f"wrapper_{policy}", "ifgym/EvolIF-v1", (0,), {"max_turns": 6, "patience": None}, policy=policy)
        for policy in (
            "full",
            "truncation",
            "graphif_fast",
            "graphif_loop",
            "graphif_paper",
            "context_agent",
            "self_refine",
        )
    ),
)


class Recorder(gym.Wrapper):
    """Records what the env returns at reset and at every step (the sync path)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.record: dict[str, Any] = {"reset_info": None, "steps": [], "final_obs": None}

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.record["reset_info"] = info
        self.record["final_obs"] = obs
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.record["steps"].append(
            {"action": action, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info}
        )
        self.record["final_obs"] = obs
        return obs, reward, terminated, truncated, info


def _config(server: CannedServer) -> dict[str, Any]:
    return {"base_url": server.base_url, "model": server.model, "api_key_env": None, "max_retries": 0}


def _policy(case: Case, servers: dict[str, CannedServer]) -> Any:
    if case.policy == "stand_in":
        return ScriptedPolicy(stand_in)
    if case.policy == "agent":
        from support.flexbench_agents import AGENTS
        from support.flexbench_agents import Policy as AgentPolicy

        return AgentPolicy(AGENTS[case.kwargs["sop"]]())
    base = ChatPolicy(make_client(_config(servers["policy"]), "policy"))
    light = make_client(_config(servers["light"]), "light") if "light" in servers else None
    if case.policy == "full":
        return Truncation(base, k=None)
    if case.policy == "truncation":
        return Truncation(base, k=2)
    if case.policy == "graphif_fast":
        return GraphIF(base, light, extraction="fast")
    if case.policy == "graphif_loop":
        return GraphIF(base, light, extraction="loop")
    if case.policy == "graphif_paper":
        return GraphIF(base, light, extraction="loop", summary=True, rewrite_format="final_response")
    if case.policy == "context_agent":
        return ContextAgent(base, light, embedder=HashingEmbedder())
    if case.policy == "self_refine":
        return SelfRefine(base)
    raise ValueError(f"unknown golden policy {case.policy!r}")


def _roles(case: Case) -> list[str]:
    roles = [name.removesuffix("_llm") for name in case.models]
    if case.policy not in ("stand_in", "agent"):
        roles.append("policy")
    if case.policy in ("graphif_fast", "graphif_loop", "graphif_paper", "context_agent"):
        roles.append("light")
    return roles


def _make_env(case: Case, servers: dict[str, CannedServer]) -> gym.Env:
    kwargs = dict(case.kwargs)
    for name in case.models:
        kwargs[name] = _config(servers[name.removesuffix("_llm")])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)  # the v0 ids
        return gym.make(case.env_id, **kwargs)


def play(case: Case, mode: str = "sync") -> dict[str, Any]:
    """Run `case` and return its normalised record (see the module docstring)."""
    with ExitStack() as stack:
        servers = {role: stack.enter_context(CannedServer(server_model)) for role in _roles(case)}
        episodes, steps, summarize = [], [], None
        env = None
        if mode == "reused":  # one env for every seed, as a runner's worker plays its episodes: after one of its own
            env = _make_env(case, servers)
            asyncio.run(arollout(env, _policy(case, servers), seed=max(case.seeds) + 1))
            for server in servers.values():
                server.requests.clear()
        for seed in case.seeds:
            if mode != "reused":
                env = _make_env(case, servers)
            summarize = env.unwrapped.summarize
            policy = _policy(case, servers)
            if mode == "sync":
                recorder = Recorder(env)
                episodes.append(rollout(recorder, policy, seed=seed))
                steps.append(recorder.record)
            else:
                episodes.append(asyncio.run(arollout(env, policy, seed=seed)))
        record: dict[str, Any] = {
            "case": case.name,
            "env_id": case.env_id,
            "seeds": list(case.seeds),
            "episodes": [e.to_json() for e in episodes],
            "summary": {"strict": summarize(episodes), "loose": summarize(episodes, loose=True)},
            "requests": {role: list(server.requests) for role, server in servers.items()},
        }
        if mode == "sync":
            record["steps"] = steps
        urls = {server.base_url: "<server>" for server in servers.values()}
    return normalise(record, urls)


def normalise(value: Any, urls: dict[str, str] | None = None) -> Any:
    """Plain JSON with the nondeterministic parts excluded (see the module docstring)."""
    urls = urls or {}
    if isinstance(value, dict):
        return {str(k): normalise(v, urls) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list | tuple):
        return [normalise(v, urls) for v in value]
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return round(value, 10)
    if isinstance(value, str):
        for url, placeholder in urls.items():
            value = value.replace(url, placeholder)
        return value.replace(str(PACKAGE), "<repo>").replace(str(REPO), "<repo>")
    return value


def fixture_path(case: Case) -> Path:
    """Where a case's fixture lives."""
    return FIXTURES / f"{case.name}.json"
