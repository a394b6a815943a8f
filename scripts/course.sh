#!/usr/bin/env bash
# The learner's entry point.
#   bash scripts/course.sh demo   install what is missing, build, run every module's demos
#   bash scripts/course.sh test   install what is missing, build, run the test suite
#   bash scripts/course.sh bench  build and run the benchmarks (needs a GPU)
# The loop, one step at a time (scripts/course/, a Python package; `bash scripts/course.sh --help`):
#   list, check STEP, next, watch, hint STEP, bench STEP
# Environment: PRESET (default: "default"; CI uses "ci"), COURSE_SKIP_INSTALL=1 to skip apt-get.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cmd=${1:-}
preset=${PRESET:-default}
case "$preset" in
  default) build_dir=build ;;
  *) build_dir=build-$preset ;;
esac

# Debian/Ubuntu packages the course needs besides the CUDA Toolkit; the docs packages are
# installed when the distribution has them (the docs target is optional outside CI).
packages=(cmake ninja-build g++ libgtest-dev libbenchmark-dev libcli11-dev python3)
doc_packages=(doxygen graphviz doxygen-awesome-css)

# True while another process (apt-get, dpkg, unattended-upgrades at boot) holds one of the
# apt/dpkg locks: their inodes in /proc/locks (no fuser, no root needed).
apt_lock_held() {
  local f ino
  for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock; do
    ino=$(stat -c %i "$f" 2>/dev/null) || continue
    grep -qE "^[0-9]+: .* [0-9a-f]+:[0-9a-f]+:${ino} " /proc/locks 2>/dev/null && return 0
  done
  return 1
}

# Waits (up to 10 minutes, saying so) until no one holds the apt/dpkg locks. apt-get itself
# also waits (DPkg::Lock::Timeout, apt 1.9+); this covers older apt and `apt-get update`.
wait_for_apt_lock() {
  local waited=0
  apt_lock_held || return 0
  echo "[course] another package manager is running (apt-get, dpkg or unattended upgrades after boot):"
  echo "[course] waiting for it to release its lock before installing (up to 10 minutes)..."
  while apt_lock_held; do
    if ((waited >= 600)); then
      echo "[course] the apt/dpkg lock is still held after 10 minutes; try again later, or see" \
        "'ps aux | grep -E \"apt|dpkg\"'" >&2
      return 1
    fi
    sleep 5
    waited=$((waited + 5))
  done
  echo "[course] the lock is free after ${waited} s."
}

install_packages() {
  [[ "${COURSE_SKIP_INSTALL:-0}" == 1 ]] && return 0
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  local missing_docs=()
  for p in "${doc_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_docs+=("$p")
  done
  ((${#missing[@]} + ${#missing_docs[@]} == 0)) && return 0
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  # apt-get waits up to 10 minutes for a dpkg lock itself (apt 1.9+); `env` keeps
  # DEBIAN_FRONTEND through sudo. Its output goes to a log, shown (the path and its end) on failure.
  local apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)
  mkdir -p "$build_dir"
  apt_log=$PWD/$build_dir/apt.log
  : >"$apt_log"
  echo "[course] installing with apt-get: ${missing[*]} ${missing_docs[*]} (log: $apt_log)"
  if ! { wait_for_apt_lock && "${apt[@]}" update >>"$apt_log" 2>&1; }; then
    # Only the course's own packages make this fatal; the docs ones are best-effort.
    ((${#missing[@]})) && apt_failed "apt-get update failed; missing: ${missing[*]}"
    echo "[course] could not update the package lists: the 'docs' target will be unavailable (log: $apt_log)"
    return 0
  fi
  if ((${#missing[@]})); then
    { wait_for_apt_lock && "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1; } ||
      apt_failed "could not install ${missing[*]}"
  fi
  if ((${#missing_docs[@]})); then
    { wait_for_apt_lock && "${apt[@]}" install -y --no-install-recommends "${missing_docs[@]}" >>"$apt_log" 2>&1; } ||
      echo "[course] could not install ${missing_docs[*]}: the 'docs' target will be unavailable (log: $apt_log)"
  fi
}

# apt-get failed: the end of its log, where the whole log is, and stop.
apt_failed() {
  tail -15 "$apt_log" >&2
  echo "[course] $1 -- the whole apt-get log: $apt_log" >&2
  exit 1
}

check_cmake() {
  local v
  v=$(cmake --version | sed -n 's/cmake version \([0-9]*\.[0-9]*\).*/\1/p')
  if [[ "$(printf '%s\n' 3.25 "$v" | sort -V | head -1)" != 3.25 ]]; then
    echo "[course] CMake $v is too old (3.25 or newer needed): 'python3 -m pip install cmake' gives a current one." >&2
    exit 1
  fi
}

check_cuda() {
  if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "[course] nvcc not found: install the CUDA Toolkit (12.x or 13.x) from NVIDIA first." >&2
    exit 1
  fi
  command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
}

build() {
  check_cmake
  cmake --preset "$preset"
  cmake --build --preset "$preset"
}

# The demo executables, by the course_module_targets convention: <short>_<name> for each
# module0*/demos/<name>.cpp, where <short> is the module's (m01, ...).
demo_targets() {
  local m short f
  for m in module0*/; do
    short=$(sed -n 's/.*course_module_targets( *[A-Za-z0-9_]* *\([A-Za-z0-9_]*\) *).*/\1/p' "$m/CMakeLists.txt" 2>/dev/null)
    [[ -n "$short" ]] || continue
    for f in "$m"demos/*.cpp; do [[ -f "$f" ]] && echo "${short}_$(basename "$f" .cpp)"; done
  done
}

# Before the first build of these targets: how many files it compiles and roughly how long
# that takes (about 6 s per file and core: the demos' 74 files built in 3 min 21 s on 2 cores
# from a fresh clone, dependencies already installed). Later runs rebuild only what changed. (A ninja dry run
# cannot count that: with CONFIGURE_DEPENDS globs it stops at "Re-running CMake".)
say_build_time() {
  local n cores
  if [[ -f "$build_dir/.ninja_log" ]]; then
    echo "[course] building the demos: only what changed since the last build"
    return
  fi
  n=$(ninja -C "$build_dir" -t commands "$@" 2>/dev/null | grep -c -- " -c ") || true
  cores=$(nproc 2>/dev/null || echo 2)
  echo "[course] first build of the demos: $n files to compile, about $((n * 6 / cores / 60 + 1)) minutes with $cores cores;"
  echo "[course] later runs rebuild only what changed. (Tests and benchmarks build with 'course.sh test'.)"
}

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# The course's no-GPU wording (as in the tests, demos and benchmarks): the plain headline,
# then what the system said, for those who want it.
no_gpu_note() {
  local raw
  if command -v nvidia-smi >/dev/null 2>&1; then
    raw="nvidia-smi: $(nvidia-smi -L 2>&1 | head -1)"
  else
    raw="nvidia-smi: command not found"
  fi
  echo "[course] no NVIDIA GPU found: $1"
  echo "[course]   ($raw)"
}

# `<command> --help`: the command's own help (scripts/course/cli.py has one for each).
if [[ "${2:-}" == -h || "${2:-}" == --help ]]; then exec python3 scripts/course "$cmd" --help; fi

case "$cmd" in
  demo)
    install_packages; check_cuda; check_cmake
    mkdir -p "$build_dir"
    cmake --preset "$preset" >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
    mapfile -t demos < <(demo_targets)
    say_build_time "${demos[@]}"
    start=$SECONDS
    cmake --build --preset "$preset" --target "${demos[@]}"
    built_s=$((SECONDS - start))
    gpu=1
    have_gpu || { gpu=0; no_gpu_note "the demos print the CPU reference results only"; }
    ran=() failed=() gpu_only=()
    demo_log=$build_dir/demo_output.txt
    for t in "${demos[@]}"; do
      d=$(ls "$build_dir"/module0*/"$t" 2>/dev/null | head -1)
      [[ -n "$d" && -x "$d" ]] || continue
      echo; echo "================ $t ================"
      if ((gpu)); then
        if "$d"; then ran+=("$t"); else failed+=("$t"); fi
      elif "$d" 2>&1 | tee "$demo_log"; then  # no GPU: keep the output to read its reason
        ran+=("$t")
      elif grep -qiE "no (usable )?NVIDIA GPU" "$demo_log"; then
        gpu_only+=("$t")  # a GPU-only demo (m04_gpt trains on the GPU only) said so: not a failure here
      else
        failed+=("$t")
      fi
    done
    rm -f "$demo_log"
    echo
    echo "================ summary ================"
    echo "[course] built in $((built_s / 60)) min $((built_s % 60)) s; ran ${#ran[@]} demos${ran[*]:+: ${ran[*]}}"
    ((${#failed[@]})) && echo "[course] FAILED: ${failed[*]} (output above)"
    ((${#gpu_only[@]})) && echo "[course] not run here, they need a GPU: ${gpu_only[*]}"
    ((gpu)) || echo "[course] no NVIDIA GPU here: CPU reference results only; the kernels run on a GPU (sm_80+)"
    echo "[course] the lesson starts at docs/lessons/gpu_model.md, then module01_basics/README.md"
    echo "[course] next: bash scripts/course.sh list    (every exercise step and its state; builds the tests)"
    echo "[course]       bash scripts/course.sh test    (the whole build and test suite)"
    ((${#failed[@]} == 0))
    ;;
  test)
    install_packages; check_cuda; build
    # ctest with short output, then a summary: passed, skipped (no GPU), not implemented, failed.
    python3 scripts/course test --preset "$preset" "${@:2}"
    ;;
  list|progress|check|next|watch)
    install_packages; check_cuda
    exec python3 scripts/course "$@"
    ;;
  hint)
    exec python3 scripts/course "$@"
    ;;
  bench)
    if [[ $# -ge 2 && $2 != -* ]]; then  # bench STEP: that step's rows only
      install_packages; check_cuda
      exec python3 scripts/course "$@"
    fi
    if ! have_gpu; then
      no_gpu_note "the benchmarks of $(ls -d module0*/bench 2>/dev/null | cut -d/ -f1 | paste -sd, | sed 's/,/, /g') need one; nothing to run"
      exit 0
    fi
    install_packages; check_cuda; build
    # Each binary's rows also go to $build_dir/bench_<module>.json: scripts/make_results.py
    # shows them in the results page's "yours" column.
    for b in "$build_dir"/module0*/m0*_bench; do
      "$b" --benchmark_out="$build_dir/bench_$(basename "$b" _bench).json" --benchmark_out_format=json "${@:2}"
    done
    ;;
  *)  # no command, --help, or an unknown one: the usage (exit 2 for an unknown command)
    exec python3 scripts/course "$@" ;;
esac
