"""What every task's metrics share: episodes reduced to rows in one pass, and the survival curve of their lengths."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from ifgym.core import Episode
from ifgym.errors import DataFormatError

__all__ = ["rows_of", "survival_of_lengths"]

R = TypeVar("R")


def rows_of(episodes: Iterable[Episode], row: Callable[[Episode, bool], R], loose: bool) -> list[R]:
    """`row` of each episode, in one pass over `episodes` (any iterable); refuses a lone Episode or no episodes."""
    if isinstance(episodes, Episode):
        raise DataFormatError("metrics take a list of episodes; wrap a single episode as [episode]")
    rows = [row(e, loose) for e in episodes]
    if not rows:
        raise DataFormatError("metrics need at least one episode; got an empty list")
    return rows


def survival_of_lengths(lengths: Sequence[int]) -> list[float]:
    """S(t) for t = 0 .. the longest: the share of episodes that lasted at least t turns, from their lengths."""
    n = len(lengths)
    return [sum(length >= t for length in lengths) / n for t in range(max(lengths) + 1)]
