"""`vkq pipelines` and what it stands on, on this machine's own driver and
without one: the driver's statistics under common names, a driver crash
that costs one pipeline's figures, the plan of a model's pipelines for the
recorded GPUs' classes, ggml-vulkan's shaders read from its library, the
occupancy floors' schema, and tools/mesa26.sh saying what it lacks. The
GPU compilers themselves run in tests/test_gpu_compilers.py (Mesa 26)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from vkq.commands import ggml_shaders, pipelines
from vkq.commands.cli import main
from vkq.commands.presets import resolve
from vkq.device import pipeline_stats
from vkq.device.device_info import DeviceInfo
from vkq.device.pipeline_stats import PipelineSpec, compile_isolated, in_child, summarize
from vkq.dispatch import tables
from vkq.dispatch.choose import Dispatcher
from vkq.dispatch.classify import classify
from vkq.resolve import MAX_COLS

MESA26 = ROOT / "tools" / "mesa26.sh"


def test_statistics_under_common_names():
    radv = {"SGPRs": 108, "VGPRs": 256, "Spilled SGPRs": 2, "Spilled VGPRs": 121, "Scratch size": 1024,
            "LDS size": 8192, "Subgroups per SIMD": 4, "Instructions": 2273, "Latency": 33136}
    s = summarize(radv, 32)
    assert (s.registers, s.spills, s.scratch_bytes, s.shared_bytes, s.occupancy, s.occupancy_unit,
            s.instructions, s.cycles, s.subgroup_size) == (256, 123, 1024, 8192, 4, "waves/SIMD", 2273, 33136, 32)
    nak = {"Instruction count": 1452, "Static cycle count": 21292, "Max warps/SM": 16, "Spills to memory": 3,
           "Fills from memory": 3, "Spills to reg": 7, "Number of GPRs": 120, "SLM size": 64}
    s = summarize(nak, 32)
    # (spills to registers are not spills to memory)
    assert (s.registers, s.spills, s.scratch_bytes, s.shared_bytes, s.occupancy, s.occupancy_unit) == \
        (120, 3, 64, None, 16, "warps/SM")


def test_a_child_that_dies_is_named_by_its_signal():
    with pytest.raises(ChildProcessError, match="SIGFPE"):
        in_child(lambda: os.kill(os.getpid(), signal.SIGFPE))
    assert in_child(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(RuntimeError, match="ValueError: no"):
        in_child(lambda: (_ for _ in ()).throw(ValueError("no")))


def test_a_pipeline_that_crashes_the_driver_costs_only_its_own_figures(monkeypatch):
    """A batch whose child dies is compiled again one pipeline per child."""
    def fake(specs, index, validate):  # (runs in the children: forked, they see the patch)
        if any(p.shader == "crash" for p in specs):
            os.kill(os.getpid(), signal.SIGFPE)
        return [summarize({"VGPRs": 64}, 32) for _ in specs]

    monkeypatch.setattr(pipeline_stats, "compile_pipelines", fake)
    specs = [PipelineSpec(name, "x.spv", (32,), ("storage",), 11) for name in ("a", "crash", "b")]
    stats = compile_isolated(specs, batch=3)
    assert [(s.compiled, s.registers) for s in stats] == [(True, 64), (False, None), (True, 64)]
    assert "the driver crashed (SIGFPE)" in stats[1].error


def info_of(name: str) -> DeviceInfo:
    return DeviceInfo.from_dict(json.loads((ROOT / "tests" / "devices" / f"{name}.json").read_text()))


@pytest.mark.parametrize("device", ["nvidia_rtx3090", "amd_rx6800xt"])
def test_the_plan_of_a_model(device, monkeypatch, tmp_path):
    """Every block type's mat-vec on each of its paths at 1..8 columns, each
    once, with the dispatcher's own path marked; the mat-mat on the
    dispatcher's and each path; the cooperative-matrix kernel only where
    the device offers its extension."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))  # (no tuning of this machine's)
    info = info_of(device)
    caps = pipelines.caps_as_opened(info)
    dispatcher = Dispatcher.for_device(info, caps)
    model = resolve("llama-3.1-8b:Q4_K_M")
    plan = pipelines.plan(model, dispatcher, 1 << 30)
    matvecs = [p for p in plan if p.op == "mat-vec"]
    assert {(p.qtype, p.path, p.columns) for p in matvecs} == {
        (t, path, n) for t in ("Q4_K", "Q6_K") for path in ("dmmv", "mmvq") for n in range(1, MAX_COLS + 1)}
    for p in matvecs:
        cfg = dispatcher.choose(dispatcher_fmt(p.qtype), 4096, 4096, p.columns, p.path)
        assert p.pipeline.spec[:3] == (cfg.wg_size, cfg.rows_per_wg, p.columns)  # (rows from one shape or another)
        assert p.workgroup == p.pipeline.spec[0] and p.error == ""
    assert len({p.pipeline for p in plan}) == len(plan)
    for qtype in ("Q4_K", "Q6_K"):
        default = {p.path for p in matvecs if p.qtype == qtype and p.default}
        assert default == {dispatcher.choose(dispatcher_fmt(qtype), 4096, 4096, 1).path}
    assert {p.op for p in plan} >= {"mat-vec", "mat-mat"}
    assert any(p.op == "coopmat" for p in plan) == caps.coopmat
    assert [p for p in plan if p.op == "coopmat" and not p.pipeline.shader.endswith(("_coopmat_f16",
                                                                                      "_coopmat_int8"))] == []
    only = pipelines.plan(model, dispatcher, 1 << 30, types={"Q4_K"}, ops={"mat-vec"}, columns={8})
    assert [(p.qtype, p.columns) for p in only] == [("Q4_K", 8), ("Q4_K", 8)]


# RDNA3's cooperative-matrix shapes as RADV lists them (null navi31, Mesa 26.1), the ones vkq's flavours take.
RDNA3_SHAPES = ((16, 16, 16, "f16", "f16", "f32", "f32", "subgroup"), (16, 16, 16, "s8", "s8", "s32", "s32", "subgroup"))


@pytest.mark.parametrize("activations, int8_note", [("q8_1", False), ("q8_1x2", True)])
def test_the_plan_builds_both_cooperative_matrix_flavours(activations, int8_note, monkeypatch, tmp_path):
    """On a device listing both flavours' fragments (RDNA3's) the plan holds
    each type's float16 and, where it has an int8 path, int8 kernel, over
    matrices and expert stacks, at the device's default tile (the spec
    constants MatMul passes, the fragment last) with its subgroup size
    required where the device lets one be; the int8 one says where the
    activations keep the dispatcher from taking it."""
    from dataclasses import replace

    from vkq.dispatch import tiles
    from vkq.ops import matmul_spec

    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    info = replace(info_of("amd_rx6800xt"), extensions=info_of("amd_rx6800xt").extensions | {
        "VK_KHR_cooperative_matrix", "VK_KHR_vulkan_memory_model", "VK_KHR_shader_float16_int8"},
        coopmat_shapes=RDNA3_SHAPES, shader_int8=True)
    caps = pipelines.caps_as_opened(info)
    assert caps.coopmat and caps.coopmat_int8
    dispatcher = Dispatcher.for_device(info, caps)
    model = resolve("tiny-moe:Q4_K_M")
    plan = pipelines.plan(model, dispatcher, 1 << 30, activations, require_subgroup=True)
    coop = [p for p in plan if p.op == "coopmat"]
    stacks = {m.qtype for m in model.matrices if m.is_expert_stack}
    plain = {m.qtype for m in model.matrices if not m.is_expert_stack}
    want = {(f"mul_mm{i}_{t.lower()}_coopmat_{f}") for i, types in (("", plain), ("_id", stacks)) for t in types
            for f in ("f16", "int8") if f == "f16" or dispatcher_fmt(t).has_int8_path}
    assert {p.pipeline.shader for p in coop} == want and len(coop) >= len(want)
    for p in coop:
        flavour = "int8" if p.pipeline.shader.endswith("_int8") else "float16"
        cfg = tiles.coopmat_config(caps, dispatcher_fmt(p.qtype), 256, flavour=flavour)  # (tiny-moe's every K)
        n_expert = 8 if "_id_" in p.pipeline.shader else 1
        assert p.pipeline.spec == tuple(matmul_spec(cfg, 1, n_expert)) and p.pipeline.spec[-4:] == (16, 16, 16, 0)
        assert p.pipeline.subgroup_size == p.subgroup == caps.subgroup_size and p.path == (
            "mmvq" if flavour == "int8" else "dmmv")
        assert ("not " + activations in p.entry) == (flavour == "int8" and int8_note), p.entry
    unrequired = pipelines.plan(model, dispatcher, 1 << 30, activations, ops={"coopmat"})
    assert {p.pipeline.subgroup_size for p in unrequired} == {0}


def dispatcher_fmt(qtype):
    from vkq.blocks.formats import FORMATS
    return FORMATS[qtype]


def test_on_this_machines_driver():
    """lavapipe (Mesa 22.3) has no statistics: each pipeline compiles, its figures are blank."""
    done = subprocess.run([sys.executable, "-m", "vkq", "pipelines", "--types", "Q4_0", "--op", "mat-vec",
                           "--columns", "1", "-m", "llama-3.1-8b:Q4_0", "-o", "json"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["path"], r["columns"], r["compiled"], r["spills"], r["registers"]) for r in rows] == [
        ("dmmv", 1, True, 0, None), ("mmvq", 1, True, 0, None)]
    assert all(r["pipeline"].startswith("mul_mat_vec_q4_0_") for r in rows)
    assert all("VK_KHR_pipeline_executable_properties" in r["error"] and r["entry"] for r in rows)


@pytest.mark.parametrize("args, says", [
    (["--op", "mat-mul"], "--op: unknown op 'mat-mul'"),
    (["--columns", "9"], "--columns: 9 is not 1..8"),
    (["--types", "Q9_K"], "--types: unknown block type 'Q9_K'"),
    (["-m", "llama-3.1-8b:Q9"], "has no 'Q9' mix"),
])
def test_a_mistake_is_one_line(args, says, capsys):
    assert main(["pipelines", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_ggml_shaders_are_read_from_its_library(tmp_path):
    library = ggml_shaders.default_library()
    if library is None:
        pytest.skip("the llama-server wheel is not installed")
    found = ggml_shaders.pipelines(library, tmp_path, 32, [1, 8])
    assert [(t, p, n) for t, p, n, _ in found] == [(t, p, n) for t in ("Q4_0", "Q4_K") for p in ("dmmv", "mmvq")
                                                    for n in (1, 8)]
    for _, _, n, spec in found:
        code = open(spec.spirv, "rb").read()
        assert code[:4] == b"\x03\x02\x23\x07" and len(code) % 4 == 0 and len(code) > 1000
        assert spec.spec[2] == n and spec.subgroup_size == 32 and len(spec.bindings) == 5
    with pytest.raises(ValueError, match="has no shader mul_mat_vec_q9"):
        ggml_shaders.extract(library, ["mul_mat_vec_q9_f32_f32"], tmp_path)


def test_occupancy_floors_are_checked():
    table = tables.load_table("amd")
    cls = table["classes"]["amd/*"]
    assert set(cls["occupancy"]) == set(tables.OCCUPANCY_OPS)
    cls["occupancy"]["mat-vec"] = {"min": 0, "unit": "waves", "reason": ""}
    cls["occupancy"]["softmax"] = {"min": 4, "unit": "waves/SIMD", "reason": "x"}
    problems = tables.validate_table(table)
    assert any("occupancy of mat-vec" in p for p in problems) and any("unknown op 'softmax'" in p for p in problems)
    assert tables.occupancy_floors(classify(info_of("nvidia_rtx3090")))["mat-vec"]["unit"] == "warps/SM"


def test_mesa26_says_what_is_missing_in_one_line(tmp_path):
    env = {**os.environ, "VKQ_MESA26_DIR": str(tmp_path)}
    done = subprocess.run([str(MESA26), "check"], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and done.stdout.count("\n") == 1
    assert re.match(r"mesa26: (\d+) of \1 pinned packages not downloaded \(.*\): run tools/mesa26.sh fetch", done.stdout)
    done = subprocess.run([str(MESA26), "radv:navi99", "true"], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and "the null AMD GPUs are navi21, navi31, navi33, gfx1201" in done.stderr
    assert list(tmp_path.iterdir()) == []  # (nothing fetched for a wrong name)


def test_mesa26_pins_every_package_by_hash():
    lines = [line.split() for line in (ROOT / "tools" / "mesa26.pins").read_text().splitlines()
             if line and not line.startswith("#")]
    assert all(len(f) == 3 and re.fullmatch(r"[0-9a-f]{64}", f[0]) and f[1].isdigit() and f[2].endswith(".deb")
               for f in lines)
    names = {f[2].rsplit("/", 1)[1].split("_")[0] for f in lines}
    assert {"mesa-vulkan-drivers", "mesa-drm-shim", "libvulkan1", "vulkan-validationlayers", "libc6"} <= names
    assert "# mesa: 26." in (ROOT / "tools" / "mesa26.pins").read_text()
