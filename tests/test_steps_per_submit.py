"""Several greedy decode steps per submit (Decoder.greedy's steps_per_submit,
`vkq generate --steps-per-submit`): the graph engine chains k one-token
steps in one graph, each step's argmax the next step's token on the device.

The tokens and logits are those of one step per submit, bit for bit, on
both paths, dense and MoE; a submit takes no more steps than tokens are
left (the context's end mid-chain), and the steps past an end-of-text
token are dropped with the KV cache left as one step per submit leaves it;
k = 1 is one step per submit; the profile of the chained submits; what is
refused (the host engine, speculative decoding, k out of range), in one line.
"""
from __future__ import annotations

import pytest

from vkq.commands.cli import main
from vkq.llama.decoding import submit_sizes
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

from tiny_llama import write_gguf

TEXT = "the theory that the three then- the other thing that the world"
N = 20  # 19 decode steps after the prompt's token


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("chain") / "tiny.gguf")


def same(a, b):
    assert a.tokens == b.tokens
    assert len(a.logits) == len(b.logits) and all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))


def test_submit_sizes():
    assert submit_sizes(8, 19) == [8, 8, 3] and submit_sizes(4, 8) == [4, 4] and submit_sizes(16, 3) == [3]
    assert submit_sizes(4, 0) == [] == submit_sizes(4, -1)


@pytest.mark.parametrize("path,moe", [("dmmv", False), ("mmvq", False), ("dmmv", True)],
                         ids=["dmmv", "mmvq", "moe"])
def test_the_tokens_and_logits_of_one_step_per_submit(backend, dense, tmp_path, path, moe):
    model_file = write_gguf(tmp_path / "moe.gguf", experts=(8, 2)) if moe else dense
    d = GpuLlama(model_file, backend, path, ctx=64)
    ids = d.tokenizer.encode(TEXT)
    plain = d.greedy(ids, N, stop_at_eos=False, keep_logits=True)
    assert plain.stats.decode_submits == N - 1 and plain.stats.steps_per_submit == 1
    assert "steps/submit" not in plain.stats.summary()
    n_past = d.n_past
    for k, submits in ((2, 10), (8, 3), (16, 2)) if not moe else ((8, 3),):
        chained = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, steps_per_submit=k)
        same(chained, plain)
        s = chained.stats
        assert (s.decode_steps, s.decode_tokens, s.decode_submits) == (N - 1, N - 1, submits)
        assert d.n_past == n_past
        assert f"up to {k} steps/submit" in s.summary()
    one = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, steps_per_submit=1)
    same(one, plain)
    assert one.stats.decode_submits == N - 1


def test_an_end_of_text_mid_chain_stops_there(backend, dense, tmp_path):
    """An end-of-text token chosen mid-way through a submit: the steps after
    it are dropped, and the KV cache holds what one step per submit leaves
    (the next token fed after either gives the same logits)."""
    d = GpuLlama(dense, backend, "dmmv", ctx=64)
    ids = d.tokenizer.encode(TEXT)
    free = d.greedy(ids, N, stop_at_eos=False).tokens
    at = next(i for i in range(3, N) if free[i] not in free[:i] and i % 8 not in (0, 1))  # mid-way through a chain
    e = GpuLlama(write_gguf(tmp_path / "eos.gguf", metadata={"tokenizer.ggml.eos_token_id": free[at]}), backend,
                 "dmmv", ctx=64)
    plain = e.greedy(ids, N, keep_logits=True)
    assert plain.tokens == free[:at + 1]
    after_plain = (e.n_past, e.feed_one(5)[1])
    chained = e.greedy(ids, N, keep_logits=True, steps_per_submit=8)
    same(chained, plain)
    assert chained.stats.decode_steps == at and chained.stats.decode_submits == at // 8 + 1
    assert e.n_past == after_plain[0] == len(ids) + at
    assert e.feed_one(5)[1].tobytes() == after_plain[1].tobytes()


def test_a_chain_stops_at_the_context_end(backend, dense):
    """A context of exactly the prompt and N - 1 new positions: submits of
    8, 8 and 3 steps, the last ending at the context's end."""
    d = GpuLlama(dense, backend, "dmmv", ctx=64)
    ids = d.tokenizer.encode(TEXT)
    plain = d.greedy(ids, N, stop_at_eos=False, keep_logits=True)
    short = GpuLlama(None, backend, "dmmv", ctx=len(ids) + N - 1, file=d.file, weights=None)
    chained = short.greedy(ids, N, stop_at_eos=False, keep_logits=True, steps_per_submit=8)
    same(chained, plain)
    assert chained.stats.decode_submits == 3 and short.n_past == short.ctx


def test_profile_of_chained_submits(backend, dense):
    d = GpuLlama(dense, backend, "auto", ctx=32, profile=True)
    gen = d.greedy(d.tokenizer.encode("the theory"), 10, stop_at_eos=False, steps_per_submit=4)  # 4, 4, 1
    assert d.profiled_steps(4, chained=True) == 2 and d.profiled_steps(1) == 1
    prof = d.profile(2, 4, chained=True)
    rows = {r.label: r for r in prof.rows}
    assert rows["EmbedRows"].count == rows["Argmax"].count == rows["RMSNorm output_norm"].count == 4
    assert rows["upload inputs"].count == rows["read back outputs"].count == 1
    step_dispatches, step_barriers = d.graph.dispatch_counts()
    assert (prof.dispatches, prof.barriers) == (4 * step_dispatches, 4 * step_barriers + 3)  # a barrier between two
    assert (gen.stats.dispatches, gen.stats.barriers) == (step_dispatches, step_barriers + 3 / 4)
    assert prof.tokens == 4 and "per step of 4 tokens" in prof.summary()
    with pytest.raises(ValueError, match="3 submits of 4 chained decode steps to profile; 2 were run"):
        d.profile(3, 4, chained=True)


def test_refusals(backend, dense):
    g = GpuLlama(dense, backend, "auto", ctx=32)
    ids = g.tokenizer.encode(TEXT)[:5]
    for k, message in ((17, "steps_per_submit 17: 1 to 16 decode steps per submit"),
                       (0, "steps_per_submit 0: decode steps per submit, 1 or more"),
                       (True, "steps_per_submit True")):
        with pytest.raises(ValueError, match=message):
            g.greedy(ids, 4, steps_per_submit=k)
    with pytest.raises(ValueError, match="speculative decoding verifies drafts .*: give one of them"):
        g.greedy(ids, 4, steps_per_submit=4, speculative="lookup")
    host = LlamaModel(None, backend, "auto", ctx=32, file=g.file)
    with pytest.raises(ValueError, match="engine host.* runs one decode step per token; several steps per submit "
                                         "need the graph engine"):
        host.greedy(ids, 4, steps_per_submit=2)
    assert host.greedy(ids, 4, steps_per_submit=1).tokens == g.greedy(ids, 4).tokens
    g.reset()
    g.feed(g.tokenizer.encode(TEXT)[:20], False)
    with pytest.raises(ValueError, match="36 positions .* exceed the context of 32"):
        g.feed_steps(3, 16)


def test_cli(dense, capsys):
    args = ["generate", str(dense), "-p", TEXT, "-n", "12", "--ignore-eos"]
    assert main(args) == 0
    plain = capsys.readouterr()
    assert main(args + ["--steps-per-submit", "4"]) == 0
    chained = capsys.readouterr()
    assert chained.out == plain.out
    assert "0.273 submits/token, up to 4 steps/submit" in chained.err  # 11 steps: 4, 4, 3
    for extra, message in ((["--engine", "host"], "the host engine runs one step per token"),
                           (["--speculative", "lookup"], "give one of them"),
                           (["--compare-engines", "1"], "drop --steps-per-submit")):
        assert main(args + ["--steps-per-submit", "4"] + extra) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert main(args + ["--steps-per-submit", "17"]) == 2
    assert "--steps-per-submit 17: 1 to 16" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "--steps-per-submit K" in capsys.readouterr().out


def test_a_fraction_of_a_barrier_per_token_is_one_decimal():
    """Chained steps share the barriers between them: a fraction per token, said with one decimal (it printed
    "213.938 barriers/token"), a whole count as it is."""
    from vkq.llama.decoding import GenerationStats

    stats = GenerationStats("engine graph", None, n_prompt=3, n_generated=17, prompt_seconds=0.1, decode_steps=16,
                            decode_tokens=16, decode_seconds=1.0, decode_submits=1, dispatches=214.0,
                            barriers=213 + 15 / 16)
    assert "214 dispatches and 213.9 barriers/token" in stats.summary()
