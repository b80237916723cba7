"""`vkq info`: the Vulkan devices, what they can do, and which paths vkq picks."""
from __future__ import annotations

import os
import re
import textwrap

from ..blocks.formats import FORMATS
from ..device.device_info import device_index_from_env, enumerate_devices
from ..dispatch import coopmat, tables, tile_tuning, tiles
from ..errors import DeviceNotFound
from ..dispatch.config import describe
from ..dispatch.tuning_store import tuning_path

NOTE_WIDTH = 100  # characters of a rule's note that `vkq info` shows without --verbose
WIDTH = 120  # characters of a line of `vkq info` (longer ones are wrapped under their value)


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
    return f"unmeasured ({' and '.join(words[b] for b in sorted(bases - {'measured'}))})"


def capability_lines(info) -> list[str]:
    """What the device is and can do, as `vkq info` lists it."""
    sg = f"{info.subgroup_size}"
    if info.subgroup_min_size and info.subgroup_max_size:
        sg += f" (min {info.subgroup_min_size}, max {info.subgroup_max_size})"
    return [
        f"device {info.index}: {info.name}",
        f"  vendor          {info.vendor} (0x{info.vendor_id:04x}), {info.device_type}, Vulkan {info.api_version}",
        f"  driver          {info.driver_name or '?'} {info.driver_info or ''}".rstrip(),
        f"  subgroup        size {sg}, arithmetic {_yes(info.subgroup_arithmetic)}",
        f"  int8 dot        extension+feature {_yes(info.integer_dot_product)}, "
        f"accelerated {_yes(info.integer_dot_4x8_packed_accelerated)}",
        f"  buffers         storage max range {info.max_storage_buffer_range / 2**20:.0f} MiB, "
        f"texel {info.max_texel_buffer_elements / 2**20:.0f} Mi elements; "
        f"shared memory {info.max_compute_shared_memory_size // 1024} KiB; "
        f"device memory {info.device_local_memory / 2**30:.1f} GiB",
        f"  timestamps      {_yes(info.timestamps_supported)} (period {info.timestamp_period:g} ns)",
    ]


def backend_lines(backend) -> list[str]:
    """vkq's paths on the device, its device class and tuning file: the rest of `vkq info`'s summary."""
    dev, disp = backend.device, backend.dispatcher
    mmvq = "OpSDot (int-dot feature enabled)" if dev.int_dot_enabled else "int32 emulation (no int-dot feature)"
    return [
        "  paths           dmmv (dequantize to float): every type",
        f"                  mmvq (int8 dot products): quantized types, {mmvq}",
        f"  device class    {disp.device_class.key} ({'; '.join(disp.device_class.reasons)})",
        f"  tuning file     {tuning_path(backend.device_info)} ({'loaded' if disp.tuned else 'none'})",
    ] + matmul_lines(backend)


def matmul_choice(disp, bases: bool) -> str:
    """The tiled mat-mat's launch for a Q4_0 4096 x 4096 matrix (with what it
    rests on where bases), or why VKQ_MATMUL's kernel is refused here."""
    try:
        cfg = tile_tuning.choose(disp, FORMATS["Q4_0"], 4096)
    except ValueError as e:  # (VKQ_MATMUL forcing a kernel the device lacks)
        return f"refused: {e}"
    return f"{cfg.describe()} (Q4_0, K 4096)" + (f" <- {cfg.source}" if bases else "")


def matmul_lines(backend) -> list[str]:
    """The tiled mat-mat's launch (more than MAX_COLS columns) for a Q4_0
    4096 x 4096 matrix, and the kernels a model's prompt chunks take, each
    with what it rests on."""
    disp = backend.dispatcher
    kernels, why = tiles.prompt_kernels(disp.device_class)
    return [f"  mat-mat         {matmul_choice(disp, bases=True)}",
            f"  coop shapes     {coopmat.shapes_line(backend.device_info)}",
            f"  coop matrix     {coopmat.summary(disp.caps, disp.coopmat_checks)}",
            f"  prompts         {kernels} (vkq generate's chunks) <- {why}"]


def choice_lines(backend, shape: tuple[int, int] = (4096, 4096), verbose: bool = False,
                 types: list[str] | None = None) -> list[str]:
    """The dispatcher's choice per block type, a line each: the launch, the
    table entries (or tuning) that chose it, by label, and what they rest on;
    then the note of every rule used, once, cut to a line (verbose: whole,
    and each choice's full source under its line)."""
    disp = backend.dispatcher
    rows, k = shape
    table = tables.table_label(disp.device_class)
    notes = tables.rule_notes(disp.device_class)
    lines = [f"  dispatcher      choice per block type for a {rows} x {k} mat-vec, one column "
             f"(<- the entries of {table} that chose it)"]
    used: dict[str, str] = {}  # label -> the rule as a source names it ("rule 5 [measured] path=dmmv")
    unmeasured = False
    for name, fmt in FORMATS.items():
        if types is not None and name not in types:
            continue
        cfg = disp.choose(fmt, rows, k, 1)
        entries = cfg.source.replace(f"{table}: ", "").split("; ")
        labels = [e.split(" [")[0] for e in entries]
        used.update((label, e) for label, e in zip(labels, entries) if label in notes)
        said = evidence(cfg.evidence)
        unmeasured |= said.startswith("unmeasured")
        lines.append(f"    {name:7s}  {cfg.kernel}, {describe(cfg.params())} <- {', '.join(labels)}; {said}")
        if verbose:  # (under the value, where the line's own continuation goes)
            lines.append(f"{'':13s}{cfg.source}")
    width = None if verbose else NOTE_WIDTH
    for i, (label, entry) in enumerate(sorted(used.items(), key=lambda kv: _rule_order(kv[0]))):
        note = notes[label]
        if width is not None and len(note) > width:
            note = note[:width - 3].rstrip() + "..."
        lines.append(f"  {'rules' if i == 0 else '':16s}{entry}: {note}")
    if used and not verbose:
        lines.append(f"  {'':16s}(vkq info --verbose: every rule's whole note, every choice's whole source)")
    if unmeasured:
        lines.append(f"  {'':16s}unmeasured: `vkq tune` measures launches on this device and keeps the best")
    return lines



def _rule_order(label: str) -> tuple[str, int]:
    """'nvidia/* rule 2' -> ('nvidia/*', 2); 'rule 10' -> ('', 10): the tables' order."""
    origin, _, number = label.rpartition("rule ")
    return origin.strip(), int(number)


def wrap(line: str, width: int = WIDTH) -> list[str]:
    """A line of `vkq info` as lines of at most `width` characters (a word
    longer than that stays whole), continued under its value: after a
    label's run of spaces ("  device class    ..."), else two columns in."""
    if len(line) <= width:
        return [line]
    labelled = re.match(r"( *\S+(?: \S+)*? {2,})\S", line)
    indent = len(labelled.group(1)) if labelled else len(line) - len(line.lstrip())
    return textwrap.wrap(line, width, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False)


def summary_lines(backend, shape: tuple[int, int] = (4096, 4096)) -> list[str]:
    """What runs on the device, without the bases (--verbose has them): its
    class and tuning file, the mat-vec's kernel per block type, grouped (with
    vkq generate's activations where they change it), the mat-mat's, the
    cooperative-matrix kernel, and a prompt's kernels."""
    from ..blocks.activations import DEFAULT_ACTIVATIONS, GENERATE_ACTIVATIONS

    dev, disp = backend.device, backend.dispatcher
    rows, k = shape
    mmvq = "OpSDot" if dev.int_dot_enabled else "int32 emulation"

    def by_kernel(activations: str) -> str:
        groups: dict[str, list[str]] = {}
        for name, fmt in FORMATS.items():
            groups.setdefault(disp.choose(fmt, rows, k, 1, None, activations).kernel, []).append(name)
        return "; ".join(f"{kernel}: {'every type' if len(names) == len(FORMATS) else ', '.join(names)}"
                         for kernel, names in groups.items())

    plain, generate = by_kernel(DEFAULT_ACTIVATIONS), by_kernel(GENERATE_ACTIVATIONS)
    kernels, _ = tiles.prompt_kernels(disp.device_class)
    lines = [
        f"  paths           dmmv (dequantize to float): every type; mmvq (int8 dot products): quantized types, {mmvq}",
        f"  device class    {disp.device_class.key}",
        f"  tuning file     {tuning_path(backend.device_info)} ({'loaded' if disp.tuned else 'none'})",
        f"  mat-vec         {rows} x {k}, one column: {plain}",
    ]
    if generate != plain:
        lines.append(f"  vkq generate    its {GENERATE_ACTIVATIONS} activations: {generate}")
    return lines + [
        f"  mat-mat         {matmul_choice(disp, bases=False)}",
        f"  coop matrix     {coopmat.summary(disp.caps, disp.coopmat_checks)}",
        f"  prompts         {kernels} (vkq generate's chunks)",
        "  (vkq info --verbose: each block type's launch and what every choice rests on; vkq info TYPE: one type's)",
    ]


def report(verbose: bool = False, device: int | None = None, types: list[str] | None = None) -> str:
    """Every device (device, or VKQ_DEVICE set: that one alone, or a
    one-line error where there is no such device), what it is and what runs
    there; verbose: and every choice's launch and bases; types: those block
    types' choices and bases alone."""
    from ..backend import Backend  # opens devices; imported late so `vkq --help` stays fast

    if types is not None:
        unknown = [t for t in types if t not in FORMATS]
        if unknown:
            raise ValueError(f"unknown block type {', '.join(unknown)} (vkq info TYPE: one of {', '.join(FORMATS)})")
    lines = []
    devices = enumerate_devices()
    if device is not None:
        if not 0 <= device < len(devices):
            raise DeviceNotFound(f"--device {device}: no Vulkan device with that index ({len(devices)} found: "
                                 f"0..{len(devices) - 1})")
        devices = [devices[device]]
    elif os.environ.get("VKQ_DEVICE", "").strip():
        index = device_index_from_env(None)
        if not 0 <= index < len(devices):
            raise DeviceNotFound(f"VKQ_DEVICE={index}: no Vulkan device with that index ({len(devices)} found: "
                                 f"0..{len(devices) - 1}); unset VKQ_DEVICE to list them all")
        devices = [devices[index]]
        lines.append(f"(VKQ_DEVICE={index}: this device alone; unset VKQ_DEVICE to list every device)")
    for info in devices:
        lines += capability_lines(info)
        try:
            backend = Backend(info.index)
        except Exception as e:  # a device vkq cannot open is still listed
            lines.append(f"  vkq             cannot open this device: {e}")
            continue
        if types is not None:
            lines += choice_lines(backend, verbose=True, types=types)
        elif verbose:
            lines += backend_lines(backend) + choice_lines(backend, verbose=True)
        else:
            lines += summary_lines(backend)
        lines.append("")
    return "\n".join(wrapped for line in lines for wrapped in wrap(line))
