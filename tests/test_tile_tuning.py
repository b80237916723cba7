"""`vkq tune`'s tiles for the tiled mat-mat: stored per type and path in the
tuning file, read back, chosen first by the dispatcher (their `source` says
so, with the figures), refused where invalid (the whole file, as any bad
entry) or where they do not fit the device at a K (the tile table then, with
a note); files without them still load. The search itself with fake timings
(no pipeline is built), and once for real on lavapipe (slow)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.commands import info as info_cmd
from vkq.commands import tune
from vkq.device.caps import DeviceCaps
from vkq.device.device_info import DeviceInfo
from vkq.dispatch import tile_tuning, tiles, tuning_store
from vkq.dispatch.choose import Dispatcher
from vkq.dispatch.classify import classify

ROOT = Path(__file__).resolve().parent.parent
LAVAPIPE = DeviceInfo.from_dict(json.loads((ROOT / "tests" / "devices" / "lavapipe.json").read_text()))
CAPS = DeviceCaps.of(LAVAPIPE, int_dot=False)
MATVEC = {"wg_size": 8, "rows_per_wg": 2, "chunks_per_thread": 1, "reduction": "shared", "split_k": True}
# Tiles other than the lavapipe entry's (64x8, 8x8 per invocation), so that a choice shows where it came from.
TUNED = {"bm": 32, "bn": 8, "bk_chunks": 8, "tm": 8, "tn": 8, "shared_tiles": False, "binding": "storage",
         "value_lookup": "table"}


def tiles_entry(**over) -> dict:
    """A "tiles" object as tune_tiles writes it: the float path best for both formats."""
    t = {"n": 512, "k_min": 4096, "shapes": [[4096, 4096]], "best": {"q8_1": "dmmv", "q8_1x2": "dmmv"},
         "dmmv": dict(TUNED), "mmvq": dict(TUNED, bm=128), "gflops": {"dmmv": [10.0, 12.5], "mmvq": [9.0, 9.5]},
         "spread": {"dmmv": 0.01, "mmvq": 0.02}}
    t.update(over)
    return t


def entry(tiles_obj: dict | None = None) -> dict:
    e = {"best": "dmmv", "k_min": 4096, "shapes": [[4096, 4096]], "dmmv": dict(MATVEC),
         "gbps": {"dmmv": [1.0, 1.0]}, "spread": {"dmmv": 0.0}}
    if tiles_obj is not None:
        e["tiles"] = tiles_obj
    return e


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path / "tuning"))
    return tmp_path / "tuning"


def dispatcher(tuned: dict) -> Dispatcher:
    return Dispatcher(CAPS, classify(LAVAPIPE), tuned)


def test_stored_read_back_and_chosen_first(tuning_dir):
    tuning_store.save(LAVAPIPE, {"Q4_0": entry(tiles_entry())})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = tuning_store.load(LAVAPIPE)
    assert loaded["Q4_0"]["tiles"] == tiles_entry()
    cfg = tile_tuning.choose(dispatcher(loaded), FORMATS["Q4_0"], 4096)
    assert (cfg.path, cfg.bm, cfg.tm, cfg.binding) == ("dmmv", 32, 8, "storage")
    assert cfg.source.startswith("tiles tuned on this device (vkq tune, 4096x4096 by 512 columns: 12.5 GFLOP/s "
                                 "against the table's 10.0); path from this device's vkq tune"), cfg.source
    assert cfg.evidence == {"tuned"}
    # The caller's path takes that path's tuned tiles (on the int8 path with OpSDot's emulation here).
    cfg = tile_tuning.choose(dispatcher(loaded), FORMATS["Q4_0"], 8192, path="mmvq")
    assert (cfg.path, cfg.bm, cfg.int_dot) == ("mmvq", 128, False)
    assert "path from argument" in cfg.source and "int32 emulation of OpSDot" in cfg.source


def test_the_table_where_nothing_tuned_serves(tuning_dir, monkeypatch):
    """K below k_min, activations without tuned tiles for the chosen path,
    another type, and a file of before (no tiles): the tile table's choice,
    as without tuning."""
    tuned = {"Q4_0": entry(tiles_entry(best={"q8_1": "dmmv"}))}
    table = lambda qtype, k, **kw: tiles.choose(classify(LAVAPIPE), CAPS, FORMATS[qtype], k, **kw)  # noqa: E731
    d = dispatcher(tuned)
    for got, want in [(tile_tuning.choose(d, FORMATS["Q4_0"], 2048), table("Q4_0", 2048)),
                      (tile_tuning.choose(d, FORMATS["Q4_0"], 4096, "mmvq", "q8_1x2"),
                       table("Q4_0", 4096, path="mmvq", activations="q8_1x2")),
                      (tile_tuning.choose(d, FORMATS["Q8_0"], 4096), table("Q8_0", 4096))]:
        assert got == want and got.source == want.source and "tuned" not in got.source
    monkeypatch.setenv("VKQ_PATH", "mmvq")  # (no tuned mmvq tiles for q8_1x2: the table's, VKQ_PATH's path)
    assert tile_tuning.choose(d, FORMATS["Q4_0"], 4096, activations="q8_1x2").source == \
        table("Q4_0", 4096, activations="q8_1x2").source
    tuning_store.save(LAVAPIPE, {"Q4_0": entry()})  # a file written before the mat-mat was tuned
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old = tuning_store.load(LAVAPIPE)
    assert "tiles" not in old["Q4_0"]
    assert tile_tuning.choose(dispatcher(old), FORMATS["Q4_0"], 4096).source == table("Q4_0", 4096).source


def test_tuned_tiles_that_do_not_fit_take_the_table_with_a_note():
    """Not adapted: the tile table's entry, fitted as always, its source
    saying why the tuned tiles were not used."""
    huge = dict(TUNED, bm=256, bn=256, tm=8, tn=8, shared_tiles=True)  # 520 KiB of shared memory
    d = dispatcher({"Q4_0": entry(tiles_entry(dmmv=huge))})
    cfg = tile_tuning.choose(d, FORMATS["Q4_0"], 4096)
    table = tiles.choose(classify(LAVAPIPE), CAPS, FORMATS["Q4_0"], 4096)
    assert cfg == table
    assert cfg.source.startswith("tuned tiles not used at K=4096 (config does not fit this device: ")
    assert "bytes of shared memory > the device's 32768" in cfg.source and cfg.source.endswith(table.source)
    # A K step of 8 chunks without shared memory takes whole units: not at K = 4096 + 32.
    cfg = tile_tuning.choose(dispatcher({"Q4_0": entry(tiles_entry())}), FORMATS["Q4_0"], 4128)
    assert cfg.source.startswith("tuned tiles not used at K=4128") and "whole units" in cfg.source


def test_mul_mat_id_holds_tuned_tiles_to_its_kernel_too():
    """MUL_MAT_ID's kernel walks the experts first (a loop of n_expert
    iterations): tuned tiles that fit the matrix but not that walk under
    lavapipe's loop budget leave the experts the table's tiles, which fit."""
    d = dispatcher({"Q4_0": entry(tiles_entry(dmmv=dict(TUNED, tm=16, tn=4)))})
    n_expert = 50000  # tuned 16x4 per invocation: 20496 iterations at K = 4096, the table's 8x8: 10256
    cfg = tile_tuning.choose(d, FORMATS["Q4_0"], 4096, n_expert=n_expert)
    assert cfg.source.startswith("tuned tiles not used at K=4096") and "over 50000 experts" in cfg.source
    assert not tiles.limit_problems(cfg, CAPS, 4096, n_expert)
    assert tile_tuning.choose(d, FORMATS["Q4_0"], 4096, n_expert=8).source.startswith("tiles tuned on this device")


@pytest.mark.parametrize("bad", [
    {"dmmv": dict(TUNED, tm=3)},  # tm does not divide bm
    {"dmmv": dict(TUNED, colour="red")},
    {"dmmv": {k: v for k, v in TUNED.items() if k != "bk_chunks"}},
    {"best": {"q8_1x2": "mmvq"}},  # no mmvq_q8_1x2 tiles
    {"best": {"q9": "dmmv"}},
    {"gflops": {"dmmv": [0, 1.0]}},
    {"spread": {"mmvq_q8_1x2": 0.1}},  # a figure without tiles
    {"n": 0},
    {"k_min": "4096"},
    {"extra": 1},
], ids=lambda bad: next(iter(bad)) + "=" + repr(next(iter(bad.values())))[:30])
def test_invalid_tiles_make_the_file_ignored(tuning_dir, bad):
    tuning_store.save(LAVAPIPE, {"Q4_0": entry(tiles_entry(**bad))})
    with pytest.warns(UserWarning, match="invalid tuning file .*Q4_0/tiles"):
        assert tuning_store.load(LAVAPIPE) == {}


def test_int8_tiles_for_a_type_without_the_int8_path_are_invalid():
    t = tiles_entry(best={"q8_1": "dmmv"})
    assert any("F16 has no int8 path" in p for p in tuning_store.tile_problems("F16", t))
    assert tuning_store.tile_problems("F16", {k: v for k, v in t.items() if k not in ("mmvq",)} | {
        "gflops": {"dmmv": [1.0, 1.0]}, "spread": {}}) == []
    assert tuning_store.tile_problems("Q4_0", "tiles") == ["Q4_0/tiles: not an object"]


def test_show_and_info_say_tuned(backend, tuning_dir, monkeypatch):
    """`vkq tune --show`'s table has the tuned tiles; `vkq info`'s mat-mat
    line and Backend.matmul_pipeline their source."""
    entries = {"Q4_0": entry(tiles_entry())}
    out = tune.table(entries, ["Q4_0"])
    row = next(line for line in out.splitlines() if line.startswith("| Q4_0") and "GFLOP" not in line
               and "(best for q8_1, q8_1x2)" in line)
    assert " 512 |" in row and " 4096 |" in row and "12.5" in row and "1.25x" in row
    assert "| 32x8, K step 256, 8x8 per invocation, wg 4, no shared memory, weights and x storage " in row
    monkeypatch.setattr(backend.dispatcher, "tuned", entries)
    assert "<- tiles tuned on this device" in info_cmd.matmul_lines(backend)[0]
    w = backend.upload("Q4_0", (64, 4096), np.zeros((64, FORMATS["Q4_0"].row_bytes(4096)), np.uint8))
    cfg = backend.matmul_pipeline(w, 16)
    assert (cfg.bm, cfg.tm) == (32, 8) and cfg.source.startswith("tiles tuned on this device")


class FakeCandidate:
    """A Candidate that builds nothing: its sample is a made-up time per tile
    shape (bm 128 and tm 8 faster), and it records what it was asked to run."""

    built: list = []

    def __init__(self, bench, cfg, passes, ncols=1, units=None):
        for u in bench.units[:units]:
            tiles.check(cfg, bench.dev.caps, bench.fmt, bench.shapes[u.shape][1])  # never a misfit
        self.cfg = cfg
        FakeCandidate.built.append((cfg, ncols))

    def sample(self) -> float:
        return 1.0 / (1 + (self.cfg.bm == 128) + (self.cfg.tm == 8) + (self.cfg.path == "mmvq"))

    def destroy(self) -> None:
        pass


def test_the_search_with_fake_timings(backend, monkeypatch):
    monkeypatch.setattr(tune, "Candidate", FakeCandidate)
    monkeypatch.setattr(tune, "warm_up", lambda run, seconds: run())
    FakeCandidate.built = []
    tb = tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=2)
    notes = {}
    t = tune.tune_tiles(tb, quick=False, notes=notes)
    assert tuning_store.tile_problems("Q4_0", t) == []
    assert all(ncols == tune.TILE_COLS for _, ncols in FakeCandidate.built)
    assert t["n"] == tune.TILE_COLS and t["k_min"] == 256 and t["shapes"] == [[64, 256]]
    for key in ("dmmv", "mmvq", "mmvq_q8_1x2"):
        assert (t[key]["bm"], t[key]["tm"]) == (128, 8), (key, t[key])
        before, after = t["gflops"][key]
        assert after > before
    assert t["best"] == {"q8_1": "mmvq", "q8_1x2": "mmvq"}  # (mmvq made 2x faster by the fake)
    # --quick: the table's paths only (lavapipe: mmvq for q8_1, dmmv for q8_1x2), one new tile shape each.
    FakeCandidate.built = []
    t = tune.tune_tiles(tb, quick=True)
    assert {k for k in t if k in tuning_store.ENTRY_KEYS} == {"dmmv", "mmvq"}
    assert len({cfg for cfg, _ in FakeCandidate.built}) <= 5  # the calibration's, two tables and two new ones
    assert t["best"] == {"q8_1": "mmvq", "q8_1x2": "dmmv"}


@pytest.mark.slow
def test_a_real_quick_tune_of_the_tiles(backend, monkeypatch):
    """On this device, a small matrix, the default activations' variant
    alone (each pipeline compiles for seconds on lavapipe): a valid "tiles"
    object whose tiles the dispatcher then takes for Q4_0, and whose
    products are right."""
    import vkq.blocks.reference as ref
    from conftest import NMSE_GGML

    from vkq.blocks.synthetic import random_weights

    tb = tune.TypeBench(backend, "Q4_0", [(256, 1024)], max_copies=1)  # (a pass of about 50 ms: one pass a sample)
    every = tune.tile_variants
    monkeypatch.setattr(tune, "tile_variants", lambda tb, k, quick: every(tb, k, quick)[-1:])
    t = tune.tune_tiles(tb, quick=True)
    assert tuning_store.tile_problems("Q4_0", t) == [], t
    (key,) = t["gflops"]
    assert set(t["best"].values()) == {tuning_store.ENTRY_KEYS[key][0]}
    assert all(after > 0 for _, after in t["gflops"].values())
    d = Dispatcher(backend.device.caps, backend.dispatcher.device_class, {"Q4_0": entry(t)})
    raw = random_weights(FORMATS["Q4_0"], 128, 1024, np.random.default_rng(3))
    w = backend.upload("Q4_0", (128, 1024), raw)
    x = np.random.default_rng(4).uniform(-1, 1, (1024, 16)).astype(np.float32)
    exact = ref.dequantize("Q4_0", (128, 1024), raw).astype(np.float64) @ x
    for acts, path in t["best"].items():
        cfg = tile_tuning.choose(d, FORMATS["Q4_0"], 1024, activations=acts)
        assert cfg.path == path and cfg.source.startswith("tiles tuned on this device"), cfg.source
        assert ref.nmse(backend.matmul(w, x, config=cfg), exact) < NMSE_GGML


def test_a_file_of_before_gets_its_tiles_alone(backend, tuning_dir, monkeypatch, capsys):
    """`vkq tune` on a type tuned before the mat-mat was: its mat-vec entry
    is kept as it is, the tiles are measured and added."""
    tuning_store.save(backend.device_info, {"Q4_0": entry()})

    def no_matvec(*args, **kwargs):
        raise AssertionError("the mat-vec measured again")

    monkeypatch.setattr(tune, "tune_type", no_matvec)
    monkeypatch.setattr(tune, "tune_tiles", lambda tb, quick, on_group, notes: tiles_entry())
    assert tune.run(["Q4_0"], quick=True, progress=False, shapes=[(64, 256)]) == 0
    assert tuning_store.load(backend.device_info)["Q4_0"] == entry(tiles_entry())
    err = capsys.readouterr().err
    assert "without the mat-mat's tiles: measuring the tiles alone" in err
    if not backend.device.caps.coopmat:  # (said once for the device, not per type)
        assert err.count("the cooperative-matrix mat-mat is not available on this device (") == 1, err
