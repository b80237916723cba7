"""The profile of a decode step (vkq.llama.profile, `vkq generate --profile`).

- Every op of the step is in it once per replay, under a label that says
  what it is (matrix role, block type and path for mat-vecs); its rows add
  up to the step's GPU time, which the graph's own kernel time agrees with;
- dispatches and barriers per token are the graph's, and show in the
  summary line;
- `Profile.of_replays` aggregates by label (median per row) on made-up times;
- a prompt's chunks have their own profile (the chunk step's ops, time
  per token = the step's over its tokens), the warm-up replay in neither;
- the CLI prints the table (and the chunks' where the prompt filled one);
  a profile of the host engine or of no decode step is one line of error.
"""
from __future__ import annotations

import pytest

from vkq.commands.cli import main
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.model import LlamaFile
from vkq.llama.profile import Profile


def test_of_replays_groups_by_label_and_takes_medians():
    samples = [[("a", 1.0), ("barrier", 0.5), ("a", 2.0), ("b", 4.0)],
               [("a", 3.0), ("barrier", 0.1), ("a", 3.0), ("b", 1.0)],
               [("a", 2.0), ("barrier", 0.3), ("a", 2.0), ("b", 2.0)]]
    p = Profile.of_replays(samples, dispatches=3, barriers=1)
    assert [(r.label, r.count) for r in p.rows] == [("a", 2), ("barrier", 1), ("b", 1)]
    assert [r.seconds for r in p.rows] == [4.0, 0.3, 2.0]
    assert p.gpu_seconds == pytest.approx(6.3) and p.replays == 3
    assert "| a " in p.table() and "GPU time per token" in p.table()
    with pytest.raises(ValueError, match="no replays"):
        Profile.of_replays([], 0, 0)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_step_profile_covers_every_op(backend, tiny, tiny_moe, moe):
    model = GpuLlama(tiny_moe if moe else tiny, backend, "auto", ctx=24, profile=True)
    gen = model.greedy(model.tokenizer.encode("the theory"), 6, stop_at_eos=False)
    prof = model.profile(gen.stats.decode_steps)
    rows = {r.label: r for r in prof.rows}
    n_layer = model.config.n_layer
    assert rows["RMSNorm"].count == 2 * n_layer and rows["RMSNorm output_norm"].count == 1
    assert rows["Attention"].count >= n_layer and rows["EmbedRows"].count == rows["Argmax"].count == 1
    assert any(label.startswith("output Q8_0 ") for label in rows)
    if moe:
        assert rows["ExpertRouting"].count == n_layer and "ExpertSum" not in rows
        assert any(label.startswith("ffn_gate_exps Q8_0 ") for label in rows)
        assert any(label.startswith("ffn_gate_inp F32 dmmv") for label in rows)
    else:
        assert any(label.startswith("ffn_gate+ffn_up+swiglu Q8_0 ") for label in rows) and "SwiGLU" not in rows
    dispatches, barriers = model.graph.dispatch_counts()
    assert (prof.dispatches, prof.barriers) == (dispatches, barriers) == (gen.stats.dispatches, gen.stats.barriers)
    assert rows["barrier"].count == barriers
    assert sum(r.count for r in prof.rows) == dispatches + barriers + 2  # and the upload and the read-back
    assert prof.gpu_seconds == pytest.approx(sum(r.seconds for r in prof.rows))
    assert all(r.seconds >= 0 for r in prof.rows) and prof.gpu_seconds > 0
    assert f"{dispatches} dispatches and {barriers} barriers/token" in gen.stats.summary()


def test_profile_needs_profiling_and_steps(backend, tiny):
    model = GpuLlama(tiny, backend, "auto", ctx=8)
    with pytest.raises(RuntimeError, match="make it with profile=True"):
        model.profile(1)
    model = GpuLlama(tiny, backend, "auto", ctx=8, profile=True, prompt_kernels="matvec")
    model.logits([5])  # one replay of the decode step
    with pytest.raises(ValueError, match="3 decode steps to profile; 1 were run"):
        model.profile(3)
    with pytest.raises(ValueError, match="1 steps of 8 tokens to profile; 0 were run"):
        model.profile(1, 8)


def test_prompt_chunks_have_their_own_profile(backend, tiny):
    model = GpuLlama(tiny, backend, "auto", ctx=40, profile=True, prompt_kernels="matvec")
    model.warm_up(19)
    assert model.profiled_steps(1) == model.profiled_steps(8) == 0, "warm-up replays are not profiled"
    gen = model.greedy(model.tokenizer.encode("the theory of the theory of the theory of the theory")[:19], 4,
                       stop_at_eos=False)
    assert model.profiled_steps(8) == 2 and model.profiled_steps(3) == 1  # 19 = 8 + 8 + 3
    assert model.profiled_steps(1) == gen.stats.decode_steps
    chunk = model.profile(2, 8)
    dispatches, barriers = model._step("decode", 8).graph.dispatch_counts()
    assert (chunk.dispatches, chunk.barriers, chunk.tokens) == (dispatches, barriers, 8)
    assert {r.label for r in chunk.rows} == {r.label for r in model.profile(1).rows}
    assert "per step of 8 tokens" in chunk.summary()
    # the table's time per token is the step's over its 8 tokens
    total = next(line for line in chunk.table().splitlines() if "GPU time per token" in line)
    assert float(total.split("|")[3]) == pytest.approx(chunk.gpu_seconds * 1e6 / 8, abs=0.06)


def test_cli_profile(tiny, capsys):
    assert main(["generate", str(tiny), "-p", "the", "-n", "4", "--ignore-eos", "--profile"]) == 0
    err = capsys.readouterr().err
    assert "profile of a decode step" in err and "| op " in err and "wall clock per token" in err
    prompt = "the theory of the theory of the theory"
    n = len(LlamaFile(tiny).tokenizer.encode(prompt))
    assert main(["generate", str(tiny), "-p", prompt, "-n", "3", "--ignore-eos", "--profile", "--prompt-kernels",
                 "matvec"]) == 0
    assert "profile of the prompt's chunks of 8 tokens" in capsys.readouterr().err
    assert main(["generate", str(tiny), "-p", prompt, "-n", "3", "--ignore-eos", "--profile", "--prompt-kernels",
                 "matmul"]) == 0
    assert f"profile of the prompt's chunks of {n} tokens" in capsys.readouterr().err  # (one chunk of them all)


@pytest.mark.parametrize("args, match", [
    (["--engine", "host"], "--profile needs --engine graph"),
    (["--path", "numpy"], "--profile needs --engine graph"),
    (["-n", "1"], "-n must be at least 2"),
])
def test_cli_profile_refusals(tiny, capsys, args, match):
    assert main(["generate", str(tiny), "-p", "the", "--profile", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err


def test_cli_no_spread(tiny, capsys):
    """The before/after switch of the GPU launches: runs on the graph engine,
    refused (one line) where there is no step to launch."""
    assert main(["generate", str(tiny), "-p", "the", "-n", "4", "--ignore-eos", "--profile", "--no-spread"]) == 0
    assert "profile of a decode step" in capsys.readouterr().err
    for args in (["--engine", "host"], ["--path", "numpy"]):
        assert main(["generate", str(tiny), "-p", "the", "--no-spread", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--no-spread sets how the graph engine runs its step" in err[0], err


# -- the step's launches and serial depths (vkq.llama.profile.step_shape) --------------------

def launches_by_label(rows) -> dict[str, list[tuple[tuple[int, int, int], int, int, int]]]:
    """label -> [(workgroups, invocations each, serial depth, dispatches per step)] of step_shape's rows."""
    out: dict[str, list] = {}
    for r in rows:
        launch = r.launch
        out.setdefault(r.label, []).append(None if launch is None else
                                           (launch.groups, launch.invocations, launch.depth, r.count))
    return out


def test_step_shape_of_nvidia_launches_matches_a_hand_count(backend, tiny):
    """The tiny model (64 wide, 4 query heads of 16 over 2 K/V heads, FFN
    128, vocabulary 260) with NVIDIA's launches forced (32-wide subgroups),
    a context of 100 positions, counted by hand from the shaders' loops:

    - EmbedRows: 2 chunks of 32 in one workgroup of 64; a chunk each: depth 1.
    - RMSNorm: a workgroup of 512 per 512 values of a vector (1 for 64);
      the sum's loop takes 4 * 512 values an iteration (1), the slice's
      blocks' loop 512 blocks (1): 2.
    - Attention: 264 workgroups wanted (2 per SM of 132), 2 per split (a
      workgroup per 2 query heads, a K/V head's): 132 splits of 1 position,
      raised to the floor of 8: 13 splits, each a workgroup of 32 (4 key
      lanes, 8 value rows): RoPE's loop over 8 pairs (1), the scores' loop
      over 8 positions 8 at a time (1) of 4 key vec4s 4 lanes apiece (1),
      the exps' loop over 8 positions (1), the weighted sum's loop over 4
      vec4s 4 at a time (1) of 8 positions over 8 rows (1) and the query's
      own value (1): 5. Its combine, a workgroup of 32 per head (8 rows of
      4): the 13 splits' maxima and denominators 32 at a time (1 + 1), 4
      vec4s 4 at a time (1) over 13 splits on 8 rows (2): 4.
    - Argmax: 260 values in 2 parts (one per 256) of 130, 64 invocations
      each: 3; then the 2 parts picked from: 1.
    A chunk of 3 tokens: the same per vector, 3 rows of workgroups, and the
    chunk's append pass (RoPE's loop: 1). With fold off: each op's own
    dispatches (the folded ones: tests/test_fold_second_pass.py)."""
    model = GpuLlama(tiny, backend, "auto", ctx=100, launches="nvidia", prompt_kernels="matvec", fold=False)
    got = launches_by_label(model.step_launches())
    n_layer = model.config.n_layer
    assert got["EmbedRows"] == [((1, 1, 1), 64, 1, 1)]
    assert got["RMSNorm"] == [((1, 1, 1), 512, 2, 2 * n_layer)]
    assert got["RMSNorm output_norm"] == [((1, 1, 1), 512, 2, 1)]
    assert got["Attention"] == [((2, 13, 1), 32, 5, n_layer), ((4, 1, 1), 32, 4, n_layer)]
    assert got["Argmax"] == [((2, 1, 1), 64, 3, 1), ((1, 1, 1), 64, 1, 1)]
    # the mat-vecs (NVIDIA's table's launches: tests/test_shape_nvidia.py): every one counted
    assert all(None not in v for k, v in got.items() if k.startswith(("attn_", "ffn_", "output ")))
    chunk = launches_by_label(model.step_launches(3))
    assert chunk["RMSNorm"] == [((1, 3, 1), 512, 2, 2 * n_layer)]
    assert chunk["Attention"] == [((2, 1, 3), 32, 1, n_layer), ((2, 13, 3), 32, 5, n_layer),
                                  ((4, 1, 3), 32, 4, n_layer)]
    # (the output norm and head take the chunk's last token alone)
    assert chunk["RMSNorm output_norm"] == [((1, 1, 1), 512, 2, 1)]


def test_step_shape_of_nvidia_launches_in_a_short_context(backend, tiny):
    """The tiny model with NVIDIA's launches in a context of 8 positions
    (MIN_ATTENTION_SPLIT: too short to split), by hand: the attention one
    dispatch per layer, a workgroup of 32 per K/V head's 2 query heads (4
    key lanes, 8 value rows): RoPE's loop over 8 pairs (1), the scores'
    loop over 8 positions 8 at a time (1) of 4 key vec4s 4 lanes apiece
    (1), the exps' loop over 8 positions (1), the weighted sum's loop over
    4 vec4s 4 at a time (1) of 8 positions over 8 rows (1) and the query's
    own value (1): 5 (one invocation walking the positions took 1 + 4 + 1
    + 9 = 15). A chunk of 3 tokens: 3 rows of workgroups after its append
    pass (RoPE's loop: 1)."""
    model = GpuLlama(tiny, backend, "auto", ctx=8, launches="nvidia", prompt_kernels="matvec")
    n_layer = model.config.n_layer
    assert launches_by_label(model.step_launches())["Attention"] == [((2, 1, 1), 32, 5, n_layer)]
    assert launches_by_label(model.step_launches(3))["Attention"] == [((2, 1, 3), 32, 1, n_layer),
                                                                      ((2, 1, 3), 32, 5, n_layer)]


def test_step_shape_of_the_device_and_of_the_old_launches(backend, tiny):
    """The device's own launches (lavapipe: one subgroup-wide workgroup per
    vector, no split at 9 positions) and NVIDIA's with spread off (one
    subgroup of 32 per vector and per query head: the launches the H200
    profile of 2026-11-26 measured), by hand as above with w the workgroup."""
    from vkq.llama.vector_ops import reducing_variant

    model = GpuLlama(tiny, backend, "auto", ctx=9)
    w = reducing_variant(backend.device, "rms_norm")[1]
    got = launches_by_label(model.step_launches())
    assert got["RMSNorm"] == [((1, 1, 1), w, -(-64 // (4 * w)) + -(-2 // w), 4)]
    # RoPE 8 pairs, scores 9 positions of 4 vec4s, exps, the weighted sum 4 vec4s of 9 positions + the new value
    per_t = -(-9 // w)
    assert got["Attention"] == [((2, 1, 1), w, -(-8 // w) + 4 * per_t + per_t + -(-4 // w) * 10, 2)]
    old = GpuLlama(tiny, backend, "auto", ctx=100, launches="nvidia", spread=False)
    got = launches_by_label(old.step_launches())
    assert got["RMSNorm"] == [((1, 1, 1), 32, 1 + 1, 4)]
    # one query head per workgroup, all 100 positions: 1 + 4 * 4 + 4 + 1 * 101
    assert got["Attention"] == [((4, 1, 1), 32, 122, 2)]
    assert got["Argmax"] == [((1, 1, 1), 64, 5, 1)]


def test_step_shape_of_experts(backend, tiny_moe):
    """The experts' ops with NVIDIA's launches: ExpertRouting's loop over 8
    logits (1 of 32 invocations); SwiGLU a block per invocation (depth 1)
    over the 2 used experts' slots; the norm after them adds both slots in
    the same loops (unrolled): 2."""
    model = GpuLlama(tiny_moe, backend, "auto", ctx=40, launches="nvidia")
    got = launches_by_label(model.step_launches())
    assert got["ExpertRouting"] == [((1, 1, 1), 32, 1, 2)]
    assert got["SwiGLU"] == [((1, 2, 1), 64, 1, 2)]
    assert got["RMSNorm"] == [((1, 1, 1), 512, 2, 4)]


def test_generate_prints_the_shape(tiny, capsys):
    assert main(["generate", str(tiny), "-p", "the theory", "-n", "2", "--shape", "nvidia", "-c", "40"]) == 0
    err = capsys.readouterr().err
    assert "launches of a decode step, nvidia's (forced here), at a full context of 40 positions" in err
    assert "| RMSNorm " in err and "serial depth" in err
    assert main(["generate", str(tiny), "-p", "the", "-n", "2", "--shape", "amd"]) == 2
    assert "--shape amd: device, or a GPU class: nvidia" in capsys.readouterr().err
    for engine in (["--engine", "host"], ["--path", "numpy"]):
        assert main(["generate", str(tiny), "-p", "the", "-n", "2", "--shape", *engine]) == 2
        assert "--shape counts the launches of the graph engine's step" in capsys.readouterr().err


def test_matvec_depth_is_a_rows_units_per_invocation():
    """shaders/mul_mat_vec.comp's K loop by hand: 4096 values are 128 chunks,
    64 units of 2; split over 32 invocations, 2 each; a thread that owns
    whole rows (split_k off, CPU drivers) takes all 64. 14336 (an 8B
    model's ffn_down): 448 chunks, 224 units, 7 per invocation."""
    from vkq.dispatch.config import PipelineConfig
    from vkq.ops import matvec_depth

    cfg = PipelineConfig("mmvq", True, True, 32, 2, chunks_per_thread=2)
    assert matvec_depth(cfg, 4096) == 2 and matvec_depth(cfg, 14336) == 7
    assert matvec_depth(PipelineConfig("mmvq", True, True, 32, 2, chunks_per_thread=2, split_k=False), 4096) == 64


@pytest.mark.slow
def test_smollm2_step_within_gpu_bounds(backend):
    """SmolLM2's decode step recorded with NVIDIA's launches (forced), 512
    positions: every op but the weights' mat-vecs takes at most 16 dependent
    global loads per invocation (issue 47; the norms 2, the argmax 4 then 3,
    where one workgroup each took 6 and 768; the attention 7 and 7, where
    splits of 32 took 51 and the combine 65), and the argmax over its 49,152
    values and the attention's splits at least 128 workgroups each (the
    attention's combine one per query head: test_llama_ops's
    test_attention_gpu_launch_within_bounds says why, and takes the 1B and
    8B shapes at 512 and 4,096 positions)."""
    from conftest import smollm2_or_skip

    model = GpuLlama(smollm2_or_skip(), backend, "auto", ctx=512, launches="nvidia")
    rows = [r for r in model.step_launches() if r.launch is not None]
    bounded = [r for r in rows if r.label.split()[0] in ("EmbedRows", "RMSNorm", "SwiGLU", "Argmax", "Attention")]
    assert {r.label for r in bounded} == {"EmbedRows", "RMSNorm", "RMSNorm output_norm", "Argmax", "Attention"}
    assert all(r.launch.depth <= 16 for r in bounded), [(r.label, r.launch) for r in bounded]
    assert max(r.launch.workgroups for r in bounded if r.label == "Argmax") >= 128
    split, combine = (r.launch for r in bounded if r.label == "Attention")
    assert split.workgroups >= 128 and combine.groups == (model.config.n_head, 1, 1)
    # the norms: 576 values, 18 blocks, a workgroup of 512 per 16 of them, each summing all 576 (1 + 1)
    assert {(r.launch.groups, r.launch.invocations, r.launch.depth) for r in bounded
            if r.label.startswith("RMSNorm")} == {((2, 1, 1), 512, 2)}
