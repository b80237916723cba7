"""Greedy text generation of a llama-architecture GGUF model, every weight mat-vec on vkq.

    model = LlamaModel("SmolLM2-135M-Instruct.Q4_1.gguf")     # path_mode: None/"auto", "dmmv", "mmvq", "numpy"
    text, token_ids, stats = model.generate("The capital of France is", 32)
    print(text, stats.summary())

The decoder is llama.cpp's llama graph: RMSNorm, RoPE (ggml's "normal" mode:
adjacent pairs (x[2i], x[2i+1]) rotate; GGUF llama files store Q and K
permuted for it), grouped-query attention over a KV cache, SwiGLU FFN, final
norm and output head (`output.weight`, or the tied `token_embd.weight`), with
every hyper-parameter from the file's metadata. Each weight mat-vec is a
`Backend.matvec` on weights uploaded once; matrices of one stage that share an
input and a block type (Q/K/V, FFN gate/up) are uploaded as one matrix, their
rows stacked, and multiplied in one call. Only the small vector ops (norms,
RoPE, attention over the cache, SwiGLU's elementwise product, the embedding
row, which the gguf package dequantizes) run in numpy float32.

`path_mode="numpy"` is the reference: the same decoder, with the mat-vecs in
numpy float64 on weights the gguf package dequantizes; nothing else differs.

The prompt is processed in chunks of up to `vkq.MAX_COLS` tokens (one mat-vec
with that many columns per matrix, causal attention inside the chunk), then
one token per step. The tokenizer is the HF `tokenizers` library's byte-level
BPE built from the vocabulary and merges stored in the file.
"""
from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

from .activations import GENERATE_ACTIVATIONS, check_activations
from .backend import MAX_COLS, Backend
from .formats import get_format
from .gguf_io import GGUFTensor, metadata, open_gguf
from .tokenizer import GGUFTokenizer

SUPPORTED_ARCHS = ("llama",)
PATH_MODES = ("auto", "dmmv", "mmvq", "numpy")

# The matrices of one block by stage: a stage's matrices read the same input.
LAYER_STAGES = (("attn_q", "attn_k", "attn_v"), ("attn_output",), ("ffn_gate", "ffn_up"), ("ffn_down",))
LAYER_VECTORS = ("attn_norm", "ffn_norm")

# -- the file ------------------------------------------------------------------

def _open(path: str | Path) -> tuple[Path, gguf.GGUFReader, dict[str, GGUFTensor]]:
    path = Path(path)
    reader, tensors = open_gguf(path)
    return path, reader, tensors


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a llama model, from the GGUF metadata."""

    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int  # dimensions of each head that RoPE rotates
    rope_base: float
    rope_scale: float  # linear RoPE scaling: positions are divided by it
    rms_eps: float
    n_ctx_train: int

    @classmethod
    def from_gguf(cls, reader: gguf.GGUFReader, path: Path) -> "LlamaConfig":
        arch = metadata(reader, path, "general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ValueError(f"{path.name}: architecture {arch!r} is not supported by vkq generate "
                             f"(supported: {', '.join(SUPPORTED_ARCHS)})")

        def get(key, *default):
            return metadata(reader, path, f"{arch}.{key}", *default)

        for key in ("attention.head_count", "attention.head_count_kv", "feed_forward_length"):
            if isinstance(get(key, 0), (list, tuple)):
                raise ValueError(f"{path.name}: per-layer {arch}.{key} is not supported")
        n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
        n_head_kv = int(get("attention.head_count_kv", n_head))
        head_dim = int(get("attention.key_length", n_embd // n_head))
        if int(get("attention.value_length", head_dim)) != head_dim:
            raise ValueError(f"{path.name}: key and value head sizes differ; vkq generate needs them equal")
        if n_head % n_head_kv:
            raise ValueError(f"{path.name}: {n_head} attention heads do not split into {n_head_kv} KV groups")
        scaling = str(get("rope.scaling.type", "none"))
        factor = float(get("rope.scaling.factor", 1.0))
        if scaling not in ("none", "linear") and factor != 1.0:
            raise ValueError(f"{path.name}: RoPE scaling {scaling!r} is not supported (only linear)")
        return cls(
            arch=arch, n_layer=int(get("block_count")), n_embd=n_embd, n_ff=int(get("feed_forward_length")),
            n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
            n_rot=int(get("rope.dimension_count", head_dim)), rope_base=float(get("rope.freq_base", 10000.0)),
            rope_scale=factor if scaling == "linear" else 1.0,
            rms_eps=float(get("attention.layer_norm_rms_epsilon")),
            n_ctx_train=int(get("context_length", 4096)),
        )


# -- mat-vecs -------------------------------------------------------------------

@dataclass
class _Group:
    """Matrices multiplied by one input in one call: their rows stacked."""

    names: tuple[str, ...]
    rows: tuple[int, ...]
    qtype: str
    k: int


class _Matvecs(ABC):
    """The model's weight mat-vecs, timed. `run(group, x)`: x float32 (n, K) ->
    one float32 (n, rows) array per matrix of the group."""

    def __init__(self, tensors: dict[str, GGUFTensor], groups: list[_Group]):
        self.groups = {g.names: g for g in groups}
        self.seconds = 0.0
        self.calls = 0
        # Called as on_matvec(names, x, y) after each call (tests check every product).
        self.on_matvec: Callable[[tuple[str, ...], np.ndarray, np.ndarray], None] | None = None

    @staticmethod
    def _raw(tensors, group: _Group) -> np.ndarray:
        parts = [np.ascontiguousarray(tensors[n].data).reshape(-1).view(np.uint8) for n in group.names]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    @abstractmethod
    def _multiply(self, group: _Group, x: np.ndarray) -> np.ndarray:  # (n, K) -> (n, sum(rows))
        """One call of the engine: x (n, K) -> (n, sum of the group's rows)."""

    def run(self, names: tuple[str, ...], x: np.ndarray) -> list[np.ndarray]:
        group = self.groups[names]
        t0 = time.perf_counter()
        y = self._multiply(group, x)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        if self.on_matvec is not None:
            self.on_matvec(names, x, y)
        return np.split(y, np.cumsum(group.rows)[:-1], axis=1)


class VkqMatvecs(_Matvecs):
    """Every mat-vec a `Backend.matvec` on weights uploaded once."""

    def __init__(self, tensors, groups, backend: Backend, path: str, activations: str):
        super().__init__(tensors, groups)
        self.backend = backend
        self.path = path
        self.activations = activations
        self.weights = {g.names: backend.upload(g.qtype, (sum(g.rows), g.k), self._raw(tensors, g)) for g in groups}

    def _multiply(self, group, x):
        w = self.weights[group.names]
        path = None if self.path == "auto" else self.path
        if path == "mmvq" and not w.layout.fmt.has_int8_path:
            path = "dmmv"  # F32/F16 matrices have no int8 path
        act = self.activations
        if x.shape[0] == 1:
            return self.backend.matvec(w, x[0], path=path, activations=act)[None]
        return self.backend.matvec(w, np.ascontiguousarray(x.T), path=path, activations=act).T


class NumpyMatvecs(_Matvecs):
    """The reference: float64 numpy on weights the gguf package dequantizes."""

    def __init__(self, tensors, groups):
        from .reference import dequantize

        super().__init__(tensors, groups)
        self.weights = {}
        for g in groups:
            parts = [dequantize(tensors[n].qtype, tensors[n].shape, tensors[n].data) for n in g.names]
            self.weights[g.names] = parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _multiply(self, group, x):
        return (x.astype(np.float64) @ self.weights[group.names].T).astype(np.float32)


# -- the decoder ----------------------------------------------------------------

@dataclass
class GenerationStats:
    """Where the time of a generation went: prompt (prefill) and decode steps,
    each split into mat-vec time (the Backend.matvec calls, as the host sees
    them) and the rest (numpy vector ops, embedding, argmax, Python)."""

    path: str
    n_prompt: int = 0
    n_generated: int = 0
    prompt_seconds: float = 0.0
    prompt_matvec_seconds: float = 0.0
    decode_steps: int = 0  # forward passes after the prompt (the first token comes from the prompt's logits)
    decode_seconds: float = 0.0
    decode_matvec_seconds: float = 0.0
    matvec_calls_per_step: int = 0

    @property
    def tokens_per_second(self) -> float:
        return self.decode_steps / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def matvec_ms_per_token(self) -> float:
        return 1e3 * self.decode_matvec_seconds / self.decode_steps if self.decode_steps else 0.0

    @property
    def rest_ms_per_token(self) -> float:
        rest = self.decode_seconds - self.decode_matvec_seconds
        return 1e3 * rest / self.decode_steps if self.decode_steps else 0.0

    def summary(self) -> str:
        lines = [f"prompt: {self.n_prompt} tokens in {self.prompt_seconds:.2f} s "
                 f"({self.prompt_tokens_per_second:.1f} t/s; mat-vec {self.prompt_matvec_seconds:.2f} s, "
                 f"rest {self.prompt_seconds - self.prompt_matvec_seconds:.2f} s)"]
        if self.decode_steps:
            ms = self.matvec_ms_per_token + self.rest_ms_per_token
            share = self.matvec_ms_per_token / ms if ms else 0.0
            lines.append(
                f"decode: {self.n_generated} tokens, {self.decode_steps} steps in {self.decode_seconds:.2f} s: "
                f"{self.tokens_per_second:.2f} t/s ({ms:.1f} ms/token = mat-vec {self.matvec_ms_per_token:.1f} ms "
                f"[{100 * share:.0f}%, {self.matvec_calls_per_step} calls] + rest {self.rest_ms_per_token:.1f} ms); "
                f"path {self.path}")
        else:
            lines.append(f"decode: {self.n_generated} tokens, no decode step; path {self.path}")
        return "\n".join(lines)


@dataclass
class Generation:
    tokens: list[int]  # generated ids (prompt excluded)
    stats: GenerationStats
    logits: list[np.ndarray] | None = field(default=None, repr=False)  # logits[i] chose tokens[i]


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))) * w


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


class LlamaModel:
    """A llama-architecture GGUF model whose weight mat-vecs run on vkq.

    path_mode: None or "auto" (the dispatcher's choice per matrix), "dmmv",
    "mmvq" (int8; F32/F16 matrices fall back to dmmv), or "numpy" (the float64
    reference, no device). activations: the int8 path's activation format
    (vkq.activations; default "q8_1x2", the one within 1e-3 of the reference's logits). fuse:
    one upload and call per stage for matrices of the same block type (Q/K/V,
    gate/up). Without a backend, one is made on `device` once the file has
    passed its checks."""

    def __init__(self, path: str | Path, backend: Backend | None = None, path_mode: str | None = None,
                 *, activations: str | None = None, fuse: bool = True, device: int | None = None):
        mode = path_mode or "auto"
        if mode not in PATH_MODES:
            raise ValueError(f"unknown path {path_mode!r}; expected one of {', '.join(PATH_MODES)}")
        self.path, reader, tensors = _open(path)
        self.config = cfg = LlamaConfig.from_gguf(reader, self.path)
        self.tensors = tensors
        self._check_tensors()
        self.tokenizer = GGUFTokenizer(reader, self.path)
        if self.tokenizer.n_vocab != self.n_vocab:
            raise ValueError(f"{self.path.name}: the tokenizer has {self.tokenizer.n_vocab} tokens, "
                             f"token_embd.weight {self.n_vocab} rows")
        del reader

        self.output_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
        self.stages: list[list[tuple[str, ...]]] = []  # per layer, per stage: the groups' names
        groups = []
        for i in range(cfg.n_layer):
            layer = []
            for stage in LAYER_STAGES:
                gs = self._groups([f"blk.{i}.{r}.weight" for r in stage], fuse)
                groups += gs
                layer.append([g.names for g in gs])
            self.stages.append(layer)
        out = self._groups([self.output_name], fuse)
        groups += out
        self.output_group = out[0].names
        self.calls_per_step = len(groups)
        self._group_list = groups

        if mode == "numpy":
            self.backend = None
            self.matvecs: _Matvecs = NumpyMatvecs(tensors, groups)
        else:
            self.backend = backend if backend is not None else Backend(device)
            self.matvecs = VkqMatvecs(tensors, groups, self.backend, mode,
                                      check_activations(activations or GENERATE_ACTIVATIONS))

        def vec(name):
            from .reference import dequantize
            t = tensors[name]
            return dequantize(t.qtype, t.shape, t.data).astype(np.float32)

        self.norms = [{v: vec(f"blk.{i}.{v}.weight") for v in LAYER_VECTORS} for i in range(cfg.n_layer)]
        self.output_norm = vec("output_norm.weight")
        half = cfg.n_rot // 2
        inv_freq = cfg.rope_base ** (-2.0 * np.arange(half, dtype=np.float64) / cfg.n_rot)
        if "rope_freqs.weight" in tensors:  # llama 3.1 style frequency factors
            inv_freq = inv_freq / vec("rope_freqs.weight").astype(np.float64)[:half]
        self.inv_freq = inv_freq / cfg.rope_scale
        self.reset()

    def reference(self) -> "LlamaModel":
        """The numpy float64 reference of this model: the same decoder, parsed
        file and tokenizer, its own KV cache."""
        other = copy.copy(self)
        other.backend = None
        other.matvecs = NumpyMatvecs(self.tensors, self._group_list)
        other.reset()
        return other

    def warm_up(self, n_prompt: int = 0) -> float:
        """Record the dispatches of every mat-vec for the column counts a prompt
        of n_prompt tokens and the decode steps use, so that the timings that
        follow are steady state (Backend.matvec records a matrix's pipeline on
        its first call with a new column count: ~25 ms each on lavapipe).
        Returns the seconds it took; the KV cache is untouched."""
        if self.backend is None:
            return 0.0
        sizes = {1}
        if n_prompt:
            sizes.add(min(n_prompt, MAX_COLS))
            if n_prompt % MAX_COLS:
                sizes.add(n_prompt % MAX_COLS)
        t0 = time.perf_counter()
        for g in self._group_list:
            for n in sorted(sizes):
                self.matvecs._multiply(g, np.zeros((n, g.k), np.float32))
        return time.perf_counter() - t0

    # -- set-up -----------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.tensors["token_embd.weight"].shape[0]

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
    def path_label(self) -> str:
        """The path mode, with the activations when the int8 path may run."""
        mode = self.path_mode
        return mode if mode in ("numpy", "dmmv") else f"{mode}, int8 activations {self.activations}"

    def _check_tensors(self) -> None:
        cfg, name = self.config, self.path.name
        q_rows, kv_rows = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
        if "token_embd.weight" not in self.tensors:
            raise ValueError(f"{name}: tensor 'token_embd.weight' is missing")
        n_vocab = self.tensors["token_embd.weight"].shape[0]
        want = {"token_embd.weight": (n_vocab, cfg.n_embd), "output_norm.weight": (cfg.n_embd,)}
        if "output.weight" in self.tensors:
            want["output.weight"] = (n_vocab, cfg.n_embd)
        for i in range(cfg.n_layer):
            if f"blk.{i}.ffn_gate_inp.weight" in self.tensors:
                raise ValueError(f"{name}: mixture-of-experts llama layers (blk.{i}.ffn_gate_inp.weight) "
                                 f"are not supported")
            want.update({
                f"blk.{i}.attn_norm.weight": (cfg.n_embd,), f"blk.{i}.ffn_norm.weight": (cfg.n_embd,),
                f"blk.{i}.attn_q.weight": (q_rows, cfg.n_embd), f"blk.{i}.attn_k.weight": (kv_rows, cfg.n_embd),
                f"blk.{i}.attn_v.weight": (kv_rows, cfg.n_embd), f"blk.{i}.attn_output.weight": (cfg.n_embd, q_rows),
                f"blk.{i}.ffn_gate.weight": (cfg.n_ff, cfg.n_embd), f"blk.{i}.ffn_up.weight": (cfg.n_ff, cfg.n_embd),
                f"blk.{i}.ffn_down.weight": (cfg.n_embd, cfg.n_ff),
            })
        missing = [n for n in want if n not in self.tensors]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ValueError(f"{name}: tensor {missing[0]!r} is missing{more}; "
                             f"a {cfg.arch} model with {cfg.n_layer} layers needs it")
        for n, shape in want.items():
            t = self.tensors[n]
            if t.shape != shape:
                raise ValueError(f"{name}: tensor {n!r} has shape {t.shape}, expected {shape} from the metadata")
            try:
                get_format(t.qtype)
            except ValueError:
                raise ValueError(f"{name}: tensor {n!r} has block type {t.qtype}, which vkq does not support") from None

    def _groups(self, names: list[str], fuse: bool) -> list[_Group]:
        out: list[_Group] = []
        for n in names:
            t = self.tensors[n]
            if fuse and out and out[-1].qtype == t.qtype and out[-1].k == t.shape[1]:
                g = out[-1]
                out[-1] = _Group(g.names + (n,), g.rows + (t.shape[0],), g.qtype, g.k)
            else:
                out.append(_Group((n,), (t.shape[0],), t.qtype, t.shape[1]))
        return out

    # -- the forward pass ---------------------------------------------------------
    def reset(self) -> None:
        """Empty the KV cache."""
        cfg = self.config
        self.n_past = 0
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

    def embed(self, tokens) -> np.ndarray:
        """(n, n_embd) float32 rows of the token embedding, each dequantized by the gguf package."""
        t = self.tensors["token_embd.weight"]
        fmt = get_format(t.qtype)
        rows = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8).reshape(t.shape[0], fmt.row_bytes(t.shape[1]))
        bad = [int(i) for i in tokens if not 0 <= int(i) < t.shape[0]]
        if bad:
            raise ValueError(f"token ids out of range [0, {t.shape[0]}): {bad[:4]}")
        return gguf.quants.dequantize(rows[np.asarray(tokens, np.int64)], fmt.ggml_type).astype(np.float32)

    def _rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x (n, heads, head_dim): ggml's normal mode, pairs (x[2i], x[2i+1])."""
        n_rot = self.config.n_rot
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]
        cos = np.cos(ang).astype(np.float32)[:, None, :]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out = x.copy()
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
        return out

    def _attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        """q (n, n_head, hd), k/v (n, n_head_kv, hd) of positions n_past.. ; -> (n, n_head * hd)."""
        cfg = self.config
        n, p0 = q.shape[0], self.n_past
        self.k_cache[layer][p0 : p0 + n] = k
        self.v_cache[layer][p0 : p0 + n] = v
        keys, values = self.k_cache[layer][: p0 + n], self.v_cache[layer][: p0 + n]
        group = cfg.n_head // cfg.n_head_kv  # query head h reads KV head h // group, as ggml broadcasts
        qg = q.reshape(n, cfg.n_head_kv, group, cfg.head_dim)
        scores = np.einsum("nkgd,tkd->kgnt", qg, keys) * np.float32(1.0 / np.sqrt(cfg.head_dim))
        if n > 1:  # causal inside the chunk: query i sees keys up to p0 + i
            future = np.arange(p0 + n)[None, :] > (p0 + np.arange(n))[:, None]
            scores[..., future] = -np.inf
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        out = np.einsum("kgnt,tkd->nkgd", scores, values)
        return out.reshape(n, cfg.n_head * cfg.head_dim)

    def forward(self, tokens, all_logits: bool = False) -> np.ndarray:
        """Feed up to MAX_COLS tokens at positions n_past..; they join the KV cache.
        Returns the logits (n_vocab,) of the last position, or (n, n_vocab)."""
        cfg, mv = self.config, self.matvecs
        n = len(tokens)
        if not 1 <= n <= MAX_COLS:
            raise ValueError(f"forward takes 1 to {MAX_COLS} tokens, got {n}")
        self._grow(self.n_past + n)
        pos = np.arange(self.n_past, self.n_past + n)
        x = self.embed(tokens)
        for i in range(cfg.n_layer):
            norms, (s_qkv, s_o, s_gu, s_down) = self.norms[i], self.stages[i]
            h = _rms_norm(x, norms["attn_norm"], cfg.rms_eps)
            q, k, v = [y for g in s_qkv for y in mv.run(g, h)]
            q = self._rope(q.reshape(n, cfg.n_head, cfg.head_dim), pos)
            k = self._rope(k.reshape(n, cfg.n_head_kv, cfg.head_dim), pos)
            a = self._attention(i, q, k, v.reshape(n, cfg.n_head_kv, cfg.head_dim))
            x = x + mv.run(s_o[0], a)[0]
            h = _rms_norm(x, norms["ffn_norm"], cfg.rms_eps)
            gate, up = [y for g in s_gu for y in mv.run(g, h)]
            x = x + mv.run(s_down[0], _silu(gate) * up)[0]
        self.n_past += n
        h = _rms_norm(x if all_logits else x[-1:], self.output_norm, cfg.rms_eps)
        logits = mv.run(self.output_group, h)[0]
        return logits if all_logits else logits[0]

    def prefill(self, tokens) -> np.ndarray:
        """Feed a sequence in chunks of MAX_COLS; the logits of its last position."""
        if len(tokens) == 0:
            raise ValueError("no tokens to feed (empty prompt?)")
        if self.n_past + len(tokens) > self.config.n_ctx_train:
            raise ValueError(f"{self.n_past + len(tokens)} positions exceed the model's context "
                             f"length {self.config.n_ctx_train}")
        for s in range(0, len(tokens), MAX_COLS):
            logits = self.forward(tokens[s : s + MAX_COLS])
        return logits

    def step(self, token: int) -> np.ndarray:
        """One decode step: feed one token, get the logits of the next."""
        return self.prefill([token])

    def logits(self, tokens) -> np.ndarray:
        """The next-token logits after `tokens`, from an empty cache."""
        self.reset()
        return self.prefill(list(tokens))

    def score(self, prompt_ids, next_ids) -> np.ndarray:
        """Teacher-forced: (len(next_ids), n_vocab) logits; row i is what the model
        predicts after prompt + next_ids[:i] (greedy's logits[i] for those ids)."""
        out = [self.logits(prompt_ids)]
        for t in list(next_ids)[:-1]:
            out.append(self.step(t))
        return np.stack(out)

    def greedy(self, prompt_ids, n_tokens: int, *, stop_at_eos: bool = True, keep_logits: bool = False,
               on_token: Callable[[int], None] | None = None) -> Generation:
        """Greedy decoding of n_tokens after prompt_ids (from an empty cache)."""
        prompt_ids = [int(t) for t in prompt_ids]
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
        if len(prompt_ids) + n_tokens > self.config.n_ctx_train:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + {n_tokens} new tokens exceed the model's "
                             f"context length {self.config.n_ctx_train}")
        stats = GenerationStats(self.path_label, n_prompt=len(prompt_ids), matvec_calls_per_step=self.calls_per_step)
        mv = self.matvecs
        out, kept = [], [] if keep_logits else None
        t0, m0 = time.perf_counter(), mv.seconds
        logits = self.logits(prompt_ids)
        stats.prompt_seconds, stats.prompt_matvec_seconds = time.perf_counter() - t0, mv.seconds - m0
        t0, m0 = time.perf_counter(), mv.seconds
        eos = self.tokenizer.eos_id
        while True:
            token = int(np.argmax(logits))
            out.append(token)
            if kept is not None:
                kept.append(logits)
            if on_token is not None:
                on_token(token)
            if len(out) >= n_tokens or (stop_at_eos and eos is not None and token == eos):
                break
            logits = self.step(token)
            stats.decode_steps += 1
        if n_tokens == 0:
            out, kept = [], [] if keep_logits else None
        stats.decode_seconds, stats.decode_matvec_seconds = time.perf_counter() - t0, mv.seconds - m0
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
                text = self.tokenizer.decode(ids)
                if not text.endswith("\ufffd") and text.startswith(shown[0]):  # whole UTF-8 characters only
                    on_text(text[len(shown[0]):])
                    shown[0] = text
            on_token = show_text
        gen = self.greedy(prompt_ids, n_tokens, stop_at_eos=stop_at_eos, on_token=on_token)
        return self.tokenizer.decode(gen.tokens), gen.tokens, gen.stats


def run_cli(args) -> int:
    """`vkq generate MODEL.gguf --prompt TEXT -n N [--path ...]`."""
    import sys

    t0 = time.perf_counter()
    model = LlamaModel(args.model, None, args.path, activations=args.activations, fuse=not args.no_fuse,
                       device=args.device)
    load = time.perf_counter() - t0
    warm = model.warm_up(len(model.tokenizer.encode(args.prompt)))
    cfg = model.config
    dev = "numpy float64 (reference)" if model.backend is None else model.backend.device_info.name
    print(f"{model.path.name}: {cfg.arch}, {cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head}/{cfg.n_head_kv} "
          f"heads, vocab {model.n_vocab}; loaded in {load:.1f} s on {dev}, pipelines recorded in {warm:.1f} s",
          file=sys.stderr)
    print(args.prompt, end="", flush=True)
    text, ids, stats = model.generate(args.prompt, args.n_tokens, stop_at_eos=not args.ignore_eos,
                                      on_text=lambda s: print(s, end="", flush=True))
    print()
    print(stats.summary(), file=sys.stderr)
    return 0
