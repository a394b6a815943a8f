#!/usr/bin/env bash
# CI test of the learner's tool (scripts/course/), on this clone, without a GPU:
#   0. the state rule on recorded GPU results (scripts/tests/test_course_states.py): there an
#      unwritten step is "not started" although its argument checks pass;
#   1. the hint store matches the step tables, the stubs and the exercise tests;
#   2. `list` on the fresh clone: every step is "not started" or "needs a GPU"; `next` passes
#      over the steps that need a GPU and stops at one it can check here;
#   3. a stub with a syntax error: `check` stops with the compiler's error and runs no test;
#   4. module 3's row_offset (its tests run on the host; attention_device.cuh) given the solution's body:
#      `check` reports it done, and so does `list`;
#   5. without a GPU, `bench STEP` says so before building anything.
# The stubs are restored on exit. Reuses the CI build folder: only module 3's exercise test
# binaries are rebuilt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PRESET=${PRESET:-ci}
start=$SECONDS
tool=(python3 scripts/course)
stub=exercises/module03_attention/attention.cu
row_stub=exercises/module03_attention/attention_device.cuh  # the stub's row_offset
solution=module03_attention/include/module03/attention_indexing.cuh
step=attention/row_offset
work=$(mktemp -d)
cp "$stub" "$work/stub.cu"
cp "$row_stub" "$work/row_stub.cuh"
restore() { cp "$work/stub.cu" "$stub"; cp "$work/row_stub.cuh" "$row_stub"; rm -rf "$work"; }
trap restore EXIT
fail() { echo "[ci:course-tool] FAILED: $*" >&2; exit 1; }

# The state of every step, as `list --json` reports it: "id state" lines.
states() { "${tool[@]}" list --json | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    print(s["id"], s["state"])'; }

# 0. The state rule, on recorded GPU results.
python3 scripts/tests/test_course_states.py || fail "the state rule (scripts/tests/test_course_states.py)"

# 1. The hint store.
"${tool[@]}" hint --check --with-tests || fail "hint --check"

# 2. A fresh clone: nothing is done, nothing fails.
"${tool[@]}" list | tail -4
states > "$work/fresh.txt"
bad=$(awk '$2 != "not_started" && $2 != "needs_gpu"' "$work/fresh.txt")
[[ -z "$bad" ]] || fail "on a fresh clone every step is not started or needs a GPU, but:"$'\n'"$bad"
grep -qx "$step not_started" "$work/fresh.txt" || fail "$step is not 'not started' on a fresh clone"
echo "[ci:course-tool] fresh clone: $(wc -l < "$work/fresh.txt") steps, none done, none failing"
set +e
out=$("${tool[@]}" next 2>&1)
set -e
echo "$out" | tail -3
first_here=$(awk '$2 == "not_started" {print $1; exit}' "$work/fresh.txt")
echo "$out" | grep -q "$first_here: NOT STARTED" || fail "next did not stop at $first_here, the first step checkable here"

# 3. A syntax error stops `check` with the compiler's message; no test runs.
printf '\nthis line is not C++\n' >> "$stub"
set +e
out=$("${tool[@]}" check "$step" 2>&1)
rc=$?
set -e
echo "$out" | tail -8
((rc != 0)) || fail "check succeeded on a stub with a syntax error"
echo "$out" | grep -q "attention.cu.*error" || fail "check did not show the compiler's error"
echo "$out" | grep -q "the build failed" || fail "check did not say that the build failed"
if echo "$out" | grep -qE "^[0-9]+ tests?: "; then fail "check ran tests after a failed build"; fi
cp "$work/stub.cu" "$stub"

# 4. The solution's body in the stub's row_offset: the step is done.
python3 - "$row_stub" "$solution" <<'EOF'
import re, sys
def body(text):
    """(start, end) of the body of the first row_offset(const AttentionStrides& ...) definition."""
    m = re.search(r"row_offset\(const AttentionStrides& s,[^)]*\)\s*\{", text)
    if not m:
        sys.exit("row_offset definition not found")
    depth, i = 0, m.end() - 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return i + 1, j
stub_path, solution_path = sys.argv[1:3]
stub, solution = open(stub_path).read(), open(solution_path).read()
s0, s1 = body(stub)
t0, t1 = body(solution)
open(stub_path, "w").write(stub[:s0] + solution[t0:t1] + stub[s1:])
EOF
out=$("${tool[@]}" check "$step" 2>&1) || { echo "$out"; fail "check $step did not succeed with the solution's body"; }
echo "$out" | tail -5
echo "$out" | grep -q "$step: DONE" || fail "check did not report $step as done"
states > "$work/solved.txt"
grep -qx "$step done" "$work/solved.txt" || fail "list does not report $step as done"
# 5. Without a GPU, `bench STEP` says so at once and builds no benchmark binary.
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  bdir=build-$PRESET; [[ $PRESET == default ]] && bdir=build
  bench_bin=$(ls "$bdir"/module01_basics/m01_bench 2>/dev/null || true)
  before=$([[ -n "$bench_bin" ]] && stat -c %Y "$bench_bin" || echo none)
  out=$("${tool[@]}" bench reductions/atomic_naive 2>&1) || fail "bench without a GPU exited non-zero: $out"
  echo "$out" | head -2
  echo "$out" | grep -q "no NVIDIA GPU found: bench reductions/atomic_naive runs m01_bench" ||
    fail "bench without a GPU did not say so"
  after=$([[ -n "$bench_bin" ]] && stat -c %Y "$bench_bin" || echo none)
  [[ "$before" == "$after" ]] || fail "bench without a GPU rebuilt m01_bench"
fi
echo "[ci:course-tool] passed in $((SECONDS - start)) s"
