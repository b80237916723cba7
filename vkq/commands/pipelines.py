"""`vkq pipelines`: every pipeline vkq's dispatcher would create on a device
for a model's shapes, compiled there by the driver, with the driver's own
figures of each (vkq.device.pipeline_stats: registers, spills, scratch or
local memory, shared memory, waves per SIMD or warps per SM, instructions)
and what chose it (the table entry, tuning or limit behind the launch).

What is planned, for each matrix shape of the model (a preset, the 8B by
default, or a GGUF file's tensors):
- the mat-vec on each path the block type has, at 1 to MAX_COLS columns
  (the decode step, batched decode and speculative verification);
- MUL_MAT_ID's mat-vec over each expert stack;
- the tiled mat-mat of a prompt chunk on the dispatcher's path and each
  path, MUL_MAT_ID's over the expert stacks, and the cooperative-matrix
  kernel (op "coopmat", over matrices and expert stacks) in each flavour
  the device offers (float16; int8 for the types with an int8 path, which
  the dispatcher takes for one-plane activations), whatever its
  self-check, which a device that does not execute cannot run;
- with `step`, every pipeline of the model's recorded step (record_step):
  the vector ops, the attention at two contexts, the step's own products.

On a device that does not run its dispatches (Mesa's null GPUs,
tools/mesa26.sh) this is what can be known of the GPU's compiler; on a real
GPU the same report reads that driver's figures.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import warnings
from dataclasses import asdict, astuple, dataclass, field, replace
from pathlib import Path

from ..blocks.activations import ACTIVATION_PLANES, GENERATE_ACTIVATIONS, check_activations
from ..blocks.formats import FORMATS
from ..blocks.layout import MatrixLayout
from ..device.caps import COOPMAT_EXTENSION, COOPMAT_FLAVOURS, DeviceCaps
from ..device.device_info import device_index_from_env
from ..device.memory import buffer_limit
from ..device.pipeline_stats import (PipelineSpec, PipelineStats, ValidationLog, compile_isolated,
                                     device_info_isolated, in_child)
from ..device.shader_variants import spirv_path
from ..dispatch import coopmat, gpu_classes, tile_tuning, tiles
from ..dispatch.choose import Dispatcher, shared_memory_bytes
from ..dispatch.classify import classify
from ..dispatch.config import describe
from ..dispatch.tables import OCCUPANCY_OPS, occupancy_floors
from ..markdown import markdown
from ..ops import (WEIGHTS_PARAMS, matmul_bindings, matmul_spec, matmul_variant, matvec_bindings, matvec_spec,
                   matvec_variant)
from ..resolve import MAX_COLS, fitted
from . import ggml_shaders
from .llama_server import WHEEL
from .presets import Model, resolve

DEFAULT_MODEL = "llama-3.1-8b:Q4_K_M"
PROMPT_COLUMNS = 512  # a prompt chunk's columns (vkq.llama.config.PROMPT_CHUNK)
OPS = OCCUPANCY_OPS  # what plan() makes pipelines for, each with a floor in the GPU tables


@dataclass
class Planned:
    """One pipeline of the plan: the op, block type, path and columns it is
    for, its launch in words, what chose it, the matrices that use it."""

    op: str
    qtype: str
    path: str
    columns: int
    launch: str
    entry: str
    pipeline: PipelineSpec | None
    default: bool = False  # the dispatcher's own path for this shape (no path asked)
    matrices: list[str] = field(default_factory=list)
    error: str = ""  # why no launch fits (then no pipeline)
    workgroup: int = 0  # invocations per workgroup
    shared: int = 0  # bytes of shared memory the shader declares at this launch (vkq's count)
    subgroup: int = 0  # the subgroup size required (the mat-vec's wave, the cooperative-matrix kernel's); 0: any


def caps_as_opened(info) -> DeviceCaps:
    """The device's caps as vkq's Device opens it with vkq's Kompute (the
    int-dot feature where the device has it, the cooperative-matrix features
    where it offers the extension, and with them shaderInt8 where it has
    that), without opening it."""
    coop = COOPMAT_EXTENSION in info.extensions
    return DeviceCaps.of(info, info.integer_dot_product, coop, coop and info.shader_int8)


def coopmat_flavours(caps: DeviceCaps, qtype: str) -> list[str]:
    """The cooperative-matrix flavours the device offers a type's matrices
    (whatever their self-check): float16, and int8 where the type has an
    int8 path."""
    return [f for f in COOPMAT_FLAVOURS if coopmat.device_missing(caps, f) is None
            and (f != "int8" or FORMATS[qtype].has_int8_path)]


def _matvec(dispatcher: Dispatcher, max_buffer: int, op: str, qtype: str, rows: int, k: int, ncols: int,
            path: str | None, activations: str, wave: int | None = None) -> Planned:
    caps = dispatcher.caps
    fmt = FORMATS[qtype]
    try:
        cfg = dispatcher.choose(fmt, rows, k, ncols, path, activations)
    except ValueError as e:
        return Planned(op, qtype, path or "", ncols, "", "", None, error=str(e))
    if cfg.path == "mmvq":
        cfg = replace(cfg, x_planes=ACTIVATION_PLANES[activations])
    cfg = fitted(cfg, caps, fmt, MatrixLayout(fmt, 1, rows, k).k_padded, ncols,
                 min(rows * fmt.row_bytes(k), max_buffer))
    mul_mat_id = op == "MUL_MAT_ID"
    variant = matvec_variant(qtype, cfg, mul_mat_id)
    spec = PipelineSpec(variant.name, str(spirv_path(variant)), tuple(matvec_spec(cfg, ncols)),
                        tuple(matvec_bindings(cfg, mul_mat_id)), len(WEIGHTS_PARAMS), wave or 0)
    launch = f"{cfg.kernel}, {describe(cfg.params())}"
    return Planned(op, qtype, cfg.path, ncols, launch, cfg.source, spec, workgroup=cfg.wg_size,
                   shared=shared_memory_bytes(cfg, ncols), subgroup=wave or 0)


def _matmul(dispatcher: Dispatcher, max_buffer: int, op: str, qtype: str, rows: int, k: int, path: str | None,
            activations: str, n_expert: int | None = None, flavour: str | None = None,
            require_subgroup: bool = False) -> Planned:
    """A mat-mat's pipeline over PROMPT_COLUMNS columns: the dispatcher's
    tiles on `path`, or with `flavour` the cooperative-matrix kernel's at the
    device's default tile;
    require_subgroup: the device lets a pipeline require a subgroup size, so
    the cooperative-matrix kernel requires its own (as vkq.ops.MatMul
    creates it)."""
    fmt = FORMATS[qtype]
    caps = dispatcher.caps
    try:
        if flavour is not None:
            path = coopmat.reference_path(flavour)
            cfg = tiles.coopmat_config(caps, fmt, k, flavour=flavour)
            problems = tiles.limit_problems(cfg, caps, k, n_expert) if n_expert is not None else []
            if problems:
                raise ValueError(f"MUL_MAT_ID over {n_expert} experts: " + "; ".join(problems))
        else:
            cfg = tile_tuning.choose(dispatcher, fmt, k, path, activations, n_expert=n_expert)
    except ValueError as e:
        return Planned(op, qtype, path or "", PROMPT_COLUMNS, "", "", None, error=str(e))
    cfg = fitted(cfg, caps, fmt, MatrixLayout(fmt, 1, rows, k).k_padded, PROMPT_COLUMNS,
                 min((n_expert or 1) * rows * fmt.row_bytes(k), max_buffer))
    mul_mat_id = n_expert is not None
    variant = matmul_variant(qtype, cfg, mul_mat_id)
    required = cfg.coopmat_subgroup if cfg.coopmat and require_subgroup else 0
    spec = PipelineSpec(variant.name, str(spirv_path(variant)), tuple(matmul_spec(cfg, 1, n_expert or 1)),
                        tuple(matmul_bindings(cfg, mul_mat_id)), len(WEIGHTS_PARAMS), required)
    entry = cfg.source
    if flavour == "int8" and ACTIVATION_PLANES[activations] != 1:
        entry += f"; the dispatcher takes it for one-plane activations (q8_1), not {activations}"
    return Planned(op, qtype, cfg.path, PROMPT_COLUMNS, cfg.describe(), entry, spec, workgroup=cfg.wg_size,
                   shared=cfg.shared_memory_bytes, subgroup=cfg.coopmat_subgroup)


def plan(model: Model, dispatcher: Dispatcher, max_buffer: int, activations: str = GENERATE_ACTIVATIONS,
         types: set[str] | None = None, ops: set[str] | None = None,
         columns: set[int] | None = None, require_subgroup: bool = False,
         matvec_wave: int | None = None) -> list[Planned]:
    """Every pipeline the dispatcher would create for the model's matrices on
    its device (the module's list), each once: entries of one pipeline merge,
    their matrices listed together (max_buffer: the largest buffer of
    weights, vkq.device.memory.buffer_limit; require_subgroup: the device
    lets a compute pipeline require a subgroup size,
    DeviceInfo.required_subgroup_size_in_compute). Filters: block types, ops
    (OPS), columns."""
    caps = dispatcher.caps
    shapes: dict[tuple, list[str]] = {}
    for m in model.matrices:
        if types is None or m.qtype in types:
            shapes.setdefault((m.qtype, *m.shape), []).append(m.name)
    planned: list[Planned] = []

    def add(p: Planned, names: list[str]) -> None:
        p.matrices = [f"{len(names)} x {names[0]}" if len(names) > 1 else names[0]]
        planned.append(p)

    for (qtype, *shape), names in shapes.items():
        fmt = FORMATS[qtype]
        rows, k = shape[-2], shape[-1]
        stack = len(shape) == 3
        if not stack:
            default = dispatcher.choose(fmt, rows, k, 1, None, activations).path if fmt.paths else None
            for path in fmt.paths:
                for n in range(1, MAX_COLS + 1):
                    p = _matvec(dispatcher, max_buffer, "mat-vec", qtype, rows, k, n, path, activations, matvec_wave)
                    p.default = path == default
                    add(p, names)
            for path in (None, *fmt.paths):
                p = _matmul(dispatcher, max_buffer, "mat-mat", qtype, rows, k, path, activations)
                p.default = path is None
                add(p, names)
            for flavour in coopmat_flavours(caps, qtype):
                add(_matmul(dispatcher, max_buffer, "coopmat", qtype, rows, k, None, activations, flavour=flavour,
                            require_subgroup=require_subgroup), names)
        else:
            for path in fmt.paths:
                add(_matvec(dispatcher, max_buffer, "MUL_MAT_ID", qtype, rows, k, 1, path, activations, matvec_wave),
                    names)
                add(_matmul(dispatcher, max_buffer, "MUL_MAT_ID mat-mat", qtype, rows, k, path, activations, shape[0]), names)
            for flavour in coopmat_flavours(caps, qtype):
                add(_matmul(dispatcher, max_buffer, "coopmat", qtype, rows, k, None, activations, shape[0], flavour,
                            require_subgroup), names)
    planned = [p for p in planned if (ops is None or p.op in ops) and (columns is None or p.op not in
                                                                        ("mat-vec",) or p.columns in columns)]
    # One row per pipeline: the same pipeline for several shapes or ops is compiled once.
    merged: dict[tuple, Planned] = {}
    out = []
    for p in planned:
        key = (p.op, p.pipeline) if p.pipeline is not None else (p.op, p.qtype, p.path, p.columns, p.error)
        if key in merged:
            merged[key].matrices += [m for m in p.matrices if m not in merged[key].matrices]
            merged[key].default |= p.default
            continue
        merged[key] = p
        out.append(p)
    return out


def limit_problems(p: Planned, s: PipelineStats, info) -> list[str]:
    """Where the pipeline passes the device's workgroup limits: its
    invocations, and its shared memory (the driver's figure, or vkq's count
    where the driver gives none)."""
    out = []
    most = min(info.max_workgroup_invocations, info.max_workgroup_size[0])
    if p.workgroup > most:
        out.append(f"{p.workgroup} invocations per workgroup > the device's {most}")
    shared = max(p.shared, s.shared_bytes or 0)
    if shared > info.max_compute_shared_memory_size:
        out.append(f"{shared} bytes of shared memory > the device's {info.max_compute_shared_memory_size}")
    return out


@dataclass
class Row:
    """One line of the report: the plan's entry, the driver's figures, the
    device's limits it passes and the occupancy floor of its op (the class's
    table; None where the table sets none)."""

    planned: Planned
    stats: PipelineStats
    limits: list[str] = field(default_factory=list)
    floor: dict | None = None

    def to_dict(self) -> dict:
        p, s = self.planned, self.stats
        return {"pipeline": p.pipeline.shader if p.pipeline else None, "op": p.op, "type": p.qtype, "path": p.path,
                "columns": p.columns, "default_path": p.default, "launch": p.launch,
                "spec_constants": list(p.pipeline.spec) if p.pipeline else [],
                "bindings": list(p.pipeline.bindings) if p.pipeline else [],
                "entry": p.entry, "matrices": p.matrices, "compiled": s.compiled,
                "error": p.error or s.error, "registers": s.registers, "spills": s.spills or 0,
                "scratch_bytes": s.scratch_bytes, "shared_bytes": s.shared_bytes, "occupancy": s.occupancy,
                "occupancy_unit": s.occupancy_unit, "subgroup_size": s.subgroup_size,
                "instructions": s.instructions, "cycles": s.cycles, "validation": s.validation,
                "workgroup_size": p.workgroup, "subgroup_size_built_for": p.subgroup or None,
                "limit_problems": self.limits,
                "occupancy_floor": self.floor, "statistics": s.raw}


def device_class_line(info) -> str:
    """The device's class and what vkq takes as known of it (vkq.dispatch.gpu_classes)."""
    cls = classify(info)
    facts = gpu_classes.of(cls)
    if facts is None:
        return f"# class {cls.key}: no GPU class facts (a CPU driver or another vendor)"
    return (f"# class {cls.key}: the tables' launches are written for subgroups of {facts.wave} (this device: "
            f"{info.subgroup_min_size}..{info.subgroup_max_size}); its least shared memory {facts.shared_memory} "
            f"bytes, workgroups of {facts.max_workgroup_invocations}")


def report(models: str | list[str] = DEFAULT_MODEL, device: int | None = None, activations: str | None = None,
           types: list[str] | None = None, ops: list[str] | None = None, columns: list[int] | None = None,
           validate: bool = False, ggml: str | None = None, step: bool = False) -> tuple[object, list[Row]]:
    """The device's DeviceInfo and a Row per planned pipeline, compiled
    there (a child process per batch: a driver that crashes costs one
    pipeline's figures, not the report). ggml: a libggml-vulkan.so ("": the
    llama-server wheel's) whose mat-vecs of Q4_0 and Q4_K are compiled
    beside vkq's (vkq.commands.ggml_shaders), op "ggml mat-vec". step: also
    every pipeline of the first model's step as recorded on the device
    (record_step: the vector ops, attention at each of STEP_CONTEXTS, the
    step's own mat-vecs and mat-mats), ops "step <shader>", and a row "step
    recording" holding what the validation layer said while it was
    recorded and replayed."""
    index = device_index_from_env(device)
    for name in types or ():
        if name not in FORMATS:
            raise ValueError(f"--types: unknown block type {name!r}")
    for op in ops or ():
        if op not in (*OPS, "step"):
            raise ValueError(f"--op: unknown op {op!r}; one of {', '.join(OPS)}, step")
    only_step = bool(ops) and set(ops) == {"step"}
    if ops and "step" in ops:  # (the step's pipelines, and of the planned ones those of the other ops named)
        step, ops = True, [op for op in ops if op != "step"]
    for n in columns or ():
        if not 1 <= n <= MAX_COLS:
            raise ValueError(f"--columns: {n} is not 1..{MAX_COLS} (the mat-vec's columns)")
    activations = check_activations(activations or GENERATE_ACTIVATIONS)
    models = [models] if isinstance(models, str) else list(models)
    found = [resolve(name) for name in models]
    m = Model(" + ".join(x.name for x in found), [mat for x in found for mat in x.matrices],
              max(x.n_expert_used for x in found))
    info = device_info_isolated(index)
    caps = caps_as_opened(info)
    dispatcher = Dispatcher.for_device(info, caps)
    # (the subgroup size vkq.Backend's mat-vecs ask for there)
    wave = gpu_classes.required_wave(dispatcher.device_class, (info.subgroup_min_size, info.subgroup_max_size),
                                     info.required_subgroup_size_in_compute)
    planned = [] if only_step else plan(m, dispatcher, buffer_limit(info)[0], activations,
                                        set(types) if types else None, set(ops) if ops else None,
                                        set(columns) if columns else None, info.required_subgroup_size_in_compute,
                                        wave)
    recording = None
    if step:
        stepped, recorded, recording = _step_planned(models[0], index, validate)
        known = {p.pipeline for p in planned if p.pipeline is not None}
        planned += [p for p in stepped if p.pipeline not in known]
    if ggml is not None:
        planned += _ggml_planned(ggml, info, sorted(columns) if columns else list(range(1, MAX_COLS + 1)),
                                 [t for t in ggml_shaders.GGML_TYPES if types is None or t in types])
    specs = [p.pipeline for p in planned if p.pipeline is not None]
    stats = iter(compile_isolated(specs, index, validate))
    floors = occupancy_floors(dispatcher.device_class)
    rows = []
    for p in planned:
        s = next(stats) if p.pipeline is not None else PipelineStats(False)
        rows.append(Row(p, s, limit_problems(p, s, info), floors.get(p.op)))
    if recording is not None:
        rows.append(Row(recorded, PipelineStats(True, validation=recording)))
    return info, rows


def _ggml_planned(library: str, info, columns: list[int], types: list[str]) -> list[Planned]:
    path = Path(library) if library else ggml_shaders.default_library()
    if path is None or not path.exists():
        raise ValueError(f"--ggml: no libggml-vulkan.so at {library!r}" if library else
                         f"--ggml: the llama-server wheel is not installed ({WHEEL}); give the library's path")
    into = Path(tempfile.mkdtemp(prefix="vkq-ggml-"))
    out = []
    for qtype, p, n, spec in ggml_shaders.pipelines(path, into, info.subgroup_size, columns, types):
        out.append(Planned("ggml mat-vec", qtype, p, n, f"ggml: BLOCK_SIZE {spec.spec[0]}, NUM_ROWS {spec.spec[1]}, "
                           f"subgroup size {spec.subgroup_size} required", f"ggml-vulkan ({path.name})", spec,
                           workgroup=spec.spec[0]))
    return out


# The step's recording (`--step`): a model of the preset's shapes with this
# many layers (the pipelines are every layer's), recorded at these contexts
# (the attention's launch depends on the positions the KV cache holds).
STEP_LAYERS = 2
STEP_CONTEXTS = (512, 32768)
STEP_PROMPT = 512  # a prompt chunk's tokens (the tiled mat-mat's)


def step_file(model: str, into: Path) -> Path:
    """The GGUF file whose step `--step` records: `model` itself, or for a
    preset NAME:MIX a file of its shapes with STEP_LAYERS layers, random
    weights and the example model's tokenizer (vkq.commands.model_file)."""
    if model.lower().endswith(".gguf") or Path(model).is_file():
        return Path(model)
    from ..example import example_model
    from .model_file import write_model
    from .presets import PRESETS

    name, _, mix = model.partition(":")
    spec = PRESETS.get(name.lower())
    if spec is None:
        resolve(model)  # (its error names the presets)
    path = into / f"{name}-{mix}-{STEP_LAYERS}-layers.gguf"
    return write_model(replace(spec, n_layer=min(STEP_LAYERS, spec.n_layer)), mix.upper(), path, example_model(),
                       context=max(STEP_CONTEXTS))


def record_step(path: str, index: int, validate: bool) -> dict:
    """Every pipeline vkq creates for a model's decode step, its prompt
    chunk of STEP_PROMPT tokens and its draft-verifying steps of 2..8
    tokens, at each of STEP_CONTEXTS, as PipelineSpec dicts with their op
    (the shader); and with `validate` what the validation layer said while
    they were recorded and replayed once (synchronization validation on).
    Run in a child process: it opens the device through Kompute."""
    from ..backend import Backend
    from ..device import runtime
    from ..device.shader_variants import spirv_path
    from ..llama.gpu_step import GpuLlama
    from ..llama.matvecs import VkqMatvecs
    from ..llama.model import LlamaFile

    log = ValidationLog(synchronization=True) if validate else None
    seen: dict[tuple, dict] = {}
    original = runtime.Device.algorithm

    def capture(self, tensors, variant, groups, spec, push, *args, **kwargs):
        # (Device.algorithm's further arguments: binding_kinds, and where the kp has it required_subgroup_size)
        kinds = tuple((args[0] if args else kwargs.get("binding_kinds")) or ("storage",) * len(tensors))
        required = kwargs.get("required_subgroup_size", args[1] if len(args) > 1 else None) or 0
        p = PipelineSpec(variant.name, str(spirv_path(variant)), tuple(int(v) for v in spec), kinds, len(push),
                         int(required))
        seen.setdefault(astuple(p), {"op": "step " + Path(variant.source).stem, "pipeline": asdict(p),
                                     "groups": list(groups)})
        return original(self, tensors, variant, groups, spec, push, *args, **kwargs)

    runtime.Device.algorithm = capture
    backend = Backend(index)
    file = LlamaFile(path)
    weights = VkqMatvecs(file.tensors, file.groups, backend, "auto", GENERATE_ACTIVATIONS)
    contexts = []
    for ctx in STEP_CONTEXTS:
        with warnings.catch_warnings():  # (the file's context where the device holds it, else the most it holds)
            warnings.simplefilter("ignore")
            model = GpuLlama(None, backend, file=file, weights=weights, ctx=None if ctx == max(STEP_CONTEXTS) else ctx,
                             prompt_chunk=STEP_PROMPT)
        contexts.append(model.ctx)
        model.warm_up(n_prompt=STEP_PROMPT, speculative=True)
        del model
    return {"pipelines": list(seen.values()), "validation": log.since() if log is not None else [],
            "contexts": contexts}


def _step_planned(model: str, index: int, validate: bool) -> tuple[list[Planned], Planned, list[str]]:
    into = Path(tempfile.mkdtemp(prefix="vkq-step-"))
    try:
        recorded = in_child(record_step, str(step_file(model, into)), index, validate)
    finally:
        shutil.rmtree(into, ignore_errors=True)
    out = []
    for r in recorded["pipelines"]:
        spec = PipelineSpec(**{**r["pipeline"], "spec": tuple(r["pipeline"]["spec"]),
                               "bindings": tuple(r["pipeline"]["bindings"])})
        columns = spec.spec[2] if r["op"] == "step mul_mat_vec" else STEP_PROMPT if r["op"] == "step mul_mm" else 0
        out.append(Planned(r["op"], "", "", columns, f"groups {tuple(r['groups'])}", "the recorded step", spec,
                           workgroup=spec.spec[0] if spec.spec else 0))
    contexts = " and ".join(str(c) for c in recorded["contexts"])
    recording = Planned("step recording", "", "", 0, f"a decode step, a {STEP_PROMPT}-token prompt chunk and the "
                        f"draft-verifying steps, each at {contexts} positions", "the recorded step", None)
    return out, recording, recorded["validation"]


def _cell(value) -> str:
    return "" if value is None else str(value)


def table(rows: list[Row]) -> str:
    header = ["pipeline", "op", "cols", "compiled", "wave", "regs", "spills", "scratch", "shared", "occupancy",
              "instr", "chosen by"]
    cells = []
    for r in rows:
        d = r.to_dict()
        occupancy = f"{d['occupancy']} {d['occupancy_unit']}" if d["occupancy"] is not None else ""
        cells.append([d["pipeline"] or f"({d['type']} {d['path']})", d["op"] + (" *" if d["default_path"] else ""),
                      str(d["columns"]), "yes" if d["compiled"] else "NO: " + d["error"][:60],
                      _cell(d["subgroup_size"]), _cell(d["registers"]), str(d["spills"]), _cell(d["scratch_bytes"]), _cell(d["shared_bytes"]),
                      occupancy, _cell(d["instructions"]),
                      d["entry"].removeprefix("path from argument; parameters from ")[:90]])
    return markdown(header, cells, {"cols", "wave", "regs", "spills", "scratch", "shared", "instr"})


def run(models: str | list[str] = DEFAULT_MODEL, output: str = "md", device: int | None = None, activations: str | None = None,
        types: list[str] | None = None, ops: list[str] | None = None, columns: list[int] | None = None,
        validate: bool = False, ggml: str | None = None, step: bool = False) -> int:
    info, rows = report(models, device, activations, types, ops, columns, validate, ggml, step)
    models = [models] if isinstance(models, str) else models
    if output == "json":
        json.dump([r.to_dict() for r in rows], sys.stdout, indent=1)
        print()
        return 0
    failed = [r for r in rows if not r.stats.compiled]
    spilled = [r for r in rows if r.stats.spills]
    limited = [r for r in rows if r.limits]
    low = [r for r in rows if r.floor and r.stats.occupancy is not None and r.stats.occupancy < r.floor["min"]]
    messages = sum(len(r.stats.validation) for r in rows)
    print(f"# {', '.join(models)} on {info.name} ({info.driver_name} {info.driver_info}): {len(rows)} pipelines, "
          f"{len(rows) - len(failed)} compiled, {len(spilled)} spilling, {len(limited)} past the device's limits, "
          f"{len(low)} below their occupancy floor"
          + (f", {messages} validation messages" if validate else ""))
    print(device_class_line(info))
    print("# op *: the dispatcher's own path for that shape; wave: the subgroup size compiled; regs: VGPRs (AMD) or "
          "registers (NVIDIA) per invocation; scratch: bytes of scratch (AMD) or local memory (NVIDIA)")
    print(table(rows))
    for r in rows:
        for problem in r.limits:
            print(f"limits: {r.planned.pipeline.shader}: {problem}")
        if r in low:
            print(f"occupancy: {r.planned.pipeline.shader} at {r.planned.columns} column(s): {r.stats.occupancy} "
                  f"{r.stats.occupancy_unit}, below the floor of {r.floor['min']} ({r.floor['reason']})")
        for message in r.stats.validation:
            name = r.planned.pipeline.shader if r.planned.pipeline else r.planned.op
            print(f"validation: {name}: {message[:300]}")
    return 0
