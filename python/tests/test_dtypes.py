import numpy as np

import attncheck as ac


def test_bf16_round_trip_and_rounding():
    # Expected bit patterns worked out by hand from the bf16 format (8 significand bits).
    cases = {1.0: 0x3F80, 1 + 2**-8: 0x3F80, 1 + 3 * 2**-9: 0x3F81, 1 + 2**-7 + 2**-8: 0x3F82, -2.0: 0xC000,
             2.0**-133: 0x0001, 2.0**-134: 0x0000, 3e38: 0x7F62, 3.4e38: 0x7F80}
    for x, bits in cases.items():
        assert int(ac.float64_to_bf16(np.array([x]))[0]) == bits, x
    assert int(ac.float32_to_bf16(np.array([1 + 2**-8], np.float32))[0]) == 0x3F80
    assert ac.bf16_to_float32(np.array([0x3F81], np.uint16))[0] == np.float32(1 + 2**-7)
    assert np.isnan(ac.bf16_to_float32(ac.float32_to_bf16(np.array([np.nan], np.float32))))[0]
    # One rounding from float64: a value just above a tie rounds up, where float64 -> float32 -> bf16
    # would first round it onto the tie and then to even (down).
    x = 1 + 2**-8 + 2**-30
    assert int(ac.float64_to_bf16(np.array([x]))[0]) == 0x3F81


def test_fp8_codes_decode_exactly():
    # e4m3fn: (1 + m/8) 2^(e-7), subnormals m/8 2^-6, 0x7f NaN, no infinity; e5m2: (1 + m/4) 2^(e-15),
    # subnormals m/4 2^-14, 0x7c inf, 0x7d..0x7f NaN.
    e4 = ac.fp8_to_float64(np.array([0x00, 0x01, 0x38, 0x44, 0x7E, 0xB8], np.uint8), "e4m3fn")
    assert e4.tolist() == [0.0, 2.0 ** -9, 1.0, 3.0, 448.0, -1.0]
    assert np.isnan(ac.fp8_to_float64(np.array([0x7F, 0xFF], np.uint8), "e4m3fn")).all()
    e5 = ac.fp8_to_float64(np.array([0x01, 0x3C, 0x7B, 0x7C, 0xFC], np.uint8), "e5m2")
    assert e5.tolist() == [2.0 ** -16, 1.0, 57344.0, np.inf, -np.inf]
    assert np.isnan(ac.fp8_to_float64(np.array([0x7D, 0x7F], np.uint8), "e5m2")).all()
    # e4m3fnuz: (1 + m/8) 2^(e-8), subnormals m/8 2^-7, 0x80 its only NaN (no -0), 0x7f = 240.
    fnuz = ac.fp8_to_float64(np.array([0x00, 0x01, 0x38, 0x40, 0x44, 0x7F, 0xFF, 0xB8], np.uint8), "e4m3fnuz")
    assert fnuz.tolist() == [0.0, 2.0 ** -10, 0.5, 1.0, 1.5, 240.0, -240.0, -0.5]
    assert np.isnan(ac.fp8_to_float64(np.array([0x80], np.uint8), "e4m3fnuz")).all()
