"""The one client for every model call: a served model through the `openai` SDK, or the embedded llama.cpp model.

Roles (policy, user, judge) each get their own client, so each has its own concurrency limit
and token counter. Only this package talks to models. Import what a user calls from `ifgym.llm`
(its `__all__`); the rest from the module that holds it. Its modules, by stage:

- `config`: `LLMConfig` (how to reach a model), its field checks, the generation settings of a call;
- `conversation`: messages, `Usage` and `Completion`, `count_episode_usage`, the conversation
  drivers `converse`/`aconverse`, `ChatClient` (what every room needs from a client) and
  `CannedClient` (the test double);
- `cache`: `CallCache`, model calls and their answers on disk (deterministic calls unless asked);
- `client`: `LLMClient` (validates, limits, counts, cleans and cuts), `make_client`,
  `resolve_client` (a client as given, or one built from a config and `announce`d once: which model
  plays the role, `model_place`), and `check_servers` (each server asked once, before a run, whether
  it answers and serves the model);
- `served`: served models through the `openai` SDK (`AsyncOpenAI` over aiohttp, or `AsyncAzureOpenAI`; the SDK
  does the HTTP, retries, timeouts, proxies and TLS), errors that name the fix, the check before a run;
- `embeddings`: `EmbeddingClient`, a served embedder through the same backend;
- `embedded`: the llama.cpp backend in this process (`EmbeddedBackend`);
- `models`: the embedded model files (Qwen joined from its part packages, SmolLM2 located);
- `loop`: the event loop every blocking entry point that awaits model calls runs on (`run_async`:
  uvloop's where installed, the young generation collected less often while it runs).

Heavy libraries load lazily: `import ifgym.llm` imports neither `openai` nor `llama_cpp`; the first
client of a served model imports `openai`, the first embedded call imports `llama_cpp`.
"""

from ifgym.llm.cache import CallCache
from ifgym.llm.client import LLMClient, check_servers, make_client, resolve_client
from ifgym.llm.config import LLMConfig
from ifgym.llm.conversation import (
    CannedClient,
    ChatClient,
    Completion,
    Conversation,
    Message,
    Usage,
    aconverse,
    converse,
    validate_messages,
)

# What a user calls: build a client (or the canned double), drive a conversation through it, cache
# its calls, check the servers. The rest (field lists, generation keys, the embedded model's files and
# backend, usage counting, announcing a model) is imported from its module by the few that need it.
__all__ = [
    "CallCache",
    "CannedClient",
    "ChatClient",
    "Completion",
    "Conversation",
    "LLMClient",
    "LLMConfig",
    "Message",
    "Usage",
    "aconverse",
    "check_servers",
    "converse",
    "make_client",
    "resolve_client",
    "validate_messages",
]
