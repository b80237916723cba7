"""ggml-vulkan's mat-vec times from its own benchmark, for `vkq report --ggml`.

ggml's `test-backend-ops perf -o MUL_MAT -b Vulkan0 -p REGEX` times the
cases of its perf list (among them every block type at m=4096, k=14336,
n = 1, 2, 3, 4, 5, 8, 512) whose parameters match REGEX: each case is one
graph of the same mat-mul repeated (852 times for n=1), computed after a
warm-up graph until at least a second has passed, by wall clock. Its console
output has a line per case:

    MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,...):   852 runs - 62149.17 us/run - ...
    MUL_MAT_ID(type_a=q8_0,...,k=2048): not supported

and, per backend, `Device description: NAME` (the Vulkan device's name).
ggml-vulkan lists only GPUs unless GGML_VK_VISIBLE_DEVICES names the
devices it may use (a CPU driver such as lavapipe needs it); its indices are
Vulkan's device order, as vkq's are, so vkq sets it to its own device's
index: ggml's Vulkan0 is then the device vkq measures.

A run that cannot give its times (the program fails, prints nothing for
CASE_SECONDS, or prints a case line that cannot be read) raises GgmlFailed,
its message naming --ggml; the program never outlives the run.
"""
from __future__ import annotations

import math
import os
import queue
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..blocks.formats import BlockFormat

BACKEND = "Vulkan0"  # the first (and, with GGML_VK_VISIBLE_DEVICES set to one index, only) Vulkan device
PROBE_SECONDS = 120  # the probe times nothing; it starts the backends and lists the device
# The longest ggml may print nothing: one case is a warm-up graph and at least
# a second of graphs of hundreds of mat-vecs (on a CPU driver, minutes).
CASE_SECONDS = 1200
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CASE = re.compile(r"^\s*(MUL_MAT(?:_ID)?)\((.*)\):\s*(.*)$")
_TIMED = re.compile(r"(\d+) runs -\s+(\S+) us/run\b")
_PARAM = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")
_DEVICE = re.compile(r"^\s*Device description:\s*(.+?)\s*$")


class GgmlFailed(RuntimeError):
    """ggml's run gave no times; the message names --ggml and why."""


def ggml_type_name(fmt: BlockFormat) -> str:
    """ggml's name of a block type (its type_traits' type_name): lower case,
    but the K-quants keep their capital K (q4_K)."""
    name = fmt.name.lower()
    return name[:-2] + "_K" if name.endswith("_k") else name


@dataclass(frozen=True)
class PerfCase:
    """One case of ggml's perf output."""

    op: str  # MUL_MAT or MUL_MAT_ID
    params: dict[str, str]  # as ggml prints them: type_a, m, n, k, ...
    runs: int | None  # None: not supported
    us_per_run: float | None  # mean wall time per run, microseconds

    @property
    def supported(self) -> bool:
        return self.us_per_run is not None

    @property
    def status(self) -> str:
        """'measured', 'not supported', or 'not timed' (ggml printed 0 runs or 0 us)."""
        if not self.supported:
            return "not supported"
        return "measured" if self.runs and self.us_per_run > 0 else "not timed"

    @property
    def seconds(self) -> float | None:
        """Per run, where measured."""
        return self.us_per_run * 1e-6 if self.status == "measured" else None

    @property
    def key(self) -> tuple[str, int, int, int]:
        """(type_a, m, n, k)."""
        p = self.params
        return p["type_a"], int(p["m"]), int(p["n"]), int(p["k"])


@dataclass(frozen=True)
class PerfOutput:
    device: str | None  # the Vulkan backend's device description (None: ggml did not open one)
    cases: list[PerfCase]


def parse_perf(text: str) -> PerfOutput:
    """The cases and the device of test-backend-ops' perf console output;
    GgmlFailed for a case line that cannot be read."""
    device, cases = None, []
    for line in _ANSI.sub("", text).splitlines():
        m = _DEVICE.match(line)
        if m and device is None:
            device = m.group(1)
            continue
        case = parse_case(line)
        if case is not None:
            cases.append(case)
    return PerfOutput(device, cases)


def parse_case(line: str) -> PerfCase | None:
    """The case on one line of ggml's output (None: the line is no case);
    GgmlFailed if it names a case that cannot be read."""
    m = _CASE.match(_ANSI.sub("", line))
    if m is None:
        return None
    op, text, result = m.groups()
    params = dict(_PARAM.findall(text))
    if params.get("type_a") and all(params.get(p, "").isdigit() and int(params[p]) > 0 for p in ("m", "n", "k")):
        if result.startswith("not supported"):
            return PerfCase(op, params, None, None)
        timed = _TIMED.match(result)
        us = _float(timed.group(2)) if timed else math.nan
        if 0 <= us < math.inf:
            return PerfCase(op, params, int(timed.group(1)), us)
    raise GgmlFailed(f"--ggml: an unexpected line in ggml's output: {line.strip()[:200]!r}")


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def case_filter(type_names: Iterable[str], m: int, k: int, ncols: Iterable[int]) -> str:
    """The -p regex of MUL_MAT's perf cases of these types, shape and columns."""
    types = "|".join(type_names)
    ns = "|".join(str(n) for n in ncols)
    return f"type_a=({types}),type_b=f32,m={m},n=({ns}),k={k},"


class GgmlPerf:
    """ggml's test-backend-ops binary, run for the Vulkan device `device_index`.
    `check()` (before any measurement) refuses a path that is not an
    executable, a program that does not behave like test-backend-ops, and a
    Vulkan device other than `device_name`."""

    def __init__(self, path: str | Path, device_index: int, device_name: str):
        self.path = Path(path)
        self.device_index, self.device_name = device_index, device_name

    def env(self) -> dict[str, str]:
        """The caller's environment, with ggml's libraries next to the binary
        (bin/ or ../lib) found, and ggml shown vkq's device alone."""
        env = dict(os.environ)
        here = self.path.resolve().parent
        libs = [str(here), str(here.parent / "lib")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [p for p in [env.get("LD_LIBRARY_PATH")] if p])
        env["GGML_VK_VISIBLE_DEVICES"] = str(self.device_index)
        return env

    def command(self, regex: str) -> list[str]:
        return [str(self.path), "perf", "-o", "MUL_MAT", "-b", BACKEND, "-p", regex]

    def check(self) -> None:
        if not self.path.is_file() or not os.access(self.path, os.X_OK):
            raise ValueError(f"--ggml: no executable file at {self.path} (give ggml's test-backend-ops, "
                             "e.g. build/bin/test-backend-ops)")
        try:
            r = subprocess.run(self.command("^$"), env=self.env(), capture_output=True, text=True,
                               timeout=PROBE_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ValueError(f"--ggml: {self.path} could not be run: {e}") from None
        out = r.stdout + r.stderr
        if r.returncode != 0 or "Testing" not in out:
            last = next((line for line in reversed(out.strip().splitlines()) if line.strip()), "no output")
            raise ValueError(f"--ggml: {self.path} is not a working test-backend-ops (exit status "
                             f"{r.returncode}: {_ANSI.sub('', last)[:200]})")
        device = parse_perf(out).device
        if device is None:
            raise ValueError(f"--ggml: ggml sees no Vulkan device {BACKEND} (GGML_VK_VISIBLE_DEVICES="
                             f"{self.env()['GGML_VK_VISIBLE_DEVICES']})")
        if device != self.device_name:
            raise ValueError(f"--ggml: ggml's {BACKEND} (GGML_VK_VISIBLE_DEVICES={self.device_index}) is "
                             f"{device!r}, vkq's device {self.device_index} is {self.device_name!r}")

    def run(self, regex: str, on_case: Callable[[PerfCase], None] = lambda case: None) -> PerfOutput:
        """The matching cases, timed by ggml; `on_case` sees each as ggml
        prints it. GgmlFailed if the program fails, prints nothing for
        CASE_SECONDS or prints a case that cannot be read; it is killed
        however this returns (Ctrl-C too)."""
        lines = []
        # Its own process group: killed whole, whatever it started.
        proc = subprocess.Popen(self.command(regex), env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            for line in _lines(proc.stdout, CASE_SECONDS, f"--ggml: {self.path}"):
                lines.append(line)
                case = parse_case(line)
                if case is not None:
                    on_case(case)
            try:
                status = proc.wait(CASE_SECONDS)
            except subprocess.TimeoutExpired:
                raise GgmlFailed(f"--ggml: {self.path} closed its output but ran on for {CASE_SECONDS:g} s: "
                                 "stopped") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stdout.close()
        if status != 0:
            raise GgmlFailed(f"--ggml: {self.path} exited with status {status}: "
                             f"{' / '.join(line.strip() for line in lines[-3:] if line.strip())[:300]}")
        return parse_perf("".join(lines))


def _lines(stream, idle_seconds: float, what: str) -> Iterator[str]:
    """The stream's lines as they come; GgmlFailed once none came for idle_seconds."""
    q: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = q.get(timeout=idle_seconds)
        except queue.Empty:
            raise GgmlFailed(f"{what} printed nothing for {idle_seconds:g} s: stopped") from None
        if line is None:
            return
        yield line
