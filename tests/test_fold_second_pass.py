"""Second passes folded into their first dispatch (`fold`: GpuLlama's, `vkq
generate --no-fold` off): the split attention's combine and the argmax's
pick of its parts, run by the last workgroup of the first pass to finish
(a ticket from a counter in the op's scratch, set back to 0 by that
workgroup). On NVIDIA's launches, forced on this device (launches_of), so
that the splits and parts run here: the same bits as the two dispatches,
replay after replay (a counter left behind would skip or misplace the
combine), at positions before, at and after the splits' edges; one
dispatch and one barrier fewer per folded op.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from test_llama_ops import attention_case, inv_freq, qkv_parts, rng, step_inputs, upload, zeros
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.vector_ops import (Argmax, Attention, AttentionShape, Q8_1Output, Vectors, attention_fold_rounds,
                                  attention_heads, attention_launch, attention_scratch_size, attention_split,
                                  launches_of)
from vkq.ops import q8_1_words


def nvidia(backend, subgroups: bool = True, monkeypatch=None):
    """This device launching as NVIDIA's class does; subgroups False: with the
    shared-memory trees (reduce.glsl) in place of subgroup arithmetic."""
    if not subgroups:
        monkeypatch.setattr(backend.device, "caps", replace(backend.device.caps, subgroup_arithmetic=False))
    return launches_of(backend.device, "nvidia")


def ticket_counters(scores, shape: AttentionShape, split: int, n: int, heads: int, step: int) -> np.ndarray:
    """The fold's counters in an attention scratch (shaders/attention.comp: ticket), n queries'."""
    first = 4 * -(-shape.n_head * shape.capacity // 4)
    records = shape.n_head * -(-shape.capacity // split) * (4 + 4 * -(-shape.head_dim // 4))
    at = [qi * step + first + records + b for qi in range(n) for b in range(shape.n_head // heads)]
    return scores.read().reshape(-1)[at].view(np.uint32)


def attention_replays(backend, dev, shape: AttentionShape, positions: list[list[int]], planes: int | None = None,
                      split: int | None = None):
    """Attention with fold off and on, each in a graph of its own on the same
    inputs (caches full of random keys and values), replayed once per entry
    of `positions` (n queries' consecutive positions) with new q, k, v each
    time: per replay, each one's (out, xq) bits; the ops; the graphs.
    split: positions per workgroup (default attention_split's)."""
    n = len(positions[0])
    r = rng(len(positions) + shape.capacity)
    freqs = inv_freq(shape.n_rot)
    old_k, old_v = (r.standard_normal((shape.capacity, shape.n_head_kv, shape.head_dim)).astype(np.float32)
                    for _ in range(2))
    qd = shape.n_head * shape.head_dim
    runs = []
    for fold in (False, True):
        k_c, v_c, table, _ = attention_case(backend, shape, old_k, old_v, freqs)
        qkv = backend.tensor(qd + 2 * shape.n_head_kv * shape.head_dim + 7, n)
        pos = backend.tensor(n, dtype=np.int32)
        scores = zeros(backend, attention_scratch_size(dev, shape, split, n))
        out = backend.tensor(qd, n)
        xq = None if planes is None else Q8_1Output(zeros(backend, q8_1_words(n, out.stride, planes), np.uint32),
                                                    planes)
        op = Attention(dev, shape, *qkv_parts(qkv, shape), k_c, v_c, table, pos, scores, Vectors(out, qd), xq=xq,
                       split=split, n=n, fold=fold)
        g = backend.graph()
        g.input(qkv)
        g.input(pos)
        g.add(op)
        for t in (out, scores) + ((xq.xq,) if xq else ()):
            g.output(t)
        runs.append((op, g, qkv, pos, out, scores, xq))
    got = []
    for i, p in enumerate(positions):
        qkv_rows = step_inputs(rng(i), shape, n)[3]
        replay = []
        for op, g, qkv, pos, out, scores, xq in runs:
            qkv.write(qkv_rows)
            pos.write(np.asarray(p, np.int32))
            g.run()
            replay.append((out.read().tobytes(), xq.xq.read().tobytes() if xq else b""))
            if op.folded:  # every counter back at 0 for the next replay
                step = attention_scratch_size(dev, shape, op.split)
                assert not ticket_counters(scores, shape, op.split, n, attention_heads(shape), step).any(), p
        got.append(replay)
    return got, [run[0] for run in runs], [run[1] for run in runs]


def check_fold(got, ops, graphs, rounds: int) -> None:
    """The folded op is one dispatch of its split's depth and `rounds` combines',
    the other two; both the same bits every replay, and the replays not all alike."""
    (off, on), (g_off, g_on) = ops, graphs
    assert not off.folded and on.folded and off.split == on.split > 0
    split, combine = off.launches[-2:]
    (folded,) = on.launches[-1:]
    assert len(on.launches) == len(off.launches) - 1
    assert folded.groups == split.groups and folded.invocations == split.invocations
    assert folded.depth == split.depth + rounds * combine.depth
    d_off, b_off = g_off.dispatch_counts()
    d_on, b_on = g_on.dispatch_counts()
    assert (d_off - d_on, b_off - b_on) == (1, 1)
    for i, (a, b) in enumerate(got):
        assert a == b, f"replay {i}: fold on and off differ"
    assert len({a for a, _ in got}) > 1


# (n_head, n_head_kv, head_dim, capacity): the heads of a workgroup combined at once in one round (2x1),
# in 2 rounds of 2 segments, the second with one head (9x3), 4 at once of combine rows 1 (8x2x128)
FOLD_SHAPES = [
    pytest.param(2, 1, 64, 40, 1, id="2x1x64-one-round"),
    pytest.param(9, 3, 64, 16, 2, id="9x3x64-two-rounds"),
    pytest.param(8, 2, 128, 40, 1, id="8x2x128-four-at-once"),
]
POSITIONS = [7, 8, 9, 0, 16, 16, 39, 39, 8]  # (a 16-position context takes those below 16)


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, capacity, rounds", FOLD_SHAPES)
def test_attention_fold_gives_the_same_bits(backend, n_head, n_head_kv, head_dim, capacity, rounds):
    dev = nvidia(backend)
    shape = AttentionShape(n_head, n_head_kv, head_dim, head_dim, capacity)
    split = attention_split(dev, shape)
    assert attention_fold_rounds(attention_launch(dev, shape, split), split, attention_heads(shape)) == rounds
    positions = [[p] for p in POSITIONS if p < capacity]
    check_fold(*attention_replays(backend, dev, shape, positions), rounds)


@pytest.mark.parametrize("n_head, capacity, split", [(2, 200, 16), (1, 400, 16)])
def test_attention_fold_of_many_splits(backend, n_head, capacity, split):
    """13 and 25 splits, their partial results over several of this device's
    subgroups in the combine's reductions: a combine of 64 invocations in
    each half of the split's 128 (2 heads), and one of 128 (1 head)."""
    dev = nvidia(backend)
    shape = AttentionShape(n_head, 1, 64, 64, capacity)
    positions = [[p] for p in (capacity - 1, 128, 127, 17, 150, capacity - 1)]
    check_fold(*attention_replays(backend, dev, shape, positions, split=split), 1)


def test_attention_fold_with_shared_memory_trees(backend, monkeypatch):
    """The reductions without subgroup arithmetic (workgroups of 64 and a
    tree; the combine's of 64 too: the heads in 2 rounds)."""
    dev = nvidia(backend, subgroups=False, monkeypatch=monkeypatch)
    shape = AttentionShape(2, 1, 64, 64, 40)
    positions = [[p] for p in POSITIONS]
    check_fold(*attention_replays(backend, dev, shape, positions), 2)


def test_attention_fold_q8_1_output(backend):
    """The combine's Q8_1 blocks of out (every segment quantizes its own head)."""
    dev = nvidia(backend)
    shape = AttentionShape(2, 1, 64, 64, 40)
    got, ops, graphs = attention_replays(backend, dev, shape, [[p] for p in POSITIONS], planes=2)
    check_fold(got, ops, graphs, 1)
    assert all(any(xq) for _, xq in got[0])


def test_attention_fold_of_a_chunks_queries(backend):
    """A chunk's queries (PASS 2), each its own counter: 3 at a time across the splits' edges."""
    dev = nvidia(backend)
    shape = AttentionShape(2, 1, 64, 64, 40)
    check_fold(*attention_replays(backend, dev, shape, [[6, 7, 8], [14, 15, 16], [0, 1, 2], [37, 38, 39]]), 1)


def test_attention_unfolded_where_the_combine_is_wider(backend):
    """A launch whose combine takes a wider workgroup than its splits (the
    9x3x64 heads at 300 positions: splits of 64 invocations, combines of
    128) cannot take the COMBINE dispatch's order in the split's
    workgroup: two dispatches however `fold` is set."""
    dev = nvidia(backend)
    shape = AttentionShape(9, 3, 64, 64, 300)
    split = attention_split(dev, shape)
    launch = attention_launch(dev, shape, split)
    assert launch.combine_wg > launch.wg and attention_fold_rounds(launch, split, 3) == 0
    qd, kvd = 9 * 64, 3 * 64
    op = Attention(dev, shape, *qkv_parts(backend.tensor(qd + 2 * kvd), shape),
                   *(backend.tensor(shape.cache_size) for _ in range(2)), backend.tensor(300 * 64),
                   zeros(backend, 1, np.int32), backend.tensor(attention_scratch_size(dev, shape, split)),
                   Vectors(backend.tensor(qd), qd), fold=True)
    assert not op.folded and len(op.launches) == 2


@pytest.mark.parametrize("parts", [7, 49])
def test_argmax_fold_gives_the_same_index(backend, parts):
    """The pick of the parts in the last part's workgroup: numpy's index with
    fold on and off, replay after replay (new values each: ties across the
    parts' edges, NaN, the last value), one dispatch and one barrier fewer."""
    n, length = 3, 5003
    dev = nvidia(backend)
    runs = []
    for fold in (False, True):
        x, out = backend.tensor(length, n), zeros(backend, n, np.int32)
        op = Argmax(dev, Vectors(x, length), out, n, parts=parts, fold=fold)
        g = backend.graph()
        g.input(x)
        g.add(op)
        g.output(out)
        runs.append((op, g, x, out))
    (off, g_off, _, _), (on, g_on, _, _) = runs
    assert not off.folded and on.folded and len(on.launches) == 1 and len(off.launches) == 2
    assert on.launches[0].depth == off.launches[0].depth + off.launches[1].depth
    assert np.subtract(g_off.dispatch_counts(), g_on.dispatch_counts()).tolist() == [1, 1]
    span = -(-length // parts)
    for i in range(5):
        values = rng(20 + i).standard_normal((n, length)).astype(np.float32)
        values[0, [span - 1, span]] = 40.0 + i  # a tie across a part's edge: the first
        values[1, length - 1] = 50.0
        if i == 3:
            values[2, [4 * span // 3, 100]] = np.nan
        want = np.argmax(values, axis=1).tolist()
        for _, g, x, out in runs:
            x.write(values)
            g.run()
            assert out.read().tolist() == want, (i, parts)


def test_decode_with_fold_gives_the_same_logits(backend, tiny):
    """The tiny model on NVIDIA's launches (its attention split by 8 positions
    in a context of 40, its argmax in parts) with fold on and off: every
    attention's combine and the argmax's pick folded, and the same tokens
    and logits, bit for bit, a prompt in one chunk and 20 tokens after it."""
    import vkq.llama.vector_ops as ops

    on = GpuLlama(tiny, backend, "auto", ctx=40, launches="nvidia", prompt_kernels="matvec")
    off = GpuLlama(None, backend, "auto", ctx=40, file=on.file, weights=_matvecs_of(on), launches="nvidia",
                   prompt_kernels="matvec", fold=False)
    folded = [op for op in on.step_graph._keep if isinstance(op, (ops.Attention, ops.Argmax))]
    plain = [op for op in off.step_graph._keep if isinstance(op, (ops.Attention, ops.Argmax))]
    assert len(folded) == on.config.n_layer + 1 and all(op.folded for op in folded)
    assert not any(op.folded for op in plain)
    assert sum(len(op.launches) for op in plain) - sum(len(op.launches) for op in folded) == len(folded)
    ids = on.tokenizer.encode("the theory that the three then")
    a, b = (m.greedy(ids, 20, stop_at_eos=False, keep_logits=True) for m in (on, off))
    assert len(ids) + 20 > 16  # past two splits' edges
    assert a.tokens == b.tokens
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))


def test_step_shape_of_the_folded_ops_matches_a_hand_count(backend, tiny):
    """The tiny model's step shape with NVIDIA's launches at 100 positions
    (tests/test_profile.py counts the unfolded ops by hand: the attention's
    13 splits at depth 5 and its combine, a workgroup of 32 per head, at 4;
    the argmax's 2 parts at 3 and its pick at 1), folded: the attention one
    dispatch of the splits' workgroups, its last workgroup of a head group
    combining the group's 2 heads in 2 rounds (the combine's 32 invocations
    fill its 32): 5 + 2 * 4 = 13; the argmax one dispatch of 3 + 1."""
    model = GpuLlama(tiny, backend, "auto", ctx=100, launches="nvidia", prompt_kernels="matvec")
    rows = {}
    for r in model.step_launches():
        rows.setdefault(r.label, []).append((r.launch.groups, r.launch.invocations, r.launch.depth, r.count))
    n_layer = model.config.n_layer
    assert rows["Attention"] == [((2, 13, 1), 32, 13, n_layer)]
    assert rows["Argmax"] == [((2, 1, 1), 64, 4, 1)]


def _matvecs_of(decoder):
    """A VkqMatvecs-like holder of a decoder's uploads, to share them."""
    from vkq.llama.matvecs import VkqMatvecs

    holder = VkqMatvecs.__new__(VkqMatvecs)
    holder.backend, holder.weights = decoder.backend, decoder.weights
    return holder
