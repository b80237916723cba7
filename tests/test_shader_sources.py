"""The GLSL include files (shaders/*.glsl, shaders/blocks/*.glsl): each is
guarded against a second inclusion and includes what it uses, so that it
compiles on its own; and tools/compile_shaders.py's rebuild check sees every
file a shader includes."""
from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vkq.device.shader_variants import all_variants

ROOT = Path(__file__).resolve().parent.parent
SHADERS = ROOT / "shaders"
INCLUDES = sorted(SHADERS.glob("*.glsl")) + sorted(SHADERS.glob("blocks/*.glsl"))
INCLUDE_PARAMS = [pytest.param(p, id=str(p.relative_to(SHADERS))) for p in INCLUDES]


def load_compile_shaders():
    spec = importlib.util.spec_from_file_location("compile_shaders", ROOT / "tools" / "compile_shaders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compile_shaders = load_compile_shaders()


def guard_name(path: Path) -> str:
    """blocks/q4_0.glsl -> BLOCKS_Q4_0_GLSL: the path, so that no two files share one."""
    return re.sub(r"[/.]", "_", str(path.relative_to(SHADERS))).upper()


@pytest.mark.parametrize("path", INCLUDE_PARAMS)
def test_include_guard(path):
    """The file's code (after its header comment) is one #ifndef NAME /
    #define NAME ... #endif."""
    code = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("//")]
    name = guard_name(path)
    assert code[:2] == [f"#ifndef {name}", f"#define {name}"], path.name
    depth = 0
    for i, line in enumerate(code):
        depth += line.startswith("#if")
        depth -= line.startswith("#endif")
        assert depth > 0 or i == len(code) - 1, f"{path.name}: code after the guard's #endif (line {line!r})"
    assert code[-1] == "#endif"


def closure(variant) -> tuple[Path, ...]:
    """The files a variant reads, its top-level source first: the block files
    only through its type's decoder (compile_shaders.source_files, a
    superset, gives mul_mat_vec.comp every type's)."""
    return _closure(variant.source, getattr(variant, "qtype", None))


@functools.lru_cache(maxsize=None)
def _closure(source: str, qtype: str | None) -> tuple[Path, ...]:
    files = compile_shaders.source_files(source)
    if qtype is not None:
        decoder = set(compile_shaders.source_files(f"blocks/{qtype.lower()}.glsl"))
        files = [f for f in files if f.parent != SHADERS / "blocks" or f in decoder]
    top = SHADERS / source
    return (top, *(f for f in files if f != top))


def variant_using(path: Path):
    """The first variant that reads `path`."""
    return next(v for v in all_variants() if path in closure(v))


def includer_defines(path: Path, variant) -> list[str]:
    """The #define lines that the first include file including `path` in the
    variant's closure writes before including it (its own guard aside): a
    shared decoder's parameters, as D_ZERO_POINT for d_scales.glsl. None
    where the top-level shader includes it."""
    for f in closure(variant):
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            m = compile_shaders.INCLUDE.match(line)
            if m and (f.parent / m.group(1)).resolve() == path.resolve():
                if f.suffix != ".glsl":
                    return []
                return [x for x in lines[:i] if x.startswith("#define") and x != f"#define {guard_name(f)}"]
    raise AssertionError(f"nothing in {variant.name} includes {path}")


@pytest.mark.parametrize("path", INCLUDE_PARAMS)
def test_include_compiles_alone(path, tmp_path):
    """Each include compiles on its own, given what its top-level shader
    declares before its first #include (version, extensions, specialization
    constants, W_TEXEL_BINDING, ...), the variant's defines, and the
    parameters its includer defines: it includes every file it uses and
    relies on no include made before it."""
    glslang = shutil.which("glslangValidator")
    if glslang is None:
        pytest.skip("glslangValidator not installed (tools/install_system.sh)")
    variant = variant_using(path)
    top = (SHADERS / variant.source).read_text().splitlines()
    first_include = next(i for i, line in enumerate(top) if compile_shaders.INCLUDE.match(line))
    rel = path.relative_to(SHADERS)
    src = tmp_path / "alone.comp"
    src.write_text("\n".join(top[:first_include] + includer_defines(path, variant)
                             + [f'#include "{rel}"', "void main() {}", ""]))
    defines = [f"-D{k}={v}" for k, v in sorted(variant.defines().items())]
    res = subprocess.run([glslang, "-V", "--target-env", compile_shaders.TARGET_ENV, f"-I{SHADERS}", *defines,
                          "-o", str(tmp_path / "alone.spv"), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, f"{rel} alone, as in {variant.name}:\n{res.stdout}{res.stderr}"


def test_rebuild_check_sees_every_include():
    """Every include file is reached from a shader, each once (blocks/ reach
    common.glsl as ../common.glsl)."""
    sources = {v.source for v in all_variants()}
    reached = set()
    for source in sources:
        files = compile_shaders.source_files(source)
        assert len(files) == len({f.resolve() for f in files}), source
        reached |= set(files)
    assert reached == set(INCLUDES) | {SHADERS / s for s in sources}


def test_editing_an_include_rebuilds_its_shaders(tmp_path, monkeypatch):
    """An edit of a file included two levels down changes the digest of the
    shaders that include it, and of no other."""
    shutil.copytree(SHADERS, tmp_path / "shaders")
    monkeypatch.setattr(compile_shaders, "SHADER_DIR", tmp_path / "shaders")
    sources = sorted({v.source for v in all_variants()})

    def digests():
        compile_shaders.source_digest.cache_clear()
        return {s: compile_shaders.source_digest(s) for s in sources}

    before = digests()
    with open(tmp_path / "shaders" / "blocks" / "bitplanes.glsl", "a") as f:
        f.write("// edited\n")
    after = digests()
    compile_shaders.source_digest.cache_clear()
    assert {s for s in sources if before[s] != after[s]} == {"mul_mat_vec.comp", "mul_mm.comp", "get_rows.comp"}
