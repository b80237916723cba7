"""Every pipeline is held to the device's workgroup and shared-memory limits
before the driver sees it (vkq.device.runtime.Device.check_launch, called by
Device.algorithm): a shared-memory size past the limit crashed RADV inside
vkCreateComputePipelines, a 2,048-invocation workgroup was taken silently.
What a pipeline needs is read from its SPIR-V with its specialization
constants (vkq.device.spirv_needs), and agrees with the dispatcher's own
counts, which it uses to choose launches that fit.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vkq.device.runtime import _spirv
from vkq.device.shader_variants import MatMulVariant, MatVecVariant
from vkq.device.spirv_needs import pipeline_needs
from vkq.dispatch.choose import shared_memory_bytes
from vkq.dispatch.config import PipelineConfig
from vkq.dispatch.tiles import TileConfig
from vkq.errors import LaunchExceedsDevice, VkqError
from vkq.llama.vector_ops import RMSNorm, Vectors
from vkq.ops import matmul_spec, matmul_variant, matvec_spec, matvec_variant


@pytest.mark.parametrize("wg, rows, ncols", [(32, 2, 8), (64, 4, 5), (8, 16, 1), (256, 1, 3)])
def test_matvec_needs_agree_with_the_dispatcher(wg, rows, ncols):
    for path in ("dmmv", "mmvq"):
        cfg = PipelineConfig(path, False, True, wg, rows)
        needs = pipeline_needs(_spirv(matvec_variant("Q4_K", cfg, False)), matvec_spec(cfg, ncols))
        assert needs.workgroup == (wg, 1, 1)
        assert needs.shared_bytes == shared_memory_bytes(cfg, ncols)


@pytest.mark.parametrize("cfg", [TileConfig(16, 8, 2, 2, 4, shared_tiles=True, binding="storage"),
                                 TileConfig(64, 64, 2, 4, 8, shared_tiles=True, binding="storage"),
                                 TileConfig(16, 8, 2, 2, 4, "mmvq", shared_tiles=True, binding="storage"),
                                 TileConfig(64, 64, 1, 32, 32, coopmat_subgroup=32),
                                 TileConfig(64, 64, 2, 32, 32, "mmvq", coopmat_subgroup=32),
                                 TileConfig(64, 64, 2, 32, 32, "mmvq", coopmat_subgroup=32, fragment=(16, 16, 32),
                                            padded_halves=True)],
                         ids=["float", "float-64", "int8", "coopmat", "coopmat-int8", "coopmat-int8-padded"])
def test_matmul_needs_agree_with_the_dispatcher(cfg):
    needs = pipeline_needs(_spirv(matmul_variant("Q4_0", cfg, False)), matmul_spec(cfg))
    assert needs.invocations == cfg.wg_size
    assert needs.shared_bytes == cfg.shared_memory_bytes


def test_a_tile_past_shared_memory_is_refused(backend):
    """A mat-mat tile whose shared memory passes the device's: vkq's error,
    naming the pipeline, what it needs and the limit; nothing reaches Kompute
    (no tensors given: it would fail otherwise)."""
    limit = backend.device.info.max_compute_shared_memory_size
    cfg = TileConfig(256, 256, 8, 8, 8, shared_tiles=True, binding="storage")
    variant = matmul_variant("F32", cfg, False)
    need = pipeline_needs(_spirv(variant), matmul_spec(cfg)).shared_bytes
    assert need > limit
    with pytest.raises(LaunchExceedsDevice, match=rf"pipeline {variant.name} .* needs {need} bytes of shared "
                                                  rf"memory per workgroup, where the device allows {limit}"):
        backend.device.algorithm([], variant, (1, 1, 1), matmul_spec(cfg), [])


def test_a_workgroup_past_the_limit_is_refused(backend):
    most = backend.device.info.max_workgroup_invocations
    cfg = PipelineConfig("dmmv", False, True, 1024, 1)
    spec = matvec_spec(cfg, 1)
    spec[0] = 2 * most  # (a launch no config allows: the guard, not param_problems, refuses it)
    variant = MatVecVariant("Q4_0", False, False, True, False)
    with pytest.raises(LaunchExceedsDevice, match=rf"pipeline {variant.name} .* needs a workgroup of {2 * most} "
                                                  rf"invocations .* where the device allows {most}"):
        backend.device.algorithm([], variant, (1, 1, 1), spec, [])
    assert issubclass(LaunchExceedsDevice, VkqError) and issubclass(LaunchExceedsDevice, ValueError)


def test_a_llama_op_past_a_smaller_device_is_refused(backend, monkeypatch):
    """The vector ops' launches pass the same check: on a device that
    offered less shared memory than RMSNorm's reduction declares."""
    x, w, y = (backend.tensor(64) for _ in range(3))
    monkeypatch.setattr(backend.device, "info", replace(backend.device.info, max_compute_shared_memory_size=4))
    with pytest.raises(LaunchExceedsDevice, match=r"pipeline rms_norm.* bytes of shared memory per workgroup, "
                                                  r"where the device allows 4"):
        RMSNorm(backend.device, Vectors(x, 64), w, Vectors(y, 64), 1e-5)
    monkeypatch.undo()
    RMSNorm(backend.device, Vectors(x, 64), w, Vectors(y, 64), 1e-5)  # (fits the device as it is)


def test_every_launch_of_a_matvec_call_is_checked(backend):
    """Backend calls go through the same check: a mat-vec at the device's own
    launch passes it (the check refuses nothing that fits)."""
    x = np.ones(256, np.float32)
    w = backend.upload("F32", (3, 256), np.ones((3, 256), np.float32).view(np.uint8))
    assert np.array_equal(backend.matvec(w, x), np.full(3, 256.0, np.float32))
