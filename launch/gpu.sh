#!/usr/bin/env bash
# One GPU, paper preset: launch/gpu.sh [--dry_run] [--task T] [--epochs E] PE_LIST SEEDS
#   e.g. launch/gpu.sh rope,nope 8
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
. launch/common.sh

TASK=distance
EXTRA=()
POS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry_run) DRY_RUN=1 ;;
    --task) shift; TASK="${1:-}" ;;
    --epochs) shift; is_uint "${1:-}" || die "--epochs needs a positive integer"
              EXTRA+=(--epochs="$1") ;;
    --faithful) EXTRA+=(--faithful) ;;
    -*) die "unknown option '$1'" ;;
    *) POS+=("$1") ;;
  esac
  shift
done
[ "${#POS[@]}" -eq 2 ] || die "usage: launch/gpu.sh [--dry_run] [--task T] [--epochs E] PE_LIST SEEDS"
PES="${POS[0]}"
SEEDS="${POS[1]}"
require_positive_int "$SEEDS" "SEEDS"
case "$TASK" in distance|count) ;; *) die "--task must be distance or count" ;; esac

export XLA_PYTHON_CLIENT_PREALLOCATE=false
run_or_print python -m experiments.sweep --preset=paper --task="$TASK" --pe="$PES" \
  --seeds="$SEEDS" "${EXTRA[@]}"
