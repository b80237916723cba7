"""Mat-vec of a 4096 x 14336 matrix (a Llama-3-8B FFN projection) per type.

Cases per type and column count: numpy (gguf dequantize + float64-free
float32 mat-vec, the baseline), vkq's dequantize path, vkq's int8 path.
"""
import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.blocks.reference import dequantize
from vkq.blocks.synthetic import random_weights

ROWS, K = 4096, 14336
TYPES = [name for name in FORMATS if name != "F32"]


@pytest.fixture(scope="module")
def weights_cache():
    return {}


def _weights(cache, backend, qtype):
    if qtype not in cache:
        cache.clear()  # one type at a time: a 4096 x 14336 F16 matrix is 117 MB
        data = random_weights(FORMATS[qtype], ROWS, K, np.random.default_rng(1))
        cache[qtype] = (data, backend.upload(qtype, (ROWS, K), data))
    return cache[qtype]


@pytest.mark.parametrize("ncols", [1, 4])
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("impl", ["numpy", "dmmv", "mmvq"])
def test_matvec(benchmark, backend, record, weights_cache, impl, qtype, ncols):
    if impl == "mmvq" and not FORMATS[qtype].has_int8_path:
        pytest.skip(f"{qtype} has no int8 path")
    data, w = _weights(weights_cache, backend, qtype)
    x = np.random.default_rng(2).uniform(-1, 1, (K, ncols)).astype(np.float32)
    group = f"{qtype} n={ncols}"
    benchmark.group = group
    if impl == "numpy":
        y = benchmark.pedantic(lambda: dequantize(qtype, (ROWS, K), data).astype(np.float32) @ x,
                               rounds=3, iterations=1)
    else:
        y = benchmark.pedantic(lambda: backend.matvec(w, x, path=impl), rounds=10, iterations=1,
                               warmup_rounds=1)
    assert y.shape == (ROWS, ncols)
    record(benchmark, group, impl, w.nbytes)
