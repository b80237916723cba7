"""`vkq compare FILE.gguf`: is every weight tensor of a real model right on this device?

Each matrix (and expert stack) of a supported block type is uploaded and
multiplied by a seeded random x on every path its type has (for expert
stacks: `matvec_id` over the first, a middle and the last expert); the
result is compared with float64 `dequantize(W) @ x`, the gguf package's
dequantization of the same bytes. A tensor fails when its NMSE is above the
threshold (ggml's test-backend-ops bound for MUL_MAT) or not finite. A
tensor whose reference is not finite (weights that decode to NaN or inf)
cannot be checked: it is named as such, the file's fault, not vkq's.
"""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np

from ..backend import Backend
from ..blocks.formats import get_format
from ..blocks.gguf_io import GGUFTensor, describe_unsupported, is_supported, load_gguf_all
from ..blocks.reference import dequantize, nmse

NMSE_THRESHOLD = 5e-4
REF_ROWS = 4096  # rows dequantized to float64 at a time: bounded memory for big embeddings


def expert_ids(n_expert: int) -> np.ndarray:
    """A few experts of a stack: the first, a middle one and the last."""
    return np.unique([0, n_expert // 2, n_expert - 1]).astype(np.int32)


def reference(t: GGUFTensor, x: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
    """float64 dequantize(W) @ x: (rows,), or (len(ids), rows) for an expert stack."""
    fmt = get_format(t.qtype)
    k = t.shape[-1]
    raw = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8).reshape(-1, fmt.row_bytes(k))  # F32: bytes too
    if ids is not None:  # the selected experts' rows, one expert after another
        raw = raw.reshape(t.shape[0], t.shape[1], -1)[ids].reshape(-1, raw.shape[-1])
    x64 = x.astype(np.float64)
    y = np.concatenate([dequantize(t.qtype, (len(part), k), part) @ x64
                        for part in np.array_split(raw, max(1, -(-len(raw) // REF_ROWS)))])
    return y if ids is None else y.reshape(len(ids), -1)


def check_tensor(backend: Backend, t: GGUFTensor) -> dict[str, float] | None:
    """NMSE of each path's GPU result for one tensor; None if the reference
    is not finite (there is nothing right to compare with)."""
    fmt = get_format(t.qtype)
    x = np.random.default_rng(zlib.crc32(t.name.encode())).uniform(-1, 1, t.shape[-1]).astype(np.float32)
    ids = expert_ids(t.shape[0]) if len(t.shape) == 3 else None
    with np.errstate(invalid="ignore", over="ignore"):
        ref = reference(t, x, ids)
    if not np.isfinite(ref).all():
        return None
    w = backend.upload(t.qtype, t.shape, t.data)
    result = {}
    for path in fmt.paths:
        y = backend.matvec(w, x, path=path) if ids is None else backend.matvec_id(w, x, ids, path=path)
        result[path] = nmse(y, ref)
    return result


def natural_key(name: str) -> list:
    """blk.2 before blk.10: the runs of digits compared as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def compare_file(path: str | Path, backend: Backend, threshold: float = NMSE_THRESHOLD, out=print) -> int:
    """A header, one line per tensor (in layer order), then a summary;
    returns the exit status (1: a tensor failed)."""
    path = Path(path)
    matrices = sorted((t for t in load_gguf_all(path).values() if len(t.shape) in (2, 3)),  # not norms and biases
                      key=lambda t: natural_key(t.name))
    tensors = [t for t in matrices if is_supported(t)]
    skipped = [t for t in matrices if not is_supported(t)]
    if not tensors:
        raise ValueError(f"{path.name} has no weight matrices of a block type vkq supports"
                         + (f"; it has {describe_unsupported(skipped)}" if skipped else ""))

    width = max(len(t.name) for t in tensors)
    out(f"vkq compare {path.name} on {backend.device_info.name}: NMSE of the GPU mat-vec against "
        f"float64 dequantize(W) @ x, threshold {threshold:g}")
    out(f"{'tensor':<{width}}  {'type':<5}  {'shape':<16}  NMSE per path")
    failed, unchecked, worst = [], [], {}
    for t in tensors:
        result = check_tensor(backend, t)
        shape = "x".join(map(str, t.shape))
        if result is None:
            unchecked.append(t.name)
            out(f"{t.name:<{width}}  {t.qtype:<5}  {shape:<16}  not checked: the reference is not finite "
                "(its weights decode to NaN or inf)")
            continue
        bad = [p for p, e in result.items() if not e <= threshold]  # NaN fails too
        for p, e in result.items():
            score = e if np.isfinite(e) else np.inf
            if p not in worst or score > worst[p][0]:
                worst[p] = (score, t.name)
        if bad:
            failed.append(t.name)
        cells = "  ".join(f"{p} {e:9.3g}" for p, e in result.items())
        out(f"{t.name:<{width}}  {t.qtype:<5}  {shape:<16}  {cells}" + ("  FAIL" if bad else ""))

    types = sorted({t.qtype for t in tensors})
    out(f"\n{len(tensors)} tensors ({', '.join(types)}); worst NMSE: "
        + ("; ".join(f"{p} {e:.3g} ({name})" for p, (e, name) in worst.items()) or "none checked"))
    if skipped:
        out(f"skipped {describe_unsupported(skipped)}")
    if unchecked:
        out(f"NOT CHECKED: {len(unchecked)} tensor(s) whose float64 reference is not finite (the file's weights "
            f"decode to NaN or inf): {_listed(unchecked)}")
    if failed:
        out(f"FAIL: {len(failed)} tensor(s) above {threshold:g}: {_listed(failed)}")
    if failed or unchecked:
        return 1
    out(f"PASS: every tensor below {threshold:g}")
    return 0


def _listed(names: list[str]) -> str:
    return ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
