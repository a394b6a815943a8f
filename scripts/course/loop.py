"""The learner's loop: `list` (every step and its state), `check STEP`, `next`, `watch`,
and what they print about a step (its failures, skips, state and what to do next)."""
from __future__ import annotations

import concurrent.futures
import json
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .catalog import Module, Step
from .common import ROOT, TTY, CourseError, first_lines, messages_to, say
from .runner import Course, run_step
from .states import STATE_LABEL, StepState, TestResult, state_of


def modules_of(course: Course, steps: List[Step]) -> List[Module]:
    seen = []
    for s in steps:
        if s.module not in seen:
            seen.append(s.module)
    return seen


def cmd_list(args) -> int:
    if args.json:
        messages_to(sys.stderr)
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
    step = course.find(args.step)
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
    idx = course.find(args.step).number - 1 if args.step else 0
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
