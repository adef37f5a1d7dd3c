"""ifgym.llm's public names: what a user calls, and nothing of the model files or internal field lists."""

import ifgym.llm

USER_CALLS = {
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
}


def test_all_is_what_a_user_calls_and_each_name_resolves():
    assert set(ifgym.llm.__all__) == USER_CALLS
    assert all(getattr(ifgym.llm, name, None) is not None for name in ifgym.llm.__all__)


def test_model_part_constants_live_in_their_module_only():
    from ifgym.llm import models

    assert models.QWEN_SHA256 and not hasattr(ifgym.llm, "QWEN_SHA256")
