"""The hint store: exercises/<module>/hints/<op>.md (format: exercises/README.md).

Sections `## <step>` (a table step, or a helper the tests check on their own, with a
`Tests:` line), each with `### Hint N` blocks from gentle to nearly the answer. `hint STEP`
reveals them one at a time (how many were shown: <build>/course/hints.json, not progress);
`hint --check` checks the store against the step tables, the stubs and (--with-tests) the
exercise tests. The catalog reads the sections too: helper sections become steps.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from .common import ROOT, CourseError, rel, say


@dataclass
class HintSection:
    step: str
    tests: List[str]
    hints: List[str]


def hint_file(module, op: str) -> Path:
    """The hint file of `op` of `module` (a catalog.Module)."""
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


def hint_state_path(course) -> Path:
    return course.build / "course" / "hints.json"


def reveal(course, step, show_all: bool, reset: bool) -> int:
    """`hint STEP`: the next hint of `step` (a catalog.Step), every hint, or none again."""
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
    if reset:
        shown_all.pop(step.id, None)
        out = [f"[course] {step.id}: hints hidden again; the next `hint {step.id}` shows hint 1."]
    elif show_all:
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


def check_store(course, with_tests: bool) -> int:
    """Every table step has its section (in table order, with hints); helper sections name
    tests that exist; stubs point at sections that exist and carry no inline hints.
    `course`: a runner.Course (with_tests: its built test binaries)."""
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
                    course.find(key)
                except CourseError:
                    problems.append(f"{rel(stub)}: points at 'hint {key}', which is no step")
    if with_tests:
        for mod in course.modules:
            course.map_tests(mod)
        for s in course.steps:
            if not course.tests_of(s):
                problems.append(f"{s.id}: no exercise test belongs to it")
    for p in notes + problems:
        say(p)
    say(f"[course] hint store: {len(course.steps)} steps, " + ("OK" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0
