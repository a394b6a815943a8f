"""`test`: ctest with short output, then a summary read from its JUnit file; and that file
read as test results (list --results: step states without running the tests)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Tuple

from .build import build_dir_of
from .common import ROOT, TTY, first_lines, rel, say
from .states import ReachLog, TestResult, classify_skip, skip_message


def junit_results(xml_path: Path) -> List[Tuple[str, TestResult]]:
    """(ctest name, result) of every test in a ctest JUnit file; a skip is classified by its output."""
    out = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name, status = case.get("name", "?"), case.get("status", "")
        text = case.findtext("system-out") or ""
        if status == "run":
            out.append((name, TestResult(name, "passed", "", text)))
        elif status == "notrun" and case.find("skipped") is not None:
            msg = skip_message(text.splitlines())
            out.append((name, TestResult(name, classify_skip(msg), msg, text)))
        else:
            out.append((name, TestResult(name, "failed", first_lines(text, 25), text)))
    return out


def junit_summary(xml_path: Path) -> Tuple[Dict[str, int], Dict[str, int], List[str], Dict[str, str]]:
    """Counts per kind, not-implemented tests per file to edit, failed tests, a reason per kind."""
    counts = {"passed": 0, "failed": 0, "not_implemented": 0, "no_gpu": 0, "unsupported": 0, "skipped": 0}
    files: Dict[str, int] = {}
    failed: List[str] = []
    reasons: Dict[str, str] = {}
    for name, r in junit_results(xml_path):
        kind = "failed" if r.kind == "crashed" else r.kind
        counts[kind] += 1
        if kind == "failed":
            failed.append(name)
        elif kind != "passed":
            reasons.setdefault(kind, r.message.splitlines()[0] if r.message else "")
        if kind == "not_implemented":
            m = re.search(r"-- edit (\S+)", r.message)
            f = rel(m.group(1)) if m else "?"
            files[f] = files.get(f, 0) + 1
    return counts, files, failed, reasons


def cmd_test(args) -> int:
    build, preset = build_dir_of(args)
    junit = build / "course" / "ctest-junit.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    if junit.exists():
        junit.unlink()
    cmd = ["ctest", "--preset", preset] if preset else ["ctest", "--test-dir", str(build)]
    cmd += ["--output-junit", str(junit), *args.extra]
    say(f"[course] {' '.join(cmd[:3])} {' '.join(args.extra)}  (results: {rel(junit)})")
    env = dict(os.environ, CLICOLOR_FORCE="0")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env)
    in_not_run = False
    done = 0
    for line in proc.stdout:
        # Per-test lines are counted, not printed (the summary below says what ran and why
        # the rest skipped); failures and their output are printed as ctest writes them.
        m = re.match(r"^\s*\d+/\d+ Test\s+#\d+: .*?(\S+)\s+\.*\s*(\*\*\*)?(\w+)", line)
        if line.startswith("The following tests did not run:"):
            in_not_run = True
            continue
        if in_not_run:
            if re.match(r"^\s+\d+ - ", line):
                continue
            in_not_run = False
        if re.match(r"^\s*Start\s+\d+: ", line):
            continue
        if m and ("Passed" in line or "Skipped" in line or "Not Run" in line and "Disabled" in line):
            done += 1
            if TTY and done % 25 == 0:
                sys.stdout.write(f"\r\033[K[course] {done} tests run")
                sys.stdout.flush()
            continue
        if TTY:
            sys.stdout.write("\r\033[K")
        sys.stdout.write(line)
    proc.wait()
    if TTY:
        sys.stdout.write("\r\033[K")
    if not junit.exists():
        say(f"[course] ctest wrote no results (exit status {proc.returncode})")
        return proc.returncode or 1
    counts, files, failed, reasons = junit_summary(junit)
    ReachLog(build / "course" / "reaches_stub.json").add(
        [TestResult(n.partition(".")[2], r.kind, r.message) for n, r in junit_results(junit) if n.startswith("exercise.")])
    total = sum(counts.values())
    say(f"\n[course] {total} tests: {counts['passed']} passed, {counts['no_gpu']} skipped because no GPU, "
        f"{counts['not_implemented']} not implemented yet, {counts['failed']} failed"
        + (f", {counts['unsupported']} unsupported here" if counts["unsupported"] else "")
        + (f", {counts['skipped']} skipped (other reasons)" if counts["skipped"] else ""))
    if counts["no_gpu"]:
        say(f"[course]   no GPU: {reasons.get('no_gpu', '')}")
        say("[course]   (without a GPU, the GPU tests of your exercises skip before they reach your code: "
            "`bash scripts/course.sh list` shows each step's state)")
    if counts["unsupported"]:
        say(f"[course]   unsupported here, e.g.: {reasons.get('unsupported', '')}")
    if counts["skipped"]:
        say(f"[course]   skipped, e.g.: {reasons.get('skipped', '')}")
    if files:
        say("[course]   not implemented yet (your exercises), edit:")
        for f, n in sorted(files.items()):
            say(f"[course]     {f}  ({n} test{'s' if n > 1 else ''})")
    if failed:
        say("[course]   failed:")
        for name in failed[:20]:
            say(f"[course]     {name}")
        if len(failed) > 20:
            say(f"[course]     ... and {len(failed) - 20} more")
        say(f"[course]   again, verbosely: ctest {'--preset ' + preset if preset else '--test-dir ' + rel(build)}"
            " --rerun-failed --output-on-failure")
    say("[course] your steps, one by one: bash scripts/course.sh list")
    return proc.returncode
