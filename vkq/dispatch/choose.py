"""Pick the pipeline and its parameters for one mat-vec on one device.

Choice order (each level wins over the ones after it):
  1. an explicit `path=` argument;
  2. the environment: VKQ_PATH=dmmv|mmvq (for types that have that path),
     VKQ_DISABLE_INT_DOT=1;
  3. this device's own tuning results (`vkq tune`, vkq.dispatch.tuning_store);
  4. the vendor table of the device's class (vkq.dispatch.tables);
  5. the device's limits, applied last to whatever was chosen (`apply_limits`,
     then `fit_bindings` once the buffers are known).

Every limit that decides whether a launch computes the right numbers is in
`limit_problems`. The dispatcher's own choices (tables, tuning) are adapted
to them by `apply_limits`, each change named in the config's `source`; a
caller's explicit `config=` is checked by `check_config`, which refuses what
does not fit instead of changing it. Replacements that give the same
numbers (shared-memory for subgroup reduction, int32 emulation for OpSDot,
storage for texel bindings) are made for both, and named in `source`.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

from ..blocks.activations import DEFAULT_ACTIVATIONS
from ..blocks.formats import CHUNK, BlockFormat
from ..device.caps import DeviceCaps
from . import coopmat, tables, tuning_store
from .classify import DeviceClass, classify
from .config import PipelineConfig, describe
from .paths import int_dot_disabled_by_env, requested_path

def row_chunks(k: int) -> int:
    """32-element chunks of a row of K values (padded to a whole chunk)."""
    return -(-k // CHUNK)


def shared_memory_bytes(cfg: PipelineConfig, ncols: int) -> int:
    """shaders/mul_mat_vec.comp's reduction buffer: partial[rows x ncols][wg] floats
    (declared whatever the reduction or split)."""
    return cfg.wg_size * cfg.rows_per_wg * ncols * 4


def loop_iterations(cfg: PipelineConfig, k: int, ncols: int, subgroup_size: int = 1) -> int:
    """An upper bound of the loop iterations one invocation of
    shaders/mul_mat_vec.comp takes: every loop counted as written, none
    assumed unrolled (the compiler unrolls the small ones, so the true count
    is lower). The block decoders have no loops (tests/test_launch_limits.py
    holds them to that). Keep in step with the shader's loops."""
    r, nc, cpt = cfg.rows_per_wg, ncols, cfg.chunks_per_thread
    units = row_chunks(k) // cpt
    per_thread = -(-units // cfg.wg_size) if cfg.split_k else units
    if cfg.path == "mmvq":
        chunk = 1 + nc + r * (1 + nc)  # x loads per column; rows x columns
    elif not (cfg.split_k and nc >= r):  # x of every column held: the columns' x; rows x halves x columns
        chunk = 1 + nc + r * (1 + 2 * (1 + nc))
    else:  # the rows' half-blocks held: the rows' quants; halves x (rows' decodes, columns x rows)
        chunk = 1 + r + 2 * (1 + r + nc * (1 + r))
    unit = 1 + (r if cpt == 8 else 0) + cpt * chunk  # (8 chunks: one header load per row)
    sums = r * nc
    if not cfg.split_k:
        tail = sums  # writes
    elif cfg.subgroup:
        subgroups = -(-cfg.wg_size // max(1, subgroup_size))
        tail = 4 * sums + subgroups * (1 + sums)  # add, store, zero, subgroups x sums, writes
    else:
        tail = 3 * sums + (cfg.wg_size.bit_length() - 1) * (1 + sums)  # store, tree, read, writes
    return sums + per_thread * unit + tail


def _workgroup_problems(cfg: PipelineConfig, caps: DeviceCaps, ncols: int) -> list[str]:
    """The limits of any shape: threads per workgroup, shared memory."""
    out = []
    max_wg = min(caps.max_workgroup_invocations, caps.max_workgroup_size_x)
    if cfg.wg_size > max_wg:
        out.append(f"wg_size {cfg.wg_size} > the device's {max_wg} threads per workgroup")
    shared = shared_memory_bytes(cfg, ncols)
    if shared > caps.max_shared_memory:
        out.append(f"wg_size {cfg.wg_size} x rows_per_wg {cfg.rows_per_wg} x {ncols} column(s) x 4 bytes = "
                   f"{shared} bytes of shared memory > the device's {caps.max_shared_memory}")
    return out


def limit_problems(cfg: PipelineConfig, caps: DeviceCaps, fmt: BlockFormat, k: int, ncols: int) -> list[str]:
    """Why this launch would not compute the right numbers on this device
    for a K-wide matrix and `ncols` columns (empty: it would)."""
    out = _workgroup_problems(cfg, caps, ncols)
    if row_chunks(k) % cfg.chunks_per_thread:
        out.append(f"chunks_per_thread {cfg.chunks_per_thread} does not divide the {row_chunks(k)} "
                   f"32-element chunks of a row of K={k}")
    elif caps.max_loop_iterations is not None:
        n = loop_iterations(cfg, k, ncols, caps.subgroup_size)
        if n > caps.max_loop_iterations:
            out.append(f"a thread would take up to {n} loop iterations at K={k} with {ncols} column(s) "
                       f"({'split_k' if cfg.split_k else 'rows per thread'}, wg_size {cfg.wg_size}, "
                       f"rows_per_wg {cfg.rows_per_wg}); this driver cuts a thread's loops short after "
                       f"{caps.max_loop_iterations}")
    return out


def _same_numbers_fallbacks(cfg: PipelineConfig, caps: DeviceCaps) -> tuple[PipelineConfig, list[str]]:
    """Replacements that compute the same numbers: the shared-memory
    reduction where subgroup arithmetic is missing, the int32 emulation
    where OpSDot is not enabled (or VKQ_DISABLE_INT_DOT)."""
    notes = []
    if cfg.subgroup and not caps.subgroup_arithmetic:
        cfg = replace(cfg, subgroup=False)
        notes.append("shared-memory reduction: no subgroup arithmetic")
    if cfg.int_dot and not (caps.int_dot and not int_dot_disabled_by_env()):
        cfg = replace(cfg, int_dot=False)
        notes.append("int32 emulation of OpSDot: " + ("VKQ_DISABLE_INT_DOT" if caps.int_dot
                                                       else "the int-dot feature is not enabled"))
    return cfg, notes


def _with_notes(cfg: PipelineConfig, notes: list[str]) -> PipelineConfig:
    return replace(cfg, source=f"{cfg.source}; {'; '.join(notes)}") if notes else cfg


def apply_limits(cfg: PipelineConfig, caps: DeviceCaps, fmt: BlockFormat, k: int, ncols: int) -> PipelineConfig:
    """The dispatcher's choice (a table's or tuning's, or a tuning candidate)
    made to fit this device and shape, each change named in `source`:
    wg_size halved to the device's maximum; chunks_per_thread halved until
    it divides the row; rows_per_wg halved until the reduction buffer fits
    the shared memory; then, while a thread's loops would pass the driver's
    budget: threads split K (split_k), rows_per_wg halved, wg_size doubled.
    ValueError if nothing fits (a K far beyond any model's)."""
    cfg, notes = _same_numbers_fallbacks(cfg, caps)
    max_wg = min(caps.max_workgroup_invocations, caps.max_workgroup_size_x)

    def change(why: str, **kw) -> None:
        nonlocal cfg
        notes.append(", ".join(f"{name} {getattr(cfg, name)} -> {v}" for name, v in kw.items()) + f": {why}")
        cfg = replace(cfg, **kw)

    if cfg.wg_size > max_wg:
        change(f"the device's maximum is {max_wg}", wg_size=1 << (max_wg.bit_length() - 1))
    cpt = cfg.chunks_per_thread
    while cpt > 1 and row_chunks(k) % cpt:
        cpt //= 2
    if cpt != cfg.chunks_per_thread:
        change(f"to divide the {row_chunks(k)} chunks of a row", chunks_per_thread=cpt)
    rows = cfg.rows_per_wg
    while rows > 1 and shared_memory_bytes(replace(cfg, rows_per_wg=rows), ncols) > caps.max_shared_memory:
        rows //= 2
    if rows != cfg.rows_per_wg:
        change(f"shared memory ({caps.max_shared_memory} bytes) at {ncols} column(s)", rows_per_wg=rows)
    budget = caps.max_loop_iterations
    why = f"loop budget of this driver ({budget} iterations per thread) at K={k}"
    while budget is not None and loop_iterations(cfg, k, ncols, caps.subgroup_size) > budget:
        if not cfg.split_k:
            change(why, split_k=True)
        elif cfg.rows_per_wg > 1:
            change(why, rows_per_wg=cfg.rows_per_wg // 2)
        elif 2 * cfg.wg_size <= max_wg and shared_memory_bytes(replace(cfg, wg_size=2 * cfg.wg_size), ncols) \
                <= caps.max_shared_memory:
            change(why, wg_size=2 * cfg.wg_size)
        else:
            break
    cfg = _with_notes(cfg, notes)
    problems = limit_problems(cfg, caps, fmt, k, ncols)
    if problems:
        raise ValueError(f"no launch of {fmt.name} at K={k} with {ncols} column(s) fits this device: "
                         + "; ".join(problems))
    return cfg


def check_config(cfg: PipelineConfig, caps: DeviceCaps, fmt: BlockFormat, k: int, ncols: int) -> PipelineConfig:
    """A caller's explicit configuration, as it will run: refused (ValueError
    naming every problem) where it would not compute the right numbers on
    this device; only the same-numbers replacements are made."""
    if not isinstance(cfg, PipelineConfig):
        raise TypeError(f"config must be a vkq.dispatch.config.PipelineConfig, got {type(cfg).__name__}")
    if cfg.path == "mmvq" and not fmt.has_int8_path:
        raise ValueError(f"{fmt.name} has no int8 (mmvq) path")
    problems = limit_problems(cfg, caps, fmt, k, ncols)
    if problems:
        raise ValueError("config does not fit this device: " + "; ".join(problems))
    cfg, notes = _same_numbers_fallbacks(cfg, caps)
    return _with_notes(cfg, notes)


def fit_bindings(cfg: PipelineConfig, caps: DeviceCaps, x_bytes: int, weights_buffer_bytes: int) -> PipelineConfig:
    """Fall back to storage buffers where a texel view would hold more texels
    than the device's maxTexelBufferElements (x in 16-byte texels, the
    weights in 4-byte ones, the smallest of their views). The fallback is
    named in `source`; the numbers are the same either way."""
    notes = []
    if cfg.x_binding == "texel" and x_bytes // 16 > caps.max_texel_buffer_elements:
        notes.append(f"x as storage: {x_bytes // 16} texels > maxTexelBufferElements {caps.max_texel_buffer_elements}")
        cfg = replace(cfg, x_binding="storage")
    if cfg.weights_binding == "texel" and weights_buffer_bytes // 4 > caps.max_texel_buffer_elements:
        notes.append(f"weights as storage: {weights_buffer_bytes // 4} words > maxTexelBufferElements "
                     f"{caps.max_texel_buffer_elements}")
        cfg = replace(cfg, weights_binding="storage")
    return _with_notes(cfg, notes)


def device_wide_problems(params: dict, caps: DeviceCaps) -> list[str]:
    """Limits a tuning entry (measured at one column) breaks on this device
    whatever the shape: workgroup size and shared memory."""
    return _workgroup_problems(PipelineConfig.from_params(params, "dmmv"), caps, 1)


class Dispatcher:
    """The choice for one device: its class, its vendor table and tuning."""

    def __init__(self, caps: DeviceCaps, device_class: DeviceClass, tuned: dict[str, dict],
                 coopmat_checks: dict[str, dict] | None = None):
        self.caps = caps
        self.device_class = device_class
        self.tuned = tuned
        # The cooperative-matrix kernel's self-checks on this device (vkq.dispatch.coopmat).
        self.coopmat_checks = {} if coopmat_checks is None else coopmat_checks

    @classmethod
    def for_device(cls, info, caps: DeviceCaps) -> "Dispatcher":
        tuned = tuning_store.load(info)
        problems = [f"{qtype}/{key}: {p}" for qtype, entry in tuned.items() for key in tuning_store.ENTRY_KEYS
                    if key in entry for p in device_wide_problems(entry[key], caps)]
        if problems:
            warnings.warn(f"vkq: ignoring tuning file {tuning_store.tuning_path(info)}: it does not fit this "
                          f"device: {'; '.join(problems[:3])}; using the vendor table. Run `vkq tune` again.",
                          stacklevel=2)
            tuned = {}
        return cls(caps, classify(info), tuned, coopmat.load_checks(info) if caps.coopmat or caps.coopmat_int8
                   else {})

    def choose(self, fmt: BlockFormat, rows: int, k: int, ncols: int = 1, path: str | None = None,
               activations: str = DEFAULT_ACTIVATIONS) -> PipelineConfig:
        """The pipeline for one mat-vec. `activations`: those of the int8 path
        if it is chosen (a table rule may depend on them).

        Batch invariance: a column's result does not depend on how many
        columns share the call. Where the rules pick another summation order
        for ncols > 1 than for one column (another path, another split of K),
        the n = 1 choice's order is kept, with this column count's rows per
        workgroup where they fit (named in `source`); only where nothing of
        that order fits the device at this column count does the order change,
        and `source` says so."""
        cfg = self._choose(fmt, rows, k, ncols, path, activations)
        if ncols == 1:
            return cfg
        one = self._choose(fmt, rows, k, 1, path, activations)
        if cfg.summation == one.summation:
            return cfg
        kept = replace(one, rows_per_wg=cfg.rows_per_wg if cfg.path == one.path else one.rows_per_wg)
        while kept.rows_per_wg > 1 and limit_problems(kept, self.caps, fmt, k, ncols):
            kept = replace(kept, rows_per_wg=kept.rows_per_wg // 2)
        if limit_problems(kept, self.caps, fmt, k, ncols):
            return _with_notes(cfg, [f"the summation order differs from one column's: {one.summation} does not "
                                     f"fit {ncols} columns on this device"])
        return replace(kept, source=f"{one.source}; one column's summation order, kept at {ncols} columns "
                                    f"(the rules' choice there: {cfg.path}, {describe(cfg.params())})")

    def _choose(self, fmt: BlockFormat, rows: int, k: int, ncols: int, path: str | None,
                activations: str) -> PipelineConfig:
        """The rules' choice (explicit path, environment, tuning, table), fitted to the device."""
        path, path_source, env_note = requested_path(fmt, path)
        env_note = f"{env_note}; " if env_note else ""

        # Tuning measures one column at K >= k_min; other calls use the table.
        tuned = self.tuned.get(fmt.name)
        if tuned is not None and (ncols != 1 or k < tuned["k_min"]):
            tuned = None
        want = path or (tuned["best"] if tuned is not None else None)
        key = tuning_store.entry_key(want, activations) if want is not None else None
        if tuned is not None and key in tuned:
            chosen = want
            params, source, evidence = tuned[key], "tuned on this device (vkq tune)", frozenset({"tuned"})
        else:
            # (a tuned path without parameters for these activations: the table's)
            params, source, evidence = tables.lookup(self.device_class, fmt.name, rows, k, ncols, want, activations)
            chosen = params["path"]
            if want is not None and path is None:
                source = f"path from this device's vkq tune; parameters (none tuned for {activations}) from {source}"
        if path is not None:
            source = f"path from {path_source}; parameters from {source}"
        source = env_note + source
        return apply_limits(PipelineConfig.from_params(params, chosen, source, evidence), self.caps, fmt, k, ncols)
