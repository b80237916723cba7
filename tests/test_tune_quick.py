"""`vkq tune --quick`: on a CPU driver its mat-mat tiles are timed on at
most QUICK_CPU_TILE_ROWS rows (the same K), elsewhere and without --quick on
the mat-vec's shapes; and it says what it is measuring, a line per phase,
in a log too (not only on a terminal's status line)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from vkq.commands import tune


def device(kind: str):
    return SimpleNamespace(caps=SimpleNamespace(device_type=kind))


def test_quick_tiles_on_fewer_rows_on_a_cpu_driver_only():
    shapes = [(4096, 4096), (14336, 4096), (4096, 14336), (512, 2048)]
    rows = tune.QUICK_CPU_TILE_ROWS
    assert tune.tile_shapes(device("cpu"), shapes, quick=True) == [(rows, 4096), (rows, 14336), (512, 2048)]
    for kind, quick in (("cpu", False), ("discrete", True), ("integrated", True)):
        assert tune.tile_shapes(device(kind), shapes, quick) == shapes


def test_tile_bench_is_the_matvec_one_unless_the_shapes_differ(backend):
    """One rule for both of `vkq tune`'s tile phases: after the mat-vec's
    (its bench given) and for the tiles alone (none given)."""
    if backend.device.caps.device_type != "cpu":
        pytest.skip("the rows are capped on a CPU driver")
    shapes = [(2 * tune.QUICK_CPU_TILE_ROWS, 256)]
    tb = tune.TypeBench(backend, "Q4_0", shapes, max_copies=1)
    assert tune.tile_bench(backend, "Q4_0", shapes, False, tb) is tb
    for matvec in (tb, None):
        quick = tune.tile_bench(backend, "Q4_0", shapes, True, matvec)
        assert quick.shapes == [(tune.QUICK_CPU_TILE_ROWS, 256)] and quick.fmt.name == "Q4_0"
    small = tune.TypeBench(backend, "Q4_0", [(64, 256)], max_copies=1)
    assert tune.tile_bench(backend, "Q4_0", [(64, 256)], True, small) is small
    alone = tune.tile_bench(backend, "Q4_0", [(64, 256)], True)
    assert alone is not small and alone.shapes == [(64, 256)]


def test_each_phase_is_a_line_in_a_log(backend, tmp_path, monkeypatch, capsys):
    """stderr is not a terminal here (no status line): the type's mat-vec
    and mat-mat phases still get a line each as they begin, the header names
    both shapes."""
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path / "tuning"))

    def measure(backend, qtype, shapes, quick, on_group=None, notes=None):
        on_group("dmmv", "rows_per_wg")
        on_group("mat-mat dmmv", "per_invocation")
        on_group("mat-mat mmvq", "per_invocation")
        return {"best": "dmmv", "k_min": 256, "shapes": [list(s) for s in shapes],
                "dmmv": {"wg_size": 16, "rows_per_wg": 2, "chunks_per_thread": 1, "reduction": "shared",
                         "split_k": True},
                "gbps": {"dmmv": [1.0, 1.0]}, "spread": {"dmmv": 0.0}}

    monkeypatch.setattr(tune, "tune_type", measure)
    assert tune.run(["Q4_0"], quick=True, shapes=[(4096, 256)]) == 0
    err = capsys.readouterr().err.splitlines()
    tiles = tune._shapes(tune.tile_shapes(backend.device, [(4096, 256)], quick=True))
    assert err.pop(0).endswith(f"mat-vec on 4096x256, mat-mat on {tiles} by {tune.TILE_COLS} columns; timer: "
                               + ("GPU timestamps" if backend.device_info.timestamps_supported else "wall clock"))
    if backend.device.caps.coopmat_missing:  # (one line for the device, here none per type)
        assert err.pop(0) == ("vkq tune: the cooperative-matrix mat-mat is not available on this device "
                              f"({backend.device.caps.coopmat_missing}): the tiled kernels alone")
    assert err[0].startswith("Q4_0: the mat-vec's launch parameters: dmmv, mmvq, mmvq q8_1x2, each over ")
    assert err[1].startswith("Q4_0: mat-vec measured in ") and "the mat-mat's tiles at 512 columns" in err[1]
    assert err[2].startswith("Q4_0: best dmmv; ") and err[2].endswith(" s (done)"), err
    assert err[3].startswith("  dmmv 1.00 GB/s (table 1.00; spread 0.0%") and len(err) == 4, err
