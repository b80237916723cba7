"""pytest hooks: with VKQ_VALIDATE=1 the whole session runs under the Khronos
validation layer, synchronization validation included, and any error or
warning it reports fails the session (`make validate`, run by CI).

The layer is configured through a settings file (VK_LAYER_SETTINGS_PATH)
written here, before the first Vulkan instance is created, and logs to a
file that is read when the session ends.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

_LOG: Path | None = None

SETTINGS = """\
khronos_validation.report_flags = error,warn,info
khronos_validation.log_filename = {log}
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
"""


def enabled() -> bool:
    return os.environ.get("VKQ_VALIDATE", "") not in ("", "0")


def log_path() -> Path | None:
    """The file the layer logs to (None when validation is off)."""
    return _LOG


def pytest_configure(config):
    global _LOG
    if not enabled():
        return
    work = Path(tempfile.mkdtemp(prefix="vkq-validation-"))
    _LOG = work / "validation.log"
    settings = work / "vk_layer_settings.txt"
    settings.write_text(SETTINGS.format(log=_LOG))
    os.environ["VK_INSTANCE_LAYERS"] = "VK_LAYER_KHRONOS_validation"
    os.environ["VK_LAYER_SETTINGS_PATH"] = str(settings)


def pytest_sessionfinish(session, exitstatus):
    if _LOG is None:
        return
    text = _LOG.read_text(errors="replace") if _LOG.exists() else ""
    # Info is on only to prove the layer ran: it logs one status message per instance.
    active = "Khronos Validation Layer Active" in text
    ids = re.findall(r"(\S+)\((?:ERROR|WARN\w*) / ", text)
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr:
        tr.write_line(f"Vulkan validation: layer active: {active}; {len(ids)} errors/warnings ({_LOG})")
        for vid in sorted(set(ids)):
            tr.write_line(f"  {ids.count(vid)} x {vid}")
        if ids:
            tr.write_line(text[:4000])
    if ids or not active:
        session.exitstatus = 1
