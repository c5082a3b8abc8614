"""pytest plugin (registered through the pytest11 entry point when the package is installed):
the `attncheck_check` fixture is attncheck.check() with the report directory under the test's
tmp_path and the report's path recorded as a property of the test (junit-xml shows it), so
parallel shards (pytest-xdist) and -k selections each get their own report."""
import pytest

from .check import check


@pytest.fixture
def attncheck_check(tmp_path, record_property):
    def run(subject_or_callable, **kwargs):
        kwargs.setdefault("report_dir", tmp_path / "attncheck-report")
        record_property("attncheck_report", str(kwargs["report_dir"]))
        return check(subject_or_callable, **kwargs)

    return run
