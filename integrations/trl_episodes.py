"""`ifgym train trainer.rollout=episode`: GRPO over whole ifgym episodes, through TRL's `rollout_func`.

**Why `rollout_func`, not `environment_factory`.** TRL 1.16 has two hooks for multi-turn training.
`environment_factory` is tool calling: the model calls the environment's methods as tools and the
results come back as `tool` messages. In ifgym the model calls nothing: it answers in plain
assistant turns, and the other side of the dialogue is a user. `rollout_func(prompts, trainer)`
lets the caller play the rollout and hand back token ids and a mask (`env_mask`: 1 for tokens the
model wrote, 0 for the rest), which is what a dialogue with a simulated user needs.

**One training episode** (`play_episodes`): the env is reset with the row's seed; its first
observation (system prompt and first user turn, by the model's chat template) is the prompt. Then
turn by turn, every live episode of the batch generates its reply in one batch (TRL's own
generation: transformers, or vLLM when `use_vllm`), the reply's tokens join the episode's
completion with mask 1, the env scores the reply and either ends the dialogue (patience, `max_turns`,
the user's own end) or the user speaks: the user's message, rendered by the chat template after an
end-of-turn token, joins the completion with mask 0. The next reply is generated from exactly these
tokens (no re-tokenisation of the model's own replies). A turn that could pass the episode's token
budget is not played (`ended: token_budget`). An env whose dialogue history is not the model's own
replies (StructFlow's golden context) cannot be one token sequence: refused, with the fix.

**Groups.** TRL repeats each dataset row (one training seed) `num_generations` times in a row, so a
GRPO group is G episodes reset with the same seed. With a user that does not read the replies
(EvolIF-v1's template user, StructFlow's replay) the user turns are the same across the group as
long as the episodes last; an adaptive user (an LLM user that reads the replies, FlexBench's
callers) is allowed, and `episode/same_user_turns` logs the share of groups whose user turns agreed.

**Credit** (`trainer.episode.credit`). `episode`: the reward is `EpisodeReturn` of each episode
(discounted sum of the env's turn rewards, optional survival bonus and per-turn mean) and TRL
gives every model token of the episode the same group-relative advantage. `turn`: each reply's
tokens get the advantage of its own turn reward against the same turn of the group's other
episodes (those that reached it; one alone gets 0), scaled as TRL's `scale_rewards` says. TRL's
loss takes per-token advantages of shape (B, T) from a subclass (its own comment says so), so
`EpisodeTrainer` replaces the advantages after TRL computed them; the logged `reward` is still
the episode return. Either way every step logs the mean reward of each turn index
(`turn_reward/<t>`), how long episodes were and how they ended, the env's pass rates and judge and
user calls, and `train_episodes.jsonl` keeps every training episode with its rewards and advantages.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifgym.core.tasks import task_of
from ifgym.errors import ConfigError
from ifgym.llm.loop import run_async

__all__ = [
    "CREDITS",
    "ENDED_BY_BUDGET",
    "EpisodeRollout",
    "Played",
    "chat_ids",
    "episode_metrics",
    "episode_setup",
    "episode_trainer",
    "play_episodes",
    "token_advantages",
    "turn_advantages",
    "user_suffix_ids",
]

CREDITS = ("episode", "turn")
ENDED_BY_BUDGET = "token_budget"  # the episode's next turn could have passed trainer.episode.max_tokens

Generate = Callable[[list[list[int]]], tuple[list[list[int]], list[list[float]] | None]]


def chat_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The token ids of `messages` by the tokenizer's chat template, ready for the assistant's reply."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, return_dict=False)
    return [int(i) for i in ids]


def user_suffix_ids(tokenizer: Any, message: dict[str, str]) -> list[int]:
    """The tokens that follow an assistant turn's end-of-turn token when the user speaks `message`.

    Read off the chat template by difference: a short dialogue ending with an assistant turn (cut
    after its end-of-turn token), then the same with the user's message and the assistant's header.
    """
    before = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    head = tokenizer.apply_chat_template(before, tokenize=True, return_dict=False)
    eos = tokenizer.eos_token_id
    ends = [k for k, t in enumerate(head) if t == eos]
    if ends:  # templates that put a newline after the end-of-turn token: that newline belongs to the suffix
        head = head[: ends[-1] + 1]
    full = chat_ids(tokenizer, [*before, {"role": "user", "content": message["content"]}])
    if full[: len(head)] != list(head):
        raise ConfigError(
            "trainer.rollout=episode: this tokenizer's chat template does not render a dialogue as its turns in a "
            "row (a later turn changes earlier tokens), so user turns cannot be appended; use another model"
        )
    return full[len(head) :]


@dataclass
class Played:
    """One training episode as the trainer sees it: tokens, which of them the model wrote, where each reply is."""

    seed: int
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: written by the model (trained); 0: template and user tokens
    logprobs: list[float] | None = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # each reply's [start, end) in completion_ids
    ended: str = ""
    episode: Any = None  # the env's Episode record
    cut: int = 0  # replies stopped by the reply token limit (closed with an end-of-turn token they did not write)

    def add(self, ids: Sequence[int], written: int, logprobs: Sequence[float] | None = None) -> None:
        """Append tokens with their mask value; logprobs (of generated tokens) or 0.0 for the rest."""
        self.completion_ids += list(ids)
        self.mask += [written] * len(ids)
        if self.logprobs is not None:
            self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


def _run(coroutines: list[Any]) -> list[Any]:
    async def together() -> list[Any]:
        return list(await asyncio.gather(*coroutines))

    return run_async(together())


def play_episodes(
    envs: Sequence[Any],
    seeds: Sequence[int],
    generate: Generate,
    tokenizer: Any,
    *,
    max_tokens: int,
    reply_tokens: int,
) -> list[Played]:
    """Play one episode per (env, seed), every live episode's reply generated in one batch per turn (module docstring).

    `generate(list of token-id lists)` returns each one's new tokens (cut after its end-of-turn
    token) and their log-probabilities, or None when the backend gives none. The envs step
    concurrently (a judge's or an LLM user's calls of one turn run together).
    """
    from ifgym.runner.async_wrappers import async_reset, async_step

    eos = tokenizer.eos_token_id
    stops = {eos, tokenizer.pad_token_id} - {None}
    starts = _run([async_reset(env, seed=int(seed)) for env, seed in zip(envs, seeds, strict=True)])
    history = [list(obs) for obs, _ in starts]
    played = [Played(int(seed), chat_ids(tokenizer, obs)) for seed, obs in zip(seeds, history, strict=True)]
    live = list(range(len(envs)))
    while live:
        new_ids, new_logprobs = generate([played[i].prompt_ids + played[i].completion_ids for i in live])
        if new_logprobs is None:
            for i in live:
                played[i].logprobs = None
        replies = []
        for k, i in enumerate(live):
            p, ids = played[i], [int(t) for t in new_ids[k]]
            start = len(p.completion_ids)
            p.add(ids, 1, new_logprobs[k] if new_logprobs is not None else None)
            p.spans.append((start, len(p.completion_ids)))
            if not ids or ids[-1] not in stops:  # cut at the token limit: close the turn so that the user's can follow
                p.add([eos], 0)
                p.cut += 1
            replies.append(tokenizer.decode([t for t in ids if t not in stops], skip_special_tokens=True).strip())
        steps = _run([async_step(envs[i], reply) for i, reply in zip(live, replies, strict=True)])
        still = []
        for i, reply, (obs, _, terminated, truncated, info) in zip(live, replies, steps, strict=True):
            p = played[i]
            if terminated or truncated:
                p.ended = info.get("done_reason") or ("truncated" if truncated else "terminated")
                continue
            expected = [*history[i], {"role": "assistant", "content": reply}]
            if len(obs) != len(expected) + 1 or list(obs[:-1]) != expected or obs[-1].get("role") != "user":
                env_id = getattr(envs[i].unwrapped, "env_name", "this env")
                raise ConfigError(
                    f"trainer.rollout=episode needs the model's own replies as the dialogue's history, but {env_id} "
                    "keeps other text there (StructFlow's golden context: set env.context=own)"
                )
            suffix = user_suffix_ids(tokenizer, obs[-1])
            if len(p.completion_ids) + len(suffix) + reply_tokens > max_tokens:
                p.ended = ENDED_BY_BUDGET
                continue
            p.add(suffix, 0)
            history[i] = list(obs)
            still.append(i)
        live = still
    for env, p in zip(envs, played, strict=True):
        p.episode = env.unwrapped.episode
        if p.ended == ENDED_BY_BUDGET:
            p.episode.done_reason = ENDED_BY_BUDGET
    return played


def turn_advantages(rewards: Sequence[Sequence[float]], group_size: int, scale: str = "group") -> list[list[float]]:
    """Per episode, per turn: the turn's reward minus the mean of the same turn over its group's episodes.

    Groups are `group_size` consecutive episodes (TRL's order); only the episodes that reached a
    turn take part in it, and a turn reached by one episode alone gets 0 (nothing to compare).
    `scale`: "group" divides by the standard deviation of those rewards (+1e-4, as TRL), "batch"
    by that of every turn reward in the batch, "none" leaves the differences as they are.
    """
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} episodes do not split into groups of {group_size}")
    flat = [r for episode in rewards for r in episode]
    batch_std = _std(flat)
    out: list[list[float]] = [[0.0] * len(episode) for episode in rewards]
    for first in range(0, len(rewards), group_size):
        group = range(first, first + group_size)
        for t in range(max((len(rewards[i]) for i in group), default=0)):
            reached = [i for i in group if len(rewards[i]) > t]
            if len(reached) < 2:
                continue
            values = [rewards[i][t] for i in reached]
            mean = sum(values) / len(values)
            std = {"group": _std(values), "batch": batch_std, "none": None}[scale]
            for i in reached:
                diff = rewards[i][t] - mean
                out[i][t] = diff if std is None else diff / (std + 1e-4)
    return out


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation (as torch.std, which TRL uses); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def token_advantages(
    advantages: Sequence[Sequence[float]], spans: Sequence[Sequence[tuple[int, int]]], width: int
) -> Any:
    """A (episodes, width) tensor: each reply's tokens carry its turn's advantage, every other token 0."""
    import torch

    out = torch.zeros(len(advantages), width)
    for row, (turns, where) in enumerate(zip(advantages, spans, strict=True)):
        for value, (start, end) in zip(turns, where, strict=True):
            out[row, start:end] = value
    return out


def _same_user_turns(group: Sequence[Played]) -> bool:
    common = min(len(p.episode.turns) for p in group)
    return all(len({p.episode.turns[t].user for p in group}) == 1 for t in range(common))


def episode_metrics(
    played: Sequence[Played],
    turn_rewards: Sequence[Sequence[float]],
    group_size: int,
    usage: dict[str, dict[str, int]] | None = None,
) -> dict[str, float]:
    """One step's numbers about its episodes (see the module docstring), for metrics.jsonl and W&B.

    `turn_reward/<t>`: the mean credited reward of turn t over the episodes that reached it;
    `episode/turns`, `episode/tokens` (completion tokens), `episode/trained_tokens` (mask 1),
    `episode/cut_replies` (share of replies stopped by the reply token limit: TRL's own
    `completions/clipped_ratio` cannot see them, every episode ends with an end-of-turn token);
    `episode/ended/<reason>`: the share of episodes that ended so; `episode/same_user_turns`: the
    share of groups whose user turns agreed; the task's `pass_rate/<group>` (its `summarize`);
    `calls/<role>`: model calls of the user and the judge while playing.
    """
    n = len(played)
    out: dict[str, float] = {
        "episode/turns": sum(len(r) for r in turn_rewards) / n,
        "episode/tokens": sum(len(p.completion_ids) for p in played) / n,
        "episode/trained_tokens": sum(sum(p.mask) for p in played) / n,
        "episode/cut_replies": sum(p.cut for p in played) / max(sum(len(p.spans) for p in played), 1),
    }
    for t in range(max(len(r) for r in turn_rewards)):
        values = [r[t] for r in turn_rewards if len(r) > t]
        out[f"turn_reward/{t}"] = sum(values) / len(values)
    for reason, count in sorted(Counter(p.ended for p in played).items()):
        out[f"episode/ended/{reason}"] = count / n
    groups = [played[i : i + group_size] for i in range(0, n, group_size)]
    out["episode/same_user_turns"] = sum(_same_user_turns(g) for g in groups) / len(groups)
    finished = [p.episode for p in played if p.episode.turns]
    if finished:
        for key, value in task_of(finished[0]).summarize(finished).items():
            if key.startswith("pass_rate/") and isinstance(value, int | float) and math.isfinite(value):
                out[key] = float(value)
    for role, counts in sorted((usage or {}).items()):
        if role != "policy":
            out[f"calls/{role}"] = float(counts.get("calls", 0))
    return out


class EpisodeRollout:
    """TRL's `rollout_func`: plays the batch's episodes in the env (one env per rollout, kept between steps).

    `tokenizer` is the trained model's (settable after construction: the settings are checked
    before the model loads). `seeds` is set by `EpisodeTrainer` before each generation batch (TRL
    hands `rollout_func` the prompts only); after a call, `last` holds the played episodes and `usage` the user's and
    judge's calls by role.
    """

    def __init__(self, make_env: Callable[[], Any], tokenizer: Any = None, *, max_tokens: int, reply_tokens: int):
        if max_tokens < reply_tokens:
            raise ConfigError(
                f"trainer.episode.max_tokens={max_tokens} is less than one reply (trainer.grpo.max_completion_length="
                f"{reply_tokens}): raise it to at least the reply length times the turns"
            )
        self.make_env, self.tokenizer = make_env, tokenizer
        self.max_tokens, self.reply_tokens = max_tokens, reply_tokens
        self.envs: list[Any] = []
        self.seeds: list[int] = []
        self.last: list[Played] = []
        self.usage: dict[str, dict[str, int]] = {}
        self.calls: Counter[str] = Counter()  # model calls by role (user, judge) over the whole training

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt (its row's seed) with the trainer's model; TRL's rollout output."""
        from ifgym.llm.conversation import count_episode_usage

        if len(self.seeds) != len(prompts):
            raise RuntimeError(
                f"{len(prompts)} prompts but {len(self.seeds)} seeds: run EpisodeRollout in EpisodeTrainer"
            )
        while len(self.envs) < len(prompts):
            self.envs.append(self.make_env())

        def generate(ids: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
            return trainer._generate_single_turn(ids, None, {}, num_generations=1)

        with count_episode_usage() as usage:
            played = play_episodes(
                self.envs[: len(prompts)],
                self.seeds,
                generate,
                self.tokenizer,
                max_tokens=self.max_tokens,
                reply_tokens=self.reply_tokens,
            )
        self.last, self.usage = played, {role: u.to_json() for role, u in usage.items()}
        self.calls.update({role: counts["calls"] for role, counts in self.usage.items()})
        return {
            "prompt_ids": [p.prompt_ids for p in played],
            "completion_ids": [p.completion_ids for p in played],
            "logprobs": None if any(p.logprobs is None for p in played) else [p.logprobs for p in played],
            "env_mask": [p.mask for p in played],
            "episode": [p.episode for p in played],
        }


def episode_setup(cfg: dict[str, Any]) -> tuple[Callable[[], Any], list[dict[str, Any]], Any]:
    """For `ifgym train trainer.rollout=episode`: the env factory, the dataset rows (one per training seed), the reward.

    A row is the seed's first observation (`prompt`, what TRL logs) and its `seed` (what the rollout
    plays); the envs are built from the env and judge groups with `max_turns` = `trainer.episode.max_turns`.
    Every setting is checked here, before a model is loaded.
    """
    from ifgym.errors import UnknownNameError
    from ifgym.rewards.trl import EpisodeReturn
    from ifgym.runner.build import build_env

    trainer_cfg = cfg["trainer"]
    settings, prompts = trainer_cfg["episode"], trainer_cfg["prompts"]
    UnknownNameError.check(("trainer.episode.credit", settings["credit"], CREDITS))
    for key in ("max_turns", "max_tokens"):
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"trainer.episode.{key} must be an int >= 1, got {value!r}")
    if prompts["episodes"] < 1:
        raise ConfigError(f"trainer.prompts.episodes (training seeds) must be >= 1, got {prompts['episodes']}")
    reward = EpisodeReturn(
        settings["discount"], settings["survival_bonus"], settings["per_turn"], min_words=trainer_cfg["min_words"]
    )
    make_env = build_env({**cfg["env"], "max_turns": settings["max_turns"]}, cfg["judge"], {})
    probe = make_env()
    if getattr(probe.unwrapped, "context", None) == "golden":
        raise ConfigError(
            f"trainer.rollout=episode needs the model's own replies as the dialogue's history; {cfg['env']['id']} "
            "runs with golden context (reference answers as history): set env.context=own"
        )
    seeds = range(prompts["seed"], prompts["seed"] + prompts["episodes"])
    rows = [{"prompt": list(probe.reset(seed=seed)[0]), "seed": seed} for seed in seeds]
    probe.close()
    return make_env, rows, reward


@functools.cache
def _episode_trainer_class() -> type:
    from trl import GRPOTrainer

    class EpisodeTrainer(GRPOTrainer):
        """GRPOTrainer whose completions are whole episodes (`EpisodeRollout`), with turn-level credit on demand."""

        def __init__(
            self,
            *,
            rollout: EpisodeRollout,
            reward: Any,
            credit: str,
            record: Path,
            **kwargs: Any,
        ):
            super().__init__(rollout_func=rollout, reward_funcs=[reward], **kwargs)
            self.rollout, self.episode_reward, self.credit = rollout, reward, credit
            self.record = record
            record.write_text("", encoding="utf-8")

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            self.rollout.seeds = [int(row["seed"]) for row in inputs]
            output = super()._generate_and_score_completions(inputs)
            played = self.rollout.last
            mode = "train" if self.model.training else "eval"
            group = self.num_generations if mode == "train" else self.num_generations_eval
            rewards = [self.episode_reward.turn_rewards(p.episode) for p in played]
            if self.credit == "turn":
                per_turn = turn_advantages(rewards, group, self.scale_rewards)
                width = output["completion_ids"].shape[1]
                output["advantages"] = token_advantages(per_turn, [p.spans for p in played], width).to(
                    output["advantages"].device
                )
                advantages: list[Any] = per_turn
            else:
                advantages = output["advantages"].tolist()
            for name, value in episode_metrics(played, rewards, group, self.rollout.usage).items():
                self._metrics[mode][name].append(value)
            self._write(played, rewards, advantages, group)
            return output

        def _write(self, played: list[Played], rewards: list[list[float]], advantages: list[Any], group: int) -> None:
            with self.record.open("a", encoding="utf-8") as f:
                for k, (p, credited, advantage) in enumerate(zip(played, rewards, advantages, strict=True)):
                    row = {
                        "step": self.state.global_step + 1,
                        "group": k // group,
                        "seed": p.seed,
                        "ended": p.ended,
                        "turn_rewards": credited,
                        "return": self.episode_reward.score(p.episode),
                        "advantage": advantage,
                        "tokens": {"prompt": len(p.prompt_ids), "completion": len(p.completion_ids)},
                        "trained_tokens": sum(p.mask),
                        "reply_spans": p.spans,
                        "episode": p.episode.to_json(),
                    }
                    f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")

    return EpisodeTrainer


def episode_trainer(**kwargs: Any) -> Any:
    """An `EpisodeTrainer` (a `trl.GRPOTrainer` subclass, built on first use so that TRL is imported only then)."""
    return _episode_trainer_class()(**kwargs)
