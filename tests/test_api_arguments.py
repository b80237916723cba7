"""A Python caller's wrong arguments to a decoder and its tokenizer: a
TypeError or ValueError naming the argument, never a truncated value run as
if right (a float token id, context or count), never an error from deep
inside (AttributeError, OverflowError, a comparison of str and int). A bool
is no integer here either; numpy's integers are."""
from __future__ import annotations

import numpy as np
import pytest

import vkq


@pytest.fixture(scope="module")
def model(backend, tiny):
    return vkq.load_model(tiny, engine="host", backend=backend, ctx=24)


@pytest.fixture(scope="module")
def ids(model):
    return model.tokenizer.encode("the other three")


@pytest.mark.parametrize("call, exc, match", [
    (lambda m, ids: m.greedy([7.0, 120], 2), TypeError, r"prompt_ids\[0\] is 7\.0 \(float\); expected a token id"),
    (lambda m, ids: m.greedy([40, 2.6], 2), TypeError, r"prompt_ids\[1\] is 2\.6 \(float\)"),
    (lambda m, ids: m.greedy([True, 40], 2), TypeError, r"prompt_ids\[0\] is True \(bool\)"),
    (lambda m, ids: m.greedy(np.array([4.0, 9.0]), 2), TypeError, r"prompt_ids\[0\] is 4\.0 \(float64\)"),
    (lambda m, ids: m.greedy("the", 2), TypeError, r"prompt_ids is a str; expected a sequence of token ids"),
    (lambda m, ids: m.greedy(None, 2), TypeError, r"prompt_ids is None; expected a sequence of token ids"),
    (lambda m, ids: m.greedy(ids, "3"), TypeError, r"n_tokens is '3' \(str\); expected an integer"),
    (lambda m, ids: m.greedy(ids, 3.0), TypeError, r"n_tokens is 3\.0 \(float\)"),
    (lambda m, ids: m.greedy(ids, False), TypeError, r"n_tokens is False \(bool\)"),
    (lambda m, ids: m.greedy(ids, -2), ValueError, r"n_tokens is -2; expected 0 or more"),
    (lambda m, ids: m.greedy(ids, 3, draft_max=2), ValueError, r"draft_max 2 is for speculative decoding"),
    (lambda m, ids: m.greedy([300], 2), ValueError, r"prompt_ids: token ids out of range \[0, 260\): \[300\]"),
    (lambda m, ids: m.generate(None, 3), TypeError, r"prompt is None; expected a str"),
    (lambda m, ids: m.generate(b"the", 3), TypeError, r"prompt is b'the' \(bytes\); expected a str"),
    (lambda m, ids: m.generate("the", 2.5), TypeError, r"n_tokens is 2\.5 \(float\)"),
    (lambda m, ids: m.generate("the", 3, draft_max=5), ValueError, r"draft_max 5 is for speculative decoding"),
    (lambda m, ids: m.score(ids, [5, 1.5]), TypeError, r"next_ids\[1\] is 1\.5 \(float\)"),
    (lambda m, ids: m.score([0.5], [5]), TypeError, r"prompt_ids\[0\] is 0\.5 \(float\)"),
    (lambda m, ids: m.logits([11, 3.9]), TypeError, r"tokens\[1\] is 3\.9 \(float\)"),
    (lambda m, ids: m.step(8.2), TypeError, r"token is 8\.2 \(float\)"),
    (lambda m, ids: m.tokenizer.encode(None), TypeError, r"text is None; expected a str"),
])
def test_refused_naming_the_argument(model, ids, call, exc, match):
    with pytest.raises(exc, match=match):
        call(model, ids)


def test_numpy_integers_are_token_ids_and_counts(model, ids):
    want = model.greedy(ids, 3, stop_at_eos=False).tokens
    assert model.greedy(np.array(ids, np.int32), np.int64(3), stop_at_eos=False).tokens == want
    assert model.greedy(ids, 3, stop_at_eos=False, speculative="lookup", draft_max=np.int16(2)).tokens == want


@pytest.mark.parametrize("ctx, exc, match", [(20.0, TypeError, r"ctx is 20\.0 \(float\); expected an integer"),
                                             (1.5, TypeError, r"ctx is 1\.5 \(float\)"),
                                             (True, TypeError, r"ctx is True \(bool\)"),
                                             ("32", TypeError, r"ctx is '32' \(str\)"),
                                             (0, ValueError, r"a context of 0 positions: the model takes 1 to 256")])
@pytest.mark.parametrize("engine", ["graph", "host"])
def test_ctx_is_an_integer(backend, tiny, engine, ctx, exc, match):
    with pytest.raises(exc, match=match):
        vkq.load_model(tiny, engine=engine, backend=backend, ctx=ctx)


def test_draft_max_is_an_integer(model, ids):
    with pytest.raises(TypeError, match=r"draft_max is 2\.0 \(float\); expected an integer"):
        model.greedy(ids, 3, speculative="lookup", draft_max=2.0)


@pytest.fixture(scope="module", params=["bpe", "spm"])
def tokenizer(request, tiny, tmp_path_factory):
    if request.param == "bpe":
        return vkq.load_model(tiny, path="numpy").tokenizer
    import spm_vocab
    from tiny_llama import write_gguf

    path = write_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf",
                      tokenizer=spm_vocab.gguf_tokenizer(spm_vocab.train()))
    return vkq.load_model(path, path="numpy").tokenizer


@pytest.mark.parametrize("ids, exc, match", [([-1], ValueError, r"token id -1 is not in the vocabulary \[0, {n}\)"),
                                             ([5, "N"], ValueError, r"token id {n} is not in the vocabulary \[0, {n}\)"),
                                             ([2**70], ValueError, r"token id 1180591620717411303424 is not in"),
                                             ([6.0], TypeError, r"ids\[0\] is 6\.0 \(float\); expected a token id"),
                                             ([4, False], TypeError, r"ids\[1\] is False \(bool\)"),
                                             (None, TypeError, r"ids is None; expected a sequence of token ids")])
def test_decode_refuses_what_is_no_token_id(tokenizer, ids, exc, match):
    n = tokenizer.n_vocab
    ids = None if ids is None else [n if i == "N" else i for i in ids]
    with pytest.raises(exc, match=match.replace("{n}", str(n))):
        tokenizer.decode(ids)
    assert tokenizer.decode(np.array([5, 6], np.int64)) == tokenizer.decode([5, 6])
