"""The EvolIF user: the three-layer tracker and the user that plays it, the renderers, and replay of a dialogue file.

The package is split by part: `user` (`EvolIFTracker`, `TrackerConfig`, `TrackerStep`, `EvolIFUser`),
`render` (a turn's spec into the user's words: `TemplateRenderer`, `LLMRenderer`) and `replay`
(`ReplayUser`, `load_evolif_dialogue`: the user's turns from an EvolIF dialogue file); import its
public names from here.
"""

from ifgym.simulators.evolif.user import CHANGES, MOVES, EvolIFTracker, EvolIFUser, TrackerConfig, TrackerStep

__all__ = ["CHANGES", "MOVES", "EvolIFTracker", "EvolIFUser", "TrackerConfig", "TrackerStep"]
