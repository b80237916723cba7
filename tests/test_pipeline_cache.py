"""The driver's compiled pipelines kept across runs (vkq/device/pipeline_cache.py):
the file written only where the cache holds pipelines and changed, read back
into the next Backend of the same device and driver, and any file that is
not this device's, or cannot be read or written, costing nothing but a
warning. lavapipe 22.3's cache holds no pipeline, so its real round trip is
checked on Mesa 26's RADV (tests/test_gpu_compilers.py); here a stand-in
manager holds the bytes."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import vkq
from vkq.backend import _save_pipeline_cache
from vkq.blocks.formats import FORMATS
from vkq.device import pipeline_cache
from vkq.device.pipeline_cache import HEADER_BYTES, cache_path

HEADER = bytes(HEADER_BYTES)


class StandIn:
    """A kp.Manager's cache as the patch gives it: its bytes, and a load that
    accepts data whose header is this 'device's'."""

    def __init__(self, data: bytes = HEADER, accepts: bytes = HEADER):
        self.data, self.accepts, self.merged = data, accepts, []

    def pipeline_cache_data(self) -> bytes:
        return self.data

    def load_pipeline_cache(self, data: bytes) -> bool:
        if data[:HEADER_BYTES] != self.accepts:
            return False
        self.merged.append(data)
        return True


@pytest.fixture(autouse=True)
def _cache_on(monkeypatch):
    monkeypatch.delenv(pipeline_cache.ENV, raising=False)


def test_a_cache_with_pipelines_is_written_and_read_back(tmp_path):
    path = tmp_path / "sub" / "dev.pipelines"
    data = HEADER + b"compiled pipelines"
    assert pipeline_cache.save(StandIn(data), path)
    assert path.read_bytes() == data and list(path.parent.iterdir()) == [path]  # (no temporary file left)
    manager = StandIn()
    assert pipeline_cache.load(manager, path) == data and manager.merged == [data]


@pytest.mark.parametrize("data, loaded", [(HEADER, b""), (HEADER + b"same", HEADER + b"same")],
                         ids=["header only", "unchanged since loaded"])
def test_nothing_new_is_not_written(tmp_path, data, loaded):
    path = tmp_path / "dev.pipelines"
    assert not pipeline_cache.save(StandIn(data), path, loaded)
    assert not path.exists()


@pytest.mark.parametrize("content", [None, b"", b"short", bytes([1]) * HEADER_BYTES + b"another device's"],
                         ids=["no file", "empty", "shorter than a header", "another device"])
def test_a_file_not_this_devices_is_not_merged(tmp_path, content):
    path = tmp_path / "dev.pipelines"
    if content is not None:
        path.write_bytes(content)
    manager = StandIn()
    assert pipeline_cache.load(manager, path) == b"" and manager.merged == []


def test_off_neither_reads_nor_writes(tmp_path, monkeypatch):
    path = tmp_path / "dev.pipelines"
    path.write_bytes(HEADER + b"kept")
    monkeypatch.setenv(pipeline_cache.ENV, "off")
    manager = StandIn(HEADER + b"new")
    assert pipeline_cache.load(manager, path) == b"" and manager.merged == []
    assert not pipeline_cache.save(manager, path)
    assert path.read_bytes() == HEADER + b"kept"


def test_a_file_that_cannot_be_written_is_a_warning(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="pipeline cache .* not written"):
        assert not pipeline_cache.save(StandIn(HEADER + b"x"), blocker / "dev.pipelines")


def test_a_kp_without_the_cache_is_left_alone(tmp_path):
    assert pipeline_cache.load(object(), tmp_path / "dev.pipelines") == b""
    assert not pipeline_cache.save(object(), tmp_path / "dev.pipelines")


def _q4_0_matvec(backend) -> np.ndarray:
    fmt, k = FORMATS["Q4_0"], 256
    rng = np.random.default_rng(0)
    blocks = np.zeros((64, fmt.row_bytes(k)), np.uint8)
    blocks.reshape(64, -1, fmt.block_bytes)[..., 2:] = rng.integers(0, 256, (64, k // 32, 16))
    blocks.reshape(64, -1, fmt.block_bytes)[..., :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    w = backend.upload("Q4_0", (64, k), blocks)
    return backend.matvec(w, np.ones(k, np.float32))


def test_a_backend_runs_with_a_foreign_file_and_keeps_it_until_it_has_pipelines(tmp_path, monkeypatch):
    """A file of another device (or driver) beside the tuning files: the
    Backend opens, computes what it computes without it, and leaves it (this
    driver's cache holds no pipeline to replace it with) or replaces it."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    expected = _q4_0_matvec(vkq.Backend())
    info = vkq.Backend().device_info
    path = cache_path(info, tmp_path)
    foreign = bytes([7]) * HEADER_BYTES + b"pipelines of another device"
    path.write_bytes(foreign)
    backend = vkq.Backend()
    assert backend._pipeline_cache["loaded"] == b""
    np.testing.assert_array_equal(_q4_0_matvec(backend), expected)
    ours = backend.device.manager.pipeline_cache_data()
    del backend
    gc.collect()
    assert path.read_bytes() == (ours if len(ours) > HEADER_BYTES else foreign)


def test_a_null_gpus_cache_is_not_kept(tmp_path, monkeypatch):
    """A device found not to run its dispatches keeps nothing, its pipelines
    neither; one that runs them keeps what its manager holds."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    runs, null = vkq.Backend(), vkq.Backend()
    # (a null GPU leaves the known-answer mat-vec's output as it was: zeros)
    monkeypatch.setattr(null, "matvec", lambda weights, x: np.zeros(2, np.float32))
    assert runs.executes and not null.executes
    _save_pipeline_cache(StandIn(HEADER + b"made on a null GPU"), null._pipeline_cache)
    assert not list(tmp_path.glob("*.pipelines"))
    _save_pipeline_cache(StandIn(HEADER + b"made on a device"), runs._pipeline_cache)
    assert cache_path(runs.device_info, tmp_path).read_bytes() == HEADER + b"made on a device"
