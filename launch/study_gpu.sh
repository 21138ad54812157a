#!/usr/bin/env bash
# The converged study on one GPU within a time budget: a smoke check, a short
# paper-preset speed probe, then `experiments.study` with several runs at once
# (the study's models are small: compilation, not the GPU, is the bottleneck).
# Finished runs' small files land in results/runs/; a tarball of them (and the
# logs) goes to OUT_DIR if given.
#   launch/study_gpu.sh [--dry_run] [BUDGET_S] [WORKERS] [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
DRY_RUN=0
if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
BUDGET=${1:-3600}
WORKERS=${2:-8}
OUT_DIR=${3:-}
case "$BUDGET$WORKERS" in *[!0-9]*) echo "error: BUDGET_S and WORKERS must be integers" >&2; exit 2;; esac
PY=${PYTHON:-python3}
# PE_SPECTRAL_XLA_TUNING=0: the CPU-only XLA flag is not needed on a GPU.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 PE_SPECTRAL_XLA_TUNING=0
run() { echo "+ $*"; [ "$DRY_RUN" -eq 1 ] || "$@"; }

SECONDS=0
run "$PY" -c "import jax; print(jax.__version__, jax.devices())" || exit 1
run timeout 120 "$PY" -m experiments.sweep --preset=smoke --pe=rope --seeds=8 \
  --workdir=runs/gpu-smoke --noresume || exit 1
# Paper preset, faithful 'rope' (sinusoid + rotary), 8 seeds vmapped: steps/s
# after compilation is the second progress line.
run timeout 150 "$PY" -m experiments.sweep --preset=paper --faithful --pe=rope_sinusoidal \
  --seeds=8 --steps=40 --eval_every=20 --workdir=runs/gpu-paper-probe --noresume
LEFT=$((BUDGET - SECONDS - 60))
[ "$LEFT" -gt 60 ] || { echo "no time left for the study"; exit 0; }
run "$PY" -m experiments.study --workers="$WORKERS" --deadline_s="$LEFT" --grace_s=30
if [ -n "$OUT_DIR" ] && [ "$DRY_RUN" -eq 0 ]; then
  tar czf "$OUT_DIR/study.tgz" results/runs runs/logs runs/gpu-paper-probe/metrics.jsonl 2>/dev/null
  ls -la "$OUT_DIR"
fi
