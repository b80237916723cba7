"""kp patch 0013: a required subgroup size per pipeline
(VK_EXT_subgroup_size_control) and the Manager's one pipeline cache, whose
contents can be read back and loaded into another Manager.

The subgroup-size tests run a shader that writes gl_SubgroupSize, compiled
here with glslangValidator (skipped without it), on every size the device
allows (lavapipe: 8 only)."""
import shutil
import struct
import subprocess

import kp
import numpy as np
import pytest

import vkq
from vkq.device.device_info import get_device_info
from vkq.device.runtime import SUBGROUP_SIZE_CONTROL_EXTENSION
from vkq.device.shader_variants import QUANTIZE_Q8_1
from vkq.errors import KomputeUnavailable
from vkq.ops import QUANTIZE_WG

pytestmark = pytest.mark.skipif(getattr(kp, "VKQ_PATCH_LEVEL", 0) < 13,
                                reason="kp without vkq's patch 0013 (tools/install_kompute.sh)")

SUBGROUP_SIZE_GLSL = """#version 450
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Out { uint o[]; };
void main() { o[gl_GlobalInvocationID.x] = gl_SubgroupSize; }
"""
HEADER = struct.Struct("<4I16s")  # VkPipelineCacheHeaderVersionOne


@pytest.fixture(scope="module")
def spirv(tmp_path_factory) -> bytes:
    glslang = shutil.which("glslangValidator")
    if glslang is None:
        pytest.skip("glslangValidator not installed (tools/install_system.sh)")
    work = tmp_path_factory.mktemp("subgroup")
    (work / "size.comp").write_text(SUBGROUP_SIZE_GLSL)
    subprocess.run([glslang, "-V", "--target-env", "vulkan1.1", str(work / "size.comp"), "-o", str(work / "size.spv")],
                   check=True, capture_output=True)
    return (work / "size.spv").read_bytes()


@pytest.fixture(scope="module")
def info():
    return get_device_info(0)


@pytest.fixture(scope="module")
def manager(info):
    if SUBGROUP_SIZE_CONTROL_EXTENSION not in info.extensions:
        pytest.skip(f"{info.name} lacks {SUBGROUP_SIZE_CONTROL_EXTENSION}")
    return kp.Manager(0, [], [SUBGROUP_SIZE_CONTROL_EXTENSION])


def run(mgr, spirv: bytes, local_x: int, groups: int = 2, **kw) -> tuple[np.ndarray, object]:
    """Each invocation's gl_SubgroupSize, and the algorithm."""
    out = mgr.tensor_t(np.zeros(local_x * groups, np.uint32))
    algo = mgr.algorithm([out], spirv, (groups, 1, 1), np.array([local_x], np.uint32), np.array([], np.uint32), **kw)
    # (every element is written: no upload first, which would be a
    # write-after-write hazard that kp's dispatch barrier does not cover)
    mgr.sequence().record(kp.OpAlgoDispatch(algo)).record(kp.OpTensorSyncLocal([out])).eval()
    return out.data().copy(), algo


def allowed_sizes(info) -> list[int]:
    return [1 << b for b in range(11) if info.subgroup_min_size <= 1 << b <= info.subgroup_max_size]


def test_device_info_reports_subgroup_size_control(info):
    if SUBGROUP_SIZE_CONTROL_EXTENSION not in info.extensions:
        assert not info.subgroup_size_control and not info.required_subgroup_size_in_compute
        return
    lo, hi = info.subgroup_min_size, info.subgroup_max_size
    assert 1 <= lo <= info.subgroup_size <= hi and lo & (lo - 1) == 0 and hi & (hi - 1) == 0
    assert isinstance(info.required_subgroup_size_stages, int)
    assert vkq.device.device_info.DeviceInfo.from_dict(info.to_dict()) == info


def test_required_subgroup_size_is_what_the_shader_sees(manager, info, spirv):
    assert manager.subgroup_size_control_enabled() == info.subgroup_size_control
    if not info.required_subgroup_size_in_compute:
        pytest.skip(f"{info.name} cannot require a subgroup size of compute shaders")
    for size in allowed_sizes(info):
        # 4 subgroups per workgroup: full subgroups are required too (where
        # the device can), and every invocation sees the size.
        seen, algo = run(manager, spirv, 4 * size, required_subgroup_size=size)
        assert set(seen.tolist()) == {size}, size
        assert algo.required_subgroup_size() == size
        assert algo.requires_full_subgroups() == info.compute_full_subgroups
        if size > 1:  # a local x size that is not a multiple: no full subgroups, size still required
            seen, algo = run(manager, spirv, size + size // 2, required_subgroup_size=size)
            assert set(seen.tolist()) == {size} and not algo.requires_full_subgroups()
    seen, algo = run(manager, spirv, 32)  # none required: as before
    assert algo.required_subgroup_size() == 0 and not algo.requires_full_subgroups()
    assert info.subgroup_min_size <= seen[0] <= info.subgroup_max_size


def test_algorithm_with_bindings_takes_a_required_size(manager, info, spirv):
    if not info.required_subgroup_size_in_compute:
        pytest.skip(f"{info.name} cannot require a subgroup size of compute shaders")
    size = info.subgroup_max_size
    out = manager.tensor_t(np.zeros(size, np.uint32))
    algo = manager.algorithm_with_bindings([out], ["storage"], spirv, (1, 1, 1), np.array([size], np.uint32),
                                           np.array([], np.uint32), required_subgroup_size=size)
    manager.sequence().record(kp.OpAlgoDispatch(algo)).record(kp.OpTensorSyncLocal([out])).eval()
    assert set(out.data().tolist()) == {size} and algo.required_subgroup_size() == size


def test_bad_required_sizes_are_refused_before_the_driver(manager, info, spirv):
    if not info.required_subgroup_size_in_compute:
        pytest.skip(f"{info.name} cannot require a subgroup size of compute shaders")
    lo, hi = info.subgroup_min_size, info.subgroup_max_size
    for bad in {3, lo + 1 if lo > 1 else 3, hi * 2, lo // 2 or 3}:
        with pytest.raises(ValueError, match=rf"required subgroup size {bad} is not a power of two in the device's "
                                             rf"range \[{lo}, {hi}\]"):
            run(manager, spirv, 64, required_subgroup_size=bad)
    # more invocations than maxComputeWorkgroupSubgroups subgroups of the
    # size: refused by kp, not left to the driver (where such a workgroup is
    # otherwise allowed: lavapipe 32 x 8 < 1024; RADV reports no limit)
    too_many = info.max_compute_workgroup_subgroups * lo + lo
    if too_many <= min(info.max_workgroup_invocations, info.max_workgroup_size[0]):
        with pytest.raises(ValueError, match="maxComputeWorkgroupSubgroups"):
            run(manager, spirv, too_many, groups=1, required_subgroup_size=lo)
    plain = kp.Manager(0, [], [])  # the extension not requested: the feature is off
    assert not plain.subgroup_size_control_enabled()
    with pytest.raises(RuntimeError, match="needs the subgroupSizeControl feature, which is not enabled"):
        run(plain, spirv, 64, required_subgroup_size=lo)


def test_vkq_device_passes_a_required_size_and_checks_it(backend):
    device = backend.device
    x, xq = device.tensor(256), device.tensor(256, np.uint32)
    args = ([x, xq], QUANTIZE_Q8_1, (1, 1, 1), [QUANTIZE_WG, 1], np.zeros(3, np.uint32))
    assert device.algorithm(*args).required_subgroup_size() == 0  # the default: none, as before
    with pytest.raises(TypeError, match="required_subgroup_size must be an integer"):
        device.algorithm(*args, required_subgroup_size=8.0)
    if not device.subgroup_size_control:
        with pytest.raises(KomputeUnavailable, match="cannot require a subgroup size"):
            device.algorithm(*args, required_subgroup_size=device.info.subgroup_size)
        return
    lo, hi = device.info.subgroup_min_size, device.info.subgroup_max_size
    assert device.algorithm(*args, required_subgroup_size=lo).required_subgroup_size() == lo
    for bad in (0, 3 * lo, 2 * hi):
        with pytest.raises(ValueError, match=f"required_subgroup_size {bad} is not a power of two"):
            device.algorithm(*args, required_subgroup_size=bad)


def test_pipeline_cache_round_trips(manager, info, spirv):
    run(manager, spirv, 32)
    data = manager.pipeline_cache_data()
    assert isinstance(data, bytes) and len(data) >= HEADER.size
    header_size, version, vendor, device_id, _uuid = HEADER.unpack_from(data)
    assert (version, vendor, device_id) == (1, info.vendor_id, info.device_id) and header_size >= HEADER.size
    seeded = kp.Manager(0, [], [])
    assert seeded.load_pipeline_cache(data) is True
    seen, _ = run(seeded, spirv, 32)
    assert info.subgroup_min_size <= seen[0] <= info.subgroup_max_size and len(set(seen.tolist())) == 1
    # what the seeded cache now holds is at least what was loaded into it
    assert len(seeded.pipeline_cache_data()) >= len(data)


def test_foreign_or_garbage_cache_data_is_ignored_harmlessly(manager, spirv):
    data = manager.pipeline_cache_data()
    fresh = kp.Manager(0, [], [])
    rng = np.random.default_rng(5)
    other_device = bytearray(data)
    other_device[12] ^= 0xFF  # deviceID
    other_uuid = bytearray(data)
    other_uuid[16] ^= 0xFF  # pipelineCacheUUID
    for junk in (b"", b"\x00" * 5, data[:HEADER.size - 1], rng.bytes(4096), bytes(other_device), bytes(other_uuid)):
        assert fresh.load_pipeline_cache(junk) is False
    # this device's header on a garbage body reaches the driver, which
    # checks the rest; it must not crash, and the Manager still works
    fresh.load_pipeline_cache(data[:HEADER.size] + rng.bytes(3000))
    seen, _ = run(fresh, spirv, 32)
    assert len(set(seen.tolist())) == 1 and seen[0] > 0
    with pytest.raises(TypeError):
        fresh.load_pipeline_cache("not bytes")
