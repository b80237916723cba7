"""This device's own tuning results (written by `vkq tune`).

One JSON file per device under the user's cache directory
($XDG_CACHE_HOME/vkq/tuning or ~/.cache/vkq/tuning; VKQ_TUNING_DIR overrides),
named after vendor, device and driver version, so a driver update starts
from the vendor table again. Writes are atomic (temporary file + rename). A
file that is corrupt, of another schema or of another device gives a
warning and is ignored: the dispatcher falls back to the vendor table.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from pathlib import Path

from ..device_info import DeviceInfo
from .config import WEIGHTS_BINDINGS, X_BINDINGS
from .tables import ALL_PARAMS, BINDING_PARAMS, CHUNKS_PER_THREAD, PATHS, REDUCTIONS

SCHEMA = 1


def tuning_dir() -> Path:
    if os.environ.get("VKQ_TUNING_DIR"):
        return Path(os.environ["VKQ_TUNING_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vkq" / "tuning"


def device_key(info: DeviceInfo) -> dict:
    return {"vendor_id": info.vendor_id, "device_id": info.device_id, "name": info.name,
            "driver_version": info.driver_version}


def tuning_path(info: DeviceInfo) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", info.name).strip("-").lower()[:60]
    return tuning_dir() / f"{info.vendor_id:04x}-{info.device_id:04x}-{slug}-drv{info.driver_version}.json"


def _entry_problems(qtype: str, entry: dict) -> list[str]:
    problems = []
    best = entry.get("best")
    if best not in PATHS:
        problems.append(f"{qtype}: best path {best!r}")
    for path in PATHS:
        params = entry.get(path)
        if params is None:
            continue
        required = [p for p in ALL_PARAMS if p != "path" and p not in BINDING_PARAMS]
        if not isinstance(params, dict) or any(p not in params for p in required):
            problems.append(f"{qtype}/{path}: missing parameters")
            continue
        wg, rows = params["wg_size"], params["rows_per_wg"]
        if not isinstance(wg, int) or wg < 1 or wg & (wg - 1) or not isinstance(rows, int) or rows < 1:
            problems.append(f"{qtype}/{path}: bad wg_size/rows_per_wg")
        if (params["reduction"] not in REDUCTIONS or params["chunks_per_thread"] not in CHUNKS_PER_THREAD
                or not isinstance(params["split_k"], bool)):
            problems.append(f"{qtype}/{path}: bad reduction/chunks_per_thread")
        if (params.get("weights_binding", "storage") not in WEIGHTS_BINDINGS
                or params.get("x_binding", "storage") not in X_BINDINGS):
            problems.append(f"{qtype}/{path}: bad weights_binding/x_binding")
    if best in PATHS and best not in entry:
        problems.append(f"{qtype}: best path {best} has no parameters")
    return problems


def load(info: DeviceInfo) -> dict[str, dict]:
    """{qtype: {"best": path, "dmmv": params, "mmvq": params}}; {} if none or unusable."""
    path = tuning_path(info)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        warnings.warn(f"vkq: ignoring unreadable tuning file {path}: {e}; using the vendor table", stacklevel=2)
        return {}
    if data.get("schema") != SCHEMA or data.get("device") != device_key(info):
        warnings.warn(f"vkq: ignoring stale tuning file {path} (other schema or device/driver); "
                      "using the vendor table. Run `vkq tune` again.", stacklevel=2)
        return {}
    entries = data.get("entries")
    problems = [] if isinstance(entries, dict) else ["no entries"]
    for qtype, entry in (entries or {}).items():
        problems += _entry_problems(qtype, entry) if isinstance(entry, dict) else [f"{qtype}: not an object"]
    if problems:
        warnings.warn(f"vkq: ignoring invalid tuning file {path}: {'; '.join(problems[:3])}", stacklevel=2)
        return {}
    return entries


def save(info: DeviceInfo, entries: dict[str, dict], extra: dict | None = None) -> Path:
    """Write atomically: a reader sees the old file or the new one, never half."""
    path = tuning_path(info)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"schema": SCHEMA, "device": device_key(info), **(extra or {}), "entries": entries}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; it is a plain cache file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def reset(info: DeviceInfo) -> bool:
    path = tuning_path(info)
    if path.exists():
        path.unlink()
        return True
    return False
