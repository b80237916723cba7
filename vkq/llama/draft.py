"""A draft model: drafts for speculative decoding from a second model's greedy tokens.

A smaller (or more coarsely quantized) model of the same vocabulary runs
ahead of the target by a few greedy steps; the target verifies them in one
step (vkq.llama.decoding) and keeps what its own greedy chooses, so the
text is the target's whatever the draft says. The draft only has to be
cheap and often right.

The draft keeps its own KV cache in step with the text: before drafting it
rewinds to the longest prefix its cache shares with the text (its rejected
drafts are left behind n_past, never read, overwritten by the next feed) and
feeds what the text gained since, one or two tokens after a verified step,
through its decode step's kernels (its drafts are decode steps, not a
prompt's chunks).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..blocks.gguf_io import read_metadata_head
from .decoding import Decoder
from .lookup import P_MIN
from .model import LlamaFile

class VocabularyMismatch(ValueError):
    """The draft's token ids do not mean the target's tokens."""


def _token_texts(path: Path) -> list[str]:
    # (a LlamaFile keeps its tokenizer, not the texts; this reads only the metadata, ~0.06 s for 49,152 tokens)
    return read_metadata_head(path, "tokenizer.ggml.tokens", 1 << 30) or []


def check_same_vocabulary(target: LlamaFile, draft: LlamaFile) -> None:
    """Refuse a draft whose token ids are not the target's: another
    vocabulary size, or a token whose text differs (one line naming both
    files and the first difference)."""
    where = f"draft {draft.path.name} and target {target.path.name} do not share a vocabulary"
    if draft.n_vocab != target.n_vocab:
        raise VocabularyMismatch(f"{where}: {draft.n_vocab} tokens against {target.n_vocab}")
    theirs, ours = _token_texts(draft.path), _token_texts(target.path)
    i = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), None)
    if i is not None:
        raise VocabularyMismatch(f"{where}: token {i} is {theirs[i]!r} in the draft, {ours[i]!r} in the target")


def top_probability(logits: np.ndarray) -> float:
    """The largest probability of the softmax of the logits."""
    z = logits.astype(np.float64)
    return float(1.0 / np.exp(z - z.max()).sum())


class DraftModel:
    """A drafter (vkq.llama.lookup.Drafter) for `target.greedy(speculative=)`:
    `draft`, a decoder of a model with the target's vocabulary (refused
    otherwise), drafts its own greedy continuation of the text, up to the
    tokens a step verifies, stopping early at a token it gives less than
    p_min probability (0: never). Its context may be shorter than the
    target's: it drafts nothing past its own end."""

    def __init__(self, target: Decoder, draft: Decoder, p_min: float = P_MIN):
        if draft is target:
            raise ValueError("the draft model needs a decoder of its own (its own KV cache), not the target's: "
                             "load the file again")
        check_same_vocabulary(target.file, draft.file)
        if not 0.0 <= p_min <= 1.0:
            raise ValueError(f"draft p_min {p_min!r}: a probability, 0 to 1")
        self.decoder, self.p_min = draft, float(p_min)
        self.name = f"draft {draft.path.name}"
        self.start([])

    def start(self, context) -> None:
        self.tokens = [int(t) for t in context]  # the text: the prompt and the tokens greedy chose
        self.cached: list[int] = []  # what the draft's KV cache holds: a prefix of the text, then drafts
        with self.decoder.lock:  # (made in one thread while another generates on the draft's decoder: wait)
            self.decoder.reset()

    def add(self, token: int) -> None:
        self.tokens.append(int(token))

    def draft(self, room: int) -> list[int]:
        d = self.decoder
        room = min(room, d.ctx - len(self.tokens) + 1)  # (its last draft is chosen, never fed)
        if room < 1:
            return []
        keep = 0
        for a, b in zip(self.cached, self.tokens):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(self.tokens) - 1)  # the text's last token is fed again: its logits choose the draft
        d.rewind(keep)
        del self.cached[keep:]
        new, drafts = self.tokens[keep:], []
        while len(drafts) < room:
            choice, logits = self._feed(new)
            self.cached += new
            if self.p_min and top_probability(logits) < self.p_min:
                break
            drafts.append(choice)
            new = [choice]
        return drafts

    def _feed(self, new: list[int]) -> tuple[int, np.ndarray | None]:
        """The tokens join the draft's cache: the prompt (an empty cache) on
        the prompt's kernels (feed), as the draft's own greedy takes it; after
        it, decode steps: a drafted token, or the one or two tokens the text
        gained by a verified step, on the one-token step's kernels (feed_one,
        or feed_rows: the same bits for several in one submit). Returns the
        last one's (argmax, logits)."""
        d = self.decoder
        if not d.n_past or len(new) > d.max_row_tokens:
            return d.feed(new, self.p_min > 0)
        if len(new) == 1:
            return d.feed_one(new[0])
        choices, rows = d.feed_rows(new)
        return int(choices[-1]), rows[-1]

    def update(self, drafted: int, accepted: int) -> None:
        """(The next draft finds the rejected ones by the text itself.)"""

    def warm_up(self, n_prompt: int) -> float:
        """Record the draft's steps for a prompt of n_prompt tokens and the
        one- and two-token decode steps that follow a verified step (its
        decoder's warm_up, and a feed_rows of two); its cache is left empty.
        Returns the seconds it took."""
        self.start([])
        d = self.decoder
        seconds = d.warm_up(n_prompt + 1)
        t0 = time.perf_counter()
        if d.max_row_tokens >= 2:
            d.feed_rows([0, 0])
        self.start([])
        return seconds + time.perf_counter() - t0
