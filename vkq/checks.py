"""Checks of plain values read from files (GGUF metadata, JSON tables and
tuning files), for every layer: no vkq imports."""
from __future__ import annotations


def is_int(v) -> bool:
    """An integer, not a bool: JSON and GGUF give both, and bool is an int subclass."""
    return isinstance(v, int) and not isinstance(v, bool)
