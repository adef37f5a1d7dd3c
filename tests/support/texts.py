"""Drawn (text, keyword) pairs, for tests that hold a fast path to the patterns it stands in for."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence


def drawn_pairs(
    seed: int, pieces: Sequence[str], keywords: Sequence[str], count: int, most: int
) -> Iterator[tuple[str, str]]:
    """`count` pairs: a text of up to `most - 1` pieces joined, and one of `keywords`, from one seeded rng."""
    rng = random.Random(seed)
    for _ in range(count):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, most)))
        yield text, rng.choice(keywords)
