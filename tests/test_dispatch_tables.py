"""Device classification and the per-vendor tuning tables (no GPU needed).

Recorded descriptors in tests/devices/ stand in for GPUs this machine does
not have; all but lavapipe.json are reconstructed (see their "_source").
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vkq.blocks.formats import FORMATS
from vkq.commands.info import evidence
from vkq.device.device_info import DeviceInfo
from vkq.device.shader_variants import MatVecVariant, spirv_path
from vkq.dispatch import tables
from vkq.dispatch.classify import DeviceClass, classify
from vkq.dispatch.tables import VENDORS, _load, class_entries, load_table, lookup, validate_table

DEVICES = Path(__file__).parent / "devices"

# Limits every Vulkan device guarantees (Vulkan spec, "Required Limits"), so
# a table entry is valid on any device of its class without clamping:
MIN_MAX_SHARED_MEMORY = 16384  # maxComputeSharedMemorySize
MIN_MAX_INVOCATIONS = 128  # maxComputeWorkGroupInvocations
MAX_NCOLS = 8  # mat-vec columns per dispatch (ggml's mul_mat_vec_max_cols)

EXPECTED_CLASS = {
    "nvidia_rtx3090": "nvidia/turing+/proprietary",
    "nvidia_rtx2060": "nvidia/turing+/proprietary",
    "nvidia_gtx1080": "nvidia/pre-turing/proprietary",
    "amd_radeon_pro_vii": "amd/gcn/mesa",
    "amd_rx6800xt": "amd/rdna2/mesa",
    "intel_arc_a770": "intel/xe/mesa",
    "intel_arc_b580": "intel/xe2/mesa",
    "intel_arc_a770_windows": "intel/xe/windows",
    "apple_m2_moltenvk": "apple/apple-silicon/moltenvk",
    "qualcomm_adreno_x1_85": "qualcomm/adreno/proprietary",
    "lavapipe": "software/lavapipe/mesa",
}


def raw(fname: str) -> dict:
    return json.loads((DEVICES / f"{fname}.json").read_text())


def cls_of(fname: str, **changes) -> DeviceClass:
    """Class of a recorded device, with some fields changed."""
    return classify(DeviceInfo.from_dict({**raw(fname), **changes}))


# --- classification -------------------------------------------------------

def test_a_device_records_as_it_is_read_back(backend):
    """How tests/devices/*.json are made (DeviceInfo.to_dict, see
    vkq/dispatch/README.md): through JSON and back, the same descriptor."""
    info = backend.device_info
    assert DeviceInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_every_recorded_device_is_listed():
    assert {p.stem for p in DEVICES.glob("*.json")} == set(EXPECTED_CLASS)


@pytest.mark.parametrize("name", sorted(EXPECTED_CLASS))
def test_classify_recorded(name):
    cls = cls_of(name)
    assert cls.key == EXPECTED_CLASS[name]
    assert len(cls.reasons) >= 3 and all(isinstance(r, str) for r in cls.reasons)


def test_turing_on_old_driver_by_name():
    # Neither cooperative matrix extension: only the name says Turing.
    exts = [e for e in raw("nvidia_rtx2060")["extensions"] if "cooperative_matrix" not in e]
    cls = cls_of("nvidia_rtx2060", extensions=exts)
    assert cls.arch == "turing+"
    assert any("name" in r for r in cls.reasons)
    for name in ("NVIDIA GeForce GTX 1660 SUPER", "Tesla T4", "NVIDIA A100-SXM4-80GB",
                 "NVIDIA GeForce RTX 3060 (NVK GA106)", "Quadro RTX 4000"):
        assert cls_of("nvidia_rtx2060", extensions=exts, name=name).arch == "turing+", name
    for name in ("NVIDIA GeForce GTX 1080 Ti", "Tesla P100-PCIE-16GB", "Quadro P4000",
                 "NVIDIA GeForce GTX 980"):
        assert cls_of("nvidia_rtx2060", extensions=exts, name=name).arch == "pre-turing", name


def test_volta_with_nv_cooperative_matrix_is_pre_turing():
    assert cls_of("nvidia_rtx2060", name="Tesla V100-PCIE-16GB").arch == "pre-turing"


def test_nvk_driver():
    assert cls_of("nvidia_rtx3090", driver_id=24, driver_name="NVK").key == "nvidia/turing+/mesa"


def test_amd_rdna_generations():
    assert cls_of("amd_rx6800xt", name="AMD Radeon RX 7900 XTX (RADV NAVI31)").arch == "rdna3"
    assert cls_of("amd_rx6800xt", name="AMD Radeon RX 5700 XT (RADV NAVI10)").arch == "rdna1"
    assert cls_of("amd_rx6800xt", name="AMD Radeon RX 9070 XT (RADV GFX1201)").arch == "rdna4"
    # AMDVLK / proprietary: marketing name only.
    amdvlk = cls_of("amd_rx6800xt", name="AMD Radeon RX 6800 XT", driver_id=2)
    assert amdvlk.key == "amd/rdna2/amdvlk"
    # Unknown name: RDNA by subgroup sizes; cooperative matrix means RDNA3+.
    assert cls_of("amd_rx6800xt", name="AMD Radeon Graphics").arch == "rdna"
    exts = raw("amd_rx6800xt")["extensions"] + ["VK_KHR_cooperative_matrix"]
    assert cls_of("amd_rx6800xt", name="AMD Radeon Graphics", extensions=exts).arch == "rdna3"


def test_intel_variants():
    b580_win = cls_of("intel_arc_b580", driver_id=5, name="Intel(R) Arc(TM) B580 Graphics")
    assert b580_win.key == "intel/xe2/windows"
    uhd = cls_of("intel_arc_a770", name="Intel(R) UHD Graphics 620 (KBL GT2)",
                 integer_dot_4x8_packed_accelerated=False)
    assert uhd.arch == "gen9-11"
    # No subgroup size range reported: fall back to the name.
    no_range = dict(subgroup_min_size=None, subgroup_max_size=None)
    assert cls_of("intel_arc_b580", **no_range).arch == "xe2"
    assert cls_of("intel_arc_a770", **no_range).arch == "xe"


def test_software_and_unknown():
    swiftshader = cls_of("lavapipe", vendor_id=0x1AE0, driver_id=10, name="SwiftShader Device (LLVM 10.0.0)")
    assert swiftshader.key == "software/swiftshader/swiftshader"
    assert cls_of("lavapipe", driver_id=None, driver_name=None).arch == "lavapipe"
    imgtec = cls_of("qualcomm_adreno_x1_85", vendor_id=0x1010, driver_id=7, name="PowerVR B-Series BXM-8-256")
    assert imgtec.key == "unknown/unknown/proprietary"
    params, desc, _ = lookup(imgtec, "Q4_0", 4096, 4096, 1)
    assert "unknown.json" in desc and params["reduction"] == "shared"


# --- tables ---------------------------------------------------------------

@pytest.mark.parametrize("vendor", VENDORS)
def test_table_validates(vendor):
    table = load_table(vendor)
    assert table["vendor"] == vendor
    assert validate_table(table) == []


def test_validate_table_finds_problems():
    bad = {
        "vendor": "nvidia",
        "extra": 1,
        "classes": {
            "nvidia/x": {
                "default": {"path": "mmvq", "wg_size": 48, "rows_per_wg": 0, "reduction": "tree", "basis": "hunch"},
                "rules": [
                    {"types": ["F16", "Q9_9"], "path": "mmvq", "basis": "measured"},
                    {"k_min": 10, "k_max": 5, "basis": "measured", "colour": "red"},
                    {"path": "dmmv", "basis": "guess"},
                ],
            },
            "amd/y": {"extends": "amd/z"},
        },
    }
    text = "\n".join(validate_table(bad))
    for expected in ("unknown key 'extra'", "wg_size 48", "rows_per_wg 0", "reduction 'tree'",
                     "basis must be", "unknown type 'Q9_9'", "mmvq for ['F16']", "k_min > k_max",
                     "unknown key 'colour'", "overrides nothing", "needs a note",
                     "key must be 'nvidia/", "missing or cyclic"):
        assert expected in text, expected


def all_classes():
    for vendor in VENDORS:
        for key in _load(vendor)["classes"]:
            yield vendor, key


def class_for_key(key: str) -> DeviceClass:
    parts = key.split("/")
    return DeviceClass(parts[0], parts[1], parts[2] if len(parts) > 2 else "unknown")


def check_params(params: dict, qtype: str, where: str) -> None:
    wg, rows = params["wg_size"], params["rows_per_wg"]
    assert wg & (wg - 1) == 0 and 1 <= wg <= MIN_MAX_INVOCATIONS, where
    # The shader's reduction buffer: float partial[rows * ncols][wg].
    assert rows * MAX_NCOLS * wg * 4 <= MIN_MAX_SHARED_MEMORY, where
    mmvq = params["path"] == "mmvq"
    for int_dot in ((False, True) if mmvq else (False,)):
        v = MatVecVariant(qtype, mmvq=mmvq, int_dot=int_dot, subgroup=params["reduction"] == "subgroup",
                          mul_mat_id=False, weights_binding=params.get("weights_binding", "storage"),
                          x_binding=params.get("x_binding", "storage"))
        assert spirv_path(v).exists(), f"{where}: {v.name}.spv missing"


@pytest.mark.parametrize("vendor,key", list(all_classes()))
def test_every_entry_names_a_compiled_variant(vendor, key):
    for where, params in class_entries(_load(vendor), key):
        for qtype in params.get("types", FORMATS):
            if params["path"] == "mmvq" and not FORMATS[qtype].has_int8_path:
                continue  # lookup falls back to dmmv; covered by the grid test below
            check_params(params, qtype, f"{where} {qtype}")


@pytest.mark.parametrize("vendor,key", list(all_classes()))
def test_lookup_grid(vendor, key):
    cls = class_for_key(key)
    for qtype in FORMATS:
        for k in (32, 2047, 2048, 4096, 4097, 14336):
            for ncols in range(1, MAX_NCOLS + 1):
                params, desc, _ = lookup(cls, qtype, 4096, k, ncols)
                assert f"class {key} " in desc
                assert set(params) == {"path", "wg_size", "rows_per_wg", "reduction", "chunks_per_thread", "split_k",
                                       "weights_binding", "x_binding", "value_lookup"}
                if not FORMATS[qtype].has_int8_path:
                    assert params["path"] == "dmmv"
                check_params(params, qtype, desc)


def path(fname: str, qtype: str, k: int, ncols: int = 1, **changes) -> str:
    return lookup(cls_of(fname, **changes), qtype, 4096, k, ncols)[0]["path"]


def test_measured_choices_nvidia():
    """Turing+ (the H100's class): the int8 path for every quantized type at
    n = 1..8 and any K, with the launch measured there (gpu-h100.md)."""
    for name in ("nvidia_rtx3090", "nvidia_rtx2060"):
        cls = cls_of(name)
        for qtype, fmt in FORMATS.items():
            if qtype.startswith("IQ"):
                continue  # not measured there: test_ggml_choices_iquants
            for k in (256, 4096, 14336):
                for ncols in range(1, MAX_NCOLS + 1):
                    params, desc, _ = lookup(cls, qtype, 4096, k, ncols)
                    want = "mmvq" if fmt.has_int8_path else "dmmv"
                    assert params["path"] == want, (name, qtype, k, ncols)
                    if want == "mmvq":
                        assert (params["wg_size"], params["rows_per_wg"], params["reduction"]) == (32, 2, "subgroup")
                        assert (params["weights_binding"], params["x_binding"]) == ("storage", "storage")
                        assert desc.endswith("default [measured]"), desc
    # An unclassified NVIDIA arch is treated as Turing+.
    assert lookup(class_for_key("nvidia/*"), "Q6_K", 4096, 4096, 1)[0]["path"] == "mmvq"


# ggml's Vulkan backend has int8 shaders for IQ1_S and IQ1_M only among the
# i-quants, and for Q2_0 only among the newest types (d99724f2); none for TQ1_0.
DEQUANTIZED_BY_GGML = ("IQ4_NL", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "NVFP4", "Q1_0", "TQ2_0")


@pytest.mark.parametrize("name", ["nvidia_gtx1080", "amd_rx6800xt", "amd_radeon_pro_vii", "intel_arc_a770",
                                  "intel_arc_b580", "intel_arc_a770_windows", "apple_m2_moltenvk"])
def test_ggml_choices_iquants(name):
    """Unmeasured on these GPUs: the types ggml has no int8 shader for take
    the dequantize path at any K and column count, and so does TQ1_0 (a
    guess: ggml has no kernel for it); IQ1 and Q2_0 follow the vendor's
    rules (on NVIDIA the int8 path always)."""
    cls = cls_of(name)
    for k in (256, 4096, 14336):
        for ncols in (1, 4):
            for qtype in DEQUANTIZED_BY_GGML:
                params, desc, bases = lookup(cls, qtype, 4096, k, ncols)
                assert params["path"] == "dmmv" and "ggml" in bases, (name, qtype, desc)
            params, desc, bases = lookup(cls, "TQ1_0", 4096, k, ncols)
            assert params["path"] == "dmmv" and "guess" in bases, (name, desc)
            if name.startswith("nvidia"):
                for qtype in ("IQ1_S", "IQ1_M", "Q2_0"):
                    params, desc, bases = lookup(cls, qtype, 4096, k, ncols)
                    assert params["path"] == "mmvq" and "ggml" in bases, (name, qtype, desc)


def test_turing_plus_iquants_measured():
    """On the GPUs the H100 stands for, every i-quant takes the int8 path
    (measured there: 2-5x the dequantize path), and so does every newest type
    (measured on an H200: 2-3x), at any K and column count."""
    cls = cls_of("nvidia_rtx3090")
    for k in (256, 4096, 14336):
        for ncols in (1, 4):
            for qtype in [t for t in FORMATS if t.startswith("IQ")] + ["NVFP4", "Q1_0", "Q2_0", "TQ1_0", "TQ2_0"]:
                params, desc, bases = lookup(cls, qtype, 4096, k, ncols)
                assert params["path"] == "mmvq" and bases == {"measured"}, (qtype, desc)


def test_ggml_choices_nvidia_pre_turing():
    # ggml: NVIDIA n==1: k<=4096 -> DMMV; k>4096 Q8_0/MXFP4 MMVQ only pre-Turing: unmeasured, kept.
    assert path("nvidia_gtx1080", "Q8_0", 14336) == "mmvq"
    assert path("nvidia_gtx1080", "Q8_0", 4096) == "dmmv"
    assert path("nvidia_gtx1080", "Q4_0", 14336) == "mmvq"
    assert path("nvidia_gtx1080", "Q2_K", 1024) == "mmvq"
    assert path("nvidia_gtx1080", "Q8_0", 4096, ncols=2) == "mmvq"
    assert path("nvidia_gtx1080", "Q6_K", 14336, ncols=2) == "dmmv"


def test_turing_plus_plain_types_measured():
    """The H100's measured launches for the plain types (vkq tune, twice):
    F16/BF16 wg 64, 4 rows, texel bindings; F32 texel bindings; the
    quantized types' dequantize path keeps the default's 2 rows (8, as once
    reasoned, was measured 1.4-2x slower)."""
    cls = cls_of("nvidia_rtx3090")
    for qtype in ("F16", "BF16"):
        params, desc, bases = lookup(cls, qtype, 4096, 14336, 1)
        assert (params["wg_size"], params["rows_per_wg"], params["weights_binding"], params["x_binding"]) == (
            64, 4, "texel", "texel") and bases == {"measured"}, desc
    params, desc, _ = lookup(cls, "F32", 4096, 14336, 1)
    assert (params["wg_size"], params["rows_per_wg"], params["weights_binding"]) == (32, 2, "texel"), desc
    for name in EXPECTED_CLASS:
        if name != "lavapipe":
            for qtype in ("Q4_0", "Q6_K"):
                assert lookup(cls_of(name), qtype, 4096, 14336, 1, "dmmv")[0]["rows_per_wg"] <= 2, (name, qtype)


def test_ggml_choices_amd():
    # ggml: AMD n==1: k<2048 -> DMMV; else Q8_0 MMVQ only on GCN.
    assert path("amd_radeon_pro_vii", "Q8_0", 4096) == "mmvq"
    assert path("amd_radeon_pro_vii", "Q4_K", 2047) == "dmmv"
    assert path("amd_rx6800xt", "Q8_0", 4096) == "dmmv"
    assert path("amd_rx6800xt", "Q8_0", 4096, ncols=4) == "mmvq"
    assert path("amd_rx6800xt", "Q4_0", 2048) == "mmvq"
    assert path("amd_rx6800xt", "Q4_0", 1024) == "dmmv"
    assert lookup(cls_of("amd_radeon_pro_vii"), "Q4_0", 4096, 4096, 1)[0]["wg_size"] == 64
    assert lookup(cls_of("amd_rx6800xt"), "Q4_0", 4096, 4096, 1)[0]["wg_size"] == 32


def test_ggml_choices_intel():
    # ggml: Intel (not Windows) n==1: k<2048 DMMV; Q4_0/Q5_1 DMMV; else MMVQ.
    assert path("intel_arc_a770", "Q4_0", 4096) == "dmmv"
    assert path("intel_arc_a770", "Q5_1", 14336) == "dmmv"
    assert path("intel_arc_a770", "Q8_0", 4096) == "mmvq"
    assert path("intel_arc_a770", "Q8_0", 1024) == "dmmv"
    assert path("intel_arc_a770", "Q4_0", 4096, ncols=2) == "mmvq"
    # Xe2: Q2_K/Q3_K/Q6_K always MMVQ, even for small k.
    assert path("intel_arc_b580", "Q6_K", 1024) == "mmvq"
    assert path("intel_arc_b580", "Q4_0", 4096) == "dmmv"
    # Windows driver: DMMV for n==1 except Xe2's Q2_K/Q3_K/Q6_K; n>1 MMVQ.
    assert path("intel_arc_a770_windows", "Q8_0", 14336) == "dmmv"
    assert path("intel_arc_a770_windows", "Q6_K", 14336) == "dmmv"
    assert path("intel_arc_a770_windows", "Q8_0", 14336, ncols=2) == "mmvq"
    b580_win = dict(driver_id=5)
    assert path("intel_arc_b580", "Q3_K", 4096, **b580_win) == "mmvq"
    assert path("intel_arc_b580", "Q4_K", 4096, **b580_win) == "dmmv"


def test_q6_k_dmmv_where_ggml_rules_remain():
    """ggml's rule on the unmeasured GPU tables; lavapipe's and NVIDIA Turing+'s
    entries are measured (mmvq faster)."""
    for name in EXPECTED_CLASS:
        for ncols in (1, 4):
            got = path(name, "Q6_K", 14336, ncols=ncols)
            if name in ("lavapipe", "nvidia_rtx3090", "nvidia_rtx2060") or (
                    name.startswith("intel_") and not name.endswith("_windows")):
                assert got == "mmvq", name
            elif not name.startswith("intel_"):
                assert got == "dmmv", name


def test_plain_types_always_dmmv():
    for name in EXPECTED_CLASS:
        for qtype in ("F32", "F16"):
            params, desc, _ = lookup(cls_of(name), qtype, 4096, 14336, 4)
            assert params["path"] == "dmmv", (name, qtype)


def test_other_vendors_and_software():
    assert path("apple_m2_moltenvk", "Q4_0", 4096) == "mmvq"
    assert path("qualcomm_adreno_x1_85", "Q4_0", 14336, ncols=4) == "dmmv"
    lp = lookup(cls_of("lavapipe"), "Q4_0", 4096, 14336, 1)[0]
    # one workgroup = one lavapipe subgroup (8 lanes), int8 path, subgroupAdd
    assert (lp["path"], lp["wg_size"], lp["reduction"]) == ("mmvq", 8, "subgroup")


def test_lookup_description_names_rules():
    """A choice's description names each rule by label, basis and settings;
    its note is told once per class (`rule_notes`, as `vkq info` prints it)."""
    gtx = cls_of("nvidia_gtx1080")
    params, desc, _ = lookup(gtx, "Q8_0", 4096, 4096, 1)
    assert desc == f"{tables.table_label(gtx)}: default [guess]; rule 1 [ggml] path=dmmv"
    assert tables.table_label(gtx) == "table nvidia.json class nvidia/pre-turing (device nvidia/pre-turing/proprietary)"
    assert tables.rule_notes(gtx)["rule 1"].startswith("ggml: NVIDIA n==1 and k<=4096 -> DMMV")
    amd = cls_of("amd_rx6800xt")
    params, desc, _ = lookup(amd, "Q8_0", 4096, 4096, 1)
    assert "amd/* rule 2 [ggml]" not in desc and "; rule 2 [ggml] path=dmmv" in desc
    assert tables.rule_notes(amd)["rule 2"].startswith("ggml: AMD n==1 Q8_0")
    # the notes of a class that extends another are labelled by their origin
    assert set(tables.rule_notes(class_for_key("nvidia/*"))) == {"nvidia/turing+ rule 1", "nvidia/turing+ rule 2"}


def test_info_prints_each_rule_once(capsys):
    """`vkq info`: what runs (the kernels per block type, grouped), no bases;
    --verbose: a line per block type and the note of every rule it names,
    once; `vkq info TYPE`: that type's line and its rules alone."""
    from vkq.commands.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "<- " not in out and "rule " not in out and "  mat-vec         4096 x 4096, one column: " in out
    assert all(name in out for name in FORMATS) or "every type" in out
    assert len(out.splitlines()) <= 25 * out.count("\ndevice ") + 25  # (a screen per device)
    assert main(["info", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    for name in FORMATS:
        assert len([line for line in verbose.splitlines() if line.startswith(f"    {name} ")]) == 1, name
    rules = [m[1] for m in (re.match(r" +(?:rules +)?(rule \d+) \[", line) for line in verbose.splitlines()) if m]
    assert rules and len(rules) == len(set(rules))  # each rule once
    assert main(["info", "Q8_0"]) == 0
    one = capsys.readouterr().out
    assert [line.split()[0] for line in one.splitlines() if line.startswith("    ") and line.split()[0] in FORMATS] \
        == ["Q8_0"]


@pytest.mark.parametrize("name", sorted(EXPECTED_CLASS))
def test_info_says_what_is_unmeasured(name):
    """`vkq info`'s evidence line comes from the bases of the entries used:
    the vendors vkq has not measured say "unmeasured", whatever the type."""
    measured = name in ("lavapipe", "nvidia_rtx3090", "nvidia_rtx2060")
    for qtype, fmt in FORMATS.items():
        params, desc, bases = lookup(cls_of(name), qtype, 4096, 14336, 1)
        said = evidence(bases)
        # On the GPUs the H100 stands for, every type was measured there.
        if measured:
            assert said == "measured", (name, qtype, desc)
        else:
            assert said.startswith("unmeasured ("), (name, qtype, desc)
    assert evidence(frozenset({"tuned"})).startswith("measured on this device")


def test_lookup_rejects_unknown_type():
    with pytest.raises(ValueError, match="unknown block type"):
        lookup(cls_of("lavapipe"), "Q8_K", 16, 256, 1)


# --- rules for one path ----------------------------------------------------

def test_path_rules_apply_to_their_path_only(monkeypatch):
    """A rule for the dequantize path launches that path only (lavapipe's table
    plus one such rule); the table's own path choice ignores path rules."""
    table = load_table("software")
    table["classes"]["software/lavapipe"]["rules"].append(
        {"types": ["Q4_0"], "paths": ["dmmv"], "rows_per_wg": 2, "basis": "measured", "note": "dequantize path"})
    assert not validate_table(table)
    monkeypatch.setattr(tables, "_load", lambda vendor: table)
    lp = cls_of("lavapipe")
    auto, desc, _ = lookup(lp, "Q4_0", 4096, 14336, 1)
    mmvq = lookup(lp, "Q4_0", 4096, 14336, 1, "mmvq")[0]
    dmmv, dmmv_desc, _ = lookup(lp, "Q4_0", 4096, 14336, 1, "dmmv")
    assert auto == mmvq and auto["path"] == "mmvq" and auto["rows_per_wg"] == 16
    assert dmmv["path"] == "dmmv" and dmmv["rows_per_wg"] == 2
    added = f"rule {len(table['classes']['software/lavapipe']['rules'])} [measured] rows_per_wg=2"
    assert added in dmmv_desc and added not in desc
    # A type without an int8 path asked for mmvq gets dmmv, and dmmv's rules.
    assert lookup(lp, "F16", 4096, 14336, 1, "mmvq")[0]["path"] == "dmmv"


def test_path_rules_are_validated():
    table = load_table("software")
    rules = table["classes"]["software/lavapipe"]["rules"]
    rules.append({"paths": ["dmmv"], "path": "mmvq", "basis": "measured"})
    rules.append({"paths": ["dmmv", "int4"], "wg_size": 8, "basis": "measured"})
    rules.append({"paths": [], "wg_size": 8, "basis": "measured"})
    problems = validate_table(table)
    assert any("cannot set 'path'" in p for p in problems)
    assert sum("'paths' must be a non-empty list" in p for p in problems) == 2


# --- rules for the int8 path's activations ----------------------------------------

def test_activation_rules_apply_to_their_activations_only():
    """lavapipe's Q8_0 at large K: 4 rows per thread with q8_1 (and on the
    dequantize path, which has no activations), 16 with q8_1x2."""
    lp = cls_of("lavapipe")
    q8_1, _, _ = lookup(lp, "Q8_0", 4096, 14336, 1, "mmvq", "q8_1")
    x2, desc, _ = lookup(lp, "Q8_0", 4096, 14336, 1, "mmvq", "q8_1x2")
    dmmv, _, _ = lookup(lp, "Q8_0", 4096, 14336, 1, "dmmv", "q8_1x2")
    assert (q8_1["rows_per_wg"], x2["rows_per_wg"], dmmv["rows_per_wg"]) == (4, 16, 4)
    # the last rule applied is the q8_1x2 one (its number moves as rules are added)
    assert re.search(r"; rule \d+ \[measured\] rows_per_wg=16, chunks_per_thread=8$", desc), desc
    assert lookup(lp, "Q8_0", 4096, 14336, 1)[0] == q8_1  # the default activations are q8_1


def test_activation_rules_are_validated():
    table = load_table("software")
    rules = table["classes"]["software/lavapipe"]["rules"]
    rules.append({"paths": ["mmvq"], "activations": ["q4"], "wg_size": 8, "basis": "measured"})
    rules.append({"paths": ["mmvq"], "activations": [], "wg_size": 8, "basis": "measured"})
    rules.append({"activations": ["q8_1"], "wg_size": 8, "basis": "measured"})
    problems = validate_table(table)
    assert sum("'activations' must be a non-empty list" in p for p in problems) == 2
    assert any("needs 'paths': ['mmvq']" in p for p in problems)


def test_the_gpu_classes_tables_follow_their_facts():
    """Each GPU class with facts (vkq.dispatch.gpu_classes): its table's
    workgroups are whole waves of the class, and its occupancy floors (one
    per op) are counted in the unit its compilers report."""
    from vkq.dispatch import gpu_classes
    from vkq.dispatch.tables import OCCUPANCY_OPS, occupancy_floors

    for key, facts in gpu_classes.CLASSES.items():
        cls = DeviceClass(*key.split("/"), "proprietary")
        table_name, class_key, table = tables._find_class(cls)
        assert table_name == f"{facts.vendor}.json", key
        for label, entry in tables.class_entries(table, class_key):
            assert entry["wg_size"] % facts.wave == 0, (key, label, entry["wg_size"])
        floors = occupancy_floors(cls)
        if facts.null_gpu:  # (the classes CI compiles for: tests/test_gpu_compilers.py)
            assert set(floors) == set(OCCUPANCY_OPS), key
        assert all(f["unit"] == facts.occupancy_unit for f in floors.values()), key


def test_matvecs_ask_for_their_class_wave_where_the_device_allows():
    """gpu_classes.required_wave: RDNA's mat-vecs ask for wave32 where the
    device can require a size and offers 32 (Mesa 22.3's RADV ran them as
    wave64 unasked); nothing where it cannot, or for a class without facts
    (CPU drivers, other vendors)."""
    from vkq.dispatch.gpu_classes import required_wave

    rdna2 = DeviceClass("amd", "rdna2", "mesa")
    assert required_wave(rdna2, (32, 64), True) == 32
    assert required_wave(rdna2, (32, 64), False) is None
    assert required_wave(rdna2, (64, 64), True) is None
    assert required_wave(DeviceClass("nvidia", "turing+", "proprietary"), (32, 32), True) == 32
    assert required_wave(DeviceClass("software", "lavapipe", "mesa"), (8, 8), True) is None
