"""One decoder shared by threads: each call (generate, greedy, score,
logits) holds the decoder's lock for its whole length, so calls from
several threads give exactly what each gives alone, on both engines.

A decoder holds one KV cache (and the graph engine one recorded step whose
tensors a replay owns until it is waited for): two generations interleaved
on it would read each other's positions. vkq.Backend's own lock orders the
device calls but not a generation's many steps.
"""
from __future__ import annotations

import threading
import time

import pytest

import vkq
from vkq.llama.draft import DraftModel

PROMPTS = ("the theory that", "then the other", "that the three thieves", "other thing", "the world then the")
N = 9


def run_threads(jobs) -> list:
    """Each job in a thread of its own, started together; their results (or the exception each raised)."""
    out = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def work(i):
        start.wait()
        try:
            out[i] = jobs[i]()
        except Exception as e:  # noqa: BLE001 - the test reports what a thread met
            out[i] = e
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


@pytest.mark.parametrize("engine", ["graph", "host"])
def test_threads_get_the_single_threaded_results(backend, tiny, engine):
    model = vkq.load_model(tiny, engine=engine, backend=backend, ctx=32)
    alone = [model.generate(p, N, stop_at_eos=False)[:2] for p in PROMPTS]
    ids = model.tokenizer.encode(PROMPTS[0])
    scored = model.score(ids, alone[0][1])
    jobs = [lambda p=p: model.generate(p, N, stop_at_eos=False)[:2] for p in PROMPTS]
    jobs += [lambda: model.score(ids, alone[0][1]),
             lambda: model.greedy(ids, N, stop_at_eos=False, speculative="lookup").tokens]
    for _ in range(2):
        got = run_threads(jobs)
        assert got[:len(PROMPTS)] == alone
        assert got[-2].tobytes() == scored.tobytes()
        assert got[-1] == alone[0][1]


def test_a_draft_models_decoder_is_held_too(backend, tiny):
    """greedy with a draft model holds the draft's decoder as well: another
    thread's generation on that decoder waits, and both get their own text."""
    target = vkq.load_model(tiny, backend=backend, ctx=32)
    draft = vkq.load_model(tiny, backend=backend, ctx=32)
    ids = target.tokenizer.encode(PROMPTS[1])
    plain = target.greedy(ids, N, stop_at_eos=False).tokens
    own = draft.generate(PROMPTS[2], N, stop_at_eos=False)[1]
    got = run_threads([lambda: target.greedy(ids, N, stop_at_eos=False,
                                             speculative=DraftModel(target, draft, p_min=0)).tokens,
                       lambda: draft.generate(PROMPTS[2], N, stop_at_eos=False)[1]])
    assert got == [plain, own]


def test_a_draft_model_made_mid_generation_waits(backend, tiny):
    """DraftModel(target, draft) empties the draft decoder's cache: made
    while another thread generates on that decoder, it waits for the end."""
    target = vkq.load_model(tiny, engine="host", backend=backend, ctx=32)
    draft = vkq.load_model(tiny, engine="host", backend=backend, ctx=32)
    own = draft.generate(PROMPTS[4], N, stop_at_eos=False)[1]
    midway, got = threading.Event(), []

    def pause(token):
        if len(got) == 0 and not midway.is_set():
            midway.set()
            time.sleep(0.3)  # (the other thread makes its DraftModel meanwhile, or waits to)

    other = threading.Thread(target=lambda: got.append(draft.greedy(
        draft.tokenizer.encode(PROMPTS[4]), N, stop_at_eos=False, on_token=pause).tokens))
    other.start()
    assert midway.wait(60)
    DraftModel(target, draft)
    other.join(60)
    assert got == [own]


def test_the_lock_is_reentrant_and_public(backend, tiny):
    """`model.lock` serialises a user's own sequence of low-level calls (reset,
    feed, step) against other threads' calls, which wait; the calls inside
    take it again."""
    model = vkq.load_model(tiny, engine="host", backend=backend, ctx=32)
    ids = model.tokenizer.encode(PROMPTS[0])
    want = model.score(ids, [ids[0], ids[1]])[1]
    alone = model.generate(PROMPTS[3], N, stop_at_eos=False)[1]
    got = []
    other = threading.Thread(target=lambda: got.append(model.generate(PROMPTS[3], N, stop_at_eos=False)[1]))
    with model.lock:
        other.start()
        model.reset()
        model.feed(ids, False)
        other.join(0.5)
        assert other.is_alive() and not got  # waiting for the lock
        step = model.step(ids[0])
    other.join(60)
    assert step.tobytes() == want.tobytes() and got == [alone]
