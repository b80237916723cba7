"""`vkq tune`: measure launch parameters on this device and keep the best.

For every block type and path, starting from the vendor table's choice, the
parameters are varied one group at a time (how weights and x are bound, work
split, rows per workgroup, workgroup size, chunks per thread) and a change
is kept only where it is clearly faster (coordinate descent: about a dozen
candidates per type and path, not the product of all values). The timing
follows vkq/device/timing.py: clocks warmed up before each group; one sample is
many back-to-back mat-vecs (tens of ms of GPU time, GPU timestamps where the
device has them, wall clock otherwise) over copies of the weights of
real-model shapes rotated so that one pass reads more than any cache holds;
the candidates of a group are timed interleaved, the fastest of the rounds,
with their spread. At the end the table's choice and the tuned one of every
path (and activation format) are timed once more side by side: the figures
shown and saved come from that, and the tuned one is kept only where it is
clearly faster there too (beyond the noise), else the table's, said so in
the type's summary line (`final_choice`).

The int8 path is tuned once per activation format (q8_1, and q8_1x2, which
`vkq generate` uses: twice the dot products, and on lavapipe it wants other
parameters than q8_1). The best path (from q8_1's figures) and the
parameters of each path and format are saved per device, type by type as
they finish (vkq/dispatch/tuning_store.py), and used by the dispatcher from
then on. Types already in the file are skipped unless
`retune`, so an interrupted run resumes where it stopped.

Then the tiled mat-mat's tiles (`tune_tiles`), on the same rotation and
timing (--quick on a CPU driver: on fewer rows, the table's tiles alone,
tile_shapes and tile_groups), x of a prompt chunk's 512 columns: coordinate descent from the tile
table's entry over tile shapes (vkq.dispatch.tiles.TileConfig), every
candidate held to the device's limits (tiles.check) before it is built, the
same final race; saved in the type's entry as "tiles", taken first by the
dispatcher's mat-mat choice (vkq.dispatch.tile_tuning). Where the device
offers the cooperative-matrix kernel for the type (its self-checks run here
first where it has none, vkq.dispatch.coopmat_check), each flavour the
mat-mat takes runs in the same final race at each of its candidate tiles
(tiles.coopmat_candidates) that fits the device and passes the self-check's
NMSE against its path's tiled kernel here (coopmat_contenders), and the
"tiles" object keeps each flavour's fastest ("coopmat", "coopmat_int8"):
its tile, NMSE, GFLOP/s and, per activation format the mat-mat takes that
flavour for, whether it was clearly faster than the tiles chosen for it
(`faster`, as final_choice): the dispatcher takes it, at that tile, only
where it was (tuning_store.CoopmatRace).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

import numpy as np

from ..blocks.activations import ACTIVATION_PLANES, DEFAULT_ACTIVATIONS
from ..blocks.formats import FORMATS, get_format
from ..blocks.lookup_tables import has_value_pairs
from ..blocks.synthetic import random_weights
from ..dispatch.coopmat_check import checked_config, config_nmse, run_check
from ..device.timing import (SAMPLE_SECONDS, WARM_SECONDS, Estimate, best, calibrate, faster, interleave, rotation,
                             wall_samples, warm_up)
from ..device.shader_variants import MATMUL_BINDINGS
from ..dispatch import coopmat, tiles, tuning_store
from ..dispatch.tile_tuning import offered_flavour
from ..dispatch.choose import Dispatcher, apply_limits
from ..dispatch.config import VALUE_LOOKUPS, PipelineConfig, describe
from ..dispatch.tiles import TileConfig
from ..llama.config import PROMPT_CHUNK
from ..markdown import markdown
from .console import Progress

# (rows, K) of mat-vecs in Llama-3-8B-class models: attention, FFN up, FFN down.
SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336)]
QUICK_SHAPES = [(4096, 4096)]
MAX_COPIES = 8  # of each shape's weights in the rotation (--quick's small matrix stays below ROTATION_BYTES)
ROUNDS, QUICK_ROUNDS = 3, 2  # interleaved samples per candidate of a group
# For the figures: the table's and the tuned configurations side by side,
# the fastest sample of each. On lavapipe single samples of one configuration
# range over +-20% (other work on the machine): the fastest of 8 is steadier
# than the fastest of 2-4.
FINAL_ROUNDS = 8
TILE_COLS = PROMPT_CHUNK  # columns of x the mat-mat's tiles are tuned at: a prompt chunk (vkq generate's)
# --quick's mat-mat on a CPU driver: at most this many rows, the same K. A
# sample needs SAMPLE_SECONDS, but holds at least one whole matrix, and a
# 4096 x 4096 one by 512 columns took 0.8-1.3 s on lavapipe (2 cores), and a
# race of 2 tiles runs 7 (each built, a warm-up, 2 rounds). A tile's time per FLOP does not depend on how
# many row tiles there are once every core has many (1024 rows: 1,024
# workgroups of lavapipe's 64 x 8 tiles), and on lavapipe no tile's figure
# followed the rows from 4096 to 1024 and 512 beyond the noise
# (docs/measurements.md, "`vkq tune --quick` with the mat-mat's tiles"). A
# GPU keeps the whole shape: 1024 rows by 512 columns in 64 x 32 tiles are
# 256 workgroups, too few for its compute units to show a tile's speed.
QUICK_CPU_TILE_ROWS = 1024
PRUNE = 1.5  # a candidate this much slower than the fastest after one round is not timed again


def search_space(dev, fmt, quick: bool) -> list[tuple[str, list]]:
    """The parameter groups tried, in order, with their values: what can
    matter on this kind of device, not every combination."""
    caps = dev.caps
    sg = max(1, caps.subgroup_size)
    groups: list[tuple[str, list]] = []
    if dev.patched_kp:  # texel bindings need vkq's Kompute patch
        groups.append(("bindings", [("storage", "storage"), ("texel", "texel")]))
    if caps.device_type == "cpu":  # whole rows per thread only pays where lanes share loads (CPU drivers)
        groups.append(("split_k", [True, False]))
    groups.append(("rows_per_wg", [2, 8, 16] if quick else [1, 2, 4, 8, 16]))
    if not quick and caps.device_type != "cpu":
        # (A CPU driver runs a workgroup of its subgroup size as one SIMD loop:
        # the tables' wg = subgroup size there.)
        groups.append(("wg_size", sorted({w for w in (sg, 2 * sg, 4 * sg) if w <= caps.max_workgroup_invocations})))
    groups.append(("chunks_per_thread", [1, 8] if quick else [1, 2, 8]))
    if has_value_pairs(fmt.table):
        groups.append(("value_lookup", list(VALUE_LOOKUPS)))
    return groups


def variant_label(key: str) -> str:
    """"mmvq_q8_1x2" -> "mmvq q8_1x2"."""
    path, activations = tuning_store.ENTRY_KEYS[key]
    return path if key == path else f"{path} {activations}"


def with_value(cfg: PipelineConfig, name: str, value) -> PipelineConfig:
    if name == "bindings":
        return replace(cfg, weights_binding=value[0], x_binding=value[1])
    return replace(cfg, **{name: value})


def value_of(cfg: PipelineConfig, name: str):
    return (cfg.weights_binding, cfg.x_binding) if name == "bindings" else getattr(cfg, name)


@dataclass
class Unit:
    """One mat-vec of the rotation: a copy of one shape's weights."""

    shape: int  # index into the shapes
    weights: object  # vkq.Weights


class Candidate:
    """One configuration recorded for every unit of the rotation (or its
    first `units`) with `ncols` columns of x, `passes` times back to back,
    as one graph (vkq.graph: each x quantized to Q8_1 once, a barrier
    between passes since the next one rewrites every y); `sample()` is the
    GPU seconds of one pass. A PipelineConfig runs the mat-vec (fitted to
    each shape), a TileConfig the tiled mat-mat (as it is: tune_tiles holds
    its candidates to the device's limits first)."""

    def __init__(self, bench: "TypeBench", cfg: PipelineConfig | TileConfig, passes: int, ncols: int = 1,
                 units: int | None = None):
        self.bench, self.cfg, self.passes = bench, cfg, passes
        self.graph = g = bench.backend.graph(timestamps=bench.gpu_timer)
        for _ in range(passes):
            for i, u in enumerate(bench.units[:units]):
                rows, k = bench.shapes[u.shape]
                x, y = bench.x(u.shape, ncols), bench.y(i, ncols)
                if isinstance(cfg, TileConfig):
                    g.matmul(u.weights, x, config=cfg, out=y, tiled=True)
                else:
                    g.matvec(u.weights, x, config=apply_limits(cfg, bench.dev.caps, bench.fmt, k, ncols), out=y)
        # The first replay records the sequence and uploads; on lavapipe it
        # also ran 2x slower than the next ones: never a sample.
        g.run()

    def sample(self) -> float:
        if not self.bench.gpu_timer:
            return wall_samples(self.graph.run, 1, warm=False)[0] / self.passes
        self.graph.run()
        return self.graph.kernel_seconds / self.passes

    def destroy(self) -> None:
        self.graph.destroy()


class TypeBench:
    """The rotation of one block type: copies of the weights of every shape,
    uploaded once (max_copies None: as many as the rotation needs)."""

    def __init__(self, backend, qtype: str, shapes, max_copies: int | None = MAX_COPIES):
        self.backend, self.dev = backend, backend.device
        self.fmt, self.shapes = get_format(qtype), shapes
        self.gpu_timer = backend.device_info.timestamps_supported
        rng = np.random.default_rng(1)
        data = [random_weights(self.fmt, rows, k, rng) for rows, k in shapes]
        sizes = [self.fmt.row_bytes(k) * rows for rows, k in shapes]
        self.units = [Unit(i, backend.upload(qtype, shapes[i], data[i]))
                      for i, _copy in rotation(sizes, max_copies=max_copies)]
        self._xs: dict[tuple[int, int], object] = {}  # (shape, ncols) -> x
        self._ys: dict[tuple[int, int], object] = {}  # (unit, ncols) -> y
        self.pass_bytes = sum(u.weights.nbytes for u in self.units)
        self.table = Dispatcher(self.dev.caps, backend.dispatcher.device_class, {})  # the vendor table alone

    def x(self, shape: int, ncols: int):
        """The x of a shape with `ncols` columns (uniform in [-1, 1]), made once."""
        if (shape, ncols) not in self._xs:
            k = self.shapes[shape][1]
            x = self._xs[shape, ncols] = self.backend.tensor(k, ncols, name=f"x{shape}")
            x.write(np.random.default_rng(shape).uniform(-1, 1, (ncols, k)).astype(np.float32))
        return self._xs[shape, ncols]

    def y(self, unit: int, ncols: int):
        """The y of a unit with `ncols` columns: each unit its own, so one pass needs no barrier."""
        if (unit, ncols) not in self._ys:
            self._ys[unit, ncols] = self.backend.tensor(self.shapes[self.units[unit].shape][0], ncols, name="y")
        return self._ys[unit, ncols]

    def table_config(self, path: str, activations: str = DEFAULT_ACTIVATIONS) -> PipelineConfig:
        """The vendor table's choice (for the int8 path: with x in `activations`)."""
        rows, k = self.shapes[0]
        cfg = self.table.choose(self.fmt, rows, k, 1, path=path, activations=activations)
        return replace(cfg, x_planes=ACTIVATION_PLANES[activations]) if path == "mmvq" else cfg

    def table_tiles(self, path: str | None, activations: str, k: int) -> TileConfig:
        """The tile table's mat-mat at K (path None: the table's path for `activations`)."""
        return tiles.choose(self.table.device_class, self.dev.caps, self.fmt, k, path, activations)

    def passes_for(self, cfg: PipelineConfig, ncols: int = 1) -> int:
        """Passes per sample for SAMPLE_SECONDS of GPU time, timed warm."""
        one = Candidate(self, cfg, 1, ncols)
        warm_up(one.sample, WARM_SECONDS)
        n = calibrate(one.sample, SAMPLE_SECONDS, max_repeats=256)
        one.destroy()
        return n

    def race(self, candidates: list[Candidate], rounds: int, prune: float | None = PRUNE
             ) -> dict[PipelineConfig, Estimate]:
        """The candidates timed interleaved after a warm-up (building them left the device idle)."""
        warm_up(candidates[0].sample, WARM_SECONDS)
        return interleave({c.cfg: c.sample for c in candidates}, rounds, prune=prune)


def tune_path(tb: TypeBench, key: str, path: str, activations: str, passes: int, groups, rounds: int,
              on_group) -> PipelineConfig:
    """Coordinate descent from the table's configuration; returns the winner."""
    cur = tb.table_config(path, activations)
    for name, values in groups:
        on_group(variant_label(key), name)
        cfgs = [cur] + [with_value(cur, name, v) for v in values if v != value_of(cur, name)]
        cands = [Candidate(tb, c, passes) for c in dict.fromkeys(cfgs)]
        est = tb.race(cands, rounds)
        cur = best(est, cur)
        for c in cands:
            c.destroy()
    return cur


def tile_shapes(dev, shapes, quick: bool) -> list[tuple[int, int]]:
    """The shapes the mat-mat's tiles are timed on: the mat-vec's, but with
    --quick on a CPU driver at most QUICK_CPU_TILE_ROWS rows each."""
    if not (quick and dev.caps.device_type == "cpu"):
        return list(shapes)
    return list(dict.fromkeys((min(rows, QUICK_CPU_TILE_ROWS), k) for rows, k in shapes))


def tile_bench(backend, qtype: str, shapes, quick: bool, matvec: TypeBench | None = None) -> TypeBench:
    """The rotation the mat-mat's tiles are timed on, of tile_shapes: the
    mat-vec's own (`matvec`, where it was built) where those are its shapes."""
    wanted = tile_shapes(backend.device, shapes, quick)
    if matvec is not None and wanted == list(matvec.shapes):
        return matvec
    return TypeBench(backend, qtype, wanted)


def measure_tiles(backend, qtype: str, shapes, quick: bool, on_group, notes: dict,
                  matvec: TypeBench | None = None) -> dict | None:
    """A type's "tiles" object (tune_tiles on tile_bench's rotation); its
    notes added to `notes` as "tiles <key>"."""
    tile_notes: dict[str, str] = {}
    found = tune_tiles(tile_bench(backend, qtype, shapes, quick, matvec), quick, on_group, tile_notes)
    notes.update({f"tiles {key}": note for key, note in tile_notes.items()})
    return found


@dataclass(frozen=True)
class CoopmatContender:
    """One tile of the cooperative-matrix kernel in the tiles' final race, checked on this device."""

    cfg: TileConfig
    nmse: float  # against the float tiled kernel on coopmat.CHECK_SHAPE (vkq.dispatch.coopmat_check.config_nmse)


def coopmat_contenders(tb: TypeBench, ks, on_group, notes: dict | None) -> dict[str, tuple[list[str], list]]:
    """The cooperative-matrix kernel's flavours and tiles for the tiles'
    final race, where the device offers it for the type (its self-checks run
    first where the type has none on this device:
    vkq.dispatch.coopmat_check.run_check): {flavour: (the activation formats
    the mat-mat takes it for (tile_tuning.offered_flavour), its tiles)}, the
    tiles each of tiles.coopmat_candidates that fits the device at every K
    measured (once, where fitting makes two the same) and whose NMSE against
    its path's tiled kernel is within coopmat.CHECK_NMSE here (the
    self-check's own tile: its record). None offered: {}, with why in
    notes["coopmat"] (but for a device without the kernel at all, which
    `run` says once); candidates left out (a failed check, a pipeline the
    driver refused) named in notes["coopmat candidates"] ("coopmat int8
    candidates")."""
    caps, checks = tb.dev.caps, tb.backend.dispatcher.coopmat_checks
    for flavour in coopmat.FLAVOURS:
        if coopmat.status(caps, tb.fmt, checks, flavour)[0] == coopmat.UNCHECKED:
            on_group("mat-mat coopmat", f"self-check {flavour}")
            run_check(tb.backend, tb.fmt, flavour)
    takers: dict[str, list[str]] = {}
    why = ""
    for acts in ACTIVATION_PLANES:
        flavour, why_not = offered_flavour(tb.backend.dispatcher, tb.fmt, ks[-1], acts, None)
        if flavour is None:
            why = why_not
        else:
            takers.setdefault(flavour, []).append(acts)
    if not takers:
        if notes is not None and not coopmat.device_missing(caps):
            notes["coopmat"] = f"not raced: {why}"
        return {}
    out = {flavour: (acts, flavour_contenders(tb, ks, on_group, notes, flavour)) for flavour, acts in takers.items()}
    return {flavour: found for flavour, found in out.items() if found[1]}


def flavour_contenders(tb: TypeBench, ks, on_group, notes: dict | None, flavour: str) -> list[CoopmatContender]:
    """coopmat_contenders' tiles of one flavour."""
    caps, checks = tb.dev.caps, tb.backend.dispatcher.coopmat_checks
    name = "coopmat" + (" int8" if flavour == "int8" else "")
    try:
        checked = tiles.coopmat_shape(checked_config(caps, tb.fmt, flavour))
    except ValueError:
        checked = None
    fitting, first_problem = {}, None
    for shape in tiles.coopmat_candidates(caps, flavour):
        try:
            cfg = tiles.coopmat_config(caps, tb.fmt, ks[-1], shape, flavour)
            for k in ks:
                tiles.check(cfg, caps, tb.fmt, k)
        except ValueError as e:
            first_problem = first_problem or str(e)
            continue
        fitting.setdefault(tiles.coopmat_shape(cfg), cfg)  # (two halved to the same tile: raced once)
    out, left_out = [], []
    for shape, cfg in fitting.items():
        label = tiles.coopmat_tile_label(shape)
        if shape == checked:  # (the self-check's own tile and case: its record says it)
            out.append(CoopmatContender(cfg, checks[coopmat.check_key(tb.fmt.name, flavour)]["nmse"]))
            continue
        on_group(f"mat-mat {name}", f"check {label}")
        try:
            err = config_nmse(tb.backend, tb.fmt, cfg)
        except (ValueError, RuntimeError) as e:  # (a pipeline the driver refused)
            left_out.append(f"{label} ({type(e).__name__}: {e})")
            continue
        if coopmat.passes({"nmse": err}):
            out.append(CoopmatContender(cfg, err))
        else:
            left_out.append(f"{label} (NMSE {err:.1e} against the {'int8' if flavour == 'int8' else 'float'} "
                            f"kernel > {coopmat.CHECK_NMSE:g})")
    if notes is not None:
        if left_out:
            notes[f"{name} candidates"] = "tiles left out: " + "; ".join(left_out)
        if not out:
            notes[name] = f"not raced: {first_problem or 'no candidate tile passed its check on this device'}"
    return out


def tile_variants(tb: TypeBench, k: int, quick: bool) -> list[tuple[str, str, str]]:
    """The mat-mat's variants to tune (tuning_store.entry_variants): every
    path and activation format, or with `quick` only the paths the tile
    table gives (a type's float path, and its int8 path for the formats the
    table puts on it)."""
    every = tuning_store.entry_variants(tb.fmt.paths)
    if not quick:
        return every
    table_path = {a: tb.table_tiles(None, a, k).path for a in ACTIVATION_PLANES}
    return [(key, path, a) for key, path, a in every
            if (path == "dmmv" and "dmmv" in table_path.values()) or (path == "mmvq" and table_path[a] == "mmvq")]


# The tile groups tried, in order, around the tile table's entry (coordinate
# descent, as the mat-vec's); --quick: one, with one new value, and on a CPU
# driver none: there a new tile shape's pipeline compiles for 10-40 s (Q4_K's
# 8x8 per invocation on lavapipe, Mesa's shader cache cold, 2026-11-27: 10 s
# on the float path, 30 s on the int8 path, 2 cores under load), more than
# all the rest of a type's --quick; its tiles are then the table's, raced
# path against path (the choice of path per activation format is measured).
TILE_GROUPS = ("shared_tiles", "tile", "per_invocation", "bk_chunks", "binding", "value_lookup")
QUICK_TILE_GROUPS = ("per_invocation",)


def tile_groups(tb: TypeBench, quick: bool) -> list[str]:
    """The groups that can matter here: texel bindings need vkq's Kompute
    patch; the value lookup, a type whose quants index 16 values."""
    if quick and tb.dev.caps.device_type == "cpu":
        return []
    return [name for name in (QUICK_TILE_GROUPS if quick else TILE_GROUPS)
            if (name != "binding" or tb.dev.patched_kp) and (name != "value_lookup" or has_value_pairs(tb.fmt.table))]


def tile_moves(cur: TileConfig, name: str, quick: bool) -> list[dict]:
    """The changes of one group tried from `cur` (some give no valid TileConfig: tune_tiles drops those)."""
    if name == "shared_tiles":  # (shared tiles hold a K step: also with the smallest step)
        return [{"shared_tiles": not cur.shared_tiles, "bk_chunks": b} for b in dict.fromkeys((cur.bk_chunks, 1))]
    if name == "tile":
        return [{"bm": cur.bm // 2}, {"bm": 2 * cur.bm}, {"bn": cur.bn // 2}, {"bn": 2 * cur.bn}]
    if name == "per_invocation":
        return [{"tm": 2 * cur.tm}] if quick else [{"tm": cur.tm // 2}, {"tm": 2 * cur.tm}, {"tn": cur.tn // 2},
                                                   {"tn": 2 * cur.tn}]
    if name == "bk_chunks":
        return [{"bk_chunks": b} for b in (1, 2, 4, 8)]
    if name == "binding":
        return [{"binding": b} for b in MATMUL_BINDINGS]
    if name == "value_lookup":
        return [{"value_lookup": v} for v in VALUE_LOOKUPS]
    raise ValueError(f"unknown tile group {name!r}")


def tile_candidates(tb: TypeBench, cur: TileConfig, name: str, quick: bool, ks) -> list[TileConfig]:
    """`cur` and its changes in one group that are TileConfigs and fit the
    device at every K measured (tiles.check: what does not is never run)."""
    out = [cur]
    for change in tile_moves(cur, name, quick):
        try:
            cfg = replace(cur, **change)
            for k in ks:
                tiles.check(cfg, tb.dev.caps, tb.fmt, k)
        except ValueError:
            continue
        out.append(cfg)
    return list(dict.fromkeys(out))


def tune_tiles(tb: TypeBench, quick: bool, on_group=lambda path, group: None, notes: dict | None = None
               ) -> dict | None:
    """The tiled mat-mat's tiles at TILE_COLS columns per path and
    activation format (tuning_store's "tiles" object), timed as the
    mat-vec's (Candidate, TypeBench.race) on as many units of the rotation
    as a sample's SAMPLE_SECONDS take (at least one: where one matrix alone
    takes longer, its weights are read once per bn of 512 columns and no
    cache changes the time). None where the tile table's entry fits no
    measured K. notes: key -> why the table's tiles were kept (final_choice)."""
    k0 = tb.shapes[tb.units[0].shape][1]
    try:
        first = tb.table_tiles(None, DEFAULT_ACTIVATIONS, k0)
    except ValueError:
        return None
    # How many units make a sample, and how many passes: from one unit, timed warm.
    on_group("mat-mat", "sample size")
    one = Candidate(tb, first, 1, TILE_COLS, units=1)
    warm_up(one.sample, WARM_SECONDS)
    unit_seconds = one.sample()
    one.destroy()
    units = max(1, min(len(tb.units), int(SAMPLE_SECONDS / max(unit_seconds, 1e-9))))
    passes = calibrate(lambda: unit_seconds * units, SAMPLE_SECONDS, max_repeats=256)
    used = tb.units[:units]
    ks = sorted({tb.shapes[u.shape][1] for u in used})
    rounds = QUICK_ROUNDS if quick else ROUNDS
    from_table, tuned, seen = {}, {}, {}
    for key, path, acts in tile_variants(tb, k0, quick):
        try:
            cur = from_table[key] = tiles.check(tb.table_tiles(path, acts, ks[-1]), tb.dev.caps, tb.fmt, ks[0])
            for k in ks[1:]:
                tiles.check(cur, tb.dev.caps, tb.fmt, k)
        except ValueError:
            continue
        for name in tile_groups(tb, quick):
            cfgs = tile_candidates(tb, cur, name, quick, ks)
            if len(cfgs) < 2:
                continue
            on_group(f"mat-mat {variant_label(key)}", name)
            cands = [Candidate(tb, c, passes, TILE_COLS, units) for c in cfgs]
            est = tb.race(cands, rounds)
            seen.update(est)
            cur = best(est, cur)
            for c in cands:
                c.destroy()
        tuned[key] = cur
    if not tuned:
        return None
    # The final word, as the mat-vec's: the table's and the tuned tiles side
    # by side (--quick: the descent's one race already timed them together),
    # and where the device offers it the cooperative-matrix kernel beside
    # them all (in --quick too: it is compared with the tiles chosen here).
    coop = coopmat_contenders(tb, ks, on_group, notes)
    need = list(dict.fromkeys([*from_table.values(), *tuned.values()]))
    todo = need if not quick or coop else [c for c in need if c not in seen]
    todo += [c.cfg for _, found in coop.values() for c in found]
    if todo:
        on_group("mat-mat all", "final")
        cands = [Candidate(tb, c, passes, TILE_COLS, units) for c in todo]
        seen.update(tb.race(cands, FINAL_ROUNDS if not quick else rounds, prune=None))
        for c in cands:
            c.destroy()
    flops = sum(2 * tb.shapes[u.shape][0] * tb.shapes[u.shape][1] * TILE_COLS for u in used)
    shapes = sorted({tb.shapes[u.shape] for u in used}, key=[tb.shapes[u.shape] for u in used].index)
    result = {"n": TILE_COLS, "k_min": ks[0], "shapes": [list(s) for s in shapes], "best": {}, "gflops": {},
              "spread": {}}
    final = {}
    for key, cfg in tuned.items():
        d = seen[from_table[key]]
        cfg, t, note = final_choice(cfg, from_table[key], seen[cfg], d)
        if note and notes is not None:
            notes[key] = note
        final[key] = t
        result[key] = {name: cfg.params()[name] for name in tuning_store.TILE_PARAMS}
        result["gflops"][key] = [round(flops / d.seconds / 1e9, 3), round(flops / t.seconds / 1e9, 3)]
        result["spread"][key] = round(t.spread, 4)
    # The path per activation format: the table's unless another is clearly faster.
    for acts in ACTIVATION_PLANES:
        measured = {path: final[tuning_store.entry_key(path, acts)] for path in tb.fmt.paths
                    if tuning_store.entry_key(path, acts) in final}
        if measured:
            incumbent = tb.table_tiles(None, acts, k0).path
            result["best"][acts] = best(measured, incumbent if incumbent in measured else next(iter(measured)))
    # Each flavour's fastest tile, taken where clearly faster than the tiles
    # each activation format it serves gets (`faster`).
    for flavour, (takers, found) in coop.items():
        fastest = min(found, key=lambda c: seen[c.cfg].seconds)
        c = seen[fastest.cfg]
        won = {acts: faster(c, final[tuning_store.entry_key(path, acts)]) for acts, path in result["best"].items()
               if acts in takers}
        if won:
            result[tuning_store.COOPMAT_RECORDS[flavour]] = tuning_store.coopmat_record(
                flops / c.seconds / 1e9, c.spread, won, tiles.coopmat_shape(fastest.cfg), fastest.nmse)
    return result


def final_choice(tuned: PipelineConfig, table: PipelineConfig, t: Estimate, d: Estimate
                 ) -> tuple[PipelineConfig, Estimate, str | None]:
    """The final race's word on one variant: the tuned configuration (t: its
    estimate) where it is clearly faster than the table's (d) -- by more than
    2% and half the larger spread (vkq.device.timing.faster) --, else the
    table's, with a note where the tuned one was faster only inside the
    noise: a winner by 5% in a 34% spread is one a rerun could reverse, and
    the tables' choices rest on measurements too."""
    if tuned == table or faster(t, d):
        return tuned, t, None
    note = (f"table's kept: the tuned one was {100 * (d.seconds / t.seconds - 1):.1f}% faster, inside the "
            f"noise ({100 * max(t.spread, d.spread):.0f}% spread)") if t.seconds < d.seconds else None
    return table, d, note


def tune_type(backend, qtype: str, shapes, quick: bool, on_group=lambda path, group: None,
              notes: dict | None = None) -> dict:
    """{'best': path, 'k_min': K, 'shapes': the shapes, key: params, 'gbps': {key: [table, tuned]},
    'spread': {key: tuned spread}}, a key per path and activation format (tuning_store.entry_variants);
    k_min: the smallest K of the shapes. notes: filled with key -> why the
    table's configuration was kept over a faster tuned one (final_choice)."""
    tb = TypeBench(backend, qtype, shapes)
    rounds = QUICK_ROUNDS if quick else ROUNDS
    todo = tuning_store.entry_variants(tb.fmt.paths)
    passes = tb.passes_for(tb.table_config(tb.fmt.paths[-1]))
    groups = search_space(tb.dev, tb.fmt, quick)
    tuned = {key: tune_path(tb, key, path, acts, passes, groups, rounds, on_group) for key, path, acts in todo}
    # The final word: the table's and the tuned configurations of every variant, side by side.
    on_group("all", "final")
    from_table = {key: tb.table_config(path, acts) for key, path, acts in todo}
    cands = [Candidate(tb, cfg, passes) for cfg in dict.fromkeys([*from_table.values(), *tuned.values()])]
    est = tb.race(cands, FINAL_ROUNDS, prune=None)
    for c in cands:
        c.destroy()
    result = {"k_min": min(k for _, k in shapes), "shapes": [list(s) for s in shapes], "gbps": {}, "spread": {}}
    for key, _, _ in todo:
        tuned[key], t, note = final_choice(tuned[key], from_table[key], est[tuned[key]], est[from_table[key]])
        d = est[from_table[key]]
        if note and notes is not None:
            notes[key] = note
        result[key] = {name: v for name, v in tuned[key].params().items() if name != "path"}
        result["gbps"][key] = [round(tb.pass_bytes / d.seconds / 1e9, 3), round(tb.pass_bytes / t.seconds / 1e9, 3)]
        result["spread"][key] = round(t.spread, 4)
    # The best path, by what the default activations run at.
    result["best"] = min(tb.fmt.paths, key=lambda p: est[tuned[tuning_store.entry_key(p)]].seconds)
    found = measure_tiles(backend, qtype, shapes, quick, on_group, notes if notes is not None else {}, tb)
    if found is not None:
        result["tiles"] = found
    return result


def coopmat_unraced(backend, qtype: str, entry: dict) -> bool:
    """Whether a saved type's tiles were measured without the
    cooperative-matrix kernel's race where this device offers the kernel
    for it now (or will once it is checked) and it fits there: `vkq tune`
    then measures the type's tiles again (a mat-vec entry stays)."""
    found, fmt, caps = entry.get("tiles"), FORMATS[qtype], backend.device.caps
    if found is None or any(name in found for name in tuning_store.COOPMAT_RECORDS.values()):
        return False
    for flavour in coopmat.FLAVOURS:
        if coopmat.status(caps, fmt, backend.dispatcher.coopmat_checks, flavour)[0] not in (coopmat.OFFERED,
                                                                                           coopmat.UNCHECKED):
            continue
        try:
            tiles.coopmat_config(caps, fmt, found["k_min"], flavour=flavour)
            return True
        except ValueError:
            continue
    return False


def _shapes(shapes) -> str:
    return ", ".join(f"{r}x{k}" for r, k in shapes)


def _phases(bar: Progress, qtype: str, dev, quick: bool, t0: float, tiles_only: bool):
    """on_group for one type: the status line names each race; a line of its
    own (on a terminal and in a log) says what the type's next minute or so
    is spent on, as the mat-vec's and then the mat-mat's measuring begin."""
    fmt = get_format(qtype)
    variants = [variant_label(key) for key, _, _ in tuning_store.entry_variants(fmt.paths)]
    if not tiles_only:
        groups = [name for name, _ in search_space(dev, fmt, quick)]
        bar.note(f"{qtype}: the mat-vec's launch parameters: {', '.join(variants)}, each over "
                 f"{', '.join(groups)}; then the table's and the tuned side by side")
    started = []

    def on_group(label: str, group: str) -> None:
        if label.startswith("mat-mat") and not started:
            started.append(True)
            done = "" if tiles_only else f"mat-vec measured in {time.monotonic() - t0:.0f} s; "
            bar.note(f"{qtype}: {done}the mat-mat's tiles at {TILE_COLS} columns, "
                     + ("the tile table's on each path" if quick and dev.caps.device_type == "cpu" else
                        "around the tile table's" + (" (--quick: on its paths, one new tile shape each)"
                                                     if quick else "")))
        bar.step(f"{qtype} {label} {group}")

    return on_group


def coopmat_tile_label(rec: dict) -> str:
    """A "coopmat" record's tile in a few words."""
    return f"{tiles.coopmat_tile_label(tuple(rec['tile']))}, the fastest that passed its check"


def coopmat_verdict(race: tuning_store.CoopmatRace) -> str:
    """The cooperative-matrix kernel's race, for one activation format, in a few words."""
    if race.won:
        return "taken over"
    return "not clearly faster than" if race.gflops > race.tiled_gflops else "slower than"


def _summary(qtype: str, e: dict, seconds: float, notes: dict | None = None) -> str:
    notes = notes or {}
    parts = [f"{variant_label(key)} {after:.2f} GB/s (table {before:.2f}; spread {100 * e['spread'][key]:.1f}%"
             + (f"; {notes[key]}" if key in notes else "") + ")"
             for key, (before, after) in e["gbps"].items()]
    t = e.get("tiles")
    if t:
        parts.append(f"mat-mat at n={t['n']}: best " + ", ".join(f"{a} {p}" for a, p in t["best"].items()))
        parts += [f"mat-mat {variant_label(key)} {after:.1f} GFLOP/s (table {before:.1f}; spread "
                  f"{100 * t['spread'][key]:.1f}%" + (f"; {notes['tiles ' + key]}" if "tiles " + key in notes else "")
                  + ")" for key, (before, after) in t["gflops"].items()]
    for flavour, record in tuning_store.COOPMAT_RECORDS.items():
        name = "coopmat" + (" int8" if flavour == "int8" else "")
        if t and record in t:
            rec = t[record]
            races = [tuning_store.coopmat_race(t, a, flavour) for a in rec["won"]]
            parts.append(f"mat-mat {name} tile {coopmat_tile_label(rec)} (NMSE {rec['nmse']:.1e} against the "
                         f"{'int8' if flavour == 'int8' else 'float'} kernel)"
                         + (f"; {notes[f'tiles {name} candidates']}" if f"tiles {name} candidates" in notes else ""))
            parts += [f"mat-mat {name} {a} {r.gflops:.1f} GFLOP/s (spread {100 * r.spread:.1f}%): "
                      f"{coopmat_verdict(r)} the tiled {variant_label(r.key)} {r.tiled_gflops:.1f}"
                      for a, r in zip(rec["won"], races)]
        elif f"tiles {name}" in notes:
            parts.append(f"mat-mat {name} {notes[f'tiles {name}']}")
    # (a line per figure: all of them on one line ran to some 600 characters)
    return "\n".join([f"{qtype}: best {e['best']}; {seconds:.0f} s"] + ["  " + part for part in parts])


def run(types: list[str] | None = None, quick: bool = False, retune: bool = False, progress: bool = True,
        device: int | None = None, shapes: list[tuple[int, int]] | None = None) -> int:
    """`vkq tune`: tune `types` (default all) on the device and save the results."""
    from ..backend import Backend

    names = list(FORMATS) if types is None else [get_format(t).name for t in types]
    if not names:
        raise ValueError("no block type to tune (--types is empty)")
    shapes = shapes or (QUICK_SHAPES if quick else SHAPES)
    tuning_store.check_dir()  # before minutes of measuring
    backend = Backend(device)
    backend.require_execution("vkq tune")  # (a null GPU's times would be saved as this device's)
    info = backend.device_info
    entries = tuning_store.load(info)
    saved = [t for t in names if t in entries and not retune]
    # (entries of a file written before the mat-mat was tuned, or before the
    # cooperative-matrix kernel was raced here: their tiles alone)
    no_tiles = [t for t in saved if "tiles" not in entries[t]]
    unraced = [t for t in saved if coopmat_unraced(backend, t, entries[t])]
    tiles_only = no_tiles + unraced
    skipped = [t for t in saved if t not in tiles_only]
    todo = [t for t in names if t not in skipped]
    print(f"vkq tune: {info.name}; mat-vec on {_shapes(shapes)}, mat-mat on "
          f"{_shapes(tile_shapes(backend.device, shapes, quick))} by {TILE_COLS} columns; "
          f"timer: {'GPU timestamps' if info.timestamps_supported else 'wall clock'}", file=sys.stderr)
    missing = coopmat.device_missing(backend.device.caps)
    if missing and coopmat.device_missing(backend.device.caps, "int8"):
        print(f"vkq tune: the cooperative-matrix mat-mat is not available on this device ({missing}): "
              "the tiled kernels alone", file=sys.stderr)
    if skipped:
        print(f"vkq tune: {', '.join(skipped)} already in {tuning_store.tuning_path(info)}: skipped "
              "(--retune measures them again)", file=sys.stderr)
    for which, why in ((no_tiles, "without the mat-mat's tiles"),
                       (unraced, "with tiles not yet raced against this device's cooperative-matrix kernel")):
        if which:
            print(f"vkq tune: {', '.join(which)} in {tuning_store.tuning_path(info)} {why}: measuring the tiles "
                  "alone (--retune measures everything again)", file=sys.stderr)
    # (a type's units: its mat-vec variants, and as many for its mat-mat's)
    units = {t: (1 if t in tiles_only else 2) * len(tuning_store.entry_variants(FORMATS[t].paths)) for t in todo}
    bar = Progress(sum(units.values()), progress)
    path = tuning_store.tuning_path(info)
    try:
        for qtype in todo:
            t0 = time.monotonic()
            notes: dict[str, str] = {}
            on_group = _phases(bar, qtype, backend.device, quick, t0, tiles_only=qtype in tiles_only)
            if qtype in tiles_only:
                found = measure_tiles(backend, qtype, shapes, quick, on_group, notes)
                entry = {**entries[qtype], **({"tiles": found} if found is not None else {})}
            else:
                entry = tune_type(backend, qtype, shapes, quick, on_group, notes=notes)
            path, entries = tuning_store.save_entry(info, qtype, entry)  # saved type by type
            bar.finish(units[qtype], _summary(qtype, entry, time.monotonic() - t0, notes))
    except KeyboardInterrupt:  # the CLI says it in one line, with this note
        raise KeyboardInterrupt(f"the types finished are saved in {path}; `vkq tune` again resumes") from None
    print(f"saved {path}")
    print(table(entries, names))
    return 0


def table(entries: dict, types) -> str:
    cells = []
    for qtype in types:
        e = entries.get(qtype)
        for key, (before, after) in (e or {}).get("gbps", {}).items():
            spread = e.get("spread", {}).get(key)
            cells.append([qtype, variant_label(key) + (" (best)" if key == e["best"] else ""), str(e["k_min"]),
                          f"{before:.2f}", f"{after:.2f}", f"{after / before:.2f}x",
                          "-" if spread is None else f"{100 * spread:.1f}%", describe(e[key])])
    out = markdown(["type", "path", "for K >=", "table GB/s", "tuned GB/s", "gain", "spread", "parameters"], cells,
                   {"for K >=", "table GB/s", "tuned GB/s", "gain", "spread"}) + (
        "\n\nGB/s: weight bytes per second of GPU time, the fastest of the interleaved samples (other work only "
        "slows a sample); spread: how far the median sample lay above it (tuned configuration). A tuned entry "
        "serves one-column mat-vecs from the smallest K it was measured at; smaller K, and several columns, "
        "take the vendor table's rules.")
    tile_cells = []
    for qtype in types:
        t = (entries.get(qtype) or {}).get("tiles")
        for key, (before, after) in (t or {}).get("gflops", {}).items():
            path, acts = tuning_store.ENTRY_KEYS[key]
            best_for = [a for a, p in t["best"].items() if p == path and (path == "dmmv" or a == acts)]
            cfg = TileConfig(path=path, **t[key], x_planes=ACTIVATION_PLANES[acts] if path == "mmvq" else 1)
            tile_cells.append([qtype, variant_label(key) + (f" (best for {', '.join(best_for)})" if best_for else ""),
                               str(t["n"]), str(t["k_min"]), f"{before:.1f}", f"{after:.1f}", f"{after / before:.2f}x",
                               f"{100 * t['spread'][key]:.1f}%" if key in t.get("spread", {}) else "-",
                               cfg.describe().split(") ", 1)[1]])  # (the kernel's OpSDot or not is the device's)
    if tile_cells:
        out += "\n\nTiled mat-mat (prompt chunks):\n\n" + markdown(
            ["type", "path", "columns", "for K >=", "table GFLOP/s", "tuned GFLOP/s", "gain", "spread", "tiles"],
            tile_cells,
            {"columns", "for K >=", "table GFLOP/s", "tuned GFLOP/s", "gain", "spread"}) + (
            "\n\nGFLOP/s: 2 x rows x K x columns per second of GPU time. Tuned tiles serve every mat-mat (more than "
            "8 columns) from the smallest K they were measured at; smaller K take the tile table's entry.")
    coop_cells = []
    for qtype in types:
        t = (entries.get(qtype) or {}).get("tiles") or {}
        for flavour, record in tuning_store.COOPMAT_RECORDS.items():
            for acts in (t.get(record) or {}).get("won", {}):
                race = tuning_store.coopmat_race(t, acts, flavour)
                coop_cells.append([qtype, acts, flavour, coopmat_tile_label(t[record]), f"{race.gflops:.1f}",
                                   f"{100 * race.spread:.1f}%",
                                   f"{variant_label(race.key)} {race.tiled_gflops:.1f}",
                                   "yes" if race.won else f"no ({coopmat_verdict(race)} the tiles)"])
    if coop_cells:
        out += "\n\nCooperative-matrix mat-mat, raced against the tiles above:\n\n" + markdown(
            ["type", "activations", "flavour", "coopmat tile", "coopmat GFLOP/s", "spread", "tiled GFLOP/s", "taken"],
            coop_cells, {"coopmat GFLOP/s", "spread"}) + (
            "\n\nThe kernel's tile: the fastest of its candidates that passed the self-check's NMSE on this "
            "device; its flavour, the one the mat-mat takes for those activations (int8 where the tiles take "
            "the int8 path on q8_1). The kernel is taken, at that tile, for a mat-mat with no path asked for where "
            "it was "
            "faster than the tiles the activation format gets by more than 2% and half the larger spread; where "
            "it was not, the tiles.")
    return out


def show(device: int | None = None) -> int:
    from ..device.device_info import device_index_from_env, get_device_info

    info = get_device_info(device_index_from_env(device))
    entries = tuning_store.load(info)
    path = tuning_store.tuning_path(info)
    if not entries:
        print(f"no usable tuning results for this device ({path}); the vendor table is used")
        return 0
    print(f"tuning results: {path}")
    print(table(entries, list(entries)))
    return 0


def reset(device: int | None = None) -> int:
    from ..device.device_info import device_index_from_env, get_device_info

    info = get_device_info(device_index_from_env(device))
    removed = tuning_store.reset(info)
    print(f"{'removed' if removed else 'no tuning file at'} {tuning_store.tuning_path(info)}")
    if coopmat.reset(info):
        print(f"removed {coopmat.checks_path(info)} (the cooperative-matrix kernel's self-checks)")
    return 0
