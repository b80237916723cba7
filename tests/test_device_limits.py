"""Device tensors (vkq.Tensor: KV caches, scratch, vectors) against the
device's limits, and the memory ledger (vkq.device.memory) given back when
weights and tensors are collected.

A tensor is one buffer that a shader binds whole: above one buffer's limit
(maxStorageBufferRange, or maxMemoryAllocationSize) it is refused before the
driver sees it, and the llama decoder refuses a context whose KV caches or
attention tensors would pass it, naming the largest that fits (or, for the
model's own context length, uses that one with a warning). The limits are
made small here (lavapipe's real ones take 128 MiB buffers to reach)."""
from __future__ import annotations

import gc
import sys
import warnings
import weakref
from dataclasses import replace

import numpy as np
import pytest
from conftest import random_x
from tiny_llama import TINY, write_gguf

import ggml_quant
import vkq.device.runtime
from vkq.blocks.layout import MatrixLayout
from vkq.blocks.formats import get_format
from vkq.commands.cli import main
from vkq.device.memory import DeviceMemoryError, size_text
from vkq.llama.context_fit import context_buffers, step_vectors_bytes
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel
from vkq.llama.model import LlamaFile

KIB = 1 << 10
HEAD_DIM = TINY["n_embd"] // TINY["n_head"]
CACHE_BYTES_PER_POSITION = TINY["n_head_kv"] * HEAD_DIM * 4  # one layer's K (or V) cache, float32


def limit_device(monkeypatch, dev, **fields):
    """The device with some DeviceInfo fields replaced (tiny limits)."""
    info = replace(dev.info, **fields)
    monkeypatch.setattr(dev, "info", info)
    monkeypatch.setattr(dev.memory, "info", info)
    return dev


def settled_in_use(dev) -> int:
    gc.collect()
    return dev.memory.in_use


# -- one tensor ------------------------------------------------------------------
@pytest.mark.parametrize("field,name", [("max_storage_buffer_range", "maxStorageBufferRange"),
                                        ("max_memory_allocation_size", "maxMemoryAllocationSize")])
def test_a_tensor_beyond_one_buffer_is_refused(backend, monkeypatch, field, name):
    dev = limit_device(monkeypatch, backend.device, **{field: 64 * KIB})
    before = settled_in_use(dev)
    at_limit = backend.tensor(64 * KIB // 4, name="at the limit")  # exactly 64 KiB: fits
    assert dev.memory.in_use == before + 64 * KIB
    with pytest.raises(DeviceMemoryError) as e:
        backend.tensor(32, 512 + 1, name="K cache 3")  # 64 KiB + one vector
    msg = str(e.value)
    assert "'K cache 3'" in msg and name in msg and "64.0 KiB" in msg and "64.1 KiB" in msg, msg
    with pytest.raises(DeviceMemoryError, match=name):
        backend.tensor(64 * KIB // 4 + 1)  # (padded to a whole 32-value chunk: 64.1 KiB)
    del at_limit
    assert dev.memory.in_use == before  # refused tensors hold nothing; a dropped one gives its bytes back


def test_tensors_are_counted_until_collected(backend):
    dev = backend.device
    before = settled_in_use(dev)
    t = backend.tensor(100, 3, np.int32)
    g = backend.graph()
    y = g.input(backend.tensor(1000))
    assert dev.memory.in_use == before + t.nbytes + y.nbytes == before + 4 * 300 + 4 * 1024
    del t, g, y
    assert settled_in_use(dev) == before


def test_tensors_beyond_the_heap_are_refused_until_collected(backend, monkeypatch):
    dev = backend.device
    before = settled_in_use(dev)
    heap = before + 100 * KIB
    limit_device(monkeypatch, dev, device_type="discrete-gpu", device_local_memory=heap)
    a, b = backend.tensor(10 * KIB), backend.tensor(10 * KIB)  # 40 KiB each
    with pytest.raises(DeviceMemoryError) as e:
        backend.tensor(10 * KIB, name="third")
    msg = str(e.value)
    held = size_text(before + 80 * KIB)  # what the suite's earlier tests still hold counts too
    assert "'third'" in msg and f"device-local heap of {size_text(heap)}" in msg and f"hold {held}" in msg, msg
    del a
    c = backend.tensor(10 * KIB)
    assert dev.memory.in_use == before + 80 * KIB
    del b, c


# -- weights dropped without free() ------------------------------------------------
def q4_0(rows: int, k: int):
    return ggml_quant.random_weights(rows, k, "Q4_0"), MatrixLayout(get_format("Q4_0"), 1, rows, k).device_nbytes(rows)


@pytest.fixture
def no_cycle_collector():
    """Only reference counting frees objects meanwhile: what a test drops goes at once or not at all."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_dropped_weights_go_at_once(backend, no_cycle_collector):
    dev = backend.device
    data, nbytes = q4_0(64, 512)
    before = dev.memory.in_use
    w = backend.upload("Q4_0", (64, 512), data)
    backend.matvec(w, random_x(512))  # its cached calls' graphs (which refer back to it weakly)
    backend.matvec(w, random_x(512, 3), path="mmvq")
    assert dev.memory.in_use > before + nbytes  # the weights and their calls' x and y
    buffer = w.buffers[0].tensor
    alive = weakref.ref(w)
    del w
    assert alive() is None
    assert dev.memory.in_use == before
    # Nothing but this test holds the weights' kp tensor any more: dropping it destroys the buffer.
    assert sys.getrefcount(buffer) == 2


def test_dropped_weights_do_not_fill_the_ledger(backend, monkeypatch):
    """The issue's case, small: uploading and dropping matrices (no free(), no
    gc.collect() by the caller) is never refused while the process holds little."""
    dev = backend.device
    data, nbytes = q4_0(256, 1024)
    before = settled_in_use(dev)
    limit_device(monkeypatch, dev, device_type="discrete-gpu", device_local_memory=before + int(2.5 * nbytes))
    for _ in range(8):
        w = backend.upload("Q4_0", (256, 1024), data)
        backend.matvec(w, random_x(1024))
        del w
    assert settled_in_use(dev) == before


# -- the llama decoder's context -----------------------------------------------------
@pytest.fixture(scope="module")
def long_file(tmp_path_factory):
    """The tiny llama with a context length of 4096."""
    return write_gguf(tmp_path_factory.mktemp("gguf") / "long.gguf", metadata={"llama.context_length": 4096})


def test_tiny_cache_size_is_what_the_limits_assume(backend, long_file):
    model = GpuLlama(long_file, backend, "dmmv", ctx=96, prompt_chunk=1, prompt_kernels="matvec")
    assert model.k_cache[0].nbytes == 96 * CACHE_BYTES_PER_POSITION
    # (prompt_chunk 1: the attention scratch, per query, is smaller than a cache, which sets the limit)
    assert model.scores.nbytes < model.k_cache[0].nbytes


@pytest.mark.parametrize("field,name", [("max_storage_buffer_range", "maxStorageBufferRange"),
                                        ("max_memory_allocation_size", "maxMemoryAllocationSize")])
def test_a_kv_cache_beyond_one_buffer_is_refused(backend, monkeypatch, long_file, field, name):
    largest = 512  # positions whose cache is exactly the limit
    dev = limit_device(monkeypatch, backend.device, **{field: largest * CACHE_BYTES_PER_POSITION})
    before = settled_in_use(dev)
    with pytest.raises(DeviceMemoryError) as e:
        GpuLlama(long_file, backend, "dmmv", ctx=largest + 1, prompt_chunk=1, prompt_kernels="matvec")
    msg = str(e.value)
    assert "long.gguf" in msg and f"a context of {largest + 1} positions" in msg and name in msg, msg
    assert f"the largest that fits is {largest} positions" in msg and "K cache" in msg, msg
    assert settled_in_use(dev) == before  # refused before the upload
    model = GpuLlama(long_file, backend, "dmmv", ctx=largest, prompt_chunk=1, prompt_kernels="matvec")
    assert model.k_cache[0].nbytes == largest * CACHE_BYTES_PER_POSITION


def test_the_models_own_context_is_capped_to_what_fits(backend, monkeypatch, long_file):
    ids = [5, 80, 81, 7, 90]
    want = GpuLlama(long_file, backend, "dmmv", ctx=16).greedy(ids, 6, stop_at_eos=False).tokens
    limit_device(monkeypatch, backend.device, max_storage_buffer_range=300 * CACHE_BYTES_PER_POSITION)
    with pytest.warns(UserWarning, match="the model's context of 4096 positions does not fit .*using 300 positions"):
        model = GpuLlama(long_file, backend, "dmmv", prompt_chunk=1, prompt_kernels="matvec")
    assert model.ctx == 300
    assert model.greedy(ids, 6, stop_at_eos=False).tokens == want


def test_kv_caches_beyond_the_device_memory_are_refused(backend, monkeypatch, long_file):
    dev = backend.device
    small, chunk = 64, 1
    before = settled_in_use(dev)
    model = GpuLlama(long_file, backend, "dmmv", ctx=small, prompt_chunk=chunk, prompt_kernels="matvec")
    used = dev.memory.in_use - before  # weights, caches, the decode step's tensors
    del model
    # Room for that and the margin the check keeps for the step graphs' vectors, not for 4096 positions.
    heap = before + used + step_vectors_bytes(LlamaFile(long_file), chunk)
    limit_device(monkeypatch, dev, device_type="discrete-gpu", device_local_memory=heap)
    assert settled_in_use(dev) == before
    with pytest.raises(DeviceMemoryError) as e:
        GpuLlama(long_file, backend, "dmmv", ctx=4096, prompt_chunk=chunk, prompt_kernels="matvec")
    msg = str(e.value)
    assert "a context of 4096 positions" in msg and "device-local heap" in msg, msg
    largest = int(msg.split("the largest that fits is ")[1].split()[0])
    assert small <= largest < 4096, msg
    del e  # (its traceback holds the refused decoder)
    assert settled_in_use(dev) == before  # the refused decoder's weights, once collected
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capped = GpuLlama(long_file, backend, "dmmv", prompt_chunk=chunk, prompt_kernels="matvec")
    assert capped.ctx == largest and any("using" in str(w.message) for w in caught)
    assert dev.memory.in_use <= heap


def test_cli_refuses_a_context_beyond_one_buffer_in_one_line(monkeypatch, capsys, long_file):
    real = vkq.device.runtime.get_device_info
    monkeypatch.setattr(vkq.device.runtime, "get_device_info",
                        lambda index: replace(real(index), max_storage_buffer_range=64 * KIB))
    code = main(["generate", str(long_file), "-p", "the", "-n", "2", "-c", "3000"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("vkq generate: error:")]
    assert len(lines) == 1, err
    assert "a context of 3000 positions" in lines[0] and "maxStorageBufferRange" in lines[0], lines[0]
    assert "the largest that fits is" in lines[0], lines[0]


@pytest.mark.parametrize("engine", [GpuLlama, LlamaModel])
def test_decoders_loaded_and_dropped_give_everything_back(backend, long_file, engine, no_cycle_collector):
    dev = backend.device
    before = dev.memory.in_use
    for _ in range(2):
        model = engine(long_file, backend, "dmmv", ctx=32)
        model.greedy([5, 80, 81], 3)
        assert dev.memory.in_use > before
        alive = weakref.ref(model)
        del model
        assert alive() is None
        assert dev.memory.in_use == before


def test_the_devices_own_buffer_limit_refuses_before_the_upload(backend, tmp_path):
    """No patched limit: the tiny llama at 2^20 positions (the most the attention
    takes) needs an attention scratch of more than 128 MiB (lavapipe's
    maxStorageBufferRange), refused before anything is allocated."""
    path = write_gguf(tmp_path / "million.gguf", metadata={"llama.context_length": 1 << 20})
    limit = min(v for v in (backend.device_info.max_storage_buffer_range,
                            backend.device_info.max_memory_allocation_size) if v)
    # (8 queries' scores over every position, one per head, and on lavapipe the split's partial results)
    scratch = context_buffers(backend.device, LlamaFile(path).config, 1 << 20, True, 8).scratch
    assert scratch >= (1 << 20) * 8 * TINY["n_head"] * 4
    if scratch <= limit:
        pytest.skip(f"this device's buffers hold {size_text(limit)}")
    before = settled_in_use(backend.device)
    with pytest.raises(DeviceMemoryError) as e:
        GpuLlama(path, backend, "dmmv", ctx=1 << 20)
    msg = str(e.value)
    assert "attention scratch" in msg and size_text(limit) in msg, msg
    largest = int(msg.split("the largest that fits is ")[1].split()[0])
    assert 0 < largest < limit // (8 * TINY["n_head"] * 4), msg
    del e
    assert settled_in_use(backend.device) == before


def test_the_tiled_attentions_split_partials_are_counted(backend, monkeypatch, long_file):
    """Past a loop budget (lavapipe's, ~30,000 positions; 1,000 iterations
    here) a mat-mat prompt's tiled attention splits the keys and keeps the
    splits' partial results, one buffer per layer of each mat-mat prompt step
    kept: the context check counts them, from shapes (nothing allocated
    here), so a context whose partials would not fit is refused (or, the
    model's own, shrunk), where the mat-vec prompt's fits."""
    from vkq.llama.chunk_attention import attention_tiles, tiled_attention_split
    from vkq.llama.context_fit import PROMPT_STEPS_KEPT, fit_context
    from vkq.llama.vector_ops import AttentionShape

    dev = backend.device
    monkeypatch.setattr(dev, "caps", replace(dev.caps, max_loop_iterations=1000))
    file = LlamaFile(long_file)
    cfg, ctx, chunk = file.config, 2000, 64
    shape = AttentionShape(cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_rot, ctx)
    split = tiled_attention_split(dev, shape, attention_tiles(dev, shape))
    assert 0 < split < ctx
    with_partials = context_buffers(dev, cfg, ctx, True, 8, prompt_chunk=chunk)
    without = context_buffers(dev, cfg, ctx, True, 8)
    # per query of the chunk, head and split: the output vector, its maximum and its sum
    floats = chunk * TINY["n_head"] * -(-ctx // split) * (HEAD_DIM + 2)
    assert floats * 4 <= with_partials.partials < floats * 4 + 1024
    assert with_partials.n_partials == TINY["n_layer"] * PROMPT_STEPS_KEPT
    assert with_partials.total == without.total + TINY["n_layer"] * PROMPT_STEPS_KEPT * with_partials.partials
    assert context_buffers(dev, cfg, split, True, 8, prompt_chunk=chunk).partials == 0  # no split: none
    # Memory for everything but the partials: the mat-vec prompt's context fits, the mat-mat prompt's does not.
    heap = settled_in_use(dev) + step_vectors_bytes(file, 8, chunk) + without.total
    limit_device(monkeypatch, dev, device_type="discrete-gpu", device_local_memory=heap)
    assert fit_context(dev, file, ctx, True, 8, True) == ctx
    with pytest.raises(DeviceMemoryError, match=rf"a context of {ctx} positions does not fit: the KV caches and "
                                                r"the attention's tensors would take .* the largest that fits"):
        fit_context(dev, file, ctx, True, 8, True, prompt_chunk=chunk)
    with pytest.warns(UserWarning, match=f"the model's context of {ctx} positions does not fit"):
        assert fit_context(dev, file, ctx, True, 8, False, prompt_chunk=chunk) < ctx
