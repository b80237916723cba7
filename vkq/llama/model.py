"""A llama-like GGUF file (vkq.llama.architectures), parsed and checked once, shared by every engine.

The file is refused before the full parse if its architecture is not one
vkq generate supports, then its hyper-parameters and every tensor the
decoder reads are checked (vkq.llama.config). Holds the tokenizer, the
norm weights, the architecture's biases and head norms, and RoPE
frequencies as float32/float64 arrays, and the
grouping of the weight matrices into mat-vec calls (vkq.llama.matvecs).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..blocks.formats import get_format
from ..blocks.gguf_io import metadata, open_gguf
from ..blocks.reference import dequantize
from ..blocks.tokenizer import open_tokenizer
from ..checks import token_ids_argument
from .config import LlamaConfig, check_architecture, check_tensors, read_architecture, split_fused
from .matvecs import Group, make_groups

Names = tuple[str, ...]  # the matrices of one group (vkq.llama.matvecs.Group.names)
EXPERT_BIAS_ROLES = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


@dataclass(frozen=True)
class LayerGroups:
    """The mat-vec groups of one layer, by stage (a stage's matrices read the
    same input): Q/K/V, the attention output, FFN gate/up and down. In a
    mixture-of-experts layer gate_up and down are expert stacks, and `router`
    (ffn_gate_inp) picks the experts."""

    qkv: tuple[Names, ...]
    attn_output: Names
    gate_up: tuple[Names, ...]
    down: Names
    router: Names | None = None
    index: int = 0  # the layer's

    @property
    def all(self) -> tuple[Names, ...]:
        return self.qkv + (self.attn_output,) + ((self.router,) if self.router else ()) + self.gate_up + (self.down,)


class LlamaFile:
    """A GGUF file of an architecture vkq generate runs (vkq.llama.architectures). `fuse`: matrices
    of one stage and block type stacked into one mat-vec (Q/K/V, gate/up)."""

    def __init__(self, path: str | Path, fuse: bool = True):
        self.path = path = Path(path)
        arch = read_architecture(path)
        if arch is not None:  # else the full parse below says what is wrong (no file, not a GGUF)
            check_architecture(arch, path)
        file = open_gguf(path)
        self.config = cfg = LlamaConfig.from_gguf(file)
        self.tensors = tensors = split_fused(cfg, file.tensors, path)
        self.n_vocab = check_tensors(cfg, tensors, path)
        self.tokenizer = open_tokenizer(file)
        template = metadata(file, "tokenizer.chat_template", None)
        self.chat_template = template if isinstance(template, str) and template.strip() else None  # (Jinja)
        if self.tokenizer.n_vocab != self.n_vocab:
            raise ValueError(f"{path.name}: the tokenizer has {self.tokenizer.n_vocab} tokens, "
                             f"token_embd.weight {self.n_vocab} rows")
        del file

        self.output_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
        self.groups: list[Group] = []
        ffn = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps") if cfg.is_moe else ("ffn_gate", "ffn_up", "ffn_down")

        def stage(layer: int, *roles: str) -> tuple[Names, ...]:
            gs = make_groups(tensors, [f"blk.{layer}.{r}.weight" for r in roles], fuse)
            self.groups += gs
            return tuple(g.names for g in gs)

        self.layers = [LayerGroups(index=i, qkv=stage(i, "attn_q", "attn_k", "attn_v"),
                                   attn_output=stage(i, "attn_output")[0],
                                   router=stage(i, "ffn_gate_inp")[0] if cfg.is_moe else None,
                                   gate_up=stage(i, ffn[0], ffn[1]), down=stage(i, ffn[2])[0])
                       for i in range(cfg.n_layer)]
        out = make_groups(tensors, [self.output_name], fuse)
        self.groups += out
        self.output_group = out[0].names

        arch = cfg.architecture
        self.norms = [{v: self.vector(f"blk.{i}.{v}.weight") for v in arch.layer_vectors} for i in range(cfg.n_layer)]
        # Per layer, by matrix role (attn_q, ...): the bias added to its output, and
        # the weight of its per-head RMSNorm (empty where the architecture has none).
        self.biases = [{r: self.vector(arch.bias_tensor(i, r)) for r in arch.biases} for i in range(cfg.n_layer)]
        self.head_norms = [{r: self.vector(arch.head_norm_tensor(i, r)) for r in arch.head_norms}
                           for i in range(cfg.n_layer)]
        # Per layer: the attention sinks (a logit per query head), and the router's and experts' biases by
        # role (a row per expert), where the architecture has them (gpt-oss).
        self.sinks = [self.vector(f"blk.{i}.attn_sinks.weight") if arch.sinks else None for i in range(cfg.n_layer)]
        self.expert_biases = [{r: self.vector(f"blk.{i}.{r}.bias") for r in EXPERT_BIAS_ROLES} if arch.expert_biases
                              else {} for i in range(cfg.n_layer)]
        self.output_norm = self.vector("output_norm.weight")
        factors = self.vector("rope_freqs.weight") if "rope_freqs.weight" in tensors else None
        self.inv_freq = cfg.inv_freq(factors)
        # The sliding-window layers' RoPE angles, where their base is their own (Gemma 3).
        self.inv_freq_swa = cfg.inv_freq(factors, sliding=True) if arch.swa_rope_base is not None else self.inv_freq
        # LongRoPE's (Phi-3): the angles with the short factors, and with the long ones past n_ctx_orig.
        self.inv_freq_long = self.inv_freq
        if factors is None and arch.rope_factors:
            long, short = (self.vector(f"rope_factors_{k}.weight") if f"rope_factors_{k}.weight" in tensors else None
                           for k in ("long", "short"))
            self.inv_freq, self.inv_freq_long = cfg.inv_freq(short), cfg.inv_freq(long)
            self.inv_freq_swa = self.inv_freq

    def layer_inv_freq(self, layer: int, ctx: int) -> np.ndarray:
        """The RoPE angles per position of a layer's pairs in a context of ctx
        positions (LongRoPE's long factors past the original context, as
        llama.cpp chooses them by its context)."""
        if self.config.architecture.slides(layer):
            return self.inv_freq_swa
        return self.inv_freq_long if ctx > self.config.n_ctx_orig else self.inv_freq

    def vector(self, name: str) -> np.ndarray:
        from ..blocks.reference import dequantize

        t = self.tensors[name]
        return dequantize(t.qtype, t.shape, t.data).astype(np.float32)

    def group(self, names: tuple[str, ...]) -> Group:
        return next(g for g in self.groups if g.names == names)

    def check_ids(self, tokens, name: str = "tokens") -> list[int]:
        """tokens as a list of ints, each an id of this vocabulary; `name`: the
        argument they came as, for the error."""
        ids = token_ids_argument(name, tokens)
        bad = [i for i in ids if not 0 <= i < self.n_vocab]
        if bad:
            raise ValueError(f"{name}: token ids out of range [0, {self.n_vocab}): {bad[:4]}")
        return ids

    def embed(self, tokens) -> np.ndarray:
        """(n, n_embd) float32 rows of the token embedding, each dequantized by
        vkq.blocks.reference (the gguf package)."""
        t = self.tensors["token_embd.weight"]
        fmt = get_format(t.qtype)
        rows = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8).reshape(t.shape[0], fmt.row_bytes(t.shape[1]))
        ids = np.asarray(self.check_ids(tokens), np.int64)
        return dequantize(t.qtype, (len(ids), t.shape[1]), rows[ids]).astype(np.float32)
