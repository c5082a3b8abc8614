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
