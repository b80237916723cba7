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
# int8 values, the Vulkan memory model), which Kompute's Vulkan 1.1 instance
# asks for by name.
COOPMAT_EXTENSION = "VK_KHR_cooperative_matrix"
COOPMAT_EXTENSIONS = (COOPMAT_EXTENSION, "VK_KHR_vulkan_memory_model", "VK_KHR_shader_float16_int8")
# The kernel's two flavours, by the fragment types (A, B, C, result) each
# needs the device to list (DeviceInfo.coopmat_shapes), at subgroup scope:
# the float one multiplies float16 tiles into float32 sums; the int8 one the
# int8 path's quants (weights and Q8_1 activations) into int32 sums, its
# scales applied per 16 of K (the unit a block scale covers).
COOPMAT_TYPES = {"float16": ("f16", "f16", "f32", "f32"), "int8": ("s8", "s8", "s32", "s32")}
COOPMAT_FLAVOURS = tuple(COOPMAT_TYPES)
# The fragment shapes the kernel takes: M and N dividing its 32 x 32 blocks
# per subgroup (tiles.COOPMAT_CANDIDATES), K a multiple of 4 values (the
# tiles' rows are read in 16-byte or 4-byte units) dividing a 32-value chunk.
# The int8 flavour's scales change every 16 values (INT8_HALF): a K dividing
# 16 sums each half alone; a K of 32 (the int8 shapes NVIDIA lists) sums each
# half through the padded layout (int8_padded), at twice the products.
COOPMAT_K_UNIT = {"float16": 32, "int8": 32}
INT8_HALF = 16
COOPMAT_MN = (8, 16, 32)


def int8_padded(k: int) -> bool:
    """Whether the int8 flavour takes fragments of depth k through the padded
    layout (shaders/mul_mm.comp's PADDED_HALVES): where k does not divide a
    half chunk."""
    return INT8_HALF % k != 0


def coopmat_shape_label(shape) -> str:
    """One listed shape in a few words: (8, 8, 8, "f16", "f16", "f32", "f32", "subgroup") -> "8x8x8 f16*f16+f32"."""
    m, n, k, a, b, c, result, scope = shape
    return (f"{m}x{n}x{k} {a}*{b}" + (f"+{c}" if c == result else f"+{c}->{result}")
            + ("" if scope == "subgroup" else f" ({scope})"))


def coopmat_fragment(info: DeviceInfo, flavour: str) -> tuple[int, int, int] | None:
    """The fragment shape (M, N, K) the kernel's `flavour` takes on this
    device: of the shapes the device lists for its types at subgroup scope,
    those the kernel takes (COOPMAT_MN, COOPMAT_K_UNIT), the largest M x N x K
    (the fewest instructions per product), the first listed among equals;
    None where there is none. For int8, a shape of the plain layout (K
    dividing 16) wherever one is listed: the padded layout's K of 32 spends
    half its products on zeros, so 16x16x32 does the useful work of a
    16x16x16 in twice its multiply-adds (a matrix unit's rate counts every
    multiply-add, zeros included), and loads twice the fragment data."""
    unit = COOPMAT_K_UNIT[flavour]
    fits = [tuple(s[:3]) for s in info.coopmat_shapes
            if tuple(s[3:7]) == COOPMAT_TYPES[flavour] and s[7] == "subgroup"
            and s[0] in COOPMAT_MN and s[1] in COOPMAT_MN and s[2] % 4 == 0 and unit % s[2] == 0]
    padded = flavour == "int8"
    return max(fits, key=lambda mnk: (not (padded and int8_padded(mnk[2])), mnk[0] * mnk[1] * mnk[2]), default=None)


def coopmat_missing(info: DeviceInfo, enabled: bool | None, flavour: str = "float16",
                    int8_enabled: bool | None = None) -> str | None:
    """Why the cooperative-matrix kernel's `flavour` cannot run on this
    device, or None if it can; enabled: whether the logical device enabled
    the cooperative-matrix features (None: the Kompute build cannot);
    int8_enabled: the same for shaderInt8 (the int8 flavour's)."""
    if COOPMAT_EXTENSION not in info.extensions:
        return f"device lacks {COOPMAT_EXTENSION}"
    if coopmat_fragment(info, flavour) is None:
        a, b, c, _ = COOPMAT_TYPES[flavour]
        listed = ", ".join(coopmat_shape_label(s) for s in info.coopmat_shapes) or "none"
        return (f"the device lists no {a}*{b}+{c} subgroup shape the kernel takes (M and N of "
                f"{'/'.join(map(str, COOPMAT_MN))}, K a multiple of 4 dividing {COOPMAT_K_UNIT[flavour]}; "
                f"listed: {listed})")
    if enabled is None:
        return "this kp build cannot enable the cooperativeMatrix, vulkanMemoryModel and shaderFloat16 features"
    if not enabled:
        return "the device did not enable cooperativeMatrix, vulkanMemoryModel and shaderFloat16"
    if flavour == "int8" and int8_enabled is None:
        return "this kp build cannot enable the shaderInt8 feature (int8 fragments)"
    if flavour == "int8" and not int8_enabled:
        return "the device did not enable shaderInt8 (int8 fragments)"
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
    # Why the cooperative-matrix kernel's float flavour cannot run here
    # (coopmat_missing); None: it can, on fragments of coopmat_fragment.
    coopmat_missing: str | None = "not queried"
    coopmat_fragment: tuple[int, int, int] = (16, 16, 16)
    # The same for its int8 flavour.
    coopmat_int8_missing: str | None = "not queried"
    coopmat_int8_fragment: tuple[int, int, int] = (16, 16, 16)

    @property
    def coopmat(self) -> bool:
        return self.coopmat_missing is None

    @property
    def coopmat_int8(self) -> bool:
        return self.coopmat_int8_missing is None

    @classmethod
    def of(cls, info: DeviceInfo, int_dot: bool, coopmat: bool | None = None,
           int8: bool | None = None) -> "DeviceCaps":
        """A device's caps from its report; int_dot: whether the logical
        device enabled the int-dot feature (the report says only whether
        the physical device has it); coopmat: whether it enabled the
        cooperative-matrix features, int8 the shaderInt8 feature (None: the
        kp build cannot)."""
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
            coopmat_fragment=coopmat_fragment(info, "float16") or (16, 16, 16),
            coopmat_int8_missing=coopmat_missing(info, coopmat, "int8", int8),
            coopmat_int8_fragment=coopmat_fragment(info, "int8") or (16, 16, 16),
        )
