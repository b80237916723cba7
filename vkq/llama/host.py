"""The host-driven llama decoder: the float64 numpy reference, and `--engine host`.

llama.cpp's llama graph: RMSNorm, RoPE (ggml's "normal" mode: adjacent pairs
(x[2i], x[2i+1]) rotate; GGUF llama files store Q and K permuted for it;
Qwen's "neox" mode: pairs (x[i], x[i + n_rot/2])), with the architecture's
Q/K/V biases and per-head Q/K norms (vkq.llama.architectures),
grouped-query attention over a KV cache (with the architecture's query
scale, soft-capped scores and sliding windows), SwiGLU or GeGLU FFN (or a
mixture of SwiGLU experts: `route`, then MUL_MAT_ID), the architecture's
norms after attention and FFN, final norm and output head (`output.weight`,
or the tied `token_embd.weight`), its logits soft-capped where the
architecture says. The vector ops run
in numpy float32 here; each weight mat-vec is one call of a `Matvecs`
engine: `Backend.matvec` (path "auto", "dmmv", "mmvq": one submit per call)
or float64 numpy ("numpy": the reference; nothing else differs).

A prompt goes in chunks (causal attention inside the chunk), then one
token per step, as the graph engine's (vkq.llama.gpu_step) on the same
choice of kernels (prompt_kernels): "matmul", chunks of up to prompt_chunk
(512) tokens through the tiled mat-mat (Backend.matmul, matmul_id), each
weight read once per chunk; "matvec", chunks of up to `vkq.MAX_COLS`
through the mat-vecs of that many columns, the logits of the prompt fed
token by token. The numpy reference takes chunks of MAX_COLS.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np

from ..backend import Backend
from ..blocks.activations import GENERATE_ACTIVATIONS, check_activations
from ..dispatch.paths import resolve_path
from ..resolve import MAX_COLS
from .decoding import Decoder, check_prompt_kernels
from .matvecs import Matvecs, NumpyMatvecs, VkqMatvecs, engine_label, matmul_columns
from .model import LlamaFile

PATH_MODES = ("auto", "dmmv", "mmvq", "numpy")


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis. x is made contiguous first: numpy sums a
    strided view (a head's slice of a step's fused Q/K/V output) in another
    order than a contiguous row, and a row's bits must not depend on how
    many tokens share the step (speculative decoding, -ub)."""
    x = np.ascontiguousarray(x)
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


GELU_COEF_A = np.float32(0.044715)
SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml's GELU, the tanh approximation (GeGLU's gate: Gemma's gelu_pytorch_tanh)."""
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(SQRT_2_OVER_PI * x * (np.float32(1) + GELU_COEF_A * x * x)))


SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT = np.float32(1.702), np.float32(7.0)


def swiglu_oai(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gpt-oss's clamped SwiGLU (ggml's swiglu_oai): the gate at most 7, up within [-7, 7]:
    g sigmoid(1.702 g) (u + 1)."""
    g = np.minimum(gate, SWIGLU_OAI_LIMIT)
    u = np.clip(up, -SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT)
    return g / (np.float32(1) + np.exp(SWIGLU_OAI_ALPHA * -g)) * (u + np.float32(1))


# The FFN's gated activation of (gate, up), by the row's glu.
GLU = {"silu": lambda g, u: silu(g) * u, "gelu": lambda g, u: gelu(g) * u, "oai": swiglu_oai}


def soft_cap(x: np.ndarray, cap: float) -> np.ndarray:
    """cap * tanh(x / cap): finite for any x but NaN (tanh of an infinity is 1)."""
    c = np.float32(cap)
    return c * np.tanh(x / c)


# llama.cpp clamps the sum of the selected experts' probabilities to the
# smallest normal fp16 before it divides by it.
MIN_EXPERT_WEIGHT_SUM = np.float32(6.103515625e-5)


def route(logits: np.ndarray, n_used: int) -> tuple[np.ndarray, np.ndarray]:
    """A mixture-of-experts router's choice: the n_used experts of the
    largest logits (in descending order; equal logits: the lower index first;
    a NaN logit counts as -inf), their weights the softmax probabilities over
    every expert divided by the chosen ones' sum, as llama.cpp's llama layers
    weigh them. logits float32 (n, n_expert) -> (ids int32 (n, n_used),
    weights float32 (n, n_used)).

    llama.cpp ranks the probabilities; ranking the logits is the same choice
    in exact arithmetic (softmax is monotonic) and, unlike a float32 exp's
    roundings, one this and the device's routing op (shaders/
    expert_routing.comp) share exactly, near-ties and ties included."""
    keys = np.where(np.isnan(logits), np.float32(-np.inf), logits)
    ids = np.argsort(-keys, axis=-1, kind="stable")[:, :n_used].astype(np.int32)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = e * (np.float32(1) / e.sum(axis=-1, keepdims=True, dtype=np.float32))
    weights = np.take_along_axis(probs, ids, axis=-1)
    total = np.maximum(weights.sum(axis=-1, keepdims=True, dtype=np.float32), MIN_EXPERT_WEIGHT_SUM)
    return ids, (weights / total).astype(np.float32)


def rope(x: np.ndarray, pos: np.ndarray, inv_freq: np.ndarray, n_rot: int, neox: bool = False,
         mscale: float = 1.0) -> np.ndarray:
    """x (n, heads, head_dim): ggml's normal mode, pairs (x[2i], x[2i+1]), or
    (neox) pairs (x[i], x[i + n_rot/2]); values past n_rot stay as they are.
    cos and sin of float64 angles, times mscale (the config's rope_mscale),
    rounded to float32 (as the GPU's table)."""
    ang = pos[:, None].astype(np.float64) * inv_freq[None, :]
    cos = (np.cos(ang) * mscale).astype(np.float32)[:, None, :]
    sin = (np.sin(ang) * mscale).astype(np.float32)[:, None, :]
    first, second = (slice(0, n_rot // 2), slice(n_rot // 2, n_rot)) if neox else (
        slice(0, n_rot, 2), slice(1, n_rot, 2))
    x0, x1 = x[..., first], x[..., second]
    out = x.copy()
    out[..., first] = x0 * cos - x1 * sin
    out[..., second] = x0 * sin + x1 * cos
    return out


class LlamaModel(Decoder):
    """A llama GGUF model, host-driven: its weight mat-vecs on vkq (or numpy).

    path_mode: None or "auto" (the dispatcher's choice per matrix), "dmmv",
    "mmvq" (int8; F32/F16 matrices fall back to dmmv), or "numpy" (the float64
    reference, no device). activations: the int8 path's activation format
    (vkq.blocks.activations; default "q8_1x2", the one within 1e-3 of the reference's
    logits). fuse: one upload and call per stage for matrices of the same
    block type (Q/K/V, gate/up). ctx: the positions the KV cache may hold
    (default: the model's context length). `file`: an already parsed
    LlamaFile (model_file is then ignored). Without a backend, one is made on `device` once the file
    has passed its checks. prompt_kernels, prompt_chunk: as the graph
    engine's (vkq.llama.gpu_step.GpuLlama; default the device class's
    kernels, `prompt_kernels_source` says why); not for the numpy reference."""

    def __init__(self, model_file: str | Path | None, backend: Backend | None = None, path_mode: str | None = None,
                 *, activations: str | None = None, fuse: bool = True, device: int | None = None,
                 ctx: int | None = None, file: LlamaFile | None = None, prompt_chunk: int | None = None,
                 prompt_kernels: str | None = None):
        mode = path_mode or "auto"
        if mode not in PATH_MODES:
            raise ValueError(f"unknown path {path_mode!r}; expected one of {', '.join(PATH_MODES)}")
        check_prompt_kernels(prompt_kernels)
        if mode == "numpy" and (prompt_kernels is not None or prompt_chunk is not None):
            raise ValueError("prompt_kernels and prompt_chunk choose a device's kernels: not for the numpy reference")
        activations = check_activations(activations or GENERATE_ACTIVATIONS)
        self.file = file if file is not None else LlamaFile(model_file, fuse)
        self._set_context(ctx)
        groups = self.file.groups
        if mode == "numpy":
            self.backend = None
            self.matvecs: Matvecs = NumpyMatvecs(self.file.tensors, groups)
        else:
            self.backend = backend if backend is not None else Backend(device)
            self.matvecs = VkqMatvecs(self.file.tensors, groups, self.backend, mode, activations)
        if self.backend is None:
            self._set_prompt("matvec", None, None)
            self.prompt_kernels_source = "the numpy reference"
        else:
            self._set_prompt(prompt_kernels, prompt_chunk, self.backend.dispatcher.device_class)
        self.reset()

    def reference(self) -> "LlamaModel":
        """The numpy float64 reference of this model: the same decoder, parsed
        file and tokenizer, its own KV cache."""
        other = copy.copy(self)
        other.__dict__.pop("_lock", None)  # (its own KV cache: its own lock)
        other.backend = None
        other.matvecs = NumpyMatvecs(self.file.tensors, self.file.groups)
        other.reset()
        return other

    def warm_up(self, n_prompt: int = 0, speculative: bool = False, sampling=None) -> float:
        """Record the dispatches of every mat-vec for the column counts a prompt
        of n_prompt tokens and the decode steps use (speculative: and the
        steps that verify drafts, any count), so that the timings that
        follow are steady state (Backend.matvec records a matrix's pipeline on
        its first call with a new column count: ~25 ms each on lavapipe).
        Returns the seconds it took; the KV cache is untouched. (sampling:
        the graph engine's; this engine samples in numpy, nothing to record.)"""
        if self.backend is None:
            return 0.0
        sizes = {(n, False) for n in (range(1, MAX_COLS + 1) if speculative else (1,))}
        chunk, tiled = self.prompt_chunk, self.tiled_prompt
        for n in {min(n_prompt, chunk), n_prompt % chunk} - {0}:
            sizes.add((matmul_columns(n), True) if tiled else (n, False))
        t0 = time.perf_counter()
        for n, tiled in sorted(sizes):
            for names, rows, ids in self._calls(n):
                if tiled and names == self.file.output_group:
                    continue  # (a prompt's output head: the last token's, one column)
                g = self.matvecs.groups[names]
                self.matvecs.multiply(g, np.zeros((rows, g.k), np.float32),
                                      None if ids is None else np.zeros(ids, np.int32), tiled)
        return time.perf_counter() - t0

    def _calls(self, n: int):
        """(group, rows of x, shape of the ids or None) of every mat-vec a forward of n tokens makes."""
        k = self.config.n_expert_used
        for layer in self.file.layers:
            for names in layer.qkv + (layer.attn_output,) + ((layer.router,) if layer.router else ()):
                yield names, n, None
            if layer.router is None:
                yield from ((names, n, None) for names in layer.gate_up + (layer.down,))
            else:
                yield from ((names, n, (n, k)) for names in layer.gate_up)
                yield layer.down, n * k, (n * k, 1)
        yield self.file.output_group, n, None

    # -- settings -----------------------------------------------------------------
    @property
    def calls_per_step(self) -> int:
        return len(self.file.groups)

    @property
    def path_mode(self) -> str:
        return "numpy" if self.backend is None else self.matvecs.path

    @path_mode.setter
    def path_mode(self, mode: str | None) -> None:
        """Switch between auto, dmmv and mmvq on the same uploaded weights."""
        mode = mode or "auto"
        if self.backend is None or mode not in ("auto", "dmmv", "mmvq"):
            raise ValueError(f"cannot switch a {self.path_mode} model to path {mode!r} "
                             f"(numpy is a separate LlamaModel(path_mode='numpy'))")
        self.matvecs.path = mode

    @property
    def activations(self) -> str | None:
        """The int8 path's activation format (None for the numpy reference)."""
        return None if self.backend is None else self.matvecs.activations

    @activations.setter
    def activations(self, name: str) -> None:
        if self.backend is None:
            raise ValueError("the numpy reference has no int8 activations")
        self.matvecs.activations = check_activations(name)

    @property
    def label(self) -> str:
        mode = self.path_mode
        if mode == "numpy":
            return "engine numpy (float64 reference)"
        ran = [self.backend.pipeline(g, 1, resolve_path(g.layout.fmt, mode), self.activations).path
               for g in self.matvecs.weights.values() if not g.is_expert_stack]
        return engine_label("host", mode, ran, self.activations)

    def counters(self) -> tuple[float, int]:
        return self.matvecs.seconds, (0 if self.backend is None else self.matvecs.calls)

    # -- the forward pass ---------------------------------------------------------
    def reset(self) -> None:
        cfg = self.config
        self.n_past = 0
        self.cache_tokens = []
        self._cap = 0
        self.k_cache = [np.zeros((0, cfg.n_head_kv, cfg.head_dim), np.float32) for _ in range(cfg.n_layer)]
        self.v_cache = [np.zeros((0, cfg.n_head_kv, cfg.head_dim), np.float32) for _ in range(cfg.n_layer)]

    def _grow(self, n_needed: int) -> None:
        if n_needed <= self._cap:
            return
        cap = max(64, self._cap)
        while cap < n_needed:
            cap *= 2
        for caches in (self.k_cache, self.v_cache):
            for i, c in enumerate(caches):
                grown = np.zeros((cap, *c.shape[1:]), np.float32)
                grown[: self.n_past] = c[: self.n_past]
                caches[i] = grown
        self._cap = cap

    def _attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """q (n, n_head, hd), k/v (n, n_head_kv, hd) of positions n_past.. ; -> (n, n_head * hd).
        A query at position p sees the keys up to p, and in a sliding-window
        layer only the window's last ones (p - window + 1 .. p)."""
        cfg = self.config
        window = cfg.window(layer)
        n, p0 = q.shape[0], self.n_past
        self.k_cache[layer][p0 : p0 + n] = k
        self.v_cache[layer][p0 : p0 + n] = v
        group = cfg.n_head // cfg.n_head_kv  # query head h reads KV head h // group, as ggml broadcasts
        qg = q.reshape(n, cfg.n_head_kv, group, cfg.head_dim)
        # Causal: query i sees the keys up to p0 + i. Each query attends on its
        # own over exactly those, so that a chunk's rows have the bits of its
        # tokens fed one by one (a masked batch would sum in another order),
        # which speculative decoding's verifying step rests on.
        first = [max(0, p0 + i + 1 - window) if window else 0 for i in range(n)]
        sinks = self.file.sinks[layer]
        sinks = None if sinks is None else sinks.reshape(cfg.n_head_kv, group, 1, 1)
        out = [self._attend(qg[i:i + 1], self.k_cache[layer][first[i]: p0 + i + 1],
                            self.v_cache[layer][first[i]: p0 + i + 1], sinks) for i in range(n)]
        return np.concatenate(out).reshape(n, cfg.n_head * cfg.head_dim)

    def _attend(self, qg: np.ndarray, keys: np.ndarray, values: np.ndarray, sinks=None) -> np.ndarray:
        """Softmax attention of one query (1, n_head_kv, group, hd) over all of
        keys/values; with sinks (n_head_kv, group, 1, 1), each head's sink
        joins the softmax's denominator (a logit, unscaled: gpt-oss's)."""
        cfg = self.config
        scores = np.einsum("nkgd,tkd->kgnt", qg, keys) * np.float32(cfg.query_scale)
        if cfg.attn_softcap:
            scores = soft_cap(scores, cfg.attn_softcap)
        top = scores.max(axis=-1, keepdims=True)
        if sinks is not None:
            top = np.maximum(top, sinks)
        scores = np.exp(scores - top)
        total = scores.sum(axis=-1, keepdims=True)
        if sinks is not None:
            total = total + np.exp(sinks - top)
        scores /= total
        return np.einsum("kgnt,tkd->nkgd", scores, values)

    def _ffn(self, layer, h: np.ndarray, tiled: bool) -> np.ndarray:
        gate, up = [y for g in layer.gate_up for y in self.matvecs.run(g, h, tiled=tiled)]
        return self.matvecs.run(layer.down, GLU[self.config.architecture.glu](gate, up), tiled=tiled)[0]

    def _experts(self, layer, h: np.ndarray, tiled: bool) -> np.ndarray:
        """The mixture of experts of h (n, n_embd): each row through its
        n_used experts (MUL_MAT_ID), their outputs weighted and added in the
        router's order, as llama.cpp adds them."""
        mv, n_used = self.matvecs, self.config.n_expert_used
        i = layer.index
        biases = self.file.expert_biases[i]  # (gpt-oss's: the router's, and a row per expert of gate, up and down)
        logits = mv.run(layer.router, h, tiled=tiled)[0]
        if biases:
            logits = logits + biases["ffn_gate_inp"]
        # Routed row by row: numpy may sum a batch's softmax over the experts in
        # another order than one row's, and a chunk's rows keep one token's bits.
        ids, weights = map(np.concatenate, zip(*(route(row[None], n_used) for row in logits)))
        gate, up = [y for g in layer.gate_up for y in mv.run(g, h, ids, tiled)]  # (n * n_used, n_ff): slot by slot
        slots = ids.reshape(-1)
        if biases:
            gate, up = gate + biases["ffn_gate_exps"][slots], up + biases["ffn_up_exps"][slots]
        down = mv.run(layer.down, GLU[self.config.architecture.glu](gate, up), ids.reshape(-1, 1), tiled)[0]
        if biases:
            down = down + biases["ffn_down_exps"][slots]
        down = down.reshape(h.shape[0], n_used, -1)
        out = down[:, 0] * weights[:, :1]
        for j in range(1, n_used):
            out = out + down[:, j] * weights[:, j : j + 1]
        return out

    def forward(self, tokens, all_logits: bool = False, tiled: bool = False) -> np.ndarray:
        """Feed up to MAX_COLS tokens (tiled: a prompt's chunk of up to
        prompt_chunk, its weight products but the output head's on the
        mat-mat) at positions n_past..; they join the KV cache.
        Returns the logits (n_vocab,) of the last position, or (n, n_vocab)."""
        cfg, mv, f = self.config, self.matvecs, self.file
        n = len(tokens)
        most = self.prompt_chunk if tiled else MAX_COLS
        if not 1 <= n <= most:
            raise ValueError(f"forward takes 1 to {most} tokens, got {n}")
        self._grow(self.n_past + n)
        pos = np.arange(self.n_past, self.n_past + n)
        x = f.embed(tokens)
        arch = cfg.architecture
        if arch.embed_scale:
            x = x * cfg.embed_scale
        neox = arch.neox
        for i in range(cfg.n_layer):
            norms, layer = f.norms[i], f.layers[i]
            h = rms_norm(x, norms["attn_norm"], cfg.rms_eps)
            qkv = dict(zip(("attn_q", "attn_k", "attn_v"), (y for g in layer.qkv for y in mv.run(g, h, tiled=tiled))))
            heads = {"attn_q": cfg.n_head, "attn_k": cfg.n_head_kv, "attn_v": cfg.n_head_kv}
            for role, y in qkv.items():
                y = y + f.biases[i][role] if role in f.biases[i] else y  # (attn_output's: after its mat-vec)
                y = y.reshape(n, heads[role], cfg.head_dim)
                qkv[role] = rms_norm(y, f.head_norms[i][role], cfg.rms_eps) if role in f.head_norms[i] else y
            inv_freq, mscale = f.layer_inv_freq(i, self.ctx), cfg.rope_mscale
            q = rope(qkv["attn_q"], pos, inv_freq, cfg.n_rot, neox, mscale)
            k = rope(qkv["attn_k"], pos, inv_freq, cfg.n_rot, neox, mscale)
            a = self._attention(i, q, k, qkv["attn_v"])
            o = mv.run(layer.attn_output, a, tiled=tiled)[0]
            if "attn_output" in f.biases[i]:
                o = o + f.biases[i]["attn_output"]
            x = x + (rms_norm(o, norms["post_attention_norm"], cfg.rms_eps) if arch.post_norms else o)
            h = rms_norm(x, norms[arch.ffn_norm], cfg.rms_eps)
            d = self._experts(layer, h, tiled) if layer.router else self._ffn(layer, h, tiled)
            x = x + (rms_norm(d, norms["post_ffw_norm"], cfg.rms_eps) if arch.post_norms else d)
        self.n_past += n
        self.cache_tokens.extend(int(t) for t in tokens)
        h = rms_norm(x if all_logits else x[-1:], f.output_norm, cfg.rms_eps)
        logits = mv.run(f.output_group, h)[0]
        if cfg.final_softcap:
            logits = soft_cap(logits, cfg.final_softcap)
        return logits if all_logits else logits[0]

    def feed(self, tokens, want_logits: bool = True):
        tokens = self.file.check_ids(tokens)
        if not tokens:
            raise ValueError("no tokens to feed (empty prompt?)")
        self.check_room(self.n_past, len(tokens))
        c = self.prompt_chunk
        for s in range(0, len(tokens), c):
            logits = self.forward(tokens[s : s + c], tiled=self.tiled_prompt)
        return self._choice(logits), logits

    def feed_one(self, token: int):
        """A decode step: the token through the mat-vecs (whatever the prompt's kernels)."""
        tokens = self.file.check_ids([token])
        self.check_room(self.n_past, 1)
        logits = self.forward(tokens)
        return self._choice(logits), logits

    @property
    def max_row_tokens(self) -> int:
        return MAX_COLS

    @property
    def rows_exact(self) -> bool:
        return self.backend is not None  # (the numpy reference: float64 BLAS, whose sums may vary with n)

    def feed_rows(self, tokens):
        """The tokens join the KV cache in one forward pass that returns every token's logits."""
        tokens = self._check_rows(tokens)
        logits = self.forward(tokens, all_logits=True)
        return np.argmax(logits, axis=-1), logits

