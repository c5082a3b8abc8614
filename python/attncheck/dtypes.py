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


# The positive codes of each format in value order, its largest finite code, and the overflow codes.
_FP8_LARGEST = {"e4m3fn": 0x7E, "e5m2": 0x7B, "e4m3fnuz": 0x7F}


def float_to_fp8(values: Any, fmt: str, saturate: bool) -> NDArray[Any]:
    """Values (float32 or float64) -> their FP8 codes (uint8) of "e4m3fn", "e5m2" or "e4m3fnuz", each
    rounded once to nearest with ties to even, with gradual underflow. Past the largest finite value
    (448, 57344, 240) and for infinities: the signed largest when saturate, else NaN (e4m3fn: 0x7f
    / 0xff, e4m3fnuz: 0x80) or the signed infinity (e5m2). NaN gives the format's NaN; a zero keeps
    its sign but in e4m3fnuz (no -0). What plugin_abi.h's quantiser contract asks of one rounding."""
    table = fp8_to_float64(np.arange(256), fmt)
    largest_code = _FP8_LARGEST[fmt]
    # The positive codes in value order, and one past the largest where a wider exponent would put
    # it: a value halfway to it is a tie like any other (the even code wins; past it, overflow).
    vals = np.append(table[: largest_code + 1], 2 * table[largest_code] - table[largest_code - 1])
    x = np.asarray(values, dtype=np.float64)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(vals, np.nan_to_num(a, posinf=np.inf), side="left"), 0, len(vals) - 1)
    lo = np.clip(hi - 1, 0, len(vals) - 1)
    d_lo, d_hi = np.abs(a - vals[lo]), np.abs(vals[hi] - a)
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= vals[-1], len(vals) - 1, code)  # at or past the code past the largest
    neg = np.signbit(x)
    over = code > largest_code
    if saturate:
        over_code = np.full(x.shape, largest_code)
    elif fmt == "e5m2":
        over_code = np.full(x.shape, 0x7C)
    else:
        over_code = np.full(x.shape, 0x7F if fmt == "e4m3fn" else 0x80)
    code = np.where(over, over_code, code)
    # e4m3fnuz has one zero and one NaN (0x80), both unsigned.
    unsigned = (fmt == "e4m3fnuz") & ((code == 0) | (over & (not saturate)))
    sign = np.where(neg & ~unsigned, 0x80, 0)
    out = (code | sign).astype(np.uint8)
    nan_code = 0x80 if fmt == "e4m3fnuz" else 0x7F
    return cast("NDArray[Any]", np.where(np.isnan(x), nan_code, out).astype(np.uint8))
