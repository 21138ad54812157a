#!/usr/bin/env bash
# The zoo on Ruoss et al.'s four single-output tasks, CPU-sized (study.md):
# for each task and PE, a 5-seed `cpu`-preset sweep (lengths 1..40), the length
# tool at 40, 80, 160 and 320 tokens, and -- for even_pairs' rope and nope --
# the test-split head ablation and the trained-logit decomposition (Q3). Each finished run's small files are copied to
# results/<task>/<label>/ so the report rebuilds from git; a run already there
# is skipped (FORCE=1 redoes it); an interrupted run resumes from runs/.
#   studies/ruoss_2023/launch/zoo_cpu.sh [--dry_run] [TASK ...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
source launch/common.sh
TASKS=()
for a in "$@"; do
  case "$a" in
    --dry_run) DRY_RUN=1 ;;
    -*) die "unknown argument '$a' (use --dry_run, then task names)" ;;
    *) TASKS+=("$a") ;;
  esac
done
[[ ${#TASKS[@]} -gt 0 ]] || TASKS=(even_pairs parity_check cycle_navigation modular_arithmetic)
# label -> sweep flags. randomized: RoPE at positions drawn from [0, 320), the
# longest test length (Ruoss et al.'s scheme, their N = 2048 scaled to our 320)
LABELS=(nope sinusoidal rope alibi randomized)
declare -A FLAGS=([nope]="--pe=nope" [sinusoidal]="--pe=sinusoidal" [rope]="--pe=rope"
                  [alibi]="--pe=alibi" [randomized]="--pe=rope --random_positions=320")
SEEDS=5
for task in "${TASKS[@]}"; do
  for label in "${LABELS[@]}"; do
    out="studies/ruoss_2023/results/${task}/${label}"
    if [[ -z "${FORCE:-}" && -f "$out/lengths.json" ]]; then
      echo "$out is committed: skipping" >&2
      continue
    fi
    wd="runs/ruoss_2023/${task}/${label}"
    # shellcheck disable=SC2086
    run_or_print python -m experiments.sweep --preset=cpu --task="$task" ${FLAGS[$label]} \
      --seeds="$SEEDS" --workdir="$wd"
    run_or_print python -m experiments.lengths --workdir="$wd" --factors=1,2,4,8
    if [[ "$task" == even_pairs && ( "$label" == rope || "$label" == nope ) ]]; then
      run_or_print python -m experiments.ablate --workdir="$wd"
      run_or_print python -m experiments.decompose --workdir="$wd"
    fi
    if [[ "$DRY_RUN" -eq 0 ]]; then
      mkdir -p "$out"
      cp "$wd"/config.json "$wd"/summary.json "$wd"/metrics.jsonl "$wd"/lengths.json "$out"/
      for f in ablation.json decompose.json; do
        [[ ! -f "$wd/$f" ]] || cp "$wd/$f" "$out"/
      done
    fi
  done
done
