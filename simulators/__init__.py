"""The user side of a dialogue: simulated users, the EvolIF tracker, renderers, replay, seed assets.

The constraints and StructFlow flows they draw from are vocabulary shared with the rewards: `ifgym.core`.
A user that calls a model writes `reset`/`next` once with `ifgym.llm.conversation.twin` (it gets
`areset`/`anext` too); a plainly written one gets them from `UserSimulator`.
"""

from ifgym.lazy import lazy_submodules
from ifgym.simulators.assets_io import Style, Topic, load_styles, load_topics
from ifgym.simulators.base import UserSimulator
from ifgym.simulators.evolif import EvolIFTracker, EvolIFUser, TrackerConfig, TrackerStep
from ifgym.simulators.evolif.render import LLMRenderer, Renderer, RenderRequest, RenderResult, TemplateRenderer
from ifgym.simulators.evolif.replay import ReplayUser, load_evolif_dialogue
from ifgym.simulators.ntm import NTMUser, load_ntm

__getattr__ = lazy_submodules(__name__, __path__)  # submodules load on first attribute access

__all__ = [
    "EvolIFTracker",
    "EvolIFUser",
    "LLMRenderer",
    "NTMUser",
    "RenderRequest",
    "RenderResult",
    "Renderer",
    "ReplayUser",
    "Style",
    "TemplateRenderer",
    "Topic",
    "TrackerConfig",
    "TrackerStep",
    "UserSimulator",
    "load_evolif_dialogue",
    "load_ntm",
    "load_styles",
    "load_topics",
]
