"""The cooperative-matrix mat-mat's self-check on this device: what lets the
dispatcher offer a flavour of it for a block type (vkq.dispatch.coopmat).

At a type's first mat-mat with no path asked for (ensure_checked), or in
`vkq tune`'s tile phase for the type (run_check), on a device whose
cooperative-matrix features are enabled, the flavour multiplies a small
random matrix of the type (coopmat.CHECK_SHAPE) beside the tiled kernel of
its path (the float kernel for float16; the int8 kernel, on the same Q8_1
activations, for int8); the NMSE between the two, or the error that kept it
from running, is kept per device, type and flavour, and the flavour is
offered only where it is within coopmat.CHECK_NMSE. `vkq tune` holds each
other tile it races for the kernel to the same check (config_nmse).

It runs products through a backend it is handed (vkq.Backend's upload,
matmul and dispatcher), and imports nothing above the dispatch layer.
"""
from __future__ import annotations

import numpy as np

from ..blocks.formats import BlockFormat
from ..blocks.reference import nmse
from ..blocks.synthetic import random_weights
from . import coopmat, tiles
from .paths import requested_path


def config_nmse(backend, fmt: BlockFormat, cfg: tiles.TileConfig) -> float:
    """The NMSE of `cfg`'s mat-mat against the tiled kernel of its path on
    coopmat.CHECK_SHAPE (a random matrix of fmt, the same for every call;
    the int8 path on q8_1 activations); ValueError or RuntimeError where cfg
    does not fit or the driver refuses its pipeline."""
    disp, caps = backend.dispatcher, backend.device.caps
    rows, k, n = coopmat.CHECK_SHAPE
    rng = np.random.default_rng(0)
    x = rng.standard_normal((k, n)).astype(np.float32)
    w = backend.upload(fmt.name, (rows, k), random_weights(fmt, rows, k, rng))
    try:
        ref_cfg = tiles.choose(disp.device_class, caps, fmt, k, cfg.path, "q8_1")
        ref = backend.matmul(w, x, config=ref_cfg)
        return nmse(backend.matmul(w, x, config=cfg), ref)
    finally:
        w.free()


def checked_config(caps, fmt: BlockFormat, flavour: str = "float16") -> tiles.TileConfig:
    """The flavour's launch the self-check runs: the default tile's at the
    check's K (ValueError where it does not fit the device)."""
    return tiles.coopmat_config(caps, fmt, coopmat.CHECK_SHAPE[1], flavour=flavour)


def run_check(backend, fmt: BlockFormat, flavour: str = "float16") -> dict:
    """Check the flavour for fmt on the backend's device; record and return
    the result. On a device that does not run its dispatches (Backend.executes)
    the flavour is refused for this process and nothing is kept: both kernels
    would leave y as it was, and agree."""
    key = coopmat.check_key(fmt.name, flavour)
    if not backend.executes:
        record = coopmat.make_record(None, "the device does not run its dispatches (a null GPU?): no self-check")
        backend.dispatcher.coopmat_checks[key] = record
        return record
    try:
        cfg = checked_config(backend.device.caps, fmt, flavour)
        record = coopmat.make_record(config_nmse(backend, fmt, cfg))
    except (ValueError, RuntimeError) as e:  # (a pipeline the driver refused: the kernel is refused)
        record = coopmat.make_record(None, f"{type(e).__name__}: {e}")
    backend.dispatcher.coopmat_checks[key] = record
    coopmat.save_check(backend.device_info, key, record)
    return record


def ensure_checked(backend, fmt: BlockFormat, path: str | None) -> None:
    """Run the checks the dispatcher's choice may need for fmt and has not
    got on this device: each flavour it would offer (path: the caller's; a
    path asked for never takes the kernel, so needs no check; nor does a
    kernel VKQ_MATMUL forces)."""
    if requested_path(fmt, path)[0] is not None or coopmat.env_kernel() is not None:
        return
    for flavour in coopmat.FLAVOURS:
        if coopmat.status(backend.device.caps, fmt, backend.dispatcher.coopmat_checks, flavour)[0] \
                == coopmat.UNCHECKED:
            run_check(backend, fmt, flavour)
