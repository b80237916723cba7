"""The driver's compiled pipelines kept across runs.

Every pipeline a Kompute manager creates goes through its one
VkPipelineCache (kp patch 0013). A Backend merges the file kept for its
device and driver into that cache when it opens, before its first pipeline,
and writes the cache back when it is done (garbage-collected, or at the
process's exit), so that a later process skips the driver's compiler for
every pipeline an earlier one made. Many GPU drivers keep such a disk cache
of their own (Mesa's, NVIDIA's); this one serves where they do not.

The file is named by vendor, device and driver version, beside the tuning
files; data made by another device or driver is ignored by kp (the cache's
header: vendor, device and pipelineCacheUUID) and replaced at the next
save. A cache that holds no pipeline (lavapipe 22.3's: its header alone) is
not written, nor is the cache of a Backend that found its device does not
run its dispatches (a null GPU: Backend.executes). A file that cannot be
read or written costs a warning, never the run. VKQ_PIPELINE_CACHE=off:
neither read nor written.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from .cache_files import write_atomically
from .device_info import DeviceInfo, file_stem

# VkPipelineCacheHeaderVersionOne: length, version, vendorID, deviceID
# (4 bytes each) and pipelineCacheUUID (16). Data no longer than this holds no pipeline.
HEADER_BYTES = 32
ENV = "VKQ_PIPELINE_CACHE"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


def cache_path(info: DeviceInfo, directory: Path) -> Path:
    """The file kept for this device and driver in directory."""
    return Path(directory) / f"{file_stem(info)}.pipelines"


def load(manager, path: Path) -> bytes:
    """Merges path's pipelines into manager's cache (before its first
    pipeline); the bytes merged, or b"" where there was nothing to merge
    (no file, another device's or driver's data, a kp without the cache)."""
    if not enabled() or not hasattr(manager, "load_pipeline_cache"):
        return b""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return b""
    except OSError as e:
        warnings.warn(f"pipeline cache {path} not read ({e}): pipelines are compiled anew", stacklevel=2)
        return b""
    return data if len(data) > HEADER_BYTES and manager.load_pipeline_cache(data) else b""


def save(manager, path: Path, loaded: bytes = b"") -> bool:
    """Writes manager's cache to path (atomically: a reader sees the old
    file or the new one) where it holds pipelines and differs from what was
    loaded; whether it wrote."""
    if not enabled() or not hasattr(manager, "pipeline_cache_data"):
        return False
    data = manager.pipeline_cache_data()
    if len(data) <= HEADER_BYTES or data == loaded:
        return False
    try:
        write_atomically(path, data)
    except OSError as e:
        warnings.warn(f"pipeline cache {path} not written ({e})", stacklevel=2)
        return False
    return True
