"""What a device can do, as the dispatcher needs to know it: `DeviceCaps`,
from the device's own report (vkq.device.device_info) and one limit Vulkan
does not report, lavapipe's loop budget."""
from __future__ import annotations

from dataclasses import dataclass

from .device_info import DeviceInfo

DRIVER_LLVMPIPE = 13  # VkDriverId VK_DRIVER_ID_MESA_LLVMPIPE

# Mesa's llvmpipe (lavapipe) ends every loop of a shader invocation once the
# invocation has taken 65535 loop iterations in all (gallivm's
# LP_MAX_TGSI_LOOP_ITERATIONS, "shared between every loop in a shader"; it
# guards against infinite loops). The loops are cut without an error: the
# partial sums so far, and later loops (the reduction, the writes of y) run
# at most once. That is why rows_per_wg 976 with split_k false gave NMSE 0.96
# (int8) and 2.6e65 (dequantize) on 4096 x 4096: one thread's rows x K/32
# iterations passed the budget. Vulkan reports no such limit.
LAVAPIPE_LOOP_ITERATIONS = 65535


# Cooperative matrices (shaders/mul_mm.comp's COOPMAT): the extension, and
# the extensions of the features its SPIR-V needs besides (float16 values,
# the Vulkan memory model), which Kompute's Vulkan 1.1 instance asks for by
# name. Kompute gives no way to call vkGetPhysicalDeviceCooperative-
# MatrixPropertiesKHR, so the kernel's one shape, 16x16x16 float16 with
# float32 sums, is assumed from the vendors' documentation where they list
# it (NVIDIA's tensor cores; AMD RDNA3's WMMA), never elsewhere.
COOPMAT_EXTENSION = "VK_KHR_cooperative_matrix"
COOPMAT_EXTENSIONS = (COOPMAT_EXTENSION, "VK_KHR_vulkan_memory_model", "VK_KHR_shader_float16_int8")
COOPMAT_VENDORS = ("nvidia", "amd")


def coopmat_missing(info: DeviceInfo, enabled: bool | None) -> str | None:
    """Why the cooperative-matrix kernel cannot run on this device, or None
    if it can; enabled: whether the logical device enabled the features
    (None: the Kompute build cannot enable them)."""
    if COOPMAT_EXTENSION not in info.extensions:
        return f"device lacks {COOPMAT_EXTENSION}"
    if info.vendor not in COOPMAT_VENDORS:
        return (f"its shape list cannot be queried through Kompute, and 16x16x16 float16 is documented only for "
                f"{' and '.join(COOPMAT_VENDORS)}, not {info.vendor}")
    if enabled is None:
        return "this kp build cannot enable the cooperativeMatrix, vulkanMemoryModel and shaderFloat16 features"
    if not enabled:
        return "the device did not enable cooperativeMatrix, vulkanMemoryModel and shaderFloat16"
    return None


def is_lavapipe(info: DeviceInfo) -> bool:
    """Mesa's lavapipe (llvmpipe): by its VkDriverId, or, from a driver that
    reports none, by Mesa's vendor ID or the device name."""
    return info.driver_id == DRIVER_LLVMPIPE or info.vendor == "mesa" or info.name.startswith("llvmpipe")


def loop_iteration_limit(info: DeviceInfo) -> int | None:
    """Loop iterations one invocation may take on this device (None: no limit known)."""
    return LAVAPIPE_LOOP_ITERATIONS if is_lavapipe(info) else None


@dataclass(frozen=True)
class DeviceCaps:
    """What the dispatcher needs to know of a device (vkq.dispatch.choose)."""

    vendor: str
    device_type: str
    subgroup_size: int
    subgroup_arithmetic: bool
    int_dot: bool  # shaderIntegerDotProduct is enabled on the logical device
    max_shared_memory: int
    max_workgroup_invocations: int
    max_texel_buffer_elements: int = 65536  # Vulkan's guaranteed minimum unless the device reports more
    max_workgroup_size_x: int = 1024  # maxComputeWorkGroupSize[0] (Vulkan guarantees 128)
    max_loop_iterations: int | None = None  # see LAVAPIPE_LOOP_ITERATIONS
    # Compute units (NVIDIA's SMs): None where the device reports none
    # (vkq.llama.vector_ops sizes the attention's splits from it or a proxy).
    compute_units: int | None = None
    # Why cooperative matrices cannot run here (coopmat_missing); None: they can.
    coopmat_missing: str | None = "not queried"

    @property
    def coopmat(self) -> bool:
        return self.coopmat_missing is None

    @classmethod
    def of(cls, info: DeviceInfo, int_dot: bool, coopmat: bool | None = None) -> "DeviceCaps":
        """A device's caps from its report; int_dot: whether the logical
        device enabled the int-dot feature (the report says only whether
        the physical device has it); coopmat: whether it enabled the
        cooperative-matrix features (None: the kp build cannot)."""
        return cls(
            vendor=info.vendor,
            device_type=info.device_type,
            subgroup_size=info.subgroup_size,
            subgroup_arithmetic=info.subgroup_arithmetic,
            int_dot=int_dot,
            max_shared_memory=info.max_compute_shared_memory_size,
            max_workgroup_invocations=info.max_workgroup_invocations,
            max_texel_buffer_elements=info.max_texel_buffer_elements,
            max_workgroup_size_x=info.max_workgroup_size[0],
            max_loop_iterations=loop_iteration_limit(info),
            compute_units=info.compute_units or None,
            coopmat_missing=coopmat_missing(info, coopmat),
        )
