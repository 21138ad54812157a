#!/usr/bin/env bash
# The prepared device check: what the paper model needs on a GPU, measured
# there, in one log under results/device/. Two parts, each within 8 minutes
# on one H200 (run them as two device calls of at most 600 s):
#   part 1 -- memory and speed of the paper preset (8 seeds, faithful
#     rope_sinusoidal): the memory table (one vmap, seed groups, remat, the
#     blockwise kernel, bfloat16; compiled and one chunk run per row, so
#     benchmarks/memory.py prints the measured peak -- the process's running
#     maximum: a row's peak is at least the rows' before); training steps/s with
#     8 seeds in one program (--seed_group=auto, float32 and bfloat16) against 8
#     seeds one after another (--seed_group=1);
#   part 2 -- the study preset's steps/s (one vmap vs sequential), the all-heads
#     ablation at paper size on part 1's run, and MFU (benchmarks/run.py: model
#     matmul FLOPs over the matmul peak measured in the same process).
# Each step has its own timeout, so one slow step cannot eat the others' time.
#   launch/gpu_check.sh [--dry_run] [--part=1|2] [LOG]
#   (default: both parts; LOG: results/device/gpu-check-DATE.log, appended)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
PART=all
case "${1:-}" in
  --part=1|--part=2) PART=${1#--part=}; shift ;;
  --part=*) echo "error: --part must be 1 or 2, got ${1#--part=}" >&2; exit 2 ;;
esac
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
if [ "$PART" != 2 ]; then
  run_or_print timeout 130 "${MEM[@]}" --seed_group=0 --remat=true --attention_block=0,32
  run_or_print timeout 80 "${MEM[@]}" --seed_group=2,1 --remat=false
  run_or_print timeout 60 "${MEM[@]}" --seed_group=0 --remat=true --dtype=bfloat16
  run_or_print timeout 70 "${PAPER[@]}" --seed_group=auto --workdir=runs/gpu-check/paper-auto
  run_or_print timeout 70 "${PAPER[@]}" --seed_group=auto --dtype=bfloat16 \
    --workdir=runs/gpu-check/paper-auto-bf16
  run_or_print timeout 60 "${PAPER[@]}" --seed_group=1 --workdir=runs/gpu-check/paper-seq
fi
if [ "$PART" != 1 ]; then
  run_or_print timeout 60 "${STUDY[@]}" --seed_group=0 --workdir=runs/gpu-check/study-vmap
  run_or_print timeout 60 "${STUDY[@]}" --seed_group=1 --workdir=runs/gpu-check/study-seq
  # part 1's 40-step run (trains it first if part 1 was not run here)
  [ -f runs/gpu-check/paper-auto/summary.json ] || [ "$DRY_RUN" -eq 1 ] ||
    timeout 70 "${PAPER[@]}" --seed_group=auto --workdir=runs/gpu-check/paper-auto
  run_or_print timeout 90 "$PY" -m experiments.ablate --workdir=runs/gpu-check/paper-auto \
    --examples=1024 --seed_group=1 --mask_chunk=4
  run_or_print timeout 150 "$PY" -m benchmarks.run --presets=paper --paper_batch=512 \
    --pes=rope --seeds=8 --seed_groups=1 --notorch --noablation --small_batch=0 \
    --overhead_batches= --out=runs/gpu-check/run.json
fi
echo "done: $LOG"
