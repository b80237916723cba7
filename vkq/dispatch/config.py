"""What the dispatcher decides for one mat-vec: a pipeline and its parameters."""
from __future__ import annotations

from dataclasses import dataclass

PATHS = ("dmmv", "mmvq")
# How the shader reads the weights: storage buffer loads, or uniform texel
# buffer fetches (branch-free gathers on lavapipe, where storage loads at
# varying offsets are a loop over the lanes).
WEIGHTS_BINDINGS = ("storage", "texel")
# How it reads x (or its Q8_1 blocks): the same two ways. (A uniform buffer
# for x was measured too: slower than texels on lavapipe, and limited to
# 64 KiB there.)
X_BINDINGS = ("storage", "texel")


@dataclass(frozen=True)
class PipelineConfig:
    path: str  # "dmmv" (dequantize to float) or "mmvq" (int8 dot products)
    int_dot: bool  # mmvq with OpSDot; False: int32 emulation
    subgroup: bool  # subgroupAdd reduction; False: shared-memory tree
    wg_size: int  # threads per workgroup (power of two)
    rows_per_wg: int  # rows per workgroup; each thread keeps all of them
    chunks_per_thread: int = 1  # consecutive 32-element chunks a thread takes at a time
    split_k: bool = True  # threads split K and reduce; False: a thread owns whole rows (CPU drivers)
    x_planes: int = 1  # mmvq: int8 planes of the activation (vkq.activations); the caller's choice
    weights_binding: str = "storage"  # one of WEIGHTS_BINDINGS
    x_binding: str = "storage"  # one of X_BINDINGS
    source: str = "default"  # which rule chose it (shown by `vkq info`)

    def __post_init__(self):
        if self.path not in PATHS:
            raise ValueError(f"unknown path {self.path!r}; expected one of {PATHS}")
        if self.wg_size < 1 or self.wg_size & (self.wg_size - 1):
            raise ValueError(f"wg_size must be a power of two, got {self.wg_size}")
        if self.rows_per_wg < 1:
            raise ValueError(f"rows_per_wg must be >= 1, got {self.rows_per_wg}")
        if self.chunks_per_thread not in (1, 2, 4, 8):
            raise ValueError(f"chunks_per_thread must be 1, 2, 4 or 8, got {self.chunks_per_thread}")
        if self.x_planes not in (1, 2) or (self.x_planes != 1 and self.path != "mmvq"):
            raise ValueError(f"x_planes must be 1, or 2 on the mmvq path; got {self.x_planes} on {self.path}")
        if self.weights_binding not in WEIGHTS_BINDINGS:
            raise ValueError(f"weights_binding must be one of {WEIGHTS_BINDINGS}, got {self.weights_binding!r}")
        if self.x_binding not in X_BINDINGS:
            raise ValueError(f"x_binding must be one of {X_BINDINGS}, got {self.x_binding!r}")
        if self.int_dot and self.path != "mmvq":
            raise ValueError("int_dot applies to the mmvq path only")
