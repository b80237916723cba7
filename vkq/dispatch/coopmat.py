"""Whether the dispatcher offers the cooperative-matrix mat-mat on this device.

The kernel (shaders/mul_mm.comp's COOPMAT, vkq.dispatch.tiles.COOPMAT_TILE)
has two flavours (vkq.device.caps.COOPMAT_FLAVOURS): "float16", the float path's, and
"int8", the int8 path's (types with one; Q8_1 activations of one plane).
Neither is chosen blind: the device must list a fragment shape of the
flavour's types and have enabled its features (DeviceCaps.coopmat_missing,
coopmat_int8_missing say why not), its SPIR-V must have been built (glslang
13, tools/compile_shaders.py), and for each block type it must have checked
itself on this device against the tiled kernel of its path: NMSE at most
CHECK_NMSE on a small random case, run at the type's first mat-mat
(vkq.resolve) or by `vkq tune` and remembered per device and flavour beside
`vkq tune`'s results, in a file of its own (`checks_path`). A type whose
check failed is refused until the file is removed (`vkq tune --reset`
removes it with the tuning file). Offered is not yet taken: where `vkq
tune` raced the float16 kernel against the tuned tiles and it was not
clearly faster, the dispatcher takes the tiles (vkq.dispatch.tile_tuning);
where it was, the kernel at the candidate tile that raced fastest (each
checked as above first).

VKQ_MATMUL (`env_kernel`) forces a kernel for every mat-mat: "tiled", the
plain tiled kernel; "coopmat", the float16 flavour; "coopmat-int8", the
int8 flavour; a forced flavour runs unchecked, and is refused in one line
where the device lacks it or the matrix's type has no such flavour.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from ..blocks.formats import FORMATS, BlockFormat
from ..device.caps import COOPMAT_FLAVOURS, DeviceCaps, int8_padded
from ..device.device_info import DeviceInfo
from ..device.shader_variants import MatMulVariant, spirv_path
from .paths import env_choice
from .tuning_store import device_key, locked, remove, tuning_path, write_json

CHECK_NMSE = 5e-4  # the project's bound for a kernel against float64, here against the path's tiled kernel
# The self-check's case: rows and columns not multiples of the tiles (their
# edges are where a wrong split shows), K of whole 256-element blocks.
CHECK_SHAPE = (80, 512, 40)  # rows, K, columns

OFFERED, UNCHECKED, REFUSED, UNAVAILABLE = "offered", "unchecked", "refused", "unavailable"
FLAVOURS = COOPMAT_FLAVOURS
# VKQ_MATMUL's values: the kernel forced, and the flavour it is (None: the plain tiled kernel).
KERNELS = {"tiled": None, "coopmat": "float16", "coopmat-int8": "int8"}


def env_kernel() -> str | None:
    """VKQ_MATMUL's kernel (a key of KERNELS), or None where it is not set."""
    return env_choice("VKQ_MATMUL", KERNELS, "a mat-mat kernel")


def check_key(qtype: str, flavour: str = "float16") -> str:
    """A type's key in the checks file: its name (the float16 flavour), or "NAME int8"."""
    return qtype if flavour == "float16" else f"{qtype} {flavour}"


def _known_key(key: str) -> bool:
    name, _, flavour = key.partition(" ")
    return name in FORMATS and flavour in ("", "int8")


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
    return {q: r for q, r in data["checks"].items() if _known_key(q) and isinstance(r, dict)}


def save_check(info: DeviceInfo, key: str, record: dict) -> Path:
    """Add one record (key: check_key's), under a lock, written whole (temporary file + rename)."""
    path = checks_path(info)
    with locked(path):
        checks = {**load_checks(info), key: record}
        return write_json(path, {"device": device_key(info), "checks": checks})


def reset(info: DeviceInfo) -> bool:
    return remove(checks_path(info))


def make_record(nmse: float | None, error: str | None = None) -> dict:
    """A check's record: its NMSE against the path's tiled kernel, or the
    error that kept it from running."""
    shape = dict(zip(("rows", "k", "n"), CHECK_SHAPE))
    return {"nmse": nmse, "limit": CHECK_NMSE, **shape, **({"error": error} if error else {})}


def passes(record: dict) -> bool:
    """A record that lets the kernel be offered: a finite NMSE within
    CHECK_NMSE, measured (whatever else the file says)."""
    nmse = record.get("nmse")
    return (isinstance(nmse, (int, float)) and not isinstance(nmse, bool) and math.isfinite(nmse)
            and 0 <= nmse <= CHECK_NMSE and not record.get("error"))


def variant(fmt: BlockFormat, flavour: str = "float16") -> MatMulVariant:
    return MatMulVariant(fmt.name, mmq=flavour == "int8", coopmat=True)


def reference_path(flavour: str) -> str:
    """The path of the tiled kernel a flavour is checked against (the same activations, for int8)."""
    return "mmvq" if flavour == "int8" else "dmmv"


def device_missing(caps: DeviceCaps, flavour: str = "float16") -> str | None:
    """Why no type can have the flavour on this device (None: each may, once checked)."""
    return caps.coopmat_int8_missing if flavour == "int8" else caps.coopmat_missing


def fragment(caps: DeviceCaps, flavour: str = "float16") -> tuple[int, int, int]:
    return tuple(caps.coopmat_int8_fragment if flavour == "int8" else caps.coopmat_fragment)


def type_missing(caps: DeviceCaps, fmt: BlockFormat, flavour: str = "float16") -> str | None:
    """Why fmt's matrices cannot have the flavour here: the device's reason,
    a type without an int8 path, SPIR-V not built."""
    missing = device_missing(caps, flavour)
    if missing:
        return missing
    if flavour == "int8" and not fmt.has_int8_path:
        return f"{fmt.name} has no int8 path"
    if not spirv_path(variant(fmt, flavour)).exists():
        return (f"{variant(fmt, flavour).name}.spv was not built (tools/compile_shaders.py found no "
                f"glslang >= 13)")
    return None


def status(caps: DeviceCaps, fmt: BlockFormat, checks: dict[str, dict], flavour: str = "float16") -> tuple[str, str]:
    """(OFFERED, UNCHECKED, REFUSED or UNAVAILABLE, why) for fmt's matrices."""
    missing = type_missing(caps, fmt, flavour)
    if missing:
        return UNAVAILABLE, missing
    against = "int8" if flavour == "int8" else "float"
    record = checks.get(check_key(fmt.name, flavour))
    if record is None:
        return UNCHECKED, "not yet checked on this device (it is at its first mat-mat, or by vkq tune)"
    if not passes(record):
        why = record.get("error") or f"NMSE {record.get('nmse')!r} against the {against} kernel > {CHECK_NMSE:g}"
        return REFUSED, f"failed its self-check on this device: {why}"
    return OFFERED, f"self-checked on this device: NMSE {record['nmse']:.1e} against the {against} tiled kernel"


def forced_problem(caps: DeviceCaps, fmt: BlockFormat, kernel: str, path: str | None, activations: str) -> str | None:
    """Why VKQ_MATMUL=`kernel` cannot run on fmt's matrices here (None: it can):
    the device lacks the flavour, the type has none, or the caller's path or
    activations contradict it. One line, for a ValueError."""
    flavour = KERNELS[kernel]
    if flavour is None:
        return None
    want = reference_path(flavour)
    if path is not None and path != want:
        return f"VKQ_MATMUL={kernel} runs the {want} path; the call asked for {path}"
    if flavour == "int8" and activations != "q8_1":
        return f"VKQ_MATMUL={kernel} takes one activation plane (q8_1), not {activations}"
    missing = type_missing(caps, fmt, flavour)
    if missing:
        return f"VKQ_MATMUL={kernel}: not for {fmt.name} on this device ({missing})"
    return None


def shapes_line(info: DeviceInfo) -> str:
    """`vkq info`'s list of the device's cooperative-matrix shapes."""
    from ..device.caps import coopmat_shape_label

    if not info.coopmat_shapes:
        return "none listed"
    return ", ".join(coopmat_shape_label(s) for s in info.coopmat_shapes)


def summary(caps: DeviceCaps, checks: dict[str, dict]) -> str:
    """`vkq info`'s line: per flavour, why it is not offered, or for which types it is."""
    parts = []
    for flavour in FLAVOURS:
        missing = device_missing(caps, flavour)
        if missing:
            parts.append(f"{flavour} not offered ({missing})")
            continue
        types = [fmt for fmt in FORMATS.values() if flavour != "int8" or fmt.has_int8_path]
        by_status: dict[str, list[str]] = {}
        for fmt in types:
            by_status.setdefault(status(caps, fmt, checks, flavour)[0], []).append(fmt.name)
        m, n, k = fragment(caps, flavour)
        padded = " (padded halves)" if flavour == "int8" and int8_padded(k) else ""
        said = "; ".join(f"{what} for {', '.join(by_status[what]) if len(by_status[what]) < len(types) else 'every type'}"
                         for what in (OFFERED, REFUSED, UNCHECKED, UNAVAILABLE) if what in by_status)
        sums = "int32" if flavour == "int8" else "float32"
        parts.append(f"{flavour} {m}x{n}x{k}{padded} -> {sums}: {said}")
    return " | ".join(parts)
