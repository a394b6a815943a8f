#!/usr/bin/env bash
# The CTest GPU test m04_gpt_twin_check (module04_training/CMakeLists.txt; labels gpu,
# solution, twin): m04_gpt against its PyTorch twin (scripts/gpt_twin.py) on a small
# configuration, in BOTH precisions. For each of bf16 and fp32:
#
#   m04_gpt --precision P --layers 2 --batch 8 --steps 20 --dump-init --dump-grads --csv
#   gpt_twin.py --precision P ...   the first 20 losses and every step-1 gradient compared
#
# under the twin's rules (bf16: losses within 0.02 / 0.05, gradients within 3x the bf16
# twin's own error + 1e-3; fp32: losses within 1e-4 relative, gradients within 1e-4 relative
# L2; scripts/gpt_twin.py's docstring says why). The data is the course's own lessons
# (`gpt_data.py prepare --fallback` into BUILD_DIR/data/lessons): no network needed.
#
# Exit 0: both precisions agree. 1: a disagreement or a failed run. 77 (CTest's
# SKIP_RETURN_CODE): no usable NVIDIA GPU, or no python3 with NumPy and PyTorch (CUDA) --
# said in one line, never a silent pass.
#
#   bash scripts/gpt_twin_check.sh build/module04_training/m04_gpt build
set -uo pipefail
readonly SKIP=77
if (($# != 2)); then
  echo "usage: $0 PATH/TO/m04_gpt BUILD_DIR" >&2
  exit 2
fi
gpt=$1
build=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
skip() {
  echo "m04_gpt_twin_check SKIPPED: $*"
  exit $SKIP
}

command -v python3 >/dev/null 2>&1 || skip "needs python3 (the data preparation and the PyTorch twin)"
[[ -x $gpt ]] || { echo "m04_gpt_twin_check: $gpt is not an executable (build the target m04_gpt)" >&2; exit 1; }

python3 "$root/scripts/gpt_data.py" prepare --fallback --build-dir "$build" || {
  echo "m04_gpt_twin_check: gpt_data.py prepare --fallback failed" >&2
  exit 1
}
data="$build/data/lessons"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpt_twin_check.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The small configuration, the same on both sides (the twin reads context and sizes from
# the init file; batch, steps and the cosine's length are passed).
layers=2 batch=8 steps=20
failed=()
for precision in bf16 fp32; do
  echo "==== $precision: m04_gpt --precision $precision --layers $layers --batch $batch --steps $steps"
  "$gpt" --precision "$precision" --data "$data" --layers $layers --batch $batch --steps $steps \
    --eval-every 0 --eval-batches 0 --log-every 5 --sample 0 --dump-init "$work/init_$precision.bin" \
    --dump-grads "$work/grads_$precision.bin" --csv "$work/loss_$precision.csv" >"$work/gpt_$precision.log" 2>&1
  rc=$?
  cat "$work/gpt_$precision.log"
  if ((rc != 0)); then
    # m04_gpt exits 2 saying "no usable NVIDIA GPU" when there is none: a skip, not a failure.
    if grep -q "no usable NVIDIA GPU" "$work/gpt_$precision.log"; then
      skip "no usable NVIDIA GPU (m04_gpt trains on the GPU only): $(head -2 "$work/gpt_$precision.log" | tr '\n' ' ')"
    fi
    echo "m04_gpt_twin_check: m04_gpt --precision $precision failed (exit $rc)" >&2
    exit 1
  fi
  if [[ $precision == bf16 ]] && ! python3 -c 'import numpy, torch; assert torch.cuda.is_available()' 2>/dev/null; then
    skip "needs python3 with NumPy and PyTorch built with CUDA for the twin (scripts/gpt_twin.py); m04_gpt itself ran"
  fi
  echo "==== $precision: scripts/gpt_twin.py --precision $precision"
  python3 "$root/scripts/gpt_twin.py" --precision "$precision" --data "$data" --init "$work/init_$precision.bin" \
    --grads "$work/grads_$precision.bin" --course-csv "$work/loss_$precision.csv" --steps $steps \
    --schedule-steps $steps --batch $batch
  rc=$?
  ((rc == SKIP)) && skip "scripts/gpt_twin.py skipped (see its line above)"
  ((rc != 0)) && failed+=("$precision (gpt_twin.py exit $rc)")
done

if ((${#failed[@]})); then
  echo "m04_gpt_twin_check: the course and its PyTorch twin DISAGREE in: ${failed[*]}"
  exit 1
fi
echo "m04_gpt_twin_check: bf16 and fp32 agree with the PyTorch twin (losses of $steps steps, every step-1 gradient)"
