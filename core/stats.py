"""How sure a run's numbers are: bootstrap intervals over dialogues, and paired comparison of two runs.

Dialogues are the unit of resampling (turns of one dialogue are not independent). Every interval
is a percentile bootstrap: the episodes are drawn with replacement `resamples` times with numpy's
seeded generator, the env's own `summarize` is applied to each draw, and the interval is the
middle `level` of the values (`numpy.nanpercentile`). Recomputing with `summarize` means an
interval always measures what the point estimate measures, whatever its formula (pooled over
turns, averaged over dialogues). Metrics that are ratios of sums over dialogues (those an env's
`summary_ratios` names: all of EvolIF's) get the same values from each draw's count of every
dialogue, a chunk of draws in one matrix product (`CHUNK_CELLS` bounds its memory). A draw in
which a metric is undefined (NaN, e.g. a group that no drawn dialogue contains) is left out of
that metric's interval; a metric undefined in every draw, or a run of fewer than two dialogues,
has no interval (None).

`compare` pairs two runs' episodes by seed and reports, per metric, the difference B - A with a
paired bootstrap interval (the same pairs drawn for both runs) and the p-value of a paired
permutation test (`scipy.stats.permutation_test`, `permutation_type="samples"`: within each
pair, which run an episode belongs to is swapped), two-sided, under the null hypothesis that the
two runs' policies perform alike on these dialogues.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ifgym.core import Episode
from ifgym.errors import ConfigError

__all__ = ["COMPARE_INSTALL", "CISettings", "cohen_kappa", "compare", "intervals", "metric_names"]

COMPARE_INSTALL = "pip install 'ifgym[compare]'  (scipy>=1.15,<1.18; make's set-up installs it)"

Summarize = Callable[..., dict[str, float]]
# an env's `summary_ratios`: {metric: (numerator per dialogue, denominator per dialogue)}
Ratios = Callable[..., dict[str, tuple[Sequence[float], Sequence[float]]]]


@dataclass(frozen=True)
class CISettings:
    """How intervals are drawn: `resamples` bootstrap draws, central `level`, numpy generator `seed`."""

    resamples: int = 1000
    level: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.resamples, int) or isinstance(self.resamples, bool) or self.resamples < 1:
            raise ConfigError(f"ci_resamples must be an int >= 1, got {self.resamples!r}")
        if not isinstance(self.level, int | float) or not 0 < self.level < 1:
            raise ConfigError(f"ci_level must be a number between 0 and 1 (e.g. 0.95), got {self.level!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"the interval seed must be an int, got {self.seed!r}")

    def to_json(self) -> dict[str, Any]:
        """What `summary.json` records beside the intervals."""
        return {
            "method": "percentile bootstrap over dialogues",
            "resamples": self.resamples,
            "level": self.level,
            "seed": self.seed,
        }


def cohen_kappa(first: Sequence[str], second: Sequence[str], labels: Sequence[str]) -> float:
    """Cohen's kappa of two raters' labels of the same items: (observed - chance agreement) / (1 - chance).

    Chance agreement is the sum over `labels` of the product of the two raters' shares; pairs with a
    label outside `labels` are left out. NaN where kappa is undefined: no pairs, or chance agreement
    1 (both raters gave one and the same label throughout).
    """
    if len(first) != len(second):
        raise ValueError(f"cohen_kappa: {len(first)} labels from the first rater, {len(second)} from the second")
    pairs = [(a, b) for a, b in zip(first, second, strict=True) if a in labels and b in labels]
    n = len(pairs)
    if not n:
        return math.nan
    observed = sum(a == b for a, b in pairs) / n
    chance = sum(sum(a == x for a, _ in pairs) * sum(b == x for _, b in pairs) for x in set(labels)) / n**2
    return math.nan if chance == 1 else (observed - chance) / (1 - chance)


def metric_names(summary: dict[str, float], headline: Sequence[str]) -> list[str]:
    """The metrics that get an interval: the env's headline metrics and its pass rates (`pass_rate/...`)."""
    return [k for k in summary if k in headline or k.startswith("pass_rate/")]


def _values(summary: dict[str, float], metrics: Sequence[str]) -> list[float]:
    out = []
    for m in metrics:
        v = summary.get(m, math.nan)
        out.append(float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan)
    return out


def _percentiles(draws: np.ndarray, level: float) -> list[list[float] | None]:
    """Per column, [low, high] of the finite draws, or None when there are none."""
    tail = (1 - level) / 2 * 100
    out: list[list[float] | None] = []
    for column in draws.T:
        finite = column[np.isfinite(column)]
        if finite.size == 0:
            out.append(None)
            continue
        low, high = np.percentile(finite, [tail, 100 - tail])
        out.append([float(low), float(high)])
    return out


# cells of a chunk's resamples x dialogues count matrix (0.5 MB as int64): memory stays flat however large the run
CHUNK_CELLS = 1 << 16


def _chunks(rng: np.random.Generator, n: int, resamples: int) -> Iterator[np.ndarray]:
    """The draws' dialogue indices, a (resamples in this chunk) x n array at a time.

    Each draw is its own `rng.integers(0, n, size=n)` call, so the draws are those of one call per
    resample (`compare`'s, and this function's before chunking), whatever the chunk size.
    """
    per_chunk = max(1, CHUNK_CELLS // n)
    for start in range(0, resamples, per_chunk):
        yield np.stack([rng.integers(0, n, size=n) for _ in range(min(per_chunk, resamples - start))])


def _ratio_draws(rows: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """Per draw (a row of `rows`' indices) and metric, sum(numerators) / sum(denominators) over the drawn dialogues.

    `terms` is n x 2m: each metric's per-dialogue numerator, then its denominator. A draw is
    reduced to how often it drew each dialogue (a count matrix), so all draws of a chunk are one
    matrix product; a zero denominator gives NaN (the metric is undefined in that draw).
    """
    k, n = rows.shape
    counts = np.bincount((rows + n * np.arange(k)[:, None]).ravel(), minlength=k * n).reshape(k, n)
    sums = counts @ terms
    m = terms.shape[1] // 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sums[:, m:] != 0, sums[:, :m] / sums[:, m:], np.nan)


def intervals(
    episodes: Sequence[Any],
    summarize: Summarize,
    metrics: Sequence[str],
    *,
    loose: bool = False,
    settings: CISettings | None = None,
    ratios: Ratios | None = None,
) -> dict[str, list[float] | None]:
    """Bootstrap interval of each metric of `summarize(episodes, loose=loose)`, resampling dialogues.

    `episodes` are the dialogues: Episodes with the env's `summarize`, or (as `ifgym eval` does,
    keeping no episode in memory) their task's `episode_row`s with its `summarize_rows` (`env.task`).
    `ratios` (an env's `summary_ratios`) gives, for the metrics that are ratios of sums over
    dialogues, each dialogue's numerator and denominator: those metrics are computed for a chunk
    of draws at once (`_ratio_draws`, the same draws and values, up to float rounding), the rest by
    `summarize` on each draw.
    """
    settings = settings or CISettings()
    episodes = list(episodes)
    if len(episodes) < 2 or not metrics:
        return dict.fromkeys(metrics)
    terms = ratios(episodes, loose=loose) if ratios is not None else {}
    fast = [m for m in metrics if m in terms]
    slow = [m for m in metrics if m not in terms]
    matrix = np.array([terms[m][0] for m in fast] + [terms[m][1] for m in fast], dtype=float).T if fast else None
    rng = np.random.default_rng(settings.seed)
    draws = np.empty((settings.resamples, len(metrics)))
    fast_columns = [metrics.index(m) for m in fast]
    slow_columns = [metrics.index(m) for m in slow]
    done = 0
    # one BLAS thread: a chunk's product is ~0.3 ms on one core, but OpenBLAS's threads spin-wait for each other
    # on a busy machine (20 ms a product at load 7 on 2 cores); the values are the same either way
    with threadpool_limits(1, user_api="blas"):
        for rows in _chunks(rng, len(episodes), settings.resamples):
            block = slice(done, done + len(rows))
            if fast:
                draws[block, fast_columns] = _ratio_draws(rows, matrix)
            for b, row in enumerate(rows if slow else (), start=done):
                draws[b, slow_columns] = _values(summarize([episodes[i] for i in row], loose=loose), slow)
            done += len(rows)
    return dict(zip(metrics, _percentiles(draws, settings.level), strict=True))


def _pairs(a: Sequence[Episode], b: Sequence[Episode]) -> tuple[list[Episode], list[Episode]]:
    """The two runs' episodes ordered by seed, refusing runs whose seeds differ."""

    def by_seed(episodes: Sequence[Episode], name: str) -> dict[int, Episode]:
        seeds: dict[int, Episode] = {}
        for e in episodes:
            if e.seed is None:
                raise ConfigError(f"run {name}: episode {e.episode_id!r} has no seed, so it cannot be paired")
            if e.seed in seeds:
                raise ConfigError(f"run {name}: seed {e.seed} occurs twice; each seed must name one episode")
            seeds[e.seed] = e
        return seeds

    sa, sb = by_seed(a, "A"), by_seed(b, "B")
    if set(sa) != set(sb):
        only_a, only_b = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
        raise ConfigError(
            "the runs were played on different seeds, so their episodes cannot be paired: "
            f"only in A: {_seed_list(only_a)}; only in B: {_seed_list(only_b)}. Re-run one of them with the "
            "other's seed= and episodes="
        )
    if len(sa) < 2:
        raise ConfigError(f"comparing runs needs at least 2 paired episodes; these have {len(sa)}")
    order = sorted(sa)
    return [sa[s] for s in order], [sb[s] for s in order]


def _seed_list(seeds: list[int]) -> str:
    if not seeds:
        return "none"
    shown = ", ".join(map(str, seeds[:10]))
    return shown + (f" … ({len(seeds)} in all)" if len(seeds) > 10 else "")


def compare(
    episodes_a: Sequence[Episode],
    episodes_b: Sequence[Episode],
    summarize: Summarize,
    metrics: Sequence[str],
    *,
    loose: bool = False,
    settings: CISettings | None = None,
) -> dict[str, dict[str, Any]]:
    """Per metric: A, B, B - A, a paired bootstrap interval of B - A, and a paired permutation p-value.

    Episodes are paired by seed (both runs must hold the same seeds). Returns
    `{metric: {"a", "b", "diff", "ci": [low, high] | None, "p_value": float | None}}`; a metric
    undefined in either run has diff NaN and no interval or p-value.
    """
    try:
        from scipy.stats import permutation_test
    except ImportError:
        raise ConfigError(f"the paired permutation test of a comparison needs SciPy: {COMPARE_INSTALL}") from None

    settings = settings or CISettings()
    a, b = _pairs(episodes_a, episodes_b)
    n = len(a)
    pool = a + b  # index i < n is run A's episode of pair i, n + i run B's
    cache: dict[bytes, list[float]] = {}

    def values(index: np.ndarray) -> list[float]:
        key = index.tobytes()
        if key not in cache:
            cache[key] = _values(summarize([pool[i] for i in index], loose=loose), metrics)
        return cache[key]

    point_a, point_b = values(np.arange(n)), values(np.arange(n, 2 * n))
    rng = np.random.default_rng(settings.seed)
    draws = np.empty((settings.resamples, len(metrics)))
    for r in range(settings.resamples):
        row = rng.integers(0, n, size=n)  # one call per draw, as in `intervals`
        # the two runs' values over the same drawn pairs; not cached (draws rarely repeat)
        va = _values(summarize([a[i] for i in row], loose=loose), metrics)
        vb = _values(summarize([b[i] for i in row], loose=loose), metrics)
        draws[r] = np.subtract(vb, va)
    cis = _percentiles(draws, settings.level)

    out: dict[str, dict[str, Any]] = {}
    for k, metric in enumerate(metrics):
        diff = point_b[k] - point_a[k]
        entry: dict[str, Any] = {"a": point_a[k], "b": point_b[k], "diff": diff, "ci": None, "p_value": None}
        if math.isfinite(diff):
            entry["ci"] = cis[k]

            def statistic(x: np.ndarray, y: np.ndarray, k: int = k) -> float:
                return values(y)[k] - values(x)[k]

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # NaN draws compare as False: conservative
                # the same seed for every metric: the same permutations, so `values` answers from its cache
                test = permutation_test(
                    (np.arange(n), np.arange(n, 2 * n)),
                    statistic,
                    permutation_type="samples",
                    n_resamples=settings.resamples,
                    vectorized=False,
                    rng=settings.seed,
                )
            entry["p_value"] = float(test.pvalue)
        out[metric] = entry
    return out
