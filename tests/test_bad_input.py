"""Everything a caller can get wrong raises ValueError or TypeError naming the
problem, and is caught before anything reaches the driver: while the bad call
runs, every way of creating device resources is made to fail the test."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import GGMLType

import ggml_quant
from conftest import NMSE_GGML, random_x

ROWS, K, N_EXPERT = 8, 64, 4


@pytest.fixture
def q4_0(backend):
    """A fresh Q4_0 matrix (no recorded dispatches yet)."""
    return backend.upload("Q4_0", (ROWS, K), ggml_quant.random_weights(ROWS, K, "Q4_0"))


@pytest.fixture
def f16(backend):
    return backend.upload("F16", (ROWS, K), np.ones((ROWS, K), np.float16))


@pytest.fixture
def experts(backend):
    data = ggml_quant.random_weights(N_EXPERT * ROWS, K, "Q4_0")
    return backend.upload("Q4_0", (N_EXPERT, ROWS, K), data)


def _driver_reached(*args, **kwargs):
    raise AssertionError("a bad call reached the driver")


@contextlib.contextmanager
def raises_before_driver(monkeypatch, exc, match):
    """pytest.raises, with every vkq.device.runtime.Device resource call failing."""
    with monkeypatch.context() as m:
        for name in ("upload", "tensor", "algorithm", "compute_barrier"):
            m.setattr(vkq.device.runtime.Device, name, _driver_reached)
        with pytest.raises(exc, match=match) as info:
            yield info


@pytest.fixture(scope="module")
def sane(backend):
    """A small matrix and its exact product, to check the backend after each test."""
    data = ggml_quant.random_weights(3, 32, "Q8_0")
    x = random_x(32)
    return backend.upload("Q8_0", (3, 32), data), x, ref.dequantize("Q8_0", (3, 32), data) @ x


@pytest.fixture(autouse=True)
def _backend_still_works(backend, sane):
    """After each bad call the shared backend still multiplies correctly."""
    yield
    w, x, expected = sane
    for path in ("dmmv", "mmvq"):
        assert ref.nmse(backend.matvec(w, x, path=path), expected) < NMSE_GGML


# -- upload ----------------------------------------------------------------

Q4_0_BYTES = ROWS * (K // 32) * 18  # 288


@pytest.mark.parametrize("data, match", [
    (np.zeros(Q4_0_BYTES - 1, np.uint8), f"must be {Q4_0_BYTES} bytes"),
    (np.zeros(Q4_0_BYTES + 18, np.uint8), f"must be {Q4_0_BYTES} bytes"),
    (b"", f"must be {Q4_0_BYTES} bytes"),
], ids=["short", "long", "empty"])
def test_wrong_byte_count(backend, monkeypatch, data, match):
    with raises_before_driver(monkeypatch, ValueError, match):
        backend.upload("Q4_0", (ROWS, K), data)


def test_wrong_byte_count_plain(backend, monkeypatch):
    with raises_before_driver(monkeypatch, ValueError, "must be 400 bytes"):
        backend.upload("F32", (1, 100), np.zeros(99, np.float32))


@pytest.mark.parametrize("qtype, k, block", [("Q4_0", 100, 32), ("Q4_K", 512 + 32, 256), ("MXFP4", 16, 32),
                                              ("NVFP4", 96, 64), ("Q1_0", 64, 128), ("Q2_0", 32, 64),
                                              ("TQ1_0", 576, 256), ("TQ2_0", 128, 256)])
def test_k_not_multiple_of_block(backend, monkeypatch, qtype, k, block):
    with raises_before_driver(monkeypatch, ValueError, rf"K={k}.*block size {block}"):
        backend.upload(qtype, (ROWS, k), np.zeros(4096, np.uint8))


@pytest.mark.parametrize("qtype, match", [
    ("Q4_9", "Q4_9"),
    ("", "unknown"),
    (GGMLType.IQ2_XXS, "IQ2_XXS"),
    (GGMLType.BF16, "BF16"),
    (12345, "12345"),
], ids=["Q4_9", "empty", "IQ2_XXS", "BF16", "12345"])
def test_unknown_or_unsupported_type(backend, monkeypatch, qtype, match):
    with raises_before_driver(monkeypatch, ValueError, match):
        backend.upload(qtype, (ROWS, K), np.zeros(Q4_0_BYTES, np.uint8))


@pytest.mark.parametrize("shape", [
    (-8, 64), (8, -64), (0, 64), (8, 0), (64,), (2, 2, 8, 64), (), (0, 8, 64),
], ids=["neg-rows", "neg-k", "zero-rows", "zero-k", "1d", "4d", "0d", "zero-experts"])
def test_bad_shape(backend, monkeypatch, shape):
    with raises_before_driver(monkeypatch, ValueError, "shape"):
        backend.upload("Q4_0", shape, np.zeros(Q4_0_BYTES, np.uint8))


@pytest.mark.parametrize("shape", [(2.5, 32), (2, 32.5), ("2", "32")], ids=["float-rows", "float-k", "str"])
def test_shape_of_non_integers(backend, monkeypatch, shape):
    """Sizes are not silently truncated or parsed (2.5 rows is not 2 rows)."""
    with raises_before_driver(monkeypatch, (TypeError, ValueError), "shape"):
        backend.upload("Q4_0", shape, np.zeros(2 * 18, np.uint8))


def test_shape_not_a_sequence(backend, monkeypatch):
    with raises_before_driver(monkeypatch, TypeError, "shape"):
        backend.upload("Q4_0", 64, np.zeros(Q4_0_BYTES, np.uint8))


def test_shape_as_the_gguf_package_gives_it(backend, monkeypatch, tmp_path):
    """gguf.GGUFReader lists a matrix's shape K first. Passed as is with its
    data, the byte count agrees (rows * K either way) and, unrefused, vkq read
    the rows as K: garbage from every mat-vec. The data's own rows refuse it,
    naming the shape to pass; that shape then multiplies right."""
    import gguf
    from conftest import finish_gguf

    rows, k = 96, 64  # both multiples of Q8_0's block: the reversed shape passes every other check
    data = ggml_quant.random_weights(rows, k, "Q8_0")
    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    writer.add_tensor("w", data, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    t = gguf.GGUFReader(finish_gguf(writer, tmp_path / "m.gguf")).tensors[0]
    assert tuple(int(d) for d in t.shape) == (k, rows) and t.data.shape == data.shape  # the package's order
    with raises_before_driver(monkeypatch, ValueError,
                              r"^Q8_0 data of shape \(96, 68\) contradicts shape \(64, 96\) \(the data's leading "
                              r"dimensions must be \(64,\)\): vkq's shape is \(rows, K\) or \(n_expert, rows, K\), "
                              r"K last, where the gguf package's tensor.shape lists K first: pass shape \(96, 64\)$"):
        backend.upload("Q8_0", t.shape, t.data)
    w = backend.upload("Q8_0", tuple(reversed(t.shape)), t.data)
    x = random_x(k)
    assert ref.nmse(backend.matvec(w, x), ref.dequantize("Q8_0", (rows, k), data) @ x) < NMSE_GGML


@pytest.mark.parametrize("qtype, shape, data, match", [
    ("F32", (40, 24), np.zeros((24, 40), np.float32), r"F32 data of shape \(24, 40\).*pass shape \(24, 40\)$"),
    ("F16", (40, 24), np.zeros((24, 80), np.uint8), r"must be \(40,\).*pass shape \(24, 40\)$"),
    ("Q4_0", (K, ROWS, N_EXPERT), np.zeros((N_EXPERT, ROWS, 36), np.uint8),
     rf"must be \({K}, {ROWS}\).*pass shape \({N_EXPERT}, {ROWS}, {K}\)$"),
    ("Q4_0", (ROWS, N_EXPERT, K), np.zeros((N_EXPERT, ROWS, 36), np.uint8),
     rf"must be \({ROWS}, {N_EXPERT}\).*K last \(the gguf package's tensor.shape lists K first\)$"),
    ("Q4_0", (N_EXPERT, ROWS, K), np.zeros((N_EXPERT, ROWS * 36), np.uint8),
     rf"shape \({N_EXPERT}, {ROWS * 36}\) .*must be \({N_EXPERT * ROWS},\)"),
], ids=["f32-transposed", "f16-bytes-transposed", "experts-reversed", "experts-rows-swapped", "experts-as-rows"])
def test_data_dimensions_contradict_the_shape(backend, monkeypatch, qtype, shape, data, match):
    """The same byte count, other rows: 2-D data's rows (all experts' rows
    stacked) or 3-D data's (experts, rows) must be the shape's."""
    with raises_before_driver(monkeypatch, ValueError, match):
        backend.upload(qtype, shape, data)


def test_data_dimensions_that_agree_are_taken(backend):
    """Stacked rows (2-D), experts (3-D), a list of blocks (one 18-byte Q4_0
    block a row, as quantizers return them) and flat bytes all agree with their shape."""
    data = ggml_quant.random_weights(N_EXPERT * ROWS, K, "Q4_0")
    want = ref.dequantize("Q4_0", (N_EXPERT, ROWS, K), data)
    x = random_x(K)
    for d in (data, data.reshape(N_EXPERT, ROWS, -1), data.reshape(-1, 18), data.reshape(-1), data.tobytes()):
        w = backend.upload("Q4_0", (N_EXPERT, ROWS, K), d)
        assert ref.nmse(backend.matvec_id(w, x, np.array([2], np.int32))[0], want[2] @ x) < NMSE_GGML
        w.free()


@pytest.mark.parametrize("qtype, data, match", [
    ("Q4_0", np.zeros(Q4_0_BYTES // 4, np.float32), "float32"),
    ("Q4_0", np.zeros(Q4_0_BYTES // 2, np.float16), "float16"),
    ("F16", np.zeros(ROWS * K, np.float32), "float32"),
    ("F32", np.zeros(ROWS * K, np.float64), "float64"),
    ("Q4_0", list(range(Q4_0_BYTES)), "list"),
    ("Q4_0", "abc", "str"),
], ids=["f32-for-Q4_0", "f16-for-Q4_0", "f32-for-F16", "f64-for-F32", "list", "str"])
def test_data_of_wrong_type(backend, monkeypatch, qtype, data, match):
    with raises_before_driver(monkeypatch, TypeError, match):
        backend.upload(qtype, (ROWS, K), data)


# -- matvec ----------------------------------------------------------------

@pytest.mark.parametrize("x, exc, match", [
    (np.zeros(K + 1, np.float32), ValueError, rf"\({K},\)"),
    (np.zeros(K - 32, np.float32), ValueError, rf"\({K},\)"),
    (np.zeros((1, K), np.float32), ValueError, "shape"),
    (np.zeros((K, 2, 1), np.float32), ValueError, "shape"),
    (np.zeros((), np.float32), ValueError, "shape"),
    (np.zeros((K, 9), np.float32), ValueError, "9 columns"),
    (np.zeros((K, 0), np.float32), ValueError, "0 columns"),
    (np.full(K, 1e39), ValueError, r"^x \(float64\) holds 1e\+39 at flat index 0, beyond float32's range"),
    (np.zeros(K, np.int32), TypeError, "int32"),
    (np.zeros(K, bool), TypeError, "bool"),
    ([0.0] * K, TypeError, "list"),
], ids=["K+1", "K-32", "row-vector", "3d", "scalar", "9-cols", "0-cols", "float64-overflow", "int32", "bool",
        "list"])
def test_bad_x(backend, monkeypatch, q4_0, x, exc, match):
    with raises_before_driver(monkeypatch, exc, match):
        backend.matvec(q4_0, x)


@pytest.mark.parametrize("path", ["mmvq", "MMVQ"])
def test_mmvq_on_plain_type(backend, monkeypatch, f16, path):
    with raises_before_driver(monkeypatch, ValueError, "F16 has no int8"):
        backend.matvec(f16, random_x(K), path=path)


@pytest.mark.parametrize("path", ["fast", "", 3])
def test_unknown_path(backend, monkeypatch, q4_0, path):
    with raises_before_driver(monkeypatch, (ValueError, TypeError), "path"):
        backend.matvec(q4_0, random_x(K), path=path)


def test_env_path_bogus(backend, monkeypatch, q4_0):
    monkeypatch.setenv("VKQ_PATH", "bogus")
    with raises_before_driver(monkeypatch, ValueError, "VKQ_PATH"):
        backend.matvec(q4_0, random_x(K))


def test_matvec_on_expert_stack(backend, monkeypatch, experts):
    with raises_before_driver(monkeypatch, ValueError, "matvec_id"):
        backend.matvec(experts, random_x(K))


@pytest.mark.parametrize("glu", ["yes", "", 1, None], ids=["yes", "empty", "one", "None"])
def test_glu_that_is_not_a_bool(backend, monkeypatch, glu):
    """Graph.matvec's glu is True or False: anything else is a TypeError
    naming it ("yes" was "invalid literal for int()"; 1, "" and None passed as truthy or not)."""
    stacked = backend.upload("Q4_0", (2 * ROWS, K), ggml_quant.random_weights(2 * ROWS, K, "Q4_0"))
    x = backend.tensor(K)
    g = backend.graph()
    with raises_before_driver(monkeypatch, TypeError, rf"glu must be True or False, got {glu!r}"):
        g.matvec(stacked, x, glu=glu)


def test_matvec_id_on_matrix(backend, monkeypatch, q4_0):
    with raises_before_driver(monkeypatch, ValueError, "expert stack"):
        backend.matvec_id(q4_0, random_x(K), np.zeros(2, np.int32))


@pytest.mark.parametrize("weights", [None, np.zeros((ROWS, K), np.float32), "Q4_0"], ids=["None", "array", "str"])
def test_not_weights(backend, monkeypatch, weights):
    with raises_before_driver(monkeypatch, TypeError, "vkq.Weights"):
        backend.matvec(weights, random_x(K))


def test_weights_from_another_backend(backend, monkeypatch):
    other = vkq.Backend()
    w = other.upload("Q4_0", (ROWS, K), ggml_quant.random_weights(ROWS, K, "Q4_0"))
    with raises_before_driver(monkeypatch, TypeError, "this backend"):
        backend.matvec(w, random_x(K))
    with raises_before_driver(monkeypatch, TypeError, "this backend"):
        backend.matvec_id(w, random_x(K), np.zeros(1, np.int32))


# -- matvec_id -------------------------------------------------------------

@pytest.mark.parametrize("ids, exc, match", [
    (np.zeros(2, np.float32), TypeError, "int32"),
    (np.zeros(2, bool), TypeError, "int32"),
    ([0, 1], TypeError, "int32"),
    (np.array([0, -1], np.int32), ValueError, r"out of range.*-1"),
    (np.array([1, N_EXPERT], np.int32), ValueError, rf"out of range.*{N_EXPERT}"),
    (np.array([1, 2**32 + 1]), ValueError, r"out of range: \[4294967297\]"),  # (int32 would wrap it to 1)
    (np.zeros(0, np.int32), ValueError, "n_used"),
    (np.zeros((2, 2), np.int32), ValueError, "n_used"),
], ids=["float32", "bool", "list", "minus-1", "n_expert", "int64-past-int32", "empty", "2d"])
def test_bad_ids(backend, monkeypatch, experts, ids, exc, match):
    with raises_before_driver(monkeypatch, exc, match):
        backend.matvec_id(experts, random_x(K), ids)


@pytest.mark.parametrize("x, exc, match", [
    (np.zeros((3, K), np.float32), ValueError, r"\(2, 64\)"),
    (np.zeros((1, K), np.float32), ValueError, r"\(2, 64\)"),
    (np.zeros((K, 2), np.float32), ValueError, r"\(2, 64\)"),
    (np.zeros(K + 1, np.float32), ValueError, r"\(64,\)"),
    (np.full(K, -1e300), ValueError, "beyond float32's range"),
    (np.zeros(K, np.int64), TypeError, "int64"),
    ([0.0] * K, TypeError, "list"),
], ids=["3-rows", "1-row", "transposed", "K+1", "float64-overflow", "int64", "list"])
def test_bad_x_for_matvec_id(backend, monkeypatch, experts, x, exc, match):
    with raises_before_driver(monkeypatch, exc, match):
        backend.matvec_id(experts, x, np.array([0, 3], np.int32))


def test_numpy_dtypes_are_converted(backend, q4_0, experts):
    """numpy's defaults, float64 x and int64 ids, give what their float32 and
    int32 values give (float16 x and other integer ids too); a float64 inf or
    NaN stays one (only a finite value beyond float32's range is refused)."""
    x64 = np.random.default_rng(3).uniform(-1, 1, K)
    x = x64.astype(np.float32)
    want = backend.matvec(q4_0, x)
    np.testing.assert_array_equal(backend.matvec(q4_0, x64), want)
    np.testing.assert_array_equal(backend.matvec(q4_0, np.stack([x64, x64], axis=1)), np.stack([want, want], 1))
    np.testing.assert_array_equal(backend.matvec(q4_0, x64.astype(np.float16)),
                                  backend.matvec(q4_0, x64.astype(np.float16).astype(np.float32)))
    assert [y.tolist() for y in backend.matvec_many([(q4_0, x64), (q4_0, x64)])] == [want.tolist()] * 2
    want_id = backend.matvec_id(experts, x, np.array([3, 0], np.int32))
    for ids in (np.array([3, 0]), np.array([3, 0], np.uint8), np.array([3, 0], np.uint64)):
        np.testing.assert_array_equal(backend.matvec_id(experts, x64, ids), want_id)
    x64[5] = np.inf
    assert not np.isfinite(backend.matvec(q4_0, x64)).all()


def test_mmvq_on_plain_expert_stack(backend, monkeypatch):
    w = backend.upload("F32", (2, ROWS, K), np.zeros((2, ROWS, K), np.float32))
    with raises_before_driver(monkeypatch, ValueError, "F32 has no int8"):
        backend.matvec_id(w, random_x(K), np.zeros(1, np.int32), path="mmvq")


# -- devices ---------------------------------------------------------------

def test_env_device_out_of_range(monkeypatch):
    monkeypatch.setenv("VKQ_DEVICE", "7")
    with pytest.raises(ValueError, match="index 7"):
        vkq.Backend()


@pytest.mark.parametrize("device", [7, -1])
def test_device_argument_out_of_range(device):
    with pytest.raises(ValueError, match=f"index {device}"):
        vkq.Backend(device)


def test_env_device_not_a_number(monkeypatch):
    monkeypatch.setenv("VKQ_DEVICE", "gpu0")
    with pytest.raises(ValueError, match="VKQ_DEVICE"):
        vkq.Backend()


# -- GGUF files ------------------------------------------------------------

def test_load_gguf_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GGUF file"):
        vkq.load_gguf(tmp_path / "missing.gguf")


def test_load_gguf_not_a_gguf(tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"this is not a gguf file" * 10)
    with pytest.raises(ValueError, match="not a readable GGUF"):
        vkq.load_gguf(path)


@pytest.mark.parametrize("device", [1.5, True, False, "0", 0.0])
def test_device_argument_not_an_integer(device):
    """Backend(1.5) or Backend(True) would have meant device 1 (int())."""
    with pytest.raises(TypeError, match="device must be an integer index"):
        vkq.Backend(device)


def test_device_argument_numpy_integer(backend):
    import numpy as np

    assert vkq.Backend(np.int64(0)).device_info == backend.device_info
