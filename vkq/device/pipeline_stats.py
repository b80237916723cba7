"""What a device's shader compiler makes of vkq's pipelines: each compute
pipeline built as vkq builds it (the same SPIR-V, specialization constants,
bindings and push constants as `vkq.device.runtime.Device.algorithm`
gives Kompute), and the driver's statistics of it through
VK_KHR_pipeline_executable_properties: registers, spills, scratch or local
memory, shared memory, waves per SIMD or warps per SM, instructions.

No memory is allocated and nothing is recorded, so it works where Kompute
cannot run (Mesa 22.3's RADV null device has no memory types) and on Mesa's
null GPUs (tools/mesa26.sh), whose compilers are AMD's ACO and NVIDIA's
NAK; on a real GPU it reads that driver's own figures (the NVIDIA
proprietary driver reports its register count the same way).

A driver may crash compiling a pipeline (RADV dies of SIGFPE inside
vkCreateComputePipelines on a shared-memory size past its limit), so
`compile_isolated` compiles in child processes, a batch each, and a batch
whose child dies is compiled again one pipeline per child: the one that
kills its child is reported as not compiled, with the signal.
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import VULKAN_HINT, VulkanUnavailable
from .device_info import DeviceInfo, _enumerate_cached

PIPELINE_EXECUTABLE_EXTENSION = "VK_KHR_pipeline_executable_properties"
# Kompute's bindings (vkq.device.runtime.Device.algorithm's kinds): a storage
# buffer, or a uniform texel buffer view.
_DESCRIPTOR_STORAGE_BUFFER = 7  # VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
_DESCRIPTOR_UNIFORM_TEXEL_BUFFER = 4  # VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
_CAPTURE_STATISTICS = 0x40  # VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
_STYPE_COOPMAT_FEATURES = 1000506000  # VkPhysicalDeviceCooperativeMatrixFeaturesKHR


@dataclass(frozen=True)
class PipelineSpec:
    """One compute pipeline as vkq creates it: its shader variant's SPIR-V,
    specialization constants 0..n-1 (32-bit each, as Kompute passes them),
    its bindings in order (Device.algorithm's kinds: "storage",
    "texel_u32", "texel_u32x2", "texel_u32x4"), its push constants in
    32-bit words, and the subgroup size it requires (0: the driver's
    choice)."""

    shader: str
    spirv: str
    spec: tuple[int, ...]
    bindings: tuple[str, ...]
    push_words: int
    subgroup_size: int = 0


@dataclass
class PipelineStats:
    """The driver's figures for one pipeline, the same names on every driver
    (None: this driver does not report it). `occupancy` is waves per SIMD
    (RADV) or warps per SM (NAK, NVIDIA), `occupancy_unit` says which;
    `raw` holds every statistic under the driver's own names."""

    compiled: bool
    error: str = ""
    subgroup_size: int | None = None
    registers: int | None = None
    spills: int = 0
    scratch_bytes: int | None = None
    shared_bytes: int | None = None
    occupancy: int | None = None
    occupancy_unit: str = ""
    instructions: int | None = None
    cycles: int | None = None
    validation: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict)


# The drivers' statistic names (Mesa 26 RADV/ACO, NVK/NAK; the NVIDIA
# proprietary driver) for each common figure. Spills add up where a driver
# reports several kinds (spilled SGPRs and VGPRs; NAK's spills to memory).
_REGISTERS = ("VGPRs", "Number of GPRs", "Register Count", "Registers")
_SPILLS = ("Spilled VGPRs", "Spilled SGPRs", "Spills to memory", "Spill count")
_SCRATCH = ("Scratch size", "Scratch Memory Size", "SLM size", "Local memory size", "Local Memory Size")
_SHARED = ("LDS size", "Shared memory size", "Shared Memory Size", "Shared size")
_OCCUPANCY = (("Subgroups per SIMD", "waves/SIMD"), ("Max warps/SM", "warps/SM"), ("Occupancy", "warps/SM"))
_INSTRUCTIONS = ("Instructions", "Instruction count", "Instruction Count")
_CYCLES = ("Static cycle count", "Latency")


def _first(raw: dict, names) -> int | None:
    return next((int(raw[n]) for n in names if n in raw), None)


def summarize(raw: dict, subgroup_size: int | None) -> PipelineStats:
    """The common figures of one pipeline's statistics (by the driver's names)."""
    stats = PipelineStats(True, subgroup_size=subgroup_size, raw=raw)
    stats.registers = _first(raw, _REGISTERS)
    stats.spills = sum(int(raw[n]) for n in _SPILLS if n in raw)
    stats.scratch_bytes = _first(raw, _SCRATCH)
    stats.shared_bytes = _first(raw, _SHARED)
    for name, unit in _OCCUPANCY:
        if name in raw:
            stats.occupancy, stats.occupancy_unit = int(raw[name]), unit
            break
    stats.instructions = _first(raw, _INSTRUCTIONS)
    stats.cycles = _first(raw, _CYCLES)
    return stats


class _Compiler:
    """A Vulkan device opened to build pipelines: the features Kompute
    enables for vkq (integer dot products; the cooperative-matrix trio where
    offered), subgroup size control, and pipeline statistics."""

    def __init__(self, index: int):
        try:
            import vulkan as vk
        except (ImportError, OSError) as e:
            raise VulkanUnavailable(f"cannot load the Vulkan loader ({e}); {VULKAN_HINT}") from e
        self.vk, ffi, lib = vk, vk.ffi, vk.lib
        self._keep = []  # cffi objects that must outlive the calls that point at them
        app = self._new("VkApplicationInfo", sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                        pApplicationName=self._str("vkq"), apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
        ici = self._new("VkInstanceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, pApplicationInfo=app)
        out = ffi.new("VkInstance*")
        self._check(lib.vkCreateInstance(ici, ffi.NULL, out), "vkCreateInstance")
        self.instance = out[0]
        count = ffi.new("uint32_t*")
        lib.vkEnumeratePhysicalDevices(self.instance, count, ffi.NULL)
        pds = ffi.new("VkPhysicalDevice[]", count[0])
        lib.vkEnumeratePhysicalDevices(self.instance, count, pds)
        if not 0 <= index < count[0]:
            raise VulkanUnavailable(f"no Vulkan device with index {index} ({count[0]} found)")
        self.pd = pds[index]
        props = self._new("VkPhysicalDeviceProperties")
        lib.vkGetPhysicalDeviceProperties(self.pd, props)
        self.api = props.apiVersion
        self.max_push = props.limits.maxPushConstantsSize
        n = ffi.new("uint32_t*")
        lib.vkEnumerateDeviceExtensionProperties(self.pd, ffi.NULL, n, ffi.NULL)
        exts = ffi.new("VkExtensionProperties[]", n[0])
        lib.vkEnumerateDeviceExtensionProperties(self.pd, ffi.NULL, n, exts)
        names = {ffi.string(exts[i].extensionName).decode() for i in range(n[0])}
        self.statistics = PIPELINE_EXECUTABLE_EXTENSION in names

        # Features, as vkq's Kompute enables them, plus statistics and subgroup size control.
        f2 = self._new("VkPhysicalDeviceFeatures2", sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
        chain = []
        wanted = []
        dot = self._new("VkPhysicalDeviceShaderIntegerDotProductFeatures",
                        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES)
        if "VK_KHR_shader_integer_dot_product" in names:
            chain.append(dot)
            wanted.append("VK_KHR_shader_integer_dot_product")
        sgsc = self._new("VkPhysicalDeviceSubgroupSizeControlFeatures",
                         sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES)
        if "VK_EXT_subgroup_size_control" in names:
            chain.append(sgsc)
            wanted.append("VK_EXT_subgroup_size_control")
        pef = self._new("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
                        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR)
        if self.statistics:
            chain.append(pef)
            wanted.append(PIPELINE_EXECUTABLE_EXTENSION)
        coop = self._new("VkPhysicalDeviceCooperativeMatrixFeaturesKHR", sType=_STYPE_COOPMAT_FEATURES)
        mm = self._new("VkPhysicalDeviceVulkanMemoryModelFeatures",
                       sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES)
        f16 = self._new("VkPhysicalDeviceShaderFloat16Int8Features",
                        sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES)
        coop_exts = [e for e in ("VK_KHR_cooperative_matrix", "VK_KHR_vulkan_memory_model",
                                 "VK_KHR_shader_float16_int8") if e in names]
        if "VK_KHR_cooperative_matrix" in names:
            chain += [coop, mm, f16]
        self._link(f2, chain)
        lib.vkGetPhysicalDeviceFeatures2(self.pd, f2)
        # What vkq does not enable, off (Kompute enables no core 1.0 feature).
        f2.features = self._new("VkPhysicalDeviceFeatures")[0]
        if coop.cooperativeMatrix and mm.vulkanMemoryModel and f16.shaderFloat16:
            coop.cooperativeMatrixRobustBufferAccess = 0
            mm.vulkanMemoryModelDeviceScope = mm.vulkanMemoryModelAvailabilityVisibilityChains = 0
            # shaderInt8 stays as the device reports it (kp patch 0014): the int8 flavour's fragments
            wanted += coop_exts
        else:
            chain = [s for s in chain if s not in (coop, mm, f16)]
        self.subgroup_size_control = bool(sgsc.subgroupSizeControl)
        sgsc.computeFullSubgroups = 0
        self._link(f2, chain)

        families = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.pd, families, ffi.NULL)
        fam = ffi.new("VkQueueFamilyProperties[]", families[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.pd, families, fam)
        queue = next((i for i in range(families[0]) if fam[i].queueFlags & vk.VK_QUEUE_COMPUTE_BIT), 0)
        prio = ffi.new("float*", 1.0)
        qci = self._new("VkDeviceQueueCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                        queueFamilyIndex=queue, queueCount=1, pQueuePriorities=prio)
        ext_names = [self._str(e) for e in wanted]
        ext_array = ffi.new("char*[]", ext_names)
        dci = self._new("VkDeviceCreateInfo", sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, pNext=f2,
                        queueCreateInfoCount=1, pQueueCreateInfos=qci, enabledExtensionCount=len(wanted),
                        ppEnabledExtensionNames=ext_array)
        dev = ffi.new("VkDevice*")
        self._check(lib.vkCreateDevice(self.pd, dci, ffi.NULL, dev), "vkCreateDevice")
        self.device = dev[0]
        self._props = self._device_fn("vkGetPipelineExecutablePropertiesKHR") if self.statistics else None
        self._stats = self._device_fn("vkGetPipelineExecutableStatisticsKHR") if self.statistics else None

    # -- cffi helpers ----------------------------------------------------
    def _new(self, ctype: str, **fields):
        obj = self.vk.ffi.new(f"{ctype}*")
        for name, value in fields.items():
            setattr(obj, name, value)
        self._keep.append(obj)
        return obj

    def _str(self, text: str):
        s = self.vk.ffi.new("char[]", text.encode())
        self._keep.append(s)
        return s

    def _link(self, head, structs) -> None:
        prev = head
        for s in structs:
            prev.pNext = self.vk.ffi.cast("void *", s)
            prev = s
        prev.pNext = self.vk.ffi.NULL

    def _device_fn(self, name: str):
        ptr = self.vk.lib.vkGetDeviceProcAddr(self.device, name.encode())
        if ptr == self.vk.ffi.NULL:
            raise VulkanUnavailable(f"the driver lacks {name}")
        return self.vk.ffi.cast(f"PFN_{name}", ptr)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            raise VulkanUnavailable(f"{what} failed: VkResult {result}")

    # -- one pipeline ----------------------------------------------------
    def compile(self, p: PipelineSpec) -> PipelineStats:
        vk, ffi, lib = self.vk, self.vk.ffi, self.vk.lib
        keep = len(self._keep)
        handles = []
        try:
            code = Path(p.spirv).read_bytes()
            words = ffi.new("uint32_t[]", len(code) // 4)
            ffi.memmove(words, code, len(code))
            smci = self._new("VkShaderModuleCreateInfo", sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                             codeSize=len(code), pCode=words)
            module = ffi.new("VkShaderModule*")
            self._check(lib.vkCreateShaderModule(self.device, smci, ffi.NULL, module), "vkCreateShaderModule")
            handles.append((lib.vkDestroyShaderModule, module[0]))

            binds = ffi.new("VkDescriptorSetLayoutBinding[]", max(len(p.bindings), 1))
            for i, kind in enumerate(p.bindings):
                binds[i].binding, binds[i].descriptorCount = i, 1
                binds[i].descriptorType = (_DESCRIPTOR_STORAGE_BUFFER if kind == "storage"
                                           else _DESCRIPTOR_UNIFORM_TEXEL_BUFFER)
                binds[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
            dslci = self._new("VkDescriptorSetLayoutCreateInfo",
                              sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                              bindingCount=len(p.bindings), pBindings=binds)
            dsl = ffi.new("VkDescriptorSetLayout*")
            self._check(lib.vkCreateDescriptorSetLayout(self.device, dslci, ffi.NULL, dsl),
                        "vkCreateDescriptorSetLayout")
            handles.append((lib.vkDestroyDescriptorSetLayout, dsl[0]))
            pcr = self._new("VkPushConstantRange", stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0,
                            size=4 * p.push_words)
            plci = self._new("VkPipelineLayoutCreateInfo", sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                             setLayoutCount=1, pSetLayouts=dsl, pushConstantRangeCount=1 if p.push_words else 0,
                             pPushConstantRanges=pcr)
            layout = ffi.new("VkPipelineLayout*")
            self._check(lib.vkCreatePipelineLayout(self.device, plci, ffi.NULL, layout), "vkCreatePipelineLayout")
            handles.append((lib.vkDestroyPipelineLayout, layout[0]))

            entries = ffi.new("VkSpecializationMapEntry[]", max(len(p.spec), 1))
            data = ffi.new("uint32_t[]", max(len(p.spec), 1))
            for i, value in enumerate(p.spec):
                entries[i].constantID, entries[i].offset, entries[i].size = i, 4 * i, 4
                data[i] = value & 0xFFFFFFFF
            si = self._new("VkSpecializationInfo", mapEntryCount=len(p.spec), pMapEntries=entries,
                           dataSize=4 * len(p.spec), pData=data)
            stage = self._new("VkPipelineShaderStageCreateInfo",
                              sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                              stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module[0], pName=self._str("main"),
                              pSpecializationInfo=si if p.spec else ffi.NULL)
            if p.subgroup_size:
                if not self.subgroup_size_control:
                    return PipelineStats(False, f"subgroup size {p.subgroup_size} required, but the device has "
                                                "no subgroup size control")
                rss = self._new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo",
                                sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
                                requiredSubgroupSize=p.subgroup_size)
                stage.pNext = rss
            cpci = self._new("VkComputePipelineCreateInfo", sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                             flags=_CAPTURE_STATISTICS if self.statistics else 0, stage=stage[0],
                             layout=layout[0], basePipelineIndex=-1)
            pipe = ffi.new("VkPipeline*")
            result = lib.vkCreateComputePipelines(self.device, ffi.NULL, 1, cpci, ffi.NULL, pipe)
            if result != 0 or pipe[0] == ffi.NULL:
                return PipelineStats(False, f"vkCreateComputePipelines failed: VkResult {result}")
            handles.append((lib.vkDestroyPipeline, pipe[0]))
            if not self.statistics:
                return PipelineStats(True, f"the driver has no {PIPELINE_EXECUTABLE_EXTENSION}")
            return self._statistics(pipe[0])
        finally:
            for destroy, handle in reversed(handles):
                destroy(self.device, handle, ffi.NULL)
            del self._keep[keep:]

    def _enumerate(self, call, info, ctype: str, stype: int):
        """Vulkan's two calls: the count, then that many structures of ctype (each sType set), as
        one cffi array (iterate over it while holding it: its items do not keep it alive)."""
        ffi = self.vk.ffi
        n = ffi.new("uint32_t*")
        call(self.device, info, n, ffi.NULL)
        items = ffi.new(f"{ctype}[]", n[0])
        for i in range(n[0]):
            items[i].sType = stype
        call(self.device, info, n, items)
        return items

    def _statistics(self, pipe) -> PipelineStats:
        vk, ffi = self.vk, self.vk.ffi
        info = ffi.new("VkPipelineInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, "pipeline": pipe})
        execs = self._enumerate(self._props, info, "VkPipelineExecutablePropertiesKHR",
                                vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR)
        raw, subgroup = {}, None
        # A compute pipeline has one executable (the compute shader).
        for i, executable in enumerate(execs):
            subgroup = executable.subgroupSize
            xi = ffi.new("VkPipelineExecutableInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                                                          "pipeline": pipe, "executableIndex": i})
            for s in self._enumerate(self._stats, xi, "VkPipelineExecutableStatisticKHR",
                                     vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR):
                fmt = s.format
                value = (bool(s.value.b32) if fmt == 0 else int(s.value.i64) if fmt == 1
                         else int(s.value.u64) if fmt == 2 else float(s.value.f64))
                raw[ffi.string(s.name).decode()] = value
        return summarize(raw, subgroup)

    def close(self) -> None:
        self.vk.lib.vkDestroyDevice(self.device, self.vk.ffi.NULL)
        self.vk.lib.vkDestroyInstance(self.instance, self.vk.ffi.NULL)


# The validation layer's settings while compiling (its messages are read
# from the log file, attributed to the pipeline being compiled).
_LAYER_SETTINGS = """\
khronos_validation.report_flags = error,warn
khronos_validation.log_filename = {log}
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
"""
_VUID = re.compile(r"(\S+)\((?:ERROR|WARN\w*) / ")


class ValidationLog:
    """The Khronos validation layer for the Vulkan instances this process
    creates from now on (set before the first), logging to a file
    (synchronization: its synchronization validation too, as `make
    validate` runs it); `since()` returns the messages logged after the last
    call, one string each."""

    def __init__(self, synchronization: bool = False):
        work = Path(tempfile.mkdtemp(prefix="vkq-validation-"))
        self.path = work / "validation.log"
        (work / "vk_layer_settings.txt").write_text(_LAYER_SETTINGS.format(log=self.path) + (
            "khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT\n"
            if synchronization else ""))
        os.environ["VK_INSTANCE_LAYERS"] = "VK_LAYER_KHRONOS_validation"
        os.environ["VK_LAYER_SETTINGS_PATH"] = str(work / "vk_layer_settings.txt")
        self._read = 0

    def since(self) -> list[str]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self._read)
            text = f.read().decode(errors="replace")
            self._read = f.tell()
        return [m.strip() for m in re.split(r"\n(?=\S+\((?:ERROR|WARN))", text) if _VUID.match(m.strip())]


def compile_pipelines(specs: list[PipelineSpec], index: int = 0, validate: bool = False) -> list[PipelineStats]:
    """Build every pipeline on device `index` in this process and return each
    one's statistics; `validate`: under the Khronos validation layer, whose
    messages go to each pipeline's `validation` (their VUIDs and text)."""
    log = ValidationLog() if validate else None
    compiler = _Compiler(index)
    out = []
    try:
        for p in specs:
            stats = compiler.compile(p)
            if log is not None:
                stats.validation = log.since()
            out.append(stats)
    finally:
        compiler.close()
    return out


def in_child(fn, *args):
    """fn(*args) in a forked child; its JSON-able result, or raises
    ChildProcessError naming the signal that ended the child. Forked, not
    started afresh: a program run through another dynamic loader (Debian's
    newer Mesa, tools/mesa26.sh) keeps it in the child."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        status = 0
        try:
            faulthandler.disable()  # (a driver's crash is the parent's to report, by its signal)
            os.close(read)
            os.dup2(2, 1)  # what the driver or a layer prints goes to stderr: stdout is the parent's report
            payload = json.dumps({"ok": fn(*args)}).encode()
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            payload, status = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode(), 1
        with os.fdopen(write, "wb") as f:
            f.write(payload)
        os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise ChildProcessError(f"the driver crashed ({signal.Signals(sig).name})")
    if not data:
        raise ChildProcessError(f"the compiling process ended with status {os.WEXITSTATUS(status)} and no result")
    result = json.loads(data)
    if "error" in result:
        raise RuntimeError(result["error"])
    return result["ok"]


def _compile_as_dicts(specs, index, validate):
    return [asdict(s) for s in compile_pipelines([PipelineSpec(**d) for d in specs], index, validate)]


def device_info_isolated(index: int = 0) -> DeviceInfo:
    """The device's DeviceInfo, queried in a child process (so that this
    one never loads the driver before it forks the compiling children)."""
    return DeviceInfo.from_dict(in_child(lambda i: _enumerate_cached()[i].to_dict(), index))


def compile_isolated(specs: list[PipelineSpec], index: int = 0, validate: bool = False,
                     batch: int = 64) -> list[PipelineStats]:
    """compile_pipelines in child processes, `batch` pipelines each; a batch
    whose child dies is compiled again one pipeline per child, so one
    pipeline that crashes the driver costs only its own figures."""
    out: list[PipelineStats] = []
    for start in range(0, len(specs), batch):
        part = specs[start:start + batch]
        try:
            dicts = in_child(_compile_as_dicts, [asdict(p) for p in part], index, validate)
        except ChildProcessError:
            dicts = []
            for p in part:
                try:
                    dicts += in_child(_compile_as_dicts, [asdict(p)], index, validate)
                except (ChildProcessError, RuntimeError) as e:
                    dicts.append(asdict(PipelineStats(False, str(e))))
        out += [PipelineStats(**d) for d in dicts]
    return out
