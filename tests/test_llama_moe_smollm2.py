"""SmolLM2-135M as a mixture-of-experts model, quantized by llama.cpp, against
llama.cpp's own greedy decoding of the same files.

tests/moe_model.py turns SmolLM2 into Mixtral's layout (4 experts per layer,
2 used: SmolLM2's FFN and three noisy copies, a seeded router), in F16;
llama.cpp's quantizer (tests/llama_quant.py) makes the files under test from
it: Q4_0, the Q4_K_M mix, Q4_0 with IQ4_XS down-projection experts, and
MXFP4_MOE (MXFP4 expert stacks, Q8_0 elsewhere). On each:

- llama.cpp wrote the expert stacks in the block types asked for;
- `vkq compare` passes on every tensor, expert stacks included;
- llama.cpp's llama-server (its Vulkan backend) decoded the float64
  reference's greedy tokens up to the reference's first near-tie (its
  tokens kept as data: tests/llama_cpp_reference.py; run again where it
  runs), and so does `vkq generate` on both engines and both paths;
  every step's logits, teacher-forced, are within NMSE 1e-3 of the
  reference's; the graph engine takes one submit per token.

And the tests would see a wrong expert choice: routing each token to the
next-best experts moves the logits by far more than the tolerance.

The files, the reference's runs and llama-server's live tokens are made
once and kept by content (tests/file_cache.py).
"""
from __future__ import annotations

import pytest

from vkq.blocks.gguf_io import open_gguf
from vkq.llama.loading import load_model

import llama_cpp_reference
import llama_quant
import moe_model
from conftest import SMOLLM2_MISSING, smollm2_path
from file_cache import cached_file, file_digest
from reference_runs import (ENGINES_AND_PATHS, assert_compare_passes, assert_next_best_routing_seen, cached_runs,
                            check_decoder)

pytestmark = pytest.mark.slow

SMOL = smollm2_path()
if SMOL is None:
    pytest.skip(SMOLLM2_MISSING, allow_module_level=True)
if llama_quant.bin_dir() is None:
    pytest.skip(llama_quant.MISSING, allow_module_level=True)

# file -> (llama.cpp file type, overrides, the expert stacks' block types llama.cpp writes)
FILES = {
    "Q4_0": ("Q4_0", None, {"Q4_0"}),
    "Q4_K_M": ("Q4_K_M", None, {"Q5_0", "Q4_K", "Q6_K"}),  # K=576 stacks fall back to Q5_0
    "IQ4_XS-down": ("Q4_0", {"ffn_down_exps": "IQ4_XS"}, {"Q4_0", "IQ4_XS"}),
    "MXFP4_MOE": ("MXFP4_MOE", None, {"MXFP4"}),
}
PROMPT = "The history of the printing press begins in"
N_TOKENS = 12


@pytest.fixture(scope="module")
def source():
    key = (f"{llama_quant.WHEEL} {file_digest(SMOL)} {moe_model.N_EXPERT} {moe_model.N_USED} {moe_model.SPREAD} "
           f"{moe_model.ROUTER_SCALE} {moe_model.SEED}")
    return cached_file("smol-moe-f16", key, lambda part: moe_model.write_moe_source(SMOL, part))


@pytest.fixture(scope="module", params=list(FILES))
def moe_file(request, source):
    ftype, overrides, _ = FILES[request.param]
    path = cached_file(f"smol-moe-{request.param}", f"{source.name} {ftype} {overrides}",
                       lambda part: llama_quant.quantize(source, part, ftype, overrides=overrides))
    return request.param, path


def test_llama_wrote_the_expert_types(moe_file):
    name, path = moe_file
    tensors = open_gguf(path).tensors
    stacks = {t.qtype for n, t in tensors.items() if n.endswith("_exps.weight")}
    print(f"{name}: expert stacks {sorted(stacks)}; {llama_quant.type_summary(path)}")
    assert stacks == FILES[name][2]
    assert all(len(tensors[f"blk.{i}.ffn_up_exps.weight"].shape) == 3 for i in range(30))


def test_compare_every_tensor(backend, moe_file):
    assert_compare_passes(backend, moe_file[1])


@pytest.fixture(scope="module")
def runs(moe_file):
    """(the float64 reference's greedy run, llama.cpp's tokens), kept by the file's content (file_cache)."""
    name, path = moe_file
    want, llama_cpp = cached_runs("test_llama_moe_smollm2", f"smol-moe-{name}", path, PROMPT, N_TOKENS)
    print(f"{name}: reference tokens {want.tokens}; {want.compared} compared")
    return want, llama_cpp


def test_llama_cpp_decodes_the_reference_tokens(runs):
    want, llama_cpp = runs
    assert llama_cpp[:want.compared] == want.tokens[:want.compared]


def test_llama_cpp_still_gives_the_recorded_tokens(moe_file, runs):
    llama_cpp_reference.check_live("test_llama_moe_smollm2", f"smol-moe-{moe_file[0]}", moe_file[1], runs[0].ids,
                                   N_TOKENS, runs[0].compared)


@pytest.mark.parametrize("engine, path", ENGINES_AND_PATHS)
def test_generate_matches_llama_cpp(backend, moe_file, runs, engine, path):
    want, llama_cpp = runs
    got = check_decoder(load_model(moe_file[1], backend=backend, engine=engine, path=path), want, llama_cpp)
    if engine == "graph":
        assert got.stats.submits_per_token == 1


def test_a_wrong_expert_choice_would_be_seen(moe_file, runs, monkeypatch):
    """Each token routed to its next-best experts instead: the logits move by
    far more than the tests allow (the experts differ enough)."""
    if moe_file[0] != "Q4_0":
        pytest.skip("once is enough")
    assert_next_best_routing_seen(moe_file[1], runs[0], monkeypatch)
