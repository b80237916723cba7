"""The token loop: greedy decoding (plain, or speculative: drafted tokens
verified in one step, the same tokens) or sampling (vkq.llama.sampling: the
engine's choice is its sampler's), why a generation stopped,
teacher-forced scoring and their timings, on any engine that can feed
tokens into its KV cache (`Decoder.feed`, `Decoder.feed_rows`)."""
from __future__ import annotations

import contextlib
import functools
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..checks import described, integer_argument
from ..dispatch.tiles import PROMPT_KERNELS
from ..dispatch.tiles import prompt_kernels as default_prompt_kernels
from ..errors import NonFiniteLogits
from .config import PROMPT_CHUNK, PROMPT_CHUNK_MATVEC
from .lookup import DRAFT_MAX, SPECULATIVE, Drafter, PromptLookup
from .model import LlamaFile
from .sampling import TOP_K_MAX, Sampling, sample, verify_draft, window

# Why a generation stopped (GenerationStats.stop): the token limit, a token
# that ends a generation, the context's end, a stop string.
STOPS = ("limit", "eog", "context", "stop")


@dataclass
class GenerationStats:
    """Where the time of a generation went: prompt (prefill) and decode steps.
    Device time is what the engine reports (`Decoder.counters`): the time of the
    mat-vec calls as the host sees them (host engines), or the kernels' time
    by GPU timestamps (the graph engine); the rest is everything else."""

    engine: str  # a label: engine, path, activations
    device_label: str | None  # what device time measures: "mat-vec", "kernels"; None: not measured
    n_prompt: int = 0  # prompt tokens fed (those the KV cache held already not counted: n_cached)
    n_cached: int = 0  # the prompt's first tokens found in the KV cache (reuse_cache), not fed again
    n_generated: int = 0
    prompt_seconds: float = 0.0
    prompt_device_seconds: float = 0.0
    decode_steps: int = 0  # forward passes after the prompt (the first token comes from the prompt's logits)
    decode_tokens: int = 0  # the tokens they chose: one per step, more where drafts were accepted
    decode_seconds: float = 0.0
    decode_device_seconds: float = 0.0
    decode_submits: int = 0
    # compute dispatches and barriers per decode step (where the engine knows; chained steps: their
    # submit's over its steps, the barriers between them a fraction per step)
    dispatches: float | None = None
    barriers: float | None = None
    speculative: str | None = None  # the drafter (greedy's speculative=), None for plain greedy
    drafted: int = 0  # drafted tokens verified
    accepted: int = 0  # of those, the ones greedy chose (and the text kept)
    draft_seconds: float = 0.0  # of decode_seconds, the drafter's (drafter.draft)
    steps_per_submit: int = 1  # the most decode steps one submit took (greedy's steps_per_submit)
    sampling: str = "greedy"  # how tokens were chosen: "greedy", or Sampling.describe() and where it sampled
    stop: str | None = None  # why the generation stopped: one of STOPS (None: not recorded)
    stop_detail: str = ""  # the token limit, the end token's text, the context's positions, the stop string
    # one-time: recording the steps this generation used first (graphs, pipelines; Decoder.recording_seconds),
    # not counted in prompt_seconds or decode_seconds (warm_up() records them ahead: then 0)
    record_seconds: float = 0.0

    @property
    def stop_reason(self) -> str:
        """Why the generation stopped, in words."""
        return {None: "no recorded stop", "limit": f"the token limit ({self.stop_detail})",
                "eog": f"an end-of-generation token ({self.stop_detail})",
                "context": f"the context's end ({self.stop_detail})",
                "stop": f"a stop string ({self.stop_detail!r})"}[self.stop]

    # A rate over nothing (no decode step: one new token or none; no draft) is None, not 0.0.
    @property
    def tokens_per_second(self) -> float | None:
        return self.decode_tokens / self.decode_seconds if self.decode_tokens and self.decode_seconds else None

    @property
    def prompt_tokens_per_second(self) -> float | None:
        return self.n_prompt / self.prompt_seconds if self.prompt_seconds else None

    @property
    def ms_per_token(self) -> float | None:
        return 1e3 * self.decode_seconds / self.decode_tokens if self.decode_tokens else None

    @property
    def device_ms_per_token(self) -> float | None:
        return 1e3 * self.decode_device_seconds / self.decode_tokens if self.decode_tokens else None

    @property
    def submits_per_token(self) -> float | None:
        return self.decode_submits / self.decode_tokens if self.decode_tokens else None

    @property
    def tokens_per_step(self) -> float | None:
        return self.decode_tokens / self.decode_steps if self.decode_steps else None

    @property
    def acceptance(self) -> float | None:
        """The share of drafted tokens accepted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def draft_ms_per_step(self) -> float | None:
        """The drafter's time per decode step (a draft model's own steps; prompt lookup's look-ups)."""
        return 1e3 * self.draft_seconds / self.decode_steps if self.decode_steps else None

    @property
    def device_share(self) -> float | None:
        """The share of a decode step's wall time that device time covers."""
        return self.decode_device_seconds / self.decode_seconds if self.decode_tokens and self.decode_seconds else None

    def summary(self) -> str:
        dev_s = f"; {self.device_label} {self.prompt_device_seconds:.2f} s" if self.device_label else ""
        pp = self.prompt_tokens_per_second
        cached = f" after {counted(self.n_cached, 'token')} kept in the cache" if self.n_cached else ""
        lines = [f"prompt: {counted(self.n_prompt, 'token')}{cached} in {self.prompt_seconds:.2f} s "
                 f"({'-' if pp is None else f'{pp:.1f}'} t/s{dev_s})"]
        if self.record_seconds:
            lines[0] += f"; first use: steps recorded in {self.record_seconds:.2f} s (one-time, not counted)"
        if self.decode_steps:
            ms, dev = self.ms_per_token, self.device_ms_per_token
            split = (f" = {self.device_label} {dev:.1f} ms [{100 * self.device_share:.0f}%] + rest {ms - dev:.1f} ms"
                     if self.device_label else "")
            lines.append(
                f"decode: {counted(self.n_generated, 'token')}, {counted(self.decode_steps, 'step')} in "
                f"{self.decode_seconds:.2f} s: "
                f"{self.tokens_per_second:.2f} t/s ({ms:.1f} ms/token{split}; "
                f"{submits_per_token(self.submits_per_token)}{self._chain_note()}{self._dispatch_note()}); "
                f"{self.engine}")
            if self.speculative:
                share = "" if self.acceptance is None else f" ({100 * self.acceptance:.0f}%)"
                lines.append(f"speculative ({self.speculative}): drafted {self.drafted}, accepted {self.accepted}"
                             f"{share}; {self.tokens_per_step:.2f} tokens/step; drafting "
                             f"{self.draft_ms_per_step:.3g} ms/step")
        else:
            lines.append(f"decode: {counted(self.n_generated, 'token')}, no decode step; {self.engine}")
        lines.append(f"stopped at {self.stop_reason}; {self.sampling}")
        return "\n".join(lines)


    def _dispatch_note(self) -> str:
        def per_token(n: float) -> str:  # (chained steps share the barriers between them: a fraction per step)
            return f"{n:.0f}" if n == int(n) else f"{n:.1f}"

        return "" if self.dispatches is None else \
            f", {per_token(self.dispatches)} dispatches and {per_token(self.barriers)} barriers/token"

    def _chain_note(self) -> str:
        return "" if self.steps_per_submit == 1 else f", up to {self.steps_per_submit} steps/submit"


def submit_sizes(k: int, n_steps: int) -> list[int]:
    """The decode steps of each submit where greedy chains up to k per
    submit (steps_per_submit) for n_steps steps: k each, the rest in one."""
    n_steps = max(n_steps, 0)
    return [k] * (n_steps // k) + ([n_steps % k] if n_steps % k else [])


def counted(n: int, noun: str) -> str:
    """'1 token', '48 tokens'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def submits_per_token(n: float) -> str:
    """'1 submit/token', '121 submits/token'."""
    return f"{n:.3g} submit{'' if n == 1 else 's'}/token"


def check_prompt_kernels(prompt_kernels: str | None) -> None:
    """None (the device class's) or one of PROMPT_KERNELS: checked before a
    model is read."""
    if prompt_kernels is not None and prompt_kernels not in PROMPT_KERNELS:
        raise ValueError(f"prompt_kernels {prompt_kernels!r}: one of {', '.join(PROMPT_KERNELS)}")


def check_choice(token: int, logits: np.ndarray, n_fed: int, sampled: bool = False) -> None:
    """Greedy's choice is not finite exactly when the logits hold a NaN (the
    argmax picks the first) or +inf; a -inf, a token ruled out, is no
    trouble. Then no token is right: an error, not NaN's index. A sampled
    choice: the same where the largest logit is not finite (NaN wins numpy's max)."""
    if sampled and not np.isfinite(logits.max()):
        token = int(np.argmax(logits))
    if not np.isfinite(logits[token]):
        raise NonFiniteLogits(f"the logits are not finite after token {n_fed} ({logits[token]} at {token}): "
                              "the model's weights decode to NaN or inf, or its activations overflow")


_MAKING_LOCKS = threading.Lock()  # (a decoder's lock is made on first use, by one thread)


def serialised(method):
    """A Decoder call that holds the decoder's lock (Decoder.lock) from start
    to end, and the lock of a draft model's decoder given as speculative=:
    one KV cache cannot serve two generations at once, so a second thread's
    call waits for the first's to end. The locks are taken in one order
    (by id), so two threads that hold each other's decoder as a draft
    cannot deadlock."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        draft = getattr(kwargs.get("speculative"), "decoder", None)
        decoders = sorted({id(d): d for d in (self, draft) if isinstance(d, Decoder)}.items())
        with contextlib.ExitStack() as held:
            for _, d in decoders:
                held.enter_context(d.lock)
            return method(self, *args, **kwargs)
    return call


def check_sampling(sampling: Sampling | None) -> Sampling | None:
    """The sampler a generation draws with (its seed drawn where none was
    given), or None where it chooses greedy's argmax (temp 0, no penalty)."""
    if sampling is None:
        return None
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a vkq.llama.sampling.Sampling or None, got {type(sampling).__name__}")
    return None if sampling.greedy else sampling.resolved()


def check_stops(stop) -> tuple[str, ...]:
    """Stop strings: a sequence of non-empty strings (a lone string is one)."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    bad = [x for x in stops if not isinstance(x, str) or not x]
    if bad:
        raise ValueError(f"stop strings must be non-empty text, got {bad[0]!r}")
    return stops


def first_stop(text: str, stops: Sequence[str]) -> str | None:
    """The stop string that occurs first in text (None: none does)."""
    found = [(i, st) for st in stops if (i := text.find(st)) >= 0]
    return min(found)[1] if found else None


class TextStream:
    """The text of generated tokens as it grows, handed to on_text piece by
    piece: whole UTF-8 characters only, and with stop strings, nothing that
    may turn out to begin one (held back until it does not) nor the stop
    string and what follows it."""

    def __init__(self, tokenizer, on_text: Callable[[str], None], stops: Sequence[str] = ()):
        self.tokenizer, self.on_text, self.stops = tokenizer, on_text, tuple(stops)
        self.ids: list[int] = []
        self.shown = ""

    def _show(self, text: str) -> None:
        if len(text) > len(self.shown) and text.startswith(self.shown):
            self.on_text(text[len(self.shown):])
            self.shown = text

    def add(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, continuation=True)
        if text.endswith("\ufffd"):
            return
        hit = first_stop(text, self.stops)
        if hit is not None:
            text = text[:text.find(hit)]
        else:
            held = max((n for st in self.stops for n in range(len(st) - 1, 0, -1) if text.endswith(st[:n])),
                       default=0)
            text = text[:len(text) - held]
        self._show(text)

    def finish(self, text: str) -> None:
        """The generation's final text: what was held back and is no stop string."""
        self._show(text)


@dataclass
class Generation:
    tokens: list[int]  # generated ids (prompt excluded)
    stats: GenerationStats
    logits: list[np.ndarray] | None = field(default=None, repr=False)  # logits[i] chose tokens[i]


class Decoder(ABC):
    """A llama model on one engine, with its KV cache. Subclasses implement
    reset() and feed(); the token loop is here."""

    file: LlamaFile
    ctx: int  # positions the KV cache may hold: the context this decoder was given
    n_past: int  # positions the KV cache holds now
    cache_tokens: list[int]  # the tokens it holds (the engines keep it with n_past)
    device_label = "mat-vec"

    @property
    def lock(self) -> threading.RLock:
        """Held by greedy, generate, chat, score and logits for their whole
        call, so that threads sharing this decoder take turns. The low-level
        calls (reset, feed, feed_one, feed_rows, step, rewind) keep the KV
        cache between calls: a sequence of them from one thread goes inside
        `with decoder.lock:` where other threads use the decoder too."""
        lock = self.__dict__.get("_lock")
        if lock is None:
            with _MAKING_LOCKS:
                lock = self.__dict__.setdefault("_lock", threading.RLock())
        return lock
    # The sampler of the generation under way (set_sampling), None: greedy's argmax. An engine's
    # feeds choose with it: on the device where it can, else sample() on the host.
    sampling: Sampling | None = None

    def set_sampling(self, sampling: Sampling | None) -> None:
        """The sampler the next feeds choose with (a resolved Sampling, or None: argmax)."""
        self.sampling = sampling

    def sampler_place(self, sampling: Sampling) -> str:
        """Where this engine samples with these settings: "device" or "host"."""
        return "host"

    def _choice(self, logits: np.ndarray) -> int:
        """The host's choice from the logits computed after the last token fed
        (position n_past - 1): their argmax, or the sampler's draw."""
        s = self.sampling
        if s is None:
            return int(np.argmax(logits))
        p = self.n_past - 1
        return sample(logits, window(self.cache_tokens, p, s), p, s)

    def _set_context(self, ctx: int | None) -> None:
        n_train = self.file.config.n_ctx_train
        ctx = n_train if ctx is None else integer_argument("ctx", ctx)
        if not 1 <= ctx <= n_train:
            raise ValueError(f"a context of {ctx} positions: the model takes 1 to {n_train}")
        self.ctx = ctx

    def _set_prompt(self, prompt_kernels: str | None, prompt_chunk: int | None, device_class) -> None:
        """A prompt's kernels (prompt_kernels: asked for, else the device
        class's, vkq.dispatch.tiles.prompt_kernels; `prompt_kernels_source`
        says which) and its tokens per chunk (prompt_chunk, -ub: default and
        most PROMPT_CHUNK through the mat-mats, PROMPT_CHUNK_MATVEC through
        the mat-vecs)."""
        check_prompt_kernels(prompt_kernels)
        self.prompt_kernels, self.prompt_kernels_source = (
            (prompt_kernels, "from argument") if prompt_kernels is not None
            else default_prompt_kernels(device_class))
        most = PROMPT_CHUNK if self.prompt_kernels == "matmul" else PROMPT_CHUNK_MATVEC
        if prompt_chunk is None:
            prompt_chunk = most
        if isinstance(prompt_chunk, bool) or not isinstance(prompt_chunk, int) or not 1 <= prompt_chunk <= most:
            raise ValueError(f"prompt_chunk (-ub) {prompt_chunk!r}: 1 to {most} tokens per chunk with prompt_kernels "
                             f"{self.prompt_kernels!r}")
        self.prompt_chunk = prompt_chunk

    def __repr__(self) -> str:
        cfg = self.config
        return (f"<vkq {type(self).__name__} {self.path.name}: {cfg.arch}, {cfg.n_layer} layers, "
                f"context {self.ctx}; {self.label}>")

    @property
    def tiled_prompt(self) -> bool:
        """A prompt's chunks take the mat-mat kernels (prompt_kernels "matmul")."""
        return self.prompt_kernels == "matmul"

    @property
    def config(self):
        return self.file.config

    @property
    def tokenizer(self):
        return self.file.tokenizer

    @property
    def n_vocab(self) -> int:
        return self.file.n_vocab

    @property
    def path(self):
        return self.file.path

    @property
    @abstractmethod
    def label(self) -> str:
        """The engine, path and activations, for the statistics."""

    @abstractmethod
    def reset(self) -> None:
        """Empty the KV cache."""

    @abstractmethod
    def feed(self, tokens: list[int], want_logits: bool) -> tuple[int, np.ndarray | None]:
        """The tokens join the KV cache. Returns the argmax of the last
        position's logits, and those logits (float32 (n_vocab,)) if asked."""

    def feed_one(self, token: int) -> tuple[int, np.ndarray]:
        """A decode step: the token joins the KV cache through the engine's
        one-token step (a prompt's chunks may take other kernels: the graph
        engine's mat-mat). Returns feed's (argmax, logits)."""
        return self.feed([token], True)

    max_steps_per_submit = 1  # greedy decode steps one submit takes (feed_steps); the graph engine chains more

    def feed_steps(self, token: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        """m greedy decode steps: `token` joins the KV cache, then each
        step's choice (its argmax) the one after, m in all. Returns the
        choices (m,) and their logits (m, n_vocab): the bits of m feed_one
        calls. Up to max_steps_per_submit in one submit."""
        self.check_steps_per_submit(m)
        choice, logits = self.feed_one(token)
        return np.array([choice], np.int64), logits[None]

    def check_steps_per_submit(self, k: int) -> None:
        """Refuses steps_per_submit values this decoder cannot take, in one line."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"steps_per_submit {k!r}: decode steps per submit, 1 or more")
        most = self.max_steps_per_submit
        if k > most and most == 1:
            raise ValueError(f"steps_per_submit {k}: {self.label} runs one decode step per token; several steps "
                             f"per submit need the graph engine")
        if k > most:
            raise ValueError(f"steps_per_submit {k}: 1 to {most} decode steps per submit")

    @property
    @abstractmethod
    def max_row_tokens(self) -> int:
        """The most tokens feed_rows takes in one step."""

    @abstractmethod
    def feed_rows(self, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The tokens (1 to max_row_tokens) join the KV cache in one step.
        Returns every token's next-token argmax (n,) and logits (n, n_vocab);
        row i has the bits feed() gives after tokens[i] (the engine's
        n-column step computes each column as the one-column step does)."""

    @property
    def rows_exact(self) -> bool:
        """Whether feed_rows's rows are those bits, which speculative decoding's
        guarantee rests on (vkq's engines: yes, tested; the numpy reference's
        BLAS promises no such thing)."""
        return True

    def rewind(self, n_past: int) -> None:
        """Keep the first n_past positions of the KV cache: the next feed
        writes at n_past (positions past n_past are never read)."""
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"rewind to {n_past} positions: the cache holds {self.n_past}")
        self.n_past = n_past
        del self.cache_tokens[n_past:]

    def _check_rows(self, tokens) -> list[int]:
        tokens = self.file.check_ids(tokens)
        if not 1 <= len(tokens) <= self.max_row_tokens:
            raise ValueError(f"feed_rows takes 1 to {self.max_row_tokens} tokens, got {len(tokens)}")
        self.check_room(self.n_past, len(tokens))
        return tokens

    def counters(self) -> tuple[float, int]:
        """(device seconds, submits) so far: see GenerationStats."""
        return 0.0, 0

    def recording_seconds(self) -> float:
        """The seconds spent so far recording steps on their first use (a
        one-time cost: GenerationStats.record_seconds); 0 where the engine
        records nothing ahead of its replays."""
        return 0.0

    def step_counts(self, steps: int = 1) -> tuple[float, float] | None:
        """(compute dispatches, barriers) of one decode step, where the engine
        records them; steps: of a submit of that many chained steps, per step."""
        return None

    def check_room(self, n_past: int, n_new: int) -> None:
        if n_past + n_new > self.ctx:
            raise ValueError(f"{n_past + n_new} positions (prompt and new tokens) exceed the context of "
                             f"{self.ctx} this model was given (load it with a larger ctx=, up to "
                             f"{self.file.config.n_ctx_train})")

    # -- the token loop ----------------------------------------------------------
    def step(self, token: int) -> np.ndarray:
        """One decode step: feed one token, get the logits of the next."""
        return self.feed_one(integer_argument("token", token))[1]

    @serialised
    def logits(self, tokens) -> np.ndarray:
        """The next-token logits after `tokens`, from an empty cache."""
        tokens = self.file.check_ids(tokens)
        self.reset()
        return self.feed(tokens, True)[1]

    @serialised
    def score(self, prompt_ids, next_ids) -> np.ndarray:
        """Teacher-forced: (len(next_ids), n_vocab) logits; row i is what the model
        predicts after prompt + next_ids[:i] (greedy's logits[i] for those ids)."""
        prompt_ids = self.file.check_ids(prompt_ids, "prompt_ids")
        next_ids = self.file.check_ids(next_ids, "next_ids")
        if not next_ids:  # no rows: nothing to feed, not even the prompt
            return np.zeros((0, self.n_vocab), np.float32)
        out = [self.logits(prompt_ids)]
        for t in next_ids[:-1]:
            out.append(self.step(t))
        return np.stack(out)

    @serialised
    def greedy(self, prompt_ids, n_tokens: int, *, stop_at_eos: bool = True, keep_logits: bool = False,
               on_token: Callable[[int], None] | None = None, speculative: str | Drafter | None = None,
               draft_max: int | None = None, steps_per_submit: int = 1, sampling: Sampling | None = None,
               stop: Sequence[str] = (), reuse_cache: bool = False) -> Generation:
        """Greedy decoding of n_tokens after prompt_ids (from an empty cache),
        ended early by a token that ends a generation (the tokenizer's
        eog_ids: EOS, end of turn, ...) unless stop_at_eos is false.
        n_tokens -1: as many as the context holds.
        speculative="lookup": each step also verifies up to draft_max tokens
        drafted by prompt lookup (vkq.llama.lookup) and keeps those greedy
        agrees with: the same tokens as without, in fewer steps where the
        text repeats its context (GenerationStats: drafted, accepted). Or
        another drafter (vkq.llama.lookup.Drafter), such as a draft model
        (vkq.llama.draft.DraftModel): asked for up to draft_max tokens a
        step, verified the same way. draft_max: default
        vkq.llama.lookup.DRAFT_MAX, cut to what one step takes.
        steps_per_submit: plain greedy's decode steps chained in one submit,
        up to that many (the graph engine: up to STEPS_PER_SUBMIT_MAX; 1 on
        the host engine), each step's argmax the next step's token on the
        device: the same tokens and logits, fewer waits for the device; a
        submit takes no more steps than tokens are left to choose, and the
        steps after one that ends the generation are dropped (the KV cache
        then holds what one step per submit leaves). Not with speculative.
        sampling: a vkq.llama.sampling.Sampling instead of the argmax (None,
        or temp 0 without a repeat penalty: greedy), drawn on the device by
        the graph engine (its top_k 1 to TOP_K_MAX; steps_per_submit too),
        else on the host; a seed and a position give the same token on every
        engine and prompt chunking. With speculative, each draft is kept by
        speculative sampling's rule (vkq.llama.sampling.verify_draft: the
        same distribution of text, not the same text as without drafts).
        stop: strings that end the generation
        once the generated text holds one. reuse_cache: the first tokens of
        prompt_ids that the KV cache holds already (a conversation's earlier
        turns) are kept, not fed again. GenerationStats.stop says why the
        generation stopped."""
        prompt_ids = self.file.check_ids(prompt_ids, "prompt_ids")
        n_tokens = integer_argument("n_tokens", n_tokens)
        if n_tokens < -1:
            raise ValueError(f"n_tokens is {n_tokens}; expected 0 or more (or -1: to the context's end)")
        if draft_max is not None and speculative is None:
            raise ValueError(f"draft_max {draft_max!r} is for speculative decoding: give speculative= too "
                             f"(or leave draft_max out)")
        if not prompt_ids:
            raise ValueError("no tokens to feed (empty prompt?)")
        self.check_steps_per_submit(steps_per_submit)
        if speculative is not None and steps_per_submit != 1:
            raise ValueError("steps_per_submit chains plain greedy's steps; speculative decoding verifies drafts in "
                             "steps of several tokens: give one of them")
        s = check_sampling(sampling)
        if s is not None and steps_per_submit > 1 and self.sampler_place(s) != "device":
            raise ValueError(f"steps_per_submit chains the device's sampler, which takes top_k 1 to {TOP_K_MAX}; "
                             f"top_k {s.top_k} samples on the host, one step per submit")
        stops = check_stops(stop)
        if speculative is not None:
            draft_max = self.draft_limit(draft_max)
        drafter = None if speculative is None else self.drafter(speculative, draft_max)
        limit = "limit"
        if n_tokens == -1:
            n_tokens, limit = max(self.ctx - len(prompt_ids) + 1, 0), "context"
            if n_tokens == 0:
                raise ValueError(f"the prompt ({len(prompt_ids)} tokens) fills the context of {self.ctx} positions")
        self.check_room(0, len(prompt_ids) + max(n_tokens - 1, 0))
        keep = 0
        if reuse_cache:
            held = self.cache_tokens[:min(self.n_past, len(prompt_ids) - 1)]  # (one token at least is fed)
            while keep < len(held) and held[keep] == prompt_ids[keep]:
                keep += 1
        stats = GenerationStats(self.label, self.device_label, n_prompt=len(prompt_ids) - keep, n_cached=keep,
                                speculative=None if drafter is None else drafter.name,
                                steps_per_submit=steps_per_submit,
                                sampling="greedy" if s is None else f"{s.describe()} (sampled on the "
                                                                     f"{self.sampler_place(s)})")
        chain = min(steps_per_submit, max(n_tokens - 1, 1))  # (the longest chain this generation takes)
        stats.dispatches, stats.barriers = self.step_counts(chain) or (None, None)
        out, kept = [], [] if keep_logits else None
        ends = self.tokenizer.eog_ids if stop_at_eos else frozenset()  # EOS, end of turn, ...

        def emit(token: int, logits: np.ndarray) -> bool:
            """A chosen token joins the output; True where the generation ends at it (stats.stop says why)."""
            out.append(token)
            if kept is not None:
                kept.append(logits)
            if on_token is not None:
                on_token(token)
            hit = first_stop(self.tokenizer.decode(out, continuation=True), stops) if stops else None
            if token in ends:
                stats.stop, stats.stop_detail = "eog", self.tokenizer.decode([token], skip_special=False)
            elif hit is not None:
                stats.stop, stats.stop_detail = "stop", hit
            elif len(out) >= n_tokens:
                stats.stop, stats.stop_detail = limit, (counted(n_tokens, "token") if limit == "limit"
                                                        else counted(self.ctx, "position"))
            else:
                return False
            return True

        self.set_sampling(s)
        try:
            if keep:
                self.rewind(keep)
            else:
                self.reset()
            t0, (d0, _), r0 = time.perf_counter(), self.counters(), self.recording_seconds()
            token, logits = self.feed(prompt_ids[keep:], True)
            check_choice(token, logits, len(prompt_ids), s is not None)
            r1 = self.recording_seconds()
            stats.prompt_seconds, stats.prompt_device_seconds = time.perf_counter() - t0 - (r1 - r0), \
                self.counters()[0] - d0
            t0, (d0, s0) = time.perf_counter(), self.counters()
            if n_tokens and not emit(token, logits):
                if drafter is None and steps_per_submit > 1:
                    self._chained_steps(steps_per_submit, token, n_tokens - len(out), emit, stats)
                elif drafter is None:
                    while True:
                        token, logits = self.feed_one(token)
                        stats.decode_steps += 1
                        stats.decode_tokens += 1
                        check_choice(token, logits, len(prompt_ids) + stats.decode_steps, s is not None)
                        if emit(token, logits):
                            break
                else:
                    drafter.start(prompt_ids + [token])
                    self._speculative_steps(drafter, draft_max, token, n_tokens - len(out), emit, stats)
        finally:
            self.set_sampling(None)
        if stats.stop is None:  # (no token asked for)
            stats.stop, stats.stop_detail = "limit", counted(n_tokens, "token")
        d1, s1 = self.counters()
        r2 = self.recording_seconds()
        stats.decode_seconds, stats.decode_device_seconds = time.perf_counter() - t0 - (r2 - r1), d1 - d0
        stats.record_seconds = r2 - r0
        stats.decode_submits = s1 - s0
        stats.n_generated = len(out)
        return Generation(out, stats, kept)

    def _chained_steps(self, k: int, token: int, n_left: int, emit: Callable[[int, np.ndarray], bool],
                       stats: GenerationStats) -> None:
        """Plain greedy's decode steps, up to k per submit (feed_steps): a
        submit takes as many as there are tokens left to choose
        (submit_sizes); the choices after one that ends the generation are
        dropped, and the KV cache rewound to what one step per submit
        leaves: `token` and the choices before that one."""
        while True:
            n_fed = self.n_past
            m = min(k, n_left)
            choices, rows = self.feed_steps(token, m)
            for i in range(m):
                token = int(choices[i])
                stats.decode_steps += 1
                stats.decode_tokens += 1
                check_choice(token, rows[i], n_fed + i + 1, self.sampling is not None)
                n_left -= 1
                if emit(token, rows[i]):
                    self.rewind(n_fed + i + 1)
                    return

    def drafter(self, speculative: str | Drafter, draft_max: int | None = None) -> Drafter:
        """The drafter speculative= names (or is), once this decoder is found
        to keep greedy's tokens with it (refused in one line where not)."""
        if speculative not in SPECULATIVE and not all(hasattr(speculative, m) for m in ("start", "add", "draft",
                                                                                         "update", "name")):
            raise ValueError(f"speculative {speculative!r}: one of {', '.join(SPECULATIVE)} (or None: plain greedy)")
        draft_max = self.draft_limit(draft_max)
        return PromptLookup(draft_max) if speculative == "lookup" else speculative

    def draft_limit(self, draft_max: int | None = None) -> int:
        """The most drafted tokens a step verifies: draft_max (default
        DRAFT_MAX), cut to what one step takes with the token before them
        (feed_rows's max_row_tokens: `vkq generate` says so where it cuts
        one given); refused where this decoder cannot keep greedy's tokens
        with drafts."""
        if not self.rows_exact:
            raise ValueError(f"speculative decoding keeps greedy's tokens only where a step over several tokens "
                             f"gives each the bits of one: vkq's engines, not {self.label}")
        most = self.max_row_tokens - 1
        if most < 1:
            raise ValueError(f"speculative decoding verifies drafts in one step of several tokens; this decoder "
                             f"takes {self.max_row_tokens} per step (prompt_chunk)")
        if draft_max is None:
            return min(DRAFT_MAX, most)
        draft_max = integer_argument("draft_max", draft_max)
        if draft_max < 1:
            raise ValueError(f"draft_max {draft_max!r}: drafted tokens per step, 1 or more (a step verifies up to "
                             f"{most} with the token before them, one step of at most {self.max_row_tokens})")
        return min(draft_max, most)

    def _speculative_steps(self, drafter: Drafter, draft_max: int, token: int, n_left: int,
                           emit: Callable[[int, np.ndarray], bool], stats: GenerationStats) -> None:
        """The decode steps of speculative greedy: `token` (chosen, not yet
        fed) goes in with the drafts after it; row i of the step's logits is
        greedy's choice after token and drafts[:i], so the drafts are kept up
        to the first that greedy did not choose, and greedy's own choice
        after them follows. The KV entries of the rejected drafts are left
        behind the rewound position, to be overwritten. Sampling: the
        drafts are kept by speculative sampling's rule instead
        (_verified_draws), which keeps the chain's distribution."""
        while True:
            n_fed = self.n_past
            room = min(n_left - 1, draft_max)  # (a step emits up to len(drafts) + 1 tokens: no more than are
            # left to generate, nor positions than the context has)
            t0 = time.perf_counter()
            drafts = list(drafter.draft(room))[:room]
            stats.draft_seconds += time.perf_counter() - t0
            if drafts:
                choices, rows = self.feed_rows([token] + drafts)
            else:
                choice, logits = self.feed_one(token)
                choices, rows = [choice], logits[None]
            stats.decode_steps += 1
            stats.drafted += len(drafts)
            if self.sampling is not None and drafts:
                choices = self._verified_draws(n_fed, drafts, rows)
                accepted = len(choices) - 1
            else:
                accepted = 0
                while accepted < len(drafts) and drafts[accepted] == choices[accepted]:
                    accepted += 1
            drafter.update(len(drafts), accepted)
            self.rewind(n_fed + 1 + accepted)  # token and the accepted drafts
            for i in range(accepted + 1):
                token = int(choices[i])
                check_choice(token, rows[i], n_fed + i + 1, self.sampling is not None)
                stats.decode_tokens += 1
                stats.accepted += i < accepted
                n_left -= 1
                if emit(token, rows[i]):
                    return
                drafter.add(token)

    def _verified_draws(self, n_fed: int, drafts: list[int], rows: np.ndarray) -> list[int]:
        """Sampling's choices after a verifying step (rows: the logits after
        the token at n_fed and after each draft): the drafts kept by
        verify_draft's rule, up to the first it replaces (the replacement
        ends the list), else all of them and a draw after the last."""
        s, out = self.sampling, []
        for i, d in enumerate(drafts):
            p = n_fed + i
            check_choice(d, rows[i], p + 1, True)
            out.append(verify_draft(rows[i], window(self.cache_tokens, p, s), p, s, d))
            if out[-1] != d:
                return out
        p = n_fed + len(drafts)
        out.append(sample(rows[-1], window(self.cache_tokens, p, s), p, s))
        return out

    @serialised
    def generate(self, prompt: str, n_tokens: int, *, stop_at_eos: bool = True,
                 on_text: Callable[[str], None] | None = None, on_token: Callable[[int], None] | None = None,
                 speculative: str | Drafter | None = None, draft_max: int | None = None, steps_per_submit: int = 1,
                 sampling: Sampling | None = None, stop: Sequence[str] = ()) -> tuple[str, list[int], GenerationStats]:
        """The continuation of a text prompt: (text, generated ids, stats).
        The text is the new tokens' pieces joined, as llama-server's (the
        tokenizer's decode with continuation). on_text receives it as it
        grows, piece by piece (whole characters; all of it by the end);
        on_token each generated id; stop: strings that end the
        generation, left out of the text; speculative, draft_max,
        steps_per_submit, sampling: as greedy's (greedy by default)."""
        if not isinstance(prompt, str):
            raise TypeError(f"prompt is {described(prompt)}; expected a str (token ids go to greedy)")
        return self.generate_ids(self.tokenizer.encode(prompt), n_tokens, stop_at_eos=stop_at_eos, on_text=on_text,
                                 on_token=on_token, speculative=speculative, draft_max=draft_max,
                                 steps_per_submit=steps_per_submit, sampling=sampling, stop=stop)

    @serialised
    def generate_ids(self, prompt_ids, n_tokens: int, *, on_text: Callable[[str], None] | None = None,
                     on_token: Callable[[int], None] | None = None, stop: Sequence[str] = (),
                     **greedy_args) -> tuple[str, list[int], GenerationStats]:
        """generate's, from the prompt's ids: its text streamed (TextStream)
        and cut at a stop string."""
        stops = check_stops(stop)
        stream = None if on_text is None else TextStream(self.tokenizer, on_text, stops)

        def each(token: int) -> None:
            if stream is not None:
                stream.add(token)
            if on_token is not None:
                on_token(token)
        gen = self.greedy(prompt_ids, n_tokens, on_token=each if stream or on_token else None, stop=stops,
                          **greedy_args)
        text = self.tokenizer.decode(gen.tokens, continuation=True)
        if gen.stats.stop == "stop":
            text = text[:text.find(gen.stats.stop_detail)]
        if stream is not None:
            stream.finish(text)
        return text, gen.tokens, gen.stats

    @serialised
    def chat(self, messages, n_tokens: int = -1, *, template: str | None = None, sampling: Sampling | None = None,
             on_text: Callable[[str], None] | None = None, on_token: Callable[[int], None] | None = None,
             stop: Sequence[str] = (), steps_per_submit: int = 1,
             reuse_cache: bool = True) -> tuple[str, list[int], GenerationStats]:
        """The assistant's reply to a conversation: messages, a list of
        {"role": "system" | "user" | "assistant", "content": text}, rendered
        by the model's chat template (its GGUF's tokenizer.chat_template, or
        `template`: a built-in name or Jinja text, vkq.llama.chat_template)
        with the generation prompt. Returns (text, ids, stats) as generate.
        n_tokens: the most tokens of the reply (-1, or more than the context
        has room for: to the context's end). reuse_cache: the KV cache keeps
        what it holds of the conversation so far (call again with the reply
        and the next message appended: only the new turn is fed). on_text,
        on_token, stop, sampling, steps_per_submit: as generate's."""
        from .chat_template import chat_prompt_ids

        ids = chat_prompt_ids(self.file, messages, template)
        room = self.ctx - len(ids) + 1
        if room < 1:
            raise ValueError(f"the conversation ({len(ids)} tokens) fills the context of {self.ctx} positions")
        if isinstance(n_tokens, (int, np.integer)) and not isinstance(n_tokens, bool) and n_tokens > room:
            n_tokens = -1  # (to the context's end: GenerationStats.stop says so)
        return self.generate_ids(ids, n_tokens, on_text=on_text, on_token=on_token, stop=stop, sampling=sampling,
                                 steps_per_submit=steps_per_submit, reuse_cache=reuse_cache)
