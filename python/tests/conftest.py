# The SDK's tests import the package from this checkout and the example subjects beside it;
# tests that run the binary need ATTNCHECK_BIN (ctest sets it) or attncheck on PATH.
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "python_worker")
sys.path.insert(0, EXAMPLES)


@pytest.fixture
def binary():
    b = os.environ.get("ATTNCHECK_BIN") or shutil.which("attncheck")
    if not b:
        pytest.skip("attncheck binary not found (set ATTNCHECK_BIN)")
    return b


# The fixture of the pytest plugin, for runs where the package is not installed (no entry point).
from attncheck.pytest_plugin import attncheck_check  # noqa: E402,F401
