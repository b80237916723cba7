"""What the wheel holds cannot drift from the tree: every package under vkq/
and every data file of one are part of it by pyproject.toml's rules (found,
not listed), and vkq's kp requirement is the level the patch series builds
(a kp short of only its later patches keeping the rest).

(tools/smoke_installed.sh, run by CI, builds the sdist and the wheel and runs
every command from the installed wheel.)"""
from __future__ import annotations

import os
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from vkq.device.runtime import REQUIRED_KP_PATCH

ROOT = Path(__file__).resolve().parent.parent
VKQ = ROOT / "vkq"
DOCS = {"README.md"}  # documentation beside the code, not needed at run time


@pytest.fixture(scope="module")
def setuptools_config():
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cwd = os.getcwd()
        os.chdir(ROOT)  # packages.find searches the working directory (setuptools 65)
        try:
            return pyprojecttoml.read_configuration(ROOT / "pyproject.toml", expand=True)["tool"]["setuptools"]
        finally:
            os.chdir(cwd)


def tree_files():
    for p in VKQ.rglob("*"):
        if p.is_file() and "__pycache__" not in p.parts:
            yield p


def test_every_python_package_is_in_the_wheel(setuptools_config):
    packages = set(setuptools_config["packages"])
    dirs = {p.parent for p in tree_files() if p.suffix == ".py"}
    want = {".".join(d.relative_to(ROOT).parts) for d in dirs}
    assert "vkq.llama" in want
    assert want <= packages, sorted(want - packages)
    for d in dirs:  # a directory of modules without __init__.py would be a namespace package
        assert (d / "__init__.py").exists(), d


def test_every_data_file_is_in_the_wheel(setuptools_config):
    rules = setuptools_config["package-data"]
    data = [p for p in tree_files() if p.suffix not in (".py", ".pyc") and p.name not in DOCS]
    assert any(p.parent.name == "tables" for p in data)
    missing = []
    for p in data:
        rel = p.relative_to(ROOT)
        # package-data globs are relative to the package that holds them, an
        # enclosing package with a subpath, or any package ("" / "*")
        ok = False
        for depth in range(1, len(rel.parts)):
            pkg, sub = ".".join(rel.parts[:depth]), "/".join(rel.parts[depth:])
            globs = rules.get(pkg, []) + rules.get("", []) + rules.get("*", [])
            ok = ok or any(fnmatch(sub, g) for g in globs)
        if not ok:
            missing.append(str(rel))
    assert not missing, f"not matched by pyproject.toml's package-data: {missing}"


def test_compiled_shaders_are_package_data(setuptools_config):
    assert any(fnmatch("spirv/x.spv", g) for g in setuptools_config["package-data"]["vkq"])


def test_kp_requirement_is_the_level_the_series_builds():
    """One numbering: the patches are 0001, 0002, ... with no gap, each says
    "vkq patch N/LAST", and the level kp reports (and vkq needs) is the
    number of the last."""
    series = sorted((ROOT / "tools" / "kompute").glob("*.patch"))
    assert series, "no kp patch series"
    numbers = [int(p.name[:4]) for p in series]
    assert numbers == list(range(1, len(series) + 1)), [p.name for p in series]
    for n, p in zip(numbers, series):
        assert p.read_text().startswith(f"vkq patch {n}/{len(series)} for kp 0.9.0: "), p.name
    levels = [int(m) for p in series for m in re.findall(r'^\+.*VKQ_PATCH_LEVEL"\) = (\d+);', p.read_text(), re.M)]
    assert levels == [REQUIRED_KP_PATCH] == [len(series)], (levels, REQUIRED_KP_PATCH)
    install = (ROOT / "tools" / "install_kompute.sh").read_text()
    assert "REQUIRED_KP_PATCH" in install  # its check reads vkq/device/runtime.py, no number of its own
    read = re.search(r'REQUIRED_KP_PATCH = .*"\$root/([^"]+)"', install).group(1)
    assert (ROOT / read).is_file() and "\nREQUIRED_KP_PATCH = " in (ROOT / read).read_text(), read
    assert not re.search(r"VKQ_PATCH_LEVEL\s*>=?\s*\d", install)


def test_a_kp_short_of_the_later_patches_keeps_the_core(monkeypatch):
    """A kp from CORE_KP_PATCH on but short of REQUIRED_KP_PATCH keeps what
    every graph needs (barrier, texel bindings, staging release), warned once
    per process naming the missing patches; below CORE_KP_PATCH those are refused."""
    import warnings

    import kp

    from vkq.device import runtime

    runtime._warn_once.cache_clear()
    monkeypatch.setattr(kp, "VKQ_PATCH_LEVEL", REQUIRED_KP_PATCH - 1, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = runtime.Device(), runtime.Device()
    assert first.patched_kp and second.patched_kp and first.compute_barrier() is not None
    said = [str(w.message) for w in caught if "vkq needs" in str(w.message)]
    assert len(said) == 1 and f"what patch {REQUIRED_KP_PATCH:04d} adds is not offered" in said[0], said
    monkeypatch.setattr(kp, "VKQ_PATCH_LEVEL", runtime.CORE_KP_PATCH - 1)
    with pytest.warns(UserWarning, match="the int8 path and texel bindings are refused"):
        old = runtime.Device()
    assert not old.patched_kp
    runtime._warn_once.cache_clear()
