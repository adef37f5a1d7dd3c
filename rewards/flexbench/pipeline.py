"""Building a dimension set from an SOP with a model: ifgym's steps, or the paper's appendix B (`pipeline="paper"`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ifgym.errors import ConfigError, DataFormatError, IncompleteDimensionsError, UnknownNameError
from ifgym.model_answers import item_number, json_object
from ifgym.rewards.flexbench.dimensions import ALWAYS, Dimension, DimensionSet, Message, _check_logic, fingerprint

# ---------------------------------------------------------------------------------------------
# The dimension pipeline (needs a model)
# ---------------------------------------------------------------------------------------------

_PIPELINE_SYSTEM = (
    "You turn a procedure that an AI agent must follow on calls into evaluation criteria. You are exact: "
    "you copy text verbatim when asked, you never add requirements the procedure does not state, and you "
    "answer with one JSON object only."
)


def _norm(text: str) -> str:
    text = text.replace("\u201c", '"').replace("\u201d", '"').replace("\u2019", "'").replace("\u2018", "'")
    return " ".join(text.lower().split())


def _locate(units: Sequence[str], sop_text: str) -> tuple[list[tuple[int, int, str]], list[str]]:
    """Spans of the units in the SOP (in SOP order) and what is wrong with them."""
    haystack = _norm(sop_text)
    spans, problems = [], []
    for i, unit in enumerate(units, start=1):
        needle = _norm(unit)
        at = haystack.find(needle) if needle else -1
        if at < 0:
            problems.append(f"unit {i} is not copied word for word from the procedure: {unit[:80]!r}")
        else:
            spans.append((at, at + len(needle), unit.strip()))
    spans.sort()
    for (_, e1, u1), (s2, _, u2) in zip(spans, spans[1:], strict=False):
        if s2 < e1:
            problems.append(f"units overlap: {u1[:50]!r} and {u2[:50]!r}; make them disjoint")
    return spans, problems


_CriteriaRow = tuple[str, str, str | None]  # (unit text, criterion, precondition)


def _pre(value: Any) -> str | None:
    """A model's precondition: None (null, empty or "null"), "always", or the stripped sentence."""
    if not isinstance(value, str) or not value.strip() or value.strip().lower() == "null":
        return None
    return ALWAYS if value.strip().lower() == ALWAYS else value.strip()


def _criteria_problems(rows: Sequence[_CriteriaRow]) -> list[str]:
    problems = []
    for i, (_, criterion, pre) in enumerate(rows, start=1):
        if "assistant" not in criterion.lower() and "agent" not in criterion.lower():
            problems.append(f"criterion {i} must ask about the assistant's output ('Does the assistant …?')")
        if not criterion.rstrip().endswith("?"):
            problems.append(f"criterion {i} must be one question ending with '?'")
        if pre is not None and pre != ALWAYS and not re.match(r"^\s*(if|when)\b", pre, re.IGNORECASE):
            problems.append(f"precondition {i} must start with 'If' or 'When', or be \"always\" or null")
    return problems


def _ask(
    client: Any,
    messages: list[Message],
    parse: Callable[[str], tuple[Any, list[str]]],
    what: str,
    max_retries: int,
    log: list[dict[str, Any]],
    temperatures: Sequence[float] | None = None,
) -> Any:
    """One step's answer, re-asked (naming the problems) up to `max_retries` times, then DataFormatError.

    `temperatures`: the temperature of each try (the paper's pipeline raises it on every re-ask);
    None sends the client's own.
    """
    for attempt in range(1, max_retries + 2):
        overrides = {} if temperatures is None else {"temperature": temperatures[attempt - 1]}
        text = client.chat(messages, **overrides).text or ""
        value, problems = parse(text)
        log.append({"step": what, "attempt": attempt, **overrides, "problems": problems})
        if not problems:
            return value
        messages = [
            *messages,
            {"role": "assistant", "content": text},
            {
                "role": "user",
                "content": "That answer could not be used: "
                + "; ".join(problems)
                + ". Reply again with only the corrected JSON object.",
            },
        ]
    at = f" (temperature {', '.join(f'{t:g}' for t in temperatures)})" if temperatures is not None else ""
    raise DataFormatError(
        f"the model could not produce {what} after {max_retries + 1} tries{at}: {'; '.join(problems)}"
    )


def segment_messages(sop_text: str, opening_line: str | None) -> list[Message]:
    """Prompt for step 1: non-overlapping observable units copied verbatim."""
    skip = f' Leave out the opening line ("{opening_line}"): a script says it, not the agent.' if opening_line else ""
    body = (
        f"Procedure:\n<<<\n{sop_text}\n>>>\n\n"
        "Split the procedure into units. A unit is one action or rule of the agent that can be observed in "
        "the agent's messages on a call (what it must say, ask, do or avoid), including conditional ones "
        '("if the caller …, do …"). Copy each unit word for word from the procedure (a sentence or a clause), '
        "with no overlap between units, in the order they appear. Skip pure background that asks nothing of "
        f"the agent.{skip}\n"
        'Answer: {"units": ["unit text", ...]}'
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def criteria_messages(sop_text: str, units: Sequence[str]) -> list[Message]:
    """Prompt for step 2: one evaluation question per unit, with explicit preconditions."""
    numbered = "\n".join(f"{i}. {u}" for i, u in enumerate(units, start=1))
    body = (
        f"Procedure:\n<<<\n{sop_text}\n>>>\n\nUnits:\n{numbered}\n\n"
        "For each unit write one evaluation question about the assistant's output that a reader of the call "
        "transcript can answer yes or no, starting 'Does the assistant'. Ask only what the unit states: do not "
        "add requirements. If the unit applies only under a condition, write that condition as 'precondition', "
        "a sentence starting with 'If' or 'When' about what happens in the call. If the unit is a rule for the "
        "whole call that is kept or broken rather than done (something the agent must never do, a limit on "
        "every message, or an order such as 'not before …'), write \"always\". Otherwise null.\n"
        'Answer: {"criteria": [{"unit": 1, "criterion": "Does the assistant ...?", "precondition": null}, ...]}'
        " with one entry per unit."
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def verify_messages(sop_text: str, rows: Sequence[_CriteriaRow]) -> list[Message]:
    """Prompt for step 3: is coverage complete, what is missing, what is invented."""
    listed = "\n".join(
        f"{i}. {c}" + (f" [precondition: {p}]" if p else "") for i, (_, c, p) in enumerate(rows, start=1)
    )
    body = (
        f"Procedure:\n<<<\n{sop_text}\n>>>\n\nCriteria:\n{listed}\n\n"
        "Check the criteria against the procedure. Is every requirement of the agent covered by a criterion? "
        "Quote, word for word, each requirement that no criterion checks. List the numbers of criteria that "
        "ask for something the procedure does not state.\n"
        'Answer: {"complete": true or false, "missing": ["quoted procedure text", ...], "invented": [numbers]}'
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def modify_messages(sop_text: str, rows: Sequence[_CriteriaRow], findings: Mapping[str, Any]) -> list[Message]:
    """Prompt for step 4: revise the criteria given the verifier's findings."""
    listed = json.dumps(
        [{"unit": u, "criterion": c, "precondition": p} for u, c, p in rows], ensure_ascii=False, indent=1
    )
    body = (
        f"Procedure:\n<<<\n{sop_text}\n>>>\n\nCurrent criteria:\n{listed}\n\n"
        f"A reviewer found: missing requirements {json.dumps(findings.get('missing', []), ensure_ascii=False)}; "
        f"criteria that invent requirements (numbers) {json.dumps(findings.get('invented', []))}.\n"
        "Return the full revised list: add a unit (copied word for word, not overlapping the others) and a "
        "criterion for each missing requirement, and fix or drop invented ones. Same rules as before: one "
        "question per unit starting 'Does the assistant', precondition 'If …'/'When …', \"always\" or null.\n"
        'Answer: {"criteria": [{"unit": "unit text", "criterion": "...", "precondition": null}, ...]}'
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def logic_messages(rows: Sequence[_CriteriaRow]) -> list[Message]:
    """Prompt for step 5: precondition groups and mutually exclusive branch sets."""
    listed = "\n".join(f"{i}. {c} [precondition: {p or 'none'}]" for i, (_, c, p) in enumerate(rows, start=1))
    body = (
        f"Criteria:\n{listed}\n\n"
        "Criteria without a precondition are base actions; criteria with an If/When precondition are branches; "
        "criteria whose precondition is 'always' are rules for the whole call and belong to no group and no set. "
        "Group each branch "
        "under the base action whose outcome decides its precondition (for example, asking whether the caller is "
        "in charge decides 'if in charge' and 'if not in charge'); a branch no base action decides stays out of "
        "every group. Then list the sets of branches that can never both apply in one call.\n"
        'Answer: {"groups": [{"base": 1, "branches": [2, 3]}], "exclusive": [[2, 3]]} using criterion numbers.'
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def _parse_units(sop_text: str, opening_line: str | None) -> Callable[[str], tuple[Any, list[str]]]:
    def parse(text: str) -> tuple[Any, list[str]]:
        data = json_object(text)
        raw = data.get("units") if data is not None else None
        if not isinstance(raw, list) or not raw:
            return None, ['no JSON object with a non-empty "units" list']
        units = [u.get("text") if isinstance(u, Mapping) else u for u in raw]
        if not all(isinstance(u, str) and u.strip() for u in units):
            return None, ["every unit must be a non-empty string"]
        spans, problems = _locate(units, sop_text)
        if opening_line and any(_norm(opening_line) in _norm(u) or _norm(u) in _norm(opening_line) for u in units):
            problems.append("a unit repeats the opening line; leave it out")
        return [u for _, _, u in spans], problems

    return parse


def _parse_criteria(units: Sequence[str]) -> Callable[[str], tuple[Any, list[str]]]:
    def parse(text: str) -> tuple[Any, list[str]]:
        data = json_object(text)
        raw = data.get("criteria") if data is not None else None
        if not isinstance(raw, list):
            return None, ['no JSON object with a "criteria" list']
        found: dict[int, tuple[str, str | None]] = {}
        problems = []
        for entry in raw:
            if not isinstance(entry, Mapping):
                problems.append("every criterion must be an object")
                continue
            number = item_number(entry.get("unit"))
            criterion, pre = entry.get("criterion"), entry.get("precondition")
            if number is None or not 1 <= number <= len(units):
                problems.append(f"'unit' must be a number from 1 to {len(units)}, got {entry.get('unit')!r}")
            elif number in found:
                problems.append(f"unit {number} has more than one criterion; give exactly one")
            elif not isinstance(criterion, str) or not criterion.strip():
                problems.append(f"unit {number} has no criterion text")
            else:
                pre = _pre(pre)
                found[number] = (criterion.strip(), pre)
        missing = [i for i in range(1, len(units) + 1) if i not in found]
        if missing:
            problems.append(f"no criterion for unit(s) {', '.join(map(str, missing))}")
        rows = [(units[i - 1], *found[i]) for i in sorted(found)]
        return rows, problems + _criteria_problems(rows)

    return parse


def _parse_verdict(text: str) -> tuple[Any, list[str]]:
    data = json_object(text)
    if data is None or not isinstance(data.get("complete"), bool):
        return None, ['no JSON object with "complete": true or false']
    missing = data.get("missing", [])
    invented = data.get("invented", [])
    if not isinstance(missing, list) or not isinstance(invented, list):
        return None, ['"missing" and "invented" must be lists']
    findings = {
        "complete": data["complete"],
        "missing": [str(m) for m in missing if str(m).strip()],
        "invented": [n for n in (item_number(i) for i in invented) if n is not None],
    }
    return findings, []


def _parse_revision(sop_text: str) -> Callable[[str], tuple[Any, list[str]]]:
    def parse(text: str) -> tuple[Any, list[str]]:
        data = json_object(text)
        raw = data.get("criteria") if data is not None else None
        if not isinstance(raw, list) or not raw:
            return None, ['no JSON object with a non-empty "criteria" list']
        rows: list[_CriteriaRow] = []
        for i, entry in enumerate(raw, start=1):
            ok = isinstance(entry, Mapping) and isinstance(entry.get("unit"), str)
            ok = ok and isinstance(entry.get("criterion"), str) and entry["criterion"].strip()
            if not ok:
                return None, [f"entry {i} needs 'unit' (text) and 'criterion' (text)"]
            pre = entry.get("precondition")
            pre = _pre(pre)
            rows.append((entry["unit"].strip(), entry["criterion"].strip(), pre))
        spans, problems = _locate([r[0] for r in rows], sop_text)
        order = {u: k for k, (_, _, u) in enumerate(spans)}
        rows.sort(key=lambda r: order.get(r[0], len(order)))
        return rows, problems + _criteria_problems(rows)

    return parse


def _parse_logic(rows: Sequence[_CriteriaRow]) -> Callable[[str], tuple[Any, list[str]]]:
    dims = tuple(Dimension(f"d{i}", c, p, u) for i, (u, c, p) in enumerate(rows, start=1))

    def ref(value: Any) -> str | None:
        number = item_number(value)
        if number is None and isinstance(value, str) and value.startswith("d"):
            number = item_number(value[1:])
        return f"d{number}" if number is not None else None

    def parse(text: str) -> tuple[Any, list[str]]:
        data = json_object(text)
        if (
            data is None
            or not isinstance(data.get("groups", []), list)
            or not isinstance(data.get("exclusive", []), list)
        ):
            return None, ['no JSON object with "groups" and "exclusive" lists']
        try:
            groups = []
            for g in data.get("groups", []):
                if not isinstance(g, Mapping) or not isinstance(g.get("branches"), list):
                    raise DataFormatError('every group is {"base": number, "branches": [numbers]}')
                branches = tuple(ref(b) for b in g["branches"])
                if not branches:
                    continue
                groups.append((ref(g.get("base")), branches))
            exclusive = tuple(tuple(ref(m) for m in s) for s in data.get("exclusive", []) if isinstance(s, list))
            _check_logic(dims, groups, exclusive, "logic")
        except DataFormatError as exc:
            return None, [str(exc)]
        return (tuple(groups), exclusive), []

    return parse


# ---------------------------------------------------------------------------------------------
# The paper's pipeline (appendix B): Segmentation → Criteria → Verification → Modification* →
# Gradual → Dependency*, each stage's output kept; prompts in ifgym's own words
# ---------------------------------------------------------------------------------------------

# The paper decodes at a low temperature, not greedily; each re-ask of a malformed answer is sent
# hotter (a model stuck on one wrong answer at a low temperature tends to repeat it).
PAPER_TEMPERATURE = 0.2
PAPER_TEMPERATURE_STEP = 0.2
_MAX_TEMPERATURE = 1.0


def paper_temperatures(max_retries: int) -> tuple[float, ...]:
    """The temperature of each try of one paper-pipeline step: 0.2, then 0.2 hotter per re-ask (at most 1.0)."""
    return tuple(
        round(min(PAPER_TEMPERATURE + PAPER_TEMPERATURE_STEP * k, _MAX_TEMPERATURE), 3) for k in range(max_retries + 1)
    )


def paper_segment_messages(sop_text: str, opening_line: str | None) -> list[Message]:
    """Segmentation: verbatim units, each rewritten to stand alone, entities named one way, scripts split in two."""
    skip = f' Leave out the opening line ("{opening_line}"): a script says it, not the agent.' if opening_line else ""
    body = (
        f"Procedure:\n<<<\n{sop_text}\n>>>\n\n"
        "Cut the procedure into segments, each one thing the agent must do, ask, say or avoid on a call "
        "(conditional ones included), copied word for word, without overlap, in the procedure's order. Skip "
        f"background that asks nothing of the agent.{skip}\n"
        "For each segment also write `standalone`: the segment rewritten so it can be read alone, with every "
        "pronoun and every reference to an earlier sentence replaced by what it points to. List the people and "
        "things the procedure names in more than one way as `entities`, each with one canonical name and the "
        "other names used for it; use the canonical names in `standalone`. When a segment gives a recommended "
        "wording for the agent to say, set `script` to its intent in a few words and the wording copied word "
        "for word; otherwise null.\n"
        'Answer: {"entities": [{"name": "canonical name", "mentions": ["other name", ...]}], "segments": '
        '[{"text": "copied text", "standalone": "rewritten text", "script": null or {"intent": "...", '
        '"wording": "copied text"}}, ...]}'
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def canonicalise(text: str, entities: Sequence[Mapping[str, Any]]) -> str:
    """`text` with every listed mention of an entity replaced by its canonical name (whole words, any case)."""
    pairs = [(str(m), str(e["name"])) for e in entities for m in e.get("mentions", []) if str(m).strip()]
    for mention, name in sorted(pairs, key=lambda p: -len(p[0])):  # longest first: "the store owner" before "owner"
        text = re.sub(rf"(?<!\w){re.escape(mention)}(?!\w)", name, text, flags=re.IGNORECASE)
    return text


def _parse_segments(sop_text: str, opening_line: str | None) -> Callable[[str], tuple[Any, list[str]]]:
    def parse(text: str) -> tuple[Any, list[str]]:
        data = json_object(text)
        raw, entities = (data.get("segments"), data.get("entities", [])) if data is not None else (None, None)
        if not isinstance(raw, list) or not raw:
            return None, ['no JSON object with a non-empty "segments" list']
        if not isinstance(entities, list) or not all(
            isinstance(e, Mapping)
            and isinstance(e.get("name"), str)
            and e["name"].strip()
            and isinstance(e.get("mentions", []), list)
            for e in entities
        ):
            return None, ['"entities" must be a list of {"name": text, "mentions": [text, ...]}']
        problems: list[str] = []
        segments = []
        for i, seg in enumerate(raw, start=1):
            if not isinstance(seg, Mapping) or not all(
                isinstance(seg.get(k), str) and seg[k].strip() for k in ("text", "standalone")
            ):
                return None, [f"segment {i} needs 'text' and 'standalone' (non-empty strings)"]
            script = seg.get("script")
            if script is not None:
                if not (
                    isinstance(script, Mapping)
                    and all(isinstance(script.get(k), str) and script[k].strip() for k in ("intent", "wording"))
                ):
                    return None, [f'segment {i}: \'script\' is null or {{"intent": text, "wording": text}}']
                if _norm(script["wording"]) not in _norm(seg["text"]):
                    problems.append(f"segment {i}: the script's wording is not copied from the segment's text")
                script = {"intent": script["intent"].strip(), "wording": script["wording"].strip()}
            segments.append({"text": seg["text"].strip(), "standalone": seg["standalone"].strip(), "script": script})
        spans, located = _locate([s["text"] for s in segments], sop_text)
        problems += located
        if opening_line and any(_norm(opening_line) in _norm(s["text"]) for s in segments):
            problems.append("a segment repeats the opening line; leave it out")
        order = {u: k for k, (_, _, u) in enumerate(spans)}
        segments.sort(key=lambda s: order.get(s["text"], len(order)))
        clean = [
            {"name": e["name"].strip(), "mentions": [str(m).strip() for m in e.get("mentions", [])]} for e in entities
        ]
        for seg in segments:
            seg["canonical"] = canonicalise(seg["standalone"], clean)
        return {"entities": clean, "segments": segments}, problems

    return parse


def paper_criteria_messages(sop_text: str, segments: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Criteria: one question per stand-alone segment; a script's question checks its intent, the wording an example."""
    lines = []
    for i, seg in enumerate(segments, start=1):
        line = f"{i}. {seg['canonical']}"
        if seg.get("script"):
            line += f' [recommended script: intent: {seg["script"]["intent"]}; wording: "{seg["script"]["wording"]}"]'
        lines.append(line)
    body = (
        f"Procedure:\n<<<\n{sop_text}\n>>>\n\nSegments (rewritten to stand alone):\n" + "\n".join(lines) + "\n\n"
        "For each segment write one evaluation question about the assistant's output that a reader of the call "
        "transcript can answer yes or no, starting 'Does the assistant'. Ask only what the segment states. For a "
        "recommended script, ask whether the assistant conveys its intent (the wording is an example, not a "
        "requirement to repeat it). If the segment applies only under a condition, write that condition as "
        "'precondition', a sentence starting with 'If' or 'When'; if it is a rule for the whole call that is kept "
        'or broken rather than done (never …, a limit on every message, not before …), write "always"; '
        "otherwise null.\n"
        'Answer: {"criteria": [{"unit": 1, "criterion": "Does the assistant ...?", "precondition": null}, ...]}'
        " with one entry per segment."
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def gradual_messages(rows: Sequence[_CriteriaRow]) -> list[Message]:
    """Gradual: split every criterion that checks more than one thing into single checks."""
    listed = "\n".join(
        f"{i}. {c}" + (f" [precondition: {p}]" if p else "") for i, (_, c, p) in enumerate(rows, start=1)
    )
    body = (
        f"Criteria (complete and verified):\n{listed}\n\n"
        "Refine them step by step, one criterion at a time: a criterion that checks two or more separate things "
        "(joined by 'and', a list of items to ask for, two actions) is split into questions that each check one "
        "thing, keeping its precondition; a criterion that checks one thing stays. Add nothing new.\n"
        'Answer: {"splits": [{"criterion": number, "into": ["Does the assistant ...?", ...]}, ...]} '
        "(an empty list when every criterion checks one thing)."
    )
    return [{"role": "system", "content": _PIPELINE_SYSTEM}, {"role": "user", "content": body}]


def _parse_gradual(rows: Sequence[_CriteriaRow]) -> Callable[[str], tuple[Any, list[str]]]:
    def parse(text: str) -> tuple[Any, list[str]]:
        data = json_object(text)
        raw = data.get("splits") if data is not None else None
        if not isinstance(raw, list):
            return None, ['no JSON object with a "splits" list (empty when nothing is split)']
        splits: dict[int, list[str]] = {}
        problems: list[str] = []
        for entry in raw:
            number = item_number(entry.get("criterion")) if isinstance(entry, Mapping) else None
            into = entry.get("into") if isinstance(entry, Mapping) else None
            if number is None or not 1 <= number <= len(rows):
                problems.append(f"'criterion' must be a number from 1 to {len(rows)}")
            elif number in splits:
                problems.append(f"criterion {number} is split twice; give one split")
            elif not isinstance(into, list) or len(into) < 2 or not all(isinstance(q, str) and q.strip() for q in into):
                problems.append(f"criterion {number}: 'into' must list two or more questions")
            else:
                splits[number] = [q.strip() for q in into]
        out: list[_CriteriaRow] = []
        for i, (unit, criterion, pre) in enumerate(rows, start=1):
            out.extend((unit, q, pre) for q in splits.get(i, [criterion]))
        return (out, splits), problems + _criteria_problems(out)

    return parse


def _diff(before: Sequence[_CriteriaRow], after: Sequence[_CriteriaRow]) -> dict[str, Any]:
    """What a stage changed in the criteria: the rows it added and removed (as unit, criterion, precondition)."""

    def as_json(rows: Sequence[_CriteriaRow]) -> list[dict[str, Any]]:
        return [{"unit": u, "criterion": c, "precondition": p} for u, c, p in rows]

    return {
        "added": as_json([r for r in after if r not in before]),
        "removed": as_json([r for r in before if r not in after]),
    }


def _build_paper(
    sop_text: str, client: Any, sop_name: str, opening_line: str | None, max_rounds: int, max_retries: int
) -> DimensionSet:
    temps = paper_temperatures(max_retries)
    log: list[dict[str, Any]] = []
    stages: list[dict[str, Any]] = []

    def ask(messages: list[Message], parse: Callable[[str], tuple[Any, list[str]]], what: str) -> Any:
        return _ask(client, messages, parse, what, max_retries, log, temps)

    seg = ask(paper_segment_messages(sop_text, opening_line), _parse_segments(sop_text, opening_line), "segments")
    stages.append({"stage": "segmentation", **seg})
    segments = seg["segments"]
    rows = ask(paper_criteria_messages(sop_text, segments), _parse_criteria([s["text"] for s in segments]), "criteria")
    stages.append({"stage": "criteria", **_diff([], rows)})
    # coverage first: the modification rounds add what the verifier found missing, and only once nothing is
    # missing do they fix criteria that invent requirements; only a set verified complete goes on
    rounds = 0
    while True:
        findings = ask(verify_messages(sop_text, rows), _parse_verdict, "a verification")
        stages.append({"stage": "verification", "round": rounds, **findings})
        if findings["complete"] and not findings["missing"] and not findings["invented"]:
            break
        if rounds == max_rounds:
            raise IncompleteDimensionsError(
                f"the verifier did not find the criteria of {sop_name!r} complete after {max_rounds} modification "
                f"round(s) (last findings: missing {findings['missing']}, invented {findings['invented']}); nothing "
                "was written. Use a stronger pipeline model, or allow more rounds (max_rounds)"
            )
        rounds += 1
        coverage = bool(findings["missing"]) or not findings["complete"]
        focus = (
            {"missing": findings["missing"], "invented": []}
            if coverage
            else {"missing": [], "invented": findings["invented"]}
        )
        revised = ask(modify_messages(sop_text, rows, focus), _parse_revision(sop_text), "revised criteria")
        stages.append(
            {
                "stage": "modification",
                "round": rounds,
                "addressed": "coverage" if coverage else "invented",
                **_diff(rows, revised),
            }
        )
        rows = revised
    gradual, splits = ask(gradual_messages(rows), _parse_gradual(rows), "the gradual refinement")
    stages.append({"stage": "gradual", "split": {str(k): v for k, v in splits.items()}, **_diff(rows, gradual)})
    rows = gradual
    if any(p is not None and p != ALWAYS for _, _, p in rows):
        groups, exclusive = ask(logic_messages(rows), _parse_logic(rows), "the dependencies")
        stages.append(
            {
                "stage": "dependency",
                "groups": [{"base": b, "branches": list(br)} for b, br in groups],
                "exclusive": [list(e) for e in exclusive],
            }
        )
    else:  # as needed: with no branch there is nothing to depend on
        groups, exclusive = (), ()
        stages.append({"stage": "dependency", "skipped": "no branch (no criterion with an If/When precondition)"})
    dims = tuple(Dimension(f"d{i}", c, p, u) for i, (u, c, p) in enumerate(rows, start=1))
    meta = {
        "pipeline": {
            "method": "paper",
            "model": getattr(client, "model", ""),
            "temperatures": list(temps),
            "modification_rounds": rounds,
            "verification": findings,
            "stages": stages,
            "steps": log,
        }
    }
    return DimensionSet(sop_name, dims, tuple(groups), tuple(exclusive), fingerprint(sop_text), False, meta)


PIPELINES = ("ifgym", "paper")  # how `build_dimensions` runs: ifgym's steps, or the paper's appendix B


def build_dimensions(
    sop_text: str,
    client: Any,
    *,
    sop_name: str = "sop",
    opening_line: str | None = None,
    max_rounds: int = 2,
    max_retries: int = 2,
    pipeline: str = "ifgym",
) -> DimensionSet:
    """Run the dimension pipeline on an SOP with a model; the result is marked `reviewed: false`.

    segment → criteria → verify → (modify → verify) up to `max_rounds` times → logic. Each model
    answer that breaks the format (text not copied verbatim, overlapping units, a criterion that is
    not a question about the assistant, a precondition not starting with If/When, inconsistent
    logic) is re-asked up to `max_retries` times, then DataFormatError. The verifier's last findings
    and every step's problems are kept in `meta["pipeline"]` for the reviewer.

    `pipeline="paper"` runs the paper's appendix B instead: Segmentation (verbatim segments, each
    rewritten to stand alone with entities under one canonical name, recommended scripts split
    into intent + wording) → Criteria → Verification → Modification (as needed, coverage first:
    missing requirements are added before invented ones are fixed) → Gradual (compound criteria
    split into single checks) → Dependency (groups and exclusive sets, only when there are
    branches). Every call is sent at temperature 0.2, each re-ask 0.2 hotter (`paper_temperatures`).
    Only a set the verifier found complete goes on: after `max_rounds` modification rounds without
    it, `IncompleteDimensionsError` and nothing is returned. Each stage's output (and what it added
    or removed) is kept in `meta["pipeline"]["stages"]`.
    """
    UnknownNameError.check(("pipeline", pipeline, PIPELINES))
    for name, value in (("max_rounds", max_rounds), ("max_retries", max_retries)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"build_dimensions {name} must be an int >= 0, got {value!r}")
    if not isinstance(sop_text, str) or not sop_text.strip():
        raise DataFormatError("build_dimensions needs the SOP's instruction text; got an empty string")
    if pipeline == "paper":
        return _build_paper(sop_text, client, sop_name, opening_line, max_rounds, max_retries)
    log: list[dict[str, Any]] = []
    units = _ask(
        client,
        segment_messages(sop_text, opening_line),
        _parse_units(sop_text, opening_line),
        "units",
        max_retries,
        log,
    )
    rows = _ask(client, criteria_messages(sop_text, units), _parse_criteria(units), "criteria", max_retries, log)
    findings = _ask(client, verify_messages(sop_text, rows), _parse_verdict, "a verification", max_retries, log)
    rounds = 0
    while (not findings["complete"] or findings["missing"] or findings["invented"]) and rounds < max_rounds:
        rounds += 1
        rows = _ask(
            client,
            modify_messages(sop_text, rows, findings),
            _parse_revision(sop_text),
            "revised criteria",
            max_retries,
            log,
        )
        findings = _ask(client, verify_messages(sop_text, rows), _parse_verdict, "a verification", max_retries, log)
    groups, exclusive = _ask(client, logic_messages(rows), _parse_logic(rows), "the logic", max_retries, log)
    dims = tuple(Dimension(f"d{i}", c, p, u) for i, (u, c, p) in enumerate(rows, start=1))
    meta = {
        "pipeline": {
            "model": getattr(client, "model", ""),
            "modification_rounds": rounds,
            "verification": findings,
            "steps": log,
        }
    }
    return DimensionSet(sop_name, dims, groups, exclusive, fingerprint(sop_text), False, meta)
