"""`vkq tune`'s file under concurrent use and a bad VKQ_TUNING_DIR.

Two `vkq tune` processes on one device each save the types they finish; the
file must end with the types of both (merged under a lock, each write
atomic), and a reader at any moment sees a whole file. A VKQ_TUNING_DIR
that cannot hold the file is refused before anything is measured, naming
the variable.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from conftest import child_env

from vkq.commands import cli, tune
from vkq.device.device_info import DeviceInfo
from vkq.dispatch import tuning_store

ROOT = Path(__file__).resolve().parent.parent
LAVAPIPE = ROOT / "tests" / "devices" / "lavapipe.json"
PARAMS = {"wg_size": 16, "rows_per_wg": 2, "chunks_per_thread": 1, "reduction": "shared", "split_k": True}


def fake_entry(gbps: float = 1.0) -> dict:
    """What tune_type returns for a type measured on the dequantize path alone."""
    return {"best": "dmmv", "k_min": 256, "shapes": [[64, 256]], "dmmv": dict(PARAMS),
            "gbps": {"dmmv": [gbps, gbps]}, "spread": {"dmmv": 0.0}}


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path / "tuning"))
    return tmp_path / "tuning"


def test_types_another_process_saved_meanwhile_are_kept(backend, tuning_dir, monkeypatch, capsys):
    """While this run measures Q4_0, another `vkq tune` saves Q8_0: the file
    keeps both (it used to keep only the last writer's types)."""
    info = backend.device_info

    def measure(backend, qtype, shapes, quick, on_group=None, notes=None):
        tuning_store.save(info, {"Q8_0": fake_entry(2.0)})  # the other process, meanwhile
        return fake_entry()

    monkeypatch.setattr(tune, "tune_type", measure)
    assert tune.run(["Q4_0"], progress=False) == 0
    assert set(tuning_store.load(info)) == {"Q4_0", "Q8_0"}
    out = capsys.readouterr().out
    assert "saved" in out and "| Q4_0 " in out


@pytest.mark.parametrize("gbps", [5, [0, 0], [], [None, None], "fast"], ids=repr)
def test_hand_edited_figures_are_warned_about_and_ignored(backend, tuning_dir, monkeypatch, capsys, gbps):
    """`vkq tune --types` on a type whose saved GB/s figures were edited:
    the file is warned about and ignored (the type is measured again), no
    TypeError or ZeroDivisionError from the figures."""
    info = backend.device_info
    tuning_store.save(info, {"Q4_0": {**fake_entry(), "gbps": gbps if gbps == 5 else {"dmmv": gbps}}})
    measured = []
    monkeypatch.setattr(tune, "tune_type", lambda backend, qtype, *a, **k: measured.append(qtype) or fake_entry())
    with pytest.warns(UserWarning, match="vkq: ignoring invalid tuning file"):
        assert cli.main(["tune", "--types", "Q4_0", "--no-progress"]) == 0
    assert measured == ["Q4_0"] and "| Q4_0 " in capsys.readouterr().out


WRITER = """
import json, sys, time
from vkq.device.device_info import DeviceInfo
from vkq.dispatch import tuning_store
from vkq.blocks.formats import FORMATS
info = DeviceInfo.from_dict(json.loads(open(sys.argv[1]).read()))
types = list(FORMATS)[int(sys.argv[2])::2]
entry = json.loads(sys.argv[3])
while time.time() < float(sys.argv[4]):
    pass
for t in types:
    tuning_store.save_entry(info, t, entry)
"""


def test_two_writers_at_once_keep_every_type_and_the_file_whole(tuning_dir):
    """Two processes save their halves of the block types, one by one, from
    the same moment, while this one reads the file: every read is a whole,
    valid file, and the end holds every type (without the lock, a type was
    lost in each of 4 runs: read, the other's write, own write)."""
    info = DeviceInfo.from_dict(json.loads(LAVAPIPE.read_text()))
    env = child_env()
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(LAVAPIPE), str(i), json.dumps(fake_entry()),
                               str(start)], env=env, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    reads = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn or invalid file would warn
        while any(p.poll() is None for p in procs):
            if tuning_store.tuning_path(info).exists():
                tuning_store.load(info)
                reads += 1
    for p in procs:
        assert p.wait() == 0, p.stderr.read()
    from vkq.blocks.formats import FORMATS

    assert set(tuning_store.load(info)) == set(FORMATS)
    assert reads > 0
    assert not list(tuning_dir.glob("*.tmp"))


@pytest.mark.parametrize("what", ["a file", "under a file"])
def test_tuning_dir_that_cannot_be_a_directory(tmp_path, monkeypatch, capsys, what):
    """Refused before the first type is measured, the variable named."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("VKQ_TUNING_DIR", str(blocker if what == "a file" else blocker / "tuning"))

    def measure(*args, **kwargs):
        raise AssertionError("measured before the tuning directory was checked")

    monkeypatch.setattr(tune, "tune_type", measure)
    assert cli.main(["tune", "--types", "Q4_0", "--quick", "--no-progress"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vkq tune: error:")]
    assert len(err) == 1 and "VKQ_TUNING_DIR" in err[0] and str(blocker) in err[0], err
    assert "is not a directory" in err[0] or "cannot be created" in err[0], err


def test_a_winner_inside_the_noise_keeps_the_tables_choice():
    """The final race keeps the tuned configuration only where it is clearly
    faster than the table's (2% and half the larger spread); inside the noise
    the table's is kept and the summary line says so (a choice made on a 34%
    spread was stored)."""
    from vkq.device.timing import Estimate
    from vkq.dispatch.config import PipelineConfig

    table = PipelineConfig("dmmv", False, True, 32, 16)
    tuned = PipelineConfig("dmmv", False, True, 32, 4)
    noisy, slow = Estimate(1.0, 0.34, ()), Estimate(1.1, 0.05, ())
    cfg, est, note = tune.final_choice(tuned, table, noisy, slow)
    assert cfg == table and est is slow and note == ("table's kept: the tuned one was 10.0% faster, inside the "
                                                      "noise (34% spread)")
    clear = Estimate(1.0, 0.03, ())
    assert tune.final_choice(tuned, table, clear, slow) == (tuned, clear, None)  # 10% beyond a 5% spread
    assert tune.final_choice(tuned, table, Estimate(1.2, 0.0, ()), slow) == (table, slow, None)  # slower
    assert tune.final_choice(table, table, noisy, noisy) == (table, noisy, None)
    entry = {"best": "dmmv", "gbps": {"dmmv": [9.1, 9.1]}, "spread": {"dmmv": 0.05}}
    assert tune._summary("Q4_0", entry, 3.0, {"dmmv": note}) == (
        f"Q4_0: best dmmv; 3 s\n  dmmv 9.10 GB/s (table 9.10; spread 5.0%; {note})")
