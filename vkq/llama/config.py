"""What a llama GGUF file must hold for vkq generate, and its hyper-parameters.

`read_architecture` reads general.architecture from the file's first
metadata entries (milliseconds), so that a file of another architecture is
refused before the full parse (which decodes the whole vocabulary).
`LlamaConfig.from_gguf` reads the hyper-parameters and refuses what the
decoder cannot run; `check_tensors` checks every tensor it will use.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..formats import get_format
from ..gguf_io import GGUFFile, GGUFTensor, metadata, read_metadata_head

SUPPORTED_ARCHS = ("llama",)
LAYER_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
LAYER_VECTORS = ("attn_norm", "ffn_norm")


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
    def from_gguf(cls, file: GGUFFile) -> "LlamaConfig":
        path = file.path
        arch = metadata(file, "general.architecture")
        check_architecture(arch, path)

        def get(key, *default):
            return metadata(file, f"{arch}.{key}", *default)

        for key in ("attention.head_count", "attention.head_count_kv", "feed_forward_length"):
            if isinstance(get(key, 0), (list, tuple)):
                raise ValueError(f"{path.name}: per-layer {arch}.{key} is not supported")
        n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
        n_head_kv = int(get("attention.head_count_kv", n_head))
        head_dim = int(get("attention.key_length", n_embd // n_head))
        n_rot = int(get("rope.dimension_count", head_dim))
        if int(get("attention.value_length", head_dim)) != head_dim:
            raise ValueError(f"{path.name}: key and value head sizes differ; vkq generate needs them equal")
        if n_head_kv < 1 or n_head % n_head_kv:
            raise ValueError(f"{path.name}: {n_head} attention heads do not split into {n_head_kv} KV groups")
        if n_rot % 2 or not 0 < n_rot <= head_dim:
            raise ValueError(f"{path.name}: RoPE over {n_rot} dimensions of {head_dim}-wide heads is not supported "
                             f"(an even count up to the head size)")
        scaling = str(get("rope.scaling.type", "none"))
        factor = float(get("rope.scaling.factor", 1.0))
        if scaling not in ("none", "linear") and factor != 1.0:
            raise ValueError(f"{path.name}: RoPE scaling {scaling!r} is not supported (only linear)")
        return cls(
            arch=arch, n_layer=int(get("block_count")), n_embd=n_embd, n_ff=int(get("feed_forward_length")),
            n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
            n_rot=n_rot, rope_base=float(get("rope.freq_base", 10000.0)),
            rope_scale=factor if scaling == "linear" else 1.0,
            rms_eps=float(get("attention.layer_norm_rms_epsilon")),
            n_ctx_train=int(get("context_length", 4096)),
        )

    def inv_freq(self, freq_factors: np.ndarray | None = None) -> np.ndarray:
        """float64 (n_rot/2,) RoPE angle per position of each pair: base^(-2i/n_rot),
        divided by the file's frequency factors (rope_freqs, llama 3.1 style)
        and by the linear scaling factor."""
        half = self.n_rot // 2
        inv = self.rope_base ** (-2.0 * np.arange(half, dtype=np.float64) / self.n_rot)
        if freq_factors is not None:
            inv = inv / np.asarray(freq_factors, np.float64)[:half]
        return inv / self.rope_scale


def check_tensors(cfg: LlamaConfig, tensors: dict[str, GGUFTensor], path: Path) -> int:
    """Every tensor the decoder reads is there, shaped as the metadata says,
    of a block type vkq supports. Returns the vocabulary size."""
    name = path.name
    q_rows, kv_rows = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    if "token_embd.weight" not in tensors:
        raise ValueError(f"{name}: tensor 'token_embd.weight' is missing")
    n_vocab = tensors["token_embd.weight"].shape[0]
    want = {"token_embd.weight": (n_vocab, cfg.n_embd), "output_norm.weight": (cfg.n_embd,)}
    if "output.weight" in tensors:
        want["output.weight"] = (n_vocab, cfg.n_embd)
    if "rope_freqs.weight" in tensors:
        want["rope_freqs.weight"] = (cfg.n_rot // 2,)
    for i in range(cfg.n_layer):
        if f"blk.{i}.ffn_gate_inp.weight" in tensors:
            raise ValueError(f"{name}: mixture-of-experts llama layers (blk.{i}.ffn_gate_inp.weight) "
                             f"are not supported")
        want.update({
            f"blk.{i}.attn_norm.weight": (cfg.n_embd,), f"blk.{i}.ffn_norm.weight": (cfg.n_embd,),
            f"blk.{i}.attn_q.weight": (q_rows, cfg.n_embd), f"blk.{i}.attn_k.weight": (kv_rows, cfg.n_embd),
            f"blk.{i}.attn_v.weight": (kv_rows, cfg.n_embd), f"blk.{i}.attn_output.weight": (cfg.n_embd, q_rows),
            f"blk.{i}.ffn_gate.weight": (cfg.n_ff, cfg.n_embd), f"blk.{i}.ffn_up.weight": (cfg.n_ff, cfg.n_embd),
            f"blk.{i}.ffn_down.weight": (cfg.n_embd, cfg.n_ff),
        })
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
