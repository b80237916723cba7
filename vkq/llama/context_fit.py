"""The context a graph-engine decoder can hold on its device, checked before
anything is allocated.

The step's device tensors that grow with the context (its positions):
each layer's K and V caches, the attention's scratch, the RoPE table, and
where a prompt goes through the mat-mats and its tiled attention splits the
keys (a loop budget: lavapipe past ~30,000 positions), that attention's
partial results, one buffer per layer of every mat-mat prompt step kept.
Each is one buffer that a shader binds whole, so each must stay within one
buffer's limit (vkq.device.memory.buffer_limit: maxStorageBufferRange, or
maxMemoryAllocationSize where smaller); a larger one is undefined behaviour
(lavapipe, with its 2 GiB allocations and 128 MiB range, crashed or gave
other text; a driver that enforces the range reads zeros past it; and
Kompute sizes a buffer in 32 bits, so one of 4 GiB and more gets its size
modulo 4 GiB, and writes past that crash or are lost). And all of them
together must fit in the device memory that the weights leave (the
device's MemoryLedger). `fit_context` refuses a context that does not fit
in one line naming the limit and the largest context that fits, or, for
the model's own context length (no context asked for), uses that largest
context and says so in a warning.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..device.memory import DeviceMemoryError, buffer_limit, size_text, total_limit
from ..tensor import padded_stride
from ..resolve import MAX_COLS
from .chunk_attention import attention_tiles, split_partials_size, tiled_attention_split
from .vector_ops import MAX_KV_CAPACITY, AttentionShape, attention_scratch_size, attention_split

F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class ContextBuffers:
    """Bytes of the step's tensors that grow with the context (as vkq.Tensor pads them)."""

    cache: int  # one layer's K cache (its V cache is as large)
    scratch: int  # the attention's scratch
    rope: int  # the RoPE table
    n_layer: int
    partials: int = 0  # a tiled attention's split partials at a full mat-mat prompt chunk (0: none)
    n_partials: int = 0  # how many there are: one per layer of each mat-mat prompt step kept

    @property
    def total(self) -> int:
        return 2 * self.n_layer * self.cache + self.scratch + self.rope + self.n_partials * self.partials

    def largest(self) -> tuple[str, int]:
        """The largest of them: what it is, its bytes."""
        return max((("each layer's K cache and V cache would take", self.cache),
                    ("the attention scratch would take", self.scratch), ("the RoPE table would take", self.rope),
                    ("each layer's split partials of the prompt's tiled attention would take", self.partials)),
                   key=lambda item: item[1])


def context_buffers(device, cfg, ctx: int, spread: bool, queries: int, prompt_chunk: int = 0) -> ContextBuffers:
    """The context's tensors as GpuLlama makes them for ctx positions
    (queries: the most tokens one replay attends for through the scores
    scratch; prompt_chunk: the mat-mat prompt steps' tokens, 0: none). The
    split partials are counted at prompt_chunk queries for each kept prompt
    step (a prompt's remainders take fewer: more than they take)."""
    shape = AttentionShape(cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_rot, ctx)
    split = attention_split(device, shape, spread)

    def f32_bytes(n: int) -> int:
        return padded_stride(n, F32) * F32.itemsize

    partials = 0
    if prompt_chunk:
        tiled_split = tiled_attention_split(device, shape, attention_tiles(device, shape))
        partials = f32_bytes(split_partials_size(shape, prompt_chunk, tiled_split)) if tiled_split else 0
    return ContextBuffers(cache=f32_bytes(shape.cache_size),
                          scratch=f32_bytes(attention_scratch_size(device, shape, split, queries)),
                          rope=f32_bytes(ctx * max(cfg.n_rot, 2)), n_layer=cfg.n_layer, partials=partials,
                          n_partials=cfg.n_layer * PROMPT_STEPS_KEPT if partials else 0)


# The mat-mat prompt steps a graph engine keeps at once: the full chunk's and
# the last ones of other sizes (a prompt's remainders; vkq.llama.gpu_step).
PROMPT_STEPS_KEPT = 3


def step_vectors_bytes(file, queries: int, prompt_chunk: int = 0) -> int:
    """More than the step graphs' own vectors take (made after the context's
    tensors, and small beside them): each step size, a decode step's and the
    mat-vec steps' of 2 .. queries tokens, and PROMPT_STEPS_KEPT mat-mat
    steps of up to prompt_chunk tokens, has its own, per token every
    mat-vec group's output, the residual streams, the norm, attention and
    SwiGLU outputs, twice over for padding and Q8_1 copies."""
    cfg = file.config
    k = max(cfg.n_expert_used, 1)
    rows = sum(sum(gr.rows) * (k if gr.n_expert else 1) for gr in file.groups)
    per_token = rows + 4 * cfg.n_embd + cfg.n_head * cfg.head_dim + cfg.n_ff * k + 2 * k + 2
    tokens = queries * (queries + 1) // 2 + PROMPT_STEPS_KEPT * prompt_chunk
    return 2 * F32.itemsize * (per_token * tokens + file.n_vocab * queries)


def context_problem(device, cfg, ctx: int, spread: bool, queries: int, room: int | None,
                    prompt_chunk: int = 0) -> str | None:
    """Why a context of ctx positions does not fit (None: it fits). room:
    the bytes the device's memory has left for the context's tensors, None:
    no limit known; prompt_chunk: as context_buffers'."""
    if ctx > MAX_KV_CAPACITY:
        return f"the attention takes at most {MAX_KV_CAPACITY} positions"
    bufs = context_buffers(device, cfg, ctx, spread, queries, prompt_chunk)
    what, nbytes = bufs.largest()
    limit, limit_name = buffer_limit(device.info)
    if nbytes > limit:
        return f"{what} {size_text(nbytes)}, more than one buffer may hold ({limit_name}, {size_text(limit)})"
    if room is not None and bufs.total > room:
        cap, cap_name = total_limit(device.info)
        return (f"the KV caches and the attention's tensors would take {size_text(bufs.total)}, and "
                f"{size_text(room)} of the {cap_name} of {size_text(cap)} is left for them after vkq's weights "
                "and tensors")
    return None


def largest_context(fits, upto: int) -> int:
    """The largest context in 1 .. upto that fits (fits(ctx) -> bool, false
    from some size on); 0 if none does."""
    lo, hi = 0, upto  # fits(lo) (or lo = 0), the answer is in lo .. hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    while lo and not fits(lo):  # (the scratch's split makes sizes grow almost, not quite, monotonically)
        lo -= 1
    return lo


def fit_context(device, file, ctx: int, spread: bool, queries: int, asked: bool, memory: bool = True,
                stacklevel: int = 2, prompt_chunk: int = 0) -> int:
    """ctx if its tensors fit on the device; else, where no context was asked
    for (ctx is the model's context length), the largest that fits, with a
    warning (at the caller `stacklevel` frames up); else DeviceMemoryError.
    memory: check the memory left too (off: one buffer's limit alone, which
    needs no weights uploaded to check). queries: the most queries one
    replay's attention keeps scores of; prompt_chunk: the mat-mat prompt
    steps' tokens (0: none; step_vectors_bytes, and their tiled attention's
    split partials: context_buffers)."""
    cfg, model = file.config, file.path.name
    room = device.memory.room() if memory else None
    if room is not None:
        room = max(room - step_vectors_bytes(file, min(queries, MAX_COLS), prompt_chunk), 0)

    def problem(c: int) -> str | None:
        return context_problem(device, cfg, c, spread, queries, room, prompt_chunk)

    why = problem(ctx)
    if why is None:
        return ctx
    largest = largest_context(lambda c: problem(c) is None, ctx - 1)
    where = f"{model} on {device.info.name}"
    if not largest:
        raise DeviceMemoryError(f"{where}: not even a context of 1 position fits: {problem(1)}")
    if not asked:
        warnings.warn(f"{where}: the model's context of {ctx} positions does not fit ({why}); using {largest} "
                      "positions, the most that fit", stacklevel=stacklevel + 1)
        return largest
    raise DeviceMemoryError(f"{where}: a context of {ctx} positions does not fit: {why}; the largest that fits "
                            f"is {largest} positions")
