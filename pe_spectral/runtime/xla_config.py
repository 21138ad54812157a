"""XLA:CPU settings measured to matter on this project's model family.

jaxlib 0.10's XLA:CPU fuses small attention matmuls into YNNPACK fusions that
run 2-3x slower than XLA's own dot emitter here (measured: one forward pass of
the ``cpu`` preset on 1000 sequences, 709 ms with them, 340 ms without; 8
vmapped seeds 7.2 s vs 2.6 s; see benchmarks/). :func:`tune_cpu` turns them
off by setting ``XLA_FLAGS`` -- it must run before JAX initialises its CPU
backend (i.e. before the first computation), so entry points call it at import.

Only applied for jaxlib versions where the flag is known to exist (an unknown
XLA flag aborts the process). Part of the CPU speed layer: ``PE_SPECTRAL_FAST=0``
(:mod:`pe_spectral.runtime.speed`) turns it off with the rest; ``PE_SPECTRAL_XLA_TUNING=0``
turns off only this flag.
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


def tune_cpu() -> bool:
  """Appends the CPU flag to ``XLA_FLAGS`` when safe. Returns True if applied."""
  from pe_spectral.runtime import speed
  if os.environ.get("PE_SPECTRAL_XLA_TUNING", "1") == "0" or not speed.enabled():
    return False
  if not (0, 10) <= _jaxlib_version() < (0, 12):
    return False
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_cpu_experimental_ynn_fusion_type" not in flags:
    os.environ["XLA_FLAGS"] = (flags + " " + _YNN_OFF).strip()
  return True


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
