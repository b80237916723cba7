"""What the slow tests make once and reuse: llama.cpp's quantizations of
SmolLM2 and the float64 reference's greedy runs on them.

Each is kept outside the checkout, named by a hash of everything it is made
from (its key), so every make target of a CI run and every later clone on the
same machine makes it once. A miss makes it again: the cache only ever
saves time, never decides a result. The key of a reference run includes the
source of the code that computes it (reference_sources()), so a changed
reference is run again. A file is marked at every use; the files of the same
name under other keys that no run has used for STALE_DAYS go when a new one
is made (a changed key leaves its old file behind; two checkouts using two
keys at once each keep theirs).

Where: $VKQ_TEST_CACHE, else $XDG_CACHE_HOME/vkq/tests (~/.cache/vkq/tests).
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STALE_DAYS = 7


def cache_dir() -> Path:
    setting = os.environ.get("VKQ_TEST_CACHE")
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vkq" / "tests"


def _path(name: str, key: str, suffix: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}{suffix}"


def cached_file(name: str, key: str, make: Callable[[Path], object], suffix: str = ".gguf") -> Path:
    """The file made by make(path) for this key: made now on a miss (written
    under another name and renamed, so a reader never sees half of it)."""
    path = _path(name, key, suffix)
    if path.is_file():
        os.utime(path)  # (used now: not stale)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    make(part)
    part.replace(path)
    _drop_stale(name, suffix, keep=path)
    return path


def _drop_stale(name: str, suffix: str, keep: Path) -> None:
    """Remove the files of this name under other keys unused for STALE_DAYS."""
    cutoff = time.time() - STALE_DAYS * 86400
    for other in keep.parent.glob(f"{name}-{'[0-9a-f]' * 16}{suffix}"):
        try:
            if other != keep and other.stat().st_mtime < cutoff:
                other.unlink()
        except FileNotFoundError:  # (another run removed it first)
            pass


def cached_arrays(name: str, key: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """compute()'s arrays for this key, from the cache or computed now."""
    path = cached_file(name, key, lambda part: np.savez(open(part, "wb"), **compute()), ".npz")
    with np.load(path) as stored:
        return {k: stored[k] for k in stored.files}


def file_digest(path: Path) -> str:
    """A key for a file: its size and the hash of its bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return f"{path.stat().st_size}:{h.hexdigest()}"


# The float64 reference decoder (vkq.load_model(path, path="numpy")): the host
# engine and what it reads a file with. A superset is safe: it costs a rerun.
REFERENCE_SOURCES = ("vkq/llama/host.py", "vkq/llama/matvecs.py", "vkq/llama/model.py", "vkq/llama/config.py",
                     "vkq/llama/architectures.py", "vkq/llama/decoding.py", "vkq/blocks/*.py")


def reference_sources() -> str:
    """A key for the code of vkq's float64 reference decoder."""
    h = hashlib.sha256()
    for pattern in REFERENCE_SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()
