"""A device whose vector ops launch as a GPU class's would (LaunchesOf,
GPU_LAUNCH_CAPS): how a CPU driver records, runs and measures a GPU's
launches (`vkq generate --shape nvidia`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...dispatch import gpu_classes
from ...dispatch.classify import DeviceClass

class LaunchesOf:
    """A device whose vector ops launch as they would on a device of other
    caps (`caps`: a GPU class's, GPU_LAUNCH_CAPS), everything else the
    device's own: how a CPU driver records, runs and measures a GPU's
    launches. Subgroup arithmetic only where the device has it too (its
    shaders run here), and no loop budget (a GPU has none; the launches
    taken here stay far within lavapipe's)."""

    def __init__(self, device, caps):
        self.device = device
        self.caps = replace(device.caps, device_type=caps.device_type, subgroup_size=caps.subgroup_size,
                            subgroup_arithmetic=caps.subgroup_arithmetic and device.caps.subgroup_arithmetic,
                            max_workgroup_invocations=min(caps.max_workgroup_invocations,
                                                          device.caps.max_workgroup_invocations),
                            max_loop_iterations=None, compute_units=caps.compute_units)

    def __getattr__(self, name):
        return getattr(self.device, name)


@dataclass(frozen=True)
class LaunchCaps:
    """What the vector ops' launches depend on (vkq.device.caps.DeviceCaps's
    fields of the same names), and the vendor table's class the class's
    mat-vecs are chosen from (vkq.llama.profile.MatvecView)."""

    device_type: str
    subgroup_size: int
    subgroup_arithmetic: bool
    max_workgroup_invocations: int
    compute_units: int | None
    table_class: DeviceClass


# GPU classes whose launches a step can be recorded with on any device
# (LaunchesOf; `vkq generate --shape nvidia`): their facts
# (vkq.dispatch.gpu_classes: the wave, the workgroup limit, and for the
# compute units a proxy of the class, an H100's 132 SMs, which only sizes
# the attention's splits, attention_split), and for the table an H100's
# class (Turing or newer).
_NVIDIA = gpu_classes.CLASSES["nvidia/turing+"]
GPU_LAUNCH_CAPS = {
    "nvidia": LaunchCaps("discrete", _NVIDIA.wave, True, _NVIDIA.max_workgroup_invocations, _NVIDIA.compute_units,
                         DeviceClass("nvidia", "turing+", "proprietary", ("vkq.llama: an H100's class",))),
}


def launches_of(device, gpu_class: str | None):
    """The device, or (gpu_class, a key of GPU_LAUNCH_CAPS) one that launches as that class does."""
    if gpu_class is None:
        return device
    if gpu_class not in GPU_LAUNCH_CAPS:
        raise ValueError(f"launches of {gpu_class!r}: one of {', '.join(sorted(GPU_LAUNCH_CAPS))}")
    return LaunchesOf(device, GPU_LAUNCH_CAPS[gpu_class])
