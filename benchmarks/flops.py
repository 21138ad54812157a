"""Model FLOPs = matmul FLOPs, counted on the jaxpr (the MFU numerator).

``matmul_flops(fn, *args)`` traces ``fn`` and adds ``2 * prod(out) * prod(contracted)``
for every ``dot_general`` (forward and, for a gradient, the backward dots),
descending into nested jaxprs (``jit``, ``custom_jvp``/``vjp``, ``remat``; ``scan``
bodies times their length, the costliest ``cond`` branch). Elementwise work
(softmax, norms, dropout's random bits) is deliberately not counted: MFU here is
the usual "useful matmul FLOPs / time / matmul peak". XLA's ``cost_analysis``
instead counts every elementwise op, so a cheaper-to-run but op-heavier random
number generator would *raise* its FLOP count; it is reported alongside.
"""
from __future__ import annotations

import math

import jax
from jax.extend import core as jcore


def _eqn_flops(eqn) -> float:
  if eqn.primitive.name == "dot_general":
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    out = eqn.outvars[0].aval.shape
    return 2.0 * math.prod(out) * math.prod(lhs[d] for d in lhs_contract)
  subs = [_jaxpr_flops(j) for j in jcore.jaxprs_in_params(eqn.params)]
  if not subs:
    return 0.0
  if eqn.primitive.name == "cond":
    return max(subs)
  total = sum(subs)
  if eqn.primitive.name == "scan":
    total *= eqn.params["length"]
  return total


def _jaxpr_flops(jaxpr) -> float:
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
  return sum(_eqn_flops(e) for e in jaxpr.eqns)


def timed(fn):
  """``(seconds, result)`` of ``fn()``, the result waited for."""
  import time
  t = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - t, out


def matmul_peak(n=2048, reps=5) -> float:
  """GFLOP/s of a float32 ``n x n`` matmul on this machine, best of ``reps``:
  the MFU denominator."""
  a = jax.random.normal(jax.random.key(0), (n, n))
  f = jax.jit(lambda x: x @ x)
  jax.block_until_ready(f(a))
  return 2 * n ** 3 / min(timed(lambda: f(a))[0] for _ in range(reps)) / 1e9


def matmul_flops(fn, *args, **kwargs) -> float:
  """Matmul FLOPs of one call ``fn(*args, **kwargs)`` (see module docstring)."""
  return _jaxpr_flops(jax.make_jaxpr(fn)(*args, **kwargs))
