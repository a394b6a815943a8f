"""The command line: the usage, every command's options and help, dispatch, and the exit
statuses (0 success, 1 a step not done or a failure, 2 a usage error, 130 Ctrl-C).
scripts/course.sh runs the loop's commands through here; `demo` is course.sh's own."""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Tuple

from .bench import cmd_bench
from .build import ensure_nvcc_on_path
from .common import CourseError, say
from .hints import check_store, reveal
from .junit import cmd_test
from .loop import cmd_check, cmd_list, cmd_next, cmd_watch
from .runner import Course


def cmd_hint(args) -> int:
    course = Course(args)
    if args.check:
        return check_store(course, args.with_tests)
    if not args.step:
        raise CourseError("hint needs a STEP (e.g. reductions/smem_tree); `list` shows them", 2)
    return reveal(course, course.find(args.step), args.all, args.reset)


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
