"""EmbedRows: rows of a quantized matrix (the token embedding) by id,
decoded by the mat-vec's own block decoders from the same device layout."""
from __future__ import annotations

from ...blocks.formats import CHUNK
from ...device.shader_variants import GetRowsVariant
from ...ops import weights_push
from .common import Vectors, _f32_bits, _groups, _Op, _size

# Workgroup size (a power of two: the reductions are trees). Small: every op
# here moves a few KB per token; what matters is not leaving lanes idle.
ROWS_WG = 64  # EmbedRows: invocations (32-value chunks) per workgroup


def embed_rows_depth() -> int:
    """Serial depth (Launch) of shaders/get_rows.comp: one 32-value chunk per
    invocation, decoded by its block type's fixed loops, written as 8 vec4s."""
    return 1


class EmbedRows(_Op):
    """out[v] = W[ids[v]] as floats, times `scale` (in float32; Gemma's
    sqrt(n_embd)), for v < n: W a matrix uploaded with Backend.upload (any
    block type vkq supports). The host range-checks ids."""

    def __init__(self, device, weights, ids, out: Vectors, n: int = 1, scale: float = 1.0):
        super().__init__(device)
        lay = weights.layout
        if weights.is_expert_stack:
            raise ValueError(f"EmbedRows takes a matrix, got weights of shape {weights.shape}")
        if out.length != lay.k or out.step % 4 or out.offset:
            raise ValueError(f"EmbedRows: output vectors of {lay.k} values from element 0, a stride that is a "
                             f"multiple of 4 (got length {out.length}, offset {out.offset}, stride {out.step})")
        # The padding of a plain type's row (to 32 values) is written too: it is zero.
        Vectors(out.tensor, lay.k_padded, out.offset, out.step).check(n, "EmbedRows output")
        if _size(ids) < n:
            raise ValueError(f"EmbedRows: {n} ids, the ids tensor holds {_size(ids)}")
        self.reads, self.writes = (ids,), (out.tensor,)  # (the weights are never written)
        self.n_rows = lay.rows
        variant = GetRowsVariant(lay.fmt.name)
        selects = weights.backend.pipeline(weights, 1, "dmmv").value_lookup == "selects"  # as its mat-vec decodes
        nchunks = lay.k_padded // CHUNK
        for buf in weights.buffers:
            # get_rows.comp reads x_col_stride as the output's stride.
            push = weights_push(buf, lay.nblocks, x_col_stride=out.step, x_slot_stride=0, y_col_stride=0,
                                y_slot_stride=0)
            self._dispatch([buf.tensor, ids.kp, out.tensor.kp], variant, (_groups(nchunks, ROWS_WG), n, 1),
                           [ROWS_WG, int(selects), _f32_bits(scale)], push, embed_rows_depth())
