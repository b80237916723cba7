"""`vkq bench`: llama-bench's table for the weight products of a model.

For each model (preset or GGUF file), path and test, a step
(vkq/commands/bench_step.py) is recorded once and replayed: `tg N` is the
decode step (every weight matrix of one token, a mat-vec each) replayed N
times; `pp N` is one prompt of N tokens (every weight matrix multiplied by
N columns through the tiled mat-mat, the output head by the last one). After
the clocks are warmed up (vkq/device/timing.py), each repetition times its
tokens by wall clock (submitted, waited for, logits read back) and, where
the device has GPU timestamps, by kernel time alone; the table shows both as
t/s, mean ± standard deviation over the repetitions, like llama-bench's:
the difference is what the submission costs. For tg, effective GB/s is the
weight bytes one token reads per second of kernel time, and "% bw" relates
it to this device's memory read bandwidth as vkq measures it
(`memory_bandwidth`, shaders/membw.comp: the best of a probe before the runs
and one after); a prompt's mat-mats are bound by arithmetic, so pp rows
have neither.

`vkq bench --matvec` times one matrix per block type and path instead
(`bench_matvec`), against numpy on the dequantized weights.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
import statistics
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field

import kp
import numpy as np

from ..backend import Backend
from ..blocks.activations import GENERATE_ACTIVATIONS
from ..blocks.formats import FORMATS, get_format
from ..blocks.reference import dequantize
from ..blocks.synthetic import random_weights
from ..device.runtime import Device
from ..device.shader_variants import MEMBW, MEMBW_TEXEL
from ..device.timing import ROTATION_BYTES, WARM_SECONDS, calibrate, timestamp_span, wall_samples, warm_up
from ..dispatch.config import describe as describe_launch
from ..dispatch.config import path_label
from ..dispatch.tiles import TileConfig
from ..markdown import markdown
from ..resolve import MAX_MATMUL_COLS
from .bench_step import STEP_PATHS, DecodeStep, PromptStep
from .console import Progress
from .presets import Model, presets_by_model, resolve

BACKEND = "Vulkan (vkq)"
DEFAULT_MODEL = "llama-3.2-1b:Q4_0"  # `vkq bench`'s model when none is given
DEFAULT_N_PROMPT = 512  # -p: llama-bench's pp512
DEFAULT_N_GEN = 128  # -n: llama-bench's tg128
NOTE = ("vkq bench measures the weight products of a model on synthetic activations (no attention, norms or "
        "sampling), in dependency order: tgN, the mat-vec share of decoding N tokens (every weight matrix of "
        "one token, a mat-vec each); ppN, the mat-mat share of a prompt of N tokens (every weight matrix by N "
        "columns through the tiled mat-mat, the output head by the last token only).")

# -- device memory bandwidth ------------------------------------------------

MEMBW_WG = 64  # invocations per workgroup (shaders/membw.comp)
# 16-byte loads per invocation, per access pattern: interleaved (coalesced on
# a GPU) in short loops, many workgroups in flight; runs of one invocation
# (a CPU driver's lanes each streaming, as in a mat-vec owning whole rows)
# long: on lavapipe 256-load runs read 21.8 GB/s, 16-load ones 14.5-16.6,
# interleaved 12.2, where F32's mat-vec read 20.
MEMBW_LOADS = {False: 16, True: 256}  # LANE_RUNS -> loads
MEMBW_BUFFERS = 4  # bindings of shaders/membw.comp
MEMBW_SAMPLE_SECONDS = 0.05  # GPU time per sample
MEMBW_SAMPLES = 7  # the best of them counts: the device's bandwidth, not the machine's load
PROBE_AGAIN_AFTER = 60.0  # seconds of runs after which vkq bench probes the bandwidth again (bench's probe_after)
_BANDWIDTH: dict[int, float] = {}  # device index -> bytes/s, the best probe of this process


def memory_bandwidth(device: Device) -> float:
    """The device's memory read bandwidth (bytes/s): the best probe
    (`probe_bandwidth`) of this process, probing once if none was made."""
    if device.index not in _BANDWIDTH:
        probe_bandwidth(device)
    return _BANDWIDTH[device.index]


def probe_bandwidth(device: Device) -> float:
    """Read bandwidth (bytes/s) of the device's memory as a shader sees it,
    measured now: four buffers of together ROTATION_BYTES (past any cache)
    read by one dispatch, repeated back to back for MEMBW_SAMPLE_SECONDS of
    GPU time per sample after WARM_SECONDS of warm-up, best of MEMBW_SAMPLES
    samples; read through storage buffers and, where they fit, texel views,
    each invocation's loads interleaved with its neighbours' or in a run of
    its own: the fastest of these, as the tables pick the fastest for the
    mat-vec. Other work on the machine only slows a probe, so
    `memory_bandwidth` keeps the best of them."""
    unit = 16 * MEMBW_WG * max(MEMBW_LOADS.values())  # bytes one workgroup reads, at most
    per_buffer = min(ROTATION_BYTES // MEMBW_BUFFERS, device.max_buffer_bytes) // unit * unit
    data = [device.upload(np.ones(per_buffer // 4, np.uint32)) for _ in range(MEMBW_BUFFERS)]
    sums = device.tensor(MEMBW_BUFFERS * per_buffer // (16 * min(MEMBW_LOADS.values())), np.uint32)
    bindings = [(MEMBW, None)]
    if device.patched_kp and per_buffer // 16 <= device.info.max_texel_buffer_elements:
        bindings.append((MEMBW_TEXEL, ["texel_u32x4"] * MEMBW_BUFFERS + ["storage"]))
    best = 0.0
    for (variant, kinds), (runs, loads) in itertools.product(bindings, MEMBW_LOADS.items()):
        groups = per_buffer // (16 * MEMBW_WG * loads)
        algo = device.algorithm(data + [sums], variant, (groups, MEMBW_BUFFERS, 1), [MEMBW_WG, int(runs)],
                                np.array([MEMBW_WG * loads], np.uint32), kinds)
        # First run: pipeline compile, first touch, and proof that every word was read.
        device.manager.sequence().record(kp.OpAlgoDispatch(algo)).record(kp.OpTensorSyncLocal([sums])).eval()
        if int(sums.data()[:MEMBW_BUFFERS * groups * MEMBW_WG].astype(np.int64).sum()) != MEMBW_BUFFERS * per_buffer // 4:
            raise RuntimeError(f"shaders/membw.comp ({variant.name}, lane runs {runs}) did not read all of its "
                               "buffers on this device")
        best = max(best, MEMBW_BUFFERS * per_buffer / _seconds_per_pass(device, algo))
        algo.destroy()
    for t in data + [sums]:
        t.destroy()
    _BANDWIDTH[device.index] = max(best, _BANDWIDTH.get(device.index, 0.0))
    return best


def _seconds_per_pass(device: Device, algo) -> float:
    """Best GPU seconds (wall clock without timestamps) of one dispatch of
    `algo`, timed as samples of many back-to-back dispatches, warm."""
    info = device.info

    def sequence(passes: int):
        n_ops = 2 * passes
        seq = device.manager.sequence(0, n_ops + 1) if info.timestamps_supported else device.manager.sequence()
        for _ in range(passes):
            seq.record(kp.OpAlgoDispatch(algo))
            seq.record(device.compute_barrier())  # the next pass rewrites the sums
        return seq

    def timed(seq) -> float:
        if not info.timestamps_supported:
            return wall_samples(seq.eval, 1)[0]
        seq.eval()
        return timestamp_span(seq.get_timestamps(), info.timestamp_period)

    passes = calibrate(lambda: timed(sequence(1)), MEMBW_SAMPLE_SECONDS, max_repeats=2048)
    seq = sequence(passes)
    warm_up(lambda: timed(seq), WARM_SECONDS)
    return min(timed(seq) for _ in range(MEMBW_SAMPLES)) / passes


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
    test: str  # "pp512", "tg128", as llama-bench names them
    n_prompt: int  # prompt tokens of a pp test, else 0 (llama-bench's fields)
    n_gen: int  # tokens of a tg test, else 0
    samples_ts: list[float]  # tokens per second of each repetition, wall clock
    kernel_samples_ts: list[float] | None  # the same by GPU time of the kernels (None: no timestamps)
    bytes_per_token: int | None  # weight bytes one decoded token reads (MoE: the used experts); None for pp
    membw_gbps: float  # the device's memory read bandwidth (memory_bandwidth: the best probe)
    paths_used: dict[str, int]  # how many matrices took each path
    activations: str = "q8_1"  # the int8 path's activation format (vkq.blocks.activations)
    matrices: list[dict] = field(default_factory=list)  # each matrix: name, type, shape, path, parameters
    avg_ts: float = field(init=False)
    stddev_ts: float = field(init=False)
    kernel_avg_ts: float | None = field(init=False)
    kernel_stddev_ts: float | None = field(init=False)
    gbps: float | None = field(init=False)  # tg: weight bytes read per second of kernel time (wall without timestamps)
    bw_pct: float | None = field(init=False)  # gbps as a share of membw

    def __post_init__(self):
        self.avg_ts, self.stddev_ts = _mean_sd(self.samples_ts)
        self.kernel_avg_ts, self.kernel_stddev_ts = (_mean_sd(self.kernel_samples_ts) if self.kernel_samples_ts
                                                     else (None, None))
        self.gbps = self.bw_pct = None
        if self.bytes_per_token is not None:
            self.gbps = self.bytes_per_token * (self.kernel_avg_ts or self.avg_ts) / 1e9
            self.bw_pct = 100 * self.gbps / self.membw_gbps

    @property
    def over_bandwidth(self) -> bool:
        """Faster than the device's memory reads: the weights came from a cache
        (a model that fits in it), or the probe measured low."""
        return self.bw_pct is not None and self.bw_pct > 100


def _mean_sd(samples: list[float]) -> tuple[float, float]:
    return statistics.mean(samples), (statistics.stdev(samples) if len(samples) > 1 else 0.0)


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


# The share of the available host memory vkq bench lets itself take: the
# rest stays with the system and the other processes (past it, swapping or
# the OOM killer would end the run).
HOST_MEMORY_SHARE = 0.9


def _over_host_share(need: int, what: str, purpose: str) -> None:
    """Refuse `need` bytes of host memory past HOST_MEMORY_SHARE of what is available."""
    avail = _available_memory()
    if avail is not None and need > HOST_MEMORY_SHARE * avail:
        raise ValueError(f"{what} needs about {need / 2**30:.1f} GiB of host memory {purpose}, more than the "
                         f"{100 * HOST_MEMORY_SHARE:.0f}% of the {avail / 2**30:.1f} GiB available that vkq bench "
                         f"takes ({HOST_MEMORY_SHARE * avail / 2**30:.1f} GiB; the rest is left to the system)")


def check_host_memory(model: Model, device_type: str) -> None:
    """Refuse a model that cannot fit, rather than be killed by the OOM killer
    halfway through: kp keeps a host staging copy of every device tensor, and
    on a CPU or integrated device the device copy is host memory too."""
    _over_host_share(model.nbytes * (2 if device_type in ("cpu", "integrated") else 1),
                     model.name, "for its weights on this device")


def upload(backend: Backend, model: Model, progress: Progress) -> dict:
    """Every matrix of the model on the device; preset data is made, uploaded and dropped one by one."""
    rng = np.random.default_rng(0)
    weights = {}
    for i, m in enumerate(model.matrices):
        progress.step(f"{model.name}: upload {i + 1}/{len(model.matrices)}")
        weights[m.name] = backend.upload(m.qtype, m.shape, model.data(m, rng))
    return weights


def measure(step, timed, runs: int, repetitions: int) -> tuple[list[float], list[float] | None]:
    """t/s of each repetition of `runs` replays of a step (step.n_tokens
    tokens each: a DecodeStep or PromptStep): by wall clock (`step`), and by
    kernel time (`timed`, the same step recorded with GPU timestamps, over a
    quarter as many replays, at least one; None without timestamps). Two
    steps, because Kompute writes a timestamp after every op, and that costs
    time of its own (on lavapipe it makes a decode step's replay 10-40%
    slower: kernel t/s reads low there)."""
    warm_up(step.run, WARM_SECONDS)  # also: the driver compiles pipelines on first use
    if timed is not None:
        timed.run()
    wall, kernel = [], []
    for _ in range(repetitions):
        wall.append(runs * step.n_tokens / sum(wall_samples(step.run, runs, warm=False)))
        if timed is not None:
            n = max(1, runs // 4)
            seconds = 0.0
            for _ in range(n):
                timed.run()
                seconds += timed.kernel_seconds()
            kernel.append(n * timed.n_tokens / seconds)
    return wall, (kernel if timed is not None else None)


def _matrix_record(name: str, w, cfg) -> dict:
    """One matrix of a row: its mat-vec's launch parameters (PipelineConfig), or
    its mat-mat's tiles (TileConfig), with the launch in one line either way."""
    if isinstance(cfg, TileConfig):
        kind, launch = "mat-mat", cfg.describe()
    else:
        kind, launch = "mat-vec", describe_launch(cfg.params())
    return {"name": name, "type": w.qtype, "shape": list(w.shape), "kernel": kind, **cfg.params(),
            "int_dot": cfg.int_dot, "launch": launch, "source": cfg.source}


def bench(backend: Backend, models: list[Model], paths: list[str], n_gen: int | list[int], repetitions: int,
          probe_after: bool | None = None, progress: bool = True, n_prompt: list[int] = ()) -> list[Row]:
    """The rows of every model, path and test, llama-bench's order: pp of
    each of `n_prompt`, then tg of each of `n_gen`. Their % bw is of the best
    bandwidth probe of the process: one before the runs (unless one was made
    already) and, with `probe_after`, one after them (a probe that other
    work slowed reads low, and would put a mat-vec above 100%); None: after
    them where there are tg rows (pp rows have no % bw) and the runs took
    longer than PROBE_AGAIN_AFTER seconds (short runs fall in one spell of
    the machine's load; the probe would double their time). progress:
    each step on stderr as it finishes (vkq.commands.console.Progress),
    the probes announced and counted in the ETA."""
    tests = [("pp", n) for n in n_prompt] + [("tg", n) for n in ([n_gen] if isinstance(n_gen, int) else n_gen)]
    has_tg = any(kind == "tg" for kind, _ in tests)
    # The ETA counts tokens: the tests take nearly all the time, about in
    # proportion to their tokens; the probes count in seconds (the second
    # takes about what the first took), the uploads 0.
    bar = Progress(len(models) * len(paths) * sum(n for _, n in tests), progress, label="vkq bench")
    first = backend.device.index not in _BANDWIDTH
    if first:
        bar.note(f"vkq bench: {backend.device_info.name}: measuring the device's memory read bandwidth "
                 f"({MEMBW_SAMPLES} samples of each way to read it)")
    t0 = time.monotonic()
    membw = memory_bandwidth(backend.device)
    probe_s = time.monotonic() - t0 if first else 0.0

    def probe_again(tests_s: float) -> bool:
        return probe_after if probe_after is not None else has_tg and tests_s > PROBE_AGAIN_AFTER

    bar.fixed(spent=probe_s)
    bar.finish(0, f"vkq bench: {backend.device_info.name}, memory read bandwidth {membw / 1e9:.1f} GB/s"
                  + (f", measured in {probe_s:.0f} s" if first else ""))
    timestamps = backend.device_info.timestamps_supported
    measured = []
    t_tests = time.monotonic()
    for model in models:
        weights = upload(backend, model, bar)
        bar.finish(0, f"vkq bench: {model.name}: {len(model.matrices)} matrices uploaded ({_size(model.nbytes)})")
        for path in paths:
            for kind, n in tests:
                bar.step(f"{model.name}: {path}: {kind}{n}: record, warm up, {repetitions} x "
                         + (f"{n} tokens" if kind == "tg" else f"a prompt of {n} tokens"))
                if kind == "pp":  # a repetition: one prompt of n tokens
                    step = PromptStep(backend, model, weights, path, n)
                    timed = PromptStep(backend, model, weights, path, n, timestamps=True) if timestamps else None
                else:  # a repetition: n tokens, one decode step each
                    step = DecodeStep(backend, model, weights, path)
                    timed = DecodeStep(backend, model, weights, path, timestamps=True) if timestamps else None
                runs = 1 if kind == "pp" else n
                wall, kernel = measure(step, timed, runs, repetitions)
                used = [cfg.path for cfg in step.configs.values()]
                matrices = [_matrix_record(m.name, weights[m.name], step.configs[m.name]) for m in model.matrices]
                measured.append((model, path, kind, n, wall, kernel, {p: used.count(p) for p in sorted(set(used))},
                                 matrices))
                del step, timed
                projected = (time.monotonic() - t_tests) * bar.total / (bar.done_units + n)  # (all the tests)
                bar.fixed(left=probe_s if probe_again(projected) else 0.0)
                bar.finish(n, f"vkq bench: {model.name} {path} {kind}{n}: {statistics.mean(wall):.2f} t/s")
        del weights  # free the device memory before the next model
    tests_s = time.monotonic() - t_tests
    if probe_again(tests_s):
        bar.note(f"vkq bench: measuring the memory bandwidth again after {tests_s:.0f} s of runs (other work "
                 f"only slows a probe: the better one counts)")
        t0 = time.monotonic()
        again = probe_bandwidth(backend.device)
        bar.fixed(spent=time.monotonic() - t0, left=0.0)
        bar.finish(0, f"vkq bench: memory read bandwidth {again / 1e9:.1f} GB/s after the runs")
    membw_gbps = memory_bandwidth(backend.device) / 1e9
    return [Row(model.name, model.nbytes, model.params, BACKEND, backend.device_info.name, path, f"{kind}{n}",
                n if kind == "pp" else 0, n if kind == "tg" else 0, wall, kernel,
                model.bytes_per_token if kind == "tg" else None, membw_gbps, paths_used, backend.activations,
                matrices)
            for model, path, kind, n, wall, kernel, paths_used, matrices in measured]


def compare(a: Row, b: Row) -> dict:
    """Two measured rows of one model and test side by side; diff = how much faster b is than a."""
    return {
        "model": a.model, "model_size": a.model_size, "model_n_params": a.model_n_params,
        "backend": a.backend, "device": a.device, "test": a.test,
        "path_a": a.path, "avg_ts_a": a.avg_ts, "stddev_ts_a": a.stddev_ts, "kernel_avg_ts_a": a.kernel_avg_ts,
        "path_b": b.path, "avg_ts_b": b.avg_ts, "stddev_ts_b": b.stddev_ts, "kernel_avg_ts_b": b.kernel_avg_ts,
        "diff_pct": 100 * (b.avg_ts / a.avg_ts - 1),
    }


# -- output -----------------------------------------------------------------

def _size(nbytes: int) -> str:
    """GiB like llama-bench; MiB only where GiB would round to zero (test models)."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 / 100 else f"{nbytes / 2**20:.2f} MiB"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e7 else f"{n / 1e6:.2f} M"


def _ts(mean: float | None, sd: float | None) -> str:
    return "-" if mean is None else f"{mean:.2f} ± {sd:.2f}"


# What a % bw column shows for a figure above the measured bandwidth: not a
# share of it (vkq report prints the same).
OVER = "over 100"


def render_md(rows: list[Row], comparisons: list[dict] | None, verbose: bool = False) -> str:
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
        header = ["model", "size", "params", "backend", "device", "path", "test", "t/s", "kernel t/s", "GB/s", "% bw"]
        cells = [[r.model, _size(r.model_size), _params(r.model_n_params), r.backend, r.device,
                  path_label(r.path) if r.paths_used.get("dmmv") else r.path, r.test,
                  _ts(r.avg_ts, r.stddev_ts), _ts(r.kernel_avg_ts, r.kernel_stddev_ts),
                  "-" if r.gbps is None else f"{r.gbps:.2f}",
                  "-" if r.bw_pct is None else OVER if r.over_bandwidth else f"{r.bw_pct:.1f}"] for r in rows]
        right = {"size", "params", "test", "t/s", "kernel t/s", "GB/s", "% bw"}
    r0 = rows[0]
    notes = [NOTE, f"t/s: mean ± std over {len(r0.samples_ts)} repetition(s) (tgN: N tokens, one submit each; "
                   f"ppN: one prompt of N tokens, one submit) after {WARM_SECONDS:g} s of warm-up (at least one "
                   "run), wall clock (submit to logits read back); kernel t/s: the same by GPU timestamps of the "
                   "kernels alone, on a timed copy of the step (- where the device has none). The difference is "
                   "what submitting and waiting cost; Kompute writes a timestamp after every op, which slows a "
                   "CPU driver's replay, so there kernel t/s can read below t/s."]
    if comparisons:
        notes.append("diff: t/s of the second path relative to the first.")
    elif any(r.gbps is not None for r in rows):
        notes.append("GB/s (tg): weight bytes read per token (MoE: the used experts only) per second of kernel time; "
                     f"% bw: of {r0.membw_gbps:.1f} GB/s, this device's memory read bandwidth as vkq measures it "
                     f"({ROTATION_BYTES >> 20} MiB read back to back, warm, GPU timestamps: shaders/membw.comp; "
                     "the better of a probe before the runs and one after).")
        if any(r.over_bandwidth for r in rows):
            notes.append(f"% bw {OVER}: faster than the device's memory as measured: the weights were read from a "
                         "cache (a model that fits in it), or the bandwidth probe read low; the figure is not a "
                         "share of memory bandwidth, so it is not printed (-o json has it).")
    if not comparisons and any(r.n_prompt for r in rows):
        notes.append("pp: no GB/s or % bw: a prompt's mat-mats are bound by arithmetic, not by reading the weights.")
    autos = {f"{r.model}: {', '.join(f'{p} {n}' for p, n in r.paths_used.items())}" for r in rows if r.path == "auto"}
    if autos:
        notes.append("auto = the dispatcher's choice per matrix (matrices per path): " + "; ".join(sorted(autos)))
    int8 = sorted({r.activations for r in rows if r.paths_used.get("mmvq")})
    if int8:
        notes.append(f"int8 path activations: {', '.join(int8)} (--activations; q8_1 is ggml's Q8_1).")
    if fallback:
        notes.append("¹ mmvq falls back to dmmv for F32/F16 matrices (e.g. an MoE router): "
                     "they have no int8 path.")
    if not verbose:
        notes.append("--verbose (or -o json) shows which path and launch parameters (pp: tiles) each matrix ran "
                     "with.")
    out = markdown(header, cells, right) + "\n\n" + "\n".join(notes)
    if verbose:
        out += "\n\n" + render_matrices(rows)
    return out


def render_matrices(rows: list[Row]) -> str:
    """Which path and launch parameters the matrices ran with: one line per
    model, test, bench path, block type, shape and configuration, with a
    count; the mat-vecs in one table, the mat-mats (their tiles) in another."""
    matvecs: dict[tuple, list[str]] = {}
    matmuls: dict[tuple, list[str]] = {}
    for r in rows:
        for m in r.matrices:
            head = (r.model, r.test, r.path, m["type"], "x".join(map(str, m["shape"])),
                    path_label(m["path"], m["int_dot"]))
            if m["kernel"] == "mat-mat":
                matmuls.setdefault((*head, m["launch"]), []).append(m["name"])
            else:
                matvecs.setdefault((*head, m["wg_size"], m["rows_per_wg"], m["chunks_per_thread"], m["reduction"],
                                    "split K" if m["split_k"] else "rows per thread", m["weights_binding"],
                                    m["x_binding"]), []).append(m["name"])

    def count(names: list[str]) -> str:
        return f"{len(names)} ({names[0]}{', ...' if len(names) > 1 else ''})"

    head = ["model", "test", "bench path", "type", "shape", "ran"]
    tables = []
    if matvecs:
        tables.append(markdown(head + ["wg", "rows/wg", "chunks/thread", "reduction", "work split", "weights", "x",
                                       "matrices"],
                               [[*map(str, key), count(names)] for key, names in matvecs.items()],
                               {"wg", "rows/wg", "chunks/thread"}))
    if matmuls:
        tables.append(markdown(head + ["tiled mat-mat", "matrices"],
                               [[*map(str, key), count(names)] for key, names in matmuls.items()], set()))
    return "\n\n".join(tables)


def _csv_record(row: Row) -> dict:
    """A row with its list and dict fields as space-separated text (the matrices: -o json)."""
    d = asdict(row)
    d.pop("matrices")
    d["samples_ts"] = " ".join(map(str, row.samples_ts))
    d["kernel_samples_ts"] = " ".join(map(str, row.kernel_samples_ts or []))
    d["paths_used"] = " ".join(f"{p}:{n}" for p, n in row.paths_used.items())
    return d


def render(rows: list[Row], fmt: str, comparisons: list[dict] | None = None, verbose: bool = False) -> str:
    """The table as md, csv or json: the measured rows, or with --compare the comparisons."""
    if fmt == "md":
        return render_md(rows, comparisons, verbose)
    if fmt == "json":
        return render_records(comparisons or [asdict(r) | {"over_bandwidth": r.over_bandwidth} for r in rows], fmt)
    return render_records(comparisons or [_csv_record(r) for r in rows], fmt)


def render_records(records: list[dict], fmt: str) -> str:
    """Flat records as json (a list of objects) or csv (a header line, then a line each)."""
    if fmt == "json":
        return json.dumps(records, indent=2)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue().rstrip("\n")


# -- the command ------------------------------------------------------------

def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _paths(text: str, what: str, allowed=STEP_PATHS) -> list[str]:
    paths = [p.lower() for p in _split(text)]
    bad = [p for p in paths if p not in allowed]
    if bad or not paths:
        raise ValueError(f"{what}: unknown path(s) {', '.join(bad) or text!r}; expected {', '.join(allowed)}")
    return paths


def token_counts(text: str, flag: str) -> list[int]:
    """-p / -n: comma-separated token counts, each >= 0 (0: no such test, as
    llama-bench's), at most MAX_MATMUL_COLS (a prompt's columns)."""
    counts = []
    for item in _split(str(text)):
        try:
            n = int(item)
        except ValueError:
            raise ValueError(f"{flag}: {item!r} is not a whole number of tokens (comma-separated counts, e.g. "
                             f"{flag} 128,512; 0 drops the test)") from None
        if n < 0 or n > MAX_MATMUL_COLS:
            raise ValueError(f"{flag}: {n} tokens; a test takes 0 (none) to {MAX_MATMUL_COLS}")
        counts.append(n)
    if not counts:
        raise ValueError(f"{flag}: no token count given ({text!r}); e.g. {flag} 128, or {flag} 0 for no such test")
    return list(dict.fromkeys(n for n in counts if n))  # each test once, llama-bench's order


def run_bench(model: str, n_gen: str | int | None = None, repetitions: int = 3, path: str | None = None,
              compare_paths: str | None = None, activations: str = GENERATE_ACTIVATIONS, output: str = "md",
              verbose: bool = False, device: int | None = None, n_prompt: str | int | None = None) -> int:
    """`vkq bench`: the table for the models (comma-separated presets or .gguf
    files): pp of each of `n_prompt` and tg of each of `n_gen` (comma-separated
    token counts, or one int; 0: no such test; None: DEFAULT_N_PROMPT, DEFAULT_N_GEN)."""
    prompts = token_counts(DEFAULT_N_PROMPT if n_prompt is None else n_prompt, "-p")
    gens = token_counts(DEFAULT_N_GEN if n_gen is None else n_gen, "-n")
    if repetitions < 1:
        raise ValueError("-r must be at least 1")
    if not prompts and not gens:
        raise ValueError("-p 0 and -n 0: no test left to run")
    models = [resolve(m) for m in _split(model)]  # every name checked before any work
    if not models:
        raise ValueError(f"-m: no model given ({model!r}); a preset NAME:MIX (vkq bench --list) or a .gguf file")
    for m in models:
        if m.ignored:
            print(f"vkq bench: {m.name}: left out {len(m.ignored)} weight matrices the decode step does "
                  f"not model: {', '.join(m.ignored[:4])}" + (" ..." if len(m.ignored) > 4 else ""), file=sys.stderr)
    if compare_paths:
        paths = _paths(compare_paths, "--compare")
        if len(paths) != 2 or paths[0] == paths[1]:
            raise ValueError(f"--compare takes two different paths A,B, got {compare_paths!r}")
    else:
        paths = _paths(path or "auto", "--path")
    backend = Backend(device, activations=activations)
    backend.require_execution("vkq bench")
    for m in models:
        check_host_memory(m, backend.device_info.device_type)
    rows = bench(backend, models, paths, gens, repetitions, n_prompt=prompts)
    comparisons = None
    if compare_paths:
        by_key = {(r.model, r.test, r.path): r for r in rows}
        comparisons = [compare(by_key[m.name, test, paths[0]], by_key[m.name, test, paths[1]])
                       for m in models for test in dict.fromkeys(r.test for r in rows if r.model == m.name)]
    if output != "md":
        print(NOTE, file=sys.stderr)
    print(render(rows, output, comparisons, verbose))
    return 0


def list_models() -> int:
    """The presets for -m NAME:MIX: the models that offer the same mixes, then those mixes."""
    groups = presets_by_model()
    models_of: dict[tuple[str, ...], list[str]] = {}
    for name, mixes in groups.items():
        models_of.setdefault(mixes, []).append(name)
    first = next(iter(groups))
    print(f"vkq bench -m NAME:MIX, e.g. {first}:{groups[first][0]} ({sum(map(len, groups.values()))} presets: "
          f"{len(groups)} models' shapes, synthetic weights):")
    for mixes, names in models_of.items():
        print(textwrap.fill(", ".join(names) + ":", 100, initial_indent="  ", subsequent_indent="  "))
        print(textwrap.fill(" ".join(mixes), 100, initial_indent="    ", subsequent_indent="    "))
    return 0


# -- one matrix per block type (--matvec) ---------------------------------------

def parse_shape(text: str) -> tuple[int, int]:
    try:
        rows, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--shape must look like 4096x14336, got {text!r}") from None
    if rows < 1 or k < 1:
        raise ValueError(f"--shape must be two positive integers ROWSxK, got {text!r}")
    return rows, k


# Host bytes per weight the --matvec table holds at once, at most: the
# quantized data (F32: 4), its float64 dequantization (8) and the float32
# copy numpy's baseline multiplies (4).
MATVEC_HOST_BYTES_PER_WEIGHT = 16


def check_matvec_memory(rows: int, k: int) -> None:
    _over_host_share(rows * k * MATVEC_HOST_BYTES_PER_WEIGHT,
                     f"a {rows} x {k} matrix", "here (its data, dequantization and float32 copy)")


def check_matvec_k(shape: str, k: int, cases: list[tuple[str, list[str]]]) -> None:
    """Refuse a K that some type's blocks do not divide, before anything is
    printed (else the header comes first and the table stops at that type's upload)."""
    bad = [(name, FORMATS[name].block_elems) for name, _ in cases
           if not FORMATS[name].is_plain and k % FORMATS[name].block_elems]
    if bad:
        fits = math.lcm(*(FORMATS[name].block_elems for name, _ in cases))
        named = ", ".join(f"{name} ({size})" for name, size in bad[:4]) + (f" and {len(bad) - 4} more"
                                                                            if len(bad) > 4 else "")
        raise ValueError(f"--shape {shape}: K={k} is not a multiple of the block size of {named}; "
                         f"K a multiple of {fits} fits {'every type' if len(cases) > 1 else 'it'}")


def matvec_cases(types: list[str] | None, paths: list[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The block types to time with the paths each has; and the types left
    out for having none of them (only of all types: a type asked for by name
    without any of the paths is a ValueError)."""
    cases, left_out = [], []
    for name in list(FORMATS) if types is None else [get_format(t).name for t in types]:
        have = [p for p in paths if p == "auto" or p in FORMATS[name].paths]
        if have:
            cases.append((name, have))
        elif types is None:
            left_out.append(name)
        else:
            raise ValueError(f"{name} has no {' or '.join(paths)} path (it has {', '.join(FORMATS[name].paths)})")
    if not cases:
        raise ValueError(f"no block type has the path(s) {', '.join(paths)}")
    return cases, left_out


def bench_matvec(types: list[str] | None = None, shape: str = "4096x14336", path: str = "dmmv,mmvq",
                 repetitions: int = 5, activations: str = GENERATE_ACTIVATIONS, output: str = "md",
                 device: int | None = None) -> int:
    """`vkq bench --matvec`: one rows x K matrix per block type (`types`;
    None: all), `Backend.matvec` per call (x in, y out: wall clock including
    the host round trip), the paths interleaved call by call; the baseline,
    measured in the same run, is numpy's float32 mat-vec on the
    already-dequantized weights: the fastest thing a numpy user can do with
    the same matrix."""
    rows, k = parse_shape(shape)
    cases, left_out = matvec_cases(types, _paths(path, "--path", ("auto", "dmmv", "mmvq")))
    if repetitions < 1:
        raise ValueError("-r must be at least 1")
    check_matvec_memory(rows, k)
    check_matvec_k(shape, k, cases)
    backend = Backend(device, activations=activations)
    backend.require_execution("vkq bench --matvec")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, k).astype(np.float32)
    print(f"vkq bench: {rows} x {k} mat-vec, one column, on {backend.device_info.name}; {repetitions} calls per "
          f"case after {WARM_SECONDS:g} s of warm-up, wall clock per call, median ± spread (max - min) / 2; "
          f"int8 activations {backend.activations}", file=sys.stderr)
    if left_out:
        print(f"vkq bench: {', '.join(left_out)} left out: no {path} path", file=sys.stderr)
    records = []
    for name, paths in cases:
        fmt = FORMATS[name]
        data = random_weights(fmt, rows, k, rng)
        w = backend.upload(name, (rows, k), data)
        w32 = dequantize(name, (rows, k), data).astype(np.float32)
        base = statistics.median(wall_samples(lambda w32=w32: w32 @ x, repetitions))
        del w32
        calls = {p: (lambda p=p: backend.matvec(w, x, path=None if p == "auto" else p)) for p in paths}
        for call in calls.values():
            warm_up(call, WARM_SECONDS)
        samples = {p: [] for p in calls}
        for _ in range(repetitions):  # interleaved: drift weighs on every path alike
            for p, call in calls.items():
                samples[p] += wall_samples(call, 1, warm=False)
        for p, s in samples.items():
            mid = statistics.median(s)
            records.append({"type": name, "path": p, "rows": rows, "k": k, "device": backend.device_info.name,
                            "activations": backend.activations, "repetitions": repetitions, "ms": mid * 1e3,
                            "ms_spread": (max(s) - min(s)) / 2 * 1e3, "weights_gbps": w.nbytes / mid / 1e9,
                            "x_numpy_f32": base / mid})
        print(f"  {name} done", file=sys.stderr, flush=True)
    if output != "md":
        print(render_records(records, output))
        return 0
    cells = [[r["type"], r["path"], f"{r['ms']:.2f} ± {r['ms_spread']:.2f}", f"{r['weights_gbps']:.2f}",
              f"{r['x_numpy_f32']:.2f}x"] for r in records]
    print(markdown(["type", "path", "ms", "weights GB/s", "x numpy f32"], cells, {"ms", "weights GB/s", "x numpy f32"}))
    return 0
