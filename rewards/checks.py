"""Checking a reply against a constraint: ifgym's rule strict or loose (IFEval's protocol), or EvolIF's evaluator.

`check(constraint, reply, loose=, semantics=)` is how every scorer reads a rule constraint. The
rule itself is the constraint type's own `check` (`ifgym.core.catalog`); this module adds the
scoring protocols around it: loose checking retries the rule on `loose_variants(reply)`, and
`semantics="evolif"` gives the verdict of EvolIF's released evaluator instead
(`ifgym.rewards.evolif.evaluator`).
"""

from __future__ import annotations

import functools
import re

from ifgym.core import Constraint, Verdict
from ifgym.errors import ActionError, JudgeRequiredError, UnknownNameError
from ifgym.rewards.evolif.evaluator import evolif_check

__all__ = ["SEMANTICS", "check", "loose_variants"]

_FENCED = re.compile(r"\A(?P<fence>`{3,}|~{3,})[^\n]*\n(?P<body>.*?)\n?[ \t]*(?P=fence)[ \t]*\Z", re.DOTALL)


def _unfence(text: str) -> str | None:
    """The body of one Markdown code fence enclosing the whole (stripped) text, else None."""
    match = _FENCED.match(text.strip())
    return match.group("body") if match else None


def loose_variants(reply: str) -> list[tuple[str, str]]:
    """The (name, text) variants loose checking tries, the reply as is first.

    Variants: the reply; with the first line removed; with the last line removed; with both
    removed; and each of those with one enclosing Markdown code fence removed. Variants that are
    empty after stripping, or identical to an earlier one, are left out: an empty reply would
    trivially pass "forbidden" rules, which is not what loose checking is for.
    """
    lines = reply.strip().split("\n")
    bases = [("as is", reply)]
    if len(lines) >= 2:
        bases.append(("first line removed", "\n".join(lines[1:])))
        bases.append(("last line removed", "\n".join(lines[:-1])))
    if len(lines) >= 3:
        bases.append(("first and last lines removed", "\n".join(lines[1:-1])))
    variants: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, text in bases:
        for vname, vtext in ((name, text), (f"{name}, code fence removed", _unfence(text))):
            if vtext is None or not vtext.strip() or vtext in seen:
                continue
            seen.add(vtext)
            variants.append((vname, vtext))
    if not variants:  # an empty or blank reply: check it as is
        variants.append(("as is", reply))
    return variants


@functools.lru_cache(maxsize=1)  # a scorer checks each of a turn's failing constraints loosely on the same reply
def _variants_of(reply: str) -> tuple[tuple[str, str], ...]:
    """`loose_variants(reply)`, made once for the reply last asked about."""
    return tuple(loose_variants(reply))


# Whose reading of a rule `check` applies: ifgym's own (strict, or loose) or EvolIF's evaluator.
SEMANTICS: tuple[str, ...] = ("ifgym", "evolif")


def check(
    constraint: Constraint, reply: str, *, loose: bool = False, semantics: str = "ifgym", as_is: Verdict | None = None
) -> Verdict:
    """Rule verdict of `constraint` on `reply`.

    `semantics="ifgym"` (default) applies ifgym's rules, the stricter reading (the catalog's
    docstrings say where it differs from EvolIF). Strict (default) applies the rule to the reply
    as is; loose passes when the rule passes on any of `loose_variants(reply)`, and its reason
    names the variant that passed. `semantics="evolif"` returns the verdict EvolIF's released
    evaluator gives (source "rule:evolif"; see `ifgym.rewards.evolif.evaluator`); EvolIF has one
    reading, so it takes no `loose`. Judged constraints raise JudgeRequiredError; a reply that is
    not a string raises ActionError. `as_is`: the strict verdict of this constraint on this reply when the
    caller already has it (scorers check strict first): loose checking then starts from it instead of
    checking the reply as is a second time.
    """
    if not isinstance(constraint, Constraint):
        raise TypeError(f"check expects a Constraint, got {type(constraint).__name__} {constraint!r}")
    if not isinstance(reply, str):
        raise ActionError(f"a reply must be a str, got {type(reply).__name__} {reply!r:.80}")
    if semantics not in SEMANTICS:
        raise UnknownNameError("checker semantics", semantics, SEMANTICS)
    kind = constraint.kind
    if kind.judged:
        raise JudgeRequiredError(
            f"{constraint.id} is judged by an LLM; score it with ifgym.rewards.evolif.judge.EvolIFJudge"
        )
    if semantics == "evolif":
        if loose:
            raise ValueError("semantics='evolif' has one reading (EvolIF's); loose=True applies to semantics='ifgym'")
        return evolif_check(constraint, reply)
    strict = as_is if as_is is not None and loose else kind.check(reply, constraint.params)
    if not loose or strict.label == "yes":
        if loose:
            return Verdict(strict.label, f"loose (as is): {strict.reason}", strict.source)
        return strict
    for name, text in _variants_of(reply)[1:]:
        verdict = kind.check(text, constraint.params)
        if verdict.label == "yes":
            return Verdict("yes", f"loose ({name}): {verdict.reason}", verdict.source)
    return Verdict(strict.label, f"loose (no variant passed): {strict.reason}", strict.source)
