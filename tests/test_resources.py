"""What vkq allocates is given back: Backends, graphs, replays and the
matvec_many graphs of weights that are dropped or freed.

Each test repeats an action many times after a warm-up and bounds the growth
of the process's resident memory and open files. The bounds are several
times the noise measured on lavapipe (a few MB over these loops) and well
under what one leaked object per iteration adds (a Backend ~7.7 MB, a
matvec_many graph ~0.08 MB).
"""
from __future__ import annotations

import gc
import os

import numpy as np

import ggml_quant
import vk_validation
import vkq


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def open_files() -> int:
    """Open file descriptors, less the Khronos validation layer's handles on
    its log file (`make validate`: the layer opens it once per Vulkan
    instance and keeps it open)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used, now closed
            continue
        n += not (vk_validation.enabled() and target == str(vk_validation.log_path()))
    return n


def growth(action, warmup: int, n: int) -> tuple[float, int]:
    """RSS (MB) and open files gained over n calls of action after `warmup`
    calls (garbage collected before and after)."""
    for _ in range(warmup):
        action()
    gc.collect()
    rss, files = rss_mb(), open_files()
    for _ in range(n):
        action()
    gc.collect()
    return rss_mb() - rss, open_files() - files


def weights_data(rows=64, k=256, seed=1):
    return ggml_quant.random_weights(rows, k, "Q4_0", seed=seed)


def test_backends_are_freed():
    """A Backend that ran a mat-vec and a graph is freed with its device when dropped."""
    data, x = weights_data(), np.ones(256, np.float32)

    def use_one():
        b = vkq.Backend()
        w = b.upload("Q4_0", (64, 256), data)
        b.matvec(w, x, "mmvq")
        b.matvec_many([(w, x)], "dmmv")
        g = b.graph()
        xt = g.input(b.tensor(256))
        g.output(g.matvec(w, xt))
        g.run()

    n = 200  # (RSS settles after ~35 Backends: allocator arenas, driver threads)
    mb, files = growth(use_one, 40, n)
    assert mb < 150, f"{n} Backends: RSS +{mb:.0f} MB"
    assert files <= 2, f"{n} Backends: {files} more open files"


def test_matvec_many_of_fresh_weights(backend):
    """matvec_many with weights that come and go: their graphs go with them."""
    data = weights_data(32, 64)
    w0 = backend.upload("Q4_0", (32, 64), data)
    x = np.ones(64, np.float32)
    backend.matvec(w0, x, "dmmv")  # keeps the pipeline: each call then records, never compiles

    def call():
        w = backend.upload("Q4_0", (32, 64), data)
        y0, y = backend.matvec_many([(w0, x), (w, x)], "dmmv")
        assert np.array_equal(y0, y)
        w.free()

    n = 2000
    mb, files = growth(call, 50, n)
    assert mb < 40, f"{n} matvec_many calls with fresh weights: RSS +{mb:.0f} MB"
    assert files <= 2
    assert not any(id(w0) in c.graph._weights for c in backend._many.values()), "graphs of freed weights are kept"


def test_matvec_many_graph_goes_with_any_of_its_weights(backend):
    data = weights_data(32, 64)
    w0, w1 = (backend.upload("Q4_0", (32, 64), data) for _ in range(2))
    x = np.ones(64, np.float32)
    backend.matvec_many([(w0, x), (w1, x)])
    backend.matvec_many([(w1, x), (w0, x)])
    graphs = [c.graph for c in backend._many.values() if id(w1) in c.graph._weights]
    assert len(graphs) == 2
    w1.free()
    assert all(g._destroyed for g in graphs)
    assert not any(id(w1) in c.graph._weights for c in backend._many.values())
    assert np.array_equal(backend.matvec_many([(w0, x)])[0], backend.matvec(w0, x))


def test_graphs_created_and_dropped(backend):
    w = backend.upload("Q4_0", (64, 256), weights_data())

    def one():
        g = backend.graph()
        x = g.input(backend.tensor(256))
        g.output(g.matvec(w, g.matvec(backend.upload("Q4_0", (256, 256), weights_data(256, 256)), x), "mmvq"))
        g.run()

    n = 1000
    mb, files = growth(one, 20, n)
    assert mb < 40, f"{n} graphs: RSS +{mb:.0f} MB"
    assert files <= 2


def test_replays(backend):
    w = backend.upload("Q4_0", (64, 256), weights_data())
    g = backend.graph()
    x = g.input(backend.tensor(256))
    y = g.output(g.matvec(w, x, "mmvq"))
    v = np.ones(256, np.float32)

    def replay():
        x.write(v)
        g.run()
        y.read()

    mb, files = growth(replay, 100, 10000)
    assert mb < 20, f"10000 replays: RSS +{mb:.0f} MB"
    assert files <= 2


def test_lavapipe_runs_its_dispatches(backend):
    """The known-answer mat-vec (Backend.executes) on a device that computes;
    the null GPUs' side is in tests/test_gpu_compilers.py."""
    assert backend.executes is True
    backend.require_execution("a test")  # does not raise
