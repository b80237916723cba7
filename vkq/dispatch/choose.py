"""Pick the pipeline and its parameters for one mat-vec on one device.

Choice order (each level wins over the ones after it):
  1. an explicit `path=` argument;
  2. the environment: VKQ_PATH=dmmv|mmvq, VKQ_DISABLE_INT_DOT=1;
  3. this device's own tuning results (`vkq tune`, vkq.dispatch.tuning_store);
  4. the vendor table of the device's class (vkq.dispatch.tables);
  5. safe limits of the device, applied last to whatever was chosen: no
     subgroup reduction without subgroup arithmetic, OpSDot only where the
     int-dot feature is enabled, workgroup and shared memory within limits,
     chunks per thread dividing the row; and, once the buffers are known
     (`fit_bindings`), texel bindings only where they fit the device's
     texel buffer limit.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..formats import CHUNK, BlockFormat
from . import tables, tuning_store
from .classify import DeviceClass, classify
from .config import PATHS, PipelineConfig


@dataclass(frozen=True)
class DeviceCaps:
    """What the dispatcher needs to know of a device (see vkq.runtime)."""

    vendor: str
    device_type: str
    subgroup_size: int
    subgroup_arithmetic: bool
    int_dot: bool  # shaderIntegerDotProduct is enabled on the logical device
    max_shared_memory: int
    max_workgroup_invocations: int
    max_texel_buffer_elements: int = 65536  # Vulkan's guaranteed minimum unless the device reports more


def env_path() -> str | None:
    value = os.environ.get("VKQ_PATH", "").strip().lower()
    if not value:
        return None
    if value not in PATHS:
        raise ValueError(f"VKQ_PATH={value!r} is not a path; use one of {', '.join(PATHS)}")
    return value


def int_dot_disabled_by_env() -> bool:
    return os.environ.get("VKQ_DISABLE_INT_DOT", "") not in ("", "0")


def check_path(path) -> str:
    if not isinstance(path, str) or path.lower() not in PATHS:
        raise ValueError(f"unknown path {path!r}; expected one of {', '.join(PATHS)} (or None)")
    return path.lower()


def apply_limits(cfg: PipelineConfig, caps: DeviceCaps, fmt: BlockFormat, k: int, ncols: int) -> PipelineConfig:
    """Make a configuration runnable on this device, whatever proposed it."""
    wg = min(cfg.wg_size, caps.max_workgroup_invocations)
    rows = cfg.rows_per_wg
    # The reduction buffer holds wg x rows x ncols floats (declared in either mode).
    while rows > 1 and wg * rows * ncols * 4 > caps.max_shared_memory:
        rows //= 2
    chunks = -(-k // CHUNK)
    cpt = cfg.chunks_per_thread
    while cpt > 1 and chunks % cpt:
        cpt //= 2
    return replace(
        cfg,
        wg_size=wg,
        rows_per_wg=rows,
        chunks_per_thread=cpt,
        subgroup=cfg.subgroup and caps.subgroup_arithmetic,
        int_dot=cfg.int_dot and caps.int_dot and not int_dot_disabled_by_env(),
    )


def fit_bindings(cfg: PipelineConfig, caps: DeviceCaps, x_bytes: int, weights_buffer_bytes: int) -> PipelineConfig:
    """Fall back to storage buffers where a texel view would hold more texels
    than the device's maxTexelBufferElements (x in 16-byte texels, the
    weights in 4-byte ones, the smallest of their views). The fallback is
    named in `source`; the numbers are the same either way."""
    notes = []
    if cfg.x_binding == "texel" and x_bytes // 16 > caps.max_texel_buffer_elements:
        notes.append(f"x as storage: {x_bytes // 16} texels > maxTexelBufferElements {caps.max_texel_buffer_elements}")
        cfg = replace(cfg, x_binding="storage")
    if cfg.weights_binding == "texel" and weights_buffer_bytes // 4 > caps.max_texel_buffer_elements:
        notes.append(f"weights as storage: {weights_buffer_bytes // 4} words > maxTexelBufferElements "
                     f"{caps.max_texel_buffer_elements}")
        cfg = replace(cfg, weights_binding="storage")
    return replace(cfg, source=f"{cfg.source}; {'; '.join(notes)}") if notes else cfg


class Dispatcher:
    """The choice for one device: its class, its vendor table and tuning."""

    def __init__(self, caps: DeviceCaps, device_class: DeviceClass, tuned: dict[str, dict]):
        self.caps = caps
        self.device_class = device_class
        self.tuned = tuned

    @classmethod
    def for_device(cls, info, caps: DeviceCaps) -> "Dispatcher":
        return cls(caps, classify(info), tuning_store.load(info))

    def choose(self, fmt: BlockFormat, rows: int, k: int, ncols: int = 1, path: str | None = None) -> PipelineConfig:
        if path is not None:
            path, path_source = check_path(path), "argument"
        else:
            path, path_source = env_path(), "env VKQ_PATH"
        if path == "mmvq" and not fmt.has_int8_path:
            raise ValueError(f"{fmt.name} has no int8 (mmvq) path; use path='dmmv'")

        tuned = self.tuned.get(fmt.name)
        if tuned is not None and ncols == 1 and (path or tuned["best"]) in tuned:
            # Tuning measures one column; several columns use the table.
            chosen = path or tuned["best"]
            params, source = tuned[chosen], "tuned on this device (vkq tune)"
        else:
            params, source = tables.lookup(self.device_class, fmt.name, rows, k, ncols, path)
            chosen = params["path"]
        if path is not None:
            source = f"path from {path_source}; parameters from {source}"
        cfg = PipelineConfig(
            path=chosen,
            int_dot=chosen == "mmvq",
            subgroup=params["reduction"] == "subgroup",
            wg_size=params["wg_size"],
            rows_per_wg=params["rows_per_wg"],
            chunks_per_thread=params.get("chunks_per_thread", 1),
            split_k=params.get("split_k", True),
            weights_binding=params.get("weights_binding", "storage"),
            x_binding=params.get("x_binding", "storage"),
            source=source,
        )
        return apply_limits(cfg, self.caps, fmt, k, ncols)
