"""{arch}.rope.scaling.attn_factor read as llama.cpp reads it.

llama.cpp (b10434) multiplies RoPE's cos and sin by its attention factor
(ggml_rope_ext's attn_factor, ggml's mscale): 1 unless YaRN scales, times
the file's rope.scaling.attn_factor, whatever the scaling type (none,
linear, YaRN at factor 1, or none given). Each rotated value of Q and K is
then that many times larger, so the model is the same as one whose Q and K
(their weights and biases, or Qwen3's per-head norm weights) are: with a
factor of 2, bit for bit (a power of 2 scales Q8_0 blocks exactly). Tested
that way, on the graph engine against the reference, and against
llama-server's own log-probabilities (slow) for each architecture vkq
decodes. A factor that is no positive
number is refused in one line naming the key.
"""
from __future__ import annotations

import numpy as np
import pytest

import vkq.blocks.reference as ref
from conftest import assert_model_file_refused
from tiny_llama import write_gguf
from tiny_qwen import ascii_vocab, write_qwen
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

IDS = [30, 71, 100, 5, 99, 40, 17, 3, 122, 64, 9]
# The tensors that make Q and K (their rotated values: every one, as each head is rotated whole here).
QK = {"llama": ("attn_q.weight", "attn_k.weight"),
      "qwen2": ("attn_q.weight", "attn_k.weight", "attn_q.bias", "attn_k.bias"),
      "qwen3": ("attn_q_norm.weight", "attn_k_norm.weight"), "qwen3moe": ("attn_q_norm.weight", "attn_k_norm.weight")}


def tiny(path, arch: str, metadata: dict | None = None, times: float = 1.0):
    """The tiny model of arch (ASCII vocabulary), Q and K times `times`."""
    kw = dict(metadata={f"{arch}.{k}": v for k, v in (metadata or {}).items()}, scale=3.0,
              times={t: times for t in QK[arch]} if times != 1.0 else None)
    return write_gguf(path, arch, tokenizer=ascii_vocab(), **kw) if arch == "llama" else write_qwen(path, arch, **kw)


def reference_logits(path) -> np.ndarray:
    return LlamaModel(path, path_mode="numpy").logits(IDS)


@pytest.mark.parametrize("arch", [pytest.param(a, marks=() if a == "llama" else pytest.mark.slow) for a in QK])
@pytest.mark.parametrize("scaling", [{}, {"rope.scaling.type": "yarn", "rope.scaling.factor": 1.0},
                                     {"rope.scaling.type": "linear", "rope.scaling.factor": 3.0}],
                         ids=["no type", "yarn at factor 1", "linear 3"])
def test_the_factor_scales_q_and_k(tmp_path, arch, scaling):
    """attn_factor 2 gives the logits of Q and K doubled, bit for bit, and
    not those without it."""
    factored = reference_logits(tiny(tmp_path / "f.gguf", arch, scaling | {"rope.scaling.attn_factor": 2.0}))
    doubled = reference_logits(tiny(tmp_path / "d.gguf", arch, scaling, times=2.0))
    assert factored.tobytes() == doubled.tobytes()
    assert not np.allclose(factored, reference_logits(tiny(tmp_path / "p.gguf", arch, scaling)), atol=1e-3)


def test_the_graph_engine_takes_the_factor(backend, tmp_path):
    path = tiny(tmp_path / "f.gguf", "llama", {"rope.scaling.attn_factor": 0.7})
    want = LlamaModel(path, path_mode="numpy").greedy(IDS, 6, stop_at_eos=False, keep_logits=True)
    got = GpuLlama(path, backend, "dmmv", ctx=32).greedy(IDS, 6, stop_at_eos=False, keep_logits=True)
    assert got.tokens == want.tokens
    assert max(ref.nmse(a, b) for a, b in zip(got.logits, want.logits)) < 1e-10


@pytest.mark.parametrize("value, said", [(0.0, "0"), (-1.5, "-1.5"), (float("nan"), "nan"), ("2", "'2'")])
def test_a_factor_that_is_no_positive_number_is_refused(tmp_path, capsys, value, said):
    path = write_gguf(tmp_path / "bad.gguf", metadata={"llama.rope.scaling.attn_factor": value})
    assert_model_file_refused(path, rf"llama\.rope\.scaling\.attn_factor is {said}; expected a finite number "
                                    r"above 0", capsys)


# llama-server on each architecture: the factor under each scaling type vkq runs.
SERVED = {"factor alone": {"rope.scaling.attn_factor": 2.0},
          "yarn at factor 1": {"rope.scaling.type": "yarn", "rope.scaling.factor": 1.0,
                               "rope.scaling.attn_factor": 0.7},
          "none, a factor ignored": {"rope.scaling.type": "none", "rope.scaling.factor": 4.0,
                                     "rope.scaling.attn_factor": 2.0},
          "linear 2": {"rope.scaling.type": "linear", "rope.scaling.factor": 2.0, "rope.scaling.attn_factor": 1.5}}
N_STEPS, TOP = 8, 5
# llama-server's float32 arithmetic with a float16 KV cache against the float64 reference: 0.03
# to 0.07 on these files without a factor, up to 0.2 with one (sharper attention). The factor
# left out moves them by 1.7 to 15.
LOGPROB_TOL = 0.3


def served_logprobs(path) -> tuple[list[int], list[dict[int, float]]]:
    """llama-server's greedy tokens after IDS, and at each step the log-probabilities of its TOP tokens."""
    import json
    import urllib.request

    from vkq.commands.llama_server import LlamaServer

    body = {"prompt": IDS, "n_predict": N_STEPS, "temperature": 0.0, "ignore_eos": True, "return_tokens": True,
            "cache_prompt": False, "n_probs": TOP}
    with LlamaServer(path) as server:
        req = urllib.request.Request(server.url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.load(r)
    steps = [{int(t["id"]): float(t["logprob"]) for t in step["top_logprobs"]}
             for step in out["completion_probabilities"]]
    return [int(t) for t in out["tokens"]], steps


def logprob_gap(path, tokens, steps) -> float:
    """The largest difference between the reference's log-probabilities (teacher-forced on
    llama-server's tokens) and llama-server's, over its top tokens."""
    rows = LlamaModel(path, path_mode="numpy").score(IDS, tokens).astype(np.float64)
    logp = rows - rows.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return max(abs(logp[i, t] - lp) for i, step in enumerate(steps) for t, lp in step.items())


def same_served(live, recorded) -> bool:
    """llama-server's answer here agrees with the recorded one: the same tokens and
    top tokens, their log-probabilities within 0.05 (another device rounds otherwise)."""
    return live["tokens"] == recorded["tokens"] and all(
        [t for t, _ in a] == [t for t, _ in b] and all(abs(x - y) < 0.05 for (_, x), (_, y) in zip(a, b))
        for a, b in zip(live["steps"], recorded["steps"]))


def recorded_served(path, label: str) -> tuple[list[int], list[dict[int, float]]]:
    """served_logprobs(path) as recorded (tests/llama_cpp_reference.Answers), checked
    against llama-server where it runs."""
    from llama_cpp_reference import Answers, unavailable

    def ask():
        tokens, steps = served_logprobs(path)
        return {"tokens": tokens, "steps": [sorted(step.items(), key=lambda x: -x[1]) for step in steps]}

    answers = Answers("served_logprobs", path, unavailable() is None, label)
    got = answers.answer("top logprobs", f"{IDS} {N_STEPS} {TOP}", ask, same_served)
    answers.close()
    return got["tokens"], [{int(t): float(lp) for t, lp in step} for step in got["steps"]]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SERVED))
@pytest.mark.parametrize("arch", list(QK))
def test_llama_server_gives_the_same_probabilities(tmp_path, arch, case):
    """At each of llama-server's greedy steps on the file, its top tokens'
    log-probabilities (recorded: tests/llama_cpp_reference.py; run again where
    it runs) are the float64 reference's (teacher-forced on its tokens), and
    not those of the reference that leaves the factor out."""
    meta = SERVED[case]
    path = tiny(tmp_path / "f.gguf", arch, meta)
    tokens, steps = recorded_served(path, f"{arch}: {case}")
    assert len(tokens) == len(steps) == N_STEPS
    assert logprob_gap(path, tokens, steps) < LOGPROB_TOL
    unscaled = tiny(tmp_path / "p.gguf", arch, {k: v for k, v in meta.items() if k != "rope.scaling.attn_factor"})
    assert logprob_gap(unscaled, tokens, steps) > 1.0
