"""XLA:CPU settings measured to matter on this project's model family.

jaxlib 0.10's XLA:CPU fuses small attention matmuls into YNNPACK fusions that
run 2-3x slower than XLA's own dot emitter here (measured: one forward pass of
the ``cpu`` preset on 1000 sequences, 709 ms with them, 340 ms without; 8
vmapped seeds 7.2 s vs 2.6 s; see benchmarks/). :func:`tune_cpu` turns them
off by setting ``XLA_FLAGS``. XLA reads its flags once, when JAX starts its
backend (the first computation, not ``import jax``), so a program's entry point
calls it first thing in ``main`` (``experiments.cli.run`` does, as each
program's flags ask); a call after the backend has started
raises instead of being silently ignored.

Only applied for jaxlib versions where the flag is known to exist (an unknown
XLA flag aborts the process).
"""
from __future__ import annotations

import os

_YNN_OFF = "--xla_cpu_experimental_ynn_fusion_type="


def _jaxlib_version() -> tuple[int, ...]:
  try:
    from importlib.metadata import version
    return tuple(int(p) for p in version("jaxlib").split(".")[:2])
  except Exception:  # pragma: no cover - jaxlib missing or odd version string
    return (0, 0)


def tune_cpu(enabled: bool = True) -> bool:
  """Appends the CPU flag to ``XLA_FLAGS`` when ``enabled`` and safe (this
  jaxlib knows it; nobody set it already). Returns True if the flag is in
  ``XLA_FLAGS``. RuntimeError if it would change them after JAX's backend
  started (XLA would never read them)."""
  if not enabled or not (0, 10) <= _jaxlib_version() < (0, 12):
    return False
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_cpu_experimental_ynn_fusion_type" in flags:
    return True
  if _backend_started():
    raise RuntimeError("xla_config.tune_cpu() was called after JAX started its backend, "
                       "which has read XLA_FLAGS already: call it before the first "
                       "computation")
  os.environ["XLA_FLAGS"] = (flags + " " + _YNN_OFF).strip()
  return True


def _backend_started() -> bool:
  """Whether JAX has started a backend (and so read ``XLA_FLAGS``); False when
  JAX is not imported yet. JAX has no public query for it: if its private one
  moves, this says False and the flag is set as before."""
  import sys
  if "jax" not in sys.modules:
    return False
  try:
    from jax._src import xla_bridge
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):  # pragma: no cover - a JAX without the query
    return False


def isa_env(isa: str, base=None) -> dict:
  """A copy of ``base`` (default: ``os.environ``) whose ``XLA_FLAGS`` caps XLA's
  CPU code generation at ``isa`` (``--xla_cpu_max_isa``: SSE4_2, AVX, AVX2,
  AVX512, ...), replacing any earlier cap; ``"native"`` removes the cap. For a
  subprocess: XLA reads the flags once, when its CPU backend starts
  (benchmarks/isa.py emulates a CPU without AVX-512 with it)."""
  env = dict(os.environ if base is None else base)
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_cpu_max_isa=")]
  if isa != "native":
    flags.append(f"--xla_cpu_max_isa={isa}")
  env["XLA_FLAGS"] = " ".join(flags)
  return env
