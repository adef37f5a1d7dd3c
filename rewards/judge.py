"""What every LLM judge of ifgym shares: the `Judge` base class, the re-ask loop, reading a judge's quotes.

A judge asks a model about one reply (or one call's transcript) and returns one `Verdict` per item,
`yes`, `no` or `unknown`. The three judges (`ifgym.rewards.evolif.judge.EvolIFJudge` for EvolIF's
judged groups, `ifgym.rewards.structflow.judge.ChecklistJudge` for StructFlow's checklists,
`ifgym.rewards.flexbench.LLMDimensionJudge` for FlexBench's dimensions) each supply their prompts and
how an answer becomes a label; this base supplies the rest, the same for all of them:

- arguments checked at construction: a chat client (`chat` and `achat`), one of the judge's
  `modes`, `max_retries` an int >= 0;
- `stats`, counted under a lock (judges are shared by concurrent episodes): `calls`, `retries`,
  `unknown` (verdicts left unknown because the judge's answers could not be used), the judge's own
  counters, `prompt_tokens` and `completion_tokens`;
- `source`, the verdicts' tag `judge:<model>`; `prompt_version`, a hash of the mode's fixed prompt
  text (the judge audit's cache key);
- `_asking`: a judge's dialogue (one `ifgym.llm.Conversation`) as `Steps` whose calls count their
  tokens; a judge writes `judge` once with `ifgym.llm.conversation.twin` and gets the blocking
  `judge` and the awaited `ajudge`;
- `defang`: copies of the prompt's own `tags` in text put between them (`ifgym.model_answers.defang`);
- `ask`: the bounded re-ask loop (`ask_until_complete`), and `unanswered` / `unplaced_note`, the
  reasons of items the judge never answered (answers are placed on items by `ifgym.model_answers.place`).

Every judge passes the same contract test (tests/rewards/test_judge_contract.py).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from ifgym.core import Verdict
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import ChatClient, Conversation
from ifgym.llm.conversation import Steps, asking, chat_call
from ifgym.model_answers import defang

__all__ = ["Judge", "ask_until_complete", "quote_found", "unanswered", "unplaced_note"]

Message = dict[str, str]
History = Sequence[Mapping[str, str]] | None  # the chat messages before the reply


class Judge:
    """Base class of ifgym's LLM judges (see the module docstring for what it shares).

    A subclass sets `modes` and `default_mode`, `tags` (its prompt's own tags), `counters` (its own
    stats keys) and implements `fixed_prompt()`; its `judge` (written once with `twin`, which also
    gives `ajudge`) builds a Conversation and yields from `_asking(conversation)`.
    """

    modes: ClassVar[tuple[str, ...]]
    default_mode: ClassVar[str]
    tags: ClassVar[tuple[str, ...]]
    counters: ClassVar[tuple[str, ...]] = ()

    def __init__(self, client: ChatClient, *, mode: str | None = None, max_retries: int = 2):
        name = type(self).__name__
        mode = self.default_mode if mode is None else mode
        if mode not in self.modes:
            raise UnknownNameError(f"{name} mode", mode, self.modes)
        if not (hasattr(client, "chat") and hasattr(client, "achat")):
            raise ConfigError(f"{name} needs a chat client (with chat and achat), got {client!r:.200}")
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise ConfigError(f"{name} max_retries must be an int >= 0, got {max_retries!r}")
        self.client = client
        self.mode = mode
        self.max_retries = max_retries
        self.stats: dict[str, int] = dict.fromkeys(
            ("calls", "retries", "unknown", *self.counters, "prompt_tokens", "completion_tokens"), 0
        )
        self._lock = threading.Lock()

    # --- identity ---------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """Verdict source tag: `judge:<model>`."""
        return f"judge:{getattr(self.client, 'model', '') or 'unknown'}"

    def fixed_prompt(self) -> str:
        """The fixed text of this mode's prompt (subclasses): what `prompt_version` hashes."""
        raise NotImplementedError

    @property
    def prompt_version(self) -> str:
        """A short hash of this mode's fixed prompt text: it changes whenever the prompt does."""
        return hashlib.sha256(f"{self.mode}\n{self.fixed_prompt()}".encode()).hexdigest()[:12]

    # --- plumbing ---------------------------------------------------------------------------------
    def defang(self, text: str) -> str:
        """`text` with copies of this judge's prompt tags made harmless (`ifgym.model_answers.defang`)."""
        return defang(text, self.tags)

    def _count(self, key: str, amount: int = 1) -> None:
        with self._lock:
            self.stats[key] += amount

    def _tokens(self, completion: Any) -> str:
        with self._lock:
            self.stats["prompt_tokens"] += int(getattr(completion, "prompt_tokens", 0) or 0)
            self.stats["completion_tokens"] += int(getattr(completion, "completion_tokens", 0) or 0)
        return completion.text or ""

    def _asking(self, conversation: Conversation[list[Verdict]], **overrides: Any) -> Steps[list[Verdict]]:
        """A judge's dialogue as Steps: each call to the client (`overrides` go to every call, e.g. max_tokens).

        Each answer's tokens are counted in `stats` and its text sent back into the dialogue.
        """
        return asking(conversation, chat_call(self.client, **overrides), read=self._tokens)

    def ask(
        self,
        messages: list[Message],
        parse: Callable[[str], _Parse],
        *,
        covers: Callable[[_Parse], int],
        complete: Callable[[_Parse], bool],
        instruction: str,
    ) -> Conversation[tuple[_Parse, int]]:
        """`ask_until_complete` with this judge's `max_retries` and counters."""
        return (
            yield from ask_until_complete(
                messages,
                parse,
                covers=covers,
                complete=complete,
                instruction=instruction,
                max_retries=self.max_retries,
                count=self._count,
            )
        )

    def _unknown(self, verdicts: list[Verdict]) -> list[Verdict]:
        """Count the unknown verdicts of one judgement; return them."""
        self._count("unknown", sum(v.label == "unknown" for v in verdicts))
        return verdicts


class _Parsed(Protocol):
    problems: list[str]  # what was wrong with the answer, said back to the judge when it is re-asked


_Parse = TypeVar("_Parse", bound=_Parsed)


def ask_until_complete(
    messages: list[Message],
    parse: Callable[[str], _Parse],
    *,
    covers: Callable[[_Parse], int],
    complete: Callable[[_Parse], bool],
    instruction: str,
    max_retries: int,
    count: Callable[[str], Any],
) -> Conversation[tuple[_Parse, int]]:
    """Ask a judge and re-ask while its answer is incomplete; return the best parse and the number of calls.

    Every answer is `parse`d and the one that `covers` the most items is kept (a later one wins a
    tie). It stops at a `complete` answer or once `max_retries` re-asks were spent; a re-ask shows
    the judge its own answer, then the parse's problems and `instruction` (what to send instead).
    `count("calls")` is called for every answer and `count("retries")` for every re-ask. The
    judges' own prompts, parsers and verdicts stay with them; only this loop is shared.
    """
    best: _Parse | None = None
    attempts = 0
    while True:
        text = yield messages
        attempts += 1
        count("calls")
        parsed = parse(text)
        if best is None or covers(parsed) >= covers(best):
            best = parsed
        if complete(parsed) or attempts > max_retries:
            return best, attempts
        count("retries")
        again = f"That answer could not be used: {'; '.join(parsed.problems)}. {instruction}"
        messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": again}]


def unanswered(noun: str, number: int, attempts: int, unplaced: int = 0) -> str:
    """Why item `number` has no verdict: the judge never answered it, or its answers carried no item number."""
    if not unplaced:
        return f"judge gave no {noun} for item {number} after {attempts} call(s)"
    return f"judge gave no numbered {noun} for item {number} after {attempts} call(s){unplaced_note(unplaced)}"


def unplaced_note(unplaced: int) -> str:
    """The clause a reason gets when answers without an item number could not be placed ("" when none)."""
    if not unplaced:
        return ""
    return f"; its {unplaced} unnumbered answer(s) did not match the items one to one, so none was assigned by guess"


_QUOTE_MARKS = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})
_ELLIPSIS_RE = re.compile(r"\s*(?:\.\.\.|\u2026|\[\.\.\.\])\s*")


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.translate(_QUOTE_MARKS).casefold()).strip()


def quote_found(quote: Any, text: str) -> bool:
    """Tell whether a judge's quote occurs in `text` (case, whitespace and curly quotes aside).

    An ellipsis in the quote may skip words: its parts must occur in order. Surrounding quote marks
    are dropped. An empty quote, or one without a letter or digit, is not found.
    """
    if not isinstance(quote, str):
        return False
    haystack = _normal(text)
    parts = [_normal(p).strip("\"' ") for p in _ELLIPSIS_RE.split(quote)]
    parts = [p for p in parts if p]
    if not parts or not any(re.search(r"\w", p) for p in parts):
        return False
    at = 0
    for part in parts:
        at = haystack.find(part, at)
        if at == -1:
            return False
        at += len(part)
    return True
