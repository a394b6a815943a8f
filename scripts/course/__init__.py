"""The learner's loop: list, check, next, hint, bench (python3 standard library only).

Run it through scripts/course.sh (`bash scripts/course.sh list`), which finds nvcc first;
`python3 scripts/course <command>` is the same tool without the installer.

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

One module per job; each imports only those above it in this list:
  common.py   the repository root, messages (say), CourseError
  hints.py    the hint store: its format, `hint` (one at a time), `hint --check`
  catalog.py  the steps (step tables, hint store helper sections), the exercise test
              targets, and which test suites are parametrized by which op's steps
  build.py    the build folder, configuring, building targets, the compiler's errors
  states.py   a test's result, what a skip means, the state rule (state_of), the reach log
  junit.py    a ctest JUnit file read as results; `test` (ctest, then a summary)
  runner.py   Course: the steps and their tests; running a step's tests (gtest JSON)
  bench.py    `bench STEP`: the step's benchmark rows beside the solution and the library
  loop.py     `list`, `check`, `next`, `watch` and what they print
  cli.py      the usage, every command's options, dispatch and exit statuses
  __main__.py `python3 scripts/course ...`
"""
