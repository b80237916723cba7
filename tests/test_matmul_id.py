"""Backend.matmul_id and Graph.matmul_id: MUL_MAT_ID over many tokens on the
tiled mat-mat kernel (shaders/mul_mm.comp's MUL_MAT_ID variant), against
float64 references.

Slot (t, j) must be experts[ids[t, j]] @ x[t] (shared x) or @ x[t, j]
(per-slot x). Each expert's slots are checked together as the columns of
one product (conftest.assert_matches: NMSE_TIGHT against the path's model,
ggml's 5e-4 against the exact product). Shapes are odd on purpose: rows
and K are not multiples of the tiles, and an expert's slots fill a partial
last column group. The experts' rows are drawn from a pool of quantized
rows as in test_matmul (ggml's i-quant quantizers are slow): a kernel that
read the wrong expert would read other pool rows in most of its 37.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS
from vkq.dispatch.config import PipelineConfig
from vkq.dispatch.tiles import TileConfig

import ggml_quant
from conftest import assert_matches, force_split
from test_matmul import FAMILIES, POOL_ROWS, REGISTERS, REGISTERS_INT8, SHARED, SHARED_INT8, UNITS_INT8, odd_k, refs_of

N_EXPERT = 4
ROWS = 37
N_USED = 2  # (kept across tests: a pipeline per slots-per-x, compiled once)
# A few decoder families in the fast tier (each pipeline costs lavapipe a
# compile), one type of every family under slow: the slots' grouping and
# the tiles do not depend on the type, and every type's decoder is checked
# in the same tiles by test_matmul.
FAST_TYPES = ("Q4_0", "Q4_K", "IQ4_XS", "F16")
SLOW_TYPES = tuple(dict.fromkeys(FAST_TYPES + FAMILIES))


@functools.lru_cache(maxsize=4)
def experts(backend: vkq.Backend, qtype: str, k: int):
    """(Weights, float64 values (N_EXPERT, ROWS, k), GGUF bytes per expert) of a stack made by ggml's quantizer."""
    pool = ggml_quant.random_weights(POOL_ROWS, k, qtype, seed=k)
    rng = np.random.default_rng(k)
    pick = rng.integers(0, POOL_ROWS, (N_EXPERT, ROWS))
    pick.flat[:POOL_ROWS] = np.arange(POOL_ROWS)  # every pool row used
    data = pool[pick]
    w64 = ref.dequantize(qtype, (POOL_ROWS, k), pool)[pick]
    return backend.upload(qtype, (N_EXPERT, ROWS, k), data), w64, data


def token_x(n_tokens: int, k: int, per_slot: bool, seed: int = 1) -> np.ndarray:
    shape = (n_tokens, N_USED, k) if per_slot else (n_tokens, k)
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def random_ids(n_tokens: int, seed: int = 2, n_used: int = N_USED) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, N_EXPERT, (n_tokens, n_used)).astype(np.int32)


def assert_slots_match(y, w64, x, ids, cfg: TileConfig, what: str) -> None:
    """Every expert's slots, as the columns of one product with that expert."""
    n_tokens, n_used = ids.shape
    assert y.shape == (n_tokens, n_used, w64.shape[1]) and y.dtype == np.float32, f"{what}: {y.shape} {y.dtype}"
    xs = x if x.ndim == 3 else np.broadcast_to(x[:, None], (n_tokens, n_used, x.shape[-1]))
    for e in np.unique(ids):
        t, j = np.nonzero(ids == e)
        assert_matches(y[t, j].T, refs_of(w64[e], xs[t, j].T, cfg), cfg.path, f"{what} expert {e}")


def check(backend, qtype: str, config: TileConfig, n_tokens=(1, 9, 100), per_slot=(False, True), k=None) -> None:
    k = odd_k(qtype) if k is None else k
    w, w64, _ = experts(backend, qtype, k)
    for n in n_tokens:
        ids = random_ids(n, seed=n)
        for ps in per_slot:
            x = token_x(n, k, ps, seed=n)
            y = backend.matmul_id(w, x, ids, config=config)
            assert_slots_match(y, w64, x, ids, config, f"{qtype} n_tokens={n} {'per-slot' if ps else 'shared'} x, "
                                                       f"{config.describe()}")


def fast(types, slow_types=SLOW_TYPES):
    return [pytest.param(t, marks=[] if t in types else [pytest.mark.slow]) for t in slow_types]


@pytest.mark.parametrize("qtype", fast(FAST_TYPES))
def test_float_in_registers(backend, qtype):
    check(backend, qtype, REGISTERS)


@pytest.mark.parametrize("qtype", fast(FAST_TYPES, [t for t in SLOW_TYPES if FORMATS[t].has_int8_path]))
def test_int8(backend, qtype):
    check(backend, qtype, REGISTERS_INT8)


@pytest.mark.parametrize("qtype", fast(("Q4_0",)))
def test_float_shared_tiles(backend, qtype):
    """The GPUs' way (tiles in shared memory, a K step of 2 chunks: a partial last step at odd K)."""
    check(backend, qtype, SHARED, per_slot=(False,) if qtype == "Q4_0" else (False, True))


@pytest.mark.parametrize("qtype", fast(("Q4_K",), [t for t in SLOW_TYPES if FORMATS[t].has_int8_path]))
def test_int8_shared_tiles(backend, qtype):
    """The int8 path through shared memory (the GPUs' default where OpSDot is enabled)."""
    check(backend, qtype, SHARED_INT8, n_tokens=(9, 100), per_slot=(True,) if qtype == "Q4_K" else (False, True))


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["Q4_K", "IQ2_XS", "F32"])
def test_whole_units(backend, qtype):
    """K steps of 8 chunks whose scales load at once (lavapipe's tiles), int8 and float."""
    check(backend, qtype, TileConfig(8, 2, 8, 1, 2, shared_tiles=False, binding="texel"), k=768)
    if FORMATS[qtype].has_int8_path:
        check(backend, qtype, UNITS_INT8, k=768)


# (lavapipe's tiles take 7-15 s to compile: the int8 path, which lavapipe's models take, in the fast tier)
@pytest.mark.parametrize("path", [pytest.param("dmmv", marks=pytest.mark.slow), "mmvq"])
def test_dispatchers_choice(backend, path):
    """The tiles vkq.dispatch.tiles picks on this device, K in whole units."""
    w, w64, _ = experts(backend, "Q4_0", 768)
    cfg = vkq.resolve.resolve_tiles(backend, w, 30, path, mul_mat_id=True)
    assert cfg.path == path and cfg.source.startswith("tiles ")
    ids, x = random_ids(30, seed=5), token_x(30, 768, False, seed=5)
    assert_slots_match(backend.matmul_id(w, x, ids, path), w64, x, ids, cfg, f"Q4_0 {path} {cfg.describe()}")


@pytest.mark.parametrize("case", ["repeated", "unused", "all-one", "one-token-all-experts"])
def test_expert_patterns(backend, case):
    """An expert twice in one token; experts no token uses; every slot on
    one expert (its slots over many column groups, the others none); and
    one token using every expert."""
    n = {"one-token-all-experts": 1}.get(case, 100)
    ids = random_ids(n, seed=7)
    if case == "repeated":
        ids[::3, 1] = ids[::3, 0]
    elif case == "unused":
        ids = np.where(ids % 2 == 0, 0, 2).astype(np.int32)  # experts 1 and 3 unused
    elif case == "all-one":
        ids[:] = N_EXPERT - 1
    else:
        ids = np.arange(N_EXPERT, dtype=np.int32)[None, ::-1].copy()
    w, w64, _ = experts(backend, "Q4_0", odd_k("Q4_0"))
    x = token_x(n, odd_k("Q4_0"), False, seed=3)
    assert_slots_match(backend.matmul_id(w, x, ids, config=REGISTERS), w64, x, ids, REGISTERS, case)


@pytest.mark.parametrize("config", [REGISTERS, REGISTERS_INT8, pytest.param(SHARED, marks=pytest.mark.slow),
                                    pytest.param(SHARED_INT8, marks=pytest.mark.slow)],
                         ids=["registers", "int8", "shared", "int8-shared"])
def test_a_tokens_bits_do_not_depend_on_the_other_tokens(backend, config):
    """Token 1 of a call of 3 tokens and the same token (its x and ids) at
    33 of a call of 40: the same bits, though its slots have other ranks
    among their experts' slots (other columns of other tiles). And those of
    the plain tiled mat-mat of its expert alone on the same tiles."""
    k = odd_k("Q4_0")
    w, _, data = experts(backend, "Q4_0", k)
    ids40, x40 = random_ids(40, seed=11), token_x(40, k, False, seed=11)
    ids3, x3 = random_ids(3, seed=12), token_x(3, k, False, seed=12)
    t = 33
    ids3[1], x3[1] = ids40[t], x40[t]
    y3, y40 = backend.matmul_id(w, x3, ids3, config=config), backend.matmul_id(w, x40, ids40, config=config)
    rank = [int(np.sum(ids40.reshape(-1)[: t * N_USED + j] == ids40[t, j])) for j in range(N_USED)]
    assert min(rank) >= config.bn  # (in other column groups than in the call of 3)
    np.testing.assert_array_equal(y3[1], y40[t])
    for j, e in enumerate(ids40[t]):
        alone = backend.upload("Q4_0", (ROWS, k), data[e])
        g = backend.graph()
        xt = g.input(backend.tensor(k, 2))
        xt.write(np.stack([x3[0], x40[t]]))
        yt = g.output(g.matmul(alone, xt, config=config, tiled=True))
        g.run()
        np.testing.assert_array_equal(yt.read()[1], y40[t, j])
        g.destroy()


def test_per_slot_bits_too(backend):
    """Per-slot x: a slot's bits depend on its own x and expert only."""
    k = odd_k("Q4_0")
    w, _, _ = experts(backend, "Q4_0", k)
    ids9, x9 = random_ids(9, seed=21), token_x(9, k, True, seed=21)
    y9 = backend.matmul_id(w, x9, ids9, config=REGISTERS)
    y1 = backend.matmul_id(w, x9[4:5], ids9[4:5], config=REGISTERS)
    np.testing.assert_array_equal(y1[0], y9[4])


def test_graph_matmul_id(backend):
    """In a graph: ids as one vector (the router's layout) or one vector
    per token, x shared or per slot, y in slot order as matvec_id writes
    it; the same bits as Backend.matmul_id; input ids checked each replay."""
    k = odd_k("Q4_0")
    w, w64, _ = experts(backend, "Q4_0", k)
    n = 9
    ids_v, xv = random_ids(n, seed=31), token_x(n, k, False, seed=31)
    g = backend.graph()
    x = g.input(backend.tensor(k, n, name="x"))
    flat = g.input(backend.tensor(n * N_USED, dtype=np.int32, name="ids"))
    per_token = g.input(backend.tensor(N_USED, n, dtype=np.int32, name="ids per token"))
    out = backend.tensor(ROWS, n * N_USED)
    y1 = g.output(g.matmul_id(w, x, flat, config=REGISTERS, out=out, label="experts"))
    y2 = g.output(g.matmul_id(w, x, per_token, config=REGISTERS))
    assert y1 is out and y2.shape == (n * N_USED, ROWS) and g.counts["matmul"] == 2 and g.counts["group"] == 2
    products = [label for label, _ in g.nodes if label != "group by expert"]
    assert products[-1].startswith("MUL_MAT_ID mat-mat Q4_0") and products[-2].startswith("experts Q4_0")
    x.write(xv)
    flat.write(ids_v.reshape(-1))
    per_token.write(ids_v)
    g.run()
    expected = backend.matmul_id(w, xv, ids_v, config=REGISTERS).reshape(n * N_USED, ROWS)
    np.testing.assert_array_equal(y1.read(), expected)
    np.testing.assert_array_equal(y2.read(), expected)
    per_token.write(np.full((n, N_USED), N_EXPERT, np.int32))
    with pytest.raises(ValueError, match=rf"out of range: \[{N_EXPERT}, {N_EXPERT}, .*not in \[0, {N_EXPERT}\)"):
        g.run()
    g.destroy()


def test_graph_sorts_each_value_of_ids_once(backend):
    """Every matmul_id over the same ids reads one sort of its slots by
    expert (a MoE layer's gate, up and down), until a node writes the ids
    again (the next layer's router); the bits are those of Backend.matmul_id."""
    from vkq.llama.vector_ops import ExpertRouting, Vectors

    k = odd_k("Q4_0")
    w, _, _ = experts(backend, "Q4_0", k)
    n, layers = 9, 2
    rng = np.random.default_rng(5)
    logits_v = rng.standard_normal((layers, n, N_EXPERT)).astype(np.float32)
    xv, slot_xv = token_x(n, k, False, seed=5), token_x(n, k, True, seed=6)
    g = backend.graph()
    x, slot_x = g.input(backend.tensor(k, n)), g.input(backend.tensor(k, n * N_USED))
    ids, ys = backend.tensor(n * N_USED, dtype=np.int32), []
    for layer in range(layers):
        logits = g.input(backend.tensor(N_EXPERT, n))
        logits.write(logits_v[layer])
        g.add(ExpertRouting(backend.device, Vectors(logits, N_EXPERT), ids, backend.tensor(n * N_USED), N_USED, n))
        ys.append(g.output(g.matmul_id(w, x, ids, config=REGISTERS)))  # (gate|up: a token's x shared)
        ys.append(g.output(g.matmul_id(w, slot_x, ids, config=REGISTERS)))  # (down: an x per slot)
    assert g.counts["matmul"] == 2 * layers and g.counts["group"] == layers
    assert [label for label, _ in g.nodes].count("group by expert") == layers
    x.write(xv)
    slot_x.write(slot_xv.reshape(n * N_USED, k))
    g.run()
    for layer in range(layers):
        chosen = np.argsort(-logits_v[layer], axis=1, kind="stable")[:, :N_USED].astype(np.int32)
        for y, xs in zip(ys[2 * layer: 2 * layer + 2], (xv, slot_xv)):
            np.testing.assert_array_equal(y.read(), backend.matmul_id(w, xs, chosen, config=REGISTERS)
                                          .reshape(-1, ROWS))
    g.destroy()


def test_graph_ids_from_the_router(backend):
    """ids written on the device by ExpertRouting (in range by construction)
    are taken; those of any other op are refused, as matvec_id's."""
    from vkq.llama.vector_ops import Argmax, ExpertRouting, Vectors

    k = odd_k("Q4_0")
    w, w64, _ = experts(backend, "Q4_0", k)
    n = 3
    logits_v = np.random.default_rng(4).standard_normal((n, N_EXPERT)).astype(np.float32)
    xv = token_x(n, k, False, seed=4)
    g = backend.graph()
    logits = g.input(backend.tensor(N_EXPERT, n))
    ids = backend.tensor(n * N_USED, dtype=np.int32)
    g.add(ExpertRouting(backend.device, Vectors(logits, N_EXPERT), ids, backend.tensor(n * N_USED), N_USED, n))
    x = g.input(backend.tensor(k, n))
    y = g.output(g.matmul_id(w, x, ids, config=REGISTERS))
    logits.write(logits_v)
    x.write(xv)
    g.run()
    chosen = np.argsort(-logits_v, axis=1, kind="stable")[:, :N_USED].astype(np.int32)
    np.testing.assert_array_equal(y.read(), backend.matmul_id(w, xv, chosen, config=REGISTERS).reshape(-1, ROWS))
    g.destroy()
    g = backend.graph()
    bad = backend.tensor(1, dtype=np.int32)
    g.add(Argmax(backend.device, Vectors(g.input(backend.tensor(3)), 3), bad))
    with pytest.raises(ValueError, match="written on the device"):
        g.matmul_id(w, g.input(backend.tensor(k)), bad)


def test_bad_input(backend):
    k = odd_k("Q4_0")
    w, _, _ = experts(backend, "Q4_0", k)
    ids, x = random_ids(5), token_x(5, k, False)
    for bad_ids, error, match in (
            (ids.astype(np.float32), TypeError, "ids must be a numpy int32 array"),
            (ids.tolist(), TypeError, "ids must be a numpy int32 array"),
            (ids[:, 0], ValueError, r"ids must have shape \(n_tokens, n_used\)"),
            (ids[:0], ValueError, r"ids must have shape \(n_tokens, n_used\)"),
            (np.where(ids == 1, N_EXPERT, ids), ValueError, rf"ids out of range: \[{N_EXPERT}.*not in \[0, 4\)"),
            (np.where(ids == 1, -1, ids), ValueError, r"ids out of range: \[-1"),
            (np.full((5, 2), 1 << 40), ValueError, "int32 cannot hold|out of range")):
        with pytest.raises(error, match=match):
            backend.matmul_id(w, x, bad_ids, config=REGISTERS)
    for bad_x, error, match in (
            (x.astype(np.int32), TypeError, "float32"),
            (token_x(5, k - 32, False), ValueError, rf"x must have shape \(5, {k}\) or \(5, 2, {k}\)"),
            (token_x(4, k, False), ValueError, r"x must have shape \(5, "),
            (np.zeros((5, 3, k), np.float32), ValueError, r"or \(5, 2, 544\) for ids of shape \(5, 2\)"),
            (x[:, None], ValueError, "x must have shape")):
        with pytest.raises(error, match=match):
            backend.matmul_id(w, bad_x, ids, config=REGISTERS)
    matrix = backend.upload("Q4_0", (ROWS, k), ggml_quant.random_weights(ROWS, k, "Q4_0"))
    with pytest.raises(ValueError, match="expected an expert stack"):
        backend.matmul_id(matrix, x, ids)
    with pytest.raises(TypeError, match="TileConfig"):
        backend.matmul_id(w, x, ids, config=PipelineConfig("dmmv", False, False, 8, 1))
    with pytest.raises(ValueError, match="not both"):
        backend.matmul_id(w, x, ids, "mmvq", config=REGISTERS_INT8)
    plain = backend.upload("F16", (2, 3, 64), np.zeros((2, 3, 64), np.float16))
    with pytest.raises(ValueError, match="F16 has no int8"):
        backend.matmul_id(plain, token_x(5, 64, False), ids % 2, "mmvq")


def test_graph_bad_input(backend):
    k = odd_k("Q4_0")
    w, _, _ = experts(backend, "Q4_0", k)
    g = backend.graph()
    ids, ids_per_token = backend.tensor(10, dtype=np.int32), backend.tensor(2, 5, dtype=np.int32)
    x = backend.tensor(k, 5)
    with pytest.raises(TypeError, match="int32 expert indices"):
        g.matmul_id(w, x, backend.tensor(10))
    with pytest.raises(TypeError, match="float32"):
        g.matmul_id(w, backend.tensor(k, 5, np.int32), ids)
    with pytest.raises(ValueError, match=f"the weights' K is {k}"):
        g.matmul_id(w, backend.tensor(k - 32, 5), ids)
    with pytest.raises(ValueError, match="a divisor of 10"):
        g.matmul_id(w, backend.tensor(k, 3), ids)
    with pytest.raises(ValueError, match=r"5 \(one per token\) or 10 \(one per slot\)"):  # n_used 2, not 5
        g.matmul_id(w, backend.tensor(k, 2), ids_per_token)
    with pytest.raises(ValueError, match="out .* must be float32 with shape"):
        g.matmul_id(w, x, ids, out=backend.tensor(ROWS, 5))
    with pytest.raises(ValueError, match="expected an expert stack"):
        g.matmul_id(backend.upload("F16", (3, 64), np.zeros((3, 64), np.float16)), backend.tensor(64, 5), ids)
    with pytest.raises(ValueError, match="at most 65535"):
        g.matmul_id(w, x, backend.tensor(65536, dtype=np.int32))
    g.destroy()


def test_split_buffers(backend, monkeypatch):
    """An expert stack over several buffers (rows 0-14, 15-29, 30-36 of
    every expert): one sort, then a mat-mat per buffer writing its rows."""
    k = odd_k("Q4_K")
    _, w64, data = experts(backend, "Q4_K", k)
    force_split(monkeypatch, "Q4_K", N_EXPERT, 15, k)
    w = backend.upload("Q4_K", (N_EXPERT, ROWS, k), data)
    assert len(w.buffers) == 3
    ids, x = random_ids(20, seed=8), token_x(20, k, False, seed=8)
    assert_slots_match(backend.matmul_id(w, x, ids, config=REGISTERS), w64, x, ids, REGISTERS, "3 buffers")


def test_rows_past_one_dispatch_dimension(backend):
    """An expert of more row tiles than one dispatch dimension holds: they continue in z."""
    rows, k = 65536 + 5, 32
    data = ggml_quant.random_weights(2 * rows, k, "Q4_0", seed=3).reshape(2, rows, -1)
    w = backend.upload("Q4_0", (2, rows, k), data)
    ids, x = np.array([[1], [0], [1]], np.int32), token_x(3, k, False, seed=3)
    one_row = TileConfig(1, 1, 1, 1, 1, shared_tiles=False, binding="storage")
    w64 = ref.dequantize("Q4_0", (2, rows, k), data)
    assert_slots_match(backend.matmul_id(w, x, ids, config=one_row), w64, x, ids, one_row, "65541 rows")


def test_limits(backend, monkeypatch):
    """The sort takes a workgroup per expert, and on lavapipe every
    invocation's walk over the experts counts against the loop budget:
    refused before the driver, not cut short (the tiled kernel's; on a
    device that offers the cooperative-matrix kernel the dispatcher's own
    choice could be that one, of a shorter K loop)."""
    monkeypatch.setenv("VKQ_MATMUL", "tiled")
    zeros, k = FORMATS["Q4_0"].block_bytes, 32
    cfg = TileConfig(8, 1, 1, 8, 1, shared_tiles=False, binding="storage")
    many = backend.upload("Q4_0", (65536, 1, k), np.zeros(65536 * zeros, np.uint8))
    with pytest.raises(ValueError, match="65536 experts"):
        backend.matmul_id(many, np.zeros((1, k), np.float32), np.zeros((1, 1), np.int32), config=cfg)
    many.free()
    budget = backend.device.caps.max_loop_iterations
    if budget is None:
        return  # (no known loop budget on this device)
    n_expert = budget - 40  # (the K loop takes 82 iterations at K=32)
    many = backend.upload("Q4_0", (n_expert, 1, k), np.zeros(n_expert * zeros, np.uint8))
    g = backend.graph()
    with pytest.raises(ValueError, match=f"loop iterations at K=32 over {n_expert} experts; this driver cuts"):
        g.matmul_id(many, backend.tensor(k, 1), backend.tensor(1, dtype=np.int32), config=cfg)
    with pytest.raises(ValueError, match=f"no MUL_MAT_ID over {n_expert} experts on tiled mat-mat"):
        g.matmul_id(many, backend.tensor(k, 1), backend.tensor(1, dtype=np.int32))
    g.destroy()
