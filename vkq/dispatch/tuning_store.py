"""This device's own tuning results (written by `vkq tune`).

One JSON file per device under the user's cache directory
($XDG_CACHE_HOME/vkq/tuning or ~/.cache/vkq/tuning; VKQ_TUNING_DIR overrides),
named after vendor, device and driver version, so a driver update starts
from the vendor table again. Writes are atomic (temporary file + rename);
`vkq tune` adds each type it finishes under a lock, to the file as it is
then (another `vkq tune` on the device may have added types meanwhile). A
file that is corrupt, of another schema or of another device gives a
warning and is ignored: the dispatcher falls back to the vendor table.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..blocks.activations import ACTIVATION_PLANES, DEFAULT_ACTIVATIONS
from ..blocks.formats import FORMATS
from ..device.cache_files import write_atomically
from ..device.device_info import DeviceInfo, file_stem
from .config import ALL_PARAMS, PATHS, param_problems
from .tiles import COOPMAT_SHAPE, TileConfig

# 2: the int8 path's parameters per activation format, and each type's k_min.
SCHEMA = 2


def entry_key(path: str, activations: str = DEFAULT_ACTIVATIONS) -> str:
    """Where a type's entry keeps the parameters for `path`: the int8 path's
    are measured per activation format (q8_1x2 does twice the dot products
    of q8_1 and can want other parameters), "mmvq" for q8_1,
    "mmvq_q8_1x2" for q8_1x2; the dequantize path reads float x: "dmmv"."""
    return path if path == "dmmv" or activations == DEFAULT_ACTIVATIONS else f"{path}_{activations}"


def entry_variants(paths) -> list[tuple[str, str, str]]:
    """What a type's entry holds for these paths, each as (key, path,
    activations): the dequantize path once, the int8 path per format."""
    return [(entry_key(path, a), path, a) for path in paths
            for a in (ACTIVATION_PLANES if path == "mmvq" else [DEFAULT_ACTIVATIONS])]


# Every parameter set an entry may hold: its path and activations. An entry
# without parameters for a call's activations leaves that call the table's
# (never another format's, measured for other work).
ENTRY_KEYS = {key: (path, a) for key, path, a in entry_variants(PATHS)}


def tuning_dir() -> Path:
    if os.environ.get("VKQ_TUNING_DIR"):
        return Path(os.environ["VKQ_TUNING_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vkq" / "tuning"


def device_key(info: DeviceInfo) -> dict:
    return {"vendor_id": info.vendor_id, "device_id": info.device_id, "name": info.name,
            "driver_version": info.driver_version}


def tuning_path(info: DeviceInfo) -> Path:
    return tuning_dir() / f"{file_stem(info)}.json"


# The parameters of a path's entry: all of them but the path, which is the
# entry's key; those added after tuning files existed (the bindings) may be
# missing and take their default.
ENTRY_PARAMS = tuple(p for p in ALL_PARAMS if p != "path")
ENTRY_REQUIRED = tuple(p for p in ENTRY_PARAMS if p not in ("weights_binding", "x_binding", "value_lookup"))


def entry_problems(qtype, entry) -> list[str]:
    """What is wrong with one type's entry, whatever its JSON shape."""
    if not isinstance(qtype, str) or qtype not in FORMATS:
        return [f"{qtype!r}: not a block type vkq supports"]
    if not isinstance(entry, dict):
        return [f"{qtype}: not an object"]
    problems = []
    best = entry.get("best")
    if best not in PATHS:
        problems.append(f"{qtype}: best path {best!r} not in {PATHS}")
    elif best not in entry:
        problems.append(f"{qtype}: best path {best} has no parameters")
    if best == "mmvq" and not FORMATS[qtype].has_int8_path:
        problems.append(f"{qtype}: best path mmvq, but {qtype} has no int8 path")
    k_min = entry.get("k_min")
    if not isinstance(k_min, int) or isinstance(k_min, bool) or k_min < 1:
        problems.append(f"{qtype}: k_min {k_min!r} is not a positive integer")
    for key, (path, _) in ENTRY_KEYS.items():
        if key not in entry:
            continue
        params = entry[key]
        where = f"{qtype}/{key}"
        if path == "mmvq" and not FORMATS[qtype].has_int8_path:
            problems.append(f"{where}: {qtype} has no int8 path")
        if not isinstance(params, dict):
            problems.append(f"{where}: not an object")
            continue
        problems += [f"{where}: missing {p!r}" for p in ENTRY_REQUIRED if p not in params]
        problems += [f"{where}: unknown key {p!r}" for p in params if p not in ENTRY_PARAMS]
        problems += param_problems(params, where)
    problems += figure_problems(qtype, entry, FIGURES)
    if "tiles" in entry:
        problems += tile_problems(qtype, entry["tiles"])
    return problems


def _number(v) -> bool:
    """A finite JSON number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < float("inf")


# The measured figures an entry may hold for each of its keys (`vkq tune
# --show` prints them): what a valid one is, and how to say so.
FIGURES = {
    "gbps": (lambda v: isinstance(v, list) and len(v) == 2 and all(_number(x) and x > 0 for x in v),
             "[table, tuned] positive GB/s"),
    "spread": (lambda v: _number(v) and v >= 0, "a fraction >= 0"),
}


def figure_problems(where: str, entry: dict, figures: dict) -> list[str]:
    """What is wrong with an entry's `figures` (FIGURES, TILE_FIGURES; each
    optional; for keys with parameters in the entry)."""
    problems = []
    for name, (valid, what) in figures.items():
        values = entry.get(name, {})
        if not isinstance(values, dict):
            problems.append(f"{where}/{name}: not an object")
            continue
        for key, v in values.items():
            if key not in ENTRY_KEYS or key not in entry:
                problems.append(f"{where}/{name}: {key!r} has no parameters in the entry")
            elif not valid(v):
                problems.append(f"{where}/{name}/{key}: {v!r} is not {what}")
    return problems


# The tiled mat-mat's tuned tiles (vkq.dispatch.tile_tuning), an entry's
# optional "tiles" object: {"n": columns measured, "k_min": K, "shapes":
# [[rows, K], ...], "best": {activations: path}, key: TileConfig params
# (TILE_PARAMS) per ENTRY_KEYS key, "gflops": {key: [table, tuned]},
# "spread": {key: s}, optionally "coopmat": the cooperative-matrix kernel's
# race, CoopmatRace below}. An entry without it (files of before) is valid:
# the mat-mat then takes the tile table.
TILE_PARAMS = ("bm", "bn", "bk_chunks", "tm", "tn", "shared_tiles", "binding", "value_lookup")
TILE_FIGURES = {
    "gflops": (FIGURES["gbps"][0], "[table, tuned] positive GFLOP/s"),
    "spread": FIGURES["spread"],
}
# A "tiles" object's race of each cooperative-matrix flavour (CoopmatRace below), by flavour.
COOPMAT_RECORDS = {"float16": "coopmat", "int8": "coopmat_int8"}
TILE_KEYS = {"n", "k_min", "shapes", "best", *COOPMAT_RECORDS.values(), *ENTRY_KEYS, *TILE_FIGURES}


# The cooperative-matrix mat-mat raced against the tuned tiles by `vkq tune`
# on a device that offers it for the type (the same final race, the same
# rotation), a "tiles" object's optional "coopmat" (the float16 flavour) and
# "coopmat_int8" (the int8 one), each raced for the activation formats the
# mat-mat takes that flavour for: the fastest of its candidate tiles
# (vkq.dispatch.tiles.coopmat_candidates that fit the device and passed the
# self-check's NMSE there), {"gflops": its GFLOP/s, "spread": its spread,
# "won": {activations: whether it was clearly faster
# (vkq.device.timing.faster) than the tiles "best" gives those
# activations}, "tile": [bm, bn, bk_chunks, tm, tn] (tiles.COOPMAT_SHAPE),
# "nmse": its NMSE against its path's tiled kernel}. The tiled kernel's figures
# are that key's "gflops"[1] and "spread", from the same race. Without a
# record (tiles tuned on a device without the kernel) the dispatcher offers
# the kernel on its self-check alone (vkq.dispatch.tile_tuning).
COOPMAT_KEYS = ("gflops", "spread", "won", "tile", "nmse")


@dataclass(frozen=True)
class CoopmatRace:
    """The record's word for one activation format: the kernel against the tiled `key`."""

    won: bool
    gflops: float
    spread: float
    key: str  # the tiled kernel's ENTRY_KEYS key
    tiled_gflops: float
    tiled_spread: float | None
    tile: tuple[int, ...]  # (bm, bn, bk_chunks, tm, tn)
    nmse: float  # the tile's NMSE against its path's tiled kernel
    flavour: str = "float16"  # the kernel's flavour that raced (COOPMAT_RECORDS)


def coopmat_record(gflops: float, spread: float, won: dict[str, bool], tile: tuple[int, ...], nmse: float) -> dict:
    """A "coopmat" or "coopmat_int8" object of a "tiles" object (see CoopmatRace)."""
    return {"gflops": round(gflops, 3), "spread": round(spread, 4), "won": dict(won), "tile": list(tile),
            "nmse": float(f"{nmse:.3e}")}


def coopmat_race(tiles: dict, activations: str, flavour: str = "float16") -> CoopmatRace | None:
    """What a valid "tiles" object says of the kernel's flavour for these
    activations; None where it holds no race of it for them."""
    rec = tiles.get(COOPMAT_RECORDS[flavour])
    if rec is None or activations not in rec["won"]:
        return None
    key = entry_key(tiles["best"][activations], activations)
    return CoopmatRace(rec["won"][activations], rec["gflops"], rec["spread"], key, tiles["gflops"][key][1],
                       tiles.get("spread", {}).get(key), tuple(rec["tile"]), rec["nmse"], flavour)


def coopmat_problems(where: str, tiles: dict) -> list[str]:
    """What is wrong with a "tiles" object's races of the kernel (absent: nothing)."""
    return [p for name in COOPMAT_RECORDS.values() for p in coopmat_record_problems(where, tiles, name)]


def coopmat_record_problems(where: str, tiles: dict, name: str) -> list[str]:
    """What is wrong with one of them, tiles[name]."""
    if name not in tiles:
        return []
    rec, where = tiles[name], f"{where}/{name}"
    if not isinstance(rec, dict):
        return [f"{where}: not an object"]
    problems = [f"{where}: unknown key {key!r}" for key in rec if key not in COOPMAT_KEYS]
    if not (_number(rec.get("gflops")) and rec["gflops"] > 0):
        problems.append(f"{where}: gflops {rec.get('gflops')!r} is not a positive number")
    if not (_number(rec.get("spread")) and rec["spread"] >= 0):
        problems.append(f"{where}: spread {rec.get('spread')!r} is not a fraction >= 0")
    won, best = rec.get("won"), tiles.get("best")
    if not isinstance(won, dict):
        return problems + [f"{where}: won {won!r} is not an object of activation format -> true or false"]
    for activations, v in won.items():
        if not isinstance(v, bool):
            problems.append(f"{where}/won/{activations}: {v!r} is not true or false")
        elif not isinstance(best, dict) or best.get(activations) not in PATHS:
            problems.append(f"{where}/won: {activations!r} has no best tiles to be raced against")
        elif not isinstance(gflops := tiles.get("gflops"), dict) or entry_key(best[activations], activations) \
                not in gflops:
            problems.append(f"{where}/won: {activations}: the tiles it was raced against have no GFLOP/s")
    problems += coopmat_tile_problems(where, rec.get("tile"))
    if not (_number(rec.get("nmse")) and rec["nmse"] >= 0):
        problems.append(f"{where}: nmse {rec.get('nmse')!r} is not a number >= 0")
    return problems


def coopmat_tile_problems(where: str, tile) -> list[str]:
    """What is wrong with a record's "tile": five positive integers that
    make a tile the kernel supports (the shader's rules at 8x8x8 fragments
    and a subgroup of 32; whether it fits a device is the dispatcher's check
    at use)."""
    if not isinstance(tile, list) or len(tile) != len(COOPMAT_SHAPE) or not all(_positive_int(v) for v in tile):
        return [f"{where}: tile {tile!r} is not [{', '.join(COOPMAT_SHAPE)}], positive integers"]
    try:
        TileConfig(**dict(zip(COOPMAT_SHAPE, tile)), coopmat_subgroup=32, fragment=(8, 8, 8))
    except ValueError as e:
        return [f"{where}: tile {tile!r}: {e}"]
    return []


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def tile_problems(qtype: str, tiles) -> list[str]:
    """What is wrong with a type's "tiles" object, whatever its JSON shape;
    each key's parameters held to what the shader supports
    (vkq.dispatch.tiles.param_problems, by building the TileConfig)."""
    where = f"{qtype}/tiles"
    if not isinstance(tiles, dict):
        return [f"{where}: not an object"]
    problems = [f"{where}: unknown key {key!r}" for key in tiles if key not in TILE_KEYS]
    for name in ("n", "k_min"):
        if not _positive_int(tiles.get(name)):
            problems.append(f"{where}: {name} {tiles.get(name)!r} is not a positive integer")
    for key, (path, activations) in ENTRY_KEYS.items():
        if key not in tiles:
            continue
        params = tiles[key]
        if path == "mmvq" and not FORMATS[qtype].has_int8_path:
            problems.append(f"{where}/{key}: {qtype} has no int8 path")
        if not isinstance(params, dict):
            problems.append(f"{where}/{key}: not an object")
            continue
        missing = [f"{where}/{key}: missing {p!r}" for p in TILE_PARAMS if p not in params]
        unknown = [f"{where}/{key}: unknown key {p!r}" for p in params if p not in TILE_PARAMS]
        problems += missing + unknown
        if not missing and not unknown:
            try:
                TileConfig(path=path, x_planes=ACTIVATION_PLANES[activations] if path == "mmvq" else 1, **params)
            except (ValueError, TypeError) as e:
                problems.append(f"{where}/{key}: {e}")
    best = tiles.get("best")
    if not isinstance(best, dict) or not best:
        problems.append(f"{where}: best {best!r} is not an object of activation format -> path")
    else:
        for activations, path in best.items():
            if activations not in ACTIVATION_PLANES or path not in PATHS:
                problems.append(f"{where}/best: {activations!r}: {path!r} is not an activation format and a path")
            elif entry_key(path, activations) not in tiles:
                problems.append(f"{where}/best: {activations}: {path} has no tiles")
    return problems + figure_problems(where, tiles, TILE_FIGURES) + coopmat_problems(where, tiles)


def load(info: DeviceInfo) -> dict[str, dict]:
    """{qtype: {"best": path, "k_min": K, "dmmv": params, "mmvq": params, "mmvq_q8_1x2": params}};
    {} if none or unusable. k_min: the smallest K the type was tuned at;
    what wins there need not win at a much smaller K (few blocks per row),
    so matrices below it take the table's rules, which are per K.

    A file of any content is either used whole or warned about and ignored:
    nothing in it can make a command fail."""
    entries, problem = _read(info)
    if problem:
        warnings.warn(f"vkq: ignoring {problem}; using the vendor table. Run `vkq tune` again.", stacklevel=2)
    return entries


def _read(info: DeviceInfo) -> tuple[dict[str, dict], str | None]:
    """The file's entries, or {} and what is wrong with it."""
    path = tuning_path(info)
    try:
        if not path.exists():
            return {}, None
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        return {}, f"unreadable tuning file {path}: {e}"
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("device") != device_key(info):
        return {}, f"stale tuning file {path} (other schema or device/driver)"
    entries = data.get("entries")
    if not isinstance(entries, dict):
        problems = [f"'entries' is {type(entries).__name__}, not an object"]
    else:
        problems = [p for qtype, entry in entries.items() for p in entry_problems(qtype, entry)]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return {}, f"invalid tuning file {path}: {'; '.join(problems[:3])}{more}"
    return entries, None


def check_dir() -> Path:
    """The tuning directory, created if need be; a ValueError naming where
    its path came from if it cannot hold the file (checked before `vkq tune`
    measures anything)."""
    d = tuning_dir()
    where = "VKQ_TUNING_DIR" if os.environ.get("VKQ_TUNING_DIR") else "the cache directory (XDG_CACHE_HOME or ~/.cache)"
    if d.exists() and not d.is_dir():
        raise ValueError(f"the tuning directory {d} ({where}) is not a directory")
    try:
        d.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=d).close()
    except OSError as e:
        raise ValueError(f"the tuning directory {d} ({where}) cannot be created or written: "
                         f"{e.strerror or e}") from None
    return d


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on `path` (a file beside it) for a read, change and
    write by one process at a time; released when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def write_json(path: Path, data: dict) -> Path:
    """Write atomically: a reader sees the old file or the new one, never half."""
    return write_atomically(path, json.dumps(data, indent=1, sort_keys=True).encode())


def remove(path: Path) -> bool:
    """Delete a cache file; False if there was none."""
    if path.exists():
        path.unlink()
        return True
    return False


def save_entry(info: DeviceInfo, qtype: str, entry: dict) -> tuple[Path, dict[str, dict]]:
    """Add one type's results to this device's file; returns the file and
    all its entries. Under an exclusive lock the file is read again, so that
    what another `vkq tune` process saved since stays (an unusable file is
    replaced), and written whole (`save`)."""
    with locked(tuning_path(info)):
        entries = {**_read(info)[0], qtype: entry}
        return save(info, entries), entries


def save(info: DeviceInfo, entries: dict[str, dict]) -> Path:
    """Write this device's file whole, atomically (write_json)."""
    return write_json(tuning_path(info), {"schema": SCHEMA, "device": device_key(info), "entries": entries})


def reset(info: DeviceInfo) -> bool:
    return remove(tuning_path(info))
