"""A policy that is a chat model behind an LLM client (HTTP server or the embedded model)."""

from __future__ import annotations

from typing import Any

from ifgym.errors import ConfigError, did_you_mean
from ifgym.llm import ChatClient, Completion, Message, Usage, make_client, validate_messages
from ifgym.llm.config import GEN_KEYS
from ifgym.llm.conversation import Call, Steps, twin
from ifgym.policies.base import Policy


class ChatPolicy(Policy):
    """Send the transcript to a chat model and return its reply.

    `system_prompt` is prepended when the observation carries no system message of its own (an
    env's own system message wins). `gen_overrides` (temperature, top_p, max_tokens, seed) apply to
    every call. The last Completion is kept in `last` (finish reason, token counts). `usage` is the
    client's (shared by every policy on that client); `episode_usage` counts this policy's own calls
    since `reset()`, so concurrent episodes over one client each get their own numbers.
    """

    def __init__(self, client: ChatClient, system_prompt: str | None = None, **gen_overrides: Any):
        if not (hasattr(client, "chat") and hasattr(client, "achat")):
            raise ConfigError(f"ChatPolicy needs a client with chat/achat (see ifgym.llm.make_client); got {client!r}")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ConfigError(f"system_prompt must be a string or None; got {type(system_prompt).__name__}")
        for key in gen_overrides:
            if key not in GEN_KEYS:
                hint = did_you_mean(key, GEN_KEYS)
                raise ConfigError(f"unknown generation setting {key!r}.{hint} Allowed: {', '.join(GEN_KEYS)}")
        self.client = client
        self.system_prompt = system_prompt
        self.gen_overrides = gen_overrides
        self.last: Completion | None = None
        self._episode = Usage()

    def reset(self) -> None:
        """Start this episode's call and token counts from zero."""
        self._episode = Usage()

    def _record(self, completion: Completion) -> str:
        self.last = completion
        if completion.usage_reported:
            self._episode.add(completion.prompt_tokens, completion.completion_tokens)
        else:
            self._episode.add_missing()
        return completion.text

    def _prompt(self, messages: list[Message]) -> list[Message]:
        msgs = validate_messages(messages)
        if self.system_prompt is not None and not any(m["role"] == "system" for m in msgs):
            msgs = [{"role": "system", "content": self.system_prompt}, *msgs]
        return msgs

    @twin
    def act(self, messages: list[Message]) -> Steps[str]:
        """Return the model's reply to `messages` (`aact` awaits the client's achat, under its concurrency limit)."""
        return self._record(
            (yield Call(self.client.chat, self.client.achat, (self._prompt(messages),), self.gen_overrides))
        )

    @property
    def usage(self) -> dict[str, int]:
        """The client's totals (shared by every policy that uses the same client)."""
        return self.client.usage.to_json()

    @property
    def episode_usage(self) -> dict[str, int]:
        """Calls and tokens of this policy's own calls since the last reset (the same keys as `usage`)."""
        return self._episode.to_json()


def embedded_policy(
    model: str = "qwen2.5-coder-1.5b", *, system_prompt: str | None = None, **config: Any
) -> ChatPolicy:
    """Build a ChatPolicy over the embedded llama.cpp model (no server needed).

    `model` is "qwen2.5-coder-1.5b", "smollm2-135m" or a .gguf path; `config` sets other LLMConfig
    fields (temperature, max_tokens, n_ctx, n_threads, ...); unknown fields → ConfigError.
    """
    for key in ("base_url", "embedded_model"):
        if key in config:
            raise ConfigError(f"embedded_policy sets {key} itself; pass the model as `model=` and drop {key}")
    client = make_client({**config, "base_url": None, "embedded_model": model}, role="policy")
    return ChatPolicy(client, system_prompt=system_prompt)
