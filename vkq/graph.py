"""Record many operations once, replay them with one submit.

    g = backend.graph()
    x = backend.tensor(4096)            # device tensors (vkq.tensor)
    g.input(x)                          # host values go up at every replay
    h = g.matvec(w_up, x)               # y tensors are made by the graph
    y = g.matvec(w_down, h)             # reads h: vkq puts a barrier before it
    g.output(y)                         # comes back to the host at every replay
    x.write(values); g.run(); y.read()  # or: r = g.submit(); ...; r.wait()

A graph is a list of nodes, each a few Kompute ops with the device tensors
it reads and writes. A compute barrier goes in front of a node only when it
reads or writes a tensor that a node since the last barrier wrote, or writes
one that such a node read: independent mat-vecs run back to back. Mat-vecs
on the int8 path quantize their x to Q8_1 once per value of x: every later
mat-vec of the same x (and activation format) reads the same quantized
tensor, until a node writes x again. Likewise MUL_MAT_ID mat-mats sort
their ids' slots by expert once per value of ids: a mixture-of-experts
layer's gate, up and down read one sort. Other operations join through
`add`.

The first replay records the Kompute sequence; after that the graph is
fixed. Replays of one graph never overlap: `submit` while one is in flight,
or waiting twice for one, is an error. While a replay is in flight nothing
it uses may change under it: touching one of its tensors from the host,
freeing its weights, or submitting another graph that writes a tensor it
uses (or uses a tensor it writes; inputs and outputs count as written) is
an error until it is waited for, by its `Replay.wait()` or `Graph.wait()`.
`run()` waits even when interrupted (Ctrl-C), and a Replay dropped unwaited
waits for itself: a graph is never left in flight for good. Every state
change of a graph (building, recording, submitting, waiting, destroying) is
atomic under its backend's lock, as `Weights.free` is: a graph may be used
from several threads.

MUL_MAT_ID's ids are checked on the host before every replay (their host
values: an input's, or a constant's before its first replay). On the device
they may be written only by ops that keep them in range by construction
and say so (an op's `bounded_ids`: (tensor, bound) pairs, e.g. the
mixture-of-experts router's top-k): ids any other op writes, in this graph
or another, are refused, since nothing could check them.
"""
from __future__ import annotations

import functools
import weakref

import kp
import numpy as np

from .device.timing import timestamp_span
from .ops import MAX_GROUPS_X, GroupByExpert, MatMul, MatVec, QuantizeQ8_1, fused_swiglu_fits, q8_1_words
from .resolve import MAX_COLS, MAX_MATMUL_COLS, check_weights, resolve, resolve_tiles
from .tensor import Tensor


def _ids_safe(ids: Tensor, n_expert: int) -> bool:
    """Every device write of ids so far (any graph's) stays in [0, n_expert)."""
    return not ids.device_written or (ids.ids_bound is not None and ids.ids_bound <= n_expert)


BARRIER = "barrier"  # the label of every compute barrier in a profile


class Replay:
    """One submitted replay of a graph; `wait()` once before touching its tensors.
    Dropped unwaited, it waits for itself (the graph stays usable)."""

    __slots__ = ("graph", "serial")

    def __init__(self, graph: "Graph", serial: int):
        self.graph, self.serial = graph, serial

    @property
    def done(self) -> bool:
        """The device has finished this replay (asked without waiting), or it
        was waited for; its tensors are the host's again only after wait()."""
        return self.graph._device_done(self.serial)

    def wait(self) -> None:
        if not self.graph._finish(self.serial):
            raise RuntimeError("this replay was already waited for")

    def __del__(self):
        self.graph._finish(self.serial)


def _check_flag(name: str, flag) -> None:
    if not isinstance(flag, (bool, np.bool_)):  # "yes" or 1 would pass as true, "" or None as false
        raise TypeError(f"{name} must be True or False, got {flag!r}")


def _check_glu(w, glu) -> None:
    """A fused SwiGLU (glu) asked of weights that can take it (ops.fused_swiglu_fits)."""
    _check_flag("glu", glu)
    if glu and not fused_swiglu_fits(w):
        raise ValueError(f"glu: {w!r} must stack gate and up matrices of equal rows (an even row count) in one "
                         f"weights buffer; it has {w.layout.rows} rows in {len(w.buffers)} buffer(s)")


def _locked(method):
    """Runs a Graph method under its backend's lock: a graph's state changes
    (building, recording, submitting, waiting, destroying) never interleave
    with another thread's, nor with a free of weights it reads."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.backend._lock:
            return method(self, *args, **kwargs)
    return locked


class _Collector:
    """Stands in for a kp.Sequence while a node records: keeps its ops."""

    def __init__(self):
        self.ops: list = []

    def record(self, op) -> "_Collector":
        self.ops.append(op)
        return self


class Graph:
    """Operations on one backend's device tensors, replayed with one submit each."""

    def __init__(self, backend, timestamps: bool = False):
        self.backend = backend
        self.timestamps = bool(timestamps) and backend.device_info.timestamps_supported
        self._ops: list = []  # kp ops in order, barriers included
        self._labels: list[str] = []  # what each op of _ops is, for profiles (vkq.llama.profile)
        self._kernel_span: list[int] = []  # index of the first and last kernel op
        self._keep: list = []  # what the recorded ops need alive (algorithms, Q8_1 tensors)
        self.nodes: list[tuple[str, object]] = []  # (label, op) of every node, in order (vkq.llama.profile)
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._weights: dict[int, object] = {}  # id -> Weights read by the graph
        self._tensors: dict[int, Tensor] = {}  # every tensor the graph touches
        self._written: set[int] = set()  # tensors written since the last barrier
        self._read: set[int] = set()  # tensors read since the last barrier
        self._versions: dict[int, int] = {}  # tensor id -> nodes that wrote it so far
        self._quantized: dict[tuple[int, int], tuple[Tensor, int]] = {}  # (x id, planes) -> (xq, x version)
        self._grouped: dict[tuple[int, int], tuple[Tensor, int]] = {}  # (ids id, n_expert) -> (groups, ids version)
        self.matvecs: list[tuple[object, object]] = []  # (weights, PipelineConfig) of every mat-vec
        self.matmuls: list[tuple[object, object]] = []  # (weights, TileConfig) of every mat-mat
        self.counts = {"barrier": 0, "quantize": 0, "group": 0, "matvec": 0, "matmul": 0, "op": 0}  # recorded
        self._seq = None
        self._submits = 0  # serial number of the last replay submitted
        self._flight = 0  # the serial of the replay in flight; 0: none
        self._writes: set[int] = set()  # ids of the tensors a replay writes (inputs and outputs too)
        self._ids_checks: list[tuple[Tensor, int]] = []  # (ids tensor, n_expert) of every MUL_MAT_ID
        self._kernel_seconds: float | None = None
        self._timestamps: list[int] | None = None  # of the last replay (timestamps=True)
        self._destroyed = False

    # -- building ------------------------------------------------------------
    def _own(self, t, what: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} must be a vkq.Tensor (backend.tensor(...)), got {type(t).__name__}")
        if t.backend is not self.backend:
            raise ValueError(f"{what} {t!r} belongs to another backend")
        return t

    def _open(self) -> None:
        if self._destroyed:
            raise RuntimeError("this graph was destroyed")
        if self._seq is not None:
            raise RuntimeError("this graph has been replayed and is fixed; record a new graph to change it")

    @_locked
    def input(self, t: Tensor) -> Tensor:
        """t's host values (Tensor.write) go to the device at the start of every replay."""
        return self._mark(t, self._inputs, "input")

    @_locked
    def output(self, t: Tensor) -> Tensor:
        """t comes back to the host at the end of every replay (Tensor.read)."""
        return self._mark(t, self._outputs, "output")

    def _mark(self, t: Tensor, marked: list[Tensor], what: str) -> Tensor:
        self._open()
        if self._own(t, what) not in marked:
            marked.append(t)
            self._tensors[id(t)] = t
            self._writes.add(id(t))  # (the device copy of an input, the host copy of an output)
            if marked is self._inputs:
                t.is_input = True
            else:
                t.is_output = True
        return t

    @_locked
    def barrier(self) -> None:
        """Order everything recorded so far before what follows, for a
        dependency the graph cannot see (vkq's own reads and writes need none)."""
        self._open()
        self._barrier()

    def _barrier(self) -> None:
        self._ops.append(self.backend.device.compute_barrier())
        self._labels.append(BARRIER)
        self._written.clear()
        self._read.clear()
        self.counts["barrier"] += 1

    @_locked
    def add(self, op, label: str | None = None) -> None:
        """Any operation with `reads` and `writes` (vkq.Tensor sequences) and
        `record(seq)`, which appends its Kompute ops (with barriers between
        its own dispatches); the graph orders it after what it depends on.
        label: what it is in a profile (default: the op's class name).
        An op that also writes the Q8_1 blocks of a float tensor x it writes
        says so in `quantized` = (x, xq, planes): mat-vecs on the int8 path
        then read xq instead of quantizing x themselves."""
        self._open()
        reads = [self._own(t, "a tensor the op reads") for t in op.reads]
        writes = [self._own(t, "a tensor the op writes") for t in op.writes]
        bounded = {}
        for t, bound in getattr(op, "bounded_ids", ()):
            if not any(t is w for w in writes) or t.dtype != np.int32:
                raise ValueError(f"an op's `bounded_ids` must name int32 tensors it writes, got {t!r}")
            bounded[id(t)] = int(bound)
        collector = _Collector()
        op.record(collector)
        self._node(collector.ops, reads, writes, keep=op, label=label or type(op).__name__, bounded=bounded)
        self.counts["op"] += 1
        quantized = getattr(op, "quantized", None)
        if quantized is not None:  # the op wrote x's Q8_1 blocks too: mat-vecs of x read them
            x, xq, planes = quantized
            if not {id(x), id(xq)} <= {id(t) for t in writes}:
                raise ValueError("an op's `quantized` (x, xq, planes) must name tensors it writes")
            self._quantized[(id(x), planes)] = (xq, self._versions[id(x)])

    def _node(self, ops: list, reads: list[Tensor], writes: list[Tensor], keep, label: str,
              bounded: dict | None = None) -> None:
        """Append a node's ops, after a barrier if it depends on what came since
        the last one. bounded: id -> bound of the int32 tensors it writes that
        stay in [0, bound) by construction (see the module's note on ids)."""
        r, w, bounded = {id(t) for t in reads}, {id(t) for t in writes}, bounded or {}
        for ids, n_expert in self._ids_checks:
            if id(ids) in w and bounded.get(id(ids), n_expert + 1) > n_expert:
                raise ValueError(f"{ids!r} holds a MUL_MAT_ID's ids: on the device only an op that keeps them "
                                 f"in [0, {n_expert}) by construction may write them")
        for t in (*reads, *writes):
            self._tensors[id(t)] = t
        for t in writes:
            bound = bounded.get(id(t))
            t.ids_bound = None if bound is None or (t.device_written and t.ids_bound is None) \
                else max(bound, t.ids_bound or 0)
            t.device_written = True
        if r & self._written or w & (self._written | self._read):
            self._barrier()
        if not self._kernel_span:
            self._kernel_span = [len(self._ops), 0]
        self._ops += ops
        self._labels += [BARRIER if isinstance(op, kp.OpGlobalMemoryBarrier) else label for op in ops]
        self._kernel_span[1] = len(self._ops) - 1
        self._written |= w
        self._read |= r
        self._writes |= w
        for i in w:
            self._versions[i] = self._versions.get(i, 0) + 1
        self._keep.append(keep)
        self.nodes.append((label, keep))

    def _check_x(self, x, k: int, n_max: int, what: str, more: str = "") -> Tensor:
        x = self._own(x, what)
        if x.dtype != np.float32:
            raise TypeError(f"{what} {x!r} must hold float32 values")
        if x.length != k:
            raise ValueError(f"{what} {x!r} has vectors of {x.length} values; the weights' K is {k}")
        if x.n > n_max:
            raise ValueError(f"{what} {x!r} holds {x.n} vectors; this mat-vec takes at most {n_max}{more}")
        return x

    def _out(self, out, x: Tensor, rows: int, n: int, name: str) -> Tensor:
        if out is None:
            return self.backend.tensor(rows, n, name=name)
        out = self._own(out, "out")
        if out is x:
            raise ValueError(f"out {out!r} is x: a mat-vec cannot write the vector it reads")
        if out.dtype != np.float32 or out.length != rows or out.n != n:
            raise ValueError(f"out {out!r} must be float32 with shape {(rows,) if n == 1 else (n, rows)}")
        return out

    def _x_for(self, x: Tensor, cfg) -> Tensor:
        """x itself (dmmv), or its Q8_1 blocks, quantized once per value of x."""
        if cfg.path != "mmvq":
            return x
        key = (id(x), cfg.x_planes)
        version = self._versions.get(id(x), 0)
        cached = self._quantized.get(key)
        if cached is not None and cached[1] == version:
            return cached[0]
        k_pad = x.stride
        xq = cached[0] if cached else Tensor(self.backend, q8_1_words(1, k_pad, cfg.x_planes), x.n, np.uint32)
        op = QuantizeQ8_1(self.backend.device, x.kp, xq.kp, x.n, k_pad, cfg.x_planes)
        self._node([kp.OpAlgoDispatch(op.algorithm)], [x], [xq], keep=(op, xq), label="quantize Q8_1")
        self._quantized[key] = (xq, version)
        self.counts["quantize"] += 1
        return xq

    def _groups_for(self, ids: Tensor, n_expert: int) -> Tensor:
        """ids' slots sorted by expert (ops.GroupByExpert), once per value of ids."""
        key = (id(ids), n_expert)
        version = self._versions.get(id(ids), 0)
        cached = self._grouped.get(key)
        if cached is not None and cached[1] == version:
            return cached[0]
        n_slots = ids.n * ids.length
        groups = cached[0] if cached else Tensor(self.backend, n_expert + n_slots, 1, np.uint32, "slots by expert")
        op = GroupByExpert(self.backend.device, ids.kp, groups.kp, n_expert)
        self._node([kp.OpAlgoDispatch(op.algorithm)], [ids], [groups], keep=(op, groups), label="group by expert")
        self._grouped[key] = (groups, version)
        self.counts["group"] += 1
        return groups

    def _matvec_node(self, w, cfg, x: Tensor, y: Tensor, ids: Tensor | None, n_slots: int, label: str | None,
                     glu: bool = False, accumulate: bool = False) -> None:
        xin = self._x_for(x, cfg)
        op = MatVec(self.backend.device, w, cfg, xin.kp, y.kp, ncols=1 if ids is not None else x.n,
                    ids=None if ids is None else ids.kp, n_slots=n_slots, shared_x=ids is not None and x.n == 1,
                    slots_per_x=n_slots // x.n if ids is not None else 1, y_stride=y.stride, glu=glu,
                    accumulate=accumulate, subgroup_size=self.backend.matvec_subgroup_size)
        collector = _Collector()
        op.record(collector)
        kind = "mat-vec" if ids is None else "MUL_MAT_ID"
        # (accumulating, it reads y too: ordered after y's last writer)
        self._node(collector.ops, [xin] + ([ids] if ids is not None else []) + ([y] if accumulate else []), [y],
                   keep=op, label=f"{label or kind} {w.qtype} {op.cfg.path}")
        self._weights[id(w)] = w
        self.matvecs.append((w, op.cfg))
        self.counts["matvec"] += 1

    @_locked
    def matvec(self, weights, x: Tensor, path: str | None = None, *, activations: str | None = None,
               config=None, out: Tensor | None = None, label: str | None = None, glu: bool = False,
               accumulate: bool = False) -> Tensor:
        """y = W @ x for each of x's vectors (1 to MAX_COLS): a tensor of x.n vectors of `rows` values.
        label: the matrix's role in a profile (its block type and path are added).
        glu: W stacks a gate matrix and an up matrix of rows / 2 rows each (in
        one weights buffer: `fused_swiglu_fits`), and y = silu(W_gate x) * (W_up x),
        rows / 2 values per vector: ggml's SwiGLU fused into the mat-vec, the
        bits of SwiGLU over the unfused mat-vec's output.
        accumulate: out += W @ x, each column into its own vector of `out`
        (given): a residual add folded into the mat-vec that produces it, the
        bits of the unfused product added to out afterwards; not with glu."""
        self._open()
        _check_flag("accumulate", accumulate)
        if accumulate and glu:
            raise ValueError("accumulate takes a plain mat-vec: a fused SwiGLU (glu) is not added into out")
        if accumulate and out is None:
            raise ValueError("accumulate adds W x into `out`: give out")
        w = check_weights(self.backend, weights, expert_stack=False)
        _check_glu(w, glu)
        x = self._check_x(x, w.layout.k, MAX_COLS, "x", more="; more vectors: Graph.matmul, the tiled mat-mat")
        cfg = resolve(self.backend, w, x.n, path, config, activations, glu=glu)
        y = self._out(out, x, w.layout.rows // (2 if glu else 1), x.n, "y")
        self._matvec_node(w, cfg, x, y, None, 0, label, glu, accumulate)
        return y

    @_locked
    def matvec_id(self, experts, x: Tensor, ids: Tensor, path: str | None = None, *,
                  activations: str | None = None, config=None, out: Tensor | None = None,
                  label: str | None = None, glu: bool = False) -> Tensor:
        """MUL_MAT_ID: y[i] = experts[ids[i]] @ x (one x shared), @ x[i] (one x
        per used expert), or @ x[i // (n_used / x.n)] (x.n vectors, each read
        by as many consecutive ids: the experts of a chunk of tokens); ids: an
        int32 tensor of n_used values in [0, n_expert), checked on the host,
        or written by an op that keeps them so (see the module's note).
        glu: every expert stacks gate and up matrices (as matvec's glu), and
        y[i] = silu(gate_e x) * (up_e x), e = ids[i]: rows / 2 values per slot."""
        self._open()
        w = check_weights(self.backend, experts, expert_stack=True)
        _check_glu(w, glu)
        ids = self._own(ids, "ids")
        if ids.dtype != np.int32 or ids.n != 1:
            raise ValueError(f"ids {ids!r} must be one int32 vector of the used experts")
        n_used = ids.length
        if not _ids_safe(ids, w.layout.n_expert):
            raise ValueError(f"ids {ids!r} are written on the device by an op that does not keep them in "
                             f"[0, {w.layout.n_expert}), where nothing can check them")
        if n_used > MAX_GROUPS_X:
            raise ValueError(f"ids {ids!r} selects {n_used} experts; a MUL_MAT_ID takes at most {MAX_GROUPS_X}")
        x = self._check_x(x, w.layout.k, n_used, "x")
        if n_used % x.n:
            raise ValueError(f"x {x!r} must hold 1 vector (shared), {n_used} (one per id) or a divisor of "
                             f"{n_used} (each read by as many consecutive ids)")
        cfg = resolve(self.backend, w, 1, path, config, activations, n_x=x.n, glu=glu)
        return self._add_matvec(w, x, cfg, ids=ids, out=out, label=label, glu=glu)

    @_locked
    def matmul(self, weights, x: Tensor, path: str | None = None, *, activations: str | None = None,
               config=None, out: Tensor | None = None, label: str | None = None, tiled: bool = False) -> Tensor:
        """y = W @ x for each of x's vectors, any number of them: up to
        MAX_COLS the mat-vec (`matvec(weights, x, path, activations=...)`,
        its bits), more the tiled mat-mat (shaders/mul_mm.comp) on the tiles
        vkq.resolve.resolve_tiles picks for `path` and `activations` (as
        matvec's), or `config` (a vkq.dispatch.tiles.TileConfig; mat-mat
        only). tiled: the tiled mat-mat at any column count, so that
        products of every size sum in one order (a prompt's chunks: a
        column's bits then do not depend on how many columns its chunk has).
        On the int8 path x is quantized to Q8_1 once per value of x,
        as for the mat-vecs. vkq.resolve.plan says which a column count
        gets. label: as matvec's."""
        self._open()
        _check_flag("tiled", tiled)
        w = check_weights(self.backend, weights, expert_stack=False)
        x = self._check_x(x, w.layout.k, MAX_MATMUL_COLS, "x")
        if x.n <= MAX_COLS and not tiled:
            if config is not None:
                raise ValueError(f"config: x holds {x.n} vector(s), which the mat-vec takes; "
                                 f"give a mat-vec's config to matvec()")
            return self.matvec(w, x, path, activations=activations, out=out, label=label)
        cfg = resolve_tiles(self.backend, w, x.n, path, config, activations)
        y = self._out(out, x, w.layout.rows, x.n, "y")
        xin = self._x_for(x, cfg)
        op = MatMul(self.backend.device, w, cfg, xin.kp, y.kp, ncols=x.n, y_stride=y.stride)
        collector = _Collector()
        op.record(collector)
        self._node(collector.ops, [xin], [y], keep=op, label=f"{label or 'mat-mat'} {w.qtype} {cfg.kernel}")
        self._weights[id(w)] = w
        self.matmuls.append((w, cfg))
        self.counts["matmul"] += 1
        return y

    @_locked
    def matmul_id(self, experts, x: Tensor, ids: Tensor, path: str | None = None, *,
                  activations: str | None = None, config=None, out: Tensor | None = None,
                  label: str | None = None) -> Tensor:
        """MUL_MAT_ID over many tokens on the tiled mat-mat kernel, at any
        count: y[s] = experts[ids[s]] @ x[s // (n_slots / x.n)] for every
        used-expert slot s (token-major: slot = token * n_used + j). ids:
        an int32 tensor of n_slots = n_tokens * n_used values, one vector
        (as the router's ExpertRouting writes it) or n_tokens vectors of
        n_used; in [0, n_expert), checked as matvec_id's. x: n_tokens
        vectors (each shared by its token's slots) or n_slots (one per
        slot). y: n_slots vectors of `rows`, matvec_id's layout. The device
        sorts the slots by expert (once per value of ids: every matmul_id
        over the same ids reads that sort), then reads each expert's
        weights once per bn of its slots, not once per slot
        (vkq.ops.MatMul); a slot's bits
        depend only on its x, its expert and the tiles
        (vkq.resolve.resolve_tiles: `path`, `activations` or `config` as
        matmul's), not on the other tokens."""
        self._open()
        w = check_weights(self.backend, experts, expert_stack=True)
        n_expert = w.layout.n_expert
        ids = self._own(ids, "ids")
        if ids.dtype != np.int32:
            raise TypeError(f"ids {ids!r} must hold int32 expert indices")
        n_slots = ids.n * ids.length
        if n_slots > MAX_MATMUL_COLS:
            raise ValueError(f"ids {ids!r} holds {n_slots} used-expert slots; a MUL_MAT_ID takes at most "
                             f"{MAX_MATMUL_COLS}")
        if not _ids_safe(ids, n_expert):
            raise ValueError(f"ids {ids!r} are written on the device by an op that does not keep them in "
                             f"[0, {n_expert}), where nothing can check them")
        x = self._check_x(x, w.layout.k, n_slots, "x")
        if n_slots % x.n or (ids.n > 1 and x.n not in (ids.n, n_slots)):
            want = (f"{ids.n} (one per token) or {n_slots} (one per slot)" if ids.n > 1
                    else f"a divisor of {n_slots}: n_tokens (each shared by its token's slots) or {n_slots}")
            raise ValueError(f"x {x!r} holds {x.n} vectors for ids {ids!r}; it must hold {want}")
        cfg = resolve_tiles(self.backend, w, x.n, path, config, activations, mul_mat_id=True)
        y = self._out(out, x, w.layout.rows, n_slots, "y")
        xin = self._x_for(x, cfg)
        groups = self._groups_for(ids, n_expert)
        op = MatMul(self.backend.device, w, cfg, xin.kp, y.kp, ncols=x.n, y_stride=y.stride, groups=groups.kp,
                    n_slots=n_slots, slots_per_x=n_slots // x.n)
        collector = _Collector()
        op.record(collector)
        self._node(collector.ops, [xin, groups], [y], keep=op,
                   label=f"{label or 'MUL_MAT_ID mat-mat'} {w.qtype} {cfg.kernel}")
        self._weights[id(w)] = w
        self.matmuls.append((w, cfg))
        self._ids_checks.append((ids, n_expert))
        self.counts["matmul"] += 1
        return y

    def _add_matvec(self, w, x: Tensor, cfg, *, ids: Tensor | None = None, out: Tensor | None = None,
                    label: str | None = None, glu: bool = False) -> Tensor:
        """A mat-vec (MUL_MAT_ID with ids; glu: SwiGLU fused) of checked weights,
        x and ids on a configuration vkq.resolve returned (Backend's calls
        resolve theirs once, to share one graph per pipeline)."""
        n_out = x.n if ids is None else ids.length
        y = self._out(out, x, w.layout.rows // (2 if glu else 1), n_out, "y")
        self._matvec_node(w, cfg, x, y, ids, 0 if ids is None else n_out, label, glu)
        if ids is not None:
            self._ids_checks.append((ids, w.layout.n_expert))
        return y

    def _held_by(self, w) -> None:
        """This graph is one of w's own cached calls (Backend's): it refers to w
        weakly, so that w and its calls form no reference cycle and go, device
        memory and all, as soon as the caller drops w (not at some later run
        of the cycle collector)."""
        proxy = weakref.proxy(w)
        self._weights[id(w)] = proxy
        self.matvecs = [(proxy if v is w else v, cfg) for v, cfg in self.matvecs]
        self.matmuls = [(proxy if v is w else v, cfg) for v, cfg in self.matmuls]

    # -- replaying -----------------------------------------------------------
    @_locked
    def record(self) -> None:
        """Record the Kompute sequence now, and upload the host values of
        the tensors no replay has taken yet, without running anything (the
        first replay does this itself where it was not done): what is
        built once goes before a replay that is timed. The graph is fixed
        from here on."""
        if self._destroyed:
            raise RuntimeError("this graph was destroyed")
        if self._seq is None:
            self._record()

    def _record(self) -> None:
        dev = self.backend.device
        head = [kp.OpTensorSyncDevice([t.kp for t in self._inputs])] if self._inputs else []
        tail = [kp.OpTensorSyncLocal([t.kp for t in self._outputs])] if self._outputs else []
        ops = head + self._ops + tail
        self._labels = ["upload inputs"] * len(head) + self._labels + ["read back outputs"] * len(tail)
        if not ops:
            raise ValueError("the graph is empty: record mat-vecs or operations before replaying it")
        # kp latches one timestamp before the first op and one after each op.
        seq = dev.manager.sequence(0, len(ops) + 1) if self.timestamps else dev.manager.sequence()
        for op in ops:
            seq.record(op)
        if self._kernel_span:
            self._kernel_span = [i + len(head) for i in self._kernel_span]
        fresh = [t for t in self._tensors.values() if not t.on_device]
        if fresh:  # one upload of their host values (see vkq.tensor)
            dev.manager.sequence().eval(kp.OpTensorSyncDevice([t.kp for t in fresh]))
            for t in fresh:
                t.on_device = True
        self._seq = seq

    @property
    def in_flight(self) -> bool:
        """A replay was submitted and not yet waited for."""
        return self._flight != 0

    @_locked
    def submit(self) -> Replay:
        """Submit one replay and return at once; `wait()` on the result (or on the graph)."""
        if self._destroyed:
            raise RuntimeError("this graph was destroyed")
        if self.in_flight:
            raise RuntimeError("a replay of this graph is in flight: wait() for it (Replay.wait or Graph.wait) "
                               "before the next")
        for w in self._weights.values():
            if w.freed:
                raise RuntimeError(f"{w!r} was freed; this graph reads it and cannot run")
        self._check_others()
        self._check_ids()
        if self._seq is None:
            self._record()
        if self._seq.is_running():  # left so by a wait interrupted before it finished
            self._seq.eval_await()
        self._submits += 1
        replay = Replay(self, self._submits)
        self._flight = replay.serial
        self.backend._in_flight.add(self)
        try:
            self._seq.eval_async()  # returns once queued (kp patch 0009); the device runs it meanwhile
        except BaseException:
            try:
                if self._seq.is_running():  # queued, then interrupted: never leave it running unwatched
                    self._seq.eval_await()
            finally:
                self._flight = 0
                self.backend._in_flight.discard(self)
            raise
        return replay

    @_locked
    def _device_done(self, serial: int) -> bool:
        """Replay `serial` was waited for, or the device has finished it."""
        if self._flight != serial:
            return True
        if self._seq.is_running():
            self._seq.eval_await(0)  # a zero timeout asks the fence without waiting
        return not self._seq.is_running()

    def _check_others(self) -> None:
        """No other graph in flight writes what this one uses, or uses what it writes."""
        mine, writes = self._tensors.keys(), self._writes
        for other in self.backend._in_flight:
            if other is self or not other.in_flight:
                continue
            shared = (mine & other._writes) | (writes & other._tensors.keys())
            if shared:
                t = self._tensors[next(iter(shared))]
                raise RuntimeError(f"a replay of another graph that uses {t!r} is in flight, and one of the two "
                                   "writes it: wait() for it first")

    def _check_ids(self) -> None:
        """Every MUL_MAT_ID's ids (host values: those of an input go up now, a
        constant's at the first replay) in [0, n_expert)."""
        for ids, n_expert in self._ids_checks:
            if not _ids_safe(ids, n_expert):
                raise RuntimeError(f"{ids!r} holds a MUL_MAT_ID's ids and another graph writes it on the device "
                                   f"with an op that does not keep them in [0, {n_expert})")
            values = ids._host[:, : ids.length]
            bad = values[(values < 0) | (values >= n_expert)]
            if bad.size:
                raise ValueError(f"ids {ids!r} out of range: {bad[:4].tolist()} not in [0, {n_expert})")

    @_locked
    def _finish(self, serial: int | None = None) -> bool:
        """Wait for the replay in flight (with `serial`: only if it is that
        one); False if there was none to wait for. The graph is marked idle
        even when the wait is interrupted, as the GPU's work is then done or
        abandoned."""
        if not self._flight or serial not in (None, self._flight):
            return False
        try:
            self._seq.eval_await()  # (returns at once where `Replay.done` saw it finish)
        finally:
            self._flight = 0
            self.backend._in_flight.discard(self)
            if self._seq.is_running():  # interrupted before the wait began: finish it
                self._seq.eval_await()
        for t in self._outputs:
            t.read_back = True
        if self.timestamps and self._kernel_span:
            first, last = self._kernel_span  # timestamps[i + 1] is the end of op i
            self._timestamps = self._seq.get_timestamps()
            self._kernel_seconds = timestamp_span(self._timestamps, self.backend.device_info.timestamp_period,
                                                  first, last + 1)
        return True

    def wait(self) -> None:
        """Wait for this graph's replay in flight, if any (its Replay handle then is done)."""
        self._finish()

    def run(self) -> None:
        """One replay: submit and wait (waited for even if interrupted, or by
        another thread's Graph.wait)."""
        replay = self.submit()
        try:
            self._finish(replay.serial)
        except BaseException:
            self._finish(replay.serial)  # interrupted before the wait began: wait now
            raise

    def op_seconds(self) -> list[tuple[str, float]] | None:
        """(label, GPU seconds) of every op of the last replay, in order, from
        the end of the op before it to its own end (barriers are ops labelled
        "barrier"; the uploads and read-backs too); None without timestamps."""
        if self._timestamps is None:
            return None
        ts, period = self._timestamps, self.backend.device_info.timestamp_period
        return [(label, timestamp_span(ts, period, i, i + 1)) for i, label in enumerate(self._labels)]

    def dispatch_counts(self) -> tuple[int, int]:
        """(compute dispatches, barriers) of one replay."""
        barriers = sum(label == BARRIER for label in self._labels)
        dispatches = sum(isinstance(op, kp.OpAlgoDispatch) for op in self._ops)
        return dispatches, barriers

    @property
    def kernel_seconds(self) -> float | None:
        """GPU time of the last replay's operations (graph made with
        timestamps=True on a device that has them), else None."""
        return self._kernel_seconds

    @_locked
    def destroy(self) -> None:
        """Free the recorded sequence and the pipelines of vkq's own nodes now
        (the tensors, and what `add` was given, stay the caller's)."""
        if self.in_flight:
            raise RuntimeError("a replay of this graph is in flight: wait() for it first")
        if self._seq is not None:
            self._seq.destroy()
        for keep in self._keep:
            for node in keep if isinstance(keep, tuple) else (keep,):
                if isinstance(node, (MatVec, MatMul, QuantizeQ8_1, GroupByExpert)):
                    node.destroy()
        self._seq, self._ops, self._keep, self.nodes, self._destroyed = None, [], [], [], True
