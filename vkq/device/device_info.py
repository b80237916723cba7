"""What a Vulkan device reports about itself, as one plain record.

Backends choose code paths from a `DeviceInfo` (vendor, driver, subgroup
size, extensions, limits), never from hard-wired knowledge of one machine.
`DeviceInfo.to_dict` / `from_dict` round-trip through JSON, so tests can
replay descriptors recorded on real GPUs without having those GPUs.

The query uses the `vulkan` package (cffi bindings) on an instance of its own,
created the way Kompute creates its instance (Vulkan 1.1, no extensions, no
layers requested), so `index` here is the index `kp.Manager(index)` takes.
Like Kompute, it does not request VK_KHR_portability_enumeration, so
portability-only drivers (MoltenVK behind a recent loader) are listed by
neither.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import os
import re
from dataclasses import dataclass

from ..errors import VULKAN_HINT, DeviceNotFound, VulkanUnavailable


# Kompute creates its instance at Vulkan 1.1 (KOMPUTE_VK_API_VERSION).
_INSTANCE_API = (1, 1, 0)

_VENDORS = {
    0x10DE: "nvidia",
    0x1002: "amd",
    0x8086: "intel",
    0x106B: "apple",
    0x5143: "qualcomm",
    0x13B5: "arm",
    0x10005: "mesa",  # Khronos vendor ID used by lavapipe
    0x1AE0: "google",  # SwiftShader
    0x1010: "imgtec",
}

# VK_SHADER_STAGE_COMPUTE_BIT
_SHADER_STAGE_COMPUTE = 0x20

# VkPhysicalDeviceType 0..4
_DEVICE_TYPES = ("other", "integrated", "discrete", "virtual", "cpu")


@dataclass(frozen=True)
class DeviceInfo:
    index: int  # physical device index, same order as kp.Manager(index)
    name: str
    vendor_id: int
    device_id: int
    device_type: str  # "discrete", "integrated", "virtual", "cpu", "other"
    api_version: str  # e.g. "1.3.230"
    driver_version: int  # raw, vendor-specific encoding
    driver_id: int | None  # VkDriverId
    driver_name: str | None
    driver_info: str | None
    subgroup_size: int
    subgroup_min_size: int | None
    subgroup_max_size: int | None
    subgroup_arithmetic: bool  # arithmetic subgroup ops in compute shaders
    max_storage_buffer_range: int
    max_workgroup_invocations: int
    max_workgroup_size: tuple[int, int, int]
    max_workgroup_count: tuple[int, int, int]
    max_push_constants_size: int
    max_compute_shared_memory_size: int
    timestamp_period: float  # ns per tick
    timestamps_supported: bool
    extensions: frozenset[str]
    integer_dot_product: bool  # extension present and feature supported
    integer_dot_4x8_packed_accelerated: bool
    device_local_memory: int  # bytes, largest DEVICE_LOCAL heap
    max_texel_buffer_elements: int
    max_memory_allocation_size: int = 0  # bytes, one allocation (Vulkan 1.1); 0: not reported
    # Compute units: NVIDIA's SMs (VK_NV_shader_sm_builtins), AMD's CUs
    # (VK_AMD_shader_core_properties); 0: not reported (Intel, CPU drivers).
    compute_units: int = 0
    # The cooperative-matrix shapes the device lists
    # (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR), each (M, N, K,
    # A type, B type, C type, result type, scope), types as COMPONENT_TYPES
    # names, scope "subgroup" or "workgroup"...; the saturating ones left out
    # (vkq asks for none). Empty: none listed, or not queried (a descriptor
    # recorded before the query).
    coopmat_shapes: tuple = ()
    shader_int8: bool = False  # the shaderInt8 feature (int8 values in shaders)
    # VK_EXT_subgroup_size_control (the extension, as Kompute's 1.1 instance
    # reaches it): whether a pipeline may be given a required subgroup size
    # (the subgroupSizeControl feature) and be made to launch full subgroups
    # (computeFullSubgroups), and in which shader stages a size may be
    # required (requiredSubgroupSizeStages, VkShaderStageFlags bits; 0: none).
    subgroup_size_control: bool = False
    compute_full_subgroups: bool = False
    required_subgroup_size_stages: int = 0
    max_compute_workgroup_subgroups: int = 0  # subgroups of a workgroup with a required size (0: not reported)

    @property
    def required_subgroup_size_in_compute(self) -> bool:
        """A compute pipeline may be given a required subgroup size in
        [subgroup_min_size, subgroup_max_size]."""
        return self.subgroup_size_control and bool(self.required_subgroup_size_stages & _SHADER_STAGE_COMPUTE)

    @property
    def vendor(self) -> str:
        return _VENDORS.get(self.vendor_id, "unknown")

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["max_workgroup_size"] = list(self.max_workgroup_size)
        d["max_workgroup_count"] = list(self.max_workgroup_count)
        d["extensions"] = sorted(self.extensions)
        d["coopmat_shapes"] = [list(shape) for shape in self.coopmat_shapes]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DeviceInfo:
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = required - d.keys()
        if missing:
            raise ValueError(f"device descriptor lacks {sorted(missing)}")
        # Keys that are not fields (e.g. notes in a recorded file) are ignored.
        kw = {k: d[k] for k in names & d.keys()}
        kw["max_workgroup_size"] = tuple(kw["max_workgroup_size"])
        kw["max_workgroup_count"] = tuple(kw["max_workgroup_count"])
        kw["extensions"] = frozenset(kw["extensions"])
        kw["timestamp_period"] = float(kw["timestamp_period"])
        kw["coopmat_shapes"] = tuple(tuple(shape) for shape in kw.get("coopmat_shapes", ()))
        return cls(**kw)


def file_stem(info: DeviceInfo) -> str:
    """The name of the files vkq keeps for a device and driver (its tuning,
    its pipeline cache): vendor, device, name and driver version, so that a
    driver update starts them afresh."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", info.name).strip("-").lower()[:60]
    return f"{info.vendor_id:04x}-{info.device_id:04x}-{slug}-drv{info.driver_version}"


def enumerate_devices() -> list[DeviceInfo]:
    """All Vulkan physical devices, in the order kp.Manager indexes them.

    Queried once per process. Raises VulkanUnavailable if there is no
    Vulkan loader, driver or device.
    """
    return list(_enumerate_cached())


def device_index_from_env(device: int | None) -> int:
    """The device index a caller asked for, else VKQ_DEVICE, else 0. An
    index must be an integer: int() would make 1.5 or True device 1."""
    if device is not None:
        if isinstance(device, bool) or not isinstance(device, numbers.Integral):
            raise TypeError(f"device must be an integer index (0, 1, ...) or None, got {device!r}")
        return int(device)
    value = os.environ.get("VKQ_DEVICE", "").strip()
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"VKQ_DEVICE={value!r} is not a device index (0, 1, ...)") from None


def get_device_info(index: int) -> DeviceInfo:
    devices = _enumerate_cached()
    if not 0 <= index < len(devices):
        raise DeviceNotFound(
            f"no Vulkan device with index {index}: {len(devices)} device(s) "
            f"found; pick one of `vkq info`'s (--device 0..{len(devices) - 1} or VKQ_DEVICE)"
        )
    return devices[index]


@functools.lru_cache(maxsize=None)
def _enumerate_cached() -> tuple[DeviceInfo, ...]:
    try:
        import vulkan as vk  # raises OSError when libvulkan.so.1 is missing
    except ImportError as e:
        raise VulkanUnavailable(f"the Python package `vulkan` is missing ({e}); pip install vulkan") from e
    except OSError as e:
        raise VulkanUnavailable(f"cannot load the Vulkan loader ({e}); {VULKAN_HINT}") from e

    app = vk.VkApplicationInfo(
        pApplicationName="vkq",
        pEngineName="vkq",
        apiVersion=vk.VK_MAKE_VERSION(*_INSTANCE_API),
    )
    try:
        instance = vk.vkCreateInstance(
            vk.VkInstanceCreateInfo(pApplicationInfo=app), None
        )
    except (vk.VkError, vk.VkException) as e:
        raise VulkanUnavailable(
            f"cannot create a Vulkan instance ({type(e).__name__}: no usable "
            f"driver); {VULKAN_HINT}"
        ) from e
    try:
        physical = vk.vkEnumeratePhysicalDevices(instance)
        if len(physical) == 0:
            raise VulkanUnavailable(f"no Vulkan device found; {VULKAN_HINT}")
        props2 = _instance_fn(vk, instance, "vkGetPhysicalDeviceProperties2")
        feats2 = _instance_fn(vk, instance, "vkGetPhysicalDeviceFeatures2")
        return tuple(
            _query(vk, instance, i, pd, props2, feats2) for i, pd in enumerate(physical)
        )
    finally:
        vk.vkDestroyInstance(instance, None)


# VkComponentTypeKHR 0..10 by name, then the later extensions' (bfloat16:
# VK_KHR_shader_bfloat16; the 8-bit floats: VK_EXT_shader_float8; packed
# int8: VK_NV_cooperative_vector), and VkScopeKHR.
COMPONENT_TYPES = ("f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64")
MORE_COMPONENT_TYPES = {1000141000: "bf16", 1000491000: "s8packed", 1000491001: "u8packed", 1000491002: "e4m3",
                        1000491003: "e5m2"}
_SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue-family"}


def _coopmat_shapes(vk, instance, pd, exts) -> tuple:
    """The device's cooperative-matrix shapes (DeviceInfo.coopmat_shapes)."""
    if "VK_KHR_cooperative_matrix" not in exts:
        return ()
    ffi = vk.ffi
    name = "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"
    ptr = vk.lib.vkGetInstanceProcAddr(instance, name.encode())
    if ptr == ffi.NULL:
        return ()
    fn = ffi.cast(f"PFN_{name}", ptr)
    count = ffi.new("uint32_t *")
    if fn(pd, count, ffi.NULL) != vk.VK_SUCCESS or count[0] == 0:
        return ()
    props = ffi.new(f"VkCooperativeMatrixPropertiesKHR[{count[0]}]")
    for i in range(count[0]):
        props[i].sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
    if fn(pd, count, props) not in (vk.VK_SUCCESS, vk.VK_INCOMPLETE):
        return ()

    def kind(t: int) -> str:
        return COMPONENT_TYPES[t] if 0 <= t < len(COMPONENT_TYPES) else MORE_COMPONENT_TYPES.get(t, f"type{t}")

    return tuple((p.MSize, p.NSize, p.KSize, kind(p.AType), kind(p.BType), kind(p.CType), kind(p.ResultType),
                  _SCOPES.get(p.scope, f"scope{p.scope}"))
                 for p in (props[i] for i in range(count[0])) if not p.saturatingAccumulation)


def _instance_fn(vk, instance, name):
    # vk.vkGetInstanceProcAddr only wraps extension functions (it rejects
    # core 1.1 names), so look the pointer up raw and cast it ourselves.
    ptr = vk.lib.vkGetInstanceProcAddr(instance, name.encode())
    if ptr == vk.ffi.NULL:
        raise VulkanUnavailable(f"the Vulkan loader lacks {name} (older than Vulkan 1.1); {VULKAN_HINT}")
    return vk.ffi.cast(f"PFN_{name}", ptr)


def _version(v: int) -> tuple[int, int, int]:
    # VK_API_VERSION_MAJOR/MINOR/PATCH (top 3 bits are the variant)
    return (v >> 22) & 0x7F, (v >> 12) & 0x3FF, v & 0xFFF


def _cstr(vk, chars) -> str:
    return vk.ffi.string(chars).decode("utf-8", "replace")


def _query(vk, instance, index, pd, props2, feats2) -> DeviceInfo:
    ffi = vk.ffi
    p = vk.vkGetPhysicalDeviceProperties(pd)
    limits = p.limits
    exts = frozenset(
        _cstr(vk, e._extensionName)
        for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)
    )
    device_api = _version(p.apiVersion)
    # Core features of a newer version may be used only up to
    # min(instance apiVersion, device apiVersion); beyond that, only through
    # the device's extensions.
    api = min(device_api, _INSTANCE_API)

    def new(ctype, stype):  # stype: VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_<stype>
        stype = getattr(vk, "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_" + stype)
        return ffi.new(f"{ctype}*", {"sType": stype})

    subgroup = driver = size_ctl = size_feats = dot_props = dot_feats = maint3 = sms = amd_cores = int8_feats = None
    if api >= (1, 1, 0):  # a 1.0 device may not be asked for *2 structs
        subgroup = new("VkPhysicalDeviceSubgroupProperties", "SUBGROUP_PROPERTIES")
        maint3 = new("VkPhysicalDeviceMaintenance3Properties", "MAINTENANCE_3_PROPERTIES")
        if api >= (1, 2, 0) or "VK_KHR_driver_properties" in exts:
            driver = new("VkPhysicalDeviceDriverProperties", "DRIVER_PROPERTIES")
        if api >= (1, 3, 0) or "VK_EXT_subgroup_size_control" in exts:
            size_ctl = new(
                "VkPhysicalDeviceSubgroupSizeControlProperties",
                "SUBGROUP_SIZE_CONTROL_PROPERTIES")
        if "VK_EXT_subgroup_size_control" in exts:
            size_feats = new(
                "VkPhysicalDeviceSubgroupSizeControlFeatures",
                "SUBGROUP_SIZE_CONTROL_FEATURES")
        if "VK_KHR_shader_integer_dot_product" in exts:
            dot_props = new(
                "VkPhysicalDeviceShaderIntegerDotProductProperties",
                "SHADER_INTEGER_DOT_PRODUCT_PROPERTIES")
            dot_feats = new(
                "VkPhysicalDeviceShaderIntegerDotProductFeatures",
                "SHADER_INTEGER_DOT_PRODUCT_FEATURES")
        if "VK_NV_shader_sm_builtins" in exts:
            sms = new("VkPhysicalDeviceShaderSMBuiltinsPropertiesNV", "SHADER_SM_BUILTINS_PROPERTIES_NV")
        if "VK_AMD_shader_core_properties" in exts:
            amd_cores = new("VkPhysicalDeviceShaderCorePropertiesAMD", "SHADER_CORE_PROPERTIES_AMD")
        # The local names keep every struct of the chain alive until the
        # calls return: cffi frees an ffi.new() object with its last
        # Python reference, and a pNext pointer is not a reference.
        head = new("VkPhysicalDeviceProperties2", "PROPERTIES_2")
        _link(ffi, head, [subgroup, driver, size_ctl, dot_props, maint3, sms, amd_cores])
        props2(pd, head)
        if api >= (1, 2, 0) or "VK_KHR_shader_float16_int8" in exts:
            int8_feats = new("VkPhysicalDeviceShaderFloat16Int8Features", "SHADER_FLOAT16_INT8_FEATURES")
        if dot_feats is not None or size_feats is not None or int8_feats is not None:
            fhead = new("VkPhysicalDeviceFeatures2", "FEATURES_2")
            _link(ffi, fhead, [dot_feats, size_feats, int8_feats])
            feats2(pd, fhead)

    # Kompute uses the first queue family with the compute bit.
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
    compute = next(
        (f for f in families if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT), None
    )
    mem = vk.vkGetPhysicalDeviceMemoryProperties(pd)
    heaps = [mem.memoryHeaps[i] for i in range(mem.memoryHeapCount)]

    return DeviceInfo(
        index=index,
        name=_cstr(vk, p._deviceName),
        vendor_id=p.vendorID,
        device_id=p.deviceID,
        device_type=(_DEVICE_TYPES[p.deviceType]
                     if 0 <= p.deviceType < len(_DEVICE_TYPES) else "other"),
        api_version="%d.%d.%d" % device_api,
        driver_version=p.driverVersion,
        driver_id=driver.driverID if driver else None,
        driver_name=_cstr(vk, driver.driverName) if driver else None,
        driver_info=_cstr(vk, driver.driverInfo) if driver else None,
        # Without subgroup properties (Vulkan 1.0), assume no subgroup ops.
        subgroup_size=subgroup.subgroupSize if subgroup else 1,
        subgroup_min_size=size_ctl.minSubgroupSize if size_ctl else None,
        subgroup_max_size=size_ctl.maxSubgroupSize if size_ctl else None,
        subgroup_arithmetic=bool(
            subgroup
            and subgroup.supportedOperations & vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
            and subgroup.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
        ),
        max_storage_buffer_range=limits.maxStorageBufferRange,
        max_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
        max_workgroup_size=tuple(limits.maxComputeWorkGroupSize),
        max_workgroup_count=tuple(limits.maxComputeWorkGroupCount),
        max_push_constants_size=limits.maxPushConstantsSize,
        max_compute_shared_memory_size=limits.maxComputeSharedMemorySize,
        timestamp_period=float(limits.timestampPeriod),
        timestamps_supported=bool(
            limits.timestampComputeAndGraphics
            or (compute is not None and compute.timestampValidBits > 0)
        ),
        extensions=exts,
        integer_dot_product=bool(dot_feats and dot_feats.shaderIntegerDotProduct),
        integer_dot_4x8_packed_accelerated=bool(
            dot_props
            and dot_props.integerDotProduct4x8BitPackedSignedAccelerated
        ),
        device_local_memory=max(
            (h.size for h in heaps if h.flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT),
            default=0,
        ),
        max_texel_buffer_elements=limits.maxTexelBufferElements,
        max_memory_allocation_size=maint3.maxMemoryAllocationSize if maint3 else 0,
        compute_units=(sms.shaderSMCount if sms else
                       amd_cores.shaderEngineCount * amd_cores.shaderArraysPerEngineCount
                       * amd_cores.computeUnitsPerShaderArray if amd_cores else 0),
        subgroup_size_control=bool(size_feats and size_feats.subgroupSizeControl),
        compute_full_subgroups=bool(size_feats and size_feats.computeFullSubgroups),
        required_subgroup_size_stages=(size_ctl.requiredSubgroupSizeStages if size_ctl else 0),
        max_compute_workgroup_subgroups=(size_ctl.maxComputeWorkgroupSubgroups if size_ctl else 0),
        coopmat_shapes=_coopmat_shapes(vk, instance, pd, exts),
        shader_int8=bool(int8_feats and int8_feats.shaderInt8),
    )


def _link(ffi, head, structs) -> None:
    """Chain the non-None structs after head through their pNext fields."""
    prev = head
    for s in structs:
        if s is not None:
            prev.pNext = ffi.cast("void *", s)
            prev = s
