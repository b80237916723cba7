"""Every limit that decides whether a launch computes the right numbers,
walked: just inside it the result is right, just outside it `config=` is
refused with an error naming the limit, and the dispatcher's own choices are
adapted, the change named in `source` (vkq/dispatch/choose.py).

The limits: threads per workgroup, shared memory (the reduction buffer),
rows per workgroup (partial sums a thread holds), chunks per thread dividing
the row, and on lavapipe the loop budget of a shader invocation (65535
iterations, after which llvmpipe silently cuts every loop short: the cause
of rows_per_wg 976 with split_k false giving NMSE 0.96 / 2.6e65).
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from conftest import ROOT
from ggml_quant import random_weights
from vkq.blocks.formats import CHUNK, FORMATS
from vkq.blocks.reference import dequantize, matvec_model, nmse
from vkq.dispatch.choose import Dispatcher, apply_limits, check_config, loop_iterations
from vkq.dispatch.config import MAX_ROWS_PER_WG, PipelineConfig

ROWS, K = 45, 2048


@pytest.fixture(scope="module")
def matrices(backend):
    out = {}
    for qtype, rows, k in [("Q4_0", ROWS, K), ("Q4_K", ROWS, K), ("Q4_0", 5, 96)]:
        data = random_weights(rows, k, qtype, seed=3)
        out[qtype, k] = backend.upload(qtype, (rows, k), data), dequantize(qtype, (rows, k), data)
    return out


def assert_right(backend, w, w64, cfg: PipelineConfig, ncols: int = 1) -> None:
    x = np.random.default_rng(4).uniform(-1, 1, (w64.shape[1], ncols)).astype(np.float32)
    y = backend.matvec(w, x, config=cfg)
    assert nmse(y, matvec_model(w64, x, cfg.path)) < 1e-9, cfg


def cfg(path="dmmv", wg=8, rows=2, cpt=1, subgroup=True, split_k=True) -> PipelineConfig:
    return PipelineConfig(path, path == "mmvq", subgroup, wg, rows, cpt, split_k=split_k, source="test")


@pytest.fixture
def device_caps(backend, monkeypatch):
    """Set fields of this backend's DeviceCaps for one test (a smaller device)."""
    def set_caps(**kw):
        monkeypatch.setattr(backend.device, "caps", replace(backend.device.caps, **kw))
    return set_caps


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("subgroup", [True, False], ids=["subgroup", "shared"])
def test_workgroup_size(backend, matrices, device_caps, path, subgroup):
    w, w64 = matrices["Q4_K", K]
    top = min(backend.device.caps.max_workgroup_invocations, backend.device.caps.max_workgroup_size_x)
    device_caps(max_workgroup_invocations=top // 2)  # a smaller device first (calls are cached per config)
    with pytest.raises(ValueError, match=f"wg_size {top} > the device's {top // 2} threads per workgroup"):
        backend.matvec(w, np.ones(K, np.float32), config=cfg(path, wg=top, rows=1, subgroup=subgroup))
    device_caps(max_workgroup_invocations=top)
    assert_right(backend, w, w64, cfg(path, wg=top, rows=1, subgroup=subgroup))
    with pytest.raises(ValueError, match="wg_size 2048 is not a power of two in 1..1024"):
        cfg(path, wg=2048)


@pytest.mark.parametrize("subgroup", [True, False], ids=["subgroup", "shared"])
def test_workgroup_smaller_than_subgroup(backend, matrices, subgroup):
    """A workgroup of fewer threads than a subgroup (lavapipe's is 8) reduces right."""
    w, w64 = matrices["Q4_0", K]
    for wg in (1, 2, 4):
        assert_right(backend, w, w64, cfg("mmvq", wg=wg, rows=3, subgroup=subgroup), ncols=2)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_shared_memory(backend, matrices, path):
    """wg x rows x columns x 4 bytes of reduction buffer: exactly the device's
    shared memory runs right; twice is refused."""
    w, w64 = matrices["Q4_0", K]
    caps = backend.device.caps
    shared, ncols = caps.max_shared_memory, 8
    # rows x a power-of-two workgroup filling it exactly (lavapipe's 32 KiB: 16 x 64; the H100's 48 KiB: 12 x 128)
    wg, rows = next((shared // (r * ncols * 4), r) for r in range(MAX_ROWS_PER_WG, 0, -1)
                    if shared % (r * ncols * 4) == 0 and _power_of_two(shared // (r * ncols * 4))
                    and shared // (r * ncols * 4) <= caps.max_workgroup_invocations)
    assert_right(backend, w, w64, cfg(path, wg=wg, rows=rows), ncols=ncols)
    with pytest.raises(ValueError, match=f"{2 * shared} bytes of shared memory > the device's {shared}"):
        backend.matvec(w, np.ones((K, ncols), np.float32), config=cfg(path, wg=2 * wg, rows=rows))


@pytest.mark.parametrize("split_k", [True, False], ids=["split_k", "rows"])
def test_rows_per_wg(backend, matrices, split_k):
    w, w64 = matrices["Q4_K", K]
    assert_right(backend, w, w64, cfg("mmvq", wg=8, rows=MAX_ROWS_PER_WG, cpt=8, split_k=split_k))
    for rows in (MAX_ROWS_PER_WG + 1, 1_000_000, 0):  # 1000000: the tuning value
        with pytest.raises(ValueError, match=f"rows_per_wg {rows} not in 1..{MAX_ROWS_PER_WG}"):
            cfg("mmvq", rows=rows, split_k=split_k)


def test_chunks_per_thread(backend, matrices):
    """K=96 is 3 chunks: 1 per thread divides them, 2 does not."""
    w, w64 = matrices["Q4_0", 96]
    assert_right(backend, w, w64, cfg("mmvq", cpt=1))
    with pytest.raises(ValueError, match="chunks_per_thread 2 does not divide the 3 32-element chunks"):
        backend.matvec(w, np.ones(96, np.float32), config=cfg("mmvq", cpt=2))
    with pytest.raises(ValueError, match="chunks_per_thread 3 not in"):
        cfg("mmvq", cpt=3)
    adapted = apply_limits(cfg("mmvq", cpt=8), backend.device.caps, w.layout.fmt, 96, 1)
    assert adapted.chunks_per_thread == 1 and "chunks_per_thread 8 -> 1" in adapted.source


def _largest_k(config: PipelineConfig, fmt, ncols: int, budget: int) -> int:
    """The largest K (whole blocks, whole units of chunks_per_thread chunks)
    whose loop bound fits the budget."""
    unit = max(fmt.block_elems, CHUNK * config.chunks_per_thread)
    k = unit
    while loop_iterations(config, 2 * k, ncols, 8) <= budget:
        k *= 2
    step = k // 2
    while step >= unit:
        if loop_iterations(config, k + step, ncols, 8) <= budget:
            k += step
        step //= 2
    return k


# (rows, columns): the dequantize path holds x of every column (fewer columns
# than rows) or each row's half-blocks (as many columns or more): two loop
# structures, each counted.
@pytest.mark.parametrize("rows_per_thread, ncols", [(16, 1), (2, 3)])
def test_loop_budget(backend, rows_per_thread, ncols):
    """lavapipe: a thread owning its rows at the largest K within the budget
    gives the right result; one block more is refused; the dispatcher
    switches such a launch to split K and says so."""
    budget = backend.device.caps.max_loop_iterations
    if budget is None:
        pytest.skip("this driver has no known loop budget")
    fmt = FORMATS["Q4_0"]
    config = cfg("dmmv", wg=8, rows=rows_per_thread, split_k=False)
    k_in = _largest_k(config, fmt, ncols, budget)
    assert loop_iterations(config, k_in + 32, ncols, 8) > budget
    rows = rows_per_thread * 8 + 3  # a full workgroup of threads and a partial one
    data = random_weights(rows, k_in, "Q4_0", seed=5)
    w, w64 = backend.upload("Q4_0", (rows, k_in), data), dequantize("Q4_0", (rows, k_in), data)
    assert_right(backend, w, w64, config, ncols)
    with pytest.raises(ValueError, match=f"this driver cuts a thread's loops short after {budget}"):
        check_config(config, backend.device.caps, fmt, k_in + 32, ncols)
    adapted = apply_limits(config, backend.device.caps, fmt, k_in + 32, ncols)
    assert adapted.split_k and "split_k False -> True: loop budget" in adapted.source


def test_block_decoders_have_no_loops():
    """loop_iterations counts mul_mat_vec.comp's loops only: a loop in a
    block decoder would spend lavapipe's budget uncounted (cut short: wrong
    numbers at large K). The decoders are written out instead."""
    decoders = sorted((ROOT / "shaders" / "blocks").glob("*.glsl"))
    assert len(decoders) >= len(FORMATS)
    for path in decoders:
        code = re.sub(r"//[^\n]*", "", path.read_text())
        assert not re.search(r"\b(for|while|do)\b", code), f"{path.name} has a loop"


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("qtype", list(FORMATS))
def test_loop_budget_every_type(backend, qtype, path):
    """lavapipe: every block type at the largest K whose loop bound fits the
    budget, one thread owning 16 rows (the table's launch): right, so no
    decoder spends loop iterations the bound does not count."""
    budget = backend.device.caps.max_loop_iterations
    fmt = FORMATS[qtype]
    if budget is None:
        pytest.skip("this driver has no known loop budget")
    if path not in fmt.paths:
        pytest.skip(f"{qtype} has no {path} path")
    config = replace(cfg(path, wg=8, rows=16, cpt=8, split_k=False), weights_binding="texel")
    k = _largest_k(config, fmt, 1, budget)
    rows = 16 + 3  # one thread's 16 rows and a partial second
    data = random_weights(rows, k, qtype, seed=8)
    w, w64 = backend.upload(qtype, (rows, k), data), dequantize(qtype, (rows, k), data)
    assert_right(backend, w, w64, config)
    w.free()


def test_dispatcher_adapts_table_choice_to_loop_budget(backend):
    """The lavapipe table gives Q8_0 at one column rows per thread
    (split_k false); past the loop budget the dispatcher splits K instead,
    and the result stays right."""
    budget = backend.device.caps.max_loop_iterations
    if budget is None or backend.dispatcher.device_class.arch != "lavapipe":
        pytest.skip("lavapipe's table and loop budget")
    fmt = FORMATS["Q8_0"]
    small = backend.dispatcher.choose(fmt, 8, 4096, 1, "mmvq")
    assert not small.split_k
    k = _largest_k(small, fmt, 1, budget) + 32
    data = random_weights(8, k, "Q8_0", seed=6)
    w, w64 = backend.upload("Q8_0", (8, k), data), dequantize("Q8_0", (8, k), data)
    chosen = backend.pipeline(w, 1, "mmvq")
    assert chosen.split_k and "loop budget" in chosen.source
    x = np.random.default_rng(7).uniform(-1, 1, k).astype(np.float32)
    assert nmse(backend.matvec(w, x, "mmvq"), matvec_model(w64, x, "mmvq")) < 1e-9


def test_dispatcher_clamps_named_in_source(backend):
    """A table entry beyond a smaller device's limits is adapted, each change named."""
    table = backend.dispatcher.choose(FORMATS["Q4_K"], 4096, 4096, 1, "mmvq")
    assert table.wg_size > 4 and table.rows_per_wg > 1, table  # so both limits below bite
    # room for half the table's rows at 4 threads (one column, 4-byte partial sums)
    shared = 4 * 4 * (table.rows_per_wg // 2)
    caps = replace(backend.device.caps, max_workgroup_invocations=4, max_shared_memory=shared)
    chosen = Dispatcher(caps, backend.dispatcher.device_class, {}).choose(FORMATS["Q4_K"], 4096, 4096, 1, "mmvq")
    assert chosen.wg_size == 4 and f"wg_size {table.wg_size} -> 4" in chosen.source
    assert chosen.rows_per_wg * chosen.wg_size * 4 <= shared and "shared memory" in chosen.source


def test_nothing_fits_is_an_error(backend):
    caps = replace(backend.device.caps, max_loop_iterations=10)
    with pytest.raises(ValueError, match="no launch of Q4_0 at K=4096 with 1 column"):
        apply_limits(cfg(), caps, FORMATS["Q4_0"], 4096, 1)


def test_config_must_be_a_pipeline_config(backend, matrices):
    w, _ = matrices["Q4_0", K]
    with pytest.raises(TypeError, match="config must be a vkq.dispatch.config.PipelineConfig"):
        backend.matvec(w, np.ones(K, np.float32), config={"wg_size": 8})
    with pytest.raises(ValueError, match="split_k 'no' is not true or false"):
        PipelineConfig("dmmv", False, True, 8, 2, split_k="no")
