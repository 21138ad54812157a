#!/usr/bin/env bash
# The study plan's runs that a 2-core CPU can afford, one after another, in the
# order in which they can decide a verdict (docs/study.md). Each is one
# `studies.arxiv_2505_13027.plan` entry, 8 seeds, at low priority (a `thesis-128ep/<pe>`
# entry is the coupling study's last rung instead: launch/thesis_cpu.sh
# --last_rung <pe>, committed the same way): skipped when its small
# files are committed under results/runs/, resumed when its checkpoint is under
# runs/, then ablated, its small files copied to results/runs/<task>/<name>/
# and git-committed (those paths only) as it finishes, so a session that ends
# mid-queue loses no finished run. Then rebuild the report:
# python -m studies.arxiv_2505_13027.report.
# A run that no verdict can use any more (every verdict-table row that waits for
# it is settled: a refutation, a label an unconverged run has fixed, or a
# `study` row its `long` row replaced as the judge) is
# skipped (studies.arxiv_2505_13027.plan --skip_settled), except the DESCRIBE ones at the
# queue's end, run for what they show once the runs that decide are done.
# Measured on a 2-core AMD EPYC: a `long` Task 1 run about 2 h, a clean
# `deposit` run about 2.4 h, a faithful one 2.4 h alone (about 4 h beside
# other work). A run still going when a session ends resumes only if the next
# session has this machine's runs/ (else it starts over): a run's evidence is
# committed as soon as its test-split ablation is written. The rest of the plan
# (Task 2 at `long`, faithful Task 2, the faithful `long` rivals) costs
# 2.4-10 h per run here and waits for launch/study_gpu.sh.
#   launch/study_cpu.sh [--dry_run] [NAME ...]      (default: the whole queue; NICE=10)
# NICE yields the CPU to other work only within one session: where Linux
# groups processes by session (sched_autogroup_enabled = 1), a queue started
# under setsid, or from another terminal or tmux, shares the CPU equally with
# the test suite whatever its nice (seen here: the suite took 25 min instead of
# 10). Start it from the session that runs the other work, or lower its whole
# session: echo 10 > /proc/<its pid>/autogroup.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=launch/common.sh
. launch/common.sh

if [ "${1:-}" = "--dry_run" ]; then DRY_RUN=1; shift; fi
# Runs that can still decide a verdict, skipped once none can (--skip_settled).
DECIDE=(
  distance/learned-long                  # alone it refuted (a) at long (committed)
  distance/rope-faithful-long            # with the next: (a2), faithful
  distance/partial_rope-k1-faithful-long
  distance/rope_sinusoidal-faithful-long # (a)'s faithful reference at long
  distance/rope_sinusoidal-faithful-deposit  # alone it can refute (c), faithful (< 2/3 seeds)
  distance/nope-faithful-deposit         # (c)'s faithful controls: skipped once (c) is
  distance/alibi-faithful-deposit        # refuted, since they cannot undo it
  distance/mla-faithful-deposit
  thesis-128ep/rope_additive             # (f): the rotary pair's last rung (not a plan
  thesis-128ep/rope                      # entry: launch/thesis_cpu.sh; rope only if needed)
)
# Run even when no verdict can change: what they show is the reason to run them.
DESCRIBE=(
  distance/alibi_multiplicative-deposit  # (g): where a deposit forms with 8 heads per
  distance/rope_additive-deposit         # layer; the label is fixed (alibi-deposit did
  distance/xpos-deposit                  # not converge, ninth amendment), the fractions
  distance/p_rope-deposit                # are still worth seeing
  distance/relative-deposit
  distance/kerple_log-deposit
  distance/alibi-long                    # the rest of (a) at long, clean: they fill in
  distance/relative-long                 # the table but cannot undo learned's refutation
  distance/nope-long
  distance/sinusoidal-long
  distance/rope_sinusoidal-long
  distance/mla-long
)
QUEUE=("${DECIDE[@]}" "${DESCRIBE[@]}")
NAMES=("$@")
if [[ ${#NAMES[@]} -eq 0 ]]; then NAMES=("${QUEUE[@]}"); fi
for name in "${NAMES[@]}"; do
  [[ " ${QUEUE[*]} " == *" $name "* ]] || die "'$name' is not in the CPU queue: ${QUEUE[*]}"
done
PY=${PYTHON:-python3}
# A run that fails (a seed's loss not finite, say) does not stop the queue: the
# runs after it still decide their own verdicts. The script exits 1 at the end,
# naming the failed runs (their logs: runs/logs/, the checkpoints stay).
failed=()
for name in "${NAMES[@]}"; do
  if [[ "$name" == thesis-128ep/* ]]; then
    cmd=(env GIT_COMMIT=1 PYTHON="$PY" nice -n "${NICE:-10}"
         studies/arxiv_2505_13027/launch/thesis_cpu.sh --last_rung "${name#*/}")
  else
    skip=(--skip_settled)
    if [[ " ${DESCRIBE[*]} " == *" $name "* ]]; then skip=(); fi
    cmd=(nice -n "${NICE:-10}" "$PY" -m studies.arxiv_2505_13027.plan --only="$name" --seeds=8
         --git_commit "${skip[@]}")
  fi
  if ! run_or_print "${cmd[@]}"; then
    echo "error: $name failed (its checkpoint stays under runs/); the queue goes on" >&2
    failed+=("$name")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "error: ${#failed[@]} run(s) failed: ${failed[*]}" >&2
  exit 1
fi
