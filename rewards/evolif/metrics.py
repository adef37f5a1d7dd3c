"""EvolIF's dialogue metrics over finished episodes: CSR, ISR, EDR, REC, STA, pass rates, survival.

Definitions follow EvolIF (arXiv 2511.03508) and its released scoring script
(JiaQiSJTU/EvolvingInstructionFollowing, src/score.py): CSR = mean per-turn satisfied share and
ISR = passing turns / turns, both pooled over all turns (so CSR = EDR_acc / EDR_len and
ISR = EDR_succ / EDR_len); EDR_len/acc/succ/lss are per-dialogue values averaged over dialogues;
STA (stability, the paper's name; `ROB`, robustness, in ifgym's earlier runs and kept in `summarize` as an
alias with the same value) is per-dialogue ISR averaged over dialogues; REC is,
per dialogue, the failed turns followed by a passing turn over the failed turns that have a next
turn (the script's `failures - 1`, as its dialogues end on a failure), averaged over dialogues.

- a turn *passes* when every verdict is yes, *fails* when any verdict is no, and is *undetermined*
  otherwise (yes/unknown only) -- the same rule as the patience (`rewards.rubric.turn_outcome`);
  a turn without constraints passes vacuously, as it does for the patience.
- unknown verdicts count in neither numerator nor denominator; `unknown_count` reports them.
  Undetermined turns are left out of ISR and are skipped (neither break nor extend a streak, nor
  count as failure or recovery), just as they leave the patience unchanged.
- Where the script divides by zero (a dialogue without a failed turn that has a next turn), REC
  of that dialogue is 1.0: nothing was left unrecovered. A run in which no dialogue has such a
  failure has no REC (NaN, printed n/a, null in `summary.json`): it was never measured, and a
  model that never passes a one-turn dialogue must not read as recovering perfectly.
- `env=evolif_paper` (the env's `metrics="paper"`, `summarize_paper`) follows score.py there
  instead: such a dialogue's REC is 0, as the script counts a dialogue without a failure
  (0 / -1 = -0.0); the P P F case, which makes the script's mean NaN, counts 0 as well. Its
  published REC numbers are computed so, so this is the convention a comparison with them needs.
- STA, the paper's holistic metric, is the headline (`HEADLINE_METRIC`).

REC's edge cases, checked by running the released score.py on hand-made evaluation files. The
script divides recoveries by `turns - passing turns - 1`, i.e. by the failures that have a next
turn only when the dialogue ends on a failure (as it does when the patience runs out). Where a
dialogue ends otherwise (the script or `max_turns` ran out), its arithmetic goes astray:

| dialogue (P pass, F fail)      | score.py per dialogue      | REC (ifgym, headline) |
|--------------------------------|----------------------------|-----------------------|
| F F F (patience out)           | 0 / 2 = 0                  | 0 / 2 = 0             |
| P F P F F F (patience out)     | 1 / 3                      | 1 / 3                 |
| P P P (no failure)             | 0 / -1 = -0.0, counts as 0 | 1.0 (nothing to recover); evolif_paper: 0 |
| P P F (last turn fails)        | 0 / 0 = NaN: the mean over all dialogues becomes NaN | 1.0; evolif_paper: 0 |
| P F P (recovered, then ends)   | 1 / 0 = inf: the mean becomes inf | 1 / 1 = 1.0  |
| P F P F P (ends on a pass)     | 2 / 1 = 2.0 (a rate above 1) | 2 / 2 = 1.0         |

`REC` (in `summarize`) is the headline: the script's definition where the script is sound (every
dialogue that ends by patience gets the script's number) and the stated meaning of the rate where
it is not. `recovery_script` reproduces the script's arithmetic exactly, NaN and inf included, for
a reader who must match a number printed with it; it is not in `summarize`, because on runs that
end by `max_turns` or a script end it is undefined or above 1. Undetermined turns count as not
passing there, as EvolIF's evaluator turns a judge failure into a failed turn.

All rates are fractions in [0, 1] (the paper prints percentages). Every function raises
DataFormatError for an empty episode list. A rate with nothing to measure (every verdict unknown)
is NaN, never a made-up 0 or 1 (REC's per-dialogue 1.0 is said above).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ifgym.core import Episode, TurnRecord, Verdict
from ifgym.core.constraints import GROUPS
from ifgym.errors import DataFormatError
from ifgym.rewards.metrics import rows_of, survival_of_lengths
from ifgym.rewards.rubric import TurnOutcome, turn_outcome

__all__ = [
    "DEFINITIONS",
    "ALIASES",
    "HEADLINE",
    "HEADLINE_METRIC",
    "EpisodeMetrics",
    "EvolIFRow",
    "csr",
    "endurance",
    "episode_metrics",
    "episode_row",
    "group_pass_rates",
    "isr",
    "recovery",
    "recovery_script",
    "robustness",
    "stability",
    "summarize",
    "summarize_paper",
    "summarize_rows",
    "summarize_rows_paper",
    "survival_curve",
    "survival_of_lengths",
    "unknown_count",
]


def _verdicts(turn: TurnRecord, loose: bool, where: str) -> list[Verdict]:
    verdicts = turn.loose_verdicts if loose else turn.verdicts
    if len(verdicts) != len(turn.spec.constraints):
        kind = "loose_verdicts" if loose else "verdicts"
        raise DataFormatError(
            f"{where}: {len(verdicts)} {kind} for {len(turn.spec.constraints)} constraints; "
            "a turn needs exactly one verdict per constraint, in the constraints' order"
        )
    return verdicts


def _outcome(turn: TurnRecord, loose: bool, where: str) -> TurnOutcome:
    verdicts = _verdicts(turn, loose, where)
    return turn_outcome(verdicts, [c.group for c in turn.spec.constraints], mode="fraction")


def _check_episodes(episodes: Sequence[Episode]) -> None:
    if isinstance(episodes, Episode):
        raise DataFormatError("metrics take a list of episodes; wrap a single episode as [episode]")
    if len(episodes) == 0:
        raise DataFormatError("metrics need at least one episode; got an empty list")


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


@dataclass(frozen=True, slots=True)
class EpisodeMetrics:
    """Per-episode tallies from which every dialogue metric is built.

    `acc` is the sum of per-turn CSR (EDR_acc of this episode); `csr_turns` the turns that had a CSR;
    `succ`/`failed`/`undetermined` count turns by status; `lss` is the longest run of passing turns
    (undetermined turns skipped); `recoveries` counts failed turns whose next determined turn passes,
    `recoverable` the failed turns that have a next determined turn at all.
    """

    turns: int
    acc: float
    csr_turns: int
    succ: int
    failed: int
    undetermined: int
    lss: int
    recoveries: int
    recoverable: int
    unknown: int

    @property
    def isr(self) -> float:
        """Share of determined turns that passed (NaN when none was determined)."""
        return _ratio(self.succ, self.succ + self.failed)

    @property
    def rec(self) -> float:
        """Share of failed turns with a next turn whose next turn passed; 1.0 when there is none."""
        return self.recoveries / self.recoverable if self.recoverable else 1.0

    @property
    def rec_script(self) -> float:
        """`rec` with score.py's count for a dialogue without a failure that has a next turn: 0 (evolif_paper)."""
        return self.recoveries / self.recoverable if self.recoverable else 0.0


def episode_metrics(episode: Episode, loose: bool = False) -> EpisodeMetrics:
    """Tally one episode (strict verdicts, or loose ones with `loose=True`)."""
    acc, csr_turns, succ, failed, undetermined, unknown = 0.0, 0, 0, 0, 0, 0
    lss = run = recoveries = recoverable = 0
    previous_failed = False
    for turn in episode.turns:
        out = _outcome(turn, loose, f"episode {episode.episode_id!r} turn {turn.index}")
        unknown += out.unknown
        if out.defined:
            acc += out.reward
            csr_turns += 1
        if out.passed or out.failed:
            recoverable += previous_failed
        if out.passed:
            succ += 1
            run += 1
            lss = max(lss, run)
            recoveries += previous_failed
            previous_failed = False
        elif out.failed:
            failed += 1
            run = 0
            previous_failed = True
        else:
            undetermined += 1  # patience unchanged: skipped by streaks and recovery
    return EpisodeMetrics(
        turns=len(episode.turns),
        acc=acc,
        csr_turns=csr_turns,
        succ=succ,
        failed=failed,
        undetermined=undetermined,
        lss=lss,
        recoveries=recoveries,
        recoverable=recoverable,
        unknown=unknown,
    )


def _tallies(episodes: Sequence[Episode], loose: bool) -> list[EpisodeMetrics]:
    _check_episodes(episodes)
    return [episode_metrics(e, loose) for e in episodes]


GroupCounts = tuple[tuple[str, int, int], ...]  # (group, yes, known) per constraint group


def _group_counts(episode: Episode, loose: bool) -> GroupCounts:
    """Per constraint group of one episode: (group, yes, known) verdicts over its turns; groups never known left out."""
    yes: dict[str, int] = {}
    known: dict[str, int] = {}
    for turn in episode.turns:
        verdicts = _verdicts(turn, loose, f"episode {episode.episode_id!r} turn {turn.index}")
        for constraint, verdict in zip(turn.spec.constraints, verdicts, strict=True):
            if verdict.label == "unknown":
                continue
            known[constraint.group] = known.get(constraint.group, 0) + 1
            yes[constraint.group] = yes.get(constraint.group, 0) + (verdict.label == "yes")
    # a run keeps one of these per episode: each (group, yes, known) is shared with the episodes that have it
    return tuple(_shared((g, yes[g], known[g])) for g in known)


_SHARED_COUNTS: dict[tuple[str, int, int], tuple[str, int, int]] = {}
_SHARED_LIMIT = 1 << 16  # the distinct triples of a run are few (groups x turns x turns); past this, kept unshared


def _shared(counts: tuple[str, int, int]) -> tuple[str, int, int]:
    # a group's name is its constraint type's attribute: one string already, shared with the triple
    kept = _SHARED_COUNTS.get(counts)
    if kept is None and len(_SHARED_COUNTS) < _SHARED_LIMIT:
        kept = _SHARED_COUNTS[counts] = counts
    return counts if kept is None else kept


def _pass_rates(counts: Iterable[GroupCounts]) -> dict[str, float]:
    yes: dict[str, int] = {}
    known: dict[str, int] = {}
    for episode_counts in counts:
        for group, y, k in episode_counts:
            known[group] = known.get(group, 0) + k
            yes[group] = yes.get(group, 0) + y
    return {g: yes[g] / known[g] for g in sorted(known, key=_group_order)}


@dataclass(frozen=True, slots=True)
class EvolIFRow:
    """One episode reduced to what `summarize_rows` needs: its tallies and its (group, yes, known) verdict counts."""

    tallies: EpisodeMetrics
    groups: GroupCounts


def episode_row(episode: Episode, loose: bool = False) -> EvolIFRow:
    """One episode's row for `summarize_rows` (numbers only: a run keeps these, never its episodes)."""
    return EvolIFRow(episode_metrics(episode, loose), _group_counts(episode, loose))


def _csr(tallies: list[EpisodeMetrics]) -> float:
    return _ratio(sum(t.acc for t in tallies), sum(t.csr_turns for t in tallies))


def _isr(tallies: list[EpisodeMetrics]) -> float:
    succ = sum(t.succ for t in tallies)
    return _ratio(succ, succ + sum(t.failed for t in tallies))


def _endurance(tallies: list[EpisodeMetrics]) -> dict[str, float]:
    n = len(tallies)
    return {
        "len": sum(t.turns for t in tallies) / n,
        "acc": sum(t.acc for t in tallies) / n,
        "succ": sum(t.succ for t in tallies) / n,
        "lss": sum(t.lss for t in tallies) / n,
    }


def _recovery(tallies: list[EpisodeMetrics], paper: bool = False) -> float:
    if paper:  # score.py's convention: a dialogue with nothing to recover counts 0, and every dialogue counts
        return sum(t.rec_script for t in tallies) / len(tallies)
    if not any(t.recoverable for t in tallies):
        return math.nan  # no failure had a next turn in any dialogue: nothing was there to recover (0/0)
    return sum(t.rec for t in tallies) / len(tallies)


def _robustness(tallies: list[EpisodeMetrics]) -> float:
    rates = [t.isr for t in tallies if t.succ + t.failed]
    return sum(rates) / len(rates) if rates else math.nan


def csr(episodes: Sequence[Episode], loose: bool = False) -> float:
    """Constraint Satisfaction Rate: mean over all turns of yes / (yes + no) at that turn.

    Pooled over the turns of all episodes (= EDR_acc / EDR_len when nothing is unknown). Turns whose
    verdicts are all unknown are left out; NaN when no turn has a known verdict.
    """
    return _csr(_tallies(episodes, loose))


def isr(episodes: Sequence[Episode], loose: bool = False) -> float:
    """Instruction Satisfaction Rate: share of turns where every constraint holds, pooled over episodes.

    Undetermined turns (yes/unknown only) are left out; NaN when no turn is determined.
    """
    return _isr(_tallies(episodes, loose))


def endurance(episodes: Sequence[Episode], loose: bool = False) -> dict[str, float]:
    """EDR averaged over episodes.

    `len`: turns played; `acc`: sum of per-turn CSR; `succ`: passing turns; `lss`: longest run of
    consecutive passing turns.
    """
    return _endurance(_tallies(episodes, loose))


def recovery(episodes: Sequence[Episode], loose: bool = False) -> float:
    """REC: recovered failures over failures with a next turn, per episode, averaged over episodes.

    A failure is recovered when the next determined turn passes (EvolIF's score.py). An episode
    without a failure that has a next turn counts 1.0: nothing was left unrecovered. NaN when no
    episode has one (nothing was measured).
    """
    return _recovery(_tallies(episodes, loose))


def recovery_script(episodes: Sequence[Episode], loose: bool = False) -> float:
    """REC with EvolIF's score.py arithmetic: per dialogue recoveries / (turns - passing turns - 1), averaged.

    A recovery is a passing turn right after a turn that did not pass (undetermined turns count as
    not passing). Division as numpy does it: 0/0 is NaN, x/0 is inf, 0/-1 is -0.0; NaN and inf
    carry into the mean. See the module docstring for when this differs from `recovery`.
    """
    _check_episodes(episodes)
    rates = []
    for episode in episodes:
        passed = [_outcome(t, loose, f"episode {episode.episode_id!r} turn {t.index}").passed for t in episode.turns]
        recoveries = sum(1 for before, now in zip([True, *passed], passed, strict=False) if now and not before)
        denominator = len(passed) - sum(passed) - 1
        if denominator:
            rates.append(recoveries / denominator)
        else:
            rates.append(math.inf if recoveries else math.nan)
    return sum(rates) / len(rates)


def robustness(episodes: Sequence[Episode], loose: bool = False) -> float:
    """STA (ROB): mean over episodes of the episode's ISR (a macro average: every dialogue weighs the same).

    Episodes without a determined turn are left out; NaN when no episode has one.
    """
    return _robustness(_tallies(episodes, loose))


# EvolIF's name for it, STA (stability); `robustness` (ROB) is ifgym's earlier one.
stability = robustness


def unknown_count(episodes: Sequence[Episode], loose: bool = False) -> int:
    """Count the unknown verdicts (judge failures, inapplicable branches) across all turns."""
    return sum(t.unknown for t in _tallies(episodes, loose))


def group_pass_rates(episodes: Sequence[Episode], loose: bool = False) -> dict[str, float]:
    """Per constraint group, yes / (yes + no) over every turn where the group was live.

    Groups that never had a known verdict are omitted. Keys follow the catalog's group order.
    """
    _check_episodes(episodes)
    return _pass_rates(_group_counts(e, loose) for e in episodes)


def _group_order(group: str) -> tuple[int, str]:
    return (GROUPS.index(group), group) if group in GROUPS else (len(GROUPS), group)


def survival_curve(episodes: Sequence[Episode]) -> list[float]:
    """S(t) for t = 0 .. longest episode: the share of episodes that lasted at least t turns.

    S(0) = 1. Episodes cut off by `max_turns` count as surviving to their last turn only (no
    censoring correction), as in EvolIF's survival plots.
    """
    _check_episodes(episodes)
    return survival_of_lengths([len(e.turns) for e in episodes])


# The metrics a run is judged by (they get bootstrap intervals in `ifgym eval`'s summary).
HEADLINE: tuple[str, ...] = ("CSR", "ISR", "EDR_len", "EDR_acc", "EDR_succ", "EDR_lss", "REC", "STA")
# earlier names of a metric, kept in `summarize` with the same value (for readers of earlier runs), not printed
ALIASES: dict[str, str] = {"ROB": "STA"}
HEADLINE_METRIC = "STA"  # EvolIF's holistic metric: the one a run is read by first (marked, first in sweeps)

# One line per metric, printed under the results table (`DEFINITIONS["loose"]` says what the loose column is).
DEFINITIONS: dict[str, str] = {
    "CSR": "constraint satisfaction rate: per turn, constraints met / constraints judged, averaged over all turns",
    "ISR": "instruction satisfaction rate: share of turns (with a verdict) that met every constraint",
    "EDR_len": "endurance: turns played per dialogue",
    "EDR_acc": "endurance: per dialogue, the sum of its turns' CSR",
    "EDR_succ": "endurance: per dialogue, the turns that met every constraint",
    "EDR_lss": "endurance: per dialogue, the longest run of consecutive passing turns",
    "REC": "recovery: per dialogue, failed turns whose next turn passed / failed turns with a next turn; "
    "n/a when no failure had a next turn (EvolIF's arithmetic: rewards.evolif.metrics.recovery_script)",
    "STA": "stability (EvolIF's name; ROB, robustness, in summary.json too): per dialogue ISR, averaged over dialogues",
    "loose": "the same reply checked again with Markdown fences or a first/last framing line stripped "
    "(IFEval's loose reading)",
}
# env=evolif_paper: REC with the 0/0 convention of EvolIF's released score.py
PAPER_DEFINITIONS: dict[str, str] = {
    **DEFINITIONS,
    "REC": "recovery: per dialogue, failed turns whose next turn passed / failed turns with a next turn; a dialogue "
    "with no failed turn that has a next turn counts 0, as EvolIF's score.py counts one without failures "
    "(0 / -1); averaged over every dialogue",
}


def summarize(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """Every metric in one flat dict (for a results table or W&B), in one pass over `episodes`.

    Keys: episodes, turns, EDR_len, EDR_acc, EDR_succ, EDR_lss, CSR, ISR, REC, STA (and ROB, its alias), failed_turns,
    undetermined_turns, unknown, and `pass_rate/<group>` per constraint group.
    """
    return summarize_rows(rows_of(episodes, episode_row, loose))


def summarize_paper(episodes: Iterable[Episode], loose: bool = False) -> dict[str, float]:
    """`summarize` as `env=evolif_paper` reports it: REC with score.py's convention (see the module docstring)."""
    return summarize_rows_paper(rows_of(episodes, episode_row, loose))


def summarize_rows_paper(rows: Sequence[EvolIFRow], loose: bool = False) -> dict[str, float]:
    """`summarize_paper` from the episodes' rows."""
    return summarize_rows(rows, loose, paper=True)


def summary_ratios_paper(rows: Sequence[EvolIFRow], loose: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`summary_ratios` with REC as `summarize_rows_paper` computes it."""
    out = summary_ratios(rows, loose)
    tallies = [r.tallies for r in rows]
    out["REC"] = (np.fromiter((t.rec_script for t in tallies), dtype=float, count=len(tallies)), np.ones(len(tallies)))
    return out


def summarize_rows(rows: Sequence[EvolIFRow], loose: bool = False, *, paper: bool = False) -> dict[str, float]:
    """`summarize` from the episodes' rows (`episode_row`); `loose` is the rows' business and is ignored here.

    `paper=True`: REC with score.py's convention (`summarize_rows_paper`).
    """
    if not rows:
        raise DataFormatError("metrics need at least one episode; got an empty list")
    tallies = [r.tallies for r in rows]
    edr = _endurance(tallies)
    out: dict[str, float] = {
        "episodes": float(len(tallies)),
        "turns": float(sum(t.turns for t in tallies)),
        "EDR_len": edr["len"],
        "EDR_acc": edr["acc"],
        "EDR_succ": edr["succ"],
        "EDR_lss": edr["lss"],
        "CSR": _csr(tallies),
        "ISR": _isr(tallies),
        "REC": _recovery(tallies, paper),
        "STA": _robustness(tallies),
        "failed_turns": float(sum(t.failed for t in tallies)),
        "undetermined_turns": float(sum(t.undetermined for t in tallies)),
        "unknown": float(sum(t.unknown for t in tallies)),
    }
    out.update({alias: out[name] for alias, name in ALIASES.items()})
    for group, rate in _pass_rates(r.groups for r in rows).items():
        out[f"pass_rate/{group}"] = rate
    return out


def summary_ratios(rows: Sequence[EvolIFRow], loose: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The headline metrics and pass rates of `summarize_rows`, each as sum(numerators) / sum(denominators) over rows.

    Per metric, each row's numerator and denominator (1 for an average over dialogues), so that a
    bootstrap draw's value is a weighted sum (`ifgym.core.stats.intervals`); a zero denominator is NaN,
    as in `summarize_rows`. Arrays, not lists of floats: a run's intervals keep these for every
    dialogue. `loose` is the rows' business and is ignored here.
    """
    tallies = [r.tallies for r in rows]
    n = len(tallies)

    def column(values: Iterable[float]) -> np.ndarray:
        return np.fromiter(values, dtype=float, count=n)

    ones = np.ones(n)
    determined = column(1.0 if t.succ + t.failed else 0.0 for t in tallies)
    acc, succ = column(t.acc for t in tallies), column(t.succ for t in tallies)
    out = {
        "EDR_len": (column(t.turns for t in tallies), ones),
        "EDR_acc": (acc, ones),
        "EDR_succ": (succ, ones),
        "EDR_lss": (column(t.lss for t in tallies), ones),
        "CSR": (acc, column(t.csr_turns for t in tallies)),
        "ISR": (succ, column(t.succ + t.failed for t in tallies)),
        "REC": (column(t.rec for t in tallies), ones),
        "STA": (column(t.isr if t.succ + t.failed else 0.0 for t in tallies), determined),
    }
    groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, row in enumerate(rows):
        for group, yes, known in row.groups:
            columns = groups.setdefault(group, (np.zeros(n), np.zeros(n)))
            columns[0][i], columns[1][i] = yes, known
    for group in sorted(groups, key=_group_order):
        out[f"pass_rate/{group}"] = groups[group]
    return out
