"""`vkq bench --matvec`: mat-vec speed per block type and path on one device.

Each case is timed on the real thing: GGUF-layout random valid weights are
uploaded once, then the recorded mat-vec is replayed (x in, y out, wall
clock per call including the host round trip). The baseline, measured in
the same run, is numpy's float32 mat-vec on the already-dequantized weights:
the fastest thing a numpy user can do with the same matrix.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from .formats import FORMATS, get_format
from .reference import dequantize
from .synthetic import random_weights


def _time(fn, reps: int) -> list[float]:
    fn()  # warm-up: pipeline creation, first-touch of memory
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _parse_shape(text: str) -> tuple[int, int]:
    try:
        rows, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--shape must look like 4096x14336, got {text!r}") from None
    return rows, k


def run_matvec_bench(args) -> int:
    from .backend import Backend

    rows, k = _parse_shape(args.shape)
    types = list(FORMATS) if args.types == "all" else [get_format(t).name for t in args.types.split(",")]
    paths = [p.strip().lower() for p in args.path.split(",") if p.strip()]
    backend = Backend(args.device, activations=args.activations)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, k).astype(np.float32)

    print(f"vkq bench: {rows} x {k} mat-vec, one column, on {backend.device_info.name}; "
          f"{args.repetitions} runs per case, wall clock per call; int8 activations {backend.activations}",
          file=sys.stderr)
    header = "| type | path | ms | weights GB/s | x numpy f32 |"
    print(header)
    print("|---|---|---:|---:|---:|")
    for name in types:
        fmt = FORMATS[name]
        data = random_weights(fmt, rows, k, rng)
        w = backend.upload(name, (rows, k), data)
        base = _numpy_baseline(name, rows, k, data, x, args.repetitions)
        for path in paths:
            if path == "mmvq" and not fmt.has_int8_path:
                continue
            ts = _time(lambda: backend.matvec(w, x, path=None if path == "auto" else path), args.repetitions)
            mean, sd = statistics.mean(ts), (statistics.stdev(ts) if len(ts) > 1 else 0.0)
            print(f"| {name} | {path} | {mean * 1e3:.2f} ± {sd * 1e3:.2f} | {w.nbytes / mean / 1e9:.2f} "
                  f"| {base / mean:.2f}x |", flush=True)
    return 0


def _numpy_baseline(qtype: str, rows: int, k: int, data, x, repetitions: int) -> float:
    """Median seconds of numpy's float32 mat-vec on the dequantized weights."""
    w32 = dequantize(qtype, (rows, k), data).astype(np.float32)
    return statistics.median(_time(lambda: w32 @ x, repetitions))
