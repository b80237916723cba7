"""tools/gpu_campaign.sh stays runnable: bash reads it, every vkq command it
runs parses with vkq's own command line (its options cannot drift from the
CLI's), its parts come in the documented order, and part calibrate's
comparison pairs the same pipelines. A whole run (its `quick` scale on
lavapipe, parts cut by the deadline) is in docs/gpu-campaign.md."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np

from vkq.commands.cli import build_parser

from conftest import ROOT

SCRIPT = ROOT / "tools" / "gpu_campaign.sh"
DOC = ROOT / "docs" / "gpu-campaign.md"
# The script's variables, as a run would set them.
VALUES = {"$F": "/tmp/f", "$f": "/tmp/f/x.gguf", "$N_PROMPT": "16", "$N_GEN": "8", "$N_STEP": "16",
          "$KERNEL_TYPES": "Q4_0,Q2_K", "$TUNE_TYPES": "Q4_0", "$kernels": "matmul", '"$PROMPT"': "text",
          '"${PRESETS// /,}"': "smollm2-135m:Q4_0", '"$prompt_long"': "text", '"${MODELS[@]}"': "-m a.gguf -m b.gguf",
          '"${SERVER[@]}"': "--llama-server", '"${GGML[@]}"': "--ggml /bin/true", '"${flag[@]}"': "--no-fuse",
          '"${ggml[@]}"': "--ggml", '"${int8[@]}"': "--activations q8_1"}


def script_text() -> str:
    return SCRIPT.read_text().replace("\\\n", " ")


def test_bash_reads_it():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def pipelines_args() -> str:
    m = re.search(r"^PIPELINES=\((.*)\)$", SCRIPT.read_text(), re.M)
    assert m, "PIPELINES=(...) in the script"
    return m.group(1)


def vkq_commands() -> list[list[str]]:
    out = []
    values = {**VALUES, '"${PIPELINES[@]}"': pipelines_args()}
    for line in script_text().splitlines():
        m = re.search(r'"\$\{VKQ\[@\]\}" (.*)', line)
        if m:
            cmd = m.group(1)
            for var, value in values.items():
                cmd = cmd.replace(var, value)
            out.append(shlex.split(cmd))
    return out


def test_every_vkq_command_parses():
    commands = vkq_commands()
    assert {c[0] for c in commands} == {"report", "generate", "bench", "tune", "pipelines"}
    for argv in commands:
        args = build_parser().parse_args(argv)
        assert callable(args.func), argv
    # pack's NAK run: the same pipelines, ggml-vulkan's mat-vecs from the wheel's library
    args = build_parser().parse_args(shlex.split(pipelines_args()) + ["--ggml"])
    assert args.step and args.output == "json"


def test_every_model_file_command_parses():
    from vkq.commands.model_file import build_parser as model_file_parser

    commands = [shlex.split(m.group(1).replace('"$p"', "llama-3.2-1b:Q4_0").replace("${p/:/-}", "x")
                            .replace("$TOKENIZER", "/tmp/t.gguf").replace("$F", "/tmp/f"))
                for m in re.finditer(r'-m vkq\.commands\.model_file (.*)', script_text())]
    # the documented tokenizer-only line, pack's, the presets' files, and the mixture of experts
    assert [c[0] for c in commands] == ["--tokenizer-only", "--tokenizer-only", "llama-3.2-1b:Q4_0",
                                        "smollm2-135m:Q4_0"]
    for argv in commands:
        args = model_file_parser().parse_args(argv)
        assert args.tokenizer_only or args.tokenizer == "/tmp/t.gguf"


def bench_matmul_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_matmul", ROOT / "tools" / "bench_matmul.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_coopmat_parts_parse():
    """Parts coopmat and coopmat-int8: their tools/bench_matmul.py lines (the
    device-only parts: here they only parse), the int8 one where bench_matmul
    has that kernel, as the script asks it."""
    bench = bench_matmul_module()
    lines = re.findall(r'bench_matmul\.py" (--kernel .*)', script_text())
    assert [shlex.split(line)[1] for line in lines] == ["coopmat", "coopmat-int8"]
    args = bench.build_parser().parse_args(shlex.split(lines[0].replace('"$1"', "4096x14336")))
    assert args.kernel == "coopmat" and args.n == 512 and set(args.types.split(",")) == {"Q4_0", "F16"}
    if "coopmat-int8" in bench.build_parser().format_help():
        args = bench.build_parser().parse_args(shlex.split(lines[1].replace('"$1"', "4096x14336")))
        assert args.kernel == "coopmat-int8" and args.n == 512


def test_the_coopmat_race_runs_every_candidate(backend, monkeypatch, capsys):
    """tools/bench_matmul.py --kernel coopmat races each candidate tile with
    the tiled kernel. lavapipe has no cooperative matrices: the device is
    made to say it has them and each candidate runs as a plain tiled kernel
    of its tile's rows and columns (the race's bookkeeping is under test, not
    the kernel), one candidate refused as a device would."""
    import dataclasses

    from vkq.dispatch import coopmat, tiles

    bench = bench_matmul_module()
    caps = dataclasses.replace(backend.device.caps, coopmat_missing=None)
    monkeypatch.setattr(backend.device, "caps", caps)
    monkeypatch.setattr(bench, "ensure_checked", lambda *a: None)
    monkeypatch.setattr(coopmat, "status", lambda *a: (coopmat.OFFERED, "pretended"))
    table = bench.tile_tuning.tiled(backend.dispatcher, bench.get_format("Q8_0"), 256)

    def as_plain_tiles(caps, fmt, k, shape, flavour="float16"):
        if shape == tiles.COOPMAT_CANDIDATES[-1]:
            raise ValueError("refused here")
        return dataclasses.replace(table, bm=shape[0], bn=8)

    monkeypatch.setattr(tiles, "coopmat_config", as_plain_tiles)
    # (a GPU's candidate tiles: a CPU driver races its one)
    monkeypatch.setattr(tiles, "coopmat_candidates", lambda caps, flavour="float16": tiles.COOPMAT_CANDIDATES)
    assert bench.coopmat_against_tiled(backend, ["Q8_0"], [(96, 256)], 24, 2, np.random.default_rng(0)) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| Q8_0 | 96 x 256 |")]
    names = ["x".join(map(str, s)) for s in tiles.COOPMAT_CANDIDATES]
    assert len(rows) == 2 * (len(names) - 1)  # (printed as they finish, then in the table)
    assert [r.split(" | ")[4] for r in rows[-(len(names) - 1):]] == names[:-1]
    assert all(float(r.split(" | ")[7]) < 1e-10 for r in rows)  # (the same tiles' sums in another order)
    assert f"coopmat {names[-1]}: not run: ValueError: refused here" in out


def calibrate_source() -> str:
    m = re.search(r"read -r -d '' CALIBRATE <<'PY'\n(.*?)\nPY\n", SCRIPT.read_text(), re.S)
    assert m, "part calibrate's Python in the script"
    return m.group(1)


def pipeline_row(shader, regs, spills=0, spec=(32, 2), columns=1, compiled=True, statistics=None):
    """One object of `vkq pipelines -o json`, with the fields calibrate reads."""
    return {"pipeline": shader, "op": "mat-vec" if shader else "step recording", "type": "Q4_0", "path": "mmvq",
            "columns": columns, "workgroup_size": 32, "spec_constants": list(spec), "bindings": ["storage"] * 3,
            "compiled": compiled, "registers": regs, "spills": spills, "scratch_bytes": 0, "shared_bytes": None,
            "occupancy": 16, "occupancy_unit": "warps/SM", "instructions": 500, "statistics": statistics or {}}


def test_calibrate_pairs_the_same_pipelines(tmp_path):
    """Part calibrate: NAK's pipelines and the device's matched by shader and
    launch (then, one on each side, with other constants), registers' ratio,
    spills on one side only, and what either side has alone."""
    nak = [pipeline_row("mv_a", 40), pipeline_row("attn", 32, spec=(1024, 512)), pipeline_row("nak_only", 20),
           pipeline_row(None, None)]
    dev = [pipeline_row("attn", 32, spec=(1024, 131072), statistics={"Register Count": 32}),
           pipeline_row("mv_a", 60, spills=2, statistics={"Register Count": 60, "Spill Count": 2}),
           pipeline_row("dev_only", None, compiled=False), pipeline_row(None, None)]
    for name, rows in (("nak.json", nak), ("dev.json", dev)):
        (tmp_path / name).write_text(json.dumps(rows))
    out = subprocess.run([sys.executable, "-c", calibrate_source(), str(tmp_path / "nak.json"),
                          str(tmp_path / "dev.json")], capture_output=True, text=True, check=True).stdout
    assert "2 pipelines on both, 1 on NAK's side alone, 1 on this device's alone" in out
    assert "statistics: Register Count, Spill Count" in out
    assert "median 1.25, 1.00 to 1.50 over 2 pipelines" in out
    assert "spills on one side only: mv_a mat-vec 1 column(s): NAK 0, this device 2" in out
    table = [line for line in out.splitlines() if line.startswith("| mv_a") or line.startswith("| attn")]
    assert table[0].startswith("| mv_a | mat-vec | Q4_0 | 1 | 40 | 60 | 0 | 2 |")
    assert table[1].startswith("| attn (constants differ) |")
    assert "NAK alone: nak_only" in out and "this device alone: dev_only" in out and "regs not compiled" in out


def name_pattern(name: str) -> str:
    """A part name of the doc as a regular expression: {a,b} the alternatives."""
    pieces = re.split(r"\{([^}]*)\}", name)  # (literal, alternatives, literal, ...)
    return "".join(re.escape(p) if i % 2 == 0 else "(?:" + "|".join(map(re.escape, p.split(","))) + ")"
                   for i, p in enumerate(pieces))


def doc_parts() -> list[str]:
    """The quick table of docs/gpu-campaign.md, a regular expression per row
    matching its parts' names, in its order."""
    rows = re.findall(r"^\| \d+ \| ([^|]+) \|", DOC.read_text(), re.M)
    assert rows, "the quick run's table in docs/gpu-campaign.md"
    return ["|".join(f"(?:{name_pattern(n)})" for n in re.findall(r"`([^`]+)`", row)) for row in rows]


def test_quick_runs_its_parts_in_the_documented_order(tmp_path):
    """A quick run with no time left: every part it would run is listed,
    skipped, in the order of docs/gpu-campaign.md's table (the GPU tests
    first, then the pipelines, the race, the before/after), and BRING gets the
    summary and the logs packed. (The files exist, as if written, so that
    the parts on them are listed; the concurrent test groups in any order.)"""
    out = tmp_path / "out"
    (out / "files").mkdir(parents=True)
    for name in ("smollm2-135m-Q4_0", "llama-3.1-8b-Q4_0"):
        (out / "files" / f"{name}.gguf").touch()
    env = {**os.environ, "DEADLINE": "20", "TOKENIZER": str(tmp_path / "t.gguf"), "BRING": str(tmp_path / "bring"),
           "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    subprocess.run(["bash", str(SCRIPT), str(out), "quick"], env=env, check=True, capture_output=True, timeout=300)
    names = [line.split(":")[0] for line in (out / "summary.txt").read_text().splitlines()]
    assert all(line.split(": ")[1].startswith("skipped") for line in (out / "summary.txt").read_text().splitlines())
    patterns = doc_parts()
    at = 0
    for name in names:
        while at < len(patterns) and not re.fullmatch(patterns[at], name):
            at += 1
        assert at < len(patterns), f"part {name} out of the documented order, or not in the table"
    for part in ("pipelines", "calibrate", "models", "profile-llama-3.1-8b-Q4_0-no-fold", "chained-llama-3.1-8b-Q4_0",
                 "sampled-llama-3.1-8b-Q4_0", "prompt-llama-3.1-8b-Q4_0-matmul", "coopmat", "tune-1"):
        assert part in names
    assert (tmp_path / "bring" / "summary.txt").read_text() == (out / "summary.txt").read_text()
    listing = subprocess.run(["tar", "-tJf", str(tmp_path / "bring" / "campaign.tar.xz")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert "./summary.txt" in listing and not any(n.startswith("./files") for n in listing)
