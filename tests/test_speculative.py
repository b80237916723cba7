"""Speculative greedy decoding: the tokens of plain greedy, token for token.

A step feeds the chosen token and drafts after it (Decoder.feed_rows) and
keeps the drafts greedy agrees with; its guarantee rests on the n-column
step giving each row the bits of one token fed alone (tests/test_prompt_chunks.py).
Drafters made to be right (every draft accepted), wrong (every draft
rejected) and right then wrong, past an end-of-text token and up to the
context's end, on both engines and both paths, dense and MoE; prompt lookup
itself (vkq.llama.lookup) on its own, and on SmolLM2 (slow).
"""
from __future__ import annotations

import pytest

from vkq.llama.draft import DraftModel, check_same_vocabulary
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel
from vkq.llama.lookup import DRAFT_START, PAUSE_MAX, PromptLookup

from conftest import smollm2_or_skip
from tiny_llama import write_gguf

TEXT = "the theory that the three then- the other thing that the world"
N = 20


@pytest.fixture(scope="module", params=[None, (8, 2)], ids=["dense", "moe"])
def model_file(request, tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("spec") / "tiny.gguf", experts=request.param)


ENGINES = {"graph dmmv": (GpuLlama, "dmmv"), "graph mmvq": (GpuLlama, "mmvq"), "host": (LlamaModel, "auto")}


def decoder(backend, engine: str, path, ctx: int = 64):
    kind, mode = ENGINES[engine]
    return kind(path, backend, mode, ctx=ctx)


class Scripted:
    """A drafter that drafts from a known sequence (greedy's own tokens),
    each draft changed from position `wrong_at` on (None: never)."""

    name = "scripted"

    def __init__(self, tokens, wrong_at: int | None = None, n_vocab: int = 260):
        self.tokens, self.wrong_at, self.n_vocab = tokens, wrong_at, n_vocab
        self.asked: list[int] = []

    def start(self, context):
        self.n = 1  # greedy's first token is in the context: drafts start at the second

    def add(self, token):
        self.n += 1

    def draft(self, room):
        self.asked.append(room)
        d = list(self.tokens[self.n:self.n + room])
        if self.wrong_at is not None:
            d = d[:self.wrong_at] + [(t + 1) % self.n_vocab for t in d[self.wrong_at:]]
        return d

    def update(self, drafted, accepted):
        pass


def same(a, b):
    assert a.tokens == b.tokens
    assert len(a.logits) == len(b.logits) and all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))


@pytest.mark.parametrize("engine", list(ENGINES))
def test_drafts_all_accepted_all_rejected_and_half(backend, model_file, engine):
    d = decoder(backend, engine, model_file)
    ids = d.tokenizer.encode(TEXT)
    plain = d.greedy(ids, N, stop_at_eos=False, keep_logits=True)
    right = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative=Scripted(plain.tokens))
    same(right, plain)
    s = right.stats
    assert s.accepted == s.drafted == 16  # 19 tokens after the prompt's: steps of 8, 8 and 3
    assert s.decode_steps == 3 and s.decode_tokens == N - 1 and s.tokens_per_step == 19 / 3
    wrong = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative=Scripted(plain.tokens, wrong_at=0))
    same(wrong, plain)
    assert wrong.stats.accepted == 0 and wrong.stats.decode_steps == N - 1
    assert wrong.stats.drafted == 7 * 12 + 6 + 5 + 4 + 3 + 2 + 1  # as many as the tokens still to come allow
    half = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative=Scripted(plain.tokens, wrong_at=3))
    same(half, plain)
    assert half.stats.accepted == 3 * 4 + 2 and half.stats.decode_steps == 5  # 4 tokens a step, then 3
    assert half.stats.speculative == "scripted" and plain.stats.speculative is None


def test_a_draft_across_the_end_of_text_stops_there(backend, tmp_path):
    """With an end-of-text token greedy chooses mid-way, drafts that run
    past it stop where plain greedy stops, at that token."""
    d = GpuLlama(write_gguf(tmp_path / "tiny.gguf"), backend, "auto", ctx=64)
    ids = d.tokenizer.encode(TEXT)
    free = d.greedy(ids, N, stop_at_eos=False).tokens
    at = next(i for i in range(3, N) if free[i] not in free[:i])
    eos_file = write_gguf(tmp_path / "eos.gguf", metadata={"tokenizer.ggml.eos_token_id": free[at]})
    e = GpuLlama(eos_file, backend, "auto", ctx=64)
    plain = e.greedy(ids, N, keep_logits=True)
    assert plain.tokens == free[:at + 1]
    for wrong_at in (None, 5):
        spec = e.greedy(ids, N, keep_logits=True, speculative=Scripted(free, wrong_at))
        same(spec, plain)


@pytest.mark.parametrize("engine", ["graph dmmv", "host"])
def test_drafts_stop_at_the_context_end(backend, model_file, engine):
    """A context of exactly the prompt and N - 1 new positions: the drafts
    asked for are cut to the tokens still to come (and to draft_max, 7),
    so no step passes its end."""
    probe = decoder(backend, engine, model_file)
    ids = probe.tokenizer.encode(TEXT)
    plain = probe.greedy(ids, N, stop_at_eos=False, keep_logits=True)
    d = decoder(backend, engine, model_file, ctx=len(ids) + N - 1)
    for wrong_at, asked in ((None, [7, 7, 2]), (0, [min(7, 18 - i) for i in range(19)])):
        drafter = Scripted(plain.tokens + [1] * 16, wrong_at)  # it would draft past the end
        spec = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative=drafter)
        same(spec, plain)
        assert drafter.asked == asked and d.n_past == d.ctx  # the last step ends at the context's end


@pytest.mark.parametrize("engine", list(ENGINES))
def test_prompt_lookup_keeps_greedy_tokens(backend, model_file, engine):
    d = decoder(backend, engine, model_file, ctx=96)
    for text, repeats in ((TEXT, False), ("abcdefgh abcdefgh abcdefgh abcdefgh abc", True)):
        ids = d.tokenizer.encode(text)
        plain = d.greedy(ids, N, stop_at_eos=False, keep_logits=True)
        spec = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative="lookup")
        same(spec, plain)
        assert spec.stats.speculative == "lookup" and spec.stats.n_generated == N
        assert spec.stats.drafted > 0 or not repeats  # (the random model does not copy: its drafts are rejected)


def test_prompt_lookup_drafts():
    p = PromptLookup(draft_max=7)
    p.start([1, 2, 3, 4, 5, 9, 2, 3])
    assert p.match(7) == [4, 5, 9, 2, 3, 4, 5]  # after "2 3": what followed it before, read on into the draft
    p.add(7)
    assert p.match(3) == []  # 7 never occurred before
    p.start([5, 5, 5])
    assert p.match(4) == [5, 5, 5, 5]  # a period of one token
    p.start([1, 2, 3, 9, 2, 3, 4, 1, 2, 3])
    assert p.match(2) == [9, 2]  # the latest occurrence of the longest n-gram that has one: "1 2 3"
    p.start([2, 3, 9, 1, 2, 3, 4, 8, 3])
    assert p.match(2) == []  # one token ("3") is not enough
    one = PromptLookup(ngram_min=1)
    one.start([2, 3, 9, 1, 2, 3, 4, 8, 3])
    assert one.match(2) == [4, 8]


def test_prompt_lookup_backs_off():
    p = PromptLookup(draft_max=7)
    p.start([1, 2, 3, 1, 2])
    assert len(p.draft(10)) == DRAFT_START == 3
    p.update(3, 3)
    assert len(p.draft(10)) == 6  # all accepted: doubled
    p.update(6, 6)
    assert len(p.draft(10)) == 7  # up to draft_max
    p.update(7, 2)
    assert len(p.draft(10)) == 3  # one more than were accepted
    pauses = []
    for _ in range(7):
        p.update(1, 0)  # rejected outright: lookups pause, longer each time
        n = 0
        while not p.draft(10):
            n += 1
        pauses.append(n)
    assert pauses == [1, 2, 4, 8, PAUSE_MAX, PAUSE_MAX, PAUSE_MAX]
    p.update(1, 1)
    p.update(1, 0)
    assert p.draft(10) == [] and p.draft(10) != []  # an acceptance resets the pauses
    assert len(p.draft(2)) == 1  # and the limit fell to one


def test_refusals(backend, model_file):
    g = GpuLlama(model_file, backend, "auto", ctx=32)
    ids = g.tokenizer.encode(TEXT)[:5]
    with pytest.raises(ValueError, match="speculative 'model'"):
        g.greedy(ids, 4, speculative="model")
    assert g.draft_limit(8) == g.draft_limit(16) == g.draft_limit() == 7  # cut to what a step verifies
    with pytest.raises(ValueError, match="draft_max 0: drafted tokens per step, 1 or more"):
        g.greedy(ids, 4, speculative="lookup", draft_max=0)
    one = GpuLlama(None, backend, "auto", ctx=32, file=g.file, prompt_chunk=1, prompt_kernels="matvec")
    with pytest.raises(ValueError, match="takes 1 per step"):
        one.greedy(ids, 4, speculative="lookup")
    ref = LlamaModel(None, None, "numpy", ctx=32, file=g.file)
    with pytest.raises(ValueError, match="vkq's engines, not engine numpy"):
        ref.greedy(ids, 4, speculative="lookup")
    g.reset()
    g.feed(ids, False)
    with pytest.raises(ValueError, match="rewind to 6 positions: the cache holds 5"):
        g.rewind(6)
    with pytest.raises(ValueError, match="feed_rows takes 1 to 8 tokens, got 9"):
        g.feed_rows([1] * 9)


@pytest.mark.parametrize("engine", ["graph", "host"])
def test_cli_speculative(model_file, capsys, engine):
    """vkq generate --speculative lookup: the text of plain greedy, drafted and accepted beside t/s."""
    from vkq.commands.cli import main

    args = ["generate", str(model_file), "-p", "abcdefgh abcdefgh abcdefgh abc", "-n", "12", "--ignore-eos",
            "--engine", engine]
    assert main(args) == 0
    plain = capsys.readouterr()
    assert main(args + ["--speculative", "lookup"]) == 0
    spec = capsys.readouterr()
    assert spec.out == plain.out
    assert "speculative (lookup): drafted " in spec.err and "tokens/step" in spec.err
    assert "speculative" not in plain.err


def test_cli_speculative_refusals(model_file, capsys):
    from vkq.commands.cli import main

    base = ["generate", str(model_file), "-p", "the three", "-n", "4", "--speculative", "lookup"]
    assert main(base + ["--profile"]) == 2
    assert "--profile times the one-token decode step" in capsys.readouterr().err
    assert main(base + ["--compare-engines", "2"]) == 2
    assert "drop --speculative" in capsys.readouterr().err
    assert main(base + ["--path", "numpy"]) == 2
    out = capsys.readouterr()
    assert "vkq's engines, not engine numpy" in out.err and out.out == ""


@pytest.mark.slow
def test_smollm2_repeating_prompt(backend):
    """SmolLM2 asked to write out code again: most drafts accepted, greedy's tokens."""
    d = GpuLlama(smollm2_or_skip(), backend, "auto", ctx=256)
    code = "def area(width, height):\n    return width * height\n\n"
    ids = d.tokenizer.encode(f"{code}Copy the function above exactly:\n\n")
    plain = d.greedy(ids, 24, stop_at_eos=False, keep_logits=True)
    spec = d.greedy(ids, 24, stop_at_eos=False, keep_logits=True, speculative="lookup")
    same(spec, plain)
    print(spec.stats.summary())
    assert spec.stats.accepted >= 8 and spec.stats.decode_steps < plain.stats.decode_steps


# -- a draft model (vkq.llama.draft) ------------------------------------------------
Q4_0_COPY = {r: "Q4_0" for r in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output")}


@pytest.fixture(scope="module")
def dense_pair(tmp_path_factory):
    """The dense tiny model and a copy of it with every matrix in Q4_0 (the same weights, coarser)."""
    where = tmp_path_factory.mktemp("draft")
    return write_gguf(where / "tiny.gguf"), write_gguf(where / "tiny-q4_0.gguf", expert_types=Q4_0_COPY)


class Recorded(DraftModel):
    """A DraftModel that keeps every draft with the text it continued."""

    def draft(self, room):
        drafts = super().draft(room)
        self.seen = getattr(self, "seen", []) + [(list(self.tokens), drafts)]
        return drafts


@pytest.mark.parametrize("engine", ["graph dmmv", "host"])
def test_draft_model_keeps_greedy_tokens(backend, dense_pair, engine):
    """The same file as its own draft: every draft accepted; a Q4_0 copy:
    some rejected; the tokens of plain greedy both ways. Each draft is the
    draft model's own greedy continuation of the text, from an empty cache:
    its KV cache follows the text through the rejections."""
    target_file, q4_file = dense_pair
    d = decoder(backend, engine, target_file)
    ids = d.tokenizer.encode(TEXT)
    plain = d.greedy(ids, N, stop_at_eos=False, keep_logits=True)
    itself = DraftModel(d, decoder(backend, engine, target_file), p_min=0)
    spec = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative=itself)
    same(spec, plain)
    s = spec.stats
    assert s.speculative == "draft tiny.gguf" and s.accepted == s.drafted == 16 and s.decode_steps == 3
    draft = decoder(backend, engine, q4_file)
    q4 = Recorded(d, draft, p_min=0)
    spec = d.greedy(ids, N, stop_at_eos=False, keep_logits=True, speculative=q4, draft_max=4)
    same(spec, plain)
    s = spec.stats
    assert 0 < s.accepted < s.drafted and s.decode_steps < N - 1
    for text, drafts in q4.seen[1:4]:
        assert draft.greedy(text, len(drafts), stop_at_eos=False).tokens == drafts


def test_draft_model_stops_at_p_min_and_its_context(backend, dense_pair):
    """p_min 1: no draft is that sure, every step a plain one; a draft's
    context shorter than the text: it drafts up to its end, then nothing."""
    target_file, q4_file = dense_pair
    d = GpuLlama(target_file, backend, "auto", ctx=64)
    ids = d.tokenizer.encode(TEXT)
    plain = d.greedy(ids, N, stop_at_eos=False)
    sure = Recorded(d, GpuLlama(q4_file, backend, "auto", ctx=64), p_min=1.0)  # (never that sure)
    spec = d.greedy(ids, N, stop_at_eos=False, speculative=sure)
    assert spec.tokens == plain.tokens and spec.stats.drafted == 0 and spec.stats.decode_steps == N - 1
    ctx = len(ids) + 4
    short = Recorded(d, GpuLlama(q4_file, backend, "auto", ctx=ctx), p_min=0)  # a draft of a shorter context
    spec = d.greedy(ids, N, stop_at_eos=False, speculative=short)
    assert spec.tokens == plain.tokens
    sizes = [(len(text), len(drafts)) for text, drafts in short.seen]
    assert sizes[0] == (len(ids) + 1, 4) and sizes[-1][1] == 0  # (its last draft fills its context, unfed)
    assert all(n <= max(0, ctx - t + 1) for t, n in sizes)


def vocabulary_file(path, change):
    """The tiny model with its vocabulary changed: change(tokens, types)."""
    import gguf

    from tiny_llama import byte_level_vocab

    tokens, merges, types = byte_level_vocab()
    change(tokens, types)
    V = gguf.GGUFValueType
    return write_gguf(path, tokenizer={"tokenizer.ggml.model": "gpt2",
                                       "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
                                       "tokenizer.ggml.merges": (merges, V.ARRAY, V.STRING),
                                       "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32),
                                       "tokenizer.ggml.eos_token_id": 0})


def test_draft_model_refuses_another_vocabulary(backend, dense_pair, tmp_path):
    from vkq.llama.draft import VocabularyMismatch
    from vkq.llama.model import LlamaFile

    target = LlamaFile(dense_pair[0])
    bigger = vocabulary_file(tmp_path / "bigger.gguf", lambda tokens, types: (tokens.append("Ġa"), types.append(1)))
    renamed = vocabulary_file(tmp_path / "renamed.gguf", lambda tokens, types: tokens.__setitem__(0, "<|end|>"))
    with pytest.raises(VocabularyMismatch, match=r"^draft bigger.gguf and target tiny.gguf do not share a "
                                                 r"vocabulary: 261 tokens against 260$"):
        check_same_vocabulary(target, LlamaFile(bigger))
    with pytest.raises(VocabularyMismatch, match=r"^draft renamed.gguf and target tiny.gguf .*: token 0 is "
                                                 r"'<\|end\|>' in the draft, '<\|endoftext\|>' in the target$"):
        check_same_vocabulary(target, LlamaFile(renamed))
    check_same_vocabulary(target, LlamaFile(dense_pair[1]))  # the same vocabulary, other weights
    d = GpuLlama(None, backend, "auto", ctx=32, file=target)
    with pytest.raises(ValueError, match="needs a decoder of its own"):
        DraftModel(d, d)


def test_cli_draft(dense_pair, capsys, tmp_path):
    """vkq generate --draft: the text of plain greedy, drafted and accepted beside t/s; refusals in one line."""
    from vkq.commands.cli import main

    target, q4 = map(str, dense_pair)
    args = ["generate", target, "-p", TEXT, "-n", "12", "--ignore-eos"]
    assert main(args) == 0
    plain = capsys.readouterr()
    assert main(args + ["--draft", q4, "--draft-max", "3", "--draft-p-min", "0"]) == 0
    spec = capsys.readouterr()
    assert spec.out == plain.out
    assert "speculative (draft tiny-q4_0.gguf): drafted " in spec.err and "tokens/step" in spec.err
    other = vocabulary_file(tmp_path / "other.gguf", lambda tokens, types: (tokens.append("Ġa"), types.append(1)))
    for extra, said in ((["--draft", str(other)], "draft other.gguf and target tiny.gguf do not share a vocabulary"),
                        (["--draft", str(tmp_path / "missing.gguf")], "vkq generate: error: --draft: no GGUF file at "),
                        (["--draft", q4, "--speculative", "lookup"], "give one of them"),
                        (["--draft-max", "3"], "it needs --draft or --speculative"),
                        (["--draft-p-min", "0.5"], "it needs --draft"),
                        (["--draft", q4, "--compare-engines", "2"], "drop --draft"),
                        (["--draft", q4, "--path", "numpy"], "vkq's engines, not engine numpy")):
        assert main(args + extra) == 2
        out = capsys.readouterr()
        assert said in out.err and len(out.err.strip().splitlines()) == 1 and out.out == "", extra
    # --draft-max 16, the documented default, typed: taken, cut to what a step verifies, saying so
    assert main(args + ["--draft", q4, "--draft-max", "16", "--draft-p-min", "0"]) == 0
    cut = capsys.readouterr()
    assert cut.out == plain.out
    assert "vkq generate: --draft-max 16: a step here verifies up to 7 drafted tokens" in cut.err


def test_draft_model_drafts_on_its_decode_step(backend, dense_pair):
    """After the prompt the draft feeds through its one-token decode step
    (feed_one; feed_rows for the tokens a verified step adds: the same bits),
    never a prompt's chunk: each draft is what the draft's decode steps choose
    after the text, bit for bit, whatever kernels its prompt took. Python
    users find it as vkq.DraftModel (speculative="lookup"'s counterpart)."""
    import vkq

    assert vkq.DraftModel is DraftModel and "DraftModel" in dir(vkq)
    target_file, q4_file = dense_pair
    d = GpuLlama(target_file, backend, "auto", ctx=64)
    draft = GpuLlama(q4_file, backend, "auto", ctx=64)
    fed = []
    feed = draft.feed
    draft.feed = lambda tokens, want_logits=True: (fed.append(draft.n_past), feed(tokens, want_logits))[1]
    q4 = Recorded(d, draft, p_min=0)
    ids = d.tokenizer.encode(TEXT)
    spec = d.greedy(ids, N, stop_at_eos=False, speculative=q4, draft_max=4)
    assert spec.tokens == d.greedy(ids, N, stop_at_eos=False).tokens
    assert fed == [0] and spec.stats.decode_steps > 2, fed  # the prompt alone went through feed
    assert spec.stats.draft_seconds > 0 and "drafting " in spec.stats.summary()
    first = q4.seen[0][0]
    for text, drafts in q4.seen[1:4]:
        draft.reset()
        feed(first, False)
        for t in text[len(first):]:
            choice, _ = draft.feed_one(t)
        want = []
        while len(want) < len(drafts):
            want.append(choice)
            choice, _ = draft.feed_one(choice)
        assert want == drafts
