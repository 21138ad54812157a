"""The launchers' entry point: ``absl.app.run`` with this project's exit codes.

Every usage error exits 2 -- a flag absl cannot parse, an unknown flag, stray
arguments (``app.UsageError``) -- like the launchers' own flag checks; a run
that fails exits 1 and an interrupted one 130 (the launcher's own return
value). ``--help`` (and absl's other help flags) exits 0.
"""
from __future__ import annotations

import sys
from typing import Callable

from absl import app

__all__ = ["run", "USAGE_EXIT", "HELP_FLAGS"]

USAGE_EXIT = 2
HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def run(main: Callable[[list], int]) -> None:
  """``app.run(main)``; absl's exit 1 for flag errors becomes 2, for help 0."""
  started = []

  def wrapped(argv):
    started.append(True)
    try:
      return main(argv)
    except app.UsageError as e:
      print(f"error: {e}", file=sys.stderr)
      return USAGE_EXIT

  try:
    app.run(wrapped)
  except SystemExit as e:
    if started or e.code != 1:
      raise
    asked_help = any(a.split("=", 1)[0] in HELP_FLAGS for a in sys.argv[1:])
    raise SystemExit(0 if asked_help else USAGE_EXIT) from None
