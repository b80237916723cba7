"""Every launch parameter the dispatcher or `vkq tune` may pick gives right
results: workgroup sizes, rows per workgroup (also not dividing the rows),
chunks per thread, both reductions, OpSDot and its int32 emulation, both
ways of looking up a 4-bit quant's value."""
import numpy as np
import pytest

from ggml_quant import random_weights
from vkq.blocks.formats import FORMATS
from vkq.blocks.lookup_tables import has_value_pairs
from vkq.blocks.reference import dequantize, matvec_model, nmse
from vkq.dispatch.config import VALUE_LOOKUPS, PipelineConfig

ROWS, K = 45, 2048  # 45: not a multiple of any rows_per_wg > 1

PARAMS = [
    # (wg_size, rows_per_wg, chunks_per_thread, subgroup, split_k)
    (1, 1, 1, False, True),
    (8, 8, 1, True, True),
    (8, 8, 8, True, True),
    (16, 4, 2, False, True),
    (32, 2, 4, True, True),
    (64, 1, 8, False, True),
    (128, 3, 1, True, True),
    # a thread owns whole rows: 45 rows = 1 full and 1 partial workgroup
    (8, 4, 1, True, False),
    (4, 3, 8, False, False),
    (64, 1, 2, True, False),
]
TYPES = ["Q4_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4", "IQ4_NL", "IQ4_XS", "F16",
         "NVFP4", "Q1_0", "Q2_0", "TQ1_0", "TQ2_0"]  # the last: 2 or 4 blocks a unit (NVFP4, Q1_0, Q2_0)
VALUE_TYPES = [t for t in TYPES if has_value_pairs(FORMATS[t].table)]
# Every parameter set on one simple type and one k-quant; on the others the
# sets that change which decoder functions run (a whole k-quant block per
# thread reads block_meta; otherwise block_scales) and the row mapping.
FULL_TYPES = ("Q4_0", "Q4_K")
CORE = [PARAMS[1], PARAMS[2], PARAMS[8]]
CASES = [pytest.param(t, p, id=f"{t}-" + "wg{}-rows{}-cpt{}-{}-{}".format(
    *p[:3], "sg" if p[3] else "sh", "splitk" if p[4] else "rows"))
    for t in TYPES for p in PARAMS if t in FULL_TYPES or p in CORE]


@pytest.fixture(scope="module")
def matrices(backend):
    out = {}
    for qtype in TYPES:
        data = random_weights(ROWS, K, qtype, seed=7)
        out[qtype] = (backend.upload(qtype, (ROWS, K), data), dequantize(qtype, (ROWS, K), data))
    return out


@pytest.mark.parametrize("qtype,params", CASES)
@pytest.mark.parametrize("path,int_dot", [("dmmv", False), ("mmvq", True), ("mmvq", False)],
                         ids=["dmmv", "mmvq-dot", "mmvq-emul"])
def test_params(backend, matrices, qtype, path, int_dot, params):
    w, w64 = matrices[qtype]
    if path == "mmvq" and not w.layout.fmt.has_int8_path:
        pytest.skip(f"{qtype} has no int8 path")
    wg, rows, cpt, subgroup, split_k = params
    cfg = PipelineConfig(path, int_dot, subgroup, wg, rows, cpt, split_k=split_k)
    x = np.random.default_rng(5).uniform(-1, 1, (K, 3)).astype(np.float32)
    y = backend.matvec(w, x, config=cfg)
    assert nmse(y, w64 @ x.astype(np.float64)) < 5e-4
    assert nmse(y, matvec_model(w64, x, path)) < 1e-9


@pytest.mark.parametrize("qtype", VALUE_TYPES)
@pytest.mark.parametrize("value_lookup", VALUE_LOOKUPS)
@pytest.mark.parametrize("params", [PARAMS[2], PARAMS[8]], ids=["splitk", "rows"])
@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_value_lookups(backend, matrices, qtype, value_lookup, params, path):
    """The pair table and the selects decode the same values, on both paths."""
    assert set(VALUE_TYPES) == {"MXFP4", "IQ4_NL", "IQ4_XS", "NVFP4"}
    w, w64 = matrices[qtype]
    wg, rows, cpt, subgroup, split_k = params
    cfg = PipelineConfig(path, path == "mmvq", subgroup, wg, rows, cpt, split_k=split_k, value_lookup=value_lookup)
    x = np.random.default_rng(6).uniform(-1, 1, (K, 2)).astype(np.float32)
    y = backend.matvec(w, x, config=cfg)
    assert nmse(y, w64 @ x.astype(np.float64)) < 5e-4
    assert nmse(y, matvec_model(w64, x, path)) < 1e-9
