"""`vkq bench`: llama-bench's table for the mat-vec share of decoding.

For each model (preset or GGUF file) and path, the decode step (vkq.step)
is recorded once and replayed: after one warm-up token, each repetition
times n tokens by wall clock (ids drawn, submitted, waited for, logits read
back) and gives n / seconds; the table shows mean ± standard deviation over
the repetitions, like llama-bench's `tg` tests. Effective GB/s is the
weight bytes one token reads times t/s, and "% bw" relates it to this
device's memory read bandwidth as vkq measures it (shaders/membw.comp).
"""
from __future__ import annotations

import csv
import io
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

import kp
import numpy as np
from tqdm import tqdm

from .backend import Backend
from .models import Model, list_presets, resolve
from .runtime import Device
from .shader_variants import MEMBW
from .step import STEP_PATHS, DecodeStep

BACKEND = "Vulkan (vkq)"
NOTE = ("vkq bench measures the mat-vec share of decoding: every weight matrix of one token, in "
        "dependency order, on synthetic activations (no attention, norms or sampling).")

# -- device memory bandwidth ------------------------------------------------

MEMBW_WG = 64  # invocations per workgroup (shaders/membw.comp)
MEMBW_GROUPS = 1024  # workgroups, each one contiguous chunk: <= 256 loop iterations per invocation
MEMBW_MAX_BYTES = 256 << 20  # far beyond any cache; lavapipe allows 128 MiB per binding
_BANDWIDTH: dict[int, float] = {}  # device index -> bytes/s, measured once per process


def memory_bandwidth(device: Device, runs: int = 5) -> float:
    """Read bandwidth (bytes/s) of the device's memory as a shader sees it:
    best of `runs` passes over one big buffer, wall clock per pass."""
    if device.index in _BANDWIDTH:
        return _BANDWIDTH[device.index]
    unit = 16 * MEMBW_GROUPS  # whole uvec4 chunks per workgroup
    nbytes = min(MEMBW_MAX_BYTES, device.max_buffer_bytes) // unit * unit
    data = device.upload(np.ones(nbytes // 4, np.uint32))
    sums = device.tensor(MEMBW_GROUPS * MEMBW_WG, np.uint32)
    push = np.array([nbytes // unit], np.uint32)
    algo = device.algorithm([data, sums], MEMBW, (MEMBW_GROUPS, 1, 1), [MEMBW_WG], push)
    seq = device.manager.sequence()
    seq.record(kp.OpAlgoDispatch(algo))
    # Warm-up (pipeline compile, first touch), and proof that every word was read.
    device.manager.sequence().record(kp.OpAlgoDispatch(algo)).record(kp.OpTensorSyncLocal([sums])).eval()
    if int(sums.data().astype(np.int64).sum()) != nbytes // 4:
        raise RuntimeError("shaders/membw.comp did not read its whole buffer on this device")
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        seq.eval()
        best = min(best, time.perf_counter() - t)
    _BANDWIDTH[device.index] = nbytes / best
    return _BANDWIDTH[device.index]


# -- measurement ------------------------------------------------------------

@dataclass
class Row:
    """One measured test, with llama-bench's field names where it has them."""

    model: str
    model_size: int  # bytes of the mat-vec weights
    model_n_params: int
    backend: str
    device: str
    path: str
    test: str
    n_gen: int
    samples_ts: list[float]  # tokens per second of each repetition
    bytes_per_token: int  # weight bytes one token reads (MoE: the used experts)
    membw_gbps: float  # the device's memory read bandwidth (memory_bandwidth)
    paths_used: dict[str, int]  # how many matrices took each path
    activations: str = "q8_1"  # the int8 path's activation format (vkq.activations)
    avg_ts: float = field(init=False)
    stddev_ts: float = field(init=False)
    gbps: float = field(init=False)  # effective: weight bytes read per token x t/s
    bw_pct: float = field(init=False)  # gbps as a share of membw

    def __post_init__(self):
        self.avg_ts = statistics.mean(self.samples_ts)
        self.stddev_ts = statistics.stdev(self.samples_ts) if len(self.samples_ts) > 1 else 0.0
        self.gbps = self.bytes_per_token * self.avg_ts / 1e9
        self.bw_pct = 100 * self.gbps / self.membw_gbps


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


def check_host_memory(model: Model, device_type: str) -> None:
    """Refuse a model that cannot fit, rather than be killed by the OOM killer
    halfway through: kp keeps a host staging copy of every device tensor, and
    on a CPU or integrated device the device copy is host memory too."""
    need = model.nbytes * (2 if device_type in ("cpu", "integrated") else 1)
    avail = _available_memory()
    if avail is not None and need > 0.9 * avail:
        raise ValueError(f"{model.name} needs about {need / 2**30:.1f} GiB of host memory for its weights on "
                         f"this device, {avail / 2**30:.1f} GiB are available")


def upload(backend: Backend, model: Model, bar: tqdm) -> dict:
    """Every matrix of the model on the device; preset data is made, uploaded and dropped one by one."""
    rng = np.random.default_rng(0)
    weights = {}
    for i, m in enumerate(model.matrices):
        bar.set_description(f"{model.name}: upload {i + 1}/{len(model.matrices)}")
        weights[m.name] = backend.upload(m.qtype, m.shape, model.data(m, rng))
    return weights


def measure(step: DecodeStep, n_gen: int, repetitions: int, bar: tqdm) -> list[float]:
    step.run()  # warm-up: the driver compiles pipelines on first use
    bar.update(1)
    samples = []
    for _ in range(repetitions):
        t = time.perf_counter()
        for _ in range(n_gen):
            step.run()
            bar.update(1)
        samples.append(n_gen / (time.perf_counter() - t))
    return samples


def bench(backend: Backend, models: list[Model], paths: list[str], n_gen: int, repetitions: int) -> list[Row]:
    membw_gbps = memory_bandwidth(backend.device) / 1e9
    rows = []
    total = len(models) * len(paths) * (1 + n_gen * repetitions)
    with tqdm(total=total, unit="tok", file=sys.stderr, disable=None, leave=False) as bar:
        for model in models:
            weights = upload(backend, model, bar)
            for path in paths:
                bar.set_description(f"{model.name}: record {path}")
                step = DecodeStep(backend, model, weights, path)
                bar.set_description(f"{model.name}: {path}")
                samples = measure(step, n_gen, repetitions, bar)
                used = [cfg.path for cfg in step.configs.values()]
                rows.append(Row(model.name, model.nbytes, model.params, BACKEND, backend.device_info.name, path,
                                f"tg{n_gen}", n_gen, samples, model.bytes_per_token, membw_gbps,
                                {p: used.count(p) for p in sorted(set(used))}, backend.activations))
                del step
            del weights  # free the device memory before the next model
    return rows


def compare(a: Row, b: Row) -> dict:
    """Two measured rows of one model side by side; diff = how much faster b is than a."""
    return {
        "model": a.model, "model_size": a.model_size, "model_n_params": a.model_n_params,
        "backend": a.backend, "device": a.device, "test": a.test,
        "path_a": a.path, "avg_ts_a": a.avg_ts, "stddev_ts_a": a.stddev_ts,
        "path_b": b.path, "avg_ts_b": b.avg_ts, "stddev_ts_b": b.stddev_ts,
        "diff_pct": 100 * (b.avg_ts / a.avg_ts - 1),
    }


# -- output -----------------------------------------------------------------

def _size(nbytes: int) -> str:
    """GiB like llama-bench; MiB only where GiB would round to zero (test models)."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 / 100 else f"{nbytes / 2**20:.2f} MiB"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e7 else f"{n / 1e6:.2f} M"


def _ts(mean: float, sd: float) -> str:
    return f"{mean:.2f} ± {sd:.2f}"


def markdown(header: list[str], cells: list[list[str]], right: set[str]) -> str:
    """A markdown table padded to aligned columns, numbers right-aligned (like llama-bench)."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]

    def line(vals: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if h in right else v.ljust(w)
                                 for v, h, w in zip(vals, header, widths)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if h in right else "-" * w for h, w in zip(header, widths)) + " |"
    return "\n".join([line(header), rule] + [line(c) for c in cells])


def render_md(rows: list[Row], comparisons: list[dict] | None) -> str:
    fallback = any(r.path == "mmvq" and r.paths_used.get("dmmv") for r in rows)

    def path_label(path: str) -> str:
        return path + ("¹" if path == "mmvq" and fallback else "")

    if comparisons:
        header = ["model", "size", "params", "backend", "device", "test",
                  f"t/s {path_label(comparisons[0]['path_a'])}", f"t/s {path_label(comparisons[0]['path_b'])}", "diff"]
        cells = [[c["model"], _size(c["model_size"]), _params(c["model_n_params"]), c["backend"], c["device"],
                  c["test"], _ts(c["avg_ts_a"], c["stddev_ts_a"]), _ts(c["avg_ts_b"], c["stddev_ts_b"]),
                  f"{c['diff_pct']:+.1f}%"] for c in comparisons]
        right = {"size", "params", "test", header[6], header[7], "diff"}
    else:
        header = ["model", "size", "params", "backend", "device", "path", "test", "t/s", "GB/s", "% bw"]
        cells = [[r.model, _size(r.model_size), _params(r.model_n_params), r.backend, r.device,
                  path_label(r.path) if r.paths_used.get("dmmv") else r.path, r.test,
                  _ts(r.avg_ts, r.stddev_ts), f"{r.gbps:.2f}", f"{r.bw_pct:.1f}"] for r in rows]
        right = {"size", "params", "test", "t/s", "GB/s", "% bw"}
    r0 = rows[0]
    notes = [NOTE, f"t/s: mean ± std over {len(r0.samples_ts)} repetition(s) of {r0.n_gen} tokens, wall clock "
                   "per token (submit to logits read back)."]
    if comparisons:
        notes.append("diff: t/s of the second path relative to the first.")
    else:
        notes.append("GB/s: weight bytes read per token (MoE: the used experts only) x t/s; % bw: of "
                     f"{r0.membw_gbps:.1f} GB/s, this device's memory read bandwidth as vkq measures it.")
    autos = {f"{r.model}: {', '.join(f'{p} {n}' for p, n in r.paths_used.items())}" for r in rows if r.path == "auto"}
    if autos:
        notes.append("auto = the dispatcher's choice per matrix (matrices per path): " + "; ".join(sorted(autos)))
    int8 = sorted({r.activations for r in rows if r.paths_used.get("mmvq")})
    if int8:
        notes.append(f"int8 path activations: {', '.join(int8)} (--activations; q8_1 is ggml's Q8_1).")
    if fallback:
        notes.append("¹ mmvq falls back to dmmv for F32/F16 matrices (e.g. an MoE router): "
                     "they have no int8 path.")
    return markdown(header, cells, right) + "\n\n" + "\n".join(notes)


def _csv_record(row: Row) -> dict:
    """A row with its list and dict fields as space-separated text."""
    d = asdict(row)
    d["samples_ts"] = " ".join(map(str, row.samples_ts))
    d["paths_used"] = " ".join(f"{p}:{n}" for p, n in row.paths_used.items())
    return d


def render(rows: list[Row], fmt: str, comparisons: list[dict] | None = None) -> str:
    """The table as md, csv or json: the measured rows, or with --compare the comparisons."""
    if fmt == "md":
        return render_md(rows, comparisons)
    if fmt == "json":
        return json.dumps(comparisons or [asdict(r) for r in rows], indent=2)
    records = comparisons or [_csv_record(r) for r in rows]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue().rstrip("\n")


# -- command line -----------------------------------------------------------

def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _paths(text: str, what: str) -> list[str]:
    paths = [p.lower() for p in _split(text)]
    bad = [p for p in paths if p not in STEP_PATHS]
    if bad or not paths:
        raise ValueError(f"{what}: unknown path(s) {', '.join(bad) or text!r}; expected {', '.join(STEP_PATHS)}")
    return paths


def run(args) -> int:
    if args.list:
        print("\n".join(list_presets()))
        return 0
    if args.n_gen < 1 or args.repetitions < 1:
        raise ValueError("-n and -r must be at least 1")
    models = [resolve(m) for m in _split(args.model)]  # every name checked before any work
    for m in models:
        if m.ignored:
            print(f"vkq bench: {m.name}: left out {len(m.ignored)} weight matrices the decode step does "
                  f"not model: {', '.join(m.ignored[:4])}" + (" ..." if len(m.ignored) > 4 else ""), file=sys.stderr)
    if args.compare:
        paths = _paths(args.compare, "--compare")
        if len(paths) != 2 or paths[0] == paths[1]:
            raise ValueError(f"--compare takes two different paths A,B, got {args.compare!r}")
    else:
        paths = _paths(args.path or "auto", "--path")
    backend = Backend(args.device, activations=args.activations)
    for m in models:
        check_host_memory(m, backend.device_info.device_type)
    rows = bench(backend, models, paths, args.n_gen, args.repetitions)
    comparisons = None
    if args.compare:
        by_key = {(r.model, r.path): r for r in rows}
        comparisons = [compare(by_key[m.name, paths[0]], by_key[m.name, paths[1]]) for m in models]
    if args.output != "md":
        print(NOTE, file=sys.stderr)
    print(render(rows, args.output, comparisons))
    return 0
