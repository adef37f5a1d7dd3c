"""The one client for every model call: OpenAI-compatible HTTP, or the embedded llama.cpp model.

Roles (policy, user, judge) each get their own client, so each has its own concurrency limit
and token counter. Only this package talks to models. Import from `ifgym.llm`; its modules, by stage:

- `config`: `LLMConfig` (how to reach a model), its field checks, the generation settings of a call;
- `conversation`: messages, `Usage` and `Completion`, `count_episode_usage`, the conversation
  drivers `converse`/`aconverse`, `ChatClient` (what every room needs from a client) and
  `CannedClient` (the test double);
- `cache`: `CallCache`, model calls and their answers on disk (deterministic calls unless asked);
- `client`: `LLMClient` (validates, limits, counts, cleans and cuts), `make_client`,
  `resolve_client` (a client as given, or one built from a config and `announce`d once: which model
  plays the role, `model_place`), and `check_servers` (each server asked once, before a run, whether
  it answers and serves the model);
- `http`: the OpenAI-compatible backend over aiohttp: requests, retries, errors that name the fix;
- `embeddings`: `EmbeddingClient`, sentence embeddings from an OpenAI-compatible `/embeddings` route;
- `embedded`: the llama.cpp backend in this process (`EmbeddedBackend`);
- `models`: the embedded model files (Qwen joined from its part packages, SmolLM2 located).

Heavy libraries load lazily: `import ifgym.llm` imports neither `aiohttp` nor `llama_cpp`; the
first HTTP call imports `aiohttp`, the first embedded call imports `llama_cpp`.
"""

from ifgym.llm.cache import CallCache
from ifgym.llm.client import LLMClient, announce, check_servers, make_client, model_place, resolve_client
from ifgym.llm.config import GEN_KEYS, LLM_CONFIG_FIELDS, PLACEHOLDER_API_KEY, LLMConfig, config_from_mapping
from ifgym.llm.conversation import (
    ROLES_IN_MESSAGES,
    CannedClient,
    ChatClient,
    Completion,
    Conversation,
    Message,
    Usage,
    aconverse,
    clean_surrogates,
    converse,
    count_episode_usage,
    validate_messages,
    word_count,
)
from ifgym.llm.embedded import LLAMA_CPP_INSTALL, EmbeddedBackend
from ifgym.llm.embeddings import EmbeddingClient
from ifgym.llm.models import (
    EMBEDDED_MODELS,
    QWEN_FILE,
    QWEN_NAME,
    QWEN_PART_COUNT,
    QWEN_PART_MODULE,
    QWEN_PART_VERSION,
    QWEN_SHA256,
    QWEN_SIZE,
    SMOLLM_FILE,
    SMOLLM_INSTALL,
    SMOLLM_MODULE,
    SMOLLM_NAME,
    default_cache_dir,
    ensure_qwen_model,
    join_parts,
    locate_parts,
    resolve_embedded_model,
    smollm2_model_path,
)

__all__ = [
    "EMBEDDED_MODELS",
    "GEN_KEYS",
    "LLAMA_CPP_INSTALL",
    "LLM_CONFIG_FIELDS",
    "PLACEHOLDER_API_KEY",
    "QWEN_FILE",
    "QWEN_NAME",
    "QWEN_PART_COUNT",
    "QWEN_PART_MODULE",
    "QWEN_PART_VERSION",
    "QWEN_SHA256",
    "QWEN_SIZE",
    "ROLES_IN_MESSAGES",
    "SMOLLM_FILE",
    "SMOLLM_INSTALL",
    "SMOLLM_MODULE",
    "SMOLLM_NAME",
    "CallCache",
    "CannedClient",
    "ChatClient",
    "Completion",
    "Conversation",
    "EmbeddedBackend",
    "EmbeddingClient",
    "LLMClient",
    "LLMConfig",
    "Message",
    "Usage",
    "aconverse",
    "announce",
    "check_servers",
    "clean_surrogates",
    "config_from_mapping",
    "converse",
    "count_episode_usage",
    "default_cache_dir",
    "ensure_qwen_model",
    "join_parts",
    "locate_parts",
    "make_client",
    "model_place",
    "resolve_client",
    "resolve_embedded_model",
    "smollm2_model_path",
    "validate_messages",
    "word_count",
]
