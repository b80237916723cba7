"""What a compute pipeline asks of the device, read from its SPIR-V with its
specialization constants: the workgroup's size and the shared memory it
declares. Device.algorithm holds every pipeline to the device's limits
with these before the driver sees it (a shared-memory size past the limit
crashed RADV inside vkCreateComputePipelines; a workgroup past
maxComputeWorkGroupInvocations was taken silently), so that the launch
formulas of each op (vkq.dispatch.choose, vkq.dispatch.tiles, the llama
ops) need not be trusted to agree with the shaders.

The shared-memory size is the sum of the Workgroup variables' sizes,
each value at its natural size (4 bytes for 32-bit scalars, vectors and
arrays packed): what vkq's shaders declare (arrays of scalars and vec4s),
and what the validation layer counts (VUID-RuntimeSpirv-Workgroup-06530).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

# SPIR-V opcodes, decorations and enums read here (the SPIR-V specification's numbers)
_OP_EXECUTION_MODE, _OP_EXECUTION_MODE_ID, _OP_DECORATE = 16, 331, 71
_OP_TYPE_BOOL, _OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_VECTOR, _OP_TYPE_MATRIX = 20, 21, 22, 23, 24
_OP_TYPE_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER = 28, 30, 32
_OP_CONSTANT_TRUE, _OP_CONSTANT_FALSE, _OP_CONSTANT, _OP_CONSTANT_COMPOSITE = 41, 42, 43, 44
_OP_SPEC_TRUE, _OP_SPEC_FALSE, _OP_SPEC, _OP_SPEC_COMPOSITE, _OP_SPEC_OP = 48, 49, 50, 51, 52
_OP_VARIABLE = 59
_DECORATION_SPEC_ID, _DECORATION_BUILTIN, _BUILTIN_WORKGROUP_SIZE = 1, 11, 25
_MODE_LOCAL_SIZE, _MODE_LOCAL_SIZE_ID = 17, 38
_STORAGE_WORKGROUP = 4
_MASK32 = 0xFFFFFFFF


def _signed(v: int) -> int:
    v &= _MASK32
    return v - (1 << 32) if v >> 31 else v


# OpSpecConstantOp's integer and logical operations (the ones glslang emits
# for the constant expressions of vkq's shaders), on 32-bit values.
_SPEC_OPS = {
    128: lambda a, b: a + b,  # IAdd
    130: lambda a, b: a - b,  # ISub
    132: lambda a, b: a * b,  # IMul
    134: lambda a, b: (a & _MASK32) // (b & _MASK32),  # UDiv
    135: lambda a, b: int(_signed(a) / _signed(b)),  # SDiv
    137: lambda a, b: (a & _MASK32) % (b & _MASK32),  # UMod
    194: lambda a, b: (a & _MASK32) >> b,  # ShiftRightLogical
    195: lambda a, b: _signed(a) >> b,  # ShiftRightArithmetic
    196: lambda a, b: a << b,  # ShiftLeftLogical
    197: lambda a, b: a | b,  # BitwiseOr
    198: lambda a, b: a ^ b,  # BitwiseXor
    199: lambda a, b: a & b,  # BitwiseAnd
    166: lambda a, b: int(bool(a) or bool(b)),  # LogicalOr
    167: lambda a, b: int(bool(a) and bool(b)),  # LogicalAnd
    164: lambda a, b: int(bool(a) == bool(b)),  # LogicalEqual
    165: lambda a, b: int(bool(a) != bool(b)),  # LogicalNotEqual
    170: lambda a, b: int(a & _MASK32 == b & _MASK32),  # IEqual
    171: lambda a, b: int(a & _MASK32 != b & _MASK32),  # INotEqual
    172: lambda a, b: int(a & _MASK32 > b & _MASK32),  # UGreaterThan
    173: lambda a, b: int(_signed(a) > _signed(b)),  # SGreaterThan
    174: lambda a, b: int(a & _MASK32 >= b & _MASK32),  # UGreaterThanEqual
    175: lambda a, b: int(_signed(a) >= _signed(b)),  # SGreaterThanEqual
    176: lambda a, b: int(a & _MASK32 < b & _MASK32),  # ULessThan
    177: lambda a, b: int(_signed(a) < _signed(b)),  # SLessThan
    178: lambda a, b: int(a & _MASK32 <= b & _MASK32),  # ULessThanEqual
    179: lambda a, b: int(_signed(a) <= _signed(b)),  # SLessThanEqual
}
_SPEC_UNARY = {168: lambda a: int(not a), 200: lambda a: ~a, 126: lambda a: -a,  # LogicalNot, Not, SNegate
               113: lambda a: a, 114: lambda a: a}  # UConvert, SConvert (32-bit values only here)
_OP_SELECT, _OP_COMPOSITE_EXTRACT = 169, 81


@dataclass(frozen=True)
class PipelineNeeds:
    """A compute pipeline's workgroup size (x, y, z) and its shared memory in bytes."""

    workgroup: tuple[int, int, int]
    shared_bytes: int

    @property
    def invocations(self) -> int:
        return self.workgroup[0] * self.workgroup[1] * self.workgroup[2]


def pipeline_needs(spirv: bytes, spec: list[int] | tuple[int, ...]) -> PipelineNeeds:
    """The workgroup size and shared memory of the compute shader in
    `spirv` with specialization constants 0..len(spec)-1 set to `spec`
    (32-bit values, as Kompute passes them; the others keep their defaults).
    ValueError for a module this cannot read."""
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv[: len(spirv) // 4 * 4])
    if len(words) < 5 or words[0] != 0x07230203:
        raise ValueError("not a SPIR-V module (little-endian)")
    spec_ids: dict[int, int] = {}
    builtin_wg_size = None
    insts = []
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            raise ValueError("malformed SPIR-V: an instruction of 0 words")
        args = words[i + 1:i + count]
        insts.append((op, args))
        if op == _OP_DECORATE and args[1] == _DECORATION_SPEC_ID:
            spec_ids[args[0]] = args[2]
        elif op == _OP_DECORATE and args[1] == _DECORATION_BUILTIN and args[2] == _BUILTIN_WORKGROUP_SIZE:
            builtin_wg_size = args[0]
        i += count

    values: dict[int, object] = {}  # constants: an int (bools 0/1) or a tuple (composites)
    types: dict[int, tuple] = {}
    local_size = local_size_ids = None
    shared = 0
    for op, a in insts:
        if op == _OP_EXECUTION_MODE and a[1] == _MODE_LOCAL_SIZE:
            local_size = tuple(a[2:5])
        elif op == _OP_EXECUTION_MODE_ID and a[1] == _MODE_LOCAL_SIZE_ID:
            local_size_ids = tuple(a[2:5])
        elif op == _OP_TYPE_BOOL:
            types[a[0]] = ("scalar", 4)
        elif op in (_OP_TYPE_INT, _OP_TYPE_FLOAT):
            types[a[0]] = ("scalar", a[1] // 8)
        elif op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX):
            types[a[0]] = ("array", a[1], a[2])
        elif op == _OP_TYPE_ARRAY:
            types[a[0]] = ("array_id", a[1], a[2])
        elif op == _OP_TYPE_STRUCT:
            types[a[0]] = ("struct", tuple(a[1:]))
        elif op == _OP_TYPE_POINTER:
            types[a[0]] = ("pointer", a[1], a[2])
        elif op in (_OP_CONSTANT_TRUE, _OP_CONSTANT_FALSE):
            values[a[1]] = int(op == _OP_CONSTANT_TRUE)
        elif op in (_OP_SPEC_TRUE, _OP_SPEC_FALSE):
            sid = spec_ids.get(a[1])
            values[a[1]] = int(bool(spec[sid])) if sid is not None and sid < len(spec) else int(op == _OP_SPEC_TRUE)
        elif op == _OP_CONSTANT:
            values[a[1]] = a[2]  # (32-bit and the low word of wider ones: sizes and counts are 32-bit)
        elif op == _OP_SPEC:
            sid = spec_ids.get(a[1])
            values[a[1]] = spec[sid] & _MASK32 if sid is not None and sid < len(spec) else a[2]
        elif op in (_OP_CONSTANT_COMPOSITE, _OP_SPEC_COMPOSITE):
            values[a[1]] = tuple(values.get(c) for c in a[2:])
        elif op == _OP_SPEC_OP:
            values[a[1]] = _spec_op(a[2], a[3:], values)
        elif op == _OP_VARIABLE and a[2] == _STORAGE_WORKGROUP:
            pointer = types[a[0]]
            shared += _size(pointer[2], types, values)

    if builtin_wg_size is not None and isinstance(values.get(builtin_wg_size), tuple):
        workgroup = values[builtin_wg_size]
    elif local_size_ids is not None:
        workgroup = tuple(values.get(v) for v in local_size_ids)
    elif local_size is not None:
        workgroup = local_size
    else:
        raise ValueError("the module declares no workgroup size")
    if any(not isinstance(v, int) for v in workgroup):
        raise ValueError("the workgroup size is not a constant this can evaluate")
    return PipelineNeeds(tuple(int(v) & _MASK32 for v in workgroup), shared)


def _spec_op(opcode: int, operands, values: dict):
    if opcode == _OP_COMPOSITE_EXTRACT:
        value = values.get(operands[0])
        for index in operands[1:]:
            value = value[index] if isinstance(value, tuple) else None
        return value
    args = [values.get(o) for o in operands]
    if opcode == _OP_SELECT:
        return args[1] if args[0] else args[2]
    if any(not isinstance(v, int) for v in args):
        return None
    if opcode in _SPEC_OPS:
        return _SPEC_OPS[opcode](*args) & _MASK32
    if opcode in _SPEC_UNARY:
        return _SPEC_UNARY[opcode](*args) & _MASK32
    return None  # (an operation vkq's shaders do not use: whatever depends on it cannot be sized)


def _size(type_id: int, types: dict, values: dict) -> int:
    t = types.get(type_id)
    if t is None:
        raise ValueError(f"shared memory of a type this cannot size (id {type_id})")
    if t[0] == "scalar":
        return t[1]
    if t[0] == "array":
        return t[2] * _size(t[1], types, values)
    if t[0] == "array_id":
        length = values.get(t[2])
        if not isinstance(length, int):
            raise ValueError("a shared array whose length this cannot evaluate")
        return length * _size(t[1], types, values)
    if t[0] == "struct":
        return sum(_size(m, types, values) for m in t[1])
    raise ValueError(f"shared memory of a type this cannot size ({t[0]})")
