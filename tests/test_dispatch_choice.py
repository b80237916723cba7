"""The dispatcher's choice order, level by level, and the tuning file's life:
explicit path > environment > this device's tuning > vendor table > limits."""
import json

import numpy as np
import pytest

import vkq
import vkq.dispatch.config
from vkq.blocks.formats import FORMATS
from vkq.device.caps import DeviceCaps
from vkq.dispatch import tuning_store
from vkq.dispatch.choose import Dispatcher
from vkq.dispatch.classify import DeviceClass

LAVAPIPE_CLASS = DeviceClass("software", "lavapipe", "mesa")
CAPS = DeviceCaps(vendor="mesa", device_type="cpu", subgroup_size=8, subgroup_arithmetic=True, int_dot=True,
                  max_shared_memory=32768, max_workgroup_invocations=1024)
TUNED = {"Q4_0": {"best": "dmmv", "k_min": 4096,
                  "dmmv": {"wg_size": 16, "rows_per_wg": 2, "chunks_per_thread": 4, "reduction": "shared", "split_k": True},
                  "mmvq": {"wg_size": 32, "rows_per_wg": 4, "chunks_per_thread": 1, "reduction": "subgroup", "split_k": False}}}


def choose(qtype="Q4_0", path=None, caps=CAPS, tuned=None, k=4096, ncols=1, activations="q8_1"):
    return Dispatcher(caps, LAVAPIPE_CLASS, tuned or {}).choose(FORMATS[qtype], 4096, k, ncols, path, activations)


def test_table_level():
    cfg = choose()
    # lavapipe's measured entry for Q4_0 (vkq/dispatch/tables/software.json)
    assert (cfg.path, cfg.wg_size, cfg.rows_per_wg, cfg.chunks_per_thread, cfg.split_k) == ("mmvq", 8, 16, 8, False)
    assert (cfg.weights_binding, cfg.x_binding) == ("texel", "texel")
    assert "software.json" in cfg.source


def test_tuned_level_beats_table():
    cfg = choose(tuned=TUNED)
    assert (cfg.path, cfg.wg_size, cfg.rows_per_wg, cfg.chunks_per_thread, cfg.subgroup) == ("dmmv", 16, 2, 4, False)
    assert "tuned" in cfg.source


def test_tuned_parameters_of_the_forced_path():
    cfg = choose(tuned=TUNED, path="mmvq")
    assert (cfg.path, cfg.wg_size, cfg.rows_per_wg, cfg.split_k) == ("mmvq", 32, 4, False)


def test_tuned_int8_parameters_are_per_activations():
    """q8_1's tuned parameters never serve q8_1x2 (twice the dot products):
    without a q8_1x2 entry (a file from before it was tuned) the path stays
    the tuned one and the parameters are the table's for q8_1x2."""
    tuned = {"Q8_0": {"best": "mmvq", "k_min": 4096, "dmmv": TUNED["Q4_0"]["dmmv"], "mmvq": TUNED["Q4_0"]["mmvq"]}}
    table_x2 = choose("Q8_0", path="mmvq", activations="q8_1x2")
    cfg = choose("Q8_0", tuned=tuned, activations="q8_1x2")
    assert cfg.path == "mmvq" and cfg.params() == table_x2.params() != choose("Q8_0", tuned=tuned).params()
    assert "vkq tune; parameters (none tuned for q8_1x2) from table" in cfg.source
    x2 = {**TUNED["Q4_0"]["mmvq"], "rows_per_wg": 8}
    cfg = choose("Q8_0", tuned={"Q8_0": {**tuned["Q8_0"], "mmvq_q8_1x2": x2}}, activations="q8_1x2")
    assert (cfg.rows_per_wg, cfg.wg_size, "tuned" in cfg.source) == (8, 32, True)
    assert choose("Q8_0", tuned=tuned, activations="q8_1x2", path="dmmv").params() == choose(
        "Q8_0", tuned=tuned, path="dmmv").params()  # the dequantize path reads float x either way


def test_tuned_entry_only_from_its_smallest_k():
    """What won at K >= k_min need not win at a much smaller K: there the
    table's rules (which are per K) decide. Several columns keep the tuned
    one-column summation order (batch invariance), with the table's rows."""
    assert "tuned" in choose(tuned=TUNED, k=4096).source
    assert "tuned" in choose(tuned=TUNED, k=14336).source
    cfg = choose(tuned=TUNED, k=576)
    assert "tuned" not in cfg.source and "software.json" in cfg.source
    one, two = choose(tuned=TUNED, k=4096), choose(tuned=TUNED, k=4096, ncols=2)
    assert two.summation == one.summation and "summation order, kept at 2 columns" in two.source


def test_env_beats_tuned(monkeypatch):
    monkeypatch.setenv("VKQ_PATH", "mmvq")
    cfg = choose(tuned=TUNED)
    assert cfg.path == "mmvq" and "VKQ_PATH" in cfg.source


def test_argument_beats_env(monkeypatch):
    monkeypatch.setenv("VKQ_PATH", "mmvq")
    assert choose(path="dmmv").path == "dmmv"


def test_disable_int_dot_env(monkeypatch):
    assert choose(path="mmvq").int_dot
    monkeypatch.setenv("VKQ_DISABLE_INT_DOT", "1")
    cfg = choose(path="mmvq")
    assert cfg.path == "mmvq" and not cfg.int_dot


def test_limits_without_subgroup_arithmetic_or_int_dot():
    caps = DeviceCaps("mesa", "cpu", 8, False, False, 32768, 1024)
    cfg = choose(path="mmvq", caps=caps, tuned={**TUNED, "Q4_0": {**TUNED["Q4_0"], "best": "mmvq"}})
    assert not cfg.subgroup and not cfg.int_dot


def test_limits_shared_memory_and_workgroup():
    caps = DeviceCaps("x", "discrete-gpu", 32, True, True, 1024, 64)
    tuned = {"Q4_0": {"best": "dmmv", "k_min": 32,
                      "dmmv": {"wg_size": 256, "rows_per_wg": 8, "chunks_per_thread": 8, "reduction": "shared"}}}
    cfg = choose(caps=caps, tuned=tuned, k=96, ncols=1)
    assert cfg.wg_size == 64
    assert cfg.wg_size * cfg.rows_per_wg * 4 <= 1024
    assert 3 % cfg.chunks_per_thread == 0  # K=96: three chunks per row


def test_f16_never_gets_mmvq():
    assert choose("F16").path == "dmmv"
    with pytest.raises(ValueError, match="no int8"):
        choose("F16", path="mmvq")


# -- the tuning file ---------------------------------------------------------

@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("VKQ_TUNING_DIR", str(tmp_path))
    return tmp_path


def test_save_load_roundtrip(backend, tuning_dir):
    info = backend.device_info
    path = tuning_store.save(info, TUNED)
    assert path.parent == tuning_dir and not list(tuning_dir.glob("*.tmp"))
    assert tuning_store.load(info) == TUNED


@pytest.mark.parametrize("content", ["{not json", json.dumps([1, 2]),
                                     json.dumps({"schema": 99, "entries": {}}),
                                     "TUNED_WRONG_DEVICE", "TUNED_BAD_ENTRY"])
def test_bad_tuning_file_warns_and_falls_back(backend, tuning_dir, content):
    info = backend.device_info
    if content == "TUNED_WRONG_DEVICE":
        content = json.dumps({"schema": tuning_store.SCHEMA, "device": {"name": "other"}, "entries": TUNED})
    elif content == "TUNED_BAD_ENTRY":
        bad = {"Q4_0": {"best": "dmmv", "k_min": 4096, "dmmv": {"wg_size": 3}}}
        content = json.dumps({"schema": tuning_store.SCHEMA, "device": tuning_store.device_key(info), "entries": bad})
    tuning_store.tuning_path(info).parent.mkdir(parents=True, exist_ok=True)
    tuning_store.tuning_path(info).write_text(content)
    with pytest.warns(UserWarning, match="ignoring"):
        assert tuning_store.load(info) == {}
    with pytest.warns(UserWarning):
        fresh = vkq.Backend()
        cfg = fresh.pipeline(fresh.upload("Q4_0", (8, 64), bytes(8 * 36)))
    assert "table" in cfg.source


def test_tuned_entry_used_on_next_run(backend, tuning_dir):
    """`vkq tune` on one type, then a new Backend picks the tuned entry up."""
    from vkq.commands import tune

    assert tune.run(["Q8_0"], quick=True, progress=False, shapes=[(64, 256)]) == 0
    entries = tuning_store.load(backend.device_info)
    assert set(entries) == {"Q8_0"} and entries["Q8_0"]["best"] in ("dmmv", "mmvq")
    fresh = vkq.Backend()
    w = fresh.upload("Q8_0", (64, 256), np.zeros((64, 8 * 34), np.uint8))
    cfg = fresh.pipeline(w)
    assert "tuned" in cfg.source
    best = entries["Q8_0"][entries["Q8_0"]["best"]]
    assert (cfg.path, cfg.wg_size, cfg.rows_per_wg) == (entries["Q8_0"]["best"], best["wg_size"], best["rows_per_wg"])
    assert (cfg.weights_binding, cfg.x_binding) == (best["weights_binding"], best["x_binding"])
    # the int8 path was tuned for each activation format; q8_1x2 calls get theirs
    assert set(entries["Q8_0"]["gbps"]) == {"dmmv", "mmvq", "mmvq_q8_1x2"}
    x2 = fresh.pipeline(w, path="mmvq", activations="q8_1x2")
    assert "tuned" in x2.source and x2.x_planes == 2
    assert {k: v for k, v in x2.params().items() if k != "path"} == entries["Q8_0"]["mmvq_q8_1x2"]
    tune.reset()
    assert tuning_store.load(backend.device_info) == {}


def test_backend_choice_follows_the_activations(backend, tuning_dir):
    """The int8 path's activations reach the table (lavapipe's Q8_0 rules by
    activations; its q8_1x2 calls get the dequantize path unless they name
    the int8 one), and each choice is remembered under its own activations."""
    if backend.dispatcher.device_class.arch != "lavapipe":
        pytest.skip("lavapipe's table")
    w = backend.upload("Q8_0", (64, 4096), np.zeros((64, 128 * 34), np.uint8))
    one, two = backend.pipeline(w, activations="q8_1"), backend.pipeline(w, path="mmvq", activations="q8_1x2")
    assert (one.path, one.rows_per_wg, one.x_planes) == ("mmvq", 4, 1)
    assert (two.path, two.rows_per_wg, two.x_planes) == ("mmvq", 16, 2)
    assert backend.pipeline(w, activations="q8_1x2").path == "dmmv"
    assert backend.pipeline(w, activations="q8_1") == one


# -- VKQ_PATH where a type lacks the path; tuning files of any shape ---------

def test_env_mmvq_keeps_dmmv_for_plain_types(backend, monkeypatch, capsys):
    """VKQ_PATH=mmvq applies where the type has the int8 path; F16/F32 keep
    dmmv (named in source), `vkq info` works; an explicit path= still refuses."""
    from vkq.commands import cli

    monkeypatch.setenv("VKQ_PATH", "mmvq")
    cfg = choose("F16")
    assert cfg.path == "dmmv" and "VKQ_PATH=mmvq does not apply: F16 has no int8 path" in cfg.source
    assert choose("Q4_0").path == "mmvq"
    w = backend.upload("F32", (4, 32), np.ones((4, 32), np.float32))
    np.testing.assert_array_equal(backend.matvec(w, np.ones(32, np.float32)), np.full(4, 32.0))
    with pytest.raises(ValueError, match="F32 has no int8"):
        backend.matvec(w, np.ones(32, np.float32), path="mmvq")
    assert cli.main(["info", "F16"]) == 0
    assert "    F16      dmmv" in capsys.readouterr().out


def _device_file(info, entries) -> str:
    return json.dumps({"schema": tuning_store.SCHEMA, "device": tuning_store.device_key(info), "entries": entries})


def dmmv_with(**changes) -> dict:
    """TUNED with its Q4_0 dmmv parameters changed."""
    return {"Q4_0": {**TUNED["Q4_0"], "dmmv": {**TUNED["Q4_0"]["dmmv"], **changes}}}


MALFORMED = {
    "entries a list": [1, 2],
    "entries a string": "Q4_0",
    "type entry a string": {"Q4_0": "fast"},
    "type entry a list": {"Q4_0": ["dmmv"]},
    "unknown type": {"Q9_9": TUNED["Q4_0"]},
    "best a number": {"Q4_0": {**TUNED["Q4_0"], "best": 5}},
    "best unhashable": {"Q4_0": {**TUNED["Q4_0"], "best": ["dmmv"]}},
    "mmvq for F16": {"F16": {"best": "mmvq", "k_min": 4096, "mmvq": TUNED["Q4_0"]["mmvq"]}},
    "no k_min": {"Q4_0": {k: v for k, v in TUNED["Q4_0"].items() if k != "k_min"}},
    "k_min 0": {"Q4_0": {**TUNED["Q4_0"], "k_min": 0}},
    "k_min a string": {"Q4_0": {**TUNED["Q4_0"], "k_min": "4096"}},
    "mmvq q8_1x2 for F16": {"F16": {"best": "dmmv", "k_min": 4096, "dmmv": TUNED["Q4_0"]["dmmv"],
                                    "mmvq_q8_1x2": TUNED["Q4_0"]["mmvq"]}},
    "q8_1x2 rows a string": {"Q4_0": {**TUNED["Q4_0"],
                                      "mmvq_q8_1x2": {**TUNED["Q4_0"]["mmvq"], "rows_per_wg": "4"}}},
    "params a list": {"Q4_0": {**TUNED["Q4_0"], "dmmv": [16, 2]}},
    "wg_size a string": dmmv_with(wg_size="16"),
    "wg_size a bool": dmmv_with(wg_size=True),
    "rows_per_wg 1000000": dmmv_with(rows_per_wg=1000000),
    "rows_per_wg a float": dmmv_with(rows_per_wg=2.0),
    "split_k a string": dmmv_with(split_k="no"),
    "reduction a dict": dmmv_with(reduction={}),
    "binding a list": dmmv_with(x_binding=["texel"]),
    "unknown parameter": dmmv_with(speed=9),
    "too big for the device": dmmv_with(wg_size=1024, rows_per_wg=16),
    "best variant null": {"Q4_0": {"best": "dmmv", "k_min": 1, "dmmv": None}},
    "other variant null": {"Q4_0": {**TUNED["Q4_0"], "mmvq_q8_1x2": None}},
    # the figures `vkq tune --show` prints
    "gbps a number": {"Q4_0": {**TUNED["Q4_0"], "gbps": 5}},
    "gbps zeros": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"dmmv": [0, 0]}}},
    "gbps empty": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"dmmv": []}}},
    "gbps nulls": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"dmmv": [None, None]}}},
    "gbps a string": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"dmmv": "fast"}}},
    "gbps inf": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"dmmv": [1.0, float("inf")]}}},
    "gbps of no parameters": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"mmvq_q8_1x2": [1.0, 2.0]}}},
    "spread a string": {"Q4_0": {**TUNED["Q4_0"], "gbps": {"dmmv": [1.0, 2.0]}, "spread": {"dmmv": "low"}}},
    "spread a list": {"Q4_0": {**TUNED["Q4_0"], "spread": [0.1]}},
}


@pytest.mark.parametrize("what", [*MALFORMED, "top level a list", "deeply nested", "not UTF-8"])
def test_malformed_tuning_file_is_ignored(backend, tuning_dir, capsys, what):
    """Warned about and ignored by every command that reads it: Backend (its
    dispatcher), `vkq info`, `vkq tune --show`."""
    from vkq.commands import cli

    info = backend.device_info
    path = tuning_store.tuning_path(info)
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "top level a list":
        path.write_text(json.dumps([_device_file(info, TUNED)]))
    elif what == "deeply nested":
        path.write_text("[" * 100000 + "]" * 100000)
    elif what == "not UTF-8":
        path.write_bytes(b"\xff\xfe{\x00")
    else:
        path.write_text(_device_file(info, MALFORMED[what]))
    with pytest.warns(UserWarning, match="vkq: ignoring"):
        fresh = vkq.Backend()
        cfg = fresh.pipeline(fresh.upload("Q4_0", (8, 64), bytes(8 * 36)))
    assert "table" in cfg.source
    with pytest.warns(UserWarning, match="vkq: ignoring"):
        assert cli.main(["info"]) == 0
    if what == "too big for the device":  # well-formed: `vkq tune --show` lists it as it is
        assert cli.main(["tune", "--show"]) == 0
    else:
        with pytest.warns(UserWarning, match="vkq: ignoring"):
            assert cli.main(["tune", "--show"]) == 0
    capsys.readouterr()


def test_provenance_is_data_not_part_of_the_config():
    """What a choice rests on is a field (vkq info reads it, no parsing of
    the source text), and neither it nor the source makes two configs of the
    same parameters differ (a cache of pipelines keys on the config)."""
    tuned = choose(tuned=TUNED)
    table = choose()
    assert tuned.evidence == {"tuned"}
    assert table.evidence and table.evidence <= {"ggml", "measured", "guess"}
    same = vkq.dispatch.config.PipelineConfig.from_params(tuned.params(), tuned.path, source="elsewhere")
    assert same == tuned and hash(same) == hash(tuned) and same.evidence == frozenset()
