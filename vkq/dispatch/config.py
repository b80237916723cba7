"""What the dispatcher decides for one mat-vec: a pipeline and its parameters.

The one place that says which launch parameter values exist
(`param_problems`): vendor tables (tables.py), tuning files
(tuning_store.py) and `PipelineConfig` itself check against it. Limits that
depend on the device or the shape are in choose.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import is_int
from ..device.shader_variants import WEIGHTS_BINDINGS, X_BINDINGS  # each binding is a compiled variant

PATHS = ("dmmv", "mmvq")
REDUCTIONS = ("subgroup", "shared")
CHUNKS_PER_THREAD = (1, 2, 4, 8)
# How a 4-bit quant that indexes 16 values (IQ4_NL, IQ4_XS, MXFP4, NVFP4) is decoded:
# one load per two quants from the pair table at the start of the weights
# buffer (vkq.blocks.lookup_tables), or picked from the 16 values by selects. A load
# at offsets that vary across lanes is a gather on a CPU driver (lavapipe:
# selects are 1.5-2x faster); selects cost ~11 integer operations per weight
# (the H100 ran them at 30% of its memory bandwidth). Other types ignore it.
VALUE_LOOKUPS = ("table", "selects")
# Vulkan caps maxComputeWorkGroupInvocations at no less than 128; no device
# reports more than 1024. The shared-memory reduction needs a power of two.
MAX_WG_SIZE = 1024
# shaders/mul_mat_vec.comp keeps NUM_ROWS x NCOLS partial sums (and, with 8
# chunks per thread, NUM_ROWS block headers) per thread in registers, and
# while it dots a chunk, x of every column or each row's decoded half-block,
# whichever is fewer. Registers grow with rows x columns; past what a
# compiler holds they spill to scratch memory, whose size per thread is a
# driver limit Vulkan does not report. What the GPUs' compilers showed
# (Mesa 26.1's ACO on RDNA2 and NAK on Ampere, wg 32, the float path;
# docs/measurements.md "GPU compilers"): no spills at 1..8 columns up to 4
# rows per workgroup (the tables take 2, NVIDIA's F16/BF16 4), nor at 1..4
# columns up to 16 rows; at 8 columns the quantized types spill from 8 rows
# (8-42 registers), F16 from 16. The int8 path at the tables' 2 rows does not
# spill either. 16 rows is the most any table or measurement uses
# (lavapipe's rows per thread, where the row loop past it stops being
# unrolled and eats its loop budget, choose.py): the cap, for every device.
MAX_ROWS_PER_WG = 16

# A table or tuning entry: the parameters every full entry has, and those
# it may leave out, with the value they take then.
PARAMS = ("path", "wg_size", "rows_per_wg", "reduction")
OPTIONAL_PARAMS = {"chunks_per_thread": 1, "split_k": True, "weights_binding": "storage", "x_binding": "storage",
                   "value_lookup": "table"}
ALL_PARAMS = PARAMS + tuple(OPTIONAL_PARAMS)


def param_problems(params: dict, where: str) -> list[str]:
    """What is wrong with the launch parameters present in `params` (a
    table entry, a tuning entry, or a PipelineConfig's fields): wrong types
    or values outside what the shaders support. Empty: fine."""
    p, out = params, []
    if "path" in p and p["path"] not in PATHS:
        out.append(f"{where}: path {p['path']!r} not in {PATHS}")
    if "reduction" in p and p["reduction"] not in REDUCTIONS:
        out.append(f"{where}: reduction {p['reduction']!r} not in {REDUCTIONS}")
    if "wg_size" in p:
        wg = p["wg_size"]
        if not is_int(wg) or not 1 <= wg <= MAX_WG_SIZE or wg & (wg - 1):
            out.append(f"{where}: wg_size {wg!r} is not a power of two in 1..{MAX_WG_SIZE}")
    if "rows_per_wg" in p:
        rows = p["rows_per_wg"]
        if not is_int(rows) or not 1 <= rows <= MAX_ROWS_PER_WG:
            out.append(f"{where}: rows_per_wg {rows!r} not in 1..{MAX_ROWS_PER_WG} "
                       "(the rows' partial sums a thread holds)")
    if "chunks_per_thread" in p and (not is_int(p["chunks_per_thread"])
                                     or p["chunks_per_thread"] not in CHUNKS_PER_THREAD):
        out.append(f"{where}: chunks_per_thread {p['chunks_per_thread']!r} not in {CHUNKS_PER_THREAD}")
    if "split_k" in p and not isinstance(p["split_k"], bool):
        out.append(f"{where}: split_k {p['split_k']!r} is not true or false")
    if "weights_binding" in p and p["weights_binding"] not in WEIGHTS_BINDINGS:
        out.append(f"{where}: weights_binding {p['weights_binding']!r} not in {WEIGHTS_BINDINGS}")
    if "x_binding" in p and p["x_binding"] not in X_BINDINGS:
        out.append(f"{where}: x_binding {p['x_binding']!r} not in {X_BINDINGS}")
    if "value_lookup" in p and p["value_lookup"] not in VALUE_LOOKUPS:
        out.append(f"{where}: value_lookup {p['value_lookup']!r} not in {VALUE_LOOKUPS}")
    return out


@dataclass(frozen=True)
class PipelineConfig:
    path: str  # "dmmv" (dequantize to float) or "mmvq" (int8 dot products)
    int_dot: bool  # mmvq with OpSDot; False: int32 emulation
    subgroup: bool  # subgroupAdd reduction; False: shared-memory tree
    wg_size: int  # threads per workgroup (power of two)
    rows_per_wg: int  # rows per workgroup (split_k) or per thread; each thread keeps all of them
    chunks_per_thread: int = 1  # consecutive 32-element chunks a thread takes at a time
    split_k: bool = True  # threads split K and reduce; False: a thread owns whole rows (CPU drivers)
    x_planes: int = 1  # mmvq: int8 planes of the activation (vkq.blocks.activations); the caller's choice
    weights_binding: str = "storage"  # one of WEIGHTS_BINDINGS
    x_binding: str = "storage"  # one of X_BINDINGS
    value_lookup: str = "table"  # one of VALUE_LOOKUPS
    # Provenance, not part of what runs (a config equals another of the same
    # parameters whatever chose it): which rules chose it and what the
    # device's limits changed, in words (`vkq info`); and what the choice
    # rests on: {"tuned"} (this device's vkq tune) or the bases of the table
    # entries used (vkq.dispatch.tables.BASES); empty: the caller's own.
    source: str = field(default="default", compare=False)
    evidence: frozenset = field(default=frozenset(), compare=False)

    def __post_init__(self):
        problems = param_problems(self.params(), "PipelineConfig")
        for name in ("int_dot", "subgroup"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"PipelineConfig: {name} {getattr(self, name)!r} is not True or False")
        if self.x_planes not in (1, 2) or isinstance(self.x_planes, bool) or (
                self.x_planes != 1 and self.path != "mmvq"):
            problems.append(f"PipelineConfig: x_planes must be 1, or 2 on the mmvq path; "
                            f"got {self.x_planes!r} on {self.path}")
        if self.int_dot is True and self.path != "mmvq":
            problems.append("PipelineConfig: int_dot applies to the mmvq path only")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_params(cls, params: dict, path: str, source: str = "default",
                    evidence: frozenset = frozenset()) -> "PipelineConfig":
        """The configuration of a table or tuning entry (PARAMS and any
        OPTIONAL_PARAMS; those left out take their default) on `path`."""
        opt = {name: params.get(name, value) for name, value in OPTIONAL_PARAMS.items()}
        return cls(path, path == "mmvq", params["reduction"] == "subgroup", params["wg_size"],
                   params["rows_per_wg"], source=source, evidence=frozenset(evidence), **opt)

    def params(self) -> dict:
        """As a table or tuning entry: ALL_PARAMS."""
        return {"path": self.path, "wg_size": self.wg_size, "rows_per_wg": self.rows_per_wg,
                "reduction": "subgroup" if self.subgroup else "shared",
                "chunks_per_thread": self.chunks_per_thread, "split_k": self.split_k,
                "weights_binding": self.weights_binding, "x_binding": self.x_binding, "value_lookup": self.value_lookup}

    @property
    def summation(self) -> tuple:
        """What fixes the order in which a row's products are summed, and so
        their rounding: the path and activations, and how the row's chunks
        are split among threads and reduced. Two configs with the same
        summation give a column the same bits whatever the column count, rows
        per workgroup, bindings or dot-product instructions (those change
        where values come from, not the arithmetic)."""
        if not self.split_k:  # one thread sums each row's chunks in order, however many it takes at a time
            return (self.path, self.x_planes, False)
        return (self.path, self.x_planes, True, self.wg_size, self.chunks_per_thread, self.subgroup)

    @property
    def kernel(self) -> str:
        """The path and, on the int8 path, how its dot products run."""
        return path_label(self.path, self.int_dot)


def path_label(path: str, int_dot: bool) -> str:
    return path + (" OpSDot" if int_dot else " emulated" if path == "mmvq" else "")


def describe(params: dict) -> str:
    """A table or tuning entry's launch parameters, in one line."""
    p = {**OPTIONAL_PARAMS, **params}
    work = f"{p['reduction']} reduction" if p["split_k"] else "rows per thread"
    return (f"wg {p['wg_size']}, rows/wg {p['rows_per_wg']}, chunks/thread {p['chunks_per_thread']}, {work}, "
            f"weights {p['weights_binding']}, x {p['x_binding']}"
            + (", values by selects" if p["value_lookup"] == "selects" else ""))
