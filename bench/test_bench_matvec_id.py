"""MUL_MAT_ID (mixture of experts) at the shapes of real MoE models, one token.

- Qwen3-30B-A3B: 128 experts, 8 used; gate/up 768 x 2048, down 2048 x 768.
- gpt-oss-20b: 32 experts, 4 used, MXFP4, 2880 x 2880.
The numpy baseline dequantizes only the selected experts and multiplies.
"""
import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.blocks.reference import dequantize
from vkq.blocks.synthetic import random_weights

CASES = [
    # (model, tensor, n_expert, n_used, rows, K, qtype)
    *[("qwen3-30b-a3b", "ffn_up_exps", 128, 8, 768, 2048, t) for t in ("Q4_0", "Q8_0", "Q4_K", "Q6_K")],
    *[("qwen3-30b-a3b", "ffn_down_exps", 128, 8, 2048, 768, t) for t in ("Q4_K", "Q6_K")],
    ("gpt-oss-20b", "ffn_up_exps", 32, 4, 2880, 2880, "MXFP4"),
]


@pytest.fixture(scope="module")
def experts_cache():
    return {}


@pytest.mark.parametrize("impl", ["numpy", "dmmv", "mmvq"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[6]}")
def test_matvec_id(benchmark, backend, record, experts_cache, impl, case):
    model, tensor, n_expert, n_used, rows, k, qtype = case
    if case not in experts_cache:
        experts_cache.clear()
        data = random_weights(FORMATS[qtype], rows, k, np.random.default_rng(3), n_expert=n_expert)
        experts_cache[case] = (data.reshape(n_expert, rows, -1), backend.upload(qtype, (n_expert, rows, k), data))
    data, w = experts_cache[case]
    rng = np.random.default_rng(4)
    ids = rng.choice(n_expert, n_used, replace=False).astype(np.int32)
    x = rng.uniform(-1, 1, k).astype(np.float32)
    group = f"{model} {tensor} {qtype}"
    benchmark.group = group
    if impl == "numpy":
        def run():
            return np.stack([dequantize(qtype, (rows, k), data[e]).astype(np.float32) @ x for e in ids])
        y = benchmark.pedantic(run, rounds=5, iterations=1)
    else:
        y = benchmark.pedantic(lambda: backend.matvec_id(w, x, ids, path=impl), rounds=20, iterations=1,
                               warmup_rounds=1)
    assert y.shape == (n_used, rows)
    # bytes read per token: the selected experts only
    record(benchmark, group, impl, w.nbytes * n_used // n_expert)
