"""`vkq bench` (model presets, GGUF files, the recorded decode and prompt steps) and `vkq compare`.

The bench runs on test-only tiny presets, on SmolLM2-135M (a real GGUF) and
on a small MoE-shaped GGUF written here; the presets' shapes are checked
against the models' published configurations and their types against
llama.cpp's rules. `vkq compare` must pass on SmolLM2 and must flag a tensor
that is wrong: (1) a file whose block scale is NaN (the reference is then
NaN too: a naive `nmse > threshold` would let it pass), and (2) a real vkq
bug injected in the upload repacking of one tensor: the reference
dequantizes the file's bytes, the GPU multiplies the broken device copy.
"""
from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import gguf
import kp
import numpy as np
import pytest

from conftest import finish_gguf, smollm2_or_skip

import vkq
import vkq.backend
from vkq.commands import bench, presets
from vkq.commands.bench_step import DecodeStep, PromptStep
from vkq.commands.cli import main

import ggml_quant


# config.json of each model on Hugging Face; params: the published total
# (token embedding counted once).
PUBLISHED = {
    "smollm2-135m": dict(hidden=576, n_layer=30, n_head=9, n_head_kv=3, ffn=1536, vocab=49152,
                         n_expert=0, n_expert_used=0, params=134.5e6),
    "llama-3.2-1b": dict(hidden=2048, n_layer=16, n_head=32, n_head_kv=8, ffn=8192, vocab=128256,
                         n_expert=0, n_expert_used=0, params=1.24e9),
    "llama-3.2-3b": dict(hidden=3072, n_layer=28, n_head=24, n_head_kv=8, ffn=8192, vocab=128256,
                         n_expert=0, n_expert_used=0, params=3.21e9),
    "llama-3.1-8b": dict(hidden=4096, n_layer=32, n_head=32, n_head_kv=8, ffn=14336, vocab=128256,
                         n_expert=0, n_expert_used=0, params=8.03e9),
    "qwen3-30b-a3b": dict(hidden=2048, n_layer=48, n_head=32, n_head_kv=4, expert_ffn=768, vocab=151936,
                          n_expert=128, n_expert_used=8, params=30.5e9),
    "gpt-oss-20b": dict(hidden=2880, n_layer=24, n_head=64, n_head_kv=8, expert_ffn=2880, vocab=201088,
                        n_expert=32, n_expert_used=4, params=20.9e9),
}


def smollm2() -> Path:
    return smollm2_or_skip()


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


# -- presets -----------------------------------------------------------------

@pytest.mark.parametrize("name", list(PUBLISHED))
def test_preset_matches_published_config(name):
    want, spec = PUBLISHED[name], presets.PRESETS[name]
    for key, value in want.items():
        if key != "params":
            assert getattr(spec, key) == value, f"{name}.{key}"
    model = presets.preset(name, spec.mixes[0])
    by_role: dict[str, list] = {}
    for m in model.matrices:
        by_role.setdefault(m.role, []).append(m)
    h, q, kv = spec.hidden, spec.n_head * spec.head_dim, spec.n_head_kv * spec.head_dim
    shapes = {"attn_q": (q, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, q),
              "output": (spec.vocab, h)}
    if spec.is_moe:
        e, f = spec.n_expert, spec.expert_ffn
        shapes |= {"ffn_gate_inp": (e, h), "ffn_gate_exps": (e, f, h), "ffn_up_exps": (e, f, h),
                   "ffn_down_exps": (e, h, f)}
    else:
        shapes |= {"ffn_gate": (spec.ffn, h), "ffn_up": (spec.ffn, h), "ffn_down": (h, spec.ffn)}
    assert set(by_role) == set(shapes)
    for role, ms in by_role.items():
        assert len(ms) == (1 if role == "output" else spec.n_layer), role
        assert {m.shape for m in ms} == {shapes[role]}, role
    # The published total counts the token embedding once: tied, it is our output head.
    total = model.params + (0 if spec.tied_output else spec.vocab * h)
    assert abs(total / want["params"] - 1) < 0.01, f"{name}: {total / 1e9:.3f} B"


def types(model: presets.Model, role: str) -> list[str]:
    return [m.qtype for m in model.matrices if m.role == role]


def test_mix_q4_k_m_more_bits_layers():
    # Layers that get Q6_K attn_v / ffn_down in llama.cpp's Q4_K_M of a
    # 32-layer model: the first and last 4, and every third from layer 6.
    more = [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    model = presets.resolve("llama-3.1-8b:Q4_K_M")
    for role in ("attn_v", "ffn_down"):
        assert [i for i, t in enumerate(types(model, role)) if t == "Q6_K"] == more, role
        assert set(types(model, role)) == {"Q4_K", "Q6_K"}
    for role in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
        assert set(types(model, role)) == {"Q4_K"}, role
    assert model.matrices[-1].name == "output.weight" and model.matrices[-1].qtype == "Q6_K"

    small = presets.resolve("llama-3.2-1b:Q4_K_M")  # 16 layers: layer 0 Q6_K, layer 8 Q4_K
    assert types(small, "attn_v")[0] == "Q6_K" and types(small, "attn_v")[8] == "Q4_K"
    # Tied: the output head is token_embd, quantized as the output.
    assert small.matrices[-1].name == "token_embd.weight" and small.matrices[-1].qtype == "Q6_K"


def test_mix_rules():
    m = presets.resolve("llama-3.2-1b:Q2_K")  # 32 heads / 8 kv heads = 4
    assert set(types(m, "attn_v")) == {"Q4_K"}
    assert set(types(m, "ffn_down")) == set(types(m, "attn_output")) == {"Q3_K"}
    assert set(types(m, "attn_q")) == set(types(m, "ffn_up")) == {"Q2_K"}
    assert set(types(presets.resolve("tiny-llama:Q2_K"), "attn_v")) == {"Q3_K"}  # 4 heads / 2 kv heads

    for mix, base, output in (("Q4_0", "Q4_0", "Q6_K"), ("Q8_0", "Q8_0", "Q8_0"), ("Q6_K", "Q6_K", "Q6_K"),
                              ("Q3_K_S", "Q3_K", "Q6_K"), ("Q5_K_M", "Q5_K", "Q6_K")):
        m = presets.resolve(f"llama-3.2-3b:{mix}")
        assert set(types(m, "attn_q")) == {base} and types(m, "output") == [output], mix

    moe = presets.resolve("qwen3-30b-a3b:Q4_K_M")
    assert set(types(moe, "ffn_gate_inp")) == {"F32"}  # llama.cpp never quantizes the router
    down = types(moe, "ffn_down_exps")  # experts follow the ffn_down rule by block index
    assert down[0] == "Q6_K" and down[7] == "Q4_K" and down[47] == "Q6_K"
    assert set(types(moe, "ffn_gate_exps")) == {"Q4_K"}

    oss = presets.resolve("gpt-oss-20b:MXFP4")
    assert {m.qtype for m in oss.matrices if m.is_expert_stack} == {"MXFP4"}
    assert set(types(oss, "attn_q")) == set(types(oss, "output")) == {"Q8_0"}
    assert set(types(oss, "ffn_gate_inp")) == {"F32"}
    with pytest.raises(ValueError, match="MXFP4"):
        presets.resolve("gpt-oss-20b:Q4_K_M")


def listed_presets(out: str) -> set[str]:
    """NAME:MIX of every preset `vkq bench --list` prints: after its first
    line, the models that offer the same mixes ("a, b:"), then the mixes."""
    listed, names = set(), []
    for line in out.splitlines()[1:]:
        if line.rstrip().endswith(":"):
            names = [n.strip() for n in line.strip().rstrip(":").split(",")]
        else:
            listed |= {f"{n}:{mix}" for n in names for mix in line.split()}
    return listed


def test_list_and_bad_models(capsys, monkeypatch):
    status, out, _ = run_cli(capsys, "bench", "--list")
    listed = listed_presets(out)
    for name in ("llama-3.2-1b:Q4_K_M", "gpt-oss-20b:MXFP4", "gpt-oss-20b:BF16", "llama-3.1-8b:IQ4_XS",
                 "llama-3.1-8b:IQ2_XXS", "llama-3.2-3b:IQ3_M", "qwen3-30b-a3b:IQ1_S", "llama-3.2-1b:BF16"):
        assert status == 0 and name in listed, name
    assert not any(name.startswith("tiny") for name in listed)
    # grouped: the models that share their mixes on one line, the mixes wrapped under them (was a line each)
    assert listed == {f"{n}:{mix}" for n, mixes in presets.presets_by_model().items() for mix in mixes}
    assert len(out.splitlines()) < 12 and all(len(line) <= 100 for line in out.splitlines())
    assert f"({len(listed)} presets: " in out.splitlines()[0]
    for bad, message in (("nosuch:Q4_0", "unknown model preset"), ("llama-3.2-1b", "name:MIX"),
                         ("llama-3.2-1b:Q9_9", "no 'Q9_9' mix"), ("gpt-oss-20b:Q4_0", "MXFP4"),
                         ("gpt-oss-20b:IQ4_XS", "K=2880"), ("missing.gguf", "no GGUF file")):
        status, _, err = run_cli(capsys, "bench", "-m", bad)
        assert status == 2 and message in err, (bad, err)
    # A mix with a block type this vkq lacks: one line naming it, before any work.
    monkeypatch.delitem(presets.FORMATS, "Q6_K")
    status, _, err = run_cli(capsys, "bench", "-m", "llama-3.1-8b:Q4_K_M")
    assert status == 2 and err.count("\n") == 1 and "has Q6_K matrices" in err, err


def test_too_big_for_host_memory(capsys, monkeypatch):
    """The refusal names the share of the available memory vkq bench takes
    (a model under what is available but over 90% of it read as a contradiction)."""
    monkeypatch.setattr(bench, "_available_memory", lambda: 22 * 2**30)
    monkeypatch.setattr(presets.Model, "nbytes", 21.3 * 2**30 / 2)  # (a CPU device's weights count twice)
    status, _, err = run_cli(capsys, "bench", "-m", "llama-3.2-1b:Q8_0")
    assert status == 2 and err.count("\n") == 1 and (
        "llama-3.2-1b:Q8_0 needs about 21.3 GiB of host memory for its weights on this device, more than the 90% "
        "of the 22.0 GiB available that vkq bench takes (19.8 GiB; the rest is left to the system)") in err, err


# -- the decode step ------------------------------------------------------------

@pytest.mark.parametrize("path, activations", [("dmmv", "q8_1"), ("mmvq", "q8_1"), ("mmvq", "q8_1x2")])
def test_step_computes_each_matvec(backend, monkeypatch, path, activations):
    """After a replayed step, every output equals Backend.matvec(_id) of the
    same synthetic input (and the ids drawn for that token)."""
    monkeypatch.setattr(backend, "activations", activations)
    model = presets.resolve("tiny-moe:Q4_K_M")
    rng = np.random.default_rng(0)
    weights = {m.name: backend.upload(m.qtype, m.shape, model.data(m, rng)) for m in model.matrices}
    step = DecodeStep(backend, model, weights, path)
    for _ in range(2):
        step.run()
    backend.device.manager.sequence().eval(kp.OpTensorSyncLocal([t.kp for t in step.outputs.values()]))
    n_used = model.n_expert_used
    for m in model.matrices:
        w = weights[m.name]
        n_vec = n_used if m.per_expert_input else 1
        x = step.inputs[n_vec, m.shape[-1]].read()
        got = step.outputs[m.name].read()
        if m.is_expert_stack:
            ids = step.ids[m.layer].read()
            assert len(set(ids.tolist())) == n_used and 0 <= ids.min() and ids.max() < m.shape[0]
            want = backend.matvec_id(w, x, ids, config=step.configs[m.name])
        else:
            want = backend.matvec(w, x, config=step.configs[m.name])
        assert np.array_equal(got, want), m.name  # the same pipeline gives the same bits


def test_step_kernel_seconds(backend, monkeypatch):
    """GPU time of the last run's kernels: None before a run, then positive and
    below the wall time of the run; None on a device without timestamps."""
    import time

    model = presets.resolve("tiny-llama:Q4_0")
    rng = np.random.default_rng(0)
    weights = {m.name: backend.upload(m.qtype, m.shape, model.data(m, rng)) for m in model.matrices}
    step = DecodeStep(backend, model, weights, "auto", timestamps=True)
    assert step.kernel_seconds() is None
    step.run()
    t = time.perf_counter()
    step.run()
    wall = time.perf_counter() - t
    assert 0 < step.kernel_seconds() < wall
    import dataclasses

    monkeypatch.setattr(backend, "device_info", dataclasses.replace(backend.device_info, timestamps_supported=False))
    untimed = DecodeStep(backend, model, weights, "auto", timestamps=True)
    untimed.run()
    assert untimed.kernel_seconds() is None


def test_step_ids_change_per_token(backend):
    model = presets.resolve("tiny-moe:Q8_0")
    rng = np.random.default_rng(0)
    weights = {m.name: backend.upload(m.qtype, m.shape, model.data(m, rng)) for m in model.matrices}
    step = DecodeStep(backend, model, weights, "auto")
    drawn = set()
    for _ in range(6):
        step.draw_ids()
        drawn.add(tuple(step.ids[0].read().tolist()))
    assert len(drawn) > 1


@pytest.mark.parametrize("name, path", [("tiny-llama:Q4_0", "dmmv"), ("tiny-llama:Q4_0", "mmvq"),
                                        ("tiny-moe:Q4_K_M", "mmvq"), ("tiny-moe:Q4_K_M", "dmmv")])
def test_prompt_step_computes_each_matmul(backend, name, path):
    """A replayed prompt step leaves, in each output tensor, what
    Backend.matmul (expert stacks: matmul_id, with the step's ids) of the
    same synthetic input gives on the same tiles (the last layer's products:
    earlier layers' are rewritten by it), and the output head's logits of
    the last token only, a mat-vec."""
    model = presets.resolve(name)
    rng = np.random.default_rng(0)
    weights = {m.name: backend.upload(m.qtype, m.shape, model.data(m, rng)) for m in model.matrices}
    n, n_used = 9, model.n_expert_used
    step = PromptStep(backend, model, weights, path, n_prompt=n)
    assert step.n_tokens == n
    step.run()
    step.run()
    backend.device.manager.sequence().eval(kp.OpTensorSyncLocal([t.kp for t in step.outputs.values()]))
    last = {}  # output tensor -> the matrix that wrote it last
    for m in model.matrices:
        last[id(step.outputs[m.name])] = m
    head = model.matrices[-1]
    assert len(last) < len(model.matrices) and last[id(step.outputs[head.name])] is head  # outputs are reused
    for m in last.values():
        w, cfg = weights[m.name], step.configs[m.name]
        assert type(cfg).__name__ == ("PipelineConfig" if m is head else "TileConfig"), m.name
        assert cfg.path == (path if presets.FORMATS[m.qtype].has_int8_path else "dmmv"), m.name
        got = step.outputs[m.name].read()
        if m is head:
            want = backend.matvec(w, step.inputs[1, m.shape[-1]].read(), config=cfg)
        elif m.is_expert_stack:
            ids = step.ids[m.layer].read()
            assert ids.shape == (n, n_used) and 0 <= ids.min() and ids.max() < m.shape[0]
            assert all(len(set(row)) == n_used for row in ids.tolist())  # distinct experts per token
            x = step.inputs[n * n_used, m.shape[-1]].read().reshape(n, n_used, -1) if m.per_expert_input \
                else step.inputs[n, m.shape[-1]].read()
            want = backend.matmul_id(w, x, ids, config=cfg).reshape(n * n_used, -1)
        else:
            want = backend.matmul(w, step.inputs[n, m.shape[-1]].read().T, config=cfg).T
        assert np.array_equal(got, want), m.name
    assert step.logits is step.outputs[head.name]
    if n_used:  # (here ffn_down_exps rewrites gate's output: the same size, a stage later)
        assert {m.role for m in last.values()} >= {"ffn_up_exps", "ffn_down_exps"}


# -- vkq bench output ------------------------------------------------------------

BENCH = ("bench", "-m", "tiny-llama:Q4_0,tiny-moe:Q4_K_M", "-p", "16", "-n", "2", "-r", "2")
FIELDS = ("model", "model_size", "model_n_params", "backend", "device", "path", "test", "n_prompt", "n_gen",
          "samples_ts", "avg_ts", "stddev_ts", "kernel_samples_ts", "kernel_avg_ts", "kernel_stddev_ts",
          "bytes_per_token", "gbps", "membw_gbps", "bw_pct")


def check_row(row: dict, pp: int = 16, tg: int = 2, repetitions: int = 2) -> None:
    """A row of BENCH's (json, or csv with the lists split): pp rows have no GB/s."""
    assert set(FIELDS) <= set(row)
    samples = [float(s) for s in row["samples_ts"]]
    assert len(samples) == repetitions and all(0 < s < float("inf") for s in samples)
    if row["test"].startswith("pp"):
        assert row["test"] == f"pp{pp}" and (int(row["n_prompt"]), int(row["n_gen"])) == (pp, 0)
        assert all(row[key] in (None, "") for key in ("bytes_per_token", "gbps", "bw_pct")), row
        kernel = [float(s) for s in row["kernel_samples_ts"]]
        assert len(kernel) == repetitions and all(0 < k < float("inf") for k in kernel)
        assert float(row["avg_ts"]) == pytest.approx(statistics.mean(samples))
        return
    assert (int(row["n_prompt"]), int(row["n_gen"])) == (0, tg)
    avg = float(row["avg_ts"])
    assert avg == pytest.approx(statistics.mean(samples))
    assert float(row["stddev_ts"]) == pytest.approx(statistics.stdev(samples))
    # lavapipe has timestamps: a kernel figure per repetition (from a timed copy
    # of the step; test_step_kernel_seconds holds kernel < wall within one replay).
    kernel = [float(s) for s in row["kernel_samples_ts"]]
    assert len(kernel) == repetitions and all(0 < k < float("inf") for k in kernel)
    kernel_avg = float(row["kernel_avg_ts"])
    assert kernel_avg == pytest.approx(statistics.mean(kernel))
    assert float(row["gbps"]) == pytest.approx(int(row["bytes_per_token"]) * kernel_avg / 1e9)
    assert float(row["bw_pct"]) == pytest.approx(100 * float(row["gbps"]) / float(row["membw_gbps"]))
    assert float(row["membw_gbps"]) > 0 and row["test"] == f"tg{tg}" and row["backend"] == "Vulkan (vkq)"


def test_bench_json(capsys):
    status, out, err = run_cli(capsys, *BENCH, "--path", "auto,dmmv,mmvq", "-o", "json")
    assert status == 0 and "synthetic activations" in err
    rows = json.loads(out)
    # llama-bench's order: per model and path, pp then tg
    assert [(r["model"], r["path"], r["test"]) for r in rows] == [
        (m, p, t) for m in ("tiny-llama:Q4_0", "tiny-moe:Q4_K_M") for p in ("auto", "dmmv", "mmvq")
        for t in ("pp16", "tg2")]
    for row in rows:
        check_row(row)
        model = presets.resolve(row["model"])
        assert row["model_n_params"] == model.params and row["model_size"] == model.nbytes
        assert sum(row["paths_used"].values()) == len(model.matrices)
        assert [m["name"] for m in row["matrices"]] == [m.name for m in model.matrices]
        ran = [m["path"] for m in row["matrices"]]
        assert {p: ran.count(p) for p in set(ran)} == row["paths_used"]
        assert all(m["launch"] and m["source"] for m in row["matrices"])
        kernels = [m["kernel"] for m in row["matrices"]]
        if row["test"] == "pp16":  # the tiles of every matrix but the head: the last token's mat-vec
            assert kernels == ["mat-mat"] * (len(kernels) - 1) + ["mat-vec"]
            assert all(m["bm"] >= 1 and m["bn"] >= 1 for m in row["matrices"][:-1])
            assert row["matrices"][0]["launch"].startswith("tiled mat-mat (mul_mm ")
            assert not row["over_bandwidth"]
        else:
            assert set(kernels) == {"mat-vec"}
            assert all(m["wg_size"] >= 1 and m["rows_per_wg"] >= 1 for m in row["matrices"])
            assert row["over_bandwidth"] == (row["bw_pct"] > 100)
    moe = [r for r in rows if r["model"] == "tiny-moe:Q4_K_M"]
    # MoE: a token reads only the used experts' bytes; the F32 router takes dmmv under mmvq.
    spec = presets.resolve("tiny-moe:Q4_K_M")
    used = sum(m.nbytes * spec.n_expert_used // m.shape[0] if m.is_expert_stack else m.nbytes for m in spec.matrices)
    unused = sum(m.nbytes - m.nbytes * spec.n_expert_used // m.shape[0] for m in spec.matrices if m.is_expert_stack)
    assert moe[1]["bytes_per_token"] == used and moe[1]["model_size"] - used == unused > 0
    assert moe[4]["paths_used"] == moe[5]["paths_used"] == {"dmmv": 2, "mmvq": 15}


def test_bench_csv(capsys):
    status, out, _ = run_cli(capsys, *BENCH, "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert status == 0 and [r["test"] for r in rows] == ["pp16", "tg2"] * 2
    for row in rows:
        row["samples_ts"] = row["samples_ts"].split()
        row["kernel_samples_ts"] = row["kernel_samples_ts"].split()
        check_row(row)


def test_bench_markdown(capsys):
    status, out, _ = run_cli(capsys, *BENCH, "--path", "mmvq")
    lines = out.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["model", "size", "params", "backend", "device", "path", "test", "t/s", "kernel t/s", "GB/s",
                      "% bw"]
    assert set(lines[1]) <= set("|-: ")
    table = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:6]]
    assert [(r[0], r[6]) for r in table] == [(m, t) for m in ("tiny-llama:Q4_0", "tiny-moe:Q4_K_M")
                                             for t in ("pp16", "tg2")]
    assert [r[5] for r in table] == ["mmvq", "mmvq", "mmvq¹", "mmvq¹"]  # the router's footnote
    assert all(len(r) == 11 and " ± " in r[7] and " ± " in r[8] for r in table)
    assert table[0][9:] == table[2][9:] == ["-", "-"]  # a prompt has no GB/s, nor a share of bandwidth
    # Tiny models sit in the CPU's cache: faster than its memory, so no % is printed.
    assert all(r[10] == bench.OVER or float(r[10]) <= 100 for r in (table[1], table[3]))
    assert "synthetic activations" in out and "¹ mmvq falls back to dmmv" in out
    assert "int8 path activations: q8_1x2 " in out and "pp: no GB/s or % bw" in out  # (vkq generate's)


def test_bench_verbose_shows_each_matrix_config(capsys):
    status, out, _ = run_cli(capsys, "bench", "-m", "tiny-moe:Q4_K_M", "-p", "0", "-n", "1", "-r", "1", "--path",
                             "mmvq", "--verbose")
    assert status == 0
    detail = out.split("\n\n")[-1].splitlines()
    assert [c.strip() for c in detail[0].split("|")[1:5]] == ["model", "test", "bench path", "type"]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in detail[2:]]
    assert {r[5].split()[0] for r in rows} == {"mmvq", "dmmv"}  # the F32 router falls back
    assert {r[1] for r in rows} == {"tg1"}
    assert sum(int(r[-1].split()[0]) for r in rows) == len(presets.resolve("tiny-moe:Q4_K_M").matrices)


def test_bench_verbose_shows_each_prompt_tile_config(capsys):
    """pp: the mat-mats' tiles in a table of their own (TileConfig.describe),
    the output head's mat-vec with the mat-vecs. (Also: -p takes several
    counts, -n 0 drops the tg test.)"""
    status, out, _ = run_cli(capsys, "bench", "-m", "tiny-llama:Q8_0", "-p", "9,16", "-n", "0", "-r", "1",
                             "--path", "dmmv", "--verbose")
    assert status == 0
    table = [[c.strip() for c in line.strip("|").split("|")] for line in out.split("\n\n")[0].splitlines()[2:]]
    assert [r[6] for r in table] == ["pp9", "pp16"] and all(" ± " in r[7] for r in table)
    matvecs, matmuls = (t.splitlines() for t in out.split("\n\n")[-2:])
    assert [c.strip() for c in matmuls[0].strip("|").split("|")] == [
        "model", "test", "bench path", "type", "shape", "ran", "tiled mat-mat", "matrices"]
    tiled = [[c.strip() for c in line.strip("|").split("|")] for line in matmuls[2:]]
    assert all(r[6].startswith("tiled mat-mat (mul_mm float) ") for r in tiled)
    heads = [[c.strip() for c in line.strip("|").split("|")] for line in matvecs[2:]]
    assert [h[1] for h in heads] == ["pp9", "pp16"] and all(h[-1] == "1 (token_embd.weight)" for h in heads)
    model = presets.resolve("tiny-llama:Q8_0")
    for test in ("pp9", "pp16"):
        assert sum(int(r[-1].split()[0]) for r in tiled if r[1] == test) == len(model.matrices) - 1


def test_bench_activations(capsys):
    status, out, _ = run_cli(capsys, "bench", "-m", "tiny-llama:Q4_0", "-p", "0", "-n", "2", "-r", "1", "--path",
                             "mmvq", "--activations", "q8_1x2", "-o", "json")
    assert status == 0 and json.loads(out)[0]["activations"] == "q8_1x2"


def test_bench_token_counts(capsys):
    """-p and -n as llama-bench's: comma-separated counts, 0 drops the test
    (-n 0 and several -p: test_bench_verbose_shows_each_prompt_tile_config)."""
    status, out, _ = run_cli(capsys, "bench", "-m", "tiny-llama:Q4_0", "-p", "0", "-n", "1,2", "-r", "1",
                             "-o", "csv")
    assert status == 0 and [r["test"] for r in csv.DictReader(io.StringIO(out))] == ["tg1", "tg2"]


@pytest.mark.parametrize("argv, message", [
    (("-p", "-1"), "-p: -1 tokens; a test takes 0 (none) to 65535"),
    (("-n", "1.5"), "-n: '1.5' is not a whole number of tokens"),
    (("-p", "x,16"), "-p: 'x' is not a whole number of tokens"),
    (("-n", ","), "-n: no token count given"),
    (("-p", "70000"), "-p: 70000 tokens; a test takes 0 (none) to 65535"),
    (("-p", "0", "-n", "0"), "-p 0 and -n 0: no test left to run"),
])
def test_bench_bad_token_counts(capsys, argv, message):
    """One line, exit 2, before any work (no device is opened)."""
    status, out, err = run_cli(capsys, "bench", "-m", "tiny-llama:Q4_0", "-r", "1", *argv)
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err


def fake_row(path: str, samples: list[float], kernel: list[float] | None = None, membw: float = 10.0) -> bench.Row:
    return bench.Row("m", 2**30, 10**9, bench.BACKEND, "dev", path, "tg4", 0, 4, samples, kernel, 10**9, membw,
                     {path: 1})


def test_bench_takes_the_better_of_two_bandwidth_probes(monkeypatch, capsys):
    """vkq bench probes the memory bandwidth before its runs and after them
    (here the second made to read 4x the first: other work only slows a
    probe), and its % bw is of the better one."""
    passes = iter([1.0] * 4 + [0.25] * 4)  # seconds per pass: each probe times 4 access patterns
    monkeypatch.setattr(bench, "_seconds_per_pass", lambda device, algo: next(passes))
    monkeypatch.setattr(bench, "_BANDWIDTH", {})
    backend = vkq.Backend()
    rows = bench.bench(backend, [presets.resolve("tiny-llama:Q4_0")], ["auto"], 2, 1, probe_after=True)
    best = bench.memory_bandwidth(backend.device)
    # stderr is no terminal here: a line per finished step, with an ETA (was nothing until the table); each
    # probe announced before it runs, the second counted in the ETA of the runs before it
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["vkq bench"] * 6, err
    assert "measuring the device's memory read bandwidth" in err[0] and "measured in" in err[1], err
    assert "tiny-llama:Q4_0 auto tg2: " in err[3] and "t/s (ETA " in err[3], err
    assert "measuring the memory bandwidth again" in err[4] and err[5].endswith("(done)"), err
    assert rows[0].membw_gbps == best / 1e9 and next(passes, None) is None  # both probes ran
    assert rows[0].bw_pct == pytest.approx(100 * rows[0].gbps / rows[0].membw_gbps)
    monkeypatch.setattr(bench, "_BANDWIDTH", {})
    passes = iter([1.0] * 4)
    assert bench.probe_bandwidth(backend.device) == pytest.approx(best / 4)  # the first probe read a quarter


def test_bench_probes_again_only_after_long_tg_runs(monkeypatch, capsys):
    """By default the second bandwidth probe runs only where there are tg
    rows (pp rows have no % bw) and the runs took longer than
    PROBE_AGAIN_AFTER: a short run's probe would double its time."""
    probes = []
    monkeypatch.setattr(bench, "probe_bandwidth", lambda device: probes.append(1) or 1e10)
    monkeypatch.setattr(bench, "_BANDWIDTH", {0: 1e10})  # (the first probe made already)
    backend = vkq.Backend()
    tiny = presets.resolve("tiny-llama:Q4_0")
    bench.bench(backend, [tiny], ["auto"], 2, 1)
    assert probes == [] and "again" not in capsys.readouterr().err
    monkeypatch.setattr(bench, "PROBE_AGAIN_AFTER", 0.0)
    bench.bench(backend, [tiny], ["auto"], [], 1, n_prompt=[8])  # pp only: nothing to relate to the bandwidth
    assert probes == []
    bench.bench(backend, [tiny], ["auto"], 2, 1)
    assert probes == [1] and "measuring the memory bandwidth again" in capsys.readouterr().err


def test_percent_of_bandwidth_never_over_100():
    """A figure above the device's measured bandwidth is not printed as a
    share of it; the table says why (JSON keeps the number)."""
    ok, over = fake_row("mmvq", [2.0, 2.0], [5.0, 5.0], membw=10.0), fake_row("mmvq", [2.0], [20.0], membw=10.0)
    assert ok.gbps == pytest.approx(5.0) and ok.bw_pct == pytest.approx(50.0) and not ok.over_bandwidth
    assert over.bw_pct == pytest.approx(200.0) and over.over_bandwidth
    md = bench.render([ok, over], "md")
    cells = [line.split("|")[-2].strip() for line in md.splitlines()[2:4]]
    assert cells == ["50.0", bench.OVER] and "200" not in md.split("\n\n")[0]
    assert f"% bw {bench.OVER}: faster than the device's memory as measured" in md
    assert json.loads(bench.render([over], "json"))[0]["over_bandwidth"] is True
    # Without timestamps the wall clock is all there is.
    wall_only = fake_row("dmmv", [2.0, 2.0])
    assert wall_only.kernel_avg_ts is None and wall_only.gbps == pytest.approx(2.0)
    kernel_cell = bench.render([wall_only], "md").splitlines()[2].split("|")[9]
    assert kernel_cell.strip() == "-"


def test_compare_diff_from_rows():
    a, b = fake_row("dmmv", [2.0, 2.2]), fake_row("mmvq", [3.0, 3.3])
    c = bench.compare(a, b)
    assert c["diff_pct"] == pytest.approx(50.0)
    md = bench.render([a, b], "md", [c])
    assert "+50.0%" in md and "2.10 ± 0.14" in md and "3.15 ± 0.21" in md


def test_bench_compare(capsys):
    status, out, _ = run_cli(capsys, "bench", "-m", "tiny-llama:Q8_0", "-p", "16", "-n", "2", "-r", "2",
                             "--compare", "dmmv,mmvq", "-o", "json")
    comparisons = json.loads(out)
    assert status == 0 and [c["test"] for c in comparisons] == ["pp16", "tg2"]
    for c in comparisons:
        assert (c["path_a"], c["path_b"]) == ("dmmv", "mmvq")
        assert c["diff_pct"] == pytest.approx(100 * (c["avg_ts_b"] / c["avg_ts_a"] - 1))
    status, out, _ = run_cli(capsys, "bench", "-m", "tiny-llama:Q8_0", "-p", "0", "-n", "2", "-r", "2",
                             "--compare", "dmmv,mmvq", "-o", "csv")
    (row,) = csv.DictReader(io.StringIO(out))
    assert float(row["diff_pct"]) == pytest.approx(100 * (float(row["avg_ts_b"]) / float(row["avg_ts_a"]) - 1))
    status, _, err = run_cli(capsys, "bench", "-m", "tiny-llama:Q8_0", "--compare", "dmmv")
    assert status == 2 and "two different paths" in err


# -- GGUF files ------------------------------------------------------------------

MOE = dict(hidden=256, n_layer=2, n_expert=4, n_used=2, expert_ffn=256, vocab=300)
MOE_TYPES = {"attn_q": "Q4_K", "attn_k": "Q8_0", "attn_v": "Q6_K", "attn_output": "Q5_0",
             "ffn_gate_inp": "F32", "ffn_gate_exps": "Q4_0", "ffn_up_exps": "MXFP4", "ffn_down_exps": "Q6_K"}


def moe_tensors(seed: int = 0) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (type, raw GGUF bytes, or float32 values for F32) of a 2-layer MoE model."""
    rng = np.random.default_rng(seed)
    h, e, f = MOE["hidden"], MOE["n_expert"], MOE["expert_ffn"]
    shapes = {"attn_q": (h, h), "attn_k": (64, h), "attn_v": (64, h), "attn_output": (h, h),
              "ffn_gate_inp": (e, h), "ffn_gate_exps": (e, f, h), "ffn_up_exps": (e, f, h),
              "ffn_down_exps": (e, h, f)}
    out = {}

    def add(name, qtype, shape):
        values = rng.uniform(-1, 1, shape).astype(np.float32)
        if qtype == "F32":
            out[name] = (qtype, values)
        else:
            data = ggml_quant.quantize(values.reshape(-1, shape[-1]), qtype)
            out[name] = (qtype, data.reshape(*shape[:-1], -1))

    add("token_embd.weight", "Q8_0", (MOE["vocab"], h))  # not multiplied: output.weight exists
    for i in range(MOE["n_layer"]):
        out[f"blk.{i}.attn_norm.weight"] = ("F32", np.ones(h, np.float32))  # not a matrix
        for role, shape in shapes.items():
            add(f"blk.{i}.{role}.weight", MOE_TYPES[role], shape)
    add("output.weight", "Q8_0", (MOE["vocab"], h))
    return out


def write_gguf(path: Path, tensors: dict[str, tuple[str, np.ndarray]], n_used: int | None = MOE["n_used"]) -> Path:
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_block_count(MOE["n_layer"])
    if n_used:
        w.add_expert_count(MOE["n_expert"])
        w.add_expert_used_count(n_used)
    for name, (qtype, data) in tensors.items():
        raw = None if data.dtype == np.float32 else gguf.GGMLQuantizationType[qtype]
        w.add_tensor(name, data, raw_dtype=raw)
    return finish_gguf(w, path)


@pytest.fixture(scope="module")
def moe_gguf(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-moe.gguf", moe_tensors())


def test_model_from_moe_gguf(moe_gguf):
    model = presets.resolve(str(moe_gguf))
    assert model.name == "tiny-moe" and model.n_expert_used == MOE["n_used"]
    names = [m.name for m in model.matrices]
    assert names[-1] == "output.weight" and "token_embd.weight" not in names
    assert len(names) == MOE["n_layer"] * len(MOE_TYPES) + 1
    for m in model.matrices[:-1]:
        assert m.qtype == MOE_TYPES[m.role], m.name
    assert model.matrices[6].shape == (MOE["n_expert"], MOE["expert_ffn"], MOE["hidden"])
    # Decode order: QKV | out | router | gate+up experts | down experts, per layer; then the head.
    assert [[m.role for m in s] for s in model.stages()[:5]] == [
        ["attn_q", "attn_k", "attn_v"], ["attn_output"], ["ffn_gate_inp"],
        ["ffn_gate_exps", "ffn_up_exps"], ["ffn_down_exps"]]


def test_gguf_without_expert_count(tmp_path):
    path = write_gguf(tmp_path / "no-count.gguf", moe_tensors(), n_used=None)
    with pytest.raises(ValueError, match="expert_used_count"):
        presets.from_gguf(path)


def test_gguf_unknown_matrix_is_reported(tmp_path, capsys):
    tensors = moe_tensors()
    tensors["blk.0.attn_qkv.weight"] = tensors["blk.0.attn_q.weight"]  # a role the step does not model
    path = write_gguf(tmp_path / "qkv.gguf", tensors)
    assert presets.from_gguf(path).ignored == ("blk.0.attn_qkv.weight",)
    status, _, err = run_cli(capsys, "bench", "-m", str(path), "-p", "0", "-n", "1", "-r", "1", "-o", "csv")
    assert status == 0 and "left out 1 weight matrices" in err and "blk.0.attn_qkv.weight" in err


def test_gguf_unsupported_type(tmp_path, capsys):
    tensors = moe_tensors()
    q8k = np.zeros((64, MOE["hidden"] // 256 * 292), np.uint8)  # Q8_K bytes of a 64 x hidden matrix
    tensors["blk.1.attn_k.weight"] = ("Q8_K", q8k)
    path = write_gguf(tmp_path / "q8k.gguf", tensors)
    status, _, err = run_cli(capsys, "bench", "-m", str(path), "-n", "1", "-r", "1")
    assert status == 2 and "blk.1.attn_k.weight (Q8_K)" in err


def test_bench_gguf_files(capsys, moe_gguf):
    path = smollm2()
    status, out, _ = run_cli(capsys, "bench", "-m", f"{path},{moe_gguf}", "-p", "16", "-n", "2", "-r", "2",
                             "--path", "mmvq", "-o", "json")
    assert status == 0
    rows = json.loads(out)
    assert [(r["model"], r["test"]) for r in rows] == [
        (m, t) for m in ("SmolLM2-135M-Instruct.Q4_1", "tiny-moe") for t in ("pp16", "tg2")]
    for row in rows:
        check_row(row)
    file_bytes = sum(t.data.nbytes for t in vkq.load_gguf(path).values() if len(t.shape) == 2)
    assert rows[0]["model_size"] == file_bytes  # every matrix; token_embd is the (tied) head
    assert rows[0]["paths_used"] == rows[1]["paths_used"] == {"mmvq": 211}
    assert rows[2]["paths_used"] == rows[3]["paths_used"] == {"dmmv": 2, "mmvq": 15}


# -- vkq compare -----------------------------------------------------------------

def test_compare_smollm2(capsys):
    status, out, _ = run_cli(capsys, "compare", str(smollm2()))
    lines = out.splitlines()
    assert status == 0 and lines[-1].startswith("PASS")
    per_tensor = [line for line in lines if line.startswith(("blk.", "token_embd"))]
    assert len(per_tensor) == 211
    assert all("dmmv" in line and "mmvq" in line and "FAIL" not in line for line in per_tensor)


def test_compare_moe_gguf(capsys, moe_gguf):
    status, out, _ = run_cli(capsys, "compare", str(moe_gguf))
    assert status == 0, out
    assert out.splitlines()[1].split() == ["tensor", "type", "shape", "NMSE", "per", "path"]  # a header
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("blk.", "output", "token"))}
    assert len(lines) == 2 * 8 + 2  # every matrix and stack, token_embd included
    assert "4x256x256" in lines["blk.0.ffn_up_exps.weight"]
    assert "mmvq" not in lines["blk.0.ffn_gate_inp.weight"]  # F32: dmmv only


def test_compare_lists_layers_in_order():
    from vkq.commands.compare import natural_key

    names = ["blk.10.attn_q.weight", "output.weight", "blk.2.attn_q.weight", "blk.1.ffn_up.weight"]
    assert sorted(names, key=natural_key) == ["blk.1.ffn_up.weight", "blk.2.attn_q.weight", "blk.10.attn_q.weight",
                                              "output.weight"]


def test_compare_names_a_nan_scale_as_the_files(tmp_path, capsys):
    """Weights that decode to NaN have no finite reference: the tensor is not
    checked, and said so (not FAIL with NMSE inf, as if vkq were wrong)."""
    tensors = moe_tensors()
    qtype, data = tensors["blk.1.attn_k.weight"]
    data = data.copy()
    data[0, 0:2] = np.array([np.nan], np.float16).view(np.uint8)  # Q8_0 block 0: d = NaN
    tensors["blk.1.attn_k.weight"] = (qtype, data)
    status, out, _ = run_cli(capsys, "compare", str(write_gguf(tmp_path / "nan.gguf", tensors)))
    lines = out.splitlines()
    assert status == 1 and not any("FAIL" in line or "inf" in line.split() for line in lines), out
    (line,) = [line for line in lines if line.startswith("blk.1.attn_k.weight")]
    assert line.endswith("not checked: the reference is not finite (its weights decode to NaN or inf)")
    assert lines[-1] == ("NOT CHECKED: 1 tensor(s) whose float64 reference is not finite (the file's weights "
                         "decode to NaN or inf): blk.1.attn_k.weight")


def test_compare_flags_wrong_device_copy(moe_gguf, capsys, monkeypatch):
    """A bug in vkq itself: the repacking at upload corrupts the quants of one
    matrix (the 300-row output head). The file is fine; compare must catch it."""
    pack_rows = vkq.backend.pack_rows

    def buggy(layout, data, rows):
        words, offsets = pack_rows(layout, data, rows)
        if layout.rows == MOE["vocab"]:
            words = words.copy()
            words[offsets[-1]:] ^= np.uint32(0x80808080)  # flips the sign of every int8 quant
        return words, offsets

    monkeypatch.setattr(vkq.backend, "pack_rows", buggy)
    status, out, _ = run_cli(capsys, "compare", str(moe_gguf))
    failed = [line.split()[0] for line in out.splitlines() if line.endswith("FAIL")]
    assert status == 1 and sorted(failed) == ["output.weight", "token_embd.weight"]
    assert "FAIL: 2 tensor(s)" in out
