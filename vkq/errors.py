"""Errors vkq raises for a situation of the user's machine or set-up, not a bug.

Each names the problem and what to do; `vkq` (vkq.commands.cli) prints it as one line
and exits with status 2. Each also subclasses the built-in exception the
same failure raised before (RuntimeError, ValueError), so library callers
that catch those keep working. Bad arguments to the library's functions
stay plain ValueError / TypeError.
"""
from __future__ import annotations

VULKAN_HINT = (
    "install a Vulkan loader and driver (Debian/Ubuntu: apt-get install libvulkan1 "
    "mesa-vulkan-drivers, or your GPU vendor's driver) and check with `vulkaninfo --summary`"
)
KOMPUTE_HINT = "build it with vkq's patch: tools/install_kompute.sh PYTHON (make does it for you)"


class VkqError(Exception):
    """Base of vkq's errors for a situation the user can fix."""


class VulkanUnavailable(VkqError, RuntimeError):
    """No Vulkan loader, no driver, or no device at all."""


class DeviceNotFound(VkqError, ValueError):
    """A Vulkan device index that this machine does not have."""


class ShadersMissing(VkqError, RuntimeError):
    """The compiled SPIR-V of a shader is not there."""


class KomputeUnavailable(VkqError, RuntimeError):
    """Kompute (`kp`) is missing, or built without the vkq patch level needed."""


class DeviceDoesNotExecute(VkqError, RuntimeError):
    """A device whose dispatches do nothing (Mesa's null GPUs, tools/mesa26.sh):
    what it computes, times or checks means nothing, and nothing of it is kept."""


class LaunchExceedsDevice(VkqError, ValueError):
    """A pipeline whose workgroup or shared memory passes the device's
    limits, refused before the driver sees it (one driver crashed, another
    took it silently): names the pipeline, what it needs and the limit."""


class NonFiniteLogits(VkqError, ValueError):
    """A model's logits hold NaN or inf (its weights decode to NaN, or overflow)."""


def from_import_error(e: ImportError) -> VkqError | None:
    """The vkq error an ImportError of `kp` stands for (None for any other
    module): kp not installed, or its Vulkan loader library missing."""
    if e.name != "kp":
        return None
    if "libvulkan" in str(e):
        return VulkanUnavailable(f"cannot load the Vulkan loader ({e}); {VULKAN_HINT}")
    return KomputeUnavailable(f"Kompute (the Python module kp) cannot be imported ({e}); {KOMPUTE_HINT}")
