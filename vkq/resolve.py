"""A product's pipeline, resolved in one place below Backend and Graph:
the mat-vec's (up to MAX_COLS columns) and the tiled mat-mat's (more).

Both take the same request: weights (this backend's, not freed, a matrix or
an expert stack as the call wants), a column count, a path ("dmmv", "mmvq",
or None / "auto": the dispatcher's choice), the int8 path's activation
format, or instead of path and activations an explicit PipelineConfig (vkq
tune, tests), which is held to the device's limits. `resolve` returns the
configuration that runs: activation planes set, texel bindings fitted to the
device's limits for these buffers and this many vectors of x. vkq.ops.MatVec
binds what it returns as it is. A product of more columns gets
`resolve_tiles`' TileConfig (vkq.dispatch.tiles), bound by vkq.ops.MatMul;
`plan` says which of the two a column count gets.
"""
from __future__ import annotations

from dataclasses import replace

from .blocks.activations import ACTIVATION_PLANES, check_activations
from .blocks.lookup_tables import has_value_pairs
from .dispatch.coopmat_check import ensure_checked
from .dispatch import tile_tuning, tiles
from .dispatch.choose import check_config, fit_bindings
from .dispatch.config import PipelineConfig
from .dispatch.coopmat import env_kernel
from .dispatch.paths import check_request, env_path, int_dot_disabled_by_env
from .dispatch.tiles import TileConfig
from .ops import q8_1_words
from .weights import Weights

MAX_COLS = 8  # columns of x per mat-vec (batched decode, speculative decoding); more: the tiled mat-mat
MAX_MATMUL_COLS = 65535  # columns of a mat-mat (the Q8_1 quantizer of its int8 path takes one workgroup row per vector)


def check_weights(backend, weights, expert_stack: bool) -> Weights:
    """`weights` as a mat-vec (expert_stack False) or MUL_MAT_ID may use them."""
    if not isinstance(weights, Weights) or weights.backend is not backend:
        raise TypeError("weights must be a vkq.Weights returned by this backend's upload()")
    if weights.freed:
        raise ValueError(f"{weights!r} was freed")
    if weights.is_expert_stack != expert_stack:
        want = "an expert stack (n_expert, rows, K)" if expert_stack else "a matrix (rows, K)"
        raise ValueError(f"expected {want}, got weights of shape {weights.shape}; "
                         f"use {'matvec_id' if weights.is_expert_stack else 'matvec'}")
    return weights


def choose(backend, weights: Weights, ncols: int, path: str | None, activations: str | None) -> PipelineConfig:
    """The dispatcher's pipeline for this matrix, before its bindings are
    fitted; on the int8 path with `activations` (default: the backend's).
    Remembered per matrix (the choice costs more than a small mat-vec); the
    environment is part of the key, since it takes part in the choice."""
    if path is not None:
        path = check_request(path)
        path = None if path == "auto" else path
    activations = check_activations(activations or backend.activations)
    key = (ncols, path, activations, env_path() if path is None else None, int_dot_disabled_by_env())
    cfg = weights._configs.get(key)
    if cfg is None:
        lay = weights.layout
        cfg = backend.dispatcher.choose(lay.fmt, lay.rows, lay.k, ncols, path, activations)
        if cfg.path == "mmvq":
            cfg = replace(cfg, x_planes=ACTIVATION_PLANES[activations])
        weights._configs[key] = cfg
    return cfg


def fitted(cfg, caps, fmt, k_padded: int, n_x: int, weights_bytes: int):
    """The last of a mat-vec's or a mat-mat's config before its pipeline, the
    same wherever one is planned (here, `vkq pipelines`): value lookups off
    for a type that reads no value pairs (one pipeline, not two the same),
    and storage bindings where a texel view of x (n_x vectors of k_padded) or
    of the weights' largest buffer would pass the device's texel limit."""
    if cfg.value_lookup != "table" and not has_value_pairs(fmt.table):
        cfg = replace(cfg, value_lookup="table")
    x_words = q8_1_words(n_x, k_padded, cfg.x_planes) if cfg.path == "mmvq" else n_x * k_padded
    fit = tiles.fit_bindings if isinstance(cfg, TileConfig) else fit_bindings
    return fit(cfg, caps, 4 * x_words, weights_bytes)


def check_config_type(config) -> None:
    """A caller's `config=` is a PipelineConfig or None (checked before it is hashed into a cache key)."""
    if config is not None and not isinstance(config, PipelineConfig):
        raise TypeError(f"config must be a vkq.dispatch.config.PipelineConfig, got {type(config).__name__}")


def paired_rows(cfg: PipelineConfig) -> PipelineConfig:
    """cfg with its rows per workgroup rounded up to an even number: a fused
    SwiGLU's gate and up rows in pairs (a row's sums are the same)."""
    if cfg.rows_per_wg % 2 == 0:
        return cfg
    return replace(cfg, rows_per_wg=cfg.rows_per_wg + 1, source=f"{cfg.source}; rows_per_wg {cfg.rows_per_wg} -> "
                   f"{cfg.rows_per_wg + 1}: gate and up rows in pairs")


def resolve(backend, weights: Weights, ncols: int, path: str | None = None, config: PipelineConfig | None = None,
            activations: str | None = None, n_x: int | None = None, glu: bool = False) -> PipelineConfig:
    """The configuration a mat-vec of `ncols` columns (MUL_MAT_ID: 1) runs
    with, its bindings fitted for `n_x` vectors of x (default `ncols`).
    glu (a fused SwiGLU, vkq.ops.MatVec): the dispatcher's rows per
    workgroup rounded up to an even number (a row's sums are the same)."""
    check_config_type(config)
    caps, fmt, k = backend.device.caps, weights.layout.fmt, weights.layout.k
    if config is None:
        cfg = choose(backend, weights, ncols, path, activations)
        if glu and cfg.rows_per_wg % 2:
            cfg = check_config(paired_rows(cfg), caps, fmt, k, ncols)
    elif activations is not None:
        raise ValueError("give activations or config, not both (config.x_planes sets the activations)")
    else:
        cfg = check_config(config, caps, fmt, k, ncols)
        if glu and cfg.rows_per_wg % 2:
            raise ValueError(f"config: a fused SwiGLU takes gate and up rows in pairs: rows_per_wg must be even, "
                             f"got {cfg.rows_per_wg}")
    return fitted(cfg, caps, fmt, weights.layout.k_padded, ncols if n_x is None else n_x, _weights_bytes(weights))


def check_tile_config_type(config) -> None:
    """A caller's mat-mat `config=` is a TileConfig or None (checked before it is hashed into a cache key)."""
    if config is not None and not isinstance(config, TileConfig):
        raise TypeError(f"config must be a vkq.dispatch.tiles.TileConfig, got {type(config).__name__}")


def resolve_tiles(backend, weights: Weights, ncols: int, path: str | None = None, config: TileConfig | None = None,
                  activations: str | None = None, *, mul_mat_id: bool = False) -> TileConfig:
    """The TileConfig a mat-mat of `ncols` columns runs with: the
    dispatcher's (vkq.dispatch.tile_tuning.choose: this device's vkq tune
    results, else vkq.dispatch.tiles.choose; on `path` or its own, the int8
    path on `activations` or the backend's; remembered per matrix) or the
    caller's `config` held to the device's limits; bindings fitted to the
    buffers. mul_mat_id: for MUL_MAT_ID's kernel over `weights`, an expert
    stack, reading `ncols` vectors of x (the same tiles as a matrix of the
    stack's shape gets, whatever the slot count; the kernel's walk over the
    experts held to the device's limits too)."""
    check_tile_config_type(config)
    caps, lay = backend.device.caps, weights.layout
    n_expert = lay.n_expert if mul_mat_id else None
    if config is None:
        if path is not None:
            path = check_request(path)
            path = None if path == "auto" else path
        activations = check_activations(activations or backend.activations)
        key = ("tiles", lay.k, path, activations, env_path() if path is None else None, int_dot_disabled_by_env(),
               env_kernel())
        cfg = weights._configs.get(key)
        if cfg is None:
            ensure_checked(backend, lay.fmt, path)  # (the cooperative-matrix kernel, at first use)
            cfg = weights._configs[key] = tile_tuning.choose(backend.dispatcher, lay.fmt, lay.k, path, activations,
                                                             n_expert=n_expert)
        problems = tiles.limit_problems(cfg, caps, lay.k, n_expert) if mul_mat_id else []
        if problems:
            raise ValueError(f"no MUL_MAT_ID over {n_expert} experts on {cfg.describe()} fits this device: "
                             + "; ".join(problems))
    elif path is not None or activations is not None:
        raise ValueError("give path and activations or config, not both (config.path and config.x_planes set them)")
    else:
        cfg = tiles.check(config, caps, lay.fmt, lay.k, n_expert)
    return fitted(cfg, caps, lay.fmt, lay.k_padded, ncols, _weights_bytes(weights))


def _weights_bytes(weights: Weights) -> int:
    """The bytes of the weights' largest buffer (the texel view a binding would take)."""
    return 4 * max(buf.tensor.size() for buf in weights.buffers)


def plan(backend, weights: Weights, ncols: int, path: str | None = None,
         activations: str | None = None) -> PipelineConfig | TileConfig:
    """What a product of `ncols` columns runs (Backend.matmul, Graph.matmul):
    up to MAX_COLS the mat-vec's pipeline (the dispatcher's, as matvec's),
    more the tiled mat-mat's. Its `source` says what the choice rests on."""
    check_weights(backend, weights, expert_stack=False)
    if ncols <= MAX_COLS:
        return resolve(backend, weights, ncols, path, None, activations)
    return resolve_tiles(backend, weights, ncols, path, None, activations)
