"""Mixture-of-experts llama models (Mixtral's layout), on both engines.

- The device's router (vkq.llama.vector_ops.ExpertRouting: softmax, top-k,
  weights) against the host's `route` at the sizes of today's MoE models (8
  experts to 512, up to 64 used), ties and NaN logits included;
- a whole MoE FFN block recorded in a graph (router mat-vec, routing,
  MUL_MAT_ID of the stacked gate|up, SwiGLU over the slots, MUL_MAT_ID of
  down, the weighted sum as the next norm's residual) against float64 numpy,
  at Mixtral-, Qwen3-MoE- and gpt-oss-like expert counts (gpt-oss with
  MXFP4 experts);
- a tiny random MoE model on the graph engine (one submit per token) and the
  host engine, both paths, against the float64 reference; a prompt in
  chunks on the host engine against token by token;
- bad files get one line naming what is wrong.

SmolLM2 made into a MoE model and quantized by llama.cpp, against
llama.cpp's own greedy tokens: tests/test_llama_moe_smollm2.py.
"""
from __future__ import annotations

from dataclasses import replace

import gguf
import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import get_format
from vkq.blocks.synthetic import random_weights
from vkq.commands.cli import main
from vkq.llama.config import MAX_EXPERTS
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel, route, silu
from vkq.llama.vector_ops import ExpertRouting, RMSNorm, SwiGLU, Vectors, WeightedSlots

from conftest import assert_model_file_refused
from tiny_llama import write_gguf

TINY_MOE = (8, 2)
PROMPT = "the theory that the three then-"  # 19 tokens: chunks of MAX_COLS and a rest
LOGITS_NMSE = 1e-3


def spaced_logits(n: int, n_expert: int, seed: int) -> np.ndarray:
    """(n, n_expert) logits whose probabilities differ by >= 1.5% from each
    other (a permutation of evenly spaced values): no near-tie decides a test."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(np.linspace(-4, 4, n_expert)) for _ in range(n)]).astype(np.float32)


def run_routing(backend, logits: np.ndarray, n_used: int) -> tuple[np.ndarray, np.ndarray]:
    n, n_expert = logits.shape
    g = backend.graph()
    x = g.input(backend.tensor(n_expert, n))
    ids = g.output(backend.tensor(n * n_used, dtype=np.int32))
    weights = g.output(backend.tensor(n * n_used))
    g.add(ExpertRouting(backend.device, Vectors(x, n_expert), ids, weights, n_used, n))
    x.write(logits if n > 1 else logits[0])
    g.run()
    return ids.read().reshape(n, n_used), weights.read().reshape(n, n_used)


@pytest.mark.parametrize("n_expert, n_used", [(1, 1), (4, 2), (8, 2), (32, 4), (60, 4), (128, 8), (256, 16),
                                              (MAX_EXPERTS, 64)])
def test_routing_matches_host(backend, n_expert, n_used):
    logits = spaced_logits(3, n_expert, seed=n_expert)
    ids, weights = run_routing(backend, logits, n_used)
    want_ids, want_weights = route(logits, n_used)
    assert np.array_equal(ids, want_ids)
    np.testing.assert_allclose(weights, want_weights, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)


def test_routing_ties_pick_the_lower_index(backend):
    logits = np.zeros((2, 16), np.float32)
    logits[0, [3, 9, 12]] = 2.0  # three equal best, then thirteen equal
    logits[1, [15, 14]] = 1.0
    ids, weights = run_routing(backend, logits, 4)
    assert ids.tolist() == [[3, 9, 12, 0], [14, 15, 0, 1]] == route(logits, 4)[0].tolist()
    np.testing.assert_allclose(weights, route(logits, 4)[1], rtol=2e-6)


def ulp_steps(base: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """base (float32) moved up by `steps` ulps, elementwise."""
    out = base.astype(np.float32)
    for _ in range(int(steps.max(initial=0))):
        out = np.where(steps > 0, np.nextafter(out, np.float32(np.inf)), out)
        steps = steps - 1
    return out


def top_k_by_logits(logits: np.ndarray, n_used: int) -> list[list[int]]:
    """The rule both engines follow, written out: largest logit first, the
    lower index on equal logits (exact comparisons of the float32 values)."""
    return [sorted(range(len(row)), key=lambda e: (-float(row[e]), e))[:n_used] for row in logits]


@pytest.mark.parametrize("n_expert, n_used", [(64, 8), (256, 16)])
def test_routing_near_ties_choose_as_the_host(backend, n_expert, n_used):
    """Every logit of a row 0-3 ulps above the row's base: each engine's
    float32 exp rounds such a pair to equal or reordered probabilities, so
    ranking probabilities let the engines disagree (and pick the smaller
    logit). Both rank the logits, so both choose exactly the top-k by logit."""
    rng = np.random.default_rng(n_expert)
    base = np.repeat(rng.uniform(-3, 3, (24, 1)).astype(np.float32), n_expert, axis=1)
    logits = ulp_steps(base, rng.integers(0, 4, base.shape))
    ids, weights = run_routing(backend, logits, n_used)
    want_ids, want_weights = route(logits, n_used)
    assert ids.tolist() == want_ids.tolist() == top_k_by_logits(logits, n_used)
    np.testing.assert_allclose(weights, want_weights, rtol=2e-6)
    # The test has teeth: ranking the host's probabilities (the old rule) chooses otherwise here.
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    by_probs = np.argsort(-(e / e.sum(axis=-1, keepdims=True)), axis=-1, kind="stable")[:, :n_used]
    assert (np.sort(by_probs, axis=1) != np.sort(want_ids, axis=1)).any(axis=1).sum() >= 3


@pytest.mark.parametrize("reduction", ["subgroup", "shared"])
def test_routing_one_ulp_and_exact_ties(backend, monkeypatch, reduction):
    """Pairs one ulp apart with the larger logit at the higher index (also a
    workgroup's stride apart), exact ties across the k-th place, -0 and +0
    (equal), and a NaN logit (counted as -inf; its weights NaN). With subgroup
    reductions where the device has them, and with the shared-memory tree."""
    if reduction == "shared":
        monkeypatch.setattr(backend.device, "caps", replace(backend.device.caps, subgroup_arithmetic=False))
    elif not backend.device.caps.subgroup_arithmetic:
        pytest.skip("this device has no subgroup arithmetic")
    n_expert, n_used = 160, 4
    one = np.float32(1.5)
    up = np.nextafter(one, np.float32(np.inf))
    logits = np.full((5, n_expert), -2.0, np.float32)
    logits[0, [7, 8, 100, 139]] = [one, up, one, up]  # up first, then the lower index of each tie
    logits[1, [5, 133]] = up
    logits[1, [2, 64, 65, 150]] = one  # the 4th place tied four ways: index 2, then 64
    logits[2, :] = np.float32(-1.0)
    logits[2, [40, 9]] = [np.float32(0.0), np.float32(-0.0)]  # equal: 9 first
    logits[3, :] = -np.inf
    logits[3, [1, 70]] = [np.nan, np.float32(-5.0)]  # 70, then the NaN at 1 ties the -inf at 0, 2, ...
    logits[4, :n_used] = np.float32(0.25)
    logits[4, 0] = np.nextafter(np.float32(0.25), np.float32(-np.inf))  # one ulp below: last of four
    ids, weights = run_routing(backend, logits, n_used)
    want_ids, want_weights = route(logits, n_used)
    assert ids.tolist() == want_ids.tolist() == top_k_by_logits(np.where(np.isnan(logits), -np.inf, logits), n_used)
    assert ids[:3].tolist() == [[8, 139, 7, 100], [5, 133, 2, 64], [9, 40, 0, 1]]
    assert ids[3].tolist() == [70, 0, 1, 2] and ids[4].tolist() == [1, 2, 3, 0]
    np.testing.assert_allclose(weights[[0, 1, 2, 4]], want_weights[[0, 1, 2, 4]], rtol=2e-6)
    assert np.isnan(weights[3]).all() and np.isnan(want_weights[3]).all()


def test_routing_nan_logits_give_nan_weights_and_ids_in_range(backend):
    logits = spaced_logits(2, 32, seed=5)
    logits[0, 7] = np.nan
    logits[1, :] = np.nan
    ids, weights = run_routing(backend, logits, 4)
    assert ((ids >= 0) & (ids < 32)).all() and len(set(ids[1])) == 4
    assert np.isnan(weights).all()


def test_routing_refuses_bad_sizes(backend):
    dev = backend.device
    t = backend.tensor(8, 2)
    ids, w = backend.tensor(2, dtype=np.int32), backend.tensor(2)
    with pytest.raises(ValueError, match="3 used experts; 1 to 2 of 2"):
        ExpertRouting(dev, Vectors(backend.tensor(2), 2), backend.tensor(3, dtype=np.int32), backend.tensor(3), 3)
    with pytest.raises(ValueError, match=f"{MAX_EXPERTS + 1} experts; 1 to {MAX_EXPERTS}"):
        ExpertRouting(dev, Vectors(backend.tensor(MAX_EXPERTS + 1), MAX_EXPERTS + 1), ids, w, 2)
    with pytest.raises(ValueError, match="ids: one int32 vector of 4"):
        ExpertRouting(dev, Vectors(t, 8), ids, backend.tensor(4), 2, n=2)
    with pytest.raises(ValueError, match="weights: one float32 vector of 2"):
        ExpertRouting(dev, Vectors(t, 8), ids, backend.tensor(2, dtype=np.int32), 2)


# -- a whole MoE FFN block in a graph ------------------------------------------

# (name, n_expert, n_used, n_embd, n_ff, expert block type): expert counts of
# Mixtral, Qwen3-MoE, gpt-oss (MXFP4 experts) and the largest vkq takes.
BLOCKS = [("mixtral", 8, 2, 256, 256, "Q4_K"), ("qwen3-moe", 128, 8, 256, 256, "Q4_0"),
          ("gpt-oss", 32, 4, 256, 128, "MXFP4"), ("wide", 256, 16, 128, 64, "Q8_0")]


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("name, n_expert, n_used, n_embd, n_ff, qtype", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_moe_block_matches_numpy(backend, name, n_expert, n_used, n_embd, n_ff, qtype, path):
    """router -> routing -> MUL_MAT_ID(gate|up) -> SwiGLU -> MUL_MAT_ID(down) ->
    weighted sum into the residual and its norm, one replay; checked step by
    step against float64 numpy."""
    rng = np.random.default_rng(n_expert)
    fmt = get_format(qtype)
    router64 = rng.standard_normal((n_expert, n_embd)) * 2 / np.sqrt(n_embd)
    gate_up_raw = random_weights(fmt, 2 * n_ff, n_embd, rng, n_expert)
    down_raw = random_weights(fmt, n_embd, n_ff, rng, n_expert)
    router = backend.upload("F32", router64.shape, router64.astype(np.float32))
    gate_up = backend.upload(qtype, (n_expert, 2 * n_ff, n_embd), gate_up_raw)
    down = backend.upload(qtype, (n_expert, n_embd, n_ff), down_raw)

    dev, g = backend.device, backend.graph()
    x = g.input(backend.tensor(n_embd))
    logits = g.output(g.matvec(router, x, "dmmv"))
    ids, weights = g.output(backend.tensor(n_used, dtype=np.int32)), g.output(backend.tensor(n_used))
    g.add(ExpertRouting(dev, Vectors(logits, n_expert), ids, weights, n_used))
    gu = g.output(g.matvec_id(gate_up, x, ids, path))
    s = g.output(backend.tensor(n_ff, n_used))
    g.add(SwiGLU(dev, Vectors(gu, n_ff), Vectors(gu, n_ff, n_ff), Vectors(s, n_ff), n=n_used))
    d = g.output(g.matvec_id(down, s, ids, path))
    # The weighted sum of the experts is the residual of the norm after them: x2 += sum_j w_j d_j.
    x2 = g.output(g.input(backend.tensor(n_embd)))
    norm_w, normed = backend.tensor(n_embd), g.output(backend.tensor(n_embd))
    norm_w.write(np.ones(n_embd, np.float32))
    g.add(RMSNorm(dev, Vectors(x2, n_embd), norm_w, Vectors(normed, n_embd), 1e-5, residual=Vectors(d, n_embd),
                  slots=WeightedSlots(weights, n_used)))
    xv = rng.uniform(-1, 1, n_embd).astype(np.float32)
    x.write(xv)
    x2_before = rng.uniform(-1, 1, n_embd).astype(np.float32)
    x2.write(x2_before)
    g.run()

    assert ref.nmse(logits.read(), router64 @ xv) < 1e-10
    got_ids, got_w = ids.read(), weights.read()
    want_ids, want_w = route(logits.read()[None], n_used)
    assert np.array_equal(got_ids, want_ids[0]) and len(set(got_ids.tolist())) == n_used
    np.testing.assert_allclose(got_w, want_w[0], rtol=2e-6, atol=1e-7)
    # The experts, in float64 on the device's choice of experts and weights.
    w_gu = ref.dequantize(qtype, (n_expert, 2 * n_ff, n_embd), gate_up_raw)[got_ids]
    w_down = ref.dequantize(qtype, (n_expert, n_embd, n_ff), down_raw)[got_ids]
    gu64 = w_gu @ xv.astype(np.float64)
    bound = 1e-10 if path == "dmmv" else 5e-4
    assert ref.nmse(gu.read(), gu64) < bound
    s64 = silu(gu64[:, :n_ff]) * gu64[:, n_ff:]
    assert ref.nmse(s.read(), s64) < bound
    d64 = np.einsum("jrk,jk->jr", w_down, s.read().astype(np.float64))  # from the device's s: down alone
    assert ref.nmse(d.read(), d64) < bound
    terms = got_w[:, None] * d.read()  # float32 products, added in slot order: llama.cpp's arithmetic
    acc = terms[0]
    for t in terms[1:]:
        acc = acc + t
    assert np.array_equal(x2.read(), x2_before + acc)
    want = x2_before + (got_w[:, None] * (w_down @ s64[..., None])[..., 0]).sum(axis=0)
    assert ref.nmse(x2.read(), want) < (1e-9 if path == "dmmv" else 1e-3)
    x64 = x2.read().astype(np.float64)
    assert ref.nmse(normed.read(), x64 / np.sqrt(np.mean(x64 * x64) + 1e-5)) < 1e-10


# -- a tiny random MoE model ----------------------------------------------------

@pytest.fixture(scope="module")
def moe_file(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("moe") / "tiny-moe.gguf", experts=TINY_MOE)


@pytest.fixture(scope="module")
def moe_ref(moe_file):
    return LlamaModel(moe_file, path_mode="numpy")


@pytest.fixture(scope="module")
def moe_run(moe_ref):
    ids = moe_ref.tokenizer.encode(PROMPT)
    return ids, moe_ref.greedy(ids, 8, stop_at_eos=False, keep_logits=True)


def test_the_file_reads_as_moe(moe_ref):
    cfg, layer = moe_ref.config, moe_ref.file.layers[0]
    assert (cfg.n_expert, cfg.n_expert_used, cfg.is_moe) == (8, 2, True)
    assert layer.router == ("blk.0.ffn_gate_inp.weight",)
    assert layer.gate_up == (("blk.0.ffn_gate_exps.weight",), ("blk.0.ffn_up_exps.weight",))  # Q8_0 and Q4_0
    assert layer.down == ("blk.0.ffn_down_exps.weight",)


def test_routing_varies_with_the_token(moe_ref, moe_run):
    """Not one expert pair for everything: the tests would not see a wrong choice."""
    chosen = []
    moe_ref.matvecs.on_matvec = lambda names, x, y: chosen.append(tuple(route(y, 2)[0][0])) \
        if names == ("blk.0.ffn_gate_inp.weight",) else None
    moe_ref.logits(moe_run[0])
    moe_ref.matvecs.on_matvec = None
    assert len(set(chosen)) >= 3


@pytest.mark.parametrize("engine", ["graph", "host"])
@pytest.mark.parametrize("path", ["dmmv", "mmvq", "auto"])
def test_tiny_moe_matches_reference(backend, moe_file, moe_run, engine, path):
    ids, want = moe_run
    model = (GpuLlama(moe_file, backend, path, ctx=40) if engine == "graph"
             else LlamaModel(moe_file, backend, path))
    got = model.greedy(ids, 8, stop_at_eos=False, keep_logits=True)
    errors = [ref.nmse(a, b) for a, b in zip(got.logits, want.logits)]
    assert got.tokens == want.tokens
    assert max(errors) < (1e-10 if path == "dmmv" else LOGITS_NMSE), errors
    if engine == "graph":
        assert got.stats.decode_submits == got.stats.decode_steps == 7


def test_stacked_gate_up_is_one_mul_mat_id(backend, tmp_path, moe_ref):
    path = write_gguf(tmp_path / "fused.gguf", experts=TINY_MOE, expert_types={"ffn_up_exps": "Q8_0"})
    want = LlamaModel(path, path_mode="numpy")
    model = GpuLlama(path, backend, "dmmv", ctx=40)
    assert model.file.layers[1].gate_up == (("blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight"),)
    assert model.weights[model.file.layers[1].gate_up[0]].shape == (8, 256, 64)
    ids = want.tokenizer.encode(PROMPT)
    assert ref.nmse(model.logits(ids), want.logits(ids)) < 1e-10
    unfused = GpuLlama(path, backend, "dmmv", ctx=40, fuse=False)
    assert len(unfused.file.layers[1].gate_up) == 2
    # per layer one more for Q/K (fused Q8_0) and one for gate/up
    assert unfused.graph.counts["matvec"] == model.graph.counts["matvec"] + 2 * 2


def test_host_chunks_equal_token_by_token(backend, moe_file, moe_run):
    """A prompt of 19 tokens in chunks of 8: each chunk's MUL_MAT_IDs take 8 x 2
    slots; the logits of one token per forward (up to numpy's float32
    attention over a chunk, which sums in another order)."""
    ids, _ = moe_run
    model = LlamaModel(moe_file, backend, "dmmv")
    chunked = model.logits(ids)
    model.reset()
    for t in ids:
        single = model.step(t)
    assert ref.nmse(chunked, single) < 1e-10


def test_cli_generates_moe(moe_file, capsys):
    assert main(["generate", str(moe_file), "-p", "the three", "-n", "4", "--ignore-eos"]) == 0
    err = capsys.readouterr().err
    assert "8 experts (2 used)" in err and "1 submit/token" in err


# -- bad files ------------------------------------------------------------------

U32, I32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32
BAD_FILES = {
    "used 0": (dict(metadata={"llama.expert_used_count": 0}), r"llama\.expert_used_count is 0; expected 1 to 8 for 8 experts"),
    "used > count": (dict(metadata={"llama.expert_used_count": 9}), r"expert_used_count is 9; expected 1 to 8 for 8"),
    "used negative": (dict(metadata={"llama.expert_used_count": (-1, I32)}),
                      r"llama\.expert_used_count is -1; expected a non-negative integer"),
    "count too large": (dict(metadata={"llama.expert_count": MAX_EXPERTS + 1}),
                        rf"expert_count is {MAX_EXPERTS + 1}; vkq generate takes at most {MAX_EXPERTS}"),
    "used without count": (dict(experts=None, metadata={"llama.expert_used_count": 2}),
                           r"expert_used_count is 2 but the file has no experts"),
    "stack missing": (dict(drop=("blk.1.ffn_up_exps.weight",)), r"tensor 'blk\.1\.ffn_up_exps\.weight' is missing"),
    "router missing": (dict(drop=("blk.0.ffn_gate_inp.weight",)),
                       r"tensor 'blk\.0\.ffn_gate_inp\.weight' is missing"),
    "stack of 4 experts": (dict(reshape={"blk.0.ffn_down_exps.weight": (4, 64, 128)}),
                           r"'blk\.0\.ffn_down_exps\.weight' has shape \(4, 64, 128\), expected \(8, 64, 128\)"),
    "stack as a matrix": (dict(reshape={"blk.1.ffn_gate_exps.weight": (128, 64)}),
                          r"'blk\.1\.ffn_gate_exps\.weight' has shape \(128, 64\), expected \(8, 128, 64\)"),
    "router of the wrong width": (dict(reshape={"blk.0.ffn_gate_inp.weight": (8, 32)}),
                                  r"'blk\.0\.ffn_gate_inp\.weight' has shape \(8, 32\), expected \(8, 64\)"),
    "dense ffn in a moe file": (dict(extra={"blk.1.ffn_down.weight": (64, 128)}),
                                r"'blk\.1\.ffn_down\.weight' is a dense FFN matrix in a mixture-of-experts file"),
    "experts in a dense file": (dict(experts=None, extra={"blk.0.ffn_gate_inp.weight": (8, 64)}),
                                r"'blk\.0\.ffn_gate_inp\.weight' belongs to a mixture-of-experts layer, but "
                                r"llama\.expert_count is 0 or missing"),
}


@pytest.mark.parametrize("what", list(BAD_FILES))
def test_bad_moe_files_are_named(tmp_path, capsys, what):
    kwargs, match = BAD_FILES[what]
    assert_model_file_refused(write_gguf(tmp_path / "bad.gguf", **{"experts": TINY_MOE, **kwargs}), match, capsys)


def test_graph_engine_runs_with_a_fresh_backend(moe_file):
    """The MoE step needs nothing a default backend lacks (its own device)."""
    model = GpuLlama(moe_file, vkq.Backend(), "auto", ctx=16)
    assert model.greedy(model.tokenizer.encode("the"), 2, stop_at_eos=False).stats.submits_per_token == 1
