#!/usr/bin/env bash
# Shared helpers for the launchers: --dry_run handling and command echo.
# Source this file; it defines run_or_print.

DRY_RUN=0

# Prints the command (shell-quoted); runs it unless --dry_run was given.
run_or_print() {
  local arg out=""
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./=,:@%+-]+$ ]]; then
      out+="$arg "
    else
      out+="$(printf '%q' "$arg") "
    fi
  done
  echo "${out% }"
  if [ "$DRY_RUN" -eq 0 ]; then
    "$@"
  fi
}

die() {
  echo "error: $*" >&2
  exit 2
}

is_uint() {
  case "$1" in
    ''|*[!0-9]*) return 1 ;;
    *) return 0 ;;
  esac
}

# require_positive_int VALUE NAME: exits with a message unless VALUE >= 1.
require_positive_int() {
  if ! is_uint "$1" || [ "$1" -lt 1 ]; then
    die "$2 must be a positive integer, got '$1'"
  fi
}

# parse_dry_run_and_seeds DEFAULT "$@": sets DRY_RUN and SEEDS from --dry_run / --seeds N.
parse_dry_run_and_seeds() {
  SEEDS="$1"
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry_run) DRY_RUN=1 ;;
      --seeds) shift; SEEDS="${1:-}" ;;
      *) die "unknown argument '$1' (use --dry_run, --seeds N)" ;;
    esac
    shift
  done
  require_positive_int "$SEEDS" "--seeds"
}
