"""FlexBench's user side: SOP files, personas by cooperativeness, the scripted and LLM callers, end detection.

An SOP (standard operating procedure) is one long instruction the assistant follows on a call; the
assistant speaks first with the SOP's opening line. The caller on the other end is a persona: a
meta profile by cooperativeness (poor / general / good: communication style, information
disclosure, problem-solving approach, catchphrases, patience) plus an instruction-specific delta
(business context, goal, typical questions, catchphrases) that is given in a file or inferred from
the SOP by a model.

Two callers share that persona:

- `ScriptedUser` needs no model: it answers the SOP's branch questions from a fact sheet sampled
  with the episode's seed (in charge yes/no, platform, fee plan chosen …). Each fact lists
  regular expressions ("cues") that recognise the agent asking about it, and answer lines.
- `LLMUser` lets a user model speak in character, with the same sampled facts as its situation.

The call ends when the agent closes it (keyword rules on the agent's last message, and with
`LLMUser` an LLM end detector), when the caller hangs up (keyword rules on the caller's words,
or the detector), or when an uncooperative caller runs out of patience: a turn that does not help
the caller (asks nothing new, gives nothing useful, repeats itself) costs one point of patience.
`end_reason` says which ("assistant_closed", "user_hung_up", "user_lost_patience").

Leakage resistance: the evaluation dimensions live in `ifgym.rewards.flexbench` and nothing here
imports it or receives anything derived from it; the env passes no verdicts to these users, and
the user model sees the persona, the facts and the dialogue, never the SOP text (only the
one-off persona inference reads the SOP). Tests check all of this, and that swapping the
dimension file leaves the scripted caller's words unchanged.

Why a caller file's cues may use the same words as a dimension file's rules ("in charge",
"platform", "2.9"): both are written from the SOP, which is the assistant's public instruction,
and the caller needs the words to recognise a question about its own situation, just as a person
on the phone would. A cue tells the caller what was asked, never whether the answer satisfies
a criterion; the caller file holds no criterion, precondition, grouping, label or score, and its
behaviour (answer a question, lose patience on a turn that asks nothing new) is the same whatever
the dimensions say.

SOP file formats (user-writable):

- Markdown (`.md`): a front matter block between `---` lines with `key: value` lines
  (`opening_line` required; `name` and `title` optional), then the instruction text.
- JSON (`.json`): `{"name": ..., "title": ..., "instruction": ..., "opening_line": ...}`.

A companion caller file `<sop stem>.user.json` next to the SOP holds the persona delta and the fact
sheet (see `load_caller_sheet` for its fields). The shipped SOPs live in `simulators/assets/sops/`.

The package is split by stage: `sops` (SOP files), `personas` (meta profiles, the SOP-specific delta
and fact sheet, delta inference), `ending` (when a call ends) and `callers` (the scripted and LLM
callers); import its public names from here.
"""

from ifgym.simulators.flexbench.callers import END_REASONS, FlexBenchUser, LLMUser, ScriptedUser
from ifgym.simulators.flexbench.ending import EndCheck, EndDetector, assistant_closed, parse_end_check, user_hung_up
from ifgym.simulators.flexbench.personas import (
    CallerSheet,
    Fact,
    Persona,
    PersonaDelta,
    PersonaProfile,
    caller_sheet_for,
    infer_delta,
    load_caller_sheet,
    load_personas,
)
from ifgym.simulators.flexbench.sops import LEVELS, SOP_DIR, Sop, load_sop, sop_names

__all__ = [
    "END_REASONS",
    "LEVELS",
    "SOP_DIR",
    "CallerSheet",
    "EndCheck",
    "EndDetector",
    "Fact",
    "FlexBenchUser",
    "LLMUser",
    "Persona",
    "PersonaDelta",
    "PersonaProfile",
    "ScriptedUser",
    "Sop",
    "assistant_closed",
    "caller_sheet_for",
    "infer_delta",
    "load_caller_sheet",
    "load_personas",
    "load_sop",
    "parse_end_check",
    "sop_names",
    "user_hung_up",
]
