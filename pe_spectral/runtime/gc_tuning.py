"""Python's cyclic garbage collector, set for programs that trace JAX.

Tracing, lowering and compiling a model allocate hundreds of thousands of small
container objects (tracers, jaxpr equations, MLIR values, pytree nodes). At
CPython's default thresholds, ``(700, 10, 10)``, the collector runs a young pass
every 700 net allocations and a full pass every hundred young ones, and a full pass walks
every object the process holds -- JAX's, Flax's and the program's caches
included -- so a program that traces spends a tenth of its time collecting.

:func:`tune_gc` raises the thresholds to :data:`THRESHOLDS`: cycles are still
collected, less often; nothing computed changes. Measured on a 2-core Intel Xeon
(benchmarks/README.md, the suite's section): a smoke sweep's whole process
11.2 s -> 10.1 s of wall time (three runs each), and six in-process-heavy test
files 340 s -> 317 s (two alternating runs each). A program's entry point
(``experiments.cli.run``) and the test suite call it; a notebook may.
"""
from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "tune_gc"]

THRESHOLDS = (50_000, 50, 100)


def tune_gc() -> tuple:
  """Sets the collector's thresholds to :data:`THRESHOLDS`; returns the ones
  before the call (``gc.set_threshold(*old)`` restores them)."""
  old = gc.get_threshold()
  gc.set_threshold(*THRESHOLDS)
  return old
