"""NKI data types as NumPy dtypes (narrow floats from ml_dtypes) and NKI's promotion rules."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import KernelUsageError, UnsupportedApiError

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
# tfloat32 is a Tensor-engine input format with float32 storage; we keep float32 values.
tfloat32 = float32
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)

# Every dtype a kernel's tensors may have, by name: NumPy's plain numbers and NKI's narrow floats. A
# kernel's outputs and a trace's tensors are checked against it (anything else, `object` or `V8`, is refused).
NAMED: dict[str, np.dtype] = {
    d.name: d for d in (bool_, int8, int16, int32, np.dtype(np.int64), uint8, uint16, uint32, np.dtype(np.uint64),
                        float16, float32, np.dtype(np.float64), bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2)}


# The bytes an element takes on the device, by dtype name: a trace names its tensors' and accesses' dtypes, the
# performance model prices them by these sizes.
DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "tfloat32": 4,
    "int32": 4,
    "uint32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int16": 2,
    "uint16": 2,
    "float8_e4m3": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float64": 8,
    "int64": 8,
}


_ALLOWED = frozenset(NAMED.values())


def named(name: str) -> np.dtype | None:
    """The allowed dtype called `name`, or None."""
    return NAMED.get(name)


_FLOAT_RANK = {float8_e4m3: 1, float8_e4m3fn: 1, float8_e5m2: 1, bfloat16: 2, float16: 2, float32: 3}


_FACTS: dict[np.dtype, tuple[str, int]] = {}


def facts_of(dtype: np.dtype) -> tuple[str, int]:
    """dtype.name and the bytes an element takes on the device (the trace's table), cached: NumPy
    computes the name afresh on every access, which shows up in tracing."""
    facts = _FACTS.get(dtype)
    if facts is None:
        name = dtype.name
        facts = _FACTS[dtype] = (name, DTYPE_SIZES.get(name, dtype.itemsize))
    return facts


class PackedMxType:
    """Trainium3's packed microscaling types (`nl.float4_e2m1fn_x4`, `float8_e4m3fn_x4`, `float8_e5m2_x4`):
    names library code lists and compares at import; a tensor or a cast to one is not simulated."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"


PACKED_MX = {name: PackedMxType(name) for name in ("float4_e2m1fn_x4", "float8_e4m3fn_x4", "float8_e5m2_x4")}


def as_dtype(value: Any) -> np.dtype:
    """Accept what kernels pass as a dtype: nl.float32, np.float32, 'float32', a tensor's .dtype; only the
    dtypes NKI has (NAMED), so no object or void arrays are ever made."""
    if isinstance(value, np.dtype) and value in _ALLOWED:
        return value
    if isinstance(value, PackedMxType):
        raise UnsupportedApiError(f"nki.language.{value.name}: Trainium3's packed MX types are not simulated")
    if isinstance(value, str) and value in NAMED:
        return NAMED[value]
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError):
        dtype = None
    if dtype not in _ALLOWED:
        raise KernelUsageError(f"{value!r} is not a dtype NKI has (use one of {', '.join(NAMED)})")
    return dtype


def is_float(dtype: np.dtype) -> bool:
    return dtype in _FLOAT_RANK or np.issubdtype(dtype, np.floating)


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """NKI's binary-op output type when no dtype= is given (docs/fact-sheet.md B.2)."""
    if a == b:
        return a
    a_float, b_float = is_float(a), is_float(b)
    if a_float and not b_float:
        return a
    if b_float and not a_float:
        return b
    if a_float and b_float:
        rank_a, rank_b = _FLOAT_RANK.get(a, 3), _FLOAT_RANK.get(b, 3)
        if rank_a != rank_b:
            return a if rank_a > rank_b else b
        if {a, b} == {float16, bfloat16}:
            return float32
        return bfloat16  # two different 8-bit floats
    if {a, b} == {int32, uint32}:
        return float32
    return np.promote_types(a, b)


_NARROWED = {np.dtype(np.float64): float32, np.dtype(np.int64): int32, np.dtype(np.uint64): uint32}


def scalar_dtype(value: Any) -> np.dtype:
    """Type of a Python or NumPy scalar operand: ints are int32, floats float32, bools uint8. A NumPy
    scalar keeps its type, except that the 64-bit ones the device has no arithmetic for (`1 / np.sqrt(d)`
    is a float64) are their 32-bit kind: an fp32 tile times such a scale stays fp32."""
    if isinstance(value, np.generic):
        return _NARROWED.get(value.dtype, value.dtype)
    if isinstance(value, bool):
        return uint8
    if isinstance(value, int):
        return int32
    return float32
