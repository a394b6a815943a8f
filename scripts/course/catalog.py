"""The catalog: every step of the course in order, and which exercise tests are whose.

Read from the sources, not from a build -- on purpose:
  * `hint` and `list` must work on a fresh clone, before anything is configured or built
    (`course.sh hint` needs no CMake, no nvcc), so the step list cannot come from a built
    artifact: neither the bridge's steps() (it exists once the bridge library is built)
    nor a manifest written at configure or build time;
  * which op's table a parametrized test suite runs over is written only in the test's
    source: GoogleTest prints a step parameter by its name alone (course::PrintTo in
    common/include/course/impl.hpp), so `--gtest_list_tests` says "smem_tree" but not
    whose smem_tree it is.

So two C++ patterns are read as text, here and nowhere else:
  1. step tables in module0*/include/*/*.hpp:
         inline constexpr StepInfo<OpStep> kOpSteps[] = {
             {OpStep::name, "name", "summary" "continued"},
         };
     (parse_step_tables; one entry per braces, the summary may be split into literals);
  2. test suites parametrized by a step table in module0*/tests/{test,fuzz}_*.cpp:
         INSTANTIATE_TEST_SUITE_P(Prefix, Suite, ::testing::ValuesIn(kOpSteps), ...);
     or over a function of the steps, `...ValuesIn(fp32_steps())` (step_suites).
A suite instantiated another way (e.g. through a macro) needs step_suites taught the new
pattern, or its tests belong to no step; `hint --check --with-tests` (CI) fails when that
leaves a step without any test.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .common import ROOT, CourseError
from .hints import HintSection, hint_file, parse_hint_file


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


# ------------------------------------------------------------------------- the steps ----

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


# ------------------------------------------------------------- the steps' exercise tests ----

def exercise_targets(mod: Module) -> List[Tuple[str, Path]]:
    """(target, source) of the module's exercise test binaries (course_module_targets)."""
    out = []
    for src in sorted((ROOT / mod.dir / "tests").glob("test_*.cpp")):
        out.append((f"{mod.short}_{src.stem[len('test_'):]}_exercise", src))
    for src in sorted((ROOT / mod.dir / "tests").glob("fuzz_*.cpp")):
        out.append((f"{mod.short}_{src.stem}_exercise", src))
    return out


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


def step_of_param(param: str, step_names: List[str]) -> Optional[str]:
    """The longest step name that is the parameter or its prefix before '_'."""
    best = None
    for s in step_names:
        if (param == s or param.startswith(s + "_")) and (best is None or len(s) > len(best)):
            best = s
    return best
