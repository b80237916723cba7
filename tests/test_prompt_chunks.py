"""Prompts in chunks on the graph engine.

Through the mat-vecs (prompt_kernels "matvec"), a prompt goes through the
step recorded for n tokens (up to MAX_COLS), one submit per chunk; its
logits, and every token decoded after it, must be those of the prompt fed
one token per step. Checked at chunk boundaries and odd lengths, on the
dense and the mixture-of-experts tiny models, both paths; with a context
long enough that lavapipe splits the attention over workgroups; and on
SmolLM2. Through the mat-mats ("matmul"), a prompt's logits are the same
bits however it is cut, and the tokens after it those of token by token.
"""
from __future__ import annotations

import numpy as np
import pytest

from vkq.llama.gpu_step import GpuLlama
from vkq.llama.vector_ops import MIN_ATTENTION_SPLIT, AttentionShape, attention_split
from vkq.llama.config import PROMPT_CHUNK, PROMPT_CHUNK_MATVEC
from vkq.resolve import MAX_COLS

from conftest import smollm2_or_skip
from tiny_llama import write_gguf

TEXT = "the theory that the three then- the other thing that the world"
# Positions per workgroup forced on this device's own launches (one
# invocation a position's score, one a vec4's weighted sum), as a GPU split
# them before its launches spread each split's loops.
FORCED_SPLIT = 32


@pytest.fixture(scope="module", params=[None, (8, 2)], ids=["dense", "moe"])
def model_file(request, tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("chunks") / "tiny.gguf", experts=request.param)


def pair(backend, path, model_file, ctx=48, chunk=MAX_COLS):
    """The chunked decoder (mat-vec chunks) and a token-by-token one on the same uploaded weights."""
    chunked = GpuLlama(model_file, backend, path, ctx=ctx, prompt_chunk=chunk, prompt_kernels="matvec")
    single = GpuLlama(None, backend, path, ctx=ctx, prompt_chunk=1, file=chunked.file,
                      weights=_matvecs_of(chunked), prompt_kernels="matvec")
    return chunked, single


def _matvecs_of(decoder):
    """A VkqMatvecs-like holder of a decoder's uploads, to share them."""
    from vkq.llama.matvecs import VkqMatvecs

    holder = VkqMatvecs.__new__(VkqMatvecs)
    holder.backend, holder.weights = decoder.backend, decoder.weights
    return holder


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("n_prompt", [1, 3, MAX_COLS, MAX_COLS + 1, 2 * MAX_COLS + 3])
def test_chunked_prompt_logits_equal_token_by_token(backend, model_file, path, n_prompt):
    chunked, single = pair(backend, path, model_file)
    ids = chunked.tokenizer.encode(TEXT)[:n_prompt]
    assert len(ids) == n_prompt
    a, b = chunked.logits(ids), single.logits(ids)
    assert a.tobytes() == b.tobytes()
    assert chunked.submits == -(-n_prompt // MAX_COLS) and single.submits == n_prompt


@pytest.mark.parametrize("chunk", [2, 3, 5])
def test_any_chunk_size_and_the_tokens_after(backend, model_file, chunk):
    chunked, single = pair(backend, "auto", model_file, chunk=chunk)
    ids = chunked.tokenizer.encode(TEXT)[:13]
    a = chunked.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    b = single.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    assert a.tokens == b.tokens
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))
    assert a.stats.n_prompt == 13 and a.stats.decode_submits == a.stats.decode_steps == 5


def test_long_context_with_split_attention(backend, tmp_path):
    """A context of 9000 positions: on lavapipe the attention splits each head's
    positions over workgroups (its loop budget), and a chunk's queries still
    give the token-by-token bits."""
    path = write_gguf(tmp_path / "long.gguf", metadata={"llama.context_length": 16384})
    chunked, single = pair(backend, "auto", path, ctx=9000)
    split = attention_split(backend.device, chunked.shape)
    print(f"attention split: {split} positions per workgroup")
    if backend.device.caps.max_loop_iterations is not None:  # lavapipe
        assert 0 < split < 9000
    ids = chunked.tokenizer.encode(TEXT)[:11]
    assert chunked.logits(ids).tobytes() == single.logits(ids).tobytes()


def test_gpu_attention_split_gives_the_chunks_the_token_by_token_bits(backend, model_file, monkeypatch):
    """Positions split over workgroups of FORCED_SPLIT (forced here, as
    lavapipe splits only past its loop budget): a chunk's
    queries still give the token-by-token bits, and the same tokens as one
    workgroup per head."""
    import vkq.llama.gpu_step as gpu_step

    whole, _ = pair(backend, "auto", model_file)
    ids = whole.tokenizer.encode(TEXT)[:13]
    c = whole.greedy(ids, 30, stop_at_eos=False, keep_logits=True)
    monkeypatch.setattr(gpu_step, "attention_split", lambda device, shape, spread: FORCED_SPLIT)
    chunked, single = pair(backend, "auto", model_file)
    a = chunked.greedy(ids, 30, stop_at_eos=False, keep_logits=True)  # past 32 positions: two splits
    b = single.greedy(ids, 30, stop_at_eos=False, keep_logits=True)
    assert a.tokens == b.tokens and all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))
    assert {op.split for op in chunked.step_graph._keep if hasattr(op, "split")} == {FORCED_SPLIT}
    assert a.tokens == c.tokens
    for x, y in zip(a.logits, c.logits):
        assert np.mean((x - y) ** 2) / np.mean(y.astype(np.float64) ** 2) < 1e-7  # rounding, through Q8_1 inputs


def test_without_spread_every_op_is_one_workgroup(backend, model_file, monkeypatch):
    """spread=False (`vkq generate --no-spread`): with a GPU's launches
    forced, the norms, argmax and attention stay one workgroup per vector and
    per head, and give the bits of a step that never spread."""
    import vkq.llama.gpu_step as gpu_step
    import vkq.llama.vector_ops as ops

    one = GpuLlama(model_file, backend, "auto", ctx=40)
    ids = one.tokenizer.encode(TEXT)[:13]
    want = one.greedy(ids, 5, stop_at_eos=False, keep_logits=True)
    for module in (ops.rms_norm, ops.attention, ops.argmax):
        monkeypatch.setattr(module, "spreads", lambda device: True)
    monkeypatch.setattr(ops.argmax, "argmax_parts", lambda device, length: 7)
    monkeypatch.setattr(gpu_step, "attention_split", lambda device, shape, spread: FORCED_SPLIT * spread)
    kept = GpuLlama(None, backend, "auto", ctx=40, file=one.file, weights=_matvecs_of(one), spread=False)
    ops_of = kept.step_graph._keep
    assert {getattr(op, "workgroups", 1) for op in ops_of} == {getattr(op, "parts", 1) for op in ops_of} == {1}
    norms = [op.launches[0] for op in ops_of if isinstance(op, ops.RMSNorm)]
    assert {n.invocations for n in norms} == {ops.reducing_variant(backend.device, "rms_norm")[1]}
    assert {op.split for op in ops_of if hasattr(op, "split")} == {0}
    got = kept.greedy(ids, 5, stop_at_eos=False, keep_logits=True)
    assert got.tokens == want.tokens and all(x.tobytes() == y.tobytes() for x, y in zip(got.logits, want.logits))


@pytest.mark.parametrize("device_type, units, invocations, capacity, expected", [
    ("discrete", None, 1024, 4096, 47),  # 2 x 132 (GPU_COMPUTE_UNITS) workgroups, 3 a split: 88 splits
    ("discrete", 16, 1024, 300, 28),  # 2 x 16 / 3: 11 splits
    # 11 splits of 373 would take more than ATTENTION_GPU_DEPTH loads in 1024
    # invocations: cut by a quarter until they fit (279, 209, 156, 117)
    ("discrete", 16, 1024, 4096, 117),
    # the same in 256 until the combine over more splits would be the deeper (9 and 8 loads)
    ("integrated", 16, 256, 4096, 48),
    ("discrete", None, 1024, 300, MIN_ATTENTION_SPLIT),  # 4 positions a split raised to the floor
    ("discrete", None, 1024, MIN_ATTENTION_SPLIT, 0),  # one split would be all of it
    ("cpu", None, 1024, 4096, 0),  # a CPU driver without a loop budget: a head per workgroup
])
def test_attention_split_per_device(device_type, units, invocations, capacity, expected):
    """attention_split on a device without a loop budget, SmolLM2's heads (3
    workgroups a split): 2 workgroups per compute unit (the device's, else
    an H100's), each split within ATTENTION_GPU_DEPTH loads per invocation
    (attention_launch's widest workgroup) or balanced with the combine's,
    at least MIN_ATTENTION_SPLIT: each dispatch within issue 47's 16."""
    from types import SimpleNamespace

    from vkq.llama.vector_ops import ATTENTION_GPU_DEPTH, attention_depth, attention_launch

    device = SimpleNamespace(caps=SimpleNamespace(
        device_type=device_type, max_loop_iterations=None, compute_units=units, subgroup_size=32,
        subgroup_arithmetic=True, max_workgroup_invocations=invocations, max_workgroup_size_x=1024,
        max_shared_memory=49152))
    shape = AttentionShape(9, 3, 64, 64, capacity)
    split = attention_split(device, shape)
    assert split == expected
    assert attention_split(device, shape, spread=False) == 0
    if split:
        launch = attention_launch(device, shape, split)
        depths = (attention_depth(shape, launch.wg, split, 3, key_lanes=launch.key_lanes,
                                  value_rows=launch.value_rows),
                  attention_depth(shape, launch.combine_wg, split, 3, combine=True, value_rows=launch.combine_rows))
        assert max(depths) <= (ATTENTION_GPU_DEPTH if invocations == 1024 else 16), depths


def test_attention_split_from_the_devices_compute_units():
    """A device that reports its compute units (an RTX 3090's 82 SMs through
    VK_NV_shader_sm_builtins) splits by them: 2 x 82 workgroups, 3 a split,
    55 splits of 75 positions; one that reports none (the descriptor as
    recorded) by an H100's 132."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from vkq.device.caps import DeviceCaps
    from vkq.device.device_info import DeviceInfo

    recorded = json.loads((Path(__file__).parent / "devices" / "nvidia_rtx3090.json").read_text())
    shape = AttentionShape(9, 3, 64, 64, 4096)
    for units, split in ((82, 75), (None, 47)):
        info = DeviceInfo.from_dict({**recorded, **({"compute_units": units} if units else {})})
        caps = DeviceCaps.of(info, int_dot=False)
        assert caps.compute_units == units
        assert attention_split(SimpleNamespace(caps=caps), shape) == split


def test_prompt_chunk_is_checked(backend, model_file):
    for bad in (0, MAX_COLS + 1, 2.0, True):
        with pytest.raises(ValueError, match="prompt_chunk"):
            GpuLlama(model_file, backend, "auto", ctx=8, prompt_chunk=bad, prompt_kernels="matvec")
    for bad in (0, PROMPT_CHUNK + 1):
        with pytest.raises(ValueError, match="prompt_chunk"):
            GpuLlama(model_file, backend, "auto", ctx=8, prompt_chunk=bad, prompt_kernels="matmul")
    with pytest.raises(ValueError, match="prompt_kernels 'tiled': one of matmul, matvec"):
        GpuLlama(model_file, backend, "auto", ctx=8, prompt_kernels="tiled")
    assert PROMPT_CHUNK_MATVEC == MAX_COLS  # (the command line's copy, which needs no Kompute)


def test_smollm2_chunked_prompt(backend):
    smol = smollm2_or_skip()
    chunked = GpuLlama(smol, backend, "auto", ctx=40, prompt_kernels="matvec")
    single = GpuLlama(None, backend, "auto", ctx=40, prompt_chunk=1, file=chunked.file, weights=_matvecs_of(chunked),
                      prompt_kernels="matvec")
    ids = chunked.tokenizer.encode("The history of the printing press begins in the fifteenth century, when a "
                                   "goldsmith in Mainz set out to print books with movable metal type")
    assert len(ids) > 2 * MAX_COLS
    a, b = chunked.logits(ids), single.logits(ids)
    assert a.tobytes() == b.tobytes() and np.isfinite(a).all()


def test_gpu_launches_of_the_vector_ops_give_the_same_bits(backend, model_file, monkeypatch):
    """A GPU's launches of the vector ops (NVIDIA's, forced: GpuLlama's
    `launches`): each norm's vector over wide workgroups (rms_norm_launch; 2
    of them for the 64 values here, as rms_norm_workgroups spreads 4,096
    over 8), the argmax over parts (argmax_parts), the attention's positions split
    (MIN_ATTENTION_SPLIT a workgroup: 3 splits by the last token), each
    split's scores over key lanes and its weighted sum over value rows
    (attention_launch), the combine over rows of splits.
    A prompt in chunks gives the logits of one fed token by token, bit for
    bit; the tokens are the device's own launches', the logits within
    rounding (the norms' sums run in another order)."""
    import vkq.llama.vector_ops as ops

    one = GpuLlama(model_file, backend, "auto", ctx=40)
    monkeypatch.setattr(ops.argmax, "argmax_parts", lambda device, length: 7)
    monkeypatch.setattr(ops.rms_norm, "rms_norm_workgroups", lambda device, length, spread=True: 2)
    chunked = GpuLlama(None, backend, "auto", ctx=40, file=one.file, weights=_matvecs_of(one), launches="nvidia")
    single = GpuLlama(None, backend, "auto", ctx=40, file=one.file, weights=_matvecs_of(one), launches="nvidia",
                      prompt_chunk=1)
    norms = [op for op in chunked.step_graph._keep if isinstance(op, ops.RMSNorm)]
    assert norms and {(op.launches[0].groups[0], op.launches[0].invocations) for op in norms} == {
        (2, ops.RMS_NORM_GPU_WG)}
    assert any(getattr(op, "parts", 1) == 7 for op in chunked.step_graph._keep)
    attention = [op for op in chunked.step_graph._keep if isinstance(op, ops.Attention)]
    assert {op.split for op in attention} == {MIN_ATTENTION_SPLIT}
    assert all(min(op.launch.key_lanes, op.launch.value_rows, op.launch.combine_rows) > 1 for op in attention)
    ids = one.tokenizer.encode(TEXT)[:13]
    a, b, c = (m.greedy(ids, 5, stop_at_eos=False, keep_logits=True) for m in (chunked, single, one))
    assert a.tokens == b.tokens == c.tokens
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))
    for x, y in zip(a.logits, c.logits):
        assert np.mean((x - y) ** 2) / np.mean(y.astype(np.float64) ** 2) < 1e-7  # rounding, through Q8_1 inputs


def test_gpu_launches_of_a_short_context_give_the_same_bits(backend, model_file):
    """NVIDIA's launches (forced) in a context of MIN_ATTENTION_SPLIT
    positions, too short to split (`vkq generate` sizes the context to the
    prompt and the new tokens): one attention dispatch per layer whose
    scores take key lanes and whose weighted sum value rows
    (attention_launch). A prompt of 6 tokens in one chunk gives the logits
    of one fed token by token, bit for bit, up to the context's last
    position; the tokens are the device's own launches'."""
    import vkq.llama.vector_ops as ops

    ctx = MIN_ATTENTION_SPLIT
    one = GpuLlama(model_file, backend, "auto", ctx=ctx, prompt_kernels="matvec")
    chunked, single = (GpuLlama(None, backend, "auto", ctx=ctx, file=one.file, weights=_matvecs_of(one),
                                launches="nvidia", prompt_kernels="matvec", prompt_chunk=chunk) for chunk in (8, 1))
    attention = [op for op in chunked.step_graph._keep if isinstance(op, ops.Attention)]
    assert attention and {op.split for op in attention} == {0}
    assert all(op.launch.key_lanes > 1 and op.launch.value_rows > 1 for op in attention)
    ids = one.tokenizer.encode(TEXT)[:6]
    a, b, c = (m.greedy(ids, ctx - len(ids) + 1, stop_at_eos=False, keep_logits=True) for m in (chunked, single, one))
    assert a.tokens == b.tokens == c.tokens
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a.logits, b.logits))


@pytest.mark.parametrize("path", ["dmmv", pytest.param("mmvq", marks=pytest.mark.slow)])
def test_matmul_prompt_gives_the_same_bits_however_it_is_cut(backend, model_file, path):
    """Through the mat-mats every chunk size (41 at once, 16, 7, and 1: a
    remainder of one token too) gives the same logits, bit for bit, and the
    tokens decoded after it are those of the prompt fed token by token (the
    logits within rounding: the mat-mat sums in another order)."""
    whole = GpuLlama(model_file, backend, path, ctx=64, prompt_kernels="matmul")
    ids = whole.tokenizer.encode(TEXT + " " + TEXT)[:41]
    assert len(ids) == 41 and whole.prompt_chunk == PROMPT_CHUNK
    want = whole.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    for chunk in (16, 7, 1):
        cut = GpuLlama(None, backend, path, ctx=64, file=whole.file, weights=_matvecs_of(whole), prompt_chunk=chunk,
                       prompt_kernels="matmul")
        got = cut.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
        assert got.tokens == want.tokens and got.logits[0].tobytes() == want.logits[0].tobytes(), chunk
        assert cut.submits == -(-41 // chunk) + 5
    single = GpuLlama(None, backend, path, ctx=64, file=whole.file, weights=_matvecs_of(whole), prompt_chunk=1,
                      prompt_kernels="matvec")
    by_token = single.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    assert by_token.tokens == want.tokens
    a, b = want.logits[0], by_token.logits[0].astype(np.float64)
    assert np.mean((a - b) ** 2) / np.mean(b ** 2) < 1e-6  # rounding (1e-13 float, 1e-9 through Q8_1 inputs)
    tiled = whole._steps[("prompt", 41)].graph
    assert tiled.counts["matvec"] == 1 and whole.step_graph.counts["matmul"] == 0  # (the output head: one column)


def test_matmul_prompt_keeps_few_steps(backend, model_file):
    """A prompt's remainders take every size: the engine keeps the full
    chunk's step and the last PROMPT_STEPS_KEPT - 1 others, not one per size."""
    from vkq.llama.context_fit import PROMPT_STEPS_KEPT

    d = GpuLlama(model_file, backend, "dmmv", ctx=64, prompt_chunk=8, prompt_kernels="matmul")
    ids = d.tokenizer.encode(TEXT + " " + TEXT)
    for n in (8 + 1, 8 + 2, 8 + 3, 8 + 4):
        d.logits(ids[:n])
    prompt_steps = sorted(n for kind, n in d._steps if kind == "prompt")
    assert prompt_steps == [3, 4, 8] and len(prompt_steps) == PROMPT_STEPS_KEPT


def test_the_prompt_kernels_are_the_devices_by_default(backend, model_file):
    from vkq.dispatch.classify import DeviceClass
    from vkq.dispatch.tiles import prompt_kernels

    d = GpuLlama(model_file, backend, "auto", ctx=16)
    assert (d.prompt_kernels, d.prompt_kernels_source) == prompt_kernels(backend.dispatcher.device_class)
    assert d.prompt_chunk == (MAX_COLS if d.prompt_kernels == "matvec" else PROMPT_CHUNK)
    if backend.device.caps.max_loop_iterations is not None:  # lavapipe: measured, the mat-mats
        assert d.prompt_kernels == "matmul" and "[measured]" in d.prompt_kernels_source
    gpu = DeviceClass(vendor="nvidia", arch="turing+", driver="proprietary")
    assert prompt_kernels(gpu)[0] == "matmul"


def test_decode_steps_take_the_mat_vec_step_after_a_matmul_prompt(backend, model_file):
    """The tokens after a mat-mat prompt go through the one-token decode step
    (the mat-vecs), not a one-column mat-mat step: profiled as decode steps."""
    d = GpuLlama(model_file, backend, "dmmv", ctx=48, prompt_kernels="matmul", profile=True)
    ids = d.tokenizer.encode(TEXT)[:13]
    gen = d.greedy(ids, 5, stop_at_eos=False)
    assert sorted(d._steps) == [("decode", 1), ("prompt", 13)]
    assert d.profiled_steps(1) == gen.stats.decode_steps == 4 and d.profiled_steps(13) == 1
    assert d.profile(4).table()


def test_host_engine_prompt_through_the_mat_mats(backend, model_file, monkeypatch):
    """The host engine takes the graph engine's prompt kernels: by default
    the device class's; through the mat-mats (Backend.matmul, matmul_id over
    columns padded to a power of two) a prompt's logits are the same bits in
    one chunk of 41 or chunks of 16 or 7, and the greedy tokens after it are
    those of the prompt fed token by token; the decode steps stay on the
    mat-vecs."""
    from vkq.dispatch.tiles import prompt_kernels
    from vkq.llama.host import LlamaModel

    default = LlamaModel(model_file, backend, "dmmv", ctx=16)
    assert (default.prompt_kernels, default.prompt_kernels_source) == prompt_kernels(backend.dispatcher.device_class)
    columns = []
    for name in ("matmul", "matmul_id"):
        real = getattr(backend, name)
        monkeypatch.setattr(backend, name, lambda w, x, *a, real=real, **k: (columns.append(x.shape),
                                                                             real(w, x, *a, **k))[1])
    whole = LlamaModel(None, backend, "dmmv", ctx=64, file=default.file, prompt_kernels="matmul")
    ids = whole.tokenizer.encode(TEXT + " " + TEXT)[:41]
    want = whole.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    assert whole.prompt_chunk == PROMPT_CHUNK and columns and all({64, 128} & set(shape) for shape in columns)
    n_calls = len(columns)
    for chunk in (16, 7):
        cut = LlamaModel(None, backend, "dmmv", ctx=64, file=default.file, prompt_chunk=chunk,
                         prompt_kernels="matmul")
        got = cut.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
        assert got.tokens == want.tokens and got.logits[0].tobytes() == want.logits[0].tobytes(), chunk
    assert len(columns) == n_calls * (1 + 3 + 6)  # (the decode steps: none)
    single = LlamaModel(None, backend, "dmmv", ctx=64, file=default.file, prompt_chunk=1, prompt_kernels="matvec")
    by_token = single.greedy(ids, 6, stop_at_eos=False, keep_logits=True)
    assert by_token.tokens == want.tokens and len(columns) == n_calls * 10
    a, b = want.logits[0], by_token.logits[0].astype(np.float64)
    assert np.mean((a - b) ** 2) / np.mean(b ** 2) < 1e-6  # rounding: the mat-mat sums in another order
    with pytest.raises(ValueError, match=r"prompt_chunk \(-ub\) 9: 1 to 8 tokens per chunk with prompt_kernels "
                                         r"'matvec'"):
        LlamaModel(None, backend, "dmmv", file=default.file, prompt_chunk=9, prompt_kernels="matvec")
    with pytest.raises(ValueError, match="not for the numpy reference"):
        LlamaModel(None, None, "numpy", file=default.file, prompt_kernels="matmul")


def test_cli_host_engine_takes_prompt_kernels(model_file, capsys):
    """vkq generate --engine host takes -ub and --prompt-kernels (the load line says which), the same text either
    way; path numpy refuses them in one line."""
    from vkq.commands.cli import main

    args = ["generate", str(model_file), "-p", TEXT, "-n", "4", "--ignore-eos", "--engine", "host"]
    assert main(args + ["-ub", "16", "--prompt-kernels", "matmul"]) == 0
    tiled = capsys.readouterr()
    assert "prompt in chunks of up to 16 tokens through the mat-mat kernels" in tiled.err, tiled.err
    assert main(args + ["--prompt-kernels", "matvec"]) == 0
    by_matvec = capsys.readouterr()
    assert by_matvec.out == tiled.out and "up to 8 tokens through the mat-vec kernels" in by_matvec.err
    assert main(args + ["--path", "numpy", "-ub", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-ub chooses a device's kernels for the prompt: not with path numpy" in err[0], err
