"""Prompt lookup: drafts for speculative decoding from the context itself.

The last few tokens of the context (an n-gram, the longest of ngram_max
down to ngram_min tokens that occurred before; one token alone matches too
much of ordinary prose to be worth a draft) are looked up at their latest
earlier occurrence, and the tokens that followed there are the draft: text
that repeats its context (code being edited, a summary quoting its source)
continues as it did before. No second model: the drafts cost a dictionary
look-up per token.

The drafts only choose what the verifying step feeds; greedy decides every
token (vkq.llama.decoding). So the drafter is free to guess badly: it then
backs off (fewer drafted tokens after a rejection, none for a while after
drafts that greedy rejected outright), so that text that does not repeat
goes through one-token steps, as plain greedy does: on lavapipe a step of 8
tokens costs about 3 of one token, of 2 about 1.5 (2026-11-27), so a
rejected draft costs more than a one-token step saves.
"""
from __future__ import annotations

from typing import Protocol

# The drafters greedy(speculative=) takes by name, and the drafts' defaults.
# Here, not in decoding.py, so that the command line lists them without
# importing Kompute.
SPECULATIVE = ("lookup",)
# Drafted tokens a step verifies, by default (llama.cpp's, common_speculative_params.n_draft); a
# decoder cuts it to what one step takes with the token before them (Decoder.draft_limit: 7 where
# a step is MAX_COLS, 8, columns)
DRAFT_MAX = 16
# A draft model (vkq.llama.draft) stops drafting at a token it gives less
# than this probability (its softmax's largest): a step that verifies a
# likely-rejected draft costs more than it saves. llama.cpp's default
# (common_speculative_params.p_min).
P_MIN = 0.75
NGRAM_MAX = 3
NGRAM_MIN = 2
DRAFT_START = 3  # the first limit: doubled while every draft is accepted
PAUSE_MAX = 16  # the most lookups skipped after drafts greedy rejected outright


class Drafter(Protocol):
    """What speculative greedy asks of a drafter (Decoder.greedy's speculative=)."""

    name: str  # for the statistics

    def start(self, context: list[int]) -> None:
        """A new text: the prompt and the first token chosen."""

    def add(self, token: int) -> None:
        """A token greedy chose joins the text."""

    def draft(self, room: int) -> list[int]:
        """Up to `room` tokens to verify after the text so far ([]: a plain
        step); room is at least 0, at most the decoder's draft_max."""

    def update(self, drafted: int, accepted: int) -> None:
        """How many of the last drafts greedy accepted."""


class PromptLookup:
    """Drafts for the context so far (`start`, then `add` each token as it joins the text)."""

    name = "lookup"

    def __init__(self, draft_max: int = DRAFT_MAX, ngram_max: int = NGRAM_MAX, ngram_min: int = NGRAM_MIN):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"n-grams of {ngram_min} to {ngram_max} tokens: 1 <= min <= max")
        if not isinstance(draft_max, int) or draft_max < 1:
            raise ValueError(f"draft_max {draft_max!r}: at least 1 drafted token per step")
        self.draft_max, self.ngram_max, self.ngram_min = draft_max, ngram_max, ngram_min
        self.start([])

    def start(self, context) -> None:
        self.tokens: list[int] = []
        # per n: n-gram -> the start of its latest occurrence that some token follows
        self._seen: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.ngram_min, self.ngram_max + 1)}
        self.limit = min(DRAFT_START, self.draft_max)  # what the back-off allows now
        self._pause = 0  # lookups still to skip
        self._misses = 0  # drafts rejected outright, in a row
        for t in context:
            self.add(t)

    def add(self, token: int) -> None:
        """A token joins the context."""
        self.tokens.append(int(token))
        end = len(self.tokens) - 1  # the n-grams that end just before it now have a follower
        for n, seen in self._seen.items():
            if end >= n:
                seen[tuple(self.tokens[end - n:end])] = end - n

    def match(self, k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the
        context's last n-gram (the longest that has one), read on into the
        draft itself where that occurrence overlaps the end (a period shorter
        than k repeats); [] when none occurred before."""
        toks, size = self.tokens, len(self.tokens)
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if size < n:
                continue
            start = self._seen[n].get(tuple(toks[size - n:]))
            if start is None:
                continue
            draft: list[int] = []
            for i in range(start + n, start + n + k):
                draft.append(toks[i] if i < size else draft[i - size])
            return draft
        return []

    def draft(self, room: int) -> list[int]:
        """The drafts for the next step: at most `room` tokens and what the
        back-off allows; [] while it pauses, or when nothing matches."""
        if self._pause:
            self._pause -= 1
            return []
        return self.match(min(room, self.limit))

    def update(self, drafted: int, accepted: int) -> None:
        """Back off after a step that verified `drafted` tokens and accepted
        `accepted` of them: all accepted, the limit doubles (to draft_max);
        some rejected, it falls to one more than were accepted; none accepted,
        lookups pause for 1, 2, 4, .. PAUSE_MAX steps in a row of such."""
        if not drafted:
            return
        if accepted == drafted:
            self.limit = min(self.draft_max, 2 * self.limit)
        else:
            self.limit = max(1, accepted + 1)
        if accepted:
            self._misses = 0
        else:
            self._pause = min(PAUSE_MAX, 2 ** self._misses)
            self._misses += 1
