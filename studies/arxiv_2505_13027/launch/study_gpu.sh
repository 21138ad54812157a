#!/usr/bin/env bash
# The converged study on one GPU within a time budget: a smoke check, a short
# paper-preset speed probe, then `studies.arxiv_2505_13027.plan` with several runs at once
# (the study's models are small: compilation, not the GPU, is the bottleneck),
# skipping the runs no verdict can use any more (--skip_settled).
# Finished runs' small files land in results/runs/; with OUT_DIR, a tarball of
# them and of the logs goes there too. PROBE=0 skips the speed probe;
# STUDY_ARGS adds flags to studies.arxiv_2505_13027.plan (e.g. "--priority_max=2").
#   launch/study_gpu.sh [--dry_run] [BUDGET_S [WORKERS [OUT_DIR]]]
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
BUDGET=${1:-3600}
WORKERS=${2:-8}
OUT_DIR=${3:-}
require_positive_int "$BUDGET" "BUDGET_S"
require_positive_int "$WORKERS" "WORKERS"
PY=${PYTHON:-python3}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1

SECONDS=0
run_or_print "$PY" -c "import jax; print(jax.__version__, jax.devices())" || exit 1
run_or_print timeout 120 "$PY" -m experiments.sweep --preset=smoke --pe=rope --seeds=8 \
  --workdir=runs/gpu-smoke --noresume || exit 1
# Paper preset, faithful 'rope' (sinusoid + rotary), 8 seeds one after another
# (8 vmapped at batch 512 need ~90 GiB for one chunk): steps/s after
# compilation is the second progress line.
if [ "${PROBE:-1}" != 0 ]; then
  run_or_print timeout 150 "$PY" -m experiments.sweep --preset=paper --faithful \
    --pe=rope_sinusoidal --seeds=8 --seed_group=1 --steps=40 --eval_every=20 \
    --workdir=runs/gpu-paper-probe --noresume
fi
LEFT=$((BUDGET - SECONDS - 60))
if [ "$DRY_RUN" -eq 0 ] && [ "$LEFT" -lt 60 ]; then
  echo "no time left for the study"
  exit 0
fi
# shellcheck disable=SC2086  # STUDY_ARGS is a list of flags
run_or_print "$PY" -m studies.arxiv_2505_13027.plan --workers="$WORKERS" --deadline_s="$LEFT" --grace_s=30 \
  --skip_settled ${STUDY_ARGS:-}
if [ -n "$OUT_DIR" ]; then
  run_or_print tar czf "$OUT_DIR/study.tgz" studies/arxiv_2505_13027/results/runs runs/logs
fi
