"""matplotlib, the optional extra `plot`: imported only when a figure is drawn, so the env loop never needs it.

A root module, so that ifgym.runner (survival, pass-rate and comparison plots) and ifgym.rewards
(FlexBench's heatmap) ask for it the same way.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ifgym.errors import ConfigError

__all__ = ["PLOT_INSTALL", "can_plot", "new_figure"]

PLOT_INSTALL = "pip install 'ifgym[plot]'  (matplotlib>=3.8,<3.12; make's set-up installs it)"


def can_plot() -> bool:
    """Whether matplotlib is installed (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def new_figure(what: str, **kwargs: Any) -> Any:
    """A matplotlib `Figure` (not pyplot's: no figure registry to import or clean up) for `what` is drawn.

    Without matplotlib, a ConfigError that names `what` and the extra that installs it.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(f"{what} is drawn with matplotlib, which is not installed: {PLOT_INSTALL}") from None
    return Figure(**kwargs)
