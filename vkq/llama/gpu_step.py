"""The llama decode step on the device: recorded once, one submit per token.

Per token the host writes two int32s (the token id and its position) and
gets back one (the argmax of the logits; the logits too when asked). In
between, everything runs on the device, layer by layer:

    x = embed(token)                                        EmbedRows
    per layer:
      h = rms_norm(x (+= ffn_down of the layer before), attn_norm)   RMSNorm
      q|k|v = W_qkv h                                       mat-vec (stacked)
      q = rope(q); K/V cache[pos] = rope(k), v              RopeKV
      a = attention(q, K/V cache[0..pos])                   Attention
      o = W_o a
      h = rms_norm(x += o, ffn_norm)                        RMSNorm
      g|u = W_gu h;  s = silu(g) * u;  d = W_down s         mat-vec, SwiGLU, mat-vec
    h = rms_norm(x += d, output_norm);  logits = W_out h;  argmax

The weight matrices are those of the host engine (vkq.llama.matvecs, the
same stacking), each mat-vec the dispatcher's pipeline for it, its input
quantized once per stage on the int8 path. The KV cache is float32, on the
device, (n_head_kv, ctx, head_dim) per layer; the RoPE table covers ctx
positions. A prompt runs through the same step, token by token.
"""
from __future__ import annotations

import time
from pathlib import Path

import kp
import numpy as np

from ..activations import GENERATE_ACTIVATIONS, check_activations
from ..backend import Backend
from ..ops import MatVec, QuantizeQ8_1, q8_1_words
from .decoding import Decoder
from .matvecs import VkqMatvecs, matvec_path
from .model import LlamaFile
from .ops import kp_tensor, Argmax, Attention, AttentionShape, EmbedRows, RMSNorm, RopeKV, SwiGLU, Vectors, rope_table

STEP_PATHS = ("auto", "dmmv", "mmvq")


def _align32(n: int) -> int:
    return -(-n // 32) * 32


class _Recorder:
    """Records ops into one Kompute sequence: host inputs first, a barrier
    before every op (each reads what the one before wrote), outputs last.
    Mat-vec inputs on the int8 path are quantized once per (input, format)."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.device = backend.device
        self.entries: list = []  # ("op", op) or ("barrier-free", op)
        self._quantized: dict[tuple[int, int], object] = {}
        self.keep: list = []  # keeps ops (and their algorithms) alive

    def matvec(self, w, x, y, path: str | None, activations: str) -> None:
        cfg = self.backend.pipeline(w, 1, path, activations)
        x_in = x
        if cfg.path == "mmvq":
            key = (id(kp_tensor(x)), cfg.x_planes)
            if key not in self._quantized:
                k_pad = w.layout.k_padded
                xq = self.device.tensor(q8_1_words(1, k_pad, cfg.x_planes), np.uint32)
                self._quantized[key] = xq
                self.add(QuantizeQ8_1(self.device, x, xq, 1, k_pad, cfg.x_planes))
            x_in = self._quantized[key]
        self.add(MatVec(self.device, w, cfg, x_in, y))

    def add(self, op) -> None:
        self.entries.append(op)
        self.keep.append(op)
        for t in getattr(op, "writes", ()):  # a rewritten input is quantized again
            self._quantized = {k: v for k, v in self._quantized.items() if k[0] != id(kp_tensor(t))}

    def sequence(self, inputs: list, outputs: list):
        seq = self.device.manager.sequence()
        seq.record(kp.OpTensorSyncDevice(inputs))
        for op in self.entries:
            seq.record(self.device.compute_barrier())
            op.record(seq)
        seq.record(kp.OpTensorSyncLocal(outputs))
        return seq


class GpuLlama(Decoder):
    """A llama GGUF model whose whole decode step runs on the device.
    Arguments as vkq.llama.host.LlamaModel's (no numpy path: that is the host
    decoder's reference); ctx: the positions the KV cache holds (default:
    the model's context length; `vkq generate` gives it what the prompt and
    the new tokens need)."""

    def __init__(self, path: str | Path | None, backend: Backend | None = None, path_mode: str | None = None,
                 *, activations: str | None = None, fuse: bool = True, device: int | None = None,
                 ctx: int | None = None, file: LlamaFile | None = None):
        mode = path_mode or "auto"
        if mode not in STEP_PATHS:
            raise ValueError(f"unknown path {path_mode!r} for the GPU step; expected one of {', '.join(STEP_PATHS)}")
        self.activations = check_activations(activations or GENERATE_ACTIVATIONS)
        self.path_mode = mode
        self.file = f = file if file is not None else LlamaFile(path, fuse)
        self._set_context(ctx)
        self.backend = backend if backend is not None else Backend(device)
        self.matvecs = VkqMatvecs(f.tensors, f.groups, self.backend, mode, self.activations)
        self.submits = 0
        self._build()
        self.reset()

    @property
    def label(self) -> str:
        return f"engine graph, path {self.path_mode}" + (
            "" if self.path_mode == "dmmv" else f", int8 activations {self.activations}")

    def counters(self) -> tuple[float, int]:
        return 0.0, self.submits

    # -- the recorded step ---------------------------------------------------------
    def _tensor(self, n: int, dtype=np.float32):
        t = self.backend.device.tensor(n, dtype)
        self._fresh.append(t)
        return t

    def _upload(self, values: np.ndarray):
        return self.backend.device.upload(np.ascontiguousarray(values).reshape(-1))

    def _build(self) -> None:
        f, cfg, dev = self.file, self.config, self.backend.device
        mv = self.matvecs
        self._fresh: list = []
        rec = self.rec = _Recorder(self.backend)
        shape = AttentionShape(cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_rot, self.ctx)
        qd, kvd = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim

        self.token = self._tensor(1, np.int32)
        self.pos = self._tensor(1, np.int32)
        self.x = self._tensor(_align32(cfg.n_embd))  # a mat-vec input: padded to whole 32-value chunks
        self.table = self._upload(rope_table(f.inv_freq, self.ctx))
        self.scores = self._tensor(cfg.n_head * self.ctx)
        self.k_cache = [self._tensor(shape.cache_size) for _ in range(cfg.n_layer)]
        self.v_cache = [self._tensor(shape.cache_size) for _ in range(cfg.n_layer)]
        self._norms = [{k: self._upload(v) for k, v in layer.items()} for layer in f.norms]
        self._out_norm = self._upload(f.output_norm)
        y = {g.names: self._tensor(sum(g.rows)) for g in f.groups}  # each group's stacked output

        def part(name: str) -> Vectors:
            """Where matrix `name`'s output sits: its group's tensor, at its rows."""
            g = next(g for g in f.groups if name in g.names)
            i = g.names.index(name)
            return Vectors(y[g.names], g.rows[i], g.offsets[i])

        def matvec(names, x) -> None:
            w = mv.weights[names]
            rec.matvec(w, x, y[names], matvec_path(self.path_mode, w), self.activations)

        if f.output_name == "token_embd.weight":
            embd = mv.weights[f.output_group]  # the tied output head: one upload serves both
        else:
            t = f.tensors["token_embd.weight"]
            embd = self.backend.upload(t.qtype, t.shape, t.data)
        self._embd = embd
        rec.add(EmbedRows(dev, embd, self.token, Vectors(self.x, cfg.n_embd)))
        h = self._tensor(_align32(cfg.n_embd))
        attn = self._tensor(_align32(qd))
        swiglu = self._tensor(_align32(cfg.n_ff))
        residual = None  # the last layer's FFN output, added into x by the next norm
        x = Vectors(self.x, cfg.n_embd)
        for i in range(cfg.n_layer):
            s_qkv, s_o, s_gu, s_down = f.stages[i]
            n = f"blk.{i}."
            rec.add(RMSNorm(dev, x, self._norms[i]["attn_norm"], Vectors(h, cfg.n_embd), cfg.rms_eps,
                            residual=residual))
            for g in s_qkv:
                matvec(g, h)
            q, k, v = part(n + "attn_q.weight"), part(n + "attn_k.weight"), part(n + "attn_v.weight")
            rec.add(RopeKV(dev, shape, q, k, v, self.k_cache[i], self.v_cache[i], self.table, self.pos))
            rec.add(Attention(dev, shape, q, self.k_cache[i], self.v_cache[i], self.pos, self.scores,
                              Vectors(attn, qd)))
            matvec(s_o[0], attn)
            rec.add(RMSNorm(dev, x, self._norms[i]["ffn_norm"], Vectors(h, cfg.n_embd), cfg.rms_eps,
                            residual=part(n + "attn_output.weight")))
            for g in s_gu:
                matvec(g, h)
            rec.add(SwiGLU(dev, part(n + "ffn_gate.weight"), part(n + "ffn_up.weight"), Vectors(swiglu, cfg.n_ff)))
            matvec(s_down[0], swiglu)
            residual = part(n + "ffn_down.weight")
        rec.add(RMSNorm(dev, x, self._out_norm, Vectors(h, cfg.n_embd), cfg.rms_eps, residual=residual))
        matvec(f.output_group, h)
        self.logits_t = y[f.output_group]
        self.next_token = self._tensor(1, np.int32)
        rec.add(Argmax(dev, Vectors(self.logits_t, self.file.n_vocab), self.next_token))

        # Zeros on the device once: the padding of every vector stays zero.
        dev.manager.sequence().eval(kp.OpTensorSyncDevice(self._fresh))
        self._seq_token = rec.sequence([self.token, self.pos], [self.next_token])
        self._seq_logits = rec.sequence([self.token, self.pos], [self.next_token, self.logits_t])
        self.n_ops = len(rec.entries)

    def warm_up(self, n_prompt: int = 0) -> float:
        """One replay of each recorded sequence (first replays are slower) on an
        empty KV cache, left empty. Returns the seconds it took."""
        if self.n_past:
            raise RuntimeError("warm_up() needs an empty KV cache (reset() first)")
        t0 = time.perf_counter()
        self.token.data()[0], self.pos.data()[0] = 0, 0
        for seq in (self._seq_token, self._seq_logits):
            seq.eval()
        return time.perf_counter() - t0

    # -- the forward pass ---------------------------------------------------------
    def reset(self) -> None:
        # Positions past n_past are never read: the cache needs no clearing.
        self.n_past = 0

    def feed(self, tokens, want_logits: bool = True):
        tokens = self.file.check_ids(tokens)
        if not tokens:
            raise ValueError("no tokens to feed (empty prompt?)")
        self.check_room(self.n_past, len(tokens))
        for i, t in enumerate(tokens):
            last = i == len(tokens) - 1
            self.token.data()[0], self.pos.data()[0] = t, self.n_past
            (self._seq_logits if last and want_logits else self._seq_token).eval()
            self.submits += 1
            self.n_past += 1
        token = int(self.next_token.data()[0])
        return token, (self.logits_t.data()[: self.n_vocab].copy() if want_logits else None)
