"""The Vulkan device as vkq uses it: a Kompute manager plus what it can do.

Kompute (`kp`) is built by tools/install_kompute.sh with vkq's patch series
(tools/kompute/*.patch), which adds what stock kp 0.9 lacks: the shaderIntegerDotProduct feature is
enabled when the int-dot extension is requested, `kp.OpGlobalMemoryBarrier`
orders a dispatch after the one whose output it reads,
`Manager.algorithm_with_bindings` binds tensors as uniform texel buffer
views, not only as storage buffers, and `Tensor.release_staging` frees an
uploaded tensor's host copy; pipelines are shared between algorithms and
a sequence keeps one fence; the cooperative-matrix features are enabled
when their extensions are requested (Manager.cooperative_matrix_enabled), and so is
subgroupSizeControl with VK_EXT_subgroup_size_control
(Manager.subgroup_size_control_enabled), so that an algorithm may be given a
required subgroup size (`required_subgroup_size` of Manager.algorithm and
Manager.algorithm_with_bindings; Device.algorithm below), and shaderInt8 with the
cooperative-matrix features where the device has it (Manager.shader_int8_enabled:
the int8 cooperative-matrix flavour). A kp without the first CORE_KP_PATCH
patches (stock, or an older level) still runs what needs none of these: the
int8 path and texel bindings are refused with a clear error, uploaded
weights keep their host copy. A kp with them but short of the whole series
lacks only what the later patches add, each looked up by name where vkq
asks kp for it and said where it is missing (`vkq info`'s coop matrix line).

Pipeline cache (patch 0013): every pipeline of a Manager is created through
the Manager's one VkPipelineCache. `Device.manager.pipeline_cache_data()`
returns its contents as bytes; `Device.manager.load_pipeline_cache(data)`
merges bytes saved earlier into it and returns True, or returns False and
ignores them when their header is not this device's and driver's (vendor,
device, pipelineCacheUUID) or they are not a pipeline cache at all. Load
before the algorithms that are to use it are created. vkq.Backend keeps it
across runs (vkq/device/pipeline_cache.py).
"""
from __future__ import annotations

import functools
import numbers
import warnings

import kp
import numpy as np

from ..errors import KOMPUTE_HINT, KomputeUnavailable, LaunchExceedsDevice
from .caps import COOPMAT_EXTENSION, COOPMAT_EXTENSIONS, DeviceCaps
from .device_info import DeviceInfo, device_index_from_env, get_device_info
from .memory import MemoryLedger, buffer_limit
from .shader_variants import load_spirv
from .spirv_needs import PipelineNeeds, pipeline_needs

# The kp patch level vkq needs (kp.VKQ_PATCH_LEVEL, set by the series' last
# patch: its number, so that a kp of level N has patches 0001 to N);
# tools/install_kompute.sh reads this line to check its build.
REQUIRED_KP_PATCH = 14
# The patches every graph of vkq's needs (0001-0010: the int-dot feature, the
# barrier, texel bindings, the staging release, a fence per sequence, shared
# pipelines, the level itself). Those after it each add a feature vkq looks
# up by name (Manager.cooperative_matrix_enabled, subgroup_size_control_enabled,
# shader_int8_enabled) or that changes no result (0012: the GIL released while
# waiting), so a kp between the two levels runs without them, warned once.
CORE_KP_PATCH = 10
INT_DOT_EXTENSION = "VK_KHR_shader_integer_dot_product"
SUBGROUP_SIZE_CONTROL_EXTENSION = "VK_EXT_subgroup_size_control"

# Vulkan flag bits used for barriers between dependent dispatches.
STAGE_COMPUTE = 0x00000800
ACCESS_SHADER_READ = 0x00000020
ACCESS_SHADER_WRITE = 0x00000040


def patches(level: int) -> str:
    """'vkq's patches 0001-0009' for kp.VKQ_PATCH_LEVEL 9 ('none of vkq's patches' for 0)."""
    return f"vkq's patches 0001-{level:04d}" if level else "none of vkq's patches"


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    warnings.warn(message, stacklevel=3)


# The compiled shaders, read once per process (a cache on a Device method
# would keep every Device, its Manager and VkDevice, alive for good).
_spirv = functools.lru_cache(maxsize=None)(load_spirv)


@functools.lru_cache(maxsize=4096)
def _needs(variant, spec: tuple[int, ...]) -> PipelineNeeds:
    return pipeline_needs(_spirv(variant), spec)


class Device:
    """One logical Vulkan device, opened through Kompute."""

    def __init__(self, index: int | None = None):
        self.index = device_index_from_env(index)
        self.info: DeviceInfo = get_device_info(self.index)
        level = getattr(kp, "VKQ_PATCH_LEVEL", 0)
        self.patched_kp = level >= CORE_KP_PATCH
        if not self.patched_kp:
            warnings.warn(f"kp has {patches(level)}, vkq needs {patches(REQUIRED_KP_PATCH)}: the int8 path "
                          f"and texel bindings are refused, pipelines are not shared; {KOMPUTE_HINT}", stacklevel=2)
        elif level < REQUIRED_KP_PATCH:
            later = (f"patch {REQUIRED_KP_PATCH:04d} adds" if level + 1 == REQUIRED_KP_PATCH
                     else f"patches {level + 1:04d}-{REQUIRED_KP_PATCH:04d} add")
            _warn_once(f"kp has {patches(level)}, vkq needs {patches(REQUIRED_KP_PATCH)}: what {later} is not "
                       f"offered (vkq info says what); {KOMPUTE_HINT}")
        extensions = [INT_DOT_EXTENSION] if self.info.integer_dot_product and self.patched_kp else []
        # Cooperative matrices: only through a kp that can enable their
        # features (Manager.cooperative_matrix_enabled); None: it cannot.
        can_coopmat = hasattr(kp.Manager, "cooperative_matrix_enabled")
        want_coopmat = can_coopmat and COOPMAT_EXTENSION in self.info.extensions
        if want_coopmat:
            extensions += [e for e in COOPMAT_EXTENSIONS if e in self.info.extensions]
        # Required subgroup sizes: only through a kp that enables the feature
        # (Manager.subgroup_size_control_enabled).
        if (hasattr(kp.Manager, "subgroup_size_control_enabled")
                and SUBGROUP_SIZE_CONTROL_EXTENSION in self.info.extensions):
            extensions.append(SUBGROUP_SIZE_CONTROL_EXTENSION)
        self.manager = kp.Manager(self.index, [], extensions)
        self.int_dot_enabled = INT_DOT_EXTENSION in extensions and self.manager.integer_dot_product_enabled()
        self.coopmat_enabled = (self.manager.cooperative_matrix_enabled() if want_coopmat
                                else False if can_coopmat else None)
        # shaderInt8, the int8 fragments' (enabled with the cooperative-matrix
        # features where the device has it; None: this kp build cannot say).
        can_int8 = hasattr(kp.Manager, "shader_int8_enabled")
        self.int8_enabled = (self.manager.shader_int8_enabled() if can_int8 and self.coopmat_enabled
                             else False if can_int8 else None)
        # Whether Device.algorithm may be given a required_subgroup_size.
        self.subgroup_size_control = bool(
            SUBGROUP_SIZE_CONTROL_EXTENSION in extensions and self.manager.subgroup_size_control_enabled()
            and self.info.required_subgroup_size_in_compute)
        self.memory = MemoryLedger(self.info)

    @functools.cached_property
    def caps(self) -> DeviceCaps:
        return DeviceCaps.of(self.info, self.int_dot_enabled, self.coopmat_enabled, self.int8_enabled)

    @property
    def max_buffer_bytes(self) -> int:
        return buffer_limit(self.info)[0]

    # -- resources -------------------------------------------------------
    @property
    def unified_memory(self) -> bool:
        """A CPU driver (lavapipe): "device" memory is host memory anyway.
        (Tests set it False to take a GPU's upload path on lavapipe.)"""
        return self.info.device_type == "cpu"

    def upload(self, array: np.ndarray):
        """A tensor holding `array` (uint32/int32/float32) for shaders to read;
        its values cannot be read back from the host.

        On a GPU: device-local memory, filled through a host-visible staging
        copy that is freed once the data is on the device, so weights take
        host memory only while they upload, one tensor at a time. On a CPU
        driver: one host-visible buffer and no copy at all."""
        array = np.ascontiguousarray(array)
        if self.unified_memory:
            return self.manager.tensor_t(array, kp.TensorTypes.host)
        tensor = self.manager.tensor_t(array)
        self.manager.sequence().eval(kp.OpTensorSyncDevice([tensor]))
        if self.patched_kp:
            tensor.release_staging()
        return tensor

    def tensor(self, n: int, dtype=np.float32):
        """A device tensor of n zero elements (not yet synced)."""
        return self.manager.tensor_t(np.zeros(max(n, 1), dtype))

    def algorithm(self, tensors, variant, groups: tuple[int, int, int], spec: list[int], push: np.ndarray,
                  binding_kinds: list[str] | None = None, required_subgroup_size: int | None = None):
        """A Kompute algorithm; tensor i is binding i, bound as binding_kinds[i]
        ("storage" when not given; "texel_u32", "texel_u32x2", "texel_u32x4"
        need vkq's Kompute patch). required_subgroup_size: None (the driver
        picks, as always) or the subgroup size the pipeline must run with, a
        power of two in [info.subgroup_min_size, info.subgroup_max_size] on a
        device with `subgroup_size_control`; where the shader's local x size
        is a multiple of it, its subgroups are also full."""
        self.check_launch(variant, spec)
        spec, push = np.asarray(spec, np.uint32), np.asarray(push, np.uint32)
        extra = {}
        if required_subgroup_size is not None:
            self.check_required_subgroup_size(required_subgroup_size)
            extra["required_subgroup_size"] = int(required_subgroup_size)
        if binding_kinds and any(k != "storage" for k in binding_kinds):
            if not self.patched_kp:
                raise KomputeUnavailable(f"texel bindings need kp with {patches(REQUIRED_KP_PATCH)}; {KOMPUTE_HINT}")
            return self.manager.algorithm_with_bindings(tensors, binding_kinds, _spirv(variant), groups, spec, push,
                                                        **extra)
        return self.manager.algorithm(tensors, _spirv(variant), groups, spec, push, **extra)

    def check_launch(self, variant, spec) -> PipelineNeeds:
        """What the pipeline of `variant` with specialization constants `spec`
        needs (read from its SPIR-V), or LaunchExceedsDevice where its
        workgroup or shared memory passes this device's limits. Every
        pipeline vkq creates passes here first (Device.algorithm): whatever
        chose its launch (the dispatcher's tables, a tile, a llama op's
        launch, a caller's config), the driver never sees one past them."""
        needs = _needs(variant, tuple(int(v) for v in spec))
        info, problems = self.info, []
        if needs.invocations > info.max_workgroup_invocations or any(
                n > m for n, m in zip(needs.workgroup, info.max_workgroup_size)):
            problems.append(f"a workgroup of {needs.invocations} invocations "
                            f"({' x '.join(map(str, needs.workgroup))}), where the device allows "
                            f"{info.max_workgroup_invocations} ({' x '.join(map(str, info.max_workgroup_size))} "
                            f"at most per dimension)")
        if needs.shared_bytes > info.max_compute_shared_memory_size:
            problems.append(f"{needs.shared_bytes} bytes of shared memory per workgroup, where the device allows "
                            f"{info.max_compute_shared_memory_size}")
        if problems:
            raise LaunchExceedsDevice(f"pipeline {variant.name} (specialization constants {list(spec)}) needs "
                                      f"{' and '.join(problems)} on {info.name}")
        return needs

    def check_required_subgroup_size(self, size) -> None:
        """Raises unless `size` may be required of a compute pipeline here:
        TypeError for a non-integer, KomputeUnavailable where the device (or
        this kp) cannot require one, ValueError outside the device's range or
        not a power of two."""
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise TypeError(f"required_subgroup_size must be an integer or None, got {size!r}")
        if not self.subgroup_size_control:
            raise KomputeUnavailable(
                f"{self.info.name} cannot require a subgroup size of a compute pipeline here "
                f"(needs VK_EXT_subgroup_size_control with the subgroupSizeControl feature, compute among "
                f"requiredSubgroupSizeStages, and kp with {patches(REQUIRED_KP_PATCH)})")
        lo, hi = self.info.subgroup_min_size, self.info.subgroup_max_size
        if not (lo <= size <= hi) or size & (size - 1):
            raise ValueError(f"required_subgroup_size {size} is not a power of two in {self.info.name}'s "
                             f"range [{lo}, {hi}]")

    def compute_barrier(self):
        """Orders a dispatch after the previous one whose output it reads."""
        if not self.patched_kp:
            raise KomputeUnavailable(
                f"this kp build has no OpGlobalMemoryBarrier (kp with {patches(REQUIRED_KP_PATCH)}); "
                f"{KOMPUTE_HINT}"
            )
        return kp.OpGlobalMemoryBarrier(
            STAGE_COMPUTE, STAGE_COMPUTE, ACCESS_SHADER_WRITE, ACCESS_SHADER_READ | ACCESS_SHADER_WRITE
        )
