"""vkq.commands.model_file: random model files in a preset's shapes, of every
architecture vkq generate runs, as llama.cpp's converter lays them out.

Tiny specs of the qwen2, qwen3 and qwen3moe layouts (and llama's) are
written with write_model, in Q4_0, with the tiny Qwen files' ASCII
vocabulary (tests/tiny_qwen.py): the file reads as its architecture, with
what it adds to llama's layer (biases, per-head norms, experts of their
own width), and the graph engine decodes it as the float64 reference does
(logits within NMSE 1e-3, greedy tokens equal up to the reference's first
near-tie). The presets' CLI refuses what it cannot write in one line.
Slow: llama-server loads each file and decodes the reference's greedy
tokens up to its first near-tie.
"""
from __future__ import annotations

import numpy as np
import pytest

from tiny_qwen import write_qwen
from vkq.commands import model_file
from vkq.commands.presets import PRESETS, ModelSpec
from vkq.llama.architectures import ARCHITECTURES
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

SPECS = {s.arch: s for s in (
    ModelSpec("t-llama", "llama", hidden=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, ffn=512,
              vocab=0, tied_output=True),
    ModelSpec("t-qwen2", "qwen2", hidden=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, ffn=512,
              vocab=0, tied_output=True),
    # heads of 128 values: wider than hidden / n_head, as Qwen3's
    ModelSpec("t-qwen3", "qwen3", hidden=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=128, ffn=512,
              vocab=0, tied_output=False),
    PRESETS["tiny-moe"],  # qwen3moe: 8 experts of 256, 2 used
)}
PROMPT = "the theme of the thesis"
N_TOKENS = 4
NEAR_TIE = 0.05  # a reference top-1 margin (logits) under this may flip with float32 rounding
LOGITS_NMSE = 1e-3


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A GGUF holding the tiny Qwen files' ASCII byte-level BPE vocabulary
    (whole UTF-8 tokens only, as llama-server's /completion needs)."""
    return write_qwen(tmp_path_factory.mktemp("tok") / "qwen2.gguf", "qwen2")


@pytest.fixture(scope="module", params=list(SPECS))
def written(request, tokenizer, tmp_path_factory):
    spec = SPECS[request.param]
    return spec, model_file.write_model(spec, "Q4_0", tmp_path_factory.mktemp(spec.name) / "m.gguf", tokenizer)


@pytest.fixture(scope="module")
def reference(written):
    """(prompt ids, the float64 reference's greedy run with its logits)."""
    model = LlamaModel(written[1], path_mode="numpy")
    ids = model.tokenizer.encode(PROMPT)
    return ids, model.greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)


def margin(logits) -> float:
    return float(np.diff(np.sort(logits)[-2:])[0])


def test_the_file_reads_as_its_architecture(written):
    spec, path = written
    f = LlamaModel(path, path_mode="numpy").file
    arch = ARCHITECTURES[spec.arch]
    c = f.config
    assert (c.arch, c.n_layer, c.n_embd, c.head_dim, c.n_head, c.n_head_kv) == (
        spec.arch, spec.n_layer, spec.hidden, spec.head_dim, spec.n_head, spec.n_head_kv)
    assert (c.n_expert, c.n_expert_used, c.n_ff) == (
        (spec.n_expert, spec.n_expert_used, spec.expert_ffn) if spec.is_moe else (0, 0, spec.ffn))
    for i in range(spec.n_layer):
        assert set(f.biases[i]) == set(arch.biases)
        assert set(f.head_norms[i]) == set(arch.head_norms)
    assert "output.weight" in f.tensors if not spec.tied_output else "output.weight" not in f.tensors


def test_graph_engine_decodes_it_as_the_reference(backend, written, reference):
    ids, want = reference
    got = GpuLlama(written[1], backend).greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)
    assert len(got.tokens) == N_TOKENS
    for step, (g, w) in enumerate(zip(got.logits, want.logits)):
        w = np.asarray(w, np.float64)
        nmse = float(np.sum((np.asarray(g, np.float64) - w) ** 2) / np.sum(w ** 2))
        assert nmse < LOGITS_NMSE, f"step {step}: NMSE {nmse:.2e}"
        if margin(w) < NEAR_TIE:
            break  # past a near-tie the two may go different ways, and then see different inputs
        assert got.tokens[step] == want.tokens[step], f"step {step}"


def test_the_qwen_presets_are_their_published_shapes():
    """Qwen2.5-0.5B's 0.49B and Qwen3-0.6B's 0.6B parameters (their model cards)."""
    from vkq.commands.presets import preset

    assert round(preset("qwen2.5-0.5b", "Q4_0").params / 1e7) == 49
    assert round(preset("qwen3-0.6b", "Q4_0").params / 1e7) == 60


@pytest.mark.parametrize("argv, match", [
    (["gpt-oss-20b:MXFP4"], "comes from one of the presets"),
    (["tiny-moe:Q4_0"], "comes from one of the presets"),
    (["qwen3-0.6b:Q4_0", "--experts", "8,2"], "experts go into a dense llama preset"),
    (["qwen3-0.6b:Q7_0"], "has no 'Q7_0' mix"),
])
def test_refusals_are_one_line(tmp_path, tokenizer, capsys, argv, match):
    with pytest.raises(SystemExit) as e:
        model_file.main([argv[0], str(tmp_path / "x.gguf"), "--tokenizer", str(tokenizer), *argv[1:]])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err
    assert not (tmp_path / "x.gguf").exists()


def first_near_tie(want) -> int:
    """The reference's first step with a near-tie (N_TOKENS: none)."""
    ties = [i for i, w in enumerate(want.logits) if margin(w) < NEAR_TIE]
    return ties[0] if ties else N_TOKENS


@pytest.mark.slow
def test_llama_server_decodes_it_as_the_reference(written, reference):
    """llama-server's tokens on the file (recorded: tests/llama_cpp_reference.py)
    are the reference's up to its first near-tie."""
    import llama_cpp_reference

    ids, want = reference
    tokens = llama_cpp_reference.recorded("test_model_file", written[0].arch, written[1], ids, N_TOKENS)
    assert len(tokens) == N_TOKENS
    n = first_near_tie(want)
    assert tokens[:n] == want.tokens[:n]


@pytest.mark.slow
def test_llama_cpp_still_gives_the_recorded_tokens(written, reference):
    import llama_cpp_reference

    ids, want = reference
    llama_cpp_reference.check_live("test_model_file", written[0].arch, written[1], ids, N_TOKENS,
                                   first_near_tie(want))


def test_every_preset_the_gpu_campaign_writes_is_writable():
    """tools/gpu_campaign.sh's default PRESETS, at each scale: presets this module writes, in mixes they offer."""
    import re

    from conftest import ROOT

    text = (ROOT / "tools" / "gpu_campaign.sh").read_text()
    lists = re.findall(r'PRESETS=\$\{PRESETS:-"([^"]*)"\}', text)
    assert len(lists) == 3  # the small, the quick and the gpu scale
    named = [p for presets in lists for p in presets.split()]
    assert {"qwen2.5-0.5b:Q4_0", "qwen3-0.6b:Q4_0"} <= set(named)
    for p in named:
        name, _, mix = p.partition(":")
        spec = PRESETS[name]
        assert model_file._writable(spec) and mix in spec.mixes, p


def test_main_says_what_it_writes(tmp_path, tokenizer, capsys):
    """`python -m vkq.commands.model_file` says what it writes before, and its size after (a model file is
    hundreds of MB: it wrote them silently)."""
    out = tmp_path / "tok.gguf"
    assert model_file.main(["--tokenizer-only", str(tokenizer), str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("python -m vkq.commands.model_file: writing the tokenizer of ") and len(err) == 2
    assert err[1].startswith(f"python -m vkq.commands.model_file: wrote {out}: ") and " MB in " in err[1]
