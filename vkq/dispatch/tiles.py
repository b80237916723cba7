"""Which tiles a matrix-matrix product gets: shaders/mul_mm.comp's launch.

A product of a `rows x k` matrix with more columns than a mat-vec takes
(vkq.resolve.MAX_COLS) runs the tiled kernel: a workgroup computes `bm`
rows by `bn` columns, walking K in steps of `bk_chunks` 32-element chunks,
each invocation `tm` rows by `tn` columns of it (so a workgroup has
(bm / tm) x (bn / tn) invocations), on the float path (`dmmv`: weights
dequantized) or the int8 path (`mmvq`: x quantized to Q8_1 on the device,
the weights' quants dotted with it as the int8 mat-vec does), either with
tiles in shared memory or without. `TileConfig` is the choice; `choose`
makes it for a device class from `TILES` (each entry with its basis and
note, as the mat-vec's vendor tables) and fits it to the device's limits,
naming every change in `source`; `check` holds a caller's own TileConfig to
those limits instead. The kernel has one summation order per tile shape
(bk_chunks does not change it: see the shader), whatever the column count.

Both paths have a flavour on cooperative matrices (VK_KHR_cooperative_matrix,
`coopmat_subgroup`, in fragments of the shape the device lists,
`fragment`): the float path's multiplies float16 tiles into float32 sums,
the int8 path's int8 quants into int32 sums (its scales applied per 16 of
K; a fragment 32 deep through the padded layout, `padded_halves`).
`COOPMAT_TILE` is their launch; the dispatcher offers them only where
vkq.dispatch.coopmat says so (the device's features enabled and the kernel
checked on the device).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..blocks.activations import ACTIVATION_PLANES, DEFAULT_ACTIVATIONS
from ..blocks.formats import CHUNK, BlockFormat
from ..checks import is_int
from ..device.caps import COOPMAT_FLAVOURS, COOPMAT_K_UNIT, COOPMAT_MN, DeviceCaps, int8_padded
from ..device.shader_variants import MATMUL_BINDINGS
from .paths import int_dot_disabled_by_env, requested_path
from .classify import DeviceClass
from .config import PATHS, VALUE_LOOKUPS

# Bounds of the shader's parameters: each invocation keeps tm x tn sums and
# tm + tn vec4s in registers (past 64 sums they spill to scratch memory).
MAX_TILE = 256  # bm, bn
MAX_BK_CHUNKS = 8
MAX_SUMS = 64  # tm x tn
MAX_WG_SIZE = 1024
UNIT_CHUNKS = 8  # chunks of one unit_meta (shaders/mul_mm.comp's WHOLE_UNITS)
# Loops of shaders/mul_mm.comp that stay loops on a driver that unrolls what
# [[unroll]] marks: the K steps, and per weights chunk a step's invocation
# decodes, dequant.glsl's two (two halves of four vec4s each).
DEQUANT_LOOP_ITERATIONS = 2 + 2 * 4
# Cooperative matrices: a subgroup's sums per invocation at most (its block
# of tm x tn over the subgroup: 64 on a GPU's 32 x 64 per subgroup of 32,
# 128 on lavapipe's 32 x 32 per subgroup of 8); the subgroup sizes the
# kernel is built for; the fragment shapes (M, N, K) it takes
# (vkq.device.caps.coopmat_fragment chooses one the device lists).
MAX_COOPMAT_LANE_SUMS = 128
COOPMAT_SUBGROUPS = (8, 16, 32, 64, 128)
COOPMAT_FRAGMENTS = tuple((m, n, k) for m in COOPMAT_MN for n in COOPMAT_MN for k in (4, 8, 16, 32))


@dataclass(frozen=True)
class TileConfig:
    bm: int  # rows per workgroup
    bn: int  # columns per workgroup
    bk_chunks: int  # 32-element chunks of K per step (shared memory holds one step)
    tm: int  # rows per invocation
    tn: int  # columns per invocation
    path: str = "dmmv"  # weights dequantized to float; "mmvq": int8 dot products with Q8_1 activations
    shared_tiles: bool = True  # tiles of W and x in shared memory (GPUs); False: registers and memory (CPU drivers)
    binding: str = "storage"  # weights and x both through storage buffers or both through texel views
    value_lookup: str = "table"  # as the mat-vec's (vkq.dispatch.config.VALUE_LOOKUPS)
    int_dot: bool = False  # mmvq with OpSDot; False: its int32 emulation
    x_planes: int = 1  # mmvq: int8 planes of the activations (vkq.blocks.activations)
    # Cooperative matrices (shared tiles, storage buffers; the float path's
    # float16 flavour or the int8 path's int8 one, one activation plane):
    # each tm x tn block is a subgroup of this many invocations, the device's
    # subgroup size; 0: the plain kernel. fragment: (M, N, K), a shape the
    # device lists for the flavour's types (tm a multiple of M, tn of N).
    coopmat_subgroup: int = 0
    fragment: tuple = (16, 16, 16)
    # The int8 flavour's weights chunks in shared memory as lo | zeros | hi,
    # each half's sum alone from fragments 32 deep (the shader's
    # PADDED_HALVES): needed where K does not divide 16 (caps.int8_padded),
    # allowed at any K (the tests check its indexing where the plain layout
    # runs too).
    padded_halves: bool = False
    # Provenance, not part of what runs (as PipelineConfig's).
    source: str = field(default="default", compare=False)
    evidence: frozenset = field(default=frozenset(), compare=False)

    def __post_init__(self):
        problems = param_problems(self)
        if problems:
            raise ValueError("TileConfig: " + "; ".join(problems))

    @property
    def wg_size(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn) * max(self.coopmat_subgroup, 1)

    @property
    def coopmat(self) -> bool:
        return self.coopmat_subgroup > 0

    @property
    def flavour(self) -> str | None:
        """The cooperative-matrix flavour ("float16", "int8"), None for the plain kernel."""
        return None if not self.coopmat else "int8" if self.path == "mmvq" else "float16"

    @property
    def kernel(self) -> str:
        if self.coopmat:
            return (f"mul_mm coopmat {'int8' if self.flavour == 'int8' else 'f16'} {'x'.join(map(str, self.fragment))}"
                    + (" padded" if self.padded_halves else ""))
        return "mul_mm int8" + (" OpSDot" if self.int_dot else " emulated") if self.path == "mmvq" else "mul_mm float"

    @property
    def shared_memory_bytes(self) -> int:
        """The shader's two tiles (none without shared_tiles): bm rows and bn
        columns of a K step in 16-byte units, each row and column an odd
        number of them (one of padding where the step's are even). Per chunk
        a weights row holds its 32 floats (8 units) or on the int8 path its
        quants and scales (3), a column of x its 32 floats or its Q8_1 block
        (2 units of quants per plane and one of scales, shaders/q8_1.glsl)."""
        if not self.shared_tiles:
            return 0
        if self.flavour == "int8":  # rows of int8 quants of a K step plus 16 bytes, a chunk's scales, int sums
            w_quants = CHUNK + 16 if self.padded_halves else CHUNK  # (lo | 16 zeros | hi)
            return (self.bm * (self.bk_chunks * (w_quants + 16) + 16) + self.bn * (self.bk_chunks * (CHUNK + 16) + 16)
                    + self.bm * self.bn * 4)
        if self.coopmat:  # float16 rows of a K step plus 8 halves, then the float sums of the tile
            return (self.bm + self.bn) * (self.bk_chunks * CHUNK + 8) * 2 + self.bm * self.bn * 4
        w_chunk, x_chunk = (3, 2 * self.x_planes + 1) if self.path == "mmvq" else (CHUNK // 4, CHUNK // 4)
        return (self.bm * (self.bk_chunks * w_chunk | 1) + self.bn * (self.bk_chunks * x_chunk | 1)) * 16

    def params(self) -> dict:
        return {"path": self.path, "bm": self.bm, "bn": self.bn, "bk_chunks": self.bk_chunks, "tm": self.tm,
                "tn": self.tn, "shared_tiles": self.shared_tiles, "binding": self.binding,
                "value_lookup": self.value_lookup, "int_dot": self.int_dot, "x_planes": self.x_planes,
                **({"coopmat_subgroup": self.coopmat_subgroup, "fragment": list(self.fragment)} if self.coopmat
                   else {}), **({"padded_halves": True} if self.padded_halves else {})}

    @property
    def whole_units(self) -> bool:
        """Each step a unit of 8 chunks whose scales are loaded at once (the shader's WHOLE_UNITS)."""
        return not self.shared_tiles and self.bk_chunks == UNIT_CHUNKS

    def describe(self) -> str:
        """The launch in one line."""
        memory = "shared-memory tiles" if self.shared_tiles else "no shared memory"
        if self.coopmat:
            return (f"tiled mat-mat ({self.kernel}) {self.bm}x{self.bn}, K step {self.bk_chunks * CHUNK}, "
                    f"{self.tm}x{self.tn} per subgroup of {self.coopmat_subgroup}, wg {self.wg_size}, {memory}")
        return (f"tiled mat-mat ({self.kernel}) {self.bm}x{self.bn}, K step {self.bk_chunks * CHUNK}, "
                f"{self.tm}x{self.tn} per invocation, wg {self.wg_size}, {memory}, weights and x {self.binding}"
                + (", 2 activation planes" if self.x_planes == 2 else "")
                + (", values by selects" if self.value_lookup == "selects" else ""))


def param_problems(cfg: TileConfig) -> list[str]:
    """Values the shader does not support, whatever the device."""
    out = []
    if cfg.path not in PATHS:
        out.append(f"path {cfg.path!r} not in {PATHS}")
    if not isinstance(cfg.int_dot, bool) or (cfg.int_dot and cfg.path != "mmvq"):
        out.append(f"int_dot {cfg.int_dot!r}: True or False, True on the mmvq path only")
    if cfg.x_planes not in (1, 2) or isinstance(cfg.x_planes, bool) or (cfg.x_planes != 1 and cfg.path != "mmvq"):
        out.append(f"x_planes must be 1, or 2 on the mmvq path; got {cfg.x_planes!r} on {cfg.path!r}")
    for name, top in (("bm", MAX_TILE), ("bn", MAX_TILE), ("bk_chunks", MAX_BK_CHUNKS), ("tm", MAX_TILE),
                      ("tn", MAX_TILE)):
        v = getattr(cfg, name)
        if not is_int(v) or not 1 <= v <= top:
            out.append(f"{name} {v!r} not an integer in 1..{top}")
    if out:
        return out
    if not is_int(cfg.coopmat_subgroup) or cfg.coopmat_subgroup not in (0, *COOPMAT_SUBGROUPS):
        return out + [f"coopmat_subgroup {cfg.coopmat_subgroup!r} not 0 or one of {COOPMAT_SUBGROUPS}"]
    if cfg.coopmat:
        frag = tuple(cfg.fragment) if isinstance(cfg.fragment, (tuple, list)) else None
        if not cfg.shared_tiles or cfg.binding != "storage" or cfg.x_planes != 1 or cfg.int_dot:
            out.append("cooperative matrices: shared tiles through storage buffers, one activation plane and "
                       "int_dot False only")
        if frag not in COOPMAT_FRAGMENTS or COOPMAT_K_UNIT["int8" if cfg.path == "mmvq" else "float16"] % frag[2]:
            out.append(f"cooperative matrices: fragment {cfg.fragment!r} not (M, N, K) with M and N of "
                       f"{'/'.join(map(str, COOPMAT_MN))}, K a multiple of 4 dividing "
                       f"{COOPMAT_K_UNIT['int8' if cfg.path == 'mmvq' else 'float16']}")
        elif cfg.path == "mmvq" and int8_padded(frag[2]) and cfg.padded_halves is not True:
            out.append(f"cooperative matrices: int8 fragments {frag[2]} deep span both halves of a chunk: "
                       f"padded_halves True only")
        elif cfg.tm % frag[0] or cfg.tn % frag[1] or cfg.tm * cfg.tn > MAX_COOPMAT_LANE_SUMS * cfg.coopmat_subgroup \
                or cfg.tm * cfg.tn % cfg.coopmat_subgroup:
            out.append(f"cooperative matrices: tm {cfg.tm} a multiple of {frag[0]} and tn {cfg.tn} of {frag[1]}, "
                       f"tm x tn a multiple of the subgroup's {cfg.coopmat_subgroup} invocations and at most "
                       f"{MAX_COOPMAT_LANE_SUMS} sums per invocation")
    if cfg.bm % cfg.tm or cfg.bn % cfg.tn:
        out.append(f"tm {cfg.tm} must divide bm {cfg.bm} and tn {cfg.tn} bn {cfg.bn}")
    elif not cfg.coopmat and cfg.tm * cfg.tn > MAX_SUMS:
        out.append(f"tm x tn = {cfg.tm * cfg.tn} sums per invocation > {MAX_SUMS}")
    elif not 1 <= cfg.wg_size <= MAX_WG_SIZE:
        out.append(f"(bm / tm) x (bn / tn) = {cfg.wg_size} invocations per workgroup not in 1..{MAX_WG_SIZE}")
    if not isinstance(cfg.padded_halves, bool) or (cfg.padded_halves and cfg.flavour != "int8"):
        out.append(f"padded_halves {cfg.padded_halves!r}: True or False, True on the int8 cooperative-matrix "
                   f"kernel only")
    if not isinstance(cfg.shared_tiles, bool):
        out.append(f"shared_tiles {cfg.shared_tiles!r} is not True or False")
    if cfg.binding not in MATMUL_BINDINGS:
        out.append(f"binding {cfg.binding!r} not in {MATMUL_BINDINGS}")
    if cfg.value_lookup not in VALUE_LOOKUPS:
        out.append(f"value_lookup {cfg.value_lookup!r} not in {VALUE_LOOKUPS}")
    return out


# The kernels a model's prompt chunks take (vkq.llama.gpu_step): "matmul",
# this tiled mat-mat over chunks of up to 512 tokens; "matvec", the decode
# step's mat-vecs over chunks of up to 8 (vkq.resolve.MAX_COLS).
PROMPT_KERNELS = ("matmul", "matvec")

# The tile entries by device class key ("vendor/arch", then "vendor/*", then
# "*"), each with the basis of its numbers (vkq.dispatch.tables.BASES). An
# entry's "path" is a path, or one per activation format;
# "int8_needs_int_dot" True: the entry's int8 path only where OpSDot is
# enabled, else the float path (its int32 emulation being the slower);
# "prompt" the kernels of a prompt's chunks (PROMPT_KERNELS), with its own
# basis; "bk_chunks_without_units" (no shared tiles) the K step where K is
# not whole units of the entry's 8 chunks (else half the entry's step).
TILES: dict[str, dict] = {
    "software/lavapipe": {
        "path": {"q8_1": "mmvq", "q8_1x2": "dmmv"}, "bm": 64, "bn": 8, "bk_chunks": 8, "tm": 8, "tn": 8,
        "bk_chunks_without_units": 2,
        "shared_tiles": False, "binding": "texel", "value_lookup": "selects", "basis": "measured",
        "prompt": "matmul", "prompt_basis": "measured",
        "prompt_note": "docs/measurements.md, 'lavapipe, 2026-11-27: prompts through the mat-mat': SmolLM2 "
                       "(Q4_1), a 441-token prompt at 26.3 t/s through the mat-mats and the tiled attention "
                       "against 16.5 in chunks of 8 mat-vecs (1.59x), 32 tokens at 31.6 against 25.2 (1.26x); "
                       "the gain then was the attention's (each key read once per tile of queries); with the "
                       "8x8 tiles since ('a prompt's mat-mats at 8x8 per invocation') the mat-mats are 1.2-1.5x "
                       "too, the prompt 77-124 t/s against 60-87",
        "note": "lavapipe (Mesa 22.3): docs/measurements.md, 'lavapipe, 2026-11-27: tiled mat-mat': no "
                "shared memory (read one lane at a time there: 6x slower); texel views and selects for the mat-vec's "
                "reasons; the int8 path 1.2x faster than the float path for q8_1 (Q4_0, Q4_K); q8_1x2, twice "
                "the int8 dot products, not measured: the float path, as the mat-vec's measured rule gives it. "
                "8x8 per invocation and, where K is not whole units, a K step of 2 chunks: docs/measurements.md, "
                "'lavapipe, 2026-11-27: a prompt's mat-mats at 8x8 per invocation' (SmolLM2, 441-token prompt: "
                "74.5-78.9 t/s against 57.5-60.2 with 4x8 and a K step of 4, one process, alternating; single "
                "Q4_1 matrices of its shapes 1.2-1.5x on both paths; 4x16 between the two, 2x8 and 16x4 slower; "
                "a step of 2 beat 4 and 6 at K=576, while at K=1536 whole units of 8 tie with 2); the same bits",
    },
    "*": {
        "path": {"q8_1": "mmvq", "q8_1x2": "dmmv"}, "int8_needs_int_dot": True, "bm": 64, "bn": 32,
        "bk_chunks": 1, "tm": 4, "tn": 4, "shared_tiles": True, "binding": "storage", "value_lookup": "table",
        "basis": "guess",
        "prompt": "matmul", "prompt_basis": "measured",
        "prompt_note": "NVIDIA H200, docs/measurements.md (2026-11-26): prompts in chunks of 8 mat-vecs ran at "
                       "0.05x llama.cpp's tiled mat-mats, each weight read once per 8 tokens against once per 512",
        "note": "not measured on any GPU. A small GPU tile: 128 invocations of 16 sums, in shared memory "
                "4.5 KiB on the int8 path, 13.5 KiB on the float path (under Vulkan's guaranteed 16 KiB). The "
                "int8 path where the device has OpSDot enabled, as ggml-vulkan takes its int8 mat-mat (mul_mmq) "
                "first wherever the device has accelerated 4x8-bit dot products: a step's x is a quarter of the "
                "float path's bytes (read from memory and held in shared memory), its products one OpSDot per "
                "4 where the float path takes 4 FMAs, and vkq's int8 mat-vec beat its float one for every "
                "quantized type on an H100 (docs/measurements.md: 1.3-2.3x); without OpSDot the float path "
                "(the int32 emulation takes 8 byte extractions, 4 multiplies and 3 adds per 4 products); "
                "q8_1x2 (twice the dot products) on the float path, as lavapipe's",
    },
}


def entry_for(device_class: DeviceClass) -> tuple[str, dict]:
    for key in (f"{device_class.vendor}/{device_class.arch}", f"{device_class.vendor}/*", "*"):
        if key in TILES:
            return key, TILES[key]
    raise AssertionError("TILES has a '*' entry")


def prompt_kernels(device_class: DeviceClass) -> tuple[str, str]:
    """The kernels (PROMPT_KERNELS) a model's prompt chunks take on this
    device class by default, and what that rests on."""
    key, entry = entry_for(device_class)
    return entry["prompt"], f"tiles {key} [{entry['prompt_basis']}]: {entry['prompt_note']}"


def loop_iterations(cfg: TileConfig, k: int) -> int:
    """An upper bound of the loop iterations one invocation takes on a driver
    that unrolls the loops [[unroll]] marks (lavapipe does; a test at the
    largest K checks it): the K steps, and the dequantization loops of the
    chunks it decodes in each. Keep in step with the shader."""
    steps = -(-(-(-k // CHUNK)) // cfg.bk_chunks)
    if cfg.shared_tiles:
        chunks = -(-(cfg.bm * cfg.bk_chunks) // cfg.wg_size)
    else:
        chunks = cfg.tm * cfg.bk_chunks
    return steps * (1 + chunks * DEQUANT_LOOP_ITERATIONS)


def limit_problems(cfg: TileConfig, caps: DeviceCaps, k: int, n_expert: int | None = None) -> list[str]:
    """Why this launch would not compute the right numbers on this device at
    K; with n_expert, the MUL_MAT_ID kernel's over a stack of that many
    experts (its invocations walk the experts' slot counts first: a loop of
    n_expert iterations)."""
    out = []
    if cfg.whole_units and -(-k // CHUNK) % UNIT_CHUNKS:
        out.append(f"a K step of {UNIT_CHUNKS} chunks without shared memory takes whole units: it does not divide "
                   f"the {-(-k // CHUNK)} chunks of a row of K={k}")
    max_wg = min(caps.max_workgroup_invocations, caps.max_workgroup_size_x)
    if cfg.wg_size > max_wg:
        out.append(f"{cfg.wg_size} invocations per workgroup > the device's {max_wg}")
    if cfg.shared_memory_bytes > caps.max_shared_memory:
        out.append(f"{cfg.shared_memory_bytes} bytes of shared memory > the device's {caps.max_shared_memory}")
    loops = loop_iterations(cfg, k) + (n_expert or 0)
    if caps.max_loop_iterations is not None and loops > caps.max_loop_iterations:
        experts = f" over {n_expert} experts" if n_expert is not None else ""
        out.append(f"an invocation would take up to {loops} loop iterations at K={k}{experts}; this "
                   f"driver cuts its loops short after {caps.max_loop_iterations}")
    return out


def choose(device_class: DeviceClass, caps: DeviceCaps, fmt: BlockFormat, k: int, path: str | None = None,
           activations: str = DEFAULT_ACTIVATIONS) -> TileConfig:
    """The class's tile entry fitted to the device, each change named in
    `source`. The path: the caller's `path`, else VKQ_PATH, else the entry's
    (a type without an int8 path keeps dmmv); the int8 path with OpSDot
    where the device has it enabled, on `activations`.
    Then the K step the entry's bk_chunks_without_units (else halved) where
    K is not whole units of it (without shared memory, a step of 8), bn
    halved while the workgroup is too large, the K step and then bn halved
    while shared memory does not hold the tiles, the K step doubled and then
    tm halved while the loop budget does not fit. ValueError if nothing fits."""
    key, entry = entry_for(device_class)
    notes = []
    path, origin, env_note = requested_path(fmt, path)
    if env_note or path is not None:
        notes.append(env_note or f"path from {origin}")
    if path is None:
        by_format = entry["path"] if isinstance(entry["path"], dict) else {activations: entry["path"]}
        path = by_format[activations] if fmt.has_int8_path else "dmmv"
        if path == "mmvq" and entry.get("int8_needs_int_dot") and not (caps.int_dot
                                                                     and not int_dot_disabled_by_env()):
            path = "dmmv"
            notes.append("the float path: no OpSDot for the entry's int8 path ("
                         + ("VKQ_DISABLE_INT_DOT)" if caps.int_dot else "the int-dot feature is not enabled)"))
    params = {name: entry[name] for name in TileConfig.__dataclass_fields__ if name in entry and name != "path"}
    params["path"] = path
    if path == "mmvq":
        params["x_planes"] = ACTIVATION_PLANES[activations]
        params["int_dot"] = caps.int_dot and not int_dot_disabled_by_env()
        if not params["int_dot"]:
            notes.append("int32 emulation of OpSDot: " + ("VKQ_DISABLE_INT_DOT" if caps.int_dot
                                                           else "the int-dot feature is not enabled"))
    cfg = TileConfig(**params, source=f"tiles {key} [{entry['basis']}]", evidence=frozenset({entry["basis"]}))

    def change(why: str, **kw) -> None:
        nonlocal cfg
        notes.append(", ".join(f"{n} {getattr(cfg, n)} -> {v}" for n, v in kw.items()) + f": {why}")
        cfg = replace(cfg, **kw)

    if cfg.whole_units and -(-k // CHUNK) % UNIT_CHUNKS:
        change(f"K={k} is not whole units of {UNIT_CHUNKS} chunks",
               bk_chunks=entry.get("bk_chunks_without_units", cfg.bk_chunks // 2))
    max_wg = min(caps.max_workgroup_invocations, caps.max_workgroup_size_x)
    while cfg.wg_size > max_wg and cfg.bn > cfg.tn:
        change(f"the device's maximum workgroup is {max_wg}", bn=cfg.bn // 2)
    while cfg.shared_memory_bytes > caps.max_shared_memory and cfg.bk_chunks > 1:
        change(f"shared memory ({caps.max_shared_memory} bytes)", bk_chunks=cfg.bk_chunks // 2)
    while cfg.shared_memory_bytes > caps.max_shared_memory and cfg.bn > cfg.tn:
        change(f"shared memory ({caps.max_shared_memory} bytes)", bn=cfg.bn // 2)
    budget = caps.max_loop_iterations
    while budget is not None and loop_iterations(cfg, k) > budget and cfg.bk_chunks < MAX_BK_CHUNKS \
            and not replace(cfg, bk_chunks=2 * cfg.bk_chunks).whole_units \
            and replace(cfg, bk_chunks=2 * cfg.bk_chunks).shared_memory_bytes <= caps.max_shared_memory:
        change(f"loop budget of this driver ({budget} iterations) at K={k}", bk_chunks=2 * cfg.bk_chunks)
    # (then fewer rows per invocation: each decodes tm rows' chunks per step)
    while budget is not None and loop_iterations(cfg, k) > budget and cfg.tm > 1:
        change(f"loop budget of this driver ({budget} iterations) at K={k}", tm=cfg.tm // 2)
    if notes:
        cfg = replace(cfg, source=f"{cfg.source}; {'; '.join(notes)}")
    problems = limit_problems(cfg, caps, k)
    if problems:
        raise ValueError(f"no tiled mat-mat of {fmt.name} at K={k} fits this device: " + "; ".join(problems))
    return cfg


# The cooperative-matrix kernel's launch, for every device that is offered
# it (vkq.dispatch.coopmat), fitted to the device by `coopmat_config`.
COOPMAT_TILE = {
    "bm": 64, "bn": 64, "bk_chunks": 1, "tm": 32, "tn": 32, "basis": "guess",
    "note": "not measured on any GPU. Four subgroups, each 2 x 2 fragments of 16 x 16 (ggml-vulkan's "
            "coopmat mat-mat also gives a subgroup several fragments, so that each loaded fragment serves "
            "two products); a K step of 32 (one chunk, the decoders' unit); shared memory 10 KiB of "
            "float16 tiles and 16 KiB of sums",
}
COOPMAT_SHAPE = ("bm", "bn", "bk_chunks", "tm", "tn")  # what a cooperative-matrix tile is made of
COOPMAT_TILE_SHAPE = tuple(COOPMAT_TILE[name] for name in COOPMAT_SHAPE)
# Other tiles for the kernel, raced against COOPMAT_TILE's by
# tools/bench_matmul.py --kernel coopmat (none measured on a GPU yet): a
# longer K step (half the barriers), twice the rows or the columns per
# subgroup (8 fragments: each loaded fragment serves four products), and
# eight subgroups of 2 fragments (more warps to hide the loads). Each holds
# its tiles and sums within 48 KiB of shared memory (NVIDIA's per workgroup).
COOPMAT_CANDIDATES = (
    COOPMAT_TILE_SHAPE,
    (64, 64, 2, 32, 32),
    (128, 64, 1, 64, 32),
    (64, 128, 1, 32, 64),
    (64, 64, 1, 16, 32),
)


# On a CPU driver (lavapipe) the fragments are emulated and the kernel is
# there to be checked, not to be fast: a fragment per subgroup, 2 x 2
# subgroups. Its pipelines compile for as long as their unrolled fragment
# products are many (the note's figures: each pipeline's first compile,
# lavapipe 26.1.6, 2 cores shared with other work).
COOPMAT_CPU_TILE = {
    "basis": "measured",
    "note": "a CPU driver emulates the fragments: one per subgroup, 2 x 2 subgroups, the shortest compile "
            "(Q4_K's first compile on lavapipe 26, 2026-12-06: 5.1 s float16, 1.9 s int8 at 16x16; 12.0 s "
            "and 6.4 s at 32x32; 31.6 s and 18.5 s at the GPUs' 64x64)",
}


def coopmat_default_shape(caps: DeviceCaps, flavour: str = "float16") -> tuple[int, ...]:
    """The tile the kernel takes on this device without a tuned one: COOPMAT_TILE's, or on a CPU driver COOPMAT_CPU_TILE's."""
    if caps.device_type != "cpu":
        return COOPMAT_TILE_SHAPE
    m, n, _ = caps.coopmat_int8_fragment if flavour == "int8" else caps.coopmat_fragment
    return (2 * m, 2 * n, 1, m, n)


def coopmat_candidates(caps: DeviceCaps, flavour: str = "float16") -> tuple[tuple[int, ...], ...]:
    """The tiles `vkq tune` races for the kernel here: COOPMAT_CANDIDATES, or on a CPU driver its one tile."""
    return COOPMAT_CANDIDATES if caps.device_type != "cpu" else (coopmat_default_shape(caps, flavour),)


def coopmat_shape(cfg: TileConfig) -> tuple[int, ...]:
    """A cooperative-matrix config's tile, (bm, bn, bk_chunks, tm, tn) (COOPMAT_SHAPE)."""
    return tuple(getattr(cfg, name) for name in COOPMAT_SHAPE)


def coopmat_tile_label(shape: tuple[int, ...]) -> str:
    """A cooperative-matrix tile in a few words: (64, 64, 1, 32, 32) -> "64x64, K step 32, 32x32 per subgroup"."""
    bm, bn, bk_chunks, tm, tn = shape
    return f"{bm}x{bn}, K step {bk_chunks * CHUNK}, {tm}x{tn} per subgroup"


def coopmat_config(caps: DeviceCaps, fmt: BlockFormat, k: int, shape: tuple[int, ...] | None = None,
                   flavour: str = "float16") -> TileConfig:
    """COOPMAT_TILE (or `shape`, (bm, bn, bk_chunks, tm, tn), one of
    COOPMAT_CANDIDATES) for the kernel's `flavour` (COOPMAT_FLAVOURS) on
    this device: its fragment shape, a subgroup of the device's subgroup
    size per block, bn halved while the workgroup or its shared memory does
    not fit (each change named in `source`). ValueError if nothing fits (or
    the type has no int8 path for the int8 flavour)."""
    if flavour not in COOPMAT_FLAVOURS:
        raise ValueError(f"cooperative-matrix flavour {flavour!r} not in {COOPMAT_FLAVOURS}")
    if flavour == "int8" and not fmt.has_int8_path:
        raise ValueError(f"{fmt.name} has no int8 path: no int8 cooperative-matrix mat-mat")
    e = COOPMAT_TILE if caps.device_type != "cpu" else COOPMAT_CPU_TILE
    default = coopmat_default_shape(caps, flavour)
    dims = dict(zip(COOPMAT_SHAPE, default if shape is None else shape))
    basis = e["basis"] if shape is None or tuple(shape) == default else "guess"
    source = (f"coopmat tile{' for a CPU driver' if caps.device_type == 'cpu' else ''} [{basis}]"
              if shape is None or tuple(shape) == default else "coopmat tile candidate [guess]")
    fragment = caps.coopmat_int8_fragment if flavour == "int8" else caps.coopmat_fragment
    cfg = TileConfig(**dims, path="mmvq" if flavour == "int8" else "dmmv", coopmat_subgroup=caps.subgroup_size,
                     fragment=tuple(fragment), padded_halves=flavour == "int8" and int8_padded(fragment[2]),
                     source=source, evidence=frozenset({basis}))
    notes = []
    max_wg = min(caps.max_workgroup_invocations, caps.max_workgroup_size_x)
    while (cfg.wg_size > max_wg or cfg.shared_memory_bytes > caps.max_shared_memory) and cfg.bn > cfg.tn:
        notes.append(f"bn {cfg.bn} -> {cfg.bn // 2}: the device's workgroup ({max_wg}) or shared memory "
                     f"({caps.max_shared_memory} bytes)")
        cfg = replace(cfg, bn=cfg.bn // 2)
    if notes:
        cfg = replace(cfg, source=f"{cfg.source}; {'; '.join(notes)}")
    problems = limit_problems(cfg, caps, k)
    if problems:
        raise ValueError(f"no cooperative-matrix mat-mat of {fmt.name} at K={k} fits this device: "
                         + "; ".join(problems))
    return cfg


def check(cfg: TileConfig, caps: DeviceCaps, fmt: BlockFormat, k: int, n_expert: int | None = None) -> TileConfig:
    """A caller's own TileConfig, refused (ValueError naming every problem)
    where it would not compute the right numbers on this device (with
    n_expert: in the MUL_MAT_ID kernel over that many experts); only the
    int32 emulation of OpSDot replaces OpSDot where the device lacks it (the
    same numbers, named in `source`)."""
    if not isinstance(cfg, TileConfig):
        raise TypeError(f"config must be a vkq.dispatch.tiles.TileConfig, got {type(cfg).__name__}")
    if cfg.path == "mmvq" and not fmt.has_int8_path:
        raise ValueError(f"{fmt.name} has no int8 (mmvq) path")
    if cfg.coopmat:
        missing = caps.coopmat_int8_missing if cfg.flavour == "int8" else caps.coopmat_missing
        fragment = caps.coopmat_int8_fragment if cfg.flavour == "int8" else caps.coopmat_fragment
        if missing:
            raise ValueError(f"cooperative matrices ({cfg.flavour}): not on this device ({missing})")
        if cfg.coopmat_subgroup != caps.subgroup_size:
            raise ValueError(f"cooperative matrices: coopmat_subgroup {cfg.coopmat_subgroup} is not the device's "
                             f"subgroup size {caps.subgroup_size}")
        if tuple(cfg.fragment) != tuple(fragment):
            raise ValueError(f"cooperative matrices ({cfg.flavour}): fragment {tuple(cfg.fragment)} is not the "
                             f"one taken on this device, {tuple(fragment)}")
    problems = limit_problems(cfg, caps, k, n_expert)
    if problems:
        raise ValueError("config does not fit this device: " + "; ".join(problems))
    if cfg.int_dot and not (caps.int_dot and not int_dot_disabled_by_env()):
        cfg = replace(cfg, int_dot=False, source=f"{cfg.source}; int32 emulation of OpSDot")
    return cfg


def fit_bindings(cfg: TileConfig, caps: DeviceCaps, x_bytes: int, weights_buffer_bytes: int) -> TileConfig:
    """Storage buffers for both where a texel view would hold more texels
    than maxTexelBufferElements (x in 16-byte texels, the weights' smallest
    view in 4-byte ones); the numbers are the same either way."""
    if cfg.binding != "texel":
        return cfg
    limit = caps.max_texel_buffer_elements
    too_big = [f"x {x_bytes // 16} texels"] if x_bytes // 16 > limit else []
    too_big += [f"weights {weights_buffer_bytes // 4} words"] if weights_buffer_bytes // 4 > limit else []
    if not too_big:
        return cfg
    return replace(cfg, binding="storage", source=f"{cfg.source}; storage buffers: {', '.join(too_big)} > "
                                                  f"maxTexelBufferElements {limit}")
