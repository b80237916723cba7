"""What `vkq bench` runs: the weight matrices of a model's decode step.

A `Model` is the list of matrices one token multiplies by a vector, with
their GGUF names, block types and shapes, in dependency order. It comes
from a built-in preset ("llama-3.2-1b:Q4_K_M": the published architecture
of the model, its tensors typed the way llama.cpp's quantizer types them
for that mix, filled with random valid blocks) or from a GGUF file (its
real tensors).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..blocks.formats import FORMATS, get_format
from ..blocks.gguf_io import GGUFFile, GGUFTensor, describe_unsupported, is_supported, metadata, open_gguf
from ..blocks.synthetic import random_weights

# The roles of the matrices of one block, and the stage of the decode step
# each belongs to: a stage's matrices share one input, and every stage needs
# the output of the one before it (attention and norms happen in between).
# Dense layers use ffn_gate/up/down, MoE layers the router and expert stacks.
ROLE_STAGE = {
    "attn_q": 0, "attn_k": 0, "attn_v": 0,
    "attn_output": 1,
    "ffn_gate": 2, "ffn_up": 2, "ffn_down": 3,
    "ffn_gate_inp": 2, "ffn_gate_exps": 3, "ffn_up_exps": 3, "ffn_down_exps": 4,
}
OUTPUT = "output"  # the output head: output.weight, or token_embd.weight when tied

# llama.cpp's file types (llama-quantize's names) that presets offer:
# legacy and k-quant, i-quant, BF16.
K_MIXES = ("Q4_0", "Q8_0", "Q2_K", "Q3_K_S", "Q4_K_M", "Q5_K_M", "Q6_K")
IQ_MIXES = ("IQ4_XS", "IQ4_NL", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS",
            "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")
MIXES = K_MIXES + IQ_MIXES + ("BF16",)
# The base type of each mix: the type of every tensor no rule below changes.
# Not always the mix's name: llama.cpp's IQ2_S file is mostly IQ2_XS, its
# IQ2_M file mostly IQ2_S, and its IQ3_M and IQ3_XS files mostly IQ3_S.
BASE_TYPE = {"Q2_K": "Q2_K", "Q3_K_S": "Q3_K", "Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "MXFP4": "Q8_0",
             "IQ2_S": "IQ2_XS", "IQ2_M": "IQ2_S", "IQ3_M": "IQ3_S", "IQ3_XS": "IQ3_S"}
BASE_TYPE |= {mix: mix for mix in MIXES if mix not in BASE_TYPE}
# llama.cpp's type for a matrix whose rows are not whole 256-value blocks of
# the type its mix gives it (llama_tensor_get_type's fallback).
FALLBACK = {**dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"),
            "Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
OUTPUT_FALLBACK = "Q8_0"  # the output head's, whatever its mix's type
# The file types of about 2 bits per weight or less, which llama.cpp types by rules of their own.
LOW_BIT_MIXES = ("IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")


@dataclass(frozen=True)
class Matrix:
    """One weight matrix (rows, K), or expert stack (n_expert, rows, K)."""

    name: str  # GGUF tensor name
    role: str  # a key of ROLE_STAGE, or OUTPUT
    layer: int  # block index; n_layer for the output head
    qtype: str
    shape: tuple[int, ...]

    @property
    def is_expert_stack(self) -> bool:
        return len(self.shape) == 3

    @property
    def per_expert_input(self) -> bool:
        """Expert down projections read one input per selected expert."""
        return self.role == "ffn_down_exps"

    @property
    def params(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape[:-1]) * get_format(self.qtype).row_bytes(self.shape[-1])


@dataclass
class Model:
    name: str
    matrices: list[Matrix]  # in decode order
    n_expert_used: int = 0
    tensors: dict[str, GGUFTensor] | None = None  # a GGUF file's tensors; None: random weights
    ignored: tuple[str, ...] = ()  # a file's weight matrices whose role the step does not model

    @property
    def params(self) -> int:
        return sum(m.params for m in self.matrices)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.matrices)

    @property
    def bytes_per_token(self) -> int:
        """Weight bytes one token reads: of an expert stack only the used experts."""
        return sum(m.nbytes * self.n_expert_used // m.shape[0] if m.is_expert_stack else m.nbytes
                   for m in self.matrices)

    def stages(self) -> list[list[Matrix]]:
        """The matrices grouped into stages (shared input), in dependency order."""
        groups: dict[tuple[int, int], list[Matrix]] = {}
        for m in self.matrices:
            groups.setdefault((m.layer, ROLE_STAGE.get(m.role, 0)), []).append(m)
        return [groups[key] for key in sorted(groups)]

    def data(self, m: Matrix, rng: np.random.Generator) -> np.ndarray:
        """The raw GGUF bytes of one matrix: from the file, or random valid blocks."""
        if self.tensors is not None:
            return self.tensors[m.name].data
        n_expert = m.shape[0] if m.is_expert_stack else 1
        return random_weights(get_format(m.qtype), m.shape[-2], m.shape[-1], rng, n_expert)


# -- presets ---------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpec:
    name: str
    arch: str
    hidden: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    ffn: int  # dense FFN size (0: every layer is MoE)
    vocab: int
    tied_output: bool  # the output head is the token embedding
    n_expert: int = 0
    n_expert_used: int = 0
    expert_ffn: int = 0
    mixes: tuple[str, ...] = MIXES
    test_only: bool = False  # tiny shapes for the test suite, not listed

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    def matrices(self, mix: str) -> list[Matrix]:
        q_rows, kv_rows = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        out = []

        def add(role: str, layer: int, shape: tuple[int, ...], name: str | None = None):
            qtype = mix_type(mix, role, layer, self.n_layer, self)
            out.append(Matrix(name or f"blk.{layer}.{role}.weight", role, layer, qtype, shape))

        for i in range(self.n_layer):
            add("attn_q", i, (q_rows, self.hidden))
            add("attn_k", i, (kv_rows, self.hidden))
            add("attn_v", i, (kv_rows, self.hidden))
            add("attn_output", i, (self.hidden, q_rows))
            if self.is_moe:
                add("ffn_gate_inp", i, (self.n_expert, self.hidden))
                add("ffn_gate_exps", i, (self.n_expert, self.expert_ffn, self.hidden))
                add("ffn_up_exps", i, (self.n_expert, self.expert_ffn, self.hidden))
                add("ffn_down_exps", i, (self.n_expert, self.hidden, self.expert_ffn))
            else:
                add("ffn_gate", i, (self.ffn, self.hidden))
                add("ffn_up", i, (self.ffn, self.hidden))
                add("ffn_down", i, (self.hidden, self.ffn))
        add(OUTPUT, self.n_layer, (self.vocab, self.hidden),
            "token_embd.weight" if self.tied_output else "output.weight")
        unsupported = sorted({m.qtype for m in out} - set(FORMATS))
        if unsupported:
            raise ValueError(f"{self.name}:{mix} has {', '.join(unsupported)} matrices: block types "
                             f"vkq does not support (it supports {', '.join(FORMATS)})")
        # A matrix whose rows are not whole blocks of its type gets llama.cpp's fallback type.
        return [m if m.shape[-1] % get_format(m.qtype).block_elems == 0
                else replace(m, qtype=OUTPUT_FALLBACK if m.role == OUTPUT else FALLBACK[m.qtype]) for m in out]


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of layers that get more bits in the _M mixes: the
    first and last eighth of the layers, and every third layer in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mix_type(mix: str, role: str, layer: int, n_layer: int, spec: ModelSpec) -> str:
    """The block type llama.cpp's llama_tensor_get_type gives a tensor in a mix
    (no overrides). The k-quant and legacy mixes are as llama-quantize makes
    them without an importance matrix, the i-quant mixes as it makes them with
    one: i-quant files practically always come with one, and IQ1/IQ2 types
    cannot be made without one (without one, llama.cpp would give more bits
    to IQ3_XXS's V and down projections and to IQ4_XS's and IQ4_NL's first
    down projections). Rules for models no preset has (Falcon, 70B,
    8-expert Mixtral) are left out; the fallback of matrices whose K is not
    a whole number of the type's blocks is applied after (FALLBACK)."""
    # The router stays F32: llama.cpp never quantizes ffn_gate_inp.
    if role == "ffn_gate_inp":
        return "F32"
    # BF16 is not a quantized type: llama.cpp applies no rule, every matrix is BF16.
    if mix == "BF16":
        return "BF16"
    base = BASE_TYPE[mix]
    # The output head (and the token embedding of a tied model, quantized as
    # the output): Q8_0 in the Q8_0 and MXFP4_MOE mixes, Q5_K in the ~2-bit
    # ones and IQ3_XXS, Q6_K in all others.
    if role == OUTPUT:
        if mix in ("Q8_0", "MXFP4"):
            return "Q8_0"
        return "Q5_K" if mix in LOW_BIT_MIXES + ("IQ3_XXS",) else "Q6_K"
    # MXFP4_MOE: expert stacks (3-D tensors) MXFP4, every other matrix Q8_0.
    if mix == "MXFP4":
        return "MXFP4" if role.endswith("_exps") else "Q8_0"
    # Expert stacks follow the rules of the dense FFN tensors; layer = block index.
    kind = role.removesuffix("_exps")
    gqa = spec.n_head // spec.n_head_kv  # query heads per KV head
    first_eighth = layer < n_layer // 8
    if mix in LOW_BIT_MIXES:
        # V and the first eighth of the down projections get a bigger type:
        # Q4_K for V with >= 4 query heads per KV head or >= 4 experts.
        bigger = "IQ3_S" if mix in ("IQ2_S", "IQ2_M") else "Q2_K"
        if kind == "attn_v":
            return "Q4_K" if gqa >= 4 or spec.n_expert >= 4 else bigger
        if kind == "ffn_down" and first_eighth:
            return bigger
        if kind == "attn_output":
            return {"IQ1_S": "IQ2_XXS", "IQ1_M": "IQ2_XXS", "IQ2_S": "IQ3_S", "IQ2_M": "IQ3_S"}.get(mix, base)
        return base
    if kind == "attn_v":
        # More bits for V, the more where >= 4 query heads share each KV head.
        if mix == "Q2_K":
            return "Q4_K" if gqa >= 4 else "Q3_K"
        if mix == "IQ3_M" or (mix in ("IQ3_XXS", "IQ3_XS", "IQ3_S") and gqa >= 4):
            return "Q4_K"
        if mix in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
            return "Q5_K"
        # Q4_K_M / Q5_K_M: Q6_K in the use_more_bits layers.
        if mix in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layer):
            return "Q6_K"
    if kind in ("attn_q", "attn_k"):
        # Fewer bits for Q and K in IQ3_XS and IQ3_XXS.
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(mix, base)
    if kind == "ffn_down":
        # Q2_K: the down projection gets Q3_K; IQ3_M: Q4_K in the first eighth.
        if mix == "Q2_K":
            return "Q3_K"
        if mix == "IQ3_M" and first_eighth:
            return "Q4_K"
        # Q4_K_M / Q5_K_M: Q6_K in the use_more_bits layers.
        if mix in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layer):
            return "Q6_K"
    if kind == "attn_output":
        # More bits for the attention output projection in Q2_K, IQ3_XXS and IQ3_M.
        return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "IQ3_M": "Q4_K"}.get(mix, base)
    if kind in ("ffn_gate", "ffn_up") and mix == "IQ3_XS" and not first_eighth and layer < 7 * n_layer // 8:
        # IQ3_XS: the gate and up projections of the middle layers get IQ3_XXS.
        return "IQ3_XXS"
    return base


# Published configurations (the models' config.json on Hugging Face).
PRESETS: dict[str, ModelSpec] = {s.name: s for s in (
    # K = 576 is not a whole number of 256-value blocks: matrices of that K take llama.cpp's fallback types.
    ModelSpec("smollm2-135m", "llama", hidden=576, n_layer=30, n_head=9, n_head_kv=3, head_dim=64,
              ffn=1536, vocab=49152, tied_output=True),
    ModelSpec("llama-3.2-1b", "llama", hidden=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64,
              ffn=8192, vocab=128256, tied_output=True),
    ModelSpec("llama-3.2-3b", "llama", hidden=3072, n_layer=28, n_head=24, n_head_kv=8, head_dim=128,
              ffn=8192, vocab=128256, tied_output=True),
    ModelSpec("llama-3.1-8b", "llama", hidden=4096, n_layer=32, n_head=32, n_head_kv=8, head_dim=128,
              ffn=14336, vocab=128256, tied_output=False),
    # Qwen2.5's Q, K and V biases and Qwen3's per-head Q/K norms are vectors: no matrix here.
    # K = 896 is not a whole number of 256-value blocks: as SmolLM2's, its matrices take the fallback types.
    ModelSpec("qwen2.5-0.5b", "qwen2", hidden=896, n_layer=24, n_head=14, n_head_kv=2, head_dim=64,
              ffn=4864, vocab=151936, tied_output=True),
    ModelSpec("qwen3-0.6b", "qwen3", hidden=1024, n_layer=28, n_head=16, n_head_kv=8, head_dim=128,
              ffn=3072, vocab=151936, tied_output=True),
    ModelSpec("qwen3-30b-a3b", "qwen3moe", hidden=2048, n_layer=48, n_head=32, n_head_kv=4, head_dim=128,
              ffn=0, vocab=151936, tied_output=False, n_expert=128, n_expert_used=8, expert_ffn=768),
    # K = 2880 is not a multiple of 256 (the block of k-quants and of most
    # i-quants; IQ4_NL's V and output would fall back to other types): only
    # MXFP4_MOE and BF16 fit.
    ModelSpec("gpt-oss-20b", "gpt-oss", hidden=2880, n_layer=24, n_head=64, n_head_kv=8, head_dim=64,
              ffn=0, vocab=201088, tied_output=False, n_expert=32, n_expert_used=4, expert_ffn=2880,
              mixes=("MXFP4", "BF16")),
    # For the tests: small enough for a fraction of a second per step.
    ModelSpec("tiny-llama", "llama", hidden=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
              ffn=512, vocab=1000, tied_output=True, test_only=True),
    ModelSpec("tiny-moe", "qwen3moe", hidden=256, n_layer=2, n_head=4, n_head_kv=1, head_dim=64,
              ffn=0, vocab=1000, tied_output=False, n_expert=8, n_expert_used=2, expert_ffn=256,
              mixes=MIXES + ("MXFP4",), test_only=True),
)}


def preset(name: str, mix: str) -> Model:
    spec = PRESETS.get(name.lower())
    if spec is None:
        listed = ", ".join(n for n, s in PRESETS.items() if not s.test_only)
        raise ValueError(f"unknown model preset {name!r}; presets: {listed} (see vkq bench --list)")
    mix = mix.upper()
    if mix not in spec.mixes:
        why = (f" (K={spec.hidden} is not a multiple of 256, which k-quants and i-quants need)"
               if spec.hidden % 256 else "")
        raise ValueError(f"{spec.name} has no {mix!r} mix{why}; it offers {', '.join(spec.mixes)}")
    return Model(f"{spec.name}:{mix}", spec.matrices(mix), spec.n_expert_used)


def presets_by_model() -> dict[str, tuple[str, ...]]:
    """The listed presets: each model's mixes (NAME:MIX for -m)."""
    return {name: s.mixes for name, s in PRESETS.items() if not s.test_only}


# -- GGUF files ------------------------------------------------------------

def _expert_used_count(file: GGUFFile) -> int:
    """The metadata key `<arch>.expert_used_count` (0 when absent)."""
    arch = metadata(file, "general.architecture", None)
    return int(metadata(file, f"{arch}.expert_used_count", 0)) if arch else 0


def _role(name: str) -> tuple[str, int] | None:
    """'blk.3.attn_q.weight' -> ('attn_q', 3); output head -> (OUTPUT, -1); else None."""
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in ROLE_STAGE:
        return parts[2], int(parts[1])
    if name in ("output.weight", "token_embd.weight"):
        return OUTPUT, -1
    return None


def from_gguf(path: str | Path) -> Model:
    """Every matrix a decode step of the file's model multiplies by a vector."""
    path = Path(path)
    file = open_gguf(path)
    tensors = file.tensors
    found, unsupported, ignored = [], [], []
    for name, t in tensors.items():
        role = _role(name)
        if role is None and name.endswith(".weight") and len(t.shape) in (2, 3):
            ignored.append(name)  # e.g. fused attn_qkv or shared experts of other architectures
        # Without output.weight the token embedding is the output head (tied).
        if role is None or (name == "token_embd.weight" and "output.weight" in tensors):
            continue
        if not is_supported(t):
            unsupported.append(t)
            continue
        found.append(Matrix(name, role[0], role[1], t.qtype, t.shape))
    if unsupported:
        raise ValueError(f"{path.name} has {describe_unsupported(unsupported)}")
    if not found:
        raise ValueError(f"{path.name}: no weight matrices with the names vkq knows "
                         f"(blk.N.attn_q.weight, ..., output.weight)")
    n_layer = max(m.layer for m in found) + 1
    found = [Matrix(m.name, m.role, n_layer, m.qtype, m.shape) if m.role == OUTPUT else m for m in found]
    order = {role: i for i, role in enumerate(ROLE_STAGE)}
    found.sort(key=lambda m: (m.layer, order.get(m.role, len(order))))
    n_used = 0
    if any(m.is_expert_stack for m in found):
        n_used = _expert_used_count(file)
        if n_used < 1:
            raise ValueError(f"{path.name} has expert tensors but no <arch>.expert_used_count metadata")
    return Model(path.stem, found, n_used, {m.name: tensors[m.name] for m in found}, tuple(ignored))


def resolve(text: str) -> Model:
    """A model from `vkq bench -m`: a .gguf path or a preset "name:MIX"."""
    text = text.strip()
    if text.lower().endswith(".gguf") or Path(text).is_file():
        return from_gguf(text)
    name, sep, mix = text.partition(":")
    if not sep:
        raise ValueError(f"model {text!r}: expected a .gguf path or a preset 'name:MIX', "
                         f"e.g. llama-3.2-1b:Q4_K_M (vkq bench --list)")
    return preset(name, mix)
