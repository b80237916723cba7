"""ggml-vulkan's own mat-vec pipelines, beside vkq's in `vkq pipelines --ggml`:
the SPIR-V that libggml-vulkan.so carries (one exported `<name>_data`
array and `<name>_len` size per shader), read from the library file without
loading it, and the launch ggml gives it on a device, so that the same
driver compiles both.

ggml's launch of its float mat-vec (`mul_mat_vec_<type>_f32_f32`) and int8
one (`mul_mat_vec_<type>_q8_1_f32`), as ggml-vulkan.cpp builds its
pipelines (ggml_vk_load_shaders): specialization constants (BLOCK_SIZE,
NUM_ROWS, NUM_COLS); BLOCK_SIZE the device's subgroup size (its
DMMV_WG_SIZE_SUBGROUP workgroup, the subgroup reduction without shared
memory: `_subgroup_no_shmem`) required as the subgroup size; NUM_ROWS 2
for Q4_0's float path (2 x rm_stdq) and Q4_K's (rm_kq), 1 on the int8
path (rm_stdq_int, rm_kq_int), all on a GPU that is not AMD GCN; five
storage buffers; the push constants of vk_mat_vec_push_constants (within
the 32 words declared here).
"""
from __future__ import annotations

import struct
from pathlib import Path

from ..device.pipeline_stats import PipelineSpec
from .llama_server import wheel_bin

GGML_TYPES = ("Q4_0", "Q4_K")  # the types compared
GGML_BINDINGS = 5  # mul_mat_vec_num_bindings
PUSH_WORDS = 32
# NUM_ROWS by (type, path) on a GPU other than AMD GCN.
ROWS = {("Q4_0", "dmmv"): 2, ("Q4_K", "dmmv"): 2, ("Q4_0", "mmvq"): 1, ("Q4_K", "mmvq"): 1}


def default_library() -> Path | None:
    """libggml-vulkan.so of the pinned llama-server wheel, or None."""
    where = wheel_bin()
    path = where / "libggml-vulkan.so" if where is not None else None
    return path if path is not None and path.exists() else None


def _dynamic_symbols(data: bytes) -> dict[str, int]:
    """An ELF64 file's dynamic symbols: name -> file offset of its value."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next(s for s in sections if s[1] == 11)  # SHT_DYNSYM
    strtab = sections[dynsym[6]]
    out = {}
    for i in range(dynsym[5] // 24):
        name_off, _, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, dynsym[4] + 24 * i)
        if not value or shndx == 0 or shndx >= len(sections):
            continue
        end = data.index(b"\0", strtab[4] + name_off)
        name = data[strtab[4] + name_off:end].decode()
        sec = sections[shndx]
        out[name] = value - sec[3] + sec[4]  # address - sh_addr + sh_offset
    return out


def extract(library: Path, names: list[str], into: Path) -> dict[str, Path]:
    """The SPIR-V of each named shader, written to `into`/<name>.spv."""
    data = library.read_bytes()
    symbols = _dynamic_symbols(data)
    into.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names:
        if f"{name}_data" not in symbols:
            raise ValueError(f"{library} has no shader {name}")
        length, = struct.unpack_from("<Q", data, symbols[f"{name}_len"])
        code = data[symbols[f"{name}_data"]:symbols[f"{name}_data"] + length]
        if code[:4] != b"\x03\x02\x23\x07":
            raise ValueError(f"{name} in {library} is not SPIR-V")
        (into / f"{name}.spv").write_bytes(code)
        out[name] = into / f"{name}.spv"
    return out


def shader_name(qtype: str, path: str) -> str:
    kind = "f32_f32" if path == "dmmv" else "q8_1_f32"
    return f"mul_mat_vec_{qtype.lower()}_{kind}_subgroup_no_shmem"


def pipelines(library: Path, into: Path, subgroup_size: int, columns: list[int],
              types=GGML_TYPES) -> list[tuple[str, str, int, PipelineSpec]]:
    """(type, path, columns, PipelineSpec) of ggml's mat-vec on a device of
    this subgroup size, for each type, path and column count."""
    wanted = [(t, p) for t in types for p in ("dmmv", "mmvq")]
    files = extract(library, [shader_name(t, p) for t, p in wanted], into)
    out = []
    for qtype, path in wanted:
        name = shader_name(qtype, path)
        for n in columns:
            spec = PipelineSpec(f"ggml {name}", str(files[name]), (subgroup_size, ROWS[qtype, path], n),
                                ("storage",) * GGML_BINDINGS, PUSH_WORDS, subgroup_size)
            out.append((qtype, path, n, spec))
    return out
