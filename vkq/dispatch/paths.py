"""A caller's path request, resolved in one place: for one matrix
(`requested_path`: a `path=` argument, else VKQ_PATH), for a whole model
(`resolve_path`), and the environment's settings (VKQ_PATH,
VKQ_DISABLE_INT_DOT). Below the mat-vec's choice (choose), the tiles
(tiles, tile_tuning) and the tuning store: each of them asks it.

Commands and engines that run a whole model take "auto", "dmmv" or "mmvq"
for every matrix; "mmvq" then means "the int8 path where the block type
has one": F32/F16 matrices (an MoE router, an output head) have none and
take the dequantize path. `Backend.matvec(path="mmvq")` on an F16 matrix,
a request for one matrix, is refused instead (vkq.dispatch.choose).
"""
from __future__ import annotations

import os

from ..blocks.formats import BlockFormat
from .config import PATHS

PATH_REQUESTS = ("auto", "dmmv", "mmvq")


def check_request(request: str) -> str:
    value = str(request).strip().lower()
    if value not in PATH_REQUESTS:
        raise ValueError(f"unknown path {request!r}; expected one of {', '.join(PATH_REQUESTS)}")
    return value


def resolve_path(fmt: BlockFormat, request: str | None) -> str | None:
    """The `path=` for a matrix of this type: None (the dispatcher's choice)
    for "auto" or None, else the requested path where the type has it."""
    if request is None:
        return None
    request = check_request(request)
    if request == "auto":
        return None
    if request == "mmvq" and not fmt.has_int8_path:
        return "dmmv"
    return request


def env_choice(name: str, choices, what: str) -> str | None:
    """The environment variable `name`'s value (lower case), one of choices;
    None where it is not set; a ValueError naming the choices otherwise."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not {what}; use one of {', '.join(choices)}")
    return value


def env_path() -> str | None:
    """VKQ_PATH's path, or None where it is not set."""
    return env_choice("VKQ_PATH", PATHS, "a path")


def int_dot_disabled_by_env() -> bool:
    return os.environ.get("VKQ_DISABLE_INT_DOT", "") not in ("", "0")


def check_path(path) -> str:
    if not isinstance(path, str) or path.lower() not in PATHS:
        raise ValueError(f"unknown path {path!r}; expected one of {', '.join(PATHS)} (or None)")
    return path.lower()


def requested_path(fmt: BlockFormat, path: str | None) -> tuple[str | None, str, str]:
    """The path asked for a matrix of type fmt, before any table or tuning:
    the caller's `path` (refused where the type lacks it), else VKQ_PATH
    where the type has it, else None (the rules' choice); with where it came
    from ("argument", "env VKQ_PATH") and a note where VKQ_PATH does not
    apply (the environment sets a preference for every matrix; a type
    without that path keeps the one it has)."""
    if path is not None:
        path = check_path(path)
        if path == "mmvq" and not fmt.has_int8_path:
            raise ValueError(f"{fmt.name} has no int8 (mmvq) path; use path='dmmv'")
        return path, "argument", ""
    path = env_path()
    if path == "mmvq" and not fmt.has_int8_path:
        return None, "", f"VKQ_PATH=mmvq does not apply: {fmt.name} has no int8 path"
    return path, "env VKQ_PATH" if path is not None else "", ""
