"""A scripted model for FlexBench's dimension pipeline, answering each step of a toy SOP."""

from __future__ import annotations

import json

from ifgym.llm import CannedClient

TOY_SOP = (
    "Ask whether the caller is in charge. If they are not in charge, ask for the owner's name. "
    "If they are in charge, ask for their email. Ask which platform they use. Always say goodbye."
)


# (unit, criterion, precondition) rows of the toy SOP; the last one is only added by the modify round
TOY_ROWS = [
    ("Ask whether the caller is in charge.", "Does the assistant ask if the caller is in charge?", None),
    (
        "If they are not in charge, ask for the owner's name.",
        "Does the assistant ask for the owner's name?",
        "If the caller is not in charge",
    ),
    (
        "If they are in charge, ask for their email.",
        "Does the assistant ask for the email?",
        "If the caller is in charge",
    ),
    ("Ask which platform they use.", "Does the assistant ask which platform is used?", None),
    ("Always say goodbye.", "Does the assistant say goodbye?", None),
]


def pipeline_answerer(units=None, verify=None):
    """Answers to the pipeline's prompts by step (segment, criteria, verify, modify, logic); None for other prompts.

    `units` replaces the segmentation answer; `verify(n)` the n-th verification answer (default: the
    first finds "Always say goodbye." missing, the second finds the set complete).
    """
    state = {"verifies": 0}
    units = units or [u for u, _, _ in TOY_ROWS[:4]]

    def answer(messages):
        first = messages[1]["content"] if len(messages) > 1 else ""
        if "Split the procedure into units" in first:
            return json.dumps({"units": units})
        if "Return the full revised list" in first:
            return json.dumps({"criteria": [{"unit": u, "criterion": c, "precondition": p} for u, c, p in TOY_ROWS]})
        if "For each unit write one evaluation question" in first:
            rows = [{"unit": i, "criterion": c, "precondition": p} for i, (_, c, p) in enumerate(TOY_ROWS[:4], 1)]
            rows[3]["precondition"] = "null"  # a model writing null as a string
            return "```json\n" + json.dumps({"criteria": rows}) + "\n```"
        if "Check the criteria against the procedure" in first:
            state["verifies"] += 1
            if verify is not None:
                return verify(state["verifies"])
            if state["verifies"] == 1:
                return json.dumps({"complete": False, "missing": ["Always say goodbye."], "invented": []})
            return json.dumps({"complete": True, "missing": [], "invented": []})
        if "Group each branch" in first:
            return json.dumps({"groups": [{"base": 1, "branches": [2, 3]}], "exclusive": [["d2", "d3"]]})
        return None

    return answer


def pipeline_client(units=None, verify=None):
    """A CannedClient playing the pipeline's model."""
    answer = pipeline_answerer(units, verify)

    def strict(messages):
        text = answer(messages)
        if text is None:
            raise AssertionError(f"not a pipeline prompt: {messages[1]['content'][:80]!r}")
        return text

    return CannedClient(strict, role="judge", model="pipeline-model")


# --- the paper's pipeline (appendix B) -----------------------------------------------------------

PAPER_SOP = (
    "Ask whether the merchant is in charge of the store. If they are not in charge, ask for the owner's name. "
    "If the merchant is in charge, ask for their email and phone number. Ask which platform the shop uses. "
    'Close by saying "Thanks for choosing PayCo, goodbye." Never quote fees.'
)
ENTITIES = [{"name": "the caller", "mentions": ["the merchant"]}, {"name": "the store", "mentions": ["the shop"]}]
SCRIPT = {"intent": "thank the caller and say goodbye", "wording": "Thanks for choosing PayCo, goodbye."}
# (verbatim text, stand-alone rewrite) of each segment; the segmentation leaves out the last sentence
SEGMENTS = [
    ("Ask whether the merchant is in charge of the store.", "Ask whether the merchant is in charge of the store."),
    (
        "If they are not in charge, ask for the owner's name.",
        "If the merchant is not in charge of the store, ask for the store owner's name.",
    ),
    (
        "If the merchant is in charge, ask for their email and phone number.",
        "If the merchant is in charge of the store, ask for the merchant's email and phone number.",
    ),
    ("Ask which platform the shop uses.", "Ask which platform the shop uses."),
    ('Close by saying "Thanks for choosing PayCo, goodbye."', "Close the call by thanking the merchant."),
]
PAPER_ROWS = [
    ("Does the assistant ask if the caller is in charge of the store?", None),
    ("Does the assistant ask for the store owner's name?", "If the caller is not in charge"),
    ("Does the assistant ask for the caller's email and phone number?", "If the caller is in charge"),
    ("Does the assistant ask which platform the store uses?", None),
    ("Does the assistant thank the caller and say goodbye?", None),
]
INVENTED = "Does the assistant ask for the store owner's name and date of birth?"
NEVER = ("Never quote fees.", "Does the assistant avoid quoting fees?", "always")


def paper_stage(messages):
    """Which stage of the paper's pipeline a prompt belongs to, by its wording."""
    first = messages[1]["content"] if len(messages) > 1 else ""
    for phrase, stage in (
        ("Cut the procedure into segments", "segmentation"),
        ("Segments (rewritten to stand alone)", "criteria"),
        ("Check the criteria against the procedure", "verification"),
        ("Return the full revised list", "modification"),
        ("Refine them step by step", "gradual"),
        ("Group each branch", "dependency"),
    ):
        if phrase in first:
            return stage
    raise AssertionError(f"not a paper pipeline prompt: {first[:80]!r}")


def paper_answerer(overrides=None):
    """Answers to the paper pipeline's prompts by stage, as a model with first drafts to correct would give.

    The criteria invent a requirement (criterion 2) and the segmentation misses "Never quote fees.": the
    first verification finds both, the first modification (coverage first) adds the missing rule only,
    the second verification still finds criterion 2 invented, the second modification fixes it, the
    third verification finds the set complete. The gradual stage splits "email and phone number" in two;
    the dependency stage groups the two branches under criterion 1. `overrides` maps a stage to a
    function (messages, n-th call of that stage) -> text that answers it instead.
    """
    overrides = overrides or {}
    calls: dict[str, int] = {}

    def rows_json(rows):
        return json.dumps({"criteria": [{"unit": u, "criterion": c, "precondition": p} for u, c, p in rows]})

    def answer(messages):
        stage = paper_stage(messages)
        calls[stage] = calls.get(stage, 0) + 1
        if stage in overrides:
            return overrides[stage](messages, calls[stage])
        if stage == "segmentation":
            segments = [
                {"text": t, "standalone": s, "script": SCRIPT if t.startswith("Close") else None} for t, s in SEGMENTS
            ]
            return json.dumps({"entities": ENTITIES, "segments": segments})
        if stage == "criteria":
            rows = [{"unit": i, "criterion": c, "precondition": p} for i, (c, p) in enumerate(PAPER_ROWS, 1)]
            rows[1]["criterion"] = INVENTED
            return json.dumps({"criteria": rows})
        if stage == "verification":
            listed = messages[1]["content"]
            missing = [] if "avoid quoting fees" in listed else ["Never quote fees."]
            invented = [2] if "date of birth" in listed else []
            return json.dumps({"complete": not missing, "missing": missing, "invented": invented})
        if stage == "modification":
            units = [t for t, _ in SEGMENTS]
            rows = [(u, c, p) for u, (c, p) in zip(units, PAPER_ROWS, strict=True)]
            if calls[stage] == 1:
                rows[1] = (units[1], INVENTED, PAPER_ROWS[1][1])
            return rows_json([*rows, NEVER])
        if stage == "gradual":
            n = next(i for i, line in enumerate(messages[1]["content"].splitlines(), 0) if "email and phone" in line)
            into = ["Does the assistant ask for the caller's email?", "Does the assistant ask for the caller's phone?"]
            return json.dumps({"splits": [{"criterion": n, "into": into}]})
        return json.dumps({"groups": [{"base": 1, "branches": [2, 3, 4]}], "exclusive": [[2, 3], [2, 4]]})

    return answer
