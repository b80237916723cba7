"""vkq's public matmul backend: upload GGUF weights once, multiply many times.

    backend = vkq.Backend()                       # device from argument or VKQ_DEVICE
    w = backend.upload("Q4_K", (rows, k), data)   # raw GGUF bytes, stays on the device
    y = backend.matvec(w, x)                      # x: float32 (k,) or (k, n<=8)
    Y = backend.matmul(w, X)                      # X: float32 (k, n), any n (tiled past 8)
    y = backend.matvec_id(experts, x, ids)        # mixture of experts (MUL_MAT_ID)
    Y = backend.matmul_id(experts, X, ids)        # ... over many tokens: ids (n_tokens, n_used)

The int8 path multiplies by quantized activations (vkq.blocks.activations: "q8_1",
ggml's, by default, or the more precise "q8_1x2"), set per backend or per call.

Everything a caller can get wrong is checked here, before anything reaches
the driver. A mat-vec moves only x in and y out: for each (weights, path,
shape) the dispatches are recorded once into a Kompute sequence and replayed.
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict

import numpy as np

from .blocks.activations import DEFAULT_ACTIVATIONS, check_activations
from .blocks.formats import BlockFormat, GGMLType, get_format
from .blocks.layout import MatrixLayout, pack_rows
from .device import pipeline_cache
from .device.runtime import Device
from .dispatch.choose import Dispatcher
from .dispatch.coopmat import env_kernel
from .dispatch.gpu_classes import required_wave
from .dispatch.paths import env_path, int_dot_disabled_by_env
from .dispatch.tuning_store import tuning_dir
from .errors import DeviceDoesNotExecute
from .dispatch.config import PipelineConfig
from .graph import Graph
from .ops import MAX_GROUPS_X
from .resolve import (MAX_COLS, MAX_MATMUL_COLS, check_config_type, check_tile_config_type, check_weights, plan,
                      resolve)
from .tensor import Tensor, host_values
from .weights import Buffer, Weights

# matvec_many's graphs kept per backend (the least recently used go first):
# each holds its matrices alive and a few pipelines.
MANY_GRAPHS = 64


class _Call:
    """One Backend.matvec / matvec_id / matvec_many shape on its matrices: a
    graph (x in, mat-vecs, y out) recorded once and replayed per call."""

    __slots__ = ("graph", "xs", "ys", "ids")

    def __init__(self, graph: Graph, xs: list[Tensor], ys: list[Tensor], ids: Tensor | None = None):
        self.graph, self.xs, self.ys, self.ids = graph, xs, ys, ids


def _as_bytes(data, fmt: BlockFormat) -> np.ndarray:
    """Raw GGUF bytes of `data` as a flat uint8 array (no copy where possible)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, np.uint8)
    if not isinstance(data, np.ndarray):
        raise TypeError(f"weights data must be bytes or a numpy array, got {type(data).__name__}")
    natural = {GGMLType.F32: np.float32, GGMLType.F16: np.float16}.get(fmt.ggml_type)
    if data.dtype not in (np.uint8, np.int8) and data.dtype != natural:
        allowed = "uint8" + (f" or {np.dtype(natural).name}" if natural else "")
        raise TypeError(f"{fmt.name} weights data must be {allowed} (raw GGUF bytes), got dtype {data.dtype}")
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def _parse_shape(shape) -> tuple[int, int, int]:
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple (rows, K) or (n_expert, rows, K), got {shape!r}") from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"shape must hold integers, got {shape!r}")
    dims = tuple(int(d) for d in dims)
    if len(dims) not in (2, 3) or any(d < 1 for d in dims):
        raise ValueError(f"shape must be (rows, K) or (n_expert, rows, K) of positive sizes, got {shape!r}")
    return dims if len(dims) == 3 else (1, *dims)


def _leading_dims_fit(data: np.ndarray, n_expert: int, rows: int, fmt: BlockFormat) -> bool:
    """Whether 2-D or 3-D data holds the rows (and experts) a shape gives: its
    dimensions but the last must be (n_expert * rows,) or (n_expert, rows),
    or the data is a list of a quantized type's blocks, one block a row (as
    quantizers return them). (1-D data and bytes say nothing of their rows:
    only their size is checked.)"""
    if data.ndim not in (2, 3):
        return True
    if not fmt.is_plain and data.shape[-1] == fmt.block_bytes and data.dtype in (np.uint8, np.int8):
        return True
    return data.shape[:-1] == ((n_expert * rows,) if data.ndim == 2 else (n_expert, rows))


def _check_leading_dims(data, fmt: BlockFormat, shape, n_expert: int, rows: int) -> None:
    """Refuse a shape the data's own dimensions contradict. The byte count
    cannot tell (rows, K) from (K, rows), and the gguf package's
    ReaderTensor.shape lists a matrix K first: passed as is, its rows would be
    read as K and every mat-vec would return garbage."""
    if not isinstance(data, np.ndarray) or _leading_dims_fit(data, n_expert, rows, fmt):
        return
    shape = tuple(int(d) for d in shape)  # (numpy integers print as np.uint64(...))
    rev = shape[::-1]
    e2, rows2, k2 = (1, *rev) if len(rev) == 2 else rev
    fits = (_leading_dims_fit(data, e2, rows2, fmt) and (fmt.is_plain or k2 % fmt.block_elems == 0)
            and data.nbytes == MatrixLayout(fmt, e2, rows2, k2).gguf_nbytes)
    want = (n_expert * rows,) if data.ndim == 2 else (n_expert, rows)
    raise ValueError(f"{fmt.name} data of shape {data.shape} contradicts shape {shape} (the data's leading "
                     f"dimensions must be {want}): vkq's shape is (rows, K) or (n_expert, rows, K), K last"
                     + (f", where the gguf package's tensor.shape lists K first: pass shape {rev}" if fits
                        else " (the gguf package's tensor.shape lists K first)"))


def _check_x(x, k: int, what: str, max_cols: int = MAX_COLS, op: str = "vkq's mat-vec") -> np.ndarray:
    """x checked, as float32 (float16 and float64 converted: vkq.tensor.host_values)."""
    x = host_values(x, np.float32, what)
    if x.ndim not in (1, 2) or x.shape[0] != k:
        raise ValueError(f"{what} must have shape ({k},) or ({k}, n), got {x.shape}")
    if x.ndim == 2 and not 1 <= x.shape[1] <= max_cols:
        more = ("; more columns: Backend.matmul(weights, x), the tiled mat-mat, takes any number"
                if op == "vkq's mat-vec" and x.shape[1] > max_cols else "")
        raise ValueError(f"{what} has {x.shape[1]} columns; {op} takes 1 to {max_cols}{more}")
    return x


def _env_choices(path) -> tuple:
    """What the environment chooses for a call of this path, for its cached
    graph's key: VKQ_PATH (only where the path is auto) and VKQ_DISABLE_INT_DOT."""
    return env_path() if path is None or path == "auto" else None, int_dot_disabled_by_env()


def _save_pipeline_cache(manager, cache: dict) -> None:
    """A Backend's end (its finalizer: when it is collected or the process exits)."""
    if cache["keep"]:
        pipeline_cache.save(manager, cache["path"], cache["loaded"])


class Backend:
    """Quantized mat-vec on one Vulkan device.

    Thread-safe: calls from several threads on one Backend (same or different
    weights) give exactly the single-threaded results. A lock orders what
    shares state: each cached call's tensors and the device's one queue.
    A wait for the device releases Python's GIL (kp patch 0012): other
    threads run meanwhile."""

    def __init__(self, device: int | None = None, *, activations: str = DEFAULT_ACTIVATIONS):
        self.activations = check_activations(activations)
        self.device = Device(device)
        self.device_info = self.device.info
        # The pipelines an earlier process compiled on this device and driver,
        # before this one's first; written back when this Backend is done.
        self._pipeline_cache = {"path": pipeline_cache.cache_path(self.device_info, tuning_dir()), "keep": True}
        self._pipeline_cache["loaded"] = pipeline_cache.load(self.device.manager, self._pipeline_cache["path"])
        weakref.finalize(self, _save_pipeline_cache, self.device.manager, self._pipeline_cache)
        self.dispatcher = Dispatcher.for_device(self.device_info, self.device.caps)
        # The subgroup size every mat-vec pipeline asks for (None: the driver's choice).
        self.matvec_subgroup_size = required_wave(
            self.dispatcher.device_class, (self.device_info.subgroup_min_size, self.device_info.subgroup_max_size),
            self.device.subgroup_size_control)
        self._lock = threading.RLock()
        self._many: OrderedDict[tuple, _Call] = OrderedDict()  # matvec_many's graphs, least recent first
        self._in_flight: set[Graph] = set()  # graphs with a replay submitted and not yet waited for

    @functools.cached_property
    def executes(self) -> bool:
        """Whether the device runs its dispatches, by a known-answer mat-vec:
        an F32 2 x 32 matrix of small integers by a vector of ones, exact in
        float32 on every path. Mesa's null GPUs (RADV and NVK on drm-shim,
        tools/mesa26.sh) compile pipelines but leave every buffer as it was."""
        k = 32
        w = np.arange(2 * k, dtype=np.float32).reshape(2, k) % 7 - 3
        weights = self.upload("F32", (2, k), w.view(np.uint8))
        try:
            runs = bool(np.array_equal(self.matvec(weights, np.ones(k, np.float32)), w.sum(axis=1)))
        finally:
            weights.free()
        self._pipeline_cache["keep"] = runs  # (nothing a null GPU made is kept)
        return runs

    def require_execution(self, what: str) -> None:
        """DeviceDoesNotExecute unless the device runs its dispatches (`what`
        would measure, check or keep figures of it)."""
        if not self.executes:
            raise DeviceDoesNotExecute(
                f"{what}: device {self.device_info.index} ({self.device_info.name}) does not run its dispatches "
                f"(a known-answer mat-vec came back unchanged: a null GPU?); nothing it computes or times means "
                f"anything, so nothing is measured or kept")

    def __repr__(self) -> str:
        return f"<vkq.Backend device {self.device_info.index}: {self.device_info.name}, activations={self.activations}>"

    # -- weights and tensors -----------------------------------------------
    def upload(self, qtype, shape, data) -> Weights:
        """Put GGUF weights on the device; `data` is their raw bytes in GGUF order."""
        fmt = get_format(qtype)
        n_expert, rows, k = _parse_shape(shape)
        _check_leading_dims(data, fmt, shape, n_expert, rows)
        if not fmt.is_plain and k % fmt.block_elems:
            raise ValueError(f"K={k} is not a multiple of {fmt.name}'s block size {fmt.block_elems}")
        raw = _as_bytes(data, fmt)
        layout = MatrixLayout(fmt, n_expert, rows, k)
        if raw.size != layout.gguf_nbytes:
            raise ValueError(
                f"{fmt.name} data of shape {tuple(shape)} must be {layout.gguf_nbytes} bytes "
                f"({fmt.row_bytes(k)} per row), got {raw.size}"
            )
        raw = raw.reshape(n_expert, rows, fmt.row_bytes(k))
        buffers = []
        ranges = layout.split_rows(self.device.max_buffer_bytes)
        reserved = self.device.memory.reserve([layout.device_nbytes(rr.count) for rr in ranges],  # vkq.device.memory
                                              f"{fmt.name} weights of shape {tuple(shape)}")
        try:
            for rr in ranges:
                words, offsets = pack_rows(layout, raw, rr)
                buffers.append(Buffer(rr, self.device.upload(words), offsets))
        except BaseException:
            self.device.memory.release(reserved)
            raise
        return Weights(self, layout, buffers, tuple(int(s) for s in shape), reserved)

    def tensor(self, length: int, n: int = 1, dtype=np.float32, *, name: str = "") -> Tensor:
        """A device tensor of `n` vectors of `length` zeros (vkq.tensor)."""
        return Tensor(self, length, n, dtype, name)

    def graph(self, timestamps: bool = False) -> Graph:
        """A graph of operations recorded once, replayed with one submit (vkq.graph).
        timestamps: time each replay's kernels on the GPU (Graph.kernel_seconds)."""
        return Graph(self, timestamps)

    # -- the dispatcher's choice -------------------------------------------
    def pipeline(self, weights: Weights, ncols: int = 1, path: str | None = None,
                 activations: str | None = None) -> PipelineConfig:
        """The pipeline the dispatcher picks for this weights matrix (vkq.resolve);
        on the int8 path its activations are `activations` or the backend's."""
        return resolve(self, weights, ncols, path, None, activations)

    def _call(self, w: Weights, ncols: int, n_slots: int, shared_x: bool, path, activations,
              config) -> _Call:
        """The cached graph of one mat-vec call shape (made on first use)."""
        check_config_type(config)  # before it is hashed into the key
        key = (ncols, n_slots, shared_x, path, activations, config, *_env_choices(path))
        call = w._calls.get(key)
        if call is not None:
            return call
        with self._lock:
            n_x = (1 if shared_x else n_slots) if n_slots else ncols
            cfg = resolve(self, w, ncols, path, config, activations, n_x)
            if cfg.path == "mmvq" and not self.device.patched_kp:
                raise RuntimeError("the int8 path needs vkq's Kompute patch (tools/install_kompute.sh)")
            # The same pipeline, whichever rule or key chose it, is recorded once
            # (a config's provenance is not part of its equality).
            cfg_key = (cfg, ncols, n_slots, shared_x)
            call = w._calls_by_config.get(cfg_key)
            if call is None:
                g = Graph(self)
                x = g.input(self.tensor(w.layout.k, n_x, name="x"))
                ids = g.input(self.tensor(n_slots, dtype=np.int32, name="ids")) if n_slots else None
                y = g._add_matvec(w, x, cfg, ids=ids)  # (resolved above, once)
                g.output(y)
                g._held_by(w)  # (w keeps the call: no reference cycle)
                call = w._calls_by_config[cfg_key] = _Call(g, [x], [y], ids)
            w._calls[key] = call
        return call

    def _forget_many(self, w: Weights) -> None:
        """Destroy matvec_many's graphs that read w (being freed)."""
        for key in [key for key, call in self._many.items() if id(w) in call.graph._weights]:
            self._many.pop(key).graph.destroy()

    # -- mat-vec -----------------------------------------------------------
    def matvec(self, weights: Weights, x: np.ndarray, path: str | None = None, *,
               activations: str | None = None, config: PipelineConfig | None = None) -> np.ndarray:
        """y = W @ x. x: float32 (K,) -> (rows,), or (K, n) -> (rows, n) for n <= 8
        (float16 and float64 x are converted to float32: vkq.tensor.host_values).

        `path`: "dmmv", "mmvq", or None / "auto" (the dispatcher's choice).
        `activations`: the int8 path's activation format for this call
        (default: the backend's). `config` bypasses the dispatcher (for
        `vkq tune` and parameter tests); it is still held to the device's limits."""
        w = check_weights(self, weights, expert_stack=False)
        x = _check_x(x, w.layout.k, "x")
        call = self._call(w, 1 if x.ndim == 1 else x.shape[1], 0, False, path, activations, config)
        k, rows = w.layout.k, w.layout.rows
        with self._lock:
            call.xs[0]._host[:, :k] = x.T if x.ndim == 2 else x
            call.graph.run()
            y = call.ys[0]._host[:, :rows]
            return y[0].copy() if x.ndim == 1 else y.T.copy()

    def matmul(self, weights: Weights, x: np.ndarray, path: str | None = None, *, activations: str | None = None,
               config=None) -> np.ndarray:
        """y = W @ x for any number of columns: x float32 (K,) -> (rows,), or
        (K, n) -> (rows, n) for n >= 1, as numpy's W @ x.

        Up to MAX_COLS (8) columns this is `matvec(weights, x, path,
        activations=...)` (the same pipeline, the same bits); more run the
        tiled mat-mat on the tiles the dispatcher picks for `path` ("dmmv":
        float; "mmvq": int8 with Q8_1 activations; None: its choice) and
        `activations` (`matmul_pipeline` says which), or `config`, a
        vkq.dispatch.tiles.TileConfig held to the device's limits (mat-mat only)."""
        w = check_weights(self, weights, expert_stack=False)
        x = _check_x(x, w.layout.k, "x", MAX_MATMUL_COLS, "matmul")
        n = 1 if x.ndim == 1 else x.shape[1]
        if n <= MAX_COLS:
            if config is not None:
                raise ValueError(f"config: x has {n} column(s), which the mat-vec takes; give a mat-vec's config "
                                 "to matvec()")
            return self.matvec(w, x, path, activations=activations)
        check_tile_config_type(config)  # (before it is hashed into the call's key)
        call = self._matmul_call(w, n, path, activations, config)
        k, rows = w.layout.k, w.layout.rows
        with self._lock:
            call.xs[0]._host[:, :k] = x.T
            call.graph.run()
            return call.ys[0]._host[:, :rows].T.copy()

    def matmul_pipeline(self, weights: Weights, n: int, path: str | None = None, activations: str | None = None):
        """What matmul runs for n columns (vkq.resolve.plan): the mat-vec's
        PipelineConfig up to 8, else the mat-mat's TileConfig (its `kernel`
        names the kernel: "mul_mm float", "mul_mm int8 ...", "mul_mm coopmat
        f16 8x8x8", "mul_mm coopmat int8 16x16x16", ...); `source` says what
        the choice rests on (VKQ_MATMUL forces a mat-mat kernel)."""
        return plan(self, weights, n, path, activations)

    def _matmul_call(self, w: Weights, n: int, path, activations, config) -> _Call:
        """The cached graph of a mat-mat of n columns (made on first use)."""
        key = ("matmul", n, path, activations, config, *_env_choices(path), env_kernel())
        call = w._calls.get(key)
        if call is not None:
            return call
        with self._lock:
            g = Graph(self)
            x = g.input(self.tensor(w.layout.k, n, name="x"))
            y = g.output(g.matmul(w, x, path, activations=activations, config=config))
            g._held_by(w)  # (w keeps the call: no reference cycle)
            call = w._calls_by_config[key] = w._calls[key] = _Call(g, [x], [y])  # (freed with w)
        return call

    def matvec_id(self, experts: Weights, x: np.ndarray, ids: np.ndarray, path: str | None = None, *,
                  activations: str | None = None, config: PipelineConfig | None = None) -> np.ndarray:
        """MUL_MAT_ID: y[i] = experts[ids[i]] @ x (or @ x[i]); returns (n_used, rows).

        ids: int32 (n_used,) expert indices; x: float32 (K,) shared by all
        selected experts, or (n_used, K), one input per selected expert.
        Other integer ids (numpy's default int64) and float16 / float64 x are
        converted (vkq.tensor.host_values).
        """
        w = check_weights(self, experts, expert_stack=True)
        lay = w.layout
        ids = _check_ids(ids, lay.n_expert)
        x = host_values(x, np.float32, "x")
        n_used = ids.size
        if x.shape == (lay.k,):
            shared = True
        elif x.shape == (n_used, lay.k):
            shared = False
        else:
            raise ValueError(f"x must have shape ({lay.k},) or ({n_used}, {lay.k}) for {n_used} ids, got {x.shape}")
        call = self._call(w, 1, n_used, shared, path, activations, config)
        with self._lock:
            call.xs[0]._host[:, : lay.k] = x
            call.ids._host[0] = ids
            call.graph.run()
            return call.ys[0]._host[:, : lay.rows].copy()

    def matmul_id(self, experts: Weights, x: np.ndarray, ids: np.ndarray, path: str | None = None, *,
                  activations: str | None = None, config=None) -> np.ndarray:
        """MUL_MAT_ID over many tokens: y[t, j] = experts[ids[t, j]] @ x[t]
        (or @ x[t, j]); returns (n_tokens, n_used, rows).

        ids: int32 (n_tokens, n_used) expert indices; x: float32 (n_tokens, K),
        one activation per token shared by its experts, or (n_tokens, n_used,
        K), one per used expert (other integer ids and float16 / float64 x
        converted, as matvec_id's). Always the tiled mat-mat kernel (Graph.matmul_id),
        for any n_tokens: the device groups the tokens by expert, so each
        expert's weights are read once per bn of its slots, and a token's
        results are the same bits whatever other tokens share the call.
        path, activations, config: as matmul's (config a TileConfig)."""
        w = check_weights(self, experts, expert_stack=True)
        lay = w.layout
        ids = _check_ids(ids, lay.n_expert, ndim=2)
        n_tokens, n_used = ids.shape
        x = host_values(x, np.float32, "x")
        if x.shape == (n_tokens, lay.k):
            shared = True
        elif x.shape == (n_tokens, n_used, lay.k):
            shared = False
        else:
            raise ValueError(f"x must have shape ({n_tokens}, {lay.k}) or ({n_tokens}, {n_used}, {lay.k}) for ids "
                             f"of shape {ids.shape}, got {x.shape}")
        check_tile_config_type(config)  # (before it is hashed into the call's key)
        call = self._matmul_id_call(w, n_tokens, n_used, shared, path, activations, config)
        with self._lock:
            call.xs[0]._host[:, : lay.k] = x.reshape(-1, lay.k)
            call.ids._host[:] = ids
            call.graph.run()
            return call.ys[0]._host[:, : lay.rows].reshape(n_tokens, n_used, lay.rows).copy()

    def _matmul_id_call(self, w: Weights, n_tokens: int, n_used: int, shared: bool, path, activations,
                        config) -> _Call:
        """The cached graph of a matmul_id call shape (made on first use)."""
        key = ("matmul_id", n_tokens, n_used, shared, path, activations, config,
               *_env_choices(path), env_kernel())
        call = w._calls.get(key)
        if call is not None:
            return call
        with self._lock:
            g = Graph(self)
            x = g.input(self.tensor(w.layout.k, n_tokens * (1 if shared else n_used), name="x"))
            ids = g.input(self.tensor(n_used, n_tokens, dtype=np.int32, name="ids"))
            y = g.output(g.matmul_id(w, x, ids, path, activations=activations, config=config))
            g._held_by(w)  # (w keeps the call: no reference cycle)
            call = w._calls_by_config[key] = w._calls[key] = _Call(g, [x], [y], ids)  # (freed with w)
        return call

    def matvec_many(self, products, path: str | None = None, *,
                    activations: str | None = None) -> list[np.ndarray]:
        """[W @ x for (W, x) in products] in one submit; x as in matvec.

        The mat-vecs are independent (no barrier between them) and those
        given the very same x array share one upload and one Q8_1
        quantization. Recorded once per combination of matrices and shapes;
        the last MANY_GRAPHS combinations are kept (a matrix's are dropped
        when it is freed)."""
        products = list(products)
        if not products:
            raise ValueError("matvec_many needs at least one (weights, x) pair")
        ws, xs, given_xs, slots = [], [], [], []
        for i, pair in enumerate(products):
            try:
                weights, x = pair
            except (TypeError, ValueError):
                raise TypeError(f"products[{i}] must be a (weights, x) pair") from None
            w = check_weights(self, weights, expert_stack=False)
            given = x  # (the very same array shares a slot, converted or not)
            x = _check_x(x, w.layout.k, f"products[{i}] x")
            slot = next((j for j, seen in enumerate(given_xs) if seen is given), None)
            if slot is None:
                xs.append(x)
                given_xs.append(given)
                slot = len(xs) - 1
            ws.append(w)
            slots.append(slot)
        ncols = [1 if x.ndim == 1 else x.shape[1] for x in xs]
        # (the graph holds the matrices: their ids stay theirs while it is cached)
        key = (tuple(id(w) for w in ws), tuple(slots), tuple(ncols), path, activations, *_env_choices(path))
        with self._lock:
            call = self._many.get(key)
            if call is None:
                g = Graph(self)
                inputs = [g.input(self.tensor(x.shape[0], n, name=f"x{j}")) for j, (x, n) in enumerate(zip(xs, ncols))]
                ys = [g.output(g.matvec(w, inputs[slot], path, activations=activations))
                      for w, slot in zip(ws, slots)]
                call = self._many[key] = _Call(g, inputs, ys)
                while len(self._many) > MANY_GRAPHS:
                    self._many.popitem(last=False)[1].graph.destroy()
            else:
                self._many.move_to_end(key)
            for t, x in zip(call.xs, xs):
                t._host[:, : x.shape[0]] = x.T if x.ndim == 2 else x
            call.graph.run()
            out = []
            for w, slot, y in zip(ws, slots, call.ys):
                values = y._host[:, : w.layout.rows]
                out.append(values[0].copy() if xs[slot].ndim == 1 else values.T.copy())
            return out


def _check_ids(ids, n_expert: int, ndim: int = 1) -> np.ndarray:
    """ids checked, as int32 (ids of another integer dtype that are in range
    fit it): matvec_id's (n_used,), or with ndim 2 matmul_id's (n_tokens, n_used)."""
    if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu":
        raise TypeError(f"ids must be a numpy int32 array (or another integer dtype, converted), got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)}")
    if ndim == 2:
        if ids.ndim != 2 or not 1 <= ids.size <= MAX_MATMUL_COLS:
            raise ValueError(f"ids must have shape (n_tokens, n_used) with 1 <= n_tokens * n_used <= "
                             f"{MAX_MATMUL_COLS}, got {ids.shape}")
    elif ids.ndim != 1 or not 1 <= ids.size <= MAX_GROUPS_X:
        raise ValueError(f"ids must have shape (n_used,) with 1 <= n_used <= {MAX_GROUPS_X}, got {ids.shape}")
    bad = ids[(ids < 0) | (ids >= n_expert)]
    if bad.size:
        raise ValueError(f"ids out of range: {bad[:4].tolist()} not in [0, {n_expert})")
    return ids.astype(np.int32, copy=False)
