"""Device memory vkq's buffers may take, checked before anything reaches the driver.

Two limits of the device (vkq info prints both):
- one allocation: maxMemoryAllocationSize (Vulkan 1.1), and for a buffer
  that a shader binds, maxStorageBufferRange. vkq splits a matrix by rows into
  buffers under the smaller of the two (vkq.blocks.layout.split_rows), so only a
  single row larger than that is refused; a device tensor (vkq.Tensor: a KV
  cache, a scratch) is one buffer, refused above it (the llama decoder
  checks its context first, vkq.llama.gpu_step);
- in total: the size of the heap weights go to (the largest DEVICE_LOCAL
  heap). vkq counts what its own weights and tensors hold on the device and
  refuses a buffer that would take that past the heap; other processes' use
  is not seen.
  On a CPU driver (lavapipe) device memory is host memory, and lavapipe
  allocates past the heap size it reports (2 GiB on a 23 GiB machine: 3 GiB
  of buffers allocated, measured 2026-11-24), so there the limit is the host's
  available memory (MemAvailable) when that is larger.
Weights and tensors give their bytes back when their buffers go: freed
(Weights.free) or collected (`credit_on_collect`). Garbage that only the
cycle collector frees (a Weights and its cached calls' graphs refer to each
other) is collected before a buffer is refused for want of memory.
"""
from __future__ import annotations

import gc
import threading
import weakref

from ..errors import VkqError
from .device_info import DeviceInfo


class DeviceMemoryError(VkqError, ValueError):
    """Weights or a tensor that the device cannot hold: refused before the driver sees them."""


def size_text(n: int) -> str:
    """'2.00 GiB', '128.0 MiB', '64.0 KiB'."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def buffer_limit(info: DeviceInfo) -> tuple[int, str]:
    """The largest one buffer (of weights, or a tensor) may be on this device, and the limit's name."""
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
    """What vkq's buffers may hold in all on this device, and what that figure is."""
    heap = (info.device_local_memory, "device-local heap")
    if info.device_type == "cpu":
        host = (_host_available_bytes(), "available host memory (a CPU driver)")
        return max(heap, host)
    return heap


class MemoryLedger:
    """The bytes vkq's weights and tensors hold on one device."""

    def __init__(self, info: DeviceInfo):
        self.info = info
        self.in_use = 0
        # Reentrant: a collection that runs a finalizer (credit_on_collect) may
        # start anywhere, inside reserve() too.
        self._lock = threading.RLock()

    def room(self) -> int | None:
        """Bytes the total limit leaves (after collecting garbage that holds
        buffers); None where the device reports no limit."""
        gc.collect()
        cap, _ = total_limit(self.info)
        return max(cap - self.in_use, 0) if cap else None

    def reserve(self, buffer_sizes: list[int], what: str) -> int:
        """Count these buffers in, or refuse them (DeviceMemoryError).
        Returns the bytes counted, for release()."""
        name = self.info.name
        limit, limit_name = buffer_limit(self.info)
        largest = max(buffer_sizes, default=0)
        if largest > limit:
            raise DeviceMemoryError(f"{what}: one buffer of {size_text(largest)} is more than {name}'s "
                                    f"{limit_name} ({size_text(limit)})")
        total = sum(buffer_sizes)
        for attempt in (0, 1):
            with self._lock:
                cap, cap_name = total_limit(self.info)
                if not cap or self.in_use + total <= cap:
                    self.in_use += total
                    return total
            if attempt == 0:
                gc.collect()  # unreachable weights in a reference cycle still hold their buffers
        raise DeviceMemoryError(
            f"{what}: {size_text(total)} more would pass {name}'s {cap_name} of {size_text(cap)}, of which vkq's "
            f"weights and tensors already hold {size_text(self.in_use)}; free weights (Weights.free) or use a "
            "smaller model")

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.in_use -= nbytes

    def credit_on_collect(self, owner, nbytes: int) -> weakref.finalize:
        """Give nbytes back when `owner` (whose buffers they count) is
        collected, or when the returned finalizer is called, whichever comes
        first: once either way."""
        return weakref.finalize(owner, self.release, nbytes)
