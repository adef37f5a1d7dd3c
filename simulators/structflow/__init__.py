"""StructFlow dialogues: StructFlowBench's dataset format, replay with golden context, and two generators.

A `Dialogue` is a flow (see `ifgym.core.structflow`) plus one `DialogueTurn` per turn: the user's
prompt, the dataset's golden answer (if any) and the turn's checklist (`ChecklistItem`s: intra-turn
constraint items, and one structural item for a follow-up / refinement / recall / expansion /
summary turn). `Dialogue.to_json()` writes StructFlowBench's record format, so generated dialogues
can also be scored by the benchmark's own scripts; rule-checkable items carry an extra
`"constraint"` field (ignored by those scripts, read back by `parse_dataset`).

Sources of dialogues:
- `load_dataset(path)`: StructFlowBench's JSON (a list of records with `whole_conv`, `structure`,
  `conv_task`, `conv_topic`, `user_type`, …). Every record is validated up front; a bad one is a
  DataFormatError naming the record index and the field. Turns are identified by position (the
  benchmark's own scripts do the same; one record of the released file repeats turn names).
  The same function reads GraphIF's long-dialogue evaluation sets (JSON Lines of `{"id", "conv"}`,
  see `parse_graphif_record`); the format is detected from the file's content.
- `TemplateDialogueGenerator`: offline and seeded. Structure template × topic (the EvolIF topic
  bank) × task type × user type; the user's words come from phrase tables, and every intra-turn
  requirement is a rule-checkable constraint of the EvolIF catalog, so only the structural items
  need a judge. Refinement turns change one requirement of the turn before (`change_one`'s "modify",
  as the EvolIF tracker's), unrelated turns move to another topic, recall turns go back to the source's topic.
- `LLMDialogueGenerator`: the same parameters, through a model: a plan of summarized prompts per
  turn (stage "plan"), the full user prompts with their requirements in the user's voice plus
  reference answers (stage "prompts"), then one checklist-extraction call per turn (stage
  "checklist"); the structural items come from the flow. Rule-checkable requirements are sampled
  as in the offline generator and stated to the model, so they stay rule-checked; a user prompt
  that does not state them (`ifgym.core.unstated`, a cheap lexical check) is re-asked like any invalid
  answer and counted. Each stage's answer is parsed with `json_repair` and validated; an unusable
  answer is re-asked with the reason, at most `max_retries` times, then the generation fails
  with GenerationError.

`StructFlowUser` plays dialogues turn by turn (a fixed list, or one generated per episode; a failed
LLM generation falls back to the offline generator for the same parameters and is counted).

The package is split by stage: `flows` (the structure templates), `format` (tasks, `Dialogue`,
the dataset formats, `load_dataset`), `planner` (what each generated turn is about, the generators'
shared base), `template_generator`, `llm_generator` and `user`; import its public names from here.
"""

from ifgym.errors import GenerationError
from ifgym.simulators.structflow.format import (
    DATASETS,
    TASKS,
    Dialogue,
    DialogueTurn,
    TaskType,
    load_dataset,
    parse_dataset,
    parse_graphif_record,
    parse_record,
)
from ifgym.simulators.structflow.llm_generator import LLMDialogueGenerator
from ifgym.simulators.structflow.template_generator import TemplateDialogueGenerator, word_turn
from ifgym.simulators.structflow.user import StructFlowUser

__all__ = [
    "DATASETS",
    "TASKS",
    "Dialogue",
    "DialogueTurn",
    "GenerationError",
    "LLMDialogueGenerator",
    "StructFlowUser",
    "TaskType",
    "TemplateDialogueGenerator",
    "load_dataset",
    "parse_dataset",
    "parse_graphif_record",
    "word_turn",
    "parse_record",
]
