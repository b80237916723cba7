"""A caller's path request for one matrix, resolved in one place.

Commands and engines that run a whole model take "auto", "dmmv" or "mmvq"
for every matrix; "mmvq" then means "the int8 path where the block type
has one": F32/F16 matrices (an MoE router, an output head) have none and
take the dequantize path. `Backend.matvec(path="mmvq")` on an F16 matrix,
a request for one matrix, is refused instead (vkq.dispatch.choose).
"""
from __future__ import annotations

from ..blocks.formats import BlockFormat

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
