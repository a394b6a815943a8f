#!/usr/bin/env python3
"""The learner's loop: list, check, next, hint, bench (python3 standard library only).

Run it through scripts/course.sh (`bash scripts/course.sh list`), which finds nvcc first.

Where things come from -- nothing here is a hand-kept list:
  steps       the k...Steps tables of the modules' public headers (module0*/include/*/*.hpp),
              ops in the order their lesson (module README) names their headers, plus the
              helper sections of the hint store (e.g. module 3's row_offset);
  tests       the exercise test binaries (<short>_<test>_exercise, the folder convention of
              course_module_targets) listed with --gtest_list_tests: a parametrized test
              belongs to the step its parameter names (".../smem_tree", ".../vectorized_dot_part0");
  states      the tests' results (--gtest_output=json, skip reasons from their output; or a
              ctest JUnit file, list --results): done, failing, not started (NotImplemented),
              in progress (a test that once reached this step's stub now passes: state_of),
              needs a GPU; <build>/course/reaches_stub.json logs which tests reached a stub;
  hints       exercises/<module>/hints/<op>.md (format: exercises/README.md); how many were
              shown is kept in <build>/course/hints.json (that file is not progress).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
TTY = sys.stdout.isatty()


# Where messages go: stdout, or stderr while stdout carries JSON (list --json).
MESSAGES = sys.stdout


def say(msg: str = "") -> None:
    print(msg, file=MESSAGES, flush=True)


def rel(path) -> str:
    """A path relative to the repository root when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


class CourseError(Exception):
    """A message for the learner; exits with status 1 (2 for usage errors)."""

    def __init__(self, msg: str, status: int = 1):
        super().__init__(msg)
        self.status = status


# ------------------------------------------------------------------ the catalog of steps ----

@dataclass
class Step:
    module: "Module"
    op: str
    name: str
    summary: str
    in_table: bool  # False: a helper section of the hint store (module 3's row_offset)
    test_patterns: List[str] = field(default_factory=list)  # extra tests ("Tests:" line)
    number: int = 0  # 1-based position in the course

    @property
    def id(self) -> str:
        return f"{self.op}/{self.name}"


@dataclass
class Module:
    dir: str  # module01_basics
    short: str  # m01
    title: str  # Module 1: reductions, softmax, matmul
    ops: List[str] = field(default_factory=list)
    tables: Dict[str, str] = field(default_factory=dict)  # kReduceSteps -> reductions
    step_table: Dict[str, List[Tuple[str, str]]] = field(default_factory=dict)  # op -> [(step, summary)]


_TABLE_RE = re.compile(r"inline\s+constexpr\s+StepInfo<\s*\w+\s*>\s+(k\w+Steps)\s*\[\]\s*=\s*\{(.*?)\n\};", re.S)
_ENTRY_RE = re.compile(r'\{\s*\w+::(\w+)\s*,\s*"([^"]+)"\s*,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}', re.S)


def parse_step_tables(header: Path) -> List[Tuple[str, List[Tuple[str, str]]]]:
    """[(table name, [(step name, summary), ...]), ...] of one header."""
    text = header.read_text()
    out = []
    for m in _TABLE_RE.finditer(text):
        steps = []
        for e in _ENTRY_RE.finditer(m.group(2)):
            summary = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', e.group(3)))
            steps.append((e.group(2), summary))
        out.append((m.group(1), steps))
    return out


@dataclass
class HintSection:
    step: str
    tests: List[str]
    hints: List[str]


def hint_file(module: Module, op: str) -> Path:
    return ROOT / "exercises" / module.dir / "hints" / f"{op}.md"


def parse_hint_file(path: Path) -> List[HintSection]:
    """Sections `## <step>`, an optional `Tests: a:b` line, then `### Hint N` blocks."""
    sections: List[HintSection] = []
    cur: Optional[HintSection] = None
    buf: Optional[List[str]] = None
    in_code = False

    def close_hint():
        nonlocal buf
        if cur is not None and buf is not None:
            cur.hints.append("\n".join(buf).strip("\n"))
        buf = None

    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("## ") and not line.startswith("### "):
            close_hint()
            cur = HintSection(line[3:].strip().strip("`"), [], [])
            sections.append(cur)
            continue
        if not in_code and line.startswith("### "):
            close_hint()
            if cur is None:
                raise CourseError(f"{rel(path)}: '{line}' comes before any '## <step>' section")
            buf = []
            continue
        if buf is not None:
            buf.append(line)
        elif cur is not None and line.startswith("Tests:"):
            cur.tests += [p for p in line[len("Tests:"):].strip().split(":") if p]
    close_hint()
    return sections


def load_modules() -> List[Module]:
    modules = []
    for mdir in sorted(p for p in ROOT.glob("module[0-9][0-9]_*") if p.is_dir()):
        cml = (mdir / "CMakeLists.txt").read_text() if (mdir / "CMakeLists.txt").exists() else ""
        m = re.search(r"course_module_targets\(\s*(\w+)\s+(\w+)\s*\)", cml)
        if not m:
            continue
        readme = mdir / "README.md"
        lesson = readme.read_text() if readme.exists() else ""
        title = lesson.splitlines()[0].lstrip("# ").strip() if lesson else mdir.name
        mod = Module(mdir.name, m.group(2), title)
        found = []
        for header in sorted(mdir.glob("include/*/*.hpp")):
            for table, steps in parse_step_tables(header):
                if steps:
                    found.append((header.stem, table, steps))
        # Ops in the order the lesson names their headers; the others after, by name.
        def lesson_pos(op):
            hit = re.search(r"\b" + re.escape(op) + r"\.hpp", lesson)
            return (0, hit.start(), op) if hit else (1, 0, op)
        for op, table, steps in sorted(found, key=lambda f: lesson_pos(f[0])):
            mod.ops.append(op)
            mod.tables[table] = op
            mod.step_table[op] = steps
        modules.append(mod)
    return modules


def load_steps(modules: List[Module]) -> List[Step]:
    """Every step in course order: table steps, with the hint store's helper sections
    inserted before the table step that follows them in the hint file."""
    steps: List[Step] = []
    for mod in modules:
        for op in mod.ops:
            table = mod.step_table[op]
            names = [n for n, _ in table]
            sections = parse_hint_file(hint_file(mod, op)) if hint_file(mod, op).exists() else []
            by_name = {s.step: s for s in sections}
            pending: List[HintSection] = []
            before: Dict[str, List[HintSection]] = {}
            for s in sections:
                if s.step in names:
                    before.setdefault(s.step, []).extend(pending)
                    pending = []
                else:
                    pending.append(s)
            for name, summary in table:
                for h in before.get(name, []):
                    steps.append(Step(mod, op, h.step, "", False, h.tests))
                extra = by_name[name].tests if name in by_name else []
                steps.append(Step(mod, op, name, summary, True, list(extra)))
            for h in pending:
                steps.append(Step(mod, op, h.step, "", False, h.tests))
    for i, s in enumerate(steps, 1):
        s.number = i
    return steps


def find_step(steps: List[Step], key: str) -> Step:
    """`op/step`, a bare step name if unique, or the number `list` shows."""
    if key.isdigit() and 1 <= int(key) <= len(steps):
        return steps[int(key) - 1]
    key = key.strip("/")
    exact = [s for s in steps if s.id == key or f"{s.module.dir}/{s.id}" == key]
    if exact:
        return exact[0]
    bare = [s for s in steps if s.name == key]
    if len(bare) == 1:
        return bare[0]
    if bare:
        raise CourseError(f"'{key}' is a step of several ops: " + ", ".join(s.id for s in bare) +
                          "\nname one of them.", 2)
    near = [s.id for s in steps if key in s.id]
    raise CourseError(f"no step '{key}'" + (f"; did you mean: {', '.join(near[:6])}?" if near else "") +
                      "\n`bash scripts/course.sh list` shows them all.", 2)


# ---------------------------------------------------------------- build folder, building ----

def build_dir_of(args) -> Tuple[Path, str]:
    if getattr(args, "build_dir", None):
        return Path(args.build_dir).resolve(), ""
    if os.environ.get("COURSE_BUILD_DIR"):
        return Path(os.environ["COURSE_BUILD_DIR"]).resolve(), ""
    preset = getattr(args, "preset", None) or os.environ.get("PRESET") or "default"
    return (ROOT / ("build" if preset == "default" else f"build-{preset}")), preset


def ensure_nvcc_on_path() -> None:
    if not shutil.which("nvcc") and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["PATH"] = "/usr/local/cuda/bin:" + os.environ.get("PATH", "")


def configure(build: Path, preset: str) -> None:
    if (build / "CMakeCache.txt").exists():
        return
    if not preset:
        raise CourseError(f"{build} is not a configured build folder (no CMakeCache.txt)")
    say(f"[course] configuring {rel(build)} (cmake --preset {preset})")
    r = subprocess.run(["cmake", "--preset", preset], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        say(r.stdout)
        raise CourseError("configure failed (above)")


def compiler_errors(log: str, limit: int = 60) -> str:
    """The failing commands' diagnostics from a Ninja log, without the command lines."""
    lines = log.splitlines()
    out: List[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("FAILED:"):
            out.append(lines[i])
            i += 1
            # Ninja echoes the failed command next: long, starts with a compiler or `cd`.
            if i < len(lines) and (len(lines[i]) > 160 or re.match(r"^(cd |/|\S*(nvcc|c\+\+|g\+\+|clang))", lines[i])):
                i += 1
            while i < len(lines) and not re.match(r"^\[\d+/\d+\]|^ninja: |^FAILED:", lines[i]):
                out.append(lines[i])
                i += 1
            continue
        i += 1
    if not out:  # not Ninja's format: show the tail
        out = [l for l in lines if l.strip()][-limit:]
    if len(out) > limit:
        out = out[:limit] + [f"... ({len(out) - limit} more lines: rerun `cmake --build` to see them all)"]
    return "\n".join(out)


def build_targets(build: Path, preset: str, targets: List[str]) -> None:
    """Builds only `targets`; on a compile error prints the compiler's lines and stops."""
    configure(build, preset)
    say(f"[course] building {' '.join(targets)}")
    cmd = ["cmake", "--build", str(build), "--target", *targets]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    for line in proc.stdout:
        log.append(line)
        if TTY and re.match(r"^\[\d+/\d+\]", line):
            sys.stdout.write("\r\033[K  " + line.strip()[:110])
            sys.stdout.flush()
    proc.wait()
    if TTY:
        sys.stdout.write("\r\033[K")
    if proc.returncode != 0:
        say(compiler_errors("".join(log)))
        raise CourseError("[course] the build failed (compiler output above): fix it, then run the same "
                          "command again. No test ran: the old binaries do not count.")


def exercise_targets(mod: Module) -> List[Tuple[str, Path]]:
    """(target, source) of the module's exercise test binaries (course_module_targets)."""
    out = []
    for src in sorted((ROOT / mod.dir / "tests").glob("test_*.cpp")):
        out.append((f"{mod.short}_{src.stem[len('test_'):]}_exercise", src))
    for src in sorted((ROOT / mod.dir / "tests").glob("fuzz_*.cpp")):
        out.append((f"{mod.short}_{src.stem}_exercise", src))
    return out


# ------------------------------------------------------------------ tests of each step -----

def _balanced(text: str, start: int) -> str:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return text[start + 1:]


def step_suites(mod: Module, src: Path) -> Dict[str, str]:
    """'Prefix/Suite' -> op for the step-parametrized suites instantiated in `src`."""
    text = src.read_text()
    stem = re.sub(r"^(test|fuzz)_", "", src.stem)
    out = {}
    for m in re.finditer(r"INSTANTIATE_TEST_SUITE_P\s*\(", text):
        args = _balanced(text, m.end() - 1)
        parts = [p.strip() for p in args.split(",", 2)]
        if len(parts) < 3 or not re.search(r"k\w*Steps\b|steps\s*\(", parts[2]):
            continue  # not parametrized by steps (planted bugs, shapes)
        named = [mod.tables[t] for t in re.findall(r"\b(k\w+Steps)\b", parts[2]) if t in mod.tables]
        prefixed = sorted((o for o in mod.ops if stem.startswith(o + "_")), key=len, reverse=True)
        if named:
            op = named[0]
        elif stem in mod.ops:
            op = stem
        elif prefixed:  # test_attention_backward_tc.cpp: a part of op attention_backward's ladder
            op = prefixed[0]
        elif len(mod.ops) == 1:
            op = mod.ops[0]
        else:
            continue
        out[f"{parts[0]}/{parts[1]}"] = op
    return out


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


def step_of_param(param: str, step_names: List[str]) -> Optional[str]:
    """The longest step name that is the parameter or its prefix before '_'."""
    best = None
    for s in step_names:
        if (param == s or param.startswith(s + "_")) and (best is None or len(s) > len(best)):
            best = s
    return best


class Course:
    """The steps, and (once the binaries are built) which exercise tests belong to each."""

    def __init__(self, args):
        self.modules = load_modules()
        self.steps = load_steps(self.modules)
        self.build, self.preset = build_dir_of(args)
        self._tests: Dict[str, Dict[Path, List[str]]] = {}
        self._listed = set()
        self.reach = ReachLog(self.build / "course" / "reaches_stub.json")

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

    def results_from_junit(self, path: Path) -> Dict[str, List["TestResult"]]:
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


# ------------------------------------------------------------------ running and states -----

_NO_GPU_RE = re.compile(r"no (usable )?(CUDA device|NVIDIA GPU)|need(s)? an NVIDIA GPU", re.I)


@dataclass
class TestResult:
    name: str
    kind: str  # passed failed not_implemented no_gpu unsupported skipped crashed
    message: str = ""
    output: str = ""


def classify_skip(message: str) -> str:
    if "not implemented yet" in message:
        return "not_implemented"
    if "unsupported here" in message:
        return "unsupported"
    if _NO_GPU_RE.search(message):
        return "no_gpu"
    return "skipped"


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


def skip_message(lines: List[str]) -> str:
    for i, l in enumerate(lines):
        if re.search(r":\d+: Skipped$", l) or l.strip() == "Skipped":
            return "\n".join(x for x in lines[i + 1:] if x.strip()).strip()
    return "\n".join(lines).strip()


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


STATE_LABEL = {
    "done": "done",
    "failing": "failing",
    "in_progress": "in progress",
    "not_started": "not started",
    "needs_gpu": "needs a GPU",
    "unsupported": "unsupported here",
    "skipped": "skipped",
    "no_tests": "no tests",
}


@dataclass
class StepState:
    state: str
    detail: str = ""
    results: List[TestResult] = field(default_factory=list)
    file: str = ""  # the file to edit (from NotImplemented)

    def count(self, kind: str) -> int:
        return sum(1 for r in self.results if r.kind == kind)


class ReachLog:
    """The exercise tests seen skipping with NotImplemented, with the stub each one reached
    (the exception's first words, "softmax step block_per_row (dim = 1: ...)"). Kept in
    <build>/course/reaches_stub.json by every run: a test that passes on an untouched stub
    (argument checks, rejected layouts) never appears in it."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.stubs: Dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            self.stubs = {}
        if not isinstance(self.stubs, dict):
            self.stubs = {}
        self._lock = threading.Lock()

    def add(self, results: List[TestResult]) -> Dict[str, str]:
        """Logs the results' NotImplemented tests (saved at once); returns the whole log."""
        new = {r.name: r.message.split(" -- edit")[0] for r in results if r.kind == "not_implemented"}
        with self._lock:
            if any(self.stubs.get(k) != v for k, v in new.items()):
                self.stubs.update(new)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(json.dumps(self.stubs, indent=0, sort_keys=True) + "\n")
            return dict(self.stubs)


def state_of(results: List[TestResult], reached: Optional[Dict[str, str]] = None, step: str = "") -> StepState:
    """done: every test passes (or skips for a reason other than a missing GPU or stub);
    failing: one fails or crashes; needs a GPU: some skipped because there is no device;
    in progress: some skip with NotImplemented, and one that passes once reached a stub of
    this step (`reached`: ReachLog.add, test -> the stub it reached, which names its step);
    not started: some skip with NotImplemented and no passing test is such progress -- those
    that pass on an untouched stub check arguments before any launch, or reach another
    step's code."""
    reached = reached or {}
    st = StepState("no_tests", results=results)
    if not results:
        st.detail = "no exercise test belongs to this step"
        return st
    n = len(results)
    bad = [r for r in results if r.kind in ("failed", "crashed")]
    ni = [r for r in results if r.kind == "not_implemented"]
    if ni:
        m = re.search(r"-- edit (\S+)", ni[0].message)
        st.file = rel(m.group(1)) if m else ""
    passed = st.count("passed")
    progress = [r for r in results if r.kind == "passed" and r.name in reached and step in reached[r.name]]
    if bad:
        st.state = "failing"
        st.detail = f"{len(bad)} of {n} tests fail; first: {bad[0].name}\n" + first_lines(bad[0].message, 8)
    elif ni and progress:
        st.state, st.detail = "in_progress", f"{passed} of {n} tests pass, {len(ni)} not implemented yet"
    elif ni:
        st.state, st.detail = "not_started", ni[0].message.split(" -- edit")[0]
    elif st.count("no_gpu"):
        st.state = "needs_gpu"
        st.detail = f"{st.count('no_gpu')} of {n} tests need an NVIDIA GPU" + (
            f" ({passed} CPU tests pass)" if passed else "")
    elif passed:
        other = n - passed
        st.state = "done"
        st.detail = f"{passed} tests pass" + (f", {other} skipped: " + next(
            r.message for r in results if r.kind != "passed").splitlines()[0] if other else "")
    elif st.count("unsupported"):
        st.state, st.detail = "unsupported", next(r.message for r in results if r.kind == "unsupported")
    else:
        st.state, st.detail = "skipped", results[0].message.splitlines()[0] if results[0].message else ""
    return st


def first_lines(text: str, k: int) -> str:
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join(lines[:k]) + (f"\n... ({len(lines) - k} more lines)" if len(lines) > k else "")


def run_step(course: Course, step: Step, timeout: int) -> StepState:
    results: List[TestResult] = []
    for binary, names in sorted(course.tests_of(step).items()):
        results += run_gtests(binary, names, timeout)
    return state_of(results, course.reach.add(results), step.name)


# ------------------------------------------------------------------------- commands ------

def modules_of(course: Course, steps: List[Step]) -> List[Module]:
    seen = []
    for s in steps:
        if s.module not in seen:
            seen.append(s.module)
    return seen


def cmd_list(args) -> int:
    global MESSAGES
    if args.json:
        MESSAGES = sys.stderr
    course = Course(args)
    steps = course.steps
    if args.module:
        steps = [s for s in steps if args.module in (s.module.dir, s.module.short, s.module.dir[:8])]
        if not steps:
            raise CourseError(f"no module '{args.module}' (module01_basics, m01, ...)", 2)
    mods = modules_of(course, steps)
    if args.results:
        recorded = course.results_from_junit(Path(args.results))
        reach = course.reach.add([r for rs in recorded.values() for r in rs])
        states = {s.id: state_of(recorded[s.id], reach, s.name) for s in steps}
    else:
        if not args.no_build:
            course.build_modules(mods)
        for m in mods:
            course.map_tests(m)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {s.id: pool.submit(run_step, course, s, args.timeout) for s in steps}
            states = {}
            for i, s in enumerate(steps, 1):
                states[s.id] = futures[s.id].result()
                if TTY and not args.json:
                    sys.stdout.write(f"\r\033[K[course] running the exercise tests: {i}/{len(steps)} steps")
                    sys.stdout.flush()
        if TTY and not args.json:
            sys.stdout.write("\r\033[K")
    if args.json:
        json.dump([{"number": s.number, "module": s.module.dir, "op": s.op, "step": s.name, "id": s.id,
                    "state": states[s.id].state, "detail": states[s.id].detail, "file": states[s.id].file,
                    "tests": len(states[s.id].results), "passed": states[s.id].count("passed")}
                   for s in steps], sys.stdout, indent=1)
        print()
        return 0
    width = max(len(s.id) for s in steps) + 2
    totals: Dict[str, int] = {}
    for m in mods:
        ms = [s for s in steps if s.module is m]
        counts: Dict[str, int] = {}
        for s in ms:
            counts[states[s.id].state] = counts.get(states[s.id].state, 0) + 1
            totals[states[s.id].state] = totals.get(states[s.id].state, 0) + 1
        summary = ", ".join(f"{v} {STATE_LABEL[k]}" for k, v in sorted(counts.items(), key=lambda kv: list(STATE_LABEL).index(kv[0]))
                            if k != "done")
        say(f"\n{m.title}  [{counts.get('done', 0)}/{len(ms)} done" + (f"; {summary}]" if summary else "]"))
        for s in ms:
            st = states[s.id]
            note = ""
            if st.state == "failing":
                lines = st.detail.splitlines()
                why = " ".join(l.strip() for l in lines[1:4])
                why = re.sub(r"\S*/([\w.]+:\d+)", r"\1:", why)  # path:line -> file:line:
                note = "  " + lines[0] + ("\n" + " " * (7 + width + 15) + "  " + why[:110] if why else "")
            elif st.state in ("not_started", "in_progress") and st.file:
                note = f"  edit {st.file}"
            elif st.state in ("unsupported", "skipped"):
                note = "  " + st.detail.splitlines()[0][:100]
            say(f"  {s.number:3d}  {s.id:<{width}}{STATE_LABEL[st.state]:<15}{note}".rstrip())
    done = totals.get("done", 0)
    say(f"\n{done}/{len(steps)} steps done; " + ", ".join(
        f"{v} {STATE_LABEL[k]}" for k, v in totals.items() if k != "done"))
    if totals.get("needs_gpu"):
        say("Steps marked 'needs a GPU' build, but their tests skip here: they run on an NVIDIA GPU (sm_80+).")
        here = [s.id for s in steps if states[s.id].state not in ("needs_gpu", "done")]
        if here:
            say("Checkable here, without a GPU: " + ", ".join(here))
    # Like `next`: the first step that is not done, passing over those that need a GPU here.
    open_steps = [s for s in steps if states[s.id].state != "done"]
    first_open = next((s for s in open_steps if states[s.id].state != "needs_gpu"), open_steps[0] if open_steps else None)
    if first_open:
        say(f"Next: bash scripts/course.sh check {first_open.id}    (hints: bash scripts/course.sh hint {first_open.id})")
    return 0


def report_step(step: Step, st: StepState, verbose: bool) -> None:
    res = st.results
    say(f"\n== {step.number}. {step.id}  ({step.module.title})")
    if step.summary:
        say(f"   {step.summary}")
    by_kind: Dict[str, List[TestResult]] = {}
    for r in res:
        by_kind.setdefault(r.kind, []).append(r)
    for r in by_kind.get("failed", []) + by_kind.get("crashed", []):
        say(f"\n[ FAILED ] {r.name}\n" + "\n".join("    " + l for l in first_lines(r.message, 25).splitlines()))
    if verbose:
        for r in res:
            if r.kind not in ("failed", "crashed"):
                say(f"[ {r.kind.upper():^8} ] {r.name}" + (f": {r.message.splitlines()[0]}" if r.message else ""))
    skips: Dict[Tuple[str, str], int] = {}
    for r in res:
        if r.kind not in ("passed", "failed", "crashed"):
            key = (r.kind, r.message.split("\n")[0])
            skips[key] = skips.get(key, 0) + 1
    say(f"\n{len(res)} test{'' if len(res) == 1 else 's'}: {len(by_kind.get('passed', []))} passed, "
        f"{len(by_kind.get('failed', [])) + len(by_kind.get('crashed', []))} failed, "
        f"{sum(skips.values())} skipped")
    for (kind, msg), n in sorted(skips.items(), key=lambda kv: -kv[1]):
        say(f"  {n:4d} skipped: {msg}")


def next_step_after(course: Course, step: Step) -> Optional[Step]:
    return course.steps[step.number] if step.number < len(course.steps) else None


def say_what_next(course: Course, step: Step, st: StepState) -> None:
    s = st.state
    if s == "done":
        nxt = next_step_after(course, step)
        say(f"\n[course] {step.id}: DONE." + (f" Next: {nxt.id} -- bash scripts/course.sh check {nxt.id}" if nxt
                                             else " That was the last step of the course."))
        if step.in_table:
            say(f"[course] see it beside the solution and the library: bash scripts/course.sh bench {step.id}")
    elif s == "failing":
        say(f"\n[course] {step.id}: FAILING (first failure above). "
            f"A hint: bash scripts/course.sh hint {step.id}")
    elif s in ("not_started", "in_progress"):
        where = f"edit {st.file}" if st.file else "edit its stub"
        say(f"\n[course] {step.id}: {STATE_LABEL[s].upper()} -- {where} (look for TODO and the step's name); "
            f"hints one at a time: bash scripts/course.sh hint {step.id}")
    elif s == "needs_gpu":
        say(f"\n[course] {step.id}: NEEDS A GPU. It builds (your code compiles), but its tests need an NVIDIA GPU "
            f"(sm_80 or newer) to run; on a GPU machine `bash scripts/course.sh check {step.id}` says whether it is right.")
    else:
        say(f"\n[course] {step.id}: {STATE_LABEL[s]}: {st.detail}")


def cmd_check(args) -> int:
    course = Course(args)
    step = find_step(course.steps, args.step)
    course.build_modules([step.module])
    st = run_step(course, step, args.timeout)
    report_step(step, st, args.verbose)
    say_what_next(course, step, st)
    return {"done": 0, "needs_gpu": 0}.get(st.state, 1)


def cmd_next(args) -> int:
    """The first step that is not done and can be checked here: without a GPU, steps whose
    tests need one are passed over (named once), and their first is the answer only when
    nothing after it can be checked here."""
    course = Course(args)
    built = set()
    gpu_steps: List[Tuple[Step, StepState]] = []
    for step in course.steps:
        if step.module.dir not in built:
            course.build_modules([step.module])
            built.add(step.module.dir)
        st = run_step(course, step, args.timeout)
        if st.state == "needs_gpu":
            gpu_steps.append((step, st))
            continue
        if st.state != "done":
            if gpu_steps:
                say(f"[course] passed over {len(gpu_steps)} steps that need an NVIDIA GPU to check "
                    f"({gpu_steps[0][0].id} ... {gpu_steps[-1][0].id}); the first one checkable here:")
            report_step(step, st, args.verbose)
            say_what_next(course, step, st)
            return 1
        say(f"[course] {step.number:3d}. {step.id}: done")
    if gpu_steps:
        step, st = gpu_steps[0]
        say(f"[course] every step checkable here is done; {len(gpu_steps)} need an NVIDIA GPU to check, the first:")
        report_step(step, st, args.verbose)
        say_what_next(course, step, st)
        return 0
    say("[course] every step is done. Well climbed.")
    return 0


def exercise_mtimes() -> Dict[str, float]:
    return {str(p): p.stat().st_mtime for p in (ROOT / "exercises").rglob("*")
            if p.suffix in (".cu", ".cuh", ".cpp", ".hpp", ".h") and p.is_file()}


def cmd_watch(args) -> int:
    """check the current step; when it is done, move on; re-check whenever a stub is saved."""
    course = Course(args)
    idx = find_step(course.steps, args.step).number - 1 if args.step else 0
    seen = exercise_mtimes()
    while True:
        step = course.steps[idx]
        say(f"\n[course] ==== watch: {step.id} ====")
        try:
            course.build_modules([step.module])
            st = run_step(course, step, args.timeout)
        except CourseError as e:
            say(str(e))
            st = None
        if st is not None and st.state == "done" and idx + 1 < len(course.steps):
            say(f"[course] {step.number:3d}. {step.id}: done")
            idx += 1
            continue
        if st is not None:
            report_step(step, st, args.verbose)
            say_what_next(course, step, st)
        say("[course] watching exercises/ -- save a file to check again (Ctrl-C stops)")
        while True:
            time.sleep(args.interval)
            now = exercise_mtimes()
            if now != seen:
                seen = now
                time.sleep(0.3)  # let the editor finish writing
                break


def hint_state_path(course: Course) -> Path:
    return course.build / "course" / "hints.json"


def cmd_hint(args) -> int:
    course = Course(args)
    if args.check:
        return check_hint_store(course, args)
    if not args.step:
        raise CourseError("hint needs a STEP (e.g. reductions/smem_tree); `list` shows them", 2)
    step = find_step(course.steps, args.step)
    path = hint_file(step.module, step.op)
    sections = {s.step: s for s in parse_hint_file(path)} if path.exists() else {}
    hints = sections[step.name].hints if step.name in sections else []
    if not hints:
        say(f"[course] no hints for {step.id} yet ({rel(path)} has no '## {step.name}' section).")
        return 1
    state_path = hint_state_path(course)
    try:
        shown_all: Dict[str, int] = json.loads(state_path.read_text()) if state_path.exists() else {}
    except ValueError:
        shown_all = {}
    shown = shown_all.get(step.id, 0)
    if args.reset:
        shown_all.pop(step.id, None)
        out = [f"[course] {step.id}: hints hidden again; the next `hint {step.id}` shows hint 1."]
    elif args.all:
        out = [f"-- {step.id}, hint {i} of {len(hints)} --\n{h}\n" for i, h in enumerate(hints, 1)]
        shown_all[step.id] = len(hints)
    elif shown >= len(hints):
        out = [f"[course] {step.id}: all {len(hints)} hints shown (--all shows them again, --reset starts over).",
               f"[course] the solution: solutions/{step.module.dir}/ (namespace course::solution)."]
    else:
        out = [f"-- {step.id}, hint {shown + 1} of {len(hints)} --\n{hints[shown]}\n"]
        shown_all[step.id] = shown + 1
        if shown + 1 < len(hints):
            out.append(f"[course] the next one, more direct: bash scripts/course.sh hint {step.id}")
    # Remember first: what was asked for counts as shown even if the output is cut short.
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps(shown_all, indent=1, sort_keys=True) + "\n")
    for line in out:
        say(line)
    return 0


def check_hint_store(course: Course, args) -> int:
    """Every table step has its section (in table order, with hints); helper sections name
    tests that exist; stubs point at sections that exist and carry no inline hints."""
    problems: List[str] = []
    notes: List[str] = []
    for mod in course.modules:
        for op in mod.ops:
            path = hint_file(mod, op)
            if not path.exists():
                notes.append(f"note: {rel(path)}: missing (the hints of {op})")
                continue
            sections = parse_hint_file(path)
            names = [n for n, _ in mod.step_table[op]]
            order = [s.step for s in sections if s.step in names]
            if order != [n for n in names if n in order]:
                problems.append(f"{rel(path)}: sections not in table order: {order}")
            for n in names:
                if n not in order:  # a stub still being written: said, not fatal
                    notes.append(f"note: {rel(path)}: no '## {n}' section yet")
            for s in sections:
                if not s.hints:
                    problems.append(f"{rel(path)}: '## {s.step}' has no '### Hint 1'")
                if s.step not in names and not s.tests:
                    problems.append(f"{rel(path)}: '## {s.step}' is not a step of {op}: it needs a 'Tests:' line")
        stubs = [p for p in (ROOT / "exercises" / mod.dir).iterdir() if p.suffix in (".cu", ".cuh", ".hpp")]
        for stub in sorted(stubs):
            text = stub.read_text()
            for i, line in enumerate(text.splitlines(), 1):
                if re.match(r"\s*//+\s*Hint( \d+)?:", line):
                    problems.append(f"{rel(stub)}:{i}: an inline hint (move it to the hint store)")
            for key in re.findall(r"course\.sh hint ([\w/]+)", text):
                if key.endswith("/"):  # "hint op/<step>"
                    continue
                try:
                    find_step(course.steps, key)
                except CourseError:
                    problems.append(f"{rel(stub)}: points at 'hint {key}', which is no step")
    if args.with_tests:
        for mod in course.modules:
            course.map_tests(mod)
        for s in course.steps:
            if not course.tests_of(s):
                problems.append(f"{s.id}: no exercise test belongs to it")
    for p in notes + problems:
        say(p)
    say(f"[course] hint store: {len(course.steps)} steps, " + ("OK" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


def bench_rows_of(rows: List[str], step: str, op_steps: List[str]) -> Tuple[List[str], List[str]]:
    """The benchmark ops ("sgemm", "l2_norm", ...) of a step's op and the rows "op/impl/step/shape"
    of the step: its solution and exercise rows, and the library rows of those ops. A benchmark
    op belongs to the step's op when every step its solution rows name is one of the op's."""
    row_ops: Dict[str, set] = {}
    for row in rows:
        bop, impl, rstep = row.split("/")[:3]
        if impl == "solution":
            row_ops.setdefault(bop, set()).add(step_of_param(rstep, op_steps))
    bench_ops = sorted(b for b, names in row_ops.items() if None not in names and step in names)
    picked = []
    for row in rows:
        bop, impl, rstep, shape = row.split("/")[:4]
        if bop in bench_ops and (impl == "library" or (impl in ("solution", "exercise")
                                                       and step_of_param(rstep, op_steps) == step)):
            name = "/".join((bop, impl, rstep, shape))
            if name not in picked:
                picked.append(name)
    return bench_ops, picked


def bench_filter(names: List[str]) -> str:
    """A --benchmark_filter matching exactly these rows (with or without a /manual_time suffix)."""
    esc = lambda n: re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", n)
    return "^(" + "|".join(esc(n) for n in names) + ")(/|$)"


def cmd_bench(args) -> int:
    if not args.step:
        raise CourseError("every benchmark: bash scripts/course.sh bench (no STEP)", 2)
    course = Course(args)
    step = find_step(course.steps, args.step)
    target = f"{step.module.short}_bench"
    build_targets(course.build, course.preset, [target])
    binary = course.build / step.module.dir / target
    r = subprocess.run([str(binary), "--benchmark_list_tests"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, cwd=binary.parent)
    rows = [l.strip() for l in r.stdout.splitlines() if l.count("/") >= 3 and not l.startswith("[")]
    if not rows:
        say(r.stdout.strip())
        say(f"[course] bench {step.id}: no benchmark rows here -- the benchmarks need an NVIDIA GPU (sm_80 or newer). "
            "On a GPU machine this command prints your row beside the solution's and the library's.")
        return 0
    op_steps = [s.name for s in course.steps if s.op == step.op and s.in_table]
    bench_ops, picked = bench_rows_of(rows, step.name, op_steps)
    if not bench_ops:
        say(f"[course] {step.id} has no benchmark rows of its own"
            + (" (it is checked by its tests only)" if not step.in_table else "") + ".")
        return 0
    pattern = bench_filter(picked)
    say(f"[course] {binary.name}: {len(set(picked))} rows of {step.id} ({', '.join(sorted(bench_ops))}), "
        "yours (exercise) beside the solution and the library")
    cmd = [str(binary), f"--benchmark_filter={pattern}", *args.extra]
    if not any(a.startswith("--benchmark_out") for a in args.extra):
        # Like `course.sh bench`: the rows also go to <build>/bench_*.json, where
        # scripts/make_results.py finds the learner's numbers (newest file wins per row).
        out = course.build / f"bench_{step.module.short}_{step.op}_{step.name}.json"
        cmd += [f"--benchmark_out={out}", "--benchmark_out_format=json"]
        say(f"[course] the rows also go to {rel(out)} (scripts/make_results.py shows them as 'yours')")
    return subprocess.run(cmd, cwd=binary.parent).returncode


# ------------------------------------------------------------- test: ctest + a summary ----

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


# --------------------------------------------------------------------------- the CLI -----

def cmd_shell_only(args) -> int:
    raise CourseError(f"run it as: bash scripts/course.sh {args.command}", 2)


USAGE = """usage: bash scripts/course.sh <command> [options]     (<command> --help for its options)

The loop, one step at a time (STEP is op/step as `list` prints it, e.g. reductions/smem_tree):
  list               every exercise step in course order with its state (alias: progress)
  check STEP         build, run STEP's exercise tests, show failures, say what comes next
  next               check the first step that is not done
  watch [STEP]       check again whenever you save a stub; move on when a step is done
  hint STEP          the next hint of STEP (--all: every hint, --reset: start over)
  bench STEP         STEP's benchmark rows: yours beside the solution and the library

Everything at once:
  demo               install, build, run every module's demos
  test               install, build, run the whole test suite and summarize it
  bench              run every module's benchmark binary (needs a GPU)
"""


def common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help="CMake preset whose build folder to use (default: $PRESET or 'default')")
    p.add_argument("--build-dir", help="a configured build folder (overrides --preset)")


def make_parser() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    top = argparse.ArgumentParser(prog="course.sh", usage=USAGE, add_help=False)
    sub = top.add_subparsers(dest="command")
    parsers = {}

    def add(name, help_, fn, aliases=(), common=True):
        p = sub.add_parser(name, aliases=list(aliases), prog=f"bash scripts/course.sh {name}", description=help_)
        if common:
            common_options(p)
        p.set_defaults(fn=fn)
        parsers[name] = p
        for a in aliases:
            parsers[a] = p
        return p

    p = add("list", "Every exercise step of every module, in course order, with its state, derived from its "
            "exercise tests: done (they pass), failing (with the first failure), not started (they still "
            "skip with NotImplemented), needs a GPU (they skipped: no device). Builds the exercise tests first.",
            cmd_list, aliases=("progress",))
    p.add_argument("--module", help="only this module (module01_basics or m01)")
    p.add_argument("--json", action="store_true", help="print the states as JSON")
    p.add_argument("--no-build", action="store_true", help="use the test binaries as they are")
    p.add_argument("--results", metavar="JUNIT", help="states from a ctest JUnit file instead of running the tests "
                   "(`course.sh test` writes <build>/course/ctest-junit.xml)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="steps tested at once (default 2)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per test binary run (default 600)")

    p = add("check", "Build what STEP needs (stopping on a compile error, with the compiler's lines), run "
            "STEP's exercise tests, show the failures and skip reasons, and say what comes next. "
            "Exit status 0 when the step is done (or compiles and needs a GPU to test).", cmd_check)
    p.add_argument("step", metavar="STEP", help="op/step (e.g. reductions/smem_tree), a unique step name, or its number")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    p.add_argument("--timeout", type=int, default=600, help="seconds per test binary run (default 600)")

    p = add("next", "Check the steps in course order and stop at the first one that is not done and can be "
            "checked here (without a GPU, the steps whose tests need one are passed over): its tests, its "
            "state, what to do.", cmd_next)
    p.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    p.add_argument("--timeout", type=int, default=600, help="seconds per test binary run (default 600)")

    p = add("watch", "Like rustlings' watch: check STEP (default: the first step), move on to the next "
            "step when it is done, and check again whenever a file under exercises/ is saved. Ctrl-C stops.",
            cmd_watch)
    p.add_argument("step", metavar="STEP", nargs="?", help="where to start (op/step, a unique name, a number)")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per test")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the files (default 1)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per test binary run (default 600)")

    p = add("hint", "Reveal the next hint of STEP, from gentle to nearly the answer (the hints live in "
            "exercises/<module>/hints/<op>.md). How many you have seen is remembered per step.", cmd_hint)
    p.add_argument("step", metavar="STEP", nargs="?", help="op/step, a unique step name, or its number")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--all", action="store_true", help="show every hint of STEP")
    g.add_argument("--reset", action="store_true", help="forget the hints shown for STEP")
    g.add_argument("--check", action="store_true", help="check the hint store against the step tables and stubs")
    p.add_argument("--with-tests", action="store_true", help="with --check: every step must own exercise tests "
                   "(needs the built test binaries)")

    p = add("bench", "Run STEP's benchmark rows -- your kernel (exercise) beside the solution and the "
            "library -- with the module's benchmark binary and the right --benchmark_filter. "
            "Needs an NVIDIA GPU. Without STEP, course.sh runs every benchmark.", cmd_bench)
    p.add_argument("step", metavar="STEP", nargs="?", help="op/step, a unique step name, or its number")
    p.epilog = "Other options go to the benchmark binary (e.g. --benchmark_min_time=0.2s)."

    add("demo", "Install what is missing (apt-get), build, and run every module's demo executables on "
        "their worked examples and a realistic size: result, CPU reference, error, time. Without a GPU "
        "the demos print the CPU reference results only. PRESET=<preset> picks another build folder.",
        cmd_shell_only, common=False)

    p = add("test", "Run ctest (all tests, or as the options say) with short output, then summarize: "
            "passed, skipped because no GPU, not implemented yet (with the files to edit), failed. "
            "course.sh test builds first.", cmd_test)
    p.epilog = "Other options go to ctest (e.g. -L exercise, -R Softmax)."
    return top, parsers


COMMANDS = ("list", "progress", "check", "next", "watch", "hint", "bench", "test", "demo")


def main(argv: List[str]) -> int:
    top, parsers = make_parser()
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        sys.stderr.write(f"unknown command '{argv[0]}'\n\n{USAGE}")
        return 2
    args, unknown = top.parse_known_args(argv)
    if unknown and args.command not in ("test", "bench"):
        parsers[args.command].error("unrecognized arguments: " + " ".join(unknown))
    args.extra = unknown
    ensure_nvcc_on_path()
    try:
        return args.fn(args)
    except CourseError as e:
        say(str(e))
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
