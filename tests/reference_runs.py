"""vkq against a float64 reference's greedy run (and llama.cpp's tokens, kept
as data: tests/llama_cpp_reference.py): the comparison the tests of
llama.cpp-quantized files share (test_qwen, test_spm_moe,
test_llama_moe_smollm2, test_llama_quantized).

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

import llama_cpp_reference
import vkq.blocks.reference as ref
import vkq.llama.host as host
from file_cache import cached_arrays, file_digest, reference_sources
from vkq.commands.compare import compare_file

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
