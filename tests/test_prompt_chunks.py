"""Prompts in chunks on the graph engine: the same logits as token by token, bit for bit.

A prompt goes through the step recorded for n tokens (up to MAX_COLS), one
submit per chunk; its logits, and every token decoded after it, must be
those of the prompt fed one token per step. Checked at chunk boundaries and
odd lengths, on the dense and the mixture-of-experts tiny models, both
paths; with a context long enough that lavapipe splits the attention over
workgroups; and on SmolLM2.
"""
from __future__ import annotations

import numpy as np
import pytest

from vkq.llama.gpu_step import GpuLlama
from vkq.llama.vector_ops import GPU_ATTENTION_SPLIT, AttentionShape, attention_split
from vkq.resolve import MAX_COLS

from conftest import smollm2_or_skip
from tiny_llama import write_gguf

TEXT = "the theory that the three then- the other thing that the world"


@pytest.fixture(scope="module", params=[None, (8, 2)], ids=["dense", "moe"])
def model_file(request, tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("chunks") / "tiny.gguf", experts=request.param)


def pair(backend, path, model_file, ctx=48, chunk=MAX_COLS):
    """The chunked decoder and a token-by-token one on the same uploaded weights."""
    chunked = GpuLlama(model_file, backend, path, ctx=ctx, prompt_chunk=chunk)
    single = GpuLlama(None, backend, path, ctx=ctx, prompt_chunk=1, file=chunked.file,
                      weights=_matvecs_of(chunked))
    return chunked, single


def _matvecs_of(decoder):
    """A VkqMatvecs-like holder of a decoder's uploads, to share them."""
    from vkq.llama.matvecs import VkqMatvecs

    holder = VkqMatvecs.__new__(VkqMatvecs)
    holder.backend, holder.weights = decoder.backend, decoder.weights
    return holder


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("n_prompt", [1, 3, MAX_COLS, MAX_COLS + 1, 2 * MAX_COLS + 3])
def test_chunked_prompt_logits_equal_token_by_token(backend, model_file, path, n_prompt):
    chunked, single = pair(backend, path, model_file)
    ids = chunked.tokenizer.encode(TEXT)[:n_prompt]
    assert len(ids) == n_prompt
    a, b = chunked.logits(ids), single.logits(ids)
    assert a.tobytes() == b.tobytes()
    assert chunked.submits == -(-n_prompt // MAX_COLS) and single.submits == n_prompt


@pytest.mark.parametrize("chunk", [2, 3, 5])
def test_any_chunk_size_and_the_tokens_after(backend, model_file, chunk):
    chunked, single = pair(backend, "auto", model_file, chunk=chunk)
    ids = chunked.tokenizer.encode(TEXT)[:13]
    a = chunked.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    b = single.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    assert a.tokens == b.tokens
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))
    assert a.stats.n_prompt == 13 and a.stats.decode_submits == a.stats.decode_steps == 5


def test_long_context_with_split_attention(backend, tmp_path):
    """A context of 9000 positions: on lavapipe the attention splits each head's
    positions over workgroups (its loop budget), and a chunk's queries still
    give the token-by-token bits."""
    path = write_gguf(tmp_path / "long.gguf", metadata={"llama.context_length": 16384})
    chunked, single = pair(backend, "auto", path, ctx=9000)
    split = attention_split(backend.device, chunked.shape)
    print(f"attention split: {split} positions per workgroup")
    if backend.device.caps.max_loop_iterations is not None:  # lavapipe
        assert 0 < split < 9000
    ids = chunked.tokenizer.encode(TEXT)[:11]
    assert chunked.logits(ids).tobytes() == single.logits(ids).tobytes()


def test_gpu_attention_split_gives_the_chunks_the_token_by_token_bits(backend, model_file, monkeypatch):
    """A GPU splits a head's positions over workgroups of GPU_ATTENTION_SPLIT
    (forced here, as lavapipe splits only past its loop budget): a chunk's
    queries still give the token-by-token bits, and the same tokens as one
    workgroup per head."""
    import vkq.llama.gpu_step as gpu_step

    whole, _ = pair(backend, "auto", model_file)
    ids = whole.tokenizer.encode(TEXT)[:13]
    c = whole.greedy(ids, 30, stop_at_eos=False, keep_logits=True)
    monkeypatch.setattr(gpu_step, "attention_split", lambda device, shape, spread: GPU_ATTENTION_SPLIT)
    chunked, single = pair(backend, "auto", model_file)
    a = chunked.greedy(ids, 30, stop_at_eos=False, keep_logits=True)  # past 32 positions: two splits
    b = single.greedy(ids, 30, stop_at_eos=False, keep_logits=True)
    assert a.tokens == b.tokens and all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))
    assert {op.split for op in chunked.step_graph._keep if hasattr(op, "split")} == {GPU_ATTENTION_SPLIT}
    assert a.tokens == c.tokens
    for x, y in zip(a.logits, c.logits):
        assert np.mean((x - y) ** 2) / np.mean(y.astype(np.float64) ** 2) < 1e-7  # rounding, through Q8_1 inputs


def test_without_spread_every_op_is_one_workgroup(backend, model_file, monkeypatch):
    """spread=False (`vkq generate --no-spread`): with a GPU's launches
    forced, the norms, argmax and attention stay one workgroup per vector and
    per head, and give the bits of a step that never spread."""
    import vkq.llama.gpu_step as gpu_step
    import vkq.llama.vector_ops as ops

    one = GpuLlama(model_file, backend, "auto", ctx=40)
    ids = one.tokenizer.encode(TEXT)[:13]
    want = one.greedy(ids, 5, stop_at_eos=False, keep_logits=True)
    monkeypatch.setattr(ops, "spreads", lambda device: True)
    monkeypatch.setattr(ops, "argmax_parts", lambda device, length: 7)
    monkeypatch.setattr(gpu_step, "attention_split", lambda device, shape, spread: GPU_ATTENTION_SPLIT * spread)
    kept = GpuLlama(None, backend, "auto", ctx=40, file=one.file, weights=_matvecs_of(one), spread=False)
    ops_of = kept.step_graph._keep
    assert {getattr(op, "workgroups", 1) for op in ops_of} == {getattr(op, "parts", 1) for op in ops_of} == {1}
    norms = [op.launches[0] for op in ops_of if isinstance(op, ops.RMSNorm)]
    assert {n.invocations for n in norms} == {ops.reducing_variant(backend.device, "rms_norm")[1]}
    assert {op.split for op in ops_of if hasattr(op, "split")} == {0}
    got = kept.greedy(ids, 5, stop_at_eos=False, keep_logits=True)
    assert got.tokens == want.tokens and all(x.tobytes() == y.tobytes() for x, y in zip(got.logits, want.logits))


@pytest.mark.parametrize("device_type, budget, capacity, expected", [
    ("discrete", None, 4096, GPU_ATTENTION_SPLIT),
    ("integrated", None, 4096, GPU_ATTENTION_SPLIT),
    ("discrete", None, GPU_ATTENTION_SPLIT, 0),  # one split would be all of it
    ("cpu", None, 4096, 0),  # a CPU driver without a loop budget: a head per workgroup
])
def test_attention_split_per_device(device_type, budget, capacity, expected):
    from types import SimpleNamespace

    device = SimpleNamespace(caps=SimpleNamespace(device_type=device_type, max_loop_iterations=budget))
    shape = AttentionShape(9, 3, 64, 64, capacity)
    assert attention_split(device, shape) == expected
    assert attention_split(device, shape, spread=False) == 0


def test_prompt_chunk_is_checked(backend, model_file):
    for bad in (0, MAX_COLS + 1, 2.0):
        with pytest.raises(ValueError, match="prompt_chunk"):
            GpuLlama(model_file, backend, "auto", ctx=8, prompt_chunk=bad)


def test_smollm2_chunked_prompt(backend):
    smol = smollm2_or_skip()
    chunked = GpuLlama(smol, backend, "auto", ctx=40)
    single = GpuLlama(None, backend, "auto", ctx=40, prompt_chunk=1, file=chunked.file, weights=_matvecs_of(chunked))
    ids = chunked.tokenizer.encode("The history of the printing press begins in the fifteenth century, when a "
                                   "goldsmith in Mainz set out to print books with movable metal type")
    assert len(ids) > 2 * MAX_COLS
    a, b = chunked.logits(ids), single.logits(ids)
    assert a.tobytes() == b.tobytes() and np.isfinite(a).all()


def test_gpu_launches_of_the_vector_ops_give_the_same_bits(backend, model_file, monkeypatch):
    """A GPU's launches of the vector ops (NVIDIA's, forced: GpuLlama's
    `launches`): each norm's vector over one wide workgroup (rms_norm_launch),
    the argmax over parts (argmax_parts), the attention's positions split.
    A prompt in chunks gives the logits of one fed token by token, bit for
    bit; the tokens are the device's own launches', the logits within
    rounding (the norms' sums run in another order)."""
    import vkq.llama.vector_ops as ops

    one = GpuLlama(model_file, backend, "auto", ctx=40)
    monkeypatch.setattr(ops, "argmax_parts", lambda device, length: 7)
    chunked = GpuLlama(None, backend, "auto", ctx=40, file=one.file, weights=_matvecs_of(one), launches="nvidia")
    single = GpuLlama(None, backend, "auto", ctx=40, file=one.file, weights=_matvecs_of(one), launches="nvidia",
                      prompt_chunk=1)
    norms = [op for op in chunked.step_graph._keep if isinstance(op, ops.RMSNorm)]
    assert norms and {op.launches[0].invocations for op in norms} == {ops.RMS_NORM_GPU_WG}
    assert any(getattr(op, "parts", 1) == 7 for op in chunked.step_graph._keep)
    assert {op.split for op in chunked.step_graph._keep if hasattr(op, "split")} == {GPU_ATTENTION_SPLIT}
    ids = one.tokenizer.encode(TEXT)[:13]
    a, b, c = (m.greedy(ids, 5, stop_at_eos=False, keep_logits=True) for m in (chunked, single, one))
    assert a.tokens == b.tokens == c.tokens
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))
    for x, y in zip(a.logits, c.logits):
        assert np.mean((x - y) ** 2) / np.mean(y.astype(np.float64) ** 2) < 1e-7  # rounding, through Q8_1 inputs
