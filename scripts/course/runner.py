"""Course: the steps and, once the test binaries are built, which exercise tests belong to
each; running a step's tests with GoogleTest (JSON results, skip reasons from the output)."""
from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .build import build_dir_of, build_targets
from .catalog import (Module, Step, exercise_targets, find_step, load_modules, load_steps, step_of_param,
                      step_suites)
from .common import CourseError, rel
from .junit import junit_results
from .states import ReachLog, StepState, TestResult, classify_skip, skip_message, state_of


def list_gtests(binary: Path) -> List[str]:
    r = subprocess.run([str(binary), "--gtest_list_tests"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, cwd=binary.parent, timeout=120)
    if r.returncode != 0:
        raise CourseError(f"{rel(binary)} --gtest_list_tests failed:\n{r.stdout[-2000:]}")
    names, suite = [], None
    for line in r.stdout.splitlines():
        if not line.strip() or line.startswith("[course]"):
            continue
        if not line.startswith(" "):
            suite = line.split("  #")[0].strip()
        elif suite:
            names.append(suite + line.split("  #")[0].strip())
    return names


class Course:
    """The steps, and (once the binaries are built) which exercise tests belong to each."""

    def __init__(self, args):
        self.modules = load_modules()
        self.steps = load_steps(self.modules)
        self.build, self.preset = build_dir_of(args)
        self._tests: Dict[str, Dict[Path, List[str]]] = {}
        self._listed = set()
        self.reach = ReachLog(self.build / "course" / "reaches_stub.json")

    def find(self, key: str) -> Step:
        """The step `key` names (catalog.find_step): CourseError, status 2, when none."""
        return find_step(self.steps, key)

    def targets(self, modules: List[Module]) -> List[str]:
        return [t for m in modules for t, _ in exercise_targets(m)]

    def build_modules(self, modules: List[Module]) -> None:
        build_targets(self.build, self.preset, self.targets(modules))

    def owner_of(self, mod: Module, suites: Dict[str, str], name: str) -> Optional[Step]:
        """The step of `mod` a gtest name belongs to: a "Tests:" pattern of the hint store,
        else the step its parameter names in a step-parametrized suite (`suites`: step_suites)."""
        steps = [s for s in self.steps if s.module is mod]
        for s in steps:
            if any(fnmatch.fnmatchcase(name, p) for p in s.test_patterns):
                return s
        if name.count("/") >= 2:
            op = suites.get(name.split(".", 1)[0])
            if op:
                sname = step_of_param(name.rsplit("/", 1)[1], [s.name for s in steps if s.op == op and s.in_table])
                return next((s for s in steps if s.op == op and s.name == sname), None)
        return None

    def map_tests(self, mod: Module) -> None:
        """Assigns every exercise test of `mod` to its step (needs the built binaries)."""
        if mod.dir in self._listed:
            return
        self._listed.add(mod.dir)
        for s in self.steps:
            if s.module is mod:
                self._tests.setdefault(s.id, {})
        for target, src in exercise_targets(mod):
            binary = self.build / mod.dir / target
            if not binary.exists():
                raise CourseError(f"{rel(binary)} is missing: build it first (`bash scripts/course.sh check STEP` does)")
            suites = step_suites(mod, src)
            for name in list_gtests(binary):
                owner = self.owner_of(mod, suites, name)
                if owner is not None:
                    self._tests[owner.id].setdefault(binary, []).append(name)

    def tests_of(self, step: Step) -> Dict[Path, List[str]]:
        self.map_tests(step.module)
        return self._tests.get(step.id, {})

    def results_from_junit(self, path: Path) -> Dict[str, List[TestResult]]:
        """Step id -> the results of its exercise tests in a ctest JUnit file (`course.sh test`
        writes <build>/course/ctest-junit.xml), assigned to steps without the binaries."""
        suites = {m.dir: {k: v for _, src in exercise_targets(m) for k, v in step_suites(m, src).items()}
                  for m in self.modules}
        out: Dict[str, List[TestResult]] = {s.id: [] for s in self.steps}
        for ctest_name, r in junit_results(path):
            impl, _, r.name = ctest_name.partition(".")
            if impl != "exercise":
                continue
            for m in self.modules:
                owner = self.owner_of(m, suites[m.dir], r.name)
                if owner is not None:
                    out[owner.id].append(r)
                    break
        return out


def split_gtest_output(stdout: str) -> Dict[str, Tuple[str, List[str]]]:
    """test -> (end marker: OK/FAILED/SKIPPED/'' when it never ended, its output lines)."""
    out: Dict[str, Tuple[str, List[str]]] = {}
    cur, lines = None, []
    for line in stdout.splitlines():
        m = re.match(r"^\[ RUN      \] (\S+)", line)
        if m:
            cur, lines = m.group(1), []
            out[cur] = ("", lines)
            continue
        m = re.match(r"^\[\s*(OK|FAILED|SKIPPED)\s*\] (\S+)", line)
        if m and cur and m.group(2) == cur:
            out[cur] = (m.group(1), lines)
            cur = None
            continue
        if cur:
            lines.append(line)
    return out


def run_gtests(binary: Path, names: List[str], timeout: int) -> List[TestResult]:
    with tempfile.TemporaryDirectory(prefix="course-") as tmp:
        jpath = Path(tmp) / "results.json"
        cmd = [str(binary), "--gtest_filter=" + ":".join(names), f"--gtest_output=json:{jpath}", "--gtest_color=no"]
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               cwd=binary.parent, timeout=timeout)
            stdout, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            stdout = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc = None
        results_json = json.loads(jpath.read_text()) if jpath.exists() else None
    per_test = split_gtest_output(stdout)
    results: List[TestResult] = []
    if results_json is not None:
        for suite in results_json.get("testsuites", []):
            for t in suite.get("testsuite", []):
                name = f"{suite['name']}.{t['name']}"
                marker, lines = per_test.get(name, ("", []))
                text = "\n".join(lines)
                if t.get("failures"):
                    msg = "\n".join(f.get("failure", "") for f in t["failures"]).strip()
                    results.append(TestResult(name, "failed", msg, text))
                elif t.get("result") == "SKIPPED" or marker == "SKIPPED":
                    msg = skip_message(lines)
                    results.append(TestResult(name, classify_skip(msg), msg, text))
                elif t.get("status") == "NOTRUN":
                    continue
                else:
                    results.append(TestResult(name, "passed", "", text))
        return results
    # No JSON: the binary died (crash, abort, timeout). Tests that ended keep their result.
    why = "timed out after %d s" % timeout if rc is None else (
        f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}")
    for name in names:
        marker, lines = per_test.get(name, (None, []))
        if marker == "OK":
            results.append(TestResult(name, "passed"))
        elif marker == "SKIPPED":
            msg = skip_message(lines)
            results.append(TestResult(name, classify_skip(msg), msg))
        elif marker == "FAILED":
            results.append(TestResult(name, "failed", "\n".join(lines).strip()))
        elif marker == "":
            tail = "\n".join(lines[-15:])
            results.append(TestResult(name, "crashed", f"the test binary {why} during this test\n{tail}".strip()))
        else:
            results.append(TestResult(name, "crashed", f"not run: the test binary {why} before it"))
    return results


def run_step(course: Course, step: Step, timeout: int) -> StepState:
    results: List[TestResult] = []
    for binary, names in sorted(course.tests_of(step).items()):
        results += run_gtests(binary, names, timeout)
    return state_of(results, course.reach.add(results), step.name)
