"""The launches the GPU tables choose, run here on lavapipe for every block
type: the NVIDIA Turing+ entries measured on an H100 (int8 path, wg 32, 2 rows,
subgroup reduction, storage bindings; F16/BF16 wg 64, 4 rows, texel
bindings) and every GPU table's dequantize-path launch, at one and at three
columns. Each must give right numbers before anyone runs it on a GPU."""
import numpy as np
import pytest

from ggml_quant import random_weights
from vkq.blocks.formats import FORMATS
from vkq.blocks.reference import dequantize, nmse
from vkq.dispatch import tables
from vkq.dispatch.classify import DeviceClass
from vkq.dispatch.config import PipelineConfig

ROWS, K = 45, 2048  # 45: not a multiple of 2 or 4 rows per workgroup
GPU_VENDORS = ("nvidia", "amd", "intel", "apple", "qualcomm", "arm")


def gpu_configs(qtype: str, ncols: int) -> dict[tuple, PipelineConfig]:
    """Every distinct launch the GPU tables give this type, both paths."""
    out = {}
    fmt = FORMATS[qtype]
    for vendor in GPU_VENDORS:
        for key in tables.load_table(vendor)["classes"]:
            parts = key.split("/")
            cls = DeviceClass(parts[0], parts[1], parts[2] if len(parts) > 2 else "unknown")
            for path in fmt.paths:
                p, _, _ = tables.lookup(cls, qtype, 4096, K, ncols, path)
                cfg = PipelineConfig(p["path"], p["path"] == "mmvq", p["reduction"] == "subgroup", p["wg_size"],
                                     p["rows_per_wg"], p["chunks_per_thread"], p["split_k"],
                                     weights_binding=p["weights_binding"], x_binding=p["x_binding"])
                out[(cfg.path, cfg.wg_size, cfg.rows_per_wg, cfg.chunks_per_thread, cfg.subgroup, cfg.split_k,
                     cfg.weights_binding, cfg.x_binding)] = cfg
    return out


# The tables' launch parameters do not depend on the column count (only their
# path choice does), so n = 1 and n = 3 check the same launches twice over.
# Default suite: a plain, a small-block and a k-quant type; every type: -m slow.
FAST = ("F16", "Q4_0", "Q4_K")
CASES = [pytest.param(t, n, marks=() if t in FAST and n == 1 else pytest.mark.slow)
         for t in FORMATS for n in (1, 3)]


@pytest.mark.parametrize("qtype,ncols", CASES)
def test_gpu_table_launches(backend, qtype, ncols):
    data = random_weights(ROWS, K, qtype, seed=11)
    w = backend.upload(qtype, (ROWS, K), data)
    w64 = dequantize(qtype, (ROWS, K), data)
    x = np.random.default_rng(3).uniform(-1, 1, (K, ncols)).astype(np.float32)
    want = w64 @ x.astype(np.float64)
    configs = gpu_configs(qtype, ncols)
    assert any(c.path == "dmmv" for c in configs.values())
    if qtype in ("F16", "BF16"):
        assert any((c.wg_size, c.rows_per_wg, c.weights_binding) == (64, 4, "texel") for c in configs.values())
    if FORMATS[qtype].has_int8_path:
        assert any(c.path == "mmvq" and (c.wg_size, c.rows_per_wg) == (32, 2) for c in configs.values())
    for key, cfg in configs.items():
        y = backend.matvec(w, x if ncols > 1 else x[:, 0], config=cfg)
        assert nmse(y.reshape(ROWS, ncols), want) < 5e-4, key
