"""pytest plugin: the `attncheck_check` fixture is attncheck.check() with the report directory under
the test's tmp_path and the report's path recorded as a property of the test (junit-xml shows it),
so parallel shards (pytest-xdist) and -k selections each get their own report.

Two routes load it, and both may be present at once:
  installed (`pip install ./python`)    pytest finds it through the pytest11 entry point
  not installed (PYTHONPATH=python)     `pytest -p attncheck.pytest_plugin`, or in a conftest.py:
                                        pytest_plugins = ["attncheck.pytest_plugin"]
The entry point carries the module's own name, so `-p attncheck.pytest_plugin` where the entry point
is also seen (an installed copy, or egg-info metadata beside the package) finds the plugin already
loaded under that name and does nothing, instead of registering it twice.

A failing check's traceback stops at the user's test: the SDK's frames are hidden
(__tracebackhide__), so pytest prints the test's line and attncheck's message, not the SDK's
source. `pytest --full-trace` shows them again.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest

from .check import CheckResult, SubjectSpec, check


@pytest.fixture
def attncheck_check(tmp_path: Any, request: Any) -> Callable[..., CheckResult]:
    def run(subject_or_callable: SubjectSpec, **kwargs: Any) -> CheckResult:
        __tracebackhide__ = True  # noqa: F841 (read by pytest)
        kwargs.setdefault("report_dir", tmp_path / "attncheck-report")
        # The test's user_properties, which junit-xml writes and xdist carries back: pytest's
        # record_property fixture appends to the same list but warns under junit_family xunit2,
        # pytest's default.
        request.node.user_properties.append(("attncheck_report", str(kwargs["report_dir"])))
        return check(subject_or_callable, **kwargs)

    return run
