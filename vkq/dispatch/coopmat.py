"""Whether the dispatcher offers the cooperative-matrix mat-mat on this device.

The kernel (shaders/mul_mm.comp's COOPMAT, vkq.dispatch.tiles.COOPMAT_TILE)
is never chosen blind: the device must have enabled its features
(DeviceCaps.coopmat_missing says why not), its SPIR-V must have been built
(glslang 13, tools/compile_shaders.py), and for each block type it must
have checked itself on this device against the float kernel: NMSE at most
CHECK_NMSE on a small random case, run at the type's first mat-mat
(vkq.resolve) or by `vkq tune` and remembered per device beside `vkq tune`'s
results, in a file of its own (`checks_path`). A type whose check failed is
refused until the file is removed (`vkq tune --reset` removes it with the
tuning file). Offered is not yet taken: where `vkq tune` raced the kernel
against the tuned tiles and it was not clearly faster, the dispatcher takes
the tiles (vkq.dispatch.tile_tuning); where it was, the kernel at the
candidate tile that raced fastest (each checked as above first).
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from ..blocks.formats import FORMATS, BlockFormat
from ..device.caps import DeviceCaps
from ..device.device_info import DeviceInfo
from ..device.shader_variants import MatMulVariant, spirv_path
from .tuning_store import device_key, locked, remove, tuning_path, write_json

CHECK_NMSE = 5e-4  # the project's bound for a kernel against float64, here against the float kernel
# The self-check's case: rows and columns not multiples of the tiles (their
# edges are where a wrong split shows), K of whole 256-element blocks.
CHECK_SHAPE = (80, 512, 40)  # rows, K, columns

OFFERED, UNCHECKED, REFUSED, UNAVAILABLE = "offered", "unchecked", "refused", "unavailable"


def checks_path(info: DeviceInfo) -> Path:
    """The device's self-check results: beside its tuning file, named as it is."""
    path = tuning_path(info)
    return path.with_name(path.stem + "-coopmat.json")


def load_checks(info: DeviceInfo) -> dict[str, dict]:
    """{qtype: record} of this device; {} (with a warning) for a file that is
    unreadable or of another device: the types are then checked again."""
    path = checks_path(info)
    try:
        if not path.exists():
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        warnings.warn(f"vkq: ignoring unreadable cooperative-matrix checks {path}: {e}", stacklevel=2)
        return {}
    if not isinstance(data, dict) or data.get("device") != device_key(info) or not isinstance(data.get("checks"),
                                                                                               dict):
        warnings.warn(f"vkq: ignoring cooperative-matrix checks {path}: another device or format", stacklevel=2)
        return {}
    return {q: r for q, r in data["checks"].items() if q in FORMATS and isinstance(r, dict)}


def save_check(info: DeviceInfo, qtype: str, record: dict) -> Path:
    """Add one type's record, under a lock, written whole (temporary file + rename)."""
    path = checks_path(info)
    with locked(path):
        checks = {**load_checks(info), qtype: record}
        return write_json(path, {"device": device_key(info), "checks": checks})


def reset(info: DeviceInfo) -> bool:
    return remove(checks_path(info))


def make_record(nmse: float | None, error: str | None = None) -> dict:
    """A check's record: its NMSE against the float kernel, or the error
    that kept it from running."""
    shape = dict(zip(("rows", "k", "n"), CHECK_SHAPE))
    return {"nmse": nmse, "limit": CHECK_NMSE, **shape, **({"error": error} if error else {})}


def passes(record: dict) -> bool:
    """A record that lets the kernel be offered: a finite NMSE within
    CHECK_NMSE, measured (whatever else the file says)."""
    nmse = record.get("nmse")
    return (isinstance(nmse, (int, float)) and not isinstance(nmse, bool) and math.isfinite(nmse)
            and 0 <= nmse <= CHECK_NMSE and not record.get("error"))


def variant(fmt: BlockFormat) -> MatMulVariant:
    return MatMulVariant(fmt.name, coopmat=True)


def device_missing(caps: DeviceCaps) -> str | None:
    """Why no type can have the kernel on this device (None: each may, once checked)."""
    return caps.coopmat_missing


def status(caps: DeviceCaps, fmt: BlockFormat, checks: dict[str, dict]) -> tuple[str, str]:
    """(OFFERED, UNCHECKED, REFUSED or UNAVAILABLE, why) for fmt's matrices."""
    missing = device_missing(caps)
    if missing:
        return UNAVAILABLE, missing
    if not spirv_path(variant(fmt)).exists():
        return UNAVAILABLE, (f"{variant(fmt).name}.spv was not built (tools/compile_shaders.py found no "
                             f"glslang >= 13)")
    record = checks.get(fmt.name)
    if record is None:
        return UNCHECKED, "not yet checked on this device (it is at its first mat-mat, or by vkq tune)"
    if not passes(record):
        why = record.get("error") or f"NMSE {record.get('nmse')!r} against the float kernel > {CHECK_NMSE:g}"
        return REFUSED, f"failed its self-check on this device: {why}"
    return OFFERED, f"self-checked on this device: NMSE {record['nmse']:.1e} against the float kernel"


def summary(caps: DeviceCaps, checks: dict[str, dict]) -> str:
    """`vkq info`'s line: why the kernel is not offered, or for which types it is."""
    missing = device_missing(caps)
    if missing:
        return f"not offered ({missing})"
    by_status: dict[str, list[str]] = {}
    for name, fmt in FORMATS.items():
        by_status.setdefault(status(caps, fmt, checks)[0], []).append(name)
    parts = [f"{what} for {', '.join(by_status[what]) if len(by_status[what]) < len(FORMATS) else 'every type'}"
             for what in (OFFERED, REFUSED, UNCHECKED, UNAVAILABLE) if what in by_status]
    return ("16x16x16 float16 -> float32; " + "; ".join(parts)
            + (" (checked against the float kernel at a type's first mat-mat or by vkq tune)" if UNCHECKED in by_status else ""))
