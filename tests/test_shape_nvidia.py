"""The decode step's mat-vecs as a GPU class's table launches them
(vkq.llama.profile.MatvecView; `vkq generate --shape nvidia`).

- with NVIDIA's launches forced, each mat-vec row shows the path and
  launch of the dispatcher's choice for the NVIDIA table's class (the
  int8 path, 32 invocations, 2 rows per workgroup: not lavapipe's), and
  the device's own view keeps the launches the step records;
- the launch arithmetic beside vkq.ops.MatVec's gives MatVec's own
  launches for the configuration it runs;
- the columns, slots and fused SwiGLU each mat-vec is chosen for come from
  the recorded graph (a chunk's mat-vecs n columns, the output head one);
- the serial depth of the presets' mat-vecs on NVIDIA's table (issue 47
  part 2: the weights' own streaming, not bounded, but counted truly);
- the decoder's path request (--path) holds on the view;
- the CLI's caption names the table's class.
"""
from __future__ import annotations

import pytest

from vkq.blocks.activations import GENERATE_ACTIVATIONS
from vkq.blocks.formats import FORMATS
from vkq.commands.cli import main
from vkq.dispatch import tables
from vkq.llama.gpu_step import GpuLlama
from vkq.dispatch.classify import DeviceClass
from vkq.llama.profile import MatvecView, step_shape
from vkq.llama.vector_ops import GPU_LAUNCH_CAPS
from vkq.ops import MatVec, matvec_depth


MATVEC_ROLES = ("attn_", "ffn_", "output ")


def matvec_rows(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in rows:
        if r.label.startswith(MATVEC_ROLES):
            out.setdefault(r.label, []).append((r.launch, r.count))
    return out


def test_every_gpu_class_has_a_table_class():
    assert all(isinstance(c.table_class, DeviceClass) for c in GPU_LAUNCH_CAPS.values())


def test_nvidia_view_shows_the_nvidia_tables_launch(backend, tiny):
    """The tiny model (Q8_0 but attn_v Q4_0; 64 wide, FFN 128, vocabulary
    260): NVIDIA's table (nvidia/turing+) gives every quantized type the
    int8 path, 32 invocations splitting K, 2 rows per workgroup, so the
    96 Q and K rows take 48 workgroups; lavapipe's table the dequantize
    path here, 8 invocations a workgroup. The device's view is the step's
    recorded launches."""
    cls = GPU_LAUNCH_CAPS["nvidia"].table_class
    model = GpuLlama(tiny, backend, "auto", ctx=40, launches="nvidia")
    got = matvec_rows(model.step_launches())
    n_layer = model.config.n_layer
    shapes = {"attn_q+attn_k Q8_0": ("Q8_0", 96, 64), "attn_v Q4_0": ("Q4_0", 32, 64),
              "attn_output Q8_0": ("Q8_0", 64, 64), "ffn_gate+ffn_up+swiglu Q8_0": ("Q8_0", 256, 64),
              "ffn_down Q8_0": ("Q8_0", 64, 128), "output Q8_0": ("Q8_0", 260, 64)}
    want = {}
    for role, (qtype, rows, k) in shapes.items():
        p = tables.lookup(cls, qtype, rows, k, 1, None, GENERATE_ACTIVATIONS)[0]
        assert (p["path"], p["wg_size"], p["rows_per_wg"], p["chunks_per_thread"], p["split_k"]) == \
            ("mmvq", 32, 2, 1, True)
        launch = ((-(-rows // p["rows_per_wg"]), 1, 1), p["wg_size"], -(-k // (32 * p["wg_size"])))
        want[f"{role} {p['path']}"] = [(launch, 1 if role.startswith("output") else n_layer)]
    assert {label: [((r.groups, r.invocations, r.depth), n) for r, n in v] for label, v in got.items()} == want
    assert want["attn_q+attn_k Q8_0 mmvq"] == [(((48, 1, 1), 32, 1), n_layer)]

    # this device's view: the recorded launches, lavapipe's table's (another path and workgroup here)
    graph = model.step_graph
    recorded = {label: op.launches for label, op in graph.nodes if isinstance(op, MatVec)}
    dev = GpuLlama(tiny, backend, "auto", ctx=40)
    own = matvec_rows(dev.step_launches())
    assert {label: [r for r, _ in v] for label, v in own.items()} == recorded
    assert all(label.endswith(" dmmv") and r.invocations != 32 for label, v in own.items() for r, _ in v)


def test_expert_and_swiglu_rows_of_the_nvidia_view(backend, tiny_moe):
    """The view's rows of a MUL_MAT_ID (y by its 2 used experts' slots) and
    of a fused SwiGLU take NVIDIA's launch (32 invocations), as its dense
    mat-vecs do."""
    model = GpuLlama(tiny_moe, backend, "auto", ctx=40, launches="nvidia")
    assert any(op.variant.mul_mat_id for _, op in model.step_graph.nodes if isinstance(op, MatVec))
    experts = [r for r in model.step_launches() if r.label.startswith(("ffn_gate_exps", "ffn_up_exps", "ffn_down"))]
    assert experts and all(r.launch is not None and r.launch.groups[1] == 2 and r.launch.invocations == 32
                           for r in experts), experts


class _Calls:
    """A view that records what each mat-vec is chosen for (the table's choice kept)."""

    def __init__(self, view: MatvecView):
        self.view, self.calls = view, []

    def choose(self, layout, ncols, glu):
        self.calls.append((layout.rows, layout.k, ncols, glu))
        return self.view.choose(layout, ncols, glu)


def test_a_chunks_matvecs_are_chosen_for_its_columns(backend, tiny):
    """A chunk of 3 tokens through the mat-vec kernels: every mat-vec of
    the step 3 columns, the output head (the last token's logits) one; the
    stacked gate|up with SwiGLU fused, the rest not."""
    model = GpuLlama(tiny, backend, "auto", ctx=40, launches="nvidia", prompt_kernels="matvec")
    calls = _Calls(MatvecView.of(backend.device, "nvidia", model.path_mode, model.activations))
    step_shape(model._step("decode", 3).graph, calls)
    n_layer = model.config.n_layer
    layer = [(96, 64, 3, False), (32, 64, 3, False), (64, 64, 3, False), (256, 64, 3, True), (64, 128, 3, False)]
    assert calls.calls == layer * n_layer + [(260, 64, 1, False)]


def test_the_views_path_request(backend, tiny):
    """The decoder's path request holds on the view as on the step (--path
    dmmv: NVIDIA's table's dequantize-path launch); a class without a table
    class is refused in one line."""
    model = GpuLlama(tiny, backend, "dmmv", ctx=40, launches="nvidia")
    rows = matvec_rows(model.step_launches())
    assert rows and all(label.endswith(" dmmv") and r.invocations == 32 for label, v in rows.items() for r, _ in v)
    with pytest.raises(ValueError, match="the mat-vecs of 'amd': one of nvidia"):
        MatvecView.of(backend.device, "amd", "auto", GENERATE_ACTIVATIONS)


@pytest.mark.parametrize("preset", ["smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"])
def test_matvec_gpu_depth_of_the_presets(backend, preset):
    """Issue 47 part 2 leaves the weights' own mat-vec streaming unbounded;
    its depth on NVIDIA's table, by hand: the int8 path, a 32-value chunk
    per loop iteration, K split over 32 invocations, so ceil(K / 1024):
    ffn_down over the FFN width (SmolLM2 1,536: 2; 1B 8,192: 8; 8B 14,336:
    14) and the others over the hidden width."""
    from vkq.commands.presets import PRESETS

    spec = PRESETS[preset]
    view = MatvecView.of(backend.device, "nvidia", "auto", GENERATE_ACTIVATIONS)
    for rows, k in ((spec.hidden, spec.ffn), (spec.ffn, spec.hidden), (spec.vocab, spec.hidden)):
        cfg = view.dispatcher.choose(FORMATS["Q4_0"], rows, k, 1, None, GENERATE_ACTIVATIONS)
        assert (cfg.path, cfg.wg_size, cfg.chunks_per_thread, cfg.split_k) == ("mmvq", 32, 1, True)
        assert matvec_depth(cfg, k) == -(-k // 1024)
    assert {"smollm2-135m": 2, "llama-3.2-1b": 8, "llama-3.1-8b": 14}[preset] == -(-spec.ffn // 1024)


def test_generate_names_the_table(tiny, capsys):
    assert main(["generate", str(tiny), "-p", "the", "-n", "2", "--shape", "nvidia", "-c", "40"]) == 0
    err = capsys.readouterr().err
    assert "the mat-vecs' paths and launches as the table of nvidia/turing+/proprietary chooses them" in err
    assert "| attn_q+attn_k Q8_0 mmvq " in err and "| 48x1x1 " in err
    assert main(["generate", str(tiny), "-p", "the", "-n", "2", "--shape", "-c", "40"]) == 0
    err = capsys.readouterr().err
    assert "the mat-vecs' launches this device's table's" in err and "| attn_q+attn_k Q8_0 dmmv " in err
