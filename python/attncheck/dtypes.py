"""bf16 on numpy (which has no bfloat16): bit patterns as uint16, converted exactly to float32 and
back with one round-to-nearest-even (NaN kept quiet), the rounding a bf16 kernel's store does."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, cast

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

NUMPY_DTYPES: Dict[str, Any] = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}


def bf16_to_float32(bits: Any) -> NDArray[Any]:
    """uint16 bf16 bit patterns -> float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(x: Any) -> NDArray[Any]:
    """float32 values -> uint16 bf16 bit patterns, rounded to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


def to_float32(a: Any, dtype: str) -> NDArray[Any]:
    """Any host input of the given protocol dtype as float32 values."""
    return bf16_to_float32(a) if dtype == "bf16" else np.asarray(a, dtype=np.float32)


def float64_to_bf16(x: Any) -> NDArray[Any]:
    """float64 values -> uint16 bf16 bit patterns with one rounding (to nearest even), computed in
    float64 where every step below is exact: the quantum of the value's bf16 binade is a power of
    two (2^-133 at the least, for subnormals), rint rounds to nearest even."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    _, e = np.frexp(xf)
    q = np.ldexp(1.0, np.maximum(e, -125) - 8)
    r = np.rint(xf / q) * q
    r = np.where(np.abs(r) >= 2.0 ** 128, np.copysign(np.inf, xf), r)
    r = np.where(finite, r, x)
    return float32_to_bf16(r.astype(np.float32))


def from_float(x: Any, dtype: str) -> NDArray[Any]:
    """float32 / float64 values -> the storage array of a protocol dtype, with one rounding."""
    x = np.asarray(x)
    if dtype == "bf16":
        return float64_to_bf16(x) if x.dtype == np.float64 else float32_to_bf16(x)
    return cast("NDArray[Any]", x.astype(NUMPY_DTYPES[dtype]))


def _fp8_table(fmt: str) -> NDArray[Any]:
    """The 256 values of an FP8 format's codes, exactly (float64): e4m3fn (bias 7, no infinity,
    0x7f / 0xff NaN, largest 448), e5m2 (bias 15, IEEE-like: infinities and NaNs at exponent 31) or
    e4m3fnuz (bias 8, no infinity and no negative zero: 0x80 is its only NaN, 0x7f is 240)."""
    mant_bits, bias = {"e4m3fn": (3, 7), "e5m2": (2, 15), "e4m3fnuz": (3, 8)}[fmt]
    t = np.empty(256, np.float64)
    for c in range(256):
        sign = -1.0 if c & 0x80 else 1.0
        e = (c >> mant_bits) & ((1 << (7 - mant_bits)) - 1)
        m = c & ((1 << mant_bits) - 1)
        if fmt == "e4m3fnuz" and c == 0x80:
            t[c] = np.nan
        elif fmt == "e4m3fn" and e == 15 and m == 7:
            t[c] = np.nan
        elif fmt == "e5m2" and e == 31:
            t[c] = sign * np.inf if m == 0 else np.nan
        elif e == 0:
            t[c] = sign * m / (1 << mant_bits) * 2.0 ** (1 - bias)
        else:
            t[c] = sign * (1 + m / (1 << mant_bits)) * 2.0 ** (e - bias)
    return t


_FP8_TABLES: Dict[str, NDArray[Any]] = {}


def fp8_to_float64(codes: Any, fmt: str) -> NDArray[Any]:
    """FP8 codes (uint8) of "e4m3fn", "e5m2" or "e4m3fnuz" -> their exact values as float64."""
    if fmt not in ("e4m3fn", "e5m2", "e4m3fnuz"):
        raise ValueError(f"unknown FP8 format {fmt!r} (e4m3fn, e5m2, e4m3fnuz)")
    if fmt not in _FP8_TABLES:
        _FP8_TABLES[fmt] = _fp8_table(fmt)
    return _FP8_TABLES[fmt][np.asarray(codes, dtype=np.uint8)]
