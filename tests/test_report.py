"""`vkq report`: its parser of ggml's benchmark output on real captured output,
the report's structure and JSON schema on lavapipe (small shapes, a tiny
model preset), and its refusals: no device, a bad ggml path, a program that
is not test-backend-ops, ggml on another device, a model of another
architecture, an unknown block type.

The captured outputs in tests/ggml_perf/ are ggml d99724f2's
`test-backend-ops perf -o MUL_MAT[_ID] -b Vulkan0 -p ...` on this lavapipe
(GGML_VK_VISIBLE_DEVICES=0; the last without it), byte for byte, colour
escapes included.
"""
from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import gguf
import numpy as np
import pytest

import ggml_quant
from conftest import finish_gguf, smollm2_or_skip
from test_cli import assert_user_error, run_vkq

import vkq
from vkq import report, timing, tune
from vkq.cli import main
from vkq.formats import FORMATS
from vkq.ggml_perf import case_filter, ggml_type_name, parse_perf

CAPTURED = Path(__file__).parent / "ggml_perf"
LAVAPIPE = "llvmpipe (LLVM 15.0.6, 256 bits)"
SMALL = (64, 512)  # rows x K of the structure tests
SMALL_ROTATION = 1 << 20  # bytes per rotation pass in the structure tests


# -- the parser, on real output -------------------------------------------------------

def test_parse_real_mul_mat_output():
    out = parse_perf((CAPTURED / "mul_mat_q4_0_lavapipe.txt").read_text())
    assert out.device == LAVAPIPE
    assert [(c.op, c.key, c.runs, c.us_per_run) for c in out.cases] == [
        ("MUL_MAT", ("q4_0", 4096, 1, 14336), 852, 62149.17),
        ("MUL_MAT", ("q4_0", 4096, 4, 14336), 213, 109040.16),
    ]
    assert all(c.supported for c in out.cases)
    assert out.cases[0].params["bs"] == "[1,1]" and out.cases[0].params["per"] == "[0,1,2,3]"


def test_parse_not_supported_case():
    out = parse_perf((CAPTURED / "mul_mat_id_not_supported_lavapipe.txt").read_text())
    assert out.device == LAVAPIPE
    (case,) = out.cases
    assert case.op == "MUL_MAT_ID" and not case.supported and case.runs is None
    assert case.params["type_a"] == "q8_0" and case.params["n_used"] == "8"


def test_parse_without_a_vulkan_device():
    out = parse_perf((CAPTURED / "no_vulkan_device.txt").read_text())
    assert out.device is None and out.cases == []


def test_case_filter_selects_the_cases_ggml_printed():
    """The regex vkq gives -p matches ggml's own parameter strings (ggml
    matches it with std::regex_search, as re.search does here)."""
    text = (CAPTURED / "mul_mat_q4_0_lavapipe.txt").read_text()
    params = re.findall(r"MUL_MAT\((.*?)\):", text)
    assert len(params) == 2
    assert all(re.search(case_filter(["q4_0", "q4_K"], 4096, 14336, [1, 4]), p) for p in params)
    assert not any(re.search(case_filter(["q4_0"], 4096, 14336, [2]), p) for p in params)
    assert not any(re.search(case_filter(["q4_1"], 4096, 14336, [1]), p) for p in params)


def test_ggml_type_names():
    names = {t: ggml_type_name(f) for t, f in FORMATS.items()}
    assert names["Q4_K"] == "q4_K" and names["Q6_K"] == "q6_K" and names["MXFP4"] == "mxfp4"
    assert names["F16"] == "f16" and names["Q8_0"] == "q8_0"
    # ggml's names in ggml's case: ggml_quant holds every type's name, upper-cased, to
    # libggml-base's ggml_type_name.
    assert ggml_quant.available()
    assert all(n.upper() == t for t, n in names.items()) and set(FORMATS) <= set(ggml_quant.TYPES)


def test_ggml_environment(tmp_path, monkeypatch):
    """ggml runs on vkq's device (whatever the caller's GGML_VK_VISIBLE_DEVICES)
    and finds its libraries beside the binary or in ../lib, as ggml's build
    tree and the GPU kit's unpacked tarball keep them."""
    from vkq.ggml_perf import GgmlPerf

    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other")
    env = GgmlPerf(tmp_path / "ggml" / "bin" / "test-backend-ops", 2, "GPU").env()
    assert env["GGML_VK_VISIBLE_DEVICES"] == "2"
    assert env["LD_LIBRARY_PATH"].split(":") == [str(tmp_path / "ggml" / "bin"), str(tmp_path / "ggml" / "lib"),
                                                 "/opt/other"]


# -- the report on this device ----------------------------------------------------------

@pytest.fixture
def small_report(monkeypatch):
    """The report's machinery at test sizes: a small rotation pass, the tiny
    llama preset for `vkq bench`, ggml's shape set to SMALL (so a fake ggml
    can answer for it)."""
    monkeypatch.setattr(tune, "rotation", lambda sizes, max_copies=None:
                        timing.rotation(sizes, SMALL_ROTATION, max_copies))
    monkeypatch.setattr(report, "BENCH_MODEL", "tiny-llama:Q4_0")
    monkeypatch.setattr(report, "SHAPE", SMALL)


def fake_ggml(tmp_path: Path, device: str, rows: int, k: int) -> Path:
    """A stand-in for test-backend-ops: the captured lavapipe output, its
    shape made (rows, k) and its device `device`; `not supported` for q4_1."""
    text = (CAPTURED / "mul_mat_q4_0_lavapipe.txt").read_text()
    text = text.replace("m=4096", f"m={rows}").replace("k=14336", f"k={k}").replace(LAVAPIPE, device)
    lines = text.splitlines()
    cases = [line for line in lines if "MUL_MAT(" in line]
    cases.append(cases[0].split(":")[0].replace("q4_0", "q4_1") + ": not supported")
    header = [line for line in lines if "MUL_MAT(" not in line]
    data = tmp_path / "perf.txt"
    data.write_text("\n".join(header[:6] + cases + header[6:]) + "\n")
    probe = tmp_path / "probe.txt"
    probe.write_text("\n".join(header) + "\n")
    script = tmp_path / "test-backend-ops"
    script.write_text(f"#!/bin/sh\nif [ \"$7\" = '^$' ]; then cat {probe}; else cat {data}; fi\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def check_schema(r: dict, types: list[str]) -> None:
    assert r["schema"] == report.SCHEMA and r["vkq"] == vkq.__version__
    assert r["shape"] == list(SMALL) and r["ncols"] == [1, 4]
    dev = r["device"]
    assert dev["name"] and dev["membw_gbps"] > 0 and dev["summary"][0].startswith("device ")
    assert [c["case"] for c in r["calls"]] == ["submit floor", "Backend.matvec dmmv", "Backend.matvec mmvq"]
    assert all(c["seconds"] > 0 for c in r["calls"])
    rows = r["matvec"]
    expect = {(t, p, n, s) for t in types for p in FORMATS[t].paths for n in (1, 4) for s in report.SIZES}
    assert {(x["type"], x["path"], x["n"], x["size"]) for x in rows} == expect and len(rows) == len(expect)
    for x in rows:
        assert x["seconds"] > 0 and x["spread"] >= 0
        nbytes = FORMATS[x["type"]].row_bytes(SMALL[1]) * SMALL[0]
        assert x["gbps"] == pytest.approx(nbytes / x["seconds"] / 1e9)
        assert x["bw_pct"] == pytest.approx(100 * x["gbps"] / dev["membw_gbps"])
        assert x["copies"] == 1 if x["size"] == "one" else x["copies"] * nbytes >= SMALL_ROTATION
    for t in types:  # exactly one path is the dispatcher's choice per type, size and n
        for n in (1, 4):
            for s in report.SIZES:
                assert sum(x["auto"] for x in rows if (x["type"], x["n"], x["size"]) == (t, n, s)) == 1
    b = r["bench"]
    assert b["model"] == "tiny-llama:Q4_0" and b["avg_ts"] > 0 and b["kernel_avg_ts"] > 0
    assert b["wall_over_kernel"] == pytest.approx(b["avg_ts"] / b["kernel_avg_ts"])
    json.dumps(r)  # plain data


def test_report_json_and_markdown(small_report, tmp_path, capsys):
    """The whole report through the CLI (types Q4_0 and F16, a fake ggml that
    answers with real captured output); then its markdown."""
    from vkq.backend import Backend

    name = Backend().device_info.name
    ggml = fake_ggml(tmp_path, name, *SMALL)
    assert main(["report", "--quick", "--types", "q4_0,F16,Q4_1", "--ggml", str(ggml), "-o", "json"]) == 0
    out = capsys.readouterr()
    r = json.loads(out.out)
    check_schema(r, ["Q4_0", "F16", "Q4_1"])
    assert r["quick"] and r["generate"] is None and set(r["not_measured"]) == {"generate"}
    rows = {(x["type"], x["n"]): x for x in r["ggml"]["rows"]}
    assert set(rows) == {(t, n) for t in ("Q4_0", "F16", "Q4_1") for n in (1, 4)}
    assert rows["Q4_0", 1]["ggml_seconds"] == pytest.approx(62149.17e-6)
    assert rows["Q4_0", 4]["ggml_runs"] == 213
    assert rows["Q4_0", 1]["ggml_over_vkq"] == pytest.approx(62149.17e-6 / rows["Q4_0", 1]["vkq_seconds"])
    assert rows["Q4_1", 1]["ggml_status"] == "not supported" and rows["Q4_1", 1]["ggml_over_vkq"] is None
    assert rows["F16", 4]["ggml_status"] == "no such case"
    mine = next(x for x in r["matvec"] if (x["type"], x["n"], x["size"], x["auto"]) == ("Q4_0", 1, "one", True))
    assert rows["Q4_0", 1]["vkq_seconds"] == mine["seconds"] and rows["Q4_0", 1]["vkq_path"] == mine["path"]
    assert "vkq report:" in out.err  # the progress, on stderr

    md = report.render_md(r)
    for heading in ("# vkq report: ", "## Device", "## What a call costs", "## Mat-vec kernels, 64 x 512",
                    "## Model: vkq bench", "## Model: vkq generate", "## ggml-vulkan side by side"):
        assert heading in md
    assert "Not measured: no GGUF model given" in md
    assert re.search(r"\| Q4_0 \| +1 \| +62149 \|", md)
    assert f"`vkq report --quick --types Q4_0,F16,Q4_1 --ggml {ggml}`" in md
    assert re.search(r"\| Q4_1 \| +1 \| +not supported \|", md)
    tables = [line for line in md.splitlines() if line.startswith("| Q4_0 | mmvq")]
    assert len(tables) == 2  # one matrix, and the rotation


def test_report_generate_on_a_gguf(small_report, monkeypatch):
    """vkq generate's figures on a real model; and vkq bench's model, which
    this host is made to lack the memory for, is reported as not measured."""
    path = smollm2_or_skip()
    from vkq.backend import Backend

    def no_room(model, device_type):
        raise ValueError(f"{model.name} needs about 9.9 GiB of host memory")

    monkeypatch.setattr(report, "check_host_memory", no_room)
    r = report.measure(Backend(), types=["Q8_0"], quick=True, model=path, shape=SMALL, progress=False)
    g = r["generate"]
    assert g["model"] == path.name and g["arch"] == "llama" and g["tokens"] == report.QUICK.gen_tokens
    assert g["tokens_per_second"] > 0 and g["submits_per_token"] == 1  # the graph engine: one submit per token
    assert r["bench"] is None and set(r["not_measured"]) == {"ggml", "bench"}
    md = report.render_md(r)
    assert f"| {path.name} | engine graph" in md
    assert "Not measured: tiny-llama:Q4_0 needs about 9.9 GiB of host memory." in md


# -- refusals: one line, exit status 2, before anything is measured ------------------------

@pytest.fixture
def nothing_measured(monkeypatch):
    """Fails the test if the report starts measuring."""
    def measured(*args, **kwargs):
        raise AssertionError("the report measured before refusing its input")
    monkeypatch.setattr(report, "memory_bandwidth", measured)


def test_no_device():
    missing = "/nonexistent/vkq-test-icd.json"
    r = run_vkq("report", "--quick", env={"VK_ICD_FILENAMES": missing, "VK_DRIVER_FILES": missing})
    assert_user_error(r.returncode, r.stderr, "Vulkan")


@pytest.mark.parametrize("what", ["missing", "directory", "not executable"])
def test_bad_ggml_path(tmp_path, capsys, nothing_measured, what):
    path = tmp_path / "test-backend-ops"
    if what == "directory":
        path.mkdir()
    elif what == "not executable":
        path.write_text("#!/bin/sh\n")
    assert main(["report", "--quick", "--ggml", str(path)]) == 2
    assert_user_error(2, capsys.readouterr().err, "--ggml", "no executable file at", str(path))


@pytest.mark.parametrize("script, needle", [
    ("echo hello", "is not a working test-backend-ops"),
    ("echo 'error while loading shared libraries: libggml.so.0' >&2; exit 127", "exit status 127"),
], ids=["another-program", "libraries-missing"])
def test_not_test_backend_ops(tmp_path, capsys, nothing_measured, script, needle):
    path = tmp_path / "test-backend-ops"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    assert main(["report", "--quick", "--ggml", str(path)]) == 2
    assert_user_error(2, capsys.readouterr().err, "--ggml", needle)


def test_ggml_without_the_vulkan_device(tmp_path, capsys, nothing_measured):
    path = tmp_path / "test-backend-ops"
    path.write_text(f"#!/bin/sh\ncat {CAPTURED / 'no_vulkan_device.txt'}\n")
    path.chmod(0o755)
    assert main(["report", "--quick", "--ggml", str(path)]) == 2
    assert_user_error(2, capsys.readouterr().err, "ggml sees no Vulkan device Vulkan0", "GGML_VK_VISIBLE_DEVICES")


def test_ggml_on_another_device(tmp_path, capsys, nothing_measured):
    ggml = fake_ggml(tmp_path, "Some Other GPU", *report.SHAPE)
    assert main(["report", "--quick", "--ggml", str(ggml)]) == 2
    assert_user_error(2, capsys.readouterr().err, "'Some Other GPU'", "GGML_VK_VISIBLE_DEVICES=0")


def test_model_of_another_architecture(tmp_path, capsys, nothing_measured):
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    finish_gguf(w, path)
    assert main(["report", "--quick", "--model", str(path)]) == 2
    assert_user_error(2, capsys.readouterr().err, "architecture 'mamba' is not supported")


@pytest.mark.parametrize("argv, needle", [
    (["--types", "Q9_9"], "Q9_9"),
    (["--types", ","], "no block type given"),
    (["--model", "/nonexistent/model.gguf"], "no GGUF file at /nonexistent/model.gguf"),
])
def test_bad_arguments(capsys, nothing_measured, argv, needle):
    assert main(["report", "--quick", *argv]) == 2
    assert_user_error(2, capsys.readouterr().err, needle)
