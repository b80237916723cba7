"""The catalogue of compiled shader variants: one source, many defines.

`tools/compile_shaders.py` compiles every variant listed here; the runtime
looks variants up by the same `Variant` key. A variant's defines come from
the block format table (`vkq.blocks.formats`), so a field's offset slot and the
block size are never written twice.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from ..blocks.formats import FORMATS, BlockFormat
from ..errors import ShadersMissing

# Where compiled modules live: vkq/spirv inside the package, or
# VKQ_SPIRV_DIR (for shader experiments next to an installed vkq).
SPIRV_DIR = Path(os.environ.get("VKQ_SPIRV_DIR") or Path(__file__).parent.parent / "spirv")

# Push-constant slots that carry field offsets (shaders/common.glsl: field0..3).
MAX_FIELDS = 4

# How the mat-vec shader reads the weights: storage buffer loads, or uniform
# texel buffer fetches (branch-free gathers on lavapipe, where storage loads
# at varying offsets are a loop over the lanes). Each is a variant of its own.
WEIGHTS_BINDINGS = ("storage", "texel")
# How it reads x (or its Q8_1 blocks): the same two ways. (A uniform buffer
# for x was measured too: slower than texels on lavapipe, and limited to
# 64 KiB there.)
X_BINDINGS = ("storage", "texel")


def block_defines(qtype: str) -> dict[str, str]:
    """The defines that select a block type's decoder (shaders/blocks.glsl)."""
    fmt: BlockFormat = FORMATS[qtype]
    d = {f"TYPE_{qtype}": "1", "QK": f"{fmt.block_elems}u"}
    for slot, field in enumerate(fmt.fields):
        d[f"FIELD_OFF_{field.name}"] = f"p.field{slot}"
    return d


@dataclass(frozen=True)
class MatVecVariant:
    qtype: str
    mmvq: bool  # int8 path (Q8_1 activations) instead of dequantize-to-float
    int_dot: bool  # MMVQ with OpSDot; False: the same arithmetic in int32
    subgroup: bool  # subgroupAdd reduction; False: shared-memory tree
    mul_mat_id: bool  # expert-indexed (MUL_MAT_ID)
    weights_binding: str = "storage"  # one of WEIGHTS_BINDINGS
    x_binding: str = "storage"  # one of X_BINDINGS

    @property
    def name(self) -> str:
        path = ("mmvq_dot" if self.int_dot else "mmvq_emul") if self.mmvq else "dmmv"
        red = "sg" if self.subgroup else "sh"
        bindings = ("_tw" if self.weights_binding == "texel" else "") + ("_tx" if self.x_binding == "texel" else "")
        return f"mul_mat_vec{'_id' if self.mul_mat_id else ''}_{self.qtype.lower()}_{path}_{red}{bindings}"

    @property
    def source(self) -> str:
        return "mul_mat_vec.comp"

    def defines(self) -> dict[str, str]:
        d = block_defines(self.qtype)
        if self.mmvq:
            d["MMVQ"] = "1"
        if self.int_dot:
            d["INT_DOT"] = "1"
        if self.subgroup:
            d["REDUCE_SUBGROUP"] = "1"
        if self.mul_mat_id:
            d["MUL_MAT_ID"] = "1"
        if self.weights_binding == "texel":
            d["TEXEL_WEIGHTS"] = "1"
        if self.x_binding == "texel":
            d["TEXEL_X"] = "1"
        return d


# How the tiled mat-mat reads its weights and x: both through storage buffers
# or both through texel views (each a compiled variant; a texel view that
# does not fit the device puts both back on storage, vkq.dispatch.tiles).
MATMUL_BINDINGS = ("storage", "texel")


@dataclass(frozen=True)
class MatMulVariant:
    """shaders/mul_mm.comp for one block type: the tiled matrix-matrix
    product, weights dequantized to float, or (mmq) dotted as int8 with Q8_1
    activations, with OpSDot (int_dot) or its int32 emulation; `binding`:
    one of MATMUL_BINDINGS; mul_mat_id: over an expert stack, a column per
    used-expert slot (MUL_MAT_ID); coopmat: on cooperative matrices
    (storage buffers), the float product (float16 tiles, float32 sums) or
    with mmq the int8 one (int8 fragments, int32 sums, the scales applied per
    16 of K), which only a glslang of COOPMAT_GLSLANG or later compiles."""

    qtype: str
    binding: str = "storage"
    mmq: bool = False
    int_dot: bool = False
    mul_mat_id: bool = False
    coopmat: bool = False

    @property
    def name(self) -> str:
        if self.coopmat:
            return f"mul_mm{'_id' if self.mul_mat_id else ''}_{self.qtype.lower()}_coopmat_{'int8' if self.mmq else 'f16'}"
        path = ("mmq_dot" if self.int_dot else "mmq_emul") if self.mmq else "f32"
        return (f"mul_mm{'_id' if self.mul_mat_id else ''}_{self.qtype.lower()}_{path}"
                f"{'_tw_tx' if self.binding == 'texel' else ''}")

    @property
    def source(self) -> str:
        return "mul_mm.comp"

    def defines(self) -> dict[str, str]:
        d = block_defines(self.qtype)
        if self.binding == "texel":
            d.update(TEXEL_WEIGHTS="1", TEXEL_X="1")
        if self.mmq:
            d["MMQ"] = "1"
        if self.int_dot:
            d["INT_DOT"] = "1"
        if self.mul_mat_id:
            d["MUL_MAT_ID"] = "1"
        if self.coopmat:
            d["COOPMAT"] = "1"
        return d


# The glslang major version that compiles GL_KHR_cooperative_matrix (the
# coopmat variants; tools/compile_shaders.py skips them without one).
COOPMAT_GLSLANG = 13


def needs_coopmat_compiler(variant) -> bool:
    return isinstance(variant, MatMulVariant) and variant.coopmat


@dataclass(frozen=True)
class SimpleVariant:
    """A shader compiled once per set of defines."""

    name: str
    source: str
    define_items: tuple[tuple[str, str], ...] = ()

    def defines(self) -> dict[str, str]:
        return dict(self.define_items)


QUANTIZE_Q8_1 = SimpleVariant("quantize_q8_1", "quantize_q8_1.comp")
# MUL_MAT_ID's slots sorted by expert for the tiled mat-mat (shaders/group_by_expert.comp).
GROUP_BY_EXPERT = SimpleVariant("group_by_expert", "group_by_expert.comp")
# Device memory read bandwidth, the reference of `vkq bench`'s "% bw" column:
# through storage buffers, and through texel views (the faster on lavapipe).
MEMBW = SimpleVariant("membw", "membw.comp")
MEMBW_TEXEL = SimpleVariant("membw_texel", "membw.comp", (("TEXEL", "1"),))


@dataclass(frozen=True)
class GetRowsVariant:
    """Rows of a quantized matrix as floats (the token embedding lookup)."""

    qtype: str

    @property
    def name(self) -> str:
        return f"get_rows_{self.qtype.lower()}"

    @property
    def source(self) -> str:
        return "get_rows.comp"

    def defines(self) -> dict[str, str]:
        return block_defines(self.qtype)


@dataclass(frozen=True)
class VectorOpVariant:
    """A vector op of the llama decode step (a module of vkq/llama/vector_ops/), shaders/<op>.comp;
    `subgroup`: its workgroup reductions use subgroup arithmetic (shaders/reduce.glsl);
    `texel_kv`: it reads the KV caches through texel views (attention_tiled.comp's TEXEL_KV);
    `glu`: swiglu.comp's gate, "silu", "gelu" (GELU: GeGLU) or "oai" (OAI: gpt-oss's clamped SwiGLU)."""

    op: str
    subgroup: bool = False
    texel_kv: bool = False
    glu: str = "silu"

    @property
    def name(self) -> str:
        return (self.op + ("_sg" if self.subgroup else "") + ("_tkv" if self.texel_kv else "")
                + ("" if self.glu == "silu" else f"_{self.glu}"))

    @property
    def source(self) -> str:
        return f"{self.op}.comp"

    def defines(self) -> dict[str, str]:
        return {**({"REDUCE_SUBGROUP": "1"} if self.subgroup else {}), **({"TEXEL_KV": "1"} if self.texel_kv else {}),
                **({} if self.glu == "silu" else {self.glu.upper(): "1"})}


REDUCING_OPS = ("rms_norm", "attention", "expert_routing", "head_norm")  # the ops with workgroup reductions
LLAMA_OPS = (*(VectorOpVariant(op, sg) for op in REDUCING_OPS for sg in (False, True)),
             *(VectorOpVariant(op) for op in ("swiglu", "argmax", "sample", "attention_tiled", "soft_cap",
                                                "expert_bias")),
             *(VectorOpVariant("swiglu", glu=glu) for glu in ("gelu", "oai")),
             VectorOpVariant("attention_tiled", texel_kv=True))


def all_variants() -> list:
    out: list = [QUANTIZE_Q8_1, GROUP_BY_EXPERT, MEMBW, MEMBW_TEXEL]
    for name, fmt in FORMATS.items():
        assert len(fmt.fields) <= MAX_FIELDS, name
        for mul_mat_id, subgroup, weights_binding, x_binding in itertools.product(
                (False, True), (False, True), WEIGHTS_BINDINGS, X_BINDINGS):
            bindings = dict(weights_binding=weights_binding, x_binding=x_binding)
            out.append(MatVecVariant(name, False, False, subgroup, mul_mat_id, **bindings))
            if fmt.has_int8_path:
                for int_dot in (False, True):
                    out.append(MatVecVariant(name, True, int_dot, subgroup, mul_mat_id, **bindings))
    out += [MatMulVariant(name, binding, mmq, int_dot, mul_mat_id) for name, fmt in FORMATS.items()
            for binding in MATMUL_BINDINGS for mul_mat_id in (False, True)
            for mmq, int_dot in ((False, False), *(((True, False), (True, True)) if fmt.has_int8_path else ()))]
    out += [MatMulVariant(name, mmq=mmq, mul_mat_id=mul_mat_id, coopmat=True) for name, fmt in FORMATS.items()
            for mul_mat_id in (False, True) for mmq in ((False, True) if fmt.has_int8_path else (False,))]
    out += [*LLAMA_OPS, *(GetRowsVariant(name) for name in FORMATS)]
    return out


def spirv_path(variant) -> Path:
    return SPIRV_DIR / f"{variant.name}.spv"


def load_spirv(variant) -> bytes:
    path = spirv_path(variant)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ShadersMissing(
            f"compiled shader {path.name} is missing from {SPIRV_DIR}: run "
            "`python tools/compile_shaders.py` (make does it for you)"
        ) from None
