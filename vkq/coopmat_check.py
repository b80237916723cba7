"""The cooperative-matrix mat-mat's self-check on this device: what lets the
dispatcher offer it for a block type (vkq.dispatch.coopmat).

At a type's first mat-mat with no path asked for (ensure_checked), or in
`vkq tune`'s tile phase for the type (run_check), on a device whose
cooperative-matrix features are enabled, the kernel multiplies a small
random matrix of the type (coopmat.CHECK_SHAPE) beside the float tiled
kernel; the NMSE between the two, or the error that kept it from running,
is kept per device and type, and the kernel is offered only where it is
within coopmat.CHECK_NMSE. `vkq tune` holds each other tile it races for
the kernel to the same check (config_nmse).
"""
from __future__ import annotations

import numpy as np

from .blocks.formats import BlockFormat
from .blocks.reference import nmse
from .blocks.synthetic import random_weights
from .dispatch import coopmat, tiles
from .dispatch.paths import requested_path


def config_nmse(backend, fmt: BlockFormat, cfg: tiles.TileConfig) -> float:
    """The NMSE of `cfg`'s mat-mat against the float tiled kernel's on
    coopmat.CHECK_SHAPE (a random matrix of fmt, the same for every call);
    ValueError or RuntimeError where cfg does not fit or the driver refuses
    its pipeline."""
    disp, caps = backend.dispatcher, backend.device.caps
    rows, k, n = coopmat.CHECK_SHAPE
    rng = np.random.default_rng(0)
    x = rng.standard_normal((k, n)).astype(np.float32)
    w = backend.upload(fmt.name, (rows, k), random_weights(fmt, rows, k, rng))
    try:
        ref = backend.matmul(w, x, config=tiles.choose(disp.device_class, caps, fmt, k, "dmmv"))
        return nmse(backend.matmul(w, x, config=cfg), ref)
    finally:
        w.free()


def checked_config(caps, fmt: BlockFormat) -> tiles.TileConfig:
    """The kernel's launch the self-check runs: COOPMAT_TILE's at the check's K
    (ValueError where it does not fit the device)."""
    return tiles.coopmat_config(caps, fmt, coopmat.CHECK_SHAPE[1])


def run_check(backend, fmt: BlockFormat) -> dict:
    """Check the kernel for fmt on the backend's device; record and return the
    result. On a device that does not run its dispatches (Backend.executes)
    the kernel is refused for this process and nothing is kept: both kernels
    would leave y as it was, and agree."""
    if not backend.executes:
        record = coopmat.make_record(None, "the device does not run its dispatches (a null GPU?): no self-check")
        backend.dispatcher.coopmat_checks[fmt.name] = record
        return record
    try:
        cfg = checked_config(backend.device.caps, fmt)
        record = coopmat.make_record(config_nmse(backend, fmt, cfg))
    except (ValueError, RuntimeError) as e:  # (a pipeline the driver refused: the kernel is refused)
        record = coopmat.make_record(None, f"{type(e).__name__}: {e}")
    backend.dispatcher.coopmat_checks[fmt.name] = record
    coopmat.save_check(backend.device_info, fmt.name, record)
    return record


def ensure_checked(backend, fmt: BlockFormat, path: str | None) -> None:
    """Run the check if the dispatcher would offer the kernel for fmt but has
    no check of it on this device (path: the caller's; a path asked for
    never takes the kernel, so needs no check)."""
    if requested_path(fmt, path)[0] is not None:
        return
    if coopmat.status(backend.device.caps, fmt, backend.dispatcher.coopmat_checks)[0] == coopmat.UNCHECKED:
        run_check(backend, fmt)
