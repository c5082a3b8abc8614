"""Replays every failure the test suite's failing runs left behind and compares the quoted numbers.

Usage: replay_failures.py NAME=DIR...  (one pair per test registered with ac_failure_source; DIR is
the report directory that test's run wrote: report.json and report.md of `check`, or mutants.json
of `mutants`).

For each failure with a saved case, the reproduce command it records is run as printed (the same
subject source: --plugin, --worker or --mutants) and
  - the replay fails (exit 1) with the failure class, the case context and the message of the run
    (a message the run's shrinking cut short keeps its note after the replay's message);
  - the replay's first element line is the quoted element of report.json (where, inputs, exact,
    rounded, output, and ulp, cancellation-aware ulp and err/budget as printed) and, word for
    word, report.md's quoted element line of that failure (under its "**SUBJECT / PROPERTY**"
    heading, the first failure's, then each further failure's);
  - a message quoting an element ("WHERE: exact X, got Y (ulp U, ..., err/budget R)") quotes that
    same element: the same place, value, output, ulp and err/budget as the replay's element line;
  - a crashed pair's case crashes again on replay (exit 3);
  - a nondeterministic failure (run_to_run: two launches differ) replays as the same class in the
    same context; where its launches differ is the kernel's doing, so its message is not compared.
Over every line seen (messages, report.md's element lines, every element line of every replay):
an err/budget above 1 beside ulp 0 appears only where the allowance is 0 (report.json's "allowed")
and the line says so. Each source must have left at least one failure with a case, so a source that
stops failing, or a report that loses its failures, fails this test too.
"""
import json
import math
import os
import re
import subprocess
import sys

problems = []


def problem(where, text):
    problems.append(f"{where}: {text}")


def g3(x):
    """A stored number as short_number prints it (three significant digits, inf, nan)."""
    if isinstance(x, str):
        x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return "%.3g" % x


def num(x):
    """A number as report.json stores it (a number, or "inf", "-inf", "nan") or as a line prints it."""
    return float(x.replace("-nan", "nan")) if isinstance(x, str) else float(x)


ELEMENT = re.compile(r"^(?P<where>\S+)  inputs (?P<inputs>.*)  exact (?P<exact>\S+)  rounded (?P<rounded>\S+)"
                     r"  output (?P<output>\S+ \([^)]*\))  ulp (?P<ulp>\S+) \(cancellation-aware (?P<cancel>\S+)\)"
                     r"  err/budget (?P<ratio>\S+)(?P<rest>.*)$")
MESSAGE = re.compile(r"(?P<where>[A-Za-z]+\[[^\]]*\]): exact (?P<exact>\S+), got (?P<got>\S+) \(ulp (?P<ulp>[^,]+)"
                     r"(?:, cancel-ulp (?P<cancel>[^,]+))?, err/budget (?P<ratio>[^)]+)\)")


def check_ulp0(where, line, ulp, ratio, allowed=None):
    """err/budget above 1 beside ulp 0: only with a zero allowance, and the line says so."""
    if not (num(ratio) > 1 and num(ulp) == 0):
        return
    if "allowance is 0" not in line and "allowance 0" not in line:
        problem(where, f"err/budget {ratio} beside ulp 0 without saying the allowance is 0: {line}")
    if allowed is not None and float(allowed) != 0:
        problem(where, f"err/budget {ratio} beside ulp 0 with allowance {allowed}: {line}")


def check_message(where, message, allowed=None):
    """Every element a message quotes obeys the ulp-0 rule; returns the first one quoted, if any."""
    found = list(MESSAGE.finditer(message))
    for m in found:
        check_ulp0(where, message, m["ulp"], m["ratio"], allowed)
    return found[0] if found else None


def message_agrees(where, m, el):
    """A message's quoted element against the replay's element line (a parsed ELEMENT match)."""
    if m["where"] != el["where"]:
        problem(where, f"the message quotes {m['where']}, the replay {el['where']}")
        return
    # The message prints the exact value to 12 digits, the element line to 36.
    ex_m, ex_l = num(m["exact"]), num(el["exact"])
    if not (ex_m == ex_l or (math.isfinite(ex_l) and abs(ex_m - ex_l) <= 1e-11 * abs(ex_l))):
        problem(where, f"exact {m['exact']} in the message, {el['exact']} in the replay")
    out_l = el["output"].split("(", 1)[1].rstrip(")")
    got_m, got_l = float.fromhex(m["got"].replace("-nan", "nan")), float.fromhex(out_l.replace("-nan", "nan"))
    if not (got_m == got_l or (math.isnan(got_m) and math.isnan(got_l))):
        problem(where, f"output {m['got']} in the message, {out_l} in the replay")
    for field in ("ulp", "ratio"):
        if g3(num(m[field])) != el[field]:
            problem(where, f"{field} {m[field]} in the message, {el[field]} in the replay")
    if m["cancel"] is not None and g3(num(m["cancel"])) != el["cancel"]:
        problem(where, f"cancel-ulp {m['cancel']} in the message, {el['cancel']} in the replay")


def replay(where, command):
    """Runs a reproduce command as printed; returns (exit code, the FAIL line's match, element lines)."""
    try:
        p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        problem(where, f"replay did not finish in 120 s: {command}")
        return None, None, [], ""
    fail_line = None
    elements = []
    for line in p.stdout.splitlines():
        m = re.match(r"^(?P<path>\S+): (?P<subject>\S+): FAIL (?P<cls>\S+): (?P<text>.*)$", line)
        if m and fail_line is None:
            fail_line = m
        if line.startswith("  "):
            e = ELEMENT.match(line[2:])
            if e:
                elements.append(e)
    for e in elements:
        check_ulp0(where + " (replay element line)", e.group(0), e["ulp"], e["ratio"])
    if fail_line:
        check_message(where + " (replay verdict)", fail_line["text"])
    # The replay's own reproduce line loads the subject the same way the command it ran did.
    for line in p.stdout.splitlines():
        if line.strip().startswith("reproduce: "):
            for flag in ("--mutants", "--isolate", "--plugin", "--worker"):
                if f" {flag}" in command and f" {flag}" not in line:
                    problem(where, f"the replay's reproduce line drops {flag}: {line.strip()}")
    return p.returncode, fail_line, elements, p.stdout + p.stderr


def same_text(where, run_message, replay_message):
    """The run's message, or the run's message cut short by its shrink limit, is the replay's."""
    if run_message == replay_message:
        return
    if run_message.startswith(replay_message + " (shrinking cut after "):
        return
    problem(where, f"message differs:\n    run:    {run_message}\n    replay: {replay_message}")


def check_failure(where, f, md_line):
    """One failure of report.json (an entry's first failure or a further one) and report.md's quoted
    element line for it (None where report.md has none); True if replayed."""
    command = f.get("reproduce_command", "")
    w = f.get("worst_element")
    context, message, cls = f.get("context", ""), f.get("message", ""), f.get("failure_class", "")
    first = check_message(where + " (report.json message)", message, w.get("allowed") if w else None)
    if w:
        check_ulp0(where + " (report.json)", message, w["ulp"], w["err_budget"], w["allowed"])
    if " replay " not in command:
        return False
    rc, fail, elements, out = replay(where, command)
    if rc is None:
        return True
    if rc != 1 or fail is None:
        problem(where, f"replay exited {rc}, not 1 with a FAIL line:\n{out}")
        return True
    if fail["cls"] != cls:
        problem(where, f"replay's class {fail['cls']}, the run's {cls}")
    expected_prefix = context + ": " if context else ""
    if not fail["text"].startswith(expected_prefix):
        problem(where, f"replay's line lacks the run's context '{context}': {fail['text']}")
    if cls == "nondeterministic":
        # Two launches of a nondeterministic kernel differ where that kernel's launches happen to
        # differ; the replay's launches are others than the run's, so only the verdict must agree.
        return True
    same_text(where, message, fail["text"][len(expected_prefix):])
    if not w:
        return True
    if not elements:
        problem(where, f"report.json quotes {w['where']}, the replay prints no element line:\n{out}")
        return True
    el = elements[0]
    for field, key in (("where", "where"), ("inputs", "inputs"), ("exact", "exact"), ("rounded", "rounded_exact"),
                       ("output", "output")):
        if el[field] != w[key]:
            problem(where, f"{field}: report.json {w[key]}, replay {el[field]}")
    for field, key in (("ulp", "ulp"), ("cancel", "cancel_ulp"), ("ratio", "err_budget")):
        if el[field] != g3(w[key]):
            problem(where, f"{field}: report.json {g3(w[key])}, replay {el[field]}")
    if el.group(0) != md_line:
        problem(where, f"report.md quotes\n    {md_line}\n  the replay prints\n    {el.group(0)}")
    if first:
        message_agrees(where, first, el)
    return True


def check_report(name, d):
    report = json.load(open(os.path.join(d, "report.json")))
    # report.md's quoted element lines under each "**SUBJECT / PROPERTY**" heading: the first
    # failure's, then each further failure's, in report.json's order.
    md = {}
    key = None
    for line in open(os.path.join(d, "report.md")).read().splitlines():
        h = re.match(r"^\*\*(.+?) / (.+?)\*\*", line)
        if h:
            key = (h[1], h[2])
        q = re.match(r"^\s*- quoted element: `([^`]*)`$", line)
        if not q:
            continue
        md.setdefault(key, []).append(q[1])
        e = ELEMENT.match(q[1])
        if not e:
            problem(name, f"report.md's quoted element does not read as an element line: {q[1]}")
            continue
        check_ulp0(name + " (report.md)", q[1], e["ulp"], e["ratio"])
    replayed = crashes = 0
    for r in report["results"]:
        where = f"{name}: {r['subject']} / {r['property']}"
        if r["status"] == "crashed":
            files = r.get("corpus_files", [])
            if files and " replay " in r.get("reproduce_command", ""):
                rc, _, _, out = replay(where, r["reproduce_command"])
                if rc is not None and rc != 3:
                    problem(where, f"a crashed pair's case replayed with exit {rc}, not 3:\n{out}")
                crashes += 1
            continue
        if r["status"] != "failed":
            continue
        lines = iter(md.get((r["subject"], r["property"]), []))
        for i, f in enumerate([r] + r.get("other_failures", [])):
            md_line = next(lines, None) if f.get("worst_element") else None
            replayed += check_failure(where + (f" (further failure {i + 1})" if i else ""), f, md_line)
    return replayed, crashes


def check_mutants(name, d):
    replayed = 0
    for row in json.load(open(os.path.join(d, "mutants.json"))):
        g = row.get("gate", {})
        if not g.get("failed"):
            continue
        where = f"{name}: {row['subject']} / {g['killer']}"
        first = check_message(where + " (mutants.json message)", g["message"])
        if " replay " not in g.get("reproduce", ""):
            continue
        rc, fail, elements, out = replay(where, g["reproduce"])
        replayed += 1
        if rc != 1 or fail is None:
            problem(where, f"replay exited {rc}, not 1 with a FAIL line:\n{out}")
            continue
        if fail["cls"] != g["failure_class"]:
            problem(where, f"replay's class {fail['cls']}, the run's {g['failure_class']}")
        # mutants.json keeps no context; the replay's line is "CONTEXT: MESSAGE" (--no-shrink: no cut).
        if not (fail["text"] == g["message"] or fail["text"].endswith(": " + g["message"])):
            problem(where, f"message differs:\n    run:    {g['message']}\n    replay: {fail['text']}")
        if first:
            if not elements:
                problem(where, f"the message quotes {first['where']}, the replay prints no element line")
            else:
                message_agrees(where, first, elements[0])
    return replayed, 0


def main():
    if len(sys.argv) < 2:
        print("usage: replay_failures.py NAME=DIR...")
        return 2
    total = 0
    for arg in sys.argv[1:]:
        name, d = arg.split("=", 1)
        if os.path.exists(os.path.join(d, "report.json")):
            replayed, crashes = check_report(name, d)
        elif os.path.exists(os.path.join(d, "mutants.json")):
            replayed, crashes = check_mutants(name, d)
        else:
            problem(name, f"no report.json or mutants.json in {d}")
            continue
        print(f"{name}: {replayed} failures replayed, {crashes} crashes replayed ({d})")
        if replayed + crashes == 0:
            problem(name, f"no failure with a saved case in {d}: the source no longer fails, or lost its cases")
        total += replayed + crashes
    for p in problems:
        print("FAIL:", p)
    print(f"{total} failures of {len(sys.argv) - 1} sources replayed; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
