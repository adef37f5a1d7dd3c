"""NTM: Context-Agent's long, non-linear multi-turn benchmark, replayed from its file and judged at the end."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifgym.core import TurnRecord
from ifgym.envs.base import ChatEnv
from ifgym.errors import ConfigError, UnknownNameError
from ifgym.llm import resolve_client
from ifgym.rewards.structflow.judge import CHECKLIST_MODES, DEFAULT_CHECKLIST_MODE
from ifgym.rewards.tasks import NTM

JUDGES = ("rules", "llm")
PAPER_LENGTHS = (10, 15, 20, 25)  # the dialogue lengths of the paper's Table 3
# The paper's corpus (Table 1, §4.2) against the released file: the paper does not say which subset it used.
PAPER_CORPUS = {"dialogues": 165, "user_turns": 2929}
RELEASED_CORPUS = {"dialogues": 405, "user_turns": 6931}


class NTMEnv(ChatEnv):
    """NTM (the Context-Agent paper's benchmark): long dialogues that shift topics and change requirements.

    ## Description
    Each dialogue (10 to 27 user turns) moves between topics, returns to them and changes earlier
    requirements ("Forget it, let's go back to a 9000 yuan budget …"); its last user turn asks for
    the final result. The user replays the dialogue's user turns in order and never sees the replies.
    The final reply is judged against the dialogue's checkpoints (3-10 yes/no questions). No data
    ships (the released file carries no licence): `dataset=` is the path to a file in NTM's format
    (`ifgym.simulators.ntm`, which reads every quirk of it).

    ## Action Space
    `ReplySpace`: the assistant's reply, any `str` up to `max_reply_chars` characters.

    ## Observation Space
    `ChatSpace`: an optional system message, then alternating user/assistant messages, ending with
    the new user turn. The assistant messages are the policy's own replies (NTM has no reference
    answers). Message dicts are shared with the env: treat them as read-only.

    ## Rewards
    Intermediate turns are not scored: reward 0 and `info["scored"]` False. The final reply is
    judged by ifgym's checklist judge (`ChecklistJudge` of StructFlow, one call; not the paper's
    judge; it reads the final request and reply, as the paper's judge does) with one verdict per
    checkpoint in `info["verdicts"]` (yes / no / unknown, never coerced); its reward is the
    dialogue's TCR: met / judged checkpoints (`info["scored"]` True, `info["TCR"]`). With
    `judge="rules"` no checkpoint can be decided: each would be unknown and TCR n/a, so it is refused
    at `make` time with a ConfigError unless `allow_unjudged=True` (replay unscored on purpose: each
    checkpoint unknown, counted, the reward 0 with `info["reward_defined"]` False). `summarize`
    gives TCR (per dialogue, averaged: the paper's headline), pooled TCR, TCR and ACT per length
    bucket and the share of unknown verdicts (see `ifgym.rewards.ntm`).

    ## Starting State
    `reset(options={"dialogue": index or conversation_id})` plays that dialogue; otherwise seed k
    plays dialogue k mod N (seeds 0..N-1 cover the file once, and pair two runs by dialogue), and
    no seed picks one at random.

    ## Episode End
    Terminated when the dialogue's last user turn is answered (`done_reason="script_end"`):
    `max_turns` is the dialogue's length. No patience (the paper has none). Never truncated.

    ## Arguments
    | argument | default | meaning |
    |---|---|---|
    | `dataset` | required | path to an NTM file (JSON Lines, e.g. Context-Agent's `dataset-full.jsonl`) |
    | `judge` | `"llm"` | `"llm"` (the checklist judge) or `"rules"` (every checkpoint unknown) |
    | `allow_unjudged` | `False` | True: replay with `judge="rules"`, which scores nothing (see Rewards) |
    | `lengths` | `None` | play only the dialogues of these lengths in user turns: `[10, 15, 20, 25]`, the paper's |
    | `checkpoint_scope` | `True` | checkpoints keep their governing negations (False: v0's reading) |
    | `judge_llm` | `None` | client, `LLMConfig` or mapping; `None` = the embedded model |
    | `judge_mode` | `"plain"` | checklist judge: `"plain"`, `"evidence"` (Yes quotes the reply), `"probability"` |
    | `judge_max_retries` | `2` | re-asks when the judge's answer misses checkpoints |
    | `judge_max_tokens` | `None` | judge answer cap; None = 128 + 96 per checkpoint (or the client's, if larger) |
    | `judge_threshold` | `None` | probability mode: P(yes) ≥ it is Yes; None = 0.5 |
    | `system_prompt` | `None` | system message put first in every observation |
    | `max_reply_chars` | `100000` | longest accepted reply |

    ## Version History
    - v1: a checkpoint keeps the negation that governs it ("(3)without filing a complaint or
      (4)requesting a VIP upgrade": the 4th is "without requesting a VIP upgrade") and none ends in
      "or", so the judge is asked other questions than v0's; `lengths` restricts the dialogues played;
      the protocol lines compare the file with the paper's corpus.
    - v0: first release. Still registered with its checkpoint reading (`checkpoint_scope=False`).
    """

    env_name = "ifgym/NTM-v1"
    user_sees_verdicts = False  # the user replays its turns whatever the replies; only the last turn is judged

    def __init__(
        self,
        *,
        dataset: str | Path | None = None,
        judge: str = "llm",
        allow_unjudged: bool = False,
        lengths: Sequence[int] | None = None,
        checkpoint_scope: bool = True,
        judge_llm: Any = None,
        judge_mode: str = DEFAULT_CHECKLIST_MODE,
        judge_max_retries: int = 2,
        judge_max_tokens: int | None = None,
        judge_threshold: float | None = None,
        system_prompt: str | None = None,
        max_reply_chars: int = 100_000,
        render_mode: str | None = None,
        env_name: str | None = None,
    ):
        from ifgym.rewards.ntm import NTMRubric, NTMScorer
        from ifgym.rewards.structflow.judge import ChecklistJudge
        from ifgym.simulators.ntm import NTMUser, load_ntm

        UnknownNameError.check(("judge", judge, JUDGES), ("judge_mode", judge_mode, CHECKLIST_MODES))
        if not isinstance(allow_unjudged, bool):
            raise ConfigError(f"allow_unjudged must be True or False, got {allow_unjudged!r}")
        if dataset is None:
            raise ConfigError(
                "NTM needs dataset=PATH, the NTM file (JSON Lines; Context-Agent's dataset-full.jsonl): none ships "
                "with ifgym because the file carries no licence (on the command line: env=ntm env.dataset=PATH)"
            )
        if env_name:
            self.env_name = env_name
        if not isinstance(checkpoint_scope, bool):
            raise ConfigError(f"checkpoint_scope must be True or False, got {checkpoint_scope!r}")
        corpus = load_ntm(dataset, scope=checkpoint_scope)
        self.corpus = {"dialogues": len(corpus), "user_turns": sum(len(d.turns) for d in corpus)}
        self.lengths = _check_lengths(lengths, corpus, dataset)
        dialogues = [d for d in corpus if self.lengths is None or len(d.turns) in self.lengths]
        if judge == "rules" and not allow_unjudged:
            raise ConfigError(
                f"{dataset}: judge='rules' would score nothing: no rule decides a checkpoint, so every verdict would "
                "be unknown and TCR n/a. Pass judge='llm' with judge_llm=<client, LLMConfig or mapping> (on the "
                "command line: judge=llm judge.llm.base_url=...), or allow_unjudged=True to replay it unscored"
            )
        self.dataset = str(dataset)
        self.replayed = len(dialogues)
        self.judge_kind = judge
        judge_obj = (
            ChecklistJudge(
                resolve_client(judge_llm, "judge"),
                mode=judge_mode,
                max_retries=judge_max_retries,
                max_tokens=judge_max_tokens,
                threshold=judge_threshold,
            )
            if judge == "llm"
            else None
        )
        super().__init__(
            task=NTM,
            user=NTMUser(dialogues),
            scorer=NTMScorer(judge_obj),
            rubric=NTMRubric(),
            max_turns=None,  # set per episode to the dialogue's length
            system_prompt=system_prompt,
            max_reply_chars=max_reply_chars,
            render_mode=render_mode,
        )

    # --- choosing the dialogue -------------------------------------------------------------------
    def _reset_options(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any] | None:
        if seed is not None and not (options and "dialogue" in options):
            return {**(options or {}), "dialogue": seed % self.replayed}
        return options

    def _record_start(self) -> None:
        self.max_turns = len(self.user.dialogue.turns)  # the dialogue's length: its last reply ends it
        self._episode.meta["dialogue"] = self.user.episode_meta()

    # --- turn mechanics --------------------------------------------------------------------------
    def _turn_info(self) -> dict[str, Any]:
        info = super()._turn_info()
        meta = self._turn.spec.meta
        info.update(dialogue=meta.get("dialogue"), turn_number=meta.get("turn_number"), final=meta.get("final"))
        if meta.get("final"):
            info["checkpoints"] = [{"id": i.id, "question": i.question} for i in self._turn.spec.checklist]
        return info

    def protocol(self) -> dict[str, Any]:
        """The env's settings and `deviations`: each way a run differs from the Context-Agent paper's NTM protocol."""
        judge = getattr(self.scorer, "judge", None)
        out: dict[str, Any] = {
            **super().protocol(),
            "paper": "Context-Agent (NTM)",
            "dataset": self.dataset,
            "dialogues": self.replayed,
            "lengths": "/".join(map(str, self.lengths)) if self.lengths else None,
            "max_turns": "the dialogue's length",
            "judge": self.judge_kind,
            "judge_mode": judge.mode if judge is not None else None,
        }
        deviations = [
            self._corpus_line(),
            "the judge is ifgym's checklist judge (StructFlow's prompt, one call per dialogue on the final request "
            "and reply, unknown verdicts counted), not the paper's judge (which answers a count met / total)",
            "ACT counts every prompt token of the policy's request, the new message included, as its server reports "
            "them; the paper's code counts the context before the new message, with gemma3's tokenizer",
        ]
        if self.judge_kind == "rules":
            deviations.append("judge=rules: no rule decides a checkpoint, so every verdict is unknown and TCR is n/a")
        out["deviations"] = deviations
        return out

    def _corpus_line(self) -> str:
        """The file's size against the paper's corpus, and which dialogues this run plays."""
        n, turns = self.corpus["dialogues"], self.corpus["user_turns"]
        paper = (
            f"the paper reports {PAPER_CORPUS['dialogues']} dialogues and {PAPER_CORPUS['user_turns']:,} user turns "
            "(Table 1, §4.2) without saying which subset of the released file "
            f"({RELEASED_CORPUS['dialogues']} dialogues, {RELEASED_CORPUS['user_turns']:,} user turns) it used"
        )
        released = " (the released file)" if self.corpus == RELEASED_CORPUS else ""
        played = (
            f"; this run plays the {self.replayed} of {'/'.join(map(str, self.lengths))} turns (env.lengths)"
            if self.lengths
            else "; this run plays every length, the other lengths reported apart (TCR/other), "
            "env.lengths=[10,15,20,25] keeps the paper's"
        )
        return f"corpus: {n} dialogues, {turns:,} user turns{released}; {paper}{played}"

    # --- rendering -------------------------------------------------------------------------------
    def _render_turn(self, t: TurnRecord) -> list[str]:
        """One turn: the request and the reply; on the final turn each checkpoint's verdict."""
        lines = [f"[{t.index + 1}] USER: {t.user}", f"[{t.index + 1}] MODEL: {t.reply}"]
        lines += [f"    {v.label:7} {i.question}" for i, v in zip(t.spec.checklist, t.verdicts, strict=True)]
        return lines


def _check_lengths(lengths: Any, corpus: Sequence[Any], dataset: Any) -> tuple[int, ...] | None:
    """`lengths` as sorted ints, or None for all; a clear error when a value is not a length or nothing is left."""
    if lengths is None:
        return None
    values = list(lengths) if isinstance(lengths, Sequence) and not isinstance(lengths, str) else None
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ConfigError(
            f"env.lengths must be a list of dialogue lengths in user turns, e.g. [10,15,20,25]; got {lengths!r}"
        )
    kept = tuple(sorted(set(values)))
    found = sorted({len(d.turns) for d in corpus})
    if not any(len(d.turns) in kept for d in corpus):
        raise ConfigError(f"{dataset}: no dialogue has {list(kept)} user turns (env.lengths); its lengths: {found}")
    return kept
