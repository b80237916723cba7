"""The llama decode step on the device: recorded once, one submit per token.

Per token the host writes two int32s (the token id and its position) and
reads back one, the argmax of the logits (the logits come back too, 4 bytes
per vocabulary entry, and are read only when asked). In between, everything
runs on the device, layer by layer:

    x = embed(token)                                        EmbedRows
    per layer:
      h = rms_norm(x (+= ffn_down of the layer before), attn_norm)   RMSNorm
      q|k|v = W_qkv h                                       mat-vec (stacked)
      K/V cache[pos] = rope(k), v;                          Attention
      a = attention(rope(q), K/V cache[0..pos])
      o = W_o a
      h = rms_norm(x += o, ffn_norm)                        RMSNorm
      g|u = W_gu h;  s = silu(g) * u;  d = W_down s         mat-vec, SwiGLU, mat-vec
    h = rms_norm(x += d, output_norm);  logits = W_out h;  argmax

A mixture-of-experts layer's FFN (Mixtral's layout) instead:

      ids, w = top-k of softmax(W_router h)                 mat-vec, ExpertRouting
      g|u[j] = W_gu[ids[j]] h;  s[j] = silu(g[j]) * u[j]    MUL_MAT_ID, SwiGLU over the slots
      d[j] = W_down[ids[j]] s[j];  d = sum_j w[j] d[j]      MUL_MAT_ID, ExpertSum

with the ids written on the device by the router's op, in range by its
construction (vkq.graph's note on ids).

The weight matrices are those of the host engine (vkq.llama.matvecs, the
same stacking), each mat-vec the dispatcher's pipeline for it. On the int8
path their inputs come quantized from the op that makes them: the norms,
the attention and SwiGLU also write their output's Q8_1 blocks. The KV
cache is float32, on the device, (n_head_kv, ctx, head_dim) per layer; the
RoPE table covers ctx positions. A prompt runs through the same step, token
by token.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..activations import ACTIVATION_PLANES, GENERATE_ACTIVATIONS, check_activations
from ..backend import Backend
from ..dispatch.paths import check_request, resolve_path
from ..ops import q8_1_words
from .decoding import Decoder
from .matvecs import VkqMatvecs
from .model import LlamaFile
from .vector_ops import (Argmax, Attention, AttentionShape, EmbedRows, ExpertRouting, ExpertSum, Q8_1Output, RMSNorm,
                         SwiGLU, Vectors, attention_scratch_size, rope_table)


class GpuLlama(Decoder):
    """A llama GGUF model whose whole decode step runs on the device.
    Arguments as vkq.llama.host.LlamaModel's (no numpy path: that is the host
    decoder's reference); ctx: the positions the KV cache holds (default:
    the model's context length; `vkq generate` gives it what the prompt and
    the new tokens need). weights: the uploaded matrices of a host engine of
    the same file and backend, to share instead of uploading them again.
    timestamps: time the kernels of every replay (GPU timestamps; on lavapipe
    latching them after every op makes the step about 13% slower)."""

    def __init__(self, model_file: str | Path | None, backend: Backend | None = None, path_mode: str | None = None,
                 *, activations: str | None = None, fuse: bool = True, device: int | None = None,
                 ctx: int | None = None, file: LlamaFile | None = None, weights: VkqMatvecs | None = None,
                 timestamps: bool = False):
        mode = check_request(path_mode or "auto")
        self.activations = check_activations(activations or GENERATE_ACTIVATIONS)
        self.path_mode = mode
        self.file = f = file if file is not None else LlamaFile(model_file, fuse)
        self._set_context(ctx)
        self.backend = backend if backend is not None else Backend(device)
        if weights is not None and (weights.backend is not self.backend or set(weights.weights) != set(
                gr.names for gr in f.groups)):
            raise ValueError("weights: the mat-vecs of a host engine of this file, on this backend")
        self.weights = (weights or VkqMatvecs(f.tensors, f.groups, self.backend, mode, self.activations)).weights
        self.submits = 0
        self.kernel_seconds = 0.0  # GPU time of the replays so far (timestamps)
        self.device_label = "kernels" if timestamps else None
        self._build(timestamps)
        self.reset()

    @property
    def label(self) -> str:
        return f"engine graph, path {self.path_mode}" + (
            "" if self.path_mode == "dmmv" else f", int8 activations {self.activations}")

    def counters(self) -> tuple[float, int]:
        return self.kernel_seconds, self.submits

    # -- the recorded step ---------------------------------------------------------
    def _build(self, timestamps: bool) -> None:
        f, cfg, b = self.file, self.config, self.backend
        dev = b.device
        g = self.graph = b.graph(timestamps=timestamps)
        shape = AttentionShape(cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_rot, self.ctx)
        qd = cfg.n_head * cfg.head_dim

        def constant(values: np.ndarray, name: str):
            t = b.tensor(values.size, name=name)
            t.write(np.ascontiguousarray(values, np.float32).reshape(-1))
            return t

        self.token = g.input(b.tensor(1, dtype=np.int32, name="token"))
        self.pos = g.input(b.tensor(1, dtype=np.int32, name="position"))
        table = constant(rope_table(f.inv_freq, self.ctx), "RoPE table")
        scores = b.tensor(attention_scratch_size(dev, shape), name="attention scratch")
        self.k_cache = [b.tensor(shape.cache_size, name=f"K cache {i}") for i in range(cfg.n_layer)]
        self.v_cache = [b.tensor(shape.cache_size, name=f"V cache {i}") for i in range(cfg.n_layer)]
        norms = [{k: constant(v, f"{k} {i}") for k, v in layer.items()} for i, layer in enumerate(f.norms)]
        out_norm = constant(f.output_norm, "output_norm")
        k_used = cfg.n_expert_used
        # Each group's stacked output: one vector, or one per used expert (MUL_MAT_ID).
        y = {gr.names: b.tensor(sum(gr.rows), k_used if gr.n_expert else 1, name=gr.names[0]) for gr in f.groups}
        x = Vectors(b.tensor(cfg.n_embd, name="x"), cfg.n_embd)  # the residual stream
        h = b.tensor(cfg.n_embd, name="h")  # a norm's output: the input of a stage's mat-vecs
        attn = b.tensor(qd, name="attention")
        swiglu = b.tensor(cfg.n_ff, k_used or 1, name="swiglu")
        if cfg.is_moe:
            expert_ids = b.tensor(k_used, dtype=np.int32, name="expert ids")
            expert_weights = b.tensor(k_used, name="expert weights")
            moe_out = b.tensor(cfg.n_embd, name="experts' sum")

        def part(name: str) -> Vectors:
            """Where matrix `name`'s output sits: its group's tensor, at its rows."""
            gr = next(gr for gr in f.groups if name in gr.names)
            i = gr.names.index(name)
            return Vectors(y[gr.names], gr.rows[i], gr.offsets[i])

        def path(names) -> str | None:
            return resolve_path(self.weights[names].layout.fmt, self.path_mode)

        def matvec(names, x_in, ids=None) -> None:
            if ids is None:
                g.matvec(self.weights[names], x_in, path(names), activations=self.activations, out=y[names])
            else:
                g.matvec_id(self.weights[names], x_in, ids, path(names), activations=self.activations, out=y[names])

        def q8_1(t, readers) -> Q8_1Output | None:
            """A tensor for t's Q8_1 blocks, when a mat-vec that reads t takes the int8 path."""
            planes = ACTIVATION_PLANES[self.activations]
            if all(b.pipeline(self.weights[names], 1, path(names), self.activations).path != "mmvq"
                   for names in readers):
                return None
            return Q8_1Output(b.tensor(q8_1_words(1, t.stride, planes), t.n, dtype=np.uint32, name=f"{t.name} Q8_1"),
                              planes)

        # h is read by Q/K/V, the router and gate/up of every layer, and the output head.
        hq = q8_1(h, [names for layer in f.layers for names in layer.qkv + layer.gate_up
                      + ((layer.router,) if layer.router else ())] + [f.output_group])
        # (a head's output is whole Q8_1 blocks only when head_dim is a multiple of 32)
        attn_q = q8_1(attn, [layer.attn_output for layer in f.layers]) if cfg.head_dim % 32 == 0 else None
        swiglu_q = q8_1(swiglu, [layer.down for layer in f.layers])

        if f.output_name == "token_embd.weight":
            embd = self.weights[f.output_group]  # the tied output head: one upload serves both
        else:
            t = f.tensors["token_embd.weight"]
            embd = b.upload(t.qtype, t.shape, t.data)
        self._embd = embd
        g.add(EmbedRows(dev, embd, self.token, x))
        residual = None  # the FFN output of the layer before, added into x by the next norm
        for i, layer in enumerate(f.layers):
            n = f"blk.{i}."
            g.add(RMSNorm(dev, x, norms[i]["attn_norm"], Vectors(h, cfg.n_embd), cfg.rms_eps, residual=residual,
                          xq=hq))
            for names in layer.qkv:
                matvec(names, h)
            q, k, v = part(n + "attn_q.weight"), part(n + "attn_k.weight"), part(n + "attn_v.weight")
            g.add(Attention(dev, shape, q, k, v, self.k_cache[i], self.v_cache[i], table, self.pos, scores,
                            Vectors(attn, qd), xq=attn_q))
            matvec(layer.attn_output, attn)
            g.add(RMSNorm(dev, x, norms[i]["ffn_norm"], Vectors(h, cfg.n_embd), cfg.rms_eps,
                          residual=part(n + "attn_output.weight"), xq=hq))
            if layer.router is None:
                for names in layer.gate_up:
                    matvec(names, h)
                g.add(SwiGLU(dev, part(n + "ffn_gate.weight"), part(n + "ffn_up.weight"), Vectors(swiglu, cfg.n_ff),
                             xq=swiglu_q))
                matvec(layer.down, swiglu)
                residual = part(n + "ffn_down.weight")
                continue
            # The experts: router, top-k, MUL_MAT_ID of gate|up for the chosen ones, SwiGLU, down, weighted sum.
            matvec(layer.router, h)
            g.add(ExpertRouting(dev, part(n + "ffn_gate_inp.weight"), expert_ids, expert_weights, k_used))
            for names in layer.gate_up:
                matvec(names, h, expert_ids)
            gate, up = part(n + "ffn_gate_exps.weight"), part(n + "ffn_up_exps.weight")
            g.add(SwiGLU(dev, gate, up, Vectors(swiglu, cfg.n_ff), n=k_used, xq=swiglu_q))
            matvec(layer.down, swiglu, expert_ids)
            g.add(ExpertSum(dev, y[layer.down], expert_weights, Vectors(moe_out, cfg.n_embd), k_used))
            residual = Vectors(moe_out, cfg.n_embd)
        g.add(RMSNorm(dev, x, out_norm, Vectors(h, cfg.n_embd), cfg.rms_eps, residual=residual, xq=hq))
        matvec(f.output_group, h)
        self.logits_t = g.output(y[f.output_group])
        self.next_token = g.output(b.tensor(1, dtype=np.int32, name="next token"))
        g.add(Argmax(dev, Vectors(self.logits_t, f.n_vocab), self.next_token))

    def warm_up(self, n_prompt: int = 0) -> float:
        """The first replay (it records the graph and uploads the constants) on
        an empty KV cache, left empty. Returns the seconds it took."""
        if self.n_past:
            raise RuntimeError("warm_up() needs an empty KV cache (reset() first)")
        t0 = time.perf_counter()
        self._replay(0, 0)
        return time.perf_counter() - t0

    def _replay(self, token: int, position: int) -> None:
        self.token.write(np.array([token], np.int32))
        self.pos.write(np.array([position], np.int32))
        self.graph.run()
        self.submits += 1
        self.kernel_seconds += self.graph.kernel_seconds or 0.0

    # -- the forward pass ---------------------------------------------------------
    def reset(self) -> None:
        # Positions past n_past are never read: the cache needs no clearing.
        self.n_past = 0

    def feed(self, tokens, want_logits: bool = True):
        tokens = self.file.check_ids(tokens)
        if not tokens:
            raise ValueError("no tokens to feed (empty prompt?)")
        self.check_room(self.n_past, len(tokens))
        for t in tokens:
            self._replay(t, self.n_past)
            self.n_past += 1
        return int(self.next_token.read()[0]), (self.logits_t.read() if want_logits else None)
