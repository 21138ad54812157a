#!/usr/bin/env bash
# All PEs x both tasks on this machine, CPU preset (one sweep process per task).
#   launch/local.sh [--dry_run] [--seeds N] [--faithful]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
. launch/common.sh

SEEDS=8
FAITHFUL=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry_run) DRY_RUN=1 ;;
    --seeds) shift; SEEDS="${1:-}" ;;
    --faithful) FAITHFUL=(--faithful) ;;
    *) die "unknown argument '$1' (use --dry_run, --seeds N, --faithful)" ;;
  esac
  shift
done
require_positive_int "$SEEDS" "--seeds"

PES=nope,sinusoidal,learned,relative,alibi,rope,rope_sinusoidal,mla
for task in distance count; do
  run_or_print python -m experiments.sweep --preset=cpu --task="$task" --pe="$PES" \
    --seeds="$SEEDS" "${FAITHFUL[@]}"
  run_or_print python -m experiments.sweep --preset=cpu --task="$task" \
    --pe=partial_rope --rope_heads=1,2 --seeds="$SEEDS" "${FAITHFUL[@]}"
done
