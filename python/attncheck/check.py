"""attncheck.check(): run the attncheck binary on a subject served by this SDK and turn its
verdict into a test result.

    def test_my_merge(tmp_path):
        attncheck.check(my_merge, properties=["accuracy", "merge_sentinels"], cases=200, seed=1,
                        report_dir=tmp_path / "attncheck")

The binary is $ATTNCHECK_BIN, else `attncheck` on PATH. The subject must be importable by a fresh
Python process: a module-level object (found through its module's file) or a "module:object" /
"file.py:object" string. On failure it raises AttncheckFailure (an AssertionError, so pytest shows
it as a failed test) whose message holds, per failing (subject, property): the failure class and
message, the shrunk case's size and corpus file, the worst elements (from `attncheck replay`) and
the command that reproduces it. Each call writes its own report directory, so pytest-xdist
workers and -k selections never share one.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Union, cast

from .subject import Subject

# What check() runs: a Subject (or a list of them) defined at module level, or a "module:object" /
# "file.py:object" spec.
SubjectSpec = Union[Subject, Sequence[Subject], str, Any]


class AttncheckFailure(AssertionError):
    """attncheck found a failing property, a crash or a hang (its report says which)."""

    def __init__(self, message: str, result: CheckResult) -> None:
        super().__init__(message)
        self.result = result


class CheckResult:
    """One run of the binary: its exit code, report directory and parsed report.json (None when
    it wrote none), its output, and the command line."""

    def __init__(self, exit_code: int, report_dir: str, report: Optional[Dict[str, Any]], stdout: str, stderr: str,
                 command: str) -> None:
        self.exit_code = exit_code
        self.report_dir = report_dir
        self.report = report
        self.stdout = stdout
        self.stderr = stderr
        self.command = command

    @property
    def results(self) -> List[Dict[str, Any]]:
        return (self.report or {}).get("results", [])

    @property
    def failures(self) -> List[Dict[str, Any]]:
        return [r for r in self.results if r.get("status") in ("failed", "crashed")]


def find_binary() -> str:
    b = os.environ.get("ATTNCHECK_BIN") or shutil.which("attncheck")
    if not b:
        raise FileNotFoundError("attncheck binary not found: set ATTNCHECK_BIN or put attncheck on PATH")
    return b


def _spec_of(obj: SubjectSpec) -> str:
    if isinstance(obj, str):
        return obj
    mod = sys.modules.get(getattr(obj, "__module__", None) or "")
    if isinstance(obj, Subject) and getattr(obj, "function", None) is not None:
        mod = sys.modules.get(obj.function.__module__)
    if mod is None or not getattr(mod, "__file__", None):
        raise TypeError(f"{obj!r}: cannot find the module that defines it; pass 'module:object' or 'file.py:object'")
    for name, value in vars(mod).items():
        if value is obj:
            return f"{os.path.abspath(cast(str, mod.__file__))}:{name}"
    raise TypeError(f"{obj!r} is not a module-level name of {mod.__file__}; pass 'module:object' or 'file.py:object'")


def worker_command(spec: str, python: Optional[str] = None) -> str:
    return f"{shlex.quote(python or sys.executable)} -m attncheck.worker {shlex.quote(spec)}"


def _subject_names(obj: SubjectSpec) -> List[str]:
    # Names of created subjects: validated strings.
    if isinstance(obj, Subject):
        return [cast(str, obj.name)]
    if isinstance(obj, (list, tuple)) and all(isinstance(s, Subject) for s in obj):
        return [cast(str, s.name) for s in obj]
    return []


def check(subject_or_callable: SubjectSpec, properties: Union[str, Sequence[str], None] = None, cases: int = 100,
          seed: int = 1, *, suite: Optional[str] = None, report_dir: Union[str, os.PathLike[str], None] = None,
          call_timeout: Optional[float] = None, max_keys: Optional[int] = None, extra_args: Sequence[str] = (),
          binary: Optional[str] = None, python: Optional[str] = None, raise_on_failure: bool = True) -> CheckResult:
    """Runs `attncheck check --worker ...` on the subject; returns a CheckResult, or raises
    AttncheckFailure when attncheck exits non-zero."""
    __tracebackhide__ = True  # noqa: F841 (pytest: the traceback ends at the caller's line)
    spec = _spec_of(subject_or_callable)
    binary = binary or find_binary()
    if report_dir is None:
        report_dir = tempfile.mkdtemp(prefix="attncheck-report-")
    report_dir = os.fspath(report_dir)
    worker = worker_command(spec, python)
    cmd = [binary, "check", "--worker", worker, "--report-dir", report_dir, "--no-plots", "--seed", str(seed),
           "--cases", str(cases)]
    names = _subject_names(subject_or_callable)
    if names:
        cmd += ["--subject", ",".join(names)]
    if properties:
        cmd += ["--property", ",".join([properties] if isinstance(properties, str) else properties)]
    if suite:
        cmd += ["--suite", suite]
    if call_timeout is not None:
        cmd += ["--call-timeout", str(call_timeout)]
    if max_keys is not None:
        cmd += ["--max-keys", str(max_keys)]
    cmd += list(extra_args)
    env = dict(os.environ)
    # The worker imports this package from where it is (installed or not), and sees the test's
    # sys.path, so whatever the test could import (conftest-added folders included) it can too.
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [pkg_root] + [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("CI", "true")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    report = None
    path = os.path.join(report_dir, "report.json")
    if os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
    result = CheckResult(proc.returncode, report_dir, report, proc.stdout, proc.stderr, shlex.join(cmd))
    if proc.returncode != 0 and raise_on_failure:
        raise AttncheckFailure(_summary(result, binary, worker, env), result)
    return result


def _summary(result: CheckResult, binary: str, worker: str, env: Dict[str, str]) -> str:
    if result.report is None:
        # attncheck stopped before any work (a usage error: exit 2): its one line is the message.
        err = result.stderr.strip().splitlines()
        return (f"attncheck could not run (exit {result.exit_code}): " + (err[-1] if err else "(no output)") +
                "\ncommand: " + result.command)
    lines = [f"attncheck exited {result.exit_code}; report in {result.report_dir}/ (report.md, report.html, "
             "report.json)"]
    for r in result.failures:
        context = f"{r['context']}: " if r.get("context") else ""
        lines.append(f"{r['subject']} / {r['property']}: {r['status']} ({r.get('failure_class', '')}) "
                     f"{context}{r.get('message', '')}")
        if r.get("counterexample"):
            lines.append(f"  shrunk case: {r['counterexample']}")
        for f in r.get("corpus_files", []):
            lines.append(f"  case file: {f}")
            rep = f"{shlex.quote(binary)} replay {shlex.quote(f)} --subject {r['subject']} --worker {shlex.quote(worker)}"
            if r["status"] == "failed":
                try:
                    out = subprocess.run(shlex.split(rep), capture_output=True, text=True, timeout=600, env=env).stdout
                    worst = [ln for ln in out.splitlines() if ln.startswith("  ") and "ulp" in ln][:5]
                    lines += ["  worst: " + w.strip() for w in worst]
                except (OSError, subprocess.TimeoutExpired):
                    pass
            lines.append(f"  reproduce: {rep}")
    for r in result.report.get("results", []):
        if r.get("status") == "interrupted":
            lines.append(f"{r['subject']} / {r['property']}: interrupted")
    return "\n".join(lines)
