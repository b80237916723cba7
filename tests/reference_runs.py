"""vkq against a float64 reference's greedy run (and llama.cpp's tokens, kept
as data: tests/llama_cpp_reference.py): the comparison the tests of
llama.cpp-quantized files share (test_qwen, test_gemma, test_phi3,
test_gpt_oss, test_spm_moe, test_llama_moe_smollm2, test_llama_quantized).

A module whose llama.cpp-quantized files take the same three slow checks
imports them from here (pytest collects a test function wherever the module
holds it) and gives a fixture `llama_cpp_run` (a QuantizedRun, from
quantized_run).

Greedy tokens are compared up to the reference's first near-tie (a top-1
margin under NEAR_TIE logits, which float32 rounding may flip either way);
a prompt whose run has fewer than MIN_COMPARED decided steps is a poor one.
Logits, teacher-forced on the reference's tokens, must lie within
LOGITS_NMSE of the reference's at every step, near-ties included.
"""
from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

import llama_cpp_reference
import llama_quant
import vkq.blocks.reference as ref
import vkq.llama.host as host
from file_cache import cached_arrays, file_digest, reference_sources
from vkq.commands.compare import compare_file
from vkq.llama.gpu_step import GpuLlama

NEAR_TIE = 0.05  # a reference top-1 margin (logits) under this may flip with float32 rounding
MIN_COMPARED = 6  # steps that must not be near-ties (else the prompt is a poor one)
LOGITS_NMSE = 1e-3
ENGINES_AND_PATHS = [("graph", "mmvq"), ("graph", "dmmv"), ("host", "mmvq"), ("host", "dmmv")]  # (parametrize)


@dataclasses.dataclass
class Run:
    ids: list[int]
    tokens: list[int]
    logits: list[np.ndarray]
    compared: int  # tokens before the reference's first near-tie


def margins(logits) -> list[float]:
    """Each step's top-1 margin (logits)."""
    return [float(np.diff(np.sort(g)[-2:])[0]) for g in logits]


def compared_run(ids, tokens, logits) -> Run:
    """The reference's greedy run, compared up to its first near-tie; asserts
    the prompt decides at least MIN_COMPARED steps."""
    m = margins(logits)
    ties = [i for i, x in enumerate(m) if x < NEAR_TIE]
    assert sum(x >= NEAR_TIE for x in m) >= MIN_COMPARED, f"margins {m}: a poor prompt"
    return Run(list(ids), list(tokens), list(logits), ties[0] if ties else len(tokens))


def reference_run(path, prompt: str, n_tokens: int, ctx: int | None = None) -> Run:
    """The float64 reference's greedy run of n_tokens after prompt (not kept)."""
    reference = host.LlamaModel(path, path_mode="numpy", ctx=ctx)
    ids = reference.tokenizer.encode(prompt)
    run = reference.greedy(ids, n_tokens, stop_at_eos=False, keep_logits=True)
    return compared_run(ids, run.tokens, run.logits)


def cached_runs(module: str, what: str, path, prompt: str, n_tokens: int) -> tuple[Run, list[int]]:
    """(the float64 reference's greedy run, kept by the file's content
    (tests/file_cache.py) as "<what>-reference"; llama-server's greedy tokens
    as recorded in the module's data under `what`)."""
    key = f"{file_digest(path)} {prompt!r} {n_tokens}"

    def reference_run():
        reference = host.LlamaModel(path, path_mode="numpy")
        ids = reference.tokenizer.encode(prompt)
        run = reference.greedy(ids, n_tokens, stop_at_eos=False, keep_logits=True)
        return {"ids": np.array(ids), "tokens": np.array(run.tokens), "logits": np.stack(run.logits)}

    stored = cached_arrays(f"{what}-reference", f"{key} {reference_sources()}", reference_run)
    want = compared_run(stored["ids"].tolist(), stored["tokens"].tolist(), list(stored["logits"]))
    return want, llama_cpp_reference.recorded(module, what, path, want.ids, n_tokens)


@dataclasses.dataclass
class QuantizedRun:
    """A llama.cpp-quantized file, the reference's run on it and llama.cpp's recorded tokens."""
    module: str  # the test module whose data (tests/llama_cpp_reference.py) records llama.cpp's tokens
    case: str  # the case there
    path: object
    n_tokens: int
    want: Run
    llama_cpp: list[int]
    ctx: int | None = None  # the context vkq's decoders take
    env: dict = dataclasses.field(default_factory=dict)  # llama-server's environment (e.g. LLAMA_ARG_REPACK)


def quantized_run(module: str, case: str, path, prompt: str, n_tokens: int, *, ctx: int | None = None,
                  env: dict | None = None) -> QuantizedRun:
    """cached_runs on a llama.cpp-quantized file, with a check that the
    reference's compared tokens hold no end-of-generation token (llama-server's
    ignore_eos bans those, so greedy decoding there would pick another)."""
    env = dict(env or {})
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        want, llama_cpp = cached_runs(module, case, path, prompt, n_tokens)
    eog = host.LlamaModel(path, path_mode="numpy", ctx=ctx).tokenizer.eog_ids
    assert not set(want.tokens[:want.compared]) & set(eog), f"{want.tokens}: a poor prompt, it reaches {eog}"
    print(f"{case}: {llama_quant.type_summary(path)}; reference {want.tokens}, llama.cpp {llama_cpp}; "
          f"{want.compared} compared; margins {np.round(margins(want.logits), 2).tolist()}")
    return QuantizedRun(module, case, path, n_tokens, want, llama_cpp, ctx, env)


# -- the checks of a llama.cpp-quantized file (imported by the modules that give `llama_cpp_run`) -------------

@pytest.mark.slow
def test_llama_cpp_decodes_the_reference_tokens(llama_cpp_run):
    want = llama_cpp_run.want
    assert llama_cpp_run.llama_cpp[:want.compared] == want.tokens[:want.compared]


@pytest.mark.slow
def test_llama_cpp_still_gives_the_recorded_tokens(llama_cpp_run, monkeypatch):
    for k, v in llama_cpp_run.env.items():
        monkeypatch.setenv(k, v)
    r = llama_cpp_run
    llama_cpp_reference.check_live(r.module, r.case, r.path, r.want.ids, r.n_tokens, r.want.compared)


@pytest.mark.slow
@pytest.mark.parametrize("engine, path", ENGINES_AND_PATHS)
def test_vkq_matches_llama_cpp(backend, llama_cpp_run, engine, path):
    decoder = GpuLlama if engine == "graph" else host.LlamaModel
    r = llama_cpp_run
    check_decoder(decoder(r.path, backend, path, ctx=r.ctx), r.want, r.llama_cpp)


def check_decoder(model, want: Run, expect_tokens: list[int]):
    """model's greedy tokens are expect_tokens up to the reference's first near-tie;
    its logits, teacher-forced on the reference's tokens, within LOGITS_NMSE.
    Returns model's greedy result."""
    got = model.greedy(want.ids, len(want.tokens), stop_at_eos=False, keep_logits=True)
    n = want.compared
    assert got.tokens[:n] == expect_tokens[:n], f"{model.label}: {got.tokens} vs {expect_tokens}"
    forced = got.logits if got.tokens == want.tokens else model.score(want.ids, want.tokens)
    errors = [ref.nmse(a, b) for a, b in zip(forced, want.logits)]
    assert max(errors) < LOGITS_NMSE, (model.label, errors)
    return got


def assert_generate_prints(path, prompt: str, want: Run, capsys, *options: str) -> None:
    """`vkq generate` (graph engine) on the file prints the reference's first
    4 tokens as text."""
    from vkq.commands.cli import main

    assert main(["generate", str(path), "-p", prompt, "-n", "4", *options]) == 0
    text = host.LlamaModel(path, path_mode="numpy").tokenizer.decode(want.tokens[:4])
    assert text and text in capsys.readouterr().out


def assert_compare_passes(backend, path) -> None:
    """`vkq compare` passes on every tensor of the file."""
    out = io.StringIO()
    status = compare_file(path, backend, out=lambda line: print(line, file=out))
    print("\n".join(out.getvalue().splitlines()[-3:]))
    assert status == 0, out.getvalue()


def assert_next_best_routing_seen(path, want: Run, monkeypatch) -> None:
    """Each token of the file's float64 reference routed to its next-best
    experts instead (vkq.llama.host.route, read at every step): the first
    logits move by far more than LOGITS_NMSE (the experts differ enough for
    the tests to see a wrong expert choice)."""
    reference = host.LlamaModel(path, path_mode="numpy")
    right = host.route

    def next_best(logits, n_used):
        chosen, weights = right(logits, n_used + 1)
        return chosen[:, 1:], weights[:, 1:] / weights[:, 1:].sum(axis=1, keepdims=True)

    monkeypatch.setattr(host, "route", next_best)
    assert ref.nmse(reference.logits(want.ids), want.logits[0]) > 30 * LOGITS_NMSE
