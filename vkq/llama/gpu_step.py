"""The llama decode step on the device: recorded once, one submit per token.

Per token the host writes two int32s (the token id and its position) and
reads back one, the argmax of the logits (the logits come back too, 4 bytes
per vocabulary entry, and are read only when asked). In between, everything
runs on the device, layer by layer:

    x = embed(token)  (Gemma: * sqrt(n_embd))               EmbedRows
    per layer:
      h = rms_norm(x (+= ffn_down of the layer before), attn_norm)   RMSNorm
      q|k|v = W_qkv h                                       mat-vec (stacked)
      (Qwen2: q|k|v += biases; Qwen3, Gemma 3: q, k RMS-normed per head) HeadNorm
      K/V cache[pos] = rope(k), v;                          Attention
      a = attention(rope(q), K/V cache[0..pos])
        (Gemma, gpt-oss: the layer's window of positions, its RoPE table; Gemma 2: soft-capped
        scores; gpt-oss: each head's sink in the softmax's denominator)
      o = W_o a  (gpt-oss: += bias; Gemma: o = rms_norm(o, post_attention_norm))   HeadNorm, RMSNorm
      h = rms_norm(x += o, ffn_norm)                        RMSNorm
      s = silu(W_gate h) * (W_up h);  d = W_down s         mat-vec with SwiGLU, mat-vec
        (Gemma: gelu, GeGLU, an op of its own; d = rms_norm(d, post_ffw_norm))
    h = rms_norm(x += d, output_norm);  logits = W_out h;  argmax
      (Gemma 2: logits soft-capped first)                   SoftCap

With fold (GpuLlama's) the residual adds x += o and x += d run in the
mat-vecs that make o and d (Graph.matvec's accumulate: the same bits), and
the norm after each reads x alone; a mixture-of-experts layer's weighted
slots and the mat-mat prompt steps' products stay added by the norm.

A mixture-of-experts layer's FFN (Mixtral's layout) instead:

      ids = top-k of l = W_router h, w = softmax(l)[ids]    mat-vec, ExpertRouting
      g|u[j] = W_gu[ids[j]] h;  s[j] = silu(g[j]) * u[j]    MUL_MAT_ID, SwiGLU over the slots
      d[j] = W_down[ids[j]] s[j]                            MUL_MAT_ID
      (d = sum_j w[j] d[j]: the next norm's residual)       RMSNorm

with the ids written on the device by the router's op, in range by its
construction (vkq.graph's note on ids); gpt-oss's biases on the router
(HeadNorm) and on each slot's gate, up and down (ExpertBias: its expert's
row), and its clamped SwiGLU (SwiGLU's glu "oai").

The weight matrices are those of the host engine (vkq.llama.matvecs, the
same stacking), each mat-vec the dispatcher's pipeline for it. Where gate
and up are one stacked matrix (fuse), SwiGLU is fused into their mat-vec
(Graph.matvec's glu: the same bits, one dispatch fewer per layer); else
it is an op of its own. On the int8
path their inputs come quantized from the op that makes them: the norms,
the attention and the SwiGLU op also write their output's Q8_1 blocks (a
fused SwiGLU's output the graph quantizes). The KV
cache is float32, on the device, (n_head_kv, ctx, head_dim) per layer; the
RoPE table covers ctx positions.

A prompt goes in chunks of up to prompt_chunk tokens (default 512), one
submit each: the step recorded for n tokens, the vector ops over n vectors,
the output head on the last token only. Its weight products take one of two
kinds of kernel (prompt_kernels):
- "matmul": the tiled mat-mat (Graph.matmul(tiled=True), Graph.matmul_id
  for the experts), which reads each weight once per chunk,
  for every chunk whatever its size, with SwiGLU an op of its own. Every op
  computes a token's values in one order whatever its chunk, so a prompt's
  logits are the same bits however it is cut; they differ from the decode
  step's by rounding (the mat-mat sums in another order than the mat-vec).
- "matvec": the decode step's mat-vecs over chunks of up to MAX_COLS
  tokens: the logits equal those of the prompt fed token by token, bit for
  bit (the dispatcher keeps one summation order per matrix whatever the
  column count, vkq.dispatch.choose).
The device class picks one (vkq.dispatch.tiles.prompt_kernels).
Either way the attention appends the chunk's keys, then attends for each
query over the caches: through the mat-vecs in a query's decode-step order
(vkq.llama.vector_ops.Attention), through the mat-mats in tiles of queries
and keys (vkq.llama.chunk_attention.TiledAttention: each key read once per
tile of queries, no scores kept; a query's bits do not depend on its chunk).
The step that verifies speculative decoding's drafts (feed_rows) is the
decode step for n <= MAX_COLS tokens with the output norm and head over all
of them: each row the logits of its token fed alone, so the drafts greedy
keeps are its own choices.
Greedy's steps_per_submit chains k one-token decode steps in one graph
(_record_chain): each step's argmax is written where the next step's
embedding reads its token, so the host submits once and reads k tokens
and their logits; the steps share one set of intermediate tensors, each has
its own position, logits and argmax.
A generation that samples (Decoder.set_sampling, with settings the device's
sampler takes) runs steps recorded with the sampler op in the argmax's place
(vkq.llama.sample_op.Sample): the same one submit per token, chains too.
Its settings and the ring of recent tokens its repeat penalty reads are
tensors the host writes before a submit.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..backend import Backend
from ..blocks.activations import ACTIVATION_PLANES, GENERATE_ACTIVATIONS, check_activations
from ..dispatch.paths import check_request, resolve_path
from ..ops import fused_swiglu_fits, q8_1_words
from ..resolve import MAX_COLS, resolve_tiles
from .config import STEPS_PER_SUBMIT_MAX
from .chunk_attention import TiledAttention
from .context_fit import PROMPT_STEPS_KEPT, fit_context
from .decoding import Decoder, check_prompt_kernels, submit_sizes
from .matvecs import VkqMatvecs, engine_label
from .model import LlamaFile
from .profile import MatvecView, Profile, step_shape
from .sample_op import PARAM_WORDS, RING_SLOTS, Sample, ring_of
from .sampling import Sampling
from .vector_ops import (MAX_HEAD_DIM, Argmax, Attention, AttentionShape, EmbedRows, ExpertBias, ExpertRouting,
                         HeadNorm, Q8_1Output, RMSNorm, SoftCap, SwiGLU, Vectors, WeightedSlots, attention_scratch_size,
                         attention_split, launches_of, rope_table)


CHAINS_KEPT = 2  # recorded chains of decode steps kept (GpuLlama._step)


def check_graph_engine(file: LlamaFile) -> None:
    """What the graph engine cannot run, refused before anything is uploaded:
    heads wider than its attention keeps in shared memory (the host engine
    attends in numpy, at any width)."""
    hd = file.config.head_dim
    if hd > MAX_HEAD_DIM:
        raise ValueError(f"{file.path.name}: heads of {hd} values; the graph engine's attention takes at most "
                         f"{MAX_HEAD_DIM} (the host engine runs this model: --engine host)")


class GpuLlama(Decoder):
    """A llama GGUF model whose whole decode step runs on the device.
    Arguments as vkq.llama.host.LlamaModel's (no numpy path: that is the host
    decoder's reference); ctx: the positions the KV cache holds (default:
    the model's context length, or the most the device holds where that is
    less, with a warning; a ctx asked for that does not fit is refused:
    vkq.llama.context_fit; `vkq generate` gives it what the prompt and the
    new tokens need). weights: the uploaded matrices of a host engine of
    the same file and backend, to share instead of uploading them again.
    timestamps: time the kernels of every replay (GPU timestamps; on lavapipe
    latching them after every op makes the step about 13% slower); profile:
    that, and every replay's op times kept for a profile (`profile()`).
    spread (default on): where the device is a GPU, the norms take wide
    workgroups (rms_norm_launch), the argmax and the attention spread over
    workgroups (argmax_parts, attention_split), and on any device a
    workgroup attends for the query heads of one K/V head
    (attention_heads); off, one subgroup-wide workgroup per vector and per
    query head, as before (a before/after on the same device; lavapipe's
    loop budget still splits long attention). launches: a GPU class (a key
    of vector_ops.GPU_LAUNCH_CAPS) whose launches the vector ops take on
    this device (vector_ops.LaunchesOf: the launches `step_shape` measures,
    run here). fold (default on): ops folded into the dispatch before them
    where that saves a pass over a vector or a dispatch, the same bits
    (off: each op a dispatch of its own, a before/after on the same
    device). prompt_kernels: "matmul" or "matvec", the kernels of a
    prompt's chunks (the module's note; default: the device class's,
    vkq.dispatch.tiles.prompt_kernels, `prompt_kernels_source` says why);
    prompt_chunk: a prompt's tokens per submit (default and most: 512 with
    "matmul", MAX_COLS with "matvec"; 1: token by token)."""

    def __init__(self, model_file: str | Path | None, backend: Backend | None = None, path_mode: str | None = None,
                 *, activations: str | None = None, fuse: bool = True, device: int | None = None,
                 ctx: int | None = None, file: LlamaFile | None = None, weights: VkqMatvecs | None = None,
                 timestamps: bool = False, profile: bool = False, prompt_chunk: int | None = None,
                 prompt_kernels: str | None = None, spread: bool = True, fold: bool = True,
                 launches: str | None = None):
        mode = check_request(path_mode or "auto")
        self.activations = check_activations(activations or GENERATE_ACTIVATIONS)
        self.path_mode = mode
        check_prompt_kernels(prompt_kernels)
        self.spread = spread
        self.fold = fold
        self.file = f = file if file is not None else LlamaFile(model_file, fuse)
        check_graph_engine(f)
        self._set_context(ctx)
        self.backend = backend if backend is not None else Backend(device)
        self._set_prompt(prompt_kernels, prompt_chunk, self.backend.dispatcher.device_class)
        self.launches = launches
        self.launch_device = launches_of(self.backend.device, launches)  # the vector ops' device
        # (one buffer's limit before the upload, the memory the weights leave after it)
        self.ctx = fit_context(self.launch_device, f, self.ctx, spread, self.attention_queries, ctx is not None,
                               memory=False, stacklevel=2, prompt_chunk=self._tiled_chunk)
        if weights is not None and (weights.backend is not self.backend or set(weights.weights) != set(
                gr.names for gr in f.groups)):
            raise ValueError("weights: the mat-vecs of a host engine of this file, on this backend")
        self.weights = (weights or VkqMatvecs(f.tensors, f.groups, self.backend, mode, self.activations)).weights
        self.submits = 0
        self.kernel_seconds = 0.0  # GPU time of the replays so far (timestamps)
        self.timestamps = timestamps or profile
        self.device_label = "kernels" if self.timestamps else None
        # per step size (1: decode steps; n: a prompt's chunks of n; ("chain", n): submits of n chained
        # decode steps), each replay's op times
        self.op_samples: dict[int | tuple[str, int], list[list[tuple[str, float]]]] | None = {} if profile else None
        self._make_state(asked=ctx is not None)
        # The recorded steps by (kind, tokens): "decode" (1 token, or up to
        # MAX_COLS: the prompt's chunks with prompt_kernels "matvec"), "rows"
        # (feed_rows: every token's logits), "prompt" (the mat-mat chunks).
        self._steps: dict[tuple[str, int], _Step] = {}
        self.record_seconds = 0.0  # time spent recording steps on their first use by feeds (not warm_up's)
        self.step_graph = self._step("decode", 1).graph  # the decode step
        self.reset()

    @property
    def label(self) -> str:
        return engine_label("graph", self.path_mode, [cfg.path for _, cfg in self.step_graph.matvecs],
                            self.activations)

    @property
    def prompt_kernel_names(self) -> str | None:
        """The kernels the recorded prompt steps' weight products ran ("mul_mm
        float", ...; the mat-vecs' paths with prompt_kernels "matvec"); None
        where no prompt step was recorded."""
        graphs = [step.graph for (kind, n, *_), step in self._steps.items()
                  if kind == self._chunk_key(n)[0] and (kind == "prompt" or n > 1)]
        names = [cfg.kernel for g in graphs for _, cfg in g.matmuls] + \
                [f"{cfg.path} mat-vec" for g in graphs if not self.tiled_prompt for _, cfg in g.matvecs]
        return ", ".join(dict.fromkeys(names)) if names else None

    @property
    def graph(self):
        """The decode step's graph."""
        return self.step_graph

    @property
    def _tiled_chunk(self) -> int:
        """The mat-mat prompt steps' tokens (0: the prompt takes the decode step's)."""
        return self.prompt_chunk if self.tiled_prompt else 0

    @property
    def attention_queries(self) -> int:
        """The most queries one replay's attention keeps scores of: a prompt's
        chunk's, or with the mat-mat prompt steps (whose tiled attention
        keeps none) feed_rows' MAX_COLS."""
        return MAX_COLS if self.tiled_prompt else self.prompt_chunk

    def _chunk_key(self, n: int) -> tuple[str, int]:
        """The step a prompt's chunk of n tokens takes."""
        return ("prompt" if self.tiled_prompt else "decode", n)

    def counters(self) -> tuple[float, int]:
        return self.kernel_seconds, self.submits

    def recording_seconds(self) -> float:
        return self.record_seconds

    def step_counts(self, steps: int = 1) -> tuple[float, float]:
        if steps == 1:
            return self.step_graph.dispatch_counts()
        dispatches, barriers = self._step("chain", steps).graph.dispatch_counts()
        return dispatches / steps, barriers / steps  # (a barrier between two steps of a chain: a fraction per step)

    def profile(self, steps: int, n: int = 1, chained: bool = False) -> Profile:
        """The profile of the last `steps` replays of the step for n tokens
        (1: decode steps; n > 1: a prompt's chunks of n; chained: submits of
        n chained decode steps, greedy's steps_per_submit) of a decoder made
        with profile=True. Its ops and their times are per replay, the time
        per token over its n tokens."""
        if self.op_samples is None:
            raise RuntimeError("this decoder keeps no op times: make it with profile=True")
        run = self.op_samples.get(("chain", n) if chained else n, [])
        if not 1 <= steps <= len(run):
            what = (f"submits of {n} chained decode steps" if chained else "decode steps" if n == 1
                    else f"steps of {n} tokens")
            raise ValueError(f"{steps} {what} to profile; {len(run)} were run")
        step = self._step("chain", n) if chained else self._steps[("decode", 1) if n == 1 else self._chunk_key(n)]
        return Profile.of_replays(run[-steps:], *step.graph.dispatch_counts(), tokens=n)

    def step_launches(self, n: int = 1):
        """The launches of the step for n tokens (1: a decode step), per op
        (vkq.llama.profile.step_shape: workgroups, invocations, serial depth),
        as this decoder's vector ops take them (`launches`); with `launches`
        a GPU class, the mat-vecs' as that class's table chooses them
        (vkq.llama.profile.MatvecView: their path and launch, not run here)."""
        view = None if self.launches is None else MatvecView.of(self.backend.device, self.launches, self.path_mode,
                                                                self.activations)
        return step_shape(self._step(*(("decode", 1) if n == 1 else self._chunk_key(n))).graph, view)

    def profiled_steps(self, n: int = 1, chained: bool = False) -> int:
        """Replays of the step for n tokens (chained: of n chained decode steps) that a profile can cover."""
        return len((self.op_samples or {}).get(("chain", n) if chained else n, []))

    # -- what every recorded step shares -----------------------------------------------
    def _make_state(self, asked: bool) -> None:
        """The weights' companions that every step graph reads or writes: the
        token embedding's upload, the KV caches, the RoPE table, the norms'
        weights, the attention scratch. Those that grow with the context are
        checked against the device first (vkq.llama.context_fit); asked: the
        caller chose the context (else it is the model's, and where that does
        not fit, the largest that does)."""
        f, cfg, b = self.file, self.config, self.backend

        def constant(values: np.ndarray, name: str):
            t = b.tensor(values.size, name=name)
            t.write(np.ascontiguousarray(values, np.float32).reshape(-1))
            return t

        if f.output_name == "token_embd.weight":
            self._embd = self.weights[f.output_group]  # the tied output head: one upload serves both
        else:
            t = f.tensors["token_embd.weight"]
            self._embd = b.upload(t.qtype, t.shape, t.data)
        self.ctx = fit_context(self.launch_device, f, self.ctx, self.spread, self.attention_queries, asked,
                               stacklevel=3, prompt_chunk=self._tiled_chunk)
        self.shape = shape = AttentionShape(cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_rot, self.ctx,
                                            neox=cfg.architecture.neox, softcap=cfg.attn_softcap,
                                            scale=cfg.attn_scale)
        # Each layer's: its sliding window, where the architecture slides there (Gemma).
        self.shapes = [replace(shape, window=cfg.window(i)) for i in range(cfg.n_layer)]
        # One table per set of angles the layers take (Gemma 3's sliding layers their own).
        tables: dict[int, object] = {}
        for i in range(cfg.n_layer):
            inv_freq = f.layer_inv_freq(i, self.ctx)
            if id(inv_freq) not in tables:
                tables[id(inv_freq)] = constant(rope_table(inv_freq, self.ctx, cfg.rope_mscale),
                                                f"RoPE table {len(tables)}")
        self.ropes = [tables[id(f.layer_inv_freq(i, self.ctx))] for i in range(cfg.n_layer)]
        dev = self.launch_device
        self.attention_split = attention_split(dev, shape, self.spread)
        self.scores = b.tensor(attention_scratch_size(dev, shape, self.attention_split, self.attention_queries),
                               name="attention scratch")
        self.k_cache = [b.tensor(shape.cache_size, name=f"K cache {i}") for i in range(cfg.n_layer)]
        self.v_cache = [b.tensor(shape.cache_size, name=f"V cache {i}") for i in range(cfg.n_layer)]
        self.norm_weights = [{k: constant(v, f"{k} {i}") for k, v in layer.items()} for i, layer in enumerate(f.norms)]
        # The Q/K/V biases of each stacked group, one vector over its rows (zeros
        # for a matrix without one), and the per-head norms' weights, by role.
        groups = {gr.names: gr for gr in f.groups}
        self.qkv_biases = [{names: constant(np.concatenate([
            biases.get(nm.split(".")[-2], np.zeros(rows, np.float32)) for nm, rows in zip(names, groups[names].rows)]),
            f"{names[0]} bias") for names in layer.qkv if any(nm.split(".")[-2] in biases for nm in names)}
            for layer, biases in zip(f.layers, f.biases)]
        self.head_norm_weights = [{r: constant(v, f"{r}_norm {i}") for r, v in hn.items()}
                                  for i, hn in enumerate(f.head_norms)]
        self.out_norm = constant(f.output_norm, "output_norm")
        # gpt-oss's: each layer's attention sinks, attention output's bias, and the router's and experts' biases.
        self.sinks = [None if v is None else constant(v, f"attn_sinks {i}") for i, v in enumerate(f.sinks)]
        self.out_biases = [constant(b["attn_output"], f"attn_output bias {i}") if "attn_output" in b else None
                           for i, b in enumerate(f.biases)]
        self.expert_biases = [{r: constant(v, f"{r} bias {i}") for r, v in eb.items()}
                              for i, eb in enumerate(f.expert_biases)]
        # The device sampler's settings (Sampling.params) and the ring of recent tokens it reads (sample_op).
        self.sample_params = b.tensor(PARAM_WORDS, dtype=np.uint32, name="sampler settings")
        self.sample_params.write(np.zeros(PARAM_WORDS, np.uint32))
        self.sample_ring = b.tensor(RING_SLOTS, dtype=np.int32, name="recent tokens")
        self.sample_ring.write(np.full(RING_SLOTS, -1, np.int32))

    # -- sampling ------------------------------------------------------------------
    def sampler_place(self, sampling: Sampling) -> str:
        return "device" if sampling.on_device else "host"

    def set_sampling(self, sampling: Sampling | None) -> None:
        super().set_sampling(sampling)
        if sampling is not None and sampling.on_device:
            self.sample_params.write(sampling.params())

    @property
    def _samples(self) -> bool:
        """The steps run now draw on the device (else argmax; the host samples from their logits)."""
        return self.sampling is not None and self.sampling.on_device

    def _step(self, kind: str, n: int) -> "_Step | _Chain":
        """The recorded step of a kind ("decode", "rows", "prompt": see
        __init__; "chain": n one-token decode steps in one submit,
        _record_chain) for n tokens, made on first use. Of the mat-mat prompt
        steps the full chunk's and the last PROMPT_STEPS_KEPT - 1 others are
        kept (a prompt's remainders take every size); of the chains the last
        CHAINS_KEPT used (a generation takes chains of steps_per_submit and one
        shorter one at its end)."""
        sampled = self._samples and kind != "rows"  # (speculative decoding's steps never sample)
        key = (kind, n, "sampled") if sampled else (kind, n)
        step = self._steps.pop(key, None)
        if step is None:
            t0 = time.perf_counter()
            step = (self._record_chain(n, sampled) if kind == "chain"
                    else self._record_step(n, every_row=kind == "rows", tiled=kind == "prompt", sample=sampled))
            step.graph.record()
            self.record_seconds += time.perf_counter() - t0
        self._steps[key] = step  # (last: the most recently used)
        rests = [k for k in self._steps if k[0] == "prompt" and k[1] != self.prompt_chunk]
        for k in rests[:max(len(rests) - (PROMPT_STEPS_KEPT - 1), 0)]:
            del self._steps[k]
        chains = [k for k in self._steps if k[0] == "chain"]
        for k in chains[:max(len(chains) - CHAINS_KEPT, 0)]:
            del self._steps[k]
        return step

    # -- the recorded step ---------------------------------------------------------
    def _record_step(self, n: int, every_row: bool = False, tiled: bool = False, *, graph=None, tokens=None,
                     shared: list | None = None, sample: bool = False) -> "_Step":
        """The graph of one forward pass over n tokens at consecutive positions
        (n = 1: a decode step); the last token's logits and their argmax come
        back, or with every_row each token's (the output norm and head over
        n columns: each column the bits of one, as every mat-vec's). tiled:
        the weight products but the output head's (one column, the mat-vec)
        on the mat-mat kernels. graph, tokens, shared: the step recorded into
        `graph` after the steps there (_record_chain), its token read from
        `tokens` (written on the device by the step before), its
        intermediate tensors those of `shared` (the i-th it makes is
        shared[i]; the first step records them there): each is written in
        a step before that step reads it, so the steps of one chain take
        turns with one set. sample: the last token's next one drawn by the
        sampler op (sample_op.Sample), not the argmax."""
        f, cfg, b = self.file, self.config, self.backend
        dev = self.launch_device
        g = graph if graph is not None else b.graph(timestamps=self.timestamps)
        made = 0

        def scratch(length: int, n_vec: int = 1, dtype=np.float32, *, name: str):
            """An intermediate tensor: a new one, or with `shared` the chain's."""
            nonlocal made
            if shared is None:
                return b.tensor(length, n_vec, dtype, name=name)
            if made == len(shared):
                shared.append(b.tensor(length, n_vec, dtype, name=name))
            t, made = shared[made], made + 1
            if (t.n, t.length, t.dtype) != (n_vec, length, np.dtype(dtype)):  # (every step makes the same ones)
                raise RuntimeError(f"a chain's step made {name} unlike its first step's {t!r}")
            return t

        qd = cfg.n_head * cfg.head_dim
        if tokens is None:
            tokens = g.input(b.tensor(n, dtype=np.int32, name="tokens"))
        positions = g.input(b.tensor(n, dtype=np.int32, name="positions"))
        k_used = cfg.n_expert_used
        n_slots = n * k_used  # MUL_MAT_ID slots: each token's used experts
        # Each group's stacked output: a vector per token, or per token and used expert (MUL_MAT_ID). The
        # groups of one role in every layer (attn_q+attn_k+attn_v, ffn_down, ...) share one tensor: a layer
        # reads its outputs before the next layer writes them (the graph puts the barriers), and a step's
        # memory, and the time to allocate and upload it, stays that of one layer, not n_layer.
        by_role: dict[tuple, object] = {}

        def output_of(gr):
            key = (tuple(nm.split(".")[-2] for nm in gr.names), sum(gr.rows), n_slots if gr.n_expert else n)
            if key not in by_role:
                by_role[key] = scratch(key[1], key[2], name="+".join(key[0]))
            return by_role[key]

        y = {gr.names: output_of(gr) for gr in f.groups}
        # The residual stream, in two tensors a norm that adds a residual reads one
        # of and writes the other (RMSNorm: a vector spread over workgroups is not
        # written back in place); the second is made at its first use (with fold a
        # dense model's decode adds every residual in its mat-vecs: one tensor).
        streams = [Vectors(scratch(cfg.n_embd, n, name="x0"), cfg.n_embd)]
        x = streams[0]

        def other(stream: Vectors) -> Vectors:
            """The stream a norm writes when it reads `stream`."""
            if len(streams) == 1:
                streams.append(Vectors(scratch(cfg.n_embd, n, name="x1"), cfg.n_embd))
            return streams[1] if stream is streams[0] else streams[0]

        h = scratch(cfg.n_embd, n, name="h")  # a norm's output: the input of a stage's mat-vecs
        n_out = n if every_row else 1  # the tokens whose logits come back: the last ones
        h_last = scratch(cfg.n_embd, n_out, name="h of the output")  # the output norm's: the output head's input
        attn = scratch(qd, n, name="attention")
        arch = cfg.architecture
        # The attention output's bias is added a head's width at a time where that divides it (gpt-oss's)
        bias_width = cfg.head_dim if cfg.n_embd % cfg.head_dim == 0 else cfg.n_embd
        # The attention's and the FFN's outputs RMS-normed (Gemma's post-norms), each the residual of the norm after it.
        attn_post, ffn_post = ((scratch(cfg.n_embd, n, name=f"{what} post-norm") for what in ("attention", "ffn"))
                               if arch.post_norms else (None, None))
        swiglu = scratch(cfg.n_ff, n_slots or n, name="swiglu")
        if cfg.is_moe:
            expert_ids = scratch(n_slots, dtype=np.int32, name="expert ids")
            expert_weights = scratch(n_slots, name="expert weights")

        def part(name: str) -> Vectors:
            """Where matrix `name`'s output sits: its group's tensor, at its rows."""
            gr = next(gr for gr in f.groups if name in gr.names)
            i = gr.names.index(name)
            return Vectors(y[gr.names], gr.rows[i], gr.offsets[i])

        def path(names) -> str | None:
            return resolve_path(self.weights[names].layout.fmt, self.path_mode)

        expert_groups = {gr.names for gr in f.groups if gr.n_expert}

        def tiled_product(names) -> bool:
            """The group's product takes the mat-mat kernel (the output head's, one column, never)."""
            return tiled and names != f.output_group

        def matvec(names, x_in, ids=None, out=None, glu=False, accumulate=False) -> None:
            """The group's mat-vec (MUL_MAT_ID with ids; glu: SwiGLU fused;
            accumulate: added into out), or mat-mat, labelled by its matrices'
            roles for profiles."""
            role = "output" if names == f.output_group else "+".join(nm.split(".")[-2] for nm in names)
            kw = dict(activations=self.activations, out=y[names] if out is None else out,
                      label=role + ("+swiglu" if glu else ""))
            if ids is not None and tiled:
                g.matmul_id(self.weights[names], x_in, ids, path(names), **kw)
            elif ids is not None:
                g.matvec_id(self.weights[names], x_in, ids, path(names), glu=glu, **kw)
            elif tiled_product(names):
                g.matmul(self.weights[names], x_in, path(names), tiled=True, **kw)
            else:
                g.matvec(self.weights[names], x_in, path(names), glu=glu, accumulate=accumulate, **kw)

        def folds(names) -> bool:
            """The residual add x += W a runs in this group's mat-vec (fold), not
            in the norm after it: a plain mat-vec's (not a mat-mat's)."""
            return self.fold and not tiled_product(names)

        def reads_q8_1(names) -> bool:
            """The group's product takes the int8 path (the mat-vec's path of one
            column: every column count keeps it, vkq.dispatch.choose)."""
            w = self.weights[names]
            if tiled_product(names):
                experts = dict(mul_mat_id=True) if names in expert_groups else {}
                return resolve_tiles(b, w, n, path(names), None, self.activations, **experts).path == "mmvq"
            return b.pipeline(w, 1, path(names), self.activations).path == "mmvq"

        def q8_1(t, readers) -> Q8_1Output | None:
            """A tensor for t's Q8_1 blocks, when a product that reads t takes the int8 path."""
            planes = ACTIVATION_PLANES[self.activations]
            if not any(reads_q8_1(names) for names in readers):
                return None
            return Q8_1Output(scratch(q8_1_words(1, t.stride, planes), t.n, dtype=np.uint32, name=f"{t.name} Q8_1"),
                              planes)

        # h is read by Q/K/V, the router and gate/up of every layer; h_last by the output head.
        hq = q8_1(h, [names for layer in f.layers for names in layer.qkv + layer.gate_up
                      + ((layer.router,) if layer.router else ())])
        h_last_q = q8_1(h_last, [f.output_group])
        # (a head's output is whole Q8_1 blocks only when head_dim is a multiple of 32)
        # (a head's output is whole Q8_1 blocks only when head_dim is a multiple of 32; the tiled attention
        # writes floats alone, which the graph quantizes where attn_output takes the int8 path)
        attn_q = (q8_1(attn, [layer.attn_output for layer in f.layers])
                  if cfg.head_dim % 32 == 0 and not tiled else None)

        def fused_swiglu(layer) -> bool:
            """A layer's gate and up stacked in one matrix (gate first) that takes
            SwiGLU fused into its mat-vec: a dense layer's, and with fold a
            mixture-of-experts layer's stacks (MUL_MAT_ID)."""
            gu = layer.gate_up
            roles = ("ffn_gate_exps", "ffn_up_exps") if layer.router else ("ffn_gate", "ffn_up")
            return (not tiled and (layer.router is None or self.fold) and arch.glu == "silu"
                    and len(gu) == 1 and len(gu[0]) == 2
                    and all(nm.endswith(f".{role}.weight") for nm, role in zip(gu[0], roles))
                    and fused_swiglu_fits(self.weights[gu[0]]))

        # (a fused SwiGLU writes floats only: the graph quantizes them where down takes the int8 path)
        swiglu_q = q8_1(swiglu, [layer.down for layer in f.layers if not fused_swiglu(layer)])

        g.add(EmbedRows(dev, self._embd, tokens, x, n, scale=float(cfg.embed_scale)))
        residual = None  # the FFN output of the layer before, added into x by the next norm
        slots = None  # with experts: that output is their weighted sum
        for i, layer in enumerate(f.layers):
            pre = f"blk.{i}."
            norm = self.norm_weights[i]
            x_next = other(x) if residual else None
            g.add(RMSNorm(dev, x, norm["attn_norm"], Vectors(h, cfg.n_embd), cfg.rms_eps, n, residual=residual,
                          xq=hq, slots=slots, x_out=x_next, spread=self.spread))
            x = x_next if residual else x
            for names in layer.qkv:
                matvec(names, h)
            for names, bias in self.qkv_biases[i].items():
                # (elementwise: a head at a time spreads the stacked Q/K/V over workgroups, the same bits)
                rows = sum(next(gr for gr in f.groups if gr.names == names).rows)
                g.add(HeadNorm(dev, Vectors(y[names], rows), cfg.head_dim, n, bias=bias),
                      label="bias " + "+".join(nm.split(".")[-2] for nm in names))  # (one label for every layer)
            for role, weight in self.head_norm_weights[i].items():
                g.add(HeadNorm(dev, part(f"{pre}{role}.weight"), cfg.head_dim, n, weight=weight, eps=cfg.rms_eps),
                      label=f"HeadNorm {role}")
            q, k, v = part(pre + "attn_q.weight"), part(pre + "attn_k.weight"), part(pre + "attn_v.weight")
            if tiled:
                g.add(TiledAttention(dev, self.shapes[i], q, k, v, self.k_cache[i], self.v_cache[i], self.ropes[i],
                                     positions, Vectors(attn, qd), n, sinks=self.sinks[i]))
            else:
                g.add(Attention(dev, self.shapes[i], q, k, v, self.k_cache[i], self.v_cache[i], self.ropes[i],
                                positions, self.scores, Vectors(attn, qd), xq=attn_q, split=self.attention_split, n=n,
                                heads=None if self.spread else 1, spread=self.spread, fold=self.fold,
                                sinks=self.sinks[i]))
            if attn_post is not None:
                matvec(layer.attn_output, attn)
                g.add(RMSNorm(dev, part(pre + "attn_output.weight"), norm["post_attention_norm"],
                              Vectors(attn_post, cfg.n_embd), cfg.rms_eps, n, spread=self.spread),
                      label="RMSNorm post_attention_norm")
                x_next = other(x)
                g.add(RMSNorm(dev, x, norm[arch.ffn_norm], Vectors(h, cfg.n_embd), cfg.rms_eps, n,
                              residual=Vectors(attn_post, cfg.n_embd), xq=hq, x_out=x_next, spread=self.spread))
                x = x_next
            elif folds(layer.attn_output) and self.out_biases[i] is None:
                matvec(layer.attn_output, attn, out=x.tensor, accumulate=True)  # x += o
                g.add(RMSNorm(dev, x, norm[arch.ffn_norm], Vectors(h, cfg.n_embd), cfg.rms_eps, n, xq=hq,
                              spread=self.spread))
            else:
                matvec(layer.attn_output, attn)
                if self.out_biases[i] is not None:  # (elementwise: heads of head_dim spread it, the same bits)
                    g.add(HeadNorm(dev, part(pre + "attn_output.weight"), bias_width, n, bias=self.out_biases[i]),
                          label="bias attn_output")
                x_next = other(x)
                g.add(RMSNorm(dev, x, norm[arch.ffn_norm], Vectors(h, cfg.n_embd), cfg.rms_eps, n,
                              residual=part(pre + "attn_output.weight"), xq=hq, x_out=x_next, spread=self.spread))
                x = x_next
            if layer.router is None:
                if fused_swiglu(layer):
                    matvec(layer.gate_up[0], h, out=swiglu, glu=True)
                else:
                    for names in layer.gate_up:
                        matvec(names, h)
                    g.add(SwiGLU(dev, part(pre + "ffn_gate.weight"), part(pre + "ffn_up.weight"),
                                 Vectors(swiglu, cfg.n_ff), n, xq=swiglu_q, glu=arch.glu))
                if ffn_post is not None:
                    matvec(layer.down, swiglu)
                    g.add(RMSNorm(dev, part(pre + "ffn_down.weight"), norm["post_ffw_norm"],
                                  Vectors(ffn_post, cfg.n_embd), cfg.rms_eps, n, spread=self.spread),
                          label="RMSNorm post_ffw_norm")
                    residual, slots = Vectors(ffn_post, cfg.n_embd), None
                elif folds(layer.down):
                    matvec(layer.down, swiglu, out=x.tensor, accumulate=True)  # x += d
                    residual, slots = None, None
                else:
                    matvec(layer.down, swiglu)
                    residual, slots = part(pre + "ffn_down.weight"), None
                continue
            # The experts: router, top-k, MUL_MAT_ID of gate|up for the chosen ones, SwiGLU, down, weighted sum.
            matvec(layer.router, h)
            eb = self.expert_biases[i]
            if eb:
                g.add(HeadNorm(dev, part(pre + "ffn_gate_inp.weight"), cfg.n_expert, n, bias=eb["ffn_gate_inp"]),
                      label="bias ffn_gate_inp")
            g.add(ExpertRouting(dev, part(pre + "ffn_gate_inp.weight"), expert_ids, expert_weights, k_used, n))
            if fused_swiglu(layer):
                matvec(layer.gate_up[0], h, expert_ids, out=swiglu, glu=True)
            else:
                for names in layer.gate_up:
                    matvec(names, h, expert_ids)
                gate, up = part(pre + "ffn_gate_exps.weight"), part(pre + "ffn_up_exps.weight")
                for role, vectors in (("ffn_gate_exps", gate), ("ffn_up_exps", up)) if eb else ():
                    g.add(ExpertBias(dev, vectors, eb[role], expert_ids, n_slots, cfg.n_expert),
                          label=f"bias {role}")
                g.add(SwiGLU(dev, gate, up, Vectors(swiglu, cfg.n_ff), n_slots, xq=swiglu_q, glu=arch.glu))
            matvec(layer.down, swiglu, expert_ids)
            if eb:
                g.add(ExpertBias(dev, Vectors(y[layer.down], cfg.n_embd), eb["ffn_down_exps"], expert_ids, n_slots,
                                 cfg.n_expert), label="bias ffn_down_exps")
            residual = Vectors(y[layer.down], cfg.n_embd)
            slots = WeightedSlots(expert_weights, k_used)
        # Only the last n_out tokens' logits are wanted: the output norm and head take their vectors alone.
        first = n - n_out
        per_token = slots.k if slots else 1  # residual vectors per token
        last_residual = Vectors(residual.tensor, cfg.n_embd, residual.offset + first * per_token * residual.step,
                                residual.step) if residual else None
        last_slots = WeightedSlots(slots.weights, slots.k, first * slots.k) if slots else None
        last = first * x.tensor.stride
        g.add(RMSNorm(dev, Vectors(x.tensor, cfg.n_embd, last), self.out_norm, Vectors(h_last, cfg.n_embd),
                      cfg.rms_eps, n_out, residual=last_residual, xq=h_last_q, slots=last_slots,
                      x_out=Vectors(other(x).tensor, cfg.n_embd, last) if residual else None, spread=self.spread),
              label="RMSNorm output_norm")
        logits = g.output(b.tensor(f.n_vocab, n_out, name="logits"))
        matvec(f.output_group, h_last, out=logits)
        if cfg.final_softcap:
            g.add(SoftCap(dev, Vectors(logits, f.n_vocab), cfg.final_softcap, n_out))
        next_token = g.output(b.tensor(n_out, dtype=np.int32, name="next token"))
        if sample:
            g.add(Sample(dev, Vectors(logits, f.n_vocab), tokens, positions, g.input(self.sample_params),
                         g.input(self.sample_ring), next_token, 1, n - 1, parts=None if self.spread else 1))
        else:
            g.add(Argmax(dev, Vectors(logits, f.n_vocab), next_token, n_out, parts=None if self.spread else 1,
                         fold=self.fold))
        return _Step(n, g, tokens, positions, logits, next_token, every_row, tiled, sample)

    def warm_up(self, n_prompt: int = 0, speculative: bool = False, steps_per_submit: int = 1,
                n_tokens: int | None = None, sampling: Sampling | None = None) -> float:
        """Records every step a prompt of n_prompt tokens and the decode
        steps use (their graphs, pipelines and Kompute sequences; the
        constants uploaded), without running them: a prompt's chunks cost
        their recording here, not their compute, so this time depends on
        the chunk sizes (at most two: prompt_chunk and the rest), not on
        the prompt's length. speculative: and the steps that verify drafts
        (feed_rows); steps_per_submit: and the chains of decode steps
        greedy(steps_per_submit=) takes for n_tokens new tokens (default:
        the full chain only); sampling: the steps that sample with these
        settings instead of those that take the argmax (where the device's
        sampler takes them). Returns the seconds it took; the time a
        generation spends recording what warm_up did not is in its
        statistics (GenerationStats.record_seconds)."""
        self.check_steps_per_submit(steps_per_submit)
        t0 = time.perf_counter()
        before = self.record_seconds
        self.set_sampling(sampling if sampling is not None and not sampling.greedy else None)
        try:
            self._step("decode", 1)
            for n in sorted(set(self._chunks(n_prompt))):
                self._step(*self._chunk_key(n))
            for n in range(2, self.max_row_tokens + 1) if speculative else ():
                self._step("rows", n)
            n_steps = steps_per_submit if n_tokens is None else n_tokens - 1  # (the first token is the prompt's)
            chains = sorted(set(submit_sizes(steps_per_submit, min(n_steps, self.ctx))) - {1})
            for m in chains:
                self._step("chain", m)
        finally:
            self.set_sampling(None)
        if chains:
            # A chain's graph is many Python objects: left to the cyclic collector, its first full pass over
            # them (some 0.2 s on lavapipe's host) would fall in the decode steps timed next.
            gc.collect()
        self.record_seconds = before  # (warm_up's time is its own figure, not a generation's)
        return time.perf_counter() - t0

    def _chunks(self, n_tokens: int) -> list[int]:
        """The chunk sizes a prompt of n_tokens goes in."""
        c = self.prompt_chunk
        return [c] * (n_tokens // c) + ([n_tokens % c] if n_tokens % c else [])

    def _replay(self, step: "_Step", tokens: list[int], position: int) -> None:
        if step.sampled and self.sampling.penalizes:  # (the context's tokens before the last one's position;
            # the sampler reads the ring only for the repeat penalty)
            first = max(0, position + step.n - RING_SLOTS)
            self.sample_ring.write(ring_of(self.cache_tokens[first:position] + list(tokens), position + step.n - 1,
                                           first))
        step.tokens.write(np.array(tokens, np.int32))
        step.positions.write(np.arange(position, position + step.n, dtype=np.int32))
        self._run(step.graph)
        if self.op_samples is not None and not step.every_row and (step.n > 1 or not step.tiled):
            # (profiles cover the decode steps, n = 1, and the prompt's chunks of n > 1)
            self.op_samples.setdefault(step.n, []).append(step.graph.op_seconds())
        self._last = step

    def _replay_chain(self, chain: "_Chain", token: int, position: int) -> None:
        """A chain's replay: `token` into its first step, the steps at
        position, position + 1, ..."""
        if chain.steps[0].sampled and self.sampling.penalizes:  # (read only for the repeat penalty)
            first = max(0, position - RING_SLOTS)
            self.sample_ring.write(ring_of(self.cache_tokens[first:position], position, first))
        chain.steps[0].tokens.write(np.array([token], np.int32))
        for j, step in enumerate(chain.steps):
            step.positions.write(np.array([position + j], np.int32))
        self._run(chain.graph)
        if self.op_samples is not None:
            self.op_samples.setdefault(("chain", len(chain.steps)), []).append(chain.graph.op_seconds())

    def _run(self, graph) -> None:
        graph.run()
        self.submits += 1
        self.kernel_seconds += graph.kernel_seconds or 0.0

    def _record_chain(self, m: int, sample: bool = False) -> "_Chain":
        """m one-token decode steps recorded into one graph (one submit):
        each step's argmax is the next step's token, read by its embedding
        on the device; the host writes the first token and every step's
        position, and reads back every step's argmax and logits. The steps
        are _record_step's, over one set of intermediate tensors. (A step's
        argmax is below n_vocab, its logits' rows, which are the
        embedding's: ids in range by construction, as the host checks its own.)"""
        g = self.backend.graph(timestamps=self.timestamps)
        shared: list = []
        steps, tokens = [], None
        for _ in range(m):
            step = self._record_step(1, graph=g, tokens=tokens, shared=shared, sample=sample)
            steps.append(step)
            tokens = step.next_token
        return _Chain(g, tuple(steps))

    # -- the forward pass ---------------------------------------------------------
    def reset(self) -> None:
        # Positions past n_past are never read: the cache needs no clearing.
        self.n_past = 0
        self.cache_tokens = []

    def feed(self, tokens, want_logits: bool = True):
        """The tokens join the KV cache, a chunk of up to prompt_chunk per submit."""
        tokens = self.file.check_ids(tokens)
        if not tokens:
            raise ValueError("no tokens to feed (empty prompt?)")
        self.check_room(self.n_past, len(tokens))
        done = 0
        for n in self._chunks(len(tokens)):
            self._replay(self._step(*self._chunk_key(n)), tokens[done:done + n], self.n_past)
            self.n_past += n
            self.cache_tokens += tokens[done:done + n]
            done += n
        return self._last_choice(want_logits)

    def _last_choice(self, want_logits: bool = True):
        """The last replay's choice (the device's, or the host sampler's from its logits) and logits."""
        last = self._last
        if self.sampling is not None and not self._samples:
            logits = last.logits.read()
            return self._choice(logits), logits
        return int(last.next_token.read()[0]), (last.logits.read() if want_logits else None)

    def feed_one(self, token: int):
        """A decode step: the token through the one-token step (whatever the prompt's kernels)."""
        tokens = self.file.check_ids([token])
        self.check_room(self.n_past, 1)
        step = self._step("decode", 1)
        self._replay(step, tokens, self.n_past)
        self.n_past += 1
        self.cache_tokens += tokens
        return self._last_choice()

    max_steps_per_submit = STEPS_PER_SUBMIT_MAX

    def feed_steps(self, token: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        """m greedy decode steps in one submit (a chain of one-token steps,
        _record_chain; m = 1: feed_one)."""
        self.check_steps_per_submit(m)
        if m == 1:
            return super().feed_steps(token, m)
        tokens = self.file.check_ids([token])
        self.check_room(self.n_past, m)
        chain = self._step("chain", m)
        self._replay_chain(chain, tokens[0], self.n_past)
        self.n_past += m
        choices = np.array([int(s.next_token.read()[0]) for s in chain.steps], np.int64)
        self.cache_tokens += tokens + choices[:-1].tolist()
        return choices, np.stack([s.logits.read() for s in chain.steps])

    @property
    def max_row_tokens(self) -> int:
        # (the decode step's mat-vecs take up to MAX_COLS columns; the attention's scratch holds attention_queries)
        return min(MAX_COLS, self.attention_queries)

    def feed_rows(self, tokens):
        """The tokens join the KV cache in one step that returns every token's logits."""
        tokens = self._check_rows(tokens)
        n = len(tokens)
        step = self._step("rows", n)
        self._replay(step, tokens, self.n_past)
        self.n_past += n
        self.cache_tokens += tokens
        return step.next_token.read().astype(np.int64), step.logits.read().reshape(n, self.n_vocab)


@dataclass(frozen=True)
class _Step:
    """A recorded step for n tokens: its graph, inputs and outputs."""

    n: int
    graph: object
    tokens: object  # int32 (n,): the token ids
    positions: object  # int32 (n,): their positions
    logits: object  # the last token's (every_row: every token's, one row each)
    next_token: object  # their argmax (every_row: each row's)
    every_row: bool = False
    tiled: bool = False  # the weight products on the mat-mat kernels (a prompt's chunks)
    sampled: bool = False  # next_token is the sampler op's draw (else the argmax)


@dataclass(frozen=True)
class _Chain:
    """One-token decode steps recorded into one graph, one submit for all
    (GpuLlama._record_chain)."""

    graph: object
    steps: tuple[_Step, ...]  # in order: steps[j + 1].tokens is steps[j].next_token
