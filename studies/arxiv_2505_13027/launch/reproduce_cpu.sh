#!/usr/bin/env bash
# The converged study (plan.py) on this machine, then the report.
# Runs whose small files are already committed under results/runs/ are
# skipped, and an interrupted run resumes from its checkpoint under runs/, so
# the study continues across sessions: rerun it, commit results/runs/.
#   launch/reproduce_cpu.sh [--dry_run] [--seeds N]
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=launch/common.sh
. launch/common.sh

parse_dry_run_and_seeds 8 "$@"
# One run at a time: on 2 cores one seed of one run already fills the machine.
run_or_print python -m studies.arxiv_2505_13027.plan --seeds="$SEEDS" --workers=1
run_or_print python -m studies.arxiv_2505_13027.report
