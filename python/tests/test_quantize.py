# The KV-cache quantiser through the worker protocol: quantize-np (examples/python_worker/
# quantize_worker.py, built on dtypes.float_to_fp8) passes quantize_exact; the same subject casting
# without saturation behind a saturating declaration fails it with the class "overflow".
# dtypes.float_to_fp8 itself against a search for the nearest code, ties to the even code.
import numpy as np

import attncheck as ac
from attncheck.dtypes import float_to_fp8, fp8_to_float64


def test_float_to_fp8_is_the_nearest_code_ties_to_even():
    rng = np.random.default_rng(2)
    for fmt, largest in (("e4m3fn", 448.0), ("e5m2", 57344.0), ("e4m3fnuz", 240.0)):
        table = fp8_to_float64(np.arange(256), fmt)
        finite = [c for c in range(128) if np.isfinite(table[c])]
        vals = table[finite]
        xs = np.concatenate([rng.standard_normal(4000) * np.exp2(rng.integers(-18, 16, 4000)),
                             vals, (vals[:-1] + vals[1:]) / 2])
        xs = xs[np.abs(xs) <= largest]
        got = fp8_to_float64(float_to_fp8(xs, fmt, saturate=False), fmt)
        for x, g in zip(xs, got):
            d = np.abs(vals - abs(x))
            near = [finite[i] for i in np.flatnonzero(d == d.min())]
            want = table[min(near, key=lambda c: c & 1)]  # of two, the even code
            assert abs(g) == want, (fmt, x, g, want)
    # Hand-derived edges: e4m3fn's 464 is the tie between 448 and 480 (even: 448); 465 overflows.
    assert list(float_to_fp8(np.array([464.0, 465.0, 465.0]), "e4m3fn", saturate=False)) == [0x7E, 0x7F, 0x7F]
    assert int(float_to_fp8(np.array([465.0]), "e4m3fn", saturate=True)[0]) == 0x7E
    assert int(float_to_fp8(np.array([-0.0]), "e4m3fnuz", saturate=True)[0]) == 0x00


def test_quantize_np_passes_quantize_exact(binary, tmp_path):
    import quantize_worker
    r = ac.check(quantize_worker.quantize_np, properties=["quantize_exact"], cases=150, seed=4,
                 report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0 and [x["status"] for x in r.results] == ["passed"]
    assert r.results[0]["cases_run"] == 150


def _nan_cast(call):
    import quantize_worker
    return quantize_worker.quantize(call, saturate=False)


quantize_nan_cast = ac.subject(name="quantize-np-nan-cast", ops="quantize", dtypes=("fp32", "fp16", "bf16"),
                               head_size_range=(1, 1024), kv_dtypes=("e4m3fn", "e5m2", "e4m3fnuz"),
                               fp8=("descale_per_kv_head", "saturate"))(_nan_cast)


def test_a_nan_cast_behind_a_saturating_declaration_fails(binary, tmp_path):
    r = ac.check(quantize_nan_cast, properties=["quantize_exact"], cases=60, seed=4, report_dir=tmp_path / "r",
                 binary=binary, raise_on_failure=False, extra_args=["--shrink-time", "5"])
    assert r.exit_code == 1
    assert r.results[0]["status"] == "failed" and r.results[0]["failure_class"] == "overflow"


# A merge's FP8 output through the worker protocol: the numpy merge (numpy_subjects.merged, in
# float64) with out rounded to float32, divided by output_scale in float32 and cast by float_to_fp8,
# saturating, when the call asks for out_dtype, passes every merge property; the same merge ignoring
# output_scale fails accuracy. (Rounding out to the input dtype first, a second rounding the contract
# does not allow, failed accuracy too: bf16's 0x1.ep-6 where 0x1p-5 was the only code allowed.)
def _merge_fp8(use_scale):
    def merge(call):
        import numpy_subjects
        if call.out_dtype is None:
            return numpy_subjects.merge_states(call)
        out, lse = numpy_subjects.merged(call)
        o32 = out.astype(np.float32)
        scale = np.asarray(call.output_scale, np.float32)[0] if use_scale else np.float32(1)
        return float_to_fp8(o32 / scale, call.out_dtype, saturate=True), lse
    return ac.subject(name="merge-np-fp8" + ("" if use_scale else "-no-scale"), ops="merge",
                      dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 512), lse_layout="heads_tokens",
                      kv_dtypes=("e4m3fn", "e5m2"), fp8=("saturate",))(merge)


merge_np_fp8 = _merge_fp8(True)
merge_np_fp8_no_scale = _merge_fp8(False)


def test_a_merge_with_fp8_outputs_passes_and_one_ignoring_the_scale_fails(binary, tmp_path):
    r = ac.check(merge_np_fp8, cases=80, seed=2, report_dir=tmp_path / "ok", binary=binary)
    assert r.exit_code == 0 and all(x["status"] == "passed" for x in r.results)
    # FP8 outputs were judged: the report's statistics name the formats.
    dtypes = {s["dtype"] for x in r.results for s in x.get("stats", [])}
    assert {"e4m3fn", "e5m2"} <= dtypes
    bad = ac.check(merge_np_fp8_no_scale, properties=["accuracy"], cases=60, seed=2, report_dir=tmp_path / "bad",
                   binary=binary, raise_on_failure=False, extra_args=["--shrink-time", "5"])
    assert bad.exit_code == 1 and bad.results[0]["failure_class"] == "accuracy"
