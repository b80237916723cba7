"""Sort a device into a class (vendor / architecture / driver) for the tables.

The class only picks a row of a tuning table (`vkq.dispatch.tables`); it never
decides correctness. Signals, strongest first:

- VkDriverId (the Vulkan spec's enum) for the driver and for software
  devices (lavapipe, SwiftShader) and MoltenVK;
- vendor ID (PCI vendor, or Khronos vendor ID 0x10005 for Mesa);
- subgroup size range (VK_EXT_subgroup_size_control / Vulkan 1.3), which is
  what ggml uses for AMD GCN (64..64) vs RDNA (32..64) and Intel Xe2 (min 16)
  (get_device_architecture in ggml-vulkan.cpp, ggml d99724f2);
- extensions (cooperative matrix on NVIDIA Turing+ and AMD RDNA3+);
- the device name, as a second opinion where drivers misreport or lack the
  properties above (e.g. a Turing card on a driver without cooperative
  matrix, which ggml misdetects as pre-Turing).

Every decision leaves a human-readable reason, shown by `vkq info`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..device.caps import DRIVER_LLVMPIPE, is_lavapipe
from ..device.device_info import DeviceInfo

# VkDriverId values (Vulkan spec, VkDriverId) -> our short driver name.
_DRIVERS = {
    1: "proprietary",  # AMD_PROPRIETARY (Windows / amdgpu-pro)
    2: "amdvlk",  # AMD_OPEN_SOURCE
    3: "mesa",  # MESA_RADV
    4: "proprietary",  # NVIDIA_PROPRIETARY
    5: "windows",  # INTEL_PROPRIETARY_WINDOWS
    6: "mesa",  # INTEL_OPEN_SOURCE_MESA (ANV)
    7: "proprietary",  # IMAGINATION_PROPRIETARY
    8: "proprietary",  # QUALCOMM_PROPRIETARY
    9: "proprietary",  # ARM_PROPRIETARY
    10: "swiftshader",  # GOOGLE_SWIFTSHADER
    12: "proprietary",  # BROADCOM_PROPRIETARY
    13: "mesa",  # MESA_LLVMPIPE
    14: "moltenvk",  # MOLTENVK
    18: "mesa",  # MESA_TURNIP
    19: "mesa",  # MESA_V3DV
    20: "mesa",  # MESA_PANVK
    21: "proprietary",  # SAMSUNG_PROPRIETARY
    22: "mesa",  # MESA_VENUS (virtio-gpu; reports the host GPU's vendor)
    23: "mesa",  # MESA_DOZEN (on D3D12; reports the host GPU's vendor)
    24: "mesa",  # MESA_NVK
    25: "mesa",  # IMAGINATION_OPEN_SOURCE_MESA
    26: "mesa",  # MESA_AGXV (Asahi honeykrisp)
}
_DRIVER_SWIFTSHADER = 10  # VkDriverId GOOGLE_SWIFTSHADER (lavapipe's: vkq.device.caps)

# Vendors with a table of their own (vendor names: DeviceInfo.vendor).
_GPU_VENDORS = ("nvidia", "amd", "intel", "apple", "qualcomm", "arm")

# NVIDIA names that are Turing or newer. Every "RTX" product is Turing+;
# GTX 16xx and MX450/550 are Turing without RT cores; T4/T400..T1200 Turing;
# A/H/L/B + digits are Ampere+ datacenter parts; NVK (Mesa) appends the chip
# codename, e.g. "(NVK TU106)", "(NVK GA102)".
_NV_TURING_PLUS = re.compile(
    r"\bRTX\b|\bGTX 16\d\d|\bMX[45]\d0\b|\bT(4|400|500|550|600|1000|1200)\b"
    r"|\b[AHLB]\d{1,3}[A-Z]?\b|\bOrin\b|\bThor\b|\b(TU|GA|GH|AD|GB)1?\d{2,3}\b"
)
# Volta has VK_NV_cooperative_matrix but predates Turing (ggml: pre-Turing).
_NV_VOLTA = re.compile(r"V100|TITAN V\b|GV10\d|Xavier")

# AMD names -> RDNA generation. RADV appends the chip, e.g. "(RADV NAVI21)";
# proprietary drivers give the marketing name only.
_AMD_RDNA = (
    ("rdna4", re.compile(r"\bRX 9\d{3}\b|\bR9\d{3}\b|GFX12\d\d", re.I)),
    ("rdna3", re.compile(r"\bRX 7\d{3}\b|\bW7\d{3}\b|\b[78][4-9]0M\b|NAVI3\d|PHOENIX|GFX11\d\d|STRIX", re.I)),
    ("rdna2", re.compile(r"\bRX 6\d{3}[MS]?\b|\bW6\d{3}\b|\b6[6-8]0M\b|NAVI2\d|VANGOGH|REMBRANDT|RAPHAEL|MENDOCINO|YELLOW_CARP", re.I)),
    ("rdna1", re.compile(r"\bRX 5[5-7]\d{2}\b|\bW5[5-7]00\b|NAVI1\d", re.I)),
)

# Intel names: Xe2 = Battlemage (Arc B-series) and Lunar Lake (Arc 130V/140V);
# Xe = Tiger Lake+ "Iris Xe", DG1/DG2 (Arc A-series), Meteor Lake "Arc".
_INTEL_XE2 = re.compile(r"Arc\(\w+\) B\d{3}|Arc B\d{3}|\b1[34]0V\b|\bBMG\b|\bLNL\b", re.I)
_INTEL_XE = re.compile(r"Arc\(\w+\) A\d{3}|Arc A\d{3}|Iris\(\w+\) Xe|Iris Xe|\bDG[12]\b|\bMTL\b|Arc\(\w+\) Graphics", re.I)


@dataclass(frozen=True)
class DeviceClass:
    vendor: str  # nvidia amd intel apple qualcomm arm software unknown
    arch: str  # e.g. turing+, gcn, rdna2, xe2, lavapipe, unknown
    driver: str  # proprietary mesa amdvlk windows moltenvk swiftshader unknown
    reasons: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """"vendor/arch/driver", e.g. "intel/xe/windows". The tables look up
        this key, then "vendor/arch", "vendor/*/driver", "vendor/*"."""
        return f"{self.vendor}/{self.arch}/{self.driver}"


def classify(info: DeviceInfo) -> DeviceClass:
    reasons: list[str] = []
    driver = _driver(info, reasons)
    vendor = _vendor(info, reasons)
    arch = {
        "software": _arch_software,
        "nvidia": _arch_nvidia,
        "amd": _arch_amd,
        "intel": _arch_intel,
        "apple": _arch_apple,
        "qualcomm": lambda i, r: _by_name(i, r, "adreno", "Adreno"),
        "arm": lambda i, r: _by_name(i, r, "mali", "Mali", "Immortalis"),
    }.get(vendor, _arch_unknown)(info, reasons)
    return DeviceClass(vendor, arch, driver, tuple(reasons))


def _driver(info: DeviceInfo, reasons: list[str]) -> str:
    if info.driver_id is not None:
        driver = _DRIVERS.get(info.driver_id, "unknown")
        reasons.append(f"driver: VkDriverId {info.driver_id} ({info.driver_name}) -> {driver}")
        return driver
    # Vulkan 1.1 driver without VK_KHR_driver_properties.
    if "Mesa" in (info.driver_info or "") or "Mesa" in info.name:
        reasons.append("driver: no VkDriverId; 'Mesa' in driver info or name -> mesa")
        return "mesa"
    reasons.append("driver: no VkDriverId -> unknown")
    return "unknown"


def _vendor(info: DeviceInfo, reasons: list[str]) -> str:
    vid = f"vendor ID 0x{info.vendor_id:04x}"
    if info.driver_id in (DRIVER_LLVMPIPE, _DRIVER_SWIFTSHADER):
        reasons.append(f"vendor: software driver (VkDriverId {info.driver_id})")
        return "software"
    if info.vendor in ("mesa", "google") or info.device_type == "cpu":
        reasons.append(f"vendor: {vid}, device type {info.device_type} -> software")
        return "software"
    vendor = info.vendor if info.vendor in _GPU_VENDORS else "unknown"
    reasons.append(f"vendor: {vid} -> {vendor}")
    return vendor


def _arch_software(info: DeviceInfo, reasons: list[str]) -> str:
    if is_lavapipe(info):
        reasons.append("arch: lavapipe (Mesa llvmpipe)")
        return "lavapipe"
    if info.driver_id == _DRIVER_SWIFTSHADER or info.vendor == "google" or "SwiftShader" in info.name:
        reasons.append("arch: SwiftShader")
        return "swiftshader"
    reasons.append("arch: unknown CPU device")
    return "unknown"


def _arch_nvidia(info: DeviceInfo, reasons: list[str]) -> str:
    # ggml (facts 2c): no VK_KHR_cooperative_matrix -> pre-Turing. That
    # misdetects Turing+ on drivers that predate the KHR extension, so the NV
    # extension and then the name are also taken as evidence.
    if "VK_KHR_cooperative_matrix" in info.extensions:
        reasons.append("arch: VK_KHR_cooperative_matrix -> turing+ (as ggml)")
        return "turing+"
    if "VK_NV_cooperative_matrix" in info.extensions:
        if _NV_VOLTA.search(info.name):
            reasons.append("arch: VK_NV_cooperative_matrix but Volta name -> pre-turing")
            return "pre-turing"
        reasons.append("arch: VK_NV_cooperative_matrix (no KHR: old driver) -> turing+; ggml would say pre-Turing")
        return "turing+"
    if _NV_TURING_PLUS.search(info.name):
        reasons.append(f"arch: no cooperative matrix, but name {info.name!r} is Turing+ -> turing+; ggml would say pre-Turing")
        return "turing+"
    reasons.append("arch: no cooperative matrix extension -> pre-turing (as ggml)")
    return "pre-turing"


def _arch_amd(info: DeviceInfo, reasons: list[str]) -> str:
    lo, hi = info.subgroup_min_size, info.subgroup_max_size
    if lo == 64 and hi == 64:
        reasons.append("arch: subgroup size min=max=64 -> gcn (as ggml)")
        return "gcn"
    named = next((arch for arch, rx in _AMD_RDNA if rx.search(info.name)), None)
    if lo == 32 and hi == 64:
        if named:
            reasons.append(f"arch: subgroup size 32..64 -> RDNA; name {info.name!r} -> {named}")
            return named
        if "VK_KHR_cooperative_matrix" in info.extensions:
            reasons.append("arch: subgroup size 32..64 -> RDNA; cooperative matrix (WMMA) -> rdna3")
            return "rdna3"
        reasons.append("arch: subgroup size 32..64 -> rdna (generation unknown)")
        return "rdna"
    if named:
        reasons.append(f"arch: no subgroup size range; name {info.name!r} -> {named}")
        return named
    reasons.append(f"arch: subgroup size range {lo}..{hi} not recognised -> unknown")
    return "unknown"


def _arch_intel(info: DeviceInfo, reasons: list[str]) -> str:
    lo = info.subgroup_min_size
    if lo == 16:
        reasons.append("arch: min subgroup size 16 -> xe2 (as ggml)")
        return "xe2"
    if lo == 8:
        if info.integer_dot_4x8_packed_accelerated:
            reasons.append("arch: min subgroup size 8 + accelerated int8 dot (DP4A) -> xe (as ggml)")
            return "xe"
        reasons.append("arch: min subgroup size 8, no accelerated int8 dot -> gen9-11")
        return "gen9-11"
    if _INTEL_XE2.search(info.name):
        reasons.append(f"arch: no subgroup size range; name {info.name!r} -> xe2")
        return "xe2"
    if _INTEL_XE.search(info.name):
        reasons.append(f"arch: no subgroup size range; name {info.name!r} -> xe")
        return "xe"
    reasons.append("arch: unknown Intel GPU")
    return "unknown"


def _arch_apple(info: DeviceInfo, reasons: list[str]) -> str:
    # Apple's vendor ID only reaches Vulkan through MoltenVK (or Asahi's
    # Mesa driver): the GPU is an Apple silicon one (M- or A-series).
    reasons.append("arch: Apple vendor ID -> apple-silicon")
    return "apple-silicon"


def _by_name(info: DeviceInfo, reasons: list[str], arch: str, *names: str) -> str:
    if any(n.lower() in info.name.lower() for n in names):
        reasons.append(f"arch: name {info.name!r} -> {arch}")
        return arch
    reasons.append(f"arch: name {info.name!r} not recognised -> unknown")
    return "unknown"


def _arch_unknown(info: DeviceInfo, reasons: list[str]) -> str:
    reasons.append("arch: unknown vendor -> unknown")
    return "unknown"
