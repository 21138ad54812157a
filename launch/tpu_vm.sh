#!/usr/bin/env bash
# Runs the same sweep on every worker of a Cloud TPU VM slice (multi-host JAX).
#   launch/tpu_vm.sh [--dry_run] TPU_NAME ZONE PE_LIST SEEDS [REPO_DIR]
# Each worker runs `python -m experiments.sweep --distributed ...`;
# jax.distributed.initialize() auto-detects the slice. The workdir must be on
# storage every worker can read (only process 0 writes metrics and plots; orbax
# writes checkpoint shards from every process).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=launch/common.sh
. launch/common.sh

POS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry_run) DRY_RUN=1 ;;
    -*) die "unknown option '$1'" ;;
    *) POS+=("$1") ;;
  esac
  shift
done
[ "${#POS[@]}" -ge 4 ] || die "usage: launch/tpu_vm.sh [--dry_run] TPU_NAME ZONE PE_LIST SEEDS [REPO_DIR]"
NAME="${POS[0]}"; ZONE="${POS[1]}"; PES="${POS[2]}"; SEEDS="${POS[3]}"
REPO="${POS[4]:-pe-spectral}"
require_positive_int "$SEEDS" "SEEDS"

CMD="cd $REPO && python -m experiments.sweep --distributed --preset=paper --pe=$PES --seeds=$SEEDS"
run_or_print gcloud compute tpus tpu-vm ssh "$NAME" --zone="$ZONE" --worker=all \
  --command="$CMD"
