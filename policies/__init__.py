"""Models under test, and wrappers around them.

They see only chat messages (no specs, no scorer): import nothing from ifgym.simulators,
ifgym.rewards or ifgym.envs here.

Baselines: `ChatPolicy` (full history) and `Truncation(base, k=4)`. Wrappers: `GraphIF(base, light)`
(relation graph + rewrite), `ContextAgent(base, light, embedder=...)` (topic trees) and
`SelfRefine(base)` (draft, self-critique, revision). `PluggedPolicy(obj)` drives a policy of your own
(a callable `messages -> str`, or an object with `act`/`aact`) as one of these. Every
wrapper records per-turn costs in `.costs` (calls and tokens per role, context tokens, rewrite
tokens), resets its per-episode state with `reset()`, counts the episode in `episode_usage` and
leaves what to inspect in `episode_record()`. ACT is defined in `ifgym.policies.wrapper`.
"""

from ifgym.lazy import lazy_submodules
from ifgym.policies.base import Policy, ScriptedPolicy
from ifgym.policies.chat import ChatPolicy, embedded_policy
from ifgym.policies.context_agent import ContextAgent
from ifgym.policies.embeddings import HashingEmbedder, MiniLMEmbedder
from ifgym.policies.graphif import GraphIF
from ifgym.policies.plugged import PluggedPolicy
from ifgym.policies.self_refine import SelfRefine
from ifgym.policies.truncation import Truncation
from ifgym.policies.wrapper import TurnCost, WrapperPolicy, cost_summary

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "ChatPolicy",
    "ContextAgent",
    "GraphIF",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "PluggedPolicy",
    "Policy",
    "ScriptedPolicy",
    "SelfRefine",
    "Truncation",
    "TurnCost",
    "WrapperPolicy",
    "cost_summary",
    "embedded_policy",
]
