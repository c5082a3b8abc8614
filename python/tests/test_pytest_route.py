"""The pytest route as a user meets it, each in a fresh pytest process on a test file of its own:
- the no-install route (PYTHONPATH) with `-p attncheck.pytest_plugin` gives the fixture, also where
  egg-info metadata sits beside the package (what an in-tree `pip install` used to leave), which
  made pytest load the plugin twice ("Plugin already registered");
- a failing check's traceback shows the user's test line and attncheck's message, not the SDK's
  source (about 40 lines of check() before);
- a usage error gives one message, not "exit 2; report in ..." and then "no report"."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import attncheck

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(attncheck.__file__)))
EXAMPLES = os.path.join(os.path.dirname(PKG_ROOT), "examples", "python_worker")


def run_pytest(tmp_path, test_source, pythonpath, *args):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(test_source))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath))
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    # -p no:xdist: the child is one process whatever the parent's -n.
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
                           str(tmp_path / "test_user.py")], capture_output=True, text=True, env=env, cwd=tmp_path)


def copy_of_package(tmp_path, with_egg_info):
    """The package in a folder of its own, as a PYTHONPATH route sees it; with_egg_info adds the
    metadata an in-tree build leaves beside it, entry point included."""
    root = tmp_path / "pkg"
    shutil.copytree(os.path.join(PKG_ROOT, "attncheck"), root / "attncheck",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if with_egg_info:
        info = root / "attncheck.egg-info"
        info.mkdir()
        (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: attncheck\nVersion: 0.1.0\n")
        cfg = open(os.path.join(PKG_ROOT, "setup.cfg")).read()
        # The entry point exactly as setup.cfg declares it.
        line = [ln.strip() for ln in cfg.split("pytest11 =", 1)[1].splitlines() if "=" in ln][0]
        (info / "entry_points.txt").write_text(f"[pytest11]\n{line}\n")
    return str(root)


FIXTURE_TEST = """
    def test_fixture_is_there(attncheck_check):
        assert callable(attncheck_check)
"""


@pytest.mark.parametrize("with_egg_info", [False, True])
def test_no_install_route_has_the_fixture(tmp_path, with_egg_info):
    pkg = copy_of_package(tmp_path, with_egg_info)
    r = run_pytest(tmp_path, FIXTURE_TEST, [pkg], "-p", "attncheck.pytest_plugin", "-p", "no:xdist")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already registered" not in r.stdout + r.stderr


def test_failing_check_traceback_is_the_users(binary, tmp_path):
    pkg = copy_of_package(tmp_path, False)
    r = run_pytest(tmp_path, f"""
        import os
        os.environ["ATTNCHECK_BIN"] = {binary!r}

        def test_planted_bug(attncheck_check):
            attncheck_check("unguarded_merge:merge_np_unguarded", properties="merge_sentinels", cases=100)
    """, [pkg, EXAMPLES], "-p", "attncheck.pytest_plugin", "-p", "no:xdist")
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert 'attncheck_check("unguarded_merge:merge_np_unguarded"' in out  # the user's line
    assert "merge-np-unguarded / merge_sentinels: failed" in out  # attncheck's message
    # The SDK's own source is not printed: no line of check() or of the fixture's body.
    for sdk_line in ("proc = subprocess.run(", "raise AttncheckFailure(", "kwargs.setdefault(\"report_dir\""):
        assert sdk_line not in out, out
    # The failure line carries the case's context (its dtype and which merge side is empty).
    assert re.search(r"\d+ tokens? x \d+ heads?, d=\d+, row \d+: prefix ", out), out


def test_usage_error_is_one_message(binary, tmp_path):
    with pytest.raises(attncheck.AttncheckFailure) as e:
        attncheck.check("unguarded_merge:merge_np_unguarded", properties="no_such_property", cases=1,
                        report_dir=tmp_path / "r", binary=binary)
    msg = str(e.value)
    assert msg.startswith("attncheck could not run (exit 2): ") and "no_such_property" in msg, msg
    assert "no report" not in msg and "report in" not in msg
