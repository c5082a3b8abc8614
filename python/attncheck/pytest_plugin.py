"""pytest plugin (registered through the pytest11 entry point when the package is installed):
the `attncheck_check` fixture is attncheck.check() with the report directory under the test's
tmp_path and the report's path recorded as a property of the test (junit-xml shows it), so
parallel shards (pytest-xdist) and -k selections each get their own report."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from .check import CheckResult, SubjectSpec, check


@pytest.fixture
def attncheck_check(tmp_path: Any, request: Any) -> Callable[..., CheckResult]:
    def run(subject_or_callable: SubjectSpec, **kwargs: Any) -> CheckResult:
        kwargs.setdefault("report_dir", tmp_path / "attncheck-report")
        # The test's user_properties, which junit-xml writes and xdist carries back: pytest's
        # record_property fixture appends to the same list but warns under junit_family xunit2,
        # pytest's default.
        request.node.user_properties.append(("attncheck_report", str(kwargs["report_dir"])))
        return check(subject_or_callable, **kwargs)

    return run
