"""The embedded backend: model-file assembly (on small temp files and the real Qwen parts) and real
chats with SmolLM2 through llama.cpp in this process."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import threading
from pathlib import Path

import pytest

from ifgym.errors import BackendError, ConfigError
from ifgym.llm import make_client
from ifgym.llm.embedded import LLAMA_CPP_INSTALL, EmbeddedBackend
from ifgym.llm.models import (
    QWEN_FILE,
    QWEN_SIZE,
    default_cache_dir,
    ensure_qwen_model,
    join_parts,
    locate_parts,
    resolve_embedded_model,
    smollm2_model_path,
)

CHUNKS = [b"alpha-" * 1000, b"bravo-" * 700, b"charlie"]
WHOLE = b"".join(CHUNKS)
WHOLE_SHA = hashlib.sha256(WHOLE).hexdigest()


@pytest.fixture
def parts(tmp_path: Path) -> list[Path]:
    src = tmp_path / "src"
    src.mkdir()
    paths = []
    for i, data in enumerate(CHUNKS, 1):
        p = src / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- joining parts -------------------------------------------------------------------------------


def test_join_concatenates_in_order_and_stamps(parts, tmp_path):
    dest = tmp_path / "out" / "model.gguf"
    assert join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE)) == dest
    assert dest.read_bytes() == WHOLE
    # only the model and its stamp: no temp file survives
    assert leftovers(dest.parent) == ["model.gguf", "model.gguf.stamp.json"]


def test_join_in_the_wrong_order_fails_the_hash_and_leaves_nothing(parts, tmp_path):
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(BackendError, match="sha256 .* expected"):
        join_parts(list(reversed(parts)), dest, sha256=WHOLE_SHA, size=len(WHOLE))
    assert leftovers(dest.parent) == []


def test_corrupt_part_fails_the_hash_and_leaves_nothing(parts, tmp_path):
    parts[1].write_bytes(b"X" + CHUNKS[1][1:])  # same size, different bytes
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(BackendError, match="reinstall"):
        join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE))
    assert leftovers(dest.parent) == []


def test_wrong_total_size_is_caught_before_writing(parts, tmp_path):
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(BackendError, match=f"hold {len(WHOLE) - len(CHUNKS[2]):,} bytes, expected {len(WHOLE):,}"):
        join_parts(parts[:2], dest, sha256=WHOLE_SHA, size=len(WHOLE))
    assert leftovers(dest.parent) == []


def test_missing_part_file_is_named(parts, tmp_path):
    parts[2].unlink()
    with pytest.raises(BackendError, match="part03.bin"):
        join_parts(parts, tmp_path / "model.gguf", sha256=WHOLE_SHA, size=len(WHOLE))


def test_stamp_lets_later_calls_skip_the_parts(parts, tmp_path):
    dest = tmp_path / "model.gguf"
    join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE))
    for p in parts:
        p.unlink()  # a reuse that read the parts again would now fail
    assert join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE)) == dest
    assert dest.read_bytes() == WHOLE


def test_changed_file_invalidates_the_stamp_and_is_rebuilt(parts, tmp_path):
    dest = tmp_path / "model.gguf"
    join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE))
    dest.write_bytes(b"Z" * len(WHOLE))  # same size, new mtime, wrong content
    join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE))
    assert dest.read_bytes() == WHOLE


def test_complete_file_without_stamp_is_verified_not_rebuilt(parts, tmp_path):
    dest = tmp_path / "model.gguf"
    dest.write_bytes(WHOLE)  # e.g. copied in by hand
    for p in parts:
        p.unlink()
    assert join_parts(parts, dest, sha256=WHOLE_SHA, size=len(WHOLE)) == dest
    assert (tmp_path / "model.gguf.stamp.json").is_file()


def test_missing_part_packages_are_listed_with_the_pip_command(tmp_path, monkeypatch):
    site = tmp_path / "site"
    for n in (1, 3):  # packages 2 and 4 are "not installed"
        pkg = site / f"ifgymfakepart_{n}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{n:02d}.bin").write_bytes(b"x")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(BackendError) as err:
        locate_parts("ifgymfakepart_", 4, version="9.9")
    message = str(err.value)
    assert "missing 2 of its 4 part packages: ifgymfakepart-2, ifgymfakepart-4" in message
    assert "pip install ifgymfakepart-2==9.9 ifgymfakepart-4==9.9" in message
    assert "ifgymfakepart_1" not in sys.modules  # located, never imported


def test_located_parts_come_in_package_order(tmp_path, monkeypatch):
    site = tmp_path / "site"
    for n in (2, 1, 3):
        (site / f"ifgymorderpart_{n}" / "data").mkdir(parents=True)
        (site / f"ifgymorderpart_{n}" / "__init__.py").write_text("")
        (site / f"ifgymorderpart_{n}" / "data" / f"part{n:02d}.bin").write_bytes(b"x")
    monkeypatch.syspath_prepend(str(site))
    assert [p.name for p in locate_parts("ifgymorderpart_", 3, version="1")] == [
        "part01.bin",
        "part02.bin",
        "part03.bin",
    ]


@pytest.mark.embedded
def test_real_qwen_model_is_assembled_and_verified():
    path = ensure_qwen_model()  # first run joins and hashes 1.1 GB; later runs use the stamp
    assert path.name == QWEN_FILE and path.stat().st_size == QWEN_SIZE
    assert path.with_name(QWEN_FILE + ".stamp.json").is_file()
    assert ensure_qwen_model() == path


def test_cache_dir_follows_ifgym_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("IFGYM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))  # unset: falls back to ~/.cache/ifgym
    assert default_cache_dir() == tmp_path / ".cache" / "ifgym"


# -- model names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "error", "fragment"),
    [
        ("smollm2-135", ConfigError, "Did you mean 'smollm2-135m'"),  # typo of a known name
        ("gpt-4o", ConfigError, "or a path to a .gguf file"),  # not an embedded model at all
        ("/nowhere/model.gguf", BackendError, "does not exist"),  # a path that is not there
    ],
)
def test_bad_embedded_model_names(name, error, fragment):
    with pytest.raises(error, match=fragment):
        resolve_embedded_model(name)


def test_missing_llama_cpp_gives_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # find_spec reports a None module as absent
    with pytest.raises(BackendError) as err:
        make_client({"embedded_model": "smollm2-135m"})
    assert LLAMA_CPP_INSTALL in str(err.value)
    assert "-DGGML_NATIVE=OFF" in str(err.value) and "llama-cpp-python==0.3.36" in str(err.value)


# -- real chats with SmolLM2 ---------------------------------------------------------------------

SMOL = {"embedded_model": "smollm2-135m", "n_ctx": 1024, "max_tokens": 12, "seed": 0}


@pytest.mark.embedded
def test_smollm2_chat_and_achat():
    client = make_client(SMOL, "policy")
    assert client.backend == "embedded" and client.model == "smollm2-135m"
    out = client.chat([{"role": "user", "content": "Say hello."}])
    assert isinstance(out.text, str) and out.text.strip()
    assert 0 < out.completion_tokens <= 12 and out.prompt_tokens > 0
    again = asyncio.run(client.achat([{"role": "user", "content": "Say hello."}]))
    assert again.text == out.text  # temperature 0: same prompt, same reply
    assert client.usage.calls == 2 and client.usage.completion_tokens == 2 * out.completion_tokens


@pytest.mark.embedded
def test_one_model_per_file_and_context_is_shared():
    a = make_client(SMOL, "policy")
    b = make_client(SMOL, "judge")
    by_path = EmbeddedBackend(str(smollm2_model_path()), n_ctx=1024)
    assert a._embedded.load() is b._embedded.load() is by_path.load()
    assert by_path.name == "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.embedded
def test_concurrent_threads_are_serialised_safely():
    client = make_client({**SMOL, "concurrency": 4}, "policy")
    results: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(client.chat([{"role": "user", "content": "Count to three."}], max_tokens=6).text)
        except BaseException as exc:  # collected and asserted below: a thread's error must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 3 and len(set(results)) == 1


@pytest.mark.embedded
def test_prompt_longer_than_the_context_names_n_ctx():
    client = make_client({**SMOL, "n_ctx": 64}, "policy")
    with pytest.raises(BackendError, match=r"raise n_ctx \(now 64\)"):
        client.chat([{"role": "user", "content": "word " * 200}])


def test_model_file_is_resolved_lazily(tmp_path, monkeypatch):
    # building a client for the Qwen model must not assemble 1.1 GB: that waits for the first call
    monkeypatch.setenv("IFGYM_CACHE", str(tmp_path))
    client = make_client({}, "user")
    assert client.backend == "embedded" and client.model == "qwen2.5-coder-1.5b"
    assert os.listdir(tmp_path) == []


def test_extra_request_fields_take_llama_cpps_names_and_an_unknown_one_is_refused_at_once():
    # vLLM's repetition_penalty is llama.cpp's repeat_penalty; top_k is the same in both
    client = make_client({"base_url": None, "extra": {"repetition_penalty": 1.05, "top_k": 20}}, "policy")
    assert client._extra == {"repeat_penalty": 1.05, "top_k": 20}
    with pytest.raises(ConfigError) as err:
        make_client({"base_url": None, "extra": {"best_of": 2}}, "policy", config_key="policy.llm")
    message = str(err.value)
    assert message.startswith("policy.llm.extra: the embedded model (llama.cpp) takes no request field best_of")
    assert "repetition_penalty" in message and "top_k" in message


# -- the same answer whatever was asked before ------------------------------------------------------

QWEN_SYSTEM = {
    "role": "system",
    "content": "You are a careful assistant. Answer in plain English, keep every instruction the user gives "
    "in force until they change it, and never mention these rules. " * 3,
}
QWEN_ASKED = [
    QWEN_SYSTEM,
    {"role": "user", "content": "Describe how green tea is made, in exactly two sentences, without commas."},
]
QWEN_OTHER = [QWEN_SYSTEM, {"role": "user", "content": "Name three rivers in Europe and say which is longest."}]
QWEN_LONGER = [
    *QWEN_ASKED,
    {"role": "assistant", "content": "Leaves are picked and steamed. They are then rolled and dried."},
    {"role": "user", "content": "Now say it in one sentence."},
]


@pytest.mark.embedded
def test_qwen_answers_the_same_whatever_was_asked_before():
    """llama.cpp gives a position different numbers in batches of another size or alignment.

    Reusing whatever prefix the last call left made Qwen's answer depend on the calls before it (the
    replies of `make eval` changed between runs with the order in which episodes reached the model).
    Here: the same prompt asked fresh, after another conversation sharing its system prompt, and
    after a longer conversation that starts with it.
    """
    backend = EmbeddedBackend("qwen2.5-coder-1.5b", n_ctx=2048)

    def fresh() -> None:
        loaded = backend._loaded()
        loaded.llama.reset()
        loaded.whole = 0

    def first_token(messages):
        choice = backend.create_chat_completion(messages, top_logprobs=5)["choices"][0]
        return choice["logprobs"]["content"][0]["top_logprobs"]

    fresh()
    expected = first_token(QWEN_ASKED)
    reply = backend.create_chat_completion(QWEN_ASKED, max_tokens=12)["choices"][0]["message"]["content"]
    for before in (QWEN_OTHER, QWEN_LONGER):
        fresh()
        first_token(before)
        assert first_token(QWEN_ASKED) == expected  # the same floats, not close ones
        fresh()
        backend.create_chat_completion(before, max_tokens=4)
        assert backend.create_chat_completion(QWEN_ASKED, max_tokens=12)["choices"][0]["message"]["content"] == reply
    loaded = backend._loaded()
    assert (
        list(loaded.llama.input_ids[: loaded.whole]) == backend._prompt_tokens(loaded.llama, QWEN_ASKED)[: loaded.whole]
    )  # what llama.cpp's chat template made of the messages is what was evaluated ahead of it
