#!/usr/bin/env bash
# What can still decide a verdict, on one lent GPU within BUDGET_S seconds:
# the study runs in RUNS, several at once, beside the thesis's last rung
# (launch/thesis_cpu.sh --last_rung: rope_additive and rope at 128 epochs, both
# at once while rope_additive is uncommitted, GATE=0: rope's result counts
# only once rope_additive's has passed the gate, which is checked where it is
# committed; a PE thesis_cpu.sh would skip, committed or gated, is skipped).
# RUNS defaults to the plan's priority-1 runs not yet committed and not
# settled (`studies.arxiv_2505_13027.plan --priority_max=1 --skip_settled`): after
# 2026-12-04 the five Task 2 `long` runs without dropout, which a probe put at
# 50-90 steps/s each with all five at once (about 4-5 min for 10,900 steps;
# results/device/h200-2026-12-04-count-long-probe.log).
# Nothing is committed here: with OUT_DIR, tarballs go there of the study's
# collected results (commit them where the call came from: studies.arxiv_2505_13027.plan
# --import_from=DIR --git_commit), of the thesis
# runs' workdirs (checkpoints included, so an unfinished one resumes on the CPU
# and a finished one is copied and committed by launch/thesis_cpu.sh), of the
# study workdirs without their checkpoints, and of the logs.
#   launch/gpu_decide.sh [--dry_run] [BUDGET_S [OUT_DIR]]
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
BUDGET=${1:-540}
OUT_DIR=${2:-}
require_positive_int "$BUDGET" "BUDGET_S"
[ "$BUDGET" -ge 240 ] || die "BUDGET_S must be at least 240, got $BUDGET"
if [ -n "${RUNS:-}" ]; then which=(--only="$RUNS"); else which=(--priority_max=1); fi
PY=${PYTHON:-python3}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1

run_or_print "$PY" -c "import jax; print(jax.__version__, jax.devices())" || exit 1
mkdir -p runs/logs
pids=()
# rope waits for the gate only once rope_additive's verdict on it is committed
gate=0
[ ! -f studies/arxiv_2505_13027/results/thesis-128ep/rope_additive/summary.json ] || gate=1
for pe in rope_additive rope; do
  # the sweep command thesis_cpu.sh would run (one source for its flags)
  sweep=()
  read -r -a sweep < <(GATE=$gate PYTHON="$PY" studies/arxiv_2505_13027/launch/thesis_cpu.sh --dry_run --last_rung "$pe" \
                       2>/dev/null | grep -m1 -- "-m experiments.sweep")
  if [ "${#sweep[@]}" -eq 0 ]; then
    echo "thesis-128ep/${pe}: launch/thesis_cpu.sh skips it (committed, or rope's gate)"
    continue
  fi
  # killed 30 s before the budget: it resumes from its last checkpoint
  run_or_print timeout $((BUDGET - 30)) "${sweep[@]}"
  if [ "$DRY_RUN" -eq 0 ]; then
    timeout $((BUDGET - 30)) "${sweep[@]}" > "runs/logs/thesis-128ep__${pe}.log" 2>&1 &
    pids+=($!)
  fi
done
run_or_print "$PY" -m studies.arxiv_2505_13027.plan "${which[@]}" --workers=5 --seeds=8 --skip_settled \
  --deadline_s=$((BUDGET - 150)) --grace_s=110
for pid in "${pids[@]}"; do wait "$pid" || echo "a thesis run ended early or unfinished (rc $?)"; done
if [ -n "$OUT_DIR" ]; then
  run_or_print tar czf "$OUT_DIR/study-results.tgz" studies/arxiv_2505_13027/results/runs
  # one tarball per thesis run (a file that comes back is at most 16 MiB);
  # the study's 8-seed checkpoints (~50 MB each) stay behind
  for pe in rope_additive rope; do
    [ ! -d "runs/thesis-128ep/${pe}" ] ||
      run_or_print tar czf "$OUT_DIR/thesis-${pe}.tgz" "runs/thesis-128ep/${pe}"
  done
  run_or_print tar czf "$OUT_DIR/study-runs.tgz" --exclude=ckpt --ignore-failed-read \
    runs/distance runs/count
  run_or_print tar czf "$OUT_DIR/logs.tgz" runs/logs
fi
