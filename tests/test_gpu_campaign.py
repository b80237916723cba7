"""tools/gpu_campaign.sh stays runnable: bash reads it, and every vkq command
it runs parses with vkq's own command line (its options cannot drift from
the CLI's). A whole run (its `small` scale, about 15 minutes on lavapipe) is
in docs/gpu-campaign.md."""
from __future__ import annotations

import re
import shlex
import subprocess

import numpy as np

from vkq.commands.cli import build_parser

from conftest import ROOT

SCRIPT = ROOT / "tools" / "gpu_campaign.sh"
# The script's variables, as a run would set them.
VALUES = {"$F": "/tmp/f", "$f": "/tmp/f/x.gguf", "$N_PROMPT": "16", "$N_GEN": "8", "$KERNEL_TYPES": "Q4_0,Q2_K",
          "$TUNE_TYPES": "Q4_0", "$kernels": "matmul", '"${PRESETS// /,}"': "smollm2-135m:Q4_0", '"$PROMPT_LONG"': "text", '"${MODELS[@]}"': "-m a.gguf -m b.gguf", '"${SERVER[@]}"': "--llama-server",
          '"${GGML[@]}"': "--ggml /bin/true", '"${flag[@]}"': "--no-fuse"}


def test_bash_reads_it():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def vkq_commands() -> list[list[str]]:
    text = SCRIPT.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        m = re.search(r'"\$\{VKQ\[@\]\}" (.*)', line)
        if m:
            cmd = m.group(1)
            for var, value in VALUES.items():
                cmd = cmd.replace(var, value)
            out.append(shlex.split(cmd))
    return out


def test_every_vkq_command_parses():
    commands = vkq_commands()
    assert {c[0] for c in commands} == {"report", "generate", "bench", "tune"}
    for argv in commands:
        args = build_parser().parse_args(argv)
        assert callable(args.func), argv


def test_every_model_file_command_parses():
    from vkq.commands.model_file import build_parser as model_file_parser

    text = SCRIPT.read_text().replace("\\\n", " ")
    commands = [shlex.split(m.group(1).replace('"$p"', "llama-3.2-1b:Q4_0").replace("${p/:/-}", "x")
                            .replace("$TOKENIZER", "/tmp/t.gguf").replace("$F", "/tmp/f"))
                for m in re.finditer(r'-m vkq\.commands\.model_file (.*)', text)]
    # the documented tokenizer-only line, the presets' files, and the mixture of experts
    assert [c[0] for c in commands] == ["--tokenizer-only", "llama-3.2-1b:Q4_0", "smollm2-135m:Q4_0"]
    for argv in commands:
        args = model_file_parser().parse_args(argv)
        assert args.tokenizer_only or args.tokenizer == "/tmp/t.gguf"


def bench_matmul_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_matmul", ROOT / "tools" / "bench_matmul.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_coopmat_part_parses():
    """Part coopmat's tools/bench_matmul.py line (the device-only part: here it only parses)."""
    bench = bench_matmul_module()
    text = SCRIPT.read_text().replace("\\\n", " ")
    lines = re.findall(r'bench_matmul\.py" (.*)', text)
    assert len(lines) == 1
    args = bench.build_parser().parse_args(shlex.split(lines[0]))
    assert args.kernel == "coopmat" and args.n == 512 and set(args.types.split(",")) == {"Q4_0", "F16"}


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
