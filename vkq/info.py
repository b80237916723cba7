"""`vkq info`: the Vulkan devices, what they can do, and which paths vkq picks."""
from __future__ import annotations

from .device_info import enumerate_devices
from .dispatch.config import describe
from .dispatch.tuning_store import tuning_path
from .formats import FORMATS


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def evidence(bases: frozenset[str]) -> str:
    """What a choice rests on (PipelineConfig.evidence): this device's tuning,
    or the bases of the table entries that made it; measured only when all were."""
    if "tuned" in bases:
        return "measured on this device (vkq tune)"
    if bases == {"measured"}:
        return "measured"
    words = {"ggml": "ggml's rules", "guess": "guesses"}
    return f"unmeasured ({' and '.join(words[b] for b in sorted(bases - {'measured'}))}; `vkq tune` measures this device)"


def report(shape: tuple[int, int] = (4096, 4096)) -> str:
    from .backend import Backend  # opens devices; imported late so `vkq --help` stays fast

    lines = []
    for info in enumerate_devices():
        lines.append(f"device {info.index}: {info.name}")
        lines.append(f"  vendor          {info.vendor} (0x{info.vendor_id:04x}), {info.device_type}, "
                     f"Vulkan {info.api_version}")
        lines.append(f"  driver          {info.driver_name or '?'} {info.driver_info or ''}".rstrip())
        sg = f"{info.subgroup_size}"
        if info.subgroup_min_size and info.subgroup_max_size:
            sg += f" (min {info.subgroup_min_size}, max {info.subgroup_max_size})"
        lines.append(f"  subgroup        size {sg}, arithmetic {_yes(info.subgroup_arithmetic)}")
        lines.append(f"  int8 dot        extension+feature {_yes(info.integer_dot_product)}, "
                     f"accelerated {_yes(info.integer_dot_4x8_packed_accelerated)}")
        lines.append(f"  buffers         storage max range {info.max_storage_buffer_range / 2**20:.0f} MiB, "
                     f"texel {info.max_texel_buffer_elements / 2**20:.0f} Mi elements; "
                     f"shared memory {info.max_compute_shared_memory_size // 1024} KiB; "
                     f"device memory {info.device_local_memory / 2**30:.1f} GiB")
        lines.append(f"  timestamps      {_yes(info.timestamps_supported)} "
                     f"(period {info.timestamp_period:g} ns)")
        try:
            backend = Backend(info.index)
        except Exception as e:  # a device vkq cannot open is still listed
            lines.append(f"  vkq             cannot open this device: {e}")
            continue
        dev = backend.device
        lines.append("  paths           dmmv (dequantize to float): every type")
        mmvq = ("OpSDot (int-dot feature enabled)" if dev.int_dot_enabled
                else "int32 emulation (no int-dot feature)")
        lines.append(f"                  mmvq (int8 dot products): quantized types, {mmvq}")
        rows, k = shape
        disp = backend.dispatcher
        lines.append(f"  device class    {disp.device_class.key} ({'; '.join(disp.device_class.reasons)})")
        lines.append(f"  tuning file     {tuning_path(info)} ({'loaded' if disp.tuned else 'none'})")
        lines.append(f"  dispatcher      choice for a {rows} x {k} mat-vec, one column:")
        for name, fmt in FORMATS.items():
            cfg = disp.choose(fmt, rows, k, 1)
            lines.append(f"    {name:6s} {cfg.kernel}, {describe(cfg.params())}")
            lines.append(f"           <- {cfg.source}")
            lines.append(f"           {evidence(cfg.evidence)}")
        lines.append("")
    return "\n".join(lines)
