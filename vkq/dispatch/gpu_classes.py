"""What vkq takes as known of each GPU class it has tables for, in one place:
the subgroup sizes its devices offer, the wave (subgroup size) the tables'
launches are written for, its shared memory and workgroup limits, and the
null GPU of Mesa 26 (tools/mesa26.sh) whose compiler stands in for the
class. The tables' workgroup sizes and occupancy floors (tables/*.json),
the vector ops' launches on another class (vkq.llama.vector_ops), `vkq
pipelines` and the CI's checks on the null GPUs (tests/test_gpu_compilers.py,
which also holds these facts to what each null GPU reports) read them here.

These are the classes' least: a device of the class may offer more shared
memory (AMD's 64 KiB everywhere; NVIDIA's 48 KiB is what a workgroup gets
without opting in to more, which Vulkan does not do).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..device.caps import DeviceCaps
from .classify import DeviceClass


@dataclass(frozen=True)
class GpuClass:
    key: str  # "vendor/arch", as vkq.dispatch.classify names it
    subgroup_sizes: tuple[int, int]  # the least and most subgroup size its devices offer
    wave: int  # the subgroup size the tables' launches are written for (a mat-vec workgroup is one)
    shared_memory: int  # bytes of shared memory a workgroup may use
    max_workgroup_invocations: int
    occupancy_unit: str  # how its compilers count occupancy (vkq.dispatch.tables.OCCUPANCY_UNITS)
    null_gpu: str | None  # tools/mesa26.sh's device whose compiler is the class's (None: none)
    compute_units: int | None = None  # a proxy where a launch is sized by it (None: not known)

    @property
    def vendor(self) -> str:
        return self.key.split("/")[0]

    def caps(self) -> DeviceCaps:
        """A DeviceCaps of the class's least device (no int-dot or
        cooperative matrices assumed: a device says whether it has them)."""
        return DeviceCaps(self.vendor, "discrete", self.wave, True, False, self.shared_memory,
                          self.max_workgroup_invocations, compute_units=self.compute_units)


RDNA = dict(subgroup_sizes=(32, 64), wave=32, shared_memory=65536, max_workgroup_invocations=1024,
            occupancy_unit="waves/SIMD")
CLASSES: dict[str, GpuClass] = {c.key: c for c in (
    GpuClass("amd/gcn", (64, 64), 64, 65536, 1024, "waves/SIMD", None),
    GpuClass("amd/rdna2", **RDNA, null_gpu="radv:navi21"),
    GpuClass("amd/rdna3", **RDNA, null_gpu="radv:navi31"),
    GpuClass("amd/rdna4", **RDNA, null_gpu="radv:gfx1201"),
    GpuClass("nvidia/pre-turing", (32, 32), 32, 49152, 1024, "warps/SM", None),
    # (an H100's 132 SMs: the proxy that sizes the attention's splits on a class of many sizes)
    GpuClass("nvidia/turing+", (32, 32), 32, 49152, 1024, "warps/SM", "nvk:166", compute_units=132),
)}


def of(device_class: DeviceClass) -> GpuClass | None:
    """The facts of a device's class (None: a class without them: CPU drivers, other vendors)."""
    return CLASSES.get(f"{device_class.vendor}/{device_class.arch}")


def required_wave(device_class: DeviceClass, subgroup_sizes: tuple[int, int], can_require: bool) -> int | None:
    """The subgroup size a mat-vec pipeline asks for on a device of this
    class: the wave the class's tables are written for (a mat-vec workgroup
    of 32 is one wave32 on RDNA), where the device can require a size of a
    compute pipeline (`can_require`: VK_EXT_subgroup_size_control with
    compute among its stages, and a kp that passes it) and offers that size
    (`subgroup_sizes`: its least and most). None otherwise: the driver picks,
    as it always did (RADV of Mesa 22.3 ran such workgroups as wave64, half
    of each wave idle; Mesa 25 and later as wave32)."""
    facts = of(device_class)
    if facts is None or not can_require:
        return None
    lo, hi = subgroup_sizes
    return facts.wave if lo <= facts.wave <= hi else None
