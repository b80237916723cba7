"""The GPU classes' pipelines through the GPUs' own compilers, without a GPU:
Mesa 26's RADV (ACO) on null AMD GPUs and NVK (NAK) on a null NVIDIA GPU
(tools/mesa26.sh), each the device of one class of the tables. For the 8B
preset in Q4_0, Q4_K_M's types and the i-quant mixes, `vkq pipelines`
plans every pipeline the dispatcher would create there and compiles it
under the Khronos validation layer:

- every pipeline compiles, and the layer says nothing;
- no workgroup passes the device's limits (invocations, shared memory);
- no pipeline spills registers to scratch or local memory;
- each op's occupancy is at or above the floor its class's table gives;

and that vkq knows a null GPU for one that does not run its dispatches: no
tuning, cooperative-matrix self-check or figures from it.

Skipped unless Mesa 26 is unpacked (`make mesa26`; CI's `make
test-gpu-compilers` does it first). A null GPU's dispatches do nothing:
only the compilers' figures are looked at here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT
from vkq.dispatch import gpu_classes

MESA26 = ROOT / "tools" / "mesa26.sh"
# The null GPU of each class (tools/mesa26.sh), and the class vkq must see there.
CLASSES = {key: c.null_gpu for key, c in gpu_classes.CLASSES.items() if c.null_gpu}
MIXES = ("Q4_0", "Q4_K_M", "IQ4_XS", "IQ4_NL", "IQ3_M", "IQ3_XXS", "IQ2_M", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S")
MODELS = [arg for mix in MIXES for arg in ("-m", f"llama-3.1-8b:{mix}")]


def mesa26_missing() -> str | None:
    check = subprocess.run([str(MESA26), "check"], capture_output=True, text=True)
    return None if check.returncode == 0 else check.stdout.strip() or check.stderr.strip()


pytestmark = [pytest.mark.mesa26,
              pytest.mark.skipif(bool(mesa26_missing()), reason=f"{mesa26_missing()} (make mesa26)")]


def on(driver: str, *args: str, timeout: int = 900) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VKQ_DEVICE", None)
    done = subprocess.run([str(MESA26), driver, sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """class -> (the planned pipelines' rows, the recorded step's rows) on
    its null GPU: the grid of MODELS, and the step of a 2-layer file of the
    8B preset's Q4_K_M shapes (written once), two runs at a time."""
    from vkq.commands.pipelines import step_file

    path = step_file("llama-3.1-8b:Q4_K_M", tmp_path_factory.mktemp("step"))
    jobs = {(cls, kind): (CLASSES[cls], "-m", "vkq", "pipelines", *args, "--validate", "-o", "json")
            for cls in CLASSES for kind, args in (("grid", MODELS), ("step", ("-m", str(path), "--op", "step")))}
    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(jobs, pool.map(lambda job: json.loads(on(*job)), jobs.values())))
    return {cls: (done[cls, "grid"], done[cls, "step"]) for cls in CLASSES}


@pytest.fixture(params=list(CLASSES))
def compiled(request, reports):
    """(class, the rows of its planned pipelines and of its recorded step)."""
    grid, step = reports[request.param]
    return request.param, grid + step


@pytest.mark.parametrize("cls", list(CLASSES))
def test_the_null_gpu_is_of_its_class_with_its_facts(cls):
    """vkq classifies the null GPU as the class it stands for, and the
    class's facts (vkq.dispatch.gpu_classes) are what it reports."""
    info = json.loads(on(CLASSES[cls], "-c", "import json; from vkq.device.pipeline_stats import device_info_isolated; "
                                             "print(json.dumps(device_info_isolated(0).to_dict()))"))
    from vkq.device.device_info import DeviceInfo
    from vkq.dispatch.classify import classify

    info = DeviceInfo.from_dict(info)
    assert classify(info).key.startswith(cls + "/"), classify(info)
    facts = gpu_classes.CLASSES[cls]
    assert (info.subgroup_min_size, info.subgroup_max_size) == facts.subgroup_sizes
    assert info.max_compute_shared_memory_size >= facts.shared_memory
    assert min(info.max_workgroup_invocations, info.max_workgroup_size[0]) >= facts.max_workgroup_invocations


def test_every_pipeline_compiles_and_the_layer_says_nothing(compiled):
    """Every pipeline compiles, and the layer says nothing about any of them,
    nor while the step (decode, a 512-token prompt chunk, the steps that
    verify drafts; at 512 positions and the longest context the null GPU's
    memory holds) is recorded and replayed with the class's launches."""
    cls, rows = compiled
    ops = {r["op"] for r in rows}
    assert {"mat-vec", "mat-mat", "step recording", "step rms_norm", "step attention", "step attention_tiled",
            "step argmax", "step mul_mat_vec", "step mul_mm"} <= ops, ops
    assert {r["type"] for r in rows} >= {"Q4_0", "Q4_K", "Q6_K", "IQ4_XS", "IQ3_S", "IQ2_XXS", "IQ1_S"}
    assert {r["columns"] for r in rows if r["op"] == "mat-vec"} == set(range(1, 9))
    assert [(r["pipeline"], r["columns"], r["error"]) for r in rows if not r["compiled"]] == []
    assert [(r["pipeline"] or r["op"], r["columns"], r["validation"]) for r in rows if r["validation"]] == []
    # (the statistics were read: a driver without them would pass the checks below emptily)
    assert all(r["registers"] for r in rows if r["pipeline"]), [r["pipeline"] for r in rows if not r["registers"]]


def test_the_matvecs_run_at_the_wave_the_tables_assume(compiled):
    cls, rows = compiled
    wave = gpu_classes.CLASSES[cls].wave
    assert [(r["pipeline"], r["subgroup_size"]) for r in rows if r["op"] == "mat-vec" and r["subgroup_size"] != wave] == []


def test_the_cooperative_matrix_kernel_compiles_at_the_subgroup_size_it_is_built_for(compiled):
    """Its workgroup is subgroups of the device's reported size (RADV: 64,
    while it may compile a workgroup as wave32 unless a size is required).
    Both flavours wherever the device has the extension: every type's
    float16 kernel and the int8 one of each type with an int8 path (RDNA3
    and RDNA4 at 16x16x16 fragments, WMMA; NVK's Turing at 16x16x16 float16
    and 8x8x16 int8, the int8 shape it lists at a K of the plain layout,
    which the chooser prefers to its 16x16x32 and 16x8x32)."""
    from vkq.blocks.formats import FORMATS

    cls, rows = compiled
    coopmat = [r for r in rows if r["op"] == "coopmat"]
    assert [(r["pipeline"], r["subgroup_size"], r["subgroup_size_built_for"]) for r in coopmat
            if r["subgroup_size"] != r["subgroup_size_built_for"]] == []
    assert bool(coopmat) == (cls != "amd/rdna2")  # (RDNA2 has no cooperative matrices)
    if coopmat:
        types = {r["type"] for r in rows if r["op"] == "mat-mat"}
        built = {(r["type"], r["pipeline"].rsplit("_", 1)[1]) for r in coopmat}
        assert built == {(t, f) for t in types for f in ("f16", "int8") if f == "f16" or FORMATS[t].has_int8_path}
        int8_fragment = [16, 16, 16] if cls.startswith("amd/") else [8, 8, 16]
        # (the fragment, then the plain int8 layout: each listed a K dividing 16)
        assert [(r["pipeline"], r["spec_constants"][-4:]) for r in coopmat if r["spec_constants"][-4:] != (
            int8_fragment if r["pipeline"].endswith("_int8") else [16, 16, 16]) + [0]] == []


def test_no_workgroup_passes_the_devices_limits(compiled):
    cls, rows = compiled
    assert [(r["pipeline"], r["columns"], r["limit_problems"]) for r in rows if r["limit_problems"]] == []


def test_each_ops_occupancy_is_at_its_floor(compiled):
    cls, rows = compiled
    assert all(r["occupancy_floor"] for r in rows if not r["op"].startswith("step"))
    low = [(r["pipeline"], r["columns"], r["occupancy"], r["occupancy_floor"]["min"]) for r in rows
           if r["occupancy_floor"] and (r["occupancy"] is None or r["occupancy"] < r["occupancy_floor"]["min"])]
    assert low == []


def kind(r) -> str:
    return "tiled attention" if (r["pipeline"] or "").startswith("attention_tiled") else "other"


def spills(rows, which: str) -> list:
    return [(r["pipeline"], r["columns"], r["spills"]) for r in rows if r["spills"] and kind(r) == which]


def test_no_pipeline_spills(compiled):
    """No spills (the float and int8 mat-vecs at every column count
    included), and no scratch or local memory: on AMD none at all (ACO keeps
    private arrays in registers); on NAK none in the mat-vecs either (their
    partial sums are indexed by constants only)."""
    cls, rows = compiled
    assert spills(rows, "other") == []
    others = [r for r in rows if r["pipeline"] and kind(r) == "other"]
    if cls.startswith("amd/"):
        assert [(r["pipeline"], r["columns"], r["scratch_bytes"]) for r in others if r["scratch_bytes"]] == []
    else:
        matvecs = [r for r in others if r["pipeline"].startswith("mul_mat_vec")]
        assert matvecs and [(r["pipeline"], r["columns"], r["scratch_bytes"]) for r in matvecs
                            if r["scratch_bytes"]] == []


def test_the_tiled_attention_does_not_spill(compiled):
    """The prompt's tiled attention spreads a row over invocations on a GPU
    (vkq.llama.chunk_attention.attention_tiles): no spills, no scratch or
    local memory at all, and an occupancy at the mat-mat's floor (a tiled
    kernel that waits at barriers too; its table has no floor of its own)."""
    cls, rows = compiled
    tiled = [r for r in rows if kind(r) == "tiled attention"]
    assert tiled and spills(rows, "tiled attention") == []
    assert [(r["pipeline"], r["scratch_bytes"]) for r in tiled if r["scratch_bytes"]] == []
    floor = next(r["occupancy_floor"]["min"] for r in rows if r["op"] == "mat-mat")
    assert [(r["pipeline"], r["occupancy"]) for r in tiled if (r["occupancy"] or 0) < floor] == []


HEAD_SIZES = """
import json, sys
from dataclasses import asdict
from vkq.device.pipeline_stats import PipelineSpec, compile_isolated
from vkq.device.shader_variants import VectorOpVariant, spirv_path
from vkq.dispatch import gpu_classes
from vkq.llama.chunk_attention import attend_spec, attention_tiles
from vkq.llama.vector_ops import AttentionShape

class Device:  # the class's launch: its least device's caps
    caps = gpu_classes.CLASSES[sys.argv[1]].caps()
    patched_kp = False

variant = VectorOpVariant("attention_tiled")
specs = []
for head_dim, n_head in ((64, 32), (80, 32), (96, 32), (112, 32), (128, 32), (256, 16)):
    shape = AttentionShape(n_head, 8, head_dim, head_dim, capacity=32768)
    spec = attend_spec(shape, attention_tiles(Device, shape), True)
    specs.append(PipelineSpec(variant.name, str(spirv_path(variant)), tuple(spec), ("storage",) * 7, 10))
print(json.dumps([{"head_dim": p.spec[1], **asdict(s)} for p, s in zip(specs, compile_isolated(specs))]))
"""


@pytest.mark.parametrize("cls", list(CLASSES))
def test_the_tiled_attention_does_not_spill_at_any_head_size(cls):
    """The prompt's tiled attention at the class's launch for head_dims 64,
    80, 96, 112, 128 (32 query heads, 8 K/V heads) and 256 (16 and 8): no
    spills, no scratch or local memory, and on AMD 4 waves per SIMD or more
    through 128 (the mat-mat's floor; at 256 its shared memory allows 2)."""
    rows = json.loads(on(CLASSES[cls], "-c", HEAD_SIZES, cls))
    assert [r["head_dim"] for r in rows if r["compiled"]] == [64, 80, 96, 112, 128, 256]
    assert [(r["head_dim"], r["spills"], r["scratch_bytes"]) for r in rows if r["spills"] or r["scratch_bytes"]] == []
    if cls.startswith("amd/"):
        assert [(r["head_dim"], r["occupancy"]) for r in rows if r["occupancy"] < (4 if r["head_dim"] <= 128 else 2)] \
            == []


INT8_K32 = """
import dataclasses, json
from dataclasses import asdict
from vkq.blocks.formats import FORMATS
from vkq.commands.pipelines import caps_as_opened
from vkq.device.caps import COOPMAT_TYPES
from vkq.device.pipeline_stats import PipelineSpec, compile_isolated, device_info_isolated
from vkq.device.shader_variants import spirv_path
from vkq.dispatch import tiles
from vkq.dispatch.classify import classify
from vkq.dispatch.tables import occupancy_floors
from vkq.ops import WEIGHTS_PARAMS, matmul_bindings, matmul_spec, matmul_variant

info = device_info_isolated(0)
caps = caps_as_opened(info)
k32 = [tuple(s[:3]) for s in info.coopmat_shapes
       if tuple(s[3:7]) == COOPMAT_TYPES["int8"] and s[7] == "subgroup" and s[2] == 32]
rows, specs = [], []
for qtype in ("Q4_0", "Q4_K", "Q6_K", "IQ2_XXS"):
    for fragment in (caps.coopmat_int8_fragment, *k32):
        cfg = tiles.coopmat_config(dataclasses.replace(caps, coopmat_int8_fragment=fragment), FORMATS[qtype], 4096,
                                   flavour="int8")
        v = matmul_variant(qtype, cfg, False)
        specs.append(PipelineSpec(v.name, str(spirv_path(v)), tuple(matmul_spec(cfg)),
                                  tuple(matmul_bindings(cfg, False)), len(WEIGHTS_PARAMS), cfg.coopmat_subgroup))
        rows.append({"type": qtype, "fragment": list(fragment), "padded": cfg.padded_halves})
print(json.dumps({"chosen": list(caps.coopmat_int8_fragment), "k32": [list(f) for f in k32],
                  "floor": occupancy_floors(classify(info))["coopmat"]["min"],
                  "rows": [{**r, **asdict(s)} for r, s in zip(rows, compile_isolated(specs))]}))
"""


@pytest.mark.parametrize("gpu", ["nvk:172", "nvk:166"])
def test_the_int8_flavour_compiles_at_the_k32_shapes_nvidia_lists(gpu):
    """NVK on Ampere (GA102) and Turing (TU116) lists int8 shapes 32 deep
    (16x16x32, 16x8x32, as NVIDIA's drivers do) beside ones of K 16; the
    chooser keeps K 16 where listed (the same IMMA count on Ampere, twice the
    multiply-adds on zeros at 32; twice the instructions on Turing), and the
    padded layout that K 32 takes compiles at every listed K-32 shape, the
    default tile: no spills, no local memory, at the class's occupancy floor."""
    out = json.loads(on(gpu, "-c", INT8_K32))
    assert out["k32"] and all(f[2] == 32 for f in out["k32"]) and out["chosen"][2] == 16, out["k32"]
    rows = out["rows"]
    assert {tuple(r["fragment"]) for r in rows if r["padded"]} == {tuple(f) for f in out["k32"]}
    assert [(r["type"], r["fragment"], r["error"]) for r in rows if not r["compiled"]] == []
    assert [(r["type"], r["fragment"], r["spills"], r["scratch_bytes"]) for r in rows
            if r["spills"] or r["scratch_bytes"]] == []
    assert [(r["type"], r["fragment"], r["occupancy"]) for r in rows if (r["occupancy"] or 0) < out["floor"]] == []


NULL_DEVICE = """
import os, pathlib, sys
import vkq
from vkq.blocks.formats import FORMATS
from vkq.commands.cli import main
from vkq.dispatch import coopmat
from vkq.dispatch.coopmat_check import run_check
b = vkq.Backend()
print("executes", b.executes)
for flavour in coopmat.FLAVOURS:
    print("check", flavour, run_check(b, FORMATS["Q4_0"], flavour))
print("kept", sorted(p.name for p in pathlib.Path(os.environ["VKQ_TUNING_DIR"]).glob("*")))
for command in (["tune", "--types", "Q4_0", "--quick"], ["bench", "--matvec", "--types", "Q4_0"], ["report", "--quick"]):
    print(command[0], main(command))
"""


def test_a_null_gpu_is_known_and_nothing_of_it_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(MESA26), "radv:navi31", sys.executable, "-c", NULL_DEVICE], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "executes False" in out
    for flavour in ("float16", "int8"):  # each flavour's self-check refused, none kept
        assert f"check {flavour} {{'nmse': None" in out and "does not run its dispatches" in out, out
    assert "kept []" in out and list(tmp_path.iterdir()) == []
    assert "tune 2" in out and "bench 2" in out and "report 2" in out, out
    assert done.stderr.count("does not run its dispatches") == 3, done.stderr[-2000:]


PIPELINE_CACHE = """
import numpy as np, vkq
from vkq.blocks.formats import FORMATS
b = vkq.Backend()
print("loaded", len(b._pipeline_cache["loaded"]))
f = FORMATS["Q4_K"]
b.matvec(b.upload("Q4_K", (64, 256), np.zeros(64 * f.row_bytes(256), np.uint8)), np.ones(256, np.float32))
print("holds", len(b.device.manager.pipeline_cache_data()))
"""


def test_the_pipelines_compiled_are_kept_for_the_next_process(tmp_path, monkeypatch):
    """RADV's pipeline cache holds what ACO compiled: written when the first
    Backend is done, merged into the next one's before its first pipeline."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    first = on("radv:navi31", "-c", PIPELINE_CACHE).split()
    assert first[:2] == ["loaded", "0"] and int(first[3]) > 32, first
    kept = list(tmp_path.glob("*.pipelines"))
    assert len(kept) == 1 and kept[0].stat().st_size == int(first[3])
    second = on("radv:navi31", "-c", PIPELINE_CACHE).split()
    assert second[1] == first[3], (first, second)
