"""attncheck.check(): a passing subject returns, a failing one raises with the report's summary
(failing property, worst elements, shrunk case, reproduce command), a crashing one says so."""
import os

import pytest

import attncheck as ac


def test_passing_subject(binary, tmp_path):
    import numpy_subjects
    r = ac.check(numpy_subjects.merge_np, cases=20, report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0
    assert {x["property"] for x in r.results} >= {"accuracy", "merge_sentinels"}
    assert os.path.exists(tmp_path / "r" / "report.md")


def test_failing_subject_reports_property_worst_elements_case_and_reproduce(binary, tmp_path):
    with pytest.raises(ac.AttncheckFailure) as e:
        # A "module:object" spec: the worker imports it from the test's sys.path.
        ac.check("unguarded_merge:merge_np_unguarded", properties="merge_sentinels", cases=100, report_dir=tmp_path / "r",
                 binary=binary)
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


@pytest.mark.parametrize("prop", ["accuracy", "no_spurious_nonfinite", "merge_sentinels", "lse_convention"])
def test_pytest_fixture_runs_in_parallel_with_its_own_report(attncheck_check, binary, prop, tmp_path):
    # Under pytest-xdist (`pytest -n 2`) these run at once in separate processes. Each must write
    # its own report: a shared directory would leave another test's property in this one's report.
    import json
    import numpy_subjects
    r = attncheck_check(numpy_subjects.merge_np, properties=[prop], cases=10, binary=binary)
    assert r.exit_code == 0
    with open(tmp_path / "attncheck-report" / "report.json") as f:
        report = json.load(f)
    assert [x["property"] for x in report["results"]] == [prop]
