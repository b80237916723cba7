"""Every launch parameter the dispatcher or `vkq tune` may pick gives right
results: workgroup sizes, rows per workgroup (also not dividing the rows),
chunks per thread, both reductions, OpSDot and its int32 emulation."""
import numpy as np
import pytest

from ggml_quant import random_weights
from vkq.dispatch.config import PipelineConfig
from vkq.reference import dequantize, matvec_model, nmse

ROWS, K = 45, 2048  # 45: not a multiple of any rows_per_wg > 1

PARAMS = [
    # (wg_size, rows_per_wg, chunks_per_thread, subgroup)
    (1, 1, 1, False),
    (8, 8, 1, True),
    (8, 8, 8, True),
    (16, 4, 2, False),
    (32, 2, 4, True),
    (64, 1, 8, False),
    (128, 3, 1, True),
]
TYPES = ["Q4_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4", "F16"]


@pytest.fixture(scope="module")
def matrices(backend):
    out = {}
    for qtype in TYPES:
        data = random_weights(ROWS, K, qtype, seed=7)
        out[qtype] = (backend.upload(qtype, (ROWS, K), data), dequantize(qtype, (ROWS, K), data))
    return out


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "wg{}-rows{}-cpt{}-{}".format(*p[:3], "sg" if p[3] else "sh"))
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("path,int_dot", [("dmmv", False), ("mmvq", True), ("mmvq", False)],
                         ids=["dmmv", "mmvq-dot", "mmvq-emul"])
def test_params(backend, matrices, qtype, path, int_dot, params):
    w, w64 = matrices[qtype]
    if path == "mmvq" and not w.layout.fmt.has_int8_path:
        pytest.skip(f"{qtype} has no int8 path")
    wg, rows, cpt, subgroup = params
    cfg = PipelineConfig(path, int_dot, subgroup, wg, rows, cpt)
    x = np.random.default_rng(5).uniform(-1, 1, (K, 3)).astype(np.float32)
    y = backend.matvec(w, x, config=cfg)
    assert nmse(y, w64 @ x.astype(np.float64)) < 5e-4
    assert nmse(y, matvec_model(w64, x, path)) < 1e-9
