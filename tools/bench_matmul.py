#!/usr/bin/env python3
"""Time Backend.matmul of n columns against n / 8 Backend.matvec calls of 8
columns on the same matrix (the mat-vec's way through a prompt), in one
process, interleaved: the best of --reps runs of each.

Usage: python tools/bench_matmul.py [--types Q4_0,Q4_K] [--rows 4096] [--k 4096] [--n 512] [--reps 3]
Weights are random valid blocks (vkq.blocks.synthetic); the first call of
each (pipeline compile) is not timed.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import vkq  # noqa: E402
from vkq.blocks.formats import get_format  # noqa: E402
from vkq.blocks.synthetic import random_weights  # noqa: E402
from vkq.resolve import MAX_COLS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="Q4_0,Q4_K")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    backend = vkq.Backend()
    print(f"device: {backend.device_info.name}")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (args.k, args.n)).astype(np.float32)
    chunks = [np.ascontiguousarray(x[:, i:i + MAX_COLS]) for i in range(0, args.n, MAX_COLS)]
    for qtype in args.types.split(","):
        fmt = get_format(qtype)
        w = backend.upload(fmt.name, (args.rows, args.k), random_weights(fmt, args.rows, args.k, rng))
        backend.matmul(w, x)
        for c in chunks:
            backend.matvec(w, c)
        best_mm = best_mv = float("inf")
        for _ in range(args.reps):
            t = time.perf_counter()
            backend.matmul(w, x)
            best_mm = min(best_mm, time.perf_counter() - t)
            t = time.perf_counter()
            for c in chunks:
                backend.matvec(w, c)
            best_mv = min(best_mv, time.perf_counter() - t)
        flops = 2 * args.rows * args.k * args.n
        print(f"{fmt.name} {args.rows}x{args.k} n={args.n}: matmul {best_mm:.3f} s ({flops / best_mm / 1e9:.1f} GFLOP/s; "
              f"{backend.matmul_pipeline(w, args.n).describe()}); {len(chunks)} matvec calls of <= {MAX_COLS} "
              f"columns {best_mv:.3f} s ({backend.matmul_pipeline(w, MAX_COLS).path}); "
              f"matmul's speed-up over the matvec calls: {best_mv / best_mm:.2f}x", flush=True)
        w.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
