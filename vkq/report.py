"""`vkq report`: every figure that says how vkq does on this device, from one command.

Sections, each measured by the function that owns it elsewhere in vkq:
- the device: `vkq info`'s summary (vkq.info) and its memory read bandwidth
  (vkq.bench.memory_bandwidth, shaders/membw.comp);
- what a call costs: one submit + wait of a 64-byte copy, and
  Backend.matvec of a 256 x 256 Q4_0 matrix per path (vkq.call_cost);
- the mat-vec kernels of every block type (vkq.formats.FORMATS) and path at
  4096 x 14336, n = 1 and 4 columns, timed as `vkq tune` times them
  (vkq.tune.TypeBench / Candidate, vkq.timing: clocks warmed, samples of
  tens of ms of back-to-back mat-vecs, GPU timestamps, paths interleaved,
  the fastest sample): one matrix repeated (as ggml's perf does; on a GPU
  with a large last-level cache it is partly read from there), and a
  rotation of copies of it past any cache (at least 256 MiB per pass); the
  dispatcher's choice marked;
- `vkq bench`'s default model: wall and kernel t/s (vkq.bench.bench);
- with a GGUF model: `vkq generate`'s graph engine t/s and submits per
  token (vkq.generate.load, Decoder.greedy);
- with ggml's test-backend-ops: ggml-vulkan's time for the same type, shape
  and columns beside vkq's (vkq.ggml_perf).

`measure` returns the report as plain data (what `-o json` prints);
`render_md` makes the markdown. What a device or the options leave
unmeasured is in the report as such (`not_measured`), never guessed.

The JSON (schema SCHEMA; times in seconds, bandwidths in GB/s):
  schema, vkq, command, date, quick, shape [rows, K], ncols, rotation_bytes,
  warm_seconds, rounds, activations, timer ("gpu timestamps" | "wall clock"),
  wall_seconds;
  device: index, name, vendor, type, driver, timestamps, device_class, tuned,
    membw_gbps, summary (vkq info's lines);
  calls: [{case, seconds}];
  matvec: [{type, path, n, size ("one" | "rotation"), rows, k, copies,
    seconds (per mat-vec), spread, gbps, bw_pct, auto (the dispatcher's
    choice for this type, n and size), params, source}];
  bench: {model, path, test, repetitions, avg_ts, stddev_ts, kernel_avg_ts,
    kernel_stddev_ts, wall_over_kernel, gbps, bw_pct, paths_used,
    activations} or null;
  generate: {model, arch, n_layer, n_embd, engine, prompt_tokens, tokens,
    rounds, tokens_per_second, submits_per_token} or null;
  ggml: {path, rows: [{type, n, ggml_seconds, ggml_runs, ggml_status
    ("measured" | "not supported" | "not timed" (0 runs) | "no such case"),
    vkq_seconds, vkq_path, ggml_over_vkq}]} or null (not measured: ggml's
    run failed, hung or printed what cannot be read);
  not_measured: {section: why} for kernel_time, bench, generate, ggml.
"""
from __future__ import annotations

import datetime
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__, call_cost
from .bench import DEFAULT_MODEL as BENCH_MODEL
from .bench import check_host_memory, memory_bandwidth
from .bench import bench as bench_models
from .console import markdown
from .formats import FORMATS, get_format
from .ggml_perf import GgmlFailed, GgmlPerf, case_filter, ggml_type_name
from .info import backend_lines, capability_lines
from .timing import REJECT, ROTATION_BYTES, WARM_SECONDS, interleave, warm_up
from .tune import Candidate, Progress, TypeBench

SCHEMA = 1  # of the JSON report; raised when a field changes meaning or goes
SHAPE = (4096, 14336)  # rows x K: a Llama-3-8B FFN down projection; ggml's perf list has it for every type
NCOLS = (1, 4)
PROMPT = "Once upon a time"


@dataclass(frozen=True)
class Effort:
    """How much of each measurement: the default, or --quick."""

    rounds: int  # interleaved samples per mat-vec case (the fastest counts)
    calls: int  # timed calls per per-call case (the median counts)
    bench_tokens: int  # vkq bench: tokens per repetition
    bench_repetitions: int
    gen_tokens: int  # vkq generate: tokens per round
    gen_rounds: int  # timed rounds (the median counts)


FULL = Effort(rounds=5, calls=1000, bench_tokens=64, bench_repetitions=3, gen_tokens=32, gen_rounds=3)
QUICK = Effort(rounds=2, calls=200, bench_tokens=16, bench_repetitions=2, gen_tokens=16, gen_rounds=1)
SIZES = ("one", "rotation")  # one matrix repeated; copies rotated past the caches


# -- the sections ---------------------------------------------------------------

def device_section(backend, membw: float) -> dict:
    info = backend.device_info
    return {"index": info.index, "name": info.name, "vendor": info.vendor, "type": info.device_type,
            "driver": f"{info.driver_name or '?'} {info.driver_info or ''}".strip(),
            "timestamps": info.timestamps_supported, "device_class": backend.dispatcher.device_class.key,
            "tuned": bool(backend.dispatcher.tuned), "membw_gbps": membw / 1e9,
            "summary": capability_lines(info) + backend_lines(backend)}


def calls_section(backend, calls: int) -> list[dict]:
    """Seconds per call: the submit floor, then Backend.matvec 256 x 256 Q4_0 on each path."""
    out = [{"case": "submit floor", "seconds": call_cost.seconds_per_call(call_cost.submit_floor(backend), calls)}]
    w = call_cost.small_weights(backend)
    for path in get_format(call_cost.SMALL_TYPE).paths:
        seconds = call_cost.seconds_per_call(call_cost.small_matvec(backend, w, path), calls)
        out.append({"case": f"Backend.matvec {path}", "seconds": seconds})
    w.free()
    return out


def matvec_rows(backend, qtype: str, shape: tuple[int, int], size: str, rounds: int, membw: float) -> list[dict]:
    """Kernel seconds per mat-vec of one block type on each of its paths, n in NCOLS:
    one matrix repeated (size "one") or copies of it rotated past the caches ("rotation")."""
    tb = TypeBench(backend, qtype, [shape], max_copies=1 if size == "one" else None)
    w = tb.units[0].weights
    cands, auto = {}, {}
    for n in NCOLS:
        auto[n] = backend.pipeline(w, n).path
        passes = tb.passes_for(backend.pipeline(w, n), n)
        for path in tb.fmt.paths:
            cands[path, n] = Candidate(tb, backend.pipeline(w, n, path), passes, n)
    first = next(iter(cands.values()))
    warm_up(first.sample, WARM_SECONDS)  # building the candidates left the device idle
    est = interleave({key: c.sample for key, c in cands.items()}, rounds)
    rows = []
    for (path, n), c in cands.items():
        seconds = est[path, n].seconds / len(tb.units)
        gbps = w.nbytes / seconds / 1e9
        rows.append({"type": qtype, "path": path, "n": n, "size": size, "rows": shape[0], "k": shape[1],
                     "copies": len(tb.units), "seconds": seconds, "spread": est[path, n].spread, "gbps": gbps,
                     "bw_pct": 100 * gbps / (membw / 1e9), "auto": auto[n] == path,
                     "params": c.cfg.params(), "source": c.cfg.source})
        c.destroy()
    for u in tb.units:
        u.weights.free()
    return rows


def bench_model_for(backend):
    """vkq bench's default model, or why it cannot run here (host memory)."""
    from .presets import resolve

    model = resolve(BENCH_MODEL)
    try:
        check_host_memory(model, backend.device_info.device_type)
    except ValueError as e:
        return None, str(e)
    return model, None


def bench_section(backend, model, effort: Effort, progress: Progress) -> dict:
    progress.step(f"vkq bench {model.name}")
    row = bench_models(backend, [model], ["auto"], effort.bench_tokens, effort.bench_repetitions)[0]
    return {"model": row.model, "path": row.path, "test": row.test, "repetitions": len(row.samples_ts),
            "avg_ts": row.avg_ts, "stddev_ts": row.stddev_ts, "kernel_avg_ts": row.kernel_avg_ts,
            "kernel_stddev_ts": row.kernel_stddev_ts,
            "wall_over_kernel": row.avg_ts / row.kernel_avg_ts if row.kernel_avg_ts else None,
            "gbps": row.gbps, "bw_pct": row.bw_pct, "paths_used": row.paths_used, "activations": row.activations}


def generate_section(backend, file, effort: Effort) -> dict:
    """vkq generate's graph engine (its default path and activations), greedy
    from PROMPT, EOS ignored: the median t/s of the timed rounds after
    WARM_SECONDS of untimed ones."""
    from .generate import load

    ids = file.tokenizer.encode(PROMPT)
    n = effort.gen_tokens
    decoder = load(file.path, engine="graph", backend=backend, ctx=len(ids) + n, file=file)
    decoder.warm_up(len(ids))
    warm_up(lambda: decoder.greedy(ids, n, stop_at_eos=False), WARM_SECONDS)
    stats = [decoder.greedy(ids, n, stop_at_eos=False).stats for _ in range(effort.gen_rounds)]
    cfg = file.config
    return {"model": file.path.name, "arch": cfg.arch, "n_layer": cfg.n_layer, "n_embd": cfg.n_embd,
            "engine": decoder.label, "prompt_tokens": len(ids), "tokens": n, "rounds": len(stats),
            "tokens_per_second": statistics.median(s.tokens_per_second for s in stats),
            "submits_per_token": statistics.median(s.submits_per_token for s in stats)}


def ggml_rows(ggml: GgmlPerf, types: list[str], shape: tuple[int, int], vkq_rows: list[dict],
              progress: Progress) -> list[dict]:
    """ggml-vulkan's us/run of each type and n in NCOLS beside vkq's dispatcher
    choice on one matrix repeated (ggml's perf repeats one matrix too)."""
    names = {ggml_type_name(FORMATS[t]): t for t in types}
    rows_, k = shape
    done = []

    def on_case(case):
        done.append(case)
        progress.step(f"ggml {case.params.get('type_a')} n={case.params.get('n')} done "
                      f"({len(done)}/{len(names) * len(NCOLS)})")

    progress.step(f"ggml test-backend-ops perf: {len(names) * len(NCOLS)} cases")
    out = ggml.run(case_filter(names, rows_, k, NCOLS), on_case)
    by_key = {c.key: c for c in out.cases}
    mine = {(r["type"], r["n"]): r for r in vkq_rows if r["size"] == "one" and r["auto"]}
    rows = []
    for name, qtype in names.items():
        for n in NCOLS:
            case, v = by_key.get((name, rows_, n, k)), mine[qtype, n]
            ggml_s = case.seconds if case else None
            rows.append({"type": qtype, "n": n, "ggml_seconds": ggml_s, "ggml_runs": case.runs if case else None,
                         "ggml_status": case.status if case else "no such case",
                         "vkq_seconds": v["seconds"], "vkq_path": v["path"],
                         "ggml_over_vkq": ggml_s / v["seconds"] if ggml_s else None})
    return rows


# -- the whole report -------------------------------------------------------------

def measure(backend, *, types: list[str] | None = None, quick: bool = False, model: str | Path | None = None,
            ggml: str | Path | None = None, shape: tuple[int, int] | None = None, bench_model: bool = True,
            progress: bool = True) -> dict:
    """The report as data. Inputs are checked (the model's architecture, the
    ggml binary and its device) before anything is measured. types: block
    types (default every one in FORMATS); shape: rows x K of the mat-vecs
    (default SHAPE); bench_model: False leaves `vkq bench`'s model out."""
    from .llama.model import LlamaFile

    t0 = time.monotonic()
    shape = tuple(shape or SHAPE)
    effort = QUICK if quick else FULL
    if types is not None and not types:
        raise ValueError("types: name at least one block type (None: all)")
    types = list(dict.fromkeys(get_format(t).name for t in types)) if types else list(FORMATS)
    file = LlamaFile(model) if model is not None else None
    runner = None
    if ggml is not None:
        runner = GgmlPerf(ggml, backend.device_info.index, backend.device_info.name)
        runner.check()
    not_measured = {}
    if not backend.device_info.timestamps_supported:
        not_measured["kernel_time"] = ("this device has no GPU timestamps: mat-vec times are the wall clock of "
                                       "a replay of back-to-back mat-vecs, and vkq bench's kernel t/s is missing")
    if file is None:
        not_measured["generate"] = "no GGUF model given (--model FILE.gguf, a llama-architecture model)"
    if runner is None:
        not_measured["ggml"] = "no ggml test-backend-ops given (--ggml PATH)"
    elif shape != SHAPE:
        not_measured["ggml"] = f"ggml's perf list has its mat-vec cases at {SHAPE[0]} x {SHAPE[1]} only"
        runner = None
    bench = None
    if not bench_model:
        not_measured["bench"] = "left out by the caller"
    else:
        bench, why = bench_model_for(backend)
        if why:
            not_measured["bench"] = why

    units = 2 + 2 * len(types) + (bench is not None) + (file is not None) + (runner is not None)
    bar = Progress(units, progress, sys.stderr, label="vkq report")
    command = " ".join(["vkq report"] + (["--quick"] if quick else []) + ([f"--types {','.join(types)}"] if
                       types != list(FORMATS) else []) + ([f"--model {Path(model).name}"] if model else [])
                       + ([f"--ggml {ggml}"] if ggml else []))
    report = {"schema": SCHEMA, "vkq": __version__, "command": command,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "quick": quick, "shape": list(shape), "ncols": list(NCOLS), "rotation_bytes": ROTATION_BYTES,
              "warm_seconds": WARM_SECONDS, "rounds": effort.rounds, "activations": backend.activations,
              "timer": "gpu timestamps" if backend.device_info.timestamps_supported else "wall clock"}

    bar.step("memory bandwidth")
    membw = memory_bandwidth(backend.device)
    report["device"] = device_section(backend, membw)
    bar.finish_type(1, f"vkq report: {backend.device_info.name}, memory read bandwidth {membw / 1e9:.1f} GB/s")

    bar.step("submit floor and Backend.matvec per call")
    report["calls"] = calls_section(backend, effort.calls)
    bar.finish_type(1, "vkq report: per call: " + ", ".join(f"{c['case']} {c['seconds'] * 1e3:.3f} ms"
                                                            for c in report["calls"]))
    report["matvec"] = []
    for qtype in types:
        for size in SIZES:
            bar.step(f"mat-vec {qtype} {'one matrix' if size == 'one' else 'rotation'}")
            rows = matvec_rows(backend, qtype, shape, size, effort.rounds, membw)
            report["matvec"] += rows
            bar.finish_type(1, f"vkq report: {qtype} {size}: " + ", ".join(
                f"{r['path']} n={r['n']} {r['seconds'] * 1e6:.1f} us" for r in rows))

    report["bench"] = None
    if bench is not None:
        report["bench"] = bench_section(backend, bench, effort, bar)
        bar.finish_type(1, f"vkq report: vkq bench {BENCH_MODEL}: {report['bench']['avg_ts']:.2f} t/s")
    report["generate"] = None
    if file is not None:
        bar.step(f"vkq generate {file.path.name}")
        report["generate"] = generate_section(backend, file, effort)
        bar.finish_type(1, f"vkq report: vkq generate {file.path.name}: "
                           f"{report['generate']['tokens_per_second']:.2f} t/s")
    report["ggml"] = None
    if runner is not None:
        try:
            report["ggml"] = {"path": str(runner.path), "rows": ggml_rows(runner, types, shape, report["matvec"], bar)}
            done = sum(x["ggml_seconds"] is not None for x in report["ggml"]["rows"])
            bar.finish_type(1, f"vkq report: ggml: {done} of {len(report['ggml']['rows'])} cases measured")
        except GgmlFailed as e:  # the rest of the report stands without it
            not_measured["ggml"] = str(e)
            bar.finish_type(1, f"vkq report: {e}; ggml-vulkan not measured")
    report["not_measured"] = not_measured
    report["wall_seconds"] = time.monotonic() - t0
    return report


# -- markdown ------------------------------------------------------------------------

def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:.0f}" if us >= 1000 else f"{us:.1f}"


def _pct(value: float) -> str:
    return f"{value:.0f}" if value <= 100 else f"{value:.0f}²"


def _matvec_table(rows: list[dict], size: str) -> str:
    by = {(r["type"], r["path"], r["n"]): r for r in rows if r["size"] == size}
    keys = dict.fromkeys((t, p) for t, p, _ in by)
    header = ["type", "path"] + [f"{h} n={n}" for n in NCOLS for h in ("us", "GB/s", "% bw")] + ["auto", "spread"]
    cells = []
    for t, p in keys:
        rs = [by[t, p, n] for n in NCOLS]
        cells.append([t, p] + [v for r in rs for v in (_us(r["seconds"]), f"{r['gbps']:.1f}", _pct(r["bw_pct"]))]
                     + [",".join(f"n={r['n']}" for r in rs if r["auto"]) or "",
                        f"{100 * max(r['spread'] for r in rs):.0f}%"])
    right = set(header[2:-1]) | {"spread"}
    return markdown(header, cells, right)


def _section(title: str, data: dict | None, reason: str | None, body) -> list[str]:
    """A section's heading and its body, or why it was not measured."""
    return [f"## {title}", "", *(body(data) if data is not None else [f"Not measured: {reason}."]), ""]


def _bench_md(b: dict) -> list[str]:
    kernel = "-" if b["kernel_avg_ts"] is None else f"{b['kernel_avg_ts']:.2f} ± {b['kernel_stddev_ts']:.2f}"
    ratio = "-" if b["wall_over_kernel"] is None else f"{b['wall_over_kernel']:.2f}"
    return [markdown(["model", "test", "t/s", "kernel t/s", "t/s / kernel t/s", "GB/s", "% bw"],
                     [[b["model"], b["test"], f"{b['avg_ts']:.2f} ± {b['stddev_ts']:.2f}", kernel, ratio,
                       f"{b['gbps']:.2f}", _pct(b["bw_pct"])]],
                     {"test", "t/s", "kernel t/s", "t/s / kernel t/s", "GB/s", "% bw"}), "",
            f"The mat-vec share of decoding (every weight matrix of one token, synthetic activations), "
            f"{b['repetitions']} repetitions; t/s by wall clock (submit to logits read back), kernel t/s by "
            "GPU timestamps of a timed copy of the step: their ratio is the share of the kernels' speed that "
            "submitting and waiting leave."]


def _generate_md(g: dict) -> list[str]:
    return [markdown(["model", "engine", "tokens", "t/s", "submits/token"],
                     [[g["model"], g["engine"], str(g["tokens"]), f"{g['tokens_per_second']:.2f}",
                       f"{g['submits_per_token']:g}"]], {"tokens", "t/s", "submits/token"}), "",
            f"{g['arch']}, {g['n_layer']} layers, {g['n_embd']} wide; greedy after \"{PROMPT}\" "
            f"({g['prompt_tokens']} prompt tokens), median of {g['rounds']} round(s) after warm-up."]


def _ggml_md(gg: dict) -> list[str]:
    cells = [[x["type"], str(x["n"]), _us(x["ggml_seconds"]) if x["ggml_seconds"] else x["ggml_status"],
              _us(x["vkq_seconds"]), x["vkq_path"],
              "-" if x["ggml_over_vkq"] is None else f"{x['ggml_over_vkq']:.2f}x"] for x in gg["rows"]]
    return [markdown(["type", "cols", "ggml us", "vkq us", "vkq path", "ggml / vkq"], cells,
                     {"cols", "ggml us", "vkq us", "ggml / vkq"}), "",
            f"ggml: `{gg['path']} perf -o MUL_MAT -b Vulkan0`, mean wall time per run of a graph of the "
            "same mat-vec repeated; vkq: the dispatcher's choice on one matrix repeated (the first table). "
            "ggml / vkq above 1: vkq is faster."]


def render_md(r: dict) -> str:
    dev = r["device"]
    rows_, k = r["shape"]
    out = [f"# vkq report: {dev['name']}", "",
           f"vkq {r['vkq']}, {r['date']}, `{r['command']}`, "
           f"{r['wall_seconds'] / 60:.1f} min.", "", "## Device", "", "```", *dev["summary"], "```", "",
           f"Memory read bandwidth: **{dev['membw_gbps']:.1f} GB/s** (shaders/membw.comp: "
           f"{r['rotation_bytes'] >> 20} MiB read back to back after {r['warm_seconds']:g} s of warm-up, "
           "the fastest of several access patterns and samples).", "",
           "## What a call costs", "",
           markdown(["case", "ms per call"],
                    [[{"submit floor": "one submit + wait of a 64-byte copy (the floor)"}.get(
                        c["case"], f"{c['case']}, 256 x 256 Q4_0"), f"{c['seconds'] * 1e3:.3f}"]
                     for c in r["calls"]], {"ms per call"}), "",
           "Median of the timed calls after warm-up, wall clock.", "",
           f"## Mat-vec kernels, {rows_} x {k}", ""]
    timer = "GPU timestamps" if r["timer"] == "gpu timestamps" else "the wall clock (no GPU timestamps)"
    for size in SIZES:
        copies = {x["copies"] for x in r["matvec"] if x["size"] == size}
        if size == "one":
            out += ["One matrix, repeated back to back (as ggml's perf times it; a GPU's last-level cache can "
                    "hold part of it):", ""]
        else:
            out += [f"Copies of the matrix rotated past any cache (at least {r['rotation_bytes'] >> 20} MiB per "
                    f"pass: {min(copies)}-{max(copies)} copies):", ""]
        out += [_matvec_table(r["matvec"], size), ""]
    out += [f"us: kernel time per mat-vec by {timer}, the fastest of {r['rounds']} samples of tens of ms of "
            f"back-to-back mat-vecs after {r['warm_seconds']:g} s of warm-up, paths and column counts interleaved; "
            "spread: how far the median sample lay above the fastest (the worst of the row). GB/s: weight bytes "
            f"per second; % bw: of the measured {dev['membw_gbps']:.1f} GB/s (² above it: read from a cache). "
            f"auto: the column counts at which the dispatcher picks this path. int8 path activations: "
            f"{r['activations']}.", ""]
    noisy = sum(x["spread"] > REJECT for x in r["matvec"])
    if noisy:
        out += [f"**{noisy} of {len(r['matvec'])} figures spread more than {100 * REJECT:.0f}%**: other work on "
                "the machine slowed their samples; compare them only with figures measured in the same run, or "
                "run the report again on an idle machine.", ""]
    nm = r["not_measured"]
    out += _section("Model: vkq bench", r["bench"], nm.get("bench"), _bench_md)
    out += _section("Model: vkq generate", r["generate"], nm.get("generate"), _generate_md)
    out += _section("ggml-vulkan side by side", r["ggml"], nm.get("ggml"), _ggml_md)
    return "\n".join(out).rstrip() + "\n"


def run(model: str | None = None, ggml: str | None = None, quick: bool = False, output: str = "md",
        types: list[str] | None = None, device: int | None = None) -> int:
    """`vkq report`: measure (types: None for all), print markdown or JSON on stdout (progress on stderr)."""
    from .backend import Backend

    if output not in ("md", "json"):
        raise ValueError(f"-o must be md or json, got {output!r}")
    try:
        report = measure(Backend(device), types=types, quick=quick, model=model, ggml=ggml)
    except KeyboardInterrupt:
        print("\nvkq report: interrupted; nothing reported", file=sys.stderr)
        return 130
    print(json.dumps(report, indent=2) if output == "json" else render_md(report), end="" if output == "md" else "\n")
    return 0
