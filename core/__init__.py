"""The neutral room: the vocabulary every other room shares, depending on none of them.

It imports nothing of `envs/`, `simulators/`, `rewards/` or `policies/` (tests/test_imports.py),
so the user side and the scoring side can both speak it without knowing each other:

- `verdicts`: `Verdict` (yes / no / unknown, with reason and source);
- `turns`: what flows through one turn: `ChecklistItem`, `TurnSpec` (with the documented literal
  types `Move`, `Change` and `ItemKind`), `UserTurn`, `TurnRecord`, `Episode`;
- `constraints` and `catalog`: the `Constraint` type and every constraint type of the catalog,
  each with its rule (`check`), the words a user says (`describe`, `phrasings`), and how it is
  drawn and varied (`sample`, `vary`);
- `sampling`: what the samplers share (`Ranges`, `SampleContext`) and drawing what fits the live
  constraints (`sample_compatible`, `vary_compatible`, `change_one`), for the EvolIF tracker and
  the StructFlow planner alike;
- `cues`: what a user's text must carry to state a constraint (each type's `cues`) and `unstated`,
  the one check of a drafted user message every user simulator uses;
- `wording`: the small pieces of English the phrasings and the renderers are built from;
- `structflow`: StructFlow's relations and flows, item types and weights, tasks and user types;
- `evolif`: EvolIF's instruction format read into constraints and back (`from_evolif`, `to_evolif`);
- `stats`: bootstrap intervals over dialogues, paired comparisons and Cohen's kappa, for the judge
  audit (`rewards/`) and the run's report (`runner/`) alike.

Departure from ../shared/DESIGN.md: DESIGN places the constraint catalog in `rewards/` and the
flows in `simulators/`; both sides use them, so they live here, and `rewards/` no longer imports
`simulators/`. What a reward makes of a constraint (strict and loose checking, EvolIF's evaluator's
reading) stays in `rewards/` (`ifgym.rewards.check`). Importing this package registers the catalog.
"""

from ifgym.core import catalog  # noqa: F401  (registers every constraint type)
from ifgym.core.constraints import (
    GROUPS,
    JUDGED_GROUPS,
    REGISTRY,
    RULE_GROUPS,
    Constraint,
    ConstraintType,
    conflicts,
    constraint_type,
    ids_in_group,
    register,
    unstated,
)
from ifgym.core.cues import Cue
from ifgym.core.turns import (
    CHANGES,
    ITEM_KINDS,
    MOVES,
    Change,
    ChecklistItem,
    Episode,
    ItemKind,
    Move,
    TurnRecord,
    TurnSpec,
    UserTurn,
)
from ifgym.core.verdicts import LABELS, Label, Verdict

__all__ = [
    "CHANGES",
    "GROUPS",
    "ITEM_KINDS",
    "JUDGED_GROUPS",
    "LABELS",
    "MOVES",
    "REGISTRY",
    "RULE_GROUPS",
    "Change",
    "ChecklistItem",
    "Constraint",
    "ConstraintType",
    "Cue",
    "Episode",
    "ItemKind",
    "Label",
    "Move",
    "TurnRecord",
    "TurnSpec",
    "UserTurn",
    "Verdict",
    "conflicts",
    "constraint_type",
    "ids_in_group",
    "register",
    "unstated",
]
