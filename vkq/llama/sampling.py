"""Sampling the next token: llama.cpp's sampler chain, its settings and the
numpy sampler that the device's (vkq.llama.sample_op, shaders/sample.comp)
is checked against and that the host engine runs.

The chain, in llama.cpp's order and with its definitions (llama.cpp's
common sampling: penalties; top_k; top_p; min_p; temperature; then a draw):
- repeat penalty: a token among the last `repeat_last_n` tokens of the
  context (the prompt's included) has its logit l made l * penalty where
  l <= 0, l / penalty where l > 0 (once, however often it occurs);
- top-k: the k largest logits (equal logits: the lower id first);
- top-p: of those, sorted, the shortest prefix whose softmax probabilities
  (over the top k) sum to at least p;
- min-p: of those, the tokens whose probability is at least min_p times
  the largest's (logit >= largest + log(min_p));
- temperature: the kept logits divided by temp, then one token drawn from
  their softmax by inverse CDF, in the sorted order, with a uniform number
  u = uniform(seed, position): a hash of the seed and the position of the
  token the logits were computed at, no generator state, so a token's draw
  is the same whatever the engine, the prompt's chunks or the steps per
  submit.
temp 0 is greedy: the largest (penalized) logit.

Off switches as llama.cpp's: top_k 0 (the whole vocabulary), top_p 1,
min_p 0, repeat_penalty 1 or repeat_last_n 0. The device samples with
top_k 1 to TOP_K_MAX; top_k 0 (or more) samples in numpy on the host from
the logits the step returns (GenerationStats says where).

Rounding: both samplers compute in float32 in the same order (the sums
sequential, in the sorted order, as here); the device's exp and log may
differ from numpy's in the last bit, which changes a token only where a
sum lands within that of its bound.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

TOP_K_MAX = 1024  # the most candidates the device's sampler sorts (shaders/sample.comp's CAP)
REPEAT_LAST_N_MAX = 256  # the longest repeat-penalty window (the device's ring of recent tokens)
# llama.cpp's common sampling defaults (temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_last_n 64, no penalty)
LLAMA_CPP_DEFAULTS = dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, repeat_last_n=64)


def _number(name: str, value, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value):
        raise ValueError(f"{flag} {value!r}: {name} must be a finite number")
    return float(value)


def _integer(value, flag: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{flag} {value!r}: {what}")
    return int(value)


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: llama.cpp's sampler chain (the module's
    note), its settings named as llama.cpp's options (--temp, --top-k,
    --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed), their
    defaults llama.cpp's. seed: a 32-bit number, or None for one drawn at
    random (`resolved()` draws it; the statistics report it)."""

    temp: float = LLAMA_CPP_DEFAULTS["temp"]
    top_k: int = LLAMA_CPP_DEFAULTS["top_k"]
    top_p: float = LLAMA_CPP_DEFAULTS["top_p"]
    min_p: float = LLAMA_CPP_DEFAULTS["min_p"]
    repeat_penalty: float = LLAMA_CPP_DEFAULTS["repeat_penalty"]
    repeat_last_n: int = LLAMA_CPP_DEFAULTS["repeat_last_n"]
    seed: int | None = None

    def __post_init__(self):
        temp = _number("the temperature", self.temp, "--temp")
        if temp < 0:
            raise ValueError(f"--temp {self.temp}: the temperature must be >= 0 (0: greedy)")
        top_k = _integer(self.top_k, "--top-k", "a number of tokens, 0 (all) or more")
        if top_k < 0:
            raise ValueError(f"--top-k {top_k}: a number of tokens, 0 (all) or more")
        top_p = _number("top-p", self.top_p, "--top-p")
        if not 0 < top_p <= 1:
            raise ValueError(f"--top-p {self.top_p}: a probability in (0, 1] (1: off)")
        min_p = _number("min-p", self.min_p, "--min-p")
        if not 0 <= min_p <= 1:
            raise ValueError(f"--min-p {self.min_p}: a probability in [0, 1] (0: off)")
        penalty = _number("the repeat penalty", self.repeat_penalty, "--repeat-penalty")
        if penalty <= 0:
            raise ValueError(f"--repeat-penalty {self.repeat_penalty}: a factor > 0 (1: off)")
        last_n = _integer(self.repeat_last_n, "--repeat-last-n", f"a number of tokens, 0 to {REPEAT_LAST_N_MAX}")
        if not 0 <= last_n <= REPEAT_LAST_N_MAX:
            raise ValueError(f"--repeat-last-n {last_n}: 0 (off) to {REPEAT_LAST_N_MAX} tokens")
        if self.seed is not None:
            seed = _integer(self.seed, "--seed", "a whole number from 0 to 2**32 - 1")
            if not 0 <= seed < 2 ** 32:
                raise ValueError(f"--seed {seed}: a whole number from 0 to 2**32 - 1")
        for name, v in (("temp", temp), ("top_k", top_k), ("top_p", top_p), ("min_p", min_p),
                        ("repeat_penalty", penalty), ("repeat_last_n", last_n)):
            object.__setattr__(self, name, v)

    @property
    def greedy(self) -> bool:
        """The largest logit, as no sampling at all (temp 0 and no penalty): the engines' argmax."""
        return self.temp == 0 and not self.penalizes

    @property
    def penalizes(self) -> bool:
        return self.repeat_penalty != 1 and self.repeat_last_n > 0

    @property
    def on_device(self) -> bool:
        """The device's sampler takes these settings (top_k 1 to TOP_K_MAX; temp 0 needs one candidate)."""
        return self.temp == 0 or 1 <= self.top_k <= TOP_K_MAX

    def resolved(self) -> "Sampling":
        """These settings with a seed: the one given, or one drawn at random."""
        if self.seed is not None:
            return self
        return Sampling(self.temp, self.top_k, self.top_p, self.min_p, self.repeat_penalty, self.repeat_last_n,
                        int.from_bytes(os.urandom(4), "little"))

    def describe(self) -> str:
        """'temp 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 1234' (the samplers that act, in chain order)."""
        if self.temp == 0:
            parts = ["greedy (temp 0)"]
        else:
            parts = [f"temp {self.temp:g}", "top-k " + (str(self.top_k) if self.top_k else "off")]
            parts += [f"top-p {self.top_p:g}"] if self.top_p < 1 else []
            parts += [f"min-p {self.min_p:g}"] if self.min_p > 0 else []
        if self.penalizes:
            parts.insert(0, f"repeat penalty {self.repeat_penalty:g} over {self.repeat_last_n} tokens")
        if self.temp != 0:
            parts.append("a random seed" if self.seed is None else f"seed {self.seed}")
        return ", ".join(parts)

    def params(self) -> np.ndarray:
        """The device sampler's parameters (shaders/sample.comp's Params), as
        uint32 words; the reciprocals and the log are the host's, so that the
        device multiplies and adds what numpy multiplies and adds."""
        f = lambda x: int(np.float32(x).view(np.uint32))  # noqa: E731
        k = 1 if self.temp == 0 else self.top_k
        return np.array([k, f(self.top_p), int(self.top_p < 1), f(np.log(np.float32(self.min_p)) if self.min_p > 0
                                                                   else 0.0),
                         int(self.min_p > 0), f(0.0 if self.temp == 0 else 1.0 / self.temp),
                         f(self.repeat_penalty), f(1.0 / self.repeat_penalty),
                         self.repeat_last_n if self.penalizes else 0, self.seed or 0], np.uint32)


# -- the counter-based uniform numbers ----------------------------------------------
_M32 = 0xFFFFFFFF


def _fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finalizer: a bijection that mixes every bit."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def uniform(seed: int, position: int) -> np.float32:
    """The draw's uniform number in [0, 1) of the token chosen after the
    token at `position`: 24 bits of fmix32(fmix32(seed) ^ position), exact
    in float32 (shaders/sample.comp computes the same)."""
    h = _fmix32(_fmix32(seed & _M32) ^ (position & _M32))
    return np.float32((h >> 8) * (1.0 / (1 << 24)))


# -- the numpy sampler -------------------------------------------------------------
def penalized(logits: np.ndarray, window, s: Sampling) -> np.ndarray:
    """The logits after the repeat penalty over `window` (the last
    repeat_last_n tokens of the context; negative ids: none)."""
    out = np.array(logits, np.float32, copy=True)
    if not s.penalizes:
        return out
    ids = np.unique(np.asarray([t for t in window if t >= 0], np.int64))
    v = out[ids]
    out[ids] = np.where(v <= 0, v * np.float32(s.repeat_penalty), v * np.float32(1.0 / s.repeat_penalty))
    return out


def top_candidates(values: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest values (k 0: all), sorted: larger first,
    equal values the lower id first."""
    n = values.size
    if k <= 0 or k >= n:
        return np.lexsort((np.arange(n), -values))
    kth = np.partition(values, n - k)[n - k]  # the k-th largest
    above = np.flatnonzero(values > kth)
    ties = np.flatnonzero(values == kth)[:k - above.size]
    ids = np.concatenate([above, ties])
    return ids[np.lexsort((ids, -values[ids]))]


def kept(values: np.ndarray, s: Sampling) -> np.ndarray:
    """The ids that top-k, top-p and min-p keep of the (penalized) logits,
    in the sorted order the draw takes them in."""
    ids = top_candidates(values, 1 if s.temp == 0 else s.top_k)
    v = values[ids]
    m = ids.size
    if s.temp == 0:
        return ids[:1]
    if s.top_p < 1:
        e = np.exp(v - v[0])
        total = np.cumsum(e, dtype=np.float32)
        m = int(np.argmax(total >= np.float32(s.top_p) * total[-1])) + 1
    if s.min_p > 0:
        bound = v[0] + np.log(np.float32(s.min_p))
        m = min(m, int(np.argmin(np.append(v[1:m] >= bound, False))) + 1)
    return ids[:m]


def sample(logits: np.ndarray, window, position: int, s: Sampling) -> int:
    """The token the chain chooses from float32 logits (n_vocab,) computed
    after the token at `position`, whose window is the last repeat_last_n
    tokens up to and including that one (s: resolved, a seed)."""
    values = penalized(logits, window, s)
    ids = kept(values, s)
    if s.temp == 0 or ids.size == 1:
        return int(ids[0])
    v = values[ids]
    w = np.exp((v - v[0]) * np.float32(1.0 / s.temp))
    cdf = np.cumsum(w, dtype=np.float32)
    t = uniform(s.seed, position) * cdf[-1]
    return int(ids[min(int(np.searchsorted(cdf, t, side="right")), ids.size - 1)])


def window(tokens, position: int, s: Sampling) -> list[int]:
    """The repeat penalty's window of the token chosen after `position`:
    tokens[position - repeat_last_n + 1 .. position] (tokens: the context's)."""
    if not s.penalizes:
        return []
    return list(tokens[max(0, position - s.repeat_last_n + 1):position + 1])


def probabilities(logits: np.ndarray, window, s: Sampling) -> np.ndarray:
    """The exact distribution the chain draws from (float64, n_vocab): the
    kept tokens' softmax at the temperature, zero elsewhere."""
    values = penalized(logits, window, s)
    ids = kept(values, s)
    p = np.zeros(values.size)
    if s.temp == 0:
        p[ids[0]] = 1.0
        return p
    v = values[ids].astype(np.float64)
    w = np.exp((v - v[0]) / s.temp)
    p[ids] = w / w.sum()
    return p


# -- speculative decoding's verification, lossless in distribution --------------------
# The accept test's and the residual draw's uniform numbers: streams of their own (seeds
# XOR these), apart from the draw's.
_ACCEPT_STREAM, _RESIDUAL_STREAM = 0x9E3779B9, 0x7F4A7C15


def verify_draft(logits: np.ndarray, window, position: int, s: Sampling, draft: int) -> int:
    """The token the chain gives in place of a drafted one, so that the
    text keeps the chain's distribution whatever drafted it (speculative
    sampling's rule for a draft given as a token): the draft with the
    probability p(draft) the chain gives it, else a draw from p without
    it (renormalized). P(x) = p(draft) [x = draft] + (1 - p(draft)) p(x) /
    (1 - p(draft)) [x != draft] = p(x). Its uniform numbers are hashes of
    the seed and the position too (streams apart from sample's)."""
    p = probabilities(logits, window, s)
    if float(uniform(s.seed ^ _ACCEPT_STREAM, position)) < p[draft]:
        return int(draft)
    p[draft] = 0.0
    ids = np.flatnonzero(p)
    if ids.size == 0:  # (p(draft) was 1: accepted above, since u < 1)
        return int(draft)
    cdf = np.cumsum(p[ids])
    t = float(uniform(s.seed ^ _RESIDUAL_STREAM, position)) * cdf[-1]
    return int(ids[min(int(np.searchsorted(cdf, t, side="right")), ids.size - 1)])
