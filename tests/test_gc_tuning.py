"""gc_tuning.tune_gc: every program (experiments.cli.run) runs with the
collector's raised thresholds; the function returns the ones it replaced."""
import gc
import os
import subprocess
import sys

from pe_spectral.runtime import gc_tuning

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_program_runs_with_the_raised_thresholds():
  """A fresh interpreter at CPython's defaults; main sees THRESHOLDS."""
  probe = ("import gc; gc.set_threshold(700, 10, 10); from experiments import cli; "
           "cli.run(lambda argv: print(gc.get_threshold()) or 0, compile_cache=False)")
  out = subprocess.run([sys.executable, "-c", probe], cwd=_REPO, capture_output=True,
                       text=True, check=True).stdout
  assert out.strip() == str(gc_tuning.THRESHOLDS)


def test_tune_gc_returns_what_it_replaced():
  before = gc.get_threshold()
  try:
    gc.set_threshold(700, 10, 10)
    assert gc_tuning.tune_gc() == (700, 10, 10)
    assert gc.get_threshold() == gc_tuning.THRESHOLDS
  finally:
    gc.set_threshold(*before)
