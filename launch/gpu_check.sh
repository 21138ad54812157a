#!/usr/bin/env bash
# The prepared device check: what the paper model needs on a GPU, measured
# there, in one log under benchmarks/device/. Two parts, each within 8 minutes
# on one H200 (run them as two device calls of at most 600 s):
#   part 1 -- memory and speed of the paper preset's training chunk (8 seeds,
#     faithful rope_sinusoidal), compiled once per row and timed on real data
#     by benchmarks/memory.py, rows side by side in one process: 8 seeds in one
#     vmap against 8 one after another inside one program (--seed_group=0 vs
#     1), float32 against bfloat16, with remat (the 8-wide vmap without it
#     needs 90 GiB); then the blockwise kernel and seed groups without remat.
#     The measured peak is the process's running maximum: a row's peak is at
#     least the rows' before. (The 2026-12-04 check timed 40-step sweeps
#     instead; none reached its first progress line in 55-70 s: sizing,
#     compiling and evaluating the paper model take longer than that.)
#   part 2 -- the cpu preset's steps/s (one vmap vs sequential), the all-heads
#     ablation at paper size on a 40-step run, and MFU (benchmarks/run.py: model
#     matmul FLOPs over the matmul peak measured in the same process).
#   part 3 -- the library's attention (jax.nn.dot_product_attention) beside the
#     project's kernel at the paper preset, dropout 0 for all rows (the library
#     has none on the probabilities): memory and steps/s with 8 seeds one after
#     another in one program (own, xla, cudnn; cudnn in bfloat16 only, its only
#     dtype besides float16), the memory of the 8-wide vmap (own vs cudnn), and
#     benchmarks/run.py's steps/s side by side with the ratio to the authors'
#     PyTorch per seed (benchmarks/torch_baseline.py: only where torch is
#     installed on the machine; the row says so otherwise).
# Each step has its own timeout, so one slow step cannot eat the others' time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
PART=all
case "${1:-}" in
  --part=1|--part=2|--part=3) PART=${1#--part=}; shift ;;
  --part=*) echo "error: --part must be 1, 2 or 3, got ${1#--part=}" >&2; exit 2 ;;
esac
LOG=${1:-benchmarks/device/gpu-check-$(date +%Y-%m-%d).log}
PY=${PYTHON:-python3}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
if [ "$DRY_RUN" -eq 0 ]; then
  mkdir -p "$(dirname "$LOG")"
  exec > >(tee -a "$LOG") 2>&1
fi
MEM=("$PY" -m benchmarks.memory --preset=paper --pe=rope_sinusoidal --faithful --seeds=8)
PAPER=("$PY" -m experiments.sweep --preset=paper --faithful --pe=rope_sinusoidal --seeds=8
       --steps=40 --eval_every=20 --noresume)
STUDY=("$PY" -m experiments.sweep --preset=cpu --pe=rope --seeds=8 --steps=200
       --eval_every=100 --noresume)

run_or_print "$PY" -c "import jax; print(jax.__version__, jax.devices())" || exit 1
run_or_print nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
if [ "$PART" = all ] || [ "$PART" = 1 ]; then
  run_or_print timeout 220 "${MEM[@]}" --seed_group=0,1 --remat=true \
    --dtype=float32,bfloat16 --steps=10 --time_reps=3
  run_or_print timeout 130 "${MEM[@]}" --seed_group=0 --remat=true --attention_block=32
  run_or_print timeout 100 "${MEM[@]}" --seed_group=2 --remat=false --dtype=float32,bfloat16
fi
if [ "$PART" = all ] || [ "$PART" = 2 ]; then
  run_or_print timeout 50 "${STUDY[@]}" --seed_group=0 --workdir=runs/gpu-check/study-vmap
  run_or_print timeout 50 "${STUDY[@]}" --seed_group=1 --workdir=runs/gpu-check/study-seq
  # a 40-step paper-preset run for the ablation (sized by --seed_group=auto)
  run_or_print timeout 140 "${PAPER[@]}" --seed_group=auto --workdir=runs/gpu-check/paper-auto
  run_or_print timeout 90 "$PY" -m experiments.ablate --workdir=runs/gpu-check/paper-auto \
    --examples=1024 --seed_group=1 --mask_chunk=4
  run_or_print timeout 150 "$PY" -m benchmarks.run --presets=paper --paper_batch=512 \
    --pes=rope --seeds=8 --seed_groups=1 --notorch --noablation --small_batch=0 \
    --overhead_batches= --out=runs/gpu-check/run.json
fi
if [ "$PART" = all ] || [ "$PART" = 3 ]; then
  run_or_print timeout 240 "${MEM[@]}" --seed_group=1 --attention_impl=own,xla,cudnn \
    --dropout=0 --dtype=float32,bfloat16 \
    --steps=10 --time_reps=3
  run_or_print timeout 100 "${MEM[@]}" --seed_group=0 --remat=true \
    --attention_impl=own,cudnn --dropout=0 --dtype=bfloat16
  TORCH=--notorch
  if [ "$DRY_RUN" -eq 1 ] || "$PY" -c "import torch" 2>/dev/null; then TORCH=--torch; fi
  run_or_print timeout 140 "$PY" -m benchmarks.run --presets=paper --paper_batch=128 \
    --pes=rope --seeds=8 --seed_groups= --noablation --small_batch=0 --overhead_batches= \
    --attention_impls=own,xla "$TORCH" --out=runs/gpu-check/run-attention.json
fi
echo "done: $LOG"
