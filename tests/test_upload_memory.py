"""Uploaded weights on a discrete GPU keep no host copy: the staging buffer
Kompute fills them through is freed once the data is on the device.

lavapipe is a CPU driver (vkq uploads straight into host-visible memory
there), so these tests take the GPU's path on it by making
`Device.unified_memory` False. Device-local memory of lavapipe is host
memory too, so the process's resident memory grows by the weights once
(their device copy), not twice (device copy plus staging copy)."""
from __future__ import annotations

import gc
import subprocess
import sys

import kp
import numpy as np
import pytest
from conftest import assert_matches, child_env, random_ids, random_x, references

import ggml_quant
import vkq.blocks.reference as ref
from vkq.blocks.formats import get_format
from vkq.blocks.layout import MatrixLayout
from vkq.device.memory import DeviceMemoryError, size_text
from vkq.device.runtime import Device

MIB = 1 << 20

# Uploads 4 x 64 MiB on the GPU path and prints how much the resident memory
# grew, in MiB. argv[1] "keep" keeps the staging copies (as kp without the
# release does), the control that shows the measurement sees them.
MEASURE = r"""
import sys
import numpy as np
from vkq.device.runtime import Device

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

Device.unified_memory = property(lambda self: False)
dev = Device()
if sys.argv[1] == "keep":
    dev.patched_kp = False
arrays = [np.full(16 << 20, i + 1, np.uint32) for i in range(4)]
dev.upload(np.ones(1024, np.uint32))  # one-time allocations (command pool, ...) before measuring
before = rss_mib()
tensors = [dev.upload(a) for a in arrays]
print(rss_mib() - before)
"""
UPLOADED_MIB = 4 * 64


def resident_growth_mib(mode: str) -> float:
    r = subprocess.run([sys.executable, "-c", MEASURE, mode], env=child_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return float(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def gpu_upload_path(monkeypatch):
    monkeypatch.setattr(Device, "unified_memory", property(lambda self: False))


def test_uploaded_weights_take_host_memory_once(backend):
    if not backend.device.patched_kp:
        pytest.skip("kp without vkq's patch keeps the staging copy")
    released = resident_growth_mib("release")
    kept = resident_growth_mib("keep")
    print(f"resident memory after uploading {UPLOADED_MIB} MiB: {released:.0f} MiB (staging released), "
          f"{kept:.0f} MiB (kept)")
    # The device copy is resident where device memory is host memory (a CPU
    # driver; on a discrete GPU it is not)...
    device_copy = UPLOADED_MIB if backend.device_info.device_type == "cpu" else 0
    assert released > device_copy - 0.2 * UPLOADED_MIB, released
    # ...and the staging copy is gone, where keeping it costs as much again.
    assert released < device_copy + 0.25 * UPLOADED_MIB, released
    assert kept > device_copy + 0.8 * UPLOADED_MIB, kept


def test_gpu_upload_path_gives_device_only_tensors(backend, gpu_upload_path):
    if not backend.device.patched_kp:
        pytest.skip("kp without vkq's patch keeps the staging copy")
    t = backend.device.upload(np.arange(100, dtype=np.uint32))
    assert t.tensor_type() == kp.TensorTypes.storage
    with pytest.raises(RuntimeError, match="no host data"):
        t.data()


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_matvec_on_the_gpu_upload_path(backend, gpu_upload_path, path):
    rows, k = 67, 512
    data = ggml_quant.random_weights(rows, k, "Q4_K")
    w = backend.upload("Q4_K", (rows, k), data)
    assert all(buf.tensor.tensor_type() != kp.TensorTypes.host for buf in w.buffers)
    x = random_x(k, 3)
    assert_matches(backend.matvec(w, x, path=path), references(ref.dequantize("Q4_K", (rows, k), data), x), path,
                   f"Q4_K {rows}x{k} {path}, GPU upload path")


def test_matvec_id_on_the_gpu_upload_path(backend, gpu_upload_path):
    n_expert, rows, k, n_used = 5, 33, 256, 3
    data = ggml_quant.random_weights(n_expert * rows, k, "Q6_K")
    w = backend.upload("Q6_K", (n_expert, rows, k), data)
    x, ids = random_x(k), random_ids(n_used, n_expert)
    w64 = ref.dequantize("Q6_K", (n_expert, rows, k), data)
    y = backend.matvec_id(w, x, ids, path="dmmv")
    for slot, e in enumerate(ids):
        assert_matches(y[slot], references(w64[e], x), "dmmv", f"Q6_K expert {e} slot {slot}, GPU upload path")


# -- the device's memory limits (vkq.device.memory) -------------------------------
def limit_device(monkeypatch, backend, **fields):
    """The backend's device with some DeviceInfo fields replaced (tiny limits)."""
    from dataclasses import replace
    dev = backend.device
    info = replace(dev.info, **fields)
    monkeypatch.setattr(dev, "info", info)
    monkeypatch.setattr(dev.memory, "info", info)
    return dev


def test_weights_beyond_one_allocation_are_split(backend, monkeypatch):
    rows, k = 96, 1024
    data = ggml_quant.random_weights(rows, k, "Q4_0")
    one_row = MatrixLayout(get_format("Q4_0"), 1, rows, k).device_nbytes(1)
    limit_device(monkeypatch, backend, max_memory_allocation_size=40 * one_row)
    w = backend.upload("Q4_0", (rows, k), data)
    assert len(w.buffers) == 3, [b.rows for b in w.buffers]
    x = random_x(k)
    assert_matches(backend.matvec(w, x, path="dmmv"), references(ref.dequantize("Q4_0", (rows, k), data), x), "dmmv",
                   "Q4_0 split at maxMemoryAllocationSize")
    w.free()


def test_a_row_beyond_one_allocation_is_refused(backend, monkeypatch):
    rows, k = 4, 4096
    data = ggml_quant.random_weights(rows, k, "Q8_0")
    limit_device(monkeypatch, backend, max_memory_allocation_size=1024)
    in_use = backend.device.memory.in_use
    with pytest.raises(ValueError, match="one row"):
        backend.upload("Q8_0", (rows, k), data)
    assert backend.device.memory.in_use == in_use


def test_weights_beyond_the_heap_are_refused_until_freed(backend, monkeypatch):
    rows, k = 64, 1024
    data = ggml_quant.random_weights(rows, k, "Q4_0")
    nbytes = MatrixLayout(get_format("Q4_0"), 1, rows, k).device_nbytes(rows)
    gc.collect()  # (other tests' garbage gives its bytes back now, not during this test)
    in_use = backend.device.memory.in_use
    heap = in_use + int(2.5 * nbytes)
    dev = limit_device(monkeypatch, backend, device_type="discrete-gpu", device_local_memory=heap)
    first, second = backend.upload("Q4_0", (rows, k), data), backend.upload("Q4_0", (rows, k), data)
    with pytest.raises(DeviceMemoryError) as e:
        backend.upload("Q4_0", (rows, k), data)
    msg = str(e.value)
    assert dev.info.name in msg and "device-local heap of " + size_text(heap) in msg, msg
    assert dev.memory.in_use == in_use + 2 * nbytes  # the refused upload holds nothing
    first.free()
    third = backend.upload("Q4_0", (rows, k), data)
    second.free(), third.free()
    assert dev.memory.in_use == in_use


# Uploads and frees the same 16 MiB of Q4_0 weights 100 times, printing the
# resident memory (MiB) after cycles 10 and 100 and vkq's count of device bytes.
CYCLES = r"""
import numpy as np
import vkq

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

rows, k = 4096, 8192  # 16 MiB of Q4_0 on the device
data = np.random.default_rng(0).integers(0, 255, rows * k // 32 * 18, dtype=np.uint8)
data.reshape(-1, 18)[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)  # finite scales
backend = vkq.Backend()
marks = {}
for cycle in range(1, 101):
    w = backend.upload("Q4_0", (rows, k), data)
    w.free()
    if cycle in (10, 100):
        marks[cycle] = rss_mib()
print(marks[10], marks[100], backend.device.memory.in_use)
"""


def test_freeing_weights_gives_the_memory_back():
    r = subprocess.run([sys.executable, "-c", CYCLES], env=child_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    at10, at100, in_use = (float(v) for v in r.stdout.split())
    print(f"resident memory over 100 upload/free cycles of 16 MiB: {at10:.0f} MiB after 10, {at100:.0f} after 100")
    assert in_use == 0
    assert at100 - at10 < 16, (at10, at100)  # less than one upload more in 90 cycles
