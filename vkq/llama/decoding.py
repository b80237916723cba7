"""The token loop: greedy decoding, teacher-forced scoring and their timings,
on any engine that can feed tokens into its KV cache (`Decoder.feed`)."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import NonFiniteLogits
from .model import LlamaFile


@dataclass
class GenerationStats:
    """Where the time of a generation went: prompt (prefill) and decode steps.
    Device time is what the engine reports (`Decoder.counters`): the time of the
    mat-vec calls as the host sees them (host engines), or the kernels' time
    by GPU timestamps (the graph engine); the rest is everything else."""

    engine: str  # a label: engine, path, activations
    device_label: str | None  # what device time measures: "mat-vec", "kernels"; None: not measured
    n_prompt: int = 0
    n_generated: int = 0
    prompt_seconds: float = 0.0
    prompt_device_seconds: float = 0.0
    decode_steps: int = 0  # forward passes after the prompt (the first token comes from the prompt's logits)
    decode_seconds: float = 0.0
    decode_device_seconds: float = 0.0
    decode_submits: int = 0
    dispatches: int | None = None  # compute dispatches and barriers per decode step (where the engine knows)
    barriers: int | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.decode_steps / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def ms_per_token(self) -> float:
        return 1e3 * self.decode_seconds / self.decode_steps if self.decode_steps else 0.0

    @property
    def device_ms_per_token(self) -> float:
        return 1e3 * self.decode_device_seconds / self.decode_steps if self.decode_steps else 0.0

    @property
    def submits_per_token(self) -> float:
        return self.decode_submits / self.decode_steps if self.decode_steps else 0.0

    @property
    def device_share(self) -> float:
        """The share of a decode step's wall time that device time covers."""
        return self.decode_device_seconds / self.decode_seconds if self.decode_seconds else 0.0

    def summary(self) -> str:
        dev_s = f"; {self.device_label} {self.prompt_device_seconds:.2f} s" if self.device_label else ""
        lines = [f"prompt: {self.n_prompt} tokens in {self.prompt_seconds:.2f} s "
                 f"({self.prompt_tokens_per_second:.1f} t/s{dev_s})"]
        if self.decode_steps:
            ms, dev = self.ms_per_token, self.device_ms_per_token
            split = (f" = {self.device_label} {dev:.1f} ms [{100 * self.device_share:.0f}%] + rest {ms - dev:.1f} ms"
                     if self.device_label else "")
            lines.append(
                f"decode: {self.n_generated} tokens, {self.decode_steps} steps in {self.decode_seconds:.2f} s: "
                f"{self.tokens_per_second:.2f} t/s ({ms:.1f} ms/token{split}; "
                f"{submits_per_token(self.submits_per_token)}{self._dispatch_note()}); {self.engine}")
        else:
            lines.append(f"decode: {self.n_generated} tokens, no decode step; {self.engine}")
        return "\n".join(lines)


    def _dispatch_note(self) -> str:
        return "" if self.dispatches is None else f", {self.dispatches} dispatches and {self.barriers} barriers/token"


def submits_per_token(n: float) -> str:
    """'1 submit/token', '121 submits/token'."""
    return f"{n:g} submit{'' if n == 1 else 's'}/token"


def check_choice(token: int, logits: np.ndarray, n_fed: int) -> None:
    """Greedy's choice is not finite exactly when the logits hold a NaN (the
    argmax picks the first) or +inf; a -inf, a token ruled out, is no
    trouble. Then no token is right: an error, not NaN's index."""
    if not np.isfinite(logits[token]):
        raise NonFiniteLogits(f"the logits are not finite after token {n_fed} ({logits[token]} at {token}): "
                              "the model's weights decode to NaN or inf, or its activations overflow")


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
    device_label = "mat-vec"

    def _set_context(self, ctx: int | None) -> None:
        n_train = self.file.config.n_ctx_train
        ctx = n_train if ctx is None else int(ctx)
        if not 1 <= ctx <= n_train:
            raise ValueError(f"a context of {ctx} positions: the model takes 1 to {n_train}")
        self.ctx = ctx

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

    def counters(self) -> tuple[float, int]:
        """(device seconds, submits) so far: see GenerationStats."""
        return 0.0, 0

    def step_counts(self) -> tuple[int, int] | None:
        """(compute dispatches, barriers) of one decode step, where the engine records them."""
        return None

    def check_room(self, n_past: int, n_new: int) -> None:
        if n_past + n_new > self.ctx:
            raise ValueError(f"{n_past + n_new} positions (prompt and new tokens) exceed the context of "
                             f"{self.ctx} this model was given (load it with a larger ctx=, up to "
                             f"{self.file.config.n_ctx_train})")

    # -- the token loop ----------------------------------------------------------
    def step(self, token: int) -> np.ndarray:
        """One decode step: feed one token, get the logits of the next."""
        return self.feed([token], True)[1]

    def logits(self, tokens) -> np.ndarray:
        """The next-token logits after `tokens`, from an empty cache."""
        self.reset()
        return self.feed(list(tokens), True)[1]

    def score(self, prompt_ids, next_ids) -> np.ndarray:
        """Teacher-forced: (len(next_ids), n_vocab) logits; row i is what the model
        predicts after prompt + next_ids[:i] (greedy's logits[i] for those ids)."""
        next_ids = list(next_ids)
        if not next_ids:  # no rows: nothing to feed, not even the prompt
            return np.zeros((0, self.n_vocab), np.float32)
        out = [self.logits(prompt_ids)]
        for t in next_ids[:-1]:
            out.append(self.step(t))
        return np.stack(out)

    def greedy(self, prompt_ids, n_tokens: int, *, stop_at_eos: bool = True, keep_logits: bool = False,
               on_token: Callable[[int], None] | None = None) -> Generation:
        """Greedy decoding of n_tokens after prompt_ids (from an empty cache)."""
        prompt_ids = self.file.check_ids(prompt_ids)
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
        if not prompt_ids:
            raise ValueError("no tokens to feed (empty prompt?)")
        self.check_room(0, len(prompt_ids) + max(n_tokens - 1, 0))
        stats = GenerationStats(self.label, self.device_label, n_prompt=len(prompt_ids))
        stats.dispatches, stats.barriers = self.step_counts() or (None, None)
        out, kept = [], [] if keep_logits else None
        self.reset()
        t0, (d0, _) = time.perf_counter(), self.counters()
        token, logits = self.feed(prompt_ids, True)
        check_choice(token, logits, len(prompt_ids))
        stats.prompt_seconds, stats.prompt_device_seconds = time.perf_counter() - t0, self.counters()[0] - d0
        t0, (d0, s0) = time.perf_counter(), self.counters()
        eos = self.tokenizer.eos_id
        while n_tokens:
            out.append(token)
            if kept is not None:
                kept.append(logits)
            if on_token is not None:
                on_token(token)
            if len(out) >= n_tokens or (stop_at_eos and eos is not None and token == eos):
                break
            token, logits = self.feed([token], True)
            stats.decode_steps += 1
            check_choice(token, logits, len(prompt_ids) + stats.decode_steps)
        d1, s1 = self.counters()
        stats.decode_seconds, stats.decode_device_seconds = time.perf_counter() - t0, d1 - d0
        stats.decode_submits = s1 - s0
        stats.n_generated = len(out)
        return Generation(out, stats, kept)

    def generate(self, prompt: str, n_tokens: int, *, stop_at_eos: bool = True,
                 on_text: Callable[[str], None] | None = None) -> tuple[str, list[int], GenerationStats]:
        """Greedy continuation of a text prompt: (text, generated ids, stats).
        on_text receives the text as it grows, piece by piece."""
        prompt_ids = self.tokenizer.encode(prompt)
        on_token: Callable[[int], None] | None = None
        if on_text is not None:
            ids: list[int] = []
            shown = [""]

            def show_text(token: int) -> None:
                ids.append(token)
                text = self.tokenizer.decode(ids, continuation=True)
                if not text.endswith("\ufffd") and text.startswith(shown[0]):  # whole UTF-8 characters only
                    on_text(text[len(shown[0]):])
                    shown[0] = text
            on_token = show_text
        gen = self.greedy(prompt_ids, n_tokens, stop_at_eos=stop_at_eos, on_token=on_token)
        return self.tokenizer.decode(gen.tokens, continuation=True), gen.tokens, gen.stats
