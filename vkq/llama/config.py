"""What a llama-like GGUF file must hold for vkq generate, and its hyper-parameters.

`read_architecture` reads general.architecture from the file's first
metadata entries (milliseconds), so that a file of another architecture is
refused before the full parse (which decodes the whole vocabulary).
`LlamaConfig.from_gguf` reads the hyper-parameters and refuses what the
decoder cannot run; `check_tensors` checks every tensor it will use. The
architectures it runs, and what sets them apart from llama's, are the rows
of vkq.llama.architectures.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..blocks.formats import get_format
from ..blocks.gguf_io import GGUFFile, GGUFTensor, metadata, read_metadata_head
from ..checks import is_int
from .architectures import ARCHITECTURES, Architecture

SUPPORTED_ARCHS = tuple(ARCHITECTURES)
# The expert counts the device's routing op takes (vkq.llama.vector_ops.ExpertRouting):
# llama.cpp's own maximum of experts, and more used experts than any model has.
MAX_EXPERTS = 512
MAX_EXPERTS_USED = 64
# The KV cache's positions when none are asked for (llama-cpp-python's
# default too): a short chat fits, and so do the caches of an 8B model
# (128 MiB of float32). The model's own context length (8,192 and more)
# would cost memory, and on some devices the attention's split (more
# dispatches per token), for positions most generations never reach.
DEFAULT_CONTEXT = 512
# Prompt tokens per submit of the graph engine by default (llama.cpp's -ub):
# each weight is then read once per 512 prompt tokens, through the tiled
# mat-mat kernels.
PROMPT_CHUNK = 512
# ... and through the mat-vec kernels: vkq.resolve.MAX_COLS, the columns a
# mat-vec takes (here too so that the command line needs no Kompute; a test holds the two equal).
PROMPT_CHUNK_MATVEC = 8
# The most greedy decode steps the graph engine chains in one submit
# (Decoder.greedy's steps_per_submit): each step keeps its own logits on the
# device, and by 16 the host's work per token is a small share of a submit's.
STEPS_PER_SUBMIT_MAX = 16
# The values of {arch}.rope.scaling.type llama.cpp knows (llama_rope_scaling_type_from_string);
# vkq runs "none" and "linear", and the others with a factor of 1 (no scaling).
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")
# The architectures whose RoPE rotates every value of a head: llama.cpp refuses a
# {arch}.rope.dimension_count other than the head size for them ("invalid n_rot").
FULL_ROPE_ARCHS = ("llama",)


def read_architecture(path: str | Path, max_keys: int = 64) -> str | None:
    """general.architecture from the metadata at the head of a GGUF file,
    without parsing the rest (GGUF writers put it first). None when the key
    is not among the first max_keys or the file is no GGUF: the full parse
    then decides."""
    arch = read_metadata_head(path, "general.architecture", max_keys)
    return arch if isinstance(arch, str) else None


def check_architecture(arch, path: Path) -> None:
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"{path.name}: architecture {arch!r} is not supported by vkq generate "
                         f"(supported: {', '.join(SUPPORTED_ARCHS)})")


def _show(value) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def _show_count(value) -> str:
    """A value that should be an integer: a float says so (a whole one shows
    as an integer by _show, which alone would read as if right)."""
    return f"{_show(value)} (a float)" if isinstance(value, float) else _show(value)


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a llama model, from the GGUF metadata."""

    arch: str
    n_layer: int
    n_embd: int
    n_ff: int  # the FFN's width (each expert's, in a mixture of experts)
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int  # dimensions of each head that RoPE rotates
    rope_base: float
    rope_scale: float  # linear RoPE scaling: positions are divided by it
    rms_eps: float
    n_ctx_train: int
    n_expert: int = 0  # experts per layer (mixture of experts, Mixtral's layout); 0: dense FFN layers
    n_expert_used: int = 0  # experts each token goes through
    attn_scale: float = 0.0  # the queries' scale (0: 1 / sqrt(head_dim))
    attn_softcap: float = 0.0  # attention scores soft-capped at this (0: not)
    final_softcap: float = 0.0  # the logits soft-capped at this (0: not)
    n_swa: int = 0  # the sliding window of the architecture's sliding layers (0: none)
    # RoPE's cos and sin are multiplied by it ({arch}.rope.scaling.attn_factor: ggml's mscale),
    # so each rotated value of Q and K is, and their products by its square.
    rope_attn_factor: float = 1.0
    yarn: tuple[float, float, float] | None = None  # YaRN's (factor, beta_fast, beta_slow), where the file scales so
    n_ctx_orig: int = 0  # rope_factors: the long ones past this context (rope.scaling.original_context_length)

    @property
    def query_scale(self) -> float:
        return self.attn_scale or 1.0 / math.sqrt(self.head_dim)

    @property
    def embed_scale(self) -> np.float32:
        """What the token embedding's rows are multiplied by: sqrt(n_embd) in
        float32 where the architecture scales them (Gemma), else 1."""
        return np.float32(np.sqrt(self.n_embd)) if self.architecture.embed_scale else np.float32(1.0)

    def window(self, layer: int) -> int:
        """The positions a query of this layer sees, its own included (0: all before it)."""
        return self.n_swa if self.n_swa and self.architecture.slides(layer) else 0

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    def default_context(self, need: int = 0) -> int:
        """The context a model is loaded with when none is asked for (Python
        and `vkq generate` alike): DEFAULT_CONTEXT, or `need` positions where
        more, at most the model's own context length."""
        return min(self.n_ctx_train, max(DEFAULT_CONTEXT, need))

    @property
    def architecture(self) -> Architecture:
        return ARCHITECTURES[self.arch]

    @classmethod
    def from_gguf(cls, file: GGUFFile) -> "LlamaConfig":
        path = file.path
        arch = metadata(file, "general.architecture")
        check_architecture(arch, path)

        def get(key, *default):
            return metadata(file, f"{arch}.{key}", *default)

        for key in ("attention.head_count", "attention.head_count_kv", "feed_forward_length"):
            if isinstance(get(key, 0), (list, tuple)):
                raise ValueError(f"{path.name}: per-layer {arch}.{key} is not supported")

        def count(key, *default) -> int:
            """A count: an integer of at least 1 (GGUF stores them as integers; a
            float, even a whole one, is as wrong as llama.cpp takes it)."""
            value = get(key, *default)
            if not is_int(value) or value < 1:
                raise ValueError(f"{path.name}: {arch}.{key} is {_show_count(value)}; expected a positive integer")
            return value

        def number(key, *default, above: float) -> float:
            value = get(key, *default)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value <= above:
                raise ValueError(f"{path.name}: {arch}.{key} is {_show(value)}; expected a finite number "
                                 f"above {above:g}")
            return float(value)

        n_embd, n_head = count("embedding_length"), count("attention.head_count")
        n_head_kv = count("attention.head_count_kv", n_head)
        head_dim = count("attention.key_length", max(1, n_embd // n_head))
        n_rot = count("rope.dimension_count", head_dim)
        if count("attention.value_length", head_dim) != head_dim:
            raise ValueError(f"{path.name}: key and value head sizes differ; vkq generate needs them equal")
        if n_head % n_head_kv:
            raise ValueError(f"{path.name}: {n_head} attention heads do not split into {n_head_kv} KV groups")
        if n_rot != head_dim and arch in FULL_ROPE_ARCHS:
            raise ValueError(f"{path.name}: {arch}.rope.dimension_count is {n_rot}, but the heads are {head_dim} wide "
                             f"({_head_size_keys(arch)}); a {arch} model rotates whole heads (llama.cpp: invalid n_rot)")
        if n_rot % 2 or n_rot > head_dim:
            raise ValueError(f"{path.name}: RoPE over {n_rot} dimensions of {head_dim}-wide heads is not supported "
                             f"(an even count up to the head size)")
        n_expert, n_expert_used = _expert_counts(path.name, arch, get)
        row = ARCHITECTURES[arch]
        if n_expert and row.experts == "none":
            raise ValueError(f"{path.name}: {arch}.expert_count is {n_expert}, but the {arch} architecture has "
                             f"no mixture-of-experts layers")
        if not n_expert and row.experts == "always":
            raise ValueError(f"{path.name}: {arch}.expert_count is 0 or missing; every {arch} layer is a "
                             f"mixture of experts")
        if get("expert_weights_scale", 1.0) != 1.0:
            raise ValueError(f"{path.name}: {arch}.expert_weights_scale {_show(get('expert_weights_scale'))} is "
                             f"not supported (the experts' weights are taken unscaled)")
        n_ff = count("feed_forward_length")
        if n_expert and row.expert_width:
            n_ff = count("expert_feed_forward_length", max(1, n_ff // n_expert_used))
        attention = _attention_hparams(path.name, arch, row, get, count, number, n_embd, n_head)
        rope_scale, yarn = _rope_scaling(path.name, arch, get, row), None
        if isinstance(rope_scale, Yarn):  # its factor, and ggml's defaults of beta_fast and beta_slow
            yarn = (rope_scale.factor, number("rope.scaling.yarn_beta_fast", 32.0, above=0),
                    number("rope.scaling.yarn_beta_slow", 1.0, above=0))
            rope_scale = 1.0
        # llama.cpp multiplies its attention factor (cparams.yarn_attn_factor, 1 unless YaRN
        # scales) by this key whatever the scaling type; YaRN at factor 1 adds nothing to it.
        rope_attn_factor = number("rope.scaling.attn_factor", 1.0, above=0)
        return cls(
            arch=arch, n_layer=count("block_count"), n_embd=n_embd, n_ff=n_ff,
            n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, n_rot=n_rot,
            # A base of 1 or less would turn every pair by a radian or more per
            # position: no model is trained so; NaN or 0 is a corrupt file.
            rope_base=number("rope.freq_base", 10000.0, above=1),
            rope_scale=rope_scale, yarn=yarn, rope_attn_factor=rope_attn_factor,
            rms_eps=number("attention.layer_norm_rms_epsilon", above=0),
            n_ctx_train=count("context_length", 4096), n_expert=n_expert, n_expert_used=n_expert_used,
            n_ctx_orig=count("rope.scaling.original_context_length", count("context_length", 4096)),
            **attention,
        )

    def inv_freq(self, freq_factors: np.ndarray | None = None, sliding: bool = False) -> np.ndarray:
        """float64 (n_rot/2,) RoPE angle per position of each pair: base^(-2i/n_rot),
        divided by the file's frequency factors (rope_freqs, llama 3.1 style)
        and by the linear scaling factor; `sliding`: of the sliding-window
        layers, where the architecture gives them a base of their own
        (swa_rope_base, unscaled)."""
        half = self.n_rot // 2
        own = self.architecture.swa_rope_base if sliding else None
        base, scale = (own, 1.0) if own is not None else (self.rope_base, self.rope_scale)
        inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / self.n_rot)
        if freq_factors is not None:
            inv = inv / np.asarray(freq_factors, np.float64)[:half]
        if self.yarn is not None and own is None:
            return inv * yarn_mix(self.n_rot, self.n_ctx_orig, base, *self.yarn)
        return inv / scale

    @property
    def rope_mscale(self) -> float:
        """cos and sin's scale: the file's attention factor, and YaRN's 1 + 0.1 ln(factor)."""
        return self.rope_attn_factor * (1.0 + 0.1 * math.log(self.yarn[0]) if self.yarn is not None else 1.0)


def yarn_mix(n_rot: int, n_ctx_orig: int, base: float, factor: float, beta_fast: float, beta_slow: float) -> np.ndarray:
    """YaRN's factor of each pair's angle, as ggml's rope computes it
    (ext_factor 1): 1 / factor (interpolated) below the correction dims'
    range, 1 (extrapolated) above it, a linear ramp between; the dims from
    beta_fast and beta_slow rotations over the original context, floored and
    ceiled as ggml takes them."""
    def corr_dim(rotations: float) -> float:
        return n_rot * math.log(n_ctx_orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(0.0, math.floor(corr_dim(beta_fast)))
    high = min(n_rot - 1.0, math.ceil(corr_dim(beta_slow)))
    pairs = np.arange(n_rot // 2, dtype=np.float64)
    ramp = 1.0 - np.clip((pairs - low) / max(0.001, high - low), 0.0, 1.0)
    return (1.0 / factor) * (1.0 - ramp) + ramp


def _attention_hparams(name: str, arch: str, row: Architecture, get, count, number, n_embd: int,
                       n_head: int) -> dict:
    """The attention's and logits' settings of the architecture's row, as
    llama.cpp reads them: the query scale, the soft-caps, the sliding window."""
    out = {}
    if row.wide_query_layers is not None and get("block_count", 0) == row.wide_query_layers:
        out["attn_scale"] = 1.0 / math.sqrt(n_embd // n_head)
    if row.softcap:
        out["attn_softcap"] = number("attn_logit_softcapping", 50.0, above=0)
        out["final_softcap"] = number("final_logit_softcapping", 30.0, above=0)
    if row.swa_pattern:
        if row.swa_default is None and get("attention.sliding_window", 0) == 0:
            raise ValueError(f"{name}: {arch}.attention.sliding_window is missing or 0; vkq generate runs {arch} "
                             f"with its sliding-window layers only")
        out["n_swa"] = count("attention.sliding_window", *(() if row.swa_default is None else (row.swa_default,)))
    return out


def _head_size_keys(arch: str) -> str:
    return f"{arch}.attention.key_length, or {arch}.embedding_length / {arch}.attention.head_count"


@dataclass(frozen=True)
class Yarn:
    """_rope_scaling's answer where the file scales RoPE by YaRN and the row implements it."""

    factor: float


def _rope_scaling(name: str, arch: str, get, row: Architecture) -> float | Yarn:
    """The linear RoPE scaling factor (positions are divided by it), read as
    llama.cpp reads the file: {arch}.rope.scaling.factor, else the older
    {arch}.rope.scale_linear; 0 or missing: none. The type
    ({arch}.rope.scaling.type) is linear where the file has none; "none"
    ignores the factor; "yarn" and "longrope" with a factor other than 1
    are refused (vkq implements linear scaling only; YaRN where the row
    says: a Yarn of its factor), and so is a type llama.cpp does not know."""
    kind = get("rope.scaling.type", "linear")
    if kind not in ROPE_SCALING_TYPES:
        raise ValueError(f"{name}: {arch}.rope.scaling.type is {_show(kind)}; llama.cpp knows "
                         f"{', '.join(ROPE_SCALING_TYPES)}")
    key = next((k for k in ("rope.scaling.factor", "rope.scale_linear") if get(k, None) is not None),
               "rope.scaling.factor")
    factor = get(key, 0.0)
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not math.isfinite(factor) or factor < 0:
        raise ValueError(f"{name}: {arch}.{key} is {_show(factor)}; expected a finite number above 0 "
                         f"(or 0: no scaling)")
    factor = float(factor) or 1.0
    if kind == "none":
        return 1.0
    if kind == "yarn" and row.yarn and factor != 1.0:
        return Yarn(factor)
    if kind != "linear" and factor != 1.0:
        raise ValueError(f"{name}: RoPE scaling {kind!r} ({arch}.rope.scaling.type) is not supported: "
                         f"vkq scales RoPE linearly only ({arch}.{key} is {_show(factor)})")
    return factor


def _expert_counts(name: str, arch: str, get) -> tuple[int, int]:
    """(expert_count, expert_used_count): (0, 0) for dense layers, else 1 <=
    used <= count <= MAX_EXPERTS, as llama.cpp requires of them."""
    n_expert, n_used = get("expert_count", 0), get("expert_used_count", 0)
    for key, value in (("expert_count", n_expert), ("expert_used_count", n_used)):
        if not is_int(value) or value < 0:
            raise ValueError(f"{name}: {arch}.{key} is {_show_count(value)}; expected a non-negative integer")
    if n_expert == 0:
        if n_used:
            raise ValueError(f"{name}: {arch}.expert_used_count is {n_used} but the file has no experts "
                             f"({arch}.expert_count is 0 or missing)")
        return 0, 0
    if n_expert > MAX_EXPERTS:
        raise ValueError(f"{name}: {arch}.expert_count is {n_expert}; vkq generate takes at most {MAX_EXPERTS} experts")
    if not 1 <= n_used <= min(n_expert, MAX_EXPERTS_USED):
        raise ValueError(f"{name}: {arch}.expert_used_count is {n_used}; expected 1 to "
                         f"{min(n_expert, MAX_EXPERTS_USED)} for {n_expert} experts")
    return n_expert, n_used


def row_slice(t: GGUFTensor, start: int, stop: int, name: str) -> GGUFTensor:
    """Rows start .. stop - 1 of a matrix, as a tensor of its own (its blocks' bytes, not copied)."""
    row_bytes = get_format(t.qtype).row_bytes(t.shape[-1])
    raw = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8).reshape(t.shape[0], row_bytes)[start:stop]
    data = raw.reshape(-1).view(t.data.dtype)
    if t.data.ndim > 1:
        data = data.reshape((stop - start,) + t.data.shape[1:])
    return GGUFTensor(name, t.qtype, (stop - start,) + t.shape[1:], data)


def split_fused(cfg: LlamaConfig, tensors: dict[str, GGUFTensor], path: Path) -> dict[str, GGUFTensor]:
    """The tensors, a layer's fused matrices split into those the decoder
    reads (the row's fused_qkv and fused_gate_up: attn_qkv into attn_q,
    attn_k and attn_v; ffn_up into ffn_gate and ffn_up), each checked for
    its shape first."""
    arch = cfg.architecture
    if not (arch.fused_qkv or arch.fused_gate_up):
        return tensors
    out = dict(tensors)
    q_rows, kv_rows = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    for i in range(cfg.n_layer):
        n = f"blk.{i}."
        parts = []
        if arch.fused_qkv and n + "attn_qkv.weight" in tensors:
            parts.append((n + "attn_qkv.weight", [("attn_q", q_rows), ("attn_k", kv_rows), ("attn_v", kv_rows)]))
        if arch.fused_gate_up and n + "ffn_up.weight" in tensors:
            parts.append((n + "ffn_up.weight", [("ffn_gate", cfg.n_ff), ("ffn_up", cfg.n_ff)]))
        for fused, roles in parts:
            t = tensors[fused]
            rows = sum(r for _, r in roles)
            if t.shape != (rows, cfg.n_embd):
                raise ValueError(f"{path.name}: tensor {fused!r} has shape {t.shape}, expected {(rows, cfg.n_embd)} "
                                 f"({' | '.join(role for role, _ in roles)}) from the metadata")
            if any(n + role + ".weight" in tensors for role, _ in roles if n + role + ".weight" != fused):
                raise ValueError(f"{path.name}: layer {i} has both {fused!r} and the matrices it holds")
            start = 0
            for role, r in roles:
                out[n + role + ".weight"] = row_slice(t, start, start + r, n + role + ".weight")
                start += r
    return out


def ffn_tensors(cfg: LlamaConfig, layer: int) -> dict[str, tuple[int, ...]]:
    """The FFN tensors of a layer and their shapes: ffn_gate/up/down, or with
    experts the router (ffn_gate_inp) and the three expert stacks, as llama.cpp
    reads Mixtral's layout (every layer has experts then)."""
    n, d, f, e = f"blk.{layer}.", cfg.n_embd, cfg.n_ff, cfg.n_expert
    if not cfg.is_moe:
        return {n + "ffn_gate.weight": (f, d), n + "ffn_up.weight": (f, d), n + "ffn_down.weight": (d, f)}
    return {n + "ffn_gate_inp.weight": (e, d), n + "ffn_gate_exps.weight": (e, f, d),
            n + "ffn_up_exps.weight": (e, f, d), n + "ffn_down_exps.weight": (e, d, f)}


def _check_ffn_layout(cfg: LlamaConfig, tensors: dict[str, GGUFTensor], name: str) -> None:
    """Dense files have no expert tensors, and MoE files no dense FFN: llama.cpp's
    llama layout does not mix them."""
    dense = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
    moe = ("ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")
    for i in range(cfg.n_layer):
        other = next((f"blk.{i}.{t}" for t in (dense if cfg.is_moe else moe) if f"blk.{i}.{t}" in tensors), None)
        if other is None:
            continue
        if cfg.is_moe:
            raise ValueError(f"{name}: tensor {other!r} is a dense FFN matrix in a mixture-of-experts file "
                             f"({cfg.arch}.expert_count {cfg.n_expert}); the {cfg.arch} layout has experts in "
                             f"every layer")
        raise ValueError(f"{name}: tensor {other!r} belongs to a mixture-of-experts layer, but "
                         f"{cfg.arch}.expert_count is 0 or missing")


def check_tensors(cfg: LlamaConfig, tensors: dict[str, GGUFTensor], path: Path) -> int:
    """Every tensor the decoder reads is there, shaped as the metadata says,
    of a block type vkq supports. Returns the vocabulary size."""
    name = path.name
    q_rows, kv_rows = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    if "token_embd.weight" not in tensors:
        raise ValueError(f"{name}: tensor 'token_embd.weight' is missing")
    n_vocab = tensors["token_embd.weight"].shape[0]
    # Before anything is built per layer: a corrupt count (4e9) must not make it grow without end.
    blocks = {m.group(1) for n in tensors if (m := re.match(r"blk\.(\d+)\.", n))}
    if cfg.n_layer != len(blocks):  # (fewer: the layers past block_count would be left out, silently)
        raise ValueError(f"{name}: {cfg.arch}.block_count is {cfg.n_layer}, but the file has tensors of "
                         f"{len(blocks)} layers")
    want = {"token_embd.weight": (n_vocab, cfg.n_embd), "output_norm.weight": (cfg.n_embd,)}
    if "output.weight" in tensors and cfg.architecture.tied_output:
        raise ValueError(f"{name}: tensor 'output.weight': a {cfg.arch} model's output head is token_embd.weight "
                         f"(llama.cpp refuses a {cfg.arch} file with an output.weight)")
    if "output.weight" in tensors:
        want["output.weight"] = (n_vocab, cfg.n_embd)
    if "rope_freqs.weight" in tensors:
        want["rope_freqs.weight"] = (cfg.n_rot // 2,)
    if cfg.architecture.rope_factors:
        want.update({f"rope_factors_{kind}.weight": (cfg.n_rot // 2,) for kind in ("long", "short")
                     if f"rope_factors_{kind}.weight" in tensors})
    _check_ffn_layout(cfg, tensors, name)
    arch = cfg.architecture
    for i in range(cfg.n_layer):
        rows = {"attn_q": q_rows, "attn_k": kv_rows, "attn_v": kv_rows, "attn_output": cfg.n_embd}
        if arch.sinks:
            want[f"blk.{i}.attn_sinks.weight"] = (cfg.n_head,)
        if arch.expert_biases:
            n, e = f"blk.{i}.", cfg.n_expert
            want.update({n + "ffn_gate_inp.bias": (e,), n + "ffn_gate_exps.bias": (e, cfg.n_ff),
                         n + "ffn_up_exps.bias": (e, cfg.n_ff), n + "ffn_down_exps.bias": (e, cfg.n_embd)})
        want.update({f"blk.{i}.{v}.weight": (cfg.n_embd,) for v in arch.layer_vectors})
        want.update({arch.bias_tensor(i, r): (rows[r],) for r in arch.biases})
        want.update({arch.head_norm_tensor(i, r): (cfg.head_dim,) for r in arch.head_norms})
        want.update({
            f"blk.{i}.attn_q.weight": (q_rows, cfg.n_embd), f"blk.{i}.attn_k.weight": (kv_rows, cfg.n_embd),
            f"blk.{i}.attn_v.weight": (kv_rows, cfg.n_embd), f"blk.{i}.attn_output.weight": (cfg.n_embd, q_rows),
            **ffn_tensors(cfg, i),
        })
    # A bias the decoder would not add is wrong numbers, not a detail: refused.
    unread = next((n for n in tensors if n.endswith(".bias") and n not in want), None)
    if unread is not None:
        has = "biases only on " + ", ".join(arch.biases) if arch.biases else "none"
        raise ValueError(f"{name}: tensor {unread!r} is a bias vkq generate does not add "
                         f"(a {cfg.arch} model has {has})")
    missing = [n for n in want if n not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"{name}: tensor {missing[0]!r} is missing{more}; "
                         f"a {cfg.arch} model with {cfg.n_layer} layers needs it")
    for n, shape in want.items():
        t = tensors[n]
        if t.shape != shape:
            raise ValueError(f"{name}: tensor {n!r} has shape {t.shape}, expected {shape} from the metadata")
        try:
            get_format(t.qtype)
        except ValueError:
            raise ValueError(f"{name}: tensor {n!r} has block type {t.qtype}, which vkq does not support") from None
    return n_vocab
