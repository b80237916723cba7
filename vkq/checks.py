"""Checks of plain values read from files (GGUF metadata, JSON tables and
tuning files), for every layer: no vkq imports."""
from __future__ import annotations

import numbers


def is_int(v) -> bool:
    """An integer, not a bool: JSON and GGUF give both, and bool is an int subclass."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_integer(v) -> bool:
    """An integer of Python or numpy (numbers.Integral: np.int64 from an
    argmax), not a bool: what a Python caller may give as a count or a token id."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def described(v) -> str:
    """A value and its type, for an error: '2.5 (float)', "'3' (str)", 'None'."""
    if v is None:
        return "None"
    return f"{v!r} ({type(v).__name__})" if isinstance(v, (str, bytes)) else f"{v} ({type(v).__name__})"


def integer_argument(name: str, value, least: int | None = None) -> int:
    """An argument that must be an integer (of at least `least`), as an int:
    a float, bool or str is refused (TypeError), not truncated."""
    if not is_integer(value):
        raise TypeError(f"{name} is {described(value)}; expected an integer")
    if least is not None and value < least:
        raise ValueError(f"{name} is {value}; expected {least} or more")
    return int(value)


def token_ids_argument(name: str, ids) -> list[int]:
    """An argument that must be a sequence of token ids (integers), as a list
    of ints: a str, None, a float or a bool among them is refused (TypeError)."""
    if ids is None or isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        what = "None" if ids is None else f"a {type(ids).__name__}"
        raise TypeError(f"{name} is {what}; expected a sequence of token ids")
    out = []
    for i, t in enumerate(ids):
        if not is_integer(t):
            raise TypeError(f"{name}[{i}] is {described(t)}; expected a token id (an integer)")
        out.append(int(t))
    return out
