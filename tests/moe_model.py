"""A mixture-of-experts llama GGUF made from SmolLM2-135M, for the MoE tests.

llama.cpp reads Mixtral's layout for the llama architecture: `expert_count`
and `expert_used_count` in the metadata, and per layer a router
`blk.N.ffn_gate_inp.weight` (n_expert, n_embd) and the expert stacks
`ffn_gate_exps`, `ffn_up_exps` (n_expert, n_ff, n_embd), `ffn_down_exps`
(n_expert, n_embd, n_ff) in place of ffn_gate/up/down. No MoE model small
enough for these tests exists, so `write_moe_source` makes one from
SmolLM2's Q4_1 file: every matrix dequantized (by the gguf package) to F16;
expert 0 of each layer is SmolLM2's own FFN, expert e > 0 the same plus
seeded Gaussian noise of `spread` times each matrix's standard deviation;
the router is seeded Gaussian (F32, as llama.cpp keeps routers). The model
then still talks sense (every expert is near the real FFN), while a wrong
expert choice moves the logits by far more than the tests' tolerance.
llama.cpp's quantizer (tests/llama_quant.py) turns the F16 file into the
block types under test.

`python tests/moe_model.py SMOL.gguf OUT.gguf [--experts 4 --used 2]`
writes the F16 source.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np

N_EXPERT, N_USED = 4, 2
SPREAD = 0.15  # the experts' noise, in standard deviations of the real matrix
ROUTER_SCALE = 1.0  # router rows ~ N(0, ROUTER_SCALE^2 / n_embd): logits of order 1
SEED = 31
DENSE_FFN = ("ffn_gate", "ffn_up", "ffn_down")


def _copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type"):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)


def _values(t: gguf.ReaderTensor) -> np.ndarray:
    """float32 values of a tensor in numpy order (rows, K) / (K,)."""
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)


def write_moe_source(src: str | Path, dst: str | Path, n_expert: int = N_EXPERT, n_used: int = N_USED,
                     spread: float = SPREAD, seed: int = SEED) -> Path:
    """dst: src (a dense llama GGUF) with a mixture of n_expert experts in
    every layer, n_used per token, all matrices F16 (norms F32)."""
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch)
    _copy_metadata(reader, writer)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(n_used)
    rng = np.random.default_rng(seed)
    for t in reader.tensors:
        parts = t.name.split(".")
        values = _values(t)
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in DENSE_FFN:
            if parts[2] == "ffn_gate":
                n_embd = values.shape[1]
                router = rng.standard_normal((n_expert, n_embd)) * (ROUTER_SCALE / np.sqrt(n_embd))
                writer.add_tensor(f"blk.{parts[1]}.ffn_gate_inp.weight", router.astype(np.float32))
            noise = rng.standard_normal((n_expert - 1, *values.shape), dtype=np.float32)
            stack = np.concatenate([values[None], values + noise * np.float32(spread * values.std())])
            writer.add_tensor(f"blk.{parts[1]}.{parts[2]}_exps.weight", stack.astype(np.float16))
        elif values.ndim == 1:
            writer.add_tensor(t.name, values)
        else:
            writer.add_tensor(t.name, values.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(dst)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python tests/moe_model.py", description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--experts", type=int, default=N_EXPERT)
    p.add_argument("--used", type=int, default=N_USED)
    args = p.parse_args(argv)
    write_moe_source(args.src, args.out, args.experts, args.used)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
