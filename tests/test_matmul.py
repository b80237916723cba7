"""Backend.matmul and Graph.matmul (y = W @ X for any number of columns)
against float64 references, for every block type.

Up to 8 columns matmul is the mat-vec (the same bits as matvec); more run
the tiled mat-mat (shaders/mul_mm.comp), held to its path's model as the
mat-vec is (conftest.assert_matches: NMSE_TIGHT against the model, ggml's
5e-4 against the exact product): the float path's is float64 W @ X, the
int8 path's W @ (X after Q8_1 quantization); each the same model whatever
the summation order, which only float32 rounding separates. Shapes are odd
on purpose: rows, K and columns are not multiples of any tile, so that
every edge (rows repeated past the end, columns read as zeros or repeated,
a last K step that is partly past the end) is exercised. Each launch
configuration is one pipeline for every column count, so both column
counts of a case share its compile.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS
from vkq.device.caps import DeviceCaps
from vkq.dispatch import tiles
from vkq.dispatch.classify import DeviceClass
from vkq.dispatch.config import PipelineConfig
from vkq.dispatch.tiles import TileConfig
from vkq.resolve import MAX_COLS

import ggml_quant
from conftest import NMSE_GGML, TYPES, assert_matches, force_split, random_x, references

ROWS = 49
NCOLS = (9, 37)

# Small launches that compile in well under a second on lavapipe, one per way
# the shader decodes: each invocation its own rows' chunks one at a time
# (REGISTERS), or a unit of 8 chunks with the scales loaded at once (UNITS,
# K in whole units); and the GPUs' way, through shared memory, with a K step
# of 2 chunks that leaves a partial last step at odd_k (SHARED).
REGISTERS = TileConfig(8, 4, 1, 2, 4, shared_tiles=False, binding="texel")
UNITS = TileConfig(8, 2, 8, 1, 2, shared_tiles=False, binding="texel")
SHARED = TileConfig(16, 8, 2, 2, 4, shared_tiles=True, binding="storage")
# The int8 path the same three ways, with the int32 emulation of OpSDot
# (the dispatcher's choice below takes OpSDot where the device has it).
REGISTERS_INT8 = TileConfig(8, 4, 1, 2, 4, "mmvq", shared_tiles=False, binding="texel")
UNITS_INT8 = TileConfig(8, 2, 8, 1, 2, "mmvq", shared_tiles=False, binding="texel")
SHARED_INT8 = TileConfig(16, 8, 2, 2, 4, "mmvq", shared_tiles=True, binding="storage")
INT8_TYPES = tuple(t for t in TYPES if FORMATS[t].has_int8_path)
# One type per decoder family for the shared-memory tiles in the fast tier
# (their pipelines take lavapipe seconds to compile); every type under slow.
FAMILIES = ("Q4_0", "Q5_1", "Q8_0", "Q3_K", "Q6_K", "IQ2_XS", "IQ4_NL", "TQ1_0", "F16", "BF16")


def odd_k(qtype: str) -> int:
    """K of an odd number of chunks (17: a partial last step for every K
    step but one chunk), and for the plain types not even whole chunks (the
    row padded with zeros on the device); 768 for the 256-element blocks."""
    fmt = FORMATS[qtype]
    return 536 if fmt.is_plain else 544 if fmt.block_elems == 32 else 768


# Distinct rows of a case: its rows are drawn at random from this many
# quantized rows (ggml's i-quant quantizers take seconds per few rows on two
# cores); a kernel reading the wrong row still reads other values but with
# probability 1/POOL_ROWS.
POOL_ROWS = 16


@functools.lru_cache(maxsize=2)
def case(backend: vkq.Backend, qtype: str, rows: int, k: int):
    """(Weights, float64 dequantized values) of a rows x K matrix made by ggml's quantizer."""
    pool_rows = min(rows, POOL_ROWS)
    pool = ggml_quant.random_weights(pool_rows, k, qtype, seed=rows + k)
    pick = np.random.default_rng(rows + k).integers(0, pool_rows, rows)
    pick[:pool_rows] = np.arange(pool_rows)  # every pool row used
    data = pool[pick]
    return backend.upload(qtype, (rows, k), data), ref.dequantize(qtype, (pool_rows, k), pool)[pick]


def refs_of(w64: np.ndarray, x: np.ndarray, cfg: TileConfig) -> dict[str, np.ndarray]:
    """conftest.references, the int8 path's model on cfg's activation planes."""
    refs = references(w64, x)
    refs["mmvq"] = ref.matvec_model(w64, x, "mmvq", cfg.x_planes)
    return refs


def check(backend, qtype: str, rows: int, k: int, config: TileConfig | None, ncols=NCOLS) -> None:
    w, w64 = case(backend, qtype, rows, k)
    ys = {}
    for n in ncols:
        x = random_x(k, n, seed=n)
        y = ys[n] = backend.matmul(w, x, config=config)
        assert y.dtype == np.float32
        cfg = config or backend.matmul_pipeline(w, n)
        what = f"{qtype} {rows}x{k} n={n} {cfg.describe()}"
        if cfg.flavour == "float16":  # (float16 tiles: ggml's bound against the exact product, no tighter model)
            e = ref.nmse(y, w64 @ x.astype(np.float64))
            assert np.isfinite(y).all() and e < NMSE_GGML, f"{what}: NMSE {e:.3g}"
        else:
            assert_matches(y, refs_of(w64, x, cfg), cfg.path, what)
    # A column's bits do not depend on how many columns share the call.
    small, big = min(ncols), max(ncols)
    x_small, x_big = random_x(k, small, seed=small), random_x(k, big, seed=big)
    x_big[:, :small] = x_small
    assert np.array_equal(backend.matmul(w, x_big, config=config)[:, :small], ys[small])


@pytest.mark.parametrize("qtype", TYPES)
def test_every_type_in_registers(backend, qtype):
    check(backend, qtype, ROWS, odd_k(qtype), REGISTERS)


@pytest.mark.parametrize("qtype", TYPES)
def test_every_type_whole_units(backend, qtype):
    check(backend, qtype, ROWS, 768, UNITS)


@pytest.mark.parametrize("qtype", INT8_TYPES)
def test_every_type_int8(backend, qtype):
    check(backend, qtype, ROWS, odd_k(qtype), REGISTERS_INT8)
    check(backend, qtype, ROWS, 768, UNITS_INT8)


def test_int8_two_planes(backend):
    """q8_1x2 activations: the rounding residual's plane too."""
    check(backend, "Q5_K", ROWS, 768, TileConfig(8, 2, 8, 1, 2, "mmvq", shared_tiles=False, binding="texel",
                                                  x_planes=2))
    w, w64 = case(backend, "Q5_K", ROWS, 768)
    x = random_x(768, 20)
    cfg = backend.matmul_pipeline(w, 20, "mmvq", "q8_1x2")
    assert (cfg.path, cfg.x_planes) == ("mmvq", 2)
    assert_matches(backend.matmul(w, x, "mmvq", activations="q8_1x2"), refs_of(w64, x, cfg), "mmvq", "q8_1x2")


@pytest.mark.parametrize("qtype", [pytest.param(t, marks=[] if t in FAMILIES else [pytest.mark.slow]) for t in TYPES])
def test_every_type_shared_tiles(backend, qtype):
    check(backend, qtype, ROWS, odd_k(qtype), SHARED)


@pytest.mark.parametrize("qtype", [pytest.param(t, marks=[] if t in ("Q4_0", "Q4_K") else [pytest.mark.slow])
                                   for t in INT8_TYPES if t in FAMILIES + ("Q4_K",)])
def test_int8_shared_tiles_per_family(backend, qtype):
    """The int8 path through shared memory (the GPUs' default where OpSDot
    is enabled): each chunk's quants and scales and x's Q8_1 blocks in shared
    memory, a partial last K step at odd_k."""
    check(backend, qtype, ROWS, odd_k(qtype), SHARED_INT8, ncols=(9, 100))


@pytest.mark.parametrize("x_planes", [1, 2])
@pytest.mark.parametrize("int_dot", [False, True])
def test_int8_shared_tiles_agree_with_registers(backend, x_planes, int_dot):
    """Shared-memory tiles and registers on the int8 path: the same chunk
    sums (chunk_dot, kept from fused multiply-adds) added in the same order,
    so the same bits, whatever the tiles; and right against the model."""
    w, w64 = case(backend, "Q5_0", ROWS, odd_k("Q5_0"))
    shared = replace(SHARED_INT8, x_planes=x_planes, int_dot=int_dot)
    registers = replace(shared, shared_tiles=False)
    for n in (9, 100):
        x = random_x(odd_k("Q5_0"), n, seed=n)
        y_shared, y_registers = backend.matmul(w, x, config=shared), backend.matmul(w, x, config=registers)
        assert_matches(y_shared, refs_of(w64, x, shared), "mmvq", f"n={n} {shared.describe()}")
        np.testing.assert_array_equal(y_shared, y_registers)
        np.testing.assert_array_equal(y_shared, backend.matmul(w, x, config=replace(REGISTERS_INT8, x_planes=x_planes)))


def test_shared_memory_of_the_int8_tiles():
    """Per chunk 3 units of 16 bytes per weights row (quants, scales) and
    2 * planes + 1 per column of x (shaders/mul_mm.comp), each row and
    column an odd number of units; the float path 8 (+1 padding)."""
    assert TileConfig(64, 32, 1, 4, 4, "mmvq").shared_memory_bytes == (64 * 3 + 32 * 3) * 16
    assert TileConfig(64, 32, 2, 4, 4, "mmvq", x_planes=2).shared_memory_bytes == (64 * 7 + 32 * 11) * 16
    assert TileConfig(64, 32, 1, 4, 4).shared_memory_bytes == (64 + 32) * 9 * 16
    assert TileConfig(64, 32, 1, 4, 4, "mmvq", shared_tiles=False).shared_memory_bytes == 0


@pytest.mark.parametrize("int_dot", [True, False])
def test_gpu_default_tiles(int_dot):
    """The '*' entry (every GPU without an entry of its own): the int8 path
    with shared-memory tiles where OpSDot is enabled, else the float path,
    within Vulkan's guaranteed 16 KiB of shared memory; q8_1x2 the float
    path; types without an int8 path the float path."""
    gpu = DeviceClass("unknown", "unknown", "unknown")
    caps = DeviceCaps("x", "discrete-gpu", 32, True, int_dot, 16384, 1024)
    for qtype in ("Q4_0", "Q6_K", "F16"):
        for activations in ("q8_1", "q8_1x2"):
            cfg = tiles.choose(gpu, caps, FORMATS[qtype], 4096, activations=activations)
            int8 = int_dot and activations == "q8_1" and FORMATS[qtype].has_int8_path
            assert (cfg.path, cfg.int_dot, cfg.shared_tiles) == ("mmvq" if int8 else "dmmv", int8, True), cfg
            assert cfg.shared_memory_bytes <= 16384 and cfg.evidence == {"guess"}
            assert int8 or not FORMATS[qtype].has_int8_path or activations != "q8_1" or "no OpSDot" in cfg.source


def test_lavapipe_tiles_fitted_to_k(backend):
    """The lavapipe entry on its device (no pipeline built): whole units of
    8 chunks where K has them; else the entry's short K step; past the loop
    budget (a long K, each invocation decoding tm rows per step) tm halved,
    each change named, and the result within the budget."""
    d = backend.dispatcher
    if tiles.entry_for(d.device_class)[0] != "software/lavapipe":
        pytest.skip("not lavapipe")
    entry = tiles.TILES["software/lavapipe"]
    choose = lambda qtype, k: tiles.choose(d.device_class, d.caps, FORMATS[qtype], k)  # noqa: E731
    whole = choose("Q4_1", 1536)
    assert (whole.bk_chunks, whole.tm) == (8, entry["tm"]) and whole.whole_units
    partial = choose("Q4_1", 576)  # 18 chunks
    assert (partial.bk_chunks, partial.tm) == (entry["bk_chunks_without_units"], entry["tm"])
    assert "K=576 is not whole units of 8 chunks" in partial.source
    long_k = choose("Q8_0", 32768)
    assert long_k.tm < entry["tm"] and f"tm {entry['tm']} -> " in long_k.source and "loop budget" in long_k.source
    assert tiles.loop_iterations(long_k, 32768) <= d.caps.max_loop_iterations
    assert tiles.loop_iterations(replace(long_k, tm=entry["tm"]), 32768) > d.caps.max_loop_iterations


@pytest.mark.parametrize("qtype", [pytest.param(t, marks=[] if t in ("Q4_0", "Q4_K") else [pytest.mark.slow])
                                   for t in TYPES])
def test_every_type_dispatchers_choice(backend, qtype):
    """The tiles and path this device's dispatcher picks (vkq.dispatch.tiles), at both K."""
    for k in sorted({odd_k(qtype), 768}):
        check(backend, qtype, ROWS, k, None)


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["Q4_0", "Q5_K", "Q6_K", "IQ3_S", "IQ4_XS", "MXFP4", "F32"])
def test_bigger(backend, qtype):
    """A bigger case per family: several workgroups in both directions."""
    check(backend, qtype, 300, 4096, None, ncols=(100, 130))


def test_long_k_within_lavapipes_loop_budget(backend):
    """K = 32768: the dispatcher's launch stays within lavapipe's loop budget
    (vkq.dispatch.tiles.loop_iterations counts only the loops that remain;
    had the [[unroll]] loops stayed loops, a thread would pass the budget
    here and its sums stop short)."""
    check(backend, "Q8_0", 5, 32768, None, ncols=(9, 11))


def test_split_buffers(backend, monkeypatch):
    """A matrix over several buffers: each dispatch writes its own rows."""
    force_split(monkeypatch, "Q4_K", 1, 20, 768)
    data = ggml_quant.random_weights(ROWS, 768, "Q4_K", seed=3)
    w = backend.upload("Q4_K", (ROWS, 768), data)
    assert len(w.buffers) == 3
    x = random_x(768, 13)
    assert_matches(backend.matmul(w, x, config=REGISTERS), references(ref.dequantize("Q4_K", (ROWS, 768), data), x),
                   "dmmv", "Q4_K in 3 buffers")


@pytest.mark.parametrize("n", [None, 1, 5, MAX_COLS])
def test_few_columns_are_the_matvec(backend, n):
    """Up to MAX_COLS columns (or x of shape (K,)) matmul is matvec: its bits."""
    w, _ = case(backend, "Q5_K", ROWS, 768)
    x = random_x(768, n)
    y = backend.matmul(w, x)
    assert y.shape == ((ROWS,) if n is None else (ROWS, n))
    assert np.array_equal(y, backend.matvec(w, x))
    assert isinstance(backend.matmul_pipeline(w, n or 1), PipelineConfig)


def test_the_choice_says_what_it_rests_on(backend):
    w, _ = case(backend, "Q4_0", ROWS, 576)
    cfg = backend.matmul_pipeline(w, MAX_COLS + 1)
    assert isinstance(cfg, TileConfig)
    # (the tile table's entry; on a device with cooperative matrices, the kernel's tile after its self-check)
    assert cfg.source.startswith("coopmat tile " if cfg.coopmat else "tiles ")
    assert cfg.evidence <= {"measured", "guess", "ggml"} and cfg.evidence
    assert cfg.describe().startswith("tiled mat-mat")


def test_graph_matmul(backend):
    """In a graph: the same bits as Backend.matmul, chained through a second
    product that reads the first's output (a barrier between them), and the
    mat-vec for a few columns."""
    w1, w1_64 = case(backend, "Q4_K", 64, 768)
    w2, w2_64 = case(backend, "F16", 40, 64)
    xv = random_x(768, 20)
    g = backend.graph()
    x = g.input(backend.tensor(768, 20))
    h = g.matmul(w1, x)
    y = g.output(g.matmul(w2, h))
    x_few = g.input(backend.tensor(768, 3))
    y_few = g.output(g.matmul(w1, x_few))
    assert g.counts["matmul"] == 2 and g.counts["matvec"] == 1
    x.write(xv.T)
    x_few.write(xv[:, :3].T)
    g.run()
    h_host = backend.matmul(w1, xv)
    assert np.array_equal(y.read().T, backend.matmul(w2, h_host))
    if backend.matmul_pipeline(w2, 20).flavour == "float16":  # (float16 tiles: ggml's bound, no tighter model)
        assert ref.nmse(y.read().T, w2_64 @ h_host.astype(np.float64)) < NMSE_GGML
    else:
        assert_matches(y.read().T, references(w2_64, h_host), "dmmv", "graph: second product")
    assert np.array_equal(y_few.read().T, backend.matvec(w1, xv[:, :3]))
    g.destroy()


def test_bad_input(backend):
    w = backend.upload("Q4_0", (ROWS, 576), ggml_quant.random_weights(ROWS, 576, "Q4_0"))
    x = random_x(576, 12)
    with pytest.raises(TypeError, match="float32"):
        backend.matmul(w, x.astype(np.int32))
    with pytest.raises(TypeError, match="numpy"):
        backend.matmul(w, x.tolist())
    with pytest.raises(ValueError, match=r"shape \(576,\) or \(576, n\)"):
        backend.matmul(w, random_x(512, 12))
    with pytest.raises(ValueError, match=r"shape \(576,\) or \(576, n\)"):
        backend.matmul(w, x.reshape(576, 3, 4))
    with pytest.raises(ValueError, match="0 columns; matmul takes 1 to"):
        backend.matmul(w, np.zeros((576, 0), np.float32))
    experts = backend.upload("Q4_0", (2, 3, 64), ggml_quant.random_weights(6, 64, "Q4_0"))
    with pytest.raises(ValueError, match="expected a matrix"):
        backend.matmul(experts, random_x(64, 12))
    with pytest.raises(ValueError, match="which the mat-vec takes"):
        backend.matmul(w, x[:, :4], config=REGISTERS)
    with pytest.raises(TypeError, match="TileConfig"):
        backend.matmul(w, x, config=PipelineConfig("dmmv", False, False, 8, 1))
    with pytest.raises(TypeError, match="TileConfig"):
        backend.matmul(w, x, config={"bm": 64})
    with pytest.raises(ValueError, match="does not fit this device"):  # 1 MiB of shared memory
        backend.matmul(w, x, config=TileConfig(256, 256, 8, 16, 4))
    with pytest.raises(ValueError, match="whole units"):  # 18 chunks of K = 576
        backend.matmul(w, x, config=UNITS)
    with pytest.raises(ValueError, match="not both"):
        backend.matmul(w, x, "mmvq", config=REGISTERS_INT8)
    with pytest.raises(ValueError, match="unknown path|path"):
        backend.matmul(w, x, "int4")
    plain = backend.upload("F16", (3, 64), np.zeros((3, 64), np.float16))
    with pytest.raises(ValueError, match="F16 has no int8"):
        backend.matmul(plain, random_x(64, 12), "mmvq")
    with pytest.raises(ValueError, match="F16 has no int8"):
        backend.matmul(plain, random_x(64, 12), config=REGISTERS_INT8)
    with pytest.raises(ValueError, match="does not fit this device"):  # 256 x (3 x 8 + 1) x 16 bytes and more
        backend.matmul(w, x, config=TileConfig(256, 256, 8, 16, 4, "mmvq"))
    for bad, match in (((64, 64, 1, 3, 8), "must divide"), ((64, 64, 1, 16, 16), "sums per invocation"),
                       ((0, 8, 1, 1, 1), "bm 0")):
        with pytest.raises(ValueError, match=match):
            TileConfig(*bad)
    with pytest.raises(ValueError, match="binding"):
        TileConfig(8, 8, 1, 1, 1, binding="uniform")
    w.free()
    with pytest.raises(ValueError, match="freed"):
        backend.matmul(w, x)


def test_graph_bad_input(backend):
    w, _ = case(backend, "Q4_0", ROWS, 576)
    g = backend.graph()
    with pytest.raises(ValueError, match="the weights' K is 576"):
        g.matmul(w, backend.tensor(512, 12))
    with pytest.raises(TypeError, match="float32"):
        g.matmul(w, backend.tensor(576, 12, np.int32))
    with pytest.raises(ValueError, match="out .* must be float32 with shape"):
        g.matmul(w, backend.tensor(576, 12), out=backend.tensor(ROWS, 11))
    with pytest.raises(ValueError, match="which the mat-vec takes"):
        g.matmul(w, backend.tensor(576, 2), config=REGISTERS)
    g.destroy()


def test_dropped_weights_free_their_matmul_graphs_at_once(backend):
    """A matmul's cached graph refers to its weights weakly: dropping the
    weights frees both by reference counting alone, the cycle collector off."""
    import gc

    before = backend.device.memory.in_use
    w = backend.upload("Q4_0", (64, 256), ggml_quant.random_weights(64, 256, "Q4_0"))
    backend.matmul(w, random_x(256, 12))
    gc.disable()
    try:
        del w
        assert backend.device.memory.in_use == before
    finally:
        gc.enable()


def test_graph_matmul_tiled_takes_few_columns_on_the_tiled_kernel(backend):
    """tiled=True: the mat-mat kernel at any column count, and a column's
    bits are those of the same column in a product of many columns."""
    import gguf
    from gguf.quants import quantize

    rng = np.random.default_rng(7)
    k, rows = 512, 37
    w = backend.upload("Q5_0", (rows, k), quantize(rng.standard_normal((rows, k)).astype(np.float32),
                                                   gguf.GGMLQuantizationType.Q5_0))
    xs = rng.standard_normal((20, k)).astype(np.float32)
    g = backend.graph()
    few = g.input(backend.tensor(k, 3, name="few"))
    many = g.input(backend.tensor(k, 20, name="many"))
    y_few = g.output(g.matmul(w, few, tiled=True))
    y_many = g.output(g.matmul(w, many))
    few.write(xs[5:8])
    many.write(xs)
    g.run()
    assert g.counts["matmul"] == 2 and g.counts["matvec"] == 0
    np.testing.assert_array_equal(y_few.read(), y_many.read()[5:8])
    with pytest.raises(TypeError, match="tiled must be True or False"):
        backend.graph().matmul(w, few, tiled="yes")
