"""A verdict: one item's outcome, yes, no or unknown, with the reason and who decided it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Label = Literal["yes", "no", "unknown"]
LABELS: tuple[Label, ...] = ("yes", "no", "unknown")


@dataclass(frozen=True)
class Verdict:
    """One item's outcome. `unknown` is a judge failure or a branch that does not apply."""

    label: Label
    reason: str = ""
    source: str = "rule"  # "rule" | "judge:<model>"

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"Verdict label must be one of {LABELS}, got {self.label!r}")

    @property
    def passed(self) -> bool | None:
        """True for yes, False for no, None for unknown."""
        return None if self.label == "unknown" else self.label == "yes"

    def to_json(self) -> dict[str, str]:
        # by hand: dataclasses.asdict took 0.2 ms a call, and every turn writes several
        return {"label": self.label, "reason": self.reason, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(label=data["label"], reason=data.get("reason", ""), source=data.get("source", "rule"))
