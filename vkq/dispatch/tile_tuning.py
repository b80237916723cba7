"""The tiled mat-mat's launch on this device: its own `vkq tune` results
first, else the tile table (vkq.dispatch.tiles.choose).

`vkq tune` keeps, per block type, the tiles it measured fastest per path and
activation format at a prompt chunk's column count, and the faster path per
activation format (vkq.dispatch.tuning_store, a type entry's "tiles"). They
serve K at least the smallest K they were measured at (`k_min`), as the
mat-vec's tuned parameters do; smaller K take the table's entry. The path is
the caller's, else VKQ_PATH's (for the types that have it), else the tuned
one; a path without tuned tiles takes the table's. Tuned tiles that do not
fit this device at this K (its workgroup size, shared memory, the loop
budget of a CPU driver, a K that is not whole units of the K step) are not
adapted: the table's entry is taken, fitted as always, and its `source`
says why.

Before either: the cooperative-matrix kernel, where vkq.dispatch.coopmat
offers it for the type (the device's features enabled, the kernel checked
on this device) and the caller asked for no path (argument or VKQ_PATH),
in the flavour of the path the tiles would take (`offered_flavour`: the
int8 flavour where they take the int8 path on q8_1 activations and it is
offered, else the float16 one where it is offered). Where this device's
`vkq tune` raced that flavour against the tuned tiles that serve this K and
these activations (tuning_store.coopmat_race) and it was not clearly
faster, the tiled kernel, its `source` saying so with the figures; without
such a race (no `vkq tune` since the kernel was offered, K below the tuned
k_min), the kernel on its self-check alone.
Its tile: where the race won, the one `vkq tune` found fastest there (its
candidates, tiles.coopmat_candidates, each checked first), fitted at this
K; else the device's default (tiles.coopmat_default_shape; coopmat_tile).

VKQ_MATMUL (coopmat.env_kernel) overrides all of this: "tiled" the tiled
kernel, "coopmat" / "coopmat-int8" that flavour, unchecked, refused in one
line where the device or the type lacks it (`forced`).
"""
from __future__ import annotations

from dataclasses import replace

from ..blocks.activations import ACTIVATION_PLANES, DEFAULT_ACTIVATIONS
from ..blocks.formats import BlockFormat
from . import coopmat, tiles, tuning_store
from .paths import requested_path


def tuned_tiles(tuned: dict, fmt: BlockFormat, k: int) -> dict | None:
    """A type's tuned tiles (tuning_store's "tiles" object) where they serve K, else None."""
    entry = tuned.get(fmt.name) or {}
    found = entry.get("tiles")
    return found if found is not None and k >= found["k_min"] else None


def tuned_config(found: dict, path: str, activations: str, source: str) -> tiles.TileConfig:
    """The TileConfig of one tuned key, with OpSDot asked for on the int8
    path (tiles.check puts its emulation where the device lacks it)."""
    key = tuning_store.entry_key(path, activations)
    mmvq = path == "mmvq"
    return tiles.TileConfig(path=path, **found[key], int_dot=mmvq,
                            x_planes=ACTIVATION_PLANES[activations] if mmvq else 1, source=source,
                            evidence=frozenset({"tuned"}))


def figures(found: dict, key: str) -> str:
    """What a tuned key rests on, for its `source`."""
    shapes = ", ".join(f"{r}x{k}" for r, k in found.get("shapes", []))
    measured = f"{shapes} by {found['n']} columns" if shapes else f"{found['n']} columns, K >= {found['k_min']}"
    gflops = found.get("gflops", {}).get(key)
    if gflops:
        measured += f": {gflops[1]:.1f} GFLOP/s against the table's {gflops[0]:.1f}"
    return measured


def race_figures(found: dict, race: tuning_store.CoopmatRace) -> str:
    """What the cooperative-matrix kernel's race in `vkq tune` says, for a `source`."""
    path, activations = tuning_store.ENTRY_KEYS[race.key]
    figures = (f"{race.gflops:.1f} GFLOP/s against the tiled kernel's {race.tiled_gflops:.1f} ({path}"
               + (f", {activations})" if path == "mmvq" else ")"))
    if race.won:
        verdict, after = "faster", ""
    elif race.gflops > race.tiled_gflops:
        noise = 100 * max(race.spread, race.tiled_spread or 0)
        verdict, after = "not clearly faster", f", within 2% or the noise ({noise:.0f}% spread)"
    else:
        verdict, after = "slower", ""
    return f"{verdict} in this device's vkq tune at {found['n']} columns: {figures}{after}"


def offered_flavour(dispatcher, fmt: BlockFormat, k: int, activations: str,
                    n_expert: int | None) -> tuple[str | None, str]:
    """The cooperative-matrix flavour the dispatcher takes for fmt (None:
    neither is offered), with its status line (coopmat.status)."""
    caps, checks = dispatcher.caps, dispatcher.coopmat_checks
    int8 = coopmat.status(caps, fmt, checks, "int8")
    if int8[0] == coopmat.OFFERED and ACTIVATION_PLANES[activations] == 1:
        try:
            if tiled(dispatcher, fmt, k, None, activations, n_expert).path == "mmvq":
                return "int8", int8[1]
        except ValueError:
            pass
    offer, why = coopmat.status(caps, fmt, checks, "float16")
    return ("float16", why) if offer == coopmat.OFFERED else (None, why)


def choose(dispatcher, fmt: BlockFormat, k: int, path: str | None = None,
           activations: str = DEFAULT_ACTIVATIONS, n_expert: int | None = None) -> tiles.TileConfig:
    """The tiles of a mat-mat of a `fmt` matrix of K columns on the
    dispatcher's device: tuned ones where `vkq tune` measured them for the
    chosen path and these activations, else tiles.choose. n_expert: for
    MUL_MAT_ID over a stack of that many experts (tuned tiles are held to
    its kernel's limits too)."""
    kernel = coopmat.env_kernel()
    if kernel is not None:
        return forced(dispatcher, fmt, k, kernel, path, activations, n_expert)
    if requested_path(fmt, path)[0] is None:
        flavour, why = offered_flavour(dispatcher, fmt, k, activations, n_expert)
        if flavour is not None:
            found = tuned_tiles(dispatcher.tuned, fmt, k)
            race = tuning_store.coopmat_race(found, activations, flavour) if found is not None else None
            if race is not None and not race.won:  # (measured here: the tiled kernel was as fast or faster)
                cfg = tiled(dispatcher, fmt, k, path, activations, n_expert)
                return replace(cfg, source=f"cooperative matrices not used: {race_figures(found, race)}; "
                                           f"{cfg.source}")
            try:
                cfg = coopmat_tile(dispatcher.caps, fmt, k, race, flavour)
                return replace(cfg, source=f"{cfg.source}; {why}"
                               + (f"; {race_figures(found, race)}" if race is not None else ""))
            except ValueError as e:  # (the device's limits: the other kernels, saying so)
                cfg = tiled(dispatcher, fmt, k, path, activations, n_expert)
                return replace(cfg, source=f"cooperative matrices not used: {e}; {cfg.source}")
    return tiled(dispatcher, fmt, k, path, activations, n_expert)


def forced(dispatcher, fmt: BlockFormat, k: int, kernel: str, path: str | None, activations: str,
           n_expert: int | None) -> tiles.TileConfig:
    """The kernel VKQ_MATMUL names (coopmat.KERNELS) for fmt at K: the tiled
    kernel, or a cooperative-matrix flavour at the device's default tile,
    whether or not it passed its self-check here (its status in `source`).
    ValueError, in one line, where it cannot run."""
    flavour = coopmat.KERNELS[kernel]
    if flavour is None:
        cfg = tiled(dispatcher, fmt, k, path, activations, n_expert)
        return replace(cfg, source=f"VKQ_MATMUL={kernel}; {cfg.source}")
    problem = coopmat.forced_problem(dispatcher.caps, fmt, kernel, requested_path(fmt, path)[0], activations)
    if problem:
        raise ValueError(problem)
    try:
        cfg = tiles.coopmat_config(dispatcher.caps, fmt, k, flavour=flavour)
    except ValueError as e:
        raise ValueError(f"VKQ_MATMUL={kernel}: {e}") from None
    why = coopmat.status(dispatcher.caps, fmt, dispatcher.coopmat_checks, flavour)[1]
    return replace(cfg, source=f"VKQ_MATMUL={kernel} (forced; {why}); {cfg.source}")


def coopmat_tile(caps, fmt: BlockFormat, k: int, race: tuning_store.CoopmatRace | None,
                 flavour: str = "float16") -> tiles.TileConfig:
    """The cooperative-matrix kernel's tile: the one `vkq tune` raced fastest
    on this device where its race won, fitted at K; the device's default
    without such a race, or where the tuned tile does not fit at this K
    (`source` saying so). ValueError where the default does not fit either."""
    if race is None or not race.won:
        return tiles.coopmat_config(caps, fmt, k, flavour=flavour)
    label = tiles.coopmat_tile_label(race.tile)
    try:
        cfg = tiles.coopmat_config(caps, fmt, k, race.tile, flavour)
    except ValueError as e:
        cfg = tiles.coopmat_config(caps, fmt, k, flavour=flavour)
        return replace(cfg, source=f"{cfg.source}: the tile tuned on this device ({label}) does not fit at "
                                   f"K={k} ({e})")
    fitted = cfg.source.partition("; ")[2]  # (coopmat_config's own notes, where it had to fit the tile)
    return replace(cfg, source=f"coopmat tile {label} tuned on this device (vkq tune: the fastest of the "
                               f"candidate tiles that passed the self-check, NMSE {race.nmse:.1e} against the "
                               f"{'int8' if flavour == 'int8' else 'float'} kernel)" + (f"; {fitted}" if fitted else ""))


def tiled(dispatcher, fmt: BlockFormat, k: int, path: str | None = None,
          activations: str = DEFAULT_ACTIVATIONS, n_expert: int | None = None) -> tiles.TileConfig:
    """choose's plain tiled kernel: tuned tiles where they serve, else the table's."""
    found = tuned_tiles(dispatcher.tuned, fmt, k)
    if found is None:
        return tiles.choose(dispatcher.device_class, dispatcher.caps, fmt, k, path, activations)
    chosen, origin, note = requested_path(fmt, path)
    note, why = (f"{note}; " if note else ""), f"path from {origin}"
    if chosen is None:
        chosen, why = found["best"].get(activations), "path from this device's vkq tune"
    key = tuning_store.entry_key(chosen, activations) if chosen is not None else None
    if key not in found:  # (no tuned tiles for this path and these activations)
        return tiles.choose(dispatcher.device_class, dispatcher.caps, fmt, k, path, activations)
    source = f"{note}tiles tuned on this device (vkq tune, {figures(found, key)}); {why}"
    try:
        return tiles.check(tuned_config(found, chosen, activations, source), dispatcher.caps, fmt, k, n_expert)
    except ValueError as e:
        table = tiles.choose(dispatcher.device_class, dispatcher.caps, fmt, k, path, activations)
        return replace(table, source=f"tuned tiles not used at K={k} ({e}); {table.source}")
