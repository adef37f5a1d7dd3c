"""The offline StructFlow generator: phrase tables over the plan, seeded, no model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ifgym.core.constraints import Constraint
from ifgym.core.sampling import choice
from ifgym.core.structflow import (
    USER_TYPES,
    Flow,
    constraint_item,
    turn_name,
)
from ifgym.core.wording import and_list, lower_first
from ifgym.simulators.assets_io import Topic
from ifgym.simulators.structflow.format import Dialogue, DialogueTurn, TaskType
from ifgym.simulators.structflow.planner import GeneratorBase, TurnPlan, child_rng

# ---------------------------------------------------------------------------------------------
# The offline generator
# ---------------------------------------------------------------------------------------------

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _answer_ref(turn: int) -> str:
    return f"your {_ORDINALS[turn]} answer" if turn < len(_ORDINALS) else f"your answer to message {turn + 1}"


def _answers_ref(turns: Sequence[int]) -> str:
    names = [_ORDINALS[t] if t < len(_ORDINALS) else f"#{t + 1}" for t in turns]
    joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"your {joined} answers"


# Openings per relation, (professional, non-professional). Placeholders: {title} {focus} {src} {srcs} {change}.
_OPENINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "start": (
        ("{title}.", "I would like your help with the following: {title_lc}.", "Here is my request: {title_lc}."),
        ("{title_lc} pls", "hey can u help. {title_lc}", "need this: {title_lc}"),
    ),
    "follow-up": (
        (
            "Building on your last answer, tell me more about {focus}.",
            "Following on from that, please go deeper into {focus}.",
            "Thank you. Continuing from your answer, what can you tell me about {focus}?",
        ),
        ("ok and what about {focus}?", "cool. more on {focus} pls", "hmm go on, {focus}?"),
    ),
    "refinement": (
        (
            "That is not quite what I needed. Please rewrite your previous answer with one change: {change}.",
            "Please redo your last answer, but this time {change}.",
        ),
        ("nah not like that. redo it but {change}", "try again and {change}"),
    ),
    "recall": (
        (
            "Going back to {src}, I have a further question about {focus}.",
            "Returning to what you said in {src}, please connect it with {focus}.",
        ),
        ("wait back to {src}, what about {focus}", "going back to {src}. {focus}?"),
    ),
    "expansion": (
        (
            "Now let us look at one part of this in detail: {focus}.",
            "Next, please explore {focus} as one aspect of this topic.",
        ),
        ("now just the {focus} part", "ok zoom in on {focus}"),
    ),
    "summary": (
        (
            "Please bring together what you wrote in {srcs} into one overview.",
            "Summarize our discussion from {srcs} in a single coherent answer.",
        ),
        ("sum up {srcs} for me", "give me a recap of {srcs}"),
    ),
    "unrelatedness": (
        ("On a different subject: {title_lc}.", "Something unrelated now: {title_lc}."),
        ("different thing. {title_lc}", "new question, {title_lc}"),
    ),
}
_RULES = (
    ("Please {clauses}.", "For this answer, {clauses}.", "Make sure you {clauses}."),
    ("also {clauses}", "and {clauses} ok", "{clauses} pls"),
)
_NO_CHANGE = ("write it more carefully", "do it better")


class TemplateDialogueGenerator(GeneratorBase):
    """Offline StructFlow dialogues: template × topic × task × user type, rule-checkable intra-turn items.

    `templates` is a list of flows, a path (ifgym's or StructFlowBench's template format) or None
    (the packaged set); `topics` a list of Topic or a path (None = the packaged bank); `tasks` and
    `user_types` restrict what is drawn; `constraints_per_turn` bounds the rule constraints a fresh
    turn gets (a refinement keeps its source's, one of them changed); `groups` are the EvolIF rule
    groups sampled. The dialogues have no golden answers (replay them with the model's own context).
    """

    def generate(self, rng: np.random.Generator, options: Mapping[str, Any] | None = None) -> Dialogue:
        """A dialogue drawn from `rng` (options may pin template, topic_id, task, user_type)."""
        flow, topic, task, user = self.parameters(rng, options)
        return self.build(flow, topic, task, user, rng)

    def build(self, flow: Flow, topic: Topic, task: TaskType, user: str, rng: np.random.Generator) -> Dialogue:
        """Word a dialogue for fixed parameters."""
        plans = self.planner.plan(flow, topic, rng)
        words = child_rng(rng)
        voice = USER_TYPES.index(user) ^ 1  # 0 = professional tables, 1 = casual ones
        did = f"{flow.id or 'flow'}/{topic.id}/{task.name}/{user}/{int(rng.integers(10**6)):06d}"
        turns = []
        for k, plan in enumerate(plans):
            text = self._word(flow, k, plans, task, voice, words)
            items = tuple(constraint_item(c, f"{did}/{turn_name(k)}/{j + 1}") for j, c in enumerate(plan.constraints))
            items += flow.structural_items(k, id_prefix=f"{did}/")
            turns.append(DialogueTurn(text, None, items, plan=_plan_line(flow, k, plan)))
        return Dialogue(
            id=did,
            flow=flow,
            turns=tuple(turns),
            task=f"{task.name}: {task.definition}",
            topic=topic.domain,
            user_type=user,
            purpose=f"The user works through '{topic.title}' ({task.name.lower()}).",
            source="template-generator",
            meta={"template": flow.id, "topic_id": topic.id, "topic_title": topic.title, "generator": "template"},
        )

    @staticmethod
    def _word(
        flow: Flow, k: int, plans: Sequence[TurnPlan], task: TaskType, voice: int, rng: np.random.Generator
    ) -> str:
        plan = plans[k]
        relation = flow.relation_of(k) or "start"
        sources = flow.sources_of(k)
        old, new = plan.changed
        keep = [c for c in plan.constraints if c != new]
        change = ""
        if relation == "refinement":
            if new is not None and old is not None:
                # phrasings are bare infinitives ("stay below 8 sentences"), which "rather than" takes as they are
                change = f"{choice(rng, new.phrasings())} rather than {lower_first(choice(rng, old.phrasings()))}"
            elif new is not None:
                change = choice(rng, new.phrasings())
            else:
                change = _NO_CHANGE[voice]
        return word_turn(
            relation,
            voice,
            rng,
            topic=plan.topic,
            focus=plan.focus,
            sources=sources,
            change=change,
            rules=keep,
            task=task,
        )


def word_turn(
    relation: str,
    voice: int,
    rng: np.random.Generator,
    *,
    topic: Topic,
    focus: str,
    sources: Sequence[int],
    change: str = "",
    rules: Sequence[Constraint] = (),
    task: TaskType | None = None,
) -> str:
    """A StructFlow user's words for one turn: the relation's opening, the task's framing on a fresh topic, the rules.

    `relation` is a flow relation or "start"; `voice` 0 words it as a professional user, 1 as a casual
    one; `change` fills a refinement's opening ("… but this time {change}"); `rules` are stated in
    one sentence after the opening. Every choice among phrasings comes from `rng`.
    """
    title = topic.title.strip().rstrip(".?!")
    fields = {
        "title": title,
        "title_lc": lower_first(title),
        "focus": focus,
        "src": _answer_ref(sources[0]) if sources else "",
        "srcs": _answers_ref(sources) if sources else "",
        "change": change,
    }
    parts = [choice(rng, _OPENINGS[relation][voice]).format(**fields)]
    if relation in ("start", "unrelatedness") and task is not None:
        parts.append(task.framing[voice].format(domain=topic.domain))
    clauses = [choice(rng, c.phrasings()) for c in rules]
    if clauses:
        parts.append(choice(rng, _RULES[voice]).format(clauses=and_list(clauses)))
    if voice == 0:
        text = " ".join(parts)
        return text[:1].upper() + text[1:]
    # a casual user still ends each thought; the phrase tables leave that to the join
    return " ".join(p if p.endswith(("?", ".", "!")) else p + "." for p in parts[:-1]) + " " + parts[-1]


def _plan_line(flow: Flow, k: int, plan: TurnPlan) -> str:
    relation = flow.relation_of(k)
    about = f"'{plan.topic.title}'" + (f", focusing on {plan.focus}" if plan.focus else "")
    if relation is None:
        return f"The user opens the conversation about {about}."
    sources = ", ".join(turn_name(s) for s in flow.sources_of(k))
    return f"A {relation} of {sources}: the user asks about {about}."
