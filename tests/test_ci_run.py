""".ci/run's budgets: `make test` is held to 15 minutes on a warm machine and
allowed 20 where the caches are cold (a machine's first run, Mesa's shader
cache empty, or SPIR-V that no earlier run had compiled).

.ci/run and .ci/timed.sh run as they are, in a copy of .ci/ beside a stand-in
Makefile whose steps take no time but `make test`, which moves a stand-in
clock (`date`) on by 1000 s: past 15 minutes, within 20.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEST_SECONDS = 1000


@pytest.fixture
def ci(tmp_path):
    """run(cold=...) runs .ci/run in a stand-in checkout: (exit status, output)."""
    shutil.copytree(ROOT / ".ci", tmp_path / "repo" / ".ci")
    clock = tmp_path / "clock"
    clock.write_text("1000000\n")
    spirv = tmp_path / "cache" / "vkq" / "spirv"
    rules = {"test": f"\t@echo $$(( $$(cat {clock}) + {TEST_SECONDS} )) > {clock}",
             "setup": f"\t@if [ -n \"$$NEW_SPIRV\" ]; then mkdir -p {spirv} && touch {spirv}/new.spv; fi",
             "%": "\t@true"}  # (every other step: no time)
    (tmp_path / "repo" / "Makefile").write_text("".join(f"{t}:\n{r}\n" for t, r in rules.items()))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    date = bin_ / "date"
    date.write_text(f"#!/bin/sh\ncat {clock}\n")
    date.chmod(date.stat().st_mode | stat.S_IEXEC)

    def run(test_cache=True, mesa_cache=True, new_spirv=False):
        cache = tmp_path / "cache"
        for what, full in (("vkq/tests", test_cache), ("mesa_shader_cache", mesa_cache)):
            folder = cache / what
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            if full:
                (folder / "entry").write_text("x")
        shutil.rmtree(spirv, ignore_errors=True)
        spirv.mkdir(parents=True)
        (spirv / "old.spv").write_text("x")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VKQ_", "MESA_", "XDG_"))}
        env.update(PATH=f"{bin_}:{env['PATH']}", XDG_CACHE_HOME=str(cache), NEW_SPIRV="1" if new_spirv else "")
        r = subprocess.run(["bash", ".ci/run"], cwd=tmp_path / "repo", env=env, capture_output=True, text=True,
                           timeout=60)
        return r.returncode, r.stdout + r.stderr

    return run


def test_a_warm_machine_holds_make_test_to_15_minutes(ci):
    status, out = ci()
    assert status == 1, out
    assert "== test!: 1000 s (OVER BUDGET)" in out and "budget  15 min  OVER BUDGET" in out
    assert "== FAILED: a step marked hard took longer than its budget" in out


@pytest.mark.parametrize("cold, said", [
    (dict(test_cache=False), "is empty: a first run on this machine"),
    (dict(mesa_cache=False), "Mesa's shader cache"),
    (dict(new_spirv=True), "make setup compiled new SPIR-V"),
])
def test_cold_caches_allow_20_minutes(ci, cold, said):
    status, out = ci(**cold)
    assert status == 0, out
    assert said in out and "budget  20 min" in out and "OVER BUDGET" not in out
