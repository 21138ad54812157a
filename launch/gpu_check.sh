#!/usr/bin/env bash
# The prepared device check (about 9.5 minutes on one H200; run it with a
# 600 s limit): what the paper model needs on a GPU, measured there, in one
# log under results/device/.
#   1. the memory table of the paper preset (8 seeds, faithful rope_sinusoidal):
#      one vmap, seed groups, remat, the blockwise attention kernel, bfloat16;
#      compiled and one chunk run per row (benchmarks/memory.py prints the
#      measured peak, the process's running maximum: a row's peak is at least
#      the rows' before);
#   2. training steps/s at the paper preset, 8 seeds in one program
#      (--seed_group=auto, float32 and bfloat16) against 8 seeds one after
#      another (--seed_group=1);
#   3. the same at the study preset.
# Each step has its own timeout, so one slow step cannot eat the others' time.
#   launch/gpu_check.sh [--dry_run] [LOG]   (default LOG: results/device/gpu-check-DATE.log)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
LOG=${1:-results/device/gpu-check-$(date +%Y-%m-%d).log}
PY=${PYTHON:-python3}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PE_SPECTRAL_XLA_TUNING=0
if [ "$DRY_RUN" -eq 0 ]; then
  mkdir -p "$(dirname "$LOG")"
  exec > >(tee -a "$LOG") 2>&1
fi
MEM=("$PY" -m benchmarks.memory --preset=paper --pe=rope_sinusoidal --faithful --seeds=8)
PAPER=("$PY" -m experiments.sweep --preset=paper --faithful --pe=rope_sinusoidal --seeds=8
       --steps=40 --eval_every=20 --noresume)
STUDY=("$PY" -m experiments.sweep --preset=study --pe=rope --seeds=8 --steps=200
       --eval_every=100 --noresume)

run_or_print "$PY" -c "import jax; print(jax.__version__, jax.devices())" || exit 1
run_or_print nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
run_or_print timeout 150 "${MEM[@]}" --seed_group=0 --remat=true --attention_block=0,32
run_or_print timeout 90 "${MEM[@]}" --seed_group=2,1 --remat=false
run_or_print timeout 60 "${MEM[@]}" --seed_group=0 --remat=true --dtype=bfloat16
run_or_print timeout 75 "${PAPER[@]}" --seed_group=auto --workdir=runs/gpu-check/paper-auto
run_or_print timeout 75 "${PAPER[@]}" --seed_group=auto --dtype=bfloat16 \
  --workdir=runs/gpu-check/paper-auto-bf16
run_or_print timeout 60 "${PAPER[@]}" --seed_group=1 --workdir=runs/gpu-check/paper-seq
run_or_print timeout 35 "${STUDY[@]}" --seed_group=0 --workdir=runs/gpu-check/study-vmap
run_or_print timeout 35 "${STUDY[@]}" --seed_group=1 --workdir=runs/gpu-check/study-seq
echo "done: $LOG"
