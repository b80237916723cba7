"""Device memory an upload may take, checked before anything reaches the driver.

Two limits of the device (vkq info prints both):
- one allocation: maxMemoryAllocationSize (Vulkan 1.1), and for a buffer
  that a shader binds, maxStorageBufferRange. vkq splits a matrix by rows into
  buffers under the smaller of the two (vkq.blocks.layout.split_rows), so only a
  single row larger than that is refused;
- in total: the size of the heap weights go to (the largest DEVICE_LOCAL
  heap). vkq counts what its own uploads hold on the device and refuses an
  upload that would take that past the heap; other processes' use is not seen.
  On a CPU driver (lavapipe) device memory is host memory, and lavapipe
  allocates past the heap size it reports (2 GiB on a 23 GiB machine: 3 GiB
  of buffers allocated, measured 2026-11-24), so there the limit is the host's
  available memory (MemAvailable) when that is larger.
Freed weights give their bytes back (Weights.free).
"""
from __future__ import annotations

import threading

from ..errors import VkqError
from .device_info import DeviceInfo


class DeviceMemoryError(VkqError, ValueError):
    """Weights that the device cannot hold: refused before the driver sees them."""


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def buffer_limit(info: DeviceInfo) -> tuple[int, str]:
    """The largest one weights buffer may be on this device, and the limit's name."""
    limits = [(info.max_storage_buffer_range, "maxStorageBufferRange")]
    if info.max_memory_allocation_size:
        limits.append((info.max_memory_allocation_size, "maxMemoryAllocationSize"))
    return min(limits)


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def total_limit(info: DeviceInfo) -> tuple[int, str]:
    """What vkq's uploads may hold in all on this device, and what that figure is."""
    heap = (info.device_local_memory, "device-local heap")
    if info.device_type == "cpu":
        host = (_host_available_bytes(), "available host memory (a CPU driver)")
        return max(heap, host)
    return heap


class MemoryLedger:
    """The bytes vkq's uploads hold on one device."""

    def __init__(self, info: DeviceInfo):
        self.info = info
        self.in_use = 0
        self._lock = threading.Lock()

    def reserve(self, buffer_sizes: list[int], what: str) -> int:
        """Count an upload of these buffers in, or refuse it (DeviceMemoryError).
        Returns the bytes counted, for release()."""
        name = self.info.name
        limit, limit_name = buffer_limit(self.info)
        largest = max(buffer_sizes, default=0)
        if largest > limit:
            raise DeviceMemoryError(f"{what}: one buffer of {_size(largest)} is more than {name}'s "
                                    f"{limit_name} ({_size(limit)})")
        total = sum(buffer_sizes)
        with self._lock:
            cap, cap_name = total_limit(self.info)
            if cap and self.in_use + total > cap:
                raise DeviceMemoryError(
                    f"{what} take {_size(total)}, and vkq's weights already hold {_size(self.in_use)} of "
                    f"{name}'s {cap_name} of {_size(cap)}; free weights (Weights.free) or use a smaller model")
            self.in_use += total
        return total

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.in_use -= nbytes
