"""attncheck.check(): a passing subject returns, a failing one raises with the report's summary
(failing property, worst elements, shrunk case, reproduce command), a crashing one says so."""
import os

import numpy as np
import pytest

import attncheck as ac


def test_passing_subject(binary, tmp_path):
    import numpy_subjects
    r = ac.check(numpy_subjects.merge_np, cases=20, report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0
    assert {x["property"] for x in r.results} >= {"accuracy", "merge_sentinels"}
    assert os.path.exists(tmp_path / "r" / "report.md")


def _merge_without_empty_guard(call):
    # The chunked-prefill bug: weights e^(lse - max) with max = -inf when both states are empty.
    import numpy_subjects
    out, lse = numpy_subjects.merge_states(call)
    pl = ac.helpers.lse_from_layout(np.asarray(call.prefix_lse), call.lse_layout)
    sl = ac.helpers.lse_from_layout(np.asarray(call.suffix_lse), call.lse_layout)
    both = (pl == -np.inf) & (sl == -np.inf)
    out = np.where(both[..., None], np.array(np.nan, out.dtype), out)
    lse = ac.helpers.lse_to_layout(np.where(both, np.float32(np.nan), ac.helpers.lse_from_layout(lse, call.lse_layout)), call.lse_layout)
    return out, lse


unguarded_merge = ac.subject(name="merge-np-unguarded", ops="merge", dtypes=("fp32",))(_merge_without_empty_guard)


def test_failing_subject_reports_property_worst_elements_case_and_reproduce(binary, tmp_path):
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(unguarded_merge, properties="merge_sentinels", cases=100, report_dir=tmp_path / "r", binary=binary)
    msg = str(e.value)
    assert "merge-np-unguarded / merge_sentinels: failed" in msg
    assert "worst:" in msg and "case file:" in msg and "reproduce:" in msg and "--worker" in msg
    assert e.value.result.exit_code == 1


def test_crashing_subject_is_reported_as_transport_failure(binary, tmp_path):
    import crashing_subjects
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(crashing_subjects.merge_np_abort, properties=["merge_sentinels"], cases=5, report_dir=tmp_path / "r",
                 binary=binary)
    assert "crashed (transport_failed)" in str(e.value) and "SIGABRT" in str(e.value)
    assert e.value.result.exit_code == 3


def test_not_a_subject_is_a_clear_error():
    with pytest.raises(TypeError, match="module:object"):
        ac.check(lambda: None, binary="/bin/true")


def test_pytest_fixture(attncheck_check, binary):
    import numpy_subjects
    r = attncheck_check(numpy_subjects.merge_np, properties=["accuracy"], cases=10, binary=binary)
    assert r.exit_code == 0
