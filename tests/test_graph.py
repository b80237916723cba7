"""The batched API (vkq.Graph, vkq.Tensor): results, ordering, replay, bad input.

Every result of a graph must be bit-identical to Backend.matvec(_id) with
the same pipeline: a graph records the very dispatches a call replays, so
anything else is a bug (a missing barrier, a stale Q8_1, a wrong stride).
"""
from __future__ import annotations

import sys
import threading
import time
import numpy as np
import pytest

from conftest import random_ids, random_x, type_paths

import ggml_quant
import vkq
from vkq.dispatch.config import PipelineConfig
from vkq.ops import MatVec


def upload(backend, qtype, rows, k, seed=0, n_expert=None):
    shape = (rows, k) if n_expert is None else (n_expert, rows, k)
    data = ggml_quant.random_weights(rows * (n_expert or 1), k, qtype, seed=seed)
    return backend.upload(qtype, shape, data)


def chain_by_calls(backend, ws, x, cfgs):
    """y = W_n @ ... @ W_1 @ x through one Backend.matvec per matrix."""
    for w, cfg in zip(ws, cfgs):
        x = backend.matvec(w, x, config=cfg)
    return x


# -- results -----------------------------------------------------------------

@pytest.mark.parametrize("qtype, path", type_paths())
@pytest.mark.parametrize("ncols", [1, 3])
def test_chain_equals_calls(backend, qtype, path, ncols):
    """Three chained mat-vecs of odd sizes (the output of one is the input of
    the next): bit-identical to three Backend.matvec calls."""
    fmt = vkq.get_format(qtype)
    # K of each matrix (the rows of the one before) a whole number of blocks;
    # plain types get sizes that are not whole 32-value chunks.
    sizes = [37, 50, 19, 23] if fmt.is_plain else [2 * fmt.block_elems, 3 * fmt.block_elems, fmt.block_elems, 45]
    ws = [upload(backend, qtype, sizes[i + 1], sizes[i], seed=i) for i in range(3)]
    x = random_x(sizes[0], ncols) if ncols > 1 else random_x(sizes[0])
    g = backend.graph()
    xt = g.input(backend.tensor(sizes[0], ncols))
    h = xt
    for w in ws:
        h = g.matvec(w, h, path)
    g.output(h)
    xt.write(np.ascontiguousarray(x.T) if ncols > 1 else x)
    g.run()
    got = h.read()
    cfgs = [cfg for _, cfg in g.matvecs]
    want = chain_by_calls(backend, ws, x, cfgs)
    assert np.array_equal(got, want.T if ncols > 1 else want)
    # each mat-vec (and each Q8_1 quantization) reads what the node before wrote
    assert g.counts["barrier"] == (5 if path == "mmvq" else 2)


@pytest.mark.parametrize("binding", ["storage", "texel"])
@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("shared", [True, False])
def test_matvec_id_equals_call(backend, path, binding, shared):
    n_expert, rows, k, n_used = 5, 37, 512, 4
    w = upload(backend, "Q4_K", rows, k, seed=3, n_expert=n_expert)
    ids = random_ids(n_used, n_expert)
    x = random_x(k) if shared else random_x(k * n_used).reshape(n_used, k)
    cfg = PipelineConfig(path, path == "mmvq", False, 8, 2, weights_binding=binding, x_binding=binding)
    g = backend.graph()
    xt = g.input(backend.tensor(k, 1 if shared else n_used))
    it = g.input(backend.tensor(n_used, dtype=np.int32))
    y = g.output(g.matvec_id(w, xt, it, config=cfg))
    xt.write(x)
    it.write(ids)
    g.run()
    assert y.shape == (n_used, rows)
    assert np.array_equal(y.read(), backend.matvec_id(w, x, ids, config=cfg))


@pytest.mark.parametrize("ncols", range(1, vkq.MAX_COLS + 1))
@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_columns(backend, path, ncols):
    w = upload(backend, "Q5_1", 45, 96, seed=5)
    x = random_x(96, ncols)  # (96, ncols)
    g = backend.graph()
    xt = g.input(backend.tensor(96, ncols))
    y = g.output(g.matvec(w, xt, path))
    xt.write(np.ascontiguousarray(x.T) if ncols > 1 else x[:, 0])
    g.run()
    want = backend.matvec(w, x, config=g.matvecs[0][1])  # (45, ncols)
    assert np.array_equal(y.read(), want.T if ncols > 1 else want[:, 0])


def test_shared_activation_is_quantized_once(backend):
    """Q/K/V-style: three int8 mat-vecs of one x share one Q8_1 quantization
    and run without a barrier between them; a mat-vec after a node rewrote x
    quantizes again."""
    ws = [upload(backend, "Q4_0", rows, 128, seed=rows) for rows in (64, 32, 32)]
    g = backend.graph()
    x = g.input(backend.tensor(128))
    ys = [g.output(g.matvec(w, x, "mmvq")) for w in ws]
    assert g.counts == {"barrier": 1, "quantize": 1, "group": 0, "matvec": 3, "matmul": 0, "op": 0}  # quantize -> barrier -> 3 mat-vecs
    back = upload(backend, "Q4_0", 128, 64, seed=7)
    g.matvec(back, ys[0], "mmvq", out=x)  # writes x (after the three read it)
    again = g.output(g.matvec(ws[1], x, "mmvq"))
    assert g.counts["quantize"] == 3
    xv = random_x(128)
    x.write(xv)
    g.run()
    cfg = g.matvecs[0][1]
    for w, y in zip(ws, ys):
        assert np.array_equal(y.read(), backend.matvec(w, xv, config=cfg))
    cfg_back = g.matvecs[3][1]  # K=64 has 2 chunks per row: its own chunks per thread
    x2 = backend.matvec(back, backend.matvec(ws[0], xv, config=cfg), config=cfg_back)
    assert np.array_equal(again.read(), backend.matvec(ws[1], x2, config=cfg))


def test_added_op_is_ordered(backend):
    """g.add takes any op with reads/writes/record: here a user-built MatVec;
    the graph puts a barrier between it and the mat-vec that reads its output."""
    w1, w2 = upload(backend, "Q8_0", 64, 96, seed=1), upload(backend, "Q8_0", 40, 64, seed=2)
    cfg = backend.pipeline(w1, 1, "dmmv")

    class Op:
        def __init__(self, x, y):
            self.reads, self.writes = (x,), (y,)
            self.matvec = MatVec(backend.device, w1, cfg, x.kp, y.kp, y_stride=y.stride)

        def record(self, seq):
            self.matvec.record(seq)

    g = backend.graph()
    x = g.input(backend.tensor(96))
    h = backend.tensor(64)
    g.add(Op(x, h))
    y = g.output(g.matvec(w2, h, "dmmv"))
    assert g.counts["barrier"] == 1 and g.counts["op"] == 1
    xv = random_x(96)
    x.write(xv)
    g.run()
    assert np.array_equal(y.read(), backend.matvec(w2, backend.matvec(w1, xv, "dmmv"), "dmmv"))


def test_replays_are_deterministic_and_take_new_inputs(backend):
    w = upload(backend, "Q6_K", 33, 256, seed=4)
    g = backend.graph()
    x = g.input(backend.tensor(256))
    y = g.output(g.matvec(w, x))
    results = []
    for seed in (1, 2, 1):
        x.write(random_x(256, seed=seed))
        g.run()
        results.append(y.read())
    assert np.array_equal(results[0], results[2]) and not np.array_equal(results[0], results[1])


def test_output_read_before_its_first_replay_is_refused(backend):
    """Before a replay brings it back, an output's host copy is zeros: read()
    refuses it, then returns the device's values; float64 and int64 writes
    are converted."""
    w = upload(backend, "Q8_0", 16, 64, seed=5)
    g = backend.graph()
    x = g.input(backend.tensor(64))
    y = g.output(g.matvec(w, x))
    with pytest.raises(RuntimeError, match=r"'y'.* is a graph's output that no replay has brought back yet"):
        y.read()
    x.write(random_x(64).astype(np.float64))
    g.run()
    assert np.array_equal(y.read(), backend.matvec(w, random_x(64)))
    ids = backend.tensor(2, dtype=np.int32)
    ids.write(np.array([1, 7]))  # numpy's int64
    assert ids.read().tolist() == [1, 7]  # (a host tensor reads back what was written)
    with pytest.raises(ValueError, match=r"holds \[4294967296\], which int32 cannot hold"):
        ids.write(np.array([1, 2**32]))


def test_matvec_many(backend):
    w1, w2 = upload(backend, "Q4_1", 48, 64, seed=1), upload(backend, "Q4_K", 20, 256, seed=2)
    x1, x2 = random_x(64), random_x(256, 3)
    y1, y2, y3 = backend.matvec_many([(w1, x1), (w2, x2), (w1, x1)], "mmvq")
    assert np.array_equal(y1, backend.matvec(w1, x1, "mmvq")) and np.array_equal(y1, y3)
    assert np.array_equal(y2, backend.matvec(w2, x2, "mmvq"))
    with pytest.raises(ValueError, match=r"products\[0\] x must have shape \(64,\)"):
        backend.matvec_many([(w1, x2)])
    with pytest.raises(TypeError, match="pair"):
        backend.matvec_many([w1])


# -- asynchronous replay ------------------------------------------------------

def test_submit_then_wait(backend):
    w = upload(backend, "Q4_0", 64, 64)
    g = backend.graph()
    x = g.input(backend.tensor(64))
    y = g.output(g.matvec(w, x))
    x.write(random_x(64))
    r = g.submit()
    with pytest.raises(RuntimeError, match="in flight"):
        g.submit()
    with pytest.raises(RuntimeError, match="in flight"):
        y.read()
    with pytest.raises(RuntimeError, match="in flight"):
        x.write(random_x(64))
    r.wait()
    with pytest.raises(RuntimeError, match="already waited"):
        r.wait()
    assert np.array_equal(y.read(), backend.matvec(w, random_x(64), config=g.matvecs[0][1]))
    with pytest.raises(RuntimeError, match="fixed"):
        g.matvec(w, x)


def test_waiting_for_the_device_lets_other_threads_run(backend):
    """Graph.wait releases Python's GIL while the device works (kp patch
    0012): a thread counting meanwhile keeps counting through the middle of
    the wait, where a wait that held the GIL would let it run only for a
    switch interval (5 ms) now and then, if at all."""
    w = upload(backend, "Q4_0", 4096, 4096)
    g = backend.graph()
    x = g.input(backend.tensor(4096))
    y = x
    for _ in range(32):  # (a chain of mat-vecs: tens of ms on a CPU driver, and a GPU's wait is no shorter a call)
        y = g.matvec(w, y)
    g.output(y)
    x.write(random_x(4096))
    g.run()  # (the first replay records and compiles)
    ticks, stop = [], threading.Event()

    def count():  # (sleep(0) hands the GIL back at once: the main thread is never kept from its wait)
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0)

    counter = threading.Thread(target=count)
    counter.start()
    replay = g.submit()
    t0 = time.perf_counter()
    replay.wait()
    t1 = time.perf_counter()
    stop.set()
    counter.join()
    span = t1 - t0
    if span < 0.03:
        pytest.skip(f"the replay took {1e3 * span:.1f} ms: too short to tell a wait that holds the GIL")
    middle = [t for t in ticks if t0 + 0.01 < t < t1 - 0.01]
    assert middle, f"no other thread ran in the middle of a {1e3 * span:.0f} ms wait"


def test_timestamps(backend):
    w = upload(backend, "Q4_0", 256, 256)
    g = backend.graph(timestamps=True)
    x = g.input(backend.tensor(256))
    g.output(g.matvec(w, g.matvec(upload(backend, "Q4_0", 256, 256, seed=1), x)))
    assert g.kernel_seconds is None
    g.run()
    if backend.device_info.timestamps_supported:
        assert 0 < g.kernel_seconds < 1


# -- bad input ------------------------------------------------------------------

def test_bad_input_is_refused(backend):
    w = upload(backend, "Q4_0", 64, 128)
    g = backend.graph()
    with pytest.raises(TypeError, match="vkq.Tensor"):
        g.matvec(w, np.zeros(128, np.float32))
    with pytest.raises(ValueError, match="K is 128"):
        g.matvec(w, backend.tensor(64))  # a producer's 64 outputs into a K=128 consumer
    with pytest.raises(TypeError, match="float32"):
        g.matvec(w, backend.tensor(128, dtype=np.int32))
    with pytest.raises(ValueError, match="at most 8; more vectors: Graph.matmul"):
        g.matvec(w, backend.tensor(128, 9))
    with pytest.raises(ValueError, match="9 columns; vkq's mat-vec takes 1 to 8; more columns: Backend.matmul"):
        backend.matvec(w, np.zeros((128, 9), np.float32))
    with pytest.raises(ValueError, match="out"):
        g.matvec(w, backend.tensor(128), out=backend.tensor(63))
    square = upload(backend, "Q4_0", 128, 128)
    x = backend.tensor(128)
    with pytest.raises(ValueError, match="cannot write the vector it reads"):
        g.matvec(square, x, out=x)
    x = backend.tensor(128)
    with pytest.raises(ValueError, match="shape"):
        x.write(np.zeros(127, np.float32))
    with pytest.raises(TypeError, match="float32"):
        x.write(np.zeros(128, np.int64))
    with pytest.raises(ValueError, match="empty"):
        backend.graph().run()
    with pytest.raises(ValueError, match="positive"):
        backend.tensor(0)


def test_tensor_of_another_backend_is_refused(backend):
    other = vkq.Backend()
    g = backend.graph()
    with pytest.raises(ValueError, match="another backend"):
        g.input(other.tensor(16))
    with pytest.raises(TypeError, match="this backend"):
        g.matvec(other.upload("Q4_0", (32, 32), bytes(32 * 18)), backend.tensor(32))


def test_freed_weights(backend):
    w = upload(backend, "Q4_0", 32, 64)
    g = backend.graph()
    x = g.input(backend.tensor(64))
    g.output(g.matvec(w, x))
    g.run()
    backend.matvec(w, random_x(64))
    w.free()
    with pytest.raises(RuntimeError, match="freed"):
        g.run()
    with pytest.raises(ValueError, match="freed"):
        backend.matvec(w, random_x(64))


# -- threads ----------------------------------------------------------------------

def test_threads_get_their_own_results(backend):
    """Several threads on one Backend, the same and different weights, with a
    short switch interval: every result equals the single-threaded one."""
    ws = [upload(backend, "Q4_K", 64, 256, seed=s) for s in range(2)]
    xs = [random_x(256, seed=s) for s in range(8)]
    want = {(i, j): backend.matvec(w, x) for i, w in enumerate(ws) for j, x in enumerate(xs)}
    errors = []

    def work(t):
        for n in range(40):
            i, j = (t + n) % 2, (3 * t + n) % 8
            if not np.array_equal(backend.matvec(ws[i], xs[j]), want[i, j]):
                errors.append((t, n))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors


def test_too_many_ids(backend):
    """A MUL_MAT_ID's used experts are workgroup rows: at most 65535 of them."""
    w = upload(backend, "Q4_0", 32, 32, n_expert=2)
    with pytest.raises(ValueError, match="n_used <= 65535"):
        backend.matvec_id(w, random_x(32), np.zeros(65536, np.int32))
    with pytest.raises(ValueError, match="at most 65535"):
        backend.graph().matvec_id(w, backend.tensor(32), backend.tensor(65536, dtype=np.int32))
