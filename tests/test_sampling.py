"""Sampling (vkq.llama.sampling, the device's sampler vkq.llama.sample_op):
the truncations equal a numpy reference written from llama.cpp's
definitions; the device draws the numpy sampler's tokens; the draws follow
the exact distribution of the logits they were given (a chi-square test,
fixed seed); a seed gives the same tokens on both engines, at every prompt
chunking and steps per submit; bad values are one line each."""
from __future__ import annotations

import math

import numpy as np
import pytest

from vkq.commands.cli import main
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel
from vkq.llama.sample_op import RING_SLOTS, Sample, ring_of, sample_parts
from vkq.llama.sampling import (TOP_K_MAX, Sampling, kept, penalized, probabilities, sample, uniform, verify_draft,
                                window)
from vkq.llama.vector_ops import Vectors, launches_of

TEXT = "the theory that the three then- the other thing that the world"


def llama_cpp_kept(logits, window_ids, s: Sampling) -> list[int]:
    """The tokens llama.cpp's chain keeps, written from its definitions in
    float64, the plain way: penalties on the distinct tokens of the window,
    a full sort (equal logits: the lower id first), top-k, top-p on the
    softmax of what top-k kept, min-p on the logits."""
    v = logits.astype(np.float64)
    if s.repeat_penalty != 1 and s.repeat_last_n > 0:
        for t in set(window_ids):
            v[t] = v[t] * s.repeat_penalty if v[t] <= 0 else v[t] / s.repeat_penalty
    order = sorted(range(v.size), key=lambda i: (-v[i], i))
    if s.temp == 0:
        return order[:1]
    if s.top_k > 0:
        order = order[:s.top_k]
    if s.top_p < 1:
        p = np.exp(v[order] - v[order[0]])
        p /= p.sum()
        cum = 0.0
        for i, pi in enumerate(p):
            cum += pi
            if cum >= s.top_p:
                order = order[:i + 1]
                break
    if s.min_p > 0:
        bound = v[order[0]] + math.log(s.min_p)
        order = [order[0]] + [i for i in order[1:] if v[i] >= bound]
    return order


SETTINGS = [Sampling(temp=0.8, seed=1), Sampling(temp=1.2, top_k=0, top_p=0.5, min_p=0.0, seed=2),
            Sampling(temp=1.0, top_k=200, top_p=1.0, min_p=0.1, seed=3),
            Sampling(temp=0.7, top_k=5, repeat_penalty=1.3, repeat_last_n=16, seed=4),
            Sampling(temp=1.0, top_k=1000, top_p=0.9, min_p=0.01, repeat_penalty=0.8, seed=5),
            Sampling(temp=0.0, repeat_penalty=2.0, seed=6)]


def test_truncation_equals_llama_cpp_definitions():
    rng = np.random.default_rng(0)
    for trial in range(60):
        s = SETTINGS[trial % len(SETTINGS)]
        logits = (rng.standard_normal(3000) * rng.uniform(0.5, 4)).astype(np.float32)
        if trial % 5 == 0:
            logits[rng.integers(0, 3000, 200)] = logits.max()  # ties at the top
        win = rng.integers(0, 3000, 64).tolist()
        got = kept(penalized(logits, window(win, 63, s), s), s).tolist()
        assert got == llama_cpp_kept(logits, win[-s.repeat_last_n:] if s.repeat_last_n else [], s), (trial, s)


def test_uniform_is_a_hash_of_seed_and_position():
    u = np.array([uniform(7, p) for p in range(20000)], np.float64)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert uniform(7, 5) == uniform(7, 5) != uniform(8, 5)
    assert float(uniform(7, 5)) * 2 ** 24 == int(float(uniform(7, 5)) * 2 ** 24)  # 24 bits, exact in float32


def run_sampler(backend, logits: np.ndarray, tokens, positions, s: Sampling, ring: np.ndarray, parts=None,
                device=None) -> np.ndarray:
    """The device's draws of n vectors (no ring writes; parts: the op's, device: whose launches)."""
    n, v = logits.shape

    def up(values, dtype):
        values = np.ascontiguousarray(values, dtype).reshape(-1)
        t = backend.tensor(values.size, dtype=dtype)
        t.write(values)
        return t
    out = backend.tensor(n, dtype=np.int32)
    op = Sample(device or backend.device, Vectors(up(logits, np.float32), v, 0, v), up(tokens, np.int32),
                up(positions, np.int32), up(s.params(), np.uint32), up(ring, np.int32), out, n, 0, write_ring=False,
                parts=parts)
    g = backend.graph()
    g.add(op)
    g.output(out)
    g.run()
    return out.read()


def device_window(tokens, ring, v: int, position: int, s: Sampling) -> list[int]:
    """What the device reads as vector v's window: its own token, then the ring's slots before it."""
    if not s.penalizes:
        return []
    return [int(tokens[v])] + [int(ring[(position - j) % RING_SLOTS]) for j in range(1, s.repeat_last_n)
                               if position - j >= 0]


@pytest.mark.parametrize("s", SETTINGS[:1] + SETTINGS[2:], ids=lambda s: s.describe())
@pytest.mark.parametrize("parts", [1, 7], ids=["one pass", "7 parts"])
def test_device_draws_the_numpy_samplers_tokens(backend, s, parts):
    """Random logits (ties among the top ones, every value equal, a window
    of repeated tokens): the device's token is numpy's, vector by vector,
    in one workgroup a vector or over parts of the vocabulary (a GPU's
    launch: NVIDIA's workgroup size, forced)."""
    rng = np.random.default_rng(1)
    n, v = 24, 3000
    logits = (rng.standard_normal((n, v)) * 3).astype(np.float32)
    logits[1] = 1.0  # every value equal
    logits[2, 100:1500] = logits[2].max()  # more equal values at the k-th than the candidates hold
    context = rng.integers(0, v, 400).tolist()
    positions = np.arange(300, 300 + n)
    tokens = np.array(context[300:300 + n], np.int32)
    ring = ring_of(context, 300)
    device = None if parts == 1 else launches_of(backend.device, "nvidia")
    got = run_sampler(backend, logits, tokens, positions, s, ring, parts, device)
    want = [sample(logits[i], device_window(tokens, ring, i, int(positions[i]), s), int(positions[i]), s)
            for i in range(n)]
    assert got.tolist() == want


def test_device_sampler_on_a_large_vocabulary(backend):
    """An 8B model's vocabulary (128,256): one vector, numpy's token."""
    rng = np.random.default_rng(2)
    logits = (rng.standard_normal((1, 128256)) * 2).astype(np.float32)
    s = Sampling(temp=1.0, top_k=TOP_K_MAX, top_p=0.99, min_p=0.0, seed=11)
    want = [sample(logits[0], [], 77, s)]
    assert run_sampler(backend, logits, [5], [77], s, ring_of([], 0)).tolist() == want
    nvidia = launches_of(backend.device, "nvidia")
    assert sample_parts(nvidia, 128256) == 63 and sample_parts(backend.device, 128256) == 1
    assert run_sampler(backend, logits, [5], [77], s, ring_of([], 0), device=nvidia).tolist() == want


def chi_square_bound(df: int, z: float = 4.753) -> float:
    """The chi-square quantile of df degrees of freedom at 1 - 1e-6 (z: the
    normal quantile), by the Wilson-Hilferty approximation."""
    a = 2.0 / (9 * df)
    return df * (1 - a + z * math.sqrt(a)) ** 3


def test_device_draws_follow_the_exact_distribution(backend):
    """8192 draws of the device's sampler from one set of logits (every
    position another uniform number) against the distribution the chain
    defines (`probabilities`: penalties, top-k, top-p, min-p, temperature):
    Pearson's chi-square over the kept tokens (those expected fewer than 5
    times pooled) stays below its 1 - 1e-6 quantile. A correct sampler
    fails this with probability 1e-6 for a random seed; the seed is fixed,
    so the test is deterministic, never flaky. The draws are numpy's too."""
    rng = np.random.default_rng(3)
    v, n = 64, 8192
    logits = (rng.standard_normal(v) * 1.5).astype(np.float32)
    s = Sampling(temp=0.9, top_k=24, top_p=0.97, min_p=0.01, repeat_penalty=1.3, repeat_last_n=8, seed=12345)
    ring = np.full(RING_SLOTS, 3, np.int32)  # every window: tokens 3 and 9
    tokens = np.full(n, 9, np.int32)
    positions = np.arange(n) + 10
    draws = run_sampler(backend, np.tile(logits, (n, 1)), tokens, positions, s, ring)
    assert draws[:64].tolist() == [sample(logits, [9, 3], int(p), s) for p in positions[:64]]
    p = probabilities(logits, [9, 3], s)
    support = np.flatnonzero(p)
    assert 5 <= support.size <= 24 and set(np.unique(draws)) <= set(support)
    expected, observed = n * p[support], np.bincount(draws, minlength=v)[support].astype(np.float64)
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < chi_square_bound(expected.size - 1), (chi2, expected.size)


def chi_square(draws: np.ndarray, p: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of the draws against p over its support (bins
    expected fewer than 5 times pooled), and its degrees of freedom."""
    support = np.flatnonzero(p)
    assert set(np.unique(draws)) <= set(support)
    expected = draws.size * p[support]
    observed = np.bincount(draws, minlength=p.size)[support].astype(np.float64)
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    return float(((observed - expected) ** 2 / expected).sum()), expected.size - 1


def test_verified_drafts_keep_the_distribution():
    """Speculative sampling's rule (verify_draft): whatever the draft (a
    likely token, an unlikely one, one the chain rules out), the token it
    gives follows the chain's distribution: 10000 positions, chi-square
    below its 1 - 1e-6 quantile (fixed seed: deterministic)."""
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal(64) * 1.5).astype(np.float32)
    s = Sampling(temp=1.1, top_k=20, top_p=0.98, min_p=0.0, seed=777)
    p = probabilities(logits, [], s)
    order = np.argsort(-p)
    for draft in (int(order[0]), int(order[5]), int(order[-1])):
        draws = np.array([verify_draft(logits, [], pos, s, draft) for pos in range(10000)])
        stat, df = chi_square(draws, p)
        assert stat < chi_square_bound(df), (draft, p[draft], stat, df)
        assert abs((draws == draft).mean() - p[draft]) < 0.03


def test_bad_values_are_one_line():
    for kw, match in ((dict(temp=-0.5), r"--temp -0.5: the temperature must be >= 0"),
                      (dict(top_p=0.0), r"--top-p 0.0: a probability in \(0, 1\]"),
                      (dict(top_p=1.5), r"--top-p 1.5: a probability in \(0, 1\]"),
                      (dict(top_k=-1), "--top-k -1: a number of tokens"),
                      (dict(min_p=2.0), r"--min-p 2.0: a probability in \[0, 1\]"),
                      (dict(repeat_penalty=0.0), "--repeat-penalty 0.0: a factor > 0"),
                      (dict(repeat_last_n=1000), "--repeat-last-n 1000: 0 \\(off\\) to 256"),
                      (dict(seed=-3), "--seed -3: a whole number"),
                      (dict(temp=float("nan")), "--temp nan: the temperature must be a finite number")):
        with pytest.raises(ValueError, match=match):
            Sampling(**kw)


def test_cli_bad_values_are_one_line(tiny, capsys):
    named = "vkq generate: error: "
    for args, match in ((["--temp", "-1"], named + "--temp -1.0: the temperature must be >= 0"),
                        (["--temp", "1", "--top-p", "0"], named + r"--top-p 0.0: a probability in \(0, 1\]"),
                        (["--chat", "--chat-template", "nosuch"], named + "unknown chat template 'nosuch'"),
                        (["--temp", "1", "--profile"], named + "--profile times greedy's decode step")):
        assert main(["generate", str(tiny), "-p", "the", "-n", "4", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and pytest.importorskip("re").match(match, err[0]), err


# -- the engines ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def engines(tiny):
    import vkq

    backend = vkq.Backend()
    host = LlamaModel(tiny, backend, "dmmv", ctx=96)
    graph = GpuLlama(None, backend, "dmmv", ctx=96, file=host.file, weights=host.matvecs, prompt_kernels="matvec")
    token_by_token = GpuLlama(None, backend, "dmmv", ctx=96, file=host.file, weights=host.matvecs, prompt_chunk=1,
                              prompt_kernels="matvec")
    return host, graph, token_by_token


@pytest.mark.parametrize("s", [Sampling(temp=1.0, seed=5),
                               Sampling(temp=1.5, top_k=100, top_p=0.9, min_p=0.0, repeat_penalty=1.5, seed=9)],
                         ids=["defaults", "penalty"])
def test_a_seed_gives_the_same_tokens_on_every_engine(engines, s):
    host, graph, token_by_token = engines
    ids = host.tokenizer.encode(TEXT)
    want = host.greedy(ids, 24, stop_at_eos=False, sampling=s)
    assert want.stats.sampling == f"{s.describe()} (sampled on the host)"
    assert len(set(want.tokens)) > 8  # (a draw, not the argmax's few)
    a = graph.greedy(ids, 24, stop_at_eos=False, sampling=s)
    assert a.tokens == want.tokens and a.stats.sampling.endswith("(sampled on the device)")
    assert a.stats.decode_submits == 23  # one submit per token, the draw in it
    for k in (4, 7):
        assert graph.greedy(ids, 24, stop_at_eos=False, sampling=s, steps_per_submit=k).tokens == want.tokens
    assert token_by_token.greedy(ids, 24, stop_at_eos=False, sampling=s).tokens == want.tokens
    other = host.greedy(ids, 24, stop_at_eos=False, sampling=Sampling(**{**s.__dict__, "seed": s.seed + 1}))
    assert other.tokens != want.tokens
    assert graph.greedy(ids, 24, stop_at_eos=False).tokens == host.greedy(ids, 24, stop_at_eos=False).tokens


def test_top_k_0_samples_on_the_host_of_either_engine(engines):
    host, graph, _ = engines
    ids = host.tokenizer.encode(TEXT)
    s = Sampling(temp=1.0, top_k=0, seed=3)
    a = graph.greedy(ids, 12, stop_at_eos=False, sampling=s)
    assert a.tokens == host.greedy(ids, 12, stop_at_eos=False, sampling=s).tokens
    assert a.stats.sampling.endswith("(sampled on the host)")
    with pytest.raises(ValueError, match="steps_per_submit chains the device's sampler, which takes top_k 1 to "
                                         "1024; top_k 0 samples on the host"):
        graph.greedy(ids, 12, sampling=s, steps_per_submit=4)
    greedy = graph.greedy(ids, 12, stop_at_eos=False)
    assert graph.greedy(ids, 12, stop_at_eos=False, sampling=Sampling(temp=0)).tokens == greedy.tokens


def test_speculative_sampling_on_both_engines(engines):
    """Drafts (prompt lookup, on a text that repeats itself) kept by
    speculative sampling's rule: some drafted and accepted, the same tokens
    on both engines (the rule runs on the host, from the verifying step's
    logits)."""
    host, graph, _ = engines
    ids = host.tokenizer.encode(" ".join([TEXT] * 3))[:55]
    s = Sampling(temp=0.3, top_k=5, seed=8)
    a = graph.greedy(ids, 40, stop_at_eos=False, sampling=s, speculative="lookup")
    b = host.greedy(ids, 40, stop_at_eos=False, sampling=s, speculative="lookup")
    assert a.tokens == b.tokens and len(a.tokens) == 40
    assert a.stats.drafted > 0 and a.stats.accepted > 0 and a.stats.decode_steps < 39, a.stats.summary()


@pytest.mark.slow
def test_the_repeat_penalty_window_past_the_ring(backend, tmp_path):
    """A context longer than the device's ring of recent tokens (its slots
    reused): the penalized draws are the host's, one step per submit and
    chained."""
    from tiny_llama import write_gguf

    model = write_gguf(tmp_path / "long.gguf", metadata={"llama.context_length": 512})
    long_host = LlamaModel(model, backend, "dmmv", ctx=300)
    graph = GpuLlama(None, backend, "dmmv", ctx=300, file=long_host.file, weights=long_host.matvecs,
                     prompt_kernels="matvec")
    ids = (long_host.tokenizer.encode(TEXT) * 7)[:250]
    s = Sampling(temp=1.0, top_k=50, repeat_penalty=3.0, repeat_last_n=200, seed=21)
    want = long_host.greedy(ids, 40, stop_at_eos=False, sampling=s).tokens
    assert want != long_host.greedy(ids, 40, stop_at_eos=False, sampling=Sampling(temp=1.0, top_k=50, seed=21)).tokens
    assert graph.greedy(ids, 40, stop_at_eos=False, sampling=s).tokens == want
    assert graph.greedy(ids, 40, stop_at_eos=False, sampling=s, steps_per_submit=6).tokens == want
