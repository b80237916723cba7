#!/usr/bin/env python3
"""Time vkq's tiled mat-mat (Backend.matmul of n columns) against one of:

- (default) n / 8 Backend.matvec calls of 8 columns on the same matrix (the
  mat-vec's way through a prompt), in one process, interleaved: the best of
  --reps runs of each, by wall clock;
- (--ggml PATH) ggml-vulkan's MUL_MAT, as ggml's own `test-backend-ops perf`
  (PATH) times it on the same shapes and types: --reps rounds that alternate
  the two sides (ggml then vkq, vkq then ggml, ...), the fastest round of
  each kept. vkq's time is its replay's kernels by GPU timestamps (the wall
  clock where the device has none), one replay of a graph holding the
  mat-mat alone; ggml's is its us/run (wall clock over a graph of the same
  mat-mul repeated; vkq/commands/ggml_perf.py). ggml's perf list holds
  MUL_MAT at m=4096, k=14336 only: another shape shows as "no such case"
  unless that binary's list has it;
- (--kernel coopmat, or coopmat-int8) the cooperative-matrix kernel's
  float16 flavour (or its int8 one) against the tiled kernel the dispatcher
  takes without it (for int8: the int8 tiled kernel on q8_1 activations),
  each a graph of the mat-mat alone timed as for --ggml, alternating, on the
  same weights: first the type's self-checks (vkq.dispatch.coopmat_check,
  kept in the tuning directory), then, where the flavour is offered, each of
  its candidate tiles (vkq.dispatch.tiles.coopmat_candidates, the first the
  dispatcher's) and the tiled kernel timed,
  with each candidate's NMSE against the tiled kernel at this shape; where it
  is not offered, why.

Usage: python tools/bench_matmul.py [--types Q4_0,Q4_K] [--shapes 4096x4096,4096x14336] [--n 512] [--reps 3]
                                    [--ggml build/bin/test-backend-ops | --kernel coopmat|coopmat-int8]
(--rows R --k K: the single shape RxK, when --shapes is not given.)
Weights are random valid blocks (vkq.blocks.synthetic); the first call of
each (pipeline compile) is not timed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import vkq  # noqa: E402
from vkq.blocks.formats import get_format  # noqa: E402
from vkq.blocks.synthetic import random_weights  # noqa: E402
from vkq.commands.ggml_perf import GgmlPerf, ggml_type_name  # noqa: E402
from vkq.blocks.reference import nmse  # noqa: E402
from vkq.dispatch.coopmat_check import ensure_checked  # noqa: E402
from vkq.dispatch import coopmat, tile_tuning, tiles  # noqa: E402
from vkq.device.timing import summarize  # noqa: E402
from vkq.resolve import MAX_COLS  # noqa: E402


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'4096x4096,4096x14336' -> [(rows, k), ...]; SystemExit naming a bad one."""
    shapes = []
    for part in text.split(","):
        rows, _, k = part.strip().lower().partition("x")
        if not (rows.isdigit() and k.isdigit() and int(rows) > 0 and int(k) > 0):
            raise SystemExit(f"--shapes: {part!r} is not ROWSxK (e.g. 4096x14336)")
        shapes.append((int(rows), int(k)))
    return shapes


def against_matvec(backend, types, shapes, n, reps, rng) -> None:
    for rows, k in shapes:
        x = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        chunks = [np.ascontiguousarray(x[:, i:i + MAX_COLS]) for i in range(0, n, MAX_COLS)]
        for qtype in types:
            fmt = get_format(qtype)
            w = backend.upload(fmt.name, (rows, k), random_weights(fmt, rows, k, rng))
            backend.matmul(w, x)
            for c in chunks:
                backend.matvec(w, c)
            best_mm = best_mv = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                backend.matmul(w, x)
                best_mm = min(best_mm, time.perf_counter() - t)
                t = time.perf_counter()
                for c in chunks:
                    backend.matvec(w, c)
                best_mv = min(best_mv, time.perf_counter() - t)
            flops = 2 * rows * k * n
            print(f"{fmt.name} {rows}x{k} n={n}: matmul {best_mm:.3f} s ({flops / best_mm / 1e9:.1f} GFLOP/s; "
                  f"{backend.matmul_pipeline(w, n).describe()}); {len(chunks)} matvec calls of <= {MAX_COLS} "
                  f"columns {best_mv:.3f} s ({backend.matmul_pipeline(w, MAX_COLS).path}); "
                  f"matmul's speed-up over the matvec calls: {best_mv / best_mm:.2f}x", flush=True)
            w.free()


class VkqMatMul:
    """One mat-mat as a graph of its own (x up, the mat-mat, y back): `sample()`
    replays it once and returns its kernels' seconds (GPU timestamps) or,
    without them, the replay's wall clock; `wall` is the last replay's."""

    def __init__(self, backend, fmt, rows: int, k: int, n: int, rng, w=None, config=None):
        self.w = w or backend.upload(fmt.name, (rows, k), random_weights(fmt, rows, k, rng))
        self.graph = backend.graph(timestamps=True)
        x = self.graph.input(backend.tensor(k, n, name="x"))
        self.graph.output(self.graph.matmul(self.w, x, config=config))
        x.write(rng.uniform(-1, 1, (n, k)).astype(np.float32))
        self.describe = (config or backend.matmul_pipeline(self.w, n)).describe()
        self.wall = None
        self.sample()  # builds the pipelines; not timed

    def sample(self) -> float:
        t = time.perf_counter()
        self.graph.run()
        self.wall = time.perf_counter() - t
        return self.graph.kernel_seconds if self.graph.kernel_seconds is not None else self.wall


def against_ggml(backend, ggml_path, types, shapes, n, reps, rng) -> None:
    ggml = GgmlPerf(ggml_path, backend.device_info.index, backend.device_info.name)
    ggml.check()
    timer = "GPU timestamps" if backend.device_info.timestamps_supported else "wall clock"
    names = {get_format(t).name: ggml_type_name(get_format(t)) for t in types}
    print(f"vkq {vkq.__version__}, device: {backend.device_info.name}; vkq timed by {timer}, ggml by its "
          f"us/run; {reps} rounds, alternating; load average {os.getloadavg()[0]:.1f}", flush=True)
    by_rows: dict[int, list[int]] = {}
    for rows, k in shapes:
        by_rows.setdefault(rows, []).append(k)
    cases = [(t, rows, k) for rows, k in shapes for t in names]
    mine = {}
    for t, rows, k in cases:
        print(f"  vkq: uploading {t} {rows}x{k}, first replay", flush=True)
        mine[t, rows, k] = VkqMatMul(backend, get_format(t), rows, k, n, rng)
    vkq_s = {c: [] for c in cases}
    vkq_wall = {c: [] for c in cases}
    ggml_us = {c: [] for c in cases}
    ggml_status = {c: "no such case" for c in cases}

    def run_ggml(r):
        for rows, ks in by_rows.items():
            regex = (f"type_a=({'|'.join(names.values())}),type_b=f32,m={rows},n={n},"
                     f"k=({'|'.join(str(k) for k in ks)}),")
            for case in ggml.run(regex).cases:
                t = next((t for t, g in names.items() if g == case.params["type_a"]), None)
                key = (t, int(case.params["m"]), int(case.params["k"]))
                if key in ggml_us and int(case.params["n"]) == n:
                    ggml_status[key] = case.status
                    if case.seconds is not None:
                        ggml_us[key].append(case.us_per_run)
                        print(f"  round {r + 1} ggml {key[0]} {key[1]}x{key[2]}: {case.us_per_run:.0f} us "
                              f"({case.runs} runs)", flush=True)

    def run_vkq(r):
        for c in cases:
            vkq_s[c].append(mine[c].sample())
            vkq_wall[c].append(mine[c].wall)
            print(f"  round {r + 1} vkq  {c[0]} {c[1]}x{c[2]}: {vkq_s[c][-1] * 1e6:.0f} us "
                  f"(wall {mine[c].wall * 1e6:.0f} us)", flush=True)

    for r in range(reps):
        print(f"round {r + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
        for side in ((run_ggml, run_vkq) if r % 2 == 0 else (run_vkq, run_ggml)):
            side(r)
    print(f"\nend: load average {os.getloadavg()[0]:.1f}\n")
    print(f"| type | rows x K | n | ggml us/run | vkq us ({timer}) | vkq wall us | ggml / vkq | vkq's tiles |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for c in cases:
        v = summarize(vkq_s[c])
        wall = min(vkq_wall[c])
        g = summarize(ggml_us[c]).seconds if ggml_us[c] else None
        ratio = f"{g / (v.seconds * 1e6):.2f}x" if g else "-"
        gtext = f"{g:.0f}" if g else ggml_status[c]
        print(f"| {c[0]} | {c[1]} x {c[2]} | {n} | {gtext} | {v.seconds * 1e6:.0f} | {wall * 1e6:.0f} | {ratio} | "
              f"{mine[c].describe} |", flush=True)
    for m in mine.values():
        m.graph.destroy()
        m.w.free()


def coopmat_against_tiled(backend, types, shapes, n, reps, rng, flavour: str = "float16") -> int:
    """--kernel coopmat (the float16 flavour) or coopmat-int8; 1 where the
    device lacks that flavour. Every tile of tiles.coopmat_candidates that
    fits the device is timed against the tiled kernel (for int8, the int8
    tiled kernel on q8_1 activations), alternating, with its NMSE against it
    (the self-check covers the default tile only: a wrong candidate shows
    here)."""
    disp, caps = backend.dispatcher, backend.device.caps
    if coopmat.device_missing(caps, flavour):
        print(f"cooperative matrix: {coopmat.summary(caps, disp.coopmat_checks)}")
        return 1
    rows_out = []
    for rows, k in shapes:
        for t in types:
            fmt = get_format(t)
            ensure_checked(backend, fmt, None)
            status, why = coopmat.status(caps, fmt, disp.coopmat_checks, flavour)
            print(f"{fmt.name}: cooperative matrix {flavour} {status} ({why})", flush=True)
            if status != coopmat.OFFERED:
                continue
            w = backend.upload(fmt.name, (rows, k), random_weights(fmt, rows, k, rng))
            tiled = tile_tuning.tiled(disp, fmt, k, "mmvq", "q8_1") if flavour == "int8" else \
                tile_tuning.tiled(disp, fmt, k)
            x = rng.uniform(-1, 1, (k, n)).astype(np.float32)
            expected = backend.matmul(w, x, config=tiled)
            sides = {"tiled": VkqMatMul(backend, fmt, rows, k, n, rng, w, tiled)}
            errors = {}
            for shape in tiles.coopmat_candidates(caps, flavour):
                name = "coopmat " + "x".join(map(str, shape))
                try:
                    cm = tiles.coopmat_config(caps, fmt, k, shape, flavour)
                    errors[name] = nmse(backend.matmul(w, x, config=cm), expected)
                    sides[name] = VkqMatMul(backend, fmt, rows, k, n, rng, w, cm)
                except (ValueError, RuntimeError) as e:  # (a tile the device or its driver refuses)
                    print(f"  {name}: not run: {type(e).__name__}: {e}", flush=True)
            times = {name: [] for name in sides}
            for r in range(reps):
                for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                    times[name].append(sides[name].sample())
            best = {name: summarize(v).seconds for name, v in times.items()}
            for name in sides:
                if name == "tiled":
                    continue
                rows_out.append(f"| {fmt.name} | {rows} x {k} | {n} | {best['tiled'] * 1e6:.0f} | {name[8:]} | "
                                f"{best[name] * 1e6:.0f} | {best['tiled'] / best[name]:.2f}x | {errors[name]:.1e} | "
                                f"{sides[name].describe} | {sides['tiled'].describe} |")
                print(rows_out[-1], flush=True)
            for side in sides.values():
                side.graph.destroy()
            w.free()
    timer = "GPU timestamps" if backend.device_info.timestamps_supported else "wall clock"
    print(f"\n| type | rows x K | n | tiled us ({timer}) | coopmat tile (bm x bn x K chunks x tm x tn) | "
          f"coopmat us | speed-up | NMSE coopmat vs tiled | coopmat kernel | tiled kernel |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|---|")
    print("\n".join(rows_out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="Q4_0,Q4_K")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--shapes", help="ROWSxK,... (default: --rows x --k)")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ggml", metavar="PATH", help="ggml's test-backend-ops (a Vulkan build): compare with it")
    ap.add_argument("--kernel", choices=["coopmat", "coopmat-int8"],
                    help="coopmat: the cooperative-matrix kernel's float16 flavour against the tiled kernel; "
                         "coopmat-int8: its int8 flavour against the int8 tiled kernel")
    return ap


def main() -> int:
    args = build_parser().parse_args()
    if args.ggml and args.kernel:
        raise SystemExit("--ggml and --kernel: one comparison at a time")
    shapes = parse_shapes(args.shapes) if args.shapes else [(args.rows, args.k)]
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for t in types:
        get_format(t)  # an unknown type fails here, before anything runs
    backend = vkq.Backend()
    print(f"device: {backend.device_info.name}")
    rng = np.random.default_rng(0)
    if args.kernel:
        return coopmat_against_tiled(backend, types, shapes, args.n, args.reps, rng,
                                     "int8" if args.kernel == "coopmat-int8" else "float16")
    if args.ggml:
        against_ggml(backend, args.ggml, types, shapes, args.n, args.reps, rng)
    else:
        against_matvec(backend, types, shapes, args.n, args.reps, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
