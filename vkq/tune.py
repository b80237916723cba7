"""`vkq tune`: measure launch parameters on this device and keep the best.

For every block type and path, starting from what the vendor table gives,
each parameter (workgroup size, rows per workgroup, chunks per thread,
reduction, how weights and x are bound) is varied in turn and kept where it is faster (coordinate
descent: a few dozen measurements per type instead of the full product).
A candidate's time is the total over mat-vec shapes of real models, each
measured as the median of several repeats with GPU timestamps where the
device has them (wall clock otherwise). The best path and the parameters
of both paths are saved per device (vkq.dispatch.tuning_store) and used by
the dispatcher from then on.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

import kp
import numpy as np
from tqdm import tqdm

from .dispatch import tuning_store
from .dispatch.choose import apply_limits
from .dispatch.config import PipelineConfig
from .formats import FORMATS, get_format
from .ops import MatVec, QuantizeQ8_1, q8_1_words
from .synthetic import random_weights

# (rows, K) of mat-vecs in Llama-3-8B-class models: attention, FFN up, FFN down.
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
QUICK_SHAPES = [(2048, 2048)]


def candidates(dev) -> dict[str, list]:
    sg = max(1, dev.caps.subgroup_size)
    wgs = sorted({w for w in (sg, 2 * sg, 4 * sg, 32, 64, 128) if w <= dev.caps.max_workgroup_invocations})
    return {
        "wg_size": wgs,
        "rows_per_wg": [1, 2, 4, 8, 16],
        "chunks_per_thread": [1, 2, 4, 8],
        "subgroup": [False, True] if dev.caps.subgroup_arithmetic else [False],
        "split_k": [True, False],
        "weights_binding": ["storage", "texel"],
        "x_binding": ["storage", "texel"],
    }


class Timer:
    """Time one mat-vec configuration on uploaded weights."""

    def __init__(self, backend, weights, repeats: int):
        self.backend, self.weights, self.repeats = backend, weights, repeats
        self.gpu = backend.device_info.timestamps_supported
        dev, lay = backend.device, weights.layout
        self.x = dev.upload(np.random.default_rng(0).uniform(-1, 1, lay.k_padded).astype(np.float32))
        self.y = dev.tensor(lay.rows)
        self._quantized = {}  # x_planes -> (xq, QuantizeQ8_1)

    def _quantize(self, planes: int):
        if planes not in self._quantized:
            dev, k_pad = self.backend.device, self.weights.layout.k_padded
            xq = dev.tensor(q8_1_words(1, k_pad, planes), np.uint32)
            self._quantized[planes] = xq, QuantizeQ8_1(dev, self.x, xq, 1, k_pad, planes)
        return self._quantized[planes]

    def seconds(self, cfg: PipelineConfig) -> float:
        dev = self.backend.device
        xq, quantize = self._quantize(cfg.x_planes) if cfg.path == "mmvq" else (None, None)
        matvec = MatVec(dev, self.weights, cfg, xq if cfg.path == "mmvq" else self.x, self.y)
        runs = 3  # mat-vecs per measurement: timestamps around them, not around the submit
        ops = []
        for _ in range(runs):
            if cfg.path == "mmvq":
                ops.append(kp.OpAlgoDispatch(quantize.algorithm))
                ops.append(dev.compute_barrier())
            ops += [kp.OpAlgoDispatch(a) for a in matvec.algorithms]
            ops.append(dev.compute_barrier())  # the next run overwrites y
        # kp latches one timestamp at the start and one after each op
        seq = dev.manager.sequence(0, len(ops) + 1) if self.gpu else dev.manager.sequence()
        for op in ops:
            seq.record(op)
        times = []
        for _ in range(self.repeats + 1):  # the first run warms up
            t = time.perf_counter()
            seq.eval()
            wall = time.perf_counter() - t
            if self.gpu:
                ts = seq.get_timestamps()
                times.append((ts[-1] - ts[0]) * self.backend.device_info.timestamp_period * 1e-9 / runs)
            else:
                times.append(wall / runs)
        seq.destroy()
        for algo in matvec.algorithms:
            algo.destroy()
        return statistics.median(times[1:])


def tune_type(backend, qtype: str, shapes, repeats: int, passes: int, progress) -> dict:
    """{'best': path, path: params, 'gbps': {path: (default, tuned)}} for one type."""
    fmt = get_format(qtype)
    dev = backend.device
    rng = np.random.default_rng(1)
    timers = []
    for rows, k in shapes:
        w = backend.upload(qtype, (rows, k), random_weights(fmt, rows, k, rng))
        timers.append((w, Timer(backend, w, repeats)))
    total_bytes = sum(w.nbytes for w, _ in timers)

    def cost(cfg: PipelineConfig) -> float:
        progress.update(1)
        return sum(t.seconds(apply_limits(cfg, dev.caps, fmt, w.layout.k, 1)) for w, t in timers)

    result = {"gbps": {}}
    best_path, best_time = None, float("inf")
    for path in ("dmmv", "mmvq") if fmt.has_int8_path else ("dmmv",):
        rows0, k0 = shapes[0]
        start = backend.dispatcher.choose(fmt, rows0, k0, 1, path=path)
        default_time = cur_time = cost(start)
        cur = start
        for _ in range(passes):
            for name, values in candidates(dev).items():
                for v in values:
                    if getattr(cur, name) == v:
                        continue
                    cand = replace(cur, **{name: v})
                    t = cost(cand)
                    if t < cur_time * 0.98:  # keep a change only for a clear gain (noise)
                        cur, cur_time = cand, t
        result[path] = {
            "wg_size": cur.wg_size, "rows_per_wg": cur.rows_per_wg, "chunks_per_thread": cur.chunks_per_thread,
            "reduction": "subgroup" if cur.subgroup else "shared", "split_k": cur.split_k,
            "weights_binding": cur.weights_binding, "x_binding": cur.x_binding,
        }
        result["gbps"][path] = [round(total_bytes / default_time / 1e9, 3), round(total_bytes / cur_time / 1e9, 3)]
        if cur_time < best_time:
            best_path, best_time = path, cur_time
    result["best"] = best_path
    return result


def run(args) -> int:
    from .backend import Backend

    backend = Backend(args.device)
    info = backend.device_info
    if args.reset:
        removed = tuning_store.reset(info)
        print(f"{'removed' if removed else 'no tuning file at'} {tuning_store.tuning_path(info)}")
        return 0
    if args.show:
        return show(info)

    types = list(FORMATS) if args.types == "all" else [get_format(t).name for t in args.types.split(",")]
    shapes = QUICK_SHAPES if args.quick else SHAPES
    passes = 1 if args.quick else 2
    n_params = sum(len(v) for v in candidates(backend.device).values())
    total = sum((2 if FORMATS[t].has_int8_path else 1) * (1 + passes * n_params) for t in types)
    print(f"vkq tune: {info.name}; shapes {', '.join(f'{r}x{k}' for r, k in shapes)}; "
          f"timer: {'GPU timestamps' if info.timestamps_supported else 'wall clock'}", file=sys.stderr)
    entries = dict(tuning_store.load(info))
    with tqdm(total=total, desc="tuning", unit="cfg", file=sys.stderr, disable=args.no_progress) as progress:
        for qtype in types:
            progress.set_postfix_str(qtype)
            entries[qtype] = tune_type(backend, qtype, shapes, args.repetitions, passes, progress)
            path = tuning_store.save(info, entries, {"shapes": shapes})  # saved as it goes
    print(f"saved {path}")
    print_table(entries, types)
    return 0


def print_table(entries: dict, types) -> None:
    print("| type | path | default GB/s | tuned GB/s | gain | parameters |")
    print("|---|---|---:|---:|---:|---|")
    for qtype in types:
        e = entries.get(qtype)
        if not e:
            continue
        for path, (before, after) in e.get("gbps", {}).items():
            p = e[path]
            mark = " (best)" if path == e["best"] else ""
            print(f"| {qtype} | {path}{mark} | {before:.2f} | {after:.2f} | {after / before:.2f}x | "
                  f"wg {p['wg_size']}, rows {p['rows_per_wg']}, cpt {p['chunks_per_thread']}, {p['reduction']}, "
                  f"{'split K' if p['split_k'] else 'rows per thread'}, weights {p.get('weights_binding', 'storage')}, "
                  f"x {p.get('x_binding', 'storage')} |")


def show(info) -> int:
    entries = tuning_store.load(info)
    path = tuning_store.tuning_path(info)
    if not entries:
        print(f"no usable tuning results for this device ({path}); the vendor table is used")
        return 0
    print(f"tuning results: {path}")
    print_table(entries, list(entries))
    return 0
