"""`bench STEP`: the step's benchmark rows -- the learner's kernel (exercise) beside the
solution and the library -- run with the module's benchmark binary and a filter made from
its row names ("op/impl/step/shape")."""
from __future__ import annotations

import re
import subprocess
from typing import Dict, List, Tuple

from .build import build_targets
from .catalog import step_of_param
from .common import CourseError, gpu_absent, rel, say
from .runner import Course


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
    step = course.find(args.step)
    target = f"{step.module.short}_bench"
    absent = gpu_absent()
    if absent:  # say so before building a benchmark binary that would have nothing to run
        say(f"[course] no NVIDIA GPU found: bench {step.id} runs {target} ({step.module.dir}), which needs one; "
            "nothing built, nothing run. On a GPU machine this command prints your row beside the solution's "
            "and the library's.")
        say(f"[course]   ({absent})")
        return 0
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
