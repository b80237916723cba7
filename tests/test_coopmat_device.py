"""The cooperative-matrix mat-mat computed on a device that has it: lavapipe
26 (8x8x8 fragments, emulated) or a GPU; skipped, with the reason, on a
device that lacks it (lavapipe 22.3).

Both flavours against float64 for every type at odd shapes (rows and columns
not multiples of the tile, K an odd number of chunks; with a K step of two
chunks a partial last step; test_matmul.check): the float16 flavour within
the project's NMSE of 5e-4 of the exact product (its tiles are float16); the int8 flavour
held to the int8 path's model as the int8 tiled kernel is, whose bits it
gives (the same chunk sums in the same order). A column's bits do not
depend on the other columns of its call, so a prompt's logits do not
depend on how it is cut. Then MUL_MAT_ID, the dispatcher's choice after the
self-check (and VKQ_MATMUL forcing a kernel), and `vkq tune`'s race, for
real. On lavapipe each type's pipelines take a few seconds to compile: one
case per type here, the larger ones slow.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS
from vkq.dispatch import coopmat, tiles

from conftest import NMSE_GGML, TYPES, assert_matches, random_x
from test_matmul import INT8_TYPES, REGISTERS_INT8, case, check, odd_k, refs_of

ROWS = 49



def caps_with(backend, flavour: str):
    """The device's caps, or a skip where it cannot run the flavour, saying why."""
    missing = coopmat.device_missing(backend.device.caps, flavour)
    if missing:
        pytest.skip(f"no cooperative-matrix {flavour} flavour on this device: {missing}")
    return backend.device.caps


@pytest.fixture
def caps(backend):
    return caps_with(backend, "float16")


@pytest.fixture
def int8_caps(backend):
    return caps_with(backend, "int8")


@pytest.mark.parametrize("qtype", TYPES)
def test_every_type_float16(backend, caps, qtype):
    k = odd_k(qtype)
    cfg = tiles.coopmat_config(caps, FORMATS[qtype], k)
    assert cfg.kernel == f"mul_mm coopmat f16 {'x'.join(map(str, caps.coopmat_fragment))}"
    check(backend, qtype, ROWS, k, cfg)


@pytest.mark.parametrize("qtype", INT8_TYPES)
def test_every_type_int8(backend, int8_caps, qtype):
    k = odd_k(qtype)
    cfg = tiles.coopmat_config(int8_caps, FORMATS[qtype], k, flavour="int8")
    assert cfg.path == "mmvq" and cfg.kernel == f"mul_mm coopmat int8 {'x'.join(map(str, int8_caps.coopmat_int8_fragment))}"
    check(backend, qtype, ROWS, k, cfg)


def test_int8_gives_the_int8_tiled_kernels_bits(backend, int8_caps):
    """The same chunk sums (chunk_dot's arithmetic, kept from fused
    multiply-adds), added in the same order: the bits of the int8 tiled
    kernel, on both of its activation-free ways of summing (OpSDot or not)."""
    k = odd_k("Q5_K")
    w, _ = case(backend, "Q5_K", ROWS, k)
    x = random_x(k, 37)
    cfg = tiles.coopmat_config(int8_caps, FORMATS["Q5_K"], k, flavour="int8")
    np.testing.assert_array_equal(backend.matmul(w, x, config=cfg), backend.matmul(w, x, config=REGISTERS_INT8))


def check_padded(backend, caps, qtype: str, bk_chunks: int = 1) -> None:
    """The int8 flavour's padded layout (each weights chunk lo | zeros | hi,
    as fragments 32 deep take it) forced at the device's own fragment: held
    to the int8 path's model and float64 (check: 9 and 37 columns, K an odd
    number of chunks), and bit for bit the plain layout's output (each half's
    integer sum is exact either way; the rescale is the same)."""
    k = odd_k(qtype)
    plain = dataclasses.replace(tiles.coopmat_config(caps, FORMATS[qtype], k, flavour="int8"), bk_chunks=bk_chunks)
    padded = dataclasses.replace(plain, padded_halves=True)
    assert padded.kernel.endswith(" padded") and not plain.padded_halves
    check(backend, qtype, ROWS, k, padded)
    w, _ = case(backend, qtype, ROWS, k)
    for n in (9, 37):
        x = random_x(k, n, seed=n)
        np.testing.assert_array_equal(backend.matmul(w, x, config=padded), backend.matmul(w, x, config=plain))


@pytest.mark.parametrize("qtype, bk_chunks", [("Q6_K", 2), ("Q4_0", 1)])
def test_int8_padded_layout(backend, int8_caps, qtype, bk_chunks):
    """Q6_K's scales differ between a chunk's halves (a half summed into the
    other's would show), at a K step of two chunks (the last one past the end
    of K: two chunks' zeros a row); Q4_0 at the default step."""
    check_padded(backend, int8_caps, qtype, bk_chunks)


@pytest.mark.slow
@pytest.mark.parametrize("qtype", INT8_TYPES)
def test_every_type_int8_padded_layout(backend, int8_caps, qtype):
    check_padded(backend, int8_caps, qtype)


def partial_step(caps, flavour: str) -> tiles.TileConfig:
    """The device's default tile with a K step of two chunks: at an odd
    number of chunks its last step is half past the end of K."""
    return dataclasses.replace(tiles.coopmat_config(caps, FORMATS["Q4_0"], 4096, flavour=flavour), bk_chunks=2)


def test_a_partial_last_k_step(backend, caps):
    check(backend, "Q4_0", ROWS, odd_k("Q4_0"), partial_step(caps, "float16"))
    if caps.coopmat_int8:
        check(backend, "Q4_0", ROWS, odd_k("Q4_0"), partial_step(caps, "int8"))


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["Q4_K", "IQ4_NL", "F16"])
def test_many_columns_and_a_long_k(backend, caps, qtype):
    """n up to 1000 and K of a 14336-wide FFN row (lavapipe's loop budget)."""
    cfg = tiles.coopmat_config(caps, FORMATS[qtype], 14336)
    check(backend, qtype, ROWS, 14336, cfg, ncols=(9, 1000))
    if FORMATS[qtype].has_int8_path and caps.coopmat_int8:
        check(backend, qtype, ROWS, 14336, tiles.coopmat_config(caps, FORMATS[qtype], 14336, flavour="int8"),
              ncols=(9, 1000))


@pytest.mark.parametrize("flavour, qtype", [("float16", "Q4_0"), ("int8", "Q4_K")])
def test_mul_mat_id(backend, caps, flavour, qtype):
    """MoE prompts: MUL_MAT_ID over many tokens on either flavour, every
    expert's slots right, shared and per-slot x."""
    from test_matmul_id import check as check_id

    if flavour == "int8" and not caps.coopmat_int8:
        pytest.skip(f"no int8 flavour: {caps.coopmat_int8_missing}")
    cfg = tiles.coopmat_config(caps, FORMATS[qtype], odd_k(qtype), flavour=flavour)
    if flavour == "int8":
        check_id(backend, qtype, cfg, n_tokens=(9, 40))
    else:  # (float16 tiles: held to 5e-4 of float64 per expert)
        from test_matmul_id import experts, random_ids, token_x

        k = odd_k(qtype)
        w, w64, _ = experts(backend, qtype, k)
        for n in (9, 40):
            ids, x = random_ids(n, seed=n), token_x(n, k, False, seed=n)
            y = backend.matmul_id(w, x, ids, config=cfg)
            for e in np.unique(ids):
                t, j = np.nonzero(ids == e)
                assert ref.nmse(y[t, j].T, w64[e] @ x[t].T.astype(np.float64)) < NMSE_GGML, (n, e)


@pytest.mark.slow
def test_mul_mat_id_int8_padded_layout(backend, int8_caps):
    """MUL_MAT_ID through the padded int8 layout (Q6_K: its halves' scales differ)."""
    from test_matmul_id import check as check_id

    cfg = tiles.coopmat_config(int8_caps, FORMATS["Q6_K"], odd_k("Q6_K"), flavour="int8")
    check_id(backend, "Q6_K", dataclasses.replace(cfg, padded_halves=True), n_tokens=(9, 40))


@pytest.fixture
def unchecked(backend, tmp_path, monkeypatch):
    """This device's dispatcher with no self-check yet (and a tuning directory of its own)."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    monkeypatch.setattr(backend.dispatcher, "coopmat_checks", {})
    return backend


def test_the_dispatcher_takes_it_after_its_self_check(unchecked, caps):
    """At a type's first mat-mat: each flavour offered is checked against
    the tiled kernel of its path (kept on disk), then the dispatcher takes
    the flavour of the path the tiles take: int8 for q8_1 activations where
    the tiles take the int8 path, else float16; a path asked for takes the
    tiles. The kernel that runs is the one matmul_pipeline names."""
    backend = unchecked
    k = odd_k("Q4_0")
    w, w64 = case(backend, "Q4_0", ROWS, k)
    flavours = {a: tiles.choose(backend.dispatcher.device_class, caps, FORMATS["Q4_0"], k, activations=a).path
                for a in ("q8_1", "q8_1x2")}
    for acts, path in flavours.items():
        cfg = backend.matmul_pipeline(w, 40, activations=acts)
        want = "int8" if path == "mmvq" and caps.coopmat_int8 and acts == "q8_1" else "float16"
        assert cfg.coopmat and cfg.flavour == want, cfg
        assert "self-checked on this device: NMSE" in cfg.source
        x = random_x(k, 40)
        y = backend.matmul(w, x, activations=acts)
        if want == "int8":
            assert_matches(y, refs_of(w64, x, cfg), cfg.path)
        else:
            assert ref.nmse(y, w64 @ x.astype(np.float64)) < NMSE_GGML
    checks = coopmat.load_checks(backend.device_info)
    assert coopmat.passes(checks["Q4_0"]) and (not caps.coopmat_int8 or coopmat.passes(checks["Q4_0 int8"]))
    assert not backend.matmul_pipeline(w, 40, path="dmmv").coopmat


def test_vkq_matmul_forces_a_kernel(backend, monkeypatch):
    """VKQ_MATMUL=tiled|coopmat|coopmat-int8: that kernel (unchecked), named
    by matmul_pipeline; refused in one line where the device or the type
    lacks it. Runs on any device (lavapipe 22.3 refuses both flavours)."""
    k = odd_k("Q4_0")
    w, _ = case(backend, "Q4_0", ROWS, k)
    f16 = backend.upload("F16", (16, 64), np.zeros((16, 64), np.float16))
    caps = backend.device.caps
    try:
        monkeypatch.setenv("VKQ_MATMUL", "tiled")
        assert not backend.matmul_pipeline(w, 40).coopmat and "VKQ_MATMUL=tiled" in backend.matmul_pipeline(w, 40).source
        for kernel, flavour, missing in (("coopmat", "float16", caps.coopmat_missing),
                                         ("coopmat-int8", "int8", caps.coopmat_int8_missing)):
            monkeypatch.setenv("VKQ_MATMUL", kernel)
            if missing:
                with pytest.raises(ValueError, match=f"^VKQ_MATMUL={kernel}: not for Q4_0 on this device "
                                                     rf"\({missing[:20]}"):
                    backend.matmul(w, random_x(k, 40))
                continue
            cfg = backend.matmul_pipeline(w, 40)
            assert cfg.flavour == flavour and cfg.source.startswith(f"VKQ_MATMUL={kernel} (forced; ")
            assert backend.matmul(w, random_x(k, 40)).shape == (ROWS, 40)
        monkeypatch.setenv("VKQ_MATMUL", "coopmat-int8")
        with pytest.raises(ValueError, match="^VKQ_MATMUL=coopmat-int8: not for F16 on this device"):
            backend.matmul(f16, random_x(64, 40))
        if caps.coopmat_int8:
            with pytest.raises(ValueError, match="takes one activation plane .q8_1., not q8_1x2"):
                backend.matmul(w, random_x(k, 40), activations="q8_1x2")
            with pytest.raises(ValueError, match="runs the mmvq path; the call asked for dmmv"):
                backend.matmul(w, random_x(k, 40), path="dmmv")
        monkeypatch.setenv("VKQ_MATMUL", "wmma")
        with pytest.raises(ValueError, match="^VKQ_MATMUL='wmma' is not a mat-mat kernel; use one of tiled, "
                                             "coopmat, coopmat-int8$"):
            backend.matmul(w, random_x(k, 40))
    finally:
        f16.free()


@pytest.mark.parametrize("kernel, model", [("coopmat", "tiny"), ("coopmat-int8", "tiny"), ("coopmat", "tiny_moe"),
                                           (None, "tiny")])
def test_prompt_logits_do_not_depend_on_the_chunks(backend, request, monkeypatch, tmp_path, kernel, model):
    """`vkq generate`'s prompt through the cooperative-matrix kernels (every
    mat-mat of the model forced to them, MUL_MAT_ID's too; int8 on q8_1
    activations, which it takes; or, kernel None, the dispatcher's own choice
    after each type's self-check): the same logits, bit for bit, however the
    prompt is cut into chunks."""
    from vkq.llama.gpu_step import GpuLlama
    from vkq.resolve import resolve_tiles

    caps = backend.device.caps
    missing = caps.coopmat_int8_missing if kernel == "coopmat-int8" else caps.coopmat_missing
    if missing:
        pytest.skip(f"{kernel or 'coopmat'}: {missing}")
    if kernel is None:
        monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
        monkeypatch.setattr(backend.dispatcher, "coopmat_checks", {})
    else:
        monkeypatch.setenv("VKQ_MATMUL", kernel)
    path, acts = ("mmvq", "q8_1") if kernel == "coopmat-int8" else ("auto", None)
    path_file = request.getfixturevalue(model)
    a = GpuLlama(path_file, backend, path, ctx=48, prompt_chunk=16, prompt_kernels="matmul", activations=acts)
    b = GpuLlama(path_file, backend, path, ctx=48, prompt_chunk=5, prompt_kernels="matmul", activations=acts)
    ids = a.tokenizer.encode("the theory that the three then- the other thing that the world")[:21]
    la, lb = a.logits(ids), b.logits(ids)
    assert np.isfinite(la).all()
    np.testing.assert_array_equal(la, lb)
    w = next(w for names, w in a.weights.items()
             if names != a.file.output_group and not w.is_expert_stack and w.layout.fmt.name != "F32")
    assert resolve_tiles(backend, w, 16, None if path == "auto" else path, None, a.activations).coopmat


def test_tune_races_it_for_real(unchecked, caps):
    """`vkq tune`'s tile phase on this device: the type's self-checks run,
    each flavour the mat-mat takes (int8 for q8_1 where the tiles take the
    int8 path, float16 otherwise) timed in the final race beside the tiles
    for the activation formats it serves, its record saved; the dispatcher
    then follows each record's word (the kernel where it won, the tiles,
    saying so, where it did not)."""
    from vkq.commands import tune
    from vkq.dispatch import tile_tuning, tuning_store
    from vkq.dispatch.choose import Dispatcher

    from test_tile_tuning import entry

    backend, notes = unchecked, {}
    t = tune.tune_tiles(tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1), quick=True, notes=notes)
    assert coopmat.passes(backend.dispatcher.coopmat_checks["Q4_0"])
    assert tuning_store.tile_problems("Q4_0", t) == []
    tuning_store.save(backend.device_info, {"Q4_0": entry(t)})
    d = Dispatcher.for_device(backend.device_info, backend.device.caps)
    for acts in ("q8_1", "q8_1x2"):
        flavour = "int8" if t["best"][acts] == "mmvq" and acts == "q8_1" and caps.coopmat_int8 else "float16"
        race = tuning_store.coopmat_race(t, acts, flavour)
        assert race is not None and race.nmse <= coopmat.CHECK_NMSE, (acts, t, notes)
        cfg = tile_tuning.choose(d, FORMATS["Q4_0"], 256, activations=acts)
        assert cfg.coopmat == race.won, cfg.source
        assert cfg.flavour == flavour if race.won else cfg.source.startswith("cooperative matrices not used: ")
