"""Where a replayed graph's GPU time goes: per kind of operation, from GPU timestamps.

A graph made with timestamps latches one after each of its ops
(vkq.Graph.op_seconds): an op's time runs from the end of the op before it
to its own end, so the rows add up to the replay's GPU time. Ops with the
same label (the same matrix role and block type in every layer, every
norm, ...) form one row: how many a replay runs, their time, their share.
Barriers are a row of their own ("barrier": the wait for the ops before
them to finish, the time between ops); so are the uploads of the inputs and
the read-back of the outputs. A GPU may overlap ops that no barrier
separates: their times then split the overlap between them.

`step_shape` needs no timing: a recorded graph's launches per label
(workgroups, invocations, serial depth: vkq.ops.Launch); with a
`MatvecView`, its mat-vecs' as another device class's dispatcher would
launch them (`vkq generate --shape nvidia`).
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from ..dispatch.choose import Dispatcher
from ..dispatch.config import PipelineConfig
from ..dispatch.paths import resolve_path
from ..markdown import markdown
from ..ops import MatVec, matvec_launches
from ..resolve import paired_rows
from .vector_ops import GPU_LAUNCH_CAPS, launches_of


@dataclass(frozen=True)
class ProfileRow:
    label: str
    count: int  # ops with this label per replay
    seconds: float  # their GPU time per replay (the median over the replays profiled)


@dataclass(frozen=True)
class Profile:
    rows: tuple[ProfileRow, ...]  # in order of first appearance
    replays: int  # replays profiled
    gpu_seconds: float  # GPU time per replay: the sum of the rows (of their medians)
    dispatches: int  # compute dispatches per replay
    barriers: int
    wall_seconds: float | None = None  # wall clock per token (submit to results), if measured
    tokens: int = 1  # tokens per replay: 1 for a decode step, n for a prompt's chunk of n

    @classmethod
    def of_replays(cls, samples: list[list[tuple[str, float]]], dispatches: int, barriers: int,
                   wall_seconds: float | None = None, tokens: int = 1) -> "Profile":
        """samples: Graph.op_seconds() of each replay profiled (the same graph,
        a step of `tokens` tokens)."""
        if not samples:
            raise ValueError("no replays to profile")
        per_replay = []
        for ops in samples:
            seconds: dict[str, float] = {}
            for label, s in ops:
                seconds[label] = seconds.get(label, 0.0) + s
            per_replay.append(seconds)
        counts = Counter(label for label, _ in samples[0])
        rows = tuple(ProfileRow(label, counts[label], statistics.median(r.get(label, 0.0) for r in per_replay))
                     for label in counts)
        return cls(rows, len(samples), sum(r.seconds for r in rows), dispatches, barriers, wall_seconds, tokens)

    def table(self, top: int | None = None) -> str:
        """A markdown table, the most costly rows first (top: the first `top`,
        the rest in one row), then the totals: ops per step, their GPU time
        per token (a chunk's time over its tokens) and share."""
        rows = sorted(self.rows, key=lambda r: -r.seconds)
        if top is not None and len(rows) > top:
            rest = rows[top:]
            rows = rows[:top] + [ProfileRow(f"({len(rest)} other kinds)", sum(r.count for r in rest),
                                            sum(r.seconds for r in rest))]
        total = self.gpu_seconds or 1.0
        per_token = 1e6 / self.tokens
        cells = [[r.label, str(r.count), f"{r.seconds * per_token:.1f}", f"{100 * r.seconds / total:.1f}%"]
                 for r in rows]
        cells.append(["GPU time per token", str(self.dispatches + self.barriers), f"{self.gpu_seconds * per_token:.1f}",
                      "100%"])
        if self.wall_seconds is not None:
            cells.append(["wall clock per token (submit to logits)", "", f"{self.wall_seconds * 1e6:.1f}",
                          f"{100 * self.wall_seconds * self.tokens / total:.0f}%"])
        return markdown(["op", "per step", "us per token", "share"], cells, {"per step", "us per token", "share"})

    def summary(self) -> str:
        step = "token" if self.tokens == 1 else f"step of {self.tokens} tokens"
        return (f"{self.dispatches} dispatches and {self.barriers} barriers per {step}; GPU time "
                f"{self.gpu_seconds * 1e3 / self.tokens:.3f} ms per token (median of {self.replays} steps)")


@dataclass(frozen=True)
class ShapeRow:
    label: str
    count: int  # dispatches of this launch per replay
    launch: object | None  # a vkq.ops.Launch; None: an op that reports none (quantize, group by expert, mat-mat)


@dataclass(frozen=True)
class MatvecView:
    """A step's mat-vecs as another device class's dispatcher chooses them:
    its vendor table (no tuning: none was run there), under the caps the
    vector ops take for that class (vector_ops.LaunchesOf), for each
    matrix's path request (the decoder's `path_mode`) and int8 activations.
    Nothing is built or run with it: the step here runs this device's."""

    gpu_class: str
    dispatcher: Dispatcher
    path_mode: str | None
    activations: str

    @classmethod
    def of(cls, device, gpu_class: str, path_mode: str | None, activations: str) -> "MatvecView":
        if gpu_class not in GPU_LAUNCH_CAPS:
            raise ValueError(f"the mat-vecs of {gpu_class!r}: one of {', '.join(sorted(GPU_LAUNCH_CAPS))}")
        caps = launches_of(device, gpu_class).caps
        return cls(gpu_class, Dispatcher(caps, GPU_LAUNCH_CAPS[gpu_class].table_class, {}), path_mode, activations)

    @property
    def table_class(self) -> str:
        return self.dispatcher.device_class.key

    def choose(self, layout, ncols: int, glu: bool) -> PipelineConfig:
        """The pipeline that class's dispatcher picks for a mat-vec of
        `ncols` columns (MUL_MAT_ID: 1) over a matrix of this layout
        (vkq.blocks.layout.MatrixLayout); glu: a fused SwiGLU's, its rows per
        workgroup even (as vkq.resolve.resolve)."""
        fmt = layout.fmt
        cfg = self.dispatcher.choose(fmt, layout.rows, layout.k, ncols, resolve_path(fmt, self.path_mode),
                                     self.activations)
        return paired_rows(cfg) if glu else cfg


def step_shape(graph, matvecs: MatvecView | None = None) -> tuple[ShapeRow, ...]:
    """The launches of a recorded graph's ops (vkq.ops.Launch: workgroups,
    invocations, serial depth), one row per label and distinct launch, in
    order of first appearance; ops that report no launches (quantize,
    group by expert, mat-mat) one row per label, their launch None.
    matvecs: the mat-vecs' launches and paths (in their labels) as that
    view's dispatcher chooses them, not the recorded ones."""
    counts: dict[tuple, int] = {}
    for label, node in graph.nodes:
        op = node[0] if isinstance(node, tuple) else node
        launches = getattr(op, "launches", None)
        if matvecs is not None and isinstance(op, MatVec):
            cfg = matvecs.choose(op.layout, op.ncols, op.glu)
            # (Graph labels a mat-vec "<role> <type> <path>": the path, the view's)
            label = f"{label.removesuffix(' ' + op.cfg.path)} {cfg.path}"
            launches = matvec_launches(cfg, op.layout.k, op.buffer_rows, op.n_slots)
        for launch in launches or [None] * len(getattr(op, "algorithms", [None])):
            counts[(label, launch)] = counts.get((label, launch), 0) + 1
    return tuple(ShapeRow(label, n, launch) for (label, launch), n in counts.items())


def shape_table(rows: tuple[ShapeRow, ...]) -> str:
    """A markdown table of step_shape's rows: dispatches per step, workgroups
    (x by y by z) of how many invocations, and serial depth."""
    cells = []
    for r in rows:
        if r.launch is None:
            cells.append([r.label, str(r.count), "", "", "", "(not counted)"])
            continue
        g = r.launch.groups
        cells.append([r.label, str(r.count), f"{g[0]}x{g[1]}x{g[2]}", str(r.launch.invocations),
                      str(r.launch.total), str(r.launch.depth)])
    return markdown(["op", "per step", "workgroups", "invocations each", "invocations", "serial depth"], cells,
                    {"per step", "invocations each", "invocations", "serial depth"})
